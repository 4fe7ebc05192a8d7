"""tcpevents (probes/tcpevents.c, probes/bpf/tcpevents.bpf.c): the kernel's TCP tracepoints,
one line per event.

- replay of a recorded run (tests/data/tcpevents-close.rec, made by the live close below on
  6.18): the exact lines, no root, no BPF; and records cut short or garbled refused; an end
  record's counts (missed=, unseen=) printed when it has them, "-" when it was written before;
- bad input: every bad option one line on stderr, a non-zero exit;
- live, in a namespace of its own: one connect/close over loopback, the exact transitions of
  each socket (LAST-ACK on the side that closes second, TIME-WAIT on the other), checked
  against sockwatch sampling at the same time; and the RSTs sent counted against the
  namespace's TcpOutRsts (nstat).
"""
import collections
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys

import pytest

from conftest import DATA, in_ns

REC = os.path.join(DATA, "tcpevents-close.rec")
TXT = os.path.join(DATA, "tcpevents-close.txt")
TIMEOUT_MS = 10000
BLIND = 4       # tcpevents' exit status when BPF cannot run here


def run(bindir, *args, **kw):
    return subprocess.run([os.path.join(bindir, "tcpevents"), *args], capture_output=True,
                          text=True, timeout=10, **kw)


@pytest.fixture(scope="module")
def tcpevents(bindir):
    path = os.path.join(bindir, "tcpevents")
    if not os.path.exists(path):
        pytest.skip("tcpevents is not built here (make says why: clang, bpftool, libbpf, BTF)")
    return path


# ---- replay -------------------------------------------------------------------------------------

def test_replay_prints_the_recorded_lines(bindir, tcpevents):
    r = run(bindir, "-R", REC)
    assert r.returncode == 0 and r.stderr == ""
    with open(TXT) as f:
        assert r.stdout == f.read()


def test_replay_shows_last_ack_and_time_wait(bindir, tcpevents):
    lines = run(bindir, "-R", REC).stdout.splitlines()
    by_cookie = transitions([kv(l) for l in lines if l.startswith("t_ns=")])
    seqs = sorted(by_cookie.values())
    assert seqs == sorted([LISTENER, CLIENT, SERVER]), seqs
    assert lines[-1].startswith("end t_ns=") and lines[-1].endswith(
        f" events={len(lines) - 1} lost=0 missed=- unseen=-")


def test_replay_prints_the_end_records_counts(bindir, tcpevents, tmp_path):
    """An end record with TCPEV_F_ARG and TCPEV_F_UNSEEN, in a version 1 file still: missed= its
    reason, unseen= its unseen (the recorded close has neither: "-" for both, above)."""
    with open(REC, "rb") as f:
        good = f.read()
    end = bytearray(good[-96:])     # the end record; offsets of struct tcpev_rec (tcpevents.h)
    assert end[58] == 255 and end[59] == 0      # TCPEV_END, no flag: written before the counts
    end[59] = 2 | 4                             # TCPEV_F_ARG | TCPEV_F_UNSEEN
    end[8:16] = (7).to_bytes(8, sys.byteorder)  # unseen, in the cookie's place
    end[84:88] = (3).to_bytes(4, sys.byteorder)     # reason: missed
    path = corrupt(tmp_path, "counts", good[:16] + bytes(end))
    r = run(bindir, "-R", path)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.endswith(" events=0 lost=0 missed=3 unseen=7\n"), r.stdout


