#!/usr/bin/python3
"""p06-port-exhaustion report: a client namespace with a small ip_local_port_range (10 ports, or
the knob ports), a client that closes first.  Per part: each connect() (its port, its result),
each connection's close in the capture (the server's FIN starts TIME-WAIT), the TIME-WAIT sockets
sock_diag showed, the poll's connect()s against the reuse rule of tcp_twsk_unique() (the delay
from the sysctls, as the setup left them), the counters of both sides and the namespace's
sockstat; then the bind() 2x2 of the server side.
Every number from raw/."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t
import tcplab_pkt as pkt
import tcplab_wire as tw

NAME = "p06-port-exhaustion"
EXHAUST = ("wire", "loopback", "reuse1", "nots", "buckets")
PARTS = ("wire", "loopback", "wire-again", "reuse1-old", "reuse1", "nots", "buckets")
POLLED = ("loopback", "reuse1", "nots")
# the files each part's collect wrote besides client.txt, capture, counters and sockstat
NEEDS = {**{p: ("last.txt", "tw.txt", "after-tw.txt") for p in EXHAUST + ("buckets",)},
         "reuse1-old": ("after-tw.txt",), "bound": ("tw.txt", "after-tw.txt"),
         **{p: ("last.txt", "tw.txt", "after-tw.txt", "poll.txt") for p in POLLED}}
BINDS = ("bind-old1", "bind-old0")
TITLES = {
    "wire": "across the wire, tcp_tw_reuse 2 (the default)",
    "loopback": "over lo in the client namespace, tcp_tw_reuse 2",
    "wire-again": "the wire's TIME-WAIT sockets again, older than the delay, tcp_tw_reuse 2",
    "reuse1-old": "the same, tcp_tw_reuse 1",
    "reuse1": "a fresh server port across the wire, tcp_tw_reuse 1",
    "nots": "tcp_timestamps 0, tcp_tw_reuse 1",
    "buckets": "tcp_max_tw_buckets: room for a few more TIME-WAIT sockets",
    "bound": "bind() to the port before connect(), tcp_tw_reuse 0",
    "bind-old1": "the old listener had SO_REUSEADDR",
    "bind-old0": "the old listener had no SO_REUSEADDR",
}
C_COUNTERS = ("TcpActiveOpens", "TcpExtTW", "TcpExtTWRecycled", "TcpExtTWKilled",
              "TcpExtTCPTimeWaitOverflow", "TcpOutRsts", "TcpEstabResets")
S_COUNTERS = ("TcpPassiveOpens", "TcpExtTW", "TcpExtTCPTimeWaitOverflow", "TcpOutRsts",
              "TcpEstabResets")
SHOWN = ("TcpActiveOpens", "TcpPassiveOpens", "TcpExtTW", "TcpExtTWRecycled",
         "TcpExtTCPTimeWaitOverflow", "TcpOutRsts", "TcpEstabResets")
# the capture's times come from libpcap, put on CLOCK_MONOTONIC by an offset it measured once;
# the kernel stamps TIME-WAIT a little after the capture saw the FIN
CLOCK_SLACK_NS = 2_000_000
DELAY_ABSENT_MS = 1000      # before tcp_tw_reuse_delay: the next second (tcp_twsk_unique)
_SOCKSTAT = re.compile(r"^TCP: inuse (\d+) orphan (\d+) tw (\d+) alloc (\d+) mem (\d+)$")


# ---- raw files ---------------------------------------------------------------------------

def read_peer(path, need_exit=True):
    """peer's output (SPEC: one key=value line each) → {"ready", "bind", "exit": Fields or
    None, "connects": [Fields], "accepts": [Fields]}; without its exit line (need_exit), or
    the `bind` line it ends with when the bind() failed, peer did not finish."""
    out = {"ready": None, "bind": None, "exit": None, "connects": [], "accepts": []}
    for line in t.read_lines(path):
        word = line.split(" ", 1)[0]
        f = t.Fields(path, t.kv(line))
        if word in ("ready", "bind", "exit"):
            out[word] = f
        elif word == "connect":
            out["connects"].append(f)
        elif word == "accept":
            out["accepts"].append(f)
    if need_exit and out["exit"] is None and out["bind"] is None:
        # a failed bind() under -R is peer's last line (it exits 0 after it)
        raise t.RawError(f"{path}: no `exit` line: peer did not finish")
    return out


def connect_row(f):
    """One `connect` line: peer prints t_ns when connect() returned and us it took, so t_ns
    here is when it began (t_ns - us) and end_ns when it returned."""
    ret = f.int("ret", -1, 0)
    us = f.float("us", 0, 1e12)
    end = f.int("t_ns")
    return {"i": f.int("i", 1), "ret": ret, "errno": None if ret == 0 else f.str("errno"),
            "local": f.str("local") if ret == 0 else None, "t_ns": end - round(us * 1000),
            "end_ns": end, "us": us}


def connects(path):
    rows = [connect_row(f) for f in read_peer(path)["connects"]]
    if not rows:
        raise t.RawError(f"{path}: no `connect` line")
    return rows


def sockstat(path):
    """A copy of /proc/net/sockstat → its TCP line's numbers (tw: the namespace's TIME-WAIT
    sockets, net/ipv4/proc.c)."""
    for line in t.read_lines(path):
        m = _SOCKSTAT.match(line)
        if m:
            return dict(zip(("inuse", "orphan", "tw", "alloc", "mem"), map(int, m.groups())))
    raise t.RawError(f"{path}: no `TCP: inuse … tw …` line")


def tw_sockets(path):
    """A `sockwatch -1` snapshot of one port's sockets once they had settled, every one a
    TIME-WAIT socket → [{"local", "peer", "state", "expires_ms"}]."""
    out = []
    snap = t.read_snapshot(path)
    if not snap:
        raise t.RawError(f"{path}: no socket: the collect script waits for one at least")
    for d in snap:
        if d.str("state") != "TIME-WAIT" or d.str("timer") != "timewait":
            raise t.RawError(f"{path}: {d.str('local')}: {d.str('state')} timer={d.str('timer')}, "
                             "not TIME-WAIT timewait (the collect script waits for that)")
        out.append({"local": d.str("local"), "peer": d.str("peer"), "state": d.str("state"),
                    "expires_ms": d.int("expires_ms")})
    return out


def conns(cap):
    """The capture's connections by conn number: the client end, the SYN's options, the first
    FIN each way, the client's RSTs, and the first RST from the server after its FIN (one that
    reaches the client's TIME-WAIT socket)."""
    out = {}
    for p in cap["packets"]:
        if p["kind"] != "tcp":
            continue
        c = out.setdefault(p["conn"], {"conn": p["conn"], "local": None, "syn_ns": None,
                                       "syn_opts": None, "cfin_ns": None, "sfin_ns": None,
                                       "crst": 0, "srst_ns": None, "packets": []})
        c["packets"].append(p)
        if p["dir"] == "c>s":
            c["local"] = c["local"] or p["src"]
            if p["flags"] == "S" and c["syn_ns"] is None:
                # a cut option list says so: it is not the list the SYN carried
                c["syn_ns"], c["syn_opts"] = p["t_ns"], (p["opts"] if pkt.opts_whole(p) else
                                                         p["opts"] + ",(cut:truncated/bad)")
            if "F" in p["flags"] and c["cfin_ns"] is None:
                c["cfin_ns"] = p["t_ns"]
            if "R" in p["flags"]:
                c["crst"] += 1
        else:
            if "F" in p["flags"] and c["sfin_ns"] is None:
                c["sfin_ns"] = p["t_ns"]
            if "R" in p["flags"] and c["sfin_ns"] is not None and c["srst_ns"] is None:
                c["srst_ns"] = p["t_ns"]
    return [c for _, c in sorted(out.items()) if c["local"] is not None]


