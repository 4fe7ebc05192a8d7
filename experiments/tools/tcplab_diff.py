#!/usr/bin/python3
"""tcplab_diff.py — what differs in TCP behaviour between two tcplab output directories.

usage: tcplab_diff.py A B

A and B are outputs/<kernel release>/ directories (or two .json files of one experiment).  Their
.json files are compared by meaning, not by text: one line per difference, grouped by
experiment, nothing at all when the two sides agree.  Exit status as diff(1): 0 the same,
1 they differ, 2 trouble: bad usage, a missing or unreadable side, or any .json of either side
that is not a regular file of strict JSON in the documented format (SCHEMAS below, from
docs/output-format.md); then one line on stderr names the file and the field, and nothing is
printed on stdout.

What counts as a difference (docs/kernel-diff.md explains why):
  - an experiment present on one side only;
  - a sysctl absent (null) on one side, or with another value;
  - the number of SYN retransmissions, and their times, step by step, beyond a tolerance of
    max(10 %, 50 ms); the same for the schedule expected from the sysctls;
  - how the call ended (result: ok, error, timeout), else the errno, and the total time (same
    tolerance);
  - counter deltas: a counter on one side only, or values more than 10 % apart and, in an
    experiment of N connects, more than N/4 apart (races move a counter by a few per cent of
    N between two runs of one kernel; a change of behaviour moves it by about one per connect);
    p01-connect-time's counters per part (accept, refused), N being the part's connects;
  - in experiments of many connects, TIMING_COUNTERS (ACK, segment and octet counts, which
    depend on how the two ends' threads interleave) only when on one side beyond the floor,
    and ACK_TIMING_COUNTERS (the ACK counters every kernel has) never;
  - connect-time percentiles (p10, median, p90) only when they are more than 10 times apart
    (the rest is noise; min, max and p99 are single slow calls, never compared);
  - HZ, TCP_SYNCNT, numbers of connects and of errors by name;
  - the links machine recorded (p01-machine's "links"), matched by name: a link on one side
    only, and a link's MTU or root qdisc (its index, state, kind and flags are not compared);
  - the capture, where both sides have one: the number of SYNs in it (exact), their times step
    by step (the tolerance above), the SYNs after a program's timeout and the segments after
    close() (exact), the number of DISAGREE lines (capture against sockwatch and the
    counters), and packets libpcap dropped; a side without a capture (collected before the
    capture probe) is not a difference;
  - the same, prefixed, inside sub-runs: "default" (p01-synretry) and any other object that has
    retransmits, errno or elapsed_s (the two clients of p01-timeout).
A line a sub-run repeats word for word (p01-timeout's top level is a copy of its cc client) is
printed once, under the sub-run.  The kernel string, timestamps and anything not listed above
are never compared.

Root causes (docs/kernel-diff.md, "How the diff groups"): a difference is printed only when it
does not follow from one already printed.
  - SYNs: when a run's client sent another number of SYNs (the first and sockwatch's
    retransmissions), one line says so ("SYNs sent: 3 in A, 6 in B"), and the counters that
    follow from it, k for every SYN after the first j on both sides, are folded into one line
    under it; the capture's count and times, and the schedule the sysctls predict, have no
    line of their own when they agree.  A counter that does not fit is printed on its own.
  - environment: sysctls the kernel sizes from memory at boot (MEMORY_SYSCTLS) are labelled
    environment, with the memory and CPUs p01-machine recorded, when the machines differ.
  - a sysctl line another experiment printed before is not printed again; a counter on one
    side only, in two runs or more, that the other side never counted anywhere, is one line in
    a first group, "all experiments".

Standard library only: run it with /usr/bin/python3.
"""
import itertools
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab  # the reports' library (experiments/report/)

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
# ... and a percentile is compared only when each side has at least this many connects slower
# than it (the slow side is where the machine's load lands): p99 of 2000 (20 slower) and p90 of
# 300 (30 slower: accept p90 398.1 us in one run, 33.2 us in the next, one kernel under CI's
# load) each moved tenfold; p90 of 2000 (200 slower) has moved only between host and guest.
# So with TL_CONNECTS=300 the p90 is not compared, with the default 2000 it is.
SLOWER_MIN = 100
PCT_RANK = {"p10": 0.10, "median": 0.50, "p90": 0.90}
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


class Line(str):
    """A printed line that remembers what it is about, for the grouping: `counter` is (name,
    the side it is on) for a counter on one side only; `sysctl` marks a sysctl line, which is a
    fact of the machine and not of an experiment, so it is printed once; `level` 1 is a line
    that follows from the line above it (printed indented under it)."""
    counter = None
    sysctl = False
    level = 0

    def but(self, text):
        """The same kind of line with another text."""
        new = Line(text)
        new.counter, new.sysctl, new.level = self.counter, self.sysctl, self.level
        return new


def line(text, counter=None, sysctl=False, level=0):
    new = Line(text)
    new.counter, new.sysctl, new.level = counter, sysctl, level
    return new


def prefixed(prefix, text):
    """A run's line under its part or sub-run: "keep: SYN retransmitted at: ..."."""
    return text.but(prefix + text) if isinstance(text, Line) else Line(prefix + text)


class Sides:
    """The two labels, so that lines read "2 in A, 5 in B", and what each side's machine
    recorded (memory, CPUs) to tell the environment from the kernel."""

    def __init__(self, a="A", b="B", named=False, accel_a=None, accel_b=None):
        self.a, self.b = a, b
        self.named = named        # labels are the directories' own names: no header needed
        self.accel_a, self.accel_b = accel_a, accel_b   # "tcg", "kvm": ran in a QEMU guest
        self.machine_a = self.machine_b = None   # machine_facts() of each side's p01-machine

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

# Sysctls whose default the kernel computes from the machine's memory at boot, and which of
# their values (None: the whole value; else the indexes of a list).  net/ipv4/tcp.c, tcp_init():
# the established hash table gets one slot per 128 KB of memory (alloc_large_system_hash()), and
# tcp_max_orphans = its entries / 2; tcp_init_mem() sets tcp_mem from nr_free_buffer_pages() / 16;
# tcp_wmem[2] and tcp_rmem[2] are capped at 1/128 of the free buffer pages.  net/ipv4/tcp_ipv4.c,
# tcp_set_hashinfo() (from tcp_sk_init(), per namespace): tcp_max_tw_buckets = entries / 2 and
# tcp_max_syn_backlog = max(128, entries / 128), of the global table (a namespace with a table
# of its own, tcp_child_ehash_entries, uses that one; experiments/lib/netns.sh sets the two back
# to the global table's values).  net/ipv4/udp.c, udp_init(): udp_mem from the free pages / 8.
MEMORY_SYSCTLS = {
    "net.ipv4.tcp_max_syn_backlog": None, "net.ipv4.tcp_max_tw_buckets": None,
    "net.ipv4.tcp_max_orphans": None, "net.ipv4.tcp_mem": None, "net.ipv4.udp_mem": None,
    "net.ipv4.tcp_rmem": (2,), "net.ipv4.tcp_wmem": (2,),
}


