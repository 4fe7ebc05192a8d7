"""run.sh's units: the unit table (experiments/units) is the one place that says what a unit is,
every unit is bounded by its limit_s, and a unit whose probe or fixture died or was stopped fails
instead of reporting success (issues 8 and 14).  Tests that run units need root and netns; the
table and a new experiment are tried in a copy of experiments/ through TCPLAB_EXPERIMENTS."""
import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import tcplab
import lab_proc
from conftest import TOP

RUN = os.path.join(TOP, "run.sh")
TAG = "TL_RUN_UNITS_TAG"


def copy_experiments(tmp_path):
    """A copy of experiments/ (collect scripts, reports, lib/, the table) for TCPLAB_EXPERIMENTS."""
    exp = tmp_path / "exp"
    shutil.copytree(os.path.join(TOP, "experiments"), exp,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return exp


def set_column(exp, unit, column, value):
    """Rewrite one column of one unit's line in exp/units."""
    idx = tcplab.UNIT_COLUMNS.index(column)
    lines = (exp / "units").read_text().splitlines()
    for i, line in enumerate(lines):
        w = line.split()
        if w and w[0] == unit:
            w[idx] = str(value)
            lines[i] = " ".join(w)
            break
    else:
        raise AssertionError(f"{unit} not in the table")
    (exp / "units").write_text("\n".join(lines) + "\n")


def tagged(tag, comm=None):
    """Pids whose environment carries TAG=tag (and whose comm is comm, when given)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{p}/comm") as f:
                c = f.read().strip()
        except OSError:
            continue
        if comm is None or c == comm:
            found.append(int(p))
    return found


def parent_of(pid):
    """PPid of /proc/PID/status, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
    except (OSError, StopIteration, ValueError):
        return None


def runner_of(pid):
    """run.sh (PID) and its children, its host job (tcplab_host.py) among them: a tee whose
    parent is one of these copies a unit's stderr; the unit's own tees are its collect
    script's children."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {pid, *(int(x) for x in f.read().split())}
    except OSError:
        return {pid}


def wait_for(pred, timeout, what):
    """Poll pred() until it returns something true; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"no {what} after {timeout} s")


