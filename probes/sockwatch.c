/* sockwatch — sample TCP sockets through sock_diag and print a line on each change.
 *
 * Every interval it asks the kernel (one filtered dump per family) for the sockets that match,
 * and prints an event when a socket appears, disappears, or changes state, timer kind or
 * retransmit count (or, with -c, any of the fields named there).  The fields are the kernel's
 * own: idiag_timer, idiag_expires (raw ms), idiag_retrans, idiag_rqueue/wqueue, tcp_info's, and
 * INET_DIAG_SKMEMINFO's.
 *
 * With -T MAX_MS (timer-led), while every socket of the last sample has a timer armed, it
 * sleeps until one interval before the earliest of them is due (idiag_expires), at most MAX_MS,
 * and samples every interval again from there: a change that only a timer makes is seen as
 * soon as without -T, anything else (a packet, a close) up to MAX_MS late.  For the sockets
 * only a timer changes: TIME-WAIT, a SYN-SENT that nothing answers.
 */
#include "pr_file.h"
#include "pr_run.h"
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

#define USAGE "usage: sockwatch [-1ae46] [-i INTERVAL_US] [-T MAX_MS] [-s STATE]... [-p DPORT]\n" \
	      "                 [-P SPORT] [-c FIELD[,FIELD]...] [-d DURATION_MS] [-w WAIT_MS]\n" \
	      "                 [-r RECORD_FILE | -R REPLAY_FILE]\n"

/* The fields -c can add to what counts as a change: name and value. */
static const char *const change_names[] = {
	"rq", "wq", "snd_wnd", "rcv_wnd", "probes", "unacked", "notsent", "backoff", "rmem",
	"wqueued", "drops", "ulp",
};
#define N_CHANGE (sizeof(change_names) / sizeof(change_names[0]))

/* The sockets of one sample, sorted by cookie so two samples can be merged in one pass. */
struct sample {
	struct tl_sock *s;
	size_t n, cap;
};

static struct env {
	struct tl_diag_filter flt;
	long long interval_us, duration_ms, wait_ms;
	long long timer_led_ms;	/* -T: the longest sleep while every socket has a timer armed */
	int once, all, exit_when_gone;
	const char *record, *replay;
	int64_t t0_ns, now_ns;
	long long sample_no;
	struct sample prev, cur;
	int seen_any;
	unsigned change_mask;	/* bit i: change_names[i] counts as a change */
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
		      "  -T  timer-led: while every socket has a timer armed, sleep until one interval\n"
		      "      before the earliest is due, at most this many milliseconds\n"
		      "  -s  state to match, as ss(8) spells it (syn-sent, listen, estab…); repeatable\n"
		      "  -p, -P  destination / source port to match (filtered in the kernel)\n"
		      "  -c  also print a change when one of these fields changes: rq wq snd_wnd\n"
		      "      rcv_wnd probes unacked notsent backoff rmem wqueued drops ulp\n"
		      "  -d  stop after this many milliseconds\n"
		      "  -w  with -1: wait up to this many milliseconds for a match (exit 1 if none)\n"
		      "  -r  append the raw netlink replies to RECORD_FILE\n"
		      "  -R  decode a recorded file instead of asking the kernel\n"
		      "  -h  print this help and exit\n", f);
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

/* INET_DIAG_ULP_INFO (only for a requester with CAP_NET_ADMIN): the ULP's name, and for "tls"
 * the version, cipher and where each direction's records are made (TLS_CONF_* names). */
