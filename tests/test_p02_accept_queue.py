"""p02-accept-queue: the accept queue's kernel facts, each expected value derived from the
sysctls and constants the run recorded (raw/p02-accept-queue/PART-sysctls.txt), never from this
machine's numbers.

Live (root, netns): the unit runs once through ./run.sh --out TMP and check_facts() holds on it.
Replay (no root): the report on the committed reference raw reproduces the committed .txt, the
same facts hold there, an edited raw (one more queued connection, a lost reset) makes them fail,
and bad raw input is one line with nothing written.  The new fixtures' bad input: one line,
exit 2."""
import glob
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP, reference_dirs

NAME = "p02-accept-queue"
RUN = os.path.join(TOP, "run.sh")
REPORT = os.path.join(TOP, "experiments", NAME, NAME + ".py")
RAWS = sorted(glob.glob(os.path.join(TOP, "outputs", "*", "raw", NAME)))


def run_report(rawroot, outdir):
    return subprocess.run(["/usr/bin/python3", REPORT, str(rawroot), str(outdir)],
                          capture_output=True, text=True, timeout=60)


def load(outdir):
    with open(os.path.join(outdir, NAME + ".json")) as f:
        return json.load(f)


def rows(part, group=None):
    return [x for x in part["clients"] if group is None or x["group"] == group]


def between(sm, key, counter):
    """The counter was read between the snapshot and the mark: it lies within the packets
    counted up to each."""
    lo, hi = sm["bounds"][key]
    return lo <= counter <= hi


def check_no_abort_rsts(part, name):
    """With tcp_abort_on_overflow=0 the server resets nobody while a request lives: it drops
    the ACK that finds the queue full.  A request lives its SYN-ACK and tcp_synack_retries
    retransmissions (1 s, then 2 s: 3000 ms with 1); a client's segment after that finds only
    the listener and gets a RST.  So every RST the server sent came at least that long after
    its connection's first SYN-ACK, to a client the server had not queued, and the counter
    agrees with the capture.  (The TCG guests' bursts, and a loaded ASan run here, read their
    counters after 3 s: 3 RSTs, 3461 to 4251 ms after the SYN-ACKs.)"""
    sm = part["summary"]
    late = [v for x in part["clients"] for v in x["rst_after_synack_ms"]]
    assert all(x["server"] != "queued" for x in part["clients"] if x["rst_after_synack_ms"]), name
    assert all(v >= sm["request_lifetime_ms"] for v in late), (name, late)
    assert sm["request_lifetime_ms"] == sum(
        1000 << k for k in range(part["settings"]["server"]["tcp_synack_retries"] + 1))
    assert between(sm, "rsts_at_server_end", sm["server"]["TcpOutRsts"]), name
    assert sm["rsts_at_server_end"] == len(late), name


@pytest.mark.parametrize("raw", RAWS, ids=lambda r: r.split(os.sep)[-3])
def test_no_reset_before_the_request_expired(tmp_path, raw):
    """check_no_abort_rsts() on every reference, the TCG guests' included."""
    r, out = replay(tmp_path, raw)
    assert r.returncode == 0, r.stderr
    for name, part in load(out)["parts"].items():
        if part["settings"]["server"]["tcp_abort_on_overflow"] == 0:
            check_no_abort_rsts(part, name)


def test_a_reset_before_the_request_expired_fails_the_facts(tmp_path):
    """The check can fail: a server RST moved to 1 s after its SYN-ACK, before expiry."""
    r, out = replay(tmp_path, HOST_RAWS[0])
    assert r.returncode == 0, r.stderr
    obj = load(out)
    b = obj["parts"]["burst"]
    x = next(x for x in b["clients"] if x["server"] == "request")
    x["rst_after_synack_ms"] = [1000.0]
    b["summary"]["rsts_at_server_end"] = b["summary"]["server"]["TcpOutRsts"] = 1
    b["summary"]["bounds"]["rsts_at_server_end"] = [1, 1]
    with pytest.raises(AssertionError):
        check_no_abort_rsts(b, "burst")
    x["rst_after_synack_ms"] = [3461.6]
    check_no_abort_rsts(b, "burst")


