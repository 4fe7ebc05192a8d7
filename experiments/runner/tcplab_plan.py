#!/usr/bin/python3
"""tcplab_plan — what a run.sh command line asks for, decided once, before anything starts.

The runner's first part in one program (docs/design.md, "The runner"): the options, --help,
--list, the unit table (read once, by tcplab_units), the units a set selects, the knobs, --mtu
and root against each unit, --kernel and --kernel all, and every refusal of all these, in the
order run.sh has always made them.  The runner (tcplab_run.py) and --kernel all's driver
(tcplab_all.py) call plan() and then run it: the namespaces, the units, the guests, the
reports; job_args() gives a run's job what the plan decided.

The command line prints a plan as bash (what run.sh once evaluated), to read one and for the
tests, which check through it what each kind of command line plans:

    tcplab_plan.py [--as PROG] EXPDIR ARG...
        PROG: run.sh's PROG (run.sh, or tcplab installed), for the lines that name the command.
        ARG...: run.sh's own arguments (after the diff/matrix/kcidb/sandbox subcommands, which
        run.sh hands on by itself).  Prints bash code, every value shlex-quoted, that sets:
          PLAN_ACTION   usage | version | text | die | all | run
          PLAN_TEXT     what `text` prints on stdout (--list, UNIT --help); usage's text too
          PLAN_STATUS, PLAN_MSG   `die`: run.sh's exit status and its one line (die says it,
                        under --ktap too, with PLAN already set for a skip's test points)
          KERNEL ACCEL ACCEL_SET OUT OUT_SET MTU_OPT KTAP LIST QUICK ALL, and RS_ALLOW_FOREIGN
                        when --allow-foreign-out was given
          K_VALUE, K_GIVEN   the knobs, by UNIT:NAME (under --kernel VER each unit's
                        TL_UNIT_KNOBS_<UNIT>, exported)
          PLAN          the units the KTAP test points are for, in order
          RUN_UNITS     the units to run: PLAN less the ones skipped before the run
          NAMED, NAMED_UNITS, GUEST_UNITS   names given; for --kernel all, the ones a guest runs
          SKIPPED, WHY  the units skipped before the run ("skipped: REASON")
          VM_ORDER, ROTATE_NOTE   --kernel VER: the order the guest runs RUN_UNITS in
                        (TCPLAB_ROTATE=I/N, set by --kernel all), and the line that says so
        The progress lines a decision makes (a unit skipped, or on the host only) go to stderr
        as run.sh's log prints them.  Exit 0; anything else is a bug here (run.sh stops).

Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import os
import re
import shlex
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcplab_units as tu  # noqa: E402

EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 1, 2, 4
# How the user calls it, in the lines that name the command: ./run.sh in a clone, tcplab
# installed (run.sh's PROG, which make install sets; --as)
CMD = "./run.sh"
_UNIT = re.compile(r"[a-z0-9][a-z0-9-]*")

USAGE = """\
usage: ./run.sh [--quick] [--all] [--kernel VERSION|all] [--accel tcg|kvm] [--out DIR]
                [--mtu N] [--allow-foreign-out] [--ktap] [--set KNOB=VALUE]... [NAME...]
       ./run.sh NAME... --help
       ./run.sh diff DIR_A DIR_B
       ./run.sh matrix [--out DIR] DIR DIR [DIR...]
       ./run.sh kcidb --origin ORIGIN --build-id ORIGIN:ID [--run-id ID] [KTAP]
       ./run.sh sandbox [--out DIR] [--shell client|server]
       ./run.sh --list | --help | --version

