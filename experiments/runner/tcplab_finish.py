#!/usr/bin/python3
"""tcplab_finish — the end of a run: the reports, the failed units' outputs, the last lines, KTAP.

The runner's third part (docs/maintainers.md, "The runner, step by step"): the run's job
(tcplab_host.py, or tcplab_guest.py for a guest) runs the units and ends the run through this
module's Run, in the same process; `finish` does the same for units run elsewhere, given what
happened to each as arguments.  The end runs every report
whose units gave it raw data, writes a failed unit's outputs (experiments/report/tcplab_failed.py),
says how the run ended, prints the KTAP test points, and exits with the run's status.

    tcplab_finish.py finish  STATE...   all of the above; exit 0, 1 (a failure) or 4 (--ktap and
                                        every unit skipped)
    tcplab_finish.py ktap-skip REASON STATE...
                                        only the test points of a run stopped for a skip: each
                                        unit without a result is skipped, "not run: REASON"

STATE, in any order (WHY and the other values are any bytes but NUL; a unit is a table name):
    --prog P --top DIR --exp DIR --py PYTHON --out DIR   run.sh's PROG, TOP, EXP, PY and OUT
    --kernel VER        a --kernel run (the failed outputs name the guest's release, vm.txt's)
    --tmp DIR           the run's TMPDIR_RUN (its log/UNIT.txt, raw/vm.txt, raw/vm-console.log)
    --ktap-fd N         --ktap: the test points and "# " progress lines go to fd N
    --t0 EPOCH          when the units started (the last line's "finished in N s")
    --disk-full         the disk was full while units ran;  --full-kb N: runstate.sh's RS_FULL_KB
    --unit U REPORT LIMIT_S   each unit of the table: its report and limit_s
    --plan U            each unit of run.sh's PLAN (the KTAP test points), in its order
    --done U            each of DONE_UNITS, in order;    --raw-skipped U: each of SKIPPED_RAW
    --failed U WHY      each of FAILED with its WHY;     --skipped U WHY: each of SKIPPED
    --rc U RC, --started U UTC, --ran-s U S   UNIT_RC, UNIT_STARTED, UNIT_RAN where set

While a report runs, SIGTERM (run.sh's cleanup sends it) kills that report and ends this program
with 143 and nothing more said: run.sh's own trap says why the run stopped.  Every report runs
under setpriv --pdeathsig KILL, so none outlives this program.  SIGINT stays ignored as run.sh
started it: a Ctrl-C reaches run.sh, whose trap stops this program.

Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import os
import signal
import subprocess
import sys
import time

import tcplab_runstate as rs

EXIT_FAIL, EXIT_SKIP = 1, 4
DISK_FULL = "No space left on device"
FAILED_JSON_LINE = b'  "status": "failed",\n'


def enc(s):
    return s.encode("utf-8", "surrogateescape")


def dec(b):
    return b.decode("utf-8", "surrogateescape")


def write(fd, text):
    """TEXT to file descriptor FD, whole (run.sh's printf)."""
    data = enc(text)
    while data:
        data = data[os.write(fd, data):]


class BadCall(Exception):
    """run.sh called this program wrongly: one line, exit 2."""


class Run:
    """What run.sh's main knew when its units had ended, and what the end adds to it."""

    ARITY = {"--prog": 1, "--top": 1, "--exp": 1, "--py": 1, "--out": 1, "--kernel": 1,
             "--tmp": 1, "--ktap-fd": 1, "--t0": 1, "--full-kb": 1, "--disk-full": 0,
             "--unit": 3, "--plan": 1, "--done": 1, "--raw-skipped": 1, "--failed": 2,
             "--skipped": 2, "--rc": 2, "--started": 2, "--ran-s": 2}

    def __init__(self, argv):
        self.prog, self.top, self.exp, self.py, self.out = "run.sh", "", "", "/usr/bin/python3", ""
        self.kernel = self.tmp = ""
        self.ktap_fd = None
        self.t0 = None
        self.full_kb = 64
        self.disk_full = False
        self.plan, self.report, self.limit = [], {}, {}
        self.done, self.raw_skipped, self.failed, self.skipped = [], [], [], []
        self.why, self.rc, self.started, self.ran = {}, {}, {}, {}
        self.report_unit = {}       # a report that refused its raw data: the unit whose raw it read
        self.replaced, self.no_outputs = [], []
        self.unremoved = True       # False: a stale failed output could not be removed
        i = 0
        while i < len(argv):
            opt, n = argv[i], self.ARITY.get(argv[i])
            if opt == "--" and self.rest is not None:  # a subclass's operands follow
                self.rest = argv[i + 1:]
                break
            if n is None or i + n + 1 > len(argv):
                raise BadCall(f"bad argument {opt!r}")
            v = argv[i + 1:i + 1 + n]
            i += 1 + n
            if opt not in Run.ARITY:
                self.option(opt, v)
            elif opt == "--unit":
                self.report[v[0]], self.limit[v[0]] = v[1], v[2]
            elif opt == "--plan":
                self.plan.append(v[0])
            elif opt == "--done":
                self.done.append(v[0])
            elif opt == "--raw-skipped":
                self.raw_skipped.append(v[0])
            elif opt in ("--failed", "--skipped"):
                (self.failed if opt == "--failed" else self.skipped).append(v[0])
                self.why[v[0]] = v[1]
            elif opt in ("--rc", "--started", "--ran-s"):
                {"--rc": self.rc, "--started": self.started, "--ran-s": self.ran}[opt][v[0]] = v[1]
            elif opt == "--disk-full":
                self.disk_full = True
            elif opt == "--ktap-fd":
                self.ktap_fd = self._number(opt, v[0])
            elif opt == "--t0":
                self.t0 = self._number(opt, v[0])
            elif opt == "--full-kb":
                self.full_kb = self._number(opt, v[0])
            else:
                setattr(self, opt[2:], v[0])

    rest = None     # a subclass that takes "-- OPERAND..." sets it to [] (what follows "--")

    def option(self, opt, v):
        """An option a subclass adds to ARITY, with its values V."""
        raise BadCall(f"bad argument {opt!r}")

    @staticmethod
    def _number(opt, v):
        if not v.isascii() or not v.isdigit():
            raise BadCall(f"{opt} {v!r}: want a whole number")
        return int(v)

    # ---- what run.sh's helpers said --------------------------------------------------------

    def rel(self, path):
        """PATH as run.sh's ${PATH#"$TOP"/} shows it."""
        return rs.rel(path, self.top)

    def log(self, msg):
        """run.sh's log: "HH:MM:SS [run] MSG" on stderr; under --ktap "# " and the line, its
        newlines made blanks, on the KTAP stream."""
        line = f"{time.strftime('%H:%M:%S')} [run] {msg}"
        if self.ktap_fd is not None:
            write(self.ktap_fd, "# " + line.replace("\n", " ") + "\n")
        else:
            write(2, line + "\n")

    def disk_full_words(self):
        return f"{self.rel(self.out)} is full ({DISK_FULL})"

    def disk_is_full(self):
        """runstate.sh's rs_disk_full: less than RS_FULL_KB free for this user on $OUT's
        filesystem (root may use the blocks ext4 reserves for it)."""
        try:
            st = os.statvfs(self.out)
        except OSError:
            return False
        free = st.f_bfree if os.geteuid() == 0 else st.f_bavail
        return free * st.f_frsize < self.full_kb * 1024

    # ---- the reports -----------------------------------------------------------------------

    def run_reports(self, child):
        """Each report that one of its units gave raw data to, once, in the order the units
        ended; its stderr kept in memory (not in a file on a disk that may be full) and said
        after it; its stdout is run.sh's."""
        seen = set()
        for u in self.done + self.raw_skipped:
            r = self.report[u]
            if r == "-" or r in seen:
                continue
            seen.add(r)
            if r in self.failed:        # a unit of the report's name failed: its outputs
                continue
            script = os.path.join(self.exp, r, r + ".py")
            p = child.start(["setpriv", "--pdeathsig", "KILL", self.py, script,
                             os.path.join(self.out, "raw"), self.out], stderr=subprocess.PIPE)
            _, err = p.communicate()
            child.proc = None
            if child.stopped:
                return False
            err = err.replace(b"\0", b"").rstrip(b"\n")     # $(...) dropped NUL bytes
            if err:
                write(2, dec(err) + "\n")
            if p.returncode == 0:
                self.log(f"wrote {self.rel(self.out)}/{r}.txt and .json")
                continue
            self.log(f"report {r} FAILED")
            name = "report:" + r
            self.failed.append(name)
            last = dec(err.rsplit(b"\n", 1)[-1][:300])
            if DISK_FULL in last:       # the report refused nothing: it could not write
                self.disk_full = True
                self.why[name] = f"failed: the report could not write its outputs: {last}"
            else:
                self.why[name] = f"failed: the report refused the raw data: {last}"
            self.report_unit[r] = u
        return True

    # ---- the failed units' outputs ---------------------------------------------------------

    def guest_release(self):
        try:
            with open(f"{self.tmp}/raw/vm.txt", "rb") as f:
                for line in f:
                    if line.startswith(b"kernel="):
                        return dec(line[7:].rstrip(b"\n").replace(b"\0", b""))
        except OSError:
            pass
        return ""

    def failed_outputs(self, child):
        """Every failed unit gets NAME.txt/.json saying "failed: WHY" and what it collected
        (tcplab_failed.py; docs/output-format.md): a unit under its own name, a report that
        refused its raw data under the report's.  They replace the old outputs of that name;
        `replaced` lists what a good result held, for the last line.  A unit that succeeded
        and feeds a report of another name loses the failed outputs an earlier run left."""
        kernel = self.guest_release() if self.kernel else os.uname().release
        for f in self.failed:
            if f.startswith("report:"):
                name, stage = f[7:], "report"
                u = self.report_unit[name]
            else:
                name = u = f
                stage = "collect"
            args = ["--why", self.why[f], "--unit", u, "--stage", stage,
                    "--kernel", kernel or "unknown"]
            if self.report[u] != "-":
                args += ["--report", self.report[u]]
            for opt, d in (("--exit", self.rc), ("--started", self.started),
                           ("--ran-s", self.ran)):
                if d.get(u):
                    args += [opt, d[u]]
            log = f"{self.tmp}/log/{u}.txt"
            if os.path.isfile(log):
                args += ["--log", log]
            console = f"{self.tmp}/raw/vm-console.log"
            if os.path.isfile(console):
                args += ["--console", console]
            p = child.start(["setpriv", "--pdeathsig", "KILL", self.py,
                             os.path.join(self.top, "experiments", "report", "tcplab_failed.py"),
                             self.out, name, os.path.join(self.out, "raw", u)] + args,
                            stdout=subprocess.PIPE)
            said, _ = p.communicate()
            child.proc = None
            if child.stopped:
                return False
            said = dec(said.replace(b"\0", b"")).rstrip("\n")
            if p.returncode == 0:
                self.log(f"{f}: wrote {self.rel(self.out)}/{name}.txt and .json (failed)")
                if said:
                    self.replaced.append(f"{name}.txt/.json ({said})")
            else:
                self.log(f"{f}: could not write its failed outputs (above)")
                self.no_outputs.append(f)
                if self.disk_full or self.disk_is_full():
                    self.disk_full = True
        for u in self.done:
            path = os.path.join(self.out, u + ".json")
            if self.report[u] == u or not self._says_failed(path):
                continue
            gone = True
            for p in (os.path.join(self.out, u + ".txt"), path):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    write(2, f"{self.prog}: cannot remove {p}: {e.strerror}\n")
                    gone = self.unremoved = False
            if not gone:
                continue
            self.log(f"{u}: removed the failed outputs an earlier run left "
                     f"({self.rel(self.out)}/{u}.txt, .json)")
        return True

    @staticmethod
    def _says_failed(path):
        try:
            with open(path, "rb") as f:
                return FAILED_JSON_LINE in f.readlines()
        except OSError:
            return False

    # ---- KTAP ------------------------------------------------------------------------------

    def ktap_results(self, reason=""):
        """The test points, one per unit of the plan in its order, and kselftest's "# Totals"
        line; a unit without a result is "not ok", or skipped with REASON when one is given (the
        run stopped for a skip).  Returns the count of failures, -1 when all were skipped."""
        res = {u: "1" for u in self.done}
        res.update({u: "f" for u in self.failed})
        out, n, passed, fail, skip = [], 0, 0, 0, 0
        for u in self.plan:
            n += 1
            why = self.why.get(u, "")
            rw = self.why.get("report:" + self.report[u], "")
            if res.get(u) != "f" and rw:
                why, res[u] = f"failed: its report {self.report[u]} failed", "f"
            if u not in res and not why and reason:
                why = "skipped: " + reason
            why = why.replace("\n", " ")
            if res.get(u) == "1":
                out.append(f"ok {n} {u}")
                passed += 1
            elif u not in res and why.startswith("skipped: "):
                out.append(f"ok {n} {u} # SKIP {why[9:]}")
                skip += 1
            else:
                out.append(f"# {u}: {why or 'failed: no result'}")
                if why.startswith("timed out"):
                    out.append(f"not ok {n} {u} # TIMEOUT {self.limit[u]} seconds")
                else:
                    out.append(f"not ok {n} {u}")
                fail += 1
        out.append(f"# Totals: pass:{passed} fail:{fail} xfail:0 xpass:0 skip:{skip} error:0")
        write(self.ktap_fd, "\n".join(out) + "\n")
        return -1 if passed + fail == 0 and skip else fail

    # ---- the end ---------------------------------------------------------------------------

    def finish(self, child):
        if not self.run_reports(child) or not self.failed_outputs(child):
            return 128 + child.stopped
        failed = "; ".join(f"{f}: {self.why[f]}" for f in self.failed)
        if any(DISK_FULL in self.why[f] for f in self.failed):
            self.disk_full = True       # the last line says it
        skipped = "; ".join(f"{u}: {self.why[u].removeprefix('skipped: ')}" for u in self.skipped)
        secs = int(time.time()) - self.t0
        self.log(f"finished in {secs} s: {len(self.done)} unit(s) ran, {len(self.failed)} failed"
                 + (f" ({failed})" if failed else "")
                 + (f", {len(self.skipped)} skipped ({skipped})" if skipped else "")
                 + f"; outputs in {self.rel(self.out)}/")
        ktap_fails = self.ktap_results() if self.ktap_fd is not None else 0
        # the failures' line goes to stderr only: under --ktap each already has its `not ok`;
        # on a full disk it says so, and names the units whose failed outputs could not be
        # written
        if self.failed:
            has = "each has its .txt/.json saying 'failed: <reason>', and its partial raw/<unit>/"
            if self.no_outputs:
                has = "NO .txt/.json COULD BE WRITTEN FOR " + " ".join(self.no_outputs)
                if len(self.no_outputs) != len(self.failed):
                    has += "; the others have theirs saying 'failed: <reason>'"
            line = (f"{self.prog}: {len(self.failed)} unit(s) failed: {' '.join(self.failed)}"
                    + (f": {self.disk_full_words()}" if self.disk_full else "") + f" ({has})")
            if self.replaced:
                line += "; THESE REPLACED GOOD OUTPUTS: " + " ".join(self.replaced)
            write(2, line + "\n")
        if self.failed or ktap_fails > 0 or not self.unremoved:
            return EXIT_FAIL
        return EXIT_SKIP if ktap_fails == -1 else 0


class Child:
    """The one program this one runs at a time, and whether SIGTERM stopped the run."""

    def __init__(self):
        self.proc = None
        self.starting = False
        self.stopped = 0
        signal.signal(signal.SIGTERM, self._stop)

    def start(self, argv, stdout=None, stderr=None, env=None):
        """ARGV started, its stdout and stderr run.sh's unless given (subprocess.PIPE), its
        environment this program's unless ENV."""
        self.starting = True
        p = subprocess.Popen([enc(a) for a in argv], stdout=stdout, stderr=stderr, env=env)
        self.proc, self.starting = p, False
        if self.stopped:            # SIGTERM came while Popen ran: the child is stopped here
            self.end(p)
        return p

    def end(self, p):
        """The child stopped because the run is: SIGKILL."""
        try:
            p.kill()
        except OSError:
            pass

    def _stop(self, sig, _frame):
        """SIGTERM: the child killed, and this program ended with 128+SIG and nothing more
        said: at once when no child runs, else as soon as it is reaped (the caller sees
        `stopped`).  During Popen, start() kills the child it made."""
        self.stopped = sig
        if self.proc is not None:
            self.end(self.proc)
        elif not self.starting:
            self.exit_now()

    def exit_now(self):
        """The end of this program, stopped: 128+N, and nothing said."""
        os._exit(128 + self.stopped)


def main(argv):
    # a closed stdout or KTAP stream (--ktap | head) ends this program as it ended run.sh's
    # printf, by SIGPIPE, not with an exception
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        if len(argv) >= 2 and argv[1] == "finish":
            run = Run(argv[2:])
            if run.t0 is None:
                raise BadCall("finish needs --t0")
            return run.finish(Child())
        if len(argv) >= 3 and argv[1] == "ktap-skip":
            run = Run(argv[3:])
            if run.ktap_fd is None:
                raise BadCall("ktap-skip needs --ktap-fd")
            run.ktap_results("not run: " + argv[2])
            return 0
    except BadCall as e:
        write(2, f"tcplab_finish.py: {e} (run.sh's call is wrong)\n")
        return 2
    write(2, "usage: tcplab_finish.py finish STATE... | ktap-skip REASON STATE...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
