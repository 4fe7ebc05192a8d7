#!/usr/bin/python3
"""seeds.py OUTDIR — seed corpora for the fuzz targets, one directory per target, made from
the saved dumps and /proc files under tests/data (and the kept crash inputs under
tests/data/fuzz-regress/<target>/).  Standard library only."""
import glob
import gzip
import os
import shutil
import struct
import sys
import zlib

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(TOP, "tests", "data")
PROC = os.path.join(DATA, "proc")


def proc_files():
    return sorted(p for p in glob.glob(os.path.join(PROC, "*")) if os.path.isfile(p)
                  and not p.endswith(".md"))


def snapshot(text):
    """The `counters` snapshot of a /proc snmp/netstat text: one `Name value` line a counter."""
    lines, out = text.splitlines(), []
    for head, vals in zip(lines[::2], lines[1::2]):
        names, values = head.split(), vals.split()
        if names and values and names[0] == values[0] and len(names) == len(values):
            out += [f"{names[0][:-1]}{n} {v}" for n, v in zip(names[1:], values[1:])]
    return ("\n".join(out) + "\n").encode() if out else b""


def gzip_member(raw_deflate, data, flags=0, extra=b"", name=b"", comment=b""):
    """A gzip member around a raw deflate stream, with the header fields flags asks for."""
    head = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, flags, 0, 0, 3)
    if flags & 4:
        head += struct.pack("<H", len(extra)) + extra
    if flags & 8:
        head += name + b"\0"
    if flags & 16:
        head += comment + b"\0"
    if flags & 2:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    return head + raw_deflate + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def deflate(data, level=9, strategy=zlib.Z_DEFAULT_STRATEGY):
    c = zlib.compressobj(level, zlib.DEFLATED, -15, 9, strategy)
    return c.compress(data) + c.flush()


def gunzip_seeds():
    """What machine inflates as /proc/config.gz: every deflate block type, every header flag."""
    for path in proc_files() + glob.glob(os.path.join(PROC, "root-6.1", "boot", "*")):
        data = open(path, "rb").read()
        base = os.path.basename(path)
        yield f"{base}.gz0", gzip.compress(data, 0, mtime=0)
        yield f"{base}.gz9", gzip.compress(data, 9, mtime=0)
        yield f"{base}.fixed", gzip_member(deflate(data, 6, zlib.Z_FIXED), data)
        yield f"{base}.rle", gzip_member(deflate(data, 6, zlib.Z_RLE), data)
        yield f"{base}.flags", gzip_member(deflate(data, 1), data, 4 | 8 | 16 | 2, b"xy",
                                           b"config", b"seed")


def link_seeds():
    """Each RTM_NEWLINK message of links.bin alone before its NLMSG_DONE: small inputs whose
    mutations reach the attribute checks of tl_link_replay sooner than the whole dump's."""
    data = open(os.path.join(DATA, "netlink", "links.bin"), "rb").read()
    msgs, at = [], 0
    while at + 16 <= len(data):
        n = struct.unpack_from("=I", data, at)[0]
        if n < 16:
            break
        msgs.append(data[at:at + ((n + 3) & ~3)])
        at += (n + 3) & ~3
    done = [m for m in msgs if struct.unpack_from("=H", m, 4)[0] == 3]
    for i, m in enumerate(x for x in msgs if struct.unpack_from("=H", x, 4)[0] == 16):
        yield f"links-{i}.bin", m + (done[0] if done else b"")


def pcap_records(path):
    """(linktype, [packet bytes]) of a pcap file (either byte order, micro- or nanosecond)."""
    data = open(path, "rb").read()
    end = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(end + "I", data[20:24])[0]
    out, off = [], 24
    while off + 16 <= len(data):
        caplen = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + caplen])
        off += 16 + caplen
    return linktype, out


def pcap_seeds():
    """fuzz_pcap inputs (tests/fuzz/fuzz_pcap.c): selector 0 (Ethernet), the port, line size 0,
    then length-prefixed packets: each file whole (the connection table across packets), each
    packet alone, and each packet as raw IP (selector 3) without its Ethernet header."""
    for path in sorted(glob.glob(os.path.join(DATA, "pcap", "*.pcap"))):
        base = os.path.basename(path)[:-5]
        linktype, pkts = pcap_records(path)
        if linktype != 1:
            continue
        head = bytes([0]) + struct.pack(">H", 21013) + b"\0"
        yield f"{base}-all", head + b"".join(struct.pack(">H", len(p)) + p for p in pkts)
        for i, p in enumerate(pkts):
            yield f"{base}-{i}", head + struct.pack(">H", len(p)) + p
            yield f"{base}-{i}-raw", bytes([3]) + head[1:] + struct.pack(">H", len(p) - 14) + p[14:]


def eth_ip4(src, dst, payload, ident=1, frag=0x4000, proto=6):
    """An Ethernet frame with an IPv4 header (frag: the flags-and-offset field) before payload."""
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, frag, 64, proto, 0,
                     bytes(src), bytes(dst))
    return bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x08\x00" + ip + payload


def eth_ip6_frag(src, dst, offset, more, ident, payload):
    """An Ethernet frame with an IPv6 header and a fragment header (next header TCP)."""
    ip = struct.pack(">IHBB", 0x60000000, 8 + len(payload), 44, 64) + bytes(src) + bytes(dst)
    return bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x86\xdd" + ip + \
        struct.pack(">BBHI", 6, 0, offset | more, ident) + payload


def tcp_seg(sport, dport, seq, ack, flags, opts=b"", data=b""):
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, (5 + len(opts) // 4) << 4, flags,
                       1000, 0, 0) + opts + data


