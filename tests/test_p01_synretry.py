"""p01-synretry end to end on this kernel, from the shared run of the quick p01 units
(conftest.p01_quick_out): the SYN schedule, the counters and the capture, asserted as kernel
facts with tolerances (never speeds)."""
import os

import pytest

import tcplab
from unit_live import load

pytestmark = pytest.mark.netns


def test_synretry_follows_the_documented_schedule(p01_quick_out):
    j = load(p01_quick_out, "p01-synretry")
    syncnt = j["syncnt"]
    assert syncnt == 2
    linear = j["sysctls"].get("net.ipv4.tcp_syn_linear_timeouts")
    times, end = tcplab.expected_syn_schedule(syncnt, None if linear is None else int(linear))
    assert j["expected"] == times
    seen = [x["t_s"] for x in j["retransmits"]]
    assert [x["retrans"] for x in j["retransmits"]] == list(range(1, len(times) + 1))
    for got, want in zip(seen, times):
        assert abs(got - want) <= max(0.1 * want, 0.25), (seen, times)
    assert j["result"] == "error" and j["errno"] == "ETIMEDOUT"
    assert abs(j["elapsed_s"] - end) <= 0.5


def test_synretry_counters_match_the_sends(p01_quick_out):
    j = load(p01_quick_out, "p01-synretry")
    c, sends = j["counters"], len(j["retransmits"]) + 1
    assert c["TcpExtListenOverflows"] == sends      # every SYN dropped at the full queue
    assert c["TcpExtListenDrops"] == sends
    assert c["TcpExtTCPSynRetrans"] == sends - 1
    assert c["TcpAttemptFails"] == 1 and c["TcpActiveOpens"] == 1


def test_synretry_capture_matches_sockwatch_and_counters(p01_quick_out):
    """The SYN count in the capture = sockwatch's retransmissions + 1 = TcpOutSegs +
    TcpRetransSegs (only this socket sends in the namespace); no DISAGREE (which includes no
    retransmission sockwatch missed)."""
    j = load(p01_quick_out, "p01-synretry")
    p, c = j["packets"], j["counters"]
    assert p["capture"]["dropped"] == 0 and p["capture"]["iface"] == "lo"
    assert p["syn_count"] == len(j["retransmits"]) + 1 == c["TcpOutSegs"] + c["TcpRetransSegs"]
    assert p["disagree"] == []
    assert [r["event"] for r in p["syns"]] == ["new"] + ["change"] * len(j["retransmits"])
    assert p["capture"]["received"] == 2 * p["capture"]["packets"]   # lo: both copies reach libpcap
    for name in ("p01-synretry-ladder.svg", "p01-synretry-syns.svg"):
        assert open(os.path.join(p01_quick_out, name)).read().lstrip().startswith("<")
    assert p["ladder_svg"] == "p01-synretry-ladder.svg" and j["syn_plot"] == "p01-synretry-syns.svg"
    text = open(os.path.join(p01_quick_out, "p01-synretry.txt")).read()
    assert "DISAGREE" not in text and text.count("--S seq=0 len=0--") == p["syn_count"]
