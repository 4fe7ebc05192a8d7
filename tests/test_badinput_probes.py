"""Bad input for the probes, table-driven: every option of sockwatch, counters and machine × the
bad values it can get (a missing argument, an unknown option, empty, junk, trailing junk, a
sign, an overflow, out of range; for file options a nonexistent, unreadable or looping path, a
directory, a FIFO, /dev/full and /dev/zero; bad contents; extra arguments; stdout on /dev/full).

Each case must exit non-zero (2 for usage, 1 for a file or its data; never by a signal), print
exactly one line on stderr that names what was wrong (the option or the file), nothing on
stdout, no traceback and no sanitizer report, within 5 s.  A FIFO is the check that nothing blocks: a probe that opened it for
reading would wait for a writer until the timeout kills it.  "Unreadable" cases run as nobody
when the tests run as root (root reads a mode-000 file).  Under `make sanitize` the same table
runs against the ASan/UBSan build."""
import os
import random
import shutil
import subprocess
import tempfile

import pytest

from conftest import DATA

NL = os.path.join(DATA, "netlink")
PROC = os.path.join(DATA, "proc")
ROOT61 = os.path.join(PROC, "root-6.1")
SANITIZER_WORDS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                   "runtime error:")
NOBODY = 65534

# ---- the table --------------------------------------------------------------------------------
# A case: (id, program, argv, word the stderr line must hold, options).  "{name}" in argv and
# word is a path from the `files` fixture.  options: "nobody" (run as uid 65534 when root),
# "stdout_full" (stdout is /dev/full).

# Numeric options: (program, argv before the option, option, smallest, largest)
NUMERIC = [
    ("sockwatch", [], "-i", 1, 10000000),
    ("sockwatch", [], "-p", 1, 65535),
    ("sockwatch", [], "-P", 1, 65535),
    ("sockwatch", [], "-d", 1, 86400000),
    ("sockwatch", ["-1"], "-w", 1, 86400000),
    ("counters", [], "-i", 1, 3600000),
    ("counters", ["-i", "1000"], "-c", 1, 100000000),
    ("capture", ["-i", "lo"], "-p", 1, 65535),
    ("capture", ["-i", "lo"], "-s", 68, 262144),
    ("capture", ["-i", "lo"], "-c", 1, 1000000000),
]
BAD_NUMBERS = {
    "empty": "", "junk": "abc", "trailing-junk": "5x", "leading-blank": " 5", "plus": "+5",
    "negative": "-1", "float": "1.5", "hex": "0x10", "overflow": "99999999999999999999",
}

# File options that read: (program, argv before, option, argv after)
INPUTS = [
    ("sockwatch", [], "-R", []),
    ("counters", [], "-S", []),
    ("counters", [], "-N", []),
    ("counters", ["-S", "{snmp}"], "-d", []),
    ("counters", ["-d", "{snap}"], "-a", []),
    ("capture", [], "-r", []),
]
# Bad input paths: kind -> (path, extra options).  The word is the path.
BAD_INPUT_PATHS = {
    "nonexistent": ("{dir}/nonexistent", ()),
    "under-a-file": ("{empty}/x", ()),
    "directory": ("{dir}", ()),
    "fifo": ("{fifo}", ()),
    "dev-full": ("/dev/full", ()),
    "dev-zero": ("/dev/zero", ()),
    "symlink-loop": ("{loop}", ()),
    "unreadable": ("{unreadable}", ("nobody",)),
    "empty-file": ("{empty}", ()),
    "junk-file": ("{junk}", ()),
}

STATES = ["", "bogus", "syn_sent", "SYN-SENT-X", "estab,listen", "1", " listen", "listen "]
KEY_LISTS = ["", ",", "TcpActiveOpens,", ",TcpActiveOpens", "a,,b", "has space", "Ünïcode",
             "A" * 70]

