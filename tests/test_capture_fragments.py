"""capture's decoder on IP fragments (probes/lib/pr_pcap.c, docs/capture.md "IP fragments"): a
fragment is a `frag=` line, never a whole segment.  Crafted .pcap files, written here byte by
byte, with the lines worked out by hand: the issue's case (a FIN carrying 36 bytes behind a
32-byte header, cut at MTU 68 into 48 + 20 bytes, which the old decoder printed as `len=16`),
the fragments out of order with their timestamps going backwards, IPv6 fragment headers, and the
edge cases (a TCP header split across fragments, a first fragment cut by the snapshot, a bad
data offset, another protocol, an offset past 65535).  Then live: a veth pair at MTU 68 whose
36-byte send the default filter catches as both fragments.  Only the live test needs root."""
import ipaddress
import os
import queue
import struct
import subprocess
import time

import pytest

from conftest import kv
import lab_proc

T0 = 1000  # packet i of a crafted file is at T0 s + usec[i] µs
C, S = "10.0.0.1", "10.0.0.2"
EP = "src=10.0.0.1:40000 dst=10.0.0.2:80"
EP_BACK = "src=10.0.0.2:80 dst=10.0.0.1:40000"
NOTS = "tsval=- tsecr=-"
DF, MF = 0x4000, 0x2000


def pcap(frames, usec=None):
    """A microsecond Ethernet pcap; frames are bytes, or (bytes, wire length) for a cut frame."""
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    for i, f in enumerate(frames):
        data, wire = (f, len(f)) if isinstance(f, bytes) else f
        out += struct.pack("<IIII", T0, i if usec is None else usec[i], len(data), wire) + data
    return out


def eth(payload, ethertype=0x0800):
    return bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + struct.pack(">H", ethertype) + payload


def ip4(src, dst, proto, payload, ident=1, frag=DF):
    """An IPv4 header before payload; frag is the flags-and-offset field (offset in 8 bytes)."""
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, frag, 64, proto, 0,
                       ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed) \
        + payload


def ip6(src, dst, nxt, payload):
    return struct.pack(">IHBB", 0x60000000, len(payload), nxt, 64) + \
        ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + payload


def frag6(nxt, offset, more, ident, payload):
    """An IPv6 fragment header (RFC 8200 4.5) before payload; offset in bytes."""
    return struct.pack(">BBHI", nxt, 0, offset | more, ident) + payload


FLAGS = {"F": 1, "S": 2, "R": 4, "P": 8, "A": 16}
TS = b"\x01\x01\x08\x0a" + struct.pack(">II", 111, 222)     # nop, nop, ts: 32-byte header


def tcp(sport, dport, seq, ack, flags, opts=b"", data=b"", doff=None):
    doff = 5 + len(opts) // 4 if doff is None else doff
    f = sum(FLAGS[c] for c in flags)
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, doff << 4, f, 1000, 0, 0) + opts + data