def check_late(b):
    """burst's late clients (connected, not queued) are held as requests while they live: a
    snapshot taken after a request's lifetime (a loaded run, the TCG guests) may find it
    expired, and the server holding nothing for that client."""
    late = rows(b, "clients")[(b["settings"]["constant"]["backlog_n"] + 1) - len(rows(b, "pre")):]
    nbytes = b["settings"]["constant"]["bytes"]
    life = b["summary"]["request_lifetime_ms"]
    for x in late:
        if x["snapshot_after_synack_ms"] < life:
            assert x["server"] == "request" and x["state"] == "ESTAB" and \
                x["send_q"] == nbytes, x
        else:
            assert x["server"] in ("request", "nothing"), x
    assert b["requests"] == sum(1 for x in late if x["server"] == "request") >= (
        sum(1 for x in late if x["snapshot_after_synack_ms"] < life))


@pytest.mark.parametrize("raw", RAWS, ids=lambda r: r.split(os.sep)[-3])
def test_late_clients_are_requests_while_they_live(tmp_path, raw):
    """check_late() on every reference: the host's snapshot came 1032 ms after the SYN-ACKs
    (3 requests), the guests' 1783 to 7505 ms (6.12: 3 requests; 5.10, 6.1, 7.2: none)."""
    r, out = replay(tmp_path, raw)
    assert r.returncode == 0, r.stderr
    check_late(load(out)["parts"]["burst"])


def test_late_check_can_fail(tmp_path):
    """A late client the server holds nothing for, in a snapshot before its request's lifetime,
    fails check_late(); the same after the lifetime passes."""
    r, out = replay(tmp_path, HOST_RAWS[0])
    assert r.returncode == 0, r.stderr
    b = load(out)["parts"]["burst"]
    x = next(x for x in b["clients"] if x["server"] == "request")
    x["server"] = "nothing"
    b["requests"] -= 1
    with pytest.raises(AssertionError):
        check_late(b)
    x["snapshot_after_synack_ms"] = b["summary"]["request_lifetime_ms"] + 400
    check_late(b)


