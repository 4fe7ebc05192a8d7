"""poll-scaling lab: facts, not speeds.  Each backend echoes bytes back exactly; the select
backend refuses fd >= FD_SETSIZE cleanly; epoll serves 5000 idle connections plus the active
ones; bad input is one line on stderr and exit 2; the unit and its report run in quick mode."""
import json
import os
import re
import resource
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from bench_poll_scaling import PORT, Server, run_load  # noqa: E402  (tests/bench/)

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A client run inside the namespace: payloads that catch a lost, reordered or extra byte, and
# one large enough (1 MiB) that the server's send buffer fills and it must wait for POLLOUT.
ECHO_CHECK = r"""
import socket, sys, threading
port = int(sys.argv[1])
payloads = [b"x", bytes(range(256)), b"\r\n\0" * 1000, bytes((i * 7 + 3) % 251 for i in range(1 << 20))]
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    for p in payloads:
        t = threading.Thread(target=s.sendall, args=(p,))
        t.start()
        got = b""
        while len(got) < len(p):
            chunk = s.recv(1 << 16)
            if not chunk:
                sys.exit("server closed after %d of %d bytes" % (len(got), len(p)))
            got += chunk
        t.join()
        if got != p:
            sys.exit("echo differs for a %d-byte payload" % len(p))
    s.shutdown(socket.SHUT_WR)
    if s.recv(1) != b"":
        sys.exit("bytes after the last echo")
print("echo ok")
"""

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def prog(bindir, name):
    return os.path.join(bindir, name)


def ns_pids(ns):
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                          text=True).stdout.split()


# ---- usage and bad input (no namespace needed) ---------------------------------------------

@pytest.mark.parametrize("name", ["echo_server", "echo_load"])
def test_help_prints_usage_and_exits_0(bindir, name):
    r = subprocess.run([prog(bindir, name), "-h"], capture_output=True, text=True)
    assert r.returncode == 0
    assert r.stdout.startswith(f"usage: {name} ")
    assert r.stderr == ""


@pytest.mark.parametrize("name", ["echo_server", "echo_load"])
def test_docs_synopsis_is_usage(bindir, name):
    r = subprocess.run([prog(bindir, name), "-h"], capture_output=True, text=True)
    with open(os.path.join(TOP, "docs", "poll-scaling.md")) as f:
        assert r.stdout in f.read()


