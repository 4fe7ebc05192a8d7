/* sockwatch — sample TCP sockets through sock_diag and print a line on each change.
 *
 * Every interval it asks the kernel (one filtered dump per family) for the sockets that match,
 * and prints an event when a socket appears, disappears, or changes state, timer kind or
 * retransmit count.  The fields are the kernel's own: idiag_timer, idiag_expires (raw ms),
 * idiag_retrans, idiag_rqueue/wqueue, and tcp_info's backoff/rto/total_retrans.
 */
#include "pr_file.h"
#include "tl_diag.h"
#include "tl_cli.h"
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "usage: sockwatch [-1ae46] [-i INTERVAL_US] [-s STATE]... [-p DPORT] [-P SPORT]\n" \
	      "                 [-d DURATION_MS] [-w WAIT_MS] [-r RECORD_FILE | -R REPLAY_FILE]\n"

/* The sockets of one sample, sorted by cookie so two samples can be merged in one pass. */
struct sample {
	struct tl_sock *s;
	size_t n, cap;
};

static struct env {
	struct tl_diag_filter flt;
	long long interval_us, duration_ms, wait_ms;
	int once, all, exit_when_gone;
	const char *record, *replay;
	int64_t t0_ns, now_ns;
	long long sample_no;
	struct sample prev, cur;
	int seen_any;
	volatile sig_atomic_t stop;
} env = { .interval_us = 1000 };

_Noreturn static void usage(FILE *f, int status)
{
	fputs(USAGE, f);
	if (f == stdout)
		fputs("  -1  print the matching sockets once and exit (with -w: wait for one)\n"
		      "  -a  print every sample, not only changes\n"
		      "  -e  exit once a socket was seen and none matches any more\n"
		      "  -4, -6  IPv4 or IPv6 only (default both)\n"
		      "  -i  sampling interval in microseconds (default 1000)\n"
		      "  -s  state to match, as ss(8) spells it (syn-sent, listen, estab…); repeatable\n"
		      "  -p, -P  destination / source port to match (filtered in the kernel)\n"
		      "  -d  stop after this many milliseconds\n"
		      "  -w  with -1: wait up to this many milliseconds for a match (exit 1 if none)\n"
		      "  -r  append the raw netlink replies to RECORD_FILE\n"
		      "  -R  decode a recorded file instead of asking the kernel\n", f);
	exit(status);
}

static int cmp_cookie(const void *a, const void *b)
{
	const struct tl_sock *x = a, *y = b;

	return (x->cookie > y->cookie) - (x->cookie < y->cookie);
}

static int collect(const struct tl_sock *s, void *data)
{
	struct sample *smp = data;
	struct tl_sock *grown;

	if (smp->n == smp->cap) {
		size_t cap = smp->cap ? smp->cap * 2 : 64;

		grown = realloc(smp->s, cap * sizeof(*grown));
		if (grown == NULL)
			return -1;
		smp->s = grown;
		smp->cap = cap;
	}
	smp->s[smp->n++] = *s;
	return 0;
}

static void print_event(const char *event, const struct tl_sock *s)
{
	char local[64], peer[64];

	if (env.replay == NULL)
		printf("t_s=%.6f t_ns=%" PRId64 " ", (env.now_ns - env.t0_ns) / 1e9, env.now_ns);
	printf("sample=%lld event=%s state=%s timer=%s expires_ms=%u retrans=%u rq=%u wq=%u "
	       "local=%s peer=%s", env.sample_no, event, tl_state_name(s->state),
	       tl_timer_name(s->timer), s->expires_ms, s->retrans, s->rqueue, s->wqueue,
	       tl_sock_addr(s, 0, local, sizeof(local)), tl_sock_addr(s, 1, peer, sizeof(peer)));
	if (s->has_info)
		printf(" backoff=%u rto_ms=%u total_retrans=%u total_rto=%u", s->info.backoff,
		       s->info.rto_us / 1000, s->info.total_retrans, s->info.total_rto);
	printf(" inode=%u\n", s->inode);
}

