#!/usr/bin/python3
"""p04-no-answer report: the peer stops answering (nft on the server's input drops every data
segment of the connection), the client retransmits its one segment until the kernel gives up
and recv() returns ETIMEDOUT.  For each part: every transmission of the data from the capture
on the client's end of the veth, the time each retransmission found spent of the budget, the
end (tcpevents' ESTAB → UNCONN, recv()'s ETIMEDOUT) against the budget, and the counters.

The budget (net/ipv4/tcp_timer.c): retransmits_timed_out() compares the time since
tp->retrans_stamp with tcp_model_timeout(sk, tcp_retries2, TCP_RTO_MIN) =
((2 << tcp_retries2) - 1) x 200 ms, or with TCP_USER_TIMEOUT when the socket set one.
retrans_stamp is the stamp of the first retransmission (tcp_retransmit_skb(): "Save stamp of
the first (attempted) retransmit"), so the budget counts from there, and the kernel gives up at
the first RTO timer that finds it spent: tcp_write_timeout() runs before each retransmission."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p04-no-answer"
PARTS = (("retries2", "tcp_retries2 alone: the budget from tcp_retries2, the RTO about 200 ms"),
         ("rto-min", "the same tcp_retries2, the RTO floor 1 s (a route's rto_min): "
                     "the same budget, fewer retransmissions"),
         ("user-timeout", "the same tcp_retries2 and TCP_USER_TIMEOUT: the user timeout "
                          "replaces the budget"))
COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPAbortOnTimeout", "TcpEstabResets",
            "TcpExtTCPLossProbes")
SERVER_COUNTERS = ("TcpInSegs", "TcpRetransSegs")
SYSCTLS = ("tcp_retries1", "tcp_retries2", "tcp_early_retrans", "tcp_rto_min_us",
           "tcp_rto_max_ms", "tcp_timestamps")
RTO_MIN_MS = 200          # TCP_RTO_MIN, HZ / 5 (include/net/tcp.h): the model's base, a constant
RTO_MAX_MS = 120000       # TCP_RTO_MAX, 120 x HZ: the default of net.ipv4.tcp_rto_max_ms (6.15 on)
CLOCK_MS = 1              # retransmits_timed_out() compares whole ms (tcp_time_stamp_ts)


def linear_thresh(rto_max_ms):
    """tcp_model_timeout()'s linear_backoff_thresh: ilog2(tcp_rto_max / TCP_RTO_MIN), 9 for
    the 120 s of TCP_RTO_MAX (tcp_rto_max(sk) where the kernel has net.ipv4.tcp_rto_max_ms)."""
    return (rto_max_ms // RTO_MIN_MS).bit_length() - 1


def budget_ms(retries2, rto_max_ms=RTO_MAX_MS):
    """tcp_model_timeout(sk, retries2, TCP_RTO_MIN) in ms: the backoff doubles up to the linear
    threshold, and each retry past it adds one tcp_rto_max."""
    k = linear_thresh(rto_max_ms)
    if retries2 <= k:
        return ((2 << retries2) - 1) * RTO_MIN_MS
    return ((2 << k) - 1) * RTO_MIN_MS + (retries2 - k) * rto_max_ms


def client_steps(path):
    """peer's lines → (local address, the send step's t_ns, the recv step's Fields, the
    user-timeout step's read-back value or None)."""
    local = t.one_line(path, "connect ").str("local")
    steps = [f for f in (t.Fields(path, t.kv(x)) for x in t.read_lines(path)
                         if x.startswith("step "))]
    send = next((s for s in steps if s.str("op").startswith("send:")), None)
    recv = next((s for s in steps if s.str("op").startswith("recv:")), None)
    if send is None or recv is None:
        raise t.RawError(f"{path}: want a send: and a recv: step")
    if send.int("ret") <= 0:
        raise t.RawError(f"{path}: the send: step sent nothing")
    ut = next((s for s in steps if s.str("op").startswith("user-timeout:")), None)
    if ut is not None and ut.str("errno") != "none":
        raise t.RawError(f"{path}: setting TCP_USER_TIMEOUT failed: {ut.str('errno')}")
    return local, send.int("t_ns"), recv, None if ut is None else ut.int("value", 0)


