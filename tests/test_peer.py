"""peer, the actor of parts 5 and 6: its steps do what docs/fixtures.md#peer says, in a fresh
namespace on loopback.  Kernel facts are asserted only where they are the fixture's contract
(TCP_LINGER2 read back, a TIME_WAIT socket holding a port); the experiments assert the rest.
Bad input is tests/test_badinput_fixtures.py; the step parser is tests/test_fixtures_lib.py."""
import os
import select
import signal
import subprocess
import time

import pytest

from conftest import in_ns

PORT = 21058
DEADLINE_S = 10


def kv(line):
    head, *rest = line.split()
    return head, dict(x.split("=", 1) for x in rest)


def lines(text, head):
    return [kv(x)[1] for x in text.splitlines() if x.startswith(head + " ")]


class Peer:
    """A peer started in the background; waits for a line that starts with `until`."""

    def __init__(self, bindir, ns, args, until="ready "):
        self.proc = subprocess.Popen(in_ns(ns, [os.path.join(bindir, "peer"), *args]),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = ""
        self.wait_for(until)

    def wait_for(self, prefix):
        deadline = time.monotonic() + DEADLINE_S
        while not any(x.startswith(prefix) for x in self.out.splitlines()):
            left = deadline - time.monotonic()
            assert left > 0, f"no '{prefix}' line: {self.out!r}"
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536).decode()
                assert chunk, f"peer exited before '{prefix}': {self.proc.stderr.read()}"
                self.out += chunk

    def finish(self, sig=None):
        if sig is not None:
            self.proc.send_signal(sig)
        rest, err = self.proc.communicate(timeout=DEADLINE_S)
        self.out += rest
        return self.proc.returncode, err


def run(bindir, ns, args):
    r = subprocess.run(in_ns(ns, [os.path.join(bindir, "peer"), *args]), capture_output=True,
                       text=True, timeout=DEADLINE_S + 35)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.netns
def test_orderly_exchange_moves_every_byte(bindir, netns):
    srv = Peer(bindir, netns, ["-r", "server", "-p", str(PORT), "-s", "drain,send:70000,close"])
    rc, out, err = run(bindir, netns, ["-r", "client", "-p", str(PORT),
                                       "-s", "send:123456,shutdown-wr,drain,close"])
    assert rc == 0 and err == "", err
    src, serr = srv.finish()
    assert src == 0 and serr == "", serr
    [conn] = lines(out, "connect")
    assert conn["ret"] == "0" and conn["errno"] == "none" and conn["peer"] == f"127.0.0.1:{PORT}"
    steps = lines(out, "step")
    assert [s["op"] for s in steps] == ["send:123456", "shutdown-wr", "drain", "close"]
    assert steps[0]["ret"] == steps[0]["bytes"] == "123456"
    # the client half-closed and still received the whole reply, then EOF
    assert steps[2]["ret"] == "0" and steps[2]["bytes"] == "70000"
    s = lines(srv.out, "step")
    assert s[0]["op"] == "drain" and s[0]["bytes"] == "123456" and s[0]["ret"] == "0"
    [acc] = lines(srv.out, "accept")
    assert acc["peer"] == conn["local"]
    [ex] = lines(srv.out, "exit")
    assert ex["connections"] == "1" and ex["open"] == "0" and ex["reason"] == "done"
    # every step line is stamped, in order
    ts = [int(x["t_ns"]) for x in steps]
    assert ts == sorted(ts)


