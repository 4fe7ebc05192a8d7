"""tcplab_diff on hand-made JSON pairs: equal sides print nothing; each kind of difference is
reported once, in words that name it; noise within the tolerances is no difference."""
import copy
import json
import os
import subprocess

import pytest

import tcplab_diff

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIFF = os.path.join(TOP, "experiments", "tools", "tcplab_diff.py")


COMMON = {"schema": 2, "collected_at": "2026-11-30T12:52:40Z", "load_average": None}


def events(retrans_at):
    """sockwatch's rows (the event shape): the socket's birth, then one per retransmission."""
    rows = [{"t_s": 0.0008, "event": "new", "state": "SYN-SENT", "retrans": 0, "timer": "on",
             "expires_ms": 996, "backoff": 0, "rto_ms": 1000}]
    return rows + [{"t_s": t, "event": "change", "state": "SYN-SENT", "retrans": i + 1,
                    "timer": "on", "expires_ms": 1000, "backoff": i + 1, "rto_ms": 1000}
                   for i, t in enumerate(retrans_at)]


def retransmits(retrans_at):
    """The retransmit shape: one per event where the count went up."""
    return [{"t_s": t, "retrans": i + 1, "timer": "on", "expires_ms": 1000}
            for i, t in enumerate(retrans_at)]


def synretry(retrans_at=(1.01, 3.02), linear=None):
    """p01-synretry.json with every key docs/output-format.md documents."""
    return {
        "experiment": "p01-synretry", "kernel": "6.1.0-57-cloud-amd64", **COMMON,
        "result": "error", "errno": "ETIMEDOUT", "elapsed_s": 7.087,
        "syncnt": 2, "port": 21013, "addr": "127.0.0.1",
        "counters": {"TcpExtTCPSynRetrans": len(retrans_at), "TcpActiveOpens": 1,
                     "TcpExtListenDrops": 2000},
        "sysctls": {"net.ipv4.tcp_syn_retries": 6, "net.ipv4.tcp_syn_linear_timeouts": linear},
        "retransmits": retransmits(retrans_at),
        "events": events(retrans_at),
        "expected": [1.0, 3.0], "expected_elapsed_s": 7.0,
        "default": None,
    }


def connect_part(errors=None, errno=None):
    return {"result": "ok" if errno is None else "error", "errno": errno, "elapsed_s": None,
            "n": 2000, "ok": 2000 - sum((errors or {}).values()), "errors": errors or {},
            "us": {"min": 6.7, "p10": 6.9, "median": 7.3, "p90": 11.2, "p99": 23.8, "max": 68.4},
            "max_index": 182, "over_1ms": 0, "load_average": [1.31, 1.6, 1.63],
            "port": None if errno else 21011, "addr": None if errno else "127.0.0.1",
            "counters": {"TcpActiveOpens": 2000, "TcpOutRsts": 0 if errno is None else 2000}}


def connect_time():
    accept = connect_part()
    refused = connect_part({"ECONNREFUSED": 2000}, "ECONNREFUSED")
    top = {"experiment": "p01-connect-time", "kernel": "6.1.0-57-cloud-amd64", **COMMON}
    top.update(copy.deepcopy(accept))
    top["counters"] = {"TcpActiveOpens": 4000, "TcpOutRsts": 2000}
    top["parts"] = {"accept": accept, "refused": refused}
    return top


def machine():
    return {"experiment": "p01-machine", "kernel": "6.1.0-57-cloud-amd64", **COMMON, "hz": 250,
            "result": None, "errno": None, "elapsed_s": None, "counters": None,
            "version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1", "arch": "x86_64", "nproc": 2,
            "sysctls": {"net.ipv4.tcp_syn_retries": 6, "net.ipv4.tcp_syn_linear_timeouts": None,
                        "net.ipv4.ip_local_port_range": [32768, 60999]},
            "vm": None}


