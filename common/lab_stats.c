/* lab_stats.c — nearest-rank percentiles and summaries of int64_t samples. */
#include "lab_stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

void lab_sort_i64(int64_t *v, size_t n)
{
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_i64);
}

int64_t lab_percentile_sorted(const int64_t *sorted, size_t n, double p)
{
	/* p * n first: exact for whole p, and the tolerance absorbs p like 99.9. */
	double exact = p * (double)n / 100.0 - 1e-9;
	size_t rank;

	if (p <= 0.0)
		return sorted[0];
	if (p >= 100.0)
		return sorted[n - 1];
	rank = (size_t)exact;
	if ((double)rank < exact)
		rank++;		/* ceil */
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

int lab_summarize(const int64_t *v, size_t n, struct lab_summary *out)
{
	int64_t *s;
	double sum = 0.0;

	if (n == 0) {
		errno = EINVAL;
		return -1;
	}
	if ((s = malloc(n * sizeof(*s))) == NULL)
		return -1;
	memcpy(s, v, n * sizeof(*s));
	lab_sort_i64(s, n);
	for (size_t i = 0; i < n; i++)
		sum += (double)s[i];
	out->n = n;
	out->min = s[0];
	out->p50 = lab_percentile_sorted(s, n, 50);
	out->p95 = lab_percentile_sorted(s, n, 95);
	out->p99 = lab_percentile_sorted(s, n, 99);
	out->max = s[n - 1];
	out->mean = sum / (double)n;
	free(s);
	return 0;
}

size_t lab_count_above(const int64_t *v, size_t n, int64_t limit)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += v[i] > limit;
	return k;
}

size_t lab_count_below(const int64_t *v, size_t n, int64_t limit)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += v[i] < limit;
	return k;
}
