#!/bin/sh
# p01-connect-time: 2000 back-to-back connects to a listener that accepts and closes, and 2000
# to a port where nothing listens; connect() alone is timed; the counters say what the kernel did.
# The knobs (experiments/units): connects, the connects of each batch (N; TL_CONNECTS, the older
# variable, sets it when run.sh is not asked), and backlog, the listen() backlog of the listener.
. "$(dirname "$0")/../lib/collect.sh"

# the knobs: checked here too, for a run without run.sh
tl_knob_set N connects "${TL_KNOB_CONNECTS:-${TL_CONNECTS:-2000}}" 1 20000
tl_knob_set BACKLOG backlog "${TL_KNOB_BACKLOG:-128}" 8 4096

tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
KEEP="TcpActiveOpens,TcpAttemptFails,TcpOutRsts,TcpEstabResets,TcpExtListenOverflows,TcpExtListenDrops,TcpExtTCPSynRetrans"

# run_part NAME PORT: one batch of connects with counters around it.
run_part() {
	cat /proc/loadavg > "$RAW/$1-loadavg.txt"
	"$TL_BIN/counters" > "$RAW/$1-counters-before.txt" || tl_die "counters failed"
	tl_fg "$RAW/$1-client.txt" "$TL_BIN/connect_many" -p "$2" -n "$N"
	# a SIGINT/SIGTERM from outside ends it early, exit 0, with fewer connects
	head -n 1 "$RAW/$1-client.txt" | grep -q "^n=$N " ||
		tl_die "connect_many did fewer than $N connects (interrupted from outside?)"
	"$TL_BIN/counters" -d "$RAW/$1-counters-before.txt" -k "$KEEP" \
		> "$RAW/$1-counters-delta.txt" || tl_die "counters failed"
	tl_log "$1: $(head -n 1 "$RAW/$1-client.txt")"
}

tl_listener "$RAW/listener.txt" -p 21011 -b "$BACKLOG" -m close
tl_log "$N connects to an accept-and-close listener on 21011"
run_part accept 21011
tl_stop "$TL_LISTENER"
tl_log "$N connects to 21012, where nothing listens"
run_part refused 21012
