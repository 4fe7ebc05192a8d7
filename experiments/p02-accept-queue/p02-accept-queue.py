#!/usr/bin/python3
"""p02-accept-queue report: a listener that never accepts, on the wire.  One part per case
(seq, burst, abort, somaxconn, flood-cookies, flood-drop, flood-quarter): each client as it
saw itself (its connect(), send(), recv() and its socket) beside what the server holds for it
(a child in the accept queue, a request in SYN-RECV, or nothing), the LISTEN socket's
Recv-Q/Send-Q, both sides' counters each read in its own namespace, what reached the server's
end of the veth, and the kernel log line of a flood.  Every number from raw/."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p02-accept-queue"
# part, what it does, its client groups in the order they ran (raw/PART-GROUP.txt)
PARTS = (
    ("seq", "backlog N, N+3 clients one after another", ("clients",)),
    ("burst", "N-1 queued, then N+1 whose SYNs find room and whose ACKs come after the queue "
     "is full", ("pre", "clients")),
    ("abort", "the same with tcp_abort_on_overflow=1", ("pre", "clients")),
    ("somaxconn", "listen(1000) under a small net.core.somaxconn", ("clients",)),
    ("flood-cookies", "a flood, then one client: tcp_syncookies=1", ("flood", "client")),
    ("flood-drop", "a flood, then one client: tcp_syncookies=0, a large tcp_max_syn_backlog",
     ("flood", "client")),
    ("flood-quarter", "a flood, then one client: tcp_syncookies=0, a small "
     "tcp_max_syn_backlog", ("flood", "client")),
)
GROUP_TITLE = {"pre": "queued first", "clients": "clients", "flood": "flood", "client": "client"}
COUNTERS = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans", "TcpRetransSegs",
            "TcpOutRsts", "TcpEstabResets", "TcpExtEmbryonicRsts", "TcpExtSyncookiesSent",
            "TcpExtSyncookiesRecv", "TcpExtSyncookiesFailed", "TcpExtTCPReqQFullDoCookies",
            "TcpExtTCPReqQFullDrop", "TcpActiveOpens", "TcpPassiveOpens", "TcpAttemptFails")
SYSCTLS = ("somaxconn", "tcp_max_syn_backlog", "tcp_syncookies", "tcp_abort_on_overflow",
           "tcp_synack_retries", "tcp_syn_retries", "tcp_no_metrics_save")
CONSTANTS = ("backlog_n", "bytes", "flood", "flood_backlog", "base")
LADDER_PARTS = ("burst", "abort")


def read_sysctls(path):
    """raw/PART-sysctls.txt → {"server": {short name: int}, "client": {...}, "constant": {...}}."""
    out = {"server": {}, "client": {}, "constant": {}}
    for i, line in enumerate(t.read_lines(path), 1):
        side, _, rest = line.partition(" ")
        if side == "constant":
            d = t.Fields(path, t.kv(rest))
            out["constant"] = {k: d.int(k) for k in CONSTANTS}
        elif side in ("server", "client"):
            k, sep, v = rest.partition("=")
            if not sep:
                raise t.RawError(f"{path}: line {i}: not `SIDE NAME=VALUE`")
            out[side][k.rsplit(".", 1)[-1]] = t.num(v, f"{path}: {k}", 0)
        else:
            raise t.RawError(f"{path}: line {i}: not `server|client NAME=VALUE` or `constant`")
    for side in ("server", "client"):
        for k in SYSCTLS:
            if not isinstance(out[side].get(k), int):
                raise t.RawError(f"{path}: no integer {side} {k}")
    if not out["constant"]:
        raise t.RawError(f"{path}: no `constant` line")
    return out


def read_clients(path):
    """A queue_clients output → {"start_ns", "conns" [in order of i], "ready", "sends",
    "recvs", "after"}; it must have its ready and end lines."""
    lines = t.read_kv_lines(path)
    heads = [d for d in lines if "start_ns" in d]
    if not heads:
        raise t.RawError(f"{path}: no `start start_ns=` line: not a queue_clients output")
    out = {"start_ns": heads[0].int("start_ns"), "n": heads[0].int("n", 1), "conns": {},
           "sends": {}, "recvs": {}, "after": {}, "ready": None, "path": path}
    raw = t.read_lines(path)
    if not raw or not raw[-1].startswith("end "):
        raise t.RawError(f"{path}: no `end` line: queue_clients did not finish")
    for line, d in zip(raw, lines):
        word = line.split(" ", 1)[0]
        if word == "conn":
            c = {"i": d.int("i"), "local": d.str("local"), "result": d.str("result"),
                 "errno": d.str("errno"), "t_ms": d.float("t_ms")}
            if c["result"] not in ("established", "pending", "error"):
                raise t.RawError(f"{path}: conn i={c['i']}: result={c['result'][:20]}")
            out["conns"][c["i"]] = c          # a late connect replaces its pending line
        elif word in ("send", "recv", "send-after"):
            key = {"send": "sends", "recv": "recvs", "send-after": "after"}[word]
            out[key][d.int("i")] = {"ret": d.int("ret", -1), "errno": d.str("errno"),
                                    "t_ms": d.float("t_ms")}
        elif word == "ready":
            out["ready"] = {k: d.int(k) for k in ("established", "pending", "error")}
            out["ready"]["t_ms"] = d.float("t_ms")
        elif word == "result=interrupted":
            raise t.RawError(f"{path}: queue_clients was interrupted")
    if out["ready"] is None:
        raise t.RawError(f"{path}: no `ready` line")
    if sorted(out["conns"]) != list(range(out["n"])):
        raise t.RawError(f"{path}: want one conn line for each of the {out['n']} clients")
    return out


def read_nft(path):
    """The client's nft table with its rule's counter, or None (the part had no fault)."""
    lines = t.read_lines(path, optional=True)
    if lines is None:
        return None
    rules = tw.nft_rules(lines, path)
    if len(rules) != 1:
        raise t.RawError(f"{path}: want one rule with a counter, found {len(rules)}")
    return {k: rules[0][k] for k in ("rule", "packets", "verdict")}


def read_kmsg(path):
    """kmsg_watch output → [{"seq", "level", "msg"}]; it must have its end line."""
    lines = t.read_lines(path, optional=True)
    if lines is None:
        return None
    if not lines or not lines[-1].startswith("end "):
        raise t.RawError(f"{path}: no `end` line: kmsg_watch did not finish")
    out = []
    for line in lines:
        if line.startswith("kmsg "):
            head, sep, msg = line.partition(" msg=")
            if not sep:
                raise t.RawError(f"{path}: a kmsg line without msg=")
            d = t.Fields(path, t.kv(head[len("kmsg "):]))
            out.append({"seq": d.int("seq"), "level": d.int("level", 0, 7), "msg": msg})
    return out


def read_kmsg_open(rawdir):
    """raw/kmsg-open.txt (kmsg_watch -t, then kernel.dmesg_restrict) → {"ret", "errno",
    "dmesg_restrict"}, or None where the run did not record it (every run before it did read
    the kernel log)."""
    path = os.path.join(rawdir, "kmsg-open.txt")
    lines = t.read_lines(path, optional=True)
    if lines is None:
        return None
    if len(lines) != 2 or not lines[0].startswith("open ") or \
            not lines[1].startswith("sysctl kernel.dmesg_restrict="):
        raise t.RawError(f"{path}: want kmsg_watch -t's `open` line, then "
                         "`sysctl kernel.dmesg_restrict=N`")
    f = t.Fields(path, t.kv(lines[0][len("open "):]))
    ret = f.int("ret", -1, 0)
    return {"ret": ret, "errno": None if ret == 0 else f.str("errno"),
            "dmesg_restrict": t.Fields(path, t.kv(lines[1][len("sysctl "):])).int(
                "kernel.dmesg_restrict", 0, 2)}


def own_kmsg(records, port):
    """The kernel log is the machine's, not the namespace's: keep the lines about this part's
    port ("port 192.0.2.2:21205." on 6.18, "port 21205." on 6.1), not another listener's."""
    if records is None:
        return None
    want = re.compile(rf"SYN flooding on port (\S+:)?{port}\.")
    return [k for k in records if want.search(k["msg"])]


