#!/usr/bin/python3
"""p01-timeout report: a timeout on connect() lives in the program, the SYN retransmissions in
the kernel.  The create_connection-style client closes on timeout and leaves nothing; the
settimeout-style client does not close, and its socket goes on retransmitting until close()."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402

NAME = "p01-timeout"
UNIT = "p01-timeout"
CC, KEEP = "cc: create_connection-style", "keep: settimeout-style"


def read_client(rawdir, prefix):
    path = os.path.join(rawdir, f"{prefix}-client.txt")
    c = t.read_kv(path)
    start = c.int("start_ns")
    closed = c.int("closed_ns", start)
    lines = t.read_sockwatch(os.path.join(rawdir, f"{prefix}-sockwatch.txt"), closed)
    events = [t.sockwatch_event(e, start) for e in lines]
    result = c.str("result")
    # errno names an error the kernel returned; a timeout is the program's own (poll() gave 0)
    out = {"result": result, "errno": c.str("errno") if result == "error" else None,
           "elapsed_s": c.float("elapsed_s", 0, 86400),
           "closed_s": round((closed - start) / 1e9, 6),
           "events": events, "retransmits": t.retransmits(events)}
    # where the packets and the program's own moments meet (private: not in the JSON)
    out["_at"] = {"start_ns": start, "end_ns": c.int("end_ns", start), "closed_ns": closed,
                  "local": lines[0].str("local") if lines else None}
    return out


def client_packets(cap, c, at, name):
    """One client's segments beside its sockwatch events and its own calls: the SYN check,
    the SYNs after poll() timed out and the segments after close(), the ladder rows."""
    segs = pkt.conn_packets(cap, at["local"]) if at["local"] else []
    syns = pkt.syns(segs)
    check = pkt.syn_check(syns, c["events"], at["start_ns"])
    notes = pkt.sockwatch_notes(c["events"], at["start_ns"])
    notes += [(at["end_ns"], f"client: {outcome(c)}"),
              (at["closed_ns"], "client: close() returned")]
    after = [s for s in syns if s["t_ns"] > at["end_ns"]]
    return {**check, "syns_after_timeout": len(after),
            "syns_after_timeout_ms": [pkt.ms(s["t_ns"], at["start_ns"]) for s in after],
            "segments_after_close": sum(s["t_ns"] > at["closed_ns"] for s in segs),
            "ladder": [{"sep": name}] + pkt.ladder_rows(segs, at["start_ns"], notes)}


def packet_lines(c, title):
    p = c["packets"]
    times = ", ".join(f"{x:.3f}" for x in p["syns_after_timeout_ms"])
    times = f" (at {times} ms)" if times else ""
    return [f"{title}:"] + pkt.syn_lines(p) + [
        f"  in the capture: {p['syns_after_timeout']} SYNs after poll() timed out{times}, "
        f"{p['segments_after_close']} segments after close()"]


def snapshot(rawdir, name):
    return [t.socket_row(e) for e in t.read_snapshot(os.path.join(rawdir, name))]


def fmt_snap(title, socks, dest):
    lines = [title]
    if not socks:
        return lines + [f"  (no SYN-SENT socket to {dest})"]
    for s in socks:
        lines.append(f"  {s['state']:<9} {s['local']} -> {s['peer']}  timer={s['timer']} "
                     f"expires_ms={s['expires_ms']} retrans={s['retrans']} "
                     f"Recv-Q={s['rq']} Send-Q={s['wq']}")
    return lines


def fmt_events(c):
    lines = [f"  {'t_s':>8}  {'event':<6} {'state':<9} {'retrans':>7} {'timer':<5} {'expires_ms':>10}"]
    for e in c["events"]:
        lines.append(f"  {e['t_s']:8.3f}  {e['event']:<6} {e['state']:<9} {e['retrans']:>7} "
                     f"{e['timer']:<5} {e['expires_ms']:>10}")
    return lines


def outcome(c):
    """What poll() said, in the client's words: "returned 0 (timeout)" or the error."""
    if c["result"] == "timeout":
        return "poll() returned 0 (timeout)"
    return f"connect() ended: {c['errno'] or c['result']}"


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    listener = t.listener_ready(os.path.join(rawdir, "listener.txt"), "full")
    dest = f"{listener['addr']}:{listener['port']}"
    cc, keep = read_client(rawdir, "cc"), read_client(rawdir, "keep")
    cc["after_close"] = snapshot(rawdir, "cc-after.txt")
    keep["after_timeout"] = snapshot(rawdir, "keep-after-timeout.txt")
    keep["after_close"] = snapshot(rawdir, "keep-after-close.txt")
    after_timeout = [e for e in keep["retransmits"] if e["t_s"] > keep["elapsed_s"]]
    lines = [f"{NAME}: a timeout on connect() to a full listener ({dest})",
             t.header(kernel, t.collected_at(rawdir), "t_s from the start of connect()"),
             t.where(rawdir), "",
             "== create_connection-style: non-blocking connect, poll() with a timeout, close() on "
             "timeout",
             f"{outcome(cc)} after {cc['elapsed_s']:.3f} s; close() at "
             f"{cc['closed_s']:.3f} s", "sockwatch:"] + fmt_events(cc)
    lines += fmt_snap("sockets after close():", cc["after_close"], dest)
    lines += ["", "== settimeout-style: non-blocking connect, poll() with a timeout, NO close() on "
              "timeout",
              f"{outcome(keep)} after {keep['elapsed_s']:.3f} s; the program kept the "
              f"socket and called close() at {keep['closed_s']:.3f} s", "sockwatch:"] + fmt_events(keep)
    lines += fmt_snap("sockets right after the timeout:", keep["after_timeout"], dest)
    lines += fmt_snap("sockets after close():", keep["after_close"], dest)
    times = ", ".join(f"{e['t_s']:.3f}" for e in after_timeout)
    lines += ["", f"SYN retransmissions after the program's timeout: {len(after_timeout)} "
              f"(at {times} s): the kernel kept trying until close()." if after_timeout else
              "SYN retransmissions after the program's timeout: 0: close() came before the "
              "kernel's next SYN was due."]
    cap = pkt.read_capture(os.path.join(rawdir, "capture.txt"), optional=True)
    for c, name in ((cc, CC), (keep, KEEP)):
        at = c.pop("_at")
        c["packets"] = None if cap is None else client_packets(cap, c, at, name)
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": None,
           "result": cc["result"], "errno": cc["errno"], "elapsed_s": cc["elapsed_s"],
           "port": listener.int("port", 1, 65535), "addr": listener["addr"],
           "cc": cc, "keep": keep, "keep_retransmits_after_timeout": len(after_timeout),
           "capture": None}
    made = {}
    try:
        lines += [""] + capture_part(outdir, cap, cc, keep, dest, obj, made)
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        pkt.drop_made(made)


def capture_part(outdir, cap, cc, keep, dest, obj, made):
    """The packets of both clients, their ladder (.txt and svg), or a line saying there was no
    capture (a raw directory collected before the capture probe)."""
    if cap is None:
        return [f"packets: not captured (no raw/{UNIT}/capture.txt: collected before the capture "
                "probe)"]
    lines = ["packets (t in ms from each client's connect(), CLOCK_MONOTONIC like sockwatch):"]
    lines += pkt.capture_notes(cap, f"raw/{UNIT}/capture.txt (.pcap beside it)")
    rows = []
    for c, name in ((cc, CC), (keep, KEEP)):
        rows += c["packets"]["ladder"]
        lines += packet_lines(c, name)
    obj["capture"] = pkt.capture_json(cap)
    addr = dest.rsplit(":", 1)[0]
    obj["capture"]["ladder_svg"], said = pkt.ladder_svg(outdir, f"{NAME}-ladder.svg", rows,
                                                        f"client {addr}", f"server {dest}", made)
    return lines + ["", f"ladder (client {addr}:<port>, server {dest}; the svg beside this "
                    "file):"] + pkt.ladder_text(rows) + [said]


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
