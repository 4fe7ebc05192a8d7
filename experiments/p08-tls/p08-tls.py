#!/usr/bin/python3
"""p08-tls report: TLS over TCP on the wire.  p08-tls-handshake: a TLS 1.3 handshake, one
resumed from its session ticket, and a TLS 1.2 handshake, each with the round trips before the
client could send application data and the bytes each way; kernel TLS (TCP_ULP "tls") where the
kernel has it: a TLS 1.3 and a TLS 1.2 connection with OpenSSL's kTLS on both ends, which
directions went into the kernel (tls_peer), the sockets' ULP as sock_diag showed it while open
(sockwatch; iproute2's ss -tieH of the same sockets beside it where the run saved that), and
/proc/net/tls_stat's deltas on each end, cross-checked; else one line why it was skipped.
p08-tls-close: three endings (close_notify, a
FIN without it, a RST) and what the client's next SSL_read returned.  p08-tls-records: one
16384-byte SSL_write's record over the client's segments, ten small SSL_writes' records per
segment with Nagle and with TCP_NODELAY, and p03's request in two writes under TLS (Nagle,
TCP_NODELAY on the client, on both): each exchange's time, DelayedACKs on each side, the pure
ACKs a delayed-ACK timer late in the capture, and where TLS 1.3's session tickets went.  The
TLS record headers
are the lab's own decoding of the payloads the capture kept (raw/<unit>/<part>-capture.pcap,
snaplen 65535): content type, legacy version, length, and the handshake message types of the
records still in plaintext.  Every number from raw/."""
import os
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = "p08-tls"
UNITS = ("p08-tls-handshake", "p08-tls-close", "p08-tls-records")
HANDSHAKE_PARTS = ("tls13", "tls12")
CLOSE_PARTS = ("notify", "fin", "rst")
KTLS_PARTS = ("ktls13", "ktls12")
# p08-tls-records: (part, what it does), in the order the collect script runs them
RECORD_PARTS = (("record", "one SSL_write, one record at most 16384 bytes of plaintext"),
                ("small-nagle", "small SSL_writes back to back, Nagle on"),
                ("small-nodelay", "the same small SSL_writes, TCP_NODELAY on the client"))
STALL_PARTS = (("stall-nagle", "a request in two SSL_writes, then the reply; Nagle on both ends"),
               ("stall-nodelay", "the same, TCP_NODELAY on the client"),
               ("stall-both", "the same, TCP_NODELAY on both ends"))
MAX_FRAGMENT = 16384        # OpenSSL's max_send_fragment (the default): plaintext per record
RECORD_COUNTERS = ("TcpExtDelayedACKs", "TcpExtTCPPureAcks", "TcpExtTCPAutoCorking",
                   "TcpOutSegs", "TcpRetransSegs")
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
    """[(t_ns, src, sport, dst, dport, seq, flags, payload, ack)] of the TCP/IPv4 packets of an
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
    """(src, sport, dst, dport, seq, flags, payload, ack) of an Ethernet/IPv4/TCP frame, else
    None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0f) * 4
    total = struct.unpack("!H", ip[2:4])[0]
    if ip[9] != 6 or len(ip) < ihl + 20:
        return None
    tcp = ip[ihl:total]
    sport, dport, seq, ack = struct.unpack("!HHII", tcp[:12])
    doff = (tcp[12] >> 4) * 4
    src = ".".join(str(b) for b in ip[12:16])
    dst = ".".join(str(b) for b in ip[16:20])
    return src, sport, dst, dport, seq, tcp[13], bytes(tcp[doff:]), ack


FLAG_BITS = ((0x02, "S"), (0x01, "F"), (0x04, "R"), (0x08, "P"), (0x10, "A"))


def flag_text(f):
    return "".join(n for b, n in FLAG_BITS if f & b)


