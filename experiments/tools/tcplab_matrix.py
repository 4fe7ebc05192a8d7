#!/usr/bin/python3
"""tcplab_matrix.py — one row per fact, one column per kernel, over two or more output directories.

usage: tcplab_matrix.py [--out DIR] DIR DIR [DIR...]

Each DIR is an outputs/<kernel release>/ directory.  Its report .json files are read (never the
.txt), checked against the documented format by tcplab_diff.load(), and turned into facts: every
sysctl a report recorded (its presence and value), per p01 unit the SYN retransmissions and their
schedule, the outcome (errno) and the total time, the counters that matter to each experiment, and
the lifecycle facts the later units hold (N+1 queued in p02-accept-queue, the Nagle stall in
p03-small-writes, RST on close in p05-close, the TIME-WAIT length in p06-time-wait, EADDRNOTAVAIL
in p06-port-exhaustion, tcp_info's length as sock_diag gave it, ...).

A cell is a value, "not run: WHY" (the unit's report is missing from that directory: WHY is its
raw/<unit>/status.txt, the unit table's qemu=no for a guest with its "# qemu no: UNIT: why"
line, or simply that no .json is there) or
"not recorded" (the report is there, without that fact: an older output).  A row whose values
differ between columns (the diff's tolerances: tcplab_diff.close_times, close_counts,
schedule_differs) is marked, and names its explanation: an anchor of docs/kernel-diff.md, or
"unexplained" when that page has none yet.  A timing fact measured in a QEMU guest (raw/*/vm.txt
accel=tcg) is marked with a dagger: the guest runs under emulation.

Writes OUT/matrix.txt, matrix.json and matrix.svg (default OUT: run.sh's outputs/, TCPLAB_OUTPUTS, else the
outputs/ beside this script's tree), each through a temporary file renamed into place once all three
are made.

Exit status: 0 written; 1 bad data (a DIR that is not an output directory, a .json that is not a
report of the documented format, an OUT that cannot be written), with one line on stderr and
nothing written, or standard output that cannot be written (tcplab.tool_main()); 2 usage (fewer
than two DIRs, an unknown option, an OUT that is one of the DIRs: its matrix.json would be read
back as a report).

Standard library only: run it with /usr/bin/python3.
"""
import json
import os
import re
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab
import tcplab_diff as D

EXIT_OK, EXIT_DATA, EXIT_USAGE = 0, 1, 2
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIFF_DOC = os.path.join(TOP, "docs", "kernel-diff.md")
DIFF_DOC_REL = "docs/kernel-diff.md"
DAGGER = "\u2020"
MATRIX_SCHEMA = 1


class Trouble(Exception):
    """Bad data: exit 1 with one line."""


# ---- reading one directory -------------------------------------------------------------------

def unit_table():
    """report name -> list of unit table rows feeding it (experiments/units)."""
    by_report = {}
    for u in tcplab.read_units():
        if u["report"]:
            by_report.setdefault(u["report"], []).append(u)
    return by_report


def vm_info(path):
    """The first raw/<unit>/vm.txt of a directory as a dict (a --kernel run), else None: the
    accelerator the diff names (tcplab_diff.vm_accel()), with the memory and CPUs beside it."""
    if not D.vm_accel(path):
        return None
    for unit in sorted(os.listdir(os.path.join(path, "raw"))):
        try:
            info = tcplab.read_vm(os.path.join(path, "raw", unit))
        except (OSError, tcplab.RawError, ValueError):
            continue
        if info:
            return {k: D.show(v, 80) for k, v in info.items()}
    return None


def raw_status(path, unit):
    """raw/<unit>/status.txt's line (failed, timed out, skipped), or None."""
    rawdir = os.path.join(path, "raw", unit)
    if not os.path.isdir(rawdir):
        return None
    try:
        return D.show(tcplab.unit_status(rawdir), 200) if tcplab.unit_status(rawdir) else None
    except (OSError, tcplab.RawError, ValueError) as e:
        raise Trouble(f"{D.show(rawdir, 4096)}/status.txt: {e}") from e


BUILD_TAG = re.compile(r"-v[0-9]+$")


def source_release(kernel):
    """A kernel release without its build tag: 6.18.44-fc-v1045 and 6.18.44-fc-v1272 are one
    source built twice (the host's tag changes from machine to machine; docs/kernel-matrix.md)."""
    return BUILD_TAG.sub("", kernel)


class Column:
    """One output directory: its reports, its label and how it ran."""

    def __init__(self, path):
        self.path = path
        if not os.path.lexists(path):
            raise Trouble(f"{D.show(path, 4096)}: no such directory")
        if not os.path.isdir(path):
            raise Trouble(f"{D.show(path, 4096)}: not a directory")
        try:
            found = D.experiments(path)
        except D.Trouble as e:
            raise Trouble(str(e)) from e
        if not found:
            raise Trouble(f"{D.show(path, 4096)}: not an output directory (no report .json in it)")
        self.reports = {}
        for name in sorted(found):
            try:
                self.reports[name] = D.load(*found[name])
            except D.Trouble as e:
                raise Trouble(str(e)) from e
        made = [r["kernel"] for r in self.reports.values()]
        kernels = sorted(set(made))
        if len({source_release(k) for k in kernels}) != 1:
            raise Trouble(f"{D.show(path, 4096)}: reports of {len(kernels)} kernels in one "
                          f"directory ({', '.join(D.show(k, 64) for k in kernels[:3])})")
        # one source built under several tags (the host's reference set, made on machines whose
        # builds differ only in their -vN tag): the column is the tag most reports ran on
        self.kernel = sorted(kernels, key=lambda k: (-made.count(k), k))[0]
        self.other_builds = [k for k in kernels if k != self.kernel]
        self.vm = vm_info(path)
        self.accel = (self.vm or {}).get("accel") or None
        self.label = self.kernel
        self.skips = {}

    def where(self):
        builds = "".join(f"; some reports on {D.show(k, 64)}, the same source"
                         for k in self.other_builds)
        if not self.accel:
            return "host" + builds
        vm = self.vm
        bits = [f"QEMU {self.accel} guest"]
        if vm.get("memory_mb"):
            bits.append(f"{vm['memory_mb']} MB")
        if vm.get("smp"):
            bits.append(f"{vm['smp']} CPU")
        return ", ".join(bits) + builds

    def missing(self, report, units):
        """Why report's .json is not here: the words of a "not run" cell."""
        if report in self.skips:
            return f"not run: {self.skips[report]}"
        for u in units.get(report, []):
            status = raw_status(self.path, u["unit"])
            if status:
                return f"not run: {status}"
        if self.accel and units.get(report) and not any(u["qemu"] for u in units[report]):
            why = "; ".join(u["qemu_why"] for u in units[report] if u.get("qemu_why"))
            return f"not run: host only (experiments/units: qemu no{': ' + why if why else ''})"
        return f"not run: no {report}.json here"


