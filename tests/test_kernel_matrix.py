"""The kernel matrix end to end: experiments/guest/vm.sh boots Debian's 6.1 cloud kernel under QEMU, runs
p01-synretry (and vm-selftest) inside it, and the report shows 6.1's exponential SYN schedule:
TCP_SYNCNT=2 gives three SYNs, retransmits at about 1 s and 3 s, ETIMEDOUT at about 7 s
(no tcp_syn_linear_timeouts before 6.5).  One boot per session (conftest.guest61; vm-selftest's
own test is tests/test_vm_selftest.py); skips with vm.sh's own reason where qemu,
busybox-static or the kernel package cannot be had."""
import pytest

from guest_boot import UNITS, boot_and_report, kv_file, near  # noqa: F401  (test_kernel_guests_more)

pytestmark = pytest.mark.qemu


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
