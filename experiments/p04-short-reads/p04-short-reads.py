#!/usr/bin/python3
"""p04-short-reads report: one send() of 1 MiB read with recv(64 KiB), plain, with MSG_WAITALL
and with SO_RCVLOWAT, over loopback and across the veth wire: what each recv() returned (in
order and as a distribution), against the MSS each end reported and the segments the capture
saw (their lengths, GSO/TSO super-segments included), with the sysctls the run read."""
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p04-short-reads"
PATHS = ("lo", "wire")
PARTS = (("plain", "recv(LEN)"), ("waitall", "recv(LEN, MSG_WAITALL)"),
         ("rcvlowat", "SO_RCVLOWAT LOWAT, then recv(LEN)"))
COUNTERS = ("TcpOutSegs", "TcpInSegs", "TcpRetransSegs", "TcpExtTCPOrigDataSent",
            "TcpExtTCPRcvCoalesce", "TcpExtTCPWantZeroWindowAdv")
SYSCTLS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_moderate_rcvbuf",
           "net.ipv4.tcp_adv_win_scale", "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_timestamps",
           "net.ipv4.tcp_autocorking", "net.ipv4.tcp_notsent_lowat", "net.core.rmem_default",
           "net.core.rmem_max")
INFO_KEYS = ("maxseg", "snd_mss", "rcv_mss", "advmss", "rcvbuf", "sndbuf", "rcvlowat", "info_len")
# shown for a part only when they moved: a reordering, a loss, a retransmission, a full buffer
MOVED = ("TcpExtTCPOFOQueue", "TcpExtTCPSackRecovery", "TcpExtTCPFastRetrans",
         "TcpExtTCPLossProbes", "TcpExtTCPDSACKRecv", "TcpExtTCPDSACKUndo", "TcpExtTCPTimeouts",
         "TcpExtTCPToZeroWindowAdv", "TcpExtTCPFromZeroWindowAdv")
MAX_BYTES = 64 << 20
_GSO = re.compile(r"\bgso_max_size ([0-9]+)")


def gso_max_size(lines, path):
    for line in lines:
        m = _GSO.search(line)
        if m:
            return t.num(m.group(1), f"{path}: gso_max_size", 0, 1 << 30)
    return None


def info(tag, path):
    """The fixture's `before`/`after` line (fx_stream_info) → {key: int}."""
    line = next((ln for ln in t.read_lines(path) if ln.startswith(tag + " ")), None)
    if line is None:
        raise t.RawError(f"{path}: no `{tag}` line")
    f = t.Fields(path, t.kv(line))
    return {k: f.int(k, 0, 1 << 31) for k in INFO_KEYS}


def read_recv(path, constants):
    """stream_recv's output → {"len", "waitall", "lowat", "rets": [...], "t_ns": [...],
    "bytes", "mismatch_at", "before", "after", "local", "peer", "go_ns"}."""
    lines = t.read_lines(path)
    ready = t.one_line(path, "ready ")
    acc = t.one_line(path, "accepted ")
    for k in ("len", "waitall", "lowat"):
        if ready.int(k, 0, MAX_BYTES) != acc.int(k, 0, MAX_BYTES):
            raise t.RawError(f"{path}: {k}= differs between the ready and the accepted line")
    res = t.one_line(path, "result=")
    if res.str("result") != "ok":
        raise t.RawError(f"{path}: result={res.str('result')[:20]}, not ok")
    rets, times = [], []
    for n, line in enumerate((ln for ln in lines if ln.startswith("recv ")), 1):
        f = t.Fields(path, t.kv(line))
        if f.int("n", 1) != n:
            raise t.RawError(f"{path}: recv n={f.str('n')[:12]} out of order (want {n})")
        rets.append(f.int("ret", 0, MAX_BYTES))
        times.append(f.int("t_ns"))
    d = {"len": acc.int("len", 1, MAX_BYTES), "waitall": acc.int("waitall", 0, 1),
         "lowat": acc.int("lowat", 0, MAX_BYTES), "local": acc.str("local"),
         "peer": acc.str("peer"), "go_ns": t.one_line(path, "go_ns=").int("go_ns"),
         "rets": rets, "t_ns": times, "bytes": res.int("bytes", 0, MAX_BYTES),
         "mismatch_at": res.int("mismatch_at", -1, MAX_BYTES),
         "before": info("before", path), "after": info("after", path)}
    if res.int("calls", 0) != len(rets):
        raise t.RawError(f"{path}: calls={res.str('calls')[:12]}, the file has {len(rets)} "
                         "recv lines")
    if not rets or rets[-1] != 0 or 0 in rets[:-1]:
        raise t.RawError(f"{path}: the calls must end with one recv() that returned 0 (the end)")
    if sum(rets) != d["bytes"]:
        raise t.RawError(f"{path}: the returns add up to {sum(rets)}, bytes={d['bytes']}")
    if any(r > d["len"] for r in rets):
        raise t.RawError(f"{path}: a return larger than len={d['len']}")
    if d["len"] != constants["len"]:
        raise t.RawError(f"{path}: len={d['len']}, constants.txt says {constants['len']}")
    return d


