"""p04-tail-loss: the last segment of a flight lost on the wire.  The same kernel facts are
asserted on the committed reference (the report replayed on outputs/RELEASE/raw/, no root) and
on a live run (./run.sh --out TMP p04-tail-loss, root and namespaces), each bound derived from
what that run recorded (srtt and rto from ss, tcp_rto_min_us, HZ, the knob drops), never from a
speed: the tail loss probe before any RTO, the probe timeout against 2*srtt with the kernel's
floor and cap (tcp_schedule_loss_probe(), v6.18), each RTO twice the last, the counters'
deltas, and every retransmission seen alike by tcpevents, the capture and TcpRetransSegs.
Then bad input: the report on broken raw data, a bad knob (run.sh and the collect script)."""
import os
import subprocess

import pytest

from unit_replay import Report, missing, no_line, replace, write, window, tseq_panels, PY

NAME = "p04-tail-loss"
R = Report(NAME)


def jiffies(ms, hz):
    """ms in whole jiffies, rounded up (usecs_to_jiffies())."""
    return -(-round(ms * 1000) * hz // 1_000_000)


def pto_ms(j, p):
    """tcp_schedule_loss_probe() with one packet out: 2*srtt + tcp_rto_min_us, in jiffies,
    at most the RTO (icsk_rto)."""
    hz, ss = j["hz"], p["ss"]
    rto_min_us = j["sysctls"].get("net.ipv4.tcp_rto_min_us") or 200000
    return min(jiffies((2 * ss["srtt_us"] + rto_min_us) / 1000, hz), jiffies(ss["rto_ms"], hz)) \
        * 1000 / hz


def gaps(p):
    s = [x["t_ms"] for x in p["tail_sends"]]
    return [b - a for a, b in zip(s, s[1:])]


def check_probe_first(j, p):
    """The tail's second transmission is the loss probe, after the PTO counted from the ACK
    that armed it, and before any RTO."""
    sends = p["tail_sends"]
    assert [x["what"] for x in sends[:2]] == ["the original", "the loss probe (TLP)"]
    assert [x["t_ms"] for x in sends] == sorted(x["t_ms"] for x in sends)
    lo, hi = window(pto_ms(j, p), j["hz"], 0)
    assert lo <= sends[1]["t_ms"] - p["armed_ms"] <= hi, (sends, p["armed_ms"], lo, hi)
    assert p["counters"]["TcpExtTCPLossProbes"] == 1


def check_crosscheck(p):
    x = p["crosscheck"]
    assert x["capture"] == x["TcpRetransSegs"] == len(p["tail_sends"]) - 1
    if "blind" not in p["tcpevents"]:
        assert p["tcpevents"]["lost"] == 0
        assert x["tcpevents"] <= x["capture"]
        if x["tcpevents"] < x["capture"]:
            # tcpevents saw fewer than the capture and the counter (twice in loaded CI runs of
            # 4 December, cause open: docs/tcpevents.md): the report must say so, and only that
            assert [d for d in p.get("disagree", []) if not d.startswith("tcpevents")] == [], p
            assert any(d.startswith("tcpevents") for d in p["disagree"]), p
            return
    assert "disagree" not in p


def check_tlp(j):
    p = j["parts"]["tlp"]
    assert [x["dropped"] for x in p["tail_sends"]] == [True, False]
    check_probe_first(j, p)
    c = p["counters"]
    assert c["TcpRetransSegs"] == 1 and c["TcpExtTCPTimeouts"] == 0
    # the second request's ACK went past the probe's snd_nxt: a loss the probe repaired
    assert c["TcpExtTCPLossProbeRecovery"] == 1
    check_crosscheck(p)


def check_rto(j, prm):
    p = j["parts"]["rto"]
    drops = prm["drops"]
    assert [x["dropped"] for x in p["tail_sends"]] == [True] * drops + [False]
    check_probe_first(j, p)
    # then the RTOs: the first a whole rto after the probe (tcp_rearm_rto()), each next one
    # twice the last (tcp_retransmit_timer(): icsk_backoff++)
    for k, gap in enumerate(gaps(p)[1:]):
        lo, hi = window(p["ss"]["rto_ms"] * 2 ** k, j["hz"], 0)
        assert lo <= gap <= hi, (k, gap, lo, hi)
    c = p["counters"]
    assert c["TcpRetransSegs"] == drops and c["TcpExtTCPTimeouts"] == drops - 1
    assert c["TcpExtTCPLossProbeRecovery"] == 0
    if drops > 2:
        # sockwatch samples every ms: each backoff before the last RTO lasts a whole RTO and is
        # seen; the last (drops - 1) lasts only until the retransmission's ACK, one RTT, and is
        # seen only when that ACK is late (a loaded make test saw [1, 2] with drops 3)
        assert set(range(1, drops - 1)) <= set(p["backoffs"]) <= set(range(1, drops)), \
            p["backoffs"]
    check_crosscheck(p)


check_all = R.checks(check_tlp, check_rto)


# ---- the committed reference, replayed -----------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_all)
test_every_kernels_reference_shows_the_kernel_facts = R.every_reference_test(check_all)



test_reference_ladder = R.ladder_test("the loss probe (TLP)", "RTO 1")


def test_reference_time_sequence(ref_out):
    """The time-sequence picture: each transmission of the tail nft dropped is red with a cross,
    the one that arrived green, in each part."""
    j = R.load(str(ref_out))
    assert j["tseq_svg"] == f"{NAME}-tseq.svg"
    panels = tseq_panels(os.path.join(ref_out, j["tseq_svg"]))
    assert [title.split(":")[0] for title, _ in panels] == ["part tlp", "part rto"]
    for (title, n), part in zip(panels, j["parts"].values()):
        assert n["seg dropped"] == n["cross"] == part["dropped"], (title, n)
        assert n["seg again"] == 1 and n["ack"] == 1 and n["ackpt"] >= 1, (title, n)
        assert part["dropped"] == sum(x["dropped"] for x in part["tail_sends"])


def test_reference_tcp_probe_srtt_is_ss_srtt(ref_out):
    """tcp_probe's srtt at the ACK that armed the probe is the srtt ss showed while the tail
    was out (both tcp_sock's srtt_us >> 3), within what one more ACK can move it."""
    for p in R.load(str(ref_out))["parts"].values():
        if p["srtt_tcp_probe_us"] is not None:
            assert abs(p["srtt_tcp_probe_us"] - p["ss"]["srtt_us"]) <= p["ss"]["srtt_us"]


def test_report_takes_the_rto_before_the_backoff_ss_showed(tmp_path):
    """ss ran late, after the first RTO (a loaded CI run: the gaps then looked half an RTO):
    it shows icsk_rto doubled and backoff:1.  The report takes the rto before the doubling, says
    so, and every kernel fact still holds."""
    def edit(d):
        f = d / "rto-ss.txt"
        text = f.read_text()
        shown = float(text.split(" rto:")[1].split()[0])
        f.write_text(text.replace(f" rto:{shown:g} ", f" rto:{shown * 2:g} backoff:1 "))
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(R.broken_copy(tmp_path, edit), out)
    assert r.returncode == 0, r.stderr
    j = R.load(out)
    ss = j["parts"]["rto"]["ss"]
    assert ss["backoff"] == 1 and ss["rto_shown_ms"] == 2 * ss["rto_ms"]
    assert ss["rto_ms"] == R.load(R.ref)["parts"]["rto"]["ss"]["rto_ms"]
    text = (out / f"{NAME}.txt").read_text()
    assert f"(ss ran after 1 RTO(s): it showed rto {ss['rto_shown_ms']:g} ms backoff:1" in text
    R.check(check_all, out, tmp_path)


# ---- the report on bad raw input ------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("tlp-ss.txt"),
    missing("rto-nft-server.txt"),
    no_line("end", "tlp-capture.txt"),
    no_line("end", "rto-tcpevents.txt"),
    no_line("ready", "tlp-tcpevents.txt"),
    (write("tlp-ss.txt", "no socket\n"), "no rtt:SRTT/RTTVAR"),
    (write("rto-tcpevents-blind.txt", "a\nb\n"), "want one line"),
    (replace("rto-nft-server.txt", "counter packets 3 ", "counter packets 1 "),
     "the rule dropped 1"),
    (write("params.txt", "flight=x tail=300\n"), "not a number"),
    (replace("tlp-capture.txt", " len=300 ", " len=301 "), "no segment of the tail's"),
])


