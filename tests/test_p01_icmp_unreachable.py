"""p01-icmp-unreachable: live (root, netns; the shared run of the three wire-fault units,
conftest.wire_faults_out), the ICMP behaviour is one documented for this kernel and the
report names it, and every ICMP quotes the client's SYN at seq 0.  Replay (no root): the
report on a reference run's raw files (tests/data/reports/p01-icmp-unreachable/), and the
ICMP classifier on cases this kernel did not show, so a verdict can fail."""
import os
import re
import shutil

import pytest

from unit_live import DATA, load, replay, report_module, text

ICMP_ERRNO = {"host-unreachable": "EHOSTUNREACH", "port-unreachable": "ECONNREFUSED",
              "admin-prohibited": "EHOSTUNREACH"}


@pytest.mark.netns
def test_icmp_behaviour_is_one_documented_for_this_kernel_and_the_report_says_which(wire_faults_out):
    j = load(wire_faults_out, "p01-icmp-unreachable")
    txt = text(wire_faults_out, "p01-icmp-unreachable")
    assert j["kernel"] == os.uname().release
    assert [p["part"] for p in j["parts"].values()] == ["host-unreachable", "port-unreachable",
                                               "admin-prohibited", "port-unreachable-late"]
    for p in j["parts"].values():
        assert p["behaviour"] in j["documented"], p
        assert f"behaviour: {p['behaviour']}: " in txt
        assert p["errno"] == ICMP_ERRNO[p["code"]]
        icmp = [x for x in p["segments"] if x["kind"] == "icmp"]
        locked = p["counters_client"]["TcpExtLockDroppedIcmps"]
        dropped = 1 if p["first_syn_dropped"] else 0
        if p["behaviour"] == "soft-then-abort":
            # the first ICMP found connect() holding the socket; the retransmission's aborted it
            assert len(icmp) == 2 and p["syns"] == 2 and locked == 1
            gap = icmp[1]["t_ms"] - icmp[0]["t_ms"]
            assert 900 <= gap <= 1600, gap          # the initial RTO, 1 s
            assert 0.9 <= p["elapsed_s"] <= 1.7
        else:                                         # abort-first
            assert len(icmp) == 1 and p["syns"] == 1 + dropped and locked == 0
            assert (0.9 <= p["elapsed_s"] <= 1.7) if dropped else p["elapsed_s"] < 0.2
        # one ICMP per SYN that reached nft's reject, counted on both sides
        assert p["counters_server"]["IcmpOutDestUnreachs"] == len(icmp)
        assert p["counters_client"]["IcmpInDestUnreachs"] == len(icmp)
        assert p["counters_client"]["TcpAttemptFails"] == 1
        assert p["counters_client"]["TcpRetransSegs"] == p["syns"] - 1
    # the control: the only ICMP answers the timer's retransmission, sent while connect() sleeps
    # without the socket lock, and it aborts the socket at once: the lock is what made the
    # difference, not the code
    late = list(j["parts"].values())[3]
    assert late["behaviour"] == "abort-first" and late["first_syn_dropped"]


@pytest.mark.netns
def test_each_icmp_quotes_the_clients_syn_at_seq_0(wire_faults_out):
    j = load(wire_faults_out, "p01-icmp-unreachable")
    codes = {"host-unreachable": 1, "port-unreachable": 3, "admin-prohibited": 13}
    for p in j["parts"].values():
        icmp = [x for x in p["segments"] if x["kind"] == "icmp"]
        assert icmp and p["icmps_quote_syn"]
        for x in icmp:
            assert (x["type"], x["code_n"]) == (3, codes[p["code"]])
            assert x["quoted"]["flags"] == "S" and x["quoted"]["seq"] == 0
            assert x["quoted"]["src"] == p["client"] and x["src"] == "192.0.2.2"
        # as many ICMPs as the nft rule answered (its own counter), after the SYN it dropped
        with open(os.path.join(wire_faults_out, "raw", "p01-icmp-unreachable", f"{p['part']}-nft.txt")) as f:
            rules = f.read()
        m = re.search(r"counter packets ([0-9]+) bytes [0-9]+ reject", rules)
        assert m and int(m.group(1)) == len(icmp)
        m = re.search(r"< 1 counter packets ([0-9]+) bytes [0-9]+ drop", rules)
        assert (int(m.group(1)) if m else 0) == (1 if p["first_syn_dropped"] else 0)


