/* tl_util.h — small helpers shared by every tcplab program.
 *
 * Rules: helpers never print and never exit; they return -1 and set errno.
 * Only a program's main() reports and exits (see ../shared/STYLE.md).
 */
#ifndef TL_UTIL_H
#define TL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Exit status for the user's mistake (bad option, bad number, port in use). */
#define TL_EXIT_USAGE 2

/* Parse a whole decimal number in [min, max]; trailing junk, empty strings and values out of
 * range are refused.  Returns 0, or -1 with errno EINVAL (not a number) or ERANGE. */
int tl_parse_ll(const char *s, long long min, long long max, long long *out);

/* Parse a TCP port 1..65535.  Returns 0, or -1 with errno EINVAL or ERANGE. */
int tl_parse_port(const char *s, uint16_t *out);

/* Read a whole file (at most `max` bytes, else EFBIG) into a malloc'd buffer with a NUL after
 * the data; the caller frees *buf.  0 or -1. */
int tl_read_file(const char *path, size_t max, char **buf, size_t *len);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC, the clock the probes print). */
int64_t tl_now_ns(void);

/* The symbolic name of an errno value ("ECONNREFUSED"), or "E?<n>" in a static buffer. */
const char *tl_errno_name(int e);

/* Program name for messages, set once by main via tl_set_progname(argv[0]). */
void tl_set_progname(const char *argv0);
const char *tl_progname(void);

/* One clear line on stderr: "<prog>: <fmt>" (+ ": strerror(errno)" for tl_err), then exit.
 * These are for main() only. */
_Noreturn void tl_err(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void tl_errx(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tl_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* After getopt() with a leading ':' in its option string returned ':' or '?': one line naming
 * the option (missing argument, or unknown), then exit TL_EXIT_USAGE.  For main() only. */
_Noreturn void tl_opt_fail(int c);

/* A checked number from an option: parse or exit TL_EXIT_USAGE with one line naming the option. */
long long tl_opt_ll(const char *optname, const char *s, long long min, long long max);
uint16_t tl_opt_port(const char *optname, const char *s);

#endif
