"""tcpevents' cost for `make bench`: CPU per event of tcpevents against its floor
(tests/bench/evfloor.c + tests/bench/bpf/evfloor.bpf.c: the same five tracepoints and namespace
filter, one record of the same size per event, a reader that only counts), over the same burst
of TCP state changes (tests/bench/burst.c: CONNS loopback connections opened and closed back to
back, ten transitions each), and the events lost in that burst.  See docs/bench.md.

Each run: a fresh namespace (run.sh's), the reader started on it (-n /run/netns/NAME, waited
for its ready line), the burst run inside it, 0.3 s for the last records, then the programs'
run time read from /proc/PID/fdinfo of the reader's BPF program fds (run_time_ns, counted while
this module holds a BPF_ENABLE_STATS fd: no sysctl is changed, and the kernel stops counting
when the fd closes), then SIGINT and wait4() for the reader's own rusage.  tcpevents and the
floor run alternately, `runs` times each; CPU per event = (the reader's CPU after its ready line
+ its programs' run_time_ns) / the records it saw.  The reader's CPU up to its ready line
(/proc/PID/schedstat's runtime then: reading the kernel's BTF, the verifier, attaching) is a
fixed cost, not an event's: it is left out of the ratio and printed as a context row.

Expected, per burst of CONNS connections (tests/test_bench_tcpevents.py checks it against
tcpevents): 10 * CONNS + 2 state changes (the listener's CLOSE -> LISTEN and LISTEN -> CLOSE),
CONNS tcp_probe samples (the server's socket receiving the client's FIN while ESTABLISHED),
CONNS timewait records (tcpevents only: the floor writes one record per tracepoint hit).

bench(bindir, benchdir, runs) -> [(name, value, target, ok, note)], like bench_capture.py; a value
is None when it could not be measured (the note says why).  Runs alone too:
    tests/bench/bench_tcpevents.py [--runs N] [--conns N]
"""
import ctypes
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in ("experiments/report", "experiments/guest", "tests"):  # the libraries, lab_proc
    sys.path.insert(0, os.path.join(TOP, _p))
import lab_proc  # noqa: E402

CONNS = 1000           # 10,002 state transitions
PORT = 21600
READY_S = 10.0
SETTLE_S = 0.3         # after the burst, before the run times are read and the reader stopped
TARGET = 1.25
RATIO_NAME = "tcpevents: CPU per event / floor (same burst)"
LOST_NAME = "tcpevents: events lost in a burst of 10,000 transitions"


def expected(conns):
    """{kind: records} one burst of conns connections makes, as tcpevents and the floor see it."""
    state = 10 * conns + 2
    return {"state": state, "tcpevents": state + 2 * conns, "floor": state + conns}


# ---- BPF run-time statistics -------------------------------------------------------------------

BPF_ENABLE_STATS, BPF_STATS_RUN_TIME = 32, 0
NR_BPF = {"x86_64": 321, "aarch64": 280}