def machine_facts(obj):
    """What a side's p01-machine recorded about the machine: memory in MiB and the CPUs (nproc),
    each None when unknown.  The memory is the kernel's MemTotal (memtotal_kb, what it sizes its
    tables from) when machine recorded it, else the memory QEMU gave a guest (vm.memory_mb):
    outputs made before machine read /proc/meminfo have only that."""
    if not isinstance(obj, dict):
        return {"mem_mib": None, "mem_what": None, "cpus": None}
    mem, what = None, None
    vm = obj.get("vm")
    kb = obj.get("memtotal_kb")
    if is_number(kb) and kb > 0:
        mem, what = kb / 1024, "MemTotal"
    elif isinstance(vm, dict) and re.fullmatch(r"[0-9]{1,9}", str(vm.get("memory_mb", ""))):
        mem, what = int(vm["memory_mb"]), "the guest's memory"
    cpus = obj.get("nproc") if is_number(obj.get("nproc")) else None
    return {"mem_mib": mem, "mem_what": what, "cpus": cpus}


def fmt_mem(facts):
    if facts is None or facts["mem_mib"] is None:
        return "not recorded"
    mib = facts["mem_mib"]
    size = f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"
    return f"{size} ({facts['mem_what']})"


def same_memory(s):
    """True only when both sides recorded their memory and it is the same."""
    ma, mb = (f["mem_mib"] if f else None for f in (s.machine_a, s.machine_b))
    return ma is not None and ma == mb


def memory_sized(name, va, vb):
    """True when a sysctl's difference is in the part the kernel sizes from memory at boot."""
    if name not in MEMORY_SYSCTLS or va is None or vb is None:
        return False
    idx = MEMORY_SYSCTLS[name]
    if idx is None:
        return True
    if not isinstance(va, list) or not isinstance(vb, list) or len(va) != len(vb):
        return False
    return all(x == y for i, (x, y) in enumerate(zip(va, vb)) if i not in idx)


def label_memory_sized(text, s):
    """A sysctl line of MEMORY_SYSCTLS: environment when the sides' memory differs (or only one
    recorded it); the kernel's when both recorded the same (what it left free at boot, or its
    formula, differs); unlabelled, with a note, when neither side recorded its memory."""
    known = [f for f in (s.machine_a, s.machine_b) if f and f["mem_mib"] is not None]
    if same_memory(s):
        return f"{text} (sized from memory at boot, the same {fmt_mem(s.machine_a)} on both sides)"
    if known:
        return f"environment: {text} (sized from memory at boot; {memory_note(s)})"
    return f"{text} (sized from memory at boot; memory not recorded on either side)"


def memory_note(s):
    return f"memory {s.pair(fmt_mem(s.machine_a), fmt_mem(s.machine_b))}"


def diff_sysctls(sa, sb, s):
    """sysctls: name -> value string, null when the kernel has no such sysctl.  One sized from
    memory at boot (MEMORY_SYSCTLS) is labelled environment unless both sides recorded the same
    memory; with the same memory it is the kernel's, and the line says the memory was the same."""
    if not isinstance(sa, dict) or not isinstance(sb, dict):
        return []
    out = []
    for name in sorted(set(sa) | set(sb)):
        if name not in sa or name not in sb:
            side = s.a if name in sa else s.b
            value = fmt_value((sa if name in sa else sb)[name])
            text = f"sysctl {name}: recorded in {side} only ({value})"
        elif sa[name] is None and sb[name] is not None:
            text = f"sysctl {name}: absent in {s.a}, {sb[name]} in {s.b}"
        elif sa[name] is not None and sb[name] is None:
            text = f"sysctl {name}: {sa[name]} in {s.a}, absent in {s.b}"
        elif str(sa[name]) != str(sb[name]):
            text = f"sysctl {name}: {s.pair(sa[name], sb[name])}"
            if memory_sized(name, sa[name], sb[name]):
                text = label_memory_sized(text, s)
        else:
            continue
        out.append(line(text, sysctl=True))
    return out


def diff_machine(a, b, s):
    """p01-machine: the CPUs and memory, when they differ, as one environment line, and the
    sysctls sized from memory folded into one line under it."""
    sysctls = diff_sysctls(a.get("sysctls"), b.get("sysctls"), s)
    env = [x for x in sysctls if x.startswith("environment: ")]
    rest = [x for x in sysctls if not x.startswith("environment: ")]
    ca, cb = (f["cpus"] if f else None for f in (s.machine_a, s.machine_b))
    cpus = ca is not None and cb is not None and ca != cb
    ma, mb = (f["mem_mib"] if f else None for f in (s.machine_a, s.machine_b))
    mem = ma is not None and mb is not None and not same_memory(s)
    if not env and not cpus and not mem:
        return rest
    words = [memory_note(s)] if ma is not None or mb is not None else []
    if ca is not None and cb is not None:
        words.append(f"CPUs {s.pair(ca, cb)}")
    out = [line("environment: " + "; ".join(words))]
    if env:
        sa, sb = a["sysctls"], b["sysctls"]
        names = [x.split(" ")[2].rstrip(":") for x in env]
        out.append(line(f"sized from memory at boot ({len(names)} sysctl{'s' * (len(names) > 1)}): "
                        + "; ".join(f"{n} {s.pair(sa[n], sb[n])}" for n in names),
                        sysctl=True, level=1))
    return out + rest


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
# Of those, the ACK counters every kernel tcplab runs has (/proc/net/netstat has had them since
# 2.6): when one side does not list one, it did not move there, which is interleaving too (a
# loaded host: TcpExtDelayedACKs +176 in one run of 300 connects, not listed in the next).  The
# others stay reported when only one side has them: a kernel may lack the counter itself
# (IpOutTransmits), or count it at another time (TcpExtTW, docs/kernel-diff.md).
ACK_TIMING_COUNTERS = {
    "TcpExtDelayedACKs", "TcpExtDelayedACKLocked", "TcpExtDelayedACKLost", "TcpExtTCPPureAcks",
    "TcpExtTCPHPAcks", "TcpExtTCPHPHits",
}


