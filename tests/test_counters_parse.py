"""counters on saved /proc files: snapshot values, deltas, malformed input, options.

Expected values come from the saved files themselves (a small reference parser below), so the
tests state rules, not numbers copied from one machine."""
import os
import re
import subprocess

import pytest

from conftest import DATA, TOP

PROC = os.path.join(DATA, "proc")
U64_MAX = 2**64 - 1


def proc(name):
    return os.path.join(PROC, name)


def run(bindir, *args):
    return subprocess.run([os.path.join(bindir, "counters"), *args], capture_output=True, text=True)


def ok(bindir, *args):
    r = run(bindir, *args)
    assert r.returncode == 0, r.stderr
    return r


def ref_parse(*paths):
    """The nstat-style (name, value) list of well-formed snmp/netstat files, in file order."""
    out = []
    for path in paths:
        with open(path, "rb") as f:
            lines = [ln for ln in f.read().split(b"\n") if ln.strip()]
        assert len(lines) % 2 == 0, path
        for head, vals in zip(lines[0::2], lines[1::2]):
            hp, *names = head.decode().split()
            vp, *nums = vals.decode().split()
            assert hp == vp and hp.endswith(":") and len(names) == len(nums), path
            out += [(hp[:-1] + n, int(v)) for n, v in zip(names, nums)]
    return out


def snapshot_lines(out):
    """counters snapshot output → [(name, int)], checking the format on the way."""
    pairs = []
    for line in out.splitlines():
        m = re.fullmatch(r"(\S+) (-?[0-9]+)", line)
        assert m, line
        pairs.append((m.group(1), int(m.group(2))))
    return pairs


def ref_delta(before, after, keys=()):
    """The lines counters -d should print for two [(name, value)] lists."""
    b, a = dict(before), dict(after)
    lines = []
    for name, v in after:
        if name not in b:
            lines.append(f"{name} only-now {v}")
        elif v != b[name] or name in keys:
            lines.append(f"{name} {v - b[name]:+d}")
    lines += [f"{n} only-before {v}" for n, v in before if n not in a]
    lines += [f"{k} absent" for k in dict.fromkeys(keys) if k not in a and k not in b]
    return lines


def save_snapshot(bindir, tmp_path, name, *args):
    path = tmp_path / name
    path.write_text(ok(bindir, *args).stdout)
    return str(path)


# ---- snapshots of real files ----

@pytest.mark.parametrize("release", ["6.1", "6.12", "6.18"])
def test_snapshot_equals_reference_parse(bindir, release):
    snmp, netstat = proc(f"snmp-{release}"), proc(f"netstat-{release}")
    r = ok(bindir, "-S", snmp, "-N", netstat)
    assert snapshot_lines(r.stdout) == ref_parse(snmp, netstat)
    assert r.stderr == ""


def test_names_are_nstat_names(bindir):
    names = dict(snapshot_lines(ok(bindir, "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18")).stdout))
    for n in ["TcpActiveOpens", "TcpAttemptFails", "TcpOutRsts", "TcpEstabResets", "IpInReceives",
              "UdpInDatagrams", "IcmpInMsgs", "TcpExtListenOverflows", "TcpExtListenDrops",
              "TcpExtTCPSynRetrans", "IpExtInOctets", "MPTcpExtMPCapableSYNRX"]:
        assert n in names, n
    assert names["TcpMaxConn"] == -1      # the one signed value: printed as the kernel does


def test_newer_columns_absent_on_6_1(bindir):
    old = dict(snapshot_lines(ok(bindir, "-S", proc("snmp-6.1"), "-N", proc("netstat-6.1")).stdout))
    new = dict(snapshot_lines(ok(bindir, "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18")).stdout))
    assert "IpOutTransmits" in new and "IpOutTransmits" not in old
    assert "TcpExtTCPAOGood" in new and "TcpExtTCPAOGood" not in old
    assert "TcpActiveOpens" in old


def test_icmpmsg_split_into_several_pairs(bindir):
    """icmpmsg_put() prints only non-zero ICMP types, 16 per pair: one prefix, two pairs."""
    r = ok(bindir, "-S", proc("snmp-icmpmsg-split"))
    got = snapshot_lines(r.stdout)
    assert got == ref_parse(proc("snmp-icmpmsg-split"))
    assert len([n for n, _ in got if n.startswith("IcmpMsg")]) == 20
    assert r.stderr == ""


