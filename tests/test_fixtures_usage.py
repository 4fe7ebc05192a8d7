"""Fixtures: -h equals the synopsis the docs show, word for word, for every fixture.  Each
fixture's synopsis is a fenced block starting with 'usage: NAME ' on exactly one page of docs/
(docs/fixtures.md for part 1's and the shared ones, an experiment's page for its own pair).
Bad input to every option of every fixture is tests/test_badinput_fixtures.py."""
import glob
import os
import re
import subprocess

import pytest

from conftest import TOP

PROGRAMS = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(TOP, "fixtures", "*.c")))


def doc_synopses():
    """{program: [(page, block), ...]} over every fenced block of docs/*.md that starts with
    'usage: PROGRAM '."""
    out = {}
    for page in sorted(glob.glob(os.path.join(TOP, "docs", "*.md"))):
        with open(page) as f:
            text = f.read()
        for block in re.findall(r"^```[a-z]*\n(.*?)^```$", text, flags=re.S | re.M):
            m = re.match(r"usage: (\S+) ", block)
            if m:
                out.setdefault(m.group(1), []).append((os.path.basename(page), block))
    return out


def test_every_fixture_is_found():
    assert len(PROGRAMS) >= 18 and "listener" in PROGRAMS and "queue_clients" in PROGRAMS


@pytest.mark.parametrize("prog", PROGRAMS)
def test_help_equals_doc_synopsis(bindir, prog):
    r = subprocess.run([os.path.join(bindir, prog), "-h"], capture_output=True, text=True, timeout=5)
    assert r.returncode == 0
    assert r.stderr == ""
    shown = doc_synopses().get(prog, [])
    assert len(shown) == 1, f"{prog}: synopsis on {len(shown)} pages ({[p for p, _ in shown]})"
    page, block = shown[0]
    assert r.stdout == block, f"usage() of {prog} and docs/{page} differ"
