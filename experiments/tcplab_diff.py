#!/usr/bin/python3
"""tcplab_diff.py — what differs in TCP behaviour between two tcplab output directories.

usage: tcplab_diff.py A B

A and B are outputs/<kernel release>/ directories (or two .json files of one experiment).  Their
.json files are compared by meaning, not by text: one line per difference, grouped by
experiment, nothing at all when the two sides agree.  Exit status as diff(1): 0 the same,
1 they differ, 2 trouble (bad usage, unreadable directory or JSON).

What counts as a difference (docs/kernel-diff.md explains why):
  - an experiment present on one side only;
  - a sysctl absent (null) on one side, or with another value;
  - the number of SYN retransmissions, and their times, step by step, beyond a tolerance of
    max(10 %, 50 ms); the same for the schedule expected from the sysctls;
  - the errno, and the total time (same tolerance);
  - counter deltas: a counter on one side only, or values more than 10 % apart and, in an
    experiment of N connects, more than N/4 apart (races move a counter by a few per cent of
    N between two runs of one kernel; a change of behaviour moves it by about one per connect);
    p01-connect-time's counters per part (accept, refused), N being the part's connects;
  - in experiments of many connects, TIMING_COUNTERS (ACK, segment and octet counts, which
    depend on how the two ends' threads interleave) only when on one side beyond the floor;
  - connect-time percentiles (p10, median, p90) only when they are more than 10 times apart
    (the rest is noise; min, max and p99 are single slow calls, never compared);
  - HZ, TCP_SYNCNT, numbers of connects and of errors by name;
  - the same, prefixed, inside sub-runs: "default" (p01-synretry) and any other object that has
    retransmits, errno or elapsed_s (the two clients of p01-timeout).
A line a sub-run repeats word for word (p01-timeout's top level is a copy of its cc client) is
printed once, under the sub-run.  The kernel string, timestamps and anything not listed above
are never compared.

Standard library only: run it with /usr/bin/python3.
"""
import json
import os
import sys

TIME_REL = 0.10          # times: relative tolerance ...
TIME_ABS = 0.050         # ... or this many seconds, whichever is larger
COUNTER_REL = 0.10       # counter deltas more than 10 % apart differ ...
COUNTER_PER_CONNECT = 0.25  # ... and, with N connects, more than N/4 apart
PERCENTILE_FACTOR = 10.0  # connect-time percentiles differ only beyond this factor
# min and max are single samples, not percentiles: one SYN dropped at a busy listener makes max
# 1 s (a retransmission) in one run and 3 ms in the next.  They are not compared.
# p99 of 2000 is the 20th slowest call: one burst of scheduling delay moves it 10x between two
# runs of one kernel on one machine, so it is not compared either.
PERCENTILES = ("p10", "median", "p90")
EXIT_SAME, EXIT_DIFFER, EXIT_TROUBLE = 0, 1, 2


class Trouble(Exception):
    """A side cannot be read: exit status 2."""


def close_times(a, b):
    """True when two times in seconds agree within max(10 %, 50 ms)."""
    return abs(a - b) <= max(TIME_REL * max(abs(a), abs(b)), TIME_ABS)


def close_counts(a, b, floor=0):
    """True when two counter deltas agree: within 10 % of the larger, or within `floor` (the
    noise allowed for an experiment of many connects)."""
    return abs(a - b) <= max(COUNTER_REL * max(abs(a), abs(b)), floor)


def fmt_time(x):
    return "none" if x is None else f"{x:.3f} s"


def fmt_times(xs):
    return "none" if not xs else ", ".join(f"{x:.2f}" for x in xs) + " s"


def fmt_value(v):
    return "absent" if v is None else str(v)


def fmt_delta(v):
    return f"{v:+d}" if isinstance(v, int) else str(v)


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class Sides:
    """The two labels, so that lines read "2 in A, 5 in B"."""

    def __init__(self, a="A", b="B", named=False, accel_a=None, accel_b=None):
        self.a, self.b = a, b
        self.named = named        # labels are the directories' own names: no header needed
        self.accel_a, self.accel_b = accel_a, accel_b   # "tcg", "kvm": ran in a QEMU guest

    def vm_note(self):
        """Which side's times came from an emulated machine, or "" when neither's did."""
        vms = [f"{label} ran under QEMU ({accel})" for label, accel in
               ((self.a, self.accel_a), (self.b, self.accel_b)) if accel]
        if not vms:
            return ""
        return "note: " + " and ".join(vms) + ": its connect() times include the emulation"

    def pair(self, va, vb):
        return f"{va} in {self.a}, {vb} in {self.b}"


