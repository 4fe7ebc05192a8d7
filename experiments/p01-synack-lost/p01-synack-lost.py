#!/usr/bin/python3
"""p01-synack-lost report: the first SYN-ACKs (the knob drops, 2 by default) dropped by nft,
once on the client's input hook (a loss on the way: the server's sends succeed) and once on the
server's own output hook (its sends fail).  Both timers (the client's SYN-SENT socket, the
server's request socket) as sockwatch saw them in their namespaces, every SYN-ACK at both ends
of the veth with what sent it, and which side's counter counts which retransmission."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p01-synack-lost"
PARTS = (("lost", "client", "in", "the client's input hook: to the server they left, as if lost "
          "on the way"),
         ("local", "server", "out", "the server's own output hook: the server's sends fail"))
COUNTERS = ("TcpActiveOpens", "TcpPassiveOpens", "TcpOutSegs", "TcpInSegs", "TcpRetransSegs",
            "TcpExtTCPSynRetrans", "TcpExtTCPTimeouts", "IpOutRequests", "IpOutTransmits")
# the counters printed side by side (the rest of each delta follows in its own block)
SIDE_BY_SIDE = ("TcpExtTCPSynRetrans", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpOutSegs",
                "IpOutRequests", "IpOutTransmits", "TcpActiveOpens", "TcpPassiveOpens")

# the longest a SYN-ACK that answers a SYN can take to leave (classify()); the timers are 1 s
ANSWER_NS = 100_000_000


def watch(path, start_ns, end_ns):
    events = [t.sockwatch_event(e, start_ns) for e in t.read_sockwatch(path, end_ns)]
    if not events or events[0]["event"] != "new":
        raise t.RawError(f"{path}: no `event=new` line (the socket was never seen)")
    return events


def synacks(cap_segs):
    return [p for p in cap_segs if p["dir"] == "s>c" and p["flags"] == "SA"]


def classify(server_segs):
    """What sent each SYN-ACK that left the server, from the order on the server's end of the
    veth: the first answers the first SYN; a later one that is the first SYN-ACK after a
    retransmitted SYN arrived answers that SYN; any other was sent with no new SYN to answer,
    by the request's own timer.  An answer leaves within ANSWER_NS of its SYN (µs here, a few
    ms in an emulated guest): a SYN-ACK later than that is the timer's, the SYN's answer having
    been dropped before this capture saw it (a rule on the server's output hook, drops > 2).
    → list of {"t_ns", "why", "after_syn_us"}."""
    out, pending, syn_n = [], None, -1
    for p in server_segs:
        if p["dir"] == "c>s" and p["flags"] == "S":
            syn_n += 1
            pending = (syn_n, p["t_ns"])
        elif p["dir"] == "s>c" and p["flags"] == "SA":
            if pending is not None and p["t_ns"] - pending[1] > ANSWER_NS:
                pending = None
            if pending is not None:
                n, ts = pending
                why = "answers SYN 0" if n == 0 and not out else f"answers SYN {n} (a retransmission)"
                out.append({"t_ns": p["t_ns"], "why": why, "syn": n,
                            "after_syn_us": round((p["t_ns"] - ts) / 1e3, 1)})
                pending = None
            else:
                out.append({"t_ns": p["t_ns"], "why": "timer: no new SYN since the last SYN-ACK",
                            "syn": None, "after_syn_us": None})
    return out


def one_part(rawdir, name, side, hook, wire):
    c = t.read_kv(os.path.join(rawdir, f"{name}-client.txt"))
    start, local = c.int("start_ns"), c.str("local")
    end = c.int("end_ns", start)
    result = c.str("result")
    listener = t.listener_ready(os.path.join(rawdir, f"{name}-listener.txt"), "never")
    port = listener.int("port", 1, 65535)
    ccap = pkt.read_capture(os.path.join(rawdir, f"{name}-capture.txt"))
    scap = pkt.read_capture(os.path.join(rawdir, f"{name}-server-capture.txt"))
    csegs, ssegs = pkt.conn_packets(ccap, local), pkt.conn_packets(scap, local)
    cev = watch(os.path.join(rawdir, f"{name}-sockwatch.txt"), start, end)
    sev = watch(os.path.join(rawdir, f"{name}-server-sockwatch.txt"), start, end)
    rules = [r for r in wire[side]["rules"] if f"sport {port} " in r["rule"] + " "]
    if len(rules) != 1:
        raise t.RawError(f"{os.path.join(rawdir, 'wire.txt')}: want one nft rule for sport {port} "
                         f"on the {side} side, found {len(rules)}")
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, COUNTERS)
    sent = classify(ssegs)
    at_client = synacks(csegs)
    # the client end sees a SYN-ACK before its input hook (libpcap taps the device), so with
    # the rule there the first `packets` of them are the dropped ones
    dropped_at_client = rules[0]["packets"] if side == "client" else 0
    out = {"part": name, "side": side, "hook": hook, "port": port, "addr": listener.str("addr"),
            "local": local, "start_ns": start, "end_ns": end, "result": result,
            "errno": c.str("errno") if result == "error" else None,
            "elapsed_s": c.float("elapsed_s", 0, 86400), "rule": rules[0],
            "client_events": cev, "server_events": sev, "counters": cc, "server_counters": sc,
            "client_capture": ccap, "server_capture": scap, "csegs": csegs, "ssegs": ssegs,
            "synacks_sent": sent, "synacks_at_client": at_client,
            "dropped_at_client": dropped_at_client,
            "syns": pkt.syns(csegs)}
    out["disagree"] = disagree(out)
    return out


def disagree(r):
    """The capture's counts beside the counters that count the same packets (each capture is
    on its side's end of the veth, where that side's segments leave): the client's SYNs sent
    again against its TCPSynRetrans, its segments sent again against its TcpRetransSegs, and,
    when the rule is on the client (nothing the server sends is dropped before its end's
    capture), the server's against its TcpRetransSegs."""
    cc, sc = r["counters"], r["server_counters"]
    checks = [pkt.count_check("client SYNs sent again", max(len(r["syns"]) - 1, 0),
                              "client TcpExtTCPSynRetrans",
                              pkt.counter_delta(cc, "TcpExtTCPSynRetrans")),
              pkt.count_check("client segments sent again",
                              len(pkt.retransmitted(r["csegs"], "c>s")), "client TcpRetransSegs",
                              pkt.counter_delta(cc, "TcpRetransSegs"))]
    if r["side"] == "client":
        checks.append(pkt.count_check("server segments sent again",
                                      len(pkt.retransmitted(r["ssegs"], "s>c")),
                                      "server TcpRetransSegs",
                                      pkt.counter_delta(sc, "TcpRetransSegs")))
    return [c for c in checks if c]