def side_of(srv_by_peer, local):
    """What the server holds for the client at local: queued (a child in the accept queue),
    request (SYN-RECV) or nothing."""
    s = srv_by_peer.get(local)
    if s is None:
        return "nothing", None
    if s["state"] == "SYN-RECV":
        return "request", s
    return "queued", s


def seg_counts(segs):
    return {"syn": sum(1 for p in segs if p["dir"] == "c>s" and p["flags"] == "S"),
            "acking": sum(1 for p in segs if p["dir"] == "c>s" and "A" in p["flags"]),
            "synack": sum(1 for p in segs if p["dir"] == "s>c" and p["flags"] == "SA"),
            "rst": sum(1 for p in segs if p["dir"] == "s>c" and "R" in p["flags"])}


def unanswered_syns(segs):
    """The client's SYNs that no SYN-ACK answered, in one connection's segments as the server's
    end saw them: every SYN before the one the first SYN-ACK answered (a full queue dropped
    them: TcpExtListenDrops, and TcpExtTCPReqQFullDrop or TcpExtListenOverflows), or every SYN
    when none came.  A SYN after that SYN-ACK found the request and was not dropped.  Counting
    only the clients still in SYN-SENT at the end undercounts wherever a dropped client got in
    later (the guests: the requests expire after the SYN-ACK's retries and free their slots)."""
    got = []
    for p in segs:
        if p["dir"] == "s>c" and p["flags"] == "SA":
            return got[:-1]
        if p["dir"] == "c>s" and p["flags"] == "S":
            got.append(p)
    return got