def check_facts(obj):
    """The kernel facts of every part; expected values from the part's recorded sysctls."""
    p = obj["parts"]
    for name, part in p.items():
        sm, ss, k = part["summary"], part["settings"]["server"], part["settings"]["constant"]
        # what listen() asked, capped by somaxconn: the LISTEN socket's Send-Q
        backlog = min(part["listen_arg"], ss["somaxconn"])
        assert sm["listen_wq"] == backlog == part["listen_backlog_shown"], name
        assert part["capture"]["dropped"] == 0 and part["capture"]["ifdropped"] == 0, name
        assert ss["tcp_synack_retries"] >= 1, name
        # no part's segments reach the next part's counters (queue_clients resets its sockets
        # at exit): the server sends RSTs only where tcp_abort_on_overflow=1 asks for them
        if ss["tcp_abort_on_overflow"] == 0:
            check_no_abort_rsts(part, name)

    # 1. seq: N+1 queued (sk_acceptq_is_full compares with >), the rest in SYN-SENT, each SYN
    # of theirs dropped at the full queue (ListenOverflows), and retransmitted by them
    s = p["seq"]
    n = s["settings"]["constant"]["backlog_n"]
    sm = s["summary"]
    assert sm["listen_rq"] == n + 1
    assert sm["connected"] == n + 1 and sm["pending"] == len(rows(s)) - (n + 1) >= 1
    left = [x for x in rows(s) if x["connect"] == "pending"]
    assert all(x["state"] == "SYN-SENT" and x["retrans"] >= 1 and x["server"] == "nothing"
               for x in left)
    assert between(sm, "syns_from_pending", sm["server"]["TcpExtListenOverflows"])
    assert sm["server"]["TcpExtListenOverflows"] >= 2 * len(left)
    assert sm["server"]["TcpExtListenDrops"] == sm["server"]["TcpExtListenOverflows"]
    lo, hi = sm["bounds"]["syns_from_pending"]
    assert lo - len(left) <= sm["client"]["TcpExtTCPSynRetrans"] <= hi - len(left)

    # 2. burst: every connect() returned; N+1 queued, the rest held as requests in SYN-RECV,
    # their bytes unacknowledged in the client's Send-Q; every ACK of theirs that reached the
    # server was dropped at the full queue; the server retransmitted its SYN-ACKs
    for name in ("burst", "abort"):
        b = p[name]
        n, nbytes = b["settings"]["constant"]["backlog_n"], b["settings"]["constant"]["bytes"]
        sm = b["summary"]
        burst, pre = rows(b, "clients"), rows(b, "pre")
        room = (n + 1) - len(pre)
        assert sm["listen_rq"] == n + 1, name
        assert sm["connected"] == len(burst) + len(pre) and sm["pending"] == 0, name
        assert sm["connected_not_queued"] == len(burst) - room >= 1, name
        assert [x["server"] for x in burst[:room]] == ["queued"] * room, name
        assert all(x["server_rq"] == nbytes for x in burst[:room]), name
        assert between(sm, "acks_from_unqueued", sm["server"]["TcpExtListenOverflows"]), name
        assert sm["server"]["TcpExtListenOverflows"] >= len(burst) - room, name
        assert all(x["send"]["ret"] == nbytes for x in burst), name
    b = p["burst"]
    late = rows(b, "clients")[(b["settings"]["constant"]["backlog_n"] + 1) - len(rows(b, "pre")):]
    nbytes = b["settings"]["constant"]["bytes"]
    check_late(b)
    assert all(s["send_q"] == nbytes for s in b["sent_snapshot"]
               if s["local"] in {x["local"] for x in late})
    assert between(b["summary"], "synacks_beyond_first",
                   b["summary"]["server"]["TcpExtTCPSynRetrans"])
    assert 1 <= b["summary"]["synacks_beyond_first"] <= \
        len(late) * b["settings"]["server"]["tcp_synack_retries"]
    assert b["settings"]["server"]["tcp_abort_on_overflow"] == 0

    # 3. abort: the late ACKs answered by RST: the client's recv() says ECONNRESET (after its
    # send() had succeeded), the next send() EPIPE; the requests are gone
    a = p["abort"]
    assert a["settings"]["server"]["tcp_abort_on_overflow"] == 1
    late = [x for x in rows(a, "clients") if x["server"] != "queued"]
    assert a["requests"] == 0
    assert a["summary"]["resets_seen"] == len(late)
    assert between(a["summary"], "rsts_at_server_end", len(late))
    for x in late:
        assert x["recv"]["errno"] == "ECONNRESET" and x["send_after"]["errno"] == "EPIPE"
        assert x["send"]["t_ms"] <= x["recv"]["t_ms"] <= x["send_after"]["t_ms"]
    sc = a["summary"]["server"]
    assert sc["TcpExtEmbryonicRsts"] == sc["TcpOutRsts"] == len(late)
    assert a["summary"]["client"]["TcpEstabResets"] == len(late)

    # 4. somaxconn: listen(1000) capped; backlog+1 get in
    m = p["somaxconn"]
    cap = m["settings"]["server"]["somaxconn"]
    assert m["listen_arg"] > cap and m["summary"]["listen_wq"] == cap
    assert m["summary"]["listen_rq"] == m["summary"]["connected"] == cap + 1

    # 5. floods: the request queue holds backlog+1 before it is "full"
    # (inet_csk_reqsk_queue_is_full: qlen > sk_max_ack_backlog); then cookies or drops; without
    # cookies a small tcp_max_syn_backlog keeps its last quarter (qlen <= max - max/4)
    for name, want in (("flood-cookies", "cookies"), ("flood-drop", "drop"),
                       ("flood-quarter", "quarter")):
        f = p[name]
        fb = f["settings"]["constant"]["flood_backlog"]
        flood = f["settings"]["constant"]["flood"]
        mx = f["settings"]["server"]["tcp_max_syn_backlog"]
        sm, sc = f["summary"], f["summary"]["server"]
        client = rows(f, "client")[0]
        assert len(rows(f, "flood")) == flood
        if want == "cookies":
            assert f["settings"]["server"]["tcp_syncookies"] == 1
            assert f["requests"] == fb + 1
            cookies = flood - (fb + 1) + 1     # the rest of the flood and the client
            assert sc["TcpExtSyncookiesSent"] == sc["TcpExtTCPReqQFullDoCookies"] == cookies
            assert sc["TcpExtSyncookiesRecv"] == 1 and sc["TcpExtSyncookiesFailed"] == 0
            assert client["connect"] == "established" and client["server"] == "queued"
            assert sm["listen_rq"] == 1 and sm["pending"] == 0
        else:
            assert f["settings"]["server"]["tcp_syncookies"] == 0
            if want == "drop":
                assert mx - (fb + 1) >= mx >> 2       # the quarter rule does not bite first
                admitted = fb + 1
                assert between(sm, "syns_unanswered", sc["TcpExtTCPReqQFullDrop"])
            else:
                admitted = mx - (mx >> 2) + 1
                assert admitted <= fb + 1
                assert sc["TcpExtTCPReqQFullDrop"] == 0
            assert f["requests"] == admitted
            assert between(sm, "syns_unanswered", sc["TcpExtListenDrops"])
            assert sc["TcpExtSyncookiesSent"] == 0
            # pending when the client's snapshot was taken: the clients run on until finish()
            # stops them, after the counters were read, so on a slow run a connect can still
            # return after the snapshot (a CI run: pending 13 at the end, SynRetrans 0 when read)
            at_snap = [x for x in rows(f) if x["connect"] == "pending"
                       or x["connect_after_snapshot_ms"] is not None]
            assert len(at_snap) >= sm["pending"]
            if len(at_snap) == flood - admitted + 1:
                assert client in at_snap and client["state"] == "SYN-SENT"
            else:
                # a slow run (a loaded host, a guest): the part outlived the first requests
                # (tcp_synack_retries=1: the SYN-ACK, once more after 1 s, dropped 2 s later),
                # and waiting clients took their slots: each of those requests retransmitted
                # its SYN-ACK first, and no more than the queue held are waiting now
                assert len(at_snap) < flood - admitted + 1, name
                assert sc["TcpExtTCPSynRetrans"] >= admitted, name
        # the kernel log line: where it exists it names the port and the choice; the quarter
        # rule prints none (tcp_syn_flood_action() is not reached).  Not read (None) only
        # where the run recorded that it could not open /dev/kmsg (root of a user namespace)
        ko = obj["kmsg_open"]
        assert (f["kmsg"] is None) == (ko is not None and ko["ret"] == -1), name
        for line in f["kmsg"] or []:
            # 6.18: "port 192.0.2.2:21205."; 6.1: "port 21205." (no address yet)
            assert re.search(rf"Possible SYN flooding on port (\S+:)?{f['port']}\.", line["msg"])
            assert ("Sending cookies" if want == "cookies" else "Dropping request") in line["msg"]
        if want == "quarter" and f["kmsg"] is not None:
            assert f["kmsg"] == []


