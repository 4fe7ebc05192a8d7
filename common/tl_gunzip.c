/* tl_gunzip.c — gzip (RFC 1952) and inflate (RFC 1951) in memory, after zlib's contrib/puff.c:
 * small, no library, so the machine probe links statically into a busybox guest.  Every read
 * of the input and every back-reference is bounds-checked; the input is untrusted. */
#include "tl_gunzip.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The inflated bytes so far: malloc'd, room for a NUL after them, never more than max. */
struct gz_out {
	unsigned char *p;
	size_t len, cap, max;
};

static int out_reserve(struct gz_out *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 4096;
	unsigned char *p;

	if (b->len + more + 1 <= b->cap)
		return 0;
	if (more > b->max || b->len > b->max - more) {
		errno = EFBIG;
		return -1;
	}
	while (cap < b->len + more + 1)
		cap *= 2;
	p = realloc(b->p, cap);
	if (p == NULL)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

#define MAXBITS 15
#define MAXLCODES 286
#define MAXDCODES 30
#define FIXLCODES 288

struct inflate {
	const unsigned char *in;
	size_t inlen, inpos;
	uint32_t bitbuf;
	int bitcnt;
	struct gz_out *out;
};

/* Canonical Huffman code: count[len] codes of each length, symbols ordered by code. */
struct huffman {
	short count[MAXBITS + 1];
	short symbol[FIXLCODES];
};

/* need (<= 16) bits, least significant first; -1 when the input ends. */
static int getbits(struct inflate *s, int need, int *val)
{
	uint32_t v = s->bitbuf;

	while (s->bitcnt < need) {
		if (s->inpos == s->inlen)
			return -1;
		v |= (uint32_t)s->in[s->inpos++] << s->bitcnt;
		s->bitcnt += 8;
	}
	s->bitbuf = v >> need;
	s->bitcnt -= need;
	*val = (int)(v & ((1u << need) - 1));
	return 0;
}

static int putbyte(struct inflate *s, unsigned char c)
{
	if (s->out->len + 1 >= s->out->cap && out_reserve(s->out, 1) < 0)
		return -1;
	s->out->p[s->out->len++] = c;
	return 0;
}

/* The next symbol of code h, one bit at a time; -1 on a bad code or the end of input. */
static int decode(struct inflate *s, const struct huffman *h)
{
	int code = 0, first = 0, index = 0, len, bit, count;

	for (len = 1; len <= MAXBITS; len++) {
		if (getbits(s, 1, &bit) < 0)
			return -1;
		code |= bit;
		count = h->count[len];
		if (code - count < first)
			return h->symbol[index + (code - first)];
		index += count;
		first += count;
		first <<= 1;
		code <<= 1;
	}
	return -1;
}

/* Build h from n code lengths.  Returns 0 for a complete code, > 0 for an incomplete one,
 * < 0 for an over-subscribed one. */
static int construct(struct huffman *h, const short *length, int n)
{
	short offs[MAXBITS + 1];
	int sym, len, left = 1;

	memset(h->count, 0, sizeof(h->count));
	for (sym = 0; sym < n; sym++)
		h->count[length[sym]]++;
	if (h->count[0] == n)
		return 0;
	for (len = 1; len <= MAXBITS; len++) {
		left = left * 2 - h->count[len];
		if (left < 0)
			return left;
	}
	offs[1] = 0;
	for (len = 1; len < MAXBITS; len++)
		offs[len + 1] = (short)(offs[len] + h->count[len]);
	for (sym = 0; sym < n; sym++)
		if (length[sym] != 0)
			h->symbol[offs[length[sym]]++] = (short)sym;
	return left;
}

/* A stored block: LEN, NLEN, then LEN raw bytes. */
static int stored(struct inflate *s)
{
	const unsigned char *p;
	size_t len;

	s->bitbuf = 0;
	s->bitcnt = 0;
	if (s->inlen - s->inpos < 4)
		return -1;
	p = s->in + s->inpos;
	len = (size_t)p[0] | (size_t)p[1] << 8;
	if (p[2] != (~p[0] & 0xff) || p[3] != (~p[1] & 0xff))
		return -1;
	s->inpos += 4;
	if (s->inlen - s->inpos < len || out_reserve(s->out, len) < 0)
		return -1;
	memcpy(s->out->p + s->out->len, s->in + s->inpos, len);
	s->out->len += len;
	s->inpos += len;
	return 0;
}

/* One length/distance pair: copy len bytes from dist back. */
static int copy_match(struct inflate *s, int sym, const struct huffman *distcode)
{
	static const short lbase[29] = { 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
		35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258 };
	static const short lext[29] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
		3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0 };
	static const short dbase[30] = { 1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
		257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577 };
	static const short dext[30] = { 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5,
		6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13 };
	int len, dist, extra;

	sym -= 257;
	if (sym >= 29 || getbits(s, lext[sym], &extra) < 0)
		return -1;
	len = lbase[sym] + extra;
	sym = decode(s, distcode);
	if (sym < 0 || sym >= 30 || getbits(s, dext[sym], &extra) < 0)
		return -1;
	dist = dbase[sym] + extra;
	if ((size_t)dist > s->out->len)
		return -1;
	while (len-- > 0)
		if (putbyte(s, s->out->p[s->out->len - (size_t)dist]) < 0)
			return -1;
	return 0;
}

/* Literals and matches until the end-of-block symbol. */
static int codes(struct inflate *s, const struct huffman *lencode, const struct huffman *distcode)
{
	int sym;

	for (;;) {
		sym = decode(s, lencode);
		if (sym < 0)
			return -1;
		if (sym == 256)
			return 0;
		if (sym < 256 ? putbyte(s, (unsigned char)sym) : copy_match(s, sym, distcode))
			return -1;
	}
}

