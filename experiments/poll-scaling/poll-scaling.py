#!/usr/bin/python3
"""poll-scaling report: req/s and latency of an echo server over select, poll and epoll as idle
connections grow, the server's wait and work time per call, where select refused an fd, and a
gnuplot SVG of req/s and p99 against idle connections.  See docs/poll-scaling.md."""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402

NAME = "poll-scaling"
BACKENDS = ("select", "poll", "epoll")
# The write-up's Node.js client (req/s by idle connections): PHP 8.5 stream_select() server,
# which failed with 1028 connections open, and the PHP 8.6 Polling API with its epoll backend.
WRITEUP = {
    "select": {0: 187762, 256: 121190, 512: 72233, 900: 45840},
    "epoll": {0: 181275, 256: 181559, 512: 168620, 900: 178061, 2000: 177611, 5000: 160209},
}
WRITEUP_SELECT_FAILED_CONNS = 1028


MAX_STEPS = 100        # K values, and rounds per step: the plan is a few of each


def plan(raw):
    path = os.path.join(raw, "plan.txt")
    p = t.read_kv(path)
    ks = [t.num(k, f"{path}: ks", 0, 1_000_000) for k in p.str("ks").split(",")]
    backends = p.str("backends").split(",")
    if len(ks) > MAX_STEPS or not all(isinstance(k, int) for k in ks):
        raise t.RawError(f"{path}: ks= is not a short list of integers")
    if not set(backends) <= set(BACKENDS) or len(set(backends)) != len(backends):
        raise t.RawError(f"{path}: backends= names other than {','.join(BACKENDS)}")
    if p.get("ks_not_run") and not (p.get("load_fds") and p.get("nofile_hard")):
        raise t.RawError(f"{path}: ks_not_run= without load_fds= and nofile_hard=")
    return {
        "ks": ks,
        "backends": backends,
        "window_ms": p.int("window_ms", 1),
        "warmup_ms": p.int("warmup_ms"),
        "rounds": p.int("rounds", 1, MAX_STEPS),
        "quick": p.get("quick") == "1",
        "pin": p.get("pin", "none"),
        "pin_cpus": None if p.get("pin", "none") == "none" else pin_cpus(p["pin"], path),
        "tcp_ehash_entries": p.get("tcp_ehash_entries") or None,
        # absent in raw data collected before the K list followed the file limit
        "guest": p.get("guest") == "1",
        "nofile_soft": nofile(p, "nofile_soft", path),
        "nofile_hard": nofile(p, "nofile_hard", path),
        "load_fds": p.int("load_fds", 0, 1000, None),
        "ks_not_run": [t.num(k, f"{path}: ks_not_run", 0, 1_000_000)
                       for k in p.get("ks_not_run", "").split(",") if k],
    }


def nofile(p, key, path):
    """An RLIMIT_NOFILE of plan.txt: a number, "unlimited", or None when not recorded."""
    v = p.get(key)
    if v is None or v == "unlimited":
        return v
    return t.num(v, f"{path}: {key}", 0, t.MAX_INT)


def meminfo(raw, p):
    """/proc/meminfo (kB) once each step's idle connections were open, round 1: {(b, k): {...}};
    empty for raw data collected before the unit sampled it."""
    out = {}
    for b in p["backends"]:
        for k in p["ks"]:
            path = os.path.join(raw, f"{b}-k{k}-r1-meminfo.txt")
            if not t.exists(path):
                continue
            d = {}
            for line in t.read_lines(path):
                name, _, rest = line.partition(":")
                words = rest.split()
                if len(words) != 2 or words[1] != "kB":
                    raise t.RawError(f"{path}: {line[:40]!r} is not 'Name: N kB'")
                d[name] = t.num(words[0], f"{path}: {name}", 0)
            for need in ("MemTotal", "MemAvailable", "Slab"):
                if need not in d:
                    raise t.RawError(f"{path}: no {need}:")
            out[(b, k)] = d
    return out


def memory_line(mem):
    """One line: MemAvailable and Slab at the smallest and the largest K sampled (the backend
    with the least MemAvailable there)."""
    if not mem:
        return []
    ks = sorted({k for _, k in mem})
    lo = min((d for (_, k), d in mem.items() if k == ks[0]), key=lambda d: d["MemAvailable"])
    hib, hi = min(((b, d) for (b, k), d in mem.items() if k == ks[-1]),
                  key=lambda x: x[1]["MemAvailable"])
    return [f"memory once the idle connections were open (/proc/meminfo, round 1): MemTotal "
            f"{hi['MemTotal']} kB; MemAvailable {lo['MemAvailable']} kB at K={ks[0]}, "
            f"{hi['MemAvailable']} kB at K={ks[-1]} ({hib}); Slab {lo['Slab']} kB -> {hi['Slab']} kB"]


