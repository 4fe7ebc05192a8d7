/* fuzz_args — the checked parsers every program runs on its command line: numbers
 * (tl_parse_ll, tl_parse_port) and TCP state names (tl_state_parse). */
#include "tl_diag.h"
#include "tl_util.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	long long v;
	uint16_t port;
	uint32_t mask;

	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';		/* argv strings end at their first NUL */
	if (tl_parse_ll(s, -1, 10000000, &v) == 0 && (v < -1 || v > 10000000))
		abort();
	(void)tl_parse_ll(s, INT64_MIN, INT64_MAX, &v);
	if (tl_parse_port(s, &port) == 0 && port == 0)
		abort();
	(void)tl_state_parse(s, &mask);
	free(s);
	return 0;
}
