/* fuzz_diag — the sock_diag reply decoder (tl_diag_replay) on raw netlink bytes, as
 * `sockwatch -R` feeds it a recorded file.  Seeds: the .bin files of tests/data/netlink. */
#include "tl_diag.h"

#include <stddef.h>
#include <stdint.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t socks = 0;

	(void)tl_diag_replay(data, size, on_sock, &socks, on_sample, &socks);
	return 0;
}
