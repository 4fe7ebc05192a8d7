"""A unit that fails is never dropped (issue 12): its partial raw/<unit>/ stays, with status.txt
saying why, and <unit>.txt/.json say "failed: <reason>" and hold what was collected (the raw
files and their sizes, the last lines of the collect script's stderr, the exit status or signal,
when and how long it ran); run.sh exits 1 and its last line names the unit.

The writer (experiments/report/tcplab_failed.py) is tested on hand-made raw directories without root;
run.sh on the host with a copy of experiments/ holding units made to fail (TCPLAB_EXPERIMENTS,
as tests/test_run_units.py does), and in a 6.1 guest (marked qemu, skipped with vm.sh's reason
where QEMU or the kernel cannot be had)."""
import json
import os
import shutil
import stat
import subprocess

import pytest

import lab_proc
from conftest import TOP
from test_run_units import Run, copy_experiments, set_column, tagged

WRITER = os.path.join(TOP, "experiments", "report", "tcplab_failed.py")
PY = "/usr/bin/python3"

FAIL_SH = """#!/bin/sh
# fail-lab: collects a little, then fails as a collect script does (tl_die).
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
printf 'cut mid-li' > "$RAW/partial.txt"
echo "fixture: no such thing" > "$RAW/fixture.txt.err"
tl_log "step 1 done"
tl_die "made to fail at step 2"
"""
SLOW_SH = """#!/bin/sh
# slow-lab: collects a little, then outlives its limit_s.
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
echo before > "$RAW/before.txt"
tl_log "sleeping past the limit"
tl_bg "$RAW/sleep.txt" sleep 600
tl_wait_exit "$TL_LAST" 700
"""
OK_SH = """#!/bin/sh
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
echo "value=oops" > "$RAW/data.txt"
"""
REFUSE_PY = '''"""refuse-lab report: refuses what its unit wrote, as a report does (RawError)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t


def build(rawroot, outdir):
    d = t.unit_dir(rawroot, "refuse-lab")
    t.read_kv(os.path.join(d, "data.txt")).int("value")


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
'''


def strict_json(path):
    """The file as strict JSON (RFC 8259: no NaN or Infinity)."""
    def bad(name):
        raise AssertionError(f"{path}: {name} is not strict JSON")
    with open(path) as f:
        return json.load(f, parse_constant=bad)


def writer(*args, check=True):
    r = subprocess.run([PY, WRITER, *map(str, args)], capture_output=True, text=True, timeout=30)
    if check:
        assert r.returncode == 0, r.stderr
    return r


# ---- the writer, on hand-made raw directories (no root) -----------------------------------------

@pytest.fixture
def partial(tmp_path):
    """A raw directory as a stopped unit leaves it: a file cut mid-line, a FIFO, an .err file."""
    raw = tmp_path / "out" / "raw" / "x-lab"
    raw.mkdir(parents=True)
    (raw / "collected-at.txt").write_text("2026-12-01T21:00:00Z\n")
    (raw / "client.txt").write_bytes(b"start_ns=1\nhalf a li")     # no newline: cut off
    (raw / "server.txt.err").write_text("warming up\nserver: bind: Address in use\n")
    (raw / "sub").mkdir()
    (raw / "sub" / "deep.txt").write_text("12345\n")
    os.mkfifo(raw / "pipe")                                       # must not block the listing
    (raw / "status.txt").write_text("failed: server exited with status 1 (exit 1 after 3 s)\n")
    log = tmp_path / "log.txt"
    log.write_text("".join(f"[x-lab] line {i}\n" for i in range(1, 31)))
    return tmp_path / "out", raw, log


