/* fuzz_gunzip — the gzip reader machine uses for /proc/config.gz (common/tl_gunzip.h).
 * Seeds: the files of tests/data/proc gzip'ed with stored, fixed and dynamic blocks and every
 * header flag (fuzz/seeds.py).  The output limit is 1 MiB here, so that bombs stay fast. */
#include "tl_gunzip.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *out;
	size_t len;

	if (tl_gunzip(data, size, 1u << 20, &out, &len) == 0) {
		if (out[len] != '\0')	/* the contract: a NUL after the data */
			abort();
		free(out);
	} else if (out != NULL) {
		abort();
	}
	return 0;
}
