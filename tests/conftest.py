"""Shared pytest fixtures: one build per session, fresh network namespaces, program runners."""
import os
import re
import secrets
import shutil
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _lib in ("report", "tools", "guest"):   # experiments/: the report library, tools, guests
    sys.path.insert(0, os.path.join(TOP, "experiments", _lib))
DATA = os.path.join(TOP, "tests", "data")


def reference_dirs():
    """Every committed reference set, as names under outputs/, sorted: outputs/<release>/, one
    per kernel release, each one that has a raw/ (docs/design.md)."""
    out = os.path.join(TOP, "outputs")
    return sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d, "raw")))


GUEST_SERIES = ("5.10.", "6.1.", "6.12.", "7.2.")     # the --kernel guests of the matrix


def guest_reference_dirs(unit):
    """The reference sets holding unit's raw/ from a QEMU guest (raw/UNIT/vm.txt)."""
    return [d for d in reference_dirs()
            if os.path.isfile(os.path.join(TOP, "outputs", d, "raw", unit, "vm.txt"))]


def guest_raw_copy(tmp_path, unit):
    """A copy of the first guest reference's raw/UNIT/ under tmp_path/raw, to break by hand: its
    root; the test is skipped where no guest reference has the unit."""
    refs = guest_reference_dirs(unit)
    if not refs:
        pytest.skip(f"no guest reference of {unit}")
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(TOP, "outputs", refs[0], "raw", unit), root / unit)
    return root


def assert_every_guest_has(units, report):
    """Each --kernel guest series (GUEST_SERIES) has a reference set with every unit's raw/
    from a QEMU run (vm.txt) and the report's .json; the .json text of each, returned."""
    out = []
    for series in GUEST_SERIES:
        ref = next((d for d in guest_reference_dirs(units[0]) if d.startswith(series)), None)
        assert ref is not None, f"no {series} guest reference of {units[0]}"
        for u in units:
            assert os.path.isfile(os.path.join(TOP, "outputs", ref, "raw", u, "vm.txt")), (ref, u)
        with open(os.path.join(TOP, "outputs", ref, report + ".json")) as f:
            out.append(f.read())
    return out


def _can_netns():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = "tcplab-probe-" + secrets.token_hex(3)
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True)
    if r.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return True


CAN_NETNS = _can_netns()


# Test files that run no C program: the reports, the diff, the matrix and the docs are Python,
# fed recorded raw files.  Marked python_only, so that `make sanitize` (.ci/run) can leave them
# out: an ASan/UBSan build of the programs changes nothing they run.  tests/test_markers.py
# keeps the list honest.
PYTHON_ONLY = ("test_badinput_reports.py", "test_badinput_diff.py", "test_references_replay.py",
               "test_diff_cases.py", "test_diff_cli.py", "test_diff_grouping.py",
               "test_matrix.py", "test_rerun.py", "test_docs.py", "test_docs_self_contained.py",
               "test_reports_sentences.py", "test_pkt_report.py", "test_pictures_browser.py")


def tiered(cases, key, ids):
    """A large table's cases as pytest params: the first case of each key(case) runs in
    `make test`, every other one is marked slow and runs in `make check` (and CI's
    make check-rest).  Nothing is dropped: the full table still runs, in the full suite."""
    seen, params = set(), []
    for case, case_id in zip(cases, ids):
        k = key(case)
        params.append(pytest.param(case, id=case_id,
                                    marks=() if k not in seen else pytest.mark.slow))
        seen.add(k)
    return params


def pytest_configure(config):
    config.addinivalue_line("markers", "netns: needs root and network namespaces")
    config.addinivalue_line("markers", "qemu: boots a Debian kernel under QEMU (slow)")
    config.addinivalue_line("markers", "interrupt: kills runs by signal to test run.sh's cleanup "
                            "(the sanitizer pass leaves these out: a killed program reports nothing)")
    config.addinivalue_line("markers", "timing: asserts a time or a sample count that ASan's "
                            "slowdown moves (the sanitizer pass leaves these out; make test runs them)")
    config.addinivalue_line("markers", "python_only: runs no C program (conftest.PYTHON_ONLY; the "
                            "sanitizer pass leaves these out)")
    config.addinivalue_line("markers", "deep: a guest's plumbing tried again, a boot each (interrupts, "
                            "locks, failures, --kernel all): make check runs it, CI's check-rest "
                            "leaves it out to stay within 40 min (docs/reliability.md, \"CI\")")
    config.addinivalue_line("markers", "slow: only in `make check` (and CI's make check-rest), not "
                            "`make test`: every qemu test (a guest under TCG), the interrupt storm, and a unit's "
                            "second live run with its knobs set (its run at the defaults stays)")


# Fixtures cheap enough to make again in each xdist worker (the others group their tests).
CHEAP_SHARED_FIXTURES = ("bindir", "tmp_path_factory", "worker_id", "testrun_uid")


