#!/usr/bin/python3
"""p06-time-wait report: who keeps TIME-WAIT after an orderly close, and for how long.  Two
cases run side by side on the wire (the client closes first; the server closes first).  Per
case: the close() calls, the FINs in the capture, each side's socket as sockwatch saw it in its
own namespace, and for the socket that stayed in TIME-WAIT its timer at first sight
(idiag_expires), the expiry that timer asked for, a countdown of snapshots, when it was gone,
and how long TIME-WAIT lasted against TCP_TIMEWAIT_LEN and the timer wheel's granularity at the
kernel's HZ.  Then each namespace's TcpExtTW and /proc/net/sockstat before, during and after,
`ss -tano state time-wait` beside sockwatch, and the sysctls.  Every number from raw/."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t
import tcplab_pkt as pkt
import tcplab_wire as tw

NAME = "p06-time-wait"
TCP_TIMEWAIT_LEN_MS = 60000    # include/net/tcp.h: TCP_TIMEWAIT_LEN (60*HZ), no sysctl sets it
SCHED_SLACK_MS = 60            # wake-up and sampling slack allowed on a loaded 2-core VM
CASES = (("client-closes", "client", "the client closes first"),
         ("server-closes", "server", "the server closes first"))
COUNTERS = ("TcpExtTW", "TcpExtTWKilled", "TcpExtTWRecycled", "TcpExtTCPTimeWaitOverflow",
            "TcpActiveOpens", "TcpPassiveOpens", "TcpEstabResets", "TcpOutRsts",
            "TcpExtTCPAbortOnClose")
PHASES = ("before", "during", "after")
_SS_TIMER = re.compile(r"timer:\(timewait,([^,)]*),([0-9]+)\)")
# iproute2 misc/ss.c print_ms_timer(): [Nmin][Nsec | N.MMMms | Nms], the ms left out above 9 s
_SS_MS = re.compile(r"(?:([0-9]{1,6})min)?"
                    r"(?:([0-9]{1,2})sec|([0-9])\.([0-9]{3})ms|([0-9]{1,3})ms)?")


def read_peer(path, role):
    """peer's output (fixtures/peer.c; SPEC) → {"ready", "conn" (the accept or connect line),
    "steps" [Fields], "close" (the close step), "exit"} for one connection."""
    out = {"ready": None, "conn": None, "steps": [], "exit": None}
    for d, line in zip(t.read_kv_lines(path), t.read_lines(path)):
        word = line.split(" ", 1)[0]
        if word == "ready":
            out["ready"] = d
        elif word in ("accept", "connect") and out["conn"] is None:
            out["conn"] = d
        elif word == "step":
            out["steps"].append(d)
        elif word == "exit":
            out["exit"] = d
    if role == "server" and out["ready"] is None:
        raise t.RawError(f"{path}: no `ready` line: the server never listened")
    want = "accept" if role == "server" else "connect"
    if out["conn"] is None:
        raise t.RawError(f"{path}: no `{want}` line")
    if role == "client" and out["conn"].str("errno") != "none":
        raise t.RawError(f"{path}: connect() failed ({out['conn']['errno'][:20]}): no connection "
                         "to close")
    if out["exit"] is None:
        raise t.RawError(f"{path}: no `exit` line: peer did not finish")
    closes = [s for s in out["steps"] if s.str("op") == "close"]
    if not closes:
        raise t.RawError(f"{path}: no close step")
    out["close"] = closes[0]
    out["close"].int("t_ns")
    return out


def listen_port(srv):
    addr = srv["ready"].str("listen")
    port = t.num(addr.rsplit(":", 1)[-1], f"{srv['ready'].path}: listen port", 1, 65535)
    return addr, port


def side_events(path, local, peer, t0):
    """sockwatch's events of the one connection first seen as (local, peer) in path, followed
    by its cookie whatever its addresses became (tcplab.follow: the side that ends in LAST-ACK
    is ended by tcp_done(), and can be caught in TCP_CLOSE with its port released), times in ms
    from t0, each with its t_ns and (not in the JSON) its local address; the listener and other
    sockets left out."""
    out = []
    pick = lambda e: e.str("local") == local and e.str("peer") == peer  # noqa: E731
    for e in t.follow(t.read_sockwatch(path), pick):
        ev = t.sockwatch_event(e, t0)
        ev["t_ms"] = round(ev.pop("t_s") * 1e3, 3)
        ev["t_ns"] = e.int("t_ns")
        ev["info_len"] = e.int("info_len", default=None)
        ev["inode"] = e.int("inode")
        ev["_local"] = e.str("local")
        out.append(ev)
    if not out:
        raise t.RawError(f"{path}: no event of {local} -> {peer}: the socket was never seen")
    if out[-1]["event"] != "gone":
        raise t.RawError(f"{path}: {local} -> {peer} is not `gone` at the end")
    return out


def timewait(events, path):
    """The TIME-WAIT life of one socket's events: the first event with timer=timewait (the
    timewait socket; it may first show FIN-WAIT-2, its substate), the first in state TIME-WAIT
    and the `gone` after it; None when the socket never was in TIME-WAIT."""
    first_tw = next((i for i, e in enumerate(events) if e["state"] == "TIME-WAIT"), None)
    if first_tw is None:
        return None
    first_timer = next(i for i, e in enumerate(events) if e["timer"] == "timewait" or
                       e["state"] == "TIME-WAIT")
    gone = next((e for e in events[first_tw:] if e["event"] == "gone"), None)
    if gone is None:
        raise t.RawError(f"{path}: the TIME-WAIT socket is never `gone`")
    seen = events[first_tw]
    if seen["timer"] != "timewait":
        raise t.RawError(f"{path}: a TIME-WAIT socket with timer={seen['timer']}, not timewait")
    return {"timer_first": events[first_timer], "seen": seen, "gone": gone}


def countdown(path, local, peer, t0):
    """The snapshots (sockwatch -1, every few seconds) of the socket (local, peer):
    [{"t_ms", "expires_ms", "expiry_ms"}], expiry = the time the timer asked for."""
    out = []
    for d in t.read_snapshot(path):
        if d.str("local") == local and d.str("peer") == peer:
            ms = (d.int("t_ns") - t0) / 1e6
            e = d.int("expires_ms")
            out.append({"t_ms": round(ms, 3), "expires_ms": e, "expiry_ms": round(ms + e, 3),
                        "state": d.str("state"), "timer": d.str("timer")})
    return out


def read_ss(path, local, peer):
    """The `ss -tano state time-wait` line of (local, peer) → {"line", "timer_ms"}, None when
    ss was not there (no such file)."""
    rows = t.read_ss_sockets(path)
    if rows is None:
        return None
    for r in rows:
        if r["local"] == local and r["peer"] == peer:
            m = _SS_TIMER.search(r["line"])
            v = _SS_MS.fullmatch(m.group(1)) if m else None
            if v is None:
                raise t.RawError(f"{path}: no timer:(timewait,…) ss prints for {local}")
            mins, secs, s1, frac, ms = (int(x) if x else 0 for x in v.groups())
            return {"line": r["line"], "timer": m.group(1),
                    "timer_ms": mins * 60000 + secs * 1000 + s1 * 1000 + frac + ms}
    raise t.RawError(f"{path}: no TIME-WAIT line for {local} -> {peer}")


def fin_of(segs, direction):
    return next((p for p in segs if p["dir"] == direction and "F" in p["flags"]), None)


def one_case(rawdir, case, closer, hz):
    f = lambda s: os.path.join(rawdir, f"{case}-{s}")  # noqa: E731
    cli, srv = read_peer(f("client.txt"), "client"), read_peer(f("server.txt"), "server")
    listen, port = listen_port(srv)
    c_local = cli["conn"].str("local")
    if cli["conn"].str("peer") != listen:
        raise t.RawError(f"{f('client.txt')}: connected to {cli['conn']['peer'][:40]}, the "
                         f"server listens on {listen[:40]}")
    cap = pkt.read_complete_capture(f("capture.txt"))
    segs = pkt.conn_packets(cap, c_local)
    fin_first = fin_of(segs, "c>s" if closer == "client" else "s>c")
    fin_last = fin_of(segs, "s>c" if closer == "client" else "c>s")
    if fin_first is None or fin_last is None:
        raise t.RawError(f"{f('capture.txt')}: not both FINs of {c_local} in the capture")
    # time 0: the closer's FIN on the wire (its close() returns when the process runs again)
    t0 = fin_first["t_ns"]
    sides = {"client": side_events(f("sockwatch.txt"), c_local, listen, t0),
             "server": side_events(f("server-sockwatch.txt"), listen, c_local, t0)}
    tws = {s: timewait(ev, f(("server-" if s == "server" else "") + "sockwatch.txt"))
           for s, ev in sides.items()}
    kept = [s for s, x in tws.items() if x is not None]
    if len(kept) != 1:
        raise t.RawError(f"{f('sockwatch.txt')}: {len(kept)} sides in TIME-WAIT, not one")
    side = kept[0]
    no_tw = "server" if side == "client" else "client"
    x = tws[side]
    local, peer = (c_local, listen) if side == "client" else (listen, c_local)
    # the closer's ACK of the other's FIN: what ends the other side's LAST-ACK
    last_ack = next((p for p in segs if p["t_ns"] > fin_last["t_ns"] and p["dir"] ==
                     ("c>s" if closer == "client" else "s>c") and "A" in p["flags"]), None)
    if last_ack is None:
        raise t.RawError(f"{f('capture.txt')}: no ACK of the {closer}'s peer's FIN")
    pre = "" if side == "client" else "server-"
    cd = countdown(os.path.join(rawdir, f"{pre}countdown.txt"), local, peer, t0)
    ss = read_ss(os.path.join(rawdir, f"{pre}ss.txt"), local, peer)
    if ss is not None:
        # the collect script looks with ss between its first two snapshots
        if len(cd) < 2:
            raise t.RawError(f"{os.path.join(rawdir, pre + 'countdown.txt')}: no snapshot after ss")
        ss["between_ms"] = [cd[0]["expires_ms"], cd[1]["expires_ms"]]
    seen, gone = x["seen"], x["gone"]
    jiffy = 1000 / hz
    gran = t.wheel_gran_ms(TCP_TIMEWAIT_LEN_MS, hz)
    # t + expires_ms is the expiry the timer asks for, as each look saw it.  A sockwatch line is
    # stamped when its sample starts, before the dump (which a loaded machine may delay), so
    # each is a lower bound (within the jiffy expires_ms truncates): the latest is the best.
    # A snapshot after that expiry shows 0 (jiffies_delta_to_msecs() of a past expiry).
    first = seen["t_ms"] + seen["expires_ms"]
    expiries = [c["expiry_ms"] for c in cd if c["expires_ms"] > 0]
    expiry = max([first] + expiries)
    armed = expiry - TCP_TIMEWAIT_LEN_MS
    late = gone["t_ms"] - expiry
    lo, hi = -jiffy - SCHED_SLACK_MS, gran + 2 * jiffy + SCHED_SLACK_MS
    fin_ms = pkt.ms(fin_last["t_ns"], t0)
    return {"case": case, "closer": closer, "port": port, "client": c_local, "server": listen,
            "t0_ns": t0, "close_ms": {"client": pkt.ms(cli["close"].int("t_ns"), t0),
                                      "server": pkt.ms(srv["close"].int("t_ns"), t0)},
            "first_closer": closer, "other": "server" if closer == "client" else "client",
            "events": sides, "timewait_side": side, "timewait_local": local,
            "timewait_peer": peer,
            "fin_first_ms": pkt.ms(fin_first["t_ns"], t0), "fin_last_ms": fin_ms,
            "timer_first_ms": x["timer_first"]["t_ms"],
            "timer_first_state": x["timer_first"]["state"],
            "timer_first_expires_ms": x["timer_first"]["expires_ms"],
            "seen_ms": seen["t_ms"], "seen_expires_ms": seen["expires_ms"],
            "first_expiry_ms": round(first, 3), "looks": 1 + len(expiries),
            "expiry_ms": round(expiry, 3), "armed_ms": round(armed, 3),
            "gone_ms": gone["t_ms"], "late_ms": round(late, 3),
            "lasted_ms": round(gone["t_ms"] - armed, 3),
            "from_fin_ms": round(gone["t_ms"] - fin_ms, 3),
            "window_ms": [round(lo, 3), round(hi, 3)], "within": lo <= late <= hi,
            "countdown": cd,
            "countdown_spread_ms": round(max(expiries) - min(expiries), 3) if expiries else None,
            "ss": ss, "segments": segs, "capture": cap,
            "no_timewait_side": no_tw, "no_timewait_last": sides[no_tw][-1]["state"],
            "no_timewait_gone_ms": sides[no_tw][-1]["t_ms"],
            "last_ack_ms": pkt.ms(last_ack["t_ns"], t0), "gone_ns": gone["t_ns"],
            "expiry_ns": t0 + round(expiry * 1e6),
            "past_expiry": [c for c in cd if c["expires_ms"] == 0]}


def sysctl_lines(client, server):
    lines = [f"  {'sysctl':<32} {'client':<14} server"]
    lines += [f"  {k:<32} {v or 'absent':<14} {server.get(k) or 'absent'}"
              for k, v in client.items()]
    return lines


def event_lines(r):
    lines = [f"  {'side':<6} {'t_ms':>11} {'event':<6} {'state':<11} {'timer':<9} "
             f"{'expires_ms':>10} {'info_len':>8} {'inode':>8}"]
    notes = []
    for side in ("client", "server"):
        for e in r["events"][side]:
            il = "-" if e["info_len"] is None else e["info_len"]
            lines.append(f"  {side:<6} {e['t_ms']:11.3f} {e['event']:<6} "
                         f"{t.shown_state(e['state']):<11} "
                         f"{e['timer']:<9} {e['expires_ms']:>10} {il:>8} {e['inode']:>8}")
            if e["state"] == t.CLOSED and e["event"] != "gone":
                notes.append(t.closed_note(e["_local"], e["inode"], e["t_ms"], f"  {side}: "))
    return lines + notes


def case_lines(r):
    side = r["timewait_side"]
    s = lambda ms: f"{ms / 1e3:.3f} s"  # noqa: E731
    lines = [f"== {r['case']}: {dict((c, w) for c, _, w in CASES)[r['case']]} "
             f"(port {r['port']}; t_ms from the {r['closer']}'s FIN in the capture)",
             f"close() returned: the client's at {r['close_ms']['client']:.3f} ms, the server's at "
             f"{r['close_ms']['server']:.3f} ms",
             f"FINs (capture, the client's end of the veth): the {r['closer']}'s at "
             f"{r['fin_first_ms']:.3f} ms, the {r['other']}'s at {r['fin_last_ms']:.3f} ms",
             "", "sockwatch, each side in its own namespace (info_len 0: a timewait socket, no "
             "tcp_info; inode 0: no process holds it):"]
    lines += event_lines(r)
    lines += ["", f"who keeps TIME-WAIT: the {side}'s socket {r['timewait_local']} -> "
              f"{r['timewait_peer']}; the {r['no_timewait_side']}'s went at "
              f"{r['no_timewait_gone_ms']:.3f} ms, last seen "
              f"{t.shown_state(r['no_timewait_last'])}, without "
              f"TIME-WAIT (the {r['closer']}'s last ACK: {r['last_ack_ms']:.3f} ms)"]
    if r["timer_first_state"] != "TIME-WAIT":
        lines.append(f"  first a timewait socket in {r['timer_first_state']} at "
                     f"{r['timer_first_ms']:.3f} ms (expires_ms={r['timer_first_expires_ms']}); "
                     f"the {r['other']}'s FIN made it TIME-WAIT and restarted the timer")
    lines += [f"  TIME-WAIT first seen at {r['seen_ms']:.3f} ms, expires_ms={r['seen_expires_ms']}:"
              f" the timer asks for {s(r['first_expiry_ms'])} or later",
              f"  the timer's expiry, the latest of {r['looks']} looks (first sight and the "
              f"countdown: t + expires_ms): {s(r['expiry_ms'])}; so armed at "
              f"{r['armed_ms']:.3f} ms (- {TCP_TIMEWAIT_LEN_MS} ms), the {r['other']}'s FIN at "
              f"{r['fin_last_ms']:.3f} ms",
              f"  gone at {s(r['gone_ms'])}: {r['late_ms']:+.3f} ms after the expiry it asked for"
              f" (window {r['window_ms'][0]:.1f}..{r['window_ms'][1]:.1f} ms: "
              + ("within" if r["within"] else "OUTSIDE") + ")",
              f"  TIME-WAIT lasted {s(r['lasted_ms'])} from the timer's arming, "
              f"{s(r['from_fin_ms'])} from the {r['other']}'s FIN; TCP_TIMEWAIT_LEN "
              f"{s(TCP_TIMEWAIT_LEN_MS)}"]
    if r["countdown"]:
        lines += ["", f"  countdown (sockwatch -1 every few s; expiry = t + expires_ms, constant "
                  f"while the timer is not re-armed): spread {r['countdown_spread_ms']:.3f} ms",
                  f"    {'t_ms':>11} {'state':<10} {'expires_ms':>10} {'expiry_ms':>11}"]
        lines += [f"    {c['t_ms']:11.3f} {c['state']:<10} {c['expires_ms']:>10} "
                  + (f"{c['expiry_ms']:11.3f}" if c["expires_ms"] else f"{'passed':>11}")
                  for c in r["countdown"]]
        for c in r["past_expiry"]:
            lines.append(f"  at {c['t_ms']:.3f} ms, {c['t_ms'] - r['expiry_ms']:.3f} ms after the "
                         "expiry it asked for, the socket was still there: expires_ms 0 is "
                         "jiffies_delta_to_msecs() of a past expiry")
    if r["ss"] is not None:
        lines += [f"  ss -tano state time-wait ({side}'s namespace): {r['ss']['line']}",
                  f"    taken between the snapshots with expires_ms {r['ss']['between_ms'][0]} and "
                  f"{r['ss']['between_ms'][1]}; ss prints whole seconds above 9 s"]
    return lines


def counter_table(cnt):
    """TcpExtTW and friends per namespace, during (both sockets in TIME-WAIT) and at the end."""
    lines = [f"  {'counter':<26} {'client during':>13} {'client end':>10} {'server during':>13} "
             f"{'server end':>10}   (. = unchanged)"]
    for k in COUNTERS:
        vals = [cnt[w][k] if k in cnt[w] else None for w in
                ("client_during", "client", "server_during", "server")]
        cells = ["." if v is None else t.fmt_delta(v) for v in vals]
        lines.append(f"  {k:<26} {cells[0]:>13} {cells[1]:>10} {cells[2]:>13} {cells[3]:>10}")
    return lines


def sockstat_lines(st):
    lines = [f"  {'namespace':<9} {'when':<7} {'sockets used':>12}  TCP: line"]
    for side in ("client", "server"):
        for ph in PHASES:
            d = st[side][ph]
            lines.append(f"  {side:<9} {ph:<7} {d['sockets_used']:>12}  {d['line']}")
    return lines


def case_rows(r):
    notes = [(r["t0_ns"] + round(ms * 1e6), f"{who}: close() returned")
             for who, ms in r["close_ms"].items()]
    for side in ("client", "server"):
        for e in r["events"][side]:
            notes.append((e["t_ns"], f"{side} sockwatch: {e['event']} {t.shown_state(e['state'])} "
                          f"timer={e['timer']} expires_ms={e['expires_ms']}"))
    return [{"sep": f"{r['case']}: the {r['closer']} closes first"}] + \
        pkt.ladder_rows(r["segments"], r["t0_ns"], notes)


def case_json(r):
    return {k: v for k, v in r.items() if k not in ("segments", "capture", "t0_ns")} | {
        "events": {s: [{k: v for k, v in e.items() if k != "t_ns" and k[0] != "_"} for e in ev]
                   for s, ev in r["events"].items()},
        "segments": [tw.packet_json(p, r["t0_ns"]) for p in r["segments"]],
        "capture": pkt.capture_json(r["capture"])}


def build(rawroot, outdir):
    need = ("net.ipv4.tcp_max_tw_buckets", "net.ipv4.tcp_tw_reuse", "net.ipv4.tcp_timestamps")
    rawdir, kernel, hz, sysctls, server = tw.read_unit(rawroot, NAME, need)
    wire = tw.read_wire(rawdir)
    runs = [one_case(rawdir, c, who, hz) for c, who, _ in CASES]
    cnt = {}
    cnt["client_during"], cnt["server_during"] = tw.read_both_counters(rawdir, "during-",
                                                                       ("TcpExtTW",), ("TcpExtTW",))
    cnt["client"], cnt["server"] = tw.read_both_counters(rawdir, "", ("TcpExtTW",), ("TcpExtTW",))
    st = {side: {ph: t.read_sockstat(os.path.join(rawdir, f"{'server-' if side == 'server' else ''}"
                                                f"sockstat-{ph}.txt")) for ph in PHASES}
          for side in ("client", "server")}
    gran = t.wheel_gran_ms(TCP_TIMEWAIT_LEN_MS, hz)
    load = t.load_average(os.path.join(rawdir, "loadavg.txt"))
    jiffies = round(TCP_TIMEWAIT_LEN_MS * hz / 1000)
    a, b = runs
    main = (f"TIME-WAIT lasted {a['lasted_ms'] / 1e3:.3f} s on the {a['timewait_side']}'s socket "
            f"({a['case']}) and {b['lasted_ms'] / 1e3:.3f} s on the {b['timewait_side']}'s "
            f"({b['case']}), against TCP_TIMEWAIT_LEN {TCP_TIMEWAIT_LEN_MS / 1e3:g} s: gone "
            f"{a['late_ms']:.0f} and {b['late_ms']:.0f} ms after the expiry its timer asked for, "
            f"the timer wheel's granularity being {gran:g} ms at HZ={hz}")
    watchers = [os.path.join(rawdir, f"{c}-{w}") for c, _, _ in CASES
                for w in ("sockwatch.txt", "server-sockwatch.txt")]
    watch_us = t.watchers_interval_us(watchers)
    led_ms = t.watchers_timer_led_ms(watchers)
    lines = [f"{NAME}: who keeps TIME-WAIT after an orderly close, and for how long",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire),
                      t.sampling_text(watch_us, "sockwatch ", led_ms)), "", main, "",
             f"TCP_TIMEWAIT_LEN {TCP_TIMEWAIT_LEN_MS} ms (include/net/tcp.h: 60*HZ; no sysctl "
             f"sets it); HZ={hz} (machine.txt): {jiffies} jiffies, a timer-wheel level of "
             f"granularity {gran:g} ms, so the socket goes up to {gran:g} ms after its expiry",
             f"load average {t.fmt_load(load)} (/proc/loadavg, while the sockets waited): a "
             "sockwatch line is stamped when its sample starts, and on a loaded machine its dump "
             "may end some ms later",
             "the sysctls TIME-WAIT depends on, each side read in its own namespace:"]
    lines += sysctl_lines(sysctls, server) + [""]
    rows = []
    for r in runs:
        lines += case_lines(r) + [""]
        lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{r['case']}-capture.txt") + [""]
        rows += case_rows(r)
    apart_exp = (b["expiry_ns"] - a["expiry_ns"]) / 1e6
    apart_gone = (b["gone_ns"] - a["gone_ns"]) / 1e6
    lines += [f"the two TIME-WAIT sockets, on one clock (CLOCK_MONOTONIC): their timers asked for "
              f"expiries {apart_exp:+.3f} ms apart ({b['case']} - {a['case']}), they went "
              f"{apart_gone:+.3f} ms apart, each about {a['late_ms']:.0f} ms late (one jiffy is "
              f"{1000 / hz:g} ms)", ""]
    lines += ["counters, each namespace's own (TcpExtTW counts a timewait socket when its timer "
              "is first armed, TWKilled one armed for 4 s or less):"] + counter_table(cnt) + [""]
    lines += ["/proc/net/sockstat inside each namespace (inuse and tw are the namespace's own; "
              "orphan, alloc and mem are every namespace's: net/ipv4/proc.c):"]
    lines += sockstat_lines(st) + [""]
    lines += ["ladder (the client's end of the veth; t_ms from each case's first FIN):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": load, "result": "ok", "errno": None, "elapsed_s": None,
           "main": main, "hz": hz, "tcp_timewait_len_ms": TCP_TIMEWAIT_LEN_MS,
           "wheel_gran_ms": gran, "sched_slack_ms": SCHED_SLACK_MS,
           "sockwatch_interval_us": watch_us,
           **({"sockwatch_timer_led_ms": led_ms} if led_ms else {}),
           "expiries_apart_ms": round(apart_exp, 3), "gone_apart_ms": round(apart_gone, 3),
           "sysctls": t.sysctls_json(sysctls), "server_sysctls": t.sysctls_json(server),
           "counters": cnt["client"], "server_counters": cnt["server"],
           "during_counters": cnt["client_during"],
           "during_server_counters": cnt["server_during"],
           "sockstat": st, "cases": {r["case"]: case_json(r) for r in runs}, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
