/* tl_link.c — RTM_GETLINK dump and its decoder (ifinfomsg + IFLA_* attributes → struct tl_link),
 * for a live dump and a kept one alike.  See tl_link.h. */
#include "tl_link.h"

#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DUMP_TRIES 4
#define RECV_SIZE 32768	/* the kernel's netlink dump skb is at most 32 KiB (netlink_recvmsg) */

struct link_ctx {
	struct tl_links *out;
	size_t cap;
};

/* Walk the attributes at attr[0..len) with cb; every byte must belong to an attribute (with its
 * padding).  mnl_attr_parse() stops silently at an attribute whose length runs past the end, so
 * a truncated message would read as a shorter valid one: here it is EBADMSG. */
static int parse_exact(const struct nlattr *attr, int len, mnl_attr_cb_t cb, void *tb)
{
	while (len > 0) {
		if (!mnl_attr_ok(attr, len) || (int)MNL_ALIGN(attr->nla_len) > len) {
			errno = EBADMSG;
			return -1;
		}
		if (cb(attr, tb) != MNL_CB_OK)
			return -1;
		len -= (int)MNL_ALIGN(attr->nla_len);
		attr = mnl_attr_next(attr);
	}
	return 0;
}

/* A string attribute as the kernel puts one (nla_put_string): its payload is the string and one
 * NUL, no more, within max bytes. */
static int valid_string(const struct nlattr *attr, size_t max)
{
	size_t n = mnl_attr_get_payload_len(attr);

	if (mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0 || n > max ||
	    strnlen(mnl_attr_get_payload(attr), n) != n - 1)
		return -1;
	return 0;
}

/* A fixed-size attribute: libmnl checks only that it is at least that long. */
static int valid_fixed(const struct nlattr *attr, enum mnl_attr_data_type t, size_t size)
{
	if (mnl_attr_validate(attr, t) < 0 || mnl_attr_get_payload_len(attr) != size)
		return -1;
	return 0;
}

static int info_cb(const struct nlattr *attr, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, IFLA_INFO_MAX) < 0)
		return MNL_CB_OK;	/* newer kernel: skip, don't fail */
	if (type == IFLA_INFO_KIND && valid_string(attr, TL_LINK_KIND_MAX) < 0) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	tb[type] = attr;
	return MNL_CB_OK;
}

static int attr_cb(const struct nlattr *attr, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(attr), bad = 0;

	if (mnl_attr_type_valid(attr, IFLA_MAX) < 0)
		return MNL_CB_OK;	/* newer kernel: skip, don't fail */
	switch (type) {
	case IFLA_IFNAME:
	case IFLA_QDISC:
		bad = valid_string(attr, TL_LINK_NAME_MAX) < 0;
		break;
	case IFLA_MTU:
		bad = valid_fixed(attr, MNL_TYPE_U32, sizeof(uint32_t)) < 0;
		break;
	case IFLA_OPERSTATE:
		bad = valid_fixed(attr, MNL_TYPE_U8, sizeof(uint8_t)) < 0;
		break;
	case IFLA_LINKINFO:
		bad = mnl_attr_validate(attr, MNL_TYPE_NESTED) < 0;
		break;
	}
	if (bad) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	tb[type] = attr;
	return MNL_CB_OK;
}

/* IFLA_INFO_KIND out of IFLA_LINKINFO into l->kind (left "" when absent). */
static int decode_kind(const struct nlattr *linkinfo, struct tl_link *l)
{
	const struct nlattr *tb[IFLA_INFO_MAX + 1] = {0};

	if (parse_exact(mnl_attr_get_payload(linkinfo), (int)mnl_attr_get_payload_len(linkinfo),
			info_cb, tb) < 0)
		return -1;
	if (tb[IFLA_INFO_KIND] != NULL)
		strcpy(l->kind, mnl_attr_get_str(tb[IFLA_INFO_KIND]));	/* length checked */
	return 0;
}

/* One RTM_NEWLINK message into l.  IFLA_IFNAME, IFLA_MTU and IFLA_OPERSTATE are in every one
 * (rtnl_fill_ifinfo): a message without them is EBADMSG; IFLA_QDISC and IFLA_LINKINFO are not. */
