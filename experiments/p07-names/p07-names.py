#!/usr/bin/python3
"""p07-names report: what getaddrinfo() answers for a name, in which order, and what a client
that tries the answers one after another pays for that order.  Unit p07-localhost: "localhost"
(127.0.0.1 and ::1 in the namespace's own /etc/hosts) against a server bound to 127.0.0.1 only,
without /etc/gai.conf (::1 first: a RST, ECONNREFUSED, then 127.0.0.1) and with glibc's
precedence table but "precedence ::ffff:0:0/96 100" (127.0.0.1 first, one attempt).  Each part: the answers, each
connect() with its errno and its time, the capture on lo, the counters, and getent ahosts's
order beside resolve_connect's."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402

NAME = "p07-names"
UNIT = "p07-localhost"
PARTS = (("default", "no /etc/gai.conf: glibc's built-in precedence table (::1 50, IPv4 10)"),
         ("gaiconf", "/etc/gai.conf: that table with precedence ::ffff:0:0/96 100 (IPv4 first)"))
SHOW = ("TcpActiveOpens", "TcpAttemptFails", "TcpOutRsts", "TcpPassiveOpens", "TcpEstabResets",
        "TcpInSegs", "TcpOutSegs")
FAMILIES = ("inet", "inet6")
DNS_UNIT = "p07-dns-dead-first"
DNS_SHOW = ("TcpActiveOpens", "TcpAttemptFails", "UdpOutDatagrams", "UdpInDatagrams",
            "UdpNoPorts")
_TCPDUMP = re.compile(r"([0-9]+\.[0-9]+) IP ([0-9.]+)\.([0-9]+) > ([0-9.]+)\.([0-9]+): (.*)\Z")


def read_client(path):
    """resolve_connect's output → (resolve Fields, [answers], [attempts], result Fields)."""
    lines = t.read_kv_lines(path)
    res = [d for d in lines if "name" in d and "addrconfig" in d]
    if len(res) != 1:
        raise t.RawError(f"{path}: want one resolve line, found {len(res)}")
    # answer lines: a family, no ret (attempt lines) and no t_ns (-r's start lines)
    answers = [{"i": d.int("i", 1), "family": d.str("family"), "addr": d.str("addr")}
               for d in lines if "family" in d and "ret" not in d and "t_ns" not in d]
    attempts = []
    for d in lines:
        if "ret" not in d:
            continue
        a = {"i": d.int("i", 1), "family": d.str("family"), "addr": d.str("addr"),
             "local": d.str("local"), "ret": d.int("ret", -1, 0), "errno": d.str("errno"),
             "t_ns": d.int("t_ns"), "us": d.float("us")}
        a["start_ns"] = a["t_ns"] - round(a["us"] * 1000)
        attempts.append(a)
    result = [d for d in lines if "result" in d]
    if len(result) != 1:
        raise t.RawError(f"{path}: want one result= line, found {len(result)}")
    if not answers or not attempts:
        raise t.RawError(f"{path}: no answer or no attempt line")
    for a in answers + attempts:
        if a["family"] not in FAMILIES:
            raise t.RawError(f"{path}: family={a['family'][:20]}, want inet or inet6")
    if [a["addr"] for a in attempts] != [a["addr"] for a in answers][:len(attempts)]:
        raise t.RawError(f"{path}: the attempts are not the answers in order")
    return res[0], answers, attempts, result[0]


def read_getent(path):
    """getent ahosts's addresses in its order (its STREAM lines)."""
    out = []
    for line in t.read_lines(path):
        w = line.split()
        if len(w) >= 2 and w[1] == "STREAM":
            out.append(w[0])
    if not out:
        raise t.RawError(f"{path}: no STREAM line (not getent ahosts output)")
    return out


def ep(a):
    return f"[{a['addr']}]" if a["family"] == "inet6" else a["addr"]


def where(rawdir, note):
    """The header's note on where the unit ran: note on the host (the namespaces, and its /etc
    files through ip netns exec); in a --kernel guest (raw vm.txt), the guest first, and the
    files bind-mounted by experiments/lib/etc-exec.sh instead (docs/kernel-matrix.md)."""
    vm = t.read_vm(rawdir)
    if vm is None:
        return note
    return (t.guest_label(vm) + ": " + note.replace(" (ip netns exec)", "") +
            " (bind-mounted in a mount namespace of its own: etc-exec.sh); timings under "
            "emulation are slower than on hardware, its timers late only by the guest's scheduling"
            + t.side_by_side(vm))


def read_part(rawdir, name, who, port):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    res, answers, attempts, result = read_client(f("client.txt"))
    cap = pkt.read_capture(f("capture.txt"))
    counters = t.read_counters_delta(f("counters-delta.txt"), need=SHOW)
    getent = read_getent(f("getent.txt"))
    gai = t.read_text(f("gai.conf.txt"), optional=True)
    rsts = [p for p in cap["packets"] if p["kind"] == "tcp" and "R" in p["flags"]]
    # the capture's SYN and the answer to it, per attempt (by the attempt's family's address)
    for a in attempts:
        dst = f"{ep(a)}:{port}"
        segs = [p for p in cap["packets"] if p["kind"] == "tcp" and
                (p["dst"] == dst and p["dir"] == "c>s" or p["src"] == dst and p["dir"] == "s>c")]
        syn = next((p for p in segs if p["dir"] == "c>s" and p["flags"] == "S"), None)
        reply = next((p for p in segs if p["dir"] == "s>c"), None)
        a["wire"] = None if syn is None or reply is None else {
            "syn_flags": syn["flags"], "reply_flags": reply["flags"],
            "reply_us": round((reply["t_ns"] - syn["t_ns"]) / 1e3, 1)}
    failed = [a for a in attempts if a["ret"] != 0]
    ok = next((a for a in attempts if a["ret"] == 0), None)
    part = {"name": name, "who": who, "port": port, "gai_conf": gai.strip() if gai else None,
            "resolve_us": res.float("us"), "answers": answers, "attempts": attempts,
            "getent": getent, "first_family": answers[0]["family"],
            "connected": None if ok is None else ok["addr"],
            "failed_attempts": len(failed), "failed_us": round(sum(a["us"] for a in failed), 1),
            "to_connected_us": None if ok is None else
            round((ok["t_ns"] - attempts[0]["start_ns"]) / 1e3, 1),
            "rsts": len(rsts), "counters": counters, "capture": pkt.capture_json(cap),
            "_cap": cap}
    order = [a["addr"] for a in answers]
    if order != getent:
        part["disagree"] = [f"resolve_connect's order {order} is not getent ahosts's {getent}"]
    return part


