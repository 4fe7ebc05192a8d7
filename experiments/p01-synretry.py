#!/usr/bin/python3
"""p01-synretry report: the SYN retransmissions of a blocking connect() to a full listener, as
sockwatch saw them, next to the schedule the kernel documents for the sysctls that were read."""
import os
import sys

import tcplab as t  # noqa: E402

NAME = "p01-synretry"
UNITS = (("p01-synretry", "TCP_SYNCNT 2"), ("p01-synretry-default", "system default TCP_SYNCNT"))


def observed(rawdir, start_ns):
    """sockwatch events of the SYN-SENT socket, times relative to the client's connect()."""
    rows = []
    for ev in t.read_kv_lines(os.path.join(rawdir, "sockwatch.txt"), "t_s="):
        rows.append({
            "t_s": round((int(ev["t_ns"]) - start_ns) / 1e9, 6),
            "event": ev["event"], "state": ev["state"], "retrans": int(ev["retrans"]),
            "timer": ev["timer"], "expires_ms": int(ev["expires_ms"]),
            "backoff": int(ev["backoff"]) if "backoff" in ev else None,
            "rto_ms": int(ev["rto_ms"]) if "rto_ms" in ev else None,
        })
    return rows


def one_run(rawdir):
    client = t.read_kv(os.path.join(rawdir, "client.txt"))
    _, sysctls = t.read_machine(os.path.join(rawdir, "machine.txt"))
    start_ns = int(client["start_ns"])
    events = observed(rawdir, start_ns)
    syncnt = int(client["syncnt"])
    linear = t.sysctl_int(sysctls, "net.ipv4.tcp_syn_linear_timeouts")
    exp_times, exp_end = t.expected_syn_schedule(syncnt, linear)
    retx = [e for e in events if e["event"] == "change" and e["retrans"] > 0]
    return {
        "syncnt": syncnt,
        "errno": client.get("errno") if client.get("result") != "ok" else None,
        "elapsed_s": float(client["elapsed_s"]),
        "counters": t.read_counters_delta(os.path.join(rawdir, "counters-delta.txt")),
        "sysctls": {k: v for k, v in sysctls.items()
                    if k.rsplit(".", 1)[-1] in ("tcp_syn_retries", "tcp_syn_linear_timeouts")},
        "events": events,
        "retransmits": [{k: e[k] for k in ("t_s", "retrans", "timer", "expires_ms")} for e in retx],
        "expected": exp_times,
        "expected_elapsed_s": exp_end,
        "collected_at": t.collected_at(rawdir),
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
    lines += ["",
              f"connect(): {r['errno'] or 'success'} after {r['elapsed_s']:.3f} s"
              f" (expected {fmt_s(r['expected_elapsed_s'])} s)",
              f"SYN retransmissions: {len(seen)} observed, {len(r['expected'])} expected",
              "  waits expected (s):  " + " ".join(
                  fmt_s(w) for w in waits(r["expected"] + [r["expected_elapsed_s"]]))
              + f", then give up at {fmt_s(r['expected_elapsed_s'])} s",
              "  waits observed (s):  " + " ".join(
                  f"{w:.3f}" for w in waits(seen + [r["elapsed_s"]]))
              + f", then {r['errno'] or 'success'} at {r['elapsed_s']:.3f} s",
              "", "counter deltas (this namespace only):"]
    lines += t.counters_block(r["counters"])
    return lines


def build(rawroot, outdir):
    runs = {}
    for unit, title in UNITS:
        d = t.unit_dir(rawroot, unit)
        if os.path.isdir(d):
            runs[unit] = (title, one_run(d))
    if not runs:
        raise t.RawError(f"no raw directory for {NAME} under {rawroot}")
    first = t.unit_dir(rawroot, next(iter(runs)))
    kernel = t.kernel_release(first)
    lines = [f"{NAME}: blocking connect() to 127.0.0.1:21013, a listener whose accept queue is full",
             f"kernel {kernel}; {t.where(first)}", ""]
    for unit, title in UNITS:
        if unit in runs:
            lines += text_run(runs[unit][0], runs[unit][1]) + [""]
        else:
            lines += [f"== {title}: not run (./run.sh {unit}; --quick skips it)", ""]
    main = runs.get("p01-synretry", next(iter(runs.values())))[1]
    obj = {"experiment": NAME, "kernel": kernel}
    obj.update({k: v for k, v in main.items() if k != "events"})
    obj["events"] = main["events"]
    obj["default"] = runs["p01-synretry-default"][1] if "p01-synretry-default" in runs else None
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
