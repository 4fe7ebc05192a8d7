# collect.sh — helpers for experiment collect scripts.  POSIX sh: busybox ash runs these in the
# QEMU guest, dash or bash on the host.  Source it, then call tl_init "$1".
#
# Every background process goes through tl_bg, so the EXIT/INT/TERM trap can stop all of them;
# readiness is always polled (tl_wait_line), never assumed after a sleep.

TL_BIN=${TL_BIN:-$(cd "$(dirname "$0")/.." 2>/dev/null && cd ../build/bin 2>/dev/null && pwd)}
TL_PIDS=""
TL_UNIT=${TL_UNIT:-$(basename "$0" .sh)}
TL_LIB=$(dirname "$0")/../lib

tl_log() {
	printf '[%s] %s\n' "$TL_UNIT" "$*" >&2
}

tl_die() {
	tl_log "error: $*"
	# the reason run.sh reports (raw/<unit>/status.txt, docs/output-format.md)
	[ -z "${RAW:-}" ] || [ ! -d "$RAW" ] || echo "failed: $*" > "$RAW/status.txt" 2>/dev/null
	exit 1
}

# tl_knob NAME VALUE MIN MAX: a knob of the unit (experiments/units), checked here too, for a
# run without run.sh: a whole number MIN..MAX, or one line and exit 2 before anything is made.
tl_knob() {
	case $2 in
	'' | *[!0-9]* | 0?* | ??????????*) ;;
	*) [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] && return 0 ;;
	esac
	echo "$TL_UNIT: knob $1='$2': want $3..$4" >&2
	exit 2
}

