"""p01-wire-connect below MTU 296 (docs/wire.md "Small MTUs", docs/p01-wire-connect.md): where the
SYN's MSS option is not min(MTU, 65535) - 40, the report says why beside it — the kernel's floors
(route.min_adv_mss 256 for the option, tcp_min_snd_mss 48 for what is sent, TCP_MIN_MSS 88 for
rcvmss) with what ss measured, and whether a full segment is then IP-fragmented; where it is,
the report is as before.  The lines are checked on the function and on a live run at MTU 68
(root, namespaces)."""
import importlib.util
import json
import os
import subprocess

import pytest

from conftest import TOP

RUN = os.path.join(TOP, "run.sh")


def report_module():
    path = os.path.join(TOP, "experiments", "p01-wire-connect", "p01-wire-connect.py")
    spec = importlib.util.spec_from_file_location("p01_wire_connect", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def socks(mss, rcvmss):
    return [{"mss": mss, "rcvmss": rcvmss}, {"mss": mss, "rcvmss": rcvmss}]


MTU68 = [
    "  why 256, not 28: each end announces at least net.ipv4.route.min_adv_mss (256 by default):",
    "    ipv4_default_advmss() in net/ipv4/route.c takes max(route MTU - 40, min_adv_mss)",
    "  what each end sends still follows the MTU: __tcp_mtu_to_mss() in net/ipv4/tcp_output.c takes",
    "    max(MTU - 40, net.ipv4.tcp_min_snd_mss 48) - 12 B of options = 36 (ss's mss below: 36)",
    "    so a full segment is 88 B, IP-fragmented on this MTU 68 (docs/wire.md, \"Small MTUs\")",
    "  ss's rcvmss 88: the receiver's first guess of the peer's MSS is at least TCP_MIN_MSS 88",
    "    (tcp_initialize_rcv_mss() in net/ipv4/tcp_input.c)"]


def test_the_floor_lines_at_mtu_68():
    assert report_module().mss_floor_lines(68, 256, socks(36, 88), True) == MTU68


def test_at_mtu_200_no_fragmentation_is_claimed():
    """160 is above tcp_min_snd_mss: a full segment is 148 + 52 = 200 B, it fits."""
    lines = report_module().mss_floor_lines(200, 256, socks(148, 88), True)
    assert lines[0].startswith("  why 256, not 160: ")
    assert "- 12 B of options = 148 (ss's mss below: 148)" in lines[3]
    assert not any("IP-fragmented" in ln for ln in lines)


@pytest.mark.parametrize("mtu,syn", [(1500, 1460), (9000, 8960), (65536, 65495), (296, 256)])
def test_nothing_to_explain_where_the_mss_is_mtu_less_40(mtu, syn):
    """The committed references (1500, loopback) keep their text byte for byte."""
    assert report_module().mss_floor_lines(mtu, syn, socks(syn - 12, 536), True) == []


def test_a_value_the_floors_do_not_explain_is_said_so():
    assert report_module().mss_floor_lines(1500, 1400, socks(1388, 536), True) == [
        "  the SYN's MSS 1400 is neither MTU - 40 (1460) nor the kernel's floor 256: not "
        "explained here"]


@pytest.mark.netns
def test_live_at_mtu_68_the_report_says_why_256(tmp_path, bindir):
    r = subprocess.run([RUN, "--out", str(tmp_path), "--mtu", "68", "p01-wire-connect"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp_path / "p01-wire-connect.json") as f:
        j = json.load(f)
    assert j["mtu"] == 68 and j["wire"]["mss"] == {"syn": 256, "synack": 256}
    assert {(s["mss"], s["rcvmss"], s["pmtu"]) for s in j["wire"]["ss"]} == {(36, 88, 68)}
    text = (tmp_path / "p01-wire-connect.txt").read_text().splitlines()
    at = text.index("  min(MTU, 65535) - 40         28     65495")
    assert text[at + 1:at + 1 + len(MTU68)] == MTU68
