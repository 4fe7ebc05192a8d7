"""What the tests of the p01 units share: a unit's outputs read back, a unit run by run.sh, and
a wire-fault report run on the raw files of a reference run (tests/data/reports/<unit>/).  The
runs that several experiments' tests read are session fixtures in tests/conftest.py."""
import importlib.util
import json
import os
import shutil
import subprocess

from conftest import TOP

RUN = os.path.join(TOP, "run.sh")
PY = "/usr/bin/python3"
EXP = os.path.join(TOP, "experiments")
DATA = os.path.join(TOP, "tests", "data", "reports")


def load(out, name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)


def text(out, unit):
    with open(os.path.join(out, unit + ".txt")) as f:
        return f.read()


def run_unit(d, *args, timeout=120):
    r = subprocess.run([RUN, "--out", str(d), *args], capture_output=True, text=True,
                       timeout=timeout)
    return r


def run_with_knobs(d, unit, knobs):
    """UNIT run by run.sh into d with --set NAME=VALUE for each of knobs, which must succeed;
    returns its .json, which must record those knobs."""
    r = run_unit(d, unit, *[a for k, v in knobs.items() for a in ("--set", f"{k}={v}")])
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(d, unit)
    assert j["knobs"] == knobs
    return j


def unit_out(tmp_path_factory, unit):
    """UNIT run once by run.sh into a fresh directory, which must succeed."""
    d = tmp_path_factory.mktemp(unit)
    r = run_unit(d, unit)
    assert r.returncode == 0, r.stderr[-3000:]
    return d


def report_module(unit):
    spec = importlib.util.spec_from_file_location(unit.replace("-", "_"),
                                                  os.path.join(EXP, unit, unit + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def run_report(unit, rawroot, outdir):
    return subprocess.run([PY, os.path.join(EXP, unit, unit + ".py"), str(rawroot),
                           str(outdir)], capture_output=True, text=True, timeout=60)


def replay(tmp_path, unit, edit=None):
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(DATA, unit), raw / unit)
    if edit:
        edit(raw / unit)
    out = tmp_path / "out"
    out.mkdir()
    return run_report(unit, raw, out), out


def collect_and_report(ns, bindir, tmp_path, unit):
    """experiments/UNIT/UNIT.sh run by hand in namespace ns into tmp_path/raw/UNIT, then its
    report into tmp_path/out; both must succeed.  Returns tmp_path/out."""
    raw = tmp_path / "raw"
    env = dict(os.environ, TL_BIN=bindir)
    r = subprocess.run(["ip", "netns", "exec", ns, "sh", os.path.join(EXP, unit, unit + ".sh"),
                        raw / unit], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    r = run_report(unit, raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    return tmp_path / "out"
