"""Reports on bad raw data, table-driven: for each report and each raw file it reads (copies of
the committed raw directories of 6.18, 6.1 and 6.12), the file is corrupted one way at a time —
missing, empty, cut mid-line, a FIFO, a link to /dev/zero, a directory, binary junk, a key
removed, a value made non-numeric, negative, 1e400, NaN or huge — and the report must either
refuse it (exit non-zero, exactly one line on stderr, no traceback, the old .txt/.json
untouched, no temporary file left) or, only where the data is truly optional or the corrupted
value is still a valid one, exit 0 with strict JSON.  Each case within 5 s."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP

OUT = os.path.join(TOP, "outputs")
K618, K61, K612 = "6.18.44-fc-v782", "6.1.0-57-cloud-amd64", "6.12.117+deb12-cloud-amd64"

# (report, kernel, units the report reads, [(unit, file, key or None, flags)])
# flags: opt = the file may be missing (exit 0 then); empty = an empty file is valid;
#        neg = a negative value is valid; str = the value is a string (any word is valid);
#        soft = the key itself is optional (removing it is fine).
TABLE = [
    ("p01-synretry", K618, ("p01-synretry", "p01-synretry-default"), [
        ("p01-synretry", "client.txt", "start_ns", ""),
        ("p01-synretry", "client.txt", "syncnt", ""),
        ("p01-synretry", "client.txt", "elapsed_s", ""),
        ("p01-synretry", "client.txt", "result", "str"),
        ("p01-synretry", "machine.txt", "net.ipv4.tcp_syn_linear_timeouts", "soft"),
        ("p01-synretry", "machine.txt", "kernel", "str"),
        ("p01-synretry", "listener.txt", "port", ""),
        ("p01-synretry", "sockwatch.txt", "retrans", ""),
        ("p01-synretry", "sockwatch.txt", "expires_ms", ""),
        ("p01-synretry", "counters-delta.txt", "TcpExtTCPSynRetrans", "neg soft"),
        ("p01-synretry", "collected-at.txt", None, "opt"),
        ("p01-synretry-default", "client.txt", "start_ns", ""),
        ("p01-synretry-default", "sockwatch.txt", "retrans", ""),
        ("p01-synretry-default", "counters-delta.txt", "TcpAttemptFails", "neg soft"),
    ]),
    ("p01-synretry", K61, ("p01-synretry",), [
        ("p01-synretry", "client.txt", "syncnt", ""),
        ("p01-synretry", "sockwatch.txt", "rto_ms", "soft"),
        ("p01-synretry", "vm.txt", None, "opt empty"),
    ]),
    ("p01-timeout", K618, ("p01-timeout",), [
        ("p01-timeout", "cc-client.txt", "start_ns", ""),
        ("p01-timeout", "cc-client.txt", "closed_ns", ""),
        ("p01-timeout", "cc-client.txt", "elapsed_s", ""),
        ("p01-timeout", "keep-client.txt", "closed_ns", ""),
        ("p01-timeout", "keep-client.txt", "result", "str"),
        ("p01-timeout", "cc-sockwatch.txt", "retrans", ""),
        ("p01-timeout", "keep-sockwatch.txt", "expires_ms", ""),
        ("p01-timeout", "cc-after.txt", None, "empty"),
        ("p01-timeout", "keep-after-timeout.txt", "rq", "empty"),
        ("p01-timeout", "keep-after-close.txt", None, "empty"),
        ("p01-timeout", "listener.txt", "port", ""),
        ("p01-timeout", "machine.txt", "kernel", "str"),
        ("p01-timeout", "collected-at.txt", None, "opt"),
    ]),
    ("p01-timeout", K612, ("p01-timeout",), [
        ("p01-timeout", "keep-client.txt", "start_ns", ""),
        ("p01-timeout", "keep-sockwatch.txt", "retrans", ""),
        ("p01-timeout", "vm.txt", None, "opt empty"),
    ]),
    ("p01-connect-time", K618, ("p01-connect-time",), [
        ("p01-connect-time", "accept-client.txt", "n", ""),
        ("p01-connect-time", "accept-client.txt", "median_us", ""),
        ("p01-connect-time", "accept-client.txt", "over_1ms", ""),
        ("p01-connect-time", "refused-client.txt", "count", ""),
        ("p01-connect-time", "refused-client.txt", "max_index", ""),
        ("p01-connect-time", "accept-counters-delta.txt", "TcpExtListenDrops", "neg soft"),
        ("p01-connect-time", "refused-counters-delta.txt", "TcpAttemptFails", "neg soft"),
        ("p01-connect-time", "accept-loadavg.txt", None, "opt"),
        ("p01-connect-time", "refused-loadavg.txt", None, "opt"),
        ("p01-connect-time", "listener.txt", "port", ""),
        ("p01-connect-time", "machine.txt", "nproc", ""),
    ]),
    ("p01-strace", K618, ("p01-strace",), [
        ("p01-strace", "block-client.txt", "elapsed_s", ""),
        ("p01-strace", "refused-client.txt", "result", "str"),
        ("p01-strace", "cc-client.txt", "elapsed_s", ""),
        ("p01-strace", "block.strace", None, "opt empty"),
        ("p01-strace", "refused.strace", None, "opt empty"),
        ("p01-strace", "cc.strace", None, "opt empty"),
        ("p01-strace", "block-sockets.txt", "inode", ""),
        ("p01-strace", "block-sockets.txt", "rq", ""),
        ("p01-strace", "strace-version.txt", None, ""),
        ("p01-strace", "listener.txt", "backlog", ""),
        ("p01-strace", "machine.txt", "kernel", "str"),
    ]),
    ("p01-machine", K618, ("p01-machine",), [
        ("p01-machine", "machine.txt", "nproc", ""),
        ("p01-machine", "machine.txt", "hz", ""),
        ("p01-machine", "machine.txt", "kernel", "str"),
        ("p01-machine", "collected-at.txt", None, "opt"),
    ]),
    ("p01-machine", K61, ("p01-machine",), [
        ("p01-machine", "machine.txt", "nproc", ""),
        ("p01-machine", "vm.txt", None, "opt empty"),
    ]),
    ("connect-modes", K618, ("connect-modes",), [
        ("connect-modes", "modes.txt", "port", ""),
        ("connect-modes", "modes.txt", "median_us", "neg"),
        ("connect-modes", "samples.txt", "total_ns", ""),
        ("connect-modes", "machine.txt", "nproc", ""),
        ("connect-modes", "strace-version.txt", None, ""),
        ("connect-modes", "strace-so-error.txt", None, "opt empty"),
        ("connect-modes", "loadavg.txt", None, "opt"),
    ]),
    ("accept-path", K618, ("accept-path",), [
        ("accept-path", "latency-any.txt", "accept_call_median_us", "neg"),
        ("accept-path", "latency-any.txt", "warmup", ""),
        ("accept-path", "burst-client.txt", "elapsed_s", ""),
        ("accept-path", "burst-client.txt", "lo_ms", ""),
        ("accept-path", "burst-server.txt", "accepted", ""),
        ("accept-path", "burst-server.txt", "backlog", ""),
        ("accept-path", "burst-counters-delta.txt", "TcpExtListenOverflows", "neg soft"),
        ("accept-path", "burst-queue.txt", "rq", ""),
        ("accept-path", "burst-queue.txt", "interval_us", ""),
        ("accept-path", "burst-synsent.txt", "retrans", "opt"),
        ("accept-path", "burst-requests.txt", "total_us", "opt empty neg"),
        ("accept-path", "machine.txt", "nproc", ""),
        ("accept-path", "loadavg.txt", None, "opt"),
    ]),
    ("poll-scaling", K618, ("poll-scaling",), [
        ("poll-scaling", "plan.txt", "rounds", ""),
        ("poll-scaling", "plan.txt", "window_ms", ""),
        ("poll-scaling", "epoll-k0-r1-load.txt", "req_s", "neg"),
        ("poll-scaling", "epoll-k0-r1-load.txt", "active", ""),
        ("poll-scaling", "epoll-k0-r1-server.txt", "port", ""),
        ("poll-scaling", "epoll-k0-r1-server.rc", None, ""),
        ("poll-scaling", "elapsed.txt", "uptime_end_s", "opt"),
        ("poll-scaling", "selftest-r1.txt", "req_s", "opt neg"),
        ("poll-scaling", "machine.txt", "nproc", "opt"),
    ]),
]

FILE_MUTATIONS = ("missing", "empty", "cut", "fifo", "devzero", "directory", "junk")
VALUE_MUTATIONS = {"nonnumeric": "x7", "negative": "-5", "e400": "1e400", "nan": "NaN",
                   "huge": "99999999999999999999999"}


def cases():
    for report, kernel, units, files in TABLE:
        for unit, name, key, flags in files:
            for m in FILE_MUTATIONS:
                yield report, kernel, units, unit, name, key, flags, m
            if key is not None:
                yield report, kernel, units, unit, name, key, flags, "nokey"
                for m in VALUE_MUTATIONS:
                    yield report, kernel, units, unit, name, key, flags, m


CASES = list(cases())


def case_id(c):
    return f"{c[0]}-{c[1].split('-')[0]}-{c[3]}/{c[4]}-{c[5] or 'file'}-{c[7]}"


def key_line(text, key):
    """(line index, regex) of the first line that carries key as key=value, `sysctl key=`, or
    a counter line `key value`."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if re.search(rf"(^|\s){re.escape(key)}=", line):
            return lines, i, re.compile(rf"((?:^|\s){re.escape(key)}=)\S*")
        if re.match(rf"{re.escape(key)} ", line):
            return lines, i, re.compile(rf"^({re.escape(key)} )\S+")
    raise AssertionError(f"{key} not in the file")


