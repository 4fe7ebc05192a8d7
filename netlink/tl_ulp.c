/* tl_ulp.c — INET_DIAG_ULP_INFO → struct tl_ulp, and the names of its TLS numbers.
 *
 * The kernel's layout (net/ipv4/tcp_diag.c tcp_diag_put_ulp, net/tls/tls_main.c tls_get_info):
 *   INET_DIAG_ULP_INFO (nested)
 *     INET_ULP_INFO_NAME   NUL-terminated string, the ULP's name
 *     INET_ULP_INFO_TLS    (nested) TLS_INFO_VERSION u16, TLS_INFO_CIPHER u16 (each only when
 *                          set), TLS_INFO_TXCONF u16, TLS_INFO_RXCONF u16, and the flags
 *                          TLS_INFO_ZC_RO_TX and TLS_INFO_RX_NO_PAD (not in 5.10) when they hold
 *     INET_ULP_INFO_MPTCP  (nested, 5.9) not decoded here
 */
#include "tl_diag_int.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/tls.h>
#include <stdio.h>
#include <string.h>

/* Our own numbers for the attributes, so an older installed header still builds this file:
 * the values are the kernel's (include/uapi/linux/tls.h, include/uapi/linux/inet_diag.h). */
enum { TL_TLS_INFO_VERSION = 1, TL_TLS_INFO_CIPHER, TL_TLS_INFO_TXCONF, TL_TLS_INFO_RXCONF,
       TL_TLS_INFO_ZC_RO_TX, TL_TLS_INFO_RX_NO_PAD, TL_TLS_INFO_MAX = TL_TLS_INFO_RX_NO_PAD };
_Static_assert((int)TLS_INFO_RXCONF == (int)TL_TLS_INFO_RXCONF, "tls.h TLS_INFO_* numbering");
_Static_assert(INET_ULP_INFO_TLS == 2 && INET_DIAG_ULP_INFO == 19, "inet_diag.h numbering");

struct attr_table {
	const struct nlattr **tb;
	int max;
};

/* Store each attribute of a nest by type; a newer kernel's unknown types are skipped. */
static int nest_cb(const struct nlattr *attr, void *data)
{
	struct attr_table *t = data;
	int type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, t->max) < 0)
		return MNL_CB_OK;	/* newer kernel: skip, don't fail */
	t->tb[type] = attr;
	return MNL_CB_OK;
}

/* A u16 attribute into *v; -1 (EBADMSG) when it has another length. */
static int get_u16(const struct nlattr *attr, uint16_t *v)
{
	if (attr == NULL)
		return 0;
	if (mnl_attr_validate(attr, MNL_TYPE_U16) < 0) {
		errno = EBADMSG;
		return -1;
	}
	*v = mnl_attr_get_u16(attr);
	return 0;
}

static int decode_tls(const struct nlattr *nest, struct tl_ulp *u)
{
	const struct nlattr *tb[TL_TLS_INFO_MAX + 1] = {0};
	struct attr_table t = { tb, TL_TLS_INFO_MAX };

	if (mnl_attr_parse_nested(nest, nest_cb, &t) < 0) {
		errno = EBADMSG;
		return -1;
	}
	u->has_tls = 1;
	if (get_u16(tb[TL_TLS_INFO_VERSION], &u->tls_version) < 0 ||
	    get_u16(tb[TL_TLS_INFO_CIPHER], &u->tls_cipher) < 0 ||
	    get_u16(tb[TL_TLS_INFO_TXCONF], &u->tls_txconf) < 0 ||
	    get_u16(tb[TL_TLS_INFO_RXCONF], &u->tls_rxconf) < 0)
		return -1;
	u->tls_zc_ro_tx = tb[TL_TLS_INFO_ZC_RO_TX] != NULL;
	u->tls_rx_no_pad = tb[TL_TLS_INFO_RX_NO_PAD] != NULL;
	return 0;
}

/* The name: printable ASCII without blanks or '=' (it goes into key=value lines), else '?'. */
static int decode_name(const struct nlattr *attr, struct tl_ulp *u)
{
	const char *p;
	size_t i, n;

	if (mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0) {
		errno = EBADMSG;
		return -1;
	}
	p = mnl_attr_get_str(attr);
	n = strnlen(p, mnl_attr_get_payload_len(attr));
	if (n >= sizeof(u->name))
		n = sizeof(u->name) - 1;
	for (i = 0; i < n; i++)
		u->name[i] = p[i] > ' ' && p[i] < 0x7f && p[i] != '=' ? p[i] : '?';
	u->name[n] = '\0';
	return 0;
}

int tl_decode_ulp(const struct nlattr *nest, struct tl_sock *s)
{
	const struct nlattr *tb[INET_ULP_INFO_TLS + 1] = {0};
	struct attr_table t = { tb, INET_ULP_INFO_TLS };

	if (mnl_attr_parse_nested(nest, nest_cb, &t) < 0) {
		errno = EBADMSG;
		return -1;
	}
	memset(&s->ulp, 0, sizeof(s->ulp));
	s->has_ulp = 1;
	if (tb[INET_ULP_INFO_NAME] != NULL && decode_name(tb[INET_ULP_INFO_NAME], &s->ulp) < 0)
		return -1;
	if (tb[INET_ULP_INFO_TLS] != NULL) {
		if (mnl_attr_validate(tb[INET_ULP_INFO_TLS], MNL_TYPE_NESTED) < 0) {
			errno = EBADMSG;
			return -1;
		}
		return decode_tls(tb[INET_ULP_INFO_TLS], &s->ulp);
	}
	return 0;
}

/* include/uapi/linux/tls.h TLS_CONF_*: 1 base (no keys: TCP's own send/receive), 2 sw (the
 * kernel's crypto), 3 hw (a NIC's offload), 4 hw_record (a TOE device: the whole record). */
const char *tl_tls_conf_name(unsigned conf)
{
	static const char *const names[] = { "none", "base", "sw", "hw", "hw_record" };

	return conf < sizeof(names) / sizeof(names[0]) ? names[conf] : "unknown";
}

/* include/uapi/linux/tls.h TLS_CIPHER_*, 51 (AES-GCM-128) to 58 (ARIA-GCM-256, 6.5). */
const char *tl_tls_cipher_name(unsigned cipher)
{
	static const char *const names[] = {
		"aes-gcm-128", "aes-gcm-256", "aes-ccm-128", "chacha20-poly1305", "sm4-gcm",
		"sm4-ccm", "aria-gcm-128", "aria-gcm-256",
	};

	if (cipher == 0)
		return "none";
	if (cipher < 51 || cipher - 51 >= sizeof(names) / sizeof(names[0]))
		return "unknown";
	return names[cipher - 51];
}

char *tl_tls_version_name(unsigned version, char *buf, size_t len)
{
	if (version == 0)
		(void)snprintf(buf, len, "none");
	else if (version >> 8 == 3 && (version & 0xff) >= 1)
		(void)snprintf(buf, len, "1.%u", (version & 0xff) - 1);
	else
		(void)snprintf(buf, len, "0x%04x", version);
	return buf;
}
