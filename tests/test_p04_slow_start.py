"""p04-slow-start: a fresh connection's first bulk transfer through a bottleneck (tbf behind an
ifb on the server's side of the veth).  The same kernel facts are asserted on the committed
reference (the report replayed on outputs/RELEASE/raw/, no root) and on a live run (root and
namespaces): every connection starts at cwnd 10 with no ssthresh; in slow start the cwnd only
grows; cubic's first ssthresh is the cwnd then (HyStart) or cwnd x 717 / 1024 (a loss); bbr sets
ssthresh once (leaving STARTUP) and never again; after an idle pause longer than the RTO the
cwnd restarts as tcp_cwnd_restart() computes, and not at all with tcp_slow_start_after_idle 0;
every retransmission counted alike by the capture, TcpRetransSegs and tcpevents.  Then the
picture, bad raw input and bad knobs."""
import os
import re

from unit_replay import Report, missing, no_line, replace, write

NAME = "p04-slow-start"
R = Report(NAME)
INF = 2147483647


def restart(cwnd, rto_ms, idle_ms):
    """tcp_cwnd_restart() (net/ipv4/tcp_output.c), written out again from the source."""
    restart_cwnd = min(10, cwnd)
    while True:
        idle_ms -= rto_ms
        if idle_ms <= 0 or cwnd <= restart_cwnd:
            break
        cwnd >>= 1
    return max(cwnd, restart_cwnd)


def check_every_part(j):
    want_cc = {"cubic": "cubic", "bbr": "bbr", "idle": "cubic", "idle-off": "cubic"}
    assert sorted(j["parts"]) == sorted(want_cc)
    for name, p in j["parts"].items():
        assert p["cc"] == want_cc[name], name
        # TCP_INIT_CWND, and no ssthresh until something sets it
        assert p["start"]["cwnd"] == 10 and p["start"]["ssthresh"] == INF, (name, p["start"])
        # gso_max_segs 1: each retransmission one segment, seen alike
        x = p["crosscheck"]
        assert x["capture"] == x["TcpRetransSegs"], (name, x)
        if "blind" not in p["tcpevents"]:
            assert p["tcpevents"]["lost"] == 0
            if x["tcpevents"] != x["TcpRetransSegs"]:
                assert any(d.startswith("tcpevents") for d in p.get("disagree", [])), (name, p)
        assert [d for d in p.get("disagree", []) if not d.startswith("tcpevents")] == [], name
        # every data segment went through the bottleneck (sent or dropped there)
        assert p["tbf"]["sent_pkts"] + p["tbf"]["dropped"] >= p["data_segments"], name
        assert sum(r["segments"] for r in p["rounds"]) == p["data_segments"], name
        if "blind" in p["tcpevents"]:
            continue
        path = p["cwnd_path"]
        assert path[0][1] == 10 and path[0][2] == INF, (name, path[0])
        if name not in ("cubic", "bbr"):
            continue        # an idle part restarts its cwnd (ssthresh may still be unset)
        # slow start: until ssthresh is set and before any retransmission the cwnd only grows
        first_rtx = min(p["rtx_ms"], default=float("inf"))
        grow = [c for t_ms, c, s in path if s == INF and t_ms < first_rtx]
        assert grow == sorted(grow), (name, grow)
        assert p["max_cwnd"] > 10, name