def mutate(path, key, m):
    if m == "missing":
        os.unlink(path)
        return
    if m in ("fifo", "devzero", "directory"):
        os.unlink(path)
        {"fifo": os.mkfifo, "directory": os.mkdir,
         "devzero": lambda p: os.symlink("/dev/zero", p)}[m](path)
        return
    with open(path, "rb") as f:
        data = f.read()
    if m == "empty":
        data = b""
    elif m == "cut":
        first = data.find(b"\n")
        data = data[:max(1, first // 2)] if first > 0 else b"k"
    elif m == "junk":
        data = bytes(range(256)) * 4
    else:
        lines, i, rx = key_line(data.decode(), key)
        if m == "nokey":
            lines[i] = rx.sub("", lines[i]) if "=" in rx.pattern else ""
        else:
            lines[i] = rx.sub(lambda mo: mo.group(1) + VALUE_MUTATIONS[m], lines[i], count=1)
        data = "\n".join(lines).encode()
    with open(path, "wb") as f:
        f.write(data)


def snapshot(outdir):
    out = {}
    for name in sorted(os.listdir(outdir)):
        with open(os.path.join(outdir, name), "rb") as f:
            out[name] = f.read()
    return out


def strict_json(text):
    def bad(c):
        raise ValueError(f"non-finite {c}")
    return json.loads(text, parse_constant=bad)


def may_pass(flags, m):
    f = flags.split()
    if m == "missing":
        return "opt" in f
    if m == "empty":
        return "empty" in f
    if m == "nokey":
        return "soft" in f
    if m == "negative":
        return "neg" in f or "str" in f
    if m in VALUE_MUTATIONS:
        return "str" in f
    return False


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_report_on_bad_raw(case, tmp_path):
    report, kernel, units, unit, name, key, flags, m = case
    raw, outdir = tmp_path / "raw", tmp_path / "out"
    for u in units:
        shutil.copytree(os.path.join(OUT, kernel, "raw", u), raw / u)
    outdir.mkdir()
    for ext in ("txt", "json", "svg"):
        if os.path.exists(os.path.join(OUT, kernel, f"{report}.{ext}")):
            shutil.copy(os.path.join(OUT, kernel, f"{report}.{ext}"), outdir)
    before = snapshot(outdir)
    mutate(str(raw / unit / name), key, m)
    r = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", report + ".py"),
                        str(raw), str(outdir)], capture_output=True, text=True, timeout=5)
    if r.returncode == 0:
        assert may_pass(flags, m), f"exit 0 on {m} {name} {key}; stderr {r.stderr!r}"
        assert r.stderr == ""
        with open(outdir / f"{report}.json") as f:
            strict_json(f.read())
        return
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert lines[0].startswith(report + ".py: "), lines[0]
    assert f"{unit}/{name}" in lines[0] or (m == "missing" and name.startswith(unit)), \
        lines[0]                                               # it names the file
    assert snapshot(outdir) == before, "outputs changed on a refusal"


@pytest.mark.parametrize("report,kernel,units", sorted({(c[0], c[1], c[2]) for c in CASES}))
def test_report_on_good_raw(report, kernel, units, tmp_path):
    """The same copies, unharmed: exit 0, nothing on stderr, strict JSON (the table's control)."""
    raw = tmp_path / "raw"
    for u in units:
        shutil.copytree(os.path.join(OUT, kernel, "raw", u), raw / u)
    r = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", report + ".py"),
                        str(raw), str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=5)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with open(tmp_path / "out" / f"{report}.json") as f:
        strict_json(f.read())


def test_table_size():
    """Issue 14 asks for at least 250 cases of bad raw input for the reports."""
    assert len(CASES) >= 250, len(CASES)
