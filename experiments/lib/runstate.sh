# runstate.sh — what a bash run owns and how it proves it: its locks, its temporary directory,
# its namespaces, and the cleanup of all of them; sourced by sandbox.sh (and, for the VM work
# directories, by vm.sh).  run.sh's runs are the Python runner's (experiments/runner/
# tcplab_run.py), which applies the same rules through tcplab_runstate.py and holds the locks on
# its own descriptors.  docs/reliability.md explains the design; in short:
#
# - A live run holds two flock(2) locks, taken by a small holder process that the kernel kills
#   when the shell dies (PR_SET_PDEATHSIG, `setpriv --pdeathsig KILL`), so the kernel releases
#   them even after a SIGKILL, in any PID namespace, and nothing the run starts inherits them:
#     * the output directory itself (a second run on the same --out refuses with one line, as
#       apt does when its lock is taken);
#     * its record, $RS_STATE/run.<id>: /run/tcplab (root) or ${XDG_RUNTIME_DIR:-/tmp}/tcplab-<uid>,
#       listing its id, output and temporary directories and every namespace it creates.
# - A run is dead when its record's lock can be taken (never by a pid, which means nothing in
#   another PID namespace).  The reaper deletes only the namespaces a dead run's record names
#   (`ip netns pids` + SIGKILL + `ip netns del`, as netns.sh does), kills only processes of that
#   dead run that sit in a user namespace below ours (the unprivileged units), and removes only
#   temporary files in output directories whose lock it holds.
# - Temporary directories come from mktemp -d; raw directories are put in place by rename(2)
#   (rs_install_dir), never through a symlink tcplab did not make.
# - Cleanup (rs_cleanup) runs from the EXIT trap or from a signal's handler; every catchable
#   signal (INT TERM HUP QUIT) is ignored from the moment it starts, and a signal that slips in
#   before that runs the whole cleanup itself, so a second signal cannot cut it short.
#
# - A reserve: rs_start takes RS_RESERVE_KB of the output directory's filesystem (a file in
#   TMPDIR_RUN), given back by the run's job (tcplab_job.py's give_reserve) when the units have
#   ended or the disk is found full, so the reports of the units that finished and the failed
#   units' .txt/.json still have room on a disk that filled during the run (issue 30, class 8).
#
# The rules of the locks, the records, the reaper and rs_install_dir are written once, in
# experiments/runner/tcplab_runstate.py, which the Python runner imports; the rs_* functions here
# that apply them call it.  What stays in bash is the shell's own: its traps, its cleanup, its
# namespaces and the reserve.
#
# Functions called from sandbox.sh: rs_start, make_ns; vm.sh: rs_reap_vm_dirs,
# rs_kill_dir_users, rs_trap_signals; the tests: rs_install_dir.
# Error rule: a function that can fail prints one line on stderr and returns 1, except rs_start,
# which exits through die() (the caller's: sandbox.sh's), as main() would.

RS_HOLD="" RS_STATE="" RS_RECORD="" RS_RUN_ID="" RS_ALLOW_FOREIGN=""
RS_HOLDERS=()	# pids of the lock holders, killed last
NAMESPACES=()
TMPDIR_RUN=""
# The reserve: 4 MiB holds every report of a full run (1.6 MB in outputs/*/) and the failed
# .txt/.json of a few units.  Below RS_FULL_KB free (for this user), the disk counts as full.
RS_RESERVE_KB=4096 RS_FULL_KB=64 RS_RESERVE=""

