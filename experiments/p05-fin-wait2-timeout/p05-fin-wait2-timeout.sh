#!/bin/sh
# p05-fin-wait2-timeout: how long an orphaned FIN-WAIT-2 socket lives, across the wire.
# tcp_fin_timeout is set to FIN s in the client's namespace only; each part is one connection
# to a peer server in the server namespace that reads to EOF and holds its socket (CLOSE-WAIT,
# `-s drain,hold,close`), so the client's FIN is acknowledged and no FIN comes back:
#   sysctl      linger2:0 (the namespace's tcp_fin_timeout, read back), close(): reaped after FIN s
#   linger2     linger2:LINGER2 (6, longer than FIN by default), close(): the socket's value
#               wins, shorter or longer than FIN
#   floor       a route with rto_min FLOOR_RTO_MIN_MS to the server, linger2:1, close():
#               tcp_fin_time() never goes below 3.5 RTO
#   abort       linger2:200 (read back: clamped at TCP_FIN_TIMEOUT_MAX), then linger2:-1, close()
#               (once sockwatch saw it ESTAB): no FIN-WAIT-2 at all, the ACK of the FIN is
#               answered by a RST (tcp_rcv_state_process, TCPAbortOnData)
#   abort-held  linger2:-1, shutdown(SHUT_WR), then close() once sockwatch saw FIN-WAIT-2:
#               __tcp_close() sends the RST (TCPAbortOnLinger)
# Each part: both sides' counters, sockwatch on both sides, the client's end of the veth
# captured.  The times come from sockwatch, the waits poll its output.  FIN (3) and LINGER2 (6)
# are the knobs fin_timeout and linger2 (experiments/units).
. "$(dirname "$0")/../lib/collect.sh"
# its facts are timers of a second or more: in a QEMU guest the watchers sample every 10 ms
# shellcheck disable=SC2034 # read by tl_init (TL_WATCH_US)
TL_GUEST_WATCH_US=10000

# the knobs (experiments/units): checked here too, for a run without run.sh
tl_knob_set FIN fin_timeout "${TL_KNOB_FIN_TIMEOUT:-3}" 1 10
tl_knob_set LINGER2 linger2 "${TL_KNOB_LINGER2:-6}" 1 30

tl_close_init "$1"
FLOOR_RTO_MIN_MS=1000

# wait_gone FILE PORT BOUND_S: wait (probes/waitfor: one program, not a grep and a sleep every
# 0.1 s; the event's time is sockwatch's own) until a sockwatch output shows the socket to or
# from PORT gone
wait_gone() {
	"$TL_BIN/waitfor" -f "$1" -e "event=gone .*:$2 " -i 100 -t $(($3 * 1000))
	case $? in
	0) ;;
	3) tl_die "the socket of port $2 still there after $3 s ($1)" ;;
	*) tl_die "waitfor failed waiting for the socket of port $2 to go ($1)" ;;
	esac
}

# srv_snap FILE PORT: sockwatch -1 of the server's sockets of PORT (none is an empty file)
srv_snap() {
	# shellcheck disable=SC2086 # the state options, split on purpose
	tl_srv "$TL_BIN/sockwatch" -1 -4 -P "$2" $SERVER_STATES > "$1" ||
		tl_die "sockwatch -1 (server side) failed"
}

# srv_gone NAME PORT BOUND_S: poll the server's sockets of PORT until there is none
srv_gone() {
	_left=$(($3 * 10))
	while srv_snap "$RAW/$1-server-after.txt" "$2" && grep -q '^t_s=' "$RAW/$1-server-after.txt"; do
		_left=$((_left - 1))
		[ "$_left" -gt 0 ] || tl_die "the server's socket of port $2 still there after $3 s"
		sleep 0.1
	done
}