def connections(packets, port):
    """{client port: {"segs": [...], "c>s": bytes, "s>c": bytes}}: each connection's packets in
    order, each with its direction and stream offset, and each direction's byte stream put
    together from the payloads by sequence number (a retransmission counted once)."""
    conns = {}
    for p in packets:
        t_ns, src, sport, dst, dport, seq, flags, payload, ack = p
        d, cport = ("c>s", sport) if dport == port else ("s>c", dport)
        c = conns.setdefault(cport, {"segs": [], "isn": {}, "bytes": {"c>s": {}, "s>c": {}}})
        if flags & 0x02:
            c["isn"][d] = seq
        if d not in c["isn"]:
            raise t.RawError(f"connection from port {cport}: a {d} segment before its SYN")
        rel = (seq - c["isn"][d] - 1) % (1 << 32)
        c["segs"].append({"t_ns": t_ns, "dir": d, "flags": flag_text(flags), "off": rel,
                          "len": len(payload), "ack_raw": ack if flags & 0x10 else None})
        for i, b in enumerate(payload):
            c["bytes"][d].setdefault(rel + i, b)
    for c in conns.values():
        # each ACK as an offset in the other direction's stream (the next byte it wants)
        for sg in c["segs"]:
            other = "s>c" if sg["dir"] == "c>s" else "c>s"
            a, isn = sg.pop("ack_raw"), c["isn"].get(other)
            sg["ack"] = None if a is None or isn is None else (a - isn - 1) % (1 << 32)
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
    if "ret" not in ktls or "errno" not in ktls:
        raise t.RawError(f"{rawdir}/ktls.txt: no ret= and errno=")
    # ENOTCONN: the tls ULP is there, and the collect script ran every kTLS part
    ktls_parts = [ktls_part(rawdir, name) for name in KTLS_PARTS] \
        if ktls["errno"] == "ENOTCONN" else []
    return parts, ktls, ktls_parts


# ---- kernel TLS -----------------------------------------------------------------------------------

def tls_stat(path):
    """/proc/net/tls_stat: `Name<blanks>value` lines → {name: int}."""
    out = {}
    for line in t.read_lines(path):
        f = line.split()
        if len(f) != 2 or not f[1].isdigit():
            raise t.RawError(f"{path}: '{line}' is not a tls_stat line")
        out[f[0]] = int(f[1])
    if "TlsTxSw" not in out or "TlsRxSw" not in out:
        raise t.RawError(f"{path}: no TlsTxSw or TlsRxSw")
    return out


def ulp_states(path):
    """The distinct ULP states of the watched socket, in order, from sockwatch's lines: each a
    dict of ulp, tls_version, tls_cipher, tls_tx, tls_rx (`ulp` "none" before one is attached;
    sockwatch prints the ULP keys only when the kernel sent INET_DIAG_ULP_INFO).  Read by
    tcplab.read_sockwatch, which refuses a run cut short (no `end` line)."""
    keys = ("ulp", "tls_version", "tls_cipher", "tls_tx", "tls_rx")
    states = []
    for d in t.read_sockwatch(path):
        st = {k: d.get(k, "none") for k in keys}
        if not states or states[-1] != st:
            states.append(st)
    if not states:
        raise t.RawError(f"{path}: sockwatch saw no socket")
    return states


# iproute2 ss's words for TLS_CONF_* (misc/ss.c tcp_tls_conf()) -> sockwatch's (tl_ulp.c)
SS_CONF = {"none": "base", "sw": "sw", "hw": "hw", "hw-record": "hw_record"}
SS_KEYS = (("version", "tls_version"), ("cipher", "tls_cipher"), ("txconf", "tls_tx"),
           ("rxconf", "tls_rx"))


def ss_ulp(path):
    """raw/PART[-server]-ss.txt, `ss -tieH` of the part's ESTAB socket in one namespace (written
    by collect runs since issue 29; None where absent): {"ino", "cookie" (ss's sk:, hex), "text"
    (what ss printed from tcp-ulp- on), "state" (sockwatch's keys for what ss printed: conf
    words as sockwatch names them)}, or {"socket": None} when ss showed no socket."""
    lines = t.read_lines(path, optional=True)
    if lines is None:
        return None
    heads = [x for x in lines if x and not x[0].isspace()]
    if not heads:
        return {"socket": None}
    if len(heads) > 1:
        raise t.RawError(f"{path}: {len(heads)} sockets, one wanted")
    text = " ".join(x.strip() for x in lines)
    ino, sk = re.search(r" ino:(\d+)", text), re.search(r" sk:([0-9a-f]+)", text)
    ulp = re.search(r" (tcp-ulp-(\S+).*)$", text)
    if not ino or not sk:
        raise t.RawError(f"{path}: no ino: or sk: (ss -e)")
    out = {"socket": {"ino": int(ino.group(1)), "cookie": int(sk.group(1), 16)},
           "text": ulp.group(1) if ulp else None,
           "state": {"ulp": ulp.group(2) if ulp else "none"}}
    for word, key in SS_KEYS:
        m = ulp and re.search(rf" {word}: (\S+)", ulp.group(1))
        if m:
            out["state"][key] = SS_CONF.get(m.group(1), m.group(1)) if "conf" in word \
                else m.group(1)
    return out