def one_part(rawdir, name, retries2, hz, rto_max_ms=RTO_MAX_MS):
    cpath = os.path.join(rawdir, f"{name}-client.txt")
    local, sent_ns, recv, user_timeout = client_steps(cpath)
    cap = pkt.read_complete_capture(os.path.join(rawdir, f"{name}-capture.txt"))
    segs = [p for p in pkt.conn_packets(cap, local) if p["kind"] == "tcp"]
    data = [p for p in segs if p["dir"] == "c>s" and p["len"] > 0]
    if not data:
        raise t.RawError(f"{cap['path']}: no data segment from {local}")
    if any(p["seq"] != data[0]["seq"] or p["len"] != data[0]["len"] for p in data):
        raise t.RawError(f"{cap['path']}: a data segment that is not the first one again")
    if any(p["dir"] == "s>c" and p["ack"] is not None and p["ack"] > data[0]["seq"]
           for p in segs):
        raise t.RawError(f"{cap['path']}: the server acknowledged the data: nothing was lost")
    npath = os.path.join(rawdir, f"{name}-nft-server.txt")
    rules = tw.nft_rules(t.read_lines(npath), npath)
    if len(rules) != 1:
        raise t.RawError(f"{npath}: want one nft rule with a counter, found {len(rules)}")
    ev = tw.read_tcpevents(rawdir, name)
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, SERVER_COUNTERS)
    t0, again = data[0]["t_ns"], data[1:]
    first = again[0]["t_ns"] if again else None
    closed = None if "blind" in ev else next(
        (e["t_ns"] for e in ev["events"] if e["event"] == "state" and e["old"] == "ESTAB"), None)
    # the end: tcpevents' state change where it ran (exact), else recv()'s return
    end_ns = closed if closed is not None else recv.int("t_ns")
    budget = user_timeout or budget_ms(retries2, rto_max_ms)
    since = lambda ns: None if first is None else round((ns - first) / 1e6, 3)  # noqa: E731
    rtx = [{"n": k + 1, "t_ms": round((p["t_ns"] - t0) / 1e6, 3), "since_first_ms": since(p["t_ns"]),
            "gap_ms": round((p["t_ns"] - (data[k]["t_ns"])) / 1e6, 3)} for k, p in enumerate(again)]
    out = {"part": name, "local": local, "port": int(data[0]["dst"].rsplit(":", 1)[1]),
           "retries2": retries2, "rto_max_ms": rto_max_ms, "user_timeout_ms": user_timeout,
           "budget_ms": budget, "budget_from": "TCP_USER_TIMEOUT" if user_timeout else
           "tcp_retries2", "data_len": data[0]["len"], "sent_ns": t0, "send_call_ns": sent_ns,
           "retransmissions": rtx, "end_ms": round((end_ns - t0) / 1e6, 3),
           "end_since_first_ms": since(end_ns), "end_gap_ms": round((end_ns - data[-1]["t_ns"]) / 1e6, 3),
           "recv": {"errno": recv.str("errno"), "t_ms": round((recv.int("t_ns") - t0) / 1e6, 3)},
           "tcpevents": ({"blind": ev["blind"]} if "blind" in ev else
                         {"retrans_ms": [round((e["t_ns"] - t0) / 1e6, 3) for e in ev["events"]
                                         if e["event"] == "retrans"],
                          "closed_ms": None if closed is None else round((closed - t0) / 1e6, 3),
                          "lost": ev["lost"],
                          **({} if ev.get("missed") is None else {"missed": ev["missed"]}),
                          **({} if ev.get("unseen") is None else {"unseen": ev["unseen"]})}),
           "rule": rules[0], "dropped": rules[0]["packets"],
           "counters": cc, "server_counters": sc, "capture": cap, "segs": segs, "data": data}
    # with a user timeout, the RTO after the last retransmission is cut to what is left of it
    out["clamp"] = None
    # the samples with the retransmit timer armed: the one that catches the socket given up
    # (timer off, backoff 0, the last rto_ms kept) arms nothing (CI once: 13056 twice)
    sw = [e for e in t.read_sockwatch(os.path.join(rawdir, f"{name}-sockwatch.txt"))
          if e.str("event") in ("new", "change") and e.int("rto_ms", default=None) is not None
          and e.str("timer") == "on"]
    # the RTO each timer was armed with, in order (sockwatch prints a line per change; past
    # tcp_rto_max the RTO stays and the backoff alone says a timer was armed again)
    key = lambda e: (e.int("rto_ms"), e.int("backoff", default=None))  # noqa: E731
    out["rto_ms"] = [e.int("rto_ms") for i, e in enumerate(sw)
                     if i == 0 or key(e) != key(sw[i - 1])]
    if user_timeout and rtx and sw:
        rto = sw[-1].int("rto_ms")     # the RTO after the last retransmission (sockwatch)
        left = user_timeout - rtx[-1]["since_first_ms"]
        if 0 < left < rto:
            out["clamp"] = {"rto_ms": round(rto, 3), "left_ms": round(left, 3),
                            "gran_ms": t.wheel_gran_ms(left, hz)}
    # the kernel's rule, read from what it did: every retransmission found the budget not yet
    # spent, and the timer that ended it found it spent (whole ms, so one ms either way)
    out["rule_holds"] = bool(rtx) and all(r["since_first_ms"] < budget + CLOCK_MS for r in rtx) \
        and out["end_since_first_ms"] >= budget - CLOCK_MS
    rts = pkt.counter_delta(cc, "TcpRetransSegs")
    dis = [pkt.count_check("client segments sent again", len(again), "client TcpRetransSegs", rts),
           pkt.count_check("data transmissions", len(data), "the nft rule's dropped packets",
                           out["dropped"])]
    if "blind" not in ev:
        dis.append(t.tcpevents_short("tcpevents' retransmissions",
                                     len(out["tcpevents"]["retrans_ms"]), "client TcpRetransSegs",
                                     rts, ev.get("missed"), ev.get("unseen")))
    if recv.str("errno") != "ETIMEDOUT":
        dis.append(f"recv() returned {recv.str('errno')}, not ETIMEDOUT")
    out["disagree"] = [d for d in dis if d]
    return out


