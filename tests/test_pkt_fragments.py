"""experiments/report/tcplab_pkt.py on IP fragments (docs/capture.md, "IP fragments"): a frag=
line is never a segment; the fragments of a datagram that holds a whole TCP segment become that
one segment, in the place and at the time of its first fragment; fragments of no whole segment
count as nothing; the report's capture lines say so in one line, only when there are fragments.
The lines come from the capture probe itself (capture -r on the crafted pcaps of
tests/test_capture_fragments.py) and, for the cases a probe does not print on its own, by hand.
No root needed."""
import os
import subprocess

import pytest

import tcplab as t
import tcplab_pkt as pkt
from test_capture_fragments import C, DF, FIN36_FRAGS, HANDSHAKE, MF, S, eth, ip4, pcap, tcp

READY = ('ready t_ns=1000 iface=veth-c linktype=EN10MB snaplen=256 filter="tcp port 80 or icmp '
         'or (ip proto 6 and ip[6:2] & 0x1fff != 0)" port=80 clock_offset_ns=5\n')
FIRST = ("t_s=0.000100 t_ns=1100 frag=0 mf=1 id=7 proto=6 fraglen=48 conn=1 dir=c>s flags=PA "
         "seq=1 ack=1 hlen=32 win=64 opts=nop,nop,ts tsval=1 tsecr=2 src=10.0.0.1:40000 "
         "dst=10.0.0.2:80\n")
SECOND = "t_s=0.000200 t_ns=1200 frag=48 mf=0 id=7 proto=6 fraglen=20 src=10.0.0.1 dst=10.0.0.2\n"
ACK = ("t_s=0.000300 t_ns=1300 conn=1 dir=s>c flags=A seq=1 ack=37 len=0 win=64 opts=- "
       "tsval=- tsecr=- src=10.0.0.2:80 dst=10.0.0.1:40000\n")


def end(tcp_n, other, t_ns=2000):
    return (f"end t_ns={t_ns} packets={tcp_n + other} tcp={tcp_n} icmp=0 other={other} "
            f"received={tcp_n + other} dropped=0 ifdropped=0\n")


def write(tmp_path, text):
    p = tmp_path / "capture.txt"
    p.write_text(text)
    return str(p)


