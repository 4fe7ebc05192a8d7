"""p01-synack-lost end to end (./run.sh --out TMP p01-synack-lost, once per module): the SYN-ACKs
dropped on the way and locally, the timers on both ends; then its report run by hand on the
same raw directory."""
import os
import re
import subprocess

import pytest

from conftest import TOP
from unit_live import PY, load, run_unit, text, unit_out
from unit_replay import Report

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def synack_out(tmp_path_factory, bindir):
    return unit_out(tmp_path_factory, "p01-synack-lost")


def test_synack_lost_rule_dropped_two_in_each_part(synack_out):
    j = load(synack_out, "p01-synack-lost")
    for part in ("lost", "local"):
        p = j["parts"][part]
        assert p["rule"]["packets"] == 2 and p["rule"]["verdict"] == "drop", part
        assert p["result"] == "ok" and p["errno"] is None, part
        assert p["client_capture"]["dropped"] == 0 and p["server_capture"]["dropped"] == 0
    wire = open(os.path.join(synack_out, "raw", "p01-synack-lost", "wire.txt")).read()
    assert len(re.findall(r"counter packets 2 bytes [0-9]+ drop", wire)) == 2


def test_synack_lost_on_the_way_the_server_retransmits(synack_out):
    """Dropped at the client's input: the server's sends succeed, so the capture on the client's
    end shows every SYN-ACK (libpcap taps before the input hook), the first two dropped; the
    server counts its SYN-ACK retransmissions, the client its SYN retransmission(s)."""
    p = load(synack_out, "p01-synack-lost")["parts"]["lost"]
    sent, seen = p["synacks_sent"], p["synacks_at_client_ms"]
    assert len(sent) >= 3 and len(seen) == len(sent)
    assert p["dropped_at_client"] == 2
    assert p["server_counters"]["TcpExtTCPSynRetrans"] == len(sent) - 1 >= 2
    assert p["server_counters"]["TcpRetransSegs"] == len(sent) - 1
    assert p["counters"]["TcpExtTCPSynRetrans"] == len(p["syns_ms"]) - 1 >= 1
    assert p["server_counters"]["TcpExtTCPTimeouts"] >= 1     # the request's own timer fired
    assert sum(1 for s in sent if s["answers_syn"] is None) >= 1
    # the first SYN-ACK answered the first SYN; the request's timer (1 s) and the SYN's RTO (1 s)
    assert sent[0]["answers_syn"] == 0
    assert 0.9 <= p["elapsed_s"] <= 3.5


def test_synack_lost_locally_the_server_counts_no_retransmission(synack_out):
    """Dropped by the server's own output hook: tcp_rtx_synack() counts only a send that
    succeeded, so TCPSynRetrans stays 0 although SYN-ACKs were resent; IP counted the requests
    nft dropped (IpOutRequests) but not as transmitted."""
    p = load(synack_out, "p01-synack-lost")["parts"]["local"]
    s = p["server_counters"]
    assert s["TcpExtTCPSynRetrans"] == 0 and s["TcpRetransSegs"] == 0
    assert s["IpOutRequests"] - s["IpOutTransmits"] == 2
    assert len(p["synacks_sent"]) == len(p["synacks_at_client_ms"]) == 1
    assert p["synacks_sent"][0]["answers_syn"] >= 1    # it answered a retransmitted SYN
    assert p["counters"]["TcpExtTCPSynRetrans"] == len(p["syns_ms"]) - 1 >= 1


def test_synack_lost_both_timers_were_seen(synack_out):
    j = load(synack_out, "p01-synack-lost")
    for part in ("lost", "local"):
        p = j["parts"][part]
        # tcp_v4_connect() sets SYN-SENT and hashes the socket before tcp_connect() arms the
        # retransmit timer: a sample that falls in between (seen under load) shows timer=off
        ev = p["client_events"]
        armed = next(i for i, e in enumerate(ev) if e["timer"] == "on")
        assert all((e["state"], e["timer"]) == ("SYN-SENT", "off") for e in ev[:armed]), ev
        c, s = ev[armed], p["server_events"][0]
        assert ev[0]["event"] == "new" and c["state"] == "SYN-SENT"
        assert (s["event"], s["state"], s["timer"]) == ("new", "SYN-RECV", "on")
        # both start at the initial 1 s (TCP_TIMEOUT_INIT, not 2 s or more), seen when
        # sockwatch's first sample found them
        assert 500 <= c["expires_ms"] <= 1000 and 500 <= s["expires_ms"] <= 1000
    assert os.path.getsize(os.path.join(synack_out, "p01-synack-lost-ladder.svg")) > 0


def test_synack_lost_report_by_hand_is_the_same(synack_out, tmp_path):
    r = subprocess.run([PY, os.path.join(TOP, "experiments", "p01-synack-lost", "p01-synack-lost.py"),
                        str(synack_out / "raw"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p01-synack-lost.txt").read_text() == \
        (synack_out / "p01-synack-lost.txt").read_text()


# ---- the knob drops (experiments/units) ------------------------------------------------------

test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = \
    Report("p01-synack-lost").knob_tests([("DROPS", "0"), ("DROPS", "5"), ("DROPS", "x")],
                                         ["drops=0", "drops=5", "drops=two"])


@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_synack_lost_knob_drops_three(tmp_path):
    """--set drops=3: each rule drops 3 SYN-ACKs and the report counts what it recorded, not 2.
    Part lost: one more SYN-ACK dropped on the way means the server's TCPSynRetrans is the
    SYN-ACKs that left less one, the first 3 at the client dropped.  Part local: the SYN-ACK
    that leaves first after a SYN whose answer the server's own hook dropped is the request
    timer's, a second later, not that SYN's answer (classify(): ANSWER_NS)."""
    r = run_unit(tmp_path, "p01-synack-lost", "--set", "drops=3")
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, "p01-synack-lost")
    knobs = open(os.path.join(tmp_path, "raw", "p01-synack-lost", "knobs.txt")).read()
    assert "drops=3" in knobs, knobs
    for part in ("lost", "local"):
        p = j["parts"][part]
        assert p["rule"]["packets"] == 3 and p["result"] == "ok", part
        assert len(p["syns_ms"]) >= 3, part          # two SYN retransmissions at least
        for s in p["synacks_sent"]:
            assert s["after_syn_us"] is None or s["after_syn_us"] < 100_000, (part, s)
    lost = j["parts"]["lost"]
    assert lost["dropped_at_client"] == 3
    assert len(lost["synacks_at_client_ms"]) == len(lost["synacks_sent"]) >= 4
    assert lost["server_counters"]["TcpExtTCPSynRetrans"] == len(lost["synacks_sent"]) - 1
    assert "dropped by the rule: 3" in text(tmp_path, "p01-synack-lost")
