"""p01-strace end to end on this kernel, from the shared run of the quick p01 units
(conftest.p01_quick_out)."""
import os

import pytest

from unit_live import load, run_unit, text

pytestmark = pytest.mark.netns


def test_strace_capture_shows_the_handshake(p01_quick_out):
    j = load(p01_quick_out, "p01-strace")
    assert j["capture"]["dropped"] == 0
    for part in ("block", "cc"):
        assert j["parts"][part]["packets"]["flags"][:3] == ["S", "SA", "A"], part
    assert os.path.isfile(os.path.join(p01_quick_out, "p01-strace-ladder.svg"))


@pytest.mark.slow       # a unit's second live run, with knobs set: the slow tier, as test_knobs'
def test_the_knobs_reach_the_listener_and_the_poll(tmp_path):
    """--set backlog=3 is the LISTEN line's Send-Q (its accept queue's limit), and both
    connections still complete; --set timeout_ms=500 is the limit ppoll() is given (the strace
    line shows it, less what had already gone), not a wait."""
    r = run_unit(tmp_path, "p01-strace", "--set", "backlog=3", "--set", "timeout_ms=500")
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, "p01-strace")
    assert j["knobs"] == {"backlog": 3, "timeout_ms": 500}
    assert j["backlog"] == 3
    listen = [s for s in j["sockets"] if s["state"] == "LISTEN"]
    assert [(s["rq"], s["wq"]) for s in listen] == [(1, 3)], j["sockets"]
    for part in ("block", "cc"):
        assert j["parts"][part]["packets"]["flags"][:3] == ["S", "SA", "A"], part
    txt = text(tmp_path, "p01-strace")
    assert "a listener (backlog 3) that never accepts" in txt
    if j["strace"] and "not available" not in j["strace"]:
        assert "ppoll([{fd=3, events=POLLOUT}], 1, {tv_sec=0, tv_nsec=4" in txt, txt
    assert "knobs: backlog=3 timeout_ms=500" in txt