def part_lines(p):
    out = [f"== {p['name']}: {p['who']}"]
    if p["gai_conf"]:
        out.append("the namespace's /etc/gai.conf: " + " | ".join(
            " ".join(x.split()) for x in p["gai_conf"].splitlines()))
    out += [
           f"getaddrinfo(\"localhost\") took {p['resolve_us']:.1f} us and answered, in order: " +
           ", ".join(a["addr"] for a in p["answers"]),
           f"getent ahosts localhost (the cross-check): {', '.join(p['getent'])}", ""]
    out.append("connect() to each answer in turn (us: how long the call took):")
    for a in p["attempts"]:
        w = a["wire"]
        wire = ("" if w is None else
                f"; on lo: {w['syn_flags']} then {w['reply_flags']} {w['reply_us']:.1f} us later")
        res = "connected from " + a["local"] if a["ret"] == 0 else a["errno"]
        out.append(f"  {a['i']}. {a['family']:<5} {a['addr']:<9} {res} after {a['us']:.1f} us"
                   f"{wire}")
    if p["connected"] is None:
        out.append("no answer connected")
    else:
        out.append(f"connected to {p['connected']} {p['to_connected_us']:.1f} us after the first "
                   f"connect() began; {p['failed_attempts']} refused attempt(s) cost "
                   f"{p['failed_us']:.1f} us")
    out.append(f"RSTs in the capture: {p['rsts']}")
    out += ["DISAGREE: " + d for d in p.get("disagree", ())]
    out += pkt.capture_notes(p["_cap"], "the namespace's lo")
    return out + [""]


def counter_lines(parts):
    w = max(len(k) for k in SHOW)
    out = ["counter deltas in the namespace (TCP's MIB counts IPv4 and IPv6 together):",
           f"  {'counter':<{w}}  " + "  ".join(f"{p['name']:>8}" for p in parts)]
    for k in SHOW:
        out.append(f"  {k:<{w}}  " + "  ".join(f"{t.fmt_delta(p['counters'].get(k)):>8}"
                                                for p in parts))
    return out + [""]


def ladder(parts):
    rows = []
    for p in parts:
        t0 = p["attempts"][0]["start_ns"]
        notes = [(a["t_ns"], f"client: connect({a['addr']}) "
                  f"{'= 0' if a['ret'] == 0 else a['errno']}") for a in p["attempts"]]
        notes.append((t0, "client: first connect() begins"))
        segs = {}
        for i, x in enumerate(p["_cap"]["packets"]):
            if x["kind"] != "tcp":
                continue
            if x["flags"] == "S":
                segs[i] = "to " + x["dst"]
            elif "R" in x["flags"]:
                segs[i] = (f"from {x['src']}: no socket there; TcpOutRsts "
                           f"{t.fmt_delta(p['counters'].get('TcpOutRsts'))}")
        rows += [{"sep": p["name"]}] + pkt.ladder_rows(p["_cap"]["packets"], t0, notes, segs)
    return rows


# ---- p07-dns-dead-first ----------------------------------------------------------------------

def read_tcpdump(path):
    """tcpdump -n -tt's lines of the DNS packets → [{"t_s", "src", "dst", "sport", "dport",
    "what"}] in order."""
    out = []
    for i, line in enumerate(t.read_lines(path), 1):
        m = _TCPDUMP.match(line)
        if not m:
            raise t.RawError(f"{path}: line {i}: not a tcpdump -n -tt IPv4 line")
        out.append({"t_s": float(m.group(1)), "src": m.group(2), "sport": int(m.group(3)),
                    "dst": m.group(4), "dport": int(m.group(5)), "what": m.group(6)})
    return out


def dns_part(rawdir):
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    timeout_s, dead, live = prm.int("timeout_s", 1, 30), prm.str("dead"), prm.str("live")
    name = prm.str("name")
    res, answers, attempts, result = read_client(os.path.join(rawdir, "client.txt"))
    pk = read_tcpdump(os.path.join(rawdir, "tcpdump-dns.txt"))
    to_dead = [x for x in pk if x["dst"] == dead and x["dport"] == 53]
    to_live = [x for x in pk if x["dst"] == live and x["dport"] == 53]
    from_live = [x for x in pk if x["src"] == live and x["sport"] == 53]
    if not to_dead or not to_live:
        raise t.RawError(f"{rawdir}/tcpdump-dns.txt: no query to {dead} or none to {live}")
    t0 = pk[0]["t_s"]
    wait_ms = round((to_live[0]["t_s"] - to_dead[0]["t_s"]) * 1e3, 3)
    c = t.read_counters_delta(os.path.join(rawdir, "counters-delta.txt"), need=DNS_SHOW)
    cs = t.read_counters_delta(os.path.join(rawdir, "server-counters-delta.txt"))
    return {"name": name, "resolv_conf": t.read_lines(os.path.join(rawdir, "resolv.conf.txt")),
            "timeout_s": timeout_s, "attempts_opt": prm.int("attempts", 1, 5), "dead": dead,
            "live": live, "resolve_us": res.float("us"),
            "answers": answers, "attempts": attempts, "connected": result.str("result"),
            "getent": read_getent(os.path.join(rawdir, "getent.txt")),
            "packets": [dict(x, t_ms=round((x["t_s"] - t0) * 1e3, 3)) for x in pk],
            "queries_to_dead": len(to_dead), "queries_to_live": len(to_live),
            "answers_from_live": len(from_live), "dead_wait_ms": wait_ms,
            "counters": c, "server_counters": cs}


