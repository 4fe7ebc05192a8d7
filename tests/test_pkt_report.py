"""experiments/report/tcplab_pkt.py and the packet part of the p01 reports, on committed text: the
capture's lines read exactly (and refused when cut, miscounted or malformed; dropped > 0 said
aloud), the ladder exact for a committed capture, the mscgen source drawn by mscgen, the
DISAGREE path, a report without mscgen, the diff of the new keys.  No root: the data is a
committed capture text (tests/data/reports/p01-strace/capture.txt, from a live p01-strace run) and a
hand-made raw directory (tests/data/reports/README.md)."""
import json
import os
import re
import shutil
import subprocess

import pytest

import tcplab as t
import tcplab_diff
import tcplab_pkt as pkt
from conftest import TOP

DATA = os.path.join(TOP, "tests", "data", "reports")
STRACE_CAP = os.path.join(DATA, "p01-strace", "capture.txt")
PY = "/usr/bin/python3"

READY = ('ready t_ns=1000 iface=lo linktype=EN10MB snaplen=262144 '
         'filter="tcp port 21013 or icmp" port=21013 clock_offset_ns=5\n')
SYN = ("t_s=0.000100 t_ns=1100 conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=65495 "
       "opts=mss:65495,sackok,ts,nop,wscale:7 tsval=7 tsecr=0 src=127.0.0.1:40000 "
       "dst=127.0.0.1:21013\n")
SYNACK = ("t_s=0.000200 t_ns=1200 conn=1 dir=s>c flags=SA seq=0 ack=1 len=0 win=65483 "
          "opts=mss:65495 tsval=8 tsecr=7 src=127.0.0.1:21013 dst=127.0.0.1:40000\n")
ICMP = ("t_s=0.000300 t_ns=1300 icmp=dest-unreachable code=host-unreachable type=3 code_n=1 "
        "from=192.0.2.2 quoted: conn=1 dir=c>s flags=S seq=0 src=192.0.2.1:40000 "
        "dst=192.0.2.2:21013\n")


def end(tcp=2, icmp=1, dropped=0):
    return (f"end t_ns=2000 packets={tcp + icmp} tcp={tcp} icmp={icmp} other=0 "
            f"received={2 * (tcp + icmp)} dropped={dropped} ifdropped=0\n")


