"""Interrupts and crashes leave nothing behind: SIGINT, SIGTERM or SIGKILL at 20 random points
of `./run.sh --quick`, to run.sh alone or to its whole process group (what Ctrl-C does).

After each interrupt (and, for SIGKILL, after the next run.sh, which must reap and say so):
no namespace of the run, no process it started, no socket on the lab's ports in the host
namespace, no temporary file or directory, and every .json in the output directory parses.
The RNG seed is printed; TCPLAB_INTERRUPT_SEED=N repeats a sequence.  docs/reliability.md."""
import glob
import json
import os
import random
import re
import secrets
import signal
import subprocess
import time

import pytest

from conftest import TOP

pytestmark = pytest.mark.netns
RUN = os.path.join(TOP, "run.sh")
INTERRUPTS = 20
CONNECTS = "200"
TAG = "TL_RELIABILITY_TAG"


def lab_ports():
    """Every 21xxx port an experiment script names."""
    ports = set()
    for path in glob.glob(os.path.join(TOP, "experiments", "*.sh")):
        with open(path) as f:
            ports.update(int(p) for p in re.findall(r"(?<![0-9])21[0-9]{3}(?![0-9])", f.read()))
    return ports


def environ_has(pid, needle):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def tagged_pids(tag):
    """Live processes (not zombies) whose environment carries our tag: anything a run started."""
    needle = f"{TAG}={tag}".encode()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and environ_has(p, needle)]


def socket_owners():
    """inode -> pid for every socket fd of every process."""
    owners = {}
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            owners[int(target[8:-1])] = int(fd.split("/")[2])
    return owners


def host_lab_sockets(ports):
    """(inode, local port, remote port, state) of host-namespace TCP sockets on a lab port."""
    found = []
    for name in ("tcp", "tcp6"):
        with open(f"/proc/self/net/{name}") as f:
            next(f)
            for line in f:
                fields = line.split()
                lport = int(fields[1].rsplit(":", 1)[1], 16)
                rport = int(fields[2].rsplit(":", 1)[1], 16)
                if lport in ports or rport in ports:
                    found.append((int(fields[9]), lport, rport, fields[3]))
    return found


def run_namespaces(pid):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"tcplab-{pid}-")]


def leftovers(out, pid, tag, ports, baseline_inodes):
    """What a run left: a list of strings, empty when nothing."""
    found = [f"namespace {ns}" for ns in run_namespaces(pid)]
    found += [f"process {p}: {cmdline(p)}" for p in tagged_pids(tag)]
    owners = socket_owners()
    for inode, lport, rport, st in host_lab_sockets(ports):
        owner = owners.get(inode)
        ours = owner is None or environ_has(owner, f"{TAG}={tag}".encode())
        if inode not in baseline_inodes and ours:
            found.append(f"host socket {lport}->{rport} state {st} inode {inode} pid {owner}")
    for name in os.listdir(out):
        if ".tmp-" in name:
            found.append(f"temporary {name}")
    return found


def wait_clean(out, pid, tag, ports, baseline, deadline_s=3.0):
    """Poll until nothing is left or the deadline passes (killed processes take a moment)."""
    end = time.monotonic() + deadline_s
    while True:
        left = leftovers(out, pid, tag, ports, baseline)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.02)


def truncated_outputs(out):
    """Every .json under out must parse; every report .txt must be non-empty."""
    bad = []
    for path in glob.glob(os.path.join(out, "**", "*.json"), recursive=True):
        try:
            with open(path) as f:
                json.load(f)
        except (OSError, ValueError) as e:
            bad.append(f"{path}: {e}")
    for path in glob.glob(os.path.join(out, "*.txt")):
        if os.path.getsize(path) == 0:
            bad.append(f"{path}: empty")
    return bad


def start(out, tag, *units):
    env = dict(os.environ, TL_CONNECTS=CONNECTS, **{TAG: tag})
    args = [RUN, "--out", out] + (list(units) or ["--quick"])
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def plan(rng, duration):
    """20 (signal, target, delay) triples: each signal about a third of the time, to run.sh
    alone or to its process group, at a uniformly random time of a whole run."""
    sigs = [signal.SIGINT] * 7 + [signal.SIGTERM] * 7 + [signal.SIGKILL] * 6
    rng.shuffle(sigs)
    return [(s, rng.choice(["pid", "group"]), rng.uniform(0.0, duration)) for s in sigs]


def test_interrupts_leave_nothing(tmp_path):
    seed = int(os.environ.get("TCPLAB_INTERRUPT_SEED", secrets.randbits(32)))
    print(f"\ninterrupt seed {seed} (TCPLAB_INTERRUPT_SEED={seed} repeats it)")
    rng = random.Random(seed)
    out = str(tmp_path / "out")
    tag = secrets.token_hex(6)
    ports = lab_ports()
    baseline = {s[0] for s in host_lab_sockets(ports)}
    leaks = []

    t0 = time.monotonic()
    p = start(out, tag)
    _, err = p.communicate(timeout=120)
    duration = time.monotonic() - t0
    assert p.returncode == 0, err[-3000:]
    leaks += wait_clean(out, p.pid, tag, ports, baseline)

    tally = {}
    try:
        for i, (sig, target, delay) in enumerate(plan(rng, duration)):
            p = start(out, tag)
            try:
                p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                (os.killpg if target == "group" else os.kill)(p.pid, sig)
            _, err = p.communicate(timeout=60)
            rc = p.returncode
            what = f"#{i} {sig.name} to {target} at {delay:.2f} s (exit {rc})"
            assert rc in (0, 128 + sig, -sig), f"{what}: {err[-2000:]}"
            assert "Traceback" not in err, f"{what}: {err[-2000:]}"
            if sig == signal.SIGKILL and rc != 0:
                left = leftovers(out, p.pid, tag, ports, baseline)
                r = start(out, tag, "p01-machine")
                _, rerr = r.communicate(timeout=60)
                assert r.returncode == 0, rerr[-2000:]
                if left:
                    assert "left by an interrupted run" in rerr, f"{what}: {left}\n{rerr}"
                leaks += [f"{what}: {x}" for x in wait_clean(out, r.pid, tag, ports, baseline)]
            leaks += [f"{what}: {x}" for x in wait_clean(out, p.pid, tag, ports, baseline)]
            leaks += [f"{what}: {x}" for x in truncated_outputs(out)]
            key = f"{sig.name}/{target}" + ("/finished" if rc == 0 else "")
            tally[key] = tally.get(key, 0) + 1
    finally:
        for pid in tagged_pids(tag):
            os.kill(pid, signal.SIGKILL)
    print(f"interrupts {INTERRUPTS} over a {duration:.1f} s run: "
          + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    print(f"leaks found: {len(leaks)}")
    assert not leaks, "\n".join(leaks)