# tcplab_runstate.py, beside this library's folder: found from this file's own path (the tests
# source it with a TOP of their own).
case ${BASH_SOURCE[0]} in */*) RS_PY=${BASH_SOURCE[0]%/*} ;; *) RS_PY=. ;; esac
RS_PY=$RS_PY/../runner/tcplab_runstate.py

# rs_py COMMAND ARGS...: tcplab_runstate.py COMMAND, its status returned.  SIGINT ignored in it,
# as for the plan (Python then keeps it ignored): a Ctrl-C to the group during its imports gave
# a KeyboardInterrupt traceback (CI's double-signal storm: SIGINT+SIGTERM to the group, in
# `import fnmatch`); the shell's own trap ends the run, and kills a reaper first (rs_call).
rs_py() {
	(trap '' INT; exec "${PY:-/usr/bin/python3}" -S "$RS_PY" --prog "${PROG:-run.sh}" --top "${TOP:-}" "$@")
}

# rs_call COMMAND ARGS...: rs_py, its stdout's lines in the array RS_OUT, its status returned.
# Read from a descriptor, not a command substitution (bash 5.2 can lose a SIGINT that comes
# while it waits for one: docs/reliability.md, "A SIGINT to run.sh alone").  Its pid is in
# RS_PY_PID meanwhile, for rs_cleanup to kill: after the cleanup the run's locks are free, and a
# reaper still running could remove the next run's files; it dies with the shell too (setpriv
# --pdeathsig).  SIGINT ignored in it, as in rs_py.
RS_PY_PID="" RS_OUT=()
rs_call() {
	local line fd status=0
	RS_OUT=()
	exec {fd}< <(trap '' INT; exec setpriv --pdeathsig KILL "${PY:-/usr/bin/python3}" -S "$RS_PY" \
		--prog "${PROG:-run.sh}" --top "${TOP:-}" "$@")
	RS_PY_PID=$!
	while IFS= read -r -u "$fd" line; do RS_OUT+=("$line"); done
	exec {fd}<&-
	wait "$RS_PY_PID" || status=$?
	RS_PY_PID=""
	return "$status"
}

# rs_said COMMAND ARGS...: rs_call, each line it printed said through log().
rs_said() {
	local line status=0
	rs_call "$@" || status=$?
	for line in "${RS_OUT[@]}"; do log "$line"; done
	return "$status"
}

# The state directory: root's is /run/tcplab (tmpfs, root only, empty after a reboot); another
# user's is a 0700 directory of their own, which must not be a symlink or someone else's.
# Prints it, or one line on stderr and returns 1.
rs_state_dir() {
	rs_py state-dir
}

# rs_hold DIR [RECORD_TMP RECORD]: a background holder that locks directory DIR (and creates,
# locks and renames RECORD_TMP to RECORD, so a reaper never sees an unlocked record of a live
# run) and keeps the locks until it is killed: by cleanup, or by the kernel when the shell dies.
# Sets RS_HOLD to "locked", "busy" and who holds DIR (DIR's lock is taken), or "error".  Not in
# a subshell: the holder's parent must be the shell itself.  Its signals are ignored before the
# exec, so none can end it while Python starts.
rs_hold() {
	local fd
	exec {fd}< <(trap '' INT TERM HUP QUIT
		exec setpriv --pdeathsig KILL "${PY:-/usr/bin/python3}" -S "$RS_PY" hold \
			--state "$RS_STATE" -- "$@" 2> /dev/null)
	RS_HOLDERS+=("$!")
	read -r -t 60 RS_HOLD <&"$fd" || RS_HOLD=error
	exec {fd}<&-
}

# rs_check_out DIR: DIR exists (made if need be), is writable, and, for root, belongs to root
# unless --allow-foreign-out; prints its physical path.
rs_check_out() {
	local r status=0
	r=$(rs_py check-out ${RS_ALLOW_FOREIGN:+--allow-foreign} -- "$1") || status=$?
	[ "$status" -eq 0 ] || die "$status" "$r"
	printf '%s\n' "$r"
}

# rs_lock_out DIR: lock DIR and the run's new record, or exit 1.  (A --kernel run whose guest
# names another release locks that directory itself: tcplab_guest.py's switch_out.)
rs_lock_out() {
	rs_hold "$1" "$RS_STATE/.new.$RS_RUN_ID" "$RS_STATE/run.$RS_RUN_ID"
	case $RS_HOLD in
	locked) RS_RECORD=$RS_STATE/run.$RS_RUN_ID ;;
	busy*) die $EXIT_FAIL "$1 is in use by another run${RS_HOLD#busy}: wait for it to finish, or use another --out" ;;
	*) die $EXIT_FAIL "cannot lock $1 or write $RS_STATE" ;;
	esac
	printf 'out=%s\n' "$1" >> "$RS_RECORD"
}

# rs_refuse_nested DIR: die when DIR is inside, or contains, the output directory of another
# live run (a record of RS_STATE whose lock is held): that run replaces raw/<unit> directories
# whole, and would move or delete this run's files mid-run, or this run its (issue 30).
rs_refuse_nested() {
	rs_call refuse-nested --state "$RS_STATE" --record "$RS_RECORD" -- "$1" ||
		die $EXIT_FAIL "${RS_OUT[0]:-tcplab_runstate.py refuse-nested failed (above)}"
}

# rs_kill_userns_procs ID: kill the processes of run ID in a user namespace other than ours (the
# unprivileged units: unshare -rn), never a host process; prints how many.
rs_kill_userns_procs() {
	rs_py kill-userns -- "$1"
}

# rs_reap_tmp DIR: remove the temporary entries of dead runs in DIR, whose lock the caller
# holds (.tmp-*, .NAME.XXXX.tmp-PID), never through a symlink; says how many.
rs_reap_tmp() {
	rs_said reap-tmp --tmp "$TMPDIR_RUN" -- "$1"
}

# What runs that are gone left behind: for each record whose lock is free, its namespaces and
# processes; then the temporary files in our output directory (ours alone, by its lock) and in
# every other outputs/*/ whose lock is free.  Says what it removed.
rs_reap_stale() {
	rs_said reap-stale --state "$RS_STATE" --record "$RS_RECORD" --out "$OUT" \
		--outputs "${OUTPUTS:-$TOP/outputs}" --prefix "${NS_PREFIX:-tcplab}"
}