Builds what is missing (installing missing Debian packages when root), runs each experiment
unit in its own fresh network namespace, and writes outputs/<kernel release>/: for every
report a .txt for people and a .json for tools, and raw/<unit>/ with what the programs printed.
Installed (make install, as tcplab), it builds nothing and writes outputs/ of the current directory.

  (no NAME)        the connect() investigation: the units of set "default" in experiments/units
  --quick          leave out the units marked quick=skip (p01-synretry-default: over 2 minutes)
  --all            the default units and the labs (set "labs")
  NAME...          only these units, each once (see --list)
  --kernel VER     run inside a Debian kernel VER (e.g. 5.10, 6.1, 6.12, 7.2) booted under QEMU,
                   fetched with tcplab's own apt configuration (docs/kernel-matrix.md, "Kernels");
                   VER is a Debian cloud kernel series: 4.19, 4.20, or 5.0 .. 9.20 (no Linux
                   major has had more than 21 minors); anything else is refused before apt is
                   touched
  --kernel all     the host's run and a guest each of 5.10, 6.1, 6.12 and 7.2, side by side (as
                   many guests at once as a measured memory budget and the CPUs allow, the rest
                   queued); each writes its own outputs/<release>/ (--out DIR: DIR/<release>/),
                   its lines prefixed [host] or [VER]; qemu=no units run on the host only; the
                   guests' vm.txt says side_by_side=N; exit 0, or the worst run's status
                   (docs/kernel-matrix.md, "All kernels at once")
  --accel A        with --kernel: tcg (default, measured faster here) or kvm
  --out DIR        write to DIR instead of outputs/<kernel release>; one run at a time per DIR
  --mtu N          the MTU of the wire units' veth pair (68..65535) instead of experiments/units';
                   below a unit's "mtu min" there, it is refused when named, skipped when a set
                   chose it (docs/wire.md, "Small MTUs")
  --allow-foreign-out  as root, write to a DIR another user owns (refused by default)
  --set KNOB=VALUE a knob of the units named (experiments/units, "# knob:" lines): a parameter
                   the unit declares with its default, range and meaning; once per knob, checked
                   before anything starts (bad name or value: exit 2); the outputs record the
                   knobs given ("knobs" in the .json, a "knobs:" line in the .txt); an older
                   variable such as TL_P03_REQUESTS still sets its knob; not with --kernel all
  NAME... --help   each unit's line of the table and its knobs: default, range, meaning
  --ktap           print KTAP (kselftest's result format) on stdout: one test point per unit, ok,
                   not ok or "# SKIP reason", progress as "# " lines; all else goes to stderr
  diff A B         compare two output directories through their .json files (exit 1 if they differ)
  matrix DIR...    one row per fact, one column per kernel: DIR/matrix.txt, .json, .svg
                   (--out DIR, default outputs/; docs/kernel-matrix.md "The matrix view")
  kcidb ...        the KTAP of a --ktap run (the file KTAP, or stdin) as JSON for KernelCI's
                   database (KCIDB, kcidb-io schema v5.3) on stdout, one test per test point:
                   --origin the submitter's KCIDB origin, --build-id the kernel build tested,
                   --run-id this run (default: from the KTAP's SHA-256); exit 1 bad KTAP
                   (docs/kernel-matrix.md, "KCIDB")
  sandbox ...      free exploration: a shell on each side of the wire, the probes recording,
                   the same outputs when you leave (docs/sandbox.md)
  --list           print the unit table (experiments/units): sets, durations, limits, needs,
                   and each unit's knobs (NAME=DEFAULT)
  --version        print tcplab's version (each unit's .json records it as tcplab_version)

Units marked alone=yes (they measure a speed) run by themselves, after the others. A unit whose
netns is "wire" runs in a client namespace joined to a server namespace by a veth pair
(192.0.2.1 and .2, docs/wire.md). A unit that cannot run on this kernel (e.g. no sch_netem) is
reported "skipped", with its reason, and does not fail the run. A unit still
running at its limit_s is stopped and reported "timed out"; a failed or timed-out unit keeps its
partial raw/<unit>/ with a status.txt saying why, and its .txt/.json say "failed: <reason>"
(docs/output-format.md); the last line names the failed units.
Not root: the run goes on as root of an unprivileged user namespace of its own (unshare -Urnmp,
a private /run/netns), where the wire units have their namespaces and veth pair too; the outputs
are the user's, and nothing outlives the run, even a SIGKILL.  A unit that needs real root
(root=yes, with its reason) is skipped when a set chose it, refused when named.
Exit status: 0 all units ran and reported, 1 a unit failed, 2 bad usage, 4 skipped (neither
root nor unprivileged user namespaces; with --ktap also: every unit skipped, as kselftest's KSFT_SKIP).
"""


def usage_text():
    """The usage, naming the command as the user calls it (make install's old sed, moved here:
    ./run.sh becomes tcplab, the continued line aligned under the first)."""
    text = USAGE.replace("./run.sh", CMD)
    pad = " " * len(f"usage: {CMD} ")
    return text.replace("\n" + " " * len("usage: ./run.sh ") + "[", "\n" + pad + "[", 1)


class Stop(Exception):
    """The plan ends here: PLAN_ACTION die with a status and run.sh's one line."""

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status, self.msg = status, msg


# Where log() says a line: stderr, or a caller's function of the line (`--kernel all`'s driver
# plans its guests' runs in its own process, and prefixes their lines)
SAY = None


def log(msg):
    """run.sh's log before --ktap's header: "HH:MM:SS [run] MSG" on stderr."""
    line = f"{time.strftime('%H:%M:%S')} [run] {msg}"
    if SAY is not None:
        SAY(line)
    else:
        tu._write(sys.stderr, line + "\n")


def kernel_series_ok(v):
    """Whether V names a Debian cloud kernel series that can exist: Debian's cloud-amd64 flavour
    starts with 4.19 (buster), no Linux major has had more than 21 minors (4.0 .. 4.20), and a
    major above 9 is decades away.  Checked before apt is touched (vm.sh runs apt-get update)."""
    m = re.fullmatch(r"([1-9])\.(0|[1-9][0-9]?)", v)
    if not m:
        return False
    major, minor = int(m.group(1)), int(m.group(2))
    return minor <= 20 and (major >= 5 or (major == 4 and minor >= 19))


class Options:
    """run.sh's options as its argument loop read them."""

    def __init__(self):
        self.kernel, self.accel, self.accel_set = "", "tcg", False
        self.out, self.out_set, self.mtu, self.foreign, self.ktap = "", False, "", False, False
        self.list = self.quick = self.all = self.help = False
        self.units, self.sets = [], []


def _set(o, v):
    o.sets.append(v)


def _kernel(o, v):
    o.kernel = v
    if not v:
        raise Stop(EXIT_USAGE, "--kernel '': want a version like 5.10 or 7.2")


def _accel(o, v):
    o.accel, o.accel_set = v, True


def _out(o, v):
    o.out, o.out_set = v, True
    if not v:
        raise Stop(EXIT_USAGE, "--out '': want a directory")


def _mtu(o, v):
    o.mtu = v
    if not tu.wire_mtu_ok(v):
        raise Stop(EXIT_USAGE, f"--mtu '{tu._printable(v)}': want 68..65535 (a veth's range)")


# An option and its value: what its refusal says when the value is missing, and what takes it.
VALUED = {"--set": ("--set needs NAME=VALUE ({cmd} UNIT --help lists its knobs)", _set),
          "--kernel": ("--kernel needs a version (e.g. 6.1)", _kernel),
          "--accel": ("--accel needs tcg or kvm", _accel),
          "--out": ("--out needs a directory", _out),
          "--mtu": ("--mtu needs a number (68..65535)", _mtu)}
FLAGS = {"--list": "list", "--quick": "quick", "--all": "all", "--allow-foreign-out": "foreign",
         "--ktap": "ktap"}


def parse(argv):
    """The argument loop: Options, or Stop; "usage" or "version" for what ends it at once."""
    o = Options()
    i = 0
    while i < len(argv):
        a = argv[i]
        more = len(argv) - i - 1    # arguments after this one
        if a in ("-h", "--help"):
            # --help alone is the usage; with a unit named before or right after it, its knobs
            if not o.units and (more < 1 or argv[i + 1].startswith("-")):
                return "usage"
            o.help = True
        elif a == "--version":
            return "version"
        elif a in VALUED:
            missing, take = VALUED[a]
            if more < 1:
                raise Stop(EXIT_USAGE, missing.format(cmd=CMD))
            take(o, argv[i + 1])
            i += 1
        elif a in FLAGS:
            setattr(o, FLAGS[a], True)
        elif a == "--":
            o.units += argv[i + 1:]
            break
        elif a.startswith("-"):
            raise Stop(EXIT_USAGE, f"unknown option '{a}' (see {CMD} --help)")
        else:
            o.units.append(a)
        i += 1
    return o


def qemu_no(t, u):
    why = t.qemu_why.get(u)
    return "qemu=no in experiments/units" + (f": {why}" if why else "")


def root_yes(t, u):
    why = t.root_why.get(u)
    return "root=yes in experiments/units" + (f": {why}" if why else "")


def unknown(u):
    return Stop(EXIT_USAGE, f"unknown experiment '{tu._printable(u)}' ({CMD} --list shows "
                            "them)")


def known(t, u):
    return bool(_UNIT.fullmatch(u)) and u in t.cols["set"]


def unit_help(t, u):
    """One unit's line of the table and its knobs, for ./run.sh UNIT --help."""
    c = t.cols
    out = (f"{u}: report {c['report'][u]}, set {c['set'][u]}, about {c['expect_s'][u]} s "
           f"(limit {c['limit_s'][u]} s), root {c['root'][u]}, netns {c['netns'][u]}, "
           f"qemu {c['qemu'][u]}\n")
    if not t.knobs.get(u):
        return out + "  no knobs\n"
    out += "  knobs (--set NAME=VALUE):\n"
    for k in t.knobs[u]:
        key = f"{u}:{k}"
        env = f" (also env {t.k_env[key]})" if t.k_env[key] else ""
        out += "    %-12s default %-6s range %-16s %s%s\n" % (
            k, t.k_default[key], t.k_range[key], t.k_what[key], env)
    return out


def list_units(t):
    """--list: the table, one aligned line per unit under a header, its knobs after it."""
    f = "%-22s %-22s %-8s %-6s %-5s %8s %8s  %-4s %5s  %s"
    out = f % ("unit", "report", "set", "quick", "alone", "expect_s", "limit_s", "root",
               "netns", "qemu") + "\n"
    for u in t.names:
        out += f % tuple(t.cols[c][u] if c != "unit" else u for c in tu.COLUMNS)
        knobs = ",".join(f"{k}={t.k_default[f'{u}:{k}']}" for k in t.knobs.get(u, ()))
        out += (f"  knobs: {knobs}" if knobs else "") + "\n"
    return out


class Plan:
    def __init__(self):
        self.action, self.text, self.status, self.msg = "run", "", 0, ""
        self.plan, self.run, self.named_units, self.guest_units = [], [], [], []
        self.skipped, self.why = [], {}
        self.knob_code = ""
        self.vm_order, self.rotate_note = [], ""
        self.knob_env = {}          # --kernel VER: what run.sh exports for vm.sh (TL_UNIT_KNOBS_*)
        self.knobs_given = {}       # unit -> [(knob, value)] given, in table order
        self.knob_value = {}        # "unit:knob" -> its value, given or default (K_VALUE)
        self.table = None           # the unit table it was made from (None: not read)

    def skip(self, u, why, said):
        """U skipped before the run: WHY for its outputs and KTAP, SAID as its progress line."""
        self.skipped.append(u)
        self.why[u] = f"skipped: {why}"
        log(f"{u}: {said}")


def decide(o, t, p, environ):
    """Every check after the table is read, in run.sh's order, filling P; Stop to refuse."""
    if o.help:      # ./run.sh UNIT... --help: each unit's line and knobs
        if (o.list or o.quick or o.all or o.kernel or o.accel_set or o.out_set or o.mtu
                or o.ktap or o.sets):
            raise Stop(EXIT_USAGE, "--help with a unit takes no other option")
        for u in o.units:
            if not known(t, u):
                raise unknown(u)
        p.action, p.text = "text", "".join(unit_help(t, u) for u in o.units)
        return
    if o.list:
        if (o.quick or o.all or o.kernel or o.accel_set or o.out_set or o.mtu or o.ktap
                or o.units or o.sets):
            raise Stop(EXIT_USAGE, "--list takes no other argument")
        p.action, p.text = "text", list_units(t)
        return
    if o.accel not in ("tcg", "kvm"):
        raise Stop(EXIT_USAGE, f"--accel '{o.accel}': want tcg or kvm")
    if o.accel_set and not o.kernel:
        raise Stop(EXIT_USAGE, f"--accel '{o.accel}' needs --kernel")
    vm = o.kernel and o.kernel != "all"     # one guest kernel
    if vm and not re.fullmatch(r"[0-9]+\.[0-9]+", o.kernel):
        raise Stop(EXIT_USAGE, f"--kernel '{o.kernel}': want a version like 5.10 or 7.2, or all")
    if vm and not kernel_series_ok(o.kernel):
        raise Stop(EXIT_USAGE, f"--kernel '{o.kernel}': no such Debian cloud kernel series "
                               "(4.19, 5.x, 6.x .. with minor <= 20)")
    if o.out_set and "\n" in o.out:
        raise Stop(EXIT_USAGE, "--out: a directory name with a newline")
    seen = set()
    for u in o.units:
        if not known(t, u):
            raise unknown(u)
        if u in seen:
            raise Stop(EXIT_USAGE, f"unit '{u}' named twice")
        seen.add(u)
        if vm and t.cols["qemu"][u] != "yes":
            raise Stop(EXIT_USAGE, f"{u} cannot run under --kernel ({qemu_no(t, u)})")
    if o.units and o.all:
        raise Stop(EXIT_USAGE, "--all selects the units: name none with it")
    # knobs: checked before anything starts; the values of every unit of the run, its own
    # defaults (with no --set: what the unit always did); --set only with units named
    if o.sets and not o.units:
        raise Stop(EXIT_USAGE, f"--set needs the units named ({CMD} UNIT --set NAME=VALUE)")
    if o.sets and o.kernel == "all":
        raise Stop(EXIT_USAGE, "--set with --kernel all: not supported (use --set with one "
                               "--kernel VER)")
    knob_units = o.units or t.names
    try:
        value, given = tu.resolve_knobs(t, knob_units, o.sets, environ)
    except tu.KnobError as e:
        raise Stop(EXIT_USAGE, str(e)) from None
    p.knob_code = tu.knobs_shell(t, knob_units, value, given, bool(vm))
    p.knob_value = value
    p.knob_env = tu.knob_exports(t, knob_units, value) if vm else {}
    # the knobs given (--set, or the older env variable), by unit in table order: what run.sh
    # hands a guest's job as --knob, for its knobs.txt
    p.knobs_given = {u: [(k, value[f"{u}:{k}"]) for k in t.knobs.get(u, ())
                         if given.get(f"{u}:{k}")] for u in knob_units}
    named = bool(o.units)
    p.named_units = list(o.units)
    if o.ktap and o.kernel == "all":
        raise Stop(EXIT_USAGE, "--ktap with --kernel all: KTAP is one stream per kernel (use "
                               "--ktap with one --kernel VER)")
    if not named:
        units = select(o, t, p, vm)
        if not units:
            raise Stop(EXIT_USAGE, "no unit to run")
    else:
        units = list(o.units)
        p.plan = list(units)
    if o.mtu:
        units = mtu_fit(o, t, p, units, named)
    if o.kernel == "all":   # the driver runs the host's run.sh and the guests (experiments/guest)
        p.guest_units = [u for u in p.named_units if t.cols["qemu"][u] != "no"]
        if named and not p.guest_units:
            raise Stop(EXIT_USAGE, f"--kernel all: none of {' '.join(p.named_units)} runs in a "
                                   "guest (qemu=no in experiments/units): run it without "
                                   "--kernel")
        for u in p.named_units:
            if t.cols["qemu"][u] != "yes":
                log(f"{u}: on the host only ({qemu_no(t, u)})")
        p.action = "all"
    elif environ.get("TCPLAB_USERNS") and not o.kernel:
        # root of a user namespace (run.sh's userns_run): a unit that needs real root (root=yes)
        # is skipped when a set chose it, refused when named
        can = []
        for u in units:
            if t.cols["root"][u] == "no":
                can.append(u)
            elif named:
                raise Stop(EXIT_SKIP, f"{u} needs root ({root_yes(t, u)})")
            else:
                p.skip(u, f"needs root ({root_yes(t, u)})",
                       f"skipped: not root, and it needs root ({root_yes(t, u)})")
        if not can:
            raise Stop(EXIT_SKIP, "every unit selected needs root")
        units = can
    p.run = units
    if vm:
        rotate_plan(t, p, environ.get("TCPLAB_ROTATE", ""))


def rotate(units, limit, i, n):
    """UNITS in the same order, starting from the one in which their limits, summed in order,
    pass I/N of their sum (the limits stand for the units' lengths, not known before they run)."""
    total, passed, k = sum(limit[u] for u in units), 0, 0
    for u in units:
        if (passed + limit[u]) * n > total * i:
            break
        passed += limit[u]
        k += 1
    k = k if k < len(units) else 0
    return units[k:] + units[:k]


def rotate_plan(t, p, spec):
    """A guest's order of its units: under --kernel all, the I-th of N guests side by side gets
    TCPLAB_ROTATE=I/N (experiments/guest/tcplab_all.py) and starts its units at another point
    of the same order, so that their long waits on TCP timers fall at different times and one
    guest's wait is another's CPU (docs/kernel-matrix.md, "All kernels at once")."""
    p.vm_order = list(p.run)
    if not spec:
        return
    m = re.fullmatch(r"([0-9]+)/([1-9][0-9]?)", spec)
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise Stop(EXIT_USAGE, f"TCPLAB_ROTATE={spec}: want I/N, 0 <= I < N <= 99")
    i, n = int(m.group(1)), int(m.group(2))
    if len(p.run) < 2:
        return
    p.vm_order = rotate(p.run, {u: int(t.cols["limit_s"][u]) for u in p.run}, i, n)
    if p.vm_order[0] != p.run[0]:
        p.rotate_note = (f"units in turn from {p.vm_order[0]} (TCPLAB_ROTATE={spec}: guest "
                         f"{i + 1} of {n} side by side)")


def select(o, t, p, vm):
    """The units of a run with no names: the default set, plus the labs with --all, minus the
    quick=skip ones with --quick; under --kernel VER the qemu=no ones are skipped (said once)."""
    out = []
    for u in t.names:
        s = t.cols["set"][u]
        if not (s == "default" or (s == "labs" and o.all)):
            continue
        if o.quick and t.cols["quick"][u] != "run":
            continue
        p.plan.append(u)
        if vm and t.cols["qemu"][u] == "no":
            why = f"not run under --kernel ({qemu_no(t, u)})"
            p.skip(u, why, why)
            continue
        out.append(u)
    return out


def mtu_fit(o, t, p, units, named):
    """--mtu: some unit must run on the wire; a unit whose "mtu min" is above it is refused
    when named, skipped when a set chose it, before any unit starts."""
    if not any(u in t.mtu for u in units):
        raise Stop(EXIT_USAGE, f"--mtu {o.mtu}: none of these units runs on the wire (netns wire "
                               "in experiments/units)")
    fit = []
    for u in units:
        least = t.mtu_min.get(u)
        if not least or int(o.mtu) >= int(least):
            fit.append(u)
            continue
        small = f"--mtu {o.mtu} is below {least}, the least MTU it runs at: {t.mtu_why[u]}"
        if named:
            raise Stop(EXIT_USAGE, f"{u}: {small}")
        p.skip(u, small, f"skipped: {small}")
    if not fit:
        raise Stop(EXIT_SKIP, f"--mtu {o.mtu}: every unit selected needs a larger MTU")
    return fit


def job_args(o, t, p):
    """(FIN, OWN): what the run's job takes that the plan decides, in one place for run.sh and
    for tcplab_all.py's runs.  FIN, tcplab_finish.py's (also `ktap-skip`'s): every unit's
    report and limit_s, the plan, each unit skipped with its reason, the guest's kernel.  OWN,
    the job's own, once the plan runs (else []): the knobs given (--knob, for knobs.txt); the
    host's (--quick, --alone, --netns U 2, --wire U MTU with --mtu applied, each knob's value
    as --knob-env) or the guest's (--accel, --mtu, --out-set, --order); then "--" and the
    units.  What belongs to the run itself (its directories, record, reserve, time, programs,
    namespaces' prefix) the caller adds."""
    fin = []
    if t is not None:
        for u in t.names:
            fin += ["--unit", u, t.cols["report"][u], t.cols["limit_s"][u]]
    for u in p.plan:
        fin += ["--plan", u]
    for u in p.skipped:
        fin += ["--skipped", u, tu.why_cut(p.why[u])]
    if o is not None and o.kernel and o.kernel != "all":
        fin += ["--kernel", o.kernel]
    if p.action != "run":
        return fin, []
    own = []
    for u in p.run:
        for k, v in p.knobs_given.get(u, ()):
            own += ["--knob", u, k, v]
    if o.kernel:
        own += ["--accel", o.accel] + (["--mtu", o.mtu] if o.mtu else [])
        own += ["--out-set"] if o.out_set else []
        for u in p.vm_order:
            own += ["--order", u]
        return fin, own + ["--", o.kernel] + p.run
    own += ["--quick"] if o.quick else []
    for u in p.run:
        if t.cols["alone"][u] == "yes":
            own += ["--alone", u]
        if t.cols["netns"][u] == "2":
            own += ["--netns", u, "2"]
        elif t.mtu.get(u):
            own += ["--wire", u, o.mtu or t.mtu[u]]
        for k in t.knobs.get(u, ()):
            own += ["--knob-env", u, k, p.knob_value[f"{u}:{k}"]]
    return fin, own + ["--"] + p.run


def q(v):
    return shlex.quote(v)


def arr(var, values):
    return f"{var}=(" + " ".join(q(v) for v in values) + ")"


def shell(o, p):
    """The bash code run.sh evals."""
    out = [p.knob_code]
    if o is not None:
        out += [f"KERNEL={q(o.kernel)} ACCEL={q(o.accel)} ACCEL_SET={'1' if o.accel_set else ''}",
                f"OUT={q(o.out)} OUT_SET={'1' if o.out_set else ''} MTU_OPT={q(o.mtu)}",
                f"KTAP={'1' if o.ktap else ''} LIST={'1' if o.list else ''}",
                f"QUICK={'1' if o.quick else ''} ALL={'1' if o.all else ''}",
                arr("NAMED_UNITS", p.named_units), f"NAMED={'1' if o.units else ''}"]
        if o.foreign:
            out.append("RS_ALLOW_FOREIGN=1")
    out += [arr("PLAN", p.plan), arr("RUN_UNITS", p.run), arr("GUEST_UNITS", p.guest_units),
            arr("SKIPPED", p.skipped), arr("VM_ORDER", p.vm_order),
            f"ROTATE_NOTE={q(p.rotate_note)}"]
    out += [f"WHY[{q(u)}]={q(w)}" for u, w in p.why.items()]
    out += [f"PLAN_TEXT={q(p.text)}", f"PLAN_STATUS={p.status}", f"PLAN_MSG={q(p.msg)}",
            f"PLAN_ACTION={p.action}"]
    return "\n".join(x.rstrip("\n") for x in out if x) + "\n"


def plan(exp, argv, environ, table=None):
    """(Options, or None where the argument loop did not finish; Plan).  TABLE: the unit table
    already read (tcplab_units.load), for a caller that plans several runs of one command line
    (`--kernel all`'s guests): the table is then read once."""
    p, o = Plan(), None
    try:
        parsed = parse(argv)
        if parsed in ("usage", "version"):
            p.action, p.text = parsed, usage_text() if parsed == "usage" else ""
            return None, p
        o = parsed
        try:
            t = table or tu.load(exp)
        except tu.TableError as e:
            raise Stop(EXIT_FAIL, str(e)) from None
        p.table = t
        decide(o, t, p, environ)
    except Stop as s:
        p.action, p.status, p.msg = "die", s.status, s.msg
    return o, p


def main(argv):
    global CMD
    if len(argv) >= 3 and argv[1] == "--as":
        CMD = "./run.sh" if argv[2] == "run.sh" else argv[2]
        argv = argv[:1] + argv[3:]
    if len(argv) < 2:
        tu._write(sys.stderr, "usage: tcplab_plan.py [--as PROG] EXPDIR [ARG...]\n")
        return 70
    o, p = plan(argv[1], argv[2:], os.environ)
    tu._write(sys.stdout, shell(o, p))
    return 0


if __name__ == "__main__":
    # run.sh gone while this writes to it (SIGKILL, CI's interrupt storm at 0.06 s): the pipe's
    # end kills this program silently, as it would a shell's printf, not with a traceback
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        sys.exit(main(sys.argv))
    except Exception:   # a bug here: run.sh stops with its own line
        import traceback
        traceback.print_exc()
        sys.exit(70)
