#!/usr/bin/python3
"""tcplab_units — the unit table (experiments/units): the one parser of it.

run.sh (its load_units evals `tcplab_units.py shell EXPDIR`), experiments/guest/vm.sh
(`tcplab_units.py get EXPDIR UNIT FIELD...` and `guest-bins EXPDIR`: the rows and the
"# guest:" lines only) and the tests and reports (tcplab.read_units(),
which imports this module) all read the table through here; its columns and comment lines are
explained in the table's own header.  A bad table is one message naming the file and line (the
words run.sh has always printed), the first bad thing found, in file order.

    tcplab_units.py shell EXPDIR
        bash code setting run.sh's UNIT_NAMES, U_* and K_* arrays (every value shlex-quoted);
        a bad table: "run.sh: MESSAGE" on stderr, nothing on stdout, exit 1
    tcplab_units.py get EXPDIR UNIT FIELD...
        each FIELD of UNIT on a line of its own: a column of the table (unit, report, set,
        quick, alone, expect_s, limit_s, root, netns, qemu), script (its collect script) or
        guest (the needs of its "# guest:" line, separated by blanks; empty without one);
        exit 3 and nothing printed when UNIT has no line of ten columns; the table is not
        checked (rows() below): vm.sh, started by run.sh, which checked it, makes its own
        checks and its own refusals (a netns it cannot give, a script not there); but its
        "# guest:" lines are, as load() checks them (a bad one: as shell, exit 1): vm.sh acts
        on each need, and one run.sh never saw (vm.sh run by hand) must not pass unread
    tcplab_units.py guest-bins EXPDIR
        every PROGRAM the table's "# guest:" lines name as bin:PROGRAM, one a line: the
        build/bin programs vm.sh ships only to a guest whose units need them; the "# guest:"
        lines checked as by get

    tcplab_units.py knobs EXPDIR [--export] [--set NAME=VALUE]... -- UNIT...
        the knobs of UNIT... (run.sh: the units named, else every unit) resolved, each from
        --set, else its table's env variable (from the environment), else its default, as bash
        code setting run.sh's K_VALUE and K_GIVEN ("UNIT:NAME" keys); --export adds, for a
        --kernel guest, each unit's TL_UNIT_KNOBS_<UNIT>="NAME=VALUE ..." (the guest's init
        gives a unit its own); a bad setting or env value: its one line on stdout, exit 2 (run.sh
        says it, under --ktap too); a bad table: as shell

Standard library only; run by Debian's /usr/bin/python3.
"""

import os
import re
import shlex
import signal
import sys

PROG = "run.sh"  # the messages are run.sh's: it is the table's first reader (docs/design.md)

COLUMNS = ("unit", "report", "set", "quick", "alone", "expect_s", "limit_s", "root", "netns",
           "qemu")

# experiments/lib/wire.sh: the veth pair's MTU when netns is plain "wire"
WIRE_MTU_DEFAULT = 1500

_UNIT = r"[a-z0-9][a-z0-9-]*"
_QEMU_NO = re.compile(r"# qemu no: (" + _UNIT + r"): (.+)", re.S)
_ROOT_YES = re.compile(r"# root yes: (" + _UNIT + r"): (.+)", re.S)
_MTU_MIN = re.compile(r"# mtu min: (" + _UNIT + r"): ([0-9]{2,5}): (.+)", re.S)
_KNOB = re.compile(r"# knob: (" + _UNIT + r"): ([a-z][a-z0-9_]{0,30}): ([^ :]+): ([^ :]+): "
                   r"(env (TL_[A-Z0-9_]+): )?([^ ].*)", re.S)
_NUM_RANGE = re.compile(r"(0|[1-9][0-9]{0,8})\.\.(0|[1-9][0-9]{0,8})")
_WORD_RANGE = re.compile(r"[a-z0-9_-]+(\|[a-z0-9_-]+)+")
_KNOB_NUM = re.compile(r"0|[1-9][0-9]{0,8}")
_KNOB_WORD = re.compile(r"[a-z0-9_-]+")
# the needs end at the first ": " (no need has one): what follows is why, for the reader
_GUEST = re.compile(r"# guest: (" + _UNIT + r"): (.+?): ([^ ].*)", re.S)
# a need's PROGRAM: bin: a build/bin program (fixtures/NAME.c, probes/NAME.c: the Makefile's
# names); host: a program vm.sh looks up in the host's PATH and /usr/sbin, so a name, no path
_GUEST_BIN = re.compile(r"[a-z][a-z0-9_]*")
_GUEST_HOST = re.compile(r"[a-z0-9][a-z0-9._+-]*")
GUEST_NEEDS = "tls, names, bin:PROGRAM or host:PROGRAM"

