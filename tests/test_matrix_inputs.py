"""tcplab matrix and the directories it reads (issue 30, class 9): a matrix is never written
into one of its own inputs, a directory's name is one line in matrix.txt whatever it holds,
and a full stdout names what could not be written.  No root: copies of committed outputs.

Before: `matrix --out A A B` succeeded, after which every matrix and diff of A failed on
A/matrix.json ("schema: 1 ... older outputs"); a newline in a directory's name split
matrix.txt's column line; stdout on /dev/full said "tcplab_matrix.py: : No space left on
device"."""
import os
import shutil
import subprocess

import pytest

from conftest import TOP

PY = "/usr/bin/python3"
MATRIX = os.path.join(TOP, "experiments", "tools", "tcplab_matrix.py")
DIFF = os.path.join(TOP, "experiments", "tools", "tcplab_diff.py")
# two small committed sets: a guest's 5.10 and 6.1
SETS = ["5.10.0-43-cloud-amd64", "6.1.0-57-cloud-amd64"]


@pytest.fixture
def inputs(tmp_path):
    """Copies of two committed output directories, A and B (their reports only, no raw/)."""
    made = []
    for name, ref in zip("AB", SETS):
        d = tmp_path / name
        src = os.path.join(TOP, "outputs", ref)
        shutil.copytree(src, d, ignore=shutil.ignore_patterns("raw"))
        made.append(d)
    return made


def run(*args, cwd=None):
    return subprocess.run([PY, MATRIX, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def listing(d):
    return sorted(os.listdir(d))


@pytest.mark.parametrize("how", ["same path", "trailing /.", "relative", "a symlink to it",
                                 "the second input"])
def test_a_matrix_into_one_of_its_inputs_is_refused(inputs, tmp_path, how):
    a, b = inputs
    out = {"same path": a, "trailing /.": f"{a}/.", "relative": "A",
           "a symlink to it": tmp_path / "link", "the second input": b}[how]
    if how == "a symlink to it":
        os.symlink(a, out)
    before = {d: listing(d) for d in (a, b)}
    r = run("--out", out, a, b, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.count("\n") == 1 and "one of the directories the matrix reads" in r.stderr, r.stderr
    assert {d: listing(d) for d in (a, b)} == before
    # and so the inputs still read: the matrix and the diff of A work afterwards
    assert run("--out", tmp_path / "m", a, b).returncode == 0
    assert subprocess.run([PY, DIFF, a, b], capture_output=True, timeout=120).returncode in (0, 1)


def test_a_matrix_beside_its_inputs_is_written(inputs, tmp_path):
    """The control: --out a sibling, or the inputs' parent, is fine."""
    a, b = inputs
    r = run("--out", tmp_path, a, b)
    assert r.returncode == 0, r.stderr
    assert {"matrix.txt", "matrix.json", "matrix.svg"} <= set(listing(tmp_path))


@pytest.mark.parametrize("name", ["A\nnewline", "A\ttab", "A\x1b[31mred", "A\rcr"])
def test_a_directory_name_is_one_line_in_matrix_txt(inputs, tmp_path, name):
    a, b = inputs
    odd = tmp_path / name
    os.rename(a, odd)
    r = run("--out", tmp_path / "m", odd, b)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "m" / "matrix.txt").read_text()
    cols = [x for x in text.split("\n") if x.startswith("  column ")]
    assert len(cols) == 2 and all(c.isprintable() for c in cols), cols
    assert cols[0].endswith("; " + ascii(str(odd))[1:-1] + ")"), cols[0]
    # everything else in the file is printable too (a column label is a kernel, not the path)
    assert all(line.isprintable() for line in text.split("\n")), text[:400]


def test_a_full_stdout_names_standard_output(inputs, tmp_path):
    a, b = inputs
    with open("/dev/full", "w") as full:
        r = subprocess.run([PY, MATRIX, "--out", str(tmp_path / "m"), str(a), str(b)],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (1, "tcplab_matrix.py: standard output: No space left on device\n")


def retag(d, report, kernel):
    """d/report.json claims another kernel release."""
    import json
    path = os.path.join(d, report + ".json")
    with open(path) as f:
        j = json.load(f)
    j["kernel"] = kernel
    with open(path, "w") as f:
        json.dump(j, f)


@pytest.mark.parametrize("other, ok", [("6.1.0-57-cloud-amd64-v7", True),
                                       ("6.1.0-58-cloud-amd64", False),
                                       ("6.12.118+deb12-cloud-amd64", False)])
def test_a_set_may_mix_build_tags_of_one_source_only(inputs, tmp_path, other, ok):
    """The host's reference set holds reports made on machines whose builds differ only in
    their -vN tag (6.18.44-fc-v1045, -v1272): one source, one column, the tag most reports ran
    on, the other said.  Any other mix is two kernels in one directory, refused."""
    a, b = inputs
    names = sorted(n[:-5] for n in os.listdir(b) if n.endswith(".json"))
    retag(b, names[0], other)
    r = run("--out", tmp_path / "m", a, b)
    if ok:
        assert r.returncode == 0, r.stderr
        with open(tmp_path / "m" / "matrix.txt") as f:
            text = f.read()
        assert f"; some reports on {other}, the same source" in text, text[:1500]
    else:
        assert r.returncode != 0 and "kernels in one directory" in r.stderr, r.stderr
