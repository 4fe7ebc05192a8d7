#!/usr/bin/python3
"""p01-synretry report: the SYN retransmissions of a blocking connect() to a full listener, as
sockwatch saw them, next to the schedule the kernel documents for the sysctls that were read."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402

NAME = "p01-synretry"
# titles: the first unit sets TCP_SYNCNT (p01-synretry.sh's TL_SYNCNT), the value read back
UNITS = (("p01-synretry", "TCP_SYNCNT {syncnt}"),
         ("p01-synretry-default", "system default TCP_SYNCNT"))
SYSCTLS = ("tcp_syn_retries", "tcp_syn_linear_timeouts")
# the counters p01-synretry.sh keeps (counters -k): the page reads them from the block
COUNTERS = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans",
            "TcpAttemptFails", "TcpActiveOpens", "TcpOutSegs", "TcpRetransSegs")


def observed(rawdir, start_ns, end_ns):
    """sockwatch events of the SYN-SENT socket, times relative to the client's connect(), and
    the socket's local address:port."""
    path = os.path.join(rawdir, "sockwatch.txt")
    lines = t.read_sockwatch(path, end_ns)
    events = [t.sockwatch_event(ev, start_ns) for ev in lines]
    if not events or events[0]["event"] != "new":
        raise t.RawError(f"{path}: no `event=new` line for the SYN-SENT socket")
    return events, lines[0].str("local"), t.sockwatch_interval_us(path), \
        t.sockwatch_timer_led_ms(path)


def one_run(rawdir, unit):
    cpath = os.path.join(rawdir, "client.txt")
    client = t.read_kv(cpath)
    _, sysctls = t.read_machine(os.path.join(rawdir, "machine.txt"))
    listener = t.listener_ready(os.path.join(rawdir, "listener.txt"), "full")
    start_ns = client.int("start_ns")
    syncnt = client.int("syncnt", 1, t.MAX_TCP_SYNCNT)
    result = client.str("result")
    errno = client.str("errno") if result == "error" else None
    elapsed = client.float("elapsed_s", 0, 86400)
    end_ns = client.int("end_ns", start_ns)
    events, local, watch_us, led_ms = observed(rawdir, start_ns, end_ns)
    linear = t.sysctl_int(sysctls, "net.ipv4.tcp_syn_linear_timeouts",
                          os.path.join(rawdir, "machine.txt"), 0, t.MAX_TCP_SYNCNT)
    exp_times, exp_end = t.expected_syn_schedule(syncnt, linear)
    r = {
        "result": result,
        "errno": errno,
        "elapsed_s": elapsed,
        "syncnt": syncnt,
        "port": listener.int("port", 1, 65535),
        "addr": listener.str("addr"),
        "counters": t.read_counters_delta(os.path.join(rawdir, "counters-delta.txt"), COUNTERS),
        "sysctls": t.sysctls_json(sysctls, SYSCTLS),
        "events": events,
        "sockwatch_interval_us": watch_us,
        **({"sockwatch_timer_led_ms": led_ms} if led_ms else {}),
        "retransmits": t.retransmits(events),
        "expected": exp_times,
        "expected_elapsed_s": exp_end,
        "collected_at": t.collected_at(rawdir),
        "load_average": None,
    }
    r["packets"], r["packet_lines"] = packets(rawdir, unit, r, local, start_ns, end_ns)
    return r


def counted_syns(counters):
    """TcpOutSegs + TcpRetransSegs: in this namespace only the client's socket sends (the full
    listener drops every SYN without an answer), so these are its SYNs; None if not kept."""
    a, b = counters.get("TcpOutSegs"), counters.get("TcpRetransSegs")
    return a + b if isinstance(a, int) and isinstance(b, int) else None


def packets(rawdir, unit, r, local, start_ns, end_ns):
    """The capture beside sockwatch and the counters → (JSON object, lines for the .txt), or
    (None, a line saying so) for a raw directory collected before the capture probe."""
    cap = pkt.read_capture(os.path.join(rawdir, "capture.txt"), optional=True)
    if cap is None:
        return None, [f"packets: not captured (no raw/{unit}/capture.txt: collected before "
                      "the capture probe)"]
    segs = pkt.conn_packets(cap, local)
    syns = pkt.syns(segs)
    check = pkt.syn_check(syns, r["events"], start_ns, counted_syns(r["counters"]))
    seg_notes = {}
    if not check["disagree"]:       # which counter counts each SYN: only when the totals agree
        seg_notes = {segs.index(p): "TcpRetransSegs TCPSynRetrans" if k else "TcpOutSegs"
                     for k, p in enumerate(syns)}
    notes = pkt.sockwatch_notes(r["events"], start_ns)
    notes.append((end_ns, f"client: connect() returned {r['errno'] or r['result']}"))
    rows = pkt.ladder_rows(segs, start_ns, notes, seg_notes)
    obj = {"capture": pkt.capture_json(cap), **check, "ladder": rows}
    lines = (["packets (t in ms from the start of connect(), CLOCK_MONOTONIC like sockwatch):"] +
             pkt.capture_notes(cap, f"raw/{unit}/capture.txt (.pcap beside it)") +
             pkt.syn_lines(check))
    return obj, lines


def waits(times):
    """The waits between sends, as ip-sysctl.rst lists them (1, 1, 1, … 2, 4, …)."""
    prev, out = 0.0, []
    for x in times:
        out.append(x - prev)
        prev = x
    return out


