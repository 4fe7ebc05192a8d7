"""p04-full-buffers: a receiver that stops reading.  The same kernel facts are asserted on the
committed reference (the report replayed on outputs/RELEASE/raw/, no root) and on a live run
(./run.sh --out TMP p04-full-buffers, root and namespaces), each expectation derived from the
sysctls, HZ and constants that run recorded, never from a speed: the zero window, the
send buffer's doubling and what it holds, the probes counted and backed off on
tcp_probe0_when()'s schedule, the window reopened, the aborts of TCP_USER_TIMEOUT and
tcp_retries2.  Then the report on bad raw input, and the fixtures on bad options."""
import os
import subprocess

import pytest

from unit_replay import Report, no_line, missing, write, drop_line, replace, window, REF

NAME = "p04-full-buffers"
R = Report(NAME)
TCP_RTO_MIN_MS = 200                 # include/net/tcp.h
SOCK_MIN_SNDBUF = 4096               # well below any SO_SNDBUF the unit sets (2 * (2048 + skb))


def wmem(j, i):
    return j["sysctls"]["net.ipv4.tcp_wmem"][i]


# ---- the kernel facts, on one report's JSON ------------------------------------------------

def check_buffers(j):
    for name, p in j["parts"].items():
        full = p["full"]
        # EAGAIN for good: the window 0, nothing in flight (fill_sender's stop condition)
        assert full["snd_wnd"] == 0 and full["unacked"] == 0, name
        # every byte send() took is in the receiver's buffer or in the sender's Send-Q
        assert full["accepted"] == p["receiver_unread"] + full["outq"], name
        # sk_stream_memory_free(): a new skb only while sk_wmem_queued < sk_sndbuf, so Send-Q
        # ends at or above the send buffer, by less than one skb of CHUNK bytes
        assert full["outq"] > 0 and full["sndbuf"] > 0, name
        if p["sndbuf_set"]:
            # sk_setsockopt(): min(val, wmem_max) * 2, at least SOCK_MIN_SNDBUF; wmem_max the
            # namespace's, or the initial namespace's where it is not per namespace (6.1)
            cap = j["sysctls"]["net.core.wmem_max"] or j["init_sysctls"]["net.core.wmem_max"]
            want = max(min(p["sndbuf_set"], cap) * 2, SOCK_MIN_SNDBUF)
            assert p["sndbuf_get"] == want == full["sndbuf"], name      # locked: no autotuning
        else:
            assert p["sndbuf_get"] == wmem(j, 1), name                   # tcp_wmem[1] at socket()
            assert wmem(j, 1) <= full["sndbuf"] <= wmem(j, 2), name      # autotuned within it


def check_zero_window(j):
    for name, p in j["parts"].items():
        sc = p["server_counters"]
        assert p["window_closed_ms"] is not None, name
        assert sc["TcpExtTCPToZeroWindowAdv"] >= 1, name
        # the receiver's own view: its sockwatch saw rcv_wnd 0 (tcpi_rcv_wnd) while it held
        # what the sender says is in its buffer
        ev = p["server_events"]
        assert any(e.get("rcv_wnd") == 0 for e in ev) or ev[0].get("rcv_wnd") is None, name
        # ... up to the window's reopening: once the reader drains (SIGUSR1, after it printed
        # `held`), the sender's Send-Q flows in, and a reader slower than it can see more queued
        # than it held (a loaded CI run: rq 130320 after the reopening, 127056 held and before)
        reopen = p["window_reopened_ms"]
        before = [e["rq"] for e in ev if reopen is None or e["t_s"] * 1000 < reopen]
        assert max(before) == p["receiver_unread"], name


