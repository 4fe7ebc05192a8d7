/* burst — N loopback connections opened and closed back to back, for `make bench`'s tcpevents
 * row (docs/bench.md): a burst of TCP state changes.
 *
 *   burst [-p PORT] -n N
 *	one listener on 127.0.0.1:PORT (default 21600, backlog 128), then N times: a blocking
 *	connect(), accept(), close() of the client, close() of the server's socket.  Then the
 *	listener is closed and one line printed: "connections=N".
 *
 * What the kernel's state machine makes of one connection (sock:inet_sock_set_state), ten
 * transitions: the client CLOSE -> SYN-SENT, SYN-SENT -> ESTABLISHED, ESTABLISHED -> FIN-WAIT-1
 * (its close), FIN-WAIT-1 -> FIN-WAIT-2 (the ACK of its FIN), FIN-WAIT-2 -> CLOSE (the server's
 * FIN: a timewait socket takes its place); the server's socket LISTEN -> SYN-RECV (the child is
 * cloned from the listener when the handshake's ACK comes), SYN-RECV -> ESTABLISHED,
 * ESTABLISHED -> CLOSE-WAIT (the client's FIN), CLOSE-WAIT -> LAST-ACK (its close),
 * LAST-ACK -> CLOSE (the client's ACK).  The listener adds two: CLOSE -> LISTEN and, at the
 * end, LISTEN -> CLOSE.  N connections: 10 * N + 2 transitions.  Besides them tcpevents sees,
 * per connection, one tcp_probe sample (the server's socket, ESTABLISHED, receiving the
 * client's FIN) and one timewait record (the client's socket replaced: TIME-WAIT, or FIN-WAIT-2
 * when the ACK of its FIN came before close() returned).  tests/test_bench_tcpevents.py checks
 * these counts against tcpevents in a namespace of its own.
 */
#include "tl_cli.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define USAGE "usage: burst [-p PORT] -n N\n"

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(21600),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	long long n = 0, k;
	int opt, one = 1, ls;

	tl_set_progname(argv[0]);
	while ((opt = getopt(argc, argv, "p:n:h")) != -1) {
		switch (opt) {
		case 'p': sin.sin_port = htons((uint16_t)tl_opt_ll("-p", optarg, 1, 65535)); break;
		case 'n': n = tl_opt_ll("-n", optarg, 1, 1000000); break;
		case 'h': fputs(USAGE, stdout); return 0;
		default: fputs(USAGE, stderr); return TL_EXIT_USAGE;
		}
	}
	if (n == 0 || optind != argc) {
		fputs(USAGE, stderr);
		return TL_EXIT_USAGE;
	}
	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(ls, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(ls, 128) < 0)
		tl_err(1, "listener on 127.0.0.1:%u", ntohs(sin.sin_port));
	for (k = 0; k < n; k++) {
		int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s;

		if (c < 0 || connect(c, (struct sockaddr *)&sin, sizeof(sin)) < 0)
			tl_err(1, "connection %lld: connect", k);
		s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (s < 0)
			tl_err(1, "connection %lld: accept", k);
		if (close(c) < 0 || close(s) < 0)
			tl_err(1, "connection %lld: close", k);
	}
	if (close(ls) < 0)
		tl_err(1, "listener: close");
	printf("connections=%lld\n", n);
	return fflush(stdout) == 0 ? 0 : 1;
}