def read_send(path):
    s = t.one_line(path, "sent ")
    if t.one_line(path, "connected ").int("bytes", 1, MAX_BYTES) != s.int("bytes", 1, MAX_BYTES):
        raise t.RawError(f"{path}: the connected line's bytes= is not what was sent")
    if t.one_line(path, "result=").str("result") != "ok":
        raise t.RawError(f"{path}: the sender did not end ok")
    return {"bytes": s.int("bytes", 1, MAX_BYTES), "calls": s.int("calls", 1),
            "local": t.one_line(path, "connected ").str("local"),
            "before": info("before", path), "after": info("after", path)}


def summary(r, lowat):
    """The facts about one part's returns the tests and the .txt use."""
    rets, n = r["rets"], r["len"]
    data = rets[:-1]                   # without the final 0
    body, last = data[:-1], (data[-1] if data else None)
    short = [x for x in body if x < n]
    return {"calls": len(rets), "data_calls": len(data), "full": sum(1 for x in data if x == n),
            "short_not_last": len(short), "min_not_last": min(body) if body else None,
            "last": last, "below_lowat_not_last": sum(1 for x in body if lowat and x < lowat),
            "total": sum(data), "min_calls": math.ceil(sum(data) / n) if data else 0}


def distribution(rets):
    """{size: count} of the data-carrying returns, largest first."""
    out = {}
    for x in rets[:-1]:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[0]))


def segments(cap, client):
    """The client-to-server data segments of one connection in a capture, in order, each as
    (seq, len, again): again when it brings no byte beyond the highest one seen before it (a
    retransmission, or the original of one that overtook it)."""
    out, high = [], None
    for p in pkt.conn_packets(cap, client):
        if p["dir"] != "c>s" or p["len"] == 0:
            continue
        end = p["seq"] + p["len"]
        again = high is not None and end <= high
        out.append((p["seq"], p["len"], again))
        high = end if high is None else max(high, end)
    return out


def orig_units(cap, client, mss):
    """What the sender's TcpExtTCPOrigDataSent should count for its segments:
    tcp_event_new_data_sent() adds tcp_skb_pcount() of every new skb sent, ceil(len / mss) for
    data, 1 for a FIN alone; a retransmission is not new."""
    n = sum(max(1, math.ceil(ln / mss)) for _, ln, again in segments(cap, client) if not again)
    # a FIN alone counts once: a second one at the same seq is its retransmission (a TLP or an
    # RTO when the FIN's ACK came late; a CI run counted 728 against the kernel's 727)
    n += len({p["seq"] for p in pkt.conn_packets(cap, client)
              if p["dir"] == "c>s" and p["len"] == 0 and "F" in p["flags"] and
              "R" not in p["flags"]})
    return n


def ends_at_segments(rets, segs):
    """How many returns end where a captured data segment ends (stream offsets from the first
    segment's seq): {"short": [at an end, of], "last": [...], "full": [...]} (short: below the
    read size, before the last data return)."""
    if not segs:
        return None
    base = min(q for q, _, _ in segs)
    ends = {q + x - base for q, x, _ in segs}
    data, n = rets[:-1], max(rets)
    out, off = {"short": [0, 0], "last": [0, 0], "full": [0, 0]}, 0
    for i, r in enumerate(data):
        off += r
        kind = "last" if i == len(data) - 1 else ("full" if r == n else "short")
        out[kind][1] += 1
        out[kind][0] += off in ends
    return out


