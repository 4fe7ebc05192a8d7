/* machine — describe the system an experiment ran on: kernel, CONFIG_HZ, CPUs, the TCP sysctls
 * the experiments depend on, and the links of its network namespace, as key=value lines.  See
 * docs/machine.md.
 *
 * Sysctls are read from /proc/sys, so per-namespace ones (most of net.ipv4.tcp_*) are those of
 * the namespace the probe runs in.  CONFIG_HZ comes from /boot/config-RELEASE or, failing that,
 * /proc/config.gz, which zlib inflates (libz.a, linked statically so that the QEMU guest's
 * initramfs needs no libz.so).  The parsers are in probes/lib/pr_machine.c.  The links come
 * from an RTM_GETLINK dump (netlink/tl_link.c), or from a kept one (-l).
 *
 * The output is built in memory and written at the end: a run that fails prints nothing.
 */
#include "pr_file.h"
#include "pr_machine.h"
#include "tl_link.h"
#include "tl_cli.h"
#include "tl_util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/types.h>
#include <unistd.h>

#define VALUE_MAX	(64 * 1024)		/* a sysctl or uname file: a few bytes */
#define LINKS_MAX	(64u << 20)		/* a kept link dump: ~1.5 KiB a link */

static struct env {
	const char *root;	/* -r: prefix for every file read; NULL: the live system */
	const char *links;	/* -l: a kept RTM_GETLINK dump to decode instead of asking */
	const char *keep;	/* -w: where to write the live dump's raw replies */
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

static void usage(void)
{
	fputs("usage: machine [-r root] [-l FILE | -w FILE]\n"
	      "Describe this system as key=value lines: kernel, CONFIG_HZ, CPUs, TCP sysctls, and\n"
	      "the links of this network namespace (RTM_GETLINK).\n"
	      "  -r DIR  read every file under DIR instead of / (DIR/proc/sys/..., DIR/boot/config-*,\n"
	      "          DIR/proc/config.gz, DIR/sys/devices/system/cpu/online); kernel=, version=\n"
	      "          and machine= then come from DIR/proc/sys/kernel/{osrelease,version,arch};\n"
	      "          no link lines then, unless -l gives them\n"
	      "  -l FILE decode the links from a dump kept by -w instead of asking the kernel\n"
	      "  -w FILE write the raw RTM_GETLINK replies to FILE (replaced), for -l\n"
	      "  -h      print this help\n", stdout);
}

static void parse_args(int argc, char **argv)
{
	int opt;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":r:l:w:h")) != -1) {
		switch (opt) {
		case 'r': env.root = optarg; break;
		case 'l': env.links = optarg; break;
		case 'w': env.keep = optarg; break;
		case 'h': usage(); exit(0);
		default: tl_opt_fail(opt);
		}
	}
	if (optind < argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s' (-h for help)", argv[optind]);
	if (env.root != NULL && env.root[0] == '\0')
		tl_errx(TL_EXIT_USAGE, "-r needs a directory");
	if (env.links != NULL && env.keep != NULL)
		tl_errx(TL_EXIT_USAGE, "-l and -w exclude each other");
	if (env.root != NULL && env.keep != NULL)
		tl_errx(TL_EXIT_USAGE, "-w keeps a live dump: not with -r");
	if ((env.links != NULL && env.links[0] == '\0') || (env.keep != NULL && env.keep[0] == '\0'))
		tl_errx(TL_EXIT_USAGE, "-%c needs a file", env.links ? 'l' : 'w');
	if (env.root != NULL) {	/* else every file would be "absent": a typo must not pass */
		struct stat st;

		if (stat(env.root, &st) < 0)
			tl_err(1, "-r %s", env.root);
		if (!S_ISDIR(st.st_mode))
			tl_errx(1, "-r %s: not a directory", env.root);
	}
}


/* The whole of path (under -r DIR: full gets the name read) in *buf (malloc'd, NUL after the
 * data); -1 with errno. */
