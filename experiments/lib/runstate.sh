# runstate.sh — what a run owns and how it proves it: its locks, its temporary directory, its
# namespaces, and the cleanup of all of them; sourced by run.sh (and, for the VM work
# directories, by vm.sh).  docs/reliability.md explains the design; in short:
#
# - A live run holds two flock(2) locks, taken by a small holder process that the kernel kills
#   when run.sh dies (PR_SET_PDEATHSIG, `setpriv --pdeathsig KILL`), so the kernel releases them
#   even after a SIGKILL, in any PID namespace, and nothing the run starts inherits them:
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
#   TMPDIR_RUN), given back (rs_reserve_give) when the units have ended or the disk is found full
#   (rs_disk_full), so the reports of the units that finished and the failed units' .txt/.json
#   still have room on a disk that filled during the run (issue 30, class 8).
#
# Functions called from run.sh: rs_start, rs_switch_out, make_ns, rs_install_dir, rs_run_vm,
# rs_disk_full, rs_reserve_give.
# Error rule: a function that can fail prints one line on stderr and returns 1, except rs_start and
# rs_switch_out, which exit through die() (run.sh's), as main() would.

RS_HOLD="" RS_STATE="" RS_RECORD="" RS_RUN_ID="" RS_ALLOW_FOREIGN="" RS_VM_PID=""
RS_HOLDERS=()	# pids of the lock holders, killed last
NAMESPACES=()
TMPDIR_RUN=""
# The reserve: 4 MiB holds every report of a full run (1.6 MB in outputs/*/) and the failed
# .txt/.json of a few units.  Below RS_FULL_KB free (for this user), the disk counts as full.
RS_RESERVE_KB=4096 RS_FULL_KB=64 RS_RESERVE=""

# The state directory: root's is /run/tcplab (tmpfs, root only, empty after a reboot); another
# user's is a 0700 directory of their own, which must not be a symlink or someone else's.
rs_state_dir() {
	local d
	if [ -n "${TCPLAB_STATE:-}" ]; then	# the tests keep their runs' records apart
		d=$TCPLAB_STATE
	elif [ "$(id -u)" -eq 0 ]; then
		d=/run/tcplab
	else
		d=${XDG_RUNTIME_DIR:-/tmp}/tcplab-$(id -u)
	fi
	mkdir -m 0700 -p "$d" 2> /dev/null || true
	if [ -L "$d" ] || ! [ -d "$d" ] || [ "$(stat -c %u "$d")" != "$(id -u)" ] ||
		[ -n "$(find "$d" -maxdepth 0 -perm /022)" ]; then
		echo "$PROG: state directory $d is not a directory only $(id -un) owns and can write" >&2
		return 1
	fi
	echo "$d"
}

# rs_hold DIR [RECORD_TMP RECORD]: a background holder that locks directory DIR (and creates,
# locks and renames RECORD_TMP to RECORD, so a reaper never sees an unlocked record of a live
# run) and keeps the locks until it is killed: by cleanup, or by the kernel when run.sh dies.
# Sets RS_HOLD to "locked", "busy" (DIR's lock is taken) or "error".  Not in a subshell: the
# holder's parent must be run.sh itself.
rs_hold() {
	local fd
	# shellcheck disable=SC2016
	exec {fd}< <(exec setpriv --pdeathsig KILL sh -c '
		trap "" INT TERM HUP QUIT
		exec 2> /dev/null
		exec 8< "$1" || { echo error; exit 1; }
		flock -n 8 || { echo busy; exit 1; }
		if [ -n "$2" ]; then
			exec 9> "$2" && flock -n 9 && mv -f "$2" "$3" || { echo error; exit 1; }
		fi
		echo locked
		exec sleep infinity' sh "$@")
	RS_HOLDERS+=("$!")
	read -r -t 60 RS_HOLD <&"$fd" || RS_HOLD=error
	exec {fd}<&-
}

# The line a refused run prints: who holds DIR, from the records of live runs.
rs_holder_of() {
	local f pid
	for f in "$RS_STATE"/run.*; do
		[ -f "$f" ] && grep -qxF "out=$1" "$f" 2> /dev/null || continue
		pid=$(sed -n 's/^pid=//p' "$f")
		echo " (run.sh pid $pid in its PID namespace)"
		return 0
	done
}

# rs_check_out DIR: DIR exists (made if need be), is writable, and, for root, belongs to root
# unless --allow-foreign-out; prints its physical path.
rs_check_out() {
	local dir=$1 owner
	mkdir -p -- "$dir" 2> /dev/null && [ -d "$dir" ] && [ -w "$dir" ] ||
		die $EXIT_FAIL "cannot write to $dir"
	dir=$(cd -- "$dir" && pwd -P) || die $EXIT_FAIL "cannot enter $dir"
	owner=$(stat -c %u -- "$dir")
	if [ "$(id -u)" -eq 0 ] && [ "$owner" != 0 ] && [ -z "$RS_ALLOW_FOREIGN" ]; then
		die $EXIT_USAGE "$dir belongs to $(stat -c %U -- "$dir") (uid $owner): refusing to write there as root (--allow-foreign-out to do it anyway)"
	fi
	echo "$dir"
}

# rs_lock_out DIR: lock DIR for this run (with the record when it is the first), or exit 1.
rs_lock_out() {
	local first=""
	if [ -z "$RS_RECORD" ]; then
		first=1
		rs_hold "$1" "$RS_STATE/.new.$RS_RUN_ID" "$RS_STATE/run.$RS_RUN_ID"
	else
		rs_hold "$1"
	fi
	case $RS_HOLD in
	locked) [ -z "$first" ] || RS_RECORD=$RS_STATE/run.$RS_RUN_ID ;;
	busy) die $EXIT_FAIL "$1 is in use by another run$(rs_holder_of "$1"): wait for it to finish, or use another --out" ;;
	*) die $EXIT_FAIL "cannot lock $1 or write $RS_STATE" ;;
	esac
	printf 'out=%s\n' "$1" >> "$RS_RECORD"
}

