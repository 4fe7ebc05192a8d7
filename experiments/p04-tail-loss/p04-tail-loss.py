#!/usr/bin/python3
"""p04-tail-loss report: the last segment of a flight lost (nft on the server's input hook drops
the first DROPS segments of the tail's length).  Part tlp: only the original tail lost, the
tail loss probe sends it again; part rto: the probe lost too, the retransmission timer fires
(with drops 3 or 4, again, each time twice as late).  For each part: every transmission of the
tail from the capture on the client's end of the veth and its fate, the probe timeout (PTO)
and the RTOs measured against what tcp_schedule_loss_probe() and the RTO's backoff predict
from srtt, rttvar and rto (ss, sockwatch, tcp_probe), the retransmissions tcpevents saw
beside TcpRetransSegs and the capture, and the counters of each side."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_tseq  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p04-tail-loss"
PARTS = (("tlp", "only the original tail dropped: the loss probe repairs it"),
         ("rto", "the original tail and the loss probe dropped: the RTO repairs it"))
COUNTERS = ("TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPLossProbeRecovery",
            "TcpExtTCPTimeouts")
SYSCTLS = ("tcp_early_retrans", "tcp_rto_min_us", "tcp_congestion_control", "tcp_recovery",
           "tcp_sack", "tcp_frto")
LATE_JIFFIES = 2          # check(): lateness beyond the wheel's granularity, in jiffies
_SS_RTT = re.compile(r"\brtt:([0-9.]{1,20})/([0-9.]{1,20})")
_SS_RTO = re.compile(r"\brto:([0-9.]{1,20})")
_SS_BACKOFF = re.compile(r"\bbackoff:([0-9]{1,3})\b")


def read_ss(path):
    """The ss -tin snapshot taken while the tail alone was outstanding → {"srtt_us",
    "rttvar_us", "rto_ms", "backoff", "rto_shown_ms"} (ss prints tcpi_rtt/tcpi_rttvar in ms with
    3 decimals, tcpi_rto in ms, and backoff:N once an RTO has fired).  On a loaded machine ss
    may run only after the first RTOs: icsk_rto is then doubled once per RTO
    (tcp_retransmit_timer()), and rto_ms is the value before them, rto_shown_ms >> backoff."""
    text = t.read_text(path)
    rtt, rto, bo = _SS_RTT.search(text), _SS_RTO.search(text), _SS_BACKOFF.search(text)
    if not rtt or not rto:
        raise t.RawError(f"{path}: no rtt:SRTT/RTTVAR and rto: fields (ss -tin of the socket)")
    shown = t.num(rto.group(1), f"{path}: rto", 1, 1e6)
    backoff = int(bo.group(1)) if bo else 0
    rto = shown / 2 ** backoff
    return {"srtt_us": round(t.num(rtt.group(1), f"{path}: rtt", 0, 1e6) * 1000),
            "rttvar_us": round(t.num(rtt.group(2), f"{path}: rttvar", 0, 1e6) * 1000),
            "rto_ms": int(rto) if rto == int(rto) else rto, "backoff": backoff, "rto_shown_ms": shown}



def jiffies(ms, hz):
    """ms as whole jiffies, rounded up as usecs_to_jiffies() does."""
    return -(-round(ms * 1000) * hz // 1_000_000)


def check(what, measured_ms, predicted_ms, hz):
    """A timer's measured interval against its prediction.  Early: at most one jiffy (the
    timeout is whole jiffies, counted from a tick the arming happened after).  Late: the timer
    wheel's granularity at that distance (kernel/time/timer.c: a timer is filed in the bucket
    at or after its expiry) and 2 jiffies more, the lateness this host showed beyond the
    wheel's (up to 7.8 ms at HZ=250 in 5 runs: docs/p04-tail-loss-why.md)."""
    jiffy = 1000 / hz
    lo = predicted_ms - jiffy
    hi = predicted_ms + t.wheel_gran_ms(predicted_ms, hz) + LATE_JIFFIES * jiffy
    return {"what": what, "measured_ms": round(measured_ms, 3), "predicted_ms": predicted_ms,
            "lo_ms": round(lo, 3), "hi_ms": round(hi, 3), "ok": lo <= measured_ms <= hi}