def write(tmp_path, text, name="capture.txt"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_capture_lines_read_exactly(tmp_path):
    cap = pkt.read_capture(write(tmp_path, READY + SYN + SYNACK + ICMP + end()))
    assert cap["ready"]["filter"] == "tcp port 21013 or icmp" and cap["ready"]["iface"] == "lo"
    syn, synack, icmp = cap["packets"]
    assert syn == {"t_ns": 1100, "t_s": 0.0001, "kind": "tcp", "conn": 1, "dir": "c>s",
                   "flags": "S", "seq": 0, "src": "127.0.0.1:40000", "dst": "127.0.0.1:21013",
                   "ack": None, "len": 0, "win": 65495, "opts": "mss:65495,sackok,ts,nop,wscale:7"}
    assert (synack["flags"], synack["ack"], synack["dir"]) == ("SA", 1, "s>c")
    assert icmp["kind"] == "icmp" and cap["icmp"] == [icmp]
    assert (icmp["icmp"], icmp["code"], icmp["type"], icmp["code_n"], icmp["src"]) == \
        ("dest-unreachable", "host-unreachable", 3, 1, "192.0.2.2")
    assert icmp["quoted"] == {"conn": 1, "dir": "c>s", "flags": "S", "seq": 0,
                              "src": "192.0.2.1:40000", "dst": "192.0.2.2:21013"}
    assert pkt.capture_json(cap)["dropped"] == 0
    assert pkt.seg_label(icmp) == "ICMP dest-unreachable host-unreachable (quotes S seq=0)"
    assert pkt.ladder_rows([icmp], 1000)[0]["dir"] == "s>c"     # it answers the client's SYN


@pytest.mark.parametrize("text,message", [
    (READY + SYN, "no `end` line"),                               # capture killed
    (READY + SYN + end()[:20], "cut off"),                        # cut mid-line
    (SYN + end(1, 0), "no `ready` line first"),
    ("", "no `ready` line first"),
    (READY + SYN + end(2, 0), "the end line counts tcp=2 icmp=0, the file has 1 and 0"),
    (READY + SYN.replace("flags=S", "flags=Sx") + end(1, 0), "flags=Sx"),
    (READY + SYN.replace("ack=-", "ack=5") + end(1, 0), "ack=5 without the A flag"),
    (READY + SYN.replace("dir=c>s", "dir=up") + end(1, 0), "dir=up"),
    (READY + SYN.replace("seq=0", "seq=x7") + end(1, 0), "seq: 'x7' is not a number"),
    (READY + SYN.replace("t_ns=1100", "t_ns=900") + end(1, 0), "before the ready line"),
    (READY + "garbage\n" + end(0, 0), "line 2: not a packet line"),
    (READY + ICMP.split(" quoted:")[0] + "\n" + end(0, 1), "without `quoted:`"),
    (READY.replace('"tcp', 'tcp') + end(0, 0), "No closing quotation"),
    (READY + SYN + end(1, 0).replace("dropped=0", "dropped=NaN"), "dropped: 'NaN'"),
])
def test_bad_capture_is_refused_naming_the_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(t.RawError) as e:
        pkt.read_capture(path)
    assert str(e.value).startswith(path) and message in str(e.value), str(e.value)


def test_dropped_packets_are_said_visibly(tmp_path):
    cap = pkt.read_capture(write(tmp_path, READY + SYN + SYNACK + ICMP + end(dropped=3)))
    notes = pkt.capture_notes(cap, "raw/u/capture.txt")
    assert any(n.startswith("DROPPED: libpcap lost 3 packets (dropped=3 ifdropped=0)")
               for n in notes), notes
    clean = pkt.capture_notes(pkt.read_capture(write(tmp_path, READY + SYN + SYNACK + ICMP +
                                                     end())), "x")
    assert not any("DROPPED" in n for n in clean)
    assert any("received=6 counts both copies" in n for n in clean)   # 2 x 3 on lo


def strace_rows():
    cap = pkt.read_capture(STRACE_CAP)
    rows = []
    for local, name in (("127.0.0.1:55942", "block"), ("127.0.0.1:55944", "cc")):
        segs = pkt.conn_packets(cap, local)
        rows += [{"sep": name}] + pkt.ladder_rows(segs, segs[0]["t_ns"],
                                                  seg_notes={0: "first SYN"})
    return rows


def test_ladder_text_is_exact_for_a_committed_capture():
    got = pkt.ladder_text(strace_rows())
    with open(os.path.join(DATA, "capture-strace-ladder.txt")) as f:
        assert got == f.read().splitlines()
    assert max(len(line) for line in got) <= pkt.WIDTH
    assert "     0.013  |<--SA seq=0 ack=1 len=0-------------------|" in got


def test_ladder_notes_wrap_within_the_width():
    rows = [{"t_ms": 1.0, "dir": "c>s", "label": "S seq=0 len=0", "note": "word " * 40}]
    lines = pkt.ladder_text(rows)
    assert len(lines) > 2 and max(len(x) for x in lines) <= pkt.WIDTH
    assert " ".join(x.split("|")[-1].strip() for x in lines[1:]) == ("word " * 40).strip()


@pytest.mark.skipif(shutil.which("mscgen") is None, reason="mscgen not installed (make deps)")
def test_mscgen_draws_every_arrow(tmp_path):
    rows = strace_rows()
    msc = pkt.ladder_msc(rows, "client 127.0.0.1", "server 127.0.0.1:21010")
    made = {}
    name, line = pkt.ladder_svg(str(tmp_path), "l.svg", rows, "client 127.0.0.1",
                                "server 127.0.0.1:21010", made)
    assert (name, line) == ("l.svg", "ladder svg: l.svg")
    (final, tmp), = made.items()
    svg = open(tmp).read()
    for r in rows:
        if "sep" in r:
            assert r["sep"] in svg
        else:
            assert f"{r['t_ms']:.3f} ms  {r['label']}" in svg, r
    assert msc.count("=>") == sum("sep" not in r for r in rows)
    pkt.drop_made(made)
    assert os.listdir(tmp_path) == []


def test_a_tool_that_fails_leaves_nothing(tmp_path):
    tmp, why = pkt.render_svg("msc { this is not mscgen }", str(tmp_path / "x.svg"))
    assert tmp is None and why.startswith("mscgen failed: ")
    tmp, why = t.tool_svg(str(tmp_path / "y.svg"), lambda out: (["no-such-tool-ladder"], ""))
    assert (tmp, why) == (None, "no-such-tool-ladder not found")
    assert os.listdir(tmp_path) == []


def report(name, raw, out, env=None):
    return subprocess.run([PY, os.path.join(TOP, "experiments", name, name + ".py"), str(raw),
                           str(out)], capture_output=True, text=True, timeout=30, env=env)


@pytest.fixture
def raw(tmp_path):
    r = tmp_path / "raw"
    shutil.copytree(os.path.join(DATA, "p01-synretry"), r / "p01-synretry")
    return r


def test_synretry_report_puts_the_packets_beside_the_probes(raw, tmp_path):
    r = report("p01-synretry", raw, tmp_path / "out")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    txt = (tmp_path / "out" / "p01-synretry.txt").read_text()
    j = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())
    p = j["packets"]
    assert p["syn_count"] == 6 == p["sockwatch_syns"] == p["counter_syns"]
    assert p["disagree"] == [] and "DISAGREE" not in txt
    assert [s["offset_ms"] for s in p["syns"]] == [0.719, 0.403, 0.611, 0.388, 1.503, 0.297]
    assert p["offset_ms"] == {"n": 5, "p50": 0.403, "max": 1.503}
    assert "    4     4087.287  retrans=4     4088.790     +1.503" in txt
    assert ("  SYNs: capture 6, sockwatch retransmissions + 1 = 6, TcpOutSegs + TcpRetransSegs "
            "= 6: they agree") in txt
    assert "on lo libpcap sees each packet once" in txt
    with open(os.path.join(DATA, "p01-synretry-ladder.txt")) as f:
        assert f.read() in txt
    # the lines the report had before the capture are still there
    for line in ("== TCP_SYNCNT 2: getsockopt(TCP_SYNCNT) = 2",
                 "SYN retransmissions: 5 observed, 5 expected", "  TcpRetransSegs           +5"):
        assert line in txt
    if shutil.which("mscgen"):
        assert p["ladder_svg"] == "p01-synretry-ladder.svg"
        assert "S seq=0 len=0" in (tmp_path / "out" / "p01-synretry-ladder.svg").read_text()
    if shutil.which("gnuplot"):
        assert j["syn_plot"] == "p01-synretry-syns.svg"
        assert "observed (capture)" in (tmp_path / "out" / "p01-synretry-syns.svg").read_text()
    assert not [f for f in os.listdir(tmp_path / "out") if ".tmp-" in f]