def client_rows(part, group, cl, csnap, srv_by_peer, cap, cuts):
    rows = []
    by_local = {d.str("local"): d for d in csnap}
    csnap_ns = csnap[0].int("t_ns") if csnap else None
    for i in sorted(cl["conns"]):
        c = cl["conns"][i]
        s = by_local.get(c["local"])
        # a connect() can return after the client's snapshot was taken (the clients run on until
        # finish() stops them, after the server's snapshot and the counters): its state is then
        # the socket's before connect() returned
        conn_ns = cl["start_ns"] + round(c["t_ms"] * 1e6)
        late = (round((conn_ns - csnap_ns) / 1e6, 1) if c["result"] != "pending" and
                csnap_ns is not None and conn_ns > csnap_ns else None)
        where, srow = side_of(srv_by_peer, c["local"])
        segs = pkt.conn_packets(cap, c["local"])
        lo, hi = ([p for p in segs if p["t_ns"] <= cut] for cut in cuts)
        un = unanswered_syns(segs)
        un_lo, un_hi = (sum(1 for p in un if p["t_ns"] <= cut) for cut in cuts)
        snd, rcv, aft = cl["sends"].get(i), cl["recvs"].get(i), cl["after"].get(i)
        # the server's RSTs to it until the counters were read, in ms after its first SYN-ACK
        sa0 = next((p["t_ns"] for p in segs if p["dir"] == "s>c" and p["flags"] == "SA"), None)
        rst_ms = [round((p["t_ns"] - sa0) / 1e6, 3) for p in hi
                  if p["dir"] == "s>c" and "R" in p["flags"] and sa0 is not None]
        # the server's snapshot (cuts[0]), in ms after that SYN-ACK: a request it held may have
        # expired before it (the capture and sockwatch share CLOCK_MONOTONIC)
        snap_ms = None if sa0 is None else round((cuts[0] - sa0) / 1e6, 3)
        rows.append({
            "group": group, "i": i, "local": c["local"], "connect": c["result"],
            "connect_errno": None if c["errno"] == "-" else c["errno"], "connect_t_ms": c["t_ms"],
            "connect_after_snapshot_ms": late,
            "state": s.str("state") if s else "gone", "send_q": s.int("wq") if s else None,
            "retrans": s.int("retrans") if s else None, "timer": s.str("timer") if s else None,
            # tcp_info (sockwatch since the tcp_info fields): segments sent and not acknowledged;
            # None where this sockwatch or the kernel's struct has none
            "unacked": s.int("unacked", default=None) if s and s.int("info_len", default=0) else None,
            "send": snd, "recv": rcv, "send_after": aft,
            "server": where, "server_state": srow["state"] if srow else None,
            "server_rq": srow["rq"] if srow else None,
            "server_retrans": srow["retrans"] if srow else None,
            "rst_after_synack_ms": rst_ms, "snapshot_after_synack_ms": snap_ms,
            "at_server": dict(seg_counts(hi), syn_unanswered=un_hi),
            "at_server_by_snapshot": dict(seg_counts(lo), syn_unanswered=un_lo)})
    return rows