def test_writer_says_failed_and_lists_what_was_collected(partial):
    out, raw, log = partial
    writer(out, "x-lab", raw, "--why", (raw / "status.txt").read_text().strip(), "--exit", "1",
           "--started", "2026-12-01T21:00:00Z", "--ran-s", "3", "--log", log, "--kernel", "6.1.0-x")
    j = strict_json(out / "x-lab.json")
    assert j["status"] == "failed" and j["result"] is None
    assert j["reason"] == "server exited with status 1 (exit 1 after 3 s)"
    assert (j["experiment"], j["unit"], j["stage"], j["kernel"]) == ("x-lab", "x-lab", "collect", "6.1.0-x")
    assert (j["exit"], j["signal"], j["ran_s"], j["started_at"]) == (1, None, 3.0, "2026-12-01T21:00:00Z")
    assert j["collected_at"] == "2026-12-01T21:00:00Z" and j["raw_kept"] is True
    files = {f["name"]: f for f in j["raw_files"]}
    for name in ("client.txt", "server.txt.err", "sub/deep.txt", "status.txt", "collect-stderr.txt"):
        assert files[name]["bytes"] == os.path.getsize(raw / name), name
    assert files["pipe"] == {"name": "pipe", "bytes": None, "kind": "a FIFO"}
    assert j["raw_bytes"] == sum(f["bytes"] or 0 for f in j["raw_files"])
    assert j["program_errors"] == [{"file": "server.txt.err", "last": "server: bind: Address in use"}]
    # the whole log is kept in raw/, its last 20 lines in the outputs
    assert (raw / "collect-stderr.txt").read_text() == log.read_text()
    assert j["log"]["tail"] == [f"[x-lab] line {i}" for i in range(11, 31)]
    assert (j["log"]["file"], j["log"]["lines"]) == ("raw/x-lab/collect-stderr.txt", 30)
    txt = (out / "x-lab.txt").read_text().splitlines()
    assert txt[0] == "x-lab: failed: server exited with status 1 (exit 1 after 3 s)"
    assert "exit 1, started 2026-12-01T21:00:00Z, ran 3 s" in txt[2]
    assert any(line.split() == ["client.txt", str(os.path.getsize(raw / "client.txt"))] for line in txt)
    assert txt[-1] == "  [x-lab] line 30"


def test_writer_names_the_signal_and_a_raw_directory_that_never_came(tmp_path):
    out = tmp_path / "out"
    writer(out, "y-lab", out / "raw" / "y-lab", "--why", "timed out after 60 s", "--exit", "137")
    j = strict_json(out / "y-lab.json")
    assert (j["reason"], j["exit"], j["signal"]) == ("timed out after 60 s", 137, "SIGKILL")
    assert j["raw_kept"] is False and j["raw_files"] == [] and j["log"] is None
    assert "raw/y-lab/: none" in (out / "y-lab.txt").read_text()


CONSOLE = """\
tcplab: init: kernel 6.1.0-57-cloud-amd64 up after 8.20 s\r
tcplab: a-lab: start (at most 30 s)\r
[a-lab] not this one\r
tcplab: a-lab: done rc=0 (8.50 .. 9.00 s)\r
tcplab: z-lab: start (at most 300 s)\r
[z-lab] step 1\r
[   42.123456] Out of memory: Killed process 321 (echo_load)\r
[z-lab] error: echo_load exited with status 137\r
tcplab: z-lab: done rc=1 (9.25 .. 51.75 s)\r
tcplab: init: all units done, powering off\r
"""


def test_writer_takes_a_guest_unit_s_lines_from_the_console(tmp_path):
    out, raw = tmp_path / "out", tmp_path / "out" / "raw" / "z-lab"
    raw.mkdir(parents=True)
    (tmp_path / "vm-console.log").write_text(CONSOLE)
    writer(out, "z-lab", raw, "--why", "failed: echo_load exited with status 137 (exit 1 in the guest)",
           "--exit", "1", "--console", tmp_path / "vm-console.log")
    j = strict_json(out / "z-lab.json")
    assert j["ran_s"] == 42.5                   # init's own times: 9.25 .. 51.75 s
    assert j["log"]["source"] == "the guest's console"
    assert j["log"]["tail"][0] == "tcplab: z-lab: start (at most 300 s)"
    assert "[   42.123456] Out of memory: Killed process 321 (echo_load)" in j["log"]["tail"]
    assert not any("a-lab" in line for line in j["log"]["tail"])
    assert (raw / "console.txt").read_text().count("\n") == 5


DATA = os.path.join(TOP, "tests", "data", "failed-unit")


def test_writer_replays_the_committed_guest_example(tmp_path):
    """tests/data/failed-unit: what run.sh left for fail-lab in a 6.1 guest.  Written again from
    its kept raw directory (console.txt read back), the .txt and .json come out byte for byte."""
    shutil.copytree(os.path.join(DATA, "raw"), tmp_path / "raw")
    raw = tmp_path / "raw" / "fail-lab"
    vm = dict(line.split("=", 1) for line in (raw / "vm.txt").read_text().splitlines())
    writer(tmp_path, "fail-lab", raw, "--why", (raw / "status.txt").read_text().strip(),
           "--exit", "1", "--kernel", vm["kernel"])
    for name in ("fail-lab.txt", "fail-lab.json"):
        with open(os.path.join(DATA, name)) as f:
            assert (tmp_path / name).read_text() == f.read(), name


