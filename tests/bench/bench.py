#!/usr/bin/python3
"""make bench: costs measured side by side in one run, printed as ratios with their targets.
Not a test: a busy machine moves the numbers, so each probe ratio is measured --runs times and
printed as its median (the verdict) with min and max.  Needs root (namespaces).  docs/bench.md.

All probe rows run in one namespace holding the same sockets (HOLDER: the p01-synretry scene plus
established pairs the filter rejects).  A probe and its floor run at the same time, pinned to
one CPU; CPU is each process's own rusage (wait4).
  sockwatch   CPU per 1 ms sample / the floor: tests/bench/floor.c's bare loop of the same
              filtered dump with the same sleep, same schedule, same duration (<= 1.25)
  counters    CPU per `counters -i 1` snapshot / a raw open-read-close of snmp+netstat with
              the same sleep, as many snapshots (<= 1.5)
  context     the floors without their sleep; sockwatch's CPU share of one core; `ss` and
              `nstat` processes against one sample (mostly exec and dynamic linking)
  run.sh      wall time of ./run.sh vs its longest unit alone (--quick: the quick set); with
              --all, also ./run.sh --all vs its longest unit plus the alone=yes units
  poll-scaling  tests/bench/bench_poll_scaling.py
  capture     tests/bench/bench_capture.py: CPU per packet against tcpdump -w on the same traffic (<= 1)
  tcpevents   tests/bench/bench_tcpevents.py: CPU per event against evfloor (the same tracepoints,
              a reader that only counts) over the same burst of 10,002 transitions (<= 1.25), and
              the events lost in it (= 0); skipped with the reason where tcpevents is not built
  wire        tests/bench/bench_wire.py: sockwatch's event time against the capture's packet time on
              the wire, and a wire unit's setup against a loopback unit's
  kernels     with --kernels only (not in the default bench: it takes many minutes, six runs):
              tests/bench/bench_kernels.py, the matrix's wall time (./run.sh --kernel all --quick) /
              the longest of ./run.sh --quick and each ./run.sh --kernel VER --quick alone
              (<= 1.3); with --all too, --all runs instead (over an hour here: five runs
              alone, one together); skipped with a reason without QEMU
--probes: only the probe rows (tcpevents among them); --tcpevents: only tcpevents' rows.  Exit 0 whatever the verdicts (it reports, it does not fail);
4 without root or without the floor program.
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in ("experiments/report", "experiments/guest", "tests"):  # the libraries, lab_proc
    sys.path.insert(0, os.path.join(TOP, _p))
import lab_proc  # noqa: E402
import tcplab  # noqa: E402

BUILD = os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"))
BIN = os.path.join(BUILD, "bin")
FLOOR = os.path.join(BUILD, "bench", "floor")   # tests/bench/floor.c


PORT = 21013          # the port p01-synretry watches: sockwatch -4 -s syn-sent -p 21013
OTHER_PAIRS = 16      # established connections on PORT + 1 that the kernel's filter rejects


# Runs inside the namespace: `reps` runs of argv, each reaped with wait4() for its own rusage (the
# kernel's exact runtime, not ticks), no `ip netns exec` in what is timed.  Prints one JSON
# object: the CPU seconds of all runs, the last run's last stdout line, the worst exit status.
CHILD_CPU = """
import json, os, subprocess, sys, tempfile
reps, argv = int(sys.argv[1]), sys.argv[2:]
cpu, last, rc, err = 0.0, "", 0, ""
for _ in range(reps):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errf:
        p = subprocess.Popen(argv, stdout=out, stderr=errf)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu += ru.ru_utime + ru.ru_stime
        rc = max(rc, p.returncode)
        out.seek(0)
        lines = out.read().decode().strip().splitlines()
        last = lines[-1] if lines else ""
        errf.seek(0)
        err = err or errf.read().decode().strip()