def limit_lines(p, run_s, raw):
    """Why K is what it is: the file limit the unit ran with, the K it left out, and, in a QEMU
    guest, why one round (the numbers are the run's own: plan.txt, elapsed.txt)."""
    out = []
    if t.under_vm(raw):
        out.append("where: " + t.where(raw))
    if p["nofile_hard"] is not None and p["load_fds"] is not None:
        out.append(f"RLIMIT_NOFILE of the unit: soft {p['nofile_soft']}, hard {p['nofile_hard']};"
                   f" echo_load needs K + {p['load_fds']} fds, so a K above the hard limit minus "
                   f"{p['load_fds']} is not run")
    for k in p["ks_not_run"]:
        out.append(f"K={k} not run: echo_load needs {k + p['load_fds']} fds, more than the hard "
                   f"RLIMIT_NOFILE {p['nofile_hard']}")
    if p["guest"] and run_s is not None:
        out.append(f"{p['rounds']} round(s) per step in a QEMU guest (TL_GUEST): this run took "
                   f"{run_s:.0f} s, {run_s / p['rounds']:.0f} s a round under emulation; the "
                   "host's 5 rounds would pass the unit's limit_s (experiments/units)")
    return out


def server_window(path):
    """The server's stats for the measured window: the second SIGUSR1 line (the first covers
    start-up and warm-up), or None when the server never got there."""
    lines = t.read_kv_lines(path, "stats reason=usr1 ")
    if len(lines) < 2:
        return None
    d = t.numbers(lines[1], ("reason", "backend"))
    for k in ("ready_per_call", "work_us_per_call", "wait_us_per_call", "calls_s", "conns",
              "cpu_pct"):
        if k not in d or d[k] < 0:
            raise t.RawError(f"{path}: the window's stats line has no {k}=")
    return d


def read_round(raw, backend, k, r):
    """One step's raw files → a dict, or None when the step was skipped."""
    base = os.path.join(raw, f"{backend}-k{k}-r{r}")
    if t.exists(base + "-skipped.txt"):
        return None
    res = load_result(base + "-load.txt")
    srv_lines = t.read_lines(base + "-server.txt")
    t.listener_ready(base + "-server.txt", addr=False)     # a server that printed no ready line never ran
    rc = t.read_lines(base + "-server.rc")
    out = {"round": r, "load": res,
           "server_rc": t.num(rc[0] if rc else "", f"{base}-server.rc: exit status", 0, 255),
           "server": server_window(base + "-server.txt"),
           "rlimit": next((t.kv(x) for x in srv_lines if x.startswith("rlimit_nofile=")), None),
           "refused": next((t.kv(x) for x in srv_lines if x.startswith("refused ")), None),
           # run.sh deletes stderr files that stayed empty
           "server_stderr": t.read_lines(base + "-server.txt.err", optional=True) or []}
    if out["refused"] is not None:
        f = t.Fields(base + "-server.txt", out["refused"])
        out["refused"] = {"fd": f.int("fd"), "fd_setsize": f.int("fd_setsize"),
                          "conns": f.int("conns")}
    return out


LOAD_NUMBERS = ("req_s", "p50_us", "p99_us", "max_us", "mean_us", "requests", "mismatches",
                "unanswered", "cpu_pct", "sys_cpu_pct", "steal_pct", "active", "size")


def load_result(path):
    """echo_load's result line → numbers (errno stays a name)."""
    d = t.numbers(t.one_line(path, "result "), ("errno",))
    for k in LOAD_NUMBERS + ("errno",):
        if k not in d:
            raise t.RawError(f"{path}: the result line has no {k}=")
    for k in ("active", "size", "requests"):
        if not isinstance(d[k], int) or d[k] < (0 if k == "requests" else 1):
            raise t.RawError(f"{path}: {k}={d[k]} is not a count")
    return d


def per_req(cpu_pct, req_s):
    """CPU microseconds per request from a CPU share (100 = one CPU busy) and a rate."""
    return round(cpu_pct * 1e4 / req_s, 3) if req_s else None


