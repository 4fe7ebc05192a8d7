"""vm-selftest in a guest: experiments/vm-selftest/vm-selftest.sh, run in the session's one 6.1
boot (conftest.guest61), says the programs run there: the kernel is the guest's, it has no
tcp_syn_linear_timeouts and no strace, and every dynamic program starts."""
import pytest

from guest_boot import kv_file

pytestmark = pytest.mark.qemu


def test_dynamic_programs_run_in_the_guest(guest61):
    raw, _, _ = guest61
    st = kv_file(raw / "vm-selftest" / "selftest.txt")
    assert st["uname_r"].startswith("6.1.0-")
    assert st["tcp_syn_linear_timeouts"] == "absent"
    assert st["strace"] == "not available"
    with open(raw / "vm-selftest" / "selftest.txt") as f:
        progs = [line for line in f if line.startswith("program=")]
    assert progs and all("status=runs" in p for p in progs), progs
