/* tl_names.c — state and timer names, address formatting. */
#include "tl_diag.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <strings.h>

/* ss(8) spellings, indexed by the kernel's TCP state numbers (include/net/tcp_states.h). */
static const char *const state_names[TL_STATE_MAX] = {
	[0] = "UNKNOWN", [TL_ESTABLISHED] = "ESTAB", [TL_SYN_SENT] = "SYN-SENT",
	[TL_SYN_RECV] = "SYN-RECV", [TL_FIN_WAIT1] = "FIN-WAIT-1", [TL_FIN_WAIT2] = "FIN-WAIT-2",
	[TL_TIME_WAIT] = "TIME-WAIT", [TL_CLOSE] = "UNCONN", [TL_CLOSE_WAIT] = "CLOSE-WAIT",
	[TL_LAST_ACK] = "LAST-ACK", [TL_LISTEN] = "LISTEN", [TL_CLOSING] = "CLOSING",
	[TL_NEW_SYN_RECV] = "NEW-SYN-RECV",
};

/* idiag_timer values (net/ipv4/inet_diag.c: inet_sk_diag_fill, inet_twsk_diag_fill,
 * inet_req_diag_fill), named as ss(8) names them (iproute2 misc/ss.c, tmr_name[]): 4 is
 * ICSK_TIME_PROBE0, the zero-window probe timer that RFC 1122 (4.2.2.17) calls the persist
 * timer; ss prints "unknown" for anything above 4. */
static const char *const timer_names[] = { "off", "on", "keepalive", "timewait", "persist" };

const char *tl_state_name(int state)
{
	if (state <= 0 || state >= TL_STATE_MAX)
		return "UNKNOWN";
	return state_names[state];
}

const char *tl_timer_name(int timer)
{
	if (timer < 0 || (size_t)timer >= sizeof(timer_names) / sizeof(timer_names[0]))
		return "unknown";
	return timer_names[timer];
}

int tl_state_parse(const char *name, uint32_t *mask)
{
	int i;

	if (strcasecmp(name, "all") == 0) {
		*mask = TL_STATES_ALL;
		return 0;
	}
	for (i = 1; i < TL_STATE_MAX; i++) {
		if (strcasecmp(name, state_names[i]) == 0) {
			*mask = TL_STATE_BIT(i);
			return 0;
		}
	}
	errno = EINVAL;
	return -1;
}

char *tl_sock_addr(const struct tl_sock *s, int peer, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];
	const struct in6_addr *a = peer ? &s->dst : &s->src;
	uint16_t port = peer ? s->dport : s->sport;

	if (inet_ntop(s->family, a, ip, sizeof(ip)) == NULL)
		snprintf(ip, sizeof(ip), "?");
	if (s->family == AF_INET6)
		snprintf(buf, len, "[%s]:%u", ip, port);
	else
		snprintf(buf, len, "%s:%u", ip, port);
	return buf;
}
