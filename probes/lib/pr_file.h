/* pr_file.h — how the probes open the files a user names (-R, -S, -N, -d, -a, -r): only what
 * cannot block or run on forever.
 *
 * A FIFO blocks open() until a writer comes, and /dev/zero or /dev/full never end; so an input
 * must be a regular file (procfs and sysfs files are), and is then read by tl_read_file().
 *
 * Error rule: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef PR_FILE_H
#define PR_FILE_H

#include <errno.h>
#include <stddef.h>

/* errno for "a FIFO, a device or a socket where a regular file was asked for": Linux has no
 * EFTYPE, so the closest ("Wrong medium type"); pr_strerror() says what it means here. */
#define PR_ENOTREG EMEDIUMTYPE

/* tl_read_file() of a regular file: -1 with EISDIR for a directory, PR_ENOTREG for any other
 * kind of file (stat() before the open, so a FIFO is never opened; a FIFO renamed into place
 * between the two is not caught: tl_read_file() takes a path). */
int pr_read_file(const char *path, size_t max, char **buf, size_t *len);

/* Open path for appending (created 0666 & ~umask when missing), never blocking: a regular file
 * or a character device (/dev/null, /dev/full) only; -1 with EISDIR or PR_ENOTREG otherwise.
 * Returns the descriptor (O_CLOEXEC), blocking again once open. */
int pr_open_append(const char *path);

/* strerror(e), but "not a regular file" for PR_ENOTREG. */
const char *pr_strerror(int e);

#endif