@pytest.mark.netns
def test_hold_waits_for_sigusr1_and_sigterm_closes_what_is_open(bindir, netns):
    srv = Peer(bindir, netns, ["-r", "server", "-p", str(PORT), "-n", "2", "-s", "hold,inq"])
    cli = Peer(bindir, netns, ["-r", "client", "-p", str(PORT), "-n", "2", "-s", "send:10,hold"],
               until="hold ")
    srv.wait_for("hold ")
    assert not lines(srv.out, "step")      # nothing done while it holds
    srv.proc.send_signal(signal.SIGUSR1)
    srv.wait_for("step i=1 n=2 ")
    [held, inq] = lines(srv.out, "step")
    assert held["op"] == "hold" and held["ret"] == "0"
    assert inq["op"] == "inq" and inq["ret"] == "10"     # the client's bytes, not yet read
    cli.proc.send_signal(signal.SIGUSR1)                 # client: next connection
    srv.wait_for("hold i=2 ")
    rc, err = srv.finish(signal.SIGTERM)
    assert rc == 0 and err == "", err
    [ex] = lines(srv.out, "exit")
    # connection 1 was left open by its steps, connection 2 by the stop: both closed at exit
    assert ex["reason"] == "signal" and ex["connections"] == "2" and ex["open"] == "2"
    assert [s["ret"] for s in lines(srv.out, "step")][-1] == "-1"   # the hold that SIGTERM ended
    crc, cerr = cli.finish(signal.SIGTERM)
    assert crc == 0 and cerr == "", cerr


@pytest.mark.netns
def test_linger2_is_read_back(bindir, netns):
    fin = subprocess.run(in_ns(netns, ["sysctl", "-n", "net.ipv4.tcp_fin_timeout"]),
                         capture_output=True, text=True, check=True).stdout.strip()
    srv = Peer(bindir, netns, ["-r", "server", "-p", str(PORT), "-s", "drain,close"])
    rc, out, err = run(bindir, netns, ["-r", "client", "-p", str(PORT), "-s",
                                       "linger2:5,linger2:-1,linger2:0,linger:0,close"])
    assert rc == 0 and err == "", err
    srv.finish()
    got = {s["op"]: s for s in lines(out, "step")}
    assert got["linger2:5"]["value"] == "5"
    assert got["linger2:-1"]["value"] == "-1"
    # 0: no value of its own; getsockopt() answers with the namespace's tcp_fin_timeout
    assert got["linger2:0"]["value"] == fin
    assert all(s["ret"] == "0" and s["errno"] == "none" for s in got.values())


@pytest.mark.netns
def test_failed_connects_are_results(bindir, netns):
    rc, out, err = run(bindir, netns, ["-r", "client", "-p", str(PORT), "-n", "3",
                                       "-s", "send:1,close"])
    assert rc == 0 and err == "", err
    conns = lines(out, "connect")
    assert [c["errno"] for c in conns] == ["ECONNREFUSED"] * 3
    assert all(c["local"] == "none" and c["ret"] == "-1" for c in conns)
    assert not lines(out, "step")
    [ex] = lines(out, "exit")
    assert ex["connections"] == "0" and ex["reason"] == "done"


@pytest.mark.netns
def test_bind_with_r_is_a_result(bindir, netns):
    # The server closes first, so its TIME_WAIT socket holds the listening port.
    srv = Peer(bindir, netns, ["-r", "server", "-p", str(PORT), "-R", "0", "-s", "close"])
    rc, out, err = run(bindir, netns, ["-r", "client", "-p", str(PORT), "-s", "drain,close"])
    assert rc == 0 and err == ""
    assert srv.finish() == (0, "")
    ss = subprocess.run(in_ns(netns, ["ss", "-Htan", "state", "time-wait", "sport", f"= :{PORT}"]),
                        capture_output=True, text=True, check=True).stdout
    assert len(ss.splitlines()) == 1, ss
    rc, out, err = run(bindir, netns, ["-r", "server", "-p", str(PORT), "-R", "0"])
    assert (rc, err) == (0, "")
    [b] = lines(out, "bind")
    assert b == {"addr": f"127.0.0.1:{PORT}", "reuseaddr": "0", "ret": "-1",
                 "errno": "EADDRINUSE"}
    # without -R the same refusal is the user's mistake: one line, exit 2, nothing on stdout
    rc, out, err = run(bindir, netns, ["-r", "server", "-p", str(PORT)])
    assert rc == 2 and out == "" and err == f"peer: port {PORT} in use\n"
