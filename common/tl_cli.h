/* tl_cli.h — err()-style reporting and checked option numbers, for a program's main() only.
 *
 * Unlike tl_util.h, these PRINT to stderr and most of them EXIT: one clear line
 * "<prog>: <message>", then exit with the status given (TL_EXIT_USAGE for the user's mistake).
 * Library code (common/, netlink/, fixtures/lib/, probes/lib/) never calls them.
 */
#ifndef TL_CLI_H
#define TL_CLI_H

#include "tl_util.h"

#include <stdint.h>

/* Program name for messages, set once by main via tl_set_progname(argv[0]). */
void tl_set_progname(const char *argv0);

/* One line on stderr: "<prog>: <fmt>" (+ ": strerror(errno)" for tl_err/tl_warn).
 * tl_err and tl_errx then exit with status; tl_warn and tl_warnx return. */
_Noreturn void tl_err(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void tl_errx(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tl_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* After getopt() with a leading ':' in its option string returned ':' or '?': one line naming
 * the option (missing argument, or unknown), then exit TL_EXIT_USAGE. */
_Noreturn void tl_opt_fail(int c);

/* A checked number from an option: parse or exit TL_EXIT_USAGE with one line naming the option. */
long long tl_opt_ll(const char *optname, const char *s, long long min, long long max);
uint16_t tl_opt_port(const char *optname, const char *s);

#endif
