"""experiments/lib/collect.sh's readiness poll, on the edge where it once lost a race: a program
prints the awaited line and exits between one look at the file and the check that it still
runs.  grep is replaced by a shell function that misses the line on its first call only, which
is that interleaving made certain."""
import os
import subprocess

from conftest import TOP

COLLECT = os.path.join(TOP, "experiments", "lib", "collect.sh")

SCRIPT = r"""
. "$COLLECT"
state=$(mktemp)
echo 0 > "$state"
grep() {
	n=$(cat "$state"); echo $((n + 1)) > "$state"
	if [ "$n" -eq 0 ]; then echo 0; return 1; fi   # the look before the line was there
	command grep "$@"
}
printf 'ready x=1\nready x=2\n' > "$FILE"
true & pid=$!
wait "$pid"
tl_wait_count "$pid" "$FILE" '^ready ' "$WANT" 2 && echo "found"
rm -f "$state"
"""


def run(tmp_path, want):
    f = tmp_path / "prog.txt"
    return subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=20,
                          env=dict(os.environ, COLLECT=COLLECT, FILE=str(f), WANT=str(want),
                                   TL_UNIT="t"))


def test_lines_printed_before_the_exit_count(tmp_path):
    r = run(tmp_path, 2)
    assert r.returncode == 0 and r.stdout == "found\n", r.stderr


def test_an_exit_without_the_lines_still_fails(tmp_path):
    r = run(tmp_path, 3)
    assert r.returncode == 1 and r.stdout == ""
    assert "prog exited before 3 lines of '^ready '" in r.stderr
