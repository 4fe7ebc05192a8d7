/* capture — the packets on an interface (libpcap), one line per TCP segment or ICMP error, and
 * optionally a .pcap file of them.  See docs/capture.md.
 *
 * libpcap opens a PACKET socket on the interface, attaches the BPF program pcap_compile() built
 * (so the kernel filters), and hands over each frame with its kernel timestamp; the lab's own
 * decoder (probes/lib/pr_pcap.c) turns it into a line.  Timestamps are nanoseconds of
 * CLOCK_REALTIME; the lines print them on CLOCK_MONOTONIC, the clock of sockwatch and the
 * fixtures, through an offset read once at the start (the best of 16 tries).
 */
#include "pr_pcap.h"
#include "pr_run.h"
#include "tl_cli.h"
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define USAGE "usage: capture -i IFACE [-p PORT] [-w FILE.pcap] [-f FILTER] [-s SNAPLEN] [-c COUNT]\n" \
	      "       capture -r FILE.pcap [-p PORT] [-f FILTER]\n"
#define SNAPLEN_DEFAULT	256	/* every header the decoder reads: see docs/capture.md */
#define SNAPLEN_MAX	262144	/* libpcap's MAXIMUM_SNAPLEN */
#define FLUSH_MS	10	/* lines reach stdout at most this late after a burst */
#define BLOCK_MS	10	/* the kernel hands a ring block over at least this often */
#define BUFFER_BYTES	(16 * 1024 * 1024)	/* the kernel ring libpcap maps (docs/capture.md) */
/* An IPv4 TCP fragment after the first: it has no ports, so "tcp port N" (which takes the first,
 * offset 0) never matches it, and without it a reader could not join a segment's fragments. */
#define FRAG_FILTER	"(ip proto 6 and ip[6:2] & 0x1fff != 0)"

static struct env {
	const char *iface, *read, *write, *filter;
	char filter_buf[96];
	char *tmp;		/* write goes here first, renamed at the end */
	uint16_t port;
	long long snaplen, count;
	pcap_t *p;
	pcap_dumper_t *dump;
	int linktype;
	int64_t offset_ns;	/* realtime - monotonic, once; 0 for a file */
	int64_t ready_ns, last_ns;
	unsigned long long packets, tcp, icmp, other;
	struct pr_pcap_table *table;
	FILE *out;		/* stdout; for a file, a memory stream until the end */
	char *mem;
	size_t memlen;
	int sigfd;		/* SIGINT/SIGTERM, blocked, read here (signalfd) */
	int stop;
} env = { .snaplen = SNAPLEN_DEFAULT, .sigfd = -1 };

_Noreturn static void usage(FILE *f, int status)
{
	fputs(USAGE, f);
	if (f == stdout)
		fputs("  -i IFACE    capture on this interface (lo, veth-c, ...) until SIGINT/SIGTERM\n"
		      "  -r FILE     decode a .pcap file instead (t_ns: the file's timestamps)\n"
		      "  -p PORT     the server port: dir= c>s or s>c, and the default filter\n"
		      "              \"tcp port PORT or icmp or " FRAG_FILTER "\"\n"
		      "              (without -p: \"tcp or icmp\"; either takes every IPv4 TCP fragment)\n"
		      "  -f FILTER   a pcap-filter(7) expression instead of the default (\"\": all)\n"
		      "  -w FILE     also write the packets to FILE (nanosecond pcap), via FILE.tmp\n"
		      "  -s SNAPLEN  bytes kept of each packet, 68..262144 (default 256: the headers)\n"
		      "  -c COUNT    stop after COUNT packets, 1..1000000000\n"
		      "  -h          print this help\n", f);
	exit(status);
}

