#!/usr/bin/python3
"""accept-path report: accept() of a queued connection against a woken one, connection-per-request
load, and a slow-accept server whose accept queue overflows into 1 s SYN retransmissions."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402

NAME = "accept-path"
PLACEMENTS = ("any", "same", "split")
PHASES = (
    ("fast", "connection-per-request load, the server accepts at once"),
    ("burst", "slow accept, a burst of one-shot clients"),
    ("steady", "slow accept, clients that reconnect at once"),
)
SLICE_NS = 100_000_000   # queue timeline: one digit per 100 ms
# The write-up's connection-close benchmark (ASP.NET on Windows, 12 cores), before and after the
# spin lock was removed: requests/s, latency p50/p99/max in ms.
WRITEUP = {"net6.0 (spin lock)": (11753, 1.00, 22.58, 40.51),
           "net7.0 (gate)": (27213, 1.05, 2.26, 15.77)}


MAX_ELAPSED_S = 3600         # a phase lasts seconds; the queue timeline has one slot per 100 ms


def read_latency(raw, cpus):
    """latency-<cpus>.txt → {"pending": {...}, "wake": {...}}, or {"skipped": reason}."""
    path = os.path.join(raw, f"latency-{cpus}.txt")
    modes = {d.str("mode"): {k: v for k, v in t.numbers(d, ("mode", "cpus")).items() if k != "mode"}
             for d in t.read_kv_lines(path, "mode=")}
    if modes:
        for m, want in (("pending", "accept_call_"), ("wake", "wake_")):
            if m in modes:
                for h in ("median", "p95", "p99", "max"):
                    if f"{want}{h}_us" not in modes[m]:
                        raise t.RawError(f"{path}: mode={m} has no {want}{h}_us=")
                if "connect_median_us" not in modes[m]:
                    raise t.RawError(f"{path}: mode={m} has no connect_median_us=")
        if "wake" in modes and "wake_after_connect_median_us" not in modes["wake"]:
            raise t.RawError(f"{path}: mode=wake has no wake_after_connect_median_us=")
        return modes
    err = t.read_lines(os.path.join(raw, f"latency-{cpus}.txt.err"), optional=True)
    why = " ".join(err) if err is not None else "no output"
    return {"skipped": why or "no output"}


def warmups(raw):
    """The warm-up count accept_latency printed on its start line (latency-any.txt)."""
    return t.one_line(os.path.join(raw, "latency-any.txt"), "start ").int("warmup")


def read_client(path):
    """accept_client output → result dict with "buckets" {kind: [(lo, hi, count)]} and "errors"."""
    res, buckets, errors = None, {}, {}
    for line in t.read_lines(path):
        d = t.Fields(path, t.kv(line))
        if line.startswith("result "):
            res = t.numbers(d)
        elif line.startswith("bucket "):
            hi = None if d.str("hi_ms") == "inf" else d.int("hi_ms")   # the open last bucket
            buckets.setdefault(d.str("kind"), []).append((d.int("lo_ms"), hi, d.int("count")))
        elif line.startswith("error="):
            errors[d.str("error")] = d.int("count")
    if res is None:
        raise t.RawError(f"{path}: no result line")
    res = t.Fields(path, res)
    for k in ("start_ns", "concurrency", "duration_ms", "per_thread", "requests", "ok", "failed",
              "connect_over_900ms"):
        if not isinstance(res.str(k), int) or res[k] < 0:
            raise t.RawError(f"{path}: {k}={res[k]} is not a count")
    for k in ("elapsed_s", "rate_per_s"):
        if not 0 <= res.str(k) <= (MAX_ELAPSED_S if k == "elapsed_s" else 1e12):
            raise t.RawError(f"{path}: {k}={res[k]} is out of range")
    res = dict(res)
    res["buckets"], res["errors"] = buckets, errors
    return res


def read_queue(path, end_ns):
    """sockwatch -a samples of the LISTEN socket → [(t_ns, rq, wq)]."""
    return [(d.int("t_ns"), d.int("rq"), d.int("wq"))
            for d in t.read_sockwatch(path, end_ns) if d.get("state") == "LISTEN"]


def interval(path):
    """sockwatch's sampling interval, from its ready line, as "1 ms"."""
    us = t.one_line(path, "ready ").int("interval_us", 1)
    return f"{us / 1000:g} ms" if us >= 1000 else f"{us} us"


