#!/bin/sh
# p01-wire-netem: connect() across the wire with netem delaying every packet DELAY_MS on each
# end's veth (both directions), so the round trip is about 2 x DELAY_MS: connect() should take
# one RTT, and the kernel's first RTT sample (ss -tin's rtt) should say so.  On a kernel
# without sch_netem (this lab's host: CONFIG_NET_SCH_NETEM is not set) the unit is skipped by
# tl_netem, with its reason; a Debian guest kernel has sch_netem.ko.
. "$(dirname "$0")/../lib/collect.sh"
tl_wire_init "$1"
PORT=21013
DELAY_MS=50
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpOutSegs,TcpRetransSegs,TcpExtTCPSynRetrans"

tl_netem client delay "${DELAY_MS}ms"
tl_netem server delay "${DELAY_MS}ms"

tl_srv_listener "$RAW/listener.txt" -a "$TL_SERVER_ADDR" -p "$PORT" -m never
"$TL_BIN/counters" > "$RAW/counters-before.txt" || tl_die "counters failed"
tl_capture capture "$TL_CLIENT_IF" "$PORT"

tl_log "connect() to $TL_SERVER_ADDR:$PORT, netem delay ${DELAY_MS} ms on both ends"
tl_bg "$RAW/client.txt" "$TL_BIN/connect_block" -a "$TL_SERVER_ADDR" -p "$PORT" -H
CLIENT=$TL_LAST
tl_wait_line "$CLIENT" "$RAW/client.txt" '^holding' 10
"$TL_BIN/counters" -d "$RAW/counters-before.txt" -k "$KEEP" > "$RAW/counters-delta.txt" ||
	tl_die "counters failed"
ss -tin state established "( dport = :$PORT )" > "$RAW/ss-client.txt" || tl_die "ss failed"
tl_uncapture
tl_stop "$CLIENT"
tl_not_interrupted "$RAW/client.txt"
tl_stop "$TL_LISTENER"
echo "$DELAY_MS" > "$RAW/delay-ms.txt"
tl_wire_record
tl_log "$(grep '^result=' "$RAW/client.txt")"
