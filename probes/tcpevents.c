/* tcpevents — every TCP state change, retransmission, reset and tcp_probe sample, as the
 * kernel's tracepoints report them, for the sockets of one network namespace.
 *
 * sockwatch samples: a state shorter than its interval is never seen.  tcpevents attaches a
 * BPF program (probes/bpf/tcpevents.bpf.c, CO-RE, BTF-typed tracepoints) and prints each event
 * from its ring buffer, in the order the kernel made them.  The namespace and the ports are
 * filtered in the kernel.  Where BPF cannot run (no kernel BTF, no privilege, a tracepoint or
 * field this kernel lacks) it says what it could not see in one line and exits TCPEV_EXIT_BLIND,
 * so a unit goes on without it.  -r keeps the raw records, -R prints them again without BPF
 * (sockwatch's letters: -r records, -R replays).
 */
#include "tl_cli.h"
#include "tl_diag.h"
#include "pr_file.h"
#include "pr_run.h"
#include "tl_util.h"

#include <linux/types.h>
#include "tcpevents.h"
#include "tcpevents.skel.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define USAGE "usage: tcpevents [-v] [-n NETNS_PATH | -N NETNS_INODE] [-p PORT]... [-t TIMEOUT_MS]\n" \
	      "                 [-B RING_KIB] [-r RECORD_FILE | -R REPLAY_FILE]\n"

/* Exit status when BPF cannot run here: nothing was seen, the caller goes on without it. */
#define TCPEV_EXIT_BLIND 4
/* The ring buffer's poll timeout, and how often the lines go out while records keep coming: a
 * line reaches the output at most about POLL_MS after its event (poll_loop()). */
#define POLL_MS 100
#define FLUSH_MS 50

_Static_assert(sizeof(struct tcpev_rec) == 96, "the record layout is part of the file format");

struct rec_header {
	char magic[8];
	uint32_t version, rec_size;
};

static struct env {
	const char *netns_path, *record, *replay;
	unsigned long long netns_ino;
	uint16_t ports[TCPEV_MAX_PORTS];
	unsigned nports;
	long long timeout_ms, ring_kib;
	int verbose;
	FILE *rec;
	unsigned long long events;
	int *hit_fds;		/* perf counters of the tracepoints' hits, one per tracepoint and CPU */
	int nhit_fds;
	volatile sig_atomic_t stop;
} env;

_Noreturn static void usage(FILE *f, int status)
{
	fputs(USAGE, f);
	if (f == stdout)
		fputs("  -v  pass libbpf's own messages to stderr (why a load failed)\n"
		      "  -n  watch the network namespace of this file (/proc/PID/ns/net)\n"
		      "  -N  watch the network namespace with this inode (default: our own)\n"
		      "  -p  only sockets with this local or remote port; repeatable (up to 16)\n"
		      "  -t  stop after this many milliseconds\n"
		      "  -B  ring buffer size in KiB, a power of two from 4 (default 1024)\n"
		      "  -r  write the raw event records to RECORD_FILE\n"
		      "  -R  print a recorded file instead of watching the kernel (no BPF, no root)\n"
		      "  -h  print this help and exit\n", f);
	exit(status);
}

static void on_signal(int sig)
{
	(void)sig;
	env.stop = 1;
}