# rs_refuse_nested DIR: die when DIR is inside, or contains, the output directory of another
# live run (a record of RS_STATE whose lock is held): that run replaces raw/<unit> directories
# whole, and would move or delete this run's files mid-run, or this run its (issue 30).
rs_refuse_nested() {
	local f fd o pid
	for f in "$RS_STATE"/run.*; do
		[ -f "$f" ] && [ ! -L "$f" ] && [ "$f" != "$RS_RECORD" ] || continue
		{ exec {fd}< "$f"; } 2> /dev/null || continue
		if flock -n "$fd"; then		# free: a dead run's, the reaper's business
			exec {fd}<&-
			continue
		fi
		exec {fd}<&-
		pid=$(sed -n 's/^pid=//p' "$f" 2> /dev/null | head -n 1)
		while IFS= read -r o; do
			case $1/ in "$o"/?*) die $EXIT_FAIL "$1 is inside $o, the output directory of a live run (run.sh pid ${pid:-?}): use another --out" ;; esac
			case $o/ in "$1"/?*) die $EXIT_FAIL "$1 contains $o, the output directory of a live run (run.sh pid ${pid:-?}): use another --out" ;; esac
		done < <(sed -n 's/^out=//p' "$f" 2> /dev/null)
	done
}

# Kill, in rounds while a dying unit script still starts new ones, the processes of run $1 that
# sit in a user namespace other than ours (the unprivileged units: unshare -rn).  The run id is
# 64 random bits; the namespace condition keeps it from ever touching a host process.  Prints how
# many it killed.
rs_kill_userns_procs() {
	local id=$1 own pid n=0 round list found
	own=$(readlink /proc/self/ns/user)
	for round in 1 2 3 4 5; do
		found=0
		list=$(grep -lazx "TL_RUN_ID=$id" /proc/[0-9]*/environ 2> /dev/null || true)
		for pid in $list; do
			pid=${pid#/proc/}
			pid=${pid%/environ}
			[ "$(readlink "/proc/$pid/ns/user" 2> /dev/null)" != "$own" ] || continue
			[ -n "$(readlink "/proc/$pid/ns/user" 2> /dev/null)" ] || continue
			kill -KILL "$pid" 2> /dev/null || continue
			found=1
			n=$((n + 1))
		done
		[ "$found" = 1 ] || break
		: "$round"
	done
	echo "$n"
}

# rs_reap_tmp DIR: remove the temporary entries of dead runs in DIR, whose lock the caller
# holds: .tmp-* (raw directories) and .NAME.XXXX.tmp-PID (reports being written).  rm does not
# follow a symlink it is given, so a planted one is removed, not what it points to.
# One rm for them all: a fork per entry took 17 s for 3,000 planted links.
rs_reap_tmp() {
	local d n=0 gone=()
	for d in "$1"/.tmp-* "$1"/.*.tmp-*; do
		[ -e "$d" ] || [ -L "$d" ] || continue
		[ "$d" != "$TMPDIR_RUN" ] || continue
		gone+=("$d")
	done
	[ "${#gone[@]}" -gt 0 ] || return 0
	rm -rf -- "${gone[@]}" 2> /dev/null
	for d in "${gone[@]}"; do
		[ -e "$d" ] || [ -L "$d" ] || n=$((n + 1))
	done
	[ "$n" -eq 0 ] || log "removed $n temporary file(s) in ${1#"$TOP"/}/ left by an interrupted run"
}

# rs_reap_record FILE: FILE is the record of a run that is gone (the caller holds its lock):
# delete its namespaces, stop its unprivileged units, remove its temporary directory when its
# output directory is free.  Prints "namespaces processes kept" (kept 1: a namespace would not go).
rs_reap_record() {
	local f=$1 key val id="" mode="" nns=0 nproc=0 fd kept=0
	while IFS='=' read -r key val; do
		case $key in
		id) id=$val ;;
		mode) mode=$val ;;
		ns) [[ $val =~ ^$NS_PREFIX-[A-Za-z0-9._-]+$ ]] || continue
			if [ -e "/run/netns/$val" ] || [ -e "/run/netns/$val-p" ]; then
				tl_netns_delete "$val"
				nns=$((nns + 1))
				# still there: keep the record, so the next run tries again
				[ ! -e "/run/netns/$val" ] || kept=1
			fi ;;
		tmp) [ -e "$val" ] || [ -L "$val" ] || continue
			{ exec {fd}< "${val%/*}"; } 2> /dev/null || continue
			if [ "${val%/*}" = "$OUT" ] || flock -n "$fd"; then
				rm -rf -- "$val" && log "removed ${val#"$TOP"/}, left by an interrupted run"
			fi
			exec {fd}<&- ;;
		esac
	done < "$f"
	[ -z "$id" ] || [ "$mode" != userns ] || nproc=$(rs_kill_userns_procs "$id")
	echo "$nns $nproc $kept"
}