# ---- one kind of difference per function; each returns a list of lines -----------------------

def diff_sysctls(sa, sb, s):
    """sysctls: name -> value string, null when the kernel has no such sysctl."""
    if not isinstance(sa, dict) or not isinstance(sb, dict):
        return []
    out = []
    for name in sorted(set(sa) | set(sb)):
        if name not in sa or name not in sb:
            side = s.a if name in sa else s.b
            out.append(f"sysctl {name}: recorded in {side} only ({fmt_value((sa if name in sa else sb)[name])})")
        elif sa[name] is None and sb[name] is not None:
            out.append(f"sysctl {name}: absent in {s.a}, {sb[name]} in {s.b}")
        elif sa[name] is not None and sb[name] is None:
            out.append(f"sysctl {name}: {sa[name]} in {s.a}, absent in {s.b}")
        elif str(sa[name]) != str(sb[name]):
            out.append(f"sysctl {name}: {s.pair(sa[name], sb[name])}")
    return out


# Counters of packets whose number depends on how the two ends' threads interleave on loopback:
# whether an ACK rides on data or goes alone, delayed or not, and so every segment and octet
# count.  Between two runs of one kernel on one machine they moved 3x (TcpExtDelayedACKs
# 362..1148 for 2000 connects).  In experiments of many connects their values are not compared.
TIMING_COUNTERS = {
    "TcpExtDelayedACKs", "TcpExtDelayedACKLocked", "TcpExtDelayedACKLost", "TcpExtTCPPureAcks",
    "TcpExtTCPHPAcks", "TcpExtTCPHPHits", "TcpInSegs", "TcpOutSegs", "IpInReceives",
    "IpInDelivers", "IpOutRequests", "IpOutTransmits", "IpExtInOctets", "IpExtOutOctets",
    "IpExtInNoECTPkts", "TcpExtTW", "TcpOutRsts",
}


def diff_counters(ca, cb, s, what="counter", floor=0):
    """Counter deltas: name -> integer.  A counter on one side only is reported as such when
    its value is not noise: probes list a counter that did not move as absent or as 0, so a
    missing counter counts as 0 for the tolerance.  With a floor (an experiment of many
    connects), TIMING_COUNTERS on both sides are not compared: only one on one side, beyond
    the floor (IpOutTransmits +13090 against a kernel without it)."""
    if not isinstance(ca, dict) or not isinstance(cb, dict):
        return []
    out = []
    for name in sorted(set(ca) | set(cb)):
        va, vb = ca.get(name, 0), cb.get(name, 0)
        if floor > 0 and name in TIMING_COUNTERS and name in ca and name in cb:
            continue   # many connects: its value is the threads' interleaving, not the kernel's

        if not is_number(va) or not is_number(vb):
            if va != vb:
                out.append(f"{what} {name}: {s.pair(va, vb)}")
        elif close_counts(va, vb, floor):
            continue
        elif name not in cb:
            out.append(f"{what} {name}: only in {s.a} ({fmt_delta(va)})")
        elif name not in ca:
            out.append(f"{what} {name}: only in {s.b} ({fmt_delta(vb)})")
        else:
            out.append(f"{what} {name}: {s.pair(fmt_delta(va), fmt_delta(vb))}")
    return out


def diff_errno(a, b, s):
    if "errno" not in a or "errno" not in b or a["errno"] == b["errno"]:
        return []
    return [f"errno: {s.pair(a['errno'] or 'none (success)', b['errno'] or 'none (success)')}"]


def diff_time(a, b, key, words, s):
    va, vb = a.get(key), b.get(key)
    if not is_number(va) or not is_number(vb) or close_times(va, vb):
        return []
    return [f"{words}: {s.pair(fmt_time(va), fmt_time(vb))}"]


def diff_exact(a, b, key, words, s):
    if key not in a or key not in b or a[key] == b[key]:
        return []
    return [f"{words}: {s.pair(fmt_value(a[key]), fmt_value(b[key]))}"]


def schedule_differs(ta, tb):
    """Two lists of retransmission times differ when their counts do or any step (the wait since
    the previous send) is outside the tolerance."""
    if len(ta) != len(tb):
        return True
    prev_a = prev_b = 0.0
    for x, y in zip(ta, tb):
        if not close_times(x - prev_a, y - prev_b):
            return True
        prev_a, prev_b = x, y
    return False


