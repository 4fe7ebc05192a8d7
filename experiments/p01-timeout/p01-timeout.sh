#!/bin/sh
# p01-timeout: two clients put a timeout on connect() to a full listener.
#  cc:   the socket.create_connection() way — poll() times out, the socket is closed at once.
#  keep: the settimeout()+connect() way — the timeout fires but the socket stays open, and the
#        kernel goes on retransmitting SYNs until close().
# The knobs (experiments/units): timeout_ms, how long both clients' poll() waits, and keep_ms,
# how long the keep client holds its socket after the timeout before close().
. "$(dirname "$0")/../lib/collect.sh"

# the knobs: checked here too, for a run without run.sh
tl_knob_set TIMEOUT_MS timeout_ms "${TL_KNOB_TIMEOUT_MS:-1500}" 100 10000
tl_knob_set KEEP_MS keep_ms "${TL_KNOB_KEEP_MS:-2000}" 0 10000

tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
PORT=21013

tl_listener "$RAW/listener.txt" -p "$PORT" -m full
# both clients' packets, from after the listener's own connection until both are closed
tl_capture capture lo "$PORT"

# With the defaults both clients wait 1500 ms, and keep closes at 3500 ms: each close() falls half
# way between two SYN retransmissions (~1, 2, 3, 4 s with linear timeouts; ~1, 3 s without), so
# it never races one (at 2000 ms, the seed's timeout, it would).  Other knob values may.
tl_log "create_connection-style: poll() timeout $TIMEOUT_MS ms, then close()"
tl_watch "$RAW/cc-sockwatch.txt" -4 -e -s syn-sent -p "$PORT"
tl_fg "$RAW/cc-client.txt" "$TL_BIN/connect_timeout" -p "$PORT" -t "$TIMEOUT_MS" -m close
tl_unwatch 5
"$TL_BIN/sockwatch" -1 -4 -s syn-sent -p "$PORT" > "$RAW/cc-after.txt" || tl_die "sockwatch failed"

tl_log "settimeout-style: poll() timeout $TIMEOUT_MS ms, socket kept $KEEP_MS ms more, then close()"
tl_watch "$RAW/keep-sockwatch.txt" -4 -e -s syn-sent -p "$PORT"
tl_bg "$RAW/keep-client.txt" "$TL_BIN/connect_timeout" -p "$PORT" -t "$TIMEOUT_MS" -m keep -k "$KEEP_MS"
CLIENT=$TL_LAST
tl_wait_line "$CLIENT" "$RAW/keep-client.txt" '^kept' $((TIMEOUT_MS / 1000 + 5))
"$TL_BIN/sockwatch" -1 -4 -s syn-sent -p "$PORT" > "$RAW/keep-after-timeout.txt" || tl_die "sockwatch failed"
tl_wait_exit "$CLIENT" $((KEEP_MS / 1000 + 10))
tl_not_interrupted "$RAW/keep-client.txt"
"$TL_BIN/sockwatch" -1 -4 -s syn-sent -p "$PORT" > "$RAW/keep-after-close.txt" || tl_die "sockwatch failed"
tl_unwatch 5
tl_uncapture
tl_stop "$TL_LISTENER"
