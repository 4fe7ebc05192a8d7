#!/usr/bin/python3
"""p09-pools report: a kept (pooled) connection after an idle time, from two units.
p09-stale-reuse: the server closed the idle connection first; the client reuses it (part reuse:
its socket in CLOSE-WAIT with the FIN unread; part finlost: the FIN lost, the socket still
ESTABLISHED) or checks it first (part check: recv MSG_PEEK|MSG_DONTWAIT, poll POLLRDHUP, then a
new connection).  p09-keepalive: a middlebox forgot the idle flow; SO_KEEPALIVE's probes on the
wire against IDLE + k*INTVL, and the error the blocked read finally gets.  Standard library
only."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p09-pools"
STALE, KA = "p09-stale-reuse", "p09-keepalive"
UNITS = ((STALE, "stale reuse: the server's idle timeout closed the connection first"),
         (KA, "keepalive: a middlebox forgot the idle connection"))
PARTS = (("reuse", "reused in CLOSE-WAIT, the server's FIN unread"),
         ("finlost", "reused with the server's FIN lost on the way (still ESTABLISHED)"),
         ("check", "checked before reuse (MSG_PEEK, POLLRDHUP), then a new connection"))
STALE_C = ("TcpActiveOpens", "TcpEstabResets", "TcpOutRsts", "TcpInSegs", "TcpOutSegs")
STALE_S = ("TcpPassiveOpens", "TcpOutRsts", "TcpExtTCPAbortOnData", "TcpInSegs", "TcpOutSegs")
KA_C = ("TcpEstabResets", "TcpOutRsts", "TcpExtTCPKeepAlive", "TcpExtTCPAbortOnTimeout",
        "TcpOutSegs", "TcpInSegs")
KA_S = ("TcpInSegs", "TcpOutSegs", "TcpExtTCPKeepAlive")
CALLS = ("connect", "keepalive", "write", "read", "hold", "idle", "peek", "rdhup", "close")
# kernel/time/timer.c's wheel (LVL_BITS 6, LVL_CLK_SHIFT 3): (first jiffy count past the
# level, its granularity in jiffies); how late a keepalive timer may fire
WHEEL = ((63, 1), (504, 8), (4032, 64), (32256, 512), (258048, 4096))
SLACK_MS = 10       # softirq and scheduling, beyond the wheel's granularity and two jiffies


def read_calls(path):
    """pool_client's or pool_server's lines → [{"call", fields..., "t_ns"}] in order; the
    client must have ended done (its exit line)."""
    out = []
    for line in t.read_lines(path):
        w = line.split(" ", 1)
        d = t.Fields(path, t.kv(line))
        out.append({"call": w[0], "f": d})
    if not out or out[-1]["call"] != "exit":
        raise t.RawError(f"{path}: no exit line last: the program did not finish")
    if out[-1]["f"].str("reason") != "done":
        raise t.RawError(f"{path}: it ended with reason={out[-1]['f'].str('reason')}, not done")
    return out


def call(calls, name, **match):
    """The first line of that call whose fields equal match, or None."""
    for c in calls:
        if c["call"] == name and all(c["f"].get(k) == str(v) for k, v in match.items()):
            return c["f"]
    return None


def need(calls, path, name, **match):
    c = call(calls, name, **match)
    if c is None:
        raise t.RawError(f"{path}: no {name} line " + " ".join(f"{k}={v}" for k, v in match.items()))
    return c


def result_text(f):
    """ret and errno as the reader wants them: "ret=100", "ret=-1 ECONNRESET"."""
    e = f.str("errno")
    return f"ret={f.str('ret')}" + ("" if e == "none" else f" {e}")


def state_before(events, t_ns, start_ns):
    """The last sockwatch event of a socket at or before t_ns (the watcher's view when the pool
    reused it), or None."""
    last = None
    for e in events:
        if start_ns + e["t_s"] * 1e9 <= t_ns:
            last = e
    return last


def capture_of(rawdir, prefix):
    cap = pkt.read_capture(os.path.join(rawdir, f"{prefix}capture.txt"))
    capj = pkt.capture_json(cap)
    if capj["dropped"] or capj["ifdropped"]:
        raise t.RawError(f"{cap['path']}: libpcap dropped packets: the capture is incomplete")
    return cap, capj, [p for p in cap["packets"] if p["kind"] == "tcp"]


def watch(rawdir, name, start_ns):
    path = os.path.join(rawdir, name)
    raw = t.read_sockwatch(path)
    return raw, [t.sockwatch_event(e, start_ns) for e in raw]


def connect_start(f):
    """When connect() was called: its line's t_ns is when it returned, us= how long it took."""
    return f.int("t_ns") - round(f.float("us", 0, 1e9) * 1000)