def diff_counters(ca, cb, s, what="counter", floor=0, syns=None):
    """Counter deltas: name -> integer.  A counter on one side only is reported as such when
    its value is not noise: probes list a counter that did not move as absent or as 0, so a
    missing counter counts as 0 for the tolerance.  With a floor (an experiment of many
    connects), TIMING_COUNTERS on both sides are not compared, and ACK_TIMING_COUNTERS not even
    on one side; the other TIMING_COUNTERS on one side only are, beyond the floor
    (IpOutTransmits +13090 against a kernel without it).  With syns, the SYNs the client sent
    on each side when they differ, the counters that follow from that count (follows_syns())
    are folded into one line, first, at level 1 (under the SYN line)."""
    if not isinstance(ca, dict) or not isinstance(cb, dict):
        return []
    follow = {}
    # a counter named with counters -k that this kernel does not have is null: absent
    ca = {k: v for k, v in ca.items() if v is not None}
    cb = {k: v for k, v in cb.items() if v is not None}
    out = []
    for name in sorted(set(ca) | set(cb)):
        va, vb = ca.get(name, 0), cb.get(name, 0)
        if floor > 0 and name in TIMING_COUNTERS and (name in ca and name in cb or
                                                      name in ACK_TIMING_COUNTERS):
            continue   # many connects: its value is the threads' interleaving, not the kernel's

        if not is_number(va) or not is_number(vb):
            if va != vb:
                out.append(f"{what} {name}: {s.pair(va, vb)}")
        elif close_counts(va, vb, floor):
            continue
        elif name not in cb:
            out.append(line(f"{what} {name}: only in {s.a} ({fmt_delta(va)})",
                            counter=(name, s.a) if what == "counter" else None))
        elif name not in ca:
            out.append(line(f"{what} {name}: only in {s.b} ({fmt_delta(vb)})",
                            counter=(name, s.b) if what == "counter" else None))
        elif syns and follows_syns(va, vb, *syns):
            follow.setdefault(follows_syns(va, vb, *syns), []).append((name, va, vb))
        else:
            out.append(line(f"{what} {name}: {s.pair(fmt_delta(va), fmt_delta(vb))}"))
    if follow:
        out.insert(0, line(fmt_follow(follow), level=1))
    return out


def follows_syns(va, vb, na, nb):
    """(k, j) when a counter is k for every SYN after the first j on both sides, v = k (n - j),
    k a positive integer and 0 <= j < n: one per SYN (k 1, j 0: IpInReceives), one per
    retransmission (j 1: TcpRetransSegs), 60 octets per SYN (k 60: IpExtOutOctets).  None when
    the two sides' values do not fit one such rule: then the counter does not follow from the
    SYN count and is printed on its own."""
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (va, vb, na, nb)):
        return None
    dv, dn = vb - va, nb - na
    if va <= 0 or vb <= 0 or dn == 0 or dv * dn <= 0 or abs(dv) % abs(dn):
        return None
    k = abs(dv) // abs(dn)
    if va % k:
        return None
    j = na - va // k
    return (k, j) if 0 <= j < min(na, nb) else None


ORDINAL = {1: "first", 2: "second", 3: "third"}


