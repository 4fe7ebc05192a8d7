#!/usr/bin/python3
"""p03-small-writes report: a request written as two small write()s waits for the ACK of the
first (Nagle), which the server delays (the delayed-ACK timer, TCP_DELACK_MIN): each request
takes about one timer.  The same with TCP_NODELAY, TCP_QUICKACK on the server, one write
(writev, MSG_MORE, TCP_CORK) and a bulk stream.  Per variant: the client's request times, each
side's counters (each read in its own namespace), tcpi_ato of both sockets (sockwatch), and the
capture: how long each client segment waited for its ACK.  One table side by side; a ladder of
a few requests.  Every number comes from raw/p03-small-writes/."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p03-small-writes"
# (part, what it changes) in the order the collect script runs them
PARTS = (("baseline", "two write()s: the 8-byte header, then the 32-byte body"),
         ("nodelay", "TCP_NODELAY on the client"),
         ("quickack", "TCP_QUICKACK on the server, set again after every recv()"),
         ("writev", "one writev() of header and body"),
         ("more", "send(header, MSG_MORE), then send(body)"),
         ("cork", "TCP_CORK on, two write()s, TCP_CORK off"),
         ("bulk", "two write()s per message, a stream that waits for no reply"),
         ("pingpong3", "the baseline with the server's net.ipv4.tcp_pingpong_thresh=3"))
OPTIONAL = ("pingpong3",)     # only where tcp_pingpong_thresh is a sysctl
COUNTERS = ("TcpExtDelayedACKs", "TcpExtDelayedACKLocked", "TcpExtDelayedACKLost",
            "TcpExtTCPPureAcks", "TcpExtTCPHPAcks", "TcpExtTCPAutoCorking", "TcpOutSegs",
            "TcpInSegs", "TcpRetransSegs")
SYSCTLS = ("tcp_pingpong_thresh", "tcp_autocorking", "tcp_comp_sack_nr")
LADDER = (("baseline", 1, 3), ("nodelay", 2, 3), ("quickack", 2, 3), ("writev", 2, 3))


def delack_constants(hz):
    """TCP_DELACK_MIN and TCP_ATO_MIN of include/net/tcp.h: HZ/25 jiffies when HZ >= 100, else
    4 jiffies; and one jiffy, in ms."""
    jiffies = hz // 25 if hz >= 100 else 4
    return {"hz": hz, "tcp_delack_min_jiffies": jiffies,
            "tcp_delack_min_ms": round(jiffies * 1000 / hz, 3), "jiffy_ms": round(1000 / hz, 3)}


def read_sysctls(rawdir):
    """sysctls.txt (net.ipv4.NAME=VALUE or =absent, read in the server's namespace)."""
    return t.read_sysctl_file(os.path.join(rawdir, "sysctls.txt"),
                              [f"net.ipv4.{name}" for name in SYSCTLS])


def snapshot(path, state="ESTAB"):
    """The one socket of a `sockwatch -1` snapshot: state, timer, ato_us (None when this
    sockwatch prints no ato_us), rto_ms."""
    socks = t.read_snapshot(path)
    if len(socks) != 1:
        raise t.RawError(f"{path}: want one socket, found {len(socks)}")
    s = socks[0]
    if s.str("state") != state:
        raise t.RawError(f"{path}: state={s.str('state')[:12]}, want {state}")
    return {"state": s.str("state"), "local": s.str("local"), "peer": s.str("peer"),
            "timer": s.str("timer"), "wq": s.int("wq"),
            "ato_us": s.int("ato_us", default=None), "rto_ms": s.int("rto_ms", default=None),
            "info_len": s.int("info_len", default=None)}


def ack_waits(segs):
    """Every client segment that carries data, and the first server segment that acknowledges
    all of it: → [{"t_ns", "seq", "len", "wait_us", "by": "pure ACK" or "data"}]."""
    out = []
    for i, p in enumerate(segs):
        if p["dir"] != "c>s" or p["len"] == 0:
            continue
        end = p["seq"] + p["len"]
        ack = next((q for q in segs[i + 1:] if q["dir"] == "s>c" and q["ack"] is not None
                    and q["ack"] >= end), None)
        if ack is not None:
            out.append({"t_ns": p["t_ns"], "seq": p["seq"], "len": p["len"],
                        "wait_us": round((ack["t_ns"] - p["t_ns"]) / 1e3, 1),
                        "by": "pure ACK" if ack["len"] == 0 and "F" not in ack["flags"]
                        else "data", "ack_t_ns": ack["t_ns"]})
    return out


def stats(xs):
    if not xs:
        return None
    s = sorted(xs)
    return {"n": len(s), "min": s[0], "p50": pkt.nearest_rank(s, 50),
            "p99": pkt.nearest_rank(s, 99), "max": s[-1]}


def one_part(rawdir, name, const):
    pre = os.path.join(rawdir, name)
    conn = t.one_line(f"{pre}-client.txt", "connected ")
    res = t.one_line(f"{pre}-client.txt", "result ")
    srv = t.one_line(f"{pre}-server.txt", "ready ")
    sconn = t.one_line(f"{pre}-server.txt", "conn ")
    bulk = res.str("pattern") == "bulk"
    if (name == "bulk") != bulk:
        raise t.RawError(f"{pre}-client.txt: pattern={res.str('pattern')[:10]} in part {name}")
    reqs = t.read_kv_lines(f"{pre}-requests.txt", "req ")
    if not reqs:
        raise t.RawError(f"{pre}-requests.txt: no request lines")
    local = conn.str("local")
    cap = pkt.read_complete_capture(f"{pre}-capture.txt")
    segs = pkt.conn_packets(cap, local)
    if not segs:
        raise t.RawError(f"{cap['path']}: no segment of {local}")
    waits = ack_waits(segs)
    limit_us = const["tcp_delack_min_ms"] * 1e3 - const["jiffy_ms"] * 1e3
    pure = [w["wait_us"] for w in waits if w["by"] == "pure ACK"]
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, COUNTERS)
    times = [r.float("total_us", 0, 1e12) for r in reqs]
    out = {"part": name, "port": srv.int("port", 1, 65535), "local": local,
           "pattern": res.str("pattern"), "write": res.str("write"),
           "nodelay": res.int("nodelay", 0, 1), "quickack": srv.int("quickack", 0, 1),
           "body": conn.int("body", 1, 65536), "reply": srv.int("reply", 1, 65536),
           "start_ns": conn.int("start_ns"),
           "server": {k: sconn.int(k) for k in ("requests", "bulk", "bytes", "recvs",
                                                 "quickacks")},
           "server_end": sconn.str("end"),
           "client_socket": snapshot(f"{pre}-sockwatch.txt"),
           "server_socket": snapshot(f"{pre}-server-sockwatch.txt"),
           "timewait": snapshot(f"{pre}-timewait.txt", "TIME-WAIT")["state"],
           "counters_client": cc, "counters_server": sc, "capture": pkt.capture_json(cap),
           "client_data_segments": sum(1 for p in segs if p["dir"] == "c>s" and p["len"] > 0),
           "ack_wait_us": stats([w["wait_us"] for w in waits]),
           "pure_ack_waits": len(pure),
           "ack_waits_over_timer": sum(1 for w in waits if w["wait_us"] >= limit_us),
           "timer_wait_ms": stats([round(w["wait_us"] / 1e3, 3) for w in waits
                                   if w["wait_us"] >= limit_us]),
           "_segs": segs, "_waits": waits, "_reqs": reqs, "_cap": cap}
    # the capture (the client's end) beside the counters that count the same segments: each
    # side's segments sent again against its TcpRetransSegs; the key only when they differ
    dis = [d for d in (
        pkt.count_check("client segments sent again", len(pkt.retransmitted(segs, "c>s")),
                        "client TcpRetransSegs", pkt.counter_delta(cc, "TcpRetransSegs")),
        pkt.count_check("server segments sent again", len(pkt.retransmitted(segs, "s>c")),
                        "server TcpRetransSegs", pkt.counter_delta(sc, "TcpRetransSegs"))) if d]
    if dis:
        out["disagree"] = dis
    if bulk:
        out.update(messages=res.int("messages", 1), bytes=res.int("bytes", 1),
                   elapsed_s=res.float("elapsed_s", 0, 86400),
                   per_message_us=res.float("per_message_us", 0, 1e12))
    else:
        out.update(requests=res.int("requests", 1), elapsed_s=res.float("elapsed_s", 0, 86400),
                   **{k: res.float(f"{k}_us", 0, 1e12) / 1e3 for k in ("min", "p50", "p99",
                                                                       "max", "first")})
        if out["requests"] != len(times):
            raise t.RawError(f"{pre}-requests.txt: {len(times)} requests, the result line "
                             f"says {out['requests']}")
        out["requests_over_timer"] = sum(1 for x in times if x >= limit_us)
        fast = next((i for i, x in enumerate(times) if x >= limit_us), len(times))
        out["fast_before_first_stall"] = fast
        # the kernel's count: the requests before the first one whose segment the server's
        # delayed-ACK timer held (its pure ACK a timer later in the capture).  Under load a
        # request can be slow for the machine's reasons; this one cannot be fooled that way
        held = [w["t_ns"] for w in waits if w["by"] == "pure ACK" and w["wait_us"] >= limit_us]
        spans = [(r.int("start_ns"), r.int("start_ns") + x * 1e3) for r, x in zip(reqs, times)]
        out["fast_before_timer"] = next((i for i, (a, b) in enumerate(spans)
                                         if any(a <= w <= b for w in held)), len(times))
        out["times_ms"] = [round(x / 1e3, 3) for x in times]
    return out