# rs_pid_alive RECORD: whether the run.sh of RECORD (its pid= line) still exists.  A SIGKILLed
# run's lock holder dies of its parent-death signal a moment after run.sh: until then the lock
# looks taken although the run is gone (seen by the interrupt test under load), so the reaper
# waits for it then.  A pid from another PID namespace may not exist here either: then the wait
# simply ends at its bound and the record is left alone, as before.
rs_pid_alive() {
	local pid
	pid=$(sed -n 's/^pid=//p' "$1" 2> /dev/null | head -n 1)
	[[ $pid =~ ^[1-9][0-9]*$ ]] || return 0
	kill -0 "$pid" 2> /dev/null
}

# What runs that are gone left behind: for each record whose lock is free, its namespaces and
# processes; then the temporary files in our output directory (ours alone, by its lock) and in
# every other outputs/*/ whose lock is free.  Says what it removed.
rs_reap_stale() {
	local f fd r=() nns=0 nproc=0 d
	for f in "$RS_STATE"/run.*; do
		[ -f "$f" ] && [ ! -L "$f" ] && [ "$f" != "$RS_RECORD" ] || continue
		{ exec {fd}< "$f"; } 2> /dev/null || continue
		# a record another reaper finished with (and removed) while we waited for its lock
		if { flock -n "$fd" || { ! rs_pid_alive "$f" && flock -w 2 "$fd"; }; } && [ -f "$f" ]; then
			r=($(rs_reap_record "$f"))
			nns=$((nns + r[0]))
			nproc=$((nproc + r[1]))
			[ "${r[2]}" = 1 ] || rm -f -- "$f"
		fi
		exec {fd}<&-
	done
	[ "$nproc" -eq 0 ] || log "stopped $nproc process(es) left by an interrupted run"
	[ "$nns" -eq 0 ] || log "removed $nns namespace(s) left by an interrupted run"
	rs_reap_tmp "$OUT"
	for d in "${OUTPUTS:-$TOP/outputs}"/*/; do
		d=${d%/}
		[ -d "$d" ] && [ ! -L "$d" ] && [ "$d" != "$OUT" ] || continue
		{ exec {fd}< "$d"; } 2> /dev/null || continue
		if flock -n "$fd"; then rs_reap_tmp "$d"; fi
		exec {fd}<&-
	done
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

# rs_reserve_give: the reserve back to the filesystem (again: nothing).
rs_reserve_give() {
	[ -n "$RS_RESERVE" ] || return 0
	rm -f -- "$RS_RESERVE"
	RS_RESERVE=""
}

# rs_disk_full: whether $OUT's filesystem has less than RS_FULL_KB free for this user (root may
# use the blocks ext4 reserves for it, others may not).
rs_disk_full() {
	local free avail bsize
	# read from a process substitution, not a command substitution: it is checked every 0.1 s
	# while units run, and bash 5.2 can lose a SIGINT that comes while it waits for a command
	# substitution (docs/reliability.md, "A SIGINT to run.sh alone")
	read -r free avail bsize < <(stat -f -c '%f %a %S' -- "$OUT" 2> /dev/null) || return 1
	[ "$EUID" -eq 0 ] || free=$avail
	[ $((free * bsize)) -lt $((RS_FULL_KB * 1024)) ]
}

# rs_switch_out DIR: from now on write to DIR (a --kernel run learns its release late): checked,
# locked and reaped like the first.
rs_switch_out() {
	local dir
	dir=$(rs_check_out "$1") || exit
	[ "$dir" = "$OUT" ] && return 0
	rs_lock_out "$dir"
	rs_refuse_nested "$dir"
	OUT=$dir
	rs_reap_tmp "$OUT"
}

# rs_install_dir SRC DEST: DEST, a path inside $OUT, replaced whole by directory SRC (inside
# TMPDIR_RUN), by rename(2) alone.  Each directory between $OUT and DEST is made if missing; one
# that is a symlink (tcplab makes none) is removed first, so nothing is written through it.  An
# old DEST (or a link in its place) is renamed into TMPDIR_RUN and removed there; DEST is never
# moved into (mv -T).  SRC, a unit's raw directory, first gets tcplab-version.txt: the tcplab
# that ran the unit (TCPLAB_VERSION), which its report records as tcplab_version.  Returns 1 with
# one line on stderr on failure.
rs_install_dir() {
	local src=$1 dest=$2 rel path=$OUT part old="" IFS=/
	case $dest in "$OUT"/?*) ;; *) echo "$PROG: $dest is not inside $OUT" >&2; return 1 ;; esac
	rel=${dest#"$OUT"/}
	case /$rel/ in */../* | */./* | *//*) echo "$PROG: $dest: not a plain path" >&2; return 1 ;; esac
	for part in ${rel%/*}; do
		[ "$part" != "$rel" ] || break
		path=$path/$part
		if [ -L "$path" ]; then
			rm -f -- "$path" && log "removed ${path#"$TOP"/}: a symlink tcplab did not make"
		fi
		[ -d "$path" ] || mkdir -- "$path" || return 1
	done
	if [ -e "$dest" ] || [ -L "$dest" ]; then
		old=$(mktemp -d "$TMPDIR_RUN/.old-XXXXXX") || return 1
		mv -T -- "$dest" "$old/d" || return 1
	fi
	if [ -n "${TCPLAB_VERSION:-}" ]; then
		rm -f -- "$src/tcplab-version.txt" &&
			printf '%s\n' "$TCPLAB_VERSION" > "$src/tcplab-version.txt" || return 1
	fi
	mv -T -- "$src" "$dest" || return 1
	[ -z "$old" ] || rm -rf -- "$old"
}

# rs_run_vm ARGS...: experiments/guest/vm.sh in the background, waited for, so a signal to run.sh
# is acted on at once (cleanup stops vm.sh, whose trap stops QEMU).  vm.sh gets SIGTERM from the
# kernel if run.sh dies, and puts its work directory in TMPDIR_RUN.  Returns vm.sh's status; a
# vm.sh killed by a signal is said so, and run.sh exits 1.
rs_run_vm() {
	local status=0
	TMPDIR=$TMPDIR_RUN setpriv --pdeathsig TERM "$TOP/experiments/guest/vm.sh" "$@" &
	RS_VM_PID=$!
	wait "$RS_VM_PID" || status=$?
	RS_VM_PID=""
	if [ "$status" -gt 128 ]; then
		rs_kill_vm_users "$TMPDIR_RUN"
		rs_reap_vm_dirs "$TMPDIR_RUN"
		die $EXIT_FAIL "vm.sh was killed by SIG$(kill -l "$status" 2> /dev/null || echo "$status") (its guest died with it)"
	fi
	return "$status"
}

# rs_kill_dir_users DIR: SIGKILL every process that holds directory DIR open: for a vm.sh work
# directory (0700, tcplab's), its lock descriptor, inherited by timeout and QEMU, so exactly the
# VM's processes.  The caller must not hold DIR open itself.  setpriv --pdeathsig alone cannot
# cover a parent killed between fork and prctl, nor a pid not yet known to vm.sh's trap.
rs_kill_dir_users() {
	local pid
	case $1 in *[][*?\\]*) return 0 ;; esac	# -lname takes a pattern; mktemp names have none
	for pid in $(find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -lname "$1" 2> /dev/null |
		cut -d/ -f3 | sort -u); do
		kill -KILL "$pid" 2> /dev/null || true
	done
}

# rs_kill_vm_users BASE: rs_kill_dir_users for each BASE/tcplab-vm.* (run.sh, once its vm.sh is
# gone: they are all this run's).
rs_kill_vm_users() {
	local d
	for d in "$1"/tcplab-vm.*; do
		[ -d "$d" ] && [ ! -L "$d" ] || continue
		rs_kill_dir_users "$d"
	done
}

# rs_reap_vm_dirs BASE: remove BASE/tcplab-vm.* work directories of vm.sh runs that are gone.
# vm.sh locks its directory and then marks it (.locked); a marked directory of ours whose lock is
# free is provably abandoned (QEMU dies with vm.sh: setpriv --pdeathsig).  Unmarked ones are not
# provably anyone's and are left alone.
rs_reap_vm_dirs() {
	local d fd n=0
	for d in "$1"/tcplab-vm.*; do
		[ -d "$d" ] && [ ! -L "$d" ] && [ -f "$d/.locked" ] || continue
		[ "$(stat -c %u -- "$d")" = "$(id -u)" ] || continue
		{ exec {fd}< "$d"; } 2> /dev/null || continue
		if flock -n "$fd"; then
			rm -rf -- "$d" && n=$((n + 1))
		fi
		exec {fd}<&-
	done
	[ "$n" -eq 0 ] || echo "${PROG:-vm.sh}: removed $n VM work director(y/ies) in $1 left by an interrupted run" >&2
	return 0
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
	# run.sh's end (tcplab_finish.py) first: it writes on the KTAP stream too
	! declare -F finish_stop > /dev/null || finish_stop
	# run.sh --ktap: the stream ends in "Bail out!" naming the signal, so a reader (kcidb) says
	# why the units without a test point have none
	[ -z "${KTAP:-}" ] || ! declare -F ktap_die > /dev/null || ktap_die "$2" "$3 (SIG$1)"
	rs_cleanup "$2"
}

# The EXIT trap.
rs_on_exit() {
	rs_cleanup $?
}

# rs_cleanup STATUS: stop vm.sh and the units, delete the namespaces and the temporary
# directory, then drop the record and the locks, and exit with STATUS.  Runs to its end whatever
# signal comes meanwhile, and runs once: the EXIT trap is dropped first.
rs_cleanup() {
	local status=$1 ns pid n
	trap '' INT TERM HUP QUIT
	trap - EXIT
	! declare -F rs_unsaid > /dev/null || rs_unsaid "$status"
	trap - ERR
	set +eu	# an error or an unset name must not cut the cleanup short
	if [ -n "$RS_VM_PID" ]; then
		kill -TERM "$RS_VM_PID" 2> /dev/null
		for n in $(seq 100); do kill -0 "$RS_VM_PID" 2> /dev/null || break; sleep 0.05; done
		kill -KILL "$RS_VM_PID" 2> /dev/null
		wait "$RS_VM_PID" 2> /dev/null
		rs_kill_vm_users "$TMPDIR_RUN"
		: "$n"
	fi
	# units run in sessions of their own (setsid): run.sh's own list of them, then its jobs
	! declare -F kill_running_units > /dev/null || kill_running_units
	for pid in $(jobs -p); do kill -KILL "$pid" 2> /dev/null; done
	# only unprivileged units need the scan of every process's environment
	[ "${NS_MODE:-}" != userns ] || rs_kill_userns_procs "$RS_RUN_ID" > /dev/null
	for ns in "${NAMESPACES[@]}"; do
		tl_netns_delete "$ns"
	done
	[ -z "$TMPDIR_RUN" ] || rm -rf -- "$TMPDIR_RUN"
	# a report killed outright (SIGKILL to the group) leaves .NAME.XXXX.tmp-PID; every process
	# of this run is gone now, and the lock on $OUT is still ours
	[ -z "$RS_RECORD" ] || [ -z "$OUT" ] || rs_reap_tmp "$OUT"
	[ -z "$RS_RECORD" ] || rm -f -- "$RS_RECORD"
	# gone before run.sh exits, so the next run finds the locks free
	for pid in "${RS_HOLDERS[@]}"; do kill -KILL "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; done
	exit "$status"
}
