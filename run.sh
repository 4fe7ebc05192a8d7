#!/usr/bin/env bash
# run.sh — the one entry point for tcplab experiments.  See ./run.sh --help.
set -euo pipefail
export LC_ALL=C

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3
PROG=run.sh
NS_PREFIX=tcplab
# The programs: $TCPLAB_BUILD/bin (relative to the tree, or absolute), default build/bin.
case ${TCPLAB_BUILD:-build} in /*) TL_BIN=$TCPLAB_BUILD/bin ;; *) TL_BIN=$TOP/${TCPLAB_BUILD:-build}/bin ;; esac
# shellcheck source=experiments/lib/netns.sh
. "$TOP/experiments/lib/netns.sh"
# shellcheck source=experiments/lib/runstate.sh
. "$TOP/experiments/lib/runstate.sh"
EXIT_FAIL=1 EXIT_USAGE=2 EXIT_SKIP=4

usage() {
	cat <<USAGE
usage: ./run.sh [--quick] [--all] [--kernel VERSION] [--accel tcg|kvm] [--out DIR]
                [--allow-foreign-out] [NAME...]
       ./run.sh diff DIR_A DIR_B
       ./run.sh --list | --help

Builds what is missing (installing missing Debian packages when root), runs each experiment
unit in its own fresh network namespace, and writes outputs/<kernel release>/: for every
report a .txt for people and a .json for tools, and raw/<unit>/ with what the programs printed.

  (no NAME)        the connect() investigation, part 1: every p01-* unit, side by side
  --quick          skip p01-synretry-default (the blocking connect that takes over 2 minutes)
  --all            the p01 units and the labs (connect-modes, poll-scaling, accept-path)
  NAME...          only these units (see --list)
  --kernel VER     run inside a Debian kernel VER (e.g. 6.1, 6.12) booted under QEMU
  --accel A        with --kernel: tcg (default, measured faster here) or kvm
  --out DIR        write to DIR instead of outputs/<kernel release>; one run at a time per DIR
  --allow-foreign-out  as root, write to a DIR another user owns (refused by default)
  diff A B         compare two output directories through their .json files (exit 1 if they differ)
  --list           list the units

Units that measure speed (marked '# tcplab: exclusive') run alone, after the others.
Not root: each unit runs in an unprivileged user+network namespace (unshare -rn) instead.
Exit status: 0 all units ran and reported, 1 a unit failed, 2 bad usage, 4 skipped (neither
root nor unprivileged user namespaces).
USAGE
}

die() {
	local status=$1
	shift
	echo "$PROG: $*" >&2
	exit "$status"
}

log() {
	printf '%s [run] %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

all_units() {
	local f
	for f in "$TOP"/experiments/*.sh; do
		f=${f##*/}
		f=${f%.sh}
		case $f in lib | vm-selftest) ;; *) echo "$f" ;; esac
	done
}

is_exclusive() {
	grep -q '^# tcplab: exclusive' "$TOP/experiments/$1.sh"
}

# The report a unit feeds: experiments/<unit>.py, else the unit minus its last -suffix.
report_of() {
	if [ -f "$TOP/experiments/$1.py" ]; then
		echo "$1"
	elif [ -f "$TOP/experiments/${1%-*}.py" ]; then
		echo "${1%-*}"
	fi
}

# ---- run state ------------------------------------------------------------------------------
# Locks, namespaces, temporary directory, reaper, traps: experiments/lib/runstate.sh.
# Namespaces are named tcplab-<run pid>-<random>-<unit>; the run's record lists them.

# ---- build ------------------------------------------------------------------------------------

ensure_built() {
	local missing=()
	command -v cc > /dev/null || missing+=(gcc)
	command -v make > /dev/null || missing+=(make)
	command -v pkg-config > /dev/null && pkg-config --exists libmnl 2> /dev/null ||
		missing+=(libmnl-dev)
	command -v ip > /dev/null || missing+=(iproute2)
	command -v strace > /dev/null || missing+=(strace)
	[ -x "$PY" ] || missing+=(python3)
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$(id -u)" -eq 0 ] || die $EXIT_FAIL "missing ${missing[*]}: run 'make deps' as root"
		log "installing missing packages: ${missing[*]}"
		command -v make > /dev/null || {
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make
		}
		make -C "$TOP" -s deps >&2
	fi
	if [ -n "${TCPLAB_BUILD:-}" ]; then	# a build made elsewhere (make sanitize): use as is
		[ -x "$TL_BIN/sockwatch" ] || die $EXIT_FAIL "no programs in $TL_BIN (TCPLAB_BUILD)"
		return 0
	fi
	make -C "$TOP" -s all >&2 || die $EXIT_FAIL "build failed"
}

