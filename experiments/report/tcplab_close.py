"""tcplab_close.py — what the two FIN-WAIT-2 reports share (p05-close-wait, p05-fin-wait2-timeout):
the peer fixture's lines (read_peer), one connection's sockwatch events joined by its addresses
(a full socket and the timewait socket that replaces it keep the kernel's cookie, so sockwatch
shows the change as `event=change`, but a kernel that gave them two would show gone + new:
join by local/peer and both read the same), the life of a FIN-WAIT-2 socket measured against
the timer the kernel armed (fin_wait2), the timer wheel's lateness (tcplab.wheel_gran_ms),
tcp_fin_time() (include/net/tcp.h), `ss -tano` lines and /proc/net/sockstat.  Standard library
only; every number from raw files."""
import os

import tcplab as t
import tcplab_pkt as pkt
import tcplab_wire as tw

TCP_TIMEWAIT_LEN_S = 60          # include/net/tcp.h: TCP_TIMEWAIT_LEN (60*HZ)
TCP_FIN_TIMEOUT_MAX_S = 120      # include/net/tcp.h: TCP_FIN_TIMEOUT_MAX (120*HZ), TCP_LINGER2's cap
TW_KILL_S = 4                    # __inet_twsk_schedule(): timeo <= 4*HZ counts TWKilled, else TW
SCHED_SLACK_MS = 60              # sockwatch's sampling and wake-up slack on a loaded 2-core VM
PEER_KINDS = ("ready", "bind", "connect", "accept", "hold", "step", "exit")


def read_peer(path):
    """peer's output → {"ready", "connect", "accept", "exit": Fields or None, "steps": [Fields],
    "holds": [Fields]}; the first word of each line says what it is (SPEC: peer).  A line of
    another kind, or no `exit` line (peer did not finish), is refused."""
    out = {"ready": None, "bind": None, "connect": None, "accept": None, "exit": None,
           "steps": [], "holds": []}
    for n, line in enumerate(t.read_lines(path), 1):
        word = line.split(" ", 1)[0]
        if word not in PEER_KINDS:
            raise t.RawError(f"{path}: line {n}: `{line[:40]}` is not a peer line")
        f = t.Fields(f"{path}: line {n}", t.kv(line))
        if word == "step":
            f.int("t_ns")
            f.str("op")
            out["steps"].append(f)
        elif word == "hold":
            out["holds"].append(f)
        elif out[word] is None:
            out[word] = f
    if out["exit"] is None:
        raise t.RawError(f"{path}: no `exit` line: peer did not finish")
    return out


def step(peer, op_prefix, path):
    """The first step whose op starts with op_prefix (`linger2:`, `drain`, `close`)."""
    for s in peer["steps"]:
        if s.str("op").startswith(op_prefix):
            return s
    raise t.RawError(f"{path}: no `{op_prefix}` step")


def client_of(peer, path):
    """A client peer's connect line: its local address and start time."""
    c = peer["connect"]
    if c is None:
        raise t.RawError(f"{path}: no `connect` line")
    if c.int("ret", -1, 0) != 0:
        raise t.RawError(f"{path}: connect() failed ({c.str('errno')}): nothing to watch")
    return c


def events(path, start_ns, local=None, peer=None):
    """sockwatch's events of the socket(s) first seen with these addresses (either may be None:
    any), each followed by its cookie to its end whatever its addresses became (tcplab.follow:
    a socket aborted by a RST can be caught in TCP_CLOSE with its port released), as
    tcplab.sockwatch_event() plus the addresses, info_len, inode and rto_ms."""
    out = []
    pick = lambda e: ((local is None or e.str("local") == local) and  # noqa: E731
                      (peer is None or e.str("peer") == peer))
    for e in t.follow(t.read_sockwatch(path), pick):
        out.append(t.sockwatch_event(e, start_ns) |
                   {"t_ns": e.int("t_ns"), "local": e.str("local"), "peer": e.str("peer"),
                    "info_len": e.int("info_len", default=None),
                    "inode": e.int("inode")})
    return out


def window_ms(expected_ms, hz):
    """When a timer of expected_ms armed at 0 is seen to fire: no earlier than a jiffy before
    (armed mid-jiffy), no later than the wheel's granularity, two jiffies and the slack."""
    jiffy = 1000 / hz
    return (round(expected_ms - jiffy, 3),
            round(expected_ms + t.wheel_gran_ms(expected_ms, hz) + 2 * jiffy + SCHED_SLACK_MS, 3))


