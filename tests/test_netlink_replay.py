"""The sock_diag decoder on exact bytes: saved dumps recorded from a live kernel
(tests/data/netlink/record.sh) and hand-built messages, replayed by `sockwatch -R`.  No root."""
import os
import struct
import subprocess

import pytest

from conftest import DATA, kv

NL = os.path.join(DATA, "netlink")
SOCK_DIAG_BY_FAMILY, NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 20, 1, 2, 3
INET_DIAG_INFO = 2
AF_INET, AF_INET6 = 2, 10


def replay(bindir, path, *args):
    r = subprocess.run([os.path.join(bindir, "sockwatch"), "-R", path, *args],
                       capture_output=True, text=True, timeout=10)
    return r, [kv(line) for line in r.stdout.splitlines()]


# ---- hand-built messages ----------------------------------------------------------------------

def nlmsg(mtype, payload, flags=2):  # NLM_F_MULTI
    return struct.pack("=IHHII", 16 + len(payload), mtype, flags, 0, 0) + payload + \
        b"\0" * (-len(payload) % 4)


def nlattr(atype, payload):
    return struct.pack("=HH", 4 + len(payload), atype) + payload + b"\0" * (-len(payload) % 4)


def diag_msg(state=1, timer=1, retrans=3, sport=21010, dport=40000, expires=987, rq=1, wq=8,
             inode=4242, family=AF_INET, cookie=(7, 0)):
    src = bytes([127, 0, 0, 1]) + b"\0" * 12
    dst = bytes([127, 0, 0, 2]) + b"\0" * 12
    sockid = struct.pack(">HH", sport, dport) + src + dst + struct.pack("=III", 0, *cookie)
    return struct.pack("=BBBB", family, state, timer, retrans) + sockid + \
        struct.pack("=IIIII", expires, rq, wq, 0, inode)


# struct tcp_info offsets (include/uapi/linux/tcp.h) of the fields sockwatch prints, and a
# distinct value for each, so a field read from the wrong place cannot pass.
INFO_FIELDS = [  # (key sockwatch prints, offset, struct format, value)
    ("probes", 3, "B", 3), ("backoff", 4, "B", 2), ("ato_us", 12, "I", 40000),
    ("snd_mss", 16, "I", 1448), ("rcv_mss", 20, "I", 536), ("unacked", 24, "I", 7),
    ("sacked", 28, "I", 5), ("last_send_ms", 44, "I", 111), ("last_recv_ms", 52, "I", 222),
    ("total_retrans", 100, "I", 5), ("notsent", 144, "I", 4096),
    ("rwnd_limited_us", 176, "Q", 1 << 33), ("sndbuf_limited_us", 184, "Q", 12345),
    ("snd_wnd", 228, "I", 65535), ("rcv_wnd", 232, "I", 131072), ("total_rto", 240, "H", 9),
]


def tcp_info(length, rto_us=1000000, **over):
    """A struct tcp_info of `length` bytes (104: the oldest kernels; 232: 6.1; 248: 6.7+; 280:
    6.18), each field of INFO_FIELDS set to its own value (or to over[key])."""
    b = bytearray(288)
    b[0] = 2                                    # tcpi_state SYN_SENT
    struct.pack_into("=I", b, 8, rto_us)        # tcpi_rto
    for key, off, fmt, value in INFO_FIELDS:
        struct.pack_into("=" + fmt, b, off, over.get(key, value))
    return bytes(b[:length])


SKMEM_KEYS = ["rmem", "rcvbuf", "wmem", "sndbuf", "fwd", "wqueued", "optmem", "backlog", "drops"]
INET_DIAG_SKMEMINFO = 7


def skmem(n=9):
    """INET_DIAG_SKMEMINFO: n of the SK_MEMINFO_* u32s, each its own value (1000 * (i + 1))."""
    return nlattr(INET_DIAG_SKMEMINFO, struct.pack(f"={n}I", *(1000 * (i + 1) for i in range(n))))