def seg_stats(segs, mss):
    """Counts and lengths of one capture's data segments (segments())."""
    dist = {}
    for _, x, _ in segs:
        dist[x] = dist.get(x, 0) + 1
    lens = [x for _, x, _ in segs]
    first = min((q for q, _, _ in segs), default=0)
    return {"segments": len(segs), "payload": sum(lens),
            "new_bytes": max((q + x for q, x, _ in segs), default=0) - first,
            "again": sum(1 for *_, again in segs if again),
            "max": max(lens) if lens else 0, "over_mss": sum(1 for x in lens if x > mss),
            "mss_units": sum(max(1, math.ceil(x / mss)) for x in lens),
            "lengths": dict(sorted(dist.items(), key=lambda kv: (-kv[1], -kv[0])))}


def read_snap(path, states):
    """A `sockwatch -1` snapshot of the one socket a part held at its end → {"state", "snd_mss",
    "rcv_mss", "rcvbuf", "info_len"}; exactly one socket in one of states."""
    socks = t.read_snapshot(path)
    if len(socks) != 1:
        raise t.RawError(f"{path}: {len(socks)} sockets, want the one the part held")
    d = socks[0]
    if d.str("state") not in states:
        raise t.RawError(f"{path}: state={d.str('state')[:20]}, want {' or '.join(states)}")
    return {"state": d.str("state"), **{k: d.int(k, 0, 1 << 31) for k in
                                        ("snd_mss", "rcv_mss", "rcvbuf", "info_len")}}


def read_part(rawdir, path, part, constants):
    p = f"{path}-{part}"
    r = read_recv(os.path.join(rawdir, f"{p}-recv.txt"), constants)
    s = read_send(os.path.join(rawdir, f"{p}-send.txt"))
    if r["peer"] != s["local"]:
        raise t.RawError(f"{rawdir}: {p}: the receiver's peer {r['peer']} is not the sender "
                         f"{s['local']}")
    cap = pkt.read_complete_capture(os.path.join(rawdir, f"{p}-capture.txt"))
    mss = s["after"]["snd_mss"]
    out = {"recv": r, "send": s, "cap": cap, "summary": summary(r, r["lowat"]),
           "sock_diag": {"send": read_snap(os.path.join(rawdir, f"{p}-sockwatch-send.txt"),
                                           ("FIN-WAIT-1", "FIN-WAIT-2")),
                         "recv": read_snap(os.path.join(rawdir, f"{p}-sockwatch-recv.txt"),
                                           ("CLOSE-WAIT",))},
           "distribution": distribution(r["rets"]),
           "capture": seg_stats(segments(cap, s["local"]), mss)}
    out["capture"]["orig_units"] = orig_units(cap, s["local"], mss)
    out["ends"] = ends_at_segments(r["rets"], segments(cap, s["local"]))
    if path == "wire":
        scap = pkt.read_complete_capture(os.path.join(rawdir, f"{p}-server-capture.txt"))
        out["server_cap"] = scap
        out["server_capture"] = seg_stats(segments(scap, s["local"]), mss)
        out["counters"], out["server_counters"] = tw.read_both_counters(rawdir, f"{p}-",
                                                                        COUNTERS, COUNTERS)
    else:
        out["counters"] = t.read_counters_delta(os.path.join(rawdir, f"{p}-counters-delta.txt"),
                                                COUNTERS)
        out["server_counters"] = None
    return out


def fmt_dist(dist, last):
    """"65536 x13, 29696 x1, …", the last data return marked."""
    parts = []
    for size, n in dist.items():
        tag = " (last)" if size == last and n == 1 else ""
        parts.append(f"{size} x{n}{tag}")
    return ", ".join(parts)


def wrap(prefix, words, width=100):
    out, cur = [], prefix
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip():
            out.append(cur.rstrip())
            cur = " " * len(prefix)
        cur += w + " "
    return out + [cur.rstrip()]


def each(parts):
    """(path, part, its data) for every part, in the report's order."""
    for pth in PATHS:
        for part, _ in PARTS:
            yield pth, part, parts[pth][part]


