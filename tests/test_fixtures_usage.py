"""Fixtures: -h equals the synopsis in docs/fixtures.md.  Bad input to every option of every
fixture is tests/test_badinput_fixtures.py."""
import os
import re
import subprocess

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