# ---- units ------------------------------------------------------------------------------------

# Start one unit in its namespace; its pid goes to UNIT_PID[unit].
declare -A UNIT_PID=() UNIT_T0=() UNIT_NS=()
start_unit() {
	local unit=$1 ns="$NS_PREFIX-$$-$RANDOM$RANDOM-$1"
	mkdir -p "$TMPDIR_RUN/raw"
	UNIT_T0[$unit]=$SECONDS
	UNIT_NS[$unit]=""
	if [ "$NS_MODE" = userns ]; then
		# not root: a user+network namespace of its own, gone with its last process
		unshare -rn sh -c '"$0" link set lo up && exec "$@"' "$IP" \
			env TL_BIN="$TL_BIN" ${TL_QUICK:+TL_QUICK=1} \
			sh "$TOP/experiments/$unit.sh" "$TMPDIR_RUN/raw/$unit" &
		UNIT_PID[$unit]=$!
		log "$unit: started in an unprivileged user+network namespace (unshare -rn)"
		return 0
	fi
	ns=${ns:0:60}
	make_ns "$ns"
	UNIT_NS[$unit]=$ns
	ip netns exec "$ns" env TL_BIN="$TL_BIN" ${TL_QUICK:+TL_QUICK=1} \
		sh "$TOP/experiments/$unit.sh" "$TMPDIR_RUN/raw/$unit" &
	UNIT_PID[$unit]=$!
	log "$unit: started in namespace $ns"
}

# Wait for one unit; on success move its raw directory into place (old one replaced whole).
finish_unit() {
	local unit=$1 status=0
	wait "${UNIT_PID[$unit]}" || status=$?
	[ -z "${UNIT_NS[$unit]}" ] || tl_netns_delete "${UNIT_NS[$unit]}" # and what it left running
	if [ "$status" -ne 0 ]; then
		log "$unit: FAILED (exit $status) after $((SECONDS - UNIT_T0[$unit])) s"
		FAILED+=("$unit")
		return 0
	fi
	rs_install_dir "$TMPDIR_RUN/raw/$unit" "$OUT/raw/$unit" || die $EXIT_FAIL "$unit: cannot put its raw directory in place"
	find "$OUT/raw/$unit" -name '*.err' -empty -delete	# stderr files that stayed empty
	DONE_UNITS+=("$unit")
	log "$unit: done in $((SECONDS - UNIT_T0[$unit])) s"
}

run_host() {
	local u parallel=() exclusive=()
	for u in "$@"; do
		if is_exclusive "$u"; then exclusive+=("$u"); else parallel+=("$u"); fi
	done
	for u in "${parallel[@]}"; do start_unit "$u"; done
	for u in "${parallel[@]}"; do finish_unit "$u"; done
	for u in "${exclusive[@]}"; do
		start_unit "$u"
		finish_unit "$u"
	done
}

run_reports() {
	local u r seen=" "
	for u in "${DONE_UNITS[@]}"; do
		r=$(report_of "$u")
		[ -n "$r" ] || continue
		case $seen in *" $r "*) continue ;; esac
		seen="$seen$r "
		# SIGINT ignored from the start: a Ctrl-C to the process group must not become a
		# KeyboardInterrupt traceback while Python is still importing; this script's own
		# trap stops the report (it writes through a temporary file and a rename).
		if (trap '' INT && exec "$PY" "$TOP/experiments/$r.py" "$OUT/raw" "$OUT"); then
			log "wrote ${OUT#"$TOP"/}/$r.txt and .json"
		else
			log "report $r FAILED"
			FAILED+=("report:$r")
		fi
	done
}