@pytest.mark.parametrize("name,args", [
    ("echo_server", ["-p", "0", "-b", "epoll"]),
    ("echo_server", ["-p", "http", "-b", "epoll"]),
    ("echo_server", ["-p", "70000", "-b", "poll"]),
    ("echo_server", ["-p", str(PORT), "-b", "kqueue"]),
    ("echo_server", ["-p", str(PORT)]),
    ("echo_server", ["-b", "select"]),
    ("echo_server", ["-p", str(PORT), "-b", "epoll", "-i", "-5"]),
    ("echo_server", ["-p", str(PORT), "-b", "epoll", "extra"]),
    ("echo_load", ["-p", str(PORT), "-k", "-1"]),
    ("echo_load", ["-p", str(PORT), "-k", "12abc"]),
    ("echo_load", ["-p", "0"]),
    ("echo_load", ["-k", "5"]),
    ("echo_load", ["-p", str(PORT), "-l", "0"]),
    ("echo_load", ["-s", "-k", "5"]),
    ("echo_load", ["-p", str(PORT), "--bogus"]),
    ("echo_load", ["-p", str(PORT), "-w"]),
])
def test_bad_input_is_one_line_and_exit_2(bindir, name, args):
    r = subprocess.run([prog(bindir, name), *args], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: "), r.stderr


# ---- in a namespace ------------------------------------------------------------------------

@pytest.mark.netns
@pytest.mark.parametrize("backend", ["select", "poll", "epoll"])
def test_backend_echoes_bytes_exactly(bindir, netns, backend):
    srv = Server(netns, bindir, backend)
    try:
        assert srv.ready["backend"] == backend and srv.ready["trigger"] == "level"
        r = subprocess.run(["ip", "netns", "exec", netns, "/usr/bin/python3", "-c", ECHO_CHECK,
                            str(PORT)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stdout.strip() == "echo ok", r.stderr
        rc, res, out, err = run_load(netns, bindir, ["-p", str(PORT), "-k", "16", "-w", "200",
                                                     "-u", "20", "-P", str(srv.pid)])
        assert rc == 0, err
        assert res["errno"] == "none" and int(res["requests"]) > 0
        assert res["mismatches"] == "0" and res["unanswered"] == "0"
    finally:
        status = srv.stop()
    assert status == 0, srv.stderr
    assert srv.stderr == ""
    [window] = srv.lines("stats reason=usr1 ")[1:2]
    assert window["conns"] == str(16 + 8)
    assert float(window["wait_us_per_call"]) > 0 and int(window["calls"]) > 0
    [exit_line] = srv.lines("exit ")
    assert exit_line["reason"] == "signal" and exit_line["conns"] == "0"


def hard_nofile_allows_fd_setsize():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard == resource.RLIM_INFINITY or hard > 1100 + 64


@pytest.mark.netns
@pytest.mark.skipif(not hard_nofile_allows_fd_setsize(),
                    reason="hard RLIMIT_NOFILE too small to reach fd 1024")
def test_select_refuses_fd_setsize_cleanly(bindir, netns):
    srv = Server(netns, bindir, "select")
    try:
        # Below FD_SETSIZE it serves: 900 idle + 8 active connections.
        rc, res, _, err = run_load(netns, bindir, ["-p", str(PORT), "-k", "900", "-w", "200",
                                                   "-u", "20"])
        assert rc == 0 and res["errno"] == "none" and res["mismatches"] == "0", err
        # 1100 idle connections need fds past 1023: the server must stop by itself, exit 3.
        rc, res, _, err = run_load(netns, bindir, ["-p", str(PORT), "-k", "1100", "-w", "200",
                                                   "-u", "20"])
        status = srv.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("select server still running after an fd >= FD_SETSIZE")
    finally:
        if srv.proc.poll() is None:
            srv.stop()
    assert status == 3, srv.stderr
    assert re.fullmatch(r"echo_server: fd (\d+) >= FD_SETSIZE \(1024\): select\(\) cannot "
                        r"watch it\n", srv.stderr), srv.stderr
    assert not any(m in srv.stderr + srv.stdout for m in SANITIZER_MARKS)
    [refused] = srv.lines("refused ")
    assert int(refused["fd"]) >= 1024 and refused["fd_setsize"] == "1024"
    assert 900 < int(refused["conns"]) < 1024
    assert srv.lines("exit ")[0]["reason"] == "fd_setsize"
    # The client saw the server go: a result, not a crash.
    assert rc == 0 and res["errno"] != "none", err
    assert ns_pids(netns) == []


@pytest.mark.netns
def test_epoll_serves_5000_idle_plus_active(bindir, netns):
    srv = Server(netns, bindir, "epoll")
    try:
        rc, res, out, err = run_load(netns, bindir, ["-p", str(PORT), "-k", "5000", "-w", "300",
                                                     "-u", "50", "-P", str(srv.pid)])
    finally:
        status = srv.stop()
    assert rc == 0, err
    assert "idle k=5000 opened=5000 " in out
    assert res["errno"] == "none" and int(res["requests"]) > 0
    assert res["mismatches"] == "0" and res["unanswered"] == "0"
    assert status == 0, srv.stderr
    window = srv.lines("stats reason=usr1 ")[1]
    assert window["conns"] == "5008"
    [exit_line] = srv.lines("exit ")
    assert exit_line["accepted"] == "5008" and exit_line["closed"] == "5008"


@pytest.mark.netns
def test_load_against_no_server_is_a_result(bindir, netns):
    rc, res, _, err = run_load(netns, bindir, ["-p", str(PORT), "-k", "3", "-q"])
    assert rc == 0, err
    assert res["errno"] == "ECONNREFUSED" and res["requests"] == "0"


@pytest.mark.netns
def test_selftest_echo_is_exact(bindir, netns):
    rc, res, _, err = run_load(netns, bindir, ["-s", "-w", "200", "-u", "20", "-l", "3000"])
    assert rc == 0, err
    assert res["selftest"] == "1" and res["errno"] == "none"
    assert int(res["requests"]) > 0 and res["mismatches"] == "0" and res["unanswered"] == "0"


# ---- the unit and its report, quick mode ---------------------------------------------------

@pytest.fixture(scope="module")
def quick_run(bindir, tmp_path_factory):
    """experiments/poll-scaling/poll-scaling.sh with TL_QUICK=1 in its own namespace, then the report."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and `ip netns`")
    import bench_poll_scaling
    root = tmp_path_factory.mktemp("poll-scaling")
    raw, out = root / "raw", root / "out"
    with bench_poll_scaling.netns() as ns:
        env = dict(os.environ, TL_QUICK="1", TL_BIN=os.path.abspath(bindir))
        r = subprocess.run(["ip", "netns", "exec", ns, "sh",
                            os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.sh"),
                            str(raw / "poll-scaling")], env=env, capture_output=True,
                           text=True, timeout=120)
        left = ns_pids(ns)
    assert r.returncode == 0, r.stderr
    assert left == []
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.py"),
                          str(raw), str(out)], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    return raw, out, r.stderr


def test_unit_runs_alone():
    """It measures speed: the unit table (experiments/units) makes run.sh run it by itself."""
    import tcplab
    (u,) = [u for u in tcplab.read_units() if u["unit"] == "poll-scaling"]
    assert u["alone"] is True and u["set"] == "labs"


@pytest.mark.netns
def test_quick_unit_report(quick_run):
    raw, out, progress = quick_run
    obj = json.loads((out / "poll-scaling.json").read_text())
    for key in ("experiment", "kernel", "counters", "errno", "elapsed_s", "backends"):
        assert key in obj
    assert obj["experiment"] == "poll-scaling" and obj["errno"] is None
    assert obj["counters"] is None and obj["elapsed_s"] > 0     # poll-scaling samples none
    be = obj["backends"]
    assert be["select_refused_at_k"] == 2000 == obj["select_refused_at_k"]
    for b in ("select", "poll", "epoll"):
        ks = [row["k"] for row in be[b]]
        assert ks == [0, 256, 900, 2000]
        for row in be[b]:
            if row["status"] != "ok":
                continue
            for key in ("req_s", "p50_us", "p99_us", "max_us", "server_wait_us_per_call",
                        "server_work_us_per_call"):
                assert row[key] is not None and row[key] >= 0, (b, row)
            assert row["mismatches"] == 0 and row["unanswered"] == 0
    assert [r["status"] for r in be["epoll"]] == ["ok"] * 4
    assert [r["status"] for r in be["select"]] == ["ok", "ok", "ok", "refused"]
    assert obj["select_refusal"]["fd"] >= 1024
    text = (out / "poll-scaling.txt").read_text()
    assert "\nselect\n" in text and "\npoll\n" in text and "\nepoll\n" in text
    assert "refused: fd 1024 >= FD_SETSIZE (1024)" in text
    assert "rlimit_nofile:" in text
    if shutil.which("gnuplot"):
        assert obj["plot"] == "poll-scaling.svg"
        assert (out / "poll-scaling.svg").read_text().lstrip().startswith("<?xml")
    else:
        assert "plot: gnuplot not available" in text
    assert "select refused at K=2000" in progress


@pytest.mark.netns
def test_quick_unit_records_its_file_limit_and_memory(quick_run):
    raw, out, _ = quick_run
    obj = json.loads((out / "poll-scaling.json").read_text())
    hard = int(subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout)
    assert obj["plan"]["nofile_hard"] == hard and obj["plan"]["load_fds"] == 40
    assert obj["plan"]["ks_not_run"] == [] and obj["plan"]["guest"] is False
    mem = {(m["backend"], m["k"]): m for m in obj["meminfo_kb"]}
    assert set(mem) == {(b, k) for b in ("select", "poll", "epoll") for k in (0, 256, 900, 2000)}
    assert all(0 < m["MemAvailable"] <= m["MemTotal"] for m in mem.values())
    assert "memory once the idle connections were open" in (out / "poll-scaling.txt").read_text()


@pytest.mark.netns
def test_a_k_the_file_limit_cannot_hold_is_not_run_and_said(bindir, tmp_path):
    """A hard RLIMIT_NOFILE of 1000 (the guest's init once left 4096 for K=5000): K=2000 needs
    2040 descriptors, so the quick run leaves it out and the report says why, not a failed unit."""
    import bench_poll_scaling
    raw, out = tmp_path / "raw", tmp_path / "out"
    with bench_poll_scaling.netns() as ns:
        env = dict(os.environ, TL_QUICK="1", TL_BIN=os.path.abspath(bindir), TL_POLL_PIN="0")
        r = subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", 'ulimit -n 1000 && exec sh "$@"',
                            "sh", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.sh"),
                            str(raw / "poll-scaling")], env=env, capture_output=True,
                           text=True, timeout=120)
        assert ns_pids(ns) == []
    assert r.returncode == 0, r.stderr
    assert "K=2000 not run: echo_load needs 2040 fds, the hard RLIMIT_NOFILE is 1000" in r.stderr
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.py"),
                          str(raw), str(out)], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    obj = json.loads((out / "poll-scaling.json").read_text())
    assert obj["plan"]["ks"] == [0, 256, 900] and obj["plan"]["ks_not_run"] == [2000]
    assert obj["plan"]["nofile_hard"] == 1000
    assert ("K=2000 not run: echo_load needs 2040 fds, more than the hard RLIMIT_NOFILE 1000"
            in (out / "poll-scaling.txt").read_text())


@pytest.mark.netns
def test_report_without_gnuplot_says_so(quick_run, tmp_path):
    raw, _, _ = quick_run
    env = dict(os.environ, PATH="/nonexistent")
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.py"),
                          str(raw), str(tmp_path)], capture_output=True, text=True, env=env)
    assert rep.returncode == 0, rep.stderr
    assert "plot: gnuplot not available" in (tmp_path / "poll-scaling.txt").read_text()
    assert not (tmp_path / "poll-scaling.svg").exists()
    assert json.loads((tmp_path / "poll-scaling.json").read_text())["plot"] is None


def test_report_missing_raw_is_one_line(tmp_path):
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.py"),
                          str(tmp_path), str(tmp_path / "out")], capture_output=True, text=True)
    assert rep.returncode == 1
    assert len(rep.stderr.splitlines()) == 1 and "poll-scaling: missing" in rep.stderr
    (tmp_path / "poll-scaling").mkdir()
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.py"),
                          str(tmp_path), str(tmp_path / "out")], capture_output=True, text=True)
    assert rep.returncode == 1
    assert len(rep.stderr.splitlines()) == 1 and "plan.txt: missing" in rep.stderr


@pytest.mark.netns
def test_report_accepts_deleted_empty_err_files(quick_run, tmp_path):
    """run.sh deletes stderr files that stayed empty; the report must not need them."""
    raw, _, _ = quick_run
    copy = tmp_path / "raw"
    shutil.copytree(raw, copy)
    for err in (copy / "poll-scaling").glob("*.err"):
        if err.stat().st_size == 0:
            err.unlink()
    rep = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "poll-scaling", "poll-scaling.py"),
                          str(copy), str(tmp_path / "out")], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    obj = json.loads((tmp_path / "out" / "poll-scaling.json").read_text())
    assert obj["select_refused_at_k"] == 2000