def retransmit_times(obj):
    rows = obj.get("retransmits")
    if not isinstance(rows, list):
        return None
    return [r["t_s"] for r in rows if isinstance(r, dict) and is_number(r.get("t_s"))]


def diff_syn_schedule(a, b, s):
    """The number of SYN retransmissions and when they happened; then the documented schedule."""
    out = []
    ta, tb = retransmit_times(a), retransmit_times(b)
    if ta is not None and tb is not None:
        if len(ta) != len(tb):
            out.append(f"SYN retransmissions: {s.pair(len(ta), len(tb))}")
        if schedule_differs(ta, tb):
            out.append(f"SYN retransmitted at: {fmt_times(ta)} in {s.a}; {fmt_times(tb)} in {s.b}")
    ea, eb = a.get("expected"), b.get("expected")
    if isinstance(ea, list) and isinstance(eb, list) and schedule_differs(ea, eb):
        out.append(f"expected SYN retransmissions (from the sysctls): {fmt_times(ea)} in {s.a}; "
                   f"{fmt_times(eb)} in {s.b}")
    out += diff_time(a, b, "expected_elapsed_s", "expected give-up time", s)
    return out


def diff_percentiles(pa, pb, s, part):
    out = []
    if not isinstance(pa, dict) or not isinstance(pb, dict):
        return out
    for p in PERCENTILES:
        x, y = pa.get(p), pb.get(p)
        if not is_number(x) or not is_number(y) or x <= 0 or y <= 0:
            continue
        ratio = max(x, y) / min(x, y)
        if ratio > PERCENTILE_FACTOR:
            out.append(f"{part}connect() time {p}: {s.pair(f'{x:.1f} us', f'{y:.1f} us')} "
                       f"({ratio:.0f}x apart)")
    return out


def connects(obj):
    """How many connects an experiment made (the larger side decides the counter noise floor)."""
    parts = obj.get("parts")
    runs = list(parts.values()) if isinstance(parts, dict) else [obj]
    return sum(r["n"] for r in runs if isinstance(r, dict) and is_number(r.get("n")))


def diff_connect_part(a, b, s, part):
    """One part of p01-connect-time: n connects, errors by name, percentiles in microseconds,
    and the part's own counters (each part has its own namespace-exact deltas)."""
    prefix = f"{part}: " if part else ""
    floor = COUNTER_PER_CONNECT * max(connects(a), connects(b))
    out = diff_exact(a, b, "n", f"{prefix}number of connects", s)
    out += diff_counters(a.get("errors"), b.get("errors"), s, f"{prefix}error", floor)
    out += diff_percentiles(a.get("us"), b.get("us"), s, prefix)
    if part:
        out += [prefix + line for line in
                diff_counters(a.get("counters"), b.get("counters"), s, floor=floor)]
    return out


def diff_connect_time(a, b, s):
    out = []
    pa, pb = a.get("parts"), b.get("parts")
    if isinstance(pa, dict) and isinstance(pb, dict):
        for name in sorted(set(pa) | set(pb)):
            if name not in pa or name not in pb:
                out.append(f"part {name}: only in {s.a if name in pa else s.b}")
            elif isinstance(pa[name], dict) and isinstance(pb[name], dict):
                out += diff_connect_part(pa[name], pb[name], s, name)
    elif "us" in a or "us" in b:
        out += diff_connect_part(a, b, s, "")
    if any("connect() time" in line for line in out) and s.vm_note():
        out.append(s.vm_note())
    return out


def diff_run(a, b, s):
    """Everything compared within one run of an experiment."""
    out = diff_sysctls(a.get("sysctls"), b.get("sysctls"), s)
    out += diff_exact(a, b, "hz", "HZ", s)
    out += diff_exact(a, b, "syncnt", "TCP_SYNCNT", s)
    out += diff_syn_schedule(a, b, s)
    out += diff_errno(a, b, s)
    out += diff_time(a, b, "elapsed_s", "total time", s)
    out += diff_connect_time(a, b, s)
    if not (isinstance(a.get("parts"), dict) and isinstance(b.get("parts"), dict)):
        # with parts, the top-level counters are a copy of the first part's, compared there
        floor = COUNTER_PER_CONNECT * max(connects(a), connects(b))
        out += diff_counters(a.get("counters"), b.get("counters"), s, floor=floor)
    return out


NOT_SUB_RUNS = {"default", "parts", "sysctls", "counters", "errors", "us"}
SUB_RUN_KEYS = ("retransmits", "errno", "elapsed_s")