def other_cpu(machine, server, client):
    """CPU share (100 = one CPU) the machine spent on anything but server and client: other
    programs, and kernel time charged to neither.  -1 when /proc/stat was unreadable."""
    if machine < 0:
        return -1.0
    return round(max(0.0, machine - server - client), 1)


def row_of(k, rounds):
    """The table row of one step: the fastest clean round, with every round's req/s."""
    ran = [x for x in rounds if x is not None]
    if not ran:
        return {"k": k, "status": "skipped"}
    clean = [x for x in ran if x["load"]["errno"] == "none" and x["server"] is not None]
    if not clean:
        x = ran[0]
        refused = x["refused"]
        return {"k": k, "status": "refused" if refused else "failed",
                "errno": x["load"]["errno"], "server_exit": x["server_rc"],
                "refused": refused, "message": " ".join(x["server_stderr"]).strip() or None}
    best = max(clean, key=lambda x: x["load"]["req_s"])
    ld, sv = best["load"], best["server"]
    ready = float(sv["ready_per_call"])
    work = float(sv["work_us_per_call"])
    if ld["req_s"] <= 0:
        return {"k": k, "status": "failed", "errno": "no requests answered",
                "server_exit": best["server_rc"], "refused": None, "message": None}
    return {
        "k": k, "status": "ok", "req_s": ld["req_s"], "p50_us": ld["p50_us"],
        "p99_us": ld["p99_us"], "max_us": ld["max_us"], "mean_us": ld["mean_us"],
        "requests": ld["requests"], "mismatches": ld["mismatches"],
        "unanswered": ld["unanswered"],
        "server_wait_us_per_call": float(sv["wait_us_per_call"]),
        "server_work_us_per_call": work,
        "server_work_us_per_ready": round(work / ready, 3) if ready > 0 else None,
        "server_ready_per_call": ready, "server_calls_s": sv["calls_s"],
        "server_conns": int(sv["conns"]), "server_cpu_pct": float(sv["cpu_pct"]),
        "client_cpu_pct": ld["cpu_pct"], "machine_cpu_pct": ld["sys_cpu_pct"],
        "other_cpu_pct": other_cpu(ld["sys_cpu_pct"], float(sv["cpu_pct"]), ld["cpu_pct"]),
        "disturbed": other_cpu(ld["sys_cpu_pct"], float(sv["cpu_pct"]),
                               ld["cpu_pct"]) > DISTURBED_PCT,
        "server_cpu_us_per_req": per_req(float(sv["cpu_pct"]), ld["req_s"]),
        "client_cpu_us_per_req": per_req(ld["cpu_pct"], ld["req_s"]),
        "steal_pct": ld["steal_pct"], "round": best["round"],
        "rounds_req_s": [x["load"]["req_s"] if x in clean else None for x in ran],
        "errno": None,
    }


def selftest(raw, rounds):
    best = None
    for r in range(1, rounds + 1):
        path = os.path.join(raw, f"selftest-r{r}.txt")
        if not t.exists(path):
            continue
        d = load_result(path)
        if d["errno"] == "none" and d["req_s"] > 0 and (best is None or d["req_s"] > best["req_s"]):
            best = d
    return best


def ratio(rows, k, k0=0):
    by = {r["k"]: r for r in rows if r.get("status") == "ok"}
    if k in by and k0 in by and by[k0]["req_s"]:
        return round(by[k]["req_s"] / by[k0]["req_s"], 3)
    return None


# A row whose window saw more than this share of a CPU used by anything but the two programs is
# marked: its req/s and latencies say more about the machine than about the backend.
DISTURBED_PCT = 25.0

HEAD = (f"{'idle':>6} {'req/s':>8} {'vs K=0':>7} {'p50 us':>8} {'p99 us':>8} {'max us':>9} "
        f"{'wait us':>8} {'work us':>8} {'ready':>6} {'work us':>8} {'srv cpu':>8} "
        f"{'cpu% srv':>8} {'cli':>4} {'other':>5}")
HEAD2 = (f"{'':>6} {'':>8} {'':>7} {'':>8} {'':>8} {'':>9} "
         f"{'/call':>8} {'/call':>8} {'/call':>6} {'/ready':>8} {'us/req':>8} {'':>8} {'':>4} "
         f"{'':>5}")


