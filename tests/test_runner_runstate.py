"""experiments/runner/tcplab_runstate.py, a run's locks, records and reaper (docs/maintainers.md,
"The runner, step by step", step 4), as a program: what runstate.sh's rs_* functions call and the
Python runner imports.  No run and no namespace: the program alone, on directories of the test's
own.  The end-to-end cases (two runs on one --out, a dead run's namespaces, signals) are in
test_reliability_outdir.py, test_reliability_nested_out.py and test_reliability_interrupt.py."""
import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TOP

RUNSTATE = os.path.join(TOP, "experiments", "runner", "tcplab_runstate.py")
sys.path.insert(0, os.path.dirname(RUNSTATE))
import tcplab_runstate as rs  # noqa: E402


def runstate(*argv, env=None):
    return subprocess.run(["/usr/bin/python3", "-S", RUNSTATE, "--prog", "t", *argv],
                          capture_output=True, text=True, timeout=60, env=env)


def locked(path):
    """An open descriptor of PATH with its lock taken, as a live run's holder has it."""
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("argv", [
    ["nonsense"], ["check-out"], ["install-dir", "--out", "/o", "a", "b"],
    ["reap-stale", "--state", "/s", "--out", "/o", "--outputs", "/d"], ["reap-tmp", "a", "b"],
    ["hold", "--state", "/s", "a", "b"], ["install-dir", "--out"],
], ids=["unknown", "no-operand", "no-tmp", "no-prefix", "two-operands", "two-of-three",
        "no-value"])
def test_a_wrong_call_is_one_line_and_exit_2(argv):
    r = runstate(*argv)
    assert r.returncode == 2, r
    assert r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_state_dir_is_made_private_and_a_shared_one_refused(tmp_path):
    env = dict(os.environ, TCPLAB_STATE=str(tmp_path / "state"))
    r = runstate("state-dir", env=env)
    assert r.returncode == 0 and r.stdout == f"{tmp_path}/state\n"
    assert os.stat(tmp_path / "state").st_mode & 0o777 == 0o700
    os.chmod(tmp_path / "state", 0o770)
    r = runstate("state-dir", env=env)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f"t: state directory {tmp_path}/state is not a directory only ")
    os.chmod(tmp_path / "state", 0o700)
    os.symlink(tmp_path / "state", tmp_path / "link")
    r = runstate("state-dir", env=dict(env, TCPLAB_STATE=str(tmp_path / "link")))
    assert r.returncode == 1 and "is not a directory only" in r.stderr


