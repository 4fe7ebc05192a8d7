"""tcplab_pkt.py — the packet side of the reports: the capture probe's lines (read_capture), the
SYNs of one connection put beside sockwatch's events and the counters (syn_check), a ladder of
segments as text (ladder_text) and as mscgen source (ladder_msc, render_svg), and the SYN
schedule plot of p01-synretry (syn_plot, gnuplot).  Pictures go through tcplab.tool_svg(): a
missing tool is one line in the report, never a failed report.  Standard library only."""
import ipaddress
import math
import os
import re
import shlex

import tcplab as t

DIRS = ("c>s", "s>c", "?>?")
_FLAGS = re.compile(r"[FSRPAUEC]+\Z")
_ADDR = re.compile(r"[0-9A-Fa-f.:\[\]]{1,60}:[0-9]{1,5}\Z")
MAX_PACKETS = 1_000_000
WIDTH = 100                 # a ladder line is at most this wide
ARROW = 44                  # the arrow's width between the two columns' bars
TIME_W = 10


def _tcp_fields(f, where):
    """The TCP fields every segment line and every ICMP quote carries, typed."""
    d = {"conn": f.int("conn", 1, MAX_PACKETS), "dir": f.str("dir"), "flags": f.str("flags"),
         "seq": f.int("seq", 0, 2 ** 32 - 1), "src": f.str("src"), "dst": f.str("dst")}
    if d["dir"] not in DIRS:
        raise t.RawError(f"{where}: dir={d['dir'][:10]}, want c>s, s>c or ?>?")
    if not _FLAGS.match(d["flags"]):
        raise t.RawError(f"{where}: flags={d['flags'][:10]}, want letters of FSRPAUEC")
    for k in ("src", "dst"):
        if not _ADDR.match(d[k]):
            raise t.RawError(f"{where}: {k}={d[k][:40]} is not address:port")
    return d


def _host(ep):
    """The address of `address:port` or `[address]:port`."""
    return ep[1:ep.rindex("]")] if ep.startswith("[") else ep.rsplit(":", 1)[0]


def _segment_tail(p, f, where):
    """ack, win and opts of a segment line or a first fragment's, typed and checked."""
    ack = f.str("ack")
    p["ack"] = None if ack == "-" else t.num(ack, f"{where}: ack", 0, 2 ** 32 - 1)
    if p["ack"] is not None and "A" not in p["flags"]:
        raise t.RawError(f"{where}: ack={ack[:12]} without the A flag")
    p.update(win=f.int("win", 0, 65535), opts=f.str("opts"))


def _fragment(p, f, where):
    """A frag= line (docs/capture.md, "IP fragments"): never a segment by itself.  Its datagram
    is (source, destination, protocol, id); the first fragment of a TCP segment carries the TCP
    fields with hlen= (the header's length) where a segment has len=."""
    p.update(kind="frag", frag=f.int("frag", 0, 65535), mf=f.int("mf", 0, 1),
             id=f.int("id", 0, 2 ** 32 - 1), proto=f.int("proto", 0, 255),
             fraglen=f.int("fraglen", 0, 65535))
    if "conn" in f:
        if p["frag"] != 0 or p["proto"] != 6:
            raise t.RawError(f"{where}: TCP fields on a fragment at offset {p['frag']} of "
                             f"protocol {p['proto']}")
        p.update(_tcp_fields(f, where))
        _segment_tail(p, f, where)
        p["hlen"] = f.int("hlen", 20, 60)
        src, dst = _host(p["src"]), _host(p["dst"])
    else:
        src, dst = f.str("src"), f.str("dst")
        for k, v in (("src", src), ("dst", dst)):
            try:
                ipaddress.ip_address(v)
            except ValueError:
                raise t.RawError(f"{where}: {k}={v[:40]} is not an address") from None
    p["datagram"] = (src, dst, p["proto"], p["id"])
    return p


