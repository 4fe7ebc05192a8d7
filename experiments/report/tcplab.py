"""tcplab.py — what the report scripts and tests share: raw-file readers that refuse what they
cannot read (one rule for numbers, regular files of bounded size only), the header line, the
load average, the kernel's SYN retransmission schedule, and atomic writing of the .txt/.json
pair (strict JSON: no NaN or Infinity).  Standard library only."""
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

# experiments/runner/: tcplab_units, the unit table's one parser (docs/design.md, "Layout")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runner"))
import tcplab_units  # noqa: E402

SCHEMA = 2

# Bounds on raw input: a raw file is a program's output of one unit (the largest committed one
# is about 200 KB); anything far beyond is not a tcplab raw file, and no loop may run unbounded.
MAX_RAW_BYTES = 64 << 20
MAX_INT = 2 ** 63 - 1             # what the C programs print at most (int64)
MAX_FLOAT = 1e18
MAX_TCP_SYNCNT = 127              # include/net/tcp.h: TCP_SYNCNT and tcp_syn_retries stop there


class RawError(Exception):
    """A raw file is missing or does not say what the report needs: the message names the file
    and the field."""


class _Missing:
    pass


MISSING = _Missing()


def kv(line):
    """`key=value key=value` → dict of strings (tokens without '=' are skipped)."""
    out = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


_INT = re.compile(r"[+-]?[0-9]{1,20}\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,40}\.?[0-9]{0,40}|\.[0-9]{1,40})(?:[eE][+-]?[0-9]{1,3})?\Z")


def num(text, where="value", lo=None, hi=None):
    """The one rule for a number in a raw file: an integer when written as one, otherwise a
    finite decimal; NaN, Infinity, values beyond int64 or 1e18 and anything outside [lo, hi]
    are refused (RawError naming `where`)."""
    s = text if isinstance(text, str) else str(text)
    if _INT.match(s):
        v = int(s)
        if abs(v) > MAX_INT:
            raise RawError(f"{where}: {s[:40]} is out of range")
    elif _FLOAT.match(s):
        v = float(s)
        if not math.isfinite(v) or abs(v) > MAX_FLOAT:
            raise RawError(f"{where}: {s[:40]} is out of range")
    else:
        raise RawError(f"{where}: {s[:40]!r} is not a number")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise RawError(f"{where}: {s[:40]} is outside {lo}..{hi}")
    return v


FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode):
    for test, name in FILE_KINDS:
        if test(mode):
            return name
    return "not a regular file"


class NotRegular(ValueError):
    """A path regular_bytes() refused: not a regular file, or larger than its cap."""


