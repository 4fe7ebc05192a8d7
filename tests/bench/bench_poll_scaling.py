"""poll-scaling ratios for `make bench`, measured side by side in one fresh network namespace.

bench(bindir) -> [(name, value, target, ok)]: value is a float (None when it could not be
measured), target a string such as ">= 0.85" or None, ok True/False, or None when there is no
target.  The helpers (namespace, server start with readiness polling, load runs) are shared with
tests/test_poll_scaling.py.  See docs/poll-scaling.md."""
import os
import select
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in ("experiments/report", "experiments/guest", "tests"):  # the libraries, lab_proc
    sys.path.insert(0, os.path.join(TOP, _p))
import lab_proc  # noqa: E402
import tcplab  # noqa: E402

PORT = 21400
READY_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 10.0


kv = tcplab.kv


def netns():
    """A fresh namespace made as run.sh makes them (experiments/lib/netns.sh), deleted afterwards."""
    return lab_proc.netns("tcplab-bench")


def pinning():
    """(server args, client args): server on CPU 1 and client on CPU 0 when both are ours,
    as experiments/poll-scaling/poll-scaling.sh does; nothing otherwise."""
    cpus = os.sched_getaffinity(0)
    if {0, 1} <= cpus:
        return ["-C", "1"], ["-C", "0"]
    return [], []


class Server:
    """echo_server running in a namespace; start() returns once it printed its `ready` line."""

    def __init__(self, ns, bindir, backend, port=PORT, extra=()):
        argv = ["ip", "netns", "exec", ns, os.path.join(bindir, "echo_server"),
                "-p", str(port), "-b", backend, *extra]
        # `ip netns exec` execs the program: proc.pid is echo_server's pid.
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     bufsize=0)
        self.head = b""
        self.stdout = ""
        self.stderr = ""
        self.ready = self._wait_ready()
        self.pid = int(self.ready["pid"])

    def _wait_ready(self):
        """Poll stdout for the ready line; raise when the server exits or times out first."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        fd = self.proc.stdout.fileno()
        while not any(x.startswith(b"ready ") for x in self.head.split(b"\n")[:-1]):
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise RuntimeError("echo_server: no ready line after %.0f s" % READY_TIMEOUT_S)
            r, _, _ = select.select([fd], [], [], left)
            chunk = os.read(fd, 4096) if r else b""
            if r and not chunk:
                self.stop()
                raise RuntimeError("echo_server exited before ready: " + self.stderr.strip())
            self.head += chunk
        line = next(x for x in self.head.decode().splitlines() if x.startswith("ready "))
        return kv(line)

    def wait(self, timeout=STOP_TIMEOUT_S):
        """Wait for the server to end by itself; returns its exit status."""
        out, err = self.proc.communicate(timeout=timeout)
        self.stdout = (self.head + out).decode()
        self.stderr = err.decode()
        return self.proc.returncode

    def stop(self):
        """SIGTERM, then collect its output; SIGKILL if it does not end.  Returns the status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.wait()
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.wait()

    def lines(self, prefix):
        return [kv(x) for x in self.stdout.splitlines() if x.startswith(prefix)]


def run_load(ns, bindir, args, timeout=60):
    """echo_load with args in ns → (exit status, result dict or None, stdout, stderr)."""
    r = subprocess.run(["ip", "netns", "exec", ns, os.path.join(bindir, "echo_load"), *args],
                       capture_output=True, text=True, timeout=timeout)
    res = next((kv(x) for x in r.stdout.splitlines() if x.startswith("result ")), None)
    return r.returncode, res, r.stdout, r.stderr


def measure(ns, bindir, backend, k, window_ms=2000):
    """One step as the lab runs it → (req/s, server CPU us per request), or None when the
    step did not complete."""
    srv_pin, cli_pin = pinning()
    srv = Server(ns, bindir, backend, extra=srv_pin)
    try:
        rc, res, _, _ = run_load(ns, bindir, ["-p", str(PORT), "-k", str(k), "-w",
                                              str(window_ms), "-P", str(srv.pid), *cli_pin])
    finally:
        srv.stop()
    window = srv.lines("stats reason=usr1 ")[1:2]
    if rc != 0 or res is None or res["errno"] != "none" or not window:
        return None
    rate = float(res["req_s"])
    return rate, float(window[0]["cpu_pct"]) * 1e4 / rate if rate else None


def selftest(ns, bindir, window_ms=2000):
    _, cli_pin = pinning()
    rc, res, _, _ = run_load(ns, bindir, ["-s", "-w", str(window_ms), *cli_pin])
    if rc != 0 or res is None or res["errno"] != "none":
        return None
    return float(res["req_s"]), None


def best(values):
    """The fastest of the rounds: (req/s, server CPU us per request) or (None, None)."""
    good = [v for v in values if v is not None]
    return max(good, key=lambda v: v[0]) if good else (None, None)


def div(a, b):
    return round(a / b, 3) if a is not None and b else None


def bench(bindir, rounds=5, window_ms=1000):
    """The three ratios, each side of a ratio measured in the same rounds, interleaved, the
    fastest round kept (interference from other work only ever slows a round down)."""
    runs = {"e0": [], "e5000": [], "s0": [], "s900": [], "self": []}
    with netns() as ns:
        for _ in range(rounds):
            runs["e0"].append(measure(ns, bindir, "epoll", 0, window_ms))
            runs["e5000"].append(measure(ns, bindir, "epoll", 5000, window_ms))
            runs["s0"].append(measure(ns, bindir, "select", 0, window_ms))
            runs["s900"].append(measure(ns, bindir, "select", 900, window_ms))
            runs["self"].append(selftest(ns, bindir, window_ms))
    b = {key: best(v)[0] for key, v in runs.items()}
    cpu = {key: best(v)[1] for key, v in runs.items()}
    epoll_ratio = div(b["e5000"], b["e0"])
    select_ratio = div(b["s900"], b["s0"])
    headroom = div(b["self"], b["e0"])
    return [
        ("poll-scaling: epoll req/s at 5000 idle / at 0 idle", epoll_ratio, ">= 0.85",
         epoll_ratio is not None and epoll_ratio >= 0.85),
        ("poll-scaling: select req/s at 900 idle / at 0 idle (the collapse)", select_ratio,
         None, None),
        ("poll-scaling: load client self-test req/s / epoll server req/s at 0 idle", headroom,
         "> 1", headroom is not None and headroom > 1),
        # Not limited by the client nor by other load on the machine: the server's own cost.
        ("poll-scaling: epoll server CPU per request at 5000 idle / at 0 idle",
         div(cpu["e5000"], cpu["e0"]), None, None),
        ("poll-scaling: select server CPU per request at 900 idle / at 0 idle",
         div(cpu["s900"], cpu["s0"]), None, None),
    ]


if __name__ == "__main__":
    import sys
    for name, value, target, ok in bench(sys.argv[1] if len(sys.argv) > 1 else
                                         os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"), "bin")):
        print(f"{name:<72} {value!s:>7}  target {target or '-':<7} "
              f"{'-' if ok is None else 'ok' if ok else 'MISSED'}")