static void parse_args(int argc, char **argv)
{
	int opt, snaplen_set = 0;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":i:r:p:f:w:s:c:h")) != -1) {
		if (strchr("irw", opt) && optarg[0] == '\0')
			tl_errx(TL_EXIT_USAGE, "-%c needs a value", opt);
		switch (opt) {
		case 'i': env.iface = optarg; break;
		case 'r': env.read = optarg; break;
		case 'p': env.port = tl_opt_port("-p", optarg); break;
		case 'f': env.filter = optarg; break;
		case 'w': env.write = optarg; break;
		case 's': env.snaplen = tl_opt_ll("-s", optarg, 68, SNAPLEN_MAX); snaplen_set = 1; break;
		case 'c': env.count = tl_opt_ll("-c", optarg, 1, 1000000000); break;
		case 'h': usage(stdout, 0);
		default: tl_opt_fail(opt);
		}
	}
	if (optind < argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s' (-h for help)", argv[optind]);
	if ((env.iface == NULL) == (env.read == NULL))
		tl_errx(TL_EXIT_USAGE, "give one of -i IFACE and -r FILE (-h for help)");
	if (env.read != NULL && (env.write || env.count || snaplen_set))
		tl_errx(TL_EXIT_USAGE, "-r reads a file: it excludes -w, -s and -c");
	if (env.filter == NULL) {
		if (env.port)
			snprintf(env.filter_buf, sizeof(env.filter_buf), "tcp port %u or icmp or "
				 FRAG_FILTER, env.port);
		else
			snprintf(env.filter_buf, sizeof(env.filter_buf), "tcp or icmp");
		env.filter = env.filter_buf;
	}
}

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* realtime - monotonic: a realtime reading between two monotonic ones, against their midpoint.
 * A preemption between the reads would put its length into the offset (every packet's time
 * off by as much), so of OFFSET_TRIES tries the one with the shortest window is kept. */
#define OFFSET_TRIES 16
static int64_t clock_offset(void)
{
	struct timespec m0, r, m1;
	int64_t best = 0, best_win = INT64_MAX;

	for (int i = 0; i < OFFSET_TRIES; i++) {
		if (clock_gettime(CLOCK_MONOTONIC, &m0) < 0 || clock_gettime(CLOCK_REALTIME, &r) < 0 ||
		    clock_gettime(CLOCK_MONOTONIC, &m1) < 0)
			tl_err(1, "clock_gettime");
		if (ts_ns(&m1) - ts_ns(&m0) < best_win) {
			best_win = ts_ns(&m1) - ts_ns(&m0);
			best = ts_ns(&r) - (ts_ns(&m0) + (ts_ns(&m1) - ts_ns(&m0)) / 2);
		}
	}
	return best;
}

static int64_t pkt_ns(const struct pcap_pkthdr *h)
{
	/* nanosecond precision: tv_usec holds nanoseconds */
	return (int64_t)h->ts.tv_sec * 1000000000 + h->ts.tv_usec - env.offset_ns;
}

static void on_packet(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes)
{
	char line[PR_PCAP_LINE_MAX];
	int64_t t = pkt_ns(h), d = t - env.ready_ns;
	enum pr_pcap_kind k;

	(void)user;
	if (env.dump != NULL)
		pcap_dump((u_char *)env.dump, h, bytes);
	k = pr_pcap_decode(env.table, env.linktype, bytes, h->caplen, h->len, line, sizeof(line));
	env.packets++;
	env.tcp += k == PR_PCAP_TCP;
	env.icmp += k == PR_PCAP_ICMP;
	env.other += k == PR_PCAP_OTHER || k == PR_PCAP_FRAGMENT;	/* neither is a segment */
	env.last_ns = t;
	fprintf(env.out, "t_s=%s%" PRId64 ".%06" PRId64 " t_ns=%" PRId64 " %s\n", d < 0 ? "-" : "",
	       (d < 0 ? -d : d) / 1000000000, (d < 0 ? -d : d) % 1000000000 / 1000, t, line);
	if (env.count && env.packets >= (unsigned long long)env.count) {
		env.stop = 1;
		pcap_breakloop(env.p);
	}
}

/* Remove the half-written file; the one error line was printed by the caller. */
static void discard_output(void)
{
	if (env.dump != NULL) {
		pcap_dump_close(env.dump);
		env.dump = NULL;
	}
	if (env.tmp != NULL)
		unlink(env.tmp);
}

/* One error line after the .pcap was opened: the half-written file goes first. */
__attribute__((format(printf, 1, 2)))
_Noreturn static void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	discard_output();
	tl_errx(1, "%s", msg);
}

static void set_filter(void)
{
	struct bpf_program prog;

	if (pcap_compile(env.p, &prog, env.filter, 1, PCAP_NETMASK_UNKNOWN) < 0)
		tl_errx(1, "%s \"%s\": %s", env.filter == env.filter_buf ? "the default filter" : "-f",
			env.filter, pcap_geterr(env.p));
	if (pcap_setfilter(env.p, &prog) < 0) {
		pcap_freecode(&prog);
		tl_errx(1, "setting the filter: %s", pcap_geterr(env.p));
	}
	pcap_freecode(&prog);
}