# (column, regex, what it must be), checked in this order after the column count
_CHECKS = (
    ("report", r"-|" + _UNIT, "a report name or '-'"),
    ("set", r"default|labs|named", "default, labs or named"),
    ("quick", r"run|skip", "run or skip"),
    ("alone", r"yes|no", "yes or no"),
    ("expect_s", r"[0-9]{1,5}", "seconds"),
    ("limit_s", r"[1-9][0-9]{0,4}", "seconds, 1..99999"),
    ("root", r"yes|no", "yes or no"),
    ("netns", r"[12]|wire(:[0-9]+)?", "1, 2, wire or wire:MTU"),
    ("qemu", r"yes|no", "yes or no"),
)


class TableError(Exception):
    """A bad table: str() is the one-line message (without run.sh's "run.sh: ")."""


def wire_mtu_ok(mtu):
    """experiments/lib/wire.sh's wire_mtu_ok: a decimal MTU a veth accepts, 68..65535, no
    leading zero, at most 5 digits."""
    return (mtu != "" and all(c in "0123456789" for c in mtu) and mtu[0] != "0"
            and len(mtu) <= 5 and 68 <= int(mtu) <= 65535)


def knob_ok(rng, value):
    """run.sh's knob_ok: whether VALUE is in RANGE (MIN..MAX or a|b|c)."""
    if re.fullmatch(r"[0-9]+\.\.[0-9]+", rng):
        lo, hi = rng.split("..")
        return bool(_KNOB_NUM.fullmatch(value)) and int(lo) <= int(value) <= int(hi)
    return ("|" + value + "|") in ("|" + rng + "|") and bool(_KNOB_WORD.fullmatch(value))


def collect_script(exp, unit, report):
    """A unit's collect script, in its experiment's folder: EXP/REPORT/UNIT.sh, or
    EXP/UNIT/UNIT.sh for a unit that feeds no report ('-')."""
    return f"{exp}/{unit if report == '-' else report}/{unit}.sh"


class Table:
    """The parsed table, with run.sh's arrays as dicts (insertion order: the table's)."""

    def __init__(self):
        self.names = []             # UNIT_NAMES
        self.cols = {c: {} for c in COLUMNS[1:]}   # U_REPORT, U_SET, ... by unit
        self.qemu_why = {}          # U_QEMU_WHY
        self.root_why = {}          # U_ROOT_WHY
        self.mtu = {}               # U_MTU: wire units only
        self.mtu_min = {}           # U_MTU_MIN
        self.mtu_why = {}           # U_MTU_WHY
        self.knobs = {}             # U_KNOBS: unit -> [name, ...] in table order
        self.k_default = {}         # K_DEFAULT, K_RANGE, K_ENV, K_WHAT: by "UNIT:NAME"
        self.k_range = {}
        self.k_env = {}
        self.k_what = {}
        self.guest = {}             # unit -> [need, ...] of its "# guest:" line
        self.guest_line = {}        # unit -> the number of that line

    def row(self, unit):
        """One unit's columns as strings, as written in the table; None: no such unit."""
        if unit not in self.cols["set"]:
            return None
        r = {"unit": unit}
        for c in COLUMNS[1:]:
            r[c] = self.cols[c][unit]
        return r


def _knob_line(t, line):
    """run.sh's old knob_line: one "# knob:" line into T; else TableError's words."""
    m = _KNOB.fullmatch(line)
    if not m:
        raise TableError("knob: want '# knob: UNIT: NAME: DEFAULT: MIN..MAX or a|b|c: "
                         "[env VAR: ]meaning'")
    u, k, default, rng = m.group(1), m.group(2), m.group(3), m.group(4)
    rm = _NUM_RANGE.fullmatch(rng)
    if not ((rm and int(rm.group(1)) <= int(rm.group(2))) or _WORD_RANGE.fullmatch(rng)):
        raise TableError(f"knob {k}: range '{rng}': want MIN..MAX or a|b|c")
    if k in t.knobs.get(u, ()):
        raise TableError(f"knob {k} of {u} declared twice")
    if not knob_ok(rng, default):
        raise TableError(f"knob {k}: default '{default}' is not in {rng}")
    key = f"{u}:{k}"
    t.k_range[key], t.k_env[key], t.k_what[key] = rng, m.group(6) or "", m.group(7)
    t.k_default[key] = default
    t.knobs.setdefault(u, []).append(k)