def check_cubic(j):
    for name in ("cubic", "idle", "idle-off"):
        p = j["parts"][name]
        e = p.get("slow_start_end")
        if e is None or "blind" in p["tcpevents"]:
            continue
        # hystart_update(): ssthresh = cwnd; on a loss, cubic's ssthresh: cwnd x 717 / 1024
        loss = max(e["cwnd_before"] * 717 // 1024, 2)
        want = {e["cwnd_before"], loss} if e["after_loss"] else {e["cwnd_before"]}
        assert e["ssthresh"] in want, (name, e)
        # HyStart's own counters (tcp_cubic.c, 5.7+) say the same from inside: a detection,
        # counted with the cwnd it copied into ssthresh
        c = p["counters"]
        det = {k: c.get(f"TcpExtTCPHystart{k}Detect") for k in ("Train", "Delay")}
        if e["after_loss"] or None in det.values():
            continue
        assert sum(det.values()) >= 1, (name, c)
        if sum(det.values()) == 1:
            k = "Train" if det["Train"] else "Delay"
            assert c[f"TcpExtTCPHystart{k}Cwnd"] == e["ssthresh"], (name, c)


def check_bbr(j):
    p = j["parts"]["bbr"]
    if "blind" in p["tcpevents"]:
        return
    # bbr_check_drain() sets ssthresh once, leaving STARTUP; a loss does not (bbr_ssthresh())
    assert len(p["ssthresh_values"]) <= 1, p["ssthresh_values"]


def check_idle(j):
    prm = {k: v for k, v in j["params"].items()}
    hz = j["hz"]
    for name, ssai in (("idle", 1), ("idle-off", 0)):
        p = j["parts"][name]
        i = p["idle"]
        assert p["tcp_slow_start_after_idle"] == ssai
        before = i["before"]
        assert before["unacked"] == 0
        # ss (sock_diag) reads the cwnd the fixture's getsockopt read
        assert i["ss"]["cwnd"] == before["cwnd"] and i["ss"]["rto_ms"] == before["rto_us"] / 1000
        assert i["asked_ms"] >= int(prm["idle_ms"])
        if "blind" in p["tcpevents"] or i["first_ack_after"] is None:
            continue
        after = i["first_ack_after"]
        c, rto = before["cwnd"], before["rto_us"] // 1000
        if ssai == 0:
            assert after["cwnd"] == c and after["ssthresh"] == before["ssthresh"], (name, i)
            continue
        jiffy = 1000 / hz
        n = i["gap_ms"] // jiffy
        assert after["cwnd"] in {restart(c, rto, n * jiffy), restart(c, rto, (n + 1) * jiffy)}, i
        assert after["cwnd"] < c or c <= 10, i        # a pause of several RTOs: it restarted
        # tcp_current_ssthresh() in CA_Open: max(ssthresh, 3/4 cwnd)
        s = before["ssthresh"]
        assert after["ssthresh"] == (s if s == INF else max(s, (c >> 1) + (c >> 2))), i


check_all = R.checks(check_every_part, check_cubic, check_bbr, check_idle)


# ---- the committed reference, replayed -----------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_all)
test_every_kernels_reference_shows_the_kernel_facts = R.every_reference_test(check_all)



def test_reference_shows_both_ways_slow_start_ends(ref_out):
    """On the host's reference: cubic's HyStart left slow start before any loss, and bbr's
    STARTUP overfilled the 64 KiB queue (tbf dropped, and each drop was sent again)."""
    j = R.load(str(ref_out))
    e = j["parts"]["cubic"]["slow_start_end"]
    assert not e["after_loss"] and e["ssthresh"] == e["cwnd_before"]
    b = j["parts"]["bbr"]
    assert b["tbf"]["dropped"] > 0 and b["crosscheck"]["TcpRetransSegs"] >= b["tbf"]["dropped"]


def test_reference_cwnd_picture(ref_out):
    """One panel per part, each with its cwnd line and srtt line, ssthresh where it was set,
    and a tick for every retransmission tcpevents saw."""
    j = R.load(str(ref_out))
    with open(os.path.join(ref_out, j["cwnd_svg"])) as f:
        svg = f.read()
    titles = re.findall(r'class="title">part ([a-z-]+):', svg)
    assert titles == list(j["parts"])
    assert svg.count('class="cwnd"') == svg.count('class="srtt"') == 4
    assert svg.count('class="ssthresh"') == sum(1 for p in j["parts"].values()
                                                if p["ssthresh_values"])
    assert svg.count('class="rtx"') == sum(len(p["rtx_ms"]) for p in j["parts"].values())


def test_a_wrong_restart_is_said(tmp_path):
    """The report's own check can fail: a cwnd after the pause that tcp_cwnd_restart() does
    not give is a DISAGREE line."""
    def edit(d):
        ev = d / "idle-tcpevents.txt"
        send = (d / "idle-send.txt").read_text()
        t_end = int(re.search(r"^idle_end .* t_ns=([0-9]+)$", send, re.M).group(1))
        lines = ev.read_text().splitlines(True)
        for k, line in enumerate(lines):
            m = re.match(r"t_ns=([0-9]+) event=probe ", line)
            if m and int(m.group(1)) > t_end:
                lines[k] = re.sub(r" cwnd=[0-9]+ ", " cwnd=17 ", line)
                break
        ev.write_text("".join(lines))
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(R.broken_copy(tmp_path, edit), out)
    assert r.returncode == 0, r.stderr
    j = R.load(str(out))
    assert any("tcp_cwnd_restart() gives" in d for d in j["parts"]["idle"]["disagree"])


# ---- the report on bad raw input ------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("cubic-capture.txt"),
    missing("idle-ss-idle.txt"),
    missing("bbr-tbf.txt"),
    no_line("end", "cubic-capture.txt"),
    no_line("end", "bbr-tcpevents.txt"),
    (write("cubic-tbf.txt", "qdisc tbf 1: root\n"), "no `Sent"),
    (write("idle-ss-idle.txt", "State Recv-Q\n"), "want one connection's tcp_info line"),
    (replace("idle-send.txt", "idle_start ", "idle_begin "), "idle_start"),
    (write("params.txt", "rate_mbit=x queue_kib=64\n"), "not a number"),
])


test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = R.knob_tests(
    [("RATE", "4"), ("RATE", "x"), ("QUEUE", "2000"), ("BYTES", "100"), ("IDLE_MS", "200")],
    ["rate=0", "rate=fast", "queue=8", "bytes=5000", "idle_ms=6000"])


# ---- a live run ------------------------------------------------------------------------------

test_live_run_kernel_facts = R.live_test(check_all, timeout=150)