# tl_knob_set VAR NAME VALUE MIN MAX: VALUE (the script's "${TL_KNOB_NAME:-DEFAULT}") checked as
# tl_knob NAME does, then set as the script's variable VAR.
tl_knob_set() {
	tl_knob "$2" "$3" "$4" "$5"
	eval "$1=\$3"
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

# tl_child PID: whether PID is still a child of this shell.  dash reaps any child that ended
# while it waits for another (wait3), so a pid in TL_PIDS may be free by now, and pids wrap
# within minutes on a busy machine (kernel.pid_max 32768 here): a signal to it could reach
# another run's process (CI: a vm.sh SIGKILLed, exit -9).
tl_child() {
	{ read -r _cs < "/proc/$1/stat"; } 2>/dev/null || return 1
	_cs=${_cs##*) }
	_cs=${_cs#* }
	[ "${_cs%% *}" = "$$" ]
}

# Stop everything still running: SIGTERM (and SIGCONT, so a stopped process gets it), up to
# 2 s for it to end, then SIGKILL; never waits on a process that cannot end, and never signals
# a pid that is no longer this shell's child.
tl_cleanup() {
	_ours=""
	for p in $TL_PIDS; do
		tl_child "$p" || continue
		_ours="$_ours $p"
		kill -TERM "$p" 2>/dev/null
		kill -CONT "$p" 2>/dev/null
	done
	_left=200
	for p in $_ours; do
		while tl_running "$p" && [ "$_left" -gt 0 ]; do
			_left=$((_left - 1))
			sleep 0.01
		done
		tl_running "$p" && tl_child "$p" && kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	TL_PIDS=""
	# a unit that died between tl_watch and tl_unwatch leaves tl_watch's fifos: they are not
	# data, and a failed unit's raw directory is kept (and may be committed: git cannot hold one)
	for p in "${RAW:-/nonexistent}"/*.fifo; do
		[ ! -p "$p" ] || rm -f "$p"
	done
	# a program's stderr file stays only if it wrote something (docs/output-format.md): here,
	# once every program is stopped, so the host and the guests leave the same files
	for p in "${RAW:-/nonexistent}"/*.err; do
		[ ! -f "$p" ] || [ -s "$p" ] || rm -f "$p"
	done
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
	{ [ -x "$TL_BIN/sockwatch" ] && [ -x "$TL_BIN/waitfor" ]; } ||
		tl_die "programs not built in $TL_BIN (run make)"
	for _p in "$TL_BIN"/*; do
		case $_p in *.tmp) continue ;; esac	# a link the Makefile has not renamed yet
		[ ! -f "$_p" ] || tl_elf "$_p" || tl_die "$_p is not an executable program (run make)"
	done
	if [ -n "${TL_WIRE:-}" ]; then
		[ -n "${TL_NS_SERVER:-}" ] && [ -e "/run/netns/$TL_NS_SERVER" ] ||
			tl_die "TL_WIRE is set but the server namespace '${TL_NS_SERVER:-}' does not exist"
		# shellcheck source=experiments/lib/wire.sh
		. "$TL_LIB/wire.sh"
		TL_CLIENT_ADDR=$WIRE_CLIENT_ADDR TL_SERVER_ADDR=$WIRE_SERVER_ADDR
		TL_CLIENT_IF=$WIRE_CLIENT_IF TL_SERVER_IF=$WIRE_SERVER_IF
	fi
	# TL_WATCH_US: the continuous watchers' sampling interval (sockwatch -i, in us): sockwatch's
	# 1 ms default; in a QEMU guest (TL_GUEST) a unit whose facts are timers of a second or more
	# sets TL_GUEST_WATCH_US before this, for under TCG a watcher waking every ms costs the guest
	# half a core (docs/kernel-matrix.md, "Sampling in a guest")
	TL_WATCH_US=1000
	[ -z "${TL_GUEST:-}" ] || TL_WATCH_US=${TL_GUEST_WATCH_US:-1000}
	case $TL_WATCH_US in '' | *[!0-9]*) tl_die "TL_GUEST_WATCH_US=$TL_WATCH_US: not a number of us" ;; esac
	# TL_WATCH_LEAD: "-T MS" (sockwatch's timer-led sampling) for the continuous watchers of a
	# unit whose watched sockets only their own timers change (TIME-WAIT, a SYN-SENT nothing
	# answers), in a QEMU guest, when the unit sets TL_GUEST_TIMER_LED_MS; empty otherwise
	TL_WATCH_LEAD=""
	if [ -n "${TL_GUEST:-}" ] && [ -n "${TL_GUEST_TIMER_LED_MS:-}" ]; then
		case $TL_GUEST_TIMER_LED_MS in
		*[!0-9]*) tl_die "TL_GUEST_TIMER_LED_MS=$TL_GUEST_TIMER_LED_MS: not a number of ms" ;;
		esac
		TL_WATCH_LEAD="-T $TL_GUEST_TIMER_LED_MS"
	fi
	trap 'tl_cleanup' EXIT
	# each action exits, and ends in a line of its own with a `)`, never read then: a shell that
	# is bash 5.2 as sh parses a trap held until a `$(` in that `$(`'s state (runstate.sh's
	# rs_trap_signals says more); dash reads the first line and exits
	trap "tl_cleanup; exit 130
)" INT
	trap "tl_cleanup; exit 143
)" TERM
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
	tl_wait_count "$1" "$2" "$3" 1 "$4"
}

# tl_wait_count PID FILE PATTERN COUNT TIMEOUT_S: wait (up to TIMEOUT_S) until COUNT of FILE's
# lines match the extended regex PATTERN, while PID runs; tl_die if PID ends first or the time
# runs out.  A program that prints the lines and exits between one look and the next has still
# printed them: FILE is read once more after PID is seen gone.  probes/waitfor does the wait in
# one process (FILE read where it stopped, every 10 ms; PID's end by a pidfd): a grep and a
# sleep every 10 ms cost a QEMU guest most of a core (docs/kernel-matrix.md, "Waiting in a guest").
tl_wait_count() {
	_what=""
	[ "$4" -eq 1 ] || _what=" $4 lines of"
	"$TL_BIN/waitfor" -p "$1" -f "$2" -e "$3" -n "$4" -t "$(($5 * 1000))"
	case $? in
	0) ;;
	1)
		# name the program that ended (it need not be the one writing FILE), and its stderr
		_nm=$(tl_name "$1")
		case $_nm in "pid "*) _nm=$(basename "$2" .txt) ;; esac
		cat "$RAW/$_nm.txt.err" >&2 2>/dev/null || cat "$2.err" >&2 2>/dev/null
		# and its last line on stdout, when it is not FILE: often why it ended (fill_sender's
		# result=, once seen only as "exited before" in CI, its raw files gone with the test's)
		if [ "$RAW/$_nm.txt" != "$2" ] && [ -s "$RAW/$_nm.txt" ]; then
			tail -n 1 "$RAW/$_nm.txt" | while IFS= read -r _l; do
				printf '%s: its last line: %s\n' "$_nm" "$_l" >&2
			done
		fi
		tl_die "$_nm exited before$_what '$3' in $(basename "$2")" ;;
	3) tl_die "no$_what '$3' in $2 after $5 s" ;;
	*) tl_die "waitfor failed waiting for '$3' in $2" ;;
	esac
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
	_pid=$1
	"$TL_BIN/waitfor" -p "$_pid" -t "$(($2 * 1000))"
	case $? in
	0) ;;
	3) tl_die "$(tl_name "$_pid") still running after $2 s" ;;
	*) tl_die "waitfor failed waiting for $(tl_name "$_pid") to end" ;;
	esac
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

# tl_watch OUTFILE SOCKWATCH_ARGS...: start sockwatch, sampling every TL_WATCH_US (tl_init),
# timer-led with TL_WATCH_LEAD; its
# lines go to OUTFILE (through tee) and, one per event, to stderr for a person (tl_progress).
# Waits for its `ready` line.  Pids: TL_WATCH (sockwatch), TL_TEE, TL_PROGRESS; two fifos keep
# each one a process of its own, so each one's exit status can be checked (tl_unwatch).
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
	# shellcheck disable=SC2086 # TL_WATCH_LEAD is empty or two words
	"$TL_BIN/sockwatch" -i "$TL_WATCH_US" $TL_WATCH_LEAD "$@" > "$_wout.fifo" 2> "$_wout.err" &
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

# ---- the wire (units whose netns is "wire" in experiments/units; docs/wire.md) ---------------
# The collect script runs in the client namespace; TL_NS_SERVER names the server's.  The
# addresses and interfaces: TL_CLIENT_ADDR/TL_CLIENT_IF here, TL_SERVER_ADDR/TL_SERVER_IF there.

# tl_srv CMD...: CMD in the server namespace (nsenter execs it: the pid is CMD's).
tl_srv() {
	nsenter --net="/run/netns/$TL_NS_SERVER" "$@"
}

# tl_wire_init RAWDIR: tl_init for a wire unit: the unit must run on the wire, and the machine
# probe describes each side (its links as run.sh made them, before the unit's faults or netem):
# raw/machine.txt (this, the client's namespace) and raw/machine-server.txt.
tl_wire_init() {
	tl_init "$1"
	[ -n "${TL_WIRE:-}" ] || tl_die "$TL_UNIT needs the wire (netns 'wire' in experiments/units)"
	"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
	tl_srv "$TL_BIN/machine" > "$RAW/machine-server.txt" || tl_die "machine (server side) failed"
}

# tl_both_counters_before PREFIX: a counters snapshot on each side, each read in its own
# namespace: raw/PREFIXcounters-before.txt (the client) and PREFIXserver-counters-before.txt.
tl_both_counters_before() {
	"$TL_BIN/counters" > "$RAW/$1counters-before.txt" || tl_die "counters failed"
	tl_srv "$TL_BIN/counters" > "$RAW/$1server-counters-before.txt" ||
		tl_die "counters (server side) failed"
}

# tl_both_counters_after PREFIX CLIENT_KEEP SERVER_KEEP: each side's delta since its snapshot,
# the counters named always printed (counters -k): PREFIXcounters-delta.txt and
# PREFIXserver-counters-delta.txt.
tl_both_counters_after() {
	"$TL_BIN/counters" -d "$RAW/$1counters-before.txt" -k "$2" > "$RAW/$1counters-delta.txt" ||
		tl_die "counters failed"
	tl_srv "$TL_BIN/counters" -d "$RAW/$1server-counters-before.txt" -k "$3" \
		> "$RAW/$1server-counters-delta.txt" || tl_die "counters (server side) failed"
}

# tl_srv_listener OUT ARGS...: a listener fixture in the server namespace, polled until `ready`.
tl_srv_listener() {
	_lout=$1
	shift
	tl_bg "$_lout" nsenter --net="/run/netns/$TL_NS_SERVER" "$TL_BIN/listener" "$@"
	TL_LISTENER=$TL_LAST
	tl_wait_line "$TL_LISTENER" "$_lout" '^ready ' 5
}

# ---- the close lessons (p05-close-wait, p05-fin-wait2-timeout): connections watched on both sides
# until the client's end is gone; each connection to a peer server that reads to EOF and holds
# its socket in CLOSE-WAIT.

# tl_close_init RAWDIR: tl_wire_init, then what such a unit reads: SYSCTLS (for tl_sysctls),
# CLIENT_STATES and SERVER_STATES (sockwatch's -s options for each side), KEEP and KEEP_S (the
# counters each side always prints, counters -k).
# shellcheck disable=SC2034 # read by the unit scripts
tl_close_init() {
	tl_wire_init "$1"
	SYSCTLS="ipv4/tcp_fin_timeout ipv4/tcp_keepalive_time ipv4/tcp_orphan_retries
ipv4/tcp_max_tw_buckets ipv4/tcp_rto_min_us ipv4/tcp_timestamps"
	CLIENT_STATES="-s syn-sent -s estab -s fin-wait-1 -s fin-wait-2 -s closing -s time-wait"
	SERVER_STATES="-s estab -s close-wait -s last-ack"
	KEEP="TcpExtTW,TcpExtTWKilled,TcpExtTCPAbortOnLinger,TcpExtTCPAbortOnData,TcpExtTCPAbortOnClose"
	KEEP="$KEEP,TcpOutRsts,TcpActiveOpens,TcpEstabResets"
	KEEP_S="TcpPassiveOpens,TcpEstabResets,TcpInErrs,TcpExtTCPAbortOnData,TcpCurrEstab"
}

# tl_srv_holder OUT PORT: a peer server in the server namespace on TL_SERVER_ADDR:PORT that
# reads to EOF, then holds its socket (CLOSE-WAIT) until SIGUSR1, then closes
# (-s drain,hold,close); polled until `ready`, its pid in TL_LAST.
tl_srv_holder() {
	tl_bg "$1" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/peer" -r server -a "$TL_SERVER_ADDR" -p "$2" -s drain,hold,close
	tl_wait_line "$TL_LAST" "$1" '^ready ' 5
}

# tl_side SIDE: the namespace (wire_in's name; "-" is this one) and interface of client|server,
# in _sns and _sif.
tl_side() {
	case $1 in
	client) _sns=- _sif=$TL_CLIENT_IF ;;
	server) _sns=$TL_NS_SERVER _sif=$TL_SERVER_IF ;;
	*) tl_die "side '$1': want client or server" ;;
	esac
}

# tl_sysctls "LIST" [CMD...]: net.X.Y=VALUE for each sysctl of LIST (paths under /proc/sys/net,
# e.g. ipv4/tcp_fin_timeout), read through CMD (tl_srv: in the server's namespace; none: this
# one), blanks squeezed (ip_local_port_range is tab-separated); VALUE "absent" where this kernel
# has no such file.  The flat form every report reads (tcplab.read_sysctl_file).
tl_sysctls() {
	_list=$1
	shift
	for _s in $_list; do
		_v=$("$@" cat "/proc/sys/net/$_s" 2>/dev/null) || _v=absent
		echo "net.$(echo "$_s" | tr / .)=$(echo "$_v" | tr -s ' \t' '  ')"
	done
}

# tl_in SIDE CMD...: CMD on that side.
tl_in() {
	tl_side "$1"
	shift
	wire_in "$_sns" "$@"
}

# tl_fault SIDE HOOK ACTION MATCH...: one nft rule on that side (wire.sh's wire_fault: the actions
# and why they are count-based).  The ruleset as now loaded goes to raw/nft-SIDE.txt; a rule nft
# refuses ends the unit with nft's own error.
tl_fault() {
	_fside=$1
	shift
	tl_side "$_fside"
	tl_log "fault on the $_fside side: $*"
	_ferr=$(wire_fault "$_sns" "$@" 2>&1) || tl_die "${_ferr#wire: }"
	tl_in "$_fside" nft list ruleset > "$RAW/nft-$_fside.txt" || tl_die "nft list ruleset failed"
}

# tl_fault_clear SIDE: that side's rules removed (a held packet flow released).
tl_fault_clear() {
	tl_log "faults on the $1 side removed"
	tl_side "$1"
	wire_fault_clear "$_sns" || tl_die "no nft table to remove on the $1 side"
}

# tl_netem SIDE ARGS...: netem as the root qdisc of that side's veth end (wire.sh's wire_netem);
# on a kernel without sch_netem the unit is skipped, with the reason.
tl_netem() {
	_nside=$1
	shift
	tl_side "$_nside"
	tl_log "netem on the $_nside side: $*"
	_nrc=0
	_nerr=$(wire_netem "$_sns" "$_sif" "$@" 2>&1) || _nrc=$?
	case $_nrc in
	0) ;;
	3) tl_skip "${_nerr#wire: }" ;;
	*) tl_die "${_nerr#wire: }" ;;
	esac
}

# tl_skip WHY: this unit cannot run on this kernel; run.sh reports it skipped, not failed.
tl_skip() {
	tl_log "skipped: $*"
	echo "skipped: $*" > "$RAW/status.txt"
	exit 3
}

# tl_wire_record: raw/wire.txt: each side's link, addresses, qdiscs and nft ruleset with its
# counters, as the kernel shows them at this point (call it at the end).
tl_wire_record() {
	{
		for _wside in client server; do
			tl_side "$_wside"
			echo "## $_wside side ($_sif)"
			wire_record "$_sns" "$_sif"
		done
	} > "$RAW/wire.txt" 2> "$RAW/wire.txt.err" || tl_die "recording the wire failed: $(head -n 1 "$RAW/wire.txt.err")"
	rm -f "$RAW/wire.txt.err"
}

# ---- tcpevents (probes/tcpevents; docs/tcpevents.md) ---------------------------------------

# tl_events_start PART PORT: tcpevents in this namespace for PORT, polled until ready; when it
# cannot run (not built, no BPF here), the reason in raw/PART-tcpevents-blind.txt and EV empty.
# Stop it with `[ -z "$EV" ] || tl_stop "$EV"` (docs/tcpevents.md).
tl_events_start() {
	EV=""
	if [ ! -x "$TL_BIN/tcpevents" ]; then
		echo "tcpevents is not built here (make says why: clang, bpftool, libbpf, BTF)" \
			> "$RAW/$1-tcpevents-blind.txt"
		return 0
	fi
	tl_bg "$RAW/$1-tcpevents.txt" "$TL_BIN/tcpevents" -p "$2"
	_ev=$TL_LAST
	_evrc=0
	"$TL_BIN/waitfor" -p "$_ev" -f "$RAW/$1-tcpevents.txt" -e '^ready ' -n 1 -t 10000 || _evrc=$?
	case $_evrc in
	0) EV=$_ev ;;
	1)
		tl_reap "$_ev"
		_why=$(head -n 1 "$RAW/$1-tcpevents.txt.err")
		echo "${_why:-tcpevents exited with status $TL_RC before it was ready}" \
			> "$RAW/$1-tcpevents-blind.txt"
		rm -f "$RAW/$1-tcpevents.txt" "$RAW/$1-tcpevents.txt.err"
		tl_log "$1: tcpevents cannot run: $(cat "$RAW/$1-tcpevents-blind.txt")" ;;
	*) tl_die "no ready line from tcpevents after 10 s" ;;
	esac
}

# tl_netns_etc: /etc files of this namespace's own, as `ip netns exec NS` bind-mounts
# /etc/netns/NS over /etc (ip-netns(8)): NS (ip netns identify; a unit not in a named namespace
# is skipped) and ETC, /etc/netns/NS, made here, and IN_NS, the command prefix that runs a
# program with them: `ip netns exec NS`.  In a QEMU guest (TL_GUEST) a unit runs alone, in a
# namespace busybox's ip cannot name (a wire unit's is tcplab-UNIT, init's name; another's has
# none), so NS is tcplab-UNIT there, and IN_NS is experiments/lib/etc-exec.sh (its path has no
# blank there: /tcplab/experiments/lib), which does ip netns exec's /etc part in a mount
# namespace of its own (docs/kernel-matrix.md, "Per-namespace /etc in the guest").  The trap
# is tl_etc_cleanup's from here on, so ETC is removed with everything else (after a SIGKILL, by
# experiments/lib/netns.sh when run.sh deletes the namespace).
tl_netns_etc() {
	if [ -n "${TL_GUEST:-}" ]; then
		NS=tcplab-$TL_UNIT
		IN_NS="unshare -m sh $TL_LIB/etc-exec.sh /etc/netns/$NS"
	else
		NS=$(ip netns identify 2>/dev/null) || NS=""
		[ -n "$NS" ] || tl_skip "not in a named network namespace (ip netns identify): /etc/netns/NAME cannot apply"
		IN_NS="ip netns exec $NS"
	fi
	case $NS in */* | .*) tl_die "namespace name '$NS' cannot be a directory name" ;; esac
	case $NS in *[!A-Za-z0-9._-]*) tl_die "namespace name '$NS' is not one word of [A-Za-z0-9._-]" ;; esac
	ETC=/etc/netns/$NS
	[ ! -e "$ETC" ] || tl_die "$ETC exists already: another run's, left alone"
	trap 'tl_etc_cleanup' EXIT
	# each action's `)` line: as tl_init's
	trap "tl_etc_cleanup; exit 130
)" INT
	trap "tl_etc_cleanup; exit 143
)" TERM
	# again at once if it failed: another run's cleanup removes /etc/netns when it finds it empty
	# (tl_etc_cleanup, netns.sh), and that can fall between mkdir -p's two steps (CI: "cannot
	# create /etc/netns/NS", a unit of the interrupt storm beside another p07 unit)
	_n=0
	until mkdir -p "$ETC" 2>/dev/null; do
		_n=$((_n + 1))
		[ "$_n" -lt 20 ] || tl_die "cannot create $ETC: $(mkdir -p "$ETC" 2>&1)"
	done
}

