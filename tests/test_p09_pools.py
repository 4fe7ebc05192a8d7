"""p09-pools: a kept connection reused after an idle time.  The same kernel facts are asserted
on the committed reference (the report replayed on outputs/RELEASE/raw/, no root) and on a live
run of each unit (./run.sh --out TMP UNIT, root and namespaces), each bound derived from what
that run recorded (params.txt, HZ), never from a speed.
p09-stale-reuse: the server's idle timeout closes first; reused in CLOSE-WAIT (the FIN unread),
the request is written, the server answers one RST, the read returns the queued FIN's EOF and a
second write EPIPE; with the FIN lost (still ESTABLISHED) the read gets ECONNRESET; checked
before reuse, MSG_PEEK returns 0 and a new connection carries the request, with no RST.
p09-keepalive: a middlebox drops the idle flow; the probes leave at IDLE + k*INTVL after the last
segment received, within the timer wheel's tolerance, TCPKeepAlive counts them, and the blocked
read gets ETIMEDOUT.
p09-curl-nginx: libcurl against nginx.  Requests closer together than keepalive_timeout share one
connection (NUM_CONNECTS 1, then 0s; one SYN; nginx's $connection_requests 1..N).  After an idle
time, nginx's FIN comes keepalive_timeout after its reply, the client's socket waits in
CLOSE-WAIT, and libcurl's next request finds it dead before reuse ("seems to be dead"): no data
on it, no RST, a new connection.  With nginx's FIN lost the check passes, the GET meets a RST,
and libcurl retries it on a new connection ("Connection died, retrying a fresh connect").  No
nginx is left after the run, nor after SIGINT.
p09-pool-saves: N requests each on a new connection take N handshakes (SYNs on the wire,
tcpdump's own count, TcpActiveOpens/PassiveOpens), N local ports and leave N TIME-WAIT sockets
on the client; on one kept connection 1 of each, and fewer segments.  Times are reported,
never asserted.  After an idle time longer than the RTO, with tcp_slow_start_after_idle=1 the
first flight is at most the cwnd tcp_cwnd_restart() gives (below the cwnd before), with 0 it is
above the initial window; tcp_info's cwnd is unchanged until the next send.  Then bad input: a
knob out of range, bad raw files.
The four guests' references (outputs/<guest release>/raw/p09-*, run under QEMU with vm.txt)
show the same facts (TcpExtTW where the kernel counts it within the part), and the report says
which of a guest's times are not timers."""
import os
import subprocess

import pytest

from conftest import (TOP, assert_every_guest_has, guest_raw_copy, guest_reference_dirs,
                      reference_dirs)
from unit_replay import Report, PY, REF, RUN, missing, replace, window

NAME = "p09-pools"
STALE, KA, SAVES = "p09-stale-reuse", "p09-keepalive", "p09-pool-saves"
CURL = "p09-curl-nginx"
R = Report(NAME)
SCRIPTS = {u: os.path.join(os.path.dirname(R.path), u + ".sh") for u in (STALE, KA, SAVES, CURL)}
# nginx's keepalive timer is its own (event timer, ms, from its cached clock): it may fire a
# little before keepalive_timeout after the reply's segment left, and late by what a loaded
# machine delays a process waking from epoll_wait()
NGINX_EARLY_MS, NGINX_LATE_MS = 10, 250
SLACK_MS = 10
INIT_CWND = 10      # TCP_INIT_CWND


def params(raw):
    with open(os.path.join(raw, "params.txt")) as f:
        return {k: int(v) for k, v in (w.split("=", 1) for w in f.read().split())}


# ---- the kernel facts ------------------------------------------------------------------------

