#!/usr/bin/python3
"""tcplab_guest — a `run.sh --kernel VER` run's guest job: vm.sh, what each unit's guest sent
back put in place, then the end of the run.

The runner's fifth part (docs/maintainers.md, "The runner, step by step"): run.sh has made the
plan, locked the output directory and taken the reserve; this program then runs
experiments/guest/vm.sh (a Debian kernel under QEMU running the units), puts in place the raw
directory of each unit the guest ran, fails or skips the others with their reasons, and ends the
run as tcplab_finish.py does (the reports, the failed outputs, the last lines, KTAP), in the same
process.  It replaced run.sh's run_vm and runstate.sh's rs_run_vm.

    tcplab_guest.py --t0 EPOCH STATE... GUEST... -- KERNEL UNIT...

STATE is tcplab_finish.py's (--prog --top --exp --py --out --tmp --ktap-fd --full-kb --unit
--plan); GUEST:
    --accel A           vm.sh's --accel;   --mtu N: vm.sh's --mtu (run.sh's --mtu)
    --order U           each unit in the order the guest runs them (the plan's VM_ORDER)
    --knob U NAME VALUE each knob given to unit U (--set), in the table's order: its knobs.txt
    --outputs DIR       where outputs/<release> is (no --out-set: the guest's release decides)
    --out-set           --out was given: the output directory stays, whatever the release
    --state DIR --record FILE   the run's state directory and record (a directory switched to
                        is locked by this process and named in the record)
    --reserve FILE      the run's reserve, given back once vm.sh has ended

Exit: tcplab_finish.py's (0, 1, or 4 when --ktap and every unit skipped); 4 when vm.sh cannot
boot a guest here; 1 with one line when vm.sh was killed or the guest sent no release.  SIGTERM
(run.sh's cleanup) or SIGHUP stops vm.sh (SIGTERM, and SIGKILL after 5 s), kills what held its work
directory, and ends this program with 128+N and nothing more said.

Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import contextlib
import os
import shutil
import signal
import sys
import time

import tcplab_finish as tf
import tcplab_runstate as rs

UNIT_SKIPPED = 3        # a collect script's status for "cannot run on this kernel" (tl_skip)
VM_GRACE_S = 5.0        # vm.sh's time to stop QEMU and remove its work directory on SIGTERM
                        # (run.sh's finish_stop waits 7 s for this program)
WHY_MAX = 4096          # run.sh's: a reason longer is cut, and the cut said


def signal_name(n):
    """bash's `kill -l N`: KILL, RTMIN+1, RTMAX-2, or N itself."""
    try:
        return signal.Signals(n).name[3:]
    except ValueError:
        pass
    lo, hi = signal.SIGRTMIN, signal.SIGRTMAX
    if lo < n < hi:
        return f"RTMIN+{n - lo}" if n - lo <= (hi - lo) // 2 else f"RTMAX-{hi - n}"
    return str(n)


