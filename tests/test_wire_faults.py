"""The three wire-fault units together: p01-icmp-unreachable, p01-rst-middlebox,
p01-close-synsent-late.  Each unit's own kernel facts are in tests/test_<unit>.py; here what
holds for all three: live (root, netns; their shared run, conftest.wire_faults_out), every
capture complete and every ladder drawn; replay (no root), the reports on a reference run's
raw files (tests/data/reports/<unit>/), their table rows, strict JSON and bad raw input."""
import copy
import json
import os

import pytest

from conftest import WIRE_FAULT_UNITS as UNITS

import tcplab as t
import tcplab_pkt as pkt
from unit_live import EXP, load, replay, text


@pytest.mark.netns
def test_every_capture_is_complete_and_every_ladder_drawn(wire_faults_out):
    raw = os.path.join(wire_faults_out, "raw")
    caps = [os.path.join(raw, u, n) for u in UNITS for n in sorted(os.listdir(os.path.join(raw, u)))
            if n.endswith("capture.txt")]
    assert len(caps) == 4 + 2 + 1
    for c in caps:
        cap = pkt.read_capture(c)
        assert cap["end"].int("dropped") == 0 and cap["end"].int("ifdropped") == 0, c
        assert os.path.getsize(c[:-4] + ".pcap") > 24, c       # more than a pcap file header
    for u in UNITS:
        with open(os.path.join(wire_faults_out, f"{u}-ladder.svg")) as f:
            assert "<svg" in f.read(4096)
        assert load(wire_faults_out, u)["ladder_svg"] == f"{u}-ladder.svg"


@pytest.mark.parametrize("unit", UNITS)
def test_the_reports_read_a_reference_run(tmp_path, unit):
    r, out = replay(tmp_path, unit)
    assert r.returncode == 0, r.stderr
    j = load(out, unit)
    assert j["kernel"] == "6.18.44-fc-v1045"
    lines = text(out, unit).splitlines()
    assert "veth pair, MTU 1500" in lines[1]
    assert max(len(x) for x in lines if x.startswith(" ") and "|" in x) <= 100   # the ladder


@pytest.mark.parametrize("unit,name", [("p01-icmp-unreachable", "host-unreachable-capture.txt"),
                                       ("p01-rst-middlebox", "nft-server-counters-delta.txt"),
                                       ("p01-close-synsent-late", "wire.txt")])
def test_a_missing_raw_file_is_one_line_and_nothing_written(tmp_path, unit, name):
    r, out = replay(tmp_path, unit, lambda d: os.unlink(d / name))
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and name in r.stderr
    assert os.listdir(out) == []


def test_the_units_are_in_the_table_on_the_wire():
    units = {u["unit"]: u for u in t.read_units(os.path.join(EXP, "units"))}
    for u in UNITS:
        assert units[u]["netns"] == "wire" and units[u]["report"] == u
        assert units[u]["qemu"]  # the guest builds the wire too
        # and without root, as root of a user namespace (docs/design.md, "Without root")
        assert not units[u]["root"] or u == "p01-wire-netem", u


def test_the_json_is_strict_and_keeps_no_private_keys(tmp_path):
    """The JSON of each report is strict JSON (no NaN) and carries no private keys."""
    for u in UNITS:
        r, out = replay(tmp_path / u, u)
        assert r.returncode == 0, r.stderr
        j = load(out, u)
        s = json.dumps(copy.deepcopy(j))
        assert '"_at"' not in s and "NaN" not in s


def _replace_in(name, old, new):
    def edit(d):
        path = d / name
        s = path.read_text()
        assert old in s, (name, old)
        path.write_text(s.replace(old, new, 1))
    return edit


@pytest.mark.parametrize("unit,name,old,new", [
    ("p01-icmp-unreachable", "port-unreachable-client.txt", "start_ns=", "start_ns=x"),
    ("p01-icmp-unreachable", "admin-prohibited-client.txt", "elapsed_s=", "elapsed_s=-"),
    ("p01-icmp-unreachable", "host-unreachable-capture.txt", "code_n=1 ", "code_n=1x "),
    ("p01-icmp-unreachable", "host-unreachable-server-counters-delta.txt", "IcmpOutDestUnreachs +2",
     "IcmpOutDestUnreachs +2 extra"),
    ("p01-icmp-unreachable", "port-unreachable-sockwatch.txt", "end t_ns=", "xend t_ns="),
    ("p01-rst-middlebox", "kernel-capture.txt", "flags=RA", "flags=R?"),
    ("p01-rst-middlebox", "nft-counters-delta.txt", "TcpAttemptFails +1", "TcpAttemptFails 1.5"),
    ("p01-rst-middlebox", "kernel-client.txt", "result=", "nothing="),
    ("p01-close-synsent-late", "capture.txt", "ready t_ns=", "t_s=0 ready t_ns="),
    ("p01-close-synsent-late", "client.txt", "closed_ns=", "closed_ns=0x"),
    ("p01-close-synsent-late", "server-counters-delta.txt", "TcpExtEmbryonicRsts +1", "TcpExtEmbryonicRsts"),
    ("p01-close-synsent-late", "wire.txt", "mtu 1500", "mtu x"),
])
def test_bad_raw_input_is_one_line_naming_the_file(tmp_path, unit, name, old, new):
    r, out = replay(tmp_path, unit, _replace_in(name, old, new))
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert name in lines[0], lines[0]
    assert os.listdir(out) == []