def ss_disagree(side, ss, final, watched):
    """What ss printed against sockwatch's last TLS state of the same socket (inode, cookie);
    nothing to compare when ss found no socket (it ran after the socket's close)."""
    if ss["socket"] is None:
        return []
    if (ss["socket"]["ino"], ss["socket"]["cookie"]) not in watched:
        return [f"{side}: ss's socket ino:{ss['socket']['ino']} cookie {ss['socket']['cookie']} "
                "is not the one sockwatch watched"]
    return [f"{side}: ss says {k}={v}, sockwatch's last tls state {k}={final.get(k)}"
            for k, v in ss["state"].items() if final.get(k) != v]


def ktls_side(rawdir, part, side):
    """One end of a kTLS part: tls_peer's ktls line, the sockwatch states, the tls_stat delta."""
    pre = "" if side == "client" else "server-"
    lines = tagged(os.path.join(rawdir, f"{part}-{side}.txt"))
    kl = step(lines, "ktls", 1)
    hs = step(lines, "handshake", 1)
    before = tls_stat(os.path.join(rawdir, f"{pre}{part}-tls-stat-before.txt"))
    after = tls_stat(os.path.join(rawdir, f"{pre}{part}-tls-stat-after.txt"))
    delta = {k: after[k] - before.get(k, 0) for k in after}
    states = ulp_states(os.path.join(rawdir, f"{part}-{pre}sockwatch.txt"))
    # the last state with the ULP's TLS details (INET_ULP_INFO_TLS: tls_tx is "none" only
    # without it): a socket caught in its close may show no ULP any more (the 7.2 guest's TLS
    # 1.2 client did) or its name alone, the context already gone (a 6.1 guest's TLS 1.3
    # client in CI), which says nothing about what was handed over
    final = next((st for st in reversed(states) if st["ulp"] == "tls" and st["tls_tx"] != "none"),
                 states[-1])
    check = {"TlsTxSw": (delta["TlsTxSw"], int(kl["send"]), int(final["tls_tx"] == "sw")),
             "TlsRxSw": (delta["TlsRxSw"], int(kl["recv"]), int(final["tls_rx"] == "sw"))}
    disagree = [f"{side}: {k} moved {d}, tls_peer says {p}, sockwatch's last tls state {w}"
                for k, (d, p, w) in check.items() if not d == p == w]
    out = {"side": side, "version": hs["version"], "cipher": hs["cipher"],
           "send": int(kl["send"]), "recv": int(kl["recv"]), "ulp": kl["ulp"],
           "ulp_errno": kl["ulp_errno"], "ulp_states": states,
           "tls_stat_delta": {k: v for k, v in delta.items() if v},
           "tls_stat_after": after, "disagree": disagree}
    ss = ss_ulp(os.path.join(rawdir, f"{part}-{pre}ss.txt"))
    if ss is not None:      # runs since issue 29 only: the references' .json stay as they are
        sw = os.path.join(rawdir, f"{part}-{pre}sockwatch.txt")
        watched = {(d.int("inode"), d.int("cookie")) for d in t.read_sockwatch(sw)
                   if "inode" in d and "cookie" in d}
        ss["disagree"] = ss_disagree(side, ss, final, watched)
        out["ss"] = ss
    return out


def ktls_part(rawdir, part):
    return {"part": part, "client": ktls_side(rawdir, part, "client"),
            "server": ktls_side(rawdir, part, "server")}


def state_text(st):
    if st["ulp"] == "none":
        return "no ULP"
    if st["ulp"] != "tls":
        return f"ulp={st['ulp']}"
    return (f"tls {st['tls_version']} {st['tls_cipher']} tx={st['tls_tx']} rx={st['tls_rx']}")


