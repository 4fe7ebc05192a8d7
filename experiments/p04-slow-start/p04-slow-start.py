#!/usr/bin/python3
"""p04-slow-start report: a fresh connection's first bulk transfer through a bottleneck (tbf on
the server's side of the veth, behind an ifb).  Parts cubic and bbr: the same transfer with
each congestion control; idle and idle-off: cubic, two halves with an idle pause between,
tcp_slow_start_after_idle 1 and 0.  For each part: the flight of each round trip from the
capture (a round ends with the ACK of the data sent before it) beside tcp_probe's cwnd, where
slow start ended and why (ssthresh set before or after a loss), the largest cwnd and srtt,
the retransmissions as tcpevents, the capture and TcpRetransSegs count them and the drops tbf
counted; for the idle parts the cwnd before the pause (the fixture's tcp_info and ss) and at the
first ACK after it, beside what tcp_cwnd_restart() computes."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_tseq  # noqa: E402
import tcplab_wire as tw  # noqa: E402
import cwnd_svg  # noqa: E402

NAME = "p04-slow-start"
PARTS = (("cubic", "cubic (TCP_CONGESTION), one send"),
         ("bbr", "bbr (TCP_CONGESTION), one send"),
         ("idle", "cubic, two halves, idle pause between, tcp_slow_start_after_idle=1"),
         ("idle-off", "cubic, two halves, idle pause between, tcp_slow_start_after_idle=0"))
BULK, IDLE = ("cubic", "bbr"), ("idle", "idle-off")
INF = 2147483647
COUNTERS = ("TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPSackRecovery",
            "TcpExtTCPFastRetrans", "TcpExtTCPTimeouts", "TcpExtTCPLostRetransmit",
            "TcpExtTCPSACKReorder", "TcpExtTCPDSACKRecv", "TcpExtTCPHystartTrainDetect",
            "TcpExtTCPHystartTrainCwnd", "TcpExtTCPHystartDelayDetect", "TcpExtTCPHystartDelayCwnd")
SERVER_COUNTERS = ("TcpExtTCPOFOQueue", "TcpExtTCPDSACKOldSent")
SYSCTLS = ("tcp_congestion_control", "tcp_slow_start_after_idle", "tcp_no_metrics_save",
           "tcp_sack", "tcp_recovery", "tcp_pacing_ss_ratio", "tcp_pacing_ca_ratio")
ROUNDS_SHOWN = 12
TBF = re.compile(r"^ Sent ([0-9]+) bytes ([0-9]+) pkt \(dropped ([0-9]+), overlimits ([0-9]+) "
                 r"requeues ([0-9]+)\)")


# ---- the raw files ---------------------------------------------------------------------------

def cc_line(d):
    """A stream_send congestion line (cc, idle_start, idle_end, cc_end) → dict."""
    return {"cc": d.str("cc"), "t_ns": d.int("t_ns"),
            **{k: d.int(k, 0, 1 << 32) for k in ("cwnd", "ssthresh", "rto_us", "srtt_us",
                                                 "unacked", "total_retrans")},
            **{k: d.int(k, 0, 1 << 62) for k in ("busy_us", "rwnd_limited_us",
                                                 "sndbuf_limited_us")}}


def read_send(path, idle):
    lines = t.read_lines(path)
    if not any(x.startswith("result=ok") for x in lines):
        raise t.RawError(f"{path}: no result=ok: the sender did not finish")
    out = {"start": cc_line(t.one_line(path, "cc ")), "end": cc_line(t.one_line(path, "acked "))}
    if idle:
        out["idle_start"] = cc_line(t.one_line(path, "idle_start "))
        out["idle_end"] = cc_line(t.one_line(path, "idle_end "))
    out["local"] = t.one_line(path, "connected ").str("local")
    out["mss"] = t.one_line(path, "after ").int("snd_mss", 1, 65535)
    return out


def read_tbf(path):
    """tc -s qdisc show of the bottleneck → {"qdisc": its first line, "sent_bytes", "sent_pkts",
    "dropped", "overlimits"}."""
    lines = t.read_lines(path)
    if not lines or not lines[0].startswith("qdisc tbf "):
        raise t.RawError(f"{path}: no tbf qdisc line first")
    m = next((TBF.match(x) for x in lines[1:] if TBF.match(x)), None)
    if m is None:
        raise t.RawError(f"{path}: no `Sent ... (dropped ...)` line")
    return {"qdisc": lines[0].strip(), "sent_bytes": int(m.group(1)), "sent_pkts": int(m.group(2)),
            "dropped": int(m.group(3)), "overlimits": int(m.group(4))}


def read_ss_cc(path):
    """`ss -tin` of the one idle connection → {"cwnd", "ssthresh" (None when ss shows none: it
    is not set), "rto_ms"}."""
    lines = [x for x in t.read_lines(path) if x.strip()]
    info = [x for x in lines if x[:1].isspace()]
    if len(info) != 1:
        raise t.RawError(f"{path}: want one connection's tcp_info line, found {len(info)}")
    kv = dict(w.split(":", 1) for w in info[0].split() if ":" in w)
    if "cwnd" not in kv or "rto" not in kv:
        raise t.RawError(f"{path}: no cwnd: or rto: in ss's line")
    return {"cwnd": t.num(kv["cwnd"], f"{path}: cwnd", 1, INF),
            "ssthresh": t.num(kv["ssthresh"], f"{path}: ssthresh", 0, INF)
            if "ssthresh" in kv else None,
            "rto_ms": t.num(kv["rto"], f"{path}: rto", 0, 10**6)}


def read_probes(rawdir, part):
    """tcpevents' tcp_probe samples and retransmissions of the part, or {"blind": why}."""
    ev = tw.read_tcpevents(rawdir, part)
    if "blind" in ev:
        return ev
    return {"probes": [e for e in ev["events"] if e["event"] == "probe"],
            "retrans": [e for e in ev["events"] if e["event"] == "retrans"],
            "lost": ev["lost"], "missed": ev["missed"], "unseen": ev["unseen"]}


