"""p03-small-writes: the Nagle stall (a request in two small writes waits one delayed-ACK timer
for the ACK of its first segment) is there in the baseline and gone with TCP_NODELAY, TCP_QUICKACK
and one write; the counters move as the kernel says they do.  Tolerances come from the constants
the run recorded (HZ → TCP_DELACK_MIN, one jiffy; tcp_pingpong_thresh), never from speeds.

The facts are checked on every committed reference (outputs/*/raw/p03-small-writes, the report
run again without root) and on a live run (root).  Also: the report's own decoding on crafted
input, bad raw input, the fixtures' usage against the page's synopses, and the fixtures'
protocol on a real connection."""
import glob
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import TOP, in_ns

import importlib.util

PY = "/usr/bin/python3"
REPORT = os.path.join(TOP, "experiments", "p03-small-writes", "p03-small-writes.py")
RUN = os.path.join(TOP, "run.sh")
UNIT = "p03-small-writes"
COMMITTED = sorted(glob.glob(os.path.join(TOP, "outputs", "*", "raw", UNIT)))
# The facts hold the delayed-ACK timer to a window of a few jiffies: a host's timing.  In the TCG
# guests' references (raw/<unit>/vm.txt) the emulated CPU adds to it (6.12's baseline p50 55.2 ms
# against the 40 ms timer), so only the hosts' references are held to the facts; every
# reference still replays byte for byte (tests/test_references_replay.py).
HOSTS = [d for d in COMMITTED if not os.path.exists(os.path.join(d, "vm.txt"))]
ONE_WRITE = ("writev", "more", "cork")


