"""Shared and hostile output directories (issue 14, item 4): one run at a time per --out (a
second refuses with one line, as apt does when its lock is taken); as root, no writing into a
directory another user owns unless --allow-foreign-out; never through a symlink tcplab did not
make (a planted raw, .tmp-*); the reaper never kills by an environment tag alone and deletes
only the namespaces of runs whose lock is free.  docs/reliability.md."""
import fcntl
import glob
import json
import os
import pwd
import shutil
import subprocess
import time

import pytest

from conftest import TOP
from lab_proc import reaped

pytestmark = pytest.mark.netns
RUN = os.path.join(TOP, "run.sh")
NETNS_SH = os.path.join(TOP, "experiments", "lib", "netns.sh")
RUNSTATE = os.path.join(TOP, "experiments", "lib", "runstate.sh")
NOBODY = pwd.getpwnam("nobody")
STATE = "/run/tcplab"


def run(args, timeout=120, **kw):
    return subprocess.run([RUN] + args, capture_output=True, text=True, timeout=timeout, **kw)


def nobody_dir(path):
    os.makedirs(path, exist_ok=True)
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    return path


# ---- the table: bad output directories, refused before anything runs -------------------------
# (name, setup(tmp) -> argv after run.sh, exit status, a word the one stderr line must hold)

def _empty(tmp):
    return ["--out", "", "p01-machine"]


def _foreign(tmp):
    return ["--out", nobody_dir(os.path.join(tmp, "theirs")), "p01-machine"]


def _foreign_new_inside(tmp):
    return ["--out", nobody_dir(os.path.join(tmp, "theirs")) + "/", "p01-machine"]


def _foreign_via_link(tmp):
    d = nobody_dir(os.path.join(tmp, "theirs"))
    os.symlink(d, os.path.join(tmp, "link"))
    return ["--out", os.path.join(tmp, "link"), "p01-machine"]


def _foreign_readonly(tmp):
    d = nobody_dir(os.path.join(tmp, "theirs"))
    os.chmod(d, 0o555)
    return ["--out", d, "p01-machine"]


