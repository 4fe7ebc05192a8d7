/* tl_util.c — checked parsing, the file reader, the clock and errno names (no printing). */
#include "tl_util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

int tl_read_file(const char *path, size_t max, char **buf, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *b = NULL, *grown;
	ssize_t r;
	struct stat st;
	/* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer, and fstat() then refuses
	 * it; a regular file ignores the flag, so it is read as usual */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		errno = S_ISDIR(st.st_mode) ? EISDIR : TL_ENOTREG;
		goto fail;
	}
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

int tl_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	ssize_t n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
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

void *tl_grow(void *arr, size_t *cap, size_t want, size_t elem, size_t first)
{
	size_t n = *cap ? *cap : first;
	void *grown;

	if (want <= *cap)
		return arr;
	while (n < want) {
		if (n > SIZE_MAX / 2) {
			errno = ENOMEM;
			return NULL;
		}
		n *= 2;
	}
	if (n > SIZE_MAX / elem) {
		errno = ENOMEM;
		return NULL;
	}
	if ((grown = realloc(arr, n * elem)) == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	*cap = n;
	return grown;
}