# sockwatch -r: bad output paths (kind -> path, options)
BAD_RECORDS = {
    "directory": ("{dir}", ()),
    "fifo": ("{fifo}", ()),
    "dev-full": ("/dev/full", ()),
    "missing-directory": ("{dir}/nonexistent/rec.bin", ()),
    "under-a-file": ("{empty}/rec.bin", ()),
    "in-proc": ("/proc/tcplab-rec.bin", ()),
    "symlink-loop": ("{loop}", ()),
    "unwritable-file": ("{readonly}", ("nobody",)),
    "unwritable-directory": ("{dir}/rec.bin", ("nobody",)),
}

# machine -r DIR, DIR itself wrong
BAD_ROOTS = {
    "nonexistent": ("{dir}/nonexistent", ()),
    "regular-file": ("{empty}", ()),
    "fifo": ("{fifo}", ()),
    "dev-full": ("/dev/full", ()),
    "symlink-loop": ("{loop}", ()),
    "unreadable-directory": ("{root_locked}", ("nobody",)),
}
# machine -r TREE, one file of the tree wrong: (tree name, file under it)
BAD_TREES = {
    "osrelease-newline": "proc/sys/kernel/osrelease",
    "osrelease-blank": "proc/sys/kernel/osrelease",
    "osrelease-fifo": "proc/sys/kernel/osrelease",
    "osrelease-directory": "proc/sys/kernel/osrelease",
    "osrelease-dev-full": "proc/sys/kernel/osrelease",
    "osrelease-loop": "proc/sys/kernel/osrelease",
    "osrelease-unreadable": "proc/sys/kernel/osrelease",
    "arch-newline": "proc/sys/kernel/arch",
    "version-newline": "proc/sys/kernel/version",
    "version-nul": "proc/sys/kernel/version",
    "version-fifo": "proc/sys/kernel/version",
    "sysctl-newline": "proc/sys/net/ipv4/tcp_syn_retries",
    "sysctl-control": "proc/sys/net/ipv4/tcp_syn_retries",
}

UNKNOWN_OPTIONS = ["-Z", "-9", "-?", "--help", "--verbose"]
OPTION_LETTERS = {"sockwatch": "1ae46hcispPdwrR", "counters": "SNdakich", "machine": "rh",
                  "capture": "irpfwsch"}
EXTRA = [["extra"], ["-"], ["a", "b"]]

# Options that do not go together
COMBOS = [
    ("sockwatch", ["-w", "10"], "-w"),
    ("sockwatch", ["-r", "{dir}/rec.bin", "-R", "{dump}"], "-R"),
    ("counters", ["-a", "{snap}"], "-a"),
    ("counters", ["-k", "TcpActiveOpens"], "-k"),
    ("counters", ["-c", "5"], "-c"),
    ("counters", ["-i", "1000", "-S", "{snmp}"], "-i"),
    ("counters", ["-i", "1000", "-d", "{snap}"], "-i"),
    ("counters", ["-d", "{snap}", "-a", "{snap}", "-S", "{snmp}"], "-a"),
    ("counters", ["-d", "{snap}", "-a", "{snap}", "-N", "{netstat}"], "-a"),
    ("capture", [], "-i"),
    ("capture", ["-p", "80"], "-i"),
    ("capture", ["-i", "lo", "-r", "{pcap}"], "-i"),
    ("capture", ["-r", "{pcap}", "-w", "{dir}/x.pcap"], "-r"),
    ("capture", ["-r", "{pcap}", "-s", "100"], "-r"),
    ("capture", ["-r", "{pcap}", "-c", "1"], "-r"),
]

