#!/usr/bin/python3
"""p05-close report: four ways to end a connection, on the wire.  Per part (orderly, unread,
lost, linger0, shutdown): both peers' system calls, the packets the client's end of the veth
saw, both sides' sockets as sockwatch sampled them (each side in its own namespace), both
sides' counters, and what they show together: the FIN or the RST that close() sent, each
state with its time, what the client's recv() returned after a RST (the bytes it had queued,
or nothing when the reply was lost), which counter counted an abortive close.  Where tcpevents
ran beside sockwatch (raw/<part>[-server]-tcpevents.txt), each side's exact transitions too,
merged into the state timeline and the ladder (a state shorter than a sample, the server's
LAST-ACK, with its exact duration), and checked against sockwatch's samples.  Every number
from raw/; a ladder .svg per part."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t
import tcplab_pkt as pkt
import tcplab_wire as tw

NAME = "p05-close"
PARTS = ("orderly", "unread", "lost", "sendfirst", "linger0", "shutdown")
TITLES = {
    "orderly": "orderly close, the client first",
    "unread": "the server close()s with request bytes unread",
    "lost": "the same, the reply lost on the way",
    "sendfirst": "as unread, the client's first call after the RST a send()",
    "linger0": "SO_LINGER {1, 0}: an abortive close",
    "shutdown": "shutdown(SHUT_WR): a half-close",
}
COUNTERS = ("TcpEstabResets", "TcpOutRsts", "TcpExtTCPAbortOnClose", "TcpExtTCPAbortOnData",
            "TcpExtTCPAbortOnLinger", "TcpExtTCPChallengeACK", "TcpExtTW", "TcpExtDelayedACKs",
            "TcpRetransSegs", "TcpInSegs", "TcpOutSegs")
ABORTS = ("TcpExtTCPAbortOnClose", "TcpExtTCPAbortOnData", "TcpExtTCPAbortOnLinger")
TCP_TIMEWAIT_LEN_MS = 60000     # include/net/tcp.h: TCP_TIMEWAIT_LEN (60 * HZ)
PEER_WORDS = ("ready", "connect", "accept", "hold", "step", "exit", "bind")


# ---- raw files ---------------------------------------------------------------------------------

def peer_out(path, role):
    """peer's output (SPEC) → {"ready", "open" (connect or accept line), "steps" [Fields, n =
    1..k in order], "holds", "exit"}; a line of another kind, a missing line, or steps out of
    order are refused."""
    out = {"ready": None, "open": None, "steps": [], "holds": [], "exit": None}
    for f, line in zip(t.read_kv_lines(path), t.read_lines(path)):
        word = line.split(" ", 1)[0]
        if word not in PEER_WORDS:
            raise t.RawError(f"{path}: `{line[:40]}` is not a line peer prints")
        if word == "step":
            out["steps"].append(f)
        elif word == "hold":
            out["holds"].append(f)
        elif word in ("connect", "accept"):
            out["open"] = f
        else:
            out[word] = f
    opener = "connect" if role == "client" else "accept"
    if out["open"] is None:
        raise t.RawError(f"{path}: no `{opener}` line: the {role} never had its connection")
    if out["exit"] is None:
        raise t.RawError(f"{path}: no `exit` line: the {role} did not finish")
    if role == "server" and out["ready"] is None:
        raise t.RawError(f"{path}: no `ready` line")
    for k, s in enumerate(out["steps"], 1):
        if s.int("n", 1) != k:
            raise t.RawError(f"{path}: step n={s.get('n')} where step {k} was due")
        s.str("op")
        s.int("ret", -1)
        s.int("t_ns")
    if not out["steps"]:
        raise t.RawError(f"{path}: no `step` line")
    return out


def watch(path, start_ns):
    """One side's sockwatch → events (tcplab.sockwatch_event) with the queues, the addresses,
    inode and info_len (0: a minisock, the TIME-WAIT kind)."""
    events = []
    for e in t.read_sockwatch(path):
        ev = t.sockwatch_event(e, start_ns)
        ev.update(rq=e.int("rq"), wq=e.int("wq"), local=e.str("local"), peer=e.str("peer"),
                  inode=e.int("inode"), info_len=e.int("info_len", default=0),
                  t_ns=e.int("t_ns"))
        events.append(ev)
    if not events or events[0]["event"] != "new":
        raise t.RawError(f"{path}: no `event=new` line first (the socket was never seen)")
    if events[-1]["event"] != "gone" and "-server-" in os.path.basename(path):
        raise t.RawError(f"{path}: the last event is not `gone`: the server's socket never went")
    return events


# ---- tcpevents: the exact transitions -----------------------------------------------------------

def read_tcpevents(path):
    """One side's tcpevents output (docs/tcpevents.md) → (its event lines as Fields, its end
    line); the ready line first, the end line last, none lost, and as many events as the end
    line counts."""
    lines = t.read_lines(path)
    if not lines or not lines[0].startswith("ready "):
        raise t.RawError(f"{path}: no `ready` line first")
    if not lines[-1].startswith("end "):
        raise t.RawError(f"{path}: no `end` line: tcpevents was killed or its output cut")
    end = t.Fields(path, t.kv(lines[-1]))
    events = [t.Fields(path, t.kv(x)) for x in lines[1:-1]]
    if end.int("events") != len(events):
        raise t.RawError(f"{path}: events={end.int('events')} on the end line, "
                         f"{len(events)} event lines")
    if end.int("lost") != 0:
        raise t.RawError(f"{path}: lost={end.int('lost')}: the ring buffer was full, "
                         "transitions are missing")
    for e in events:
        e.int("t_ns")
        e.str("event")
    return events, end


def exact(events, t0):
    """The connection's state changes on one side, in the kernel's order: [{"t_ns", "t_ms",
    "old", "new", "socket" (full, or timewait: tcp_time_wait() put a timewait socket in its
    place), "lasted_ms" (until the side's next change; None for the last)}].  The listener's
    own (its peer 0.0.0.0:0) are left out, and so is the close of the full socket a timewait
    one replaced (tcpevents' `timewait` line says the replacement)."""
    out, tw = [], None
    for e in events:
        if e["event"] not in ("state", "timewait") or e.str("peer").endswith(":0"):
            continue
        old, new = e.str("old"), e.str("new")
        if e["event"] == "state" and tw is not None and old == tw and new == t.CLOSED:
            tw = None
            continue
        if e["event"] == "timewait":
            tw = old
        out.append({"t_ns": e.int("t_ns"), "t_ms": round((e.int("t_ns") - t0) / 1e6, 3),
                    "old": old, "new": new,
                    "socket": "timewait" if e["event"] == "timewait" else "full"})
    for a, b in zip(out, out[1:]):
        a["lasted_ms"] = round((b["t_ns"] - a["t_ns"]) / 1e6, 3)
    if out:
        out[-1]["lasted_ms"] = None
    return out


def exact_sequence(ex):
    """The states ex passed through, in order, as (state, traced): a timewait socket made in
    FIN-WAIT-2 moves to TIME-WAIT when the peer's FIN comes with no tracepoint (docs/
    tcpevents.md), so that TIME-WAIT follows it untraced."""
    seq = []
    for x in ex:
        seq.append((x["new"], True))
        if x["socket"] == "timewait" and x["new"] == "FIN-WAIT-2":
            seq.append(("TIME-WAIT", False))
    return seq


def cross_check(sts, ex, side):
    """Every state sockwatch sampled on a side (states(), gone left out) among tcpevents'
    transitions, in the same order → (disagreements, the sampled states only an untraced move
    explains)."""
    seq, pos, prev, bad, untraced = exact_sequence(ex), 0, None, [], []
    # where a timewait socket took the full one's place, tcpevents printed the full socket's
    # FIN-WAIT-2 -> UNCONN beside it (exact() leaves that close out): a dump can sample the full
    # socket in that moment, UNCONN with its port released, before the timewait socket
    tw_at = next((k for k, x in enumerate(seq) if x == ("FIN-WAIT-2", True) and any(
        y["socket"] == "timewait" for y in ex)), None)
    replaced = []
    for s in sts:
        st = "SYN-RECV" if s["state"] == "NEW-SYN-RECV" else s["state"]
        if st == "gone" or (st == prev and pos > 0 and seq[pos - 1][0] == st):
            continue
        j = next((k for k in range(pos, len(seq)) if seq[k][0] == st), None)
        if j is None and st == t.CLOSED and tw_at is not None and pos <= tw_at + 2:
            replaced.append(f"{side}: sockwatch sampled {t.shown_state(st)} at "
                            f"{s['t_s'] * 1e3:.3f} ms: the full socket closing as its timewait "
                            "socket replaced it (tcpevents' FIN-WAIT-2 -> UNCONN of the full "
                            "socket)")
            continue
        if j is None:
            after = f"after {seq[pos - 1][0]}" if pos > 0 else "at all"
            bad.append(f"{side}: sockwatch sampled {t.shown_state(st)} at "
                       f"{s['t_s'] * 1e3:.3f} ms; tcpevents has no change to it {after}")
            continue
        if not seq[j][1]:
            untraced.append(f"{side} {t.shown_state(st)}")
        pos, prev = j + 1, st
    return bad, untraced, replaced


def part_exact(rawdir, name, part):
    """part["exact"]: both sides' exact transitions and the cross-check, or None where this
    run has no tcpevents files."""
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    if not t.exists(f("tcpevents.txt")) and not t.exists(f("server-tcpevents.txt")):
        return None
    out, missed, unseen = {}, {}, {}
    for side, file in (("client", "tcpevents.txt"), ("server", "server-tcpevents.txt")):
        events, end = read_tcpevents(f(file))
        out[side] = exact(events, part["t0"])
        missed[side], unseen[side] = t.tcpevents_missed(end), t.tcpevents_unseen(end)
    bad, untraced, replaced = [], [], []
    for side, key in (("client", "states"), ("server", "server_states")):
        b, u, r = cross_check(part[key], out[side], side)
        # where the kernel counted events it ran no program for, each disagreement says so
        # (docs/tcpevents.md, "A retransmission missed under load")
        b = [d + (f"; tcpevents missed={missed[side]} (events the kernel ran no program for)"
                  if missed[side] else "")
               + (f"; tcpevents unseen={unseen[side]} (tracepoint hits, any socket's, the kernel "
                  "ran no program for, no recursion counted)" if unseen[side] else "")
             for d in b]
        bad += b
        untraced += u
        replaced += r
    out["disagree"], out["untraced"] = bad, untraced
    out["missed"], out["unseen"] = missed, unseen
    if replaced:
        out["replaced"] = replaced
    return out


def tcpevents_status(rawdir):
    """What the run says of tcpevents: ("ran", None), ("blind", its one line), ("absent", None)."""
    blind = os.path.join(rawdir, "tcpevents-blind.txt")
    ran = [p for p in PARTS if t.exists(os.path.join(rawdir, f"{p}-tcpevents.txt"))]
    if t.exists(blind):
        if ran:
            raise t.RawError(f"{blind}: says tcpevents could not run, yet {ran[0]}-tcpevents.txt "
                             "is there")
        why = t.read_lines(blind)
        if not why or not why[0].strip():
            raise t.RawError(f"{blind}: empty (it holds the one line why)")
        return "blind", why[0].strip()
    if ran and len(ran) != len(PARTS):
        miss = next(p for p in PARTS if p not in ran)
        raise t.RawError(f"{os.path.join(rawdir, miss + '-tcpevents.txt')}: missing (the other "
                         "parts have theirs)")
    return ("ran" if ran else "absent"), None


def tcpevents_line(status, why):
    if status == "ran":
        return ("tcpevents: each side's exact transitions too, from the kernel's tracepoints "
                "(its namespace, the part's port; the same clock), marked `tcpevents`")
    if status == "blind":
        return (f"tcpevents could not run here: {why.removeprefix('tcpevents: ')} "
                "(tcpevents-blind.txt): states from sockwatch's samples only")
    return ("tcpevents: not run here (no tcpevents file in raw/): states from sockwatch's "
            "samples only, a state shorter than a sample may be missing")


def last_ack(ex):
    """The server's LAST-ACK from its exact transitions: {"from_ms", "to_ms", "lasted_ms"},
    or None."""
    if ex is None:
        return None
    sv = ex["server"]
    k = next((k for k, x in enumerate(sv) if x["new"] == "LAST-ACK"), None)
    if k is None or k + 1 == len(sv):
        return None
    return {"from_ms": sv[k]["t_ms"], "to_ms": sv[k + 1]["t_ms"], "lasted_ms": sv[k]["lasted_ms"]}


def read_ss(path):
    """`ss -tano state time-wait` of the orderly part (optional) → [{"local", "peer",
    "timer"}], timer as ss prints it (timer:(…))."""
    rows = t.read_ss_sockets(path)
    if rows is None:
        return None
    return [{"local": r["local"], "peer": r["peer"],
             "timer": f"timer:({r['timer']})" if r["timer"] is not None else None} for r in rows]


# ---- what the steps, packets and events say ------------------------------------------------

def ms(part, ns):
    return round((ns - part["t0"]) / 1e6, 3)


def step(peer, op):
    """The first step whose op is op (or starts with op:), or None."""
    return next((s for s in peer["steps"] if s["op"] == op or s["op"].startswith(op + ":")), None)


def began(peer, op):
    """When the first step op began, at the latest: the return of the step before it (or the
    connect/accept line) — peer prints each step's time when the call returned."""
    prev = peer["open"]
    for s in peer["steps"]:
        if s["op"] == op or s["op"].startswith(op + ":"):
            return prev.int("t_ns")
        prev = s
    return None


def steps_of(peer, op):
    return [s for s in peer["steps"] if s["op"] == op or s["op"].startswith(op + ":")]


def first(segs, pred, after_ns=None):
    return next((p for p in segs if (after_ns is None or p["t_ns"] >= after_ns) and pred(p)), None)


def is_fin(p, d):
    return p["dir"] == d and "F" in p["flags"]


def is_rst(p, d):
    return p["dir"] == d and "R" in p["flags"]


def states(events):
    """A side's states in order, each with the first sample that showed it: [{"state", "t_s",
    "timer", "expires_ms", "kind" (full or timewait: info_len 0), "how" (new, change: the same
    cookie, gone+new: a new socket at the same addresses), "inode", "rq", "wq"}], then where it
    went ({"state": "gone", ...})."""
    out, gone = [], None
    for e in events:
        kind = "timewait" if e["info_len"] == 0 else "full"
        if e["event"] == "gone":
            gone = e
            continue
        if out and out[-1]["state"] == e["state"] and out[-1]["kind"] == kind and gone is None:
            continue
        how = e["event"] if gone is None else "gone+new"
        out.append({"state": e["state"], "t_s": e["t_s"], "timer": e["timer"],
                    "expires_ms": e["expires_ms"], "kind": kind, "how": how, "inode": e["inode"],
                    "rq": e["rq"], "wq": e["wq"]})
        gone = None
    # a full socket sampled closed with a timewait socket next: tcp_time_wait() had put the
    # timewait socket in its place (the same cookie: inet_twsk_alloc() copies it), and the
    # full socket's own FIN-WAIT-2 -> CLOSE came a moment later; the dump caught it between
    for a, b in zip(out, out[1:]):
        if a["state"] == t.CLOSED and a["kind"] == "full" and b["kind"] == "timewait":
            a["replaced"] = True
    if gone is not None:
        out.append({"state": "gone", "t_s": gone["t_s"], "timer": gone["timer"],
                    "expires_ms": gone["expires_ms"], "kind": "-", "how": "gone",
                    "inode": gone["inode"], "rq": gone["rq"], "wq": gone["wq"],
                    "last_state": gone["state"]})
    return out


def sampled(sts, state):
    return next((s for s in sts if s["state"] == state), None)


def delta(d, name):
    return tw.delta(d, name)


def recv_story(peer):
    """What a side's reads returned, in order: [(op, ret, errno, bytes)], the bytes read before
    the first error, and that error (or None)."""
    reads, got, err = [], 0, None
    for s in peer["steps"]:
        if s["op"].split(":")[0] not in ("recv", "drain"):
            continue
        ret, e = s.int("ret", -1), s.str("errno")
        b = s.int("bytes", default=None)
        reads.append({"op": s["op"], "ret": ret, "errno": e, "bytes": b})
        if err is None:
            got += b if b is not None else max(ret, 0)
            if e != "none":
                err = e
    return reads, got, err


# ---- one part --------------------------------------------------------------------------------

def one_part(rawdir, name, wire):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    c, s = peer_out(f("client.txt"), "client"), peer_out(f("server.txt"), "server")
    t0 = c["open"].int("t_ns")
    local = c["open"].str("local")
    port = s["ready"].str("listen").rsplit(":", 1)[-1]
    cap = pkt.read_complete_capture(f("capture.txt"))
    segs = pkt.conn_packets(cap, local)
    if not segs:
        raise t.RawError(f"{f('capture.txt')}: no segment of {local}")
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, COUNTERS)
    part = {"part": name, "port": t.num(port, f"{f('server.txt')}: listen port", 1, 65535),
            "t0": t0, "local": local, "client": c, "server": s, "capture": cap, "segs": segs,
            "events": watch(f("sockwatch.txt"), t0),
            "server_events": watch(f("server-sockwatch.txt"), t0),
            "counters": cc, "server_counters": sc}
    part["states"] = states(part["events"])
    part["server_states"] = states(part["server_events"])
    part["exact"] = part_exact(rawdir, name, part)
    mine = (f"sport {part['port']}", f"dport {part['port']}")
    part["rules"] = [r for r in wire["client"]["rules"] + wire["server"]["rules"]
                     if any(m in r["rule"] for m in mine)]
    part["findings"] = FINDINGS[name](part)
    return part


def need(x, path, what):
    if x is None:
        raise t.RawError(f"{path}: {what}")
    return x


def seg_brief(part, p):
    return None if p is None else {"t_ms": ms(part, p["t_ns"]), "dir": p["dir"],
                                   "flags": p["flags"], "seq": p["seq"], "ack": p["ack"],
                                   "len": p["len"]}


def find_orderly(part):
    segs, cap = part["segs"], part["capture"]["path"]
    cl_close = need(step(part["client"], "close"), cap, "the client has no close step")
    sv_close = need(step(part["server"], "close"), cap, "the server has no close step")
    fin_c = need(first(segs, lambda p: is_fin(p, "c>s")), cap, "no FIN from the client")
    ack_s = need(first(segs, lambda p: p["dir"] == "s>c" and p["ack"] is not None and
                       p["ack"] == (fin_c["seq"] + fin_c["len"] + 1) % 2 ** 32,
                       fin_c["t_ns"]), cap, "no ACK of the client's FIN")
    fin_s = need(first(segs, lambda p: is_fin(p, "s>c")), cap, "no FIN from the server")
    ack_c = need(first(segs, lambda p: p["dir"] == "c>s" and p["ack"] is not None and
                       p["ack"] == (fin_s["seq"] + fin_s["len"] + 1) % 2 ** 32,
                       fin_s["t_ns"]), cap, "no ACK of the server's FIN")
    tw_st = sampled(part["states"], "TIME-WAIT")
    fw2 = sampled(part["states"], "FIN-WAIT-2")
    la = sampled(part["server_states"], "LAST-ACK")
    cb, sb = began(part["client"], "close"), began(part["server"], "close")
    return {"client_close_ms": ms(part, cl_close.int("t_ns")),
            "server_close_ms": ms(part, sv_close.int("t_ns")),
            "client_close_began_ms": ms(part, cb), "server_close_began_ms": ms(part, sb),
            "fin_wait_2_sampled_after_close_ms": None if fw2 is None else
            round(fw2["t_s"] * 1e3 - ms(part, cb), 3),
            "time_wait_sampled_after_close_ms": None if tw_st is None else
            round(tw_st["t_s"] * 1e3 - ms(part, sb), 3),
            "fin_client": seg_brief(part, fin_c), "ack_server": seg_brief(part, ack_s),
            "fin_server": seg_brief(part, fin_s), "ack_client": seg_brief(part, ack_c),
            "ack_piggybacked": "F" in ack_s["flags"],
            "fin_wait_1_ms": ms(part, ack_s["t_ns"]) - ms(part, fin_c["t_ns"]),
            "fin_wait_2_ms": ms(part, fin_s["t_ns"]) - ms(part, ack_s["t_ns"]),
            "close_wait_ms": ms(part, fin_s["t_ns"]) - ms(part, fin_c["t_ns"]),
            "last_ack_ms": ms(part, ack_c["t_ns"]) - ms(part, fin_s["t_ns"]),
            "last_ack_sampled": la is not None,
            "last_ack_exact": last_ack(part["exact"]),
            "fin_wait_2_kind": None if fw2 is None else fw2["kind"],
            "fin_wait_2_timer": None if fw2 is None else fw2["timer"],
            "fin_wait_2_expires_ms": None if fw2 is None else fw2["expires_ms"],
            "fin_wait_2_sampled_after_ack_ms": None if fw2 is None else
            round(fw2["t_s"] * 1e3 - ms(part, ack_s["t_ns"]), 3),
            "time_wait_expires_ms": None if tw_st is None else tw_st["expires_ms"],
            "time_wait_sampled_after_fin_ms": None if tw_st is None else
            round(tw_st["t_s"] * 1e3 - ms(part, fin_s["t_ns"]), 3),
            "rst": sum(1 for p in segs if "R" in p["flags"])}


def find_unread(part):
    segs, cap = part["segs"], part["capture"]["path"]
    sv, cl = part["server"], part["client"]
    close = need(step(sv, "close"), sv["exit"].path, "no close step")
    inq = need(step(sv, "inq"), sv["exit"].path, "no inq step")
    sent = need(step(sv, "send"), sv["exit"].path, "no send step")
    rst = first(segs, lambda p: is_rst(p, "s>c"))
    need(rst, cap, "no RST from the server")
    fin = first(segs, lambda p: is_fin(p, "s>c"))
    last_rq = [e["rq"] for e in part["server_events"]][-1]
    c_inq = need(step(cl, "inq"), cl["exit"].path, "no inq step")
    hup = need(step(cl, "wait"), cl["exit"].path, "no wait step")
    reads, got, err = recv_story(cl)
    sends = [{"op": x["op"], "ret": x.int("ret", -1), "errno": x.str("errno")}
             for x in steps_of(cl, "send") if x.int("t_ns") > hup.int("t_ns")]
    reply = [p for p in segs if p["dir"] == "s>c" and p["len"] > 0]
    rstseq = [p for p in segs if is_rst(p, "s>c")]
    chall = first(segs, lambda p: p["dir"] == "c>s" and "R" not in p["flags"], rst["t_ns"] + 1)
    rule = part["rules"][0] if part["rules"] else None
    return {"server_read": need(step(sv, "recv"), sv["exit"].path, "no recv step").int("ret", -1),
            "server_unread_inq": inq.int("ret", -1), "server_rq_last_sample": last_rq,
            "server_sent": sent.int("ret", -1), "server_close_ms": ms(part, close.int("t_ns")),
            "rst": seg_brief(part, rst), "fin_from_server": fin is not None,
            "rst_after_close_ms": round(ms(part, rst["t_ns"]) - ms(part, close.int("t_ns")), 3),
            "resets_from_server": [seg_brief(part, p) for p in rstseq],
            "reply_segments": [seg_brief(part, p) for p in reply],
            "client_after_ack": chall is not None and chall["t_ns"] < rstseq[-1]["t_ns"]
            and seg_brief(part, chall) or None,
            "nft": rule,
            "client_wait": {"ret": hup.int("ret", -1), "revents": hup.str("revents", None)},
            "client_inq_after_rst": c_inq.int("ret", -1),
            "client_rq_sampled": max(e["rq"] for e in part["events"]),
            "client_reads": reads, "client_bytes_before_error": got, "client_error": err,
            "client_sends_after_rst": sends,
            "abort_on_close": delta(part["server_counters"], "TcpExtTCPAbortOnClose"),
            "reply_survived": got == sent.int("ret", -1) and got > 0}


def find_linger0(part):
    segs, cap = part["segs"], part["capture"]["path"]
    cl, sv = part["client"], part["server"]
    close = need(step(cl, "close"), cl["exit"].path, "no close step")
    lg = need(step(cl, "linger"), cl["exit"].path, "no linger step")
    rst = need(first(segs, lambda p: is_rst(p, "c>s")), cap, "no RST from the client")
    reads, got, err = recv_story(sv)
    cc = part["counters"]
    return {"linger": lg["op"], "linger_ret": lg.int("ret", -1),
            "client_close_ms": ms(part, close.int("t_ns")), "rst": seg_brief(part, rst),
            "fin_from_client": first(segs, lambda p: is_fin(p, "c>s")) is not None,
            "time_wait_sampled": sampled(part["states"], "TIME-WAIT") is not None
            or any(s["kind"] == "timewait" for s in part["states"]),
            "counted_by": [k for k in ABORTS if delta(cc, k) > 0],
            "server_wait": step(sv, "wait").str("revents", None) if step(sv, "wait") else None,
            "server_inq_after_rst": need(step(sv, "inq"), sv["exit"].path, "no inq step")
            .int("ret", -1),
            "server_reads": reads, "server_bytes_before_error": got, "server_error": err}


def find_shutdown(part):
    segs, cap = part["segs"], part["capture"]["path"]
    cl, sv = part["client"], part["server"]
    sh = need(step(cl, "shutdown-wr"), cl["exit"].path, "no shutdown-wr step")
    fin_c = need(first(segs, lambda p: is_fin(p, "c>s")), cap, "no FIN from the client")
    sv_drain = need(step(sv, "drain"), sv["exit"].path, "no drain step")
    sv_send = need(step(sv, "send"), sv["exit"].path, "no send step")
    data = [p for p in segs if p["dir"] == "s>c" and p["len"] > 0 and p["t_ns"] > fin_c["t_ns"]]
    fin_s = need(first(segs, lambda p: is_fin(p, "s>c")), cap, "no FIN from the server")
    cl_drain = need(step(cl, "drain"), cl["exit"].path, "no drain step")
    fw2 = sampled(part["states"], "FIN-WAIT-2")
    return {"shutdown_ms": ms(part, sh.int("t_ns")), "fin_client": seg_brief(part, fin_c),
            "shutdown_began_ms": ms(part, began(cl, "shutdown-wr")),
            "server_close_began_ms": ms(part, began(sv, "close")),
            "server_eof_ms": ms(part, sv_drain.int("t_ns")),
            "server_read_before_eof": sv_drain.int("bytes"),
            "server_eof_ret": sv_drain.int("ret", -1),
            "server_sent_after_eof": sv_send.int("ret", -1),
            "server_send_ms": ms(part, sv_send.int("t_ns")),
            "data_after_client_fin": sum(p["len"] for p in data),
            "data_segments_after_client_fin": [seg_brief(part, p) for p in data],
            "fin_server": seg_brief(part, fin_s),
            "client_read_after_shutdown": cl_drain.int("bytes"),
            "client_eof_ret": cl_drain.int("ret", -1),
            "client_eof_ms": ms(part, cl_drain.int("t_ns")),
            "last_ack_exact": last_ack(part["exact"]),
            "fin_wait_2_full_socket": fw2 is not None and fw2["kind"] == "full",
            "fin_wait_2_inode": None if fw2 is None else fw2["inode"],
            "time_wait_sampled": sampled(part["states"], "TIME-WAIT") is not None}


FINDINGS = {"orderly": find_orderly, "unread": find_unread, "lost": find_unread,
            "sendfirst": find_unread,
            "linger0": find_linger0, "shutdown": find_shutdown}


# ---- text ------------------------------------------------------------------------------------

def step_rows(part):
    rows = [(part["t0"], "client", "connect()", 0, "none",
             f"local={part['local']}")]
    acc = part["server"]["open"]
    rows.append((acc.int("t_ns"), "server", "accept()", 0, "none", f"peer={acc.str('peer')}"))
    for side in ("client", "server"):
        for s in part[side]["steps"]:
            extra = " ".join(f"{k}={s[k]}" for k in ("bytes", "revents", "value") if k in s)
            rows.append((s.int("t_ns"), side, s["op"], s.int("ret", -1), s.str("errno"), extra))
        for h in part[side]["holds"]:
            rows.append((h.int("t_ns"), side, "(hold: waits for SIGUSR1)", 0, "none", ""))
    return sorted(rows, key=lambda r: r[0])


def step_lines(part):
    out = [f"  {'t_ms':>9}  {'side':<6} {'system call / step':<26} {'ret':>5}  {'errno':<11} more"]
    for ns, side, op, ret, err, extra in step_rows(part):
        out.append(f"  {ms(part, ns):9.3f}  {side:<6} {op:<26} {ret:>5}  {err:<11} "
                   f"{extra}".rstrip())
    return out


def packet_lines(part):
    out = [f"  {'t_ms':>9}  dir  {'flags':<5} {'seq':>5} {'ack':>5} {'len':>4}  note"]
    notes = seg_notes(part)
    for i, p in enumerate(part["segs"]):
        ack = "-" if p["ack"] is None else p["ack"]
        out.append(f"  {ms(part, p['t_ns']):9.3f}  {p['dir']}  {p['flags']:<5} {p['seq']:>5} "
                   f"{ack:>5} {p['len']:>4}  {notes.get(i, '')}".rstrip())
    return out


def event_lines(part):
    out = [f"  {'t_ms':>9}  {'side':<6} {'event':<6} {'state':<11} {'timer':<8} "
           f"{'expires_ms':>10} {'rq':>4} {'wq':>4}  socket"]
    rows = [(e, "client") for e in part["events"]] + [(e, "server") for e in part["server_events"]]
    notes = []
    for e, side in sorted(rows, key=lambda x: x[0]["t_ns"]):
        kind = ("timewait minisock (no tcp_info)" if e["info_len"] == 0 else
                f"full socket, inode {e['inode']}" if e["inode"] else
                "full socket, inode 0 (no process holds it)")
        out.append(f"  {e['t_s'] * 1e3:9.3f}  {side:<6} {e['event']:<6} "
                   f"{t.shown_state(e['state']):<11} "
                   f"{e['timer']:<8} {e['expires_ms']:>10} {e['rq']:>4} {e['wq']:>4}  {kind}")
        if e["state"] == t.CLOSED and e["event"] != "gone":
            notes.append(t.closed_note(e["local"], e["inode"], e["t_s"] * 1e3, f"  {side}: "))
    return out + notes


def state_lines(part, side):
    sts = part["states" if side == "client" else "server_states"]
    words = []
    for s in sts:
        if s["state"] == "gone":
            words.append(f"gone {s['t_s'] * 1e3:.3f}")
        else:
            words.append(f"{t.shown_state(s['state'])} {s['t_s'] * 1e3:.3f}" +
                         (f" ({s['how']})" if s["how"] == "gone+new" else "") +
                         (" (the full socket's last sample)" if s.get("replaced") else ""))
    out = [f"  {side}: " + " -> ".join(words)]
    for s in sts:
        if s.get("replaced"):
            out.append(f"  ({side}: {t.shown_state(s['state'])} at {s['t_s'] * 1e3:.3f} ms is the "
                       "full socket's last sample, closing: the next one is the timewait socket "
                       "tcp_time_wait() had put in its place)")
    return out


def exact_lines(part):
    """The exact transitions (tcpevents), each side's states with how long each lasted, and the
    cross-check against sockwatch's samples; [] where tcpevents did not run."""
    ex = part["exact"]
    if ex is None:
        return []
    out = ["tcpevents (each side in its own namespace; every state change the kernel made):",
           f"  {'t_ms':>9}  {'side':<6} {'from':<11} {'to':<11} {'lasted_ms':>9}  socket"]
    rows = [(x, "client") for x in ex["client"]] + [(x, "server") for x in ex["server"]]
    for x, side in sorted(rows, key=lambda r: r[0]["t_ns"]):
        lasted = "-" if x["lasted_ms"] is None else f"{x['lasted_ms']:.3f}"
        out.append(f"  {x['t_ms']:9.3f}  {side:<6} {t.shown_state(x['old']):<11} "
                   f"{t.shown_state(x['new']):<11} {lasted:>9}  "
                   + ("timewait socket, in the full socket's place" if x["socket"] == "timewait"
                      else "full socket"))
    out += ["", "states, exact (tcpevents; ms, and how long each lasted):"]
    for side in ("client", "server"):
        words = [f"{t.shown_state(x['new'])} {x['t_ms']:.3f}"
                 + ("" if x["lasted_ms"] is None else f" ({x['lasted_ms']:.3f})")
                 + (" (timewait socket)" if x["socket"] == "timewait" else "")
                 for x in ex[side]]
        out.append(f"  {side}: " + " -> ".join(words))
    if ex["untraced"]:
        out.append("  (" + ", ".join(ex["untraced"]) + ": the timewait socket's move to "
                   "TIME-WAIT has no tracepoint; sockwatch's sample only)")
    out += [f"  ({r})" for r in ex.get("replaced", ())]
    if ex["disagree"]:
        out += ["DISAGREE: " + d for d in ex["disagree"]]
    else:
        n = sum(1 for key in ("states", "server_states") for s in part[key] if s["state"] != "gone")
        out.append(f"  cross-check: the {n} states sockwatch sampled are all among tcpevents' "
                   "transitions, in the same order")
    return out + [""]


def seg_notes(part):
    fd, notes = part["findings"], {}
    segs = part["segs"]
    idx = {id(p): i for i, p in enumerate(segs)}
    name = part["part"]
    if name in ("unread", "lost", "sendfirst"):
        for p in segs:
            if is_rst(p, "s>c") and "A" in p["flags"]:
                notes[idx[id(p)]] = (f"RST at close(), {fd['server_unread_inq']} B unread: "
                                     f"TCPAbortOnClose {fd['abort_on_close']:+d}")
            elif is_rst(p, "s>c"):
                notes[idx[id(p)]] = "RST from no socket (the answer to the ACK)"
            elif p["dir"] == "s>c" and p["len"] > 0:
                notes[idx[id(p)]] = ("the reply; dropped by nft at the client's input"
                                     if fd["nft"] else "the reply")
            elif p["dir"] == "c>s" and fd["client_after_ack"] and \
                    ms(part, p["t_ns"]) == fd["client_after_ack"]["t_ms"]:
                notes[idx[id(p)]] = (f"challenge ACK: TCPChallengeACK "
                                     f"{delta(part['counters'], 'TcpExtTCPChallengeACK'):+d}")
    elif name == "linger0":
        for p in segs:
            if is_rst(p, "c>s"):
                notes[idx[id(p)]] = "RST at close(): " + ", ".join(
                    f"{k[6:]} {delta(part['counters'], k):+d}" for k in ABORTS)
    else:
        for p in segs:
            if "F" in p["flags"]:
                notes[idx[id(p)]] = "FIN"
    return notes


def finding_lines(part):
    fd, name = part["findings"], part["part"]
    cc, sc = part["counters"], part["server_counters"]
    if name == "orderly":
        fs = fd["fin_server"]
        out = [f"  the client's close() (returned at {fd['client_close_ms']:.3f} ms) sent FIN "
               f"({fd['fin_client']['flags']} seq={fd['fin_client']['seq']}) at "
               f"{fd['fin_client']['t_ms']:.3f} ms; the server's ACK came at "
               f"{fd['ack_server']['t_ms']:.3f} ms ({fd['fin_wait_1_ms']:.3f} ms later"
               + (", with the server's FIN" if fd["ack_piggybacked"] else
                  f", a pure ACK; server TcpExtDelayedACKs "
                  f"{delta(part['server_counters'], 'TcpExtDelayedACKs'):+d}") + ")",
               f"  the server's close() (returned at {fd['server_close_ms']:.3f} ms) sent FIN at "
               f"{fs['t_ms']:.3f} ms; the client's ACK at {fd['ack_client']['t_ms']:.3f} ms",
               f"  from the wire: client FIN-WAIT-1 {fd['fin_wait_1_ms']:.3f} ms, FIN-WAIT-2 "
               f"{fd['fin_wait_2_ms']:.3f} ms, then TIME-WAIT; server CLOSE-WAIT "
               f"{fd['close_wait_ms']:.3f} ms, LAST-ACK {fd['last_ack_ms']:.3f} ms"
               + ("" if fd["last_ack_sampled"] else
                  " (never sampled by sockwatch: the capture gives it)")]
        if fd["last_ack_exact"] is not None:
            x = fd["last_ack_exact"]
            out.append(f"  tcpevents: the server was in LAST-ACK from {x['from_ms']:.3f} to "
                       f"{x['to_ms']:.3f} ms, {x['lasted_ms']:.3f} ms exactly"
                       + (" (sockwatch sampled it too)" if fd["last_ack_sampled"] else
                          " (sockwatch never sampled it)"))
        if fd["fin_wait_2_kind"] == "timewait":
            out.append(f"  FIN-WAIT-2 first sampled {fd['fin_wait_2_sampled_after_ack_ms']:.3f} ms "
                       f"after the ACK (the capture's clock; "
                       f"{fd['fin_wait_2_sampled_after_close_ms']:.3f} ms after the client's "
                       "close() began), as a timewait socket (the client had closed: an orphan), "
                       f"timer {fd['fin_wait_2_timer']}, expires_ms={fd['fin_wait_2_expires_ms']}"
                       " (tcp_fin_timeout)")
        if fd["time_wait_expires_ms"] is not None:
            out.append(f"  TIME-WAIT first sampled {fd['time_wait_sampled_after_fin_ms']:.3f} ms "
                       f"after the server's FIN ({fd['time_wait_sampled_after_close_ms']:.3f} ms "
                       f"after its close() began), expires_ms={fd['time_wait_expires_ms']} "
                       f"(TCP_TIMEWAIT_LEN {TCP_TIMEWAIT_LEN_MS} ms); TcpExtTW "
                       f"{delta(cc, 'TcpExtTW'):+d} on the client")
        out.append(f"  RST segments: {fd['rst']}")
        return out
    if name in ("unread", "lost", "sendfirst"):
        r = fd["rst"]
        out = [f"  the server read {fd['server_read']} B, had {fd['server_unread_inq']} B unread "
               f"(inq; sockwatch rq={fd['server_rq_last_sample']} at its last sample), sent "
               f"{fd['server_sent']} B, then close() (returned at {fd['server_close_ms']:.3f} ms)",
               f"  close() sent {r['flags']} seq={r['seq']} ack={r['ack']} at {r['t_ms']:.3f} ms "
               f"(the call returned {-fd['rst_after_close_ms']:.3f} ms later), "
               + ("and a FIN too" if fd["fin_from_server"] else "no FIN")
               + f"; server: TCPAbortOnClose {fd['abort_on_close']:+d}, TcpOutRsts "
               f"{delta(sc, 'TcpOutRsts'):+d}, TcpEstabResets {delta(sc, 'TcpEstabResets'):+d}"]
        if fd["nft"]:
            n = fd["nft"]
            out.append(f"  nft ({n['rule']} {n['verdict']}) dropped {n['packets']} packet(s), "
                       f"{n['bytes']} B: the reply, at the client's input, after the capture "
                       "saw it")
        if fd["client_after_ack"]:
            a = fd["client_after_ack"]
            out.append(f"  the RST's seq {r['seq']} is not the client's rcv_nxt (its ACK says "
                       f"{a['ack']}): the client answered with a challenge ACK at "
                       f"{a['t_ms']:.3f} ms (TCPChallengeACK "
                       f"{delta(cc, 'TcpExtTCPChallengeACK'):+d})"
                       f", the server, with no socket left, with RST seq="
                       f"{fd['resets_from_server'][-1]['seq']} at "
                       f"{fd['resets_from_server'][-1]['t_ms']:.3f} ms")
        reads = ", ".join(f"{x['op']} = {x['ret']}" + ("" if x["errno"] == "none" else
                                                       f" {x['errno']}")
                          for x in fd["client_reads"])
        out.append(f"  the client: poll {fd['client_wait']['revents']}; inq "
                   f"{fd['client_inq_after_rst']} "
                   f"after the RST (sockwatch rq up to {fd['client_rq_sampled']}); {reads}")
        if fd["client_sends_after_rst"]:
            out.append("  the client's send()s after the RST: " + ", ".join(
                f"{x['op']} = {x['ret']} {x['errno']}" for x in fd["client_sends_after_rst"]))
        out.append("  => " + (f"the reply survived, and no read saw the reset: the "
                              f"{fd['client_bytes_before_error']} B queued before the RST were "
                              "read, then 0 (EOF, as after a FIN): the first send() had taken "
                              "the error" if fd["reply_survived"] and fd["client_error"] is None
                              else
                              f"the reply survived: the {fd['client_bytes_before_error']} B "
                              "queued before the RST were read, then recv() failed with "
                              f"{fd['client_error']}" if fd["reply_survived"] else
                              f"the reply is lost: {fd['server_sent']} B the server's send() "
                              f"took, {fd['client_bytes_before_error']} B read, then "
                              f"{fd['client_error']}"))
        return out
    if name == "linger0":
        r = fd["rst"]
        out = [f"  {fd['linger']} (ret {fd['linger_ret']}), close() (returned at "
               f"{fd['client_close_ms']:.3f} ms) sent {r['flags']} seq={r['seq']} at "
               f"{r['t_ms']:.3f} ms, "
               + ("and a FIN" if fd["fin_from_client"] else "no FIN"),
               "  the client's socket: " + ("a TIME-WAIT socket was sampled" if
                                            fd["time_wait_sampled"] else
                                            "gone at once, no TIME-WAIT socket sampled"),
               "  counted on the client by: " + (", ".join(fd["counted_by"]) or "none of "
                                                 + ", ".join(ABORTS))
               + f"; TcpEstabResets {delta(cc, 'TcpEstabResets'):+d}, TcpOutRsts "
               f"{delta(cc, 'TcpOutRsts'):+d}",
               f"  the server: poll {fd['server_wait']}; inq {fd['server_inq_after_rst']} after "
               f"the RST; read {fd['server_bytes_before_error']} B, then "
               f"{fd['server_error'] or 'no error'}"]
        return out
    fc, fs = fd["fin_client"], fd["fin_server"]
    x = fd["last_ack_exact"]
    return [f"  shutdown(SHUT_WR) (returned at {fd['shutdown_ms']:.3f} ms) sent FIN at "
            f"{fc['t_ms']:.3f} ms",
            f"  the server read {fd['server_read_before_eof']} B, then EOF (ret "
            f"{fd['server_eof_ret']}) at {fd['server_eof_ms']:.3f} ms, and still sent "
            f"{fd['server_sent_after_eof']} B at {fd['server_send_ms']:.3f} ms "
            f"({fd['data_after_client_fin']} B on the wire after the client's FIN)",
            f"  the client, half-closed, read {fd['client_read_after_shutdown']} B, then EOF at "
            f"{fd['client_eof_ms']:.3f} ms after the server's FIN at {fs['t_ms']:.3f} ms",
            "  the client's FIN-WAIT-2: " + (f"a full socket its process holds (inode "
                                             f"{fd['fin_wait_2_inode']})" if
                                             fd["fin_wait_2_full_socket"] else
                                             "not a full socket")] + \
        ([] if x is None else [f"  tcpevents: the server was in LAST-ACK from {x['from_ms']:.3f} "
                               f"to {x['to_ms']:.3f} ms, {x['lasted_ms']:.3f} ms exactly"])


def counter_lines(part):
    return tw.counter_lines(part["counters"], part["server_counters"], COUNTERS)


def main_line(part):
    fd, name = part["findings"], part["part"]
    if name == "orderly":
        return (f"orderly: FIN, ACK, FIN, ACK; TIME-WAIT on the client, expires_ms="
                f"{fd['time_wait_expires_ms']}; {fd['rst']} RST")
    if name == "sendfirst":
        sends = " then ".join(x["errno"] for x in fd["client_sends_after_rst"])
        return (f"sendfirst: the client's send()s after the RST: {sends}; its reads: "
                f"{fd['client_bytes_before_error']} B, then "
                f"{fd['client_error'] or 'EOF (0), no error'}")
    if name in ("unread", "lost"):
        return (f"{name}: close() with {fd['server_unread_inq']} B unread sent "
                f"{fd['rst']['flags']}, TCPAbortOnClose {fd['abort_on_close']:+d}; the client "
                f"read {fd['client_bytes_before_error']} of the {fd['server_sent']} B reply, then "
                f"{fd['client_error']}")
    if name == "linger0":
        return (f"linger0: {fd['rst']['flags']} at close(), "
                + ("TIME-WAIT sampled" if fd["time_wait_sampled"] else "no TIME-WAIT")
                + f"; counted by {', '.join(fd['counted_by']) or 'no TCPAbortOn* counter'}")
    return (f"shutdown: the server read EOF, then sent {fd['server_sent_after_eof']} B; the "
            f"half-closed client read {fd['client_read_after_shutdown']} B, then EOF")


def part_lines(part):
    c, s = part["client"], part["server"]
    cops = ",".join(x["op"] for x in c["steps"])
    sops = ",".join(x["op"] for x in s["steps"])
    lines = [f"== {part['part']}: {TITLES[part['part']]} (port {part['port']})",
             f"client peer -s {cops}; server peer -s {sops}", "",
             "system calls (t_ms when each returned, from the client's connect()):"]
    lines += step_lines(part) + [""]
    lines += ["packets (the client's end of the veth):"] + packet_lines(part) + [""]
    lines += ["sockwatch (each side in its own namespace, every 1 ms, states but LISTEN):"]
    lines += event_lines(part) + ["", "states, each from the first sample that showed it (ms):"]
    lines += state_lines(part, "client") + state_lines(part, "server") + [""]
    lines += exact_lines(part)
    lines += ["what they show:"] + finding_lines(part) + [""]
    lines += ["counters (each side read in its own namespace):"] + counter_lines(part) + [""]
    lines += pkt.capture_notes(part["capture"], f"raw/{NAME}/{part['part']}-capture.txt")
    return lines


def ladder_rows(part):
    notes = [(ns, f"{side}: {op}" + ("" if op.startswith("(") else f" = {ret}")
              + ("" if err == "none" else f" {err}"))
             for ns, side, op, ret, err, _ in step_rows(part)]
    for e, side in [(e, "client") for e in part["events"]] + \
            [(e, "server") for e in part["server_events"]]:
        notes.append((e["t_ns"], f"{side} sockwatch: {e['event']} {t.shown_state(e['state'])} "
                      f"{e['timer']} rq={e['rq']}"))
    for side in ("client", "server") if part["exact"] is not None else ():
        for x in part["exact"][side]:
            what = (f"timewait socket in {t.shown_state(x['new'])} replaces the full one"
                    if x["socket"] == "timewait" else
                    f"{t.shown_state(x['old'])} -> {t.shown_state(x['new'])}")
            notes.append((x["t_ns"], f"{side} tcpevents: {what}"
                          + ("" if x["lasted_ms"] is None or x["new"] == t.CLOSED else
                             f" ({t.shown_state(x['new'])} {x['lasted_ms']:.3f} ms)")))
    return [{"sep": f"{part['part']}: {TITLES[part['part']]}"}] + \
        pkt.ladder_rows(part["segs"], part["t0"], notes, seg_notes(part))


def ss_lines(rows, part):
    if rows is None:
        return ["ss: not recorded (no ss where this ran)"]
    out = ["ss -tano state time-wait, the orderly part, once TIME-WAIT was sampled (an "
           "independent view):"]
    for r in rows:
        out.append(f"  {r['local']} -> {r['peer']} {r['timer']}")
    return out


def part_json(part):
    return {"port": part["port"], "client": part["local"],
            "client_steps": [t.numbers(x, ("op", "errno", "revents")) for x in
                             part["client"]["steps"]],
            "server_steps": [t.numbers(x, ("op", "errno", "revents")) for x in
                             part["server"]["steps"]],
            "segments": [tw.packet_json(p, part["t0"]) for p in part["segs"]],
            "events": [{k: v for k, v in e.items() if k != "t_ns"} for e in part["events"]],
            "server_events": [{k: v for k, v in e.items() if k != "t_ns"}
                              for e in part["server_events"]],
            "states": part["states"], "server_states": part["server_states"],
            "tcpevents": None if part["exact"] is None else
            {"client": [{k: v for k, v in x.items() if k != "t_ns"} for x in part["exact"]["client"]],
             "server": [{k: v for k, v in x.items() if k != "t_ns"} for x in part["exact"]["server"]],
             "untraced": part["exact"]["untraced"], "disagree": part["exact"]["disagree"],
             "missed": part["exact"]["missed"], "unseen": part["exact"]["unseen"]},
            "counters": part["counters"], "server_counters": part["server_counters"],
            "findings": part["findings"], "main": main_line(part),
            "capture": pkt.capture_json(part["capture"])}


def build(rawroot, outdir):
    rawdir, kernel, hz, sysctls, server = tw.read_unit(rawroot, NAME,
                                                       ("net.ipv4.tcp_fin_timeout",))
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    for k in ("request", "read", "reply", "half"):
        prm.int(k, 1)
    wire = tw.read_wire(rawdir)
    te_status, te_why = tcpevents_status(rawdir)
    parts = [one_part(rawdir, p, wire) for p in PARTS]
    ss = read_ss(os.path.join(rawdir, "orderly-ss.txt"))
    lines = [f"{NAME}: four ways to end a connection: FIN or RST, and what each side sees",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire)), "",
             "times: peer's and sockwatch's are CLOCK_MONOTONIC; the capture's are libpcap's "
             "stamps put on that clock by one offset it measured at its start (clock_offset_ns "
             "on its ready line)", tcpevents_line(te_status, te_why), "",
             f"HZ={hz} (machine.txt); TCP_TIMEWAIT_LEN {TCP_TIMEWAIT_LEN_MS} ms "
             "(include/net/tcp.h); the sysctls each side read in its namespace:",
             f"  {'sysctl':<34} {'client':<22} server"]
    lines += [f"  {k:<34} {v or 'absent':<22} {server.get(k) or 'absent'}"
              for k, v in sysctls.items()]
    lines += ["", "main lines:"] + [f"  {main_line(p)}" for p in parts] + [""]
    rows_all, made, svgs = [], {}, {}
    try:
        for p in parts:
            lines += part_lines(p) + [""]
            if p["part"] == "orderly":
                lines += ss_lines(ss, p) + [""]
            rows = ladder_rows(p)
            rows_all.append(rows)
            lines += [f"ladder ({p['part']}; t_ms from its connect()):"]
            lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
            svgs[p["part"]], said = pkt.ladder_svg(outdir, f"{NAME}-{p['part']}-ladder.svg", rows,
                                                   tw.CLIENT_COL, tw.SERVER_COL, made)
            lines += [said, ""]
        un = parts[1]
        obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
               "load_average": None, "result": "ok", "errno": None, "elapsed_s": None,
               "hz": hz, "sysctls": {k: t.sysctl_value(v) for k, v in sysctls.items()},
               "server_sysctls": {k: t.sysctl_value(v) for k, v in server.items()},
               "params": t.numbers(prm), "tcp_timewait_len_ms": TCP_TIMEWAIT_LEN_MS,
               "counters": un["counters"], "server_counters": un["server_counters"],
               "ss_time_wait": ss, "tcpevents": {"status": te_status, "why": te_why},
               "parts": {p["part"]: part_json(p) | {"ladder_svg": svgs[p["part"]],
                                                     "ladder": r}
                         for p, r in zip(parts, rows_all)}}
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        pkt.drop_made(made)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