def set_counter(path, name, value):
    text = path.read_text()
    path.write_text(re.sub(rf"^{name} \S+$", f"{name} {value}", text, flags=re.M))


def test_disagreement_is_said_never_hidden(raw, tmp_path):
    """A hand-made run whose capture shows 4 SYNs where the counters say 3 (and sockwatch 6)."""
    d = raw / "p01-synretry"
    lines = (d / "capture.txt").read_text().splitlines()
    (d / "capture.txt").write_text("\n".join(lines[:5] + [
        lines[-1].replace("packets=6 tcp=6", "packets=4 tcp=4")]) + "\n")
    set_counter(d / "counters-delta.txt", "TcpRetransSegs", "+2")
    r = report("p01-synretry", raw, tmp_path / "out")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    txt = (tmp_path / "out" / "p01-synretry.txt").read_text()
    j = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())
    want = ("SYN counts differ: the capture has 4, sockwatch's retransmissions + 1 = 6, "
            "TcpOutSegs + TcpRetransSegs = 3")
    assert j["packets"]["disagree"] == [want]
    assert f"DISAGREE: {want}" in txt.splitlines()
    assert "TcpOutSegs" not in txt.split("ladder (")[1].split("\n\n")[0]   # no attribution then


def test_a_missed_transition_is_a_disagreement(raw, tmp_path):
    d = raw / "p01-synretry"
    sw = (d / "sockwatch.txt").read_text().splitlines()
    (d / "sockwatch.txt").write_text("\n".join(x for x in sw if " retrans=3 " not in x or
                                               "event=change" not in x) + "\n")
    r = report("p01-synretry", raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    dis = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())["packets"]["disagree"]
    assert any(x.startswith("SYN 3 (at 3060.378 ms in the capture) has no sockwatch event")
               for x in dis), dis