def side_notes(events, start_ns, side):
    """sockwatch's events of one side as ladder notes (t_ns, text)."""
    return [(start_ns + round(e["t_s"] * 1e9), f"{side} sockwatch: {e['event']} {e['state']}")
            for e in events]


def call_note(c, start):
    f = c["f"]
    words = [f"{k}={f[k]}" for k in ("i", "n", "ret", "errno", "bytes", "revents", "us")
             if k in f and not (k == "errno" and f[k] == "none")]
    return (f.int("t_ns"), " ".join([f"client: {c['call']}"] + words))


# ---- p09-stale-reuse ------------------------------------------------------------------------

def stale_part(rawdir, name, what):
    cpath = os.path.join(rawdir, f"{name}-client.txt")
    calls = read_calls(cpath)
    conn1 = need(calls, cpath, "connect", i=1)
    start = connect_start(conn1)
    idle = need(calls, cpath, "idle")
    cap, capj, segs = capture_of(rawdir, f"{name}-")
    sw_raw, events = watch(rawdir, f"{name}-sockwatch.txt", start)
    ssw_raw, sevents = watch(rawdir, f"{name}-server-sockwatch.txt", start)
    cl, sv = tw.read_both_counters(rawdir, f"{name}-", STALE_C, STALE_S)
    conn1_local = conn1.str("local")
    # the watchers' view of connection 1 when the pool reused it
    mine = [e for e, r in zip(events, sw_raw) if r.str("local") == conn1_local]
    theirs = [e for e, r in zip(sevents, ssw_raw) if r.str("peer") == conn1_local]
    cbef = state_before(mine, idle.int("t_ns"), start)
    sbef = state_before(theirs, idle.int("t_ns"), start)
    rq = next((r.int("rq") for e, r in zip(events, sw_raw)
               if e is cbef), None) if cbef else None
    fins = [p for p in segs if p["dir"] == "s>c" and "F" in p["flags"] and p["dst"] == conn1_local]
    rsts = [p for p in segs if p["dir"] == "s>c" and "R" in p["flags"]]
    p = {"name": name, "what": what, "client": conn1_local,
         "client_state_before": cbef["state"] if cbef else None,
         "client_rq_before": rq,
         "server_state_before": sbef["state"] if sbef else None,
         "idle_ms": idle.float("ms", 0, 1e7),
         "server_fins": len(fins), "server_rsts": len(rsts),
         "rst_ms": [pkt.ms(x["t_ns"], start) for x in rsts],
         "calls": [{"call": c["call"], **{k: v for k, v in c["f"].items()}}
                   for c in calls if c["call"] in CALLS],
         "counters_client": cl, "counters_server": sv, "capture": capj,
         "packets": [tw.packet_json(x, start) for x in segs]}
    if name == "check":
        peek = need(calls, cpath, "peek", i=1)
        rd = need(calls, cpath, "rdhup", i=1)
        c2 = call(calls, "connect", i=2)
        p.update(peek_ret=peek.int("ret", -1), peek_errno=peek.str("errno"),
                 peek_us=peek.float("us", 0, 1e9), rdhup_revents=rd.str("revents"),
                 rdhup_us=rd.float("us", 0, 1e9),
                 reconnect_us=None if c2 is None else c2.float("us", 0, 1e9),
                 new_conn_reply=None if call(calls, "read", i=2, n=1) is None else
                 call(calls, "read", i=2, n=1).int("bytes"))
    else:
        w2, r2, w3 = (need(calls, cpath, "write", i=1, n=2), need(calls, cpath, "read", i=1, n=2),
                      need(calls, cpath, "write", i=1, n=3))
        p.update(write2_ret=w2.int("ret", -1), write2_errno=w2.str("errno"),
                 read2_ret=r2.int("ret", -1), read2_errno=r2.str("errno"),
                 read2_state=r2.str("state"),
                 write3_ret=w3.int("ret", -1), write3_errno=w3.str("errno"))
    notes = [call_note(c, start) for c in calls if c["call"] in CALLS]
    p["_at"] = {"start_ns": start, "raw": segs,
                "notes": notes + side_notes(mine, start, "client") +
                side_notes(theirs, start, "server")}
    return p


