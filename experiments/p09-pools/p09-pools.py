#!/usr/bin/python3
"""p09-pools report: a kept (pooled) connection after an idle time, from two units.
p09-stale-reuse: the server closed the idle connection first; the client reuses it (part reuse:
its socket in CLOSE-WAIT with the FIN unread; part finlost: the FIN lost, the socket still
ESTABLISHED) or checks it first (part check: recv MSG_PEEK|MSG_DONTWAIT, poll POLLRDHUP, then a
new connection).  p09-keepalive: a middlebox forgot the idle flow; SO_KEEPALIVE's probes on the
wire against IDLE + k*INTVL, and the error the blocked read finally gets.  p09-pool-saves: what
the kept connection saves, N requests on N new connections against one (handshakes, segments,
TIME-WAIT sockets, ports, time), and slow start after idle on a kept connection
(tcp_slow_start_after_idle 1 and 0: tcp_info's cwnd, the first flight on the wire).  Standard
library only."""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p09-pools"
STALE, KA, SAVES = "p09-stale-reuse", "p09-keepalive", "p09-pool-saves"
CURL = "p09-curl-nginx"
UNITS = ((STALE, "stale reuse: the server's idle timeout closed the connection first"),
         (KA, "keepalive: a middlebox forgot the idle connection"),
         (SAVES, "what a pool saves: new connections against one kept connection"),
         (CURL, "a real pool against a real server: libcurl's connection cache, nginx's "
          "keepalive_timeout"))
PARTS = (("reuse", "reused in CLOSE-WAIT, the server's FIN unread"),
         ("finlost", "reused with the server's FIN lost on the way (still ESTABLISHED)"),
         ("check", "checked before reuse (MSG_PEEK, POLLRDHUP), then a new connection"))
STALE_C = ("TcpActiveOpens", "TcpEstabResets", "TcpOutRsts", "TcpInSegs", "TcpOutSegs")
STALE_S = ("TcpPassiveOpens", "TcpOutRsts", "TcpExtTCPAbortOnData", "TcpInSegs", "TcpOutSegs")
KA_C = ("TcpEstabResets", "TcpOutRsts", "TcpExtTCPKeepAlive", "TcpExtTCPAbortOnTimeout",
        "TcpOutSegs", "TcpInSegs")
KA_S = ("TcpInSegs", "TcpOutSegs", "TcpExtTCPKeepAlive")
# TcpExtTW too, but not required: a kernel before 5.18 counts a TIME-WAIT socket when its timer
# ends, 60 s on, so there it does not move within the part and is not listed
SAVE_C = ("TcpActiveOpens", "TcpOutSegs", "TcpInSegs", "TcpRetransSegs")
SAVE_S = ("TcpPassiveOpens", "TcpOutSegs", "TcpInSegs")
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


# ---- p09-pool-saves --------------------------------------------------------------------------

def syn_mss(segs, path):
    """The client's MSS as its segments carry it: the SYN's mss option, less the 12 bytes of
    the timestamp option when the SYN offers it (and the SYN-ACK answers with it)."""
    syn = next((p for p in segs if p["dir"] == "c>s" and p["flags"] == "S"), None)
    if syn is None:
        raise t.RawError(f"{path}: no SYN from the client")
    opts = syn["opts"].split(",")
    mss = next((int(o[4:]) for o in opts if o.startswith("mss:") and o[4:].isdigit()), None)
    if mss is None:
        raise t.RawError(f"{path}: the SYN has no mss option")
    synack = next((p for p in segs if p["dir"] == "s>c" and p["flags"] == "SA"), None)
    ts = "ts" in opts and synack is not None and "ts" in synack["opts"].split(",")
    return mss - 12 if ts else mss


