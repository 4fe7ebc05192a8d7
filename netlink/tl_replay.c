/* tl_replay.c — decode recorded sock_diag replies (raw netlink messages, samples marked by
 * NLMSG_NOOP) exactly as a live query decodes them. */
#include "tl_diag_int.h"

#include <errno.h>

int tl_record_mark(struct tl_diag *d)
{
	struct nlmsghdr mark = { .nlmsg_len = sizeof(mark), .nlmsg_type = NLMSG_NOOP };

	errno = 0;
	if (fwrite(&mark, sizeof(mark), 1, d->record) != 1 || fflush(d->record) != 0) {
		if (errno == 0)
			errno = EIO;	/* the write's own errno (ENOSPC...) when stdio kept it */
		return -1;
	}
	return 0;
}

int tl_diag_replay(const void *buf, size_t len, tl_sock_cb cb, void *data,
		   int (*sample_cb)(void *data), void *sample_data)
{
	struct tl_decode_ctx ctx = { .cb = cb, .data = data };
	const struct nlmsghdr *nlh = buf;
	int remaining = (int)len, samples = 0, in_dump = 0, pending = 0, ret;

	if (len > INT32_MAX) {
		errno = EFBIG;
		return -1;
	}
	while (remaining > 0) {
		/* mnl_nlmsg_ok() compares (int)nlmsg_len: a length of 2^31 or more passes it, and
		 * 0xffffffff aligns to 0, so mnl_nlmsg_next() would never move (an endless loop).
		 * libmnl walks attributes up to the aligned end of a message, so the padding must be
		 * in the buffer too (the kernel always sends it; a fuzzer found reads past it). */
		if (!mnl_nlmsg_ok(nlh, remaining) || nlh->nlmsg_len > (uint32_t)remaining ||
		    MNL_ALIGN(nlh->nlmsg_len) > (uint32_t)remaining) {
			errno = EBADMSG;	/* truncated or garbled */
			return -1;
		}
		if (nlh->nlmsg_type == NLMSG_NOOP) {
			if (in_dump) {
				errno = EBADMSG;	/* a mark inside a dump */
				return -1;
			}
			if (sample_cb != NULL && sample_cb(sample_data) < 0)
				return -1;
			samples++;
			pending = 0;
		} else {
			/* seq and portid 0: a replay has no socket to match them against */
			ret = tl_decode_run(nlh, nlh->nlmsg_len, 0, 0, &ctx);
			if (ret == MNL_CB_ERROR)
				return -1;
			in_dump = ret != MNL_CB_STOP;
			pending = 1;
		}
		nlh = mnl_nlmsg_next(nlh, &remaining);
	}
	if (in_dump || pending) {
		errno = EBADMSG;	/* the record was cut short */
		return -1;
	}
	return samples;
}
