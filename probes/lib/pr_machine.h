/* pr_machine.h — the parsers of the machine probe (probes/machine.c), on bytes of files it
 * read: a kernel config (CONFIG_HZ=), gzip'ed or not, a CPU list, a one-line value, the
 * MemTotal of /proc/meminfo.
 *
 * Input is untrusted: any bytes, any length (tests/fuzz/fuzz_machine.c feeds them all).
 *
 * Error rule: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef PR_MACHINE_H
#define PR_MACHINE_H

#include <stddef.h>

#define PR_CONFIG_MAX (64 * 1024 * 1024)	/* a kernel config is ~250 KiB */

/* Inflate the first gzip member of in[0..len) with zlib (inflate(), which checks the trailer's
 * CRC-32 and length) into a malloc'd buffer *out of *outlen bytes (at most max), with a NUL
 * after them; the caller frees *out.  Returns 0, or -1 with *out NULL and errno EINVAL (not
 * gzip, corrupt or cut short), EFBIG (more than max) or ENOMEM. */
int pr_gunzip(const void *in, size_t len, size_t max, char **out, size_t *outlen);

/* The value of the first line "CONFIG_HZ=<n>" of config text[0..len), n in 1..100000.  0, or -1
 * with errno ENOENT (no such line) or EINVAL/ERANGE (its value is not such a number). */
int pr_find_hz(const char *text, size_t len, long long *hz);

/* The number of CPUs in a kernel cpu list ("0-3,6,8-9": 7).  -1 (errno EINVAL) when the string
 * is not exactly such a list. */
long pr_count_cpus(const char *list);

/* A file's contents s[0..len) (NUL at s[len]) as one line of text, in place: one final newline
 * is dropped, runs of blanks (space, tab) become one space, the ends are trimmed.  With `word`,
 * no blank may remain.  -1 with errno EINVAL, s unchanged in meaning, when there is another line
 * break, a NUL or another control byte, or (word) a blank: such a value would let a file add
 * lines or key=value fields to the output.  An empty result is 0 (the caller decides). */
int pr_one_line(char *s, size_t len, int word);

/* The "MemTotal:" line of /proc/meminfo text[0..len): its value in kB (the unit the kernel's
 * meminfo_proc_show() prints, fs/proc/meminfo.c), 1 .. 2^50.  0, or -1 with errno ENOENT (no
 * such line at a line's start) or EINVAL (the line is not "MemTotal:", blanks, digits, blanks,
 * "kB"). */
int pr_meminfo_total(const char *text, size_t len, unsigned long long *kb);

#endif
