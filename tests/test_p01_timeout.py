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