# tl_in_etc CMD...: CMD in the foreground with this namespace's /etc files (IN_NS, set by
# tl_netns_etc); a command for tl_bg takes $IN_NS itself, so that its pid is the program's.
tl_in_etc() {
	# shellcheck disable=SC2086 # IN_NS: a command prefix of plain words (tl_netns_etc checks NS)
	$IN_NS "$@"
}

# tl_etc_cleanup: tl_cleanup, then ETC (tl_netns_etc) removed, and /etc/netns where it is empty.
tl_etc_cleanup() {
	tl_cleanup
	rm -rf "$ETC"
	rmdir /etc/netns 2>/dev/null
	return 0
}

# tl_part_begin PART PORT: what a p04 part records from before its client starts: tcpevents for
# PORT (tl_events_start, its pid in EV), both sides' counters, and the capture at the client's
# end of the veth, all as raw/PART-*.
tl_part_begin() {
	tl_events_start "$1" "$2"
	tl_both_counters_before "$1-"
	tl_capture "$1-capture" "$TL_CLIENT_IF" "$2"
}

# tl_part_watch PART PORT OPTS...: what a part records from before its client starts, without
# tcpevents: both sides' counters, the capture at the client's end of the veth, then both sides'
# sockwatch with OPTS, the server's in its namespace for local port PORT
# (raw/PART-server-sockwatch.txt), the client's for peer port PORT (raw/PART-sockwatch.txt),
# each polled until ready; their pids in SW and CW.
tl_part_watch() {
	_wp=$1 _wport=$2
	shift 2
	tl_both_counters_before "$_wp-"
	tl_capture "$_wp-capture" "$TL_CLIENT_IF" "$_wport"
	tl_bg "$RAW/$_wp-server-sockwatch.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/sockwatch" -i "$TL_WATCH_US" "$@" -P "$_wport"
	SW=$TL_LAST
	tl_wait_line "$SW" "$RAW/$_wp-server-sockwatch.txt" '^ready ' 5
	tl_bg "$RAW/$_wp-sockwatch.txt" "$TL_BIN/sockwatch" -i "$TL_WATCH_US" "$@" -p "$_wport"
	CW=$TL_LAST
	tl_wait_line "$CW" "$RAW/$_wp-sockwatch.txt" '^ready ' 5
}