def one_part(rawdir, name, groups):
    f = lambda x: os.path.join(rawdir, f"{name}-{x}")  # noqa: E731
    sysctls = read_sysctls(f("sysctls.txt"))
    listener = t.listener_ready(f("listener.txt"), "never")
    port = listener.int("port", 1, 65535)
    cap = pkt.read_complete_capture(f("capture.txt"))
    ssnap = [t.socket_row(d) for d in t.read_snapshot(f("end-server.txt"))]
    csnap = t.read_snapshot(f("end-client.txt"))
    listen = [s for s in ssnap if s["state"] == "LISTEN"]
    if len(listen) != 1:
        raise t.RawError(f"{f('end-server.txt')}: want one LISTEN socket, found {len(listen)}")
    srv_by_peer = {s["peer"]: s for s in ssnap if s["state"] != "LISTEN"}
    snap_ns = t.read_snapshot(f("end-server.txt"))[0].int("t_ns")
    mark = t.read_snapshot(f("mark.txt"))
    if not mark:
        raise t.RawError(f"{f('mark.txt')}: no LISTEN line (when the counters had been read)")
    mark_ns = mark[0].int("t_ns")
    if mark_ns < snap_ns:
        raise t.RawError(f"{f('mark.txt')}: t_ns before the snapshot's")
    clients = {g: read_clients(f(f"{g}.txt")) for g in groups}
    rows = []
    for g in groups:
        rows += client_rows(name, g, clients[g], csnap, srv_by_peer, cap, (snap_ns, mark_ns))
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, COUNTERS)
    r = {"part": name, "port": port, "addr": listener.str("addr"),
         "listen_backlog_shown": listener.int("backlog"), "sysctls": sysctls,
         "listen": {"rq": listen[0]["rq"], "wq": listen[0]["wq"]},
         "requests": sum(1 for s in ssnap if s["state"] == "SYN-RECV"),
         "children": sum(1 for s in ssnap if s["state"] not in ("LISTEN", "SYN-RECV")),
         "clients": rows, "counters": cc, "server_counters": sc, "capture": cap,
         "nft": read_nft(f("nft.txt")), "kmsg": own_kmsg(read_kmsg(f("kmsg.txt")), port),
         "start_ns": min(c["start_ns"] for c in clients.values()), "mark_ns": mark_ns,
         "groups": clients}
    if name == "burst":
        sent = [t.socket_row(d) for d in t.read_snapshot(f("sent-client.txt"))]
        r["sent_snapshot"] = [{"local": s["local"], "state": s["state"], "send_q": s["wq"]}
                              for s in sent]
    return r


def dv(d, k):
    v = d.get(k)
    return v if isinstance(v, int) else 0


