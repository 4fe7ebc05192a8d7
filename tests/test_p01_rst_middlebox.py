"""p01-rst-middlebox live (root, netns; the shared run of the three wire-fault units,
conftest.wire_faults_out): a RST from nft and one from the kernel both give ECONNREFUSED and
only the kernel's moves the server's TcpOutRsts.  Its report on bad raw input:
tests/test_wire_faults.py."""
import pytest

from unit_live import load, run_unit, text
from unit_replay import Report


@pytest.mark.netns
def test_a_rst_from_nft_and_from_the_kernel_both_refuse_and_only_the_kernels_is_counted(wire_faults_out):
    j = load(wire_faults_out, "p01-rst-middlebox")
    nft, kern = j["parts"].values()
    for p in (nft, kern):
        assert p["errno"] == "ECONNREFUSED"
        assert p["elapsed_s"] < 0.5                  # at once: no SYN retransmission
        segs = [x for x in p["segments"] if x["kind"] == "tcp"]
        assert [(x["dir"], x["flags"]) for x in segs] == [("c>s", "S"), ("s>c", "RA")]
        assert segs[1]["ack"] == 1 and segs[1]["win"] == 0
        assert p["counters_client"]["TcpAttemptFails"] == 1
        assert p["counters_client"]["TcpOutRsts"] == 0
    # the server's TCP MIB sees only its own RST: nf_reject builds its packet outside TCP
    assert j["server_outrsts"] == {"nft": 0, "kernel": 1}
    assert j["server_insegs"] == {"nft": 0, "kernel": 1}


# ---- the knob drop_syns (experiments/units) --------------------------------------------------

test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = \
    Report("p01-rst-middlebox").knob_tests([("DROP_SYNS", "4"), ("DROP_SYNS", "x"),
                                            ("DROP_SYNS", "01")],
                                           ["drop_syns=4", "drop_syns=-1", "drop_syns=one"])


@pytest.mark.netns
@pytest.mark.slow      # a second live run, knobs set: make check (CI's check-rest)
def test_knob_drop_syns_one_the_rst_answers_the_retransmitted_syn(tmp_path):
    """--set drop_syns=1: part nft's first SYN gets no answer, the client sends it again after
    its SYN timeout, and nft's RST answers that one: ECONNREFUSED about a second late, still no
    TCP counter on the server; the kernel part is as always."""
    r = run_unit(tmp_path, "p01-rst-middlebox", "--set", "drop_syns=1")
    assert r.returncode == 0, r.stderr[-3000:]
    j = load(tmp_path, "p01-rst-middlebox")
    assert j["drop_syns"] == 1
    nft, kern = j["parts"]["nft"], j["parts"]["kernel"]
    segs = [(x["dir"], x["flags"]) for x in nft["segments"] if x["kind"] == "tcp"]
    assert segs == [("c>s", "S"), ("c>s", "S"), ("s>c", "RA")], segs
    assert nft["errno"] == "ECONNREFUSED" and 0.9 <= nft["elapsed_s"] < 4
    assert nft["counters_client"]["TcpAttemptFails"] == 1
    assert j["server_outrsts"] == {"nft": 0, "kernel": 1}
    assert kern["errno"] == "ECONNREFUSED" and kern["elapsed_s"] < 0.5
    assert "(knob drop_syns=1: a drop rule before the reject: the first SYN had no answer)" in \
        text(tmp_path, "p01-rst-middlebox")
