"""tcplab kcidb on input that must neither hang it nor make it work for long (issue 30, class 7),
and the one write-error path every tool shares (tcplab.tool_main()).

Before: a 25-byte KTAP with the plan 1..3000000 ran past 30 s (3 million MISS tests), a named
FIFO was waited on forever, /dev/zero read until killed, a 5000-digit number was a ValueError
traceback, and stdout on /dev/full a traceback (OSError: [Errno 28]).  Now each is one line on
stderr, exit 1, nothing on stdout, well within the 5 s bound the bad-input tests use."""
import os
import subprocess

import pytest

from conftest import TOP

PY = "/usr/bin/python3"
KCIDB = os.path.join(TOP, "experiments", "tools", "tcplab_kcidb.py")
MATRIX = os.path.join(TOP, "experiments", "tools", "tcplab_matrix.py")
DIFF = os.path.join(TOP, "experiments", "tools", "tcplab_diff.py")
ARGS = ["--origin", "tcplab_test", "--build-id", "tcplab_test:build-1"]
BOUND_S = 5
GOOD = "KTAP version 1\n1..1\nok 1 p01-machine\n"

# kcidb's bounds as its --help and the man page give them
MAX_PLAN = 1000
MAX_KTAP_BYTES = 1 << 20


def kcidb(*args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE):
    return subprocess.run([PY, KCIDB, *ARGS, *args], stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=BOUND_S)


def refused(r, word):
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert (r.stdout or "") == "", r.stdout[:200]
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert word in r.stderr, r.stderr


def digits(n):
    return "1" * n


# name: (KTAP text, the words of the refusal)
TEXTS = {
    "plan of 3 million": ("KTAP version 1\n1..3000000\n", "more than 1000 test points"),
    "plan of 10^20": ("KTAP version 1\n1..100000000000000000000\n", "more than 1000 test points"),
    "plan of 5000 digits": (f"KTAP version 1\n1..{digits(5000)}\n", "more than 1000 test points"),
    "plan one above": (f"KTAP version 1\n1..{MAX_PLAN + 1}\n", "more than 1000"),
    "test point of 5000 digits": (f"KTAP version 1\n1..1\nok {digits(5000)} a\n", "want 1"),
    "totals of 5000 digits": (f"{GOOD}# Totals: pass:{digits(5000)} fail:0 xfail:0 xpass:0 "
                              "skip:0 error:0\n", "'# Totals:' line run.sh does not print"),
}


@pytest.mark.parametrize("name", TEXTS)
def test_a_bounded_ktap_is_refused_at_once(tmp_path, name):
    text, word = TEXTS[name]
    p = tmp_path / "x.ktap"
    p.write_text(text)
    refused(kcidb(str(p)), word)


def test_the_largest_plan_is_still_converted(tmp_path):
    """The bound refuses nothing run.sh prints: a plan of MAX_PLAN, every point missing."""
    p = tmp_path / "x.ktap"
    p.write_text(f"KTAP version 1\n1..{MAX_PLAN}\nBail out! stopped\n")
    r = kcidb(str(p))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.count('"MISS"') == MAX_PLAN


def test_a_done_line_of_5000_digits_is_a_diagnostic(tmp_path):
    p = tmp_path / "x.ktap"
    p.write_text(f"KTAP version 1\n1..1\n# 00:00:01 [run] a: done in {digits(5000)} s\nok 1 a\n")
    r = kcidb(str(p))
    assert r.returncode == 0 and r.stderr == "" and '"duration"' not in r.stdout, r.stderr


def test_a_fifo_is_refused_without_a_wait(tmp_path):
    """No writer ever comes: open(2) without O_NONBLOCK would wait forever."""
    fifo = tmp_path / "k.fifo"
    os.mkfifo(fifo)
    refused(kcidb(str(fifo)), "a FIFO, not a regular file")


@pytest.mark.parametrize("path,word", [("/dev/zero", "a character device"),
                                       ("/dev/urandom", "a character device")])
def test_a_device_is_refused_before_its_first_byte(path, word):
    refused(kcidb(path), word)


def test_stdin_is_read_to_its_bound_only():
    with open("/dev/zero", "rb") as zero:
        r = kcidb(stdin=zero)
    refused(r, f"larger than {MAX_KTAP_BYTES} bytes")


def test_a_large_file_is_refused(tmp_path):
    p = tmp_path / "x.ktap"
    p.write_text(GOOD + "# " + "x" * MAX_KTAP_BYTES + "\n")
    refused(kcidb(str(p)), f"larger than {MAX_KTAP_BYTES} bytes")


def test_stdin_within_the_bound_is_converted():
    r = subprocess.run([PY, KCIDB, *ARGS], input=GOOD, capture_output=True, text=True,
                       timeout=BOUND_S)
    assert r.returncode == 0 and '"PASS"' in r.stdout, r.stderr


# ---- stdout on /dev/full: the one write-error path (tcplab.tool_main) -----------------------------

def full(argv):
    with open("/dev/full", "w") as f:
        return subprocess.run([PY, *argv], stdout=f, stderr=subprocess.PIPE, text=True,
                              timeout=60)


def test_kcidb_on_a_full_stdout_is_one_line(tmp_path):
    p = tmp_path / "x.ktap"
    p.write_text(GOOD)
    r = full([KCIDB, *ARGS, str(p)])
    assert (r.returncode, r.stderr) == (1, "tcplab kcidb: standard output: No space left on device\n")


def test_kcidb_help_on_a_full_stdout_is_one_line():
    r = full([KCIDB, "--help"])
    assert (r.returncode, r.stderr) == (1, "tcplab kcidb: standard output: No space left on device\n")


def test_the_diff_and_the_matrix_on_a_full_stdout_say_so_alike(tmp_path):
    """The matrix named no file (': No space left on device'); the diff keeps its exit 2."""
    refs = sorted(d for d in os.listdir(os.path.join(TOP, "outputs"))
                  if os.path.isfile(os.path.join(TOP, "outputs", d, "p01-machine.json")))[:2]
    a, b = (os.path.join(TOP, "outputs", d) for d in refs)
    r = full([MATRIX, "--out", str(tmp_path / "m"), a, b])
    assert (r.returncode, r.stderr) == (1, "tcplab_matrix.py: standard output: No space left on device\n")
    assert sorted(os.listdir(tmp_path / "m")) == ["matrix.json", "matrix.svg", "matrix.txt"]
    r = full([DIFF, a, b])
    assert (r.returncode, r.stderr) == (2, "tcplab_diff.py: standard output: No space left on device\n")