def model_text(r):
    """How tcp_model_timeout() made the part's budget, as the .txt says it."""
    k = linear_thresh(r["rto_max_ms"])
    if r["retries2"] <= k:
        return f": ((2 << {r['retries2']}) - 1) x {RTO_MIN_MS} ms (tcp_model_timeout())"
    return (f": ((2 << {k}) - 1) x {RTO_MIN_MS} ms + ({r['retries2']} - {k}) x "
            f"{r['rto_max_ms']} ms (tcp_model_timeout(): the RTO stops doubling at tcp_rto_max, "
            f"{k} = ilog2({r['rto_max_ms']} / {RTO_MIN_MS}))")


def part_lines(r, title):
    b = r["budget_ms"]
    lines = [f"== {r['part']}: {title}",
             f"budget: {b} ms from {r['budget_from']}" +
             (f" ({r['user_timeout_ms']} ms, read back with getsockopt())" if r["user_timeout_ms"]
              else model_text(r)) +
             ", counted from the first retransmission",
             f"nft (server in): {r['rule']['rule']} {r['rule']['verdict']}: counter packets "
             f"{r['dropped']}",
             "", f"the data ({r['data_len']} bytes) at the client's end of the veth (t_ms from "
             "its first transmission):",
             f"  {'t_ms':>10}  {'what':<18} {'RTO':>7} {'after the one before':>20}  "
             f"{'budget spent':>12}",
             f"  {0:10.3f}  {'sent':<18} {'':>7} {'':>20}  {'':>12}"]
    rto = lambda k: f"{r['rto_ms'][k]}" if k < len(r["rto_ms"]) else "-"  # noqa: E731
    for k, x in enumerate(r["retransmissions"]):
        lines.append(f"  {x['t_ms']:10.3f}  {'retransmission ' + str(x['n']):<18} {rto(k):>7} "
                     f"{x['gap_ms']:17.3f} ms  {x['since_first_ms']:9.3f} ms")
    spent = r["end_since_first_ms"]
    last = f"{r['clamp']['left_ms']:.0f}" if r["clamp"] else rto(len(r["retransmissions"]))
    lines.append(f"  {r['end_ms']:10.3f}  {'given up':<18} {last:>7} {r['end_gap_ms']:17.3f} ms  "
                 f"{'-' if spent is None else f'{spent:9.3f} ms'}")
    lines.append("  (RTO: ms the timer before it was armed with, sockwatch's rto_ms; the gap "
                 "after the one before is longer by the timer wheel's rounding)")
    ev = r["tcpevents"]
    lines += ["", ("the end: tcpevents saw ESTAB → UNCONN at "
                   f"{ev['closed_ms']:.3f} ms" if "blind" not in ev and ev["closed_ms"] is not None
                   else f"the end (tcpevents could not run: {ev['blind']}): recv()'s return")
              + f"; recv() returned {r['recv']['errno']} at {r['recv']['t_ms']:.3f} ms"]
    n = len(r["retransmissions"])
    lines.append(f"{n} retransmission(s), each found less than {b} ms spent; the timer after "
                 f"the last found {'-' if spent is None else f'{spent:.3f}'} ms: "
                 + ("given up there, as retransmits_timed_out() says" if r["rule_holds"]
                    else "NOT what retransmits_timed_out() says"))
    if "blind" not in ev:
        lines.append(f"tcpevents: {len(ev['retrans_ms'])} retransmission(s) (tcp:tcp_retransmit_skb)"
                     f", lost={ev['lost']}" + ("" if ev.get("missed") is None
                                               else f" missed={ev['missed']}")
                     + ("" if ev.get("unseen") is None else f" unseen={ev['unseen']}"))
    if r["clamp"]:
        c = r["clamp"]
        lines.append(f"the last timer: cut to the {c['left_ms']:.3f} ms left of the user timeout "
                     f"(tcp_clamp_rto_to_user_timeout(); the RTO was {c['rto_ms']} ms, sockwatch), it "
                     f"fired after {r['end_gap_ms']:.3f} ms (a timer that far off is filed in "
                     f"buckets of {c['gran_ms']:g} ms: the timer wheel fires it up to that late)")
    sc = r["server_counters"]
    lines += ["", "the client's counters (read in its namespace):"]
    lines += [f"  {k:<26} {t.fmt_delta(r['counters'].get(k)):>7}" for k in COUNTERS]
    lines += [f"the server's: {', '.join(f'{k} {t.fmt_delta(sc.get(k))}' for k in SERVER_COUNTERS)}"
              + (" (the handshake's SYN and ACK: none of the data reached it)"
                 if pkt.counter_delta(sc, "TcpInSegs") == 2 else "")]
    lines += ["DISAGREE: " + d for d in r["disagree"]]
    return lines