# capture: the interface, the filter, the files, the permission (word: what was wrong).  The
# live ones open lo of the namespace the tests run in, read-only, and fail before a packet.
CAPTURE = [
    ("-i no-such-interface", ["-i", "tcplab-nosuch0"], "tcplab-nosuch0", ()),
    ("-i name-too-long", ["-i", "x" * 40], "x" * 40, ()),
    ("-f pcap_compile rejects", ["-i", "lo", "-f", "tcp port"], "-f", ()),
    ("-f unknown word", ["-i", "lo", "-f", "tcp and frobnicate"], "-f", ()),
    ("-f on a file", ["-r", "{pcap}", "-f", "port 99999"], "-f", ()),
    ("-r truncated-record", ["-r", "{pcap_cut}"], "{pcap_cut}", ()),
    ("-r truncated-header", ["-r", "{pcap_head_cut}"], "{pcap_head_cut}", ()),
    ("-r not-pcap", ["-r", "{snmp}"], "{snmp}", ()),
    ("no permission", ["-i", "lo"], "-i lo", ("nobody",)),
    ("no permission with -w", ["-i", "lo", "-w", "{dir}/np.pcap"], "-i lo", ("nobody",)),
]
# capture -w: bad output paths, refused before a packet is captured
BAD_CAPTURE_OUTPUTS = {
    "directory": "{dir}",
    "fifo": "{fifo}",
    "dev-full": "/dev/full",
    "missing-directory": "{dir}/nonexistent/c.pcap",
    "under-a-file": "{empty}/c.pcap",
    "in-proc": "/proc/tcplab-c.pcap",
    "symlink-loop": "{loop}",
}

# Good runs whose stdout is /dev/full: the failed write is the one line
STDOUT_FULL = [
    ("sockwatch", ["-R", "{dump}"]),
    ("sockwatch", ["-1"]),
    ("counters", ["-S", "{snmp}"]),
    ("counters", ["-d", "{snap}", "-a", "{snap}", "-k", "TcpActiveOpens"]),
    ("machine", []),
    ("machine", ["-r", ROOT61]),
    ("capture", ["-r", "{pcap}"]),
    ("capture", ["-i", "lo"]),
]


