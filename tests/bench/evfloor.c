/* evfloor — the least a tcpevents event can cost, for `make bench` (docs/bench.md).
 *
 *   evfloor -n NETNS_PATH
 *	attaches tests/bench/bpf/evfloor.bpf.c (tcpevents' five tracepoints, its namespace
 *	filter, one 96-byte record per event in a 1 MiB ring buffer), polls the ring buffer as
 *	tcpevents does (ring_buffer__poll(), 100 ms timeout) and counts the records by type: no
 *	decoding, no printing per event.  Stops on SIGINT or SIGTERM, drains what is queued and
 *	prints one line:
 *	  end events=N state=N probe=N other=N lost=N missed=N
 *	lost: records the ring buffer had no room for; missed: the programs' recursion misses
 *	(bpf_prog_info, as tcpevents' end line).  A "ready netns=INODE" line comes first, once
 *	attached.  Exit 4 (tcpevents' "blind") when BPF cannot run here, with one line why.
 *
 * CPU is measured by the caller: this process's rusage (the reader) and the programs' own
 * run_time_ns (/proc/PID/fdinfo of their fds, with BPF statistics enabled).
 */
#include "tl_cli.h"

#include <linux/types.h>
#include "tcpevents.h"
#include "evfloor.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "usage: evfloor -n NETNS_PATH\n"
#define EXIT_BLIND 4

static volatile sig_atomic_t stop;
static unsigned long long counts[256];

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int on_event(void *ctx, void *data, size_t size)
{
	(void)ctx;
	if (size >= sizeof(struct tcpev_rec))
		counts[((const struct tcpev_rec *)data)->type]++;
	return 0;
}

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	(void)level;
	(void)fmt;
	(void)ap;
	return 0;
}

/* The programs' recursion misses, summed; 0 where the kernel does not count them. */
static uint64_t recursion_misses(const struct bpf_object *obj)
{
	struct bpf_program *prog;
	uint64_t sum = 0;

	bpf_object__for_each_program(prog, obj) {
		struct bpf_prog_info info;
		__u32 len = sizeof(info);

		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0 &&
		    len >= offsetof(struct bpf_prog_info, recursion_misses) + sizeof(info.recursion_misses))
			sum += info.recursion_misses;
	}
	return sum;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	const char *path = NULL;
	struct evfloor_bpf *skel;
	struct ring_buffer *rb;
	unsigned long long all = 0;
	struct stat st;
	int opt, n = 0, err;

	tl_set_progname(argv[0]);
	while ((opt = getopt(argc, argv, "n:h")) != -1) {
		if (opt == 'n')
			path = optarg;
		else if (opt == 'h') {
			fputs(USAGE, stdout);
			return 0;
		} else {
			fputs(USAGE, stderr);
			return TL_EXIT_USAGE;
		}
	}
	if (path == NULL || optind != argc) {
		fputs(USAGE, stderr);
		return TL_EXIT_USAGE;
	}
	if (stat(path, &st) < 0)
		tl_err(1, "%s", path);
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		tl_err(1, "sigaction");
	libbpf_set_print(quiet);
	skel = evfloor_bpf__open();
	if (skel == NULL)
		tl_err(1, "cannot open the BPF object");
	skel->rodata->netns_ino = (__u32)st.st_ino;
	err = evfloor_bpf__load(skel);
	if (err == 0)
		err = evfloor_bpf__attach(skel);
	if (err != 0) {
		evfloor_bpf__destroy(skel);
		tl_warnx("cannot see TCP events: %s", strerror(-err));
		return EXIT_BLIND;
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, NULL, NULL);
	if (rb == NULL)
		tl_err(1, "ring buffer");
	printf("ready netns=%u\n", (unsigned)st.st_ino);
	fflush(stdout);
	while (!stop) {
		n = ring_buffer__poll(rb, 100);
		if (n < 0 && n != -EINTR)
			break;
		n = 0;
	}
	if (n == 0)
		n = ring_buffer__consume(rb);
	if (n < 0) {
		errno = -n;
		tl_err(1, "ring buffer");
	}
	for (size_t k = 0; k < 256; k++)
		all += counts[k];
	printf("end events=%llu state=%llu probe=%llu other=%llu lost=%" PRIu64 " missed=%" PRIu64 "\n",
	       all, counts[TCPEV_STATE], counts[TCPEV_PROBE],
	       all - counts[TCPEV_STATE] - counts[TCPEV_PROBE],
	       (uint64_t)__atomic_load_n(&skel->bss->lost, __ATOMIC_RELAXED),
	       recursion_misses(skel->obj));
	ring_buffer__free(rb);
	evfloor_bpf__destroy(skel);
	return fflush(stdout) == 0 ? 0 : 1;
}