# ---- facts ---------------------------------------------------------------------------------------
# A fact: (key, label, kind, value).  key is its row's identity and anchor name (lower case,
# [a-z0-9_-]); kind says how values compare: "exact", "time" (seconds, a timing fact),
# "ms" (milliseconds, a timing fact), "schedule" (a list of times in s, a timing fact),
# "timed" (compared exactly, but what it counts depends on how fast the two ends ran: a timing
# fact too), "counter" (a delta, with the diff's counter tolerance).  value is a JSON value; None is shown
# as "none" (or "absent" for a sysctl).

TIMING = {"time", "ms", "schedule", "timed"}
NOT_LISTED = "not listed"     # a counter the probe printed no line for: it did not move


def slug(text):
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def get(obj, path, default=None):
    """obj["a"]["b"]... for path "a.b" (keys may not contain dots), default when any is missing."""
    for k in path.split("."):
        if not isinstance(obj, dict) or k not in obj:
            return default
        obj = obj[k]
    return obj


class Facts:
    """The facts of one report, in order."""

    def __init__(self, unit):
        self.unit, self.rows = unit, []

    def add(self, key, label, kind, value, floor=0, causes=()):
        self.rows.append({"key": slug(f"{self.unit}-{key}"), "label": label, "kind": kind,
                          "value": value, "floor": floor, "causes": list(causes)})

    def counters(self, where, label, counters, names, floor=0, causes=()):
        """Each of names from a counters object: its delta, "not listed" when the probe printed
        no line, "absent" (null) when this kernel has no such counter."""
        if not isinstance(counters, dict):
            return
        for name in names:
            v = counters.get(name, NOT_LISTED)
            if isinstance(v, dict):      # {"only": ..., "value": N}
                v = v.get("value")
            self.add(f"{where}-{name}", f"{label}{name}", "counter", v, floor,
                     list(causes) + [slug(name)])

    def run(self, where, label, run, causes=(), time=True):
        """What every p01 run has: TCP_SYNCNT, SYN retransmissions and their times, the schedule
        the sysctls predict, the outcome and the total time, the SYNs in its capture."""
        if not isinstance(run, dict):
            return
        if run.get("syncnt") is not None:
            self.add(f"{where}-syncnt", f"{label}TCP_SYNCNT", "exact", run["syncnt"])
        times = D.retransmit_times(run)
        if times is not None:
            self.add(f"{where}-syn-retransmissions", f"{label}SYN retransmissions", "exact",
                     len(times), causes=causes)
            if times:
                self.add(f"{where}-syn-schedule", f"{label}SYN retransmitted at (s)", "schedule",
                         times, causes=causes)
        if isinstance(run.get("expected"), list):
            self.add(f"{where}-expected-schedule", f"{label}expected retransmissions (s, from "
                     "the sysctls)", "exact", [round(x, 3) for x in run["expected"]],
                     causes=causes)
        if "result" in run or "errno" in run:
            self.add(f"{where}-outcome", f"{label}outcome (errno)", "exact", D.fmt_outcome(run),
                     causes=causes)
        if time and "elapsed_s" in run:
            self.add(f"{where}-total-time", f"{label}total time (s)", "time", run["elapsed_s"],
                     causes=causes)
        if isinstance(run.get("packets"), dict) and "syn_count" in run["packets"]:
            self.add(f"{where}-capture-syns", f"{label}SYNs in the capture", "exact",
                     run["packets"]["syn_count"], causes=causes)


def items(obj):
    return list(obj.items()) if isinstance(obj, dict) else []


# Counters that matter to each experiment (docs/<experiment>.md names them).
SYN_COUNTERS = ("TcpActiveOpens", "TcpAttemptFails", "TcpOutSegs", "TcpRetransSegs",
                "TcpExtTCPSynRetrans", "TcpExtTCPTimeouts", "TcpExtTCPAbortOnTimeout",
                "IpOutRequests", "IpOutTransmits")
CONNECT_COUNTERS = ("TcpActiveOpens", "TcpPassiveOpens", "TcpAttemptFails", "TcpOutRsts",
                    "TcpExtTW", "IpOutTransmits")
WIRE_COUNTERS = ("TcpAttemptFails", "TcpRetransSegs", "TcpExtTCPSynRetrans", "TcpOutRsts",
                 "IcmpInDestUnreachs", "IpOutTransmits")
QUEUE_COUNTERS = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPReqQFullDoCookies",
                  "TcpExtTCPReqQFullDrop", "TcpExtSyncookiesSent")
CLOSE_COUNTERS = ("TcpOutRsts", "TcpExtTCPAbortOnClose", "TcpExtTCPAbortOnData",
                  "TcpEstabResets")
# what docs/kernel-diff.md explains a fact under, where its heading is not named after the fact
SYN_BACKOFF = "the-linear-syn-backoff-linux-65"
DEFAULT_RUN = "the-default-tcp_syncnt-run-127-s-became-131-s"
COUNTERS_ADD = "what-the-counters-add"
READING = "reading-a-diff-what-is-kernel-and-what-is-not"
SYSCTL_CAUSES = {"tcp_syn_linear_timeouts": [SYN_BACKOFF], "tcp_rto_max_ms": [READING],
                 "tcp_max_tw_buckets": [READING], "tcp_max_syn_backlog": [READING]}