def picture(parts, lenv, lowat, path, kernel):
    """Each part's returns in call order, one panel per path and part (gnuplot, through
    tcplab.tool_svg) → (tmp, None) or (None, why)."""
    blocks, panels = [], []
    for i, (pth, part, p) in enumerate(each(parts)):
        rets = p["recv"]["rets"][:-1]
        blocks.append(f"$d{i} << EOD\n" + "".join(f"{k} {x}\n" for k, x in enumerate(rets, 1))
                      + "EOD\n")
        panels.append(f"set title '{pth}: {part}' noenhanced\n"
                      f"plot $d{i} using 1:2 with boxes fill solid 0.5 lc rgb '#7f7fbf' "
                      f"title 'returned', {lenv} with lines dashtype 2 lw 2 lc rgb '#c00000' "
                      f"title 'asked ({lenv})'"
                      + (f", {lowat} with lines dashtype 3 lw 2 lc rgb '#008000' "
                         f"title 'SO_RCVLOWAT ({lowat})'" if part == "rcvlowat" else "") + "\n")
    title = t.gnuplot_str(f"bytes each recv() returned, kernel {kernel}")  # raw data: a string
    script = ("".join(blocks) +
              f"set multiplot layout 2,3 title {title} "
              "noenhanced\nset grid ytics\nset key top center horizontal opaque\nset boxwidth 0.8\n"
              "set xlabel 'recv() call'\nset ylabel 'bytes'\n"
              f"set yrange [0:{int(lenv * 1.4)}]\nset xrange [0:*]\n" + "".join(panels) +
              "unset multiplot\n")
    return t.tool_svg(path, lambda out: (["gnuplot"], "set terminal svg size 1200,640 dynamic "
                                         f"font 'sans,11' noenhanced\nset output "
                                         f"{t.gnuplot_str(out)}\n" + script))


def read_run(rawdir):
    """Everything the report reads: constants, sysctls, links, and the six parts."""
    cf = t.read_kv(os.path.join(rawdir, "constants.txt"))
    run = {"constants": {k: cf.int(k, 1, MAX_BYTES) for k in ("bytes", "len", "lowat")},
           "sysctls": t.read_sysctl_file(os.path.join(rawdir, "sysctls.txt"), SYSCTLS),
           "server_sysctls": t.read_sysctl_file(os.path.join(rawdir, "server-sysctls.txt"),
                                                SYSCTLS)}
    wire = tw.read_wire(rawdir)
    lo_lines = t.read_lines(os.path.join(rawdir, "lo-link.txt"))
    lo_link = tw.link_line(lo_lines[0], "lo-link.txt") if lo_lines else None
    if lo_link is None:
        raise t.RawError(f"{rawdir}/lo-link.txt: not an `ip -d link` line")
    wtext = t.read_lines(os.path.join(rawdir, "wire.txt"))
    run["gso"] = {"lo": gso_max_size(lo_lines, "lo-link.txt"),
                  "wire": gso_max_size(wtext, "wire.txt")}
    run["mtu"] = {"lo": lo_link["mtu"], "wire": wire["client"]["link"]["mtu"]}
    parts = {pth: {part: read_part(rawdir, pth, part, run["constants"]) for part, _ in PARTS}
             for pth in PATHS}
    B = run["constants"]["bytes"]
    for pth, part, p in each(parts):
        if p["send"]["bytes"] != B or p["recv"]["bytes"] != B:
            raise t.RawError(f"{rawdir}: {pth}-{part}: sent {p['send']['bytes']}, received "
                             f"{p['recv']['bytes']}, constants.txt says {B}")
    run["parts"] = parts
    return run


def head_lines(run, kernel, collected):
    c, mtu, gso, sysctls = run["constants"], run["mtu"], run["gso"], run["sysctls"]
    lines = [f"{NAME}: one send() of {c['bytes']} bytes, read with recv({c['len']}): plain, "
             f"MSG_WAITALL, SO_RCVLOWAT {c['lowat']}; over loopback and across a veth pair "
             f"(MTU {mtu['wire']})",
             t.header(kernel, collected,
                      "loopback: both ends in the client's namespace, on its lo; wire: the "
                      "sender in the client's namespace (192.0.2.1), the receiver in the "
                      "server's (192.0.2.2)"), "",
             "links and sysctls (raw/p04-short-reads/lo-link.txt, wire.txt, sysctls.txt; the "
             "server's namespace has the same sysctls: server-sysctls.txt):",
             f"  lo     mtu {mtu['lo']:<6} gso_max_size {gso['lo']}",
             f"  veth   mtu {mtu['wire']:<6} gso_max_size {gso['wire']}"]
    lines += [f"  {k} = {sysctls[k]}" for k in SYSCTLS]
    same = all(sysctls[k] == run["server_sysctls"][k] for k in SYSCTLS)
    other = "DIFFERENT values: " + str(run["server_sysctls"])
    return lines + ["  server namespace: " + ("the same values" if same else other), ""]


