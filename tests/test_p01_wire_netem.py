"""p01-wire-netem end to end: skipped without sch_netem, else the RTT it adds measured; and its
report on the raw files of a wire run without netem (conftest.connect_out)."""
import json
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
        check_delays(load(tmp_path, "p01-wire-netem"))


def check_delays(j):
    """What netem's delay d on each end makes of a handshake: connect() one round trip (2 d, and
    at most 50 ms of a slow CPU more); the kernel's first RTT sample at least 2 d; but the capture
    on veth-c sees the SYN only once the client's netem released it, so its SYN to SYN-ACK is
    one delay (the server's), not two (dev_queue_xmit_nit() runs after the qdisc)."""
    d = j["delay_ms"]
    assert j["result"] == "ok" and j["skipped"] is None and d == 50
    assert 2 * d <= j["elapsed_s"] * 1e3 <= 2 * d + 50
    assert d <= j["syn_synack_ms"] <= d + 50
    assert j["rtt_ms"] is not None and j["rtt_ms"] >= 2 * d


@pytest.mark.parametrize("release", sorted(r for r in os.listdir(os.path.join(TOP, "outputs"))
                                           if os.path.isdir(os.path.join(TOP, "outputs", r))))
def test_every_reference_ran_or_skipped_for_want_of_netem(release):
    """The guests' kernels ship sch_netem.ko and ran the unit: their figures obey the delays;
    the host's has none and says so in one line."""
    with open(os.path.join(TOP, "outputs", release, "p01-wire-netem.json")) as f:
        j = json.load(f)
    if j["skipped"] is not None:
        assert "sch_netem" in j["skipped"] and j["result"] is None
    else:
        check_delays(j)


def test_a_capture_before_the_qdisc_would_fail_the_check():
    """The check can fail: a SYN to SYN-ACK of two delays (a capture that saw the SYN leave
    TCP, not the device) is not what the kernel does."""
    with open(os.path.join(TOP, "outputs", "7.2.13+deb14-cloud-amd64", "p01-wire-netem.json")) as f:
        j = json.load(f)
    check_delays(j)
    with pytest.raises(AssertionError):
        check_delays({**j, "syn_synack_ms": 101.0})


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