class Stop(Exception):
    """The run stops here: die()'s line said, the status given."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


class GuestRun(tf.Run):
    """tcplab_finish's Run, and what the guest job adds to it."""

    ARITY = dict(tf.Run.ARITY, **{
        "--accel": 1, "--mtu": 1, "--order": 1, "--knob": 3, "--outputs": 1, "--out-set": 0,
        "--state": 1, "--record": 1, "--reserve": 1, "--version": 1, "--allow-foreign-out": 0})

    def __init__(self, argv):
        self.accel, self.mtu, self.order, self.knobs = "tcg", "", [], {}
        self.outputs = self.state = self.record = self.reserve = self.version = ""
        self.out_set = self.allow_foreign = False
        self.held = []          # the locks of an output directory switched to
        self.rest = []          # "-- KERNEL UNIT...": "--" ends the options where one is due
        super().__init__(argv)
        if not self.rest:
            raise tf.BadCall("no -- KERNEL UNIT...")
        self.kernel, self.units = self.rest[0], self.rest[1:]

    def option(self, opt, v):
        if opt == "--order":
            self.order.append(v[0])
        elif opt == "--knob":
            self.knobs.setdefault(v[0], []).append((v[1], v[2]))
        elif opt == "--out-set":
            self.out_set = True
        elif opt == "--allow-foreign-out":
            self.allow_foreign = True
        else:
            setattr(self, opt[2:], v[0])

    # ---- run.sh's helpers, for the guest ---------------------------------------------------

    def die(self, msg, status=tf.EXIT_FAIL):
        """run.sh's die: one line on stderr, "Bail out!" on the KTAP stream, the run ends."""
        tf.write(2, f"{self.prog}: {msg}\n")
        if self.ktap_fd is not None:
            tf.write(self.ktap_fd, "Bail out! " + msg.replace("\n", " ") + "\n")
        raise Stop(status)

    def say(self, lines):
        for line in lines:
            self.log(line)

    def install(self, src, dest):
        """runstate.sh's rs_install_dir: True, or False with its one line on stderr."""
        try:
            with self.child.whole():
                said = rs.install_dir(src, dest, self.out, self.tmp, self.prog, self.version, self.top)
            self.say(said)
            return True
        except rs.Refused as e:
            self.say(e.said)
            tf.write(2, f"{e}\n")
            return False

    def switch_out(self, directory):
        """runstate.sh's rs_switch_out: from now on write to DIRECTORY, checked, locked (by this
        process), named in the run's record, and reaped like the first."""
        try:
            d = rs.check_out(directory, self.allow_foreign)
        except rs.Refused as e:
            self.die(str(e), e.status)
        if d == self.out:
            return
        try:
            fds = rs.lock_out(d)
        except OSError:
            self.die(f"cannot lock {d} or write {self.state}")
        if fds is None:
            self.die(f"{d} is in use by another run{rs.holder_of(self.state, d)}: wait for it to "
                     "finish, or use another --out")
        self.held += fds
        rs.record_add(self.record, "out", d)
        why = rs.nested_in(self.state, self.record, d)
        if why:
            self.die(why)
        self.out = d
        self.say(rs.reap_tmp(d, self.top))

    def knob_record(self, unit, directory):
        """run.sh's knob_record: the knobs given to UNIT, DIRECTORY/knobs.txt."""
        if not os.path.isdir(directory) or not self.knobs.get(unit):
            return
        try:
            with open(os.path.join(directory, "knobs.txt"), "wb") as f:
                f.write(tf.enc("".join(f"{k}={v}\n" for k, v in self.knobs[unit])))
        except OSError as e:
            tf.write(2, f"{self.prog}: {directory}/knobs.txt: {e.strerror}\n")
            self.log(f"{unit}: could not record its knobs in {directory}/knobs.txt (above)")

    @staticmethod
    def why_cut(why):
        """run.sh's why_cut: WHY's first WHY_MAX bytes and a note when it is longer (it reaches
        tcplab_failed.py as one argument, and the kernel takes 128 KiB at most in one)."""
        b = tf.enc(why)
        return why if len(b) <= WHY_MAX else tf.dec(b[:WHY_MAX]) + f" [cut at {WHY_MAX} bytes]"

    def unit_failed(self, unit, why):
        """run.sh's unit_failed: the reason in the unit's status.txt, its partial raw directory
        put in place."""
        self.failed.append(unit)
        self.why[unit] = self.why_cut(why)
        src = os.path.join(self.tmp, "raw", unit)
        try:
            os.makedirs(os.path.join(self.out, "raw"), exist_ok=True)
            os.makedirs(src, exist_ok=True)
            with open(os.path.join(src, "status.txt"), "wb") as f:
                f.write(tf.enc(why + "\n"))
            ok = self.install(src, os.path.join(self.out, "raw", unit))
        except OSError as e:
            tf.write(2, f"{self.prog}: {e.filename or src}: {e.strerror}\n")
            ok = False
        if ok:
            self.log(f"{unit}: {why}; partial output in {self.rel(self.out)}/raw/{unit}/")
        else:
            self.log(f"{unit}: {why}; its partial output could not be put in "
                     f"{self.rel(self.out)}/raw/{unit}/ (above)")

    def unit_skipped(self, unit, why):
        """run.sh's unit_skipped: not a failure; its raw directory, with status.txt "skipped:
        WHY", replaces the old one, and its report still runs."""
        self.skipped.append(unit)
        self.raw_skipped.append(unit)
        self.why[unit] = self.why_cut(f"skipped: {why}")
        try:
            os.makedirs(os.path.join(self.out, "raw"), exist_ok=True)
        except OSError as e:
            tf.write(2, f"{self.prog}: {e.filename or self.out}: {e.strerror}\n")
        if not self.install(os.path.join(self.tmp, "raw", unit), os.path.join(self.out, "raw", unit)):
            self.die(f"{unit}: cannot put its raw directory in place")
        self.log(f"{unit}: skipped: {why}")

    # ---- the guest -------------------------------------------------------------------------

    def vm(self, child):
        """vm.sh, waited for; returns its status (128+N for a signal, as bash's wait)."""
        raw = os.path.join(self.tmp, "raw")
        os.makedirs(raw, exist_ok=True)
        argv = ["setpriv", "--pdeathsig", "TERM", os.path.join(self.top, "experiments", "guest", "vm.sh"),
                "--accel", self.accel] + (["--mtu", self.mtu] if self.mtu else []) + \
            [self.kernel, raw] + self.order
        env = dict(os.environ, TCPLAB_EXPERIMENTS=self.exp, TMPDIR=self.tmp)
        p = child.start_vm(argv, env)
        deadline = None
        while True:
            try:
                p.wait(timeout=0.1)
                break
            except tf.subprocess.TimeoutExpired:
                pass
            if child.stopped and deadline is None:
                deadline = time.monotonic() + VM_GRACE_S
            if deadline is not None and time.monotonic() > deadline:
                p.kill()
        child.vm_done()
        rc = p.returncode
        return 128 - rc if rc < 0 else rc

    def vm_gone(self):
        """What a vm.sh that is gone may have left: the processes holding its work directory
        (QEMU and timeout, SIGKILL), then the directory itself."""
        rs.kill_vm_users(self.tmp)
        tf.write(2, "".join(line + "\n" for line in rs.reap_vm_dirs(self.tmp, self.prog)))

    def guest(self, child):
        """run.sh's run_vm: vm.sh, then each unit's result."""
        self.child = child
        status = self.vm(child)
        if child.stopped:       # run.sh's cleanup stopped the run: its trap says why
            rs.kill_vm_users(self.tmp)
            raise Stop(128 + child.stopped)
        if self.reserve:        # no unit writes any more: the room is the reports'
            try:
                os.unlink(self.reserve)
            except OSError:
                pass
        if status > 128:
            self.vm_gone()
            name = "SIG" + signal_name(status - 128)
            self.die(f"vm.sh was killed by {name} (its guest died with it)")
        if status == tf.EXIT_SKIP:
            if self.ktap_fd is not None:
                self.ktap_results("not run: experiments/guest/vm.sh cannot boot a guest here "
                                  "(its reason is on stderr)")
            raise Stop(tf.EXIT_SKIP)
        raw = os.path.join(self.tmp, "raw")
        vmtxt = os.path.join(raw, "vm.txt")
        lines = []
        try:
            with open(vmtxt, "rb") as f:
                lines = tf.dec(f.read()).split("\n")
        except OSError:
            pass
        release = next((line[7:] for line in lines if line.startswith("kernel=")), "")
        if not release:
            self.die("the guest reported no kernel release (see above)")
        if not self.out_set:
            self.switch_out(os.path.join(self.outputs, release))
        for u in self.units:
            d = os.path.join(raw, u)
            if os.path.isdir(d):
                self.copy(vmtxt, os.path.join(d, "vm.txt"))
            self.knob_record(u, d)
            rc = next((line[len(f"unit.{u}="):] for line in lines if line.startswith(f"unit.{u}=")), "")
            self.rc[u] = rc or "missing"
            # a unit that ran to its end (unit.U=0) counts even when a later one hung the guest
            if os.path.isdir(d) and rc == "0":
                if not self.install(d, os.path.join(self.out, "raw", u)):
                    self.die(f"{u}: cannot put its raw directory in place")
                self.done.append(u)
                continue
            lines_u = self.status_lines(os.path.join(d, "status.txt"))
            first = lines_u[0] if lines_u else ""
            # as on the host: any line "skipped: ..." skips it, the first line says why
            if os.path.isdir(d) and rc == str(UNIT_SKIPPED) and any(
                    line.startswith("skipped: ") for line in lines_u):
                self.unit_skipped(u, first.removeprefix("skipped: ") if first.startswith("skipped: ") else "")
                continue
            if rc == "timeout":
                self.unit_failed(u, f"timed out in the guest (limit_s {self.limit.get(u, '')} s)")
            elif rc in ("", "missing"):
                self.unit_failed(u, "failed: the guest sent nothing back")
            else:       # the collect script's own reason (tl_die), as on the host
                why = first[len("failed: "):] if first.startswith("failed: ") else ""
                self.unit_failed(u, f"failed: {why} (exit {rc} in the guest)" if why
                                 else f"failed: exit {rc} in the guest")
            dest = os.path.join(self.out, "raw", u, "vm.txt")
            if not os.path.exists(dest) and os.path.isdir(os.path.dirname(dest)):
                self.copy(vmtxt, dest)

    @staticmethod
    def status_lines(path):
        """PATH's lines, its NUL bytes dropped (as bash's $(...) dropped them); [] when it
        cannot be read."""
        try:
            with open(path, "rb") as f:
                return tf.dec(f.read().replace(b"\0", b"")).split("\n")
        except OSError:
            return []

    def copy(self, src, dest):
        try:
            shutil.copyfile(src, dest)
        except OSError as e:
            tf.write(2, f"{self.prog}: cannot copy {src} to {dest}: {e.strerror}\n")


