#!/usr/bin/python3
"""p08-tls report: TLS over TCP on the wire.  p08-tls-handshake: a TLS 1.3 handshake, one
resumed from its session ticket, and a TLS 1.2 handshake, each with the round trips before the
client could send application data and the bytes each way; kernel TLS (TCP_ULP "tls") where the
kernel has it, else one line why it was skipped.  p08-tls-close: three endings (close_notify, a
FIN without it, a RST) and what the client's next SSL_read returned.  The TLS record headers
are the lab's own decoding of the payloads the capture kept (raw/<unit>/<part>-capture.pcap,
snaplen 65535): content type, legacy version, length, and the handshake message types of the
records still in plaintext.  Every number from raw/."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t

NAME = "p08-tls"
UNITS = ("p08-tls-handshake", "p08-tls-close")
HANDSHAKE_PARTS = ("tls13", "tls12")
CLOSE_PARTS = ("notify", "fin", "rst")
CONTENT = {20: "change_cipher_spec", 21: "alert", 22: "handshake", 23: "application_data"}
HS_TYPES = {0: "hello_request", 1: "client_hello", 2: "server_hello", 4: "new_session_ticket",
            5: "end_of_early_data", 8: "encrypted_extensions", 11: "certificate",
            12: "server_key_exchange", 13: "certificate_request", 14: "server_hello_done",
            15: "certificate_verify", 16: "client_key_exchange", 20: "finished"}
VERSIONS = {0x0301: "TLS1.0", 0x0302: "TLS1.1", 0x0303: "TLS1.2", 0x0304: "TLS1.3"}
ENDING = {"notify": "close_notify, then close()", "fin": "close() without close_notify",
          "rst": "SO_LINGER {1, 0}, close(): a RST"}


# ---- the capture's packets, from the .pcap ------------------------------------------------

def read_pcap(path):
    """[(t_ns, src, sport, dst, dport, seq, flags, payload)] of the TCP/IPv4 packets of an
    Ethernet .pcap (libpcap's format, microsecond or nanosecond timestamps)."""
    data = t.regular_bytes(path, 64 << 20)
    if len(data) < 24:
        raise t.RawError(f"{path}: not a pcap file (shorter than its header)")
    magic = data[:4]
    forms = {b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
             b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1)}
    if magic not in forms:
        raise t.RawError(f"{path}: not a pcap file (magic {magic.hex()})")
    end, scale = forms[magic]
    if struct.unpack(end + "I", data[20:24])[0] != 1:
        raise t.RawError(f"{path}: link type is not Ethernet")
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(end + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + incl]
        if len(frame) < incl:
            raise t.RawError(f"{path}: truncated packet at byte {off}")
        off += 16 + incl
        p = tcp_of(frame)
        if p is not None:
            out.append((sec * 1000000000 + frac * scale,) + p)
    return out