def run(bindir, tmp_path, data, opts):
    """capture -r opts on a pcap file in tmp_path that holds data; its lines."""
    path = tmp_path / "in.pcap"
    path.write_bytes(data)
    r = subprocess.run([os.path.join(bindir, "capture"), "-r", str(path)] + opts,
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.splitlines()


def packet_lines(lines):
    """Each packet line without its t_s= and t_ns=."""
    return [ln.split(" ", 2)[2] for ln in lines[1:-1]]


# the segment: FIN+PSH+ACK, a 32-byte header and 36 bytes, 68 bytes of TCP; at MTU 68
# the first fragment carries 48 of them (68 - 20, a multiple of 8), the second 20 at offset 48
FIN36 = tcp(40000, 80, 1001, 5001, "FPA", TS, b"x" * 36)
FIN36_FRAGS = [eth(ip4(C, S, 6, FIN36[:48], 0x1234, MF)),
               eth(ip4(C, S, 6, FIN36[48:], 0x1234, 48 // 8))]
FIN36_FIRST = ("frag=0 mf=1 id=4660 proto=6 fraglen=48 conn=1 dir=c>s flags=FPA seq=1 ack=1 "
               f"hlen=32 win=1000 opts=nop,nop,ts tsval=111 tsecr=222 {EP}")
FIN36_SECOND = "frag=48 mf=0 id=4660 proto=6 fraglen=20 src=10.0.0.1 dst=10.0.0.2"
HANDSHAKE = [eth(ip4(C, S, 6, tcp(40000, 80, 1000, 0, "S"))),
             eth(ip4(S, C, 6, tcp(80, 40000, 5000, 1001, "SA"))),
             eth(ip4(C, S, 6, tcp(40000, 80, 1001, 5001, "A")))]
HANDSHAKE_LINES = [f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} {EP}",
                   f"conn=1 dir=s>c flags=SA seq=0 ack=1 len=0 win=1000 opts=- {NOTS} {EP_BACK}",
                   f"conn=1 dir=c>s flags=A seq=1 ack=1 len=0 win=1000 opts=- {NOTS} {EP}"]


def test_a_fragmented_fin_is_two_fragment_lines_not_a_segment(bindir, tmp_path):
    """The issue's capture: the old decoder printed the first fragment as `flags=FPA ... len=16`
    and counted it as TCP (so the server's ack=38 acked bytes no segment had).  Now: two frag=
    lines, whose fraglen 48 + 20 - hlen 32 give the 36 bytes; the end line counts them as other.
    The default filter (with -p) is the one capture uses live, and it keeps the second fragment,
    which has no ports."""
    data = pcap(HANDSHAKE + FIN36_FRAGS + [
        eth(ip4(S, C, 6, tcp(80, 40000, 5001, 1001 + 36 + 1, "A")))])
    lines = run(bindir, tmp_path, data, ["-p", "80"])
    assert packet_lines(lines) == HANDSHAKE_LINES + [
        FIN36_FIRST, FIN36_SECOND,
        f"conn=1 dir=s>c flags=A seq=1 ack=38 len=0 win=1000 opts=- {NOTS} {EP_BACK}"]
    assert lines[-1] == ("end t_ns=1000000005000 packets=6 tcp=4 icmp=0 other=2 "
                         "received=- dropped=- ifdropped=-")
    first, second = kv(lines[4]), kv(lines[5])
    assert "len" not in first and "len" not in second
    assert int(first["fraglen"]) + int(second["fraglen"]) - int(first["hlen"]) == 36


def test_fragments_out_of_order_and_back_in_time(bindir, tmp_path):
    """The second fragment first, the first stamped 5 µs before it: t_s goes negative, and the
    first fragment still starts the connection (its seq is the one seen first, so 0)."""
    data = pcap(FIN36_FRAGS[::-1], usec=[10, 5])
    lines = run(bindir, tmp_path, data, ["-p", "80"])
    assert [ln.split(" ", 2)[:2] for ln in lines[1:-1]] == [
        ["t_s=0.000000", "t_ns=1000000010000"], ["t_s=-0.000005", "t_ns=1000000005000"]]
    assert packet_lines(lines) == [
        FIN36_SECOND,
        "frag=0 mf=1 id=4660 proto=6 fraglen=48 conn=1 dir=c>s flags=FPA seq=0 ack=0 "
        f"hlen=32 win=1000 opts=nop,nop,ts tsval=111 tsecr=222 {EP}"]
    assert " packets=2 tcp=0 icmp=0 other=2 " in lines[-1]


def test_ipv6_fragment_headers(bindir, tmp_path):
    """A fragment header right after the fixed one: the first fragment with its TCP fields, the
    second with the addresses; an atomic fragment (offset 0, M clear: RFC 6946) is a whole
    segment; a fragment header cut short or too short for itself is said so."""
    a, b = "2001:db8::1", "2001:db8::2"
    seg = tcp(40000, 80, 1000, 5000, "PA", data=b"y" * 20)              # 40 bytes: 24 + 16
    frames = [eth(ip6(a, b, 44, frag6(6, 0, 1, 0xDEADBEEF, seg[:24])), 0x86DD),
              eth(ip6(a, b, 44, frag6(6, 24, 0, 0xDEADBEEF, seg[24:])), 0x86DD),
              eth(ip6(b, a, 44, frag6(6, 0, 0, 7, tcp(80, 40000, 5000, 1020, "A"))), 0x86DD),
              eth(ip6(b, a, 44, b"\x06\x00\x00"), 0x86DD),
              (eth(ip6(b, a, 44, frag6(6, 0, 1, 8, seg[:24])), 0x86DD)[:14 + 44], 14 + 72)]
    lines = run(bindir, tmp_path, pcap(frames), ["-p", "80", "-f", ""])
    assert packet_lines(lines) == [
        "frag=0 mf=1 id=3735928559 proto=6 fraglen=24 conn=1 dir=c>s flags=PA seq=0 ack=0 "
        f"hlen=20 win=1000 opts=- {NOTS} src=[2001:db8::1]:40000 dst=[2001:db8::2]:80",
        "frag=24 mf=0 id=3735928559 proto=6 fraglen=16 src=2001:db8::1 dst=2001:db8::2",
        f"conn=1 dir=s>c flags=A seq=0 ack=20 len=0 win=1000 opts=- {NOTS} "
        "src=[2001:db8::2]:80 dst=[2001:db8::1]:40000",
        "other=ipv6 caplen=57 len=57 bad=ip6-fragment-length",
        "other=ipv6 caplen=58 len=86 truncated=1"]
    assert " packets=5 tcp=1 icmp=0 other=4 " in lines[-1]


def test_fragment_edge_cases(bindir, tmp_path):
    """A TCP header longer than its first fragment (the options this one holds, split=1); a
    first fragment of 16 bytes (not even the fixed header: addresses, split=1); one cut by the
    snapshot (truncated=1); a data offset below 5; a UDP fragment; an offset whose end passes
    65535; and DF alone, which is no fragment."""
    seg = tcp(40000, 80, 1000, 0, "A", TS, b"z" * 8)                   # 40 bytes, header 32
    frames = [eth(ip4(C, S, 6, seg[:24], 7, MF)),
              eth(ip4(C, S, 6, seg[:16], 8, MF)),
              (eth(ip4(C, S, 6, seg[:24] + bytes(24), 9, MF))[:14 + 20 + 10], 14 + 68),
              eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "A", doff=4) + bytes(4), 10, MF)),
              eth(ip4(C, S, 17, bytes(16), 11, MF)),
              eth(ip4(C, S, 6, bytes(16), 12, 0x1FFF)),
              eth(ip4(C, S, 6, tcp(40000, 80, 1008, 0, "A"), 13, DF))]
    lines = run(bindir, tmp_path, pcap(frames), ["-p", "80", "-f", ""])
    assert packet_lines(lines) == [
        "frag=0 mf=1 id=7 proto=6 fraglen=24 conn=1 dir=c>s flags=A seq=0 ack=0 hlen=32 "
        f"win=1000 opts=nop,nop {NOTS} {EP} split=1",
        "frag=0 mf=1 id=8 proto=6 fraglen=16 src=10.0.0.1 dst=10.0.0.2 split=1",
        "frag=0 mf=1 id=9 proto=6 fraglen=48 src=10.0.0.1 dst=10.0.0.2 truncated=1",
        "frag=0 mf=1 id=10 proto=6 fraglen=24 src=10.0.0.1 dst=10.0.0.2 bad=tcp-header-length",
        "frag=0 mf=1 id=11 proto=17 fraglen=16 src=10.0.0.1 dst=10.0.0.2",
        "frag=65528 mf=0 id=12 proto=6 fraglen=16 src=10.0.0.1 dst=10.0.0.2 "
        "bad=ip-fragment-offset",
        f"conn=1 dir=c>s flags=A seq=8 ack=0 len=0 win=1000 opts=- {NOTS} {EP}"]
    assert " packets=7 tcp=1 icmp=0 other=6 " in lines[-1]


