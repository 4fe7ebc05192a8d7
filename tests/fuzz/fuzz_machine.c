/* fuzz_machine — the machine probe's parsers (probes/lib/pr_machine.h) on the bytes of a file it
 * reads: a kernel config (CONFIG_HZ=), the same bytes inflated by zlib as /proc/config.gz is, a
 * CPU list (/sys/devices/system/cpu/online), /proc/meminfo's MemTotal and the one-line check of a value (osrelease, a
 * sysctl).  Seeds: the files of tests/data/proc/root-6.1, and the proc files gzip'ed with stored,
 * fixed and dynamic blocks and every header flag (seeds.py).  The output limit is 1 MiB here,
 * so that gzip bombs stay fast. */
#include "pr_machine.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), *out;
	long long hz;
	size_t len;
	unsigned long long kb;
	long n;

	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (pr_find_hz(s, size, &hz) == 0 && (hz < 1 || hz > 100000))
		abort();
	if (pr_one_line(s, size, 0) == 0 && (strchr(s, '\n') != NULL || strchr(s, '\t') != NULL))
		abort();	/* the promise: one line, blanks folded */
	if (pr_one_line(s, strlen(s), 1) == 0 && strchr(s, ' ') != NULL)
		abort();
	if (pr_meminfo_total(s, size, &kb) == 0 && (kb == 0 || kb > 1ULL << 50))
		abort();
	n = pr_count_cpus(s);
	if (n == 0 || n < -1)
		abort();
	free(s);
	if (pr_gunzip(data, size, 1u << 20, &out, &len) == 0) {
		if (out[len] != '\0' || len > 1u << 20)	/* the contract: a NUL after the data */
			abort();
		(void)pr_find_hz(out, len, &hz);
		free(out);
	} else if (out != NULL) {
		abort();
	}
	return 0;
}
