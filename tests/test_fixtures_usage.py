"""Fixtures: -h equals the synopsis in docs/fixtures.md, and bad input is refused cleanly.

These run without root: every case is refused while parsing, before any socket exists.
"""
import os
import re
import subprocess
import time

import pytest

from conftest import TOP

PROGRAMS = ["listener", "connect_block", "connect_many", "connect_timeout"]
DOC = os.path.join(TOP, "docs", "fixtures.md")


def doc_synopses():
    """Every fenced block of docs/fixtures.md that starts with 'usage: ', by program name."""
    with open(DOC) as f:
        text = f.read()
    out = {}
    for block in re.findall(r"^```[a-z]*\n(.*?)^```$", text, flags=re.S | re.M):
        m = re.match(r"usage: (\S+) ", block)
        if m:
            out[m.group(1)] = block
    return out


@pytest.mark.parametrize("prog", PROGRAMS)
def test_help_equals_doc_synopsis(bindir, prog):
    r = subprocess.run([os.path.join(bindir, prog), "-h"], capture_output=True, text=True, timeout=5)
    assert r.returncode == 0
    assert r.stderr == ""
    assert r.stdout == doc_synopses().get(prog), "usage() and docs/fixtures.md differ"


BAD = [
    # (program, arguments, a word the one stderr line must contain)
    ("listener", ["-p", "0", "-m", "never"], "out of range"),
    ("listener", ["-p", "65536", "-m", "never"], "out of range"),
    ("listener", ["-p", "-1", "-m", "never"], "out of range"),
    ("listener", ["-p", "abc", "-m", "never"], "not a whole number"),
    ("listener", ["-p", "80x", "-m", "never"], "not a whole number"),
    ("listener", ["-p", "", "-m", "never"], "not a whole number"),
    ("listener", ["-p", "21010", "-b", "-1", "-m", "never"], "out of range"),
    ("listener", ["-p", "21010", "-b", "65536", "-m", "never"], "out of range"),
    ("listener", ["-p", "21010", "-b", "1", "-m", "full"], "backlog 0"),
    ("listener", ["-p", "21010", "-m", "sometimes"], "-m"),
    ("listener", ["-p", "21010", "-m", "never", "-x"], "unknown option -x"),
    ("listener", ["-m", "never"], "missing -p"),
    ("listener", ["-p", "21010"], "missing -m"),
    ("listener", ["-p", "21010", "-m"], "needs an argument"),
    ("listener", ["-p", "21010", "-m", "never", "extra"], "unexpected argument"),
    ("listener", ["-p", "21010", "-a", "localhost", "-m", "never"], "address"),
    ("listener", ["-p", "21010", "-a", "127.0.0.256", "-m", "never"], "address"),
    ("connect_block", ["-p", "0"], "out of range"),
    ("connect_block", ["-p", "21010", "-s", "0"], "out of range"),
    ("connect_block", ["-p", "21010", "-s", "128"], "out of range"),
    ("connect_block", ["-p", "21010", "-q"], "unknown option -q"),
    ("connect_block", ["-s", "2"], "missing -p"),
    ("connect_many", ["-p", "21010", "-n", "0"], "out of range"),
    ("connect_many", ["-p", "21010", "-n", "1000001"], "out of range"),
    ("connect_many", ["-p", "21010"], "missing -n"),
    ("connect_many", ["-n", "10"], "missing -p"),
    ("connect_many", ["-p", "21010", "-n", "10", "-r", ""], "-r"),
    ("connect_timeout", ["-p", "21010", "-m", "close"], "missing -t"),
    ("connect_timeout", ["-p", "21010", "-t", "100"], "missing -m"),
    ("connect_timeout", ["-p", "21010", "-t", "-1", "-m", "close"], "out of range"),
    ("connect_timeout", ["-p", "21010", "-t", "100", "-m", "close", "-k", "5"], "-k needs -m keep"),
    ("connect_timeout", ["-p", "21010", "-t", "100", "-m", "drop"], "-m"),
]


@pytest.mark.parametrize("prog,args,word", BAD, ids=[f"{p} {' '.join(a)}" for p, a, _ in BAD])
def test_bad_input_is_one_line_exit_2(bindir, prog, args, word):
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(bindir, prog)] + args, capture_output=True, text=True, timeout=5)
    assert time.monotonic() - t0 < 5
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(prog + ": ")
    assert word in lines[0]
