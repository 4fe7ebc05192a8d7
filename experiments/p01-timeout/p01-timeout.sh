#!/bin/sh
# p01-timeout: two clients put a timeout on connect() to a full listener.
#  cc:   the socket.create_connection() way — poll() times out, the socket is closed at once.
#  keep: the settimeout()+connect() way — the timeout fires but the socket stays open, and the
#        kernel goes on retransmitting SYNs until close().
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
PORT=21013

tl_listener "$RAW/listener.txt" -p "$PORT" -m full
# both clients' packets, from after the listener's own connection until both are closed
tl_capture capture lo "$PORT"

# Both clients wait 1500 ms, and keep closes at 3500 ms: each close() falls half way between two
# SYN retransmissions (~1, 2, 3, 4 s with linear timeouts; ~1, 3 s without), so it never races
# one (at 2000 ms, the seed's timeout, it would).
tl_log "create_connection-style: poll() timeout 1500 ms, then close()"
tl_watch "$RAW/cc-sockwatch.txt" -4 -e -s syn-sent -p "$PORT"
tl_fg "$RAW/cc-client.txt" "$TL_BIN/connect_timeout" -p "$PORT" -t 1500 -m close
tl_unwatch 5
"$TL_BIN/sockwatch" -1 -4 -s syn-sent -p "$PORT" > "$RAW/cc-after.txt" || tl_die "sockwatch failed"

tl_log "settimeout-style: poll() timeout 1500 ms, socket kept 2000 ms more, then close()"
tl_watch "$RAW/keep-sockwatch.txt" -4 -e -s syn-sent -p "$PORT"
tl_bg "$RAW/keep-client.txt" "$TL_BIN/connect_timeout" -p "$PORT" -t 1500 -m keep -k 2000
CLIENT=$TL_LAST
tl_wait_line "$CLIENT" "$RAW/keep-client.txt" '^kept' 5
"$TL_BIN/sockwatch" -1 -4 -s syn-sent -p "$PORT" > "$RAW/keep-after-timeout.txt" || tl_die "sockwatch failed"
tl_wait_exit "$CLIENT" 10
tl_not_interrupted "$RAW/keep-client.txt"
"$TL_BIN/sockwatch" -1 -4 -s syn-sent -p "$PORT" > "$RAW/keep-after-close.txt" || tl_die "sockwatch failed"
tl_unwatch 5
tl_uncapture
tl_stop "$TL_LISTENER"
