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


def tcp_info(length, rto_us=1000000, backoff=2, total_retrans=5, total_rto=9):
    """A struct tcp_info of `length` bytes (104: the oldest kernels; 232: 6.1; 248: 6.7+)."""
    b = bytearray(256)
    b[0], b[4] = 2, backoff                     # tcpi_state SYN_SENT, tcpi_backoff
    struct.pack_into("=I", b, 8, rto_us)        # tcpi_rto
    struct.pack_into("=I", b, 100, total_retrans)
    struct.pack_into("=H", b, 240, total_rto)   # tcpi_total_rto (6.7)
    return bytes(b[:length])


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

@pytest.mark.parametrize("length,backoff,total_retrans,total_rto", [
    (104, 2, 5, 0),      # the first tcp_info: later fields read as 0
    (232, 2, 5, 0),      # 6.1: no tcpi_total_rto yet
    (248, 2, 5, 9),      # 6.7+
    (256, 2, 5, 9),      # a newer kernel's longer struct is cut, not refused
])
def test_tcp_info_of_any_length(bindir, tmp_path, length, backoff, total_retrans, total_rto):
    msg = diag_msg(state=2) + nlattr(INET_DIAG_INFO, tcp_info(length))
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(msg)), "-1")
    assert r.returncode == 0, r.stderr
    (row,) = rows
    assert row["state"] == "SYN-SENT" and row["rto_ms"] == "1000"
    assert (int(row["backoff"]), int(row["total_retrans"]), int(row["total_rto"])) == \
        (backoff, total_retrans, total_rto)


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
    timer:(persist,...), with what it could not send in Send-Q; idiag_retrans counts the
    zero-window probes (icsk_probes_out) and goes up."""
    r, rows = replay(bindir, os.path.join(NL, "persist.bin"))
    assert r.returncode == 0, r.stderr
    assert rows and all(x["state"] == "ESTAB" and x["timer"] == "persist" for x in rows)
    assert all(int(x["wq"]) > 0 and x["peer"] == "127.0.0.1:21030" for x in rows)
    probes = [int(x["retrans"]) for x in rows]
    assert probes == sorted(probes) and probes[-1] > probes[0]


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
