/* pr_machine.c — the machine probe's parsers; see pr_machine.h. */
#define ZLIB_CONST
#include "pr_machine.h"
#include "tl_util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int pr_gunzip(const void *in, size_t len, size_t max, char **out, size_t *outlen)
{
	z_stream zs = { 0 };
	size_t cap = 64 * 1024, n = 0;
	char *buf = NULL, *grown;
	int r, err = 0;

	*out = NULL;
	if (len > UINT_MAX) {		/* avail_in is a uInt */
		errno = EFBIG;
		return -1;
	}
	/* 16 + MAX_WBITS: a gzip wrapper only (header, CRC-32 and ISIZE checked), never zlib's */
	if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
		errno = ENOMEM;
		return -1;
	}
	zs.next_in = in;
	zs.avail_in = (uInt)len;
	for (;;) {
		if (buf == NULL || n + 1 == cap) {	/* full (one byte kept for the NUL) */
			size_t want = buf == NULL ? cap : cap * 2;

			if (want > max + 1)
				want = max + 1;
			if (want <= n + 1) {
				err = EFBIG;
				break;
			}
			grown = realloc(buf, want);
			if (grown == NULL) {
				err = ENOMEM;
				break;
			}
			buf = grown;
			cap = want;
		}
		zs.next_out = (Bytef *)buf + n;
		zs.avail_out = (uInt)(cap - n - 1 > UINT_MAX ? UINT_MAX : cap - n - 1);
		r = inflate(&zs, Z_NO_FLUSH);
		n = (size_t)((char *)zs.next_out - buf);
		if (r == Z_STREAM_END)
			break;
		if (r == Z_OK)
			continue;
		/* Z_BUF_ERROR with room left: the input ended before the stream did */
		err = r == Z_MEM_ERROR ? ENOMEM : EINVAL;
		break;
	}
	inflateEnd(&zs);
	if (err != 0) {
		free(buf);
		errno = err;
		return -1;
	}
	buf[n] = '\0';
	*out = buf;
	*outlen = n;
	return 0;
}

int pr_find_hz(const char *text, size_t len, long long *hz)
{
	static const char key[] = "CONFIG_HZ=";
	const size_t klen = sizeof(key) - 1;
	const char *p = text, *end = text + len, *nl;
	char num[16];
	size_t n;

	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		n = (size_t)(nl - p);
		if (n < klen || memcmp(p, key, klen) != 0)
			continue;
		n -= klen;
		if (n == 0 || n >= sizeof(num)) {
			errno = EINVAL;
			return -1;
		}
		memcpy(num, p + klen, n);
		num[n] = '\0';
		return tl_parse_ll(num, 1, 100000, hz);
	}
	errno = ENOENT;
	return -1;
}

/* A CPU number at *p, which moves past it; -1 when there is none. */
static int cpu_number(const char **p, long *v)
{
	const char *s = *p;
	long n = 0;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > 1000000)
			return -1;
		n = n * 10 + (*s - '0');
	}
	*p = s;
	*v = n;
	return 0;
}

long pr_count_cpus(const char *list)
{
	long a, b, n = 0;

	do {
		if (cpu_number(&list, &a) < 0)
			goto bad;
		b = a;
		if (*list == '-') {
			list++;
			if (cpu_number(&list, &b) < 0 || b < a)
				goto bad;
		}
		n += b - a + 1;
	} while (*list++ == ',');
	if (list[-1] == '\0')
		return n;
bad:
	errno = EINVAL;
	return -1;
}

int pr_one_line(char *s, size_t len, int word)
{
	size_t i, w = 0;

	if (len > 0 && s[len - 1] == '\n')
		len--;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f || (word && (c == ' ' || c == '\t'))) {
			errno = EINVAL;
			return -1;
		}
	}
	for (i = 0; i < len; i++) {
		if (s[i] == ' ' || s[i] == '\t') {
			if (w > 0 && s[w - 1] != ' ')
				s[w++] = ' ';
		} else {
			s[w++] = s[i];
		}
	}
	if (w > 0 && s[w - 1] == ' ')
		w--;
	s[w] = '\0';
	return 0;
}

int pr_meminfo_total(const char *text, size_t len, unsigned long long *kb)
{
	static const char key[] = "MemTotal:";
	const char *p = text, *end = text + len, *nl;
	unsigned long long n = 0;
	int digits = 0;

	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		if ((size_t)(nl - p) < sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1) != 0)
			continue;
		p += sizeof(key) - 1;
		while (p < nl && (*p == ' ' || *p == '\t'))
			p++;
		for (; p < nl && *p >= '0' && *p <= '9'; p++, digits++) {
			if (n > (1ULL << 50) / 10)
				goto bad;
			n = n * 10 + (unsigned long long)(*p - '0');
		}
		while (p < nl && (*p == ' ' || *p == '\t'))
			p++;
		if (digits == 0 || n == 0 || n > (1ULL << 50) || nl - p != 2 || memcmp(p, "kB", 2) != 0)
			goto bad;
		*kb = n;
		return 0;
	}
	errno = ENOENT;
	return -1;
bad:
	errno = EINVAL;
	return -1;
}