def summary(r):
    """The part's main facts, by name (the tests and the page read these)."""
    rows = r["clients"]
    cnt = lambda pred: sum(1 for x in rows if pred(x))  # noqa: E731
    out = {"listen_rq": r["listen"]["rq"], "listen_wq": r["listen"]["wq"],
           "requests": r["requests"], "children": r["children"],
           "connected": cnt(lambda x: x["connect"] == "established"),
           "pending": cnt(lambda x: x["connect"] == "pending"),
           "connected_not_queued": cnt(lambda x: x["connect"] == "established" and
                                       x["server"] != "queued"),
           "server": {k: dv(r["server_counters"], k) for k in COUNTERS},
           "client": {k: dv(r["counters"], k) for k in COUNTERS}}
    pend = [x for x in rows if x["connect"] == "pending"]
    unq = [x for x in rows if x["connect"] == "established" and x["server"] != "queued"]
    out["unqueued_send_q"] = [x["send_q"] for x in unq]
    # the packets up to the mark (just after the counters were read), and [up to the snapshot
    # before them, up to the mark]: the counters lie between
    out["bounds"] = {}
    for key, xs, what, f in (("syns_from_pending", pend, "syn", lambda v: v),
                             ("syns_unanswered", rows, "syn_unanswered", lambda v: v),
                             ("acks_from_unqueued", unq, "acking", lambda v: v),
                             ("synacks_beyond_first", rows, "synack", lambda v: max(0, v - 1)),
                             ("rsts_at_server_end", rows, "rst", lambda v: v)):
        lo = sum(f(x["at_server_by_snapshot"][what]) for x in xs)
        out[key] = sum(f(x["at_server"][what]) for x in xs)
        out["bounds"][key] = [lo, out[key]]
    # a request lives through its SYN-ACK and tcp_synack_retries retransmissions, each timeout
    # twice the last from TCP_TIMEOUT_INIT (reqsk_timer_handler()); the server's RSTs after
    # that answer a segment that found no request, only the listener
    retries = r["sysctls"]["server"]["tcp_synack_retries"]
    out["request_lifetime_ms"] = sum(1000 << k for k in range(retries + 1))
    rst_ms = sorted(v for x in rows for v in x["rst_after_synack_ms"])
    out["rst_after_synack_ms"] = [rst_ms[0], rst_ms[-1]] if rst_ms else None
    out["resets_seen"] = cnt(lambda x: x["recv"] is not None and x["recv"]["errno"] == "ECONNRESET")
    return out


def fmt_io(x):
    parts = []
    if x["send"]:
        s = x["send"]
        parts.append(f"send {s['ret']}" if s["ret"] >= 0 else f"send {s['errno']}")
    if x["recv"]:
        v = x["recv"]
        parts.append(f"recv {v['errno'] if v['ret'] < 0 else v['ret']} {v['t_ms']:.3f}")
    if x["send_after"]:
        a = x["send_after"]
        parts.append(f"send {a['errno'] if a['ret'] < 0 else a['ret']}")
    return ", ".join(parts) or "-"


SERVER_WORDS = {"queued": "in the accept queue", "request": "a request (SYN-RECV)",
                "nothing": "nothing"}


def row_line(x):
    srv = SERVER_WORDS[x["server"]]
    if x["server"] == "queued":
        srv += f", Recv-Q {x['server_rq']}"
    elif x["server"] == "request":
        srv += f", {x['server_retrans']} SYN-ACK retransmitted"
    sq = "-" if x["send_q"] is None else x["send_q"]
    ua = "-" if x["unacked"] is None else x["unacked"]
    rt = "-" if x["retrans"] is None else x["retrans"]
    a = x["at_server"]
    late = x.get("connect_after_snapshot_ms")
    if late is not None:
        srv += f"; connect() returned {late:.1f} ms after the client snapshot"
    return (f"  {x['i']:>2} {x['local']:<18} {x['connect']:<11} {x['connect_t_ms']:>8.3f} "
            f"{x['state']:<8} {sq:>6} {ua:>3} {rt:>3}  {a['syn']:>2}/{a['acking']:<2}  {fmt_io(x):<30} "
            f"{srv}").rstrip()


def group_lines(x_rows):
    """Flood clients, grouped by what each side shows (one line per kind)."""
    kinds = {}
    for x in x_rows:
        late = x.get("connect_after_snapshot_ms") is not None
        k = (x["connect"], late, x["state"], x["server"])
        kinds.setdefault(k, []).append(x)
    out = []
    for (conn, late, state, srv), xs in kinds.items():
        syn = sum(x["at_server"]["syn"] for x in xs)
        sa = sum(x["at_server"]["synack"] for x in xs)
        when = ""
        if late:
            ms = sorted(x["connect_after_snapshot_ms"] for x in xs)
            span = f"{ms[0]:.1f}" if ms[0] == ms[-1] else f"{ms[0]:.1f}-{ms[-1]:.1f}"
            when = f" {span} ms after the client snapshot"
        out.append(f"  {len(xs):>2} (i={xs[0]['i']}..{xs[-1]['i']}): connect() {conn}{when}, "
                   f"{state}; server: {SERVER_WORDS[srv]}; {syn} SYN in, {sa} SYN-ACK out")
    return out


HEAD = (f"  {'i':>2} {'local':<18} {'connect()':<11} {'t_ms':>8} {'state':<8} {'Send-Q':>6} "
        f"{'una':>3} {'rtx':>3}  {'S/A':<5} {'send/recv':<30} server holds")


