"""Older kernels go through the same decoders with no warnings: 6.1's shorter tcp_info (232
bytes, no tcpi_total_rto), its missing counters (IpOutTransmits…), its absent
tcp_syn_linear_timeouts.  Without booting: sock_diag dumps recorded in a 6.1 guest
(tests/data/netlink/record-vm.sh), saved 6.1 /proc files, and the outputs/ of booted kernels.
With QEMU (marker qemu): one `./run.sh --kernel 6.1 --quick`, every report and raw stderr clean."""
import glob
import json
import os
import struct
import subprocess

import pytest

import tcplab
from conftest import DATA, TOP, kv

NL = os.path.join(DATA, "netlink")
PROC = os.path.join(DATA, "proc")
INET_DIAG_INFO, SOCK_DIAG_BY_FAMILY = 2, 20
WARN_WORDS = ("warning", "Warning", "Traceback", "malformed", "skipped", "garbled", "error")


def replay(bindir, path):
    r = subprocess.run([os.path.join(bindir, "sockwatch"), "-R", path], capture_output=True,
                       text=True, timeout=10)
    return r, [kv(line) for line in r.stdout.splitlines()]


def info_lengths(path):
    """The INET_DIAG_INFO payload length of every socket message in a recorded dump."""
    with open(path, "rb") as f:
        data = f.read()
    lengths, off = [], 0
    while off + 16 <= len(data):
        ln, typ = struct.unpack_from("=IH", data, off)
        if typ == SOCK_DIAG_BY_FAMILY:
            a = off + 16 + 72                       # nlmsghdr + inet_diag_msg
            while a + 4 <= off + ln:
                alen, atype = struct.unpack_from("=HH", data, a)
                if atype == INET_DIAG_INFO:
                    lengths.append(alen - 4)
                a += (alen + 3) & ~3
        off += (ln + 3) & ~3
    return lengths


@pytest.mark.parametrize("scenario", ["listen-estab", "synsent"])
def test_6_1_dump_decodes_like_6_18(bindir, scenario):
    old, new = (os.path.join(NL, f"{scenario}{v}.bin") for v in ("-6.1", ""))
    r_old, lines_old = replay(bindir, old)
    r_new, lines_new = replay(bindir, new)
    assert r_old.returncode == 0 and r_old.stderr == "", r_old.stderr
    assert set(info_lengths(old)) == {232}          # 6.1: tcp_info ends at tcpi_snd_wnd
    assert min(info_lengths(new)) > 232
    assert {x["state"] for x in lines_old} == {x["state"] for x in lines_new}
    assert {x["local"][0] for x in lines_old} == {x["local"][0] for x in lines_new}  # 1 or [
    assert all("rto_ms" in x and "backoff" in x for x in lines_old)


def test_short_tcp_info_reads_as_zero(bindir):
    """tcpi_total_rto (6.7) is past the end of 6.1's struct: 0 there although the socket
    retransmitted, while 6.18 counts each RTO."""
    _, old = replay(bindir, os.path.join(NL, "synsent-6.1.bin"))
    _, new = replay(bindir, os.path.join(NL, "synsent.bin"))
    assert max(int(x["total_retrans"]) for x in old) >= 1
    assert {x["total_rto"] for x in old} == {"0"}
    assert max(int(x["total_rto"]) for x in new) >= 1
    # sockwatch prints the length it got; tcpi_rcv_wnd (6.2) lies past 6.1's end, so 0 there
    assert {x["info_len"] for x in old} == {"232"} and {x["rcv_wnd"] for x in old} == {"0"}
    assert min(int(x["info_len"]) for x in new) > 232 and min(int(x["rcv_wnd"]) for x in new) > 0
    # and 6.1 doubles the SYN RTO where 6.18 keeps it linear (tcp_syn_linear_timeouts)
    assert [x["rto_ms"] for x in old if x["retrans"] == "1"] == ["2000"]


