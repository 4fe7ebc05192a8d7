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


DIES_WATCHING = r"""
. "$COLLECT"
tl_init "$RAWDIR"
tl_watch "$RAWDIR/sockwatch.txt" -4 -s listen -p 1
ls "$RAWDIR"
tl_die "made to fail while sockwatch runs"
"""


def test_a_unit_that_dies_while_watching_leaves_no_fifo(tmp_path, bindir):
    """tl_watch's two fifos are removed by the exit trap too: a failed unit's raw directory is
    kept, and a fifo in it could not be committed (one was, in a 6.12 guest's p04-full-buffers)."""
    raw = tmp_path / "raw"
    r = subprocess.run(["sh", "-c", DIES_WATCHING, "t.sh"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, COLLECT=COLLECT, RAWDIR=str(raw),
                                            TL_UNIT="t", TL_BIN=bindir))
    assert r.returncode != 0 and "made to fail while sockwatch runs" in r.stderr, r.stderr
    assert "sockwatch.txt.fifo" in r.stdout, r.stdout      # they were there while it ran
    left = sorted(p.name for p in raw.iterdir())
    assert not [n for n in left if n.endswith(".fifo")], left
    assert "sockwatch.txt" in left
