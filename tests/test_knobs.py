"""Knobs: a unit's parameters, declared in experiments/units (`# knob:` lines), set with
`./run.sh UNIT --set NAME=VALUE`, checked before anything starts, handed to the collect script
as TL_KNOB_<NAME> and recorded in the outputs (raw/<unit>/knobs.txt, "knobs" in the .json, a
`knobs:` line in the .txt; docs/output-format.md, "Knobs")."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import lab_proc
from conftest import TOP

sys.path.insert(0, os.path.join(TOP, "experiments", "report"))
import tcplab  # noqa: E402

RUN = os.path.join(TOP, "run.sh")
# the knobs the exercises use (docs/sheets; /work/notes/knobs.md): unit, name, default
EXERCISE_KNOBS = [("p01-synretry", "syncnt", "2"), ("p01-synretry-default", "syn_retries", "6"),
                  ("p02-accept-queue", "seq_backlog", "4"), ("p03-small-writes", "requests", "100"),
                  ("p03-small-writes", "bulk", "2000"), ("p05-close", "half", "300"),
                  ("p06-time-wait", "fin_timeout", "60"), ("p02-accept-queue", "flood_backlog", "8"),
                  ("p04-tail-loss", "flight", "4"), ("p04-tail-loss", "drops", "3"),
                  ("p04-mid-loss", "before", "4"), ("p04-mid-loss", "after", "5"),
                  ("p01-strace", "backlog", "8"), ("p01-strace", "timeout_ms", "2000")]


def run(args, env=None, timeout=30):
    return subprocess.run([RUN, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


# ---- bad input: one line, exit 2, nothing made --------------------------------------------------

BAD = [
    (["p03-small-writes", "--set", "nosuch=1"], "--set nosuch: no such knob"),
    (["p03-small-writes", "--set", "requests=abc"], "--set requests='abc': want a whole number 1..2000"),
    (["p03-small-writes", "--set", "requests=0"], "want a whole number 1..2000"),
    (["p03-small-writes", "--set", "requests=2001"], "want a whole number 1..2000"),
    (["p03-small-writes", "--set", "requests=-1"], "want a whole number"),
    (["p03-small-writes", "--set", "requests=05"], "want a whole number"),
    (["p03-small-writes", "--set", "requests="], "want a whole number"),
    (["p03-small-writes", "--set", "requests=99999999999999999999"], "want a whole number"),
    (["p03-small-writes", "--set", "requests"], "want NAME=VALUE"),
    (["p03-small-writes", "--set", "=5"], "want NAME=VALUE"),
    (["p03-small-writes", "--set", "Requests=5"], "want NAME=VALUE"),
    (["p03-small-writes", "--set"], "--set needs NAME=VALUE"),
    (["p01-machine", "--set", "requests=5"], "no such knob for p01-machine"),
    (["p01-synretry", "--set", "requests=5"], "p01-synretry has syncnt"),
    (["p01-synretry", "--set", "syncnt=5"], "want a whole number 1..4"),
    (["p03-small-writes", "--set", "requests=5", "--set", "requests=6"], "--set requests given twice"),
    (["p03-small-writes", "--set", "requests=5", "--set", "requests=5"], "given twice"),
    (["--set", "requests=5"], "--set needs the units named"),
    (["--all", "--set", "requests=5"], "--set needs the units named"),
    (["--list", "--set", "requests=5"], "--list takes no other argument"),
    (["p03-small-writes", "--set", "requests=5", "--kernel", "all"], "--set with --kernel all"),
    (["p03-small-writes", "--help", "--set", "requests=5"], "--help with a unit takes no other option"),
    (["no-such-unit", "--help"], "unknown experiment 'no-such-unit'"),
]


@pytest.mark.parametrize("args,word", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_set_is_one_line_exit_2_and_nothing_made(tmp_path, args, word):
    out = tmp_path / "out"
    r = run(["--out", str(out)] + args if "--list" not in args and "--help" not in args else args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert r.stdout == ""
    assert not out.exists()


def test_a_bad_older_variable_is_refused_like_a_bad_set(tmp_path):
    out = tmp_path / "out"
    r = run(["--out", str(out), "p03-small-writes"], env={"TL_P03_REQUESTS": "many"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "TL_P03_REQUESTS='many'" in r.stderr and "1..2000" in r.stderr
    assert not out.exists()


# ---- what the user sees ---------------------------------------------------------------------------

def test_list_shows_each_units_knobs_with_their_defaults():
    r = run(["--list"])
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:]}
    for unit, name, default in EXERCISE_KNOBS:
        assert f"{name}={default}" in rows[unit].split("knobs: ")[1], rows[unit]
    assert "knobs" not in rows["p01-machine"]


@pytest.mark.parametrize("args", [["p03-small-writes", "--help"], ["--help", "p03-small-writes"],
                                  ["p03-small-writes", "-h"]])
def test_unit_help_shows_default_range_and_meaning(args):
    r = run(args)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith("p03-small-writes: report p03-small-writes")
    req = next(line for line in r.stdout.splitlines() if line.split()[:1] == ["requests"])
    assert re.search(r"default 100 +range 1\.\.2000 +request-reply exchanges", req), req
    assert "TL_P03_REQUESTS" in req
    assert "bulk" in r.stdout


def test_help_alone_is_still_the_usage():
    for args in (["--help"], ["--help", "--quick"]):
        r = run(args)
        assert r.returncode == 0 and r.stdout.startswith("usage: ./run.sh"), r.stdout[:100]
        assert "--set KNOB=VALUE" in r.stdout


def test_a_unit_without_knobs_says_so():
    r = run(["p01-machine", "--help"])
    assert r.returncode == 0 and "no knobs" in r.stdout


def test_every_exercise_knob_is_declared_and_read_by_its_script():
    """The knobs the sheets use are declared, and each unit's collect script reads its
    TL_KNOB_ variable (a knob no script reads would change nothing)."""
    units = {u["unit"]: u for u in tcplab.read_units()}
    with open(os.path.join(TOP, "experiments", "units")) as f:
        table = f.read()
    for unit, name, default in EXERCISE_KNOBS:
        assert re.search(rf"^# knob: {unit}: {name}: {default}: ", table, re.M), (unit, name)
        script = tcplab.collect_script(unit, units[unit]["report"] or "-")
        with open(script) as f:
            text = f.read()
        if unit == "p01-synretry-default":   # it runs p01-synretry.sh
            with open(os.path.join(os.path.dirname(script), "p01-synretry.sh")) as f:
                text = f.read()
        assert f"TL_KNOB_{name.upper()}" in text, (unit, name)


# ---- a unit of a test's own table: the knobs reach the script, and the outputs record them -------

KNOB_SH = """#!/bin/sh
# t-knob: what the knobs it got were, and the machine probe (for the report's kernel)
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
env | grep '^TL_KNOB_' | sort > "$RAW/env.txt"
"""
KNOB_PY = lab_proc.kernel_report("t-knob", "the kernel")
KNOB_LINES = """t-knob               t-knob                 named    run    no           1       30  no       1  yes
# knob: t-knob: count: 3: 1..9: env TL_T_COUNT: how many
# knob: t-knob: mode: b: a|b|c: which way
"""


@pytest.fixture
def knob_exp(tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(os.path.join(TOP, "experiments"), exp,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(exp / "units", "a") as f:
        f.write(KNOB_LINES)
    lab_proc.exp_file(exp, "t-knob", "t-knob.sh").write_text(KNOB_SH)
    lab_proc.exp_file(exp, "t-knob", "t-knob.py").write_text(KNOB_PY)
    return exp


def run_knob(exp, out, *args, env=None):
    r = run(["--out", str(out), "t-knob", *args],
            env=dict(env or {}, TCPLAB_EXPERIMENTS=str(exp)), timeout=60)
    assert r.returncode == 0, r.stderr
    return (json.loads((out / "t-knob.json").read_text()), (out / "t-knob.txt").read_text(),
            (out / "raw" / "t-knob" / "env.txt").read_text().splitlines())


@pytest.mark.netns
def test_no_set_gives_the_defaults_and_records_nothing(knob_exp, tmp_path, bindir):
    j, txt, env = run_knob(knob_exp, tmp_path / "out", env={"TL_KNOB_MODE": "c"})
    # the defaults, and not a TL_KNOB_ variable of the caller's
    assert env == ["TL_KNOB_COUNT=3", "TL_KNOB_MODE=b"]
    assert "knobs" not in j and "knobs" not in txt
    assert not (tmp_path / "out" / "raw" / "t-knob" / "knobs.txt").exists()


@pytest.mark.netns
def test_set_reaches_the_script_and_is_recorded(knob_exp, tmp_path, bindir):
    out = tmp_path / "out"
    j, txt, env = run_knob(knob_exp, out, "--set", "mode=c", "--set", "count=9")
    assert env == ["TL_KNOB_COUNT=9", "TL_KNOB_MODE=c"]
    assert j["knobs"] == {"count": 9, "mode": "c"}       # a number as a number; table order
    assert list(j["knobs"]) == ["count", "mode"]
    assert txt.splitlines()[-1].startswith("knobs: count=9 mode=c ")
    assert (out / "raw" / "t-knob" / "knobs.txt").read_text() == "count=9\nmode=c\n"


@pytest.mark.netns
def test_the_older_variable_sets_its_knob_and_set_wins(knob_exp, tmp_path, bindir):
    j, _, env = run_knob(knob_exp, tmp_path / "a", env={"TL_T_COUNT": "5"})
    assert "TL_KNOB_COUNT=5" in env and j["knobs"] == {"count": 5}
    j, _, env = run_knob(knob_exp, tmp_path / "b", "--set", "count=7", env={"TL_T_COUNT": "5"})
    assert "TL_KNOB_COUNT=7" in env and j["knobs"] == {"count": 7}


@pytest.mark.qemu
def test_two_units_with_a_knob_of_one_name_each_keep_theirs_in_a_guest(knob_exp, tmp_path, bindir):
    """A guest's units share the environment vm.sh forwards: each unit's knobs travel as
    TL_UNIT_KNOBS_<UNIT> and the guest's init gives each unit its own TL_KNOB_*.  run.sh
    refused `--kernel 6.12 --all` while p01-synack-lost and p04-tail-loss both had `drops`."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache and apt-get download")
    with open(knob_exp / "units", "a") as f:
        f.write("t-knob2              t-knob                 named    run    no           1       30"
                "  no       1  yes\n# knob: t-knob2: count: 5: 1..9: how many, its own default\n")
    lab_proc.exp_file(knob_exp, "t-knob", "t-knob2.sh").write_text(
        KNOB_SH.replace("t-knob:", "t-knob2:"))
    out = tmp_path / "out"
    r = run(["--out", str(out), "--kernel", "6.12", "t-knob", "t-knob2", "--set", "mode=c"],
            env={"TCPLAB_EXPERIMENTS": str(knob_exp)}, timeout=600)
    if r.returncode == 4:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    env = {u: (out / "raw" / u / "env.txt").read_text().splitlines() for u in ("t-knob", "t-knob2")}
    assert env == {"t-knob": ["TL_KNOB_COUNT=3", "TL_KNOB_MODE=c"], "t-knob2": ["TL_KNOB_COUNT=5"]}