def guest_line(line):
    """One "# guest: UNIT: NEED...: why" line's (UNIT, [need, ...]), each need checked; else
    TableError's words.
    The needs: tls (the kernel-TLS modules), names (the per-namespace /etc of p07's kind),
    bin:PROGRAM (a build/bin program shipped only for the units that name it), host:PROGRAM
    (a host program with its libraries); vm.sh's guest_need says what each brings."""
    m = _GUEST.fullmatch(line)
    if not m or "" in m.group(2).split(" "):
        raise TableError(f"guest: want '# guest: UNIT: NEED...: why', each NEED {GUEST_NEEDS}, "
                         "one blank between them")
    u, needs = m.group(1), m.group(2).split(" ")
    for i, need in enumerate(needs):
        kind, _, prog = need.partition(":")
        if need in ("tls", "names"):
            pass
        elif kind == "bin" and prog:
            if not _GUEST_BIN.fullmatch(prog):
                raise TableError(f"guest need '{need}' of {u}: want bin:PROGRAM, a build/bin "
                                 "program's name (a-z, then a-z, 0-9 and '_')")
        elif kind == "host" and prog:
            if not _GUEST_HOST.fullmatch(prog):
                raise TableError(f"guest need '{need}' of {u}: want host:PROGRAM, a program's "
                                 "name (no path: the guest gets the one PATH finds)")
        else:
            raise TableError(f"guest need '{need}' of {u}: want {GUEST_NEEDS}")
        if need in needs[:i]:
            raise TableError(f"guest need '{need}' of {u} named twice")
    return u, needs


def _guest_line(t, line, n):
    """One "# guest:" line into T (line N); else TableError's words."""
    u, needs = guest_line(line)
    if u in t.guest:
        raise TableError(f"guest needs of {u} declared twice (line {t.guest_line[u]} and this)")
    t.guest[u], t.guest_line[u] = needs, n


def _unit_line(t, exp, name, words, files):
    """The checks of one unit's line, in run.sh's order; the first failing one's words, or None.
    files: whether its report and collect script must be there too."""
    if len(words) != len(COLUMNS):
        return "want 10 columns"
    if not re.fullmatch(_UNIT, name):
        return f"unit '{name}': want a-z, 0-9 and '-'"
    if name in t.cols["set"]:
        return f"unit '{name}' listed twice"
    v = dict(zip(COLUMNS, words))
    for c, rx, want in _CHECKS:
        if not re.fullmatch(rx, v[c]):
            return f"{c} '{v[c]}': want {want}"
        if c == "netns" and v[c].startswith("wire:") and not wire_mtu_ok(v[c][5:]):
            return f"netns '{v[c]}': the MTU must be 68..65535 (a veth's range)"
    if v["netns"] == "2" and v["qemu"] == "yes":
        return "netns 2 with qemu yes: the guest gives a unit one namespace, or a wire (netns wire)"
    # the report first: a unit's script is in its report's folder
    report = v["report"]
    if files and report != "-" and not os.path.isfile(f"{exp}/{report}/{report}.py"):
        return f"no report {exp}/{report}/{report}.py"
    script = collect_script(exp, name, report)
    if files and not os.path.isfile(script):
        return f"no collect script {script}"
    t.names.append(name)
    for c in COLUMNS[1:]:
        t.cols[c][name] = v[c]
    if v["netns"] == "wire":
        t.mtu[name] = str(WIRE_MTU_DEFAULT)
    elif v["netns"].startswith("wire:"):
        t.mtu[name] = v["netns"][5:]
    return None


def _words(line):
    """A line's columns as bash's `read -r a b ...` splits them: blanks and tabs only."""
    return [w for w in re.split(r"[ \t]+", line) if w]


