#!/usr/bin/python3
"""p01-wire-connect report: one blocking connect() across a veth pair between two namespaces,
packet by packet, with the MSS each end announced against loopback's (measured in the same
unit), each side's counters from its own namespace, and `ss -tin` of both sockets as a
cross-check."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p01-wire-connect"
COUNTERS = ("TcpActiveOpens", "TcpPassiveOpens", "TcpAttemptFails", "TcpOutSegs", "TcpInSegs",
            "TcpRetransSegs", "TcpExtTCPSynRetrans")


def mss_opt(p):
    """The MSS option of a SYN or SYN-ACK (the capture's opts=), None when it has none."""
    m = re.search(r"(?:^|,)mss:([0-9]+)", p["opts"])
    return int(m.group(1)) if m else None


def client_run(rawdir, prefix):
    """client.txt (connect_block -H) → (Fields, start_ns, end_ns)."""
    c = t.read_kv(os.path.join(rawdir, prefix + "client.txt"))
    start = c.int("start_ns")
    return c, start, c.int("end_ns", start)


def connection(rawdir, prefix, iface_note):
    """One connection: its client, its capture, the handshake's MSS options and `ss -tin`."""
    c, start, end = client_run(rawdir, prefix)
    cap = pkt.read_capture(os.path.join(rawdir, prefix + "capture.txt"))
    local = c.str("local")
    segs = pkt.conn_packets(cap, local)
    syn, synack, ack = tw.handshake(segs)
    where = os.path.join(rawdir, prefix + "capture.txt")
    if syn is None or synack is None:
        raise t.RawError(f"{where}: no SYN and SYN-ACK of {local} (the handshake was not captured)")
    for what, p in (("SYN", syn), ("SYN-ACK", synack)):
        if not pkt.opts_whole(p):    # its MSS and timestamps are what this page reads
            raise t.RawError(f"{where}: the {what} of {local} is "
                             f"{'truncated' if 'truncated' in p else 'bad=' + p['bad']}: its "
                             "option list is cut, its MSS and timestamps are not known")
    socks = tw.read_ss(os.path.join(rawdir, prefix + "ss.txt" if prefix else "ss-client.txt"))
    return {"result": c.str("result"), "errno": c.str("errno") if c.str("result") == "error" else None,
            "elapsed_s": c.float("elapsed_s", 0, 86400), "local": local, "start_ns": start,
            "end_ns": end, "cap": cap, "segs": segs, "syn": syn, "synack": synack, "ack": ack,
            "mss": {"syn": mss_opt(syn), "synack": mss_opt(synack)}, "ss": socks,
            "note": iface_note}


MIN_ADV_MSS = 256      # net.ipv4.route.min_adv_mss's default (net/ipv4/route.c)
MIN_SND_MSS = 48       # net.ipv4.tcp_min_snd_mss's default, TCP_MIN_SND_MSS (include/net/tcp.h)
TCP_MIN_MSS = 88       # include/net/tcp.h: "(60+60+8) - (20+20)"


def advmss_lines(advmss, syn_mss, synack_mss, mtu):
    """The knob advmss (a route to the server with that advmss metric in the client's
    namespace): the SYN's MSS option is the metric, not MTU - 40; [] without the knob."""
    if not advmss:
        return []
    if advmss < TCP_MIN_MSS and syn_mss == TCP_MIN_MSS:
        return [f"  the SYN's MSS {syn_mss}, not the route's advmss {advmss} (knob advmss): the "
                f"kernel announced no less than TCP_MIN_MSS {TCP_MIN_MSS}",
                "    (measured: 6.18.44 raised advmss 1 to 88; which function raises it is not "
                "named here)"]
    if syn_mss != advmss:
        return [f"  the route's advmss {advmss} (knob advmss) is not the SYN's MSS {syn_mss}: "
                "not explained here"]
    return [f"  the SYN's MSS {syn_mss}: the advmss metric of the client's route to the server "
            f"(knob advmss={advmss}), not MTU - 40 ({min(mtu, 65535) - 40});",
            "    tcp_advertise_mss() in net/ipv4/tcp_output.c reads the route's metric "
            "(dst_metric_advmss());",
            f"    the server's route has none: its SYN-ACK says {synack_mss}"]


def mss_floor_lines(mtu, syn_mss, socks, ts):
    """Why the SYN's MSS option is not min(MTU, 65535) - 40, when it is not (an MTU below 296):
    the kernel's floors, from its source, beside what ss measured on this connection; [] when
    it is.  The kernel's rules (read in upstream patches to these functions, 2019-2025; on
    6.18.44 at MTU 68 ss showed exactly these values): ipv4_default_advmss() in
    net/ipv4/route.c announces max(route MTU - 40, min_adv_mss); __tcp_mtu_to_mss() in
    net/ipv4/tcp_output.c sends at most max(path MTU - 40, tcp_min_snd_mss), less the options
    (tcp_mtu_to_mss()); tcp_initialize_rcv_mss() in net/ipv4/tcp_input.c guesses rcvmss at
    least TCP_MIN_MSS.  The defaults are assumed: the unit does not record these sysctls."""
    plain = min(mtu, 65535) - 40
    if syn_mss is None or syn_mss == plain:
        return []
    if syn_mss != max(plain, MIN_ADV_MSS):
        return [f"  the SYN's MSS {syn_mss} is neither MTU - 40 ({plain}) nor the kernel's floor "
                f"{MIN_ADV_MSS}: not explained here"]
    opts = 12 if ts else 0
    send = max(plain, MIN_SND_MSS)
    seen = "/".join(str(m) for m in sorted({s["mss"] for s in socks}))
    rcv = "/".join(str(m) for m in sorted({s["rcvmss"] for s in socks}))
    out = [f"  why {syn_mss}, not {plain}: each end announces at least "
           f"net.ipv4.route.min_adv_mss ({MIN_ADV_MSS} by default):",
           "    ipv4_default_advmss() in net/ipv4/route.c takes max(route MTU - 40, min_adv_mss)",
           "  what each end sends still follows the MTU: __tcp_mtu_to_mss() in "
           "net/ipv4/tcp_output.c takes",
           f"    max(MTU - 40, net.ipv4.tcp_min_snd_mss {MIN_SND_MSS}) - {opts} B of options "
           f"= {send - opts} (ss's mss below: {seen})"]
    if send + 40 > mtu:
        out.append(f"    so a full segment is {send + 40} B, IP-fragmented on this MTU {mtu} "
                   "(docs/wire.md, \"Small MTUs\")")
    out += [f"  ss's rcvmss {rcv}: the receiver's first guess of the peer's MSS is at least "
            f"TCP_MIN_MSS {TCP_MIN_MSS}",
            "    (tcp_initialize_rcv_mss() in net/ipv4/tcp_input.c)"]
    return out


def ss_rows(label, socks):
    return [f"  {label + ' ' + s['local']:<34} {s['mss']:>6} {s['advmss']:>7} {s['rcvmss']:>7} "
            f"{s['pmtu']:>6}" for s in socks]


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    t.read_machine(os.path.join(rawdir, "machine-server.txt"))
    listener = t.listener_ready(os.path.join(rawdir, "listener.txt"), "never")
    wire = tw.read_wire(rawdir)
    lo_lines = t.read_lines(os.path.join(rawdir, "lo-link.txt"))
    lo_link = tw.link_line(lo_lines[0], os.path.join(rawdir, "lo-link.txt")) if lo_lines else None
    if lo_link is None:
        raise t.RawError(f"{os.path.join(rawdir, 'lo-link.txt')}: not an `ip -o link` line")
    w = connection(rawdir, "", "wire")
    w["ss"] += tw.read_ss(os.path.join(rawdir, "ss-server.txt"))
    lo = connection(rawdir, "lo-", "loopback")
    cc, sc = tw.read_both_counters(rawdir, "", COUNTERS, COUNTERS)
    mtu = wire["client"]["link"]["mtu"]
    addr, port = listener.str("addr"), listener.int("port", 1, 65535)

    lines = [f"{NAME}: blocking connect() to {addr}:{port} across a veth pair (MTU {mtu}), "
             "and over loopback for comparison",
             t.header(kernel, t.collected_at(rawdir), "client and server in two network "
                      "namespaces joined by a veth pair (192.0.2.1 and .2, TEST-NET-1); the "
                      "loopback connection inside the client's namespace"), "",
             "the links (ip -d link; raw/p01-wire-connect/wire.txt, lo-link.txt):"]
    lines += tw.wire_lines(wire)
    lines += [f"  lo     {lo_link['name']:<7} mtu {lo_link['mtu']:<6} qdisc {lo_link['qdisc']:<8} "
              f"state {lo_link['state']}  (the client's namespace)"]
    lines += tw.machine_links(rawdir) + [""]
    lines += ["MSS option in the handshake (the capture):",
              f"  {'':<22} {'wire':>8} {'loopback':>9}",
              f"  {'link MTU':<22} {mtu:>8} {lo_link['mtu']:>9}",
              f"  {'SYN (client)':<22} {w['mss']['syn']:>8} {lo['mss']['syn']:>9}",
              f"  {'SYN-ACK (server)':<22} {w['mss']['synack']:>8} {lo['mss']['synack']:>9}",
              f"  {'min(MTU, 65535) - 40':<22} {min(mtu, 65535) - 40:>8} {min(lo_link['mtu'], 65535) - 40:>9}"]
    ts = all("ts" in p["opts"].split(",") for c in (w, lo) for p in (c["syn"], c["synack"]))
    advmss = (t.read_knobs(rawdir) or {}).get("advmss", 0)
    if advmss:
        lines += advmss_lines(advmss, w["mss"]["syn"], w["mss"]["synack"], mtu)
    else:
        lines += mss_floor_lines(mtu, w["mss"]["syn"], w["ss"], ts)
    lines += [
              "",
              "ss -tin while both connections were held (raw/.../ss-*.txt, lo-ss.txt):",
              f"  {'socket':<34} {'mss':>6} {'advmss':>7} {'rcvmss':>7} {'pmtu':>6}"]
    lines += ss_rows("wire", w["ss"]) + ss_rows("lo", lo["ss"])
    lines += [f"  timestamps in both SYN and SYN-ACK: {'yes' if ts else 'no'}", ""]
    t0 = w["start_ns"]
    notes = [(w["end_ns"], f"client: connect() returned {w['errno'] or w['result']}")]
    seg_notes = {}
    if cc.get("TcpActiveOpens") == 1:
        seg_notes[w["segs"].index(w["syn"])] = "client TcpActiveOpens +1"
    if sc.get("TcpPassiveOpens") == 1 and w["ack"] is not None:
        seg_notes[w["segs"].index(w["ack"])] = "server TcpPassiveOpens +1"
    rows = pkt.ladder_rows(w["segs"], t0, notes, seg_notes)
    lines += ["the handshake on the wire (t in ms from the start of connect()):"]
    lines += pkt.capture_notes(w["cap"], "raw/p01-wire-connect/capture.txt (.pcap beside it), "
                               "the client's end")
    lines += pkt.ladder_text(rows, client=f"client {w['local']}", server=f"server {addr}:{port}",
                             notes_title="counters")
    lines += ["", "the same on loopback:"]
    lines += pkt.capture_notes(lo["cap"], "raw/p01-wire-connect/lo-capture.txt")
    lo_rows = pkt.ladder_rows(lo["segs"], lo["start_ns"],
                              [(lo["end_ns"], f"client: connect() returned {lo['errno'] or lo['result']}")])
    lines += pkt.ladder_text(lo_rows, client=f"client {lo['local']}", server="server 127.0.0.1",
                             notes_title="")
    lines += ["", f"connect(): wire {w['errno'] or w['result']} after {w['elapsed_s'] * 1e6:.0f} µs, "
              f"loopback {lo['errno'] or lo['result']} after {lo['elapsed_s'] * 1e6:.0f} µs "
              "(one call each)", "",
              "counter deltas, client (its namespace):"]
    lines += t.counters_block(cc)
    lines += ["counter deltas, server (its namespace, read there):"]
    lines += t.counters_block(sc)

    def conn_json(c):
        return {"result": c["result"], "errno": c["errno"], "elapsed_s": c["elapsed_s"],
                "local": c["local"], "mss": c["mss"], "ss": c["ss"],
                "capture": pkt.capture_json(c["cap"])}
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": cc, "server_counters": sc,
           "result": w["result"], "errno": w["errno"], "elapsed_s": w["elapsed_s"],
           "port": port, "addr": addr, "mtu": mtu,
           "links": {"client": wire["client"]["link"], "server": wire["server"]["link"],
                     "lo": lo_link},
           "wire": conn_json(w), "loopback": conn_json(lo), "ladder": rows}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, f"client {w['local']}",
                         f"server {addr}:{port}")


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
