"""p05-close-wait: a server that reads EOF and never closes.  The kernel facts are asserted on
the committed reference (the report replayed on outputs/RELEASE/raw/, no root) and on a live
run (root, namespaces; the unit waits out the default tcp_fin_timeout, about a minute), each
bound derived from what the run recorded (tcp_fin_timeout, HZ, the capture's ACK of the FIN):
CLOSE-WAIT with no timer still there after the orphan was reaped, the orphan a timewait socket
(substate FIN_WAIT2) reaped near tcp_fin_timeout, the process-held FIN-WAIT-2 with no timer
still there, sockstat's tw, ss's view.  Then the report on bad raw input, and the unit killed
in the middle of its wait: no namespace left behind."""
import os
import signal
import subprocess
import time

import pytest

from unit_replay import Report, no_line, missing, write, drop_line, window, RUN

NAME = "p05-close-wait"
R = Report(NAME)
TW_KILL_S = 4             # __inet_twsk_schedule(): timeo <= 4*HZ is TWKilled, longer TW


def check_orphan(j):
    """The client close()d: an orphan, FIN-WAIT-2 once the ACK of its FIN came, reaped at
    tcp_fin_time() = tcp_fin_timeout (well above 3.5 RTO), a timewait socket when tmo <=
    TCP_TIMEWAIT_LEN (tcp_rcv_state_process) unless the ACK came while close() held the socket
    (then a keepalive timer on the full socket and a RST at the end)."""
    hz, jiffy = j["hz"], 1000 / j["hz"]
    fin_ms = j["sysctls"]["net.ipv4.tcp_fin_timeout"] * 1000
    o = j["conns"]["orphan"]
    w = o["fin_wait2"]
    assert o["closer_op"] == "close"
    assert o["fin_time"]["ms"] == fin_ms and not o["fin_time"]["floored"]
    assert w["timer"] in ("timewait", "keepalive")
    if w["timer"] == "timewait":
        assert w["info_len"] == 0 and w["inode"] == 0
        tw = "TcpExtTW" if fin_ms > TW_KILL_S * 1000 else "TcpExtTWKilled"
        assert j["counters"][tw] == 1
    assert w["inode"] == 0                       # no process holds it: an orphan
    assert abs(w["armed_ms"] - fin_ms) <= 2 * jiffy, w
    lo, hi = window(fin_ms, hz, j["sched_slack_ms"])
    assert lo <= w["lived_ms"] <= hi, (w["lived_ms"], lo, hi)
    assert w["gone_state"] == "FIN-WAIT-2"
    assert not any(e["state"] == "TIME-WAIT" for e in o["events"])   # no FIN ever came back


def check_held(j):
    """shutdown(SHUT_WR) without close(): FIN-WAIT-2 on a full socket a process holds, no
    timer (no orphan: tcp_rcv_state_process only wakes the process), there after the orphan
    went."""
    h = j["conns"]["held"]
    w = h["fin_wait2"]
    assert h["closer_op"] == "shutdown-wr"
    assert w["kind"] == "full socket" and w["timer"] == "off" and w["inode"] > 0
    assert w["gone_ms"] is None
    held = j["after"]["held_fin_wait2"]
    assert len(held) == 1 and held[0]["state"] == "FIN-WAIT-2" and held[0]["timer"] == "off"
    assert held[0]["inode"] == w["inode"]


def check_close_wait(j):
    """Both servers read EOF and hold their socket: CLOSE-WAIT, no timer, still there after
    the orphan's FIN_WAIT2 timer (tcp_fin_timeout) had fired: held longer than it."""
    # the server's own sockwatch first, then ss, then the snapshot: a make test run once found
    # the orphan's CLOSE-WAIT missing from the snapshot (states [None, 'CLOSE-WAIT']), and the
    # order says which reader lost it
    for name, c in j["conns"].items():
        assert [e["state"] for e in c["server_events"]][-1] == "CLOSE-WAIT", name
        assert all(e["event"] != "gone" for e in c["server_events"]), name
    ss = j["ss"]["after_server"]
    assert ss is None or [s["state"] for s in ss].count("CLOSE-WAIT") == 2, ss
    cw = j["after"]["close_wait"]
    assert [x["state"] for x in cw] == ["CLOSE-WAIT", "CLOSE-WAIT"], j["after"]["server"]
    assert all(x["timer"] == "off" and x["expires_ms"] == 0 for x in cw)
    # held across the orphan's whole FIN-WAIT-2 (which check_orphan bounds by tcp_fin_timeout):
    # the snapshot came after the orphan went, and each socket's EOF before it.  Not "held_s >
    # tcp_fin_timeout" for both: the held connection starts after the orphan's, so at
    # fin_timeout=5 a CI run had it at 4.96 s, its EOF 0.24 s after the orphan's timer was armed
    w = j["conns"]["orphan"]["fin_wait2"]
    after_ms = j["after"]["t_s_from_orphan"] * 1000
    assert w["gone_ms"] is not None and after_ms >= w["gone_ms"], (after_ms, w["gone_ms"])
    assert all(x["held_s"] * 1000 > after_ms - w["gone_ms"] for x in cw), cw
    orphan = next(x for x in cw if x["conn"] == "orphan")
    assert orphan["held_s"] * 1000 >= w["gone_ms"] - j["conns"]["orphan"]["eof_ms"] - 1, orphan
    assert j["server_counters"]["TcpPassiveOpens"] == 2