def load(exp, path=None, files=True):
    """Read and check the table PATH (default EXP/units; EXP: the experiments directory, where
    the reports and collect scripts are looked for; files=False: the table's text alone, as a
    tool that only reads it wants, its files not looked for).  A Table, or TableError."""
    path = path if path is not None else f"{exp}/units"
    try:
        if not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise OSError
        with open(path, "rb") as f:
            data = f.read().decode("utf-8", "surrogateescape")
    except OSError:
        raise TableError(f"cannot read the unit table {path}") from None
    lines = data.split("\n")
    if lines[-1] == "":
        lines.pop()
    t = Table()
    for n, line in enumerate(lines, 1):
        m = _QEMU_NO.fullmatch(line)
        if m:
            t.qemu_why[m.group(1)] = m.group(2)
            continue
        m = _ROOT_YES.fullmatch(line)
        if m:
            t.root_why[m.group(1)] = m.group(2)
            continue
        m = _MTU_MIN.fullmatch(line)
        if m:
            if not wire_mtu_ok(m.group(2)):
                raise TableError(f"{path}:{n}: mtu min '{m.group(2)}': want 68..65535 (a veth's range)")
            t.mtu_min[m.group(1)], t.mtu_why[m.group(1)] = m.group(2), m.group(3)
            continue
        if line.startswith("# knob:"):
            try:
                _knob_line(t, line)
            except TableError as e:
                raise TableError(f"{path}:{n}: {e}") from None
            continue
        if line.startswith("# guest:"):
            try:
                _guest_line(t, line, n)
            except TableError as e:
                raise TableError(f"{path}:{n}: {e}") from None
            continue
        words = _words(line)
        if not words or words[0].startswith("#"):
            continue
        bad = _unit_line(t, exp, words[0], words, files)
        if bad:
            raise TableError(f"{path}:{n}: {bad}")
    if not t.names:
        raise TableError(f"{path} lists no unit")
    for name in t.knobs:
        if name not in t.cols["set"]:
            raise TableError(f"{path}: a knob for '{name}', which is no unit")
    for name, n in t.guest_line.items():
        if name not in t.cols["set"]:
            raise TableError(f"{path}:{n}: guest needs for '{name}', which is no unit")
        if t.cols["qemu"][name] != "yes":
            raise TableError(f"{path}:{n}: guest needs for '{name}', which runs in no guest "
                             "(qemu no)")
    for name, least in t.mtu_min.items():
        if name not in t.mtu:
            raise TableError(f"{path}: mtu min for '{name}', which is no wire unit (netns wire)")
        if int(t.mtu[name]) < int(least):
            raise TableError(f"{path}: {name}: netns wire:{t.mtu[name]} is below its mtu min {least}")
    return t


def rows(path):
    """The table's unit lines as they are, unchecked: {unit: {column: text}}, a unit's first
    line of ten columns (what vm.sh's awk lookups did); OSError when it cannot be read."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "surrogateescape").split("\n")
    out = {}
    for line in lines:
        words = _words(line)
        if len(words) == len(COLUMNS) and not words[0].startswith("#") and words[0] not in out:
            out[words[0]] = dict(zip(COLUMNS, words))
    return out


def guests(path):
    """The table's "# guest:" lines, checked as load() checks them but for their units (get's
    table is not checked): {unit: [need, ...]}; TableError naming the file and line, OSError
    when it cannot be read."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "surrogateescape").split("\n")
    t = Table()
    for n, line in enumerate(lines, 1):
        if line.startswith("# guest:"):
            try:
                _guest_line(t, line, n)
            except TableError as e:
                raise TableError(f"{path}:{n}: {e}") from None
    return t.guest


def guest_bins(needs):
    """The PROGRAMs of NEEDS' bin:PROGRAM words ({unit: [need, ...]}), each once, in order."""
    out = []
    for words in needs.values():
        out += [w[4:] for w in words if w.startswith("bin:") and w[4:] not in out]
    return out


def _bash_array(var, values):
    return f"declare -ga {var}=(" + " ".join(shlex.quote(v) for v in values) + ")"


WHY_MAX = 4096          # a unit's reason longer than this is cut, and the cut said


def why_cut(why):
    """WHY's first WHY_MAX bytes and a note when it is longer: a reason reaches tcplab_failed.py
    as one argument, and the kernel takes 128 KiB at most in one (run.sh's exec of the job
    failed, and with it the whole end of the run)."""
    b = why.encode("utf-8", "surrogateescape")
    if len(b) <= WHY_MAX:
        return why
    return b[:WHY_MAX].decode("utf-8", "surrogateescape") + f" [cut at {WHY_MAX} bytes]"


def _bash_assoc(var, d):
    return (f"declare -gA {var}=(" +
            " ".join(f"[{shlex.quote(k)}]={shlex.quote(v)}" for k, v in d.items()) + ")")


