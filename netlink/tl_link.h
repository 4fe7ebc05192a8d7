/* tl_link.h — the links of a network namespace over rtnetlink (RTM_GETLINK, NLM_F_DUMP, libmnl),
 * decoded into plain structs: name, index, MTU, root qdisc, operstate, kind and flags.
 *
 * The raw replies of a live dump can be kept, and a kept dump decoded again exactly as a live one
 * is, so the decoder is tested on exact bytes without root (tests/test_machine_links.py).
 *
 * Error rule for every function: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef TL_LINK_H
#define TL_LINK_H

#include <stddef.h>
#include <stdint.h>

#define TL_LINK_NAME_MAX 16	/* IFNAMSIZ: a name or a qdisc id with its NUL */
#define TL_LINK_KIND_MAX 32	/* an rtnl_link_ops kind ("veth", "bridge") with its NUL */

struct tl_link {
	int index;			/* ifi_index */
	unsigned int flags;		/* ifi_flags: IFF_* (dev_get_flags()) */
	uint16_t type;			/* ifi_type: ARPHRD_* */
	uint32_t mtu;			/* IFLA_MTU */
	uint8_t operstate;		/* IFLA_OPERSTATE: IF_OPER_* (RFC 2863) */
	char name[TL_LINK_NAME_MAX];	/* IFLA_IFNAME */
	char qdisc[TL_LINK_NAME_MAX];	/* IFLA_QDISC, the root qdisc's id; "" when none was sent */
	char kind[TL_LINK_KIND_MAX];	/* IFLA_LINKINFO/IFLA_INFO_KIND; "" when none was sent */
};

struct tl_links {
	struct tl_link *v;	/* malloc'd, sorted by index; tl_links_free() frees it */
	size_t n;
};

/* Dump every link of the calling thread's network namespace into *out, sorted by index.  With
 * raw non-NULL, *raw (malloc'd, *rawlen bytes) gets the replies as the kernel sent them, for
 * tl_link_replay().  A dump the kernel marks interrupted (NLM_F_DUMP_INTR: a link changed
 * meanwhile) is asked again, up to 4 times, then fails with EINTR.  0 or -1 (errno: the
 * socket's, ENOMEM, EBADMSG for a reply that is not a valid link message, or the errno of an
 * NLMSG_ERROR). */
int tl_link_dump(struct tl_links *out, char **raw, size_t *rawlen);

/* Decode kept replies, buf[0..len): RTM_NEWLINK messages up to one NLMSG_DONE, which must be the
 * last bytes.  0 or -1: EBADMSG for garbled, truncated or trailing bytes (an attribute whose
 * length runs past its message, a value of the wrong size, a string without its NUL, no
 * NLMSG_DONE), EINTR for a dump marked interrupted, or the errno of an NLMSG_ERROR. */
int tl_link_replay(const void *buf, size_t len, struct tl_links *out);

/* Free out->v and zero *out (a zeroed or already freed struct is fine). */
void tl_links_free(struct tl_links *out);

/* iproute2's name of an IF_OPER_* value ("UP", "LOWERLAYERDOWN"), or NULL for a value it has no
 * name for. */
const char *tl_operstate_name(unsigned int operstate);

/* flags as the IFF_* names of include/uapi/linux/if.h without IFF_, in bit order, joined by ','
 * ("UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP"); bits without a name as one 0x... number at the
 * end; "-" for none.  Returns buf, always NUL-terminated (cut when len is short: 160 is enough). */
char *tl_link_flags(unsigned int flags, char *buf, size_t len);

#endif
