"""Every input a fuzz target ever crashed or hung on (tests/data/fuzz-regress/<target>/) goes
through the programs of the normal build — or, under `make sanitize`, of the ASan/UBSan one:
no signal, no sanitizer report, at most one line on stderr, done within 5 s.  The fuzz
targets are in tests/fuzz/; `make fuzz` also starts from these inputs."""
import glob
import os
import subprocess

import pytest

from conftest import DATA

REGRESS = os.path.join(DATA, "fuzz-regress")
SANITIZER_WORDS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                   "runtime error:")


def inputs():
    return sorted(glob.glob(os.path.join(REGRESS, "*", "*")))


def machine_tree(root, **files):
    """A machine -r tree holding files (path relative to root -> bytes)."""
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return str(root)


def argv_word(data):
    """The bytes as one command-line word: up to the first NUL, like argv."""
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def runs_for(target, path, data, bindir, tmp_path):
    prog = lambda name: os.path.join(bindir, name)  # noqa: E731
    if target == "fuzz_diag":
        return [[prog("sockwatch"), "-R", path]]
    if target == "fuzz_snmp":
        return [[prog("counters"), "-S", path], [prog("counters"), "-N", path],
                [prog("counters"), "-d", path, "-a", path]]
    if target == "fuzz_machine":
        tree = machine_tree(tmp_path / "boot", **{
            "proc/sys/kernel/osrelease": b"fuzz\n", "boot/config-fuzz": data,
            "sys/devices/system/cpu/online": data, "proc/sys/net/ipv4/tcp_syn_retries": data})
        gz = machine_tree(tmp_path / "gz", **{"proc/config.gz": data})
        value = machine_tree(tmp_path / "value", **{"proc/sys/kernel/osrelease": data,
                                                    "proc/sys/kernel/version": data})
        return [[prog("machine"), "-r", tree], [prog("machine"), "-r", gz],
                [prog("machine"), "-r", value]]
    if target == "fuzz_args":
        w = argv_word(data)
        return [[prog("sockwatch"), "-R", "/dev/null", "-p", w],
                [prog("sockwatch"), "-R", "/dev/null", "-s", w],
                [prog("counters"), "-d", "/dev/null", "-k", w]]
    pytest.fail(f"no program is known to read inputs of {target}")


@pytest.mark.parametrize("path", inputs(), ids=lambda p: os.path.relpath(p, REGRESS))
def test_crash_input_is_handled(bindir, tmp_path, path):
    target = os.path.basename(os.path.dirname(path))
    with open(path, "rb") as f:
        data = f.read()
    for argv in runs_for(target, path, data, bindir, tmp_path):
        r = subprocess.run(argv, capture_output=True, timeout=5)
        err = r.stderr.decode(errors="replace")
        what = f"{argv}: exit {r.returncode}, stderr {err[-2000:]!r}"
        assert r.returncode >= 0, what
        assert not any(w in err for w in SANITIZER_WORDS), what
        assert err.count("\n") <= 1, what


def test_regress_inputs_exist():
    """The fuzzers found and we fixed at least one crash; its input stays here."""
    assert inputs(), f"no inputs under {REGRESS}"