# part NAME PORT CLIENT_STEPS: one connection, raw files NAME-*; a client whose steps hold is
# released (SIGUSR1) once sockwatch saw its socket in RELEASE_AT (a state)
part() {
	_p=$1 _port=$2 _steps=$3
	tl_srv_holder "$RAW/$_p-server.txt" "$_port"
	_srv=$TL_LAST
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	# shellcheck disable=SC2086 # the state options, split on purpose
	tl_bg "$RAW/$_p-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -P "$_port" $SERVER_STATES
	_sw=$TL_LAST
	tl_wait_line "$_sw" "$RAW/$_p-server-sockwatch.txt" '^ready ' 5
	# shellcheck disable=SC2086
	tl_watch "$RAW/$_p-sockwatch.txt" -4 -p "$_port" $CLIENT_STATES
	tl_log "$_p: peer -s $_steps to $TL_SERVER_ADDR:$_port"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p "$_port" \
		-s "$_steps"
	_cl=$TL_LAST
	case $_steps in
	*hold*)
		tl_wait_line "$_cl" "$RAW/$_p-client.txt" '^hold ' 10
		tl_wait_line "$TL_WATCH" "$RAW/$_p-sockwatch.txt" "state=$RELEASE_AT " 10
		tl_log "$_p: sockwatch saw $RELEASE_AT; the client closes (SIGUSR1)"
		kill -USR1 "$_cl" || tl_die "cannot signal the client"
		;;
	esac
	tl_wait_exit "$_cl" 10
	tl_wait_line "$_srv" "$RAW/$_p-server.txt" '^hold ' 10
	wait_gone "$RAW/$_p-sockwatch.txt" "$_port" $((LINGER2 + FIN + 15))
	tl_log "$_p: $(grep 'event=gone' "$RAW/$_p-sockwatch.txt" | tail -n 1 | cut -d' ' -f1,4,5)"
	# the server's socket now: CLOSE-WAIT still, or (linger2 -1) none, the RST having ended it;
	# a snapshot, since sockwatch may never have seen a socket that lived less than a sample
	case $_p in
	abort*) srv_gone "$_p" "$_port" 10 ;;
	*) srv_snap "$RAW/$_p-server-after.txt" "$_port" ;;
	esac
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP_S"
	tl_unwatch stop
	tl_stop "$_sw"
	tail -n 1 "$RAW/$_p-server-sockwatch.txt" | grep -q '^end ' ||
		tl_die "the server's sockwatch output has no end line"
	tl_uncapture
	kill -USR1 "$_srv" || tl_die "cannot signal the server"
	tl_wait_exit "$_srv" 10
}

# the namespace's defaults, then the unit's tcp_fin_timeout (this namespace's only)
tl_sysctls "$SYSCTLS" > "$RAW/default-sysctls.txt" || tl_die "reading the sysctls failed"
sysctl -qw net.ipv4.tcp_fin_timeout="$FIN" || tl_die "cannot set tcp_fin_timeout"
tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt" || tl_die "reading the sysctls failed"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt" || tl_die "reading the server's sysctls failed"
echo "fin_timeout=$FIN linger2=$LINGER2 floor_rto_min_ms=$FLOOR_RTO_MIN_MS" > "$RAW/params.txt"

# the parts hold the connection until sockwatch saw it ESTAB (its rto_ms: tcp_fin_time()'s floor
# is 3.5 RTO; and a socket seen is one whose end sockwatch sees), then close
RELEASE_AT=ESTAB
part sysctl 21070 linger2:0,hold,close
part linger2 21071 "linger2:$LINGER2,hold,close"
# the floor: every connection to the server's address gets RTO >= rto_min (RTAX_RTO_MIN, which
# ip(8) always locks), so 3.5 RTO is above the 1 s asked for
ip route add "$TL_SERVER_ADDR/32" dev "$TL_CLIENT_IF" rto_min "${FLOOR_RTO_MIN_MS}ms" ||
	tl_die "cannot add the rto_min route"
ip route show > "$RAW/floor-routes.txt" || tl_die "ip route show failed"
part floor 21072 linger2:1,hold,close
ip route del "$TL_SERVER_ADDR/32" dev "$TL_CLIENT_IF" || tl_die "cannot remove the rto_min route"
part abort 21073 linger2:200,linger2:-1,hold,close
RELEASE_AT=FIN-WAIT-2
part abort-held 21074 linger2:-1,shutdown-wr,hold,close
tl_wire_record
