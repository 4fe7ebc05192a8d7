"""p01-close-synsent-late: live (root, netns; the shared run of the three wire-fault units,
conftest.wire_faults_out), a RST follows the SYN-ACK that arrives after close().  Replay (no
root): its report on a reference run's raw files, refusing a capture that dropped packets and
saying so when no RST followed."""
import os
import re
import subprocess

import pytest

from conftest import TOP
from unit_live import load, replay, text

RUN = os.path.join(TOP, "run.sh")
SCRIPT = os.path.join(TOP, "experiments", "p01-close-synsent-late", "p01-close-synsent-late.sh")


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


@pytest.mark.netns
@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_the_knob_timeout_ms_moves_close_not_the_syn_ack(tmp_path, bindir):
    """--set timeout_ms=100: close() comes at about 100 ms, the socket goes with it, and the
    server's SYN-ACK still comes on its own timer, about 1 s after the SYN, and meets a RST."""
    r = subprocess.run([RUN, "--out", str(tmp_path), "--set", "timeout_ms=100",
                        "p01-close-synsent-late"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(str(tmp_path), "p01-close-synsent-late")
    assert j["result"] == "timeout" and 95 <= j["closed_ms"] <= 300
    segs = [x for x in j["segments"] if x["kind"] == "tcp"]
    assert [(x["dir"], x["flags"]) for x in segs] == [("c>s", "S"), ("s>c", "SA"), ("c>s", "R")]
    syn, synack, rst = segs
    assert 900 <= synack["t_ms"] - syn["t_ms"] <= 3000
    assert synack["t_ms"] - j["closed_ms"] > 600
    assert j["rst_follows_late_synack"] and j["gone_ms"] - j["closed_ms"] < 100
    assert "knobs: timeout_ms=100 " in text(str(tmp_path), "p01-close-synsent-late")


@pytest.mark.parametrize("value", ["99", "801", "x", "0500"])
def test_the_collect_script_refuses_a_bad_timeout(tmp_path, value):
    r = subprocess.run(["sh", SCRIPT, str(tmp_path / "raw")], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, TL_KNOB_TIMEOUT_MS=value))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "knob timeout_ms=" in r.stderr
    assert not os.path.exists(tmp_path / "raw")
