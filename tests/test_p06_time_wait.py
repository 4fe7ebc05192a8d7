"""p06-time-wait: who keeps TIME-WAIT after an orderly close, and for how long.  The same kernel
facts are asserted on the committed reference (the report replayed on outputs/RELEASE/raw/, no
root) and on a live run (./run.sh --out TMP p06-time-wait, root and namespaces, about a minute),
each bound derived from what that run recorded (HZ, the sysctls) and the kernel's constants
(TCP_TIMEWAIT_LEN, the timer wheel's levels), never from a speed: the closer keeps TIME-WAIT and
the other side does not, the timer is armed when the last FIN arrives, the socket goes within
the wheel's granularity after the expiry it asked for, TcpExtTW and sockstat's tw count it in its
own namespace only.  Then the report on bad raw input."""
import re
import subprocess

import pytest

from unit_replay import (Report, no_line, missing, write, drop_lines, replace, wheel_gran_ms,
                         RUN, REF)

NAME = "p06-time-wait"
R = Report(NAME)
TCP_TIMEWAIT_LEN_MS = 60000        # include/net/tcp.h: TCP_TIMEWAIT_LEN (60*HZ)


# ---- the kernel facts, on one report's JSON --------------------------------------------------

def check_who(j):
    """The side that closed first keeps TIME-WAIT; the other never shows it and is gone as soon
    as the closer's last ACK reaches it (LAST-ACK ends in tcp_done()).  Its CLOSE-WAIT and
    LAST-ACK last less than a millisecond on the veth, so a 1 ms sockwatch may see neither.
    The server's TIME-WAIT socket sits on the listening port."""
    slack = j["sched_slack_ms"]
    for name, c in j["cases"].items():
        assert c["timewait_side"] == c["closer"], name
        other = c["events"][c["no_timewait_side"]]
        assert all(e["state"] != "TIME-WAIT" and e["timer"] != "timewait" for e in other), name
        assert other[-1]["event"] == "gone", name
        assert abs(c["no_timewait_gone_ms"] - c["last_ack_ms"]) <= slack, name
        assert c["last_ack_ms"] > c["fin_last_ms"] > c["fin_first_ms"], name
        # the other side closed after the closer's FIN had come (it read EOF first)
        assert c["close_ms"][c["no_timewait_side"]] >= c["fin_first_ms"] - 1, name
    sc = j["cases"]["server-closes"]
    assert sc["timewait_local"] == sc["server"] and sc["timewait_local"].endswith(f":{sc['port']}")
    cc = j["cases"]["client-closes"]
    assert cc["timewait_local"] == cc["client"]


def check_timer(j):
    """The timewait socket: timer kind timewait, no tcp_info, no inode; its timer armed when the
    last FIN came (TCP_TIMEWAIT_LEN from then), gone within the wheel's granularity after it."""
    hz, slack = j["hz"], j["sched_slack_ms"]
    jiffy = 1000 / hz
    gran = wheel_gran_ms(TCP_TIMEWAIT_LEN_MS, hz)
    assert j["wheel_gran_ms"] == gran
    for name, c in j["cases"].items():
        tw = [e for e in c["events"][c["timewait_side"]] if e["state"] == "TIME-WAIT"]
        assert tw and all(e["timer"] == "timewait" and e["info_len"] == 0 and e["inode"] == 0
                          for e in tw), name
        assert 0 < c["seen_expires_ms"] <= TCP_TIMEWAIT_LEN_MS, name
        # a sockwatch line is stamped before its dump: each t + expires_ms is a lower bound of
        # the expiry, the report keeps the latest; each look may be late by the slack
        fin = c["fin_last_ms"]
        assert c["first_expiry_ms"] <= c["expiry_ms"], name
        assert fin - 2 * jiffy - slack <= c["armed_ms"] <= fin + 2 * jiffy + slack, \
            (name, c["armed_ms"], fin)
        assert -jiffy - slack <= c["late_ms"] <= gran + 2 * jiffy + slack, \
            (name, c["late_ms"], gran)
        assert TCP_TIMEWAIT_LEN_MS - jiffy <= c["lasted_ms"] <= \
            TCP_TIMEWAIT_LEN_MS + gran + 2 * jiffy + slack, (name, c["lasted_ms"])
        assert c["within"], name
        if c["timer_first_state"] == "FIN-WAIT-2":
            # an orphan in FIN_WAIT2 made a timewait socket at once, tcp_fin_timeout long (it is
            # not above TCP_TIMEWAIT_LEN: tcp_rcv_state_process()); the FIN re-armed it
            fin_timeout = j["sysctls"]["net.ipv4.tcp_fin_timeout"]
            assert fin_timeout * 1000 <= TCP_TIMEWAIT_LEN_MS, name
            assert c["timer_first_expires_ms"] <= fin_timeout * 1000, name


