"""capture's decoder (probes/lib/pr_pcap.c) on crafted packets: each case is a .pcap written here
byte by byte (link type, headers, options, cuts) and the exact line `capture -r` must print for
each packet, worked out by hand from the bytes — every TCP option kind, malformed and cut option
lists, headers cut short or malformed, ICMP errors quoting 8 bytes or a whole TCP header, the
link types (Ethernet, VLAN, SLL, SLL2, raw IP), IPv6, the connection table's numbering and ISNs.
No root needed."""
import os
import struct
import subprocess

import pytest

T0 = 1000  # every crafted packet is at 1000 s + its index in microseconds


def pcap(linktype, frames, snaplen=262144):
    """A microsecond pcap file: frames are bytes, or (bytes, wire length) for a cut frame."""
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)
    for i, f in enumerate(frames):
        data, wire = (f, len(f)) if isinstance(f, bytes) else f
        out += struct.pack("<IIII", T0, i, len(data), wire) + data
    return out


def eth(payload, ethertype=0x0800, vlan=None):
    head = bytes(6) + bytes([2, 0, 0, 0, 0, 1])
    if vlan is not None:
        head += struct.pack(">HH", 0x8100, vlan)
    return head + struct.pack(">H", ethertype) + payload


def ip4(src, dst, proto, payload, ihl=5, total=None, frag=0):
    opts = bytes((ihl - 5) * 4) if ihl > 5 else b""
    total = 4 * max(ihl, 5) + len(payload) if total is None else total
    return struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0, total, 1, frag, 64, proto, 0,
                       bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))) \
        + opts + payload


def ip6(src, dst, nxt, payload):
    import ipaddress
    return struct.pack(">IHBB", 0x60000000, len(payload), nxt, 64) + \
        ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + payload


FLAGS = {"F": 1, "S": 2, "R": 4, "P": 8, "A": 16, "U": 32, "E": 64, "C": 128}


def tcp(sport, dport, seq, ack, flags, win=1000, opts=b"", data=b"", doff=None):
    opts += bytes(-len(opts) % 4)
    doff = 5 + len(opts) // 4 if doff is None else doff
    f = sum(FLAGS[c] for c in flags)
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, doff << 4, f, win, 0, 0) + opts + data


def icmp(typ, code, quoted, rest=0):
    return struct.pack(">BBHI", typ, code, 0, rest) + quoted


MSS = b"\x02\x04\x05\xb4"                 # mss 1460
SACKOK = b"\x04\x02"
TS = b"\x08\x0a" + struct.pack(">II", 111, 222)
NOP = b"\x01"
WS7 = b"\x03\x03\x07"
C, S = "10.0.0.1", "10.0.0.2"             # client, server (port 80)
SYN = tcp(40000, 80, 1000, 0, "S", 64240, MSS + SACKOK + TS + NOP + WS7)
SYNACK = tcp(80, 40000, 5000, 1001, "SA", 65160, MSS + SACKOK + TS + NOP + WS7)
SYN_LINE = ("conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=64240 "
            "opts=mss:1460,sackok,ts,nop,wscale:7 tsval=111 tsecr=222 "
            "src=10.0.0.1:40000 dst=10.0.0.2:80")
SYNACK_LINE = ("conn=1 dir=s>c flags=SA seq=0 ack=1 len=0 win=65160 "
               "opts=mss:1460,sackok,ts,nop,wscale:7 tsval=111 tsecr=222 "
               "src=10.0.0.2:80 dst=10.0.0.1:40000")
EP = "src=10.0.0.1:40000 dst=10.0.0.2:80"
EP_BACK = "src=10.0.0.2:80 dst=10.0.0.1:40000"
NOTS = "tsval=- tsecr=-"