@pytest.mark.parametrize("line,word", [
    ("# knob: t-knob: extra: 3: 1..x: how many", "range '1..x'"),
    ("# knob: t-knob: extra: 10: 1..9: how many", "default '10' is not in 1..9"),
    ("# knob: t-knob: extra: d: a|b|c: how many", "default 'd'"),
    ("# knob: t-knob: extra: 3: 9..1: how many", "range '9..1'"),
    ("# knob: t-knob: Count: 3: 1..9: how many", "knob: want"),
    ("# knob: t-knob: extra: 3: 1..9:", "knob: want"),
    ("# knob: no-such-unit: count: 3: 1..9: how many", "no-such-unit"),
    ("# knob: t-knob: mode: a: a|b: twice", "declared twice"),
])
def test_a_bad_knob_line_is_one_line_naming_the_table(knob_exp, line, word):
    with open(knob_exp / "units", "a") as f:
        f.write(line + "\n")
    r = run(["--list"], env={"TCPLAB_EXPERIMENTS": str(knob_exp)})
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "units" in r.stderr and word in r.stderr, r.stderr


# ---- the report side, on recorded raw files -------------------------------------------------------

def reference_raw():
    refs = sorted(d for d in os.listdir(os.path.join(TOP, "outputs"))
                  if os.path.isdir(os.path.join(TOP, "outputs", d, "raw", "p03-small-writes")))
    if not refs:
        pytest.skip("no committed reference of p03-small-writes")
    return os.path.join(TOP, "outputs", refs[0], "raw")