def dump(*msgs):
    """One sample: the messages, NLMSG_DONE, and the end-of-sample mark sockwatch records."""
    return b"".join(nlmsg(SOCK_DIAG_BY_FAMILY, m) for m in msgs) + \
        nlmsg(NLMSG_DONE, struct.pack("=i", 0)) + nlmsg(NLMSG_NOOP, b"", flags=0)


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


# ---- saved dumps from a live kernel -----------------------------------------------------------

def test_listen_queue_and_both_established_ends(bindir):
    r, rows = replay(bindir, os.path.join(NL, "listen-estab.bin"), "-1")
    assert r.returncode == 0, r.stderr
    listen = [x for x in rows if x["state"] == "LISTEN" and x["local"] == "127.0.0.1:21010"]
    assert len(listen) == 1
    assert (listen[0]["rq"], listen[0]["wq"]) == ("1", "8")   # accept queue 1, backlog 8
    est = [x for x in rows if x["state"] == "ESTAB"]
    assert len(est) == 2
    a, b = est
    assert (a["local"], a["peer"]) == (b["peer"], b["local"])  # the two ends of one connection
    server = [x for x in est if x["local"] == "127.0.0.1:21010"][0]
    assert server["inode"] == "0"   # created by the kernel, no file until accept()
    assert any(x["local"] == "[::1]:21020" and x["state"] == "LISTEN" for x in rows)


def test_synsent_retransmissions_counted_up(bindir):
    r, rows = replay(bindir, os.path.join(NL, "synsent.bin"))
    assert r.returncode == 0, r.stderr
    assert [x["event"] for x in rows] == ["new", "change", "change"]
    assert [x["retrans"] for x in rows] == ["0", "1", "2"]
    assert all(x["state"] == "SYN-SENT" and x["timer"] == "on" for x in rows)
    assert all(x["peer"] == "127.0.0.1:21013" for x in rows)
    assert all(int(x["expires_ms"]) <= 1000 for x in rows)


# ---- hand-built bytes -------------------------------------------------------------------------

@pytest.mark.parametrize("length", [104, 160, 192, 232, 248, 280, 288])
def test_tcp_info_of_any_length(bindir, tmp_path, length):
    """Each field is read where the kernel's struct is long enough and is 0 beyond it (104: the
    first tcp_info; 232: 6.1, up to tcpi_snd_wnd; 248: 6.7, tcpi_total_rto; 288: longer than
    any kernel we know, cut); info_len is the length the kernel sent."""
    msg = diag_msg(state=2) + nlattr(INET_DIAG_INFO, tcp_info(length))
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(msg)), "-1")
    assert r.returncode == 0, r.stderr
    (row,) = rows
    assert row["state"] == "SYN-SENT" and row["rto_ms"] == "1000"
    assert row["info_len"] == str(length)
    for key, off, fmt, value in INFO_FIELDS:
        fits = off + struct.calcsize(fmt) <= length
        assert row[key] == str(value if fits else 0), (key, length)


def test_socket_memory(bindir, tmp_path):
    """INET_DIAG_SKMEMINFO in the kernel's order (SK_MEMINFO_RMEM_ALLOC … SK_MEMINFO_DROPS); a
    shorter array leaves the rest 0; without the attribute, no skmem keys."""
    full = diag_msg(cookie=(1, 0)) + skmem()
    short = diag_msg(cookie=(2, 0), sport=2) + skmem(4)
    bare = diag_msg(cookie=(3, 0), sport=3)
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(full, short, bare)), "-1")
    assert r.returncode == 0, r.stderr
    a, b, c = rows
    assert [a[k] for k in SKMEM_KEYS] == [str(1000 * (i + 1)) for i in range(9)]
    assert [b[k] for k in SKMEM_KEYS] == ["1000", "2000", "3000", "4000"] + ["0"] * 5
    assert not any(k in c for k in SKMEM_KEYS) and c["info_len"] == "0"