class GuestChild(tf.Child):
    """tcplab_finish's Child, and vm.sh: SIGTERM (or SIGHUP: a terminal closed on the group)
    asks vm.sh to stop (its trap stops QEMU and removes its work directory), and GuestRun.vm
    waits for it, a bounded time.  While a raw directory is put in place, a SIGTERM waits for
    its end (run.sh's trap waited for rs_install_dir): never half of its two renames."""

    def __init__(self):
        super().__init__()
        self.vm = False         # vm.sh is the child, or is being started
        signal.signal(signal.SIGHUP, self._stop)

    @contextlib.contextmanager
    def whole(self):
        self.starting = True        # _stop only notes the signal meanwhile
        try:
            yield
        finally:
            self.starting = False
            if self.stopped and self.proc is None:
                os._exit(128 + self.stopped)

    def start_vm(self, argv, env):
        """vm.sh started: from here until vm_done, a stop asks it with SIGTERM, even while its
        Popen runs."""
        self.vm = True
        return self.start(argv, env=env)

    def vm_done(self):
        self.proc, self.vm = None, False

    def end(self, p):
        if not self.vm:
            super().end(p)
            return
        try:
            p.terminate()
        except OSError:
            pass


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        run = GuestRun(argv[1:])
        if run.t0 is None or not run.tmp or not run.outputs:
            raise tf.BadCall("needs --t0, --tmp and --outputs")
    except tf.BadCall as e:
        tf.write(2, f"tcplab_guest.py: {e} (run.sh's call is wrong)\n")
        return 2
    child = GuestChild()
    try:
        run.guest(child)
        return run.finish(child)
    except Stop as e:
        return e.status
    except Exception as e:      # a bug here: one line, and a status run.sh says it failed with
        tf.write(2, f"tcplab_guest.py: {type(e).__name__}: {e}\n")
        return 70


if __name__ == "__main__":
    sys.exit(main(sys.argv))
