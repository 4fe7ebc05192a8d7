/* tcpevents.h — the event record tcpevents.bpf.c writes to its ring buffer and tcpevents.c
 * prints, records (-r) and replays (-R): one fixed layout, 96 bytes, host byte order.
 *
 * A record file is a 16-byte header (TCPEV_MAGIC, then the version and the record size as
 * 32-bit numbers) and then the records as they came from the ring buffer, with one
 * TCPEV_END record last (its lost field: the events the ring buffer had no room for; its reason,
 * with TCPEV_F_ARG: the events the kernel did not run a program for, recursion misses; its
 * unseen, with TCPEV_F_UNSEEN: the tracepoint hits the kernel ran no program for and counted
 * nowhere, as its perf counters of the tracepoints show them).
 * Change the layout only with a new TCPEV_VERSION.  A flag a reader does not know leaves its
 * field unread: a file with TCPEV_F_UNSEEN is still version 1, and one without reads as before.
 */
#ifndef TCPEVENTS_H
#define TCPEVENTS_H

#define TCPEV_MAGIC	"TCPEVREC"
#define TCPEV_VERSION	1
#define TCPEV_NO_REASON	0xffffffffu	/* reason without TCPEV_F_ARG */
#define TCPEV_NO_STATE	(-1)		/* rst-sent with no socket (a segment nobody owns) */
#define TCPEV_MAX_PORTS	16

enum tcpev_type {
	TCPEV_STATE = 1,	/* sock:inet_sock_set_state: oldstate -> newstate */
	TCPEV_RETRANS = 2,	/* tcp:tcp_retransmit_skb */
	TCPEV_RST_SENT = 3,	/* tcp:tcp_send_reset */
	TCPEV_RST_RECV = 4,	/* tcp:tcp_receive_reset */
	TCPEV_PROBE = 5,	/* tcp:tcp_probe */
	TCPEV_TIMEWAIT = 6,	/* a timewait socket took this one's place (before its -> CLOSE) */
	TCPEV_END = 255,	/* written by tcpevents -r after the last event, never by the kernel */
};

#define TCPEV_F_COOKIE	1	/* cookie is the socket's (else there was no socket) */
#define TCPEV_F_ARG	2	/* reason holds the tracepoint's argument (else it has none) */
#define TCPEV_F_UNSEEN	4	/* TCPEV_END: unseen holds a count (else it was not counted) */

struct tcpev_rec {
	__u64 t_ns;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	union {
		__u64 cookie;	/* the socket's cookie, as sock_diag reports it */
		__u64 unseen;	/* TCPEV_END with TCPEV_F_UNSEEN: hits no program ran for */
	};
	__u8 saddr[16];		/* IPv4: the first 4 bytes */
	__u8 daddr[16];
	__u32 netns;		/* the inode of the socket's network namespace */
	__u16 sport, dport;	/* host byte order */
	__u16 family;		/* AF_INET or AF_INET6 */
	__u8 type;		/* enum tcpev_type */
	__u8 flags;		/* TCPEV_F_* */
	__s32 oldstate;		/* TCPEV_STATE, TCPEV_TIMEWAIT: the state before */
	__s32 state;		/* the state after (TCPEV_STATE; TCPEV_TIMEWAIT: the timewait
				 * socket's substate) or at the event */
	__u32 cwnd, ssthresh, srtt_us, snd_wnd;	/* TCPEV_PROBE */
	__u32 reason;		/* with TCPEV_F_ARG: TCPEV_RST_SENT's enum sk_rst_reason,
				 * TCPEV_RETRANS's error as an int (0: sent), TCPEV_END's
				 * events missed (the programs' recursion misses; without
				 * the flag the kernel did not count them) */
	__u64 lost;		/* TCPEV_END: events lost, the ring buffer full */
};

#endif