def check_stale(j, prm):
    parts = j[STALE]["parts"]
    reuse, finlost, check = parts["reuse"], parts["finlost"], parts["check"]
    # the pool's socket when reused: CLOSE-WAIT with the FIN unread (rq counts the FIN's 1);
    # the server's orphan in FIN-WAIT-2
    assert reuse["client_state_before"] == "CLOSE-WAIT" and reuse["client_rq_before"] == 1
    assert reuse["server_state_before"] == "FIN-WAIT-2"
    assert reuse["server_fins"] == 1 and reuse["server_rsts"] == 1
    # the write succeeds (only queued); the read finds the FIN still queued: EOF, not an error;
    # the RST left EPIPE for the next write (tcp_reset() in CLOSE-WAIT)
    assert reuse["write2_ret"] == prm["request"]
    assert reuse["read2_ret"] == 0 and reuse["read2_errno"] == "none"
    assert reuse["write3_ret"] == -1 and reuse["write3_errno"] == "EPIPE"
    assert reuse["counters_client"]["TcpEstabResets"] == 1
    assert reuse["counters_server"]["TcpOutRsts"] == 1
    # the timewait socket's RST (TCP_TW_RST), not a full socket's abort
    assert reuse["counters_server"]["TcpExtTCPAbortOnData"] == 0
    # FIN lost: ESTABLISHED when reused, the server a full FIN-WAIT-1 socket: ECONNRESET
    assert finlost["client_state_before"] == "ESTAB"
    assert finlost["server_state_before"] == "FIN-WAIT-1"
    assert finlost["server_rsts"] == 1
    assert finlost["write2_ret"] == prm["request"]
    assert finlost["read2_ret"] == -1 and finlost["read2_errno"] == "ECONNRESET"
    assert finlost["write3_errno"] == "EPIPE"
    assert finlost["counters_server"]["TcpExtTCPAbortOnData"] == 1
    assert finlost["counters_client"]["TcpEstabResets"] == 1
    # checked first: MSG_PEEK says 0 (EOF), POLLRDHUP set; a new connection, no RST anywhere
    assert check["client_state_before"] == "CLOSE-WAIT"
    assert check["peek_ret"] == 0 and check["peek_errno"] == "none"
    assert "rdhup" in check["rdhup_revents"].split("|")
    assert check["reconnect_us"] is not None and check["new_conn_reply"] == prm["reply"]
    assert check["server_rsts"] == 0
    assert check["counters_client"]["TcpActiveOpens"] == 2
    assert check["counters_client"]["TcpEstabResets"] == 0
    # ss saw the reused socket in CLOSE-WAIT, its FIN in Recv-Q
    ss = j[STALE]["ss"]
    if ss is not None:
        assert [s["local"] for s in ss] == [reuse["client"]]
        assert ss[0]["line"].split()[0] == "1"


def check_keepalive(j, prm):
    k = j[KA]
    idle, intvl, cnt = prm["keepidle"], prm["keepintvl"], prm["keepcnt"]
    assert k["set"] == {"idle_s": idle, "intvl_s": intvl, "cnt": cnt}
    assert k["probes"] == cnt and k["resets_sent"] == 1
    steps = k["schedule"]
    assert [s["what"] for s in steps] == [f"probe {i + 1}" for i in range(cnt)] + ["reset"]
    # each probe (and the reset) IDLE, then INTVL, after the one before, within the wheel's
    # tolerance: the test's own window, not the report's
    for n, s in enumerate(steps):
        exp = (idle if n == 0 else intvl) * 1000
        # the first: two jiffies more (the timer SO_KEEPALIVE armed re-arms for the rest)
        lo, hi = window(exp, k["hz"], SLACK_MS + (2000 / k["hz"] if n == 0 else 0))
        assert lo <= s["gap_ms"] <= hi, s
        assert s["expected_ms"] == idle * 1000 + n * intvl * 1000
    assert k["final_read"]["ret"] == -1 and k["final_read"]["errno"] == "ETIMEDOUT"
    last = steps[-1]["after_last_rx_ms"]
    assert last <= k["final_read"]["after_last_rx_ms"] <= last + 100
    c = k["counters_client"]
    assert c["TcpExtTCPKeepAlive"] == cnt and c["TcpExtTCPAbortOnTimeout"] == 1
    assert c["TcpEstabResets"] == 1 and c["TcpOutRsts"] == 1
    # the server never heard them: the middlebox dropped every probe
    assert k["counters_server"].get("TcpExtTCPKeepAlive", 0) == 0
    # sockwatch: the keepalive timer armed, icsk_probes_out counting 1..CNT
    seq = [e["probes"] for e in k["keepalive_timer"] if e["timer"] == "keepalive"]
    assert seq and seq == sorted(seq) and set(seq) - {0} == set(range(1, cnt + 1)), seq
    if k["ss"] is not None:
        assert len(k["ss"]) == 1 and k["ss"][0]["timer"].startswith("keepalive,")