def cases():
    out = []

    def add(cid, prog, argv, word, opts=(), status=1):
        out.append(pytest.param(prog, argv, word, tuple(opts), status, id=f"{prog} {cid}"))

    def usage(cid, prog, argv, word):
        add(cid, prog, argv, word, status=2)

    for prog, before, opt, lo, hi in NUMERIC:
        usage(f"{opt} missing", prog, before + [opt], opt)
        for kind, v in BAD_NUMBERS.items():
            usage(f"{opt} {kind}", prog, before + [opt, v], opt)
        usage(f"{opt} below-range", prog, before + [opt, str(lo - 1)], opt)
        usage(f"{opt} above-range", prog, before + [opt, str(hi + 1)], opt)
    for s in STATES:
        usage(f"-s {s!r}", "sockwatch", ["-s", s], "-s" if s == "" else s.strip() or "-s")
    usage("-s missing", "sockwatch", ["-s"], "-s")
    for c in ["", "rq,", ",rq", "rq,,wq", "foo", "RQ", "rq wq", "wq,foo", "rq,rq,x" * 20]:
        usage(f"-c {c[:12]!r}", "sockwatch", ["-c", c], "-c")
    usage("-c missing", "sockwatch", ["-c"], "-c")
    for k in KEY_LISTS:
        usage(f"-k {k[:12]!r}", "counters", ["-d", "{snap}", "-k", k], "-k")
    usage("-k missing", "counters", ["-d", "{snap}", "-k"], "-k")
    for prog, before, opt, after in INPUTS:
        usage(f"{opt} missing", prog, before + [opt], opt)
        usage(f"{opt} empty-name", prog, before + [opt, ""] + after, opt)
        for kind, (path, opts) in BAD_INPUT_PATHS.items():
            add(f"{opt} {kind}", prog, before + [opt, path] + after, path, opts)
    add("-R truncated-dump", "sockwatch", ["-R", "{dump_cut}"], "{dump_cut}")
    add("-d truncated-snapshot", "counters", ["-S", "{snmp}", "-d", "{snap_cut}"], "{snap_cut}")
    usage("-r missing", "sockwatch", ["-1", "-r"], "-r")
    usage("-r empty-name", "sockwatch", ["-1", "-r", ""], "-r")
    for kind, (path, opts) in BAD_RECORDS.items():
        add(f"-r {kind}", "sockwatch", ["-1", "-4", "-r", path], path, opts)
    usage("-r missing", "machine", ["-r"], "-r")
    usage("-r empty-name", "machine", ["-r", ""], "-r")
    for kind, (path, opts) in BAD_ROOTS.items():
        add(f"-r {kind}", "machine", ["-r", path], path, opts)
    for name, rel in BAD_TREES.items():
        add(f"-r tree:{name}", "machine", ["-r", "{tree_" + name + "}"],
            "{tree_" + name + "}/" + rel, ("nobody",) if "unreadable" in name else ())
    for prog, letters in OPTION_LETTERS.items():
        for u in UNKNOWN_OPTIONS:
            usage(f"unknown {u}", prog, [u], u[:2] if u.startswith("--") else u)
        for extra in EXTRA:
            usage(f"extra {' '.join(extra)}", prog, extra, extra[0])
    usage("-i missing", "capture", ["-i"], "-i")
    usage("-i empty-name", "capture", ["-i", ""], "-i")
    usage("-w missing", "capture", ["-i", "lo", "-w"], "-w")
    usage("-w empty-name", "capture", ["-i", "lo", "-w", ""], "-w")
    usage("-f missing", "capture", ["-i", "lo", "-f"], "-f")
    for cid, argv, word, opts in CAPTURE:
        add(cid, "capture", argv, word, opts)
    for kind, path in BAD_CAPTURE_OUTPUTS.items():
        add(f"-w {kind}", "capture", ["-i", "lo", "-w", path], path)
    for prog, argv, word in COMBOS:
        usage("combo " + " ".join(a for a in argv if not a.startswith("{")), prog, argv, word)
    for prog, argv in STDOUT_FULL:
        add("stdout-full " + " ".join(a for a in argv if not a.startswith(("{", "/"))), prog,
            argv, "stdout", ("stdout_full",))
    return out


CASES = cases()


# ---- the files --------------------------------------------------------------------------------

def write_tree(base, name, rel, make):
    root = os.path.join(base, "tree-" + name)
    shutil.copytree(ROOT61, root)
    path = os.path.join(root, rel)
    os.unlink(path)
    make(path)
    return root