print(json.dumps({"cpu": cpu, "last": last, "rc": rc, "err": err}))
"""

# Runs inside the namespace: the commands given (a JSON list of argv lists) all at once, pinned to
# one CPU, each reaped with wait4().  A probe and its floor run this way: whatever else loads the
# machine (other sessions, say) loads both alike, which two runs one after the other do not.
# Prints a JSON list of {cpu, last, rc, err}, in the order given.
CHILD_PAIR = """
import json, os, subprocess, sys, tempfile
cmds, procs, res = json.loads(sys.argv[1]), {}, {}
files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in cmds]
cpu = max(os.sched_getaffinity(0))   # one CPU for both: the same load, the same caches
pin = lambda: os.sched_setaffinity(0, {cpu})
for i, argv in enumerate(cmds):
    procs[subprocess.Popen(argv, stdout=files[i][0], stderr=files[i][1], preexec_fn=pin).pid] = i
while procs:
    pid, status, ru = os.wait4(-1, 0)
    i = procs.pop(pid)
    out, err = files[i]
    out.seek(0)
    err.seek(0)
    lines = out.read().decode().strip().splitlines()
    res[i] = {"cpu": ru.ru_utime + ru.ru_stime, "last": lines[-1] if lines else "",
              "rc": os.waitstatus_to_exitcode(status), "err": err.read().decode().strip()}
print(json.dumps([res[i] for i in range(len(cmds))]))
"""

# Runs inside the namespace for the whole benchmark and holds the sockets every measurement sees:
# the p01-synretry scene (a listener on PORT whose accept queue is full, one client stuck in
# SYN-SENT because its SYNs are dropped) and OTHER_PAIRS established pairs the filter rejects.
HOLDER = """
import select, socket, struct, sys, time
port, pairs = int(sys.argv[1]), int(sys.argv[2])
def listener(p, backlog):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", p))
    s.listen(backlog)
    return s
def accept_queue(s):    # tcp_info of a LISTEN socket: tcpi_unacked is the accept queue length
    return struct.unpack_from("=B7x6I", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104))[5]
def until(cond, what):
    deadline = time.monotonic() + 5
    while not cond():
        if time.monotonic() > deadline:
            sys.exit("holder: " + what)
        select.select([], [], [], 0.001)