# Every namespace is in the record before it is made, so an interrupt from then on, or the reaper
# after a SIGKILL, finds it.
make_ns() {
	NAMESPACES+=("$1")
	printf 'ns=%s\n' "$1" >> "$RS_RECORD"
	tl_netns_create "$1"
}

# rs_trap_signals HANDLER FALLBACK 'SIG CODE ARGS...'...: `trap 'HANDLER SIG CODE ARGS...' SIG`
# for each, where HANDLER ends the shell (exit CODE).  Each action is six lines, for bash 5.2
# (Debian 12's 5.2.15; 5.2.37, its last patch, too):
#     HANDLER SIG CODE ARGS...
#     FALLBACK CODE
#     exit CODE
#     )
#     FALLBACK CODE
#     exit CODE
# - The `)`: bash 5.2 can run a pending trap while it starts to parse a `$(` or `<(` at
#   expansion time (parse_command() in eval.c runs pending traps first; xparse_dolparen() in
#   parse.y has just set the parser to read DOLPAREN first and to end at `)`, and the trap's
#   save_parser_state() resets neither).  The trap's text is then parsed as a command
#   substitution's body; without a `)` of its own it is "unexpected EOF while looking for
#   matching `)'" and the trap never runs: the signal is lost, or bash exits 2 (seen once in CI:
#   SIGHUP to run.sh as its first unit started, exit 2).  bash 5.3 no longer runs traps there.
# - The lines around it: in the usual state bash runs a trap's text one command at a time, and
#   goes on with the next one when a command is cut short by an expansion error (evalstring.c:
#   a DISCARD jump) or the handler returns.  With only `)` next, that was a syntax error, and
#   under set -e an exit 2 with nothing cleaned up (CI: "trap: line 2: syntax error near
#   unexpected token `)'" after SIGTERM to run.sh, two namespaces left).  Now FALLBACK (the
#   cleanup) and the exit come next, before the `)` in the usual state and after it in the `$(`
#   state.
rs_trap_signals() {
	local handler=$1 fallback=$2 spec code
	shift 2
	for spec in "$@"; do
		code=${spec#* }
		code=${code%% *}
		# shellcheck disable=SC2064 # the action is fixed here, on purpose
		trap "$handler $spec
$fallback $code
exit $code
)
$fallback $code
exit $code" "${spec%% *}"
	done
}

# rs_start: the output directory $OUT (default outputs/<release>) checked and locked, the traps
# set, what dead runs left reaped, and TMPDIR_RUN made with mktemp -d inside $OUT.
rs_start() {
	[ -z "${OUT_SET:-}" ] || [ -n "$OUT" ] || die $EXIT_USAGE "--out '': want a directory"
	[ -n "$OUT" ] || OUT="${OUTPUTS:-$TOP/outputs}/$(uname -r)"
	OUT=$(rs_check_out "$OUT") || exit
	RS_STATE=$(rs_state_dir) || exit $EXIT_FAIL
	RS_RUN_ID=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
	export TL_RUN_ID=$RS_RUN_ID
	trap rs_on_exit EXIT
	rs_trap_signals rs_on_signal rs_cleanup 'INT 130 "interrupted"' 'TERM 143 "terminated"' \
		'HUP 129 "hung up"' 'QUIT 131 "quit"'
	rs_lock_out "$OUT"
	printf 'id=%s\npid=%s\nmode=%s\n' "$RS_RUN_ID" "$$" "${NS_MODE:-netns}" >> "$RS_RECORD"
	rs_refuse_nested "$OUT"
	rs_reap_stale
	TMPDIR_RUN=$(mktemp -d "$OUT/.tmp-XXXXXXXX") || die $EXIT_FAIL "cannot make a directory in $OUT"
	printf 'tmp=%s\n' "$TMPDIR_RUN" >> "$RS_RECORD"
	rs_reserve_take
}

# rs_reserve_take: the reserve, TMPDIR_RUN/reserve, RS_RESERVE_KB allocated (fallocate; written
# out where a filesystem cannot allocate, with random bytes, which no compression shrinks), or
# exit 1 with one line: a run on a disk without that room could not even say why it failed.
rs_reserve_take() {
	local f=$TMPDIR_RUN/reserve
	if fallocate -l "$((RS_RESERVE_KB * 1024))" -- "$f" 2> /dev/null ||
		{ rm -f -- "$f" && head -c "$((RS_RESERVE_KB * 1024))" /dev/urandom > "$f"; } 2> /dev/null; then
		RS_RESERVE=$f
		return 0
	fi
	rm -f -- "$f"
	die $EXIT_FAIL "$OUT: no room for the $((RS_RESERVE_KB / 1024)) MiB a run keeps so that its reports and a failed unit's outputs can still be written if the disk fills (No space left on device; docs/reliability.md, \"A full disk\")"
}

