"""./run.sh as an unprivileged user (nobody, through setpriv), writing to a directory that user
owns.  Where the system allows unprivileged user namespaces, the run goes on as root of one of
its own (`unshare -Urnmp`: docs/design.md, "Without root"): every unit gets its own network
namespaces, the wire units their veth pair, and counter deltas are exactly the unit's own;
where it does not, run.sh skips (exit 4) with one line.  A unit that needs real root (root=yes)
is skipped with its reason.  Never a traceback, never half a run, nothing left running, even
after a SIGKILL."""
import glob
import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from conftest import TOP
import lab_proc

USER, GROUP = "nobody", "nogroup"
N = 200
TAG = "TL_UNPRIV_TAG"


def as_user(argv, **kw):
    return subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--clear-groups",
                           *argv], **kw)


@pytest.fixture
def user_dir(monkeypatch):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become an unprivileged user")
    pw = pwd.getpwnam(USER)
    d = tempfile.mkdtemp(prefix="tcplab-unpriv-")
    os.chown(d, pw.pw_uid, pw.pw_gid)
    # the user's runs keep their records in a state directory the user owns (conftest's
    # own_state_dir is root's), made by run.sh, this test's alone
    monkeypatch.setenv("TCPLAB_STATE", os.path.join(d, "state"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tagged(tag):
    return lab_proc.tagged(TAG, tag)


def test_quick_run_without_root(user_dir, bindir):
    out = os.path.join(user_dir, "out")
    env = dict(os.environ, TL_CONNECTS=str(N), HOME=user_dir, **{TAG: "u" + str(os.getpid())},
               TCPLAB_BUILD=os.path.relpath(os.path.dirname(bindir), TOP))
    r = as_user([os.path.join(TOP, "run.sh"), "--quick", "--out", out], capture_output=True,
                text=True, env=env, timeout=180)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert tagged(env[TAG]) == [], "processes of the run are still running"
    userns = as_user(["unshare", "-rn", "true"], capture_output=True).returncode == 0
    if not userns:
        assert r.returncode == 4, r.stderr[-3000:]
        assert r.stderr.count("\n") == 1 and "user namespaces" in r.stderr
        pytest.skip("unprivileged user namespaces are not allowed here: run.sh skipped cleanly")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "not root: running as root of an unprivileged user namespace" in r.stderr
    reports = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*.json")))
    assert reports == ["p01-connect-time.json", "p01-machine.json", "p01-strace.json",
                       "p01-synretry.json", "p01-timeout.json"]
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    with open(os.path.join(out, "p01-connect-time.json")) as f:
        refused = json.load(f)["parts"]["refused"]
    # exact counts prove the namespace is the unit's own, not the machine's
    c = refused["counters"]
    assert c["TcpAttemptFails"] == N and c["TcpOutRsts"] == N and c["TcpActiveOpens"] == N
    with open(os.path.join(out, "p01-synretry.json")) as f:
        syn = json.load(f)
    assert syn["errno"] == "ETIMEDOUT"
    assert syn["counters"]["TcpExtListenOverflows"] == len(syn["retransmits"]) + 1
    for path in glob.glob(os.path.join(out, "**"), recursive=True):
        assert os.stat(path).st_uid == pwd.getpwnam(USER).pw_uid, path


def user_env(user_dir, bindir, tag):
    return dict(os.environ, TL_CONNECTS=str(N), HOME=user_dir, **{TAG: tag},
                TCPLAB_BUILD=os.path.relpath(os.path.dirname(bindir), TOP),
                TCPLAB_STATE=os.path.join(user_dir, "state"))   # the user's own, this test's


def need_userns():
    if as_user(["unshare", "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged user namespaces are not allowed here")


def gone(tag, within=5.0):
    """Whether every process carrying tag is gone within the bound (polled)."""
    import time
    end = time.monotonic() + within
    while tagged(tag) and time.monotonic() < end:
        time.sleep(0.02)
    return tagged(tag) == []


def start_as_user(argv, env):
    """argv as the user, in a process group of its own (a terminal's Ctrl-C is killpg)."""
    return subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--clear-groups",
                             *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def read_until(p, text):
    """stderr lines of p up to the first containing text; the lines read."""
    seen = []
    for line in p.stderr:
        seen.append(line)
        if text in line:
            break
    return "".join(seen)


def test_killed_run_leaves_nothing_without_root(user_dir, bindir):
    """SIGKILL to an unprivileged run.sh while its units run: the run is PID 1 of its own PID
    namespace inside its user namespace, so the kernel ends every process of it at once, and
    the namespaces with them; the next run removes the temporary directory the killed one had
    no chance to.  (Before: the units lived on until the next run stopped them.)"""
    need_userns()
    out = os.path.join(user_dir, "out")
    tag = "k" + str(os.getpid())
    env = user_env(user_dir, bindir, tag)
    p = start_as_user([os.path.join(TOP, "run.sh"), "--quick", "--out", out], env)
    said = read_until(p, "p01-synretry: started")
    assert "p01-synretry: started" in said, said[-2000:]
    assert tagged(tag), "nothing was running: the test proves nothing"
    p.kill()
    p.wait(timeout=10)
    p.stderr.close()
    assert gone(tag), "processes of the killed run are still running"
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out, "p01-machine"], capture_output=True,
                text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "process(es) left by an interrupted run" not in r.stderr, r.stderr[-2000:]
    assert tagged(tag) == []
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def own_experiments(user_dir, units, scripts):
    """A TCPLAB_EXPERIMENTS directory of the test's own: experiments/lib, the table units and
    each unit's collect script (a body after collect.sh's tl_init), all readable by the user."""
    exp = str(lab_proc.experiments(user_dir, units, {(name, f"{name}.sh"): lab_proc.COLLECT_INIT + body
                                                     for name, body in scripts.items()}))
    for root, dirs, files in os.walk(exp):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755)
    return exp


@pytest.mark.parametrize("sig,target,status", [("SIGINT", "group", 130), ("SIGTERM", "pid", 143)],
                         ids=["SIGINT-group", "SIGTERM-pid"])
def test_interrupted_wire_unit_leaves_nothing_without_root(user_dir, bindir, sig, target, status):
    """SIGINT to an unprivileged run.sh's process group (Ctrl-C), or SIGTERM to run.sh alone
    (passed on to the run in its user namespace), while a wire unit runs, a process in each of
    its namespaces: the run stops the unit and cleans up as root's run does: its exit status,
    no process, no temporary file."""
    import signal
    need_userns()
    exp = own_experiments(user_dir, "t-wire - default run no 1 60 no wire no\n", {
        "t-wire": 'ip netns exec "$TL_NS_SERVER" sleep 60 &\nsleep 60 &\n: > "$RAW/up"\nwait\n'})
    out = os.path.join(user_dir, "out")
    tag = "i" + sig + str(os.getpid())
    p = start_as_user([os.path.join(TOP, "run.sh"), "--out", out, "t-wire"],
                      dict(user_env(user_dir, bindir, tag), TCPLAB_EXPERIMENTS=exp))
    import time
    end = time.monotonic() + 60
    while not glob.glob(os.path.join(out, ".tmp-*", "raw", "t-wire", "up")):
        assert p.poll() is None and time.monotonic() < end, "the unit never started"
        time.sleep(0.02)
    assert len(tagged(tag)) >= 2, "nothing was running: the test proves nothing"
    (os.killpg if target == "group" else os.kill)(p.pid, getattr(signal, sig))
    said = p.stderr.read()
    assert p.wait(timeout=30) == status, said[-2000:]
    assert "Traceback" not in said
    assert gone(tag), "processes of the interrupted run are still running"
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def test_stale_tag_alone_is_not_killed_without_root(user_dir, bindir):
    """A process of the same user carrying a stale run tag, outside any namespace tcplab made, is
    not tcplab's to kill (the old reaper killed it)."""
    need_userns()
    env = user_env(user_dir, bindir, "s" + str(os.getpid()))
    victim = subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={GROUP}",
                               "--clear-groups", "sleep", "60"],
                              env=dict(env, TL_RUN_PID="999999", TL_RUN_ID="00000000deadbeef"))
    with lab_proc.reaped(victim):
        r = as_user([os.path.join(TOP, "run.sh"), "--out", os.path.join(user_dir, "out"),
                     "p01-machine"], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert victim.poll() is None, "run.sh killed a process by its environment tag alone"


def test_units_that_need_root_are_skipped_by_a_set_and_refused_by_name(user_dir, bindir):
    """Without root, a unit that needs it (root=yes) is said skipped, with the reason its
    "# root yes:" line gives, when a set chose it, and the others run, a wire unit too (its
    server namespace there); named on the command line, it is refused (exit 4)."""
    need_userns()
    body = ('echo ran > "$RAW/ran.txt"\n'
            'ip netns exec "${TL_NS_SERVER:-none}" true && echo server > "$RAW/server.txt" || :\n')
    exp = own_experiments(user_dir, "t-lo   - default run no 1 30 no  1    no\n"
                                    "t-wire - default run no 1 30 no  wire no\n"
                                    "# root yes: t-root: it reads the kernel log\n"
                                    "t-root - default run no 1 30 yes wire no\n",
                          {name: body for name in ("t-lo", "t-wire", "t-root")})
    env = dict(user_env(user_dir, bindir, "s" + str(os.getpid())), TCPLAB_EXPERIMENTS=exp)
    out = os.path.join(user_dir, "out")
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out], capture_output=True, text=True,
                env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "t-root: skipped: not root, and it needs root (root=yes in experiments/units: it reads the kernel log)" in r.stderr
    assert "2 unit(s) ran, 0 failed, 1 skipped (t-root: needs root (root=yes in experiments/units: it reads the kernel log))" in r.stderr
    assert os.path.exists(os.path.join(out, "raw", "t-lo", "ran.txt"))
    assert os.path.exists(os.path.join(out, "raw", "t-wire", "server.txt"))
    assert not os.path.exists(os.path.join(out, "raw", "t-root"))
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out, "t-root"], capture_output=True,
                text=True, env=env, timeout=120)
    assert r.returncode == 4 and r.stderr.count("\n") == 1 and "t-root needs root" in r.stderr, r.stderr


