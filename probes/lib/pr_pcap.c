/* pr_pcap.c — one captured frame to one line: link layer, IPv4/IPv6, TCP with its options, ICMP
 * errors with the TCP header they quote, and the connection table.  See pr_pcap.h. */
#include "pr_pcap.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TCP_SYN	0x02
#define TCP_ACK	0x10

/* A line being written: whatever does not fit is dropped, never written past the end. */
struct out {
	char *p;
	size_t len, cap;
};

__attribute__((format(printf, 2, 3)))
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->len + 1 >= o->cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

static uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The network layer of a frame: where it starts, what it is, and how much was captured. */
struct net {
	const uint8_t *p;
	size_t cap;		/* bytes captured from p on */
	unsigned ethertype;	/* 0x0800, 0x86dd, …; 0: the link layer was cut short */
};

static int link_layer(int linktype, const uint8_t *pkt, size_t caplen, struct net *n)
{
	size_t off;

	n->ethertype = 0;
	switch (linktype) {
	case PR_DLT_EN10MB:
		if (caplen < 14)
			return -1;
		off = 14;
		n->ethertype = be16(pkt + 12);
		if (n->ethertype == 0x8100 || n->ethertype == 0x88a8) {	/* one VLAN tag */
			if (caplen < 18) {
				n->ethertype = 0;
				return -1;
			}
			n->ethertype = be16(pkt + 16);
			off = 18;
		}
		break;
	case PR_DLT_LINUX_SLL:
		if (caplen < 16)
			return -1;
		n->ethertype = be16(pkt + 14);
		off = 16;
		break;
	case PR_DLT_LINUX_SLL2:
		if (caplen < 20)
			return -1;
		n->ethertype = be16(pkt);
		off = 20;
		break;
	case PR_DLT_RAW:
	case PR_LINKTYPE_RAW:
		if (caplen < 1)
			return -1;
		n->ethertype = (pkt[0] >> 4) == 6 ? 0x86dd : 0x0800;
		off = 0;
		break;
	case PR_LINKTYPE_IPV4:
		n->ethertype = 0x0800;
		off = 0;
		break;
	case PR_LINKTYPE_IPV6:
		n->ethertype = 0x86dd;
		off = 0;
		break;
	default:
		return -2;
	}
	n->p = pkt + off;
	n->cap = caplen - off;
	return 0;
}

/* An IP header read: the endpoints' addresses, the protocol and the transport bytes. */
struct ip {
	uint8_t family;		/* 4 or 6 */
	uint8_t src[16], dst[16];
	uint8_t proto;		/* IPv6: the fragment header's next header, when there is one */
	int fragment;		/* a fragment: MF set or a non-zero offset */
	unsigned frag_off;	/* the fragment's offset in bytes (0: the first, or no fragment) */
	int frag_mf;		/* more fragments follow */
	uint32_t frag_id;	/* the identification shared by a datagram's fragments */
	const uint8_t *l4;
	size_t l4cap;		/* transport bytes captured */
	size_t l4len;		/* transport bytes the IP header says there are */
	const char *bad;	/* why the header is malformed, or NULL */
	int truncated;		/* the IP header itself was cut short */
};

static int ip4(const uint8_t *p, size_t cap, struct ip *ip)
{
	size_t ihl, tot;

	ip->family = 4;
	if (cap < 20) {
		ip->truncated = 1;
		return -1;
	}
	memcpy(ip->src, p + 12, 4);
	memcpy(ip->dst, p + 16, 4);
	ip->proto = p[9];
	ihl = (size_t)(p[0] & 0x0f) * 4;
	tot = be16(p + 2);
	if ((p[0] >> 4) != 4)
		ip->bad = "ip-version";
	else if (ihl < 20)
		ip->bad = "ip-ihl";
	else if (tot < ihl)
		ip->bad = "ip-length";
	if (ip->bad != NULL)
		return -1;
	if (cap < ihl) {
		ip->truncated = 1;
		return -1;
	}
	ip->frag_off = (be16(p + 6) & 0x1fffu) * 8;
	ip->frag_mf = (be16(p + 6) & 0x2000) != 0;
	ip->frag_id = be16(p + 4);
	ip->fragment = ip->frag_mf || ip->frag_off != 0;
	ip->l4 = p + ihl;
	ip->l4len = tot - ihl;
	ip->l4cap = cap - ihl < ip->l4len ? cap - ihl : ip->l4len;
	return 0;
}

