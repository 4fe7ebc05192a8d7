"""A full disk during a run loses no explanation (issue 30, class 8; docs/reliability.md, "A full
disk").  Before, p06-time-wait and p01-wire-connect run into a 16 MB tmpfs filled 8 s in ended
in `./run.sh: line 502: printf: write error` and exit 1: no failed .txt/.json, no last line
naming the units, and the finished p01-wire-connect without its report.  Now run.sh keeps a
reserve on the output directory's filesystem from its start, stops the units still running once
the disk is full and gives the reserve back, so the unit that finished gets its report, the
stopped and the unstarted units their failed outputs, and the last line (stderr) names them and
the full disk.  The tests mount a small tmpfs as --out and fill it at a chosen moment: when the
finished unit's raw directory is in place."""
import contextlib
import errno
import glob
import json
import os
import secrets
import subprocess
import threading
import time

import pytest

from conftest import TOP

pytestmark = pytest.mark.netns
RUN = os.path.join(TOP, "run.sh")
NOSPACE = "No space left on device"


@contextlib.contextmanager
def tmpfs(path, size):
    """A tmpfs of size at path (made), unmounted in the end whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a tmpfs as --out")
    os.makedirs(path)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755",
                        "tcplab-fulldisk", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path):
    """Write zeros to path until the filesystem refuses (ENOSPC): the disk is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for chunk in (1 << 20, 4096):
            buf = bytes(chunk)
            while True:
                try:
                    os.write(fd, buf)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    finally:
        os.close(fd)


def run_env(tmp_path):
    """run.sh's environment: a state directory of the test's own, and a mark every process of
    the run inherits, to find any it left running."""
    mark = secrets.token_hex(8)
    return mark, dict(os.environ, TCPLAB_STATE=str(tmp_path / "state"), TL_FULLDISK_MARK=mark)


def left_running(mark, pid):
    """What the run left: processes carrying its mark, namespaces named after its pid."""
    procs = []
    for env in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(env, "rb") as f:
                if f"TL_FULLDISK_MARK={mark}".encode() in f.read().split(b"\0"):
                    procs.append(env.split("/")[2])
        except OSError:
            pass
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return procs, [line for line in ns.splitlines() if line.startswith(f"tcplab-{pid}-")]


# p06-time-wait's line as it starts waiting (experiments/p06-time-wait/p06-time-wait.sh)
WAITING = "[p06-time-wait] TIME-WAIT: both sockets there; waiting for them to go"


def read_lines(stream, into):
    """Each line of stream appended to into as it comes, to its end."""
    for line in stream:
        into.append(line)


def test_a_disk_that_fills_midrun_keeps_every_explanation(tmp_path, bindir):
    # p01-wire-connect ends in a few seconds; p06-time-wait waits out TIME_WAIT (~65 s), and the
    # disk fills once it says it is waiting: from that line on it writes nothing for 5 s, so it
    # is run.sh that finds the disk full and stops it.  (Filled as soon as p01-wire-connect was in
    # place, a CI run on a faster machine caught p06-time-wait 1 s in, still writing its setup:
    # its own write failed first, "exit 1", where this test wants "stopped".)  accept-path runs
    # alone, after them: not started then
    mark, env = run_env(tmp_path)
    with tmpfs(tmp_path / "out", "16m") as out:
        p = subprocess.Popen([RUN, "--out", str(out), "p01-wire-connect", "p06-time-wait",
                              "accept-path"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
        lines = []
        reader = threading.Thread(target=read_lines, args=(p.stderr, lines), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while not ((out / "raw" / "p01-wire-connect").is_dir() and
                       any(WAITING in x for x in lines)):
                assert p.poll() is None, "run.sh ended before p06-time-wait waited:\n" + "".join(lines)
                assert time.monotonic() < deadline, "no p06-time-wait wait:\n" + "".join(lines)
                time.sleep(0.02)                    # a poll's period, not a synchronisation
            fill(out / "filler")
            p.wait(timeout=240)
            reader.join(timeout=30)
            err = "".join(lines)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        procs, nss = left_running(mark, p.pid)
        names = sorted(os.listdir(out))
        jsons = {}
        for j in glob.glob(str(out / "*.json")):
            with open(j, encoding="utf-8") as f:
                text = f.read()
            try:
                jsons[os.path.basename(j)] = json.loads(text)
            except ValueError:
                pytest.fail(f"{j}: a half-written .json ({len(text)} bytes)")
        raw = sorted(os.listdir(out / "raw"))
    last = err.rstrip("\n").rsplit("\n", 1)[-1]
    assert p.returncode == 1, (p.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    assert last.startswith("run.sh: 2 unit(s) failed: "), err[-3000:]
    for u in ("p06-time-wait", "accept-path"):
        assert u in last, last
    assert NOSPACE in last and "is full" in last, last
    assert not procs and not nss, (procs, nss)
    assert not glob.glob(str(tmp_path / "state" / "run.*")), "the run's record was left"
    assert not [n for n in names if n.startswith(".")], names    # .tmp-*, .NAME.*.tmp-PID
    # the unit that finished before the fill has its report, whole
    assert "p01-wire-connect.txt" in names and "p01-wire-connect" in raw, names
    assert jsons["p01-wire-connect.json"].get("status") != "failed"
    # each failed unit: its failed .json, whole and saying why, or the last line says it has none
    for u, why in (("p06-time-wait", "stopped"), ("accept-path", "not started")):
        if f"{u}.json" in jsons:
            j = jsons[f"{u}.json"]
            assert j["status"] == "failed" and why in j["reason"] and NOSPACE in j["reason"], j
        else:
            assert "NO .txt/.json COULD BE WRITTEN FOR" in last and u in last, last


def test_a_disk_without_room_for_the_reserve_is_refused_at_once(tmp_path, bindir):
    # 2 MB: less than the 4 MiB a run keeps for its outputs; refused before any unit starts
    mark, env = run_env(tmp_path)
    with tmpfs(tmp_path / "out", "2m") as out:
        r = subprocess.run([RUN, "--out", str(out), "p01-machine"], capture_output=True,
                           text=True, env=env, timeout=120)
        names = os.listdir(out)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert r.stderr.count("\n") == 1 and NOSPACE in r.stderr and str(out) in r.stderr, r.stderr
    assert names == [], names
    assert left_running(mark, -1)[0] == []
    assert not glob.glob(str(tmp_path / "state" / "run.*"))