static void open_live(void)
{
	char errbuf[PCAP_ERRBUF_SIZE] = "";
	int r;

	env.p = pcap_create(env.iface, errbuf);
	if (env.p == NULL)
		tl_errx(1, "%s: %s", env.iface, errbuf);
	/* Not immediate mode: libpcap then uses TPACKET_V3, whose blocks hold packets of any size
	 * back to back and are handed over when full or BLOCK_MS old, so one wake-up serves many
	 * packets (docs/capture.md: immediate mode's one 64 KiB frame per packet dropped packets
	 * under back-to-back traffic and woke up once per packet).  The stop drains what the last
	 * block holds (loop_live). */
	if (pcap_set_snaplen(env.p, (int)env.snaplen) != 0 || pcap_set_immediate_mode(env.p, 0) != 0 ||
	    pcap_set_timeout(env.p, BLOCK_MS) != 0 ||
	    pcap_set_tstamp_precision(env.p, PCAP_TSTAMP_PRECISION_NANO) != 0 ||
	    pcap_set_buffer_size(env.p, BUFFER_BYTES) != 0)
		tl_errx(1, "%s: setting up the handle: %s", env.iface, pcap_geterr(env.p));
	r = pcap_activate(env.p);
	if (r == PCAP_ERROR_NO_SUCH_DEVICE)
		tl_errx(1, "-i %s: no such interface", env.iface);
	if (r == PCAP_ERROR_PERM_DENIED)
		tl_errx(1, "-i %s: permission denied (capturing needs CAP_NET_RAW)", env.iface);
	if (r < 0)
		tl_errx(1, "-i %s: %s", env.iface, pcap_statustostr(r));
	if (r > 0)
		tl_warnx("-i %s: %s", env.iface, pcap_statustostr(r));
	env.linktype = pcap_datalink(env.p);
	set_filter();
	if (pcap_setnonblock(env.p, 1, errbuf) < 0)
		tl_errx(1, "-i %s: %s", env.iface, errbuf);
}

/* Open path (mode "r" or "w") as a FILE, refusing what is not a regular file on the open
 * descriptor: a FIFO would block fopen() until a peer came.  NULL with errno. */
static FILE *open_regular(const char *path, int write)
{
	int fd = open(path, write ? O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
				  : O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0666);
	struct stat st;
	FILE *f;
	int e;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		errno = S_ISDIR(st.st_mode) ? EISDIR : TL_ENOTREG;
		goto fail;
	}
	if (fcntl(fd, F_SETFL, write ? O_WRONLY : O_RDONLY) < 0)	/* blocking again */
		goto fail;
	f = fdopen(fd, write ? "w" : "r");
	if (f != NULL)
		return f;
fail:
	e = errno;
	close(fd);
	errno = e;
	return NULL;
}

static const char *file_error(int e)
{
	return e == TL_ENOTREG ? "not a regular file" : strerror(e);
}

/* The .pcap goes to FILE.tmp, renamed to FILE once complete: an interrupted or failed run
 * leaves no FILE that looks whole. */
static void open_output(void)
{
	size_t n = strlen(env.write) + 5;
	struct stat st;
	FILE *f;

	/* FILE itself is only renamed over at the end: refuse now what that rename would */
	if (stat(env.write, &st) == 0 && !S_ISREG(st.st_mode))
		tl_errx(1, "-w %s: %s", env.write, S_ISDIR(st.st_mode) ? strerror(EISDIR)
								      : "not a regular file");
	if (stat(env.write, &st) < 0 && errno != ENOENT)	/* a symlink loop, a file as a dir */
		tl_errx(1, "-w %s: %s", env.write, strerror(errno));
	env.tmp = malloc(n);
	if (env.tmp == NULL)
		tl_err(1, "malloc");
	snprintf(env.tmp, n, "%s.tmp", env.write);
	f = open_regular(env.tmp, 1);
	if (f == NULL)
		tl_errx(1, "-w %s: %s", env.write, file_error(errno));
	env.dump = pcap_dump_fopen(env.p, f);
	if (env.dump == NULL) {
		fclose(f);
		unlink(env.tmp);
		tl_errx(1, "-w %s: %s", env.write, pcap_geterr(env.p));
	}
}

