#!/usr/bin/python3
"""run.sh --kernel all: the host's set and every guest kernel side by side (docs/kernel-matrix.md,
"All kernels at once").  run.sh's runner (tcplab_run.py) plans and execs this driver; it is not
meant to be run by hand.  Every kernel's run is a job of this one process (docs/maintainers.md,
"The runner, step by step", steps 6 and 7); only a host's run without root is a run.sh child,
which runs as root of a user namespace of its own (tcplab_run.py's userns_run).

  tcplab_all.py --run-sh PATH [--quick] [--all] [--accel A] [--mtu N] [--out DIR]
                [--allow-foreign-out] [--host-units "U..."] [--guest-units "U..."]
                [--prog P] [--top DIR] [--exp DIR] [--outputs DIR] [--version V] [--bin DIR]

1. Every kernel's package is fetched (or found in the cache) first, one after another (they share
   vm.sh's flock on the kernel cache anyway): `vm.sh --resolve VER` prints its release.  A
   kernel that cannot be had stops everything before a guest starts, with one line naming it.
2. The host's run (`run.sh [SET|UNITS]`) starts at once; the guests start as slots allow:
   guests at once = guests_at_once() below, from MemAvailable, the measured peak of one guest
   and the CPUs.  Each run is planned here (tcplab_plan, on the unit table read once, from the
   arguments `run.sh [--kernel VER] ...` would take), its output directory locked and its
   record, temporary directory and reserve held by this process (tcplab_runstate.start_run);
   its job, experiments/runner/tcplab_guest.py (vm.sh) or tcplab_host.py (as root: the units
   in namespaces of their own), puts each unit's result in place and ends the run; then its
   cleanup (Started.cleanup) runs here.  Each child is a process group (session) of its own;
   its lines (stdout and stderr) are printed on stderr prefixed "[VER] " or "[host] ", with
   the lines run.sh said for that run.
3. SIGINT, SIGTERM, SIGHUP, SIGQUIT, or any error here: every child group gets SIGTERM (run.sh's
   own traps stop the host's units and namespaces; a guest's job stops its vm.sh, whose trap
   stops QEMU); a group still there after STOP_WAIT_S gets SIGKILL (its QEMU dies with it:
   setpriv --pdeathsig); then each guest's run is cleaned up here: what still holds its VM
   work directory, its temporary directory, its record, its locks.
4. Side by side, the I-th of N guests starts its units at another point of their order
   (TCPLAB_ROTATE=I/N, tcplab_plan.py's rotate_plan: where the units' limit_s, summed,
   pass I/N of their sum), so that the guests' long waits on TCP timers do not all fall at
   once.  While two or more guests run, the one furthest behind runs at the CPU priority it
   started with and the others at BEHIND_NICE higher (nicer), re-decided every BALANCE_S: the
   guests run the same units, so the one with the least work done (the limit_s of its finished
   units, summed; of equals, the one whose current unit started last) holds up the matrix's
   end.  Every thread of every process of a guest's run is reniced (setpriority on each
   /proc/PID/task/TID: a process's nice value is its threads', and QEMU's vCPU is a thread).
   The host's run keeps its priority: its timing units (connect-modes, poll-scaling) are not
   emulated.
5. One summary line per kernel (release, units ok/failed/skipped, wall time); exit 0 when every
   child exited 0, else the worst child's status (worst first: 1 failed, 2 usage, 4 skipped).

TCPLAB_ALL_PLAN=1: print the budget line and the run.sh arguments each run is planned from
("host run as: ...", "guest run as: ..."; not root: the host's run.sh command line; releases as
VER: no package is fetched), and exit 0; the tests of the argument handling use it.
"""
import argparse
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