def ss_lines(c, s):
    """iproute2's ss beside sockwatch, where the run saved `ss -tieH` (none: no line)."""
    sides = [x for x in (c, s) if "ss" in x]
    if not sides:
        return []
    out = []
    for x in sides:
        ss = x["ss"]
        what = ("no ESTAB socket on the part's port when it ran: not cross-checked"
                if ss["socket"] is None else
                f"ino:{ss['socket']['ino']} sk:{ss['socket']['cookie']:x}: "
                f"{ss['text'] or 'no tcp-ulp-'}")
        out.append(f"ss -tieH (iproute2) of the {x['side']}'s socket after the handshake: {what}")
    dis = [d for x in sides for d in x["ss"]["disagree"]]
    seen = [x["side"] for x in sides if x["ss"]["socket"] is not None]
    if dis:
        out += [f"DISAGREE: {d}" for d in dis]
    elif seen:
        out.append(f"cross-check: ss's decoding on the {' and '.join(seen)}"
                   " (the sockets sockwatch watched: ino = inode, sk = cookie) is sockwatch's last "
                   "tls state (ss's none = TLS_CONF_BASE = sockwatch's base): agree")
    return out


def ktls_lines(ktls, kparts):
    err = ktls.get("errno")
    if ktls.get("ret") == "0":
        return ["kernel TLS: setsockopt(TCP_ULP, \"tls\") on an unconnected socket succeeded, "
                "which no kernel tcplab knows does: not read further", ""]
    if err != "ENOTCONN":
        return [f"kernel TLS: skipped: setsockopt(TCP_ULP, \"tls\") failed with {err} "
                "(this kernel has no tls ULP: CONFIG_TLS not set or module not loadable)", ""]
    out = ["== kernel TLS: setsockopt(TCP_ULP, \"tls\") on an unconnected socket failed with "
           "ENOTCONN: the tls ULP is there (tls_init() wants an established socket)", ""]
    yn = {0: "no", 1: "yes"}
    for kp in kparts:
        c, s = kp["client"], kp["server"]
        out += [f"-- {kp['part']}: {c['version']}, {c['cipher']}, tls_peer -K "
                "(SSL_OP_ENABLE_KTLS) on both ends",
                f"OpenSSL moved into the kernel: client send={yn[c['send']]} receive={yn[c['recv']]};"
                f" server send={yn[s['send']]} receive={yn[s['recv']]}"]
        for side in (c, s):
            out.append(f"sock_diag ULP of the {side['side']}'s socket (sockwatch, every 5 ms): "
                       + " -> ".join(state_text(st) for st in side["ulp_states"]))
        out += ss_lines(c, s)
        for side in (c, s):
            moved = " ".join(f"{k} {v:+d}" for k, v in side["tls_stat_delta"].items())
            out.append(f"/proc/net/tls_stat in the {side['side']}'s namespace: {moved or 'nothing moved'}"
                       f" (TlsCurrTxSw {side['tls_stat_after']['TlsCurrTxSw']}, TlsCurrRxSw "
                       f"{side['tls_stat_after']['TlsCurrRxSw']} after the close)")
        dis = c["disagree"] + s["disagree"]
        if dis:
            out += [f"DISAGREE: {d}" for d in dis]
        else:
            out.append("cross-check: on each end TlsTxSw and TlsRxSw moved by what tls_peer said "
                       "went into the kernel and by sockwatch's last tls_tx=sw / tls_rx=sw: agree")
        out.append("")
    return out


