/* fxlib_check — checks of the fixture library's pure functions, run by
 * tests/test_fixtures_lib.py: prints one "name=value" line per fact for pytest to compare.
 *   transient=E1,E2,...   the errnos fx_accept_transient() calls transient (of errno 1..200)
 *   list <arg> n=N err=E bad=<item>   what fx_parse_list() makes of each argument
 *   steps <arg> n=N err=E bad=<item> why=<reason> <step>...   what fx_steps_parse() makes of
 *                         each argument, the steps printed back by fx_step_text()
 *   rank_mismatch=K       how many (n, p) with n in 1..3000 and whole p in 1..100 give a rank
 *                         other than ceil(p*n/100) (integer arithmetic)
 *   pct n=N p=P value=V   fx_percentile_sorted() of 1..N */
#include "fx_names.h"
#include "fx_sock.h"
#include "fx_stats.h"
#include "fx_steps.h"
#include "tl_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = { "pending", "wake" };

static void transient(void)
{
	const char *sep = "";

	printf("transient=");
	for (int e = 1; e <= 200; e++) {
		if (fx_accept_transient(e)) {
			printf("%s%s", sep, tl_errno_name(e));
			sep = ",";
		}
	}
	printf("\n");
}

static void list(const char *arg)
{
	int out[2], n;
	const char *bad = NULL;
	size_t badlen = 0;

	n = fx_parse_list(arg, names, 2, out, &bad, &badlen);
	printf("list '%s' n=%d err=%s bad='%.*s'", arg, n, n < 0 ? tl_errno_name(errno) : "0",
	       n < 0 ? (int)badlen : 0, n < 0 ? bad : "");
	for (int i = 0; i < n; i++)
		printf(" %s", names[out[i]]);
	printf("\n");
}

static void steps(const char *arg)
{
	struct fx_step out[FX_STEPS_MAX];
	const char *bad = NULL, *why = "";
	size_t badlen = 0;
	char text[32];
	int n;

	n = fx_steps_parse(arg, out, FX_STEPS_MAX, &bad, &badlen, &why);
	printf("steps '%s' n=%d err=%s bad='%.*s' why='%s'", arg, n,
	       n < 0 ? tl_errno_name(errno) : "0", n < 0 ? (int)badlen : 0, n < 0 ? bad : "",
	       n < 0 ? why : "");
	for (int i = 0; i < n; i++)
		printf(" %s", fx_step_text(&out[i], text, sizeof(text)) == 0 ? text : "?");
	printf("\n");
}

static int percentiles(void)
{
	enum { N = 3000 };
	int64_t *v = malloc(N * sizeof(*v));
	long mismatch = 0;

	if (v == NULL)
		return -1;
	for (int i = 0; i < N; i++)
		v[i] = i + 1;		/* value == rank */
	for (long n = 1; n <= N; n++)
		for (long p = 1; p <= 100; p++)
			mismatch += fx_percentile_sorted(v, (size_t)n, (double)p) != (p * n + 99) / 100;
	printf("rank_mismatch=%ld\n", mismatch);
	printf("pct n=300 p=95 value=%lld\n", (long long)fx_percentile_sorted(v, 300, 95));
	printf("pct n=1000 p=99.9 value=%lld\n", (long long)fx_percentile_sorted(v, 1000, 99.9));
	printf("pct n=7 p=50 value=%lld\n", (long long)fx_percentile_sorted(v, 7, 50));
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	transient();
	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "steps=", 6) == 0)
			steps(argv[i] + 6);
		else
			list(argv[i]);
	}
	return percentiles() < 0 || fflush(stdout) != 0;
}