def part_rows(r, start_ns):
    notes = [(r["send_call_ns"], "client: send() of the data returned")]
    ev = r["tcpevents"]
    if "blind" not in ev and ev["closed_ms"] is not None:
        notes.append((r["sent_ns"] + round(ev["closed_ms"] * 1e6),
                      "tcpevents: ESTAB -> UNCONN (given up)"))
    notes.append((r["sent_ns"] + round(r["recv"]["t_ms"] * 1e6),
                  f"client: recv() = -1 {r['recv']['errno']}"))
    seg_notes = {}
    for k, p in enumerate(r["data"]):
        i = next(i for i, q in enumerate(r["segs"]) if q is p)
        seg_notes[i] = ("data, dropped by nft" if k == 0 else
                        f"retransmission {k}, dropped by nft")
    return [{"sep": f"{r['part']}: budget {r['budget_ms']} ms ({r['budget_from']})"}] + \
        pkt.ladder_rows(r["segs"], start_ns, notes, seg_notes)


def part_json(r):
    keep = ("port", "retries2", "user_timeout_ms", "budget_ms", "budget_from", "data_len",
            "retransmissions", "end_ms", "end_since_first_ms", "end_gap_ms", "recv", "tcpevents",
            "rule", "dropped", "rule_holds", "rto_ms", "clamp", "counters", "server_counters")
    return {**{k: r[k] for k in keep}, "capture": pkt.capture_json(r["capture"]),
            **({"disagree": r["disagree"]} if r["disagree"] else {})}


DEFAULT = NAME + "-default"
DEFAULT_TITLE = ("tcp_retries2 alone, the kernel's own 15 unless the knob retries2 is set "
                 "(unit {unit})")


