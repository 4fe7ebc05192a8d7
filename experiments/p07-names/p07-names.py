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
    answers = [{"i": d.int("i", 1), "family": d.str("family"), "addr": d.str("addr")}
               for d in lines if "family" in d and "ret" not in d]
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


def build_dns_only(rawroot, outdir):
    """Only p07-dns-dead-first ran (./run.sh p07-dns-dead-first): its section alone."""
    rawdir = t.unit_dir(rawroot, DNS_UNIT)
    kernel = t.kernel_release(rawdir)
    dns = dns_part(rawdir)
    lines = [f"{NAME}: a name through DNS, the first nameserver dead",
             t.header(kernel, t.collected_at(rawdir), "the wire: the client's and the server's "
                      "namespaces, the client's /etc files through /etc/netns/NAME"), "",
             "(p07-localhost did not run: ./run.sh p07-localhost adds its parts)", ""]
    lines += dns_lines(dns)
    obj = {"experiment": NAME, "unit": DNS_UNIT, "kernel": kernel,
           "collected_at": t.collected_at(rawdir), "load_average": None,
           "counters": dns["counters"], "result": "ok" if dns["attempts"][-1]["ret"] == 0
           else "failed", "errno": None, "elapsed_s": round(dns["resolve_us"] / 1e6, 7),
           "dns": dns}
    t.write_outputs(outdir, NAME, lines, obj)


def build(rawroot, outdir):
    if (not os.path.isdir(os.path.join(rawroot, UNIT)) and
            os.path.isdir(os.path.join(rawroot, DNS_UNIT))):
        return build_dns_only(rawroot, outdir)
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    prm = t.read_kv(os.path.join(rawdir, "params.txt"))
    parts = [read_part(rawdir, name, who, prm.int(f"port_{name}", 1, 65535))
             for name, who in PARTS]
    hosts = t.read_lines(os.path.join(rawdir, "default-hosts.txt"))
    lines = [f"{NAME}: \"localhost\" against a server on 127.0.0.1 only, tried one answer after "
             "another", t.header(kernel, t.collected_at(rawdir), "one namespace, its own /etc "
                                 "files through /etc/netns/NAME (ip netns exec)"), "",
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
    made = {}
    try:
        obj["ladder_svg"], said = pkt.ladder_svg(outdir, f"{NAME}-ladder.svg", rows, "client",
                                                 "127.0.0.1 / ::1", made)
        t.write_outputs(outdir, NAME, lines + [said], obj, made)
    finally:
        pkt.drop_made(made)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