def one_part(rawdir, name, params, hz, rto_min_us):
    c = t.one_line(os.path.join(rawdir, f"{name}-client.txt"), "connected ")
    start, local = c.int("start_ns"), c.str("local")
    res = t.one_line(os.path.join(rawdir, f"{name}-client.txt"), "result ")
    cap = pkt.read_capture(os.path.join(rawdir, f"{name}-capture.txt"))
    segs = pkt.conn_packets(cap, local)
    tail_len, flight = params.int("tail", 1), params.int("flight", 1, 8)
    npath = os.path.join(rawdir, f"{name}-nft-server.txt")
    rules = tw.nft_rules(t.read_lines(npath), npath)
    if len(rules) != 1:
        raise t.RawError(f"{npath}: want one nft rule with a counter, found {len(rules)}")
    rule = rules[0]
    dropped = rule["packets"]
    # the first request's tail: the first client segment of the tail's length, and every
    # segment sent again at its sequence number before anything beyond it
    data = [p for p in segs if p["dir"] == "c>s" and p["len"] > 0]
    first = next((p for p in data if p["len"] == tail_len), None)
    if first is None:
        raise t.RawError(f"{os.path.join(rawdir, name + '-capture.txt')}: no segment of the "
                         f"tail's {tail_len} bytes")
    sends = [p for p in data if p["seq"] == first["seq"]]
    if len(sends) < 2:
        raise t.RawError(f"{os.path.join(rawdir, name + '-capture.txt')}: the tail was sent "
                         "once: nothing was lost (was the rule loaded?)")
    if dropped != len(sends) - 1:
        raise t.RawError(f"{npath}: the rule dropped {dropped}, the tail was sent {len(sends)} "
                         "times: want all but the last dropped")
    # the ACK that last armed the loss probe: the last one from the server that acknowledged
    # new data before the probe (or the tail's own send, whichever came later)
    acks = [p for p in segs if p["dir"] == "s>c" and p["t_ns"] < sends[1]["t_ns"]
            and p["ack"] is not None]
    armed = max([first["t_ns"]] + [p["t_ns"] for p in acks if p["ack"] <= first["seq"]])
    ss = read_ss(os.path.join(rawdir, f"{name}-ss.txt"))
    sw = [t.sockwatch_event(e, start) | {"backoff": e.int("backoff", default=None),
                                         "total_rto": e.int("total_rto", default=None)}
          for e in t.read_sockwatch(os.path.join(rawdir, f"{name}-sockwatch.txt"))]
    ev = tw.read_tcpevents(rawdir, name)
    # the probe timeout, as tcp_schedule_loss_probe() computes it with one packet out:
    # 2*srtt + tcp_rto_min_us, at most the RTO
    pto_ms = min(jiffies((2 * ss["srtt_us"] + rto_min_us) / 1000, hz), jiffies(ss["rto_ms"], hz)) \
        * 1000 / hz
    checks = [check("loss probe after the timer was armed (PTO)",
                    (sends[1]["t_ns"] - armed) / 1e6, round(pto_ms, 3), hz)]
    rto_ms = ss["rto_ms"]
    for k in range(2, len(sends)):
        want = min(rto_ms * 2 ** (k - 2), 120000)
        checks.append(check(f"RTO {k - 1} after the transmission before it (rto {rto_ms:g} ms"
                            f" x {2 ** (k - 2)})", (sends[k]["t_ns"] - sends[k - 1]["t_ns"]) / 1e6,
                            want, hz))
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, ("TcpRetransSegs",))
    again = pkt.retransmitted(segs, "c>s")
    ev_retrans = None if "blind" in ev else [e for e in ev["events"] if e["event"] == "retrans"]
    probes = [] if "blind" in ev else [e for e in ev["events"] if e["event"] == "probe"]
    srtt_ev = next((e["srtt_us"] for e in reversed(probes) if e["t_ns"] <= armed + 10**6), None)
    out = {"part": name, "port": rule["rule"].split("dport ")[1].split()[0], "local": local,
           "start_ns": start, "rule": rule, "dropped": dropped, "flight": flight,
           "result": {k: res.float(k) for k in ("first_us", "elapsed_s")},
           "sends": sends, "armed_ns": armed, "ss": ss, "sockwatch": sw, "events": ev,
           "srtt_tcp_probe_us": srtt_ev, "checks": checks, "counters": cc, "server_counters": sc,
           "capture": cap, "segs": segs, "again": again, "ev_retrans": ev_retrans,
           "backoffs": sorted({e["backoff"] for e in sw if e["backoff"]})}
    out["crosscheck"], dis = tw.retrans_crosscheck(ev, ev_retrans, again, cc)
    dis += [f"{c['what']}: {c['measured_ms']:.3f} ms, outside {c['lo_ms']:.3f}..{c['hi_ms']:.3f}"
            for c in checks if not c["ok"]]
    out["disagree"] = [d for d in dis if d]
    return out


