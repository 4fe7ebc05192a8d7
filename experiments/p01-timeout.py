#!/usr/bin/python3
"""p01-timeout report: a timeout on connect() lives in the program, the SYN retransmissions in
the kernel.  The create_connection-style client closes on timeout and leaves nothing; the
settimeout-style client does not close, and its socket goes on retransmitting until close()."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-timeout"
UNIT = "p01-timeout"


def rel(ns, start_ns):
    return round((int(ns) - start_ns) / 1e9, 6)


def read_client(rawdir, prefix):
    c = t.read_kv(os.path.join(rawdir, f"{prefix}-client.txt"))
    start = int(c["start_ns"])
    events = [{"t_s": rel(e["t_ns"], start), "event": e["event"], "state": e["state"],
               "retrans": int(e["retrans"]), "timer": e["timer"],
               "expires_ms": int(e["expires_ms"])}
              for e in t.read_kv_lines(os.path.join(rawdir, f"{prefix}-sockwatch.txt"), "t_s=")]
    out = {"result": c["result"], "errno": c.get("errno"),
           "elapsed_s": float(c["elapsed_s"]),
           "closed_s": rel(c["closed_ns"], start) if "closed_ns" in c else None,
           "events": events,
           "retransmits": [e for e in events if e["event"] == "change" and e["retrans"] > 0]}
    return out   # a timeout has no errno: poll() returned 0 and nothing failed


def snapshot(rawdir, name):
    return [{"state": e["state"], "timer": e["timer"], "expires_ms": int(e["expires_ms"]),
             "retrans": int(e["retrans"]), "rq": int(e["rq"]), "wq": int(e["wq"]),
             "local": e["local"], "peer": e["peer"]}
            for e in t.read_kv_lines(os.path.join(rawdir, name), "t_s=")]


def fmt_snap(title, socks):
    lines = [title]
    if not socks:
        return lines + ["  (no SYN-SENT socket to 127.0.0.1:21013)"]
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


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    cc, keep = read_client(rawdir, "cc"), read_client(rawdir, "keep")
    cc["after_close"] = snapshot(rawdir, "cc-after.txt")
    keep["after_timeout"] = snapshot(rawdir, "keep-after-timeout.txt")
    keep["after_close"] = snapshot(rawdir, "keep-after-close.txt")
    after_timeout = [e for e in keep["retransmits"] if e["t_s"] > keep["elapsed_s"]]
    lines = [f"{NAME}: a timeout on connect() to a full listener (127.0.0.1:21013)",
             f"kernel {kernel}; collected {t.collected_at(rawdir)}; t_s from the start of connect()",
             t.where(rawdir), "", "== create_connection-style: non-blocking connect, poll() 1500 ms, close() on "
             "timeout",
             f"poll() returned 0 (timeout) after {cc['elapsed_s']:.3f} s; close() at "
             f"{cc['closed_s']:.3f} s", "sockwatch:"] + fmt_events(cc)
    lines += fmt_snap("sockets after close():", cc["after_close"])
    lines += ["", "== settimeout-style: non-blocking connect, poll() 1500 ms, NO close() on timeout",
              f"poll() returned 0 (timeout) after {keep['elapsed_s']:.3f} s; the program kept the "
              f"socket and called close() at {keep['closed_s']:.3f} s", "sockwatch:"] + fmt_events(keep)
    lines += fmt_snap("sockets right after the timeout:", keep["after_timeout"])
    lines += fmt_snap("sockets after close():", keep["after_close"])
    times = ", ".join(f"{e['t_s']:.3f}" for e in after_timeout) or "-"
    lines += ["", f"SYN retransmissions after the program's timeout: {len(after_timeout)} "
              f"(at {times} s): the kernel kept trying until close()."]
    obj = {"experiment": NAME, "kernel": kernel, "counters": {}}
    obj.update({k: cc[k] for k in ("errno", "elapsed_s")})
    obj["cc"] = cc
    obj["keep"] = keep
    obj["keep_retransmits_after_timeout"] = len(after_timeout)
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