def watch_tw(path):
    """The continuous sockwatch: for each socket (local, peer), when it was first seen, in which
    state, and when it was first seen in TIME-WAIT."""
    out = {}
    for d in t.read_sockwatch(path):
        key = (d.str("local"), d.str("peer"))
        s = out.setdefault(key, {"first_ns": d.int("t_ns"), "first_state": d.str("state"),
                                 "tw_ns": None})
        if d.str("state") == "TIME-WAIT" and s["tw_ns"] is None and d.str("event") != "gone":
            s["tw_ns"] = d.int("t_ns")
    return out


# ---- the reuse rule ----------------------------------------------------------------------------

def reuse_rule(sysctls, path):
    """tcp_twsk_unique()'s clock: with tcp_tw_reuse_delay (ms), reusable once tcp_clock_ms() >
    tw_entry_stamp + delay, the entry stamped in ms when the FIN came; without it, once
    ktime_get_seconds() > tw_ts_recent_stamp, the second the FIN came."""
    d = t.sysctl_int(sysctls, "net.ipv4.tcp_tw_reuse_delay", path, 1)
    if d is None:
        return {"kind": "seconds", "delay_ms": None,
                "text": "tcp_tw_reuse_delay absent: reusable once ktime_get_seconds() > the "
                        "second its TIME-WAIT began (tw_ts_recent_stamp): within (0, 1] s"}
    return {"kind": "ms", "delay_ms": d,
            "text": f"tcp_tw_reuse_delay {d} ms: reusable once tcp_clock_ms() > its TIME-WAIT "
                    f"entry (tw_entry_stamp, ms) + {d}: from {d} to {d + 1} ms after it"}


