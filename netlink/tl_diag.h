/* tl_diag.h — TCP sock_diag over libmnl, decoded into plain structs.
 *
 * One SOCK_DIAG_BY_FAMILY dump per address family, filtered in the kernel by a state mask and
 * by source/destination port (inet_diag bytecode).  Raw replies can be recorded to a file and
 * decoded again from it, so decoders are tested on exact bytes without root.
 *
 * Error rule for every function: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef TL_DIAG_H
#define TL_DIAG_H

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

/* TCP states as the kernel numbers them (include/net/tcp_states.h). */
enum tl_tcp_state {
	TL_ESTABLISHED = 1, TL_SYN_SENT, TL_SYN_RECV, TL_FIN_WAIT1, TL_FIN_WAIT2, TL_TIME_WAIT,
	TL_CLOSE, TL_CLOSE_WAIT, TL_LAST_ACK, TL_LISTEN, TL_CLOSING, TL_NEW_SYN_RECV,
	TL_STATE_MAX
};
/* Every state up to TCP_NEW_SYN_RECV (bits 1..12, 0x1ffe), as ss(8) means "all" without -B.  Not
 * bit 13, TCP_BOUND_INACTIVE (6.5+): with it the dump walks every bucket of the machine-wide
 * bind hash table (inet_diag_dump_icsk(), bhash2), 65536 here, each request: a 1 ms sockwatch
 * in an empty namespace cost 26 % of a core that way, 2 % without. */
#define TL_STATES_ALL (((1u << TL_STATE_MAX) - 1) & ~1u)
#define TL_STATE_BIT(s) (1u << (s))

struct tl_diag_filter {
	int family;		/* AF_INET, AF_INET6 or AF_UNSPEC for both */
	uint32_t states;	/* mask of TL_STATE_BIT(); 0 means all */
	uint16_t sport;		/* 0: any */
	uint16_t dport;		/* 0: any */
};

/* The tcp_info fields tcplab reads (sockwatch prints them; add a field here when a program
 * needs one).  `has_info` is 0 when the kernel sent no INET_DIAG_INFO (TIME-WAIT and request
 * sockets carry none); `len` is the length of the kernel's struct, and a field that lies beyond
 * it (an older kernel's shorter struct) reads as 0.  Where the field came in: the comment. */
struct tl_tcpinfo {
	uint16_t len;		/* bytes of struct tcp_info the kernel sent */
	uint8_t probes;		/* tcpi_probes: zero-window or keepalive probes unanswered */
	uint8_t backoff;	/* tcpi_backoff */
	uint32_t rto_us, ato_us;/* tcpi_rto, tcpi_ato (the delayed-ACK timeout) */
	uint32_t snd_mss, rcv_mss;
	uint32_t unacked, sacked;	/* segments */
	uint32_t last_data_sent_ms, last_data_recv_ms;	/* ms since */
	uint32_t total_retrans;
	uint64_t rwnd_limited_us, sndbuf_limited_us;	/* 4.10 */
	uint32_t notsent;	/* tcpi_notsent_bytes, 4.6 */
	uint32_t snd_wnd;	/* the peer's window, scaled: 5.4 */
	uint32_t rcv_wnd;	/* the window we advertise, scaled: 6.2 */
	uint32_t total_rto;	/* 6.7 and 6.6.y (by tcp_info length), else 0 */
};

/* INET_DIAG_SKMEMINFO, as ss -m prints it: skmem:(r,rb,t,tb,f,w,o,bl,d).  Bytes, except drops. */
struct tl_skmem {
	uint32_t rmem, rcvbuf, wmem, sndbuf, fwd, wqueued, optmem, backlog, drops;
};

/* INET_DIAG_ULP_INFO: the upper-layer protocol on a TCP socket (TCP_ULP), which the kernel sends
 * only to a requester with CAP_NET_ADMIN (tcp_diag_get_aux; from 6.15 the name to anyone, the
 * ULP's own nest still only with CAP_NET_ADMIN).  For "tls" the nested
 * INET_ULP_INFO_TLS (net/tls/tls_main.c tls_get_info): the numbers are the kernel's own
 * (TLS_1_3_VERSION 0x0304, TLS_CIPHER_AES_GCM_256 52, TLS_CONF_SW 2, ...); 0 where the kernel
 * sent no such attribute (no version or cipher before TLS_TX or TLS_RX set the keys). */
