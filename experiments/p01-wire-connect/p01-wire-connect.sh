#!/bin/sh
# p01-wire-connect: a blocking connect() across the wire (a veth pair between a client and a
# server namespace, MTU TL_MTU), captured on the client's end, each side's counters read in its
# own namespace; then the same connect() over the client namespace's loopback, captured on lo,
# so the MSS of both links is measured in one unit.  Both connections are held open while
# `ss -tin` records what each socket says about its MSS, then closed.
# The knobs (experiments/units): advmss (0: none) adds a host route to the server in the
# client's namespace with that advmss metric, which the client's SYN announces instead of
# MTU - 40; timestamps sets net.ipv4.tcp_timestamps in the client's namespace (the loopback
# connection's both ends live there too).
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh
tl_knob_set ADVMSS advmss "${TL_KNOB_ADVMSS:-0}" 0 1460
tl_knob_set TIMESTAMPS timestamps "${TL_KNOB_TIMESTAMPS:-1}" 0 1

tl_wire_init "$1"
PORT=21013
LOPORT=21014
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpAttemptFails,TcpOutSegs,TcpInSegs,TcpRetransSegs,TcpExtTCPSynRetrans"

# the knobs' settings, only when not their defaults (the default run touches nothing)
if [ "$TIMESTAMPS" != 1 ]; then
	sysctl -qw "net.ipv4.tcp_timestamps=$TIMESTAMPS" ||
		tl_die "cannot set net.ipv4.tcp_timestamps=$TIMESTAMPS in the client's namespace"
fi
if [ "$ADVMSS" != 0 ]; then
	ip route add "$TL_SERVER_ADDR/32" dev "$TL_CLIENT_IF" advmss "$ADVMSS" ||
		tl_die "cannot add the advmss $ADVMSS route to $TL_SERVER_ADDR"
	ip route show > "$RAW/routes.txt" || tl_die "ip route show failed"
fi

# ---- the wire ----
tl_srv_listener "$RAW/listener.txt" -a "$TL_SERVER_ADDR" -p "$PORT" -m never
tl_both_counters_before ""
tl_capture capture "$TL_CLIENT_IF" "$PORT"

tl_log "connect() to $TL_SERVER_ADDR:$PORT across the wire (MTU ${TL_MTU:-?})"
tl_bg "$RAW/client.txt" "$TL_BIN/connect_block" -a "$TL_SERVER_ADDR" -p "$PORT" -H
CLIENT=$TL_LAST
tl_wait_line "$CLIENT" "$RAW/client.txt" '^holding' 5
tl_both_counters_after "" "$KEEP" "$KEEP"
# what each end's socket says about the MSS (mss, advmss, rcvmss), for the cross-check
ss -tin state established "( sport = :$PORT or dport = :$PORT )" > "$RAW/ss-client.txt" ||
	tl_die "ss failed"
tl_srv ss -tin state established "( sport = :$PORT or dport = :$PORT )" > "$RAW/ss-server.txt" ||
	tl_die "ss (server side) failed"
tl_uncapture
tl_stop "$CLIENT"
tl_not_interrupted "$RAW/client.txt"
tl_stop "$TL_LISTENER"

# ---- loopback, in the client namespace, for comparison ----
ip -o link show dev lo > "$RAW/lo-link.txt" || tl_die "ip link show dev lo failed"
tl_listener "$RAW/lo-listener.txt" -a 127.0.0.1 -p "$LOPORT" -m never
tl_capture lo-capture lo "$LOPORT"
tl_bg "$RAW/lo-client.txt" "$TL_BIN/connect_block" -a 127.0.0.1 -p "$LOPORT" -H
CLIENT=$TL_LAST
tl_wait_line "$CLIENT" "$RAW/lo-client.txt" '^holding' 5
ss -tin state established "( sport = :$LOPORT or dport = :$LOPORT )" > "$RAW/lo-ss.txt" ||
	tl_die "ss failed"
tl_uncapture
tl_stop "$CLIENT"
tl_not_interrupted "$RAW/lo-client.txt"
tl_stop "$TL_LISTENER"

tl_wire_record
tl_log "$(grep '^result=' "$RAW/client.txt")"
