#!/bin/sh
# p04-mid-loss: one segment in the middle of a flight lost, across the wire.  The client
# (rr_client) writes one request of FLIGHT full segments (all of one length: the MSS): BEFORE
# segments, the lost one, AFTER segments; nft on the server's input hook drops the DROP-th
# (BEFORE + 1) segment of that length once (drop-nth), after the
# capture on the client's end of the veth saw it.  The segments after the hole arrive, and the
# receiver answers each with a duplicate ACK.  Two parts, each on its own port:
#   sack    net.ipv4.tcp_sack=1 (the default) in both namespaces: the duplicate ACKs carry
#           SACK blocks naming the segments after the hole; the sender retransmits the hole
#           (fast retransmit / RACK), without waiting for its RTO
#   nosack  net.ipv4.tcp_sack=0 in both namespaces: no SACK option is negotiated, the sender
#           counts duplicate ACKs alone (NewReno, RFC 6582)
# Each part has its capture (text and pcap: the report decodes the SACK blocks' edges from the
# pcap), tcpevents in the client's namespace (every retransmission; one line saying why when it
# cannot run), the nft rule with its counter, both sides' sysctls and counters.
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh.  The flight is
# BEFORE segments, the lost one, AFTER segments: at most 4 + 1 + 5 = 10, the initial cwnd, so
# all leave at once; at least 3 after the hole, so three duplicate ACKs can come
tl_knob_set BEFORE before "${TL_KNOB_BEFORE:-4}" 0 4
tl_knob_set AFTER after "${TL_KNOB_AFTER:-5}" 3 5
FLIGHT=$((BEFORE + 1 + AFTER))
DROP=$((BEFORE + 1))

tl_wire_init "$1"
PORT_SACK=21120 PORT_NOSACK=21121
REPLY=100
KEEP="TcpRetransSegs,TcpExtTCPSackRecovery,TcpExtTCPRenoRecovery,TcpExtTCPFastRetrans"
KEEP="$KEEP,TcpExtTCPSACKReorder,TcpExtTCPRenoReorder,TcpExtTCPTimeouts,TcpExtTCPLossProbes"
KEEP="$KEEP,TcpExtTCPLostRetransmit,TcpExtTCPSackRecoveryFail,TcpExtTCPRenoRecoveryFail"
KEEP="$KEEP,TcpExtTCPDSACKRecv,TcpExtTCPSpuriousRTOs,TcpExtTCPLossUndo,TcpOutSegs,TcpInSegs"
KEEP="$KEEP,TcpExtTCPBacklogCoalesce"	# duplicate ACKs merged while send() held the socket
KEEP_S="TcpRetransSegs,TcpExtTCPSACKReorder,TcpExtTCPOFOQueue,TcpExtTCPDSACKOldSent"
KEEP_S="$KEEP_S,TcpExtTCPSackRecovery,TcpExtTCPRenoRecovery,TcpExtTCPFastRetrans"
KEEP_S="$KEEP_S,TcpExtTCPTimeouts,TcpOutSegs,TcpInSegs,TcpExtDelayedACKs"
KEEP_S="$KEEP_S,TcpExtTCPBacklogCoalesce"	# segments merged while the reader held the socket
SYSCTLS="ipv4/tcp_sack ipv4/tcp_recovery ipv4/tcp_reordering ipv4/tcp_early_retrans
ipv4/tcp_dsack ipv4/tcp_timestamps ipv4/tcp_congestion_control ipv4/tcp_rto_min_us
ipv4/tcp_autocorking ipv4/tcp_shrink_window"

