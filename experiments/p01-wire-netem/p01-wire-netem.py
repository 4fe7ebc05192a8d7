#!/usr/bin/python3
"""p01-wire-netem report: connect() across the wire with netem delaying each end's veth, so
connect() should take one round trip.  On a kernel without sch_netem the unit was skipped
(raw/p01-wire-netem/status.txt "skipped: WHY"): run.sh runs no report for a skipped unit,
and this report, run by hand on such a directory, says "not run on this kernel: WHY"."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p01-wire-netem"
COUNTERS = ("TcpActiveOpens", "TcpOutSegs", "TcpRetransSegs", "TcpExtTCPSynRetrans")


def skipped(rawroot):
    """The reason the unit was skipped (status.txt "skipped: WHY"), or None."""
    d = os.path.join(rawroot, NAME)
    if not t.exists(d):
        return None
    why = t.unit_status(d)
    return why[len("skipped: "):] if why is not None and why.startswith("skipped: ") else None


def qdisc_lines(wire):
    """The `tc -s qdisc` lines of both sides in wire.txt (what netem was, as the kernel says)."""
    return [f"  {side:<6} {q}" for side in ("client", "server") for q in wire[side]["qdiscs"]]


def build(rawroot, outdir):
    why = skipped(rawroot)
    if why is not None:
        lines = [f"{NAME}: not run on this kernel: {why}",
                 f"(raw/{NAME}/status.txt; the unit runs where the kernel has sch_netem: "
                 "Debian's kernels ship sch_netem.ko)"]
        rawdir = os.path.join(rawroot, NAME)
        # the unit ran machine before it tried netem: which kernel skipped it
        t.write_outputs(outdir, NAME, lines, {
            "experiment": NAME, "kernel": t.kernel_release(rawdir),
            "collected_at": t.collected_at(rawdir), "load_average": None,
            "counters": None, "result": None, "errno": None, "elapsed_s": None,
            "skipped": why})
        return
    rawdir = t.unit_dir(rawroot, NAME)
    kernel = t.kernel_release(rawdir)
    delay = t.num(t.read_lines(os.path.join(rawdir, "delay-ms.txt"))[0].strip(),
                  os.path.join(rawdir, "delay-ms.txt"), 0, 10000)
    c = t.read_kv(os.path.join(rawdir, "client.txt"))
    start, local, result = c.int("start_ns"), c.str("local"), c.str("result")
    elapsed = c.float("elapsed_s", 0, 86400)
    errno = c.str("errno") if result == "error" else None
    cap = pkt.read_capture(os.path.join(rawdir, "capture.txt"))
    segs = pkt.conn_packets(cap, local)
    syn, synack, _ = tw.handshake(segs)
    if syn is None or synack is None:
        raise t.RawError(f"{os.path.join(rawdir, 'capture.txt')}: no SYN and SYN-ACK of {local}")
    socks = tw.read_ss(os.path.join(rawdir, "ss-client.txt"))
    rtt = socks[0].get("rtt_ms")
    counters = t.read_counters_delta(os.path.join(rawdir, "counters-delta.txt"), COUNTERS)
    syn_synack_ms = round((synack["t_ns"] - syn["t_ns"]) / 1e6, 3)
    lines = [f"{NAME}: blocking connect() across the wire, netem delay {delay} ms on each end",
             t.header(kernel, t.collected_at(rawdir), t.where(rawdir).replace("loopback", "a veth pair")), "",
             "qdiscs (tc -s qdisc; raw/p01-wire-netem/wire.txt):"] + qdisc_lines(tw.read_wire(rawdir)) + [
             "",
             f"connect(): {errno or result} after {elapsed * 1e3:.3f} ms "
             f"(the delays add up to {2 * delay} ms per round trip)",
             f"SYN to SYN-ACK at the client's end of the veth: {syn_synack_ms:.3f} ms",
             f"ss -tin rtt (tcpi_rtt, the first RTT sample): "
             f"{'not shown' if rtt is None else f'{rtt} ms'}", ""]
    lines += pkt.capture_notes(cap, f"raw/{NAME}/capture.txt, the client's end")
    rows = pkt.ladder_rows(segs, start, [(c.int("end_ns", start),
                                          f"client: connect() returned {errno or result}")])
    lines += pkt.ladder_text(rows, client=f"client {local}", server=tw.SERVER_COL)
    lines += ["", "counter deltas, client:"] + t.counters_block(counters)
    # the capture is on the client's end; netem sits on its egress qdisc, before the tap, so
    # the segments it delays reach the capture late but all reach it: what the client sent
    # beside its counters (the JSON key only when they differ)
    dis = pkt.sent_checks(segs, "c>s", counters, "client")
    lines += ["DISAGREE: " + d for d in dis]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": counters, "result": result, "errno": errno,
           "elapsed_s": elapsed, "delay_ms": delay, "syn_synack_ms": syn_synack_ms,
           "rtt_ms": rtt, "skipped": None, "capture": pkt.capture_json(cap), "ladder": rows,
           **({"disagree": dis} if dis else {})}
    tw.write_with_ladder(outdir, NAME, lines + [""], obj, rows, f"client {local}", tw.SERVER_COL)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