/* The fragment header (RFC 8200 4.5) at p + 40, of an IPv6 packet whose payload is plen bytes.
 * An atomic fragment (offset 0, M clear: RFC 6946) holds the whole packet and is read as one. */
static int ip6_fragment(const uint8_t *p, size_t cap, size_t plen, struct ip *ip)
{
	if (plen < 8) {
		ip->bad = "ip6-fragment-length";
		return -1;
	}
	if (cap < 48) {
		ip->truncated = 1;
		return -1;
	}
	ip->proto = p[40];
	ip->frag_off = be16(p + 42) & 0xfff8u;	/* 8-byte units in the top 13 bits */
	ip->frag_mf = p[43] & 1;
	ip->frag_id = be32(p + 44);
	ip->fragment = ip->frag_mf || ip->frag_off != 0;
	ip->l4 = p + 48;
	ip->l4len = plen - 8;
	ip->l4cap = cap - 48 < ip->l4len ? cap - 48 : ip->l4len;
	return 0;
}

static int ip6(const uint8_t *p, size_t cap, struct ip *ip)
{
	size_t plen;

	ip->family = 6;
	if (cap < 40) {
		ip->truncated = 1;
		return -1;
	}
	memcpy(ip->src, p + 8, 16);
	memcpy(ip->dst, p + 24, 16);
	ip->proto = p[6];
	if ((p[0] >> 4) != 6) {
		ip->bad = "ip-version";
		return -1;
	}
	plen = be16(p + 4);
	if (ip->proto == 44)	/* a fragment header right after the fixed one */
		return ip6_fragment(p, cap, plen, ip);
	ip->l4 = p + 40;
	ip->l4len = plen;
	ip->l4cap = cap - 40 < plen ? cap - 40 : plen;
	return 0;
}

static int ip_parse(unsigned ethertype, const uint8_t *p, size_t cap, struct ip *ip)
{
	memset(ip, 0, sizeof(*ip));
	return ethertype == 0x86dd ? ip6(p, cap, ip) : ip4(p, cap, ip);
}

/* Why a header could not be read: malformed (bad=WHY) or cut short (truncated=1). */
static void put_broken(struct out *o, const char *bad)
{
	if (bad != NULL)
		put(o, " bad=%s", bad);
	else
		put(o, " truncated=1");
}

static void put_addr(struct out *o, const char *key, uint8_t family, const uint8_t *addr)
{
	char s[INET6_ADDRSTRLEN];

	if (inet_ntop(family == 6 ? AF_INET6 : AF_INET, addr, s, sizeof(s)) == NULL)
		strcpy(s, "?");
	put(o, " %s=%s", key, s);
}

static void put_ep(struct out *o, const char *key, const struct pr_pcap_ep *ep)
{
	char s[INET6_ADDRSTRLEN];

	if (inet_ntop(ep->family == 6 ? AF_INET6 : AF_INET, ep->addr, s, sizeof(s)) == NULL)
		strcpy(s, "?");
	put(o, ep->family == 6 ? " %s=[%s]:%u" : " %s=%s:%u", key, s, ep->port);
}

/* ---- the connection table -------------------------------------------------------------- */

void pr_pcap_init(struct pr_pcap_table *t, uint16_t port)
{
	memset(t, 0, sizeof(*t));
	t->port = port;
}

static int ep_eq(const struct pr_pcap_ep *x, const struct pr_pcap_ep *y)
{
	return x->family == y->family && x->port == y->port && memcmp(x->addr, y->addr, 16) == 0;
}

static uint32_t ep_hash(const struct pr_pcap_ep *e)
{
	uint32_t h = 2166136261u;	/* FNV-1a */
	size_t i;

	for (i = 0; i < 16; i++)
		h = (h ^ e->addr[i]) * 16777619u;
	h = (h ^ (e->port & 0xff)) * 16777619u;
	return (h ^ (e->port >> 8)) * 16777619u;
}