class Run:
    """./run.sh in the background, with a tag in its environment that every unit inherits."""

    def __init__(self, args, env=None, timeout=90):
        self.tag = secrets.token_hex(6)
        self.timeout = timeout
        e = dict(os.environ, **{TAG: self.tag}, **(env or {}))
        # stderr into a file, so that a wait that fails can say what run.sh had printed
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen([RUN, *args], stdout=subprocess.DEVNULL, stderr=self.err,
                                  text=True, env=e)

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def pid_of(self, comm, after=None, timeout=60):
        """The pid of the unit's program comm, once it (and after, when given) is running.
        Fails at once if run.sh ended first, and either way with what run.sh printed (CI's
        check-rest, loaded by guests: two of these waits ran out at 30 s, saying nothing)."""
        def find():
            if self.p.poll() is not None:
                raise AssertionError(f"run.sh exited {self.p.returncode} before {comm} was seen "
                                     f"in the unit:\n{self.stderr()[-3000:]}")
            if after and not tagged(self.tag, after):
                return None
            # not the runner's own children: its copier of a unit's stderr is a tee too, and the
            # unit's tee is what the callers mean
            runner = runner_of(self.p.pid)
            pids = [p for p in tagged(self.tag, comm) if parent_of(p) not in runner]
            return pids[0] if pids else None
        try:
            return wait_for(find, timeout, f"{comm} in the unit")
        except AssertionError as e:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
                raise AssertionError(f"{e}; run.sh had printed:\n{self.stderr()[-3000:]}") from None
            raise

    def finish(self):
        try:
            self.p.wait(timeout=self.timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        err = self.stderr()
        self.err.close()
        return self.p.returncode, err


def final_line(err):
    return [line for line in err.splitlines() if "[run] finished" in line][-1]


# ---- the table ----------------------------------------------------------------------------------

def test_list_prints_the_table():
    r = subprocess.run([RUN, "--list"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows[0] == list(tcplab.UNIT_COLUMNS)
    units = tcplab.read_units()
    assert [row[0] for row in rows[1:]] == [u["unit"] for u in units]
    for row, u in zip(rows[1:], units):
        assert row[1] == (u["report"] or "-") and row[6] == str(u["limit_s"])


def test_every_unit_has_a_script_and_its_report():
    for u in tcplab.read_units():
        assert os.path.isfile(tcplab.collect_script(u["unit"], u["report"] or "-")), u
        if u["report"]:
            assert os.path.isfile(tcplab.report_script(u["report"])), u
        assert u["limit_s"] > u["expect_s"], u


def test_no_unit_rule_is_left_outside_the_table():
    """The old rules (comments in collect scripts, a p01- prefix, a -suffix report rule) are gone."""
    for name in glob.glob(os.path.join(TOP, "experiments", "*", "*.sh")):
        with open(name) as f:
            assert "# tcplab:" not in f.read(), name
    with open(RUN) as f:
        text = f.read()
    for old in ("p01-*", "${1%-*}", "experiments/*.sh", "duration-s", "tcplab: exclusive"):
        assert old not in text, old


@pytest.mark.parametrize("line,word", [
    ("t-new p01-machine default run no 1 30 no 1", "10 columns"),
    ("t-new p01-machine default run no 1 30 no 1 yes extra", "10 columns"),
    ("../x p01-machine default run no 1 30 no 1 yes", "unit '../x'"),
    ("no-such-unit - default run no 1 30 no 1 yes", "no collect script"),
    ("t-new no-such-report default run no 1 30 no 1 yes", "no report"),
    ("t-new p01-machine always run no 1 30 no 1 yes", "set 'always'"),
    ("t-new p01-machine default maybe no 1 30 no 1 yes", "quick 'maybe'"),
    ("t-new p01-machine default run sure 1 30 no 1 yes", "alone 'sure'"),
    ("t-new p01-machine default run no x 30 no 1 yes", "expect_s 'x'"),
    ("t-new p01-machine default run no 1 0 no 1 yes", "limit_s '0'"),
    ("t-new p01-machine default run no 1 30 no 3 yes", "netns '3'"),
    ("t-new p01-machine default run no 1 30 no 1 kvm", "qemu 'kvm'"),
    ("t-new p01-machine default run no 1 30 no 2 yes", "one namespace"),
])
def test_a_bad_table_line_is_one_line_naming_it(tmp_path, line, word):
    exp = copy_experiments(tmp_path)
    lab_proc.exp_file(exp, "p01-machine", "t-new.sh").write_text("#!/bin/sh\n")
    with open(exp / "units", "a") as f:
        f.write(line + "\n")
    r = subprocess.run([RUN, "--list"], capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp)))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "units:" in r.stderr and word in r.stderr, r.stderr


def test_a_unit_listed_twice_is_refused(tmp_path):
    exp = copy_experiments(tmp_path)
    with open(exp / "units", "a") as f:
        f.write("p01-machine p01-machine default run no 1 30 no 1 yes\n")
    r = subprocess.run([RUN, "--list"], capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp)))
    assert r.returncode == 1 and "listed twice" in r.stderr


def test_python_reader_refuses_a_bad_line(tmp_path):
    (tmp_path / "units").write_text("# header\na b default run no 1 30 no 1\n")
    with pytest.raises(tcplab.RawError, match="units:2"):
        tcplab.read_units(str(tmp_path / "units"))


def test_vm_sh_wants_a_table_line(tmp_path):
    """The guest's timeout is the table's limit_s: a unit without a line is refused up front."""
    exp = copy_experiments(tmp_path)
    lab_proc.exp_file(exp, "orphan", "orphan.sh").write_text("#!/bin/sh\n")
    r = subprocess.run([os.path.join(TOP, "experiments", "guest", "vm.sh"), "6.1", str(tmp_path / "raw"),
                        "orphan"], capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp)))
    assert r.returncode == 2 and "no line in" in r.stderr, r.stderr


def vm_sh(exp, tmp_path, *units, env=None):
    """vm.sh 6.1 RAW UNITS with EXP's table (and ENV): what it says before any boot."""
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(exp), **(env or {}))
    return subprocess.run([os.path.join(TOP, "experiments", "guest", "vm.sh"), "6.1",
                           str(tmp_path / "raw"), *units], capture_output=True, text=True,
                          timeout=30, env=env)


def test_vm_sh_refuses_a_bad_guest_line(tmp_path):
    """A guest need the table's parser does not know is refused before any kernel is fetched:
    the parser's line, then vm.sh's, exit 2, nothing written."""
    exp = copy_experiments(tmp_path)
    with open(exp / "units", "a") as f:
        f.write("\n# guest: p01-machine: names ktls: a typo\n")
    r = vm_sh(exp, tmp_path, "p01-machine")
    n = len((exp / "units").read_text().splitlines())
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"run.sh: {exp}/units:{n}: guest need 'ktls' of p01-machine: want tls, "
                        "names, bin:PROGRAM or host:PROGRAM\n"
                        f"vm.sh: cannot use the unit table {exp}/units (above)\n")
    assert not (tmp_path / "raw").exists()