# (id, linktype, frames, capture options, [the line after t_s= t_ns= for each frame])
CASES = [
    ("handshake-data-fin", 1, [
        eth(ip4(C, S, 6, SYN)), eth(ip4(S, C, 6, SYNACK)),
        eth(ip4(C, S, 6, tcp(40000, 80, 1001, 5001, "A"))),
        eth(ip4(C, S, 6, tcp(40000, 80, 1001, 5001, "PA", data=b"hello"))),
        eth(ip4(S, C, 6, tcp(80, 40000, 5001, 1006, "FA"))),
        eth(ip4(C, S, 6, tcp(40000, 80, 1006, 5002, "RA")))],
     ["-p", "80"], [
        SYN_LINE, SYNACK_LINE,
        f"conn=1 dir=c>s flags=A seq=1 ack=1 len=0 win=1000 opts=- {NOTS} {EP}",
        f"conn=1 dir=c>s flags=PA seq=1 ack=1 len=5 win=1000 opts=- {NOTS} {EP}",
        f"conn=1 dir=s>c flags=FA seq=1 ack=6 len=0 win=1000 opts=- {NOTS} {EP_BACK}",
        f"conn=1 dir=c>s flags=RA seq=6 ack=2 len=0 win=1000 opts=- {NOTS} {EP}"]),
    ("every-flag-and-no-port", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 7, 9, "FSRPAUEC"))),
        eth(ip4(C, S, 6, tcp(40000, 80, 8, 9, "")))],
     [], [
        f"conn=1 dir=?>? flags=FSRPAUEC seq=0 ack=1 len=0 win=1000 opts=- {NOTS} {EP}",
        f"conn=1 dir=?>? flags=- seq=1 ack=- len=0 win=1000 opts=- {NOTS} {EP}"]),
    ("options-sack-eol-unknown", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 1, "A", opts=NOP + NOP + b"\x05\x12" + bytes(16)
                             + b"\x1e\x04\xaa\xbb" + b"\x00" + b"\x02\x04\x05\xb4")))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=A seq=0 ack=0 len=0 win=1000 "
        f"opts=nop,nop,sack:2,unknown:30,eol {NOTS} {EP}"]),
    ("option-length-below-2", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", opts=MSS + b"\x08\x01" + bytes(2))))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=mss:1460 {NOTS} {EP} "
        "bad=tcp-option-length"]),
    ("option-past-header", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", opts=NOP + NOP + NOP + b"\x02\x08\x05")))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=nop,nop,nop {NOTS} {EP} "
        "bad=tcp-option-length"]),
    ("option-no-length-byte", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", opts=NOP + NOP + NOP + b"\x02")))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=nop,nop,nop {NOTS} {EP} "
        "bad=tcp-option-length"]),
    ("mss-wrong-length", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", opts=b"\x02\x03\x05" + NOP)))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} {EP} "
        "bad=tcp-option-length"]),
    ("sack-wrong-length", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 1, "A", opts=b"\x05\x0b" + bytes(9) + NOP)))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=A seq=0 ack=0 len=0 win=1000 opts=- {NOTS} {EP} "
        "bad=tcp-option-length"]),
    ("options-cut-by-snaplen", 1, [
        (eth(ip4(C, S, 6, SYN))[:14 + 20 + 20 + 6], 14 + 20 + len(SYN))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=64240 opts=mss:1460,sackok {NOTS} {EP} "
        "truncated=1"]),
    ("option-cut-mid-timestamp", 1, [
        (eth(ip4(C, S, 6, SYN))[:14 + 20 + 20 + 10], 14 + 20 + len(SYN))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=64240 opts=mss:1460,sackok {NOTS} {EP} "
        "truncated=1"]),
    ("payload-cut-is-not-truncated", 1, [
        (eth(ip4(C, S, 6, tcp(40000, 80, 1, 1, "PA", data=bytes(1000))))[:14 + 40 + 10],
         14 + 40 + 1000)],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=PA seq=0 ack=0 len=1000 win=1000 opts=- {NOTS} {EP}"]),
    ("tcp-header-cut", 1, [
        (eth(ip4(C, S, 6, SYN))[:14 + 20 + 12], 14 + 20 + len(SYN))],
     [], [
        "other=tcp caplen=46 len=74 proto=6 src=10.0.0.1 dst=10.0.0.2 truncated=1"]),
    ("tcp-doff-below-5", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", doff=4)))],
     [], [
        "other=tcp caplen=54 len=54 proto=6 src=10.0.0.1 dst=10.0.0.2 bad=tcp-header-length"]),
    ("tcp-doff-past-ip-length", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", doff=15)))],
     [], [
        "other=tcp caplen=54 len=54 proto=6 src=10.0.0.1 dst=10.0.0.2 bad=tcp-header-length"]),
    ("ip-bad-headers", 1, [
        eth(ip4(C, S, 6, SYN, ihl=4)), eth(ip4(C, S, 6, SYN, total=10)),
        eth(b"\x50" + ip4(C, S, 6, SYN)[1:]), (eth(ip4(C, S, 6, SYN))[:14 + 19], 88)],
     [], [
        "other=ipv4 caplen=74 len=74 bad=ip-ihl",
        "other=ipv4 caplen=74 len=74 bad=ip-length",
        "other=ipv4 caplen=74 len=74 bad=ip-version",
        "other=ipv4 caplen=33 len=88 truncated=1"]),
    ("ip-options-and-padding", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S", data=b"ab"), ihl=6) + bytes(20))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=2 win=1000 opts=- {NOTS} {EP}"]),
    ("not-tcp", 1, [
        eth(ip4(C, S, 17, bytes(8))), eth(bytes(28), 0x0806), eth(bytes(20), 0x88cc),
        eth(ip4(C, S, 6, SYN, frag=0x0010)), eth(bytes(10))[:10]],
     ["-f", ""], [
        "other=ipv4 caplen=42 len=42 proto=17 src=10.0.0.1 dst=10.0.0.2",
        "other=arp caplen=42 len=42",
        "other=ethertype-0x88cc caplen=34 len=34",
        "frag=128 mf=0 id=1 proto=6 fraglen=40 src=10.0.0.1 dst=10.0.0.2",
        "other=link caplen=10 len=10 truncated=1"]),
    ("icmp-port-unreachable-quoting-syn", 1, [
        eth(ip4(C, S, 6, SYN)),
        eth(ip4(S, C, 1, icmp(3, 3, ip4(C, S, 6, SYN)))),
        eth(ip4(S, C, 1, icmp(3, 1, ip4(C, S, 6, SYN)[:28]))),
        eth(ip4(S, C, 1, icmp(3, 13, ip4(C, S, 6, SYN)[:27]))),
        eth(ip4(S, C, 1, icmp(3, 4, ip4(C, S, 6, SYN)[:40], rest=1400))),
        eth(ip4(S, C, 1, icmp(11, 0, ip4("10.9.9.9", S, 6, SYN)[:28]))),
        eth(ip4(S, C, 1, icmp(3, 3, ip4(C, S, 17, bytes(8))))),
        eth(ip4(S, C, 1, icmp(3, 3, ip4(C, S, 6, SYN)[:12]))),
        eth(ip4(S, C, 1, icmp(8, 0, b"ping"))),
        eth(ip4(S, C, 1, icmp(3, 99, b""))),
        eth(ip4(S, C, 1, b"\x03\x03\x00"))],
     ["-p", "80"], [
        SYN_LINE,
        "icmp=dest-unreachable code=port-unreachable type=3 code_n=3 from=10.0.0.2 quoted: "
        f"conn=1 dir=c>s flags=S seq=0 {EP}",
        "icmp=dest-unreachable code=host-unreachable type=3 code_n=1 from=10.0.0.2 quoted: "
        f"conn=1 dir=c>s flags=? seq=0 {EP}",
        "icmp=dest-unreachable code=admin-prohibited type=3 code_n=13 from=10.0.0.2 quoted: "
        "proto=6 src=10.0.0.1 dst=10.0.0.2 truncated=1",
        "icmp=dest-unreachable code=frag-needed type=3 code_n=4 from=10.0.0.2 mtu=1400 quoted: "
        f"conn=1 dir=c>s flags=S seq=0 {EP}",
        "icmp=time-exceeded code=ttl-exceeded type=11 code_n=0 from=10.0.0.2 quoted: "
        "conn=0 dir=c>s flags=? seq=1000 src=10.9.9.9:40000 dst=10.0.0.2:80",
        "icmp=dest-unreachable code=port-unreachable type=3 code_n=3 from=10.0.0.2 quoted: "
        "proto=17 src=10.0.0.1 dst=10.0.0.2",
        "icmp=dest-unreachable code=port-unreachable type=3 code_n=3 from=10.0.0.2 quoted: "
        "truncated=1",
        "icmp=echo-request code=- type=8 code_n=0 from=10.0.0.2 to=10.0.0.1",
        "icmp=dest-unreachable code=- type=3 code_n=99 from=10.0.0.2 quoted: truncated=1",
        "other=icmp caplen=37 len=37 proto=1 src=10.0.0.2 dst=10.0.0.1 bad=icmp-length"]),
    ("icmp-cut-by-snaplen", 1, [
        (eth(ip4(S, C, 1, icmp(3, 3, ip4(C, S, 6, SYN))))[:14 + 20 + 6], 14 + 20 + 8 + 60)],
     [], [
        "other=icmp caplen=40 len=102 proto=1 src=10.0.0.2 dst=10.0.0.1 truncated=1"]),
    ("ipv6-and-icmp6", 1, [
        eth(ip6("2001:db8::1", "2001:db8::2", 6, SYN), 0x86dd),
        eth(ip6("2001:db8::2", "2001:db8::1", 58,
                icmp(1, 4, ip6("2001:db8::1", "2001:db8::2", 6, SYN))), 0x86dd),
        eth(ip6("2001:db8::2", "2001:db8::1", 58,
                icmp(2, 0, ip6("2001:db8::1", "2001:db8::2", 6, SYN), rest=1280)), 0x86dd),
        eth(ip6("2001:db8::2", "2001:db8::1", 17, bytes(8)), 0x86dd),
        (eth(ip6("2001:db8::2", "2001:db8::1", 6, SYN), 0x86dd)[:14 + 39], 100)],
     ["-p", "80", "-f", ""], [
        "conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=64240 "
        "opts=mss:1460,sackok,ts,nop,wscale:7 tsval=111 tsecr=222 "
        "src=[2001:db8::1]:40000 dst=[2001:db8::2]:80",
        "icmp6=dest-unreachable code=port-unreachable type=1 code_n=4 from=2001:db8::2 quoted: "
        "conn=1 dir=c>s flags=S seq=0 src=[2001:db8::1]:40000 dst=[2001:db8::2]:80",
        "icmp6=packet-too-big code=- type=2 code_n=0 from=2001:db8::2 mtu=1280 quoted: "
        "conn=1 dir=c>s flags=S seq=0 src=[2001:db8::1]:40000 dst=[2001:db8::2]:80",
        "other=ipv6 caplen=62 len=62 proto=17 src=2001:db8::2 dst=2001:db8::1",
        "other=ipv6 caplen=53 len=100 truncated=1"]),
    ("vlan-tag", 1, [eth(ip4(C, S, 6, SYN), vlan=5)], ["-p", "80", "-f", ""],
     [SYN_LINE]),
    ("linux-sll", 113, [bytes(14) + b"\x08\x00" + ip4(C, S, 6, SYN)], ["-p", "80"], [SYN_LINE]),
    ("linux-sll2", 276, [b"\x08\x00" + bytes(18) + ip4(C, S, 6, SYN)], ["-p", "80"],
     [SYN_LINE]),
    ("raw-ip", 101, [ip4(C, S, 6, SYN), ip6("::1", "::1", 6, tcp(1, 2, 3, 0, "S"))],
     ["-p", "80", "-f", ""], [
        SYN_LINE,
        f"conn=2 dir=?>? flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} "
        "src=[::1]:1 dst=[::1]:2"]),
    ("unknown-linktype", 147, [b"\x00\x01"], ["-f", ""], ["other=linktype-147 caplen=2 len=2"]),
    ("mid-stream-no-syn", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 777, 888, "PA", data=b"abc"))),
        eth(ip4(S, C, 6, tcp(80, 40000, 888, 780, "A"))),
        eth(ip4(S, C, 6, tcp(80, 40000, 888, 780, "PA", data=b"xy")))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=PA seq=0 ack=0 len=3 win=1000 opts=- {NOTS} {EP}",
        f"conn=1 dir=s>c flags=A seq=0 ack=3 len=0 win=1000 opts=- {NOTS} {EP_BACK}",
        f"conn=1 dir=s>c flags=PA seq=0 ack=3 len=2 win=1000 opts=- {NOTS} {EP_BACK}"]),
    ("synack-first-then-retransmits-and-reuse", 1, [
        eth(ip4(S, C, 6, SYNACK)), eth(ip4(C, S, 6, tcp(40000, 80, 1001, 5001, "A"))),
        eth(ip4(C, S, 6, tcp(40000, 80, 1000, 0, "S"))),
        eth(ip4(C, S, 6, tcp(40000, 80, 9000, 0, "S"))),
        eth(ip4(S, C, 6, tcp(80, 40000, 3000, 9001, "SA"))),
        eth(ip4(C, S, 6, tcp(40001, 80, 1, 0, "S")))],
     ["-p", "80"], [
        SYNACK_LINE,
        f"conn=1 dir=c>s flags=A seq=1 ack=1 len=0 win=1000 opts=- {NOTS} {EP}",
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} {EP}",
        f"conn=2 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} {EP}",
        f"conn=2 dir=s>c flags=SA seq=0 ack=1 len=0 win=1000 opts=- {NOTS} {EP_BACK}",
        f"conn=3 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} "
        "src=10.0.0.1:40001 dst=10.0.0.2:80"]),
    ("seq-wraps", 1, [
        eth(ip4(C, S, 6, tcp(40000, 80, 0xFFFFFFFE, 0, "S"))),
        eth(ip4(C, S, 6, tcp(40000, 80, 3, 0, "A")))],
     ["-p", "80"], [
        f"conn=1 dir=c>s flags=S seq=0 ack=- len=0 win=1000 opts=- {NOTS} {EP}",
        f"conn=1 dir=c>s flags=A seq=5 ack=0 len=0 win=1000 opts=- {NOTS} {EP}"]),
]


