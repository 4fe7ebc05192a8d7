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