def test_vm_sh_wants_a_unit_s_bin_program_built(tmp_path, bindir):
    """A bin:PROGRAM need whose program is not in build/bin is one line, exit 1, before any
    boot (a typo in the table would otherwise ship nothing and fail in the guest)."""
    exp = copy_experiments(tmp_path)
    with open(exp / "units", "a") as f:
        f.write("\n# guest: p01-machine: bin:no_such_prog: the test's\n")
    r = vm_sh(exp, tmp_path, "p01-machine", env={"TCPLAB_BIN": bindir})
    if r.returncode == 4:
        pytest.skip(r.stderr.strip())
    assert (r.returncode, r.stderr) == (
        1, f"vm.sh: {bindir}/no_such_prog, which a unit's guest line needs (bin:no_such_prog), "
           "does not exist: run make first\n")
    assert not (tmp_path / "raw").exists()


# ---- adding an experiment: one line, one collect script, one report -----------------------------

HELLO_SH = """#!/bin/sh
# hello-lab: the machine probe, once.
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
"$TL_BIN/machine" > "$RAW/machine.txt" || tl_die "machine failed"
"""
HELLO_PY = lab_proc.kernel_report("hello-lab", "the kernel the unit saw")


@pytest.mark.netns
def test_a_new_experiment_is_one_line_one_script_one_report(tmp_path, bindir):
    exp = copy_experiments(tmp_path)
    with open(exp / "units", "a") as f:
        f.write("hello-lab            hello-lab         labs     run    no   1  30  no  1  yes\n")
    lab_proc.exp_file(exp, "hello-lab", "hello-lab.sh").write_text(HELLO_SH)
    lab_proc.exp_file(exp, "hello-lab", "hello-lab.py").write_text(HELLO_PY)
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(exp))
    r = subprocess.run([RUN, "--list"], capture_output=True, text=True, timeout=10, env=env)
    assert "hello-lab" in [line.split()[0] for line in r.stdout.splitlines()]
    out = tmp_path / "out"
    r = subprocess.run([RUN, "--out", str(out), "hello-lab"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert tcplab.read_units(str(exp / "units"))[-1]["unit"] == "hello-lab"
    import json
    j = json.loads((out / "hello-lab.json").read_text())
    assert j["kernel"] == os.uname().release
    assert (out / "raw" / "hello-lab" / "machine.txt").is_file()


TINY = """#!/bin/sh
. "$(dirname "$0")/../lib/collect.sh"
tl_init "$1"
echo ran > "$RAW/ran.txt"
"""


@pytest.mark.netns
@pytest.mark.parametrize("args,want", [
    ([], ["t-a", "t-b"]),
    (["--quick"], ["t-a"]),
    (["--all"], ["t-a", "t-b", "t-c"]),
    (["--all", "--quick"], ["t-a", "t-c"]),
    (["t-d"], ["t-d"]),
])
def test_sets_and_quick_come_from_the_table(tmp_path, bindir, args, want):
    rows = [("t-c", "labs", "run", "yes"), ("t-a", "default", "run", "no"),
            ("t-b", "default", "skip", "no"), ("t-d", "named", "run", "no")]
    exp = lab_proc.experiments(
        tmp_path, "".join(f"{name} - {uset} {quick} {alone} 1 30 no 1 yes\n"
                          for name, uset, quick, alone in rows),
        {(name, f"{name}.sh"): TINY for name, *_ in rows})
    out = tmp_path / "out"
    r = subprocess.run([RUN, "--out", str(out), *args], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp)))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out / "raw")) == want
    started = [line.split("[run] ")[1].split(":")[0] for line in r.stderr.splitlines()
               if ": started in" in line]
    if "t-c" in want:   # alone=yes: by itself, after the others
        assert started[-1] == "t-c"
        done = [i for i, line in enumerate(r.stderr.splitlines()) if ": done in" in line]
        start_c = [i for i, line in enumerate(r.stderr.splitlines()) if "t-c: started" in line]
        assert start_c[0] > done[len(want) - 2]


# ---- a probe or fixture that dies fails the unit ------------------------------------------------

# make test kills each program once (SIGKILL, then SIGTERM, in turn); the other five cases run
# in the full suite (make check, CI's check-rest): about 90 s of a loaded make test
KILLS = [("sockwatch", signal.SIGKILL), ("sockwatch", signal.SIGTERM), ("sockwatch", signal.SIGINT),
         ("tee", signal.SIGTERM), ("tee", signal.SIGKILL),
         ("listener", signal.SIGKILL), ("listener", signal.SIGTERM),
         ("connect_block", signal.SIGTERM), ("connect_block", signal.SIGKILL)]