def stale_lines(p):
    out = [f"== {p['name']}: {p['what']}"]
    if p["client_state_before"]:
        rq = "" if p["client_rq_before"] is None else f", rq={p['client_rq_before']}"
        out.append(f"before reuse: client socket {p['client_state_before']}{rq} (sockwatch), "
                   f"server socket {p['server_state_before']}; idle {p['idle_ms']:.1f} ms")
    if p["name"] == "check":
        out.append(f"check: recv(MSG_PEEK|MSG_DONTWAIT) ret={p['peek_ret']} "
                   f"errno={p['peek_errno']} in {p['peek_us']:.1f} us; poll(POLLRDHUP) "
                   f"revents={p['rdhup_revents']} in {p['rdhup_us']:.1f} us")
        if p["reconnect_us"] is not None:
            out.append(f"new connection: connect() {p['reconnect_us']:.1f} us (a handshake), "
                       f"reply {p['new_conn_reply']} bytes")
    else:
        out.append(f"reuse: write ret={p['write2_ret']} errno={p['write2_errno']}; read "
                   f"ret={p['read2_ret']} errno={p['read2_errno']} (socket {p['read2_state']}); "
                   f"second write ret={p['write3_ret']} errno={p['write3_errno']}")
    out.append(f"server FINs seen on veth-c: {p['server_fins']}; server RSTs: {p['server_rsts']}"
               + (" at " + ", ".join(f"{x:.3f}" for x in p["rst_ms"]) + " ms" if p["rst_ms"]
                  else ""))
    c, s = p["counters_client"], p["counters_server"]
    if p["server_rsts"]:
        aod, rst = tw.delta(s, "TcpExtTCPAbortOnData"), tw.delta(s, "TcpOutRsts")
        out.append(f"server TcpOutRsts {rst:+d}, TcpExtTCPAbortOnData {aod:+d}: "
                   + ("a full socket answered the data with a RST (tcp_rcv_state_process())"
                      if aod else "not a full socket's abort: the FIN-WAIT-2 timewait socket "
                      "answered the data (tcp_timewait_state_process(): TCP_TW_RST)")
                   + f"; client TcpEstabResets {tw.delta(c, 'TcpEstabResets'):+d}")
    return out + calls_lines(p, "its first connect() call", STALE_C, STALE_S)


def calls_lines(p, since, client, server):
    """The end of a part's text: the client's calls (t_ms from since), its packets on veth-c
    and the deltas of the counters client and server, each side in its own namespace."""
    out = ["", f"the client's calls (t_ms from {since}):"]
    start = p["_at"]["start_ns"]
    for t_ns, text in p["_at"]["notes"]:
        if not text.startswith("client: "):
            continue
        out.append(f"  {pkt.ms(t_ns, start):>9.3f}  {text[len('client: '):]}")
    out += ["", "packets on veth-c:"] + tw.packet_lines(p)
    out += ["", "counter deltas, each side in its own namespace:"]
    out += tw.counter_lines(p["counters_client"], p["counters_server"],
                            sorted(set(client) | set(server)))
    return out + [""]


def stale(rawdir):
    parts = [stale_part(rawdir, n, w) for n, w in PARTS]
    ss = t.read_ss_sockets(os.path.join(rawdir, "reuse-ss.txt"))
    return {"parts": parts, "ss": ss, "params": t.read_kv(os.path.join(rawdir, "params.txt"))}


# ---- p09-keepalive ---------------------------------------------------------------------------