def reusable_ns(entry_ns, rule):
    """The first CLOCK_MONOTONIC ns at which a TIME-WAIT socket that began at entry_ns passes."""
    if rule["kind"] == "ms":
        return (entry_ns // 1_000_000 + rule["delay_ms"] + 1) * 1_000_000
    return (entry_ns // 1_000_000_000 + 1) * 1_000_000_000


# ---- one part -------------------------------------------------------------------------------

def part(rawdir, name, rule, watch, prev):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    needs = NEEDS.get(name, ())
    has = lambda x: x in needs  # noqa: E731  (a file this part must have, refused if missing)
    rows = connects(f("client.txt"))
    if has("last.txt"):
        rows += [dict(x, i=len(rows) + 1) for x in connects(f("last.txt"))[:1]]
    cap = pkt.read_complete_capture(f("capture.txt"))
    cc = conns(cap)
    t0 = rows[0]["t_ns"]
    for c in cc:
        w = watch.get((c["local"], c["packets"][0]["dst"]))
        c["sw_tw_ns"] = w["tw_ns"] if w else None
        c["sw_first_state"] = w["first_state"] if w else None
    cl, sv = tw.read_both_counters(rawdir, f"{name}-", C_COUNTERS, S_COUNTERS)
    r = {"part": name, "rows": rows, "t0": t0, "capture": cap, "conns": cc,
         "counters": cl, "server_counters": sv, "sockstat": sockstat(f("sockstat.txt")),
         "tw": tw_sockets(f("tw.txt")) if has("tw.txt") else None,
         "after": tw_sockets(f("after-tw.txt")) if has("after-tw.txt") else None,
         "port": cap["ready"].int("port", 1, 65535), "iface": cap["ready"].str("iface")}
    for c in cc:
        # a close tcp_max_tw_buckets refused left no TIME-WAIT socket (sockwatch never saw one)
        c["tw_left"] = name != "buckets" or c["sw_tw_ns"] is not None
    # the poll's attempts are numbered on from the part's connect()s (each is a peer -n 1)
    r["poll_rows"] = ([dict(x, i=len(rows) + k + 1) for k, x in enumerate(connects(f("poll.txt")))]
                      if has("poll.txt") else [])
    pair(rows + r["poll_rows"], cc, f("capture.txt"), more=name == "bound")
    if r["poll_rows"]:
        r["poll"] = poll(f("poll.txt"), r["poll_rows"], holders(cc, r["poll_rows"][0]["i"]), rule)
    if name in ("wire-again", "reuse1-old"):
        r["held"] = held(prev["wire"], rows[0], rule)
    return r


def pair(rows, conns, path, more=False):
    """Each connection of the capture to the connect() that made it: the connect()s of a part
    run one after another, and each success sends one SYN first, so the k-th success made the
    capture's k-th connection (c["i"] = its connect()'s number).  By order, not by time: the
    capture's clock is CLOCK_MONOTONIC only through an offset measured once, so a SYN's time
    can fall a little before the connect() that sent it began.  more: the capture may hold
    later connections than these rows (the bound part's bind() again), numbered on."""
    oks = [x for x in sorted(rows, key=lambda x: x["i"]) if x["ret"] == 0]
    if len(oks) > len(conns) or (len(oks) < len(conns) and not more):
        raise t.RawError(f"{path}: {len(conns)} connections, but {len(oks)} connect()s succeeded")
    for k, c in enumerate(conns):
        x = oks[k] if k < len(oks) else None
        if x is not None and x["local"] != c["local"]:
            raise t.RawError(f"{path}: connection {c['conn']} is from {c['local']}, but "
                             f"connect() #{x['i']}, the success it pairs with, got {x['local']}")
        c["i"] = x["i"] if x is not None else len(rows) + 1 + k - len(oks)


def holders(conns, i, prior=()):
    """Per local port, the last of these connections made before connect() #i (after the
    connections of an earlier part, prior): what holds the port then (its TIME-WAIT socket once
    the server's FIN came; nothing when it never had one: a close tcp_max_tw_buckets refused)."""
    out = {c["local"]: c for c in prior}
    for c in sorted(conns, key=lambda c: c["i"]):
        if c["i"] < i:
            out[c["local"]] = c
    return out


def assassinated(c, at_ns, rfc1337):
    """Whether c's TIME-WAIT socket was gone by at_ns because a RST reached it: with
    tcp_rfc1337 0, tcp_timewait_state_process() kills a TIME-WAIT socket on an in-window RST
    (RFC 1337's "TIME-WAIT assassination"), and its port is free again.  On loopback under load
    the server's delayed ACK of the client's FIN can leave after the server's own FIN, with the
    old sequence number; the client's TIME-WAIT socket answers it with an ACK, and the server,
    whose socket is gone, answers that with the RST."""
    return not rfc1337 and c["srst_ns"] is not None and c["srst_ns"] <= at_ns


def rule_check(rows, prior, conns, rule, lo, hi, may_reuse, rfc1337):
    """Every connect() of a part, in order, against __inet_hash_connect() and
    tcp_twsk_unique(): a success from a port a TIME-WAIT socket held is a takeover, allowed only
    where reuse may happen and only once the rule let it (connect() returned after the earliest
    time the rule allows, reckoned from the capture's FIN); a failure needs every port of the
    range held and, where reuse may happen, none of them reusable yet when it began (the latest
    time the rule allows, the FIN + CLOCK_SLACK_NS, still after it).  A TIME-WAIT socket a
    RST killed (assassinated()) holds nothing from then on.  → (takeovers, bad)."""
    takeovers, bad = [], []
    for x in sorted(rows, key=lambda x: x["t_ns"]):
        held = {k: c for k, c in holders(conns, x["i"], prior).items()
                if c["tw_left"] and not assassinated(c, x["t_ns"], rfc1337)}
        tws = {k: c for k, c in held.items()
               if c["sfin_ns"] is not None and c["sfin_ns"] <= x["t_ns"]}
        if x["ret"] == 0:
            c = tws.get(x["local"])
            if c is None:
                if x["local"] in held:
                    bad.append((x, "took a port whose socket was still closing"))
                continue
            lo_ns = reusable_ns(c["sfin_ns"], rule)
            takeovers.append({"i": x["i"], "local": x["local"], "t_ns": x["t_ns"],
                              "age_ms": round((x["t_ns"] - c["sfin_ns"]) / 1e6, 3),
                              "rule_ns": lo_ns})
            if not may_reuse:
                bad.append((x, "a takeover where no reuse may happen"))
            elif x["end_ns"] < lo_ns:
                bad.append((x, "a takeover before the rule allowed it"))
            continue
        ports = {int(k.rsplit(":", 1)[1]) for k in held}
        if len([q for q in ports if lo <= q <= hi]) != hi - lo + 1:
            bad.append((x, f"failed with {hi - lo + 1 - len(ports)} ports free"))
        elif may_reuse and any(reusable_ns(c["sfin_ns"] + CLOCK_SLACK_NS, rule) <= x["t_ns"]
                               for c in tws.values()):
            bad.append((x, "failed although a TIME-WAIT socket was reusable"))
    return takeovers, bad


def poll(path, rows, held, rule):
    """The poll's connect()s beside the rule: the TIME-WAIT sockets that held the ports when
    it began (held: holders()) pass from threshold_ns on, the first of them (reckoned from
    their server FINs in the capture); the first success, and whose TIME-WAIT socket it took."""
    entries = [c["sfin_ns"] for c in held.values() if c["sfin_ns"] is not None]
    if not entries:
        raise t.RawError(f"{path}: no FIN from the server in the capture before the poll: no "
                         "TIME-WAIT began")
    thr = min(reusable_ns(e, rule) for e in entries)
    fails = [x for x in rows if x["ret"] != 0]
    ok = next((x for x in rows if x["ret"] == 0), None)
    out = {"attempts": len(rows), "failed": len(fails),
           "errnos": sorted({x["errno"] for x in fails}), "threshold_ns": thr,
           "first_ns": rows[0]["t_ns"], "last_ns": rows[-1]["t_ns"],
           "last_fail_ns": fails[-1]["t_ns"] if fails else None,
           "ok": ok, "reused": None, "after_threshold_failed": sum(
               1 for x in fails if x["t_ns"] > thr + CLOCK_SLACK_NS)}
    if ok is not None and ok["local"] in held and held[ok["local"]]["sfin_ns"] is not None:
        e = held[ok["local"]]["sfin_ns"]
        out["reused"] = {"local": ok["local"], "entry_ns": e,
                         "age_ms": round((ok["t_ns"] - e) / 1e6, 3),
                         "reusable_ns": reusable_ns(e, rule)}
    return out


def poll_freed(p, held, rfc1337):
    """Where the poll's first success took a port whose TIME-WAIT socket a RST had killed
    before it began (assassinated()), that port was simply free: nothing was taken over, so
    the success is not a reuse.  p["freed"] names it (its local and the RST's time)."""
    ok, p["freed"] = p["ok"], None
    c = held.get(ok["local"]) if ok is not None else None
    if c is not None and assassinated(c, ok["t_ns"], rfc1337):
        p["freed"], p["reused"] = {"local": ok["local"], "rst_ns": c["srst_ns"]}, None


def held(wire, row, rule):
    """For a connect() to the wire part's server port: how old the TIME-WAIT sockets of the
    wire part were then (from their server FINs), against the delay."""
    ages = [(row["t_ns"] - c["sfin_ns"]) / 1e6 for c in wire["conns"] if c["sfin_ns"]]
    thr = min(reusable_ns(c["sfin_ns"], rule) for c in wire["conns"] if c["sfin_ns"])
    out = {"youngest_ms": round(min(ages), 3), "oldest_ms": round(max(ages), 3),
           "past_threshold_ms": round((row["t_ns"] - thr) / 1e6, 3), "reused": None}
    if row["ret"] == 0:
        c = next((c for c in wire["conns"] if c["local"] == row["local"]), None)
        if c is not None and c["sfin_ns"]:
            out["reused"] = {"local": row["local"],
                             "age_ms": round((row["t_ns"] - c["sfin_ns"]) / 1e6, 3)}
    return out


def bound_part(rawdir, rule, watch):
    """bind() before connect(): the first connection from the bound port, its TIME-WAIT socket,
    then the same bind() without and with SO_REUSEADDR and, where it binds, the connect()."""
    f = lambda s: os.path.join(rawdir, f"bound-{s}")  # noqa: E731
    r = part(rawdir, "bound", rule, watch, None)
    first = r["rows"][0]
    if first["ret"] != 0:
        raise t.RawError(f"{f('client.txt')}: the first connect() from the bound port failed")
    c0 = next((c for c in r["conns"] if c["local"] == first["local"]), None)
    if c0 is None or c0["sfin_ns"] is None:
        raise t.RawError(f"{f('capture.txt')}: no close of {first['local']}")
    r["entry_ns"] = c0["sfin_ns"]
    r["again"] = {}
    for ra in (0, 1):
        p = read_peer(f(f"r{ra}.txt"))
        if p["bind"] is not None:
            b = p["bind"]
            r["again"][ra] = {"bind": b.str("errno"), "connect": None}
        elif p["connects"]:
            x = connect_row(p["connects"][0])
            r["again"][ra] = {"bind": None, "connect": x,
                              "age_ms": round((x["t_ns"] - c0["sfin_ns"]) / 1e6, 3)}
        else:
            raise t.RawError(f"{f(f'r{ra}.txt')}: neither `bind` nor `connect`")
    return r


def bound_lines(r, rule):
    x = r["rows"][0]
    lines = [f"first: bind() to port {x['local'].rsplit(':', 1)[1]} with SO_REUSEADDR, connect() "
             f"ok from {x['local']}, closed; its TIME-WAIT began at {ms(r, r['entry_ns'])} ms "
             "(the server's FIN)"]
    for ra in (0, 1):
        a = r["again"][ra]
        if a["bind"] is not None:
            lines.append(f"again, SO_REUSEADDR={ra}: bind() failed with {a['bind']}")
            continue
        c = a["connect"]
        res = "ok" if c["ret"] == 0 else c["errno"]
        lines.append(f"again, SO_REUSEADDR={ra}: bind() ok, connect() {res} at {ms(r, c['t_ns'])} "
                     f"ms, {a['age_ms']:.3f} ms into the TIME-WAIT"
                     + (f" (the reuse rule's delay: {rule['delay_ms']} ms)"
                        if rule["delay_ms"] else ""))
    return lines


def bind_part(rawdir, name):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    old = read_peer(f("server.txt"))
    if old["ready"] is None:
        raise t.RawError(f"{f('server.txt')}: no `ready` line: the old listener never listened")
    out = {"part": name, "old_reuse": old["ready"].int("reuseaddr", 0, 1),
           "port": int(old["ready"].str("listen").rsplit(":", 1)[1]),
           "tw": tw_sockets(f("tw.txt")), "new": {}}
    for r in (0, 1):
        p = read_peer(f(f"new{r}.txt"), need_exit=False)
        if p["bind"] is not None:
            b = p["bind"]
            out["new"][r] = {"reuseaddr": b.int("reuseaddr", 0, 1), "ret": b.int("ret", -1, 0),
                             "errno": b.str("errno")}
        elif p["ready"] is not None:
            out["new"][r] = {"reuseaddr": p["ready"].int("reuseaddr", 0, 1), "ret": 0,
                             "errno": None}
        else:
            raise t.RawError(f"{f(f'new{r}.txt')}: neither `bind` nor `ready`")
        if out["new"][r]["reuseaddr"] != r:
            raise t.RawError(f"{f(f'new{r}.txt')}: reuseaddr={out['new'][r]['reuseaddr']}, "
                             f"not {r}")
    out["counters"], out["server_counters"] = tw.read_both_counters(
        rawdir, f"{name}-", C_COUNTERS, S_COUNTERS)
    out["capture"] = pkt.read_complete_capture(f("capture.txt"))
    return out


# ---- text -----------------------------------------------------------------------------------

def ms(r, ns):
    return "-" if ns is None else f"{(ns - r['t0']) / 1e6:.3f}"


def conn_lines(r):
    lines = [f"  {'#':>2} {'t_ms':>9} {'local':<21} {'result':<13} {'fin c>s':>9} "
             f"{'fin s>c':>9} {'sw TIME-WAIT':>12} {'first seen':<10} {'rst c>s':>7}"]
    by_local = {}
    for c in r["conns"]:
        by_local.setdefault(c["local"], []).append(c)
    for x in r["rows"]:
        c = by_local.get(x["local"], [None]).pop(0) if x["local"] else None
        res = "ok" if x["ret"] == 0 else x["errno"]
        if c is None:
            lines.append(f"  {x['i']:>2} {ms(r, x['t_ns']):>9} {x['local'] or '-':<21} {res:<13}")
            continue
        lines.append(f"  {x['i']:>2} {ms(r, x['t_ns']):>9} {x['local']:<21} {res:<13} "
                     f"{ms(r, c['cfin_ns']):>9} {ms(r, c['sfin_ns']):>9} "
                     f"{ms(r, c['sw_tw_ns']):>12} {c['sw_first_state'] or '-':<10} {c['crst']:>7}")
    return lines


def ports_line(r, lo, hi):
    got = [int(x["local"].rsplit(":", 1)[1]) for x in r["rows"] if x["ret"] == 0]
    inside = sum(1 for p in got if lo <= p <= hi)
    even = [p for p in got if p % 2 == 0]
    twice = sorted({p for p in got if got.count(p) > 1})
    return (f"ports: {len(got)} connect()s took {len(set(got))} distinct ports, {inside} of "
            f"them in {lo}..{hi}; in order: {' '.join(map(str, got))} ({len(even)} even)" +
            (f"; taken again at once: {' '.join(map(str, twice))}" if twice else ""))


def tw_lines(r):
    if r["tw"] is None:
        return []
    socks = r["tw"]
    if not socks:
        return ["TIME-WAIT sockets to this port (sockwatch -1): none"]
    exp = [s["expires_ms"] for s in socks]
    when = (f"before connect() #{len(r['rows'])}" if len(r["rows"]) > 1 else
            "after the connect()")
    return [f"sockets to this port {when} (sockwatch -1, every state): {len(socks)}, all "
            f"TIME-WAIT, ports {' '.join(s['local'].rsplit(':', 1)[1] for s in socks)}, "
            f"timer timewait, expires_ms {min(exp)}..{max(exp)}"]


def poll_lines(r, rule):
    p = r.get("poll")
    if p is None:
        return []
    lines = [f"poll (a connect() every ~20 ms, peer -n 1, numbered on from "
             f"#{len(r['rows']) + 1}): {p['attempts']} attempts, "
             f"{p['failed']} failed ({', '.join(p['errnos']) or 'none'})"]
    lines.append(f"  the first of the part's TIME-WAIT sockets passes the rule at "
                 f"{ms(r, p['threshold_ns'])} ms (from its server FIN in the capture)")
    if p["last_fail_ns"] is not None:
        lines.append(f"  the last failed attempt began at {ms(r, p['last_fail_ns'])} ms")
    ok = p["ok"]
    if ok is None:
        lines.append(f"  none succeeded: the last attempt began at {ms(r, p['last_ns'])} ms; "
                     f"{p['after_threshold_failed']} attempts failed after the rule's time")
    else:
        lines.append(f"  the first success began at {ms(r, ok['t_ns'])} ms (connect() took "
                     f"{ok['us']} µs), from {ok['local']}")
        u, f = p["reused"], p["freed"]
        if f is not None:
            lines.append(f"  {f['local']} was free: a RST from the server had killed its "
                         f"TIME-WAIT socket at {ms(r, f['rst_ns'])} ms (below), so nothing was "
                         f"taken over")
        if u is not None:
            lines.append(f"  {u['local']} had been in TIME-WAIT since {ms(r, u['entry_ns'])} ms "
                         f"(its server FIN): reused {u['age_ms']:.3f} ms later")
    return lines


def check_lines(r):
    if "bad" not in r:
        return []
    sc = r["sysctls"]
    why = (f"tcp_tw_reuse {sc['net.ipv4.tcp_tw_reuse']}, tcp_timestamps "
           f"{sc['net.ipv4.tcp_timestamps']}, {'lo' if r['iface'] == 'lo' else 'not loopback'}")
    tk = r["takeovers"]
    lines = [f"reuse here: {'may happen' if r['may_reuse'] else 'none'} ({why}); "
             f"{len(tk)} connect()s took over a TIME-WAIT socket" +
             "".join(f"{'; ' if k else ': '}#{x['i']} {x['local']} {x['age_ms']:.3f} ms into it"
                     for k, x in enumerate(tk))]
    n = len(r["rows"]) + len(r["poll_rows"])
    lines += [f"  a RST from the server reached {c['local']}'s TIME-WAIT socket at "
              f"{ms(r, c['srst_ns'])} ms (tcp_rfc1337 0: tcp_timewait_state_process() kills it, "
              f"the TIME-WAIT assassination of RFC 1337): its port was free again"
              for c in r["conns"] if assassinated(c, c["srst_ns"] or 0, r["rfc1337"])]
    if r["bad"]:
        lines += [f"  DISAGREES with the port search and the rule: #{x['i']} "
                  f"({'ok' if x['ret'] == 0 else x['errno']}): {w}" for x, w in r["bad"]]
    else:
        lines.append(f"  all {n} connect()s as __inet_hash_connect() and tcp_twsk_unique() say")
    return lines


def held_lines(r):
    h = r.get("held")
    if h is None:
        return []
    x = r["rows"][0]
    lines = [f"the wire part's TIME-WAIT sockets were {h['youngest_ms']:.3f} to "
             f"{h['oldest_ms']:.3f} ms old at this connect(); the first passed the reuse rule's "
             f"time {h['past_threshold_ms']:.3f} ms before it"]
    res = "succeeded" if x["ret"] == 0 else f"failed with {x['errno']}"
    lines.append(f"connect() {res}" + (f" from {x['local']}" if x["local"] else ""))
    if h["reused"] is not None:
        lines.append(f"  {h['reused']['local']}: its TIME-WAIT socket, {h['reused']['age_ms']:.3f}"
                     " ms old, was taken over")
    return lines


def counter_lines(cl, sv, loopback=False):
    lines = ["counters (each side read in its own namespace" +
             ("; on lo both ends are in the client's" if loopback else "") + "):"]
    lines += tw.counter_lines(cl, sv, SHOWN)
    return lines


def part_lines(r, rule, lo, hi):
    name = r["part"]
    ok = sum(1 for x in r["rows"] if x["ret"] == 0)
    fail = [x for x in r["rows"] if x["ret"] != 0]
    lines = [f"== {name}: {TITLES[name]} ({r['iface']}, server port {r['port']})"]
    lines.append(f"connect()s: {len(r['rows'])}, {ok} succeeded" +
                 "".join(f"; #{x['i']} failed with {x['errno']}" for x in fail))
    if name in EXHAUST:
        lines.append("each connection (t_ms from the first connect(); fin: the capture's first FIN "
                     "each way; sw TIME-WAIT: when sockwatch first saw it in TIME-WAIT):")
        lines += conn_lines(r) + [ports_line(r, lo, hi)]
        opts = {c["syn_opts"] for c in r["conns"] if c["syn_opts"]}
        ts = all("ts" in o.split(",") for o in opts)
        lines.append(f"SYN options: {' | '.join(sorted(opts))}" +
                     ("" if ts else " (no ts: the connections carry no timestamps)"))
    lines += tw_lines(r) + poll_lines(r, rule) + held_lines(r) + check_lines(r)
    if r["after"] is not None:
        lines.append(f"sockets to this port once the part's closes were done (sockwatch -1): "
                     f"{len(r['after'])}, all TIME-WAIT")
    if name == "bound":
        lines += bound_lines(r, rule)
    lines.append(f"/proc/net/sockstat (client namespace, after the part): tw {r['sockstat']['tw']}")
    lines += counter_lines(r["counters"], r["server_counters"], r["iface"] == "lo")
    return lines


def bind_lines(binds):
    lines = ["== bind(): the server closed first, its TIME-WAIT socket holds the listening port; "
             "a new listener binds it",
             f"  {'old listener':<28} {'TIME-WAIT socket (sockwatch -1)':<44} "
             f"{'new SO_REUSEADDR=0':<19} new SO_REUSEADDR=1"]
    for b in binds:
        tws = ", ".join(f"{s['local']} > {s['peer']} expires_ms {s['expires_ms']}"
                        for s in b["tw"]) or "none"
        res = ["bound" if b["new"][r]["ret"] == 0 else b["new"][r]["errno"] for r in (0, 1)]
        lines.append(f"  {'SO_REUSEADDR=%d, port %d' % (b['old_reuse'], b['port']):<28} "
                     f"{tws:<44} {res[0]:<19} {res[1]}")
    return lines


def sysctl_lines(cs, ss, changes):
    lines = ["sysctls each side read in its namespace before the unit changed any:",
             f"  {'sysctl':<34} {'client':<16} server"]
    lines += [f"  {k:<34} {v if v is not None else 'absent':<16} "
              f"{ss.get(k) if ss.get(k) is not None else 'absent'}" for k, v in cs.items()]
    lines.append("changed in the client's namespace (sysctl -w, read back), before the part:")
    lines += [f"  {p:<12} {kv}" for p, kv in changes]
    return lines


def read_changes(path):
    """raw/sysctl-changes.txt → [(PART, "net.X.Y=VALUE")] in the order set: for the part PART
    and the ones after it; PART-end: set back after PART."""
    out = []
    for i, line in enumerate(t.read_lines(path), 1):
        p, _, kv = line.partition(" ")
        base = p[:-4] if p.endswith("-end") else p
        if base not in ("setup",) + PARTS + ("bound",) or \
                not re.fullmatch(r"net\.[a-z0-9_.]+=.*", kv):
            raise t.RawError(f"{path}: line {i}: not `PART net.X.Y=VALUE`")
        out.append((p, kv))
    return out


def effective(cs, changes, name):
    """The client namespace's sysctls while part `name` ran: the values read at the start,
    then every change set for an earlier part or for this one (PART-end: after PART)."""
    order = ("setup",) + PARTS + ("bound",)
    at = order.index(name)
    out = dict(cs)
    for p, kv in changes:
        end = p.endswith("-end")
        pos = order.index(p[:-4] if end else p) + (0.5 if end else 0)
        if pos <= at:
            k, _, v = kv.partition("=")
            out[k] = v
    return out


def may_reuse(sysctls, iface, path):
    """tcp_twsk_unique(): reuse 1, or 2 on loopback, and timestamps (no tw_ts_recent_stamp
    without them)."""
    reuse = t.sysctl_int(sysctls, "net.ipv4.tcp_tw_reuse", path, 0, 2)
    ts = t.sysctl_int(sysctls, "net.ipv4.tcp_timestamps", path, 0, 2)
    return bool(ts) and (reuse == 1 or (reuse == 2 and iface == "lo"))


def ss_lines(rawdir, wire):
    lines = t.read_lines(os.path.join(rawdir, "wire-ss.txt"), optional=True)
    if lines is None:
        return ["ss: not recorded (no ss where this ran)"], None
    peer = f"{wire['conns'][0]['packets'][0]['dst']}" if wire["conns"] else "?"
    n = sum(1 for x in lines if x.split()[-1:] == [peer])
    return [f"ss -tan state time-wait (client namespace, after the wire part), an independent "
            f"view: {n} sockets to {peer}; sockwatch -1 saw {len(wire['tw'] or [])}"], n


def part_json(r):
    fail = [x for x in r["rows"] if x["ret"] != 0]
    res = r["rows"][-1]
    if r.get("poll"):
        res = r["poll"]["ok"] or {"ret": -1, "errno": r["poll"]["errnos"][-1]}
    extra = {}
    if "again" in r:
        res = r["again"][1]["connect"] or {"ret": -1, "errno": r["again"][1]["bind"]}
        extra = {"entry_ms": round((r["entry_ns"] - r["t0"]) / 1e6, 3), "again": {
            str(k): {"bind_errno": a["bind"], "age_ms": a.get("age_ms"),
                     "connect": None if a["connect"] is None else
                     {k2: a["connect"][k2] for k2 in ("ret", "errno", "local", "us")}}
            for k, a in r["again"].items()}}
    return {"port": r["port"], "iface": r["iface"],
            "result": "ok" if res["ret"] == 0 else "error", "errno": res.get("errno"),
            "connects": [{k: x[k] for k in ("i", "ret", "errno", "local", "us")}
                         | {"t_ms": round((x["t_ns"] - r["t0"]) / 1e6, 3)} for x in r["rows"]],
            "failed": [x["i"] for x in fail],
            "closes": [{"local": c["local"], "syn_opts": c["syn_opts"],
                        **{k[:-3] + "_ms": None if c[k] is None else
                           round((c[k] - r["t0"]) / 1e6, 3)
                           for k in ("syn_ns", "cfin_ns", "sfin_ns", "sw_tw_ns")},
                        "first_state": c["sw_first_state"], "client_rsts": c["crst"],
                        "server_rst_ms": None if c["srst_ns"] is None else
                        round((c["srst_ns"] - r["t0"]) / 1e6, 3)}
                       for c in r["conns"]],
            "time_wait": r["tw"], "time_wait_after": r["after"], "sockstat": r["sockstat"],
            "poll": None if not r.get("poll") else {
                (k[:-3] + "_ms" if k.endswith("_ns") else k):
                (round((v - r["t0"]) / 1e6, 3) if k.endswith("_ns") and v is not None else v)
                for k, v in r["poll"].items() if k not in ("ok", "reused", "freed")}
            | {"ok": None if not r["poll"]["ok"] else {
                "t_ms": round((r["poll"]["ok"]["t_ns"] - r["t0"]) / 1e6, 3),
                "local": r["poll"]["ok"]["local"], "us": r["poll"]["ok"]["us"]},
               "reused": None if not r["poll"]["reused"] else {
                   "local": r["poll"]["reused"]["local"], "age_ms": r["poll"]["reused"]["age_ms"],
                   "entry_ms": round((r["poll"]["reused"]["entry_ns"] - r["t0"]) / 1e6, 3)},
               "freed": None if not r["poll"]["freed"] else {
                   "local": r["poll"]["freed"]["local"],
                   "rst_ms": round((r["poll"]["freed"]["rst_ns"] - r["t0"]) / 1e6, 3)}},
            "held": r.get("held"), "counters": r["counters"],
            "sysctls": {k: t.sysctl_value(v) for k, v in r["sysctls"].items()}
            if "sysctls" in r else None, "may_reuse": r.get("may_reuse"),
            "takeovers": [{k: x[k] for k in ("i", "local", "age_ms")}
                          for x in r.get("takeovers", [])],
            "rule_disagrees": [{"i": x["i"], "why": w} for x, w in r.get("bad", [])],
            "server_counters": r["server_counters"], "capture": pkt.capture_json(r["capture"]),
            **extra}


def ladder(runs):
    """The ladder: the wire part's first connection (an orderly close into TIME-WAIT) and the
    buckets part's first connection sockwatch never saw in TIME-WAIT (inet_twsk_alloc()
    refused: the same packets, no socket left behind)."""
    rows = []
    w = runs["wire"]
    if w["conns"]:
        c = w["conns"][0]
        rows += [{"sep": "wire: connection 1, the client closes first"}]
        rows += pkt.ladder_rows(c["packets"], w["t0"], [(c["sw_tw_ns"], "sockwatch: TIME-WAIT")]
                                if c["sw_tw_ns"] else [])
    b = runs["buckets"]
    over = next((c for c in b["conns"] if c["sw_tw_ns"] is None), None)
    if over is not None:
        rows += [{"sep": f"buckets: {over['local']}, no room for its TIME-WAIT socket"}]
        rows += pkt.ladder_rows(over["packets"], b["t0"])
    return rows


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    need = ("net.ipv4.ip_local_port_range", "net.ipv4.tcp_tw_reuse",
            "net.ipv4.tcp_tw_reuse_delay", "net.ipv4.tcp_max_tw_buckets",
            "net.ipv4.tcp_timestamps", "net.ipv4.tcp_rfc1337")
    spath = os.path.join(rawdir, "sysctls.txt")
    cs = t.read_sysctl_file(spath, need)
    ss = t.read_sysctl_file(os.path.join(rawdir, "server-sysctls.txt"), need)
    changes = read_changes(os.path.join(rawdir, "sysctl-changes.txt"))
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    lo, hi = prm.int("lo", 1, 65535), prm.int("hi", 1, 65535)
    # the rule as the parts ran: tcp_tw_reuse_delay as the setup left it (the knob reuse_delay
    # sets it there when it is not the namespace's own value)
    rule = reuse_rule(effective(cs, changes, "setup"), spath)
    if ("setup", f"net.ipv4.ip_local_port_range={lo} {hi}") not in changes:
        raise t.RawError(f"{os.path.join(rawdir, 'sysctl-changes.txt')}: no `setup "
                         f"net.ipv4.ip_local_port_range={lo} {hi}` (params.txt's range)")
    watch = watch_tw(os.path.join(rawdir, "sockwatch.txt"))
    wire = tw.read_wire(rawdir)
    runs = {}
    for name in PARTS:
        runs[name] = part(rawdir, name, rule, watch, runs)
    runs["bound"] = bound_part(rawdir, rule, watch)
    runs["bound"]["sysctls"] = effective(cs, changes, "bound")
    for name in PARTS:
        r = runs[name]
        r["sysctls"] = effective(cs, changes, name)
        r["may_reuse"] = may_reuse(r["sysctls"], r["iface"], spath)
        prior = runs["wire"]["conns"] if name in ("wire-again", "reuse1-old") else []
        r["rfc1337"] = t.sysctl_int(r["sysctls"], "net.ipv4.tcp_rfc1337", spath, 0, 1)
        r["takeovers"], r["bad"] = rule_check(r["rows"] + r["poll_rows"], prior, r["conns"],
                                              rule, lo, hi, r["may_reuse"], r["rfc1337"])
        if r.get("poll"):
            poll_freed(r["poll"], holders(r["conns"], r["poll_rows"][0]["i"]), r["rfc1337"])
    binds = [bind_part(rawdir, b) for b in BINDS]
    before = sockstat(os.path.join(rawdir, "buckets-sockstat-before.txt"))
    ssl, ss_n = ss_lines(rawdir, runs["wire"])
    lines = [f"{NAME}: {hi - lo + 1} local ports, a client that closes first, TIME-WAIT",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire)), ""]
    lines += sysctl_lines(cs, ss, changes) + [f"reuse rule (tcp_twsk_unique): {rule['text']}",
                                              "t_ms below: from each part's first connect()", ""]
    for name in PARTS + ("bound",):
        r = runs[name]
        lines += part_lines(r, rule, lo, hi)
        if name == "buckets":
            lines.append(f"/proc/net/sockstat before the part: tw {before['tw']}; "
                         f"tcp_max_tw_buckets set to tw + {prm.int('buckets_extra')}")
        lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{name}-capture.txt") + [""]
    lines += bind_lines(binds) + [""] + ssl + [""]
    rows = ladder(runs)
    lines += ["ladder (t_ms from each part's first connect()):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    main = runs["wire"]
    last = main["rows"][-1]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "result": "ok" if last["ret"] == 0 else "error",
           "errno": last["errno"], "elapsed_s": None,
           "sysctls": {k: t.sysctl_value(v) for k, v in cs.items()},
           "server_sysctls": {k: t.sysctl_value(v) for k, v in ss.items()},
           "changed": [{"part": p, "sysctl": kv.split("=", 1)[0],
                        "value": t.sysctl_value(kv.split("=", 1)[1])} for p, kv in changes],
           "port_range": [lo, hi], "count": prm.int("count", 1),
           "reuse_rule": rule, "clock_slack_ns": CLOCK_SLACK_NS,
           "counters": main["counters"], "server_counters": main["server_counters"],
           "parts": {n: part_json(r) for n, r in runs.items()},
           "bind": {b["part"]: {"old_reuseaddr": b["old_reuse"], "port": b["port"],
                                "time_wait": b["tw"],
                                "new": {str(k): v for k, v in b["new"].items()},
                                "counters": b["counters"],
                                "server_counters": b["server_counters"],
                                "capture": pkt.capture_json(b["capture"])} for b in binds},
           "buckets_tw_before": before["tw"], "ss_time_wait": ss_n, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