def part_lines(r, what):
    sm, ss = r["summary"], r["sysctls"]["server"]
    lines = [f"== {r['part']}: {what}",
             "server sysctls: " + "  ".join(f"{k}={ss[k]}" for k in SYSCTLS[:5]),
             f"listener {r['addr']}:{r['port']}: listen({r['listen_arg']}), the kernel's backlog "
             f"(TCP_INFO tcpi_sacked) {r['listen_backlog_shown']}"]
    if r["nft"]:
        lines.append(f"nft (client out): {r['nft']['rule']} {r['nft']['verdict']}: counter "
                     f"packets {r['nft']['packets']}")
    lines += ["", "each client: its connect() and socket, and what the server holds for it (both "
              "snapshots at the end);", "S/A: its SYNs / ACK-bearing segments at the server's "
              "end of the veth;", "una: its segments not acknowledged (tcpi_unacked); rtx: its "
              "retransmissions (the timer's count)", HEAD]
    for g in r["group_order"]:
        xs = [x for x in r["clients"] if x["group"] == g]
        lines.append(f"  -- {GROUP_TITLE[g]} ({len(xs)})")
        if g == "flood":
            lines += group_lines(xs)
        else:
            lines += [row_line(x) for x in xs]
    if "sent_snapshot" in r:
        w = ", ".join(f"{s['local'].rsplit(':', 1)[1]}:{s['send_q']}" for s in r["sent_snapshot"]
                      if s["state"] == "ESTAB" and s["send_q"] > 0)
        lines.append(f"  right after the sends (client snapshot), Send-Q by local port: {w or 'none'}")
    lines += ["", f"LISTEN: Recv-Q {sm['listen_rq']} (connections queued, sk_ack_backlog), Send-Q "
              f"{sm['listen_wq']} (sk_max_ack_backlog); {sm['requests']} request(s) in SYN-RECV, "
              f"{sm['children']} child socket(s)",
              f"connect() returned for {sm['connected']}, still pending for {sm['pending']}; "
              f"connected but not queued: {sm['connected_not_queued']}",
              "at the server's end, until the counters were read: "
              f"{sm['syns_unanswered']} SYNs no SYN-ACK answered, {sm['syns_from_pending']} of "
              "them from the clients still in SYN-SENT;",
              f"  {sm['acks_from_unqueued']} ACK-bearing segments from those connected but not "
              f"queued; {sm['synacks_beyond_first']} SYN-ACK retransmissions, "
              f"{sm['rsts_at_server_end']} RSTs"]
    if sm["rst_after_synack_ms"] and ss["tcp_abort_on_overflow"] == 0:
        lo, hi = sm["rst_after_synack_ms"]
        span = f"{lo:.3f}" if lo == hi else f"{lo:.3f} to {hi:.3f}"
        lines.append(f"  those RSTs came {span} ms after their connection's first SYN-ACK; a "
                     f"request lives {sm['request_lifetime_ms']} ms (tcp_synack_retries="
                     f"{ss['tcp_synack_retries']}, reqsk_timer_handler()): "
                     + ("it had expired, and the client's next segment found only the listener"
                        if lo >= sm["request_lifetime_ms"] else "some came before it expired"))
    if sm["connected_not_queued"]:
        lines.append(f"so: connect() returned for {sm['connected_not_queued']} client(s) the "
                     "server holds no child for; a SYN-ACK came back, nothing was queued")
    ko = r["kmsg_open"]
    if r["part"].startswith("flood") and ko is not None and ko["ret"] != 0:
        lines.append(f"kernel log: not read: this run could not open /dev/kmsg ({ko['errno']}; "
                     f"kernel.dmesg_restrict={ko['dmesg_restrict']}, which leaves it to "
                     "CAP_SYSLOG in the host's user namespace)")
    if r["kmsg"] is not None:
        if r["kmsg"]:
            lines += [f"kernel log (/dev/kmsg seq {k['seq']}, level {k['level']}): {k['msg']}"
                      for k in r["kmsg"]]
        else:
            lines.append("kernel log: no \"SYN flooding\" line for this port while the part ran")
    lines += ["", "counters (each side read in its own namespace):",
              f"  {'counter':<28} {'client':>7} {'server':>7}"]
    for k in COUNTERS:
        lines.append(f"  {k:<28} {t.fmt_delta(r['counters'].get(k)):>7} "
                     f"{t.fmt_delta(r['server_counters'].get(k)):>7}")
    lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{r['part']}-capture.txt, the server's end")
    return lines


