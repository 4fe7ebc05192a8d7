"""Issue 30, class 5: the reports check the captures they read.  Each case is a committed clean
raw/ (outputs/6.1.0-57-cloud-amd64) copied and edited the way the issue did — lines reversed, a
line duplicated, a truncated=1 or bad= mark, an other= line — then replayed through its report,
which must either say what is wrong in its output or refuse in one line; and capture -r of a
pcap whose snaplen cannot hold a TCP header must say so.  No root, no kernel needed."""
import json
import os
import re
import shutil
import struct
import subprocess

import pytest

from conftest import TOP
import tcplab_pkt as pkt

REF = os.path.join(TOP, "outputs", "6.1.0-57-cloud-amd64")
PY = "/usr/bin/python3"
CAPTURE = os.path.join(TOP, "build", "bin", "capture")


def copy_unit(tmp_path, unit):
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw", unit), raw / unit)
    return raw, raw / unit


def run(report, raw, tmp_path):
    out = tmp_path / "got"
    out.mkdir(exist_ok=True)
    p = subprocess.run([PY, os.path.join(TOP, "experiments", report, report + ".py"), str(raw),
                        str(out)], capture_output=True, text=True, timeout=120)
    txt = (out / f"{report}.txt").read_text() if (out / f"{report}.txt").exists() else ""
    js = json.loads((out / f"{report}.json").read_text()) if (out / f"{report}.json").exists() \
        else None
    return p, txt, js


def edit(path, fn):
    """fn(packet lines) → new packet lines; the end line's counts follow the lines."""
    lines = path.read_text().splitlines()
    ready, pkts, end = lines[0], lines[1:-1], lines[-1]
    pkts = fn(pkts)
    heads = [x.split(" quoted: ")[0] for x in pkts]
    icmp = sum(1 for h in heads if " icmp=" in h or " icmp6=" in h)
    other = sum(1 for h in heads if " frag=" in h or " other=" in h)
    counts = {"packets": len(pkts), "tcp": len(pkts) - icmp - other, "icmp": icmp, "other": other}
    for k, v in counts.items():
        end = re.sub(rf" {k}=\d+", f" {k}={v}", end, count=1)
    path.write_text("\n".join([ready] + pkts + [end]) + "\n")


def dup_first(pattern):
    """Duplicate the first packet line matching pattern (same time: still in order)."""
    def fn(pkts):
        i = next(i for i, x in enumerate(pkts) if re.search(pattern, x))
        return pkts[:i + 1] + [pkts[i]] + pkts[i + 1:]
    return fn


def mark_first(pattern, mark):
    def fn(pkts):
        i = next(i for i, x in enumerate(pkts) if re.search(pattern, x))
        return pkts[:i] + [pkts[i] + " " + mark] + pkts[i + 1:]
    return fn


def one_line_refusal(p):
    assert p.returncode != 0
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


# ---- time order ----------------------------------------------------------------------------

def test_reversed_synack_lost_is_read_in_time_order(tmp_path):
    raw, unit = copy_unit(tmp_path, "p01-synack-lost")
    for f in unit.glob("*capture.txt"):
        edit(f, lambda pkts: pkts[::-1])
    p, txt, js = run("p01-synack-lost", raw, tmp_path)
    assert p.returncode == 0, p.stderr
    assert not re.search(r"-[0-9.]+ µs after it arrived", txt), txt
    assert "REORDERED:" in txt
    # apart from saying so, the same page as the clean capture's
    ref = open(os.path.join(REF, "p01-synack-lost.txt")).read()
    assert [x for x in txt.splitlines() if not x.startswith("REORDERED:")] == ref.splitlines()
    assert js["parts"]["lost"]["client_capture"]["reordered"]["first_line"] == 3


def test_reversed_small_writes_keeps_its_ack_analysis(tmp_path):
    raw, unit = copy_unit(tmp_path, "p03-small-writes")
    edit(unit / "baseline-capture.txt", lambda pkts: pkts[::-1])
    p, txt, js = run("p03-small-writes", raw, tmp_path)
    assert p.returncode == 0, p.stderr
    ref = open(os.path.join(REF, "p03-small-writes.txt")).read()
    want = [x for x in ref.splitlines() if "client segments with data; the wait for their ACK" in x]
    got = [x for x in txt.splitlines() if "client segments with data; the wait for their ACK" in x]
    assert got == want and len(want) >= 2
    assert "REORDERED:" in txt


