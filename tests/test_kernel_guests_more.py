"""The 5.10 (bullseye, classic package) and 7.2 (sid, split packages) guests end to end:
experiments/guest/vm.sh fetches each through tcplab's own apt configuration, boots it under QEMU
and runs p01-synretry; the retransmissions follow the schedule the guest's own sysctls predict
(tcplab.expected_syn_schedule: 5.10 has no tcp_syn_linear_timeouts, so doubling, 1 s and 3 s,
ETIMEDOUT at 7 s).  vm.txt names the exact packages.  One boot per kernel per session; skips
with vm.sh's own one-line reason where qemu, busybox-static or the package cannot be had, as
tests/test_kernel_matrix.py does for 6.1 (vm.sh downloads the package when it is not cached)."""
import os
import re
import shutil

import pytest

import tcplab
from test_kernel_matrix import boot_and_report, kv_file, near

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# series: (release prefix, the layout its suite ships, vm.txt deb.ROLE keys)
KERNELS = {"5.10": ("5.10.0-", "classic", {"deb.image"}),
           "7.2": ("7.2.", "split", {"deb.image", "deb.binary", "deb.modules", "deb.base"})}

pytestmark = pytest.mark.qemu


@pytest.fixture(scope="session", params=sorted(KERNELS))
def guest(request, bindir, tmp_path_factory):
    """One boot of the series: (series, vm.txt as a dict, the p01-synretry report's JSON)."""
    series = request.param
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache and apt-get download")
    tag = "vm" + series.replace(".", "")
    raw = tmp_path_factory.mktemp(tag)
    report = boot_and_report(series, ["p01-synretry"], raw, tmp_path_factory.mktemp(tag + "-out"), 200)
    return series, kv_file(raw / "vm.txt"), report


def test_vm_txt_names_the_packages(guest):
    series, vm, _ = guest
    prefix, layout, roles = KERNELS[series]
    assert vm["status"] == "ok" and vm["unit.p01-synretry"] == "0"
    assert vm["kernel"].startswith(prefix) and vm["kernel"].endswith("-cloud-amd64")
    assert vm["layout"] == layout
    assert {k for k in vm if k.startswith("deb.")} == roles
    release = vm["kernel"]
    for role in roles:
        name, version = vm[role].split("=", 1)
        assert name.startswith(f"linux-{role[len('deb.'):]}-{release}"), (role, name)
        assert re.fullmatch(r"[0-9][A-Za-z0-9.+~-]*", version), version
    assert vm["suite"] in ({"bullseye", "bullseye-updates", "bullseye-security"}
                           if series == "5.10" else {"sid"})
    assert vm["modules"] == "inet_diag tcp_diag"
    assert vm["modules_builtin"] == "af_packet"


def test_syn_schedule_is_what_the_sysctls_predict(guest):
    series, _, rep = guest
    linear = rep["sysctls"]["net.ipv4.tcp_syn_linear_timeouts"]
    if series == "5.10":
        assert linear is None   # added in 6.5 (ip-sysctl.rst)
    else:
        assert isinstance(linear, int)
    want, want_end = tcplab.expected_syn_schedule(rep["syncnt"], linear)
    if linear is None:
        assert (want, want_end) == ([1.0, 3.0], 7.0)
    times = [r["t_s"] for r in rep["retransmits"]]
    assert len(times) == len(want), f"want retransmissions at {want}, got {times}"
    for got, w in zip(times, want):
        assert near(got, w, 0.3), (times, want)
    assert rep["errno"] == "ETIMEDOUT"
    assert near(rep["elapsed_s"], want_end, 0.5), (rep["elapsed_s"], want_end)
    assert rep["counters"]["TcpExtTCPSynRetrans"] == len(want)


def test_vm_txt_counts_what_the_unit_cost_the_host(guest):
    """cpu_s.UNIT is QEMU's CPU time from the unit's start line to its done line, qemu_cpu_s
    QEMU's total to its exit: both there, the unit's within the total, and neither
    more than QEMU's threads could use on this machine's CPUs in the time they cover."""
    _, vm, _ = guest
    unit, total, wall = (float(vm[k]) for k in ("cpu_s.p01-synretry", "qemu_cpu_s", "wall_s"))
    assert 0 < unit <= total, vm
    assert total <= wall * os.cpu_count(), vm