def ladder_rows(r):
    notes = []
    for g in r["group_order"]:
        cl = r["groups"][g]
        for i, c in cl["conns"].items():
            if c["result"] != "pending":
                notes.append((cl["start_ns"] + round(c["t_ms"] * 1e6),
                              f"{g} {i} ({c['local'].rsplit(':', 1)[1]}): connect() "
                              f"{c['result']}"))
        for key, word in (("sends", "send()"), ("recvs", "recv()"), ("after", "next send()")):
            for i, v in cl[key].items():
                res = v["errno"] if v["ret"] < 0 else v["ret"]
                notes.append((cl["start_ns"] + round(v["t_ms"] * 1e6), f"{g} {i}: {word} {res}"))
    seg_notes, unq = {}, {x["local"] for x in r["clients"] if x["server"] != "queued"}
    for k, p in enumerate(r["capture"]["packets"]):
        if p["kind"] != "tcp":
            continue
        peer = p["src"] if p["dir"] == "c>s" else p["dst"]
        seg_notes[k] = (f"{'from' if p['dir'] == 'c>s' else 'to'} :{peer.rsplit(':', 1)[1]}"
                        + (" (not queued)" if peer in unq else ""))
    return [{"sep": f"{r['part']}: the server's end of the veth"}] + \
        pkt.ladder_rows(r["capture"]["packets"], r["start_ns"], notes, seg_notes)


def part_json(r):
    out = {k: r[k] for k in ("port", "listen_backlog_shown", "listen_arg", "listen", "requests",
                             "children", "counters", "server_counters", "nft", "kmsg",
                             "summary")}
    out["settings"] = r["sysctls"]   # {server, client, constant}: "sysctls" is a flat map elsewhere
    out["clients"] = r["clients"]
    out["capture"] = pkt.capture_json(r["capture"])
    if "sent_snapshot" in r:
        out["sent_snapshot"] = r["sent_snapshot"]
    return out


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    wire = tw.read_wire(rawdir)
    runs = []
    kmsg_open = read_kmsg_open(rawdir)
    for name, what, groups in PARTS:
        r = one_part(rawdir, name, groups)
        if kmsg_open is not None and kmsg_open["ret"] != 0 and r["kmsg"] is not None:
            raise t.RawError(f"{rawdir}/{name}-kmsg.txt: kmsg-open.txt says /dev/kmsg could "
                             "not be opened")
        r["kmsg_open"] = kmsg_open
        c = r["sysctls"]["constant"]
        r["listen_arg"] = {"seq": c["backlog_n"], "burst": c["backlog_n"],
                           "abort": c["backlog_n"], "somaxconn": 1000}.get(name, c["flood_backlog"])
        r["group_order"] = groups
        r["summary"] = summary(r)
        r["what"] = what
        runs.append(r)
    lines = [f"{NAME}: a listener that never accepts, on the wire: who gets in, who is told, "
             "who is not",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      f"namespaces joined by a veth pair (MTU {wire['client']['link']['mtu']}); "
                      "a capture on the server's end"), ""]
    rows = []
    for r in runs:
        lines += part_lines(r, r["what"]) + [""]
        if r["part"] in LADDER_PARTS:
            rows += ladder_rows(r)
    lines += ["ladder (the server's end of the veth; t_ms from each part's first client):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=f"server {runs[0]['addr']}")
    # the common keys: the first part's client counters; elapsed from the first client's start
    # to the last part's mark (its counters read)
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": runs[0]["counters"], "result": "ok", "errno": None,
           "elapsed_s": round((runs[-1]["mark_ns"] - runs[0]["start_ns"]) / 1e9, 6),
           "addr": runs[0]["addr"], "kmsg_open": kmsg_open,
           "parts": {r["part"]: part_json(r) for r in runs}, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, tw.CLIENT_COL,
                         f"server {runs[0]['addr']}")


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
