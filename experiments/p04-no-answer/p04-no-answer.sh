#!/bin/sh
# p04-no-answer: the peer stops answering in the middle of a connection.  The client (peer)
# connects, sends one segment of data and waits in recv(); nft on the server's input drops every
# segment of that connection that carries data (the handshake passes), so the data is never
# acknowledged and the client retransmits it until the kernel gives up: recv() returns
# ETIMEDOUT.  When it gives up is a time budget, not a count (retransmits_timed_out(),
# net/ipv4/tcp_timer.c), counted from the first transmission of the data.  Three parts, each on
# its own port:
#   retries2      tcp_retries2 = RETRIES2 (the knob, default 3) in the client's namespace: the
#                 budget is ((2 << RETRIES2) - 1) x 200 ms (tcp_model_timeout() with TCP_RTO_MIN),
#                 3000 ms for 3; the RTO is about 200 ms here, so the retransmissions fit the
#                 budget's model and their number is RETRIES2
#   rto-min       the same tcp_retries2, with a route to the server whose RTO floor is locked at
#                 1000 ms (ip route ... rto_min 1000ms: iproute2 locks the metric): the same budget, so fewer
#                 retransmissions (at 1 s, then the timer at 3 s finds the budget spent)
#   user-timeout  the same tcp_retries2, and TCP_USER_TIMEOUT = USER_TIMEOUT ms (the knob,
#                 default 5000) on the client's socket: it replaces the budget, even a longer one;
#                 the last RTO is cut to end at it (tcp_clamp_rto_to_user_timeout())
# The tail loss probe is switched off in the client's namespace (tcp_early_retrans=0): with one
# segment out its timer would fire at the RTO's time, one more copy of the segment that only
# blurs the count (p04-tail-loss shows it).  Each part has its capture at the client's end,
# the client's sockwatch (retransmits, backoff, timer), tcpevents (every retransmission, and the
# state change at the end), both sides' counters and the client's and server's lines.
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh.  Unit
# p04-no-answer-default (p04-no-answer-default.sh) runs part retries2 alone, with the kernel's
# own tcp_retries2 (15) by default: a budget past the linear threshold, about a quarter of an
# hour; its client waits for recv()'s end up to the budget plus two of the longest RTOs.
if [ "$TL_UNIT" = p04-no-answer-default ]; then
	tl_knob_set RETRIES2 retries2 "${TL_KNOB_RETRIES2:-15}" 6 15
	ONLY=retries2 END_S=1300
else
	tl_knob_set RETRIES2 retries2 "${TL_KNOB_RETRIES2:-3}" 1 5
	tl_knob_set USER_TIMEOUT user_timeout "${TL_KNOB_USER_TIMEOUT:-5000}" 500 15000
	ONLY= END_S=30
fi

tl_wire_init "$1"
PORT_R2=21130 PORT_RTO=21131 PORT_UT=21132
SEND=1000		# bytes of data: one segment
RTO_MIN_MS=1000		# part rto-min's locked route metric
KEEP="TcpRetransSegs,TcpExtTCPTimeouts,TcpExtTCPAbortOnTimeout,TcpExtTCPLossProbes"
KEEP="$KEEP,TcpOutSegs,TcpInSegs,TcpActiveOpens,TcpEstabResets,TcpOutRsts"
KEEP_S="TcpInSegs,TcpOutSegs,TcpPassiveOpens,TcpRetransSegs"
SYSCTLS="ipv4/tcp_retries1 ipv4/tcp_retries2 ipv4/tcp_early_retrans ipv4/tcp_rto_min_us
ipv4/tcp_rto_max_ms ipv4/tcp_timestamps ipv4/tcp_syn_retries"

# the namespace's own settings as they came, then the unit's two
tl_sysctls "$SYSCTLS" > "$RAW/sysctls-default.txt"
sysctl -qw net.ipv4.tcp_retries2="$RETRIES2" || tl_die "cannot set tcp_retries2"
sysctl -qw net.ipv4.tcp_early_retrans=0 || tl_die "cannot set tcp_early_retrans"
tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
if [ -n "$ONLY" ]; then
	echo "retries2=$RETRIES2 send=$SEND" > "$RAW/params.txt"
else
	echo "retries2=$RETRIES2 user_timeout_ms=$USER_TIMEOUT send=$SEND rto_min_ms=$RTO_MIN_MS" \
		> "$RAW/params.txt"
fi

# part NAME PORT CLIENT_STEPS: one connection; nft drops its data on the server's input
part() {
	_p=$1 _port=$2 _steps=$3
	tl_fault server in drop tcp dport "$_port" ip length gt 100
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p "$_port" -s hold
	_srv=$TL_LAST
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^ready ' 5
	tl_part_begin "$_p" "$_port"
	tl_watch "$RAW/$_p-sockwatch.txt" -4 -e -p "$_port" -c backoff,unacked
	tl_log "$_p: peer -s $_steps (nft drops every data segment to port $_port)"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p "$_port" \
		-s "$_steps"
	_cli=$TL_LAST
	tl_wait_line "$_cli" "$RAW/$_p-client.txt" '^exit ' "$END_S"
	tl_wait_exit "$_cli" 5
	tl_log "$_p: $(grep ' op=recv' "$RAW/$_p-client.txt" | cut -d' ' -f4-6)"
	# the client's socket is gone (sockwatch saw it go); then the capture, before the server
	# is stopped (its FIN would meet no socket: a RST, after the part)
	tl_wait_line "$TL_WATCH" "$RAW/$_p-sockwatch.txt" ' event=gone ' 5
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP_S"
	tl_uncapture
	tl_unwatch 5
	[ -z "$EV" ] || tl_stop "$EV"
	tl_in server nft list ruleset > "$RAW/$_p-nft-server.txt" || tl_die "nft list ruleset failed"
	tl_fault_clear server
	tl_stop "$_srv"
}

part retries2 "$PORT_R2" "send:$SEND,recv:1"
if [ -n "$ONLY" ]; then
	rm -f "$RAW/nft-server.txt"
	tl_wire_record
	exit 0
fi

ip route add "$TL_SERVER_ADDR/32" dev "$TL_CLIENT_IF" rto_min "${RTO_MIN_MS}ms" ||
	tl_die "cannot add a route with rto_min"
ip route show "$TL_SERVER_ADDR/32" > "$RAW/rto-min-route.txt" || tl_die "ip route show failed"
part rto-min "$PORT_RTO" "send:$SEND,recv:1"
ip route del "$TL_SERVER_ADDR/32" dev "$TL_CLIENT_IF" || tl_die "cannot remove the rto_min route"

part user-timeout "$PORT_UT" "user-timeout:$USER_TIMEOUT,send:$SEND,recv:1"
rm -f "$RAW/nft-server.txt"
tl_wire_record