def test_a_step_back_is_counted_and_sorted(tmp_path):
    raw, unit = copy_unit(tmp_path, "p01-synack-lost")
    f = unit / "lost-capture.txt"
    edit(f, lambda pkts: [pkts[1], pkts[0]] + pkts[2:])
    cap = pkt.read_capture(str(f))
    assert cap["reordered"]["lines"] == 1 and cap["reordered"]["first_line"] == 3
    times = [x["t_ns"] for x in cap["packets"]]
    assert times == sorted(times)
    assert any(x.startswith("REORDERED: 1 packet line") for x in pkt.capture_notes(cap, "x"))


def test_a_clean_capture_has_no_new_keys(tmp_path):
    raw, unit = copy_unit(tmp_path, "p01-synack-lost")
    c = pkt.capture_json(pkt.read_capture(str(unit / "lost-capture.txt")))
    assert not {"reordered", "truncated", "bad", "other_kinds"} & set(c)


# ---- counts beside the counters that count the same packets -------------------------------

DUPLICATES = [
    # report, capture file, the line duplicated, the counter named in the DISAGREE line
    ("p01-synack-lost", "lost-capture.txt", r"dir=c>s flags=S ", "client TcpExtTCPSynRetrans"),
    ("p03-small-writes", "baseline-capture.txt", r"dir=c>s flags=PA .* len=[1-9]",
     "client TcpRetransSegs"),
    ("p01-close-synsent-late", "capture.txt", r"dir=c>s flags=R", "client TcpOutRsts"),
    ("p01-rst-middlebox", "kernel-capture.txt", r"dir=s>c flags=RA", "server TcpOutRsts"),
    ("p01-icmp-unreachable", "port-unreachable-capture.txt", r"dir=c>s flags=S ",
     "client TcpExtTCPSynRetrans"),
    ("p01-wire-netem", "capture.txt", r"dir=c>s flags=S ", "client TcpExtTCPSynRetrans"),
]


@pytest.mark.parametrize("report,capture,line,counter", DUPLICATES,
                         ids=[d[0] for d in DUPLICATES])
def test_a_duplicated_packet_disagrees_with_its_counter(tmp_path, report, capture, line, counter):
    raw, unit = copy_unit(tmp_path, report)
    edit(unit / capture, dup_first(line))
    p, txt, js = run(report, raw, tmp_path)
    assert p.returncode == 0, p.stderr
    dis = [x for x in txt.splitlines() if x.startswith("DISAGREE:")]
    assert any(counter in x for x in dis), dis
    assert counter in json.dumps(js)


def test_clean_references_agree(tmp_path):
    """No DISAGREE line on any clean capture of this reference set (the replay test checks the
    others byte for byte)."""
    for report in [d[0] for d in DUPLICATES]:
        assert "DISAGREE" not in open(os.path.join(REF, report + ".txt")).read()


def test_retransmitted_counts_sequence_space_sent_again():
    seg = lambda seq, n, flags="A", d="c>s": {"kind": "tcp", "dir": d, "flags": flags,  # noqa
                                            "seq": seq, "len": n, "conn": 1}
    ps = [seg(0, 0, "S"), seg(0, 0, "S"), seg(1, 0), seg(1, 10, "PA"), seg(1, 10, "PA"),
          seg(11, 0, "FA"), seg(11, 0, "FA"), seg(12, 0, "R"), seg(0, 0, "SA", "s>c")]
    assert len(pkt.retransmitted(ps, "c>s")) == 3
    assert pkt.count_check("x", 3, "TcpRetransSegs", 3) is None
    assert pkt.count_check("x", 3, "TcpRetransSegs", 1) == "x: the capture has 3, TcpRetransSegs +1"
    assert pkt.count_check("x", 3, "TcpRetransSegs", None) is None


# ---- truncated=1, bad=, other= ---------------------------------------------------------------

@pytest.mark.parametrize("mark,word", [("truncated=1", "TRUNCATED:"),
                                       ("bad=tcp-option-length", "BAD:")])
