#!/bin/sh
# p01-close-synsent-late: close() on a SYN-SENT socket, then the SYN-ACK for the SYN it already
# sent arrives.  The server's first SYN-ACK is dropped by nft on its way out (so it is never on
# the wire); the client's poll() times out at 500 ms (timeout_ms) and it closes the socket,
# still SYN-SENT; the server's SYN-ACK retransmission (its own timer, ~1 s) then reaches a
# client that has no socket for it, and the client's kernel answers with a RST.
# Knob: timeout_ms, the client's poll() timeout, below the server's first SYN-ACK
# retransmission (about 1 s after the SYN), so close() always comes first.  (Not a knob: more
# than one SYN-ACK dropped.  Tried with drop-first:2: no SYN-ACK reached the wire in 9 s.  A
# retransmission nft drops at the output hook fails, and reqsk_timer_handler() drops the
# request when inet_rtx_syn_ack() fails: the server sends nothing more, no RST comes.)
. "$(dirname "$0")/../lib/collect.sh"

# the knob (experiments/units): checked here too, for a run without run.sh
tl_knob_set TIMEOUT_MS timeout_ms "${TL_KNOB_TIMEOUT_MS:-500}" 100 800

tl_wire_init "$1"
PORT=21019
CKEEP="TcpActiveOpens,TcpAttemptFails,TcpInSegs,TcpOutSegs,TcpRetransSegs,TcpOutRsts,TcpExtTCPSynRetrans"
SKEEP="TcpInSegs,TcpOutSegs,TcpRetransSegs,TcpOutRsts,TcpPassiveOpens,TcpAttemptFails,TcpExtTCPSynRetrans,TcpExtEmbryonicRsts"

tl_srv_listener "$RAW/listener.txt" -a "$TL_SERVER_ADDR" -p "$PORT" -m never
# the first SYN-ACK from the server's port is dropped at its output hook
tl_fault server out drop-first:1 tcp sport "$PORT" tcp flags syn,ack / syn,ack
tl_both_counters_before ""
tl_capture capture "$TL_CLIENT_IF" "$PORT"
tl_watch "$RAW/sockwatch.txt" -4 -e -s syn-sent -p "$PORT"
tl_log "connect() to $TL_SERVER_ADDR:$PORT, poll() timeout $TIMEOUT_MS ms," \
	"then close() (still SYN-SENT)"
tl_fg "$RAW/client.txt" "$TL_BIN/connect_timeout" -a "$TL_SERVER_ADDR" -p "$PORT" -t "$TIMEOUT_MS" \
	-m close
tl_unwatch 5
"$TL_BIN/sockwatch" -1 -4 -p "$PORT" > "$RAW/after-close.txt" || tl_die "sockwatch failed"
# the server's SYN-ACK retransmission and the client's answer: polled for in the capture
tl_wait_line "$TL_CAPTURE" "$TL_CAPTURE_OUT" ' dir=c>s flags=R' 5
tl_both_counters_after "" "$CKEEP" "$SKEEP"
tl_uncapture
tl_wire_record
tl_stop "$TL_LISTENER"
