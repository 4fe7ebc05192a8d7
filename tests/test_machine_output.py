"""machine: the live host, a saved 6.1 tree (-r), CONFIG_HZ from /boot or a gzip'ed config."""
import gzip
import os
import shutil
import subprocess
import zlib

import pytest

from conftest import DATA, TOP, in_ns

ROOT61 = os.path.join(DATA, "proc", "root-6.1")
SYSCTLS = [
    "net.ipv4.tcp_syn_retries", "net.ipv4.tcp_syn_linear_timeouts", "net.ipv4.tcp_synack_retries",
    "net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_syncookies", "net.ipv4.tcp_abort_on_overflow",
    "net.core.somaxconn", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_retries2", "net.ipv4.tcp_orphan_retries", "net.ipv4.tcp_rto_min_us",
    "net.ipv4.tcp_rto_max_ms", "net.ipv4.tcp_timestamps", "net.ipv4.tcp_tw_reuse",
    "net.ipv4.tcp_max_tw_buckets", "net.ipv4.tcp_ehash_entries",
]


def run(bindir, *args, ns=None):
    argv = [os.path.join(bindir, "machine"), *args]
    return subprocess.run(in_ns(ns, argv) if ns else argv, capture_output=True, text=True)


def parse(out):
    """machine output → (info, sysctls): the value of a key is the rest of its line.  The
    link= lines (tests/test_machine_links.py) are left out."""
    info, sysctls = {}, {}
    for line in out.splitlines():
        if line.startswith("link="):
            continue
        if line.startswith("sysctl "):
            k, v = line[len("sysctl "):].split("=", 1)
            sysctls[k] = v
        elif line.startswith("hz="):
            hz, source = line.split(" ")
            info["hz"], info["source"] = hz[3:], source[len("source="):]
        else:
            k, v = line.split("=", 1)
            info[k] = v
    return info, sysctls


def machine(bindir, *args, ns=None):
    r = run(bindir, *args, ns=ns)
    assert r.returncode == 0, r.stderr
    info, sysctls = parse(r.stdout)
    assert list(sysctls) == SYSCTLS
    return info, sysctls, r


def file_value(root, name):
    """What machine should print for a sysctl file: its words joined by one space, or absent."""
    path = os.path.join(root, "proc", "sys", *name.split("."))
    if not os.path.exists(path):
        return "absent"
    with open(path) as f:
        return " ".join(f.read().split())


def config_hz(text):
    for line in text.splitlines():
        if line.startswith("CONFIG_HZ="):
            return line.split("=", 1)[1]
    return None


# ---- the live host ----

def test_host_uname_and_cpus(bindir):
    info, _, r = machine(bindir)
    u = os.uname()
    assert r.stdout.splitlines()[:5] == [f"kernel={u.release}", f"version={u.version}",
                                         f"machine={u.machine}",
                                         r.stdout.splitlines()[3], f"nproc={os.cpu_count()}"]
    assert r.stdout.splitlines()[3].startswith("hz=")


def test_host_sysctls_match_proc_sys(bindir):
    _, sysctls, _ = machine(bindir)
    for name in SYSCTLS:
        assert sysctls[name] == file_value("/", name), name


@pytest.mark.skipif(not os.path.exists("/proc/sys/net/ipv4/tcp_syn_linear_timeouts"),
                    reason="kernel before 6.5: no tcp_syn_linear_timeouts")
def test_host_syn_linear_timeouts(bindir):
    _, sysctls, _ = machine(bindir)
    assert sysctls["net.ipv4.tcp_syn_linear_timeouts"] == "4"   # the kernel default


def test_host_hz_and_its_source(bindir):
    info, _, _ = machine(bindir)
    boot = f"/boot/config-{os.uname().release}"
    if os.path.exists(boot) and config_hz(open(boot).read()):
        want = (config_hz(open(boot).read()), boot)
    elif os.path.exists("/proc/config.gz"):
        want = (config_hz(gzip.open("/proc/config.gz", "rt").read()), "/proc/config.gz")
    else:
        want = ("unknown", "none")
    assert (info["hz"], info["source"]) == want


@pytest.mark.netns
def test_sysctls_are_the_namespace_ones(bindir, netns):
    host = machine(bindir)[1]["net.ipv4.tcp_syn_retries"]
    other = "2" if host != "2" else "3"
    subprocess.run(in_ns(netns, ["sh", "-c", f"echo {other} > /proc/sys/net/ipv4/tcp_syn_retries"]),
                   check=True)
    assert machine(bindir, ns=netns)[1]["net.ipv4.tcp_syn_retries"] == other
    assert machine(bindir)[1]["net.ipv4.tcp_syn_retries"] == host


# ---- saved trees ----