# tl_srv_rr PART PORT REPLY: an rr_server in the server namespace on TL_SERVER_ADDR:PORT that
# answers each request with REPLY bytes, its lines in raw/PART-server.txt; polled until `ready`,
# its pid in TL_LAST.
tl_srv_rr() {
	tl_bg "$RAW/$1-server.txt" nsenter --net="/run/netns/$TL_NS_SERVER" \
		"$TL_BIN/rr_server" -a "$TL_SERVER_ADDR" -p "$2" -R "$3"
	tl_wait_line "$TL_LAST" "$RAW/$1-server.txt" '^ready ' 5
}

# tl_rr_flight PART PORT N BODY REPLY: an rr_client to TL_SERVER_ADDR:PORT that sends N
# requests, each one writev of its 8-byte header and BODY bytes (a flight), reads REPLY bytes
# back and holds its connection (-k: tl_rr_part_end ends it); its lines in raw/PART-client.txt,
# each request's times in raw/PART-requests.txt, its pid in TL_LAST.
tl_rr_flight() {
	tl_bg "$RAW/$1-client.txt" "$TL_BIN/rr_client" -a "$TL_SERVER_ADDR" -p "$2" -k \
		-n "$3" -w writev -B "$4" -R "$5" -t 20000 -r "$RAW/$1-requests.txt"
}

