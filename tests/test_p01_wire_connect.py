"""p01-wire-connect end to end (./run.sh --out TMP p01-wire-connect): the MSS follows the MTU, ss
agrees with the capture, each open counted on its own side; asserted as kernel facts with
tolerances, never speeds.  The unit runs once per session (conftest.connect_out, which
p01-wire-netem's report test reads too), the MTU 9000 run once more."""
import os
import re

import pytest

from unit_live import load, run_unit

pytestmark = pytest.mark.netns


def capture_lines(path):
    with open(path) as f:
        return [dict(w.split("=", 1) for w in line.split() if "=" in w)
                for line in f if line.startswith("t_s=")]


def test_wire_connect_mss_follows_the_mtu_and_loopback_is_measured(connect_out):
    j = load(connect_out, "p01-wire-connect")
    assert j["mtu"] == 1500 and j["links"]["client"]["mtu"] == j["links"]["server"]["mtu"] == 1500
    # ipv4_default_advmss(): min(mtu, IP_MAX_MTU 65535) - 20 (IPv4) - 20 (TCP)
    assert j["wire"]["mss"] == {"syn": 1460, "synack": 1460}
    lo_mtu = j["links"]["lo"]["mtu"]
    want_lo = min(lo_mtu, 65535) - 40
    assert j["loopback"]["mss"] == {"syn": want_lo, "synack": want_lo}
    assert j["loopback"]["capture"]["iface"] == "lo" and j["wire"]["capture"]["iface"] == "veth-c"


def test_wire_connect_ss_agrees_with_the_capture(connect_out):
    """The cross-check: ss -tin on both ends (each read in its own namespace) against the MSS
    option in the captured SYN and SYN-ACK: advmss = MSS option − 12 (timestamps on), the
    path MTU is the link's, and both ends of the wire agree."""
    j = load(connect_out, "p01-wire-connect")
    raw = os.path.join(connect_out, "raw", "p01-wire-connect")
    syn = [p for p in capture_lines(os.path.join(raw, "capture.txt")) if p["flags"] == "S"][0]
    assert "ts" in syn["opts"].split(",")
    wire_ss = j["wire"]["ss"]
    assert len(wire_ss) == 2        # the client's socket and the server's (its namespace)
    client, server = wire_ss
    assert client["local"] == j["wire"]["local"] and server["local"] == "192.0.2.2:21013"
    # advmss: what this end announced less the timestamp option; mss: what the peer announced
    assert client["advmss"] == j["wire"]["mss"]["syn"] - 12
    assert server["advmss"] == j["wire"]["mss"]["synack"] - 12
    assert client["mss"] == j["wire"]["mss"]["synack"] - 12
    assert server["mss"] == j["wire"]["mss"]["syn"] - 12
    for s in wire_ss:
        assert s["pmtu"] == 1500 and s["rcvmss"] <= s["advmss"]
    for s in j["loopback"]["ss"]:
        assert s["advmss"] == j["loopback"]["mss"]["syn"] - 12 and s["pmtu"] == 65535


def test_wire_connect_counts_each_open_on_its_own_side(connect_out):
    j = load(connect_out, "p01-wire-connect")
    c, s = j["counters"], j["server_counters"]
    assert c["TcpActiveOpens"] == 1 and c["TcpPassiveOpens"] == 0
    assert s["TcpPassiveOpens"] == 1 and s["TcpActiveOpens"] == 0
    assert c["TcpRetransSegs"] == 0 and s["TcpRetransSegs"] == 0
    assert c["TcpOutSegs"] == 2 and s["TcpOutSegs"] == 1       # SYN + ACK; SYN-ACK
    assert j["result"] == "ok" and j["errno"] is None and j["elapsed_s"] < 1.0  # no SYN lost


def test_wire_connect_handshake_packet_by_packet(connect_out):
    j = load(connect_out, "p01-wire-connect")
    segs = [r for r in j["ladder"] if r["dir"] is not None]
    assert [r["label"].split()[0] for r in segs] == ["S", "SA", "A"]
    assert [r["dir"] for r in segs] == ["c>s", "s>c", "c>s"]
    assert all(x["capture"]["dropped"] == 0 for x in (j["wire"], j["loopback"]))
    assert os.path.getsize(os.path.join(connect_out, "p01-wire-connect-ladder.svg")) > 0
    wire = open(os.path.join(connect_out, "raw", "p01-wire-connect", "wire.txt")).read()
    assert "## client side (veth-c)" in wire and "## server side (veth-s)" in wire
    text = open(os.path.join(connect_out, "p01-wire-connect.txt")).read()
    assert re.search(r"^  SYN \(client\) +1460 +65495$", text, re.M)


def test_wire_connect_at_mtu_9000(tmp_path, bindir):
    r = run_unit(tmp_path, "--mtu", "9000", "p01-wire-connect")
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, "p01-wire-connect")
    assert j["mtu"] == 9000 and j["wire"]["mss"] == {"syn": 8960, "synack": 8960}
    assert all(s["pmtu"] == 9000 and s["advmss"] == 8948 for s in j["wire"]["ss"])


@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_wire_connect_knobs_advmss_and_timestamps(tmp_path, bindir):
    """The knobs: a route's advmss metric in the client's namespace is what its SYN announces
    (the server's SYN-ACK still says MTU - 40), and tcp_timestamps=0 there leaves the 12 B of
    the timestamp option out of both ends' mss and advmss (ss), on the wire and on loopback."""
    r = run_unit(tmp_path, "p01-wire-connect", "--set", "advmss=1000", "--set", "timestamps=0")
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, "p01-wire-connect")
    assert j["knobs"] == {"advmss": 1000, "timestamps": 0}
    assert j["wire"]["mss"] == {"syn": 1000, "synack": 1460}
    client, server = j["wire"]["ss"]
    assert client["local"] == j["wire"]["local"]
    assert client["advmss"] == 1000 and server["mss"] == 1000      # what the client announced
    assert server["advmss"] == 1460 and client["mss"] == 1460      # what the server announced
    assert all(s["advmss"] == j["loopback"]["mss"]["syn"] for s in j["loopback"]["ss"])
    text = open(os.path.join(tmp_path, "p01-wire-connect.txt")).read()
    assert "timestamps in both SYN and SYN-ACK: no" in text
    assert "the advmss metric of the client's route to the server (knob advmss=1000)" in text
    assert "not explained here" not in text
