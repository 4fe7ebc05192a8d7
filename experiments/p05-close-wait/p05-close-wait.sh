#!/bin/sh
# p05-close-wait: a server that reads EOF and never closes, across the wire, at the default
# tcp_fin_timeout (60 s; the knob fin_timeout, 4..60, sets it in the client's namespace).  Two
# connections at once, each to its own peer server in the server namespace
# (`-s drain,hold,close`: it reads to EOF, then holds the socket in CLOSE-WAIT):
#   orphan  the client close()s: its socket is an orphan; once the server's ACK of its FIN comes
#           it is FIN-WAIT-2, kept by the kernel's FIN_WAIT2 timer alone, and reaped after
#           tcp_fin_timeout
#   held    the client calls shutdown(SHUT_WR) and never close(): FIN-WAIT-2 held by the process
# sockwatch watches both sides, each in its namespace; the client's end of the veth is
# captured.  The script waits (a progress line every PROGRESS_S s) until sockwatch saw the
# orphan go, then takes sockwatch -1 and ss -tano snapshots of both sides: the two CLOSE-WAIT
# sockets and the held FIN-WAIT-2 are still there.  Then the servers and the held client are
# released (SIGUSR1) and close.
. "$(dirname "$0")/../lib/collect.sh"
# its facts are timers of a second or more: in a QEMU guest the watchers sample every 10 ms
# shellcheck disable=SC2034 # read by tl_init (TL_WATCH_US)
TL_GUEST_WATCH_US=10000

# the knob (experiments/units): checked here too, for a run without run.sh.  At its default the
# unit leaves the namespace's tcp_fin_timeout as the kernel made it (60 s: what it always did)
tl_knob_set FIN_KNOB fin_timeout "${TL_KNOB_FIN_TIMEOUT:-60}" 4 60

tl_close_init "$1"
ORPHAN=21060
HELD=21061
PROGRESS_S=5

# snapshot NAME: what each side holds now: sockwatch -1 and, where there is one, ss -tano
# (an independent reader of the same sock_diag answers), and the client's /proc/net/sockstat
snapshot() {
	# shellcheck disable=SC2086 # the state options, split on purpose
	"$TL_BIN/sockwatch" -1 -4 $CLIENT_STATES > "$RAW/$1-client-snap.txt" ||
		tl_die "sockwatch -1 failed"
	# shellcheck disable=SC2086
	tl_srv "$TL_BIN/sockwatch" -1 -4 $SERVER_STATES > "$RAW/$1-server-snap.txt" ||
		tl_die "sockwatch -1 (server side) failed"
	cat /proc/net/sockstat > "$RAW/$1-sockstat.txt" || tl_die "cannot read /proc/net/sockstat"
	if command -v ss >/dev/null 2>&1; then
		ss -tano > "$RAW/$1-ss-client.txt" 2>&1 || tl_die "ss failed"
		tl_srv ss -tano > "$RAW/$1-ss-server.txt" 2>&1 || tl_die "ss (server side) failed"
	fi
}

# wait_gone PORT BOUND_S: wait (probes/waitfor, PROGRESS_S s at a time: one program per
# look, not a grep and a sleep every 0.1 s; the time of the event is sockwatch's own) until the
# client's sockwatch saw the socket to PORT go; a progress line every PROGRESS_S s for the
# person waiting.  The socket is the one sockwatch saw in FIN-WAIT-2, by its cookie: a gone line
# by port alone also matched a socket caught while it connected (state UNCONN, local port 0,
# gone 1 ms later), which ended a make test run's wait 60 s early.
wait_gone() {
	_el=0
	_cookie=$(sed -n "s/.* state=FIN-WAIT-2 .*peer=$TL_SERVER_ADDR:$1 .* cookie=\([0-9][0-9]*\)\$/\1/p" \
		"$RAW/sockwatch.txt" | head -n 1)
	[ -n "$_cookie" ] || tl_die "sockwatch gave no cookie for the FIN-WAIT-2 socket to port $1"
	while :; do
		"$TL_BIN/waitfor" -p "$TL_WATCH" -f "$RAW/sockwatch.txt" \
			-e "event=gone .* cookie=$_cookie\$" -i 100 -t $((PROGRESS_S * 1000))
		case $? in
		0) return 0 ;;
		1) tl_die "sockwatch ended before the orphan was gone" ;;
		3) ;;
		*) tl_die "waitfor failed waiting for the orphan to go" ;;
		esac
		_el=$((_el + PROGRESS_S))
		[ "$_el" -lt "$2" ] || tl_die "the orphan to port $1 still there after $2 s"
		tl_log "orphan: FIN-WAIT-2 still there ${_el} s into the wait" \
			"(tcp_fin_timeout=$FIN s); the CLOSE-WAIT sockets and the held FIN-WAIT-2 wait on"
	done
}

