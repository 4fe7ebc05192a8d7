"""Two runs never share a tree of output directories (issue 30, class 3): a run whose --out is
inside, or contains, the --out of another live run is refused in one line before it starts, and
the live run's files are left alone.  Before, a run A's end replaced its raw/<unit> whole, moving
and deleting the locked directory of a run B that had been given A's raw/<unit> as its --out."""
import glob
import os
import subprocess
import time

import pytest

import lab_proc
from conftest import TOP

pytestmark = pytest.mark.netns
RUN = os.path.join(TOP, "run.sh")

# a unit that holds until the test removes its hold file, so the run stays live meanwhile
HOLD_SH = """#!/bin/sh
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
echo held > "$RAW/held.txt"
while [ -e "{hold}" ]; do sleep 0.05; done
"""


def experiments(tmp_path, hold):
    return lab_proc.experiments(tmp_path, "t-hold - named run no 1 60 no 1 no\n"
                                          "t-quick - named run no 1 30 no 1 no\n",
                                {("t-hold", "t-hold.sh"): HOLD_SH.replace("{hold}", str(hold)),
                                 ("t-quick", "t-quick.sh"): lab_proc.COLLECT_INIT + 'echo ok > "$RAW/ok.txt"\n'})


def test_an_out_inside_or_around_a_live_runs_is_refused(tmp_path, bindir):
    hold = tmp_path / "hold"
    hold.write_text("")
    exp = experiments(tmp_path, hold)
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(exp), TCPLAB_STATE=str(tmp_path / "state"))
    a_out = tmp_path / "N" / "A"
    a = subprocess.Popen([RUN, "--out", str(a_out), "t-hold"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        # readiness: the unit's first raw file, in A's temporary directory (its progress line on
        # stderr comes through run.sh's log copy, buffered while stderr is a pipe)
        deadline = time.monotonic() + 60
        while not glob.glob(str(a_out / ".tmp-*" / "raw" / "t-hold" / "held.txt")):
            assert a.poll() is None, "run A ended before its unit held"
            assert time.monotonic() < deadline, "run A's unit never held"
            time.sleep(0.05)                        # a poll's period, not a synchronisation
        inside = a_out / "raw" / "t-hold"
        for out in (inside, a_out / "deeper" / "still", tmp_path / "N"):
            r = subprocess.run([RUN, "--out", str(out), "t-quick"], capture_output=True,
                               text=True, env=env, timeout=60)
            word = "contains" if out == tmp_path / "N" else "is inside"
            assert r.returncode == 1, (out, r.returncode, r.stderr)
            assert r.stderr.count("\n") == 1 and word in r.stderr and "live run" in r.stderr, \
                r.stderr
            assert not os.path.exists(os.path.join(out, "t-quick.txt"))
        # a sibling is no one's: it runs
        r = subprocess.run([RUN, "--out", str(tmp_path / "N" / "B"), "t-quick"],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
    finally:
        hold.unlink()
        rest = a.stderr.read()
        a.wait(timeout=60)
    assert a.returncode == 0, rest[-2000:]
    assert (a_out / "raw" / "t-hold" / "held.txt").read_text() == "held\n"