def regular_bytes(path, cap, follow=True):
    """The bytes of a regular file of at most cap bytes: the one reader of outside files for the
    reports and the diff.  Never blocks (O_NONBLOCK: a FIFO opens at once and fstat() refuses
    it), follows a symlink only when follow (O_NOFOLLOW otherwise), never reads more than
    cap + 1 bytes (a /dev/zero is refused before its first byte).  Raises NotRegular, or OSError
    from open/read."""
    st = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(f"{file_kind(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY |
                 (0 if follow else os.O_NOFOLLOW))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{file_kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            raise NotRegular(f"{st.st_size} bytes, larger than {cap} bytes")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, cap + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise NotRegular(f"larger than {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, optional=False):
    """A raw file's text.  Only a regular file of at most MAX_RAW_BYTES is read (a FIFO, a
    device, a directory is refused without blocking); None for a missing optional file."""
    try:
        data = regular_bytes(path, MAX_RAW_BYTES)
    except FileNotFoundError:
        if optional:
            return None
        raise RawError(f"{path}: missing") from None
    except NotRegular as e:
        raise RawError(f"{path}: {e}") from None
    except OSError as e:
        raise RawError(f"{path}: {e.strerror}") from None
    if b"\0" in data:
        raise RawError(f"{path}: binary data (a NUL byte), not a program's text output")
    if data and not data.endswith(b"\n"):
        # every tcplab program ends each line: a file without it was cut mid-line
        raise RawError(f"{path}: the last line is cut off (no newline at the end)")
    return data.decode("utf-8", errors="replace")


def read_lines(path, optional=False):
    text = read_text(path, optional)
    return None if text is None else text.splitlines()


def exists(path):
    """Whether an optional raw file is there (a dangling link counts as there: reading it fails)."""
    return os.path.lexists(path)


class Fields(dict):
    """The key=value fields of one raw line (or of a whole file), which know where they came
    from: typed getters raise RawError naming the file and the field."""

    def __init__(self, path, d=()):
        super().__init__(d)
        self.path = path

    def str(self, key, default=MISSING):
        if key in self:
            return self[key]
        if default is MISSING:
            raise RawError(f"{self.path}: no {key}=")
        return default

    def num(self, key, lo=None, hi=None, default=MISSING):
        if key not in self:
            if default is MISSING:
                raise RawError(f"{self.path}: no {key}=")
            return default
        return num(self[key], f"{self.path}: {key}", lo, hi)

    def int(self, key, lo=0, hi=None, default=MISSING):
        v = self.num(key, lo, hi, default)
        if v is not None and v is not default and not isinstance(v, int):
            raise RawError(f"{self.path}: {key}: {self[key][:40]} is not an integer")
        return v

    def float(self, key, lo=0, hi=None, default=MISSING):
        v = self.num(key, lo, hi, default)
        return v if v is None or v is default else float(v)


def numbers(d, strings=()):
    """Fields → dict whose values are numbers by num()'s rule, except the keys in `strings`."""
    return {k: v if k in strings else num(v, f"{d.path}: {k}") for k, v in d.items()}


def tcpevents_missed(end):
    """tcpevents' end line (Fields) → its missed= count: the events the kernel ran no program
    for, that program already running on the CPU (recursion misses); or None: "-" (a kernel
    before 5.12 does not count them) or no missed= at all (a tcpevents before it counted)."""
    return None if end.str("missed", default="-") == "-" else end.int("missed")


def tcpevents_unseen(end):
    """tcpevents' end line (Fields) → its unseen= count: tracepoint hits the kernel ran none of
    its programs for with no recursion miss counted (docs/tcpevents.md, "A retransmission
    missed under load"); or None: "-" (no perf counter of the tracepoints there) or no unseen=
    at all (a tcpevents before it counted)."""
    return None if end.str("unseen", default="-") == "-" else end.int("unseen")


def tcpevents_short(what, seen, counter, delta, missed, unseen=None):
    """count_check's text (tcplab_pkt) for tcpevents' count beside a counter, and when the
    kernel counted events it ran no program for, those figures too."""
    if delta is None or seen == delta:
        return None
    return (f"{what}: tcpevents has {seen}, {counter} {delta:+d}"
            + (f"; tcpevents missed={missed} (events the kernel ran no program for)"
               if missed else "")
            + (f"; tcpevents unseen={unseen} (tracepoint hits, any socket's, the kernel ran no "
               "program for, no recursion counted)" if unseen else ""))


def read_kv_lines(path, prefix=None, optional=False):
    """Every line of a raw file parsed as key=value; with prefix, only lines starting with it."""
    lines = read_lines(path, optional)
    if lines is None:
        return None
    return [Fields(path, kv(line)) for line in lines if prefix is None or line.startswith(prefix)]


def read_kv(path, optional=False):
    """All key=value pairs of a file merged into one Fields (later lines win)."""
    lines = read_kv_lines(path, optional=optional)
    if lines is None:
        return None
    out = Fields(path)
    for d in lines:
        out.update(d)
    return out


def one_line(path, prefix):
    """The first line of a raw file that starts with prefix, as Fields; RawError if none."""
    for line in read_lines(path):
        if line.startswith(prefix):
            return Fields(path, kv(line))
    raise RawError(f"{path}: no line starting {prefix.strip()!r}")


def read_line_values(path, optional=False):
    """A file of `key=value` lines whose values may hold spaces (vm.txt): {key: rest of line}."""
    lines = read_lines(path, optional)
    if lines is None:
        return None
    out = {}
    for line in lines:
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def read_sysctl_file(path, need=()):
    """A collect script's sysctls file, `net.X.Y=VALUE` per line, VALUE `absent` where the
    kernel has no such sysctl → {name: value string, or None when absent}.  Any other line is
    refused (a truncated or foreign file), and so is a file without a name in `need`."""
    out = {}
    for i, line in enumerate(read_lines(path), 1):
        name, sep, val = line.partition("=")
        if not sep or not re.fullmatch(r"net\.[a-z0-9_.]+", name):
            raise RawError(f"{path}: line {i}: `{line[:60]}` is not net.X.Y=VALUE")
        out[name] = None if val == "absent" else val
    for name in need:
        if name not in out:
            raise RawError(f"{path}: no {name}=")
    return out


def read_counters_delta(path, need=()):
    """A `counters -d` output → {name: int delta, or None when the counter is absent}.
    A counter on one side only (`Name only-now V`) reads as {"only": "now", "value": V}.
    A line of another form is refused: a truncated or foreign file is not a delta; so is an
    empty one (`counters -d -k` always prints the counters it was asked to keep), and one
    without a counter in `need` (the counters the report prints)."""
    out = {}
    for i, line in enumerate(read_lines(path), 1):
        parts = line.split()
        where = f"{path}: line {i}"
        if len(parts) == 2 and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", parts[0]):
            if parts[1] == "absent":
                out[parts[0]] = None
            else:
                v = num(parts[1], f"{where} {parts[0]}")
                if not isinstance(v, int):
                    raise RawError(f"{where} {parts[0]}: {parts[1][:40]} is not an integer")
                out[parts[0]] = v
        elif len(parts) == 3 and parts[1] in ("only-now", "only-before"):
            v = num(parts[2], f"{where} {parts[0]}")
            if not isinstance(v, int):
                raise RawError(f"{where} {parts[0]}: {parts[2][:40]} is not an integer")
            out[parts[0]] = {"only": parts[1][5:], "value": v}
        elif parts:
            raise RawError(f"{where}: not `Name delta`")
    if not out:
        raise RawError(f"{path}: no counter lines")
    for name in need:
        if name not in out:
            raise RawError(f"{path}: no {name} line")
    return out


def read_machine(path, need=("kernel",)):
    """machine output → (info Fields, sysctls {name: value string, None for absent}).
    The fields in `need` must be there (an empty or truncated machine.txt is refused).
    info.links is the list of its link= lines (docs/machine.md), one Fields each, in the order
    machine printed them (by index); empty for an output without them (older, or under -r)."""
    info, sysctls = Fields(path), {}
    info.links = []
    for line in read_lines(path):
        if line.startswith("link="):
            info.links.append(Fields(path, kv(line)))
        elif line.startswith("sysctl "):
            name, _, val = line[len("sysctl "):].partition("=")
            sysctls[name] = None if val == "absent" else val
        elif line.startswith("version="):
            info["version"] = line[len("version="):]   # uname -v has spaces
        elif "=" in line:
            info.update(kv(line))
    for k in need:
        info.str(k)
    return info, sysctls


def sysctl_value(v):
    """A sysctl as JSON: one integer → a number; several (ip_local_port_range) → a list of
    numbers; anything else stays a string; None (absent) stays None."""
    if v is None:
        return None
    words = v.split()
    if words and all(_INT.match(w) for w in words):
        vals = [int(w) for w in words]
        if all(abs(x) <= MAX_INT for x in vals):
            return vals[0] if len(vals) == 1 else vals
    return v


def sysctls_json(sysctls, names=None):
    """The sysctls a report shows, by full name (net.ipv4.tcp_syn_retries) → sysctl_value()."""
    return {k: sysctl_value(v) for k, v in sysctls.items()
            if names is None or k.rsplit(".", 1)[-1] in names}


def sysctl_int(sysctls, name, path="machine.txt", lo=0, hi=None):
    v = sysctls.get(name)
    if v is None:
        return None
    v = num(v, f"{path}: sysctl {name}", lo, hi)
    if not isinstance(v, int):
        raise RawError(f"{path}: sysctl {name}: not an integer")
    return v


def load_average(path):
    """A copy of /proc/loadavg → [1, 5, 15 minute] load averages, or None when not recorded."""
    lines = read_lines(path, optional=True)
    if lines is None:
        return None
    words = lines[0].split() if lines else []
    if len(words) < 3:
        raise RawError(f"{path}: not a /proc/loadavg line (three load averages)")
    return [float(num(w, f"{path}: load average", 0)) for w in words[:3]]


def fmt_load(load, which=3):
    """Load averages as /proc/loadavg prints them (two decimals), or "?" when not recorded."""
    return "?" if load is None else " ".join(f"{x:.2f}" for x in load[:which])


def listener_ready(path, mode=None, addr=True):
    """The `ready port= addr= backlog= mode=` line a listening fixture printed → Fields (port
    checked to be a port, mode to be the one the report describes)."""
    d = one_line(path, "ready ")
    d.int("port", 1, 65535)
    if addr:
        d.str("addr")
    if mode is not None and d.str("mode") != mode:
        raise RawError(f"{path}: mode={d['mode'][:20]}, not the {mode} listener this report describes")
    return d


MAX_EVENTS = 1_000_000

# sockwatch's own default interval (probes/sockwatch.c, -i); a continuous watcher in a QEMU
# guest samples every TL_GUEST_WATCH_US instead when its unit sets that (experiments/lib/
# collect.sh, tl_init; docs/kernel-matrix.md "Sampling in a guest")
SOCKWATCH_DEFAULT_US = 1000


def sockwatch_interval_us(path):
    """The interval (µs) a sockwatch run sampled at, from its `ready` line."""
    return one_line(path, "ready ").int("interval_us", 1, 10_000_000)


def sockwatch_timer_led_ms(path):
    """sockwatch -T's bound (ms) from the `ready` line, 0 when the run was not timer-led."""
    f = one_line(path, "ready ")
    return f.int("timer_led_ms", 1, 60_000) if "timer_led_ms" in f else 0


def _watchers_one(paths, read, disagree):
    """The one value read() gives for every watcher of paths; RawError naming `disagree` (a
    format with {vals}) when they differ."""
    vals = {read(p) for p in paths}
    if len(vals) != 1:
        raise RawError(f"{paths[0]}: " + disagree.format(vals=sorted(vals)))
    return vals.pop()


def watchers_timer_led_ms(paths):
    """The one -T bound (ms, 0 for none) of the watchers of paths; RawError if they disagree."""
    return _watchers_one(paths, sockwatch_timer_led_ms,
                         "its watchers disagree on timer-led sampling (-T): {vals} ms")


def sampling_text(interval_us, prefix="", timer_led_ms=0):
    """prefix + "sampled every N ms, …" when a watcher sampled at another interval than
    sockwatch's 1 ms default (a guest's unit that set TL_GUEST_WATCH_US), or was timer-led
    (sockwatch -T: TL_GUEST_TIMER_LED_MS), else None."""
    if interval_us == SOCKWATCH_DEFAULT_US and not timer_led_ms:
        return None
    text = f"{prefix}sampled every {interval_us / 1000:g} ms"
    if interval_us != SOCKWATCH_DEFAULT_US:
        text += (f", not {SOCKWATCH_DEFAULT_US / 1000:g} ms, as this unit's watchers do in a "
                 "QEMU guest: its timers are of a second or more")
    if timer_led_ms:
        text += (f"; while every socket watched had a timer armed, up to {timer_led_ms / 1000:g} s "
                 "apart, from one interval before the earliest was due")
    return text + " (docs/kernel-matrix.md)"


def watchers_interval_us(paths):
    """The one interval (µs) the watchers of paths sampled at; RawError if they disagree."""
    return _watchers_one(paths, sockwatch_interval_us,
                         "its watchers sampled at different intervals: {vals} us")


def read_sockwatch(path, until_ns=None):
    """A sockwatch run's lines (`t_s=` …) as Fields.  The last line must be sockwatch's `end`
    line: without it sockwatch was killed or its output cut, and the events are not all there.
    With until_ns (when the client was done), sockwatch must have watched until then: one that
    ended earlier (stopped by a signal, say) missed the rest of the events."""
    lines = read_lines(path)
    if not lines or not lines[-1].startswith("end "):
        raise RawError(f"{path}: no `end` line: sockwatch did not finish, events may be missing")
    end_ns = Fields(path, kv(lines[-1])).int("t_ns")
    events = [Fields(path, kv(line)) for line in lines if line.startswith("t_s=")]
    if until_ns is not None and end_ns < until_ns:
        # sockwatch -e ends by itself once every socket it saw is gone: complete all the same
        live = set()
        for k, e in socket_keys(events, lambda e: (e.get("local"), e.get("peer"))):
            (live.discard if e.get("event") == "gone" else live.add)(k)
        if live or not events:
            raise RawError(f"{path}: sockwatch ended {(until_ns - end_ns) / 1e9:.3f} s before "
                           "the client did, with a socket not gone: events are missing")
    if len(events) > MAX_EVENTS:
        raise RawError(f"{path}: more than {MAX_EVENTS} events")
    return events


_COOKIE = re.compile(r"[0-9]{1,20}\Z")


def cookie(e):
    """A sockwatch line's cookie= (the kernel's sock_diag cookie: one socket, its whole life),
    as the string printed, or None for a line recorded before sockwatch printed it."""
    c = e.get("cookie")
    if c is not None and not _COOKIE.match(c):
        raise RawError(f"{e.path}: cookie={c[:40]}: not a sock_diag cookie (a decimal number)")
    return c


def socket_keys(events, key):
    """(k, e) for each sockwatch line e, k being key() of the first line of e's socket.  A
    socket is followed by its cookie, whatever its addresses became: they are what the kernel
    showed at that sample, and a socket aborted by a RST can be caught in TCP_CLOSE with its
    port already released (ADDR:0).  A line without cookie= is key(e) itself."""
    first = {}
    for e in events:
        c = cookie(e)
        yield (key(e) if c is None else first.setdefault(c, key(e))), e


def follow(events, match):
    """The sockwatch lines of the sockets match() picks: every line it picks, and every later
    line of a socket it picked (the same cookie) whatever its addresses became.  Lines without
    cookie= are picked by match() alone."""
    picked, out = set(), []
    for e in events:
        c = cookie(e)
        if (c is not None and c in picked) or match(e):
            out.append(e)
            if c is not None:
                picked.add(c)
    return out


CLOSED = "UNCONN"     # sockwatch's name for TCP_CLOSE (ss's: a socket with no connection)


def shown_state(state):
    """A socket's state as a report shows it: TCP_CLOSE as CLOSE (closed_note() says why)."""
    return "CLOSE" if state == CLOSED else state


def closed_note(local, inode, t_ms, indent="  "):
    """A line that says what a connection's TCP_CLOSE sample shows: the state, its local
    address (port 0: released) and its inode (0: no process holds the socket)."""
    port = local.rsplit(":", 1)[-1] == "0"
    return (f"{indent}CLOSE at {t_ms:.3f} ms: the kernel's TCP_CLOSE (sockwatch, as ss, says "
            f"{CLOSED}), local {local}" + (": its port already released" if port else "")
            + f", inode {inode}" + (": no process holds it" if inode == 0 else ""))


def read_snapshot(path):
    """A `sockwatch -1` snapshot (possibly empty: no socket matched) as Fields per socket."""
    return [Fields(path, kv(line)) for line in read_lines(path) if line.startswith("t_s=")]


def socket_row(d):
    """The socket shape (a `sockwatch -1` line, as ss would list it) every report uses."""
    timer = d.str("timer")
    return {"state": d.str("state"), "local": d.str("local"), "peer": d.str("peer"),
            "rq": d.int("rq"), "wq": d.int("wq"),
            "timer": "persist" if timer == "probe" else timer,
            "expires_ms": d.int("expires_ms"), "retrans": d.int("retrans"),
            "inode": d.int("inode")}


def sockwatch_event(d, start_ns):
    """One sockwatch line → the event shape every report uses (docs/output-format.md): times
    in s from start_ns, backoff and rto_ms None when the line has none.  sockwatch's old
    timer name `probe` reads as `persist`, ss's name for the zero-window probe timer."""
    timer = d.str("timer")
    return {"t_s": round((d.int("t_ns") - start_ns) / 1e9, 6), "event": d.str("event"),
            "state": d.str("state"), "retrans": d.int("retrans"),
            "timer": "persist" if timer == "probe" else timer,
            "expires_ms": d.int("expires_ms"),
            "backoff": d.int("backoff", default=None), "rto_ms": d.int("rto_ms", default=None)}


def retransmit(e):
    """The retransmission shape: one per event where the count went up."""
    return {k: e[k] for k in ("t_s", "retrans", "timer", "expires_ms")}


def retransmits(events):
    out, last = [], 0
    for e in events:
        if e["event"] == "change" and e["retrans"] > last:
            out.append(retransmit(e))
        last = e["retrans"] if e["event"] != "gone" else last
    return out


def header(kernel, collected, *notes, tool=None):
    """The second line of every report: "kernel K[; tool]; collected C[; note…]" (a None
    note is left out)."""
    parts = [f"kernel {kernel}"] if kernel is not None else []
    if tool:
        parts.append(tool)
    if collected is not None:
        parts.append(f"collected {collected}")
    return "; ".join(parts + [n for n in notes if n is not None])


def syn_model_timeout(boundary, rto_base=1.0, rto_max=120.0):
    """tcp_model_timeout() of net/ipv4/tcp_timer.c: how long `boundary` exponential backoffs
    from rto_base take, linear once the RTO reaches rto_max (seconds)."""
    thresh = 0
    while (rto_base * (2 << thresh)) <= rto_max and thresh < 64:
        thresh += 1
    # thresh == ilog2(rto_max / rto_base) == 6 for 1 s and 120 s
    if boundary <= thresh:
        return ((2 << boundary) - 1) * rto_base
    return ((2 << thresh) - 1) * rto_base + (boundary - thresh) * rto_max


def expected_syn_schedule(syn_retries, linear_timeouts, rto_max=120.0):
    """The retransmission times (s after the first SYN) and the give-up time that the kernel
    documents for a SYN-SENT socket: ip-sysctl.rst (tcp_syn_retries, tcp_syn_linear_timeouts)
    and tcp_write_timeout()/tcp_retransmit_timer() in net/ipv4/tcp_timer.c.

    linear_timeouts is None on kernels without the sysctl (before 6.5): pure doubling, where
    the count limit (syn_retries) and the time limit (tcp_model_timeout, applied to SYN-SENT
    since 5.4) fall on the same instant.  With it, the first `linear` timeouts stay at the
    initial RTO, the attempt may use syn_retries + linear retransmissions, and it also ends once
    the time of the doubling schedule (tcp_model_timeout(syn_retries)) has passed.  The RTO cap
    is 120 s (TCP_RTO_MAX; tcp_rto_max_ms on 6.15+ only matters for TCP_SYNCNT >= 7).
    Both counts are bounded by MAX_TCP_SYNCNT, so the loop is too."""
    for name, v in (("TCP_SYNCNT", syn_retries), ("tcp_syn_linear_timeouts", linear_timeouts)):
        if v is not None and not 0 <= v <= MAX_TCP_SYNCNT:
            raise RawError(f"{name} {v} is outside 0..{MAX_TCP_SYNCNT}")
    linear = linear_timeouts or 0
    max_retrans = syn_retries + linear
    time_limit = syn_model_timeout(syn_retries) if linear_timeouts is not None else None
    t, rto, k, times = 0.0, 1.0, 0, []
    while True:
        t += rto
        if k >= max_retrans or (time_limit is not None and t >= time_limit):
            return times, t
        k += 1
        times.append(t)
        if k > linear:
            rto = min(rto * 2, rto_max)


_SS_TIMER_RE = re.compile(r"timer:\(([^)]*)\)")


def read_ss_sockets(path):
    """An `ss -tan[o]` listing → one {"state", "local", "peer", "timer", "line"} per socket line,
    in ss's order; "state" is None when the listing has no State column (`ss … state NAME`
    leaves it out), "timer" the text inside timer:(…) (-o) or None, "line" the words joined by
    one blank.  None for a file that is not there (no ss where the unit ran)."""
    lines = read_lines(path, optional=True)
    if lines is None:
        return None
    if not lines or not lines[0].split() or lines[0].split()[0] not in ("State", "Recv-Q"):
        raise RawError(f"{path}: not an ss listing (no header line)")
    has_state = lines[0].split()[0] == "State"
    out = []
    for line in lines[1:]:
        w = line.split()
        rest = w[1:] if has_state else w
        if len(rest) < 4:
            continue
        m = _SS_TIMER_RE.search(line)
        out.append({"state": w[0] if has_state else None, "local": rest[2], "peer": rest[3],
                    "timer": m.group(1) if m else None, "line": " ".join(w)})
    return out


SOCKSTAT_TCP_KEYS = ("inuse", "orphan", "tw", "alloc", "mem")


def read_sockstat(path):
    """/proc/net/sockstat as a namespace reads it (net/ipv4/proc.c, sockstat_seq_show(): sockets
    used, inuse and tw are the namespace's; orphan, alloc and mem the machine's) →
    {"sockets_used", "inuse", "orphan", "tw", "alloc", "mem", "line" (the TCP: line)}."""
    out = {}
    for line in read_lines(path):
        w = line.split()
        if line.startswith("sockets:") and len(w) == 3 and w[1] == "used":
            out["sockets_used"] = num(w[2], f"{path}: sockets used", 0)
        elif w and w[0] == "TCP:":
            pairs = dict(zip(w[1::2], w[2::2]))
            for k in SOCKSTAT_TCP_KEYS:
                if k not in pairs:
                    raise RawError(f"{path}: the TCP: line has no {k}")
                out[k] = num(pairs[k], f"{path}: TCP {k}", 0)
            out["line"] = line.strip()
    for key, head in (("line", "TCP:"), ("sockets_used", "sockets:")):
        if key not in out:
            raise RawError(f"{path}: no `{head}` line (not a /proc/net/sockstat)")
    return out


# kernel/time/timer.c: the timer wheel's levels (LVL_BITS 6, LVL_CLK_SHIFT 3) as (LVL_START of
# the next level, granularity) in jiffies: a timeout of d jiffies lands in the first level whose
# range holds it, and calc_index() rounds its expiry up to that level's granularity
WHEEL = ((63, 1), (504, 8), (4032, 64), (32256, 512), (258048, 4096))


def wheel_gran_ms(timeout_ms, hz):
    """How late the timer wheel may fire a timer of timeout_ms (its level's granularity)."""
    j = -(-timeout_ms * hz // 1000)
    for top, gran in WHEEL:
        if j < top:
            return gran * 1000 / hz
    return WHEEL[-1][1] * 1000 / hz


def fmt_delta(v):
    if v is None:
        return "absent"
    if isinstance(v, dict):
        return f"only {v['only']}: {v['value']}"
    return f"{v:+d}"


def counters_block(deltas, indent="  "):
    """Counter deltas as aligned lines, in the order given."""
    if not deltas:
        return [indent + "(no counter changed)"]
    width = max(len(k) for k in deltas)
    return [f"{indent}{k:<{width}}  {fmt_delta(v)}" for k, v in deltas.items()]


def _check_finite(obj, where="$", depth=0):
    """Refuse what strict JSON cannot carry, naming the key: NaN, Infinity, odd types."""
    if depth > 64:
        raise RawError(f"JSON {where}: nested too deep")
    if isinstance(obj, float) and not math.isfinite(obj):
        raise RawError(f"JSON {where}: {obj} is not a finite number")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}", depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]", depth + 1)


def dumps(obj):
    """Strict JSON (RFC 8259): non-finite numbers are refused, never written as NaN/Infinity."""
    _check_finite(obj)
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def _tmp_for(path):
    d = os.path.dirname(path) or "."
    # .NAME.XXXX.tmp-PID: if this process is killed (SIGKILL runs no cleanup), the next run.sh
    # sees the pid is gone and removes the file.
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".",
                               suffix=f".tmp-{os.getpid()}")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)   # as open() would create it; mkstemp makes it 0600
    return fd, tmp


