"""Every number in a report's sentence is one its own data shows (issue 8).  p01-connect-time's
outlier sentences cite counters: each `Name +N` must be the block's value for that counter, and
"at most X of the Y slow calls" / "the other Z" must follow from TCPSynRetrans and the count of
slow calls.  Checked on the committed raw of every kernel and on crafted raw (the case the issue
found: ListenOverflows +1, ListenDrops +1, TCPSynRetrans +1 and 3 slow calls, once reported as
"ListenOverflows/ListenDrops +2" with all 3 calls blamed on one retransmission)."""
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP

OUT = os.path.join(TOP, "outputs")
RAWS = sorted(glob.glob(os.path.join(OUT, "*", "raw", "p01-connect-time")))


def report(rawroot, outdir, name="p01-connect-time"):
    r = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", name, name + ".py"),
                        str(rawroot), str(outdir)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with open(os.path.join(outdir, name + ".txt")) as f:
        return f.read()


def parts(text):
    """Each `== …` part of the report → (counter block {name: value}, slow-call count or None,
    the sentence lines after the block)."""
    out = []
    for chunk in text.split("\n== ")[1:]:
        block, sentences, over, in_block = {}, [], None, False
        for line in chunk.splitlines():
            if line.startswith("counter deltas"):
                in_block = True
                continue
            m = re.fullmatch(r"  (Tcp\w+)\s+([+-]\d+|absent)", line)
            if in_block and m:
                block[m.group(1)] = m.group(2)
                continue
            in_block = False
            m = re.match(r"  (\d+) call\(s\) took over 1 ms", line)
            if m:
                over = int(m.group(1))
            elif over is not None and line.startswith("  "):
                sentences.append(line)
        out.append((block, over, sentences))
    return out


def check_sentences(block, over, sentences):
    """The checks of the module docstring; returns the list of what is wrong."""
    wrong = []
    text = " ".join(sentences)
    for name, val in re.findall(r"([A-Za-z][\w/]*) \+(\d+)", text):
        full = [k for k in block if k.endswith(name)]
        if len(full) != 1:
            wrong.append(f"{name} +{val}: no such counter in the block {sorted(block)}")
        elif block[full[0]] != f"+{val}":
            wrong.append(f"{name} +{val}: the block says {block[full[0]]}")
    for names in re.findall(r"\(((?:\w+, )*\w+ and \w+) \+0\)", text):
        for name in re.split(r", | and ", names):
            full = [k for k in block if k.endswith(name)]
            if len(full) != 1 or block[full[0]] != "+0":
                wrong.append(f"{name} +0: the block says {[block.get(k) for k in full]}")
    rx = block.get("TcpExtTCPSynRetrans")
    m = re.search(r"At most (\d+) of the (\d+) slow call", text)
    if m:
        x, y = int(m.group(1)), int(m.group(2))
        if y != over or rx is None or x != min(int(rx), over):
            wrong.append(f"at most {x} of {y}: slow calls {over}, TCPSynRetrans {rx}")
        o = re.search(r"the other (\d+)", text)
        if (o and int(o.group(1)) != y - x) or (not o and y != x):
            wrong.append(f"'the other' does not make {y} with {x}")
    elif rx not in (None, "+0", "absent") and over:
        wrong.append(f"TCPSynRetrans {rx} but no sentence says how many calls it can explain")
    if rx == "+0" and re.search(r"waited for (the|a) retransmission\b(?! \()", text) \
            and "none of" not in text:
        wrong.append("a call blamed on a retransmission with TCPSynRetrans +0")
    return wrong


@pytest.mark.parametrize("raw", RAWS, ids=lambda p: p.split(os.sep)[-3])
def test_committed_connect_time_sentences(raw, tmp_path):
    text = report(os.path.dirname(raw), tmp_path)
    for block, over, sentences in parts(text):
        assert set(block) >= {"TcpExtListenOverflows", "TcpExtListenDrops",
                              "TcpExtTCPSynRetrans"}, "the counters a sentence cites are shown"
        assert check_sentences(block, over, sentences) == [], sentences


