"""experiments/runner/tcplab_run.py, the runner run.sh execs (docs/maintainers.md, "The runner,
step by step", step 7): what a review of the shim found against run.sh's bash, each made
certain.  A signal ignored when run.sh starts stays ignored (nohup; a script's background job);
a closed stdout is no job's stdout; a run without root stopped by a signal to its group ends
with 128+N and leaves nothing.  The runner's other behaviour is every test of run.sh."""
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import TOP

RUN = os.path.join(TOP, "run.sh")


def env_for(bindir, state, **more):
    return dict(os.environ, TCPLAB_STATE=state,
                TCPLAB_BUILD=os.path.relpath(os.path.dirname(bindir), TOP), **more)


def signal_when_started(argv, sig, env, group=False, **kw):
    """Start ARGV (run.sh ... p01-timeout, about 5 s), send SIG once its unit has started (its
    "started in namespace" line), read it to its end → (status, stderr)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True, **kw)
    got, sent = [], False
    try:
        for line in p.stderr:
            got.append(line)
            if not sent and "p01-timeout: started in namespace" in line:
                (os.killpg if group else os.kill)(p.pid, sig)
                sent = True
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert sent, "".join(got)[-2000:]
    return p.returncode, "".join(got)


@pytest.mark.netns
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT],
                         ids=["SIGHUP-nohup", "SIGINT-background", "SIGQUIT-background"])
def test_a_signal_ignored_at_the_start_stays_ignored(tmp_path, bindir, sig):
    """nohup ignores SIGHUP, and bash starts a script's background job with SIGINT and SIGQUIT
    ignored: run.sh's bash could not trap them, and the run went on to its end.  The runner
    first caught them all and stopped the run (the review: `nohup ./run.sh`, then SIGHUP: exit
    129, no reports)."""
    name = signal.Signals(sig).name[3:]
    out = tmp_path / "out"
    rc, err = signal_when_started(["env", f"--ignore-signal={name}", RUN, "--out", str(out),
                                   "p01-timeout"], sig, env_for(bindir, str(tmp_path / "state")))
    assert rc == 0, err[-2000:]
    assert "stopping every unit" not in err and "finished in" in err, err[-2000:]
    assert (out / "p01-timeout.json").is_file()


@pytest.mark.netns
def test_a_closed_stdout_is_no_jobs_stdout(tmp_path, bindir):
    """run.sh with its stdout closed: the output directory's lock took descriptor 1 and the job
    inherited it as its stdout ("Fatal Python error: init_sys_streams ... Is a directory").
    The runner opens /dev/null there first; the run ends as it would, its reports written."""
    out = tmp_path / "out"
    r = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', RUN, "--out", str(out), "p01-machine"],
                       capture_output=True, text=True, timeout=60,
                       env=env_for(bindir, str(tmp_path / "state")))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (out / "p01-machine.json").is_file()


@pytest.fixture
def nobody_dir():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become an unprivileged user")
    if subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                       "unshare", "-Urn", "true"], capture_output=True).returncode != 0:
        pytest.skip("no unprivileged user namespaces here")
    pw = pwd.getpwnam("nobody")
    d = tempfile.mkdtemp(prefix="tcplab-runner-")
    os.chown(d, pw.pw_uid, pw.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.netns
@pytest.mark.parametrize("sig", [signal.SIGQUIT, signal.SIGHUP],
                         ids=[s.name for s in (signal.SIGQUIT, signal.SIGHUP)])
def test_a_run_without_root_stopped_by_its_group_ends_128_n_and_leaves_nothing(nobody_dir,
                                                                                 bindir, sig):
    """Without root the run is root of a user namespace under `unshare`.  SIGQUIT (or SIGHUP)
    to the whole group killed unshare, and with it (--kill-child) the run before its cleanup:
    exit 253 (a -3 passed on as it was), its record and temporary directory left (the review;
    run.sh's bash left them too).  unshare now ignores them, the run gets them and cleans up."""
    out, state = os.path.join(nobody_dir, "out"), os.path.join(nobody_dir, "state")
    env = env_for(bindir, state, HOME=nobody_dir)
    env.pop("XDG_RUNTIME_DIR", None)
    rc, err = signal_when_started(["setpriv", "--reuid=nobody", "--regid=nogroup",
                                   "--clear-groups", RUN, "--out", out, "p01-timeout"],
                                  sig, env, group=True)
    assert rc == 128 + sig, err[-2000:]
    assert "Traceback" not in err and "stopping every unit" in err, err[-2000:]
    left = glob.glob(os.path.join(out, ".tmp-*")) + glob.glob(os.path.join(state, "run.*"))
    assert left == [], (left, err[-2000:])


@pytest.mark.netns
def test_a_failed_make_deps_is_said_and_leaves_nothing(tmp_path, bindir):
    """As root with a package missing, the run installs it (`make deps`) first.  Where that
    fails (no network: a class's PC), the run ends there with one line saying so, after make's
    own lines, and leaves nothing; it used to go on to a build bound to fail."""
    if os.geteuid() != 0:
        pytest.skip("make deps runs only as root")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pkg-config").write_text("#!/bin/sh\nexit 1\n")       # every library "missing"
    (fake / "make").write_text('#!/bin/sh\ncase " $* " in *" deps "*) '
                               'echo "make: apt-get: no network" >&2; exit 2 ;; esac\n'
                               'exec /usr/bin/make "$@"\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    out, state = tmp_path / "out", tmp_path / "state"
    r = subprocess.run([RUN, "--out", str(out), "p01-machine"], capture_output=True, text=True,
                       timeout=60, env=env_for(bindir, str(state),
                                               PATH=f"{fake}:{os.environ['PATH']}"))
    lines = r.stderr.splitlines()
    assert r.returncode == 1, r.stderr
    assert lines[-1] == ("run.sh: make deps failed (above): libmnl-dev libpcap-dev "
                         "libcurl4-openssl-dev libbpf-dev could not be installed"), r.stderr
    assert lines[-2] == "make: apt-get: no network", r.stderr
    assert lines[-3].endswith("[run] installing missing packages: libmnl-dev libpcap-dev "
                              "libcurl4-openssl-dev libbpf-dev"), r.stderr
    assert "Traceback" not in r.stderr
    assert glob.glob(str(out / ".tmp-*")) + glob.glob(str(state / "run.*")) == []
