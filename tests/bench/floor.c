/* floor — the least CPU a probe's sampling loop can cost, for `make bench` (docs/bench.md).
 *
 *   floor diag [-4|-6] [-s STATE]... [-p DPORT] [-P SPORT] [-i INTERVAL_US] -n N | -d MS
 *	sock_diag dumps with sockwatch's request (same state mask, same port bytecode, same
 *	INET_DIAG_INFO extension, one NETLINK_SOCK_DIAG socket reused, same 32 KiB receive
 *	buffer), INTERVAL_US apart on sockwatch's schedule: N of them, or as many as
 *	`sockwatch -d MS` takes.  The replies are received and walked to NLMSG_DONE, nothing is
 *	decoded or printed.
 *   floor proc [-i INTERVAL_MS] -n N
 *	N reads of /proc/thread-self/net/snmp and .../netstat (open, read to the end, close;
 *	nothing parsed), INTERVAL_MS apart on counters -i's schedule.
 *
 * The first sample is taken at once, then one per interval, as the probes do; -i 0 takes them
 * back to back (the cost of the work alone).  Prints one line, "samples=N bytes=B" (B: bytes
 * received or read in all), so the caller can check the floor saw what the probe saw.  CPU is
 * measured by the caller (wait4's rusage).
 */
#include "tl_cli.h"
#include "tl_diag.h"
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libmnl/libmnl.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define USAGE "usage: floor diag [-4|-6] [-s STATE]... [-p DPORT] [-P SPORT] [-i INTERVAL_US]\n" \
	      "                  -n N | -d DURATION_MS\n" \
	      "       floor proc [-i INTERVAL_MS] -n N\n" \
	      "(-i 0: no sleep between samples; see docs/bench.md)\n"

static struct env {
	int diag;			/* 1: diag, 0: proc */
	struct tl_diag_filter flt;
	long long interval_us;		/* diag: -i in µs; proc: -i in ms, kept here in µs */
	long long n, duration_ms;	/* stop after n samples, or after duration_ms (diag) */
	long long samples;
	unsigned long long bytes;
	char buf[32768];		/* netlink/tl_diag_int.h's receive buffer size */
} env = { .interval_us = 1000 };

/* The request as netlink/tl_diag.c's build_request() lays it out: inet_diag_req_v2, then an
 * INET_DIAG_REQ_BYTECODE attribute holding one (S_EQ, port) and/or one (D_EQ, port) pair whose
 * `no` jumps past the program's end. */
static struct nlmsghdr *request(char *buf, int family)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct inet_diag_req_v2 *req = mnl_nlmsg_put_extra_header(nlh, sizeof(*req));
	struct inet_diag_bc_op bc[4];
	uint16_t ports[2] = { env.flt.sport, env.flt.dport };
	int codes[2] = { INET_DIAG_BC_S_EQ, INET_DIAG_BC_D_EQ };
	size_t used = 0, len = ((ports[0] != 0) + (ports[1] != 0)) * sizeof(bc[0]) * 2;

	nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	*req = (struct inet_diag_req_v2){ .sdiag_family = family, .sdiag_protocol = IPPROTO_TCP,
		.idiag_states = env.flt.states ? env.flt.states : TL_STATES_ALL,
		.idiag_ext = 1 << (INET_DIAG_INFO - 1) };
	for (int k = 0; k < 2; k++) {
		if (ports[k] == 0)
			continue;
		bc[used] = (struct inet_diag_bc_op){ codes[k], 2 * sizeof(bc[0]),
						     len - used * sizeof(bc[0]) + 4 };
		bc[used + 1] = (struct inet_diag_bc_op){ .no = ports[k] };
		used += 2;
	}
	if (used > 0)
		mnl_attr_put(nlh, INET_DIAG_REQ_BYTECODE, len, bc);
	return nlh;
}

/* Receive one dump's replies until NLMSG_DONE.  0, or -1 with errno. */
static int drain(struct mnl_socket *nl)
{
	for (;;) {
		ssize_t len = mnl_socket_recvfrom(nl, env.buf, sizeof(env.buf));
		const struct nlmsghdr *h = (const struct nlmsghdr *)env.buf;
		int left;

		if (len < 0)
			return -1;
		env.bytes += (unsigned long long)len;
		for (left = (int)len; mnl_nlmsg_ok(h, left); h = mnl_nlmsg_next(h, &left)) {
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);

				errno = -e->error;
				return -1;
			}
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
		}
	}
}