def dns_lines(d):
    out = [f"== {DNS_UNIT}: the first nameserver dead, the second dnsmasq",
           "the client's /etc/resolv.conf: " + " | ".join(d["resolv_conf"]),
           f"{d['dead']}: an address of the server's veth whose DNS nft drops (no answer, no "
           f"ICMP); {d['live']}: dnsmasq, which answers {d['name']}", "",
           f"getaddrinfo(\"{d['name']}\") took {d['resolve_us'] / 1e3:.3f} ms and answered: " +
           ", ".join(a["addr"] for a in d["answers"]),
           f"getent ahosts {d['name']} (the cross-check): {', '.join(d['getent'])}", "",
           "the DNS packets on the client's veth (tcpdump -n -tt -r of the capture; t_ms from the "
           "first query):"]
    for x in d["packets"]:
        out.append(f"  {x['t_ms']:10.3f}  {x['src']}.{x['sport']} > {x['dst']}.{x['dport']}: "
                   f"{x['what']}")
    out += ["", f"queries to the dead server: {d['queries_to_dead']}, to the live one: "
            f"{d['queries_to_live']}, answers from it: {d['answers_from_live']}",
            f"the wait on the dead server: {d['dead_wait_ms']:.3f} ms from its first query to the "
            f"first query to the next, against timeout:{d['timeout_s']} attempts:"
            f"{d['attempts_opt']} ({d['timeout_s'] * 1000} ms)"]
    for a in d["attempts"]:
        res = "connected from " + a["local"] if a["ret"] == 0 else a["errno"]
        out.append(f"then connect() to {a['addr']}: {res} after {a['us']:.1f} us")
    out += ["", "counter deltas (client | server; . = not read there):"]
    for k in DNS_SHOW:
        srv = d["server_counters"]
        out.append(f"  {k:<16} {t.fmt_delta(d['counters'].get(k)):>6}  "
                   f"{t.fmt_delta(srv[k]) if k in srv else '.':>6}")
    return out + [""]


# ---- p07-dns-truncated ------------------------------------------------------------------------

TC_UNIT = "p07-dns-truncated"
TC_PARTS = (("udp512", "no options: no EDNS0, so at most 512 bytes in a datagram"),
            ("edns0", "options edns0: the queries offer a larger datagram (an OPT record)"),
            ("single", "options edns0 single-request: the A query, then the AAAA one"))
TC_SHOW = ("TcpActiveOpens", "UdpOutDatagrams", "UdpInDatagrams", "UdpNoPorts",
           "IcmpOutDestUnreachs", "IpOutNoRoutes")
TC_SHOW_S = ("TcpPassiveOpens", "UdpInDatagrams", "UdpOutDatagrams", "IcmpInDestUnreachs")
_ICMP_UNREACH = re.compile(r"([0-9]+\.[0-9]+) IP ([0-9.]+) > ([0-9.]+): ICMP \S+ udp port "
                           r"([0-9]+) unreachable, length [0-9]+\Z")
# tcpdump's words for a DNS message: a query "ID+ [1au] TYPE? NAME. (LEN)"; an answer
# "ID[*][|] [NXDomain ]AN/NS/AR [records] (LEN)" ('|': the TC bit; 1au: one additional record,
# EDNS0's OPT); over TCP after the segment's "length N "
_DNS_Q = re.compile(r"(?:.*, length \d+ )?(\d+)\+ (\[1au\] )?(A|AAAA)\? (\S+) \((\d+)\)\Z")
_DNS_A = re.compile(r"(?:.*, length \d+ )?(\d+)(\*?)(\|?) (?:(NXDomain) )?(\d+)/(\d+)/(\d+)[ ,].*\((\d+)\)\Z")
_TCP_FLAGS = re.compile(r"Flags \[([^\]]*)\]")


def tc_packet(x, server):
    """One tcpdump line of a p07-dns-truncated part, classified: proto udp or tcp, dir q (to
    port 53) or a, and for a DNS message its id, type, size, TC bit and answer count."""
    to = x["dst"] == server and x["dport"] == 53
    frm = x["src"] == server and x["sport"] == 53
    if not (to or frm):
        raise t.RawError(f"a packet not to or from {server}.53: {x['src']}.{x['sport']}")
    f = _TCP_FLAGS.match(x["what"])
    p = {"t_ms": x["t_ms"], "proto": "tcp" if f else "udp", "dir": "q" if to else "a",
         "port": x["sport"] if to else x["dport"]}
    if f:
        p["flags"] = f.group(1)
    m = _DNS_Q.match(x["what"]) if to else _DNS_A.match(x["what"])
    if m and to:
        p.update(id=int(m.group(1)), edns0=bool(m.group(2)), type=m.group(3),
                 size=int(m.group(5)))
    elif m:
        p.update(id=int(m.group(1)), tc=m.group(3) == "|", rcode=m.group(4) or "NoError",
                 answers=int(m.group(5)), size=int(m.group(8)))
    elif not f:
        raise t.RawError(f"a DNS datagram tcpdump did not decode as one: {x['what'][:80]}")
    return p


