/* fuzz_args — the checked parsers every program runs on its command line: numbers
 * (tl_parse_ll, as tl_opt_ll and tl_opt_port call it), name lists (fx_parse_list, the fixtures'
 * -m), peer's step lists (fx_steps_parse) and TCP state names (tl_state_parse). */
#include "fx_names.h"
#include "fx_steps.h"
#include "tl_diag.h"
#include "tl_util.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A step list that parses has 1..FX_STEPS_MAX steps, close only last, each printable; one that
 * does not names an item inside s. */
static void check_steps(const char *s)
{
	struct fx_step out[FX_STEPS_MAX];
	const char *bad, *why;
	char text[32];
	size_t badlen;
	int n = fx_steps_parse(s, out, FX_STEPS_MAX, &bad, &badlen, &why);

	if (n < 0) {
		if (bad < s || bad + badlen > s + strlen(s) || why == NULL)
			abort();
		return;
	}
	if (n < 1 || n > FX_STEPS_MAX)
		abort();
	for (int i = 0; i < n; i++)
		if (fx_step_text(&out[i], text, sizeof(text)) < 0 ||
		    (out[i].op == FX_STEP_CLOSE && i != n - 1))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = { "so-error", "poll-only", "wait-so-error", "so-type",
				      "blocking" };
#define N_NAMES	(sizeof(names) / sizeof(names[0]))

/* A list that parses has 1..N_NAMES known items, none twice, none empty. */
static void check_list(const char *s)
{
	int out[N_NAMES], n;
	const char *bad;
	size_t badlen;

	n = fx_parse_list(s, names, N_NAMES, out, &bad, &badlen);
	if (n < 0) {
		if (bad < s || bad + badlen > s + strlen(s))
			abort();
		return;
	}
	if (n < 1 || n > (int)N_NAMES || strstr(s, ",,") != NULL || s[0] == ',' ||
	    s[strlen(s) - 1] == ',')
		abort();
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (out[i] == out[j] || out[i] < 0 || out[i] >= (int)N_NAMES)
				abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	long long v;
	uint32_t mask;

	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';		/* argv strings end at their first NUL */
	if (tl_parse_ll(s, -1, 10000000, &v) == 0 && (v < -1 || v > 10000000))
		abort();
	(void)tl_parse_ll(s, INT64_MIN, INT64_MAX, &v);
	if (tl_parse_ll(s, 1, 65535, &v) == 0 && (v < 1 || v > 65535))
		abort();
	check_list(s);
	check_steps(s);
	(void)tl_state_parse(s, &mask);
	free(s);
	return 0;
}
