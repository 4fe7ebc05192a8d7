/* machine — describe the system an experiment ran on: kernel, CONFIG_HZ, CPUs, and the TCP
 * sysctls the experiments depend on, as key=value lines.  See docs/machine.md.
 *
 * Sysctls are read from /proc/sys, so per-namespace ones (most of net.ipv4.tcp_*) are those of
 * the namespace the probe runs in.  CONFIG_HZ comes from /boot/config-RELEASE or, failing that,
 * /proc/config.gz, which common/tl_gunzip.c inflates (RFC 1951/1952, after zlib's contrib/puff)
 * so that the probe needs no library and links statically into a busybox guest.
 */
#include "tl_gunzip.h"
#include "tl_cli.h"
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define FILE_MAX	(4 * 1024 * 1024)	/* a kernel config is ~250 KiB */

static struct env {
	const char *root;	/* -r: prefix for every file read; NULL: the live system */
} env;

/* The sysctls tcplab's experiments depend on, as paths under /proc/sys. */
static const char *const sysctls[] = {
	"net/ipv4/tcp_syn_retries",
	"net/ipv4/tcp_syn_linear_timeouts",	/* 6.5+ */
	"net/ipv4/tcp_synack_retries",
	"net/ipv4/tcp_max_syn_backlog",
	"net/ipv4/tcp_syncookies",
	"net/ipv4/tcp_abort_on_overflow",
	"net/core/somaxconn",
	"net/ipv4/ip_local_port_range",
	"net/ipv4/tcp_fin_timeout",
	"net/ipv4/tcp_retries2",
	"net/ipv4/tcp_orphan_retries",
	"net/ipv4/tcp_rto_min_us",		/* 6.11+ */
	"net/ipv4/tcp_rto_max_ms",		/* 6.15+ */
	"net/ipv4/tcp_timestamps",
	"net/ipv4/tcp_tw_reuse",
	"net/ipv4/tcp_max_tw_buckets",
	"net/ipv4/tcp_ehash_entries",		/* 6.1+; < 0: shared with the host */
};

/* Bytes read from a file or inflated: malloc'd, with a NUL after the last byte. */
struct blob {
	unsigned char *p;
	size_t len, cap;
};

static void usage(void)
{
	fputs("usage: machine [-r root]\n"
	      "Describe this system as key=value lines: kernel, CONFIG_HZ, CPUs, TCP sysctls.\n"
	      "  -r DIR  read every file under DIR instead of / (DIR/proc/sys/..., DIR/boot/config-*,\n"
	      "          DIR/proc/config.gz, DIR/sys/devices/system/cpu/online); kernel=, version=\n"
	      "          and machine= then come from DIR/proc/sys/kernel/{osrelease,version,arch}\n"
	      "  -h      print this help\n", stdout);
}

static void parse_args(int argc, char **argv)
{
	int opt;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":r:h")) != -1) {
		switch (opt) {
		case 'r': env.root = optarg; break;
		case 'h': usage(); exit(0);
		default: tl_opt_fail(opt);
		}
	}
	if (optind < argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s' (-h for help)", argv[optind]);
	if (env.root != NULL && env.root[0] == '\0')
		tl_errx(TL_EXIT_USAGE, "-r needs a directory");
}

