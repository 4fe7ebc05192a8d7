"""vm.sh and a guest kernel that panics while booting, before tcplab's init ran (seen once in
CI: 6.12 under TCG, "Fatal exception in interrupt" at 0.95 s, a boot that worked the next time).
A stand-in qemu-system-x86_64 first on PATH writes that panic to the console and exits, as QEMU
does with panic=-1 and -no-reboot: vm.sh says so, keeps the console, boots once more and only
once, and vm.txt records it.  No real guest boots; the kernel package must be in the cache (or
downloadable), as for every guest test."""
import os
import shutil
import subprocess

import pytest

from guest_boot import VM, EXIT_SKIP, kv_file

FAKE_QEMU = r"""#!/bin/sh
# a stand-in for qemu-system-x86_64: --version, or one "boot" that panics (the first PANICS
# boots) or whose init starts and then ends with no done line
if [ "$1" = --version ]; then echo "QEMU emulator version 7.2.0 (a test's stand-in)"; exit 0; fi
n=$(($(cat "$FAKE_COUNT" 2>/dev/null || echo 0) + 1))
echo "$n" > "$FAKE_COUNT"
console=
while [ $# -gt 0 ]; do
	case $1 in
	-serial) [ -n "$console" ] || console=${2#file:}; shift 2 ;;
	-pidfile) echo $$ > "$2"; shift 2 ;;
	*) shift ;;
	esac
done
if [ "$n" -le "$FAKE_PANICS" ]; then
	printf '[    0.953718] Kernel panic - not syncing: Fatal exception in interrupt\r\n' >> "$console"
else
	printf 'tcplab: init: kernel 6.1.0-stand-in\r\n' >> "$console"
fi
exit 0
"""


def run_vm(tmp_path, panics):
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "qemu-system-x86_64").write_text(FAKE_QEMU)
    (fake / "qemu-system-x86_64").chmod(0o755)
    raw = tmp_path / "raw"
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}",
               FAKE_COUNT=str(tmp_path / "boots"), FAKE_PANICS=str(panics))
    r = subprocess.run([VM, "--timeout", "60", "6.1", str(raw), "p01-machine"],
                       capture_output=True, text=True, timeout=300, env=env)
    if r.returncode == EXIT_SKIP:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    return r, raw, int((tmp_path / "boots").read_text())


@pytest.mark.qemu
@pytest.mark.parametrize("panics", [1, 2])
def test_a_panic_while_booting_boots_once_more_and_says_so(tmp_path, bindir, panics):
    if shutil.which("busybox") is None:
        pytest.skip("no busybox: vm.sh builds no initramfs")
    r, raw, boots = run_vm(tmp_path, panics)
    # one more boot, never two: a second panic is the run's failure, as any crash is
    assert boots == 2, r.stderr
    assert "the guest's kernel panicked while booting, before tcplab's init ran: " \
        "Kernel panic - not syncing: Fatal exception in interrupt" in r.stderr
    assert "booting once more" in r.stderr
    kept = (raw / "vm-console-boot-panic.log").read_text()
    assert "Kernel panic - not syncing" in kept and "\r" not in kept
    vm = kv_file(raw / "vm.txt")
    assert vm["boot_panics"] == "1" and float(vm["boot_panic_wall_s"]) >= 0
    # the stand-in's second boot ends with no done line either: a crash all the same
    assert r.returncode == 1 and vm["status"] == "crashed"
    last = (raw / "vm-console.log").read_text()
    assert ("Kernel panic" in last) == (panics == 2)


@pytest.mark.qemu
def test_a_crash_after_the_init_started_is_not_booted_again(tmp_path, bindir):
    if shutil.which("busybox") is None:
        pytest.skip("no busybox: vm.sh builds no initramfs")
    r, raw, boots = run_vm(tmp_path, 0)
    assert boots == 1 and r.returncode == 1, r.stderr
    assert "booting once more" not in r.stderr
    assert "boot_panics" not in kv_file(raw / "vm.txt")
    assert not (raw / "vm-console-boot-panic.log").exists()