def shell(t):
    """Bash code that sets the arrays run.sh's load_units sets, from T."""
    out = [_bash_array("UNIT_NAMES", t.names)]
    for var, c in (("U_REPORT", "report"), ("U_SET", "set"), ("U_QUICK", "quick"),
                   ("U_ALONE", "alone"), ("U_EXPECT", "expect_s"), ("U_LIMIT", "limit_s"),
                   ("U_ROOT", "root"), ("U_NETNS", "netns"), ("U_QEMU", "qemu")):
        out.append(_bash_assoc(var, t.cols[c]))
    out += [_bash_assoc("U_QEMU_WHY", t.qemu_why), _bash_assoc("U_ROOT_WHY", t.root_why),
            _bash_assoc("U_MTU", t.mtu), _bash_assoc("U_MTU_MIN", t.mtu_min),
            _bash_assoc("U_MTU_WHY", t.mtu_why),
            _bash_assoc("U_KNOBS", {u: " ".join(ks) for u, ks in t.knobs.items()}),
            _bash_assoc("K_DEFAULT", t.k_default), _bash_assoc("K_RANGE", t.k_range),
            _bash_assoc("K_ENV", t.k_env), _bash_assoc("K_WHAT", t.k_what)]
    return "\n".join(out) + "\n"


class KnobError(Exception):
    """A bad --set or env value: str() is run.sh's one line (without "run.sh: "), exit 2."""


def _printable(value):
    """VALUE as run.sh's ${v//[![:print:]]/?} under LC_ALL=C shows it: each byte outside
    0x20..0x7e a '?'."""
    return "".join(chr(b) if 0x20 <= b <= 0x7e else "?"
                   for b in value.encode("utf-8", "surrogateescape"))


def knob_want(rng):
    """What a knob's value must be, for a refusal."""
    if ".." in rng:
        return f"want a whole number {rng}"
    return "want one of " + rng.replace("|", ", ")


def _no_such_knob(t, units):
    if not units:
        return "--set needs the units named (./run.sh UNIT --set NAME=VALUE)"
    have = "; ".join(f"{u} has {', '.join(t.knobs[u])}" for u in units if t.knobs.get(u))
    return (f"no such knob for {' '.join(units)} ({have or 'no knobs there'}; "
            "./run.sh UNIT --help)")


def resolve_knobs(t, units, settings, environ):
    """Each knob of UNITS: (K_VALUE, K_GIVEN) by "UNIT:NAME", from SETTINGS (NAME=VALUE, --set),
    else the knob's env variable in ENVIRON, else its default; KnobError for a malformed
    setting, a name given twice or that none of UNITS has, a value out of its range."""
    setv = {}
    for s in settings:
        m = re.fullmatch(r"([a-z][a-z0-9_]*)=(.*)", s, re.S)
        if not m:
            raise KnobError(f"--set '{_printable(s)}': want NAME=VALUE "
                            "(./run.sh UNIT --help lists its knobs)")
        k, v = m.group(1), m.group(2)
        if k in setv:
            raise KnobError(f"--set {k} given twice")
        found = False
        for u in units:
            if k not in t.knobs.get(u, ()):
                continue
            found = True
            if not knob_ok(t.k_range[f"{u}:{k}"], v):
                raise KnobError(f"--set {k}='{_printable(v)}': "
                                f"{knob_want(t.k_range[f'{u}:{k}'])} ({u})")
        if not found:
            raise KnobError(f"--set {k}: {_no_such_knob(t, units)}")
        setv[k] = v
    value, given = {}, {}
    for u in units:
        for k in t.knobs.get(u, ()):
            key = f"{u}:{k}"
            env = t.k_env[key]
            if k in setv:
                v = setv[k]
                given[key] = "1"
            elif env and environ.get(env):
                v = environ[env]
                given[key] = "1"
                if not knob_ok(t.k_range[key], v):
                    raise KnobError(f"{env}='{_printable(v)}' (knob {k} of {u}): "
                                    f"{knob_want(t.k_range[key])}")
            else:
                v = t.k_default[key]
            value[key] = v
    return value, given


def unit_var(unit):
    """UNIT as a part of a variable name (p01-synack-lost: P01_SYNACK_LOST)."""
    return unit.upper().replace("-", "_")


def knob_exports(t, units, value):
    """{TL_UNIT_KNOBS_<UNIT>: "NAME=VALUE ..."} for each of UNITS with knobs: what a guest's
    vm.sh is given."""
    out = {}
    for u in units:
        v = " ".join(f"{k.upper()}={value[f'{u}:{k}']}" for k in t.knobs.get(u, ()))
        if v:
            out[f"TL_UNIT_KNOBS_{unit_var(u)}"] = v
    return out


