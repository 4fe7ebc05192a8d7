"""p01-rst-middlebox live (root, netns; the shared run of the three wire-fault units,
conftest.wire_faults_out): a RST from nft and one from the kernel both give ECONNREFUSED and
only the kernel's moves the server's TcpOutRsts.  Its report on bad raw input:
tests/test_wire_faults.py."""
import pytest

from unit_live import load


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
