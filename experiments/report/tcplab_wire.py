"""tcplab_wire.py — what the six wire reports share (p01-wire-connect, p01-synack-lost,
p01-wire-netem, p01-icmp-unreachable, p01-rst-middlebox, p01-close-synsent-late): the one reader
of raw/<unit>/wire.txt (tl_wire_record: each side's link, qdiscs and nft rules with their
counters), of the machine probe's link lines of both sides, of both sides' counter deltas
(collect.sh's tl_both_counters_*), of `ss -tin`; one client's connect() read with its capture,
its sockwatch events and both sides' counters (read_part), the packets and the counters as
tables, and the one way a wire report writes its outputs with its ladder (write_with_ladder);
for the p04 wire reports, their parts' retransmission cross-checks, tcpevents lines and json,
their sysctls line, their cross-check sum and their .json's frame.
The capture is parsed by tcplab_pkt.read_capture only.  Standard library only."""
import os
import re

import tcplab as t
import tcplab_pkt as pkt

CLIENT_COL = "client 192.0.2.1"     # the ladder's columns (SPEC §1: the wire's addresses)
SERVER_COL = "server 192.0.2.2"
SS_KEYS = ("mss", "advmss", "rcvmss", "pmtu")
U64 = 2 ** 64 - 1
_LINK = re.compile(r"^[0-9]+: ([^:@ ]+)(?:@[^:]*)?: <([^>]*)> mtu ([0-9]+) qdisc (\S+)"
                   r"(?: .*)? state (\S+)")
_RULE = re.compile(r"^\s+(.*) counter packets ([0-9]+) bytes ([0-9]+) (\S+)\s*$")


# ---- the wire as tl_wire_record and machine recorded it ---------------------------------------

def link_line(line, where):
    """One `ip link show` first line → {"name", "mtu", "qdisc", "state", "flags"}, or None."""
    m = _LINK.match(line)
    if not m:
        return None
    return {"name": m.group(1), "flags": m.group(2), "mtu": t.num(m.group(3), f"{where}: mtu", 68, 1 << 20),
            "qdisc": m.group(4), "state": m.group(5)}


def nft_rules(lines, path):
    """The rules with a counter among `nft list …` lines → [{"rule", "packets", "bytes",
    "verdict"}], in order; nft's counters are 64-bit."""
    out = []
    for line in lines:
        r = _RULE.match(line)
        if r:
            out.append({"rule": r.group(1),
                        "packets": t.num(r.group(2), f"{path}: packets", 0, U64),
                        "bytes": t.num(r.group(3), f"{path}: bytes", 0, U64),
                        "verdict": r.group(4)})
    return out


def read_wire(rawdir):
    """raw/<unit>/wire.txt (tl_wire_record) → {"client": side, "server": side}; a side is
    {"iface", "link": link_line(), "rules": [{"rule", "packets", "bytes", "verdict"}], "qdiscs":
    [line]}: the link as `ip -d link` showed it, every nft rule with its counter at the end of
    the unit, and the `qdisc …` lines of `tc -s qdisc`."""
    path = os.path.join(rawdir, "wire.txt")
    sides, side, section = {}, None, None
    for line in t.read_lines(path):
        m = re.match(r"^## (client|server) side \((\S+)\)$", line)
        if m:
            side = sides.setdefault(m.group(1), {"iface": m.group(2), "link": None, "rules": [],
                                                 "qdiscs": []})
            continue
        if line.startswith("# "):
            section = line[2:].split(" dev ")[0]
            continue
        if side is None:
            raise t.RawError(f"{path}: a line before the first '## client side' heading")
        if section == "ip -d link show" and side["link"] is None:
            side["link"] = link_line(line, path)
        elif section == "tc -s qdisc show" and line.startswith("qdisc "):
            side["qdiscs"].append(line.strip())
        elif section == "nft list ruleset":
            side["rules"] += nft_rules([line], path)
    for name in ("client", "server"):
        if name not in sides or sides[name]["link"] is None:
            raise t.RawError(f"{path}: no `ip -d link` line for the {name} side")
    return sides


def nft_rule_text(r):
    """An nft rule as the reports print it: the rule, its verdict and its counter's packets."""
    return f"{r['rule']} {r['verdict']}: counter packets {r['packets']}"


