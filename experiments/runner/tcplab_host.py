#!/usr/bin/python3
"""tcplab_host — a host run's job: every unit in network namespaces of its own, what each left
put in place, then the end of the run.

The runner's second part (docs/maintainers.md, "The runner, step by step"): run.sh has made the
plan, locked the output directory, made the run's temporary directory and taken the reserve;
this program then runs the units (those not `alone` together, then each `alone` one by itself),
each in its own network namespace(s) (experiments/lib/netns.sh, and the wire's pair,
experiments/lib/wire.sh), in a process group of its own, its stderr copied by tee to run.sh's
stderr and to log/UNIT.txt; stops a unit at its limit_s; reaps it and all it left; puts its raw
directory in place or fails or skips it with its reason; and ends the run as tcplab_finish.py
does, in the same process.  It replaced run.sh's run_host, start_unit, wait_units, stop_unit,
finish_unit and disk_check.

    tcplab_host.py --t0 EPOCH STATE... JOB... HOST... -- UNIT...

STATE is tcplab_finish.py's, JOB tcplab_job.py's; HOST:
    --bin DIR           the programs (run.sh's TL_BIN), each unit's TL_BIN
    --quick             TL_QUICK=1 for each unit
    --ns-name NAME      the units' namespaces are NAME-<random>-<unit> (run.sh: tcplab-<its
                        pid>), each named in the run's record (--record) before it is made
    --alone U           a unit the table runs alone, after the others
    --netns U 2         a unit with a second namespace (TL_NS2)
    --wire U MTU        a unit on the wire (a veth pair to a server namespace), its MTU
    --knob-env U NAME VALUE   each knob of U and its value: TL_KNOB_NAME=VALUE in its environment
    --reserve-kb N      the reserve's size (the line that gives it back names it)

Exit: tcplab_finish.py's.  SIGTERM (run.sh's cleanup) or SIGHUP kills every unit still running
(its process group; run.sh's cleanup then deletes the namespaces the record names, and every
process in them) and ends this program with 128+N and nothing more said; inside an install's
two renames, or while a namespace is being made, at their end.  SIGINT and SIGQUIT stay ignored
as run.sh started it, and so for the units, as they were for run.sh's own background units.

Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import os
import random
import signal
import stat
import subprocess
import time

import tcplab_finish as tf
import tcplab_job as tj
import tcplab_runstate as rs
import tcplab_units as tu

STOP_GRACE_S = 3.0      # stop_unit: SIGTERM (its collect script still writes what it has),
                        # then SIGKILL
LOG_GRACE_S = 2.5       # tee's time to copy a reaped unit's last words, then SIGKILL
POLL_S = 0.1


def seconds():
    """bash's SECONDS: whole seconds of the wall clock, so a unit's limit and its "N s" count as
    run.sh's did, and never more than the run's "finished in N s" (time.time() too)."""
    return int(time.time())


class Unit:
    """One unit started: its process (None: it failed before it could start, STATUS then),
    its namespaces, its tee."""

    def __init__(self, name):
        self.name = name
        self.proc = self.tee = None
        self.status = None
        self.ns = []
        self.t0 = seconds()
        self.timed_out = self.disk_full = False

    def gone(self):
        return self.proc is None or self.proc.poll() is not None


class HostRun(tj.JobRun):
    """tcplab_job's JobRun, and what the host job adds to it."""

    ARITY = dict(tj.JobRun.ARITY, **{
        "--bin": 1, "--quick": 0, "--ns-name": 1, "--alone": 1, "--netns": 2, "--wire": 2,
        "--knob-env": 3, "--reserve-kb": 1})

    def __init__(self, argv):
        self.bin, self.quick, self.ns_name = "", False, "tcplab"
        self.alone, self.netns, self.wire, self.knob_env = set(), {}, {}, {}
        self.reserve_kb = 4096
        super().__init__(argv)
        self.units = self.rest
        for u in self.units:
            if u not in self.report:
                raise tf.BadCall(f"unit {u!r} has no --unit")
        lib = os.path.join(self.top, "experiments", "lib")
        self.netns_sh, self.wire_sh = os.path.join(lib, "netns.sh"), os.path.join(lib, "wire.sh")

    def option(self, opt, v):
        if opt == "--quick":
            self.quick = True
        elif opt == "--alone":
            self.alone.add(v[0])
        elif opt == "--netns":
            self.netns[v[0]] = v[1]
        elif opt == "--wire":
            self.wire[v[0]] = v[1]
        elif opt == "--knob-env":
            self.knob_env.setdefault(v[0], []).append((v[1], v[2]))
        elif opt == "--reserve-kb":
            self.reserve_kb = self._number(opt, v[0])
        elif opt in ("--bin", "--ns-name"):
            setattr(self, opt[2:].replace("-", "_"), v[0])
        else:
            super().option(opt, v)

    # ---- a unit's namespaces and processes -------------------------------------------------

    def helper(self, argv, **kw):
        """A shell helper (netns.sh, wire.sh) run to its end: a SIGTERM meanwhile is acted on
        after it (never a namespace half made and not yet deleted), and it dies with this
        program (--pdeathsig)."""
        with self.child.whole():
            return subprocess.run(["setpriv", "--pdeathsig", "KILL"] + argv, **kw)

    def make_ns(self, unit, name):
        """runstate.sh's make_ns: NAME in the run's record first (an interrupt from then on, or
        the reaper after a SIGKILL, finds it), then made; False with its reason on stderr."""
        rs.record_add(self.record, "ns", name)
        unit.ns.append(name)
        return self.helper(["bash", self.netns_sh, "create", name]).returncode == 0

    def cannot_start(self, unit, why):
        """A unit that fails before its collect script runs: status.txt says why, exit 1."""
        d = os.path.join(self.tmp, "raw", unit.name)
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "status.txt"), "wb") as f:
                f.write(tf.enc(f"failed: {why}\n"))
        except OSError as e:
            tf.write(2, f"{self.prog}: {e.filename or d}: {e.strerror}\n")
            self.log(f"{unit.name}: could not write its status.txt (above)")
        unit.status = 1

    def start_unit(self, u):
        """run.sh's start_unit: U in its namespace(s), in a process group of its own (its pid
        the group's id), its stderr through tee to run.sh's stderr and log/U.txt."""
        unit = Unit(u)
        self.child.units[u] = unit
        self.started[u] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        raw = os.path.join(self.tmp, "raw")
        os.makedirs(raw, exist_ok=True)
        ns = f"{self.ns_name}-{random.randrange(32768)}{random.randrange(32768)}-{u}"[:60]
        env = [f"TL_BIN={self.bin}"] + (["TL_QUICK=1"] if self.quick else []) + \
            [f"TL_KNOB_{k.upper()}={v}" for k, v in self.knob_env.get(u, [])]
        if not self.make_ns(unit, ns):
            self.cannot_start(unit, f"cannot make namespace {ns} (above)")
            return
        where = f"namespace {ns}"
        if self.netns.get(u) == "2":
            ns2 = ns[:57] + "-ns2"
            if not self.make_ns(unit, ns2):
                self.cannot_start(unit, f"cannot make namespace {ns2} (above)")
                return
            env.append(f"TL_NS2={ns2}")
            where += f" (and {ns2})"
        elif u in self.wire:
            srv, mtu = ns[:58] + "-s", self.wire[u]
            if not self.make_ns(unit, srv):
                self.cannot_start(unit, f"cannot make namespace {srv} (above)")
                return
            r = self.helper(["sh", self.wire_sh, "create", ns, srv, mtu], stderr=subprocess.PIPE)
            if r.returncode != 0:       # the unit's failure, with wire.sh's reason
                first = tf.dec(r.stderr.replace(b"\0", b"")).split("\n")[0]
                self.cannot_start(unit, f"cannot make the wire: {first}")
                return
            env += ["TL_WIRE=1", f"TL_NS_SERVER={srv}", f"TL_MTU={mtu}"]
            where += f", wired to {srv} (veth, MTU {mtu})"
        log = os.path.join(self.tmp, "log")
        os.makedirs(log, exist_ok=True)
        # tee, not Python's own copy: it outlives this program as long as the unit writes, and
        # -p: a closed stderr stops neither the copy to the file nor the unit (no SIGPIPE)
        r_fd, w_fd = os.pipe()
        try:
            with self.child.whole():    # a SIGTERM meanwhile kills both once both are known
                unit.tee = subprocess.Popen(["tee", "-p", "--", os.path.join(log, u + ".txt")],
                                            stdin=r_fd, stdout=2)
                script = tu.collect_script(self.exp, u, self.report[u])
                unit.proc = subprocess.Popen(
                    [tf.enc(a) for a in ["ip", "netns", "exec", ns, "env", *env, "sh", script,
                                         os.path.join(raw, u)]],
                    stderr=w_fd, start_new_session=True)
        finally:
            os.close(r_fd)
            os.close(w_fd)
        self.log(f"{u}: started in {where}")

    def netns_pids(self, ns):
        r = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        return [int(p) for p in r.stdout.split() if p.isdigit()]

    def signal_unit(self, unit, sig):
        """run.sh's signal_unit: SIG to the whole of a unit, its process group and every process
        in its namespaces, wherever a fixture moved to."""
        if unit.proc is not None and unit.name in self.child.units:
            try:
                os.killpg(unit.proc.pid, sig)
            except OSError:
                pass
        for ns in unit.ns:
            for pid in self.netns_pids(ns):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

    def stop_unit(self, unit):
        """SIGTERM (and SIGCONT, so a stopped process gets it) to the whole unit, so its collect
        script can still write what it has; SIGKILL to what is left 3 s later."""
        self.signal_unit(unit, signal.SIGTERM)
        self.signal_unit(unit, signal.SIGCONT)
        end = time.monotonic() + STOP_GRACE_S
        while not unit.gone() and time.monotonic() < end:
            time.sleep(POLL_S)
        self.signal_unit(unit, signal.SIGKILL)

    def log_end(self, unit):
        """tee ends at its pipe's end of file, once every writer is gone; polled for 2.5 s, then
        SIGKILL: a stopped tee (SIGSTOP) would hold a SIGTERM pending for ever."""
        if unit.tee is None:
            return
        try:
            unit.tee.wait(timeout=LOG_GRACE_S)
        except subprocess.TimeoutExpired:
            unit.tee.kill()
            unit.tee.wait()

    # ---- the end of a unit -----------------------------------------------------------------

    def finish_unit(self, u):
        """run.sh's finish_unit: reap U and everything it left, then its result."""
        unit = self.child.units[u]
        if unit.proc is not None:
            rc = unit.proc.wait()
            status = 128 - rc if rc < 0 else rc
        else:
            status = unit.status
        self.signal_unit(unit, signal.SIGKILL)      # what it left running
        del self.child.units[u]
        for ns in unit.ns:
            self.helper(["bash", self.netns_sh, "delete", ns])
        self.log_end(unit)
        self.rc[u], self.ran[u] = str(status), str(seconds() - unit.t0)
        d = os.path.join(self.tmp, "raw", u)
        self.knob_record(u, d)
        self.tidy(d)
        secs = seconds() - unit.t0
        # a unit that fails on a full disk (it could not write) says so
        full = f"; {self.disk_full_words()}" if self.disk_full or self.disk_is_full() else ""
        lines = self.status_lines(os.path.join(d, "status.txt"))
        first = lines[0] if lines else ""
        if unit.disk_full:
            self.unit_failed(u, f"failed: stopped after {secs} s: {self.disk_full_words()}")
        elif unit.timed_out:
            self.unit_failed(u, f"timed out after {self.limit[u]} s")
        elif status == tj.UNIT_SKIPPED and any(line.startswith("skipped: ") for line in lines):
            self.unit_skipped(u, first.removeprefix("skipped: ") if first.startswith("skipped: ")
                              else "")
        elif status != 0:
            # the collect script's own reason (tl_die writes it), else how it ended
            why = first.removeprefix("failed: ") if first.startswith("failed: ") else ""
            if not why and status > 128:
                why = "killed by SIG" + tj.signal_name(status - 128)
            self.unit_failed(u, f"failed: {why or f'exit {status}'} "
                             f"(exit {status} after {secs} s{full})")
        elif os.path.lexists(os.path.join(d, "status.txt")):
            self.unit_failed(u, f"failed: exit 0 after writing status.txt: {first}")
        elif not self.install(d, os.path.join(self.out, "raw", u)):
            # its raw directory stays where it is, and the unit fails with the reason
            self.unit_failed(u, "failed: its raw directory could not be put in place: "
                             + self.install_error.split("\n")[-1])
        else:
            self.done.append(u)
            self.log(f"{u}: done in {secs} s")

    @staticmethod
    def tidy(d):
        """stderr files that stayed empty, and the fifos of a unit that was stopped."""
        for top, dirs, files in os.walk(d):
            for name in files:
                p = os.path.join(top, name)
                try:
                    st = os.lstat(p)
                    if stat.S_ISFIFO(st.st_mode) or (
                            name.endswith(".err") and stat.S_ISREG(st.st_mode) and st.st_size == 0):
                        os.unlink(p)
                except OSError:
                    pass

    # ---- the units, and a full disk --------------------------------------------------------

    def disk_check(self, left=()):
        """On a full disk (once): every unit of LEFT still running stopped, marked, and the
        reserve given back (docs/reliability.md, "A full disk")."""
        if self.disk_full or not self.disk_is_full():
            return
        self.disk_full = True
        running = [u for u in left if not self.child.units[u].gone()]
        self.log(f"{self.disk_full_words()}: "
                 + (f"stopping {' '.join(running)}, and " if running else "")
                 + f"giving back the {self.reserve_kb // 1024} MiB kept for the outputs")
        for u in running:
            self.child.units[u].disk_full = True
            self.stop_unit(self.child.units[u])
        self.give_reserve()

    def wait_units(self, left):
        """Until each of LEFT has ended, or was stopped at its limit_s (as kselftest's runner
        does), and finished."""
        while left:
            self.disk_check(left)
            still = []
            for u in left:
                unit = self.child.units[u]
                if unit.gone():
                    self.finish_unit(u)
                elif seconds() - unit.t0 >= int(self.limit[u]):
                    self.log(f"{u}: timed out after {self.limit[u]} s (limit_s in "
                             "experiments/units): stopping it")
                    unit.timed_out = True
                    self.stop_unit(unit)
                    self.finish_unit(u)
                else:
                    still.append(u)
            left = still
            if left:
                time.sleep(POLL_S)

    def missing(self):
        return "" if self.t0 is not None and self.tmp and self.record else \
            "needs --t0, --tmp and --record"

    def run_units(self, child):
        """run.sh's run_host: the units not alone together, then each alone one by itself."""
        self.child = child
        for u in self.units:
            if u not in self.alone:
                self.start_unit(u)
        self.wait_units([u for u in self.units if u not in self.alone])
        for u in self.units:
            if u not in self.alone:
                continue
            self.disk_check()
            if self.disk_full:
                self.unit_failed(u, f"failed: not started: {self.disk_full_words()}")
                continue
            self.start_unit(u)
            self.wait_units([u])
        self.give_reserve()     # no unit writes any more: the room is the reports'


class HostChild(tj.JobChild):
    """tcplab_job's JobChild, and the units: SIGTERM (or SIGHUP) kills each unit still running
    (its process group) and its tee, at once, whatever else is under way."""

    def __init__(self):
        super().__init__()
        self.units = {}         # name -> Unit, started and not yet reaped
        self.catch(signal.SIGHUP)

    def kill_units(self):
        for unit in list(self.units.values()):
            # the group until the unit is finished (its leader reaped, its leftovers may live)
            if unit.proc is not None:
                try:
                    os.killpg(unit.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            if unit.tee is not None and unit.tee.returncode is None:
                try:
                    os.kill(unit.tee.pid, signal.SIGKILL)
                except OSError:
                    pass

    def _stop(self, sig, frame):
        self.stopped = sig
        self.kill_units()
        super()._stop(sig, frame)

    def exit_now(self):
        self.kill_units()
        super().exit_now()


if __name__ == "__main__":
    tj.run_main(HostRun, HostChild)