# sysctls the kernel sizes from the machine's memory at boot: the diff's list (the kernel
# source behind each is in docs/kernel-diff.md)
ENVIRONMENT = set(D.MEMORY_SYSCTLS)


def f_synretry(r, f):
    f.run("syncnt", "", r, [SYN_BACKOFF])
    f.counters("syncnt", "", r.get("counters"), SYN_COUNTERS, causes=[COUNTERS_ADD])
    d = r.get("default")
    if isinstance(d, dict):
        f.run("default", "default TCP_SYNCNT: ", d, [DEFAULT_RUN, SYN_BACKOFF])
        f.counters("default", "default TCP_SYNCNT: ", d.get("counters"), SYN_COUNTERS,
                   causes=[COUNTERS_ADD])
    else:
        f.add("default-run", "default TCP_SYNCNT run", "exact", "not run (default: null)")


def f_connect_time(r, f):
    for name, p in items(r.get("parts")):
        floor = D.COUNTER_PER_CONNECT * D.connects(p)
        f.add(f"{name}-n", f"{name}: connects", "exact", p.get("n"))
        f.add(f"{name}-outcome", f"{name}: outcome (errno)", "exact", D.fmt_outcome(p))
        f.add(f"{name}-errors", f"{name}: errors", "exact",
              ", ".join(f"{k} {v}" for k, v in sorted(items(p.get("errors")))) or "none")
        f.counters(name, f"{name}: ", p.get("counters"), CONNECT_COUNTERS, floor)


def f_timeout(r, f):
    for name in ("cc", "keep"):
        f.run(name, f"{name}: ", r.get(name), [SYN_BACKOFF])
        if isinstance(get(r, f"{name}.packets"), dict):   # null: collected before the capture
            f.add(f"{name}-syns-after-timeout", f"{name}: SYNs captured after its timeout",
                  "exact", get(r, f"{name}.packets.syns_after_timeout"), causes=[SYN_BACKOFF])
    f.add("keep-retransmits-after-timeout", "keep: SYN retransmissions after its timeout",
          "exact", r.get("keep_retransmits_after_timeout"), causes=[SYN_BACKOFF])


def f_strace(r, f):
    # not its times: under strace they measure strace (the diff does not compare them either)
    for name, p in items(r.get("parts")):
        f.run(name, f"{name}: ", p, time=False)


def f_parts_runs(counters_key, extra):
    def fn(r, f):
        for name, p in items(r.get("parts")):
            f.run(name, f"{name}: ", p)
            f.counters(name, f"{name}: ", p.get(counters_key), WIRE_COUNTERS)
            extra(name, p, f)
    return fn


def x_icmp(name, p, f):
    f.add(f"{name}-behaviour", f"{name}: what the ICMP did in SYN-SENT", "exact",
          p.get("behaviour"))


def x_rst(name, p, f):
    f.add(f"{name}-rst", f"{name}: the reset (dir, flags)", "exact",
          f"{get(p, 'rst.dir')} {get(p, 'rst.flags')}" if isinstance(p.get("rst"), dict) else None)


def x_synack(name, p, f):
    f.add(f"{name}-syns", f"{name}: SYNs sent", "exact", len(p.get("syns_ms") or []))
    f.add(f"{name}-synacks", f"{name}: SYN-ACKs the server sent", "exact",
          len(p.get("synacks_sent") or []))


def f_rst_middlebox(r, f):
    f_parts_runs("counters_client", x_rst)(r, f)
    for name, v in items(r.get("server_outrsts")):
        f.add(f"{name}-server-outrsts", f"{name}: server's TcpOutRsts", "counter", v)


def f_close_synsent_late(r, f):
    f.run("top", "", r)
    f.counters("client", "client: ", r.get("counters_client"), WIRE_COUNTERS)
    for k, words in (("late_synacks", "SYN-ACKs after close()"),
                     ("rst_follows_late_synack", "an RST answers the late SYN-ACK"),
                     ("socket_after_close", "sockets left after close()")):
        f.add(k, words, "exact", r.get(k))


def f_wire_connect(r, f):
    for name in ("wire", "loopback"):
        f.run(name, f"{name}: ", r.get(name))
        f.add(f"{name}-mss", f"{name}: MSS in SYN / SYN-ACK", "exact",
              f"{get(r, name + '.mss.syn')} / {get(r, name + '.mss.synack')}")


def f_wire_netem(r, f):
    f.run("top", "", r)
    f.add("syn-synack", "SYN to SYN-ACK (ms, netem delay "
          f"{r.get('delay_ms')} ms each way)", "ms", r.get("syn_synack_ms"))


def f_machine(r, f):
    f.add("hz", "HZ", "exact", r.get("hz"))


def f_accept_queue(r, f):
    for name, p in items(r.get("parts")):
        f.add(f"{name}-queued", f"{name}: queued (listen rq) / listen() backlog", "exact",
              f"{get(p, 'listen.rq')} / {p.get('listen_backlog_shown')}")
        f.add(f"{name}-connected", f"{name}: clients connected / not queued", "exact",
              f"{get(p, 'summary.connected')} / {get(p, 'summary.connected_not_queued')}")
        f.counters(name, f"{name}: server ", p.get("server_counters"), QUEUE_COUNTERS)


def f_small_writes(r, f):
    for name, p in items(r.get("parts")):
        if p.get("pattern") != "rr":
            continue
        f.add(f"{name}-stalls", f"{name}: requests over the delayed-ACK timer (of "
              f"{p.get('requests')})", "exact", p.get("requests_over_timer"))
        f.add(f"{name}-fast-first", f"{name}: fast requests before the first stall", "exact",
              p.get("fast_before_first_stall"))
        f.add(f"{name}-stall-ms", f"{name}: a stall's length, median (ms)", "ms",
              get(p, "timer_wait_ms.p50"))
    f.add("info-len", "tcp_info length, sock_diag (baseline client)", "exact",
          get(r, "parts.baseline.client_socket.info_len"))