def run_capture(bindir, path, opts):
    return subprocess.run([os.path.join(bindir, "capture"), "-r", path] + opts,
                          capture_output=True, text=True, timeout=10)


@pytest.mark.parametrize("cid,linktype,frames,opts,want", CASES, ids=[c[0] for c in CASES])
def test_decode(bindir, tmp_path, cid, linktype, frames, opts, want):
    path = tmp_path / f"{cid}.pcap"
    path.write_bytes(pcap(linktype, frames))
    r = run_capture(bindir, str(path), opts)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ready t_ns=1000000000000 file=")
    got = [ln.split(" ", 2)[2] for ln in lines[1:-1]]
    assert got == want
    n_tcp = sum(w.startswith("conn=") for w in want)
    n_icmp = sum(w.startswith("icmp") for w in want)
    assert lines[-1] == (f"end t_ns={1000000000000 + 1000 * (len(want) - 1)} "
                         f"packets={len(want)} tcp={n_tcp} icmp={n_icmp} "
                         f"other={len(want) - n_tcp - n_icmp} received=- dropped=- ifdropped=-")


def test_times_are_the_files_relative_to_the_first(bindir, tmp_path):
    """t_ns is the file's timestamp in ns (microseconds * 1000 here), t_s from the first."""
    path = tmp_path / "t.pcap"
    data = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for sec, usec in [(5, 999999), (6, 0), (7, 500000)]:
        f = eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S")))
        data += struct.pack("<IIII", sec, usec, len(f), len(f)) + f
    path.write_bytes(data)
    r = run_capture(bindir, str(path), ["-p", "80"])
    lines = r.stdout.splitlines()
    assert lines[0] == (f"ready t_ns=5999999000 file={path} linktype=EN10MB snaplen=65535 "
                        'filter="tcp port 80 or icmp or (ip proto 6 and ip[6:2] & 0x1fff != 0)" '
                        'port=80 clock_offset_ns=0')
    assert [ln.split(" ", 2)[:2] for ln in lines[1:4]] == [
        ["t_s=0.000000", "t_ns=5999999000"], ["t_s=0.000001", "t_ns=6000000000"],
        ["t_s=1.500001", "t_ns=7500000000"]]