def test_the_reference_run_showed_soft_then_abort_and_abort_first_once_the_lock_is_free(tmp_path):
    r, out = replay(tmp_path, "p01-icmp-unreachable")
    assert r.returncode == 0, r.stderr
    j = load(out, "p01-icmp-unreachable")
    assert [(p["part"], p["errno"], p["behaviour"]) for p in j["parts"].values()] == [
        ("host-unreachable", "EHOSTUNREACH", "soft-then-abort"),
        ("port-unreachable", "ECONNREFUSED", "soft-then-abort"),
        ("admin-prohibited", "EHOSTUNREACH", "soft-then-abort"),
        ("port-unreachable-late", "ECONNREFUSED", "abort-first")]
    assert "every part showed a behaviour documented for this kernel" in text(out, j["experiment"])


def _part(errno, elapsed_s, packets, locked, syns=3):
    return {"result": "error" if errno else "timeout", "errno": errno, "elapsed_s": elapsed_s,
            "expected_syns": syns, "packets": packets,
            "counters_client": {"TcpExtLockDroppedIcmps": locked}}


def _syn(ms):
    return {"kind": "tcp", "flags": "S", "t_ms": ms}


def _icmp(ms):
    return {"kind": "icmp", "t_ms": ms}


def test_the_expected_syn_count_follows_the_sysctls(tmp_path):
    """TCP_SYNCNT 2 with tcp_syn_linear_timeouts 4 (this kernel): 5 retransmissions, 6 SYNs,
    the last wait doubled and the give-up at 7 s;
    without the sysctl (before 6.5): 2 retransmissions, 3 SYNs."""
    m = report_module("p01-icmp-unreachable")
    d = tmp_path / "raw"
    shutil.copytree(os.path.join(DATA, "p01-icmp-unreachable"), d)
    assert m.expected_syns(str(d), 2) == 6
    path = d / "machine.txt"
    path.write_text("".join(x for x in path.read_text().splitlines(True)
                            if "tcp_syn_linear_timeouts" not in x))
    assert m.expected_syns(str(d), 2) == 3


def test_the_icmp_classifier_names_each_documented_behaviour_and_refuses_the_rest():
    m = report_module("p01-icmp-unreachable")
    c = m.classify
    assert c(_part("ECONNREFUSED", 0.001, [_syn(0.1), _icmp(0.2)], 0), "ECONNREFUSED")[0] == \
        "abort-first"
    assert c(_part("ECONNREFUSED", 1.001, [_syn(0.1), _syn(1000), _icmp(1000.2)], 0),
             "ECONNREFUSED")[0] == "abort-first"
    assert c(_part("ECONNREFUSED", 1.01, [_syn(0.1), _icmp(0.2), _syn(1000), _icmp(1000.1)], 1),
             "ECONNREFUSED")[0] == "soft-then-abort"
    three = [_syn(0), _icmp(0.1), _syn(1000), _icmp(1000.1), _syn(2000), _icmp(2000.1)]
    assert c(_part("EHOSTUNREACH", 3.0, three, 1), "EHOSTUNREACH")[0] == "soft-until-timeout"
    # one SYN short of the schedule the sysctls give: not a run to the give-up time
    assert c(_part("EHOSTUNREACH", 3.0, three, 1, syns=6), "EHOSTUNREACH")[0] is None
    # none fits: the wrong errno, no ICMP, two ICMPs but no lock drop counted
    for part, want in ((_part("ETIMEDOUT", 0.001, [_syn(0.1), _icmp(0.2)], 0), "ECONNREFUSED"),
                       (_part(None, 0.5, [_syn(0.1)], 0), "ECONNREFUSED"),
                       (_part("ECONNREFUSED", 1.01, [_syn(0), _icmp(0.2), _syn(1000),
                                                     _icmp(1000.1)], 0), "ECONNREFUSED")):
        b, why = c(part, want)
        assert b is None and why


