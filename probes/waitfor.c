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
 * The bound holds whatever FILE is.  It is opened O_NONBLOCK and stays so: a FIFO's open(2)
 * waits for no writer, and its read(2) says EAGAIN instead of waiting for data.  It is read
 * 64 KiB at a time with the clock looked at between reads, so a file that never ends
 * (/dev/urandom) or grows faster than it is read times out like any other.  As tail -F does,
 * a file shorter than what was read (truncated) is read again from its start, and when the
 * path comes to name another file (a rename over it), the rest of the old one is read, then the
 * new one from its start; either way the count starts again, since it is of what FILE holds.
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define POLL_MS		10		/* how often the file is read, by default */
#define LINE_MAX_B	(1 << 20)	/* a longer line is an error, not a silent cut */
#define CHUNK_B		65536		/* one read; the clock is looked at between two */

/* What a look at FILE found: not yet, COUNT lines, or the bound passed while it read. */
enum look { LOOK_NOT_YET, LOOK_FOUND, LOOK_CUT };

static struct env {
	long long pid, count, timeout_ms, poll_ms;
	const char *file, *ere;
	regex_t re;
	int64_t deadline;	/* tl_now_ns() when the bound passes */
	int fd;			/* the file, once it exists; -1 before */
	struct stat st;		/* fd's file when opened: which it is, whether regular */
	off_t off;		/* bytes read from fd */
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

/* Add r bytes read from FILE to the lines: each complete one that matches counts. */
static void take(const char *buf, size_t r)
{
	for (const char *p = buf, *end = buf + r; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl != NULL ? nl : end) - p);

		if (env.len + n > LINE_MAX_B)
			tl_errx(TL_EXIT_USAGE, "%s: a line longer than %d bytes", env.file, LINE_MAX_B);
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

/* Forget what was read: the count is of the file FILE is now, from its start. */
static void restart(void)
{
	env.off = 0;
	env.len = 0;
	env.matched = 0;
}

/* Open FILE without blocking (a FIFO with no writer) and note which file it is.  0, or -1 if
 * it does not exist (yet). */
static int open_file(void)
{
	env.fd = open(env.file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (env.fd < 0) {
		if (errno == ENOENT)
			return -1;
		tl_err(TL_EXIT_USAGE, "%s", env.file);
	}
	if (fstat(env.fd, &env.st) < 0)
		tl_err(TL_EXIT_USAGE, "%s", env.file);
	restart();
	return 0;
}

static void close_file(void)
{
	if (close(env.fd) < 0)
		tl_err(TL_EXIT_USAGE, "close");
	env.fd = -1;
}

/* A regular file now shorter than what was read has been truncated: read it from its start
 * (one truncated and refilled past that point between two looks cannot be told, as in tail). */
static void check_truncated(void)
{
	struct stat now;

	if (!S_ISREG(env.st.st_mode))
		return;
	if (fstat(env.fd, &now) < 0)
		tl_err(TL_EXIT_USAGE, "%s", env.file);
	if (now.st_size >= env.off)
		return;
	if (lseek(env.fd, 0, SEEK_SET) < 0)
		tl_err(TL_EXIT_USAGE, "%s", env.file);
	restart();
}

/* Whether the path names another file than fd (renamed over, or removed and made again); a
 * path that names nothing keeps the file open, which its writer may still be writing. */
static int replaced(void)
{
	struct stat now;

	if (stat(env.file, &now) < 0) {
		if (errno == ENOENT)
			return 0;
		tl_err(TL_EXIT_USAGE, "%s", env.file);
	}
	return now.st_dev != env.st.st_dev || now.st_ino != env.st.st_ino;
}

/* Read what fd has gained, CHUNK_B at a time, until it has no more for now (end of file, or
 * EAGAIN from a FIFO or device), COUNT complete lines match, or the bound passes.  Once it has
 * passed, one read more tells an end (the look is whole: -t 0 reads a small file to its end
 * and counts its last line) from more to come (cut). */
static enum look read_on(void)
{
	char buf[CHUNK_B];

	for (int past = 0;;) {
		ssize_t r = read(env.fd, buf, sizeof(buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return LOOK_NOT_YET;
		if (r < 0)
			tl_err(TL_EXIT_USAGE, "%s", env.file);
		if (r == 0)
			return LOOK_NOT_YET;
		env.off += r;
		take(buf, (size_t)r);
		if (env.matched >= env.count)
			return LOOK_FOUND;
		if (past)
			return LOOK_CUT;
		past = tl_now_ns() >= env.deadline;
	}
}

/* Read what FILE has gained since the last look, following it as tail -F does.  Found when
 * COUNT lines match, counting a last line not yet ended by '\n' as grep(1) would. */
static enum look look(void)
{
	for (;;) {
		enum look r;

		if (env.fd < 0 && open_file() < 0)
			return LOOK_NOT_YET;
		check_truncated();
		r = read_on();
		if (r != LOOK_NOT_YET)
			return r;
		if (env.matched + (env.len > 0 && line_matches(env.line, env.len)) >= env.count)
			return LOOK_FOUND;
		if (!replaced())
			return LOOK_NOT_YET;
		/* the old file is read to its end: on to the new one, unless the time is up */
		close_file();
		if (tl_now_ns() >= env.deadline)
			return LOOK_CUT;
	}
}

static enum look done(void)
{
	if (env.file != NULL)
		return look();
	return ended_by_proc() ? LOOK_FOUND : LOOK_NOT_YET;
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
	struct pollfd pfd = { .fd = -1, .events = POLLIN };

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	env.deadline = tl_now_ns() + env.timeout_ms * 1000000;
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
		enum look r = done();

		if (r != LOOK_NOT_YET)
			return finish(pfd.fd, r == LOOK_FOUND ? 0 : 3);
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
			if (env.file == NULL)
				return finish(pfd.fd, 0);
			r = look();
			return finish(pfd.fd, r == LOOK_FOUND ? 0 : r == LOOK_CUT ? 3 : 1);
		}
		left = (env.deadline - tl_now_ns()) / 1000000;
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
