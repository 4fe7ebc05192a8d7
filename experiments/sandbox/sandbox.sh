#!/usr/bin/env bash
# sandbox.sh — tcplab's sandbox: the wire's two namespaces (client 192.0.2.1, server 192.0.2.2
# on a veth pair) with the probes recording, a shell in each, a live pane of events, and, when
# the user leaves, the outputs of what happened (docs/sandbox.md).
#
# Bash, not Python: the namespaces, the wire and the run record are experiments/lib/netns.sh,
# wire.sh and runstate.sh, shell functions sourced here as run.sh sources them, so a sandbox is
# made, recorded, cleaned up and reaped after a crash exactly as a wire unit is.  What reads the
# probes' lines is Python beside it: live.py (the live pane) and summary.py (the outputs, with
# the report library experiments/report/tcplab*.py).
set -euo pipefail
export LC_ALL=C

PROG=sandbox.sh
TOP=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
HERE=$TOP/experiments/sandbox
BIN=${TCPLAB_BIN:-$TOP/build/bin}
NS_PREFIX=tcplab
EXIT_FAIL=1 EXIT_USAGE=2
SESSION=sandbox

usage() {
	cat <<'USAGE'
usage: sandbox.sh [--out DIR] [--shell client|server]
  --out DIR       write the outputs here: a new or empty directory
                  (default outputs/sandbox-YYYYmmdd-HHMMSS)
  --shell SIDE    one plain shell in the client or the server namespace, no tmux
  -h, --help      print this help
Without --shell: a tmux session of three panes, a shell in the client namespace
(192.0.2.1), one in the server namespace (192.0.2.2), and the live events.  Leave
by exiting both shells (or Ctrl-C / SIGTERM): sandbox.sh then stops its probes,
deletes the namespaces and writes DIR/sandbox.txt, sandbox.json, sandbox.pcap,
sandbox-ladder.svg, events.txt and raw/.  Needs root, or unprivileged user
namespaces: then it runs inside unshare -rmn.
Exit status: 0 outputs written, 1 failure, 2 bad usage.
USAGE
}

die() {
	local status=$1
	shift
	echo "$PROG: $*" >&2
	exit "$status"
}

log() {
	printf '%s\n' "$(date +%H:%M:%S) [sandbox] $*" >&2
}

ARGS=("$@")	# for the run inside a user namespace
OUT="" OUT_SET="" SHELL_SIDE=""
while [ $# -gt 0 ]; do
	case $1 in
	--out) [ $# -ge 2 ] || die $EXIT_USAGE "--out needs a directory"
		OUT=$2 OUT_SET=1
		shift 2 ;;
	--out=*) OUT=${1#--out=} OUT_SET=1; shift ;;
	--shell) [ $# -ge 2 ] || die $EXIT_USAGE "--shell needs client or server"
		SHELL_SIDE=$2
		shift 2 ;;
	--shell=*) SHELL_SIDE=${1#--shell=}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die $EXIT_USAGE "unknown option '$1' (--help for usage)" ;;
	esac
done
case $SHELL_SIDE in '' | client | server) ;; *) die $EXIT_USAGE "--shell '$SHELL_SIDE': want client or server" ;; esac
[ -z "$OUT_SET" ] || [ -n "$OUT" ] || die $EXIT_USAGE "--out '': want a directory"
[ -n "$OUT" ] || OUT=${TCPLAB_OUTPUTS:-$TOP/outputs}/sandbox-$(date +%Y%m%d-%H%M%S)

# Not root: the whole sandbox runs again inside an unprivileged user namespace (unshare -rmn),
# which owns the namespaces, the veth pair and the probes' sockets it makes; a mount namespace
# of its own holds a private /run/netns (tmpfs) for `ip netns`.  Its own network namespace is
# what `ip netns add` returns to (it cannot go back to the host's).  The run record stays in
# the user's state directory, marked mode=userns, so the next run of a killed sandbox stops its
# processes by TL_RUN_ID (runstate.sh, rs_kill_userns_procs), which ends the namespaces too.
if [ "$(id -u)" -ne 0 ]; then
	[ -z "${SB_IN_USERNS:-}" ] || die $EXIT_FAIL "still not root inside the user namespace"
	command -v unshare > /dev/null && unshare -rmn true 2> /dev/null ||
		die $EXIT_FAIL "needs root, or unprivileged user namespaces (unshare -rmn failed: see kernel.unprivileged_userns_clone, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
	. "$TOP/experiments/lib/runstate.sh"
	if [ -d /run/netns ]; then
		netns_mount=/run/netns
		state=$(rs_state_dir) || exit $EXIT_FAIL
	else	# /run itself, hidden in the namespace: the state directory goes in /tmp
		netns_mount=/run
		state=$(XDG_RUNTIME_DIR=/tmp rs_state_dir) || exit $EXIT_FAIL
	fi
	# shellcheck disable=SC2016 # expanded by the inner sh
	exec env SB_IN_USERNS=1 NS_MODE=userns TCPLAB_STATE="$state" unshare -rmn --propagation private \
		sh -c 'mount -t tmpfs -o mode=0755 tcplab "$0" && mkdir -p /run/netns && ip link set lo up && exec "$@"' \
		"$netns_mount" "$TOP/experiments/sandbox/sandbox.sh" "${ARGS[@]}"