def test_writer_says_when_it_replaces_a_result(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "r-lab.json").write_text('{"experiment": "r-lab", "result": "ok"}\n')
    r = writer(out, "r-lab", out / "raw" / "r-lab", "--why", "failed: x")
    assert r.stdout.strip() in ("a result", "a committed reference")
    assert "WARNING: r-lab.txt/.json held a result" in r.stderr
    r = writer(out, "r-lab", out / "raw" / "r-lab", "--why", "failed: again")
    assert r.stdout == "" and r.stderr == ""    # a failed one replaced: nothing lost


@pytest.mark.parametrize("args,want", [
    (["OUT", "../x", "RAW", "--why", "w"], "name '../x'"),
    (["OUT", "x", "RAW"], "--why"),
    (["OUT", "x", "RAW", "--why", "w", "--ran-s", "nan"], "--ran-s"),
    (["OUT", "x", "RAW", "--why", "w", "--stage", "later"], "--stage"),
])
def test_writer_bad_usage_is_one_line(tmp_path, args, want):
    args = [str(tmp_path / a) if a in ("OUT", "RAW") else a for a in args]
    r = writer(*args, check=False)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and want in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "OUT")


def test_writer_cannot_write_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    r = writer(tmp_path / "file", "x", tmp_path / "raw", "--why", "w", check=False)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


# ---- run.sh on the host -------------------------------------------------------------------------

def lab(tmp_path, unit, script, report="-", limit=30, qemu="yes", report_py=None):
    exp = copy_experiments(tmp_path)
    with open(exp / "units", "a") as f:
        f.write(f"{unit} {report} named run no 1 {limit} no 1 {qemu}\n")
    lab_proc.exp_file(exp, unit if report == "-" else report, f"{unit}.sh").write_text(script)
    if report_py:
        lab_proc.exp_file(exp, report, f"{report}.py").write_text(report_py)
    return exp


def namespaces_of(pid):
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if line.startswith(f"tcplab-{pid}-")]


def last_line(err):
    return err.strip().splitlines()[-1]


def run_lab(exp, out, unit, *extra, timeout=90):
    run = Run(["--out", str(out), *extra, unit], env={"TCPLAB_EXPERIMENTS": str(exp)}, timeout=timeout)
    rc, err = run.finish()
    assert tagged(run.tag) == [], "processes of the run are left"
    assert namespaces_of(run.p.pid) == [], "namespaces of the run are left"
    return rc, err


@pytest.mark.netns
def test_a_failed_unit_keeps_its_raw_and_says_failed(tmp_path, bindir):
    exp, out = lab(tmp_path, "fail-lab", FAIL_SH), tmp_path / "out"
    rc, err = run_lab(exp, out, "fail-lab")
    assert rc == 1, err
    assert last_line(err).startswith("run.sh: 1 unit(s) failed: fail-lab ("), err
    raw = out / "raw" / "fail-lab"
    assert (raw / "status.txt").read_text().startswith("failed: made to fail at step 2 (exit 1 after ")
    assert (raw / "partial.txt").read_bytes() == b"cut mid-li" and (raw / "machine.txt").is_file()
    j = strict_json(out / "fail-lab.json")
    assert j["status"] == "failed" and j["reason"].startswith("made to fail at step 2")
    assert (j["exit"], j["signal"], j["stage"], j["kernel"]) == (1, None, "collect", os.uname().release)
    assert j["started_at"] and j["ran_s"] is not None
    assert {f["name"]: f["bytes"] for f in j["raw_files"]}["partial.txt"] == 10
    assert j["program_errors"] == [{"file": "fixture.txt.err", "last": "fixture: no such thing"}]
    assert j["log"]["tail"][-2:] == ["[fail-lab] step 1 done", "[fail-lab] error: made to fail at step 2"]
    assert (raw / "collect-stderr.txt").read_text().endswith("[fail-lab] error: made to fail at step 2\n")
    assert (out / "fail-lab.txt").read_text().startswith("fail-lab: failed: made to fail at step 2")


@pytest.mark.netns
def test_a_timed_out_unit_says_so_and_keeps_what_it_wrote(tmp_path, bindir):
    # the limit leaves room for tl_init's namespaces on a loaded host: at 3 s, a CI run timed
    # out before the script had written before.txt
    exp, out = lab(tmp_path, "slow-lab", SLOW_SH, limit=10), tmp_path / "out"
    rc, err = run_lab(exp, out, "slow-lab")
    assert rc == 1, err
    assert "slow-lab" in last_line(err)
    j = strict_json(out / "slow-lab.json")
    assert j["status"] == "failed" and j["reason"] == "timed out after 10 s"
    assert j["exit"] == 143 and j["signal"] == "SIGTERM"    # collect.sh's TERM trap: exit 143
    assert (out / "raw" / "slow-lab" / "before.txt").read_text() == "before\n"
    assert "[slow-lab] sleeping past the limit" in j["log"]["tail"]