def timewait_of(path):
    """sockwatch -1 -s time-wait's snapshot → the local addresses of the TIME-WAIT sockets."""
    out = []
    for line in t.read_lines(path):
        if not line.startswith("t_s="):
            continue
        f = t.Fields(path, t.kv(line))
        if f.str("state") != "TIME-WAIT":
            raise t.RawError(f"{path}: a {f.str('state')} socket in a TIME-WAIT listing")
        out.append(f.str("local"))
    return out


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def saves_part(rawdir, name, want):
    """Part new or kept: want requests, each timed by the client; the handshakes and segments
    on veth-c, the ports, the TIME-WAIT sockets left, both sides' counters."""
    cpath = os.path.join(rawdir, f"{name}-client.txt")
    calls = read_calls(cpath)
    conns = [c["f"] for c in calls if c["call"] == "connect"]
    if not conns or any(c.str("errno") != "none" for c in conns):
        raise t.RawError(f"{cpath}: a connect() failed or none was made")
    reqs = [c["f"] for c in calls if c["call"] == "request"]
    if len(reqs) != want:
        raise t.RawError(f"{cpath}: {len(reqs)} request lines, params.txt says {want}")
    start = connect_start(conns[0])
    cap, capj, segs = capture_of(rawdir, f"{name}-")
    us = [r.float("us", 0, 1e9) for r in reqs]
    ss = t.read_ss_sockets(os.path.join(rawdir, f"{name}-ss.txt"))
    dump = t.read_lines(os.path.join(rawdir, f"{name}-tcpdump-syns.txt"), optional=True)
    tw_local = timewait_of(os.path.join(rawdir, f"{name}-timewait.txt"))
    cl, sv = tw.read_both_counters(rawdir, f"{name}-", SAVE_C, SAVE_S)
    ports = [port_of(c.str("local")) for c in conns]
    p = {"name": name, "requests": want, "connections": len(conns), "local_ports": ports,
         "syns": sum(1 for x in segs if x["dir"] == "c>s" and x["flags"] == "S"),
         "synacks": sum(1 for x in segs if x["dir"] == "s>c" and x["flags"] == "SA"),
         "segments": len(segs), "segments_client": sum(1 for x in segs if x["dir"] == "c>s"),
         "segments_server": sum(1 for x in segs if x["dir"] == "s>c"),
         "timewait": len(tw_local), "timewait_ports": sorted(port_of(a) for a in tw_local),
         "ss_timewait": None if ss is None else len(ss),
         "tcpdump_syns": None if dump is None else sum(1 for x in dump if x.strip()),
         "request_us": us, "median_us": round(statistics.median(us), 1),
         "min_us": min(us), "max_us": max(us),
         "median_rest_us": round(statistics.median(us[1:]), 1) if len(us) > 1 else None,
         "connect_us": [c.float("us", 0, 1e9) for c in conns],
         "all_ms": round((reqs[-1].int("t_ns") - start) / 1e6, 3),
         "counters_client": cl, "counters_server": sv, "capture": capj}
    # the ladder: the first two connections (new), the first three requests (kept)
    if name == "new":
        conn_ids = sorted({x["conn"] for x in segs})[:2]
        shown = [x for x in segs if x["conn"] in conn_ids]
        mine = [c for c in calls if c["f"].get("i") in ("1", "2")]
    else:
        shown = [x for x in segs if x["t_ns"] <= reqs[min(2, len(reqs) - 1)].int("t_ns")]
        mine = [c for c in calls if c["call"] in CALLS + ("request",)
                and c["f"].int("t_ns") <= shown[-1]["t_ns"]] if shown else []
    notes = [call_note(c, start) for c in mine if c["call"] in CALLS + ("request",)]
    # which connection each segment is of, where two are on the wire at once
    seg_notes, newest = {}, None
    for k, x in enumerate(shown):
        newest = x["conn"] if x["flags"] == "S" else newest
        if name == "new" and ("S" in x["flags"] or "F" in x["flags"] or x["conn"] != newest):
            seg_notes[k] = f"connection {x['conn']}"
    p["_at"] = {"start_ns": start, "raw": shown, "notes": notes, "seg_notes": seg_notes}
    return p


def cc_of(calls, path, at):
    f = need(calls, path, "cc", at=at)
    return {"cc": f.str("cc"), "cwnd": f.int("cwnd", 1, 1 << 31),
            "ssthresh": f.int("ssthresh", 0, 1 << 31), "rto_us": f.int("rto_us", 1, 1 << 31),
            "srtt_us": f.int("srtt_us", 0, 1 << 31), "t_ns": f.int("t_ns")}


