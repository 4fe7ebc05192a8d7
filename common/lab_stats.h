/* lab_stats.h — order statistics over samples (latencies in ns, or any int64_t values).
 *
 * Percentiles are nearest-rank: the p-th percentile of n sorted values is the value at rank
 * ceil(p/100 * n), counted from 1 (so p50 of 300 values is the 150th, p95 the 285th, p100 the
 * largest).  No interpolation: every reported number is a value that was measured.
 *
 * Rules as in tl_util.h: nothing here prints or exits; failures return -1 and set errno.
 */
#ifndef LAB_STATS_H
#define LAB_STATS_H

#include <stddef.h>
#include <stdint.h>

/* The usual summary of one set of samples. */
struct lab_summary {
	size_t n;
	int64_t min, p50, p95, p99, max;
	double mean;
};

/* Sort v[0..n) ascending in place.  Cannot fail. */
void lab_sort_i64(int64_t *v, size_t n);

/* Nearest-rank percentile p (0 < p <= 100) of sorted[0..n), n > 0.  Cannot fail; p outside
 * (0, 100] is clamped to the smallest or largest value. */
int64_t lab_percentile_sorted(const int64_t *sorted, size_t n, double p);

/* Summarize v[0..n) without changing it (a sorted copy is made and freed).
 * Returns 0, or -1 with errno EINVAL (n == 0) or ENOMEM. */
int lab_summarize(const int64_t *v, size_t n, struct lab_summary *out);

/* How many of v[0..n) are strictly greater than limit.  Cannot fail. */
size_t lab_count_above(const int64_t *v, size_t n, int64_t limit);

/* How many of v[0..n) are strictly less than limit.  Cannot fail. */
size_t lab_count_below(const int64_t *v, size_t n, int64_t limit);

#endif