def enable_stats():
    """A file descriptor that keeps the kernel's BPF run-time statistics on while it is open
    (bpf(BPF_ENABLE_STATS), 5.8+), or None and why not."""
    nr = NR_BPF.get(platform.machine())
    if nr is None:
        return None, f"no bpf() syscall number for {platform.machine()} here"
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 2)(BPF_STATS_RUN_TIME, 0)
    fd = libc.syscall(nr, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        return None, f"BPF_ENABLE_STATS: {os.strerror(ctypes.get_errno())}"
    return fd, ""


def prog_stats(pid):
    """(run_time_ns, run_cnt, programs) summed over the BPF programs process pid holds open,
    from /proc/PID/fdinfo."""
    ns = cnt = progs = 0
    d = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(d):
        try:
            with open(os.path.join(d, fd)) as f:
                info = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except OSError:
            continue
        if "prog_type" in info and "run_time_ns" in info:
            ns += int(info["run_time_ns"])
            cnt += int(info["run_cnt"])
            progs += 1
    return ns, cnt, progs


# ---- one run -------------------------------------------------------------------------------------

def kv(line):
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def wait_ready(path, proc):
    deadline = time.monotonic() + READY_S
    while True:
        with open(path) as f:
            if "ready " in f.read():
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(path) as f:
                raise RuntimeError(f"{os.path.basename(proc.args[0])}: no ready line: "
                                   f"{f.read().strip()[-300:]}")
        time.sleep(0.01)


def one_run(argv, burst, conns, stats):
    """Run reader argv (given -n PATH of a fresh namespace) over one burst: a dict with cpu (the
    reader's CPU from its ready line to its end, s: its rusage less its runtime at the ready line,
    /proc/PID/schedstat), load (that runtime: BTF, verifier, attach), bpf_ns, run_cnt, progs, and
    the counts (end line, state lines)."""
    with lab_proc.netns("tcplab-bench-ev") as ns, tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen([*argv, "-n", f"/run/netns/{ns}"], stdout=out,
                             stderr=subprocess.STDOUT, text=True)
        try:
            wait_ready(f"/proc/self/fd/{out.fileno()}", p)
            with open(f"/proc/{p.pid}/schedstat") as f:
                ready_ns = int(f.read().split()[0])
            r = lab_proc.run_in_ns(ns, [burst, "-p", PORT, "-n", conns], timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"burst exited {r.returncode}: {r.stderr.strip()}")
            time.sleep(SETTLE_S)
            bpf_ns, run_cnt, progs = prog_stats(p.pid) if stats else (0, 0, 0)
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().splitlines()
    ends = [ln for ln in lines if ln.startswith("end ")]
    if p.returncode != 0 or not ends:
        raise RuntimeError(f"{os.path.basename(argv[0])} exited {p.returncode}: "
                           f"{(lines or ['no output'])[-1]}")
    end = kv(ends[-1])
    state = int(end["state"]) if "state" in end else \
        sum(1 for ln in lines if " event=state " in ln)
    cpu = ru.ru_utime + ru.ru_stime
    return {"cpu": cpu - ready_ns / 1e9, "load": ready_ns / 1e9, "bpf_ns": bpf_ns, "run_cnt": run_cnt,
            "progs": progs, "events": int(end["events"]), "state": state,
            "lost": int(end["lost"]), "missed": end["missed"],
            "unseen": end.get("unseen", "-")}


# ---- the rows, from the runs' numbers (tests/test_bench_tcpevents.py feeds it recorded ones) ----

def per_event(r, stats):
    return (r["cpu"] + (r["bpf_ns"] / 1e9 if stats else 0)) / max(r["events"], 1)


def lost_of(r, want):
    """Events a run did not see: expected - seen, at least what its lost= and missed= say; and
    its unseen= (tracepoint hits of any socket the kernel ran no program for; docs/tcpevents.md),
    "-" where it was not counted."""
    missed = int(r["missed"]) if str(r["missed"]).isdigit() else 0
    return max(want - r["events"], 0), r["lost"], missed, r.get("unseen", "-")


def rows(ev, fl, conns, stats, stats_why=""):
    """The ratio row and the lost row from the runs (lists of one_run() dicts, alternated)."""
    want = expected(conns)
    ratios = [per_event(e, stats) / per_event(f, stats) for e, f in zip(ev, fl)]
    lo, med, hi = min(ratios), statistics.median(ratios), max(ratios)
    m = lambda runs, key: statistics.median(x[key] for x in runs)  # noqa: E731
    us = lambda runs: statistics.median(per_event(x, stats) for x in runs) * 1e6  # noqa: E731
    user = statistics.median((e["cpu"] / e["events"]) / (f["cpu"] / f["events"])
                             for e, f in zip(ev, fl))
    how = ("reader CPU after ready (rusage - schedstat) + BPF run_time_ns" if stats
           else f"reader CPU after ready only (no BPF run time: {stats_why})")
    note = (f"min {lo:.2f} median {med:.2f} max {hi:.2f} over {len(ratios)} runs; {how}; "
            f"tcpevents {us(ev):.2f} us, floor {us(fl):.2f} us per event (medians)")
    if stats:
        note += (f"; in BPF {m(ev, 'bpf_ns') / m(ev, 'events') / 1e3:.2f} vs "
                 f"{m(fl, 'bpf_ns') / m(fl, 'events') / 1e3:.2f} us per event, "
                 f"{m(ev, 'run_cnt'):.0f} program runs (all namespaces')")
    note += f"; the readers alone {user:.2f}"
    lost = [lost_of(e, want["tcpevents"]) for e in ev]
    flost = [lost_of(f, want["floor"]) for f in fl]
    worst = max(x[0] for x in lost)
    ok = all(x[:3] == (0, 0, 0) for x in lost)
    lnote = (f"{conns} connections, {want['state']} transitions: tcpevents saw "
             + ", ".join(str(e["events"]) for e in ev) + f" of {want['tcpevents']} records"
             f" (state {', '.join(str(e['state']) for e in ev)} of {want['state']}), lost= "
             + ",".join(str(x[1]) for x in lost) + " missed=" + ",".join(str(x[2]) for x in lost)
             + " unseen=" + ",".join(str(x[3]) for x in lost)
             + f"; the floor saw {', '.join(str(f['events']) for f in fl)} of {want['floor']}, "
             f"lost {','.join(str(x[0]) for x in flost)}")
    load = m(ev, "load") / m(fl, "load")
    return [(RATIO_NAME, med, f"<= {TARGET}", med <= TARGET, note),
            (LOST_NAME, worst, "= 0", ok, lnote),
            ("tcpevents: CPU to its ready line / floor's (load, attach)", load, None, None,
             f"tcpevents {m(ev, 'load') * 1e3:.1f} ms, floor {m(fl, 'load') * 1e3:.1f} ms "
             f"(medians): BTF, verifier, attach; left out of the ratio above")]


def skipped(why):
    return [(RATIO_NAME, None, f"<= {TARGET}", None, f"skipped: {why}"),
            (LOST_NAME, None, "= 0", None, f"skipped: {why}")]


def bench(bindir, benchdir, runs=5, conns=CONNS):
    tcpevents, floor = os.path.join(bindir, "tcpevents"), os.path.join(benchdir, "evfloor")
    burst = os.path.join(benchdir, "burst")
    why = os.environ.get("TCPLAB_TCPEV_WHY", "").strip().rstrip(";")
    if why:
        return skipped(f"tcpevents and its floor are not built here: {why}")
    for p in (tcpevents, floor, burst):
        if not os.access(p, os.X_OK):
            return skipped(f"{p} is missing (make bench builds it)")
    fd, stats_why = enable_stats()
    try:
        ev, fl = [], []
        for k in range(runs):      # alternated, each first every other run
            pair = [("ev", [tcpevents]), ("fl", [floor])]
            for kind, argv in (pair if k % 2 == 0 else pair[::-1]):
                (ev if kind == "ev" else fl).append(one_run(argv, burst, conns, fd is not None))
    finally:
        if fd is not None:
            os.close(fd)
    return rows(ev, fl, conns, fd is not None, stats_why)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--conns", type=int, default=CONNS)
    a = ap.parse_args()
    build = os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"))
    for r in bench(os.path.join(build, "bin"), os.path.join(build, "bench"), a.runs, a.conns):
        print(r)
