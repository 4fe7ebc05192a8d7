#!/bin/sh
# p09-keepalive: a middlebox forgets an idle pooled connection.  pool_client (here) sets
# SO_KEEPALIVE with TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT (the knobs keepidle, keepintvl,
# keepcnt), sends one request to pool_server (no idle timeout), reads the reply, and holds the
# connection idle in a blocking read.  nft on the server's input passes the flow's first four
# client packets, then drops every packet of it, silently: the middlebox has forgotten it.
# The kernel's keepalive timer (tcp_keepalive_timer()) sends a probe IDLE s after the last packet received,
# then one every INTVL s; after CNT probes unanswered it resets the connection and the read
# returns ETIMEDOUT.  The capture (the client's end of the veth, before the drop), the client's
# sockwatch (its keepalive timer and probes), ss -tnoe once during the probes, both sides'
# counters (TcpExtTCPKeepAlive).
. "$(dirname "$0")/../lib/collect.sh"
tl_knob_set KA_IDLE keepidle "${TL_KNOB_KEEPIDLE:-1}" 1 3
tl_knob_set KA_INTVL keepintvl "${TL_KNOB_KEEPINTVL:-1}" 1 3
tl_knob_set KA_CNT keepcnt "${TL_KNOB_KEEPCNT:-3}" 1 5
tl_wire_init "$1"
PORT=21092
REQUEST=100 REPLY=200
KEEP="TcpActiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs,TcpRetransSegs"
KEEP="$KEEP,TcpExtTCPKeepAlive,TcpExtTCPAbortOnTimeout,TcpCurrEstab"
KEEP_S="TcpPassiveOpens,TcpEstabResets,TcpOutRsts,TcpInSegs,TcpOutSegs,TcpExtTCPKeepAlive"
SYSCTLS="ipv4/tcp_keepalive_time ipv4/tcp_keepalive_intvl ipv4/tcp_keepalive_probes
ipv4/tcp_retries2 ipv4/tcp_timestamps"

tl_sysctls "$SYSCTLS" > "$RAW/sysctls.txt"
tl_sysctls "$SYSCTLS" tl_srv > "$RAW/server-sysctls.txt"
echo "keepidle=$KA_IDLE keepintvl=$KA_INTVL keepcnt=$KA_CNT request=$REQUEST reply=$REPLY" \
	> "$RAW/params.txt"
tl_bg "$RAW/server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
	"$TL_BIN/pool_server" -a "$TL_SERVER_ADDR" -p "$PORT" -q "$REQUEST" -r "$REPLY"
SERVER=$TL_LAST
tl_wait_line "$SERVER" "$RAW/server.txt" '^ready ' 5
tl_both_counters_before ""
tl_capture capture "$TL_CLIENT_IF" "$PORT"
# -c probes: a change of icsk_probes_out is a line; -e: it ends once the socket is gone
tl_bg "$RAW/sockwatch.txt" "$TL_BIN/sockwatch" -i "$TL_WATCH_US" -4 -e -s estab -p "$PORT" \
	-c probes,unacked
CW=$TL_LAST
tl_wait_line "$CW" "$RAW/sockwatch.txt" '^ready ' 5
# the middlebox: it passes the flow's first four client packets (SYN, ACK, the request, the
# ACK of the reply), then has forgotten the flow: every later packet of it is dropped on the
# server's input, silently (numgen counts the packets that reach the rule, so the moment is
# the same in every run, whatever the load; the server sends nothing while idle)
AFTER=4
tl_log "fault on the server side: flow $PORT dropped after the client's $AFTER packets"
tl_in server nft -f - <<-NFT || tl_die "nft refused the middlebox rule"
	table inet tcplab {
		chain in { type filter hook input priority filter; policy accept; }
	}
	add rule inet tcplab in tcp dport $PORT numgen inc mod 1000000000 >= $AFTER counter drop
NFT
tl_in server nft list ruleset > "$RAW/nft-server.txt" || tl_die "nft list ruleset failed"
tl_log "client: SO_KEEPALIVE idle $KA_IDLE s, intvl $KA_INTVL s, cnt $KA_CNT"
tl_bg "$RAW/client.txt" "$TL_BIN/pool_client" -a "$TL_SERVER_ADDR" -p "$PORT" -q "$REQUEST" \
	-r "$REPLY" -k -K "$KA_IDLE" -I "$KA_INTVL" -C "$KA_CNT" -m wait
CLIENT=$TL_LAST
# the independent view of the keepalive timer, once the first probe is out
tl_wait_line "$CW" "$RAW/sockwatch.txt" ' probes=1 ' $((KA_IDLE + KA_INTVL + 5))
if command -v ss >/dev/null 2>&1; then
	ss -tnoe state established "( dport = :$PORT )" > "$RAW/ss.txt" 2> "$RAW/ss.err" ||
		tl_die "ss failed: $(head -n 1 "$RAW/ss.err")"
	rm -f "$RAW/ss.err"	# ss -e's warnings (no cgroup2 mount in the namespace)
fi
tl_wait_exit "$CLIENT" $((KA_IDLE + KA_INTVL * KA_CNT + 10))
grep -q '^exit reason=done ' "$RAW/client.txt" || tl_die "the client did not end done"
tl_wait_exit "$CW" 5
tl_both_counters_after "" "$KEEP" "$KEEP_S"
tl_uncapture
tl_stop "$SERVER"
tl_wire_record
tl_log "client: $(grep '^read i=1 n=2 ' "$RAW/client.txt" | cut -d' ' -f4-5)"
