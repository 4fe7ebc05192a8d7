"""The wire (experiments/lib/wire.sh, docs/wire.md): a client and a server namespace joined by a
veth pair, faults loaded with nft, netem where the kernel has it; run.sh's netns "wire" units,
--mtu, and skipped units.  Cross-checked against `ip` (link, addresses, neighbours) and
`nft list ruleset` (each rule as the kernel holds it, with its counter)."""
import os
import re
import subprocess
import textwrap

import pytest

import lab_proc
from conftest import TOP

WIRE = os.path.join(TOP, "experiments", "lib", "wire.sh")
RUN = os.path.join(TOP, "run.sh")
pytestmark = pytest.mark.netns


def sh(*argv, ns=None, check=False):
    argv = list(argv)
    if ns:
        argv = ["ip", "netns", "exec", ns] + argv
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture
def pair():
    """Two fresh namespaces (as run.sh makes them), not yet wired."""
    with lab_proc.netns("tcplab-wt-c") as c, lab_proc.netns("tcplab-wt-s") as s:
        yield c, s


@pytest.fixture
def wired():
    """A wire made as run.sh makes one (lab_proc.wire)."""
    with lab_proc.wire("tcplab-wt") as pair:
        yield pair


def link(ns, dev):
    out = sh("ip", "-o", "link", "show", "dev", dev, ns=ns).stdout
    assert out, f"no {dev} in {ns}"
    return out


def test_create_makes_an_addressed_pair_up_with_permanent_neighbours(pair):
    c, s = pair
    r = sh(WIRE, "create", c, s, "9000")
    assert r.returncode == 0, r.stderr
    for ns, dev, me, peer in ((c, "veth-c", "192.0.2.1", "192.0.2.2"),
                              (s, "veth-s", "192.0.2.2", "192.0.2.1")):
        line = link(ns, dev)
        assert " mtu 9000 " in line and " state UP " in line and "LOWER_UP" in line, line
        addrs = sh("ip", "-o", "-4", "addr", "show", "dev", dev, ns=ns).stdout
        assert f"inet {me}/24 " in addrs
        neigh = sh("ip", "neigh", "show", "dev", dev, ns=ns).stdout
        assert re.search(rf"^{re.escape(peer)} lladdr \S+ PERMANENT", neigh, re.M), neigh
        # IPv6 off on the pair: no router solicitations or DAD among the experiment's packets
        assert "inet6" not in sh("ip", "-o", "addr", "show", "dev", dev, ns=ns).stdout
    # the caller's namespace never held either end
    host = sh("ip", "-o", "link", "show").stdout
    assert "veth-c" not in host and "veth-s" not in host


def test_a_connection_crosses_the_wire_and_only_the_wire(wired, bindir):
    c, s = wired
    with lab_proc.Proc(s, [os.path.join(bindir, "listener"),
                           "-a", "192.0.2.2", "-p", "21900", "-m", "close"]) as lst:
        lst.wait_line("ready ")
        r = sh(os.path.join(bindir, "connect_block"), "-a", "192.0.2.2", "-p", "21900", ns=c)
        assert "result=ok" in r.stdout and "local=192.0.2.1:" in r.stdout, r.stdout + r.stderr
    # the route to the server is the pair's, not loopback
    route = sh("ip", "-o", "route", "get", "192.0.2.2", ns=c).stdout
    assert "dev veth-c" in route, route


@pytest.mark.parametrize("mtu", ["0", "67", "65536", "70000", "abc", "", "015", "1e3"])
def test_bad_mtu_is_one_line_and_makes_nothing(pair, mtu):
    c, s = pair
    r = sh(WIRE, "create", c, s, mtu) if mtu else sh(WIRE, "check-mtu", mtu)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and "68..65535" in r.stderr, r.stderr
    assert "veth" not in sh("ip", "-o", "link", "show", ns=c).stdout


