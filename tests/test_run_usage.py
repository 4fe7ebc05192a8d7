"""./run.sh on bad usage: one line on stderr and exit 2."""
import os
import subprocess

import pytest

from conftest import TOP

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("args,message", [
    (["no-such-experiment"], "unknown experiment 'no-such-experiment'"),
    (["--bogus"], "unknown option '--bogus'"),
    (["--kernel"], "--kernel needs a version"),
    (["--accel", "xen", "p01-machine"], "--accel 'xen'"),
    (["diff", "onlyone"], "usage: ./run.sh diff"),
    (["p03-small-writes", "--set", "nosuch=1"], "--set nosuch: no such knob"),
    (["p03-small-writes", "--set", "requests=x"], "--set requests='x': want a whole number"),
    (["p03-small-writes", "--set", "requests=5", "--set", "requests=5"], "given twice"),
])
def test_bad_usage_is_one_line_and_exit_2(args, message):
    r = subprocess.run([os.path.join(TOP, "run.sh"), *args], capture_output=True, text=True,
                       timeout=5)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr
