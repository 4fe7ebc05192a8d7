"""run.sh --mtu against a unit's least MTU ("# mtu min: UNIT: N: why" in experiments/units,
docs/wire.md "Small MTUs"): below it a named unit is refused with one line naming the MTU and the
reason, a unit a set chose is skipped with the same reason, both before any unit starts; the
table's own mistakes are one line each.  The real table's p04 units refuse --mtu 87 (their
segments are IP-fragmented below 88, where they stalled), p05-close --mtu 100 (its fault rule
no longer drops the reply).  The refusals need no root; a fake table's run does."""
import os
import subprocess

import pytest

import lab_proc
from conftest import TOP

RUN = os.path.join(TOP, "run.sh")


def run(args, exp=None, timeout=30):
    env = dict(os.environ)
    if exp is not None:
        env["TCPLAB_EXPERIMENTS"] = str(exp)
    return subprocess.run([RUN, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("unit,why", [
    ("p04-short-reads", "below it each segment of its 1 MiB send is IP-fragmented and the "
     "transfer stalls"),
    ("p04-full-buffers", "below it each segment that fills the buffers is IP-fragmented and the "
     "transfer stalls"),
    ("p05-close", "its lost part drops the reply by an nft rule on IP length > 100, and below 101 "
     "the reply's segments are no longer than that unless GRO merged them"),
])
@pytest.mark.parametrize("mtu", ["68", "87"])
def test_a_named_unit_below_its_mtu_min_is_refused_in_one_line(tmp_path, unit, why, mtu):
    least = 101 if unit == "p05-close" else 88
    r = run(["--out", str(tmp_path / "out"), "--mtu", mtu, unit])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"run.sh: {unit}: --mtu {mtu} is below {least}, the least MTU it "
                               f"runs at: {why} ("), r.stderr
    assert not (tmp_path / "out").exists()          # refused before anything was made


def test_the_refusal_comes_before_the_guests(tmp_path):
    """--kernel all would boot five guests: the MTU is refused first, at once."""
    r = run(["--kernel", "all", "--out", str(tmp_path / "out"), "--mtu", "68", "p04-short-reads",
             "p01-wire-connect"])
    assert r.returncode == 2 and r.stderr.startswith("run.sh: p04-short-reads: --mtu 68 is below 88")


def test_the_table_declares_the_floor_only_where_a_unit_failed():
    """The three p04 units at 88 (p04-tail-loss: at 87 its report found no tail segment),
    p05-close at 101, no other unit (docs/wire.md, "Small MTUs": the others ran at 68)."""
    with open(os.path.join(TOP, "experiments", "units")) as f:
        lines = [ln.split(": ")[:3] for ln in f if ln.startswith("# mtu min: ")]
    assert lines == [["# mtu min", "p04-short-reads", "88"], ["# mtu min", "p04-full-buffers", "88"],
                     ["# mtu min", "p04-tail-loss", "88"], ["# mtu min", "p05-close", "101"]]


def test_p05_close_is_refused_at_100(tmp_path):
    r = run(["--out", str(tmp_path / "out"), "--mtu", "100", "p05-close"])
    assert r.returncode == 2 and "p05-close: --mtu 100 is below 101" in r.stderr


def fake_experiments(tmp_path, extra="", wire_netns="wire"):
    """A table of two units: t-wire on a wire with "# mtu min: t-wire: 88: ..." (its script
    fails if it runs below 88) and t-pass in one namespace."""
    exp = lab_proc.experiments(
        tmp_path,
        "# mtu min: t-wire: 88: made to need 88 by tests/test_run_mtu_min.py\n" + extra +
        f"t-wire - default run no 1 30 yes {wire_netns} yes\n"
        "t-pass - default run no 1 30 no 1 yes\n",
        {("t-wire", "t-wire.sh"): lab_proc.COLLECT_HEAD + 'tl_wire_init "$1"\n'
         '[ "$TL_MTU" -ge 88 ] || tl_die "ran at MTU $TL_MTU"\necho "mtu=$TL_MTU" > "$RAW/ran.txt"\n',
         ("t-pass", "t-pass.sh"): lab_proc.COLLECT_INIT + 'echo ran > "$RAW/ran.txt"\n'})
    for u in ("t-wire", "t-pass"):
        os.chmod(exp / u / f"{u}.sh", 0o755)
    return exp


@pytest.mark.netns
def test_a_unit_a_set_chose_is_skipped_and_the_rest_runs(tmp_path):
    exp = fake_experiments(tmp_path)
    r = run(["--out", str(tmp_path / "out"), "--mtu", "68"], exp, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    why = "--mtu 68 is below 88, the least MTU it runs at: made to need 88 by tests/test_run_mtu_min.py"
    assert f"t-wire: skipped: {why}" in r.stderr
    assert f"1 skipped (t-wire: {why})" in r.stderr
    assert (tmp_path / "out" / "raw" / "t-pass" / "ran.txt").is_file()
    assert not (tmp_path / "out" / "raw" / "t-wire" / "ran.txt").exists()


@pytest.mark.netns
def test_at_its_mtu_min_the_unit_runs(tmp_path):
    exp = fake_experiments(tmp_path)
    r = run(["--out", str(tmp_path / "out"), "--mtu", "88", "t-wire"], exp, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "raw" / "t-wire" / "ran.txt").read_text() == "mtu=88\n"


def test_all_units_skipped_is_a_skip(tmp_path):
    """Every unit a set chose needs more: exit 4 (skip), one line."""
    exp = fake_experiments(tmp_path)
    (exp / "units").write_text("\n".join(ln for ln in (exp / "units").read_text().splitlines()
                                         if not ln.startswith("t-pass")) + "\n")
    r = run(["--out", str(tmp_path / "out"), "--mtu", "68"], exp)
    assert r.returncode == 4
    assert r.stderr.splitlines()[-1] == "run.sh: --mtu 68: every unit selected needs a larger MTU"


@pytest.mark.parametrize("extra,wire_netns,word", [
    ("# mtu min: t-pass: 88: not a wire unit\n", "wire", "mtu min for 't-pass', which is no wire unit"),
    ("", "wire:80", "t-wire: netns wire:80 is below its mtu min 88"),
    ("# mtu min: t-wire: 67: too small\n", "wire", "mtu min '67': want 68..65535"),
])
def test_a_bad_mtu_min_in_the_table_is_one_line(tmp_path, extra, wire_netns, word):
    exp = fake_experiments(tmp_path, extra, wire_netns)
    r = run(["--list"], exp)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