@pytest.fixture(scope="module")
def files(bindir):
    """Every bad file, in a directory nobody can read and search (for the nobody cases) but not
    write."""
    d = tempfile.mkdtemp(prefix="tcplab-badinput-")
    os.chmod(d, 0o755)
    rng = random.Random(14)
    with open(os.path.join(NL, "synsent.bin"), "rb") as f:
        dump = f.read()
    snmp, netstat = os.path.join(PROC, "snmp-6.18"), os.path.join(PROC, "netstat-6.18")
    snap = subprocess.run([os.path.join(bindir, "counters"), "-S", snmp], capture_output=True,
                          check=True).stdout
    with open(os.path.join(DATA, "pcap", "handshake.pcap"), "rb") as f:
        pcap = f.read()
    p = {"dir": d, "snmp": snmp, "netstat": netstat}
    made = {"empty": b"", "junk": bytes(rng.getrandbits(8) for _ in range(4096)), "dump": dump,
            "dump_cut": dump[:10], "snap": snap, "snap_cut": snap[:len(snap) // 2 - 3],
            "unreadable": b"TcpActiveOpens 1\n", "readonly": b"",
            "pcap": pcap, "pcap_cut": pcap[:len(pcap) - 7], "pcap_head_cut": pcap[:20]}
    for name, data in made.items():
        p[name] = os.path.join(d, name)
        with open(p[name], "wb") as f:
            f.write(data)
        os.chmod(p[name], 0o644)
    os.chmod(p["unreadable"], 0)
    os.chmod(p["readonly"], 0o444)
    p["fifo"] = os.path.join(d, "fifo")
    os.mkfifo(p["fifo"])
    p["loop"] = os.path.join(d, "loop")
    os.symlink("loop", p["loop"])
    p["root_locked"] = os.path.join(d, "root-locked")
    shutil.copytree(ROOT61, p["root_locked"])
    os.chmod(p["root_locked"], 0)

    def content(data):
        return lambda path: open(path, "wb").write(data)
    makers = {
        "osrelease-newline": content(b"6.1.0\nhz=1000 source=/evil\n"),
        "osrelease-blank": content(b"6.1.0 nproc=64\n"),
        "osrelease-fifo": os.mkfifo,
        "osrelease-directory": os.mkdir,
        "osrelease-dev-full": lambda path: os.symlink("/dev/full", path),
        "osrelease-loop": lambda path: os.symlink(os.path.basename(path), path),
        "osrelease-unreadable": lambda path: (content(b"6.1.0\n")(path), os.chmod(path, 0)),
        "arch-newline": content(b"x86_64\nnproc=64\n"),
        "version-newline": content(b"#1 SMP\nkernel=evil\n"),
        "version-nul": content(b"#1 SMP\0kernel=evil\n"),
        "version-fifo": os.mkfifo,
        "sysctl-newline": content(b"6\nsysctl net.core.somaxconn=1\n"),
        "sysctl-control": content(b"6\x1b[2J\n"),
    }
    for name, rel in BAD_TREES.items():
        p["tree_" + name] = write_tree(d, name, rel, makers[name])
    for root, dirs, names in os.walk(d):
        for n in dirs:
            path = os.path.join(root, n)
            if not os.path.islink(path) and path != p["root_locked"]:
                os.chmod(path, 0o755)
    yield p
    os.chmod(p["root_locked"], 0o755)
    shutil.rmtree(d)


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


# ---- the test ---------------------------------------------------------------------------------

@pytest.mark.parametrize("prog,argv,word,opts,status", CASES)
def test_bad_input_is_one_line_and_non_zero(bindir, files, prog, argv, word, opts, status):
    argv = [os.path.join(bindir, prog)] + [a.format(**files) for a in argv]
    word = word.format(**files)
    kw = {}
    if "nobody" in opts and os.geteuid() == 0:
        kw["preexec_fn"] = as_nobody
    stdout = subprocess.PIPE
    if "stdout_full" in opts:
        stdout = open("/dev/full", "w")
    try:
        r = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=5,
                           **kw)
    finally:
        if stdout is not subprocess.PIPE:
            stdout.close()
    what = f"{argv}: exit {r.returncode}, stdout {(r.stdout or '')[:300]!r}, stderr {r.stderr!r}"
    assert r.returncode == status, what             # 2: usage, 1: a file or the data
    assert not any(w in r.stderr for w in SANITIZER_WORDS), what
    assert "Traceback" not in r.stderr, what
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, what
    assert r.stderr.startswith(prog + ": "), what
    assert word in r.stderr, what
    assert not r.stdout, what                       # nothing half-written


def test_table_is_big_enough():
    """Issue 14 asks for a bad-input table covering every probe option; at least 200 here."""
    by_prog = {}
    for c in CASES:
        by_prog[c.values[0]] = by_prog.get(c.values[0], 0) + 1
    print(f"\nbad probe inputs: {len(CASES)} {by_prog}")
    assert len(CASES) >= 200
    for prog, letters in OPTION_LETTERS.items():     # every option that takes a value is in it
        for letter in letters:
            if letter in "1ae46h":
                continue
            assert any(c.values[0] == prog and f"-{letter}" in c.values[1] for c in CASES), \
                (prog, letter)
