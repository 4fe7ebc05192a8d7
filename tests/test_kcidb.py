"""tcplab kcidb (experiments/tools/tcplab_kcidb.py): a --ktap run's KTAP as a KCIDB submission.

The submission is checked against the rules of KCIDB's own schema, kcidb-io v5.3
(kcidb_io/schema/v05_03.py: the required keys, the id, origin and path patterns, the status
names, log_excerpt's length), restated below; kcidb-io itself is not a Debian package, so it is
not run here (docs/kernel-matrix.md, "KCIDB", says how its validator was run once).  Recorded
KTAP of real runs (tests/data/ktap/) and hand-broken copies test the conversion without root; two
live runs (one that bails out, one real unit) test it on what run.sh prints now."""
import json
import os
import re
import subprocess

import pytest

from conftest import DATA, TOP

RUN = os.path.join(TOP, "run.sh")
KTAP = os.path.join(DATA, "ktap")
ARGS = ["--origin", "tcplab_test", "--build-id", "tcplab_test:build-1"]

# kcidb-io v5.3 (kcidb_io/schema/v05_03.py), the parts a test object of ours uses
ORIGIN = re.compile(r"[a-z0-9_]+")
ID = re.compile(r"[a-z0-9_]+:[^\0]*")
PATH = re.compile(r"([a-zA-Z0-9_-]+(\.[a-zA-Z0-9_-]+)*)?")
STATUSES = {"FAIL", "ERROR", "MISS", "PASS", "DONE", "SKIP"}
TEST_KEYS = {"_timestamp", "build_id", "id", "origin", "environment", "path", "comment",
             "log_url", "log_excerpt", "status", "number", "start_time", "duration",
             "input_files", "output_files", "misc"}


def kcidb_check(obj):
    """Raise AssertionError where obj breaks kcidb-io v5.3's rules for what we write."""
    assert set(obj) <= {"version", "checkouts", "builds", "tests", "issues", "incidents"}, set(obj)
    assert obj["version"] == {"major": 5, "minor": 3}
    ids = set()
    for t in obj["tests"]:
        assert set(t) <= TEST_KEYS, set(t) - TEST_KEYS
        assert {"id", "origin", "build_id"} <= set(t), t
        assert ORIGIN.fullmatch(t["origin"]) and ID.fullmatch(t["id"]) and ID.fullmatch(t["build_id"])
        assert t["id"].startswith(t["origin"] + ":")
        assert PATH.fullmatch(t["path"]) and t["status"] in STATUSES, t
        assert None not in t.values()                       # "no properties can be null"
        assert len(t.get("log_excerpt", "")) <= 16384 and "\0" not in t.get("log_excerpt", "")
        assert isinstance(t.get("misc", {}), dict) and isinstance(t.get("environment", {}), dict)
        assert isinstance(t.get("duration", 0), (int, float)) and not isinstance(t.get("duration"), bool)
        assert t["id"] not in ids, t["id"]
        ids.add(t["id"])


def kcidb(args, stdin=None):
    return subprocess.run([RUN, "kcidb", *args], input=stdin, capture_output=True, text=True,
                          timeout=30)


def convert(path, *extra):
    r = kcidb(ARGS + list(extra) + [path])
    assert r.returncode == 0 and r.stderr == "", r.stderr
    obj = json.loads(r.stdout)
    kcidb_check(obj)
    return obj


def test_a_recorded_run_with_every_kind_of_result():
    """fake-fail.ktap: t-pass ok, t-fail not ok, t-skip SKIP, t-slow TIMEOUT, t-badrep's report
    failed: PASS, FAIL, SKIP, ERROR, FAIL, each with what the KTAP said about it."""
    tests = convert(os.path.join(KTAP, "fake-fail.ktap"))["tests"]
    got = [(t["path"], t["status"]) for t in tests]
    assert got == [("tcplab.t-pass", "PASS"), ("tcplab.t-fail", "FAIL"), ("tcplab.t-skip", "SKIP"),
                   ("tcplab.t-slow", "ERROR"), ("tcplab.t-badrep", "FAIL")]
    by = {t["path"].split(".", 1)[1]: t for t in tests}
    assert by["t-fail"]["log_excerpt"] == \
        "t-fail: failed: made to fail by tests/test_ktap.py (exit 1 after 0 s)"
    assert by["t-slow"]["log_excerpt"] == "t-slow: timed out after 2 s"
    assert by["t-badrep"]["log_excerpt"] == "t-badrep: failed: its report t-badrep failed"
    assert by["t-skip"]["comment"] == "made to skip by tests/test_ktap.py"
    assert "log_excerpt" not in by["t-pass"] and "comment" not in by["t-pass"]
    # run.sh's "done in N s" lines: t-pass 1 s and t-badrep 0 s; the others have none
    assert [t.get("duration") for t in tests] == [1, None, None, None, 0]
    assert [t["misc"]["ktap_test_number"] for t in tests] == [1, 2, 3, 4, 5]
    assert all(t["environment"]["comment"] == "run.sh on x86_64, uname -r 6.18.44-fc-v1045"
               for t in tests)


def test_ids_name_the_run():
    """The same KTAP gives the same ids (KCIDB merges a resubmission); another KTAP, or another
    --run-id, gives others."""
    a = [t["id"] for t in convert(os.path.join(KTAP, "host-p01.ktap"))["tests"]]
    b = [t["id"] for t in convert(os.path.join(KTAP, "host-p01.ktap"))["tests"]]
    c = [t["id"] for t in convert(os.path.join(KTAP, "fake-fail.ktap"))["tests"]]
    d = [t["id"] for t in convert(os.path.join(KTAP, "host-p01.ktap"), "--run-id", "r7")["tests"]]
    assert a == b and not set(a) & set(c) and not set(a) & set(d)
    assert d == ["tcplab_test:tcplab.r7.1", "tcplab_test:tcplab.r7.2"]
    assert re.fullmatch(r"tcplab_test:tcplab\.[0-9a-f]{16}\.1", a[0])


