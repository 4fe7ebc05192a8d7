// SPDX-License-Identifier: GPL-2.0
/* evfloor.bpf.c — the least a tcpevents event can cost in the kernel, for `make bench`
 * (docs/bench.md): the same five BTF-typed tracepoints as probes/bpf/tcpevents.bpf.c, the same
 * namespace and protocol filter (the socket's netns inode, then sk_protocol), and for each event
 * that passes one record of tcpevents' size (struct tcpev_rec, 96 bytes) reserved in a ring
 * buffer of the same default size, its type written, submitted.  Nothing else: no memset, no
 * time, no addresses, no cookie, no port filter (tcpevents without -p does none either), no
 * second record for a socket a timewait socket replaces. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "tcpevents.h"

#define IPPROTO_TCP	6

const volatile __u32 netns_ino;

__u64 lost;	/* records the ring buffer had no room for */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void submit(__u8 type)
{
	struct tcpev_rec *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (e == NULL) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	e->type = type;
	bpf_ringbuf_submit(e, 0);
}

/* tcpevents' sock_event() filter, read as it reads it (plain loads from the BTF-typed socket),
 * then submit(). */
static __always_inline void sock_submit(const struct sock *sk, __u8 type)
{
	if (sk->__sk_common.skc_net.net->ns.inum != netns_ino)
		return;
	if (BPF_CORE_READ_BITFIELD(sk, sk_protocol) != IPPROTO_TCP)
		return;
	submit(type);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(fl_state, const struct sock *sk)
{
	sock_submit(sk, TCPEV_STATE);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(fl_retrans, const struct sock *sk)
{
	sock_submit(sk, TCPEV_RETRANS);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(fl_rst_recv, struct sock *sk)
{
	sock_submit(sk, TCPEV_RST_RECV);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(fl_probe, struct sock *sk)
{
	sock_submit(sk, TCPEV_PROBE);
	return 0;
}

/* A reset for a segment no socket owns (sk NULL, 6.8+): the namespace from its device, as
 * tcpevents' skb_event() takes it (which then also reads the headers and filters ports). */
SEC("tp_btf/tcp_send_reset")
int BPF_PROG(fl_rst_sent, const struct sock *sk, const struct sk_buff *skb)
{
	if (sk != NULL)
		sock_submit(sk, TCPEV_RST_SENT);
	else if (skb != NULL && BPF_CORE_READ(skb, dev, nd_net.net, ns.inum) == netns_ino)
		submit(TCPEV_RST_SENT);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