/* The slot of src↔dst (either direction: the hash is symmetric), and in *dir which way this
 * packet goes; NULL when absent.  With *empty non-NULL, also the free slot to insert at. */
static struct pr_pcap_conn *conn_find(struct pr_pcap_table *t, const struct pr_pcap_ep *src,
				      const struct pr_pcap_ep *dst, int *dir,
				      struct pr_pcap_conn **empty)
{
	size_t i = (ep_hash(src) ^ ep_hash(dst)) % PR_PCAP_CONNS_MAX, n;
	struct pr_pcap_conn *c;

	for (n = 0; n < PR_PCAP_CONNS_MAX; n++, i = (i + 1) % PR_PCAP_CONNS_MAX) {
		c = &t->slot[i];
		if (c->number == 0) {
			if (empty != NULL)
				*empty = c;
			return NULL;
		}
		if (ep_eq(&c->a, src) && ep_eq(&c->b, dst)) {
			*dir = 0;
			return c;
		}
		if (ep_eq(&c->a, dst) && ep_eq(&c->b, src)) {
			*dir = 1;
			return c;
		}
	}
	return NULL;
}

static void conn_start(struct pr_pcap_table *t, struct pr_pcap_conn *c,
		       const struct pr_pcap_ep *src, const struct pr_pcap_ep *dst)
{
	memset(c, 0, sizeof(*c));
	c->a = *src;
	c->b = *dst;
	c->number = ++t->next_number;
}

/* The connection of this segment, its ISNs brought up to date; NULL when the table is full. */
static struct pr_pcap_conn *conn_track(struct pr_pcap_table *t, const struct pr_pcap_ep *src,
				       const struct pr_pcap_ep *dst, unsigned flags,
				       uint32_t seq, uint32_t ack, int *dir)
{
	struct pr_pcap_conn *c, *empty = NULL;

	c = conn_find(t, src, dst, dir, &empty);
	if (c == NULL) {
		/* keep one slot free, so that every search ends at an empty one */
		if (empty == NULL || t->used + 1 >= PR_PCAP_CONNS_MAX)
			return NULL;
		t->used++;
		c = empty;
		conn_start(t, c, src, dst);
		*dir = 0;
	} else if ((flags & (TCP_SYN | TCP_ACK)) == TCP_SYN && c->have_isn[*dir] == 2 &&
		   c->isn[*dir] != seq) {
		conn_start(t, c, src, dst);	/* a new SYN on a used 4-tuple: a new connection */
		*dir = 0;
	}
	if ((flags & TCP_SYN) && c->have_isn[*dir] < 2) {
		c->isn[*dir] = seq;
		c->have_isn[*dir] = 2;
	} else if (c->have_isn[*dir] == 0) {
		c->isn[*dir] = seq;
		c->have_isn[*dir] = 1;
	}
	if ((flags & TCP_ACK) && c->have_isn[!*dir] == 0) {
		/* the other side's first segment was missed: its next seq is what this acks */
		c->isn[!*dir] = ack - ((flags & TCP_SYN) ? 1 : 0);
		c->have_isn[!*dir] = 1;
	}
	return c;
}

/* ---- TCP ------------------------------------------------------------------------------- */

static const char *dir_name(const struct pr_pcap_table *t, const struct pr_pcap_ep *src,
			    const struct pr_pcap_ep *dst)
{
	if (t->port != 0 && dst->port == t->port)
		return "c>s";
	if (t->port != 0 && src->port == t->port)
		return "s>c";
	return "?>?";
}

static void put_flags(struct out *o, unsigned flags)
{
	static const char letters[] = "FSRPAUEC";	/* bit 0 (FIN) … bit 7 (CWR) */
	char s[9];
	size_t n = 0;
	unsigned i;

	for (i = 0; i < 8; i++)
		if (flags & (1u << i))
			s[n++] = letters[i];
	s[n] = '\0';
	put(o, " flags=%s", n ? s : "-");
}