def test_change_fields_option(bindir, tmp_path):
    """-c: a field named there makes a change line; one not named does not."""
    one = diag_msg(cookie=(1, 0)) + nlattr(INET_DIAG_INFO, tcp_info(232, snd_wnd=65535))
    two = diag_msg(cookie=(1, 0)) + nlattr(INET_DIAG_INFO, tcp_info(232, snd_wnd=0))
    path = write(tmp_path, "d.bin", dump(one) + dump(two))
    for args, events in [((), ["new"]), (("-c", "wq,probes"), ["new"]),
                         (("-c", "snd_wnd"), ["new", "change"]),
                         (("-c", "rq,snd_wnd,drops"), ["new", "change"])]:
        r, rows = replay(bindir, path, *args)
        assert r.returncode == 0, r.stderr
        assert [x["event"] for x in rows] == events, args
    assert rows[1]["snd_wnd"] == "0"


def test_fields_of_inet_diag_msg(bindir, tmp_path):
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(diag_msg())), "-1")
    (row,) = rows
    assert row["timer"] == "on" and row["retrans"] == "3" and row["expires_ms"] == "987"
    assert row["local"] == "127.0.0.1:21010" and row["peer"] == "127.0.0.2:40000"
    assert row["inode"] == "4242" and "backoff" not in row   # no INET_DIAG_INFO sent


def test_unknown_attribute_is_skipped(bindir, tmp_path):
    msg = diag_msg() + nlattr(250, b"future!!") + nlattr(INET_DIAG_INFO, tcp_info(232))
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(msg)), "-1")
    assert r.returncode == 0, r.stderr
    assert rows[0]["rto_ms"] == "1000"


def test_changes_between_samples(bindir, tmp_path):
    data = dump(diag_msg(retrans=0, cookie=(1, 0)), diag_msg(cookie=(2, 0), sport=1)) + \
        dump(diag_msg(retrans=1, cookie=(1, 0))) + dump()
    r, rows = replay(bindir, write(tmp_path, "d.bin", data))
    assert r.returncode == 0, r.stderr
    assert [(x["event"], x["retrans"]) for x in rows] == \
        [("new", "0"), ("new", "3"), ("change", "1"), ("gone", "3"), ("gone", "1")]


def test_cookie_is_the_last_key_both_halves_in_order(bindir, tmp_path):
    """idiag_cookie[0] is the low 32 bits, [1] the high (sock_diag_save_cookie()): printed as
    one unsigned decimal, the last key of the line, after inode."""
    msg = diag_msg(cookie=(0x89abcdef, 0x01234567))
    r, _ = replay(bindir, write(tmp_path, "d.bin", dump(msg)), "-1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("sample=0 event=snap state=ESTAB timer=on expires_ms=987 retrans=3 rq=1 "
                        "wq=8 local=127.0.0.1:21010 peer=127.0.0.2:40000 info_len=0 inode=4242 "
                        f"cookie={0x0123456789abcdef}\n")
    top = dump(diag_msg(cookie=(0xffffffff, 0xffffffff)))
    r, rows = replay(bindir, write(tmp_path, "e.bin", top), "-1")
    assert rows[0]["cookie"] == str(2 ** 64 - 1)   # unsigned, all 64 bits


def test_aborted_socket_followed_by_its_cookie(bindir, tmp_path):
    """A client aborted by a RST, caught in TCP_CLOSE (UNCONN) once its port was released and its
    file closed: the kernel gives another local address, inode 0, the same cookie.  sockwatch
    follows it as one socket (new, change, gone), and the cookie says so in every line."""
    est = diag_msg(state=1, timer=0, retrans=0, sport=57640, dport=21060, inode=1304931,
                   cookie=(1234, 0))
    closed = diag_msg(state=7, timer=0, retrans=0, sport=0, dport=21060, inode=0,
                      cookie=(1234, 0))
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(est) + dump(closed) + dump()))
    assert r.returncode == 0, r.stderr
    assert [(x["event"], x["state"], x["local"], x["inode"], x["cookie"]) for x in rows] == [
        ("new", "ESTAB", "127.0.0.1:57640", "1304931", "1234"),
        ("change", "UNCONN", "127.0.0.1:0", "0", "1234"),
        ("gone", "UNCONN", "127.0.0.1:0", "0", "1234")]