def ev_lines(who, events):
    return [f"  {who:<7} {e['t_s'] * 1e3:9.3f}  {e['event']:<6} {e['state']:<8} {e['timer']:<5} "
            f"{e['expires_ms']:>10} {e['retrans']:>7}" for e in events]


def part_lines(r, title):
    ms = lambda ns: (ns - r["start_ns"]) / 1e6  # noqa: E731
    lines = [f"== {r['part']}: the first SYN-ACKs dropped on {title}",
             f"nft ({r['side']} {r['hook']}): {tw.nft_rule_text(r['rule'])} (raw/{NAME}/wire.txt)",
             f"connect(): {r['errno'] or r['result']} after {r['elapsed_s']:.3f} s", "",
             "the two timers (sockwatch in each namespace; t_ms from the start of connect()):",
             f"  {'side':<7} {'t_ms':>9}  {'event':<6} {'state':<8} {'timer':<5} "
             f"{'expires_ms':>10} {'retrans':>7}"]
    lines += ev_lines("client", r["client_events"]) + ev_lines("server", r["server_events"])
    lines += ["", "SYNs the client sent (its end of the veth):"]
    lines += [f"  SYN {k}  {ms(p['t_ns']):10.3f} ms"
              for k, p in enumerate(r["syns"])]
    lines += ["SYN-ACKs that left the server (its end of the veth) and what sent them:"]
    if not r["synacks_sent"]:
        lines.append("  (none)")
    for k, s in enumerate(r["synacks_sent"]):
        after = "" if s["after_syn_us"] is None else f", {s['after_syn_us']:.1f} µs after it arrived"
        lines.append(f"  SYN-ACK {k}  {ms(s['t_ns']):10.3f} ms  {s['why']}{after}")
    lines += [f"SYN-ACKs at the client's end of the veth: {len(r['synacks_at_client'])}"]
    for k, p in enumerate(r["synacks_at_client"]):
        fate = ("dropped by the rule (client input)" if k < r["dropped_at_client"]
                else "reached the client")
        lines.append(f"  {k}  {ms(p['t_ns']):10.3f} ms  {fate}")
    sc, cc = r["server_counters"], r["counters"]
    lines += ["", "whose counter counts what (each side read in its own namespace):",
              f"  {'counter':<22} {'client':>7} {'server':>7}"]
    for k in SIDE_BY_SIDE:
        lines.append(f"  {k:<22} {t.fmt_delta(cc.get(k)):>7} {t.fmt_delta(sc.get(k)):>7}")
    sent = r["synacks_sent"]
    first = sum(1 for x in sent if x["syn"] == 0)
    again = sum(1 for x in sent if x["syn"] is not None and x["syn"] > 0)
    timer = sum(1 for x in sent if x["syn"] is None)
    lines += [f"  SYN-ACKs that left the server: {len(sent)} ({first} answering SYN 0, {again} "
              f"answering a retransmitted SYN, {timer} sent by the request's timer); dropped by "
              f"the rule: {r['rule']['packets']}"]
    lines += ["DISAGREE: " + d for d in r["disagree"]]
    return lines


