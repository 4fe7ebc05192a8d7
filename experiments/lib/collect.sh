# collect.sh — helpers for experiment collect scripts.  POSIX sh: busybox ash runs these in the
# QEMU guest, dash or bash on the host.  Source it, then call tl_init "$1".
#
# Every background process goes through tl_bg, so the EXIT/INT/TERM trap can stop all of them;
# readiness is always polled (tl_wait_line), never assumed after a sleep.

TL_BIN=${TL_BIN:-$(cd "$(dirname "$0")/../build/bin" 2>/dev/null && pwd)}
TL_PIDS=""
TL_UNIT=${TL_UNIT:-$(basename "$0" .sh)}

tl_log() {
	printf '[%s] %s\n' "$TL_UNIT" "$*" >&2
}

tl_die() {
	tl_log "error: $*"
	exit 1
}

tl_cleanup() {
	for p in $TL_PIDS; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in $TL_PIDS; do
		wait "$p" 2>/dev/null
	done
	TL_PIDS=""
}

# tl_init RAWDIR: create the raw directory, install the trap, check the programs are there.
tl_init() {
	[ -n "${1:-}" ] || tl_die "usage: $0 RAWDIR"
	RAW=$1
	mkdir -p "$RAW" || tl_die "cannot create $RAW"
	[ -x "$TL_BIN/sockwatch" ] || tl_die "programs not built in $TL_BIN (run make)"
	trap 'tl_cleanup' EXIT
	trap 'tl_cleanup; exit 130' INT
	trap 'tl_cleanup; exit 143' TERM
	date -u +%Y-%m-%dT%H:%M:%SZ > "$RAW/collected-at.txt"
}

# tl_bg OUTFILE CMD...: start CMD in the background, stdout to OUTFILE, stderr to OUTFILE.err;
# its pid is left in TL_LAST.
tl_bg() {
	_out=$1
	shift
	"$@" > "$_out" 2> "$_out.err" &
	TL_LAST=$!
	TL_PIDS="$TL_PIDS $TL_LAST"
}

# tl_wait_line PID FILE PATTERN TIMEOUT_S: poll FILE until a line matches PATTERN (grep -E).
# Fails when PID exits first or TIMEOUT_S passes; the failing program's stderr is shown.
tl_wait_line() {
	_pid=$1 _file=$2 _pat=$3 _left=$(($4 * 100))
	while ! grep -Eq "$_pat" "$_file" 2>/dev/null; do
		if ! kill -0 "$_pid" 2>/dev/null; then
			cat "$_file.err" >&2 2>/dev/null
			tl_die "$(basename "$_file" .txt) exited before '$_pat'"
		fi
		_left=$((_left - 1))
		[ "$_left" -gt 0 ] || tl_die "no '$_pat' in $_file after $4 s"
		sleep 0.01
	done
}

# tl_wait_exit PID TIMEOUT_S: wait for a process that ends by itself, at most TIMEOUT_S.
tl_wait_exit() {
	_pid=$1 _left=$(($2 * 100))
	while kill -0 "$_pid" 2>/dev/null; do
		_left=$((_left - 1))
		if [ "$_left" -le 0 ]; then
			kill -TERM "$_pid" 2>/dev/null
			wait "$_pid" 2>/dev/null
			tl_die "pid $_pid still running after $2 s"
		fi
		sleep 0.01
	done
	wait "$_pid" 2>/dev/null
	tl_forget "$_pid"
}

# tl_stop PID: SIGTERM, then reap.
tl_stop() {
	kill -TERM "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	tl_forget "$1"
}

tl_forget() {
	_keep=""
	for p in $TL_PIDS; do
		[ "$p" = "$1" ] || _keep="$_keep $p"
	done
	TL_PIDS=$_keep
}

# tl_listener OUT ARGS...: start a listener fixture and wait for its `ready` line.
tl_listener() {
	_lout=$1
	shift
	tl_bg "$_lout" "$TL_BIN/listener" "$@"
	TL_LISTENER=$TL_LAST
	tl_wait_line "$TL_LISTENER" "$_lout" '^ready ' 5
}

# tl_progress: read sockwatch lines on stdin, print one line per event for a person on stderr.
tl_progress() {
	while IFS= read -r _line; do
		case $_line in
		*event=*)
			_t=${_line#t_s=}; _t=${_t%% *}
			_ev=${_line#*event=}; _ev=${_ev%% *}
			_st=${_line#*state=}; _st=${_st%% *}
			_rt=${_line#*retrans=}; _rt=${_rt%% *}
			_ex=${_line#*expires_ms=}; _ex=${_ex%% *}
			tl_log "t=${_t} s ${_ev} ${_st} retrans=${_rt} next timer in ${_ex} ms"
			;;
		esac
	done
}

# tl_watch OUTFILE SOCKWATCH_ARGS...: start sockwatch; its lines go to OUTFILE and, one per
# event, to stderr for a person.  Waits for its `ready` line; its pid is left in TL_WATCH.
# A fifo keeps TL_WATCH the pid of sockwatch itself, so stopping it ends the readers too.
tl_watch() {
	_wout=$1
	shift
	rm -f "$_wout.fifo"
	mkfifo "$_wout.fifo" || tl_die "mkfifo $_wout.fifo"
	tee "$_wout" < "$_wout.fifo" | tl_progress &
	TL_PIDS="$TL_PIDS $!"
	"$TL_BIN/sockwatch" "$@" > "$_wout.fifo" 2> "$_wout.err" &
	TL_WATCH=$!
	TL_PIDS="$TL_PIDS $TL_WATCH"
	tl_wait_line "$TL_WATCH" "$_wout" '^ready ' 5
}

# tl_unwatch: wait (at most $1 s) for the watcher to exit by itself (-e), then remove its fifo.
tl_unwatch() {
	tl_wait_exit "$TL_WATCH" "$1"
	rm -f "$_wout.fifo"
}