def fragment_packets():
    """A connection to 21013 whose FIN carries 36 bytes behind a 32-byte header, cut at MTU 68
    into IPv4 fragments of 48 and 20 bytes (what the wire units sent at --mtu 68), a header
    split across fragments, a last fragment alone, and an IPv6 pair with a fragment header."""
    c, s = [10, 0, 0, 1], [10, 0, 0, 2]
    ts = b"\x01\x01\x08\x0a" + struct.pack(">II", 111, 222)
    fin = tcp_seg(40000, 21013, 1001, 5001, 0x19, ts, b"x" * 36)
    split = tcp_seg(40000, 21013, 1038, 5001, 0x10, ts, b"y" * 8)
    c6, s6 = [0x20, 1, 0x0d, 0xb8] + [0] * 11 + [1], [0x20, 1, 0x0d, 0xb8] + [0] * 11 + [2]
    seg6 = tcp_seg(40001, 21013, 7, 9, 0x18, data=b"z" * 20)
    return [eth_ip4(c, s, tcp_seg(40000, 21013, 1000, 0, 0x02)),
            eth_ip4(s, c, tcp_seg(21013, 40000, 5000, 1001, 0x12)),
            eth_ip4(c, s, tcp_seg(40000, 21013, 1001, 5001, 0x10)),
            eth_ip4(c, s, fin[:48], 0x1234, 0x2000), eth_ip4(c, s, fin[48:], 0x1234, 48 // 8),
            eth_ip4(s, c, tcp_seg(21013, 40000, 5001, 1038, 0x10)),
            eth_ip4(c, s, split[:24], 0x1235, 0x2000), eth_ip4(c, s, split[24:], 0x1235, 3),
            eth_ip4(c, s, bytes(16), 0x1236, 0x1FFF),
            eth_ip6_frag(c6, s6, 0, 1, 0xDEADBEEF, seg6[:24]),
            eth_ip6_frag(c6, s6, 24, 0, 0xDEADBEEF, seg6[24:])]


def crafted_pcap_seeds():
    """fuzz_pcap inputs of packets no committed capture holds: IP fragments (with the whole set
    and each fragment alone, also as raw IP), and out-of-order packets — the decoder never sees
    a timestamp (capture prints those), so to it out of order is the order given: a committed
    conversation and the fragments backwards, the second fragment before the first."""
    head = bytes([0]) + struct.pack(">H", 21013) + b"\0"
    frags = fragment_packets()
    yield "fragments-all", head + b"".join(struct.pack(">H", len(p)) + p for p in frags)
    for i, p in enumerate(frags):
        yield f"fragments-{i}", head + struct.pack(">H", len(p)) + p
        yield f"fragments-{i}-raw", bytes([3]) + head[1:] + struct.pack(">H", len(p) - 14) + p[14:]
    _, pkts = pcap_records(os.path.join(DATA, "pcap", "handshake.pcap"))
    for name, order in [("handshake", pkts), ("fragments", frags)]:
        yield f"out-of-order-{name}", head + b"".join(struct.pack(">H", len(p)) + p
                                                      for p in reversed(order))
    # issue 30, class 5: what a file with a short snaplen hands the decoder (capture -r now
    # refuses a snaplen below a TCP header, but a live -s 68 still cuts options and quotes),
    # and the same conversation twice, a duplicated segment (the reports' cross-checks)
    for cut in (10, 34, 54, 68):
        yield f"snaplen-{cut}", head + b"".join(struct.pack(">H", len(p[:cut])) + p[:cut]
                                                for p in pkts)
    yield "duplicated-handshake", head + b"".join(struct.pack(">H", len(p)) + p
                                                  for p in pkts[:1] + pkts)


def seeds():
    netlink = sorted(glob.glob(os.path.join(DATA, "netlink", "*.bin")))
    yield "fuzz_diag", [(os.path.basename(p), open(p, "rb").read()) for p in netlink] + \
        list(link_seeds())
    snmp = [(os.path.basename(p), open(p, "rb").read()) for p in proc_files()]
    snaps = [(n + ".snapshot", snapshot(d.decode("latin-1"))) for n, d in snmp]
    yield "fuzz_snmp", snmp + [s for s in snaps if s[1]]
    root = [p for p in glob.glob(os.path.join(PROC, "root-6.1", "**"), recursive=True)
            if os.path.isfile(p)]
    machine = [(os.path.relpath(p, PROC).replace("/", "_"), open(p, "rb").read()) for p in root]
    machine += [("cpus-list", b"0-3,6,8-9\n"), ("cpus-one", b"0\n"), ("hz", b"CONFIG_HZ=250\n"),
                ("osrelease-two-lines", b"6.1\nhz=1000\n"), ("version-tabs", b"#1 SMP\t x\n")]
    yield "fuzz_machine", machine + list(gunzip_seeds())
    words = ["0", "1", "65535", "65536", "-1", "abc", "80x", " 5", "+5", "",
             "9223372036854775807", "-9223372036854775808", "99999999999999999999",
             "syn-sent", "SYN-RECV", "all", "listen", "time-wait", "estab"]
    yield "fuzz_args", ((f"arg-{i}", w.encode()) for i, w in enumerate(words))
    yield "fuzz_pcap", list(pcap_seeds()) + list(crafted_pcap_seeds())


def main(outdir):
    for target, files in seeds():
        d = os.path.join(outdir, target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        n = 0
        for name, data in files:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            n += 1
        for p in glob.glob(os.path.join(DATA, "fuzz-regress", target, "*")):
            shutil.copy(p, os.path.join(d, "regress-" + os.path.basename(p)))
            n += 1
        print(f"seeds: {target}: {n} files")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tests/fuzz/seeds.py OUTDIR")
    main(sys.argv[1])
