/* fx_sock.c — socket, address and signal helpers shared by the tcplab fixtures. */
#include "fx_sock.h"
#include "tl_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Set by the SIGINT/SIGTERM handler; the one piece of state a handler may touch. */
static volatile sig_atomic_t stop_flag;

int fx_addr_parse(const char *text, uint16_t port, struct fx_addr *out)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->ss;

	memset(out, 0, sizeof(*out));
	if (text != NULL && inet_pton(AF_INET, text, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		out->len = sizeof(*sin);
		return 0;
	}
	memset(out, 0, sizeof(*out));
	if (text != NULL && inet_pton(AF_INET6, text, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		out->len = sizeof(*sin6);
		return 0;
	}
	errno = EINVAL;
	return -1;
}

int fx_addr_family(const struct fx_addr *a)
{
	return a->ss.ss_family;
}

int fx_addr_ip(const struct fx_addr *a, char *buf, size_t size)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->ss;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&a->ss;
	const void *src;

	if (a->ss.ss_family == AF_INET)
		src = &sin->sin_addr;
	else if (a->ss.ss_family == AF_INET6)
		src = &sin6->sin6_addr;
	else {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (inet_ntop(a->ss.ss_family, src, buf, (socklen_t)size) == NULL)
		return -1;
	return 0;
}

int fx_sockaddr_text(const struct sockaddr *sa, char *buf, size_t size)
{
	struct fx_addr a;
	char ip[INET6_ADDRSTRLEN];
	uint16_t port;
	int n;

	memset(&a, 0, sizeof(a));
	if (sa->sa_family == AF_INET) {
		memcpy(&a.ss, sa, sizeof(struct sockaddr_in));
		port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(&a.ss, sa, sizeof(struct sockaddr_in6));
		port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	} else {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (fx_addr_ip(&a, ip, sizeof(ip)) < 0)
		return -1;
	n = snprintf(buf, size, sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
	if (n < 0 || (size_t)n >= size) {
		errno = ENOSPC;
		return -1;
	}
	return 0;
}

void fx_addr_any_to_loopback(struct fx_addr *a)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a->ss;

	if (a->ss.ss_family == AF_INET && sin->sin_addr.s_addr == htonl(INADDR_ANY))
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else if (a->ss.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr))
		sin6->sin6_addr = in6addr_loopback;
}

int fx_local_text(int fd, char *buf, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	return fx_sockaddr_text((const struct sockaddr *)&ss, buf, size);
}

int fx_tcp_socket(const struct fx_addr *a, int extra_flags)
{
	return socket(a->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | extra_flags, IPPROTO_TCP);
}

int fx_close(int *fd)
{
	int r;

	if (*fd < 0)
		return 0;
	r = close(*fd);
	*fd = -1;
	return r;
}

int fx_get_syncnt(int fd, int *out)
{
	socklen_t len = sizeof(*out);

	return getsockopt(fd, IPPROTO_TCP, TCP_SYNCNT, out, &len);
}

int fx_stdout_lines(void)
{
	return setvbuf(stdout, NULL, _IOLBF, 0) == 0 ? 0 : -1;
}

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int stop_signals(sigset_t *set)
{
	if (sigemptyset(set) < 0 || sigaddset(set, SIGINT) < 0 || sigaddset(set, SIGTERM) < 0)
		return -1;
	return 0;
}

int fx_signals_init(sigset_t *waitmask)
{
	struct sigaction sa;
	sigset_t stops;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	/* No SA_RESTART: a blocking connect() must return EINTR so the program can stop. */
	if (sigemptyset(&sa.sa_mask) < 0 || stop_signals(&stops) < 0)
		return -1;
	if (sigprocmask(SIG_BLOCK, &stops, waitmask) < 0)
		return -1;
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return -1;
	if (sigdelset(waitmask, SIGINT) < 0 || sigdelset(waitmask, SIGTERM) < 0)
		return -1;
	return 0;
}

int fx_signals_unblock(const sigset_t *waitmask)
{
	return sigprocmask(SIG_SETMASK, waitmask, NULL);
}

int fx_signals_block(void)
{
	sigset_t stops;

	if (stop_signals(&stops) < 0)
		return -1;
	return sigprocmask(SIG_BLOCK, &stops, NULL);
}

int fx_stop_requested(void)
{
	return stop_flag != 0;
}

static struct timespec ns_to_timespec(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	return ts;
}

int fx_wait_stop(const sigset_t *waitmask, long long timeout_ms)
{
	int64_t deadline = 0, now;
	struct timespec ts;
	int n;

	if (timeout_ms >= 0) {
		if ((now = tl_now_ns()) < 0)
			return -1;
		deadline = now + (int64_t)timeout_ms * 1000000;
	}
	while (!stop_flag) {
		if (timeout_ms >= 0) {
			if ((now = tl_now_ns()) < 0)
				return -1;
			if (now >= deadline)
				return 0;
			ts = ns_to_timespec(deadline - now);
		}
		/* ppoll swaps in waitmask atomically: a signal sent before we sleep is not lost. */
		n = ppoll(NULL, 0, timeout_ms >= 0 ? &ts : NULL, waitmask);
		if (n < 0 && errno != EINTR)
			return -1;
	}
	return 1;
}