def corrupt(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


@pytest.mark.parametrize("case,word", [
    ("empty", "no TCPEVREC header"),
    ("magic", "no TCPEVREC header"),
    ("version", "record version 9"),
    ("cut", "record cut short"),
    ("no-end", "no end record"),
    ("garbled", "garbled"),
    ("missing", "No such file"),
    ("dir", "Is a directory"),
])
def test_replay_refuses_a_bad_record(bindir, tcpevents, tmp_path, case, word):
    with open(REC, "rb") as f:
        good = f.read()
    data = {
        "empty": b"", "magic": b"TCPEVRXC" + good[8:], "version": good[:8] + b"\x09" + good[9:],
        "cut": good[:-10], "no-end": good[:-96],
        "garbled": good[:16 + 58] + b"\x77" + good[16 + 59:],     # the first record's type
    }
    if case == "missing":
        path = str(tmp_path / "nothing")
    elif case == "dir":
        path = str(tmp_path)
    else:
        path = corrupt(tmp_path, case, data[case])
    r = run(bindir, "-R", path)
    assert r.returncode == 1
    assert len(r.stderr.splitlines()) == 1 and word in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


# ---- bad options --------------------------------------------------------------------------------

BAD_OPTIONS = [
    (["-p"], "needs an argument"), (["-p", "0"], "-p '0'"), (["-p", "65536"], "-p '65536'"),
    (["-p", "x"], "-p 'x'"), (["-t", "0"], "-t '0'"), (["-t", "5x"], "-t '5x'"),
    (["-N", "-1"], "-N '-1'"), (["-N", "4294967296"], "-N '4294967296'"),
    (["-n", ""], "-n needs a file name"), (["-r", ""], "-r needs a file name"),
    (["-R", ""], "-R needs a file name"), (["-x"], "unknown option -x"),
    (["-w", "a"], "unknown option -w"),     # the old record letter: -r now, as sockwatch's
    (["extra"], "unexpected argument"), (["-r", "a", "-R", "b"], "exclude each other"),
    (["-n", "/proc/self/ns/net", "-N", "5"], "exclude each other"),
    (["-R", REC, "-p", "80"], "no -n, -N, -p, -t or -B"),
    (["-B", "3"], "-B '3'"), (["-B", "6"], "not a power of two"), (["-B", "2097152"], "-B '2097152'"),
    (["-p", "1"] * 17, "at most 16 ports"),
]


@pytest.mark.parametrize("argv,word", BAD_OPTIONS, ids=[" ".join(a)[:40] for a, _ in BAD_OPTIONS])
def test_bad_option_is_one_line(bindir, tcpevents, argv, word):
    r = run(bindir, *argv)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and word in r.stderr, r.stderr


def test_bad_netns_path_is_one_line(bindir, tcpevents, tmp_path):
    r = run(bindir, "-n", str(tmp_path / "none"), "-t", "1")
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "none" in r.stderr


def test_help_exits_0(bindir, tcpevents):
    r = run(bindir, "-h")
    assert r.returncode == 0 and r.stdout.startswith("usage: tcpevents") and r.stderr == ""


def test_unprivileged_is_blind_in_one_line(bindir, tcpevents):
    """Without CAP_BPF: exit 4 and one line saying what it cannot see and why."""
    if os.geteuid() != 0:
        r = run(bindir, "-t", "1")
    else:
        r = run(bindir, "-t", "1", preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    assert r.returncode == BLIND and r.stdout == ""
    assert re.fullmatch(r"tcpevents: cannot see TCP events: .*(CAP_BPF|BTF).*\n", r.stderr), r.stderr


# ---- live ---------------------------------------------------------------------------------------

def kv(line):
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def transitions(events):
    """{cookie: [(old, new), ...]} of the state and timewait events, in order."""
    out = collections.defaultdict(list)
    for e in events:
        if e["event"] in ("state", "timewait"):
            out[e["cookie"]].append((e["old"], e["new"]))
    return {c: tuple(v) for c, v in out.items()}


def is_subsequence(got, want):
    it = iter(want)
    return all(x in it for x in got)


def unseen(got, want):
    """How many of the wanted transitions tcpevents did not print: each socket's printed
    transitions matched, in order, within one wanted sequence, the rest counted; None when it
    printed one that no wanted sequence has (a wrong event, never excused)."""
    left, missing = list(want), 0
    for g in got:
        w = next((w for w in left if len(w) >= len(g) and is_subsequence(g, w)), None)
        if w is None:
            return None
        left.remove(w)
        missing += len(w) - len(g)
    return missing + sum(len(w) for w in left)


def excused(end_line):
    """How many events a run may lack: those the end line says the kernel ran no program for,
    missed= (recursion misses, counted from 5.12) and unseen= (tracepoint hits the kernel ran no
    program for and counted nowhere: docs/tcpevents.md, "Hits no program ran for"); where
    unseen= is "-" (no perf counter of the tracepoints), one, as before it was counted.  Never
    an event printed that should not be."""
    end = kv(end_line)
    missed, unseen = end["missed"], end.get("unseen", "-")
    # and at least one: CI's sanitize pass on 6 December saw a retransmission missing with
    # missed=0 unseen=0 (docs/tcpevents.md): unseen= does not count every gap yet
    return max((int(missed) if missed.isdigit() else 0) +
               (int(unseen) if unseen.isdigit() else 1), 1)


def assert_transitions(lines, want):
    """tcpevents' transitions (of lines, its whole output) are the wanted ones, per socket, in
    order; a gap passes only as excused() allows (a CI run under load printed a SYN-SENT socket
    without its SYN-SENT -> UNCONN)."""
    got = list(transitions(events_of(lines)).values())
    if sorted(got) == sorted(want):
        return
    n = unseen(got, want)
    assert n is not None and n <= excused(lines[-1]), (got, want, lines[-1])


def test_unseen_counts_only_gaps():
    a, b, c = ("UNCONN", "SYN-SENT"), ("SYN-SENT", "UNCONN"), ("SYN-SENT", "ESTAB")
    assert unseen([(a, b)], [(a, b)]) == 0
    assert unseen([(a,)], [(a, b)]) == 1
    assert unseen([], [(a, b)]) == 2
    assert unseen([(b, a)], [(a, b)]) is None
    assert unseen([(a, c)], [(a, b)]) is None
    end = "end t_ns=1 events=1 lost=0 missed={} unseen={}"
    ev = "t_ns=2 event=state old=UNCONN new=SYN-SENT local=1.1.1.1:1 peer=1.1.1.2:2 cookie=7"
    # one gap, even uncounted (0, 0: CI's sanitize pass saw one that unseen= did not count)
    for m, u in (("1", "0"), ("0", "1"), ("0", "-"), ("0", "0")):
        assert_transitions(["ready t_ns=1", ev, end.format(m, u)], [(a, b)])
    # two gaps: only when both are counted
    none = end.replace("events=1", "events=0")
    for m, u in (("2", "0"), ("1", "1"), ("0", "2"), ("1", "-")):
        assert_transitions(["ready t_ns=1", none.format(m, u)], [(a, b)])
    for m, u in (("1", "0"), ("0", "1"), ("0", "-"), ("0", "0")):
        with pytest.raises(AssertionError):
            assert_transitions(["ready t_ns=1", none.format(m, u)], [(a, b)])
    # a wrong transition never
    wrong = ev.replace("old=UNCONN new=SYN-SENT", "old=SYN-SENT new=ESTAB")
    with pytest.raises(AssertionError):
        assert_transitions(["ready t_ns=1", wrong, end.format(5, 5)], [(a, b)])


LISTENER = (("UNCONN", "LISTEN"), ("LISTEN", "UNCONN"))
CLIENT = (("UNCONN", "SYN-SENT"), ("SYN-SENT", "ESTAB"), ("ESTAB", "FIN-WAIT-1"),
          ("FIN-WAIT-1", "FIN-WAIT-2"), ("FIN-WAIT-2", "TIME-WAIT"), ("FIN-WAIT-2", "UNCONN"))
SERVER = (("LISTEN", "SYN-RECV"), ("SYN-RECV", "ESTAB"), ("ESTAB", "CLOSE-WAIT"),
          ("CLOSE-WAIT", "LAST-ACK"), ("LAST-ACK", "UNCONN"))

# The actor, in the namespace: one step per line read, "ok" after each.
ACTOR = r"""
import socket, struct, sys
port = int(sys.argv[1])
def step():
    print("ok", flush=True)
    return sys.stdin.readline().strip()
cmd = step()
while cmd:
    if cmd == "connect":
        l = socket.socket(); l.bind(("127.0.0.1", port)); l.listen()
        c = socket.create_connection(("127.0.0.1", port)); a, _ = l.accept()
    elif cmd == "shutdown-client":
        c.shutdown(socket.SHUT_WR)
    elif cmd == "close-client":
        c.close()
    elif cmd == "close-server":
        assert a.recv(1) == b""
        a.close(); l.close()
        c.close()
    elif cmd == "refused":
        try:
            socket.create_connection(("127.0.0.1", port + 1))
        except ConnectionRefusedError:
            pass
    elif cmd == "burst":
        l = socket.socket(); l.bind(("127.0.0.1", port)); l.listen(64)
        for _ in range(40):
            c = socket.create_connection(("127.0.0.1", port)); a, _ = l.accept()
            c.close(); a.close()
        l.close()
    elif cmd == "syn-lost":
        try:
            socket.create_connection(("127.0.0.1", port + 2), timeout=30)
        except (TimeoutError, socket.timeout):
            pass
    elif cmd == "abort-client":
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        try:
            a.recv(1)
        except ConnectionResetError:
            pass
        a.close(); l.close()
    cmd = step()
"""


class Actor:
    def __init__(self, ns, port):
        self.p = subprocess.Popen(in_ns(ns, [sys.executable, "-c", ACTOR, str(port)]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline() == "ok\n"

    def do(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        assert self.p.stdout.readline() == "ok\n", cmd

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=10) == 0


@contextlib.contextmanager
def acting(netns, port, *progs):
    """An Actor on port for the with block; at its end, whatever happened, each of progs (Bg)
    killed, and the actor where it still runs."""
    actor = None
    try:
        actor = Actor(netns, port)
        yield actor
    finally:
        for prog in progs:
            prog.kill()
        if actor is not None and actor.p.poll() is None:
            actor.p.kill()


def waitfor(bindir, path, ere, pid, count=1):
    """Poll path with probes' waitfor until count lines match ere (fail if pid ends first)."""
    r = subprocess.run([os.path.join(bindir, "waitfor"), "-p", str(pid), "-t", str(TIMEOUT_MS),
                        "-f", str(path), "-e", ere, "-n", str(count)], capture_output=True, text=True)
    with open(path) as f:
        assert r.returncode == 0, f"{ere}: waitfor exit {r.returncode}\n{f.read()}"


class Bg:
    """A probe in the background, its stdout in a file."""
    def __init__(self, argv, out):
        self.out = out
        self.f = open(out, "w")
        self.p = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.PIPE, text=True)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        err = self.p.communicate(timeout=10)[1]
        self.f.close()
        assert self.p.returncode == 0, err
        with open(self.out) as f:
            return f.read().splitlines()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.f.close()


def start_tcpevents(bindir, ns, tmp_path, *args):
    ev = Bg([os.path.join(bindir, "tcpevents"), "-n", f"/var/run/netns/{ns}", *args],
            tmp_path / "tcpevents.txt")
    waitfor(bindir, ev.out, "^ready ", ev.p.pid)
    return ev


def kernel_before(major, minor):
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(m[1]), int(m[2])) < (major, minor)


def events_of(lines):
    assert lines[0].startswith("ready ") and lines[-1].startswith("end ")
    end = kv(lines[-1])
    assert end["lost"] == "0" and int(end["events"]) == len(lines) - 2
    # recursion misses: counted from 5.12 (bpf_prog_info.recursion_misses), "-" before
    assert end["missed"].isdigit() or kernel_before(5, 12), lines[-1]
    return [kv(l) for l in lines[1:-1]]


def live_events(lines):
    """events_of() a live run's lines, whose end line counts unseen= (a number, as root, where
    the kernel has tracefs; "-" only on one without)."""
    with open("/proc/filesystems") as f:
        tracefs = "\ttracefs\n" in f.read()
    assert kv(lines[-1])["unseen"].isdigit() or not tracefs, lines[-1]
    return events_of(lines)


@pytest.mark.netns
def test_live_close_every_transition(bindir, tcpevents, netns, tmp_path):
    """The client shuts down its side and keeps the socket: FIN-WAIT-2 until the server's FIN,
    then TIME-WAIT (tcp_fin() -> tcp_time_wait()); the server CLOSE-WAIT, LAST-ACK."""
    port = 21070
    ev = start_tcpevents(bindir, netns, tmp_path, "-p", str(port), "-r", str(tmp_path / "rec"))
    sw = Bg(in_ns(netns, [os.path.join(bindir, "sockwatch"), "-i", "1000"]),
            tmp_path / "sockwatch.txt")
    actor = None
    try:
        waitfor(bindir, sw.out, "^ready ", sw.p.pid)
        actor = Actor(netns, port)
        actor.do("connect")
        waitfor(bindir, sw.out, "state=ESTAB ", sw.p.pid, 2)
        actor.do("shutdown-client")
        waitfor(bindir, sw.out, "state=(FIN-WAIT-2|CLOSE-WAIT) ", sw.p.pid, 2)
        actor.do("close-server")
        waitfor(bindir, ev.out, "old=LAST-ACK new=UNCONN ", ev.p.pid)
        waitfor(bindir, sw.out, "state=TIME-WAIT ", sw.p.pid)
        actor.close()
        ev_lines, sw_lines = ev.stop(), sw.stop()
    finally:
        ev.kill()
        sw.kill()
        if actor is not None and actor.p.poll() is None:
            actor.p.kill()
    events = live_events(ev_lines)
    by_cookie = transitions(events)
    assert_transitions(ev_lines, [LISTENER, CLIENT, SERVER])
    # the replay of what it recorded prints the same lines but the ready line
    r = run(bindir, "-R", str(tmp_path / "rec"))
    assert r.returncode == 0 and r.stdout.splitlines() == ev_lines[1:-1] + [r.stdout.splitlines()[-1]]
    # sockwatch samples: every state it saw of a socket is among that socket's transitions
    if kv(ev_lines[0])["cookie"] != "helper":
        return      # cookies read from the socket: 0 until sock_diag asked, not joinable
    seen = {c: {s for t in v for s in t} for c, v in by_cookie.items()}
    checked = 0
    for line in sw_lines:
        s = kv(line)
        if "event" not in s or f":{port}" not in line:
            continue
        assert s["cookie"] in seen, f"sockwatch saw a socket tcpevents did not: {line}"
        assert s["state"] in seen[s["cookie"]], line
        checked += 1
    assert checked >= 5, sw_lines      # ESTAB x2, FIN-WAIT-2, CLOSE-WAIT, TIME-WAIT at least


@pytest.mark.netns
def test_live_orphan_close_timewait_substate(bindir, tcpevents, netns, tmp_path):
    """The client closes its socket: as soon as its FIN is acknowledged a timewait socket in
    substate FIN-WAIT-2 takes its place (tcp_rcv_state_process(), TCP_FIN_WAIT1 case)."""
    port = 21071
    ev = start_tcpevents(bindir, netns, tmp_path, "-p", str(port))
    with acting(netns, port, ev) as actor:
        actor.do("connect")
        actor.do("close-client")
        waitfor(bindir, ev.out, "old=FIN-WAIT-1 new=FIN-WAIT-2 ", ev.p.pid)  # its FIN acknowledged
        actor.do("close-server")
        waitfor(bindir, ev.out, "old=LAST-ACK new=UNCONN ", ev.p.pid)
        actor.close()
        lines = ev.stop()
    orphan = CLIENT[:4] + (("FIN-WAIT-2", "FIN-WAIT-2"), ("FIN-WAIT-2", "UNCONN"))
    assert_transitions(lines, [LISTENER, orphan, SERVER])


@pytest.mark.netns
def test_live_lost_is_what_a_full_ring_dropped(bindir, tcpevents, netns, tmp_path):
    """Two watchers of the same port: one with a 4 KiB ring buffer (39 records of 96 + 8 bytes) stopped while 40
    connections open and close, one with the default 1 MiB.  The stopped one's events and lost
    add up to the other's events."""
    port = 21078
    big = start_tcpevents(bindir, netns, tmp_path, "-p", str(port))
    small = Bg([os.path.join(bindir, "tcpevents"), "-n", f"/var/run/netns/{netns}",
                "-p", str(port), "-B", "4"], tmp_path / "small.txt")
    actor = None
    try:
        waitfor(bindir, small.out, "^ready ", small.p.pid)
        small.p.send_signal(signal.SIGSTOP)
        actor = Actor(netns, port)
        actor.do("burst")
        waitfor(bindir, big.out, "old=LISTEN new=UNCONN ", big.p.pid)
        actor.close()
        small.p.send_signal(signal.SIGCONT)
        big_lines, small_lines = big.stop(), small.stop()
    finally:
        if small.p.poll() is None:
            small.p.send_signal(signal.SIGCONT)
        big.kill()
        small.kill()
        if actor is not None and actor.p.poll() is None:
            actor.p.kill()
    want = len(live_events(big_lines))
    end = kv(small_lines[-1])
    assert int(end["events"]) == len(small_lines) - 2
    assert want > 400 and int(end["lost"]) > 0, (want, small_lines[-1])
    assert int(end["events"]) + int(end["lost"]) == want, (want, small_lines[-1])


def nstat(ns, name):
    r = subprocess.run(in_ns(ns, ["nstat", "-asz", name]), capture_output=True, text=True,
                       check=True)
    m = re.search(rf"^{name}\s+(\d+)", r.stdout, re.M)
    return int(m.group(1)) if m else 0


def nstat_out_rsts(ns):
    return nstat(ns, "TcpOutRsts")


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("nstat") is None or shutil.which("nft") is None,
                    reason="needs nstat (iproute2) and nft (nftables)")
def test_live_syn_retransmits_count_once(bindir, tcpevents, netns, tmp_path):
    """A SYN that nft drops, tcp_syn_retries=1: each retransmission one retrans line (err=0),
    as many as TcpRetransSegs counts (2 on 6.18: tcp_syn_retries is a time budget, 3 s, and
    tcp_syn_linear_timeouts keeps the first RTOs at 1 s); then SYN-SENT -> UNCONN."""
    port = 21074
    subprocess.run(in_ns(netns, ["sysctl", "-q", "-w", "net.ipv4.tcp_syn_retries=1"]), check=True)
    subprocess.run(in_ns(netns, ["nft", "-f", "-"]), check=True, text=True, input=(
        "table inet tcpev {\n chain c {\n type filter hook input priority 0;\n"
        f" tcp dport {port + 2} tcp flags syn drop\n }}\n}}\n"))
    before = nstat(netns, "TcpRetransSegs")
    ev = start_tcpevents(bindir, netns, tmp_path, "-p", str(port + 2))
    with acting(netns, port, ev) as actor:
        actor.do("syn-lost")
        actor.close()
        lines = ev.stop()
    events = live_events(lines)
    retrans = [e for e in events if e["event"] == "retrans" and e["err"] in ("0", "-")]
    # every retransmission seen, never one more; fewer only as excused() allows (a run of twelve
    # at once saw 1 where TcpRetransSegs rose by 2, with missed=0: a hit the kernel ran no
    # program for, which unseen= now counts)
    delta = nstat(netns, "TcpRetransSegs") - before
    assert 1 <= len(retrans) <= delta <= len(retrans) + excused(lines[-1]), lines
    assert retrans[0]["state"] == "SYN-SENT"
    assert_transitions(lines, [(("UNCONN", "SYN-SENT"), ("SYN-SENT", "UNCONN"))])


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("nstat") is None, reason="needs nstat (iproute2)")
def test_live_resets_count_once(bindir, tcpevents, netns, tmp_path):
    """A connect to a closed port (a RST with no socket: traced from 6.8) and an abortive close
    (SO_LINGER 0): each RST sent one rst-sent line, as many as TcpOutRsts counts."""
    port = 21072
    before = nstat_out_rsts(netns)
    ev = start_tcpevents(bindir, netns, tmp_path)
    with acting(netns, port, ev) as actor:
        actor.do("refused")
        actor.do("connect")
        actor.do("abort-client")
        waitfor(bindir, ev.out, "event=rst-recv ", ev.p.pid)
        actor.close()
        lines = ev.stop()
    sent = nstat_out_rsts(netns) - before
    events = live_events(lines)
    rst = [e for e in events if e["event"] == "rst-sent"]
    assert len(rst) == sent == 2, lines
    nobody = [e for e in rst if e["state"] == "-"]
    assert len(nobody) == 1 and nobody[0]["cookie"] == "-"
    assert nobody[0]["local"] == f"127.0.0.1:{port + 1}"
    assert [e["event"] for e in events].count("rst-recv") == 2      # the refused client, the server


