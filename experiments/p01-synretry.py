#!/usr/bin/python3
"""p01-synretry report: the SYN retransmissions of a blocking connect() to a full listener, as
sockwatch saw them, next to the schedule the kernel documents for the sysctls that were read."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-synretry"
# titles: the first unit sets TCP_SYNCNT (p01-synretry.sh's TL_SYNCNT), the value read back
UNITS = (("p01-synretry", "TCP_SYNCNT {syncnt}"),
         ("p01-synretry-default", "system default TCP_SYNCNT"))
SYSCTLS = ("tcp_syn_retries", "tcp_syn_linear_timeouts")
# the counters p01-synretry.sh keeps (counters -k): the page reads them from the block
COUNTERS = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans",
            "TcpAttemptFails", "TcpActiveOpens")


def observed(rawdir, start_ns, end_ns):
    """sockwatch events of the SYN-SENT socket, times relative to the client's connect()."""
    path = os.path.join(rawdir, "sockwatch.txt")
    events = [t.sockwatch_event(ev, start_ns) for ev in t.read_sockwatch(path, end_ns)]
    if not events or events[0]["event"] != "new":
        raise t.RawError(f"{path}: no `event=new` line for the SYN-SENT socket")
    return events


def one_run(rawdir):
    cpath = os.path.join(rawdir, "client.txt")
    client = t.read_kv(cpath)
    _, sysctls = t.read_machine(os.path.join(rawdir, "machine.txt"))
    listener = t.listener_ready(os.path.join(rawdir, "listener.txt"), "full")
    start_ns = client.int("start_ns")
    syncnt = client.int("syncnt", 1, t.MAX_TCP_SYNCNT)
    result = client.str("result")
    errno = client.str("errno") if result == "error" else None
    elapsed = client.float("elapsed_s", 0, 86400)
    events = observed(rawdir, start_ns, client.int("end_ns", start_ns))
    linear = t.sysctl_int(sysctls, "net.ipv4.tcp_syn_linear_timeouts",
                          os.path.join(rawdir, "machine.txt"), 0, t.MAX_TCP_SYNCNT)
    exp_times, exp_end = t.expected_syn_schedule(syncnt, linear)
    return {
        "result": result,
        "errno": errno,
        "elapsed_s": elapsed,
        "syncnt": syncnt,
        "port": listener.int("port", 1, 65535),
        "addr": listener.str("addr"),
        "counters": t.read_counters_delta(os.path.join(rawdir, "counters-delta.txt"), COUNTERS),
        "sysctls": t.sysctls_json(sysctls, SYSCTLS),
        "events": events,
        "retransmits": t.retransmits(events),
        "expected": exp_times,
        "expected_elapsed_s": exp_end,
        "collected_at": t.collected_at(rawdir),
        "load_average": None,
    }


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
             "", "sockwatch (t_s from the start of connect(); expires_ms = idiag_expires):",
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
    return lines


def build(rawroot, outdir):
    runs = {}
    for unit, title in UNITS:
        d = os.path.join(rawroot, unit)
        if t.exists(d):
            r = one_run(t.unit_dir(rawroot, unit))
            runs[unit] = (title.format(syncnt=r["syncnt"]), r)
    if not runs:
        raise t.RawError(f"{rawroot}: no raw directory for {NAME}")
    first = t.unit_dir(rawroot, next(iter(runs)))
    kernel = t.kernel_release(first)
    main = runs.get("p01-synretry", next(iter(runs.values())))[1]
    lines = [f"{NAME}: blocking connect() to {main['addr']}:{main['port']}, a listener whose "
             "accept queue is full", t.header(kernel, None, t.where(first)), ""]
    for unit, title in UNITS:
        if unit in runs:
            lines += text_run(runs[unit][0], runs[unit][1]) + [""]
        else:
            lines += [f"== {title.format(syncnt='set')}: not run (./run.sh {unit}; --quick skips it)", ""]
    obj = {"experiment": NAME, "kernel": kernel}
    obj.update({k: v for k, v in main.items() if k != "events"})
    obj["events"] = main["events"]
    obj["default"] = runs["p01-synretry-default"][1] if "p01-synretry-default" in runs else None
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
