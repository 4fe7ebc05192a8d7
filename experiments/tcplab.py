"""tcplab.py — what the report scripts and tests share: raw-file readers, the kernel's SYN
retransmission schedule, and atomic writing of the .txt/.json pair.  Standard library only."""
import contextlib
import json
import os
import secrets
import subprocess
import tempfile

SCHEMA = 1


class RawError(Exception):
    """A raw file is missing or does not say what the report needs."""


def kv(line):
    """`key=value key=value` → dict of strings (tokens without '=' are skipped)."""
    out = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f]
    except OSError as e:
        raise RawError(f"{path}: {e.strerror}") from None


def read_kv_lines(path, prefix=None):
    """Every line of a raw file parsed as key=value; with prefix, only lines starting with it."""
    return [kv(line) for line in read_lines(path) if prefix is None or line.startswith(prefix)]


def read_kv(path):
    """All key=value pairs of a file merged into one dict (later lines win)."""
    out = {}
    for d in read_kv_lines(path):
        out.update(d)
    return out


def read_line_values(path):
    """A file of `key=value` lines whose values may hold spaces (vm.txt): {key: rest of line}."""
    out = {}
    for line in read_lines(path):
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def read_counters_delta(path):
    """A `counters -d` output → {name: int delta, or None when the counter is absent}.
    A counter on one side only (`Name only-now V`) reads as {"only": "now", "value": V}."""
    out = {}
    for line in read_lines(path):
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = None if parts[1] == "absent" else int(parts[1])
        elif len(parts) == 3 and parts[1] in ("only-now", "only-before"):
            out[parts[0]] = {"only": parts[1][5:], "value": int(parts[2])}
    return out


def read_machine(path):
    """machine output → (info dict, sysctls dict with None for absent)."""
    info, sysctls = {}, {}
    for line in read_lines(path):
        if line.startswith("sysctl "):
            name, _, val = line[len("sysctl "):].partition("=")
            sysctls[name] = None if val == "absent" else val
        elif line.startswith("version="):
            info["version"] = line[len("version="):]   # uname -v has spaces
        elif "=" in line:
            info.update(kv(line))
    return info, sysctls


def sysctl_int(sysctls, name):
    v = sysctls.get(name)
    return None if v is None else int(v)


def syn_model_timeout(boundary, rto_base=1.0, rto_max=120.0):
    """tcp_model_timeout() of net/ipv4/tcp_timer.c: how long `boundary` exponential backoffs
    from rto_base take, linear once the RTO reaches rto_max (seconds)."""
    thresh = 0
    while (rto_base * (2 << thresh)) <= rto_max:
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
    is 120 s (TCP_RTO_MAX; tcp_rto_max_ms on 6.15+ only matters for TCP_SYNCNT >= 7)."""
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


def atomic_write(path, text):
    """Write text to path through a temporary file and rename: a reader sees the old file or
    the new one, never half of one (an interrupted run leaves no truncated output)."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    # .NAME.XXXX.tmp-PID: if this process is killed (SIGKILL runs no cleanup), the next run.sh
    # sees the pid is gone and removes the file.
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".",
                               suffix=f".tmp-{os.getpid()}")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)   # as open() would create it; mkstemp makes it 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_outputs(outdir, name, lines, obj):
    """OUTDIR/name.txt (lines for a person) and OUTDIR/name.json (the same facts for tools)."""
    obj = dict(obj)
    obj.setdefault("schema", SCHEMA)
    atomic_write(os.path.join(outdir, name + ".txt"), "\n".join(lines) + "\n")
    atomic_write(os.path.join(outdir, name + ".json"), json.dumps(obj, indent=2) + "\n")


def unit_dir(rawroot, unit):
    return os.path.join(rawroot, unit)


def collected_at(rawdir):
    try:
        return read_lines(os.path.join(rawdir, "collected-at.txt"))[0]
    except (RawError, IndexError):
        return None


