#!/bin/sh
# connect-modes: how long a connect to an accept-and-close listener on loopback takes when it is
# completed in five ways (connect_modes -h lists them), 300 timed sequences of each after 10
# warm-ups; then one sequence of each mode under strace -T, when strace is installed.
# After a Windows write-up in which getsockopt(SO_ERROR) right after the connect stalled.
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
PORT=21041
MODES="so-error poll-only wait-so-error so-type blocking"

"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
tl_listener "$RAW/listener.txt" -p "$PORT" -b 128 -m close
cat /proc/loadavg > "$RAW/loadavg.txt"

tl_log "300 timed sequences of each mode (after 10 warm-ups) to 127.0.0.1:$PORT"
"$TL_BIN/connect_modes" -p "$PORT" -n 300 -w 10 -r "$RAW/samples.txt" > "$RAW/modes.txt" ||
	tl_die "connect_modes failed"
while IFS= read -r line; do
	case $line in
	mode=*step=*) ;;
	mode=*)
		m=${line%% *}
		med=${line#*median_us=}
		p95=${line#*p95_us=}
		bi=${line#*bimodal=}
		tl_log "${m#mode=}: median ${med%% *} us, p95 ${p95%% *} us, bimodal=${bi%% *}"
		;;
	esac
done < "$RAW/modes.txt"

if command -v strace > /dev/null 2>&1; then
	strace -V | head -n 1 > "$RAW/strace-version.txt"
	for m in $MODES; do
		tl_log "strace of one $m sequence"
		# LeakSanitizer cannot run under ptrace: off for a sanitizer build, no-op otherwise.
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -T -e trace=socket,connect,poll,getsockopt,close -o "$RAW/strace-$m.txt" \
			"$TL_BIN/connect_modes" -p "$PORT" -m "$m" -1 > "$RAW/strace-$m.out" ||
			tl_die "connect_modes -m $m -1 under strace failed"
	done
else
	echo "strace: not available" > "$RAW/strace-version.txt"
	tl_log "strace: not available"
fi
tl_stop "$TL_LISTENER"