def wire_lines(wire):
    """Each side's link and its nft rules with their counters, as lines."""
    out = []
    for name in ("client", "server"):
        s = wire[name]
        k = s["link"]
        out.append(f"  {name:<6} {k['name']:<7} mtu {k['mtu']:<6} qdisc {k['qdisc']:<8} "
                   f"state {k['state']}")
        for r in s["rules"]:
            out.append(f"         nft: {nft_rule_text(r)}")
    return out


def wire_where(rawdir, wire=None):
    """The header's note on where the unit ran: the two namespaces, the pair, its MTU (the
    client side's link in wire.txt), and where the capture listened."""
    wire = wire or read_wire(rawdir)
    vm = t.read_vm(rawdir)
    where = ("inside " + vm.get("package", "a Debian kernel") + " under QEMU, " if vm else "")
    return (f"{where}a client (192.0.2.1, veth-c) and a server (192.0.2.2, veth-s) namespace "
            f"joined by a veth pair, MTU {wire['client']['link']['mtu']}; the capture on the "
            "client's end" + t.side_by_side(vm))


def machine_links(rawdir):
    """The machine probe's `link=` lines of each side (machine.txt, machine-server.txt:
    tl_wire_init), as printed; [] for a machine that prints none."""
    out = []
    for side, name in (("client", "machine.txt"), ("server", "machine-server.txt")):
        for line in t.read_lines(os.path.join(rawdir, name)):
            if line.startswith("link="):
                out.append(f"  machine ({side}): {line}")
    return out


def read_unit(rawroot, name, need=()):
    """What a wire unit's report reads first: its raw directory, the kernel it ran on, HZ
    (machine.txt) and the sysctls each side recorded (sysctls.txt, server-sysctls.txt: the
    names in need required) → (rawdir, kernel, hz, client sysctls, server sysctls)."""
    rawdir = t.unit_dir(rawroot, name)
    kernel = t.kernel_release(rawdir)
    info, _ = t.read_machine(os.path.join(rawdir, "machine.txt"))
    return (rawdir, kernel, info.int("hz", 1, 10000),
            t.read_sysctl_file(os.path.join(rawdir, "sysctls.txt"), need),
            t.read_sysctl_file(os.path.join(rawdir, "server-sysctls.txt"), need))


def read_both_counters(rawdir, prefix, client=(), server=()):
    """Both sides' deltas (tl_both_counters_after PREFIX): PREFIXcounters-delta.txt, the client,
    and PREFIXserver-counters-delta.txt, each with the counters named required → (client,
    server)."""
    return (t.read_counters_delta(os.path.join(rawdir, f"{prefix}counters-delta.txt"), client),
            t.read_counters_delta(os.path.join(rawdir, f"{prefix}server-counters-delta.txt"),
                                  server))


def read_tcpevents(rawdir, part):
    """tcpevents' lines for a part (tl_events_start PART) → {"events": [{"t_ns", "event", and
    per kind: probe cwnd, ssthresh, srtt_us; retrans err; state old, new}], "lost", "missed"}, or
    {"blind": why} when it could not run (raw/PART-tcpevents-blind.txt, one line)."""
    blind = os.path.join(rawdir, f"{part}-tcpevents-blind.txt")
    if os.path.exists(blind):
        lines = t.read_lines(blind)
        if len(lines) != 1 or not lines[0].strip():
            raise t.RawError(f"{blind}: want one line saying why tcpevents could not run")
        return {"blind": lines[0].strip()}
    path = os.path.join(rawdir, f"{part}-tcpevents.txt")
    lines = t.read_lines(path)
    if not lines or not lines[0].startswith("ready "):
        raise t.RawError(f"{path}: no `ready` line first: not tcpevents' output")
    if not lines[-1].startswith("end "):
        raise t.RawError(f"{path}: no `end` line: tcpevents did not finish, events may be missing")
    end = t.Fields(path, t.kv(lines[-1]))
    evs = []
    for line in lines[1:-1]:
        d = t.Fields(path, t.kv(line))
        e = {"t_ns": d.int("t_ns"), "event": d.str("event")}
        if e["event"] == "probe":
            e.update(cwnd=d.int("cwnd"), ssthresh=d.int("ssthresh"), srtt_us=d.int("srtt_us"))
        if e["event"] == "retrans":
            e["err"] = d.str("err")
        if e["event"] == "state":
            e.update(old=d.str("old"), new=d.str("new"))
        evs.append(e)
    if end.int("events", 0) != len(evs):
        raise t.RawError(f"{path}: the end line counts {end.int('events', 0)} events, "
                         f"the file has {len(evs)}")
    return {"events": evs, "lost": end.int("lost", 0), "missed": t.tcpevents_missed(end),
            "unseen": t.tcpevents_unseen(end)}