# ---- replay ------------------------------------------------------------------------------------

def replay(tmp_path, raw, edit=None):
    root = tmp_path / "raw"
    shutil.copytree(raw, root / NAME)
    if edit:
        edit(root / NAME)
    out = tmp_path / "out"
    out.mkdir()
    return run_report(root, out), out


# The facts below are the host's.  The TCG guests' references (raw/<unit>/vm.txt accel=tcg) are
# replayed too, but their timings break some of them: 6.12's `flood-drop` counted
# TCPReqQFullDrop +42 for 21 connected clients; not explained yet (docs/kernel-diff.md, "The
# accept queue: what 5.10 counts").  (Their bursts' 3 RSTs came after the requests expired:
# test_no_reset_before_the_request_expired holds on every reference.)
HOST_RAWS = [r for r in RAWS if not os.path.exists(os.path.join(r, "vm.txt"))]


@pytest.mark.parametrize("raw", RAWS, ids=lambda r: r.split(os.sep)[-3])
def test_the_report_reproduces_the_committed_reference(tmp_path, raw):
    r, out = replay(tmp_path, raw)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    committed = os.path.join(os.path.dirname(os.path.dirname(raw)), NAME + ".txt")
    with open(committed) as f, open(out / (NAME + ".txt")) as g:
        assert g.read() == f.read()