static int decode_link(const struct nlmsghdr *nlh, struct tl_link *l)
{
	const struct nlattr *tb[IFLA_MAX + 1] = {0};
	const struct ifinfomsg *ifm;
	size_t hdr = MNL_ALIGN(sizeof(*ifm));

	if (mnl_nlmsg_get_payload_len(nlh) < hdr)
		goto bad;
	ifm = mnl_nlmsg_get_payload(nlh);
	if (parse_exact(mnl_nlmsg_get_payload_offset(nlh, hdr),
			(int)(mnl_nlmsg_get_payload_len(nlh) - hdr), attr_cb, tb) < 0)
		return -1;
	if (tb[IFLA_IFNAME] == NULL || tb[IFLA_MTU] == NULL || tb[IFLA_OPERSTATE] == NULL)
		goto bad;
	memset(l, 0, sizeof(*l));
	l->index = ifm->ifi_index;
	l->flags = ifm->ifi_flags;
	l->type = ifm->ifi_type;
	l->mtu = mnl_attr_get_u32(tb[IFLA_MTU]);
	l->operstate = mnl_attr_get_u8(tb[IFLA_OPERSTATE]);
	strcpy(l->name, mnl_attr_get_str(tb[IFLA_IFNAME]));	/* lengths checked by attr_cb */
	if (tb[IFLA_QDISC] != NULL)
		strcpy(l->qdisc, mnl_attr_get_str(tb[IFLA_QDISC]));
	if (tb[IFLA_LINKINFO] != NULL && decode_kind(tb[IFLA_LINKINFO], l) < 0)
		return -1;
	return 0;
bad:
	errno = EBADMSG;
	return -1;
}

static int data_cb(const struct nlmsghdr *nlh, void *data)
{
	struct link_ctx *ctx = data;
	struct tl_links *out = ctx->out;
	struct tl_link *grown;

	if (nlh->nlmsg_type != RTM_NEWLINK)
		return MNL_CB_OK;
	if (out->n == ctx->cap) {
		size_t cap = ctx->cap ? ctx->cap * 2 : 16;

		grown = realloc(out->v, cap * sizeof(*grown));
		if (grown == NULL)
			return MNL_CB_ERROR;
		out->v = grown;
		ctx->cap = cap;
	}
	if (decode_link(nlh, &out->v[out->n]) < 0)
		return MNL_CB_ERROR;
	out->n++;
	return MNL_CB_OK;
}

/* Every message of buf[0..len) through mnl_cb_run, one at a time, each checked to lie wholly in
 * the buffer with its padding (mnl_nlmsg_ok() compares a signed length and not the padding; see
 * tl_replay.c).  *done is set after NLMSG_DONE, which must end the buffer.  0 or -1. */
static int run_buffer(const void *buf, size_t len, uint32_t seq, uint32_t portid,
		      struct link_ctx *ctx, int *done)
{
	const struct nlmsghdr *nlh = buf;
	int remaining = (int)len, ret;

	if (len > INT32_MAX) {
		errno = EFBIG;
		return -1;
	}
	while (remaining > 0) {
		if (*done || !mnl_nlmsg_ok(nlh, remaining) || nlh->nlmsg_len > (uint32_t)remaining ||
		    MNL_ALIGN(nlh->nlmsg_len) > (uint32_t)remaining) {
			errno = EBADMSG;	/* truncated, garbled, or bytes after NLMSG_DONE */
			return -1;
		}
		errno = 0;
		ret = mnl_cb_run(nlh, nlh->nlmsg_len, seq, portid, data_cb, ctx);
		if (ret == MNL_CB_ERROR) {
			if (errno == 0)
				errno = ENOMEM;	/* only data_cb's realloc fails without errno */
			return -1;
		}
		if (ret == MNL_CB_STOP)
			*done = 1;
		nlh = mnl_nlmsg_next(nlh, &remaining);
	}
	return 0;
}

static int by_index(const void *a, const void *b)
{
	const struct tl_link *x = a, *y = b;

	return (x->index > y->index) - (x->index < y->index);
}

static int finish(struct tl_links *out, int ret)
{
	if (ret < 0) {
		tl_links_free(out);
		return -1;
	}
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(out->v[0]), by_index);
	return 0;
}

int tl_link_replay(const void *buf, size_t len, struct tl_links *out)
{
	struct link_ctx ctx = { .out = out };
	int done = 0, ret;

	*out = (struct tl_links){0};
	ret = run_buffer(buf, len, 0, 0, &ctx, &done);	/* seq, portid 0: nothing to match */
	if (ret == 0 && !done) {
		errno = EBADMSG;	/* cut short: no NLMSG_DONE */
		ret = -1;
	}
	return finish(out, ret);
}

