"""The wire's rows for `make bench` (docs/bench.md), each measured side by side in one run:

  event vs packet  p01-synretry's scene on the wire (a full listener on the server side, a
                   blocking connect() with TCP_SYNCNT 2 on the client), RUNS times: sockwatch
                   -i 1000 on the client and the capture probe on veth-c.  For every
                   retransmission sockwatch saw (retrans=k), its event time minus the capture
                   time of SYN k+1; p50, p99, max, and the SYNs whose retransmission sockwatch
                   never showed (missed).  Target: p99 <= 1 ms, 0 missed.
  (the capture probe's CPU per packet against tcpdump -w's is tests/bench/bench_capture.py)
  wire setup       making and removing a wire unit's namespaces and veth pair against one
                   loopback unit's namespace, alternated pair by pair: a ratio of medians.

bench(bindir, runs) -> rows as tests/bench/bench.py prints them."""
import os
import statistics
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in ("experiments/report", "experiments/guest", "tests"):  # the libraries, lab_proc
    sys.path.insert(0, os.path.join(TOP, _p))
import lab_proc  # noqa: E402
import tcplab  # noqa: E402
import tcplab_pkt  # noqa: E402

PORT = 21013
SERVER = "192.0.2.2"


def one_synretry(bindir, c, s):
    """(offsets in ms, missed) of one p01-synretry-like run on the wire."""
    b = lambda p: os.path.join(bindir, p)  # noqa: E731
    with lab_proc.Proc(s, [b("listener"), "-a", SERVER, "-p", PORT, "-m", "full"]) as lst:
        lst.wait_line("ready ")
        with lab_proc.Proc(c, [b("capture"), "-i", "veth-c", "-p", PORT]) as cap, \
                lab_proc.Proc(c, [b("sockwatch"), "-4", "-e", "-i", "1000", "-s", "syn-sent",
                                  "-p", PORT]) as sw:
            cap.wait_line("ready ")
            sw.wait_line("ready ")
            r = lab_proc.run_in_ns(c, [b("connect_block"), "-a", SERVER, "-p", PORT, "-s", "2"])
            if "errno=ETIMEDOUT" not in r.stdout:
                raise RuntimeError(f"connect_block: {r.stdout.strip()} {r.stderr.strip()}")
            sw.wait_line("end ", timeout=10)
            cap.stop()
    syns = [int(tcplab.kv(x)["t_ns"]) for x in cap.stdout
            if x.startswith("t_s=") and " flags=S " in x and " dir=c>s " in x]
    end = [tcplab.kv(x) for x in cap.stdout if x.startswith("end ")]
    if not end or end[0].get("dropped") != "0":
        raise RuntimeError(f"capture: {end}")
    seen, offsets = set(), []
    for x in sw.stdout:
        if not x.startswith("t_s="):
            continue
        d = tcplab.kv(x)
        k = int(d["retrans"])
        if k > 0 and k not in seen and k < len(syns):
            seen.add(k)
            offsets.append((int(d["t_ns"]) - syns[k]) / 1e6)
    return offsets, (len(syns) - 1) - len(seen)


def event_vs_packet(bindir, runs):
    offsets, missed = [], 0
    with lab_proc.wire("tcplab-bench") as (c, s):
        for _ in range(runs):
            o, m = one_synretry(bindir, c, s)
            offsets += o
            missed += m
    p50, p99, mx = statistics.median(offsets), tcplab_pkt.nearest_rank(offsets, 99), max(offsets)
    ok = p99 <= 1.0 and missed == 0
    return {"name": "sockwatch event - capture time, retransmitted SYNs (ms)", "value": p99,
            "target": "<= 1 ms", "ok": ok,
            "note": f"p50 {p50:.3f} p99 {p99:.3f} max {mx:.3f} ms over {len(offsets)} SYNs "
                    f"in {runs} runs, {missed} missed (sockwatch -i 1000, capture on veth-c)"}


def wire_setup(runs):
    """The same code as the tests' namespaces and wires (lab_proc: netns.sh, wire.sh)."""
    wired, plain = [], []
    for _ in range(runs):
        t0 = time.monotonic()
        with lab_proc.netns("tcplab-bench-l"):
            pass
        plain.append(time.monotonic() - t0)
        t0 = time.monotonic()
        with lab_proc.wire("tcplab-bench"):
            pass
        wired.append(time.monotonic() - t0)
    w, p = statistics.median(wired), statistics.median(plain)
    return {"name": "wire unit setup+teardown / loopback unit's", "value": w / p, "target": None,
            "ok": None, "note": f"median {w * 1000:.0f} ms vs {p * 1000:.0f} ms over {runs} "
                                f"alternated pairs (two namespaces + veth pair + addresses vs one namespace)"}


def bench(bindir, runs=5):
    rows = []
    for f in (lambda: event_vs_packet(bindir, runs), lambda: wire_setup(max(runs, 10))):
        try:
            rows.append(f())
        except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError,
                lab_proc.ProcError) as e:
            rows.append({"name": "wire bench", "value": None, "target": None, "ok": False,
                         "note": f"not measured: {e}"})
    return rows


if __name__ == "__main__":
    build = os.path.join(TOP, os.environ.get("TCPLAB_BUILD", "build"), "bin")
    for r in bench(build, int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        v = "n/a" if r["value"] is None else f"{r['value']:.2f}"
        print(f"{r['name']:<58} {v:>7} {r['target'] or '':<8} {r['note']}")
