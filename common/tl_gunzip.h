/* tl_gunzip.h — inflate gzip data in memory (the machine probe's /proc/config.gz).
 *
 * Input is untrusted: any bytes, any length.  Only the first gzip member is read; it is checked
 * against its CRC-32 and its size (ISIZE).
 *
 * Error rule: returns -1 and sets errno; nothing here prints or exits.
 */
#ifndef TL_GUNZIP_H
#define TL_GUNZIP_H

#include <stddef.h>

#define TL_GUNZIP_MAX (64 * 1024 * 1024)	/* a kernel config is ~250 KiB */

/* The first gzip member of in[0..len), inflated into a malloc'd buffer *out of *outlen bytes
 * (at most max) with a NUL after them; the caller frees *out.  Returns 0, or -1 with *out NULL
 * and errno EINVAL (not gzip, corrupt, CRC or size mismatch), EFBIG (more than max) or ENOMEM. */
int tl_gunzip(const void *in, size_t len, size_t max, char **out, size_t *outlen);

#endif
