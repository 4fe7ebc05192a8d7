"""tcplab_diff's command line: exit status as diff(1) (0 same, 1 differ, 2 trouble), two single
.json files, and one-line errors on stderr."""
import json
import os
import subprocess

from test_diff_cases import machine

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIFF = os.path.join(TOP, "experiments", "tools", "tcplab_diff.py")


def run(*args):
    return subprocess.run(["/usr/bin/python3", DIFF, *args], capture_output=True, text=True)


def hz(value):
    """A whole p01-machine.json (the schema wants every documented key) with this HZ."""
    return {**machine(), "hz": value}


def put(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return str(path)


def test_usage_errors_exit_2():
    for args in ((), ("one",), ("a", "b", "c")):
        r = run(*args)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == "usage: tcplab_diff.py A B\n"


def test_help_exits_0():
    r = run("-h")
    assert (r.returncode, r.stdout) == (0, "usage: tcplab_diff.py A B\n")


def test_missing_directory_exits_2(tmp_path):
    r = run(str(tmp_path), str(tmp_path / "nope"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "no such directory" in r.stderr


def test_bad_json_exits_2(tmp_path):
    put(tmp_path / "a" / "p01-machine.json", hz(250))
    put(tmp_path / "b" / "p01-machine.json", "{not json")
    r = run(str(tmp_path / "a"), str(tmp_path / "b"))
    assert r.returncode == 2 and "p01-machine.json" in r.stderr and r.stdout == ""
    assert r.stderr.count("\n") == 1


def test_two_files(tmp_path):
    a = put(tmp_path / "x" / "p01-machine.json", hz(250))
    b = put(tmp_path / "y" / "p01-machine.json", hz(1000))
    r = run(a, b)
    assert r.returncode == 1
    assert r.stdout.splitlines()[-2:] == ["p01-machine", "  HZ: 250 in A, 1000 in B"]
    assert run(a, a).returncode == 0


def test_same_directory_names_get_a_header(tmp_path):
    a = put(tmp_path / "run1" / "6.18" / "p01-machine.json", hz(250))
    b = put(tmp_path / "run2" / "6.18" / "p01-machine.json", hz(100))
    r = run(os.path.dirname(a), os.path.dirname(b))
    assert r.stdout.splitlines() == [f"A: {os.path.dirname(a)}", f"B: {os.path.dirname(b)}",
                                     "p01-machine", "  HZ: 250 in A, 100 in B"]


def test_empty_directories_are_equal(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = run(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_odd_directory_names_stay_on_one_line(tmp_path):
    """A side's name is printed escaped: a newline or a byte that is not UTF-8 in it cannot
    break a line in two, nor the output's encoding (a UnicodeEncodeError under a UTF-8 locale)."""
    odd = os.path.join(os.fsencode(tmp_path), b"n\xff\nx")
    os.mkdir(odd)
    with open(os.path.join(odd, b"p01-machine.json"), "w") as f:
        json.dump(hz(250), f)
    b = put(tmp_path / "m" / "p01-machine.json", hz(1000))
    r = subprocess.run(["/usr/bin/python3", DIFF, odd, os.path.dirname(b)], capture_output=True,
                       env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert (r.returncode, r.stderr) == (1, b"")
    assert r.stdout.splitlines() == [b"p01-machine", b"  HZ: 250 in n\\udcff\\nx, 1000 in m"]


def test_committed_references_are_good_reports():
    """The reports' own outputs fit the schema: each committed reference against itself is the
    same, and against the others differs (exit 1), never trouble."""
    top = os.path.join(TOP, "outputs")
    # the reference directories (outputs/ also holds the matrix's files: docs/design.md)
    outs = sorted(os.path.join(top, d) for d in os.listdir(top)
                  if os.path.isdir(os.path.join(top, d, "raw")))
    assert len(outs) >= 2
    # each against itself, and against the next one round the list: every reference is read on
    # either side once (all 25 pairs took 25 s of a loaded make test; these 10 say the same)
    for a, b in [(a, a) for a in outs] + list(zip(outs, outs[1:] + outs[:1])):
        r = run(a, b)
        assert (r.returncode, r.stderr) == ((0 if a == b else 1), ""), (a, b, r.stderr)
