"""./run.sh diff on bad input, table-driven: every field of every documented report (the p01
reports of docs/output-format.md, as test_diff_cases builds them with every key) spoiled in each
way, and the files themselves (FIFO, /dev/zero, directory, unreadable, empty, truncated, junk,
too large, missing side, bad file on one side only).  Each case must be diff(1)'s trouble:
exit 2, nothing on stdout, exactly one line on stderr naming the file and the field, within 5 s.
Before the schema, these exited 0 ("the same"), 1 ("they differ", with a traceback) or hung."""
import copy
import functools
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import tiered
from test_diff_cases import DIFF, base, socket_row, synretry

TIMEOUT = 5
PLACEHOLDER = "@@tcplab-bad-input@@"
HUGE = "x" * 100_000                  # longer than any string a report can hold
DEEP = "[" * 5000 + "]" * 5000        # json's C scanner recursed into RecursionError here
DEEP_OBJ = '{"a":' * 40 + "1" + "}" * 40   # parses, but deeper than any report nests

# Maps whose keys are names the data chooses (a counter, a sysctl, an errno, a vm.txt key): an
# entry missing from these is no error.
NAME_MAPS = {"counters", "sysctls", "errors", "vm"}

def reports():
    """The documented reports, with the optional parts present so that their fields are tried
    too: p01-synretry's default run, a socket after p01-timeout's close, a vm.txt."""
    objs = base()
    run = synretry(retrans_at=(1.01, 2.02, 3.03))
    objs["p01-synretry"]["default"] = {k: v for k, v in run.items()
                                       if k not in ("experiment", "kernel", "schema", "default")}
    objs["p01-timeout"]["keep"]["after_close"] = [socket_row()]
    objs["p01-machine"]["vm"] = {"version": "6.1", "accel": "tcg"}
    return objs


def fields(obj, path=()):
    """(path, value) of each key of each object and of the first item of each list."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,), v
            yield from fields(v, path + (k,))
    elif isinstance(obj, list) and obj:
        yield path + (0,), obj[0]
        yield from fields(obj[0], path + (0,))


def required(path):
    """Whether the format makes this key required (so that its absence is bad input): every key
    of a report, of its runs and parts, and of each event, retransmit and socket; not an entry
    of a name map or a list item."""
    if isinstance(path[-1], int):
        return False
    parent = [p for p in path[:-1] if not isinstance(p, int)]
    if parent and parent[-1] in NAME_MAPS:
        return False
    # p01-connect-time's parts carry elapsed_s, which the format does not list for them
    return not (len(path) == 3 and path[0] == "parts" and path[2] == "elapsed_s")


def wrong_type(value):
    """A value of another JSON type than the field's."""
    if isinstance(value, str):
        return 7
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "7.1"
    if isinstance(value, list):
        return {"x": 1}
    if isinstance(value, dict):
        return [1, 2]
    return {"x": [1]}   # null: no nullable field takes an object whose values are lists


# (name, JSON text to put in place of the value): "type" is wrong_type(value), "dup" the key
# twice, "missing" the key deleted.  Every field gets "type" and, where required, "missing";
# each kind of field also gets two of TURNS, in turn (see field_cases()).
SPOILS = [
    ("type", None),
    ("Infinity", "Infinity"),
    ("1e400", "1e400"),
    ("huge-string", json.dumps(HUGE)),
    ("deep", DEEP),
    ("bool", "true"),
    ("-Infinity", "-Infinity"),
    ("NaN", "NaN"),
    ("bigint", "1" + "0" * 30),
    ("deep-object", DEEP_OBJ),
]
TURNS = ["Infinity", "1e400", "huge-string", "deep", "dup", "NaN", "bool", "-Infinity",
         "bigint", "deep-object"]


def kind_of_field(path):
    """A field's place with the repeats folded: default.X is X, keep is cc, refused is accept,
    parts.refused/cc of p01-strace are parts.block, a counter is any counter."""
    folded = []
    for p in path:
        p = {"default": None, "keep": "cc", "refused": "accept", "block": "accept"}.get(p, p)
        if folded and folded[-1] in NAME_MAPS:
            p = "NAME"
        if p is not None:
            folded.append(p)
    return tuple(folded)


