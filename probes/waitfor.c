/* waitfor — the collect scripts' waits in one process: until a process has ended, or until a
 * file that process writes holds COUNT lines matching an extended regular expression, or until
 * a timeout.  experiments/lib/collect.sh's tl_wait_count and tl_wait_exit call it.
 *
 * Why a program: the shell's way (grep -c FILE and sleep 0.01, over and over) runs two
 * programs every 10 ms, and in a QEMU guest under TCG each fork+exec costs the host 8-15 ms of
 * CPU (docs/kernel-matrix.md, "Waiting in a guest"), so a wait of a few seconds cost most of a
 * core.  Here the process's end is a pidfd (pidfd_open(2), Linux 5.3; /proc/PID/stat where
 * there is none), and the file is read from where the last look stopped, every 10 ms (-i), so
 * a wait costs one exec and a wake-up per look.
 *
 * Without -p, only the file and the timeout are watched.
 * Exit status: 0 the wait is over (the lines are there; without -e, the process has ended);
 * 1 the process ended first and the file, read once more after that, still lacks the lines;
 * 3 the timeout passed; 2 bad usage or an error (one line on stderr).  Prints nothing else:
 * the caller words the failure.
 */
#include "tl_cli.h"
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define POLL_MS		10		/* how often the file is read, by default */
#define LINE_MAX_B	(1 << 20)	/* a longer line is an error, not a silent cut */

static struct env {
	long long pid, count, timeout_ms, poll_ms;
	const char *file, *ere;
	regex_t re;
	int fd;			/* the file, once it exists; -1 before */
	char *line;		/* the last line read, not yet ended by '\n' */
	size_t len, cap;
	long long matched;	/* complete lines that matched */
} env = { .count = 1, .poll_ms = POLL_MS, .fd = -1 };

static void usage(void)
{
	fputs("usage: waitfor [-p PID] -t TIMEOUT_MS [-f FILE -e ERE [-n COUNT] [-i POLL_MS]]\n"
	      "Wait until process PID has ended, or until FILE has COUNT lines matching ERE.\n"
	      "  -p PID         the process: without -f, wait for its end; with -f, its end first\n"
	      "                 is a failure (FILE is read once more after it)\n"
	      "  -t TIMEOUT_MS  the bound, 0..86400000 ms (0: one look)\n"
	      "  -f FILE        the file to read, from where the last look stopped (with -e)\n"
	      "  -e ERE         the extended regular expression a line must match\n"
	      "  -n COUNT       how many matching lines (default 1)\n"
	      "  -i POLL_MS     how often FILE is read, 1..60000 ms (default 10)\n"
	      "  -h             print this help and exit\n"
	      "Exit 0: done; 1: PID ended before the lines; 3: timed out; 2: bad usage or an\n"
	      "error.  Prints nothing else.\n", stdout);
}

static void parse_args(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, ":p:t:f:e:n:i:h")) != -1) {
		switch (c) {
		case 'p': env.pid = tl_opt_ll("-p", optarg, 1, 4194304); break;	/* PID_MAX_LIMIT */
		case 't': env.timeout_ms = tl_opt_ll("-t", optarg, 0, 86400000); break;
		case 'f': env.file = optarg; break;
		case 'e': env.ere = optarg; break;
		case 'n': env.count = tl_opt_ll("-n", optarg, 1, 1000000000); break;
		case 'i': env.poll_ms = tl_opt_ll("-i", optarg, 1, 60000); break;
		case 'h': usage(); exit(0);
		default: tl_opt_fail(c);
		}
	}
	if (optind < argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s' (see -h)", argv[optind]);
	if ((env.file == NULL) != (env.ere == NULL))
		tl_errx(TL_EXIT_USAGE, "-f and -e go together (see -h)");
	if (env.pid == 0 && env.file == NULL)
		tl_errx(TL_EXIT_USAGE, "nothing to wait for: -p PID, -f FILE -e ERE, or both (see -h)");
	if (env.ere != NULL) {
		int r = regcomp(&env.re, env.ere, REG_EXTENDED | REG_NOSUB);

		if (r != 0) {
			char msg[256];

			regerror(r, &env.re, msg, sizeof(msg));
			tl_errx(TL_EXIT_USAGE, "-e '%s': %s", env.ere, msg);
		}
	}
}

/* Whether PID has ended: gone, or a zombie (as collect.sh's tl_running sees it). */
static int ended_by_proc(void)
{
	char path[64], *buf = NULL, *p;
	size_t len;
	int ended;

	snprintf(path, sizeof(path), "/proc/%lld/stat", env.pid);
	if (tl_read_file(path, 4096, &buf, &len) < 0) {
		if (errno == ENOENT || errno == ESRCH)
			return 1;
		tl_err(TL_EXIT_USAGE, "%s", path);
	}
	/* "PID (comm) S ...": the state follows the last ')' (comm may hold one) */
	p = memrchr(buf, ')', len);
	ended = p == NULL || p + 2 >= buf + len || p[2] == 'Z';
	free(buf);
	return ended;
}