def replay(tmp_path, knobs_txt):
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(reference_raw(), "p03-small-writes"), raw / "p03-small-writes")
    if knobs_txt is not None:
        (raw / "p03-small-writes" / "knobs.txt").write_text(knobs_txt)
    out = tmp_path / "out"
    r = subprocess.run(["/usr/bin/python3",
                        os.path.join(TOP, "experiments", "p03-small-writes", "p03-small-writes.py"),
                        str(raw), str(out)], capture_output=True, text=True, timeout=120)
    return r, out


def test_the_report_records_the_knobs_of_knobs_txt(tmp_path):
    r, out = replay(tmp_path, "requests=20\nbulk=300\n")
    assert r.returncode == 0, r.stderr
    j = json.loads((out / "p03-small-writes.json").read_text())
    assert j["knobs"] == {"requests": 20, "bulk": 300}
    last = (out / "p03-small-writes.txt").read_text().splitlines()[-1]
    assert last.startswith("knobs: requests=20 bulk=300 "), last


@pytest.mark.parametrize("bad", ["requests\n", "requests=20\nrequests=21\n", "Requests=1\n",
                                 "", "requests=a b\n"])
def test_the_report_refuses_a_bad_knobs_txt(tmp_path, bad):
    r, out = replay(tmp_path, bad)
    assert r.returncode != 0 and "knobs.txt" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (out / "p03-small-writes.json").exists()