struct tl_ulp {
	char name[16];		/* INET_ULP_INFO_NAME ("tls", "mptcp"); TCP_ULP_NAME_MAX is 16 */
	int has_tls;		/* INET_ULP_INFO_TLS was there */
	uint16_t tls_version, tls_cipher;	/* TLS_INFO_VERSION, TLS_INFO_CIPHER */
	uint16_t tls_txconf, tls_rxconf;	/* TLS_INFO_TXCONF, TLS_INFO_RXCONF: TLS_CONF_* */
	uint8_t tls_zc_ro_tx;	/* flag TLS_INFO_ZC_RO_TX (not in 5.10; only with TLS_CONF_HW TX) */
	uint8_t tls_rx_no_pad;	/* flag TLS_INFO_RX_NO_PAD (not in 5.10) */
};

struct tl_sock {
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint8_t state;		/* enum tl_tcp_state */
	uint8_t timer;		/* idiag_timer: 0 off, 1 on (retransmit, loss probe, RACK
				   reorder), 2 keepalive, 3 timewait, 4 persist (zero-window probe) */
	uint8_t retrans;	/* idiag_retrans */
	struct in6_addr src, dst; /* IPv4 in the first 4 bytes of s6_addr */
	uint16_t sport, dport;	/* host order */
	uint32_t expires_ms;	/* idiag_expires, raw */
	uint32_t rqueue, wqueue;/* idiag_rqueue / idiag_wqueue (LISTEN: accept queue / backlog) */
	uint32_t inode;
	uint64_t cookie;
	int has_info;
	struct tl_tcpinfo info;
	int has_skmem;
	struct tl_skmem skmem;
	int has_ulp;		/* INET_DIAG_ULP_INFO was there */
	struct tl_ulp ulp;
};

/* Called once per decoded socket; return 0 to go on, -1 (errno set) to stop the dump. */
typedef int (*tl_sock_cb)(const struct tl_sock *s, void *data);

struct tl_diag;		/* opaque: a NETLINK_SOCK_DIAG socket, its buffer, and a record file */

/* Open a sock_diag socket.  NULL with errno on failure. */
struct tl_diag *tl_diag_open(void);
/* Close it (NULL is fine). */
void tl_diag_close(struct tl_diag *d);
/* From now on append every raw reply to `f` (NULL stops recording).  The caller owns `f`.
 * After the replies of each tl_diag_query() an NLMSG_NOOP message marks the end of the sample,
 * so a replay can tell samples apart (one sample holds one dump per family). */
void tl_diag_record(struct tl_diag *d, FILE *f);
/* One dump per requested family; `cb` sees every socket that matches.  0 or -1.  When writing
 * to the record file failed, errno is the write's (ENOSPC, EFBIG...) and ferror(f) is set: the
 * caller tells a full disk from a failed query by that. */
int tl_diag_query(struct tl_diag *d, const struct tl_diag_filter *flt, tl_sock_cb cb, void *data);
/* Decode a buffer of recorded replies: `cb` for each socket, `sample_cb` (may be NULL) at the
 * end of each sample.  Returns the number of samples, or -1: EBADMSG for garbled or truncated
 * bytes (a dump without its NLMSG_DONE), or the errno of an NLMSG_ERROR the kernel sent. */
int tl_diag_replay(const void *buf, size_t len, tl_sock_cb cb, void *data,
		   int (*sample_cb)(void *data), void *sample_data);

/* Names for printing.  Never NULL. */
const char *tl_state_name(int state);	/* "SYN-SENT", as ss(8) spells states */
/* ss(8)'s names for idiag_timer: "off", "on", "keepalive", "timewait", "persist", "unknown". */
const char *tl_timer_name(int timer);
/* Parse a state name (ss spelling, case-insensitive, also "all") into a mask.  0 or -1. */
int tl_state_parse(const char *name, uint32_t *mask);
/* TLS_CONF_* as the kernel names them: "base", "sw", "hw", "hw_record"; "none" for 0 (not sent),
 * "unknown" for a newer one. */
const char *tl_tls_conf_name(unsigned conf);
/* TLS_CIPHER_* as "aes-gcm-128", "chacha20-poly1305"...; "none" for 0, "unknown" otherwise. */
const char *tl_tls_cipher_name(unsigned cipher);
/* TLS_INFO_VERSION 0x0303 as "1.2", 0x0304 as "1.3", 0 as "none", else "0x%04x", into buf. */
char *tl_tls_version_name(unsigned version, char *buf, size_t len);
/* "127.0.0.1:21010" or "[::1]:21010" into buf.  Returns buf. */
char *tl_sock_addr(const struct tl_sock *s, int peer, char *buf, size_t len);

#endif