def mss_lines(parts):
    lines = ["the MSS each end reported after the transfer (TCP_INFO, TCP_MAXSEG, read by "
             "the fixtures; `at connect`: the sender's snd_mss right after connect()):",
             f"  {'path':<5} {'part':<9} {'snd_mss':>7} {'at connect':>10} {'TCP_MAXSEG':>10} "
             f"{'rcv_mss':>7} {'advmss':>6} {'rcvbuf':>7} {'after':>8} {'rcvlowat':>8}"]
    for pth, part, p in each(parts):
        sa, sb = p["send"]["after"], p["send"]["before"]
        ra, rb = p["recv"]["after"], p["recv"]["before"]
        lines.append(f"  {pth:<5} {part:<9} {sa['snd_mss']:>7} {sb['snd_mss']:>10} "
                     f"{sa['maxseg']:>10} {ra['rcv_mss']:>7} {ra['advmss']:>6} "
                     f"{rb['rcvbuf']:>7} {ra['rcvbuf']:>8} {rb['rcvlowat']:>8}")
    lines.append("  (snd_mss, TCP_MAXSEG: the sender's; rcv_mss, advmss, rcvbuf, rcvlowat: the "
                 "receiver's; rcvbuf before its first recv() (after SO_RCVLOWAT) and after the "
                 "last)")
    return lines + half_window_lines(parts) + [""]


def half_window_lines(parts):
    """A line for each sender whose snd_mss ended below the receiver's advmss: the cap of
    tcp_bound_to_half_wnd() (cutoff = max_window >> 1) was still below the MSS the last time
    tcp_sync_mss() ran, so the largest window the receiver advertised was 2 × snd_mss or one
    more."""
    lines = []
    for pth, part, p in each(parts):
        snd, adv = p["send"]["after"]["snd_mss"], p["recv"]["after"]["advmss"]
        if snd < adv:
            lines.append(f"  {pth} {part}: snd_mss {snd} < advmss {adv}: still capped at half "
                         f"the largest window the receiver advertised (max_window {2 * snd} or "
                         f"{2 * snd + 1}, never 2 x {adv} = {2 * adv}: tcp_bound_to_half_wnd())")
    return lines


def returns_lines(parts, c):
    lines = ["what each recv() returned (bytes, in call order; the last 0 is the end of the "
             "stream):"]
    for pth, part, p in each(parts):
        lines += wrap(f"  {pth + ' ' + part + ':':<15} ", [str(x) for x in p["recv"]["rets"]])
    lines += ["", "the distribution (size xcount; short = fewer than asked, the last data "
              "return not counted):",
              f"  {'path':<5} {'part':<9} {'calls':>5} {'full':>5} {'short':>5} "
              f"{'min*':>6} {'last':>6} {'total':>8}  sizes"]
    for pth, part, p in each(parts):
        s = p["summary"]
        mn = "-" if s["min_not_last"] is None else s["min_not_last"]
        row = f"  {pth:<5} {part:<9} {s['calls']:>5} {s['full']:>5} {s['short_not_last']:>5} " \
              f"{mn:>6} {s['last']:>6} {s['total']:>8}  "
        lines += wrap(row, fmt_dist(p["distribution"], s["last"]).split(" "), 100)
    return lines + [f"  (*min: the smallest return but the last data one; calls include the "
                    f"final 0; {c['bytes']} / {c['len']} = {c['bytes'] // c['len']} calls at the "
                    "least)", ""]


