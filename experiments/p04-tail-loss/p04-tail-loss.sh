#!/bin/sh
# p04-tail-loss: the last segment of a flight lost, across the wire.  The client (rr_client)
# writes one request of FLIGHT segments, the last one shorter than the others; nft on the
# server's input hook drops the first DROPS segments of exactly that length (the tail, then its
# retransmissions), after the capture on the client's end of the veth saw them.  Two parts,
# each on its own port:
#   tlp   DROPS=1: only the original tail is lost; the tail loss probe (TLP) sends it again
#         after the probe timeout and the connection recovers without an RTO
#   rto   DROPS=3 (the knob drops, 2..4): the original and the probe are lost; the retransmission
#         timer (RTO) fires; from drops 3 on its retransmissions are lost too, and each RTO
#         is twice the last (backoff)
# After the first reply the client sends a second request: its ACK is the first one beyond
# the probe's sequence (tp->tlp_high_seq), the one TCPLossProbeRecovery counts on.  Each part
# has its capture, the client's sockwatch (rto_ms, backoff), an ss -tin snapshot while the
# tail is outstanding (srtt, rttvar, rto), tcpevents in the client's namespace (every
# retransmission and tcp_probe's srtt; one line saying why when it cannot run) and both
# sides' counters.
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh
tl_knob_set FLIGHT flight "${TL_KNOB_FLIGHT:-4}" 1 8
tl_knob_set DROPS drops "${TL_KNOB_DROPS:-3}" 2 4

tl_wire_init "$1"
PORT_TLP=21110 PORT_RTO=21111
REPLY=100
KEEP="TcpRetransSegs,TcpExtTCPLossProbes,TcpExtTCPLossProbeRecovery,TcpExtTCPTimeouts"
KEEP="$KEEP,TcpOutSegs,TcpInSegs,TcpActiveOpens,TcpPassiveOpens,TcpExtTCPLossUndo"
KEEP="$KEEP,TcpExtTCPSpuriousRTOs,TcpExtTCPDSACKRecv,TcpExtTCPLossFailures"
KEEP_S="TcpRetransSegs,TcpExtTCPLossProbes,TcpExtTCPLossProbeRecovery,TcpExtTCPTimeouts"
KEEP_S="$KEEP_S,TcpOutSegs,TcpInSegs,TcpPassiveOpens,TcpExtTCPDSACKOldSent"
KEEP_S="$KEEP_S,TcpExtDelayedACKs"
SYSCTLS="ipv4/tcp_early_retrans ipv4/tcp_rto_min_us ipv4/tcp_recovery ipv4/tcp_sack
ipv4/tcp_timestamps ipv4/tcp_congestion_control ipv4/tcp_retries2 ipv4/tcp_frto
ipv4/tcp_thin_linear_timeouts ipv4/tcp_autocorking"

# the segment size: the veth's MTU less the IPv4 and TCP headers with timestamps (20 + 20 + 12);
# the tail is shorter than a full segment, so its length is its own
MTU=$(ip -o link show dev "$TL_CLIENT_IF" | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
case $MTU in '' | *[!0-9]*) tl_die "cannot read the MTU of $TL_CLIENT_IF" ;; esac
MSS=$((MTU - 52))
TAIL=300
[ "$MSS" -gt 600 ] || TAIL=$((MSS / 2))
[ "$TAIL" -ge 9 ] || tl_die "MTU $MTU: a segment of $MSS bytes leaves no room for a shorter tail"
REQ=$(((FLIGHT - 1) * MSS + TAIL))	# rr_client's request: 8-byte header + body, one writev
BODY=$((REQ - 8))
TAIL_IPLEN=$((TAIL + 52))

# one segment per packet: without this the kernel hands the veth the whole flight as one GSO
# packet (veth passes it on whole), and no rule could drop its last segment alone; the
# kernel's TCP reads it at connect() (sk_setup_caps(): sk_gso_max_segs)
ip link set dev "$TL_CLIENT_IF" gso_max_segs 1 || tl_die "cannot set gso_max_segs on $TL_CLIENT_IF"

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "flight=$FLIGHT mss=$MSS tail=$TAIL request=$REQ reply=$REPLY tail_iplen=$TAIL_IPLEN drops=$DROPS" \
	> "$RAW/params.txt"

# part NAME PORT DROPS: one connection; nft drops the first DROPS tail-length segments
part() {
	_p=$1 _port=$2 _drops=$3
	tl_fault server in "drop-first:$_drops" tcp dport "$_port" ip length "$TAIL_IPLEN"
	tl_srv_rr "$_p" "$_port" "$REPLY"
	_srv=$TL_LAST
	tl_part_begin "$_p" "$_port"
	tl_watch "$RAW/$_p-sockwatch.txt" -4 -s estab -s fin-wait-1 -s fin-wait-2 -s time-wait \
		-p "$_port" -c unacked,backoff
	_sw=$TL_WATCH
	tl_log "$_p: rr_client -n 2 -w writev -B $BODY -R $REPLY ($FLIGHT segments, the tail" \
		"$TAIL bytes; nft drops its first $_drops transmissions)"
	tl_rr_flight "$_p" "$_port" 2 "$BODY" "$REPLY"
	_cli=$TL_LAST
	# the tail alone outstanding (the rest acknowledged): srtt, rttvar and rto as ss shows them
	tl_wait_line "$_sw" "$RAW/$_p-sockwatch.txt" ' unacked=1 ' 10
	ss -tin state established "( dport = :$_port )" > "$RAW/$_p-ss.txt" 2>&1 || tl_die "ss failed"
	tl_wait_line "$_cli" "$RAW/$_p-client.txt" '^(holding|result=)' 30
	tl_not_interrupted "$RAW/$_p-client.txt"
	# the close: the client's FIN carries the ACK of the last reply; its TIME-WAIT says both
	# FINs were exchanged, so nothing is left in flight when the counters are read
	tl_rr_part_end "$_p" "$_cli" "$_srv" "$_sw" "$KEEP" "$KEEP_S"
}

part tlp "$PORT_TLP" 1
part rto "$PORT_RTO" "$DROPS"
rm -f "$RAW/nft-server.txt"
tl_wire_record
