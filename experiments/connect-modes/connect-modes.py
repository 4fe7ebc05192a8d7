#!/usr/bin/python3
"""connect-modes report: five ways to complete a connect() on loopback, timed as a whole and step
by step, with a plain answer to whether Linux shows the Windows getsockopt(SO_ERROR) stall."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402

NAME = "connect-modes"
MODES = (
    ("so-error", "connect, poll(POLLOUT), getsockopt(SO_ERROR)", "select + getsockopt(SO_ERROR)"),
    ("poll-only", "connect, poll(POLLOUT)", "select only"),
    ("wait-so-error", "connect, poll, {busy_wait_us} us busy wait, SO_ERROR",
     "select + 50us wait + SO_ERROR"),
    ("so-type", "connect, poll, getsockopt(SO_TYPE)", "select + getsockopt(SO_TYPE)"),
    ("blocking", "blocking connect()", None),
)
STEPS = ("connect", "poll", "wait", "getsockopt")
# The write-up's C reproducer on Windows 11 (ms): median, p95, max, calls over 5 ms of 300.
WRITEUP = {
    "select + getsockopt(SO_ERROR)": (14.622, 15.531, 22.478, 210),
    "select only": (0.199, 0.340, 0.972, 0),
    "select + 50us wait + SO_ERROR": (0.244, 0.329, 0.499, 0),
    "select + getsockopt(SO_TYPE)": (0.199, 0.294, 0.573, 0),
}
# Edges (us) of the histogram of whole-sequence times; the last bucket is open.
EDGES_US = (10, 20, 50, 100, 200, 500, 1000, 5000)
STALL_US = 5000.0   # the write-up's threshold: a getsockopt over 5 ms is a stall


def read_modes(path):
    """modes.txt → {mode: summary with "steps" and "errors"} in the order printed."""
    out = {}
    for d in t.read_kv_lines(path, "mode="):
        m = out.setdefault(d.str("mode"), {"steps": {}, "errors": {}})
        if "step" in d:
            m["steps"][d.str("step")] = {"n": d.int("n"), **{k: d.float(k) for k in
                                         ("median_us", "p95_us", "max_us")},
                                         "over_5ms": d.int("over_5ms")}
        elif "error" in d:
            m["errors"][d.str("error")] = d.int("count")
        else:
            m.update(t.numbers(d, ("mode", "bimodal", "reason")))
            del m["mode"]
            for k in ("n", "ok"):
                d.int(k)
    if not out:
        raise t.RawError(f"{path}: no mode= lines")
    for mode, m in out.items():
        for k in ("n", "ok", "median_us"):
            if k not in m:
                raise t.RawError(f"{path}: mode={mode} has no summary line with {k}=")
    return out


def histogram(path):
    """samples.txt → ({mode: counts per bucket of EDGES_US} of the whole-sequence time,
    {mode: {step: count}}: for each sequence over 5 ms, the step that took most of it)."""
    hist, slow = {}, {}
    rows = t.read_kv_lines(path, "mode=")
    if not rows:
        raise t.RawError(f"{path}: no mode= samples")
    for d in rows:
        us = d.int("total_ns") / 1e3
        k = next((i for i, e in enumerate(EDGES_US) if us < e), len(EDGES_US))
        hist.setdefault(d.str("mode"), [0] * (len(EDGES_US) + 1))[k] += 1
        if us > STALL_US:
            ns = {s: d.int(s + "_ns", default=0) for s in STEPS}
            step = max(STEPS, key=lambda s: ns[s])
            by = slow.setdefault(d["mode"], {})
            by[step] = by.get(step, 0) + 1
    return hist, slow


def bucket_names():
    lo, names = 0, []
    for e in EDGES_US:
        names.append(f"{lo}-{e}" if lo else f"<{e}")
        lo = e
    return names + [f">={EDGES_US[-1]}"]


def read_strace(rawdir):
    """{mode: the syscalls of one sequence} (loader noise before socket() dropped), or None."""
    vpath = os.path.join(rawdir, "strace-version.txt")
    version = t.read_lines(vpath)
    if not version:
        raise t.RawError(f"{vpath}: empty (no strace version, nor `strace: not available`)")
    if version[0].startswith("strace: not available"):
        return None
    out = {}
    for mode, _, _ in MODES:
        lines = t.read_lines(os.path.join(rawdir, f"strace-{mode}.txt"), optional=True)
        if lines is None:
            continue
        start = next((i for i, line in enumerate(lines) if line.startswith("socket(")), 0)
        out[mode] = lines[start:]
    return out


def verdict(modes):
    """Whether the Windows stall shows, and the numbers that say so."""
    so = modes["so-error"]
    gso = so["steps"].get("getsockopt", {})
    slow_gso = sum(m["steps"].get("getsockopt", {}).get("over_5ms", 0)
                   for k, m in modes.items() if k in ("so-error", "wait-so-error"))
    stall = slow_gso > 0 or so.get("bimodal") == "yes" and modes["poll-only"].get("bimodal") != "yes"
    return {
        "windows_stall_seen": stall,
        "so_error_getsockopt_median_us": gso.get("median_us"),
        "so_error_getsockopt_max_us": gso.get("max_us"),
        "getsockopt_calls_over_5ms": slow_gso,
        "so_error_minus_poll_only_median_us": round(so["median_us"] - modes["poll-only"]["median_us"], 3),
        "bimodal_modes": [k for k, m in modes.items() if m.get("bimodal") == "yes"],
        "sequences_over_5ms": {k: m.get("over_5ms", 0) for k, m in modes.items()},
    }


def fmt(v, width=9):
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.1f}"


def summary_lines(modes, start):
    lines = [f"  {'mode':<14} {'sequence':<46} {'n':>4} {'ok':>4} {'median_us':>9} {'p95_us':>9}"
             f" {'max_us':>9} {'>5ms':>4}  bimodal"]
    for mode, what, _ in MODES:
        m = modes.get(mode)
        if m is None:
            continue
        what = what.format(**start)
        lines.append(f"  {mode:<14} {what:<46} {m['n']:>4} {m['ok']:>4} {fmt(m.get('median_us'))}"
                     f" {fmt(m.get('p95_us'))} {fmt(m.get('max_us'))} {m.get('over_5ms', 0):>4}"
                     f"  {m.get('bimodal', '-')} ({m.get('reason', '').replace('_', ' ')})")
    return lines


def step_lines(modes):
    lines = [f"  {'mode':<14}" + "".join(f" {s + ' med/p95/max':>26}" for s in STEPS)]
    for mode, _, _ in MODES:
        m = modes.get(mode)
        if m is None:
            continue
        cells = []
        for s in STEPS:
            st = m["steps"].get(s)
            cells.append(f"{'-':>26}" if st is None else
                         f"{st['median_us']:>8.2f}/{st['p95_us']:>7.2f}/{st['max_us']:>9.1f}")
        lines.append(f"  {mode:<14}" + "".join(f" {c}" for c in cells))
    return lines


def histogram_lines(hist):
    names = bucket_names()
    lines = [f"  {'mode':<14}" + "".join(f" {n:>9}" for n in names)]
    for mode, _, _ in MODES:
        if mode in hist:
            lines.append(f"  {mode:<14}" + "".join(f" {c:>9}" for c in hist[mode]))
    return lines


def verdict_lines(v, modes, slow_steps):
    so = modes["so-error"]["steps"].get("getsockopt", {})
    if v["windows_stall_seen"]:
        head = ("Yes: Linux shows a stall like the Windows one here: "
                f"{v['getsockopt_calls_over_5ms']} getsockopt(SO_ERROR) calls took over 5 ms.")
    else:
        head = ("No: Linux does not show the Windows stall.  getsockopt(SO_ERROR) right after "
                f"poll() took {so.get('median_us', 0):.2f} us at the median and "
                f"{so.get('max_us', 0):.1f} us at most; no SO_ERROR call took over 5 ms "
                "(Windows: 210 of 300 sequences over 5 ms, 10-25 ms each).")
    lines = [head]
    if v["bimodal_modes"]:
        lines.append("Bimodal by the 10x-median rule: " + ", ".join(v["bimodal_modes"]) + ".")
    else:
        lines.append("No mode is bimodal: fewer than 5% of the sequences of any mode lie more than "
                     "10x away from its median.")
    if slow_steps:
        lines.append("Sequences over 5 ms, by the step that took most of each: " + "; ".join(
            f"{k}: " + ", ".join(f"{s} {n}" for s, n in by.items()) for k, by in slow_steps.items())
            + ".")
    lines.append(f"so-error minus poll-only, medians of the whole sequence: "
                 f"{v['so_error_minus_poll_only_median_us']:+.1f} us; the getsockopt step alone: "
                 f"{so.get('median_us', 0):.2f} us, so the rest is connect() varying between runs.")
    return lines


def writeup_lines():
    lines = ["The write-up's plain-C reproducer on Windows 11 (ms, 300 after 10 warm-ups):"]
    for name, (med, p95, mx, slow) in WRITEUP.items():
        lines.append(f"  {name:<32} median={med:7.3f} p95={p95:7.3f} max={mx:7.3f}  >5ms: {slow}/300")
    return lines


def strace_lines(st):
    if st is None:
        return ["strace: not available"]
    lines = ["strace -T of one sequence per mode (<seconds spent in the call>):"]
    for mode, _, _ in MODES:
        if mode in st:
            lines.append(f"--- {mode}")
            lines += ["  " + x for x in st[mode]]
    return lines


def build(rawroot, outdir):
    raw = t.unit_dir(rawroot, NAME)
    modes = read_modes(os.path.join(raw, "modes.txt"))
    if "so-error" not in modes or "poll-only" not in modes:
        raise t.RawError(f"{raw}/modes.txt: modes so-error and poll-only are needed")
    hist, slow_steps = histogram(os.path.join(raw, "samples.txt"))
    info, _ = t.read_machine(os.path.join(raw, "machine.txt"), need=("kernel", "nproc"))
    start = t.one_line(os.path.join(raw, "modes.txt"), "start ")
    start = {"addr": start.str("addr"), "port": start.int("port", 1, 65535),
             "n": start.int("n"), "warmup": start.int("warmup"),
             "busy_wait_us": start.int("busy_wait_us")}
    load = t.load_average(os.path.join(raw, "loadavg.txt"))
    st = read_strace(raw)
    v = verdict(modes)
    kernel = info.get("kernel")
    lines = [f"{NAME}: connect() to an accept-and-close listener on {start['addr']}:{start['port']},"
             " completed five ways",
             f"kernel {kernel}, {info.get('nproc', '?')} CPUs; one network namespace, loopback; "
             f"{start['n']} timed sequences per mode after {start['warmup']} warm-ups;"
             " socket() and close() are outside the timing",
             f"load average when collected: {t.fmt_load(load, 1)} (other work on the machine widens the tails)",
             "", "Verdict:"] + ["  " + x for x in verdict_lines(v, modes, slow_steps)]
    lines += ["", "Whole sequence (us):"] + summary_lines(modes, start)
    lines += ["", "Each step on its own (us, median/p95/max):"] + step_lines(modes)
    lines += ["", "Whole sequence, count per bucket (us):"] + histogram_lines(hist)
    lines += ["", "connect() on a non-blocking socket returned EINPROGRESS in "
              + ", ".join(f"{k} {modes[k].get('connect_einprogress', 0)}/{modes[k]['n']}"
                          for k, _, _ in MODES[:4] if k in modes)
              + "; poll() then found the socket writable at once (see the poll step)."]
    errors = {k: m["errors"] for k, m in modes.items() if m["errors"]}
    if errors:
        lines.append("Failures: " + "; ".join(f"{k}: " + ", ".join(f"{e} x{n}" for e, n in es.items())
                                             for k, es in errors.items()))
    lines += [""] + writeup_lines() + ["", *strace_lines(st)]
    obj = {"experiment": NAME, "kernel": kernel, "nproc": info.int("nproc", 1),
           "collected_at": t.collected_at(raw), "load_average": load,
           "counters": None, "result": None, "errno": None, "elapsed_s": None,
           "port": start["port"], "addr": start["addr"],
           "n": start["n"], "warmup": start["warmup"],
           "verdict": v, "modes": modes,
           "histogram_edges_us": list(EDGES_US), "histogram": hist,
           "over_5ms_by_step": slow_steps,
           "writeup_windows_ms": {k: dict(zip(("median", "p95", "max", "over_5ms"), w))
                                  for k, w in WRITEUP.items()},
           "strace": st}
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