# ---- what the samples show -------------------------------------------------------------------

def rounds(segs):
    """The client's data segments per round trip, from the capture: a round begins with a data
    segment sent while no round is open and ends at the first ACK that acknowledges that
    segment (a packet-timed round, as tcp_rate's and HyStart's); the next data segment begins
    the next.  → [{"t_ns", "segments", "again"}] (again: segments that carried no new byte)."""
    out, high, need, cur = [], None, None, None
    for p in segs:
        if p["dir"] == "c>s" and p["len"] > 0:
            end = p["seq"] + p["len"]
            if cur is None:
                cur = {"t_ns": p["t_ns"], "segments": 0, "again": 0}
                out.append(cur)
                need = end
            cur["segments"] += 1
            cur["again"] += high is not None and end <= high
            high = end if high is None else max(high, end)
        elif p["dir"] == "s>c" and cur is not None and p["ack"] is not None and p["ack"] >= need:
            cur = None
    return out


def max_flight(segs):
    """The most the client had sent beyond the highest cumulative acknowledgment, in bytes, from
    the capture: after each data segment, the highest byte sent less the highest ACK (segments
    the receiver SACKed or that were lost still count: this is not the kernel's in-flight)."""
    high, ack, top = None, None, 0
    for p in segs:
        if p["dir"] == "c>s" and p["len"] > 0:
            high = p["seq"] + p["len"] if high is None else max(high, p["seq"] + p["len"])
            if ack is not None:
                top = max(top, high - ack)
        elif p["dir"] == "s>c" and p["ack"] is not None and "S" not in p["flags"]:
            ack = p["ack"] if ack is None else max(ack, p["ack"])
    return top


def slow_start_end(probes, retrans):
    """Where slow start ended: the first tcp_probe sample with ssthresh set, the sample before
    it (its cwnd: what the algorithm had when it set ssthresh) and whether a retransmission
    came first → dict, or None when ssthresh was never set."""
    for i, p in enumerate(probes):
        if p["ssthresh"] < INF:
            before = probes[i - 1] if i else p
            lost = [r for r in retrans if r["t_ns"] <= p["t_ns"]]
            return {"t_ns": p["t_ns"], "ssthresh": p["ssthresh"], "cwnd_before": before["cwnd"],
                    "cwnd": p["cwnd"], "after_loss": bool(lost),
                    "retrans_before": len(lost)}
    return None


