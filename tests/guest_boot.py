"""A Debian kernel booted under QEMU by experiments/guest/vm.sh, the units run inside it and
p01-synretry's report made of what came back: what the guest tests share.  The one 6.1 boot of a
session is conftest.guest61 (tests/test_kernel_matrix.py, tests/test_vm_selftest.py)."""
import glob
import json
import os
import shutil
import subprocess

import pytest

from conftest import TOP

VM = os.path.join(TOP, "experiments", "guest", "vm.sh")
UNITS = ("p01-synretry", "vm-selftest")
EXIT_SKIP = 4


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


def boot_guest61(tmp_path_factory):
    """One 6.1 boot: (rawroot, vm.txt as a dict, the report's JSON)."""
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
