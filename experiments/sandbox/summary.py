#!/usr/bin/env python3
"""summary.py RAWDIR OUTDIR — what happened in a sandbox session, from its raw probe files
(both sides' sockwatch, the capture on veth-c, both sides' counters): OUTDIR/sandbox.txt and
sandbox.json (every connection with each side's states in order and its packets, the listeners,
the packet counts, the counter deltas) and sandbox-ladder.svg (mscgen; a missing mscgen is a
line in the .txt).  Raw input that cannot be read is one line on stderr and exit 1."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

CLIENT_ADDR, SERVER_ADDR = "192.0.2.1", "192.0.2.2"
SIDES = ("client", "server")


def sockets(path):
    """One sockwatch file → [{"cookie", "local", "peer", "states": [...], "events": n,
    "first_ns", "last_ns"}], a socket followed by its cookie (tcplab.socket_keys)."""
    out = {}
    for k, e in t.socket_keys(t.read_sockwatch(path), lambda e: (e.str("local"), e.str("peer"))):
        s = out.setdefault(k, {"cookie": t.cookie(e), "local": k[0], "peer": k[1], "states": [],
                               "events": 0, "first_ns": e.int("t_ns")})
        s["events"] += 1
        s["last_ns"] = e.int("t_ns")
        state = "gone" if e.str("event") == "gone" else t.shown_state(e.str("state"))
        if not s["states"] or s["states"][-1] != state:
            s["states"].append(state)
    return list(out.values())


def deltas(path):
    """counters -d output → {name: delta}; an empty file is no counter changed."""
    if os.path.getsize(path) == 0:
        return {}
    return t.read_counters_delta(path)


def host(ep):
    return ep.rsplit(":", 1)[0]


def with_dir(p):
    """The capture ran without -p (any port): its dir= is ?>?; the wire's sides say it."""
    p = dict(p)
    src = p["src"] if p["kind"] == "tcp" else p["quoted"]["src"]
    d = "c>s" if host(src) == CLIENT_ADDR else "s>c"
    if p["kind"] == "tcp":
        p["dir"] = d
    else:
        p["quoted"] = dict(p["quoted"], dir=d)
    return p


def connections(socks, packets):
    """The wire's connections: a client socket to the server's address, the server socket with
    the same two ends, and the packets of that 4-tuple.  Loopback sockets stay out."""
    conns = {}
    for side in SIDES:
        for s in socks[side]:
            if s["states"][:1] == ["LISTEN"] or host(s["peer"]) not in (CLIENT_ADDR, SERVER_ADDR):
                continue
            c_end, s_end = (s["local"], s["peer"]) if side == "client" else (s["peer"], s["local"])
            c = conns.setdefault((c_end, s_end), {"client": c_end, "server": s_end,
                                                  "client_states": [], "server_states": []})
            c[f"{side}_states"] = s["states"]
            c.setdefault("first_ns", s["first_ns"])
            c["first_ns"] = min(c["first_ns"], s["first_ns"])
    for c in conns.values():
        mine = [p for p in packets if p["kind"] == "tcp" and
                {p["src"], p["dst"]} == {c["client"], c["server"]}]
        c["packets"] = len(mine)
        c["bytes"] = {"c>s": sum(p["len"] for p in mine if p["dir"] == "c>s"),
                      "s>c": sum(p["len"] for p in mine if p["dir"] == "s>c")}
        c["flags"] = {f: sum(1 for p in mine if f in p["flags"]) for f in "SFR"}
        if mine:
            c["first_ns"] = min(c["first_ns"], mine[0]["t_ns"])
    return sorted(conns.values(), key=lambda c: c["first_ns"])


def read_capture_any_port(path, outdir):
    """tcplab_pkt.read_capture() of a capture run without -p, whose ready line says `port=-`
    (docs/capture.md) where read_capture() wants a number: it reads a copy without that key,
    made in OUTDIR and removed at once; errors name the raw file."""
    lines = t.read_lines(path)
    if lines and lines[0].startswith("ready ") and " port=- " in lines[0] + " ":
        lines[0] = (lines[0] + " ").replace(" port=- ", " ").rstrip()
    fd, tmp = tempfile.mkstemp(dir=outdir, prefix=".capture.", suffix=".txt")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        try:
            return pkt.read_capture(tmp)
        except t.RawError as e:
            raise t.RawError(str(e).replace(tmp, path)) from None
    finally:
        os.unlink(tmp)