def fmt_follow(follow):
    """The one line of the counters that follow from the SYN count, by rule."""
    groups = []
    for (k, j), rows in sorted(follow.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rule = f"{k} per SYN" + (f" after the {ORDINAL.get(j, f'{j}th')}" if j else "")
        names = ", ".join(name for name, _, _ in rows)
        _, va, vb = rows[0]
        groups.append(f"{rule}: {names} ({fmt_delta(va)} \u2192 {fmt_delta(vb)})")
    n = sum(len(rows) for rows in follow.values())
    return f"{n} counter{'s' * (n > 1)} follow from the SYN count: " + "; ".join(groups)


def fmt_outcome(run):
    """result, with the errno when there is one: "error (ETIMEDOUT)", "timeout", "ok"."""
    result, errno = run.get("result"), run.get("errno")
    return f"{result or 'none'}{f' ({errno})' if errno else ''}"


def diff_outcome(a, b, s):
    """How the call ended (result: ok, error, timeout, ...), else the errno of an error: one
    line either way.  errno null is no errno: success, or a timeout of the program's own."""
    if "result" in a and "result" in b and a["result"] != b["result"]:
        return [f"result: {s.pair(fmt_outcome(a), fmt_outcome(b))}"]
    if "errno" not in a or "errno" not in b or a["errno"] == b["errno"]:
        return []
    return [f"errno: {s.pair(a['errno'] or 'none', b['errno'] or 'none')}"]


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


def syns_sent(run):
    """The SYNs the client sent: the first and its retransmissions (sockwatch's), None for a run
    without a retransmission list (not a SYN unit)."""
    t = retransmit_times(run)
    return None if t is None else len(t) + 1


def capture_agrees(run):
    """True when a run's capture saw the SYNs sockwatch did: as many, and the same steps."""
    p, t = run.get("packets"), retransmit_times(run)
    if not isinstance(p, dict) or t is None:
        return True     # no capture: nothing to disagree
    if p.get("syn_count") != len(t) + 1:
        return False
    ct = syn_times(p)
    return ct is None or (len(ct) == len(t) + 1 and not schedule_differs(
        [x - ct[0] for x in ct[1:]], t))


def diff_syn_schedule(a, b, s):
    """The number of SYNs and when they were retransmitted; then the documented schedule.  When
    the counts differ, one line says so (the root cause of the counters folded under it), and
    the schedule line says when each side's measured schedule is the one its sysctls predict
    (then the expected schedule has no line of its own)."""
    out = []
    ta, tb = retransmit_times(a), retransmit_times(b)
    ea, eb = a.get("expected"), b.get("expected")
    expected = isinstance(ea, list) and isinstance(eb, list)
    predicted = False
    if ta is not None and tb is not None:
        if len(ta) != len(tb):
            agree = capture_agrees(a) and capture_agrees(b)
            captured = isinstance(a.get("packets"), dict) and isinstance(b.get("packets"), dict)
            out.append(f"SYNs sent: {s.pair(len(ta) + 1, len(tb) + 1)} (the first SYN and its "
                       f"retransmissions{'; the capture agrees' if agree and captured else ''})")
        if schedule_differs(ta, tb):
            predicted = expected and len(ta) != len(tb) and not schedule_differs(ta, ea) \
                and not schedule_differs(tb, eb)
            out.append(f"SYN retransmitted at: {fmt_times(ta)} in {s.a}; {fmt_times(tb)} in {s.b}"
                       + (" (on each side the schedule its sysctls predict)" if predicted else ""))
    if expected and schedule_differs(ea, eb) and not predicted:
        out.append(f"expected SYN retransmissions (from the sysctls): {fmt_times(ea)} in {s.a}; "
                   f"{fmt_times(eb)} in {s.b}")
    out += diff_time(a, b, "expected_elapsed_s", "expected give-up time", s)
    return out


def syn_times(p):
    rows = p.get("syns")
    if not isinstance(rows, list):
        return None
    return [r["t_ms"] / 1e3 for r in rows if isinstance(r, dict) and is_number(r.get("t_ms"))]


def since_first(ts):
    """Times after the first one, measured from it: [1.05, 3.1, 7.2] → [2.05, 6.15]."""
    return [x - ts[0] for x in ts[1:]]


def dropped(obj):
    c = obj.get("capture") if isinstance(obj, dict) else None
    return c.get("dropped") if isinstance(c, dict) else None


def diff_packets(a, b, s):
    """A run's capture (its `packets` object): SYN count exact, SYN times with the time
    tolerance, the counts after a timeout and after close() exact, the DISAGREE lines by
    number, libpcap's drops.  Nothing when a side has no capture."""
    pa, pb = a.get("packets"), b.get("packets")
    if not isinstance(pa, dict) or not isinstance(pb, dict):
        return []
    # with another SYN count that the capture agrees with, the SYN line says it all
    told = syns_sent(a) != syns_sent(b) and capture_agrees(a) and capture_agrees(b)
    out = [] if told else diff_exact(pa, pb, "syn_count", "SYNs in the capture", s)
    ta, tb = syn_times(pa), syn_times(pb)
    # the schedule is the waits between SYNs; when the first one left after the program's start
    # is the machine's load, not the kernel's
    if ta is not None and tb is not None and not told \
            and schedule_differs(since_first(ta), since_first(tb)):
        out.append(f"SYNs captured at: {fmt_times(ta)} in {s.a}; {fmt_times(tb)} in {s.b}")
    out += diff_exact(pa, pb, "syns_after_timeout", "SYNs in the capture after the timeout", s)
    out += diff_exact(pa, pb, "segments_after_close", "segments in the capture after close()", s)
    da, db = pa.get("disagree"), pb.get("disagree")
    if isinstance(da, list) and isinstance(db, list) and len(da) != len(db):
        out.append(f"DISAGREE lines (capture against sockwatch, counters): {s.pair(len(da), len(db))}")
    out += diff_dropped(pa, pb, s)
    return out


def diff_dropped(a, b, s):
    xa, xb = dropped(a), dropped(b)
    if is_number(xa) and is_number(xb) and xa != xb:
        return [f"packets libpcap dropped: {s.pair(xa, xb)}"]
    return []


def slower_than(n, p):
    """How many of n connects are slower than the nearest-rank percentile p (0 when n is not
    known)."""
    return n - math.ceil(PCT_RANK[p] * n) if is_number(n) and n > 0 else 0


def diff_percentiles(pa, pb, s, part, na=None, nb=None):
    """The percentiles of PERCENTILES more than PERCENTILE_FACTOR apart, each only where both
    sides have SLOWER_MIN connects slower than it (na, nb: each side's number of connects)."""
    out = []
    if not isinstance(pa, dict) or not isinstance(pb, dict):
        return out
    for p in PERCENTILES:
        if min(slower_than(na, p), slower_than(nb, p)) < SLOWER_MIN:
            continue
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
    out += diff_percentiles(a.get("us"), b.get("us"), s, prefix, a.get("n"), b.get("n"))
    if part:
        out += [prefixed(prefix, x) for x in
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


def fmt_link(link):
    return f"mtu {link.get('mtu')}, qdisc {link.get('qdisc') or 'none'}, " \
        f"kind {link.get('kind') or 'none'}"


def diff_links(la, lb, s):
    """p01-machine's links, by name: one on one side only; the MTU and the root qdisc of one
    on both.  Outputs made before machine recorded links have none: said once."""
    if not isinstance(la, list) and not isinstance(lb, list):
        return []   # neither side has machine's list (p01-wire-connect's "links" is its own)
    if not isinstance(la, list) or not isinstance(lb, list):
        return [f"links: recorded in {s.a if isinstance(la, list) else s.b} only"]
    by_a, by_b = ({x["name"]: x for x in side} for side in (la, lb))
    out = []
    for name in sorted(set(by_a) | set(by_b)):
        if name not in by_b:
            out.append(f"link {name}: only in {s.a} ({fmt_link(by_a[name])})")
        elif name not in by_a:
            out.append(f"link {name}: only in {s.b} ({fmt_link(by_b[name])})")
        else:
            a, b = by_a[name], by_b[name]
            if a["mtu"] != b["mtu"]:
                out.append(f"link {name}: MTU {s.pair(a['mtu'], b['mtu'])}")
            if a["qdisc"] != b["qdisc"]:
                out.append(f"link {name}: root qdisc "
                           f"{s.pair(a['qdisc'] or 'none', b['qdisc'] or 'none')}")
    return out


def diff_run(a, b, s):
    """Everything compared within one run of an experiment."""
    if a.get("experiment") == "p01-machine":
        out = diff_machine(a, b, s)
    else:
        out = diff_sysctls(a.get("sysctls"), b.get("sysctls"), s)
    out += diff_exact(a, b, "hz", "HZ", s)
    out += diff_exact(a, b, "syncnt", "TCP_SYNCNT", s)
    out += diff_syn_schedule(a, b, s)
    out += diff_outcome(a, b, s)
    out += diff_time(a, b, "elapsed_s", "total time", s)
    out += diff_connect_time(a, b, s)
    out += diff_packets(a, b, s) + diff_dropped(a, b, s)
    if not (isinstance(a.get("parts"), dict) and isinstance(b.get("parts"), dict)):
        # with parts, the top-level counters are a copy of the first part's, compared there
        floor = COUNTER_PER_CONNECT * max(connects(a), connects(b))
        na, nb = syns_sent(a), syns_sent(b)
        syns = (na, nb) if na is not None and nb is not None and na != nb else None
        counters = diff_counters(a.get("counters"), b.get("counters"), s, floor=floor, syns=syns)
        if counters and getattr(counters[0], "level", 0) == 1:   # under the SYN line
            at = next((i + 1 for i, x in enumerate(out) if x.startswith("SYNs sent: ")), len(out))
            out.insert(at, counters.pop(0))
        out += counters
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
    out += diff_links(a.get("links"), b.get("links"), s)
    for name in sub_runs(a, b):
        sub = [prefixed(f"{name}: ", x) for x in diff_run(a[name], b[name], s)]
        out = [line for line in out if f"{name}: {line}" not in sub] + sub
    if "default" in a or "default" in b:
        da, db = a.get("default"), b.get("default")
        if isinstance(da, dict) and isinstance(db, dict):
            # the default run records the sysctls the top level did: not said twice
            out += [prefixed("default TCP_SYNCNT run: ", x) for x in diff_run(da, db, s)
                    if not (getattr(x, "sysctl", False) and x in out)]
        elif isinstance(da, dict) != isinstance(db, dict):
            out.append(f"default TCP_SYNCNT run: only in {s.a if isinstance(da, dict) else s.b}")
    return out


# ---- reading: only regular files, bounded, strict JSON ---------------------------------------
# A side is read the way diff(1) treats trouble: anything that is not a well-formed report of the
# documented format (docs/output-format.md) stops the tool with exit 2 and one line naming the
# file and the field, before a single difference is printed.

MAX_BYTES = 1 << 20      # a report is at most a few tens of kB (accept-path, the largest: 24 kB)
MAX_PARSE_DEPTH = 200    # checked before json parses (its C scanner recurses: RecursionError)
MAX_DEPTH = 32           # what the schema walk allows anywhere (the reports nest 6 deep)
MAX_STR = 64 << 10       # any one string (the longest, a strace line, is under 200 characters)
MAX_INT_DIGITS = 20      # beyond 64 bits no counter or time can be
INT_LIMIT = 2 ** 64


def show(text, limit=80):
    """A path, key or value for an error line: one line, printable, not too long."""
    text = str(text)
    out = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])
    return out + ("..." if len(text) > limit else "")