static int read_in(const char *path, char full[PATH_MAX], size_t max, char **buf, size_t *len)
{
	*buf = NULL;
	if (snprintf(full, PATH_MAX, "%s%s", env.root ? env.root : "", path) >= PATH_MAX) {
		snprintf(full, PATH_MAX, "%s", path);
		errno = ENAMETOOLONG;
		return -1;
	}
	return tl_read_file(full, max, buf, len);
}

/* path's contents as one line (pr_one_line) in *val, malloc'd.  0; -1 with errno when it
 * cannot be read (full: the name tried); -2 after one line on stderr when it is not one line
 * (one word) of text. */
static int read_value(const char *path, char full[PATH_MAX], int word, char **val)
{
	size_t len;

	if (read_in(path, full, VALUE_MAX, val, &len) < 0)
		return -1;
	if (pr_one_line(*val, len, word) < 0) {
		tl_warnx("%s: %s", full, word ? "not one word on one line" : "not one line of text");
		free(*val);
		*val = NULL;
		return -2;
	}
	return 0;
}

/* CONFIG_HZ from /proc/config.gz; 0, or -1 after one warning line (none when the kernel has no
 * config.gz). */
static int hz_from_config_gz(long long *hz)
{
	char full[PATH_MAX], *gz, *text;
	size_t len, tlen;
	int ret = -1;

	if (read_in("/proc/config.gz", full, PR_CONFIG_MAX, &gz, &len) < 0) {
		if (errno != ENOENT)
			tl_warnx("/proc/config.gz: %s", pr_strerror(errno));
		return -1;
	}
	if (pr_gunzip(gz, len, PR_CONFIG_MAX, &text, &tlen) < 0) {
		tl_warnx("/proc/config.gz: %s", errno == EINVAL ? "not valid gzip data" : strerror(errno));
	} else {
		if (pr_find_hz(text, tlen, hz) == 0)
			ret = 0;
		else
			tl_warnx("/proc/config.gz: no valid CONFIG_HZ line");
		free(text);
	}
	free(gz);
	return ret;
}

/* KEY=N, or KEY=unknown when n was not found. */
static void print_count(FILE *out, const char *key, int found, unsigned long long n)
{
	if (found)
		fprintf(out, "%s=%llu\n", key, n);
	else
		fprintf(out, "%s=unknown\n", key);
}

/* hz= and the file it came from: /boot/config-RELEASE, else /proc/config.gz. */
static void print_hz(FILE *out, const char *release)
{
	char path[PATH_MAX], full[PATH_MAX], *config = NULL;
	long long hz;
	size_t len;
	int found;

	snprintf(path, sizeof(path), "/boot/config-%s", release);
	found = strchr(release, '/') == NULL &&
		read_in(path, full, PR_CONFIG_MAX, &config, &len) == 0 &&
		pr_find_hz(config, len, &hz) == 0;
	free(config);
	if (found)
		fprintf(out, "hz=%lld source=%s\n", hz, path);
	else if (hz_from_config_gz(&hz) == 0)
		fprintf(out, "hz=%lld source=/proc/config.gz\n", hz);
	else
		fprintf(out, "hz=unknown source=none\n");
}

static void print_nproc(FILE *out)
{
	char full[PATH_MAX], *list = NULL;
	size_t len;
	long n = -1;

	if (env.root == NULL)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	else if (read_in("/sys/devices/system/cpu/online", full, VALUE_MAX, &list, &len) == 0 &&
		 pr_one_line(list, len, 1) == 0)
		n = pr_count_cpus(list);
	free(list);
	print_count(out, "nproc", n > 0, (unsigned long long)n);
}

/* memtotal_kb=: MemTotal of /proc/meminfo (DIR/proc/meminfo under -r), the RAM the kernel
 * manages (less than the machine's or QEMU's -m: firmware and the kernel's own image are not in
 * it); "unknown" when the file is absent or has no such line.  tcplab's diff uses it to tell
 * sysctls the kernel sizes from memory at boot from kernel changes. */