def f_short_reads(r, f):
    for path, modes in items(r.get("paths")):
        for mode, m in items(modes):
            f.add(f"{path}-{mode}-calls", f"{path} {mode}: recv() calls, short ones not last",
                  "timed", f"{get(m, 'summary.calls')}, {get(m, 'summary.short_not_last')}")
    f.add("info-len", "tcp_info length, sock_diag (lo plain sender)", "exact",
          get(r, "paths.lo.plain.sock_diag.send.info_len"))


def f_full_buffers(r, f):
    for name, p in items(r.get("parts")):
        f.add(f"{name}-outcome", f"{name}: outcome (errno)", "exact", D.fmt_outcome(p))
        f.add(f"{name}-probes", f"{name}: zero-window probes", "exact", len(p.get("probes") or []))
        f.add(f"{name}-abort", f"{name}: abort within the expected window", "exact",
              get(p, "abort.within"))
        f.add(f"{name}-result-ms", f"{name}: send() ended after (ms)", "ms", p.get("result_ms"))


def f_close(r, f):
    f.add("timewait-len", "TIME-WAIT length (TCP_TIMEWAIT_LEN, ms)", "exact",
          r.get("tcp_timewait_len_ms"))
    for name, p in items(r.get("parts")):
        rst = get(p, "findings.rst")
        f.add(f"{name}-rst", f"{name}: RST on close (dir, flags)", "exact",
              f"{rst.get('dir')} {rst.get('flags')}" if isinstance(rst, dict) else "no RST")
        f.counters(name, f"{name}: ", p.get("counters"), CLOSE_COUNTERS)


def f_close_wait(r, f):
    for name, c in items(r.get("conns")):
        f.add(f"{name}-fin-wait2", f"{name}: FIN-WAIT-2 is a", "exact", get(c, "fin_wait2.kind"))
        f.add(f"{name}-fin-wait2-gone", f"{name}: FIN-WAIT-2 gone after (ms)", "ms",
              get(c, "fin_wait2.gone_ms"))
    for row in get(r, "after.close_wait") or []:
        if isinstance(row, dict):
            f.add(f"{row.get('conn')}-close-wait", f"{row.get('conn')}: peer in CLOSE-WAIT at the "
                  "end", "exact", row.get("state") == "CLOSE-WAIT")


def f_fin_wait2_timeout(r, f):
    for name, p in items(r.get("parts")):
        f.add(f"{name}-linger2", f"{name}: TCP_LINGER2 set / read back", "exact",
              ", ".join(f"{s.get('set')}/{s.get('read_back')}" for s in p.get("linger2_sets") or []))
        f.add(f"{name}-fin-time", f"{name}: FIN-WAIT-2 timer (ms, from the settings)", "exact",
              get(p, "fin_time.ms"))
        f.add(f"{name}-gone", f"{name}: FIN-WAIT-2 gone after (ms)", "ms",
              get(p, "fin_wait2.gone_ms"))
        f.add(f"{name}-rst", f"{name}: RSTs", "exact", len(p.get("rst_ms") or []))


def f_time_wait(r, f):
    for name, c in items(r.get("cases")):
        f.add(f"{name}-side", f"{name}: TIME-WAIT on the", "exact", c.get("timewait_side"))
        f.add(f"{name}-expires", f"{name}: timer armed for (ms)", "exact",
              c.get("timer_first_expires_ms"))
        f.add(f"{name}-lasted", f"{name}: TIME-WAIT lasted (ms)", "ms", c.get("lasted_ms"))


def f_port_exhaustion(r, f):
    f.add("reuse-rule", "tcp_tw_reuse: reusable after (ms)", "exact", get(r, "reuse_rule.delay_ms"))
    for name, p in items(r.get("parts")):
        f.add(f"{name}-outcome", f"{name}: outcome (errno)", "exact", D.fmt_outcome(p))
        f.add(f"{name}-failed", f"{name}: connects that failed", "exact",
              ", ".join(str(i) for i in p.get("failed") or []) or "none")
        f.add(f"{name}-takeovers", f"{name}: TIME-WAIT ports taken over", "exact",
              len(p.get("takeovers") or []))
    for name, b in items(r.get("bind")):
        f.add(f"{name}-bind", f"{name}: bind() with SO_REUSEADDR 0 / 1", "exact",
              f"{get(b, 'new.0.errno') or 'ok'} / {get(b, 'new.1.errno') or 'ok'}")


def f_connect_modes(r, f):
    f.add("windows-stall", "the Windows-like stall seen", "exact",
          get(r, "verdict.windows_stall_seen"))


def f_accept_path(r, f):
    for name in ("burst", "steady"):
        f.counters(name, f"{name}: ", get(r, f"phases.{name}.counters"),
                   ("TcpExtListenOverflows", "TcpExtTCPReqQFullDoCookies"),
                   floor=D.COUNTER_PER_CONNECT * (get(r, f"phases.{name}.client.requests") or 0))


def f_poll_scaling(r, f):
    f.add("select-refused-at-k", "select() refused at K", "exact", r.get("select_refused_at_k"))


def f_tls(r, f):
    k = r.get("ktls") or {}
    f.add("ulp-probe", 'kernel TLS: setsockopt(TCP_ULP, "tls") on an unconnected socket', "exact",
          f"{k.get('ret')} {k.get('errno')}", causes=["p08-tls-ktls"])
    for p in r.get("ktls_parts") or []:
        name = p.get("part")
        for side in ("client", "server"):
            s = p.get(side) or {}
            f.add(f"{name}-{side}-moved", f"{name}: {side}: send / recv in the kernel", "exact",
                  f"{s.get('send')}/{s.get('recv')}", causes=["p08-tls-ktls"])
            # with its TLS details: a sample in the close may show the ULP's name alone, the
            # context already gone (tls_tx none), as the report's own cross-check leaves out
            on = [u for u in s.get("ulp_states") or [] if u.get("ulp") == "tls"
                  and u.get("tls_tx") not in (None, "none")]
            f.add(f"{name}-{side}-ulp", f"{name}: {side}: the ULP's TLS details sock_diag last "
                  "showed", "exact",
                  " ".join(f"{x}={on[-1].get(x)}" for x in ("tls_version", "tls_cipher", "tls_tx",
                                                            "tls_rx")) if on else None,
                  causes=["p08-tls-ktls"])
            f.add(f"{name}-{side}-stats", f"{name}: {side}: tls_stat counters listed", "exact",
                  len(s.get("tls_stat_after") or {}), causes=["p08-tls-tls-stat"])
    rec = r.get("records") or {}
    for p in rec.get("parts") or []:
        if isinstance(p, dict) and p.get("part") == "record":
            f.add("record-record", "records: one 16 KiB SSL_write(): the records' lengths",
                  "exact", " ".join(str(x.get("length")) for x in p.get("records") or []))
            f.add("record-segments", "records: the segments that carried it", "exact",
                  len(p.get("segments") or []))
    for p in rec.get("stall") or []:
        f.add(f"{p.get('part')}-delayed-acks",
              f"records, {p.get('part')}: server DelayedACKs, {p.get('requests')} requests",
              "exact", get(p, "delayed_acks.server"))


