"""p04-no-answer: the peer stops answering; the client retransmits until the kernel gives up.
The same kernel facts on the committed reference (the report replayed on outputs/RELEASE/raw/,
no root) and on a live run (root and namespaces), each bound from what that run recorded
(tcp_retries2, TCP_USER_TIMEOUT read back, sockwatch's rto_ms, HZ), never from a speed:

- the budget is a time, counted from the first retransmission: every retransmission found less
  of it spent, the timer that ended the connection found it spent (retransmits_timed_out(),
  tcp_model_timeout(): ((2 << tcp_retries2) - 1) x 200 ms; TCP_USER_TIMEOUT replaces it);
- so a larger RTO (a route's rto_min) gives fewer retransmissions for the same budget;
- each RTO twice the last (sockwatch), the last one cut to the user timeout;
- recv() returns ETIMEDOUT, tcpevents sees ESTAB → UNCONN, and the retransmissions agree in
  the capture, tcpevents, TcpRetransSegs and the nft rule's counter; TCPTimeouts counts one
  timer more (the one that gave up), TCPAbortOnTimeout 1.
Then bad input: the report on broken raw data, a bad knob (run.sh and the collect script)."""
import os
import subprocess

import pytest

from unit_live import load, run_unit
from unit_replay import Report, missing, no_line, replace, write, wheel_gran_ms, PY

NAME = "p04-no-answer"
DEFAULT = NAME + "-default"
R = Report(NAME)
RTO_MAX = 120000        # TCP_RTO_MAX, net.ipv4.tcp_rto_max_ms's default where there is one