def socket_row():
    return {"state": "SYN-SENT", "local": "127.0.0.1:37866", "peer": "127.0.0.1:21013", "rq": 0,
            "wq": 1, "timer": "on", "expires_ms": 508, "retrans": 1, "inode": 3063187}


def timeout():
    """p01-timeout: two clients, each a run of its own; the program's poll() gives up, so the
    result is timeout and there is no errno."""
    def client(retrans_at):
        return {"result": "timeout", "errno": None, "elapsed_s": 1.5, "closed_s": 1.5,
                "events": events(retrans_at), "after_close": [],
                "retransmits": retransmits(retrans_at)}
    keep = client([1.04, 3.05])
    keep["after_timeout"] = [socket_row()]
    return {"experiment": "p01-timeout", "kernel": "6.1.0-57-cloud-amd64", **COMMON,
            "counters": None, "result": "timeout", "errno": None, "elapsed_s": 2.0,
            "port": 21013, "addr": "127.0.0.1",
            "cc": client([1.02]), "keep": keep, "keep_retransmits_after_timeout": 2}


def strace():
    def part(result, errno, syscalls):
        return {"result": result, "errno": errno, "elapsed_s": 0.0003, "dest": "127.0.0.1:21010",
                "syscalls": syscalls}
    return {"experiment": "p01-strace", "kernel": "6.1.0-57-cloud-amd64", **COMMON,
            "counters": None, "strace": "strace -- version 6.1", "port": 21010,
            "addr": "127.0.0.1", "backlog": 8, "result": "ok", "errno": None, "elapsed_s": 0.0003,
            "parts": {"block": part("ok", None, ["connect(3, ...) = 0"]),
                      "refused": part("error", "ECONNREFUSED",
                                      ["connect(3, ...) = -1 ECONNREFUSED (Connection refused)"]),
                      "cc": part("ok", None, None)},
            "sockets": [{**socket_row(), "state": "LISTEN", "local": "127.0.0.1:21010",
                         "peer": "0.0.0.0:0", "rq": 1, "wq": 8, "timer": "off", "expires_ms": 0,
                         "retrans": 0}]}


def base():
    return {"p01-synretry": synretry(), "p01-connect-time": connect_time(),
            "p01-machine": machine(), "p01-timeout": timeout(), "p01-strace": strace()}


def write(dirpath, objs):
    os.makedirs(dirpath, exist_ok=True)
    for name, obj in objs.items():
        with open(os.path.join(dirpath, name + ".json"), "w") as f:
            json.dump(obj, f)
    return str(dirpath)


def diff(tmp_path, a, b):
    """(lines, exit status) of the command on two directories named A and B."""
    r = subprocess.run(["/usr/bin/python3", DIFF, write(tmp_path / "A", a), write(tmp_path / "B", b)],
                       capture_output=True, text=True)
    assert r.stderr == ""
    return r.stdout.splitlines(), r.returncode


def set_path(objs, path, value):
    node = objs
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


def delete_path(objs, path):
    node = objs
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]


def test_equal_sides_print_nothing(tmp_path):
    assert diff(tmp_path, base(), base()) == ([], 0)


# Noise and fields that are different in every run: no difference.
SAME = [
    ("kernel string", ("p01-synretry", "kernel"), "6.18.44"),
    ("timestamp", ("p01-synretry", "collected_at"), "2027-01-01T00:00:00Z"),
    ("total time within 50 ms", ("p01-synretry", "elapsed_s"), 7.13),
    ("total time within 10 %", ("p01-connect-time", "elapsed_s"), 0.43),
    ("counter within 10 %", ("p01-synretry", "counters", "TcpExtListenDrops"), 2100),
    ("percentile 5x apart", ("p01-connect-time", "parts", "accept", "us", "median"), 36.5),
    ("max is one sample", ("p01-connect-time", "parts", "accept", "us", "max"), 1012770.0),
    ("min is one sample", ("p01-connect-time", "parts", "refused", "us", "min"), 0.5),
    # 4000 connects: races move counters by up to a few hundred between two runs of one kernel
    ("racing counter", ("p01-connect-time", "counters", "TcpExtDelayedACKs"), 787),
    ("racing counter on one side", ("p01-connect-time", "counters", "TcpExtDelayedACKLocked"), 3),
    # an ACK counter that did not move in one run (not listed) and moved in the other, beyond
    # the floor: a loaded host gave +176 for 300 connects against nothing
    ("ACK counter on one side beyond the floor",
     ("p01-connect-time", "parts", "accept", "counters", "TcpExtDelayedACKs"), 776),
    ("racing error count", ("p01-connect-time", "parts", "accept", "errors"), {"ETIMEDOUT": 2}),
    ("events are not read", ("p01-synretry", "events"), events([1.5, 2.5, 4.5])),
    ("unknown key", ("p01-synretry", "notes"), [{"t_s": 0.1}]),
    ("load average", ("p01-connect-time", "parts", "accept", "load_average"), [9.0, 9.0, 9.0]),
]