def read_run(rawdir, unit):
    """One unit's raw directory → its facts and parts (p04-no-answer: the three; -default:
    part retries2 alone)."""
    kernel = t.kernel_release(rawdir)
    info, _ = t.read_machine(os.path.join(rawdir, "machine.txt"))
    hz = info.int("hz", 1, 10000)
    need = ("net.ipv4.tcp_retries2",)
    sysctls = t.read_sysctl_file(os.path.join(rawdir, "sysctls.txt"), need)
    t.read_sysctl_file(os.path.join(rawdir, "server-sysctls.txt"), need)
    retries2 = t.sysctl_int(sysctls, "net.ipv4.tcp_retries2", "sysctls.txt", 0, 255)
    rto_max = t.sysctl_int(sysctls, "net.ipv4.tcp_rto_max_ms", "sysctls.txt", 1) or RTO_MAX_MS
    default = t.read_sysctl_file(os.path.join(rawdir, "sysctls-default.txt"), need)
    names = PARTS if unit == NAME else (("retries2", DEFAULT_TITLE.format(unit=unit)),)
    route = t.read_text(os.path.join(rawdir, "rto-min-route.txt")).strip() if unit == NAME \
        else None
    return {"unit": unit, "rawdir": rawdir, "kernel": kernel, "hz": hz, "sysctls": sysctls,
            "own_retries2": t.sysctl_int(default, "net.ipv4.tcp_retries2",
                                         "sysctls-default.txt", 0, 255),
            "params": t.read_kv(os.path.join(rawdir, "params.txt")), "route": route,
            "wire": tw.read_wire(rawdir), "titles": names,
            "runs": [one_part(rawdir, n, retries2, hz, rto_max) for n, _ in names]}


def unit_lines(u):
    lines = [tw.sysctls_line(u["sysctls"], SYSCTLS, u["hz"]),
             f"(the namespace's own tcp_retries2 was {u['own_retries2']}; "
             "tcp_early_retrans=0: no loss probe, so every retransmission is an RTO's)"]
    return lines + ([f"part rto-min's route: {u['route']}"] if u["route"] is not None else [])


def build(rawroot, outdir):
    units, partial = t.group_runs(rawroot, NAME, (NAME, DEFAULT), read_run)
    first = units.get(NAME) or units[DEFAULT]
    rawdir, kernel = first["rawdir"], first["kernel"]
    lines = [f"{NAME}: nobody answers any more: one segment of data retransmitted until the "
             "kernel gives up (ETIMEDOUT)",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      f"namespaces joined by a veth pair (MTU {first['wire']['client']['link']['mtu']}); "
                      "nft on the server's input drops the connection's data; the capture on "
                      "the client's end"),
             ""]
    rows, parts = [], {}
    for name in (NAME, DEFAULT):
        u = units.get(name)
        if u is None:
            if name in partial:
                lines += [f"== unit {name}: not reported: {partial[name]} (partial raw output in "
                          f"raw/{name}/)", ""]
            elif name == NAME:
                lines += [f"== unit {NAME}: not run (./run.sh {NAME})", ""]
            continue
        if name == DEFAULT:
            lines += [f"== unit {DEFAULT} (collected {t.collected_at(u['rawdir'])})"]
        lines += unit_lines(u) + [""]
        for r, (_, title) in zip(u["runs"], u["titles"]):
            lines += part_lines(r, title) + [""]
            lines += pkt.capture_notes(r["capture"], f"raw/{name}/{r['part']}-capture.txt")
            more = part_rows(r, r["segs"][0]["t_ns"])
            if name == DEFAULT:
                more[0] = {"sep": f"{DEFAULT} {more[0]['sep']}"}
            rows += more
        parts[name] = {r["part"]: part_json(r) for r in u["runs"]}
    lines += ["ladder (the client's end of the veth; t_ms from each part's SYN):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    more = {} if first["route"] is None else {"route": first["route"]}
    obj = tw.parts_obj(NAME, kernel, rawdir, first["hz"], first["params"], first["sysctls"],
                       SYSCTLS, parts.get(NAME, {}), rows, **more)
    if DEFAULT in units:
        d = units[DEFAULT]
        obj["default"] = {"unit": DEFAULT, "collected_at": t.collected_at(d["rawdir"]),
                          "params": d["params"], "knobs": t.read_knobs(d["rawdir"]),
                          "sysctls": t.sysctls_json(d["sysctls"], SYSCTLS),
                          "parts": parts[DEFAULT]}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