# ---- the line format, every kind of record ------------------------------------------------------

STATES = {1: "ESTAB", 2: "SYN-SENT", 3: "SYN-RECV", 4: "FIN-WAIT-1", 5: "FIN-WAIT-2",
          6: "TIME-WAIT", 7: "UNCONN", 8: "CLOSE-WAIT", 9: "LAST-ACK", 10: "LISTEN", 11: "CLOSING",
          12: "NEW-SYN-RECV", -1: "-"}
NAMES = {1: "state", 2: "retrans", 3: "rst-sent", 4: "rst-recv", 5: "probe", 6: "timewait"}


def rec_bytes(t_ns, cookie, saddr, daddr, sport, dport, family, typ, flags, old, state, probe,
              reason):
    """One struct tcpev_rec (probes/bpf/tcpevents.h), host byte order."""
    return (struct.pack("=QQ16s16sIHHHBBii4II", t_ns, cookie, saddr, daddr, 4026531840, sport,
                        dport, family, typ, flags, old, state, *probe, reason) + bytes(8))


def expected_line(t_ns, cookie, saddr, daddr, sport, dport, family, typ, flags, old, state, probe,
                  reason):
    """The line tcpevents(8) documents for that record, made here independently of the C."""
    fam = socket.AF_INET6 if family == 10 else socket.AF_INET
    ip = lambda a: socket.inet_ntop(fam, a if fam == socket.AF_INET6 else a[:4])  # noqa: E731
    addr = (lambda k, a, p: f" {k}=[{ip(a)}]:{p}") if family == 10 else \
        (lambda k, a, p: f" {k}={ip(a)}:{p}")
    line = f"t_ns={t_ns} event={NAMES[typ]}"
    line += (f" old={STATES[old]} new={STATES[state]}" if typ in (1, 6)
             else f" state={STATES[state]}")
    if typ == 5:
        line += " cwnd={} ssthresh={} srtt_us={} snd_wnd={}".format(*probe)
    if typ in (2, 3):
        key = "reason" if typ == 3 else "err"
        signed = struct.unpack("=i", struct.pack("=I", reason))[0]    # err is an int
        value = "-" if not flags & 2 else (signed if typ == 2 else reason)
        line += f" {key}={value}"
    line += addr("local", saddr, sport) + addr("peer", daddr, dport)
    return line + (f" cookie={cookie}" if flags & 1 else " cookie=-") + "\n"


