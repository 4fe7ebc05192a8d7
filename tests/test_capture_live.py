"""capture live, in a fresh namespace: the ready line before any packet, one connection seen
packet by packet on lo (each packet once), a clean end on SIGTERM and SIGINT with dropped=0,
-c, the .pcap written only when complete and read back by tcpdump -r with the same packet count
(the independent reader), and a veth pair between two namespaces of its own."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import in_ns, kv
import lab_proc

PORT = 21013
pytestmark = pytest.mark.netns


def start(ns, bindir, *args):
    p = lab_proc.Proc(ns, [os.path.join(bindir, "capture")] + list(args))
    ready = kv(p.wait_line("ready ", timeout=10))
    return p, ready


def one_connection(ns, bindir):
    """listener -m close on PORT, one connect_block to it; the client's result line."""
    with lab_proc.Proc(ns, [os.path.join(bindir, "listener"), "-p", PORT, "-m", "close"]) as lst:
        lst.wait_line("ready ")
        r = lab_proc.run_in_ns(ns, [os.path.join(bindir, "connect_block"), "-p", PORT])
        assert r.returncode == 0, r.stderr
    return kv([ln for ln in r.stdout.splitlines() if ln.startswith("result=")][0])


def wait_for(pred, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.01)


def stop(p, sig=signal.SIGTERM):
    p.proc.send_signal(sig)
    rc = p.stop()
    assert rc == 0, p.stderr
    assert p.stderr == []
    assert p.stdout[-1].startswith("end "), p.stdout[-3:]
    return [kv(ln) for ln in p.stdout[1:-1]], kv(p.stdout[-1])