def test_filter_applies_to_a_file(bindir, tmp_path):
    path = tmp_path / "f.pcap"
    path.write_bytes(pcap(1, [eth(ip4(C, S, 6, SYN)), eth(ip4(C, S, 17, bytes(8))),
                              eth(ip4(S, C, 6, SYNACK))]))
    r = run_capture(bindir, str(path), ["-f", "tcp[13] == 2"])
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and "flags=S " in lines[1]
    assert lines[-1].startswith("end ") and " packets=1 tcp=1 icmp=0 other=0 " in lines[-1]


def test_empty_file_is_a_ready_and_an_end(bindir, tmp_path):
    path = tmp_path / "e.pcap"
    path.write_bytes(pcap(1, []))
    r = run_capture(bindir, str(path), [])
    assert r.returncode == 0
    assert r.stdout.splitlines()[1] == ("end t_ns=0 packets=0 tcp=0 icmp=0 other=0 received=- "
                                        "dropped=- ifdropped=-")


def test_table_full_is_conn_0_absolute(bindir, tmp_path):
    """4095 connections fit (one slot stays free); the next prints conn=0 and absolute seq."""
    frames = [eth(ip4(C, S, 6, tcp(1 + i, 80, 100, 0, "S"))) for i in range(4096)]
    path = tmp_path / "many.pcap"
    path.write_bytes(pcap(1, frames))
    r = run_capture(bindir, str(path), ["-p", "80"])
    lines = r.stdout.splitlines()
    assert lines[4095].split(" ")[2] == "conn=4095" and " seq=0 " in lines[4095]
    assert lines[4096].split(" ")[2] == "conn=0" and " seq=100 " in lines[4096]


@pytest.mark.parametrize("linktype,name", [(1, "EN10MB"), (113, "LINUX_SLL"), (276, "LINUX_SLL2"),
                                           (101, "RAW"), (228, "IPV4"), (147, "147")])
def test_ready_names_the_link_type(bindir, tmp_path, linktype, name):
    """libpcap's name for the link type (a file's LINKTYPE_RAW reads as DLT_RAW), else the number."""
    path = tmp_path / "l.pcap"
    path.write_bytes(pcap(linktype, []))
    r = run_capture(bindir, str(path), ["-f", ""])
    assert r.returncode == 0, r.stderr
    assert f" linktype={name} " in r.stdout.splitlines()[0]


def test_default_filter_that_cannot_compile_says_so(bindir, tmp_path):
    """No -f given: the one line names the default filter, not an option the user did not use."""
    path = tmp_path / "u.pcap"
    path.write_bytes(pcap(147, [b"\x00"]))
    r = run_capture(bindir, str(path), [])
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith('capture: the default filter "tcp or icmp": ')
    assert r.stderr.count("\n") == 1