@pytest.mark.parametrize("name,data,message", [
    ("empty", b"", "no samples"),
    ("cut", dump(diag_msg())[:-30], "not a complete sock_diag record"),
    ("half-header", dump(diag_msg())[:10], "not a complete sock_diag record"),
    ("random", bytes(range(256)) * 4, "not a complete sock_diag record"),
    ("no-done", nlmsg(SOCK_DIAG_BY_FAMILY, diag_msg()), "not a complete sock_diag record"),
    ("short-msg", nlmsg(SOCK_DIAG_BY_FAMILY, b"\2\1") + nlmsg(NLMSG_DONE, b"\0" * 4),
     "not a complete sock_diag record"),
    ("unpadded-end", dump(diag_msg()) + struct.pack("=IHHII", 16 + 73, SOCK_DIAG_BY_FAMILY, 2, 0, 0)
     + diag_msg() + b"\1", "not a complete sock_diag record"),
    ("kernel-error", nlmsg(NLMSG_ERROR, struct.pack("=i", -2) + b"\0" * 16),
     "No such file or directory"),
])
def test_bad_records_fail_with_one_line(bindir, tmp_path, name, data, message):
    r, _ = replay(bindir, write(tmp_path, name, data))
    assert r.returncode == 1
    assert r.stdout == "" or name in ("cut", "unpadded-end")   # complete samples come first
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_missing_file(bindir, tmp_path):
    r, _ = replay(bindir, str(tmp_path / "nope.bin"))
    assert r.returncode == 1 and "nope.bin" in r.stderr and len(r.stderr.splitlines()) == 1


# ---- timer names: ss(8)'s (iproute2 misc/ss.c tmr_name[]) ------------------------------------

@pytest.mark.parametrize("timer,name", [(0, "off"), (1, "on"), (2, "keepalive"), (3, "timewait"),
                                        (4, "persist"), (5, "unknown"), (255, "unknown")])
def test_timer_names_are_ss_names(bindir, tmp_path, timer, name):
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(diag_msg(timer=timer))), "-1")
    assert r.returncode == 0, r.stderr
    assert rows[0]["timer"] == name


def test_zero_window_sender_is_persist(bindir):
    """A receiver that never reads (record.sh): the sender's ICSK_TIME_PROBE0, which ss shows as
    timer:(persist,...), with what it could not send in Send-Q.  idiag_retrans and tcpi_probes
    are both icsk_probes_out: the probes not yet answered.  The receiver here is alive and ACKs
    each probe, and tcp_ack() sets icsk_probes_out back to 0 on every ACK ("Something worked"),
    so it goes 0, 1, 0 while the backoff only grows (tcp_send_probe0())."""
    r, rows = replay(bindir, os.path.join(NL, "persist.bin"))
    assert r.returncode == 0, r.stderr
    assert rows and all(x["state"] == "ESTAB" and x["timer"] == "persist" for x in rows)
    assert all(int(x["wq"]) > 0 and x["peer"] == "127.0.0.1:21030" for x in rows)
    assert max(int(x["retrans"]) for x in rows) >= 1          # a probe went out
    backoff = [int(x["backoff"]) for x in rows]
    assert backoff == sorted(backoff) and backoff[-1] > backoff[0]
    # tcp_info agrees: the peer's window is 0, tcpi_probes is icsk_probes_out too, and what
    # waits is unsent (notsent) and charged to the send buffer (wqueued)
    for x in rows:
        assert x["snd_wnd"] == "0" and x["probes"] == x["retrans"], x
        assert 0 < int(x["notsent"]) <= int(x["wq"]) <= int(x["wqueued"]), x