full = listener(port, 0)
queued = socket.create_connection(("127.0.0.1", port))
until(lambda: accept_queue(full) == 1, "accept queue not full")
other = listener(port + 1, pairs)
clients = [socket.create_connection(("127.0.0.1", port + 1)) for _ in range(pairs)]
servers = [other.accept()[0] for _ in range(pairs)]
syn = socket.socket()
syn.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, 20)   # keeps retrying for minutes
syn.setblocking(False)
syn.connect_ex(("127.0.0.1", port))
print("ready", flush=True)
sys.stdin.read()
"""


def child(ns, reps, *argv):
    """(CPU seconds per run, last stdout line) of argv run `reps` times inside ns."""
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHILD_CPU, str(reps),
                          *argv], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    if r["rc"] != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} exited {r['rc']}: {r['err']}")
    return r["cpu"] / reps, r["last"]


def together(ns, *cmds):
    """[(CPU seconds, last stdout line)] of the argv lists in cmds, run at the same time in ns."""
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHILD_PAIR,
                          json.dumps(cmds)], capture_output=True, text=True, check=True).stdout
    res = json.loads(out)
    for argv, r in zip(cmds, res):
        if r["rc"] != 0:
            raise RuntimeError(f"{os.path.basename(argv[0])} exited {r['rc']}: {r['err']}")
    return [(r["cpu"], r["last"]) for r in res]


def cpu_in_ns(ns, reps, *argv):
    """CPU seconds per run of argv inside ns."""
    return child(ns, reps, *argv)[0]


class Scene:
    """HOLDER running in ns until close()."""

    def __init__(self, ns):
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", HOLDER,
                                      str(PORT), str(OTHER_PAIRS)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        r, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline() if r else ""
        if line.strip() != "ready":
            self.close()
            raise RuntimeError("socket holder: " + (self.proc.stderr.read().strip() or
                                                    "no ready line in 10 s"))

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spread(values):
    """min / median / max of a list of numbers."""
    v = sorted(values)
    return v[0], statistics.median(v), v[-1]


def ratio_row(name, target, limit, ratios, note):
    lo, med, hi = spread(ratios)
    return {"name": name, "value": med, "target": f"<= {limit}", "ok": med <= limit,
            "min": lo, "max": hi, "runs": len(ratios),
            "note": f"min {lo:.2f} median {med:.2f} max {hi:.2f} over {len(ratios)} runs; {note}"}


def context_row(name, value, note):
    return {"name": name, "value": value, "target": None, "ok": None, "note": note}


def us(seconds):
    return f"{seconds * 1e6:.1f} us"


WATCH = ["-4", "-s", "syn-sent", "-p", str(PORT)]


def one_sockwatch_pair(ns, duration_ms):
    """sockwatch and the floor, at the same time on one CPU, on the same schedule for the same
    duration: (sockwatch, floor) CPU seconds per sample, floor bytes per sample, sockwatch's CPU
    seconds in all, and both sample counts."""
    wr, fr = together(ns, [f"{BIN}/sockwatch", *WATCH, "-i", "1000", "-d", str(duration_ms)],
                      [FLOOR, "diag", *WATCH, "-i", "1000", "-d", str(duration_ms)])
    wn = int(tcplab.kv(wr[1])["samples"])
    f = tcplab.kv(fr[1])
    fn = int(f["samples"])
    return wr[0] / wn, fr[0] / fn, int(f["bytes"]) / fn, wr[0], wn, fn


def one_counters_pair(ns, count):
    """counters -i and the raw read, at the same time on one CPU: CPU seconds per snapshot of
    each (count + 1 snapshots, count sleeps of 1 ms, for both)."""
    cr, fr = together(ns, [f"{BIN}/counters", "-i", "1", "-c", str(count)],
                      [FLOOR, "proc", "-i", "1", "-n", str(count + 1)])
    return cr[0] / (count + 1), fr[0] / (count + 1)


def bench_probes(ns, runs, duration_ms=3000, count=2000):
    """The probes against their floors, `runs` times, each probe and its floor side by side,
    then the context lines."""
    sw, cn = [], []
    for _ in range(runs):
        sw.append(one_sockwatch_pair(ns, duration_ms))
        cn.append(one_counters_pair(ns, count))
    bare = cpu_in_ns(ns, 1, FLOOR, "diag", *WATCH, "-i", "0", "-n", "20000") / 20000
    raw = cpu_in_ns(ns, 1, FLOOR, "proc", "-i", "0", "-n", "2000") / 2000
    ss = cpu_in_ns(ns, 50, "ss", "-tno", "state", "syn-sent", "dport", "=", f":{PORT}")
    nstat = cpu_in_ns(ns, 100, "nstat", "-az")
    proc = cpu_in_ns(ns, 100, f"{BIN}/counters")
    w = statistics.median(x[0] for x in sw)
    f = statistics.median(x[1] for x in sw)
    per_dump = statistics.median(x[2] for x in sw)
    c = statistics.median(x[0] for x in cn)
    r = statistics.median(x[1] for x in cn)
    share = statistics.median(x[3] for x in sw) / (duration_ms / 1000)
    counts = "samples " + " ".join(f"{x[4]}/{x[5]}" for x in sw) + " (sockwatch/floor)"
    return [
        ratio_row("sockwatch: CPU per sample / floor (same dump, 1 ms sleep)", "<= 1.25", 1.25,
                  [x[0] / x[1] for x in sw],
                  f"sockwatch {us(w)}, floor {us(f)} per sample (medians); {duration_ms} ms "
                  f"at 1 ms: {counts}; {per_dump:.0f} bytes per dump"),
        ratio_row("counters: CPU per -i snapshot / raw read of snmp+netstat", "<= 1.5", 1.5,
                  [x[0] / x[1] for x in cn],
                  f"counters {us(c)}, raw read {us(r)} per snapshot (medians), {count} at 1 ms"),
        context_row("floor: one dump, no sleep (us of CPU)", bare * 1e6,
                    "the kernel's filtered walk + send/recv; the rest of the floor is the sleep"),
        context_row("floor: one read of snmp+netstat, no sleep (us of CPU)", raw * 1e6,
                    "open/read/close of both files"),
        {"name": "sockwatch: CPU share of one core at 1 ms", "value": share * 100,
         "target": "< 5 %", "ok": share < 0.05,
         "note": f"{share * duration_ms:.0f} ms of CPU in {duration_ms / 1000:.0f} s (median)"},
        context_row("sockwatch: ss process CPU / sockwatch sample CPU", ss / w,
                    f"ss {us(ss)}: mostly exec and dynamic linking"),
        context_row("counters: nstat process CPU / counters -i snapshot CPU", nstat / c,
                    f"nstat {us(nstat)}: mostly exec and dynamic linking"),
        context_row("counters: nstat process CPU / counters process CPU", nstat / proc,
                    f"counters {us(proc)} as a process"),
    ]


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
    return [{"name": f"run.sh{' --quick' if quick else ''} wall / {longest} alone",
             "value": whole / alone, "target": "<= 1.15", "ok": whole / alone <= 1.15,
             "note": f"{whole:.1f} s vs {alone:.1f} s"}]


def bench_run_all():
    """./run.sh --all against what it cannot beat: its longest unit, plus the units the table
    marks alone=yes (their result is a speed, so run.sh runs them one by one after the others;
    their own times are run.sh's "UNIT: done in N s" lines).  The ratio shows whether the other
    units, the new lifecycle ones among them, ran side by side."""
    import re
    out = "/tmp/tcplab-bench-out"
    t0 = time.monotonic()
    r = subprocess.run([f"{TOP}/run.sh", "--out", out, "--all"], check=True, text=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    whole = time.monotonic() - t0
    units = tcplab.read_units()
    alone = [u["unit"] for u in units if u["set"] in ("default", "labs") and u["alone"]]
    done = {m[0]: int(m[1]) for m in re.findall(r"\] (\S+): done in (\d+) s", r.stderr)}
    missing = [u for u in alone if u not in done]
    if missing:
        raise RuntimeError(f"run.sh --all printed no 'done in' for {', '.join(missing)}")
    serial = sum(done[u] for u in alone)
    longest = "p01-synretry-default"
    t0 = time.monotonic()
    subprocess.run([f"{TOP}/run.sh", "--out", out, longest], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    one = time.monotonic() - t0
    note = (f"{whole:.1f} s vs {one:.1f} s + {serial} s alone ("
            + ", ".join(f"{u} {done[u]} s" for u in alone) + ")")
    return [{"name": f"run.sh --all wall / ({longest} alone + the alone=yes units)",
             "value": whole / (one + serial), "target": "<= 1.15",
             "ok": whole / (one + serial) <= 1.15, "note": note},
            context_row(f"run.sh --all wall / {longest} alone", whole / one,
                        "the alone=yes units run one by one after the others")]


def runs_arg(text):
    """--runs: a whole number 1..100."""
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"'{text}': want a whole number 1..100")
    return int(text)


def bench_kernels_row(every_unit):
    """tests/bench/bench_kernels.py's ratio as a row (its own lines are printed as it goes); with
    every_unit the runs are --all (10 to 12 minutes a guest alone) instead of --quick."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = subprocess.run([sys.executable, os.path.join(TOP, "tests", "bench_kernels.py"),
                            "--json", f.name] + (["--all"] if every_unit else []),
                           stdout=subprocess.PIPE, text=True)
        sys.stdout.write(r.stdout)
        name = f"kernel matrix ({'--all' if every_unit else '--quick'}): --kernel all / longest alone"
        if r.returncode != 0:
            why = (r.stdout.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            return [{"name": name, "value": None, "target": None, "ok": None, "note": why}]
        with open(f.name) as jf:
            got = json.load(jf)
    ratio = got.get("ratio")
    return [{"name": name, "value": ratio, "target": "<= 1.3", "ok": ratio is not None and ratio <= 1.3,
             "note": f"{got['together']['wall_s']:.0f} s together"}]


def main():
    ap = argparse.ArgumentParser(description="tcplab benchmarks (ratios, side by side)")
    ap.add_argument("--quick", action="store_true", help="run.sh --quick for the wall-time ratio")
    ap.add_argument("--all", action="store_true",
                    help="also ./run.sh --all against its longest unit and the alone units")
    ap.add_argument("--runs", type=runs_arg, default=5, metavar="N",
                    help="probe/floor runs, reported as min/median/max (default 5)")
    ap.add_argument("--probes", action="store_true",
                    help="only the probes against their floors (no run.sh, no poll-scaling)")
    ap.add_argument("--tcpevents", action="store_true",
                    help="only tcpevents against its floor and its lost events (bench_tcpevents.py)")
    ap.add_argument("--kernels", action="store_true",
                    help="also the kernel matrix's wall-time ratio (tests/bench/bench_kernels.py: many minutes)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root for network namespaces", file=sys.stderr)
        return 4
    if not os.access(FLOOR, os.X_OK):
        print(f"bench: {FLOOR} is missing (make bench builds it)", file=sys.stderr)
        return 4
    rows = []
    if a.tcpevents:
        print_rows(tcpevents_rows(a.runs), a.json)
        return 0
    try:
        with lab_proc.netns("tcplab-bench") as ns:
            scene = Scene(ns)
            try:
                rows += bench_probes(ns, a.runs)
            finally:
                scene.close()
    except (RuntimeError, OSError, ValueError, subprocess.CalledProcessError) as e:
        # a probe or floor that failed: say so in its row, keep the other rows
        err = getattr(e, "stderr", None) or str(e)
        rows.append({"name": "probes against their floors", "value": None, "target": None,
                     "ok": False, "note": f"not measured: {err.strip().splitlines()[-1]}"})
    rows += tcpevents_rows(a.runs)
    if not a.probes:
        rows += bench_run(a.quick)
        if a.all:
            rows += bench_run_all()
        try:
            import bench_poll_scaling
            rows += [{"name": n, "value": v, "target": tg, "ok": ok, "note": ""}
                     for n, v, tg, ok in bench_poll_scaling.bench(BIN)]
        except Exception as e:  # the lab may be absent or fail: say so, keep the other rows
            rows.append({"name": "poll-scaling", "value": None, "target": None, "ok": False,
                         "note": f"not measured: {e}"})
        try:
            import bench_capture
            rows += [{"name": n, "value": v, "target": tg, "ok": ok, "note": note}
                     for n, v, tg, ok, note in bench_capture.bench(BIN, a.runs)]
        except Exception as e:  # say so, keep the other rows
            rows.append({"name": "capture", "value": None, "target": None, "ok": False,
                         "note": f"not measured: {e}"})
        import bench_wire
        rows += bench_wire.bench(BIN, a.runs)
    if a.kernels:
        rows += bench_kernels_row(a.all)
    print_rows(rows, a.json)
    return 0


def tcpevents_rows(runs):
    """tests/bench/bench_tcpevents.py's rows: tcpevents against evfloor, and its lost events."""
    try:
        import bench_tcpevents
        return [{"name": n, "value": v, "target": tg, "ok": ok, "note": note}
                for n, v, tg, ok, note in bench_tcpevents.bench(BIN, os.path.dirname(FLOOR), runs)]
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:  # say so, go on
        return [{"name": "tcpevents against its floor", "value": None, "target": None,
                 "ok": False, "note": f"not measured: {e}"}]


def print_rows(rows, json_path):
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        v = "n/a" if r["value"] is None else f"{r['value']:.2f}"
        verdict = "" if r["ok"] is None else ("ok" if r["ok"] else "MISSED")
        print(f"{r['name']:<{width}}  {v:>9}  {r['target'] or '':<7} {verdict:<6} {r['note']}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
