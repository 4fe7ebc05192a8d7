/* pr_snmp.c — /proc/net/snmp, /proc/net/netstat and saved snapshots parsed into named counters.
 *
 * The input is a buffer and a length, never a C string: the parser must survive any bytes (it is
 * a fuzz target).  A pair is taken whole or refused whole, so a set holds only complete pairs.
 */
#include "pr_snmp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Sized for a whole live snmp + netstat (about 320 counters) without growing. */
#define FIRST_CAP 512

/* A piece of the input buffer: not NUL-terminated. */
struct span {
	const char *p;
	size_t len;
};

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Names keep to printable ASCII so that an output line stays one "Name value" record. */
static int is_name_byte(char c)
{
	return (unsigned char)c > 0x20 && (unsigned char)c < 0x7f;
}

/* The next line of [*pos, end) without its '\n' (the last may have none); 0 at the end. */
static int next_line(const char **pos, const char *end, struct span *line)
{
	const char *p = *pos;
	const char *nl;

	if (p >= end)
		return 0;
	nl = memchr(p, '\n', (size_t)(end - p));
	line->p = p;
	line->len = nl ? (size_t)(nl - p) : (size_t)(end - p);
	*pos = nl ? nl + 1 : end;
	return 1;
}

/* The next blank-separated token of line from *off; 0 when there is none. */
static int next_token(const struct span *line, size_t *off, struct span *tok)
{
	size_t i = *off;

	while (i < line->len && is_blank(line->p[i]))
		i++;
	*off = i;
	if (i == line->len)
		return 0;
	tok->p = line->p + i;
	while (i < line->len && !is_blank(line->p[i]))
		i++;
	tok->len = (size_t)(line->p + i - tok->p);
	*off = i;
	return 1;
}

static int is_blank_line(const struct span *line)
{
	size_t off = 0;
	struct span tok;

	return !next_token(line, &off, &tok);
}

