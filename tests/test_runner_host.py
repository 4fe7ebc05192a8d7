"""experiments/runner/tcplab_host.py, a host run's job (docs/maintainers.md, "The runner, step by
step", step 2): the moments between its forks, which no live run can hit on purpose.  The job
runs here in a tree of the test's own (a netns.sh that makes nothing, subprocess.Popen wrapped so
that `ip netns exec NS` is left out), and the signal is sent from inside the wrapper, at the
exact point.  Live runs of the job are every test of run.sh on the host (test_run_units.py,
test_reliability_*.py and each experiment's)."""
import os
import signal
import subprocess
import time

from conftest import TOP

# The job, with Popen wrapped: the Popen of PROG (tee, or the unit's env) runs HOOK as it returns.
SCRIPT = """
import os, signal, subprocess, sys, time
sys.path.insert(0, {runner!r})
import tcplab_host as th
import tcplab_job as tj
real = subprocess.Popen

def popen(argv, *a, **kw):
    if argv[0] == b"ip":                    # ip netns exec NS: no namespace here
        argv = argv[4:]
    p = real(argv, *a, **kw)
    if os.fsencode(argv[0]) == {prog!r}:
        {hook}
    return p

subprocess.Popen = popen
sys.exit(tj.main(["tcplab_host.py"] + sys.argv[1:], th.HostRun, th.HostChild))
"""


def job(tmp_path, prog, hook, unit_body, pre=()):
    """The job on one unit, t-a, whose collect script is UNIT_BODY, its command line after PRE
    (env ...); → the Popen."""
    top = tmp_path / "top"
    (top / "experiments" / "lib").mkdir(parents=True)
    os.symlink(os.path.join(TOP, "experiments", "runner"), top / "experiments" / "runner")
    (top / "experiments" / "lib" / "netns.sh").write_text("exit 0\n")
    (tmp_path / "exp" / "t-a").mkdir(parents=True)
    (tmp_path / "exp" / "t-a" / "t-a.sh").write_text(unit_body)
    for d in ("out", "tmp", "state"):
        (tmp_path / d).mkdir()
    (tmp_path / "state" / "run.x").write_text("id=x\n")
    argv = ["--t0", "0", "--prog", "run.sh", "--top", str(top), "--exp", str(tmp_path / "exp"),
            "--out", str(tmp_path / "out"), "--tmp", str(tmp_path / "tmp"),
            "--record", str(tmp_path / "state" / "run.x"), "--unit", "t-a", "-", "30",
            "--plan", "t-a", "--ns-name", "tcplab-test", "--", "t-a"]
    script = SCRIPT.format(runner=os.path.join(TOP, "experiments", "runner"), prog=prog, hook=hook)
    return subprocess.Popen([*pre, "/usr/bin/python3", "-S", "-c", script] + argv,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_between_the_logs_two_forks_leaves_no_stderr_open(tmp_path):
    """The job SIGKILLed after it started a unit's tee and before it started the unit: tee must
    see its end of file at once (the pipe's write end died with the job), not hold run.sh's
    stderr for ever.  run.sh's bash once did hold it: its tee waited in open() on a fifo nobody
    would open (CI's interrupt storm); the live test of that window is now this one."""
    p = job(tmp_path, b"tee", "os.kill(os.getpid(), signal.SIGKILL)", "echo never > \"$1.ran\"\n")
    _, err = p.communicate(timeout=30)      # tee holding stderr: TimeoutExpired
    assert p.returncode == -signal.SIGKILL, err
    assert not (tmp_path / "tmp" / "raw" / "t-a.ran").exists()


def test_sigterm_as_a_unit_starts_kills_its_whole_group(tmp_path):
    """SIGTERM (run.sh's cleanup) that comes while the unit is being started, before the job
    knows its pid: the job still kills the unit's process group (the unit and the child it
    started), and ends with 143 and nothing said."""
    body = "sleep 300 & echo $! > \"$1.child\"\necho $$ > \"$1.pid\"\nwait\n"
    hook = ("pid = os.path.join(sys.argv[sys.argv.index('--tmp') + 1], 'raw', 't-a.child')\n"
            "        while not os.path.exists(pid) or not open(pid).read().endswith('\\n'):\n"
            "            time.sleep(0.01)\n"
            "        os.kill(os.getpid(), signal.SIGTERM)")
    p = job(tmp_path, b"env", hook, body)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 143 and err == "", err
    for name in ("t-a.pid", "t-a.child"):
        pid = int((tmp_path / "tmp" / "raw" / name).read_text())
        for _ in range(200):                # SIGKILL is sent; its delivery is the kernel's
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except FileNotFoundError:
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"{name} {pid} still runs after the job's SIGTERM")


def sig_ignored(status_text, sig):
    mask = int(next(line.split()[1] for line in status_text.splitlines()
                    if line.startswith("SigIgn:")), 16)
    return bool(mask & (1 << (sig - 1)))


def test_a_hangup_under_nohup_does_not_stop_the_units(tmp_path):
    """Started with SIGHUP ignored (nohup, then the ssh session drops): a SIGHUP to the job does
    not stop it, and the unit inherits SIGHUP ignored, as run.sh's bash units did (bash cannot
    trap a signal ignored at entry).  The job had killed its units and exited 129."""
    body = ("cat /proc/$$/status > \"$1.status\"; echo up > \"$1.up\"\n"
            "while [ ! -e \"$1.go\" ]; do sleep 0.05; done\nmkdir -p \"$1\"\n")
    p = job(tmp_path, b"no-hook", "pass", body, pre=["env", "--ignore-signal=HUP"])
    raw = tmp_path / "tmp" / "raw"
    deadline = time.monotonic() + 30
    while not (raw / "t-a.up").exists():
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.02)
    p.send_signal(signal.SIGHUP)
    (raw / "t-a.go").write_text("")
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "t-a: done in " in err and "1 unit(s) ran, 0 failed" in err, err
    assert sig_ignored((raw / "t-a.status").read_text(), signal.SIGHUP)
