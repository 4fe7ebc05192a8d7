#!/bin/sh
# p04-full-buffers: a receiver that stops reading, across the wire.  The server's stall_reader
# accepts and does not read: its receive buffer fills and it advertises a zero window.  The
# client's fill_sender writes with non-blocking send()s until EAGAIN (its send buffer full,
# the window 0, nothing in flight), then calls one blocking send(), which waits.  Meanwhile the
# client's kernel probes the zero window on its persist timer.  Three parts, one connection
# each, both sockets watched by sockwatch in their own namespaces, the client's end of the veth
# captured:
#   fill         SO_SNDBUF set; after FILL_PROBES probes the reader reads again (SIGUSR1): the
#                window reopens, the blocking send() returns, every byte arrives
#   usertimeout  SO_SNDBUF autotuned, TCP_USER_TIMEOUT on the sender: the probes are answered,
#                yet the connection is aborted, the blocking send() fails (ETIMEDOUT)
#   retries2     tcp_retries2 small in the client's namespace: R2_BEFORE probes (more than
#                tcp_retries2), answered, change nothing; then nft drops what the receiver
#                sends, the probes go unanswered, and tcp_retries2 of them abort the connection
. "$(dirname "$0")/../lib/collect.sh"
tl_wire_init "$1"
SNDBUF=65536
FILL_PROBES=5
USER_TIMEOUT_MS=2000
RETRIES2=2
R2_BEFORE=3
KEEP_C="TcpExtTCPWinProbe,TcpExtTCPAbortOnTimeout,TcpExtTCPTimeouts,TcpRetransSegs,TcpOutSegs,TcpInSegs"
KEEP_S="TcpExtTCPToZeroWindowAdv,TcpExtTCPWantZeroWindowAdv,TcpExtTCPFromZeroWindowAdv,TcpExtTCPACKSkippedSeq,TcpExtTCPZeroWindowDrop,TcpExtTCPRcvQDrop,TcpInSegs,TcpOutSegs"
SYSCTLS="ipv4/tcp_wmem ipv4/tcp_rmem core/wmem_max core/rmem_max core/wmem_default
core/rmem_default ipv4/tcp_retries2 ipv4/tcp_invalid_ratelimit ipv4/tcp_shrink_window
ipv4/tcp_moderate_rcvbuf ipv4/tcp_adv_win_scale ipv4/tcp_rto_min_us ipv4/tcp_rto_max_ms
ipv4/tcp_notsent_lowat ipv4/tcp_orphan_retries"

# sysctls [CMD...]: the namespace's values (CMD: how to get into it; tl_srv for the server's),
# "net.X.Y=V" with blanks squeezed, "=absent" where this kernel has no such file
sysctls() {
	for _s in $SYSCTLS; do
		_n=net.$(echo "$_s" | tr / .)
		if _v=$("$@" cat "/proc/sys/net/$_s" 2>/dev/null); then
			echo "$_n=$(echo "$_v" | tr -s ' \t' '  ')"
		else
			echo "$_n=absent"
		fi
	done
}

# The new sockwatch keys print a change line (SPEC -c); a sockwatch without -c still runs.
SW_C="-c wq,rq,snd_wnd,rcv_wnd,probes,backoff"

# wait_probes PID N TIMEOUT_S: poll the capture until N zero-window probes left, while PID
# runs.  A probe is one of the client's pure ACKs (flags A, no data) after the handshake's own
# (tcp_xmit_probe_skb() sends nothing else on this connection): N probes are N+1 such lines.
wait_probes() {
	tl_wait_count "$1" "$TL_CAPTURE_OUT" ' dir=c>s flags=A seq=[0-9]* ack=[0-9]* len=0 ' \
		$(($2 + 1)) "$3"
}