def read_ss(path):
    """`ss -tin` of the held connection(s) → [{"local", "peer", "mss", "advmss", "rcvmss",
    "pmtu", "rtt_ms"}] in ss's order: each socket is an address line, then its tcp_info line."""
    out, cur = [], None
    for line in t.read_lines(path):
        words = line.split()
        if not words or words[0] == "Recv-Q":
            continue
        if not line[0].isspace():
            if len(words) < 4:
                raise t.RawError(f"{path}: a socket line without addresses: {line[:60]!r}")
            cur = {"local": words[2], "peer": words[3]}
            out.append(cur)
        elif cur is not None:
            info = dict(w.split(":", 1) for w in words if ":" in w and not w.startswith("("))
            for k in SS_KEYS:
                if k not in info:
                    raise t.RawError(f"{path}: no {k}: for {cur['local']}")
                cur[k] = t.num(info[k], f"{path}: {k}", 0, 1 << 20)
            # rtt:SRTT/RTTVAR in ms (tcpi_rtt, tcpi_rttvar in µs / 1000)
            cur["rtt_ms"] = (t.num(info["rtt"].split("/")[0], f"{path}: rtt", 0, 1e7)
                             if "rtt" in info else None)
    if not out:
        raise t.RawError(f"{path}: no socket (the connection was not held?)")
    for s in out:
        if "mss" not in s:
            raise t.RawError(f"{path}: no tcp_info line for {s['local']}")
    return out


def handshake(segs):
    """The first SYN, the first SYN-ACK and the first pure ACK of one connection's segments."""
    def first(pred):
        return next((p for p in segs if pred(p)), None)
    syn = first(lambda p: p["dir"] == "c>s" and p["flags"] == "S")
    synack = first(lambda p: p["dir"] == "s>c" and p["flags"] == "SA")
    ack = first(lambda p: p["dir"] == "c>s" and p["flags"] == "A")
    return syn, synack, ack


# ---- one connect() with its capture, sockwatch and both sides' counters -----------------------

def client_end(cap):
    """The client's address:port: the source of the first client-to-server SYN in the capture."""
    for p in cap["packets"]:
        if p["kind"] == "tcp" and p["dir"] == "c>s" and p["flags"] == "S":
            return p["src"]
    raise t.RawError(f"{cap['path']}: no SYN from the client")


def read_part(rawdir, prefix, counters=(), server_counters=()):
    """One connect() of a unit: PREFIX-client.txt (connect_block or connect_timeout), the capture
    (PREFIX-capture.txt), sockwatch (PREFIX-sockwatch.txt), the counter deltas of each side
    (read_both_counters).  Times are ms from the client's start_ns (the capture and sockwatch are
    on CLOCK_MONOTONIC like the fixture).  The capture must say dropped=0; the segments and
    ICMPs kept are this connection's."""
    pre = f"{prefix}-" if prefix else ""
    cpath = os.path.join(rawdir, f"{pre}client.txt")
    c = t.read_kv(cpath)
    start = c.int("start_ns")
    end = c.int("end_ns", start)
    result = c.str("result")
    cap = pkt.read_capture(os.path.join(rawdir, f"{pre}capture.txt"))
    capj = pkt.capture_json(cap)
    if capj["dropped"] or capj["ifdropped"]:
        raise t.RawError(f"{cap['path']}: libpcap dropped packets (dropped={capj['dropped']} "
                         f"ifdropped={capj['ifdropped']}): the capture is incomplete")
    local = client_end(cap)
    packets = [p for p in cap["packets"]
               if (p["kind"] == "tcp" and local in (p["src"], p["dst"])) or
               (p["kind"] == "icmp" and p["quoted"]["src"] == local)]
    events = [t.sockwatch_event(e, start)
              for e in t.read_sockwatch(os.path.join(rawdir, f"{pre}sockwatch.txt"))]
    cl, sv = read_both_counters(rawdir, pre, counters, server_counters)
    rows = [packet_json(p, start) for p in packets]
    return {"result": result, "errno": c.str("errno") if result == "error" else None,
            "elapsed_s": c.float("elapsed_s", 0, 86400),
            "closed_ms": (round((c.int("closed_ns", start) - start) / 1e6, 3)
                          if "closed_ns" in c else None),
            "syncnt": c.int("syncnt", 1, t.MAX_TCP_SYNCNT, default=None),
            "client": local, "packets": rows, "events": events,
            "counters_client": cl, "counters_server": sv, "capture": capj,
            "_at": {"start_ns": start, "end_ns": end, "raw": packets}}