# tl_rr_part_end PART CLIENT SERVER WATCH KEEP KEEP_S: the end of a p04 part (tl_part_begin)
# whose rr_client CLIENT (-k: holding its connection) and rr_server SERVER (tl_srv_rr) are done:
# the client stopped, the server's `conn` line and TIME-WAIT in the sockwatch WATCH (both FINs
# exchanged, nothing left in flight); then both sides' counters (KEEP, KEEP_S: counters -k), the
# capture, the sockwatch, tcpevents and the server stopped, the server's nft rules kept
# (raw/PART-nft-server.txt) and cleared, and the client's result logged.
tl_rr_part_end() {
	tl_stop "$2"
	tl_wait_line "$3" "$RAW/$1-server.txt" '^conn ' 5
	tl_wait_line "$4" "$RAW/$1-sockwatch.txt" ' state=TIME-WAIT ' 5
	tl_both_counters_after "$1-" "$5" "$6"
	tl_uncapture
	tl_unwatch stop
	[ -z "$EV" ] || tl_stop "$EV"
	tl_stop "$3"
	tl_in server nft list ruleset > "$RAW/$1-nft-server.txt" || tl_die "nft list ruleset failed"
	tl_fault_clear server
	tl_log "$1: $(grep '^result ' "$RAW/$1-client.txt")"
}