def one_part(rawdir, name, params, hz):
    idle = name in IDLE
    send = read_send(os.path.join(rawdir, f"{name}-send.txt"), idle)
    cpath = os.path.join(rawdir, f"{name}-capture.txt")
    cap = pkt.read_complete_capture(cpath)
    segs = pkt.conn_packets(cap, send["local"])
    data = [p for p in segs if p["dir"] == "c>s" and p["len"] > 0]
    if not data:
        raise t.RawError(f"{cpath}: no data segment from {send['local']}")
    again = pkt.retransmitted(segs, "c>s")
    ev = read_probes(rawdir, name)
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", COUNTERS, SERVER_COUNTERS)
    tbf = read_tbf(os.path.join(rawdir, f"{name}-tbf.txt"))
    sysctls = t.read_sysctl_file(os.path.join(rawdir, f"{name}-sysctls.txt"),
                                 ("net.ipv4.tcp_slow_start_after_idle",))
    r = {"part": name, "cc": send["start"]["cc"], "send": send, "segs": segs, "data": data,
         "again": again, "events": ev, "counters": cc, "server_counters": sc, "tbf": tbf,
         "t0": data[0]["t_ns"], "capture": cap,
         "ssai": t.sysctl_int(sysctls, "net.ipv4.tcp_slow_start_after_idle", cpath, 0, 1)}
    last = max(p["seq"] + p["len"] for p in data)
    acked = next((p for p in segs if p["dir"] == "s>c" and p["ack"] is not None
                  and p["ack"] >= last), None)
    r["t_end"] = acked["t_ns"] if acked else data[-1]["t_ns"]
    r["rounds"] = rounds(segs)
    r["max_flight"] = max_flight(segs)
    probes = [] if "blind" in ev else ev["probes"]
    rtx = None if "blind" in ev else ev["retrans"]
    r["probes"], r["rtx"] = probes, rtx
    # the cwnd at the start of each round: the last sample before its first segment
    for rd in r["rounds"]:
        prev = [p for p in probes if p["t_ns"] <= rd["t_ns"]]
        rd["cwnd"] = prev[-1]["cwnd"] if prev else None
    if probes:
        r["ss_end"] = slow_start_end(probes, rtx)
        r["max_cwnd"] = max(p["cwnd"] for p in probes)
        r["max_srtt_us"] = max(p["srtt_us"] for p in probes)
        r["ssthresh_values"] = sorted({p["ssthresh"] for p in probes if p["ssthresh"] < INF})
    if idle:
        ie = send["idle_end"]
        r["ss"] = read_ss_cc(os.path.join(rawdir, f"{name}-ss-idle.txt"))
        before = [p for p in data if p["t_ns"] <= ie["t_ns"]]
        after = [p for p in data if p["t_ns"] > ie["t_ns"]]
        if not before or not after:
            raise t.RawError(f"{cpath}: want data segments before and after the idle pause")
        # lsndtime is the last transmission before the pause; the first one after it restarts
        r["idle_gap_ms"] = round((after[0]["t_ns"] - before[-1]["t_ns"]) / 1e6, 3)
        r["first_after"] = next((p for p in probes if p["t_ns"] > ie["t_ns"]), None)
        c0, rto_ms = send["idle_start"]["cwnd"], send["idle_start"]["rto_us"] // 1000
        # the gap in whole jiffies, either way of its fraction
        jiffy = 1000 / hz
        lo = tw.restart_cwnd(c0, rto_ms, (r["idle_gap_ms"] // jiffy) * jiffy)
        hi = tw.restart_cwnd(c0, rto_ms, (r["idle_gap_ms"] // jiffy + 1) * jiffy)
        r["restart_want"] = sorted({lo, hi}) if r["ssai"] == 1 and r["cc"] != "bbr" else [c0]
    # the retransmissions that went out: err=0, or err=- where the tracepoint has no err argument
    # (before 6.10 it fires only for those); a failed attempt is not counted by TcpRetransSegs
    sent = None if rtx is None else sum(1 for e in rtx if e["err"] in ("0", "-"))
    r["crosscheck"] = {"tcpevents": sent, "capture": len(again),
                       "TcpRetransSegs": pkt.counter_delta(cc, "TcpRetransSegs"),
                       "tbf_dropped": tbf["dropped"]}
    dis = [pkt.count_check("client segments sent again", len(again), "client TcpRetransSegs",
                           pkt.counter_delta(cc, "TcpRetransSegs"))]
    if rtx is not None:
        dis.append(t.tcpevents_short("tcpevents' retransmissions", sent, "client TcpRetransSegs",
                                     pkt.counter_delta(cc, "TcpRetransSegs"), ev.get("missed"),
                                     ev.get("unseen")))
    if idle and r["first_after"] is not None and r["first_after"]["cwnd"] not in r["restart_want"]:
        dis.append(f"the cwnd at the first ACK after the pause is {r['first_after']['cwnd']}, "
                   f"tcp_cwnd_restart() gives {' or '.join(map(str, r['restart_want']))}")
    if idle and r["ss"]["cwnd"] != send["idle_start"]["cwnd"]:
        dis.append(f"ss reads cwnd {r['ss']['cwnd']} during the pause, the fixture's tcp_info "
                   f"{send['idle_start']['cwnd']}")
    r["disagree"] = [d for d in dis if d]
    return r


# ---- the text -----------------------------------------------------------------------------

def ms(r, ns):
    return (ns - r["t0"]) / 1e6


def ss_end_text(r):
    e = r.get("ss_end")
    if e is None:
        return "ssthresh never set: the whole transfer in slow start"
    at = f"slow start ended at {ms(r, e['t_ns']):.3f} ms: ssthresh {e['ssthresh']}, cwnd " \
         f"{e['cwnd_before']} at the sample before"
    before = f"{e['retrans_before']} retransmission(s) before it"
    if r["cc"] == "bbr":
        return (f"{at}: BBR left STARTUP (bbr_check_drain() sets ssthresh to its estimate of "
                f"the path's BDP, in segments); {before}")
    if e["after_loss"]:
        return (f"{at}: a loss ({before}); cubic's ssthresh is cwnd x 717 / 1024 = "
                f"{e['cwnd_before'] * 717 // 1024} (bictcp_recalc_ssthresh())")
    c = r["counters"]
    how = [f"{k} +{c[f'TcpExtTCPHystart{k}Detect']} (cwnd +{c[f'TcpExtTCPHystart{k}Cwnd']})"
           for k in ("Train", "Delay") if c.get(f"TcpExtTCPHystart{k}Detect")]
    return (f"{at}: HyStart, before any loss (ssthresh = cwnd: hystart_update())"
            + (f"; its counters: {', '.join(how)}" if how else ""))


def round_text(r):
    rds = r["rounds"]
    shown = ", ".join(f"{i}: {rd['segments']}" + (f" (cwnd {rd['cwnd']})" if rd["cwnd"] else "")
                      for i, rd in enumerate(rds[:ROUNDS_SHOWN], 1))
    more = f", … {len(rds) - ROUNDS_SHOWN} more" if len(rds) > ROUNDS_SHOWN else ""
    return f"segments per round trip (capture; tcp_probe's cwnd as the round began): {shown}{more}"


def part_lines(r, title, params):
    s, x = r["send"], r["crosscheck"]
    tb = r["tbf"]
    lines = [f"== {r['part']}: {title}",
             f"congestion control {r['cc']} (getsockopt TCP_CONGESTION), cwnd after connect "
             f"{s['start']['cwnd']}, ssthresh {fmt_ss(s['start']['ssthresh'])}; "
             f"tcp_slow_start_after_idle {r['ssai']}",
             f"data: {len(r['data'])} segments left the client in {ms(r, r['t_end']):.3f} ms "
             f"(first data segment to the ACK of the last byte)",
             round_text(r),
             f"largest span sent and not yet cumulatively acknowledged (capture; SACKed and lost "
             f"segments inside it): {r['max_flight']} bytes, "
             f"{r['max_flight'] / s['mss']:.1f} x the MSS ({s['mss']})"]
    if "blind" in r["events"]:
        lines.append(f"tcpevents could not run: {r['events']['blind']}: no cwnd samples")
    else:
        lines += [ss_end_text(r),
                  f"largest cwnd {r['max_cwnd']}, largest srtt {r['max_srtt_us'] / 1000:.3f} ms "
                  f"(tcp_probe, {len(r['probes'])} samples); ssthresh values: "
                  + (", ".join(map(str, r["ssthresh_values"])) or "none")]
    e = s["end"]
    lines.append(f"all acknowledged: cwnd {e['cwnd']}, ssthresh {fmt_ss(e['ssthresh'])}, "
                 f"srtt {e['srtt_us'] / 1000:.3f} ms, total_retrans {e['total_retrans']}; busy "
                 f"{e['busy_us'] / 1000:g} ms, of it limited by the receive window "
                 f"{e['rwnd_limited_us'] / 1000:g} ms, by the send buffer "
                 f"{e['sndbuf_limited_us'] / 1000:g} ms (tcp_info)")
    if r["part"] in IDLE:
        i0, i1, fa = s["idle_start"], s["idle_end"], r["first_after"]
        lines += [f"before the pause (all acknowledged): cwnd {i0['cwnd']}, ssthresh "
                  f"{fmt_ss(i0['ssthresh'])}, rto {i0['rto_us'] // 1000} ms (tcp_info); ss: cwnd "
                  f"{r['ss']['cwnd']}, ssthresh {fmt_ss(r['ss']['ssthresh'])}, rto "
                  f"{r['ss']['rto_ms']:g} ms",
                  f"pause: {(i1['t_ns'] - i0['t_ns']) / 1e6:.3f} ms asked of the fixture; "
                  f"{r['idle_gap_ms']:.3f} ms from the last segment before it to the first after "
                  "(the capture)",
                  "first ACK after the pause: " + (
                      f"cwnd {fa['cwnd']}, ssthresh {fmt_ss(fa['ssthresh'])} (tcp_probe)"
                      if fa else "no tcp_probe sample") +
                  f"; tcp_cwnd_restart() gives {' or '.join(map(str, r['restart_want']))}" +
                  ("" if r["ssai"] == 1 else " (no restart: tcp_slow_start_after_idle 0)")]
    lines += [f"bottleneck: {tb['qdisc']}: sent {tb['sent_pkts']} packets, dropped "
              f"{tb['dropped']}, overlimits {tb['overlimits']} (raw/{NAME}/{r['part']}-tbf.txt)",
              f"retransmissions: tcpevents {'-' if x['tcpevents'] is None else x['tcpevents']}, "
              f"capture {x['capture']}, client TcpRetransSegs {t.fmt_delta(x['TcpRetransSegs'])};"
              f" tbf dropped {x['tbf_dropped']}",
              "counters (each side read in its own namespace):",
              f"  {'counter':<28} {'client':>7} {'server':>7}"]
    for k in COUNTERS + SERVER_COUNTERS:
        lines.append(f"  {k:<28} {t.fmt_delta(r['counters'].get(k)):>7} "
                     f"{t.fmt_delta(r['server_counters'].get(k)):>7}")
    return lines + ["DISAGREE: " + d for d in r["disagree"]]


def fmt_ss(v):
    return "not set" if v is None or v >= INF else str(v)


def part_json(r):
    s = r["send"]
    out = {"cc": r["cc"], "tcp_slow_start_after_idle": r["ssai"],
           "data_segments": len(r["data"]), "transfer_ms": round(ms(r, r["t_end"]), 3),
           "max_flight_bytes": r["max_flight"],
           "start": s["start"], "end": s["end"],
           "rounds": [{"t_ms": round(ms(r, rd["t_ns"]), 3), "segments": rd["segments"],
                       "again": rd["again"], "cwnd": rd["cwnd"]} for rd in r["rounds"]],
           "tbf": r["tbf"], "crosscheck": r["crosscheck"], "counters": r["counters"],
           "server_counters": r["server_counters"], "capture": pkt.capture_json(r["capture"])}
    for k in ("start", "end"):
        out[k] = {a: b for a, b in out[k].items() if a != "t_ns"}
    if "blind" in r["events"]:
        out["tcpevents"] = {"blind": r["events"]["blind"]}
    else:
        e = r["ss_end"]
        out["tcpevents"] = {"probes": len(r["probes"]), "retrans": len(r["rtx"]),
                            "lost": r["events"]["lost"],
                            **({} if r["events"].get("missed") is None else
                               {"missed": r["events"]["missed"]}),
                            **({} if r["events"].get("unseen") is None else
                               {"unseen": r["events"]["unseen"]})}
        path, last = [], None
        for q in r["probes"]:
            if (q["cwnd"], q["ssthresh"]) != last:
                last = (q["cwnd"], q["ssthresh"])
                path.append([round(ms(r, q["t_ns"]), 3), q["cwnd"], q["ssthresh"]])
        out.update(cwnd_path=path, rtx_ms=[round(ms(r, e["t_ns"]), 3) for e in r["rtx"]],
                   max_cwnd=r["max_cwnd"], max_srtt_us=r["max_srtt_us"],
                   ssthresh_values=r["ssthresh_values"],
                   slow_start_end=None if e is None else {
                       "t_ms": round(ms(r, e["t_ns"]), 3), "ssthresh": e["ssthresh"],
                       "cwnd_before": e["cwnd_before"], "after_loss": e["after_loss"],
                       "retrans_before": e["retrans_before"]})
    if r["part"] in IDLE:
        fa = r["first_after"]
        out["idle"] = {"before": {a: b for a, b in s["idle_start"].items() if a != "t_ns"},
                       "ss": r["ss"], "asked_ms": round((s["idle_end"]["t_ns"] -
                                                         s["idle_start"]["t_ns"]) / 1e6, 3),
                       "gap_ms": r["idle_gap_ms"],
                       "first_ack_after": None if fa is None else
                       {"cwnd": fa["cwnd"], "ssthresh": fa["ssthresh"]},
                       "restart_want": r["restart_want"]}
    if r["disagree"]:
        out["disagree"] = r["disagree"]
    return out


def build(rawroot, outdir):
    rawdir, kernel, hz, sysctls, _ = tw.read_unit(rawroot, NAME,
                                                 ("net.ipv4.tcp_congestion_control",))
    params = t.read_kv(os.path.join(rawdir, "params.txt"))
    rate, queue = params.int("rate_mbit", 1, 100000), params.int("queue_kib", 1, 1 << 20)
    wire = tw.read_wire(rawdir)
    runs = [one_part(rawdir, name, params, hz) for name, _ in PARTS]
    lines = [f"{NAME}: {params.int('bytes', 1)} bytes through a bottleneck of {rate} Mbit/s with "
             f"a {queue} KiB queue: cubic against bbr, then an idle pause with and without "
             "tcp_slow_start_after_idle",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      f"namespaces joined by a veth pair (MTU {wire['client']['link']['mtu']}, "
                      "one segment per packet: gso_max_segs 1); the bottleneck is tbf on an ifb "
                      "the server's veth hands its input to, so its drops are losses in the "
                      "network for the sender; the capture on the client's end, before the "
                      "bottleneck; RTTs are the veth's microseconds plus the queue's wait"),
             "", tw.sysctls_line(sysctls, SYSCTLS, hz), ""]
    for r, (_, title) in zip(runs, PARTS):
        lines += part_lines(r, title, params) + [""]
        lines += pkt.capture_notes(r["capture"], f"raw/{NAME}/{r['part']}-capture.txt")
    byname = {r["part"]: r for r in runs}
    lines += tw.crosscheck_lines(runs, "all")
    # the ladder: the handshake and the first two round trips of part cubic
    cub = byname["cubic"]
    n_first = sum(rd["segments"] for rd in cub["rounds"][:2])
    cut = [p for p in cub["segs"] if p["t_ns"] < cub["rounds"][2]["t_ns"]] \
        if len(cub["rounds"]) > 2 else cub["segs"]
    rows = [{"sep": f"cubic: the handshake and the first two round trips ({n_first} segments)"}] \
        + pkt.ladder_rows(cut, cub["segs"][0]["t_ns"])
    lines += ["ladder (part cubic, the client's end of the veth; t_ms from its SYN):"]
    lines += pkt.ladder_text(rows, client=tw.CLIENT_COL, server=tw.SERVER_COL)
    obj = tw.parts_obj(NAME, kernel, rawdir, hz, params, sysctls, SYSCTLS,
                       {r["part"]: part_json(r) for r in runs}, rows)
    more = [("tseq_svg", f"{NAME}-tseq.svg", "time-sequence",
             lambda path: tcplab_tseq.write_tmp(
                 path, [(f"part {r['part']}: {title}", r["segs"], set(),
                         {id(p) for p in r["again"]}) for r, (_, title) in zip(runs, PARTS)
                        if r["part"] in BULK],
                 f"{NAME}: time-sequence at the client's end of the veth, kernel {kernel}"))]
    if all(r["probes"] for r in runs):
        more.append(("cwnd_svg", f"{NAME}-cwnd.svg", "cwnd",
                     lambda path: cwnd_svg.write_tmp(
                         path, [(f"part {r['part']}: {title}", r["probes"],
                                 [e["t_ns"] for e in r["rtx"]], r["t0"], r["t_end"])
                                for r, (_, title) in zip(runs, PARTS)],
                         f"{NAME}: cwnd and srtt from tcp:tcp_probe, kernel {kernel}")))
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, more=more)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