@pytest.mark.netns
@pytest.mark.parametrize("comm,sig", [
    pytest.param(c, s, id=f"{c}-{s.name}",
                 marks=pytest.mark.slow if [x for x, _ in KILLS].index(c) != i else ())
    for i, (c, s) in enumerate(KILLS)])
def test_killing_a_probe_or_fixture_fails_the_unit(tmp_path, bindir, comm, sig):
    out = tmp_path / "out"
    run = Run(["--out", str(out), "p01-synretry"])
    pid = run.pid_of(comm, after="connect_block")   # the watch is ready, the connect under way
    os.kill(pid, sig)
    rc, err = run.finish()
    assert rc == 1, err[-2000:]
    assert "p01-synretry: failed:" in final_line(err)
    status = (out / "raw" / "p01-synretry" / "status.txt").read_text()
    assert status.startswith("failed: "), status
    # no report from a broken run: its failed outputs instead (tests/test_run_failed.py)
    import json
    assert json.loads((out / "p01-synretry.json").read_text())["status"] == "failed"
    assert tagged(run.tag) == []


# ---- every unit is bounded by its limit_s -------------------------------------------------------

@pytest.mark.netns
@pytest.mark.parametrize("unit,comm,after,limit,env", [
    # p01-synretry takes about 7 s; a stopped tee would make it fail by itself at about 12 s
    # (tl_unwatch gives tee 5 s), a stopped listener never: the limit comes first
    ("p01-synretry", "tee", "connect_block", 10, {}),
    ("p01-synretry", "listener", "connect_block", 10, {}),
    pytest.param("p01-connect-time", "connect_many", None, 10, {"TL_CONNECTS": "20000"},
                 marks=pytest.mark.slow),
])
def test_a_stopped_process_times_the_unit_out(tmp_path, bindir, unit, comm, after, limit, env):
    """Stopped once it is past its readiness checks (the unit under way), so only the bound
    can end the unit."""
    exp = copy_experiments(tmp_path)
    set_column(exp, unit, "limit_s", limit)
    out = tmp_path / "out"
    run = Run(["--out", str(out), unit], env=dict(env, TCPLAB_EXPERIMENTS=str(exp)))
    pid = run.pid_of(comm, after=after)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    rc, err = run.finish()
    took = time.monotonic() - t0
    assert rc == 1, err[-2000:]
    assert f"{unit}: timed out after {limit} s" in final_line(err)
    # stopped at its bound, not hung (a hang runs into Run's 90 s).  After the bound run.sh stops
    # the unit's tree, deletes its namespaces and writes its failed outputs: CI's check-rest,
    # with QEMU guests booting beside it, took 21.4 s from the SIGSTOP with limit 10
    assert took < limit + 30, (took, err[-2000:])
    raw = out / "raw" / unit
    assert (raw / "status.txt").read_text() == f"timed out after {limit} s\n"
    assert (raw / "machine.txt").is_file()  # the partial output is kept
    assert tagged(run.tag) == []             # the whole tree is gone, the stopped one too


@pytest.mark.netns
def test_a_stopped_stderr_copier_does_not_hang_the_run(tmp_path, bindir):
    """The runner's own tee, which copies a unit's stderr to the person and to the log, stopped by
    SIGSTOP: the unit still ends, and the runner, after its 2.5 s for the copier's end of file,
    kills it with SIGKILL (a SIGTERM would stay pending on the stopped tee, and run.sh's wait
    for it would never end: the hang this test found)."""
    out = tmp_path / "out"
    run = Run(["--out", str(out), "p01-machine"], timeout=60)
    copier = wait_for(lambda: next((p for p in tagged(run.tag, "tee")
                                    if parent_of(p) in runner_of(run.p.pid)), None), 30,
                      "run.sh's tee")
    os.kill(copier, signal.SIGSTOP)
    rc, err = run.finish()
    assert rc == 0, err[-2000:]
    assert (out / "p01-machine.json").is_file()
    assert tagged(run.tag) == []


# ---- p01-strace ends after its own error; programs must be real executables ---------------------

def fake_bin(tmp_path, bindir, sockwatch):
    d = tmp_path / "bin"
    shutil.copytree(bindir, d)
    os.unlink(d / "sockwatch")
    if sockwatch is None:
        (d / "sockwatch").write_bytes(b"")
    else:
        shutil.copy(sockwatch, d / "sockwatch")
    os.chmod(d / "sockwatch", 0o755)
    return d