@pytest.mark.slow      # a second live p02 run: make check (CI's check-rest)
def test_p02_runs_without_root(user_dir, bindir):
    """p02-accept-queue as root of a user namespace: every kernel fact its live test asserts, and,
    where kernel.dmesg_restrict keeps /dev/kmsg from that root, the flood parts say in one line
    that the kernel log was not read, and why."""
    need_userns()
    from test_p02_accept_queue import NAME as P02, check_facts, load
    out = os.path.join(user_dir, "out")
    env = user_env(user_dir, bindir, "u" + str(os.getpid()))
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out, P02], capture_output=True, text=True,
                env=env, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "not root: running as root of an unprivileged user namespace" in r.stderr
    obj = load(out)
    check_facts(obj)
    with open("/proc/sys/kernel/dmesg_restrict") as f:
        restrict = int(f.read())
    assert obj["kmsg_open"]["dmesg_restrict"] == restrict
    if restrict:
        assert obj["kmsg_open"]["ret"] == -1 and obj["kmsg_open"]["errno"] == "EPERM"
        with open(os.path.join(out, P02 + ".txt")) as f:
            assert f.read().count("kernel log: not read: this run could not open /dev/kmsg") == 3
    for path in glob.glob(os.path.join(out, "**"), recursive=True):
        assert os.stat(path).st_uid == pwd.getpwnam(USER).pw_uid, path