def check_probes(j):
    hz, slack = j["hz"], j["sched_slack_ms"]
    for name, p in j["parts"].items():
        probes = p["probes"]
        assert len(probes) >= 3, name
        assert len(probes) == p["counters"]["TcpExtTCPWinProbe"], name     # one count each
        assert p["rto_ms"] == p["full"]["rto_us"] / 1000, name
        base = max(p["rto_ms"], TCP_RTO_MIN_MS)
        for k, pr in enumerate(probes):
            exp = min(base * 2 ** min(k, p["retries2"]), p["rto_max_ms"])
            lo, hi = window(exp, hz, slack)
            assert pr["expected_ms"] == exp, (name, k)
            assert lo <= pr["gap_ms"] <= hi, (name, k, pr["gap_ms"], lo, hi)
        # sockwatch: the persist timer, its backoff never falling while it probes, at most
        # tcp_retries2 (tcp_send_probe0() stops the increments there).  While the window is 0:
        # when it reopens, tcp_ack() updates snd_wnd, then tcp_ack_probe() zeroes the backoff
        # and only then clears the timer, so a sample in between (seen once in CI) shows
        # persist with backoff 0 and the new window.  Only up to the reopening: a reader slower
        # than the sender (CI's sanitize pass) lets the window close again after it, and that
        # second closing starts a new persist timer at backoff 0 (backoffs 0..5, then 0).
        # Samples only: a `gone` line repeats the socket's last sample, stamped when sockwatch
        # found it gone (CI once: persist, snd_wnd 0, backoff 5, after the reopening, when no
        # sample fell between the reopening and the socket's end)
        reopen = p["window_reopened_ms"]
        samples = [e for e in p["events"] if e["event"] != "gone"]
        persist = [e for e in samples if e["timer"] == "persist" and e["snd_wnd"] == 0
                   and (reopen is None or e["t_s"] * 1000 < reopen)]
        assert persist, name
        # The abort (TCP_USER_TIMEOUT, tcp_retries2: ETIMEDOUT): tcp_write_err() ->
        # tcp_done_with_error() -> tcp_write_queue_purge() zeroes icsk_backoff, then tcp_done().
        # sock_diag reads the state, the timer and the queues without the socket's lock and
        # tcp_info (backoff, snd_wnd) under it (6.18's inet_diag.c, tcp_get_info()), so a sample
        # taken as the probe timer aborts can pair the due timer (persist, expires 0) with the
        # zeroed backoff: the socket's last sample, 1 ms before it went (make test, 6 December:
        # backoffs 0, 0, 1, 2, 3, then 0; tests/data/reports/p04-full-buffers-abort-sample)
        last = persist[-1]
        if (p["errno"] == "ETIMEDOUT" and len(persist) > 1 and last is samples[-1]
                and last["expires_ms"] == 0 and last["backoff"] == 0):
            persist = persist[:-1]
        again = [e for e in samples if e["timer"] == "persist" and e["snd_wnd"] == 0
                 and e not in persist and e is not last]
        # a persist sample after the reopening only if the receiver closed its window again
        assert not again or p["server_counters"]["TcpExtTCPToZeroWindowAdv"] >= 2, (name, again)
        b = [e["backoff"] for e in persist]
        assert b == sorted(b) and b[-1] == min(len(probes), p["retries2"]), name


def check_ratelimit(j):
    """A probe is answered unless the receiver's last out-of-window ACK left less than
    tcp_invalid_ratelimit before (tcp_oow_rate_limited(): TCPACKSkippedSeq); away from the
    boundary by two jiffies, which side of it each probe falls on is a fact.  An answer nft
    dropped at the client's input still left the receiver."""
    limit = j["server_sysctls"]["net.ipv4.tcp_invalid_ratelimit"]
    jiffy = 1000 / j["hz"]
    for name, p in j["parts"].items():
        last, skipped = None, 0
        for k, pr in enumerate(p["probes"]):
            if last is not None and abs(pr["t_ms"] - last - limit) > 2 * jiffy:
                assert pr["answered"] == (pr["t_ms"] - last >= limit), (name, k)
            if pr["answered"]:
                last = pr["t_ms"]
            else:
                skipped += 1
        assert p["server_counters"]["TcpExtTCPACKSkippedSeq"] == skipped, name


def check_fill(j, prm):
    p = j["parts"]["fill"]
    assert len(p["probes"]) == prm["fill_probes"]
    assert p["result"] == "ok" and p["errno"] is None
    assert p["server_counters"]["TcpExtTCPFromZeroWindowAdv"] >= 1
    assert p["reopened_win"] > 0 and p["window_reopened_ms"] > p["probes"][-1]["t_ms"]
    # the blocking send() returned only after the window reopened, and every byte arrived
    assert p["result_ms"] >= p["window_reopened_ms"]
    assert p["reader"]["result"] == "eof" and p["reader"]["bytes"] == p["accepted"]
    assert p["counters"]["TcpExtTCPAbortOnTimeout"] == 0


def check_usertimeout(j, prm):
    p = j["parts"]["usertimeout"]
    assert p["user_timeout_set"] and p["user_timeout_ms"] == prm["user_timeout_ms"]
    assert p["result"] == "error" and p["errno"] == "ETIMEDOUT"
    assert p["counters"]["TcpExtTCPAbortOnTimeout"] == 1
    # tcp_probe_timer(): icsk_probes_tstamp at the first probe, abort once user_timeout passed;
    # the probes were answered (tcpi_probes went back to 0), and it aborted all the same
    lo, hi = window(prm["user_timeout_ms"], j["hz"], j["sched_slack_ms"])
    got = p["result_ms"] - p["probes"][0]["t_ms"]
    assert lo <= got <= hi, (got, lo, hi)
    assert p["abort"]["within"] and p["abort"]["unanswered_at_end"] == 0


