"""experiments/runner/tcplab_finish.py, the end of a run (docs/maintainers.md, "The runner, step
by step", step 3): what run.sh hands it is taken as bytes, each report runs once, a report that
refuses fails its units, and the KTAP test points and the exit status follow from the state.
No root, no run: the program alone, on a fake experiments directory of the test's own.  The
end-to-end cases (real runs, --ktap, signals) are in test_ktap.py, test_ktap_signal.py and
test_run_failed.py."""
import os
import subprocess

from conftest import TOP

FINISH = os.path.join(TOP, "experiments", "runner", "tcplab_finish.py")


def finish(argv, pass_fds=()):
    return subprocess.run(["/usr/bin/python3", "-S", FINISH, *argv], capture_output=True,
                          timeout=60, pass_fds=pass_fds)


def state(tmp_path, units, plan, extra=()):
    exp = tmp_path / "exp"
    out = tmp_path / "out"
    (out / "raw").mkdir(parents=True, exist_ok=True)
    args = ["--prog", "run.sh", "--top", TOP, "--exp", str(exp), "--out", str(out),
            "--tmp", str(tmp_path / "tmp")]
    for u, (report, limit) in units.items():
        args += ["--unit", u, report, str(limit)]
    for u in plan:
        args += ["--plan", u]
    return args + list(extra)


def test_ktap_skip_prints_a_point_per_planned_unit_from_its_state(tmp_path):
    """Every kind of unit a stopped run can hold, and a WHY with a newline and a byte that is
    not UTF-8, which reaches the KTAP as it was given (the newline made a blank)."""
    units = {"a": ("-", 30), "b": ("-", 2), "c": ("-", 30), "d": ("-", 30), "e": ("-", 30),
             "f": ("r", 30)}
    why_c = b"failed: said\nthis \xff (exit 1 after 0 s)"
    r_fd, w_fd = os.pipe()
    argv = ["ktap-skip", "no guest here"] + state(
        tmp_path, units, "abcdef",
        ["--ktap-fd", str(w_fd), "--done", "a", "--done", "f",
         "--failed", "b", "timed out after 2 s", "--failed", os.fsdecode(b"c"),
         os.fsdecode(why_c), "--skipped", "d", "skipped: no sch_netem",
         "--failed", "report:r", "failed: the report refused the raw data: bad"])
    r = finish(argv, pass_fds=(w_fd,))
    os.close(w_fd)
    with os.fdopen(r_fd, "rb") as f:
        ktap = f.read()
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"", "the points go to --ktap-fd only"
    assert ktap.split(b"\n") == [
        b"ok 1 a",
        b"# b: timed out after 2 s", b"not ok 2 b # TIMEOUT 2 seconds",
        b"# c: failed: said this \xff (exit 1 after 0 s)", b"not ok 3 c",
        b"ok 4 d # SKIP no sch_netem",
        b"ok 5 e # SKIP not run: no guest here",
        b"# f: failed: its report r failed", b"not ok 6 f",
        b"# Totals: pass:1 fail:3 xfail:0 xpass:0 skip:2 error:0", b""]


def fake_reports(tmp_path):
    """Report ok counts its runs in OUT/ok.runs; report bad refuses, its last line the why."""
    exp = tmp_path / "exp"
    for r, body in (("ok", "with open(os.path.join(sys.argv[2], 'ok.runs'), 'a') as f:\n"
                           "    f.write('run\\n')\n"),
                    ("bad", "sys.stderr.write('a first line\\nbad: the raw data has no x\\n')\n"
                            "sys.exit(1)\n")):
        (exp / r).mkdir(parents=True)
        (exp / r / f"{r}.py").write_text("import os, sys\n" + body)


def test_finish_runs_each_report_once_and_fails_the_units_of_one_that_refuses(tmp_path):
    fake_reports(tmp_path)
    units = {"u1": ("ok", 30), "u2": ("ok", 30), "u3": ("bad", 30)}
    for u in units:
        (tmp_path / "out" / "raw" / u).mkdir(parents=True)
    r_fd, w_fd = os.pipe()
    r = finish(["finish", "--t0", "0"] + state(tmp_path, units, ["u1", "u2", "u3"], [
        "--ktap-fd", str(w_fd), "--done", "u1", "--done", "u2", "--done", "u3"]),
        pass_fds=(w_fd,))
    os.close(w_fd)
    with os.fdopen(r_fd, "rb") as f:
        ktap = f.read().decode()
    out = tmp_path / "out"
    assert r.returncode == 1, r.stderr
    assert (out / "ok.runs").read_text() == "run\n"
    assert b"a first line\nbad: the raw data has no x\n" in r.stderr
    assert r.stderr.decode().splitlines()[-1] == (
        "run.sh: 1 unit(s) failed: report:bad (each has its .txt/.json saying "
        "'failed: <reason>', and its partial raw/<unit>/)")
    assert '"status": "failed"' in (out / "bad.json").read_text()
    assert "the report refused the raw data: bad: the raw data has no x" in (out / "bad.txt").read_text()
    lines = ktap.splitlines()
    assert "] report bad FAILED" in ktap
    assert lines[-5:] == ["ok 1 u1", "ok 2 u2", "# u3: failed: its report bad failed",
                          "not ok 3 u3", "# Totals: pass:2 fail:1 xfail:0 xpass:0 skip:0 error:0"]


def test_finish_exits_4_when_every_unit_was_skipped_under_ktap_and_0_without(tmp_path):
    units = {"s": ("-", 30)}
    skipped = ["--skipped", "s", "skipped: needs real root"]
    r_fd, w_fd = os.pipe()
    r = finish(["finish", "--t0", "0", "--ktap-fd", str(w_fd)]
               + state(tmp_path, units, ["s"], skipped), pass_fds=(w_fd,))
    os.close(w_fd)
    os.close(r_fd)
    assert r.returncode == 4, r.stderr
    r = finish(["finish", "--t0", "0"] + state(tmp_path, units, ["s"], skipped))
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().endswith(
        "0 unit(s) ran, 0 failed, 1 skipped (s: needs real root); outputs in "
        f"{tmp_path}/out/\n"), r.stderr


def test_a_bad_call_is_one_line_and_status_2(tmp_path):
    r = finish(["finish", "--unit", "u1"])
    assert r.returncode != 0
    assert r.stderr.decode().splitlines() == [
        "tcplab_finish.py: bad argument '--unit' (run.sh's call is wrong)"]
    assert finish(["nonsense"]).returncode == 2
