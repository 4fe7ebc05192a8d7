#!/usr/bin/python3
"""p04-mid-loss report: one segment in the middle of a flight lost (nft on the server's input
hook drops the DROP-th full segment once).  Part sack: the receiver's duplicate ACKs carry SACK
blocks (their edges decoded here from the capture's pcap: the capture's text line only counts
the blocks), and the sender retransmits the hole without an RTO.  Part nosack: tcp_sack=0 on
both sides, duplicate ACKs alone (NewReno).  For each part: the flight and the hole from the
capture on the client's end of the veth, every duplicate ACK before the retransmission with its
SACK blocks, how long after which duplicate ACK the hole was sent again, the retransmissions
tcpevents saw beside TcpRetransSegs and the capture, and the counters of each side."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_tseq  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p04-mid-loss"
PARTS = (("sack", "net.ipv4.tcp_sack=1 (the default) on both sides: SACK blocks in the "
                  "duplicate ACKs"),
         ("nosack", "net.ipv4.tcp_sack=0 on both sides: duplicate ACKs alone (NewReno)"))
COUNTERS = ("TcpRetransSegs", "TcpExtTCPSackRecovery", "TcpExtTCPRenoRecovery",
            "TcpExtTCPFastRetrans", "TcpExtTCPSACKReorder", "TcpExtTCPRenoReorder",
            "TcpExtTCPTimeouts", "TcpExtTCPLossProbes", "TcpExtTCPLostRetransmit")
SERVER_COUNTERS = ("TcpExtTCPOFOQueue", "TcpExtTCPDSACKOldSent")
# read since they joined the collect script's KEEP, so not in every reference: shown when read
OPTIONAL = ("TcpExtTCPBacklogCoalesce",)
SYSCTLS = ("tcp_sack", "tcp_recovery", "tcp_reordering", "tcp_early_retrans", "tcp_dsack",
           "tcp_congestion_control")
MAX_PCAP = 64 << 20
TCPOPT_EOL, TCPOPT_NOP, TCPOPT_SACK = 0, 1, 5


# ---- SACK blocks: the lab's own decoding of the TCP options in the pcap ---------------------

def sack_blocks(opts):
    """The SACK option's blocks in a TCP header's option bytes (RFC 2018 §3: kind 5, length
    2 + 8*n, n pairs of 32-bit left and right edges, network order) → [(left, right), ...],
    [] when there is no SACK option.  ValueError for an option whose length runs past the
    bytes or is wrong for its kind."""
    i, out = 0, []
    while i < len(opts):
        kind = opts[i]
        if kind == TCPOPT_EOL:
            break
        if kind == TCPOPT_NOP:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2 or i + opts[i + 1] > len(opts):
            raise ValueError(f"option {kind} at byte {i}: its length runs past the header")
        n = opts[i + 1]
        if kind == TCPOPT_SACK:
            if (n - 2) % 8 or n < 10:
                raise ValueError(f"SACK option of length {n}: want 2 + 8*n, n >= 1")
            out += [struct.unpack_from("!II", opts, j) for j in range(i + 2, i + n, 8)]
        i += n
    return out


def pcap_tcp(data, where):
    """A pcap file (the capture probe's -w: Ethernet, IPv4; micro- or nanosecond stamps) →
    [{"t_wall_ns", "src", "dst", "seq", "ack", "flags", "len", "sack"}], one per IPv4 TCP frame
    in file order, addresses as "a.b.c.d:port", seq and ack absolute."""
    if len(data) < 24:
        raise t.RawError(f"{where}: shorter than a pcap header")
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
              b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    if endian is None:
        raise t.RawError(f"{where}: not a pcap file (magic {magic.hex()})")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    if struct.unpack_from(endian + "I", data, 20)[0] != 1:
        raise t.RawError(f"{where}: link type is not Ethernet")
    out, off = [], 24
    while off < len(data):
        if off + 16 > len(data):
            raise t.RawError(f"{where}: a record header cut off at byte {off}")
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", data, off)
        frame = data[off + 16:off + 16 + incl]
        if len(frame) != incl:
            raise t.RawError(f"{where}: a record cut off at byte {off}")
        off += 16 + incl
        if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[14] >> 4 != 4:
            continue
        ihl = (frame[14] & 15) * 4
        if frame[23] != 6 or len(frame) < 14 + ihl + 20:
            continue
        ip, tcp = frame[14:], frame[14 + ihl:]
        doff = (tcp[12] >> 4) * 4
        if doff < 20 or len(tcp) < doff:
            raise t.RawError(f"{where}: a TCP header cut off (snaplen) at byte {off}")
        try:
            sack = sack_blocks(tcp[20:doff])
        except ValueError as e:
            raise t.RawError(f"{where}: {e}") from None
        fl = tcp[13]
        addr = lambda b, port: ".".join(str(x) for x in b) + f":{port}"  # noqa: E731
        out.append({"t_wall_ns": sec * 10**9 + (frac if nano else frac * 1000),
                    "src": addr(ip[12:16], struct.unpack_from("!H", tcp, 0)[0]),
                    "dst": addr(ip[16:20], struct.unpack_from("!H", tcp, 2)[0]),
                    "seq": struct.unpack_from("!I", tcp, 4)[0],
                    "ack": struct.unpack_from("!I", tcp, 8)[0],
                    "flags": "".join(c for c, b in zip("FSRPAUEC", range(8)) if fl >> b & 1),
                    "len": struct.unpack_from("!H", ip, 2)[0] - ihl - doff, "sack": sack})
    return out


def attach_sacks(segs, pcap, offset_ns, where):
    """Each text segment gets "sack": its blocks relative to the client's initial sequence
    number (the edges in the client's sequence space, as the text's seq is), matched to its
    pcap frame by time stamp (the text's t_ns + the ready line's clock_offset_ns, the pcap's
    wall clock) and checked against the frame's ports, length and the text's block count."""
    by_t = {}
    for f in pcap:
        by_t.setdefault(f["t_wall_ns"], []).append(f)
    syn = next((f for f in pcap if f["flags"] == "S"), None)
    if syn is None:
        raise t.RawError(f"{where}: no SYN from the client in the pcap")
    isn = syn["seq"]
    for p in segs:
        cand = [f for f in by_t.get(p["t_ns"] + offset_ns, [])
                if f["src"] == p["src"] and f["dst"] == p["dst"] and f["len"] == p["len"]]
        if len(cand) != 1:
            raise t.RawError(f"{where}: no one frame for the packet at t_ns={p['t_ns']} "
                             f"({len(cand)} match its time, ports and length)")
        p["sack"] = [((a - isn) % 2**32, (b - isn) % 2**32) for a, b in cand[0]["sack"]]
        n = next((int(o.split(":")[1]) for o in p.get("opts", "").split(",")
                  if o.startswith("sack:")), 0)
        if n != len(p["sack"]):
            raise t.RawError(f"{where}: the frame at t_ns={p['t_ns']} has {len(p['sack'])} SACK "
                             f"block(s), the capture's line says sack:{n}")


# ---- the raw files ---------------------------------------------------------------------------

def read_events(rawdir, part):
    """tcpevents' retransmissions for the part → {"retrans": [{"t_ns", "err"}], "lost",
    "missed"}, or {"blind": why} when it could not run (tcplab_wire.read_tcpevents)."""
    ev = tw.read_tcpevents(rawdir, part)
    if "blind" in ev:
        return ev
    return {"retrans": [{"t_ns": e["t_ns"], "err": e["err"]} for e in ev["events"]
                        if e["event"] == "retrans"], "lost": ev["lost"], "missed": ev["missed"],
            "unseen": ev["unseen"]}


def late_acks(acks):
    """The ACKs (in arrival order) that the receiver sent before one that reached the capture
    ahead of them: the same acknowledgment number with a smaller window field.  A receiver
    never moves its window's right edge back (tcp_select_window(), net/ipv4/tcp_output.c: a
    smaller new window becomes ALIGN(cur_win, 1 << rcv_wscale)), so with the same ack the field
    never falls from one ACK to the next it sends; unless net.ipv4.tcp_shrink_window is 1
    (6.5 on; 0 in a fresh namespace), where the caller does not ask.  Each is returned with
    "after_win", the larger field that came first."""
    best, late = {}, []
    for p in acks:
        w = best.get(p["ack"])
        if p["len"] == 0 and w is not None and p["win"] < w:
            p["after_win"] = w
            late.append(p)
        best[p["ack"]] = p["win"] if w is None else max(w, p["win"])
    return late


def one_part(rawdir, name, params, hz):
    cpath = os.path.join(rawdir, f"{name}-capture.txt")
    c = t.one_line(os.path.join(rawdir, f"{name}-client.txt"), "connected ")
    start, local = c.int("start_ns"), c.str("local")
    res = t.one_line(os.path.join(rawdir, f"{name}-client.txt"), "result ")
    cap = pkt.read_capture(cpath)
    segs = pkt.conn_packets(cap, local)
    ppath = os.path.join(rawdir, f"{name}-capture.pcap")
    try:
        data = t.regular_bytes(ppath, MAX_PCAP)
    except FileNotFoundError:
        raise t.RawError(f"{ppath}: missing") from None
    except (t.NotRegular, OSError) as e:
        raise t.RawError(f"{ppath}: {e}") from None
    attach_sacks(segs, pcap_tcp(data, ppath), cap["ready"].int("clock_offset_ns"), ppath)
    sysctls = t.read_sysctl_file(os.path.join(rawdir, f"{name}-sysctls.txt"),
                                 ("net.ipv4.tcp_sack",))
    ssysctls = t.read_sysctl_file(os.path.join(rawdir, f"{name}-server-sysctls.txt"),
                                  ("net.ipv4.tcp_sack",))
    sack_on = [t.sysctl_int(s, "net.ipv4.tcp_sack", f, 0, 1) for s, f in
               ((sysctls, f"{name}-sysctls.txt"), (ssysctls, f"{name}-server-sysctls.txt"))]
    npath = os.path.join(rawdir, f"{name}-nft-server.txt")
    rules = tw.nft_rules(t.read_lines(npath), npath)
    if len(rules) != 1:
        raise t.RawError(f"{npath}: want one nft rule with a counter, found {len(rules)}")
    rule = rules[0]
    if rule["packets"] != 1:
        raise t.RawError(f"{npath}: the rule dropped {rule['packets']} packets: want one")
    flight, drop, mss = (params.int("flight", 4, 10), params.int("drop", 1, 7),
                         params.int("mss", 1, 65535))
    data = [p for p in segs if p["dir"] == "c>s" and p["len"] > 0]
    if len(data) < flight + 1 or any(p["len"] != mss for p in data[:flight]):
        raise t.RawError(f"{cpath}: want {flight} segments of {mss} bytes and a retransmission")
    hole = data[drop - 1]
    again = pkt.retransmitted(segs, "c>s")
    if not again or again[0]["seq"] != hole["seq"]:
        raise t.RawError(f"{cpath}: the first segment sent again is not the hole, segment "
                         f"{drop} (seq {hole['seq']}): a loss probe first, or the rule on "
                         "another segment")
    rtx = again[0]
    syn = next(p for p in segs if p["dir"] == "c>s" and "S" in p["flags"])
    sack_ok = "sackok" in syn.get("opts", "").split(",")
    # the duplicate ACKs: from the server, no data, no SYN or FIN, at the hole's sequence
    # number, after the hole was sent; each either repeats the highest acknowledgment so far
    # (RFC 5681's duplicate; the ACK that first acknowledged up to the hole is not one, even
    # when it arrived late: late_acks) or carries a SACK block of octets above it not SACKed
    # before (RFC 6675 section 2: a duplicate "even if it ... moves the cumulative
    # acknowledgment point": CI's interrupt storm saw the receiver's one ACK up to the hole
    # carry the SACK block of all five segments after it, and SACK recovery follow)
    acks = [p for p in segs if p["dir"] == "s>c" and p["ack"] is not None]
    # the server's tcp_shrink_window: None where the kernel has none (5.10) or the run did
    # not record it (the references before it joined SYSCTLS; a fresh namespace's is 0)
    shrink = t.sysctl_int(ssysctls, "net.ipv4.tcp_shrink_window",
                          f"{name}-server-sysctls.txt", 0, 1)
    late = late_acks(acks) if not shrink else []
    first = next((p for p in late if p["ack"] == hole["seq"]), None)
    dup, top, sacked = [], None, hole["seq"]
    for p in acks:
        new_sack = max((b[1] for b in p["sack"]), default=sacked) > sacked
        if (p["ack"] == hole["seq"] and p["len"] == 0 and p["t_ns"] > hole["t_ns"]
                and not set(p["flags"]) & set("SF")
                and (new_sack or (p is not first and (top == hole["seq"] or first)))):
            dup.append(p)
        top = p["ack"] if top is None else max(top, p["ack"])
        sacked = max([sacked] + [b[1] for b in p["sack"]])
    before = [p for p in dup if p["t_ns"] < rtx["t_ns"]]
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, SERVER_COUNTERS)
    # none at all: the receiver answered the segments after the hole with one ACK (they merged
    # in its socket's backlog while its reader held it; CI's interrupt storm saw it), and only
    # the RTO can send the hole again
    if not before and not t_of(cc, "TcpExtTCPTimeouts"):
        raise t.RawError(f"{cpath}: no duplicate ACK before the retransmission, and no RTO")
    gap_us = (rtx["t_ns"] - (before[-1] if before else hole)["t_ns"]) / 1000
    hole_end = hole["seq"] + hole["len"]
    flight_end = data[flight - 1]["seq"] + data[flight - 1]["len"]
    covered = [max((b[1] for b in p["sack"] if b[0] == hole_end), default=None) for p in before]
    ev = read_events(rawdir, name)
    ev_retrans = None if "blind" in ev else ev["retrans"]
    out = {"part": name, "port": int(rule["rule"].split("dport ")[1].split()[0]),
           "local": local, "start_ns": start, "rule": rule, "flight": flight, "drop": drop,
           "mss": mss, "tcp_sack": sack_on, "sackok": sack_ok,
           "result": {k: res.float(k) for k in ("first_us", "elapsed_s")},
           "reordering": t.sysctl_int(sysctls, "net.ipv4.tcp_reordering", f"{name}-sysctls.txt", 1),
           "hole": hole, "rtx": rtx, "dup": dup, "before": before, "late": late,
           "gap_us": round(gap_us, 3),
           "hole_end": hole_end, "flight_end": flight_end, "covered": covered,
           "one_jiffy_us": 10**6 // hz, "events": ev, "ev_retrans": ev_retrans,
           "counters": cc, "server_counters": sc, "capture": cap, "segs": segs, "again": again}
    out["crosscheck"], dis = tw.retrans_crosscheck(ev, ev_retrans, again, cc)
    out["disagree"] = [d for d in dis if d]
    return out


# ---- the text -----------------------------------------------------------------------------

def blocks_text(p):
    return " ".join(f"{a}-{b}" for a, b in p["sack"]) if p["sack"] else "none"


def how(r):
    """Which rule sent the hole again, from the capture and the counters."""
    n, c = len(r["before"]), r["counters"]
    timer = r["gap_us"] >= r["one_jiffy_us"]
    cause = (f"{r['gap_us']:.0f} µs after duplicate ACK {n}: "
             + ("a timer's delay, not that ACK (at least a jiffy later)" if timer else
                "that ACK triggered it (less than a jiffy later)")) if n else \
        (f"{r['gap_us']:.0f} µs after the hole was sent, with no duplicate ACK in between: a "
         "timer's delay")
    if t_of(c, "TcpExtTCPTimeouts"):
        rule = "an RTO (TCPTimeouts counted)"
        if not n:
            rule += ("; the receiver sent no duplicate ACK: the segments after the hole reached "
                     "it as one"
                     + (f" (its TCPBacklogCoalesce {t_of(r['server_counters'], 'TcpExtTCPBacklogCoalesce')})"
                        if t_of(r["server_counters"], "TcpExtTCPBacklogCoalesce") else ""))
        elif t_of(c, "TcpExtTCPBacklogCoalesce"):
            rule += (f"; TCPBacklogCoalesce {t_of(c, 'TcpExtTCPBacklogCoalesce')}: ACKs merged "
                     "in the socket's backlog while writev() held it, so tcp_ack() saw fewer "
                     "duplicates")
        elif r["part"] == "nosack" and r["reordering"] is not None and n < r["reordering"]:
            rule += (f"; only {n} duplicate ACK(s) before it, fewer than tcp_reordering "
                     f"{r['reordering']}, so no fast retransmit: the receiver answered several "
                     "segments after the hole with one ACK")
    elif r["part"] == "sack" and t_of(c, "TcpExtTCPSackRecovery"):
        rule = ("SACK recovery (TCPSackRecovery): " +
                ("before a third duplicate ACK, so RACK's time-based loss detection "
                 "(tcp_rack_detect_loss(), RFC 8985), not the three-duplicate-ACK rule" +
                 ("; the timer: RACK's reordering timer (tcp_rack_reo_timeout()), no RTO"
                  if timer else "") if n < 3 else "at or after the third duplicate ACK"))
    elif t_of(c, "TcpExtTCPRenoRecovery"):
        rule = f"NewReno recovery (TCPRenoRecovery) at duplicate ACK {n}: the count alone"
    else:
        rule = "no recovery counter moved"
    return cause, rule


def t_of(counters, name):
    return pkt.counter_delta(counters, name) or 0


def part_lines(r, title):
    ms = lambda ns: (ns - r["start_ns"]) / 1e6  # noqa: E731
    lines = [f"== {r['part']}: {title}",
             f"tcp_sack client {r['tcp_sack'][0]}, server {r['tcp_sack'][1]}; the client's SYN "
             f"{'offers' if r['sackok'] else 'does not offer'} SACK (sackok)",
             f"nft (server in): {tw.nft_rule_text(r['rule'])} (raw/{NAME}/{r['part']}-nft-server.txt)",
             f"the reply came {r['result']['first_us'] / 1000:.3f} ms after the write "
             "(rr_client first_us)", "",
             f"the hole: segment {r['drop']} of {r['flight']}, seq {r['hole']['seq']}-"
             f"{r['hole_end']}, sent at {ms(r['hole']['t_ns']):.3f} ms, dropped by nft; the "
             f"flight ends at {r['flight_end']}",
             f"duplicate ACKs (ack={r['hole']['seq']}) before the retransmission: "
             f"{len(r['before'])}; after it: {len(r['dup']) - len(r['before'])}",
             "  t_ms        SACK blocks (left-right, the client's relative sequence numbers)"]
    for p in r["dup"]:
        mark = "" if p in r["before"] else "  (after the retransmission)"
        lines.append(f"  {ms(p['t_ns']):10.3f}  {blocks_text(p)}{mark}")
    for p in r["late"]:
        lines.append(f"an ACK sent earlier, arrived later: {ms(p['t_ns']):.3f} ms, "
                     f"ack={p['ack']} win={p['win']} after win={p['after_win']} with the same "
                     "ack; the receiver never moves its window's right edge back "
                     "(tcp_select_window()), so it sent this one first (not a duplicate ACK)")
    lines.append(f"the hole sent again at {ms(r['rtx']['t_ns']):.3f} ms, "
                 f"{(r['rtx']['t_ns'] - r['hole']['t_ns']) / 1e6:.3f} ms after its first send")
    cause, rule_txt = how(r)
    lines += [f"  {cause}", f"  by: {rule_txt}", ""]
    return lines + tw.retrans_lines(r, ms, COUNTERS, OPTIONAL, SERVER_COUNTERS)


def part_rows(r):
    notes = [(e["t_ns"], "tcpevents: retrans") for e in (r["ev_retrans"] or [])]
    idx = {id(p): i for i, p in enumerate(r["segs"])}
    seg_notes = {idx[id(r["hole"])]: f"segment {r['drop']}: dropped by nft",
                 idx[id(r["rtx"])]: f"segment {r['drop']} sent again"}
    for k, p in enumerate(r["dup"], 1):
        seg_notes[idx[id(p)]] = f"dup ACK {k}" + (f", SACK {blocks_text(p)}" if p["sack"] else "")
    for p in r["late"]:
        seg_notes[idx[id(p)]] = f"sent before the ACK of win={p['after_win']}"
    return [{"sep": f"{r['part']}: segment {r['drop']} of {r['flight']} dropped once"}] + \
        pkt.ladder_rows(r["segs"], r["start_ns"], notes, seg_notes)


def part_json(r):
    ms = lambda ns: round((ns - r["start_ns"]) / 1e6, 3)  # noqa: E731
    cause, rule_txt = how(r)
    return {"port": r["port"], "rule": r["rule"], "tcp_sack": r["tcp_sack"],
            "sackok": r["sackok"], "result": "ok", "errno": None,
            "elapsed_s": r["result"]["elapsed_s"], "first_us": r["result"]["first_us"],
            "hole": {"seq": r["hole"]["seq"], "end": r["hole_end"], "t_ms": ms(r["hole"]["t_ns"])},
            "flight_end": r["flight_end"],
            "dup_acks": [{"t_ms": ms(p["t_ns"]), "sack": [list(b) for b in p["sack"]],
                          "before_rtx": p in r["before"]} for p in r["dup"]],
            "late_acks": [{"t_ms": ms(p["t_ns"]), "ack": p["ack"], "win": p["win"],
                           "after_win": p["after_win"]} for p in r["late"]],
            "rtx_ms": ms(r["rtx"]["t_ns"]), "dup_before_rtx": len(r["before"]),
            "gap_us": r["gap_us"], "how": {"cause": cause, "rule": rule_txt},
            "tcpevents": tw.retrans_json(r, ms),
            "crosscheck": r["crosscheck"], "counters": r["counters"],
            "server_counters": r["server_counters"], "capture": pkt.capture_json(r["capture"]),
            **({"disagree": r["disagree"]} if r["disagree"] else {})}


def build(rawroot, outdir):
    rawdir, kernel, hz, sysctls, _ = tw.read_unit(rawroot, NAME, ("net.ipv4.tcp_sack",))
    params = t.read_kv(os.path.join(rawdir, "params.txt"))
    wire = tw.read_wire(rawdir)
    runs = [one_part(rawdir, name, params, hz) for name, _ in PARTS]
    lines = [f"{NAME}: a flight of {params.int('flight', 4, 10)} segments of "
             f"{params.int('mss', 1, 65535)} bytes in one write, segment "
             f"{params.int('drop', 1, 7)} dropped once by nft",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      f"namespaces joined by a veth pair (MTU {wire['client']['link']['mtu']}, "
                      "one segment per packet: gso_max_segs 1; the server's packets paced by tbf "
                      f"at {params.int('ack_rate_kbit', 1)} kbit/s so that each ACK reaches the "
                      "client's socket on its own); the capture on the client's end"),
             "", tw.sysctls_line(sysctls, SYSCTLS, hz), ""]
    body, rows = tw.loss_parts_lines(NAME, runs, PARTS, part_lines, part_rows)
    lines += body
    obj = tw.parts_obj(NAME, kernel, rawdir, hz, params, sysctls, SYSCTLS,
                       {r["part"]: part_json(r) for r in runs}, rows)
    panels = [(f"part {r['part']}: {title}", r["segs"], {id(r["hole"])},
               {id(p) for p in r["again"]}) for r, (_, title) in zip(runs, PARTS)]
    caption = (f"{NAME}: time-sequence at the client's end of the veth, kernel {kernel}")
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, more=[(
        "tseq_svg", f"{NAME}-tseq.svg", "time-sequence",
        lambda path: tcplab_tseq.write_tmp(path, panels, caption))])


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