def tc_part(rawdir, name, server):
    res, answers, attempts, result = read_client(os.path.join(rawdir, f"{name}-client.txt"))
    pk = read_tcpdump(os.path.join(rawdir, f"{name}-tcpdump-dns.txt"))
    if not pk:
        raise t.RawError(f"{rawdir}/{name}-tcpdump-dns.txt: no DNS packet")
    t0 = pk[0]["t_s"]
    try:
        pkts = [tc_packet(dict(x, t_ms=round((x["t_s"] - t0) * 1e3, 3)), server) for x in pk]
    except t.RawError as e:
        raise t.RawError(f"{rawdir}/{name}-tcpdump-dns.txt: {e}") from None
    udp_q = [p for p in pkts if p["proto"] == "udp" and p["dir"] == "q"]
    udp_a = [p for p in pkts if p["proto"] == "udp" and p["dir"] == "a"]
    tcp_a = [p for p in pkts if p["proto"] == "tcp" and "id" in p and p["dir"] == "a"]
    syns = [p for p in pkts if p["proto"] == "tcp" and p["dir"] == "q" and p["flags"] == "S"]
    a_q = [p for p in udp_q if p["type"] == "A"]
    aaaa_q = [p for p in udp_q if p["type"] == "AAAA"]
    if not a_q or not aaaa_q:
        raise t.RawError(f"{rawdir}/{name}-tcpdump-dns.txt: no A or no AAAA query over UDP")
    # the first lookup: was its AAAA query sent before the answer to its A query came?
    first_a = next((p for p in udp_a if p["id"] == a_q[0]["id"]), None)
    parallel = first_a is None or aaaa_q[0]["t_ms"] < first_a["t_ms"]
    unreach = []    # ICMP port unreachable the client sent: answers to a UDP socket gone
    for i, line in enumerate(t.read_lines(os.path.join(rawdir, f"{name}-tcpdump-icmp.txt"),
                                          optional=True) or [], 1):
        m = _ICMP_UNREACH.match(line)
        if not m or m.group(2) == server:
            raise t.RawError(f"{rawdir}/{name}-tcpdump-icmp.txt: line {i}: not the client's "
                             "ICMP port unreachable")
        unreach.append({"t_ms": round((float(m.group(1)) - t0) * 1e3, 3),
                        "port": int(m.group(4))})
    c = t.read_counters_delta(os.path.join(rawdir, f"{name}-counters-delta.txt"), need=TC_SHOW)
    cs = t.read_counters_delta(os.path.join(rawdir, f"{name}-server-counters-delta.txt"))
    conn = attempts[-1]
    return {"name": name, "resolv_conf": t.read_lines(os.path.join(rawdir,
                                                                   f"{name}-resolv.conf.txt")),
            "resolve_us": res.float("us"), "answers": len(answers),
            "first_answer": answers[0]["addr"], "connected": result.str("result"),
            "connected_to": conn["addr"] if conn["ret"] == 0 else None,
            "packets": pkts, "udp_queries": len(udp_q), "a_queries": len(a_q),
            "edns0": all(p["edns0"] for p in udp_q),
            "udp_answers": [{k: p[k] for k in ("t_ms", "id", "tc", "rcode", "answers", "size")}
                            for p in udp_a],
            "truncated": sum(p["tc"] for p in udp_a), "tcp_connections": len(syns),
            "tcp_answers": [{k: p[k] for k in ("t_ms", "id", "rcode", "answers", "size")}
                            for p in tcp_a],
            "parallel": parallel, "port_unreachable": unreach, "counters": c,
            "server_counters": cs}


def tc_read(rawdir):
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    server = prm.str("server")
    return {"records": prm.int("records", 1, 200), "name": prm.str("name"), "server": server,
            "parts": [tc_part(rawdir, n, server) for n, _ in TC_PARTS]}


def tc_lines(d):
    out = [f"== {TC_UNIT}: an answer of {d['records']} addresses for {d['name']}, from dnsmasq "
           f"on {d['server']}", ""]
    for (name, what), p in zip(TC_PARTS, d["parts"]):
        out += [f"-- {name}: {what}", "the client's /etc/resolv.conf: " + " | ".join(p["resolv_conf"]),
                f"getaddrinfo() took {p['resolve_us'] / 1e3:.3f} ms: {p['answers']} addresses, the "
                f"first {p['first_answer']}; connect() to it: {p['connected']}",
                "the DNS on the client's veth (tcpdump -n -tt -r of the capture; t_ms from the "
                "first query):"]
        for x in p["packets"]:
            if "id" not in x:
                what = f"[{x['flags']}]"
            elif x["dir"] == "q":
                what = (f"query {x['id']} {x['type']}?{' +EDNS0' if x['edns0'] else ''} "
                        f"({x['size']} B)")
            else:
                what = (f"answer {x['id']} {x['rcode']} {x['answers']} records ({x['size']} B)"
                        f"{' TC: truncated' if x['tc'] else ''}")
            arrow = "->" if x["dir"] == "q" else "<-"
            out.append(f"  {x['t_ms']:9.3f}  {x['proto']:<3} :{x['port']:<5} {arrow} :53  {what}")
        tcp = (f"{p['tcp_connections']} TCP connection(s) to port 53, "
               + (", ".join(f"answer {a['id']}: {a['answers']} records ({a['size']} B)"
                            for a in p["tcp_answers"]) or "none") if p["tcp_connections"]
               else "no TCP connection to port 53")
        for u in p["port_unreachable"]:
            out.append(f"  {u['t_ms']:9.3f}  icmp :{u['port']:<5} -> the server: port "
                       "unreachable (that UDP socket is closed)")
        out += [f"UDP: {p['udp_queries']} queries ({p['a_queries']} for A), "
                f"{len(p['udp_answers'])} answers, {p['truncated']} with TC; {tcp}",
                "the A and AAAA queries: " + (
                    "both sent before the first answer (in parallel)" if p["parallel"] else
                    "the AAAA one after the A answer (one after the other)" if name == "single"
                    else "the AAAA one left after the A answer came back (nothing here asks for "
                    "that order: on a veth the answer can be back before the client sends its "
                    "next query)"),
                f"answers that found their UDP socket closed: {len(p['port_unreachable'])} "
                f"(ICMP port unreachable; UdpNoPorts {t.fmt_delta(p['counters'].get('UdpNoPorts'))})",
                f"IpOutNoRoutes {t.fmt_delta(p['counters'].get('IpOutNoRoutes'))}: getaddrinfo's "
                "sort asked the kernel for a route to each answer (a UDP connect()); "
                "198.51.100.0/24 has none here", ""]
    out += ["counter deltas (client | server; . = not read there):",
            "  " + " " * 20 + "".join(f"{n:>18}" for n, _ in TC_PARTS)]
    for k in TC_SHOW + tuple(x for x in TC_SHOW_S if x not in TC_SHOW):
        cells = []
        for p in d["parts"]:
            cli = t.fmt_delta(p["counters"][k]) if k in p["counters"] else "."
            srv = t.fmt_delta(p["server_counters"][k]) if k in p["server_counters"] else "."
            cells.append(f"{cli:>8} | {srv:<7}")
        out.append(f"  {k:<20}" + "".join(f"{c:>18}" for c in cells).rstrip())
    return out + [""]


