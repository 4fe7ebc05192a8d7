#!/usr/bin/python3
"""tcplab_run — a run of run.sh, from its arguments to its exit status, in one process.

The runner's last part (docs/maintainers.md, "The runner, step by step", step 7): run.sh is a
shim that finds where tcplab is and execs this program with its signals blocked (`env
--block-signal`), so that a signal that comes while Python starts waits for the handlers below
instead of killing it with nothing said.  This program then does what run.sh's bash did:

    the subcommands (diff, matrix, kcidb: exec'd; sandbox: built first, then exec'd);
    the plan (tcplab_plan.plan, the unit table read once), --help, --list, --version;
    --ktap: KTAP alone on stdout, its header, its "Bail out!" or a skip's test points;
    without root: the same run again as root of a user namespace of its own (userns_run);
    --kernel VER without --out: the guest's release, for the output directory (vm.sh --resolve);
    the run started (tcplab_runstate.start_run: the output directory checked and locked on
    this process's own descriptors, the record, the refusal of a nested directory, the reaper,
    the temporary directory, the reserve); the build (ensure_built);
    the run's job: tcplab_host.py, or tcplab_guest.py for --kernel VER, with the arguments the
    plan decides (tcplab_plan.job_args) and the run's own; its exit status, or why it died;
    the run cleaned up (Started.cleanup: what holds a VM work directory, the namespaces the
    record names, the temporary directory, the record, the locks), whatever ends it.

    tcplab_run.py --prog P --top DIR --bin DIR --outputs DIR --self PATH [--installed] -- ARG...
        P, DIR...: run.sh's PROG, TOP, TL_BIN and OUTPUTS; PATH: the script itself (run.sh, or
        an installed tcplab), which a run without root starts again in its user namespace;
        --installed: an installed tcplab (make install), which builds nothing; ARG...: run.sh's
        own arguments (diff, matrix and kcidb run.sh hands on by itself).

SIGINT, SIGTERM, SIGHUP and SIGQUIT: before the run started, whatever runs (git, make, vm.sh)
is stopped and the exit is 128+N; after, "<what> (SIGN): stopping every unit", the job stopped
(SIGTERM; SIGKILL after 7 s), --ktap's "Bail out!", the cleanup, and 128+N.  From the first
signal on, the others are ignored, so nothing cuts the cleanup short.  SIGKILL: the job dies
with this program (setpriv --pdeathsig TERM), the locks with its descriptors, and the next run's
reaper removes what the record names.

Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import os
import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated",
        signal.SIGHUP: "hung up", signal.SIGQUIT: "quit"}


class Stop(BaseException):
    """A stop signal, raised where the program was (or at the end of a stretch it waits for)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


STATE = {"defer": 0, "sig": 0, "stopping": False}


def on_signal(signum, _frame):
    if STATE["stopping"]:
        return
    if STATE["defer"]:
        STATE["sig"] = STATE["sig"] or signum
        return
    raise Stop(signum)


class deferred:
    """A stretch no signal cuts (a run started and known, a child started and known): the
    signal's Stop comes at its end."""

    def __enter__(self):
        STATE["defer"] += 1

    def __exit__(self, *exc):
        STATE["defer"] -= 1
        if not STATE["defer"] and STATE["sig"] and not STATE["stopping"]:
            sig, STATE["sig"] = STATE["sig"], 0
            raise Stop(sig)
        return False


# The handlers first (run as run.sh's runner; tcplab_all.py imports job_argv), then the
# signals run.sh blocked are let in, in main: one that came meanwhile is acted on there, before
# anything is made.
# A signal ignored when run.sh started (nohup's SIGHUP, SIGINT and SIGQUIT of a script's
# background job) stays ignored, for the run and what it starts, as bash kept it.
HANDLED = STOP_SIGNALS
if __name__ == "__main__":
    HANDLED = tuple(_s for _s in STOP_SIGNALS if signal.getsignal(_s) != signal.SIG_IGN)
    for _s in HANDLED:
        signal.signal(_s, on_signal)

