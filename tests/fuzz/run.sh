#!/bin/sh
# tests/fuzz/run.sh BUILD SECONDS TARGET... — run each libFuzzer target BUILD/TARGET for SECONDS,
# from its corpus (BUILD/corpus/TARGET, grown across runs) and its seeds (BUILD/seeds/TARGET).
# One line per target on stdout, also appended to BUILD/fuzz-stats.txt; a crash leaves its input
# in BUILD/crashes/TARGET/ and makes the exit status 1.  `make fuzz` runs this.
# FUZZ_SEED (default 1) fixes libFuzzer's random seed, so a run from a fresh clone (as in CI)
# explores the same inputs in the same order; FUZZ_SEED=0 lets libFuzzer pick one.
set -u
[ $# -ge 3 ] || { echo "usage: tests/fuzz/run.sh BUILD SECONDS TARGET..." >&2; exit 2; }
build=$1 secs=$2
shift 2
status=0
for t in "$@"; do
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
		status=1
	fi
	line="target=$t seconds=$secs execs=${execs:-0} corpus=$corpus crashes=$crashes result=$result"
	echo "$line"
	echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $line" >> "$build/fuzz-stats.txt"
	[ "$result" = ok ] || { grep -m 5 -E 'ERROR|SUMMARY|runtime error' "$log" >&2; ls "$build/crashes/$t" >&2; }
done
exit $status
