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
sys.path.insert(0, os.path.join(TOP, "lib"))
sys.path.insert(0, os.path.join(TOP, "tests"))
import tcplab  # noqa: E402

BIN = os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"), "bin")


def cpu_of(argv, runs=1):
    """Children CPU seconds (user+sys) and wall seconds of running argv `runs` times."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    for _ in range(runs):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def ns_exec(ns, *argv):
    return ["ip", "netns", "exec", ns, *argv]


def bench_sockwatch(ns):
    rows = []
    watch = ns_exec(ns, f"{BIN}/sockwatch", "-4", "-s", "syn-sent", "-p", "21013", "-i", "1000",
                    "-d", "5000")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(watch, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    samples = int(tcplab.kv(out.strip().splitlines()[-1])["samples"])
    # ip netns exec itself is in `cpu`: measure it alone and take it out
    base, _ = cpu_of(ns_exec(ns, "true"), runs=20)
    per_sample = max(cpu - base / 20, 1e-9) / samples
    ss_cpu, ss_wall = cpu_of(ns_exec(ns, "ss", "-tno", "state", "syn-sent", "dport", "=", ":21013"),
                             runs=50)
    ss_per = (ss_cpu - base * 50 / 20) / 50
    rows.append(("sockwatch: ss process CPU / sockwatch sample CPU", ss_per / per_sample,
                 ">= 100", ss_per / per_sample >= 100,
                 f"ss {ss_per * 1e6:.0f} us, sample {per_sample * 1e6:.1f} us"))
    share = (cpu - base / 20) / 5.0
    rows.append(("sockwatch: CPU share of one core at 1 ms", share * 100, "< 5 %", share < 0.05,
                 f"{samples} samples in 5 s"))
    return rows


def bench_counters(ns):
    base, _ = cpu_of(ns_exec(ns, "true"), runs=20)
    c_cpu, _ = cpu_of(ns_exec(ns, f"{BIN}/counters"), runs=50)
    n_cpu, _ = cpu_of(ns_exec(ns, "nstat", "-az", "--json"), runs=50)
    c_per = (c_cpu - base * 50 / 20) / 50
    n_per = (n_cpu - base * 50 / 20) / 50
    rows = [("counters: nstat process CPU / counters process CPU", n_per / c_per, ">= 20",
             n_per / c_per >= 20, f"nstat {n_per * 1e6:.0f} us, counters {c_per * 1e6:.0f} us "
             "(both mostly process start-up)")]
    return rows


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
    with tcplab.netns("tcplab-bench") as ns:
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
