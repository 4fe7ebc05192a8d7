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
	# the reason run.sh reports (raw/<unit>/status.txt, docs/output-format.md)
	[ -z "${RAW:-}" ] || [ ! -d "$RAW" ] || echo "failed: $*" > "$RAW/status.txt" 2>/dev/null
	exit 1
}

# tl_running PID: whether PID is still running (not gone, not a zombie waiting for wait).
tl_running() {
	# builtins only: this is polled every 10 ms, beside units that measure speed
	{ read -r _st < "/proc/$1/stat"; } 2>/dev/null || return 1
	_st=${_st##*) }
	_st=${_st%% *}
	[ -n "$_st" ] && [ "$_st" != Z ]
}

# tl_name PID: the program tl_bg started as PID (for messages).
tl_name() {
	for _nm in $TL_NAMES; do
		[ "${_nm%%:*}" != "$1" ] || { echo "${_nm#*:}"; return 0; }
	done
	echo "pid $1"
}

# Stop everything still running: SIGTERM (and SIGCONT, so a stopped process gets it), up to
# 2 s for it to end, then SIGKILL; never waits on a process that cannot end.
tl_cleanup() {
	for p in $TL_PIDS; do
		kill -TERM "$p" 2>/dev/null
		kill -CONT "$p" 2>/dev/null
	done
	_left=200
	for p in $TL_PIDS; do
		while tl_running "$p" && [ "$_left" -gt 0 ]; do
			_left=$((_left - 1))
			sleep 0.01
		done
		tl_running "$p" && kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	TL_PIDS=""
}

# tl_elf FILE: whether FILE is an executable ELF file (a truncated or empty one is not: sh would
# run an empty file as an empty script and report success).
tl_elf() {
	[ -f "$1" ] && [ -x "$1" ] && [ "$(dd if="$1" bs=1 skip=1 count=3 2>/dev/null)" = ELF ]
}

# tl_init RAWDIR: create the raw directory, install the trap, check the programs are there.
tl_init() {
	[ -n "${1:-}" ] || tl_die "usage: $0 RAWDIR"
	RAW=$1
	mkdir -p "$RAW" || tl_die "cannot create $RAW"
	[ -x "$TL_BIN/sockwatch" ] || tl_die "programs not built in $TL_BIN (run make)"
	for _p in "$TL_BIN"/*; do
		case $_p in *.tmp) continue ;; esac	# a link the Makefile has not renamed yet
		[ ! -f "$_p" ] || tl_elf "$_p" || tl_die "$_p is not an executable program (run make)"
	done
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
	TL_NAMES="$TL_NAMES $TL_LAST:$(basename "$_out" .txt)"
}

# tl_wait_line PID FILE PATTERN TIMEOUT_S: poll FILE until a line matches PATTERN (grep -E).
# Fails when PID exits first or TIMEOUT_S passes; the failing program's stderr is shown.
tl_wait_line() {
	_pid=$1 _file=$2 _pat=$3 _left=$(($4 * 100))
	while ! grep -Eq "$_pat" "$_file" 2>/dev/null; do
		if ! tl_running "$_pid"; then
			cat "$_file.err" >&2 2>/dev/null
			tl_die "$(basename "$_file" .txt) exited before '$_pat'"
		fi
		_left=$((_left - 1))
		[ "$_left" -gt 0 ] || tl_die "no '$_pat' in $_file after $4 s"
		sleep 0.01
	done
}

# tl_reap PID: wait for PID (already ended) and forget it; its exit status is left in TL_RC.
tl_reap() {
	TL_RC=0
	wait "$1" 2>/dev/null || TL_RC=$?
	tl_forget "$1"
}

# tl_wait_exit PID TIMEOUT_S: wait for a process that ends by itself, at most TIMEOUT_S; it must
# exit 0 (anything else, a signal included, fails the unit).
tl_wait_exit() {
	_pid=$1 _left=$(($2 * 100))
	while tl_running "$_pid"; do
		_left=$((_left - 1))
		if [ "$_left" -le 0 ]; then
			tl_die "$(tl_name "$_pid") still running after $2 s"
		fi
		sleep 0.01
	done
	_nm=$(tl_name "$_pid")
	tl_reap "$_pid"
	[ "$TL_RC" -eq 0 ] || tl_die "$_nm exited with status $TL_RC"
}

# tl_stop PID: a process that must still be running: SIGTERM, then reap.  It must end as asked:
# exit 0, or die of that SIGTERM (143).  One that had already ended, or ends otherwise, fails
# the unit.
tl_stop() {
	_nm=$(tl_name "$1")
	if ! tl_running "$1"; then
		tl_reap "$1"
		tl_die "$_nm ended (status $TL_RC) before it was stopped"
	fi
	kill -TERM "$1" 2>/dev/null
	tl_reap "$1"
	case $TL_RC in 0 | 143) ;; *) tl_die "$_nm ended with status $TL_RC when stopped" ;; esac
}

# tl_fg OUT CMD...: run a client fixture in the foreground, stdout to OUT.  It must exit 0 and
# not say result=interrupted (a SIGINT/SIGTERM from outside ended it early: connect_block and
# connect_timeout then still exit 0).
tl_fg() {
	_fout=$1
	shift
	_frc=0
	"$@" > "$_fout" || _frc=$?
	[ "$_frc" -eq 0 ] || tl_die "$(basename "$_fout" .txt) exited with status $_frc"
	tl_not_interrupted "$_fout"
}

# tl_not_interrupted OUT: fail the unit when the client that wrote OUT says it was interrupted.
tl_not_interrupted() {
	! grep -q 'result=interrupted' "$1" ||
		tl_die "$(basename "$1" .txt) was interrupted (a signal from outside the unit)"
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
# Its times are sockwatch's t_s, counted from sockwatch's start ("watch+"); the reports count
# from connect(), so the same event has a smaller time there.
tl_progress() {
	while IFS= read -r _line; do
		case $_line in
		ready*) tl_log "sockwatch ready: watch+ times count from its start (reports count from connect())" ;;
		*event=*)
			_t=${_line#t_s=}; _t=${_t%% *}
			_ev=${_line#*event=}; _ev=${_ev%% *}
			_st=${_line#*state=}; _st=${_st%% *}
			_rt=${_line#*retrans=}; _rt=${_rt%% *}
			_ex=${_line#*expires_ms=}; _ex=${_ex%% *}
			tl_log "watch+${_t} s ${_ev} ${_st} retrans=${_rt} next timer in ${_ex} ms"
			;;
		esac
	done
}

# tl_watch OUTFILE SOCKWATCH_ARGS...: start sockwatch; its lines go to OUTFILE (through tee) and,
# one per event, to stderr for a person (tl_progress).  Waits for its `ready` line.  Pids:
# TL_WATCH (sockwatch), TL_TEE, TL_PROGRESS; two fifos keep each one a process of its own, so
# each one's exit status can be checked (tl_unwatch).
tl_watch() {
	_wout=$1
	shift
	rm -f "$_wout.fifo" "$_wout.progress.fifo"
	mkfifo "$_wout.fifo" "$_wout.progress.fifo" || tl_die "mkfifo $_wout.fifo"
	tl_progress < "$_wout.progress.fifo" &
	TL_PROGRESS=$!
	TL_PIDS="$TL_PIDS $TL_PROGRESS"
	TL_NAMES="$TL_NAMES $TL_PROGRESS:progress"
	tee "$_wout" < "$_wout.fifo" > "$_wout.progress.fifo" &
	TL_TEE=$!
	TL_PIDS="$TL_PIDS $TL_TEE"
	TL_NAMES="$TL_NAMES $TL_TEE:tee"
	"$TL_BIN/sockwatch" "$@" > "$_wout.fifo" 2> "$_wout.err" &
	TL_WATCH=$!
	TL_PIDS="$TL_PIDS $TL_WATCH"
	TL_NAMES="$TL_NAMES $TL_WATCH:sockwatch"
	tl_wait_line "$TL_WATCH" "$_wout" '^ready ' 5
}

# tl_unwatch S: the watcher (sockwatch -e) must exit by itself within S s, exit 0, and have seen
# its sockets go (its last event `gone`, then its `end` line: a SIGTERM or SIGINT from elsewhere
# ends it early with exit 0); tl_unwatch stop: SIGTERM it (a watcher without -e).  Either way tee
# and the progress reader must then end with exit 0.  Removes the fifos.
tl_unwatch() {
	if [ "$1" = stop ]; then
		tl_stop "$TL_WATCH"
	else
		tl_wait_exit "$TL_WATCH" "$1"
	fi
	tl_wait_exit "$TL_TEE" 5
	tl_wait_exit "$TL_PROGRESS" 5
	rm -f "$_wout.fifo" "$_wout.progress.fifo"
	tail -n 1 "$_wout" | grep -q '^end ' || tl_die "sockwatch output $_wout has no end line"
	if [ "$1" != stop ]; then
		grep '^t_s=' "$_wout" | tail -n 1 | grep -q ' event=gone ' ||
			tl_die "sockwatch ended before its sockets were gone (stopped from outside?)"
	fi
}