@pytest.mark.parametrize("raw", HOST_RAWS, ids=lambda r: r.split(os.sep)[-3])
def test_the_host_references_facts_hold(tmp_path, raw):
    r, out = replay(tmp_path, raw)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    check_facts(load(out))


def test_there_is_a_host_reference():
    assert HOST_RAWS, "no committed outputs/*/raw/p02-accept-queue of a host"


def _edit(path, old, new):
    with open(path) as f:
        text = f.read()
    assert old in text, (path, old)
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


def test_the_facts_can_fail_one_more_queued(tmp_path):
    """A LISTEN Recv-Q of N+2 is not the kernel's N+1: check_facts refuses it."""
    r, out = replay(tmp_path, HOST_RAWS[0], lambda d: _edit(
        d / "seq-end-server.txt", "state=LISTEN timer=off expires_ms=0 retrans=0 rq=5 ",
        "state=LISTEN timer=off expires_ms=0 retrans=0 rq=6 "))
    assert r.returncode == 0, r.stderr
    with pytest.raises(AssertionError):
        check_facts(load(out))


def test_the_facts_can_fail_a_reset_not_seen(tmp_path):
    def edit(d):
        p = d / "abort-clients.txt"
        lines = [x for x in p.read_text().splitlines(True) if not x.startswith("recv i=4 ")]
        p.write_text("".join(lines))
    r, out = replay(tmp_path, HOST_RAWS[0], edit)
    assert r.returncode == 0, r.stderr
    with pytest.raises(AssertionError):
        check_facts(load(out))


@pytest.mark.parametrize("name", ["seq-sysctls.txt", "burst-end-server.txt", "abort-clients.txt",
                                  "flood-cookies-kmsg.txt", "somaxconn-capture.txt",
                                  "flood-drop-server-counters-delta.txt"])
def test_bad_raw_input_is_one_line_and_nothing_written(tmp_path, name):
    def edit(d):
        p = d / name
        if name.endswith("kmsg.txt"):
            p.write_text("ready pid=1\n")           # no end line: kmsg_watch did not finish
        elif name.endswith("sysctls.txt"):
            _edit(p, "server net.core.somaxconn=", "server net.core.somaxconn=x")
        elif name.endswith("clients.txt"):
            p.write_text("".join(x for x in p.read_text().splitlines(True)
                                 if not x.startswith("ready ")))
        elif name.endswith("end-server.txt"):
            p.write_text(p.read_text()[:60] + "\n")    # a line cut short: no state, no queues
        else:
            p.write_text(p.read_text().splitlines(True)[0])
    r, out = replay(tmp_path, HOST_RAWS[0], edit)
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and name.split(".")[0] in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert os.listdir(out) == []


def test_a_missing_part_is_one_line(tmp_path):
    r, out = replay(tmp_path, HOST_RAWS[0], lambda d: os.unlink(d / "flood-quarter-end-client.txt"))
    assert r.returncode == 1 and "flood-quarter-end-client.txt" in r.stderr
    assert os.listdir(out) == []