def check_retries2(j, prm):
    p = j["parts"]["retries2"]
    r2 = prm["retries2"]
    assert p["retries2"] == r2 and not p["user_timeout_set"]
    assert j["sysctls"]["net.ipv4.tcp_retries2"] > r2      # the rest of the unit: the default
    assert p["result"] == "error" and p["errno"] == "ETIMEDOUT"
    assert p["counters"]["TcpExtTCPAbortOnTimeout"] == 1
    # more probes than tcp_retries2 while they were answered: icsk_probes_out reset by tcp_ack()
    assert len(p["probes"]) > r2 and len(p["probes"]) >= prm["r2_before"] + r2
    # then exactly tcp_retries2 unanswered ones (probes_out >= max_probes aborts)
    assert p["abort"]["unanswered_at_end"] == r2 and p["abort"]["within"]
    assert p["dropped_by_rule"] == r2
    last = [e for e in p["events"] if e["timer"] == "persist"][-1]
    assert last["retrans"] == r2


check_all = R.checks(check_buffers, check_zero_window, check_probes, check_ratelimit, check_fill,
                     check_usertimeout, check_retries2)


# ---- the committed reference, replayed -----------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_all)


def test_reference_ss_agrees_with_the_fixture():
    """The independent view: ss's Send-Q and timer:(persist,…) for the fill sender."""
    raw = os.path.join(REF, "raw", NAME)
    with open(os.path.join(raw, "fill-ss.txt")) as f:
        ss = f.read()
    with open(os.path.join(raw, "fill-sender.txt")) as f:
        full = dict(w.split("=", 1) for w in next(x for x in f if x.startswith("full ")).split()
                    if "=" in w)
    assert "timer:(persist," in ss
    assert f" {full['outq']} " in ss.splitlines()[1]


def test_a_gone_line_after_the_reopening_is_not_a_persist_sample(tmp_path):
    """The reference's fill socket went between two samples right after the window reopened:
    its `gone` line (6982.725 ms, after the reopening at 6981.366) repeats the last sample,
    persist at backoff 5.  The receiver closed its window twice in that run; with only one
    closing (what CI saw), the facts still hold: the line is not a second persist timer."""
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(R.broken_copy(tmp_path, replace("fill-server-counters-delta.txt",
                                              "TcpExtTCPToZeroWindowAdv +2",
                                              "TcpExtTCPToZeroWindowAdv +1")), out)
    assert r.returncode == 0, r.stderr
    j = R.load(str(out))
    fill = j["parts"]["fill"]
    assert fill["server_counters"]["TcpExtTCPToZeroWindowAdv"] == 1
    last = fill["events"][-1]
    assert last["event"] == "gone" and last["timer"] == "persist"
    assert last["t_s"] * 1000 > fill["window_reopened_ms"]
    R.check(check_all, out, tmp_path)


def test_a_sample_torn_by_the_abort_is_not_a_falling_backoff(tmp_path):
    """A live run of `make test` (6.18 host, 6 December 2026): the usertimeout socket's last
    sample, 1 ms before it went, shows the persist timer due (expires 0) with backoff 0 after 3:
    read as the probe timer aborted it (tcp_write_queue_purge() zeroes the backoff before
    tcp_done()).  check_probes took it for a backoff that fell while the window was 0."""
    out = tmp_path / "out"
    out.mkdir()
    raw = R.run_data("p04-full-buffers-abort-sample", out)
    p = R.load(str(out))["parts"]["usertimeout"]
    last = [e for e in p["events"] if e["event"] != "gone"][-1]
    assert (p["errno"], last["timer"], last["expires_ms"], last["backoff"]) == (
        "ETIMEDOUT", "persist", 0, 0)
    R.check(check_all, out, os.path.dirname(raw))


# ---- the report on bad raw input ------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("fill-sender.txt"),
    no_line("full", "fill-sender.txt"),
    (drop_line("result=", "usertimeout-sender.txt"), "no `result` line"),
    (drop_line("reading ", "fill-reader.txt"), "the reader did not finish"),
    no_line("end", "retries2-capture.txt"),
    (drop_line("net.ipv4.tcp_retries2", "retries2-sysctl.txt"), "retries2-sysctl.txt"),
    (write("sysctls.txt", "junk\n"), "not net.X.Y=VALUE"),
    (replace("fill-capture.txt", " win=0 ", " win=1 "), "never advertised a zero window"),
])


# ---- the fixtures on bad options (the full table: tests/test_badinput_fixtures.py) ---------

@pytest.mark.parametrize("argv,word", [
    (["fill_sender", "-p", "21040", "-b", "-1"], "out of range"),
    (["fill_sender", "-p", "21040", "-c", "0"], "out of range"),
    (["fill_sender", "-p", "21040", "-u", "x"], "not a whole number"),
    (["fill_sender"], "missing -p"),
    (["stall_reader", "-p", "21040", "-r", "0"], "out of range"),
    (["stall_reader", "-p", "99999"], "-p"),
    (["stall_reader", "-p", "21040", "extra"], "unexpected argument"),
])


def test_fixture_bad_input(bindir, argv, word):
    r = subprocess.run([os.path.join(bindir, argv[0])] + argv[1:], capture_output=True,
                       text=True, timeout=5)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr


# ---- a live run ------------------------------------------------------------------------------

test_live_run_kernel_facts = R.live_test(check_all, timeout=150)


