/* tl_cli.c — err()-style reporting and checked option numbers for main(): these print. */
#include "tl_cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *progname = "tcplab";

void tl_set_progname(const char *argv0)
{
	const char *slash;

	if (argv0 == NULL)
		return;
	slash = strrchr(argv0, '/');
	progname = slash ? slash + 1 : argv0;
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