def named(obj):
    """A report's parts, a dict by name or a list of dicts that carry their name."""
    if isinstance(obj, list):
        return [(p.get("name"), p) for p in obj if isinstance(p, dict)]
    return items(obj)


def f_pools(r, f):
    # the parts that reuse the connection (part check closes it instead, and its server's
    # state is sampled while the client's close is on its way: a timing, not a fact)
    for name, p in named(get(r, "p09-stale-reuse.parts")):
        if "read2_ret" not in p:
            continue
        f.add(f"{name}-server-state", f"{name}: the server's socket before the reuse", "exact",
              p.get("server_state_before"))
        f.add(f"{name}-errors", f"{name}: the read after the reuse / the write after it", "exact",
              f"{p.get('read2_errno') if p.get('read2_ret') == -1 else p.get('read2_ret')} / "
              f"{p.get('write3_errno') if p.get('write3_ret') == -1 else p.get('write3_ret')}")
    ka = r.get("p09-keepalive") or {}
    if ka:
        probes = ka.get("probes")
        f.add("keepalive-probes", "keepalive: probes before the reset",
              "exact", len(probes) if isinstance(probes, list) else probes)
        f.add("keepalive-error", "keepalive: the blocked read's error", "exact",
              get(ka, "final_read.errno"))
    for name, p in named(get(r, "p09-pool-saves.parts")):
        if "syns" in p:
            f.add(f"{name}-syns", f"{name}: SYNs for {p.get('requests')} requests", "exact",
                  p.get("syns"))
            f.add(f"{name}-timewait", f"{name}: TIME-WAIT sockets left on the client", "exact",
                  p.get("timewait"))
    # p09-curl-nginx: what libcurl did with its cached connection and what the wire carried; not
    # the count of nginx's FINs (a lost FIN is sent again when the client is slow: a timing)
    for name, p in named(get(r, "p09-curl-nginx.parts")):
        if "requests" not in p:
            continue
        f.add(f"curl-{name}-connects", f"curl {name}: CURLINFO_NUM_CONNECTS of each request",
              "exact", " ".join(str(q.get("connects")) for q in p.get("requests") or []))
        f.add(f"curl-{name}-wire", f"curl {name}: connections / SYNs / RSTs on the wire", "exact",
              f"{len(p.get('connections') or [])} / {p.get('syns')} / {p.get('rsts')}")
        if "client_state_before" in p:
            f.add(f"curl-{name}-states", f"curl {name}: the client's / nginx's socket before the "
                  "next request", "exact",
                  f"{p.get('client_state_before')} / {p.get('server_state_before')}")


def f_names(r, f):
    """p07-names: per part of p07-localhost the answers' order, what each connect() met and the
    RSTs; the dead nameserver's queries and wait; each p07-dns-truncated part's TC answers and
    TCP connections to port 53; the SYNs each p07-happy-eyeballs part sent to the silent [::1]
    (the SYN schedule: the linear backoff) and what the one-after-another client's connect()
    to it returned."""
    for name, p in items(r.get("parts")):
        f.add(f"{name}-order", f"{name}: getaddrinfo()'s answers, in order", "exact",
              " ".join(str(a.get("addr")) for a in p.get("answers") or []))
        f.add(f"{name}-attempts", f"{name}: each connect() (errno)", "exact",
              ", ".join(f"{a.get('addr')} {a.get('errno') if a.get('ret') else 'ok'}"
                        for a in p.get("attempts") or []))
        f.add(f"{name}-rsts", f"{name}: RSTs in the capture", "exact", p.get("rsts"))
    dns = r.get("dns")
    if isinstance(dns, dict):
        f.add("dns-queries", "dns-dead-first: queries to the dead / the live server", "exact",
              f"{dns.get('queries_to_dead')} / {dns.get('queries_to_live')}")
        f.add("dns-wait", "dns-dead-first: the wait on the dead server (ms)", "ms",
              dns.get("dead_wait_ms"))
    for name, p in named(get(r, "truncated.parts")):
        f.add(f"truncated-{name}-tc", f"dns-truncated, {name}: answers with TC / TCP "
              "connections to port 53", "exact",
              f"{p.get('truncated')} / {p.get('tcp_connections')}")
    for name, p in named(get(r, "happy_eyeballs.parts")):
        syns = p.get("syns_v6_ms")
        f.add(f"he-{name}-syns", f"happy-eyeballs, {name}: SYNs to [::1]", "exact",
              len(syns) if isinstance(syns, list) else None, causes=[SYN_BACKOFF])
        if name == "sequential":
            f.add(f"he-{name}-v6", f"happy-eyeballs, {name}: connect([::1])", "exact",
                  ((p.get("attempts") or [{}])[0] or {}).get("errno"))