static void print_memtotal(FILE *out)
{
	char full[PATH_MAX], *text = NULL;
	size_t len;
	unsigned long long kb = 0;
	int found;

	found = read_in("/proc/meminfo", full, VALUE_MAX, &text, &len) == 0 &&
		pr_meminfo_total(text, len, &kb) == 0;
	free(text);
	print_count(out, "memtotal_kb", found, kb);
}

/* kernel=, version=, machine=: uname(2) live, DIR/proc/sys/kernel/... under -r; "unknown" for
 * a file that is absent or empty.  kernel= and machine= must be one word, version= one line
 * (readers split kernel= lines at blanks: tcplab.read_machine).  release gets the kernel
 * release for the /boot/config-RELEASE lookup.  -1 after one line on stderr. */
static int print_uname(FILE *out, char *release, size_t size)
{
	static const char *const keys[3] = { "kernel", "version", "machine" };
	static const char *const files[3] = { "/proc/sys/kernel/osrelease",
		"/proc/sys/kernel/version", "/proc/sys/kernel/arch" };
	struct utsname u;
	char full[PATH_MAX], *v = NULL;
	int i, r, word, fatal;

	if (env.root == NULL && uname(&u) < 0) {
		tl_warn("uname");
		return -1;
	}
	for (i = 0; i < 3; i++) {
		word = i != 1;
		fatal = 0;
		if (env.root != NULL) {
			r = read_value(files[i], full, word, &v);
			if (r == -1 && errno != ENOENT) {
				tl_warnx("%s: %s", full, pr_strerror(errno));
				fatal = 1;
			}
		} else {
			v = strdup(i == 0 ? u.release : i == 1 ? u.version : u.machine);
			if (v == NULL) {
				tl_warn("uname");
				return -1;
			}
			r = pr_one_line(v, strlen(v), word) == 0 ? 0 : -2;
			if (r == -2)
				tl_warnx("uname: the %s is not one %s", keys[i], word ? "word" : "line");
		}
		if (fatal || r == -2) {
			free(v);
			return -1;
		}
		if (r < 0 || v[0] == '\0') {
			free(v);
			v = NULL;
		}
		fprintf(out, "%s=%s\n", keys[i], v ? v : "unknown");
		if (i == 0)
			snprintf(release, size, "%s", v ? v : "unknown");
		free(v);
		v = NULL;
	}
	return 0;
}

/* sysctl NAME=VALUE lines: absent, or unreadable with the errno; -1 after one line on stderr
 * when a value is not one line of text. */
static int print_sysctls(FILE *out)
{
	char name[128], path[160], full[PATH_MAX], *v;
	size_t i, k;
	int r;

	for (i = 0; i < sizeof(sysctls) / sizeof(sysctls[0]); i++) {
		snprintf(name, sizeof(name), "%s", sysctls[i]);
		for (k = 0; name[k] != '\0'; k++)
			if (name[k] == '/')
				name[k] = '.';
		snprintf(path, sizeof(path), "/proc/sys/%s", sysctls[i]);
		r = read_value(path, full, 0, &v);
		if (r == -2)
			return -1;
		if (r == 0)
			fprintf(out, "sysctl %s=%s\n", name, v);
		else if (errno == ENOENT)
			fprintf(out, "sysctl %s=absent\n", name);
		else
			fprintf(out, "sysctl %s=unreadable errno=%s\n", name, tl_errno_name(errno));
		free(v);
	}
	return 0;
}

/* A kernel string as one word: bytes outside '!'..'~', and '\', as \xHH.  The kernel refuses
 * blanks and '/' in a link name (dev_valid_name()), but a kept dump may hold anything, and no
 * value may add a field or a line to the output. */
static void put_word(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	if (*p == '\0') {
		fputc('-', out);
		return;
	}
	for (; *p != '\0'; p++) {
		if (*p > ' ' && *p < 0x7f && *p != '\\')
			fputc(*p, out);
		else
			fprintf(out, "\\x%02x", *p);
	}
}

