#!/bin/sh
# p06-time-wait: after an orderly close, the side that closed first keeps its socket in
# TIME-WAIT for TCP_TIMEWAIT_LEN (60 s: a constant, no sysctl), and the other side's socket
# goes as soon as its own FIN is acknowledged.  Two cases side by side on the wire, one port
# each, so that the minute is spent once:
#   client-closes  the client sends 100 B and closes; the server drains to EOF, then closes:
#                  the client's socket keeps TIME-WAIT, on its ephemeral port
#   server-closes  the server sends 100 B and closes; the client drains to EOF, then closes:
#                  the server's socket keeps TIME-WAIT, on the listening port
# The closer holds (peer's hold step) until both watchers have seen the connection: the other
# side's socket lives only a few ms after the close, less than a late sample on a loaded
# machine, and a watcher that never saw its socket would never end (-e).
# The actor is peer (fixtures/peer.c) on both sides.  Every socket is watched by sockwatch in
# its own namespace until it is gone (-e); each case's packets are captured on the client's
# end.  Once both TIME-WAIT sockets are there: each side's counters, /proc/net/sockstat and
# `ss -tano state time-wait` (an independent view); then, while they wait, a snapshot of both
# (sockwatch -1) every PROGRESS_S s, on stderr for a person and in raw/ for the report.
. "$(dirname "$0")/../lib/collect.sh"
# its facts are timers of a second or more: in a QEMU guest the watchers sample every 10 ms
# shellcheck disable=SC2034 # read by tl_init (TL_WATCH_US)
TL_GUEST_WATCH_US=10000
# and, once every socket a watcher sees is in TIME-WAIT (which only its timer ends here: the
# peer sends nothing more), they sleep until one interval before the timer is due, a second at
# most (sockwatch -T; docs/kernel-matrix.md, "Sampling in a guest")
# shellcheck disable=SC2034 # read by tl_init (TL_WATCH_LEAD)
TL_GUEST_TIMER_LED_MS=1000
tl_wire_init "$1"
PROGRESS_S=5
# TCP_TIMEWAIT_LEN (60 s) + the timer wheel's granularity for it (2 s at HZ 250, 5.1 s at
# HZ 100) + room for a slow guest
WAIT_S=80
KEEP="TcpExtTW,TcpExtTWKilled,TcpExtTWRecycled,TcpExtTCPTimeWaitOverflow,TcpActiveOpens,\
TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpExtTCPAbortOnClose"
# what TIME-WAIT depends on (docs/p06-time-wait.md says how each one does); none sets its length
SYSCTLS="ipv4/tcp_max_tw_buckets ipv4/tcp_tw_reuse ipv4/tcp_tw_reuse_delay ipv4/tcp_timestamps
ipv4/tcp_fin_timeout ipv4/tcp_rfc1337 ipv4/tcp_tw_recycle ipv4/ip_local_port_range
ipv4/tcp_orphan_retries"

# sockstat NAME: /proc/net/sockstat as each namespace shows it (thread-self: this process's
# namespace, not the thread-group leader's): raw/sockstat-NAME.txt, server-sockstat-NAME.txt
sockstat() {
	cat /proc/thread-self/net/sockstat > "$RAW/sockstat-$1.txt" || tl_die "cannot read sockstat"
	tl_srv cat /proc/thread-self/net/sockstat > "$RAW/server-sockstat-$1.txt" ||
		tl_die "cannot read the server's sockstat"
}

# snap: each TIME-WAIT socket as the kernel shows it now (nothing once it is gone), appended
snap() {
	"$TL_BIN/sockwatch" -1 -4 -s time-wait -p 21080 >> "$RAW/countdown.txt" ||
		tl_die "sockwatch -1 failed"
	tl_srv "$TL_BIN/sockwatch" -1 -4 -s time-wait -P 21081 >> "$RAW/server-countdown.txt" ||
		tl_die "sockwatch -1 (server side) failed"
}

