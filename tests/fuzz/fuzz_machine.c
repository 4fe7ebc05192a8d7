/* fuzz_machine — the machine probe's parsers of files it reads (probes/machine.c, included so
 * its static functions are reachable): a CPU list (/sys/devices/system/cpu/online), a kernel
 * config (CONFIG_HZ=), and the one-line cleanup of a sysctl value.  Seeds: the files of
 * tests/data/proc/root-6.1. */
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int machine_main(int argc, char **argv);

#define main machine_main
#include "../../probes/machine.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct blob b = { NULL, 0, 0 };
	long long hz;

	if (blob_reserve(&b, size, FILE_MAX) < 0)
		return 0;
	memcpy(b.p, data, size);
	b.len = size;
	b.p[size] = '\0';
	(void)find_hz(&b, &hz);
	(void)count_cpus(one_line(&b));
	free(b.p);
	return 0;
}