fi
for p in sockwatch capture counters; do
	[ -x "$BIN/$p" ] || die $EXIT_FAIL "$BIN/$p is missing: run make first"
done
[ -n "$SHELL_SIDE" ] || command -v tmux > /dev/null ||
	die $EXIT_FAIL "tmux is not installed (apt-get install tmux), or use --shell client|server"

# --out: a new directory, or an empty one; refused before anything is made.
if [ -e "$OUT" ] || [ -L "$OUT" ]; then
	[ -d "$OUT" ] && [ ! -L "$OUT" ] || die $EXIT_USAGE "--out $OUT: not a directory"
	[ -z "$(ls -A -- "$OUT" 2> /dev/null)" ] || die $EXIT_USAGE "--out $OUT exists and is not empty: use a new directory"
	[ -w "$OUT" ] || die $EXIT_USAGE "--out $OUT: not writable"
else
	parent=$(dirname -- "$OUT")
	[ -d "$parent" ] && [ -w "$parent" ] || die $EXIT_USAGE "--out $OUT: cannot create it ($parent is not a writable directory)"
	mkdir -- "$OUT" || die $EXIT_USAGE "--out $OUT: cannot create it"
	# refused before rs_start's own trap (say, a lock or a state directory it cannot take):
	# the directory made here goes again
	trap 'rmdir -- "$OUT" 2> /dev/null' EXIT
fi

. "$TOP/experiments/lib/netns.sh"
. "$TOP/experiments/lib/wire.sh"
. "$TOP/experiments/lib/runstate.sh"

SB_PIDS=()		# the probes, stopped with SIGTERM so each prints its end line
SB_LIVE_PID=""		# live.py under --shell (in tmux it is the live pane's)
SB_FINISHED=""
SB_STARTED=""		# the namespaces and the probes are up: there is something to write
SB_TMUX=()
SB_PANES=""
NS_C="" NS_S=""

sb_ns() {	# sb_ns client|server: that side's namespace
	if [ "$1" = client ]; then echo "$NS_C"; else echo "$NS_S"; fi
}

sb_in() {	# sb_in client|server CMD...: CMD in that side's namespace
	local ns
	ns=$(sb_ns "$1")
	shift
	nsenter --net="/run/netns/$ns" "$@"
}

# sb_wait_line FILE PATTERN WHAT: poll (10 ms, at most 5 s) until FILE has a line matching.
sb_wait_line() {
	local left=500
	until grep -q -- "$2" "$1" 2> /dev/null; do
		left=$((left - 1))
		[ "$left" -gt 0 ] || { echo "$PROG: $3 not ready after 5 s" >&2; return 1; }
		sleep 0.01
	done
}

sb_start_probes() {
	local raw=$1 side
	# each probe started as a simple command (nsenter execs it), so $! is the probe itself
	# and the SIGTERM that stops it reaches it
	for side in client server; do
		sb_in "$side" "$BIN/counters" > "$raw/$side-counters-before.txt"
		nsenter --net="/run/netns/$(sb_ns "$side")" "$BIN/sockwatch" \
			> "$raw/$side-sockwatch.txt" 2> "$raw/$side-sockwatch.err" &
		SB_PIDS+=("$!")
	done
	nsenter --net="/run/netns/$NS_C" "$BIN/capture" -i "$WIRE_CLIENT_IF" -w "$raw/sandbox.pcap" \
		> "$raw/capture.txt" 2> "$raw/capture.err" &
	SB_PIDS+=("$!")
	sb_wait_line "$raw/client-sockwatch.txt" '^ready ' "the client's sockwatch" &&
		sb_wait_line "$raw/server-sockwatch.txt" '^ready ' "the server's sockwatch" &&
		sb_wait_line "$raw/capture.txt" '^ready ' "the capture"
}

