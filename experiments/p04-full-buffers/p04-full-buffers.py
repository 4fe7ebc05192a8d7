#!/usr/bin/python3
"""p04-full-buffers report: a receiver that stops reading.  Per part (fill, usertimeout,
retries2): how many bytes the sender's send() calls took before EAGAIN against SO_SNDBUF as
set and read back, where those bytes are (the receiver's buffer, the sender's Send-Q), the
zero window in the capture, every zero-window probe with the gap to the one before against
tcp_probe0_when()'s, whether the receiver answered it, the persist timer as sockwatch saw
it, how the blocking send() ended, and both sides' counters.  Every number from raw/."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t
import tcplab_pkt as pkt
import tcplab_wire as tw

NAME = "p04-full-buffers"
PARTS = ("fill", "usertimeout", "retries2")
TITLES = {
    "fill": "the reader stops, then reads again",
    "usertimeout": "TCP_USER_TIMEOUT on the sender, the probes answered",
    "retries2": "a small tcp_retries2, then the receiver's answers dropped",
}
C_COUNTERS = ("TcpExtTCPWinProbe", "TcpExtTCPAbortOnTimeout", "TcpExtTCPTimeouts",
              "TcpRetransSegs", "TcpOutSegs", "TcpInSegs")
S_COUNTERS = ("TcpExtTCPToZeroWindowAdv", "TcpExtTCPWantZeroWindowAdv",
              "TcpExtTCPFromZeroWindowAdv", "TcpExtTCPACKSkippedSeq", "TcpExtTCPZeroWindowDrop",
              "TcpExtTCPRcvQDrop", "TcpInSegs", "TcpOutSegs")
SIDE_BY_SIDE = ("TcpExtTCPWinProbe", "TcpExtTCPToZeroWindowAdv", "TcpExtTCPWantZeroWindowAdv",
                "TcpExtTCPFromZeroWindowAdv", "TcpExtTCPACKSkippedSeq", "TcpExtTCPAbortOnTimeout",
                "TcpExtTCPTimeouts", "TcpRetransSegs")
TCP_RTO_MIN_MS = 200        # include/net/tcp.h: TCP_RTO_MIN ((unsigned)(HZ / 5))
TCP_RTO_MAX_MS = 120000     # include/net/tcp.h: TCP_RTO_MAX (120 * HZ), where no tcp_rto_max_ms
SIGHT_SLACK_NS = 1_000_000  # a sockwatch sample may carry a time a little before the capture's
SCHED_SLACK_MS = 60         # wake-up and sampling slack allowed on a loaded 2-core VM


def tolerance_ms(expected_ms, hz):
    """An interval the kernel's timer sets fires no earlier than one jiffy before it (the
    jiffy it was armed in) and no later than its wheel granularity, a jiffy, and the slack."""
    jiffy = 1000 / hz
    return (expected_ms - jiffy, expected_ms + t.wheel_gran_ms(expected_ms, hz) + 2 * jiffy
            + SCHED_SLACK_MS)


def sender(path):
    """fill_sender's output → {"setup", "connected", "first_eagain", "full", "blocking",
    "result"} Fields."""
    out = {}
    for d, line in zip(t.read_kv_lines(path), t.read_lines(path)):
        word = line.split(" ", 1)[0].split("=", 1)[0]
        key = {"sndbuf_set": "setup", "connected": "connected", "first_eagain": "first_eagain",
               "full": "full", "blocking_send": "blocking", "result": "result"}.get(word)
        if key:
            out[key] = d
    for k in ("setup", "connected", "full", "blocking", "result"):
        if k not in out:
            raise t.RawError(f"{path}: no `{k}` line: fill_sender did not get that far")
    return out


def reader(path):
    d = {line.split(" ", 1)[0].split("=", 1)[0]: f
         for f, line in zip(t.read_kv_lines(path), t.read_lines(path))}
    for k in ("ready", "accepted"):
        if k not in d:
            raise t.RawError(f"{path}: no `{k}` line")
    if "reading" not in d and "stopped" not in d:
        raise t.RawError(f"{path}: neither `reading` nor `stopped`: the reader did not finish")
    return d


def wscale(segs, direction):
    for p in segs:
        if p["dir"] == direction and "S" in p["flags"]:
            for o in p["opts"].split(","):
                if o.startswith("wscale:"):
                    return t.num(o[7:], "wscale", 0, 14)
            if not pkt.opts_whole(p):   # a cut option list: no wscale listed is not none sent
                raise t.RawError(f"the SYN in direction {direction} is truncated or bad in the "
                                 "capture: its window scale is not known")
            return 0
    raise t.RawError(f"no SYN in direction {direction} in the capture")


def dropped_segments(segs, dropped_last):
    """Indexes of the server's segments nft dropped at the client's input: its rule drops
    every one from the moment it is loaded, so they are the last `dropped_last` (the rule's
    counter) of them; the capture, before the input hook, still saw them."""
    s_idx = [i for i, p in enumerate(segs) if p["dir"] == "s>c"]
    return set(s_idx[len(s_idx) - dropped_last:]) if dropped_last else set()


def probes_of(segs, dropped):
    """The zero-window probes among one connection's segments: the client's pure ACKs whose
    seq is one below what the server has acknowledged (tcp_xmit_probe_skb(): snd_una - 1),
    each with its answer: the first server segment after it, before the client's next one,
    that acknowledges seq + 1 (dropped: nft took it before the socket saw it)."""
    out, acked = [], None
    for i, p in enumerate(segs):
        if p["dir"] == "s>c" and p["ack"] is not None:
            acked = p["ack"] if acked is None else max(acked, p["ack"])
            continue
        if not (p["dir"] == "c>s" and p["flags"] == "A" and p["len"] == 0 and acked is not None
                and p["seq"] == (acked - 1) % 2 ** 32):
            continue
        ans = None
        for j in range(i + 1, len(segs)):
            q = segs[j]
            if q["dir"] == "c>s":
                break
            if q["ack"] == (p["seq"] + 1) % 2 ** 32:
                ans = j
                break
        out.append({"i": i, "t_ns": p["t_ns"], "seq": p["seq"],
                    "answer_ns": None if ans is None else segs[ans]["t_ns"],
                    "answer_win": None if ans is None else segs[ans]["win"],
                    "answer_dropped": ans in dropped})
    return out


def schedule(probes, segs, dropped, closed_ns, base_ms, retries2, rto_max_ms, hz):
    """Each probe's gap to what armed its timer (the previous probe, or a later segment the
    socket took from the receiver: tcp_ack_probe() re-arms it; for probe 1 the ACK that closed
    the window) against tcp_probe0_when(): base << backoff, backoff = the probes sent before
    it, at most tcp_retries2 (tcp_send_probe0()), capped at TCP_RTO_MAX."""
    heard = [p["t_ns"] for i, p in enumerate(segs) if p["dir"] == "s>c" and i not in dropped]
    prev = closed_ns
    for k, pr in enumerate(probes):
        armed = max([prev] + [ns for ns in heard if prev <= ns < pr["t_ns"]])
        backoff = min(k, retries2)
        exp = min(base_ms * (1 << backoff), rto_max_ms)
        lo, hi = tolerance_ms(exp, hz)
        gap = (pr["t_ns"] - armed) / 1e6
        by = ("the ACK that closed the window" if k == 0 and armed == closed_ns else
              "the previous probe" if armed == prev else "the receiver's answer")
        pr.update(backoff_armed=backoff, expected_ms=exp, gap_ms=round(gap, 3),
                  from_prev_ms=round((pr["t_ns"] - prev) / 1e6, 3), armed_by=by,
                  lo_ms=round(lo, 3), hi_ms=round(hi, 3), within=lo <= gap <= hi)
        prev = pr["t_ns"]
    return probes


def sighted(probes, events, start_ns):
    """Where sockwatch saw each probe: the first event after it (before the next probe) whose
    backoff or retrans (probes out) went up, i.e. tcp_send_probe0() had run.  The capture's
    times are libpcap's, put on the monotonic clock by an offset the capture measured once,
    so "after" allows SIGHT_SLACK_NS."""
    prev_b = prev_r = 0
    seen = []
    for e in events:
        b, r = e["backoff"] or 0, e["retrans"]
        if e["event"] == "change" and e["timer"] == "persist" and (b > prev_b or r > prev_r):
            seen.append(start_ns + round(e["t_s"] * 1e9))
        prev_b, prev_r = b, r
    for k, p in enumerate(probes):
        nxt = probes[k + 1]["t_ns"] if k + 1 < len(probes) else None
        hit = [ns for ns in seen if ns >= p["t_ns"] - SIGHT_SLACK_NS
               and (nxt is None or ns < nxt - SIGHT_SLACK_NS)]
        p["sockwatch_ns"] = hit[0] if hit else None
    last = None
    for p in probes:
        s = p["sockwatch_ns"]
        p["sockwatch_gap_ms"] = None if s is None or last is None else round((s - last) / 1e6, 3)
        last = s


def expected_abort(probes, setup, base, retries2, rto_max, hz, res):
    """When the kernel should abort, from what armed the last timer: with TCP_USER_TIMEOUT
    the first probe (icsk_probes_tstamp, tcp_probe_timer()) + the timeout; without it the
    timer after the last probe, base << min(probes, tcp_retries2), when that many went
    unanswered (probes_out >= max_probes).  None when the connection was not aborted."""
    if res.str("result") != "error" or not probes:
        return None
    if setup.int("user_timeout_set", -1) > 0:
        ref, exp, why = probes[0]["t_ns"], setup.int("user_timeout_ms"), "the first probe + " \
            "TCP_USER_TIMEOUT"
    else:
        ref = probes[-1]["t_ns"]
        exp = min(base * (1 << min(len(probes), retries2)), rto_max)
        why = f"the last probe + base << min({len(probes)}, tcp_retries2={retries2})"
    lo, hi = tolerance_ms(exp, hz)
    got = (res.int("end_ns") - ref) / 1e6
    return {"from": why, "expected_ms": exp, "got_ms": round(got, 3), "lo_ms": round(lo, 3),
            "hi_ms": round(hi, 3), "within": lo <= got <= hi,
            "unanswered_at_end": unanswered_tail(probes)}


def unanswered_tail(probes):
    n = 0
    for p in reversed(probes):
        if p["answer_ns"] is not None and not p["answer_dropped"]:
            break
        n += 1
    return n


def watch(path, start_ns):
    events = [t.sockwatch_event(e, start_ns) | {"wq": e.int("wq"), "rq": e.int("rq"),
                                                 "snd_wnd": e.int("snd_wnd", default=None),
                                                 "rcv_wnd": e.int("rcv_wnd", default=None),
                                                 "probes": e.int("probes", default=None)}
              for e in t.read_sockwatch(path)]
    if not events or events[0]["event"] != "new":
        raise t.RawError(f"{path}: no `event=new` line (the socket was never seen)")
    return events


def one_part(rawdir, name, hz, sysctls, r2_sysctls, wire):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    s, r = sender(f("sender.txt")), reader(f("reader.txt"))
    start = s["connected"].int("t_ns")
    local = s["connected"].str("local")
    port = r["ready"].int("port", 1, 65535)
    cap = pkt.read_capture(f("capture.txt"))
    segs = pkt.conn_packets(cap, local)
    if not segs:
        raise t.RawError(f"{f('capture.txt')}: no segment of {local}")
    src = "retries2-sysctl.txt" if name == "retries2" else "sysctls.txt"
    retries2 = t.sysctl_int(r2_sysctls if name == "retries2" else sysctls,
                            "net.ipv4.tcp_retries2", src, 0, 255)
    if retries2 is None:
        raise t.RawError(f"{os.path.join(rawdir, src)}: no net.ipv4.tcp_retries2 (the probes' "
                         "limit)")
    rto_max = t.sysctl_int(sysctls, "net.ipv4.tcp_rto_max_ms", "sysctls.txt", 1) or TCP_RTO_MAX_MS
    rules = [x for x in wire["client"]["rules"] if f"sport {port}" in x["rule"]]
    dropped = rules[0]["packets"] if rules else 0
    full = s["full"]
    rto_ms = full.int("rto_us") / 1000
    base = max(rto_ms, TCP_RTO_MIN_MS)
    closed = next((p for p in segs if p["dir"] == "s>c" and p["win"] == 0), None)
    if closed is None:
        raise t.RawError(f"{f('capture.txt')}: the receiver never advertised a zero window")
    gone = dropped_segments(segs, dropped)
    probes = schedule(probes_of(segs, gone), segs, gone, closed["t_ns"], base, retries2, rto_max,
                      hz)
    reopened = next((p for p in segs if p["dir"] == "s>c" and p["t_ns"] > closed["t_ns"]
                     and p["win"] > 0), None)
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", C_COUNTERS, S_COUNTERS)
    held = r.get("reading") or r.get("stopped")
    res = s["result"]
    events = watch(f("sockwatch.txt"), start)
    sighted(probes, events, start)
    abort = expected_abort(probes, s["setup"], base, retries2, rto_max, hz, res)
    return {"part": name, "port": port, "local": local, "start_ns": start,
            "setup": s["setup"], "first_eagain": s.get("first_eagain"), "full": full,
            "blocking": s["blocking"], "result": res, "reader": r, "held": held,
            "retries2": retries2, "rto_ms": rto_ms, "base_ms": base, "rto_max_ms": rto_max,
            "wscale_s": wscale(segs, "s>c"), "closed": closed, "reopened": reopened,
            "probes": probes, "dropped_by_rule": dropped, "rule": rules[0] if rules else None,
            "events": events, "abort": abort,
            "server_events": watch(f("server-sockwatch.txt"), start),
            "counters": cc, "server_counters": sc, "capture": cap, "segs": segs}


def ms(r, ns):
    return (ns - r["start_ns"]) / 1e6


def buffer_lines(r):
    st, full, fe = r["setup"], r["full"], r["first_eagain"]
    set_ = st.int("sndbuf_set")
    got = st.int("sndbuf_get")
    lines = [("SO_SNDBUF: " + (f"set {set_}, read back {got} (2 x {set_})" if set_ else
                               f"not set: {got} after socket(), autotuned within tcp_wmem"))]
    for d, what in ((fe, "first EAGAIN"), (full, "full")):
        if d is None:
            continue
        lines.append(f"  {what:<13} {ms(r, d.int('t_ns')):9.3f} ms: {d.int('accepted')} B taken "
                     f"by {d.int('sends')} send()s; SO_SNDBUF {d.int('sndbuf')}, Send-Q "
                     f"{d.int('outq')} ({d.int('notsent')} not sent), snd_wnd {d.int('snd_wnd')}, "
                     f"{d.int('unacked')} segments unacked")
    unread = r["held"].int("unread")
    lines.append(f"  where those {full.int('accepted')} B are: {unread} in the receiver's buffer "
                 f"(unread, FIONREAD) + {full.int('outq')} in the sender's Send-Q = "
                 f"{unread + full.int('outq')}")
    c = r["closed"]
    lines.append(f"  the window closed at {ms(r, c['t_ns']):9.3f} ms: the receiver's ACK of "
                 f"{c['ack'] - 1} B says win=0 (capture)")
    return lines


def probe_lines(r):
    lines = [f"zero-window probes (the capture; base = max(rto {r['rto_ms']:g} ms, TCP_RTO_MIN "
             f"{TCP_RTO_MIN_MS} ms) = {r['base_ms']:g} ms, backoff at most tcp_retries2="
             f"{r['retries2']}):",
             f"  {'#':>2} {'t_ms':>10} {'gap_ms':>9} {'expected':>8} {'window':>18}  "
             f"{'sockwatch':>9} {'sw_gap':>8}  {'armed by':<31} answer"]
    for k, p in enumerate(r["probes"], 1):
        if p["answer_ns"] is None:
            ans = "none (no ACK from the receiver)"
        else:
            ans = (f"win={p['answer_win']} after {(p['answer_ns'] - p['t_ns']) / 1e3:.1f} µs"
                   + (", dropped by nft before the socket" if p["answer_dropped"] else ""))
        sw = "-" if p["sockwatch_ns"] is None else f"{ms(r, p['sockwatch_ns']):.1f}"
        swg = "-" if p["sockwatch_gap_ms"] is None else f"{p['sockwatch_gap_ms']:.1f}"
        lines.append(f"  {k:>2} {ms(r, p['t_ns']):10.3f} {p['gap_ms']:9.3f} {p['expected_ms']:8g} "
                     f"{p['lo_ms']:8.1f}..{p['hi_ms']:<8.1f}  {sw:>9} {swg:>8}  "
                     f"{p['armed_by']:<31} {ans}")
    n_ok = sum(1 for p in r["probes"] if p["within"])
    lines.append(f"  {n_ok} of {len(r['probes'])} gaps within the window; TCPWinProbe counted "
                 f"{t.fmt_delta(r['counters'].get('TcpExtTCPWinProbe'))}")
    return lines


def event_lines(r, events, who):
    """sockwatch's lines; with the persist timer, base << backoff beside expires_ms (what
    tcp_probe0_when() armed it with, capped at TCP_RTO_MAX)."""
    lines = [f"  {who:<6} {'t_ms':>10} {'event':<6} {'timer':<8} {'expires_ms':>10} "
             f"{'base<<bo':>8} {'retrans':>7} {'backoff':>7} {'probes':>6} {'rq':>7} {'wq':>7} "
             f"{'snd_wnd':>7} {'rcv_wnd':>7}"]
    for e in events:
        na = lambda v: "-" if v is None else v  # noqa: E731
        armed = (min(r["base_ms"] * (1 << e["backoff"]), r["rto_max_ms"])
                 if e["timer"] == "persist" and e["backoff"] is not None else "-")
        lines.append(f"  {'':<6} {e['t_s'] * 1e3:10.3f} {e['event']:<6} {e['timer']:<8} "
                     f"{e['expires_ms']:>10} {armed:>8g} {e['retrans']:>7} {na(e['backoff']):>7} "
                     f"{na(e['probes']):>6} {e['rq']:>7} {e['wq']:>7} {na(e['snd_wnd']):>7} "
                     f"{na(e['rcv_wnd']):>7}"
                     if armed != "-" else
                     f"  {'':<6} {e['t_s'] * 1e3:10.3f} {e['event']:<6} {e['timer']:<8} "
                     f"{e['expires_ms']:>10} {armed:>8} {e['retrans']:>7} {na(e['backoff']):>7} "
                     f"{na(e['probes']):>6} {e['rq']:>7} {e['wq']:>7} {na(e['snd_wnd']):>7} "
                     f"{na(e['rcv_wnd']):>7}")
    return lines


def end_lines(r):
    b, res = r["blocking"], r["result"]
    lines = [f"blocking send() of {b.int('bytes')} B at {ms(r, b.int('start_ns')):.3f} ms: "
             + (f"returned {res.int('sent')} after {res.float('elapsed_s'):.3f} s"
                if res.str("result") == "ok" else
                f"failed with {res.str('errno', '?')} after {res.float('elapsed_s'):.3f} s"
                f" ({ms(r, res.int('end_ns')):.3f} ms)")]
    a = r["abort"]
    if a is not None:
        lines.append(f"  the abort: {a['got_ms']:.3f} ms after {a['from']} = {a['expected_ms']:g} "
                     f"ms (window {a['lo_ms']:.1f}..{a['hi_ms']:.1f}); {len(r['probes'])} probes "
                     f"sent, the last {a['unanswered_at_end']} without an answer the socket saw")
    ro = r["reopened"]
    if ro is not None and r["part"] == "fill":
        lines.append(f"the window reopened at {ms(r, ro['t_ns']):.3f} ms: win={ro['win']} "
                     f"(x{1 << r['wscale_s']} = {ro['win'] << r['wscale_s']} B) once the reader "
                     f"read again at {ms(r, r['reader']['reading'].int('t_ns')):.3f} ms")
    rd = r["reader"].get("result")
    if rd is not None and rd.str("result") == "eof":
        lines.append(f"the reader read {rd.int('bytes')} B in {rd.int('reads')} read()s to EOF; "
                     f"the sender's send()s took {res.int('accepted')} B")
    elif "stopped" in r["reader"]:
        lines.append(f"the reader was stopped with {r['reader']['stopped'].int('unread')} B unread")
    return lines


def part_lines(r):
    lines = [f"== {r['part']}: {TITLES[r['part']]} (port {r['port']})"]
    st = r["setup"]
    ut = st.int("user_timeout_ms")
    lines.append(f"TCP_USER_TIMEOUT: {ut} ms" if st.int("user_timeout_set", -1) >= 0
                 else "TCP_USER_TIMEOUT: not set")
    if r["part"] == "retries2":
        lines.append(f"tcp_retries2 in the client's namespace: {r['retries2']} (raw/{NAME}/"
                     f"retries2-sysctl.txt)")
    if r["rule"]:
        lines.append(f"nft (client in): {r['rule']['rule']} {r['rule']['verdict']}: counter "
                     f"packets {r['rule']['packets']}")
    lines += buffer_lines(r) + [""] + probe_lines(r) + [""]
    lines += ["sockwatch (t_ms from connect(); retrans = probes out without an answer):"]
    lines += event_lines(r, r["events"], "client") + event_lines(r, r["server_events"], "server")
    lines += [""] + end_lines(r) + ["", "counters (each side read in its own namespace):",
                                    f"  {'counter':<28} {'client':>7} {'server':>7}"
                                    "   (. = not in that side's counters -d: unchanged)"]
    for k in SIDE_BY_SIDE:
        c, s = r["counters"], r["server_counters"]
        lines.append(f"  {k:<28} {t.fmt_delta(c[k]) if k in c else '.':>7} "
                     f"{t.fmt_delta(s[k]) if k in s else '.':>7}")
    return lines


def ss_lines(rawdir):
    lines = t.read_lines(os.path.join(rawdir, "fill-ss.txt"), optional=True)
    if lines is None:
        return ["ss: not recorded (no ss where this ran)"]
    return ["ss -tmoin of the fill sender, after 2 probes (an independent view):"] + \
        [f"  {x.strip()}" for x in lines]


def part_rows(r):
    notes = [(r["full"].int("t_ns"), f"sender: EAGAIN, {r['full'].int('accepted')} B taken"),
             (r["blocking"].int("start_ns"), "sender: blocking send()"),
             (r["result"].int("end_ns"), f"sender: send() {r['result'].str('errno', 'returned')}")]
    notes += [(r["start_ns"] + round(e["t_s"] * 1e9), f"sockwatch: {e['timer']} retrans="
               f"{e['retrans']} backoff={e['backoff']}") for e in r["events"]
              if e["event"] != "new"]
    seg_notes = {p["i"]: f"probe {k}" for k, p in enumerate(r["probes"], 1)}
    return [{"sep": f"{r['part']}: {TITLES[r['part']]}"}] + \
        pkt.ladder_rows(r["segs"], r["start_ns"], notes, seg_notes)


def part_json(r):
    full = r["full"]
    return {"port": r["port"], "sndbuf_set": r["setup"].int("sndbuf_set"),
            "sndbuf_get": r["setup"].int("sndbuf_get"),
            "user_timeout_ms": r["setup"].int("user_timeout_ms"),
            "user_timeout_set": r["setup"].int("user_timeout_set", -1) >= 0,
            "first_eagain": None if r["first_eagain"] is None else t.numbers(r["first_eagain"]),
            "full": t.numbers(full), "receiver_unread": r["held"].int("unread"),
            "receiver_rcvbuf": r["held"].int("rcvbuf"),
            "window_closed_ms": round(ms(r, r["closed"]["t_ns"]), 3),
            "window_reopened_ms": None if r["reopened"] is None
            else round(ms(r, r["reopened"]["t_ns"]), 3),
            "reopened_win": None if r["reopened"] is None else r["reopened"]["win"],
            "wscale_server": r["wscale_s"], "rto_ms": r["rto_ms"], "base_ms": r["base_ms"],
            "retries2": r["retries2"], "rto_max_ms": r["rto_max_ms"],
            "probes": [{k: p[k] for k in ("gap_ms", "from_prev_ms", "expected_ms", "lo_ms",
                                          "hi_ms", "within", "backoff_armed", "armed_by",
                                          "answer_win", "answer_dropped")}
                       | {"t_ms": round(ms(r, p["t_ns"]), 3),
                          "sockwatch_ms": None if p["sockwatch_ns"] is None
                          else round(ms(r, p["sockwatch_ns"]), 3),
                          "sockwatch_gap_ms": p["sockwatch_gap_ms"],
                          "answered": p["answer_ns"] is not None,
                          "answer_us": None if p["answer_ns"] is None
                          else round((p["answer_ns"] - p["t_ns"]) / 1e3, 1)}
                       for p in r["probes"]],
            "blocking_send_ms": round(ms(r, r["blocking"].int("start_ns")), 3),
            "result": r["result"].str("result"), "errno": r["result"].str("errno", None),
            "result_ms": round(ms(r, r["result"].int("end_ns")), 3),
            "elapsed_s": r["result"].float("elapsed_s"),
            "accepted": r["result"].int("accepted"),
            "reader": (t.numbers(r["reader"]["result"], ("result", "errno"))
                       if "result" in r["reader"] else None),
            "dropped_by_rule": r["dropped_by_rule"], "abort": r["abort"],
            "events": r["events"], "server_events": r["server_events"],
            "counters": r["counters"], "server_counters": r["server_counters"],
            "capture": pkt.capture_json(r["capture"])}


def build(rawroot, outdir):
    rawdir, kernel, hz, sysctls, server = tw.read_unit(rawroot, NAME)
    r2 = t.read_sysctl_file(os.path.join(rawdir, "retries2-sysctl.txt"))
    init = t.read_sysctl_file(os.path.join(rawdir, "init-sysctls.txt"))
    wire = tw.read_wire(rawdir)
    runs = [one_part(rawdir, p, hz, sysctls, r2, wire) for p in PARTS]
    lines = [f"{NAME}: a receiver that stops reading, a sender that fills its buffer",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir, wire)), "",
             f"HZ={hz} (machine.txt); TCP_RTO_MIN {TCP_RTO_MIN_MS} ms; the sysctls each side "
             "read in its namespace:", f"  {'sysctl':<32} {'client':<24} server"]
    lines += [f"  {k:<32} {v or 'absent':<24} {server.get(k) or 'absent'}"
              for k, v in sysctls.items()]
    lines += [f"  {k:<32} {v or 'absent':<24} (the initial namespace's: not per namespace here)"
              for k, v in init.items() if sysctls.get(k) is None] + [""]
    rows = []
    for r in runs:
        lines += part_lines(r) + [""]
        lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{r['part']}-capture.txt") + [""]
        rows += part_rows(r)
    lines += ss_lines(rawdir) + [""]
    lines += ["ladder (the client's end of the veth; t_ms from each part's connect()):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    main = runs[0]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "result": "ok", "errno": None, "elapsed_s": None,
           "hz": hz, "sysctls": {k: t.sysctl_value(v) for k, v in sysctls.items()},
           "server_sysctls": {k: t.sysctl_value(v) for k, v in server.items()},
           "init_sysctls": {k: t.sysctl_value(v) for k, v in init.items()},
           "counters": main["counters"], "server_counters": main["server_counters"],
           "tcp_rto_min_ms": TCP_RTO_MIN_MS, "sched_slack_ms": SCHED_SLACK_MS,
           "parts": {r["part"]: part_json(r) for r in runs}, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
