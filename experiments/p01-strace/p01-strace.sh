#!/bin/sh
# p01-strace: the system calls of three connects, with the time spent in each (strace -T):
# a blocking connect to a listener that never accepts (and the sockets it leaves), a connect to a
# port where nothing listens, and a create_connection-style connect with a 2 s poll() (knobs below).
# The knobs (experiments/units): backlog, the listener's listen() backlog, and timeout_ms, the
# create_connection-style client's poll() limit.
. "$(dirname "$0")/../lib/collect.sh"

# the knobs: checked here too, for a run without run.sh
tl_knob_set BACKLOG backlog "${TL_KNOB_BACKLOG:-8}" 1 128
tl_knob_set TIMEOUT_MS timeout_ms "${TL_KNOB_TIMEOUT_MS:-2000}" 100 10000

tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"

if command -v strace > /dev/null 2>&1; then
	# LeakSanitizer cannot run under ptrace: off for a sanitizer build, no-op otherwise.
	# -I2: strace -o FILE PROG blocks fatal signals for good by default (-I3), so a SIGTERM from
	# tl_cleanup (after an error) would never end it, and connect_block -H never ends by itself;
	# with -I2 strace takes the signal between system calls and kills its client with it.
	TRACE="env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace -I2 -T -e trace=%network,fcntl,poll,ppoll -o"
	strace -V | head -n 1 > "$RAW/strace-version.txt"
else
	TRACE=""
	echo "strace: not available" > "$RAW/strace-version.txt"
	tl_log "strace not available: running the clients without it"
fi

# traced OUT CMD...: run CMD under strace (its trace in OUT.strace) or plainly.
traced() {
	_o=$1
	shift
	if [ -n "$TRACE" ]; then
		$TRACE "$_o.strace" "$@"
	else
		"$@"
	fi
}

tl_listener "$RAW/listener.txt" -p 21010 -b "$BACKLOG" -m never
# the packets of the two connections to the listener (block, cc), until the listener is gone
tl_capture capture lo 21010
tl_log "blocking connect to 21010 (listener never accepts)"
if [ -n "$TRACE" ]; then
	tl_bg "$RAW/block-client.txt" $TRACE "$RAW/block.strace" "$TL_BIN/connect_block" -p 21010 -H
else
	tl_bg "$RAW/block-client.txt" "$TL_BIN/connect_block" -p 21010 -H
fi
CLIENT=$TL_LAST
tl_wait_line "$CLIENT" "$RAW/block-client.txt" '^holding' 5
"$TL_BIN/sockwatch" -1 -4 > "$RAW/block-sockets.txt" || tl_die "sockwatch failed"
# The traced client itself gets the SIGTERM, so the trace shows it and how the client ended;
# strace then exits with its client's status.
if [ -n "$TRACE" ]; then
	kill -TERM $(cat "/proc/$CLIENT/task/$CLIENT/children") 2>/dev/null ||
		tl_die "cannot find the traced client of strace pid $CLIENT"
	tl_wait_exit "$CLIENT" 5
else
	tl_stop "$CLIENT"
fi

tl_log "blocking connect to 21012 (nothing listens)"
tl_fg "$RAW/refused-client.txt" traced "$RAW/refused" "$TL_BIN/connect_block" -p 21012

tl_log "create_connection-style connect to 21010, poll() timeout $TIMEOUT_MS ms"
tl_fg "$RAW/cc-client.txt" traced "$RAW/cc" "$TL_BIN/connect_timeout" -p 21010 -t "$TIMEOUT_MS" -m close
tl_stop "$TL_LISTENER"
tl_uncapture