# The shell of a side: bash without the user's rc files (a prompt that names the side), the
# probes on PATH, and the other side's namespace named for nsenter.
sb_shell_argv() {
	local side=$1 addr=$WIRE_CLIENT_ADDR
	[ "$side" = client ] || addr=$WIRE_SERVER_ADDR
	SB_SHELL=(nsenter --net="/run/netns/$(sb_ns "$side")"
		env PATH="$BIN:$PATH" PS1="$side $addr \$ " TL_NS_CLIENT="$NS_C" TL_NS_SERVER="$NS_S"
		TL_CLIENT_ADDR="$WIRE_CLIENT_ADDR" TL_SERVER_ADDR="$WIRE_SERVER_ADDR"
		bash --norc --noprofile)
}

sb_tmux_session() {
	local q=() live
	SB_TMUX=(tmux -S "$TMPDIR_RUN/tmux.sock")
	sb_shell_argv client
	printf -v q[0] '%q ' "${SB_SHELL[@]}"
	sb_shell_argv server
	printf -v q[1] '%q ' "${SB_SHELL[@]}"
	# the live pane sits in the client namespace, so the reaper of a killed run stops it too
	printf -v live '%q ' nsenter --net="/run/netns/$NS_C" python3 "$HERE/live.py" \
		--raw "$TMPDIR_RUN/raw" --stop "$TMPDIR_RUN/live.stop" --log "$TMPDIR_RUN/events.txt"
	SB_PANES=$("${SB_TMUX[@]}" -f /dev/null new-session -d -P -F '#{pane_id}' -s "$SESSION" \
		-x 200 -y 50 "${q[0]}") &&
		SB_PANES="$SB_PANES $("${SB_TMUX[@]}" split-window -h -P -F '#{pane_id}' -t "$SESSION:0.0" "${q[1]}")" &&
		"${SB_TMUX[@]}" split-window -v -f -l 40% -t "$SESSION:0" "$live" &&
		"${SB_TMUX[@]}" select-pane -t "$SESSION:0.0" -T client &&
		"${SB_TMUX[@]}" select-pane -t "$SESSION:0.1" -T server &&
		"${SB_TMUX[@]}" select-pane -t "$SESSION:0.2" -T events &&
		"${SB_TMUX[@]}" set-option -t "$SESSION" pane-border-status top > /dev/null &&
		"${SB_TMUX[@]}" select-pane -t "$SESSION:0.0"
}

# sb_shells_left: how many of the two shell panes are still there (a pane closes when its
# shell exits); 0 too when the session was ended.
sb_shells_left() {
	local ids id n=0
	ids=$("${SB_TMUX[@]}" list-panes -t "$SESSION" -F '#{pane_id}' 2> /dev/null) || { echo 0; return; }
	for id in $SB_PANES; do
		! grep -qxF -- "$id" <<< "$ids" || n=$((n + 1))
	done
	echo "$n"
}

# sb_finish: the probes stopped (each prints its end line), the counters read after, the live
# pane drained, tmux ended, the outputs written.  Called from rs_cleanup (as the hook it calls
# for run.sh's units, kill_running_units), so Ctrl-C, SIGTERM and the normal exit all come
# through here while the namespaces still exist; it runs once.
kill_running_units() {
	local pid side raw=$TMPDIR_RUN/raw left
	[ -z "$SB_FINISHED" ] || return 0
	SB_FINISHED=1
	[ -n "$SB_STARTED" ] || return 0
	# SIGTERM, not SIGINT: a background job of a non-interactive bash ignores SIGINT
	for pid in "${SB_PIDS[@]}"; do kill -TERM "$pid" 2> /dev/null; done
	for left in $(seq 500 -1 1); do
		for pid in "${SB_PIDS[@]}"; do kill -0 "$pid" 2> /dev/null && break; done
		kill -0 "$pid" 2> /dev/null || break
		sleep 0.01
	done
	for pid in "${SB_PIDS[@]}"; do kill -KILL "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; done
	for side in client server; do
		sb_in "$side" "$BIN/counters" > "$raw/$side-counters-after.txt" &&
			"$BIN/counters" -d "$raw/$side-counters-before.txt" -a "$raw/$side-counters-after.txt" \
				> "$raw/$side-counters-delta.txt"
	done
	: > "$TMPDIR_RUN/live.stop"
	# live.py prints the counter deltas, then its end line, and exits
	for left in $(seq 300 -1 1); do
		grep -q '^end ' "$TMPDIR_RUN/events.txt" 2> /dev/null && break
		if [ -n "$SB_LIVE_PID" ]; then kill -0 "$SB_LIVE_PID" 2> /dev/null || break; fi
		sleep 0.01
	done
	: "$left"
	[ -z "$SB_LIVE_PID" ] || wait "$SB_LIVE_PID" 2> /dev/null
	[ "${#SB_TMUX[@]}" -eq 0 ] || "${SB_TMUX[@]}" kill-server 2> /dev/null
	rm -f -- "$TMPDIR_RUN/live.stop" "$TMPDIR_RUN/tmux.sock"
	find "$raw" -name '*.err' -empty -delete 2> /dev/null
	[ ! -f "$raw/sandbox.pcap" ] || mv -f -- "$raw/sandbox.pcap" "$OUT/sandbox.pcap"
	[ ! -f "$TMPDIR_RUN/events.txt" ] || mv -f -- "$TMPDIR_RUN/events.txt" "$OUT/events.txt"
	mv -T -- "$raw" "$OUT/raw" || { echo "$PROG: cannot put raw/ in $OUT" >&2; return 1; }
	if python3 "$HERE/summary.py" "$OUT/raw" "$OUT"; then
		log "outputs in $OUT: sandbox.txt, sandbox.json, sandbox.pcap, events.txt, raw/"
		cat -- "$OUT/sandbox.txt"
	else
		SB_STATUS=1
	fi
}