def tcp_of(frame):
    """(src, sport, dst, dport, seq, flags, payload) of an Ethernet/IPv4/TCP frame, else None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0f) * 4
    total = struct.unpack("!H", ip[2:4])[0]
    if ip[9] != 6 or len(ip) < ihl + 20:
        return None
    tcp = ip[ihl:total]
    sport, dport, seq = struct.unpack("!HHI", tcp[:8])
    doff = (tcp[12] >> 4) * 4
    src = ".".join(str(b) for b in ip[12:16])
    dst = ".".join(str(b) for b in ip[16:20])
    return src, sport, dst, dport, seq, tcp[13], bytes(tcp[doff:])


FLAG_BITS = ((0x02, "S"), (0x01, "F"), (0x04, "R"), (0x08, "P"), (0x10, "A"))


def flag_text(f):
    return "".join(n for b, n in FLAG_BITS if f & b)


def connections(packets, port):
    """{client port: {"segs": [...], "c>s": bytes, "s>c": bytes}}: each connection's packets in
    order, each with its direction and stream offset, and each direction's byte stream put
    together from the payloads by sequence number (a retransmission counted once)."""
    conns = {}
    for p in packets:
        t_ns, src, sport, dst, dport, seq, flags, payload = p
        d, cport = ("c>s", sport) if dport == port else ("s>c", dport)
        c = conns.setdefault(cport, {"segs": [], "isn": {}, "bytes": {"c>s": {}, "s>c": {}}})
        if flags & 0x02:
            c["isn"][d] = seq
        if d not in c["isn"]:
            raise t.RawError(f"connection from port {cport}: a {d} segment before its SYN")
        rel = (seq - c["isn"][d] - 1) % (1 << 32)
        c["segs"].append({"t_ns": t_ns, "dir": d, "flags": flag_text(flags), "off": rel,
                          "len": len(payload)})
        for i, b in enumerate(payload):
            c["bytes"][d].setdefault(rel + i, b)
    for c in conns.values():
        for d in ("c>s", "s>c"):
            m = c["bytes"][d]
            n = 0
            while n in m:
                n += 1
            c[d] = bytes(m[i] for i in range(n))
    return conns


# ---- TLS records ------------------------------------------------------------------------------

def records(stream):
    """The TLS records of one direction's byte stream: [{off, type, version, length,
    handshake: [types] (plaintext handshake records only)}].  After a change_cipher_spec in
    that direction a record is encrypted and only its header is read."""
    out, off, ccs = [], 0, False
    while off + 5 <= len(stream):
        ctype, ver, length = struct.unpack("!BHH", stream[off:off + 5])
        body = stream[off + 5:off + 5 + length]
        r = {"off": off, "type": CONTENT.get(ctype, str(ctype)),
             "version": VERSIONS.get(ver, f"0x{ver:04x}"), "length": length}
        if ctype == 22 and not ccs:
            r["handshake"] = hs_messages(body)
        out.append(r)
        ccs = ccs or ctype == 20
        off += 5 + length
    return out


def hs_messages(body):
    """The handshake message types in one plaintext handshake record."""
    out, off = [], 0
    while off + 4 <= len(body):
        typ = body[off]
        n = int.from_bytes(body[off + 1:off + 4], "big")
        out.append(HS_TYPES.get(typ, str(typ)))
        off += 4 + n
    return out


def record_text(r):
    s = f"{r['type']} {r['version']} len={r['length']}"
    if r.get("handshake"):
        s += " [" + ", ".join(r["handshake"]) + "]"
    return s


def records_in(recs, lo, hi):
    """The records whose header starts in stream bytes [lo, hi)."""
    return [r for r in recs if lo <= r["off"] < hi]


# ---- one part -------------------------------------------------------------------------------------

def step(kvs, first, i, n=0):
    xs = [x for x in kvs if x.get("_first") == first and x.get("i") == str(i)]
    if len(xs) <= n:
        raise t.RawError(f"no '{first}' line {n + 1} for connection {i}")
    return xs[n]


def tagged(path):
    """tls_peer's lines as dicts with the line's first word under _first."""
    out = []
    for line in t.read_lines(path):
        word, _, rest = line.partition(" ")
        d = t.kv(rest) if rest else {}
        d["_first"] = word
        out.append(d)
    return out


def conn_of(part, i):
    """(client port, its connection) of the client's connection i."""
    c = step(part["client"], "connect", i)
    cport = int(c["local"].rsplit(":", 1)[1])
    if cport not in part["conns"]:
        raise t.RawError(f"{part['part']}: connection {i} (port {cport}) not in the capture")
    return cport, part["conns"][cport]


