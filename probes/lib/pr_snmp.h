/* pr_snmp.h — the kernel's SNMP/netstat counters by name, parsed from a buffer.
 *
 * /proc/net/snmp and /proc/net/netstat are pairs of lines, a header and its values:
 *
 *	Tcp: RtoAlgorithm RtoMin ... ActiveOpens ...
 *	Tcp: 1 200 ... 13 ...
 *
 * Each column becomes one counter named like nstat names it: prefix without the colon, then the
 * column name ("TcpActiveOpens", "TcpExtListenOverflows").  Columns are paired by position
 * inside a pair only; callers look counters up by name, never by position, because kernels add
 * columns.  A saved snapshot is one "Name value" line per counter.
 *
 * Input is untrusted: any bytes, any length, no NUL or trailing newline needed.  A pair (or a
 * snapshot line) that is malformed is refused whole and counted in `refused`; it never stops the
 * parse.  Refused: header and values of different lengths, a header without its values line
 * (prefixes differ), a value that is not a decimal number in [-2^63, 2^64-1], a name with bytes
 * outside printable ASCII or longer than PR_SNMP_NAME_MAX-1, a name seen before.
 *
 * Error rule for every function: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef PR_SNMP_H
#define PR_SNMP_H

#include <stddef.h>
#include <stdint.h>

#define PR_SNMP_NAME_MAX 64		/* longest name kept, with its NUL */
#define PR_SNMP_COUNTERS_MAX (1u << 20)	/* more than this in one set: E2BIG */
#define PR_SNMP_VALUE_STR 24		/* buffer for one formatted value ("-9223372036854775808") */
#define PR_SNMP_DELTA_STR 24		/* buffer for one formatted delta ("+27670116110564327423") */

/* One counter.  Values are unsigned 64-bit except Tcp MaxConn, which the kernel prints as -1:
 * a value is kept as sign and magnitude so both ranges fit. */
struct pr_snmp_counter {
	char name[PR_SNMP_NAME_MAX];
	uint64_t mag;
	int neg;			/* 1: the value is -mag (mag > 0) */
};

/* A set of counters in the order they were added, with a hash index on the name. */
struct pr_snmp {
	struct pr_snmp_counter *c;
	size_t n, cap;
	uint32_t *slot;			/* open addressing: position + 1, 0 = empty */
	size_t nslot;			/* a power of two, at least twice n */
	size_t refused;			/* malformed line pairs or snapshot lines skipped */
};

/* A difference after - before: (neg ? -1 : 1) * (carry * 2^64 + mag).  carry is needed only when
 * one side is negative; zero is never negative. */
struct pr_snmp_delta {
	uint64_t mag;
	int carry;
	int neg;
};

/* An empty set.  Cannot fail. */
void pr_snmp_init(struct pr_snmp *s);

/* Free what the set holds and leave it empty.  Cannot fail. */
void pr_snmp_free(struct pr_snmp *s);

/* Append the counters of /proc/net/snmp or /proc/net/netstat text in buf[0..len).
 * Malformed pairs are skipped and counted in s->refused.  Returns 0, or -1 with errno ENOMEM
 * or E2BIG (more than PR_SNMP_COUNTERS_MAX counters); the set stays usable either way. */
int pr_snmp_parse_proc(struct pr_snmp *s, const char *buf, size_t len);

/* Append the counters of a saved snapshot ("Name value" lines, blank lines ignored) in
 * buf[0..len).  Malformed lines are skipped and counted.  Errors as pr_snmp_parse_proc. */
int pr_snmp_parse_snapshot(struct pr_snmp *s, const char *buf, size_t len);

/* Append one counter.  Returns 0, or -1 with errno EINVAL (empty name or a byte outside
 * printable ASCII), ENAMETOOLONG, EEXIST (name already in the set), ENOMEM or E2BIG. */
int pr_snmp_add(struct pr_snmp *s, const char *name, uint64_t mag, int neg);

/* The counter called name, or NULL (errno ENOENT) when the set has none. */
const struct pr_snmp_counter *pr_snmp_find(const struct pr_snmp *s, const char *name);

/* after - before, exactly.  Cannot fail. */
void pr_snmp_delta(const struct pr_snmp_counter *before, const struct pr_snmp_counter *after,
		   struct pr_snmp_delta *d);

/* 1 when the delta is zero, else 0. */
int pr_snmp_delta_is_zero(const struct pr_snmp_delta *d);

/* A counter's value as decimal ("42", "-1") into buf[PR_SNMP_VALUE_STR]; returns buf. */
char *pr_snmp_fmt_value(const struct pr_snmp_counter *c, char *buf);

/* A delta as signed decimal ("+0", "+50", "-3") into buf[PR_SNMP_DELTA_STR]; returns buf. */
char *pr_snmp_fmt_delta(const struct pr_snmp_delta *d, char *buf);

#endif