static int blob_reserve(struct blob *b, size_t more, size_t max)
{
	size_t cap = b->cap ? b->cap : 4096;
	unsigned char *p;

	if (b->len + more + 1 <= b->cap)
		return 0;
	if (b->len + more + 1 > max + 1) {
		errno = EFBIG;
		return -1;
	}
	while (cap < b->len + more + 1)
		cap *= 2;
	p = realloc(b->p, cap);
	if (p == NULL)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* The whole of path (under env.root) into b, NUL-terminated.  Returns -1 with errno. */
static int slurp(const char *path, struct blob *b)
{
	char full[PATH_MAX];
	int fd = -1, ret = -1, saved;
	ssize_t n;

	b->len = 0;
	if (snprintf(full, sizeof(full), "%s%s", env.root ? env.root : "", path) >= (int)sizeof(full)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(full, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (;;) {
		if (blob_reserve(b, 4096, FILE_MAX) < 0)
			break;
		n = read(fd, b->p + b->len, b->cap - b->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n == 0 ? 0 : -1;
			break;
		}
		b->len += (size_t)n;
	}
	saved = errno;
	close(fd);
	errno = saved;
	if (ret == 0)
		b->p[b->len] = '\0';
	return ret;
}

/* One printable line: whitespace runs (a tab in ip_local_port_range, the final newline) become
 * one space, control bytes become '?', ends are trimmed. */
static char *one_line(struct blob *b)
{
	char *s = (char *)b->p, *w = s;
	size_t i;

	for (i = 0; i < b->len; i++) {
		unsigned char c = b->p[i];

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			if (w != s && w[-1] != ' ')
				*w++ = ' ';
		} else {
			*w++ = c < 0x20 || c == 0x7f ? '?' : (char)c;
		}
	}
	if (w != s && w[-1] == ' ')
		w--;
	*w = '\0';
	return s;
}

/* ---- what the probe prints ---- */

/* CONFIG_HZ=<n> at the start of a line of a kernel config. */
static int find_hz(const struct blob *config, long long *hz)
{
	const char *key = "CONFIG_HZ=", *p = (const char *)config->p;
	const char *end = p + config->len, *nl;
	char num[16];
	size_t n;

	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		n = (size_t)(nl - p);
		if (n <= strlen(key) || strncmp(p, key, strlen(key)) != 0)
			continue;
		n -= strlen(key);
		if (n >= sizeof(num))
			break;
		memcpy(num, p + strlen(key), n);
		num[n] = '\0';
		return tl_parse_ll(num, 1, 100000, hz);
	}
	errno = ENOENT;
	return -1;
}

/* CONFIG_HZ from /proc/config.gz (read into b); 0, or -1 after one warning line (none when
 * the kernel has no config.gz). */
static int hz_from_config_gz(struct blob *b, long long *hz)
{
	struct blob text = { NULL, 0, 0 };
	char *inflated;
	int ret = -1;

	if (slurp("/proc/config.gz", b) < 0) {
		if (errno != ENOENT)
			tl_warn("/proc/config.gz");
		return -1;
	}
	if (tl_gunzip(b->p, b->len, TL_GUNZIP_MAX, &inflated, &text.len) < 0) {
		tl_warnx("/proc/config.gz: %s", errno == EINVAL ? "not valid gzip data" : strerror(errno));
		return -1;
	}
	text.p = (unsigned char *)inflated;
	if (find_hz(&text, hz) == 0)
		ret = 0;
	else
		tl_warnx("/proc/config.gz: no valid CONFIG_HZ line");
	free(inflated);
	return ret;
}

/* hz= and the file it came from: /boot/config-RELEASE, else /proc/config.gz. */
static void print_hz(const char *release, struct blob *b)
{
	char path[PATH_MAX];
	long long hz;

	snprintf(path, sizeof(path), "/boot/config-%s", release);
	if (strchr(release, '/') == NULL && slurp(path, b) == 0 && find_hz(b, &hz) == 0)
		printf("hz=%lld source=%s\n", hz, path);
	else if (hz_from_config_gz(b, &hz) == 0)
		printf("hz=%lld source=/proc/config.gz\n", hz);
	else
		printf("hz=unknown source=none\n");
}

/* A CPU number at *p, which moves past it; -1 when there is none. */
static int cpu_number(const char **p, long *v)
{
	const char *s = *p;
	long n = 0;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > 1000000)
			return -1;
		n = n * 10 + (*s - '0');
	}
	*p = s;
	*v = n;
	return 0;
}

/* Online CPUs from a cpu list like "0-3,6,8-9"; -1 when it is not one. */
static long count_cpus(const char *list)
{
	long a, b, n = 0;

	do {
		if (cpu_number(&list, &a) < 0)
			return -1;
		b = a;
		if (*list == '-') {
			list++;
			if (cpu_number(&list, &b) < 0 || b < a)
				return -1;
		}
		n += b - a + 1;
	} while (*list++ == ',');
	return list[-1] == '\0' ? n : -1;
}

static void print_nproc(struct blob *b)
{
	long n = -1;

	if (env.root == NULL)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	else if (slurp("/sys/devices/system/cpu/online", b) == 0)
		n = count_cpus(one_line(b));
	if (n > 0)
		printf("nproc=%ld\n", n);
	else
		printf("nproc=unknown\n");
}

/* kernel=, version=, machine=: uname(2) live, DIR/proc/sys/kernel/... under -r.  release gets
 * the kernel release for the /boot/config-RELEASE lookup. */
static int print_uname(struct blob *b, char *release, size_t size)
{
	static const char *const keys[3] = { "kernel", "version", "machine" };
	static const char *const files[3] = { "/proc/sys/kernel/osrelease",
		"/proc/sys/kernel/version", "/proc/sys/kernel/arch" };
	struct utsname u;
	const char *v[3];
	int i;

	if (env.root == NULL && uname(&u) < 0)
		return -1;
	for (i = 0; i < 3; i++) {
		if (env.root == NULL)
			v[i] = i == 0 ? u.release : i == 1 ? u.version : u.machine;
		else
			v[i] = slurp(files[i], b) == 0 && *one_line(b) != '\0' ? (char *)b->p : "unknown";
		printf("%s=%s\n", keys[i], v[i]);
		if (i == 0)
			snprintf(release, size, "%s", v[0]);
	}
	return 0;
}

static void print_sysctls(struct blob *b)
{
	char name[128], path[160];
	size_t i, k;

	for (i = 0; i < sizeof(sysctls) / sizeof(sysctls[0]); i++) {
		snprintf(name, sizeof(name), "%s", sysctls[i]);
		for (k = 0; name[k] != '\0'; k++)
			if (name[k] == '/')
				name[k] = '.';
		snprintf(path, sizeof(path), "/proc/sys/%s", sysctls[i]);
		if (slurp(path, b) == 0)
			printf("sysctl %s=%s\n", name, one_line(b));
		else if (errno == ENOENT)
			printf("sysctl %s=absent\n", name);
		else
			printf("sysctl %s=unreadable errno=%s\n", name, tl_errno_name(errno));
	}
}

int main(int argc, char **argv)
{
	struct blob b = { NULL, 0, 0 };
	char release[256];
	int status = 1;

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	if (print_uname(&b, release, sizeof(release)) < 0) {
		tl_warn("uname");
		goto cleanup;
	}
	print_hz(release, &b);
	print_nproc(&b);
	print_sysctls(&b);
	if (fflush(stdout) == EOF || ferror(stdout)) {
		tl_warn("stdout");
		goto cleanup;
	}
	status = 0;
cleanup:
	free(b.p);
	return status;
}