def test_stdin_is_read_when_no_file_is_named():
    with open(os.path.join(KTAP, "host-p01.ktap")) as f:
        text = f.read()
    r = kcidb(ARGS, stdin=text)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == convert(os.path.join(KTAP, "host-p01.ktap"))


def test_a_bail_out_leaves_the_planned_points_missing(tmp_path):
    p = tmp_path / "bail.ktap"
    p.write_text("KTAP version 1\n1..3\n# tcplab: run.sh on x86_64, uname -r 6.1.0\nok 1 p01-machine\n"
                 "Bail out! cannot write to /nowhere\n")
    tests = convert(str(p))["tests"]
    assert [t["status"] for t in tests] == ["PASS", "MISS", "MISS"]
    assert tests[1]["path"] == "tcplab"
    assert tests[1]["comment"] == "planned test point 2: no result (Bail out! cannot write to /nowhere)"
    p.write_text("KTAP version 1\n1..2\nok 1 p01-machine\n")      # a stream cut short
    tests = convert(str(p))["tests"]
    assert [t["status"] for t in tests] == ["PASS", "MISS"]
    assert tests[1]["comment"] == "planned test point 2: no result (the KTAP ends before it)"
    p.write_text("KTAP version 1\n1..0 # SKIP every unit selected needs root\n")
    assert convert(str(p))["tests"] == []


BROKEN = {
    "no version line": "1..1\nok 1 a\n",
    "no plan": "KTAP version 1\nok 1 a\n",
    "numbers skip": "KTAP version 1\n1..2\nok 2 a\n",
    "beyond the plan": "KTAP version 1\n1..1\nok 1 a\nok 2 b\n",
    "a second plan": "KTAP version 1\n1..1\n1..1\nok 1 a\n",
    "totals disagree": "KTAP version 1\n1..1\nnot ok 1 a\n# Totals: pass:1 fail:0 xfail:0 xpass:0 skip:0 error:0\n",
    "a stray line": "KTAP version 1\n1..1\nmake: Nothing to be done\nok 1 a\n",
    "a point after bail out": "KTAP version 1\n1..2\nBail out! x\nok 1 a\n",
    "a name kcidb cannot path": "KTAP version 1\n1..1\nok 1 a.b\n",
    "an unknown directive": "KTAP version 1\n1..1\nok 1 a # XFAIL why\n",
}


@pytest.mark.parametrize("name", BROKEN)
def test_broken_ktap_is_one_line_exit_1_and_nothing_written(tmp_path, name):
    p = tmp_path / "x.ktap"
    p.write_text(BROKEN[name])
    r = kcidb(ARGS + [str(p)])
    assert r.returncode == 1 and r.stdout == "", (name, r.returncode, r.stdout)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"tcplab kcidb: {p}: "), r.stderr


@pytest.mark.parametrize("args,word,code", [
    ([], "--origin and --build-id are needed", 2),
    (["--origin", "Lab", "--build-id", "Lab:1"], "--origin 'Lab'", 2),
    (["--origin", "lab", "--build-id", "other:1"], "with the origin lab", 2),
    (["--origin", "lab", "--build-id", "lab:1", "--run-id", "a b"], "--run-id 'a b'", 2),
    (["--origin", "lab", "--build-id", "lab:1", "a", "b"], "one KTAP at a time", 2),
    (["--origin", "lab", "--origin", "lab"], "--origin given twice", 2),
    (["--origin", "lab", "--build-id", "lab:1", "--nope"], "unknown option '--nope'", 2),
    (["--origin", "lab", "--build-id", "lab:1", "/nonexistent.ktap"], "No such file", 1),
])
def test_bad_usage_is_one_line(args, word, code):
    """Bad usage exits 2, a file that cannot be read 1; either way one line and no JSON."""
    r = kcidb(args, stdin="")
    assert r.returncode == code and r.stdout == "", r
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr


def test_a_live_run_that_bails_out(tmp_path):
    """--out names a file: run.sh bails out after the plan; its one unit is MISS."""
    (tmp_path / "out").write_text("a file, not a directory\n")
    r = subprocess.run([RUN, "--ktap", "--out", str(tmp_path / "out"), "p01-machine"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode == 4:
        pytest.skip(r.stderr.strip())       # not root and no user namespaces: stopped earlier
    assert r.returncode == 1, r.stderr
    k = kcidb(ARGS, stdin=r.stdout)
    assert k.returncode == 0, k.stderr
    tests = json.loads(k.stdout)["tests"]
    kcidb_check(json.loads(k.stdout))
    assert [t["status"] for t in tests] == ["MISS"]
    assert f"Bail out! cannot write to {tmp_path / 'out'}" in tests[0]["comment"]


@pytest.mark.netns
def test_a_live_run(tmp_path, bindir):
    r = subprocess.run([RUN, "--ktap", "--out", str(tmp_path / "out"), "p01-machine"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    k = kcidb(ARGS, stdin=r.stdout)
    assert k.returncode == 0, k.stderr
    obj = json.loads(k.stdout)
    kcidb_check(obj)
    (t,) = obj["tests"]
    assert (t["path"], t["status"]) == ("tcplab.p01-machine", "PASS")
    done = re.search(r"\[run\] p01-machine: done in (\d+) s$", r.stdout, re.M)
    assert done and t["duration"] == int(done.group(1))
    assert t["environment"]["comment"].endswith("uname -r " + os.uname().release)
