"""No user-supplied string reaches a drawing tool as code (issue 30, class 1).

Before: the output path was pasted into gnuplot's `set output '<the path>'` (p04-short-reads,
poll-scaling, tcplab_pkt's SYN plot) and given to mscgen as -o, so
`./run.sh --out "/tmp/x/gp';system('touch PWNED');'" p04-short-reads` exited 0 and created
PWNED (as root), and a '?' in --out made mscgen write its SVG outside it (it cuts -o at '?').
The kernel release, read from raw/<unit>/machine.txt, was pasted the same way (in a
double-quoted gnuplot string, where `backquotes` run).  Now a tool runs in a private directory
and writes a fixed name there (tcplab.tool_svg), and strings go through tcplab.gnuplot_str.

Three layers, from cheap to real:
- every report that draws, replayed on the committed host reference into an --out whose name
  holds the characters below: the same files, byte for byte, as the committed ones, and
  nothing created anywhere else (no root; every picture-drawing report, every kind of picture);
- a crafted raw/ whose kernel release is gnuplot code: nothing runs, the picture is drawn;
- run.sh itself, as root, with such an --out, on one unit of each kind of picture:
  p04-short-reads (its own gnuplot plot), poll-scaling --quick (its own gnuplot plot),
  p01-synretry (an mscgen ladder and tcplab_pkt's gnuplot SYN plot) and p01-wire-connect (a
  wire unit's mscgen ladder, tcplab_wire): it succeeds or refuses the name in one line before
  it starts, every picture lands inside --out, nothing is created outside it, no payload runs.
"""
import os
import shutil
import subprocess

import pytest

from conftest import TOP
import tcplab

PY = "/usr/bin/python3"
RUN = os.path.join(TOP, "run.sh")
HOST_REF = os.path.join(TOP, "outputs", "6.18.44-fc-v1045")
PAYLOADS = ("PWNED", "DOLLAR", "BACKQUOTE")   # what the names below make, if run as code

# --out names: the characters, each in one name or another.  A payload creates its own
# file in the current directory of whatever interprets it.
NAMES = {
    "quotes": "gp';system('touch PWNED');'\"$(touch DOLLAR)`touch BACKQUOTE`; x",
    "globs": "g?[*]% é名\\n100%s",
    "question mark": "pic?x",
}
NEWLINE = "a\nb"


def tree(root):
    """Every path under root (relative), directories with a trailing /."""
    out = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        out.update(os.path.join(rel, x) + "/" for x in dirs)
        out.update(os.path.join(rel, x) for x in files)
    return out


def no_payload_ran(root):
    hit = [p for p in tree(root) if os.path.basename(p) in PAYLOADS]
    assert not hit, f"a payload ran: {hit}"


def drawing_reports():
    """{report: its units} of every report whose committed host output has a picture."""
    svgs = [f for f in os.listdir(HOST_REF) if f.endswith(".svg")]
    by_report = {}
    for u in tcplab.read_units():
        if u["report"] and os.path.isdir(os.path.join(HOST_REF, "raw", u["unit"])):
            by_report.setdefault(u["report"], []).append(u["unit"])
    return {r: us for r, us in sorted(by_report.items())
            if any(s.startswith(r) or any(s.startswith(u) for u in us) for s in svgs)}


DRAWING = drawing_reports()


def replay(report, units, raw_from, out, cwd):
    raw = os.path.join(os.path.dirname(out), "raw-" + report)
    os.makedirs(raw, exist_ok=True)
    for u in units:
        if not os.path.lexists(os.path.join(raw, u)):
            os.symlink(os.path.join(raw_from, u), os.path.join(raw, u))
    os.makedirs(out, exist_ok=True)
    return subprocess.run([PY, os.path.join(TOP, "experiments", report, report + ".py"), raw, out],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_reports_that_draw_are_found():
    """The replay below covers every kind of picture: gnuplot in p04-short-reads and
    poll-scaling, tcplab_pkt's SYN plot and mscgen ladders (p01-synretry), wire ladders."""
    for r in ("p04-short-reads", "poll-scaling", "p01-synretry", "p01-wire-connect", "p05-close"):
        assert r in DRAWING, sorted(DRAWING)


@pytest.mark.skipif(shutil.which("gnuplot") is None or shutil.which("mscgen") is None,
                    reason="gnuplot or mscgen not installed (make deps)")
# make test replays into "quotes" (the names that once ran as gnuplot code); "globs" and
# "question mark" (in "globs" too) in the full suite only (make check, CI's check-rest): every
# picture is now drawn in-process but the gnuplot ones, which get a fixed temporary name
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n != "quotes"
                                               else ()) for n in NAMES])
