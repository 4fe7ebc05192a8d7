"""lab_proc.py — start a tcplab program in a network namespace and read its stdout line by line
with a deadline, so tests wait for a `ready` line instead of sleeping.  Standard library only."""
import contextlib
import os
import pathlib
import queue
import secrets
import shutil
import signal
import subprocess
import threading

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETNS_SH = os.path.join(TOP, "experiments", "lib", "netns.sh")
# The first lines of a test's own collect script: collect.sh, then tl_init for a unit in one
# namespace (a wire unit's script writes its own: tl_wire_init)
COLLECT_HEAD = '#!/bin/sh\n. "$(dirname "$0")/../lib/collect.sh"\n'
COLLECT_INIT = COLLECT_HEAD + 'tl_init "$1"\n'


def kernel_report(unit, doc):
    """The source of a test unit's report (doc: its docstring's words) that reads only the
    kernel the unit ran on: UNIT.txt "UNIT: kernel K", UNIT.json {"kernel": K}."""
    return f'''"""{unit} report: {doc}."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t


def build(rawroot, outdir):
    d = t.unit_dir(rawroot, "{unit}")
    kernel = t.kernel_release(d)
    t.write_outputs(outdir, "{unit}", [f"{unit}: kernel {{kernel}}"], {{"kernel": kernel}})


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
'''


def exp_file(exp, folder, name):
    """A file of a test's own experiments directory (TCPLAB_EXPERIMENTS), in the folder run.sh
    looks in (docs/design.md, "Layout"): exp/FOLDER/NAME, FOLDER made.  FOLDER is the unit's
    report, or the unit itself when it feeds none."""
    d = os.path.join(str(exp), folder)
    os.makedirs(d, exist_ok=True)
    return pathlib.Path(d, name)


def experiments(parent, table, files=None):
    """A TCPLAB_EXPERIMENTS directory of a test's own, PARENT/exp: experiments/lib copied, the
    unit table TABLE, and FILES, {(folder, name): text} (exp_file).  A collect script's text is
    whole: COLLECT_INIT and a body, or lines of its own."""
    exp = pathlib.Path(parent, "exp")
    shutil.copytree(os.path.join(TOP, "experiments", "lib"), exp / "lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (exp / "units").write_text(table)
    for (folder, name), text in (files or {}).items():
        exp_file(exp, folder, name).write_text(text)
    return exp


class ProcError(Exception):
    """The program ended, or said nothing in time, before the line we waited for."""


class Proc:
    """A program started with `ip netns exec NS`; stdout lines queued by a reader thread."""

    def __init__(self, ns, argv):
        self.argv = ["ip", "netns", "exec", ns] + [str(a) for a in argv]
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = queue.Queue()
        self.stdout = []
        self.stderr = []
        self.readers = [threading.Thread(target=self._pump, daemon=True),
                        threading.Thread(target=self._drain, daemon=True)]
        for th in self.readers:
            th.start()

    def _pump(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_line(self, prefix, timeout=5.0):
        """The first line starting with prefix; ProcError when the program ends or timeout
        seconds pass first."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise ProcError(f"{self.argv}: no '{prefix}' line within {timeout} s") from None
            if line is None:
                rc = self.proc.wait()
                raise ProcError(f"{self.argv}: exited {rc}; stderr: {''.join(self.stderr)}")
            if line.startswith(prefix):
                return line

    def stop(self, timeout=5.0):
        """SIGTERM (if still running), wait, and return the exit status; SIGKILL after timeout."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        for th in self.readers:
            th.join(timeout)
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


@contextlib.contextmanager
def reaped(*procs):
    """The processes (subprocess.Popen) for a with block: killed and waited for when it ends,
    however it ends.  Yields the one process, or the tuple of them."""
    try:
        yield procs[0] if len(procs) == 1 else procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_in_ns(ns, argv, timeout=30):
    """Run argv to completion inside ns; returns the CompletedProcess (text)."""
    return subprocess.run(["ip", "netns", "exec", ns] + [str(a) for a in argv],
                          capture_output=True, text=True, timeout=timeout)


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


WIRE_SH = os.path.join(os.path.dirname(NETNS_SH), "wire.sh")


@contextlib.contextmanager
def wire(prefix="tcplab-test"):
    """A client and a server namespace joined as run.sh joins a wire unit's (netns.sh, then
    experiments/lib/wire.sh create: veth-c 192.0.2.1, veth-s 192.0.2.2, MTU 1500); yields
    (client, server), both deleted afterwards."""
    with netns(prefix + "-c") as c, netns(prefix + "-s") as s:
        subprocess.run([WIRE_SH, "create", c, s], check=True, capture_output=True)
        yield c, s


def tagged(name, tag):
    """The pids (as strings) of every process whose environment has NAME=TAG: what a test's run
    left running, wherever it went."""
    needle = f"{name}={tag}".encode()
    found = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(p)
        except OSError:
            pass
    return found