/* sockwatch's schedule: sleep to the next multiple of the interval after t0. */
static void wait_next(int64_t t0)
{
	int64_t step = env.interval_us * 1000, now = tl_now_ns();
	int64_t next = t0 + ((now - t0) / step + 1) * step;
	struct timespec ts = { .tv_sec = next / 1000000000, .tv_nsec = next % 1000000000 };

	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static int run_diag(void)
{
	static const int families[] = { AF_INET, AF_INET6 };
	struct mnl_socket *nl = mnl_socket_open(NETLINK_SOCK_DIAG);
	char req[256];
	int64_t t0;
	uint32_t seq = 1;
	int ret = -1;

	if (nl == NULL || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		tl_warn("NETLINK_SOCK_DIAG socket");
		goto cleanup;
	}
	t0 = tl_now_ns();
	for (;;) {
		int64_t now = tl_now_ns();

		for (size_t f = 0; f < 2; f++) {
			struct nlmsghdr *nlh;

			if (env.flt.family != AF_UNSPEC && env.flt.family != families[f])
				continue;
			nlh = request(req, families[f]);
			nlh->nlmsg_seq = seq++;
			if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0 || drain(nl) < 0) {
				tl_warn("sock_diag dump");
				goto cleanup;
			}
		}
		env.samples++;
		/* sockwatch's -d: the last sample is the first one to start past the duration */
		if (env.samples == env.n || (env.duration_ms && (now - t0) / 1000000 >= env.duration_ms))
			break;
		if (env.interval_us > 0)
			wait_next(t0);
	}
	ret = 0;
cleanup:
	if (nl != NULL)
		mnl_socket_close(nl);
	return ret;
}

/* open, read to the end (a short read from procfs is the end, as counters reads), close. */
static int read_proc(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = 0;
	ssize_t got;

	if (fd < 0)
		return -1;
	do
		got = read(fd, env.buf, sizeof(env.buf));
	while (got == (ssize_t)sizeof(env.buf) || (got < 0 && errno == EINTR));
	if (got < 0)
		ret = -1;
	else
		env.bytes += (unsigned long long)got;
	if (close(fd) < 0)
		ret = -1;
	return ret;
}

static int run_proc(void)
{
	static const char *const paths[] = { "/proc/thread-self/net/snmp",
					     "/proc/thread-self/net/netstat" };
	struct timespec next;
	long long step_ns = env.interval_us * 1000;

	if (clock_gettime(CLOCK_MONOTONIC, &next) < 0)
		return -1;
	for (long long k = 0; k < env.n; k++) {
		if (k > 0 && step_ns > 0) {	/* counters -i's schedule: a fixed step after the last deadline */
			next.tv_sec += (next.tv_nsec + step_ns) / 1000000000;
			next.tv_nsec = (next.tv_nsec + step_ns) % 1000000000;
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		}
		for (size_t f = 0; f < 2; f++)
			if (read_proc(paths[f]) < 0) {
				tl_warn("%s", paths[f]);
				return -1;
			}
	}
	return 0;
}

static void parse_args(int argc, char **argv)
{
	uint32_t mask;
	int opt;

	if (argc == 2 && strcmp(argv[1], "-h") == 0) {
		fputs(USAGE, stdout);
		exit(0);
	}
	if (argc < 2 || (strcmp(argv[1], "diag") != 0 && strcmp(argv[1], "proc") != 0)) {
		fputs(USAGE, stderr);
		exit(TL_EXIT_USAGE);
	}
	env.diag = argv[1][0] == 'd';
	optind = 2;
	opterr = 0;
	while ((opt = getopt(argc, argv, env.diag ? ":46hs:p:P:i:n:d:" : ":hi:n:")) != -1) {
		switch (opt) {
		case '4': env.flt.family = AF_INET; break;
		case '6': env.flt.family = AF_INET6; break;
		case 's':
			if (tl_state_parse(optarg, &mask) < 0)
				tl_errx(TL_EXIT_USAGE, "-s '%s': not a TCP state (e.g. syn-sent)", optarg);
			env.flt.states |= mask;
			break;
		case 'p': env.flt.dport = tl_opt_port("-p", optarg); break;
		case 'P': env.flt.sport = tl_opt_port("-P", optarg); break;
		case 'i':
			env.interval_us = env.diag ? tl_opt_ll("-i", optarg, 0, 10000000) :
				tl_opt_ll("-i", optarg, 0, 3600000) * 1000;
			break;
		case 'n': env.n = tl_opt_ll("-n", optarg, 1, 100000000); break;
		case 'd': env.duration_ms = tl_opt_ll("-d", optarg, 1, 86400000LL); break;
		case 'h': fputs(USAGE, stdout); exit(0);
		default: tl_opt_fail(opt);
		}
	}
	if (optind != argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
	if ((env.n == 0) == (env.duration_ms == 0))
		tl_errx(TL_EXIT_USAGE, env.diag ? "give one of -n and -d" : "-n is required");
}

int main(int argc, char **argv)
{
	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	if ((env.diag ? run_diag() : run_proc()) < 0)
		return 1;
	printf("samples=%lld bytes=%llu\n", env.diag ? env.samples : env.n, env.bytes);
	return 0;
}
