#!/usr/bin/env bash
# run.sh — the one entry point for tcplab experiments.  See ./run.sh --help.
set -euo pipefail
export LC_ALL=C
# run.sh is a shim: it finds where tcplab is and execs the runner, experiments/runner/
# tcplab_run.py, which does the run (docs/maintainers.md, "The runner, step by step").  Until
# then a signal ends run.sh at once with 128+N: nothing is made yet that needs undoing.  Without
# it bash ignores SIGQUIT and dies of the others by their default action, with no status of its
# own (CI: SIGQUIT then SIGHUP to run.sh while it still checked its build: killed by SIGHUP).
# Each action has a `)` line and an exit after it: rs_trap_signals (experiments/lib/runstate.sh)
# says why.
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
# No run ends non-zero with nothing said.  A command that fails where set -e ends the shim is
# recorded (errtrace: in functions too), and the exit names it in one line (CI: run.sh --kernel
# 6.12 exited 2 with an empty stderr, and nothing told where).
RS_ERR=""
set -o errtrace
trap 'RS_ERR="$? ${BASH_SOURCE[0]##*/}:$LINENO: $BASH_COMMAND"' ERR
# rs_unsaid STATUS: that line, for an exit with STATUS (this EXIT trap).
rs_unsaid() {
	[ "$1" -eq 0 ] || [ -z "$RS_ERR" ] ||
		printf '%s: stopped (status %s): a command failed at %s (its status %s)\n' \
			"${PROG:-run.sh}" "$1" "${RS_ERR#* }" "${RS_ERR%% *}" >&2
}
trap 'rs_unsaid $?' EXIT

# where this script is, with builtins alone (cd, pwd): nothing here can fail without a word
case ${BASH_SOURCE[0]} in */*) TOP=${BASH_SOURCE[0]%/*} ;; *) TOP=. ;; esac
TOP=$(cd "$TOP" && pwd)
PY=/usr/bin/python3
PROG=run.sh
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

main() {
	case ${1:-} in
	diff)
		shift
		[ $# -eq 2 ] || { echo "$PROG: usage: ./run.sh diff DIR_A DIR_B" >&2; exit 2; }
		exec "$PY" "$TOP/experiments/tools/tcplab_diff.py" "$1" "$2" ;;
	matrix) shift; exec "$PY" "$TOP/experiments/tools/tcplab_matrix.py" "$@" ;;
	kcidb) shift; exec "$PY" "$TOP/experiments/tools/tcplab_kcidb.py" "$@" ;;
	esac
	[ -x "$PY" ] || { echo "$PROG: missing python3: install the Debian package (apt-get install python3)" >&2; exit 1; }
	# The run itself, from its plan to its exit status: experiments/runner/tcplab_run.py (docs/
	# design.md "The runner").  Its stop signals blocked until its handlers are set (env
	# --block-signal; /usr/bin/env, as /usr/bin/python3, never one a PATH puts first): one that
	# comes while Python starts is acted on then, not lost, and never kills it with nothing
	# said.  -S: the standard library is all it needs.
	exec /usr/bin/env --block-signal=INT,TERM,HUP,QUIT "$PY" -S "$TOP/experiments/runner/tcplab_run.py" \
		--prog "$PROG" --top "$TOP" --bin "$TL_BIN" --outputs "$OUTPUTS" \
		--self "${BASH_SOURCE[0]}" ${TCPLAB_INSTALLED:+--installed} -- "$@"
}

# exit on the same line: bash reads a script as it runs, so a file rewritten in place (as an
# editor writes it back) while a run is under way would otherwise be read on from the old offset
# after main returns (seen: "syntax error near unexpected token" and exit 2 at the end of a
# good run).
main "$@"; exit
