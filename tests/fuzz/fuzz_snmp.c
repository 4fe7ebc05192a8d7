/* fuzz_snmp — the /proc/net/{snmp,netstat} parser and the snapshot parser (probes/lib/tl_snmp.h)
 * on the same bytes, then lookups, deltas and formatting across the two sets, as `counters -d`
 * does.  Seeds: tests/data/proc/{snmp,netstat}-*, and snapshots made from them. */
#include "tl_snmp.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every counter of a: formatted, looked up in b, and its delta to b's formatted. */
static void cross(const struct tl_snmp *a, const struct tl_snmp *b)
{
	char v[TL_SNMP_VALUE_STR], d[TL_SNMP_DELTA_STR];
	const struct tl_snmp_counter *c;
	struct tl_snmp_delta delta;
	size_t i;

	for (i = 0; i < a->n; i++) {
		tl_snmp_fmt_value(&a->c[i], v);
		c = tl_snmp_find(b, a->c[i].name);
		if (c == NULL)
			continue;
		tl_snmp_delta(c, &a->c[i], &delta);
		tl_snmp_fmt_delta(&delta, d);
		(void)tl_snmp_delta_is_zero(&delta);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tl_snmp proc, snap;

	tl_snmp_init(&proc);
	tl_snmp_init(&snap);
	(void)tl_snmp_parse_proc(&proc, (const char *)data, size);
	(void)tl_snmp_parse_snapshot(&snap, (const char *)data, size);
	cross(&proc, &snap);
	cross(&snap, &proc);
	cross(&proc, &proc);
	tl_snmp_free(&proc);
	tl_snmp_free(&snap);
	return 0;
}
