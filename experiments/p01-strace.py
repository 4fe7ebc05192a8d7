#!/usr/bin/python3
"""p01-strace report: the system calls of three connects (strace -T), and the three sockets a
connect() to a never-accepting listener leaves: LISTEN with Recv-Q 1, and both ESTAB ends."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-strace"
UNIT = "p01-strace"
PARTS = (("block", "blocking connect() to 127.0.0.1:21010, a listener (backlog 8) that never accepts"),
         ("refused", "blocking connect() to 127.0.0.1:21012, where nothing listens"),
         ("cc", "create_connection-style connect() to 127.0.0.1:21010: non-blocking, poll() 2000 ms, SO_ERROR"))


def read_part(rawdir, part):
    c = t.read_kv(os.path.join(rawdir, f"{part}-client.txt"))
    trace = os.path.join(rawdir, f"{part}.strace")
    return {"result": c["result"], "errno": c.get("errno"), "elapsed_s": float(c["elapsed_s"]),
            "syscalls": t.read_lines(trace) if os.path.exists(trace) else None}


def sockets(rawdir):
    return [{"state": e["state"], "rq": int(e["rq"]), "wq": int(e["wq"]),
             "local": e["local"], "peer": e["peer"], "inode": int(e["inode"])}
            for e in t.read_kv_lines(os.path.join(rawdir, "block-sockets.txt"), "t_s=")]


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    strace = t.read_lines(os.path.join(rawdir, "strace-version.txt"))[0]
    parts = {p: read_part(rawdir, p) for p, _ in PARTS}
    socks = sockets(rawdir)
    lines = [f"{NAME}: the system calls of connect(), with the time spent in each (strace -T)",
             f"kernel {kernel}; {strace}; collected {t.collected_at(rawdir)}", t.where(rawdir), ""]
    for p, what in PARTS:
        r = parts[p]
        lines.append(f"== {what}")
        if r["syscalls"] is None:
            lines.append("  (strace not available: the client ran without it)")
        else:
            lines += ["  " + s for s in r["syscalls"]]
        lines.append(f"result: {r['errno'] or 'success'} after {r['elapsed_s'] * 1e6:.0f} us "
                     "(the client's own clock_gettime, around connect() or connect()+poll())")
        if p == "block":
            lines += ["", "sockets while the client held its connection (sockwatch -1, sock_diag):",
                      f"  {'State':<8} {'Recv-Q':>6} {'Send-Q':>6}  {'Local':<21} {'Peer':<21} inode"]
            for s in socks:
                lines.append(f"  {s['state']:<8} {s['rq']:>6} {s['wq']:>6}  {s['local']:<21} "
                             f"{s['peer']:<21} {s['inode']}")
        lines.append("")
    obj = {"experiment": NAME, "kernel": kernel, "counters": {}, "strace": strace}
    obj.update({k: parts["block"][k] for k in ("errno", "elapsed_s")})
    obj["parts"] = parts
    obj["sockets"] = socks
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
