"""Two tcplab runs at once, one of them (or both) in a PID namespace of its own
(`unshare -fp --mount-proc`), as in a container: neither may harm the other.  The run in the PID
namespace gets a pid the host does not have, so a reaper that judged liveness by /proc/<pid>
would call it dead.  Both must exit 0 with complete outputs.  docs/reliability.md."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import TOP

pytestmark = pytest.mark.netns
RUN = os.path.join(TOP, "run.sh")
PY = "/usr/bin/python3"

# pid 1 of the new PID namespace: fork until a child gets pid >= TARGET, exec argv there,
# and exit with its status (the kernel then kills whatever else is left in the namespace).
AT_PID = r"""
import os, sys
target = int(sys.argv[1])
while True:
    pid = os.fork()
    if pid == 0:
        if os.getpid() >= target:
            os.execv(sys.argv[2], sys.argv[2:])
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if pid >= target:
        sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def free_pid(start):
    """A pid at or above start that no host process has."""
    have = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    return next(p for p in range(start, 30000) if p not in have and p + 1 not in have)


def in_pidns(pid, argv):
    return ["unshare", "-fp", "--mount-proc", PY, "-c", AT_PID, str(pid)] + argv


def wait_namespace(pid, unit, deadline_s=30.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        if any(l.startswith(f"tcplab-{pid}-") and l.split()[0].endswith(unit)
               for l in out.splitlines()):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("second", ["pidns", "host"])
def test_runs_in_two_pid_namespaces(tmp_path, second):
    if subprocess.run(["unshare", "-fp", "--mount-proc", "true"]).returncode != 0:
        pytest.skip("unshare -fp --mount-proc does not work here")
    env = dict(os.environ, TL_QUICK="1")
    out_a, out_b = str(tmp_path / "a"), str(tmp_path / "b")
    pid_a = free_pid(300)
    a = subprocess.Popen(in_pidns(pid_a, [RUN, "--out", out_a, "p01-synretry"]), env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_namespace(pid_a, "p01-synretry"), "run A never made its namespace"
        argv_b = [RUN, "--out", out_b, "p01-machine", "p01-connect-time"]
        if second == "pidns":
            argv_b = in_pidns(free_pid(pid_a + 50), argv_b)
        b = subprocess.run(argv_b, env=env, capture_output=True, text=True, timeout=120)
        _, err_a = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()
    assert b.returncode == 0, b.stderr[-3000:]
    assert a.returncode == 0, err_a[-3000:]
    assert "left by an interrupted run" not in b.stderr, b.stderr[-3000:]
    with open(os.path.join(out_a, "p01-synretry.json")) as f:
        assert json.load(f)["errno"] == "ETIMEDOUT"
    for name in ("p01-machine.json", "p01-connect-time.json"):
        with open(os.path.join(out_b, name)) as f:
            json.load(f)