def ms(v):
    return "-" if v is None else f"{v:.3f}"


def delta(d, k):
    v = d.get(k)
    return "absent" if v is None and k in d else t.fmt_delta(v) if k in d else "."


def table_lines(runs):
    head = (f"  {'variant':<9} {'median_ms':>9} {'p99_ms':>8} {'>=timer':>8}  "
            f"{'DelayedACKs c/s':>15}  {'OutSegs c/s':>11}  {'PureAcks c/s':>12}  "
            f"{'ato_us c/s':>13}")
    out = [head]
    for r in runs:
        cc, sc = r["counters_client"], r["counters_server"]
        pair = lambda k: f"{delta(cc, k)}/{delta(sc, k)}"  # noqa: E731
        ato = (f"{r['client_socket']['ato_us']}/{r['server_socket']['ato_us']}"
               if r["server_socket"]["ato_us"] is not None else "absent")
        if r["pattern"] == "bulk":
            med, p99, over = f"({r['elapsed_s'] * 1e3:.3f}", "total)", "-"
        else:
            med, p99 = ms(r["p50"]), ms(r["p99"])
            over = f"{r['requests_over_timer']}/{r['requests']}"
        out.append(f"  {r['part']:<9} {med:>9} {p99:>8} {over:>8}  {pair('TcpExtDelayedACKs'):>15}  "
                   f"{pair('TcpOutSegs'):>11}  {pair('TcpExtTCPPureAcks'):>12}  {ato:>13}")
    return out


