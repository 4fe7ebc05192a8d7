"""p01-wire-netem end to end: skipped without sch_netem, else the RTT it adds measured; and its
report on the raw files of a wire run without netem (conftest.connect_out)."""
import os
import shutil
import subprocess

import pytest

from conftest import TOP
from unit_live import PY, load, run_unit

pytestmark = pytest.mark.netns


def test_wire_netem_skips_without_sch_netem_or_measures_the_rtt(tmp_path, bindir):
    r = run_unit(tmp_path, "p01-wire-netem")
    assert r.returncode == 0, r.stderr[-3000:]
    status = tmp_path / "raw" / "p01-wire-netem" / "status.txt"
    if status.exists():
        why = status.read_text()
        assert why.startswith("skipped: ") and "sch_netem" in why and why.count("\n") == 1
        assert "1 skipped" in r.stderr and "p01-wire-netem: skipped:" in r.stderr
        # run.sh ran its report, which says it did not run, and which kernel said so
        assert "wrote " in r.stderr and "p01-wire-netem.txt" in r.stderr
        text = (tmp_path / "p01-wire-netem.txt").read_text()
        assert text.startswith("p01-wire-netem: not run on this kernel: " + why[len("skipped: "):])
        j = load(tmp_path, "p01-wire-netem")
        assert j["skipped"] == why[len("skipped: "):].strip() and j["kernel"] == os.uname().release
    else:
        j = load(tmp_path, "p01-wire-netem")
        rtt = 2 * j["delay_ms"]
        assert j["result"] == "ok" and j["skipped"] is None
        assert rtt <= j["elapsed_s"] * 1e3 <= rtt + 50
        assert rtt <= j["syn_synack_ms"] + 1 and j["rtt_ms"] is not None and j["rtt_ms"] >= rtt


def test_wire_netem_report_reads_a_run(connect_out, tmp_path):
    """The ran branch, on real raw files of a wire run without netem (p01-wire-connect's, and
    delay 0): it must read them and say what the kernel showed."""
    src = os.path.join(connect_out, "raw", "p01-wire-connect")
    dst = tmp_path / "raw" / "p01-wire-netem"
    dst.mkdir(parents=True)
    for f in ("client.txt", "capture.txt", "ss-client.txt", "machine.txt", "wire.txt",
              "counters-delta.txt", "collected-at.txt"):
        shutil.copy(os.path.join(src, f), dst / f)
    (dst / "delay-ms.txt").write_text("0\n")
    r = subprocess.run([PY, os.path.join(TOP, "experiments", "p01-wire-netem", "p01-wire-netem.py"),
                        str(tmp_path / "raw"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = load(tmp_path, "p01-wire-netem")
    w = load(connect_out, "p01-wire-connect")
    assert j["elapsed_s"] == w["elapsed_s"] and j["result"] == "ok" and j["delay_ms"] == 0
    assert j["rtt_ms"] == w["wire"]["ss"][0]["rtt_ms"]
    (dst / "capture.txt").write_text("ready t_ns=1\n")     # cut off: no end line
    r = subprocess.run([PY, os.path.join(TOP, "experiments", "p01-wire-netem", "p01-wire-netem.py"),
                        str(tmp_path / "raw"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "capture.txt" in r.stderr


# The reports on bad raw input: tests/test_badinput_reports.py (the wire units' rows of its table).
