#!/bin/sh
# p04-slow-start: a fresh connection's first bulk transfer through a bottleneck, across the
# wire.  The bottleneck is on the server's side of the veth, so that what it drops is lost in
# the network for the sender, never refused by its own qdisc: the server's veth hands every
# packet it receives to an ifb device (tc ingress, u32 match-all, mirred redirect), and the ifb
# sends it on through tbf at RATE Mbit/s with a queue of QUEUE KiB: what finds the queue full is
# dropped.  The client (stream_send) sends BYTES KiB in one send() to stream_recv.  Four parts,
# each on its own port and connection:
#   cubic     TCP_CONGESTION cubic: slow start from cwnd 10, then congestion avoidance
#   bbr       TCP_CONGESTION bbr: its own model of the path (STARTUP, DRAIN, PROBE_BW)
#   idle      cubic, net.ipv4.tcp_slow_start_after_idle=1 (the default): BYTES / 2 twice, with
#             an idle pause of IDLE_MS between the moment the first half is all acknowledged
#             and the second send()
#   idle-off  the same with tcp_slow_start_after_idle=0
# Each part has tcpevents in the client's namespace (tcp:tcp_probe on every segment the client
# receives: cwnd, ssthresh, srtt; every retransmission), the capture on the client's end of the
# veth (before the bottleneck), tbf's own counters, both sides' counters and, during the idle
# pause, `ss -tin`: the cwnd as a tool other than the fixture reads it.
. "$(dirname "$0")/../lib/collect.sh"

# the knobs (experiments/units): checked here too, for a run without run.sh
tl_knob_set RATE rate "${TL_KNOB_RATE:-20}" 5 100
tl_knob_set QUEUE queue "${TL_KNOB_QUEUE:-64}" 16 1024
tl_knob_set KIB bytes "${TL_KNOB_BYTES:-1024}" 256 4096
tl_knob_set IDLE_MS idle_ms "${TL_KNOB_IDLE_MS:-1000}" 300 5000

tl_wire_init "$1"
BYTES=$((KIB * 1024))
HALF=$((BYTES / 2))
BURST=15k
IFB=ifb-tl
KEEP="TcpRetransSegs,TcpOutSegs,TcpInSegs,TcpExtTCPOrigDataSent,TcpExtTCPLossProbes"
KEEP="$KEEP,TcpExtTCPSackRecovery,TcpExtTCPFastRetrans,TcpExtTCPTimeouts,TcpExtTCPLostRetransmit"
KEEP="$KEEP,TcpExtTCPSACKReorder,TcpExtTCPDSACKRecv,TcpExtTCPSpuriousRtxHostQueues"
KEEP="$KEEP,TcpExtTCPHystartTrainDetect,TcpExtTCPHystartTrainCwnd,TcpExtTCPHystartDelayDetect"
KEEP="$KEEP,TcpExtTCPHystartDelayCwnd"
KEEP_S="TcpInSegs,TcpOutSegs,TcpExtTCPOFOQueue,TcpExtTCPDSACKOldSent,TcpExtTCPSACKReorder"
SYSCTLS="ipv4/tcp_congestion_control ipv4/tcp_slow_start_after_idle ipv4/tcp_no_metrics_save
ipv4/tcp_sack ipv4/tcp_timestamps ipv4/tcp_recovery ipv4/tcp_pacing_ss_ratio
ipv4/tcp_pacing_ca_ratio ipv4/tcp_limit_output_bytes ipv4/tcp_wmem ipv4/tcp_rmem
ipv4/tcp_available_congestion_control"

# one segment per packet: the capture and the bottleneck see the segments TCP counts, and a
# retransmission is one segment (tcpevents, the capture and TcpRetransSegs count alike)
ip link set dev "$TL_CLIENT_IF" gso_max_segs 1 || tl_die "cannot set gso_max_segs on $TL_CLIENT_IF"
# no cached ssthresh or RTT from an earlier part's connection to the same address
sysctl -qw net.ipv4.tcp_no_metrics_save=1 || tl_die "cannot set net.ipv4.tcp_no_metrics_save"

