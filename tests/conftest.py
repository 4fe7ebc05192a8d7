"""Shared pytest fixtures: one build per session, fresh network namespaces, program runners."""
import os
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
    """Every committed reference set, as names under outputs/, sorted: outputs/<release>/ and the
    second runs outputs/rerun/<release>/ (docs/design.md), each one that has a raw/."""
    out = os.path.join(TOP, "outputs")
    names = sorted(os.listdir(out))
    if os.path.isdir(os.path.join(out, "rerun")):
        names += [os.path.join("rerun", d) for d in sorted(os.listdir(os.path.join(out, "rerun")))]
    return sorted(d for d in names if os.path.isdir(os.path.join(out, d, "raw")))


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
               "test_reports_sentences.py", "test_pkt_report.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "netns: needs root and network namespaces")
    config.addinivalue_line("markers", "qemu: boots a Debian kernel under QEMU (slow)")
    config.addinivalue_line("markers", "interrupt: kills runs by signal to test run.sh's cleanup "
                            "(the sanitizer pass leaves these out: a killed program reports nothing)")
    config.addinivalue_line("markers", "python_only: runs no C program (conftest.PYTHON_ONLY; the "
                            "sanitizer pass leaves these out)")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root and `ip netns` (run as root on Linux)")
    for item in items:
        if "netns" in item.keywords and not CAN_NETNS:
            item.add_marker(skip)
        if os.path.basename(str(item.fspath)) in PYTHON_ONLY:
            item.add_marker(pytest.mark.python_only)


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


@pytest.fixture
def netns():
    """A fresh network namespace as run.sh makes them (experiments/lib/netns.sh), deleted afterwards."""
    import lab_proc
    with lab_proc.netns() as name:
        yield name


def in_ns(ns, argv):
    """argv prefixed so that it runs inside namespace ns."""
    return ["ip", "netns", "exec", ns] + list(argv)


from tcplab import kv  # noqa: E402,F401  (tests import it from here)