def part_rows(r):
    """The ladder of one part: the client's end of the veth, both sockets' events beside it."""
    notes = [(r["start_ns"] + round(e["t_s"] * 1e9), f"client sockwatch: {e['event']} "
              f"{e['state']} retrans={e['retrans']}") for e in r["client_events"]]
    notes += [(r["start_ns"] + round(e["t_s"] * 1e9), f"server sockwatch: {e['event']} "
               f"{e['state']} retrans={e['retrans']}") for e in r["server_events"]]
    notes.append((r["end_ns"], f"client: connect() returned {r['errno'] or r['result']}"))
    seg_notes, k = {}, 0
    for i, p in enumerate(r["csegs"]):
        if p["dir"] == "s>c" and p["flags"] == "SA":
            if k < r["dropped_at_client"]:
                seg_notes[i] = f"dropped by nft (client in), {k + 1} of {r['dropped_at_client']}"
            k += 1
    return [{"sep": f"{r['part']}: rule on the {r['side']}'s {r['hook']} hook"}] + \
        pkt.ladder_rows(r["csegs"], r["start_ns"], notes, seg_notes)


def part_json(r):
    return {"port": r["port"], "result": r["result"], "errno": r["errno"],
            "elapsed_s": r["elapsed_s"], "rule": r["rule"], "counters": r["counters"],
            "server_counters": r["server_counters"], "client_events": r["client_events"],
            "server_events": r["server_events"],
            "syns_ms": [round((p["t_ns"] - r["start_ns"]) / 1e6, 3) for p in r["syns"]],
            "synacks_sent": [{"t_ms": round((s["t_ns"] - r["start_ns"]) / 1e6, 3), "why": s["why"],
                              "answers_syn": s["syn"], "after_syn_us": s["after_syn_us"]}
                             for s in r["synacks_sent"]],
            "synacks_at_client_ms": [round((p["t_ns"] - r["start_ns"]) / 1e6, 3)
                                     for p in r["synacks_at_client"]],
            "dropped_at_client": r["dropped_at_client"],
            "client_capture": pkt.capture_json(r["client_capture"]),
            "server_capture": pkt.capture_json(r["server_capture"]),
            # only when a count of the capture and its counter differ (disagree())
            **({"disagree": r["disagree"]} if r["disagree"] else {})}


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    _, sysctls = t.read_machine(os.path.join(rawdir, "machine-server.txt"))
    wire = tw.read_wire(rawdir)
    runs = [one_part(rawdir, name, side, hook, wire) for name, side, hook, _ in PARTS]
    main = runs[0]
    lines = [f"{NAME}: blocking connect() to {main['addr']}, the first SYN-ACKs dropped by nft",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      "namespaces joined by a veth pair (MTU "
                      f"{wire['client']['link']['mtu']}); a capture on each end"), "",
             "server sysctls: " + "  ".join(
                 f"{k.rsplit('.', 1)[-1]}={'absent' if v is None else v}" for k, v in
                 t.sysctls_json(sysctls, ("tcp_synack_retries", "tcp_syn_retries")).items()), ""]
    rows = []
    for r, (_, _, _, title) in zip(runs, PARTS):
        lines += part_lines(r, title) + [""]
        lines += pkt.capture_notes(r["client_capture"], f"raw/{NAME}/{r['part']}-capture.txt, "
                                   "the client's end")
        lines += pkt.capture_notes(r["server_capture"], f"raw/{NAME}/{r['part']}-server-capture.txt, "
                                   "the server's end")
        lines += ["", "counter deltas, client:"] + t.counters_block(r["counters"])
        lines += ["counter deltas, server:"] + t.counters_block(r["server_counters"]) + [""]
        rows += part_rows(r)
    lines += ["ladder (the client's end of the veth; t_ms from each part's connect()):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=f"server {main['addr']}")
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": main["counters"], "result": main["result"],
           "errno": main["errno"], "elapsed_s": main["elapsed_s"], "addr": main["addr"],
           "port": main["port"], "sysctls": t.sysctls_json(sysctls, ("tcp_synack_retries",
                                                                      "tcp_syn_retries")),
           "parts": {r["part"]: part_json(r) for r in runs}, "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, tw.CLIENT_COL,
                         f"server {main['addr']}")


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