def _locked(tmp):
    d = os.path.join(tmp, "busy")
    os.makedirs(d)
    fd = os.open(d, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # released when this test's process ends, or by the GC
    _locked.fds.append(fd)
    return ["--out", d, "p01-machine"]


_locked.fds = []

CASES = [
    ("out-empty", _empty, 2, "--out"),
    ("out-foreign", _foreign, 2, "--allow-foreign-out"),
    ("out-foreign-slash", _foreign_new_inside, 2, "--allow-foreign-out"),
    ("out-foreign-symlink", _foreign_via_link, 2, "--allow-foreign-out"),
    ("out-foreign-readonly", _foreign_readonly, 2, "--allow-foreign-out"),
    ("out-locked", _locked, 1, "in use by another run"),
]


@pytest.mark.parametrize("name,setup,status,word", CASES, ids=[c[0] for c in CASES])
def test_bad_output_directory(tmp_path, name, setup, status, word):
    argv = setup(str(tmp_path))
    # refused before any unit ran: one stderr line and nothing written (below); no time limit
    # but the hang guard, since a loaded CI took 5-7 s to start run.sh and refuse
    r = run(argv, timeout=60)
    try:
        assert r.returncode == status, f"{name}: exit {r.returncode}: {r.stderr}"
        assert r.stderr.count("\n") == 1 and word in r.stderr, f"{name}: {r.stderr!r}"
        assert "Traceback" not in r.stderr
        written = [p for p in glob.glob(str(tmp_path / "**" / "*"), recursive=True)
                   if p.endswith((".json", ".txt")) or "/raw" in p or ".tmp-" in p]
        assert written == [], f"{name}: wrote {written}"
    finally:
        while _locked.fds:
            os.close(_locked.fds.pop())


def test_foreign_out_allowed_when_asked(tmp_path):
    d = nobody_dir(str(tmp_path / "theirs"))
    r = run(["--allow-foreign-out", "--out", d, "p01-machine"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.path.isfile(os.path.join(d, "p01-machine.json"))


# ---- one run per output directory ------------------------------------------------------------

def test_same_out_second_run_refused(tmp_path):
    out = str(tmp_path / "out")
    env = dict(os.environ, TL_QUICK="1")
    a = subprocess.Popen([RUN, "--out", out, "p01-synretry"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not glob.glob(os.path.join(out, ".tmp-*")) and time.monotonic() < end:
            time.sleep(0.02)
        b = run(["--out", out, "p01-synretry"], env=env)
        _, err_a = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()
    assert a.returncode == 0, err_a[-2000:]
    assert b.returncode == 1, b.stderr[-2000:]
    assert b.stderr.count("\n") == 1 and "in use by another run" in b.stderr, b.stderr
    raw = os.path.join(out, "raw", "p01-synretry")
    assert not os.path.exists(os.path.join(raw, "p01-synretry")), "nested raw directory"
    with open(os.path.join(out, "p01-synretry.json")) as f:
        assert json.load(f)["errno"] == "ETIMEDOUT"


# ---- planted symlinks ------------------------------------------------------------------------

@pytest.mark.parametrize("owner", ["root", "nobody"])
def test_planted_raw_symlink_not_followed(tmp_path, owner):
    victim = tmp_path / "victim"
    (victim / "p01-machine").mkdir(parents=True)
    (victim / "p01-machine" / "keep").write_text("not tcplab's\n")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "raw")
    args = ["--out", str(out), "p01-machine"]
    if owner == "nobody":
        nobody_dir(str(out))
        args = ["--allow-foreign-out"] + args
    r = run(args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (victim / "p01-machine" / "keep").read_text() == "not tcplab's\n"
    assert sorted(os.listdir(victim)) == ["p01-machine"]
    assert not (out / "raw").is_symlink() and (out / "raw" / "p01-machine").is_dir()


def test_planted_tmp_symlinks_not_followed(tmp_path):
    """Links named .tmp-<pid> for the next few thousand pids (what run.sh's temporary directory
    was called): none may be written through."""
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    last = max(int(p) for p in os.listdir("/proc") if p.isdigit())
    for pid in range(last, last + 3000):
        os.symlink(victim, out / f".tmp-{pid}")
    # 3,000 links to remove, by one rm (a fork each took 129 s among make test's six workers)
    r = run(["--out", str(out), "p01-machine"], timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.listdir(victim) == []
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def test_rs_install_dir_replaces_links_and_directories(tmp_path):
    """rs_install_dir SRC DEST: DEST replaced whole, never moved into, never written through."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    (out / ".tmp-x" / "new").mkdir(parents=True)
    (out / ".tmp-x" / "new" / "f").write_text("new\n")
    (out / "raw").mkdir()
    victim.mkdir()
    os.symlink(victim, out / "raw" / "u")  # a link where DEST goes
    script = (f'PROG=t; TOP=/; . {RUNSTATE}; log() {{ :; }}; OUT={out}; TMPDIR_RUN={out}/.tmp-x; '
              f'rs_install_dir "$TMPDIR_RUN/new" "$OUT/raw/u"')
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.listdir(victim) == []
    assert not (out / "raw" / "u").is_symlink()
    assert (out / "raw" / "u" / "f").read_text() == "new\n"
    assert not (out / "raw" / "u" / "new").exists()


# ---- the reaper ------------------------------------------------------------------------------

def test_stale_tag_alone_is_not_killed(tmp_path):
    """A host process whose environment carries a tag of a run that is gone (old and new
    names) is not tcplab's to kill."""
    env = dict(os.environ, TL_RUN_PID="999999", TL_RUN_ID="00000000deadbeef")
    with reaped(subprocess.Popen(["sleep", "60"], env=env)) as p:
        r = run(["--out", str(tmp_path / "out"), "p01-machine"])
        assert r.returncode == 0, r.stderr[-2000:]
        assert p.poll() is None, "run.sh killed a process by its environment tag alone"


def make_record(name, lines):
    state = os.environ.get("TCPLAB_STATE", STATE)     # conftest.own_state_dir
    os.makedirs(state, mode=0o700, exist_ok=True)
    path = os.path.join(state, name)
    with open(path, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    return path


def test_reaper_deletes_only_dead_runs_namespaces(tmp_path):
    """A record whose lock is free (its run is gone): its namespace and what runs in it are
    removed.  A record whose lock is held (a live run, maybe in another PID namespace): its
    namespace is left alone, although no process of this PID namespace owns it."""
    tag = os.urandom(4).hex()
    dead_ns, live_ns = f"tcplab-999998-{tag}-dead", f"tcplab-999999-{tag}-live"
    for ns in (dead_ns, live_ns):
        subprocess.run([NETNS_SH, "create", ns], check=True, capture_output=True)
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "60"])
             for ns in (dead_ns, live_ns)]
    dead = make_record(f"run.{tag}dead", [f"id={tag}dead", f"ns={dead_ns}"])
    live = make_record(f"run.{tag}live", [f"id={tag}live", f"ns={live_ns}"])
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = run(["--out", str(tmp_path / "out"), "p01-machine"])
        assert r.returncode == 0, r.stderr[-2000:]
        assert "namespace(s) left by an interrupted run" in r.stderr, r.stderr
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert dead_ns not in names and not os.path.exists(dead)
        assert live_ns in names and os.path.exists(live)
        procs[0].wait(timeout=5)
        assert procs[1].poll() is None, "a live run's process was killed"
    finally:
        os.close(fd)
        for p in procs:
            p.kill()
            p.wait()
        for ns in (dead_ns, live_ns):
            subprocess.run([NETNS_SH, "delete", ns], capture_output=True)
        for path in (dead, live):
            if os.path.exists(path):
                os.unlink(path)


def test_a_killed_runs_lock_released_late_is_still_reaped(tmp_path):
    """After a SIGKILL, run.sh's lock holder dies of its parent-death signal a moment later, so
    the next run may find the lock of a run that is gone still taken.  Its run.sh pid no longer
    exists: the reaper waits (at most 2 s) for the lock, then reaps (seen in the interrupt test
    under load)."""
    tag = os.urandom(4).hex()
    ns = f"tcplab-999997-{tag}-late"
    subprocess.run([NETNS_SH, "create", ns], check=True, capture_output=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    rec = make_record(f"run.{tag}late", [f"id={tag}late", f"pid={gone.pid}", f"ns={ns}"])
    holder = subprocess.Popen(["flock", "-x", rec, "sh", "-c", "echo held; sleep 0.7"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = run(["--out", str(tmp_path / "out"), "p01-machine"])
        assert r.returncode == 0, r.stderr[-2000:]
        assert "removed 1 namespace(s) left by an interrupted run" in r.stderr, r.stderr
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert ns not in names and not os.path.exists(rec)
    finally:
        holder.wait(timeout=5)
        subprocess.run([NETNS_SH, "delete", ns], capture_output=True)
        if os.path.exists(rec):
            os.unlink(rec)


def test_stale_vm_dirs(tmp_path):
    """rs_reap_vm_dirs removes a vm.sh work directory only when it is marked and its lock is
    free; one still locked, one unmarked, a symlink and another user's are left."""
    base = tmp_path
    for d in ("dead", "live", "unmarked", "theirs"):
        (base / f"tcplab-vm.{d}").mkdir()
        (base / f"tcplab-vm.{d}" / "initrd.gz").write_bytes(b"\0" * 1024)
    for d in ("dead", "live", "theirs"):
        (base / f"tcplab-vm.{d}" / ".locked").touch()
    os.chown(base / "tcplab-vm.theirs", NOBODY.pw_uid, NOBODY.pw_gid)
    target = base / "elsewhere"
    target.mkdir()
    (target / ".locked").touch()
    os.symlink(target, base / "tcplab-vm.link")
    fd = os.open(base / "tcplab-vm.live", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = subprocess.run(["bash", "-c", f'PROG=t; . {RUNSTATE}; rs_reap_vm_dirs {base}'],
                           capture_output=True, text=True)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(base)) == ["elsewhere", "tcplab-vm.link", "tcplab-vm.live",
                                        "tcplab-vm.theirs", "tcplab-vm.unmarked"]
    assert "removed 1 VM work" in r.stderr
