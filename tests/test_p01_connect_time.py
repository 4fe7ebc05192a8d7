"""p01-connect-time end to end on this kernel, from the shared run of the quick p01 units
(conftest.p01_quick_out, N connects per batch): exact counts, never speeds."""
import os

import pytest

from conftest import P01_CONNECTS as N
from unit_live import load

pytestmark = pytest.mark.netns


def test_refused_counts_are_exact(p01_quick_out):
    p = load(p01_quick_out, "p01-connect-time")["parts"]["refused"]
    assert p["n"] == N and p["ok"] == 0 and p["errors"] == {"ECONNREFUSED": N}
    c = p["counters"]
    assert c["TcpAttemptFails"] == N and c["TcpOutRsts"] == N and c["TcpActiveOpens"] == N


def test_accepted_connects_all_succeed(p01_quick_out):
    j = load(p01_quick_out, "p01-connect-time")
    a = j["parts"]["accept"]
    assert a["ok"] == N and a["errors"] == {} and a["counters"]["TcpActiveOpens"] == N
    assert a["counters"]["TcpAttemptFails"] == 0
    assert set(a["us"]) == {"min", "p10", "median", "p90", "p99", "max"}
    assert a["us"]["min"] <= a["us"]["median"] <= a["us"]["max"]
    with open(os.path.join(p01_quick_out, "p01-connect-time.txt")) as f:
        text = f.read()
    for name in ("TcpActiveOpens", "TcpAttemptFails", "TcpOutRsts", "TcpEstabResets"):
        assert text.count(name) >= 2      # always shown, for both batches, even when 0
    if a["us"]["max"] >= 1000:
        assert "counters" in text.split("took over 1 ms")[1][:300]


@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_the_knobs_reach_the_script_and_are_recorded(tmp_path):
    """--set connects and backlog (experiments/units): the batches have that many connects, the
    listener that backlog, and the outputs record both (the report derives n, never 2000)."""
    from unit_live import run_with_knobs, text
    out = tmp_path / "out"
    j = run_with_knobs(out, "p01-connect-time", {"connects": 50, "backlog": 256})
    for part in ("accept", "refused"):
        assert j["parts"][part]["n"] == 50 and j["parts"][part]["counters"]["TcpActiveOpens"] == 50
    assert j["parts"]["refused"]["errors"] == {"ECONNREFUSED": 50}
    with open(out / "raw" / "p01-connect-time" / "listener.txt") as f:
        assert " backlog=256 " in f.readline()
    t = text(out, "p01-connect-time")
    assert "== 50 connects to 127.0.0.1:21011" in t
    assert "knobs: connects=50 backlog=256 " in t