def restart(cwnd, rto_ms, idle_ms):
    """tcp_cwnd_restart() (net/ipv4/tcp_output.c), written again here: the test's own."""
    c, floor = cwnd, min(INIT_CWND, cwnd)
    while (idle_ms := idle_ms - rto_ms) > 0 and c > floor:
        c >>= 1
    return max(c, floor)


def tw_counted_in_part(kernel):
    """Whether TcpExtTW moves within the part: from 5.18 a TIME-WAIT socket is counted when its
    timer is armed; before, when the timer ends, 60 s on (the report's note at SAVE_C)."""
    major, minor = (int(x) for x in kernel.split("-")[0].split(".")[:2])
    return (major, minor) >= (5, 18)


def check_saves(j, prm):
    parts = j[SAVES]["parts"]
    n = prm["requests"]
    new, kept = parts["new"], parts["kept"]
    for p in (new, kept):
        assert p["requests"] == n and len(p["request_us"]) == n
    # a handshake per connection: the SYNs on the wire, tcpdump's count of the same .pcap, the
    # counters on each side in its own namespace
    assert new["syns"] == new["synacks"] == new["connections"] == n
    assert new["tcpdump_syns"] in (None, n)
    assert new["counters_client"]["TcpActiveOpens"] == n
    assert new["counters_server"]["TcpPassiveOpens"] == n
    assert kept["syns"] == kept["synacks"] == kept["connections"] == 1
    assert kept["tcpdump_syns"] in (None, 1)
    assert kept["counters_client"]["TcpActiveOpens"] == 1
    assert kept["counters_server"]["TcpPassiveOpens"] == 1
    # the client closes first: one TIME-WAIT socket per connection, on its own port
    assert len(set(new["local_ports"])) == n and len(set(kept["local_ports"])) == 1
    assert new["timewait"] == n and sorted(new["local_ports"]) == new["timewait_ports"]
    assert kept["timewait"] == 1 and kept["timewait_ports"] == kept["local_ports"]
    assert new["ss_timewait"] in (None, n) and kept["ss_timewait"] in (None, 1)
    if tw_counted_in_part(j["kernel"]):
        assert new["counters_client"]["TcpExtTW"] == n and kept["counters_client"]["TcpExtTW"] == 1
    else:
        assert "TcpExtTW" not in new["counters_client"] and "TcpExtTW" not in kept["counters_client"]
    # segments: at least 8 per new connection (3 to open, request, reply, 3 to close); the kept
    # connection at most 4 per request and 6 to open and close
    assert new["segments"] >= 8 * n
    assert 2 * n + 6 <= kept["segments"] <= 4 * n + 6 < new["segments"]
    idle, off = parts["idle"], parts["idle-off"]
    for p, ssai in ((idle, 1), (off, 0)):
        assert p["slow_start_after_idle"] == ssai and p["cc"] == "cubic"
        # the cwnd is restarted when the next data is sent, not when the idle time ends
        assert p["cwnd_idle_end"] == p["cwnd_before"] > INIT_CWND
        assert p["gap_ms"] >= prm["idle_ms"] and p["first_flight_segments"] >= 1
    hi = max(restart(idle["cwnd_before"], idle["rto_ms"], idle["gap_ms"] + d) for d in (-5, 5))
    assert hi < idle["cwnd_before"]
    assert idle["first_flight_segments"] <= hi
    assert INIT_CWND < off["first_flight_segments"] <= off["cwnd_before"]