# ---- p07-happy-eyeballs ----------------------------------------------------------------------

HE_UNIT = "p07-happy-eyeballs"
HE_PARTS = (("sequential", "resolve_connect: one answer after another, each connect() blocking"),
            ("race", "resolve_connect -r DELAY: the answers raced (RFC 8305)"),
            ("curl", "Debian's curl --happy-eyeballs-timeout-ms DELAY"))
HE_SHOW = ("TcpActiveOpens", "TcpAttemptFails", "TcpOutSegs", "TcpRetransSegs",
           "TcpExtTCPSynRetrans", "TcpExtTCPTimeouts", "TcpExtTCPAbortOnTimeout",
           "TcpPassiveOpens")
# curl -v --trace-time: "HH:MM:SS.uuuuuu *   Trying [::1]:21076..." and "... * Connected to
# NAME (IP) port N (#0)"; the nft listing's rule line with its counter
_CURL_T = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2}\.[0-9]{6}) (.*)\Z")
_CURL_TRY = re.compile(r"\*   Trying (\S+):([0-9]+)\.\.\.\Z")
_CURL_CONN = re.compile(r"\* Connected to (\S+) \((\S+)\) port ([0-9]+) ")
_NFT_RULE = re.compile(r"ip6 daddr ::1 tcp dport ([0-9]+) .*counter packets ([0-9]+) bytes "
                       r"([0-9]+) drop\Z")


def he_nft(path):
    """raw/nft.txt → {port: packets dropped} of the unit's rules."""
    out = {}
    for line in t.read_lines(path):
        m = _NFT_RULE.search(line.strip())
        if m:
            out[int(m.group(1))] = int(m.group(2))
    if not out:
        raise t.RawError(f"{path}: no drop rule for ip6 daddr ::1 with a counter")
    return out


def he_curl_verbose(path):
    """curl -v --trace-time's lines → ([{"t_s", "addr"}] per Trying line, the Connected line's
    {"t_s", "ip"} or None); t_s is the wall clock's seconds in the day."""
    tries, conn = [], None
    for line in t.read_lines(path):
        m = _CURL_T.match(line)
        if not m:
            continue
        ts = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        if tries and ts < tries[0]["t_s"]:
            ts += 86400                                 # past midnight
        tm, cm = _CURL_TRY.match(m.group(4)), _CURL_CONN.match(m.group(4))
        if tm:
            tries.append({"t_s": ts, "addr": tm.group(1)})
        elif cm and conn is None:
            conn = {"t_s": ts, "ip": cm.group(2)}
    if not tries:
        raise t.RawError(f"{path}: no '*   Trying ADDR:PORT...' line (not curl -v --trace-time)")
    return tries, conn


def he_wire(cap, port):
    """The capture's SYNs of a part: to [::1]:PORT (dropped) and to 127.0.0.1:PORT, each a list
    of t_ns; the first SYN-ACK from 127.0.0.1 (t_ns or None); whether any segment but a SYN went
    to or came from [::1]."""
    v6, v4 = f"[::1]:{port}", f"127.0.0.1:{port}"
    tcp = [p for p in cap["packets"] if p["kind"] == "tcp"]
    syn6 = [p["t_ns"] for p in tcp if p["dst"] == v6 and p["flags"] == "S"]
    syn4 = [p["t_ns"] for p in tcp if p["dst"] == v4 and p["flags"] == "S"]
    synack4 = next((p["t_ns"] for p in tcp if p["src"] == v4 and p["flags"] == "SA"), None)
    other6 = sum(1 for p in tcp if (p["dst"] == v6 or p["src"] == v6) and p["flags"] != "S")
    return syn6, syn4, synack4, other6