def load_report_module():
    spec = importlib.util.spec_from_file_location("p03_report", REPORT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rep = load_report_module()


def report(rawroot, outdir):
    r = subprocess.run([PY, REPORT, str(rawroot), str(outdir)], capture_output=True, text=True,
                       timeout=120)
    return r


def build_json(rawdir, tmp_path):
    """The report run on a copy of one raw directory → its JSON."""
    root = tmp_path / "raw"
    shutil.copytree(rawdir, root / UNIT)
    out = tmp_path / "out"
    out.mkdir()
    r = report(root, out)
    assert r.returncode == 0, r.stderr
    with open(out / f"{UNIT}.json") as f:
        return json.load(f)


# ---- the kernel's facts, for a committed reference and for a live run ---------------------------

def dsack_after(segs, rtx):
    """Whether the server's first segment after the client's segment rtx acknowledges all of it
    and carries a SACK block: in a connection where nothing arrives out of order, that block is
    a D-SACK (RFC 2883), the server saying it had these bytes already (tcp_data_queue() →
    tcp_dsack_set() for a segment wholly below rcv_nxt)."""
    i = segs.index(rtx)
    nxt = next((x for x in segs[i + 1:] if x["dir"] == "s>c"), None)
    sack = [o for o in (nxt or {}).get("opts", "").split(",") if o.startswith("sack:")]
    return nxt is not None and nxt["ack"] >= rtx["seq"] + rtx["len"] and bool(sack)


def backlog_drops():
    """Packets the kernel dropped so far because a CPU's input backlog was full (column 2 of
    /proc/net/softnet_stat, one hex row per CPU, summed).  A veth pair and loopback hand every
    packet to that backlog (netif_rx → enqueue_to_backlog, net/core/dev.c), shared by all
    namespaces, and it holds net.core.netdev_max_backlog (1000) packets: another test's burst
    can fill it and drop a segment of this one.  This machine's counter read 1822 after 17 h of
    test runs."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(row.split()[1], 16) for row in f if row.strip())


def check_retransmissions(r, rawdir, slack, drops=0):
    """A veth wire loses nothing, so the client sends nothing again, except when the machine is
    so loaded that a timer fires before the ACK is back (a loss probe waits only 2 srtt + 2
    jiffies when more than one segment is out; CI on d08433d saw 2 in one part), or that a full
    input backlog drops a segment (drops: how many the machine's backlog dropped during the run).
    Then each segment sent again is in the capture, there are few of them, and each is spurious
    (the server answers with a D-SACK: it had the bytes) or one of the backlog's drops."""
    n = r["counters_client"]["TcpRetransSegs"]
    if n == 0:
        return
    assert "disagree" not in r, r["disagree"]
    assert n <= slack, (r["part"], n)
    assert rawdir is not None, f"{r['part']}: TcpRetransSegs {n} and no capture to explain it"
    cap = rep.pkt.read_complete_capture(os.path.join(rawdir, f"{r['part']}-capture.txt"))
    segs = [x for x in rep.pkt.conn_packets(cap, r["local"]) if x["kind"] == "tcp"]
    again = rep.pkt.retransmitted(segs, "c>s")
    assert len(again) == n
    lost = [x for x in again if not dsack_after(segs, x)]
    assert all(x["len"] > 0 for x in again), (r["part"], again)
    assert len(lost) <= drops, (r["part"], f"{len(lost)} sent again without a D-SACK, "
                                f"{drops} dropped by a full backlog", lost)


def check_facts(j, rawdir=None, drops=0):
    c = j["constants"]
    timer, jiffy = c["tcp_delack_min_ms"], c["jiffy_ms"]
    p = j["parts"]
    base, nod = p["baseline"], p["nodelay"]
    # the stall: the median request is one delayed-ACK timer, which the timer wheel rounds up by
    # one jiffy (calc_index); one more jiffy of slack for a late timer softirq
    assert timer - jiffy <= base["p50"] <= timer + 3 * jiffy, (base["p50"], c)
    # every firing of the server's delayed-ACK timer is an ACK in the capture that came a timer
    # after its segment: the server's DelayedACKs against those waits. Under load a few more
    # waits: a server run late reads the body and its read sends the ACK (tcp_cleanup_rbuf), or
    # the timer fires while the reader holds the socket and that read's ACK clears the deferred
    # timer (DelayedACKLocked, not DelayedACKs): CI saw 100 waits for 99 firings
    stalls = base["counters_server"]["TcpExtDelayedACKs"]
    slack = base["requests"] // 20
    assert stalls <= base["ack_waits_over_timer"] <= stalls + slack, \
        (stalls, base["ack_waits_over_timer"])
    # the capture's gap between the header and its ACK: never early (the wheel rounds up), one
    # timer plus the rounding (a jiffy) and the trip, a jiffy of slack for a late softirq
    tw = base["timer_wait_ms"]
    assert tw["min"] >= timer - jiffy and timer <= tw["p50"] <= timer + 2 * jiffy, tw
    # a request slowed by anything else (the machine's load) would count too: a few allowed
    assert stalls <= base["requests_over_timer"] <= stalls + base["requests"] // 20, \
        (stalls, base["requests_over_timer"])
    assert base["counters_client"]["TcpExtDelayedACKs"] == 0     # its ACKs ride on requests
    # how many requests run before the first one the server's delayed-ACK timer held (read from
    # the capture, not the clock: a CI run under load had its first request slow for other
    # reasons): the pingpong threshold where it is a sysctl (the first reply within ato of the
    # request counts one interactive exchange)
    thresh = j["sysctls"].get("net.ipv4.tcp_pingpong_thresh")
    # (a server descheduled for a whole timer under load fires one more: a few allowed above;
    # and one whose reply leaves later than ato after the request does not count that exchange
    # (tcp_event_data_sent), so it stays out of pingpong mode and ACKs the next request's first
    # half as it reads it (tcp_cleanup_rbuf): one stall fewer, a few allowed below; a CI run
    # under load had 98 of 99)
    slack = base["requests"] // 20
    if thresh is not None:
        assert base["fast_before_timer"] == thresh, base["fast_before_timer"]
        want = (base["requests"] - 1) // thresh
        assert want - slack <= stalls <= want + slack, (stalls, want)
        pp = p["pingpong3"]
        # the delayed-ACK timer leaves pingpong mode (tcp_delack_timer_handler): 3 more
        # exchanges to re-enter it, so one request in 3 stalls
        assert pp["fast_before_timer"] == 3, pp["fast_before_timer"]
        want = (pp["requests"] - 1) // 3
        assert want <= pp["counters_server"]["TcpExtDelayedACKs"] <= want + slack
    else:
        assert "pingpong3" not in p
        assert stalls >= base["requests"] // 2
    # TCP_NODELAY: the body leaves at once, no timer; far below it
    assert nod["p50"] < timer / 4, nod["p50"]
    assert nod["requests_over_timer"] <= stalls // 10
    assert nod["counters_server"]["TcpExtDelayedACKs"] <= stalls // 10
    # TCP_QUICKACK, set again after every recv(): the ACK goes out at once, one more pure ACK
    # per request than with TCP_NODELAY
    qa = p["quickack"]
    assert qa["quickack"] == 1 and qa["server"]["quickacks"] == qa["server"]["recvs"] > 0
    assert qa["p50"] < timer / 4
    assert qa["counters_server"]["TcpExtDelayedACKs"] <= stalls // 10
    assert (qa["counters_server"]["TcpOutSegs"] - nod["counters_server"]["TcpOutSegs"]
            >= qa["requests"] * 9 // 10)
    # one write: one segment per request, no stall
    for name in ONE_WRITE:
        r = p[name]
        assert r["client_data_segments"] == r["requests"], name
        assert r["p50"] < timer / 4, (name, r["p50"])
        assert r["requests_over_timer"] <= stalls // 10, name
    # bulk: full segments are acknowledged without the timer; a stream of many messages takes
    # far less than one timer per message
    b = p["bulk"]
    assert b["counters_server"]["TcpExtDelayedACKs"] <= 1
    assert b["elapsed_s"] * 1e3 < b["messages"] * timer / 100
    assert b["client_data_segments"] < b["messages"] / 4        # Nagle coalesced the writes
    # tcpi_ato, where sockwatch prints it: the server's is TCP_ATO_MIN after the stalls
    ato = base["server_socket"]["ato_us"]
    if ato is not None:
        assert ato == round(timer * 1000), ato
    for r in p.values():
        assert r["timewait"] == "TIME-WAIT"
        check_retransmissions(r, rawdir, slack, drops)


@pytest.mark.parametrize("rawdir", HOSTS, ids=[d.split(os.sep)[-3] for d in HOSTS])
def test_committed_reference_shows_the_kernel_facts(rawdir, tmp_path):
    check_facts(build_json(rawdir, tmp_path), rawdir)


def test_a_reference_is_committed_for_some_kernel():
    assert HOSTS, "no outputs/*/raw/p03-small-writes of a host"


@pytest.fixture(scope="module")
def live(tmp_path_factory, bindir):
    d = tmp_path_factory.mktemp("p03")
    before = backlog_drops()
    r = subprocess.run([RUN, "--out", str(d), UNIT], capture_output=True, text=True, timeout=200)
    drops = backlog_drops() - before
    assert r.returncode == 0, r.stderr[-3000:]
    with open(d / f"{UNIT}.json") as f:
        return d, json.load(f), drops


@pytest.mark.netns
@pytest.mark.timing     # ASan's slowdown moved a delayed ACK (server TcpExtDelayedACKs 2 in CI's
def test_live_run_shows_the_kernel_facts(live):     # sanitize pass); make test runs it
    check_facts(live[1], live[0] / "raw" / UNIT, live[2])


@pytest.mark.netns
def test_live_capture_agrees_with_tcpdump(live):
    """The cross-check: tcpdump's own reading of the baseline .pcap finds the same server ACKs
    that came a delayed-ACK timer after the client's segment."""
    if shutil.which("tcpdump") is None:
        pytest.skip("no tcpdump")
    d, j, _ = live
    pcap = os.path.join(d, "raw", UNIT, "baseline-capture.pcap")
    r = subprocess.run(["tcpdump", "-nn", "-tt", "-r", pcap, "--time-stamp-precision=nano"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    last_data, waits = None, []
    for line in r.stdout.splitlines():
        t = float(line.split()[0])
        if "192.0.2.1." in line.split(">")[0] and "length 0" not in line:
            last_data = t
        elif "192.0.2.2.21030 >" in line and "length 0" in line and last_data is not None:
            waits.append(t - last_data)
            last_data = None
    timer_s = (j["constants"]["tcp_delack_min_ms"] - j["constants"]["jiffy_ms"]) / 1e3
    assert sum(1 for w in waits if w >= timer_s) == j["parts"]["baseline"]["ack_waits_over_timer"]


def capture_with_a_retransmission(rawdir, answer):
    """The host reference's bulk capture with its 4th line (the first request's header) sent
    again 1 ms later, answered by the server with `answer`'s options → (raw dir, part JSON)."""
    src = os.path.join(HOSTS[0], "bulk-capture.txt")
    with open(src) as f:
        lines = f.read().splitlines()
    data = lines[4]
    kv = dict(x.split("=", 1) for x in data.split() if "=" in x)
    t_ns = int(kv["t_ns"]) + 1_000_000
    again = re.sub(r"t_ns=\d+", f"t_ns={t_ns}", data)
    ack = (f"t_s=0 t_ns={t_ns + 1000} conn=1 dir=s>c flags=A seq=1 ack=9 len=0 win=63 "
           f"opts={answer} tsval=1 tsecr=1 src={kv['dst']} dst={kv['src']}")
    out = [*lines[:5], again, ack, *lines[5:]]
    # the packets after the ones added come later in time
    out = out[:7] + [re.sub(r"t_ns=(\d+)", lambda m: f"t_ns={max(int(m[1]), t_ns + 2000)}", x)
                     if x.startswith("t_s=") else x for x in out[7:]]
    out[-1] = re.sub(r"(packets|tcp|received)=(\d+)", lambda m: f"{m[1]}={int(m[2]) + 2}", out[-1])
    with open(os.path.join(rawdir, "bulk-capture.txt"), "w") as f:
        f.write("\n".join(out) + "\n")
    return {"part": "bulk", "local": kv["src"], "counters_client": {"TcpRetransSegs": 1}}


@pytest.mark.skipif(not HOSTS, reason="no host reference")
def test_a_retransmission_passes_only_as_a_spurious_one(tmp_path):
    """The check of the live run's retransmissions can fail: a segment sent again that the
    server answers with a D-SACK passes; one answered with a plain ACK (a real loss) does not,
    nor more than the slack allows."""
    r = capture_with_a_retransmission(tmp_path, "nop,nop,ts,nop,nop,sack:1")
    check_retransmissions(r, tmp_path, 5)
    with pytest.raises(AssertionError):
        check_retransmissions(r, tmp_path, 0)
    r = capture_with_a_retransmission(tmp_path, "nop,nop,ts")
    with pytest.raises(AssertionError):
        check_retransmissions(r, tmp_path, 5)
    # ... unless the machine's backlog dropped a packet during the run
    check_retransmissions(r, tmp_path, 5, drops=1)


# ---- the report's own decoding ----------------------------------------------------------------

@pytest.mark.parametrize("hz,jiffies,ms", [(100, 4, 40.0), (250, 10, 40.0), (300, 12, 40.0),
                                           (1000, 40, 40.0), (64, 4, 62.5)])
def test_delack_constants_follow_include_net_tcp_h(hz, jiffies, ms):
    c = rep.delack_constants(hz)
    assert c["tcp_delack_min_jiffies"] == jiffies and c["tcp_delack_min_ms"] == ms


def seg(t_us, d, seq, ack, length, flags="PA"):
    return {"t_ns": int(t_us * 1000), "dir": d, "seq": seq, "ack": ack, "len": length,
            "flags": flags, "kind": "tcp"}


def test_ack_waits_pairs_each_segment_with_the_ack_that_covers_it():
    segs = [seg(0, "c>s", 1, 1, 8), seg(44000, "s>c", 1, 9, 0, "A"),
            seg(44010, "c>s", 9, 1, 32), seg(44020, "s>c", 1, 30, 0, "A"),   # too short
            seg(44030, "s>c", 1, 41, 64)]
    w = rep.ack_waits(segs)
    assert [(x["seq"], x["wait_us"], x["by"]) for x in w] == [(1, 44000.0, "pure ACK"),
                                                               (9, 20.0, "data")]


def test_a_segment_never_acknowledged_has_no_wait():
    assert rep.ack_waits([seg(0, "c>s", 1, 1, 8), seg(5, "s>c", 1, 5, 0, "A")]) == []


# ---- bad raw input: one line, exit 1, nothing written --------------------------------------------

@pytest.fixture
def rawcopy(tmp_path):
    if not COMMITTED:
        pytest.skip("no committed reference")
    root = tmp_path / "raw"
    shutil.copytree(COMMITTED[-1], root / UNIT)
    out = tmp_path / "out"
    out.mkdir()
    return root, root / UNIT, out


@pytest.mark.parametrize("victim,content,word", [
    ("baseline-requests.txt", None, "baseline-requests.txt"),
    ("sysctls.txt", "tcp_pingpong_thresh 1\n", "net.X.Y=VALUE"),
    ("nodelay-server-sockwatch.txt", "", "want one socket"),
    ("cork-client.txt", "connected local=192.0.2.1:1 start_ns=1\n", "result"),
    ("baseline-timewait.txt", "", "want one socket"),
])
def test_bad_raw_input_is_one_line(rawcopy, victim, content, word):
    root, raw, out = rawcopy
    if content is None:
        os.unlink(raw / victim)
    else:
        (raw / victim).write_text(content)
    r = report(root, out)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not list(out.iterdir())


# ---- the fixtures -----------------------------------------------------------------------------

@pytest.mark.parametrize("prog,args,word", [
    ("rr_client", ["-p", "1", "-n", "-5"], "-n"),
    ("rr_client", ["-p", "1", "-n", "5", "-w", "three"], "-w"),
    ("rr_client", ["-p", "1"], "missing -n"),
    ("rr_server", ["-p", "1", "-R", "0"], "-R"),
    ("rr_server", ["-p", "1", "-q", "x"], "unexpected argument"),
])
def test_bad_input_is_one_line_exit_2(bindir, prog, args, word):
    r = subprocess.run([os.path.join(bindir, prog)] + args, capture_output=True, text=True,
                       timeout=5)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert r.stderr.startswith(prog + ": ") and r.stdout == ""


def wait_line(path, pattern, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if re.search(pattern, line):
                        return line
        time.sleep(0.01)
    raise AssertionError(f"no {pattern!r} in {path} after {timeout} s")


@pytest.mark.netns
def test_server_refuses_a_bad_header_and_serves_the_next_client(bindir, netns, tmp_path):
    """A header that is not one (fx_msg_parse) ends that connection with EPROTO in its line;
    the server goes on to the next one, which rr_client serves normally (-b, -w cork, -N)."""
    out = tmp_path / "server.txt"
    with open(out, "w") as f:
        srv = subprocess.Popen(in_ns(netns, [os.path.join(bindir, "rr_server"), "-p", "21099",
                                             "-R", "16", "-q"]), stdout=f, text=True)
    try:
        wait_line(out, r"^ready .*quickack=1")
        bad = subprocess.run(in_ns(netns, [PY, "-c",
                                           "import socket; s=socket.create_connection(('127.0.0.1',"
                                           "21099)); s.sendall(b'X0000004'); print(s.recv(9))"]),
                             capture_output=True, text=True, timeout=10)
        assert bad.returncode == 0 and bad.stdout.strip() == "b''", bad.stderr
        wait_line(out, r"^conn requests=0 .* end=EPROTO")
        for args, pat in ((["-n", "5", "-w", "cork", "-N"], r"^result pattern=rr write=cork "
                           r"nodelay=1 requests=5 "), (["-n", "50", "-b"],
                                                       r"^result pattern=bulk .*messages=50 ")):
            r = subprocess.run(in_ns(netns, [os.path.join(bindir, "rr_client"), "-p", "21099",
                                             "-R", "16", *args]),
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and re.search(pat, r.stdout, re.M), r.stdout + r.stderr
        wait_line(out, r"^conn requests=1 bulk=50 bytes=2040 .*end=eof")
        with open(out) as f:
            conns = [line for line in f if line.startswith("conn requests=5 ")]
        # -q: TCP_QUICKACK after every recv() that returned data
        assert conns and re.search(r"recvs=(\d+) quickacks=\1 ", conns[0]), conns
    finally:
        srv.terminate()
        assert srv.wait(timeout=5) == 0