def _whole(group):
    """The segment a datagram's fragments make, or None while they do not cover it from 0 to
    the end of its last (mf=0) fragment without a gap, or it is no TCP segment."""
    last = [x for x in group if x["mf"] == 0]
    first = [x for x in group if x["frag"] == 0 and "conn" in x]
    if not last or not first:
        return None
    end, at = last[0]["frag"] + last[0]["fraglen"], 0
    for x in sorted(group, key=lambda x: x["frag"]):
        if x["frag"] > at or x["frag"] + x["fraglen"] > end:
            return None
        at = max(at, x["frag"] + x["fraglen"])
    if at != end or end < first[0]["hlen"]:
        return None
    seg = {k: v for k, v in first[0].items()
           if k not in ("kind", "frag", "mf", "id", "proto", "fraglen", "hlen", "datagram")}
    seg.update(kind="tcp", len=end - first[0]["hlen"], fragments=len(group))
    return seg


def _join_fragments(packets):
    """Each IP fragment's datagram put back together: the list with every whole TCP segment in
    the place of its first fragment (with its time) and no fragment left, and the number of
    fragments of no whole segment (a missing piece, another protocol).  A fragment whose
    datagram already has that offset starts the datagram again (its id was used anew)."""
    open_, groups = {}, []
    for p in packets:
        if p["kind"] != "frag":
            continue
        g = open_.get(p["datagram"])
        if g is None or any(x["frag"] == p["frag"] for x in g):
            g = open_[p["datagram"]] = []
            groups.append(g)
        g.append(p)
        if _whole(g) is not None:
            del open_[p["datagram"]]
    whole, unjoined = {}, 0
    for g in groups:
        seg = _whole(g)
        if seg is None:
            unjoined += len(g)
        else:
            whole[id(next(x for x in g if x["frag"] == 0 and "conn" in x))] = seg
    out = [whole.get(id(p)) if p["kind"] == "frag" else p for p in packets]
    return [p for p in out if p is not None], unjoined


def _marks(p, f, quoted):
    """truncated=1 and bad=WHAT (docs/capture.md): kept on the packet, only when present, so
    read_capture() can count them and a report never reads a cut option list as whole."""
    q = t.kv(quoted)
    if f.get("truncated") == "1" or q.get("truncated") == "1":
        p["truncated"] = True
    bad = f.get("bad") or q.get("bad")
    if bad:
        p["bad"] = bad[:40]
    return p


def opts_whole(p):
    """True when the segment's option list is all there: False for a line whose snapshot cut
    the options (truncated=1) or whose decoding stopped at a malformed one (bad=): an option
    it does not list may still have been sent, so neither its absence nor its value is known."""
    return "truncated" not in p and "bad" not in p


def _packet(path, n, line, ready_ns):
    where = f"{path}: line {n}"
    head, sep, quoted = line.partition(" quoted: ")
    f = t.Fields(where, t.kv(head))
    p = {"t_ns": f.int("t_ns"), "t_s": f.float("t_s")}
    if p["t_ns"] < ready_ns:
        raise t.RawError(f"{where}: t_ns={p['t_ns']} is before the ready line's")
    _marks(p, f, quoted)
    if "other" in f and not sep:
        # the probe's own kind for a packet it could not read as TCP, ICMP or a fragment
        # (arp, another protocol, a header too short or malformed): counted, never a segment
        p.update(kind="other", other=f.str("other")[:40])
        return p
    if "frag" in f and not sep:
        return _fragment(p, f, where)
    if "icmp" in f:
        p.update(kind="icmp", icmp=f.str("icmp"), code=f.str("code"),
                 type=f.int("type", 0, 255), code_n=f.int("code_n", 0, 255), src=f.str("from"))
        if not sep:
            raise t.RawError(f"{where}: an ICMP line without `quoted:` (the TCP header it quotes)")
        p["quoted"] = _tcp_fields(t.Fields(where + " (quoted)", t.kv(quoted)), where)
        return p
    if sep:
        raise t.RawError(f"{where}: `quoted:` on a line that is not ICMP")
    p["kind"] = "tcp"
    p.update(_tcp_fields(f, where))
    _segment_tail(p, f, where)
    p["len"] = f.int("len", 0, 65535)
    return p


