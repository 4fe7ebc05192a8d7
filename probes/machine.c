/* machine — describe the system an experiment ran on: kernel, CONFIG_HZ, CPUs, and the TCP
 * sysctls the experiments depend on, as key=value lines.  See docs/machine.md.
 *
 * Sysctls are read from /proc/sys, so per-namespace ones (most of net.ipv4.tcp_*) are those of
 * the namespace the probe runs in.  CONFIG_HZ comes from /boot/config-RELEASE or, failing that,
 * /proc/config.gz, which this file inflates itself (RFC 1951/1952, after zlib's contrib/puff)
 * so that the probe needs no library and links statically into a busybox guest.
 */
#include "tl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define FILE_MAX	(4 * 1024 * 1024)	/* a kernel config is ~250 KiB */
#define INFLATE_MAX	(64 * 1024 * 1024)

static struct env {
	const char *root;	/* -r: prefix for every file read; NULL: the live system */
} env;

/* The sysctls tcplab's experiments depend on, as paths under /proc/sys. */
static const char *const sysctls[] = {
	"net/ipv4/tcp_syn_retries",
	"net/ipv4/tcp_syn_linear_timeouts",	/* 6.5+ */
	"net/ipv4/tcp_synack_retries",
	"net/ipv4/tcp_max_syn_backlog",
	"net/ipv4/tcp_syncookies",
	"net/ipv4/tcp_abort_on_overflow",
	"net/core/somaxconn",
	"net/ipv4/ip_local_port_range",
	"net/ipv4/tcp_fin_timeout",
	"net/ipv4/tcp_retries2",
	"net/ipv4/tcp_orphan_retries",
	"net/ipv4/tcp_rto_min_us",		/* 6.11+ */
	"net/ipv4/tcp_rto_max_ms",		/* 6.15+ */
	"net/ipv4/tcp_timestamps",
	"net/ipv4/tcp_tw_reuse",
	"net/ipv4/tcp_max_tw_buckets",
	"net/ipv4/tcp_ehash_entries",		/* 5.19+; < 0: shared with the host */
};

/* Bytes read from a file or inflated: malloc'd, with a NUL after the last byte. */
struct blob {
	unsigned char *p;
	size_t len, cap;
};

static void usage(void)
{
	fputs("usage: machine [-r root]\n"
	      "Describe this system as key=value lines: kernel, CONFIG_HZ, CPUs, TCP sysctls.\n"
	      "  -r DIR  read every file under DIR instead of / (DIR/proc/sys/..., DIR/boot/config-*,\n"
	      "          DIR/proc/config.gz, DIR/sys/devices/system/cpu/online); kernel=, version=\n"
	      "          and machine= then come from DIR/proc/sys/kernel/{osrelease,version,arch}\n"
	      "  -h      print this help\n", stdout);
}

static void parse_args(int argc, char **argv)
{
	int opt;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":r:h")) != -1) {
		switch (opt) {
		case 'r': env.root = optarg; break;
		case 'h': usage(); exit(0);
		case ':': tl_errx(TL_EXIT_USAGE, "option -%c needs an argument", optopt);
		default: tl_errx(TL_EXIT_USAGE, "unknown option -%c (-h for help)", optopt);
		}
	}
	if (optind < argc)
		tl_errx(TL_EXIT_USAGE, "unexpected argument '%s' (-h for help)", argv[optind]);
	if (env.root != NULL && env.root[0] == '\0')
		tl_errx(TL_EXIT_USAGE, "-r needs a directory");
}

