"""./run.sh --ktap stopped by a signal: its KTAP ends in "Bail out!" naming the signal, and kcidb
says so in the comment of every test point the run never printed (issue 30, class 10).  Before,
the stream stopped after the "# ... stopping every unit" line, and kcidb called the units
"missing" with no reason ("the KTAP ends before it").

A fake unit table (TCPLAB_EXPERIMENTS): one unit that passes at once, one that says it started
and then waits (sleep 600, its workload); the signal goes to run.sh once the second has
started, which the test polls for (its marker file)."""
import json
import os
import signal
import subprocess
import time

import pytest

import lab_proc
from conftest import TOP

RUN = os.path.join(TOP, "run.sh")
ARGS = ["--origin", "tcplab_test", "--build-id", "tcplab_test:build-1"]
SIGNALS = {signal.SIGTERM: (143, "terminated"), signal.SIGINT: (130, "interrupted"),
           signal.SIGHUP: (129, "hung up")}


def experiments(tmp_path, table, files):
    """lab_proc.experiments, a collect script (.sh) of FILES a body after COLLECT_INIT."""
    return lab_proc.experiments(tmp_path, table, {
        k: lab_proc.COLLECT_INIT + t if k[1].endswith(".sh") else t for k, t in files.items()})


def fake_experiments(tmp_path, marker):
    """t-pass, which passes at once, and t-wait, which says it started and then works for ten
    minutes (sleep 600, its workload)."""
    return experiments(tmp_path, "t-pass - default run no 1 300 no 1 yes\n"
                                 "t-wait - default run no 1 300 no 1 yes\n",
                       {("t-pass", "t-pass.sh"): 'echo ran > "$RAW/ran.txt"\n',
                        ("t-wait", "t-wait.sh"): f'echo started > "{marker}"\nexec sleep 600\n'})


def signal_when(tmp_path, exp, ready, sig):
    """run.sh --ktap on EXP's units, SIG to run.sh alone once ready(ktap text) holds (polled);
    → (its exit status, its KTAP lines).  Fails when it is still running 60 s after SIG."""
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(exp), TCPLAB_STATE=str(tmp_path / "state"))
    ktap, errs = tmp_path / "run.ktap", tmp_path / "run.err"
    with open(ktap, "w") as out, open(errs, "w") as err:
        p = subprocess.Popen([RUN, "--ktap", "--out", str(tmp_path / "out")], stdout=out,
                             stderr=err, env=env)
        try:
            deadline = time.monotonic() + 60
            while not ready(ktap.read_text()) and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)    # polling for a marker, not waiting for an event
            assert ready(ktap.read_text()), "not ready: " + errs.read_text()[-2000:] + ktap.read_text()
            p.send_signal(sig)
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"run.sh still running 60 s after {sig.name}; its stderr: "
                            + errs.read_text()[-3000:])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return rc, ktap.read_text().splitlines()


@pytest.mark.netns
@pytest.mark.parametrize("sig", list(SIGNALS), ids=[s.name for s in SIGNALS])
def test_a_signalled_ktap_run_bails_out_naming_the_signal(tmp_path, bindir, sig):
    # the signal comes while run.sh only waits for t-wait: t-wait started (its marker) and
    # t-pass finished (its "done" line).  bash 5.2 can lose a SIGINT sent to run.sh alone while
    # it waits for a command substitution, as it does while it finishes a unit
    # (docs/reliability.md, "A SIGINT to run.sh alone"); the wait loop has none
    marker = tmp_path / "t-wait.started"
    rc, lines = signal_when(tmp_path, fake_experiments(tmp_path, marker),
                            lambda k: marker.exists() and "] t-pass: done in " in k, sig)
    status, words = SIGNALS[sig]
    assert rc == status, lines
    assert lines[:2] == ["KTAP version 1", "1..2"], lines
    assert lines[-1] == f"Bail out! {words} ({sig.name})", lines
    k = subprocess.run([RUN, "kcidb", *ARGS, str(tmp_path / "run.ktap")], capture_output=True, text=True, timeout=30)
    assert k.returncode == 0, k.stderr
    tests = json.loads(k.stdout)["tests"]
    assert [t["status"] for t in tests] == ["MISS", "MISS"]
    assert all(t["comment"].endswith(f"(Bail out! {words} ({sig.name}))") for t in tests), tests


