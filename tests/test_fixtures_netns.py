"""Fixtures against the kernel: each test runs in a fresh network namespace (loopback only).

What is asserted are kernel facts (queue lengths, socket states, errnos, the SYN retry
schedule within a tolerance), never speeds.
"""
import os
import queue
import signal
import subprocess
import time

import pytest

from conftest import in_ns, kv
import lab_proc

PORT = 21010
LINE_TIMEOUT = 5.0


class Fixture(lab_proc.Proc):
    """A fixture started in a namespace (lab_proc.Proc), read line by line, pytest-failing."""

    def __init__(self, ns, bindir, prog, *args):
        super().__init__(ns, [os.path.join(bindir, prog)] + list(args))

    def line(self, timeout=LINE_TIMEOUT):
        """The next stdout line; fails if none comes within timeout or the program ended."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"{self.argv}: no line within {timeout} s")
        if line is None:
            rc = self.proc.wait()
            pytest.fail(f"{self.argv}: exited {rc} early; stderr: {''.join(self.stderr)}")
        return line

    def expect(self, prefix, timeout=LINE_TIMEOUT):
        """The next line, which must start with prefix; returned as a key=value dict."""
        line = self.line(timeout)
        assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
        return kv(line)

    def stop(self, sig=signal.SIGTERM, timeout=LINE_TIMEOUT):
        """Send sig, wait for the exit, return the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout=LINE_TIMEOUT):
        rc = self.proc.wait(timeout=timeout)
        for t in self.readers:  # EOF on both pipes: all stdout queued, all stderr kept
            t.join(timeout)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def run(netns, bindir):
    """run(prog, *args) starts a fixture in the test's namespace; all are killed at the end."""
    started = []

    def start(prog, *args):
        fx = Fixture(netns, bindir, prog, *args)
        started.append(fx)
        return fx

    try:
        yield start
    finally:
        for fx in started:
            fx.kill()


def ns_run(ns, *argv):
    return subprocess.run(in_ns(ns, argv), capture_output=True, text=True, check=True,
                          timeout=10).stdout


def ss_sockets(ns, state=None):
    """`ss -Htano` as a list of dicts (state, recvq, sendq, local, peer, rest), only those in
    state (LISTEN, ESTAB, SYN-SENT, ...) when given.  With an ss state filter the State
    column would be missing, so the filtering is done here."""
    out = []
    for line in ns_run(ns, "ss", "-Htano").splitlines():
        f = line.split()
        if state is None or f[0] == state:
            out.append({"state": f[0], "recvq": int(f[1]), "sendq": int(f[2]), "local": f[3],
                        "peer": f[4], "rest": " ".join(f[5:])})
    return out


def port_of(endpoint):
    return int(endpoint.rsplit(":", 1)[1])


def netstat(ns):
    """TcpExt counters of the namespace, from /proc/thread-self/net/netstat."""
    text = ns_run(ns, "cat", "/proc/thread-self/net/netstat").splitlines()
    counters = {}
    for names, values in zip(text[0::2], text[1::2]):
        prefix = names.split(":")[0]
        for n, v in zip(names.split()[1:], values.split()[1:]):
            counters[f"{prefix}{n}"] = int(v)
    return counters


