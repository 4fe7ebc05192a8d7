"""The wire units end to end (./run.sh --out TMP UNIT): p01-wire-connect, p01-synack-lost and
p01-wire-netem, each asserted as kernel facts with tolerances, never speeds.  Each unit runs
once per module (the MTU 9000 run of p01-wire-connect once more); the reports are then also
run by hand on the same raw directories."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP

pytestmark = pytest.mark.netns
RUN = os.path.join(TOP, "run.sh")
PY = "/usr/bin/python3"


def run_unit(d, *args, timeout=120):
    r = subprocess.run([RUN, "--out", str(d), *args], capture_output=True, text=True,
                       timeout=timeout)
    return r


def load(out, name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)


def capture_lines(path):
    with open(path) as f:
        return [dict(w.split("=", 1) for w in line.split() if "=" in w)
                for line in f if line.startswith("t_s=")]


def unit_out(tmp_path_factory, unit):
    """UNIT run once by run.sh into a fresh directory, which must succeed."""
    d = tmp_path_factory.mktemp(unit)
    r = run_unit(d, unit)
    assert r.returncode == 0, r.stderr[-3000:]
    return d


@pytest.fixture(scope="module")
def connect_out(tmp_path_factory, bindir):
    return unit_out(tmp_path_factory, "p01-wire-connect")


@pytest.fixture(scope="module")
def synack_out(tmp_path_factory, bindir):
    return unit_out(tmp_path_factory, "p01-synack-lost")


# ---- p01-wire-connect ---------------------------------------------------------------------------

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


# ---- p01-synack-lost ----------------------------------------------------------------------------

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


# ---- p01-wire-netem -----------------------------------------------------------------------------

def test_wire_netem_skips_without_sch_netem_or_measures_the_rtt(tmp_path, bindir):
    r = run_unit(tmp_path, "p01-wire-netem")
    assert r.returncode == 0, r.stderr[-3000:]
    status = tmp_path / "raw" / "p01-wire-netem" / "status.txt"
    if status.exists():
        why = status.read_text()
        assert why.startswith("skipped: ") and "sch_netem" in why and why.count("\n") == 1
        assert "1 skipped" in r.stderr and "p01-wire-netem: skipped:" in r.stderr
        # run.sh ran its report, which says it did not run, and which kernel said so
        assert "wrote " in r.stderr and "p01-wire-netem.txt" in r.stderr
        text = (tmp_path / "p01-wire-netem.txt").read_text()
        assert text.startswith("p01-wire-netem: not run on this kernel: " + why[len("skipped: "):])
        j = load(tmp_path, "p01-wire-netem")
        assert j["skipped"] == why[len("skipped: "):].strip() and j["kernel"] == os.uname().release
    else:
        j = load(tmp_path, "p01-wire-netem")
        rtt = 2 * j["delay_ms"]
        assert j["result"] == "ok" and j["skipped"] is None
        assert rtt <= j["elapsed_s"] * 1e3 <= rtt + 50
        assert rtt <= j["syn_synack_ms"] + 1 and j["rtt_ms"] is not None and j["rtt_ms"] >= rtt


def test_wire_netem_report_reads_a_run(connect_out, tmp_path):
    """The ran branch, on real raw files of a wire run without netem (p01-wire-connect's, and
    delay 0): it must read them and say what the kernel showed."""
    src = os.path.join(connect_out, "raw", "p01-wire-connect")
    dst = tmp_path / "raw" / "p01-wire-netem"
    dst.mkdir(parents=True)
    for f in ("client.txt", "capture.txt", "ss-client.txt", "machine.txt", "wire.txt",
              "counters-delta.txt", "collected-at.txt"):
        shutil.copy(os.path.join(src, f), dst / f)
    (dst / "delay-ms.txt").write_text("0\n")
    r = subprocess.run([PY, os.path.join(TOP, "experiments", "p01-wire-netem", "p01-wire-netem.py"),
                        str(tmp_path / "raw"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = load(tmp_path, "p01-wire-netem")
    w = load(connect_out, "p01-wire-connect")
    assert j["elapsed_s"] == w["elapsed_s"] and j["result"] == "ok" and j["delay_ms"] == 0
    assert j["rtt_ms"] == w["wire"]["ss"][0]["rtt_ms"]
    (dst / "capture.txt").write_text("ready t_ns=1\n")     # cut off: no end line
    r = subprocess.run([PY, os.path.join(TOP, "experiments", "p01-wire-netem", "p01-wire-netem.py"),
                        str(tmp_path / "raw"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "capture.txt" in r.stderr


# The reports on bad raw input: tests/test_badinput_reports.py (the wire units' rows of its table).