VM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vm.sh")
RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runner")
sys.path.insert(0, RUNNER)
import tcplab_job as tj  # noqa: E402
import tcplab_plan as tp  # noqa: E402
import tcplab_run as trun  # noqa: E402
import tcplab_runstate as rs  # noqa: E402
import tcplab_units as tu  # noqa: E402
GUEST_JOB = os.path.join(RUNNER, "tcplab_guest.py")
HOST_JOB = os.path.join(RUNNER, "tcplab_host.py")
KERNELS = ("5.10", "6.1", "6.12", "7.2")
PROG = "run.sh"

# One guest's peak host memory, measured (docs/kernel-matrix.md "All kernels at once"):
# qemu-system-x86_64's VmHWM (/proc/PID/status) with vm.sh's MEMORY_MB=512 under TCG was
# 310-360 MiB for --quick (tests/bench_kernels.py, the four kernels) but 1,475 MiB for a 6.1
# guest 14 minutes into --all: QEMU's TCG translation cache is 1 GiB by default on a 64-bit host
# (tcg/region.c) and fills over a long run, on top of the guest's 512 MiB.  The budget takes
# the larger, rounded up: 512 MiB + 1 GiB + 64 MiB of QEMU's own.
GUEST_PEAK_KB = 1600 * 1024
# Kept free of guests: the host's own run (its programs, namespaces, reports), the page cache
# the reports and vm.sh's initramfs builds read through, and other users of a shared machine.
# MemAvailable is itself an estimate (Documentation/filesystems/proc.rst), so the reserve is a
# fixed floor of 1 GiB or a tenth of MemTotal, whichever is larger.
RESERVE_MIN_KB = 1024 * 1024
# TCG guests have one CPU each and mostly sleep on TCP timers: one guest's qemu alone used
# 0.47-0.54 of a core over a --quick run (utime+stime over its life, tests/bench_kernels.py), so
# two guests per CPU fill a CPU without queueing long behind each other.
GUESTS_PER_CPU = 2
STOP_WAIT_S = 40      # run.sh's own cleanup: vm.sh gives QEMU 5 s, then namespaces, temp dirs
# The guests ahead yield to the one furthest behind (docs/kernel-matrix.md, "All kernels at
# once"): nice +3 is about half the CPU weight of nice 0 (kernel/sched/core.c,
# sched_prio_to_weight: 1024 against 526), so the one behind gets more of a CPU without the
# others stopping.
BEHIND_NICE = 3
BALANCE_S = 5
# a guest's "UNIT: done rc=N (...)" line (vm.sh), as the driver prints it
UNIT_DONE = re.compile(r"^vm: \[[0-9.]+ s\] \S+: done rc=")
UNIT_START = re.compile(r"^vm: \[[0-9.]+ s\] \S+: start \(at most ([0-9]+) s\)")
EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 1, 2, 4
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def reserve_kb(mem_total_kb):
    """The memory kept free of guests: max(1 GiB, MemTotal / 10)."""
    return max(RESERVE_MIN_KB, mem_total_kb // 10)


def guests_at_once(kernels, mem_available_kb, mem_total_kb, peak_kb, cpus,
                   per_cpu=GUESTS_PER_CPU):
    """(budget_kb, n): budget = MemAvailable - reserve (never below 0); n = min(kernels,
    budget // peak, cpus * per_cpu), at least 1 (one guest at a time is what --kernel VER does
    whatever the memory, and vm.sh's MEMORY_MB is the guest's bound, not the host's)."""
    if kernels < 1 or peak_kb < 1 or cpus < 1 or per_cpu < 1:
        raise ValueError("kernels, peak, cpus and per_cpu must be positive")
    budget = max(0, mem_available_kb - reserve_kb(mem_total_kb))
    return budget, max(1, min(kernels, budget // peak_kb, cpus * per_cpu))


def read_meminfo(path="/proc/meminfo"):
    """{'MemTotal': kB, 'MemAvailable': kB, ...} from /proc/meminfo."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"([A-Za-z0-9_()]+):\s+([0-9]+)", line)
            if m:
                out[m.group(1)] = int(m.group(2))
    if "MemTotal" not in out or "MemAvailable" not in out:
        raise ValueError(f"{path}: no MemTotal or MemAvailable line")
    return out


STATUS_RANK = {0: 0, EXIT_SKIP: 1, EXIT_USAGE: 2}     # anything else (1, signals) ranks 3


def worst(statuses):
    """The exit status of the whole run: 0 when all are 0, else the worst child's."""
    return max(statuses, key=lambda s: STATUS_RANK.get(s, 3), default=0)


FINISHED = re.compile(r"finished in [0-9]+ s: ([0-9]+) unit\(s\) ran, ([0-9]+) failed.*?"
                      r"(?:, ([0-9]+) skipped \(.*)?; outputs in (.*)/$")


def parse_finished(line):
    """run.sh's last log line -> (ran, failed, skipped, outputs dir), or None."""
    m = FINISHED.search(line)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), m.group(4)


class Job:
    def __init__(self, tag, argv, env=None):
        self.tag, self.argv, self.env = tag, argv, env
        self.proc = None
        self.t0 = self.t1 = None
        self.rc = None
        self.finished = None
        self.last = ""
        self.release = None
        self.work_done = 0          # the limit_s of the units done, summed
        self.unit_limit = 0         # the current unit's limit_s (its start line's "at most N s")
        self.unit_started = 0.0     # time.monotonic() of its current unit's start line
        self.nice = 0               # the increment the balancer last gave it


class GuestRefused(Exception):
    """A guest's run that could not start: its one line said, the status run.sh would exit with."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


class Context:
    """What every guest's run shares: the options, the table (read once), run.sh's PROG, TOP,
    EXP, OUTPUTS and tcplab's version."""

    def __init__(self, o, table):
        self.o, self.table = o, table
        self.prog, self.top, self.exp, self.outputs = o.prog, o.top, o.exp, o.outputs
        self.version = o.version
        self.bin = getattr(o, "bin", "") or os.path.join(self.top, "build", "bin")


class RunJob(Job):
    """A run of this command line, a job of this process (docs/maintainers.md, "The runner, step
    by step", steps 6 and 7): its plan, made here (tcplab_plan, on the table read once), its
    output directory locked and its record, temporary directory and reserve held by this process
    (tcplab_runstate.start_run), then its job (a guest's tcplab_guest.py, the host's
    tcplab_host.py: the units, each unit's result put in place, the run's end); once that is
    gone, the rest of run.sh's cleanup (Started.cleanup).  It replaced one run.sh child per
    kernel.  The job's command line is a single run's (tcplab_run.job_argv), what the plan
    decides from tcplab_plan.job_args.  A subclass says what its job is (PROGRAM, run_args,
    running)."""

    PROGRAM = ""

    def __init__(self, tag, plan_args, env, release, out):
        super().__init__(tag, [], env)
        self.plan_args, self.release, self.out = plan_args, release, out
        self.run = None             # the rs.Started of its run, until cleaned up

    def log(self, d, msg):
        d.say(self.tag, f"{time.strftime('%H:%M:%S')} [run] {msg}")

    def begin(self, d, ctx):
        """The run started and its first lines said; → the job's argv.  GuestRefused after its
        one line, with nothing of the run left."""
        tp.SAY = lambda line: d.say(self.tag, line)     # the plan's lines, as this run's
        try:
            o, p = tp.plan(ctx.exp, self.plan_args, self.env, table=ctx.table)
        finally:
            tp.SAY = None
        if p.action != "run":
            self.last = f"{ctx.prog}: {p.msg}"
            d.say(self.tag, self.last)
            raise GuestRefused(p.status or EXIT_FAIL)
        try:
            self.run, lines = rs.start_run(ctx.prog, self.out, ctx.o.allow_foreign_out,
                                           ctx.outputs, "tcplab", ctx.top)
        except rs.Refused as e:
            for line in e.said:
                self.log(d, line)
            self.last = f"{ctx.prog}: {e.reason(ctx.prog)}"
            d.say(self.tag, self.last)
            raise GuestRefused(e.status) from None
        for line in lines:
            self.log(d, line)
        # what run.sh exported: its run's id and --quick
        self.env = dict(self.env, TL_RUN_ID=self.run.run_id)
        if o.quick:
            self.env["TL_QUICK"] = "1"
        self.running(d, o, p)
        fin = trun.fin_args(ctx.prog, ctx.top, ctx.exp, sys.executable, self.run, o, p)
        return trun.job_argv(sys.executable, self.PROGRAM, fin, self.run, ctx.version,
                             ctx.o.allow_foreign_out, self.run_args(ctx),
                             tp.job_args(o, ctx.table, p)[1])

    def running(self, d, o, p):
        """The run's "running" line(s), and what else its job's environment takes."""
        raise NotImplementedError

    def run_args(self, ctx):
        """The job's own arguments that belong to the run, not to the plan."""
        raise NotImplementedError

    def end(self, d, ctx):
        """After the job: run.sh's word on how it ended, then its cleanup (once)."""
        rc = self.rc
        if rc is not None and rc < 0:
            rc = 128 - rc
        name = os.path.basename(self.PROGRAM)
        if d.stopping:              # stopped by this process: "[all] interrupted" said why
            pass
        elif rc is not None and rc not in (0, EXIT_FAIL, EXIT_USAGE, EXIT_SKIP, 141):
            if rc > 128:
                self.last = (f"{ctx.prog}: the run's end ({name}) was killed by "
                             f"SIG{tj.signal_name(rc - 128)}: its reports, failed outputs or "
                             "last lines may be missing")
            else:
                self.last = (f"{ctx.prog}: the run's end ({name}) failed with status "
                             f"{rc} (above): its reports, failed outputs or last lines may be "
                             "missing")
            d.say(self.tag, self.last)
            rc = EXIT_FAIL
        self.rc = rc
        if self.run is not None:
            run, self.run = self.run, None
            for line in run.cleanup(ctx.top):
                self.log(d, line)


class GuestJob(RunJob):
    """A guest's run: its job, tcplab_guest.py, runs vm.sh."""

    PROGRAM = GUEST_JOB

    def running(self, d, o, p):
        # the units' knobs, as run.sh exported them (vm.sh hands a guest the caller's TL_*)
        self.env.update(p.knob_env)
        self.log(d, f"running {' '.join(p.run)} in Debian kernel {o.kernel} ({o.accel})")
        if p.rotate_note:
            self.log(d, p.rotate_note)

    def run_args(self, ctx):
        return trun.guest_args(ctx.outputs)


class HostJob(RunJob):
    """The host's run, as root: its job, tcplab_host.py, runs each unit in network namespaces
    of its own, named tcplab-<this process's pid>-..., as run.sh's were tcplab-<its pid>-....
    (Not root: the host's run is a run.sh child, which becomes root of a user namespace of its
    own: tcplab_run.py's userns_run.)"""

    PROGRAM = HOST_JOB

    def running(self, d, o, p):
        self.log(d, f"running {' '.join(p.run)}")

    def run_args(self, ctx):
        return trun.host_args(ctx.bin)


def furthest_behind(guests):
    """The guest whose run holds up the end: the least work done, counted as the units' limit_s
    (the guests run the same units, each from another point of their order, so the one with the
    smallest sum has the most left), and of equals the one whose current unit started last."""
    return min(guests, key=lambda g: (g.work_done, -g.unit_started))


def process_tree(root):
    """root and every process below it, from /proc's ppid fields."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        kids.setdefault(int(st[st.rindex(")") + 2:].split()[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def renice_tree(root, nice):
    """Set every thread of root's tree to nice value `nice`; returns the threads set.  A thread
    or process that ended meanwhile is passed over."""
    n = 0
    for pid in process_tree(root):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                n += 1
            except (ProcessLookupError, PermissionError):
                pass
    return n


class Driver:
    def __init__(self, opts):
        self.opts = opts
        self.out_lock = threading.Lock()
        self.done = queue.Queue()
        self.running = []
        self.runs = []              # the runs started here (RunJob), each cleaned up once
        self.stopping = False       # stop_all is under way
        self.ctx = None
        self.base_nice = os.getpriority(os.PRIO_PROCESS, 0)

    def say(self, tag, line):
        with self.out_lock:
            sys.stderr.write(f"[{tag}] {line}\n" if tag else f"{line}\n")
            sys.stderr.flush()

    def _pump(self, job):
        for raw in job.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            job.last = line or job.last
            m = UNIT_START.match(line)
            if m:
                job.unit_started = time.monotonic()
                job.unit_limit = int(m.group(1))
            elif UNIT_DONE.match(line):
                job.work_done += job.unit_limit
                job.unit_limit = 0
            f = parse_finished(line)
            if f:
                job.finished = f
            self.say(job.tag, line)
        job.rc = job.proc.wait()
        job.t1 = time.monotonic()
        self.done.put(job)

    def start(self, job):
        job.t0 = time.monotonic()
        with deferred():        # a signal meanwhile: at the end, the job known to stop_all
            if isinstance(job, RunJob):
                try:
                    job.argv = job.begin(self, self.ctx)
                except GuestRefused as e:
                    job.rc, job.t1 = e.status, time.monotonic()
                    self.done.put(job)
                    return
                self.runs.append(job)
            job.proc = subprocess.Popen(job.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, env=job.env,
                                        start_new_session=True)
            self.running.append(job)
        threading.Thread(target=self._pump, args=(job,), daemon=True).start()

    def ended(self, job):
        """A job gone: its run cleaned up, whatever signal comes meanwhile."""
        if isinstance(job, RunJob):
            with deferred():
                job.end(self, self.ctx)

    def balance(self, guests):
        """One look: the guest furthest behind at its starting priority, the others BEHIND_NICE
        nicer; only a guest whose share changes is reniced.  Returns the one behind, or None
        with fewer than two guests running."""
        live = [g for g in guests if g.proc is not None and g.rc is None]
        if len(live) < 2:
            for g in live:
                self.set_nice(g, 0)
            return None
        behind = furthest_behind(live)
        for g in live:
            self.set_nice(g, 0 if g is behind else BEHIND_NICE)
        return behind

    def set_nice(self, job, inc):
        if job.nice != inc:
            renice_tree(job.proc.pid, self.base_nice + inc)
            job.nice = inc

    def stop_all(self):
        """SIGTERM to every child's group, then SIGKILL to what is left after STOP_WAIT_S; then
        each run started here cleaned up."""
        self.stopping = True
        live = [j for j in self.running if j.rc is None]
        for j in live:
            if isinstance(j, RunJob):       # what its run.sh's trap said
                j.log(self, "terminated (SIGTERM): stopping every unit")
            try:
                os.killpg(j.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + STOP_WAIT_S
        for j in live:
            try:
                j.proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for j in live:
            try:
                os.killpg(j.proc.pid, signal.SIGKILL)   # the group: whatever it left
            except (ProcessLookupError, PermissionError):
                pass
            j.proc.wait()
        for g in self.runs:         # their runs' cleanup: QEMU, temporary directories, records
            if g.run is not None:
                if g.rc is None:        # its job not started (Popen failed), or just reaped
                    g.rc = g.proc.returncode if g.proc is not None else EXIT_FAIL
                g.end(self, self.ctx)


class Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


DEFER = {"on": False, "sig": 0}


def on_signal(signum, _frame):
    if DEFER["on"]:         # inside deferred(): acted on at its end
        DEFER["sig"] = DEFER["sig"] or signum
        return
    raise Stop(signum)


@contextlib.contextmanager
def deferred():
    """A stretch a signal does not cut: a guest's run started and its job known, or its cleanup
    run whole; the signal's Stop comes at the end."""
    DEFER["on"] = True
    try:
        yield
    finally:
        DEFER["on"] = False
        sig, DEFER["sig"] = DEFER["sig"], 0
        if sig:
            raise Stop(sig)


def child_args(o, kernel=None):
    """The arguments every child gets (run.sh's own), besides --kernel and --out."""
    a = []
    if kernel is not None and o.accel:
        a += ["--accel", o.accel]
    if o.quick:
        a.append("--quick")
    if o.all:
        a.append("--all")
    if o.mtu:
        a += ["--mtu", o.mtu]
    if o.allow_foreign_out:
        a.append("--allow-foreign-out")
    units = o.guest_units if kernel is not None else o.host_units
    return a + units.split()


def resolve(driver, kernel, accel):
    """vm.sh --resolve: (status, release or the last line vm.sh printed)."""
    argv = [VM] + (["--accel", accel] if accel else []) + ["--resolve", kernel]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    job = Job(kernel, argv)     # in driver.running while it runs, so stop_all() stops it
    job.proc = p
    driver.running.append(job)
    last = ""
    for raw in p.stderr:
        last = raw.decode("utf-8", "replace").rstrip("\n") or last
        driver.say(kernel, last)
    out = p.stdout.read().decode("utf-8", "replace").split()
    rc = job.rc = p.wait()
    driver.running.remove(job)
    if rc == 0 and out:
        return 0, out[0]
    return (rc or EXIT_FAIL), last or f"vm.sh --resolve exited {rc}"


def main(argv):
    ap = argparse.ArgumentParser(prog="tcplab_all.py")
    ap.add_argument("--run-sh", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--accel", default="")
    ap.add_argument("--mtu", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--allow-foreign-out", action="store_true")
    ap.add_argument("--host-units", default="")
    ap.add_argument("--guest-units", default="")
    # run.sh's PROG, TOP, EXP (its units table), OUTPUTS and TCPLAB_VERSION, for the guests' runs
    ap.add_argument("--prog", default=PROG)
    ap.add_argument("--top", default=os.path.dirname(os.path.dirname(RUNNER)))
    ap.add_argument("--exp", default=os.path.dirname(RUNNER))
    ap.add_argument("--outputs", default="")
    ap.add_argument("--version", default="unknown")
    ap.add_argument("--bin", default="")        # run.sh's TL_BIN, the host's units' programs
    o = ap.parse_args(argv)
    o.outputs = o.outputs or os.path.join(o.top, "outputs")

    mem = read_meminfo()
    cpus = len(os.sched_getaffinity(0))
    budget, n = guests_at_once(len(KERNELS), mem["MemAvailable"], mem["MemTotal"],
                               GUEST_PEAK_KB, cpus)
    plan_only = os.environ.get("TCPLAB_ALL_PLAN") == "1"
    driver = Driver(o)
    try:
        table = tu.load(o.exp)      # read once, for every guest's plan
    except tu.TableError as e:
        print(f"{o.prog}: {e}", file=sys.stderr)
        return EXIT_FAIL
    driver.ctx = Context(o, table)
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    status = 0
    try:
        # the runner (tcplab_run.py) execs this driver with its stop signals blocked: one that
        # came while Python started is acted on here, as a Stop
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        driver.say("all", f"memory budget {budget // 1024} MiB (MemAvailable "
                   f"{mem['MemAvailable'] // 1024} MiB - reserve {reserve_kb(mem['MemTotal']) // 1024} MiB), "
                   f"one guest's measured peak {GUEST_PEAK_KB // 1024} MiB, {cpus} CPU(s): "
                   f"{n} guest(s) at once of {len(KERNELS)}, and the host's run")
        releases = {}
        for k in KERNELS:
            if plan_only:
                releases[k] = "VER"
                continue
            rc, what = resolve(driver, k, o.accel)
            if rc != 0:
                print(f"{PROG}: [{k}] cannot get the kernel, so no guest is started: {what}",
                      file=sys.stderr)
                return rc
            releases[k] = what
        env = dict(os.environ, TCPLAB_SIDE_BY_SIDE=str(n))
        env.pop("TCPLAB_ALL_PLAN", None)
        host_env = dict(os.environ)
        host_env.pop("TCPLAB_SIDE_BY_SIDE", None)
        rel = os.uname().release
        host_args = child_args(o) + (["--out", os.path.join(o.out, rel)] if o.out else [])
        if os.geteuid() == 0 and not os.environ.get("TCPLAB_USERNS"):
            host = HostJob("host", host_args, host_env, rel, os.path.join(o.out or o.outputs, rel))
        else:       # run.sh, which runs it as root of a user namespace of its own
            host = Job("host", [o.run_sh] + host_args, host_env)
        guests = []
        for i, k in enumerate(KERNELS):
            # side by side, each guest starts its units at another point of their order
            # (tcplab_plan.py's rotate_plan): their long timer waits then fall apart
            genv = dict(env, TCPLAB_ROTATE=f"{i % n}/{n}") if n > 1 else env
            out = os.path.join(o.out or o.outputs, releases[k])
            guests.append(GuestJob(k, ["--kernel", k] + child_args(o, k) +
                                   (["--out", out] if o.out else []), genv, releases[k], out))
        if plan_only:
            if isinstance(host, HostJob):   # planned here, as run.sh would plan these
                driver.say(host.tag, f"host run as: {o.run_sh} {' '.join(host.plan_args)}")
            else:
                driver.say(host.tag, " ".join(host.argv))
            for g in guests:        # a guest's run is planned as run.sh would plan these
                driver.say(g.tag, f"guest run as: {o.run_sh} {' '.join(g.plan_args)}")
            return 0
        t0 = time.monotonic()
        driver.start(host)
        pending = list(guests)
        running_guests = 0
        while pending and running_guests < n:
            driver.start(pending.pop(0))
            running_guests += 1
        left = 1 + len(guests)
        moves, behind = 0, None
        while left:
            try:
                job = driver.done.get(timeout=BALANCE_S)
            except queue.Empty:
                b = driver.balance(guests)
                if b is not None and b is not behind:
                    moves += behind is not None
                    behind = b
                continue
            left -= 1
            driver.ended(job)
            if job is not host:
                running_guests -= 1
                if pending:
                    driver.start(pending.pop(0))
                    running_guests += 1
        wall = time.monotonic() - t0
        if behind is None:
            driver.say("all", "at most one guest ran at a time: no guest yielded to another")
        else:
            driver.say("all", f"the guest furthest behind ran at nice {driver.base_nice}, the "
                       f"others at {driver.base_nice + BEHIND_NICE}; the one behind changed "
                       f"{moves} time(s)")
        for j in [host] + guests:
            rel = j.release or os.uname().release
            if j.finished:
                ran, failed, skipped, outdir = j.finished
                rel = os.path.basename(outdir.rstrip("/")) or rel
                what = f"{ran} ok, {failed} failed, {skipped} skipped"
            else:
                what = f"no result: {j.last[:200]}"
            driver.say("all", f"{j.tag}: {rel}: {what}, {j.t1 - j.t0:.0f} s, exit {j.rc}")
        status = worst([j.rc for j in [host] + guests])
        driver.say("all", f"finished in {wall:.0f} s; {'every kernel succeeded' if status == 0 else f'exit {status}'}")
        return status
    except Stop as e:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        driver.say("all", f"interrupted (SIG{signal.Signals(e.signum).name[3:]}): stopping every kernel's run")
        status = 128 + e.signum
        return status
    finally:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        driver.stop_all()


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Stop as stop:    # a second signal before the first one's handler ignored the rest
        sys.exit(128 + stop.signum)
    except (OSError, ValueError) as err:
        print(f"{PROG}: --kernel all: {err}", file=sys.stderr)
        sys.exit(EXIT_FAIL)