/* Options decoded for the line: the list, the timestamps, and what went wrong. */
struct opts {
	struct out list;
	char buf[256];
	int has_ts;
	uint32_t tsval, tsecr;
	int truncated;
	const char *bad;
};

/* One option at p[0] with len bytes: its token, or -1 when its length is wrong for its kind. */
static int opt_one(struct opts *op, const uint8_t *p, size_t len)
{
	const char *sep = op->list.len ? "," : "";

	switch (p[0]) {
	case 2:
		if (len != 4)
			return -1;
		put(&op->list, "%smss:%u", sep, be16(p + 2));
		break;
	case 3:
		if (len != 3)
			return -1;
		put(&op->list, "%swscale:%u", sep, p[2]);
		break;
	case 4:
		if (len != 2)
			return -1;
		put(&op->list, "%ssackok", sep);
		break;
	case 5:
		if (len < 10 || (len - 2) % 8 != 0)
			return -1;
		put(&op->list, "%ssack:%zu", sep, (len - 2) / 8);
		break;
	case 8:
		if (len != 10)
			return -1;
		put(&op->list, "%sts", sep);
		op->has_ts = 1;
		op->tsval = be32(p + 2);
		op->tsecr = be32(p + 6);
		break;
	default:
		put(&op->list, "%sunknown:%u", sep, p[0]);
	}
	return 0;
}

/* The options in p[20, hlen), of which p[0, cap) was captured. */
static void tcp_options(struct opts *op, const uint8_t *p, size_t hlen, size_t cap)
{
	size_t i = 20, end = hlen < cap ? hlen : cap, len;

	op->list = (struct out){ op->buf, 0, sizeof(op->buf) };
	op->buf[0] = '\0';
	while (i < end) {
		if (p[i] == 0) {
			put(&op->list, "%seol", op->list.len ? "," : "");
			return;		/* what follows is padding */
		}
		if (p[i] == 1) {
			put(&op->list, "%snop", op->list.len ? "," : "");
			i++;
			continue;
		}
		if (i + 1 >= hlen) {
			op->bad = "tcp-option-length";	/* no room for its length byte */
			return;
		}
		if (i + 1 >= cap)
			break;
		len = p[i + 1];
		if (len < 2 || i + len > hlen) {
			op->bad = "tcp-option-length";
			return;
		}
		if (i + len > cap)
			break;
		if (opt_one(op, p + i, len) < 0) {
			op->bad = "tcp-option-length";
			return;
		}
		i += len;
	}
	if (i < hlen)
		op->truncated = 1;
}

static void endpoints(const struct ip *ip, const uint8_t *tcp, struct pr_pcap_ep *src,
		      struct pr_pcap_ep *dst)
{
	memset(src, 0, sizeof(*src));
	memset(dst, 0, sizeof(*dst));
	src->family = dst->family = ip->family;
	memcpy(src->addr, ip->src, 16);
	memcpy(dst->addr, ip->dst, 16);
	src->port = be16(tcp);
	dst->port = be16(tcp + 2);
}

static void put_other(struct out *o, const char *kind, size_t caplen, size_t wirelen)
{
	put(o, "other=%s caplen=%zu len=%zu", kind, caplen, wirelen);
}

static void put_ip_other(struct out *o, const char *kind, const struct ip *ip, size_t caplen,
			 size_t wirelen)
{
	put_other(o, kind, caplen, wirelen);
	put(o, " proto=%u", ip->proto);
	put_addr(o, "src", ip->family, ip->src);
	put_addr(o, "dst", ip->family, ip->dst);
}

/* The TCP header's length from its data offset, when it is at least 20 bytes and its first 20
 * were captured; 0 otherwise. */
static size_t tcp_hlen(const struct ip *ip)
{
	size_t hlen;

	if (ip->l4cap < 20)
		return 0;
	hlen = (size_t)(ip->l4[12] >> 4) * 4;
	return hlen < 20 ? 0 : hlen;
}

