"""make bench builds its floor programs (tests/bench/*.c) with the project's flags: they are not
built by `make`, so without this test a change to a shared header can break `make bench`
unseen (it did: the printing helpers moved to common/tl_cli.h and floor.c still expected them
in tl_util.h)."""
import glob
import os
import shutil
import subprocess

from conftest import TOP


def bpf_buildable():
    """What the Makefile's TCPEV_WHY asks for tcpevents and evfloor: clang, bpftool, libbpf, BTF."""
    return (shutil.which("clang") is not None and
            (shutil.which("bpftool") or os.path.exists("/usr/sbin/bpftool")) and
            subprocess.run(["pkg-config", "--exists", "libbpf"]).returncode == 0 and
            os.path.exists("/sys/kernel/btf/vmlinux"))


def test_every_bench_program_builds(tmp_path):
    build = str(tmp_path / "build")
    progs = [os.path.join(build, "bench", os.path.basename(p)[:-2])
             for p in glob.glob(os.path.join(TOP, "tests", "bench", "*.c"))
             if os.path.basename(p) != "evfloor.c" or bpf_buildable()]
    assert progs, "no tests/bench/*.c"
    r = subprocess.run(["make", "-s", "-C", TOP, f"BUILD={build}", *progs],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warning" not in r.stderr, r.stderr[-3000:]
    for p in progs:
        assert os.access(p, os.X_OK), p