def test_every_report_draws_into_any_out_name(tmp_path, name):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    parent = tmp_path / "parent"
    parent.mkdir()
    out = str(parent / NAMES[name])
    failed = []
    for report, units in DRAWING.items():
        r = replay(report, units, os.path.join(HOST_REF, "raw"), out, cwd)
        if r.returncode != 0:
            failed.append(f"{report}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    assert not failed, failed
    made = sorted(f for f in os.listdir(out) if f.endswith(".svg"))
    committed = sorted(f for f in os.listdir(HOST_REF) if f.endswith(".svg"))
    assert made == committed
    for f in made:      # every picture inside --out, as committed, byte for byte
        with open(os.path.join(out, f), "rb") as a, open(os.path.join(HOST_REF, f), "rb") as b:
            assert a.read() == b.read(), f"{f} differs from the committed one"
    # nothing outside --out (the raw-* link directories are the test's own), nothing left inside
    assert sorted(os.listdir(parent)) == sorted([NAMES[name]] + [f"raw-{r}" for r in DRAWING])
    assert os.listdir(cwd) == []
    assert not [f for f in os.listdir(out) if ".tmp-" in f], os.listdir(out)
    no_payload_ran(tmp_path)


KERNELS = {
    "single quote": "6.18';system('touch${IFS}PWNED');'",
    "backquote": "6.18`touch${IFS}BACKQUOTE`",
    "both": "6.18'.system('touch${IFS}PWNED').'`touch${IFS}BACKQUOTE`",
}


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot not installed (make deps)")
@pytest.mark.parametrize("report,picture", [("p04-short-reads", "p04-short-reads.svg"),
                                            ("p01-synretry", "p01-synretry-syns.svg")])
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_kernel_release_in_raw_data_is_no_gnuplot_code(tmp_path, report, picture, kernel):
    """The kernel release comes from raw/<unit>/machine.txt, which a report reads from any
    directory it is given: it is a title, never code."""
    raw = tmp_path / "raw"
    for u in DRAWING[report]:
        shutil.copytree(os.path.join(HOST_REF, "raw", u), raw / u)
        for f in os.listdir(raw / u):
            if f.startswith("machine") and f.endswith(".txt"):
                p = raw / u / f
                p.write_text(p.read_text().replace("kernel=6.18.44-fc-v1045",
                                                   "kernel=" + KERNELS[kernel]))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = tmp_path / "out"
    r = replay(report, DRAWING[report], str(raw), str(out), cwd)
    assert r.returncode == 0, r.stderr
    no_payload_ran(tmp_path)
    assert os.listdir(cwd) == []
    assert (out / picture).exists(), (out / (report + ".txt")).read_text()[-600:]
    assert KERNELS[kernel].split("'")[0] in (out / picture).read_text(encoding="utf-8")


# ---- run.sh, as root, on one unit of each kind of picture ------------------------------------------

LIVE_UNITS = ["p04-short-reads", "poll-scaling", "p01-synretry", "p01-wire-connect"]
LIVE_PICTURES = ["p04-short-reads.svg", "poll-scaling.svg", "p01-synretry-ladder.svg",
                 "p01-synretry-syns.svg", "p01-wire-connect-ladder.svg"]


def run_sh(tmp_path, out_name):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / out_name
    state = tmp_path / "state"
    env = dict(os.environ, TCPLAB_STATE=str(state))
    r = subprocess.run([RUN, "--quick", "--out", str(out), *LIVE_UNITS], capture_output=True,
                       text=True, timeout=900, cwd=cwd, env=env)
    return r, cwd, parent, out


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("gnuplot") is None or shutil.which("mscgen") is None,
                    reason="gnuplot or mscgen not installed (make deps)")
# the replay above draws into both names; a live run.sh with the second: the full suite only
@pytest.mark.parametrize("name", ["quotes", pytest.param("globs", marks=pytest.mark.slow)])
def test_run_sh_draws_every_kind_of_picture_into_any_out_name(tmp_path, bindir, name):
    r, cwd, parent, out = run_sh(tmp_path, NAMES[name])
    assert r.returncode == 0, r.stderr[-3000:]
    assert os.listdir(parent) == [NAMES[name]]          # nothing beside --out
    assert os.listdir(cwd) == []                        # nor where run.sh was started
    no_payload_ran(tmp_path)
    for pic in LIVE_PICTURES:
        assert (out / pic).is_file() and (out / pic).stat().st_size > 0, pic
    for rep in ("p04-short-reads", "poll-scaling", "p01-synretry", "p01-wire-connect"):
        text = (out / (rep + ".txt")).read_text()
        for word in ("no picture", "no ladder svg", "no SYN schedule plot", "plot: gnuplot"):
            assert word not in text, f"{rep}.txt: {word}"
    assert not [f for f in os.listdir(out) if f.startswith(".")], os.listdir(out)
    # the units' logs went where run.sh meant (awk read no escape in the path)
    assert "awk" not in r.stderr, [x for x in r.stderr.splitlines() if "awk" in x]


def test_run_sh_refuses_a_newline_in_out_before_it_starts(tmp_path):
    r, cwd, parent, out = run_sh(tmp_path, NEWLINE)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.count("\n") == 1 and "newline" in r.stderr, r.stderr
    assert os.listdir(parent) == [] and os.listdir(cwd) == []
