"""capture's cost for `make bench`: CPU per packet of `capture -w` against `tcpdump -w` on the
same traffic, both running at once in one fresh network namespace (a ping-pong of 1-byte
messages on lo), each one's CPU from its own rusage (wait4), each divided by the packets it
wrote.  See docs/capture.md ("What it costs, and when it drops").

bench(bindir, runs) -> [(name, value, target, ok, note)], like tests/bench/bench_poll_scaling.py; a
value is None when it could not be measured."""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in ("experiments/report", "experiments/guest", "tests"):  # the libraries, lab_proc
    sys.path.insert(0, os.path.join(TOP, _p))
import lab_proc  # noqa: E402
import tcplab  # noqa: E402

PORT = 21500
ROUNDS = 5000          # request/response rounds: about 4 packets each (data and ACK both ways)
READY_S = 10.0

PINGPONG = f"""
import socket
ls = socket.socket(); ls.bind(("127.0.0.1", {PORT})); ls.listen()
c = socket.create_connection(("127.0.0.1", {PORT})); s, _ = ls.accept()
for x in (c, s):
    x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range({ROUNDS}):
    c.send(b"x"); s.recv(1); s.send(b"y"); c.recv(1)
c.close(); s.close(); ls.close()
"""


def wait_for(path, word, proc):
    """Poll path until it holds word; RuntimeError when proc ends or READY_S passes first."""
    deadline = time.monotonic() + READY_S
    while True:
        try:
            with open(path) as f:
                if word in f.read():
                    return
        except FileNotFoundError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no '{word}' in {path}")
        time.sleep(0.01)


def stop(proc):
    """SIGTERM, reap with wait4: CPU seconds (user + system)."""
    proc.send_signal(signal.SIGTERM)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


def one_run(ns, bindir, d, extra):
    """(capture CPU/packet, tcpdump CPU/packet, capture's end line as a dict, tcpdump packets)."""
    cap_out, td_err = os.path.join(d, "c.txt"), os.path.join(d, "t.err")
    with open(cap_out, "w") as co, open(td_err, "w") as te:
        cap = subprocess.Popen(["ip", "netns", "exec", ns, os.path.join(bindir, "capture"), "-i",
                                "lo", "-p", str(PORT), "-w", os.path.join(d, "c.pcap"), *extra],
                               stdout=co, stderr=subprocess.STDOUT)
        td = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "-i", "lo", "-U", "-w",
                               os.path.join(d, "t.pcap"), f"tcp port {PORT} or icmp"],
                              stdout=subprocess.DEVNULL, stderr=te)
    try:
        wait_for(cap_out, "ready ", cap)
        wait_for(td_err, "listening on", td)
        lab_proc.run_in_ns(ns, [sys.executable, "-c", PINGPONG], timeout=120).check_returncode()
    finally:
        cap_cpu, td_cpu = stop(cap), stop(td)
    with open(cap_out) as f:
        end = tcplab.kv([ln for ln in f if ln.startswith("end ")][-1])
    r = subprocess.run(["tcpdump", "-r", os.path.join(d, "t.pcap")], capture_output=True,
                       text=True, timeout=60)
    td_n = len(r.stdout.splitlines())
    return cap_cpu / max(int(end["packets"]), 1), td_cpu / max(td_n, 1), end, td_n


def row(ns, bindir, runs, extra, label, target):
    per, notes = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="tcplab-bench-capture-") as d:
            os.chmod(d, 0o777)          # tcpdump writes its file as user tcpdump
            c, t, end, td_n = one_run(ns, bindir, d, extra)
        per.append((c / t, c, t))
        notes.append(f"{end['packets']}/{td_n} dropped={end['dropped']}")
    ratio = statistics.median(p[0] for p in per)
    note = (f"min {min(p[0] for p in per):.2f} median {ratio:.2f} max {max(p[0] for p in per):.2f}"
            f" over {runs} runs; capture {statistics.median(p[1] for p in per) * 1e6:.1f} us, "
            f"tcpdump -w {statistics.median(p[2] for p in per) * 1e6:.1f} us per packet "
            f"(medians); packets capture/tcpdump and capture's dropped: {', '.join(notes)}")
    ok = None if target is None else ratio <= target
    return (label, ratio, None if target is None else f"<= {target}", ok, note)


def bench(bindir, runs=3):
    if shutil.which("tcpdump") is None:
        return [("capture: CPU per packet / tcpdump -w", None, "<= 1", False,
                 "not measured: tcpdump is not installed")]
    with lab_proc.netns("tcplab-bench") as ns:
        return [row(ns, bindir, runs, [], "capture: CPU per packet / tcpdump -w (same traffic)",
                    1),
                row(ns, bindir, runs, ["-s", "262144"],
                    "capture -s 262144: CPU per packet / tcpdump -w (same traffic)", None)]


if __name__ == "__main__":
    for r in bench(os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"), "bin")):
        print(r)
