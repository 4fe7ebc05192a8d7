/* pr_pcap.h — the capture probe's packet decoder: one captured frame in, one line of text out.
 *
 * The bytes are whatever libpcap handed over (live or from a file), so they are untrusted: every
 * length is checked against caplen, nothing past it is read, and a header cut short says
 * `truncated=1` instead of being guessed.  Link types: Ethernet (DLT_EN10MB: lo and veth give
 * it; one 802.1Q tag is skipped), Linux cooked v1 and v2 (DLT_LINUX_SLL, DLT_LINUX_SLL2: the
 * "any" device), raw IP (DLT_RAW, LINKTYPE_RAW, LINKTYPE_IPV4/IPV6).  Network: IPv4 and IPv6
 * (of IPv6's extension headers only a fragment header right after the fixed one: a packet with
 * another is "other").  Transport: TCP, with every option; ICMP and ICMPv6 errors with the IP +
 * TCP header they quote, decoded as a TCP segment.  An IP fragment is a frag= line, never a
 * segment: fragments are not reassembled here (docs/capture.md says why), but each line carries
 * what a reader needs to join them.
 *
 * The connection table numbers 4-tuples (either direction) 1, 2, … in order of first packet and
 * keeps each direction's ISN, so seq and ack print relative to it (docs/capture.md).
 *
 * Error rule: nothing here prints (except into the caller's buffer) or exits.
 */
#ifndef PR_PCAP_H
#define PR_PCAP_H

#include <stddef.h>
#include <stdint.h>

/* Link types (the DLT_ values Linux libpcap reports, and the LINKTYPE_ ones a file may hold),
 * spelled here so the decoder, its tests and the fuzz target need no pcap.h. */
#define PR_DLT_EN10MB		1
#define PR_DLT_RAW		12	/* DLT_RAW on Linux */
#define PR_LINKTYPE_RAW		101	/* the same in a file */
#define PR_DLT_LINUX_SLL	113
#define PR_LINKTYPE_IPV4	228
#define PR_LINKTYPE_IPV6	229
#define PR_DLT_LINUX_SLL2	276

#define PR_PCAP_CONNS_MAX	4096	/* connections tracked; later ones print conn=0 */
#define PR_PCAP_LINE_MAX	512	/* a buffer this size always holds a whole line */

/* What a packet was, for the end line's counts (capture counts a fragment as other). */
enum pr_pcap_kind { PR_PCAP_TCP, PR_PCAP_ICMP, PR_PCAP_FRAGMENT, PR_PCAP_OTHER };

/* One endpoint: family 4 or 6, address in network order (IPv4 in the first 4 bytes), port. */
struct pr_pcap_ep {
	uint8_t family;
	uint8_t addr[16];
	uint16_t port;
};

/* One connection: a is the source of its first packet.  Direction 0 is a→b, 1 is b→a. */
struct pr_pcap_conn {
	struct pr_pcap_ep a, b;
	uint32_t isn[2];
	uint8_t have_isn[2];	/* 0: none yet, 1: from a segment or an ack, 2: from a SYN */
	uint32_t number;	/* 1, 2, …; 0 marks a free slot */
};

/* The connection table (large: allocate it, or make it static) and the decoder's settings. */
struct pr_pcap_table {
	uint16_t port;		/* the server port (-p) for dir=; 0: none, every dir is ?>? */
	uint32_t next_number;	/* numbers given so far */
	size_t used;		/* slots in use */
	struct pr_pcap_conn slot[PR_PCAP_CONNS_MAX];	/* open addressing on the 4-tuple */
};

/* Empty the table and set the server port (0: none). */
void pr_pcap_init(struct pr_pcap_table *t, uint16_t port);

/* Decode one frame of link type linktype, caplen bytes captured of wirelen, into line (at
 * most linesz bytes, NUL-terminated, no newline; cut short only if linesz < PR_PCAP_LINE_MAX).
 * Lines:
 *   conn=N dir=c>s flags=S seq=0 ack=- len=0 win=W opts=... tsval=N tsecr=N src=A:P dst=B:P
 *   icmp=dest-unreachable code=port-unreachable type=3 code_n=3 from=A quoted: conn=N ...
 *   frag=0 mf=1 id=N proto=6 fraglen=N conn=N dir=c>s flags=FA seq=.. ack=.. hlen=N win=W ...
 *   frag=OFFSET mf=0|1 id=N proto=P fraglen=N src=A dst=B
 *   other=KIND caplen=N len=N ...
 * with ` truncated=1` or ` bad=WHAT` at the end when a header was cut short or malformed.
 * Returns the kind of packet; it updates the connection table. */
enum pr_pcap_kind pr_pcap_decode(struct pr_pcap_table *t, int linktype, const uint8_t *pkt,
				 size_t caplen, size_t wirelen, char *line, size_t linesz);

#endif