def what_sent(k):
    return "the original" if k == 0 else "the loss probe (TLP)" if k == 1 else f"RTO {k - 1}"


def part_lines(r, title, hz):
    ms = lambda ns: (ns - r["start_ns"]) / 1e6  # noqa: E731
    ss = r["ss"]
    lines = [f"== {r['part']}: {title}",
             f"nft (server in): {tw.nft_rule_text(r['rule'])} (raw/{NAME}/{r['part']}-nft-server.txt)",
             f"the first request's reply came {r['result']['first_us'] / 1000:.3f} ms after its "
             f"write (rr_client first_us)",
             f"while the tail alone was out (ss -tin): srtt {ss['srtt_us']} µs, rttvar "
             f"{ss['rttvar_us']} µs, rto {ss['rto_ms']:g} ms" +
             ("" if not ss.get("backoff") else
              f" (ss ran after {ss['backoff']} RTO(s): it showed rto {ss['rto_shown_ms']:g} ms "
              f"backoff:{ss['backoff']}, icsk_rto doubled at each)") +
             ("" if r["srtt_tcp_probe_us"] is None else
              f"; tcp_probe (read as the last ACK arrived, before its sample): srtt "
              f"{r['srtt_tcp_probe_us']} µs"),
             "", f"the tail ({r['sends'][0]['len']} bytes at seq {r['sends'][0]['seq']}) at the "
             "client's end of the veth (t_ms from the request's write):"]
    prev = None
    for k, p in enumerate(r["sends"]):
        fate = "dropped by nft" if k < r["dropped"] else "arrived"
        gap = "" if prev is None else f"  +{(p['t_ns'] - prev) / 1e6:9.3f} ms"
        lines.append(f"  {ms(p['t_ns']):10.3f}  {what_sent(k):<22} {fate:<15}{gap}")
        prev = p["t_ns"]
    lines.append(f"  the probe timer last armed (the tail's send, or an ACK after it): "
                 f"{ms(r['armed_ns']):.3f} ms")
    lines += ["", f"timers against the source (HZ={hz}; tolerance: -1 jiffy .. the timer wheel's "
              f"granularity + {LATE_JIFFIES} jiffies):"]
    for c in r["checks"]:
        lines.append(f"  {c['what']}: {c['measured_ms']:.3f} ms, predicted {c['predicted_ms']:.3f}"
                     f" ({c['lo_ms']:.3f}..{c['hi_ms']:.3f}): {'yes' if c['ok'] else 'NO'}")
    sw = [e for e in r["sockwatch"] if e["event"] != "gone"]
    lines += ["", "the client's socket (sockwatch, t_ms from the write; a change of timer, "
              "unacked or backoff):"]
    for e in sw:
        lines.append(f"  {e['t_s'] * 1e3:10.3f}  {e['state']:<10} timer={e['timer']:<9} "
                     f"expires_ms={e['expires_ms']:<6} backoff={e['backoff']} rto_ms={e['rto_ms']}"
                     f" total_rto={e['total_rto']}")
    lines += [""]
    return lines + tw.retrans_lines(r, ms, COUNTERS)


