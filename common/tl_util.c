/* tl_util.c — checked parsing, clocks, errno names and err()-style reporting. */
#include "tl_util.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static const char *progname = "tcplab";

int tl_parse_ll(const char *s, long long min, long long max, long long *out)
{
	char *end;
	long long v;

	/* strtoll would also take leading blanks and '+': a number here is digits, maybe a '-' */
	if (s == NULL || min > max || !(isdigit((unsigned char)*s) || *s == '-')) {
		errno = EINVAL;
		return -1;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0') {
		errno = EINVAL;
		return -1;
	}
	if (errno == ERANGE || v < min || v > max) {
		errno = ERANGE;
		return -1;
	}
	*out = v;
	return 0;
}

int tl_parse_port(const char *s, uint16_t *out)
{
	long long v;

	if (tl_parse_ll(s, 1, 65535, &v) < 0)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int tl_read_file(const char *path, size_t max, char **buf, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *b = NULL, *grown;
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	for (;;) {
		if (n + 1 >= cap || b == NULL) {
			if (b != NULL)
				cap *= 2;
			grown = realloc(b, cap);
			if (grown == NULL)
				goto fail;
			b = grown;
		}
		r = read(fd, b + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		n += r;
		if (n > max) {
			errno = EFBIG;
			goto fail;
		}
	}
	close(fd);
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
fail:
	r = errno;
	free(b);
	close(fd);
	errno = (int)r;
	return -1;
}

int64_t tl_now_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
		return -1;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *tl_errno_name(int e)
{
	static char buf[24];
	const char *name = strerrorname_np(e);

	if (name != NULL)
		return name;
	snprintf(buf, sizeof(buf), "E?%d", e);
	return buf;
}

void tl_set_progname(const char *argv0)
{
	const char *slash;

	if (argv0 == NULL)
		return;
	slash = strrchr(argv0, '/');
	progname = slash ? slash + 1 : argv0;
}

const char *tl_progname(void)
{
	return progname;
}

__attribute__((format(printf, 3, 0)))
static void vreport(int with_errno, int saved, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", progname);
	vfprintf(stderr, fmt, ap);
	if (with_errno)
		fprintf(stderr, ": %s", strerror(saved));
	fputc('\n', stderr);
}

void tl_err(int status, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	vreport(1, saved, fmt, ap);
	va_end(ap);
	exit(status);
}

void tl_errx(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(0, 0, fmt, ap);
	va_end(ap);
	exit(status);
}

void tl_warn(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	vreport(1, saved, fmt, ap);
	va_end(ap);
}

void tl_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(0, 0, fmt, ap);
	va_end(ap);
}

void tl_opt_fail(int c)
{
	if (c == ':')
		tl_errx(TL_EXIT_USAGE, "option -%c needs an argument", optopt);
	tl_errx(TL_EXIT_USAGE, "unknown option -%c (-h for help)", optopt);
}

long long tl_opt_ll(const char *optname, const char *s, long long min, long long max)
{
	long long v;

	if (tl_parse_ll(s, min, max, &v) < 0)
		tl_errx(TL_EXIT_USAGE, "%s '%s': %s (want %lld..%lld)", optname, s ? s : "",
			errno == ERANGE ? "out of range" : "not a whole number", min, max);
	return v;
}

uint16_t tl_opt_port(const char *optname, const char *s)
{
	return (uint16_t)tl_opt_ll(optname, s, 1, 65535);
}