EXTRACT = {
    "p01-machine": f_machine, "p01-synretry": f_synretry, "p01-connect-time": f_connect_time,
    "p01-timeout": f_timeout, "p01-strace": f_strace,
    "p01-icmp-unreachable": f_parts_runs("counters_client", x_icmp),
    "p01-synack-lost": f_parts_runs("counters", x_synack),
    "p01-rst-middlebox": f_rst_middlebox, "p01-close-synsent-late": f_close_synsent_late,
    "p01-wire-connect": f_wire_connect, "p01-wire-netem": f_wire_netem,
    "p02-accept-queue": f_accept_queue, "p03-small-writes": f_small_writes,
    "p04-short-reads": f_short_reads, "p04-full-buffers": f_full_buffers,
    "p05-close": f_close, "p05-close-wait": f_close_wait,
    "p05-fin-wait2-timeout": f_fin_wait2_timeout, "p06-time-wait": f_time_wait,
    "p06-port-exhaustion": f_port_exhaustion, "connect-modes": f_connect_modes,
    "p07-names": f_names, "p08-tls": f_tls, "p09-pools": f_pools,
    "accept-path": f_accept_path, "poll-scaling": f_poll_scaling,
}


def report_facts(name, report):
    f = Facts(name)
    fn = EXTRACT.get(name)
    if fn is None:          # a report the matrix does not know: what every run has
        fn = lambda r, f: f.run("top", "", r)  # noqa: E731
    fn(report, f)
    return f.rows


def skipped(report):
    """The reason a report gives for not having run (p01-wire-netem's "skipped": no sch_netem),
    or None."""
    if not isinstance(report, dict):
        return None
    why = report.get("skipped")
    if isinstance(why, str) and why:
        return D.show(why if why.startswith("skipped") else f"skipped: {why}", 200)
    return None


def sysctl_facts(col):
    """Every top-level sysctl any report of the column recorded: p01-machine's first, then the
    others' in name order (a sysctl two reports disagree on keeps p01-machine's, or the first)."""
    out = {}
    names = sorted(col.reports, key=lambda n: (n != "p01-machine", n))
    for name in names:
        for k, v in items(col.reports[name].get("sysctls")):
            out.setdefault(k, (v, name))
    return out


# ---- the matrix ----------------------------------------------------------------------------------