@pytest.fixture
def new_user():
    """An ordinary user made for the test (useradd: no home, no login shell, its own group), and
    a directory it owns; both removed after."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("needs root, useradd and setpriv to make an ordinary user")
    name = f"tlstu{os.getpid()}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group",
                    name], check=True, capture_output=True, timeout=30)
    d = tempfile.mkdtemp(prefix="tcplab-student-")
    try:
        pw = pwd.getpwnam(name)
        os.chown(d, pw.pw_uid, pw.pw_gid)
        yield name, d
    finally:
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True, timeout=30)


@pytest.mark.slow      # every quick unit, about 4 minutes: make check (CI's check-rest)
def test_all_quick_as_a_new_ordinary_user(new_user, bindir):
    """What a student's account does: `./run.sh --all --quick` as an ordinary user made for the
    test.  Every unit of the default set and the labs that --quick keeps either reports, or is
    skipped with its reason: root=yes units with their `# root yes:` line, nothing else.  Nothing
    is left running, no temporary file is left, and every file written is the user's."""
    import tcplab
    name, d = new_user
    argv = ["setpriv", f"--reuid={name}", f"--regid={name}", "--clear-groups"]
    if subprocess.run(argv + ["unshare", "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged user namespaces are not allowed here")
    tag = "a" + str(os.getpid())
    env = dict(os.environ, TL_CONNECTS=str(N), HOME=d, **{TAG: tag},
               TCPLAB_BUILD=os.path.relpath(os.path.dirname(bindir), TOP),
               TCPLAB_STATE=os.path.join(d, "state"))
    out = os.path.join(d, "out")
    r = subprocess.run(argv + [os.path.join(TOP, "run.sh"), "--all", "--quick", "--out", out],
                       capture_output=True, text=True, env=env, timeout=900)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    assert tagged(tag) == [], "processes of the run are still running"
    units = [u for u in tcplab.read_units() if u["set"] in ("default", "labs")
             and u["quick"] == "run"]
    need_root = {u["unit"] for u in units if u["root"]}
    last = r.stderr.strip().splitlines()[-1]
    for u in need_root:
        assert f"{u}: needs root (root=yes in experiments/units: " in last, (u, last)
    ran = {u["unit"] for u in units} - need_root
    reports = {os.path.basename(p)[:-len(".json")] for p in glob.glob(os.path.join(out, "*.json"))}
    # a report may cover several units (p08-tls, p09-pools...): each unit's raw directory
    raws = set(os.listdir(os.path.join(out, "raw")))
    assert ran <= raws, sorted(ran - raws)
    assert reports, "no report written"
    assert f"{len(ran)} unit(s) ran, 0 failed, {len(need_root)} skipped (" in last, last
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    uid = pwd.getpwnam(name).pw_uid
    for path in glob.glob(os.path.join(out, "**"), recursive=True):
        assert os.stat(path).st_uid == uid, path