static int line_matches(const char *s, size_t n)
{
	char *z = malloc(n + 1);
	int r;

	if (z == NULL)
		tl_err(TL_EXIT_USAGE, "malloc");
	memcpy(z, s, n);
	z[n] = '\0';
	r = regexec(&env.re, z, 0, NULL, 0);
	free(z);
	if (r != 0 && r != REG_NOMATCH)
		tl_errx(TL_EXIT_USAGE, "-e '%s': regexec failed", env.ere);
	return r == 0;
}

/* Read what FILE has gained since the last look; count its complete matching lines.  Returns
 * whether COUNT lines match, counting a last line not yet ended by '\n' as grep(1) would. */
static int look(void)
{
	char buf[65536];
	ssize_t r;

	if (env.fd < 0) {
		env.fd = open(env.file, O_RDONLY | O_CLOEXEC);
		if (env.fd < 0) {
			if (errno == ENOENT)
				return 0;
			tl_err(TL_EXIT_USAGE, "%s", env.file);
		}
	}
	while ((r = read(env.fd, buf, sizeof(buf))) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			tl_err(TL_EXIT_USAGE, "%s", env.file);
		}
		for (const char *p = buf, *end = buf + r; p < end;) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = (size_t)((nl != NULL ? nl : end) - p);

			if (env.len + n > LINE_MAX_B)
				tl_errx(TL_EXIT_USAGE, "%s: a line longer than %d bytes", env.file,
					LINE_MAX_B);
			if (env.len + n + 1 > env.cap) {
				size_t cap = (env.len + n + 1) * 2;
				char *q = realloc(env.line, cap);

				if (q == NULL)
					tl_err(TL_EXIT_USAGE, "realloc");
				env.line = q;
				env.cap = cap;
			}
			memcpy(env.line + env.len, p, n);
			env.len += n;
			if (nl == NULL)
				break;
			env.matched += line_matches(env.line, env.len);
			env.len = 0;
			p = nl + 1;
		}
	}
	return env.matched + (env.len > 0 && line_matches(env.line, env.len)) >= env.count;
}

static int done(void)
{
	return env.file != NULL ? look() : ended_by_proc();
}

/* Close and free what the wait held; returns STATUS. */
static int finish(int pidfd, int status)
{
	if ((pidfd >= 0 && close(pidfd) < 0) || (env.fd >= 0 && close(env.fd) < 0))
		tl_err(TL_EXIT_USAGE, "close");
	if (env.ere != NULL)
		regfree(&env.re);
	free(env.line);
	return status;
}

int main(int argc, char **argv)
{
	int64_t deadline;
	struct pollfd pfd = { .fd = -1, .events = POLLIN };

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	deadline = tl_now_ns() + env.timeout_ms * 1000000;
	/* a pidfd polls readable once the process has ended; without one (before Linux 5.3, or
	 * seccomp) its /proc/PID/stat is read at every look */
	if (env.pid != 0) {
#ifdef SYS_pidfd_open
		pfd.fd = (int)syscall(SYS_pidfd_open, (pid_t)env.pid, 0);
#else
		errno = ENOSYS;
#endif
		if (pfd.fd < 0 && errno != ENOSYS && errno != EPERM && errno != ESRCH)
			tl_err(TL_EXIT_USAGE, "pidfd_open(%lld)", env.pid);
	}
	for (;;) {
		int ended, n;
		int64_t left;

		if (done())
			return finish(pfd.fd, 0);
		ended = pfd.fd >= 0 || env.pid == 0 ? 0 : ended_by_proc();
		if (!ended && pfd.fd >= 0) {
			struct pollfd now = pfd;

			n = poll(&now, 1, 0);
			if (n < 0 && errno != EINTR)
				tl_err(TL_EXIT_USAGE, "poll");
			ended = n > 0;
		}
		if (ended) {
			/* what the process wrote before it ended is all there will be */
			if (env.file != NULL && look())
				return finish(pfd.fd, 0);
			return finish(pfd.fd, env.file != NULL ? 1 : 0);
		}
		left = (deadline - tl_now_ns()) / 1000000;
		if (left <= 0)
			return finish(pfd.fd, 3);
		/* without -e, only the process's end is awaited: one sleep, when a pidfd says it */
		n = env.file == NULL && pfd.fd >= 0 ? (int)left : (left < env.poll_ms ? (int)left : (int)env.poll_ms);
		if (pfd.fd >= 0) {
			if (poll(&pfd, 1, n) < 0 && errno != EINTR)
				tl_err(TL_EXIT_USAGE, "poll");
		} else if (poll(NULL, 0, n) < 0 && errno != EINTR) {
			tl_err(TL_EXIT_USAGE, "poll");
		}
	}
}
