/* tl_util.h — small helpers shared by every tcplab program (fixtures and probes).
 *
 * Rules: nothing declared here prints or exits; a failure returns -1 and sets errno.
 * The helpers that print and exit, for a program's main() only, are in tl_cli.h.
 */
#ifndef TL_UTIL_H
#define TL_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Exit status for the user's mistake (bad option, bad number, port in use). */
#define TL_EXIT_USAGE 2

/* Parse a whole decimal number in [min, max]; trailing junk, empty strings and values out of
 * range are refused.  Returns 0, or -1 with errno EINVAL (not a number) or ERANGE. */
int tl_parse_ll(const char *s, long long min, long long max, long long *out);

/* errno for "a FIFO, a device or a socket where a regular file was asked for": Linux has no
 * EFTYPE, so the closest ("Wrong medium type"). */
#define TL_ENOTREG EMEDIUMTYPE

/* Read a whole regular file (at most `max` bytes, else EFBIG) into a malloc'd buffer with a NUL
 * after the data; the caller frees *buf.  0 or -1.  Anything else is refused on the open
 * descriptor, so nothing can be swapped in between the check and the read: EISDIR for a
 * directory, TL_ENOTREG for a FIFO (opened without blocking), a device or a socket.  procfs and
 * sysfs files are regular. */
int tl_read_file(const char *path, size_t max, char **buf, size_t *len);

/* write() all of buf, retrying after EINTR and short writes.  Returns 0, or -1 and errno. */
int tl_write_all(int fd, const void *buf, size_t len);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC, the clock the probes print). */
int64_t tl_now_ns(void);

/* The symbolic name of an errno value ("ECONNREFUSED"), or "E?<n>" in a static buffer. */
const char *tl_errno_name(int e);

/* An array arr of *cap elements of elem bytes, grown (doubled from *cap, or first elements when
 * empty) to hold at least want >= 1.  Returns the array (arr itself when it was large enough;
 * *cap updated when it grew), or NULL and errno ENOMEM with arr untouched. */
void *tl_grow(void *arr, size_t *cap, size_t want, size_t elem, size_t first);

#endif