static void print_ulp(const struct tl_ulp *u)
{
	char version[16];

	printf(" ulp=%s", u->name[0] != '\0' ? u->name : "unknown");
	if (!u->has_tls)
		return;
	printf(" tls_version=%s tls_cipher=%s tls_tx=%s tls_rx=%s tls_zc_ro_tx=%u tls_rx_no_pad=%u",
	       tl_tls_version_name(u->tls_version, version, sizeof(version)),
	       tl_tls_cipher_name(u->tls_cipher), tl_tls_conf_name(u->tls_txconf),
	       tl_tls_conf_name(u->tls_rxconf), u->tls_zc_ro_tx, u->tls_rx_no_pad);
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
	if (s->has_info) {
		const struct tl_tcpinfo *i = &s->info;

		printf(" backoff=%u rto_ms=%u total_retrans=%u total_rto=%u", i->backoff,
		       i->rto_us / 1000, i->total_retrans, i->total_rto);
		printf(" snd_wnd=%u rcv_wnd=%u probes=%u ato_us=%u unacked=%u sacked=%u notsent=%u"
		       " last_send_ms=%u last_recv_ms=%u snd_mss=%u rcv_mss=%u rwnd_limited_us=%" PRIu64
		       " sndbuf_limited_us=%" PRIu64, i->snd_wnd, i->rcv_wnd, i->probes, i->ato_us,
		       i->unacked, i->sacked, i->notsent, i->last_data_sent_ms, i->last_data_recv_ms,
		       i->snd_mss, i->rcv_mss, i->rwnd_limited_us, i->sndbuf_limited_us);
	}
	printf(" info_len=%u", s->has_info ? s->info.len : 0);
	if (s->has_skmem) {
		const struct tl_skmem *m = &s->skmem;

		printf(" rmem=%u rcvbuf=%u wmem=%u sndbuf=%u fwd=%u wqueued=%u optmem=%u backlog=%u"
		       " drops=%u", m->rmem, m->rcvbuf, m->wmem, m->sndbuf, m->fwd, m->wqueued,
		       m->optmem, m->backlog, m->drops);
	}
	if (s->has_ulp)
		print_ulp(&s->ulp);
	/* last, so parsers of the older lines keep working: the one key that names the socket
	 * for its whole life, while its address may change (port released on an abort) */
	printf(" inode=%u cookie=%" PRIu64 "\n", s->inode, s->cookie);
}

/* "ulp" for -c: the ULP attached or gone, or a TLS direction's mode or the version changed. */
static uint64_t ulp_value(const struct tl_sock *s)
{
	return (uint64_t)s->has_ulp << 48 | (uint64_t)s->ulp.tls_version << 32 |
	       (uint64_t)s->ulp.tls_txconf << 16 | s->ulp.tls_rxconf;
}

/* The value of change_names[k] in s. */
static uint64_t change_value(const struct tl_sock *s, size_t k)
{
	const uint64_t v[N_CHANGE] = {
		s->rqueue, s->wqueue, s->info.snd_wnd, s->info.rcv_wnd, s->info.probes,
		s->info.unacked, s->info.notsent, s->info.backoff, s->skmem.rmem, s->skmem.wqueued,
		s->skmem.drops, ulp_value(s),
	};

	return v[k];
}

static int changed(const struct tl_sock *a, const struct tl_sock *b)
{
	size_t k;

	if (a->state != b->state || a->timer != b->timer || a->retrans != b->retrans)
		return 1;
	for (k = 0; k < N_CHANGE; k++)
		if ((env.change_mask & 1u << k) && change_value(a, k) != change_value(b, k))
			return 1;
	return 0;
}

/* -c LIST: comma-separated names from change_names[], into env.change_mask.  0, or -1 with
 * bad and badlen naming the item that is not one (badlen 0: an empty item). */
