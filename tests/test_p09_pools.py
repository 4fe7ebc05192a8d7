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
read gets ETIMEDOUT.  Then bad input: a knob out of range, bad raw files."""
import os
import subprocess

import pytest

from unit_replay import Report, PY, REF, RUN, missing, replace, window

NAME = "p09-pools"
STALE, KA = "p09-stale-reuse", "p09-keepalive"
R = Report(NAME)
SCRIPTS = {u: os.path.join(os.path.dirname(R.path), u + ".sh") for u in (STALE, KA)}
SLACK_MS = 10


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


def raw_of(root, unit):
    return os.path.join(root, "raw", unit)


def check_all(out, root):
    j = R.load(out)
    if STALE in j:
        check_stale(j, params(raw_of(root, STALE)))
    if KA in j:
        check_keepalive(j, params(raw_of(root, KA)))
    return j


# ---- the committed reference -----------------------------------------------------------------

@pytest.fixture(scope="module")
def ref_out(tmp_path_factory):
    return R.replay(tmp_path_factory)


def test_reference_kernel_facts(ref_out):
    j = check_all(ref_out, REF)
    assert STALE in j and KA in j


def test_reference_report_is_the_committed_one(ref_out):
    R.assert_committed(ref_out)


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
                                             (STALE, "IDLE_MS", "0200")])
def test_collect_script_refuses_a_bad_knob(tmp_path, unit, knob, value):
    """Run without run.sh: one line, exit 2, nothing made."""
    env = dict(os.environ, **{f"TL_KNOB_{knob}": value})
    r = subprocess.run(["sh", SCRIPTS[unit], str(tmp_path / "raw")], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"knob {knob.lower()}=" in r.stderr
    assert not os.path.exists(tmp_path / "raw")


@pytest.mark.parametrize("unit,setting", [(KA, "keepcnt=0"), (KA, "keepidle=9"),
                                          (STALE, "idle_ms=10")])
def test_run_sh_refuses_a_bad_knob(tmp_path, unit, setting):
    r = subprocess.run([RUN, "--out", str(tmp_path / "out"), "--set", setting, unit],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"--set {setting.split('=')[0]}=" in r.stderr and unit in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "out")


# ---- one live run per unit (each about 10 s) -------------------------------------------------

@pytest.mark.netns
@pytest.mark.parametrize("unit", [STALE, KA])
def test_live_run_kernel_facts(tmp_path, bindir, unit):
    r = subprocess.run([RUN, "--out", str(tmp_path), unit], capture_output=True, text=True,
                       timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    j = check_all(str(tmp_path), str(tmp_path))
    assert unit in j
