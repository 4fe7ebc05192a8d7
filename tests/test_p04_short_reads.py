"""p04-short-reads: one send() of 1 MiB read with recv(64 KiB), plain, MSG_WAITALL and
SO_RCVLOWAT, over loopback and the wire.  The kernel facts are asserted on the committed
reference (replay, no root) and on a live run (root): the expectations come from what the run
recorded (constants.txt, sysctls.txt, the links, the fixtures' TCP_INFO), never from absolute
speeds.  Also: the report on bad raw input, the fixtures on bad options, -h against the page,
and tcpdump as an independent reader of the captured .pcap files."""
import glob
import json
import math
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP, tiered
from test_badinput_reports import (FILE_MUTATIONS, VALUE_MUTATIONS, may_pass, mutate, snapshot,
                                   strict_json)

NAME = "p04-short-reads"
REPORT = os.path.join(TOP, "experiments", NAME, NAME + ".py")
PY = "/usr/bin/python3"
REF = os.path.join(TOP, "outputs", "6.18.44-fc-v1045")
PATHS, PARTS = ("lo", "wire"), ("plain", "waitall", "rcvlowat")
SANITIZER_WORDS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                   "Traceback")


def report(rawroot, outdir):
    r = subprocess.run([PY, REPORT, str(rawroot), str(outdir)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with open(os.path.join(outdir, NAME + ".json")) as f:
        return json.load(f)


def sysctl_ints(j, name):
    v = j["sysctls"][name]
    return v if isinstance(v, list) else [v]


def check_kernel_facts(j, txt):
    """The facts the page teaches, each from the run's own constants and sysctls."""
    c = j["constants"]
    rmem_max = sysctl_ints(j, "net.ipv4.tcp_rmem")[2]
    # tcp_set_rcvlowat(): min(val, tcp_rmem[2] >> 1) when SO_RCVBUF was not set by hand
    lowat = min(c["lowat"], rmem_max >> 1)
    ts = 12 if j["sysctls"]["net.ipv4.tcp_timestamps"] == 1 else 0
    shorts = 0
    for pth in PATHS:
        for part in PARTS:
            p = j["paths"][pth][part]
            rets, s = p["returns"], p["summary"]
            data = rets[:-1]
            # the stream: exactly BYTES, then one 0 (the FIN); never more than asked
            assert rets[-1] == 0 and 0 not in data, (pth, part, rets)
            assert sum(data) == c["bytes"] == p["send"]["bytes"], (pth, part)
            assert all(0 < x <= c["len"] for x in data), (pth, part)
            assert len(data) >= math.ceil(c["bytes"] / c["len"])
            assert p["recv"]["mismatch_at"] == -1, (pth, part)
            assert p["send"]["calls"] == 1          # one send() took all of it
            shorts += s["short_not_last"] if part == "plain" else 0
            # a short return stops where the receive queue ran out: the end of an arrived
            # segment (tcp_recvmsg_locked: copied >= target and no next skb); so does the last
            e = p["ends"]
            assert e["short"][0] == e["short"][1] == s["short_not_last"], (pth, part, e)
            assert e["last"] == [1, 1], (pth, part, e)
            if part == "waitall":
                # target = len (sock_rcvlowat with MSG_WAITALL): full returns but the last
                assert all(x == c["len"] for x in data[:-1]), rets
            if part == "rcvlowat":
                assert p["recv"]["before"]["rcvlowat"] == lowat
                assert all(x >= lowat for x in data[:-1]), rets
            # sock_diag (sockwatch -1 at the end) reads what the fixtures' getsockopt() read
            sd = p["sock_diag"]
            assert sd["send"]["state"] in ("FIN-WAIT-1", "FIN-WAIT-2")
            assert sd["recv"]["state"] == "CLOSE-WAIT"
            assert sd["send"]["snd_mss"] == p["send"]["after"]["snd_mss"]
            assert sd["recv"]["rcv_mss"] == p["recv"]["after"]["rcv_mss"]
            assert sd["recv"]["rcvbuf"] == p["recv"]["after"]["rcvbuf"]
            assert sd["send"]["info_len"] > 0 and sd["recv"]["info_len"] > 0
            # the MSS: the link's MTU (IP_MAX_MTU 65535 at most) - 40, less the timestamps
            mss = min(j["mtu"][pth], 65535) - 40 - ts
            snd, before = p["send"]["after"]["snd_mss"], p["send"]["before"]["snd_mss"]
            assert p["recv"]["after"]["advmss"] == mss
            # mss_cache is min(the MSS, half the largest window the peer advertised) and that
            # window only grows: the MSS itself once it passed 2 x MSS (the rule on a quiet
            # host; a loaded CI host once ended a loopback part at 47616, below 65483)
            assert before <= snd <= mss and snd == p["send"]["after"]["maxseg"], (pth, part)
            if snd < mss:
                assert pth == "lo" and f"{pth} {part}: snd_mss {snd} < advmss {mss}" in txt
            for cap in [p["capture"]] + ([p["server_capture"]] if pth == "wire" else []):
                assert cap["new_bytes"] == c["bytes"] and cap["dropped"] == 0
                assert cap["max"] <= j["gso_max_size"][pth]
            if pth == "lo":
                assert p["capture"]["iface"] == "lo" and p["capture"]["over_mss"] == 0
            else:
                assert p["capture"]["iface"] == "veth-c"
                assert p["server_capture"]["iface"] == "veth-s"
                assert p["capture"]["lengths"] == p["server_capture"]["lengths"]
                assert p["capture"]["over_mss"] > 0       # GSO/TSO skbs, as libpcap sees them
                assert p["capture"]["orig_units"] == p["counters"]["TcpExtTCPOrigDataSent"]
    # short reads happen: somewhere a plain recv() returned less than asked before the end
    assert shorts >= 1


def test_reference_shows_the_kernel_facts(tmp_path):
    j = report(os.path.join(REF, "raw"), tmp_path)
    check_kernel_facts(j, (tmp_path / f"{NAME}.txt").read_text())
    assert j["mtu"]["wire"] == 1500
    # the committed outputs are the report's output on the committed raw
    for ext in ("txt", "json"):
        with open(os.path.join(REF, f"{NAME}.{ext}")) as a, open(tmp_path / f"{NAME}.{ext}") as b:
            assert a.read() == b.read(), ext


def test_an_mss_still_capped_by_half_the_window_is_said(tmp_path):
    """A loopback sender that ended below the receiver's advmss (a loaded host: the receiver's
    window never passed 2 x 65483) gets a line naming the cap, with the window it implies."""
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw"), raw, symlinks=True)
    send = raw / NAME / "lo-waitall-send.txt"
    text = send.read_text()
    after = re.search(r"^after .*$", text, re.M).group(0)
    send.write_text(text.replace(after, after.replace("maxseg=65483 snd_mss=65483",
                                                      "maxseg=47616 snd_mss=47616")))
    j = report(raw, tmp_path / "out")
    assert j["paths"]["lo"]["waitall"]["send"]["after"]["snd_mss"] == 47616
    lines = [x for x in (tmp_path / "out" / f"{NAME}.txt").read_text().splitlines()
             if "still capped" in x]
    assert lines == ["  lo waitall: snd_mss 47616 < advmss 65483: still capped at half the "
                     "largest window the receiver advertised (max_window 95232 or 95233, never "
                     "2 x 65483 = 130966: tcp_bound_to_half_wnd())"]


def test_a_retransmitted_fin_is_counted_once(tmp_path):
    """A FIN alone sent again (a loss probe or an RTO when its ACK came late under load) is a
    retransmission, not new data: TcpExtTCPOrigDataSent counted it once, so must the capture.
    A CI run had the capture at 728 against the counter's 727."""
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw"), raw, symlinks=True)
    for side in ("capture", "server-capture"):
        cap = raw / NAME / f"wire-plain-{side}.txt"
        lines = cap.read_text().splitlines()
        fin = next(i for i, x in enumerate(lines) if " dir=c>s flags=FA " in x and " len=0 " in x)
        t_ns = int(re.search(r" t_ns=([0-9]+) ", lines[fin]).group(1))
        again = re.sub(r" t_ns=[0-9]+ ", f" t_ns={t_ns + 10_000_000} ", lines[fin])
        lines.insert(fin + 1, again)
        end = re.sub(r"(packets|tcp|received)=([0-9]+)",
                     lambda m: f"{m.group(1)}={int(m.group(2)) + 1}", lines[-1])
        cap.write_text("\n".join(lines[:-1] + [end]) + "\n")
    for f in ("wire-plain-counters-delta.txt",):
        d = raw / NAME / f
        d.write_text(d.read_text().replace("TcpRetransSegs +0", "TcpRetransSegs +1"))
    j = report(raw, tmp_path / "out")
    p = j["paths"]["wire"]["plain"]
    assert p["capture"]["orig_units"] == p["counters"]["TcpExtTCPOrigDataSent"]
    assert "DIFFER" not in (tmp_path / "out" / f"{NAME}.txt").read_text()


def test_committed_reference_is_there():
    assert os.path.getsize(os.path.join(REF, NAME + ".svg")) > 0
    raw = os.path.join(REF, "raw", NAME)
    for pth in PATHS:
        for part in PARTS:
            assert os.path.getsize(os.path.join(raw, f"{pth}-{part}-capture.pcap")) > 0


@pytest.mark.netns
def test_live_run(tmp_path, bindir):
    r = subprocess.run([os.path.join(TOP, "run.sh"), "--out", str(tmp_path), NAME],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp_path / f"{NAME}.json") as f:
        check_kernel_facts(json.load(f), (tmp_path / f"{NAME}.txt").read_text())


def tcpdump_data_segments(pcap, src_port_filter):
    r = subprocess.run(["tcpdump", "-nn", "-tt", "-r", pcap, src_port_filter],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lens = [int(m.group(1)) for m in re.finditer(r", length ([0-9]+)$", r.stdout, re.M)]
    return [x for x in lens if x > 0]


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump not installed")
def test_tcpdump_reads_the_same_segments(tmp_path):
    """An independent reader of the committed .pcap files: tcpdump's `length N` of every
    client-to-server data segment equals the lengths the report counted."""
    j = report(os.path.join(REF, "raw"), tmp_path)
    raw = os.path.join(REF, "raw", NAME)
    for pth in PATHS:
        for part in PARTS:
            p = j["paths"][pth][part]
            port = p["recv"]["local"].rsplit(":", 1)[1]
            lens = tcpdump_data_segments(os.path.join(raw, f"{pth}-{part}-capture.pcap"),
                                         f"tcp dst port {port}")
            counted = {}
            for x in lens:
                counted[str(x)] = counted.get(str(x), 0) + 1
            assert counted == p["capture"]["lengths"], (pth, part)


# ---- the report on bad raw input ---------------------------------------------------------------

BAD = [("lo-plain-recv.txt", "ret", ""), ("lo-plain-recv.txt", "go_ns", ""),
       ("wire-waitall-recv.txt", "mismatch_at", "neg"), ("wire-rcvlowat-recv.txt", "lowat", ""),
       ("lo-waitall-send.txt", "bytes", ""), ("wire-plain-send.txt", "snd_mss", ""),
       ("wire-plain-capture.txt", "len", ""), ("wire-plain-server-capture.txt", "seq", ""),
       ("lo-rcvlowat-capture.txt", "dropped", ""), ("constants.txt", "lowat", ""),
       ("sysctls.txt", "net.ipv4.tcp_rmem", "str"), ("server-sysctls.txt", None, ""),
       ("lo-link.txt", None, ""), ("wire.txt", None, ""),
       ("wire-plain-counters-delta.txt", "TcpExtTCPOrigDataSent", "neg"),
       ("wire-plain-server-counters-delta.txt", "TcpOutSegs", "neg"),
       ("lo-plain-counters-delta.txt", "TcpInSegs", "neg"), ("machine.txt", "kernel", "str"),
       ("collected-at.txt", None, "opt"), ("wire-plain-sockwatch-send.txt", "snd_mss", ""),
       ("lo-waitall-sockwatch-recv.txt", "state", ""),
       ("wire-rcvlowat-sockwatch-recv.txt", "rcvbuf", "")]
CASES = [(f, k, fl, m) for f, k, fl in BAD for m in FILE_MUTATIONS] + \
    [(f, k, fl, m) for f, k, fl in BAD if k is not None for m in ("nokey", *VALUE_MUTATIONS)]


# make test: the first case of each mutation; the other 480 or so in the full suite (tiered)
@pytest.mark.parametrize("case", tiered(CASES, lambda c: c[3],
                                        ["-".join(str(x) for x in c) for c in CASES]))
def test_report_on_bad_raw(case, tmp_path):
    name, key, flags, m = case
    raw, outdir = tmp_path / "raw", tmp_path / "out"
    shutil.copytree(os.path.join(REF, "raw", NAME), raw / NAME)
    outdir.mkdir()
    before = snapshot(outdir)
    mutate(str(raw / NAME / name), key, m)
    r = subprocess.run([PY, REPORT, str(raw), str(outdir)], capture_output=True, text=True,
                       timeout=20)
    if r.returncode == 0:
        assert may_pass(flags, m), f"exit 0 on {m} {name} {key}"
        assert r.stderr == ""
        strict_json(open(outdir / f"{NAME}.json").read())
        return
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert lines[0].startswith(NAME + ".py: ") and NAME in lines[0], lines[0]
    assert snapshot(outdir) == before


def test_the_stream_rules_are_checked_on_crafted_raw(tmp_path):
    """A receiver whose returns do not add up to what it says it read is refused."""
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw", NAME), raw / NAME)
    path = raw / NAME / "lo-plain-recv.txt"
    text = path.read_text()
    text = re.sub(r"^(recv n=1 ret=)([0-9]+)", lambda m: m.group(1) + str(int(m.group(2)) - 1),
                  text, count=1, flags=re.M)
    path.write_text(text)
    r = subprocess.run([PY, REPORT, str(raw), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1 and "add up to" in r.stderr, r.stderr


# ---- the fixtures ------------------------------------------------------------------------------

PORT = "21041"
FIXTURE_BAD = [
    ("stream_send", ["-p", PORT, "-n", "-1"], "-n"), ("stream_send", ["-p", PORT, "-n", "0"], "-n"),
    ("stream_send", ["-p", PORT, "-n", "67108865"], "-n"),
    ("stream_send", ["-p", PORT, "-n", "1M"], "-n"), ("stream_send", ["-p", PORT, "-q"], "-q"),
    ("stream_send", ["-n", "5"], "missing -p"), ("stream_send", ["-p", "0"], "-p"),
    ("stream_send", ["-p", PORT, "-a", "nowhere"], "-a"),
    ("stream_send", ["-p", PORT, "extra"], "extra"),
    ("stream_recv", ["-p", PORT, "-l", "-5"], "-l"), ("stream_recv", ["-p", PORT, "-l", "0"], "-l"),
    ("stream_recv", ["-p", PORT, "-l", "16777217"], "-l"),
    ("stream_recv", ["-p", PORT, "-L", "0"], "-L"), ("stream_recv", ["-p", PORT, "-L", "x"], "-L"),
    ("stream_recv", ["-p", PORT, "-w", "1"], "'1'"), ("stream_recv", ["-p", PORT, "-W"], "-W"),
    ("stream_recv", ["-l", "5"], "missing -p"), ("stream_recv", ["-p", "65536"], "-p"),
]


@pytest.mark.parametrize("prog,args,word", FIXTURE_BAD,
                         ids=[f"{p} {' '.join(a)}" for p, a, _ in FIXTURE_BAD])
def test_fixture_bad_input_is_one_line_exit_2(bindir, prog, args, word):
    r = subprocess.run([os.path.join(bindir, prog)] + args, capture_output=True, text=True,
                       timeout=5)
    what = f"{args}: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}"
    assert r.returncode == 2, what
    assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), what
    assert r.stderr.startswith(prog + ": ") and word in r.stderr, what
    assert not any(w in r.stderr for w in SANITIZER_WORDS), what


@pytest.mark.netns
def test_receiver_port_in_use(netns, bindir):
    from conftest import in_ns
    holder = subprocess.Popen(in_ns(netns, [os.path.join(bindir, "stream_recv"), "-p", PORT]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().startswith("ready "), holder.stderr.read()
        r = subprocess.run(in_ns(netns, [os.path.join(bindir, "stream_recv"), "-p", PORT]),
                           capture_output=True, text=True, timeout=5)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"port {PORT} in use" in \
            r.stderr, r.stderr
    finally:
        holder.terminate()
        holder.communicate(timeout=5)


def test_glob_sanity():
    """The unit is in the table, in the labs set, on the wire."""
    import tcplab
    u = [x for x in tcplab.read_units() if x["unit"] == NAME]
    assert len(u) == 1 and u[0]["set"] == "labs" and u[0]["netns"] == "wire"
    assert u[0]["quick"] == "run" and u[0]["expect_s"] <= 20
    assert glob.glob(os.path.join(TOP, "experiments", NAME, NAME + ".sh"))