def wait_until(what, predicate, timeout=LINE_TIMEOUT):
    """Poll predicate() until it is true; fail after timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def start_listener(run, mode, *args, port=PORT):
    fx = run("listener", "-p", port, "-m", mode, *args)
    ready = fx.expect("ready ")
    assert ready["port"] == str(port) and ready["mode"] == mode
    assert int(ready["pid"]) > 0
    return fx, ready


def stop_listener(fx, accepted, sig=signal.SIGTERM):
    assert fx.stop(sig) == 0, "".join(fx.stderr)
    assert fx.expect("exit ") == {"accepted": str(accepted)}


@pytest.mark.netns
def test_never_listener_queues_the_connection(netns, run):
    """connect() completes without accept(): the kernel queues the child socket."""
    ns_run(netns, "sysctl", "-q", "-w", "net.ipv4.tcp_syn_retries=3")
    lst, ready = start_listener(run, "never")
    assert ready["backlog"] == "8" and ready["addr"] == "127.0.0.1"
    cli = run("connect_block", "-p", PORT, "-H")
    # Unset TCP_SYNCNT reads back as this namespace's tcp_syn_retries.
    assert cli.expect("syncnt=") == {"syncnt": "3"}
    start = int(cli.expect("start_ns=")["start_ns"])
    res = cli.expect("result=")
    assert res["result"] == "ok", res
    assert int(res["end_ns"]) >= start
    cli_port = port_of(res["local"])
    assert cli.line() == "holding"

    socks = ss_sockets(netns)
    listen = [s for s in socks if s["state"] == "LISTEN" and port_of(s["local"]) == PORT]
    assert len(listen) == 1
    assert (listen[0]["recvq"], listen[0]["sendq"]) == (1, 8)
    estab = {(port_of(s["local"]), port_of(s["peer"])) for s in socks if s["state"] == "ESTAB"}
    assert estab == {(PORT, cli_port), (cli_port, PORT)}

    assert cli.stop(signal.SIGINT) == 0
    stop_listener(lst, 0)


@pytest.mark.netns
def test_nobody_listening_is_refused(netns, run, tmp_path):
    raw = tmp_path / "raw.txt"
    cli = run("connect_many", "-p", PORT, "-n", 200, "-r", raw)
    summary = cli.expect("n=")
    assert (summary["n"], summary["ok"], summary["failed"]) == ("200", "0", "200")
    assert cli.expect("error=") == {"error": "ECONNREFUSED", "count": "200"}
    assert cli.wait() == 0
    assert cli.lines.get(timeout=LINE_TIMEOUT) is None, "nothing after the errno lines"

    keys = ["min_us", "p10_us", "median_us", "p90_us", "p99_us", "max_us"]
    values = [float(summary[k]) for k in keys]
    assert values == sorted(values)
    rows = [line.split() for line in raw.read_text().splitlines()]
    assert [int(r[0]) for r in rows] == list(range(200))
    assert {r[2] for r in rows} == {"ECONNREFUSED"}
    assert rows[int(summary["max_index"])][1] == summary["max_us"]
    assert sum(float(r[1]) > 1000 for r in rows) == int(summary["over_1ms"])
    assert netstat(netns)["TcpExtListenOverflows"] == 0


@pytest.mark.netns
def test_close_listener_accepts_every_connection(netns, run):
    # -b 128: with the default 8, a descheduled listener overflows on a busy machine.
    lst, _ = start_listener(run, "close", "-b", 128)
    cli = run("connect_many", "-p", PORT, "-n", 500)
    summary = cli.expect("n=")
    assert (summary["n"], summary["ok"], summary["failed"]) == ("500", "500", "0")
    assert cli.wait() == 0
    assert cli.lines.get(timeout=LINE_TIMEOUT) is None, "no error lines when all succeed"

    def queue_empty():
        return all(s["recvq"] == 0 for s in ss_sockets(netns, "LISTEN"))

    wait_until("the accept queue to drain", queue_empty)
    stop_listener(lst, 500)


@pytest.mark.netns
def test_full_listener_times_out_a_blocking_connect(netns, run):
    """Full accept queue: SYNs are dropped; TCP_SYNCNT=1 gives up after (2<<1)-1 = 3 s."""
    lst, ready = start_listener(run, "full")
    assert ready["backlog"] == "0"
    listen = ss_sockets(netns, "LISTEN")
    assert [(s["recvq"], s["sendq"]) for s in listen] == [(1, 0)]
    before = netstat(netns)

    cli = run("connect_block", "-p", PORT, "-s", 1)
    assert cli.expect("syncnt=") == {"syncnt": "1"}
    start = int(cli.expect("start_ns=")["start_ns"])
    res = cli.expect("result=", timeout=10)
    assert (res["result"], res["errno"]) == ("error", "ETIMEDOUT")
    # tcp_write_timeout(): SYN_SENT gives up when retransmits_timed_out() with boundary
    # TCP_SYNCNT and base TCP_TIMEOUT_INIT (1 s) says so: ((2 << 1) - 1) * 1 s.
    expected = ((2 << 1) - 1) * 1.0
    assert abs(float(res["elapsed_s"]) - expected) <= 0.5, res
    assert int(res["end_ns"]) - start == pytest.approx(float(res["elapsed_s"]) * 1e9, abs=1e3)
    assert cli.wait() == 0

    after = netstat(netns)
    sent_syns = 1 + after["TcpExtTCPSynRetrans"] - before["TcpExtTCPSynRetrans"]
    assert sent_syns >= 2
    assert after["TcpExtListenOverflows"] - before["TcpExtListenOverflows"] == sent_syns
    stop_listener(lst, 0)


def syn_sent_to(ns, port):
    return [s for s in ss_sockets(ns, "SYN-SENT") if port_of(s["peer"]) == port]


def retransmits(sock):
    """The retransmit count from ss -o: timer:(on,288ms,1) -> 1."""
    timer = sock["rest"].split("timer:(", 1)[1]
    return int(timer.split(")")[0].split(",")[2])


def unanswered(run, fixture, *args):
    """A listener whose full queue leaves the SYNs unanswered, and fixture -p PORT args
    connecting to it: (listener, client)."""
    lst, _ = start_listener(run, "full")
    return lst, run(fixture, "-p", PORT, *args)


def assert_no_syn_sent_left(netns, lst):
    """No SYN-SENT socket to PORT is left; then the listener stops, having accepted nothing."""
    assert syn_sent_to(netns, PORT) == []
    stop_listener(lst, 0)


def expect_timeout(cli, timeout_s):
    start = int(cli.expect("start_ns=")["start_ns"])
    res = cli.expect("result=", timeout=timeout_s + LINE_TIMEOUT)
    assert res["result"] == "timeout", res
    assert "errno" not in res
    assert abs(float(res["elapsed_s"]) - timeout_s) <= 0.5, res
    assert int(res["end_ns"]) > start
    return int(res["end_ns"])


@pytest.mark.netns
def test_timeout_keep_leaves_the_socket_in_syn_sent(netns, run):
    lst, cli = unanswered(run, "connect_timeout", "-t", 1500, "-m", "keep", "-k", 3000)
    end_ns = expect_timeout(cli, 1.5)
    assert cli.line() == "kept"
    kept = syn_sent_to(netns, PORT)
    assert len(kept) == 1
    assert kept[0]["sendq"] == 1, "the unacknowledged SYN holds one sequence number"
    assert retransmits(kept[0]) >= 1, "first SYN retransmission is due 1 s after the SYN"

    closed_ns = int(cli.expect("closed_ns=", timeout=3 + LINE_TIMEOUT)["closed_ns"])
    assert abs((closed_ns - end_ns) / 1e9 - 3.0) <= 0.5
    assert cli.wait() == 0
    assert_no_syn_sent_left(netns, lst)


@pytest.mark.netns
def test_timeout_close_leaves_nothing(netns, run):
    lst, cli = unanswered(run, "connect_timeout", "-t", 1500, "-m", "close")
    end_ns = expect_timeout(cli, 1.5)
    assert int(cli.expect("closed_ns=")["closed_ns"]) >= end_ns
    assert cli.wait() == 0
    assert_no_syn_sent_left(netns, lst)


@pytest.mark.netns
def test_timeout_keep_ends_early_on_sigterm(netns, run):
    lst, cli = unanswered(run, "connect_timeout", "-t", 200, "-m", "keep", "-k", 600000)
    expect_timeout(cli, 0.2)
    assert cli.line() == "kept"
    assert len(syn_sent_to(netns, PORT)) == 1
    assert cli.stop() == 0
    assert "closed_ns" in cli.expect("closed_ns=")
    assert_no_syn_sent_left(netns, lst)


@pytest.mark.netns
def test_connect_results_ok_and_refused(netns, run):
    lst, _ = start_listener(run, "never")
    ok = run("connect_timeout", "-p", PORT, "-t", 2000, "-m", "close")
    ok.expect("start_ns=")
    res = ok.expect("result=")
    assert res["result"] == "ok" and res["local"].startswith("127.0.0.1:"), res
    ok.expect("closed_ns=")
    assert ok.wait() == 0

    refused = run("connect_timeout", "-p", PORT + 1, "-t", 2000, "-m", "keep")
    refused.expect("start_ns=")
    res = refused.expect("result=")
    assert (res["result"], res["errno"]) == ("error", "ECONNREFUSED")
    refused.expect("closed_ns=")
    assert refused.wait() == 0

    blk = run("connect_block", "-p", PORT + 1)
    blk.expect("syncnt=")
    blk.expect("start_ns=")
    res = blk.expect("result=")
    assert (res["result"], res["errno"]) == ("error", "ECONNREFUSED")
    assert blk.wait() == 0
    stop_listener(lst, 0, signal.SIGINT)


@pytest.mark.netns
def test_blocking_connect_stops_on_sigterm(netns, run):
    """A connect() retrying SYNs for minutes still stops at once on SIGTERM."""
    lst, cli = unanswered(run, "connect_block")
    cli.expect("syncnt=")
    cli.expect("start_ns=")
    wait_until("the SYN_SENT socket", lambda: len(syn_sent_to(netns, PORT)) == 1)
    t0 = time.monotonic()
    assert cli.stop() == 0
    assert time.monotonic() - t0 < 2
    assert cli.expect("result=")["result"] == "interrupted"
    assert_no_syn_sent_left(netns, lst)


@pytest.mark.netns
def test_ipv6_loopback(netns, run):
    lst, ready = start_listener(run, "never", "-a", "::1")
    assert ready["addr"] == "::1"
    cli = run("connect_block", "-a", "::1", "-p", PORT, "-H")
    cli.expect("syncnt=")
    cli.expect("start_ns=")
    res = cli.expect("result=")
    assert res["result"] == "ok" and res["local"].startswith("[::1]:"), res
    assert cli.line() == "holding"
    listen = ss_sockets(netns, "LISTEN")
    assert [(s["local"], s["recvq"]) for s in listen] == [(f"[::1]:{PORT}", 1)]
    assert cli.stop() == 0
    stop_listener(lst, 0)


@pytest.mark.netns
def test_ipv6_full_listener(netns, run):
    lst, ready = start_listener(run, "full", "-a", "::")
    assert ready["addr"] == "::"
    cli = run("connect_timeout", "-a", "::1", "-p", PORT, "-t", 300, "-m", "close")
    expect_timeout(cli, 0.3)
    assert cli.wait() == 0
    stop_listener(lst, 0)


@pytest.mark.netns
def test_port_in_use_is_refused(netns, run):
    lst, ready = start_listener(run, "never")
    t0 = time.monotonic()
    second = run("listener", "-p", PORT, "-m", "close")
    assert second.wait() == 2
    assert time.monotonic() - t0 < 5
    assert second.lines.get(timeout=LINE_TIMEOUT) is None, "nothing on stdout"
    assert second.stderr == [f"listener: port {PORT} in use\n"]
    running = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    assert running.split() == [ready["pid"]]
    stop_listener(lst, 0)