def _kv_quoted(path, line):
    """key=value pairs where a value may be "quoted" (the ready line's filter)."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise t.RawError(f"{path}: the ready line: {e}") from None
    return dict(w.split("=", 1) for w in words if "=" in w)


def read_capture(path, optional=False):
    """The capture probe's output (docs/capture.md, SPEC line format) → {"ready": Fields,
    "packets": [dict in order; "kind" tcp or icmp], "icmp": [the ICMP ones], "end": Fields,
    "fragments": the frag= lines, "unjoined": how many of them are of no whole segment,
    "path": path}.  IP fragments are never segments: the fragments of a datagram that holds a
    whole TCP segment become that one segment, in the place and at the time of its first
    fragment, with "fragments": N (docs/capture.md, "IP fragments"); the others are left out.
    The first line must be `ready`, the last `end` (without it capture was killed and packets
    may be missing), the end line's tcp=, icmp= and other= must count the segment, ICMP and
    fragment lines: anything else is RawError.  dropped > 0 is returned, not refused:
    capture_notes() says it.  None for a missing optional file."""
    lines = t.read_lines(path, optional)
    if lines is None:
        return None
    if not lines or not lines[0].startswith("ready "):
        raise t.RawError(f"{path}: no `ready` line first: not a capture output")
    if not lines[-1].startswith("end "):
        raise t.RawError(f"{path}: no `end` line: capture did not finish, packets may be missing")
    ready = t.Fields(path, _kv_quoted(path, lines[0]))
    ready_ns = ready.int("t_ns")
    ready.int("port", 1, 65535, default=None)
    end = t.Fields(path, t.kv(lines[-1]))
    counts = {k: end.int(k) for k in ("packets", "tcp", "icmp", "other", "received", "dropped",
                                      "ifdropped")}
    if len(lines) - 2 > MAX_PACKETS:
        raise t.RawError(f"{path}: more than {MAX_PACKETS} packets")
    packets = []
    for n, line in enumerate(lines[1:-1], 2):
        if not line.startswith("t_s="):
            raise t.RawError(f"{path}: line {n}: not a packet line (t_s=...)")
        packets.append(_packet(path, n, line, ready_ns))
    icmp = [p for p in packets if p["kind"] == "icmp"]
    frags = [p for p in packets if p["kind"] == "frag"]
    others = [p for p in packets if p["kind"] == "other"]
    tcp = len(packets) - len(icmp) - len(frags) - len(others)
    if (counts["tcp"] != tcp or counts["icmp"] != len(icmp) or
            counts["other"] != len(frags) + len(others)):
        kinds = "fragment and other= lines" if others else "fragment lines"
        other = (f"; other={counts['other']} against {len(frags) + len(others)} {kinds}"
                 if counts["other"] != len(frags) + len(others) else "")
        raise t.RawError(f"{path}: the end line counts tcp={counts['tcp']} icmp={counts['icmp']}, "
                         f"the file has {tcp} and {len(icmp)} lines{other}")
    if end.int("t_ns") < ready_ns:
        raise t.RawError(f"{path}: the end line's t_ns is before the ready line's")
    order = _time_order(packets)
    if order:
        # Sorted, not refused: capture prints packets in the order its ring handed them over,
        # and that is not always the order of their stamps: the committed 5.10 captures of
        # p02-accept-queue, p04-full-buffers and p01-synack-lost step back by up to 58 ms
        # (packets queued on different CPUs' backlogs, stamped on arrival, delivered to the
        # packet socket later), so refusing would refuse real runs.  Every report reads the
        # order as the order of events (a SYN-ACK answers the SYN before it), so the packets
        # are put in time order (stable: equal times keep the file's order), and
        # capture_notes() says so in a REORDERED line; the JSON counts them.
        packets.sort(key=lambda p: p["t_ns"])
        icmp = [p for p in packets if p["kind"] == "icmp"]
        frags = [p for p in packets if p["kind"] == "frag"]
    packets = [p for p in packets if p["kind"] != "other"]
    packets, unjoined = _join_fragments(packets) if frags else (packets, 0)
    marked = [p for p in icmp + frags + others + packets if "truncated" in p or "bad" in p]
    return {"ready": ready, "packets": packets, "icmp": icmp, "end": end, "fragments": frags,
            "unjoined": unjoined, "others": others, "reordered": order,
            "truncated": sum(1 for p in _unique(marked) if "truncated" in p),
            "bad": sorted(p["bad"] for p in _unique(marked) if "bad" in p), "path": path}


def _unique(ps):
    """Each packet dict once (a joined segment shares nothing with its fragments: the first
    fragment's marks are counted on the fragment)."""
    seen, out = set(), []
    for p in ps:
        if id(p) not in seen and "fragments" not in p:
            seen.add(id(p))
            out.append(p)
    return out


def _time_order(packets):
    """None when every packet line's t_ns is at least the one before it; else {"lines": how
    many come earlier than a line above them, "first_line": the first such (its line number in
    the file), "max_back_ms": the largest step back}."""
    late, first, back, top = 0, None, 0, None
    for i, p in enumerate(packets):
        if top is not None and p["t_ns"] < top:
            late += 1
            first = i + 2 if first is None else first
            back = max(back, top - p["t_ns"])
        top = p["t_ns"] if top is None else max(top, p["t_ns"])
    if not late:
        return None
    return {"lines": late, "first_line": first, "max_back_ms": round(back / 1e6, 3)}


def read_complete_capture(path):
    """read_capture() for a report that counts packets: a capture in which libpcap dropped any
    (dropped or ifdropped > 0) is refused, since every count from it would be short."""
    cap = read_capture(path)
    end = cap["end"]
    if end.int("dropped") or end.int("ifdropped"):
        raise t.RawError(f"{path}: libpcap dropped packets: the capture is incomplete")
    return cap


def capture_json(cap):
    """What a report's JSON says of the capture itself; with IP fragments, how many lines were
    fragments, the segments they made and those of no whole segment (keys absent without)."""
    r, e = cap["ready"], cap["end"]
    out = {"iface": r.str("iface"), "linktype": r.str("linktype", None),
           "filter": r.str("filter", None),
           **{k: e.int(k) for k in ("packets", "tcp", "icmp", "other", "received", "dropped",
                                    "ifdropped")}}
    if cap.get("fragments"):
        out.update(fragments=len(cap["fragments"]),
                   fragment_segments=sum(1 for p in cap["packets"] if "fragments" in p),
                   fragments_unjoined=cap["unjoined"])
    # the marks below are absent from a clean capture's JSON (keys only when there is one)
    if cap.get("others"):
        out["other_kinds"] = _kinds(p["other"] for p in cap["others"])
    if cap.get("truncated"):
        out["truncated"] = cap["truncated"]
    if cap.get("bad"):
        out["bad"] = _kinds(cap["bad"])
    if cap.get("reordered"):
        out["reordered"] = dict(cap["reordered"])
    return out


def _kinds(names):
    """{name: how many}, by name."""
    out = {}
    for k in names:
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def _kinds_text(kinds):
    return ", ".join(f"{k} {n}" for k, n in kinds.items())


def capture_notes(cap, where):
    """The lines a report prints about the capture: where it listened, how many packets, that
    some were IP fragments (one line, only then), and — visibly, never hidden — that libpcap
    dropped some."""
    c = capture_json(cap)
    filt = f", filter \"{c['filter']}\"" if c["filter"] else ""
    out = [f"capture: {where}, on {c['iface']}{filt}",
           f"  {c['packets']} packets ({c['tcp']} TCP, {c['icmp']} ICMP, {c['other']} other); "
           f"libpcap: received={c['received']} dropped={c['dropped']} ifdropped={c['ifdropped']}"]
    if "fragments" in c:
        none = (f"; {c['fragments_unjoined']} make no whole TCP segment and count as none"
                if c["fragments_unjoined"] else "")
        out.append(f"  IP fragments: {c['fragments']} of the packets, joined into "
                   f"{c['fragment_segments']} TCP segments (each counted once){none}")
    if c["dropped"] or c["ifdropped"]:
        out.append(f"DROPPED: libpcap lost {c['dropped'] + c['ifdropped']} packets "
                   f"(dropped={c['dropped']} ifdropped={c['ifdropped']}): the capture is "
                   "incomplete, its counts below may be short")
    out += capture_marks(c)
    if c["iface"] == "lo":
        both = (f"; received={c['received']} counts both copies"
                if c["received"] == 2 * c["packets"] else "")
        out.append("  on lo libpcap sees each packet once: it drops the outgoing copy "
                   f"(PACKET_OUTGOING){both}")
    return out


def capture_marks(c):
    """The lines that say what in a capture is not clean (capture_json's keys, absent from a
    clean one): other= lines, truncated and malformed packets, lines out of time order.  []
    for a clean capture.  capture_notes() prints them; a report that prints no notes prints
    these."""
    out = []
    if "other_kinds" in c:
        n = sum(c["other_kinds"].values())
        out.append(f"  other= lines: {n} packet{'s' if n > 1 else ''} neither TCP nor ICMP nor a "
                   f"fragment ({_kinds_text(c['other_kinds'])}): counted, not analysed")
    if "truncated" in c:
        out.append(f"TRUNCATED: {c['truncated']} packet{'s' if c['truncated'] > 1 else ''} cut "
                   "short by the snapshot (truncated=1): what was cut (options, timestamps, a "
                   "header) is not read as if present")
    if "bad" in c:
        n = sum(c["bad"].values())
        out.append(f"BAD: {n} packet{'s' if n > 1 else ''} malformed ({_kinds_text(c['bad'])}):"
                   " decoding stopped there; what follows is not read as if present")
    if "reordered" in c:
        r = c["reordered"]
        out.append(f"REORDERED: {r['lines']} packet line{'s' if r['lines'] > 1 else ''} earlier "
                   f"in time than a line above (the first at line {r['first_line']}, the largest "
                   f"step back {r['max_back_ms']:.3f} ms): read in time order (t_ns), not in "
                   "the file's")
    return out


def conn_packets(cap, local):
    """The TCP segments of the connection whose client end is local (address:port, as
    sockwatch and the clients print it), in order; [] when the capture has none."""
    return [p for p in cap["packets"] if p["kind"] == "tcp" and
            ((p["dir"] == "c>s" and p["src"] == local) or (p["dir"] == "s>c" and p["dst"] == local))]


def syns(packets):
    """The client's SYNs (S without A) among one connection's segments."""
    return [p for p in packets if p["dir"] == "c>s" and "S" in p["flags"] and "A" not in p["flags"]]


def sockwatch_notes(events, t0_ns):
    """sockwatch's events as ladder notes (t_ns, text): the socket state beside the packets."""
    return [(t0_ns + round(e["t_s"] * 1e9), f"sockwatch: {e['event']} {e['state']} "
             f"retrans={e['retrans']}") for e in events]


def ms(ns, t0_ns):
    return round((ns - t0_ns) / 1e6, 3)


def nearest_rank(xs, p):
    """The p-th percentile by nearest rank (as p01-connect-time), None for no values."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def syn_check(syn_pkts, events, t0_ns, counted=None):
    """The SYNs of one connection beside sockwatch: SYN 0 beside its `new` event, SYN k beside
    the change to retrans=k; offset = sockwatch's time − the packet's (ms).  counted: the SYNs
    the counters say were sent (TcpOutSegs + TcpRetransSegs), or None when not sampled.
    Returns the JSON object; its `disagree` lists every way the three disagree."""
    seen = {}
    for e in events:
        if e["event"] == "new" and 0 not in seen:
            seen[0] = e
        elif e["event"] == "change" and e["retrans"] not in seen:
            seen[e["retrans"]] = e
    retrans = max((e["retrans"] for e in events), default=0)
    rows, offsets, disagree = [], [], []
    for k, p in enumerate(syn_pkts):
        e = seen.get(k)
        pt = ms(p["t_ns"], t0_ns)
        row = {"n": k, "t_ms": pt, "event": None, "event_t_ms": None, "offset_ms": None}
        if e is not None:
            et = round(e["t_s"] * 1e3, 3)
            row.update(event=e["event"], event_t_ms=et, offset_ms=round(et - pt, 3))
            if k > 0:
                # may be negative: tcp_retransmit_timer() counts the retransmission
                # (tcp_update_rto_stats) just before it sends it (tcp_retransmit_skb)
                offsets.append(row["offset_ms"])
        elif k > 0:
            disagree.append(f"SYN {k} (at {pt:.3f} ms in the capture) has no sockwatch event "
                            f"retrans={k}: sockwatch missed that transition")
        rows.append(row)
    counts = {"capture": len(syn_pkts), "sockwatch": retrans + 1 if events else None,
              "counters": counted}
    named = {"capture": "the capture has", "sockwatch": "sockwatch's retransmissions + 1 =",
             "counters": "TcpOutSegs + TcpRetransSegs ="}
    if len({v for v in counts.values() if v is not None}) > 1:
        disagree.insert(0, "SYN counts differ: " + ", ".join(
            f"{named[k]} {v}" for k, v in counts.items() if v is not None))
    return {"syn_count": len(syn_pkts), "sockwatch_syns": counts["sockwatch"],
            "counter_syns": counted, "syns": rows,
            "offset_ms": {"n": len(offsets), "p50": nearest_rank(offsets, 50),
                          "max": max(offsets) if offsets else None},
            "disagree": disagree}


def syn_lines(check):
    """The SYN table and its verdict, for the .txt."""
    out = [f"  {'SYN':>3}  {'capture_ms':>11}  {'sockwatch':<10} {'event_ms':>11}  {'offset_ms':>9}"]
    for r in check["syns"]:
        ev = "-" if r["event"] is None else ("new" if r["event"] == "new" else f"retrans={r['n']}")
        et = "-" if r["event_t_ms"] is None else f"{r['event_t_ms']:.3f}"
        off = "-" if r["offset_ms"] is None else f"{r['offset_ms']:+.3f}"
        out.append(f"  {r['n']:>3}  {r['t_ms']:11.3f}  {ev:<10} {et:>11}  {off:>9}")
    o = check["offset_ms"]
    if o["n"]:
        out += [f"  offset = sockwatch - capture, over the {o['n']} retransmission"
                f"{'s' if o['n'] > 1 else ''}: "
                f"p50 {o['p50']:+.3f} ms, max {o['max']:+.3f} ms",
                "  (SYN 0's `new` is not a retransmission: sockwatch sees a new socket at its "
                "next sample)"]
    counts = [f"capture {check['syn_count']}"]
    if check["sockwatch_syns"] is not None:
        counts.append(f"sockwatch retransmissions + 1 = {check['sockwatch_syns']}")
    if check["counter_syns"] is not None:
        counts.append(f"TcpOutSegs + TcpRetransSegs = {check['counter_syns']}")
    out.append("  SYNs: " + ", ".join(counts) + ("" if check["disagree"] else ": they agree"))
    out += ["DISAGREE: " + d for d in check["disagree"]]
    return out


def retransmitted(packets, direction):
    """The segments of one direction (c>s or s>c) that send again sequence space sent before in
    their connection: a SYN, data or a FIN starting below the highest sequence number already
    covered (seq + len, + 1 for SYN and FIN).  Pure ACKs and RSTs take no sequence space and
    are never counted.  What TcpRetransSegs (and TCPSynRetrans, for SYNs and SYN-ACKs) count
    when the capture sits where the sender's segments leave."""
    top, out = {}, []
    for p in packets:
        if p["kind"] != "tcp" or p["dir"] != direction or "R" in p["flags"]:
            continue
        size = p["len"] + ("S" in p["flags"]) + ("F" in p["flags"])
        if not size:
            continue
        c = p["conn"]
        if c in top and p["seq"] < top[c]:
            out.append(p)
        top[c] = max(top.get(c, 0), p["seq"] + size)
    return out


def count_check(what, captured, counter, delta):
    """A count from the capture beside the counter that counts the same packets → the
    disagreement as text (the report prints it as a DISAGREE line, its JSON keeps it), or None
    when they agree or the counter was not read (delta None)."""
    if delta is None or captured == delta:
        return None
    return f"{what}: the capture has {captured}, {counter} {delta:+d}"


def sent_checks(packets, direction, counters, who):
    """What one side sent, from a capture where its segments leave (its own end of a veth, or
    lo), beside that side's counters: SYNs and SYN-ACKs sent again against TCPSynRetrans,
    segments sent again against TcpRetransSegs, RSTs against TcpOutRsts.  packets: one
    connection's (or all the namespace's) segments; a counter not read is not checked.
    → the disagreements (count_check's text)."""
    mine = [p for p in packets if p["kind"] == "tcp" and p["dir"] == direction]
    again = retransmitted(mine, direction)
    checks = (("SYNs sent again", sum(1 for p in again if "S" in p["flags"]),
               "TcpExtTCPSynRetrans"),
              ("segments sent again", len(again), "TcpRetransSegs"),
              ("RSTs sent", sum(1 for p in mine if "R" in p["flags"]), "TcpOutRsts"))
    out = [count_check(f"{who} {what}", n, f"{who} {name}", counter_delta(counters, name))
           for what, n, name in checks]
    return [d for d in out if d]


def counter_delta(counters, name):
    """A counter's delta as an int from a report's counter dict (a number or {"value": N}),
    None when it was not read."""
    v = counters.get(name) if counters is not None else None
    if isinstance(v, dict):
        v = v.get("value")
    return v if isinstance(v, int) else None


# ---- the ladder --------------------------------------------------------------------------------

def seg_label(p):
    """What an arrow says: flags, relative seq (and ack when ACK is set), payload length."""
    if p["kind"] == "icmp":
        q = p["quoted"]
        return f"ICMP {p['icmp']} {p['code']} (quotes {q['flags']} seq={q['seq']})"
    ack = "" if p["ack"] is None else f" ack={p['ack']}"
    return f"{p['flags']} seq={p['seq']}{ack} len={p['len']}"


def ladder_rows(packets, t0_ns, notes=(), seg_notes=None):
    """Rows for ladder_text/ladder_msc, in time order: one per segment ({"t_ms", "dir",
    "label", "note"}) and one per note (t_ns, text) — a socket event, a system call — with
    dir None.  seg_notes: {index in packets: text beside that segment} (a counter)."""
    rows = []
    for i, p in enumerate(packets):
        d = p["dir"] if p["kind"] == "tcp" else {"c>s": "s>c", "s>c": "c>s"}.get(
            p["quoted"]["dir"], "?>?")
        rows.append((p["t_ns"], 0, {"t_ms": ms(p["t_ns"], t0_ns), "dir": d,
                                    "label": seg_label(p), "note": (seg_notes or {}).get(i, "")}))
    for t_ns, text in notes:
        rows.append((t_ns, 1, {"t_ms": ms(t_ns, t0_ns), "dir": None, "label": None, "note": text}))
    return [r for _, _, r in sorted(rows, key=lambda x: (x[0], x[1]))]


def _arrow(d, label):
    inner = ARROW - 2
    label = label[:inner - 6]
    if d == "c>s":
        body = "--" + label + "-" * (inner - 3 - len(label)) + ">"
    elif d == "s>c":
        body = "<--" + label + "-" * (inner - 3 - len(label))
    else:
        body = "?-" + label + "-" * (inner - 4 - len(label)) + "-?"
    return "|" + body + "|"


def _wrap(text, width):
    words, out, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            out.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w[:width]
    return out + ([cur] if cur else [])


def ladder_text(rows, client="client", server="server", notes_title="socket / counters"):
    """A ladder: client bar on the left, server bar on the right, time going down (ms in the
    first column), one arrow per segment, the note beside it; a row with "sep" is a heading
    between connections.  No line is wider than WIDTH; notes wrap."""
    note_w = WIDTH - TIME_W - 2 - ARROW - 2
    gap = ARROW - len(client) - len(server)
    out = [f"{'t_ms':>{TIME_W}}  {client}{' ' * max(1, gap)}{server}  {notes_title}"]
    empty = "|" + " " * (ARROW - 2) + "|"
    for r in rows:
        if "sep" in r:
            out.append(f"{'':>{TIME_W}}  -- {r['sep']} --"[:WIDTH])
            continue
        mid = empty if r["dir"] is None else _arrow(r["dir"], r["label"])
        notes = _wrap(r["note"], note_w) or [""]
        out.append(f"{r['t_ms']:{TIME_W}.3f}  {mid}  {notes[0]}".rstrip())
        out += [f"{'':>{TIME_W}}  {empty}  {n}" for n in notes[1:]]
    return out


def _q(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ladder_msc(rows, client="client", server="server", notes_title="socket / counters"):
    """The same ladder as mscgen source: entities c, s and (when any row has a note) n; each
    segment an arc labelled with its time and ladder label, its note a box on n on the same
    line; a note row a box alone; a "sep" row a `---` divider."""
    with_notes = any(r.get("note") for r in rows)
    ents = [f"c [label={_q(client)}]", f"s [label={_q(server)}]"]
    if with_notes:
        ents.append(f"n [label={_q(notes_title)}]")
    out = ["msc {", '  hscale="1.8", arcgradient="4";', "  " + ", ".join(ents) + ";"]
    arc = {"c>s": "c=>s", "s>c": "s=>c", "?>?": "c<=>s"}
    for r in rows:
        if "sep" in r:
            out.append(f"  --- [label={_q(r['sep'])}];")
        elif r["dir"] is None:
            text = f"{r['t_ms']:.3f} ms  {r['note']}"
            out.append(f"  n note n [label={_q(text)}];")
        else:
            text = f"{r['t_ms']:.3f} ms  {r['label']}"
            line = f"  {arc[r['dir']]} [label={_q(text)}]"
            if r["note"]:
                line += f", n note n [label={_q(r['note'])}]"
            out.append(line + ";")
    return "\n".join(out + ["}"]) + "\n"


def render_svg(msc, path):
    """mscgen -T svg -o into a temporary file beside path → (tmp, None) or (None, why)."""
    tmp, why = t.tool_svg(path, lambda out: (["mscgen", "-T", "svg", "-o", out, "-i", "-"], msc))
    if tmp is None and why.endswith("not found"):
        why = "mscgen not found (make deps)"
    return tmp, why


def ladder_svg(outdir, name, rows, client, server, made):
    """OUTDIR/name drawn from the ladder rows, true to time (tcplab_ladder: SVG written
    in-process, no tool), its temporary file added to made ({final: tmp}, for
    tcplab.write_outputs) → (name, the line for the .txt)."""
    import tcplab_ladder
    path = os.path.join(outdir, name)
    os.makedirs(outdir, exist_ok=True)
    made[path] = tcplab_ladder.write_tmp(path, rows, client, server)
    return name, f"ladder svg: {name}"


def drop_made(made):
    """Remove the temporary pictures write_outputs() did not rename (a refusal on the way)."""
    for tmp in made.values():
        if os.path.exists(tmp):
            os.unlink(tmp)


def syn_plot(runs, path, kernel):
    """The SYN schedule, observed (the capture's SYN times) against expected (the schedule
    tcplab.expected_syn_schedule() derives from the sysctls), one panel per run:
    runs = [(title, observed_s, expected_s)], times in s from connect().  gnuplot SVG through
    tcplab.tool_svg() → (tmp, None) or (None, why)."""
    blocks, panels = [], []
    for i, (title, seen, want) in enumerate(runs):
        blocks.append(f"$seen{i} << EOD\n" + "".join(f"{k} {x}\n" for k, x in enumerate(seen)) +
                      f"EOD\n$want{i} << EOD\n" + "".join(f"{k} {x}\n" for k, x in enumerate(want)) +
                      "EOD\n")
        panels.append(f"set title {t.gnuplot_str(title)} noenhanced\n"
                      f"plot $want{i} using 1:2 with linespoints dashtype 2 pointtype 6 "
                      f"pointsize 1.2 title 'expected (sysctls)', $seen{i} using 1:2 with points "
                      "pointtype 7 pointsize 0.8 title 'observed (capture)'\n")
    script = ("".join(blocks) +
              f"set multiplot layout 1,{len(runs)} title "
              f"{t.gnuplot_str(f'SYN schedule, kernel {kernel}')} "
              "noenhanced\nset grid\nset key left top\nset xlabel 'SYN (0 = the first)'\n"
              "set ylabel 's from connect()'\nset xtics 1\nset yrange [0:*]\n" +
              "".join(panels) + "unset multiplot\n")
    return t.tool_svg(path, lambda out: (["gnuplot"], "set terminal svg size 1000,420 dynamic "
                                         f"font 'sans,12'\nset output {t.gnuplot_str(out)}\n"
                                         + script))