def part_lines(r, title, const):
    lines = [f"== {r['part']}: {title}"]
    sc = r["server"]
    if r["pattern"] == "bulk":
        lines.append(f"client: {r['messages']} messages ({r['bytes']} bytes) and one request in "
                     f"{r['elapsed_s'] * 1e3:.3f} ms, {r['per_message_us']:.1f} µs per message")
    else:
        lines.append(f"client: {r['requests']} requests, min {r['min']:.3f} ms, median "
                     f"{r['p50']:.3f} ms, p99 {r['p99']:.3f} ms, max {r['max']:.3f} ms "
                     f"(first {r['first']:.3f} ms)")
        lines.append(f"  requests that took >= {const['tcp_delack_min_ms'] - const['jiffy_ms']:g} "
                     f"ms (TCP_DELACK_MIN - 1 jiffy): {r['requests_over_timer']}; before the "
                     f"first of them: {r['fast_before_first_stall']}")
    lines.append(f"server: {sc['requests']} request{'' if sc['requests'] == 1 else 's'}, "
                 f"{sc['bulk']} bulk messages, {sc['bytes']} "
                 f"bytes in {sc['recvs']} recv() calls, TCP_QUICKACK set {sc['quickacks']} times; "
                 f"ended by {r['server_end']}")
    w = r["ack_wait_us"]
    if w:
        lines.append(f"capture: {r['client_data_segments']} client segments with data; the wait "
                     f"for their ACK: min {w['min']:.1f} µs, median {w['p50']:.1f} µs, max "
                     f"{w['max'] / 1e3:.3f} ms; acknowledged by a pure ACK: {r['pure_ack_waits']}; "
                     f"waited >= {const['tcp_delack_min_ms'] - const['jiffy_ms']:g} ms: "
                     f"{r['ack_waits_over_timer']}")
    tw_ = r["timer_wait_ms"]
    if tw_:
        lines.append(f"  the {tw_['n']} that waited a timer: min {tw_['min']:.3f} ms, median "
                     f"{tw_['p50']:.3f} ms, max {tw_['max']:.3f} ms"
                     + ("" if r["pattern"] == "bulk" else
                        f"; requests before the first of them: {r['fast_before_timer']}"))
    for side in ("client", "server"):
        s = r[f"{side}_socket"]
        ato = "absent (this sockwatch prints no ato_us)" if s["ato_us"] is None else s["ato_us"]
        lines.append(f"  {side} socket before the close (sockwatch -1): {s['state']} "
                     f"{s['local']} timer={s['timer']} wq={s['wq']} ato_us={ato}")
    lines.append("  counters, each side in its own namespace:")
    lines += tw.counter_lines(r["counters_client"], r["counters_server"], COUNTERS, "    ")
    lines += ["DISAGREE: " + d for d in r.get("disagree", ())]
    return lines