static int changed(const struct tl_sock *a, const struct tl_sock *b)
{
	return a->state != b->state || a->timer != b->timer || a->retrans != b->retrans;
}

/* Merge the previous and the current sample (both sorted by cookie) and print the differences. */
static void report_changes(void)
{
	const struct sample *p = &env.prev, *c = &env.cur;
	size_t i = 0, j = 0;

	while (i < p->n || j < c->n) {
		int d = i == p->n ? 1 : j == c->n ? -1 : cmp_cookie(&p->s[i], &c->s[j]);

		if (d < 0) {
			print_event("gone", &p->s[i++]);
		} else if (d > 0) {
			print_event("new", &c->s[j++]);
		} else {
			if (env.all || changed(&p->s[i], &c->s[j]))
				print_event(env.all ? "sample" : "change", &c->s[j]);
			i++;
			j++;
		}
	}
	fflush(stdout);
}

/* One sample is in env.cur: print what changed, then keep it as the previous one. */
static int end_sample(void *unused)
{
	struct sample tmp;
	size_t k;

	(void)unused;
	if (env.cur.n > 1)	/* qsort(NULL, 0, …) is undefined */
		qsort(env.cur.s, env.cur.n, sizeof(*env.cur.s), cmp_cookie);
	if (env.once) {
		for (k = 0; k < env.cur.n; k++)
			print_event("snap", &env.cur.s[k]);
		fflush(stdout);
	} else {
		report_changes();
	}
	if (env.cur.n > 0)
		env.seen_any = 1;
	tmp = env.prev;
	env.prev = env.cur;
	env.cur = tmp;
	env.cur.n = 0;
	env.sample_no++;
	return 0;
}

/* The first line of a watch: the filter, after the first sample proved the kernel answers, so a
 * script can start the actor once it sees it. */
static void print_ready(void)
{
	printf("ready t_ns=%" PRId64 " interval_us=%lld family=%s states=0x%x dport=%u sport=%u\n",
	       env.t0_ns, env.interval_us, env.flt.family == AF_INET ? "inet" :
	       env.flt.family == AF_INET6 ? "inet6" : "both", env.flt.states ? env.flt.states :
	       TL_STATES_ALL, env.flt.dport, env.flt.sport);
}

static void on_signal(int sig)
{
	(void)sig;
	env.stop = 1;
}

static int add_state(const char *name)
{
	uint32_t mask;

	if (tl_state_parse(name, &mask) < 0)
		return -1;
	env.flt.states |= mask;
	return 0;
}

