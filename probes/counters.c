/* counters — the kernel's SNMP and netstat counters by name: a snapshot, or a delta between a
 * saved snapshot and now.  See docs/counters.md.
 *
 * Reads /proc/thread-self/net/{snmp,netstat}: /proc/net follows the thread-group leader's
 * network namespace, thread-self follows this thread's (the one `ip netns exec` switched).
 * Cheap by design: no fork, no stdio on the hot path, each file read whole by tl_read_file()
 * (one open(), read() to the end of file), hash lookups, one write() for the whole output.
 */
#include "pr_file.h"
#include "pr_run.h"
#include "pr_snmp.h"
#include "tl_cli.h"
#include "tl_util.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SNMP_PATH	"/proc/thread-self/net/snmp"
#define NETSTAT_PATH	"/proc/thread-self/net/netstat"
#define BUF_START	(64 * 1024)
#define BUF_MAX		(64 * 1024 * 1024)

static struct env {
	const char *snmp;	/* NULL: not read */
	const char *netstat;	/* NULL: not read */
	const char *before;	/* -d: delta mode */
	const char *after;	/* -a: "now" is this snapshot */
	struct pr_snmp keys;	/* -k: always printed in delta mode */
	long long interval_ms;	/* -i: sample every so often, print what changed */
	long long count;	/* -c: stop after this many samples (0: until a signal) */
	volatile sig_atomic_t stop;
} env;

/* A growing buffer: the file read last, then the output (reused for every file). */
struct buf {
	char *p;
	size_t len, cap;
};

static void usage(void)
{
	fputs(
		"usage: counters [-S snmp] [-N netstat] [-d before [-a after] [-k name[,name...]]]\n"
		"       counters -i INTERVAL_MS [-c COUNT] [-k name[,name...]]\n"
		"Print the kernel's SNMP and netstat counters (nstat names), or how they changed.\n"
		"  (no -d)  snapshot: \"Name value\" for every counter, in file order\n"
		"  -d FILE  delta since snapshot FILE: \"Name +N\" or \"Name -N\" for each counter that\n"
		"           changed; \"Name only-now V\" or \"Name only-before V\" when one side lacks it\n"
		"  -a FILE  with -d: compare with snapshot FILE instead of the counters now\n"
		"  -k LIST  with -d or -i: always print these counters (comma-separated), \"Name +0\"\n"
		"           too; \"Name absent\" when neither side has one\n"
		"  -S FILE  read FILE instead of " SNMP_PATH " (alone: netstat is not read)\n"
		"  -N FILE  read FILE instead of " NETSTAT_PATH " (alone: snmp is not read)\n"
		"  -i MS    sample every MS ms: a \"sample=K t_ns=T\" line, then the delta since the\n"
		"           sample before, as with -d (1..3600000; until SIGINT/SIGTERM or -c)\n"
		"  -c N     with -i: stop after N samples (1..100000000)\n"
		"  -h       print this help\n", stdout);
}

static void add_keys(char *list)
{
	char *save = NULL, *name;

	if (list[0] == '\0' || list[0] == ',' || list[strlen(list) - 1] == ',' || strstr(list, ",,"))
		tl_errx(TL_EXIT_USAGE, "-k '%s': empty counter name", list);
	for (name = strtok_r(list, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save)) {
		if (pr_snmp_add(&env.keys, name, 0, 0) == 0 || errno == EEXIST)
			continue;
		if (errno == EINVAL || errno == ENAMETOOLONG)
			tl_errx(TL_EXIT_USAGE, "-k '%s': not a counter name", name);
		tl_err(1, "-k");
	}
}

static void parse_args(int argc, char **argv)
{
	int opt;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":S:N:d:a:k:i:c:h")) != -1) {
		if ((opt == 'S' || opt == 'N' || opt == 'd' || opt == 'a') && optarg[0] == '\0')
			tl_errx(TL_EXIT_USAGE, "-%c needs a file name", opt);
		switch (opt) {
		case 'S': env.snmp = optarg; break;
		case 'N': env.netstat = optarg; break;
		case 'd': env.before = optarg; break;
		case 'a': env.after = optarg; break;
		case 'k': add_keys(optarg); break;
		case 'i': env.interval_ms = tl_opt_ll("-i", optarg, 1, 3600000); break;
		case 'c': env.count = tl_opt_ll("-c", optarg, 1, 100000000); break;
		case 'h': usage(); exit(0);
		default: tl_opt_fail(opt);
		}
	}
	if (optind < argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s' (-h for help)", argv[optind]);
	if (env.interval_ms && (env.before || env.after || env.snmp || env.netstat))
		tl_errx(TL_EXIT_USAGE, "-i samples the live counters: it excludes -d, -a, -S and -N");
	if (env.count && !env.interval_ms)
		tl_errx(TL_EXIT_USAGE, "-c goes with -i");
	if (env.before == NULL && !env.interval_ms && (env.after != NULL || env.keys.n > 0))
		tl_errx(TL_EXIT_USAGE, "-a and -k need -d or -i");
	if (env.after != NULL && (env.snmp != NULL || env.netstat != NULL))
		tl_errx(TL_EXIT_USAGE, "-a compares two snapshots: it excludes -S and -N");
	if (env.snmp == NULL && env.netstat == NULL) {
		env.snmp = SNMP_PATH;
		env.netstat = NETSTAT_PATH;
	}
}

