"""make bench's tcpevents rows (tests/bench/bench_tcpevents.py, docs/bench.md):

- the burst generator (tests/bench/burst.c) against tcpevents, live, in a namespace of its own:
  100 connections make exactly the transitions its comment and bench_tcpevents.expected() count
  (ten per connection, two for the listener), one tcp_probe and one timewait record each, and
  evfloor counts the same state changes and samples;
- the rows from recorded numbers: the ratio and its verdict, the lost events (a short count, a
  full ring's lost=, recursion misses), the skip where tcpevents is not built.
"""
import collections
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TOP, in_ns

sys.path.insert(0, os.path.join(TOP, "tests", "bench"))
import bench_tcpevents as bt  # noqa: E402

CONNS = 100


# ---- the rows from recorded numbers ---------------------------------------------------------------

def run(cpu, events, bpf_ns=0, state=None, lost=0, missed="0", load=0.1):
    return {"cpu": cpu, "load": load, "bpf_ns": bpf_ns, "run_cnt": events, "progs": 5,
            "events": events, "state": events if state is None else state, "lost": lost,
            "missed": missed}


def test_expected_counts():
    assert bt.expected(1000) == {"state": 10002, "tcpevents": 12002, "floor": 11002}


def test_ratio_is_the_median_of_per_event_cpu_with_bpf_time():
    # per event: tcpevents (0.03 + 0.012) / 12002 s, the floor (0.02 + 0.011) / 11002 s
    ev = [run(0.03, 12002, 12_000_000), run(0.05, 12002, 12_000_000), run(0.03, 12002, 12_000_000)]
    fl = [run(0.02, 11002, 11_000_000), run(0.02, 11002, 11_000_000), run(0.04, 11002, 11_000_000)]
    ratio, lost, load = bt.rows(ev, fl, 1000, True)
    want = ((0.03 + 0.012) / 12002) / ((0.02 + 0.011) / 11002)
    assert ratio[0] == bt.RATIO_NAME and ratio[1] == pytest.approx(want)
    assert ratio[2] == "<= 1.25" and ratio[3] is True       # runs 1.24, 1.83, 0.75
    assert "min 0.75 median 1.24 max 1.83 over 3 runs" in ratio[4]
    assert "BPF run_time_ns" in ratio[4]
    assert lost[1:4] == (0, "= 0", True)
    assert load[3] is None


@pytest.mark.parametrize("cpu,ok", [(0.012, True), (0.016, False)])    # 1.00, 1.33
def test_ratio_verdict_without_bpf_stats(cpu, ok):
    ev = [run(cpu, 12002)] * 3
    fl = [run(0.011, 11002)] * 3
    ratio = bt.rows(ev, fl, 1000, False, "BPF_ENABLE_STATS: Operation not permitted")[0]
    assert ratio[1] == pytest.approx((cpu / 12002) / (0.011 / 11002))
    assert ratio[3] is ok
    assert "no BPF run time: BPF_ENABLE_STATS: Operation not permitted" in ratio[4]


@pytest.mark.parametrize("bad,worst", [
    (run(0.03, 11902, state=9902), 100),         # 100 records never came
    (run(0.03, 12002, lost=0, missed="3"), 0),   # seen all, yet recursion misses: not ok
    (run(0.03, 11990, lost=12), 12),             # a full ring: lost= and the short count agree
])
def test_lost_row_counts_what_was_not_seen(bad, worst):
    ev = [run(0.03, 12002), bad, run(0.03, 12002)]
    fl = [run(0.02, 11002)] * 3
    lost = bt.rows(ev, fl, 1000, False)[1]
    assert lost[0] == bt.LOST_NAME and lost[1] == worst and lost[3] is False
    assert f"tcpevents saw 12002, {bad['events']}, 12002 of 12002" in lost[4]