# ---- a live run of p03-small-writes with a knob ---------------------------------------------------

@pytest.mark.netns
def test_p03_with_five_requests(tmp_path, bindir):
    out = tmp_path / "out"
    r = run(["--out", str(out), "p03-small-writes", "--set", "requests=5"], timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    j = json.loads((out / "p03-small-writes.json").read_text())
    assert j["knobs"] == {"requests": 5}
    raw = out / "raw" / "p03-small-writes"
    assert (raw / "knobs.txt").read_text() == "requests=5\n"
    for part in ("baseline", "nodelay", "quickack", "writev", "more", "cork"):
        reqs = [line for line in (raw / f"{part}-requests.txt").read_text().splitlines()
                if line.startswith("req ")]
        assert len(reqs) == 5, (part, len(reqs))
    # bulk kept its default: the knob given is the only one that changed
    assert " messages=2000 " in (raw / "bulk-client.txt").read_text()
    assert (out / "p03-small-writes.txt").read_text().splitlines()[-1].startswith("knobs: requests=5 ")


# ---- the sheets' exercises use knobs that exist -------------------------------------------------

def declared_knobs():
    """experiments/units' "# knob: UNIT: NAME: DEFAULT: LO..HI: meaning" lines → {(unit, name):
    (lo, hi)}."""
    out = {}
    with open(os.path.join(TOP, "experiments", "units")) as f:
        for line in f:
            if line.startswith("# knob: "):
                unit, name, _default, rng = [x.strip() for x in line[8:].split(":")[:4]]
                lo, hi = rng.split("..")
                out[(unit, name)] = (int(lo), int(hi))
    return out


SET_CMD = re.compile(r"\./run\.sh ((?:[a-z0-9-]+ )+)((?:--set [a-z_0-9]+=\S+ ?)+)")


def sheet_sets():
    """Every `./run.sh UNIT... --set NAME=VALUE...` in docs/sheets/ (sheets and keys)."""
    found = []
    for path in sorted(glob.glob(os.path.join(TOP, "docs", "sheets", "**", "*.md"),
                                 recursive=True)):
        with open(path) as f:
            for m in SET_CMD.finditer(f.read()):
                units = m.group(1).split()
                for kv in re.findall(r"--set ([a-z_0-9]+)=(\S+)", m.group(2)):
                    found.append((os.path.relpath(path, TOP), units, *kv))
    return found


def test_every_sheet_exercise_sets_a_declared_knob_in_range():
    knobs, sets = declared_knobs(), sheet_sets()
    assert len({s[0] for s in sets}) >= 10, sets   # the sheets and keys that use knobs
    for path, units, name, value in sets:
        owners = [u for u in units if (u, name) in knobs]
        assert owners, (path, units, name)
        lo, hi = knobs[(owners[0], name)]
        assert value.isdigit() and lo <= int(value) <= hi, (path, units, name, value)


def test_the_sheet_check_can_fail():
    knobs = declared_knobs()
    assert ("p07-dns-dead-first", "timeout") in knobs and knobs[("p09-keepalive", "keepcnt")] == (1, 5)
    m = SET_CMD.search("./run.sh p09-keepalive --set keepcnt=9")
    assert m and m.group(1).split() == ["p09-keepalive"]
    assert ("p09-keepalive", "nosuch") not in knobs