def ladder_part(r, first, last, const):
    """Ladder rows of requests first..last (1-based) of one part, times from the first one."""
    reqs = r["_reqs"]
    if len(reqs) < last:
        return []
    t0 = reqs[first - 1].int("start_ns")
    t1 = reqs[last - 1].int("start_ns") + round(reqs[last - 1].float("total_us") * 1e3)
    segs = [p for p in r["_segs"] if t0 <= p["t_ns"] <= t1]
    waits = {w["ack_t_ns"]: w for w in r["_waits"]}
    seg_notes = {}
    for i, p in enumerate(segs):
        w = waits.get(p["t_ns"])
        if w is not None and p["dir"] == "s>c" and p["len"] == 0:
            timer = w["wait_us"] >= const["tcp_delack_min_ms"] * 1e3 - const["jiffy_ms"] * 1e3
            seg_notes[i] = (f"ACK of seq {w['seq']}+{w['len']}, {w['wait_us'] / 1e3:.3f} ms after "
                            "it" + (": the server's delayed-ACK timer" if timer else ""))
    notes = []
    for k in range(first - 1, last):
        s = reqs[k].int("start_ns")
        notes.append((s, f"client: request {k + 1} written"))
        notes.append((s + round(reqs[k].float("total_us") * 1e3),
                      f"client: reply {k + 1} read, {reqs[k].float('total_us') / 1e3:.3f} ms"))
    return ([{"sep": f"{r['part']}: requests {first}-{last}"}] +
            pkt.ladder_rows(segs, t0, notes, seg_notes))


def part_json(r):
    return {k: v for k, v in r.items() if not k.startswith("_")}


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    info, _ = t.read_machine(os.path.join(rawdir, "machine-server.txt"), ("kernel", "hz"))
    hz = info.int("hz", 1, 100000)
    const = delack_constants(hz)
    sysctls = read_sysctls(rawdir)
    thresh = sysctls["net.ipv4.tcp_pingpong_thresh"]
    wire = tw.read_wire(rawdir)
    runs = [one_part(rawdir, name, const) for name, _ in PARTS
            if name not in OPTIONAL or thresh is not None]
    by = {r["part"]: r for r in runs}
    lines = [f"{NAME}: a request in two small write()s, the reply after both; Nagle against "
             "the delayed ACK",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire)), "",
             f"HZ={hz} ({info.str('source', '?')}): TCP_DELACK_MIN = TCP_ATO_MIN = "
             f"{const['tcp_delack_min_jiffies']} jiffies = {const['tcp_delack_min_ms']:g} ms; "
             f"one jiffy = {const['jiffy_ms']:g} ms",
             "server sysctls: " + "  ".join(f"{k.rsplit('.', 1)[-1]}={'absent' if v is None else v}"
                                            for k, v in sysctls.items()),
             f"pingpong threshold: {'net.ipv4.tcp_pingpong_thresh=' + thresh if thresh is not None else 'no tcp_pingpong_thresh sysctl on this kernel (a constant, TCP_PINGPONG_THRESH)'}",
             "", "side by side (c/s: client/server; >=timer: requests that took at least "
             f"{const['tcp_delack_min_ms'] - const['jiffy_ms']:g} ms):"]
    lines += table_lines(runs) + [""]
    titles = dict(PARTS)
    for r in runs:
        lines += part_lines(r, titles[r["part"]], const) + [""]
    if thresh is None:
        lines += ["== pingpong3: not run (no tcp_pingpong_thresh sysctl on this kernel)", ""]
    rows = []
    for name, a, b in LADDER:
        rows += ladder_part(by[name], a, b, const)
    lines += ["ladder (the client's end of the veth; t_ms from each block's first request):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    lines += [""] + pkt.capture_notes(by["baseline"]["_cap"],
                                      f"raw/{NAME}/baseline-capture.txt, the client's end")
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "result": "ok", "errno": None, "elapsed_s": None,
           # the counters are each part's (parts.PART.counters): no one set is the unit's
           "counters": None, "constants": const, "sysctls": t.sysctls_json(sysctls),
           "parts": {r["part"]: part_json(r) for r in runs}, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