/* Append buf[0..len) to the kept replies. */
static int keep(char **raw, size_t *rawlen, const char *buf, size_t len)
{
	char *grown = realloc(*raw, *rawlen + len);

	if (grown == NULL)
		return -1;
	memcpy(grown + *rawlen, buf, len);
	*raw = grown;
	*rawlen += len;
	return 0;
}

/* Send the request and decode the replies up to NLMSG_DONE. */
static int dump_on(struct mnl_socket *nl, char *buf, struct link_ctx *ctx, char **raw,
		   size_t *rawlen)
{
	uint32_t seq = 1, portid = mnl_socket_get_portid(nl);
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifinfomsg *ifm;
	ssize_t len;
	int done = 0;

	nlh->nlmsg_type = RTM_GETLINK;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = seq;
	ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -1;
	while (!done) {
		len = mnl_socket_recvfrom(nl, buf, RECV_SIZE);	/* ENOSPC: a reply was cut */
		if (len < 0)
			return -1;
		if (raw != NULL && keep(raw, rawlen, buf, (size_t)len) < 0)
			return -1;
		if (run_buffer(buf, (size_t)len, seq, portid, ctx, &done) < 0)
			return -1;
	}
	return 0;
}

/* One dump on a socket of its own. */
static int dump_once(struct tl_links *out, char **raw, size_t *rawlen)
{
	struct link_ctx ctx = { .out = out };
	struct mnl_socket *nl = NULL;
	char *buf = malloc(RECV_SIZE);
	int ret = -1, saved;

	*out = (struct tl_links){0};
	if (raw != NULL) {
		*raw = NULL;
		*rawlen = 0;
	}
	if (buf == NULL)
		goto cleanup;
	nl = mnl_socket_open(NETLINK_ROUTE);
	if (nl == NULL || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		goto cleanup;
	ret = dump_on(nl, buf, &ctx, raw, rawlen);
cleanup:
	saved = errno;
	if (nl != NULL)
		mnl_socket_close(nl);
	free(buf);
	if (ret < 0 && raw != NULL) {
		free(*raw);
		*raw = NULL;
		*rawlen = 0;
	}
	errno = saved;
	return finish(out, ret);
}

int tl_link_dump(struct tl_links *out, char **raw, size_t *rawlen)
{
	int i;

	for (i = 0; i < DUMP_TRIES; i++) {
		if (dump_once(out, raw, rawlen) == 0)
			return 0;
		if (errno != EINTR)	/* libmnl: NLM_F_DUMP_INTR */
			return -1;
	}
	return -1;
}

void tl_links_free(struct tl_links *out)
{
	int saved = errno;

	free(out->v);
	*out = (struct tl_links){0};
	errno = saved;
}

/* iproute2 ip/ipaddress.c oper_states[], indexed by IF_OPER_* (include/uapi/linux/if.h). */
static const char *const oper_names[] = {
	"UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP",
};

const char *tl_operstate_name(unsigned int operstate)
{
	if (operstate >= sizeof(oper_names) / sizeof(oper_names[0]))
		return NULL;
	return oper_names[operstate];
}

/* enum net_device_flags, include/uapi/linux/if.h: bit i is flag_names[i]. */
static const char *const flag_names[] = {
	"UP", "BROADCAST", "DEBUG", "LOOPBACK", "POINTOPOINT", "NOTRAILERS", "RUNNING", "NOARP",
	"PROMISC", "ALLMULTI", "MASTER", "SLAVE", "MULTICAST", "PORTSEL", "AUTOMEDIA", "DYNAMIC",
	"LOWER_UP", "DORMANT", "ECHO",
};
_Static_assert(IFF_ECHO == 1 << 18 && IFF_LOWER_UP == 1 << 16 && IFF_RUNNING == 1 << 6,
	       "IFF_* bits");

char *tl_link_flags(unsigned int flags, char *buf, size_t len)
{
	size_t i, at = 0, nnames = sizeof(flag_names) / sizeof(flag_names[0]);
	unsigned int rest = flags & ~((1u << nnames) - 1);
	int n;

	if (len == 0)
		return buf;
	buf[0] = '\0';
	for (i = 0; i < nnames && at < len; i++) {
		if (!(flags & (1u << i)))
			continue;
		n = snprintf(buf + at, len - at, "%s%s", at ? "," : "", flag_names[i]);
		at = n < 0 ? len : at + (size_t)n;
	}
	if (rest != 0 && at < len)
		snprintf(buf + at, len - at, "%s%#x", at ? "," : "", rest);
	else if (flags == 0)
		snprintf(buf, len, "-");
	return buf;
}