def test_the_unit_is_a_wire_unit_in_the_labs_set():
    import tcplab
    u = {x["unit"]: x for x in tcplab.read_units()}[NAME]
    assert (u["set"], u["quick"], u["alone"], u["root"], str(u["netns"]), u["qemu"]) == \
        ("labs", "run", False, False, "wire", True)     # no real root: it runs without /dev/kmsg
    assert u["expect_s"] < u["limit_s"] <= 300     # 100-125 s in the TCG guests (2026-12-02)


# ---- the new fixtures' bad input ---------------------------------------------------------------

@pytest.mark.parametrize("argv,words", [
    (["queue_clients", "-p", "1", "-n", "0"], "-n '0'"),
    (["queue_clients", "-p", "1", "-n", "2", "-m", "flood"], "want seq or burst"),
    (["queue_clients", "-p", "1", "-n", "3", "-B", "65534"], "BASEPORT+N-1"),
    (["queue_clients", "-p", "1", "-n", "1", "-s", "-5"], "-s '-5'"),
    (["queue_clients", "-n", "1"], "missing -p"),
    (["kmsg_watch", "-g", ""], "-g"),
    (["kmsg_watch", "extra"], "extra"),
])
def test_fixture_bad_input_is_one_line_exit_2(bindir, argv, words):
    r = subprocess.run([os.path.join(bindir, argv[0])] + argv[1:], capture_output=True,
                       text=True, timeout=5)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr


# ---- live --------------------------------------------------------------------------------------