def check_curl(j, prm):
    c = j[CURL]
    n, ka = prm["requests"], prm["keepalive_ms"]
    assert c["keepalive_ms"] == ka and c["requests"] == n
    kept, idle, lost = c["parts"]["kept"], c["parts"]["idle"], c["parts"]["finlost"]
    for p in (kept, idle, lost):
        assert [q["n"] for q in p["requests"]] == list(range(1, n + 1))
        assert all(q["error"] == "CURLE_OK" and q["code"] == 200 and q["bytes"] == prm["body"]
                   for q in p["requests"]), p["requests"]
        # nginx armed its keepalive timer with keepalive_timeout (its debug log)
        assert p["nginx"]["keepalive_timer_ms"] == [ka]
        # nginx's FINs: at least one per connection (it closed the first, answered the
        # client's close of the last); one nobody acknowledged is sent again, so finlost's
        # first may count 2 when its retransmission leaves before the GET (a slow client)
        assert p["fins_server"] == sum(c["server_fins"] for c in p["connections"])
        assert all(c["server_fins"] >= 1 for c in p["connections"])
        if p is not lost:
            assert all(c["server_fins"] == 1 for c in p["connections"])
        # tcpdump's own reading of the same .pcap: the same SYNs, FINs and RSTs
        if p["tcpdump"] is not None:
            assert p["tcpdump"] == {"syns": p["syns"], "fins_server": p["fins_server"],
                                    "rsts": p["rsts"]}
    for p in (kept, idle):
        assert p["rsts"] == 0 and p["counters_client"]["TcpEstabResets"] == 0
        assert p["counters_server"]["TcpOutRsts"] == 0
    # kept: one connection for all: libcurl made 1, then reused it; one SYN, one port
    assert [q["connects"] for q in kept["requests"]] == [1] + [0] * (n - 1)
    assert len({q["local_port"] for q in kept["requests"]}) == 1
    assert kept["syns"] == 1 and len(kept["connections"]) == 1
    assert kept["connections"][0]["requests"] == n and kept["connections"][0]["first_fin"] == "client"
    assert all("Re-using existing connection" in " ".join(q["libcurl"]) for q in kept["requests"][1:])
    assert kept["nginx"]["requests_per_connection"] == {"1": list(range(1, n + 1))}
    assert kept["counters_client"]["TcpActiveOpens"] == 1
    assert kept["counters_server"]["TcpPassiveOpens"] == 1
    # idle: nginx closed the idle connection first, keepalive_timeout after its reply
    first, second = idle["connections"][0], idle["connections"][1]
    assert len(idle["connections"]) == 2 and idle["syns"] == 2
    assert first["first_fin"] == "server" and first["requests"] == 1
    assert ka - NGINX_EARLY_MS <= first["server_fin_after_reply_ms"] <= ka + NGINX_LATE_MS
    assert idle["pause_ms"] >= ka and idle["pause_before"] == 2
    assert idle["client_state_before"] == "CLOSE-WAIT" and idle["client_rq_before"] == 1
    assert idle["server_state_before"] == "FIN-WAIT-2"
    # libcurl checked before reuse, found the FIN, wrote nothing on it: a new connection
    q2 = idle["requests"][1]
    assert [q["connects"] for q in idle["requests"]] == [1, 1] + [0] * (n - 2)
    assert q2["local_port"] != idle["requests"][0]["local_port"] == first["local_port"]
    assert any("seems to be dead" in x for x in q2["libcurl"]), q2["libcurl"]
    assert not any("Re-using" in x for x in q2["libcurl"])
    assert second["requests"] == n - 1 and second["local_port"] == q2["local_port"]
    assert idle["counters_client"]["TcpActiveOpens"] == 2
    assert idle["nginx"]["requests_per_connection"] == {"1": [1], "2": list(range(1, n))}
    assert idle["nginx"]["closed_by_nginx"] == [1] and idle["nginx"]["closed_by_client"] == [2]
    if idle["ss"] is not None:
        assert len(idle["ss"]) == 1 and idle["ss"][0]["line"].split()[0] == "1"
    # finlost: the FIN never reached the client's TCP: ESTABLISHED, the check passes, the GET
    # goes out on the connection, nginx's orphaned FIN-WAIT-1 socket answers it with a RST
    # (TCPAbortOnData), and libcurl retries the request on a new connection: still CURLE_OK
    lfirst = lost["connections"][0]
    assert len(lost["connections"]) == 2 and lost["syns"] == 2
    assert lfirst["first_fin"] == "server" and lfirst["requests"] == 2 and lfirst["rsts"] == 1
    assert ka - NGINX_EARLY_MS <= lfirst["server_fin_after_reply_ms"] <= ka + NGINX_LATE_MS
    assert lost["client_state_before"] == "ESTAB" and lost["client_rq_before"] == 0
    assert lost["server_state_before"] == "FIN-WAIT-1"
    assert lost["rsts"] == 1 and lost["counters_client"]["TcpEstabResets"] == 1
    assert lost["counters_server"]["TcpOutRsts"] == 1
    assert lost["counters_server"]["TcpExtTCPAbortOnData"] == 1
    l2 = lost["requests"][1]
    assert [q["connects"] for q in lost["requests"]] == [1, 1] + [0] * (n - 2)
    assert any("Re-using existing connection #0" in x for x in l2["libcurl"]), l2["libcurl"]
    assert any(x.startswith("Connection died, retrying a fresh connect") for x in l2["libcurl"])
    assert lost["counters_client"]["TcpActiveOpens"] == 2
    assert lost["nginx"]["requests_per_connection"] == {"1": [1], "2": list(range(1, n))}
    assert lost["nginx"]["closed_by_nginx"] == [1] and lost["nginx"]["closed_by_client"] == [2]