static int buf_grow(struct buf *b)
{
	size_t cap = b->cap ? b->cap * 2 : BUF_START;
	char *p;

	if (cap > BUF_MAX) {
		errno = EFBIG;
		return -1;
	}
	p = realloc(b->p, cap);
	if (p == NULL)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* Parse path into s, as /proc text (snapshot = 0) or as a saved snapshot.  A file that yields
 * no counter is an error: an empty set would report every counter as missing. */
static int load(struct pr_snmp *s, const char *path, int snapshot, struct buf *b)
{
	size_t n0 = s->n, refused0 = s->refused, len;
	char *p;
	int r;

	/* a file the user named must be a regular one (a FIFO would block, /dev/zero never end):
	 * tl_read_file() refuses anything else */
	r = tl_read_file(path, BUF_MAX, &p, &len);
	if (r < 0) {
		tl_warnx("%s: %s", path, pr_strerror(errno));
		return -1;
	}
	free(b->p);		/* b now holds the file; the output reuses it */
	b->p = p;
	b->len = len;
	b->cap = len + 1;
	/* counters ends every snapshot line with a newline: without one the file was cut short,
	 * and a delta against it would call every counter after the cut only-now */
	if (snapshot && b->len > 0 && b->p[b->len - 1] != '\n') {
		tl_warnx("%s: truncated snapshot (no newline at the end)", path);
		return -1;
	}
	r = snapshot ? pr_snmp_parse_snapshot(s, b->p, b->len) : pr_snmp_parse_proc(s, b->p, b->len);
	if (r < 0) {
		tl_warn("%s", path);
		return -1;
	}
	if (s->n == n0) {	/* one line: the reason, and what was skipped on the way */
		tl_warnx("%s: no counters%s", path, s->refused > refused0 ? " (only malformed lines)" : "");
		return -1;
	}
	if (s->refused > refused0)
		tl_warnx("%s: skipped %zu malformed %s", path, s->refused - refused0,
			 snapshot ? "line(s)" : "line pair(s)");
	return 0;
}

static int load_now(struct pr_snmp *now, struct buf *b)
{
	if (env.after != NULL)
		return load(now, env.after, 1, b);
	if (env.snmp != NULL && load(now, env.snmp, 0, b) < 0)
		return -1;
	if (env.netstat != NULL && load(now, env.netstat, 0, b) < 0)
		return -1;
	return 0;
}

/* Append "a b c\n" (c may be NULL) to o. */
static int out_line(struct buf *o, const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = c ? strlen(c) + 1 : 0;

	while (o->cap - o->len < la + lb + lc + 2)
		if (buf_grow(o) < 0)
			return -1;
	memcpy(o->p + o->len, a, la);
	o->p[o->len + la] = ' ';
	memcpy(o->p + o->len + la + 1, b, lb);
	o->len += la + 1 + lb;
	if (c != NULL) {
		o->p[o->len] = ' ';
		memcpy(o->p + o->len + 1, c, lc - 1);
		o->len += lc;
	}
	o->p[o->len++] = '\n';
	return 0;
}

static int put_snapshot(const struct pr_snmp *s, struct buf *o)
{
	char v[PR_SNMP_VALUE_STR];
	size_t i;

	for (i = 0; i < s->n; i++)
		if (out_line(o, s->c[i].name, pr_snmp_fmt_value(&s->c[i], v), NULL) < 0)
			return -1;
	return 0;
}

/* Counters of now that changed or are keys, in now's order. */
static int put_changed(const struct pr_snmp *before, const struct pr_snmp *now, struct buf *o)
{
	const struct pr_snmp_counter *b, *c;
	char v[PR_SNMP_DELTA_STR];
	struct pr_snmp_delta d;
	size_t i;
	int r = 0;

	for (i = 0; i < now->n && r == 0; i++) {
		c = &now->c[i];
		b = pr_snmp_find(before, c->name);
		if (b == NULL) {
			r = out_line(o, c->name, "only-now", pr_snmp_fmt_value(c, v));
			continue;
		}
		pr_snmp_delta(b, c, &d);
		if (!pr_snmp_delta_is_zero(&d) || pr_snmp_find(&env.keys, c->name) != NULL)
			r = out_line(o, c->name, pr_snmp_fmt_delta(&d, v), NULL);
	}
	return r;
}

/* put_changed, then counters only before has, then keys that neither side has. */
static int put_delta(const struct pr_snmp *before, const struct pr_snmp *now, struct buf *o)
{
	const struct pr_snmp_counter *c;
	char v[PR_SNMP_VALUE_STR];
	size_t i;

	if (put_changed(before, now, o) < 0)
		return -1;
	for (i = 0; i < before->n; i++) {
		c = &before->c[i];
		if (pr_snmp_find(now, c->name) == NULL &&
		    out_line(o, c->name, "only-before", pr_snmp_fmt_value(c, v)) < 0)
			return -1;
	}
	for (i = 0; i < env.keys.n; i++) {
		c = &env.keys.c[i];
		if (pr_snmp_find(now, c->name) == NULL && pr_snmp_find(before, c->name) == NULL &&
		    out_line(o, c->name, "absent", NULL) < 0)
			return -1;
	}
	return 0;
}

/* The output of this run into b (reused: every file is parsed by now), then to stdout. */
static int output(const struct pr_snmp *before, const struct pr_snmp *now, struct buf *b)
{
	int r;

	b->len = 0;
	r = env.before == NULL ? put_snapshot(now, b) : put_delta(before, now, b);
	if (r < 0) {
		tl_warn("output");
		return -1;
	}
	if (tl_write_all(STDOUT_FILENO, b->p, b->len) < 0) {
		tl_warn("stdout");
		return -1;
	}
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	env.stop = 1;
}

/* Empty s for the next sample but keep its arrays: the live files list the same counters every
 * time, so a sample need not allocate and clear a fresh set (pr_snmp.h: slot 0 is empty). */
static void sample_reset(struct pr_snmp *s)
{
	if (s->slot != NULL)
		memset(s->slot, 0, s->nslot * sizeof(*s->slot));
	s->n = 0;
	s->refused = 0;
}

/* put_delta between two samples of the live files.  The kernel prints a fixed list, so both
 * samples normally hold the same names in the same order: then counters pair by position, not by
 * two hash lookups each, and no counter can be only-now or only-before.  The lines, and their
 * order, are put_delta's. */
static int put_sample_delta(const struct pr_snmp *prev, const struct pr_snmp *now, struct buf *o)
{
	char v[PR_SNMP_DELTA_STR];
	struct pr_snmp_delta d;
	size_t i;

	if (prev->n != now->n)
		return put_delta(prev, now, o);
	for (i = 0; i < now->n; i++)
		if (strcmp(prev->c[i].name, now->c[i].name) != 0)
			return put_delta(prev, now, o);
	for (i = 0; i < now->n; i++) {
		pr_snmp_delta(&prev->c[i], &now->c[i], &d);
		if ((!pr_snmp_delta_is_zero(&d) || pr_snmp_find(&env.keys, now->c[i].name) != NULL) &&
		    out_line(o, now->c[i].name, pr_snmp_fmt_delta(&d, v), NULL) < 0)
			return -1;
	}
	for (i = 0; i < env.keys.n; i++)
		if (pr_snmp_find(now, env.keys.c[i].name) == NULL &&
		    out_line(o, env.keys.c[i].name, "absent", NULL) < 0)
			return -1;
	return 0;
}

/* -i: the counters every interval, each sample's delta against the one before (one read of each
 * file per sample, in this process: the cheap way to watch counters move). */
static int sample_loop(struct pr_snmp *prev, struct pr_snmp *now, struct buf *b)
{
	struct timespec next, step = { env.interval_ms / 1000, env.interval_ms % 1000 * 1000000 };
	struct pr_snmp tmp;
	char sample[32], t[32];
	long long k;

	if (load_now(prev, b) < 0 || clock_gettime(CLOCK_MONOTONIC, &next) < 0)
		return -1;
	for (k = 1; !env.stop && (env.count == 0 || k <= env.count); k++) {
		next.tv_sec += step.tv_sec + (next.tv_nsec + step.tv_nsec) / 1000000000;
		next.tv_nsec = (next.tv_nsec + step.tv_nsec) % 1000000000;
		if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) != 0 && env.stop)
			break;
		sample_reset(now);
		if (load_now(now, b) < 0)
			return -1;
		b->len = 0;
		snprintf(sample, sizeof(sample), "sample=%lld", k);
		snprintf(t, sizeof(t), "t_ns=%lld", (long long)tl_now_ns());
		if (out_line(b, sample, t, NULL) < 0 || put_sample_delta(prev, now, b) < 0 ||
		    tl_write_all(STDOUT_FILENO, b->p, b->len) < 0) {
			tl_warn("output");
			return -1;
		}
		tmp = *prev;
		*prev = *now;
		*now = tmp;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct pr_snmp now, before;
	struct buf b = { NULL, 0, 0 };
	int status = 1;

	tl_set_progname(argv[0]);
	pr_snmp_init(&env.keys);
	pr_snmp_init(&now);
	pr_snmp_init(&before);
	parse_args(argc, argv);
	if (env.interval_ms) {
		if (pr_catch_stop(on_signal) < 0)
			tl_err(1, "sigaction");
		status = sample_loop(&before, &now, &b) < 0;
		goto cleanup;
	}
	if (load_now(&now, &b) < 0)
		goto cleanup;
	if (env.before != NULL && load(&before, env.before, 1, &b) < 0)
		goto cleanup;
	if (output(&before, &now, &b) < 0)
		goto cleanup;
	status = 0;
cleanup:
	pr_snmp_free(&before);
	pr_snmp_free(&now);
	pr_snmp_free(&env.keys);
	free(b.p);
	return status;
}