def probe_lines(bindir, tmp_path, frames, usec=None):
    """capture -r -p 80 on a crafted pcap: the lines a report would read."""
    path = tmp_path / "f.pcap"
    path.write_bytes(pcap(frames, usec))
    r = subprocess.run([os.path.join(bindir, "capture"), "-r", str(path), "-p", "80"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return write(tmp_path, as_live(r.stdout))


def as_live(text):
    """capture -r's lines as a live capture's on veth-c (a report refuses a file's `-` counts)."""
    lines = text.splitlines()
    lines[0] = " ".join("iface=veth-c" if w.startswith("file=") else w for w in lines[0].split())
    n = t.kv(lines[-1])["packets"]
    lines[-1] = lines[-1].replace("received=- dropped=- ifdropped=-",
                                  f"received={n} dropped=0 ifdropped=0")
    return "\n".join(lines) + "\n"


def test_the_mtu_68_fin_is_one_segment_of_36_bytes(bindir, tmp_path):
    """The issue's capture read by a report: the FIN with its 36 bytes is one segment (len=36,
    fragments=2) at its first fragment's time, so the server's ack=38 acks a segment the list
    holds; the old reader refused the file (a frag= line has no len=)."""
    cap = pkt.read_capture(probe_lines(bindir, tmp_path, HANDSHAKE + FIN36_FRAGS + [
        eth(ip4(S, C, 6, tcp(80, 40000, 5001, 1038, "A")))]))
    segs = cap["packets"]
    assert [(p["kind"], p["dir"], p["flags"], p["seq"], p["ack"], p["len"]) for p in segs] == [
        ("tcp", "c>s", "S", 0, None, 0), ("tcp", "s>c", "SA", 0, 1, 0),
        ("tcp", "c>s", "A", 1, 1, 0), ("tcp", "c>s", "FPA", 1, 1, 36),
        ("tcp", "s>c", "A", 1, 38, 0)]
    fin = segs[3]
    assert fin["fragments"] == 2 and fin["t_ns"] == 1000000003000 and fin["opts"] == "nop,nop,ts"
    assert (fin["src"], fin["dst"]) == ("10.0.0.1:40000", "10.0.0.2:80")
    assert all("fragments" not in p for p in segs[:3] + segs[4:])
    assert len(cap["fragments"]) == 2 and cap["unjoined"] == 0
    assert pkt.conn_packets(cap, "10.0.0.1:40000") == segs
    j = pkt.capture_json(cap)
    assert (j["tcp"], j["other"], j["fragments"], j["fragment_segments"],
            j["fragments_unjoined"]) == (4, 2, 2, 1, 0)


def test_fragments_out_of_order_join_at_the_first_fragment(bindir, tmp_path):
    """Second fragment first, stamped later than the first: one segment, where and when the
    first fragment is."""
    path = probe_lines(bindir, tmp_path, HANDSHAKE + FIN36_FRAGS[::-1], usec=[0, 1, 2, 9, 5])
    segs = pkt.read_capture(path)["packets"]
    assert [(p["flags"], p["len"], p["t_ns"]) for p in segs] == [
        ("S", 0, 1000000000000), ("SA", 0, 1000000001000), ("A", 0, 1000000002000),
        ("FPA", 36, 1000000005000)]


def test_a_lost_fragment_makes_no_segment_and_the_notes_say_so(tmp_path):
    """The first fragment without its second (the veth dropped it): no segment, counted as a
    fragment of no whole segment; a datagram whose id comes round again starts anew."""
    cap = pkt.read_capture(write(tmp_path, READY + FIRST + FIRST.replace("t_ns=1100", "t_ns=1150")
                                 + SECOND + ACK + end(1, 3)))
    assert [(p["kind"], p.get("len"), p["t_ns"]) for p in cap["packets"]] == [
        ("tcp", 36, 1150), ("tcp", 0, 1300)]
    assert cap["unjoined"] == 1
    notes = pkt.capture_notes(cap, "raw/x/capture.txt")
    assert notes[2] == ("  IP fragments: 3 of the packets, joined into 1 TCP segments (each "
                        "counted once); 1 make no whole TCP segment and count as none")
    assert sum("fragment" in n for n in notes) == 1


def test_no_fragments_no_note_and_no_new_keys(tmp_path):
    """A capture without fragments reads as before: the same JSON keys, no fragment line."""
    cap = pkt.read_capture(write(tmp_path, READY + ACK + end(1, 0)))
    assert "fragments" not in pkt.capture_json(cap)
    assert not any("fragment" in n for n in pkt.capture_notes(cap, "x"))


@pytest.mark.parametrize("text,msg", [
    (READY + FIRST + SECOND + ACK + end(3, 0), "the end line counts tcp=3 icmp=0, the file has 1 "
     "and 0 lines; other=0 against 2 fragment lines"),
    (READY + FIRST.replace("frag=0 ", "frag=8 ") + end(0, 1), "TCP fields on a fragment at "
     "offset 8"),
    (READY + FIRST.replace("hlen=32", "hlen=64") + end(0, 1), "hlen: 64 is outside 20..60"),
    (READY + FIRST.replace(" hlen=32", "") + end(0, 1), "no hlen="),
    (READY + SECOND.replace("src=10.0.0.1", "src=10.0.0.1:5") + end(0, 1), "src=10.0.0.1:5 is "
     "not an address"),
    (READY + SECOND.replace("mf=0", "mf=2") + end(0, 1), "mf: 2 is outside 0..1"),
], ids=["miscounted", "tcp-on-a-later-fragment", "hlen-range", "no-hlen", "addr-with-port",
        "mf-range"])
def test_bad_fragment_lines_are_refused(tmp_path, text, msg):
    with pytest.raises(t.RawError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        pkt.read_capture(write(tmp_path, text))


def test_a_header_split_across_fragments_still_joins(tmp_path):
    """split=1 (the options run into the next fragment): the segment is whole, its opts those
    the first fragment held."""
    first = FIRST.replace("fraglen=48", "fraglen=24").replace("opts=nop,nop,ts tsval=1 tsecr=2",
                                                              "opts=nop,nop tsval=- tsecr=-")
    second = SECOND.replace("frag=48", "frag=24").replace("fraglen=20", "fraglen=44")
    segs = pkt.read_capture(write(tmp_path, READY + first.rstrip("\n") + " split=1\n" + second +
                                  end(0, 2)))["packets"]
    assert [(p["len"], p["opts"], p["fragments"]) for p in segs] == [(36, "nop,nop", 2)]


def test_not_tcp_fragments_are_no_segment(bindir, tmp_path):
    """UDP fragments (a -f "" capture would keep them) join into nothing a report counts."""
    path = tmp_path / "u.pcap"
    path.write_bytes(pcap([eth(ip4(C, S, 17, bytes(16), 3, MF)),
                           eth(ip4(C, S, 17, bytes(8), 3, 2)),
                           eth(ip4(C, S, 6, tcp(40000, 80, 1, 0, "S"), 4, DF))]))
    r = subprocess.run([os.path.join(bindir, "capture"), "-r", str(path), "-f", "", "-p", "80"],
                       capture_output=True, text=True, timeout=10)
    cap = pkt.read_capture(write(tmp_path, as_live(r.stdout)))
    assert [(p["flags"], p["len"]) for p in cap["packets"]] == [("S", 0)]
    assert cap["unjoined"] == 2