def packet_json(p, start_ns):
    """One packet as the JSON keeps it: time from connect() (ms) and what the capture decoded."""
    out = {"t_ms": pkt.ms(p["t_ns"], start_ns), "kind": p["kind"]}
    if p["kind"] == "icmp":
        q = p["quoted"]
        out.update(icmp=p["icmp"], code=p["code"], type=p["type"], code_n=p["code_n"],
                   src=p["src"], quoted={k: q[k] for k in ("dir", "flags", "seq", "src", "dst")})
    else:
        out.update({k: p[k] for k in ("dir", "flags", "seq", "ack", "len", "win", "opts")})
    return out


def packet_lines(part, indent="  "):
    """The connection's packets as lines: time, direction, then the segment or the ICMP."""
    out = [f"{indent}{'t_ms':>9}  dir  packet"]
    for p in part["packets"]:
        if p["kind"] == "icmp":
            q = p["quoted"]
            what = (f"ICMP {p['icmp']} code {p['code']} ({p['type']}/{p['code_n']}) from "
                    f"{p['src']}, quoting {q['flags']} seq={q['seq']} {q['src']} > {q['dst']}")
            d = "s>c"
        else:
            ack = "-" if p["ack"] is None else p["ack"]
            what = (f"{p['flags']:<3} seq={p['seq']} ack={ack} len={p['len']} win={p['win']} "
                    f"opts={p['opts']}")
            d = p["dir"]
        out.append(f"{indent}{p['t_ms']:9.3f}  {d}  {what}")
    return out


def event_lines(part, indent="  "):
    """sockwatch's events of the SYN-SENT socket, or a line saying it saw none."""
    if not part["events"]:
        return [f"{indent}(sockwatch saw no SYN-SENT socket: it lived less than one 1 ms sample)"]
    out = [f"{indent}{'t_ms':>9}  event  state     retrans timer expires_ms"]
    for e in part["events"]:
        out.append(f"{indent}{e['t_s'] * 1e3:9.3f}  {e['event']:<6} {e['state']:<9} "
                   f"{e['retrans']:>7} {e['timer']:<5} {e['expires_ms']:>10}")
    return out


def counter_lines(client, server, names, indent="  "):
    """Both sides' deltas in two columns, for the counters named (the ones the page explains;
    the JSON keeps every counter that moved)."""
    w = max(len(k) for k in names)
    out = [f"{indent}{'counter':<{w}}  {'client':>10}  {'server':>10}   "
           "(. = not in counters -d: unchanged)"]
    for k in names:
        a = t.fmt_delta(client[k]) if k in client else "."
        b = t.fmt_delta(server[k]) if k in server else "."
        out.append(f"{indent}{k:<{w}}  {a:>10}  {b:>10}")
    return out


def delta(d, name):
    """A counter's delta as an int (0 when the counter did not move or is absent)."""
    v = d.get(name)
    if isinstance(v, dict):
        return v["value"]
    return v or 0


def counted(d, *names, side=""):
    """"side A +1, B +0": the deltas of the counters named, for a ladder note."""
    return side + ", ".join(f"{k} {delta(d, k):+d}" for k in names)


def index_of(part, pred, last=False):
    """The index in part["packets"] of the first (or last) packet pred accepts, or None."""
    found = [i for i, p in enumerate(part["packets"]) if pred(p)]
    return (found[-1] if last else found[0]) if found else None


def strip_private(part):
    """The part as the JSON keeps it: without the raw packets kept for the ladder, and its list
    of packets under `segments` (a run's `packets` is the capture-beside-the-probes object of
    docs/output-format.md, which the diff reads)."""
    return {("segments" if k == "packets" else k): v for k, v in part.items()
            if not k.startswith("_")}


# ---- the ladder and the outputs ----------------------------------------------------------------