class BadNumber:
    """A number strict JSON or a 64-bit reader cannot hold, kept until the schema walk names its
    field: NaN, Infinity, 1e400, a 30-digit integer."""

    def __init__(self, text, why):
        self.text, self.why = text, why


class JObj(dict):
    """A JSON object that remembers its first duplicated key (json keeps the last silently)."""
    dup = None


def _pairs(pairs):
    obj = JObj()
    for k, v in pairs:
        if k in obj and obj.dup is None:
            obj.dup = k
        obj[k] = v
    return obj


def _float(text):
    x = float(text)
    if math.isfinite(x):
        return x
    return BadNumber(text, f"{show(text, 24)} is out of range (a double holds up to 1.8e308)")


def _int(text):
    if len(text.lstrip("-")) > MAX_INT_DIGITS or abs(int(text)) >= INT_LIMIT:
        return BadNumber(text, f"{show(text, 24)} is out of range (more than 64 bits)")
    return int(text)


def _constant(text):
    return BadNumber(text, f"{text} is not a number (strict JSON has no NaN or Infinity)")


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:')


_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_parse_depth(text):
    """Raise ValueError naming the nearest key when brackets nest deeper than MAX_PARSE_DEPTH
    (json's C scanner would recurse until RecursionError, or worse).  Brackets inside strings
    do not count; the scan runs in C (re, itertools) but for the error's position."""
    brackets = _BRACKET.findall(_STRING.sub('""', text))
    if len(brackets) <= MAX_PARSE_DEPTH or \
            max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets))) <= MAX_PARSE_DEPTH:
        return
    depth, pos = 0, 0
    while True:     # the slow way, once: where it got too deep, with strings skipped
        m = _STRING.search(text, pos)
        end = m.start() if m else len(text)
        for b in _BRACKET.finditer(text, pos, end):
            depth += _DEPTH_STEP[b.group()]
            if depth > MAX_PARSE_DEPTH:
                keys = _KEY.findall(text, 0, b.start())
                near = f"{show(keys[-1], 40)}: " if keys else ""
                raise ValueError(f"{near}nested deeper than {MAX_PARSE_DEPTH} levels "
                                 f"(byte {b.start()})")
        if m is None:
            raise ValueError(f"nested deeper than {MAX_PARSE_DEPTH} levels")
        pos = m.end()


def read_regular(path, follow, cap=MAX_BYTES):
    """The bytes of a regular file of at most cap bytes (tcplab.regular_bytes(): never blocks,
    follows a symlink only when follow); trouble naming the file otherwise."""
    name = show(path, 4096)
    try:
        return tcplab.regular_bytes(path, cap, follow)
    except tcplab.NotRegular as e:
        raise Trouble(f"{name}: {e}") from e
    except OSError as e:
        raise Trouble(f"{name}: {e.strerror}") from e


def parse(path, data):
    """Strict JSON: UTF-8, no NaN/Infinity (kept as BadNumber for the schema to name), bounded
    depth; an object at the top."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Trouble(f"{show(path, 4096)}: not UTF-8 text (byte {e.start})") from e
    if not text.strip():
        raise Trouble(f"{show(path, 4096)}: empty, not a report")
    try:
        check_parse_depth(text)
        obj = json.loads(text, object_pairs_hook=_pairs, parse_float=_float,
                         parse_int=_int, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise Trouble(f"{show(path, 4096)}: not JSON: {e.msg} "
                      f"(line {e.lineno} column {e.colno})") from e
    except (ValueError, RecursionError) as e:
        raise Trouble(f"{show(path, 4096)}: {show(e, 160)}") from e
    return obj


# ---- the documented format, as a schema (mirrors docs/output-format.md) ----------------------

class Bad(Exception):
    """A value that does not fit the format: where (a list of keys and indexes) and what."""

    def __init__(self, path, what):
        super().__init__(what)
        self.path, self.what = path, what


def where(path):
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + show(p, 40))
    return out or "(top level)"


def kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string" if len(v) <= 40 else f"a string of {len(v)} characters"
    if isinstance(v, list):
        return "a list"
    return "an object"


_TEXT_BAD = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def walk(spec, v, path, depth=0):
    """Check v against spec; what every value must satisfy is checked here, once."""
    if depth > MAX_DEPTH:
        raise Bad(path, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(v, BadNumber):
        raise Bad(path, v.why)
    if isinstance(v, JObj) and v.dup is not None:
        raise Bad(path + [v.dup], "appears twice in one object")
    spec.check(v, path, depth)


class Any:
    """Any JSON value (a key the diff never reads), within the limits that hold everywhere."""
    want = "any value"

    def check(self, v, path, depth):
        if isinstance(v, str):
            if len(v) > MAX_STR:
                raise Bad(path, f"a string of {len(v)} characters, more than {MAX_STR}")
            if re.search(r"[\ud800-\udfff]", v):
                raise Bad(path, "a string with an unpaired UTF-16 surrogate")
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(self, x, path + [i], depth + 1)
        elif isinstance(v, dict):
            for k, x in v.items():
                if _TEXT_BAD.search(k) or len(k) > 256:
                    raise Bad(path + [k], "a key with control characters, or too long")
                walk(self, x, path + [k], depth + 1)


ANY = Any()


class Str:
    def __init__(self, maxlen=4096, pattern=None, choices=None, want=None):
        self.maxlen, self.choices = maxlen, choices
        self.pattern = re.compile(pattern) if pattern else None
        self.want = want or ("one of " + ", ".join(choices) if choices else "a string")

    def check(self, v, path, depth):
        if not isinstance(v, str):
            raise Bad(path, f"{kind(v)}, want {self.want}")
        if len(v) > self.maxlen:
            raise Bad(path, f"a string of {len(v)} characters, want at most {self.maxlen}")
        if _TEXT_BAD.search(v) or (self.pattern and not self.pattern.fullmatch(v)) or \
                (self.choices and v not in self.choices):
            raise Bad(path, f"{show(json.dumps(v), 40)}, want {self.want}")


class Num:
    def __init__(self, lo, hi, integer=False, want=None):
        self.lo, self.hi, self.integer = lo, hi, integer
        self.want = want or f"{'an integer' if integer else 'a number'} from {lo:g} to {hi:g}"

    def check(self, v, path, depth):
        ok = isinstance(v, int) if self.integer else isinstance(v, (int, float))
        if not ok or isinstance(v, bool):
            raise Bad(path, f"{kind(v)}, want {self.want}")
        if not (self.lo <= v <= self.hi) or not math.isfinite(v):
            raise Bad(path, f"{v:g} is out of range, want {self.want}")


class Null:
    want = "null"

    def check(self, v, path, depth):
        if v is not None:
            raise Bad(path, f"{kind(v)}, want null")


class OneOf:
    """The first spec whose type fits decides (so its message is the one shown)."""

    def __init__(self, *specs, want=None):
        self.specs = specs
        self.want = want or " or ".join(s.want for s in specs)

    def check(self, v, path, depth):
        for s in self.specs:
            if fits(s, v):
                return s.check(v, path, depth)
        raise Bad(path, f"{kind(v)}, want {self.want}")


def fits(spec, v):
    """Whether v has the JSON type spec is about (its value may still be wrong)."""
    if isinstance(spec, Null):
        return v is None
    if isinstance(spec, Str):
        return isinstance(v, str)
    if isinstance(spec, Num):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and \
            (isinstance(v, int) or not spec.integer)
    if isinstance(spec, List):
        return isinstance(v, list)
    if isinstance(spec, (Obj, Map)):
        return isinstance(v, dict)
    return True


def nullable(spec):
    return OneOf(spec, Null())


class List:
    def __init__(self, item, maxlen=100000, want=None):
        self.item, self.maxlen = item, maxlen
        self.want = want or "a list"

    def check(self, v, path, depth):
        if not isinstance(v, list):
            raise Bad(path, f"{kind(v)}, want {self.want}")
        if len(v) > self.maxlen:
            raise Bad(path, f"a list of {len(v)}, want at most {self.maxlen}")
        for i, x in enumerate(v):
            walk(self.item, x, path + [i], depth + 1)


class Map:
    """name -> value, the names matching a pattern."""

    def __init__(self, key_pattern, value, key_want, want="an object"):
        self.key = re.compile(key_pattern)
        self.value, self.key_want, self.want = value, key_want, want

    def check(self, v, path, depth):
        if not isinstance(v, dict):
            raise Bad(path, f"{kind(v)}, want {self.want}")
        for k, x in v.items():
            if len(k) > 128 or not self.key.fullmatch(k):
                raise Bad(path + [k], f"not a name of {self.key_want}")
            walk(self.value, x, path + [k], depth + 1)


class Obj:
    """Documented keys: required ones must be there; keys not documented may be (an experiment
    that adds a key must not make old outputs fail), each checked by extra."""

    def __init__(self, required=None, optional=None, extra=ANY, want="an object"):
        self.required, self.optional = dict(required or {}), dict(optional or {})
        self.extra, self.want = extra, want

    def check(self, v, path, depth):
        if not isinstance(v, dict):
            raise Bad(path, f"{kind(v)}, want {self.want}")
        for k in self.required:
            if k not in v:
                raise Bad(path + [k], "missing")
        for k, x in v.items():
            spec = self.required.get(k) or self.optional.get(k)
            if spec is None:
                if _TEXT_BAD.search(k) or len(k) > 256:
                    raise Bad(path + [k], "a key with control characters, or too long")
                spec = self.extra
            walk(spec, x, path + [k], depth + 1)

    def extend(self, required=None, optional=None, extra=None):
        return Obj({**self.required, **(required or {})}, {**self.optional, **(optional or {})},
                   self.extra if extra is None else extra, self.want)


class SubRunOrAny:
    """A key not documented: any value, except that an object with retransmits, errno or
    elapsed_s is compared as a sub-run (sub_runs()), so it must have a run's types."""
    want = "any value"

    def check(self, v, path, depth):
        if isinstance(v, dict) and any(k in v for k in SUB_RUN_KEYS):
            return RUN.check(v, path, depth)
        return ANY.check(v, path, depth)