def raw_of(root, unit):
    return os.path.join(root, "raw", unit)


def check_all(out, root):
    j = R.load(out)
    if STALE in j:
        check_stale(j, params(raw_of(root, STALE)))
    if KA in j:
        check_keepalive(j, params(raw_of(root, KA)))
    if SAVES in j:
        check_saves(j, params(raw_of(root, SAVES)))
    if CURL in j:
        check_curl(j, params(raw_of(root, CURL)))
    return j


# ---- the committed reference -----------------------------------------------------------------

@pytest.fixture(scope="module")
def ref_out(tmp_path_factory):
    return R.replay(tmp_path_factory)


def test_reference_kernel_facts(ref_out):
    j = check_all(ref_out, REF)
    assert STALE in j and KA in j and SAVES in j and CURL in j


def test_reference_report_is_the_committed_one(ref_out):
    R.assert_committed(ref_out)


# finlost with nginx's lost FIN sent a second time before the GET left, as a CI run under ASan
# saw it (tcpdump read 3 FINs from nginx on 2 connections; that run's raw files were not kept):
# the reference's FIN line again, 200 ms later (the minimum RTO), in both readings
FIN1 = ("t_s=1.172589 t_ns=40810935572392 conn=1 dir=s>c flags=FA seq=171 ack=55 len=0 win=64 "
        "opts=nop,nop,ts tsval=2167584240 tsecr=2060734711 src=192.0.2.2:21100 dst=192.0.2.1:43060")
FIN1_TCPDUMP = ("00:43:54.112313 IP 192.0.2.2.21100 > 192.0.2.1.43060: Flags [F.], seq 3160384020, "
                "ack 2929843298, win 64, options [nop,nop,TS val 2167584240 ecr 2060734711], "
                "length 0")


def fin_again(d):
    cap, dump = d / "finlost-capture.txt", d / "finlost-tcpdump.txt"
    again = FIN1.replace("t_s=1.172589 t_ns=40810935572392", "t_s=1.372589 t_ns=40811135572392")
    again = again.replace("tsval=2167584240", "tsval=2167584440")
    text = cap.read_text()
    assert FIN1 + "\n" in text
    cap.write_text(text.replace(FIN1 + "\n", FIN1 + "\n" + again + "\n").replace(
        "packets=22 tcp=22 icmp=0 other=0 received=22", "packets=23 tcp=23 icmp=0 other=0 received=23"))
    text = dump.read_text()
    assert FIN1_TCPDUMP + "\n" in text
    dump.write_text(text.replace(FIN1_TCPDUMP + "\n", FIN1_TCPDUMP + "\n" + FIN1_TCPDUMP.replace(
        "00:43:54.112313", "00:43:54.312313").replace("val 2167584240", "val 2167584440") + "\n"))