# look FILE LINES: "timer N ms" when the snapshot just taken added a line to FILE (which had
# LINES lines before it), else "gone"
look() {
	[ "$(wc -l < "$1")" -gt "$2" ] || { echo gone; return; }
	_e=$(tail -n 1 "$1")
	_e=${_e#*expires_ms=}
	echo "timer ${_e%% *} ms"
}

# unwatch PID FILE: a sockwatch -e that ends by itself (within 5 s: its socket is gone by
# now), with its end line, its last event the socket's `gone`
unwatch() {
	tl_wait_exit "$1" 5
	tail -n 1 "$2" | grep -q '^end ' || tl_die "sockwatch output $2 has no end line"
	grep '^t_s=' "$2" | tail -n 1 | grep -q ' event=gone ' ||
		tl_die "$(basename "$2"): sockwatch ended before its socket was gone"
}

# the knob fin_timeout (experiments/units): tcp_fin_timeout in both namespaces, written only
# where it differs (60 in a fresh namespace), before the sysctls are recorded; TIME-WAIT's
# length is TCP_TIMEWAIT_LEN whatever it is
FIN_TIMEOUT=${TL_KNOB_FIN_TIMEOUT:-60}
[ "$(cat /proc/sys/net/ipv4/tcp_fin_timeout)" = "$FIN_TIMEOUT" ] ||
	sysctl -qw "net.ipv4.tcp_fin_timeout=$FIN_TIMEOUT" || tl_die "sysctl tcp_fin_timeout=$FIN_TIMEOUT failed"
[ "$(tl_srv cat /proc/sys/net/ipv4/tcp_fin_timeout)" = "$FIN_TIMEOUT" ] ||
	tl_srv sysctl -qw "net.ipv4.tcp_fin_timeout=$FIN_TIMEOUT" ||
	tl_die "sysctl tcp_fin_timeout=$FIN_TIMEOUT in the server's namespace failed"
tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt" || tl_die "reading the sysctls failed"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt" || tl_die "reading the server's sysctls failed"
echo "progress_s=$PROGRESS_S wait_s=$WAIT_S" > "$RAW/params.txt"

# ---- the servers, the probes, then both clients at once
tl_bg "$RAW/client-closes-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
	"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p 21080 -n 1 -s drain,close
SRV_CC=$TL_LAST
tl_bg "$RAW/server-closes-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
	"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p 21081 -n 1 -s send:100,hold,close
SRV_SC=$TL_LAST
tl_wait_line "$SRV_CC" "$RAW/client-closes-server.txt" '^ready ' 5
tl_wait_line "$SRV_SC" "$RAW/server-closes-server.txt" '^ready ' 5
tl_both_counters_before ""
sockstat before
tl_capture client-closes-capture "$TL_CLIENT_IF" 21080
CAP_CC=$TL_CAPTURE
tl_capture server-closes-capture "$TL_CLIENT_IF" 21081
CAP_SC=$TL_CAPTURE
tl_bg "$RAW/client-closes-sockwatch.txt" "$TL_BIN/sockwatch" -i "$TL_WATCH_US" $TL_WATCH_LEAD -4 -e -p 21080
SW_CC=$TL_LAST
tl_bg "$RAW/client-closes-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
	"$TL_BIN/sockwatch" -i "$TL_WATCH_US" $TL_WATCH_LEAD -4 -e -P 21080
SW_CC_S=$TL_LAST
tl_bg "$RAW/server-closes-sockwatch.txt" "$TL_BIN/sockwatch" -i "$TL_WATCH_US" $TL_WATCH_LEAD -4 -e -p 21081
SW_SC=$TL_LAST
tl_bg "$RAW/server-closes-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
	"$TL_BIN/sockwatch" -i "$TL_WATCH_US" $TL_WATCH_LEAD -4 -e -P 21081
SW_SC_S=$TL_LAST
for _w in "$SW_CC:client-closes-sockwatch" "$SW_CC_S:client-closes-server-sockwatch" \
	"$SW_SC:server-closes-sockwatch" "$SW_SC_S:server-closes-server-sockwatch"; do
	tl_wait_line "${_w%%:*}" "$RAW/${_w#*:}.txt" '^ready ' 5
done
tl_log "client-closes: the client sends 100 B and closes first (port 21080)"
tl_bg "$RAW/client-closes-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p 21080 \
	-s send:100,hold,close
CLI_CC=$TL_LAST
tl_log "server-closes: the server sends 100 B and closes first (port 21081)"
tl_bg "$RAW/server-closes-client.txt" "$TL_BIN/peer" -r client -a "$TL_SERVER_ADDR" -p 21081 \
	-s drain,close
CLI_SC=$TL_LAST
# both closers hold, and each connection's two sockets are seen: then the closers close
tl_wait_line "$CLI_CC" "$RAW/client-closes-client.txt" '^hold ' 10
tl_wait_line "$SRV_SC" "$RAW/server-closes-server.txt" '^hold ' 10
for _w in "$SW_CC:client-closes-sockwatch" "$SW_CC_S:client-closes-server-sockwatch" \
	"$SW_SC:server-closes-sockwatch" "$SW_SC_S:server-closes-server-sockwatch"; do
	tl_wait_line "${_w%%:*}" "$RAW/${_w#*:}.txt" ' state=ESTAB ' 10
done
kill -USR1 "$CLI_CC" || tl_die "cannot signal the client-closes client"
kill -USR1 "$SRV_SC" || tl_die "cannot signal the server-closes server"
tl_wait_exit "$CLI_CC" 15
tl_wait_exit "$CLI_SC" 15
tl_wait_exit "$SRV_CC" 15
tl_wait_exit "$SRV_SC" 15

# ---- both TIME-WAIT sockets are there: what each side shows of them
tl_wait_line "$SW_CC" "$RAW/client-closes-sockwatch.txt" ' state=TIME-WAIT ' 10
tl_wait_line "$SW_SC_S" "$RAW/server-closes-server-sockwatch.txt" ' state=TIME-WAIT ' 10
"$TL_BIN/counters" -d "$RAW/counters-before.txt" -k "$KEEP" > "$RAW/during-counters-delta.txt" ||
	tl_die "counters failed"
tl_srv "$TL_BIN/counters" -d "$RAW/server-counters-before.txt" -k "$KEEP" \
	> "$RAW/during-server-counters-delta.txt" || tl_die "counters (server side) failed"
sockstat during
cat /proc/loadavg > "$RAW/loadavg.txt" || tl_die "cannot read /proc/loadavg"
snap
if command -v ss >/dev/null 2>&1; then
	ss -tano state time-wait > "$RAW/ss.txt" 2>&1 || tl_die "ss failed"
	tl_srv ss -tano state time-wait > "$RAW/server-ss.txt" 2>&1 || tl_die "ss (server side) failed"
	snap	# ss's look lies between this snapshot and the one before
fi
unwatch "$SW_CC_S" "$RAW/client-closes-server-sockwatch.txt"
unwatch "$SW_SC" "$RAW/server-closes-sockwatch.txt"

# ---- the wait: until both are gone (their watchers end, -e), a look every PROGRESS_S s; the
# waiting is probes/waitfor's, up to 1 s at a time on a watcher still running (it returns when
# that one ends): one program a second, not a sleep every 0.1 s
tl_log "TIME-WAIT: both sockets there; waiting for them to go (TCP_TIMEWAIT_LEN is 60 s)"
# the time waited is the clock's (/proc/uptime, whole seconds), not a count of waitfor's 1 s
# turns: on a loaded machine a turn, with its programs, takes longer than its 1 s
read -r _up0 _ < /proc/uptime || tl_die "cannot read /proc/uptime"
_up0=${_up0%.*} _next=$PROGRESS_S
while :; do
	if tl_running "$SW_CC"; then _w=$SW_CC
	elif tl_running "$SW_SC_S"; then _w=$SW_SC_S
	else break
	fi
	read -r _n _ < /proc/uptime || tl_die "cannot read /proc/uptime"
	_n=$((${_n%.*} - _up0))
	[ "$_n" -lt "$WAIT_S" ] || tl_die "a TIME-WAIT socket is still there after $WAIT_S s"
	if [ "$_n" -ge "$_next" ]; then
		_next=$(( (_n / PROGRESS_S + 1) * PROGRESS_S ))
		_c=$(wc -l < "$RAW/countdown.txt") _s=$(wc -l < "$RAW/server-countdown.txt")
		snap
		tl_log "TIME-WAIT, waited $_n s: the client's socket (client-closes)" \
			"$(look "$RAW/countdown.txt" "$_c"), the server's (server-closes)" \
			"$(look "$RAW/server-countdown.txt" "$_s")"
	fi
	"$TL_BIN/waitfor" -p "$_w" -t 1000
	case $? in
	0|3) ;;
	*) tl_die "waitfor failed waiting for $(tl_name "$_w")" ;;
	esac
done
unwatch "$SW_CC" "$RAW/client-closes-sockwatch.txt"
unwatch "$SW_SC_S" "$RAW/server-closes-server-sockwatch.txt"
tl_log "TIME-WAIT: both sockets gone"
tl_both_counters_after "" "$KEEP" "$KEEP"
sockstat after
tl_uncapture "$CAP_CC" "$RAW/client-closes-capture.txt"
tl_uncapture "$CAP_SC" "$RAW/server-closes-capture.txt"
tl_wire_record