def test_saved_6_1_tree(bindir):
    info, sysctls, r = machine(bindir, "-r", ROOT61)
    assert info == {"kernel": "6.1.0-57-cloud-amd64",
                    "version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)",
                    "machine": "x86_64", "hz": "250",
                    "source": "/boot/config-6.1.0-57-cloud-amd64", "nproc": "1",
                    "memtotal_kb": "unknown"}   # the saved tree has no proc/meminfo
    for name in SYSCTLS:
        assert sysctls[name] == file_value(ROOT61, name), name
    assert sysctls["net.ipv4.tcp_syn_linear_timeouts"] == "absent"
    assert sysctls["net.ipv4.tcp_rto_min_us"] == "absent"
    assert sysctls["net.ipv4.ip_local_port_range"] == "32768 60999"   # the tab became a space
    assert r.stderr == ""


def test_empty_tree_everything_unknown_or_absent(bindir, tmp_path):
    info, sysctls, _ = machine(bindir, "-r", str(tmp_path))
    assert info == {"kernel": "unknown", "version": "unknown", "machine": "unknown",
                    "hz": "unknown", "source": "none", "nproc": "unknown",
                    "memtotal_kb": "unknown"}
    assert set(sysctls.values()) == {"absent"}


@pytest.fixture
def tree(tmp_path):
    """root-6.1 without /boot: CONFIG_HZ can only come from proc/config.gz."""
    root = tmp_path / "root"
    shutil.copytree(ROOT61, root)
    shutil.rmtree(root / "boot")
    return root