# the segment size: the veth's MTU less the IPv4 and TCP headers with timestamps (20 + 20 + 12);
# the request is FLIGHT whole segments, so every segment of the flight has this length
MTU=$(ip -o link show dev "$TL_CLIENT_IF" | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
case $MTU in '' | *[!0-9]*) tl_die "cannot read the MTU of $TL_CLIENT_IF" ;; esac
MSS=$((MTU - 52))
REQ=$((FLIGHT * MSS))	# rr_client's request: 8-byte header + body, one writev
BODY=$((REQ - 8))
[ "$BODY" -ge 1 ] && [ "$BODY" -le 65536 ] || tl_die "MTU $MTU: a request of $REQ bytes is beyond rr_client's -B"
SEG_IPLEN=$MTU
ACK_RATE_KBIT=500 ACK_BURST=300

# one segment per packet: without this the kernel hands the veth the flight as GSO packets
# (veth passes them on whole), and no rule could drop one segment of them
ip link set dev "$TL_CLIENT_IF" gso_max_segs 1 || tl_die "cannot set gso_max_segs on $TL_CLIENT_IF"

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
# the server's ACKs paced (tbf on veth-s, ACK_RATE_KBIT): the client's writev puts the whole
# flight out in about 0.3 ms holding the socket, and ACKs that arrive meanwhile wait in its
# backlog, where tcp_add_backlog() merges ACKs whose headers and options are alike into one:
# without SACK blocks the duplicate ACKs merge into the ACK before the hole, and the sender
# never sees them (it waits for the RTO).  Paced a few ms apart, each ACK meets the socket free
# and is processed on its own.  The server sends nothing longer than ACK_BURST bytes.
tl_in server tc qdisc replace dev "$TL_SERVER_IF" root tbf rate "${ACK_RATE_KBIT}kbit" burst "$ACK_BURST" \
	latency 1s || tl_die "cannot put tbf on $TL_SERVER_IF"
echo "flight=$FLIGHT drop=$DROP before=$BEFORE after=$AFTER mss=$MSS request=$REQ reply=$REPLY seg_iplen=$SEG_IPLEN ack_rate_kbit=$ACK_RATE_KBIT ack_burst=$ACK_BURST" \
	> "$RAW/params.txt"

# part NAME PORT SACK: one connection with net.ipv4.tcp_sack=SACK on both sides; nft drops
# the DROP-th full-length segment to PORT
part() {
	_p=$1 _port=$2 _sack=$3
	sysctl -qw "net.ipv4.tcp_sack=$_sack" || tl_die "cannot set net.ipv4.tcp_sack (client)"
	tl_srv sysctl -qw "net.ipv4.tcp_sack=$_sack" || tl_die "cannot set net.ipv4.tcp_sack (server)"
	tl_sysctls "$SYSCTLS" > "$RAW/$_p-sysctls.txt"
	tl_sysctls "$SYSCTLS" tl_srv > "$RAW/$_p-server-sysctls.txt"
	tl_fault server in "drop-nth:$DROP" tcp dport "$_port" ip length "$SEG_IPLEN"
	tl_srv_rr "$_p" "$_port" "$REPLY"
	_srv=$TL_LAST
	tl_part_begin "$_p" "$_port"
	tl_watch "$RAW/$_p-sockwatch.txt" -4 -s estab -s fin-wait-1 -s fin-wait-2 -s time-wait \
		-p "$_port"
	_sw=$TL_WATCH
	tl_log "$_p: rr_client -n 1 -w writev -B $BODY -R $REPLY ($FLIGHT segments of $MSS" \
		"bytes; nft drops segment $DROP once; tcp_sack=$_sack)"
	tl_rr_flight "$_p" "$_port" 1 "$BODY" "$REPLY"
	_cli=$TL_LAST
	tl_wait_line "$_cli" "$RAW/$_p-client.txt" '^(holding|result=)' 30
	tl_not_interrupted "$RAW/$_p-client.txt"
	# the close: its TIME-WAIT says both FINs were exchanged, nothing left in flight when the
	# counters are read
	tl_rr_part_end "$_p" "$_cli" "$_srv" "$_sw" "$KEEP" "$KEEP_S"
}

part sack "$PORT_SACK" 1
part nosack "$PORT_NOSACK" 0
rm -f "$RAW/nft-server.txt"
tl_wire_record
