#!/usr/bin/python3
"""make bench: costs measured side by side in one run, printed as ratios with their targets.
Not a test: a busy machine moves the numbers; run it on a quiet one.  Needs root (namespaces).

  sockwatch   one filtered sample (in-process loop) vs one `ss -tno state syn-sent dport = :P`
  sockwatch   CPU share of one core while sampling every 1 ms
  counters    one snapshot vs one `nstat -az`, as processes and per snapshot in one process
  run.sh      wall time of ./run.sh vs its longest unit alone (--quick: the quick set)
  poll-scaling  tests/bench_poll_scaling.py
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "experiments"))
sys.path.insert(0, os.path.join(TOP, "tests"))
import lab_proc  # noqa: E402
import tcplab  # noqa: E402

BIN = os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"), "bin")


# Runs inside the namespace: times `reps` runs of argv, or one long run, by the CPU the children
# used (getrusage: the kernel's exact runtime, not ticks), with no `ip netns exec` in the loop.
CHILD_CPU = """
import resource, subprocess, sys
reps, argv = int(sys.argv[1]), sys.argv[2:]
for _ in range(reps):
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)
"""


def cpu_in_ns(ns, reps, *argv):
    """CPU seconds per run of argv inside ns."""
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHILD_CPU, str(reps),
                          *argv], capture_output=True, text=True, check=True).stdout
    return float(out) / reps


def bench_sockwatch(ns):
    watch_s = cpu_in_ns(ns, 1, f"{BIN}/sockwatch", "-4", "-s", "syn-sent", "-p", "21013",
                        "-i", "1000", "-d", "5000")
    # the number of samples it took in those 5 s, from its last line
    out = subprocess.run(["ip", "netns", "exec", ns, f"{BIN}/sockwatch", "-4", "-s", "syn-sent",
                          "-p", "21013", "-d", "200"], capture_output=True, text=True).stdout
    per_ms = int(tcplab.kv(out.strip().splitlines()[-1])["samples"]) / 200
    samples = 5000 * per_ms
    per_sample = watch_s / samples
    ss = cpu_in_ns(ns, 50, "ss", "-tno", "state", "syn-sent", "dport", "=", ":21013")
    return [("sockwatch: ss process CPU / sockwatch sample CPU", ss / per_sample, ">= 100",
             ss / per_sample >= 100, f"ss {ss * 1e6:.0f} us, sample {per_sample * 1e6:.1f} us"),
            ("sockwatch: CPU share of one core at 1 ms", watch_s / 5.0 * 100, "< 5 %",
             watch_s / 5.0 < 0.05, f"{watch_s * 1e3:.0f} ms of CPU in 5 s")]


def bench_counters(ns):
    nstat = cpu_in_ns(ns, 100, "nstat", "-az")
    proc = cpu_in_ns(ns, 100, f"{BIN}/counters")
    sampled = cpu_in_ns(ns, 1, f"{BIN}/counters", "-i", "1", "-c", "2000") / 2000
    return [("counters: nstat process CPU / counters -i snapshot CPU", nstat / sampled, ">= 20",
             nstat / sampled >= 20, f"nstat {nstat * 1e6:.0f} us, snapshot {sampled * 1e6:.0f} us"),
            ("counters: nstat process CPU / counters process CPU", nstat / proc, None, None,
             f"counters {proc * 1e6:.0f} us, mostly exec and dynamic linking")]


def bench_run(quick):
    args = ["--quick"] if quick else []
    out = "/tmp/tcplab-bench-out"
    t0 = time.monotonic()
    subprocess.run([f"{TOP}/run.sh", "--out", out, *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    whole = time.monotonic() - t0
    longest = "p01-synretry" if quick else "p01-synretry-default"
    t0 = time.monotonic()
    subprocess.run([f"{TOP}/run.sh", "--out", out, longest], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    alone = time.monotonic() - t0
    return [(f"run.sh{' --quick' if quick else ''} wall / {longest} alone", whole / alone,
             "<= 1.15", whole / alone <= 1.15, f"{whole:.1f} s vs {alone:.1f} s")]


def main():
    ap = argparse.ArgumentParser(description="tcplab benchmarks (ratios, side by side)")
    ap.add_argument("--quick", action="store_true", help="run.sh --quick for the wall-time ratio")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root for network namespaces", file=sys.stderr)
        return 4
    rows = []
    with lab_proc.netns("tcplab-bench") as ns:
        rows += bench_sockwatch(ns)
        rows += bench_counters(ns)
    rows += bench_run(a.quick)
    try:
        import bench_poll_scaling
        rows += [(n, v, tg, ok, "") for n, v, tg, ok in bench_poll_scaling.bench(BIN)]
    except Exception as e:  # the lab may be absent or fail: say so, keep the other rows
        rows.append(("poll-scaling", None, None, False, f"not measured: {e}"))
    width = max(len(r[0]) for r in rows)
    for name, value, target, ok, note in rows:
        v = "n/a" if value is None else f"{value:.2f}"
        verdict = "" if ok is None else ("ok" if ok else "MISSED")
        print(f"{name:<{width}}  {v:>9}  {target or '':<7} {verdict:<6} {note}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([dict(zip(("name", "value", "target", "ok", "note"), r)) for r in rows], f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