import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcplab_finish as tf  # noqa: E402
import tcplab_job as tj  # noqa: E402
import tcplab_plan as tp  # noqa: E402
import tcplab_runstate as rs  # noqa: E402

EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 1, 2, 4
FULL_KB = 64            # below this free (for this user), the disk counts as full
STOP_WAIT_S = 7.0       # the job's own stop: a report killed, vm.sh given 5 s
# without root (userns_run): a tmpfs on /run/netns, seen by this run alone, so `ip netns` works
USERNS_SETUP = ('mount -t tmpfs -o mode=0755 tcplab "$1" && mkdir -p /run/netns && shift && '
                'exec "$@"')
UNSHARE = ["unshare", "-Urnmpf", "--kill-child", "--mount-proc", "--propagation", "private"]


class Exit(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


class Runner:
    def __init__(self, o):
        self.prog, self.top, self.bin, self.outputs = o["prog"], o["top"], o["bin"], o["outputs"]
        self.installed, self.self = o["installed"], os.path.abspath(o["self"])
        self.args = o["args"]
        self.exp = os.environ.get("TCPLAB_EXPERIMENTS") or os.path.join(self.top, "experiments")
        self.py = "/usr/bin/python3"
        self.ktap = False       # --ktap: KTAP on ktap_fd, everything else on stderr
        self.ktap_fd = None
        self.ktap_started = False
        self.plan = None        # tcplab_plan's (options, Plan)
        self.child = None       # the process this one waits for (git, make, vm.sh, the job)
        self.run = None         # tcplab_runstate.Started, once the run is started
        self.job_name = ""
        self.version = ""
        self.allow_foreign = False

    # ---- lines ---------------------------------------------------------------------------

    def say(self, fd, text):
        try:
            tf.write(fd, text)
        except OSError:         # a closed stderr: the run goes on, as bash's did
            pass

    def log(self, msg):
        line = f"{time.strftime('%H:%M:%S')} [run] {msg}"
        if self.ktap_started:
            self.say(self.ktap_fd, "# " + line.replace("\n", " ") + "\n")
        else:
            self.say(2, line + "\n")

    def die(self, status, msg):
        self.say(2, f"{self.prog}: {msg}\n")
        if self.ktap:
            self.ktap_die(status, msg)
        raise Exit(status)

    # ---- --ktap ---------------------------------------------------------------------------

    def ktap_start(self):
        o, p = self.plan
        where = (f"units in a Debian {o.kernel} guest under QEMU ({o.accel}), " if o.kernel
                 else "")
        self.say(self.ktap_fd, f"KTAP version 1\n1..{len(p.plan)}\n# tcplab: {where}run.sh on "
                               f"{os.uname().machine}, uname -r {os.uname().release}\n")
        self.ktap_started = True

    def ktap_die(self, status, msg):
        """The end of the KTAP stream for a run that stops early: a skip reports every planned
        unit still without a result as skipped (no plan yet: "1..0 # SKIP"); any other status
        after the header is "Bail out!"; before the header stdout stays empty."""
        p = self.plan[1] if self.plan else None
        if status == EXIT_SKIP:
            if p is None or not p.plan:
                self.say(self.ktap_fd, f"KTAP version 1\n1..0 # SKIP {msg}\n")
                return
            if not self.ktap_started:
                self.ktap_start()
            try:
                run = tf.Run(self.fin_args() + ["--ktap-fd", str(self.ktap_fd)])
                run.ktap_results("not run: " + msg)
            except (tf.BadCall, OSError) as e:
                self.say(2, f"{self.prog}: the test points could not be printed: {e}\n")
        elif self.ktap_started:
            self.say(self.ktap_fd, "Bail out! " + msg.replace("\n", " ") + "\n")

    # ---- children ---------------------------------------------------------------------------

    def wait_child(self, argv, **kw):
        """ARGV run to its end as this program's child (stopped with it: a signal meanwhile
        kills it, then the Stop goes on); its returncode."""
        with deferred():
            self.child = subprocess.Popen(argv, **kw)
        try:
            return self.child.wait()
        finally:
            self.stop_child()

    def stop_child(self, wait_s=STOP_WAIT_S):
        """The child, if still there: SIGTERM, then SIGKILL after WAIT_S; reaped."""
        c, self.child = self.child, None
        if c is None or c.poll() is not None:
            return
        try:
            c.terminate()
            c.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
        try:
            c.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()

    # ---- the version, the build --------------------------------------------------------------

    def tcplab_version(self):
        """The VERSION file, else `git describe` of the clone ("-dirty" when a tracked file
        outside outputs/ differs from the commit), "unknown" without either."""
        v = ""
        path = os.path.join(self.top, "VERSION")
        if os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    v = tf.dec(f.readline().rstrip(b"\n"))
            except OSError:
                v = ""
        else:
            rc, r = self.capture(["git", "-C", self.top, "describe", "--tags", "--always"])
            if rc == 0 and r.strip():
                v = r.strip()
                v = v[1:] if v.startswith("v") else v
                clean = self.wait_child(["git", "-C", self.top, "diff", "--quiet", "HEAD", "--",
                                         ".", ":(exclude)outputs"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                if clean != 0:
                    v += "-dirty"
        return v or "unknown"

    def capture(self, argv, stderr=subprocess.DEVNULL):
        """(ARGV's status, its stdout), run as this program's child (a signal meanwhile stops
        it); (127, "") where it cannot be started."""
        try:
            with deferred():
                self.child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr)
        except OSError:
            return 127, ""
        try:
            out = self.child.stdout.read()
            rc = self.child.wait()
        finally:
            c = self.child
            self.stop_child()
            if c is not None:
                c.stdout.close()
        return rc, tf.dec(out)

    def missing(self, build):
        """The Debian packages whose tools are not there (run.sh's runtime_missing; with BUILD
        also what the build needs)."""
        path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        miss = []
        if build:
            miss += [p for t, p in (("cc", "gcc"), ("make", "make")) if not shutil.which(t)]
            if not (shutil.which("pkg-config") and self.pkg("libmnl")):
                miss.append("libmnl-dev")
        miss += [p for t, p in (("ip", "iproute2"), ("strace", "strace"))
                 if not shutil.which(t)]
        if build:
            miss += [p for lib, p in (("libpcap", "libpcap-dev"),
                                      ("libcurl", "libcurl4-openssl-dev")) if not self.pkg(lib)]
        if not shutil.which("nft", path=path):
            miss.append("nftables")
        miss += [p for t, p in (("mscgen", "mscgen"), ("clang", "clang")) if not shutil.which(t)]
        if not shutil.which("bpftool", path=path):
            miss.append("bpftool")
        if not self.pkg("libbpf"):
            miss.append("libbpf-dev")
        if not shutil.which("tmux"):
            miss.append("tmux")
        return miss

    def pkg(self, lib):
        try:
            return self.wait_child(["pkg-config", "--exists", lib], stderr=subprocess.DEVNULL) == 0
        except OSError:
            return False

    def ensure_built(self):
        """What the run needs is there, the programs built (a clone: `make deps` as root when a
        package is missing, then `make all`); an installed tcplab builds nothing."""
        if self.installed:
            miss = self.missing(False)
            if miss:
                self.die(EXIT_FAIL, f"missing {' '.join(miss)}: install these Debian packages "
                                    f"(apt-get install {' '.join(miss)})")
            if not os.access(os.path.join(self.bin, "sockwatch"), os.X_OK):
                self.die(EXIT_FAIL, f"no programs in {self.bin} (an incomplete install: make "
                                    "install again)")
            for p in self.programs():
                if not is_elf(p):
                    self.die(EXIT_FAIL, f"{p} is not an executable program (make install again)")
            return
        miss = self.missing(True)
        if miss:
            if os.geteuid() != 0 or os.environ.get("TCPLAB_USERNS"):
                self.die(EXIT_FAIL, f"missing {' '.join(miss)}: run 'make deps' as root")
            self.log(f"installing missing packages: {' '.join(miss)}")
            if not shutil.which("make"):
                for argv in (["apt-get", "update", "-qq"],
                             ["apt-get", "install", "-y", "-qq", "make"]):
                    if self.wait_child(argv, env=dict(os.environ,
                                                      DEBIAN_FRONTEND="noninteractive")) != 0:
                        break
            if self.wait_child(["make", "-C", self.top, "-s", "deps"], stdout=2) != 0:
                self.die(EXIT_FAIL, f"make deps failed (above): {' '.join(miss)} could not be "
                                    "installed")
        if os.environ.get("TCPLAB_BUILD"):     # a build made elsewhere (make sanitize): as is
            if not os.access(os.path.join(self.bin, "sockwatch"), os.X_OK):
                self.die(EXIT_FAIL, f"no programs in {self.bin} (TCPLAB_BUILD)")
        else:
            # a truncated program is newer than its objects, so make would call it up to date
            for p in self.programs():
                if not p.endswith(".tmp") and not is_elf(p):
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
            if self.wait_child(["make", "-C", self.top, "-s", "all"], stdout=2) != 0:
                self.die(EXIT_FAIL, "build failed")
        for p in self.programs():
            if not p.endswith(".tmp") and not is_elf(p):
                self.die(EXIT_FAIL, f"{p} is not an executable program (run make)")

    def programs(self):
        try:
            names = sorted(os.listdir(self.bin))
        except OSError:
            return []
        return [p for p in (os.path.join(self.bin, n) for n in names) if os.path.isfile(p)]

    # ---- without root -------------------------------------------------------------------------

    def userns_run(self):
        """This same run again as root of a user namespace of its own (the user's uid mapped to
        0), where the root path runs; its exit status.  A network and a private mount namespace
        (a tmpfs on /run/netns, or on /run where there is none, so `ip netns` works), a PID
        namespace whose death, or this program's, kills every process in it.  unshare blocks
        INT and TERM while it waits, so a stop signal is passed on to its child, the run."""
        mnt, env = "/run/netns", dict(os.environ)
        if not os.path.isdir("/run/netns"):
            mnt, env = "/run", dict(os.environ, XDG_RUNTIME_DIR="/tmp")
        try:
            state = rs.state_dir(self.prog, env)
        except rs.Refused as e:
            self.say(2, f"{e}\n")
            raise Exit(EXIT_FAIL) from None
        probe = UNSHARE + ["sh", "-c", USERNS_SETUP, "sh", mnt, "true"]
        if self.wait_child(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0:
            self.die(EXIT_SKIP, "needs root, or unprivileged user namespaces (unshare -Urnmp) for "
                                "network namespaces (see kernel.unprivileged_userns_clone, or on "
                                "Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)")
        env = dict(os.environ, TCPLAB_USERNS="1", TCPLAB_STATE=state,
                   PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        # unshare with the signals this run acts on ignored, so a group's SIGHUP or SIGQUIT
        # cannot kill it (and with it, by --kill-child, the run before its cleanup); the run
        # gets them back at its exec, and each is passed on to it
        names = ",".join(signal.Signals(x).name[3:] for x in HANDLED)
        argv = ((["env", f"--ignore-signal={names}"] if names else [])
                + ["setpriv", "--pdeathsig", "KILL"] + UNSHARE
                + ["sh", "-c", USERNS_SETUP, "sh", mnt]
                + (["env", f"--default-signal={names}"] if names else [])
                + [os.path.realpath(self.self)] + self.args)
        with deferred():
            self.child = subprocess.Popen(argv, env=env, stdout=self.ktap_fd or 1)
        c, sig = self.child, 0
        while True:
            try:
                rc = c.wait(timeout=0.5 if sig else None)
                return 128 - rc if rc < 0 else rc
            except Stop as s:           # passed on, and waited for: the run cleans up
                sig = s.signum
                self.pass_on(c.pid, sig)
            except subprocess.TimeoutExpired:
                # again: the run is its PID namespace's init, which the kernel gives no signal
                # it has no handler for yet (while it starts); once stopping it ignores the rest
                self.pass_on(c.pid, sig)

    @staticmethod
    def pass_on(pid, sig):
        """SIG to the run in its user namespace: unshare's child."""
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                child = int(f.read().split()[0])
            os.kill(child, sig)
        except (OSError, IndexError, ValueError):
            pass

    # ---- the run ------------------------------------------------------------------------------

    def fin_args(self):
        """tcplab_finish.py's STATE (a skip's test points)."""
        o, p = self.plan
        return fin_args(self.prog, self.top, self.exp, self.py, self.run, o, p)

    def guest_out(self):
        """--kernel VER without --out: outputs/<the guest's release> (vm.sh --resolve names it,
        fetching the package if need be), the directory locked from the start."""
        o, _ = self.plan
        self.ensure_built()     # vm.sh --resolve checks the programs it would put in the guest
        st, line = self.capture([os.path.join(self.top, "experiments", "guest", "vm.sh"),
                                 "--accel", o.accel, "--resolve", o.kernel], stderr=None)
        if st != 0:             # vm.sh's one line on stderr says why
            st = st if st == EXIT_SKIP else EXIT_FAIL
            if self.ktap:
                self.ktap_die(st, f"experiments/guest/vm.sh cannot have the {o.kernel} kernel "
                                  "here (its reason is on stderr)")
            raise Exit(st)
        release = line.split()[0] if line.split() else ""
        if not release:
            self.die(EXIT_FAIL, f"--kernel {o.kernel}: vm.sh --resolve named no release")
        return os.path.join(self.outputs, release)

    def start(self, out):
        """The run started: tcplab_runstate.start_run, its lines said."""
        o, _ = self.plan
        if o.out_set and not out:
            self.die(EXIT_USAGE, "--out '': want a directory")
        out = out or os.path.join(self.outputs, os.uname().release)
        try:
            with deferred():
                self.run, lines = rs.start_run(self.prog, out, bool(self.allow_foreign),
                                               self.outputs, "tcplab", self.top)
        except rs.Refused as e:
            for line in e.said:
                self.log(line)
            self.die(e.status, e.reason(self.prog))
        for line in lines:
            self.log(line)
        os.environ["TL_RUN_ID"] = self.run.run_id

    def job(self):
        """The run's job, waited for; the run's exit status."""
        o, p = self.plan
        if o.kernel:
            prog = os.path.join(self.top, "experiments", "runner", "tcplab_guest.py")
            mine = guest_args(self.outputs)
        else:
            prog = os.path.join(self.top, "experiments", "runner", "tcplab_host.py")
            mine = host_args(self.bin)
        self.job_name = os.path.basename(prog)
        argv = job_argv(self.py, prog, self.fin_args(), self.run, self.version,
                        self.allow_foreign, mine, tp.job_args(o, p.table, p)[1],
                        ktap=self.ktap_started)
        # fd 3: the KTAP stream (stdout), as tcplab_finish.py's --ktap-fd 3 writes it
        ktap = self.ktap_fd if self.ktap_fd is not None else 1
        with deferred():
            self.child = subprocess.Popen(["sh", "-c", f'exec 3>&{ktap}; exec "$@"', "sh"] + argv,
                                          pass_fds=(ktap,))
        status = self.child.wait()
        self.child = None
        if status < 0:
            status = 128 - status
        if status in (0, EXIT_FAIL, EXIT_SKIP, EXIT_USAGE, 141):
            return status
        if status > 128:
            self.die(EXIT_FAIL, f"the run's end ({self.job_name}) was killed by "
                                f"SIG{tj.signal_name(status - 128)}: its reports, failed "
                                "outputs or last lines may be missing")
        self.die(EXIT_FAIL, f"the run's end ({self.job_name}) failed with status {status} "
                            "(above): its reports, failed outputs or last lines may be missing")

    def main(self):
        if self.args[:1] == ["sandbox"]:
            self.ensure_built()
            sandbox = os.path.join(self.top, "experiments", "sandbox", "sandbox.sh")
            os.execv(sandbox, [sandbox] + self.args[1:])
        for k in [k for k in os.environ if k.startswith(("TL_KNOB_", "TL_UNIT_KNOBS_"))]:
            del os.environ[k]       # a unit sees only the knobs this run gives it
        self.version = self.tcplab_version()
        tp.CMD = "./run.sh" if self.prog == "run.sh" else self.prog
        self.plan = o, p = tp.plan(self.exp, self.args, os.environ)
        if p.action in ("usage", "text"):
            self.say(1, p.text)
            return 0
        if p.action == "version":
            self.say(1, f"tcplab {self.version}\n")
            return 0
        self.ktap = bool(o and o.ktap)
        if self.ktap and not o.list:    # KTAP alone on stdout, the rest on stderr
            self.ktap_fd = os.dup(1)
            os.dup2(2, 1)
        if p.action == "die":
            self.die(p.status, p.msg)
        self.allow_foreign = o.foreign
        os.environ.update(p.knob_env)   # --kernel VER: each unit's knobs, for vm.sh
        if p.action == "all":
            # built first: the driver's vm.sh --resolve needs the programs
            self.ensure_built()
            argv = [self.py, "-S", os.path.join(self.top, "experiments", "guest",
                                                "tcplab_all.py"),
                    "--run-sh", os.path.join(self.top, "run.sh")]
            argv += (["--quick"] if o.quick else []) + (["--all"] if o.all else [])
            argv += (["--accel", o.accel] if o.accel_set else [])
            argv += (["--mtu", o.mtu] if o.mtu else []) + (["--out", o.out] if o.out_set else [])
            argv += (["--allow-foreign-out"] if o.foreign else [])
            argv += ["--host-units", " ".join(p.named_units), "--guest-units",
                     " ".join(p.guest_units), "--prog", self.prog, "--top", self.top, "--exp",
                     self.exp, "--outputs", self.outputs, "--version", self.version,
                     "--bin", self.bin]
            # its stop signals blocked across the exec, as run.sh blocks this program's: the
            # driver lets them in once its handlers are set
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            os.execv(self.py, argv)
        if o.quick:
            os.environ["TL_QUICK"] = "1"
        if os.geteuid() != 0 and not o.kernel:
            return self.userns_run()
        if os.environ.get("TCPLAB_USERNS") and not o.kernel:
            self.allow_foreign = True   # the user's own rights decide where it writes
            self.log("not root: running as root of an unprivileged user namespace "
                     "(unshare -Urnmp)")
        if self.ktap:
            self.ktap_start()
        out = o.out
        if o.kernel and not o.out_set:
            out = self.guest_out()
        self.start(out)
        self.ensure_built()
        self.log(f"running {' '.join(p.run)}"
                 + (f" in Debian kernel {o.kernel} ({o.accel})" if o.kernel else ""))
        if o.kernel and p.rotate_note:
            self.log(p.rotate_note)
        return self.job()

    def stop(self, signum):
        """A stop signal: every other one ignored from now on; what runs stopped; KTAP's end."""
        STATE["stopping"] = True
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        if self.run is not None:
            self.log(f"{SAID[signum]} (SIG{signal.Signals(signum).name[3:]}): stopping every "
                     "unit")
            self.stop_child(STOP_WAIT_S)
            if self.ktap:
                self.ktap_die(128 + signum, f"{SAID[signum]} (SIG"
                                            f"{signal.Signals(signum).name[3:]})")
        else:
            self.stop_child()
        return 128 + signum

    def cleanup(self):
        """The job stopped (if still there), then the run's cleanup: once."""
        STATE["stopping"] = True
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        self.stop_child(STOP_WAIT_S)
        run, self.run = self.run, None
        if run is not None:
            for line in run.cleanup(self.top):
                self.log(line)


def fin_args(prog, top, exp, py, run, o, p):
    """tcplab_finish.py's STATE for a run: the run's own (PROG, TOP, EXP, PY; its output and
    temporary directories once RUN, a tcplab_runstate.Started, is started) and what the plan
    decides (tcplab_plan.job_args)."""
    out = run.out if run else (o.out if o else "")
    return (["--prog", prog, "--top", top, "--exp", exp, "--py", py, "--out", out,
             "--full-kb", str(FULL_KB)] + (["--tmp", run.tmp] if run else [])
            + tp.job_args(o, p.table, p)[0])


def host_args(bindir):
    """tcplab_host.py's options that belong to the run: its programs, its namespaces' prefix
    (tcplab-<this process's pid>), the reserve's size."""
    return ["--bin", bindir, "--ns-name", f"tcplab-{os.getpid()}",
            "--reserve-kb", str(rs.RESERVE_KB)]


def guest_args(outputs):
    """tcplab_guest.py's options that belong to the run: where outputs/<release> is."""
    return ["--outputs", outputs]


def job_argv(py, program, fin, run, version, allow_foreign, mine, own, ktap=False):
    """The command line of a run's job (tcplab_host.py or tcplab_guest.py, PROGRAM): FIN, its
    end's state (fin_args); the run's state (RUN's record and reserve, VERSION); MINE, the job's
    options that belong to the run (host_args, guest_args); OWN, the plan's (tcplab_plan.
    job_args), "--" and the units last.  SIGINT and SIGQUIT ignored, as bash starts a
    background job, and so for its units; SIGTERM when this process dies."""
    return (["env", "--ignore-signal=INT,QUIT", "setpriv", "--pdeathsig", "TERM", py, "-S",
             program, "--t0", str(int(time.time()))] + fin
            + (["--ktap-fd", "3"] if ktap else [])
            + ["--state", run.state, "--record", run.record, "--version", version]
            + (["--allow-foreign-out"] if allow_foreign else [])
            + ["--reserve", run.reserve] + mine + own)


def is_elf(path):
    """An executable file that starts with ELF's magic number."""
    try:
        with open(path, "rb") as f:
            return os.access(path, os.X_OK) and f.read(4) == b"\x7fELF"
    except OSError:
        return False


def parse(argv):
    o = {"prog": "run.sh", "top": "", "bin": "", "outputs": "", "self": "run.sh",
         "installed": False, "args": []}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            o["args"] = argv[i + 1:]
            return o
        if a == "--installed":
            o["installed"] = True
            i += 1
            continue
        if a in ("--prog", "--top", "--bin", "--outputs", "--self") and i + 1 < len(argv):
            o[a[2:]] = argv[i + 1]
            i += 2
            continue
        break
    raise SystemExit("usage: tcplab_run.py --prog P --top DIR --bin DIR --outputs DIR --self PATH "
                     "[--installed] -- ARG... (run.sh runs it)")


def main(argv):
    r = None
    status = EXIT_FAIL
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        # a closed stdin, stdout or stderr is /dev/null: the output directory's lock must not
        # take its number, and so become a job's stdout
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
            except OSError:
                os.set_inheritable(os.open(os.devnull, os.O_RDWR), True)
        r = Runner(parse(argv))
        status = r.main()
    except Stop as s:
        status = r.stop(s.signum) if r is not None else 128 + s.signum
    except Exit as e:
        status = e.status
    except Exception as e:    # a bug here: one line, the run cleaned up, never a traceback
        status = EXIT_FAIL
        prog = r.prog if r is not None else "run.sh"
        tf.write(2, f"{prog}: stopped (status 1): tcplab_run.py failed: "
                    f"{type(e).__name__}: {e}\n")
    finally:
        if r is not None:
            try:
                r.cleanup()
            except Stop:
                pass
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Stop as stop:        # one more, before the first one's handler ignored the rest
        sys.exit(128 + stop.signum)
