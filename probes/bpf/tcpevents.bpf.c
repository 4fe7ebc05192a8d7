// SPDX-License-Identifier: GPL-2.0
/* tcpevents.bpf.c — TCP state changes, retransmissions, resets and tcp_probe samples, one
 * ring-buffer record each (tcpevents.h), for the sockets of one network namespace.
 *
 * BTF-typed tracepoints (tp_btf): the kernel hands over the struct sock itself, so every
 * field is read from it with CO-RE relocations and one object runs on every kernel with BTF
 * (5.10 ... ).  The struct sock's fields are plain loads, which the verifier checks against
 * the BTF (no helper call: the filter runs at every hit, in every namespace); tcp_sock's lie
 * beyond the struct sock the verifier knows the pointer as, and are read with BPF_CORE_READ()
 * (bpf_probe_read_kernel()), as are an IPv6 socket's addresses.  What differs between kernels
 * is decided in user space from the kernel's BTF and passed in as read-only constants, so the
 * verifier drops the branches that do not apply:
 *   cookie_helper   bpf_get_socket_cookie() is allowed here (5.12+); else skc_cookie is read,
 *                   0 until someone (sock_diag) asked for the cookie;
 *   rst_has_reason  tcp_send_reset has its third argument, enum sk_rst_reason (6.10+);
 *   retrans_has_err tcp_retransmit_skb has its third, the error (6.x; it then fires for a
 *                   retransmission that failed too, which TcpRetransSegs does not count).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "tcpevents.h"

#define AF_INET		2
#define AF_INET6	10
#define IPPROTO_TCP	6

const volatile __u32 netns_ino;
const volatile __u32 nports;
const volatile __u16 ports[TCPEV_MAX_PORTS];
const volatile bool cookie_helper;
const volatile bool rst_has_reason;
const volatile bool retrans_has_err;
/* The reader is woken once this many bytes wait in the ring (an eighth of it, set by
 * tcpevents), not at every record: each wake-up is an interrupt taken inside the program,
 * 6-15 us on a VM, the most of what a record cost (docs/bench.md).  Fewer wait for its 100 ms
 * poll timeout, so a line comes out at most about that late. */
const volatile __u64 wake_bytes;

__u64 lost;	/* records the ring buffer had no room for */

/* Every run of the five programs, before any filter: tcpevents puts it beside the kernel's perf
 * count of the same tracepoints' hits, to count the hits no program ran for (docs/tcpevents.md,
 * "Hits no program ran for").  One count per CPU, summed by tcpevents when it reads them: a
 * single count would be written from every CPU at every hit of the five tracepoints, in any
 * namespace, and its cache line would move between the CPUs each time (docs/bench.md, the
 * section on what "in BPF" measures). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} runs SEC(".maps");

/* One more run on this CPU.  Atomic still (on this CPU's own line, so no other CPU waits): a
 * program in an interrupt may run on this CPU between a plain load and store of the count. */
static __always_inline void count_run(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&runs, &zero);

	if (n != NULL)
		__sync_fetch_and_add(n, 1);
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* With -p: the sockets that matched a port once, by address.  A socket's local port is
 * released before it reaches CLOSE (tcp_set_state() calls inet_put_port() before the
 * tracepoint), so its last events would no longer match. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} matched SEC(".maps");

static __always_inline bool port_wanted(__u16 sport, __u16 dport)
{
	__u32 i;

	if (nports == 0)
		return true;
	for (i = 0; i < TCPEV_MAX_PORTS && i < nports; i++)
		if (ports[i] == sport || ports[i] == dport)
			return true;
	return false;
}

/* port_wanted() for a socket, or for one that matched before its port was released. */
static __always_inline bool sock_wanted(const struct sock *sk, __u16 sport, __u16 dport)
{
	__u64 key = (__u64)sk;
	__u8 one = 1;

	if (nports == 0)
		return true;
	if (port_wanted(sport, dport)) {
		bpf_map_update_elem(&matched, &key, &one, BPF_ANY);
		return true;
	}
	return bpf_map_lookup_elem(&matched, &key) != NULL;
}