def test_marks_are_said(tmp_path, mark, word):
    raw, unit = copy_unit(tmp_path, "p01-synack-lost")
    edit(unit / "lost-capture.txt", mark_first(r"flags=SA ", mark))
    p, txt, js = run("p01-synack-lost", raw, tmp_path)
    assert p.returncode == 0, p.stderr
    assert any(x.startswith(word) for x in txt.splitlines())
    c = js["parts"]["lost"]["client_capture"]
    assert c.get("truncated") == 1 if word == "TRUNCATED:" else c["bad"] == {
        "tcp-option-length": 1}


def test_a_truncated_syn_is_not_read_for_its_mss(tmp_path):
    raw, unit = copy_unit(tmp_path, "p01-wire-connect")
    # the snapshot cut the options after the MSS: no timestamp listed is not "no timestamps"
    edit(unit / "capture.txt", lambda pkts: [
        re.sub(r"opts=\S+", "opts=mss:1460", x) + " truncated=1" if " flags=S " in x else x
        for x in pkts])
    p, txt, js = run("p01-wire-connect", raw, tmp_path)
    one_line_refusal(p)
    assert "truncated" in p.stderr and "capture.txt" in p.stderr


def test_wscale_of_a_cut_syn_is_not_zero(tmp_path):
    seg = {"kind": "tcp", "dir": "c>s", "flags": "S", "opts": "mss:1460", "truncated": True}
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "p04", os.path.join(TOP, "experiments", "p04-full-buffers", "p04-full-buffers.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    with pytest.raises(Exception, match="window scale is not known"):
        m.wscale([seg], "c>s")
    whole = {k: v for k, v in seg.items() if k != "truncated"}
    assert m.wscale([whole], "c>s") == 0     # a whole list without wscale: none sent


@pytest.mark.parametrize("line", [
    "other=arp caplen=42 len=42",
    "other=ipv4 caplen=30 len=60 proto=6 truncated=1",
])
def test_an_other_line_is_counted_not_refused(tmp_path, line):
    raw, unit = copy_unit(tmp_path, "p01-synack-lost")

    def add(pkts):
        t_s, t_ns = re.search(r"^(t_s=\S+ t_ns=\S+)", pkts[0]).group(1).split()
        return pkts[:1] + [f"{t_s} {t_ns} {line}"] + pkts[1:]
    edit(unit / "lost-capture.txt", add)
    cap = pkt.read_capture(str(unit / "lost-capture.txt"))
    assert len(cap["others"]) == 1 and all(x["kind"] != "other" for x in cap["packets"])
    p, txt, js = run("p01-synack-lost", raw, tmp_path)
    assert p.returncode == 0, p.stderr
    assert "other= lines: 1 packet" in txt
    assert ("TRUNCATED:" in txt) == ("truncated=1" in line)


def test_an_end_line_counting_other_lines_wrong_is_refused(tmp_path):
    raw, unit = copy_unit(tmp_path, "p01-synack-lost")
    f = unit / "lost-capture.txt"
    edit(f, lambda pkts: pkts[:1] + [re.sub(r"conn=.*", "other=arp caplen=42 len=42", pkts[0])]
         + pkts[1:])
    f.write_text(re.sub(r" other=1 ", " other=0 ", f.read_text()))
    p, txt, js = run("p01-synack-lost", raw, tmp_path)
    one_line_refusal(p)


# ---- a pcap whose snaplen cannot hold a TCP header ------------------------------------------

@pytest.mark.skipif(not os.path.exists(CAPTURE), reason="capture not built (make)")
@pytest.mark.parametrize("snaplen,refused", [(10, True), (53, True), (54, False)])
def test_capture_refuses_a_snaplen_below_a_tcp_header(tmp_path, snaplen, refused):
    d = bytearray(open(os.path.join(TOP, "tests", "data", "pcap", "handshake.pcap"), "rb").read())
    d[16:20] = struct.pack("<I", snaplen)
    f = tmp_path / "short.pcap"
    f.write_bytes(bytes(d))
    p = subprocess.run([CAPTURE, "-r", str(f)], capture_output=True, text=True, timeout=30)
    if refused:
        one_line_refusal(p)
        assert f"snaplen {snaplen} is too short to hold a TCP header" in p.stderr
        assert str(f) in p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert "packets=0" not in p.stdout.splitlines()[-1]