def test_run_sh_mtu_option_is_checked_before_anything_runs(tmp_path):
    for bad in ("0", "70000", "x", "-1"):
        r = subprocess.run([RUN, "--out", str(tmp_path / "o"), "--mtu", bad, "p01-machine"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "68..65535" in r.stderr, r.stderr
        assert not (tmp_path / "o").exists()
    r = subprocess.run([RUN, "--out", str(tmp_path / "o"), "--mtu", "9000", "p01-machine"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "none of these units runs on the wire" in r.stderr, r.stderr


FAULTS = [
    # (action, match, the rule as nft lists it)
    ("drop", "tcp dport 21901", r"tcp dport 21901 counter packets 0 bytes 0 drop"),
    ("drop-first:2", "tcp sport 21901 tcp flags syn,ack / syn,ack",
     r"tcp flags syn,ack / syn,ack numgen inc mod 1000000000 < 2 counter packets 0 bytes 0 drop"),
    ("drop-nth:3", "tcp dport 21901", r"numgen inc mod 1000000000 2 counter packets 0 bytes 0 drop"),
    ("reject:host-unreachable", "tcp dport 21901", r"reject with icmp host-unreachable"),
    ("reject:port-unreachable", "tcp dport 21901", r"reject with icmp port-unreachable"),
    ("reject:admin-prohibited", "tcp dport 21901", r"reject with icmp admin-prohibited"),
    ("reject:tcp-reset", "tcp dport 21901", r"tcp dport 21901 counter packets 0 bytes 0 reject with tcp reset"),
]


@pytest.mark.parametrize("action,match,listed", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_the_rule_nft_lists(netns, action, match, listed):
    r = sh(WIRE, "fault", netns, "in", action, *match.split())
    assert r.returncode == 0, r.stderr
    rules = sh("nft", "list", "ruleset", ns=netns).stdout
    assert "table inet tcplab" in rules
    assert re.search(listed, rules), rules


BAD_FAULTS = [
    (["in", "drop", "tcp", "dport", "5", "bogus"], 1, "nft refused"),
    (["in", "drop", "tcp", "dport", "70000"], 1, "nft refused"),
    (["sideways", "drop", "tcp"], 2, "want in or out"),
    (["in", "drop-first:0", "tcp"], 2, "want a count"),
    (["in", "drop-first:x", "tcp"], 2, "want a count"),
    (["in", "drop-nth:99999999", "tcp"], 2, "want a count"),
    (["in", "reject:teapot", "tcp"], 2, "action 'reject:teapot'"),
    (["in", "drop"], 2, "needs a match"),
]


@pytest.mark.parametrize("args,status,says", BAD_FAULTS, ids=[" ".join(b[0]) for b in BAD_FAULTS])
def test_a_fault_nft_or_wire_sh_refuses_is_one_line_and_leaves_no_rule(netns, args, status, says):
    r = sh(WIRE, "fault", netns, *args)
    assert r.returncode == status, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    # nft -f is one transaction: a refused rule leaves no table either
    assert sh("nft", "list", "ruleset", ns=netns).stdout.strip() == ""


def test_drop_first_drops_exactly_n_then_passes(wired, bindir):
    """Count-based, so repeatable: drop-first:2 on the client's outgoing SYNs makes the kernel
    send 3 (TCP_SYNCNT 3 allows 4), and the rule's counter says 2.  The third SYN leaves at the
    time the kernel's schedule says (tcplab.expected_syn_schedule: 2 s with
    tcp_syn_linear_timeouts, 3 s without)."""
    import tcplab
    c, s = wired
    lin = sh("sysctl", "-n", "net.ipv4.tcp_syn_linear_timeouts", ns=c)
    third = tcplab.expected_syn_schedule(3, int(lin.stdout) if lin.returncode == 0 else None)[0][1]
    assert sh(WIRE, "fault", c, "out", "drop-first:2", "tcp", "dport", "21902",
              "tcp", "flags", "syn", "/", "syn,ack").returncode == 0
    with lab_proc.Proc(s, [os.path.join(bindir, "listener"),
                           "-a", "192.0.2.2", "-p", "21902", "-m", "close"]) as lst:
        lst.wait_line("ready ")
        r = sh(os.path.join(bindir, "connect_block"), "-a", "192.0.2.2", "-p", "21902", "-s", "3", ns=c)
    assert "result=ok" in r.stdout, r.stdout + r.stderr
    elapsed = float(re.search(r"elapsed_s=([0-9.]+)", r.stdout).group(1))
    assert third - 0.05 < elapsed < third + 0.5, (elapsed, third)
    rules = sh("nft", "list", "ruleset", ns=c).stdout
    assert "< 2 counter packets 2 " in rules, rules


def write_units(d, lines, scripts):
    """lab_proc.experiments in D (a folder named exp): the table LINES, and each unit's collect
    script a body of SCRIPTS after COLLECT_INIT."""
    assert d.name == "exp"
    lab_proc.experiments(d.parent, "\n".join(lines) + "\n", {
        (name, f"{name}.sh"): lab_proc.COLLECT_INIT + textwrap.dedent(body) for name, body in scripts.items()})


def run(exp, out, *args):
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(exp))
    return subprocess.run([RUN, "--out", str(out), *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_a_wire_unit_runs_in_the_client_namespace_with_the_server_named(tmp_path):
    exp, out = tmp_path / "exp", tmp_path / "out"
    write_units(exp, ["t-wire - named run no 1 30 yes wire:4000 no"], {"t-wire": """
        echo "wire=$TL_WIRE mtu=$TL_MTU me=$TL_CLIENT_ADDR peer=$TL_SERVER_ADDR" > "$RAW/env.txt"
        ip -o link show dev "$TL_CLIENT_IF" > "$RAW/client-link.txt"
        tl_srv ip -o link show dev "$TL_SERVER_IF" > "$RAW/server-link.txt"
        tl_fault server in drop tcp dport 21903
        tl_wire_record
    """})
    r = run(exp, out, "t-wire")
    assert r.returncode == 0, r.stderr
    raw = out / "raw" / "t-wire"
    assert (raw / "env.txt").read_text() == "wire=1 mtu=4000 me=192.0.2.1 peer=192.0.2.2\n"
    assert " mtu 4000 " in (raw / "client-link.txt").read_text()
    assert " mtu 4000 " in (raw / "server-link.txt").read_text()
    assert "tcp dport 21903 counter packets 0 bytes 0 drop" in (raw / "nft-server.txt").read_text()
    wire = (raw / "wire.txt").read_text()
    assert "## client side (veth-c)" in wire and "## server side (veth-s)" in wire
    assert wire.count("qdisc noqueue") >= 2 and "tcp dport 21903" in wire
    # --mtu overrides the table's MTU
    r = run(exp, out, "--mtu", "1280", "t-wire")
    assert r.returncode == 0, r.stderr
    assert "mtu=1280" in (raw / "env.txt").read_text()
    # both namespaces are gone with the unit
    assert not [n for n in sh("ip", "netns", "list").stdout.split() if n.endswith("-t-wire-s")]


def test_a_fault_nft_refuses_fails_the_unit_with_nfts_reason(tmp_path):
    exp, out = tmp_path / "exp", tmp_path / "out"
    write_units(exp, ["t-badfault - named run no 1 30 yes wire no"], {"t-badfault": """
        tl_fault server in drop tcp dport 21904 bogus
        echo reached > "$RAW/after.txt"
    """})
    r = run(exp, out, "t-badfault")
    assert r.returncode == 1, r.stderr
    status = (out / "raw" / "t-badfault" / "status.txt").read_text()
    assert status.startswith("failed: nft refused 'drop tcp dport 21904 bogus': Error: syntax error"), status
    assert not (out / "raw" / "t-badfault" / "after.txt").exists()


def test_netem_on_a_kernel_without_it_skips_the_unit_and_the_run_still_passes(tmp_path):
    have = sh("sh", "-c", "grep -qw sch_netem /proc/modules || modinfo sch_netem").returncode == 0
    if have:
        pytest.skip("this kernel has sch_netem: the skip path cannot be seen here")
    exp, out = tmp_path / "exp", tmp_path / "out"
    write_units(exp, ["t-netem - named run no 1 30 yes wire no",
                      "t-plain - named run no 1 30 no 1 no"],
                {"t-netem": "tl_netem client delay 10ms\necho reached > \"$RAW/after.txt\"\n",
                 "t-plain": "echo ok > \"$RAW/ok.txt\"\n"})
    r = run(exp, out, "t-netem", "t-plain")
    assert r.returncode == 0, r.stderr
    assert "t-netem: skipped: this kernel has no sch_netem" in r.stderr
    assert "1 unit(s) ran, 0 failed, 1 skipped" in r.stderr
    status = (out / "raw" / "t-netem" / "status.txt").read_text()
    assert status.startswith("skipped: this kernel has no sch_netem"), status
    assert not (out / "raw" / "t-netem" / "after.txt").exists()
    assert (out / "raw" / "t-plain" / "ok.txt").exists()


@pytest.mark.parametrize("netns,says", [("wire:0", "the MTU must be 68..65535"),
                                        ("wire:70000", "the MTU must be 68..65535"),
                                        ("wire:", "want 1, 2, wire or wire:MTU"),
                                        ("veth", "want 1, 2, wire or wire:MTU")])
def test_a_bad_wire_in_the_unit_table_is_one_line(tmp_path, netns, says):
    exp = tmp_path / "exp"
    write_units(exp, [f"t-w - named run no 1 30 yes {netns} no"], {"t-w": ""})
    r = run(exp, tmp_path / "out", "t-w")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