def check_countdown(j):
    """Every snapshot shows the same expiry (t + expires_ms) within a jiffy or two: nothing
    re-armed the timer while it waited; ss, rounding to seconds, says the same."""
    jiffy, slack = 1000 / j["hz"], j["sched_slack_ms"]
    for name, c in j["cases"].items():
        cd = c["countdown"]
        assert len(cd) >= 2, name
        assert all(x["state"] == "TIME-WAIT" and x["timer"] == "timewait" for x in cd), name
        assert [x["expires_ms"] for x in cd] == sorted((x["expires_ms"] for x in cd),
                                                       reverse=True), name
        assert cd[0]["expires_ms"] > 0, name
        assert c["countdown_spread_ms"] <= 2 * jiffy + slack, name
        # a snapshot after the expiry asked for: 0 (jiffies_delta_to_msecs() of a past expiry)
        assert all(x["t_ms"] >= c["expiry_ms"] - jiffy - slack for x in c["past_expiry"]), name
        assert abs(cd[0]["expiry_ms"] - c["expiry_ms"]) <= 2 * jiffy + slack, name
        if c["ss"] is not None:
            # ss looked between two snapshots, and drops the ms above 9 s (print_ms_timer())
            before, after = c["ss"]["between_ms"]
            assert after - 1000 - jiffy <= c["ss"]["timer_ms"] <= before + jiffy, name


def check_counters(j):
    """TcpExtTW counts each timewait socket once, when its timer is first armed (longer than
    4 s: not TWKilled), in its own namespace: the client's for client-closes, the server's for
    server-closes; so both namespaces count one, already while the sockets wait."""
    for key in ("counters", "server_counters", "during_counters", "during_server_counters"):
        d = j[key]
        assert d["TcpExtTW"] == 1, key
        for k in ("TcpExtTWKilled", "TcpExtTCPTimeWaitOverflow", "TcpExtTWRecycled",
                  "TcpEstabResets", "TcpOutRsts", "TcpExtTCPAbortOnClose"):
            assert d.get(k) in (None, 0), (key, k)
    assert j["counters"]["TcpActiveOpens"] == 2 and j["server_counters"]["TcpPassiveOpens"] == 2
    assert j["sysctls"]["net.ipv4.tcp_max_tw_buckets"] >= 1      # else no TIME-WAIT at all


def check_sockstat(j):
    """sockstat's tw is the namespace's own (tcp_death_row.tw_refcount - 1): one in each while
    the sockets wait, none before or after."""
    for side in ("client", "server"):
        st = j["sockstat"][side]
        assert st["before"]["tw"] == 0 and st["after"]["tw"] == 0, side
        assert st["during"]["tw"] == 1, side
        # a timewait socket is not a full one: inuse does not count it
        assert st["during"]["inuse"] == 0, side


check_all = R.checks(check_who, check_timer, check_countdown, check_counters, check_sockstat)


# ---- the committed reference, replayed -------------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_all)


def test_reference_sysctls_are_recorded_flat():
    """Every sysctl TIME-WAIT depends on, each side's, as name=value (absent where the kernel
    has none: tcp_tw_recycle went in 4.12, tcp_tw_reuse_delay came in 6.14)."""
    j = R.load(REF)
    for key in ("sysctls", "server_sysctls"):
        s = j[key]
        for k in ("net.ipv4.tcp_max_tw_buckets", "net.ipv4.tcp_tw_reuse",
                  "net.ipv4.tcp_tw_reuse_delay", "net.ipv4.tcp_timestamps",
                  "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_rfc1337", "net.ipv4.tcp_tw_recycle",
                  "net.ipv4.ip_local_port_range"):
            assert k in s, (key, k)
        assert s["net.ipv4.tcp_tw_recycle"] is None