# start NAME PORT SENDER_ARGS...: reader, counters, capture, both sockwatches, the sender;
# returns once the sender says its buffer is full and its blocking send() has begun
start() {
	_p=$1 _port=$2
	shift 2
	tl_bg "$RAW/$_p-reader.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/stall_reader" -a "$TL_SERVER_ADDR" -p "$_port"
	READER=$TL_LAST
	tl_wait_line "$READER" "$RAW/$_p-reader.txt" '^ready ' 5
	tl_both_counters_before "$_p-"
	tl_capture "$_p-capture" "$TL_CLIENT_IF" "$_port"
	# shellcheck disable=SC2086 # SW_C: options, split on purpose
	tl_bg "$RAW/$_p-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -e -s estab -P "$_port" $SW_C
	SWATCH=$TL_LAST
	tl_wait_line "$SWATCH" "$RAW/$_p-server-sockwatch.txt" '^ready ' 5
	# shellcheck disable=SC2086
	tl_watch "$RAW/$_p-sockwatch.txt" -4 -e -s estab -p "$_port" $SW_C
	tl_log "$_p: fill_sender $* to $TL_SERVER_ADDR:$_port; the reader does not read"
	tl_bg "$RAW/$_p-sender.txt" "$TL_BIN/fill_sender" -a "$TL_SERVER_ADDR" -p "$_port" "$@"
	SENDER=$TL_LAST
	tl_wait_line "$SENDER" "$RAW/$_p-sender.txt" '^blocking_send ' 25
	tl_log "$_p: $(grep '^full ' "$RAW/$_p-sender.txt" | cut -d' ' -f1-2,5-8)"
}

# finish NAME: counters, the watchers (each must have seen its socket go), the capture (already
# stopped by a part that ends with the reader's RST)
finish() {
	tl_both_counters_after "$1-" "$KEEP_C" "$KEEP_S"
	tl_unwatch 5
	tl_wait_exit "$SWATCH" 5
	tail -n 1 "$RAW/$1-server-sockwatch.txt" | grep -q '^end ' ||
		tl_die "the server's sockwatch output has no end line"
	[ -z "$TL_CAPTURE" ] || tl_uncapture
	TL_CAPTURE=""
}

sysctls > "$RAW/sysctls.txt"
sysctls tl_srv > "$RAW/server-sysctls.txt"
# where net.core.wmem_max is not per namespace (absent above: the 6.1 guest), SO_SNDBUF is
# clamped by the initial namespace's: read it there (reading only)
_all=$SYSCTLS
SYSCTLS="core/wmem_max core/rmem_max"
sysctls nsenter --net=/proc/1/ns/net > "$RAW/init-sysctls.txt"
SYSCTLS=$_all
echo "sndbuf=$SNDBUF fill_probes=$FILL_PROBES user_timeout_ms=$USER_TIMEOUT_MS" \
	"retries2=$RETRIES2 r2_before=$R2_BEFORE" > "$RAW/params.txt"

# ---- fill: the reader reads again after FILL_PROBES probes
start fill 21040 -b "$SNDBUF"
wait_probes "$SENDER" 2 20
# an independent look at the sender's socket while it probes (ss, where there is one)
if command -v ss >/dev/null 2>&1; then
	ss -tmoin state established "( dport = :21040 )" > "$RAW/fill-ss.txt" 2>&1 ||
		tl_die "ss failed"
fi
wait_probes "$SENDER" "$FILL_PROBES" 25
tl_log "fill: $FILL_PROBES probes sent; the reader reads again (SIGUSR1)"
kill -USR1 "$READER" || tl_die "cannot signal the reader"
tl_wait_exit "$SENDER" 10
tl_wait_exit "$READER" 10
finish fill

# ---- usertimeout: TCP_USER_TIMEOUT aborts a connection whose probes are answered
start usertimeout 21041 -u "$USER_TIMEOUT_MS"
tl_wait_exit "$SENDER" 20
tl_log "usertimeout: $(grep '^result=' "$RAW/usertimeout-sender.txt")"
# the capture ends with the sender's socket: the reader's RST when it is stopped is not in it
tl_uncapture
TL_CAPTURE=""
tl_stop "$READER"
finish usertimeout

# ---- retries2: answered probes do not count; unanswered ones do, up to tcp_retries2
sysctl -qw net.ipv4.tcp_retries2="$RETRIES2" || tl_die "cannot set tcp_retries2"
echo "net.ipv4.tcp_retries2=$(cat /proc/sys/net/ipv4/tcp_retries2)" > "$RAW/retries2-sysctl.txt"
start retries2 21042
wait_probes "$SENDER" "$R2_BEFORE" 20
tl_fault client in drop tcp sport 21042
tl_wait_exit "$SENDER" 20
tl_log "retries2: $(grep '^result=' "$RAW/retries2-sender.txt")"
# the capture ends while the rule is still loaded: every server segment from the rule's load
# to the end of the capture was dropped, the rule's counter says how many (the report's key)
tl_uncapture
TL_CAPTURE=""
tl_wire_record
tl_fault_clear client
tl_stop "$READER"
finish retries2
