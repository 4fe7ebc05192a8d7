#!/bin/sh
# p09-pool-saves: what a connection pool saves.  REQUESTS request-reply exchanges (100 bytes
# out, 200 back) between pool_client (here) and pool_server (the server namespace, no idle
# timeout), in two parts, each on its own port:
#   new   each request on a new connection: connect, send, read the reply, close (the client
#         closes first, so each connection leaves a TIME-WAIT socket on the client's side)
#   kept  all the requests on one kept connection, closed after the last reply
# and then slow start after idle, on a kept connection: a burst of BURST bytes (one send(); the
# server reads it whole, then replies), IDLE_MS idle (longer than the RTO), the same burst;
# the client's congestion control cubic (TCP_CONGESTION: an algorithm with its own
# cong_control, bbr, is never restarted; the namespace's default is the host's), and
#   idle      net.ipv4.tcp_slow_start_after_idle=1 (the default) in the client's namespace
#   idle-off  the same with 0
# pool_client prints tcp_info's cwnd after the first burst, at the end of the idle time and
# after the second; the capture shows the first flight after the idle time.
# Each part has its capture (the client's end of the veth), both sides' counters
# (TcpActiveOpens, TcpPassiveOpens, segments), and afterwards the client namespace's TIME-WAIT
# sockets to the port, as sockwatch reads them (sock_diag) and, where ss is, as ss reads them;
# where tcpdump is, its own count of the SYNs in the part's .pcap.  The client times each
# request with CLOCK_MONOTONIC: a time measured on this machine and on the wire's veth.
. "$(dirname "$0")/../lib/collect.sh"
tl_knob_set REQUESTS requests "${TL_KNOB_REQUESTS:-20}" 2 100
tl_knob_set IDLE_MS idle_ms "${TL_KNOB_IDLE_MS:-1000}" 300 3000
tl_wire_init "$1"
PORT_NEW=21094 PORT_KEPT=21095 PORT_IDLE=21096 PORT_IDLE_OFF=21097
REQUEST=100 REPLY=200 BURST=65536
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpAttemptFails,TcpEstabResets,TcpInSegs,TcpOutSegs"
KEEP="$KEEP,TcpRetransSegs,TcpCurrEstab,TcpExtTW"
SYSCTLS="ipv4/ip_local_port_range ipv4/tcp_tw_reuse ipv4/tcp_max_tw_buckets ipv4/tcp_timestamps
ipv4/tcp_congestion_control ipv4/tcp_slow_start_after_idle ipv4/tcp_no_metrics_save"

# begin NAME PORT WHAT SERVER-OPTION...: pool_server with those options in the server's
# namespace (polled until ready), both sides' counters, the capture; then WHAT logged
begin() {
	_p=$1 _port=$2 _what=$3
	shift 3
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/pool_server" -a "$TL_SERVER_ADDR" -p "$_port" "$@"
	SERVER=$TL_LAST
	tl_wait_line "$SERVER" "$RAW/$_p-server.txt" '^ready ' 5
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	tl_log "$_p: $_what"
}

# part NAME PORT MODE CONNS: the server for CONNS connections, the client's REQUESTS requests,
# both ended by themselves; then the TIME-WAIT sockets the part left in this namespace
part() {
	begin "$1" "$2" "$REQUESTS requests, -m $3" -n "$4" -q "$REQUEST" -r "$REPLY"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/pool_client" -a "$TL_SERVER_ADDR" -p "$_port" \
		-q "$REQUEST" -r "$REPLY" -m "$3" -n "$REQUESTS"
	CLIENT=$TL_LAST
	tl_wait_exit "$CLIENT" 30
	grep -q '^exit reason=done ' "$RAW/$_p-client.txt" || tl_die "$_p: the client did not end done"
	# the server closes each connection after the client's FIN: its exit means the last FIN
	# is sent; the client's socket is in TIME-WAIT once that FIN came (polled, below)
	tl_wait_exit "$SERVER" 10
	_want=$4
	[ "$_p" != kept ] || _want=1
	_n=0
	while :; do
		"$TL_BIN/sockwatch" -1 -4 -s time-wait -p "$_port" > "$RAW/$_p-timewait.txt" ||
			tl_die "sockwatch failed"
		[ "$(grep -c ' state=TIME-WAIT ' "$RAW/$_p-timewait.txt")" -lt "$_want" ] || break
		_n=$((_n + 1))
		[ "$_n" -lt 100 ] || break	# 1 s: the report says what was there
		sleep 0.01
	done
	if command -v ss >/dev/null 2>&1; then
		# the independent view of the same sockets
		ss -tan state time-wait "( dport = :$_port )" > "$RAW/$_p-ss.txt" ||
			tl_die "ss failed"
	fi
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
	if command -v tcpdump >/dev/null 2>&1; then
		# an independent count of the handshakes: SYNs without ACK in the part's .pcap.
		# As root of a user namespace tcpdump cannot drop to its own user, and ends: the
		# count is then left out (the report prints it only where there is one)
		tcpdump -n -r "$RAW/$_p-capture.pcap" \
			'tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn' > "$RAW/$_p-tcpdump-syns.txt" \
			2> "$RAW/tcpdump.err" ||
			{ tl_log "$_p: no tcpdump count: $(tail -n 1 "$RAW/tcpdump.err")"
			  rm -f "$RAW/$_p-tcpdump-syns.txt"; }
		rm -f "$RAW/tcpdump.err"
	fi
	tl_log "$_p: $(grep -c '^request ' "$RAW/$_p-client.txt") requests," \
		"$(grep -c ' state=TIME-WAIT ' "$RAW/$_p-timewait.txt") TIME-WAIT sockets left"
}

# idle_part NAME PORT SSAI: one kept connection, burst, idle, burst, with
# tcp_slow_start_after_idle=SSAI in this (the client's) namespace
idle_part() {
	sysctl -qw "net.ipv4.tcp_slow_start_after_idle=$3" ||
		tl_die "cannot set net.ipv4.tcp_slow_start_after_idle"
	tl_sysctls "$SYSCTLS" > "$RAW/$1-sysctls.txt"
	begin "$1" "$2" "$BURST bytes, $IDLE_MS ms idle, $BURST bytes; tcp_slow_start_after_idle=$3" \
		-q "$BURST" -w -r "$REPLY"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/pool_client" -a "$TL_SERVER_ADDR" -p "$_port" \
		-q "$BURST" -r "$REPLY" -m idle -i "$IDLE_MS" -c cubic
	CLIENT=$TL_LAST
	tl_wait_exit "$CLIENT" $((IDLE_MS / 1000 + 30))
	grep -q '^exit reason=done ' "$RAW/$_p-client.txt" || tl_die "$_p: the client did not end done"
	tl_wait_exit "$SERVER" 10
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
	tl_log "$_p: $(grep '^cc ' "$RAW/$_p-client.txt" | cut -d' ' -f2,4 | tr '\n' ' ')"
}

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "requests=$REQUESTS request=$REQUEST reply=$REPLY burst=$BURST idle_ms=$IDLE_MS" \
	> "$RAW/params.txt"
part new "$PORT_NEW" new "$REQUESTS"
part kept "$PORT_KEPT" kept 1
# the idle parts: no cached metrics from the parts before (the same address)
sysctl -qw net.ipv4.tcp_no_metrics_save=1 || tl_die "cannot set net.ipv4.tcp_no_metrics_save"
idle_part idle "$PORT_IDLE" 1
idle_part idle-off "$PORT_IDLE_OFF" 0
tl_wire_record