def queue_summary(samples, start_ns, end_ns):
    """Depth distribution, maximum, share of samples with the queue full, and a timeline with
    the deepest sample of each 100 ms slice from the client's start to its end."""
    if not samples:
        return None
    wq = samples[0][2]
    depth = {}
    for _, rq, _ in samples:
        depth[rq] = depth.get(rq, 0) + 1
    timeline = []
    for k in range(max(1, -(-(end_ns - start_ns) // SLICE_NS))):
        lo, hi = start_ns + k * SLICE_NS, start_ns + (k + 1) * SLICE_NS
        vals = [rq for ts, rq, _ in samples if lo <= ts < hi]
        timeline.append(max(vals) if vals else None)
    return {"samples": len(samples), "backlog": wq, "max": max(depth),
            "full_share": round(sum(n for d, n in depth.items() if d > wq) / len(samples), 4),
            "depth": dict(sorted(depth.items())), "timeline_max_per_100ms": timeline}


def read_synsent(path, start_ns):
    """sockwatch events of SYN-SENT sockets → per socket (the local address it was first seen
    with, the socket followed by its cookie: one that fails can be caught in TCP_CLOSE with its
    port released): first and last time seen (s after the client started) and the highest
    retrans count seen."""
    socks = {}
    for local, d in t.socket_keys(t.read_sockwatch(path), lambda d: d.str("local")):
        ts = round((d.int("t_ns") - start_ns) / 1e9, 3)
        s = socks.setdefault(local, {"first_s": ts, "last_s": ts, "max_retrans": 0})
        s["last_s"] = ts
        s["max_retrans"] = max(s["max_retrans"], d.int("retrans"))
    return socks


def read_requests(path):
    rows = [t.numbers(d, ("err",)) for d in t.read_kv_lines(path, "t_ms=")]
    for r in rows:
        for k in ("connect_us", "total_us", "err"):
            if k not in r:
                raise t.RawError(f"{path}: a request line has no {k}=")
        r["err"] = None if r["err"] == "0" else r["err"]   # an errno name, or null: no error
    return rows


def read_phase(raw, name):
    client = read_client(os.path.join(raw, f"{name}-client.txt"))
    start = int(client["start_ns"])
    end = start + int(client["elapsed_s"] * 1e9)
    spath = os.path.join(raw, f"{name}-server.txt")
    ready = t.listener_ready(spath)
    server = t.numbers(t.read_kv(spath), ("addr",))
    for k in ("backlog", "every_ms"):
        ready.int(k)
    for k in ("accepted", "served"):
        if not isinstance(server.get(k), int) or server[k] < 0:
            raise t.RawError(f"{spath}: no `exit {k}=` count (the server did not finish)")
    qpath = os.path.join(raw, f"{name}-queue.txt")
    ph = {"client": client, "server": server,
          "counters": t.read_counters_delta(os.path.join(raw, f"{name}-counters-delta.txt")),
          "queue": queue_summary(read_queue(qpath, end), start, end),
          "queue_interval": interval(qpath)}
    syn = os.path.join(raw, f"{name}-synsent.txt")
    ph["syn_sent"] = read_synsent(syn, start) if t.exists(syn) else None
    req = os.path.join(raw, f"{name}-requests.txt")
    ph["requests"] = read_requests(req) if t.exists(req) else None
    return ph


def dur(us):
    """A duration given in us, as "247 us" below 10 ms and "1102.2 ms" above."""
    return f"{us:.0f} us" if us < 10_000 else f"{us / 1e3:.1f} ms"


def latency_lines(lat):
    head = ("median", "p95", "p99", "max")
    lines = [f"  {'':<6} | {'queued: the accept() call':<31} | "
             f"{'woken: connect() start to accept() return':<41} | accept ret - connect ret",
             f"  {'cpus':<6} | " + " ".join(f"{h:>7}" for h in head) + " | "
             + " ".join(f"{h:>10}" for h in head) + f" | {'median':>7}"]
    for cpus in PLACEMENTS:
        r = lat.get(cpus)
        if r is None:
            continue
        if "skipped" in r:
            lines.append(f"  {cpus:<6} | skipped: {r['skipped']}")
            continue
        p, w = r.get("pending", {}), r.get("wake", {})
        lines.append(f"  {cpus:<6} | "
                     + " ".join(f"{p.get('accept_call_' + h + '_us', 0):>7.1f}" for h in head)
                     + " | " + " ".join(f"{w.get('wake_' + h + '_us', 0):>10.1f}" for h in head)
                     + f" | {w.get('wake_after_connect_median_us', 0):>7.1f}")
    lines.append("  connect() medians: " + ", ".join(
        f"{c} queued {lat[c]['pending']['connect_median_us']:.1f} / woken "
        f"{lat[c]['wake']['connect_median_us']:.1f} us"
        for c in PLACEMENTS if c in lat and "pending" in lat[c] and "wake" in lat[c]))
    return lines


def bucket_line(kind, buckets):
    cells = [f"{lo}-{'inf' if hi is None else hi} ms: {n}" for lo, hi, n in buckets if n]
    return f"  {kind} time per bucket: " + ", ".join(cells)


def queue_lines(q, interval):
    if q is None:
        return ["  accept queue: no samples"]
    dist = ", ".join(f"{d}: {n}" for d, n in q["depth"].items())
    tl = "".join("." if v is None else (str(v) if v < 10 else "+") for v in q["timeline_max_per_100ms"])
    return [f"  accept queue (LISTEN Recv-Q, {q['samples']} samples every {interval}; backlog "
            f"{q['backlog']}, so full at {q['backlog'] + 1}): depth max {q['max']}, "
            f"full in {q['full_share'] * 100:.1f}% of samples",
            f"    samples per depth: {dist}",
            f"    deepest sample per 100 ms from the client's start: {tl}"]


def client_lines(c):
    lines = [f"  {c['concurrency']} client thread(s), "
             + (f"{c['duration_ms']} ms window" if c["duration_ms"] else f"{c['per_thread']} request(s) each")
             + f": {c['requests']} requests, {c['ok']} ok, {c['failed']} failed in {c['elapsed_s']:.3f} s"
             f" = {c['rate_per_s']:.1f} ok/s"]
    if "latency_p50_us" in c:
        lines.append(f"  request latency p50 {dur(c['latency_p50_us'])}, p99 {dur(c['latency_p99_us'])},"
                     f" max {dur(c['latency_max_us'])}; connect() p50 {dur(c['connect_p50_us'])},"
                     f" p99 {dur(c['connect_p99_us'])}, max {dur(c['connect_max_us'])}")
    for kind in ("connect", "latency"):
        if kind in c["buckets"]:
            lines.append(bucket_line(kind, c["buckets"][kind]))
    lines.append(f"  connects that took over 900 ms (at least one SYN retransmission): "
                 f"{c['connect_over_900ms']}")
    if c["errors"]:
        lines.append("  failures: " + ", ".join(f"{e} x{n}" for e, n in c["errors"].items()))
    return lines


def syn_lines(syn, client):
    if syn is None:
        return []
    if not syn:
        return ["  SYN-SENT sockets lasting 1 ms or more (sockwatch): none"]
    retx = [s for s in syn.values() if s["max_retrans"] > 0]
    lines = [f"  SYN-SENT sockets lasting 1 ms or more (sockwatch): {len(syn)}; seen with a "
             f"retransmitted SYN: {len(retx)}, highest retrans {max(s['max_retrans'] for s in syn.values())};"
             f" last one left SYN-SENT at {max(s['last_s'] for s in syn.values()):.3f} s"]
    if not retx and client["connect_over_900ms"]:
        lines.append("    (a retransmitted SYN that finds room is answered within microseconds on loopback,"
                     " between two samples; the connect() times and TCPSynRetrans show it)")
    return lines


def request_lines(reqs):
    if not reqs or len(reqs) > 16:
        return []
    lines = ["  each request (ms after the client started): start, connect() done, reply read"]
    for r in sorted(reqs, key=lambda r: r["t_ms"]):
        lines.append(f"    {r['t_ms']:8.3f} {r['t_ms'] + r['connect_us'] / 1e3:10.3f}"
                     f" {r['t_ms'] + r['total_us'] / 1e3:10.3f}  {r['err'] or 0}")
    return lines


def phase_lines(title, ph, interval):
    s = ph["server"]
    c = ph["counters"]
    keys = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPSynRetrans", "TcpRetransSegs",
            "TcpExtTCPTimeouts", "TcpActiveOpens", "TcpPassiveOpens")
    return ([f"== {title}: accept_server backlog {s.get('backlog')}"
             + (f", one accept every {s.get('every_ms')} ms" if s["every_ms"] else
                ", accepts as fast as it can")
             + f"; accepted {s['accepted']}, served {s['served']}"]
            + client_lines(ph["client"]) + request_lines(ph["requests"])
            + syn_lines(ph["syn_sent"], ph["client"])
            + queue_lines(ph["queue"], interval)
            + ["  counter deltas:"] + t.counters_block({k: c.get(k) for k in keys}, "    "))


def verdict_lines(lat, phases):
    any_ = lat.get("any", {})
    p = any_.get("pending", {})
    w = any_.get("wake", {})
    b = phases.get("burst")
    lines = []
    if p:
        lines.append(f"accept() of a connection already in the queue: {p['accept_call_median_us']:.1f} us"
                     f" median, {p['accept_call_p99_us']:.1f} us p99: a plain system call that takes the"
                     " first child off the queue; nothing completes later, so there is no completion to"
                     " race with and no spin lock to fall back to a sleep (the .NET problem).")
    if w:
        lines.append(f"A sleeping accept() is woken {w['wake_median_us']:.1f} us (median) after the client"
                     f" starts connect(), {w['wake_after_connect_median_us']:+.1f} us from connect()"
                     " returning (" + ("negative: accept() returned first, the acceptor ran before the"
                                      " client got its CPU back)." if w['wake_after_connect_median_us'] < 0
                                      else "positive: connect() returned first, then the acceptor"
                                      " woke)."))
    if b:
        c = b["client"]
        k = b["counters"]
        lines.append(f"Accept queue overflow: {k.get('TcpExtListenOverflows')} ListenOverflows in the burst;"
                     f" {c['connect_over_900ms']} of {c['requests']} connects took over 900 ms,"
                     f" TCPSynRetrans {k.get('TcpExtTCPSynRetrans')}: the dropped SYNs came back after the"
                     " initial 1 s retransmission timeout.")
    return lines


def writeup_lines():
    lines = ["The write-up's connection-close benchmark (ASP.NET, Windows, 12 cores, load from another"
             " machine): requests/s, latency p50 / p99 / max ms:"]
    for k, (rps, p50, p99, mx) in WRITEUP.items():
        lines.append(f"  {k:<20} {rps:>7}/s  {p50:.2f} / {p99:.2f} / {mx:.2f}")
    return lines


def build(rawroot, outdir):
    raw = t.unit_dir(rawroot, NAME)
    info, sysctls = t.read_machine(os.path.join(raw, "machine.txt"), need=("kernel", "nproc"))
    lat = {c: read_latency(raw, c) for c in PLACEMENTS
           if t.exists(os.path.join(raw, f"latency-{c}.txt"))}
    if "pending" not in lat.get("any", {}):
        raise t.RawError(f"{raw}/latency-any.txt: no pending/wake lines")
    # a phase that left any file ran, and then needs all of them
    phases = {name: read_phase(raw, name) for name, _ in PHASES
              if any(t.exists(os.path.join(raw, f"{name}-{f}.txt"))
                     for f in ("client", "server", "queue", "counters-delta"))}
    load = t.load_average(os.path.join(raw, "loadavg.txt"))
    kernel = info.get("kernel")
    n = lat["any"]["pending"].get("n")
    lines = [f"{NAME}: accept() on Linux, after the .NET write-up on accepts of pending connections",
             f"kernel {kernel}, {info.get('nproc', '?')} CPU{'' if info.int('nproc', 0) == 1 else 's'};"
             " one network namespace, loopback; "
             f"tcp_syncookies={sysctls.get('net.ipv4.tcp_syncookies')}, "
             f"tcp_abort_on_overflow={sysctls.get('net.ipv4.tcp_abort_on_overflow')}, "
             # a sysctl this kernel does not have reads None (5.10, 6.1: no linear SYN backoff)
             "tcp_syn_linear_timeouts="
             f"{'absent' if sysctls.get('net.ipv4.tcp_syn_linear_timeouts') is None else sysctls['net.ipv4.tcp_syn_linear_timeouts']}",
             f"load average when collected: {t.fmt_load(load, 1)} (other work on the machine widens the tails)",
             "", "Verdict:"] + ["  " + x for x in verdict_lines(lat, phases)]
    lines += ["", f"== accept() latency, us ({n} iterations after {warmups(raw)} warm-ups; cpus: where the client"
              " and the acceptor thread ran: any = not pinned, same = one CPU, split = one each)"]
    lines += latency_lines(lat)
    for name, title in PHASES:
        if name in phases:
            lines += [""] + phase_lines(title, phases[name], phases[name]["queue_interval"])
    lines += [""] + writeup_lines()
    obj = {"experiment": NAME, "kernel": kernel, "nproc": info.int("nproc", 1),
           "collected_at": t.collected_at(raw), "load_average": load,
           "counters": None, "result": None, "errno": None, "elapsed_s": None,
           "sysctls": t.sysctls_json(sysctls, ("tcp_syncookies", "tcp_abort_on_overflow",
                                               "tcp_syn_linear_timeouts", "somaxconn",
                                               "tcp_max_syn_backlog")),
           "latency": lat, "phases": phases,
           "writeup": {k: dict(zip(("rps", "p50_ms", "p99_ms", "max_ms"), v)) for k, v in WRITEUP.items()}}
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
