/* tl_diag_int.h — what tl_diag.c and tl_decode.c share; not part of the API. */
#ifndef TL_DIAG_INT_H
#define TL_DIAG_INT_H

#include "tl_diag.h"

#include <libmnl/libmnl.h>

struct tl_diag {
	struct mnl_socket *nl;
	uint32_t portid, seq;
	FILE *record;
	char buf[32768];	/* libmnl 1.0.5's MNL_SOCKET_DUMP_SIZE; Debian 12 has 1.0.4 */
};

struct tl_decode_ctx {
	tl_sock_cb cb;
	void *data;
};

/* mnl_cb_run over one buffer of replies, decoding each inet_diag_msg.  seq and portid 0 skip
 * the checks (replay).  Returns MNL_CB_ERROR (-1, errno set), MNL_CB_STOP (NLMSG_DONE) or
 * MNL_CB_OK (more to come). */
int tl_decode_run(const void *buf, size_t len, uint32_t seq, uint32_t portid,
		  struct tl_decode_ctx *ctx);

/* Decode INET_DIAG_ULP_INFO (a nest) into s->ulp, s->has_ulp = 1.  0, or -1 with EBADMSG. */
int tl_decode_ulp(const struct nlattr *nest, struct tl_sock *s);

/* Append the end-of-sample mark to the record file.  0 or -1. */
int tl_record_mark(struct tl_diag *d);

#endif
