#!/usr/bin/python3
"""p01-timeout report: a timeout on connect() lives in the program, the SYN retransmissions in
the kernel.  The create_connection-style client closes on timeout and leaves nothing; the
settimeout-style client does not close, and its socket goes on retransmitting until close()."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-timeout"
UNIT = "p01-timeout"


def read_client(rawdir, prefix):
    path = os.path.join(rawdir, f"{prefix}-client.txt")
    c = t.read_kv(path)
    start = c.int("start_ns")
    closed = c.int("closed_ns", start)
    events = [t.sockwatch_event(e, start)
              for e in t.read_sockwatch(os.path.join(rawdir, f"{prefix}-sockwatch.txt"), closed)]
    result = c.str("result")
    # errno names an error the kernel returned; a timeout is the program's own (poll() gave 0)
    return {"result": result, "errno": c.str("errno") if result == "error" else None,
            "elapsed_s": c.float("elapsed_s", 0, 86400),
            "closed_s": round((closed - start) / 1e9, 6),
            "events": events, "retransmits": t.retransmits(events)}


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
    times = ", ".join(f"{e['t_s']:.3f}" for e in after_timeout) or "-"
    lines += ["", f"SYN retransmissions after the program's timeout: {len(after_timeout)} "
              f"(at {times} s): the kernel kept trying until close()."]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": None,
           "result": cc["result"], "errno": cc["errno"], "elapsed_s": cc["elapsed_s"],
           "port": listener.int("port", 1, 65535), "addr": listener["addr"],
           "cc": cc, "keep": keep, "keep_retransmits_after_timeout": len(after_timeout)}
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
