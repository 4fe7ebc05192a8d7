"""The markers `make sanitize` leaves out (.ci/run) must not hide a C program from it:
conftest.PYTHON_ONLY files run none, and each exists."""
import os
import re

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