@pytest.mark.parametrize("what,path,value", SAME, ids=[c[0] for c in SAME])
def test_noise_is_no_difference(tmp_path, what, path, value):
    b = base()
    set_path(b, path, value)
    assert diff(tmp_path, base(), b) == ([], 0), what


def test_a_p90_with_few_connects_above_it_is_not_compared(tmp_path):
    """The p90 of 300 connects is the 30 slowest: CI's load moved it 12x between two runs of one
    kernel (398.1 against 33.2 us).  Of 2000 it is the 200 slowest, and a tenfold move counts."""
    def with_n(n, p90):
        objs = base()
        part = objs["p01-connect-time"]["parts"]["accept"]
        part["n"] = n
        part["us"]["p90"] = p90
        return objs
    assert diff(tmp_path / "300", with_n(300, 398.1), with_n(300, 33.2)) == ([], 0)
    lines, rc = diff(tmp_path / "2000", with_n(2000, 398.1), with_n(2000, 33.2))
    assert rc == 1 and "  accept: connect() time p90: 398.1 us in A, 33.2 us in B (12x apart)" \
        in lines, lines


def test_schedule_within_tolerance_is_no_difference(tmp_path):
    b = base()
    b["p01-synretry"] = synretry(retrans_at=(1.04, 3.10))
    assert diff(tmp_path, base(), b) == ([], 0)


# One change, one line: (what, path, new value, the line expected under the experiment's name).
ONE_LINE = [
    ("sysctl absent on one side", ("p01-machine", "sysctls", "net.ipv4.tcp_syn_linear_timeouts"), 4,
     "sysctl net.ipv4.tcp_syn_linear_timeouts: absent in A, 4 in B"),
    ("sysctl value", ("p01-machine", "sysctls", "net.ipv4.tcp_syn_retries"), 5,
     "sysctl net.ipv4.tcp_syn_retries: 6 in A, 5 in B"),
    ("errno", ("p01-synretry", "errno"), "ECONNREFUSED",
     "errno: ETIMEDOUT in A, ECONNREFUSED in B"),
    ("result", ("p01-timeout", "cc", "result"), "ok",
     "cc: result: timeout in A, ok in B"),
    ("sysctl list", ("p01-machine", "sysctls", "net.ipv4.ip_local_port_range"), [1024, 65535],
     "sysctl net.ipv4.ip_local_port_range: [32768, 60999] in A, [1024, 65535] in B"),
    ("total time", ("p01-synretry", "elapsed_s"), 131.2,
     "total time: 7.087 s in A, 131.200 s in B"),
    ("counter value", ("p01-synretry", "counters", "TcpActiveOpens"), 3,
     "counter TcpActiveOpens: +1 in A, +3 in B"),
    ("counter only on one side", ("p01-synretry", "counters", "IpOutTransmits"), 6,
     "counter IpOutTransmits: only in B (+6)"),
    ("percentile 10x apart", ("p01-connect-time", "parts", "refused", "us", "median"), 400.0,
     "refused: connect() time median: 7.3 us in A, 400.0 us in B (55x apart)"),
    ("TIME-WAIT counted on one side", ("p01-connect-time", "parts", "accept", "counters", "TcpExtTW"),
     2000, "accept: counter TcpExtTW: only in B (+2000)"),
    ("connect errors by name", ("p01-connect-time", "parts", "accept", "errors"), {"ETIMEDOUT": 1500},
     "accept: error ETIMEDOUT: only in B (+1500)"),
    ("sub-run", ("p01-timeout", "keep", "elapsed_s"), 3.5,
     "keep: total time: 1.500 s in A, 3.500 s in B"),
    ("number of connects", ("p01-connect-time", "parts", "accept", "n"), 200,
     "accept: number of connects: 2000 in A, 200 in B"),
    ("HZ", ("p01-machine", "hz"), 1000, "HZ: 250 in A, 1000 in B"),
    ("TCP_SYNCNT", ("p01-synretry", "syncnt"), 6, "TCP_SYNCNT: 2 in A, 6 in B"),
    ("expected schedule", ("p01-synretry", "expected"), [1.0, 2.0],
     "expected SYN retransmissions (from the sysctls): 1.00, 3.00 s in A; 1.00, 2.00 s in B"),
    ("default run on one side", ("p01-synretry", "default"), synretry(),
     "default TCP_SYNCNT run: only in B"),
]