def report_experiments(tmp_path, marker):
    """One unit, t-rep, whose report says it started (its pid in MARKER) and then works for
    ten minutes (sleep 600, its workload)."""
    return experiments(tmp_path, "t-rep t-rep default run no 1 300 no 1 yes\n", {
        ("t-rep", "t-rep.sh"): 'echo ran > "$RAW/ran.txt"\n',
        ("t-rep", "t-rep.py"):
            "import os, sys, time\n"
            f"with open({str(marker)!r} + '.tmp', 'w') as f:\n    f.write(str(os.getpid()))\n"
            f"os.rename({str(marker)!r} + '.tmp', {str(marker)!r})\n"
            "open(os.path.join(sys.argv[2], '.t-rep.half.tmp-%d' % os.getpid()), 'w').close()\n"
            "time.sleep(600)\n"})


@pytest.mark.netns
@pytest.mark.parametrize("sig", list(SIGNALS), ids=[s.name for s in SIGNALS])
def test_a_signal_during_a_report_ends_the_run_and_the_report(tmp_path, bindir, sig):
    """The reports run in tcplab_finish.py, a job run.sh waits for: a signal to run.sh alone
    while a report works is acted on at once, the report is killed with the run (none outlives
    the run's lock on its --out), and its temporary file is reaped.  When run.sh ran the report
    in the foreground, bash held the trap until the report ended (here, ten minutes)."""
    marker = tmp_path / "report.pid"
    rc, lines = signal_when(tmp_path, report_experiments(tmp_path, marker),
                            lambda _: marker.exists(), sig)
    pid = int(marker.read_text())
    out = tmp_path / "out"
    status, words = SIGNALS[sig]
    assert rc == status, lines
    # after it, only diagnostics: the cleanup says it removed the report's temporary file
    assert [x for x in lines if not x.startswith("# ")][-1] == f"Bail out! {words} ({sig.name})", lines
    assert not os.path.exists(f"/proc/{pid}"), f"the report (pid {pid}) outlived run.sh"
    assert not [n for n in os.listdir(out) if ".tmp" in n], os.listdir(out)


def start_with_a_working_report(tmp_path):
    """run.sh --ktap on report_experiments' t-rep, once its report works: (Popen, the report's
    pid, the pid of the run's end, its parent: the host job)."""
    marker = tmp_path / "report.pid"
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(report_experiments(tmp_path, marker)),
               TCPLAB_STATE=str(tmp_path / "state"))
    p = subprocess.Popen([RUN, "--ktap", "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)    # polling for the report's marker, not waiting for an event
    assert marker.exists(), "the report never started"
    pid = int(marker.read_text())
    with open(f"/proc/{pid}/stat") as f:
        finish = int(f.read().rsplit(")", 1)[1].split()[1])
    return p, pid, finish


def gone_within(pids, seconds):
    """Whether every pid has ended (or is a zombie) within SECONDS (polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except OSError:
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.netns
def test_sigkill_to_run_sh_during_a_report_takes_the_end_of_the_run_with_it(tmp_path, bindir):
    """tcplab_finish.py runs under setpriv --pdeathsig TERM: run.sh SIGKILLed, it stops its
    report and itself, and writes nothing after run.sh (whose locks the kernel frees)."""
    p, report, finish = start_with_a_working_report(tmp_path)
    try:
        os.kill(p.pid, signal.SIGKILL)
        assert gone_within([report, finish], 10), "the report or tcplab_finish.py outlived run.sh"
        out, err = p.communicate(timeout=30)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert b"finished in" not in err and b"Totals" not in out, (out, err)


@pytest.mark.netns
def test_the_end_of_the_run_killed_from_outside_is_said(tmp_path, bindir):
    """The run's end (the host job, tcplab_host.py, whose tcplab_finish Run runs the reports)
    killed by someone else (the OOM killer): run.sh says so in one line and exits 1, its KTAP
    ending in "Bail out!"."""
    p, _, finish = start_with_a_working_report(tmp_path)
    try:
        os.kill(finish, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 1, err
    said = "the run's end (tcplab_host.py) was killed by SIGKILL"
    assert said in err.decode().splitlines()[-1], err
    # after it, only diagnostics: the cleanup says it removed the report's temporary file
    points = [x for x in out.decode().splitlines() if not x.startswith("# ")]
    assert points[-1].startswith("Bail out! " + said), out