static void close_output(void)
{
	if (env.dump == NULL)
		return;
	if (pcap_dump_flush(env.dump) < 0)
		die("-w %s: write failed", env.write);
	pcap_dump_close(env.dump);
	env.dump = NULL;
	if (rename(env.tmp, env.write) < 0)
		die("-w %s: %s", env.write, strerror(errno));
	free(env.tmp);
	env.tmp = NULL;		/* done: nothing to remove any more */
}

static void print_ready(void)
{
	const char *name = pcap_datalink_val_to_name(env.linktype);
	char port[8] = "-", number[16];

	if (env.port)
		snprintf(port, sizeof(port), "%u", env.port);
	if (name == NULL) {	/* a link type libpcap has no name for: its number */
		snprintf(number, sizeof(number), "%d", env.linktype);
		name = number;
	}
	fprintf(env.out, "ready t_ns=%" PRId64 " %s=%s linktype=%s snaplen=%d filter=\"%s\" port=%s "
	       "clock_offset_ns=%" PRId64 "\n", env.ready_ns, env.read ? "file" : "iface",
	       env.read ? env.read : env.iface, name, pcap_snapshot(env.p), env.filter,
	       port, env.offset_ns);
	if (fflush(env.out) == EOF)
		die("stdout: %s", strerror(errno));
}

/* SIGINT and SIGTERM, blocked from the start, become readable on a signalfd, polled beside the
 * capture: none is lost between a check and the sleep, and no handler runs mid-packet. */
static void block_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		tl_err(1, "sigprocmask");
	env.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (env.sigfd < 0)
		tl_err(1, "signalfd");
}

/* Hand over what the ring holds; when it is empty, sleep in poll() until packets or a signal.
 * Lines are flushed once the ring stayed empty for FLUSH_MS (or at once when the buffer is
 * full): one write() per burst, not one per packet. */