def table_lines(backend, rows):
    k0 = next((r for r in rows if r["k"] == 0 and r["status"] == "ok"), None)
    out = [HEAD, HEAD2]
    for r in rows:
        if r["status"] == "ok":
            rel = f"{r['req_s'] / k0['req_s']:.2f}" if k0 and k0["req_s"] else "-"
            wr = r["server_work_us_per_ready"]
            wr = f"{wr:.1f}" if wr is not None else "-"
            out.append(
                f"{r['k']:>6} {r['req_s']:>8} {rel:>7} {r['p50_us']:>8.1f} {r['p99_us']:>8.1f} "
                f"{r['max_us']:>9.1f} {r['server_wait_us_per_call']:>8.1f} "
                f"{r['server_work_us_per_call']:>8.1f} {r['server_ready_per_call']:>6.2f} "
                f"{wr:>8} {r['server_cpu_us_per_req']:>8.1f} {r['server_cpu_pct']:>8.0f} "
                f"{r['client_cpu_pct']:>4.0f} {r['other_cpu_pct']:>5.0f}"
                f"{' *' if r['disturbed'] else ''}")
        elif r["status"] == "refused":
            f = r["refused"]
            out.append(f"{r['k']:>6}  refused: fd {f['fd']} >= FD_SETSIZE ({f['fd_setsize']}) "
                       f"with {f['conns']} connections open; echo_server exit "
                       f"{r['server_exit']}, client saw {r['errno']}")
        elif r["status"] == "skipped":
            out.append(f"{r['k']:>6}  not run: {backend} had already refused at a smaller K")
        else:
            out.append(f"{r['k']:>6}  failed: client saw {r['errno']}, server exit "
                       f"{r['server_exit']}")
    return out


def plot(outdir, backends, refused_fd_setsize, active, size):
    """poll-scaling.svg through gnuplot (tcplab.tool_svg).  Returns the temporary file (or
    None) and the line for the report."""
    if shutil.which("gnuplot") is None:
        return None, "plot: gnuplot not available"
    blocks, plots_rate, plots_p99 = [], [], []
    for b in BACKENDS:
        pts = [r for r in backends.get(b, []) if r.get("status") == "ok"]
        if not pts:
            continue
        blocks.append(f"${b} << EOD\n" + "".join(
            f"{r['k']} {r['req_s']} {r['p99_us']}\n" for r in pts) + "EOD\n")
        plots_rate.append(f"${b} using 1:2 with linespoints pointtype 7 pointsize 0.6 title '{b}'")
        plots_p99.append(f"${b} using 1:3 with linespoints pointtype 7 pointsize 0.6 title '{b}'")
    if not plots_rate:
        return None, "plot: no data"
    fd_line = ""
    if refused_fd_setsize:
        fd_line = (f"set arrow 1 from {refused_fd_setsize}, graph 0 to {refused_fd_setsize}, "
                   f"graph 1 nohead dashtype 2\nset label 1 'FD_SETSIZE {refused_fd_setsize}:"
                   f" select stops' at {refused_fd_setsize}, graph 0.05 offset 0.5,0 "
                   "noenhanced\n")
    script = ("".join(blocks) +
              f"set multiplot layout 1,2 title 'echo server, {active} active connections, {size} B "
              "request/response'\nset grid\n"
              "set xlabel 'idle connections (K)'\nset xrange [-100:*]\nset yrange [0:*]\n" +
              fd_line + "set key right center\nset ylabel 'requests/s'\nset title 'throughput'\n"
              "plot " + ", ".join(plots_rate) + "\n"
              "set key left top\nset ylabel 'p99 latency (us)'\nset title 'p99 latency'\n"
              "plot " + ", ".join(plots_p99) + "\nunset multiplot\n")
    tmp, why = t.tool_svg(os.path.join(outdir, NAME + ".svg"),
                          lambda out: (["gnuplot"], "set terminal svg size 1000,420 dynamic "
                                       f"font 'sans,12'\nset output {t.gnuplot_str(out)}\n"
                                       + script))
    if tmp is None:
        return None, f"plot: {why}"
    # renamed by build() only once the .txt and .json are written: a refusal leaves the old set
    return tmp, f"plot: {NAME}.svg (req/s and p99 against idle connections)"


def elapsed(raw):
    d = t.read_kv(os.path.join(raw, "elapsed.txt"), optional=True)
    if d is None:
        return None
    return round(d.float("uptime_end_s") - d.float("uptime_start_s", 0, d.float("uptime_end_s")), 6)


def kernel(raw):
    if t.exists(os.path.join(raw, "machine.txt")):
        return t.kernel_release(raw)
    lines = t.read_lines(os.path.join(raw, "uname.txt"))
    if not lines or not lines[0].strip():
        raise t.RawError(f"{raw}/uname.txt: empty (and no machine.txt)")
    return lines[0].strip()