def handshake_facts(part, i):
    """The round trips before the client could send application data, from the capture: the
    server's flights (runs of server segments with data, between client segments with data)
    that carry the first wire_in bytes of the server's stream, the bytes the client read
    before SSL_connect returned (a TLS 1.3 session ticket may come later: it is not waited
    for).  Then the bytes each way and the time from the ClientHello to the client's first
    application data (its stream byte wire_out: its handshake's bytes come before)."""
    hs = step(part["client"], "handshake", i)
    wire_out, wire_in = int(hs["wire_out"]), int(hs["wire_in"])
    _, c = conn_of(part, i)
    segs = [s for s in c["segs"] if s["len"] > 0]
    first = next((k for k, s in enumerate(segs) if s["dir"] == "c>s"
                  and s["off"] <= wire_out < s["off"] + s["len"]), None)
    if first is None:
        raise t.RawError(f"{part['part']}: connection {i}: no segment with the client's byte {wire_out}")
    flights, prev = 0, None
    for s in segs:
        if s["dir"] == "s>c" and s["off"] < wire_in and prev != "s>c":
            flights += 1
        prev = s["dir"]
    syn = next(s for s in c["segs"] if s["dir"] == "c>s" and "S" in s["flags"])
    hello = next(s for s in segs if s["dir"] == "c>s")
    return {"i": i, "version": hs["version"], "cipher": hs["cipher"],
            "resumed": int(hs["resumed"]), "rtt_before_app_data": flights,
            "client_handshake_bytes": wire_out, "server_handshake_bytes": wire_in,
            "hello_to_app_data_ms": round((segs[first]["t_ns"] - hello["t_ns"]) / 1e6, 3),
            "syn_to_app_data_ms": round((segs[first]["t_ns"] - syn["t_ns"]) / 1e6, 3),
            "handshake_us": float(hs["us"]),
            "client_records": [record_text(r) for r in records_in(records(c["c>s"]), 0, wire_out)],
            "server_records": [record_text(r) for r in records_in(records(c["s>c"]), 0, wire_in)],
            "bytes_total": {"c>s": len(c["c>s"]), "s>c": len(c["s>c"])}}


def segment_lines(part, i, t0=None):
    """Each segment of connection i: time, direction, flags, length, the records starting in it."""
    _, c = conn_of(part, i)
    recs = {"c>s": records(c["c>s"]), "s>c": records(c["s>c"])}
    t0 = c["segs"][0]["t_ns"] if t0 is None else t0
    out = []
    for s in c["segs"]:
        rs = records_in(recs[s["dir"]], s["off"], s["off"] + s["len"]) if s["len"] else []
        arrow = "client -> server" if s["dir"] == "c>s" else "server -> client"
        txt = "; ".join(record_text(r) for r in rs)
        out.append(f"  {(s['t_ns'] - t0) / 1e6:8.3f} ms  {arrow}  {s['flags']:<3} len={s['len']:<5}"
                   + (f" {txt}" if txt else ""))
    return out


# ---- the two units ------------------------------------------------------------------------------

def handshake_unit(rawdir):
    parts = []
    for name in HANDSHAKE_PARTS:
        p = read_part_tagged(rawdir, name)
        n = len([x for x in p["client"] if x["_first"] == "handshake"])
        p["facts"] = [handshake_facts(p, i) for i in range(1, n + 1)]
        parts.append(p)
    ktls = t.kv(t.read_lines(os.path.join(rawdir, "ktls.txt"))[0].partition(" ")[2])
    return parts, ktls


def read_part_tagged(rawdir, part):
    cap = t.read_lines(os.path.join(rawdir, f"{part}-capture.txt"))
    ready = t.kv(cap[0].partition(" ")[2]) if cap and cap[0].startswith("ready ") else None
    if ready is None or "port" not in ready:
        raise t.RawError(f"{rawdir}/{part}-capture.txt: no ready line with port=")
    port = int(ready["port"])
    return {"part": part, "port": port,
            "client": tagged(os.path.join(rawdir, f"{part}-client.txt")),
            "server": tagged(os.path.join(rawdir, f"{part}-server.txt")),
            "conns": connections(read_pcap(os.path.join(rawdir, f"{part}-capture.pcap")), port)}


def close_facts(p):
    """What each side's last read returned, and the segments from the server's ending on."""
    last = [x for x in p["client"] if x["_first"] == "read"][-1]
    server_reads = [x for x in p["server"] if x["_first"] == "read"]
    _, c = conn_of(p, 1)
    fr = [s["flags"] for s in c["segs"] if s["dir"] == "s>c" and ("F" in s["flags"] or "R" in s["flags"])]
    cr = [s["flags"] for s in c["segs"] if s["dir"] == "c>s" and ("F" in s["flags"] or "R" in s["flags"])]
    return {"ending": p["part"], "client_read": {k: last[k] for k in ("ret", "ssl_error", "errno", "reason")},
            "server_last_read": {k: server_reads[-1][k] for k in ("ret", "ssl_error", "errno", "reason")},
            "server_fin_rst": fr, "client_fin_rst": cr}