# Run units inside a Debian kernel under QEMU (experiments/lib/vm.sh); raw files come back to the host and
# are reported here, into outputs/<the guest's release>/.
run_vm() {
	local raw="$TMPDIR_RUN/raw" status=0 release u
	mkdir -p "$raw"
	rs_run_vm --accel "$ACCEL" "$KERNEL" "$raw" "$@" || status=$?
	[ "$status" -ne "$EXIT_SKIP" ] || exit "$EXIT_SKIP"
	release=$(sed -n 's/^kernel=//p' "$raw/vm.txt" 2> /dev/null | head -n 1)
	[ -n "$release" ] || die $EXIT_FAIL "the guest reported no kernel release (see above)"
	[ -n "$OUT_SET" ] || rs_switch_out "$TOP/outputs/$release"
	for u in "$@"; do
		[ ! -d "$raw/$u" ] || cp "$raw/vm.txt" "$raw/$u/vm.txt"	# how this unit's guest ran
		# a unit that ran to its end (unit.U=0) counts even when a later one hung the guest
		if [ -d "$raw/$u" ] && grep -qx "unit\.$u=0" "$raw/vm.txt"; then
			rs_install_dir "$raw/$u" "$OUT/raw/$u" || die $EXIT_FAIL "$u: cannot put its raw directory in place"
			DONE_UNITS+=("$u")
		else
			FAILED+=("$u")
		fi
	done
}

main() {
	local quick="" all="" units=() u
	KERNEL="" ACCEL=tcg OUT="" OUT_SET=""
	if [ "${1:-}" = diff ]; then
		shift
		[ $# -eq 2 ] || die $EXIT_USAGE "usage: ./run.sh diff DIR_A DIR_B"
		exec "$PY" "$TOP/experiments/tcplab_diff.py" "$1" "$2"
	fi
	while [ $# -gt 0 ]; do
		case $1 in
		-h | --help) usage; exit 0 ;;
		--list) all_units; exit 0 ;;
		--quick) quick=1 ;;
		--all) all=1 ;;
		--kernel) [ $# -ge 2 ] || die $EXIT_USAGE "--kernel needs a version (e.g. 6.1)"; KERNEL=$2; shift ;;
		--accel) [ $# -ge 2 ] || die $EXIT_USAGE "--accel needs tcg or kvm"; ACCEL=$2; shift ;;
		--out) [ $# -ge 2 ] || die $EXIT_USAGE "--out needs a directory"; OUT=$2; OUT_SET=1; shift ;;
		--allow-foreign-out) RS_ALLOW_FOREIGN=1 ;;
		-*) die $EXIT_USAGE "unknown option '$1' (see ./run.sh --help)" ;;
		*) units+=("$1") ;;
		esac
		shift
	done
	case $ACCEL in tcg | kvm) ;; *) die $EXIT_USAGE "--accel '$ACCEL': want tcg or kvm" ;; esac
	[ -z "$KERNEL" ] || [[ $KERNEL =~ ^[0-9]+\.[0-9]+$ ]] ||
		die $EXIT_USAGE "--kernel '$KERNEL': want a version like 6.1 or 6.12"
	for u in "${units[@]}"; do
		[ -f "$TOP/experiments/$u.sh" ] && [ "$u" != lib ] ||
			die $EXIT_USAGE "unknown experiment '$u' (./run.sh --list shows them)"
	done
	if [ ${#units[@]} -eq 0 ]; then
		for u in $(all_units); do
			case $u in p01-*) ;; *) [ -n "$all" ] || continue ;; esac
			[ -z "$quick" ] || [ "$u" != p01-synretry-default ] || continue
			units+=("$u")
		done
	fi
	[ -n "$quick" ] && export TL_QUICK=1
	NS_MODE=netns
	if [ "$(id -u)" -ne 0 ] && [ -z "$KERNEL" ]; then
		IP=$(PATH=$PATH:/usr/sbin:/sbin command -v ip) && unshare -rn true 2> /dev/null ||
			die $EXIT_SKIP "needs root, or unprivileged user namespaces (unshare -rn) for network namespaces"
		NS_MODE=userns
	fi
	rs_start
	ensure_built
	FAILED=() DONE_UNITS=()
	local t0=$SECONDS
	log "running ${units[*]}${KERNEL:+ in Debian kernel $KERNEL ($ACCEL)}"
	if [ -n "$KERNEL" ]; then run_vm "${units[@]}"; else run_host "${units[@]}"; fi
	run_reports
	log "finished in $((SECONDS - t0)) s: ${#DONE_UNITS[@]} unit(s) ran, ${#FAILED[@]} failed${FAILED:+ (${FAILED[*]})}; outputs in ${OUT#"$TOP"/}/"
	[ ${#FAILED[@]} -eq 0 ] || exit $EXIT_FAIL
}

main "$@"
