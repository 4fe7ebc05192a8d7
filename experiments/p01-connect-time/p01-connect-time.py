#!/usr/bin/python3
"""p01-connect-time report: how long connect() takes over loopback when a listener accepts, and
when nothing listens, with the counters that say what the kernel did for each batch."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402

NAME = "p01-connect-time"
UNIT = "p01-connect-time"
PARTS = (("accept", "a listener that accepts and closes at once"),
         ("refused", "a port where nothing listens"))
ALWAYS = ("TcpActiveOpens", "TcpAttemptFails", "TcpOutRsts", "TcpEstabResets")
EXPLAIN = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans")
PCTS = ("min", "p10", "median", "p90", "p99", "max")
MAX_CONNECTS = 10_000_000


def read_part(rawdir, part):
    path = os.path.join(rawdir, f"{part}-client.txt")
    lines = t.read_kv_lines(path)
    summary = next((d for d in lines if "n" in d), None)
    if summary is None:
        raise t.RawError(f"{path}: no n= line (connect_many's summary)")
    n = summary.int("n", 1, MAX_CONNECTS)
    ok = summary.int("ok", 0, n)
    errors = {}
    for d in lines:
        if "error" in d:
            errors[d.str("error")] = d.int("count", 1, n)
    if sum(errors.values()) != n - ok:
        raise t.RawError(f"{path}: error= counts add up to {sum(errors.values())}, not the "
                         f"{n - ok} failed connects")
    us = {p: summary.float(p + "_us") for p in PCTS}
    return {
        "result": "ok" if ok == n else "error",
        "errno": max(errors, key=errors.get) if errors else None,
        "elapsed_s": None,
        "n": n, "ok": ok, "errors": errors, "us": us,
        "max_index": summary.int("max_index", 0, n - 1),
        "over_1ms": summary.int("over_1ms", 0, n),
        "counters": t.read_counters_delta(os.path.join(rawdir, f"{part}-counters-delta.txt"),
                                           ALWAYS + EXPLAIN),
        "load_average": t.load_average(os.path.join(rawdir, f"{part}-loadavg.txt")),
        "port": None, "addr": None,
    }


def why_not_tcp(nproc, vm):
    return ("the guest's CPU is emulated (QEMU) and the guest's scheduler ran something else"
            if vm else f"the thread was not running ({nproc} CPU(s) shared with the other "
            "experiments)")


def outlier_note(p, nproc, vm):
    """What the counters say about calls over 1 ms: the kernel's own account, not a guess.
    Every number here is one the counter block above or the line before shows."""
    over = p["over_1ms"]
    if over == 0:
        return []
    c = p["counters"]
    head = (f"  {over} call(s) took over 1 ms (max {p['us']['max'] / 1000:.1f} ms, "
            f"call #{p['max_index']}).")
    vals = {k: c.get(k) for k in EXPLAIN}
    unknown = [k[len("TcpExt"):] for k, v in vals.items() if not isinstance(v, int)]
    if unknown:
        return [head, "  The counters cannot say why: " + ", ".join(unknown)
                + " not counted on both sides of this run (see the block above)."]
    ov, dr, rx = (vals[k] for k in EXPLAIN)
    if not dr and not rx:
        return [head, "  The counters show no dropped or retransmitted SYN (ListenOverflows, "
                f"ListenDrops and TCPSynRetrans +0): the time was lost outside TCP, e.g. "
                f"{why_not_tcp(nproc, vm)}."]
    lines = [head, f"  The counters: ListenDrops +{dr} (SYNs or handshake ACKs the listener "
             f"dropped; ListenOverflows +{ov} of them because its accept queue was full), "
             f"TCPSynRetrans +{rx}."]
    if rx == 0:
        lines.append(f"  No SYN was sent again, so none of the {over} slow call(s) waited for a "
                     "retransmission (a dropped handshake ACK does not hold up connect()): the "
                     f"time was lost outside TCP, e.g. {why_not_tcp(nproc, vm)}.")
        return lines
    m = min(rx, over)
    rest = over - m
    tail = (f"; the other {rest} lost their time outside TCP, e.g. {why_not_tcp(nproc, vm)}."
            if rest else ".")
    lines.append(f"  At most {m} of the {over} slow call(s) waited for a SYN sent again after the "
                 "initial retransmission timeout (TCPSynRetrans also counts the listener's "
                 f"SYN-ACK retransmissions, which hold up no connect()){tail}")
    return lines


def text_part(part, what, p, nproc, vm):
    us = p["us"]
    dest = f"{p['addr']}:{p['port']}, " if p["port"] is not None else ""
    lines = [f"== {p['n']} connects to {dest}{what} (load average {t.fmt_load(p['load_average'])})",
             "connect(): n={} ".format(p["n"]) + " ".join(
                 f"{k}={us[k]:.1f}" for k in PCTS) + " us",
             f"  succeeded {p['ok']}"]
    for name, count in sorted(p["errors"].items()):
        lines.append(f"  {count} x {name}")
    shown = {k: p["counters"].get(k) for k in ALWAYS + EXPLAIN}
    lines += ["counter deltas (this namespace only):"] + t.counters_block(shown)
    if part == "accept" and p["counters"].get("TcpOutRsts"):
        lines.append("  TcpOutRsts: resets from the listener to stray ACKs that reached it after "
                     "their connection closed (docs/p01-connect-time.md)")
    return lines + outlier_note(p, nproc, vm)


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    info, _ = t.read_machine(os.path.join(rawdir, "machine.txt"), need=("kernel", "nproc"))
    kernel = info["kernel"]
    nproc = info.int("nproc", 1)
    listener = t.listener_ready(os.path.join(rawdir, "listener.txt"), "close")
    parts = {part: read_part(rawdir, part) for part, _ in PARTS}
    parts["accept"]["port"] = listener.int("port", 1, 65535)
    parts["accept"]["addr"] = listener["addr"]
    lines = [f"{NAME}: the time of connect() alone (clock_gettime around the call), over loopback",
             t.header(kernel, t.collected_at(rawdir), "percentiles are nearest-rank"),
             t.where(rawdir), ""]
    for part, what in PARTS:
        lines += text_part(part, what, parts[part], nproc, t.under_vm(rawdir)) + [""]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir)}
    obj.update(parts["accept"])
    obj["parts"] = parts
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