/* The TCP fields of a segment, or of the first fragment of one (frag: no len=, since the payload
 * runs on into the other fragments; hlen= instead, so a reader can work it out, and split=1 when
 * the options run past this fragment).  hlen is tcp_hlen()'s, non-zero. */
static void tcp_fields(struct pr_pcap_table *t, const struct ip *ip, size_t hlen, int frag,
		       struct out *o)
{
	const uint8_t *p = ip->l4;
	struct pr_pcap_ep src, dst;
	struct pr_pcap_conn *c;
	struct opts op = { 0 };
	uint32_t seq, ack;
	unsigned flags;
	int dir = 0;

	endpoints(ip, p, &src, &dst);
	seq = be32(p + 4);
	ack = be32(p + 8);
	flags = p[13];
	tcp_options(&op, p, hlen, ip->l4cap);	/* a split header: those this fragment holds */
	c = conn_track(t, &src, &dst, flags, seq, ack, &dir);
	if (c != NULL) {
		put(o, "conn=%u dir=%s", c->number, dir_name(t, &src, &dst));
		seq -= c->isn[dir];
		ack -= c->isn[!dir];
	} else {
		put(o, "conn=0 dir=%s", dir_name(t, &src, &dst));	/* table full: absolute */
	}
	put_flags(o, flags);
	put(o, " seq=%u", seq);
	if (flags & TCP_ACK)
		put(o, " ack=%u", ack);
	else
		put(o, " ack=-");
	if (frag)
		put(o, " hlen=%zu", hlen);
	else
		put(o, " len=%zu", ip->l4len - hlen);
	put(o, " win=%u opts=%s", be16(p + 14), op.list.len ? op.buf : "-");
	if (op.has_ts)
		put(o, " tsval=%u tsecr=%u", op.tsval, op.tsecr);
	else
		put(o, " tsval=- tsecr=-");
	put_ep(o, "src", &src);
	put_ep(o, "dst", &dst);
	if (frag && hlen > ip->l4len)
		put(o, " split=1");
	if (op.truncated && ip->l4cap < (hlen < ip->l4len ? hlen : ip->l4len))
		put(o, " truncated=1");	/* the snapshot, not the fragment's end, cut it */
	if (op.bad != NULL)
		put(o, " bad=%s", op.bad);
}

static enum pr_pcap_kind tcp_segment(struct pr_pcap_table *t, const struct ip *ip,
				     struct out *o, size_t caplen, size_t wirelen)
{
	size_t hlen = tcp_hlen(ip);

	if (hlen == 0 || hlen > ip->l4len) {
		put_ip_other(o, "tcp", ip, caplen, wirelen);
		put(o, ip->l4cap < 20 && ip->l4len >= 20 ? " truncated=1" : " bad=tcp-header-length");
		return PR_PCAP_OTHER;
	}
	tcp_fields(t, ip, hlen, 0, o);
	return PR_PCAP_TCP;
}

/* An IP fragment: never a whole segment.  Its offset, MF bit, identification, protocol and
 * length (fraglen: the bytes it carries after the IP header(s)); for the first fragment of a
 * TCP segment that holds the fixed TCP header, the TCP fields with hlen= (tcp_fields), else the
 * addresses.  A reader joins the fragments of one datagram by src, dst, proto and id. */
static enum pr_pcap_kind fragment(struct pr_pcap_table *t, const struct ip *ip, struct out *o)
{
	int tcp_head = ip->frag_off == 0 && ip->proto == 6;
	size_t hlen = tcp_head ? tcp_hlen(ip) : 0;

	put(o, "frag=%u mf=%d id=%lu proto=%u fraglen=%zu", ip->frag_off, ip->frag_mf,
	    (unsigned long)ip->frag_id, ip->proto, ip->l4len);
	if (hlen != 0) {
		put(o, " ");
		tcp_fields(t, ip, hlen, 1, o);
	} else {
		put_addr(o, "src", ip->family, ip->src);
		put_addr(o, "dst", ip->family, ip->dst);
		if (tcp_head && ip->l4len < 20)
			put(o, " split=1");	/* even the fixed TCP header runs on */
		else if (tcp_head && ip->l4cap < 20)
			put(o, " truncated=1");
		else if (tcp_head)
			put(o, " bad=tcp-header-length");
	}
	if (ip->frag_off + ip->l4len > 65535)	/* past the largest datagram: RFC 791, 8200 */
		put(o, " bad=ip-fragment-offset");
	return PR_PCAP_FRAGMENT;
}

