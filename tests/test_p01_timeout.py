"""p01-timeout end to end on this kernel, from the shared run of the quick p01 units
(conftest.p01_quick_out): a connect() the caller timed out keeps its socket until close();
the capture shows its SYNs."""
import os

import pytest

from unit_live import load

pytestmark = pytest.mark.netns


def test_timeout_capture_shows_the_syns_after_the_timeout(p01_quick_out):
    j = load(p01_quick_out, "p01-timeout")
    assert j["capture"]["dropped"] == 0
    for name in ("cc", "keep"):
        c = j[name]
        assert c["packets"]["syn_count"] == len(c["retransmits"]) + 1, name
        assert c["packets"]["segments_after_close"] == 0 and c["packets"]["disagree"] == []
    assert j["keep"]["packets"]["syns_after_timeout"] == j["keep_retransmits_after_timeout"] >= 1
    assert j["cc"]["packets"]["syns_after_timeout"] == 0
    assert os.path.isfile(os.path.join(p01_quick_out, j["capture"]["ladder_svg"]))


def test_settimeout_socket_outlives_the_timeout(p01_quick_out):
    j = load(p01_quick_out, "p01-timeout")
    keep, cc = j["keep"], j["cc"]
    assert keep["result"] == "timeout" and abs(keep["elapsed_s"] - 1.5) < 0.3
    (s,) = keep["after_timeout"]
    assert s["state"] == "SYN-SENT" and s["timer"] == "on" and s["wq"] == 1
    assert keep["after_close"] == []
    assert j["keep_retransmits_after_timeout"] >= 1
    gone = [e for e in keep["events"] if e["event"] == "gone"]
    assert gone and abs(gone[0]["t_s"] - keep["closed_s"]) < 0.1   # gone exactly at close()
    assert cc["result"] == "timeout" and cc["after_close"] == []
    assert cc["errno"] is None and j["errno"] is None and j["counters"] is None   # no errno on a timeout


@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_the_knobs_reach_the_script_and_are_recorded(tmp_path):
    """--set timeout_ms and keep_ms (experiments/units): a 500 ms timeout comes before the first
    SYN timeout (1 s), and keep_ms 0 closes the keep client at once, so neither client sees a
    retransmission; the report says so instead of "kept trying", and records the knobs."""
    from unit_live import run_with_knobs, text
    out = tmp_path / "out"
    j = run_with_knobs(out, "p01-timeout", {"timeout_ms": 500, "keep_ms": 0})
    for name in ("cc", "keep"):
        c = j[name]
        assert c["result"] == "timeout" and abs(c["elapsed_s"] - 0.5) < 0.2, name
        assert c["retransmits"] == [] and c["after_close"] == [], name
        assert c["packets"]["syn_count"] == 1, name
    assert j["keep"]["closed_s"] - j["keep"]["elapsed_s"] < 0.2
    assert j["keep_retransmits_after_timeout"] == 0
    t = text(out, "p01-timeout")
    assert "SYN retransmissions after the program's timeout: 0: close() came before" in t
    assert "knobs: timeout_ms=500 keep_ms=0 " in t
