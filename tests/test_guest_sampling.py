"""The four reports whose watchers sample every 10 ms in a QEMU guest (docs/kernel-matrix.md,
"Sampling in a guest") on recorded bytes: the 7.2 reference's raw/ with its watchers' `ready`
lines made to say interval_us=10000, as a guest run now records them.  Each report must say the
interval in its .txt and .json; watchers of one unit that disagree are refused in one line."""
import json
import os
import re
import shutil
import tempfile
import subprocess
import sys

import pytest

from conftest import TOP

REF = os.path.join(TOP, "outputs", "7.2.13+deb14-cloud-amd64")
NOTE = "sampled every 10 ms, not 1 ms"
# report -> the units whose raw/ it reads (the one that samples coarser in a guest last)
REPORTS = {"p01-synretry": ("p01-synretry", "p01-synretry-default"),
           "p05-close-wait": ("p05-close-wait",),
           "p05-fin-wait2-timeout": ("p05-fin-wait2-timeout",),
           "p06-time-wait": ("p06-time-wait",)}


def watchers(d):
    """The sockwatch outputs of a raw unit directory (files with sockwatch's `ready` line)."""
    out = []
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if name.endswith(".txt") and "sockwatch" in name:
            with open(p) as f:
                if re.search(r"^ready t_ns=\S+ interval_us=", f.read(), re.M):
                    out.append(p)
    return out


def edit_ready(path, pattern, repl):
    """The watcher's ready line edited in place (exactly one)."""
    with open(path) as f:
        text = f.read()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, path
    with open(path, "w") as f:
        f.write(new)


def coarse(path, us=10000):
    edit_ready(path, r"^(ready t_ns=\S+ interval_us=)1000 ", rf"\g<1>{us} ")


def raw_copy(tmp_path, report):
    raw = tmp_path / "raw"
    for unit in REPORTS[report]:
        shutil.copytree(os.path.join(REF, "raw", unit), raw / unit)
    return raw


def run(report, raw, out):
    os.makedirs(out, exist_ok=True)
    return subprocess.run([sys.executable, os.path.join(TOP, "experiments", report, report + ".py"),
                           str(raw), str(out)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_the_reference_was_sampled_every_ms_and_says_nothing(report):
    with open(os.path.join(REF, report + ".txt")) as f:
        assert "sampled every" not in f.read()
    with open(os.path.join(REF, report + ".json")) as f:
        j = json.load(f)
    if report == "p01-synretry":
        j = j["default"]
    assert j["sockwatch_interval_us"] == 1000


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_a_coarser_watcher_is_said(tmp_path, report):
    raw = raw_copy(tmp_path, report)
    unit = REPORTS[report][-1]
    ws = watchers(raw / unit)
    assert ws, unit
    for w in ws:
        coarse(w)
    r = run(report, raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    txt = (tmp_path / "out" / (report + ".txt")).read_text().splitlines()
    with open(tmp_path / "out" / (report + ".json")) as f:
        j = json.load(f)
    if report == "p01-synretry":
        # the TCP_SYNCNT 2 run kept 1 ms: only the default run's heading says 10 ms
        heads = [line for line in txt if line.startswith("sockwatch (t_s from")]
        assert len(heads) == 2 and NOTE not in heads[0] and NOTE in heads[1], heads
        assert j["sockwatch_interval_us"] == 1000
        assert j["default"]["sockwatch_interval_us"] == 10000
    else:
        assert NOTE in txt[1], txt[1]
        assert sum(NOTE in line for line in txt) == 1
        assert j["sockwatch_interval_us"] == 10000


@pytest.mark.parametrize("report", ["p05-close-wait", "p05-fin-wait2-timeout", "p06-time-wait"])
def test_watchers_that_disagree_are_refused(tmp_path, report):
    raw = raw_copy(tmp_path, report)
    ws = watchers(raw / report)
    assert len(ws) >= 2, ws
    coarse(ws[-1])
    r = run(report, raw, tmp_path / "out")
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "its watchers sampled at different intervals: [1000, 10000] us" in r.stderr, r.stderr
    assert not (tmp_path / "out" / (report + ".txt")).exists()


def test_p02_accept_queue_reads_no_watcher():
    """p02-accept-queue's watchers sample every 10 ms in a guest and its report says nothing of
    it, because they only end the script's waits: the report from the 7.2 reference's raw/ with
    every watcher's output removed is the committed one, byte for byte."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw")
        shutil.copytree(os.path.join(REF, "raw", "p02-accept-queue"),
                        os.path.join(raw, "p02-accept-queue"))
        gone = [p for p in watchers(os.path.join(raw, "p02-accept-queue"))
                if not p.endswith(("-client.txt", "-server.txt", "-mark.txt"))]
        assert len(gone) == 14, gone     # seven parts, a client and a server watcher each
        for p in gone:
            os.unlink(p)
        r = run("p02-accept-queue", raw, os.path.join(tmp, "out"))
        assert r.returncode == 0, r.stderr
        for ext in (".txt", ".json"):
            with open(os.path.join(tmp, "out", "p02-accept-queue" + ext)) as a, \
                    open(os.path.join(REF, "p02-accept-queue" + ext)) as b:
                assert a.read() == b.read(), ext


def timer_led(path, ms=1000):
    """A watcher's ready line made to say it was timer-led (sockwatch -T), as a guest run of
    p06-time-wait or p01-synretry-default now records it."""
    edit_ready(path, r"^(ready t_ns=.*)$", rf"\g<1> timer_led_ms={ms}")


LED_NOTE = "while every socket watched had a timer armed, up to 1 s apart"


@pytest.mark.parametrize("report", ["p01-synretry", "p06-time-wait"])
def test_a_timer_led_watcher_is_said(tmp_path, report):
    raw = raw_copy(tmp_path, report)
    unit = REPORTS[report][-1]
    for w in watchers(raw / unit):
        coarse(w)
        timer_led(w)
    r = run(report, raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    txt = (tmp_path / "out" / (report + ".txt")).read_text()
    with open(tmp_path / "out" / (report + ".json")) as f:
        j = json.load(f)
    assert txt.count(LED_NOTE) == 1 and txt.count(NOTE) == 1, txt[:2000]
    if report == "p01-synretry":
        assert "sockwatch_timer_led_ms" not in j     # the TCP_SYNCNT 2 run was not led
        j = j["default"]
    assert j["sockwatch_timer_led_ms"] == 1000 and j["sockwatch_interval_us"] == 10000


def test_p06_time_wait_watchers_that_disagree_on_leading_are_refused(tmp_path):
    raw = raw_copy(tmp_path, "p06-time-wait")
    ws = watchers(raw / "p06-time-wait")
    for w in ws:
        coarse(w)
    timer_led(ws[-1])
    r = run("p06-time-wait", raw, tmp_path / "out")
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r
    assert "its watchers disagree on timer-led sampling (-T): [0, 1000] ms" in r.stderr, r.stderr
