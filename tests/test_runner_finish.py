"""experiments/runner/tcplab_finish.py, the end of a run (docs/maintainers.md, "The runner, step
by step", step 3): what run.sh hands it is taken as bytes, each report runs once, a report that
refuses fails its units, and the KTAP test points and the exit status follow from the state.
No root, no run: the program alone, on a fake experiments directory of the test's own.  The
end-to-end cases (real runs, --ktap, signals) are in test_ktap.py, test_ktap_signal.py and
test_run_failed.py."""
import array
import fcntl
import os
import signal
import subprocess
import termios
import time

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
    for argv, said in ((["finish", "--unit", "u1"], "bad argument '--unit'"),
                       (["finish", "--t0", "x"], "--t0 'x': want a whole number"),
                       (["finish", "--prog", "p"], "finish needs --t0"),
                       (["ktap-skip", "why", "--prog", "p"], "ktap-skip needs --ktap-fd")):
        r = finish(argv)
        assert r.returncode == 2, argv
        assert r.stderr.decode().splitlines() == [f"tcplab_finish.py: {said} (run.sh's call is wrong)"]
    assert finish(["nonsense"]).returncode == 2


def test_sigterm_with_no_child_running_ends_it_at_once_with_nothing_more(tmp_path):
    """SIGTERM (run.sh's cleanup) while no report runs: exit 143 at once.  Here it is stuck
    writing test points to a KTAP pipe nobody reads (3,000 units, 120 KB: more than a pipe
    holds)."""
    units = {f"unit-with-a-name-long-enough-{i}": ("-", 30) for i in range(3000)}
    extra = ["--t0", "0"]
    for u in units:
        extra += ["--done", u]
    r_fd, w_fd = os.pipe()
    argv = ["finish"] + state(tmp_path, units, list(units), extra + ["--ktap-fd", str(w_fd)])
    p = subprocess.Popen(["/usr/bin/python3", "-S", FINISH, *argv], pass_fds=(w_fd,),
                         stderr=subprocess.DEVNULL)
    os.close(w_fd)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not pipe_full(r_fd, p.pid):
            time.sleep(0.02)    # polling for the state under test, not waiting for an event
        assert pipe_full(r_fd, p.pid), "tcplab_finish.py never filled the KTAP pipe"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 143
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(r_fd)


def pipe_full(fd, pid):
    """Whether PID waits to write more into the pipe whose read end is FD: the pipe holds
    bytes (the test points are one write of 120 KB: more than a pipe holds, so once any are
    there it cannot have ended) and PID sleeps."""
    held = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, held)
    with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    return held[0] > 0 and state == "S"


def test_a_nul_byte_in_a_reports_words_is_dropped_as_bash_did(tmp_path):
    """bash's $(...) dropped NUL bytes; a NUL passed on in an argument would stop the exec of
    tcplab_failed.py, and with it the end of the run."""
    exp = tmp_path / "exp" / "nul"
    exp.mkdir(parents=True)
    (exp / "nul.py").write_text("import sys\nsys.stderr.write('nul: bad\\x00 data\\n')\nsys.exit(1)\n")
    (tmp_path / "out" / "raw" / "u").mkdir(parents=True)
    r = finish(["finish", "--t0", "0"] + state(tmp_path, {"u": ("nul", 30)}, ["u"], ["--done", "u"]))
    assert r.returncode == 1, r.stderr
    assert b"Traceback" not in r.stderr, r.stderr
    assert "the report refused the raw data: nul: bad data" in (tmp_path / "out" / "nul.txt").read_text()