def test_icmp_quoting_a_first_fragment_decodes_its_tcp_header(bindir, tmp_path):
    """An ICMP error quoting the first fragment of a segment quotes its TCP header: decoded as
    usual; one quoting a later fragment has no ports, so protocol and addresses."""
    quote = FIN36_FRAGS[0][14:14 + 28]
    later = FIN36_FRAGS[1][14:14 + 28]
    frames = [eth(ip4(S, C, 1, struct.pack(">BBHI", 3, 4, 0, 68) + q)) for q in (quote, later)]
    assert packet_lines(run(bindir, tmp_path, pcap(frames), ["-p", "80"])) == [
        "icmp=dest-unreachable code=frag-needed type=3 code_n=4 from=10.0.0.2 mtu=68 quoted: "
        f"conn=0 dir=c>s flags=? seq=1001 {EP}",
        "icmp=dest-unreachable code=frag-needed type=3 code_n=4 from=10.0.0.2 mtu=68 quoted: "
        "proto=6 src=10.0.0.1 dst=10.0.0.2"]


PORT = 21013


def wait_containing(proc, text, timeout=10.0):
    """Block on proc's queued lines until one contains text (lab_proc.Proc.wait_line matches
    prefixes only, and every packet line starts with t_s=)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = proc.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no line with {text!r} within {timeout} s: {proc.stdout[-3:]}")
        if line is None:
            pytest.fail(f"capture ended before a line with {text!r}: {proc.stderr}")
        if text in line:
            return line


@pytest.mark.netns
def test_live_veth_at_mtu_68_captures_both_fragments(bindir):
    """A wire at MTU 68 (experiments/lib/wire.sh create C S 68), 36 bytes sent then the write
    side shut: the kernel fragments that segment (measured with nstat: its first try with DF
    fails, IpFragFails 1, the ICMP frag-needed it sends itself locks the route's MTU at 68,
    below route.min_pmtu 552, and the next try goes out without DF in 2 fragments).  The
    default filter with -p keeps both fragments and each is a frag= line: their lengths add up
    to the 36 bytes, and no c>s segment line carries data."""
    with lab_proc.netns("capfrag-c") as c, lab_proc.netns("capfrag-s") as s:
        subprocess.run([lab_proc.WIRE_SH, "create", c, s, "68"], check=True, capture_output=True)
        cap = lab_proc.Proc(c, [os.path.join(bindir, "capture"), "-i", "veth-c", "-p", PORT])
        cap.wait_line("ready ", timeout=10)
        peer = os.path.join(bindir, "peer")
        with lab_proc.Proc(s, [peer, "-r", "server", "-a", "192.0.2.2", "-p", PORT,
                               "-s", "drain,close"]) as srv:
            srv.wait_line("ready ")
            r = lab_proc.run_in_ns(c, [peer, "-r", "client", "-a", "192.0.2.2", "-p", PORT,
                                       "-s", "send:36,shutdown-wr,wait:hup,close"])
            assert r.returncode == 0 and "op=send:36 ret=36 " in r.stdout, r.stdout + r.stderr
        wait_containing(cap, " dir=c>s flags=A seq=38 ack=2 ")     # the last ACK: 36 + FIN
        cap.proc.terminate()
        assert cap.stop() == 0 and cap.stderr == [], cap.stderr
    pkts = [kv(ln) for ln in cap.stdout[1:-1]]
    frags = [p for p in pkts if "frag" in p]
    assert [(p["frag"], p["mf"], p["fraglen"]) for p in frags] == [("0", "1", "48"), ("48", "0", "20")]
    assert frags[0]["id"] == frags[1]["id"] and frags[0]["hlen"] == "32"
    assert all(p["len"] == "0" for p in pkts if "frag" not in p and p.get("dir") == "c>s")
    end = kv(cap.stdout[-1])
    assert (end["tcp"], end["other"], end["dropped"]) == (str(len(pkts) - 2), "2", "0")
