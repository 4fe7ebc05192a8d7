#!/usr/bin/python3
"""tcplab_job — what a run's two jobs share: the host's units (tcplab_host.py) and a guest's
(tcplab_guest.py) each make every unit's result, put its raw directory in place or fail or
skip it with its reason, and then end the run as tcplab_finish.py does, in the same process.

JobRun is tcplab_finish's Run with run.sh's helpers for that (die, unit_failed, unit_skipped,
knob_record, rs_install_dir) and the options both jobs take:
    --knob U NAME VALUE each knob given to unit U (--set), in the table's order: its knobs.txt
    --state DIR --record FILE   the run's state directory and record
    --reserve FILE      the run's reserve, given back once no unit writes any more
    --version V         tcplab's version, written into each raw directory put in place
    --allow-foreign-out run.sh's RS_ALLOW_FOREIGN (an output directory of another owner)
and "-- OPERAND..." after them.  JobChild is tcplab_finish's Child with `whole`: a stretch a
SIGTERM waits for (an install's two renames), never cut in half.

Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import contextlib
import os
import shutil
import signal
import sys

import tcplab_finish as tf
import tcplab_runstate as rs
import tcplab_units as tu

UNIT_SKIPPED = 3        # a collect script's status for "cannot run on this kernel" (tl_skip)
WHY_MAX = tu.WHY_MAX    # a reason longer is cut, and the cut said


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


class JobRun(tf.Run):
    """tcplab_finish's Run, and what both jobs add to it."""

    ARITY = dict(tf.Run.ARITY, **{
        "--knob": 3, "--state": 1, "--record": 1, "--reserve": 1, "--version": 1,
        "--allow-foreign-out": 0})

    def __init__(self, argv):
        self.knobs = {}
        self.state = self.record = self.reserve = self.version = ""
        self.allow_foreign = False
        self.install_error = ""     # the last refused install's line
        self.rest = []          # "-- OPERAND...": "--" ends the options where one is due
        super().__init__(argv)

    def option(self, opt, v):
        if opt == "--knob":
            self.knobs.setdefault(v[0], []).append((v[1], v[2]))
        elif opt == "--allow-foreign-out":
            self.allow_foreign = True
        else:
            setattr(self, opt[2:], v[0])

    # ---- run.sh's helpers, for a job's units ---------------------------------------------------

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
            self.install_error = str(e)
            return False

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

    why_cut = staticmethod(tu.why_cut)

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

    def give_reserve(self):
        """runstate.sh's rs_reserve_give: no unit writes any more (or the disk is full): the
        reserve's room is the reports' and the failed outputs'."""
        if self.reserve:
            try:
                os.unlink(self.reserve)
            except OSError:
                pass
            self.reserve = ""

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


class JobChild(tf.Child):
    """tcplab_finish's Child, and `whole`: a SIGTERM that comes inside it is acted on at its
    end (run.sh's trap waited for rs_install_dir): never half of an install's two renames."""

    def catch(self, sig):
        """SIG stops the job as SIGTERM does, unless it was ignored when the job started: a run
        under nohup goes on after a hangup, as run.sh's bash (which cannot trap a signal ignored
        at entry) did, and the units inherit the signal ignored, as bash's background units
        did."""
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, self._stop)

    @contextlib.contextmanager
    def whole(self):
        self.starting = True        # _stop only notes the signal meanwhile
        try:
            yield
        finally:
            self.starting = False
            if self.stopped and self.proc is None:
                self.exit_now()

    def kill_units(self):
        """What a job's child adds to stop at its end, whatever happened (the host's units)."""


def main(argv, run_cls, child_cls):
    """A job's program: RUN_CLS's run made of ARGV (its `missing()` says what it lacks), its
    units run (`run_units`), then the run's end; exit as tcplab_finish.py's end does, 2 for a bad
    call, 70 with one line for a bug here, 128+N when stopped."""
    name = os.path.basename(argv[0])
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        run = run_cls(argv[1:])
        why = run.missing()
        if why:
            raise tf.BadCall(why)
    except tf.BadCall as e:
        tf.write(2, f"{name}: {e} (run.sh's call is wrong)\n")
        return 2
    child = child_cls()
    run.child = child
    try:
        run.run_units(child)
        return run.finish(child)
    except Stop as e:
        return e.status
    except Exception as e:      # a bug here: one line, and a status run.sh says it failed with
        tf.write(2, f"{name}: {type(e).__name__}: {e}\n")
        return 70
    finally:
        child.kill_units()


def run_main(run_cls, child_cls):
    sys.exit(main(sys.argv, run_cls, child_cls))