static int fixed(struct inflate *s)
{
	struct huffman lencode, distcode;
	short lengths[FIXLCODES];
	int sym;

	for (sym = 0; sym < FIXLCODES; sym++)
		lengths[sym] = sym < 144 ? 8 : sym < 256 ? 9 : sym < 280 ? 7 : 8;
	construct(&lencode, lengths, FIXLCODES);
	for (sym = 0; sym < MAXDCODES; sym++)
		lengths[sym] = 5;
	construct(&distcode, lengths, MAXDCODES);
	return codes(s, &lencode, &distcode);
}

/* The literal/length and distance code lengths of a dynamic block, themselves coded. */
static int dynamic_lengths(struct inflate *s, short *lengths, int nlen, int ndist)
{
	static const short order[19] = { 16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2,
		14, 1, 15 };
	struct huffman lencode;
	int ncode, index, sym, rep, v, len;

	if (getbits(s, 4, &ncode) < 0)
		return -1;
	memset(lengths, 0, 19 * sizeof(*lengths));
	for (index = 0; index < ncode + 4; index++) {
		if (getbits(s, 3, &v) < 0)
			return -1;
		lengths[order[index]] = (short)v;
	}
	if (construct(&lencode, lengths, 19) != 0)
		return -1;
	for (index = 0; index < nlen + ndist;) {
		sym = decode(s, &lencode);
		if (sym < 0)
			return -1;
		if (sym < 16) {
			lengths[index++] = (short)sym;
			continue;
		}
		if (sym == 16 && index == 0)
			return -1;
		len = sym == 16 ? lengths[index - 1] : 0;
		if (getbits(s, sym == 16 ? 2 : sym == 17 ? 3 : 7, &rep) < 0)
			return -1;
		rep += sym == 18 ? 11 : 3;
		if (index + rep > nlen + ndist)
			return -1;
		while (rep-- > 0)
			lengths[index++] = (short)len;
	}
	return lengths[256] == 0 ? -1 : 0;
}

static int dynamic(struct inflate *s)
{
	struct huffman lencode, distcode;
	short lengths[MAXLCODES + MAXDCODES];
	int nlen, ndist, err;

	if (getbits(s, 5, &nlen) < 0 || getbits(s, 5, &ndist) < 0)
		return -1;
	nlen += 257;
	ndist += 1;
	if (nlen > MAXLCODES || ndist > MAXDCODES || dynamic_lengths(s, lengths, nlen, ndist) < 0)
		return -1;
	/* an incomplete code is allowed only when it is a single code of length 1 */
	err = construct(&lencode, lengths, nlen);
	if (err < 0 || (err > 0 && nlen != lencode.count[0] + lencode.count[1]))
		return -1;
	err = construct(&distcode, lengths + nlen, ndist);
	if (err < 0 || (err > 0 && ndist != distcode.count[0] + distcode.count[1]))
		return -1;
	return codes(s, &lencode, &distcode);
}

/* The deflate blocks at s->inpos, up to the last one. */
static int inflate_blocks(struct inflate *s)
{
	int last, type, r;

	do {
		if (getbits(s, 1, &last) < 0 || getbits(s, 2, &type) < 0)
			return -1;
		r = type == 0 ? stored(s) : type == 1 ? fixed(s) : type == 2 ? dynamic(s) : -1;
		if (r < 0)
			return -1;
	} while (!last);
	return 0;
}

static uint32_t crc32_of(const unsigned char *p, size_t len)
{
	uint32_t table[256], c;
	size_t i;
	int k;

	for (i = 0; i < 256; i++) {
		c = (uint32_t)i;
		for (k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		table[i] = c;
	}
	c = 0xffffffffu;
	for (i = 0; i < len; i++)
		c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Where the deflate data of a gzip member starts, or 0 for a bad header. */
static size_t gzip_header(const unsigned char *p, size_t len)
{
	size_t pos = 10;
	unsigned flg;

	if (len < 18 || p[0] != 0x1f || p[1] != 0x8b || p[2] != 8 || (p[3] & 0xe0) != 0)
		return 0;
	flg = p[3];
	if (flg & 4)				/* FEXTRA */
		pos += 2 + ((size_t)p[10] | (size_t)p[11] << 8);
	if (flg & 8)				/* FNAME */
		while (pos < len && p[pos++] != 0)
			;
	if (flg & 16)				/* FCOMMENT */
		while (pos < len && p[pos++] != 0)
			;
	if (flg & 2)				/* FHCRC */
		pos += 2;
	return pos < len ? pos : 0;
}

int tl_gunzip(const void *in, size_t len, size_t max, char **out, size_t *outlen)
{
	struct gz_out o = { NULL, 0, 0, max };
	struct inflate s = { in, len, 0, 0, 0, &o };

	*out = NULL;
	*outlen = 0;
	errno = 0;
	s.inpos = gzip_header(in, len);
	if (s.inpos == 0 || out_reserve(&o, 0) < 0 || inflate_blocks(&s) < 0 ||
	    len - s.inpos < 8 || le32(s.in + s.inpos) != crc32_of(o.p, o.len) ||
	    le32(s.in + s.inpos + 4) != (uint32_t)o.len) {
		if (errno != EFBIG && errno != ENOMEM)
			errno = EINVAL;
		free(o.p);
		return -1;
	}
	o.p[o.len] = '\0';
	*out = (char *)o.p;
	*outlen = o.len;
	return 0;
}