static void parse_args(int argc, char **argv)
{
	int opt;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":vhn:N:p:t:B:r:R:")) != -1) {
		if ((opt == 'n' || opt == 'r' || opt == 'R') && optarg[0] == '\0')
			tl_errx(TL_EXIT_USAGE, "-%c needs a file name", opt);
		switch (opt) {
		case 'v': env.verbose = 1; break;
		case 'n': env.netns_path = optarg; break;
		case 'N': env.netns_ino = (unsigned long long)tl_opt_ll("-N", optarg, 1, UINT32_MAX); break;
		case 'p':
			if (env.nports == TCPEV_MAX_PORTS)
				tl_errx(TL_EXIT_USAGE, "-p: at most %d ports", TCPEV_MAX_PORTS);
			env.ports[env.nports++] = tl_opt_port("-p", optarg);
			break;
		case 't': env.timeout_ms = tl_opt_ll("-t", optarg, 1, 86400000LL); break;
		case 'B':
			env.ring_kib = tl_opt_ll("-B", optarg, 4, 1048576);
			if (env.ring_kib & (env.ring_kib - 1))
				tl_errx(TL_EXIT_USAGE, "-B '%s': not a power of two", optarg);
			break;
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
	if (env.netns_path && env.netns_ino)
		tl_errx(TL_EXIT_USAGE, "-n and -N exclude each other");
	if (env.replay && (env.netns_path || env.netns_ino || env.nports || env.timeout_ms ||
			   env.ring_kib))
		tl_errx(TL_EXIT_USAGE, "-R replays a file as it was recorded: no -n, -N, -p, -t or -B");
}

/* ---- printing: one line per record, the same live and replayed ---------------------------- */

static const char *state_name(int32_t state)
{
	return state == TCPEV_NO_STATE ? "-" : tl_state_name(state);
}

/* One output line, built in memory and written with one fwrite(): a record costs one stdio
 * call, not the eight printf()s it took (each a format parse and a lock of stdout), which were
 * most of the reader's work per event (docs/bench.md).  The longest line is about 320 bytes. */
struct line {
	char buf[512];
	size_t n;
};

static void put(struct line *l, const char *s)
{
	size_t k = strlen(s);

	if (k > sizeof(l->buf) - l->n)
		k = sizeof(l->buf) - l->n;
	memcpy(l->buf + l->n, s, k);
	l->n += k;
}

static void put_u(struct line *l, uint64_t v)
{
	char d[20];
	size_t i = 0;

	do {
		d[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (i > 0 && l->n < sizeof(l->buf))
		l->buf[l->n++] = d[--i];
}

static void put_i(struct line *l, int64_t v)
{
	if (v < 0) {
		put(l, "-");
		put_u(l, (uint64_t)0 - (uint64_t)v);
	} else {
		put_u(l, (uint64_t)v);
	}
}

/* " KEY=ADDR:PORT", an IPv6 address in brackets. */
static void put_addr(struct line *l, const char *key, const uint8_t *addr, uint16_t port,
		     uint16_t family)
{
	char ip[INET6_ADDRSTRLEN];
	int i;

	put(l, " ");
	put(l, key);
	if (family == AF_INET6) {
		if (inet_ntop(AF_INET6, addr, ip, sizeof(ip)) == NULL)
			snprintf(ip, sizeof(ip), "?");
		put(l, "=[");
		put(l, ip);
		put(l, "]:");
	} else {	/* dotted decimal, as inet_ntop() writes it, without its call */
		put(l, "=");
		for (i = 0; i < 4; i++) {
			put_u(l, addr[i]);
			put(l, i < 3 ? "." : ":");
		}
	}
	put_u(l, port);
}

static void print_rec(const struct tcpev_rec *e)
{
	static const char *const names[] = {
		[TCPEV_STATE] = "state", [TCPEV_RETRANS] = "retrans", [TCPEV_RST_SENT] = "rst-sent",
		[TCPEV_RST_RECV] = "rst-recv", [TCPEV_PROBE] = "probe", [TCPEV_TIMEWAIT] = "timewait",
	};
	struct line l = { .n = 0 };

	put(&l, "t_ns=");
	put_u(&l, e->t_ns);
	put(&l, " event=");
	put(&l, names[e->type]);
	if (e->type == TCPEV_STATE || e->type == TCPEV_TIMEWAIT) {
		put(&l, " old=");
		put(&l, state_name(e->oldstate));
		put(&l, " new=");
	} else {
		put(&l, " state=");
	}
	put(&l, state_name(e->state));
	if (e->type == TCPEV_PROBE) {
		put(&l, " cwnd=");
		put_u(&l, e->cwnd);
		put(&l, " ssthresh=");
		put_u(&l, e->ssthresh);
		put(&l, " srtt_us=");
		put_u(&l, e->srtt_us);
		put(&l, " snd_wnd=");
		put_u(&l, e->snd_wnd);
	}
	if (e->type == TCPEV_RST_SENT || e->type == TCPEV_RETRANS) {
		put(&l, e->type == TCPEV_RST_SENT ? " reason=" : " err=");
		if (!(e->flags & TCPEV_F_ARG))
			put(&l, "-");
		else if (e->type == TCPEV_RETRANS)
			put_i(&l, (int32_t)e->reason);
		else
			put_u(&l, e->reason);
	}
	put_addr(&l, "local", e->saddr, e->sport, e->family);
	put_addr(&l, "peer", e->daddr, e->dport, e->family);
	put(&l, " cookie=");
	if (e->flags & TCPEV_F_COOKIE)
		put_u(&l, e->cookie);
	else
		put(&l, "-");
	put(&l, "\n");
	fwrite(l.buf, 1, l.n, stdout);
}

/* 0 for a record print_rec() can print; -1 (EBADMSG) for one no tcpevents wrote. */
static int rec_valid(const struct tcpev_rec *e)
{
	int known = e->type >= TCPEV_STATE && e->type <= TCPEV_TIMEWAIT;

	if (!known || (e->family != AF_INET && e->family != AF_INET6)) {
		errno = EBADMSG;
		return -1;
	}
	return 0;
}

/* The end line of an END record: missed= is its reason with TCPEV_F_ARG, else "-" (a kernel
 * before 5.12, which does not count them, or a record written before tcpevents counted them);
 * unseen= its unseen with TCPEV_F_UNSEEN, else "-" (no perf counter of the tracepoints here, or
 * a record written before tcpevents counted them). */
static void print_end(const struct tcpev_rec *e)
{
	printf("end t_ns=%" PRIu64 " events=%llu lost=%" PRIu64, (uint64_t)e->t_ns, env.events,
	       (uint64_t)e->lost);
	if (e->flags & TCPEV_F_ARG)
		printf(" missed=%u", e->reason);
	else
		printf(" missed=-");
	if (e->flags & TCPEV_F_UNSEEN)
		printf(" unseen=%" PRIu64 "\n", (uint64_t)e->unseen);
	else
		printf(" unseen=-\n");
}

/* ---- replay ------------------------------------------------------------------------------- */

/* Print the records of buf (a whole -r file).  0, or -1 and a message already printed. */
static int replay_records(const char *buf, size_t len)
{
	struct rec_header h;
	struct tcpev_rec e;
	size_t off = sizeof(h);

	if (len < sizeof(h) || (memcpy(&h, buf, sizeof(h)), memcmp(h.magic, TCPEV_MAGIC, 8)) != 0) {
		tl_warnx("%s: not a tcpevents record (no %s header)", env.replay, TCPEV_MAGIC);
		return -1;
	}
	if (h.version != TCPEV_VERSION || h.rec_size != sizeof(e)) {
		tl_warnx("%s: record version %u size %u; this tcpevents reads version %d size %zu",
			 env.replay, h.version, h.rec_size, TCPEV_VERSION, sizeof(e));
		return -1;
	}
	for (; len - off >= sizeof(e); off += sizeof(e)) {
		memcpy(&e, buf + off, sizeof(e));
		if (e.type == TCPEV_END) {
			print_end(&e);
			if (len - off != sizeof(e))
				break;
			return 0;
		}
		if (rec_valid(&e) < 0) {
			tl_warnx("%s: record %zu is garbled (type %u)", env.replay,
				 (off - sizeof(h)) / sizeof(e), e.type);
			return -1;
		}
		print_rec(&e);
		env.events++;
	}
	tl_warnx("%s: %s", env.replay, len - off == 0 ? "no end record (the recording was cut short)"
		 : "bytes after the end or a record cut short");
	return -1;
}

static int run_replay(void)
{
	char *buf = NULL;
	size_t len;
	int ret;

	if (tl_read_file(env.replay, 256u << 20, &buf, &len) < 0) {
		tl_warnx("%s: %s", env.replay, pr_strerror(errno));
		return -1;
	}
	ret = replay_records(buf, len);
	free(buf);
	return ret;
}

/* ---- live --------------------------------------------------------------------------------- */

static int on_event(void *ctx, void *data, size_t size)
{
	const struct tcpev_rec *e = data;

	(void)ctx;
	if (size < sizeof(*e) || rec_valid(e) < 0)
		return 0;	/* cannot happen: the BPF program writes only these */
	if (env.rec != NULL && fwrite(e, sizeof(*e), 1, env.rec) != 1)
		return -EIO;
	print_rec(e);
	env.events++;
	return 0;
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (!env.verbose || level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

_Noreturn static void blind(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line saying what tcpevents cannot see and why, then exit TCPEV_EXIT_BLIND. */
static void blind(const char *fmt, ...)
{
	va_list ap;

	fputs("tcpevents: cannot see TCP events: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(TCPEV_EXIT_BLIND);
}

/* The number of arguments of tracepoint tp in the kernel's BTF, or -1 if it has none. */
static int tp_nargs(const struct btf *btf, const char *tp)
{
	char name[96];
	const struct btf_type *t;
	int id, k;

	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	id = btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF);
	if (id < 0)
		return -1;
	t = btf__type_by_id(btf, id);
	for (k = 0; t != NULL && k < 2; k++)	/* typedef -> pointer -> function prototype */
		t = btf__type_by_id(btf, t->type);
	if (t == NULL || !btf_is_func_proto(t))
		return -1;
	return btf_vlen(t) - 1;	/* the first is the tracepoint's void *__data */
}

/* What this kernel offers, from its BTF, into the program's constants; or blind(). */
static void check_kernel(struct tcpevents_bpf *skel)
{
	static const char *const tps[] = {
		"inet_sock_set_state", "tcp_retransmit_skb", "tcp_send_reset", "tcp_receive_reset",
		"tcp_probe",
	};
	struct btf *btf;
	size_t k;

	if (access("/sys/kernel/btf/vmlinux", R_OK) < 0)
		blind("no kernel BTF (/sys/kernel/btf/vmlinux: %s; the kernel needs "
		      "CONFIG_DEBUG_INFO_BTF=y)", strerror(errno));
	btf = btf__load_vmlinux_btf();
	if (btf == NULL)
		blind("cannot read the kernel BTF (/sys/kernel/btf/vmlinux): %s", strerror(errno));
	for (k = 0; k < sizeof(tps) / sizeof(tps[0]); k++) {
		if (tp_nargs(btf, tps[k]) < 0) {
			btf__free(btf);
			blind("this kernel has no BTF-typed tracepoint %s", tps[k]);
		}
	}
	skel->rodata->rst_has_reason = tp_nargs(btf, "tcp_send_reset") >= 3;
	skel->rodata->retrans_has_err = tp_nargs(btf, "tcp_retransmit_skb") >= 3;
	btf__free(btf);
}

static unsigned long long netns_inode(void)
{
	const char *path = env.netns_path ? env.netns_path : "/proc/self/ns/net";
	struct stat st;

	if (env.netns_ino)
		return env.netns_ino;
	if (stat(path, &st) < 0)
		tl_err(1, "%s", path);
	if (env.netns_path && st.st_ino > UINT32_MAX)
		tl_errx(1, "%s: inode %ju is not a namespace's", path, (uintmax_t)st.st_ino);
	return st.st_ino;
}

/* What load() settled for: the cookie helper or not. */
struct variant {
	int cookie_helper;
};

/* Open the object and set its constants for this kernel and variant v; or blind(). */
static struct tcpevents_bpf *open_variant(unsigned long long ino, const struct variant *v)
{
	struct tcpevents_bpf *skel = tcpevents_bpf__open();

	if (skel == NULL)
		tl_err(1, "cannot open the BPF object");
	check_kernel(skel);
	skel->rodata->netns_ino = (__u32)ino;
	skel->rodata->nports = env.nports;
	memcpy((void *)skel->rodata->ports, env.ports, sizeof(env.ports));
	skel->rodata->cookie_helper = v->cookie_helper;
	if (bpf_map__set_max_entries(skel->maps.events, (__u32)(env.ring_kib ? env.ring_kib : 1024)
				     * 1024) != 0)
		tl_errx(TL_EXIT_USAGE, "-B %lld: not a size the kernel's ring buffer takes",
			env.ring_kib);
	skel->rodata->wake_bytes = (__u64)(env.ring_kib ? env.ring_kib : 1024) * 1024 / 8;
	return skel;
}

/* Load the program with bpf_get_socket_cookie() if the kernel allows it to tracing programs
 * (5.12+), else reading skc_cookie.  Returns the skeleton, *v what it has; or blind(). */
static struct tcpevents_bpf *load(unsigned long long ino, struct variant *v)
{
	static const struct variant tries[] = { { 1 }, { 0 } };
	struct tcpevents_bpf *skel;
	size_t k;
	int err = 0;

	for (k = 0; k < sizeof(tries) / sizeof(tries[0]); k++) {
		*v = tries[k];
		skel = open_variant(ino, v);
		err = tcpevents_bpf__load(skel);
		if (err == 0)
			return skel;
		tcpevents_bpf__destroy(skel);
		if (err == -EPERM || err == -EACCES)
			blind("loading BPF needs CAP_BPF and CAP_PERFMON (or root): %s",
			      strerror(-err));
	}
	blind("the kernel refused the BPF program (%s; a field or helper this kernel lacks? "
	      "-v shows why)", strerror(-err));
}

static void print_ready(const struct tcpevents_bpf *skel, const struct variant *v)
{
	unsigned k;

	printf("ready t_ns=%" PRId64 " netns=%u ports=", tl_now_ns(), skel->rodata->netns_ino);
	for (k = 0; k < env.nports; k++)
		printf("%s%u", k ? "," : "", env.ports[k]);
	printf("%s ring_kib=%lld cookie=%s reason=%s err=%s\n", env.nports ? "" : "any",
	       env.ring_kib ? env.ring_kib : 1024,
	       v->cookie_helper ? "helper" : "field", skel->rodata->rst_has_reason ? "yes" : "no",
	       skel->rodata->retrans_has_err ? "yes" : "no");
	fflush(stdout);
}

static int open_record(void)
{
	struct rec_header h = { .magic = TCPEV_MAGIC, .version = TCPEV_VERSION,
				.rec_size = sizeof(struct tcpev_rec) };
	int fd;

	if (env.record == NULL)
		return 0;
	fd = open(env.record, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0666);
	/* O_NONBLOCK: a FIFO nobody reads fails here instead of hanging; blocking again after */
	if (fd < 0 || fcntl(fd, F_SETFL, 0) < 0 || (env.rec = fdopen(fd, "w")) == NULL) {
		tl_warn("%s", env.record);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (fwrite(&h, sizeof(h), 1, env.rec) != 1) {
		tl_warn("%s: cannot write the record", env.record);
		return -1;
	}
	return 0;
}

/* The events the kernel did not hand to a program because that program was already running on
 * the same CPU (bpf_prog_info.recursion_misses, summed over the programs loaded), into *sum.
 * 0; or -1 and errno: EOPNOTSUPP for a kernel that does not count them (before 5.12 the info it
 * returns stops short of the field). */
static int recursion_misses(const struct bpf_object *obj, uint64_t *sum)
{
	const size_t need = offsetof(struct bpf_prog_info, recursion_misses) +
			    sizeof(((struct bpf_prog_info *)0)->recursion_misses);
	struct bpf_program *prog;

	*sum = 0;
	bpf_object__for_each_program(prog, obj) {
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		int fd = bpf_program__fd(prog);

		if (fd < 0)	/* not loaded: a variant this kernel does not need */
			continue;
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
			return -1;
		if (len < need) {
			errno = EOPNOTSUPP;
			return -1;
		}
		*sum += info.recursion_misses;
	}
	return 0;
}

/* ---- hits no program ran for ---------------------------------------------------------------- */

/* The tracepoints the programs are attached to, as tracefs names their events. */
static const char *const tp_events[] = {
	"sock/inet_sock_set_state", "tcp/tcp_retransmit_skb", "tcp/tcp_send_reset",
	"tcp/tcp_receive_reset", "tcp/tcp_probe",
};

/* The perf event id of tracefs event ev ("sys/name"), or -1. */
static long long tp_event_id(const char *ev)
{
	static const char *const roots[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };
	char path[128], buf[32];
	size_t k;

	for (k = 0; k < sizeof(roots) / sizeof(roots[0]); k++) {
		FILE *f;
		int ok;

		snprintf(path, sizeof(path), "%s/events/%s/id", roots[k], ev);
		f = fopen(path, "re");
		if (f == NULL)
			continue;
		ok = fgets(buf, sizeof(buf), f) != NULL;
		fclose(f);
		if (ok)
			return strtoll(buf, NULL, 10);
	}
	return -1;
}

/* tracefs mounted on /sys/kernel/tracing in a mount namespace of tcpevents' own, where the one it
 * runs in has none (`ip netns exec` mounts a sysfs of the namespace's, without tracefs on it):
 * nothing of it is seen outside tcpevents.  0, or -1 and errno (no CAP_SYS_ADMIN, no tracefs). */
static int tracefs_own(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	return mount("tracefs", "/sys/kernel/tracing", "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		     NULL);
}

static void hits_close(void)
{
	int k;

	for (k = 0; k < env.nhit_fds; k++)
		close(env.hit_fds[k]);
	free(env.hit_fds);
	env.hit_fds = NULL;
	env.nhit_fds = 0;
}

/* A perf counter (counting, disabled) of each tracepoint's hits on each CPU, into env.hit_fds.
 * 0; or -1 (no tracefs, no perf, no privilege): then unseen= is "-".  A possible CPU that is
 * offline is skipped (ENODEV), so the count is a lower bound. */
static int hits_open(void)
{
	const size_t ntp = sizeof(tp_events) / sizeof(tp_events[0]);
	struct perf_event_attr attr;
	int ncpu = libbpf_num_possible_cpus(), cpu;
	size_t k;

	if (tp_event_id(tp_events[0]) < 0 && tracefs_own() < 0)
		return -1;
	if (ncpu <= 0 || (env.hit_fds = calloc((size_t)ncpu * ntp, sizeof(int))) == NULL)
		return -1;
	for (k = 0; k < ntp; k++) {
		long long id = tp_event_id(tp_events[k]);

		if (id < 0)
			goto fail;
		memset(&attr, 0, sizeof(attr));
		attr.type = PERF_TYPE_TRACEPOINT;
		attr.size = sizeof(attr);
		attr.config = (uint64_t)id;
		attr.disabled = 1;
		for (cpu = 0; cpu < ncpu; cpu++) {
			int fd = (int)syscall(SYS_perf_event_open, &attr, -1, cpu, -1,
					      PERF_FLAG_FD_CLOEXEC);

			if (fd < 0 && errno == ENODEV)
				continue;
			if (fd < 0)
				goto fail;
			env.hit_fds[env.nhit_fds++] = fd;
		}
	}
	return 0;
fail:
	hits_close();
	return -1;
}

/* Start (on 1) or stop the counters.  0, or -1 and errno. */
static int hits_enable(int on)
{
	int k;

	for (k = 0; k < env.nhit_fds; k++)
		if (ioctl(env.hit_fds[k], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0) < 0)
			return -1;
	return 0;
}

/* The counters' sum into *sum.  0, or -1 and errno. */
static int hits_read(uint64_t *sum)
{
	int k;

	*sum = 0;
	for (k = 0; k < env.nhit_fds; k++) {
		uint64_t n;

		if (read(env.hit_fds[k], &n, sizeof(n)) != (ssize_t)sizeof(n))
			return -1;
		*sum += n;
	}
	return 0;
}

/* The programs' runs (runs in tcpevents.bpf.c: one count per CPU), summed, into *sum.  0, or -1
 * and errno. */
static int programs_runs(const struct tcpevents_bpf *skel, uint64_t *sum)
{
	int ncpu = libbpf_num_possible_cpus(), cpu, err;
	__u32 zero = 0;
	__u64 *n;

	*sum = 0;
	if (ncpu <= 0) {
		errno = ncpu < 0 ? -ncpu : EINVAL;
		return -1;
	}
	n = calloc((size_t)ncpu, sizeof(*n));
	if (n == NULL)
		return -1;
	err = bpf_map__lookup_elem(skel->maps.runs, &zero, sizeof(zero), n,
				   (size_t)ncpu * sizeof(*n), 0);
	for (cpu = 0; err == 0 && cpu < ncpu; cpu++)
		*sum += n[cpu];
	free(n);
	if (err != 0) {
		errno = -err;
		return -1;
	}
	return 0;
}

/* What the programs did, read before the counters start and after they stop, into *seen: every
 * run, and every hit the kernel skipped a program for and counted (recursion misses; 0 where the
 * kernel does not count them).  It waits 2 ms first or after (after on 1): a tracepoint calls
 * its probes (perf's counter, each program) one after the other with preemption off, in
 * microseconds, so no hit has one probe before this read and another after the counters' start
 * or stop, and unseen= stays a lower bound.  0, or -1 and errno (the runs cannot be read). */
static int programs_seen(const struct tcpevents_bpf *skel, int after, uint64_t *seen)
{
	const struct timespec gap = { .tv_nsec = 2000000 };
	uint64_t missed = 0, runs;
	int ret;

	if (!after)
		nanosleep(&gap, NULL);
	if (recursion_misses(skel->obj, &missed) < 0)
		missed = 0;
	ret = programs_runs(skel, &runs);
	if (after)
		nanosleep(&gap, NULL);
	*seen = runs + missed;
	return ret;
}

/* Into last (the END record): the hits of the tracepoints, counted by the kernel's perf
 * counters, that none of the programs ran for and no recursion miss counted, from seen0
 * (programs_seen() before the counters started) to now; a lower bound, 0 at least.  Without
 * counters, or when they or the programs' runs cannot be read, last stays without
 * TCPEV_F_UNSEEN. */
static void hits_unseen(const struct tcpevents_bpf *skel, uint64_t seen0, struct tcpev_rec *last)
{
	uint64_t hits, seen;

	if (env.nhit_fds == 0 || hits_enable(0) < 0 || hits_read(&hits) < 0 ||
	    programs_seen(skel, 0, &seen) < 0)
		return;
	seen -= seen0;
	last->unseen = hits > seen ? hits - seen : 0;
	last->flags |= TCPEV_F_UNSEEN;
}

/* Poll until a signal or -t; then the events still queued, and the end line (and record). */
static int poll_loop(struct tcpevents_bpf *skel, struct ring_buffer *rb, uint64_t seen0)
{
	int64_t end = env.timeout_ms ? tl_now_ns() + env.timeout_ms * 1000000 : 0;
	struct tcpev_rec last = { .type = TCPEV_END, .reason = TCPEV_NO_REASON };
	int64_t flushed = tl_now_ns(), now;
	uint64_t missed;
	int n = 0, idle;

	while (!env.stop && (end == 0 || tl_now_ns() < end)) {
		n = ring_buffer__poll(rb, POLL_MS);
		if (n < 0 && n != -EINTR)
			break;
		/* No wake-up for POLL_MS: the records below the programs' wake-up mark (wake_bytes
		 * in tcpevents.bpf.c) are read now, so none waits longer than that */
		idle = n <= 0;
		if (idle && (n = ring_buffer__consume(rb)) < 0)
			break;
		/* The lines out after such a read, and every FLUSH_MS while records keep coming: not
		 * after every poll, whose write() per return kept the reader catching up with the
		 * ring, and each catch-up cost the next record a wake-up (docs/bench.md, "What \"in
		 * BPF\" measures"). */
		now = tl_now_ns();
		if (idle || now - flushed >= FLUSH_MS * 1000000LL) {
			fflush(stdout);
			flushed = now;
		}
		n = 0;
	}
	if (n == 0)
		n = ring_buffer__consume(rb);
	if (n < 0) {
		errno = -n;
		if (n == -EIO)
			tl_warn("%s: cannot write the record", env.record);
		else
			tl_warn("ring buffer");
		return -1;
	}
	hits_unseen(skel, seen0, &last);
	last.t_ns = (uint64_t)tl_now_ns();
	last.lost = __atomic_load_n(&skel->bss->lost, __ATOMIC_RELAXED);
	if (recursion_misses(skel->obj, &missed) == 0) {
		last.flags |= TCPEV_F_ARG;
		last.reason = missed > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)missed;
	} else if (errno != EOPNOTSUPP) {
		tl_warn("the programs' recursion misses");
		return -1;
	}
	print_end(&last);
	if (env.rec != NULL && fwrite(&last, sizeof(last), 1, env.rec) != 1) {
		tl_warn("%s: cannot write the record", env.record);
		return -1;
	}
	return 0;
}

static int run_live(void)
{
	unsigned long long ino = netns_inode();
	struct tcpevents_bpf *skel;
	struct ring_buffer *rb = NULL;
	struct variant v;
	uint64_t seen0 = 0;
	int err, ret = -1;

	libbpf_set_print(libbpf_quiet);
	skel = load(ino, &v);
	err = tcpevents_bpf__attach(skel);
	if (err != 0) {
		tcpevents_bpf__destroy(skel);
		blind("cannot attach to the tracepoints: %s", strerror(-err));
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, NULL, NULL);
	if (rb == NULL) {
		tl_warn("ring buffer");
		goto cleanup;
	}
	if (open_record() < 0)
		goto cleanup;
	if (programs_seen(skel, 1, &seen0) == 0 && hits_open() == 0 && hits_enable(1) < 0)
		hits_close();
	print_ready(skel, &v);
	ret = poll_loop(skel, rb, seen0);
cleanup:
	hits_close();
	ring_buffer__free(rb);
	tcpevents_bpf__destroy(skel);
	if (env.rec != NULL && fclose(env.rec) != 0 && ret == 0) {
		tl_warn("%s: cannot write the record", env.record);
		ret = -1;
	}
	return ret;
}

int main(int argc, char **argv)
{
	static char outbuf[1 << 16];
	int ret;

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	/* Into a file or a pipe, 64 KiB at a time (glibc sizes a buffer of its own to the file's
	 * block, 4 KiB: a write() per 30 lines): poll_loop() says when the lines go out.  A
	 * terminal keeps its line buffering. */
	if (!isatty(STDOUT_FILENO) && setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf)) != 0)
		tl_err(1, "setvbuf");
	if (!env.replay && pr_catch_stop(on_signal) < 0)
		tl_err(1, "sigaction");
	ret = env.replay ? run_replay() : run_live();
	if (ret < 0)
		return 1;
	if (pr_flush_stdout() < 0) {
		tl_warn("stdout");
		return 1;
	}
	return 0;
}
