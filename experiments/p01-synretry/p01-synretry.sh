#!/bin/sh
# p01-synretry: a blocking connect() to a listener whose accept queue is full, so every SYN is
# dropped (ListenOverflows) and the client retransmits until the kernel gives up (ETIMEDOUT).
# TL_SYNCNT sets TCP_SYNCNT (default: the knob syncnt, 2); empty means the system default
# (tcp_syn_retries: the knob syn_retries of p01-synretry-default sets it in this namespace).
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
PORT=21013
SYNCNT=${TL_SYNCNT-${TL_KNOB_SYNCNT:-2}}
# before machine reads the sysctls; written only when it differs, so the default changes nothing
if [ -n "${TL_KNOB_SYN_RETRIES:-}" ] &&
	[ "$(cat /proc/sys/net/ipv4/tcp_syn_retries)" != "$TL_KNOB_SYN_RETRIES" ]; then
	sysctl -qw "net.ipv4.tcp_syn_retries=$TL_KNOB_SYN_RETRIES" ||
		tl_die "sysctl net.ipv4.tcp_syn_retries=$TL_KNOB_SYN_RETRIES in the unit's namespace failed"
fi
KEEP="TcpExtListenOverflows,TcpExtListenDrops,TcpExtTCPSynRetrans,TcpAttemptFails,TcpActiveOpens"
KEEP="$KEEP,TcpOutSegs,TcpRetransSegs"

"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
tl_listener "$RAW/listener.txt" -p "$PORT" -m full
# the capture starts after the listener's own connection (which fills its queue) and is ready
# before the client's first SYN
tl_capture capture lo "$PORT"
"$TL_BIN/counters" > "$RAW/counters-before.txt" || tl_die "counters failed"

tl_watch "$RAW/sockwatch.txt" -4 -e -s syn-sent -p "$PORT"

tl_log "connect() to a full listener, TCP_SYNCNT=${SYNCNT:-default}"
tl_fg "$RAW/client.txt" "$TL_BIN/connect_block" -p "$PORT" ${SYNCNT:+-s "$SYNCNT"}
"$TL_BIN/counters" -d "$RAW/counters-before.txt" -k "$KEEP" > "$RAW/counters-delta.txt" ||
	tl_die "counters failed"
tl_unwatch 5
tl_uncapture
tl_stop "$TL_LISTENER"
tl_log "$(grep '^result=' "$RAW/client.txt")"