def ladder_rows(part, name, notes=(), seg_notes=None):
    """One part's ladder rows: a heading, then its packets and sockwatch events and the notes
    given ((t_ns, text): the client's system calls); seg_notes {index in part["packets"]: text}
    puts a counter beside a packet."""
    at = part["_at"]
    evs = pkt.sockwatch_notes(part["events"], at["start_ns"])
    return [{"sep": name}] + pkt.ladder_rows(at["raw"], at["start_ns"], list(notes) + evs,
                                             seg_notes)


def ladder_lines(rows):
    """The ladder as text under its heading, for the end of a report that has no ladder of its
    own in its body (the columns CLIENT_COL and SERVER_COL)."""
    return (["ladder (t_ms from each connect(); the svg beside this file):"] +
            pkt.ladder_text(rows))


def retrans_crosscheck(ev, ev_retrans, again, cc):
    """A p04 loss part's retransmissions counted three ways: ev_retrans, tcpevents' retrans
    events (None where it could not run: ev["blind"]); again, the capture's segments sent again;
    the client's TcpRetransSegs (cc) → (part["crosscheck"], the disagreements, falsy where none)."""
    crosscheck = {"tcpevents": None if ev_retrans is None else len(ev_retrans),
                  "capture": len(again),
                  "TcpRetransSegs": pkt.counter_delta(cc, "TcpRetransSegs")}
    dis = [pkt.count_check("client segments sent again", len(again), "client TcpRetransSegs",
                           pkt.counter_delta(cc, "TcpRetransSegs"))]
    if ev_retrans is not None:
        # err=-: a kernel whose tracepoint has no err argument fires it only for one that went out
        dis.append(t.tcpevents_short("tcpevents' retransmissions (err=0 or -)",
                                     sum(1 for e in ev_retrans if e["err"] in ("0", "-")),
                                     "client TcpRetransSegs", pkt.counter_delta(cc, "TcpRetransSegs"),
                                     ev.get("missed"), ev.get("unseen")))
    return crosscheck, dis


def retrans_lines(r, ms, names, optional=(), server_names=()):
    """A p04 loss part's tcpevents retransmissions (ms: a time's t_ms in the part), its
    retransmission cross-check, its counter table (names; then those of optional the client
    read, '-' on the server's side; then server_names) and its disagreements."""
    ev = r["events"]
    if "blind" in ev:
        lines = [f"tcpevents could not run: {ev['blind']}"]
    else:
        lines = [f"tcpevents (client namespace): {len(r['ev_retrans'])} retransmission(s) "
                 f"(tcp:tcp_retransmit_skb), lost={ev['lost']}"
                 + ("" if ev.get("missed") is None else f" missed={ev['missed']}")
                 + ("" if ev.get("unseen") is None else f" unseen={ev['unseen']}") + ":"]
        for e in r["ev_retrans"]:
            lines.append(f"  {ms(e['t_ns']):10.3f}  retrans err={e['err']}")
    x = r["crosscheck"]
    lines += [f"retransmissions: tcpevents {'-' if x['tcpevents'] is None else x['tcpevents']}, "
              f"capture {x['capture']}, client TcpRetransSegs {t.fmt_delta(x['TcpRetransSegs'])}",
              "", "counters (each side read in its own namespace):",
              f"  {'counter':<28} {'client':>7} {'server':>7}"]
    extra = tuple(k for k in optional if r["counters"].get(k) is not None)
    srv = r["server_counters"]      # an optional counter is read on the client only
    for k in tuple(names) + extra + tuple(server_names):
        lines.append(f"  {k:<28} {t.fmt_delta(r['counters'].get(k)):>7} "
                     f"{t.fmt_delta(srv.get(k)) if k in srv or k not in extra else '-':>7}")
    return lines + ["DISAGREE: " + d for d in r["disagree"]]


def loss_parts_lines(name, runs, parts, lines_of, rows_of):
    """The body of a p04 loss report (p04-mid-loss, p04-tail-loss): each part's lines
    (lines_of(r, title)) and capture notes, the cross-check of both parts, and the ladder of
    all parts (rows_of(r): a part's ladder rows, t_ms from its write) → (lines, rows)."""
    lines, rows = [], []
    for r, (_, title) in zip(runs, parts):
        lines += lines_of(r, title) + [""]
        lines += pkt.capture_notes(r["capture"], f"raw/{name}/{r['part']}-capture.txt")
        rows += rows_of(r)
    lines += crosscheck_lines(runs, "both")
    lines += ["ladder (the client's end of the veth; t_ms from each part's write):"]
    lines += pkt.ladder_text(rows, client=CLIENT_COL, server=SERVER_COL)
    return lines, rows


