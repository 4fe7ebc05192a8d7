/* fx_sock.h — socket, address and signal helpers shared by the tcplab fixtures.
 *
 * Rules as in tl_util.h: helpers never print and never exit; they return -1 and set errno.
 */
#ifndef FX_SOCK_H
#define FX_SOCK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Room for "[IPv6 address]:port" plus the terminating NUL. */
#define FX_ADDRSTRLEN 64

/* A numeric IPv4 or IPv6 socket address and its length. */
struct fx_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* Fill *out from a numeric IPv4 or IPv6 address and a port.
 * Returns 0, or -1 with errno EINVAL when text is not an address. */
int fx_addr_parse(const char *text, uint16_t port, struct fx_addr *out);

/* The address family of a (AF_INET or AF_INET6). */
int fx_addr_family(const struct fx_addr *a);

/* Write the address of a without the port ("127.0.0.1", "::1") into buf.
 * Returns 0, or -1 with errno ENOSPC/EAFNOSUPPORT. */
int fx_addr_ip(const struct fx_addr *a, char *buf, size_t size);

/* Write "IP:PORT" ("[IPv6]:PORT" for IPv6) for sa into buf.  Returns 0, or -1 and errno. */
int fx_sockaddr_text(const struct sockaddr *sa, char *buf, size_t size);

/* Replace a wildcard address (0.0.0.0, ::) by the loopback address of its family, so that it
 * can be connected to.  Any other address is left as it is.  Never fails. */
void fx_addr_any_to_loopback(struct fx_addr *a);

/* The local address of a socket as "IP:PORT" in buf.  Returns 0, or -1 and errno. */
int fx_local_text(int fd, char *buf, size_t size);

/* A new TCP socket of the family of a, close-on-exec, plus extra_flags (SOCK_NONBLOCK).
 * Returns the fd, or -1 and errno. */
int fx_tcp_socket(const struct fx_addr *a, int extra_flags);

/* Close *fd if it is open and set it to -1.  Returns 0, or -1 and errno from close(). */
int fx_close(int *fd);

/* Read TCP_SYNCNT: the socket's own value, or the netns tcp_syn_retries when unset.
 * Returns 0, or -1 and errno. */
int fx_get_syncnt(int fd, int *out);

/* Make stdout line-buffered, so every line reaches a pipe as soon as it is printed.
 * Returns 0, or -1. */
int fx_stdout_lines(void);

/* Catch SIGINT and SIGTERM (without SA_RESTART, so blocking calls return EINTR) and block
 * them; *waitmask receives the mask to wait with (ppoll) or to run blocking calls under.
 * Returns 0, or -1 and errno. */
int fx_signals_init(sigset_t *waitmask);

/* Set the signal mask to waitmask (SIGINT/SIGTERM deliverable) or back to blocking them.
 * Returns 0, or -1 and errno. */
int fx_signals_unblock(const sigset_t *waitmask);
int fx_signals_block(void);

/* Non-zero once SIGINT or SIGTERM has arrived. */
int fx_stop_requested(void);

/* Wait until SIGINT/SIGTERM (returns 1) or until timeout_ms have passed (returns 0);
 * timeout_ms < 0 waits for the signal only.  Returns -1 and errno on failure. */
int fx_wait_stop(const sigset_t *waitmask, long long timeout_ms);

#endif