def fin_time_ms(linger2_s, fin_timeout_s, rto_ms, hz):
    """tcp_fin_time(): linger2 (when set, > 0) or tcp_fin_timeout, at least 3.5 RTO as the
    kernel computes it in jiffies: (rto << 2) - (rto >> 1).  rto_ms None: no floor known."""
    base_j = (linger2_s if linger2_s and linger2_s > 0 else fin_timeout_s) * hz
    floor_j = None
    if rto_ms is not None:
        rto_j = round(rto_ms * hz / 1000)
        floor_j = (rto_j << 2) - (rto_j >> 1)
    j = base_j if floor_j is None else max(base_j, floor_j)
    return {"base_ms": base_j * 1000 / hz, "floor_ms": None if floor_j is None
            else floor_j * 1000 / hz, "ms": j * 1000 / hz, "floored": floor_j is not None
            and floor_j > base_j, "tw_counter": "TcpExtTWKilled" if j <= TW_KILL_S * hz
            else "TcpExtTW"}


def rto_of_floor(armed_ms, hz):
    """The RTO (ms) whose 3.5 x, as tcp_fin_time() computes it in jiffies, is armed_ms rounded
    to a jiffy; None when no RTO gives it."""
    want = round(armed_ms * hz / 1000)
    r = max(1, round(want / 3.5))
    for cand in (r - 1, r, r + 1):
        if cand > 0 and (cand << 2) - (cand >> 1) == want:
            return cand * 1000 / hz
    return None


def fin_acked(segs):
    """The client's FIN and the server's first segment that acknowledges it (the moment the
    client's socket leaves FIN-WAIT-1), or (FIN, None)."""
    fin = next((p for p in segs if p["dir"] == "c>s" and "F" in p["flags"]), None)
    if fin is None:
        return None, None
    want = (fin["seq"] + fin["len"] + 1) % 2 ** 32
    ack = next((p for p in segs if p["dir"] == "s>c" and p["t_ns"] >= fin["t_ns"]
                and p["ack"] == want), None)
    return fin, ack


def client_fin(path, local):
    """The capture at path, local's segments in it, and its FIN with the segment that ACKed it
    (fin_acked); refuses a capture without the connection or without the client's FIN."""
    cap = pkt.read_complete_capture(path)
    segs = pkt.conn_packets(cap, local)
    if not segs:
        raise t.RawError(f"{path}: no segment of {local}")
    fin, ack = fin_acked(segs)
    if fin is None:
        raise t.RawError(f"{path}: the client sent no FIN")
    return cap, segs, fin, ack


def fin_wait2(evs, hz, expected_ms, acked_ns, start_ns):
    """The FIN-WAIT-2 life of one client socket from its sockwatch events: the first sight
    (timer kind, expires_ms, a timewait socket or a full one), the gone event, how long after
    the ACK of the FIN (capture) it went, against the expected timer and its window; and what
    the first sight's expires_ms predicts (sight + expires_ms - ACK: the armed value)."""
    fw2 = [e for e in evs if e["state"] == "FIN-WAIT-2" and e["event"] != "gone"]
    gone = next((e for e in evs if e["event"] == "gone"), None)
    if not fw2:
        return None
    # An orphan's (inode 0) full socket with no timer is not a state it rests in: the softirq
    # that takes the ACK of its FIN sets FIN_WAIT2, then arms the keepalive timer or makes the
    # timewait socket (tcp_rcv_state_process, net/ipv4/tcp_input.c, 6.18), under the socket's
    # lock, which inet_diag does not take; a sample can fall between (a make test run: FIN-WAIT-2
    # timer=off at 17.376 ms, timewait at 18.398 ms).  The first sight is the next one.
    settled = [e for e in fw2 if not (e["inode"] == 0 and e["info_len"] and e["timer"] == "off")]
    first = settled[0] if settled else fw2[0]
    closed = next((e for e in evs if e["state"] == t.CLOSED and e["event"] != "gone"), None)
    out = {"first_ms": round(first["t_s"] * 1e3, 3), "timer": first["timer"],
           "expires_ms": first["expires_ms"], "info_len": first["info_len"],
           "inode": first["inode"],
           "kind": "timewait socket" if first["info_len"] == 0 else "full socket",
           "gone_ms": None if gone is None else round(gone["t_s"] * 1e3, 3),
           "gone_state": None if gone is None else last_state(evs[:evs.index(gone) + 1])}
    if closed is not None:
        out["closed_ms"] = round(closed["t_s"] * 1e3, 3)
    if first is not fw2[0]:
        out["between_ms"] = round(fw2[0]["t_s"] * 1e3, 3)
    if acked_ns is not None:
        at = (acked_ns - start_ns) / 1e6
        out["acked_ms"] = round(at, 3)
        if first["timer"] != "off":
            out["armed_ms"] = round(out["first_ms"] + first["expires_ms"] - at, 3)
        if gone is not None:
            out["lived_ms"] = round(out["gone_ms"] - at, 3)
    if expected_ms is not None:
        lo, hi = window_ms(expected_ms, hz)
        out.update(expected_ms=expected_ms, lo_ms=lo, hi_ms=hi,
                   within=("lived_ms" in out and lo <= out["lived_ms"] <= hi))
    return out


