#!/usr/bin/python3
"""make bench --kernels (tests/bench/bench.py --kernels): the kernel matrix's wall-time ratio.

  wall time of ./run.sh --kernel all --quick (the host and every guest side by side)
  ÷ the longest of ./run.sh --quick and ./run.sh --kernel VER --quick for each VER, each alone
  target <= 1.3 (issue 12)

All runs in this one bench run, one after another, into a temporary --out, after `make` (so
that no measured run includes the build; a kernel whose packages are not in the cache yet is
fetched during its first run, so run it once before measuring).  While a run lives,
every qemu-system-x86_64 below it is watched (/proc/PID/status VmHWM and /proc/PID/stat
utime+stime, every 0.2 s): each guest's peak host memory and its CPU share (CPU s / its life),
the measurements behind tcplab_all.py's GUEST_PEAK_KB and GUESTS_PER_CPU (docs/kernel-matrix.md,
"All kernels at once").  Takes many minutes (five runs alone, one together), so it is not part
of the default `make bench`.  Skips (exit 4) with a reason without QEMU or root.

With --all the runs are --all instead of --quick (every unit; measured 2026-12-02 they are as
CPU-bound as --quick: docs/kernel-matrix.md); --alone K... measures only those kernels alone
(an --all guest run alone took 10.5 to 11.7 minutes there), and --keep DIR keeps every run's
outputs and log in DIR instead of a temporary directory.

usage: tests/bench/bench_kernels.py [--units U... | --all] [--alone K...] [--keep DIR] [--json FILE]
                              [--together-only]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in ("experiments/report", "experiments/guest", "tests"):  # the libraries, lab_proc
    sys.path.insert(0, os.path.join(TOP, _p))
import tcplab_all  # noqa: E402

RUN = os.path.join(TOP, "run.sh")
TARGET = 1.3
TICK = os.sysconf("SC_CLK_TCK")


def qemu_sample(pid):
    """(name given with -name, VmHWM kB, utime+stime s) of a qemu process, or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        # a guest (vm.sh names it -name tcplab-RELEASE), not `qemu-system-x86_64 --version`
        if not argv or not argv[0].endswith(b"qemu-system-x86_64") or b"-name" not in argv:
            return None
        name = argv[argv.index(b"-name") + 1].decode()
        hwm = None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        fields = st[st.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        return name, hwm, cpu
    except (OSError, ValueError, IndexError):
        return None


def run_measured(argv, log):
    """Run argv (stderr to log); returns (wall s, exit status, CPU s of the run and all it
    started (wait4's rusage), {qemu pid: sample dict})."""
    qemus = {}
    t0 = time.monotonic()
    with open(log, "w") as lf:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                rc = os.waitstatus_to_exitcode(status)
                cpu = ru.ru_utime + ru.ru_stime
                break
            now = time.monotonic()
            for pid in tcplab_all.process_tree(p.pid):
                s = qemu_sample(pid)
                if s is None:
                    continue
                q = qemus.setdefault(pid, {"name": s[0], "hwm_kb": 0, "cpu_s": 0.0, "first": now})
                q["hwm_kb"] = max(q["hwm_kb"], s[1] or 0)
                q["cpu_s"] = max(q["cpu_s"], s[2])
                q["last"] = now
            time.sleep(0.2)   # a sampling period, not synchronisation: wait4 ends the loop
    wall = time.monotonic() - t0
    for q in qemus.values():
        q["life_s"] = q["last"] - q["first"]
        q["cpu_share"] = q["cpu_s"] / q["life_s"] if q["life_s"] > 0 else None
    return wall, rc, cpu, qemus


def describe(qemus):
    return "; ".join(f"{q['name']} peak {q['hwm_kb'] // 1024} MiB, CPU {q['cpu_s']:.0f} s over "
                     f"{q['life_s']:.0f} s ({q['cpu_share']:.2f} core)" if q["cpu_share"] is not None
                     else f"{q['name']} peak {q['hwm_kb'] // 1024} MiB" for q in qemus.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", nargs="*", default=None,
                    help="these units instead of --quick (e.g. p01-machine, for a short check)")
    ap.add_argument("--all", action="store_true",
                    help="--all runs instead of --quick (every unit)")
    ap.add_argument("--alone", nargs="+", metavar="K", default=None,
                    choices=["host"] + list(tcplab_all.KERNELS),
                    help="run only these kernels alone (default: host and every guest)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep each run's outputs and log in DIR (it must not exist yet)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--together-only", action="store_true",
                    help="only the --kernel all run (no ratio)")
    o = ap.parse_args()
    if shutil.which("qemu-system-x86_64") is None:
        print("bench_kernels: skip: qemu-system-x86_64 not installed (make deps-kernel)")
        return 4
    if os.geteuid() != 0:
        print("bench_kernels: skip: needs root (the kernel cache, namespaces)")
        return 4
    if o.all and o.units:
        ap.error("--all and --units: choose one")
    if o.keep and os.path.exists(o.keep):
        ap.error(f"--keep {o.keep}: already exists")
    sel = o.units if o.units else ["--all"] if o.all else ["--quick"]
    alone_kernels = o.alone if o.alone else ["host"] + list(tcplab_all.KERNELS)
    rows = {}
    # the build first, so that no measured run includes it (run.sh builds what is missing)
    if not os.environ.get("TCPLAB_BUILD"):
        b = subprocess.run(["make", "-s", "-C", TOP, "all"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if b.returncode != 0:
            print(f"bench_kernels: make failed: {(b.stderr.strip().splitlines() or ['?'])[-1]}")
            return 1
    if o.keep:
        os.makedirs(o.keep)
    with tempfile.TemporaryDirectory(prefix="tcplab-bench-kernels.") as scratch:
        tmp = o.keep or scratch
        alone = []
        if not o.together_only:
            for k in alone_kernels:
                argv = [RUN] + ([] if k == "host" else ["--kernel", k]) + sel + \
                    ["--out", os.path.join(tmp, "alone", k)]
                wall, rc, cpu, qemus = run_measured(argv, os.path.join(tmp, f"alone-{k}.log"))
                rows[f"alone {k}"] = {"wall_s": wall, "exit": rc, "cpu_s": cpu,
                                      "qemu": list(qemus.values())}
                print(f"alone    {k:5s} {wall:7.1f} s  exit {rc}  CPU {cpu:.0f} s  {describe(qemus)}",
                      flush=True)
                if rc != 0:
                    with open(os.path.join(tmp, f"alone-{k}.log")) as f:
                        print("  " + "".join(f.readlines()[-3:]).replace("\n", "\n  "))
                alone.append(wall)
        argv = [RUN, "--kernel", "all"] + sel + ["--out", os.path.join(tmp, "all")]
        log = os.path.join(tmp, "all.log")
        wall, rc, cpu, qemus = run_measured(argv, log)
        rows["together"] = {"wall_s": wall, "exit": rc, "cpu_s": cpu, "qemu": list(qemus.values())}
        with open(log) as f:
            lines = f.read().splitlines()
        for line in lines:
            if line.startswith("[all] "):
                print("  " + line)
        print(f"together all   {wall:7.1f} s  exit {rc}  CPU {cpu:.0f} s  {describe(qemus)}",
              flush=True)
        if alone:
            ratio = wall / max(alone)
            rows["ratio"] = ratio
            some = "" if len(alone) == 1 + len(tcplab_all.KERNELS) else \
                f"; only {' '.join(alone_kernels)} measured alone"
            print(f"matrix wall-time ratio: {wall:.1f} s together / {max(alone):.1f} s (longest alone"
                  f"{some}) = {ratio:.2f} (target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'})")
        peaks = [q["hwm_kb"] for r in rows.values() if isinstance(r, dict) for q in r["qemu"]]
        if peaks:
            print(f"largest guest peak (VmHWM) {max(peaks) // 1024} MiB; tcplab_all.GUEST_PEAK_KB "
                  f"{tcplab_all.GUEST_PEAK_KB // 1024} MiB")
    if o.json:
        with open(o.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
