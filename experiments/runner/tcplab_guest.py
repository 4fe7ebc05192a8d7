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

import os
import signal
import time

import tcplab_finish as tf
import tcplab_job as tj
import tcplab_runstate as rs
from tcplab_job import Stop

VM_GRACE_S = 5.0        # vm.sh's time to stop QEMU and remove its work directory on SIGTERM
                        # (run.sh's finish_stop waits 7 s for this program)


class GuestRun(tj.JobRun):
    """tcplab_job's JobRun, and what the guest job adds to it."""

    ARITY = dict(tj.JobRun.ARITY, **{
        "--accel": 1, "--mtu": 1, "--order": 1, "--outputs": 1, "--out-set": 0})

    def __init__(self, argv):
        self.accel, self.mtu, self.order = "tcg", "", []
        self.outputs = ""
        self.out_set = False
        self.held = []          # the locks of an output directory switched to
        super().__init__(argv)
        if not self.rest:
            raise tf.BadCall("no -- KERNEL UNIT...")
        self.kernel, self.units = self.rest[0], self.rest[1:]

    def option(self, opt, v):
        if opt == "--order":
            self.order.append(v[0])
        elif opt == "--out-set":
            self.out_set = True
        else:
            super().option(opt, v)

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

    def missing(self):
        return "" if self.t0 is not None and self.tmp and self.outputs else \
            "needs --t0, --tmp and --outputs"

    def run_units(self, child):
        """run.sh's run_vm: vm.sh, then each unit's result."""
        self.child = child
        status = self.vm(child)
        if child.stopped:       # run.sh's cleanup stopped the run: its trap says why
            rs.kill_vm_users(self.tmp)
            raise Stop(128 + child.stopped)
        self.give_reserve()     # no unit writes any more: the room is the reports'
        if status > 128:
            self.vm_gone()
            name = "SIG" + tj.signal_name(status - 128)
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
            if os.path.isdir(d) and rc == str(tj.UNIT_SKIPPED) and any(
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

class GuestChild(tj.JobChild):
    """tcplab_finish's Child, and vm.sh: SIGTERM (or SIGHUP: a terminal closed on the group)
    asks vm.sh to stop (its trap stops QEMU and removes its work directory), and GuestRun.vm
    waits for it, a bounded time.  While a raw directory is put in place, a SIGTERM waits for
    its end (run.sh's trap waited for rs_install_dir): never half of its two renames."""

    def __init__(self):
        super().__init__()
        self.vm = False         # vm.sh is the child, or is being started
        self.catch(signal.SIGHUP)

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


if __name__ == "__main__":
    tj.run_main(GuestRun, GuestChild)