/* ---- ICMP ------------------------------------------------------------------------------ */

static const char *const icmp4_types[] = {
	[0] = "echo-reply", [3] = "dest-unreachable", [4] = "source-quench", [5] = "redirect",
	[8] = "echo-request", [11] = "time-exceeded", [12] = "parameter-problem",
	[13] = "timestamp-request", [14] = "timestamp-reply",
};
static const char *const icmp4_unreach[] = {
	"net-unreachable", "host-unreachable", "protocol-unreachable", "port-unreachable",
	"frag-needed", "source-route-failed", "net-unknown", "host-unknown", "host-isolated",
	"net-prohibited", "host-prohibited", "net-tos", "host-tos", "admin-prohibited",
	"precedence-violation", "precedence-cutoff",
};
static const char *const icmp6_unreach[] = {
	"no-route", "admin-prohibited", "beyond-scope", "addr-unreachable", "port-unreachable",
	"policy-fail", "reject-route",
};
static const char *const time_exceeded[] = { "ttl-exceeded", "reassembly-exceeded" };

#define NAME(tab, i) ((size_t)(i) < sizeof(tab) / sizeof(tab[0]) && tab[i] ? tab[i] : NULL)

static const char *icmp_type_name(int v6, unsigned type)
{
	if (!v6)
		return NAME(icmp4_types, type);
	switch (type) {
	case 1: return "dest-unreachable";
	case 2: return "packet-too-big";
	case 3: return "time-exceeded";
	case 4: return "parameter-problem";
	case 128: return "echo-request";
	case 129: return "echo-reply";
	case 133: return "router-solicit";
	case 134: return "router-advert";
	case 135: return "neighbor-solicit";
	case 136: return "neighbor-advert";
	case 137: return "redirect";
	}
	return NULL;
}

static const char *icmp_code_name(int v6, unsigned type, unsigned code)
{
	if (!v6 && type == 3)
		return NAME(icmp4_unreach, code);
	if (v6 && type == 1)
		return NAME(icmp6_unreach, code);
	if ((!v6 && type == 11) || (v6 && type == 3))
		return NAME(time_exceeded, code);
	return NULL;
}