test_report_without_tcpevents_says_why = R.blind_tcpevents_test("tlp")


@pytest.mark.parametrize("missed", ["1", "-"])
def test_report_names_the_events_tcpevents_missed(tmp_path, missed):
    """A retransmission tcpevents did not see, and its end line's missed= (the programs'
    recursion misses): the DISAGREE line gives the figure when the kernel counted one, and the
    tcpevents line shows it; with missed=- (a kernel before 5.12) neither does."""
    def edit(d):
        f = d / "rto-tcpevents.txt"
        lines = f.read_text().splitlines()
        i = next(k for k, l in enumerate(lines) if " event=retrans " in l)
        del lines[i]
        end = lines[-1].split()
        end = [f"events={len(lines) - 2}" if w.startswith("events=") else w for w in end]
        lines[-1] = " ".join(end) + f" missed={missed}"
        f.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(R.broken_copy(tmp_path, edit), out)
    assert r.returncode == 0, r.stderr
    text = (out / f"{NAME}.txt").read_text()
    dis = [l for l in text.splitlines() if l.startswith("DISAGREE: tcpevents")]
    assert len(dis) == 1 and "tcpevents has 2, client TcpRetransSegs +3" in dis[0], dis
    assert ("tcpevents missed=1" in dis[0]) == (missed == "1"), dis
    assert (" lost=0 missed=1:" in text) == (missed == "1")
    assert R.load(out)["parts"]["rto"]["tcpevents"].get("missed") == (1 if missed == "1" else None)


def test_report_usage():
    r = subprocess.run([PY, R.path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1


test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = R.knob_tests(
    [("FLIGHT", "0"), ("FLIGHT", "9"), ("FLIGHT", "x"),
     ("DROPS", "1"), ("DROPS", "5"), ("DROPS", "02")],
    ["drops=1", "drops=9", "flight=0", "flight=big"])


# ---- a live run ------------------------------------------------------------------------------

test_live_run_kernel_facts = R.live_test(check_all, timeout=120)
