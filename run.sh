#!/usr/bin/env bash
# run.sh — the one entry point for tcplab experiments.  See ./run.sh --help.
set -euo pipefail
export LC_ALL=C
# Until rs_start sets the real traps (the output directory locked, the run's record written), a
# signal ends run.sh at once with 128+N: nothing is made yet that needs undoing.  Without it bash
# ignores SIGQUIT and dies of the others by their default action, with no status of its own (CI:
# SIGQUIT then SIGHUP to run.sh while it still checked its build: killed by SIGHUP).  Set before
# the first thing that can take time (git describe, below: CI sent SIGQUIT then SIGTERM while it
# ran, and run.sh died of SIGTERM).  Each action has a `)` line and an exit after it:
# rs_trap_signals (experiments/lib/runstate.sh) says why.
rs_early_signal() {
	exit "$2"
}
for _sig in 'INT 130' 'TERM 143' 'HUP 129' 'QUIT 131'; do
	# shellcheck disable=SC2064 # the action is fixed here, on purpose
	trap "rs_early_signal $_sig
exit ${_sig#* }
)
exit ${_sig#* }" "${_sig%% *}"
done
unset _sig
# No run ends non-zero with nothing said.  A command that fails where set -e ends the run is
# recorded (errtrace: in functions too), and the exit names it in one line unless die already
# said why (CI: run.sh --kernel 6.12 exited 2 with an empty stderr, and nothing told where).
RS_ERR="" RS_SAID=""
set -o errtrace
trap 'RS_ERR="$? ${BASH_SOURCE[0]##*/}:$LINENO: $BASH_COMMAND"' ERR
# rs_unsaid STATUS: that line, for an exit with STATUS (this EXIT trap, then rs_cleanup's).
rs_unsaid() {
	[ "$1" -eq 0 ] || [ -n "$RS_SAID" ] || [ -z "$RS_ERR" ] ||
		printf '%s: stopped (status %s): a command failed at %s (its status %s)\n' \
			"${PROG:-run.sh}" "$1" "${RS_ERR#* }" "${RS_ERR%% *}" >&2
}
trap 'rs_unsaid $?' EXIT

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3
PROG=run.sh
NS_PREFIX=tcplab
# Where tcplab's files are (docs/design.md, "Installed").  In a clone: beside this script, the
# programs in $TCPLAB_BUILD/bin (relative to the tree, or absolute; default build/bin), outputs in
# the clone's outputs/.  `make install` installs this script as PREFIX/bin/tcplab with
# TCPLAB_INSTALLED=1 here: then PREFIX/share/tcplab, PREFIX/libexec/tcplab and outputs/ of the
# current directory, PREFIX found from the script's own path (so a DESTDIR copy runs too).
TCPLAB_INSTALLED=
if [ -n "$TCPLAB_INSTALLED" ]; then
	TOP=$(readlink -f "${BASH_SOURCE[0]}") && TOP=$(cd "${TOP%/*}/.." && pwd) &&
		[ -f "$TOP/share/tcplab/experiments/units" ] && [ -d "$TOP/libexec/tcplab" ] ||
		{ echo "$PROG: an incomplete install: no ${TOP:-PREFIX}/share/tcplab/experiments/units or ${TOP:-PREFIX}/libexec/tcplab (make install again)" >&2; exit 1; }
	TL_BIN=$TOP/libexec/tcplab TOP=$TOP/share/tcplab OUTPUTS=$PWD/outputs
	export PYTHONDONTWRITEBYTECODE=1	# the reports write nothing into the installed tree
else
	case ${TCPLAB_BUILD:-build} in /*) TL_BIN=$TCPLAB_BUILD/bin ;; *) TL_BIN=$TOP/${TCPLAB_BUILD:-build}/bin ;; esac
	OUTPUTS=$TOP/outputs
fi
# vm.sh takes the programs from TCPLAB_BIN, tcplab_matrix.py its default --out from TCPLAB_OUTPUTS
export TCPLAB_BIN=$TL_BIN TCPLAB_OUTPUTS=$OUTPUTS

# tcplab_version: the VERSION file (make install writes one into share/tcplab; a tarball can carry
# one at its top), else `git describe` of the clone, "-dirty" when a tracked file outside outputs/
# differs from the commit (run.sh itself rewrites outputs/), "unknown" without either.
tcplab_version() {
	local v=""
	if [ -f "$TOP/VERSION" ]; then
		IFS= read -r v < "$TOP/VERSION" || true
	elif v=$(git -C "$TOP" describe --tags --always 2> /dev/null); then
		v=${v#v}
		git -C "$TOP" diff --quiet HEAD -- . ':(exclude)outputs' 2> /dev/null || v=$v-dirty
	fi
	printf '%s\n' "${v:-unknown}"
}
TCPLAB_VERSION=$(tcplab_version)	# rs_install_dir writes it into each unit's raw directory

# runtime_missing: the Debian packages whose tools the units and reports run, added to the
# caller's array missing where the tool is not there (ensure_installed, ensure_built).
runtime_missing() {
	# the wire's faults, the ladder pictures (PATH may lack /usr/sbin for a user)
	PATH=$PATH:/usr/sbin:/sbin command -v nft > /dev/null || missing+=(nftables)
	command -v mscgen > /dev/null || missing+=(mscgen)
	# tcpevents, the exact-transition probe (docs/tcpevents.md), and the sandbox's panes
	command -v clang > /dev/null || missing+=(clang)
	PATH=$PATH:/usr/sbin:/sbin command -v bpftool > /dev/null || missing+=(bpftool)
	pkg-config --exists libbpf 2> /dev/null || missing+=(libbpf-dev)
	command -v tmux > /dev/null || missing+=(tmux)
	[ -x "$PY" ] || missing+=(python3)
}

# ensure_installed: what an installed tcplab needs at run time is there (it builds nothing and
# installs nothing, unlike a clone's ensure_built); else one line naming what is missing.
ensure_installed() {
	local missing=() p
	command -v ip > /dev/null || missing+=(iproute2)
	command -v strace > /dev/null || missing+=(strace)
	runtime_missing
	[ ${#missing[@]} -eq 0 ] || die $EXIT_FAIL "missing ${missing[*]}: install these Debian packages (apt-get install ${missing[*]})"
	[ -x "$TL_BIN/sockwatch" ] || die $EXIT_FAIL "no programs in $TL_BIN (an incomplete install: make install again)"
	for p in "$TL_BIN"/*; do
		is_elf "$p" || die $EXIT_FAIL "$p is not an executable program (make install again)"
	done
}
# shellcheck source=experiments/lib/netns.sh
. "$TOP/experiments/lib/netns.sh"
# shellcheck source=experiments/lib/wire.sh
. "$TOP/experiments/lib/wire.sh"
# shellcheck source=experiments/lib/runstate.sh
. "$TOP/experiments/lib/runstate.sh"
EXIT_FAIL=1 EXIT_USAGE=2 EXIT_SKIP=4

die() {
	local status=$1
	shift
	echo "$PROG: $*" >&2
	RS_SAID=1
	[ -z "${KTAP:-}" ] || ktap_die "$status" "$*"
	exit "$status"
}

# Progress lines go to stderr; with --ktap, once the KTAP header is out, to stdout as KTAP
# diagnostic lines ("# ...").
log() {
	local line
	# the time from printf's builtin strftime, not $(date): no command substitution (bash 5.2
	# can lose a SIGINT that comes while it waits for one: docs/reliability.md)
	printf -v line '%(%H:%M:%S)T [run] %s' -1 "$*"
	if [ -n "${KTAP_STARTED:-}" ]; then
		printf '# %s\n' "${line//$'\n'/ }" >&"$KTAP_FD"
	else
		printf '%s\n' "$line" >&2
	fi
}

# ---- --ktap: KTAP version 1 on stdout (Documentation/dev-tools/ktap.rst, docs/kernel-matrix.md) --
# One test point per unit of PLAN, in PLAN's order, printed by tcplab_finish.py when every unit
# has ended (a unit's report can still fail it); fd KTAP_FD is the original stdout, fd 1 is
# stderr from --ktap on.
KTAP="" KTAP_FD="" KTAP_STARTED=""
PLAN=()

ktap_start() {
	printf 'KTAP version 1\n1..%d\n# tcplab: %s, uname -r %s\n' "${#PLAN[@]}" \
		"${KERNEL:+units in a Debian $KERNEL guest under QEMU ($ACCEL), }run.sh on $(uname -m)" "$(uname -r)" >&"$KTAP_FD"
	KTAP_STARTED=1
}

# ktap_die STATUS MESSAGE: the end of the KTAP stream for a run that stops early.  A skip
# (status 4) reports every planned unit still without a result as skipped, "not run: MESSAGE" (no plan
# yet: "1..0 # SKIP", as kselftest.h's ksft_exit_skip); any other status after the header is
# "Bail out!"; before the header (bad usage) stdout stays empty.
ktap_die() {
	if [ "$1" -eq "$EXIT_SKIP" ]; then
		[ ${#PLAN[@]} -gt 0 ] || { printf 'KTAP version 1\n1..0 # SKIP %s\n' "$2" >&"$KTAP_FD"; return 0; }
		[ -n "$KTAP_STARTED" ] || ktap_start
		finish_state
		# SIGINT ignored, as for the plan: a Ctrl-C is run.sh's trap's, not a traceback
		(trap '' INT; exec "$PY" -S "$FINISH" ktap-skip "$2" "${FIN[@]}") 3>&"$KTAP_FD" ||
			echo "$PROG: tcplab_finish.py could not print the test points (above)" >&2
	elif [ -n "$KTAP_STARTED" ]; then
		printf 'Bail out! %s\n' "${2//$'\n'/ }" >&"$KTAP_FD"
	fi
}

# ---- the unit table (experiments/units) -----------------------------------------------------
# The only place that says what a unit is, read once by the plan (experiments/runner/
# tcplab_plan.py, in main).  TCPLAB_EXPERIMENTS points run.sh at another directory of collect
# scripts, reports and its own units table (the tests use it).

EXP=${TCPLAB_EXPERIMENTS:-$TOP/experiments}
# The knobs' values by UNIT:NAME, K_VALUE, and those given, K_GIVEN (the plan sets them; a guest's
# vm.sh gets them as TL_UNIT_KNOBS_*, which the plan exports).  What the job takes of the table
# (each unit's report, limit_s, alone, namespaces, the wire's MTU, its knobs' values) is in the
# plan's JOB_FIN and JOB_OWN.
declare -A K_VALUE=() K_GIVEN=()

# ---- run state ------------------------------------------------------------------------------
# Locks, namespaces, temporary directory, reaper, traps: experiments/lib/runstate.sh.
# Namespaces are named tcplab-<run pid>-<random>-<unit>; the run's record lists them.

# ---- build ------------------------------------------------------------------------------------

ensure_built() {
	local missing=()
	[ -z "$TCPLAB_INSTALLED" ] || { ensure_installed; return; }
	command -v cc > /dev/null || missing+=(gcc)
	command -v make > /dev/null || missing+=(make)
	command -v pkg-config > /dev/null && pkg-config --exists libmnl 2> /dev/null ||
		missing+=(libmnl-dev)
	command -v ip > /dev/null || missing+=(iproute2)
	command -v strace > /dev/null || missing+=(strace)
	pkg-config --exists libpcap 2> /dev/null || missing+=(libpcap-dev)
	# curl_pool's libcurl (p09-curl-nginx): a clone from before it lacks it, and make would fail
	pkg-config --exists libcurl 2> /dev/null || missing+=(libcurl4-openssl-dev)
	runtime_missing
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$(id -u)" -eq 0 ] && [ -z "${TCPLAB_USERNS:-}" ] ||
			die $EXIT_FAIL "missing ${missing[*]}: run 'make deps' as root"
		log "installing missing packages: ${missing[*]}"
		command -v make > /dev/null || {
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make
		}
		make -C "$TOP" -s deps >&2
	fi
	local p
	if [ -n "${TCPLAB_BUILD:-}" ]; then	# a build made elsewhere (make sanitize): use as is
		[ -x "$TL_BIN/sockwatch" ] || die $EXIT_FAIL "no programs in $TL_BIN (TCPLAB_BUILD)"
	else
		# a truncated program is newer than its objects, so make would call it up to date
		for p in "$TL_BIN"/*; do
			[ ! -f "$p" ] || is_elf "$p" || case $p in *.tmp) ;; *) rm -f "$p" ;; esac
		done
		make -C "$TOP" -s all >&2 || die $EXIT_FAIL "build failed"
	fi
	for p in "$TL_BIN"/*; do
		case $p in *.tmp) continue ;; esac
		[ ! -f "$p" ] || is_elf "$p" || die $EXIT_FAIL "$p is not an executable program (run make)"
	done
}

# is_elf FILE: an executable file that starts with ELF's magic number.
is_elf() {
	local magic=""
	[ -f "$1" ] && [ -x "$1" ] && IFS= read -r -N 4 magic < "$1" 2> /dev/null
	[ "$magic" = $'\177ELF' ]
}

# ---- units: experiments/runner/tcplab_host.py ----------------------------------------------------
# A host run's job: each unit in network namespaces of its own (named in the run's record before
# they are made), in a process group of its own, stopped at its limit_s, reaped with all it left,
# its raw directory put in place or failed or skipped with its reason; a full disk stops the
# units and gives the reserve back; then the run's end, as tcplab_finish.py's, in the same
# process.  Its units die with it (SIGTERM from run.sh's cleanup, or from the kernel when run.sh
# dies: --pdeathsig).
HOST=$TOP/experiments/runner/tcplab_host.py

# kill_running_units: for the cleanup (rs_cleanup): the job (tcplab_host.py or tcplab_guest.py)
# stopped, and with it every unit or vm.sh it runs.
kill_running_units() {
	finish_stop
}

# job_state: what both jobs take of the run itself (tcplab_job.py): its state, its record,
# tcplab's version, its reserve, in JST.  What the plan decides for the job (the knobs given,
# the host's or the guest's own options, the units) is the plan's JOB_OWN, made once, in
# tcplab_plan.py's job_args, for this run and for --kernel all's runs alike.
job_state() {
	JST=(--state "$RS_STATE" --record "$RS_RECORD" --version "$TCPLAB_VERSION")
	[ -z "$RS_ALLOW_FOREIGN" ] || JST+=(--allow-foreign-out)
	[ -z "$RS_RESERVE" ] || JST+=(--reserve "$RS_RESERVE")
}

# ---- the end of the run: experiments/runner/tcplab_finish.py -----------------------------------
# The reports, the failed units' outputs (tcplab_failed.py), the last lines, the KTAP test
# points and the run's exit status, in one program; run.sh hands it what happened to each unit.
FINISH=$TOP/experiments/runner/tcplab_finish.py FINISH_PID=""

# finish_state: what the run knows, as tcplab_finish.py's STATE arguments, in FIN: the run's
# own (its directories, the KTAP stream) and the plan's JOB_FIN (every unit's report and
# limit_s, the plan, the units it skipped with their reasons, each cut at tcplab_units.py's
# WHY_MAX bytes; the results of the units that ran are the job's own).
declare -A WHY=()
SKIPPED=() JOB_FIN=() JOB_OWN=()
finish_state() {
	FIN=(--prog "$PROG" --top "$TOP" --exp "$EXP" --py "$PY" --out "$OUT" --full-kb "$RS_FULL_KB")
	[ -z "${TMPDIR_RUN:-}" ] || FIN+=(--tmp "$TMPDIR_RUN")
	[ -z "$KTAP_STARTED" ] || FIN+=(--ktap-fd 3)
	FIN+=("${JOB_FIN[@]}")
}

# finish_stop: the run's job (tcplab_host.py or tcplab_guest.py) stopped (for the cleanup: rs_cleanup, through
# kill_running_units): SIGTERM kills the report it runs and ends it, or stops the guest's vm.sh
# (given 5 s); polled for 7 s until it is gone or a zombie, then SIGKILL (each report and vm.sh
# die with it: setpriv --pdeathsig).  Not `wait`: a signal that came as
# the job ended, while main's `wait` for it ran, left bash 5.2 in this trap's own wait for that
# pid for ever, in wait4(-1) with only the lock holders left as children (2 runs of 24, SIGTERM
# to run.sh alone at its "finished" line).
finish_stop() {
	local pid=$FINISH_PID
	[ -n "$pid" ] || return 0
	FINISH_PID=""
	kill -TERM "$pid" 2> /dev/null || return 0
	kill -CONT "$pid" 2> /dev/null || true
	for _ in $(seq 140); do
		proc_gone "$pid" && return 0
		sleep 0.05
	done
	kill -KILL "$pid" 2> /dev/null || true
}

# proc_gone PID: no process PID, or only its zombie (not yet reaped).
proc_gone() {
	local st
	{ read -r st < "/proc/$1/stat"; } 2> /dev/null || return 0
	st=${st##*) }
	[ "${st%% *}" = Z ]
}

# --kernel VER without --out: the output directory is the guest's, outputs/<its release>, and it
# is the one locked from the start (vm.sh --resolve names the release, fetching the package if
# need be).  Locking the host's outputs/<release> first, as before, made a second --kernel run of
# another series, started meanwhile, refuse ("in use") for a directory neither writes.
guest_out() {
	local line st=0
	ensure_built	# vm.sh --resolve checks the programs it would put in the guest
	line=$("$TOP/experiments/guest/vm.sh" --accel "$ACCEL" --resolve "$KERNEL") || st=$?
	if [ "$st" -ne 0 ]; then	# vm.sh's one line on stderr says why
		[ "$st" -eq "$EXIT_SKIP" ] || st=$EXIT_FAIL
		[ -z "$KTAP" ] || ktap_die "$st" "experiments/guest/vm.sh cannot have the $KERNEL kernel here (its reason is on stderr)"
		exit "$st"
	fi
	[ -n "${line%% *}" ] || die $EXIT_FAIL "--kernel $KERNEL: vm.sh --resolve named no release"
	OUT="$OUTPUTS/${line%% *}"
}

# A --kernel run's guest job (experiments/runner/tcplab_guest.py): vm.sh runs the units inside a
# Debian kernel under QEMU, their raw files come back to the host, each unit's is put in place,
# failed or skipped with its reason, and the run ends as tcplab_finish.py ends it, in the same
# process, into outputs/<the guest's release>/.  The guest runs them in the plan's VM_ORDER: under
# --kernel all each guest starts its units at another point of the same order (TCPLAB_ROTATE=I/N,
# tcplab_plan.py's rotate_plan).
GUEST=$TOP/experiments/runner/tcplab_guest.py


# ---- without root (docs/design.md, "Without root") ----------------------------------------------
# userns_run ARG...: run.sh again with the same arguments as root of a user namespace of its own
# (the user's uid mapped to 0), where the normal root path runs: network namespaces made with
# `ip netns add`, veth pairs, nft, tc, sysctls, captures.  Exits with its status; never returns.
#   -n -m  a network and a private mount namespace: USERNS_SETUP mounts a tmpfs on /run/netns,
#          seen by this run alone, so `ip netns` works; where there is no /run/netns, on /run
#          itself (then hidden in the run: its state directory goes in /tmp, as the sandbox's)
#   -p -f --mount-proc  the run is PID 1 of a PID namespace: when it dies, by SIGKILL too, the
#          kernel kills every process in it, and the namespaces go with the last one
#   --kill-child, setpriv --pdeathsig KILL  the same when this process dies
# unshare blocks INT and TERM while it waits for its child, so this process passes INT, TERM,
# HUP and QUIT on to the run (unshare's child, read from /proc).  The run keeps its records in
# this user's state directory (TCPLAB_STATE), not root's /run/tcplab; TCPLAB_USERNS tells it
# that it is not real root.
# shellcheck disable=SC2016 # expanded by the inner sh
USERNS_SETUP='mount -t tmpfs -o mode=0755 tcplab "$1" && mkdir -p /run/netns && shift && exec "$@"'
USERNS_PID=""
userns_run() {
	local sig st=0 mnt=/run/netns state self unshare=(unshare -Urnmpf --kill-child --mount-proc --propagation private)
	self=$(readlink -f -- "${BASH_SOURCE[0]}")	# this script: run.sh, or an installed tcplab
	if [ -d /run/netns ]; then
		state=$(rs_state_dir) || exit $EXIT_FAIL
	else
		mnt=/run state=$(XDG_RUNTIME_DIR=/tmp rs_state_dir) || exit $EXIT_FAIL
	fi
	"${unshare[@]}" sh -c "$USERNS_SETUP" sh "$mnt" true 2> /dev/null ||
		die $EXIT_SKIP "needs root, or unprivileged user namespaces (unshare -Urnmp) for network namespaces (see kernel.unprivileged_userns_clone, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
	# env --default-signal: bash starts a background command with INT and QUIT ignored, and a
	# shell started so can never trap them
	TCPLAB_USERNS=1 TCPLAB_STATE=$state PATH=$PATH:/usr/sbin:/sbin env --default-signal=INT,QUIT \
		setpriv --pdeathsig KILL "${unshare[@]}" sh -c "$USERNS_SETUP" sh "$mnt" "$self" "$@" >&"${KTAP_FD:-1}" &
	USERNS_PID=$!
	for sig in INT TERM HUP QUIT; do
		# shellcheck disable=SC2064 # the signal's name, fixed here
		# (a line `)` of its own ends the action: tests/test_reliability_interrupt.py)
		trap "userns_pass $sig; (:
)" "$sig"
	done
	while kill -0 "$USERNS_PID" 2> /dev/null; do wait "$USERNS_PID" || :; done
	wait "$USERNS_PID" || st=$?
	exit "$st"
}

# userns_pass SIG: SIG to the run in its user namespace (unshare's child).
userns_pass() {
	local child=""
	# the file has no newline at its end: read's status is 1 even when it read the pid
	read -r child _ < "/proc/$USERNS_PID/task/$USERNS_PID/children" 2> /dev/null || :
	[ -z "$child" ] || kill "-$1" "$child" 2> /dev/null || :
}

main() {
	local units=() args=("$@") code status=0 end
	KERNEL="" ACCEL=tcg OUT="" OUT_SET="" MTU_OPT="" QUICK="" LIST=""
	if [ "${1:-}" = diff ]; then
		shift
		[ $# -eq 2 ] || die $EXIT_USAGE "usage: ./run.sh diff DIR_A DIR_B"
		exec "$PY" "$TOP/experiments/tools/tcplab_diff.py" "$1" "$2"
	fi
	if [ "${1:-}" = matrix ]; then
		shift
		exec "$PY" "$TOP/experiments/tools/tcplab_matrix.py" "$@"
	fi
	if [ "${1:-}" = kcidb ]; then
		shift
		exec "$PY" "$TOP/experiments/tools/tcplab_kcidb.py" "$@"
	fi
	if [ "${1:-}" = sandbox ]; then
		shift
		ensure_built
		exec "$TOP/experiments/sandbox/sandbox.sh" "$@"
	fi
	unset "${!TL_KNOB_@}" "${!TL_UNIT_KNOBS_@}"	# a unit sees only the knobs run.sh gives it
	# The plan, decided before anything starts: the options, the unit table (read once), the
	# units a set selects, the knobs, --mtu, root, --kernel, and every refusal, in one program
	# (experiments/runner/tcplab_plan.py, docs/design.md "The runner"), whose bash this evals.
	# SIGINT ignored in it (Python then keeps it ignored): a Ctrl-C to the group lets it finish
	# its few milliseconds, and run.sh's own trap ends the run, instead of a KeyboardInterrupt
	# traceback from wherever Python was (CI's interrupt storm: SIGINT 1.09 s into a run, during
	# `import re`; a handler set in the script still left its first line open to it); -S: no
	# site module, the standard library is all it needs
	code=$(trap '' INT; exec "$PY" -S "$TOP/experiments/runner/tcplab_plan.py" --as "$PROG" "$EXP" "$@") || status=$?
	[ "$status" -eq 0 ] || die $EXIT_FAIL "cannot make the run's plan: tcplab_plan.py failed (status $status)"
	eval "$code"
	case $PLAN_ACTION in
	usage | text) printf '%s' "$PLAN_TEXT"; exit 0 ;;
	version) echo "tcplab $TCPLAB_VERSION"; exit 0 ;;
	esac
	# --ktap: KTAP alone on stdout; what the build, the units and the reports print goes to stderr
	[ -z "$KTAP" ] || [ -n "$LIST" ] || exec {KTAP_FD}>&1 1>&2
	[ "$PLAN_ACTION" != die ] || die "$PLAN_STATUS" "$PLAN_MSG"
	if [ "$PLAN_ACTION" = all ]; then	# the host run and the guests: experiments/guest/tcplab_all.py
		# built first: the driver's vm.sh --resolve needs the programs, and five children
		# building one fresh clone at once would race
		ensure_built
		exec "$PY" "$TOP/experiments/guest/tcplab_all.py" --run-sh "$TOP/run.sh" ${QUICK:+--quick} ${ALL:+--all} \
			${ACCEL_SET:+--accel "$ACCEL"} ${MTU_OPT:+--mtu "$MTU_OPT"} ${OUT_SET:+--out "$OUT"} \
			${RS_ALLOW_FOREIGN:+--allow-foreign-out} --host-units "${NAMED_UNITS[*]}" --guest-units "${GUEST_UNITS[*]}" \
			--prog "$PROG" --top "$TOP" --exp "$EXP" --outputs "$OUTPUTS" --version "$TCPLAB_VERSION" \
			--bin "$TL_BIN"
	fi
	units=("${RUN_UNITS[@]}")
	[ -n "$QUICK" ] && export TL_QUICK=1
	NS_MODE=netns
	if [ "$(id -u)" -ne 0 ] && [ -z "$KERNEL" ]; then
		# not root: this same run again, as root of a user namespace of its own (userns_run)
		userns_run "${args[@]}"
	fi
	if [ -n "${TCPLAB_USERNS:-}" ] && [ -z "$KERNEL" ]; then
		# the plan left out (or refused) the units that need real root (root=yes)
		RS_ALLOW_FOREIGN=1	# the user's own rights decide where it writes, not root's
		log "not root: running as root of an unprivileged user namespace (unshare -Urnmp)"
	fi
	[ -z "$KTAP" ] || ktap_start
	[ -z "$KERNEL" ] || [ -n "$OUT_SET" ] || guest_out
	rs_start
	ensure_built
	printf -v T0 '%(%s)T' -1
	log "running ${units[*]}${KERNEL:+ in Debian kernel $KERNEL ($ACCEL)}"
	# The run's job: the units, on this host (tcplab_host.py) or in a guest (tcplab_guest.py),
	# then the end of the run (the reports, the failed outputs, the last lines and KTAP's test
	# points, as tcplab_finish.py's), in one process; waited for as a job, so that a signal to
	# run.sh is acted on at once (the cleanup stops it, and it its units); SIGTERM when run.sh
	# dies (setpriv --pdeathsig), so it never writes after the run's locks are free
	finish_state
	job_state
	if [ -n "$KERNEL" ]; then
		[ -z "$ROTATE_NOTE" ] || log "$ROTATE_NOTE"
		end=("$GUEST" --t0 "$T0" "${FIN[@]}" "${JST[@]}" --outputs "$OUTPUTS" "${JOB_OWN[@]}")
	else
		end=("$HOST" --t0 "$T0" "${FIN[@]}" "${JST[@]}" --bin "$TL_BIN" --ns-name "$NS_PREFIX-$$" \
			--reserve-kb "$RS_RESERVE_KB" "${JOB_OWN[@]}")
	fi
	setpriv --pdeathsig TERM "$PY" -S "${end[@]}" 3>&"${KTAP_FD:-1}" &
	FINISH_PID=$!
	wait "$FINISH_PID" || status=$?
	FINISH_PID=""
	case $status in
	0 | "$EXIT_FAIL" | "$EXIT_SKIP") ;;
	"$EXIT_USAGE") ;;	# its own line said why (a bad call; a guest's directory refused)
	141) ;;	# SIGPIPE: stdout's reader is gone (--ktap | head), as run.sh's own printf died of it
	*)	# killed from outside, or a bug there: said, never a silent end
		if [ "$status" -gt 128 ]; then
			die $EXIT_FAIL "the run's end (${end[0]##*/}) was killed by SIG$(kill -l "$((status - 128))" 2> /dev/null || echo "$((status - 128))"): its reports, failed outputs or last lines may be missing"
		fi
		die $EXIT_FAIL "the run's end (${end[0]##*/}) failed with status $status (above): its reports, failed outputs or last lines may be missing" ;;
	esac
	exit "$status"
}

# exit on the same line: bash reads a script as it runs, so a file rewritten in place (as an
# editor writes it back) while a run is under way would otherwise be read on from the old offset
# after main returns (seen: "syntax error near unexpected token" and exit 2 at the end of a
# good run).
main "$@"; exit