def test_check_out_prints_the_physical_path_or_the_reason(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    r = runstate("check-out", "--", str(tmp_path / "link" / "new"))
    assert r.returncode == 0 and r.stdout == f"{tmp_path}/real/new\n"
    (tmp_path / "file").write_text("")
    r = runstate("check-out", "--", str(tmp_path / "file"))
    assert (r.returncode, r.stdout) == (1, f"cannot write to {tmp_path}/file\n")


@pytest.mark.skipif(os.getuid() != 0, reason="root writing into another user's directory")
def test_check_out_refuses_another_users_directory_to_root(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    os.chown(d, 65534, 65534)
    r = runstate("check-out", "--", str(d))
    assert r.returncode == 2 and f"{d} belongs to " in r.stdout and "(uid 65534)" in r.stdout
    r = runstate("check-out", "--allow-foreign", "--", str(d))
    assert (r.returncode, r.stdout) == (0, f"{d}\n")


def test_hold_keeps_the_locks_and_a_second_hold_names_the_holder(tmp_path):
    """The first holder locks the directory and renames its record into place, locked; a second
    on the same directory says busy and the pid the record gives; once the first is killed the
    directory and the record are free."""
    state, out = tmp_path / "state", tmp_path / "out"
    state.mkdir()
    out.mkdir()
    record = state / "run.1"
    first = subprocess.Popen(["/usr/bin/python3", "-S", RUNSTATE, "hold", "--state", str(state),
                              "--", str(out), str(state / ".new.1"), str(record)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "locked\n"
        with open(record, "a") as f:
            f.write(f"id=1\npid=4242\nout={out}\n")
        assert not rs.is_free(out) and not rs.is_free(record)
        r = runstate("hold", "--state", str(state), "--", str(out))
        assert (r.returncode, r.stdout) == (1, "busy (run.sh pid 4242 in its PID namespace)\n")
    finally:
        first.kill()
        first.wait()
    assert rs.is_free(out) and rs.is_free(record)
    r = runstate("hold", "--state", str(state), "--", str(tmp_path / "missing"))
    assert (r.returncode, r.stdout) == (1, "error\n")


def test_nested_output_directories_of_live_runs_only(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "run.live").write_text("pid=7\nout=/o/a\n")
    (state / "run.dead").write_text("pid=8\nout=/o/d\n")
    fd = locked(state / "run.live")
    try:
        said = {d: rs.nested_in(str(state), "", d) for d in ("/o/a/b", "/o", "/o/ab", "/o/a", "/o/d/x")}
        own = rs.nested_in(str(state), str(state / "run.live"), "/o/a/b")
    finally:
        os.close(fd)
    assert said == {
        "/o/a/b": "/o/a/b is inside /o/a, the output directory of a live run (run.sh pid 7): use another --out",
        "/o": "/o contains /o/a, the output directory of a live run (run.sh pid 7): use another --out",
        "/o/ab": None, "/o/a": None, "/o/d/x": None}
    assert own is None


def test_reap_tmp_removes_planted_links_not_their_targets(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "keep").write_text("x")
    os.symlink(victim, out / ".tmp-planted")
    (out / ".tmp-dead").mkdir()
    (out / ".tmp-mine").mkdir()
    (out / ".p01-machine.txt.ab12.tmp-99").write_text("half")
    (out / "p01-machine.txt").write_text("kept")
    r = runstate("--top", str(tmp_path), "reap-tmp", "--tmp", str(out / ".tmp-mine"), "--", str(out))
    assert (r.returncode, r.stdout) == (0, "removed 3 temporary file(s) in out/ left by an interrupted run\n")
    assert sorted(os.listdir(out)) == [".tmp-mine", "p01-machine.txt"]
    assert os.listdir(victim) == ["keep"]


def test_install_dir_never_writes_through_a_link_nor_outside_out(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim"
    (out / ".tmp-x" / "new").mkdir(parents=True)
    (out / ".tmp-x" / "new" / "f").write_text("new\n")
    victim.mkdir()
    os.symlink(victim, out / "raw")                 # a link where a directory on the way goes
    r = runstate("--top", str(tmp_path), "install-dir", "--out", str(out), "--tmp",
                 str(out / ".tmp-x"), "--version", "v9", "--",
                 str(out / ".tmp-x" / "new"), str(out / "raw" / "u"))
    assert (r.returncode, r.stdout) == (0, "removed out/raw: a symlink tcplab did not make\n")
    assert os.listdir(victim) == []
    assert (out / "raw" / "u" / "f").read_text() == "new\n"
    assert (out / "raw" / "u" / "tcplab-version.txt").read_text() == "v9\n"
    assert os.listdir(out / ".tmp-x") == []
    for dest, why in ((str(tmp_path / "elsewhere"), "is not inside"),
                      (f"{out}/raw/../u", "not a plain path"), (f"{out}/raw//u", "not a plain path"),
                      (f"{out}/raw/u/", "not a plain path"), (str(out) + "/", "is not inside")):
        r = runstate("install-dir", "--out", str(out), "--tmp", str(out / ".tmp-x"), "--",
                     str(out / "raw" / "u"), dest)
        assert r.returncode == 1 and r.stderr.startswith("t: ") and why in r.stderr, (dest, r)
        assert r.stderr.count("\n") == 1
    assert (out / "raw" / "u" / "f").read_text() == "new\n"


def test_reap_stale_takes_dead_records_only(tmp_path):
    """A record whose lock is free is a dead run's: its temporary directory and the record go.
    One whose lock is held stays, with its directory in its locked output directory; our own
    record is not looked at; an output directory whose lock is free is cleaned too."""
    state, outputs = tmp_path / "state", tmp_path / "outputs"
    out, busy, idle = outputs / "mine", outputs / "busy", outputs / "idle"
    for d in (state, out / ".tmp-dead", busy / ".tmp-b", idle / ".tmp-i"):
        d.mkdir(parents=True)
    (state / "run.dead").write_text(f"id=d\npid=999999999\nmode=netns\nout={out}\ntmp={out}/.tmp-dead\n")
    (state / "run.live").write_text(f"id=l\npid={os.getpid()}\nmode=netns\nout={busy}\ntmp={busy}/.tmp-b\n")
    (state / "run.mine").write_text("id=m\n")
    (out / ".r.txt.ab.tmp-5").write_text("a report a dead run was writing")
    fds = [locked(state / "run.live"), locked(busy)]
    try:
        lines = rs.reap_stale(str(state), str(state / "run.mine"), str(out), str(outputs),
                              "tcplab", str(tmp_path))
    finally:
        for fd in fds:
            os.close(fd)
    assert sorted(os.listdir(state)) == ["run.live", "run.mine"]
    assert lines == ["removed outputs/mine/.tmp-dead, left by an interrupted run",
                     "removed 1 temporary file(s) in outputs/mine/ left by an interrupted run",
                     "removed 1 temporary file(s) in outputs/idle/ left by an interrupted run"]
    assert os.listdir(busy) == [".tmp-b"] and os.listdir(idle) == []
    assert os.listdir(out) == []


def test_a_dead_record_that_names_nothing_is_removed_and_said(tmp_path):
    """A run killed after its record was written but before it made a namespace or its
    temporary directory left the record alone: the reaper removes it and says so (CI's interrupt
    storm, SIGKILL to the group 0.30 s in: the next run removed it without a word, and the test
    of that next run's word failed)."""
    state, out = tmp_path / "state", tmp_path / "outputs" / "mine"
    state.mkdir()
    out.mkdir(parents=True)
    (state / "run.bare").write_text(f"id=b\npid=999999999\nmode=netns\nout={out}\n")
    (state / "run.mine").write_text("id=m\n")
    lines = rs.reap_stale(str(state), str(state / "run.mine"), str(out),
                          str(tmp_path / "outputs"), "tcplab", str(tmp_path))
    assert lines == ["removed 1 run record(s) left by an interrupted run, which had made "
                     "nothing yet"]
    assert os.listdir(state) == ["run.mine"]


def test_a_refused_install_still_says_what_it_did_first(tmp_path):
    """A planted link removed, then the install refused (SRC missing): the removal is said on
    stdout, the refusal in one line on stderr."""
    out = tmp_path / "out"
    (out / ".tmp-x").mkdir(parents=True)
    (tmp_path / "victim").mkdir()
    os.symlink(tmp_path / "victim", out / "raw")
    r = runstate("--top", str(tmp_path), "install-dir", "--out", str(out), "--tmp", str(out / ".tmp-x"),
                 "--", str(out / ".tmp-x" / "gone"), str(out / "raw" / "u"))
    assert r.returncode == 1
    assert r.stdout == "removed out/raw: a symlink tcplab did not make\n"
    assert r.stderr == (f"t: cannot put {out}/.tmp-x/gone in place as {out}/raw/u: "
                        "No such file or directory\n")


def test_a_version_and_a_state_dir_as_bash_made_them(tmp_path):
    """tcplab-version.txt holds the version's bytes as given (not UTF-8: written, not a
    traceback); the state directory is 0700 under any umask, as mkdir -m 0700 made it."""
    out = tmp_path / "out"
    (out / ".tmp-x" / "new").mkdir(parents=True)
    r = subprocess.run([b"/usr/bin/python3", b"-S", os.fsencode(RUNSTATE), b"install-dir",
                        b"--out", os.fsencode(out), b"--tmp", os.fsencode(out / ".tmp-x"),
                        b"--version", b"1.0-\xff", b"--", os.fsencode(out / ".tmp-x" / "new"),
                        os.fsencode(out / "raw")], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (out / "raw" / "tcplab-version.txt").read_bytes() == b"1.0-\xff\n"
    r = subprocess.run(["/usr/bin/python3", "-S", RUNSTATE, "state-dir"], capture_output=True,
                       text=True, timeout=60, preexec_fn=lambda: os.umask(0o277),
                       env=dict(os.environ, TCPLAB_STATE=str(tmp_path / "st")))
    assert r.returncode == 0, r.stderr
    assert os.stat(tmp_path / "st").st_mode & 0o777 == 0o700


def test_a_pid_no_kernel_has_is_a_dead_run(tmp_path):
    """A record's pid beyond any pid_t is gone (bash's kill -0 failed on it), not a crash."""
    (tmp_path / "run.x").write_text("pid=99999999999999999999\n")
    assert rs.pid_alive(str(tmp_path / "run.x")) is False
    (tmp_path / "run.y").write_text(f"pid={os.getpid()}\n")
    assert rs.pid_alive(str(tmp_path / "run.y")) is True


REAPER_SH = """
set -euo pipefail
PROG=t TOP=/ EXIT_USAGE=2 EXIT_FAIL=1
log() {{ echo "$*" >&2; }}
die() {{ local s=$1; shift; echo "t: $*" >&2; exit "$s"; }}
. {runstate_sh}
RS_STATE={state} RS_RECORD= OUT={out} OUTPUTS={outputs}
trap 'rs_cleanup $?' EXIT
rs_trap_signals rs_on_signal rs_cleanup 'INT 130 "interrupted"' 'TERM 143 "terminated"'
rs_reap_stale
echo reaped >&2
"""


def held_dead_record(tmp_path):
    """A state directory whose one record's run.sh pid is gone while its lock is still held (by
    this test), so a reaper waits up to 2 s for it; and its outputs/o."""
    state, out = tmp_path / "state", tmp_path / "outputs" / "o"
    state.mkdir(mode=0o700)
    out.mkdir(parents=True)
    (state / "run.held").write_text("id=h\npid=999999999\n")
    return state, out, locked(state / "run.held")


def until_reaping(p, state):
    """Until a reaper of STATE holds its held record open: it waits for the record's lock."""
    deadline = time.monotonic() + 20
    record = str(state / "run.held")
    while not any(record in links(pid) for pid in reapers(state)):
        assert time.monotonic() < deadline and p.poll() is None, "no reaper waits for the lock"
        time.sleep(0.01)


def links(pid):
    try:
        return [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return []


def test_a_signal_during_the_reaper_ends_it_with_the_run(tmp_path):
    """SIGTERM to the shell while its reaper waits for a record's lock: the cleanup ends the
    reaper before the run's locks go; else it would go on and could remove the next run's
    temporary directory."""
    state, out, fd = held_dead_record(tmp_path)
    err = tmp_path / "err"
    try:
        with open(err, "w") as f:     # not a pipe: a reaper left running would hold it open
            p = subprocess.Popen(["bash", "-c", REAPER_SH.format(
                runstate_sh=os.path.join(TOP, "experiments", "lib", "runstate.sh"), state=state,
                out=out, outputs=out.parent)], stderr=f)
        until_reaping(p, state)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        left = reapers(state)
    finally:
        os.close(fd)
    assert p.returncode == 143, err.read_text()
    assert not left, f"the reaper outlived the run: {left}"
    assert "reaped" not in err.read_text()


def test_a_ctrl_c_ends_the_program_without_a_traceback(tmp_path):
    state, out, fd = held_dead_record(tmp_path)
    try:
        p = subprocess.Popen(["/usr/bin/python3", "-S", RUNSTATE, "reap-stale", "--state", str(state),
                              "--out", str(out), "--outputs", str(out.parent), "--prefix", "tcplab"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        until_reaping(p, state)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        os.close(fd)
    assert p.returncode == -signal.SIGINT and err == b""


def reapers(state):
    """The pids of tcplab_runstate.py processes working on STATE."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"tcplab_runstate.py") for a in argv) and os.fsencode(str(state)) in argv:
            found.append(int(pid))
    return found


def test_a_run_this_process_holds_starts_refuses_a_second_and_cleans_up(tmp_path):
    """start_run (runstate.sh's rs_start, for `--kernel all`'s guests): the output directory
    locked, a record of the run (id, pid, mode, out, tmp), a temporary directory with the 4 MiB
    reserve; a second start on the same directory, or on one inside it, is refused in one line
    with nothing of it left; cleanup removes the temporary directory, the record, the temporary
    entries a dead run left, and frees the lock."""
    state, out = tmp_path / "state", tmp_path / "out"
    env = dict(os.environ, TCPLAB_STATE=str(state))
    s, lines = rs.start_run("t", str(out), env=env)
    assert lines == []
    rec = dict(line.split("=", 1) for line in open(s.record).read().splitlines())
    assert rec == {"id": s.run_id, "pid": str(os.getpid()), "mode": "netns", "out": str(out),
                   "tmp": s.tmp}
    assert os.path.dirname(s.tmp) == str(out) and os.path.basename(s.tmp).startswith(".tmp-")
    assert os.stat(s.reserve).st_blocks * 512 >= 4096 * 1024
    with pytest.raises(rs.Refused) as e:
        rs.start_run("t", str(out), env=env)
    assert str(e.value).startswith(f"{out} is in use by another run (run.sh pid {os.getpid()} ")
    with pytest.raises(rs.Refused) as e:
        rs.start_run("t", str(out / "inner"), env=env)
    assert f"{out}/inner is inside {out}, the output directory of a live run" in str(e.value)
    assert sorted(os.listdir(state)) == [os.path.basename(s.record)]     # no record of either
    (out / ".tmp-deadbeef").mkdir()         # a dead run's, reaped at the cleanup
    assert s.cleanup() == ["removed 1 temporary file(s) in " + str(out) + "/ left by an "
                           "interrupted run"]
    assert os.listdir(out) == ["inner"] and os.listdir(state) == []
    assert rs.is_free(str(out))
    assert s.cleanup() == []                 # once


def test_a_sigint_as_the_program_starts_is_no_traceback(tmp_path):
    """runstate.sh starts tcplab_runstate.py with SIGINT ignored (rs_py, rs_call): a Ctrl-C to
    run.sh's group while Python still imports gave a KeyboardInterrupt traceback (CI's
    double-signal storm, in `import fnmatch`).  PY here is a Python that sends itself SIGINT
    before the program's first line, as that Ctrl-C came."""
    py = tmp_path / "py"
    py.write_text("#!/bin/sh\nexec /usr/bin/python3 -c 'import os, runpy, signal, sys\n"
                  "os.kill(os.getpid(), signal.SIGINT)\nsys.argv = sys.argv[2:]\n"
                  "runpy.run_path(sys.argv[0], run_name=\"__main__\")' \"$@\"\n")
    py.chmod(0o755)
    state = tmp_path / "state"
    script = (f'. {os.path.join(TOP, "experiments", "lib", "runstate.sh")}\n'
              'rs_py state-dir\nrs_call state-dir\nprintf "%s\\n" "${RS_OUT[@]}"\n')
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PY=str(py), TCPLAB_STATE=str(state)))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == f"{state}\n{state}\n"