@pytest.mark.netns
def test_live_run_shows_the_kernel_facts(tmp_path, bindir):
    r = subprocess.run([RUN, "--out", str(tmp_path), NAME], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    check_facts(load(tmp_path))
    assert os.path.getsize(tmp_path / (NAME + "-ladder.svg")) > 0


def committed_sets():
    out = os.path.join(TOP, "outputs")
    return [os.path.join(out, d) for d in reference_dirs()
            if os.path.isfile(os.path.join(out, d, NAME + ".json"))]


@pytest.mark.parametrize("ref", committed_sets(), ids=os.path.basename)
def test_every_dropped_syn_is_one_no_syn_ack_answered(ref):
    """In every committed run, host and guests, the server's drop counters lie within the SYNs
    the capture shows unanswered by a SYN-ACK (up to the snapshot before the counters were read,
    and up to the mark after).  Counting only the clients still in SYN-SENT at the end does not
    hold in the guests, where the requests expired and the dropped clients got in later: there
    flood-drop's +27..+45 against 0..9 such SYNs."""
    with open(os.path.join(ref, NAME + ".json")) as f:
        p = json.load(f)["parts"]
    for part, counter in (("seq", "TcpExtListenOverflows"), ("flood-drop", "TcpExtTCPReqQFullDrop"),
                          ("flood-drop", "TcpExtListenDrops"), ("flood-quarter", "TcpExtListenDrops")):
        sm = p[part]["summary"]
        assert between(sm, "syns_unanswered", sm["server"][counter]), (part, counter)


KMSG_EPERM = "open path=/dev/kmsg ret=-1 errno=EPERM\nsysctl kernel.dmesg_restrict=1\n"


def unreadable_kmsg(d):
    """What a run as root of a user namespace records (kmsg_watch -t's line there, Debian's
    dmesg_restrict): no kmsg_watch output at all."""
    for p in d.glob("*-kmsg.txt"):
        p.unlink()
    (d / "kmsg-open.txt").write_text(KMSG_EPERM)


def test_a_run_that_could_not_read_the_kernel_log_says_so(tmp_path):
    r, out = replay(tmp_path, HOST_RAWS[0], unreadable_kmsg)
    assert r.returncode == 0, r.stderr
    obj = load(out)
    assert obj["kmsg_open"] == {"ret": -1, "errno": "EPERM", "dmesg_restrict": 1}
    check_facts(obj)
    assert all(p["kmsg"] is None for p in obj["parts"].values())
    text = (out / (NAME + ".txt")).read_text()
    said = ("kernel log: not read: this run could not open /dev/kmsg (EPERM; "
            "kernel.dmesg_restrict=1, which leaves it to CAP_SYSLOG in the host's user namespace)")
    assert text.count(said) == 3 and "SYN flooding" not in text


@pytest.mark.parametrize("edit,word", [
    # kmsg-open.txt says unreadable, yet a part has kmsg_watch's output
    (lambda d: (d / "kmsg-open.txt").write_text(KMSG_EPERM), "could not be opened"),
    (lambda d: (d / "kmsg-open.txt").write_text("open path=/dev/kmsg ret=0 errno=none\n"),
     "kmsg-open.txt"),
    (lambda d: (d / "kmsg-open.txt").write_text(KMSG_EPERM.replace("ret=-1", "ret=1")),
     "kmsg-open.txt"),
])
def test_a_bad_kmsg_open_record_is_refused(tmp_path, edit, word):
    r, out = replay(tmp_path, HOST_RAWS[0], edit)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert word in r.stderr and not os.listdir(out)


def test_another_listeners_flood_line_is_not_taken_for_this_parts(tmp_path):
    """/dev/kmsg is the machine's: a line about another port (another namespace's listener,
    printed while the part ran) is left out, and the quarter rule still shows no line."""
    def edit(d):
        p = d / "flood-quarter-kmsg.txt"
        lines = p.read_text().splitlines(True)
        lines.insert(1, "kmsg seq=1 level=6 facility=0 ts_us=1 read_ns=1 msg=TCP: request_sock_TCP: "
                        "Possible SYN flooding on port 127.0.0.1:9999. Sending cookies.\n")
        p.write_text("".join(lines))
    r, out = replay(tmp_path, HOST_RAWS[0], edit)
    assert r.returncode == 0, r.stderr
    obj = load(out)
    assert obj["parts"]["flood-quarter"]["kmsg"] == []
    check_facts(obj)


@pytest.mark.parametrize("ref", committed_sets(), ids=os.path.basename)
def test_a_connect_after_the_client_snapshot_is_said(ref):
    """A client whose connect() returned established while its socket shows SYN-SENT is one whose
    connect() returned after the client snapshot (the clients run on until finish() stops them):
    the .json gives how long after, from queue_clients' own start_ns + t_ms and the snapshot's
    t_ns read here again from raw/, and every such line of the .txt says so."""
    with open(os.path.join(ref, NAME + ".json")) as f:
        parts = json.load(f)["parts"]
    with open(os.path.join(ref, NAME + ".txt")) as f:
        text = f.read()
    raw = os.path.join(ref, "raw", NAME)
    for name, p in parts.items():
        with open(os.path.join(raw, f"{name}-end-client.txt")) as f:
            snap = [int(m) for m in re.findall(r"\bt_ns=(\d+)", f.read())]
        starts = {}
        for x in p["clients"]:
            if x["group"] not in starts:
                with open(os.path.join(raw, f"{name}-{x['group']}.txt")) as f:
                    starts[x["group"]] = int(re.search(r"start_ns=(\d+)", f.read()).group(1))
            late = x["connect_after_snapshot_ms"]
            if x["connect"] == "established" and x["state"] == "SYN-SENT":
                assert late is not None and late > 0, (name, x["i"])
            if late is not None:
                at = starts[x["group"]] + round(x["connect_t_ms"] * 1e6)
                assert abs((at - snap[0]) / 1e6 - late) <= 0.05 + 1e-9, (name, x["i"])
            elif x["connect"] != "pending" and snap:
                assert starts[x["group"]] + round(x["connect_t_ms"] * 1e6) <= snap[0], (name, x["i"])
    for line in text.splitlines():
        if re.search(r"connect\(\) established[^;]*, SYN-SENT;|established +[0-9.]+ SYN-SENT ",
                     line) and "ms after the client snapshot" not in line:
            pytest.fail(f"a SYN-SENT line with no word on when connect() returned: {line}")