def config_text(hz, filler_lines):
    lines = [f"CONFIG_OPTION_{i}=y" if i % 3 else f"# CONFIG_OFF_{i} is not set"
             for i in range(filler_lines)]
    lines.insert(filler_lines // 2, f"CONFIG_HZ={hz}")
    return ("\n".join(lines) + "\n").encode()


def raw_gzip(data, strategy):
    """A gzip member whose deflate stream uses one zlib strategy (Z_FIXED: fixed Huffman)."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15, 9, strategy)
    body = co.compress(data) + co.flush()
    return (b"\x1f\x8b\x08\x08\0\0\0\0\0\x03config\0" + body +      # FNAME set: header skipped
            zlib.crc32(data).to_bytes(4, "little") + len(data).to_bytes(4, "little"))


GZ_CASES = {
    "gzip-9 (dynamic Huffman)": lambda d: gzip.compress(d, 9),
    "gzip-0 (stored blocks)": lambda d: gzip.compress(d, 0),
    "fixed Huffman": lambda d: raw_gzip(d, zlib.Z_FIXED),
    "RLE": lambda d: raw_gzip(d, zlib.Z_RLE),
}


@pytest.mark.parametrize("case", GZ_CASES)
def test_hz_from_config_gz(bindir, tree, case):
    data = config_text(300, 20000)          # several blocks and 64 KiB windows
    (tree / "proc" / "config.gz").write_bytes(GZ_CASES[case](data))
    info, _, r = machine(bindir, "-r", str(tree))
    assert (info["hz"], info["source"]) == ("300", "/proc/config.gz")
    assert r.stderr == ""


def test_host_config_gz_through_a_tree(bindir, tree):
    if not os.path.exists("/proc/config.gz"):
        pytest.skip("no /proc/config.gz on this kernel")
    shutil.copyfile("/proc/config.gz", tree / "proc" / "config.gz")
    info, _, _ = machine(bindir, "-r", str(tree))
    assert info["hz"] == config_hz(gzip.open("/proc/config.gz", "rt").read())


def test_boot_config_wins_over_config_gz(bindir, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(ROOT61, root)
    (root / "proc" / "config.gz").write_bytes(gzip.compress(config_text(1000, 10)))
    info, _, _ = machine(bindir, "-r", str(root))
    assert (info["hz"], info["source"]) == ("250", "/boot/config-6.1.0-57-cloud-amd64")


def corruptions(gz):
    yield "truncated", gz[: len(gz) // 2]
    yield "bad crc", gz[:-8] + bytes([gz[-8] ^ 0xFF]) + gz[-7:]
    yield "bad size", gz[:-4] + (len(gz) + 1).to_bytes(4, "little")
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0x55
    yield "flipped byte", bytes(flipped)
    yield "not gzip", b"CONFIG_HZ=100\n"
    yield "empty", b""


@pytest.mark.parametrize("name", [n for n, _ in corruptions(b"x" * 40)])
def test_corrupt_config_gz_gives_unknown(bindir, tree, name):
    gz = gzip.compress(config_text(300, 5000))
    (tree / "proc" / "config.gz").write_bytes(dict(corruptions(gz))[name])
    info, _, r = machine(bindir, "-r", str(tree))
    assert (info["hz"], info["source"]) == ("unknown", "none")
    assert r.stderr.startswith("machine: /proc/config.gz: ") and len(r.stderr.splitlines()) == 1


def test_config_without_hz(bindir, tree):
    (tree / "proc" / "config.gz").write_bytes(gzip.compress(b"CONFIG_HZ_250=y\nCONFIG_HZ=\n"))
    info, _, r = machine(bindir, "-r", str(tree))
    assert info["hz"] == "unknown"
    assert "no valid CONFIG_HZ" in r.stderr


@pytest.mark.parametrize("text,want", [("0-1\n", "2"), ("0\n", "1"), ("0-3,6,8-9\n", "7"),
                                       ("", "unknown"), ("3-1\n", "unknown"), ("0,\n", "unknown"),
                                       ("x\n", "unknown")])
def test_nproc_from_cpu_list(bindir, tree, text, want):
    (tree / "sys" / "devices" / "system" / "cpu" / "online").write_text(text)
    assert machine(bindir, "-r", str(tree))[0]["nproc"] == want


MEMINFO = "MemTotal:       24683548 kB\nMemFree:        23738064 kB\nMemAvailable:   24253344 kB\n"


def test_host_memtotal_is_what_free_shows(bindir):
    """memtotal_kb= against procps' free(1), which reads the same MemTotal line its own way."""
    if shutil.which("free") is None:
        pytest.skip("free (procps) not installed")
    info = machine(bindir)[0]
    total = subprocess.run(["free", "-k"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[1].split()[1]
    assert info["memtotal_kb"] == total


@pytest.mark.parametrize("text,want", [
    (MEMINFO, "24683548"),
    ("MemFree: 1 kB\nMemTotal:\t480284 kB\n", "480284"),     # not first, a tab
    ("MemTotal: 1 kB", "1"),                                    # no final newline
    ("", "unknown"), ("MemFree: 5 kB\n", "unknown"),            # no MemTotal line
    ("MemTotal: 0 kB\n", "unknown"), ("MemTotal: 12 MB\n", "unknown"),
    ("MemTotal: kB\n", "unknown"), ("MemTotal: 12 kB extra\n", "unknown"),
    ("MemTotal: 99999999999999999999 kB\n", "unknown"),          # past 2^50 kB
    (" MemTotal: 12 kB\n", "unknown"),                          # not at the line's start
])
def test_memtotal_from_meminfo(bindir, tree, text, want):
    (tree / "proc" / "meminfo").write_text(text)
    info, _, r = machine(bindir, "-r", str(tree))
    assert info["memtotal_kb"] == want
    assert r.stdout.splitlines()[5] == f"memtotal_kb={want}"   # right after nproc=


# ---- options ----

# bad options and arguments: tests/test_badinput_probes.py (exit 2, one line)

def test_help_matches_docs(bindir):
    r = run(bindir, "-h")
    assert r.returncode == 0 and r.stdout.startswith("usage: machine ")
    with open(os.path.join(TOP, "docs", "machine.md")) as f:
        assert r.stdout in f.read()


# ---- refused trees and values (issue 14 item 7) ----

def refused(r, word):
    """Nothing on stdout, one line on stderr holding word, exit 1."""
    assert (r.returncode, r.stdout) == (1, ""), (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and word in r.stderr, r.stderr


@pytest.mark.parametrize("where", ["nonexistent", "file"])
def test_root_must_be_a_directory(bindir, tmp_path, where):
    root = tmp_path / "nope"
    if where == "file":
        root.write_text("x\n")
    r = run(bindir, "-r", str(root))
    refused(r, str(root))


# (file under the tree, its bytes): each would add a line or a key=value field to the output
INJECTIONS = {
    "osrelease-newline": ("proc/sys/kernel/osrelease", b"6.1.0\nhz=1000 source=/evil\n"),
    "osrelease-blank": ("proc/sys/kernel/osrelease", b"6.1.0 nproc=64\n"),
    "osrelease-cr": ("proc/sys/kernel/osrelease", b"6.1.0\rhz=1\n"),
    "arch-newline": ("proc/sys/kernel/arch", b"x86_64\nnproc=64\n"),
    "version-newline": ("proc/sys/kernel/version", b"#1 SMP\nkernel=evil\n"),
    "version-nul": ("proc/sys/kernel/version", b"#1 SMP\0kernel=evil\n"),
    "sysctl-newline": ("proc/sys/net/ipv4/tcp_syn_retries", b"6\nsysctl net.core.somaxconn=1\n"),
    "sysctl-escape": ("proc/sys/net/ipv4/tcp_syn_retries", b"6\x1b[2J\n"),
}


@pytest.mark.parametrize("name", sorted(INJECTIONS))
def test_value_that_is_not_one_line_is_refused(bindir, tree, name):
    rel, data = INJECTIONS[name]
    (tree / rel).write_bytes(data)
    r = run(bindir, "-r", str(tree))
    refused(r, os.path.join(str(tree), rel))


def test_version_blanks_fold_into_one_space(bindir, tree):
    (tree / "proc/sys/kernel/version").write_bytes(b"#1  SMP\tPREEMPT \n")
    info, _, r = machine(bindir, "-r", str(tree))
    assert info["version"] == "#1 SMP PREEMPT" and r.stderr == ""


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_special_file_in_the_tree_is_refused_without_blocking(bindir, tree, kind):
    path = tree / "proc/sys/kernel/osrelease"
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    r = subprocess.run([os.path.join(bindir, "machine"), "-r", str(tree)], capture_output=True,
                       text=True, timeout=5)
    refused(r, str(path))