def spoiled_text(obj, path, spoil):
    """The JSON text of obj with the field at path spoiled."""
    obj = copy.deepcopy(obj)
    node = obj
    for p in path[:-1]:
        node = node[p]
    key = path[-1]
    if spoil == "missing":
        del node[key]
        return json.dumps(obj)
    original = node[key]
    node[key] = PLACEHOLDER
    text = json.dumps(obj)
    mark = json.dumps(PLACEHOLDER)
    if spoil == "dup":
        # the key twice, with its own value both times: json would keep the last silently
        return text.replace(mark, f"{json.dumps(original)}, {json.dumps(key)}: "
                                  f"{json.dumps(original)}")
    if spoil == "type":
        return text.replace(mark, json.dumps(wrong_type(original)))
    return text.replace(mark, dict(SPOILS)[spoil])


def field_token(path):
    """What the error line must contain to name the field: its key, or its list's key."""
    return [p for p in path if not isinstance(p, int)][-1]


def field_cases():
    """Every field: a wrong type, and its absence where the format requires it.  Each kind of
    field (kind_of_field(): a repeat such as default.X or keep.X is the same kind) also gets two
    of TURNS in turn, so that each of them is tried on a few dozen different fields (the whole
    cross product is 1756 cases, 1.5 to 3.5 minutes on this 2-core machine)."""
    cases, seen, turn = [], set(), 0
    for name, obj in sorted(reports().items()):
        for path, _ in fields(obj):
            # a sysctl's value is a string or a number: both are types it takes
            spoils = [] if path[-2:-1] == ("sysctls",) else ["type"]
            if required(path):
                spoils.append("missing")
            if (name, kind_of_field(path)) not in seen:
                seen.add((name, kind_of_field(path)))
                for _ in range(2):
                    spoil = TURNS[turn % len(TURNS)]
                    turn += 1
                    if spoil == "dup" and isinstance(path[-1], int):   # no key to repeat
                        spoil = TURNS[turn % len(TURNS)]
                        turn += 1
                    spoils.append(spoil)
            cases += [(name, path, spoil) for spoil in spoils]
    return cases


FIELD_CASES = field_cases()


def case_id(case):
    name, path, spoil = case
    return f"{name}:{'.'.join(map(str, path))}:{spoil}"


def run_diff(a, b, as_user=False):
    cmd = ["/usr/bin/python3", DIFF, str(a), str(b)]
    if as_user and os.geteuid() == 0:
        # root reads a mode-000 file; without these capabilities it cannot (the owner bits are 0)
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


def assert_trouble(r, *names):
    assert r.returncode == 2, (r.returncode, r.stdout[-300:], r.stderr[-300:])
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), r.stderr[-600:]
    assert r.stderr.startswith("tcplab_diff.py: ") and "Traceback" not in r.stderr
    for n in names:
        assert n in r.stderr, (n, r.stderr)


def write_sides(tmp_path, name, text):
    """Side A: the report whole; side B: the spoiled text."""
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir(parents=True)
    b.mkdir()
    (a / f"{name}.json").write_text(json.dumps(reports()[name]))
    (b / f"{name}.json").write_text(text)
    return a, b


@functools.lru_cache(maxsize=1)
def pristine():
    """reports(), made once a worker (spoiled_text copies what it spoils)."""
    return reports()


def field_result(top, case):
    """One field case run: (CompletedProcess, or None on a hang; seconds).  Each test runs its
    own case: a module fixture running every case of the session ran them all again in each
    xdist worker (six times over in CI, 257 s of setup a worker)."""
    name, path, spoil = case
    a, b = write_sides(top, name, spoiled_text(pristine()[name], path, spoil))
    t0 = time.monotonic()
    try:
        r = run_diff(a, b)
    except subprocess.TimeoutExpired:
        r = None
    return r, time.monotonic() - t0


