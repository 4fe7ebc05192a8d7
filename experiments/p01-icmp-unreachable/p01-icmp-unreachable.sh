#!/bin/sh
# p01-icmp-unreachable: a blocking connect() across the wire whose SYN the server side answers
# (nft reject, input hook) with an ICMP destination-unreachable instead of a SYN-ACK, three
# times, one code each: host-unreachable, port-unreachable, admin-prohibited; then once more
# port-unreachable with the first SYN dropped, so the only ICMP answers the retransmission (sent
# by the timer, while connect() sleeps without the socket lock).  For each part:
# what connect() returns and when (connect_block), the SYN-SENT socket (sockwatch), every SYN
# and ICMP on the client's veth end (capture) and both sides' counters.  TCP_SYNCNT 2 keeps a
# part that would retry until it gives up within ~7 s (tcp_syn_linear_timeouts 4 on 6.5+).
# The knobs (experiments/units): syncnt, the TCP_SYNCNT of every part (2..4); late_drops, the
# SYNs the last part's nft rule drops before the reject answers one (1..2: at least 3 SYNs
# leave with TCP_SYNCNT 2 on any kernel, so one is always answered).
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh
tl_knob_set SYNCNT syncnt "${TL_KNOB_SYNCNT:-2}" 2 4
tl_knob_set LATE_DROPS late_drops "${TL_KNOB_LATE_DROPS:-1}" 1 2

tl_wire_init "$1"
CKEEP="TcpActiveOpens,TcpAttemptFails,TcpOutSegs,TcpRetransSegs,TcpExtTCPSynRetrans,TcpExtTCPTimeouts,TcpExtLockDroppedIcmps,TcpExtOutOfWindowIcmps,IcmpInMsgs,IcmpInDestUnreachs,IcmpInErrors"
SKEEP="TcpInSegs,TcpOutRsts,TcpPassiveOpens,IcmpOutMsgs,IcmpOutDestUnreachs,IcmpOutRateLimitGlobal,IcmpOutRateLimitHost"

# part PORT NAME CODE [drop-first]: one connect() whose SYN is answered with ICMP CODE (with
# drop-first, the first LATE_DROPS SYNs are dropped by an nft rule before the reject rule, so
# only a retransmission is answered); the part's raw files are NAME-*
part() {
	_port=$1 _name=$2 _code=$3
	[ "${4:-}" != drop-first ] || tl_fault server in "drop-first:$LATE_DROPS" tcp dport "$_port"
	tl_fault server in "reject:$_code" tcp dport "$_port"
	cp "$RAW/nft-server.txt" "$RAW/$_name-nft-before.txt"
	tl_both_counters_before "$_name-"
	tl_capture "$_name-capture" "$TL_CLIENT_IF" "$_port"
	tl_watch "$RAW/$_name-sockwatch.txt" -4 -e -s syn-sent -p "$_port"
	tl_log "connect() to $TL_SERVER_ADDR:$_port, the SYN answered with ICMP $_code${4:+ (the first $LATE_DROPS SYN(s) dropped)}, TCP_SYNCNT=$SYNCNT"
	tl_fg "$RAW/$_name-client.txt" "$TL_BIN/connect_block" -a "$TL_SERVER_ADDR" -p "$_port" -s "$SYNCNT"
	tl_both_counters_after "$_name-" "$CKEEP" "$SKEEP"
	tl_unwatch 5
	tl_uncapture
	# the rules' own counters: how many SYNs nft dropped and answered
	tl_in server nft list ruleset > "$RAW/$_name-nft.txt" || tl_die "nft list ruleset failed"
	tl_fault_clear server
	tl_log "$_name: $(grep '^result=' "$RAW/$_name-client.txt")"
}

part 21014 host-unreachable host-unreachable
part 21015 port-unreachable port-unreachable
part 21016 admin-prohibited admin-prohibited
part 21017 port-unreachable-late port-unreachable drop-first
tl_wire_record