def shared_setup_group(item):
    """The xdist group of a test that uses an expensive module- or session-scoped fixture (a live
    run, a guest boot, a replay of a reference set): the fixture's name and parameter, so that
    `--dist loadgroup` (make test) gives all its tests to one worker and the setup runs once,
    not once per worker.  None for a test that has none."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        if not defs or name in CHEAP_SHARED_FIXTURES or defs[-1].scope not in ("module", "session"):
            continue
        param = getattr(item, "callspec", None) and item.callspec.params.get(name)
        return group_name(f"{defs[-1].baseid}::{name}", param)
    return None


def group_name(base, param):
    """BASE, or BASE=PARAM for a parametrized fixture, as an xdist group: no '[', ']' or '@'.
    xdist appends '@GROUP' to the node id and reads the group back only when its '@' comes after
    the id's last ']' (xdist/scheduler/loadgroup.py, _split_scope): a group ending in ']' (the
    old 'guest_run[(6.12, 1400)]') silently grouped nothing, and each of its tests booted a guest
    of its own (CI: 14 boots for 2)."""
    if param is None:
        return base
    return f"{base}={re.sub(r'[][@]', '_', str(param))}"


@pytest.hookimpl(tryfirst=True)   # before xdist reads the xdist_group marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root and `ip netns` (run as root on Linux)")
    for item in items:
        if "netns" in item.keywords and not CAN_NETNS:
            item.add_marker(skip)
        if os.path.basename(str(item.fspath)) in PYTHON_ONLY:
            item.add_marker(pytest.mark.python_only)
        if "qemu" in item.keywords:     # a guest under TCG: minutes of CPU each
            item.add_marker(pytest.mark.slow)
        group = shared_setup_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


# TCPLAB_CPU_LOG=FILE: one line per test phase, "NODEID PHASE USER_S SYS_S WALL_S", the CPU of the
# worker and of the children it waited for (run.sh and all it ran) in that phase; what make
# test's wall time is made of on two cores (docs/reliability.md, "Test tiers").  Off unless set.
CPU_LOG = os.environ.get("TCPLAB_CPU_LOG")


def _cpu():
    import resource
    import time
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + b.ru_utime, a.ru_stime + b.ru_stime, time.monotonic()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    t0 = _cpu()
    yield
    t1 = _cpu()
    with open(CPU_LOG, "a") as f:
        f.write(f"{item.nodeid} all {t1[0] - t0[0]:.3f} {t1[1] - t0[1]:.3f} {t1[2] - t0[2]:.3f}\n")


@pytest.fixture(scope="session")
def bindir():
    """The built programs; `make test` builds first, this only checks they are there."""
    build = os.environ.get("TCPLAB_BUILD", "build")
    path = os.path.join(TOP, build, "bin")
    if not os.path.isdir(path):
        r = subprocess.run(["make", "-C", TOP, "-s"], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail("make failed:\n" + r.stderr)
    return path


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory, monkeypatch):
    """Each test's runs keep their run records in a state directory of their own (TCPLAB_STATE,
    experiments/lib/runstate.sh): a run reaps what any dead run of its state directory left, and
    under xdist another test's run.sh would otherwise reap a test's SIGKILLed run before the
    test's own next run could show that it does."""
    d = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("TCPLAB_STATE", str(d))
    return str(d)


@pytest.fixture
def netns():
    """A fresh network namespace as run.sh makes them (experiments/lib/netns.sh), deleted afterwards."""
    import lab_proc
    with lab_proc.netns() as name:
        yield name


def in_ns(ns, argv):
    """argv prefixed so that it runs inside namespace ns."""
    return ["ip", "netns", "exec", ns] + list(argv)


# ---- runs that the tests of several experiments read: one per session --------------------------
# shared_setup_group() gives all the tests of each to one xdist worker, so each runs once.

# connects per batch: enough for exact counter equalities, quick on a busy machine
P01_CONNECTS = 300
P01_QUICK_UNITS = ("p01-synretry", "p01-timeout", "p01-connect-time", "p01-machine", "p01-strace")
WIRE_FAULT_UNITS = ("p01-icmp-unreachable", "p01-rst-middlebox", "p01-close-synsent-late")


def _run_sh(out, units, timeout, env=None):
    r = subprocess.run([os.path.join(TOP, "run.sh"), "--out", str(out), *units],
                       capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def p01_quick_out(tmp_path_factory, bindir):
    """One ./run.sh of the five quick loopback p01 units, TL_CONNECTS=P01_CONNECTS
    (tests/test_p01_*.py, tests/test_run_default_set.py)."""
    env = dict(os.environ, TL_CONNECTS=str(P01_CONNECTS))
    return _run_sh(tmp_path_factory.mktemp("out"), P01_QUICK_UNITS, 120, env)


@pytest.fixture(scope="session")
def connect_out(tmp_path_factory, bindir):
    """One ./run.sh of p01-wire-connect: its tests, and p01-wire-netem's report on its raw files."""
    return _run_sh(tmp_path_factory.mktemp("p01-wire-connect"), ["p01-wire-connect"], 120)


@pytest.fixture(scope="session")
def wire_faults_out(tmp_path_factory, bindir):
    """The three wire-fault units, run once by run.sh (side by side, each on its own wire)."""
    return _run_sh(tmp_path_factory.mktemp("wire-faults"), WIRE_FAULT_UNITS, 180)


@pytest.fixture(scope="session")
def guest61(bindir, tmp_path_factory):
    """One 6.1 boot for the whole session: (rawroot, vm.txt as a dict, the report's JSON)
    (tests/test_kernel_matrix.py, tests/test_vm_selftest.py; tests/guest_boot.py)."""
    import guest_boot
    return guest_boot.boot_guest61(tmp_path_factory)


from tcplab import kv  # noqa: E402,F401  (tests import it from here)