# the client's namespace only (the server's keeps its default; the report shows both)
[ "$(cat /proc/sys/net/ipv4/tcp_fin_timeout)" = "$FIN_KNOB" ] ||
	sysctl -qw net.ipv4.tcp_fin_timeout="$FIN_KNOB" || tl_die "cannot set tcp_fin_timeout"
tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt" || tl_die "reading the sysctls failed"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt" || tl_die "reading the server's sysctls failed"
FIN=$(cat /proc/sys/net/ipv4/tcp_fin_timeout) || tl_die "cannot read tcp_fin_timeout"
echo "orphan_port=$ORPHAN held_port=$HELD progress_s=$PROGRESS_S" > "$RAW/params.txt"

# the servers: read to EOF, then hold the socket (CLOSE-WAIT) until SIGUSR1, then close
tl_srv_holder "$RAW/orphan-server.txt" "$ORPHAN"
SRV_ORPHAN=$TL_LAST
tl_srv_holder "$RAW/held-server.txt" "$HELD"
SRV_HELD=$TL_LAST
tl_both_counters_before ""
tl_capture orphan-capture "$TL_CLIENT_IF" "$ORPHAN"
CAP_ORPHAN=$TL_CAPTURE
tl_capture held-capture "$TL_CLIENT_IF" "$HELD"
CAP_HELD=$TL_CAPTURE
# shellcheck disable=SC2086
tl_bg "$RAW/server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
	"$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 $SERVER_STATES
SWATCH=$TL_LAST
tl_wait_line "$SWATCH" "$RAW/server-sockwatch.txt" '^ready ' 5
# shellcheck disable=SC2086
tl_watch "$RAW/sockwatch.txt" -4 $CLIENT_STATES

tl_log "orphan: connect to $TL_SERVER_ADDR:$ORPHAN, then close() at once"
tl_bg "$RAW/orphan-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p "$ORPHAN" -s close
tl_wait_exit "$TL_LAST" 10
tl_log "held: connect to $TL_SERVER_ADDR:$HELD, shutdown(SHUT_WR), then hold (no close())"
tl_bg "$RAW/held-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p "$HELD" \
	-s shutdown-wr,hold,close
HELD_CLIENT=$TL_LAST
tl_wait_line "$HELD_CLIENT" "$RAW/held-client.txt" '^hold ' 10
# both servers read EOF (CLOSE-WAIT), both clients are FIN-WAIT-2
tl_wait_line "$SRV_ORPHAN" "$RAW/orphan-server.txt" '^hold ' 10
tl_wait_line "$SRV_HELD" "$RAW/held-server.txt" '^hold ' 10
for _port in $ORPHAN $HELD; do
	tl_wait_line "$TL_WATCH" "$RAW/sockwatch.txt" "state=FIN-WAIT-2 .*peer=$TL_SERVER_ADDR:$_port " 10
done
snapshot start
tl_log "both servers in CLOSE-WAIT; waiting for the orphan's FIN_WAIT2 timer (tcp_fin_timeout=$FIN s)"
wait_gone "$ORPHAN" $((FIN * 2 + 30))
snapshot after
tl_log "orphan gone; $(grep -c 'state=CLOSE-WAIT' "$RAW/after-server-snap.txt") CLOSE-WAIT" \
	"socket(s) still on the server side"
tl_both_counters_after "" "$KEEP" "$KEEP_S"

# the end: the watchers and captures stop first (what follows is the release, not the lesson)
tl_unwatch stop
tl_stop "$SWATCH"
tail -n 1 "$RAW/server-sockwatch.txt" | grep -q '^end ' ||
	tl_die "the server's sockwatch output has no end line"
tl_uncapture "$CAP_ORPHAN" "$RAW/orphan-capture.txt"
tl_uncapture "$CAP_HELD" "$RAW/held-capture.txt"
tl_wire_record
for _pid in "$SRV_ORPHAN" "$SRV_HELD" "$HELD_CLIENT"; do
	kill -USR1 "$_pid" || tl_die "cannot signal $(tl_name "$_pid")"
done
for _pid in "$SRV_ORPHAN" "$SRV_HELD" "$HELD_CLIENT"; do
	tl_wait_exit "$_pid" 10
done