@pytest.mark.netns
@pytest.mark.parametrize("sockwatch", ["/bin/false", None], ids=["failing", "empty"])
def test_strace_unit_fails_and_ends_with_a_broken_sockwatch(tmp_path, bindir, netns, sockwatch):
    """With strace -o's default -I3, the cleanup's SIGTERM never ended strace, and
    connect_block -H never ends by itself: the unit hung after its own error."""
    d = fake_bin(tmp_path, bindir, sockwatch)
    raw = tmp_path / "raw"
    r = subprocess.run(["ip", "netns", "exec", netns, "env", f"TL_BIN={d}", "sh",
                        os.path.join(TOP, "experiments", "p01-strace", "p01-strace.sh"), str(raw)],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 1, r.stderr
    assert (raw / "status.txt").read_text().startswith("failed: ")
    left = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    assert left.split() == []


def test_run_sh_refuses_a_truncated_program(tmp_path, bindir):
    d = fake_bin(tmp_path / "b", bindir, None)
    r = subprocess.run([RUN, "--out", str(tmp_path / "out"), "p01-machine"], capture_output=True,
                       text=True, timeout=30, env=dict(os.environ, TCPLAB_BUILD=str(d.parent)))
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "not an executable program" in r.stderr, r.stderr


def test_make_links_to_a_temporary_name():
    """A link cut short leaves $@.tmp, never a truncated program that make -q calls up to date."""
    r = subprocess.run(["make", "-C", TOP, "-n", "-B", "BUILD=build-linkcheck", "build-linkcheck/bin/listener"],
                       capture_output=True, text=True, timeout=30)
    shutil.rmtree(os.path.join(TOP, "build-linkcheck"), ignore_errors=True)
    link = [line for line in r.stdout.splitlines() if "-o build-linkcheck/bin/listener" in line]
    assert link and "-o build-linkcheck/bin/listener.tmp" in link[0]
    assert "mv -f build-linkcheck/bin/listener.tmp build-linkcheck/bin/listener" in link[0]


# ---- progress lines say which time base they use ------------------------------------------------

def test_progress_lines_label_sockwatch_time_base():
    """Replayed on a saved sockwatch output: every event's progress line carries sockwatch's own
    t_s as watch+T, and the ready line says that the reports count from connect() instead."""
    saved = sorted(glob.glob(os.path.join(TOP, "outputs", "*", "raw", "p01-synretry", "sockwatch.txt")))
    assert saved, "no saved p01-synretry sockwatch.txt under outputs/"
    with open(saved[0]) as f:
        lines = f.read().splitlines()
    r = subprocess.run(["sh", "-c", '. "$0"; tl_progress',
                        os.path.join(TOP, "experiments", "lib", "collect.sh")],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    out = r.stderr.splitlines()
    assert "count from its start" in out[0] and "connect()" in out[0]
    events = [tcplab.kv(x) for x in lines if x.startswith("t_s=")]
    assert len(out) == 1 + len(events)
    for line, ev in zip(out[1:], events):
        assert f"watch+{ev['t_s']} s {ev['event']} {ev['state']}" in line, line


@pytest.mark.netns
def test_netns_2_gives_the_unit_a_second_namespace(tmp_path, bindir):
    """netns=2 in the table: run.sh makes a second namespace, names it in TL_NS2, deletes it after."""
    exp = lab_proc.experiments(tmp_path, "t-two - named run no 1 30 no 2 no\n", {
        ("t-two", "t-two.sh"): TINY + 'echo "$TL_NS2" > "$RAW/ns2.txt"\n'
        'ip netns exec "$TL_NS2" ip -o link show lo > "$RAW/lo.txt" || tl_die "no second namespace"\n'})
    out = tmp_path / "out"
    r = subprocess.run([RUN, "--out", str(out), "t-two"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp)))
    assert r.returncode == 0, r.stderr
    ns2 = (out / "raw" / "t-two" / "ns2.txt").read_text().strip()
    assert ns2.endswith("-ns2") and "UP" in (out / "raw" / "t-two" / "lo.txt").read_text()
    assert not os.path.exists(f"/run/netns/{ns2}")


def test_every_experiment_has_its_test_file():
    """A maintainer finds an experiment's tests by its name: tests/test_<report>.py, '-' as '_',
    for every report in the unit table, and tests/test_<unit>.py for a unit with no report
    (vm-selftest) (docs/design.md, "Layout")."""
    reports = {u["report"] or u["unit"] for u in tcplab.read_units()}
    assert len(reports) >= 20
    missing = [r for r in sorted(reports)
               if not os.path.isfile(os.path.join(TOP, "tests", f"test_{r.replace('-', '_')}.py"))]
    assert missing == [], missing
