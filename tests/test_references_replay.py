"""Every committed reference set replays: for each outputs/<release>/ (the host's and the guests'),
each report whose units left a raw/ directory there is run again on that raw/ (no root, no
kernel needed) and must write its .txt, .json and pictures byte for byte as committed.  So a
reference is what its raw/ says, and a report changed since it was made shows up here."""
import os
import subprocess
import sys

import pytest

from conftest import TOP, reference_dirs
import tcplab

OUTPUTS = os.path.join(TOP, "outputs")
PY = "/usr/bin/python3"


def replayable(refdir):
    """(report, its units with a raw/ directory here) for every report committed in refdir."""
    by_report = {}
    for u in tcplab.read_units():
        if u["report"] and os.path.isdir(os.path.join(refdir, "raw", u["unit"])):
            by_report.setdefault(u["report"], []).append(u["unit"])
    return sorted((r, us) for r, us in by_report.items()
                  if os.path.exists(os.path.join(refdir, r + ".json")))


CASES = [(d, r) for d in reference_dirs() for r, _ in replayable(os.path.join(OUTPUTS, d))]


def replay(refdir, report, out):
    """The report run on a raw/ holding only this report's units' directories (links)."""
    raw = out / "raw"
    raw.mkdir()
    for unit in dict(replayable(refdir))[report]:
        os.symlink(os.path.join(refdir, "raw", unit), raw / unit)
    got = out / "got"
    got.mkdir()
    p = subprocess.run([PY, os.path.join(TOP, "experiments", report, report + ".py"), str(raw), str(got)],
                       capture_output=True, text=True, timeout=120)
    return p, got


def differing(refdir, got):
    """The files the replay wrote that are missing from refdir or differ from it."""
    bad = []
    for name in sorted(os.listdir(got)):
        committed = os.path.join(refdir, name)
        with open(got / name, "rb") as f:
            made = f.read()
        if not os.path.exists(committed):
            bad.append(f"{name}: not committed")
            continue
        with open(committed, "rb") as f:
            if f.read() != made:
                bad.append(f"{name}: differs")
    return bad


def test_the_five_kernels_have_reference_sets():
    for series in ("5.10.", "6.1.", "6.12.", "6.18.", "7.2."):
        assert any(d.startswith(series) for d in reference_dirs()), series


@pytest.mark.parametrize("ref,report", CASES, ids=[f"{d}:{r}" for d, r in CASES])
def test_a_committed_reference_replays_byte_for_byte(ref, report, tmp_path):
    refdir = os.path.join(OUTPUTS, ref)
    for unit in dict(replayable(refdir))[report]:
        why = tcplab.unit_status(os.path.join(refdir, "raw", unit)) or ""
        if why.startswith(("failed", "timed out")):   # run.sh wrote its outputs, not the report
            pytest.skip(f"{unit} did not run to its end there: {why}")
    p, got = replay(refdir, report, tmp_path)
    # and cleanly: nothing on stderr, no warning (for the guests' older kernels too: this is the
    # report run test_reliability_oldkernel.py once made a second time)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert os.path.exists(got / (report + ".txt")) and os.path.exists(got / (report + ".json"))
    assert differing(refdir, got) == [], f"outputs/{ref}/{report}.* is not what the report makes of its raw/ now"


def test_a_changed_reference_is_caught(tmp_path):
    """The comparison can fail: a copy of one committed .txt with one byte changed differs."""
    ref, report = next((d, r) for d, r in CASES if r == "p01-synretry")
    refdir = os.path.join(OUTPUTS, ref)
    p, got = replay(refdir, report, tmp_path)
    # and cleanly: nothing on stderr, no warning (for the guests' older kernels too: this is the
    # report run test_reliability_oldkernel.py once made a second time)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    fake = tmp_path / "fake"
    fake.mkdir()
    for name in os.listdir(got):
        with open(os.path.join(refdir, name), "rb") as f:
            data = f.read()
        if name == report + ".txt":
            data = data.replace(b"ETIMEDOUT", b"ECONNREFUSED", 1)
        (fake / name).write_bytes(data)
    assert differing(str(fake), got) == [f"{report}.txt: differs"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