def test_dropped_capture_is_visible_in_the_report(raw, tmp_path):
    cap = raw / "p01-synretry" / "capture.txt"
    cap.write_text(cap.read_text().replace(" dropped=0", " dropped=2"))
    r = report("p01-synretry", raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "\nDROPPED: libpcap lost 2 packets" in (tmp_path / "out" / "p01-synretry.txt").read_text()
    j = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())
    assert j["packets"]["capture"]["dropped"] == 2


def test_no_mscgen_still_writes_the_report(raw, tmp_path):
    env = dict(os.environ, PATH="/nonexistent")
    r = report("p01-synretry", raw, tmp_path / "out", env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    txt = (tmp_path / "out" / "p01-synretry.txt").read_text()
    # the ladder needs no tool (tcplab_ladder draws it in-process); the SYN plot needs gnuplot
    assert "ladder svg: p01-synretry-ladder.svg" in txt
    assert "no SYN schedule plot: gnuplot not found" in txt
    assert sorted(os.listdir(tmp_path / "out")) == ["p01-synretry-ladder.svg", "p01-synretry.json",
                                                    "p01-synretry.txt"]
    j = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())
    assert j["packets"]["ladder_svg"] == "p01-synretry-ladder.svg" and j["syn_plot"] is None


def test_bad_capture_is_one_line_and_nothing_written(raw, tmp_path):
    cap = raw / "p01-synretry" / "capture.txt"
    cap.write_text("\n".join(cap.read_text().splitlines()[:-1]) + "\n")    # no end line
    out = tmp_path / "out"
    r = report("p01-synretry", raw, out)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "p01-synretry/capture.txt: no `end` line" in r.stderr
    assert not out.exists() or os.listdir(out) == []


def test_raw_without_a_capture_says_so(raw, tmp_path):
    os.unlink(raw / "p01-synretry" / "capture.txt")
    r = report("p01-synretry", raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "packets: not captured (no raw/p01-synretry/capture.txt" in \
        (tmp_path / "out" / "p01-synretry.txt").read_text()
    j = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())
    assert j["packets"] is None and j["syn_plot"] is None
    assert sorted(os.listdir(tmp_path / "out")) == ["p01-synretry.json", "p01-synretry.txt"]