/* A zeroed record of this type, its time and namespace filled in, or NULL: no room in the
 * ring buffer (counted in lost).  The one place a record is reserved. */
static __always_inline struct tcpev_rec *ev_reserve(__u8 type)
{
	struct tcpev_rec *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (e == NULL) {
		__sync_fetch_and_add(&lost, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->t_ns = bpf_ktime_get_ns();
	e->type = type;
	e->netns = netns_ino;
	return e;
}

/* Hand e to the reader, waking it only once wake_bytes wait in the ring, e's own reservation
 * counted (BPF_RB_FORCE_WAKEUP; bpf_ringbuf_query() since 5.8). */
static __always_inline void ev_submit(struct tcpev_rec *e)
{
	bool wake = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wake_bytes;

	bpf_ringbuf_submit(e, wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* A record for sk, its addresses filled in, or NULL: another namespace or port, not TCP, or
 * no room (counted in lost). */
static __always_inline struct tcpev_rec *sock_event(const struct sock *sk, __u8 type)
{
	struct tcpev_rec *e;
	__u16 family, sport, dport;

	if (sk->__sk_common.skc_net.net->ns.inum != netns_ino)
		return NULL;
	if (BPF_CORE_READ_BITFIELD(sk, sk_protocol) != IPPROTO_TCP)	/* 5.5: a bitfield */
		return NULL;
	family = sk->__sk_common.skc_family;
	sport = sk->__sk_common.skc_num;
	dport = bpf_ntohs(sk->__sk_common.skc_dport);
	if (!sock_wanted(sk, sport, dport))
		return NULL;
	e = ev_reserve(type);
	if (e == NULL)
		return NULL;
	e->family = family;
	e->sport = sport;
	e->dport = dport;
	e->state = sk->__sk_common.skc_state;
	e->reason = TCPEV_NO_REASON;
	if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&e->daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		*(__u32 *)e->saddr = sk->__sk_common.skc_rcv_saddr;
		*(__u32 *)e->daddr = sk->__sk_common.skc_daddr;
	}
	if (cookie_helper)
		e->cookie = bpf_get_socket_cookie((void *)sk);
	else
		e->cookie = sk->__sk_common.skc_cookie.counter;
	e->flags = TCPEV_F_COOKIE;
	return e;
}

/* A socket that ends in TIME-WAIT never changes to it: tcp_time_wait() puts a smaller
 * inet_timewait_sock in its place (same addresses; inet_twsk_alloc() copies the cookie), then
 * closes the socket: FIN-WAIT-2 or CLOSING -> CLOSE, with no error (a RST received or a timeout
 * sets sk_err first).  The timewait socket's state, what sock_diag reports: TIME-WAIT if the
 * peer's FIN came (tcp_fin() set SOCK_DONE), else FIN-WAIT-2 (a socket closed by its program,
 * replaced as soon as its FIN is acknowledged; its later move to TIME-WAIT has no tracepoint).
 * Taken for one too: a close from FIN-WAIT-2 that sends a RST after the state change
 * (SO_LINGER 0, TCP_LINGER2 < 0: an rst-sent line follows), a timewait socket that could not
 * be allocated (TCPTimeWaitOverflow). */
static __always_inline void timewait_event(const struct sock *sk, int oldstate)
{
	struct tcpev_rec *e;
	unsigned long done = 1UL << bpf_core_enum_value(enum sock_flags, SOCK_DONE);

	if (oldstate != TCP_FIN_WAIT2 && oldstate != TCP_CLOSING)
		return;
	if (sk->sk_err != 0)
		return;
	e = sock_event(sk, TCPEV_TIMEWAIT);
	if (e == NULL)
		return;
	e->oldstate = oldstate;
	e->state = sk->__sk_common.skc_flags & done ? TCP_TIME_WAIT : TCP_FIN_WAIT2;
	ev_submit(e);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state, const struct sock *sk, int oldstate, int newstate)
{
	struct tcpev_rec *e;

	count_run();
	if (newstate == TCP_CLOSE)
		timewait_event(sk, oldstate);
	e = sock_event(sk, TCPEV_STATE);
	if (e == NULL)
		return 0;
	e->oldstate = oldstate;
	e->state = newstate;
	ev_submit(e);
	if (newstate == TCP_CLOSE && nports != 0) {
		__u64 key = (__u64)sk;

		bpf_map_delete_elem(&matched, &key);
	}
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(on_retrans, const struct sock *sk)
{
	struct tcpev_rec *e;

	count_run();
	e = sock_event(sk, TCPEV_RETRANS);
	if (e == NULL)
		return 0;
	if (retrans_has_err) {
		e->reason = (__u32)ctx[2];
		e->flags |= TCPEV_F_ARG;
	}
	ev_submit(e);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(on_rst_recv, struct sock *sk)
{
	struct tcpev_rec *e;

	count_run();
	e = sock_event(sk, TCPEV_RST_RECV);
	if (e != NULL)
		ev_submit(e);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(on_probe, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct tcpev_rec *e;

	count_run();
	e = sock_event(sk, TCPEV_PROBE);
	if (e == NULL)
		return 0;
	e->cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e->ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	e->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;	/* srtt_us holds 8 * the smoothed RTT */
	e->snd_wnd = BPF_CORE_READ(tp, snd_wnd);
	ev_submit(e);
	return 0;
}

/* A reset sent for a segment no socket owns (6.8+ trace it with sk NULL): the namespace from
 * the device it came in on, the addresses from its headers, swapped (we are its receiver). */
static __always_inline struct tcpev_rec *skb_event(const struct sk_buff *skb)
{
	struct tcpev_rec *e;
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header), th = BPF_CORE_READ(skb, transport_header);
	struct tcphdr tcp = {};
	__u8 ver = 0;

	if (BPF_CORE_READ(skb, dev, nd_net.net, ns.inum) != netns_ino)
		return NULL;
	if (bpf_probe_read_kernel(&ver, 1, head + nh) < 0 ||
	    bpf_probe_read_kernel(&tcp, sizeof(tcp), head + th) < 0)
		return NULL;
	if (!port_wanted(bpf_ntohs(tcp.dest), bpf_ntohs(tcp.source)))
		return NULL;
	e = ev_reserve(TCPEV_RST_SENT);
	if (e == NULL)
		return NULL;
	e->sport = bpf_ntohs(tcp.dest);
	e->dport = bpf_ntohs(tcp.source);
	e->state = TCPEV_NO_STATE;
	if (ver >> 4 == 6) {
		e->family = AF_INET6;
		bpf_probe_read_kernel(e->saddr, 16, head + nh + 24);	/* ipv6hdr daddr */
		bpf_probe_read_kernel(e->daddr, 16, head + nh + 8);	/* ipv6hdr saddr */
	} else {
		e->family = AF_INET;
		bpf_probe_read_kernel(e->saddr, 4, head + nh + 16);	/* iphdr daddr */
		bpf_probe_read_kernel(e->daddr, 4, head + nh + 12);	/* iphdr saddr */
	}
	return e;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(on_rst_sent, const struct sock *sk, const struct sk_buff *skb)
{
	struct tcpev_rec *e;

	count_run();
	if (sk != NULL)
		e = sock_event(sk, TCPEV_RST_SENT);
	else if (skb != NULL)
		e = skb_event(skb);
	else
		return 0;
	if (e == NULL)
		return 0;
	if (rst_has_reason) {
		e->reason = (__u32)ctx[2];
		e->flags |= TCPEV_F_ARG;
	}
	ev_submit(e);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
