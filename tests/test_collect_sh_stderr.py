"""experiments/lib/collect.sh leaves a program's stderr file only when the program wrote to it:
its exit trap removes the empty *.err files of the raw directory once every program is stopped,
on success and on tl_die alike, in the host's runs and the guests' (docs/output-format.md)."""
import os
import subprocess

from conftest import TOP

COLLECT = os.path.join(TOP, "experiments", "lib", "collect.sh")

SCRIPT = r"""
. "$COLLECT"
tl_init "$RAWDIR"
tl_bg "$RAWDIR/quiet.txt" sh -c 'echo ready; exec sleep 30'
tl_wait_line "$TL_LAST" "$RAWDIR/quiet.txt" '^ready' 5
tl_bg "$RAWDIR/loud.txt" sh -c 'echo warning >&2; echo ready; exec sleep 30'
tl_wait_line "$TL_LAST" "$RAWDIR/loud.txt" '^ready' 5
sh -c 'true' > "$RAWDIR/fg.txt" 2> "$RAWDIR/fg.txt.err"
: > "$RAWDIR/empty-stdout.txt"
ls "$RAWDIR"
[ "$HOW" = die ] && tl_die "made to fail"
exit 0
"""


def run(tmp_path, bindir, how):
    raw = tmp_path / "raw"
    r = subprocess.run(["sh", "-c", SCRIPT, "t.sh"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, COLLECT=COLLECT, RAWDIR=str(raw), HOW=how,
                                TL_UNIT="t", TL_BIN=bindir))
    return r, sorted(p.name for p in raw.iterdir())


def test_empty_stderr_files_go_at_the_end(tmp_path, bindir):
    r, left = run(tmp_path, bindir, "ok")
    assert r.returncode == 0, r.stderr
    # all three were there while the unit ran
    assert {"quiet.txt.err", "loud.txt.err", "fg.txt.err"} <= set(r.stdout.split()), r.stdout
    assert [n for n in left if n.endswith(".err")] == ["loud.txt.err"], left
    assert (tmp_path / "raw" / "loud.txt.err").read_text() == "warning\n"
    # stdout files stay, empty or not: only stderr files follow the rule
    assert {"quiet.txt", "loud.txt", "fg.txt", "empty-stdout.txt"} <= set(left), left


def test_a_failed_unit_keeps_only_stderr_that_says_something(tmp_path, bindir):
    r, left = run(tmp_path, bindir, "die")
    assert r.returncode == 1 and "made to fail" in r.stderr, r.stderr
    assert [n for n in left if n.endswith(".err")] == ["loud.txt.err"], left
    assert "status.txt" in left