def test_diff_compares_the_capture(raw, tmp_path):
    r = report("p01-synretry", raw, tmp_path / "a")
    assert r.returncode == 0, r.stderr
    a = json.loads((tmp_path / "a" / "p01-synretry.json").read_text())
    s = tcplab_diff.Sides()
    assert tcplab_diff.diff_packets(a, a, s) == []
    b = json.loads(json.dumps(a))
    for row in b["packets"]["syns"]:
        row["t_ms"] += 20.0                  # 20 ms later each: within the tolerance
    assert tcplab_diff.diff_packets(a, b, s) == []
    b["packets"]["syn_count"] = 7
    b["packets"]["syns"].append({"n": 6, "t_ms": 7100.0})
    b["packets"]["disagree"] = ["SYN counts differ: ..."]
    b["packets"]["capture"]["dropped"] = 1
    assert tcplab_diff.diff_packets(a, b, s) == [
        "SYNs in the capture: 6 in A, 7 in B",
        "SYNs captured at: 0.00, 1.01, 2.04, 3.06, 4.09, 5.11 s in A; "
        "0.02, 1.03, 2.06, 3.08, 4.11, 5.13, 7.10 s in B",
        "DISAGREE lines (capture against sockwatch, counters): 0 in A, 1 in B",
        "packets libpcap dropped: 0 in A, 1 in B"]
    old = dict(a, packets=None)             # collected before the capture probe
    assert tcplab_diff.diff_packets(old, a, s) == []
    tcplab_diff.validate("p01-synretry.json", b)
    bad = json.loads(json.dumps(a))
    bad["packets"]["syn_count"] = -1
    with pytest.raises(tcplab_diff.Trouble, match=r"packets\.syn_count"):
        tcplab_diff.validate("p01-synretry.json", bad)


