"""The markers `make sanitize` leaves out (.ci/run) must not hide a C program from it:
conftest.PYTHON_ONLY files run none, and each exists."""
import os
import re
import subprocess

import pytest

from conftest import PYTHON_ONLY, TOP

# what a test that runs the programs reaches them by: the bindir fixture, the build directory,
# the collect scripts or run.sh with units (run.sh diff and run.sh matrix run Python only)
REACHES_C = re.compile(r"\bbindir\b|TCPLAB_BUILD|build/bin|TL_BIN|collect\.sh|experiments/guest/vm\.sh|"
                       r"\[RUN(?!, \"(?:diff|matrix)\")|RUN, \"--")


@pytest.mark.parametrize("name", PYTHON_ONLY)
def test_python_only_files_run_no_program(name):
    path = os.path.join(TOP, "tests", name)
    assert os.path.isfile(path), f"conftest.PYTHON_ONLY names {name}, which is not there"
    with open(path) as f:
        text = f.read()
    hits = sorted(set(m.group(0) for m in REACHES_C.finditer(text)))
    assert not hits, f"{name} is marked python_only but reaches the programs: {hits}"


def test_the_check_would_see_a_program():
    assert REACHES_C.search("def test_x(bindir):") and REACHES_C.search('subprocess.run([RUN, "--out", d])')
    assert not REACHES_C.search('subprocess.run([RUN, "diff", a, b])')



def test_deep_tests_are_qemu_ones_in_the_slow_tier():
    """`deep` (CI's check-rest leaves these out) marks only guest tests, which conftest puts in
    the slow tier: make test never held them, and make check still runs them all."""
    def collect(expr):
        return subprocess.Popen(["/usr/bin/python3", "-m", "pytest", "--collect-only", "-q",
                                 "-p", "no:cacheprovider", "-p", "no:xdist", "-m", expr, "tests"],
                                cwd=TOP, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    runs = [collect("deep"), collect("deep and not (qemu and slow)")]
    deep, stray = [[line for line in p.communicate(timeout=120)[0].splitlines() if "::" in line]
                   for p in runs]
    assert deep, "no test is marked deep"
    assert stray == [], stray