def test_a_report_says_none_when_the_kernel_did_something_undocumented(tmp_path):
    """The same raw files with the second ICMP of the port-unreachable part removed from the
    capture: connect() then ended 1 s after the only ICMP, which no documented path does."""
    def drop_second_icmp(d):
        path = d / "port-unreachable-capture.txt"
        lines = path.read_text().splitlines()
        icmp = [i for i, x in enumerate(lines) if " icmp=" in x]
        del lines[icmp[1]]
        lines[-1] = re.sub(r"icmp=[0-9]+", "icmp=1", re.sub(r"packets=[0-9]+", "packets=3",
                                                            lines[-1]))
        path.write_text("\n".join(lines) + "\n")
    r, out = replay(tmp_path, "p01-icmp-unreachable", drop_second_icmp)
    assert r.returncode == 0, r.stderr
    j = load(out, "p01-icmp-unreachable")
    bad = [p for p in j["parts"].values() if p["part"] == "port-unreachable"][0]
    assert bad["behaviour"] is None and not bad["documented"]
    assert "NOT every part showed a behaviour documented" in text(out, j["experiment"])


@pytest.mark.netns
@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_the_knobs_late_drops_and_syncnt(tmp_path, bindir):
    """late_drops=2: the last part's nft rule drops two SYNs, so the ICMP answers the second
    retransmission, which the timer sent while connect() slept without the socket lock: it
    aborts at once (abort-first), after 3 SYNs.  syncnt=3: every part's TCP_SYNCNT, which no
    part reaches: the ICMPs end each connect() first."""
    from unit_live import run_unit
    r = run_unit(tmp_path, "p01-icmp-unreachable", "--set", "late_drops=2", "--set", "syncnt=3")
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, "p01-icmp-unreachable")
    txt = text(tmp_path, "p01-icmp-unreachable")
    assert j["knobs"] == {"late_drops": 2, "syncnt": 3}
    parts = list(j["parts"].values())
    assert all(p["syncnt"] == 3 and p["behaviour"] in j["documented"] for p in parts)
    assert all(p["syns"] == 2 for p in parts[:3])       # the ICMPs, not TCP_SYNCNT, end them
    late = parts[3]
    assert late["syns_dropped"] == 2 and late["first_syn_dropped"]
    assert late["behaviour"] == "abort-first" and late["errno"] == "ECONNREFUSED"
    assert late["syns"] == 3 and late["icmps"] == 1
    assert late["counters_client"]["TcpRetransSegs"] == 2
    assert late["counters_client"]["TcpExtLockDroppedIcmps"] == 0
    syns = [x for x in late["segments"] if x["kind"] == "tcp" and x["flags"] == "S"]
    icmp = [x for x in late["segments"] if x["kind"] == "icmp"]
    assert icmp[0]["t_ms"] > syns[2]["t_ms"]                 # it answers the third SYN
    assert late["elapsed_s"] * 1e3 - icmp[0]["t_ms"] <= 100  # and connect() ends with it
    assert "(ICMP type 3 code 3, the first 2 SYNs dropped by nft)" in txt
    with open(os.path.join(tmp_path, "raw", "p01-icmp-unreachable",
                           "port-unreachable-late-nft.txt")) as f:
        assert re.search(r"< 2 counter packets 2 bytes [0-9]+ drop", f.read())