class Run(Obj):
    """A run's object, with the rule the format gives errno: a name only when result is error
    (a program's own poll() timeout has no errno)."""

    def check(self, v, path, depth):
        super().check(v, path, depth)
        result, errno = v.get("result"), v.get("errno")
        if errno is not None and result is not None and result != "error":
            raise Bad(path + ["errno"], f"{show(errno, 32)} with result {result}, "
                      "want null (an errno is given only when result is error)")

    def extend(self, required=None, optional=None, extra=None):
        o = super().extend(required, optional, extra)
        r = Run(o.required, o.optional, o.extra, o.want)
        return r


# The building blocks, each a shape of docs/output-format.md ("Shapes").
SCHEMA_VERSION = 2
SECONDS = Num(0, 1e6, want="seconds, a number from 0 to 1e6")
COUNT = Num(0, 2 ** 63, integer=True, want="a count, an integer >= 0")
MS = Num(-1e9, 1e9, want="milliseconds, a number")
ERRNO_NAME = r"E[A-Z0-9]{1,30}"
ERRNO = nullable(Str(32, ERRNO_NAME, want="an errno name (ETIMEDOUT)"))
RESULT = nullable(Str(choices=("ok", "error", "timeout", "interrupted")))
TEXT = Str(4096)
COUNTER_NAME = r"[A-Za-z][A-Za-z0-9_]{0,63}"
DELTA = Num(-2 ** 63, 2 ** 64, integer=True, want="a delta, an integer")
COUNTERS = Map(COUNTER_NAME, OneOf(
    DELTA, Null(), Obj({"only": Str(choices=("now", "before")), "value": DELTA}),
    want='a delta (an integer), null, or {"only", "value"}'),
    "a counter (TcpExtTCPSynRetrans)", want="an object (counter name -> delta)")
SYSCTL_NAME = r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*"
SYSCTL_NUMBER = Num(-2 ** 63, 2 ** 64, want="a number")
SYSCTLS = Map(SYSCTL_NAME, OneOf(
    SYSCTL_NUMBER, List(SYSCTL_NUMBER, 64), Str(256, r"[ -~]*"), Null(),
    want="a sysctl value (a number, a list of numbers, a string or null)"),
    "a sysctl (net.ipv4.tcp_syn_retries)", want="an object (sysctl -> value)")
LOAD_AVERAGE = nullable(List(Num(0, 1e6), 3, want="a list of 3 load averages"))
TIMER = Str(choices=("off", "on", "keepalive", "timewait", "persist"))
EVENT = Obj({"t_s": Num(-1e6, 1e6), "event": Str(choices=("new", "change", "gone")),
             "state": Str(32, r"[A-Z0-9-]+"), "retrans": COUNT, "timer": TIMER,
             "expires_ms": MS, "backoff": nullable(COUNT), "rto_ms": nullable(MS)})
EVENTS = List(EVENT, 100000, want="a list of events")
RETRANSMIT = Obj({"t_s": SECONDS, "retrans": COUNT, "timer": TIMER, "expires_ms": MS})
RETRANSMITS = List(RETRANSMIT, 10000, want="a list of retransmissions")
ENDPOINT = Str(64, r"[0-9A-Fa-f.:\[\]*%a-z]+", want="address:port")
SOCKET = Obj({"state": Str(32, r"[A-Z0-9-]+"), "local": ENDPOINT, "peer": ENDPOINT,
              "rq": COUNT, "wq": COUNT, "timer": TIMER, "expires_ms": MS, "retrans": COUNT,
              "inode": COUNT})
SOCKETS = List(SOCKET, 100000, want="a list of sockets")
# port and addr are null where nothing listened (p01-connect-time's refused part)
LISTENER = {"port": nullable(Num(0, 65535, integer=True)), "addr": nullable(Str(64))}
US = Obj({p: nullable(Num(0, 1e12)) for p in ("min", "p10", "median", "p90", "p99", "max")},
         want="an object of percentiles in us")