def he_part(rawdir, name, port, prm):
    f = lambda s: os.path.join(rawdir, f"{name}-{s}")  # noqa: E731
    cap = pkt.read_capture(f("capture.txt"))
    syn6, syn4, synack4, other6 = he_wire(cap, port)
    if not syn6 or not syn4:
        raise t.RawError(f"{f('capture.txt')}: no SYN to [::1]:{port} or none to "
                         f"127.0.0.1:{port}")
    t0 = syn6[0]
    p = {"name": name, "port": port, "exit": t.num(t.read_text(f("exit.txt")).strip(),
                                                    f("exit.txt"), 0, 255),
         "syns_v6_ms": [pkt.ms(x, t0) for x in syn6], "syns_v4_ms": [pkt.ms(x, t0) for x in syn4],
         "synack_v4_ms": None if synack4 is None else pkt.ms(synack4, t0),
         "v6_other_segments": other6,
         "counters": t.read_counters_delta(f("counters-delta.txt"), need=HE_SHOW),
         "capture": pkt.capture_json(cap), "_cap": cap, "_t0": t0}
    p["v6_waits_ms"] = [round(b - a, 3) for a, b in zip(p["syns_v6_ms"], p["syns_v6_ms"][1:])]
    p["fallback_ms"] = p["syns_v4_ms"][0]
    if name == "curl":
        tries, conn = he_curl_verbose(f("verbose.txt"))
        w = t.read_kv(f("client.txt"))
        p["curl"] = {"trying": [dict(addr=x["addr"], t_ms=round((x["t_s"] - tries[0]["t_s"])
                                                                   * 1e3, 3)) for x in tries],
                     "connected_ip": None if conn is None else conn["ip"],
                     "connected_t_ms": None if conn is None else
                     round((conn["t_s"] - tries[0]["t_s"]) * 1e3, 3),
                     "time_namelookup_ms": round(w.float("time_namelookup") * 1e3, 3),
                     "time_connect_ms": round(w.float("time_connect") * 1e3, 3),
                     "remote_ip": w.str("remote_ip"), "exitcode": w.int("exitcode", 0, 255)}
        return p
    res, answers, attempts, result = read_client(f("client.txt"))
    p.update(answers=[a["addr"] for a in answers],
             attempts=[{k: a[k] for k in ("i", "family", "addr", "local", "ret", "errno", "t_ns",
                                          "us", "start_ns")} for a in attempts],
             connected=next((a["addr"] for a in attempts if a["ret"] == 0), None),
             to_connected_ms=round((attempts[-1]["t_ns"] - attempts[0]["start_ns"]) / 1e6, 3)
             if attempts[-1]["ret"] == 0 else None)
    if name == "race":
        starts = [d.int("t_ns") for d in t.read_kv_lines(f("client.txt"), prefix="start ")]
        if len(starts) != len(attempts):
            raise t.RawError(f"{f('client.txt')}: {len(starts)} start lines for "
                             f"{len(attempts)} attempts")
        p["_starts_ns"] = starts
        p["starts_ms"] = [round((x - starts[0]) / 1e6, 3) for x in starts]
        won = next((a for a in attempts if a["ret"] == 0), None)
        p["connected_ms"] = (None if won is None else round((won["t_ns"] - starts[0]) / 1e6, 3))
    return p


def he_read(rawdir):
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    sysctls = t.read_sysctl_file(os.path.join(rawdir, "sysctls.txt"),
                                 need=("net.ipv4.tcp_syn_retries",))
    retries = t.num(sysctls["net.ipv4.tcp_syn_retries"], "tcp_syn_retries", 1, 127)
    lin = sysctls.get("net.ipv4.tcp_syn_linear_timeouts")
    lin = None if lin is None else t.num(lin, "tcp_syn_linear_timeouts", 0, 127)
    times, give_up = t.expected_syn_schedule(retries, lin)
    nft = he_nft(os.path.join(rawdir, "nft.txt"))
    parts = []
    for name, _ in HE_PARTS:
        port = prm.int(f"port_{name}", 1, 65535)
        p = he_part(rawdir, name, port, prm)
        p["nft_dropped"] = nft.get(port)
        parts.append(p)
    return {"name": prm.str("name"), "delay_ms": prm.int("delay_ms", 1, 60000),
            "syn_retries": retries, "syn_linear_timeouts": lin,
            "expected_syns_s": [0.0] + times, "expected_timeout_s": give_up,
            "hosts": [" ".join(h.split()) for h in t.read_lines(os.path.join(rawdir,
                                                                             "hosts.txt"))],
            "getent": read_getent(os.path.join(rawdir, "getent.txt")),
            "curl_version": " ".join(t.read_text(os.path.join(rawdir,
                                                              "curl-version.txt")).split()[:2]),
            "parts": parts}


def syns(p):
    n = len(p["syns_v6_ms"])
    return f"{n} SYN{'' if n == 1 else 's'}"


def fmt_ms_list(xs):
    return " ".join(f"{x:.3f}" for x in xs)


