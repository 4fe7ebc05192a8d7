"""capture -r on the committed captures (tests/data/pcap/, made by tests/data/pcap/record.sh: four
by capture itself on lo, one by tcpdump -w): the exact lines committed beside each file, and an
independent cross-check of every segment against tcpdump -r's reading of the same bytes
(timestamp, flags, absolute seq/ack, window, length, options).  No root needed."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import DATA, kv

PCAP = os.path.join(DATA, "pcap")
FILES = {"handshake": 21013, "handshake6": 21016, "synretry": 21013, "icmp": 21014,
         "tcpdump": 21017}


def capture(bindir, name):
    r = subprocess.run([os.path.join(bindir, "capture"), "-r", name + ".pcap", "-p",
                        str(FILES[name])], capture_output=True, text=True, timeout=10, cwd=PCAP)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.splitlines()


@pytest.mark.parametrize("name", sorted(FILES))
def test_replay_prints_the_committed_lines(bindir, name):
    with open(os.path.join(PCAP, name + ".lines")) as f:
        want = f.read().splitlines()
    assert capture(bindir, name) == want


def test_handshake_reads_as_a_handshake(bindir):
    """What the committed handshake must show, whatever a re-recording's ports and times."""
    lines = capture(bindir, "handshake")
    pkts = [kv(ln) for ln in lines[1:-1]]
    assert [(p["dir"], p["flags"], p["seq"], p["ack"], p["len"]) for p in pkts] == [
        ("c>s", "S", "0", "-", "0"), ("s>c", "SA", "0", "1", "0"), ("c>s", "A", "1", "1", "0"),
        ("c>s", "PA", "1", "1", "5"), ("s>c", "A", "1", "6", "0"), ("s>c", "PA", "1", "6", "6"),
        ("c>s", "A", "6", "7", "0"), ("c>s", "FA", "6", "7", "0"), ("s>c", "FA", "7", "7", "0"),
        ("c>s", "A", "7", "8", "0")]
    assert {p["conn"] for p in pkts} == {"1"}
    assert pkts[0]["opts"].startswith("mss:65495,sackok,ts,nop,wscale:")  # lo: MTU 65536


def test_synretry_shows_the_retransmitted_syn(bindir):
    """conn 1 is the listener's own queued connection; conn 2 the client's SYNs, all seq 0, the
    same tsval never: each retransmission is a new transmission of the same ISN."""
    pkts = [kv(ln) for ln in capture(bindir, "synretry")[1:-1]]
    syns = [p for p in pkts if p["conn"] == "2"]
    assert len(syns) >= 3 and all(p["flags"] == "S" and p["seq"] == "0" for p in syns)
    assert len({p["tsval"] for p in syns}) == len(syns)
    gaps = [int(b["t_ns"]) - int(a["t_ns"]) for a, b in zip(syns, syns[1:])]
    assert all(g > 900_000_000 for g in gaps), gaps      # the RTO is at least 1 s


def test_icmp_quotes_the_syn_it_answers(bindir):
    """Each ICMP error names the connection of the SYN it quotes: same endpoints, seq 0, and the
    error comes from the address the SYN was sent to (nft rejects it in that namespace)."""
    lines = capture(bindir, "icmp")
    icmps, syns = [], {}
    for ln in lines[1:-1]:
        if " quoted: " in ln:
            outer, quoted = ln.split(" quoted: ")
            icmps.append((kv(outer), kv(quoted)))
        else:
            p = kv(ln)
            syns.setdefault(p["conn"], p)
    assert [o["code"] for o, _ in icmps] == ["port-unreachable"] * 2 + ["host-unreachable"] * 2
    for o, q in icmps:
        syn = syns[q["conn"]]
        assert syn["flags"] == "S" and (q["flags"], q["seq"], q["dir"]) == ("S", "0", "c>s")
        assert (q["src"], q["dst"]) == (syn["src"], syn["dst"])
        assert o["from"] == syn["dst"].rsplit(":", 1)[0]


# ---- tcpdump, the independent reader -----------------------------------------------------------

TD_LINE = re.compile(r"^(?P<t>\d+\.\d+) IP6? (?P<src>\S+) > (?P<dst>\S+): (?P<rest>.*)$")
TD_FLAGS = {"F": "F", "S": "S", "R": "R", "P": "P", ".": "A", "U": "U", "E": "E", "W": "C"}


def tcpdump_lines(path):
    r = subprocess.run(["tcpdump", "-nn", "-S", "-tt", "--time-stamp-precision=nano", "-r", path],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def td_options(text):
    """tcpdump's options text → capture's tokens and the timestamps."""
    out, ts = [], ("-", "-")
    for o in text.split(","):
        if o.startswith("mss "):
            out.append("mss:" + o[4:])
        elif o == "sackOK":
            out.append("sackok")
        elif o.startswith("TS val "):
            out.append("ts")
            ts = tuple(o[len("TS val "):].split(" ecr "))
        elif o.startswith("wscale "):
            out.append("wscale:" + o[7:])
        elif o in ("nop", "eol"):
            out.append(o)
        else:
            out.append("?" + o)
    return ",".join(out) or "-", ts


def td_segment(m):
    rest = m["rest"]
    flags = re.match(r"Flags \[([^\]]*)\]", rest)[1]
    seq = re.search(r", seq (\d+)", rest)
    ack = re.search(r", ack (\d+)", rest)
    opts = re.search(r"options \[([^\]]*)\]", rest)
    o, ts = td_options(opts[1]) if opts else ("-", ("-", "-"))
    return {"flags": "".join(TD_FLAGS[c] for c in flags) or "-",
            "seq": int(seq[1]) if seq else None, "ack": int(ack[1]) if ack else None,
            "win": re.search(r", win (\d+)", rest)[1], "len": re.search(r", length (\d+)", rest)[1],
            "opts": o, "tsval": ts[0], "tsecr": ts[1]}


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
@pytest.mark.parametrize("name", sorted(FILES))
def test_every_packet_agrees_with_tcpdump(bindir, name):
    mine = [kv(ln.split(" quoted: ")[0]) for ln in capture(bindir, name)[1:-1]]
    theirs = [TD_LINE.match(ln) for ln in tcpdump_lines(os.path.join(PCAP, name + ".pcap"))]
    assert len(theirs) == len(mine) and all(theirs)
    offsets = {}    # (conn, dir) -> absolute - relative: one per direction, the ISN
    for p, m in zip(mine, theirs):
        assert p["t_ns"] == m["t"].replace(".", "").lstrip("0")
        if "icmp" in p:
            assert "ICMP" in m["rest"] and "unreachable" in m["rest"]
            assert ("port" in m["rest"]) == (p["code"] == "port-unreachable")
            continue
        t = td_segment(m)
        addr, port = p["src"].rsplit(":", 1)
        assert f"{addr.strip('[]')}.{port}" == m["src"]
        for k in ("flags", "win", "len", "opts", "tsval", "tsecr"):
            assert p[k] == t[k], (k, p, m.group(0))
        key = (p["conn"], p["dir"])
        if t["seq"] is not None:
            isn = (t["seq"] - int(p["seq"])) % 2**32
            assert offsets.setdefault(key, isn) == isn, m.group(0)
        if t["ack"] is not None:
            back = (p["conn"], {"c>s": "s>c", "s>c": "c>s"}[p["dir"]])
            isn = (t["ack"] - int(p["ack"])) % 2**32
            assert offsets.setdefault(back, isn) == isn, m.group(0)