# make test: each report with each spoiling once; make check: every field
@pytest.mark.parametrize("case", tiered(FIELD_CASES, lambda c: (c[0], c[2]),
                                        [case_id(c) for c in FIELD_CASES]))
def test_spoiled_field_is_trouble(tmp_path, case):
    name, path, spoil = case
    r, seconds = field_result(tmp_path, case)
    assert r is not None, f"no answer within {TIMEOUT} s"
    assert seconds < TIMEOUT
    assert_trouble(r, f"B/{name}.json: ", field_token(path))


def test_the_table_is_large():
    assert len(FIELD_CASES) >= 250


# ---- whole files and directories ---------------------------------------------------------------

GOOD = json.dumps(base()["p01-machine"])


def plant(kind, path):
    """Put a bad p01-machine.json at path; return what the error line must name besides it."""
    if kind == "fifo":
        os.mkfifo(path)
        return "FIFO"
    if kind == "dev-zero-symlink":
        os.symlink("/dev/zero", path)
        return "symbolic link"
    if kind == "symlink-to-good":
        (path.parent / "elsewhere.txt").write_text(GOOD)
        os.symlink(path.parent / "elsewhere.txt", path)
        return "symbolic link"
    if kind == "dangling-symlink":
        os.symlink(path.parent / "nowhere", path)
        return "symbolic link"
    if kind == "directory":
        path.mkdir()
        return "directory"
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
        return "socket"
    if kind == "unreadable":
        path.write_text(GOOD)
        path.chmod(0)
        return "Permission denied"
    if kind == "huge":
        # valid JSON, but larger than any report: refused before parsing
        path.write_text(GOOD[:-1] + ', "padding": "' + "x" * (5 << 20) + '"}')
        return "bytes"
    if kind == "sparse-1GiB":
        with open(path, "wb") as f:
            f.truncate(1 << 30)
        return "bytes"
    texts = {
        "empty": ("", "empty"),
        "whitespace": ("  \n\t\n", "empty"),
        "truncated": (GOOD[: len(GOOD) // 2], "not JSON"),
        "truncated-at-end": (GOOD[:-1], "not JSON"),
        "binary-junk": (None, "UTF-8"),
        "latin-1": (None, "UTF-8"),
        "utf-8-bom": ("\ufeff" + GOOD, "not JSON"),
        "list": ("[1, 2]", "want an object"),
        "string": ('"p01-machine"', "want an object"),
        "number": ("250", "want an object"),
        "null": ("null", "want an object"),
        "two-objects": (GOOD + GOOD, "not JSON"),
        "trailing-comma": (GOOD[:-1] + ",}", "not JSON"),
        "single-quotes": (GOOD.replace('"', "'"), "not JSON"),
        "comment": ("// a comment\n" + GOOD, "not JSON"),
        "lone-surrogate": (GOOD.replace('"x86_64"', '"\\ud800"'), "arch"),
        "newline-in-errno": (GOOD.replace('"errno": null', '"errno": "ETIME\\nDOUT"'), "errno"),
        "nul-in-key": (GOOD.replace('"arch"', '"ar\\u0000ch"'), "ar"),
        "unknown-experiment-bad-errno": (json.dumps({**base()["p01-machine"], "experiment": "p99",
                                                     "errno": 5}), "errno"),
        "experiment-not-a-string": (GOOD.replace('"experiment": "p01-machine"', '"experiment": 1'),
                                    "experiment"),
        "sub-run-with-bad-schedule": (json.dumps({**base()["p01-machine"],
                                                  "extra": {"errno": None, "expected": ["a"]}}),
                                      "expected"),
        "errno-without-error": (json.dumps({**base()["p01-machine"], "result": "timeout",
                                            "errno": "ETIMEDOUT"}), "errno"),
        "schema-1": (json.dumps({**base()["p01-machine"], "schema": 1}), "schema"),
    }
    text, what = texts[kind]
    if kind == "latin-1":
        path.write_bytes(GOOD.replace("x86_64", "x86\xe9_64").encode("latin-1"))
    elif text is None:
        path.write_bytes(bytes(range(256)) * 8)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return what


FILE_KINDS = ["fifo", "dev-zero-symlink", "symlink-to-good", "dangling-symlink", "directory",
              "socket", "unreadable", "huge", "sparse-1GiB", "empty", "whitespace", "truncated",
              "truncated-at-end", "binary-junk", "latin-1", "utf-8-bom", "list", "string",
              "number", "null", "two-objects", "trailing-comma", "single-quotes", "comment",
              "lone-surrogate", "newline-in-errno", "nul-in-key", "unknown-experiment-bad-errno",
              "experiment-not-a-string", "sub-run-with-bad-schedule", "errno-without-error",
              "schema-1"]


def sides(tmp_path):
    """Two directories that tcplab could have written, and a user without root's override can
    read: side A whole, side B without p01-machine.json."""
    top = tmp_path / "t"
    top.mkdir()
    top.chmod(0o755)
    tmp_path.chmod(0o755)
    a, b = top / "A", top / "B"
    a.mkdir()
    b.mkdir()
    for name, obj in base().items():
        (a / f"{name}.json").write_text(json.dumps(obj))
        if name != "p01-machine":
            (b / f"{name}.json").write_text(json.dumps(obj))
    return a, b


@pytest.mark.parametrize("one_side_only", [False, True], ids=["both-sides", "one-side-only"])
@pytest.mark.parametrize("kind", FILE_KINDS)
def test_bad_file_is_trouble(tmp_path, kind, one_side_only):
    """A bad p01-machine.json in B, against a good one in A, or with none in A (a bad file on
    one side only is trouble too, not "only in B")."""
    a, b = sides(tmp_path)
    what = plant(kind, b / "p01-machine.json")
    if one_side_only:
        os.unlink(a / "p01-machine.json")
    assert_trouble(run_diff(a, b, as_user=(kind == "unreadable")), "B/p01-machine.json: ", what)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory-less-file", "missing",
                                  "unreadable-directory"])
