"""counters -i: samples in one process; the deltas of all samples add up to what happened."""
import os
import subprocess
import time

import pytest

from conftest import in_ns, kv


def samples(text):
    """counters -i output → list of {name: int} per sample."""
    out = []
    for line in text.splitlines():
        if line.startswith("sample="):
            out.append({})
        elif out and len(line.split()) == 2:
            name, val = line.split()
            out[-1][name] = int(val)
    return out


@pytest.mark.netns
def test_sample_deltas_add_up(bindir, netns):
    p = subprocess.Popen(in_ns(netns, [os.path.join(bindir, "counters"), "-i", "50", "-c", "40",
                                       "-k", "TcpAttemptFails,TcpOutRsts"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()          # the first sample: the baseline is taken
        assert first.startswith("sample=1 t_ns="), first
        r = subprocess.run(in_ns(netns, [os.path.join(bindir, "connect_many"), "-p", "21012",
                                         "-n", "30"]), capture_output=True, text=True, timeout=10)
        assert "error=ECONNREFUSED count=30" in r.stdout
        p.wait(timeout=10)   # not communicate(): it would skip what readline() buffered
        rest, err = p.stdout.read(), p.stderr.read()
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0, err
    s = samples(first + rest)
    assert len(s) == 40
    assert all("TcpAttemptFails" in x and "TcpOutRsts" in x for x in s)   # -k: always shown
    assert sum(x["TcpAttemptFails"] for x in s) == 30
    assert sum(x["TcpOutRsts"] for x in s) == 30


def test_sample_needs_live_counters(bindir):
    for args, msg in ((["-i", "10", "-d", "x"], "excludes -d"), (["-c", "3"], "-c goes with -i"),
                      (["-i", "0"], "-i '0'")):
        r = subprocess.run([os.path.join(bindir, "counters"), *args], capture_output=True,
                           text=True, timeout=5)
        assert r.returncode == 2 and msg in r.stderr and r.stderr.count("\n") == 1


def test_sample_stops_on_sigterm(bindir):
    p = subprocess.Popen([os.path.join(bindir, "counters"), "-i", "20"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("sample=1")
    p.terminate()
    p.wait(timeout=5)
    p.stdout.close()
    p.stderr.close()
    assert p.returncode == 0