def budget(retries2, rto_max=RTO_MAX):
    """tcp_model_timeout(): doubling from 200 ms up to ilog2(rto_max / 200) retries, then one
    rto_max per retry."""
    k = (rto_max // 200).bit_length() - 1
    if retries2 <= k:
        return ((2 << retries2) - 1) * 200
    return ((2 << k) - 1) * 200 + (retries2 - k) * rto_max


def test_the_budget_of_the_kernels_default_is_924_6_s():
    # ip-sysctl.rst, tcp_retries2: "The default value of 15 yields a hypothetical timeout of
    # 924.6 seconds"; below the threshold the doubling sum alone
    assert budget(15) == 924600 and budget(9) == 204600 and budget(10) == 324600
    assert budget(3) == 3000 and budget(6) == 25400


def check_part(j, name, want_budget, rto_max=RTO_MAX):
    p = j["parts"][name]
    assert p["budget_ms"] == want_budget
    rtx = p["retransmissions"]
    assert rtx and rtx[0]["since_first_ms"] == 0
    # the rule: retransmit while the budget is not spent, give up at the first timer that finds
    # it spent; retransmits_timed_out() compares whole ms, so 1 ms either way
    assert all(x["since_first_ms"] < want_budget + 1 for x in rtx), rtx
    assert p["end_since_first_ms"] >= want_budget - 1, p["end_since_first_ms"]
    assert p["rule_holds"] is True
    # each timer before a retransmission was armed with twice the RTO of the one before
    # (tcp_retransmit_timer(): icsk_backoff++), up to tcp_rto_max, as sockwatch read it
    rto = p["rto_ms"]
    assert len(rto) >= len(rtx) and all(b == min(2 * a, rto_max) for a, b in zip(rto, rto[1:])), rto
    hz = j["hz"]
    jiffy = 1000 / hz
    for x, r in zip(rtx, rto):
        assert r - jiffy <= x["gap_ms"] <= r + wheel_gran_ms(r, hz) + 2 * jiffy + 50, (x, r)
    assert p["recv"]["errno"] == "ETIMEDOUT"
    ev = p["tcpevents"]
    if "blind" not in ev:
        # tcpevents may lack an event under load, a tracepoint hit the kernel ran no program for
        # (docs/tcpevents.md, "A retransmission missed under load"): then the end is recv()'s
        # return, and the DISAGREE lines may name tcpevents only.  Where its end line counted
        # those hits (unseen=, not in the references before it), no more may be missing than
        # it counts, or one: CI's sanitize pass saw the first of 6 missing with unseen=0
        assert ev["lost"] == 0 and len(ev["retrans_ms"]) <= len(rtx)
        if "unseen" in ev:
            short = len(rtx) - len(ev["retrans_ms"])
            assert short <= max(ev.get("missed", 0) + ev["unseen"], 1), ev
        if ev["closed_ms"] is not None:
            assert ev["closed_ms"] == p["end_ms"] <= p["recv"]["t_ms"]
    c = p["counters"]
    assert c["TcpRetransSegs"] == len(rtx) == p["dropped"] - 1
    assert c["TcpExtTCPTimeouts"] == len(rtx) + 1
    assert c["TcpExtTCPAbortOnTimeout"] == 1 and c["TcpEstabResets"] == 1
    assert c["TcpExtTCPLossProbes"] == 0            # tcp_early_retrans=0
    # nothing of the data reached the server: its SYN and the handshake's ACK only
    assert p["server_counters"]["TcpInSegs"] == 2
    assert [d for d in p.get("disagree", []) if not d.startswith("tcpevents")] == []
    return p


def check_default(j):
    """Unit p04-no-answer-default's part: the kernel's own tcp_retries2 (15) or the knob's,
    the same rule, and past the threshold the RTO held at tcp_rto_max."""
    d = j["default"]
    assert d["unit"] == DEFAULT
    r2 = (d["knobs"] or {}).get("retries2", 15)
    assert d["sysctls"]["net.ipv4.tcp_retries2"] == r2
    assert d["sysctls"]["net.ipv4.tcp_early_retrans"] == 0
    rto_max = d["sysctls"].get("net.ipv4.tcp_rto_max_ms") or RTO_MAX
    p = check_part({"parts": d["parts"], "hz": j["hz"]}, "retries2", budget(r2, rto_max),
                   rto_max)
    assert p["budget_from"] == "tcp_retries2"
    if budget(r2, rto_max) > budget(9, rto_max):
        assert p["rto_ms"][-1] == rto_max, p["rto_ms"]


def check_facts(j):
    if "default" in j:
        check_default(j)
    if not j["parts"]:          # unit p04-no-answer-default alone
        assert "default" in j
        return
    r2 = j["knobs"].get("retries2", 3) if isinstance(j.get("knobs"), dict) else 3
    assert j["sysctls"]["net.ipv4.tcp_retries2"] == r2
    assert j["sysctls"]["net.ipv4.tcp_early_retrans"] == 0
    a = check_part(j, "retries2", budget(r2))
    b = check_part(j, "rto-min", budget(r2))
    # the route's floor: the first RTO at least 1 s, so fewer retransmissions in the same budget
    assert b["rto_ms"][0] >= 1000 > a["rto_ms"][0]
    assert len(b["retransmissions"]) < len(a["retransmissions"])
    ut = j["parts"]["user-timeout"]["user_timeout_ms"]
    c = check_part(j, "user-timeout", ut)
    assert c["budget_from"] == "TCP_USER_TIMEOUT" and a["budget_from"] == "tcp_retries2"
    if c["clamp"] is not None:
        # the last timer was cut to what was left: it fired no earlier than that, and no later
        # than the timer wheel's granularity at that distance allows
        left, hz = c["clamp"]["left_ms"], j["hz"]
        assert left - 1000 / hz <= c["end_gap_ms"] <= left + wheel_gran_ms(left, hz) + \
            2 * 1000 / hz + 50, (c["end_gap_ms"], c["clamp"])


check_all = R.checks(check_facts)


# ---- the committed reference, replayed -----------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_all)
test_every_kernels_reference_shows_the_kernel_facts = R.every_reference_test(check_all)



test_reference_ladder = R.ladder_test("retransmission 1, dropped by nft", "ETIMEDOUT")


def test_reference_text_gives_the_rule(ref_out):
    with open(os.path.join(ref_out, f"{NAME}.txt")) as f:
        text = f.read()
    # one line per part: p04-no-answer's three, and p04-no-answer-default's where it ran
    parts = 3 + (f"== unit {DEFAULT} (collected" in text)
    assert text.count("given up there, as retransmits_timed_out() says") == parts
    assert "counted from the first retransmission" in text


# ---- the report on bad raw input ------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("retries2-nft-server.txt"),
    missing("rto-min-route.txt"),
    no_line("end", "retries2-capture.txt"),
    no_line("end", "user-timeout-tcpevents.txt"),
    no_line("end", "rto-min-sockwatch.txt"),
    (write("rto-min-tcpevents-blind.txt", "a\nb\n"), "want one line"),
    (replace("retries2-client.txt", "op=send:1000 ret=1000", "op=send:1000 ret=0"),
     "sent nothing"),
    (replace("user-timeout-client.txt", "op=user-timeout:5000 ret=0 errno=none",
             "op=user-timeout:5000 ret=-1 errno=EINVAL"), "setting TCP_USER_TIMEOUT failed"),
    (replace("retries2-client.txt", "op=recv:1", "op=drain"), "want a send: and a recv: step"),
])


def test_report_says_a_different_errno(tmp_path):
    """recv() that did not time out is a DISAGREE line, not a silent pass."""
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(R.broken_copy(tmp_path, replace("retries2-client.txt", "errno=ETIMEDOUT",
                                              "errno=ECONNRESET")), out)
    assert r.returncode == 0, r.stderr
    text = (out / f"{NAME}.txt").read_text()
    assert "DISAGREE: recv() returned ECONNRESET, not ETIMEDOUT" in text