def test_an_event_just_before_its_packet_is_no_disagreement(raw, tmp_path):
    """tcp_retransmit_timer() counts the retransmission (tcp_update_rto_stats) just before it
    sends it: sockwatch may see retrans=k microseconds before the capture's SYN (seen live:
    -0.002 ms).  The offset is printed with its sign; the counts still agree."""
    cap = raw / "p01-synretry" / "capture.txt"
    cap.write_text(cap.read_text().replace("t_ns=2151308393803", "t_ns=2151308692908"))
    r = report("p01-synretry", raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    p = json.loads((tmp_path / "out" / "p01-synretry.json").read_text())["packets"]
    assert p["syns"][5]["offset_ms"] == -0.002 and p["disagree"] == []
    assert "    5     5108.765  retrans=5     5108.763     -0.002" in \
        (tmp_path / "out" / "p01-synretry.txt").read_text()


def copy_units(tmp_path, *units):
    r = tmp_path / "raw"
    for u in units:
        shutil.copytree(os.path.join(DATA, u), r / u)
    return r


def test_timeout_report_replays_a_live_capture(tmp_path):
    raw = copy_units(tmp_path, "p01-timeout")
    r = report("p01-timeout", raw, tmp_path / "out")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    j = json.loads((tmp_path / "out" / "p01-timeout.json").read_text())
    cc, keep = j["cc"]["packets"], j["keep"]["packets"]
    assert (cc["syn_count"], cc["syns_after_timeout"], cc["segments_after_close"]) == (2, 0, 0)
    assert (keep["syn_count"], keep["syns_after_timeout"], keep["segments_after_close"]) == (4, 2, 0)
    assert keep["syns_after_timeout_ms"] == [2051.034, 3075.053]
    assert keep["syns_after_timeout"] == j["keep_retransmits_after_timeout"]
    assert cc["disagree"] == keep["disagree"] == [] and j["capture"]["dropped"] == 0
    txt = (tmp_path / "out" / "p01-timeout.txt").read_text()
    keep_part = txt.split("-- keep: settimeout-style --")[1]
    after_timeout = keep_part.split("client: poll() returned 0 (timeout)")[1]
    assert after_timeout.split("client: close() returned")[0].count("|--S seq=0 len=0--") == 2
    assert "  in the capture: 2 SYNs after poll() timed out (at 2051.034, 3075.053 ms), " \
        "0 segments after close()" in txt
    if shutil.which("mscgen"):
        assert j["capture"]["ladder_svg"] == "p01-timeout-ladder.svg"
        assert "client: close() returned" in (tmp_path / "out" / "p01-timeout-ladder.svg").read_text()


def test_strace_report_replays_a_live_capture(tmp_path):
    raw = copy_units(tmp_path, "p01-strace")
    r = report("p01-strace", raw, tmp_path / "out")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    j = json.loads((tmp_path / "out" / "p01-strace.json").read_text())
    assert j["parts"]["block"]["packets"]["flags"] == ["S", "SA", "A", "FA", "A", "RA"]
    assert j["parts"]["cc"]["packets"]["flags"] == ["S", "SA", "A", "FA", "RA"]
    assert j["parts"]["refused"]["packets"] is None
    txt = (tmp_path / "out" / "p01-strace.txt").read_text()
    assert "     0.139  |<--SA seq=0 ack=1 len=0-------------------|" in txt
    assert "     0.952  |                                          |  client: connect() " \
        "returned ok" in txt


# capture.txt corrupted one way at a time, as tests/test_badinput_reports.py does for the other
# raw files (its mutations and rules): refused with one line naming the file, nothing written,
# or — only where that is valid — exit 0 with strict JSON.  A missing capture.txt is a raw
# directory from before the capture probe: reported as "not captured".
import test_badinput_reports as bad  # noqa: E402

CAPTURE_CASES = [(rep, key, flags, m)
                 for rep, keys in (("p01-synretry", ("t_ns", "seq", "len", "dropped", "tcp")),
                                   ("p01-timeout", ("t_ns", "flags", "conn")),
                                   ("p01-strace", ("ack", "received")))
                 for key, flags in ((None, "opt"),) + tuple((k, "") for k in keys)
                 for m in (bad.FILE_MUTATIONS if key is None else
                           ("nokey",) + tuple(bad.VALUE_MUTATIONS))]


@pytest.mark.parametrize("rep,key,flags,m", CAPTURE_CASES,
                         ids=[f"{c[0]}-{c[1] or 'file'}-{c[3]}" for c in CAPTURE_CASES])
def test_bad_capture_in_a_report(tmp_path, rep, key, flags, m):
    raw = copy_units(tmp_path, rep)
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{rep}.txt").write_text("old\n")
    before = bad.snapshot(out)
    bad.mutate(str(raw / rep / "capture.txt"), key, m)
    r = report(rep, raw, out)
    if r.returncode == 0:
        assert bad.may_pass(flags, m), f"exit 0 on {m} {key}: {r.stderr!r}"
        assert r.stderr == ""
        bad.strict_json((out / f"{rep}.json").read_text())
        return
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "internal error" not in r.stderr and f"{rep}/capture.txt" in r.stderr, r.stderr
    assert bad.snapshot(out) == before


def test_diff_of_captured_syns_compares_their_waits_not_the_first_ones_start(raw, tmp_path):
    """The first SYN leaves when the program gets there (50 ms later under load, as in a CI run
    that diffed 0.05, 1.07 against 0.00, 1.03): no difference.  A wait between SYNs that is
    outside the tolerance is one."""
    r = report("p01-synretry", raw, tmp_path / "a")
    assert r.returncode == 0, r.stderr
    a = json.loads((tmp_path / "a" / "p01-synretry.json").read_text())
    s = tcplab_diff.Sides()
    late = json.loads(json.dumps(a))
    for row in late["packets"]["syns"]:
        row["t_ms"] += 120.0
    assert tcplab_diff.diff_packets(a, late, s) == []
    slow = json.loads(json.dumps(a))
    slow["packets"]["syns"][-1]["t_ms"] += 400.0     # the last wait 400 ms longer
    out = tcplab_diff.diff_packets(a, slow, s)
    assert len(out) == 1 and out[0].startswith("SYNs captured at: "), out