def test_every_kind_of_record_prints_as_documented(bindir, tcpevents, tmp_path):
    """Each type, flags on and off, IPv4 and IPv6, the extremes of every number (an err below
    0, a reason and counters at 2^32 - 1, t_ns and cookie at 2^64 - 1 and 0), replayed: the
    lines are the ones the format says, byte for byte (the line builder of print_rec(),
    which replaced eight printf()s a record)."""
    rng = random.Random(27)
    v4 = socket.inet_pton(socket.AF_INET, "192.0.2.1") + bytes(12)
    v4b = socket.inet_pton(socket.AF_INET, "198.51.100.255") + bytes(12)
    v6 = socket.inet_pton(socket.AF_INET6, "2001:db8::1")
    v6b = socket.inet_pton(socket.AF_INET6, "fe80::1:2:3:4")
    cases = []
    for typ in NAMES:
        for flags in (0, 1, 2, 3):
            for family, sa, da in ((2, v4, v4b), (10, v6, v6b)):
                for ext in (0, 1, 2):
                    big = ext == 1
                    cases.append((
                        2**64 - 1 if big else (0 if ext == 2 else rng.randrange(2**40)),
                        2**64 - 1 if big else rng.randrange(2**20),
                        sa, da, 65535 if big else rng.randrange(1, 65535), 0 if big else 21070,
                        family, typ, flags, rng.choice(list(STATES)), rng.choice(list(STATES)),
                        (2**32 - 1,) * 4 if big else tuple(rng.randrange(2**20) for _ in range(4)),
                        2**32 - 1 if big else (2**32 - 110 if ext == 2 else rng.randrange(40))))
    with open(REC, "rb") as f:
        good = f.read()
    body = b"".join(rec_bytes(*c) for c in cases)
    path = corrupt(tmp_path, "kinds", good[:16] + body + good[-96:])
    r = run(bindir, "-R", path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    got = r.stdout.splitlines(keepends=True)
    want = [expected_line(*c) for c in cases]
    assert len(got) == len(want) + 1
    for g, w in zip(got, want):
        assert g == w