def test_every_timer_kind_in_one_sample(bindir):
    """timers.bin (record.sh): off, on (a SYN-RECV request retransmitting its SYN-ACK),
    keepalive, timewait and persist, each from a real socket, with the fields each kind has."""
    r, rows = replay(bindir, os.path.join(NL, "timers.bin"), "-1")
    assert r.returncode == 0, r.stderr
    assert {x["timer"] for x in rows} == {"off", "on", "keepalive", "timewait", "persist"}
    (ka,) = [x for x in rows if x["timer"] == "keepalive"]
    assert ka["state"] == "ESTAB" and ka["peer"].endswith(":21040")
    assert 0 < int(ka["expires_ms"]) <= 600 * 1000          # TCP_KEEPIDLE 600 s
    (tw,) = [x for x in rows if x["timer"] == "timewait"]
    assert tw["state"] == "TIME-WAIT" and tw["peer"].endswith(":21041")
    assert 0 < int(tw["expires_ms"]) <= 60 * 1000           # TCP_TIMEWAIT_LEN
    (req,) = [x for x in rows if x["state"] == "SYN-RECV"]
    assert req["timer"] == "on" and req["local"].endswith(":21042")
    assert 0 < int(req["expires_ms"]) <= 1000               # TCP_TIMEOUT_INIT
    # TIME-WAIT and request sockets are minisocks: no tcp_info, no socket memory
    for x in (tw, req):
        assert x["info_len"] == "0" and "rto_ms" not in x and "rmem" not in x, x
    assert all(int(x["info_len"]) >= 232 and "rmem" in x for x in rows if x["state"] == "ESTAB")
    (zw,) = [x for x in rows if x["timer"] == "persist"]
    (rcv,) = [x for x in rows if x["local"] == zw["peer"]]
    # the receiver that never reads: its window is 0, its queue holds what came
    assert rcv["rcv_wnd"] == "0" and int(rcv["rq"]) > 0 and 0 < int(rcv["rmem"])


def test_listener_reports_its_queue_in_tcp_info(bindir):
    """For a LISTEN socket, tcp_get_info() puts the accept queue in tcpi_unacked and the backlog
    in tcpi_sacked: the same numbers as idiag_rqueue/idiag_wqueue."""
    r, rows = replay(bindir, os.path.join(NL, "listen-estab.bin"), "-1")
    listen = [x for x in rows if x["state"] == "LISTEN"]
    assert listen and all((x["unacked"], x["sacked"]) == (x["rq"], x["wq"]) for x in listen)


# ---- record files: a failed write names the file, not the query -------------------------------

def live(bindir, *args, **kw):
    return subprocess.run([os.path.join(bindir, "sockwatch"), "-1", *args], capture_output=True,
                          text=True, timeout=10, **kw)


def test_record_to_dev_full_names_the_file(bindir):
    r = live(bindir, "-r", "/dev/full")
    assert r.returncode == 1
    assert r.stderr.splitlines() == ["sockwatch: /dev/full: cannot write the record: "
                                     "No space left on device"], r.stderr


def test_record_past_the_file_size_limit_names_the_file(bindir, tmp_path):
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # write() then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    path = tmp_path / "rec.bin"
    r = live(bindir, "-r", str(path), preexec_fn=limit)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"sockwatch: {path}: cannot write the record: "
                                     "File too large"], r.stderr


def test_record_to_a_fifo_is_refused_without_blocking(bindir, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = live(bindir, "-r", str(fifo))
    assert r.returncode == 1 and r.stderr == f"sockwatch: {fifo}: not a regular file\n"


def test_record_and_replay_round_trip(bindir, tmp_path):
    path = tmp_path / "rec.bin"
    r = live(bindir, "-4", "-r", str(path))
    assert r.returncode == 0, r.stderr
    r2, rows = replay(bindir, str(path), "-1")
    assert r2.returncode == 0, r2.stderr
    assert [x["inode"] for x in rows] == [kv(x)["inode"] for x in r.stdout.splitlines()]
