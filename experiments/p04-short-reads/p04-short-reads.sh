#!/bin/sh
# p04-short-reads: a sender writes 1 MiB in one send(); a receiver reads it with recv(64 KiB)
# and records what each call returned.  Three parts, each on two paths:
#   plain     recv(64 KiB)
#   waitall   recv(64 KiB, MSG_WAITALL)
#   rcvlowat  recv(64 KiB) after setsockopt(SO_RCVLOWAT, 32 KiB)
# Paths: loopback (both ends in the client namespace, on its own lo: MTU 65536) and the wire
# (the receiver in the server namespace, across the veth pair: MTU TL_MTU, 1500 by default).
# Each connection is captured: lo for loopback, both ends of the veth for the wire.  At the end
# of each stream the receiver holds the connection (-H) while sockwatch -1 reads both sockets
# through sock_diag (tcp_info, skmem): a second reader of what the fixtures' TCP_INFO says.
# The sysctls and links the report relates the returns to are recorded in raw/.
. "$(dirname "$0")/../lib/collect.sh"
tl_wire_init "$1"
BYTES=1048576
LEN=65536
LOWAT=32768
KEEP="TcpOutSegs,TcpInSegs,TcpRetransSegs,TcpExtTCPOrigDataSent,TcpExtTCPRcvCoalesce,TcpExtTCPWantZeroWindowAdv"
SYSCTLS="net/ipv4/tcp_rmem net/ipv4/tcp_wmem net/ipv4/tcp_moderate_rcvbuf net/ipv4/tcp_adv_win_scale
net/ipv4/tcp_window_scaling net/ipv4/tcp_timestamps net/ipv4/tcp_autocorking
net/ipv4/tcp_notsent_lowat net/core/rmem_default net/core/rmem_max"

# sysctls SIDE: each sysctl above as name=value, read in SIDE's namespace (absent when this
# kernel has none).
sysctls() {
	for _s in $SYSCTLS; do
		_v=$(tl_in "$1" cat "/proc/sys/$_s" 2>/dev/null) || _v=absent
		echo "$(echo "$_s" | tr / .)=$(echo "$_v" | tr '\t' ' ')"
	done
}
sysctls client > "$RAW/sysctls.txt" || tl_die "reading the sysctls failed"
sysctls server > "$RAW/server-sysctls.txt" || tl_die "reading the server's sysctls failed"
ip -d link show dev lo > "$RAW/lo-link.txt" || tl_die "ip -d link show dev lo failed"
echo "bytes=$BYTES len=$LEN lowat=$LOWAT" > "$RAW/constants.txt"

# part PATH NAME PORT RECV_ARGS...: one connection; raw files PATH-NAME-*.
part() {
	_path=$1 _name=$2 _port=$3
	shift 3
	_p=$_path-$_name
	if [ "$_path" = lo ]; then
		_addr=127.0.0.1
		tl_bg "$RAW/$_p-recv.txt" "$TL_BIN/stream_recv" -a "$_addr" -p "$_port" -l "$LEN" -H "$@"
	else
		_addr=$TL_SERVER_ADDR
		tl_bg "$RAW/$_p-recv.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
			"$TL_BIN/stream_recv" -a "$_addr" -p "$_port" -l "$LEN" -H "$@"
	fi
	_recv=$TL_LAST
	tl_wait_line "$_recv" "$RAW/$_p-recv.txt" '^ready ' 5
	if [ "$_path" = lo ]; then
		"$TL_BIN/counters" > "$RAW/$_p-counters-before.txt" || tl_die "counters failed"
		tl_capture "$_p-capture" lo "$_port"
	else
		tl_both_counters_before "$_p-"
		tl_capture -s "$_p-server-capture" "$TL_SERVER_IF" "$_port"
		_scap=$TL_CAPTURE _scout=$TL_CAPTURE_OUT
		tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	fi
	tl_log "$_p: send() of $BYTES bytes to $_addr:$_port, recv($LEN) $*"
	tl_bg "$RAW/$_p-send.txt" "$TL_BIN/stream_send" -a "$_addr" -p "$_port" -n "$BYTES"
	_send=$TL_LAST
	tl_wait_line "$_recv" "$RAW/$_p-recv.txt" '^holding' 10
	# the sender's socket (FIN-WAIT-1 or -2, to the port) and the receiver's (CLOSE-WAIT, from it)
	"$TL_BIN/sockwatch" -1 -4 -s fin-wait-1 -s fin-wait-2 -p "$_port" > "$RAW/$_p-sockwatch-send.txt" ||
		tl_die "sockwatch failed"
	tl_in "$([ "$_path" = lo ] && echo client || echo server)" "$TL_BIN/sockwatch" -1 -4 \
		-s close-wait -P "$_port" > "$RAW/$_p-sockwatch-recv.txt" || tl_die "sockwatch failed"
	tl_stop "$_recv"
	tl_wait_exit "$_send" 10
	tl_not_interrupted "$RAW/$_p-send.txt"
	tl_not_interrupted "$RAW/$_p-recv.txt"
	if [ "$_path" = lo ]; then
		"$TL_BIN/counters" -d "$RAW/$_p-counters-before.txt" -k "$KEEP" \
			> "$RAW/$_p-counters-delta.txt" || tl_die "counters failed"
	else
		tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	fi
	tl_uncapture
	[ "$_path" = lo ] || tl_uncapture "$_scap" "$_scout"
	tl_log "$_p: $(grep '^result=' "$RAW/$_p-recv.txt")"
}

part lo plain 21041
part lo waitall 21042 -w
part lo rcvlowat 21043 -L "$LOWAT"
part wire plain 21044
part wire waitall 21045 -w
part wire rcvlowat 21046 -L "$LOWAT"
tl_wire_record