/* A decimal in [-2^63, 2^64-1] as sign and magnitude; -1 when it is anything else. */
static int parse_value(const struct span *t, uint64_t *mag, int *neg)
{
	uint64_t v = 0, limit = UINT64_MAX;
	size_t i = 0;

	*neg = t->len > 0 && t->p[0] == '-';
	if (*neg) {
		limit = (uint64_t)INT64_MAX + 1;
		i = 1;
	}
	if (i == t->len)
		return -1;
	for (; i < t->len; i++) {
		unsigned d = (unsigned)((unsigned char)t->p[i] - '0');

		if (d > 9 || v > (limit - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*mag = v;
	if (v == 0)
		*neg = 0;
	return 0;
}

/* prefix + column into out[PR_SNMP_NAME_MAX]; returns the length, or -1 when empty, too long
 * or a byte is not a name byte. */
static int join_name(const struct span *prefix, const struct span *col, char *out)
{
	size_t i;

	if (prefix->len + col->len >= PR_SNMP_NAME_MAX || prefix->len + col->len == 0)
		return -1;
	for (i = 0; i < prefix->len; i++)
		if (!is_name_byte(prefix->p[i]))
			return -1;
	for (i = 0; i < col->len; i++)
		if (!is_name_byte(col->p[i]))
			return -1;
	memcpy(out, prefix->p, prefix->len);
	memcpy(out + prefix->len, col->p, col->len);
	out[prefix->len + col->len] = '\0';
	return (int)(prefix->len + col->len);
}

/* FNV-1a: names are short and few, any decent spread will do. */
static size_t hash_name(const char *name)
{
	uint64_t h = 14695981039346656037u;

	for (; *name != '\0'; name++) {
		h ^= (unsigned char)*name;
		h *= 1099511628211u;
	}
	return (size_t)h;
}

/* The slot holding name, or the empty slot where it would go. */
static size_t slot_of(const struct pr_snmp *s, const char *name)
{
	size_t mask = s->nslot - 1;
	size_t i = hash_name(name) & mask;

	while (s->slot[i] != 0 && strcmp(s->c[s->slot[i] - 1].name, name) != 0)
		i = (i + 1) & mask;
	return i;
}

/* Rebuild the index at twice the size, inserting in set order (truncate_to relies on it). */
static int index_grow(struct pr_snmp *s)
{
	size_t nslot = s->nslot ? s->nslot * 2 : 4 * FIRST_CAP;
	uint32_t *slot = calloc(nslot, sizeof(*slot));
	size_t i;

	if (slot == NULL)
		return -1;
	free(s->slot);
	s->slot = slot;
	s->nslot = nslot;
	for (i = 0; i < s->n; i++)
		s->slot[slot_of(s, s->c[i].name)] = (uint32_t)(i + 1);
	return 0;
}

/* Room for one more counter and its slot (the index stays at most half full). */
static int reserve_one(struct pr_snmp *s)
{
	struct pr_snmp_counter *c;
	size_t cap;

	if (s->n >= PR_SNMP_COUNTERS_MAX) {
		errno = E2BIG;
		return -1;
	}
	if ((s->n + 1) * 2 > s->nslot && index_grow(s) < 0)
		return -1;
	if (s->n < s->cap)
		return 0;
	cap = s->cap ? s->cap * 2 : FIRST_CAP;
	c = realloc(s->c, cap * sizeof(*c));
	if (c == NULL)
		return -1;
	s->c = c;
	s->cap = cap;
	return 0;
}

/* Drop the counters added after the first n.  Clearing the newest slots first is exact for
 * linear probing: no older entry's probe path crosses a slot that was empty when it went in. */
static void truncate_to(struct pr_snmp *s, size_t n)
{
	while (s->n > n) {
		s->n--;
		s->slot[slot_of(s, s->c[s->n].name)] = 0;
	}
}

/* Append a counter whose name (len bytes, NUL-terminated) is already checked. */
static int add_checked(struct pr_snmp *s, const char *name, size_t len, uint64_t mag, int neg)
{
	struct pr_snmp_counter *c;
	size_t i;

	if (reserve_one(s) < 0)
		return -1;
	i = slot_of(s, name);
	if (s->slot[i] != 0) {
		errno = EEXIST;
		return -1;
	}
	c = &s->c[s->n];
	memcpy(c->name, name, len + 1);
	c->mag = mag;
	c->neg = neg && mag != 0;
	s->slot[i] = (uint32_t)(++s->n);
	return 0;
}

void pr_snmp_init(struct pr_snmp *s)
{
	memset(s, 0, sizeof(*s));
}

void pr_snmp_free(struct pr_snmp *s)
{
	free(s->c);
	free(s->slot);
	pr_snmp_init(s);
}

int pr_snmp_add(struct pr_snmp *s, const char *name, uint64_t mag, int neg)
{
	size_t len = strnlen(name, PR_SNMP_NAME_MAX), i;

	if (len == PR_SNMP_NAME_MAX) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (i = 0; i < len; i++)
		if (!is_name_byte(name[i]))
			break;
	if (len == 0 || i < len) {
		errno = EINVAL;
		return -1;
	}
	return add_checked(s, name, len, mag, neg);
}

const struct pr_snmp_counter *pr_snmp_find(const struct pr_snmp *s, const char *name)
{
	size_t i;

	if (s->nslot == 0) {
		errno = ENOENT;
		return NULL;
	}
	i = slot_of(s, name);
	if (s->slot[i] == 0) {
		errno = ENOENT;
		return NULL;
	}
	return &s->c[s->slot[i] - 1];
}

/* Add the columns of one header/values pair, all or none.  The first tokens (the prefixes)
 * are equal: the caller checked.  Returns -1 only for ENOMEM/E2BIG. */
static int take_pair(struct pr_snmp *s, const struct span *head, const struct span *vals)
{
	size_t ho = 0, vo = 0, start = s->n;
	struct span prefix = { NULL, 0 }, ht, vt;
	char name[PR_SNMP_NAME_MAX];
	uint64_t mag;
	int neg, hmore, vmore, len;

	if (!next_token(head, &ho, &prefix) || !next_token(vals, &vo, &vt) ||
	    prefix.len < 2 || prefix.p[prefix.len - 1] != ':')
		goto refuse;
	prefix.len--;
	for (;;) {
		hmore = next_token(head, &ho, &ht);
		vmore = next_token(vals, &vo, &vt);
		if (hmore != vmore)
			goto refuse;	/* lengths differ */
		if (!hmore)
			return 0;
		if (parse_value(&vt, &mag, &neg) < 0 || (len = join_name(&prefix, &ht, name)) < 0)
			goto refuse;
		if (add_checked(s, name, (size_t)len, mag, neg) < 0) {
			if (errno == ENOMEM || errno == E2BIG) {
				truncate_to(s, start);
				return -1;
			}
			goto refuse;
		}
	}
refuse:
	truncate_to(s, start);
	s->refused++;
	return 0;
}

static int same_first_token(const struct span *a, const struct span *b)
{
	size_t ao = 0, bo = 0;
	struct span at, bt;

	if (!next_token(a, &ao, &at) || !next_token(b, &bo, &bt))
		return 0;
	return at.len == bt.len && memcmp(at.p, bt.p, at.len) == 0;
}

int pr_snmp_parse_proc(struct pr_snmp *s, const char *buf, size_t len)
{
	const char *pos = buf, *end;
	struct span line, head = { NULL, 0 };
	int have_head = 0;

	if (len == 0)
		return 0;	/* buf may be NULL then */
	end = buf + len;
	while (next_line(&pos, end, &line)) {
		if (is_blank_line(&line))
			continue;
		if (!have_head) {
			head = line;
			have_head = 1;
		} else if (!same_first_token(&head, &line)) {
			s->refused++;	/* a header without its values: try this line as a header */
			head = line;
		} else {
			have_head = 0;
			if (take_pair(s, &head, &line) < 0)
				return -1;
		}
	}
	if (have_head)
		s->refused++;
	return 0;
}

/* One "Name value" line.  Returns -1 only for ENOMEM/E2BIG. */
static int take_snapshot_line(struct pr_snmp *s, const struct span *line)
{
	static const struct span no_prefix = { "", 0 };
	struct span tname, tval, extra;
	char name[PR_SNMP_NAME_MAX];
	size_t off = 0;
	uint64_t mag;
	int neg, len;

	if (!next_token(line, &off, &tname) || !next_token(line, &off, &tval) ||
	    next_token(line, &off, &extra) || parse_value(&tval, &mag, &neg) < 0 ||
	    (len = join_name(&no_prefix, &tname, name)) < 0) {
		s->refused++;
		return 0;
	}
	if (add_checked(s, name, (size_t)len, mag, neg) < 0) {
		if (errno == ENOMEM || errno == E2BIG)
			return -1;
		s->refused++;
	}
	return 0;
}

int pr_snmp_parse_snapshot(struct pr_snmp *s, const char *buf, size_t len)
{
	const char *pos = buf, *end;
	struct span line;

	if (len == 0)
		return 0;
	end = buf + len;
	while (next_line(&pos, end, &line))
		if (!is_blank_line(&line) && take_snapshot_line(s, &line) < 0)
			return -1;
	return 0;
}

void pr_snmp_delta(const struct pr_snmp_counter *before, const struct pr_snmp_counter *after,
		   struct pr_snmp_delta *d)
{
	d->carry = 0;
	if (after->neg == before->neg) {
		/* same sign: the larger magnitude decides the sign of the difference */
		if (after->mag >= before->mag) {
			d->mag = after->mag - before->mag;
			d->neg = after->neg;
		} else {
			d->mag = before->mag - after->mag;
			d->neg = !after->neg;
		}
	} else {
		d->mag = after->mag + before->mag;
		d->carry = d->mag < after->mag;
		d->neg = after->neg;
	}
	if (pr_snmp_delta_is_zero(d))
		d->neg = 0;
}

int pr_snmp_delta_is_zero(const struct pr_snmp_delta *d)
{
	return d->mag == 0 && !d->carry;
}

/* sign (none when 0), v in decimal, then the digit last when last >= 0, into buf. */
static char *fmt_decimal(char *buf, char sign, uint64_t v, int last)
{
	char digits[21], *p = digits + sizeof(digits);
	size_t n = 0;

	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	if (sign != 0)
		buf[n++] = sign;
	memcpy(buf + n, p, (size_t)(digits + sizeof(digits) - p));
	n += (size_t)(digits + sizeof(digits) - p);
	if (last >= 0)
		buf[n++] = (char)('0' + last);
	buf[n] = '\0';
	return buf;
}

char *pr_snmp_fmt_value(const struct pr_snmp_counter *c, char *buf)
{
	return fmt_decimal(buf, c->neg ? '-' : 0, c->mag, -1);
}

char *pr_snmp_fmt_delta(const struct pr_snmp_delta *d, char *buf)
{
	char sign = d->neg ? '-' : '+';
	uint64_t r, q;

	if (!d->carry)
		return fmt_decimal(buf, sign, d->mag, -1);
	/* 2^64 + mag = 10q + r, with 2^64 = 10 * 1844674407370955161 + 6; q fits in 64 bits */
	r = 6 + d->mag % 10;
	q = UINT64_C(1844674407370955161) + d->mag / 10 + r / 10;
	return fmt_decimal(buf, sign, q, (int)(r % 10));
}
