/* tl_decode.c — inet_diag_msg + attributes → struct tl_sock, for live dumps and replays. */
#include "tl_diag_int.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <stddef.h>
#include <string.h>

/* struct tcp_info as the newest kernel we read sends it: the installed UAPI header may be older
 * (Debian 12's ends at tcpi_snd_wnd), so the later fields are spelt out here. */
struct tl_tcp_info_wire {
	struct tcp_info base;
	uint32_t rcv_wnd;		/* 6.2 */
	uint32_t rehash;		/* 6.2 */
	uint16_t total_rto;		/* 6.7, and 6.6.y backports */
	uint16_t total_rto_recoveries;	/* 6.7 */
	uint32_t total_rto_time;	/* 6.7 */
};
_Static_assert(offsetof(struct tcp_info, tcpi_snd_wnd) == 228, "tcp_info layout");
_Static_assert(offsetof(struct tl_tcp_info_wire, total_rto) == 240, "tcp_info 6.7 layout");
_Static_assert(SK_MEMINFO_DROPS == 8, "sk_meminfo layout");

static int attr_cb(const struct nlattr *attr, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, INET_DIAG_MAX) < 0)
		return MNL_CB_OK;	/* newer kernel: skip, don't fail */
	if ((type == INET_DIAG_INFO || type == INET_DIAG_SKMEMINFO) &&
	    mnl_attr_validate(attr, MNL_TYPE_BINARY) < 0)
		return MNL_CB_ERROR;
	if (type == INET_DIAG_ULP_INFO && mnl_attr_validate(attr, MNL_TYPE_NESTED) < 0)
		return MNL_CB_ERROR;
	tb[type] = attr;
	return MNL_CB_OK;
}

/* Copy a kernel tcp_info of any length into a zeroed local of ours: a shorter (older) struct
 * leaves the later fields 0, a longer (newer) one is cut. */
static void decode_info(const struct nlattr *attr, struct tl_sock *s)
{
	struct tl_tcp_info_wire w;
	size_t len = mnl_attr_get_payload_len(attr);

	memset(&w, 0, sizeof(w));
	memcpy(&w, mnl_attr_get_payload(attr), len < sizeof(w) ? len : sizeof(w));
	s->has_info = 1;
	s->info = (struct tl_tcpinfo){
		.len = len > UINT16_MAX ? UINT16_MAX : (uint16_t)len,
		.probes = w.base.tcpi_probes, .backoff = w.base.tcpi_backoff,
		.rto_us = w.base.tcpi_rto, .ato_us = w.base.tcpi_ato,
		.snd_mss = w.base.tcpi_snd_mss, .rcv_mss = w.base.tcpi_rcv_mss,
		.unacked = w.base.tcpi_unacked, .sacked = w.base.tcpi_sacked,
		.last_data_sent_ms = w.base.tcpi_last_data_sent,
		.last_data_recv_ms = w.base.tcpi_last_data_recv,
		.total_retrans = w.base.tcpi_total_retrans,
		.rwnd_limited_us = w.base.tcpi_rwnd_limited,
		.sndbuf_limited_us = w.base.tcpi_sndbuf_limited,
		.notsent = w.base.tcpi_notsent_bytes, .snd_wnd = w.base.tcpi_snd_wnd,
		.rcv_wnd = w.rcv_wnd, .total_rto = w.total_rto,
	};
}

/* SK_MEMINFO_* u32s in the kernel's order; a shorter array leaves the rest 0. */
static void decode_skmem(const struct nlattr *attr, struct tl_sock *s)
{
	uint32_t v[SK_MEMINFO_VARS] = {0};
	size_t len = mnl_attr_get_payload_len(attr);

	memcpy(v, mnl_attr_get_payload(attr), len < sizeof(v) ? len : sizeof(v));
	s->has_skmem = 1;
	s->skmem = (struct tl_skmem){
		.rmem = v[SK_MEMINFO_RMEM_ALLOC], .rcvbuf = v[SK_MEMINFO_RCVBUF],
		.wmem = v[SK_MEMINFO_WMEM_ALLOC], .sndbuf = v[SK_MEMINFO_SNDBUF],
		.fwd = v[SK_MEMINFO_FWD_ALLOC], .wqueued = v[SK_MEMINFO_WMEM_QUEUED],
		.optmem = v[SK_MEMINFO_OPTMEM], .backlog = v[SK_MEMINFO_BACKLOG],
		.drops = v[SK_MEMINFO_DROPS],
	};
}

static void decode_msg(const struct inet_diag_msg *m, struct tl_sock *s)
{
	size_t alen = m->idiag_family == AF_INET ? 4 : 16;

	s->family = m->idiag_family;
	s->state = m->idiag_state;
	s->timer = m->idiag_timer;
	s->retrans = m->idiag_retrans;
	memcpy(&s->src, m->id.idiag_src, alen);
	memcpy(&s->dst, m->id.idiag_dst, alen);
	s->sport = ntohs(m->id.idiag_sport);
	s->dport = ntohs(m->id.idiag_dport);
	s->expires_ms = m->idiag_expires;
	s->rqueue = m->idiag_rqueue;
	s->wqueue = m->idiag_wqueue;
	s->inode = m->idiag_inode;
	s->cookie = (uint64_t)m->id.idiag_cookie[1] << 32 | m->id.idiag_cookie[0];
}

static int data_cb(const struct nlmsghdr *nlh, void *data)
{
	struct tl_decode_ctx *ctx = data;
	const struct nlattr *tb[INET_DIAG_MAX + 1] = {0};
	const struct inet_diag_msg *m;
	struct tl_sock s;

	if (nlh->nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return MNL_CB_OK;
	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*m)) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	m = mnl_nlmsg_get_payload(nlh);
	if (m->idiag_family != AF_INET && m->idiag_family != AF_INET6) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	if (mnl_attr_parse(nlh, sizeof(*m), attr_cb, tb) < 0) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	memset(&s, 0, sizeof(s));
	decode_msg(m, &s);
	if (tb[INET_DIAG_INFO] != NULL)
		decode_info(tb[INET_DIAG_INFO], &s);
	if (tb[INET_DIAG_SKMEMINFO] != NULL)
		decode_skmem(tb[INET_DIAG_SKMEMINFO], &s);
	if (tb[INET_DIAG_ULP_INFO] != NULL && tl_decode_ulp(tb[INET_DIAG_ULP_INFO], &s) < 0)
		return MNL_CB_ERROR;
	if (ctx->cb != NULL && ctx->cb(&s, ctx->data) < 0)
		return MNL_CB_ERROR;
	return MNL_CB_OK;
}

int tl_decode_run(const void *buf, size_t len, uint32_t seq, uint32_t portid,
		  struct tl_decode_ctx *ctx)
{
	return mnl_cb_run(buf, len, seq, portid, data_cb, ctx);
}
