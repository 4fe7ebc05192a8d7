"""./run.sh --quick as an unprivileged user (nobody, through setpriv), writing to a directory
that user owns.  Where the system allows unprivileged user namespaces, every unit runs in one
(`unshare -rn`) and its counter deltas are exactly its own; where it does not, run.sh skips
(exit 4) with one line.  Never a traceback, never half a run, nothing left running."""
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
    assert "unprivileged user+network namespace" in r.stderr
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


def test_killed_run_reaped_without_root(user_dir, bindir):
    """SIGKILL to an unprivileged run.sh while its units run: they live on in their user
    namespaces; the next run (its lock is free, so the run is provably gone) stops them, says
    so, and leaves nothing.  A regression guard: the reaper no longer works by pid and tag."""
    import signal
    import time
    need_userns()
    out = os.path.join(user_dir, "out")
    tag = "k" + str(os.getpid())
    env = user_env(user_dir, bindir, tag)
    p = subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--clear-groups",
                          os.path.join(TOP, "run.sh"), "--quick", "--out", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stderr:
        if "p01-synretry: started" in line:
            break
    p.kill()
    p.wait(timeout=10)
    p.stderr.close()
    assert tagged(tag), "nothing was left running: the test proves nothing"
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out, "p01-machine"], capture_output=True,
                text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "process(es) left by an interrupted run" in r.stderr, r.stderr[-2000:]
    end = time.monotonic() + 3
    while tagged(tag) and time.monotonic() < end:
        time.sleep(0.02)
    assert tagged(tag) == []
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
    """Without root, a unit that needs it (root=yes, a wire, netns 2) is said skipped when a
    set chose it, and the others run; named on the command line, it is refused (exit 4)."""
    need_userns()
    exp = os.path.join(user_dir, "exp")
    shutil.copytree(os.path.join(TOP, "experiments", "lib"), os.path.join(exp, "lib"))
    with open(os.path.join(exp, "units"), "w") as f:
        f.write("t-lo   - default run no 1 30 no  1    no\n"
                "t-wire - default run no 1 30 yes wire no\n")
    for name in ("t-lo", "t-wire"):
        with open(lab_proc.exp_file(exp, name, f"{name}.sh"), "w") as f:
            f.write('. "$(dirname "$0")/../lib/collect.sh"\ntl_init "$1"\necho ran > "$RAW/ran.txt"\n')
    for root, dirs, files in os.walk(exp):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755)
    env = dict(user_env(user_dir, bindir, "s" + str(os.getpid())), TCPLAB_EXPERIMENTS=exp)
    out = os.path.join(user_dir, "out")
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out], capture_output=True, text=True,
                env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "t-wire: skipped: not root" in r.stderr
    assert "1 unit(s) ran, 0 failed, 1 skipped (t-wire: needs root" in r.stderr
    assert os.path.exists(os.path.join(out, "raw", "t-lo", "ran.txt"))
    assert not os.path.exists(os.path.join(out, "raw", "t-wire"))
    r = as_user([os.path.join(TOP, "run.sh"), "--out", out, "t-wire"], capture_output=True,
                text=True, env=env, timeout=120)
    assert r.returncode == 4 and r.stderr.count("\n") == 1 and "t-wire needs root" in r.stderr, r.stderr