static int blob_reserve(struct blob *b, size_t more, size_t max)
{
	size_t cap = b->cap ? b->cap : 4096;
	unsigned char *p;

	if (b->len + more + 1 <= b->cap)
		return 0;
	if (b->len + more + 1 > max + 1) {
		errno = EFBIG;
		return -1;
	}
	while (cap < b->len + more + 1)
		cap *= 2;
	p = realloc(b->p, cap);
	if (p == NULL)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* The whole of path (under env.root) into b, NUL-terminated.  Returns -1 with errno. */
static int slurp(const char *path, struct blob *b)
{
	char full[PATH_MAX];
	int fd = -1, ret = -1, saved;
	ssize_t n;

	b->len = 0;
	if (snprintf(full, sizeof(full), "%s%s", env.root ? env.root : "", path) >= (int)sizeof(full)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(full, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (;;) {
		if (blob_reserve(b, 4096, FILE_MAX) < 0)
			break;
		n = read(fd, b->p + b->len, b->cap - b->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n == 0 ? 0 : -1;
			break;
		}
		b->len += (size_t)n;
	}
	saved = errno;
	close(fd);
	errno = saved;
	if (ret == 0)
		b->p[b->len] = '\0';
	return ret;
}

/* One printable line: whitespace runs (a tab in ip_local_port_range, the final newline) become
 * one space, control bytes become '?', ends are trimmed. */
static char *one_line(struct blob *b)
{
	char *s = (char *)b->p, *w = s;
	size_t i;

	for (i = 0; i < b->len; i++) {
		unsigned char c = b->p[i];

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			if (w != s && w[-1] != ' ')
				*w++ = ' ';
		} else {
			*w++ = c < 0x20 || c == 0x7f ? '?' : (char)c;
		}
	}
	if (w != s && w[-1] == ' ')
		w--;
	*w = '\0';
	return s;
}

/* ---- gzip (RFC 1952) and inflate (RFC 1951), after zlib's contrib/puff.c ---- */

#define MAXBITS 15
#define MAXLCODES 286
#define MAXDCODES 30
#define FIXLCODES 288

struct inflate {
	const unsigned char *in;
	size_t inlen, inpos;
	uint32_t bitbuf;
	int bitcnt;
	struct blob *out;
};

/* Canonical Huffman code: count[len] codes of each length, symbols ordered by code. */
struct huffman {
	short count[MAXBITS + 1];
	short symbol[FIXLCODES];
};

/* need (<= 16) bits, least significant first; -1 when the input ends. */
static int getbits(struct inflate *s, int need, int *val)
{
	uint32_t v = s->bitbuf;

	while (s->bitcnt < need) {
		if (s->inpos == s->inlen)
			return -1;
		v |= (uint32_t)s->in[s->inpos++] << s->bitcnt;
		s->bitcnt += 8;
	}
	s->bitbuf = v >> need;
	s->bitcnt -= need;
	*val = (int)(v & ((1u << need) - 1));
	return 0;
}

static int putbyte(struct inflate *s, unsigned char c)
{
	if (s->out->len + 1 >= s->out->cap && blob_reserve(s->out, 1, INFLATE_MAX) < 0)
		return -1;
	s->out->p[s->out->len++] = c;
	return 0;
}

/* The next symbol of code h, one bit at a time; -1 on a bad code or the end of input. */
static int decode(struct inflate *s, const struct huffman *h)
{
	int code = 0, first = 0, index = 0, len, bit, count;

	for (len = 1; len <= MAXBITS; len++) {
		if (getbits(s, 1, &bit) < 0)
			return -1;
		code |= bit;
		count = h->count[len];
		if (code - count < first)
			return h->symbol[index + (code - first)];
		index += count;
		first += count;
		first <<= 1;
		code <<= 1;
	}
	return -1;
}

/* Build h from n code lengths.  Returns 0 for a complete code, > 0 for an incomplete one,
 * < 0 for an over-subscribed one. */
static int construct(struct huffman *h, const short *length, int n)
{
	short offs[MAXBITS + 1];
	int sym, len, left = 1;

	memset(h->count, 0, sizeof(h->count));
	for (sym = 0; sym < n; sym++)
		h->count[length[sym]]++;
	if (h->count[0] == n)
		return 0;
	for (len = 1; len <= MAXBITS; len++) {
		left = left * 2 - h->count[len];
		if (left < 0)
			return left;
	}
	offs[1] = 0;
	for (len = 1; len < MAXBITS; len++)
		offs[len + 1] = (short)(offs[len] + h->count[len]);
	for (sym = 0; sym < n; sym++)
		if (length[sym] != 0)
			h->symbol[offs[length[sym]]++] = (short)sym;
	return left;
}

/* A stored block: LEN, NLEN, then LEN raw bytes. */
static int stored(struct inflate *s)
{
	const unsigned char *p;
	size_t len;

	s->bitbuf = 0;
	s->bitcnt = 0;
	if (s->inlen - s->inpos < 4)
		return -1;
	p = s->in + s->inpos;
	len = (size_t)p[0] | (size_t)p[1] << 8;
	if (p[2] != (~p[0] & 0xff) || p[3] != (~p[1] & 0xff))
		return -1;
	s->inpos += 4;
	if (s->inlen - s->inpos < len || blob_reserve(s->out, len, INFLATE_MAX) < 0)
		return -1;
	memcpy(s->out->p + s->out->len, s->in + s->inpos, len);
	s->out->len += len;
	s->inpos += len;
	return 0;
}

/* One length/distance pair: copy len bytes from dist back. */
static int copy_match(struct inflate *s, int sym, const struct huffman *distcode)
{
	static const short lbase[29] = { 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
		35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258 };
	static const short lext[29] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
		3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0 };
	static const short dbase[30] = { 1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
		257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577 };
	static const short dext[30] = { 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5,
		6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13 };
	int len, dist, extra;

	sym -= 257;
	if (sym >= 29 || getbits(s, lext[sym], &extra) < 0)
		return -1;
	len = lbase[sym] + extra;
	sym = decode(s, distcode);
	if (sym < 0 || sym >= 30 || getbits(s, dext[sym], &extra) < 0)
		return -1;
	dist = dbase[sym] + extra;
	if ((size_t)dist > s->out->len)
		return -1;
	while (len-- > 0)
		if (putbyte(s, s->out->p[s->out->len - (size_t)dist]) < 0)
			return -1;
	return 0;
}

/* Literals and matches until the end-of-block symbol. */
static int codes(struct inflate *s, const struct huffman *lencode, const struct huffman *distcode)
{
	int sym;

	for (;;) {
		sym = decode(s, lencode);
		if (sym < 0)
			return -1;
		if (sym == 256)
			return 0;
		if (sym < 256 ? putbyte(s, (unsigned char)sym) : copy_match(s, sym, distcode))
			return -1;
	}
}

static int fixed(struct inflate *s)
{
	struct huffman lencode, distcode;
	short lengths[FIXLCODES];
	int sym;

	for (sym = 0; sym < FIXLCODES; sym++)
		lengths[sym] = sym < 144 ? 8 : sym < 256 ? 9 : sym < 280 ? 7 : 8;
	construct(&lencode, lengths, FIXLCODES);
	for (sym = 0; sym < MAXDCODES; sym++)
		lengths[sym] = 5;
	construct(&distcode, lengths, MAXDCODES);
	return codes(s, &lencode, &distcode);
}

/* The literal/length and distance code lengths of a dynamic block, themselves coded. */
static int dynamic_lengths(struct inflate *s, short *lengths, int nlen, int ndist)
{
	static const short order[19] = { 16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2,
		14, 1, 15 };
	struct huffman lencode;
	int ncode, index, sym, rep, v, len;

	if (getbits(s, 4, &ncode) < 0)
		return -1;
	memset(lengths, 0, 19 * sizeof(*lengths));
	for (index = 0; index < ncode + 4; index++) {
		if (getbits(s, 3, &v) < 0)
			return -1;
		lengths[order[index]] = (short)v;
	}
	if (construct(&lencode, lengths, 19) != 0)
		return -1;
	for (index = 0; index < nlen + ndist;) {
		sym = decode(s, &lencode);
		if (sym < 0)
			return -1;
		if (sym < 16) {
			lengths[index++] = (short)sym;
			continue;
		}
		if (sym == 16 && index == 0)
			return -1;
		len = sym == 16 ? lengths[index - 1] : 0;
		if (getbits(s, sym == 16 ? 2 : sym == 17 ? 3 : 7, &rep) < 0)
			return -1;
		rep += sym == 18 ? 11 : 3;
		if (index + rep > nlen + ndist)
			return -1;
		while (rep-- > 0)
			lengths[index++] = (short)len;
	}
	return lengths[256] == 0 ? -1 : 0;
}

static int dynamic(struct inflate *s)
{
	struct huffman lencode, distcode;
	short lengths[MAXLCODES + MAXDCODES];
	int nlen, ndist, err;

	if (getbits(s, 5, &nlen) < 0 || getbits(s, 5, &ndist) < 0)
		return -1;
	nlen += 257;
	ndist += 1;
	if (nlen > MAXLCODES || ndist > MAXDCODES || dynamic_lengths(s, lengths, nlen, ndist) < 0)
		return -1;
	/* an incomplete code is allowed only when it is a single code of length 1 */
	err = construct(&lencode, lengths, nlen);
	if (err < 0 || (err > 0 && nlen != lencode.count[0] + lencode.count[1]))
		return -1;
	err = construct(&distcode, lengths + nlen, ndist);
	if (err < 0 || (err > 0 && ndist != distcode.count[0] + distcode.count[1]))
		return -1;
	return codes(s, &lencode, &distcode);
}

/* The deflate blocks at s->inpos, up to the last one. */
static int inflate_blocks(struct inflate *s)
{
	int last, type, r;

	do {
		if (getbits(s, 1, &last) < 0 || getbits(s, 2, &type) < 0)
			return -1;
		r = type == 0 ? stored(s) : type == 1 ? fixed(s) : type == 2 ? dynamic(s) : -1;
		if (r < 0)
			return -1;
	} while (!last);
	return 0;
}

static uint32_t crc32_of(const unsigned char *p, size_t len)
{
	uint32_t table[256], c;
	size_t i;
	int k;

	for (i = 0; i < 256; i++) {
		c = (uint32_t)i;
		for (k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		table[i] = c;
	}
	c = 0xffffffffu;
	for (i = 0; i < len; i++)
		c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Where the deflate data of a gzip member starts, or 0 for a bad header. */
static size_t gzip_header(const unsigned char *p, size_t len)
{
	size_t pos = 10;
	unsigned flg;

	if (len < 18 || p[0] != 0x1f || p[1] != 0x8b || p[2] != 8 || (p[3] & 0xe0) != 0)
		return 0;
	flg = p[3];
	if (flg & 4)				/* FEXTRA */
		pos += 2 + ((size_t)p[10] | (size_t)p[11] << 8);
	if (flg & 8)				/* FNAME */
		while (pos < len && p[pos++] != 0)
			;
	if (flg & 16)				/* FCOMMENT */
		while (pos < len && p[pos++] != 0)
			;
	if (flg & 2)				/* FHCRC */
		pos += 2;
	return pos < len ? pos : 0;
}

/* The first member of gzip data in[0..len) into out, checked against its CRC-32 and size.
 * Returns -1 with errno EINVAL (not gzip, corrupt), EFBIG or ENOMEM. */
static int gunzip(const unsigned char *in, size_t len, struct blob *out)
{
	struct inflate s = { in, len, 0, 0, 0, out };

	out->len = 0;
	errno = 0;
	s.inpos = gzip_header(in, len);
	if (s.inpos == 0 || blob_reserve(out, 0, INFLATE_MAX) < 0 || inflate_blocks(&s) < 0 ||
	    len - s.inpos < 8 || le32(in + s.inpos) != crc32_of(out->p, out->len) ||
	    le32(in + s.inpos + 4) != (uint32_t)out->len) {
		if (errno != EFBIG && errno != ENOMEM)
			errno = EINVAL;
		return -1;
	}
	out->p[out->len] = '\0';
	return 0;
}

/* ---- what the probe prints ---- */

/* CONFIG_HZ=<n> at the start of a line of a kernel config. */
static int find_hz(const struct blob *config, long long *hz)
{
	const char *key = "CONFIG_HZ=", *p = (const char *)config->p;
	const char *end = p + config->len, *nl;
	char num[16];
	size_t n;

	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		n = (size_t)(nl - p);
		if (n <= strlen(key) || strncmp(p, key, strlen(key)) != 0)
			continue;
		n -= strlen(key);
		if (n >= sizeof(num))
			break;
		memcpy(num, p + strlen(key), n);
		num[n] = '\0';
		return tl_parse_ll(num, 1, 100000, hz);
	}
	errno = ENOENT;
	return -1;
}

/* hz= and the file it came from: /boot/config-RELEASE, else /proc/config.gz. */
static void print_hz(const char *release, struct blob *b)
{
	char path[PATH_MAX];
	struct blob text = { NULL, 0, 0 };
	long long hz;

	snprintf(path, sizeof(path), "/boot/config-%s", release);
	if (strchr(release, '/') == NULL && slurp(path, b) == 0 && find_hz(b, &hz) == 0) {
		printf("hz=%lld source=%s\n", hz, path);
		return;
	}
	if (slurp("/proc/config.gz", b) < 0) {
		if (errno != ENOENT)
			tl_warn("/proc/config.gz");
	} else if (gunzip(b->p, b->len, &text) < 0) {
		tl_warnx("/proc/config.gz: %s", errno == EINVAL ? "not valid gzip data" : strerror(errno));
	} else if (find_hz(&text, &hz) < 0) {
		tl_warnx("/proc/config.gz: no valid CONFIG_HZ line");
	} else {
		printf("hz=%lld source=/proc/config.gz\n", hz);
		free(text.p);
		return;
	}
	free(text.p);
	printf("hz=unknown source=none\n");
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

/* Online CPUs from a cpu list like "0-3,6,8-9"; -1 when it is not one. */
static long count_cpus(const char *list)
{
	long a, b, n = 0;

	do {
		if (cpu_number(&list, &a) < 0)
			return -1;
		b = a;
		if (*list == '-') {
			list++;
			if (cpu_number(&list, &b) < 0 || b < a)
				return -1;
		}
		n += b - a + 1;
	} while (*list++ == ',');
	return list[-1] == '\0' ? n : -1;
}

static void print_nproc(struct blob *b)
{
	long n = -1;

	if (env.root == NULL)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	else if (slurp("/sys/devices/system/cpu/online", b) == 0)
		n = count_cpus(one_line(b));
	if (n > 0)
		printf("nproc=%ld\n", n);
	else
		printf("nproc=unknown\n");
}

/* kernel=, version=, machine=: uname(2) live, DIR/proc/sys/kernel/... under -r.  release gets
 * the kernel release for the /boot/config-RELEASE lookup. */
static int print_uname(struct blob *b, char *release, size_t size)
{
	static const char *const keys[3] = { "kernel", "version", "machine" };
	static const char *const files[3] = { "/proc/sys/kernel/osrelease",
		"/proc/sys/kernel/version", "/proc/sys/kernel/arch" };
	struct utsname u;
	const char *v[3];
	int i;

	if (env.root == NULL && uname(&u) < 0)
		return -1;
	for (i = 0; i < 3; i++) {
		if (env.root == NULL)
			v[i] = i == 0 ? u.release : i == 1 ? u.version : u.machine;
		else
			v[i] = slurp(files[i], b) == 0 && *one_line(b) != '\0' ? (char *)b->p : "unknown";
		printf("%s=%s\n", keys[i], v[i]);
		if (i == 0)
			snprintf(release, size, "%s", v[0]);
	}
	return 0;
}

static void print_sysctls(struct blob *b)
{
	char name[128], path[160];
	size_t i, k;

	for (i = 0; i < sizeof(sysctls) / sizeof(sysctls[0]); i++) {
		snprintf(name, sizeof(name), "%s", sysctls[i]);
		for (k = 0; name[k] != '\0'; k++)
			if (name[k] == '/')
				name[k] = '.';
		snprintf(path, sizeof(path), "/proc/sys/%s", sysctls[i]);
		if (slurp(path, b) == 0)
			printf("sysctl %s=%s\n", name, one_line(b));
		else if (errno == ENOENT)
			printf("sysctl %s=absent\n", name);
		else
			printf("sysctl %s=unreadable errno=%s\n", name, tl_errno_name(errno));
	}
}

int main(int argc, char **argv)
{
	struct blob b = { NULL, 0, 0 };
	char release[256];
	int status = 1;

	tl_set_progname(argv[0]);
	parse_args(argc, argv);
	if (print_uname(&b, release, sizeof(release)) < 0) {
		tl_warn("uname");
		goto cleanup;
	}
	print_hz(release, &b);
	print_nproc(&b);
	print_sysctls(&b);
	if (fflush(stdout) == EOF || ferror(stdout)) {
		tl_warn("stdout");
		goto cleanup;
	}
	status = 0;
cleanup:
	free(b.p);
	return status;
}