def read_part_tagged(rawdir, part):
    cap = t.read_lines(os.path.join(rawdir, f"{part}-capture.txt"))
    ready = t.kv(cap[0].partition(" ")[2]) if cap and cap[0].startswith("ready ") else None
    if ready is None or "port" not in ready:
        raise t.RawError(f"{rawdir}/{part}-capture.txt: no ready line with port=")
    port = int(ready["port"])
    return {"part": part, "port": port, "clock_offset_ns": int(ready.get("clock_offset_ns", "0")),
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


# ---- p08-tls-records ------------------------------------------------------------------------

def delack_ms(rawdir):
    """HZ (the server's machine.txt) → (TCP_DELACK_MIN in ms, one jiffy in ms): HZ/25 jiffies
    when HZ >= 100 (include/net/tcp.h), else 4."""
    info, _ = t.read_machine(os.path.join(rawdir, "machine-server.txt"), ("kernel", "hz"))
    hz = info.int("hz", 1, 100000)
    jiffies = hz // 25 if hz >= 100 else 4
    return hz, round(jiffies * 1000 / hz, 3), round(1000 / hz, 3)


def client_gso_max_segs(rawdir):
    """gso_max_segs of the client's veth end as wire.txt's `ip -d link` showed it."""
    side = None
    for line in t.read_lines(os.path.join(rawdir, "wire.txt")):
        if line.startswith("## "):
            side = line
        elif side and side.startswith("## client") and "gso_max_segs " in line:
            return int(line.split("gso_max_segs ", 1)[1].split()[0])
    raise t.RawError(f"{rawdir}/wire.txt: no gso_max_segs on the client's side")


def app_part(rawdir, name):
    """One records part: the client's application records after its handshake (each mapped to
    the SSL_write it came from) and the client's data segments that carried them."""
    p = read_part_tagged(rawdir, name)
    hs = step(p["client"], "handshake", 1)
    wire_out = int(hs["wire_out"])
    _, c = conn_of(p, 1)
    writes = [int(x["ret"]) for x in p["client"] if x["_first"] == "write" and x["i"] == "1"]
    if len(writes) < 2:
        raise t.RawError(f"{rawdir}/{name}-client.txt: fewer than 2 write lines")
    req_writes = writes[:-1]            # the last one is the 1-byte ack
    want = []
    for w, n in enumerate(req_writes, 1):
        want += [w] * -(-n // MAX_FRAGMENT)
    recs = [r for r in records(c["c>s"]) if r["off"] >= wire_out]
    if len(recs) < len(want):
        raise t.RawError(f"{name}: {len(recs)} client records after the handshake, its "
                         f"{len(req_writes)} SSL_writes make {len(want)}")
    recs = recs[:len(want)]
    end = recs[-1]["off"] + 5 + recs[-1]["length"]
    segs, seen = [], set()
    for sg in c["segs"]:
        if (sg["dir"] == "c>s" and sg["len"] and wire_out <= sg["off"] < end
                and sg["off"] not in seen):
            seen.add(sg["off"])
            segs.append(sg)
    for r, w in zip(recs, want):
        r["write"] = w
        r["segments"] = [k for k, sg in enumerate(segs, 1)
                         if sg["off"] < r["off"] + 5 + r["length"] and sg["off"] + sg["len"] > r["off"]]
    for sg in segs:
        sg["starts"] = [k for k, r in enumerate(recs, 1)
                        if sg["off"] <= r["off"] < sg["off"] + sg["len"]]
    cc, sc = tw.read_both_counters(rawdir, f"{name}-", RECORD_COUNTERS, RECORD_COUNTERS)
    nod = [x for x in p["client"] if x["_first"] == "nodelay"]
    return {"part": name, "p": p, "c": c, "wire_out": wire_out, "writes": req_writes,
            "records": recs, "segs": segs, "counters_client": cc, "counters_server": sc,
            "nodelay_client": int(nod[0]["tcp_nodelay"]) if nod else 0,
            "retransmitted": sum(1 for sg in c["segs"] if sg["dir"] == "c>s" and sg["len"]
                                 and wire_out <= sg["off"] < end) - len(segs)}


def record_json(a, limit_ms):
    recs = [{"n": k, "off": r["off"] - a["wire_out"], "type": r["type"], "version": r["version"],
             "length": r["length"], "write": r["write"], "segments": r["segments"]}
            for k, r in enumerate(a["records"], 1)]
    segs = [{"n": k, "t_ms": round((sg["t_ns"] - a["segs"][0]["t_ns"]) / 1e6, 3),
             "off": sg["off"] - a["wire_out"], "len": sg["len"], "records_starting": sg["starts"]}
            for k, sg in enumerate(a["segs"], 1)]
    return {"part": a["part"], "nodelay_client": a["nodelay_client"], "writes": a["writes"],
            "records": recs, "segments": segs,
            "largest_segment": max(sg["len"] for sg in a["segs"]),
            "records_per_segment": [len(sg["starts"]) for sg in a["segs"]],
            "retransmitted_segments": a["retransmitted"],
            "server_acks_a_timer_late": len(acks_late(a["c"], "c>s", limit_ms)),
            "counters_client": a["counters_client"], "counters_server": a["counters_server"]}


def acks_late(c, direction, limit_ms):
    """Data segments of `direction` whose first covering ACK from the other side was a pure ACK
    at least limit_ms later: [(segment, its ACK, wait ms)]."""
    segs, out = c["segs"], []
    for i, sg in enumerate(segs):
        if sg["dir"] != direction or not sg["len"]:
            continue
        e = sg["off"] + sg["len"]
        ack = next((q for q in segs[i + 1:] if q["dir"] != direction and q["ack"] is not None
                    and (q["ack"] - e) % (1 << 32) < (1 << 31)), None)
        if ack is not None and ack["len"] == 0 and "F" not in ack["flags"]:
            wait = (ack["t_ns"] - sg["t_ns"]) / 1e6
            if wait >= limit_ms:
                out.append((sg, ack, round(wait, 3)))
    return out


def tickets(a, limit_ms):
    """TLS 1.3's session tickets: the server's records its SSL_accept wrote after what the
    client's SSL_connect read (server wire_out - client wire_in); each server segment that
    carried them (what it carried, and the client's first ACK of it: how late, pure or with
    data); and how long the server's first reply (its stream byte wire_out) waited between its
    SSL_write and the wire (the capture's times moved to CLOCK_MONOTONIC by clock_offset_ns)."""
    p, c = a["p"], a["c"]
    cin = int(step(p["client"], "handshake", 1)["wire_in"])
    sout = int(step(p["server"], "handshake", 1)["wire_out"])
    recs = records_in(records(c["s>c"]), cin, sout)
    if not recs:
        return None
    segs = c["segs"]
    carry = []
    for i, sg in enumerate(segs):
        if sg["dir"] != "s>c" or not sg["len"] or not (sg["off"] < sout and sg["off"] + sg["len"] > cin):
            continue
        e = sg["off"] + sg["len"]
        ack = next((q for q in segs[i + 1:] if q["dir"] == "c>s" and q["ack"] is not None
                    and q["ack"] >= e), None)
        d = {"t_ms": round((sg["t_ns"] - segs[0]["t_ns"]) / 1e6, 3), "len": sg["len"],
             "tickets": sum(1 for r in recs if sg["off"] <= r["off"] < e),
             "reply": int(sg["off"] <= sout < e)}
        if ack is not None:
            d["acked_after_ms"] = round((ack["t_ns"] - sg["t_ns"]) / 1e6, 3)
            d["ack"] = "pure ACK" if ack["len"] == 0 else "with data"
            d["ack_a_timer_late"] = int(ack["len"] == 0 and d["acked_after_ms"] >= limit_ms)
        carry.append(d)
    out = {"records": len(recs), "bytes": sout - cin, "lengths": [r["length"] for r in recs],
           "segments": carry}
    reply = next((sg for sg in segs if sg["dir"] == "s>c" and sg["len"]
                  and sg["off"] <= sout < sg["off"] + sg["len"]), None)
    if reply is not None:
        sw = int(step(p["server"], "write", 1)["t_ns"])
        out["reply_wait_ms"] = round((reply["t_ns"] - p["clock_offset_ns"] - sw) / 1e6, 3)
    return out


def stall_part(rawdir, name, timer):
    a = app_part(rawdir, name)
    delack, jiffy = timer
    limit = round(delack - jiffy, 3)
    ex = [x for x in a["p"]["client"] if x["_first"] == "exchange"]
    if not ex:
        raise t.RawError(f"{rawdir}/{name}-client.txt: no exchange lines")
    ms_ = [round(float(x["us"]) / 1e3, 3) for x in ex]
    srt = sorted(ms_)
    nod_s = [x for x in a["p"]["server"] if x["_first"] == "nodelay"]
    c = a["c"]
    late_s = acks_late(c, "c>s", limit)     # the server's ACKs a timer late
    late_c = acks_late(c, "s>c", limit)     # the client's
    cc, sc = a["counters_client"], a["counters_server"]
    return {"part": name, "nodelay_client": a["nodelay_client"],
            "nodelay_server": int(nod_s[0]["tcp_nodelay"]) if nod_s else 0,
            "requests": len(ex), "writes_per_request": int(ex[0]["writes"]),
            "exchange_ms": {"first": ms_[0], "min": srt[0], "p50": pkt.nearest_rank(srt, 50),
                            "max": srt[-1]},
            "exchanges_over_timer": sum(1 for x in ms_ if x >= limit),
            "times_ms": ms_, "timer_ms": limit,
            "client_data_segments": sum(1 for sg in c["segs"] if sg["dir"] == "c>s" and sg["len"]
                                        and sg["off"] >= a["wire_out"]),
            "server_acks_a_timer_late": len(late_s), "client_acks_a_timer_late": len(late_c),
            "delayed_acks": {"client": cc.get("TcpExtDelayedACKs") or 0,
                             "server": sc.get("TcpExtDelayedACKs") or 0},
            "tickets": tickets(a, limit), "counters_client": cc, "counters_server": sc}


def records_unit(rawdir):
    hz, delack, jiffy = delack_ms(rawdir)
    parts = [record_json(app_part(rawdir, name), round(delack - jiffy, 3))
             for name, _ in RECORD_PARTS]
    stalls = [stall_part(rawdir, name, (delack, jiffy)) for name, _ in STALL_PARTS]
    return {"hz": hz, "tcp_delack_min_ms": delack, "jiffy_ms": jiffy,
            "client_gso_max_segs": client_gso_max_segs(rawdir), "parts": parts, "stall": stalls}


def records_lines(u):
    titles = dict(RECORD_PARTS + STALL_PARTS)
    out = ["== p08-tls-records: TLS 1.3 records against the client's TCP segments (the client's "
           f"end of the veth, gso_max_segs {u['client_gso_max_segs']}: one segment per packet)",
           "(TLS1.2 in a TLS 1.3 record's header is its legacy_record_version; len = the plaintext "
           "+ 1 byte of inner content type + the 16-byte AEAD tag)", ""]
    for r in u["parts"]:
        recs, segs = r["records"], r["segments"]
        nw = len(r["writes"])
        sizes = f"{r['writes'][0]} B" if len(set(r["writes"])) == 1 else "B, ".join(
            str(w) for w in r["writes"]) + " B"
        out += [f"-- {r['part']}: {titles[r['part']]}" + (" (TCP_NODELAY)" if r["nodelay_client"] else ""),
                f"{nw} SSL_write{'s' if nw > 1 else ''} of {sizes} -> {len(recs)} record"
                f"{'s' if len(recs) > 1 else ''} -> {len(segs)} client segment"
                f"{'s' if len(segs) > 1 else ''} (largest {r['largest_segment']} B"
                + (f", {r['retransmitted_segments']} sent again" if r["retransmitted_segments"] else "")
                + ")"]
        for k, rec in enumerate(recs, 1):
            sp = rec["segments"]
            span = f"segment {sp[0]}" if len(sp) == 1 else f"segments {sp[0]}-{sp[-1]} ({len(sp)})"
            if len(recs) <= 4 or k <= 2 or k == len(recs):
                out.append(f"  record {k}: {rec['type']} {rec['version']} len={rec['length']} "
                           f"(SSL_write {rec['write']}), {rec['length'] + 5} B on the wire: {span}")
            elif k == 3:
                mid = recs[2:-1]
                same = all((m["type"], m["length"]) == (recs[1]["type"], recs[1]["length"])
                           and len(m["segments"]) == 1 for m in mid)
                out.append(f"  records 3-{len(recs) - 1}: "
                           + ("the same, each within one segment" if same else "in the .json"))
        per = r["records_per_segment"]
        out.append("  records starting in each segment: " + " ".join(str(x) for x in per))
        out.append("segments (ms from the first; bytes from the first record's header):")
        for sg in segs:
            st = sg["records_starting"]
            txt = (f"record {st[0]}" if len(st) == 1 else f"records {st[0]}-{st[-1]}" if st
                   else "inside a record")
            out.append(f"  {sg['t_ms']:8.3f} ms  len={sg['len']:<5} bytes {sg['off']}-"
                       f"{sg['off'] + sg['len'] - 1}: {txt}")
        cc, sc = r["counters_client"], r["counters_server"]
        out += [f"the server's pure ACKs a delayed-ACK timer after the data: "
                f"{r['server_acks_a_timer_late']}; counters: client TcpOutSegs "
                f"{t.fmt_delta(cc.get('TcpOutSegs'))}, TcpRetransSegs "
                f"{t.fmt_delta(cc.get('TcpRetransSegs'))}, TCPAutoCorking "
                f"{t.fmt_delta(cc.get('TcpExtTCPAutoCorking'))}; server DelayedACKs "
                f"{t.fmt_delta(sc.get('TcpExtDelayedACKs'))}", ""]
    out += [f"-- the delayed-ACK stall under TLS (p03-small-writes): HZ={u['hz']}, TCP_DELACK_MIN "
            f"= {u['tcp_delack_min_ms']:g} ms; a timer: >= {u['tcp_delack_min_ms'] - u['jiffy_ms']:g} ms",
            f"  {'part':<13} {'nodelay c/s':>11} {'requests':>8} {'first_ms':>9} {'median_ms':>9} "
            f"{'max_ms':>8} {'>=timer':>7}  {'DelayedACKs c/s':>15}  {'late ACKs c/s':>13}"]
    for r in u["stall"]:
        e = r["exchange_ms"]
        out.append(f"  {r['part']:<13} {str(r['nodelay_client']) + '/' + str(r['nodelay_server']):>11} "
                   f"{r['requests']:>8} {e['first']:>9.3f} {e['p50']:>9.3f} {e['max']:>8.3f} "
                   f"{r['exchanges_over_timer']:>7}  "
                   f"{str(r['delayed_acks']['client']) + '/' + str(r['delayed_acks']['server']):>15}  "
                   f"{str(r['client_acks_a_timer_late']) + '/' + str(r['server_acks_a_timer_late']):>13}")
    out += ["  (a request: two SSL_writes, two records; late ACKs: pure ACKs a timer after the "
            "data they acknowledge, in the capture)"]
    for r in u["stall"]:
        tk = r["tickets"]
        if tk is None:
            out.append(f"  {r['part']}: no records from the server after the client's handshake "
                       "ended and before its reply (no session tickets)")
            continue
        out.append(f"  {r['part']}: session tickets: {tk['records']} records ({tk['bytes']} B, len "
                   + ", ".join(str(x) for x in tk["lengths"]) + ") after what the client's "
                   "handshake read, in these server segments:")
        for sg in tk["segments"]:
            what = [f"{sg['tickets']} ticket{'s' if sg['tickets'] != 1 else ''}"] if sg["tickets"] else []
            what += ["the first reply"] if sg["reply"] else []
            carried = " + ".join(what) or "the rest of a ticket"
            line = f"    {sg['t_ms']:8.3f} ms  len={sg['len']:<5} {carried}"
            if "ack" in sg:
                line += (f"; the client's ACK {sg['acked_after_ms']:.3f} ms later ({sg['ack']}"
                         + (", a timer late" if sg["ack_a_timer_late"] else "") + ")")
            out.append(line)
        if "reply_wait_ms" in tk:
            out.append(f"    the server's first reply reached the wire {tk['reply_wait_ms']:.3f} ms "
                       "after its SSL_write returned (its line's stamp: a packet can be on the wire "
                       "before it)")
    return out + [""]


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
    return out


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
    return {k: v for k, v in p.items() if k not in ("client", "server", "conns", "clock_offset_ns")}


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
           "errno": None, "elapsed_s": None, "counters": None, "knobs": None}
    # the knobs given (only p08-tls-records has any): each unit's knobs.txt, merged
    for d in dirs.values():
        k = t.read_knobs(d)
        if k:
            obj["knobs"] = {**(obj["knobs"] or {}), **k}
    if "p08-tls-handshake" in dirs:
        parts, ktls, kparts = handshake_unit(dirs["p08-tls-handshake"])
        lines += handshake_lines(parts, ktls) + ktls_lines(ktls, kparts)
        obj["handshake"] = [strip(p) for p in parts]
        obj["ktls"] = ktls
        if kparts:
            obj["ktls_parts"] = kparts
    if "p08-tls-close" in dirs:
        parts = close_unit(dirs["p08-tls-close"])
        lines += close_lines(parts)
        obj["close"] = [strip(p) for p in parts]
    if "p08-tls-records" in dirs:
        u = records_unit(dirs["p08-tls-records"])
        lines += records_lines(u)
        obj["records"] = u
    t.write_outputs(outdir, NAME, lines, obj)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