def retrans_json(r, ms):
    """A p04 loss part's tcpevents in its .json: why it could not run, or its retransmissions'
    t_ms (ms), its lost count and its missed one where it has one."""
    ev = r["events"]
    return ({"blind": ev["blind"]} if "blind" in ev else
            {"retrans_ms": [ms(e["t_ns"]) for e in r["ev_retrans"]],
             "lost": ev["lost"],
             **({} if ev.get("missed") is None else {"missed": ev["missed"]}),
             **({} if ev.get("unseen") is None else {"unseen": ev["unseen"]})})


def sysctls_line(sysctls, names, hz):
    """A p04 wire report's line of the client's sysctls (names, by their last part; 'absent'
    where the kernel has none) and HZ."""
    return "client sysctls: " + "  ".join(
        f"{k.rsplit('.', 1)[-1]}={'absent' if v is None else v}" for k, v in
        t.sysctls_json(sysctls, names).items()) + f"  HZ={hz}"


def crosscheck_lines(runs, which):
    """A p04 wire report's sum of its parts' retransmission cross-checks (r["crosscheck"]:
    tcpevents, None where it saw nothing, capture, TcpRetransSegs); which: "both", "all"."""
    total = {k: sum(r["crosscheck"][k] or 0 for r in runs) for k in ("capture", "TcpRetransSegs")}
    seen = [r["crosscheck"]["tcpevents"] for r in runs]
    return [f"cross-check, {which} parts: retransmissions tcpevents "
            f"{'-' if None in seen else sum(seen)}, capture {total['capture']}, client "
            f"TcpRetransSegs {total['TcpRetransSegs']:+d}", ""]


def parts_obj(name, kernel, rawdir, hz, params, sysctls, names, parts, rows, **more):
    """A p04 wire report's .json: the unit's facts, its params, knobs and the client's sysctls
    (names), more (after the sysctls), its parts and the ladder rows."""
    return {"experiment": name, "kernel": kernel, "collected_at": t.collected_at(rawdir),
            "load_average": None, "result": "ok", "errno": None, "elapsed_s": None,
            "counters": None, "hz": hz, "params": dict(params), "knobs": t.read_knobs(rawdir),
            "sysctls": t.sysctls_json(sysctls, names), **more, "parts": parts, "ladder": rows}


def write_with_ladder(outdir, name, lines, obj, rows, client=CLIENT_COL, server=SERVER_COL,
                      more=()):
    """The one way the wire reports write their outputs: the .txt (lines, then the line about
    the svg) and the .json, and beside them NAME-ladder.svg drawn from the ladder rows (its name
    in obj["ladder_svg"]).  more: further pictures, (json key, file name, what, write_tmp) each,
    write_tmp(path) drawing it into a temporary file and returning that file's name; each is
    named in obj[key] and in a line "WHAT svg: NAME".  Every temporary file is removed whatever
    happens."""
    made = {}
    try:
        obj["ladder_svg"], said = pkt.ladder_svg(outdir, f"{name}-ladder.svg", rows, client,
                                                 server, made)
        said = [said]
        for key, fname, what, draw in more:
            path = os.path.join(outdir, fname)
            made[path] = draw(path)
            obj[key] = fname
            said.append(f"{what} svg: {fname}")
        t.write_outputs(outdir, name, lines + said, obj, made)
    finally:
        pkt.drop_made(made)


INIT_CWND = 10      # TCP_INIT_CWND (include/net/tcp.h)


def restart_cwnd(cwnd, rto_ms, idle_ms):
    """tcp_cwnd_restart() (net/ipv4/tcp_output.c), the cwnd a connection idle IDLE_MS restarts
    with: restart_cwnd = min(TCP_INIT_CWND, cwnd); while (delta -= rto) > 0 and cwnd >
    restart_cwnd, cwnd >>= 1; then max(cwnd, restart_cwnd).  p04-slow-start and p09-pools."""
    restart, c, d = min(INIT_CWND, cwnd), cwnd, idle_ms
    while True:
        d -= rto_ms
        if d <= 0 or c <= restart:
            break
        c >>= 1
    return max(c, restart)