# rs_install_dir SRC DEST: DEST, a path inside $OUT, replaced whole by directory SRC (inside
# TMPDIR_RUN), by rename(2) alone, never through a symlink tcplab did not make; SRC first gets
# tcplab-version.txt (TCPLAB_VERSION), which its report records as tcplab_version.  Returns 1
# with one line on stderr on failure.
rs_install_dir() {
	rs_said install-dir --out "$OUT" --tmp "$TMPDIR_RUN" --version "${TCPLAB_VERSION:-}" -- "$1" "$2"
}

# rs_kill_dir_users DIR: SIGKILL every process that holds directory DIR open: for a vm.sh work
# directory, exactly the VM's processes (its lock descriptor, inherited by timeout and QEMU).
rs_kill_dir_users() {
	rs_py kill-dir-users -- "$1" || true
}

# rs_reap_vm_dirs BASE: remove BASE/tcplab-vm.* work directories of vm.sh runs that are gone
# (marked .locked, ours, lock free); says how many on stderr.
rs_reap_vm_dirs() {
	rs_py reap-vm-dirs -- "$1" || true
}

# A catchable signal: from now on every such signal is ignored (so is it by what cleanup runs),
# and the cleanup runs here, to its end, before the exit.  Not `exit` alone: a signal that comes
# while the EXIT trap runs, before that trap's first line ignores it, would run this handler
# inside the trap, and an `exit` there ends the shell at once, with the trap cut short (seen once
# in CI: SIGHUP right after "finished" left .tmp-XXXXXXXX and the run's record behind).  Each
# step of the cleanup can be done twice, so a cleanup cut short by this one is simply finished
# by it.
rs_on_signal() {
	trap '' INT TERM HUP QUIT
	log "$3 (SIG$1): stopping every unit"
	rs_cleanup "$2"
}

# The EXIT trap.
rs_on_exit() {
	rs_cleanup $?
}

# rs_cleanup STATUS: stop the units, delete the namespaces and the temporary directory, then
# drop the record and the locks, and exit with STATUS.  Runs to its end whatever
# signal comes meanwhile, and runs once: the EXIT trap is dropped first.
rs_cleanup() {
	local status=$1 ns pid
	trap '' INT TERM HUP QUIT
	trap - EXIT
	! declare -F rs_unsaid > /dev/null || rs_unsaid "$status"
	trap - ERR
	set +eu	# an error or an unset name must not cut the cleanup short
	# a tcplab_runstate.py of the run (the reaper, an install) goes before the locks are free
	[ -z "$RS_PY_PID" ] || kill -KILL "$RS_PY_PID" 2> /dev/null
	# the shell's own units (sandbox.sh's kill_running_units)
	! declare -F kill_running_units > /dev/null || kill_running_units
	for pid in $(jobs -p); do kill -KILL "$pid" 2> /dev/null; done
	# only unprivileged units need the scan of every process's environment
	[ "${NS_MODE:-}" != userns ] || rs_kill_userns_procs "$RS_RUN_ID" > /dev/null
	# the namespaces the record names (make_ns's, and any a job of the run made)
	local -A gone=()
	for ns in "${NAMESPACES[@]}"; do
		gone[$ns]=1
		tl_netns_delete "$ns"
	done
	if [ -n "$RS_RECORD" ] && [ -f "$RS_RECORD" ]; then
		while IFS= read -r ns; do
			case $ns in ns=?*) ;; *) continue ;; esac
			ns=${ns#ns=}
			[ -n "${gone[$ns]:-}" ] || tl_netns_delete "$ns"
			gone[$ns]=1
		done < "$RS_RECORD"
	fi
	[ -z "$TMPDIR_RUN" ] || rm -rf -- "$TMPDIR_RUN"
	# a report killed outright (SIGKILL to the group) leaves .NAME.XXXX.tmp-PID; every process
	# of this run is gone now, and the lock on $OUT is still ours
	[ -z "$RS_RECORD" ] || [ -z "$OUT" ] || rs_reap_tmp "$OUT"
	[ -z "$RS_RECORD" ] || rm -f -- "$RS_RECORD"
	# gone before the shell exits, so the next run finds the locks free
	for pid in "${RS_HOLDERS[@]}"; do kill -KILL "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; done
	exit "$status"
}