def idle_part(rawdir, name, hz, burst):
    """Part idle or idle-off: the cwnd (tcp_info) around the idle time, and the first flight
    after it on the wire: the client's data before the server's first ACK."""
    cpath = os.path.join(rawdir, f"{name}-client.txt")
    calls = read_calls(cpath)
    conn = need(calls, cpath, "connect", i=1)
    start = connect_start(conn)
    cc = {at: cc_of(calls, cpath, at) for at in ("before", "idle_end", "after")}
    idle = need(calls, cpath, "idle")
    sysctls = t.read_sysctl_file(os.path.join(rawdir, f"{name}-sysctls.txt"),
                                 ("net.ipv4.tcp_slow_start_after_idle",))
    ssai = t.sysctl_int(sysctls, "net.ipv4.tcp_slow_start_after_idle", cpath, 0, 1)
    cap, capj, segs = capture_of(rawdir, f"{name}-")
    mss = syn_mss(segs, cap["path"])
    data = [x for x in segs if x["dir"] == "c>s" and x["len"] > 0]
    t_idle = cc["idle_end"]["t_ns"]
    before = [x for x in data if x["t_ns"] <= t_idle]
    after = [x for x in data if x["t_ns"] > t_idle]
    if not before or not after:
        raise t.RawError(f"{cap['path']}: want data segments before and after the idle time")
    ack = next((x for x in segs if x["dir"] == "s>c" and x["t_ns"] > after[0]["t_ns"]), None)
    if ack is None:
        raise t.RawError(f"{cap['path']}: no segment from the server after the idle time")
    first = [x for x in after if x["t_ns"] < ack["t_ns"]]
    flight = sum(x["len"] for x in first)
    gap_ms = round((after[0]["t_ns"] - before[-1]["t_ns"]) / 1e6, 3)
    c0, rto_ms = cc["before"]["cwnd"], cc["before"]["rto_us"] // 1000
    # the gap in whole jiffies (lsndtime and tcp_jiffies32), either way of its fraction
    jiffy = 1000 / hz
    want = sorted({tw.restart_cwnd(c0, rto_ms, (gap_ms // jiffy + k) * jiffy) for k in (0, 1)})
    p = {"name": name, "slow_start_after_idle": ssai, "cc": cc["before"]["cc"],
         "burst": burst, "idle_ms": idle.float("ms", 0, 1e7), "mss": mss,
         "cwnd_before": c0, "cwnd_idle_end": cc["idle_end"]["cwnd"],
         "cwnd_after": cc["after"]["cwnd"], "rto_ms": rto_ms, "gap_ms": gap_ms,
         "first_flight_bytes": flight, "first_flight_segments": -(-flight // mss),
         "first_flight_packets": len(first), "restart_want": want if ssai else [c0],
         "counters_client": tw.read_both_counters(rawdir, f"{name}-", SAVE_C, SAVE_S)[0],
         "capture": capj}
    return p


def saves(rawdir):
    par = t.read_kv(os.path.join(rawdir, "params.txt"))
    n = par.int("requests", 1, 1000)
    hz = t.read_kv(os.path.join(rawdir, "machine.txt")).int("hz", 1, 100000)
    burst = par.int("burst", 1, 1 << 20)
    return {"requests": n, "idle_ms": par.int("idle_ms", 1, 600000),
            "parts": [saves_part(rawdir, "new", n), saves_part(rawdir, "kept", n),
                      idle_part(rawdir, "idle", hz, burst),
                      idle_part(rawdir, "idle-off", hz, burst)]}


def n_of(n, word):
    """"1 SYN", "20 SYNs"."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def us_lines(us, indent="    "):
    return [indent + " ".join(f"{x:.1f}" for x in us[i:i + 10]) for i in range(0, len(us), 10)]


def saves_lines(p):
    c, s = p["counters_client"], p["counters_server"]
    what = ("each on a new connection: connect, send, read the reply, close (the client first)"
            if p["name"] == "new" else "all on one kept connection, closed after the last reply")
    dump = ("" if p["tcpdump_syns"] is None else
            f"; tcpdump -r {p['name']}-capture.pcap counts {n_of(p['tcpdump_syns'], 'SYN')}")
    ss = ("" if p["ss_timewait"] is None else
          f"; ss -tan state time-wait: {p['ss_timewait']}")
    ports = sorted(set(p["local_ports"]))
    span = f"{ports[0]}" if len(ports) == 1 else f"{ports[0]}..{ports[-1]}"
    out = [f"== {p['name']}: {p['requests']} requests, {what}",
           f"handshakes: {n_of(p['syns'], 'SYN')} from the client on veth-c, "
           f"{n_of(p['synacks'], 'SYN-ACK')}"
           f"{dump}; TcpActiveOpens {tw.delta(c, 'TcpActiveOpens'):+d} (client), "
           f"TcpPassiveOpens {tw.delta(s, 'TcpPassiveOpens'):+d} (server)",
           f"segments on veth-c: {p['segments']} ({p['segments_client']} from the client, "
           f"{p['segments_server']} from the server); TcpOutSegs {tw.delta(c, 'TcpOutSegs'):+d} "
           f"(client), {tw.delta(s, 'TcpOutSegs'):+d} (server)",
           f"local ports: {len(ports)} ({span}) for {n_of(p['connections'], 'connection')}",
           f"TIME-WAIT sockets left on the client: {p['timewait']} (sockwatch, sock_diag){ss}; "
           + (f"TcpExtTW {tw.delta(c, 'TcpExtTW'):+d}" if "TcpExtTW" in c else
              "TcpExtTW not listed (it did not move)"),
           f"time per request (CLOCK_MONOTONIC in the client, from before "
           f"{'connect()' if p['name'] == 'new' else 'send()'} to the reply's last byte; "
           "measured on this machine, over the wire's veth):",
           f"  median {p['median_us']:.1f} us, min {p['min_us']:.1f}, max {p['max_us']:.1f}; "
           f"the first {p['request_us'][0]:.1f} us"
           + ("" if p["median_rest_us"] is None else
              f", the others' median {p['median_rest_us']:.1f} us")
           + f"; all {p['requests']} done {p['all_ms']:.3f} ms after the first connect()"
           + ("" if p["name"] != "new" else
              f"; connect() (the handshake) median {statistics.median(p['connect_us']):.1f} us"),
           "  each request (us):"] + us_lines(p["request_us"])
    return out + [""]


def idle_lines(p):
    out = [f"== {p['name']}: tcp_slow_start_after_idle={p['slow_start_after_idle']} in the "
           f"client's namespace, {p['cc']} (TCP_CONGESTION): {p['burst']} bytes, "
           f"{p['idle_ms']:.1f} ms idle, {p['burst']} bytes",
           f"cwnd (tcp_info): {p['cwnd_before']} after the first burst, {p['cwnd_idle_end']} at "
           f"the end of the idle time (the kernel restarts it only when it next sends), "
           f"{p['cwnd_after']} after the second burst; RTO {p['rto_ms']} ms",
           f"the first flight after the idle time (veth-c): {p['first_flight_segments']} "
           f"segments of {p['mss']} bytes ({p['first_flight_bytes']} bytes, "
           f"{n_of(p['first_flight_packets'], 'packet')}) before the server's first ACK; "
           f"{p['gap_ms']:.3f} ms after the last data sent before it"]
    if p["slow_start_after_idle"]:
        out.append(f"tcp_cwnd_restart() for cwnd {p['cwnd_before']}, RTO {p['rto_ms']} ms and "
                   f"that gap: cwnd {' or '.join(map(str, p['restart_want']))}")
    else:
        out.append(f"no restart (tcp_slow_start_after_idle=0): the cwnd stays "
                   f"{p['cwnd_before']}")
    return out + [""]


def saved_lines(new, kept):
    return [f"== what the kept connection saved, {new['requests']} requests: handshakes "
            f"{kept['syns']} against {new['syns']}, segments {kept['segments']} against "
            f"{new['segments']}, TIME-WAIT sockets {kept['timewait']} against {new['timewait']}, "
            f"local ports {len(set(kept['local_ports']))} against "
            f"{len(set(new['local_ports']))}; median time per request {kept['median_us']:.1f} "
            f"us against {new['median_us']:.1f} us (this machine, the veth)", ""]


# ---- p09-curl-nginx --------------------------------------------------------------------------

CURL_PARTS = (("kept", "GETs back to back, closer together than nginx's keepalive_timeout"),
              ("idle", "GETs: the first, a pause until nginx closed the idle connection, then "
               "the others"),
              ("finlost", "GETs as in idle, but nginx's FIN lost on the way (nft drops it at "
               "the client's input)"))
# what ended each part's pause (the collect script's wait)
CURL_PAUSE = {"idle": "until the client's socket was in CLOSE-WAIT",
              "finlost": "until nginx's socket was in FIN-WAIT-1, its FIN lost"}
CURL_C = ("TcpActiveOpens", "TcpEstabResets", "TcpOutRsts", "TcpInSegs", "TcpOutSegs")
CURL_S = ("TcpPassiveOpens", "TcpOutRsts", "TcpExtTCPAbortOnData", "TcpInSegs", "TcpOutSegs")
# libcurl's words about its connection cache (lib/url.c, lib/multi.c, lib/connect.c of 7.88):
# the lines of its debug text the report quotes
CURL_WORDS = ("Connected to ", "Re-using existing connection", " seems to be dead",
              "Closing connection", " left intact", "Connection died", "retrying")


def curl_debug(path):
    """curl_pool -d's file → {request number: [libcurl's quoted text lines (t_ns, text)]}."""
    out, n = {}, None
    for line in t.read_lines(path):
        head, _, rest = line.partition(" ")
        if not head.startswith("t_ns=") or not rest:
            raise t.RawError(f"{path}: not a t_ns=T line: {line[:60]}")
        t_ns = t.num(head[5:], f"{path}: t_ns", 0)
        if rest.startswith("# request "):
            n = t.num(rest[10:], f"{path}: request", 1)
            out[n] = []
        elif rest.startswith("* ") and n is not None and any(w in rest for w in CURL_WORDS):
            out[n].append((t_ns, rest[2:].strip()))
    return out


def nginx_view(rawdir, name):
    """nginx's own view of a part: its access log (per connection, the requests it served) and
    its debug log (the keepalive timer it armed, in ms, and which connections the client
    closed: "client ... closed keepalive connection"; the others nginx closed itself)."""
    apath = os.path.join(rawdir, f"{name}-nginx-access.log")
    access = [t.Fields(apath, t.kv(x)) for x in t.read_lines(apath)]
    conns = {}
    for a in access:
        conns.setdefault(a.int("connection", 1), []).append(a.int("requests", 1))
    epath = os.path.join(rawdir, f"{name}-nginx-error.log")
    timers, closed_by_client, closed, armed = set(), set(), set(), False
    for line in t.read_lines(epath):
        w = line.split()
        cid = next((int(x[1:]) for x in w if x[:1] == "*" and x[1:].isdigit()), None)
        if "set http keepalive handler" in line:
            armed = True
        elif armed and "event timer add:" in line:
            timers.add(int(line.rsplit(":", 2)[-2].strip()))
            armed = False
        if "closed keepalive connection" in line and cid is not None:
            closed_by_client.add(cid)
        if "close http connection:" in line and cid is not None:
            closed.add(cid)
    return {"access": [{"connection": a.int("connection", 1), "requests": a.int("requests", 1),
                        "client": a.str("client"), "status": a.int("status", 0)}
                       for a in access],
            "requests_per_connection": {str(k): v for k, v in sorted(conns.items())},
            "keepalive_timer_ms": sorted(timers),
            "closed_by_nginx": sorted(closed - closed_by_client),
            "closed_by_client": sorted(closed & closed_by_client)}


def conn_view(segs, start):
    """Each connection on veth-c: its client port, requests (client data segments), who sent
    the first FIN, the server's FIN after its last data (ms), RSTs."""
    out = []
    for cid in sorted({x["conn"] for x in segs}):
        c = [x for x in segs if x["conn"] == cid]
        port = next((port_of(x["src"]) for x in c if x["dir"] == "c>s"), None)
        sfin = next((x for x in c if x["dir"] == "s>c" and "F" in x["flags"]), None)
        cfin = next((x for x in c if x["dir"] == "c>s" and "F" in x["flags"]), None)
        sdata = [x for x in c if x["dir"] == "s>c" and x["len"] > 0]
        first = None if sfin is None and cfin is None else (
            "server" if cfin is None or (sfin is not None and sfin["t_ns"] < cfin["t_ns"])
            else "client")
        out.append({"conn": cid, "local_port": port,
                    "syn": any(x["dir"] == "c>s" and x["flags"] == "S" for x in c),
                    "requests": sum(1 for x in c if x["dir"] == "c>s" and x["len"] > 0),
                    "first_fin": first,
                    "server_fin_ms": None if sfin is None else pkt.ms(sfin["t_ns"], start),
                    "server_fin_after_reply_ms": None if sfin is None or not sdata else
                    round((sfin["t_ns"] - sdata[-1]["t_ns"]) / 1e6, 3),
                    "client_fin_ms": None if cfin is None else pkt.ms(cfin["t_ns"], start),
                    # a FIN nobody acknowledged is sent again (finlost under load): all counted
                    "server_fins": sum(1 for x in c if x["dir"] == "s>c" and "F" in x["flags"]),
                    "rsts": sum(1 for x in c if "R" in x["flags"])})
    return out


def tcpdump_view(path, segs):
    """tcpdump -n -r's lines of a part's SYNs, FINs and RSTs → their counts (the FINs nginx
    sent: from the server's address as tcpdump writes it, IP.PORT), or None without the file."""
    dump = t.read_lines(path, optional=True)
    if dump is None or not segs:
        return None
    server = (segs[0]["dst"] if segs[0]["dir"] == "c>s" else segs[0]["src"]).replace(":", ".")
    words = [x.split() for x in dump]
    if any(len(w) < 7 or w[1] != "IP" or w[5] != "Flags" for w in words):
        raise t.RawError(f"{path}: not tcpdump -n's lines of IPv4 TCP segments")
    return {"syns": sum(1 for w in words if w[6] == "[S],"),
            "fins_server": sum(1 for w in words if w[2] == server and "F" in w[6]),
            "rsts": sum(1 for w in words if "R" in w[6])}


def curl_part(rawdir, name, what, want):
    cpath = os.path.join(rawdir, f"{name}-client.txt")
    calls = read_calls(cpath)
    reqs = [c["f"] for c in calls if c["call"] == "request"]
    if len(reqs) != want:
        raise t.RawError(f"{cpath}: {len(reqs)} request lines, params.txt says {want}")
    start = reqs[0].int("start_ns")
    words = curl_debug(os.path.join(rawdir, f"{name}-curl-debug.txt"))
    cap, capj, segs = capture_of(rawdir, f"{name}-")
    sw_raw, events = watch(rawdir, f"{name}-sockwatch.txt", start)
    ssw_raw, sevents = watch(rawdir, f"{name}-server-sockwatch.txt", start)
    cl, sv = tw.read_both_counters(rawdir, f"{name}-", CURL_C, CURL_S)
    requests = [{"n": r.int("n", 1), "result": r.int("result", 0), "error": r.str("error"),
                 "code": r.int("code", 0), "bytes": r.int("bytes", 0),
                 "connects": r.int("connects", 0), "local_port": r.int("local_port", 0),
                 "us": r.int("us", 0), "t_ms": pkt.ms(r.int("start_ns"), start),
                 "libcurl": [x[1] for x in words.get(r.int("n", 1), [])]} for r in reqs]
    p = {"name": name, "what": what, "requests": requests, "connections": conn_view(segs, start),
         "tcpdump": tcpdump_view(os.path.join(rawdir, f"{name}-tcpdump.txt"), segs),
         "syns": sum(1 for x in segs if x["dir"] == "c>s" and x["flags"] == "S"),
         "fins_server": sum(1 for x in segs if x["dir"] == "s>c" and "F" in x["flags"]),
         "rsts": sum(1 for x in segs if "R" in x["flags"]), "nginx": nginx_view(rawdir, name),
         "counters_client": cl, "counters_server": sv, "capture": capj,
         "packets": [tw.packet_json(x, start) for x in segs]}
    notes = [(r.int("start_ns"), f"client: request n={r.str('n')} connects={r.str('connects')} "
              f"local_port={r.str('local_port')} {r.str('error')}") for r in reqs]
    notes += [(t_ns, f"libcurl: {text}") for ws in words.values() for t_ns, text in ws
              if "Connected to" not in text]
    idle = call(calls, "idle")
    if idle is not None:
        # the cached connection when libcurl took it up again: its socket on each side
        local = f"{segs[0]['src']}" if segs and segs[0]["dir"] == "c>s" else None
        mine = [e for e, r in zip(events, sw_raw) if r.str("local") == local]
        theirs = [e for e, r in zip(sevents, ssw_raw) if r.str("peer") == local]
        at = idle.int("t_ns")
        cbef, sbef = state_before(mine, at, start), state_before(theirs, at, start)
        rq = next((r.int("rq") for e, r in zip(events, sw_raw) if e is cbef), None)
        p.update(pause_ms=idle.float("ms", 0, 1e7), pause_before=idle.int("n", 1),
                 client_state_before=cbef["state"] if cbef else None, client_rq_before=rq,
                 server_state_before=sbef["state"] if sbef else None,
                 ss=t.read_ss_sockets(os.path.join(rawdir, f"{name}-ss.txt")))
        notes += side_notes(mine, start, "client") + side_notes(theirs, start, "server")
    p["_at"] = {"start_ns": start, "raw": segs, "notes": notes}
    return p


def curl_nginx(rawdir):
    par = t.read_kv(os.path.join(rawdir, "params.txt"))
    want = par.int("requests", 1, 1000)
    lib = read_calls(os.path.join(rawdir, "kept-client.txt"))
    version = t.one_line_file(os.path.join(rawdir, "nginx-version.txt"),
                              r"nginx version: nginx/[0-9][0-9A-Za-z.~+-]*", "nginx -v's line")
    if version is None:
        raise t.RawError(f"{rawdir}/nginx-version.txt: not there")
    return {"keepalive_ms": par.int("keepalive_ms", 1, 600000), "requests": want,
            "libcurl": need(lib, "kept-client.txt", "libcurl").str("version"),
            "nginx": version.split(": ", 1)[1],
            "parts": [curl_part(rawdir, n, w, want) for n, w in CURL_PARTS]}


def curl_guest_note(vm):
    """In a --kernel guest (raw vm.txt), which of the section's times are timers and which
    are the emulated CPU's; [] on the host."""
    if vm is None:
        return []
    return [f"in this QEMU guest (accel={vm.get('accel')}, {vm.get('smp')} CPU): TOTAL_TIME, "
            "the times of the calls and packets and each pause (the collect script's wait, "
            "ss's run in part idle) are not timers: the emulated CPU's, slower than on "
            "hardware; nginx's FIN after its last reply is its keepalive timer, late only by "
            "the guest's scheduling"]


def curl_lines(r, p):
    out = [f"== {p['name']}: {r['requests']} {p['what']}"]
    for q in p["requests"]:
        if p.get("pause_before") == q["n"]:
            cs = p["client_state_before"] or "gone"
            out.append(f"pause before request {q['n']}: {p['pause_ms']:.1f} ms, "
                       f"{CURL_PAUSE[p['name']]}; then the client's socket {cs}"
                       + ("" if p["client_rq_before"] is None else f", rq={p['client_rq_before']}")
                       + f" (sockwatch), nginx's {p['server_state_before'] or 'gone'}")
        out.append(f"request {q['n']} at {q['t_ms']:.3f} ms: {q['error']} (result {q['result']}), "
                   f"HTTP {q['code']}, {q['bytes']} bytes; CURLINFO_NUM_CONNECTS {q['connects']}, "
                   f"local port {q['local_port']}; {q['us'] / 1000:.3f} ms (TOTAL_TIME)")
        out += [f"  libcurl: {x}" for x in q["libcurl"]]
    out.append(f"on veth-c: {n_of(len(p['connections']), 'connection')}, "
               f"{n_of(p['syns'], 'SYN')} from the client, {n_of(p['fins_server'], 'FIN')} "
               f"from nginx, {n_of(p['rsts'], 'RST')}")
    if p["tcpdump"] is not None:
        d = p["tcpdump"]
        out.append(f"  tcpdump -r {p['name']}-capture.pcap reads {n_of(d['syns'], 'SYN')}, "
                   f"{n_of(d['fins_server'], 'FIN')} from nginx, {n_of(d['rsts'], 'RST')}")
    for c in p["connections"]:
        fin = ("no FIN" if c["first_fin"] is None else
               f"nginx's FIN first, {c['server_fin_after_reply_ms']:.3f} ms after its last reply"
               if c["first_fin"] == "server" else "the client's FIN first (libcurl closed it)")
        again = ("" if c["server_fins"] < 2 else
                 f" (nginx's FIN sent {c['server_fins']} times: the first was never acknowledged)")
        out.append(f"  port {c['local_port']}: {n_of(c['requests'], 'request')} sent; {fin}{again}")
    ng = p["nginx"]
    per = "; ".join(f"connection {k}: requests {','.join(map(str, v))}"
                    for k, v in ng["requests_per_connection"].items())
    out.append(f"nginx's access log ($connection, $connection_requests): {per}")
    out.append("nginx's debug log: keepalive timer "
               + (", ".join(f"{x} ms" for x in ng["keepalive_timer_ms"]) or "none")
               + " (event timer add); closed by nginx: "
               + (", ".join(f"*{x}" for x in ng["closed_by_nginx"]) or "none")
               + "; closed by the client (\"client ... closed keepalive connection\"): "
               + (", ".join(f"*{x}" for x in ng["closed_by_client"]) or "none"))
    if p.get("ss"):
        out.append("ss -tno of the cached socket before the next request: "
                   + "; ".join(s["line"] for s in p["ss"]))
    c = p["counters_client"]
    out.append(f"client TcpActiveOpens {tw.delta(c, 'TcpActiveOpens'):+d}, TcpEstabResets "
               f"{tw.delta(c, 'TcpEstabResets'):+d}; server TcpOutRsts "
               f"{tw.delta(p['counters_server'], 'TcpOutRsts'):+d}, TcpExtTCPAbortOnData "
               f"{tw.delta(p['counters_server'], 'TcpExtTCPAbortOnData'):+d}")
    return out + calls_lines(p, "request 1's start", CURL_C, CURL_S)


def curl_against_stale(curl, stale_run):
    """One line: libcurl's check before reuse against p09-stale-reuse's client, which writes."""
    by = {p["name"]: p for p in curl["parts"]}
    idle, lost = by["idle"], by["finlost"]
    q = next(x for x in idle["requests"] if x["n"] == idle.get("pause_before"))
    ql = next(x for x in lost["requests"] if x["n"] == lost.get("pause_before"))
    died = next((x for x in ql["libcurl"] if x.startswith("Connection died")), "no retry")
    mine = (f"libcurl (part idle) checked the cached connection before reuse and found it "
            f"dead: {q['error']}, a new connection (NUM_CONNECTS {q['connects']}), "
            f"{n_of(idle['rsts'], 'RST')} on the wire; with the FIN lost the check passed, "
            f"{n_of(lost['rsts'], 'RST')}, \"{died}\", {ql['error']}")
    if stale_run is None:
        return [mine + "; p09-stale-reuse not run (./run.sh p09-stale-reuse), the client that "
                "writes without a check", ""]
    sby = {p["name"]: p for p in stale_run["parts"]}
    r, f = sby["reuse"], sby["finlost"]
    return [mine + "; p09-stale-reuse's pool_client wrote on it without a check: "
            f"{n_of(r['server_rsts'], 'RST')} from the server, the read ret={r['read2_ret']}, "
            f"the second write {r['write3_errno']} (with the FIN lost: read "
            f"{f['read2_errno']})", ""]


def rows_of(name, part):
    at = part["_at"]
    calls = [n for n in at["notes"] if n[1].startswith("client: ")]
    return [{"sep": name}] + pkt.ladder_rows(at["raw"], at["start_ns"],
                                             [n for n in at["notes"] if n not in calls] + calls,
                                             at.get("seg_notes"))


def public(part):
    return {k: v for k, v in part.items() if not k.startswith("_")}


def build(rawroot, outdir):
    readers = {STALE: stale, KA: keepalive, SAVES: saves, CURL: curl_nginx}
    runs, partial = t.group_runs(rawroot, NAME, dict(UNITS),
                                 lambda rd, unit: readers[unit](rd))
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
        elif unit == KA:
            lines += ka_lines(r)
            rows += rows_of("keepalive", r)
            obj[KA] = public(r)
        elif unit == CURL:
            lines.append(f"libcurl {r['libcurl']} (curl_pool: one easy handle), "
                         f"{r['nginx']} with keepalive_timeout {r['keepalive_ms']}ms")
            lines += curl_guest_note(t.read_vm(t.unit_dir(rawroot, CURL)))
            lines.append("")
            for p in r["parts"]:
                lines += curl_lines(r, p)
                rows += rows_of(f"curl {p['name']}", p)
            lines += curl_against_stale(r, runs.get(STALE))
            obj[CURL] = {"keepalive_ms": r["keepalive_ms"], "requests": r["requests"],
                         "libcurl": r["libcurl"], "nginx": r["nginx"],
                         "parts": {p["name"]: public(p) for p in r["parts"]}}
        else:
            by = {p["name"]: p for p in r["parts"]}
            lines += saves_lines(by["new"]) + saves_lines(by["kept"])
            lines += saved_lines(by["new"], by["kept"])
            lines += idle_lines(by["idle"]) + idle_lines(by["idle-off"])
            rows += rows_of("new (the first two)", by["new"])
            rows += rows_of("kept (the first three requests)", by["kept"])
            obj[SAVES] = {"requests": r["requests"], "idle_ms": r["idle_ms"],
                          "parts": {p["name"]: public(p) for p in r["parts"]}}
    # the top-level keys every .json has describe the first part that ran (docs/output-format.md):
    # its client's counters; no single result, errno or time stands for the report
    first = (runs[STALE]["parts"][0] if STALE in runs else runs[KA] if KA in runs
             else runs[SAVES]["parts"][0] if SAVES in runs else runs[CURL]["parts"][0])
    obj.update(counters=first["counters_client"], result=None, errno=None, elapsed_s=None)
    tw.write_with_ladder(outdir, NAME, lines + tw.ladder_lines(rows), obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