def close_unit(rawdir):
    parts = []
    for name in CLOSE_PARTS:
        p = read_part_tagged(rawdir, name)
        p["facts"] = close_facts(p)
        parts.append(p)
    return parts


# ---- text ---------------------------------------------------------------------------------------

def handshake_lines(parts, ktls):
    out = ["== p08-tls-handshake: TLS 1.3, TLS 1.3 resumed, TLS 1.2 (tls_peer, OpenSSL)", ""]
    for p in parts:
        for f in p["facts"]:
            what = f"{f['version']}" + (" resumed (session ticket)" if f["resumed"] else " full handshake")
            out += [f"-- {p['part']} connection {f['i']}: {what}, {f['cipher']}",
                    f"round trips before the client could send application data: "
                    f"{f['rtt_before_app_data']} (server flights the client waited for; TCP's own "
                    "handshake not counted)",
                    f"handshake bytes: client {f['client_handshake_bytes']} B, server "
                    f"{f['server_handshake_bytes']} B (what SSL_connect wrote and read); "
                    f"ClientHello to the first "
                    f"application data: {f['hello_to_app_data_ms']} ms, SYN to it: "
                    f"{f['syn_to_app_data_ms']} ms",
                    f"whole connection: client {f['bytes_total']['c>s']} B, server "
                    f"{f['bytes_total']['s>c']} B of TLS records",
                    "segments (the client's end of the veth; records decoded from the payload):"]
            out += segment_lines(p, f["i"]) + [""]
    err = ktls.get("errno")
    if ktls.get("ret") == "0":
        out.append("kernel TLS: setsockopt(TCP_ULP, \"tls\") succeeded here; this unit does not go further yet")
    else:
        out.append(f"kernel TLS: skipped: setsockopt(TCP_ULP, \"tls\") failed with {err} "
                   "(this kernel has no tls ULP: CONFIG_TLS not set or module not loadable)")
    return out + [""]


def close_lines(parts):
    out = ["== p08-tls-close: three endings of a TLS 1.3 connection, the server ending it", ""]
    for p in parts:
        f = p["facts"]
        cr, sr = f["client_read"], f["server_last_read"]
        out += [f"-- {p['part']}: the server: {ENDING[p['part']]}",
                f"client's next SSL_read: ret={cr['ret']} ssl_error={cr['ssl_error']} "
                f"errno={cr['errno']} reason={cr['reason']}",
                f"server's last SSL_read: ret={sr['ret']} ssl_error={sr['ssl_error']} "
                f"(the ack, or with notify the client's close_notify)",
                f"server sent {' '.join(f['server_fin_rst']) or 'no FIN or RST'}; client sent "
                f"{' '.join(f['client_fin_rst']) or 'no FIN or RST'}",
                "segments:"]
        out += segment_lines(p, 1) + [""]
    return out


def strip(p):
    return {k: v for k, v in p.items() if k not in ("client", "server", "conns")}


def build(rawroot, outdir):
    dirs = {u: t.unit_dir(rawroot, u) for u in UNITS if os.path.isdir(os.path.join(rawroot, u))}
    if not dirs:
        raise t.RawError(f"{rawroot}: neither {' nor '.join(UNITS)} ran")
    first = next(iter(dirs.values()))
    lines = [f"{NAME}: TLS over TCP (Debian's OpenSSL "
             f"{t.read_lines(os.path.join(first, 'openssl-version.txt'))[0]})",
             t.header(t.kernel_release(first), t.collected_at(first)), ""]
    # the keys every report's .json has (tcplab_diff, tcplab_matrix read them)
    obj = {"experiment": NAME, "report": NAME, "kernel": t.kernel_release(first),
           "collected_at": t.collected_at(first), "load_average": None, "result": "ok",
           "errno": None, "elapsed_s": None, "counters": None, "knobs": t.read_knobs(first)}
    if "p08-tls-handshake" in dirs:
        parts, ktls = handshake_unit(dirs["p08-tls-handshake"])
        lines += handshake_lines(parts, ktls)
        obj["handshake"] = [strip(p) for p in parts]
        obj["ktls"] = ktls
    if "p08-tls-close" in dirs:
        parts = close_unit(dirs["p08-tls-close"])
        lines += close_lines(parts)
        obj["close"] = [strip(p) for p in parts]
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
