"""The kernel matrix end to end: experiments/guest/vm.sh boots Debian's 6.1 cloud kernel under QEMU, runs
p01-synretry (and vm-selftest) inside it, and the report shows 6.1's exponential SYN schedule:
TCP_SYNCNT=2 gives three SYNs, retransmits at about 1 s and 3 s, ETIMEDOUT at about 7 s
(no tcp_syn_linear_timeouts before 6.5).  One boot per session; skips with vm.sh's own reason
where qemu, busybox-static or the kernel package cannot be had."""
import json
import glob
import os
import shutil
import subprocess

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VM = os.path.join(TOP, "experiments", "guest", "vm.sh")
UNITS = ("p01-synretry", "vm-selftest")
EXIT_SKIP = 4

pytestmark = pytest.mark.qemu


def kv_file(path):
    out = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                out[k] = v
    return out


def near(x, want, tol):
    return abs(x - want) <= tol


def boot_and_report(series, units, raw, out, timeout):
    """vm.sh boots series with units into raw (skips with vm.sh's own reason on exit 4), then
    p01-synretry's report is made into out; returns its JSON."""
    r = subprocess.run([VM, "--timeout", str(timeout), series, str(raw), *units],
                       capture_output=True, text=True, timeout=2 * timeout)
    if r.returncode == EXIT_SKIP:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, f"vm.sh exited {r.returncode}:\n{r.stderr}"
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "p01-synretry", "p01-synretry.py"),
                          str(raw), str(out)], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    with open(out / "p01-synretry.json") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def guest61(bindir, tmp_path_factory):
    """One 6.1 boot for the whole session: (rawroot, vm.txt as a dict, the report's JSON)."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache and apt-get download")
    missing = [u for u in UNITS if not glob.glob(os.path.join(TOP, "experiments", "*", u + ".sh"))]
    if missing:
        pytest.skip("experiments not written yet: " + " ".join(missing))
    raw = tmp_path_factory.mktemp("vm61")
    report = boot_and_report("6.1", UNITS, raw, tmp_path_factory.mktemp("vm61-out"), 150)
    return raw, kv_file(raw / "vm.txt"), report


def test_vm_txt_says_what_ran(guest61):
    _, vm, _ = guest61
    assert vm["status"] == "ok"
    assert vm["kernel"].startswith("6.1.0-") and vm["kernel"].endswith("-cloud-amd64")
    assert vm["accel"] == "tcg"
    assert float(vm["boot_s"]) > 0 and float(vm["wall_s"]) >= float(vm["boot_s"])
    assert vm["modules"] == "inet_diag tcp_diag"
    assert all(vm[f"unit.{u}"] == "0" for u in UNITS)


def test_raw_directories_come_back_as_on_the_host(guest61):
    raw, _, _ = guest61
    client = kv_file(raw / "p01-synretry" / "client.txt")
    assert client["syncnt"] == "2"
    assert "start_ns" in client
    with open(raw / "p01-synretry" / "sockwatch.txt") as f:
        assert any(line.startswith("t_s=") and "state=SYN-SENT" in line for line in f)


def test_dynamic_programs_run_in_the_guest(guest61):
    raw, _, _ = guest61
    st = kv_file(raw / "vm-selftest" / "selftest.txt")
    assert st["uname_r"].startswith("6.1.0-")
    assert st["tcp_syn_linear_timeouts"] == "absent"
    assert st["strace"] == "not available"
    with open(raw / "vm-selftest" / "selftest.txt") as f:
        progs = [line for line in f if line.startswith("program=")]
    assert progs and all("status=runs" in p for p in progs), progs


def test_6_1_has_the_exponential_syn_schedule(guest61):
    _, _, rep = guest61
    assert rep["syncnt"] == 2
    assert rep["sysctls"]["net.ipv4.tcp_syn_linear_timeouts"] is None
    times = [r["t_s"] for r in rep["retransmits"]]
    assert len(times) == 2, f"want 2 SYN retransmissions (3 SYNs), got {times}"
    assert near(times[0], 1.0, 0.25) and near(times[1], 3.0, 0.3), times
    assert rep["errno"] == "ETIMEDOUT"
    assert near(rep["elapsed_s"], 7.0, 0.5), rep["elapsed_s"]
    assert rep["counters"]["TcpExtTCPSynRetrans"] == 2
