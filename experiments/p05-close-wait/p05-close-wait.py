#!/usr/bin/python3
"""p05-close-wait report: a server that reads EOF and never closes.  Two connections at once:
the orphan (the client close()d) and the held one (the client called shutdown(SHUT_WR) and
never close()).  For each: both sides' sockets as sockwatch saw them over time; for the orphan
the FIN-WAIT-2 socket's timer kind, expiry and end against tcp_fin_timeout (with the capture's
ACK of the FIN as the moment it was armed); then what was still there once the orphan was
gone: the two CLOSE-WAIT sockets with no timer and the held FIN-WAIT-2 (sockwatch -1, and
ss -tano as an independent reader), /proc/net/sockstat's tw, both sides' counters.  Every
number from raw/."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t
import tcplab_close as tc
import tcplab_pkt as pkt
import tcplab_wire as tw

NAME = "p05-close-wait"
CONNS = ("orphan", "held")
TITLES = {"orphan": "the client close()s at once: an orphan",
          "held": "the client shutdown(SHUT_WR)s and never close()s"}
CALLS = {"close": "close()", "shutdown-wr": "shutdown(SHUT_WR)"}
C_COUNTERS = ("TcpExtTW", "TcpExtTWKilled", "TcpExtTCPAbortOnLinger", "TcpExtTCPAbortOnData",
              "TcpEstabResets")
S_COUNTERS = ("TcpPassiveOpens", "TcpEstabResets", "TcpExtTCPAbortOnData")


def one_conn(rawdir, name, hz, fin_s):
    f = lambda s: os.path.join(rawdir, s)  # noqa: E731
    cl = tc.read_peer(f(f"{name}-client.txt"))
    srv = tc.read_peer(f(f"{name}-server.txt"))
    c = tc.client_of(cl, f(f"{name}-client.txt"))
    start, local = c.int("t_ns"), c.str("local")
    cap, segs, fin, ack = tc.client_fin(f(f"{name}-capture.txt"), local)
    evs = tc.events(f("sockwatch.txt"), start, local=local)
    sevs = tc.events(f("server-sockwatch.txt"), start, peer=local)
    if not evs or not sevs:
        raise t.RawError(f"{rawdir}: sockwatch never saw the {name} connection's sockets")
    full = [e for e in evs if e["rto_ms"] is not None]
    rto = full[-1]["rto_ms"] if full else None
    exp = tc.fin_time_ms(0, fin_s, rto, hz) if name == "orphan" else None
    fw2 = tc.fin_wait2(evs, hz, None if exp is None else exp["ms"],
                       None if ack is None else ack["t_ns"], start)
    if fw2 is None:
        raise t.RawError(f"{f('sockwatch.txt')}: no FIN-WAIT-2 line for {local}")
    drain = tc.step(srv, "drain", f(f"{name}-server.txt"))
    last = tc.step(cl, "close" if name == "orphan" else "shutdown-wr", f(f"{name}-client.txt"))
    return {"conn": name, "port": int(c.str("peer").rsplit(":", 1)[1]), "local": local,
            "start_ns": start, "closer_op": last.str("op"),
            "closer_ms": round((last.int("t_ns") - start) / 1e6, 3),
            "eof_ms": round((drain.int("t_ns") - start) / 1e6, 3), "drain_ret": drain.int("ret"),
            "rto_ms": rto, "expected": exp, "fin": fin, "ack": ack, "fin_wait2": fw2,
            "events": evs, "server_events": sevs, "capture": cap, "segs": segs}


def ms(r, ns):
    return (ns - r["start_ns"]) / 1e6


def still(snap, addr_key, addr):
    return [s for s in snap if s[addr_key] == addr]


def conn_lines(r, after, after_ns):
    w = r["fin_wait2"]
    lines = [f"== {r['conn']}: {TITLES[r['conn']]} (port {r['port']}, client {r['local']})",
             f"client: {CALLS[r['closer_op']]} returned at {r['closer_ms']:.3f} ms; its FIN left at "
             f"{ms(r, r['fin']['t_ns']):.3f} ms" + ("" if r["ack"] is None else
                                                  f", the server's ACK came at "
                                                  f"{ms(r, r['ack']['t_ns']):.3f} ms"),
             f"server: its recv() read EOF (ret={r['drain_ret']}) at {r['eof_ms']:.3f} ms and "
             "it holds the socket: no close()", "",
             "client socket (sockwatch; t_ms from connect()'s return):"]
    lines += tc.event_lines(r["events"])
    lines.append(f"  FIN-WAIT-2 first seen at {w['first_ms']:.3f} ms: {w['kind']} "
                 f"(info_len={w['info_len']}, inode={w['inode']}), timer={w['timer']} "
                 f"expires_ms={w['expires_ms']}")
    lines += [x for x in [tc.between_note(w)] if x]
    e = r["expected"]
    if e is not None:
        lines.append(f"  tcp_fin_time() = max(tcp_fin_timeout {e['base_ms']:g} ms, "
                     + ("3.5 RTO not known" if e["floor_ms"] is None else
                        f"3.5 x RTO {r['rto_ms']} ms = {e['floor_ms']:g} ms") + f") = {e['ms']:g} ms"
                     + ("" if "armed_ms" not in w else
                        f"; armed {w['armed_ms']:.3f} ms after the ACK (first sight + expires_ms)"))
        if "lived_ms" in w:
            lines.append(f"  gone at {w['gone_ms']:.3f} ms: {w['lived_ms']:.3f} ms after the ACK "
                         f"of its FIN, against {e['ms']:g} ms (window {w['lo_ms']:.1f}.."
                         f"{w['hi_ms']:.1f}): " + ("within" if w["within"] else "OUTSIDE"))
    else:
        c = still(after, "local", r["local"])
        lines.append(f"  still there {(after_ns - r['start_ns']) / 1e9:.3f} s after connect() "
                     "(the snapshot after the orphan went): "
                     + (", ".join(f"{s['state']} timer={s['timer']} inode={s['inode']}" for s in c)
                        or "no"))
    lines += ["", "server socket (sockwatch):"] + tc.event_lines(r["server_events"])
    lines += ["", "segments (the client's end of the veth):"]
    lines += tc.seg_lines(r["segs"], r["start_ns"])
    return lines


def ss_lines(rawdir, ports):
    out = []
    for when in ("start", "after"):
        for side in ("client", "server"):
            got = tc.read_ss(os.path.join(rawdir, f"{when}-ss-{side}.txt"), ports)
            if got is None:
                return ["ss: not recorded (no ss where this ran)"]
            out.append(f"  {when:<5} {side}:")
            out += [f"    {s['line']}" for s in got] or ["    (no socket of these ports)"]
    return ["ss -tano (an independent reader of the same sockets; start: both FIN-WAIT-2 seen, "
            "after: the orphan gone):"] + out


def build(rawroot, outdir):
    u = tc.read_unit(rawroot, NAME)
    rawdir, kernel, hz, fin_s, wire = u["rawdir"], u["kernel"], u["hz"], u["fin_s"], u["wire"]
    sysctls, server = u["sysctls"], u["server"]
    runs = {n: one_conn(rawdir, n, hz, fin_s) for n in CONNS}
    after_c = tc.snapshot(os.path.join(rawdir, "after-client-snap.txt"))
    after_s = tc.snapshot(os.path.join(rawdir, "after-server-snap.txt"))
    snap_ns = t.read_snapshot(os.path.join(rawdir, "after-server-snap.txt"))
    after_ns = snap_ns[0].int("t_ns") if snap_ns else None
    if after_ns is None:
        raise t.RawError(f"{rawdir}/after-server-snap.txt: no socket: the CLOSE-WAIT ones are gone")
    stock = {w: tc.read_sockstat(os.path.join(rawdir, f"{w}-sockstat.txt"))
             for w in ("start", "after")}
    cc, sc = tw.read_both_counters(rawdir, "", C_COUNTERS, S_COUNTERS)
    o, h = runs["orphan"], runs["held"]
    cw = [s for s in after_s if s["state"] == "CLOSE-WAIT"]
    cw_rows = []
    for r in (o, h):
        mine = still(after_s, "peer", r["local"])
        held_s = round((after_ns - (r["start_ns"] + round(r["eof_ms"] * 1e6))) / 1e9, 3)
        cw_rows.append({"conn": r["conn"], "state": mine[0]["state"] if mine else None,
                        "timer": mine[0]["timer"] if mine else None,
                        "expires_ms": mine[0]["expires_ms"] if mine else None,
                        "held_s": held_s})
    held_now = still(after_c, "local", h["local"])
    watch_us = t.watchers_interval_us([os.path.join(rawdir, w) for w in
                                       ("sockwatch.txt", "server-sockwatch.txt")])
    lines = [f"{NAME}: a server that never closes (CLOSE-WAIT) and the client's two FIN-WAIT-2s",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire),
                      t.sampling_text(watch_us, "sockwatch ")), "",
             f"HZ={hz} (machine.txt); TCP_TIMEWAIT_LEN {tc.TCP_TIMEWAIT_LEN_S} s; the sysctls "
             "each side read in its namespace:", f"  {'sysctl':<30} {'client':<10} server"]
    lines += [f"  {k:<30} {v or 'absent':<10} {server.get(k) or 'absent'}"
              for k, v in sysctls.items()] + [""]
    rows = []
    for r in (o, h):
        lines += conn_lines(r, after_c, after_ns) + [""]
        lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{r['conn']}-capture.txt") + [""]
        rows += [{"sep": f"{r['conn']}: {TITLES[r['conn']]}"}] + pkt.ladder_rows(
            r["segs"], r["start_ns"],
            [(e["t_ns"], f"client sockwatch: {e['event']} {e['state']} timer={e['timer']}")
             for e in r["events"]] +
            [(e["t_ns"], f"server sockwatch: {e['event']} {e['state']} timer={e['timer']}")
             for e in r["server_events"]])
    lines += [f"after the orphan was gone (sockwatch -1 of each side, "
              f"{(after_ns - o['start_ns']) / 1e9:.3f} s after the orphan's connect()):"]
    lines += [f"  client {s['state']:<11} {s['local']} -> {s['peer']} timer={s['timer']} "
              f"inode={s['inode']}" for s in after_c] or ["  client: no socket"]
    lines += [f"  server {s['state']:<11} {s['local']} <- {s['peer']} timer={s['timer']} "
              f"expires_ms={s['expires_ms']} rq={s['rq']} inode={s['inode']}" for s in after_s]
    for x in cw_rows:
        lines.append(f"  the {x['conn']} connection's server socket: {x['state'] or 'gone'}"
                     + ("" if x["state"] is None else
                        f", timer={x['timer']}, {x['held_s']:.3f} s after its EOF"))
    lines += ["", "/proc/net/sockstat in the client's namespace (tw is per namespace, orphan is "
              "the host's):"]
    lines += [f"  {w:<5} inuse={s.get('inuse')} orphan={s.get('orphan')} tw={s.get('tw')}"
              for w, s in stock.items()]
    lines += [""] + ss_lines(rawdir, (o["port"], h["port"])) + [""]
    lines += ["counters (each side read in its own namespace):"]
    lines += tw.counter_lines(cc, sc, C_COUNTERS[:4] + S_COUNTERS[:1])
    w = o["fin_wait2"]
    lines += ["", f"CLOSE-WAIT: {len(cw)} server socket(s) still there, timer=off, "
              f"{min(x['held_s'] for x in cw_rows):.3f} s after their EOF; the orphan's "
              f"FIN-WAIT-2 ({w['kind']}, timer={w['timer']}) went "
              + (f"{w['lived_ms'] / 1000:.3f} s after the ACK of its FIN (tcp_fin_timeout "
                 f"{fin_s} s)" if "lived_ms" in w else "(no ACK in the capture)")
              + f"; the held FIN-WAIT-2: {'still there' if held_now else 'gone'}", ""]
    lines += ["ladder (the client's end of the veth; t_ms from each connect() return):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)

    def conn_json(r):
        return {"port": r["port"], "closer_op": r["closer_op"], "closer_ms": r["closer_ms"],
                "eof_ms": r["eof_ms"], "rto_ms": r["rto_ms"], "fin_time": r["expected"],
                "fin_ms": round(ms(r, r["fin"]["t_ns"]), 3),
                "ack_ms": None if r["ack"] is None else round(ms(r, r["ack"]["t_ns"]), 3),
                "fin_wait2": r["fin_wait2"], "events": r["events"],
                "server_events": r["server_events"],
                "segments": [tw.packet_json(p, r["start_ns"]) for p in r["segs"]],
                "capture": pkt.capture_json(r["capture"])}
    ss = {f"{wh}_{side}": tc.read_ss(os.path.join(rawdir, f"{wh}-ss-{side}.txt"),
                                     (o["port"], h["port"]))
          for wh in ("start", "after") for side in ("client", "server")}
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "result": "ok", "errno": None, "elapsed_s": None, "hz": hz,
           "sysctls": {k: t.sysctl_value(v) for k, v in sysctls.items()},
           "server_sysctls": {k: t.sysctl_value(v) for k, v in server.items()},
           "counters": cc, "server_counters": sc, "sched_slack_ms": tc.SCHED_SLACK_MS,
           "sockwatch_interval_us": watch_us,
           "conns": {r["conn"]: conn_json(r) for r in (o, h)},
           "after": {"t_s_from_orphan": round((after_ns - o["start_ns"]) / 1e9, 6),
                     "client": after_c, "server": after_s, "close_wait": cw_rows,
                     "held_fin_wait2": held_now},
           "sockstat": stock, "ss": ss, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