def write_tmp_text(path, text):
    """text into a temporary file beside path (.NAME.XXXX.tmp-PID, as _tmp_for makes it) → its
    name; the caller renames it (write_outputs(made=)).  Nothing is left if the write fails."""
    fd, tmp = _tmp_for(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def atomic_write_all(files):
    """Write {path: text} through temporary files, renamed only once all are written: a reader
    sees the old files or the new ones, never half of one, and a failure leaves the old ones."""
    tmps = []
    try:
        for path, text in files.items():
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd, tmp = _tmp_for(path)
            tmps.append(tmp)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        for (path, _), tmp in zip(files.items(), tmps):
            os.replace(tmp, path)
    except BaseException:
        for tmp in tmps:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise


def atomic_write(path, text):
    atomic_write_all({path: text})


def write_outputs(outdir, name, lines, obj, made=None):
    """OUTDIR/name.txt (lines for a person) and OUTDIR/name.json (the same facts for tools);
    both are made in memory first, so a refusal writes neither.  made: {final path: temporary
    file} of pictures a tool already drew (tool_svg()): renamed once the pair is written, and
    removed whatever happens to the pair."""
    made = dict(made or {})
    try:
        obj = dict(obj)
        obj.setdefault("schema", SCHEMA)
        if VERSIONS_READ:
            obj.setdefault("tcplab_version", ", ".join(sorted(set(VERSIONS_READ.values()))))
        knobs = {}
        for k in KNOBS_READ.values():
            knobs.update(k)
        if knobs and "knobs" not in obj:
            obj["knobs"] = knobs
            lines = list(lines) + ["knobs: " + " ".join(f"{k}={v}" for k, v in knobs.items())
                                   + " (./run.sh UNIT --set NAME=VALUE; every other knob at its default)"]
        text = "\n".join(lines) + "\n"
        js = dumps(obj)
        atomic_write_all({os.path.join(outdir, name + ".txt"): text,
                          os.path.join(outdir, name + ".json"): js})
        for path, tmp in made.items():
            os.replace(tmp, path)
    finally:
        for tmp in made.values():
            if os.path.exists(tmp):
                os.unlink(tmp)


TOOL_TIMEOUT_S = 60
# The one file name a drawing tool is given: it writes this in its own private directory.
DRAWN = "picture.svg"


def tool_svg(path, make):
    """A picture drawn by a Debian tool (gnuplot, mscgen) for path: make(DRAWN) gives (argv,
    stdin text) for a tool that writes DRAWN in its current directory.  The tool runs in a
    private directory (mkdtemp, 0700, beside path), which is its only path: no part of path (the
    user's --out, or the current directory of an installed tcplab) ever reaches it, as an
    argument or as code in its script (a quote there was gnuplot code; a '?' cut mscgen's -o).
    Returns (tmp, None), tmp a temporary file beside path that the report renames with
    write_outputs(made=), or (None, why) when the tool is not installed ("gnuplot not found"),
    fails or writes nothing: a picture never fails a report."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = _tmp_for(path)
    os.close(fd)
    # .NAME.XXXX.tmp-PID, as _tmp_for's: run.sh removes what a killed report left
    work = tempfile.mkdtemp(dir=d, prefix="." + os.path.basename(path) + ".",
                            suffix=f".tmp-{os.getpid()}")
    try:
        argv, text = make(DRAWN)
        prog = shutil.which(argv[0])
        if prog is None:
            raise _NoPicture(f"{argv[0]} not found")
        try:
            r = subprocess.run([prog] + list(argv[1:]), input=text, capture_output=True,
                               text=True, timeout=TOOL_TIMEOUT_S, cwd=work)
        except subprocess.TimeoutExpired:
            raise _NoPicture(f"{argv[0]} failed: still running after {TOOL_TIMEOUT_S} s") from None
        except OSError as e:
            raise _NoPicture(f"{argv[0]} failed: {e.strerror}") from None
        drawn = os.path.join(work, DRAWN)
        if r.returncode != 0 or not os.path.isfile(drawn) or os.path.getsize(drawn) == 0:
            last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}, no output"])[-1]
            raise _NoPicture(f"{argv[0]} failed: {last[:200]}")
        os.replace(drawn, tmp)
        return tmp, None
    except _NoPicture as e:
        os.unlink(tmp)
        return None, str(e)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def gnuplot_str(text):
    """text as a gnuplot string constant: single-quoted, where gnuplot substitutes nothing
    (a double-quoted one runs `backquotes` as shell commands), its quotes doubled, what is not
    printable (a newline would end the command) written as an escape: \\n, \\x01."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))
    return "'" + text.replace("'", "''") + "'"


class _NoPicture(Exception):
    pass


# {unit: the tcplab version that collected its raw directory}, for each raw directory this
# process read through unit_dir(); write_outputs() records them as "tcplab_version".
VERSIONS_READ = {}
# {unit: {knob: value}}: the knobs given to each unit read (raw/<unit>/knobs.txt, written by
# run.sh for a --set); write_outputs() records them as "knobs" and a "knobs:" line.
KNOBS_READ = {}


def read_knobs(rawdir):
    """The knobs run.sh was given for the unit (raw/<unit>/knobs.txt: NAME=VALUE lines), as
    {name: int or word}; None when there is no such file (no --set: every knob at its default)."""
    path = os.path.join(rawdir, "knobs.txt")
    lines = read_lines(path, optional=True)
    if lines is None:
        return None
    out = {}
    for i, line in enumerate(lines, 1):
        m = re.fullmatch(r"([a-z][a-z0-9_]{0,30})=([a-z0-9_-]{1,32})", line.rstrip("\n"))
        if not m or m.group(1) in out:
            raise RawError(f"{path}: line {i}: not NAME=VALUE (a knob, each once)")
        v = m.group(2)
        out[m.group(1)] = int(v) if re.fullmatch(r"0|[1-9][0-9]{0,8}", v) else v
    if not out:
        raise RawError(f"{path}: empty")
    return out


def tcplab_version(rawdir):
    """The tcplab that ran the unit (raw/<unit>/tcplab-version.txt, written by run.sh), or None
    for a raw directory from before run.sh wrote it (such as the committed references, whose
    replays so stay byte for byte what was committed)."""
    return one_line_file(os.path.join(rawdir, "tcplab-version.txt"), r"[!-~]{1,64}",
                         "a version (one word of printable ASCII)")


def one_line_file(path, pattern, what):
    """The first line of an optional raw file, stripped, which must match pattern; None when
    the file is not there, RawError "PATH: not WHAT" when it does not match."""
    lines = read_lines(path, optional=True)
    if lines is None:
        return None
    if not lines or not re.fullmatch(pattern, lines[0].strip()):
        raise RawError(f"{path}: not {what}")
    return lines[0].strip()


def unit_dir(rawroot, unit):
    """raw/<unit>/ of a unit that ran to its end; a failed or timed-out unit's partial directory
    (its status.txt, written by run.sh) is refused: a report never reads it as a whole run.
    Notes the unit's tcplab version for write_outputs()."""
    d = os.path.join(rawroot, unit)
    if not os.path.isdir(d):
        raise RawError(f"{d}: missing (no raw directory for unit {unit})")
    why = unit_status(d)
    if why is not None:
        raise RawError(f"{d}: partial output of a unit that did not finish ({why})")
    v = tcplab_version(d)
    if v is not None:
        VERSIONS_READ[unit] = v
    k = read_knobs(d)
    if k is not None:
        KNOBS_READ[unit] = k
    return d


def collected_at(rawdir):
    """The UTC time the unit was collected (collected-at.txt), or None when not recorded."""
    return one_line_file(os.path.join(rawdir, "collected-at.txt"),
                         r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z", "a UTC time (YYYY-MM-DDTHH:MM:SSZ)")


def kernel_release(rawdir):
    """The release the machine probe saw in this unit (kernel= line of machine.txt)."""
    return read_machine(os.path.join(rawdir, "machine.txt"))[0].str("kernel")


def read_vm(rawdir):
    """raw/<unit>/vm.txt (a --kernel run: how the guest was booted) as a dict, or None."""
    return read_line_values(os.path.join(rawdir, "vm.txt"), optional=True)


def guest_label(vm):
    """A --kernel guest named from its vm.txt: "inside PACKAGE under QEMU (accel=A, N CPU)"."""
    return (f"inside {vm.get('package', 'a Debian kernel')} under QEMU "
            f"(accel={vm.get('accel')}, {vm.get('smp')} CPU)")


def where(rawdir):
    """Where a unit ran, for a report's header line (a --kernel run leaves vm.txt in it)."""
    v = read_vm(rawdir)
    if v is None:
        return "each unit in its own network namespace on this host; loopback"
    return (guest_label(v) + ", each unit in its own namespace; loopback; timings under "
            "emulation are slower than on hardware" + side_by_side(v))


def side_by_side(vm):
    """The caveat of a guest that ran beside others: vm.txt's side_by_side=N (run.sh --kernel
    all ran up to N guests at once, and the host's own run, on this host's CPUs, so a speed
    measured there is slower still than one guest alone); "" for a guest that ran alone."""
    n = (vm or {}).get("side_by_side")
    return (f"; up to {n} guests ran side by side with the host's own run (--kernel all), "
            "sharing its CPUs") if n else ""


def under_vm(rawdir):
    return read_vm(rawdir) is not None


class OutputError(OSError):
    """A write to standard output failed (/dev/full, EIO): its filename is "standard output"."""


class _CheckedStdout:
    """sys.stdout whose failed writes are OutputError, told apart from a file's OSError."""

    def __init__(self, f):
        self._f = f

    def _checked(self, call, *args):
        try:
            return call(*args)
        except OSError as e:
            raise OutputError(e.errno, e.strerror, "standard output") from None

    def write(self, text):
        return self._checked(self._f.write, text)

    def flush(self):
        return self._checked(self._f.flush)

    def __getattr__(self, name):
        return getattr(self._f, name)


def tool_words(args, valued):
    """A tool's command line (the words after its name): each option in valued takes the next
    word as its value; "-" and any word not starting with "-" are operands, and so is every word
    after "--".  Returns ([(option, its value, None when no word follows)], operands, the first
    unknown option or None); the words after an unknown option are not looked at."""
    pairs, operands, args = [], [], list(args)
    while args:
        a = args.pop(0)
        if a in valued:
            pairs.append((a, args.pop(0) if args else None))
        elif a == "--":
            operands += args
            break
        elif a.startswith("-") and a != "-":
            return pairs, operands, a
        else:
            operands.append(a)
    return pairs, operands, None


def tool_main(main, prog=None, write_status=1):
    """The exit status of a command's main(sys.argv) (the diff, the matrix, kcidb): a reader that
    goes away (`| head`) ends it quietly, SIGPIPE's default as in diff(1); Ctrl-C is 130.  A
    write to standard output that fails, in main or at the last flush, is the one line
    "PROG: standard output: REASON" (PROG: argv[0]'s name unless given) and exit write_status,
    never a traceback: the one write-error path of every tool."""
    import signal
    import sys
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    prog = prog or os.path.basename(sys.argv[0])
    real, sys.stdout = sys.stdout, _CheckedStdout(sys.stdout)
    try:
        status = main(sys.argv)
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        return 130
    except OutputError as e:
        print(f"{prog}: standard output: {e.strerror}", file=sys.stderr)
        # what is still buffered would fail again, with a traceback, at the interpreter's exit
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, real.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return write_status
    finally:
        sys.stdout = real


def report_main(argv, build):
    """Entry point of every report script: build(rawroot, outdir).  Raw input that lacks what
    the report needs is one line on stderr naming the file and the field, and exit 1; nothing
    is written then.  Never a traceback."""
    import signal
    import sys
    prog = os.path.basename(argv[0])
    if len(argv) != 3:
        print(f"usage: {prog} RAWROOT OUTDIR", file=sys.stderr)
        return 2
    # SIGTERM, SIGHUP and SIGQUIT unwind like SIGINT (exit 128+N), so atomic_write removes its
    # temporary files; by default Python dies of them at once and leaves the files behind.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda n, _f: sys.exit(128 + n))
    try:
        build(argv[1], argv[2])
    except RawError as e:
        print(f"{prog}: {e}".replace("\n", " "), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130     # interrupted: the old outputs stand, no traceback
    except OSError as e:
        print(f"{prog}: {e.filename or argv[2]}: {e.strerror}", file=sys.stderr)
        return 1
    except (KeyError, ValueError, IndexError, TypeError, ZeroDivisionError, RecursionError,
            OverflowError, MemoryError) as e:
        # a check missing in the report: still one line, and the test of bad input fails on it
        print(f"{prog}: internal error on this raw input: {type(e).__name__}: {e}"[:400]
              .replace("\n", " "), file=sys.stderr)
        return 1
    return 0


# ---- the unit table (experiments/units), for tests and reports -------------------------------
# Parsed by experiments/runner/tcplab_units.py alone, for run.sh (load_units), vm.sh and
# read_units() here; its columns are explained in the file's header.

UNIT_COLUMNS = ("unit", "report", "set", "quick", "alone", "expect_s", "limit_s", "root",
                "netns", "qemu")


# experiments/: this library sits in its report/ folder (docs/design.md, "Layout")
EXPERIMENTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def experiment_dir(unit, report, exp=None):
    """The folder of a unit's experiment: experiments/<report>/, or experiments/<unit>/ for a
    unit that feeds no report (report '-'); exp: another experiments directory."""
    return os.path.join(exp or EXPERIMENTS, unit if report == "-" else report)


def collect_script(unit, report, exp=None):
    """A unit's collect script: <its experiment's folder>/<unit>.sh (tcplab_units' rule, the
    one run.sh's table checks use)."""
    return tcplab_units.collect_script(exp or EXPERIMENTS, unit, report)


def report_script(report, exp=None):
    """A report's program: experiments/<report>/<report>.py."""
    return os.path.join(exp or EXPERIMENTS, report, report + ".py")


def read_units(path=None):
    """The unit table as a list of dicts in file order (numbers as int, yes/no as bool).
    path: the table file, default $TCPLAB_EXPERIMENTS/units or experiments/units.  Read and
    checked by tcplab_units (experiments/runner/) as run.sh reads it, but for the reports and
    collect scripts, which are not looked for (a table may be read on its own, away from its
    experiments): a bad table raises RawError with run.sh's words, naming the file and line."""
    if path is None:
        exp = os.environ.get("TCPLAB_EXPERIMENTS") or EXPERIMENTS
        path = os.path.join(exp, "units")
    try:
        table = tcplab_units.load(os.path.dirname(path) or ".", path, files=False)
    except tcplab_units.TableError as e:
        raise RawError(str(e)) from None
    units = []
    for name in table.names:
        u = table.row(name)
        for k in ("expect_s", "limit_s"):
            u[k] = int(u[k])
        # netns: 1 or 2 (a number), or "wire" / "wire:MTU" (kept as the string)
        if u["netns"] in ("1", "2"):
            u["netns"] = int(u["netns"])
        for k in ("alone", "root", "qemu"):
            u[k] = u[k] == "yes"
        if u["report"] == "-":
            u["report"] = None
        why = table.qemu_why.get(name)
        u["qemu_why"] = None if u["qemu"] or why is None else why.strip()
        units.append(u)
    return units


def group_runs(rawroot, name, units, read):
    """The runs of the report name over several units (units: their names, in order):
    read(raw/<unit>/, unit) for each unit that ran to its end; a failed or timed-out unit's
    status (unit_status) kept in partial, to be said, never reported; no run at all is refused,
    with the first partial unit's status, or as no raw directory → (runs, partial) dicts."""
    runs, partial = {}, {}
    for unit in units:
        d = os.path.join(rawroot, unit)
        if exists(d) and unit_status(d) is not None:
            partial[unit] = unit_status(d)
        elif exists(d):
            runs[unit] = read(unit_dir(rawroot, unit), unit)
    if not runs and partial:
        unit, why = next(iter(partial.items()))
        raise RawError(f"{os.path.join(rawroot, unit)}: partial output of a unit that did not "
                       f"finish ({why})")
    if not runs:
        raise RawError(f"{rawroot}: no raw directory for {name}")
    return runs, partial


def unit_status(rawdir):
    """Why a unit's raw directory is partial ("failed: …" / "timed out after N s", the first
    line of its status.txt, written by run.sh), or None for a unit that ran to its end."""
    path = os.path.join(rawdir, "status.txt")
    if not os.path.lexists(path):
        return None
    lines = read_lines(path)
    return (lines[0].strip() if lines else "") or "failed"