def fmt(v, kind="exact", sysctl=False):
    if v is None:
        return "absent" if sysctl or kind == "counter" else "none"
    if v == "":
        return "(empty)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if kind == "schedule":
        return ", ".join(f"{x:.2f}" for x in v)
    if kind == "time" and D.is_number(v):
        return f"{v:.3f}"
    if kind == "ms" and D.is_number(v):
        return f"{v:.1f}"
    if kind == "counter" and isinstance(v, int) and not isinstance(v, bool):
        return f"{v:+d}"
    if isinstance(v, list):
        return " ".join(fmt(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def same(kind, a, b, floor):
    """Whether two values of one fact agree, by the diff's tolerances."""
    if kind == "counter":
        a = 0 if a == NOT_LISTED else a
        b = 0 if b == NOT_LISTED else b
        if D.is_number(a) and D.is_number(b):
            return D.close_counts(a, b, floor)
    elif kind == "schedule" and isinstance(a, list) and isinstance(b, list):
        return not D.schedule_differs(a, b)
    elif kind in ("time", "ms") and D.is_number(a) and D.is_number(b):
        scale = 1.0 if kind == "time" else 1e-3
        return D.close_times(a * scale, b * scale)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def doc_anchors(path):
    """The anchors of a Markdown page: each heading's GitHub slug, and <a id|name="...">."""
    try:
        text = D.read_regular(path, True, 4 << 20).decode("utf-8", "replace")
    except D.Trouble:
        return set()
    anchors, fence = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            title = re.sub(r"`", "", m.group(1)).lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
        for a in re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
            anchors.add(a)
    return anchors


def explain(candidates, anchors):
    """The first anchor of the page a fact's candidates name: the candidate itself, or a heading
    that starts with it and a hyphen ("tcp_rto_min_us" -> "tcp_rto_min_us-linux-611")."""
    for c in candidates:
        if c in anchors:
            return c
        longer = sorted(a for a in anchors if a.startswith(c + "-"))
        if longer:
            return longer[0]
    return None


def build(paths, doc=DIFF_DOC):
    """The matrix of the directories as a dict (what matrix.json holds)."""
    cols = [Column(p) for p in paths]
    labels = [c.label for c in cols]
    if len(set(labels)) != len(labels):     # two runs of one kernel: name them by directory
        for c in cols:
            c.label = D.show(os.path.basename(os.path.normpath(c.path)), 80) or c.kernel
    units = unit_table()
    anchors = doc_anchors(doc)
    rows, order = {}, []

    def row(key, group, label, kind, floor=0, causes=(), env=False):
        if key not in rows:
            rows[key] = {"key": key, "group": group, "label": label, "kind": kind,
                         "floor": floor, "causes": list(causes), "environment": env,
                         "cells": [None] * len(cols)}
            order.append(key)
        return rows[key]

    # sysctls first, by name
    per_col = [sysctl_facts(c) for c in cols]
    for name in sorted(set().union(*per_col)):
        readers = sorted({f[name][1] for f in per_col if name in f})
        short = name.rsplit(".", 1)[-1]
        r = row(slug(short) if short == slug(short) else slug(name), "sysctls", name, "exact",
                causes=[slug(short)] + SYSCTL_CAUSES.get(short, []), env=name in ENVIRONMENT)
        for i, facts in enumerate(per_col):
            if name in facts:
                v, src = facts[name]
                r["cells"][i] = {"state": "value", "value": v, "text": fmt(v, sysctl=True),
                                 "source": src}
            else:
                r["cells"][i] = {"state": "not recorded",
                                 "text": f"not recorded (by {', '.join(readers)})"}
    # then each report, in the unit table's order, then any other
    known = list(dict.fromkeys(list(units) + sorted(set().union(*(c.reports for c in cols)))))
    names = [n for n in known if any(n in c.reports for c in cols)]
    for name in names:
        per = [report_facts(name, c.reports[name]) if name in c.reports else None for c in cols]
        for i, c in enumerate(cols):
            why = skipped(c.reports.get(name))
            if why:
                per[i], c.skips[name] = None, why
        for facts in per:
            for f in facts or []:
                row(f["key"], name, f["label"], f["kind"], f["floor"],
                    [f["key"]] + f["causes"])
        for i, (c, facts) in enumerate(zip(cols, per)):
            got = {f["key"]: f for f in facts or []}
            for key in order:
                r = rows[key]
                if r["group"] != name:
                    continue
                if facts is None:
                    r["cells"][i] = {"state": "not run", "text": c.missing(name, units)}
                elif key in got:
                    v = got[key]["value"]
                    cell = {"state": "value", "value": v, "text": fmt(v, r["kind"])}
                    if r["kind"] in TIMING and c.accel:
                        cell["emulated"] = c.accel
                        cell["text"] += DAGGER
                    r["cells"][i] = cell
                else:
                    r["cells"][i] = {"state": "not recorded", "text": "not recorded"}
    # a counter no column listed says nothing: it did not move anywhere
    order = [k for k in order if not (rows[k]["kind"] == "counter" and all(
        c["state"] != "value" or c["value"] == NOT_LISTED for c in rows[k]["cells"]))]
    # marks and explanations
    for key in order:
        r = rows[key]
        vals = [c["value"] for c in r["cells"] if c["state"] == "value"]
        r["compared"] = len(vals)
        r["changed"] = len(vals) >= 2 and any(
            not same(r["kind"], a, b, r["floor"]) for a in vals for b in vals)
        r["timing"] = r["kind"] in TIMING
        anchor = explain(r["causes"], anchors) if r["changed"] else None
        r["explanation"] = f"{DIFF_DOC_REL}#{anchor}" if anchor else (
            "unexplained" if r["changed"] else None)
        for k in ("causes", "floor"):
            del r[k]
    out_rows = [rows[k] for k in order]
    return {
        "schema": MATRIX_SCHEMA,
        "columns": [{"label": c.label, "kernel": c.kernel, "dir": os.path.normpath(c.path),
                     "where": c.where(), "accel": c.accel,
                     "package": (c.vm or {}).get("package")} for c in cols],
        "explanations": DIFF_DOC_REL,
        "rows": out_rows,
        "changed": sum(r["changed"] for r in out_rows),
        "unexplained": [r["key"] for r in out_rows if r["explanation"] == "unexplained"],
    }


# ---- rendering -----------------------------------------------------------------------------------

def mark(r):
    if r["changed"]:
        return "!" if r["explanation"] == "unexplained" else "*"
    return " " if r["compared"] >= 2 else "-"


def notes(m):
    n = len(m["columns"])
    emu = [c["label"] for c in m["columns"] if c["accel"]]
    out = [f"tcplab matrix: {len(m['rows'])} facts, {n} kernels, {m['changed']} rows change "
           f"({len(m['unexplained'])} unexplained)"]
    for i, c in enumerate(m["columns"]):
        # the directory as the user named it, on one line whatever bytes its name holds
        out.append(f"  column {i + 1}: {c['label']}  ({c['where']}; {D.show(c['dir'], 4096)})")
    out.append("  * changes, explained in the docs/kernel-diff.md anchor named at the end of the "
               "row;  ! changes, unexplained so far;  - in one column only")
    if emu:
        out.append(f"  {DAGGER} a timing measured in a QEMU guest ({', '.join(emu)}): TCG "
                   "emulation, see vm.txt; compare it with care")
    out.append("  environment: a sysctl sized from the machine's memory, not by the kernel")
    return out


def render_txt(m):
    lines = notes(m) + [""]
    labels = [r["label"] + ("  (environment)" if r["environment"] else "") for r in m["rows"]]
    lw = min(max(len(x) for x in labels), 64)
    widths = [max([len(c["label"])] + [len(r["cells"][i]["text"]) for r in m["rows"]])
              for i, c in enumerate(m["columns"])]
    widths = [min(w, 48) for w in widths]
    head = "  " + "fact".ljust(lw) + "  " + "  ".join(c["label"].ljust(w) for c, w in
                                                     zip(m["columns"], widths))
    group = None
    for r, label in zip(m["rows"], labels):
        if r["group"] != group:
            group = r["group"]
            lines += ["", group, head.rstrip()]
        cells = "  ".join(r["cells"][i]["text"].ljust(w) for i, w in enumerate(widths))
        expl = f"  {r['explanation']}" if r["explanation"] else ""
        lines.append(f"{mark(r)} {label.ljust(lw)}  {cells}{expl}".rstrip())
    return "\n".join(lines) + "\n"


def wrap(text, width):
    """Lines of at most width characters, broken after ", ", a blank or a hyphen if possible."""
    out = []
    while len(text) > width:
        cut = max(text.rfind(", ", 0, width), text.rfind(" ", 0, width),
                  text.rfind("-", 0, width))
        cut = cut + 1 if cut > 0 else width
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    return out + [text]


def render_svg(m):
    """A table for a projector: 1280 px wide, 15 px text, changed rows highlighted."""
    W, PAD, LH = 1280, 8, 18
    n = len(m["columns"])
    label_w, expl_w = 330, 250
    col_w = (W - 2 * PAD - label_w - expl_w - 20) // n
    # DejaVu Sans Mono advances 1233/2048 em: 8.43 px a character at 14 px (a browser's layout,
    # tests/test_pictures_browser.py, found 8.2 too small: the host's column head ran into the
    # next column, and a note 1551 px long left the picture)
    cw = 14 * 1233 / 2048
    font = "font-family='DejaVu Sans Mono, monospace' font-size='14'"
    body, y = [], PAD
    for note in notes(m):
        # a long note wrapped, its continuation lines indented under its text
        indent = len(note) - len(note.lstrip(" ")) + 2
        for j, line in enumerate(wrap(note, int((W - 2 * PAD) / cw) - indent)):
            y += LH
            body.append(f"<text x='{PAD + (indent * cw if j else 0):.1f}' y='{y}' {font}>"
                        f"{escape(line)}</text>")
    y += 10
    x_cols = [PAD + 20 + label_w + i * col_w for i in range(n)]
    x_expl = PAD + 20 + label_w + n * col_w
    heads = [wrap(c["label"], int(col_w / cw) - 1) + wrap(c["where"].split(",")[0],
                                                          int(col_w / cw) - 1)
             for c in m["columns"]]
    HH = LH * max(len(h) for h in heads) + 8

    def header(y):
        parts = [f"<rect x='0' y='{y}' width='{W}' height='{HH}' fill='#223'/>",
                 f"<text x='{PAD + 20}' y='{y + LH}' {font} fill='white' "
                 "font-weight='bold'>fact</text>"]
        for x, lines in zip(x_cols, heads):
            for j, line in enumerate(lines):
                parts.append(f"<text x='{x}' y='{y + LH * (j + 1)}' {font} fill='white' "
                             f"font-weight='bold'>{escape(line)}</text>")
        parts.append(f"<text x='{x_expl}' y='{y + LH}' {font} fill='white' "
                     "font-weight='bold'>explanation</text>")
        return parts

    group = None
    for r in m["rows"]:
        if r["group"] != group:
            group = r["group"]
            y += 10
            body.append(f"<text x='{PAD}' y='{y + LH}' {font.replace('14', '17')} "
                        f"font-weight='bold'>{escape(group)}</text>")
            y += LH + 4
            body += header(y)
            y += HH
        label = r["label"] + (" (environment)" if r["environment"] else "")
        cells = [wrap(c["text"], int(col_w / cw) - 1) for c in r["cells"]]
        llines = wrap(label, int(label_w / cw) - 1)
        elines = wrap("#" + r["explanation"].split("#", 1)[1], int(expl_w / cw) - 1) \
            if r["explanation"] and "#" in r["explanation"] else []
        h = LH * max([len(llines), len(elines)] + [len(c) for c in cells]) + 4
        fill = None
        if r["changed"]:
            fill = "#ffd9a8" if r["explanation"] == "unexplained" else "#fff2a8"
        if fill:
            body.append(f"<rect x='0' y='{y}' width='{W}' height='{h}' fill='{fill}'/>")
        body.append(f"<line x1='0' y1='{y + h}' x2='{W}' y2='{y + h}' stroke='#ccc'/>")
        body.append(f"<text x='{PAD}' y='{y + LH - 2}' {font} font-weight='bold'>"
                    f"{escape(mark(r).strip())}</text>")
        for j, line in enumerate(llines):
            body.append(f"<text x='{PAD + 20}' y='{y + LH * (j + 1) - 2}' {font}>"
                        f"{escape(line)}</text>")
        for x, cell, lines in zip(x_cols, r["cells"], cells):
            style = " fill='#777' font-style='italic'" if cell["state"] != "value" else ""
            for j, line in enumerate(lines):
                body.append(f"<text x='{x}' y='{y + LH * (j + 1) - 2}' {font}{style}>"
                            f"{escape(line)}</text>")
        if r["explanation"] == "unexplained":
            body.append(f"<text x='{x_expl}' y='{y + LH - 2}' {font} fill='#a00' "
                        "font-weight='bold'>unexplained</text>")
        elif r["explanation"]:
            body.append(f"<a href='../{escape(r['explanation'])}'>")
            for j, line in enumerate(elines):
                body.append(f"<text x='{x_expl}' y='{y + LH * (j + 1) - 2}' {font} "
                            f"fill='#0645ad' text-decoration='underline'>{escape(line)}</text>")
            body.append("</a>")
        y += h
    y += PAD
    return (f"<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' "
            f"width='{W}' height='{y}' viewBox='0 0 {W} {y}'>\n"
            f"<rect x='0' y='0' width='{W}' height='{y}' fill='white'/>\n"
            + "\n".join(body) + "\n</svg>\n")


def write(m, out):
    files = {os.path.join(out, "matrix.txt"): render_txt(m),
             os.path.join(out, "matrix.json"): tcplab.dumps(m),
             os.path.join(out, "matrix.svg"): render_svg(m)}
    if os.path.lexists(out) and not os.path.isdir(out):
        raise Trouble(f"{D.show(out, 4096)}: not a directory")
    try:
        tcplab.atomic_write_all(files)
    except OSError as e:
        raise Trouble(f"{D.show(e.filename or out, 4096)}: {e.strerror}") from e
    return list(files)


# ---- driving -------------------------------------------------------------------------------------

USAGE = "usage: tcplab_matrix.py [--out DIR] DIR DIR [DIR...]  (or: ./run.sh matrix ...)"


def main(argv):
    # run.sh says where its outputs are (an installed tcplab: outputs/ of the current directory)
    args, out = argv[1:], os.environ.get("TCPLAB_OUTPUTS") or os.path.join(TOP, "outputs")
    if args in (["-h"], ["--help"]):
        print(USAGE)
        return EXIT_OK
    pairs, dirs, unknown = tcplab.tool_words(args, ("--out",))
    for _, value in pairs:
        if not value:
            return usage("--out needs a directory")
        out = value
    if unknown is not None:
        return usage(f"unknown option '{D.show(unknown, 40)}'")
    if len(dirs) < 2:
        return usage(f"want two or more output directories, got {len(dirs)}")
    read = own_input(out, dirs)
    if read is not None:
        # its matrix.json would be read as a report by the next matrix or diff of that directory
        return usage(f"--out {D.show(out, 4096)}: it is {D.show(read, 4096)}, one of the "
                     "directories the matrix reads; write it elsewhere")
    try:
        m = build(dirs)
        for path in write(m, out):
            print(path)
    except Trouble as e:
        return trouble(e)
    except tcplab.RawError as e:
        return trouble(e)
    except OSError as e:
        return trouble(f"{D.show(e.filename or out, 4096)}: {e.strerror}")
    return EXIT_OK


def own_input(out, dirs):
    """The DIR of dirs that out is (the same directory, by any path), or None."""
    for d in dirs:
        try:
            if os.path.samefile(out, d):
                return d
        except OSError:       # one of them is not there: not the same directory
            continue
    return None


def usage(why):
    print(f"tcplab_matrix.py: {why}; {USAGE}", file=sys.stderr)
    return EXIT_USAGE


def trouble(text):
    print(f"tcplab_matrix.py: {text}", file=sys.stderr)
    return EXIT_DATA


if __name__ == "__main__":
    sys.exit(tcplab.tool_main(main, "tcplab_matrix.py", EXIT_DATA))