static int icmp_is_error(int v6, unsigned type)
{
	return v6 ? type < 128 : type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

/* The quoted packet of an ICMP error: its IP header and the first bytes of its TCP header. */
static void icmp_quoted(struct pr_pcap_table *t, const uint8_t *p, size_t cap, int v6,
			struct out *o)
{
	struct pr_pcap_ep src, dst;
	struct pr_pcap_conn *c;
	struct ip in;
	uint32_t seq;
	int dir = 0;

	put(o, " quoted:");
	if (ip_parse(v6 ? 0x86dd : 0x0800, p, cap, &in) < 0) {
		put_broken(o, in.bad);
		return;
	}
	if (in.proto != 6 || in.frag_off != 0) {	/* a first fragment quotes the TCP header */
		put(o, " proto=%u", in.proto);
		put_addr(o, "src", in.family, in.src);
		put_addr(o, "dst", in.family, in.dst);
		return;
	}
	if (in.l4cap < 8) {	/* RFC 792 guarantees 8 bytes: ports and seq */
		put(o, " proto=6");
		put_addr(o, "src", in.family, in.src);
		put_addr(o, "dst", in.family, in.dst);
		put(o, " truncated=1");
		return;
	}
	endpoints(&in, in.l4, &src, &dst);
	seq = be32(in.l4 + 4);
	c = conn_find(t, &src, &dst, &dir, NULL);
	if (c != NULL && c->have_isn[dir])
		put(o, " conn=%u dir=%s", c->number, dir_name(t, &src, &dst));
	else	/* a connection this capture never saw: seq is absolute */
		put(o, " conn=0 dir=%s", dir_name(t, &src, &dst));
	if (in.l4cap >= 14)
		put_flags(o, in.l4[13]);
	else
		put(o, " flags=?");
	put(o, " seq=%u", c != NULL && c->have_isn[dir] ? seq - c->isn[dir] : seq);
	put_ep(o, "src", &src);
	put_ep(o, "dst", &dst);
}

static enum pr_pcap_kind icmp(struct pr_pcap_table *t, const struct ip *ip, struct out *o,
			      size_t caplen, size_t wirelen)
{
	const uint8_t *p = ip->l4;
	int v6 = ip->family == 6;
	const char *tn, *cn;
	unsigned type, code;

	if (ip->l4cap < 8) {
		put_ip_other(o, v6 ? "icmp6" : "icmp", ip, caplen, wirelen);
		put(o, ip->l4len < 8 ? " bad=icmp-length" : " truncated=1");
		return PR_PCAP_OTHER;
	}
	type = p[0];
	code = p[1];
	tn = icmp_type_name(v6, type);
	cn = icmp_code_name(v6, type, code);
	put(o, "%s=%s code=%s type=%u code_n=%u", v6 ? "icmp6" : "icmp", tn ? tn : "unknown",
	    cn ? cn : "-", type, code);
	put_addr(o, "from", ip->family, ip->src);
	if (!icmp_is_error(v6, type)) {
		put_addr(o, "to", ip->family, ip->dst);
		return PR_PCAP_ICMP;
	}
	if (!v6 && type == 3 && code == 4)
		put(o, " mtu=%u", be16(p + 6));
	if (v6 && type == 2)
		put(o, " mtu=%u", be32(p + 4));
	icmp_quoted(t, p + 8, ip->l4cap - 8, v6, o);
	return PR_PCAP_ICMP;
}

/* ---- the frame ------------------------------------------------------------------------- */

static enum pr_pcap_kind network(struct pr_pcap_table *t, const struct net *n, struct out *o,
				 size_t caplen, size_t wirelen)
{
	struct ip ip;
	char kind[32];

	if (n->ethertype != 0x0800 && n->ethertype != 0x86dd) {
		if (n->ethertype == 0x0806)
			put_other(o, "arp", caplen, wirelen);
		else {
			snprintf(kind, sizeof(kind), "ethertype-0x%04x", n->ethertype);
			put_other(o, kind, caplen, wirelen);
		}
		return PR_PCAP_OTHER;
	}
	if (ip_parse(n->ethertype, n->p, n->cap, &ip) < 0) {
		put_other(o, n->ethertype == 0x86dd ? "ipv6" : "ipv4", caplen, wirelen);
		put_broken(o, ip.bad);
		return PR_PCAP_OTHER;
	}
	if (ip.fragment)
		return fragment(t, &ip, o);
	if (ip.proto == 6)
		return tcp_segment(t, &ip, o, caplen, wirelen);
	if ((ip.family == 4 && ip.proto == 1) || (ip.family == 6 && ip.proto == 58))
		return icmp(t, &ip, o, caplen, wirelen);
	put_ip_other(o, ip.family == 6 ? "ipv6" : "ipv4", &ip, caplen, wirelen);
	return PR_PCAP_OTHER;
}

enum pr_pcap_kind pr_pcap_decode(struct pr_pcap_table *t, int linktype, const uint8_t *pkt,
				 size_t caplen, size_t wirelen, char *line, size_t linesz)
{
	struct out o = { line, 0, linesz };
	struct net n;
	char kind[32];
	int r;

	if (linesz == 0)
		return PR_PCAP_OTHER;
	line[0] = '\0';
	r = link_layer(linktype, pkt, caplen, &n);
	if (r == -2) {
		snprintf(kind, sizeof(kind), "linktype-%d", linktype);
		put_other(&o, kind, caplen, wirelen);
		return PR_PCAP_OTHER;
	}
	if (r < 0) {
		put_other(&o, "link", caplen, wirelen);
		put(&o, " truncated=1");
		return PR_PCAP_OTHER;
	}
	return network(t, &n, &o, caplen, wirelen);
}