static void parse_args(int argc, char **argv)
{
	int opt;

	opterr = 0;	/* one line of our own on a bad option, not getopt's plus the usage */
	while ((opt = getopt(argc, argv, ":1ae46hi:s:p:P:d:w:r:R:")) != -1) {
		if ((opt == 'r' || opt == 'R') && optarg[0] == '\0')
			tl_errx(TL_EXIT_USAGE, "-%c needs a file name", opt);
		switch (opt) {
		case '1': env.once = 1; break;
		case 'a': env.all = 1; break;
		case 'e': env.exit_when_gone = 1; break;
		case '4': env.flt.family = AF_INET; break;
		case '6': env.flt.family = AF_INET6; break;
		case 'i': env.interval_us = tl_opt_ll("-i", optarg, 1, 10000000); break;
		case 's':
			if (add_state(optarg) < 0)
				tl_errx(TL_EXIT_USAGE, "-s '%s': not a TCP state (e.g. syn-sent)", optarg);
			break;
		case 'p': env.flt.dport = tl_opt_port("-p", optarg); break;
		case 'P': env.flt.sport = tl_opt_port("-P", optarg); break;
		case 'd': env.duration_ms = tl_opt_ll("-d", optarg, 1, 86400000LL); break;
		case 'w': env.wait_ms = tl_opt_ll("-w", optarg, 1, 86400000LL); break;
		case 'r': env.record = optarg; break;
		case 'R': env.replay = optarg; break;
		case 'h': usage(stdout, 0);
		default: tl_opt_fail(opt);
		}
	}
	if (optind != argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
	if (env.record && env.replay)
		tl_errx(TL_EXIT_USAGE, "-r and -R exclude each other");
	if (env.wait_ms && !env.once)
		tl_errx(TL_EXIT_USAGE, "-w goes with -1");
}

/* Sleep until the next multiple of the interval after t0; a late sample skips, never bunches. */
static void wait_next(void)
{
	int64_t step = env.interval_us * 1000, now = tl_now_ns();
	int64_t next = env.t0_ns + ((now - env.t0_ns) / step + 1) * step;
	struct timespec ts = { .tv_sec = next / 1000000000, .tv_nsec = next % 1000000000 };

	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* EINTR: stop is set */
}

/* Why the live loop should end now, or NULL to go on. */
static int done(void)
{
	int64_t elapsed_ms = (env.now_ns - env.t0_ns) / 1000000;

	if (env.stop)
		return 1;
	if (env.once)
		return env.cur.n > 0 || env.prev.n > 0 || !env.wait_ms || elapsed_ms >= env.wait_ms;
	if (env.duration_ms && elapsed_ms >= env.duration_ms)
		return 1;
	return env.exit_when_gone && env.seen_any && env.prev.n == 0;
}

/* One line for a failed tl_diag_query(): the record file's write, or the query itself. */
static void query_failed(FILE *rec)
{
	if (rec != NULL && ferror(rec))
		tl_warn("%s: cannot write the record", env.record);
	else
		tl_warn("sock_diag query%s", errno == ENOENT ? " (is the tcp_diag module loaded?)" : "");
}

static int run_live(void)
{
	struct tl_diag *d = tl_diag_open();
	FILE *rec = NULL;
	int ret = -1;

	if (d == NULL) {
		tl_warn("cannot open a NETLINK_SOCK_DIAG socket");
		return -1;
	}
	if (env.record != NULL) {
		int fd = pr_open_append(env.record);

		if (fd < 0 || (rec = fdopen(fd, "a")) == NULL) {
			tl_warnx("%s: %s", env.record, pr_strerror(errno));
			if (fd >= 0)
				close(fd);
			goto cleanup;
		}
		tl_diag_record(d, rec);
	}
	env.t0_ns = tl_now_ns();
	for (;;) {
		env.now_ns = tl_now_ns();
		if (tl_diag_query(d, &env.flt, collect, &env.cur) < 0) {
			query_failed(rec);
			goto cleanup;
		}
		if (env.sample_no == 0 && !env.once)
			print_ready();
		end_sample(NULL);
		if (done())
			break;
		wait_next();
	}
	if (!env.once)
		printf("end t_ns=%" PRId64 " samples=%lld\n", env.now_ns, env.sample_no);
	ret = 0;
cleanup:
	tl_diag_close(d);
	if (rec != NULL && fclose(rec) != 0 && ret == 0) {
		tl_warn("%s: cannot write the record", env.record);
		ret = -1;
	}
	return ret;
}

static int run_replay(void)
{
	char *buf = NULL;
	size_t len;
	int n;

	if (tl_read_file(env.replay, 256u << 20, &buf, &len) < 0) {
		tl_warnx("%s: %s", env.replay, pr_strerror(errno));
		return -1;
	}
	n = tl_diag_replay(buf, len, collect, &env.cur, end_sample, NULL);
	free(buf);
	if (n < 0) {
		tl_warnx("%s: %s", env.replay, errno == EBADMSG ?
			 "not a complete sock_diag record (truncated or garbled)" : strerror(errno));
		return -1;
	}
	if (n == 0) {
		tl_warnx("%s: no samples in the record", env.replay);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	int ret;

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	/* only the live loop ends on a signal (with its end line); a replay just dies */
	if (!env.replay && (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0))
		tl_err(1, "sigaction");
	ret = env.replay ? run_replay() : run_live();
	free(env.prev.s);
	free(env.cur.s);
	if (ret < 0)
		return 1;
	if (fflush(stdout) == EOF || ferror(stdout)) {
		tl_warn("stdout");
		return 1;
	}
	if (env.once && env.wait_ms && !env.seen_any)
		return 1;	/* waited, nothing matched */
	return 0;
}