def test_S_alone_reads_only_snmp(bindir):
    r = ok(bindir, "-S", proc("snmp-6.18"))
    assert snapshot_lines(r.stdout) == ref_parse(proc("snmp-6.18"))


def test_N_alone_reads_only_netstat(bindir):
    r = ok(bindir, "-N", proc("netstat-6.18"))
    assert snapshot_lines(r.stdout) == ref_parse(proc("netstat-6.18"))


# ---- malformed and edge-case files ----

def without_tcp(pairs):
    return [(n, v) for n, v in pairs if not (n.startswith("Tcp") and not n.startswith("TcpExt"))]


@pytest.mark.parametrize("bad", ["snmp-mismatch", "snmp-overflow"])
def test_refused_pair_is_skipped_rest_kept(bindir, bad):
    r = ok(bindir, "-S", proc(bad))
    assert snapshot_lines(r.stdout) == without_tcp(ref_parse(proc("snmp-6.18")))
    assert r.stderr.strip() == f"counters: {proc(bad)}: skipped 1 malformed line pair(s)"


def test_no_trailing_newline_parses_the_same(bindir):
    r = ok(bindir, "-S", proc("snmp-no-newline"))
    assert snapshot_lines(r.stdout) == ref_parse(proc("snmp-6.18"))
    assert r.stderr == ""


def test_huge_value_kept_exactly(bindir):
    r = ok(bindir, "-S", proc("snmp-huge"))
    got = dict(snapshot_lines(r.stdout))
    assert got["TcpActiveOpens"] == U64_MAX
    assert snapshot_lines(r.stdout) == ref_parse(proc("snmp-huge"))


def test_truncated_keeps_complete_pairs_before_the_cut(bindir):
    r = ok(bindir, "-S", proc("snmp-truncated"))
    full = ref_parse(proc("snmp-6.18"))
    first_tcp = next(i for i, (n, _) in enumerate(full) if n.startswith("Tcp"))
    assert snapshot_lines(r.stdout) == full[:first_tcp]
    assert "skipped 1 malformed line pair(s)" in r.stderr


def test_empty_file_is_an_error(bindir):
    r = run(bindir, "-S", proc("empty"))
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip() == f"counters: {proc('empty')}: no counters"


def test_junk_keeps_only_wellformed_pairs(bindir):
    r = ok(bindir, "-N", proc("netstat-junk"))
    assert snapshot_lines(r.stdout) == [("MPTcpExtMPCapableSYNRX", 3), ("UdpInDatagrams", -5)]
    assert "skipped 6 malformed line pair(s)" in r.stderr


def test_missing_file_exits_1(bindir, tmp_path):
    r = run(bindir, "-S", str(tmp_path / "nope"))
    assert r.returncode == 1
    assert "No such file or directory" in r.stderr and len(r.stderr.splitlines()) == 1


def test_read_from_a_pipe(bindir):
    with open(proc("snmp-6.18"), "rb") as f:
        r = subprocess.run([os.path.join(bindir, "counters"), "-S", "/dev/stdin"], stdin=f,
                           capture_output=True, text=True)
    assert r.returncode == 0
    assert snapshot_lines(r.stdout) == ref_parse(proc("snmp-6.18"))


# ---- deltas ----

def test_delta_saved_vs_saved_proc_files(bindir, tmp_path):
    before = save_snapshot(bindir, tmp_path, "before", "-S", proc("snmp-6.1"), "-N", proc("netstat-6.1"))
    r = ok(bindir, "-d", before, "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18"))
    want = ref_delta(ref_parse(proc("snmp-6.1"), proc("netstat-6.1")),
                     ref_parse(proc("snmp-6.18"), proc("netstat-6.18")))
    assert r.stdout.splitlines() == want
    assert "IpOutTransmits only-now" in r.stdout        # a 6.18 column 6.1 lacks: not "+N"


def test_delta_between_two_snapshots_both_ways(bindir, tmp_path):
    a = save_snapshot(bindir, tmp_path, "a", "-S", proc("snmp-6.12"), "-N", proc("netstat-6.12"))
    b = save_snapshot(bindir, tmp_path, "b", "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18"))
    ra, rb = ref_parse(proc("snmp-6.12"), proc("netstat-6.12")), ref_parse(proc("snmp-6.18"), proc("netstat-6.18"))
    assert ok(bindir, "-d", a, "-a", b).stdout.splitlines() == ref_delta(ra, rb)
    assert ok(bindir, "-d", b, "-a", a).stdout.splitlines() == ref_delta(rb, ra)
    assert any(" -" in ln for ln in ref_delta(rb, ra))  # negative deltas are exercised