def test_bad_command_line_side_is_trouble(tmp_path, kind):
    a, _ = sides(tmp_path)
    if kind == "fifo":
        side = tmp_path / "t" / "fifo.json"
        os.mkfifo(side)
        a, what = a / "p01-machine.json", "FIFO"
    elif kind == "dev-zero":
        side, a, what = "/dev/zero", a / "p01-machine.json", "character device"
    elif kind == "directory-less-file":
        side = tmp_path / "t" / "p01-machine.json"
        side.write_text("{")
        a, what = a / "p01-machine.json", "not JSON"
    elif kind == "missing":
        side, what = tmp_path / "t" / "nope", "no such directory"
    else:
        side = tmp_path / "t" / "locked"
        shutil.copytree(a, side)
        side.chmod(0)
        what = "Permission denied"
    r = run_diff(a, side, as_user=(kind == "unreadable-directory"))
    assert_trouble(r, str(side), what)


def test_fifo_vm_txt_does_not_hang(tmp_path):
    """raw/<unit>/vm.txt is read for the QEMU note: a FIFO there is skipped, not waited on."""
    a, b = sides(tmp_path)
    (b / "p01-machine.json").write_text(GOOD)
    os.makedirs(b / "raw" / "p01-machine")
    os.mkfifo(b / "raw" / "p01-machine" / "vm.txt")
    r = run_diff(a, b)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_write_error_on_stdout_is_one_line(tmp_path):
    a, b = sides(tmp_path)
    with open("/dev/full", "w") as full:
        r = subprocess.run(["/usr/bin/python3", DIFF, str(a), str(b)], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    assert r.returncode == 2
    assert r.stderr == "tcplab_diff.py: standard output: No space left on device\n"


def test_brackets_inside_strings_do_not_count(tmp_path):
    """The depth bound counts JSON's nesting, not characters: a string of 300 '[' is a string."""
    a, b = sides(tmp_path)
    (b / "p01-machine.json").write_text(json.dumps({**base()["p01-machine"],
                                                    "note": "[{" * 300 + '\\"'}))
    r = run_diff(a, b)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")    # an undocumented key: not read
