/* fuzz_diag — the two netlink decoders on raw netlink bytes: the sock_diag reply decoder
 * (tl_diag_replay), as `sockwatch -R` feeds it a recorded file, and the RTM_GETLINK decoder
 * (tl_link_replay), as `machine -l` feeds it a kept link dump.  Each input goes through both.
 * Seeds: the .bin files of tests/data/netlink (sock_diag records and links.bin). */
#include "tl_diag.h"
#include "tl_link.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What sockwatch does with each socket: name its state and timer, print its addresses. */
static int on_sock(const struct tl_sock *s, void *count)
{
	char local[64], peer[64];

	tl_sock_addr(s, 0, local, sizeof(local));
	tl_sock_addr(s, 1, peer, sizeof(peer));
	(void)tl_state_name(s->state);
	(void)tl_timer_name(s->timer);
	++*(size_t *)count;
	return 0;
}

static int on_sample(void *count)
{
	(void)count;
	return 0;
}

/* What machine does with each link: its strings read to their NUL, its state and flags named. */
static void use_links(const struct tl_links *links)
{
	char flags[160];
	size_t i, n = 0;

	for (i = 0; i < links->n; i++) {
		n += strlen(links->v[i].name) + strlen(links->v[i].qdisc) + strlen(links->v[i].kind);
		(void)tl_operstate_name(links->v[i].operstate);
		n += strlen(tl_link_flags(links->v[i].flags, flags, sizeof(flags)));
	}
	(void)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tl_links links;
	size_t socks = 0;

	(void)tl_diag_replay(data, size, on_sock, &socks, on_sample, &socks);
	if (tl_link_replay(data, size, &links) == 0) {
		use_links(&links);
		tl_links_free(&links);
	}
	return 0;
}