/* link=NAME index=N mtu=N qdisc=NAME state=OPERSTATE kind=KIND|- flags=A,B,...  One line per
 * link, in index order. */
static void print_link(FILE *out, const struct tl_link *l)
{
	const char *state = tl_operstate_name(l->operstate);
	char flags[160];

	fputs("link=", out);
	put_word(out, l->name);
	fprintf(out, " index=%d mtu=%" PRIu32 " qdisc=", l->index, l->mtu);
	put_word(out, l->qdisc);
	if (state != NULL)
		fprintf(out, " state=%s kind=", state);
	else
		fprintf(out, " state=%u kind=", (unsigned int)l->operstate);
	put_word(out, l->kind);
	fprintf(out, " flags=%s\n", tl_link_flags(l->flags, flags, sizeof(flags)));
}

/* The raw replies into env.keep, replacing what it held.  -1 after one line on stderr. */
static int write_keep(const char *raw, size_t len)
{
	struct stat st;
	int fd = pr_open_append(env.keep), ret = 0;

	if (fd < 0) {
		tl_warnx("%s: %s", env.keep, pr_strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || (S_ISREG(st.st_mode) && ftruncate(fd, 0) < 0) ||
	    tl_write_all(fd, raw, len) < 0) {
		tl_warn("%s: cannot write the link dump", env.keep);
		ret = -1;
	}
	if (close(fd) < 0 && ret == 0) {
		tl_warn("%s: cannot write the link dump", env.keep);
		ret = -1;
	}
	return ret;
}

/* The links: a kept dump (-l), none under -r, else the kernel's (kept with -w).  -1 after one
 * line on stderr. */
static int print_links(FILE *out)
{
	struct tl_links links = {0};
	char *raw = NULL;
	size_t i, len = 0;
	int ret = -1;

	if (env.links != NULL) {
		if (tl_read_file(env.links, LINKS_MAX, &raw, &len) < 0) {
			tl_warnx("%s: %s", env.links, pr_strerror(errno));
			goto cleanup;
		}
		if (tl_link_replay(raw, len, &links) < 0) {
			tl_warnx("%s: %s", env.links, errno == EBADMSG ?
				 "not a complete RTM_GETLINK dump (truncated or garbled)" :
				 errno == EINTR ? "a dump the kernel marked interrupted" :
				 strerror(errno));
			goto cleanup;
		}
	} else if (env.root != NULL) {
		return 0;	/* a saved tree has no kernel to ask */
	} else if (tl_link_dump(&links, env.keep ? &raw : NULL, &len) < 0) {
		tl_warnx("RTM_GETLINK dump: %s", errno == EINTR ?
			 "the links kept changing during the dump" : strerror(errno));
		goto cleanup;
	} else if (env.keep != NULL && write_keep(raw, len) < 0) {
		goto cleanup;
	}
	for (i = 0; i < links.n; i++)
		print_link(out, &links.v[i]);
	ret = 0;
cleanup:
	tl_links_free(&links);
	free(raw);
	return ret;
}

int main(int argc, char **argv)
{
	char release[256], *text = NULL;
	size_t len = 0;
	FILE *out;
	int status = 1;

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	out = open_memstream(&text, &len);
	if (out == NULL)
		tl_err(1, "open_memstream");
	if (print_uname(out, release, sizeof(release)) < 0)
		goto cleanup;
	print_hz(out, release);
	print_nproc(out);
	print_memtotal(out);
	if (print_sysctls(out) < 0 || print_links(out) < 0)
		goto cleanup;
	if (fclose(out) != 0) {
		out = NULL;
		tl_warn("output");
		goto cleanup;
	}
	out = NULL;
	if (fwrite(text, 1, len, stdout) != len || fflush(stdout) == EOF || ferror(stdout)) {
		tl_warn("stdout");
		goto cleanup;
	}
	status = 0;
cleanup:
	if (out != NULL)
		fclose(out);
	free(text);
	return status;
}
