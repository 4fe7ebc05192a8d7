#!/bin/sh
# p01-synack-lost: a blocking connect() across the wire while nft drops the first DROP SYN-ACKs
# (the knob drops, 2 by default).
# The client's SYN-SENT socket retransmits its SYN on its timer; the server's request socket
# (SYN-RECV) retransmits its SYN-ACK on its own timer (reqsk_timer_handler) and answers a
# retransmitted SYN with one too (tcp_check_req).  Two parts, one rule each:
#   lost   the client's input hook drops them: to the server they left, as if lost on the way
#   local  the server's own output hook drops them: the server's send fails, and it knows
# In each part sockwatch watches both sockets, each in its own namespace, and a capture on
# each end of the veth shows which SYN-ACKs left the server and which reached the client.
. "$(dirname "$0")/../lib/collect.sh"
# the knob (experiments/units): checked here too, for a run without run.sh
tl_knob_set DROP drops "${TL_KNOB_DROPS:-2}" 1 4

tl_wire_init "$1"
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpOutSegs,TcpInSegs,TcpRetransSegs,TcpExtTCPSynRetrans,TcpExtTCPTimeouts,IpOutRequests,IpOutTransmits"

# part NAME PORT SIDE HOOK: one connect() with the first DROP SYN-ACKs from PORT dropped by a
# rule on SIDE's HOOK; raw files NAME-*.
part() {
	_p=$1 _port=$2
	tl_srv_listener "$RAW/$_p-listener.txt" -a "$TL_SERVER_ADDR" -p "$_port" -m never
	tl_fault "$3" "$4" "drop-first:$DROP" tcp sport "$_port" tcp flags syn,ack / syn,ack
	tl_both_counters_before "$_p-"
	# the server's end of the veth, in its namespace, and the client's
	tl_capture -s "$_p-server-capture" "$TL_SERVER_IF" "$_port"
	_scap=$TL_CAPTURE _scout=$TL_CAPTURE_OUT
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	# the server's request socket (SYN-RECV, source port _port), watched in its namespace
	tl_bg "$RAW/$_p-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -e -s syn-recv -P "$_port"
	_swatch=$TL_LAST
	tl_wait_line "$_swatch" "$RAW/$_p-server-sockwatch.txt" '^ready ' 5
	tl_watch "$RAW/$_p-sockwatch.txt" -4 -e -s syn-sent -p "$_port"

	tl_log "$_p: connect() to $TL_SERVER_ADDR:$_port; the first $DROP SYN-ACKs dropped on the $3's $4 hook"
	tl_fg "$RAW/$_p-client.txt" "$TL_BIN/connect_block" -a "$TL_SERVER_ADDR" -p "$_port"
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_unwatch 5
	tl_wait_exit "$_swatch" 5
	tail -n 1 "$RAW/$_p-server-sockwatch.txt" | grep -q '^end ' ||
		tl_die "the server's sockwatch output has no end line"
	tl_uncapture
	tl_uncapture "$_scap" "$_scout"
	tl_stop "$TL_LISTENER"
	tl_log "$_p: $(grep '^result=' "$RAW/$_p-client.txt")"
}

part lost 21013 client in
part local 21015 server out
tl_wire_record