def rules_lines(parts, c):
    lines = ["what the rules say, checked on these returns:"]
    for pth in PATHS:
        sp, sw, sl = (parts[pth][k]["summary"] for k in ("plain", "waitall", "rcvlowat"))
        lines += [f"  {pth}: plain: {sp['short_not_last']} short return(s) before the last; "
                  f"MSG_WAITALL: {sw['full']} of {sw['data_calls']} data returns are {c['len']}"
                  f"{' (all)' if sw['full'] == sw['data_calls'] else ''}; SO_RCVLOWAT "
                  f"{c['lowat']}: {sl['below_lowat_not_last']} return(s) below it before the "
                  f"last (the last: {sl['last']})"]
    lines += ["", "where the returns ended, against the capture (returns whose stream offset, the "
              "bytes returned so far, is the end, seq + len, of a captured data segment):"]
    for pth, part, p in each(parts):
        e = p["ends"]
        lines.append(f"  {pth:<5} {part:<9} " + ", ".join(
            f"{k} {e[k][0]} of {e[k][1]}" for k in ("short", "full", "last")))
    bad = [f"{pth} {part} at byte {p['recv']['mismatch_at']}"
           for pth, part, p in each(parts) if p["recv"]["mismatch_at"] >= 0]
    return lines + ["", "the stream's content:",
                    "  " + ("MISMATCH: " + ", ".join(bad) if bad else
                            f"each of the {len(PATHS) * len(PARTS)} receivers read every byte as "
                            "the sender wrote it (byte i = i % 251, checked)"), ""]


def sock_diag_lines(parts):
    """sockwatch's sock_diag reading of both sockets at the end against the fixtures' own
    getsockopt() lines (`after`)."""
    lines = ["sock_diag at the end of each stream (sockwatch -1 while the receiver held the "
             "connection: raw/p04-short-reads/PATH-PART-sockwatch-*.txt), the fixtures' "
             "getsockopt() in ():",
             f"  {'path':<5} {'part':<9} {'sender':<10} {'snd_mss':>15} {'receiver':<10} "
             f"{'rcv_mss':>15} {'rcvbuf':>19}"]
    differ = 0
    for pth, part, p in each(parts):
        ds, dr = p["sock_diag"]["send"], p["sock_diag"]["recv"]
        fs, fr = p["send"]["after"], p["recv"]["after"]
        differ += (ds["snd_mss"] != fs["snd_mss"]) + (dr["rcv_mss"] != fr["rcv_mss"]) + \
            (dr["rcvbuf"] != fr["rcvbuf"])
        lines.append(f"  {pth:<5} {part:<9} {ds['state']:<10} "
                     f"{ds['snd_mss']:>6} ({fs['snd_mss']:>6}) {dr['state']:<10} "
                     f"{dr['rcv_mss']:>6} ({fr['rcv_mss']:>6}) "
                     f"{dr['rcvbuf']:>8} ({fr['rcvbuf']:>8})")
    return lines + ["  " + (f"DIFFER: {differ} of the {3 * len(PATHS) * len(PARTS)} figures"
                            if differ else "the two readers agree on every figure"), ""]


def lengths_words(c):
    """The six most frequent segment lengths, then how many other lengths."""
    words = [f"{k} x{v}," for k, v in list(c["lengths"].items())[:6]]
    more = len(c["lengths"]) - 6
    if more > 0:
        words += f"and {more} other length(s)".split()
    elif words:
        words[-1] = words[-1].rstrip(",")
    return words


def segment_lines(parts):
    lines = ["the sender's segments in the capture (client-to-server data; length xcount, "
             "most frequent first):",
             f"  {'path':<5} {'part':<9} {'iface':<7} {'segs':>4} {'new bytes':>9} {'again':>5} "
             f"{'max':>6} {'>MSS':>4} {'MSS units':>9}  lengths"]
    for pth, part, p in each(parts):
        caps = [(p["cap"], p["capture"])]
        if pth == "wire":
            caps.append((p["server_cap"], p["server_capture"]))
        for cap, c in caps:
            row = f"  {pth:<5} {part:<9} {cap['ready'].str('iface'):<7} {c['segments']:>4} " \
                  f"{c['new_bytes']:>9} {c['again']:>5} {c['max']:>6} {c['over_mss']:>4} " \
                  f"{c['mss_units']:>9}  "
            lines += wrap(row, lengths_words(c), 100)
    return lines + ["  (new bytes: from the first segment's seq to the highest byte carried; "
                    "again: segments that carried no new byte; >MSS: segments longer than the "
                    "sender's snd_mss, one GSO/TSO skb as libpcap sees it; MSS units: the sum of "
                    "ceil(length / snd_mss), the segments the skbs stand for)", ""]