def knobs_shell(t, units, value, given, export):
    """Bash code setting K_VALUE and K_GIVEN; with EXPORT each unit's TL_UNIT_KNOBS_<UNIT>."""
    out = [_bash_assoc("K_VALUE", value), _bash_assoc("K_GIVEN", given)]
    if export:
        out += [f"export {k}={shlex.quote(v)}" for k, v in knob_exports(t, units, value).items()]
    return "\n".join(out) + "\n"


def _write(stream, text):
    stream.buffer.write(text.encode("utf-8", "surrogateescape"))
    stream.flush()


def main(argv):
    usage = ("usage: tcplab_units.py shell EXPDIR\n"
             "       tcplab_units.py get EXPDIR UNIT FIELD...\n"
             "       tcplab_units.py guest-bins EXPDIR\n"
             "       tcplab_units.py knobs EXPDIR [--export] [--set NAME=VALUE]... -- UNIT...\n")
    if len(argv) == 3 and argv[1] == "shell":
        mode = "shell"
    elif len(argv) >= 4 and argv[1] == "knobs":
        return _knobs_main(argv)
    elif len(argv) == 3 and argv[1] == "guest-bins":
        mode = "guest-bins"
    elif len(argv) >= 5 and argv[1] == "get":
        mode = "get"
        bad = [f for f in argv[4:] if f not in COLUMNS and f not in ("script", "guest")]
        if bad:
            _write(sys.stderr, f"tcplab_units.py: no field '{bad[0]}' (want script, guest or "
                               f"one of {', '.join(COLUMNS)})\n")
            return 2
    else:
        _write(sys.stderr, usage)
        return 2
    exp = argv[2]
    if mode in ("get", "guest-bins"):
        try:
            needs = guests(f"{exp}/units")
            r = rows(f"{exp}/units").get(argv[3]) if mode == "get" else None
        except OSError:
            _write(sys.stderr, f"{PROG}: cannot read the unit table {exp}/units\n")
            return 1
        except TableError as e:
            _write(sys.stderr, f"{PROG}: {e}\n")
            return 1
        if mode == "guest-bins":
            _write(sys.stdout, "".join(p + "\n" for p in guest_bins(needs)))
            return 0
        if r is None:
            return 3
        r["script"] = collect_script(exp, r["unit"], r["report"])
        r["guest"] = " ".join(needs.get(r["unit"], ()))
        _write(sys.stdout, "".join(r[f] + "\n" for f in argv[4:]))
        return 0
    try:
        t = load(exp)
    except TableError as e:
        _write(sys.stderr, f"{PROG}: {e}\n")
        return 1
    _write(sys.stdout, shell(t))
    return 0


def _knobs_main(argv):
    exp, opts = argv[2], argv[3:]
    export, settings = False, []
    while opts and opts[0] != "--":     # a setting may itself be "--": read in pairs
        if opts[0] == "--export":
            export, opts = True, opts[1:]
        elif opts[0] == "--set" and len(opts) >= 2:
            settings.append(opts[1])
            opts = opts[2:]
        else:
            _write(sys.stderr, f"tcplab_units.py knobs: bad argument '{_printable(opts[0])}'\n")
            return 2
    if not opts:
        _write(sys.stderr, "tcplab_units.py knobs: no '--' before the units\n")
        return 2
    units = opts[1:]
    try:
        t = load(exp)
    except TableError as e:
        _write(sys.stderr, f"{PROG}: {e}\n")
        return 1
    bad = [u for u in units if u not in t.cols["set"]]
    if bad:     # run.sh checked the names: a caller's bug
        _write(sys.stderr, f"tcplab_units.py knobs: no unit '{_printable(bad[0])}'\n")
        return 70
    try:
        value, given = resolve_knobs(t, units, settings, os.environ)
    except KnobError as e:
        _write(sys.stdout, f"{e}\n")
        return 2
    _write(sys.stdout, knobs_shell(t, units, value, given, export))
    return 0


if __name__ == "__main__":
    # run.sh gone while this writes to it (SIGKILL, CI's interrupt storm at 0.06 s): the pipe's
    # end kills this program silently, as it would a shell's printf, not with a traceback
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        sys.exit(main(sys.argv))
    except Exception:   # a bug here, not a bad table: not status 1, which run.sh passes on
        import traceback
        traceback.print_exc()
        sys.exit(70)