def first_rlimit(raw, p):
    for b in p["backends"]:
        for k in p["ks"]:
            path = os.path.join(raw, f"{b}-k{k}-r1-server.txt")
            if t.exists(path):
                for line in t.read_lines(path):
                    if line.startswith("rlimit_nofile="):
                        f = t.Fields(path, t.kv(line))
                        return {key: f.int(key) for key in ("rlimit_nofile", "was", "hard")}
    return None


def pin_cpus(pin, path="plan.txt"):
    """plan.txt's pin=server:1,client:0 → {"server": 1, "client": 0}."""
    out = {}
    for part in pin.split(","):
        who, sep, cpu = part.partition(":")
        if not sep or who not in ("server", "client"):
            raise t.RawError(f"{path}: pin={pin[:40]} is not none or server:N,client:N")
        out[who] = t.num(cpu, f"{path}: pin", 0, 4095)
    return out


def header_lines(p, kern, ncpu):
    pin = "not pinned" if p["pin"] == "none" else ", ".join(
        f"{who} on CPU {cpu}" for who, cpu in pin_cpus(p["pin"]).items())
    return [
        f"{NAME}: RFC 862 echo server over select, poll and epoll (all level-triggered) "
        "while K idle connections stay open",
        f"{p['active']} active connections, {p['size']}-byte request and reply, {p['window_ms'] / 1000:.3f} s "
        f"window per step after {p['warmup_ms'] / 1000:.3f} s warm-up; fastest of "
        f"{p['rounds']} round(s) per step{' (quick)' if p['quick'] else ''}",
        f"kernel {kern}, {ncpu} CPU(s) shared by client and server over loopback; {pin}",
        "",
        "wait = time inside select/poll/epoll_wait per call; work = time between calls (set "
        "building, scanning, recv/send);",
        "ready = fds handled per call; srv cpu us/req = server CPU time per request; cpu% = "
        "server, client, and everything else on the machine",
        f"(100 = one CPU) during the window; * = other work took over {DISTURBED_PCT:.0f}% of a "
        "CPU: that row's req/s and latency are disturbed",
    ]


def cpu_ratio(rows, k, k0=0):
    by = {r["k"]: r for r in rows if r.get("status") == "ok"}
    if k in by and k0 in by and by[k0]["server_cpu_us_per_req"]:
        return round(by[k]["server_cpu_us_per_req"] / by[k0]["server_cpu_us_per_req"], 3)
    return None


def fmt(v):
    return "-" if v is None else f"{v:.3f}"


def ratio_lines(backends, st):
    ep, se, po = backends.get("epoll", []), backends.get("select", []), backends.get("poll", [])
    out = ["", f"{'at K / at 0 idle':<22} {'req/s':>8} {'server CPU/req':>15} "
           f"{'write-up req/s':>15}"]
    for name, rows, k, wk in (("epoll  K=5000", ep, 5000, "epoll"),
                              ("epoll  K= 900", ep, 900, "epoll"),
                              ("poll   K=5000", po, 5000, None),
                              ("poll   K= 900", po, 900, None),
                              ("select K= 900", se, 900, "select")):
        wr = WRITEUP[wk][k] / WRITEUP[wk][0] if wk else None
        out.append(f"  {name:<20} {fmt(ratio(rows, k)):>8} {fmt(cpu_ratio(rows, k)):>15} "
                   f"{fmt(wr):>15}")
    e0 = next((r for r in ep if r["k"] == 0 and r["status"] == "ok"), None)
    if st and e0:
        out.append(f"load client self-test: {st['req_s']} req/s against a bare in-process "
                   f"epoll echo thread = {st['req_s'] / e0['req_s']:.2f} x the epoll server at "
                   f"K=0 ({e0['req_s']} req/s)")
        other = other_cpu(st["sys_cpu_pct"], st.get("proc_cpu_pct", st["cpu_pct"]), 0)
        out.append(f"  other work on the machine during the self-test: {other:.0f}% of a CPU"
                   f"{' (disturbed)' if other > DISTURBED_PCT else ''}")
        out.append(f"  client CPU {st['cpu_pct']:.0f}% of its CPU in the self-test, "
                   f"{e0['client_cpu_pct']:.0f}% against the server (server "
                   f"{e0['server_cpu_pct']:.0f}%); client CPU per request "
                   f"{per_req(st['cpu_pct'], st['req_s']):.1f} us, server "
                   f"{e0['server_cpu_us_per_req']:.1f} us")
    return out