# the bottleneck, in the server's namespace (a namespace's ifb goes with it)
tl_in server ip link add "$IFB" type ifb || tl_die "cannot create an ifb device (CONFIG_IFB)"
tl_in server ip link set dev "$IFB" up || tl_die "cannot bring $IFB up"
tl_in server tc qdisc add dev "$TL_SERVER_IF" handle ffff: ingress ||
	tl_die "cannot add the ingress qdisc on $TL_SERVER_IF"
tl_in server tc filter add dev "$TL_SERVER_IF" parent ffff: protocol ip u32 match u32 0 0 \
	action mirred egress redirect dev "$IFB" ||
	tl_die "cannot redirect $TL_SERVER_IF's input to $IFB (cls_u32, act_mirred)"
tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "rate_mbit=$RATE queue_kib=$QUEUE burst=$BURST bytes=$BYTES half=$HALF idle_ms=$IDLE_MS" \
	> "$RAW/params.txt"

# part NAME PORT CC SSAI [IDLE]: one connection with congestion control CC and
# tcp_slow_start_after_idle=SSAI in the client's namespace; with IDLE, two halves and a pause
part() {
	_p=$1 _port=$2 _cc=$3 _ssai=$4 _idle=${5:-}
	sysctl -qw "net.ipv4.tcp_slow_start_after_idle=$_ssai" ||
		tl_die "cannot set net.ipv4.tcp_slow_start_after_idle"
	tl_sysctls "$SYSCTLS" > "$RAW/$_p-sysctls.txt"
	# a fresh tbf, its counters from zero
	tl_in server tc qdisc del dev "$IFB" root 2> /dev/null || true
	tl_in server tc qdisc add dev "$IFB" root tbf rate "${RATE}mbit" burst "$BURST" \
		limit "${QUEUE}k" || tl_die "cannot put tbf on $IFB"
	tl_bg "$RAW/$_p-recv.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/stream_recv" -a "$TL_SERVER_ADDR" -p "$_port"
	_recv=$TL_LAST
	tl_wait_line "$_recv" "$RAW/$_p-recv.txt" '^ready ' 5
	tl_part_begin "$_p" "$_port"
	if [ -n "$_idle" ]; then
		tl_log "$_p: $_cc, two sends of $HALF bytes, $_idle ms idle between;" \
			"tcp_slow_start_after_idle=$_ssai"
		tl_bg "$RAW/$_p-send.txt" "$TL_BIN/stream_send" -a "$TL_SERVER_ADDR" -p "$_port" \
			-n "$HALF" -C "$_cc" -i "$_idle"
		_send=$TL_LAST
		tl_wait_line "$_send" "$RAW/$_p-send.txt" '^idle_start ' 60
		# the cwnd while idle, as ss reads it (sock_diag's tcp_info)
		ss -tin "dport = :$_port" > "$RAW/$_p-ss-idle.txt" || tl_die "ss failed"
	else
		tl_log "$_p: $_cc, one send of $BYTES bytes through tbf ${RATE}mbit limit ${QUEUE}k"
		tl_bg "$RAW/$_p-send.txt" "$TL_BIN/stream_send" -a "$TL_SERVER_ADDR" -p "$_port" \
			-n "$BYTES" -C "$_cc"
		_send=$TL_LAST
	fi
	tl_wait_exit "$_send" 90
	tl_wait_exit "$_recv" 10
	tl_not_interrupted "$RAW/$_p-send.txt"
	tl_not_interrupted "$RAW/$_p-recv.txt"
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP_S"
	tl_uncapture
	[ -z "$EV" ] || tl_stop "$EV"
	tl_in server tc -s qdisc show dev "$IFB" > "$RAW/$_p-tbf.txt" || tl_die "tc -s qdisc failed"
	tl_log "$_p: $(grep '^result=' "$RAW/$_p-send.txt")"
}

part cubic 21130 cubic 1
part bbr 21131 bbr 1
part idle 21132 cubic 1 "$IDLE_MS"
part idle-off 21133 cubic 0 "$IDLE_MS"
sysctl -qw net.ipv4.tcp_slow_start_after_idle=1 || true
tl_wire_record
