/* fuzz_snmp — the /proc/net/{snmp,netstat} parser and the snapshot parser (probes/lib/pr_snmp.h)
 * on the same bytes, then lookups, deltas and formatting across the two sets, as `counters -d`
 * does.  Seeds: tests/data/proc/{snmp,netstat}-*, and snapshots made from them. */
#include "pr_snmp.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every counter of a: formatted, looked up in b, and its delta to b's formatted. */
static void cross(const struct pr_snmp *a, const struct pr_snmp *b)
{
	char v[PR_SNMP_VALUE_STR], d[PR_SNMP_DELTA_STR];
	const struct pr_snmp_counter *c;
	struct pr_snmp_delta delta;
	size_t i;

	for (i = 0; i < a->n; i++) {
		pr_snmp_fmt_value(&a->c[i], v);
		c = pr_snmp_find(b, a->c[i].name);
		if (c == NULL)
			continue;
		pr_snmp_delta(c, &a->c[i], &delta);
		pr_snmp_fmt_delta(&delta, d);
		(void)pr_snmp_delta_is_zero(&delta);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pr_snmp proc, snap;

	pr_snmp_init(&proc);
	pr_snmp_init(&snap);
	(void)pr_snmp_parse_proc(&proc, (const char *)data, size);
	(void)pr_snmp_parse_snapshot(&snap, (const char *)data, size);
	cross(&proc, &snap);
	cross(&snap, &proc);
	cross(&proc, &proc);
	pr_snmp_free(&proc);
	pr_snmp_free(&snap);
	return 0;
}
