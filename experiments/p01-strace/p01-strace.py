#!/usr/bin/python3
"""p01-strace report: the system calls of three connects (strace -T), and the three sockets a
connect() to a never-accepting listener leaves: LISTEN with Recv-Q 1, and both ESTAB ends."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402

NAME = "p01-strace"
UNIT = "p01-strace"
PARTS = ("block", "refused", "cc")
CONNECT = re.compile(r'connect\(\d+, \{sa_family=AF_INET, sin_port=htons\((\d+)\), '
                     r'sin_addr=inet_addr\("([0-9.]+)"\)')


def strace_dest(syscalls):
    """addr:port of the connect() strace printed, or None (no strace, or no connect line)."""
    for line in syscalls or ():
        m = CONNECT.match(line)
        if m:
            return f"{m.group(2)}:{m.group(1)}"
    return None


def read_part(rawdir, part):
    c = t.read_kv(os.path.join(rawdir, f"{part}-client.txt"))
    result = c.str("result")
    syscalls = t.read_lines(os.path.join(rawdir, f"{part}.strace"), optional=True)
    return {"result": result, "errno": c.str("errno") if result == "error" else None,
            "elapsed_s": c.float("elapsed_s", 0, 86400),
            "timeout_ms": c.int("timeout_ms", default=None),
            "dest": strace_dest(syscalls), "syscalls": syscalls,
            # where the packets and the client's own moments meet (not in the JSON)
            "_at": {"start_ns": c.int("start_ns"), "end_ns": c.int("end_ns", c.int("start_ns")),
                    "closed_ns": c.int("closed_ns", c.int("start_ns"), default=None),
                    "local": c.str("local", None)}}


# the connections to the listener, as the capture (on the listener's port) sees them
CAPTURED = (("block", "block: blocking connect(), held, then the client killed (SIGTERM)"),
            ("cc", "cc: create_connection-style, close() once connected"))


def conn_packets(cap, part, r, name):
    """One client's segments, beside the moments its own clock saw, as ladder rows."""
    at = r["_at"]
    segs = pkt.conn_packets(cap, at["local"]) if at["local"] else []
    said = "connect() returned" if part == "block" else "poll() and SO_ERROR said"
    notes = [(at["end_ns"], f"client: {said} {r['errno'] or r['result']}")]
    if at["closed_ns"] is not None:
        notes.append((at["closed_ns"], "client: close() returned"))
    return {"segments": len(segs), "flags": [p["flags"] for p in segs],
            "ladder": [{"sep": name}] + pkt.ladder_rows(segs, at["start_ns"], notes)}


def capture_part(outdir, rawdir, parts, listener, obj, made):
    """The packets of the two connections to the listener (.txt lines, the ladder svg), or a
    line saying there was no capture (a raw directory collected before the capture probe)."""
    cap = pkt.read_capture(os.path.join(rawdir, "capture.txt"), optional=True)
    obj["capture"] = None
    for r in obj["parts"].values():
        r["packets"] = None
    if cap is None:
        return [f"packets: not captured (no raw/{UNIT}/capture.txt: collected before the capture "
                "probe)"]
    lines = ["packets (t in ms from each client's connect(); the capture filters the "
             "listener's port, so the refused connect() is not in it):"]
    lines += pkt.capture_notes(cap, f"raw/{UNIT}/capture.txt (.pcap beside it)")
    rows = []
    for part, name in CAPTURED:
        p = conn_packets(cap, part, parts[part], name)
        obj["parts"][part]["packets"] = p
        rows += p["ladder"]
    dest = f"{listener['addr']}:{listener['port']}"
    obj["capture"] = pkt.capture_json(cap)
    obj["capture"]["ladder_svg"], said = pkt.ladder_svg(
        outdir, f"{NAME}-ladder.svg", rows, f"client {listener['addr']}", f"server {dest}", made)
    return lines + ["", f"ladder (client {listener['addr']}:<port>, server {dest}; the svg "
                    "beside this file):"] + pkt.ladder_text(rows, notes_title="the client") + [said]


def titles(parts, listener):
    """Each part's heading, from what the raw files say: the listener's ready line, the
    destination strace printed, the poll() timeout when the client printed it."""
    lst = f"{listener['addr']}:{listener['port']}"
    cc = parts["cc"]
    poll = f"poll() {cc['timeout_ms']} ms" if cc["timeout_ms"] is not None else "poll() with a timeout"
    refused = parts["refused"]["dest"]
    return {
        "block": f"blocking connect() to {parts['block']['dest'] or lst}, a listener (backlog "
                 f"{listener['backlog']}) that never accepts",
        "refused": (f"blocking connect() to {refused}, where nothing listens" if refused else
                    "blocking connect() to a port where nothing listens"),
        "cc": f"create_connection-style connect() to {cc['dest'] or lst}: non-blocking, {poll}, "
              "SO_ERROR",
    }


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    vpath = os.path.join(rawdir, "strace-version.txt")
    version = t.read_lines(vpath)
    if not version or not version[0].strip():
        raise t.RawError(f"{vpath}: empty (no strace version, nor `strace: not available`)")
    strace = version[0]
    listener = t.listener_ready(os.path.join(rawdir, "listener.txt"), "never")
    listener.int("backlog")
    parts = {p: read_part(rawdir, p) for p in PARTS}
    socks = [t.socket_row(e) for e in t.read_snapshot(os.path.join(rawdir, "block-sockets.txt"))]
    if not socks:
        raise t.RawError(f"{rawdir}/block-sockets.txt: no socket (sockwatch -1 saw none)")
    heads = titles(parts, listener)
    lines = [f"{NAME}: the system calls of connect(), with the time spent in each (strace -T)",
             t.header(kernel, t.collected_at(rawdir), tool=strace), t.where(rawdir), ""]
    for p in PARTS:
        r = parts[p]
        lines.append(f"== {heads[p]}")
        if r["syscalls"] is None:
            lines.append("  (strace not available: the client ran without it)")
        else:
            lines += ["  " + s for s in r["syscalls"]]
        lines.append(f"result: {r['errno'] or ('success' if r['result'] == 'ok' else r['result'])}"
                     f" after {r['elapsed_s'] * 1e6:.0f} us "
                     "(the client's own clock_gettime, around connect() or connect()+poll())")
        if p == "block":
            lines += ["", "sockets while the client held its connection (sockwatch -1, sock_diag):",
                      f"  {'State':<8} {'Recv-Q':>6} {'Send-Q':>6}  {'Local':<21} {'Peer':<21} inode"]
            for s in socks:
                lines.append(f"  {s['state']:<8} {s['rq']:>6} {s['wq']:>6}  {s['local']:<21} "
                             f"{s['peer']:<21} {s['inode']}")
        lines.append("")
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": None, "strace": strace,
           "port": listener.int("port", 1, 65535), "addr": listener["addr"],
           "backlog": listener.int("backlog")}
    obj.update({k: parts["block"][k] for k in ("result", "errno", "elapsed_s")})
    obj["parts"] = {p: {k: v for k, v in r.items() if k not in ("timeout_ms", "_at")}
                    for p, r in parts.items()}
    obj["sockets"] = socks
    made = {}
    try:
        lines += capture_part(outdir, rawdir, parts, listener, obj, made)
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        pkt.drop_made(made)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