@pytest.mark.parametrize("what,path,value,line", ONE_LINE, ids=[c[0] for c in ONE_LINE])
def test_each_difference_is_one_line(tmp_path, what, path, value, line):
    b = base()
    set_path(b, path, value)
    lines, status = diff(tmp_path, base(), b)
    assert status == 1, what
    assert lines == [path[0], "  " + line], what


def test_syn_schedule_same_count_other_times(tmp_path):
    b = base()
    b["p01-synretry"] = synretry(retrans_at=(1.01, 2.02))
    lines, status = diff(tmp_path, base(), b)
    assert status == 1
    assert lines == ["p01-synretry",
                     "  SYN retransmitted at: 1.01, 3.02 s in A; 1.01, 2.02 s in B"]


def test_syn_retransmission_count_and_times(tmp_path):
    a = {"p01-synretry": synretry(retrans_at=(1.01, 3.02))}
    b = {"p01-synretry": synretry(retrans_at=(1.01, 2.02, 3.03, 4.04, 5.06), linear=4)}
    b["p01-synretry"]["counters"]["TcpExtTCPSynRetrans"] = 2   # leave only the schedule lines
    lines, status = diff(tmp_path, a, b)
    assert status == 1
    assert lines == [
        "p01-synretry",
        "  sysctl net.ipv4.tcp_syn_linear_timeouts: absent in A, 4 in B",
        "  SYNs sent: 3 in A, 6 in B (the first SYN and its retransmissions)",
        "  SYN retransmitted at: 1.01, 3.02 s in A; 1.01, 2.02, 3.03, 4.04, 5.06 s in B",
    ]


def test_difference_inside_default_run(tmp_path):
    a, b = base(), base()
    a["p01-synretry"]["default"] = synretry()
    b["p01-synretry"]["default"] = synretry()
    b["p01-synretry"]["default"]["elapsed_s"] = 133.25
    lines, _ = diff(tmp_path, a, b)
    assert lines == ["p01-synretry",
                     "  default TCP_SYNCNT run: total time: 7.087 s in A, 133.250 s in B"]


def test_experiment_on_one_side(tmp_path):
    a, b = base(), base()
    del b["p01-machine"]
    a.pop("p01-connect-time")
    lines, status = diff(tmp_path, a, b)
    assert status == 1
    assert lines == ["p01-connect-time", "  only in B", "p01-machine", "  only in A"]


def test_sub_run_schedule(tmp_path):
    b = base()
    b["p01-timeout"]["keep"]["retransmits"] = retransmits((1.00, 2.02, 3.05))
    lines, _ = diff(tmp_path, base(), b)
    assert lines == ["p01-timeout",
                     "  keep: SYNs sent: 3 in A, 4 in B (the first SYN and its retransmissions)",
                     "  keep: SYN retransmitted at: 1.04, 3.05 s in A; 1.00, 2.02, 3.05 s in B"]