EXPERIMENT = Str(64, r"[a-z0-9][a-z0-9_-]*", want="an experiment name")
KERNEL = Str(64, r"[!-~]+", want="a kernel release (uname -r)")
ERRORS = Map(ERRNO_NAME, COUNT, "an errno (ECONNREFUSED)")
# machine's link= lines (docs/machine.md): names as machine prints them (other bytes as \xHH)
LINK_WORD = Str(64, r"[!-~]+", want="a word of printable ASCII")
LINK = Obj({"name": LINK_WORD, "index": Num(1, 2 ** 31 - 1, integer=True),
            "mtu": Num(0, 2 ** 32 - 1, integer=True), "qdisc": nullable(LINK_WORD),
            "state": Str(32, r"[A-Z]+|[0-9]{1,3}", want="an operstate (UP) or its number"),
            "kind": nullable(LINK_WORD),
            "flags": List(Str(32, r"[A-Z_]+|0x[0-9a-f]+", want="an IFF_ name (UP)"), 32)})
LINKS = List(LINK, 65536, want="a list of links")

# The keys any run (a report, its default run, a sub-run) may have and the diff reads.
RUN = Run(optional={
    "sysctls": SYSCTLS, "hz": nullable(Num(1, 1e6, integer=True)),
    "syncnt": nullable(Num(0, 255, integer=True)), "retransmits": RETRANSMITS,
    "expected": List(SECONDS, 10000, want="a list of seconds"),
    "expected_elapsed_s": nullable(SECONDS), "result": RESULT, "errno": ERRNO,
    "elapsed_s": nullable(SECONDS), "n": COUNT, "errors": ERRORS, "us": US,
    "counters": nullable(COUNTERS), "events": EVENTS, "load_average": LOAD_AVERAGE,
    "collected_at": nullable(Str(64))}, extra=SubRunOrAny())
# the capture beside a run (the keys the diff reads; docs/output-format.md)
CAPTURE = nullable(Obj(optional={k: COUNT for k in (
    "packets", "tcp", "icmp", "other", "received", "dropped", "ifdropped")}))
SYN_ROW = Obj({"n": COUNT, "t_ms": MS})
PACKETS = nullable(Obj(optional={
    "capture": CAPTURE, "syn_count": COUNT, "syns": List(SYN_ROW, 10000, want="a list of SYNs"),
    "disagree": List(TEXT, 10000, want="a list of lines"), "syns_after_timeout": COUNT,
    "segments_after_close": COUNT}))
RUN.optional["packets"] = PACKETS
RUN.optional["capture"] = CAPTURE
RUN.optional["default"] = nullable(RUN)
RUN.optional["parts"] = Map(r"[a-z0-9_-]{1,32}", RUN, "a part")

# Every .json has these keys (docs/output-format.md, "The JSON files").
COMMON = RUN.extend(required={
    "experiment": EXPERIMENT, "kernel": KERNEL,
    "schema": Num(SCHEMA_VERSION, SCHEMA_VERSION, integer=True, want=f"{SCHEMA_VERSION} "
                  "(older outputs: make them again with the current reports)"),
    "collected_at": nullable(Str(64)), "load_average": LOAD_AVERAGE,
    "counters": nullable(COUNTERS), "result": RESULT, "errno": ERRNO,
    "elapsed_s": nullable(SECONDS)})

SYNRETRY_RUN = {**LISTENER, "result": RESULT, "errno": ERRNO, "elapsed_s": nullable(SECONDS),
                "syncnt": RUN.optional["syncnt"], "counters": nullable(COUNTERS),
                "sysctls": SYSCTLS, "events": EVENTS, "retransmits": RETRANSMITS,
                "expected": RUN.optional["expected"], "expected_elapsed_s": nullable(SECONDS),
                "collected_at": nullable(Str(64)), "load_average": LOAD_AVERAGE}
CONNECT_PART = {"n": COUNT, "ok": COUNT, "errors": ERRORS, "us": US,
                "max_index": nullable(COUNT), "over_1ms": COUNT, **LISTENER}
PART = RUN.extend(required={**CONNECT_PART, "counters": nullable(COUNTERS),
                            "load_average": LOAD_AVERAGE, "result": RESULT, "errno": ERRNO})
TIMEOUT_CLIENT = RUN.extend(required={
    "result": RESULT, "errno": ERRNO, "elapsed_s": nullable(SECONDS),
    "closed_s": nullable(SECONDS), "events": EVENTS, "retransmits": RETRANSMITS,
    "after_close": SOCKETS})
STRACE_PART = RUN.extend(required={"result": RESULT, "errno": ERRNO,
                                   "elapsed_s": nullable(SECONDS), "dest": nullable(ENDPOINT),
                                   "syscalls": nullable(List(TEXT, 100000))})

SCHEMAS = {
    "p01-synretry": COMMON.extend(required={
        **SYNRETRY_RUN, "default": nullable(RUN.extend(required=SYNRETRY_RUN))}),
    "p01-connect-time": COMMON.extend(required={
        **CONNECT_PART, "parts": Obj({"accept": PART, "refused": PART})}),
    "p01-timeout": COMMON.extend(required={
        **LISTENER, "cc": TIMEOUT_CLIENT,
        "keep": TIMEOUT_CLIENT.extend(required={"after_timeout": SOCKETS}),
        "keep_retransmits_after_timeout": COUNT}),
    "p01-strace": COMMON.extend(required={
        **LISTENER, "backlog": COUNT, "strace": TEXT,
        "parts": Obj({k: STRACE_PART for k in ("block", "refused", "cc")}), "sockets": SOCKETS}),
    "p01-machine": COMMON.extend(required={
        "version": TEXT, "arch": Str(64), "hz": nullable(Num(1, 1e6, integer=True)),
        "nproc": Num(1, 1e6, integer=True), "sysctls": SYSCTLS,
        "vm": nullable(Map(r"[A-Za-z0-9_.-]{1,64}", TEXT, "a vm.txt key"))},
        optional={"links": LINKS}),   # optional: outputs made before machine recorded links
    # The labs describe their other keys on their pages (docs/connect-modes.md, poll-scaling.md,
    # accept-path.md); the diff reads only the run keys above, so those are what is typed, the
    # rest is bounded.
    "connect-modes": COMMON.extend(required={**LISTENER, "n": COUNT}),
    "accept-path": COMMON.extend(required={"sysctls": SYSCTLS}),
    # its self-test row is a sub-run to the diff (it has errno), and says "none" for no error
    "poll-scaling": COMMON.extend(optional={"selftest": RUN.extend(optional={
        "errno": nullable(Str(32, r"none|" + ERRNO_NAME, want="an errno name or none"))})}),
}


