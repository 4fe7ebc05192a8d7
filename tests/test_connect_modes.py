"""connect-modes lab: the connect_modes fixture, its unit and its report.

Facts, not speeds: every mode completes and every connect succeeds; bad input is refused with
exit 2 and one line on stderr; -h equals the synopsis in docs/connect-modes.md.
"""
import json
import os
import subprocess

import pytest

from conftest import kv
from unit_live import collect_and_report
from lab_proc import Proc, run_in_ns

MODES = ["so-error", "poll-only", "wait-so-error", "so-type", "blocking"]
NONBLOCKING = MODES[:4]
PORT = 21041


def prog(bindir):
    return os.path.join(bindir, "connect_modes")


BAD = [
    (["-p", "0"], "-p"),
    (["-p", "65536"], "-p"),
    (["-p", "http"], "-p"),
    (["-p", "80", "-m", "so-eror"], "unknown mode"),
    (["-p", "80", "-m", "so-error,so-error"], "twice"),
    (["-p", "80", "-n", "0"], "-n"),
    (["-p", "80", "-n", "12x"], "-n"),
    (["-p", "80", "-w", "-1"], "-w"),
    (["-p", "80", "-W", "99999999"], "-W"),
    (["-p", "80", "-1"], "exactly one mode"),
    (["-p", "80", "-1", "-m", "blocking", "-n", "5"], "conflicts"),
    (["-p", "80", "-a", "localhost"], "-a"),
    (["-m", "blocking"], "missing -p"),
    (["-p", "80", "-x"], "unknown option"),
    (["-p", "80", "extra"], "unexpected argument"),
]


@pytest.mark.parametrize("args,word", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line(bindir, args, word):
    r = subprocess.run([prog(bindir)] + args, capture_output=True, text=True, timeout=5)
    assert r.returncode == 2
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert word in r.stderr


@pytest.fixture
def listener(netns, bindir):
    """An accept-and-close listener on PORT inside the test's namespace, ready."""
    with Proc(netns, [os.path.join(bindir, "listener"), "-p", PORT, "-b", 128, "-m", "close"]) as p:
        p.wait_line("ready ")
        yield p


def mode_lines(stdout):
    return {d["mode"]: d for d in map(kv, stdout.splitlines())
            if "mode" in d and "step" not in d and "error" not in d}


@pytest.mark.netns
def test_every_mode_completes_and_connects(netns, bindir, listener):
    r = run_in_ns(netns, [prog(bindir), "-p", PORT, "-n", 30, "-w", 2])
    assert r.returncode == 0, r.stderr
    modes = mode_lines(r.stdout)
    assert list(modes) == MODES
    for m, d in modes.items():
        assert (d["n"], d["ok"], d["failed"]) == ("30", "30", "0"), d
        assert d["bimodal"] in ("yes", "no")
        # A non-blocking connect cannot finish inside connect(): the kernel says EINPROGRESS.
        assert d["connect_einprogress"] == ("30" if m in NONBLOCKING else "0")
    steps = {(d["mode"], d["step"]) for d in map(kv, r.stdout.splitlines()) if "step" in d}
    assert ("so-error", "getsockopt") in steps and ("wait-so-error", "wait") in steps
    assert ("blocking", "poll") not in steps


@pytest.mark.netns
@pytest.mark.parametrize("mode", MODES)
def test_one_sequence_flag(netns, bindir, listener, mode):
    r = run_in_ns(netns, [prog(bindir), "-p", PORT, "-m", mode, "-1"])
    assert r.returncode == 0, r.stderr
    d = mode_lines(r.stdout)[mode]
    assert (d["n"], d["ok"], d["bimodal"]) == ("1", "1", "n/a")


@pytest.mark.netns
def test_refused_connect_is_a_result_not_a_crash(netns, bindir):
    r = run_in_ns(netns, [prog(bindir), "-p", PORT + 1, "-n", 3, "-w", 0, "-m", "so-error,blocking"])
    assert r.returncode == 0, r.stderr
    modes = mode_lines(r.stdout)
    assert modes["so-error"]["failed"] == "3" and modes["blocking"]["failed"] == "3"
    assert "mode=so-error error=ECONNREFUSED count=3" in r.stdout


@pytest.mark.netns
def test_unit_and_report(netns, bindir, tmp_path):
    collect_and_report(netns, bindir, tmp_path, "connect-modes")
    text = (tmp_path / "out" / "connect-modes.txt").read_text()
    obj = json.loads((tmp_path / "out" / "connect-modes.json").read_text())
    assert list(obj["modes"]) == MODES
    assert all(m["ok"] == 300 for m in obj["modes"].values())
    assert ("Linux does not show the Windows stall" in text) != obj["verdict"]["windows_stall_seen"]
    assert "strace -T of one sequence" in text or "strace: not available" in text