def tcpdump_count(path):
    r = subprocess.run(["tcpdump", "-nn", "-r", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return len(r.stdout.splitlines())


def test_one_connection_on_lo(netns, bindir, tmp_path):
    out = tmp_path / "c.pcap"
    p, ready = start(netns, bindir, "-i", "lo", "-p", str(PORT), "-w", str(out))
    assert (ready["iface"], ready["linktype"], ready["snaplen"], ready["port"]) == \
        ("lo", "EN10MB", "256", str(PORT))
    assert ready["filter"] == '"tcp' and (f'filter="tcp port {PORT} or icmp or '
                                          '(ip proto 6 and ip[6:2] & 0x1fff != 0)"') in p.stdout[0]
    assert not out.exists() and (tmp_path / "c.pcap.tmp").exists()   # written only at the end
    client = one_connection(netns, bindir)
    assert client["result"] == "ok"
    wait_for(lambda: len(p.stdout) >= 4, "handshake")     # whatever follows, the drain gets
    pkts, end = stop(p)
    syn, synack, ack = pkts[:3]
    assert [(x["dir"], x["flags"]) for x in (syn, synack, ack)] == \
        [("c>s", "S"), ("s>c", "SA"), ("c>s", "A")]
    assert {x["conn"] for x in pkts} == {"1"}
    assert (syn["seq"], syn["ack"], synack["seq"], synack["ack"], ack["seq"], ack["ack"]) == \
        ("0", "-", "0", "1", "1", "1")
    assert syn["opts"].startswith("mss:65495,")                     # lo's MTU 65536 - 40
    assert syn["src"] == client["local"] and syn["dst"] == f"127.0.0.1:{PORT}"
    # t_ns is on CLOCK_MONOTONIC: between the ready line and the end, before connect() returned
    t = [int(x["t_ns"]) for x in pkts]
    assert int(ready["t_ns"]) < t[0] <= t[2] < int(client["end_ns"]) < int(end["t_ns"])
    assert t == sorted(t)
    assert (end["dropped"], end["ifdropped"]) == ("0", "0")
    assert int(end["packets"]) == len(pkts) == int(end["tcp"])
    # on lo the kernel hands libpcap each packet twice (outgoing and incoming); libpcap drops
    # the outgoing copy, so received (the kernel's count) is twice what was printed
    assert int(end["received"]) == 2 * len(pkts)
    assert out.exists() and not (tmp_path / "c.pcap.tmp").exists()
    assert tcpdump_count(str(out)) == len(pkts)


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
def test_written_file_replays_to_the_same_lines(netns, bindir, tmp_path):
    """-r of the file just written prints the same packets (the times on the file's clock)."""
    out = tmp_path / "r.pcap"
    p, ready = start(netns, bindir, "-i", "lo", "-p", str(PORT), "-w", str(out))
    one_connection(netns, bindir)
    wait_for(lambda: len(p.stdout) >= 4, "handshake")
    live, _ = stop(p, signal.SIGINT)
    r = subprocess.run([os.path.join(bindir, "capture"), "-r", str(out), "-p", str(PORT)],
                       capture_output=True, text=True, timeout=10)
    offline = [kv(ln) for ln in r.stdout.splitlines()[1:-1]]
    offset = int(ready["clock_offset_ns"])
    drop = ("t_ns", "t_s")
    assert [{k: v for k, v in x.items() if k not in drop} for x in offline] == \
        [{k: v for k, v in x.items() if k not in drop} for x in live]
    assert [int(x["t_ns"]) - offset for x in offline] == [int(x["t_ns"]) for x in live]
    with open(out, "rb") as f:
        assert f.read(4) == bytes.fromhex("4d3cb2a1")      # the nanosecond pcap magic


def test_count_ends_it(netns, bindir, tmp_path):
    p, _ = start(netns, bindir, "-i", "lo", "-p", str(PORT), "-c", "2")
    one_connection(netns, bindir)
    assert p.proc.wait(timeout=10) == 0
    p.stop()
    assert len(p.stdout) == 4 and p.stdout[-1].startswith("end ")
    assert " packets=2 " in p.stdout[-1] and " dropped=0 " in p.stdout[-1]


def test_quiet_interface_ends_at_once_on_sigterm(netns, bindir, tmp_path):
    out = tmp_path / "q.pcap"
    p, _ = start(netns, bindir, "-i", "lo", "-w", str(out))
    pkts, end = stop(p)
    assert pkts == [] and end["packets"] == "0" and end["dropped"] == "0"
    assert tcpdump_count(str(out)) == 0


def test_bad_output_after_activation_leaves_nothing(netns, bindir, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    r = lab_proc.run_in_ns(netns, [os.path.join(bindir, "capture"), "-i", "lo", "-w", str(d)])
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1
    assert os.listdir(d) == [] and sorted(os.listdir(tmp_path)) == ["d"]


@pytest.fixture
def wire():
    """A wire as run.sh makes one (lab_proc.wire: veth-c 192.0.2.1, veth-s 192.0.2.2)."""
    with lab_proc.wire("capture") as pair:
        yield pair


def test_veth_sees_each_direction_once(wire, bindir, tmp_path):
    c, s = wire
    p, ready = start(c, bindir, "-i", "veth-c", "-p", str(PORT))
    assert ready["linktype"] == "EN10MB"
    with lab_proc.Proc(s, [os.path.join(bindir, "listener"), "-a", "192.0.2.2", "-p", PORT,
                           "-m", "close"]) as lst:
        lst.wait_line("ready ")
        r = lab_proc.run_in_ns(c, [os.path.join(bindir, "connect_block"), "-a", "192.0.2.2",
                                   "-p", PORT])
        assert r.returncode == 0 and "result=ok" in r.stdout, r.stdout + r.stderr
    wait_for(lambda: len(p.stdout) >= 4, "handshake")
    pkts, end = stop(p)
    tcp = [x for x in pkts if "conn" in x]
    assert [(x["dir"], x["flags"]) for x in tcp[:3]] == [("c>s", "S"), ("s>c", "SA"), ("c>s", "A")]
    assert tcp[0]["opts"].startswith("mss:1460,")                   # veth's MTU 1500 - 40
    assert tcp[0]["src"].startswith("192.0.2.1:") and tcp[0]["dst"] == f"192.0.2.2:{PORT}"
    # not lo: libpcap keeps the outgoing packets, and each is seen once, so received = packets
    assert end["dropped"] == "0" and int(end["received"]) == int(end["packets"])