def validate(path, obj):
    """obj against the schema of the experiment it names (an experiment the tool does not know:
    the keys every report has, and those the diff reads)."""
    name = obj.get("experiment") if isinstance(obj, dict) else None
    spec = SCHEMAS.get(name, COMMON) if isinstance(name, str) else COMMON
    try:
        if isinstance(obj, dict):   # first the version: an older output fails on this, not later
            if "schema" not in obj:
                raise Bad(["schema"], "missing")
            walk(COMMON.required["schema"], obj["schema"], ["schema"])
        walk(spec, obj, [])
    except Bad as e:
        raise Trouble(f"{show(path, 4096)}: {where(e.path)}: {e.what}") from e
    return obj


def load(path, follow=False):
    return validate(path, parse(path, read_regular(path, follow)))


# ---- driving -----------------------------------------------------------------------------------

def experiments(path):
    """name -> (path of its .json, whether to follow a symlink), for a directory (every top-level
    *.json, whatever it is: read_regular() refuses what is not a regular file) or one file."""
    if not os.path.lexists(path):
        raise Trouble(f"{show(path, 4096)}: no such directory")
    if not os.path.isdir(path):
        # a file named on the command line: the user's choice, symlink or not
        return {os.path.basename(path)[:-5] if path.endswith(".json") else path: (path, True)}
    try:
        names = os.listdir(path)
    except OSError as e:
        raise Trouble(f"{show(path, 4096)}: {e.strerror}") from e
    return {n[:-5]: (os.path.join(path, n), False) for n in names if n.endswith(".json")}


def vm_accel(path):
    """The accelerator a kernel-matrix run used (raw/<unit>/vm.txt, written by experiments/guest/vm.sh and
    copied into each unit by run.sh), else None.  Read like a report: regular files only."""
    raw = os.path.join(path, "raw")
    try:
        units = sorted(os.listdir(raw))
    except OSError:
        return None
    for unit in units:
        try:
            text = read_regular(os.path.join(raw, unit, "vm.txt"), False, 64 << 10)
        except Trouble:
            continue
        for line in text.decode("utf-8", "replace").splitlines():
            if line.startswith("accel="):
                return show(line.strip().split("=", 1)[1], 16) or None
    return None


def labels(path_a, path_b):
    """Short names for the sides: the directories' names when they differ, else A and B
    (then a header says which is which)."""
    a = os.path.basename(os.path.normpath(path_a))
    b = os.path.basename(os.path.normpath(path_b))
    named = bool(a and b and a != b and os.path.isdir(path_a) and os.path.isdir(path_b))
    if not named:
        a, b = "A", "B"
    return Sides(show(a, 255), show(b, 255), named, vm_accel(path_a), vm_accel(path_b))


def diff_dirs(path_a, path_b):
    """All lines, grouped: an experiment's name, then its differences indented.  Every file of
    both sides is read and checked first, those on one side only too, so that bad input is
    trouble (exit 2) before any line is printed."""
    ea, eb = experiments(path_a), experiments(path_b)
    if not os.path.isdir(path_a) and not os.path.isdir(path_b):
        eb = {name: eb[k] for name, k in zip(ea, eb)}  # two files: one experiment, any names
    objs_a = {name: load(*ea[name]) for name in sorted(ea)}
    objs_b = {name: load(*eb[name]) for name in sorted(eb)}
    s = labels(path_a, path_b)
    s.machine_a = machine_facts(objs_a.get("p01-machine"))
    s.machine_b = machine_facts(objs_b.get("p01-machine"))
    groups = {}
    for name in sorted(set(ea) | set(eb)):
        if name not in eb or name not in ea:
            groups[name] = [line(f"only in {s.a if name in ea else s.b}")]
        else:
            groups[name] = diff_experiment(objs_a[name], objs_b[name], s)
    groups = group_root_causes(groups, s, counter_names(objs_a), counter_names(objs_b))
    out = []
    for name, lines in groups.items():
        if lines:
            out += [name] + [("    " if getattr(x, "level", 0) else "  ") + x for x in lines]
    return out


ALL = "all experiments"   # not an experiment's name: those have no space


def counter_names(objs):
    """Every counter name that moved anywhere in a side's reports (any "counters" object)."""
    names, todo = set(), list(objs.values())
    while todo:
        o = todo.pop()
        if isinstance(o, dict):
            c = o.get("counters")
            if isinstance(c, dict):
                names |= {k for k, v in c.items() if v is not None}
            todo += [v for v in o.values() if isinstance(v, (dict, list))]
        elif isinstance(o, list):
            todo += [v for v in o if isinstance(v, (dict, list))]
    return names


def group_root_causes(groups, s, names_a, names_b):
    """The differences that more than one experiment shows, said once.  A sysctl line that an
    earlier experiment printed word for word is not printed again (a sysctl is the machine's,
    not the experiment's).  A counter on one side only, in two or more runs, that never moved
    on the other side in any experiment is one fact (the other kernel does not count it): one
    line in a first group, "all experiments", and none in the experiments."""
    seen = set()
    for name, lines in groups.items():
        kept = []
        for x in lines:
            if getattr(x, "sysctl", False) and not getattr(x, "level", 0) and str(x) in seen:
                continue
            seen.add(str(x))
            kept.append(x)
        groups[name] = kept
    where = {}
    for name, lines in groups.items():
        for x in lines:
            c = getattr(x, "counter", None)
            if c and c[0] not in (names_a if c[1] == s.b else names_b):
                prefix = x[:x.index("counter ")].rstrip(": ")
                where.setdefault(c, []).append(name + (f" {prefix}" if prefix else ""))
    folded = {c: runs for c, runs in where.items() if len(runs) > 1}
    if not folded:
        return groups
    top = []
    for (counter, side), runs in sorted(folded.items()):
        other = s.a if side == s.b else s.b
        top.append(line(f"counter {counter}: only in {side}, in {len(runs)} runs "
                        f"({', '.join(runs)}); in no experiment of {other}"))
    out = {ALL: top}
    for name, lines in groups.items():
        out[name] = [x for x in lines if getattr(x, "counter", None) not in folded]
    return out


def usage(stream):
    print("usage: tcplab_diff.py A B", file=stream)


def trouble(text):
    print(f"tcplab_diff.py: {text}", file=sys.stderr)
    return EXIT_TROUBLE


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        usage(sys.stdout)
        return EXIT_SAME
    if len(argv) != 3:
        usage(sys.stderr)
        return EXIT_TROUBLE
    try:
        lines = diff_dirs(argv[1], argv[2])
        s = labels(argv[1], argv[2])
    except Trouble as e:
        return trouble(e)
    except Exception as e:   # a backstop, not the check: still one line and exit 2
        return trouble(f"internal error: {type(e).__name__}: {show(e, 200)}")
    if not lines:
        return EXIT_SAME
    try:
        if not s.named:
            print(f"A: {show(argv[1], 4096)}\nB: {show(argv[2], 4096)}")
        for line in lines:
            print(line)
        sys.stdout.flush()
    except OSError as e:
        return trouble(f"standard output: {e.strerror}")
    return EXIT_DIFFER


if __name__ == "__main__":
    sys.exit(tcplab.tool_main(main))
