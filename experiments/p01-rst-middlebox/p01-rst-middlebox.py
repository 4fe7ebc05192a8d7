#!/usr/bin/python3
"""p01-rst-middlebox report: a blocking connect() across the wire answered with a RST, once by
nft on the server side (reject with tcp reset: a middlebox's RST, built by nf_reject) and once by
the server's own TCP (no socket on the port: tcp_v4_send_reset()): connect()'s result, the two
RSTs side by side as the capture decoded them, and who counted what on which side."""
import sys

import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = UNIT = "p01-rst-middlebox"
PARTS = (("nft", "nft on the server's input hook: reject with tcp reset (nf_send_reset)"),
         ("kernel", "the server's TCP, no socket on the port (tcp_v4_send_reset)"))
CLIENT = ("TcpActiveOpens", "TcpAttemptFails", "TcpInSegs", "TcpOutSegs", "TcpOutRsts")
SERVER = ("TcpInSegs", "TcpOutSegs", "TcpOutRsts")
SHOW = ("TcpActiveOpens", "TcpAttemptFails", "TcpExtTCPAbortOnSyn", "TcpInSegs", "TcpOutSegs",
        "TcpOutRsts", "TcpInErrs", "IpInReceives", "IpInDelivers", "IpOutRequests")
FIELDS = ("t_ms", "dir", "flags", "seq", "ack", "len", "win", "opts")


def rst_of(part):
    """The RST the server side sent (s>c, R set), or None."""
    for p in part["packets"]:
        if p["kind"] == "tcp" and p["dir"] == "s>c" and "R" in p["flags"]:
            return p
    return None


def side_by_side(parts):
    out = [f"  {'':<6} " + "  ".join(f"{k:>8}" for k in FIELDS[1:])]
    for p in parts:
        r = p["rst"]
        if r is None:
            out.append(f"  {p['name']:<6} (no RST from the server side in the capture)")
            continue
        vals = ["-" if r[k] is None else str(r[k]) for k in FIELDS[1:]]
        out.append(f"  {p['name']:<6} " + "  ".join(f"{v:>8}" for v in vals) +
                   f"   at {r['t_ms']:.3f} ms")
    return out


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    parts = []
    for name, who in PARTS:
        p = tw.read_part(rawdir, name, CLIENT, SERVER)
        p.update(name=name, who=who, rst=rst_of(p))
        p["rst_ms_after_syn"] = (None if p["rst"] is None or not p["packets"] else
                                 round(p["rst"]["t_ms"] - p["packets"][0]["t_ms"], 3))
        # the capture is on the client's end: what the client sent beside its counters, and in
        # the kernel's part the server's RST beside the server's TcpOutRsts (nft's RST is
        # nf_send_reset's, which no TCP counter counts); the key only on a difference
        dis = pkt.sent_checks(p["_at"]["raw"], "c>s", p["counters_client"], "client")
        if name == "kernel":
            dis.append(pkt.count_check(
                "server RSTs", sum(1 for x in p["_at"]["raw"] if x["kind"] == "tcp" and
                                   x["dir"] == "s>c" and "R" in x["flags"]),
                "server TcpOutRsts", pkt.counter_delta(p["counters_server"], "TcpOutRsts")))
        dis = [d for d in dis if d]
        if dis:
            p["disagree"] = dis
        parts.append(p)
    lines = [f"{NAME}: blocking connect() across the wire answered with a RST, by nft and by "
             "the server's own TCP", t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir)),
             ""]
    # the knob drop_syns (experiments/units): part nft's first SYNs dropped before the reject
    drop_syns = (t.read_knobs(rawdir) or {}).get("drop_syns", 0)
    rows = []
    for p in parts:
        lines += [f"== {p['name']}: {p['who']}"]
        if p["name"] == "nft" and drop_syns:
            lines += [f"(knob drop_syns={drop_syns}: a drop rule before the reject: the first "
                      f"{'SYN' if drop_syns == 1 else f'{drop_syns} SYNs'} had no answer)"]
        lines += [
                  f"connect() from {p['client']}: {p['errno'] or p['result']} after "
                  f"{p['elapsed_s'] * 1e3:.3f} ms", "",
                  "packets on veth-c (t_ms from the start of connect()):"]
        lines += tw.packet_lines(p) + pkt.capture_marks(p["capture"])
        lines += ["DISAGREE: " + d for d in p.get("disagree", ())]
        lines += ["", "sockwatch (the client's SYN-SENT socket):"] + tw.event_lines(p)
        lines += [""]
        at = p["_at"]
        rst = tw.index_of(p, lambda x: x["kind"] == "tcp" and "R" in x["flags"])
        seg = {} if rst is None else {rst: tw.counted(p["counters_server"], "TcpOutRsts",
                                                     "TcpInSegs", side="server: ")}
        rows += tw.ladder_rows(p, p["name"], [(at["end_ns"], "client: connect() "
                                              f"{p['errno'] or p['result']}")], seg)
    lines += ["the two RSTs as the capture decoded them (ack relative to the client's ISN; "
              "the server side sent no SYN, so its seq counts from this RST: 0; win raw):"]
    lines += side_by_side(parts)
    lines += ["", "counter deltas, each side in its own namespace (nft part | kernel part):"]
    names = SHOW
    w = max(len(k) for k in names)
    lines.append(f"  {'counter':<{w}}  {'nft client':>10}  {'nft server':>10}  "
                 f"{'kern client':>11}  {'kern server':>11}   (. = unchanged)")
    for k in names:
        vals = []
        for p in parts:
            for side in ("counters_client", "counters_server"):
                vals.append(t.fmt_delta(p[side][k]) if k in p[side] else ".")
        lines.append(f"  {k:<{w}}  {vals[0]:>10}  {vals[1]:>10}  {vals[2]:>11}  {vals[3]:>11}")
    nft, kern = parts
    d = {k: (tw.delta(nft["counters_server"], k), tw.delta(kern["counters_server"], k))
         for k in ("TcpOutRsts", "TcpInSegs")}
    lines += ["", f"server TcpOutRsts: {d['TcpOutRsts'][0]:+d} for nft's "
              f"{'RST' if nft['rst'] else '(no RST came)'}, "
              f"{d['TcpOutRsts'][1]:+d} for the kernel's; server TcpInSegs: "
              f"{d['TcpInSegs'][0]:+d} (nft) and {d['TcpInSegs'][1]:+d} (kernel)", ""]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None,
           # the top-level keys describe the first part (docs/output-format.md)
           "counters": nft["counters_client"], "result": nft["result"], "errno": nft["errno"],
           "elapsed_s": nft["elapsed_s"], **({"drop_syns": drop_syns} if drop_syns else {}),
           "parts": {p["name"]: tw.strip_private(p) for p in parts},
           "server_outrsts": {"nft": d["TcpOutRsts"][0], "kernel": d["TcpOutRsts"][1]},
           "server_insegs": {"nft": d["TcpInSegs"][0], "kernel": d["TcpInSegs"][1]}}
    tw.write_with_ladder(outdir, NAME, lines + tw.ladder_lines(rows), obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
