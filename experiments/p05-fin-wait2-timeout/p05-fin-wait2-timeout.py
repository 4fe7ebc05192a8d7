#!/usr/bin/python3
"""p05-fin-wait2-timeout report: how long an orphaned FIN-WAIT-2 socket lives.  Per part
(sysctl, linger2, floor, abort, abort-held): TCP_LINGER2 as set and read back, what
tcp_fin_time() gives from it, tcp_fin_timeout and the RTO sockwatch saw, the client's FIN and
the server's ACK of it (capture), the FIN-WAIT-2 socket as sockwatch saw it (timer kind,
expires_ms, a timewait socket or a full one) and when it went, against the timer and the timer
wheel's granularity; for linger2 -1 the RST that replaces the wait; both sides' counters.
Every number from raw/."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t
import tcplab_close as tc
import tcplab_pkt as pkt
import tcplab_wire as tw

NAME = "p05-fin-wait2-timeout"
PARTS = ("sysctl", "linger2", "floor", "abort", "abort-held")
TITLES = {
    "sysctl": "TCP_LINGER2 0: the namespace's tcp_fin_timeout",
    "linger2": "TCP_LINGER2 longer than tcp_fin_timeout: the socket's value wins",
    "floor": "TCP_LINGER2 1 s under a route with rto_min: tcp_fin_time()'s 3.5 RTO floor",
    "abort": "TCP_LINGER2 200 (clamped), then -1, close(): the ACK of the FIN answered with a RST",
    "abort-held": "TCP_LINGER2 -1, shutdown(SHUT_WR), close() in FIN-WAIT-2: a RST",
}
C_COUNTERS = ("TcpExtTW", "TcpExtTWKilled", "TcpExtTCPAbortOnData", "TcpExtTCPAbortOnLinger",
              "TcpExtTCPAbortOnClose", "TcpOutRsts")
S_COUNTERS = ("TcpEstabResets", "TcpExtTCPAbortOnData")


def title(r):
    """The part's title; linger2's says how the socket's value (the knob linger2) stands to
    tcp_fin_timeout (the knob fin_timeout), as the run recorded them."""
    if r["part"] != "linger2" or r["linger2"] > r["fin_s"]:
        return TITLES[r["part"]]
    if r["linger2"] < r["fin_s"]:
        return "TCP_LINGER2 shorter than tcp_fin_timeout: the socket's value wins"
    return "TCP_LINGER2 equal to tcp_fin_timeout: the socket's value, the same"


def one_part(rawdir, name, hz, fin_s):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    cl = tc.read_peer(f("client.txt"))
    srv = tc.read_peer(f("server.txt"))
    c = tc.client_of(cl, f("client.txt"))
    start, local = c.int("t_ns"), c.str("local")
    tc.step(cl, "linger2:", f("client.txt"))
    sets = [(t.num(x.str("op").split(":", 1)[1], f"{f('client.txt')}: linger2", -1, 86400),
             x.int("value", -1)) for x in cl["steps"] if x.str("op").startswith("linger2:")]
    asked, readback = sets[-1]            # the last one set is the one close() runs with
    cap, segs, fin, ack = tc.client_fin(f("capture.txt"), local)
    evs = tc.events(f("sockwatch.txt"), start, local=local)
    if not evs or evs[-1]["event"] != "gone":
        raise t.RawError(f"{f('sockwatch.txt')}: the client's socket was not seen to go")
    full = [e for e in evs if e["rto_ms"] is not None]
    rto = full[-1]["rto_ms"] if full else None
    abort = asked < 0
    exp = None if abort else tc.fin_time_ms(asked, fin_s, rto, hz)
    fw2 = tc.fin_wait2(evs, hz, None if exp is None else exp["ms"],
                       None if ack is None else ack["t_ns"], start)
    if exp is not None and exp["floored"] and fw2 is not None and "armed_ms" in fw2:
        # the floor is 3.5 x the RTO at the ACK, which that ACK's RTT sample may have moved
        # from the one sockwatch saw: the window is the armed value's
        lo, hi = tc.window_ms(fw2["armed_ms"], hz)
        fw2.update(lo_ms=lo, hi_ms=hi, within=lo <= fw2.get("lived_ms", -1) <= hi,
                   window_of="armed")
    rsts = [p for p in segs if p["dir"] == "c>s" and "R" in p["flags"]]
    sevs = tc.events(f("server-sockwatch.txt"), start, peer=local)
    after = [x for x in tc.snapshot(f("server-after.txt")) if x["peer"] == local]
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", C_COUNTERS, S_COUNTERS)
    close = tc.step(cl, "close", f("client.txt"))
    # the RST of abort-held leaves inside close(): the step before it ends where close() begins
    prior = [x for x in cl["steps"] if x.int("n", -1) == close.int("n", -1) - 1]
    if not prior:
        raise t.RawError(f"{f('client.txt')}: no step before `close`")
    return {"part": name, "hz": hz, "fin_s": fin_s, "port": c.str("peer").rsplit(":", 1)[1], "local": local,
            "start_ns": start, "linger2": asked, "linger2_readback": readback,
            "linger2_sets": sets,
            "close_ms": round((close.int("t_ns") - start) / 1e6, 3), "rto_ms": rto,
            "close_from_ms": round((prior[-1].int("t_ns") - start) / 1e6, 3),
            "expected": exp, "fin": fin, "ack": ack, "fin_wait2": fw2, "rsts": rsts,
            "events": evs, "server_events": sevs, "server_after": after, "counters": cc,
            "server_counters": sc, "capture": cap, "segs": segs, "drain": tc.step(srv, "drain", f("server.txt"))}


def ms(r, ns):
    return (ns - r["start_ns"]) / 1e6


def part_lines(r):
    lines = [f"== {r['part']}: {title(r)} (port {r['port']})",
             "TCP_LINGER2: " + "; then ".join(
                 f"setsockopt {a}, getsockopt {b}"
                 + (" (0 reads back tcp_fin_timeout)" if a == 0 else
                    f" (clamped at TCP_FIN_TIMEOUT_MAX {tc.TCP_FIN_TIMEOUT_MAX_S} s)"
                    if a > tc.TCP_FIN_TIMEOUT_MAX_S else "") for a, b in r["linger2_sets"]),
             f"close() called after {r['close_from_ms']:.3f} ms, returned at {r['close_ms']:.3f} ms;"
             f" the FIN left at {ms(r, r['fin']['t_ns']):.3f} ms"
             + ("" if r["ack"] is None else
                f", the server's ACK of it came at {ms(r, r['ack']['t_ns']):.3f} ms")]
    e = r["expected"]
    if e is not None:
        fl = ("3.5 RTO not known (no RTO sampled)" if e["floor_ms"] is None else
              f"3.5 x RTO {r['rto_ms']} ms = {e['floor_ms']:g} ms")
        lines.append(f"tcp_fin_time() = max({'linger2' if r['linger2'] > 0 else 'tcp_fin_timeout'}"
                     f" {e['base_ms']:g} ms, {fl}) = {e['ms']:g} ms"
                     + (": the floor wins" if e["floored"] else ""))
    lines += ["", "client socket (sockwatch; t_ms from connect()'s return):"]
    lines += tc.event_lines(r["events"])
    w = r["fin_wait2"]
    if w is None:
        closed = next((e for e in r["events"] if e["state"] == t.CLOSED), None)
        lines.append("  no FIN-WAIT-2: the socket went from FIN-WAIT-1 straight to gone"
                     if closed is None else
                     "  no FIN-WAIT-2: the socket went from FIN-WAIT-1 to TCP_CLOSE (seen at "
                     f"{closed['t_s'] * 1e3:.3f} ms), then gone")
    else:
        lines.append(f"  FIN-WAIT-2 first seen at {w['first_ms']:.3f} ms: {w['kind']}, "
                     f"timer={w['timer']} expires_ms={w['expires_ms']}"
                     + ("" if "armed_ms" not in w else
                        f" (armed {w['armed_ms']:.3f} ms after the ACK)"))
        lines += [x for x in [tc.between_note(w)] if x]
        after = None if e is None or not e["floored"] or "armed_ms" not in w else \
            tc.rto_of_floor(w["armed_ms"], r["hz"])
        if after is not None:
            lines.append(f"  armed {w['armed_ms']:.3f} ms = 3.5 x RTO {after:g} ms: the ACK of the "
                         f"FIN was an RTT sample, and moved the RTO from {r['rto_ms']} ms first")
        if "lived_ms" in w and e is not None:
            lines.append(f"  gone at {w['gone_ms']:.3f} ms: {w['lived_ms']:.3f} ms after the ACK, "
                         + (f"against the armed {w['armed_ms']:.3f} ms"
                            if w.get("window_of") == "armed" else f"against {e['ms']:g} ms")
                         + f" (window {w['lo_ms']:.1f}..{w['hi_ms']:.1f}): "
                         + ("within" if w["within"] else "OUTSIDE"))
    for p in r["rsts"]:
        lines.append(f"  the client's RST at {ms(r, p['t_ns']):.3f} ms: {p['flags']} "
                     f"seq={p['seq']} (capture)")
    lines += ["", "server socket (sockwatch):"] + tc.event_lines(r["server_events"])
    lines.append("  after the client's socket went (sockwatch -1): " +
                 (", ".join(f"{x['state']} timer={x['timer']}" for x in r["server_after"])
                  or "no socket"))
    lines += ["", "segments (the client's end of the veth):"] + tc.seg_lines(r["segs"],
                                                                            r["start_ns"])
    lines += ["", "counters (each side read in its own namespace):"]
    lines += tw.counter_lines(r["counters"], r["server_counters"], C_COUNTERS + S_COUNTERS[:1])
    return lines


def part_rows(r):
    notes = [(r["start_ns"] + round(r["close_ms"] * 1e6), "client: close()")]
    notes += [(e["t_ns"], f"sockwatch: {e['event']} {t.shown_state(e['state'])} timer={e['timer']} "
               f"expires_ms={e['expires_ms']}") for e in r["events"]]
    return [{"sep": f"{r['part']}: {title(r)}"}] + \
        pkt.ladder_rows(r["segs"], r["start_ns"], notes)


def part_json(r):
    return {"port": int(r["port"]), "linger2": r["linger2"],
            "linger2_readback": r["linger2_readback"],
            "linger2_sets": [{"set": a, "read_back": b} for a, b in r["linger2_sets"]], "rto_ms": r["rto_ms"],
            "close_from_ms": r["close_from_ms"], "close_ms": r["close_ms"], "fin_ms": round(ms(r, r["fin"]["t_ns"]), 3),
            "ack_ms": None if r["ack"] is None else round(ms(r, r["ack"]["t_ns"]), 3),
            "fin_time": r["expected"], "fin_wait2": r["fin_wait2"],
            "rst_ms": [round(ms(r, p["t_ns"]), 3) for p in r["rsts"]],
            "events": r["events"], "server_events": r["server_events"],
            "server_after": r["server_after"], "counters": r["counters"], "server_counters": r["server_counters"],
            "segments": [tw.packet_json(p, r["start_ns"]) for p in r["segs"]],
            "capture": pkt.capture_json(r["capture"])}


def build(rawroot, outdir):
    u = tc.read_unit(rawroot, NAME)
    rawdir, kernel, hz, fin_s, wire = u["rawdir"], u["kernel"], u["hz"], u["fin_s"], u["wire"]
    sysctls, server = u["sysctls"], u["server"]
    default = t.read_sysctl_file(os.path.join(rawdir, "default-sysctls.txt"),
                                 ("net.ipv4.tcp_fin_timeout",))
    runs = [one_part(rawdir, p, hz, fin_s) for p in PARTS]
    routes = [x.rstrip() for x in t.read_lines(os.path.join(rawdir, "floor-routes.txt"))]
    watchers = [os.path.join(rawdir, f"{p}-{w}") for p in PARTS
                for w in ("sockwatch.txt", "server-sockwatch.txt")]
    watch_us = t.watchers_interval_us(watchers)
    lines = [f"{NAME}: how long an orphaned FIN-WAIT-2 socket lives, and TCP_LINGER2",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire),
                      t.sampling_text(watch_us, "sockwatch ")), "",
             f"HZ={hz} (machine.txt); TCP_TIMEWAIT_LEN {tc.TCP_TIMEWAIT_LEN_S} s; TCP_LINGER2 is "
             f"capped at TCP_FIN_TIMEOUT_MAX {tc.TCP_FIN_TIMEOUT_MAX_S} s; a timewait socket "
             f"of <= {tc.TW_KILL_S} s counts TWKilled, a longer one TW",
             "sysctls (the client's namespace: its default, then as the unit set it; the "
             "server's):", f"  {'sysctl':<30} {'default':<10} {'client':<10} server"]
    lines += [f"  {k:<30} {default.get(k) or 'absent':<10} {v or 'absent':<10} "
              f"{server.get(k) or 'absent'}" for k, v in sysctls.items()]
    lines += ["", "the floor part's route (client namespace, ip route show):"]
    lines += [f"  {x}" for x in routes] + [""]
    rows = []
    for r in runs:
        lines += part_lines(r) + [""]
        lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{r['part']}-capture.txt") + [""]
        rows += part_rows(r)
    lines += ["summary (ms after the ACK of the FIN; tcp_fin_time() from the RTO sockwatch saw "
              "before close(), armed = first sight + expires_ms):",
              f"  {'part':<11} {'linger2':>7} {'fin_time':>8} {'armed':>9} {'lived':>9} "
              f"{'timer':<9} {'RST':<4} counted"]
    for r in runs:
        w, e = r["fin_wait2"], r["expected"]
        timed = e is not None and w is not None
        moved = [k.replace("TcpExt", "") for k in C_COUNTERS if tc.counter(r["counters"], k)]
        lines.append(f"  {r['part']:<11} {r['linger2']:>7} "
                     f"{'-' if e is None else format(e['ms'], 'g'):>8} "
                     f"{format(w['armed_ms'], '.3f') if timed and 'armed_ms' in w else '-':>9} "
                     f"{format(w['lived_ms'], '.3f') if timed and 'lived_ms' in w else '-':>9} "
                     f"{'-' if w is None else w['timer']:<9} {'yes' if r['rsts'] else 'no':<4} "
                     f"{', '.join(moved) or '-'}")
    lines += ["", "ladder (the client's end of the veth; t_ms from each part's connect() return):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "result": "ok", "errno": None, "elapsed_s": None, "hz": hz,
           "sysctls": {k: t.sysctl_value(v) for k, v in sysctls.items()},
           "default_sysctls": {k: t.sysctl_value(v) for k, v in default.items()},
           "server_sysctls": {k: t.sysctl_value(v) for k, v in server.items()},
           "counters": runs[0]["counters"], "server_counters": runs[0]["server_counters"],
           "tcp_timewait_len_s": tc.TCP_TIMEWAIT_LEN_S, "sched_slack_ms": tc.SCHED_SLACK_MS,
           "sockwatch_interval_us": watch_us, "floor_routes": routes,
           "parts": {r["part"]: part_json(r) for r in runs}, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
