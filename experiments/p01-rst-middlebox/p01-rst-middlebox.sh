#!/bin/sh
# p01-rst-middlebox: a blocking connect() across the wire answered with a RST, twice: once by
# nft on the server side (reject with tcp reset, input hook: the RST a middlebox or a firewall
# sends, built by nf_reject), once by the server's own TCP (no socket on that port:
# tcp_v4_send_reset).  connect() fails the same way; the capture and each side's counters show
# who sent which RST.
. "$(dirname "$0")/../lib/collect.sh"
# the knob (experiments/units): checked here too, for a run without run.sh.  DROP_SYNS > 0 puts
# a count-based drop rule before the reject in part nft: the first DROP_SYNS SYNs get no answer
# at all, the next one the RST (connect_block -s 2 gives the SYNs a budget of about 7 s: on a
# kernel whose SYN timeouts double, 1 + 2 + 4 s, drop_syns=3 leaves no SYN to answer, ETIMEDOUT)
tl_knob_set DROP_SYNS drop_syns "${TL_KNOB_DROP_SYNS:-0}" 0 3

tl_wire_init "$1"
CKEEP="TcpActiveOpens,TcpAttemptFails,TcpInSegs,TcpOutSegs,TcpRetransSegs,TcpOutRsts,TcpInErrs,TcpExtTCPAbortOnSyn,TcpExtTCPSynRetrans"
SKEEP="TcpInSegs,TcpOutSegs,TcpOutRsts,TcpPassiveOpens,TcpAttemptFails,TcpInErrs,IpInReceives,IpInDelivers,IpOutRequests,IcmpOutMsgs"

# part NAME PORT: one connect() to PORT on the server; the rule (if any) is already loaded
part() {
	_name=$1 _port=$2
	tl_both_counters_before "$_name-"
	tl_capture "$_name-capture" "$TL_CLIENT_IF" "$_port"
	# no -e: the socket may live less than one sample (1 ms), so sockwatch is stopped instead
	tl_watch "$RAW/$_name-sockwatch.txt" -4 -s syn-sent -p "$_port"
	tl_log "$_name: connect() to $TL_SERVER_ADDR:$_port"
	tl_fg "$RAW/$_name-client.txt" "$TL_BIN/connect_block" -a "$TL_SERVER_ADDR" -p "$_port" -s 2
	tl_both_counters_after "$_name-" "$CKEEP" "$SKEEP"
	tl_unwatch stop
	tl_uncapture
	tl_log "$_name: $(grep '^result=' "$RAW/$_name-client.txt")"
}

# nft answers the SYN (SYN set, ACK clear) to 21017 with a RST; nothing listens there either,
# so without the rule the kernel would answer: the rule is what is measured
[ "$DROP_SYNS" -eq 0 ] ||
	tl_fault server in "drop-first:$DROP_SYNS" tcp dport 21017 tcp flags syn / syn,ack
tl_fault server in reject:tcp-reset tcp dport 21017 tcp flags syn / syn,ack
part nft 21017
tl_in server nft list ruleset > "$RAW/nft-nft.txt" || tl_die "nft list ruleset failed"
tl_fault_clear server
# no rule, no listener on 21018: the server's TCP answers for itself
part kernel 21018
tl_wire_record