def test_skipped_where_tcpevents_is_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv("TCPLAB_TCPEV_WHY", "no bpftool;")
    rows = bt.bench(str(tmp_path), str(tmp_path), 1)
    assert [r[1] for r in rows] == [None, None] and [r[3] for r in rows] == [None, None]
    assert all(r[4].endswith("not built here: no bpftool") for r in rows)


# ---- live: the burst's transitions, as tcpevents and evfloor see them ---------------------------

def kv(line):
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


@pytest.fixture(scope="module")
def benchdir(bindir):
    if not os.path.exists(os.path.join(bindir, "tcpevents")):
        pytest.skip("tcpevents is not built here (make says why: clang, bpftool, libbpf, BTF)")
    build = os.path.dirname(bindir)
    progs = [os.path.join(build, "bench", p) for p in ("burst", "evfloor")]
    r = subprocess.run(["make", "-s", "-C", TOP, f"BUILD={build}", *progs], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return os.path.join(build, "bench")


def start(argv, out):
    f = open(out, "w+")
    p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 10
    while "ready " not in open(out).read():
        assert p.poll() is None and time.monotonic() < deadline, open(out).read()
        time.sleep(0.01)
    return p, f


def stop(p, f):
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 0
    f.seek(0)
    return f.read().splitlines()


@pytest.mark.netns
def test_burst_transitions_as_tcpevents_sees_them(bindir, benchdir, netns, tmp_path):
    path = f"/var/run/netns/{netns}"
    ev = start([os.path.join(bindir, "tcpevents"), "-n", path], tmp_path / "ev.txt")
    fl = start([os.path.join(benchdir, "evfloor"), "-n", path], tmp_path / "fl.txt")
    try:
        r = subprocess.run(in_ns(netns, [os.path.join(benchdir, "burst"), "-n", str(CONNS)]),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout == f"connections={CONNS}\n", r.stderr
        time.sleep(0.3)
    finally:
        lines, flines = stop(*ev), stop(*fl)
    recs = [kv(ln) for ln in lines[1:-1]]
    kinds = collections.Counter((e["event"], e.get("old"), e.get("new")) for e in recs)
    n = CONNS
    assert kinds == collections.Counter({
        # the client
        ("state", "UNCONN", "SYN-SENT"): n, ("state", "SYN-SENT", "ESTAB"): n,
        ("state", "ESTAB", "FIN-WAIT-1"): n, ("state", "FIN-WAIT-1", "FIN-WAIT-2"): n,
        ("state", "FIN-WAIT-2", "UNCONN"): n,
        # the server's socket
        ("state", "LISTEN", "SYN-RECV"): n, ("state", "SYN-RECV", "ESTAB"): n,
        ("state", "ESTAB", "CLOSE-WAIT"): n, ("state", "CLOSE-WAIT", "LAST-ACK"): n,
        ("state", "LAST-ACK", "UNCONN"): n,
        # the listener
        ("state", "UNCONN", "LISTEN"): 1, ("state", "LISTEN", "UNCONN"): 1,
        # one sample each (the server receiving the FIN), one timewait each (either substate)
        ("probe", None, None): n,
        **{("timewait", "FIN-WAIT-2", s): c for s, c in collections.Counter(
            e["new"] for e in recs if e["event"] == "timewait").items()},
    }), kinds
    assert sum(1 for e in recs if e["event"] == "timewait") == n
    want = bt.expected(n)
    assert sum(v for (k, _, _), v in kinds.items() if k == "state") == want["state"]
    end = kv(lines[-1])
    assert (int(end["events"]), end["lost"], end["missed"]) == (want["tcpevents"], "0", "0")
    assert end["unseen"].isdigit(), lines[-1]     # counted here (root, tracefs), machine-wide
    fend = kv(flines[-1])
    assert fend == {"events": str(want["floor"]), "state": str(want["state"]), "probe": str(n),
                    "other": "0", "lost": "0", "missed": "0"}, flines[-1]