static void loop_live(void)
{
	struct pollfd pfd[2] = {
		{ .fd = pcap_get_selectable_fd(env.p), .events = POLLIN },
		{ .fd = env.sigfd, .events = POLLIN },
	};
	int n, unflushed = 0;

	if (pfd[0].fd < 0)
		die("-i %s: no selectable descriptor", env.iface);
	while (!env.stop) {
		n = pcap_dispatch(env.p, -1, on_packet, NULL);	/* non-blocking */
		if (n == PCAP_ERROR)
			die("-i %s: %s", env.iface, pcap_geterr(env.p));
		unflushed |= n > 0;
		if (n > 0 || env.stop)
			continue;
		n = poll(pfd, 2, unflushed ? FLUSH_MS : -1);
		if (n < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (n == 0) {
			if (fflush(stdout) == EOF)
				die("stdout: %s", strerror(errno));
			unflushed = 0;
		}
		if (n > 0 && pfd[1].revents)
			env.stop = 1;
	}
	/* Drain: what the ring holds now, then the block still open, which the kernel hands over
	 * within BLOCK_MS (its retire timer); done when nothing came for three of those, or after
	 * 2 s whatever comes (a sender that never pauses cannot keep the probe running). */
	int64_t drain_end = tl_now_ns() + 2000000000LL;

	while ((!env.count || env.packets < (unsigned long long)env.count) && tl_now_ns() < drain_end) {
		n = pcap_dispatch(env.p, -1, on_packet, NULL);
		if (n == PCAP_ERROR)
			die("-i %s: %s", env.iface, pcap_geterr(env.p));
		if (n > 0)
			continue;
		n = poll(pfd, 1, 3 * BLOCK_MS);
		if (n < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (n == 0)
			break;
	}
}

static void end_live(void)
{
	struct pcap_stat st;

	if (pcap_stats(env.p, &st) < 0)
		die("pcap_stats: %s", pcap_geterr(env.p));
	close_output();
	printf("end t_ns=%" PRId64 " packets=%llu tcp=%llu icmp=%llu other=%llu received=%u "
	       "dropped=%u ifdropped=%u\n", tl_now_ns(), env.packets, env.tcp, env.icmp, env.other,
	       st.ps_recv, st.ps_drop, st.ps_ifdrop);
}

/* The bytes of the smallest IPv4 TCP packet of a link type: its link header + 20 + 20. */
static int min_tcp_snaplen(int linktype)
{
	switch (linktype) {
	case PR_DLT_EN10MB:	return 14 + 40;
	case PR_DLT_LINUX_SLL:	return 16 + 40;
	case PR_DLT_LINUX_SLL2:	return 20 + 40;
	default:		return 40;	/* raw IP, or a type decoded as other= */
	}
}

/* A file: the ready line's t_ns is the first packet's, so the lines depend on the file only. */
static void run_offline(void)
{
	char errbuf[PCAP_ERRBUF_SIZE] = "";
	struct pcap_pkthdr *h;
	const u_char *bytes;
	int r;

	FILE *f = open_regular(env.read, 0);

	if (f == NULL)
		tl_errx(1, "-r %s: %s", env.read, file_error(errno));
	/* pcap_open_offline_with_tstamp_precision() on a FILE opened without blocking */
	env.p = pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, errbuf);
	if (env.p == NULL) {
		fclose(f);
		tl_errx(1, "-r %s: %s", env.read, errbuf);
	}
	/* the lines are kept until the file was read to its end: a truncated or corrupt file
	 * prints its one error line and nothing on stdout */
	env.out = open_memstream(&env.mem, &env.memlen);
	if (env.out == NULL)
		tl_err(1, "open_memstream");
	env.linktype = pcap_datalink(env.p);
	/* a file's snaplen below the smallest TCP packet it could hold: libpcap's filter reads
	 * past every packet and passes none, so it would print packets=0 as if there were none */
	if (pcap_snapshot(env.p) < min_tcp_snaplen(env.linktype))
		tl_errx(1, "-r %s: snaplen %d is too short to hold a TCP header (%d bytes: link "
			"header, IPv4 and TCP headers)", env.read, pcap_snapshot(env.p),
			min_tcp_snaplen(env.linktype));
	set_filter();
	r = pcap_next_ex(env.p, &h, &bytes);
	if (r == 1)
		env.ready_ns = pkt_ns(h);
	env.last_ns = env.ready_ns;
	print_ready();
	for (; r == 1; r = pcap_next_ex(env.p, &h, &bytes))
		on_packet(NULL, h, bytes);
	if (r == PCAP_ERROR)
		tl_errx(1, "-r %s: %s", env.read, pcap_geterr(env.p));
	fprintf(env.out, "end t_ns=%" PRId64 " packets=%llu tcp=%llu icmp=%llu other=%llu "
		"received=- dropped=- ifdropped=-\n", env.last_ns, env.packets, env.tcp, env.icmp,
		env.other);
	r = fclose(env.out);
	env.out = stdout;
	if (r == EOF)
		tl_err(1, "open_memstream");
	if (fwrite(env.mem, 1, env.memlen, stdout) != env.memlen)
		tl_errx(1, "stdout: write failed");
}

/* At exit, whatever way it comes (tl_errx too): close and free what is open; an output still
 * open was not finished, so its FILE.tmp goes. */
static void cleanup(void)
{
	discard_output();
	if (env.out != NULL && env.out != stdout)
		fclose(env.out);
	env.out = stdout;
	free(env.mem);
	env.mem = NULL;
	if (env.p != NULL)
		pcap_close(env.p);
	env.p = NULL;
	free(env.table);
	env.table = NULL;
	free(env.tmp);
	env.tmp = NULL;
	if (env.sigfd >= 0)
		close(env.sigfd);
	env.sigfd = -1;
}

int main(int argc, char **argv)
{
	tl_set_progname(argv[0]);
	env.out = stdout;
	if (atexit(cleanup) != 0)
		tl_errx(1, "atexit failed");
	parse_args(argc, argv);
	env.table = malloc(sizeof(*env.table));
	if (env.table == NULL)
		tl_err(1, "malloc");
	pr_pcap_init(env.table, env.port);
	if (env.read != NULL) {
		run_offline();
	} else {
		block_signals();
		open_live();
		if (env.write != NULL)
			open_output();
		env.offset_ns = clock_offset();
		env.ready_ns = tl_now_ns();
		print_ready();
		loop_live();
		end_live();
	}
	cleanup();
	if (pr_flush_stdout() < 0)
		tl_errx(1, "stdout: write failed");
	return 0;
}