def sub_runs(a, b):
    """Names of the objects inside an experiment that are runs of their own (p01-timeout's
    clients), in both sides."""
    names = []
    for k in sorted(set(a) & set(b) - NOT_SUB_RUNS):
        if isinstance(a[k], dict) and isinstance(b[k], dict) and \
                any(x in a[k] or x in b[k] for x in SUB_RUN_KEYS):
            names.append(k)
    return names


def diff_experiment(a, b, s):
    """Lines for one experiment; a "default" sub-run (p01-synretry) is compared the same way."""
    out = diff_run(a, b, s)
    for name in sub_runs(a, b):
        sub = [f"{name}: " + line for line in diff_run(a[name], b[name], s)]
        out = [line for line in out if f"{name}: {line}" not in sub] + sub
    if "default" in a or "default" in b:
        da, db = a.get("default"), b.get("default")
        if isinstance(da, dict) and isinstance(db, dict):
            out += ["default TCP_SYNCNT run: " + line for line in diff_run(da, db, s)]
        elif isinstance(da, dict) != isinstance(db, dict):
            out.append(f"default TCP_SYNCNT run: only in {s.a if isinstance(da, dict) else s.b}")
    return out


# ---- reading and driving -----------------------------------------------------------------------

def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        raise Trouble(f"{path}: {e}") from e
    if not isinstance(obj, dict):
        raise Trouble(f"{path}: not a JSON object")
    return obj


def experiments(path):
    """name -> path of its .json, for a directory (every top-level *.json) or one file."""
    if os.path.isfile(path):
        return {os.path.basename(path)[:-5] if path.endswith(".json") else path: path}
    if not os.path.isdir(path):
        raise Trouble(f"{path}: no such directory")
    try:
        names = os.listdir(path)
    except OSError as e:
        raise Trouble(f"{path}: {e}") from e
    return {n[:-5]: os.path.join(path, n) for n in names if n.endswith(".json")}


def vm_accel(path):
    """The accelerator a kernel-matrix run used (raw/<unit>/vm.txt, written by experiments/lib/vm.sh and
    copied into each unit by run.sh), else None."""
    raw = os.path.join(path, "raw")
    try:
        units = sorted(os.listdir(raw))
    except OSError:
        return None
    for unit in units:
        try:
            with open(os.path.join(raw, unit, "vm.txt"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("accel="):
                        return line.strip().split("=", 1)[1] or None
        except OSError:
            continue
    return None


def labels(path_a, path_b):
    """Short names for the sides: the directories' names when they differ, else A and B
    (then a header says which is which)."""
    a = os.path.basename(os.path.normpath(path_a))
    b = os.path.basename(os.path.normpath(path_b))
    named = bool(a and b and a != b and os.path.isdir(path_a) and os.path.isdir(path_b))
    if not named:
        a, b = "A", "B"
    return Sides(a, b, named, vm_accel(path_a), vm_accel(path_b))


def diff_dirs(path_a, path_b):
    """All lines, grouped: an experiment's name, then its differences indented."""
    ea, eb = experiments(path_a), experiments(path_b)
    if os.path.isfile(path_a) and os.path.isfile(path_b):
        eb = {name: eb[k] for name, k in zip(ea, eb)}  # two files: one experiment, any names
    s = labels(path_a, path_b)
    out = []
    for name in sorted(set(ea) | set(eb)):
        if name not in eb:
            out += [name, f"  only in {s.a}"]
            continue
        if name not in ea:
            out += [name, f"  only in {s.b}"]
            continue
        lines = diff_experiment(load(ea[name]), load(eb[name]), s)
        if lines:
            out += [name] + ["  " + line for line in lines]
    return out


def usage(stream):
    print("usage: tcplab_diff.py A B", file=stream)


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        usage(sys.stdout)
        return EXIT_SAME
    if len(argv) != 3:
        usage(sys.stderr)
        return EXIT_TROUBLE
    try:
        lines = diff_dirs(argv[1], argv[2])
    except Trouble as e:
        print(f"tcplab_diff.py: {e}", file=sys.stderr)
        return EXIT_TROUBLE
    if not lines:
        return EXIT_SAME
    s = labels(argv[1], argv[2])
    if not s.named:
        print(f"A: {argv[1]}\nB: {argv[2]}")
    for line in lines:
        print(line)
    return EXIT_DIFFER


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # `| head` ends quietly, as diff(1) does
    sys.exit(main(sys.argv))