SB_STATUS=0
sb_exit() {	# the EXIT trap: the outputs' status wins over a clean shell exit
	local status=$?
	trap '' INT TERM HUP QUIT	# as rs_cleanup: nothing cuts the outputs short
	set +eu
	kill_running_units
	[ "$SB_STATUS" -eq 0 ] || status=$SB_STATUS
	rs_cleanup "$status"
}

rs_start
trap sb_exit EXIT
NS_C=$NS_PREFIX-sbc-$RS_RUN_ID
NS_S=$NS_PREFIX-sbs-$RS_RUN_ID
make_ns "$NS_C" || die $EXIT_FAIL "cannot create namespace $NS_C"
make_ns "$NS_S" || die $EXIT_FAIL "cannot create namespace $NS_S"
wire_create "$NS_C" "$NS_S" "$WIRE_MTU_DEFAULT" || die $EXIT_FAIL "cannot build the wire"
mkdir -- "$TMPDIR_RUN/raw"
{
	echo "## client side ($WIRE_CLIENT_IF)"
	wire_record "$NS_C" "$WIRE_CLIENT_IF"
	echo "## server side ($WIRE_SERVER_IF)"
	wire_record "$NS_S" "$WIRE_SERVER_IF"
} > "$TMPDIR_RUN/raw/wire.txt" 2>&1 || true
SB_STARTED=1
sb_start_probes "$TMPDIR_RUN/raw" || exit $EXIT_FAIL
date -u +%Y-%m-%dT%H:%M:%SZ > "$TMPDIR_RUN/raw/started.txt"
uname -r > "$TMPDIR_RUN/raw/kernel.txt"

if [ -n "$SHELL_SIDE" ]; then
	# in the client namespace, as the live pane is: a killed run's reaper stops it with it
	nsenter --net="/run/netns/$NS_C" python3 "$HERE/live.py" --raw "$TMPDIR_RUN/raw" \
		--stop "$TMPDIR_RUN/live.stop" --log "$TMPDIR_RUN/events.txt" > /dev/null &
	SB_LIVE_PID=$!
	log "a shell in the $SHELL_SIDE namespace; exit it to end the sandbox"
	sb_shell_argv "$SHELL_SIDE"
	# The shell is waited for, not run in the foreground: bash runs a trap only once its
	# foreground command is done, and SIGTERM must end the sandbox while the shell still runs.
	# A Ctrl-C typed in the shell is the shell's (a trap that does nothing, which its children do
	# not inherit); env gives SIGINT and SIGQUIT back their defaults, which bash takes from a
	# background job when job control is off.
	# (a subshell ending in a line of its own: see test_every_signal_trap_ends_in_its_own_close_paren)
	trap '(:
)' INT
	env --default-signal=INT,QUIT "${SB_SHELL[@]}" <&0 &
	pid=$!
	while kill -0 "$pid" 2> /dev/null; do wait "$pid" || true; done
	exit 0
fi

sock=$TMPDIR_RUN/tmux.sock
[ "${#sock}" -le 100 ] || die $EXIT_USAGE "--out $OUT: too long a path for tmux's socket ($((${#sock})) > 100 bytes)"
sb_tmux_session || die $EXIT_FAIL "cannot start the tmux session"
log "tmux session ready: tmux -S $sock attach -t $SESSION"
if [ -t 0 ] && [ -t 1 ]; then
	# the user's terminal; when the shells are gone, the watcher below ends the session and
	# attach returns
	( while [ "$(sb_shells_left)" -ge 1 ]; do sleep 0.2; done
	  "${SB_TMUX[@]}" kill-session -t "$SESSION" 2> /dev/null ) &
	"${SB_TMUX[@]}" attach -t "$SESSION" || true
else
	# no terminal (a script drives the panes with tmux send-keys): wait until both shells exit
	# or the session is ended
	while [ "$(sb_shells_left)" -ge 1 ]; do sleep 0.2; done
fi
exit 0
