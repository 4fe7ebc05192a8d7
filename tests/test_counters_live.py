"""counters on live /proc in a fresh network namespace, where the counters are private."""
import os
import subprocess
import sys

import pytest

from conftest import in_ns

N = 50
CLOSED_PORT = 9   # nothing listens in a fresh namespace

REFUSED_LOOP = f"""
import socket
for _ in range({N}):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", {CLOSED_PORT}))
    except ConnectionRefusedError:
        pass
    else:
        raise SystemExit("connect succeeded: something listens on {CLOSED_PORT}")
    finally:
        s.close()
"""


def counters(bindir, ns, *args):
    r = subprocess.run(in_ns(ns, [os.path.join(bindir, "counters"), *args]),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return r.stdout


@pytest.mark.netns
def test_fresh_namespace_starts_at_zero(bindir, netns):
    snap = dict(line.split() for line in counters(bindir, netns).splitlines())
    # thread-self/net is this namespace's: a fresh one has opened nothing yet
    assert snap["TcpActiveOpens"] == "0"
    assert snap["TcpExtListenOverflows"] == "0"
    assert snap["TcpMaxConn"] == "-1"


@pytest.mark.netns
def test_refused_connects_counted_exactly(bindir, netns, tmp_path):
    before = tmp_path / "before"
    before.write_text(counters(bindir, netns))
    subprocess.run(in_ns(netns, [sys.executable, "-c", REFUSED_LOOP]), check=True)
    out = counters(bindir, netns, "-d", str(before),
                   "-k", "TcpAttemptFails,TcpOutRsts,TcpActiveOpens,TcpEstabResets")
    delta = dict(line.split(" ", 1) for line in out.splitlines())
    assert delta["TcpAttemptFails"] == f"+{N}"
    assert delta["TcpOutRsts"] == f"+{N}"
    assert delta["TcpActiveOpens"] == f"+{N}"
    assert delta["TcpEstabResets"] == "+0"