def test_counter_on_one_side_in_a_small_experiment(tmp_path):
    b = base()
    b["p01-synretry"]["counters"]["TcpExtTCPLostRetransmit"] = 1
    lines, _ = diff(tmp_path, base(), b)
    assert lines == ["p01-synretry", "  counter TcpExtTCPLostRetransmit: only in B (+1)"]


def test_a_guest_side_is_named_next_to_its_times(tmp_path):
    a = write(tmp_path / "6.1.0-57-cloud-amd64", base())
    os.makedirs(os.path.join(a, "raw", "p01-connect-time"))
    with open(os.path.join(a, "raw", "p01-connect-time", "vm.txt"), "w") as f:
        f.write("version=6.1\naccel=tcg\n")
    b = base()
    b["p01-connect-time"]["parts"]["accept"]["us"]["median"] = 0.5
    b = write(tmp_path / "6.18.44", b)
    out = subprocess.run(["/usr/bin/python3", DIFF, a, b], capture_output=True, text=True).stdout
    assert out.splitlines() == [
        "p01-connect-time",
        "  accept: connect() time median: 7.3 us in 6.1.0-57-cloud-amd64, 0.5 us in 6.18.44 (15x apart)",
        "  note: 6.1.0-57-cloud-amd64 ran under QEMU (tcg): its connect() times include the emulation",
    ]


def test_missing_documented_keys_are_trouble(tmp_path):
    """Before the schema, a missing key was silently no difference; now it is bad input (exit 2,
    one line naming the file and the key), as docs/output-format.md makes these keys required."""
    for path in (("p01-synretry", "counters"), ("p01-synretry", "retransmits"),
                 ("p01-connect-time", "parts"), ("p01-machine", "sysctls"), ("p01-machine", "hz")):
        b = base()
        delete_path(b, path)
        r = subprocess.run(["/usr/bin/python3", DIFF, write(tmp_path / "A", base()),
                            write(tmp_path / path[1], b)], capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (2, ""), path
        assert r.stderr.count("\n") == 1 and f"{path[0]}.json: {path[1]}: missing" in r.stderr


def test_null_where_the_format_allows_it(tmp_path):
    a, b = base(), base()
    for objs in (a, b):
        objs["p01-machine"]["hz"] = None
        objs["p01-connect-time"]["parts"]["accept"]["us"]["p10"] = None
    assert diff(tmp_path, a, b) == ([], 0)


def test_groups_follow_experiment_names(tmp_path):
    b = base()
    b["p01-machine"]["hz"] = 1000
    b["p01-synretry"]["errno"] = "ECONNREFUSED"   # result stays error
    lines, _ = diff(tmp_path, base(), b)
    assert lines == ["p01-machine", "  HZ: 250 in A, 1000 in B",
                     "p01-synretry", "  errno: ETIMEDOUT in A, ECONNREFUSED in B"]


def test_directory_names_label_the_sides(tmp_path):
    a = write(tmp_path / "6.1.0-57-cloud-amd64", base())
    b = base()
    b["p01-machine"]["hz"] = 1000
    b = write(tmp_path / "6.18.44", b)
    out = subprocess.run(["/usr/bin/python3", DIFF, a, b], capture_output=True, text=True).stdout
    assert out == "p01-machine\n  HZ: 250 in 6.1.0-57-cloud-amd64, 1000 in 6.18.44\n"


def test_close_times_tolerance():
    assert tcplab_diff.close_times(0.20, 0.25)       # 50 ms is larger than 10 % here
    assert not tcplab_diff.close_times(0.20, 0.26)
    assert tcplab_diff.close_times(10.0, 10.99)      # 10 % of the larger is larger than 50 ms
    assert not tcplab_diff.close_times(10.0, 11.2)