def he_lines(d, guest=False):
    """The section's lines; guest: it ran in a --kernel guest (raw vm.txt), whose round trip on
    lo is the race's SYN to SYN-ACK as captured, not the host's tens of microseconds."""
    seq, race, curl = d["parts"]
    lin = d["syn_linear_timeouts"]
    sched = (f"tcp_syn_retries {d['syn_retries']}, tcp_syn_linear_timeouts "
             f"{'absent' if lin is None else lin}")
    out = [f"== {HE_UNIT}: {d['name']} is ::1 and 127.0.0.1; nft drops the SYNs to [::1]:PORT",
           "the namespace's /etc/hosts: " + " | ".join(d["hosts"]) + "; nsswitch: hosts: files",
           f"getent ahosts {d['name']} (the cross-check of the order): {', '.join(d['getent'])}",
           ("on lo in this QEMU guest: a round trip took "
            f"{race['synack_v4_ms'] - race['fallback_ms']:.3f} ms (race: 127.0.0.1's SYN to its "
            "SYN-ACK); the waits below are timers (the kernel's SYN timer, the clients' delay), "
            "not round trips, and they keep their length in the guest, late only by its "
            "scheduling" if guest else
            "on lo: a round trip here is tens of microseconds; the waits below are timers (the "
            "kernel's SYN timer, the clients' delay), not round trips"), "",
           f"-- sequential: {HE_PARTS[0][1]}",
           f"SYNs to [::1]:{seq['port']} in the capture (ms from the first): "
           f"{fmt_ms_list(seq['syns_v6_ms'])}",
           f"  the waits between them (ms): {fmt_ms_list(seq['v6_waits_ms'])}",
           f"  the kernel's schedule ({sched}; the first RTO TCP_TIMEOUT_INIT, 1 s): SYNs at "
           + " ".join(f"{x:g}" for x in d["expected_syns_s"])
           + f" s, then ETIMEDOUT at {d['expected_timeout_s']:g} s"]
    for a in seq["attempts"]:
        res = "connected from " + a["local"] if a["ret"] == 0 else a["errno"]
        out.append(f"  connect({ep(a)}): {res} after {a['us'] / 1e3:.3f} ms")
    out += [f"  127.0.0.1's SYN left {seq['fallback_ms']:.3f} ms after the first SYN to [::1]; "
            f"connected {seq['to_connected_ms']:.3f} ms after the first connect() began", "",
            f"-- race: {HE_PARTS[1][1].replace('DELAY', str(d['delay_ms']))}"]
    for a, st in zip(race["attempts"], race["starts_ms"]):
        res = ("connected from " + a["local"] if a["ret"] == 0 else
               "closed still trying (EINPROGRESS): the race was lost" if a["errno"] == "EINPROGRESS"
               else a["errno"])
        out.append(f"  {st:9.3f} ms  connect({ep(a)}) started; {res} after {a['us'] / 1e3:.3f} ms")
    out += [f"  the capture: {syns(race)} to [::1], 127.0.0.1's SYN "
            f"{race['fallback_ms']:.3f} ms after it, its SYN-ACK at {race['synack_v4_ms']:.3f} ms; "
            f"{race['v6_other_segments']} other segments to or from [::1] (closing a SYN-SENT "
            "socket sends nothing)", "",
            f"-- curl: {d['curl_version']} --happy-eyeballs-timeout-ms {d['delay_ms']}"]
    c = curl["curl"]
    for x in c["trying"]:
        out.append(f"  {x['t_ms']:9.3f} ms  curl -v: Trying {x['addr']}")
    if c["connected_ip"] is not None:
        out.append(f"  {c['connected_t_ms']:9.3f} ms  curl -v: Connected ({c['connected_ip']})")
    out += [f"  the capture: {syns(curl)} to [::1], 127.0.0.1's SYN "
            f"{curl['fallback_ms']:.3f} ms after it, its SYN-ACK at {curl['synack_v4_ms']:.3f} ms; "
            f"{curl['v6_other_segments']} other segments to or from [::1]",
            f"  -w: time_namelookup {c['time_namelookup_ms']:.3f} ms, time_connect "
            f"{c['time_connect_ms']:.3f} ms (both from the start), remote_ip {c['remote_ip']}: "
            f"{c['time_connect_ms'] - c['time_namelookup_ms']:.3f} ms from the name to the "
            "connection",
            f"  curl's exit {c['exitcode']}: 52 is \"Empty reply from server\" (peer read the "
            "request and closed); the connect is what this part measures", "",
            "nft's counters (SYNs dropped) against the capture's SYNs to [::1]: " + ", ".join(
                f"{p['name']} {p['nft_dropped']} / {len(p['syns_v6_ms'])}" for p in d["parts"]),
            "", "counter deltas in the namespace (TCP's MIB counts IPv4 and IPv6 together):",
            f"  {'counter':<24}" + "".join(f"{p['name']:>12}" for p in d["parts"])]
    for k in HE_SHOW:
        out.append(f"  {k:<24}" + "".join(f"{t.fmt_delta(p['counters'].get(k)):>12}"
                                           for p in d["parts"]))
    return out + [""]


def he_ladder(d):
    """The three parts' ladders, t_ms from each part's first SYN to [::1]."""
    rows = []
    for p in d["parts"]:
        notes = []
        for a in p.get("attempts", ()):
            notes.append((a["t_ns"], f"client: closes the {a['addr']} attempt, unanswered"
                          if a["errno"] == "EINPROGRESS" else f"client: connect({a['addr']}) "
                          f"{'= 0' if a['ret'] == 0 else a['errno']}"))
        for i, x in enumerate(p.get("_starts_ns", ())[1:], 1):
            notes.append((x, f"client: {d['delay_ms']} ms without an answer: "
                          f"{p['attempts'][i]['addr']} next"))
        segs = {i: "dropped by nft (input hook)" for i, x in enumerate(p["_cap"]["packets"])
                if x["kind"] == "tcp" and x["dst"].startswith("[::1]") and x["flags"] == "S"}
        rows += [{"sep": p["name"]}] + pkt.ladder_rows(p["_cap"]["packets"], p["_t0"], notes, segs)
    return rows


def he_json(d):
    return dict(d, parts=[{k: v for k, v in p.items() if not k.startswith("_")}
                          for p in d["parts"]])


def he_section(rawroot, outdir, made):
    """The p07-happy-eyeballs section's lines and JSON, its ladder svg added to made."""
    rawdir = t.unit_dir(rawroot, HE_UNIT)
    d = he_read(rawdir)
    rows = he_ladder(d)
    lines = he_lines(d, t.under_vm(rawdir)) + ["ladder (t_ms from each part's first SYN to [::1]):"]
    lines += pkt.ladder_text(rows, "client", "[::1] / 127.0.0.1", "client's calls")
    name, said = pkt.ladder_svg(outdir, f"{NAME}-happy-eyeballs-ladder.svg", rows, "client",
                                "[::1] / 127.0.0.1", made)
    obj = he_json(d)
    obj["ladder_svg"] = name
    return lines + [said, ""], obj