def test_a_fin_sent_twice_is_counted_twice_in_both_readings(tmp_path):
    root = _copy(tmp_path, CURL, fin_again)
    r = R.run(root, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    j = check_all(str(tmp_path / "out"), str(tmp_path))
    lost = j[CURL]["parts"]["finlost"]
    assert lost["fins_server"] == 3 and lost["tcpdump"]["fins_server"] == 3
    assert [c["server_fins"] for c in lost["connections"]] == [2, 1]
    txt = (tmp_path / "out" / (NAME + ".txt")).read_text()
    assert "nginx's FIN sent 2 times: the first was never acknowledged" in txt
    assert "2 connections, 2 SYNs from the client, 3 FINs from nginx, 1 RST" in txt


# ---- the guests' references -----------------------------------------------------------------

GUEST_REFS = guest_reference_dirs(CURL)


def test_every_guest_has_a_p09_reference():
    """The four --kernel guests (5.10, 6.1, 6.12, 7.2) each have the four units' raw/, from a
    QEMU run (vm.txt), and the report made of them, p09-curl-nginx's part in it."""
    for text in assert_every_guest_has((CURL, STALE, KA, SAVES), NAME):
        assert CURL in text


@pytest.mark.parametrize("release", GUEST_REFS)
def test_guest_reference_kernel_facts(tmp_path, release):
    """A guest's reference replayed: the host's facts, the header saying where it ran, the
    note on which of its times are not timers, and the committed report."""
    ref = Report(NAME, ref=os.path.join(TOP, "outputs", release))
    r = ref.run(os.path.join(ref.ref, "raw"), tmp_path)
    assert r.returncode == 0, r.stderr
    j = check_all(str(tmp_path), ref.ref)
    assert STALE in j and KA in j and SAVES in j and CURL in j
    text = (tmp_path / (NAME + ".txt")).read_text()
    assert " under QEMU, " in text.splitlines()[1]
    assert "in this QEMU guest (accel=tcg, 1 CPU): TOTAL_TIME, " in text
    ref.assert_committed(str(tmp_path))


def test_host_report_has_no_guest_note(ref_out):
    with open(os.path.join(ref_out, NAME + ".txt")) as f:
        assert "in this QEMU guest" not in f.read()


def test_guest_reference_facts_fail_on_a_late_fin(tmp_path):
    """A guest's reference with nginx's idle FIN moved 300 ms later in its capture: the check
    fails (the guest's facts are checked, not only replayed)."""
    root = guest_raw_copy(tmp_path, CURL)
    f = root / CURL / "idle-capture.txt"
    lines = f.read_text().splitlines(True)
    i = next(n for n, x in enumerate(lines) if " dir=s>c flags=FA " in x)
    w = lines[i].split(" ")
    ts, tn = (next(x for x in w if x.startswith(k)) for k in ("t_s=", "t_ns="))
    lines[i] = lines[i].replace(ts, f"t_s={float(ts[4:]) + 0.3:.6f}").replace(
        tn, f"t_ns={int(tn[5:]) + 300000000}")
    f.write_text("".join(lines))
    out = tmp_path / "out"
    r = R.run(str(root), out)
    assert r.returncode == 0, r.stderr
    with pytest.raises(AssertionError):
        check_all(str(out), str(tmp_path))


def _copy(tmp_path, unit, edit):
    import shutil
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw", unit), root / unit)
    edit(root / unit)
    return str(root)


@pytest.mark.parametrize("unit,edit,word", [
    (STALE, missing("reuse-client.txt")[0], "reuse-client.txt: missing"),
    (STALE, replace("reuse-client.txt", "exit reason=done", "exit reason=signal"), "reason=signal"),
    (STALE, replace("check-client.txt", "peek i=1", "peep i=1"), "no peek line"),
    (KA, missing("capture.txt")[0], "capture.txt: missing"),
    (KA, replace("params.txt", "keepcnt=", "keepcount="), "no keepcnt="),
    (KA, replace("client.txt", "read i=1 n=2", "read i=1 n=9"), "no read line"),
    (SAVES, missing("new-timewait.txt")[0], "new-timewait.txt: missing"),
    (SAVES, replace("kept-client.txt", "request i=1 n=20 ", "requests i=1 n=20 "),
     "19 request lines, params.txt says 20"),
    (SAVES, replace("idle-client.txt", "cc at=idle_end", "cc at=idle_end2"),
     "no cc line at=idle_end"),
    (CURL, missing("idle-curl-debug.txt")[0], "idle-curl-debug.txt: missing"),
    (CURL, replace("nginx-version.txt", "nginx version: ", "angie version: "),
     "not nginx -v's line"),
    (CURL, replace("kept-client.txt", "request n=3 ", "requests n=3 "),
     "2 request lines, params.txt says 3"),
    (CURL, replace("idle-client.txt", "exit reason=done", "exit reason=interrupted"),
     "reason=interrupted"),
])
def test_report_refuses_bad_raw(tmp_path, unit, edit, word):
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([PY, R.path, _copy(tmp_path, unit, edit), str(out)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not os.listdir(out)


# ---- bad knobs -------------------------------------------------------------------------------

@pytest.mark.parametrize("unit,knob,value", [(KA, "KEEPCNT", "0"), (KA, "KEEPIDLE", "4"),
                                             (KA, "KEEPINTVL", "x"), (STALE, "IDLE_MS", "49"),
                                             (STALE, "IDLE_MS", "0200"),
                                             (SAVES, "REQUESTS", "1"),
                                             (SAVES, "IDLE_MS", "3001"),
                                             (CURL, "KEEPALIVE_MS", "199"),
                                             (CURL, "REQUESTS", "21")])
def test_collect_script_refuses_a_bad_knob(tmp_path, unit, knob, value):
    """Run without run.sh: one line, exit 2, nothing made."""
    env = dict(os.environ, **{f"TL_KNOB_{knob}": value})
    r = subprocess.run(["sh", SCRIPTS[unit], str(tmp_path / "raw")], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"knob {knob.lower()}=" in r.stderr
    assert not os.path.exists(tmp_path / "raw")


@pytest.mark.parametrize("unit,setting", [(KA, "keepcnt=0"), (KA, "keepidle=9"),
                                          (STALE, "idle_ms=10"), (SAVES, "requests=101"),
                                          (CURL, "keepalive_ms=5001")])
def test_run_sh_refuses_a_bad_knob(tmp_path, unit, setting):
    r = subprocess.run([RUN, "--out", str(tmp_path / "out"), "--set", setting, unit],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"--set {setting.split('=')[0]}=" in r.stderr and unit in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "out")


# ---- one live run per unit (each about 10 s) -------------------------------------------------

@pytest.mark.netns
@pytest.mark.parametrize("unit", [STALE, KA, SAVES, CURL])
def test_live_run_kernel_facts(tmp_path, bindir, unit):
    r = subprocess.run([RUN, "--out", str(tmp_path), unit], capture_output=True, text=True,
                       timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    j = check_all(str(tmp_path), str(tmp_path))
    assert unit in j
    if unit == CURL:
        assert nginx_pids(tmp_path) == []
        assert not [d for d in os.listdir(raw_of(str(tmp_path), CURL)) if d.startswith("nginx-tmp")]


def nginx_pids(out):
    """The nginx processes whose configuration lies under out (this run's: started with
    -c OUT/raw/p09-curl-nginx/PART-nginx.conf)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"nginx" and any(
                a.startswith(str(out).encode() + b"/") for a in argv):
            found.append(int(pid))
    return found


@pytest.mark.netns
def test_sigint_leaves_no_nginx(tmp_path, bindir):
    """SIGINT to run.sh while nginx serves (part kept or idle): run.sh stops the unit, whose
    trap stops nginx; none of this run's is left, nor its private directory."""
    import signal
    import time
    p = subprocess.Popen([RUN, "--out", str(tmp_path), CURL], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not nginx_pids(tmp_path) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)        # polling for nginx to exist, not a wait for an event
        assert nginx_pids(tmp_path), "nginx never started"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert nginx_pids(tmp_path) == []
    raw = raw_of(str(tmp_path), CURL)
    assert not os.path.isdir(raw) or not [d for d in os.listdir(raw) if d.startswith("nginx-tmp")]