def craft(tmp_path, overflows, drops, retrans, over, absent=()):
    src = os.path.join(OUT, "6.18.44-fc-v1045", "raw", "p01-connect-time")
    raw = tmp_path / "raw"
    shutil.copytree(src, raw / "p01-connect-time")
    d = raw / "p01-connect-time"
    vals = {"TcpExtListenOverflows": overflows, "TcpExtListenDrops": drops,
            "TcpExtTCPSynRetrans": retrans}
    lines = []
    for line in (d / "accept-counters-delta.txt").read_text().splitlines():
        name = line.split()[0]
        if name in vals:
            line = f"{name} {'absent' if name in absent else f'+{vals[name]}'}"
        lines.append(line)
    (d / "accept-counters-delta.txt").write_text("\n".join(lines) + "\n")
    client = (d / "accept-client.txt").read_text()
    (d / "accept-client.txt").write_text(re.sub(r"over_1ms=\d+", f"over_1ms={over}", client))
    return raw


# (ListenOverflows, ListenDrops, TCPSynRetrans, calls over 1 ms)
CRAFTED = [(1, 1, 1, 3),       # the case
           (0, 0, 0, 20), (0, 1, 0, 2), (2, 2, 5, 3), (1, 1, 1, 1), (3, 4, 2, 7), (0, 0, 1, 1)]


@pytest.mark.parametrize("ov,dr,rx,over", CRAFTED)
def test_crafted_connect_time_sentences(ov, dr, rx, over, tmp_path):
    text = report(craft(tmp_path, ov, dr, rx, over), tmp_path / "out")
    block, got_over, sentences = parts(text)[0]
    assert got_over == over
    assert block["TcpExtListenDrops"] == f"+{dr}" and block["TcpExtTCPSynRetrans"] == f"+{rx}"
    assert check_sentences(block, over, sentences) == [], sentences
    assert f"+{ov + dr}" not in " ".join(sentences) or ov + dr in (ov, dr, rx)  # no sum of both


def test_absent_counter_is_not_read_as_zero(tmp_path):
    text = report(craft(tmp_path, 0, 0, 0, 5, absent=("TcpExtListenDrops",)), tmp_path / "out")
    block, _, sentences = parts(text)[0]
    assert block["TcpExtListenDrops"] == "absent"
    joined = " ".join(sentences)
    assert "+0" not in joined and "cannot say why" in joined, sentences


def test_checker_catches_the_old_sentence():
    """The checker fails on the sentence the old report printed for the issue's case."""
    block = {"TcpActiveOpens": "+2000", "TcpExtListenOverflows": "+1",
             "TcpExtListenDrops": "+1", "TcpExtTCPSynRetrans": "+1"}
    old = ["  The counters explain it: ListenOverflows/ListenDrops +2, TCPSynRetrans +1: the "
           "accept queue was full, the kernel dropped a SYN, and the client sent it again after "
           "the initial RTO (1 s): that connect() waited for the retransmission."]
    assert check_sentences(block, 3, old) != []


def test_accept_path_verdict_cites_the_burst_block(tmp_path):
    raw = os.path.join(OUT, "6.18.44-fc-v1045", "raw")
    text = report(raw, tmp_path, "accept-path")
    m = re.search(r"Accept queue overflow: (\d+) ListenOverflows in the burst; (\d+) of (\d+) "
                  r"connects took over 900 ms, TCPSynRetrans (\d+)", text)
    assert m, "the verdict's overflow sentence"
    burst = text.split("== slow accept, a burst")[1].split("\n== ")[0]
    assert re.search(rf"TcpExtListenOverflows\s+\+{m.group(1)}\n", burst)
    assert re.search(rf"TcpExtTCPSynRetrans\s+\+{m.group(4)}\n", burst)
    assert re.search(rf"over 900 ms \(at least one SYN retransmission\): {m.group(2)}\n", burst)
    assert f": {m.group(3)} requests" in burst