LIVE_SH = """#!/bin/sh
# live-lab: a progress line, then a wait for the test's answer to it (polled, with a bound)
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
tl_log "waiting for $TL_TEST_GO"
n=0
while [ ! -e "$TL_TEST_GO" ]; do
	n=$((n + 1))
	[ "$n" -lt 400 ] || tl_die "no answer to the progress line in 20 s"
	sleep 0.05
done
tl_log "answered"
"""


@pytest.mark.netns
def test_a_progress_line_reaches_the_person_while_the_unit_runs(tmp_path, bindir):
    """run.sh passes a unit's line on when it is written, not when the unit ends: the unit
    waits for an answer that the test gives only on seeing its line.  (run.sh's copy was a
    mawk, which reads a pipe in blocks: the line came at the unit's end, after tl_die.)"""
    exp, out, go = lab(tmp_path, "live-lab", LIVE_SH), tmp_path / "out", tmp_path / "go"
    p = subprocess.Popen([os.path.join(TOP, "run.sh"), "--out", str(out), "live-lab"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp), TL_TEST_GO=str(go)))
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "[live-lab] waiting for" in line:
            go.touch()
            break
    rest = p.communicate(timeout=60)[1]
    assert go.exists(), "".join(seen)
    assert p.returncode == 0, "".join(seen) + rest
    assert "[live-lab] answered" in rest and "no answer" not in rest, rest


@pytest.mark.netns
def test_a_report_that_refuses_is_a_failed_unit(tmp_path, bindir):
    exp = lab(tmp_path, "refuse-lab", OK_SH, report="refuse-lab", report_py=REFUSE_PY)
    out = tmp_path / "out"
    rc, err = run_lab(exp, out, "refuse-lab")
    assert rc == 1, err
    assert "report:refuse-lab" in last_line(err)
    j = strict_json(out / "refuse-lab.json")
    assert j["status"] == "failed" and j["stage"] == "report" and j["report"] == "refuse-lab"
    assert "refused the raw data" in j["reason"] and "value" in j["reason"]
    raw = out / "raw" / "refuse-lab"
    assert (raw / "data.txt").is_file() and not (raw / "status.txt").exists()   # complete raw


@pytest.mark.netns
def test_a_failed_unit_says_loudly_that_it_replaced_a_result(tmp_path, bindir):
    exp, out = lab(tmp_path, "fail-lab", FAIL_SH), tmp_path / "out"
    out.mkdir()
    (out / "fail-lab.json").write_text('{"experiment": "fail-lab", "result": "ok"}\n')
    rc, err = run_lab(exp, out, "fail-lab")
    assert rc == 1
    assert "THESE REPLACED GOOD OUTPUTS: fail-lab.txt/.json (a result)" in last_line(err), err
    assert strict_json(out / "fail-lab.json")["status"] == "failed"


# ---- run.sh with a unit made to fail in a 6.1 guest ---------------------------------------------

@pytest.mark.qemu
@pytest.mark.deep
def test_a_unit_failed_in_a_guest_leaves_a_marked_partial_output(tmp_path, bindir):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache and apt-get download")
    exp, out = lab(tmp_path, "fail-lab", FAIL_SH), tmp_path / "out"
    rc, err = run_lab(exp, out, "fail-lab", "--kernel", "6.1", timeout=600)
    if rc == 4:
        pytest.skip(last_line(err))
    assert rc == 1, err[-3000:]
    assert last_line(err).startswith("run.sh: 1 unit(s) failed: fail-lab ("), err
    raw = out / "raw" / "fail-lab"
    assert (raw / "status.txt").read_text() == \
        "failed: made to fail at step 2 (exit 1 in the guest)\n"
    assert (raw / "partial.txt").read_bytes() == b"cut mid-li" and (raw / "vm.txt").is_file()
    j = strict_json(out / "fail-lab.json")
    assert j["status"] == "failed" and j["reason"] == "made to fail at step 2 (exit 1 in the guest)"
    assert j["kernel"].startswith("6.1.") and j["exit"] == 1 and j["ran_s"] is not None
    assert j["log"]["source"] == "the guest's console"
    assert "[fail-lab] error: made to fail at step 2" in j["log"]["tail"]
    assert (raw / "console.txt").is_file()
    assert "partial.txt" in {f["name"] for f in j["raw_files"]}
    left = subprocess.run(["pgrep", "-f", f"qemu-system-x86_64 .*{tmp_path}"], capture_output=True)
    assert left.returncode == 1, "a qemu of this run is left"