def part_rows(r):
    notes = [(e["t_ns"], "tcpevents: retrans") for e in (r["ev_retrans"] or [])]
    notes += [(r["start_ns"] + round(e["t_s"] * 1e9), f"sockwatch: {e['state']} timer={e['timer']}"
               f" backoff={e['backoff']} rto_ms={e['rto_ms']}") for e in r["sockwatch"]
              if e["event"] != "gone"]
    seg_notes = {}
    for k, p in enumerate(r["sends"]):
        i = next(i for i, q in enumerate(r["segs"]) if q is p)
        fate = "dropped by nft" if k < r["dropped"] else "arrived"
        seg_notes[i] = f"tail: {what_sent(k)}, {fate}"
    return [{"sep": f"{r['part']}: the tail dropped {r['dropped']} time(s)"}] + \
        pkt.ladder_rows(r["segs"], r["start_ns"], notes, seg_notes)


def part_json(r):
    ms = lambda ns: round((ns - r["start_ns"]) / 1e6, 3)  # noqa: E731
    return {"port": int(r["port"]), "rule": r["rule"], "dropped": r["dropped"],
            "result": "ok", "errno": None, "elapsed_s": r["result"]["elapsed_s"],
            "first_us": r["result"]["first_us"], "ss": r["ss"], "srtt_tcp_probe_us": r["srtt_tcp_probe_us"],
            "tail_sends": [{"t_ms": ms(p["t_ns"]), "what": what_sent(k),
                            "dropped": k < r["dropped"]} for k, p in enumerate(r["sends"])],
            "armed_ms": ms(r["armed_ns"]), "checks": r["checks"],
            "sockwatch": r["sockwatch"], "backoffs": r["backoffs"],
            "tcpevents": tw.retrans_json(r, ms),
            "crosscheck": r["crosscheck"], "counters": r["counters"],
            "server_counters": r["server_counters"], "capture": pkt.capture_json(r["capture"]),
            **({"disagree": r["disagree"]} if r["disagree"] else {})}


def build(rawroot, outdir):
    rawdir, kernel, hz, sysctls, _ = tw.read_unit(rawroot, NAME, ("net.ipv4.tcp_rto_min_us",))
    # absent before 6.11: TCP_RTO_MIN, HZ / 5 (include/net/tcp.h)
    rto_min_us = t.sysctl_int(sysctls, "net.ipv4.tcp_rto_min_us", "sysctls.txt", 1, 10**9) \
        or 200000
    params = t.read_kv(os.path.join(rawdir, "params.txt"))
    wire = tw.read_wire(rawdir)
    runs = [one_part(rawdir, name, params, hz, rto_min_us) for name, _ in PARTS]
    lines = [f"{NAME}: a flight of {params.int('flight', 1, 8)} segments "
             f"({params.int('request', 1)} bytes in one write), its last one "
             f"({params.int('tail', 1)} bytes) dropped by nft",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      f"namespaces joined by a veth pair (MTU {wire['client']['link']['mtu']}, "
                      "one segment per packet: gso_max_segs 1); the capture on the client's end"),
             "", tw.sysctls_line(sysctls, SYSCTLS, hz), ""]
    body, rows = tw.loss_parts_lines(NAME, runs, PARTS, lambda r, title: part_lines(r, title, hz), part_rows)
    lines += body
    obj = tw.parts_obj(NAME, kernel, rawdir, hz, params, sysctls, SYSCTLS,
                       {r["part"]: part_json(r) for r in runs}, rows)
    # the tail's transmissions: all but the last dropped by nft (red), the last arrived (green)
    panels = [(f"part {r['part']}: {title}", r["segs"],
               {id(p) for p in r["sends"][:r["dropped"]]}, {id(r["sends"][-1])})
              for r, (_, title) in zip(runs, PARTS)]
    caption = f"{NAME}: time-sequence at the client's end of the veth, kernel {kernel}"
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, more=[(
        "tseq_svg", f"{NAME}-tseq.svg", "time-sequence",
        lambda path: tcplab_tseq.write_tmp(path, panels, caption))])


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