def fmt_s(x):
    return f"{x:g}"


def text_run(title, r):
    s = r["sysctls"]
    lines = [f"== {title}: getsockopt(TCP_SYNCNT) = {r['syncnt']}",
             "sysctls: " + "  ".join(f"{k.rsplit('.', 1)[-1]}={'absent' if v is None else v}"
                                     for k, v in s.items()),
             "", "sockwatch (t_s from the start of connect(); expires_ms = idiag_expires"
             + (t.sampling_text(r["sockwatch_interval_us"], "; ",
                                r.get("sockwatch_timer_led_ms", 0)) or "") + "):",
             f"  {'t_s':>9}  {'event':<6} {'state':<9} {'retrans':>7} {'timer':<5} "
             f"{'expires_ms':>10}  {'expected_t_s':>12}"]
    exp = [0.0] + r["expected"]
    last = None
    for e in r["events"]:
        k = e["retrans"]
        sent = e["event"] == "new" or (e["event"] == "change" and last is not None and k > last)
        want = fmt_s(exp[k]) if sent and k < len(exp) else ""   # only lines where a SYN went out
        last = k
        lines.append(f"  {e['t_s']:9.3f}  {e['event']:<6} {e['state']:<9} {k:>7} "
                     f"{e['timer']:<5} {e['expires_ms']:>10}  {want:>12}")
    seen = [x["t_s"] for x in r["retransmits"]]
    outcome = r["errno"] or r["result"]
    lines += ["",
              f"connect(): {outcome} after {r['elapsed_s']:.3f} s"
              f" (expected {fmt_s(r['expected_elapsed_s'])} s)",
              f"SYN retransmissions: {len(seen)} observed, {len(r['expected'])} expected",
              "  waits expected (s):  " + " ".join(
                  fmt_s(w) for w in waits(r["expected"] + [r["expected_elapsed_s"]]))
              + f", then give up at {fmt_s(r['expected_elapsed_s'])} s",
              "  waits observed (s):  " + " ".join(
                  f"{w:.3f}" for w in waits(seen + [r["elapsed_s"]]))
              + f", then {outcome} at {r['elapsed_s']:.3f} s",
              "", "counter deltas (this namespace only):"]
    lines += t.counters_block(r["counters"])
    lines += [""] + r["packet_lines"]
    if r["packets"] is not None:
        lines += ["", f"ladder (client {r['addr']}:<port>, server {r['addr']}:{r['port']}; "
                  "the svg beside this file):"]
        lines += pkt.ladder_text(r["packets"]["ladder"])
    return lines


def pictures(outdir, runs, kernel, made):
    """The ladder of each captured run (mscgen) and the SYN schedule plot (gnuplot), drawn
    into temporary files added to made ({final path: tmp}) → (lines for the .txt, the plot's
    name or None).  A picture a tool could not draw is a line saying why, never a failure."""
    said, plot_runs = [], []
    for unit, (title, r) in runs.items():
        p = r["packets"]
        if p is None:
            continue
        p["ladder_svg"], line = pkt.ladder_svg(outdir, f"{unit}-ladder.svg", p["ladder"],
                                               f"client {r['addr']}",
                                               f"server {r['addr']}:{r['port']}", made)
        said.append(f"{line} ({title})")
        plot_runs.append((title, [x["t_ms"] / 1e3 for x in p["syns"]], [0.0] + r["expected"]))
    if not plot_runs:
        return said, None
    name = f"{NAME}-syns.svg"
    tmp, why = pkt.syn_plot(plot_runs, os.path.join(outdir, name), kernel)
    if tmp is None:
        return said + [f"no SYN schedule plot: {why}"], None
    made[os.path.join(outdir, name)] = tmp
    return said + [f"SYN schedule plot: {name} (the capture's SYNs against the expected "
                   "schedule)"], name


def build(rawroot, outdir):
    titles = dict(UNITS)

    def read(rawdir, unit):
        r = one_run(rawdir, unit)
        return (titles[unit].format(syncnt=r["syncnt"]), r)
    # a failed or timed-out unit: said, never reported
    runs, partial = t.group_runs(rawroot, NAME, titles, read)
    first = t.unit_dir(rawroot, next(iter(runs)))
    kernel = t.kernel_release(first)
    main = runs.get("p01-synretry", next(iter(runs.values())))[1]
    lines = [f"{NAME}: blocking connect() to {main['addr']}:{main['port']}, a listener whose "
             "accept queue is full", t.header(kernel, None, t.where(first)), ""]
    for unit, title in UNITS:
        if unit in runs:
            lines += text_run(runs[unit][0], runs[unit][1]) + [""]
        elif unit in partial:
            lines += [f"== {title.format(syncnt='set')}: not reported: {partial[unit]} "
                      f"(partial raw output in raw/{unit}/)", ""]
        else:
            lines += [f"== {title.format(syncnt='set')}: not run (./run.sh {unit}; --quick skips it)", ""]
    made = {}
    try:
        said, plot = pictures(outdir, runs, kernel, made)
        lines += said
        for _, r in runs.values():
            r.pop("packet_lines")
        obj = {"experiment": NAME, "kernel": kernel}
        obj.update({k: v for k, v in main.items() if k != "events"})
        obj["events"] = main["events"]
        obj["default"] = runs["p01-synretry-default"][1] if "p01-synretry-default" in runs else None
        obj["syn_plot"] = plot
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        pkt.drop_made(made)

if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
