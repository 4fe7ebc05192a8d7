#!/usr/bin/python3
"""p01-connect-time report: how long connect() takes over loopback when a listener accepts, and
when nothing listens, with the counters that say what the kernel did for each batch."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-connect-time"
UNIT = "p01-connect-time"
PARTS = (("accept", 21011, "a listener that accepts and closes at once"),
         ("refused", 21012, "a port where nothing listens"))
ALWAYS = ("TcpActiveOpens", "TcpAttemptFails", "TcpOutRsts", "TcpEstabResets")
EXPLAIN = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans")
PCTS = ("min", "p10", "median", "p90", "p99", "max")


def read_part(rawdir, part):
    lines = t.read_kv_lines(os.path.join(rawdir, f"{part}-client.txt"))
    summary = next(d for d in lines if "n" in d)
    errors = {d["error"]: int(d["count"]) for d in lines if "error" in d}
    deltas = t.read_counters_delta(os.path.join(rawdir, f"{part}-counters-delta.txt"))
    load = t.read_lines(os.path.join(rawdir, f"{part}-loadavg.txt"))[0].split()[:3]
    return {
        "n": int(summary["n"]), "ok": int(summary["ok"]), "errors": errors,
        "errno": max(errors, key=errors.get) if errors else None,
        "us": {p: float(summary[p + "_us"]) for p in PCTS},
        "max_index": int(summary["max_index"]), "over_1ms": int(summary["over_1ms"]),
        "counters": deltas, "loadavg": " ".join(load), "elapsed_s": None,
    }


def outlier_note(p, nproc, vm):
    """What the counters say about calls over 1 ms: the kernel's own account, not a guess."""
    if p["over_1ms"] == 0:
        return []
    c = p["counters"]
    drops = sum(c.get(k) or 0 for k in ("TcpExtListenOverflows", "TcpExtListenDrops")
                if not isinstance(c.get(k), dict))
    retx = c.get("TcpExtTCPSynRetrans") or 0
    head = (f"  {p['over_1ms']} call(s) took over 1 ms (max {p['us']['max'] / 1000:.1f} ms, "
            f"call #{p['max_index']}).")
    if drops or retx:
        return [head, f"  The counters explain it: ListenOverflows/ListenDrops +{drops}, "
                f"TCPSynRetrans +{retx}: the accept queue was full, the kernel dropped a SYN, and "
                "the client sent it again after the initial RTO (1 s): that connect() waited "
                "for the retransmission."]
    why = ("the guest's CPU is emulated (QEMU) and the guest's scheduler ran something else"
           if vm else f"the thread was not running ({nproc} CPU(s) shared with the other "
           "experiments)")
    return [head, "  The counters show no dropped or retransmitted SYN (ListenOverflows, "
            f"ListenDrops and TCPSynRetrans +0): the time was lost outside TCP, e.g. {why}."]


def text_part(part, port, what, p, nproc, vm):
    us = p["us"]
    lines = [f"== {p['n']} connects to 127.0.0.1:{port}, {what} (load average {p['loadavg']})",
             "connect(): n={} ".format(p["n"]) + " ".join(
                 f"{k}={us[k]:.1f}" for k in PCTS) + " us",
             f"  succeeded {p['ok']}"]
    for name, count in sorted(p["errors"].items()):
        lines.append(f"  {count} x {name}")
    shown = {k: p["counters"].get(k) for k in ALWAYS}
    shown.update({k: v for k, v in p["counters"].items() if k in EXPLAIN and v})
    lines += ["counter deltas (this namespace only):"] + t.counters_block(shown)
    if part == "accept" and p["counters"].get("TcpOutRsts"):
        lines.append("  TcpOutRsts: resets from the listener to stray ACKs that reached it after "
                     "their connection closed (docs/p01-connect-time.md)")
    return lines + outlier_note(p, nproc, vm)


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    nproc = t.read_machine(os.path.join(rawdir, "machine.txt"))[0].get("nproc", "?")
    parts = {part: read_part(rawdir, part) for part, _, _ in PARTS}
    lines = [f"{NAME}: the time of connect() alone (clock_gettime around the call), over loopback",
             f"kernel {kernel}; collected {t.collected_at(rawdir)}; percentiles are nearest-rank",
             t.where(rawdir), ""]
    for part, port, what in PARTS:
        lines += text_part(part, port, what, parts[part], nproc, t.under_vm(rawdir)) + [""]
    obj = {"experiment": NAME, "kernel": kernel}
    obj.update(parts["accept"])
    obj["parts"] = parts
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