def build_dns_only(rawroot, outdir):
    """p07-localhost did not run (./run.sh p07-dns-dead-first, p07-dns-truncated,
    p07-happy-eyeballs or some of them): their sections alone; the top-level keys describe the
    first of them that ran."""
    have_dns = os.path.isdir(os.path.join(rawroot, DNS_UNIT))
    have_tc = os.path.isdir(os.path.join(rawroot, TC_UNIT))
    have_he = os.path.isdir(os.path.join(rawroot, HE_UNIT))
    first = DNS_UNIT if have_dns else TC_UNIT if have_tc else HE_UNIT
    rawdir = t.unit_dir(rawroot, first)
    kernel = t.kernel_release(rawdir)
    if have_dns or have_tc:
        lines = [f"{NAME}: a name through DNS: " + ", ".join(
                     w for u, w in ((DNS_UNIT, "the first nameserver dead"),
                                    (TC_UNIT, "an answer too big for a plain datagram"))
                     if os.path.isdir(os.path.join(rawroot, u))),
                 t.header(kernel, t.collected_at(rawdir), where(rawdir, "the wire: the "
                          "client's and the server's namespaces, the client's /etc files through "
                          "/etc/netns/NAME"))]
    else:
        lines = [f"{NAME}: a name with an IPv6 and an IPv4 address, the IPv6 path silent",
                 t.header(kernel, t.collected_at(rawdir), where(rawdir, "one namespace, its own "
                          "/etc files through /etc/netns/NAME (ip netns exec)"))]
    lines += ["", "(p07-localhost did not run: ./run.sh p07-localhost adds its parts)", ""]
    obj = {"experiment": NAME, "unit": first, "kernel": kernel,
           "collected_at": t.collected_at(rawdir), "load_average": None}
    if have_dns:
        dns = dns_part(rawdir)
        lines += dns_lines(dns)
        obj.update(counters=dns["counters"], result="ok" if dns["attempts"][-1]["ret"] == 0
                   else "failed", errno=None, elapsed_s=round(dns["resolve_us"] / 1e6, 7),
                   dns=dns)
    if have_tc:
        tc = tc_read(t.unit_dir(rawroot, TC_UNIT))
        lines += tc_lines(tc)
        if not have_dns:
            first = tc["parts"][0]
            obj.update(counters=first["counters"], result=first["connected"], errno=None,
                       elapsed_s=round(first["resolve_us"] / 1e6, 7))
        obj["truncated"] = tc
    made = {}
    try:
        if have_he:
            he_text, he = he_section(rawroot, outdir, made)
            lines += he_text
            if not (have_dns or have_tc):
                seq = he["parts"][0]
                obj.update(counters=seq["counters"], result="ok" if seq["connected"] else
                           "failed", errno=None, elapsed_s=None if seq["to_connected_ms"] is None
                           else round(seq["to_connected_ms"] / 1e3, 6))
            obj["happy_eyeballs"] = he
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        pkt.drop_made(made)


def build(rawroot, outdir):
    if (not os.path.isdir(os.path.join(rawroot, UNIT)) and
            any(os.path.isdir(os.path.join(rawroot, u)) for u in (DNS_UNIT, TC_UNIT, HE_UNIT))):
        return build_dns_only(rawroot, outdir)
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    parts = [read_part(rawdir, name, who, prm.int(f"port_{name}", 1, 65535))
             for name, who in PARTS]
    hosts = t.read_lines(os.path.join(rawdir, "default-hosts.txt"))
    lines = [f"{NAME}: \"localhost\" against a server on 127.0.0.1 only, tried one answer after "
             "another", t.header(kernel, t.collected_at(rawdir), where(
                 rawdir, "one namespace, its own /etc files through /etc/netns/NAME (ip netns "
                 "exec)")), "",
             "the namespace's /etc/hosts: " + " | ".join(" ".join(h.split()) for h in hosts),
             "its /etc/nsswitch.conf: hosts: files", ""]
    for p in parts:
        lines += part_lines(p)
    lines += counter_lines(parts)
    d, g = parts
    lines.append(f"the order: {d['first_family']} first by default, {g['first_family']} first "
                 f"with gai.conf; the default order cost {d['failed_attempts']} refused "
                 f"connect() ({d['rsts']} RST on lo), {d['failed_us']:.1f} us on this machine")
    rows = ladder(parts)
    lines += ["", "ladder (t_ms from each part's first connect(); the svg beside this file):"]
    lines += pkt.ladder_text(rows, "client", "127.0.0.1 / ::1", "client's calls")
    dns = None
    if os.path.isdir(os.path.join(rawroot, DNS_UNIT)):
        dns = dns_part(t.unit_dir(rawroot, DNS_UNIT))
        lines += [""] + dns_lines(dns)
    # the top-level keys every report has describe the first part, default (docs/output-format.md)
    obj = {"experiment": NAME, "unit": UNIT, "kernel": kernel,
           "collected_at": t.collected_at(rawdir), "load_average": None,
           "counters": d["counters"], "result": "ok" if d["connected"] else "failed",
           "errno": None, "elapsed_s": None if d["to_connected_us"] is None else
           round(d["to_connected_us"] / 1e6, 7),
           "hosts": [" ".join(h.split()) for h in hosts],
           "parts": {p["name"]: {k: v for k, v in p.items() if not k.startswith("_")}
                     for p in parts}}
    if dns is not None:
        obj["dns"] = dns
    if os.path.isdir(os.path.join(rawroot, TC_UNIT)):
        obj["truncated"] = tc_read(t.unit_dir(rawroot, TC_UNIT))
        lines += tc_lines(obj["truncated"])
    made = {}
    try:
        obj["ladder_svg"], said = pkt.ladder_svg(outdir, f"{NAME}-ladder.svg", rows, "client",
                                                 "127.0.0.1 / ::1", made)
        lines.append(said)
        if os.path.isdir(os.path.join(rawroot, HE_UNIT)):
            he_text, obj["happy_eyeballs"] = he_section(rawroot, outdir, made)
            lines += [""] + he_text
        t.write_outputs(outdir, NAME, lines, obj, made)
    finally:
        pkt.drop_made(made)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