static int parse_change(const char *list, const char **bad, size_t *badlen)
{
	const char *p = list;

	for (;;) {
		size_t len = strcspn(p, ","), k;

		for (k = 0; k < N_CHANGE; k++)
			if (strlen(change_names[k]) == len && strncmp(p, change_names[k], len) == 0)
				break;
		if (k == N_CHANGE) {
			*bad = p;
			*badlen = len;
			return -1;
		}
		env.change_mask |= 1u << k;
		if (p[len] == '\0')
			return 0;
		p += len + 1;
	}
}

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
	printf("ready t_ns=%" PRId64 " interval_us=%lld family=%s states=0x%x dport=%u sport=%u",
	       env.t0_ns, env.interval_us, env.flt.family == AF_INET ? "inet" :
	       env.flt.family == AF_INET6 ? "inet6" : "both", env.flt.states ? env.flt.states :
	       TL_STATES_ALL, env.flt.dport, env.flt.sport);
	if (env.timer_led_ms)
		printf(" timer_led_ms=%lld", env.timer_led_ms);
	putchar('\n');
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
	const char *bad;
	size_t badlen;

	opterr = 0;	/* one line of our own on a bad option, not getopt's plus the usage */
	while ((opt = getopt(argc, argv, ":1ae46hc:i:T:s:p:P:d:w:r:R:")) != -1) {
		if ((opt == 'r' || opt == 'R') && optarg[0] == '\0')
			tl_errx(TL_EXIT_USAGE, "-%c needs a file name", opt);
		switch (opt) {
		case '1': env.once = 1; break;
		case 'a': env.all = 1; break;
		case 'e': env.exit_when_gone = 1; break;
		case '4': env.flt.family = AF_INET; break;
		case '6': env.flt.family = AF_INET6; break;
		case 'i': env.interval_us = tl_opt_ll("-i", optarg, 1, 10000000); break;
		case 'T': env.timer_led_ms = tl_opt_ll("-T", optarg, 1, 60000); break;
		case 's':
			if (add_state(optarg) < 0)
				tl_errx(TL_EXIT_USAGE, "-s '%s': not a TCP state (e.g. syn-sent)", optarg);
			break;
		case 'c':
			if (parse_change(optarg, &bad, &badlen) == 0)
				break;
			if (badlen == 0)
				tl_errx(TL_EXIT_USAGE, "-c: an empty field name in the list");
			tl_errx(TL_EXIT_USAGE, "-c: '%.*s' is not a field -c knows (rq wq snd_wnd "
					"rcv_wnd probes unacked notsent backoff rmem wqueued drops ulp)",
					(int)(badlen > 40 ? 40 : badlen), bad);
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
	if (env.timer_led_ms && (env.once || env.replay))
		tl_errx(TL_EXIT_USAGE, "-T goes with a watch, not with -%c", env.once ? '1' : 'R');
}

/* -T: how long after the last sample the earliest timer of its sockets is due, in ns; -1 when
 * there is no socket or one has no timer armed (it may change at any time). */
static int64_t timers_due_ns(void)
{
	int64_t due = -1;

	for (size_t k = 0; k < env.prev.n; k++) {
		int64_t d = (int64_t)env.prev.s[k].expires_ms * 1000000;

		if (env.prev.s[k].timer == 0)
			return -1;
		if (due < 0 || d < due)
			due = d;
	}
	return due;
}

/* Sleep until the next multiple of the interval after t0; a late sample skips, never bunches.
 * With -T and every socket's timer armed: the next multiple after one interval before the
 * earliest is due (so the sample falls at or before it), at most MAX_MS ahead, and never past
 * the end -d sets. */
static void wait_next(void)
{
	int64_t step = env.interval_us * 1000, now = tl_now_ns(), from = now;
	int64_t next;

	if (env.timer_led_ms) {
		int64_t due = timers_due_ns();

		if (due > 0) {
			int64_t until = env.now_ns + due - step, cap = now + env.timer_led_ms * 1000000;

			if (until > cap)
				until = cap;
			if (env.duration_ms && until > env.t0_ns + env.duration_ms * 1000000 - step)
				until = env.t0_ns + env.duration_ms * 1000000 - step;
			if (until > from)
				from = until;
		}
	}
	next = env.t0_ns + ((from - env.t0_ns) / step + 1) * step;
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
	int ret;

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	/* only the live loop ends on a signal (with its end line); a replay just dies */
	if (!env.replay && pr_catch_stop(on_signal) < 0)
		tl_err(1, "sigaction");
	ret = env.replay ? run_replay() : run_live();
	free(env.prev.s);
	free(env.cur.s);
	if (ret < 0)
		return 1;
	if (pr_flush_stdout() < 0) {
		tl_warn("stdout");
		return 1;
	}
	if (env.once && env.wait_ms && !env.seen_any)
		return 1;	/* waited, nothing matched */
	return 0;
}
