"""Each probe under valgrind (memcheck) on saved inputs — replayed sock_diag dumps, saved /proc
files and snapshots, a saved machine tree with a gzip'ed config — and once live: no error and
no leak of any kind.  Needs the normal build (valgrind cannot run an ASan one: under
`make sanitize` these skip, and ASan's LeakSanitizer does the leak part).  capture -r replays the
committed captures of tests/data/pcap.  `make valgrind`."""
import gzip
import os
import shutil
import subprocess

import pytest

from conftest import DATA

NL = os.path.join(DATA, "netlink")
PROC = os.path.join(DATA, "proc")
PCAP = os.path.join(DATA, "pcap")
VALGRIND = ["valgrind", "--error-exitcode=99", "--leak-check=full", "--show-leak-kinds=all",
            "--errors-for-leak-kinds=all", "--track-fds=no", "-q"]

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None,
                                reason="valgrind is not installed (make deps-fuzz)")


@pytest.fixture(scope="module")
def plain(bindir):
    """bindir, unless its programs are built with ASan (valgrind cannot run those)."""
    with open(os.path.join(bindir, "counters"), "rb") as f:
        if b"__asan_init" in f.read():
            pytest.skip("an ASan build: LeakSanitizer checks leaks there")
    return bindir


@pytest.fixture(scope="module")
def inputs(plain, tmp_path_factory):
    d = tmp_path_factory.mktemp("vg")
    snap = d / "snap"
    r = subprocess.run([os.path.join(plain, "counters"), "-S", os.path.join(PROC, "snmp-6.1"),
                        "-N", os.path.join(PROC, "netstat-6.1")], capture_output=True, check=True)
    snap.write_bytes(r.stdout)
    tree = d / "root"
    shutil.copytree(os.path.join(PROC, "root-6.1"), tree)
    config = next((tree / "boot").iterdir())
    (tree / "proc" / "config.gz").write_bytes(gzip.compress(config.read_bytes()))
    gz_only = d / "root-gz"
    shutil.copytree(tree, gz_only)
    shutil.rmtree(gz_only / "boot")
    return {"snap": str(snap), "tree": str(tree), "gz_only": str(gz_only),
            "keep": str(d / "links.bin")}


CASES = {
    "sockwatch replay listen-estab": ["sockwatch", "-R", os.path.join(NL, "listen-estab.bin")],
    "sockwatch replay synsent": ["sockwatch", "-a", "-R", os.path.join(NL, "synsent.bin")],
    "sockwatch replay garbled": ["sockwatch", "-R", os.path.join(PROC, "snmp-6.18")],
    "sockwatch live once": ["sockwatch", "-1", "-4"],
    "counters snapshot": ["counters", "-S", os.path.join(PROC, "snmp-6.18"),
                          "-N", os.path.join(PROC, "netstat-6.18")],
    "counters junk": ["counters", "-N", os.path.join(PROC, "netstat-junk")],
    "counters empty": ["counters", "-S", os.path.join(PROC, "empty")],
    "counters delta": ["counters", "-d", "{snap}", "-S", os.path.join(PROC, "snmp-6.18"),
                       "-N", os.path.join(PROC, "netstat-6.18"), "-k", "TcpActiveOpens,NoSuch"],
    "counters delta two snapshots": ["counters", "-d", "{snap}", "-a", "{snap}"],
    "counters live": ["counters"],
    "machine saved tree": ["machine", "-r", "{tree}"],
    "machine config.gz": ["machine", "-r", "{gz_only}"],
    "machine live": ["machine"],
    "machine bad option": ["machine", "-Z"],
    "machine links replay": ["machine", "-r", "{tree}", "-l", os.path.join(NL, "links.bin")],
    "machine links garbled": ["machine", "-r", "{tree}", "-l", os.path.join(NL, "synsent.bin")],
    "machine live links kept": ["machine", "-w", "{keep}"],
    "capture bad option": ["capture", "-Z"],
    "capture no such interface": ["capture", "-i", "tcplab-nosuch0"],
    "capture not a pcap": ["capture", "-r", os.path.join(PROC, "snmp-6.18")],
    "capture bad filter": ["capture", "-r", os.path.join(PCAP, "icmp.pcap"), "-f", "tcp port"],
}
# capture -r on every committed capture (the decoder, the connection table, the file reader)
CASES.update({f"capture replay {n}": ["capture", "-r", os.path.join(PCAP, n + ".pcap"), "-p", "21013"]
              for n in ("handshake", "handshake6", "synretry", "icmp", "tcpdump")})


@pytest.mark.parametrize("name", sorted(CASES))
def test_probe_is_clean_under_valgrind(plain, inputs, name):
    prog, *args = CASES[name]
    argv = VALGRIND + [os.path.join(plain, prog)] + [a.format(**inputs) for a in args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode != 99, f"valgrind found errors or leaks:\n{r.stderr[-4000:]}"
    assert "==" not in r.stderr, r.stderr[-4000:]       # -q: valgrind speaks only of problems