def wheel_gran_ms(timeout_ms, hz):
    j = -(-timeout_ms * hz // 1000)
    return next((g for top, g in WHEEL if j < top), WHEEL[-1][1]) * 1000 / hz


def window(expected_ms, hz, first=False):
    """When a keepalive timer of expected_ms may fire: a jiffy early (armed mid-jiffy) to the
    wheel's granularity, two jiffies and SLACK_MS late.  The first probe: two jiffies more, as
    the timer armed by SO_KEEPALIVE (before the last segment came) finds IDLE not yet passed
    since it and re-arms itself for the rest (tcp_keepalive_timer())."""
    jiffy = 1000 / hz
    late = wheel_gran_ms(expected_ms, hz) + (4 if first else 2) * jiffy + SLACK_MS
    return round(expected_ms - jiffy, 3), round(expected_ms + late, 3)


def keepalive(rawdir):
    par = t.read_kv(os.path.join(rawdir, "params.txt"))
    idle_s, intvl_s, cnt = (par.int("keepidle", 1, 32767), par.int("keepintvl", 1, 32767),
                            par.int("keepcnt", 1, 127))
    hz = t.read_kv(os.path.join(rawdir, "machine.txt")).int("hz", 1, 100000)
    cpath = os.path.join(rawdir, "client.txt")
    calls = read_calls(cpath)
    conn = need(calls, cpath, "connect", i=1)
    start = connect_start(conn)
    ka = need(calls, cpath, "keepalive")
    final = need(calls, cpath, "read", i=1, n=2)
    cap, capj, segs = capture_of(rawdir, "")
    local = conn.str("local")
    segs = [p for p in segs if local in (p["src"], p["dst"])]
    sent = [p for p in segs if p["dir"] == "c>s"]
    snd_nxt = max(p["seq"] + p["len"] + (1 if "S" in p["flags"] or "F" in p["flags"] else 0)
                  for p in sent)
    # tcp_write_wakeup() with nothing to send: tcp_xmit_probe_skb(), seq snd_una - 1, no data
    probes = [p for p in sent if p["flags"] == "A" and p["len"] == 0 and p["seq"] == snd_nxt - 1]
    rsts = [p for p in sent if "R" in p["flags"]]
    heard = [p for p in segs if p["dir"] == "s>c"]
    if not heard:
        raise t.RawError(f"{cap['path']}: no segment from the server")
    last_rx = heard[-1]["t_ns"]
    marks = [x["t_ns"] for x in probes] + [x["t_ns"] for x in rsts[:1]]
    steps = []
    prev = last_rx
    for k, m in enumerate(marks):
        exp = (idle_s if k == 0 else intvl_s) * 1000
        lo, hi = window(exp, hz, first=k == 0)
        gap = round((m - prev) / 1e6, 3)
        steps.append({"what": "reset" if k == len(probes) else f"probe {k + 1}",
                      "t_ms": pkt.ms(m, start), "after_last_rx_ms": round((m - last_rx) / 1e6, 3),
                      "expected_ms": idle_s * 1000 + k * intvl_s * 1000,
                      "gap_ms": gap, "gap_expected_ms": exp, "gap_window_ms": [lo, hi],
                      "in_window": lo <= gap <= hi})
        prev = m
    raw_ev, events = watch(rawdir, "sockwatch.txt", start)
    timers = [{"t_ms": round(e["t_s"] * 1e3, 3), "timer": e["timer"],
               "expires_ms": e["expires_ms"], "probes": r.int("probes", default=None)}
              for e, r in zip(events, raw_ev)]
    cl, sv = tw.read_both_counters(rawdir, "", KA_C, KA_S)
    ss = t.read_ss_sockets(os.path.join(rawdir, "ss.txt"))
    return {"keepidle_s": idle_s, "keepintvl_s": intvl_s, "keepcnt": cnt, "hz": hz,
            "set": {"idle_s": ka.int("idle_s"), "intvl_s": ka.int("intvl_s"), "cnt": ka.int("cnt")},
            "client": local, "probes": len(probes), "resets_sent": len(rsts), "schedule": steps,
            "all_in_window": all(s["in_window"] for s in steps) and len(probes) == cnt,
            "final_read": {"ret": final.int("ret", -1), "errno": final.str("errno"),
                           "state": final.str("state"),
                           "after_last_rx_ms": round((final.int("t_ns") - last_rx) / 1e6, 3)},
            "keepalive_timer": timers, "ss": ss,
            "counters_client": cl, "counters_server": sv, "capture": capj,
            "packets": [tw.packet_json(x, start) for x in segs],
            "_at": {"start_ns": start, "raw": segs,
                    "notes": [call_note(c, start) for c in calls if c["call"] in CALLS] +
                    side_notes(events, start, "client")}}


def ka_lines(k):
    out = [f"== keepalive: SO_KEEPALIVE, TCP_KEEPIDLE {k['set']['idle_s']} s, TCP_KEEPINTVL "
           f"{k['set']['intvl_s']} s, TCP_KEEPCNT {k['set']['cnt']} (read back); then nft on the "
           "server's input drops the idle flow (nft-server.txt)",
           f"schedule from the last segment the client received (HZ={k['hz']}; window: a jiffy "
           f"early to the timer wheel's granularity + 2 jiffies (the first: 4) + {SLACK_MS} ms "
           "late):",
           f"  {'what':<8} {'t_ms':>10} {'after rx':>10} {'expected':>9} {'gap':>9} "
           f"{'window':>17}"]
    for s in k["schedule"]:
        w = f"{s['gap_window_ms'][0]:.0f}..{s['gap_window_ms'][1]:.0f}"
        out.append(f"  {s['what']:<8} {s['t_ms']:>10.3f} {s['after_last_rx_ms']:>10.3f} "
                   f"{s['expected_ms']:>9} {s['gap_ms']:>9.3f} {w:>17}"
                   + ("" if s["in_window"] else "  OUT OF WINDOW"))
    f = k["final_read"]
    out += [f"probes on the wire: {k['probes']} (TCP_KEEPCNT {k['keepcnt']}), then "
            f"{k['resets_sent']} RST from the client",
            f"the blocked read: ret={f['ret']} errno={f['errno']} (socket {f['state']}), "
            f"{f['after_last_rx_ms']:.3f} ms after the last segment received", "",
            "sockwatch, the client's keepalive timer:"]
    for e in k["keepalive_timer"]:
        out.append(f"  {e['t_ms']:>9.3f}  timer={e['timer']} expires_ms={e['expires_ms']} "
                   f"probes={e['probes']}")
    if k["ss"]:
        out.append("ss -tnoe during the probes: " + "; ".join(
            f"{s['local']} timer:({s['timer']})" for s in k["ss"]))
    return out + calls_lines(k, "connect()", KA_C, KA_S)


def rows_of(name, part):
    at = part["_at"]
    calls = [n for n in at["notes"] if n[1].startswith("client: ")]
    return [{"sep": name}] + pkt.ladder_rows(at["raw"], at["start_ns"],
                                             [n for n in at["notes"] if n not in calls] + calls)


def public(part):
    return {k: v for k, v in part.items() if not k.startswith("_")}


def build(rawroot, outdir):
    runs, partial = t.group_runs(rawroot, NAME, dict(UNITS),
                                 lambda rd, unit: stale(rd) if unit == STALE else keepalive(rd))
    first = os.path.join(rawroot, next(iter(runs)))
    kernel = t.kernel_release(first)
    lines = [f"{NAME}: a kept connection reused after an idle time",
             t.header(kernel, t.collected_at(first), tw.wire_where(first)), ""]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(first),
           "load_average": None}
    rows = []
    for unit, title in UNITS:
        if unit in partial:
            lines += [f"# {title}: not reported: {partial[unit]} (partial raw output in "
                      f"raw/{unit}/)", ""]
            continue
        if unit not in runs:
            lines += [f"# {title}: not run (./run.sh {unit})", ""]
            continue
        lines += [f"# {unit}: {title}", ""]
        r = runs[unit]
        if unit == STALE:
            for p in r["parts"]:
                lines += stale_lines(p)
                rows += rows_of(p["name"], p)
            if r["ss"]:
                lines += ["ss -tnoe of the reuse part's socket before reuse: " + "; ".join(
                    s["line"] for s in r["ss"]), ""]
            obj[STALE] = {"parts": {p["name"]: public(p) for p in r["parts"]}, "ss": r["ss"],
                          "idle_timeout_ms": r["params"].int("idle_ms", 1, 600000)}
        else:
            lines += ka_lines(r)
            rows += rows_of("keepalive", r)
            obj[KA] = public(r)
    # the top-level keys every .json has describe the first part that ran (docs/output-format.md):
    # its client's counters; no single result, errno or time stands for the report
    first = runs[STALE]["parts"][0] if STALE in runs else runs[KA]
    obj.update(counters=first["counters_client"], result=None, errno=None, elapsed_s=None)
    tw.write_with_ladder(outdir, NAME, lines + tw.ladder_lines(rows), obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