def refusal(rows):
    r = next((x for x in rows if x["status"] == "refused"), None)
    if r is None:
        return None
    f = r["refused"]
    return {"k": r["k"], "fd": f["fd"], "fd_setsize": f["fd_setsize"],
            "server_conns": f["conns"], "server_exit": r["server_exit"],
            "client_errno": r["errno"], "message": r["message"]}


def build(rawroot, outdir):
    raw = t.unit_dir(rawroot, NAME)
    p = plan(raw)
    kern = kernel(raw)
    ncpu = None
    if t.exists(os.path.join(raw, "machine.txt")):
        ncpu = t.read_machine(os.path.join(raw, "machine.txt"), ("kernel", "nproc"))[0].int("nproc", 1)
    backends, shapes = {}, set()
    for b in p["backends"]:
        backends[b] = []
        for k in p["ks"]:
            rounds = [read_round(raw, b, k, r) for r in range(1, p["rounds"] + 1)]
            shapes |= {(x["load"]["active"], x["load"]["size"]) for x in rounds if x}
            backends[b].append(row_of(k, rounds))
    if len(shapes) != 1:
        raise t.RawError(f"{raw}: the load results name {len(shapes)} different active=/size= "
                         "pairs, not one")
    p["active"], p["size"] = shapes.pop()
    ref = refusal(backends.get("select", []))
    st = selftest(raw, p["rounds"])
    lines = header_lines(p, kern, ncpu or "?")
    for b in p["backends"]:
        lines += ["", b] + table_lines(b, backends[b])
    if ref:
        lines += ["", f"select refused at K={ref['k']}: the server held {ref['server_conns']} "
                  f"connections when accept() returned fd {ref['fd']} (FD_SETSIZE "
                  f"{ref['fd_setsize']}); it exited {ref['server_exit']} without FD_SET on it "
                  f"(write-up: failed with {WRITEUP_SELECT_FAILED_CONNS} connections open)"]
    lines += ratio_lines(backends, st)
    rl = first_rlimit(raw, p)
    if rl:
        lines.append(f"rlimit_nofile: server soft limit {rl['rlimit_nofile']} (was {rl['was']}, "
                     f"hard {rl['hard']})")
    run_s = elapsed(raw)
    lines += limit_lines(p, run_s, raw)
    mem = meminfo(raw, p)
    lines += memory_line(mem)
    svg_tmp, plot_line = plot(outdir, backends, ref["fd_setsize"] if ref else None, p["active"],
                          p["size"])
    try:
        lines.append(plot_line)
        e0 = next((r for r in backends.get("epoll", []) if r["k"] == 0 and r["status"] == "ok"), None)
        obj = {
            "experiment": NAME, "kernel": kern, "collected_at": t.collected_at(raw),
            "load_average": None, "counters": None, "result": None, "errno": None,
            "elapsed_s": run_s, "plan": p, "ncpu": ncpu,
            "backends": dict(backends, select_refused_at_k=ref["k"] if ref else None),
            "select_refused_at_k": ref["k"] if ref else None,
            "select_refusal": ref,
            "ratios": {"epoll_5000_over_0": ratio(backends.get("epoll", []), 5000),
                       "epoll_900_over_0": ratio(backends.get("epoll", []), 900),
                       "select_900_over_0": ratio(backends.get("select", []), 900),
                       "poll_5000_over_0": ratio(backends.get("poll", []), 5000)},
            "server_cpu_per_req_ratios": {
                "epoll_5000_over_0": cpu_ratio(backends.get("epoll", []), 5000),
                "select_900_over_0": cpu_ratio(backends.get("select", []), 900),
                "poll_5000_over_0": cpu_ratio(backends.get("poll", []), 5000)},
            "selftest": st,
            "client_headroom": round(st["req_s"] / e0["req_s"], 3) if st and e0 else None,
            "meminfo_kb": [{"backend": b, "k": k, **d} for (b, k), d in sorted(mem.items())],
            "rlimit_nofile": rl, "plot": NAME + ".svg" if svg_tmp else None,
            "writeup": {"req_s": {b: {str(k): v for k, v in d.items()} for b, d in WRITEUP.items()},
                        "select_failed_with_conns": WRITEUP_SELECT_FAILED_CONNS},
        }
        made = {os.path.join(outdir, NAME + ".svg"): svg_tmp} if svg_tmp else None
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        if svg_tmp and os.path.exists(svg_tmp):
            os.unlink(svg_tmp)

if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