def check_sockstat_ss(j):
    """sockstat's tw (per namespace) counts the orphan's timewait socket, then not; ss -tano
    shows it with timer:(timewait,...) and both CLOSE-WAIT sockets with no timer, before and
    after."""
    if j["conns"]["orphan"]["fin_wait2"]["timer"] == "timewait":
        assert j["sockstat"]["start"]["tw"] == 1 and j["sockstat"]["after"]["tw"] == 0
    ss = j["ss"]
    if ss["start_client"] is None:
        return                                   # no ss where this ran
    port = str(j["conns"]["orphan"]["port"])
    orphan = [s for s in ss["start_client"] if s["peer"].endswith(":" + port)]
    assert len(orphan) == 1 and orphan[0]["state"] == "FIN-WAIT-2"
    assert not [s for s in ss["after_client"] if s["peer"].endswith(":" + port)]
    for when in ("start_server", "after_server"):
        cw = [s for s in ss[when] if s["state"] == "CLOSE-WAIT"]
        assert len(cw) == 2 and all(s["timer"] is None for s in cw), when


check_all = R.checks(check_orphan, check_held, check_close_wait, check_sockstat_ss)


def check_reference(out):
    j = check_all(out)
    assert j["sysctls"]["net.ipv4.tcp_fin_timeout"] == 60     # the unit runs at the default
    return j


# ---- the committed reference, replayed -----------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_reference)


# ---- the report on bad raw input ------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("orphan-client.txt"),
    no_line("exit", "held-server.txt"),
    (drop_line("step ", "orphan-server.txt"), "no `drain` step"),
    no_line("end", "sockwatch.txt"),
    no_line("end", "held-capture.txt"),
    (drop_line("t_s=", "after-server-snap.txt"), "the CLOSE-WAIT ones are gone"),
    (drop_line("TCP:", "start-sockstat.txt"), "no `TCP:` line"),
    (drop_line("net.ipv4.tcp_fin_timeout", "sysctls.txt"), "no net.ipv4.tcp_fin_timeout"),
    (write("status.txt", "timed out after 180 s\n"), "partial output"),
])


# ---- live: a run, and a run killed in the middle of its wait ---------------------------------

test_live_run_kernel_facts = R.live_test(check_all, timeout=240)


# ---- the knob fin_timeout ------------------------------------------------------------------

test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = R.knob_tests(
    [("FIN_TIMEOUT", "3"), ("FIN_TIMEOUT", "61"), ("FIN_TIMEOUT", "x"), ("FIN_TIMEOUT", "05")],
    ["fin_timeout=0", "fin_timeout=3", "fin_timeout=120"])


@pytest.mark.timing
@pytest.mark.netns
@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_live_run_with_fin_timeout(tmp_path, bindir):
    """--set fin_timeout=5 (about 10 s, not 65): tcp_fin_timeout 5 in the client's namespace
    only; the orphan reaped near 5 s and, being over 4 s, counted TW; the two CLOSE-WAIT
    sockets and the held FIN-WAIT-2 still there after it, as check_all asserts from what the
    run recorded."""
    r = subprocess.run([RUN, "--out", str(tmp_path), "--set", "fin_timeout=5", NAME],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    j = check_all(str(tmp_path))
    assert j["knobs"] == {"fin_timeout": 5}
    assert j["sysctls"]["net.ipv4.tcp_fin_timeout"] == 5
    assert j["server_sysctls"]["net.ipv4.tcp_fin_timeout"] == 60     # its namespace's default
    assert j["conns"]["orphan"]["fin_time"]["ms"] == 5000
    assert j["conns"]["orphan"]["fin_wait2"]["lived_ms"] < 6000
    assert "knobs: fin_timeout=5 " in (tmp_path / f"{NAME}.txt").read_text()


def namespaces_of(pid):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [w.split()[0] for w in out.splitlines() if w.startswith(f"tcplab-{pid}-")]


@pytest.mark.netns
@pytest.mark.interrupt
# about 10 s each (70-80 s while run.sh's mawk held the progress line back), in make check:
# make test kills p06-time-wait in its wait (test_reliability_interrupt)
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_killed_in_the_wait_leaves_no_namespace(tmp_path, bindir, sig):
    """Killed while it waits for the orphan's timer (its progress line says so): run.sh's trap
    deletes both namespaces; after SIGKILL (no trap) the next run.sh reaps them."""
    p = subprocess.Popen([RUN, "--out", str(tmp_path), NAME], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "still there" in line and "into the wait" in line:
            break
    assert namespaces_of(p.pid), "".join(seen[-20:])
    os.killpg(p.pid, sig)
    p.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while namespaces_of(p.pid) and time.monotonic() < deadline:
        if sig == signal.SIGKILL:
            # no trap ran: the next run.sh reaps what a dead run left (once the dead run's
            # lock holder is gone too; any run.sh on this host may be the one that does it)
            r = subprocess.run([RUN, "--out", str(tmp_path / "again"), "p01-machine"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-2000:]
        else:
            time.sleep(0.1)     # polling for the trap's deletion, with a deadline
    assert not namespaces_of(p.pid)
