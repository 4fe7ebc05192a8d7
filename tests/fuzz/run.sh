#!/bin/sh
# tests/fuzz/run.sh BUILD SECONDS TARGET... — run each libFuzzer target BUILD/TARGET for SECONDS,
# from its corpus (BUILD/corpus/TARGET, grown across runs) and its seeds (BUILD/seeds/TARGET).
# One line per target on stdout, in the order given, also appended to BUILD/fuzz-stats.txt; a
# crash leaves its input in BUILD/crashes/TARGET/ and makes the exit status 1.  `make fuzz` runs
# this.  FUZZ_SEED (default 1) fixes libFuzzer's random seed, so a run from a fresh clone (as in
# CI) explores the same inputs in the same order; FUZZ_SEED=0 lets libFuzzer pick one.
# FUZZ_JOBS (default 1) targets run at once, each on a core of its own for its SECONDS: CI runs
# two at a time on its 2 cores (5 targets of 60 s: 3 minutes instead of 5).
set -u
[ $# -ge 3 ] || { echo "usage: tests/fuzz/run.sh BUILD SECONDS TARGET..." >&2; exit 2; }
build=$1 secs=$2 jobs=${FUZZ_JOBS:-1}
shift 2
case $jobs in ''|*[!0-9]*|0) echo "tests/fuzz/run.sh: FUZZ_JOBS must be a whole number >= 1: '$jobs'" >&2; exit 2 ;; esac

# one_target T: run T, leave its result line in BUILD/T.result
one_target() {
	t=$1
	mkdir -p "$build/corpus/$t" "$build/crashes/$t"
	log=$build/$t.log
	"$build/$t" -max_total_time="$secs" -seed="${FUZZ_SEED:-1}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$build/crashes/$t/" "$build/corpus/$t" "$build/seeds/$t" > "$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	corpus=$(ls "$build/corpus/$t" | wc -l)
	crashes=$(ls "$build/crashes/$t" | wc -l)
	result=ok
	if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
		result=crash
	fi
	echo "target=$t seconds=$secs execs=${execs:-0} corpus=$corpus crashes=$crashes result=$result" \
		> "$build/$t.result"
}

# report T: print T's line, note it, and say why when it crashed; 1 if it did
report() {
	line=$(cat "$build/$1.result" 2> /dev/null) || line="target=$1 seconds=$secs result=crash (no result)"
	echo "$line"
	echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $line" >> "$build/fuzz-stats.txt"
	case $line in *result=ok) return 0 ;; esac
	grep -m 5 -E 'ERROR|SUMMARY|runtime error' "$build/$1.log" >&2
	ls "$build/crashes/$1" >&2
	return 1
}

trap 'kill $(jobs -p) 2> /dev/null; exit 130' INT TERM
status=0
set -- "$@"
while [ $# -gt 0 ]; do
	batch=""
	n=0
	while [ $# -gt 0 ] && [ $n -lt "$jobs" ]; do
		rm -f "$build/$1.result"
		one_target "$1" &
		batch="$batch $1"
		n=$((n + 1))
		shift
	done
	wait
	for t in $batch; do
		report "$t" || status=1
	done
done
exit $status