def between_note(w, indent="  "):
    """The line that says why fin_wait2()'s first sight is not the first FIN-WAIT-2 sample, or
    None."""
    if "between_ms" not in w:
        return None
    return (f"{indent}(the FIN-WAIT-2 sample at {w['between_ms']:.3f} ms, a full socket with no "
            "timer, fell between the state and its timer, which one softirq sets under the "
            "socket's lock; sock_diag reads without it)")


def last_state(evs):
    """The last state sockwatch saw a socket in before it went: a TCP_CLOSE sample on the way
    out (tcplab.CLOSED) is not one; that sample's time is fin_wait2()'s closed_ms."""
    states = [e["state"] for e in evs if e["state"] != t.CLOSED]
    return states[-1] if states else t.CLOSED


def event_lines(evs, indent="  "):
    """sockwatch's events of one connection as a table (t_ms from connect()); a TCP_CLOSE
    sample shows as CLOSE, with a line after the table that says what the kernel showed."""
    out = [f"{indent}{'t_ms':>11}  {'event':<6} {'state':<11} {'timer':<9} {'expires_ms':>10} "
           f"{'rto_ms':>6} {'info_len':>8} {'inode':>8}"]
    notes = []
    for e in evs:
        rto = "-" if e["rto_ms"] is None else e["rto_ms"]
        il = "-" if e["info_len"] is None else e["info_len"]
        out.append(f"{indent}{e['t_s'] * 1e3:11.3f}  {e['event']:<6} "
                   f"{t.shown_state(e['state']):<11} "
                   f"{e['timer']:<9} {e['expires_ms']:>10} {rto:>6} {il:>8} {e['inode']:>8}")
        if e["state"] == t.CLOSED and e["event"] != "gone":
            notes.append(t.closed_note(e["local"], e["inode"], e["t_s"] * 1e3, indent))
    return out + notes


def seg_lines(segs, start_ns, indent="  "):
    """One connection's segments (the capture) as lines, t_ms from connect()."""
    out = [f"{indent}{'t_ms':>11}  dir  segment"]
    for p in segs:
        ack = "-" if p["ack"] is None else p["ack"]
        out.append(f"{indent}{pkt.ms(p['t_ns'], start_ns):11.3f}  {p['dir']}  {p['flags']:<3} "
                   f"seq={p['seq']} ack={ack} len={p['len']}")
    return out


def read_ss(path, ports):
    """`ss -tano` → the lines of sockets whose local or peer port is one of ports, as
    {"state", "local", "peer", "timer" (the timer:(...) text or None), "line"}; None for a
    file that is not there (no ss where the unit ran)."""
    rows = t.read_ss_sockets(path)
    if rows is None:
        return None
    want = {str(p) for p in ports}
    return [r for r in rows if r["state"] is not None and
            any(x.rsplit(":", 1)[-1] in want for x in (r["local"], r["peer"]))]


def read_sockstat(path):
    """/proc/net/sockstat's TCP line → {"inuse", "orphan", "tw", "alloc", "mem"}."""
    d = t.read_sockstat(path)
    return {k: d[k] for k in t.SOCKSTAT_TCP_KEYS}


def snapshot(path):
    """A `sockwatch -1` snapshot as the socket rows every report uses, with info_len."""
    return [t.socket_row(d) | {"info_len": d.int("info_len", default=None)}
            for d in t.read_snapshot(path)]


def counter(d, name):
    """A counter's delta as an int (0 when it did not move, None when this kernel lacks it)."""
    if name not in d:
        return 0
    v = d[name]
    return v["value"] if isinstance(v, dict) else v


def read_unit(rawroot, name):
    """What both reports read first: the unit's raw directory, the kernel, HZ, the sysctls each
    side recorded (sysctls.txt, server-sysctls.txt: tcp_fin_timeout required), the wire."""
    rawdir = t.unit_dir(rawroot, name)
    info, _ = t.read_machine(os.path.join(rawdir, "machine.txt"))
    need = ("net.ipv4.tcp_fin_timeout",)
    sysctls = t.read_sysctl_file(os.path.join(rawdir, "sysctls.txt"), need)
    return {"rawdir": rawdir, "kernel": info.str("kernel"), "hz": info.int("hz", 1, 10000),
            "sysctls": sysctls,
            "server": t.read_sysctl_file(os.path.join(rawdir, "server-sysctls.txt"), need),
            "fin_s": t.sysctl_int(sysctls, "net.ipv4.tcp_fin_timeout", "sysctls.txt", 0),
            "wire": tw.read_wire(rawdir)}