def test_report_usage():
    r = subprocess.run([PY, R.path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1


test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = R.knob_tests(
    [("RETRIES2", "0"), ("RETRIES2", "6"), ("RETRIES2", "x"),
     ("USER_TIMEOUT", "499"), ("USER_TIMEOUT", "15001"),
     ("USER_TIMEOUT", "05000")],
    ["retries2=0", "retries2=16", "user_timeout=100",
                                     "user_timeout=lots"])


def test_a_sample_of_the_socket_given_up_arms_no_timer(tmp_path):
    """CI's live run of p04-no-answer-default (retries2=6): one sockwatch sample caught the
    socket after the kernel gave up, still ESTAB but with its timer off and backoff 0, keeping
    the last rto_ms (13056).  That sample armed nothing: the RTOs are the 7 timers' (204 doubled
    to 13056), one per retransmission and the last, and the facts hold."""
    raw = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "reports",
                       "p04-no-answer-given-up-sample", "raw")
    with open(os.path.join(raw, DEFAULT, "retries2-sockwatch.txt")) as f:
        assert " event=change state=ESTAB timer=off expires_ms=0 retrans=0 " in f.read()
    r = R.run(raw, tmp_path)
    assert r.returncode == 0, r.stderr
    j = load(tmp_path, NAME)
    assert j["default"]["parts"]["retries2"]["rto_ms"] == [204 << k for k in range(7)]
    check_facts(j)


# ---- a live run ------------------------------------------------------------------------------

test_live_run_kernel_facts = R.live_test(check_all, timeout=120)


@pytest.mark.netns
def test_live_default_unit_with_a_shorter_budget(tmp_path, bindir):
    """p04-no-answer-default with tcp_retries2 6 (its 15 waits a quarter of an hour: the host
    reference has it): 25.4 s of budget, the report's part and the rule."""
    r = run_unit(tmp_path, DEFAULT, "--set", "retries2=6", timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, NAME)
    assert j["parts"] == {} and j["default"]["knobs"] == {"retries2": 6}
    check_facts(j)
    with open(tmp_path / (NAME + ".txt")) as f:
        txt = f.read()
    assert f"== unit {NAME}: not run" in txt and "budget: 25400 ms from tcp_retries2" in txt


# ---- the cross-check: tcpdump's reading of the committed pcaps ---------------------------------

def tcpdump_tsvals(pcap):
    """tcpdump's reading of a part's pcap: the TSval of each copy of the client's 1000 bytes."""
    r = subprocess.run(["tcpdump", "-nn", "-r", pcap], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(line.split("TS val ")[1].split()[0]) for line in r.stdout.splitlines()
            if "192.0.2.1." in line.split(">")[0] and "length 1000" in line]


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v tcpdump"], capture_output=True)
                    .returncode != 0, reason="no tcpdump")
@pytest.mark.parametrize("part", ["retries2", "rto-min", "user-timeout"])
def test_tcpdump_sees_the_same_transmissions(ref_out, part):
    """tcpdump, not the lab's decoder, reads each part's pcap: the data leaves 1 + the report's
    retransmissions times, and the TCP timestamps it carries (TSval: the ms clock the budget is
    measured on, tcp_time_stamp_ts()) say the last retransmission left less than the budget
    after the first."""
    p = R.load(str(ref_out))["parts"][part]
    pcap = os.path.join(R.ref, "raw", NAME, f"{part}-capture.pcap")
    tsval = tcpdump_tsvals(pcap)
    assert len(tsval) == 1 + len(p["retransmissions"])
    assert tsval == sorted(tsval)
    assert tsval[-1] - tsval[1] < p["budget_ms"], (tsval, p["budget_ms"])


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v tcpdump"], capture_output=True)
                    .returncode != 0, reason="no tcpdump")
def test_tcpdump_sees_the_default_units_transmissions(ref_out):
    """The same reading of p04-no-answer-default's pcap, where the host reference has it: 16
    copies of the data over 15 minutes, the last retransmission's TSval less than 924.6 s after
    the first's, and the gaps held at tcp_rto_max (120 s) once the backoff reached it."""
    j = R.load(str(ref_out))
    if "default" not in j:
        pytest.skip(f"{R.ref} has no {DEFAULT} run")
    p = j["default"]["parts"]["retries2"]
    pcap = os.path.join(R.ref, "raw", DEFAULT, "retries2-capture.pcap")
    tsval = tcpdump_tsvals(pcap)
    assert len(tsval) == 1 + len(p["retransmissions"])
    assert tsval[-1] - tsval[1] < p["budget_ms"] == 924600, tsval
    gaps = [b - a for a, b in zip(tsval, tsval[1:])]
    assert any(g >= 120000 for g in gaps) and all(g <= 120000 + 1000 for g in gaps), gaps