def orig_lines(parts):
    lines = ["the capture against the sender's TcpExtTCPOrigDataSent (tcp_event_new_data_sent() "
             "adds the MSS units of every new skb; a FIN alone is 1):"]
    for part, _ in PARTS:
        p = parts["wire"][part]
        want, got = p["capture"]["orig_units"], p["counters"].get("TcpExtTCPOrigDataSent")
        verdict = "agree" if got == want else "DIFFER"
        lines.append(f"  wire  {part:<9} capture {want:>5}  counter {t.fmt_delta(got):>6}  "
                     f"{verdict}")
    grew = sum(1 for part, _ in PARTS if parts["lo"][part]["send"]["before"]["snd_mss"] !=
               parts["lo"][part]["send"]["after"]["snd_mss"])
    lines.append("  (not on loopback: " + (
        f"the sender's snd_mss changed during {grew} of the {len(PARTS)} transfers "
        "(at connect → after, above), so a segment's MSS units depend on when it was sent, "
        "which the capture does not show" if grew else
        "both ends count in one namespace") + ")")
    agree = all(parts["wire"][k]["capture"]["lengths"] ==
                parts["wire"][k]["server_capture"]["lengths"] for k, _ in PARTS)
    return lines + [f"  veth-c and veth-s saw {'the same' if agree else 'DIFFERENT'} data "
                    "segment lengths in every part", ""]


def counter_row(label, deltas):
    """One side's deltas of one part: COUNTERS always, MOVED where they moved."""
    cc = {k: deltas.get(k) for k in COUNTERS}
    cc.update({k: deltas[k] for k in MOVED if deltas.get(k)})
    return wrap(f"  {label:<15} ", [f"{k}={t.fmt_delta(v)}" for k, v in cc.items()], 100)


def counter_lines(parts):
    lines = ["counter deltas per part (loopback: both ends in one namespace; wire: the "
             "sender's namespace, then the receiver's):"]
    for pth, part, p in each(parts):
        lines += counter_row(f"{pth} {part}:", p["counters"])
        if p["server_counters"] is not None:
            lines += counter_row("  receiver:", p["server_counters"])
    return lines


def capture_obj(cap, stats):
    return {**pkt.capture_json(cap),
            **{k: (v if k != "lengths" else {str(a): b for a, b in v.items()})
               for k, v in stats.items()}}


def part_json(p):
    out = {"summary": p["summary"], "returns": p["recv"]["rets"], "ends": p["ends"],
           "distribution": {str(k): v for k, v in p["distribution"].items()},
           "recv": {k: p["recv"][k] for k in ("len", "waitall", "lowat", "local", "peer",
                                             "bytes", "mismatch_at", "before", "after")},
           "send": p["send"], "sock_diag": p["sock_diag"],
           "capture": capture_obj(p["cap"], p["capture"]),
           "counters": p["counters"]}
    if "server_capture" in p:
        out["server_capture"] = capture_obj(p["server_cap"], p["server_capture"])
        out["server_counters"] = p["server_counters"]
    return out


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    run = read_run(rawdir)
    parts, c = run["parts"], run["constants"]
    lines = (head_lines(run, kernel, t.collected_at(rawdir)) + mss_lines(parts) +
             returns_lines(parts, c) + rules_lines(parts, c) + sock_diag_lines(parts) +
             segment_lines(parts) +
             orig_lines(parts) + counter_lines(parts))
    made = {}
    tmp, why = picture(parts, c["len"], c["lowat"], os.path.join(outdir, NAME + ".svg"), kernel)
    if tmp is None:
        lines += ["", f"no picture: {why}"]
    else:
        made[os.path.join(outdir, NAME + ".svg")] = tmp
        lines += ["", f"picture: {NAME}.svg (each part's returns in call order)"]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "result": "ok", "errno": None, "elapsed_s": None,
           # the counters are each part's (paths.PATH.PART.counters): no one set is the unit's
           "counters": None, "constants": c, "mtu": run["mtu"], "gso_max_size": run["gso"],
           "sysctls": t.sysctls_json(run["sysctls"]),
           "server_sysctls": t.sysctls_json(run["server_sysctls"]),
           "paths": {pth: {part: part_json(parts[pth][part]) for part, _ in PARTS}
                     for pth in PATHS}}
    try:
        t.write_outputs(outdir, NAME, lines + [""], obj, made)
    finally:
        pkt.drop_made(made)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