def build(raw, outdir):
    socks = {side: sockets(os.path.join(raw, f"{side}-sockwatch.txt")) for side in SIDES}
    cap = read_capture_any_port(os.path.join(raw, "capture.txt"), outdir)
    packets = [with_dir(p) for p in cap["packets"]]
    dl = {side: deltas(os.path.join(raw, f"{side}-counters-delta.txt")) for side in SIDES}
    t0 = packets[0]["t_ns"] if packets else cap["ready"].int("t_ns")
    conns = connections(socks, packets)
    listeners = [{"side": side, "local": s["local"], "states": s["states"]}
                 for side in SIDES for s in socks[side] if s["states"][:1] == ["LISTEN"]]
    flags = {name: sum(1 for p in packets if p["kind"] == "tcp" and f in p["flags"])
             for name, f in (("syn", "S"), ("fin", "F"), ("rst", "R"))}
    started = t.read_text(os.path.join(raw, "started.txt"), optional=True)
    kernel = t.read_text(os.path.join(raw, "kernel.txt"), optional=True)

    lines = [f"tcplab sandbox: kernel {(kernel or '?').strip()}, started {(started or '?').strip()}",
             f"wire: client {CLIENT_ADDR} (veth-c) <-> server {SERVER_ADDR} (veth-s)", "",
             f"connections on the wire: {len(conns)}"]
    for i, c in enumerate(conns, 1):
        lines += [f"  {i}. {c['client']} -> {c['server']}",
                  "     client: " + (" -> ".join(c["client_states"]) or "(not seen by sockwatch)"),
                  "     server: " + (" -> ".join(c["server_states"]) or "(not seen by sockwatch)"),
                  f"     packets {c['packets']} (SYN {c['flags']['S']}, FIN {c['flags']['F']}, "
                  f"RST {c['flags']['R']}), bytes c>s {c['bytes']['c>s']}, s>c {c['bytes']['s>c']}"]
    lines += ["", f"listeners: {len(listeners)}"]
    lines += [f"  {li['side']} {li['local']}: {' -> '.join(li['states'])}" for li in listeners]
    lines += ["", f"packets on veth-c: {len(packets)} (TCP {cap['end'].int('tcp')}, ICMP "
              f"{cap['end'].int('icmp')}, other {cap['end'].int('other')}; dropped by libpcap "
              f"{cap['end'].str('dropped')}): SYN {flags['syn']}, FIN {flags['fin']}, "
              f"RST {flags['rst']}"]
    for side in SIDES:
        lines += ["", f"{side} counters (deltas over the session):"] + t.counters_block(dl[side])
    lines += ["", "files: sandbox.pcap (the packets), events.txt (the live pane), raw/ (the probes)"]
    strip = ("first_ns",)
    obj = {"tool": "sandbox", "kernel": (kernel or "").strip() or None,
           "started": (started or "").strip() or None,
           "wire": {"client": CLIENT_ADDR, "server": SERVER_ADDR},
           "connections": [{k: v for k, v in c.items() if k not in strip} for c in conns],
           "listeners": listeners,
           "sockets": {side: [{k: v for k, v in s.items() if k not in ("first_ns", "last_ns")}
                              for s in socks[side]] for side in SIDES},
           "capture": pkt.capture_json(cap), "packet_flags": flags,
           "counters": {side: dl[side] for side in SIDES}, "pcap": "sandbox.pcap"}
    rows = pkt.ladder_rows(packets, t0)
    lines += ["", "ladder (t_ms from the first packet):"] + pkt.ladder_text(rows, tw.CLIENT_COL, tw.SERVER_COL)
    tw.write_with_ladder(outdir, "sandbox", lines, obj, rows)


def main(argv):
    if len(argv) != 3:
        print("usage: summary.py RAWDIR OUTDIR", file=sys.stderr)
        return 2
    try:
        build(argv[1], argv[2])
    except (t.RawError, OSError) as e:
        print(f"summary.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
