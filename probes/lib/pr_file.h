/* pr_file.h — how the probes open the files a user names (-R, -S, -N, -d, -a, -r): only what
 * cannot block or run on forever.
 *
 * A FIFO blocks open() until a writer comes, and /dev/zero or /dev/full never end; so an input
 * must be a regular file (procfs and sysfs files are): tl_read_file() reads it and refuses
 * anything else.
 *
 * Error rule: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef PR_FILE_H
#define PR_FILE_H

#include "tl_util.h"

#include <errno.h>
#include <stddef.h>

/* The errno tl_read_file() sets for a file that is not regular (tl_util.h). */
#define PR_ENOTREG TL_ENOTREG

/* Open path for appending (created 0666 & ~umask when missing), never blocking: a regular file
 * or a character device (/dev/null, /dev/full) only; -1 with EISDIR or PR_ENOTREG otherwise.
 * Returns the descriptor (O_CLOEXEC), blocking again once open. */
int pr_open_append(const char *path);

/* strerror(e), but "not a regular file" for PR_ENOTREG. */
const char *pr_strerror(int e);

#endif