# ---- the capture (probes/capture.c; docs/capture.md) -----------------------------------------

# tl_capture [-s] NAME IFACE PORT [ARGS...]: capture on IFACE into raw/NAME.pcap, its lines into
# raw/NAME.txt, in this namespace or, with -s, in the server's (nsenter execs capture: the pid
# is its own); polled until its ready line, so no packet after this is missed.  Its pid and
# output file are left in TL_CAPTURE and TL_CAPTURE_OUT (for tl_uncapture).
tl_capture() {
	_cvia=""
	if [ "$1" = -s ]; then
		_cvia="nsenter --net=/run/netns/$TL_NS_SERVER"
		shift
	fi
	_cname=$1 _cif=$2 _cport=$3
	shift 3
	# shellcheck disable=SC2086 # _cvia is a command prefix or empty
	tl_bg "$RAW/$_cname.txt" $_cvia "$TL_BIN/capture" -i "$_cif" -p "$_cport" \
		-w "$RAW/$_cname.pcap" "$@"
	TL_CAPTURE=$TL_LAST
	TL_CAPTURE_OUT=$RAW/$_cname.txt
	tl_wait_line "$TL_CAPTURE" "$TL_CAPTURE_OUT" '^ready ' 5
}

# tl_uncapture [PID OUT]: stop the capture (the last tl_capture's, or PID writing OUT; SIGTERM:
# it drains, flushes the .pcap and prints its end line); the end line must be there and say
# libpcap dropped nothing.
tl_uncapture() {
	[ $# -eq 0 ] || { TL_CAPTURE=$1 TL_CAPTURE_OUT=$2; }
	tl_stop "$TL_CAPTURE"
	_cend=$(grep '^end ' "$TL_CAPTURE_OUT") || tl_die "capture $TL_CAPTURE_OUT has no end line"
	case " $_cend " in
	*" dropped=0 "*) ;;
	*) tl_die "capture lost packets (libpcap): $_cend" ;;
	esac
}