def kernel_release(rawdir):
    """The release the machine probe saw in this unit (kernel= line), or None."""
    path = os.path.join(rawdir, "machine.txt")
    if not os.path.exists(path):
        return None
    return read_machine(path)[0].get("kernel")


def where(rawdir):
    """Where a unit ran, for a report's header line (a --kernel run leaves vm.txt in it)."""
    vm = os.path.join(rawdir, "vm.txt")
    if not os.path.exists(vm):
        return "each unit in its own network namespace on this host; loopback"
    v = read_line_values(vm)
    return (f"inside {v.get('package', 'a Debian kernel')} under QEMU "
            f"(accel={v.get('accel')}, {v.get('smp')} CPU), each unit in its own namespace; "
            "loopback; timings under emulation are slower than on hardware")


def under_vm(rawdir):
    return os.path.exists(os.path.join(rawdir, "vm.txt"))


def report_main(argv, build):
    """Entry point of every report script: build(rawroot, outdir) → 0; a missing or unreadable
    raw file is one line on stderr and exit 1, never a traceback."""
    import signal
    import sys
    if len(argv) != 3:
        print(f"usage: {os.path.basename(argv[0])} RAWROOT OUTDIR", file=sys.stderr)
        return 2
    # SIGTERM unwinds like SIGINT, so atomic_write removes its temporary file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        build(argv[1], argv[2])
    except (RawError, KeyError, ValueError, IndexError) as e:
        print(f"{os.path.basename(argv[0])}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130     # interrupted: the old outputs stand, no traceback
    except OSError as e:
        print(f"{os.path.basename(argv[0])}: {e}", file=sys.stderr)
        return 1
    return 0


NETNS_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "netns.sh")


@contextlib.contextmanager
def netns(prefix="tcplab-test"):
    """A fresh network namespace made the way run.sh makes them (experiments/lib/netns.sh: lo up,
    TCP hash table); on exit its processes are killed and it is deleted."""
    name = f"{prefix}-{secrets.token_hex(4)}"
    subprocess.run([NETNS_SH, "create", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run([NETNS_SH, "delete", name], capture_output=True)


# ---- the unit table (experiments/units), for tests and reports -------------------------------
# run.sh reads the same file (load_units); its columns are explained in the file's header.

UNIT_COLUMNS = ("unit", "report", "set", "quick", "alone", "expect_s", "limit_s", "root",
                "netns", "qemu")


def read_units(path=None):
    """The unit table as a list of dicts in file order (numbers as int, yes/no as bool).
    path: the table file, default $TCPLAB_EXPERIMENTS/units or experiments/units.  A bad line
    raises RawError naming the file and line."""
    if path is None:
        exp = os.environ.get("TCPLAB_EXPERIMENTS") or os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(exp, "units")
    units = []
    for n, line in enumerate(read_lines(path), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != len(UNIT_COLUMNS):
            raise RawError(f"{path}:{n}: want {len(UNIT_COLUMNS)} columns, got {len(words)}")
        u = dict(zip(UNIT_COLUMNS, words))
        try:
            for k in ("expect_s", "limit_s", "netns"):
                u[k] = int(u[k])
        except ValueError as e:
            raise RawError(f"{path}:{n}: {e}") from None
        for k in ("alone", "root", "qemu"):
            if u[k] not in ("yes", "no"):
                raise RawError(f"{path}:{n}: {k} '{u[k]}': want yes or no")
            u[k] = u[k] == "yes"
        if u["report"] == "-":
            u["report"] = None
        units.append(u)
    return units


def unit_status(rawdir):
    """Why a unit's raw directory is partial ("failed: …" / "timed out after N s", the first
    line of its status.txt, written by run.sh), or None for a unit that ran to its end."""
    try:
        with open(os.path.join(rawdir, "status.txt")) as f:
            return f.readline().strip() or "failed"
    except FileNotFoundError:
        return None