def counters(bindir, *args):
    r = subprocess.run([os.path.join(bindir, "counters"), *args], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout


def test_6_1_counters_missing_on_one_side_are_named_not_warned(bindir, tmp_path):
    snap61 = tmp_path / "snap61"
    snap61.write_text(counters(bindir, "-S", os.path.join(PROC, "snmp-6.1"),
                               "-N", os.path.join(PROC, "netstat-6.1")))
    keys = "IpOutTransmits,TcpExtTCPSynRetrans,TcpExtTCPAORequired"
    same = tmp_path / "same"
    same.write_text(counters(bindir, "-d", str(snap61), "-a", str(snap61), "-k", keys))
    got = tcplab.read_counters_delta(str(same))
    assert got == {"IpOutTransmits": None, "TcpExtTCPSynRetrans": 0, "TcpExtTCPAORequired": None}
    assert "absent" in "\n".join(tcplab.counters_block(got))
    newer = counters(bindir, "-d", str(snap61), "-S", os.path.join(PROC, "snmp-6.18"),
                     "-N", os.path.join(PROC, "netstat-6.18"))
    assert "IpOutTransmits only-now" in newer


def report_names(rawroot):
    names = set()
    for unit in os.listdir(rawroot):
        for cand in (unit, unit.rsplit("-", 1)[0]):
            if os.path.exists(os.path.join(TOP, "experiments", cand, cand + ".py")):
                names.add(cand)
                break
    return sorted(names)


# stderr files a lab writes on purpose, whose one line its report turns into a result: select()
# refusing an fd at or above FD_SETSIZE (poll-scaling's select_refused_at_k), and accept_latency
# refusing -c split on a one-CPU guest (accept-path's "split skipped").
EXPECTED_ERR = {
    ("poll-scaling", "select-k"): "FD_SETSIZE (1024): select() cannot watch it",
    ("accept-path", "latency-split.txt.err"): "pin to CPUs (-c split)",
}


def expected_err(path, text):
    unit, name = path.split(os.sep)[-2:]
    return any(unit == u and name.startswith(n) and text.count("\n") == 1 and words in text
               for (u, n), words in EXPECTED_ERR.items())


def check_reports_clean(rawroot, outdir):
    """Every report over rawroot: exit 0, nothing on stderr; every raw stderr file empty but the
    refusals a lab records on purpose (EXPECTED_ERR)."""
    for name in report_names(rawroot):
        r = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", name, name + ".py"),
                            rawroot, outdir], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "", f"{name}: {r.stderr}"
        with open(os.path.join(outdir, name + ".json")) as f:
            json.load(f)
    check_raw_stderr_clean(rawroot)


def check_raw_stderr_clean(rawroot):
    """Every raw stderr file under rawroot empty, but the refusals a lab records on purpose."""
    errs = glob.glob(os.path.join(rawroot, "*", "*.err"))
    assert os.path.isdir(rawroot)
    for err in errs:
        with open(err) as f:
            text = f.read()
        assert text == "" or expected_err(err, text), f"{err}: {text}"


# Reference outputs of kernels booted by experiments/guest/vm.sh (6.1, 6.12): their units carry a vm.txt.
GUEST_OUTPUTS = sorted({p.split(os.sep + "raw" + os.sep)[0] for p in
                        glob.glob(os.path.join(TOP, "outputs", "*", "raw", "*", "vm.txt"))})


@pytest.mark.skipif(not GUEST_OUTPUTS, reason="no outputs/ of a booted kernel in the tree")
@pytest.mark.parametrize("outdir", GUEST_OUTPUTS, ids=os.path.basename)
def test_committed_guest_outputs_report_cleanly(outdir, tmp_path):
    """Every raw stderr file of a guest's reference is empty but the refusals a lab records on
    purpose.  That each report runs cleanly on it (exit 0, nothing on stderr) is asserted by
    test_references_replay.py, which replays every committed reference once: running every
    report here again cost about 175 s of a loaded make test."""
    check_raw_stderr_clean(os.path.join(outdir, "raw"))


@pytest.mark.qemu
@pytest.mark.deep
def test_6_1_quick_run_without_warnings(bindir, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache")
    out = tmp_path / "out"
    env = dict(os.environ, TL_CONNECTS="200",
               TCPLAB_BUILD=os.path.relpath(os.path.dirname(bindir), TOP))
    r = subprocess.run([os.path.join(TOP, "run.sh"), "--kernel", "6.1", "--quick", "--out",
                        str(out)], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode == 4:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    noise = [ln for ln in r.stderr.splitlines()
             if any(w in ln for w in WARN_WORDS) and "[p01-" not in ln]   # units' own progress
    assert noise == [], noise
    check_reports_clean(str(out / "raw"), str(tmp_path / "again"))
    with open(out / "p01-machine.json") as f:
        machine = json.load(f)
    assert machine["kernel"].startswith("6.1.")
    assert machine["sysctls"]["net.ipv4.tcp_syn_linear_timeouts"] is None
    with open(out / "p01-connect-time.json") as f:
        c = json.load(f)["parts"]["refused"]["counters"]
    assert c["TcpAttemptFails"] == 200 and "IpOutTransmits" not in c