# ---- the report on bad raw input -------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("client-closes-sockwatch.txt"),
    no_line("end", "client-closes-sockwatch.txt"),
    no_line("ready", "server-closes-server.txt"),
    (drop_lines("client-closes-client.txt", lambda x: " op=close " in x), "no close step"),
    no_line("exit", "client-closes-client.txt"),
    (replace("server-closes-server-sockwatch.txt", "state=TIME-WAIT", "state=CLOSING"),
     "0 sides in TIME-WAIT"),
    (replace("client-closes-capture.txt", " flags=FA ", " flags=A "), "not both FINs"),
    missing("countdown.txt"),
    (replace("sockstat-during.txt", " tw ", " tx "), "has no tw"),
    (drop_lines("sysctls.txt", lambda x: x.startswith("net.ipv4.tcp_timestamps=")),
     "no net.ipv4.tcp_timestamps="),
    (replace("machine.txt", "hz=", "hx="), "no hz="),
    (write("during-server-counters-delta.txt", "junk\n"), "not `Name delta`"),
])


def test_report_without_ss_still_reports(tmp_path):
    """ss is an independent view, not the measurement: where there is none (busybox in the
    guest has no ss), the report says nothing of it and still reports."""
    def edit(d):
        (d / "ss.txt").unlink()
        (d / "server-ss.txt").unlink()
    out = tmp_path / "out"
    r = R.run(R.broken_copy(tmp_path, edit), str(out))
    assert r.returncode == 0, r.stderr
    j = R.load(str(out))
    assert all(c["ss"] is None for c in j["cases"].values())
    check_all(str(out))


PROGRESS_LINE = re.compile(r"\[%s\] TIME-WAIT, waited ([0-9]+) s: the client's socket "
                           r"\(client-closes\) (?:timer ([0-9]+) ms|gone)" % NAME)


def check_progress(stderr, progress_s=5, slack_ms=3000):
    """The progress while it waits: a line every progress_s s or more, each from a kernel
    snapshot, and its "waited N s" the clock's: between two lines the client's TIME-WAIT timer
    went down by the seconds waited between them, within slack_ms (whole seconds, and the
    snapshot's own latency).  A loaded CI run once counted waitfor turns of 2.3 s each as 1 s."""
    lines = [PROGRESS_LINE.search(x) for x in stderr.splitlines() if "TIME-WAIT, waited " in x]
    assert lines and None not in lines, stderr[-3000:]
    waited = [int(m.group(1)) for m in lines]
    assert len(waited) >= 3 and all(w >= progress_s * k for k, w in enumerate(waited, 1)), waited
    timed = [(int(m.group(1)), int(m.group(2))) for m in lines if m.group(2)]
    assert len(timed) >= 2, stderr[-3000:]
    (w0, t0), (w1, t1) = timed[0], timed[-1]
    assert abs((t0 - t1) - (w1 - w0) * 1000) <= slack_ms, (timed, stderr[-3000:])


def test_progress_check_fails_on_counted_turns():
    """check_progress() refuses the lines of that loaded run (5 "s" per 11.6 s of timer) and
    takes lines whose waited agrees with the timer."""
    def lines(pairs):
        return "".join(f"[{NAME}] TIME-WAIT, waited {w} s: the client's socket (client-closes) "
                       f"timer {t} ms, the server's (server-closes) timer {t - 900} ms\n"
                       for w, t in pairs)
    with pytest.raises(AssertionError):
        check_progress(lines([(5, 33848), (10, 22192), (15, 11280)]))
    check_progress(lines([(5, 33848), (10, 28900), (16, 22800)]))
    with pytest.raises(AssertionError):
        check_progress(lines([(3, 33848), (10, 28900), (16, 22800)]))


# ---- a live run ------------------------------------------------------------------------------

@pytest.mark.netns
def test_live_run_kernel_facts(tmp_path, bindir):
    r = subprocess.run([RUN, "--out", str(tmp_path), NAME], capture_output=True, text=True,
                       timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    check_progress(r.stderr)
    check_all(str(tmp_path))