def test_delta_of_identical_is_empty(bindir, tmp_path):
    a = save_snapshot(bindir, tmp_path, "a", "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18"))
    assert ok(bindir, "-d", a, "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18")).stdout == ""
    assert ok(bindir, "-d", a, "-a", a).stdout == ""


def test_keys_zero_missing_and_one_sided(bindir, tmp_path):
    before = save_snapshot(bindir, tmp_path, "before", "-S", proc("snmp-6.1"), "-N", proc("netstat-6.1"))
    keys = ["TcpAttemptFails", "TcpExtTCPAOGood", "TcpExtNoSuchCounter", "TcpAttemptFails"]
    r = ok(bindir, "-d", before, "-a", before, "-k", ",".join(keys[:2]), "-k", ",".join(keys[2:]))
    # 6.1 has no TCP-AO counters: with 6.1 on both sides TcpExtTCPAOGood is absent
    assert r.stdout.splitlines() == ["TcpAttemptFails +0", "TcpExtTCPAOGood absent",
                                     "TcpExtNoSuchCounter absent"]
    now = save_snapshot(bindir, tmp_path, "now", "-S", proc("snmp-6.18"), "-N", proc("netstat-6.18"))
    r = ok(bindir, "-d", before, "-a", now, "-k", ",".join(keys))
    want = ref_delta(ref_parse(proc("snmp-6.1"), proc("netstat-6.1")),
                     ref_parse(proc("snmp-6.18"), proc("netstat-6.18")), keys)
    assert r.stdout.splitlines() == want
    assert "TcpExtTCPAOGood only-now 0" in want
    assert want[-1] == "TcpExtNoSuchCounter absent"


def test_delta_extremes_are_exact(bindir, tmp_path):
    """Values span [-2^63, 2^64-1]: a difference needs 65 bits and must still be exact."""
    lo, hi = tmp_path / "lo", tmp_path / "hi"
    lo.write_text(f"A -9223372036854775808\nB 0\nC {U64_MAX}\nD -1\n")
    hi.write_text(f"A {U64_MAX}\nB {U64_MAX}\nC 0\nD -1\n")
    r = ok(bindir, "-d", str(lo), "-a", str(hi))
    assert r.stdout.splitlines() == [f"A +{U64_MAX + 2**63}", f"B +{U64_MAX}", f"C -{U64_MAX}"]
    r = ok(bindir, "-d", str(hi), "-a", str(lo))
    assert r.stdout.splitlines() == [f"A -{U64_MAX + 2**63}", f"B -{U64_MAX}", f"C +{U64_MAX}"]


def test_delta_huge_file(bindir, tmp_path):
    before = save_snapshot(bindir, tmp_path, "before", "-S", proc("snmp-6.18"))
    r = ok(bindir, "-d", before, "-S", proc("snmp-huge"))
    old = dict(ref_parse(proc("snmp-6.18")))["TcpActiveOpens"]
    assert r.stdout.splitlines() == [f"TcpActiveOpens +{U64_MAX - old}"]


def test_malformed_snapshot_lines_skipped(bindir, tmp_path):
    snap = tmp_path / "snap"
    snap.write_text("TcpA 1\n\nTcpB 2 3\nTcpC x\nTcpA 5\nTcpD 4\n")
    r = ok(bindir, "-d", str(snap), "-a", str(snap), "-k", "TcpA,TcpD")
    assert r.stdout.splitlines() == ["TcpA +0", "TcpD +0"]
    assert r.stderr.count("skipped 3 malformed line(s)") == 2   # read as before and as after


# ---- options ----

USAGE_ERRORS = [
    ["-x"], ["-d"], ["-k", "TcpA"], ["-a", "x"], ["extra"],
    ["-d", "x", "-a", "y", "-S", "z"], ["-d", "x", "-k", ""], ["-d", "x", "-k", "A,,B"],
    ["-d", "x", "-k", "A,"], ["-d", "x", "-k", "A" * 64],
]


@pytest.mark.parametrize("args", USAGE_ERRORS, ids=lambda a: " ".join(a) or "none")
def test_bad_usage_exits_2_one_line(bindir, args):
    r = run(bindir, *args)
    assert r.returncode == 2
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("counters: ")


def test_help_matches_docs(bindir):
    r = ok(bindir, "-h")
    assert r.stdout.startswith("usage: counters ")
    with open(os.path.join(TOP, "docs", "counters.md")) as f:
        assert r.stdout in f.read()
