/* tl_diag.c — build one filtered SOCK_DIAG_BY_FAMILY request per family and run its dump. */
#include "tl_diag.h"
#include "tl_diag_int.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct tl_diag *tl_diag_open(void)
{
	struct tl_diag *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return NULL;
	d->nl = mnl_socket_open(NETLINK_SOCK_DIAG);
	if (d->nl == NULL)
		goto fail;
	if (mnl_socket_bind(d->nl, 0, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	d->portid = mnl_socket_get_portid(d->nl);
	d->seq = 1;
	return d;
fail:
	tl_diag_close(d);
	return NULL;
}

void tl_diag_close(struct tl_diag *d)
{
	int saved = errno;

	if (d == NULL)
		return;
	if (d->nl != NULL)
		mnl_socket_close(d->nl);
	free(d);
	errno = saved;
}

void tl_diag_record(struct tl_diag *d, FILE *f)
{
	d->record = f;
}

/* Append one port comparison to the bytecode: `no` jumps past the end (reject) — the kernel's
 * inet_diag_bc_run() accepts only when the program ends exactly at its length. */
static size_t put_port_op(struct inet_diag_bc_op *ops, size_t at, size_t total, int code,
			  uint16_t port)
{
	size_t remaining = total - at * sizeof(*ops);

	ops[at] = (struct inet_diag_bc_op){ .code = code, .yes = 2 * sizeof(*ops),
					    .no = remaining + 4 };
	ops[at + 1] = (struct inet_diag_bc_op){ .code = 0, .yes = 0, .no = port };
	return at + 2;
}

/* Build the request for one family.  The bytecode asks the kernel to send only sockets whose
 * ports match, so a busy machine costs the watcher nothing. */
static struct nlmsghdr *build_request(char *buf, uint32_t seq, int family,
				      const struct tl_diag_filter *flt)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct inet_diag_req_v2 *req;
	struct inet_diag_bc_op ops[4];
	size_t n = 0, total;

	nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = seq;
	req = mnl_nlmsg_put_extra_header(nlh, sizeof(*req));
	req->sdiag_family = family;
	req->sdiag_protocol = IPPROTO_TCP;
	req->idiag_states = flt->states ? flt->states : TL_STATES_ALL;
	req->idiag_ext = 1 << (INET_DIAG_INFO - 1) | 1 << (INET_DIAG_SKMEMINFO - 1);
	total = ((flt->sport != 0) + (flt->dport != 0)) * 2 * sizeof(ops[0]);
	if (flt->sport)
		n = put_port_op(ops, n, total, INET_DIAG_BC_S_EQ, flt->sport);
	if (flt->dport)
		n = put_port_op(ops, n, total, INET_DIAG_BC_D_EQ, flt->dport);
	if (n > 0)
		mnl_attr_put(nlh, INET_DIAG_REQ_BYTECODE, n * sizeof(ops[0]), ops);
	return nlh;
}

/* Send one request and run callbacks over the replies until NLMSG_DONE. */
static int dump_family(struct tl_diag *d, int family, const struct tl_diag_filter *flt,
		       struct tl_decode_ctx *ctx)
{
	char req[256];
	uint32_t seq = d->seq++;
	struct nlmsghdr *nlh = build_request(req, seq, family, flt);
	ssize_t len;
	int ret;

	if (mnl_socket_sendto(d->nl, nlh, nlh->nlmsg_len) < 0)
		return -1;
	for (;;) {
		len = mnl_socket_recvfrom(d->nl, d->buf, sizeof(d->buf));
		if (len < 0)
			return -1;
		errno = 0;
		if (d->record != NULL && fwrite(d->buf, 1, len, d->record) != (size_t)len) {
			if (errno == 0)
				errno = EIO;
			return -1;
		}
		ret = tl_decode_run(d->buf, len, seq, d->portid, ctx);
		if (ret <= MNL_CB_STOP)
			return ret;
	}
}

int tl_diag_query(struct tl_diag *d, const struct tl_diag_filter *flt, tl_sock_cb cb, void *data)
{
	struct tl_decode_ctx ctx = { .cb = cb, .data = data };
	static const int families[] = { AF_INET, AF_INET6 };
	size_t i;

	for (i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		if (flt->family != AF_UNSPEC && flt->family != families[i])
			continue;
		if (dump_family(d, families[i], flt, &ctx) < 0)
			return -1;
	}
	return d->record != NULL ? tl_record_mark(d) : 0;
}
