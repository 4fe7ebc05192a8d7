"""p01-close-synsent-late: live (root, netns; the shared run of the three wire-fault units,
conftest.wire_faults_out), a RST follows the SYN-ACK that arrives after close().  Replay (no
root): its report on a reference run's raw files, refusing a capture that dropped packets and
saying so when no RST followed."""
import os
import re

import pytest

from unit_live import load, replay, text


@pytest.mark.netns
def test_a_rst_follows_the_syn_ack_that_arrives_after_close(wire_faults_out):
    j = load(wire_faults_out, "p01-close-synsent-late")
    assert j["result"] == "timeout" and 480 <= j["closed_ms"] <= 700
    segs = [x for x in j["segments"] if x["kind"] == "tcp"]
    assert [(x["dir"], x["flags"]) for x in segs] == [("c>s", "S"), ("s>c", "SA"), ("c>s", "R")]
    syn, synack, rst = segs
    assert j["nft_dropped_synacks"] == 1             # the first SYN-ACK never reached the wire
    assert synack["t_ms"] > j["closed_ms"]
    assert 900 <= synack["t_ms"] - syn["t_ms"] <= 3000   # the server's SYN-ACK timer, 1 s
    assert rst["t_ms"] >= synack["t_ms"] and rst["seq"] == synack["ack"] == 1
    assert j["rst_follows_late_synack"]
    # the socket went at close(), not at the SYN-ACK
    assert j["gone_ms"] is not None and j["gone_ms"] - j["closed_ms"] < 100
    assert j["socket_after_close"] == 0
    c, s = j["counters_client"], j["counters_server"]
    assert c["TcpOutRsts"] == 1 and c["TcpAttemptFails"] == 0
    assert s["TcpExtTCPSynRetrans"] == 1 and s["TcpExtEmbryonicRsts"] == 1
    assert s["TcpAttemptFails"] == 1


def test_a_capture_that_dropped_packets_is_refused(tmp_path):
    def dropped(d):
        path = d / "capture.txt"
        s = path.read_text().replace(" dropped=0 ", " dropped=3 ")
        path.write_text(s)
    r, out = replay(tmp_path, "p01-close-synsent-late", dropped)
    assert r.returncode == 1 and "dropped=3" in r.stderr
    assert os.listdir(out) == []


def test_no_rst_after_the_late_syn_ack_is_said(tmp_path):
    def no_rst(d):
        path = d / "capture.txt"
        lines = [x for x in path.read_text().splitlines() if " flags=R " not in x]
        lines[-1] = re.sub(r"tcp=[0-9]+", "tcp=2", re.sub(r"packets=[0-9]+", "packets=2",
                                                          lines[-1]))
        path.write_text("\n".join(lines) + "\n")
    r, out = replay(tmp_path, "p01-close-synsent-late", no_rst)
    assert r.returncode == 0, r.stderr
    assert load(out, "p01-close-synsent-late")["rst_follows_late_synack"] is False
    assert "NO RST followed a SYN-ACK" in text(out, "p01-close-synsent-late")
