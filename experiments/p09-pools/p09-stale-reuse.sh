#!/bin/sh
# p09-stale-reuse: a pooled connection reused after the server closed it for being idle, in two
# parts, each on its own port, with the actors pool_server (server namespace) and pool_client
# (here): the server answers one request, then closes the connection idle for IDLE_MS (its
# idle timeout); the client holds the connection idle until its socket sat in CLOSE-WAIT with
# the server's FIN unread (both sockwatches saw it), then:
#   reuse   writes the next request on it: the server's orphaned FIN-WAIT-2 socket answers the
#           data with a RST (tcp_rcv_state_process(): TCPAbortOnData); the client's read, then
#           a second write, say what the kernel made of it
#   finlost the same, but the server's FIN is lost on the way (nft drops it at the client's
#           input, after the capture saw it): the client's socket is still ESTABLISHED when it
#           writes, and the server's socket, its FIN unacknowledged, still a full one in
#           FIN-WAIT-1
#   check   first asks the kernel whether the server closed (recv MSG_PEEK|MSG_DONTWAIT, then
#           poll POLLRDHUP), sees it did, closes, and sends the request on a new connection
# Each part has its capture (the client's end of the veth), both sides' sockwatch (each in its
# own namespace) and both sides' counters; ss -tnoe records the CLOSE-WAIT socket once.
. "$(dirname "$0")/../lib/collect.sh"
# the server's idle timeout (the knob idle_ms)
tl_knob_set IDLE_MS idle_ms "${TL_KNOB_IDLE_MS:-200}" 50 5000
tl_wire_init "$1"
PORT_REUSE=21090 PORT_CHECK=21091 PORT_FINLOST=21093
REQUEST=100 REPLY=200
KEEP="TcpActiveOpens,TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs"
KEEP="$KEEP,TcpRetransSegs,TcpExtTCPAbortOnData,TcpExtTCPAbortOnClose,TcpCurrEstab"
STATES="-s syn-sent -s syn-recv -s estab -s fin-wait-1 -s fin-wait-2 -s close-wait -s last-ack"
STATES="$STATES -s closing -s time-wait"
SYSCTLS="ipv4/tcp_fin_timeout ipv4/tcp_rfc1337 ipv4/tcp_challenge_ack_limit ipv4/tcp_timestamps"

# part NAME PORT CONNS MODE CLIENT_STATE SERVER_STATE: server (COUNT conns) and watchers up,
# the client held idle until the server closed and each side's watcher showed its state
# (CLOSE-WAIT and FIN-WAIT-2; finlost: ESTAB and FIN-WAIT-1), released, everything checked and
# stopped
part() {
	_p=$1 _port=$2
	tl_bg "$RAW/$_p-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/pool_server" -a "$TL_SERVER_ADDR" -p "$_port" -i "$IDLE_MS" -n "$3" \
		-q "$REQUEST" -r "$REPLY"
	SERVER=$TL_LAST
	tl_wait_line "$SERVER" "$RAW/$_p-server.txt" '^ready ' 5
	# shellcheck disable=SC2086 # options, split on purpose
	tl_part_watch "$_p" "$_port" -4 $STATES -c rq,wq
	tl_log "$_p: server idle timeout $IDLE_MS ms; client -m $4"
	tl_bg "$RAW/$_p-client.txt" "$TL_BIN/pool_client" -a "$TL_SERVER_ADDR" -p "$_port" \
		-q "$REQUEST" -r "$REPLY" -H -m "$4"
	CLIENT=$TL_LAST
	tl_wait_line "$CLIENT" "$RAW/$_p-client.txt" '^hold ' 10
	tl_wait_line "$SERVER" "$RAW/$_p-server.txt" '^close i=1 ' 10
	tl_wait_line "$CW" "$RAW/$_p-sockwatch.txt" " state=$5 " 10
	tl_wait_line "$SW" "$RAW/$_p-server-sockwatch.txt" " state=$6 " 10
	if [ "$_p" = reuse ] && command -v ss >/dev/null 2>&1; then
		# the independent view of the socket about to be reused
		ss -tnoe state close-wait "( dport = :$_port )" > "$RAW/$_p-ss.txt" \
			2> "$RAW/ss.err" || tl_die "ss failed: $(head -n 1 "$RAW/ss.err")"
		rm -f "$RAW/ss.err"	# ss -e's warnings (no cgroup2 mount in the namespace)
	fi
	tl_log "$_p: the client's socket is in $5, the server's in $6; the pool reuses it (SIGUSR1)"
	kill -USR1 "$CLIENT" || tl_die "cannot signal the client"
	tl_wait_exit "$CLIENT" 10
	grep -q '^exit reason=done ' "$RAW/$_p-client.txt" || tl_die "$_p: the client did not end done"
	tl_wait_exit "$SERVER" 10
	tl_both_counters_after "$_p-" "$KEEP" "$KEEP"
	tl_uncapture
	tl_stop "$CW"
	tl_stop "$SW"
	tl_log "$_p: $(grep -E '^(write|read|peek|rdhup) ' "$RAW/$_p-client.txt" | tail -n 3 |
		cut -d' ' -f1,3-5 | tr '\n' ';')"
}

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "idle_ms=$IDLE_MS request=$REQUEST reply=$REPLY" > "$RAW/params.txt"
# reuse: one connection, served until the idle close; check: the closed one, then the new one
part reuse "$PORT_REUSE" 1 reuse CLOSE-WAIT FIN-WAIT-2
# finlost: every FIN of the server dropped at the client's input (the capture saw it first)
tl_fault client in drop tcp sport "$PORT_FINLOST" tcp flags \& fin == fin
part finlost "$PORT_FINLOST" 1 reuse ESTAB FIN-WAIT-1
part check "$PORT_CHECK" 2 check CLOSE-WAIT FIN-WAIT-2
tl_wire_record
