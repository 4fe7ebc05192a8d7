"""p04-mid-loss: one segment in the middle of a flight lost on the wire.  The same kernel facts
are asserted on the committed reference (the report replayed on outputs/RELEASE/raw/, no root)
and on a live run (./run.sh --out TMP p04-mid-loss, root and namespaces), each bound derived
from what that run recorded (the knobs flight and drop, the MSS, tcp_reordering): with SACK the
duplicate ACKs before the retransmission carry a block that starts at the hole's end and
covers one more segment with each ACK, and the hole is sent again without an RTO (SACK
recovery, fast retransmit); without SACK no SACK option at all, and the hole is sent again at
the tcp_reordering-th duplicate ACK (NewReno); every retransmission seen alike by tcpevents,
the capture and TcpRetransSegs.  Then the report's own SACK decoding on exact bytes, and bad
input: the report on broken raw data, a bad knob (run.sh and the collect script)."""
import importlib.util
import json
import os
import subprocess

import pytest

from conftest import TOP, reference_dirs
from unit_replay import Report, missing, no_line, replace, write, tseq_panels, PY

NAME = "p04-mid-loss"
R = Report(NAME)


def common(j, p):
    """What both parts show: the hole is segment `drop`, nft dropped it once, it was sent
    again once, after at least one duplicate ACK and without an RTO."""
    prm = {k: int(v) for k, v in j["params"].items()}
    mss, drop = prm["mss"], prm["drop"]
    assert p["rule"]["packets"] == 1
    assert p["hole"]["seq"] == 1 + (drop - 1) * mss and p["hole"]["end"] == 1 + drop * mss
    assert p["flight_end"] == 1 + prm["flight"] * mss
    assert p["dup_before_rtx"] >= 1
    assert all(d["t_ms"] < p["rtx_ms"] for d in p["dup_acks"] if d["before_rtx"])
    assert p["rtx_ms"] > p["hole"]["t_ms"]
    c = p["counters"]
    assert c["TcpRetransSegs"] == 1 and c["TcpExtTCPTimeouts"] == 0
    assert c["TcpExtTCPFastRetrans"] == 1
    # the receiver queued the segments after the hole out of order
    assert p["server_counters"]["TcpExtTCPOFOQueue"] >= 1
    x = p["crosscheck"]
    assert x["capture"] == x["TcpRetransSegs"] == 1
    if "blind" not in p["tcpevents"]:
        assert x["tcpevents"] in (0, 1) and p["tcpevents"]["lost"] == 0
        if x["tcpevents"] == 0:
            # tcpevents missed the retransmission (as in p04-tail-loss, cause open:
            # docs/tcpevents.md): the report must say so, and only that
            assert [d for d in p.get("disagree", []) if not d.startswith("tcpevents")] == [], p
            assert any(d.startswith("tcpevents") for d in p["disagree"]), p
            return prm
    assert "disagree" not in p
    return prm


def check_sack(j):
    p = j["parts"]["sack"]
    prm = common(j, p)
    assert p["tcp_sack"] == [1, 1] and p["sackok"]
    # each duplicate ACK has one block, from the hole's end to a segment's end, each reaching
    # further than the one before (the segments after the hole arrive in order), at most one
    # per segment.  One each, covering 1, 2, 3... segments, when the receiver handles each on
    # arrival (every committed reference: test_references_show_one_duplicate_ack_per_segment).
    # Fewer when the receiving socket was held by its reader: the segments wait in its backlog,
    # and where the kernel has tcp_backlog_ack_defer (6.18: on by default),
    # __tcp_ack_snd_check() defers their ACKs to tcp_release_cb(), which sends one.  A loaded
    # run on 6.18 saw 2 (TCPOFOQueue 5): blocks to 1 and to 5 segments.
    end, mss = p["hole"]["end"], prm["mss"]
    assert 1 <= len(p["dup_acks"]) <= prm["flight"] - prm["drop"]
    right = [end]
    for d in p["dup_acks"]:
        assert len(d["sack"]) == 1 and d["sack"][0][0] == end, d
        assert d["sack"][0][1] > right[-1] and (d["sack"][0][1] - end) % mss == 0, d
        right.append(d["sack"][0][1])
    assert right[-1] <= p["flight_end"]
    c = p["counters"]
    assert c["TcpExtTCPSackRecovery"] == 1 and c["TcpExtTCPRenoRecovery"] == 0
    assert c["TcpExtTCPSACKReorder"] == 0 and c["TcpExtTCPLossProbes"] == 0
    assert "SACK recovery" in p["how"]["rule"]


def merged_then_rto(p, reordering):
    """The hole of part nosack went by the RTO because the sender saw fewer than tcp_reordering
    duplicate ACKs: they merged in the client's backlog (TCPBacklogCoalesce, read since this
    counter joined KEEP), what a slow writev() allows (docs/p04-mid-loss-why.md, "The backlog";
    CI's sanitize pass saw it once), or the receiver sent fewer (one ACK for several segments,
    as check_sack allows; none at all in CI's interrupt storm)."""
    c = p["counters"]
    return c["TcpExtTCPTimeouts"] == 1 and ((c.get("TcpExtTCPBacklogCoalesce") or 0) >= 1
                                            or p["dup_before_rtx"] < reordering)


def check_rto(p):
    c = p["counters"]
    assert c["TcpExtTCPTimeouts"] == 1 and c["TcpExtTCPRenoRecovery"] == 0, c
    assert c["TcpRetransSegs"] == 1 and p["how"]["rule"].startswith("an RTO")
    assert p["rtx_ms"] - p["hole"]["t_ms"] >= 200        # TCP_RTO_MIN


def check_nosack(j):
    p = j["parts"]["nosack"]
    reordering = int(j["sysctls"]["net.ipv4.tcp_reordering"])
    if merged_then_rto(p, reordering):
        # the sender's merge of duplicate ACKs, too few sent, or (CI's interrupt storm) none
        # sent at all: the receiver got the segments after the hole as one
        rule, n = p["how"]["rule"], p["dup_before_rtx"]
        assert ("the receiver sent no duplicate ACK" in rule if n == 0 else
                "TCPBacklogCoalesce" in rule or
                f"only {n} duplicate ACK(s) before it, fewer than tcp_reordering" in rule), rule
        return check_rto(p)
    prm = common(j, p)
    assert p["tcp_sack"] == [0, 0] and not p["sackok"]
    assert all(d["sack"] == [] for d in p["dup_acks"])
    # NewReno: the hole is sent again at the tcp_reordering-th duplicate ACK.  While the sender
    # holds its socket (in send()), duplicate ACKs that come meanwhile wait in the socket's
    # backlog and are processed together when it lets go, so the capture can show more before
    # the retransmission: CI's sanitize pass (ASan slows send()) and a loaded make test on the
    # plain build each saw 4 with tcp_reordering 3.  Never fewer; the committed references
    # show exactly tcp_reordering (test_references_show_exactly_tcp_reordering)
    assert reordering <= p["dup_before_rtx"] <= len(p["dup_acks"]), p["dup_before_rtx"]
    c = p["counters"]
    assert c["TcpExtTCPRenoRecovery"] == 1 and c["TcpExtTCPSackRecovery"] == 0


check_all = R.checks(check_sack, check_nosack)


# ---- the committed reference, replayed -----------------------------------------------------

ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \
    R.reference_tests(check_all)

# Every kernel's reference, the 6.1 guest's included: there (QEMU, TCG) part nosack's duplicate
# ACKs merged in the backlog (TCPBacklogCoalesce +4) and the hole went by the RTO, which
# check_nosack accepts only with that merge counted (docs/p04-mid-loss-why.md, "The backlog")
test_every_kernels_reference_shows_the_kernel_facts = R.every_reference_test(check_all, {})



@pytest.mark.parametrize("ref", [d for d in reference_dirs()
                                 if os.path.isfile(os.path.join(TOP, "outputs", d, NAME + ".json"))])
def test_references_show_one_duplicate_ack_per_segment(ref):
    """Every committed reference (no load): one duplicate ACK per segment after the hole, the
    k-th one's block covering k segments."""
    with open(os.path.join(TOP, "outputs", ref, NAME + ".json")) as f:
        j = json.load(f)
    p, prm = j["parts"]["sack"], {k: int(v) for k, v in j["params"].items()}
    end, n = p["hole"]["end"], prm["flight"] - prm["drop"]
    assert [d["sack"] for d in p["dup_acks"]] == [[[end, end + k * prm["mss"]]]
                                                  for k in range(1, n + 1)]


def test_references_show_exactly_tcp_reordering(ref_out):
    """In the committed reference (no load) NewReno sent the hole again at exactly the
    tcp_reordering-th duplicate ACK."""
    j = R.load(str(ref_out))
    p = j["parts"]["nosack"]
    assert p["dup_before_rtx"] == int(j["sysctls"]["net.ipv4.tcp_reordering"])


def test_reference_no_sack_option_without_sack(ref_out):
    """Without SACK neither side sends a SACK option: no sackok in the SYNs, no block."""
    with open(os.path.join(R.ref, "raw", NAME, "nosack-capture.txt")) as f:
        text = f.read()
    assert "sack" not in text
    with open(os.path.join(R.ref, "raw", NAME, "sack-capture.txt")) as f:
        text = f.read()
    assert text.count("sackok") == 2 and "sack:1" in text


test_reference_ladder = R.ladder_test("segment 5: dropped by nft", "SACK 7241-8689")


def test_reference_time_sequence(ref_out):
    """The time-sequence picture: in each part one segment dropped (the hole) and the hole sent
    again; a dot for every ACK up to the one of the whole flight, at least the duplicate ACKs
    before the retransmission; SACK bars only in part sack, at least one per duplicate ACK."""
    j = R.load(str(ref_out))
    assert j["tseq_svg"] == f"{NAME}-tseq.svg"
    panels = tseq_panels(os.path.join(ref_out, j["tseq_svg"]))
    assert [title.split(":")[0] for title, _ in panels] == ["part sack", "part nosack"]
    for (title, n), (name, part) in zip(panels, j["parts"].items()):
        assert n["seg dropped"] == 1 and n["cross"] == 1, (title, n)
        assert n["seg again"] == part["crosscheck"]["capture"], (title, n)
        assert n["seg"] == int(j["params"]["flight"]) - 1, (title, n)   # the flight's others
        assert n["ackpt"] >= len(part["dup_acks"]) and n["ack"] == 1, (title, n)
        if name == "sack":
            assert n["sack"] >= len(part["dup_acks"]), (title, n)
        else:
            assert "sack" not in n, (title, n)


# ---- the SACK option, decoded by the report ----------------------------------------------------

def _report_module():
    spec = importlib.util.spec_from_file_location("p04_mid_loss", R.path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_sack_blocks_exact_bytes():
    m = _report_module()
    # nop, nop, timestamps (kind 8, length 10), nop, nop, SACK (kind 5, length 10) 7241:8689
    opts = bytes([1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 10,
                  0, 0, 0x1c, 0x49, 0, 0, 0x21, 0xf1])
    assert m.sack_blocks(opts) == [(7241, 8689)]
    two = bytes([1, 1, 5, 18]) + (100).to_bytes(4, "big") + (200).to_bytes(4, "big") + \
        (0xfffffff0).to_bytes(4, "big") + (16).to_bytes(4, "big")
    assert m.sack_blocks(two) == [(100, 200), (0xfffffff0, 16)]
    assert m.sack_blocks(bytes([1, 1, 8, 10] + [0] * 8)) == []
    assert m.sack_blocks(bytes([0, 5, 10])) == []          # after EOL nothing is read
    for bad in (bytes([5, 9] + [0] * 7), bytes([5, 10, 0, 0]), bytes([5]), bytes([8, 1])):
        with pytest.raises(ValueError):
            m.sack_blocks(bad)


# ---- the report on bad raw input ------------------------------------------------------------

test_report_refuses_bad_raw = R.refusal_test([
    missing("sack-capture.pcap"),
    missing("nosack-nft-server.txt"),
    no_line("end", "sack-capture.txt"),
    no_line("end", "nosack-tcpevents.txt"),
    (write("sack-capture.pcap", "not a pcap file at all, just text\n"), "not a pcap file"),
    (write("sack-tcpevents-blind.txt", "a\nb\n"), "want one line"),
    (replace("sack-nft-server.txt", "counter packets 1 ", "counter packets 2 "),
     "the rule dropped 2"),
    (write("params.txt", "flight=x drop=5\n"), "not a number"),
    (replace("sack-capture.txt", "opts=nop,nop,ts,nop,nop,sack:1 ",
             "opts=nop,nop,ts,nop,nop,sack:2 "), "the capture's line says sack:2"),
])


test_report_without_tcpevents_says_why = R.blind_tcpevents_test("sack")


def test_a_kernel_without_the_err_argument_counts_its_retransmissions(tmp_path):
    """Before 6.10 tcp:tcp_retransmit_skb has no err argument and fires only for a
    retransmission that went out: tcpevents prints err=-, and the report counts it as one (a
    6.12 guest's p04-mid-loss was a false DISAGREE: tcpevents 0 against TcpRetransSegs +1)."""
    def edit(d):
        for part in ("sack", "nosack"):
            p = d / f"{part}-tcpevents.txt"
            p.write_text(p.read_text().replace(" err=0 ", " err=- ").replace(" err=yes", " err=no"))
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(R.broken_copy(tmp_path, edit), out)
    assert r.returncode == 0, r.stderr
    j = R.load(str(out))
    for part in ("sack", "nosack"):
        assert "disagree" not in j["parts"][part], j["parts"][part].get("disagree")


def test_report_usage():
    r = subprocess.run([PY, R.path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1


test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = R.knob_tests(
    [("BEFORE", "5"), ("BEFORE", "x"), ("BEFORE", "01"),
     ("AFTER", "2"), ("AFTER", "6"), ("AFTER", "9x")],
    ["before=5", "before=big", "after=2", "after=6"])


# ---- a live run ------------------------------------------------------------------------------

test_live_run_kernel_facts = R.live_test(check_all, timeout=120)


def data_raw(name):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "reports",
                        f"p04-mid-loss-{name}", "raw")


def test_a_receiver_that_deferred_its_acks_sent_fewer_duplicates(tmp_path):
    """A loaded live run (6.18, load average about 5): in part sack the server queued all 5
    segments after the hole out of order (TCPOFOQueue +5) but sent 2 duplicate ACKs, covering
    1 segment and then all 5; SACK recovery followed the second.  check_sack holds on it; the
    one-per-segment ladder does not."""
    r = R.run(data_raw("deferred-acks"), tmp_path)
    assert r.returncode == 0, r.stderr
    j = R.load(tmp_path)
    p = j["parts"]["sack"]
    assert p["server_counters"]["TcpExtTCPOFOQueue"] == 5
    assert [d["sack"] for d in p["dup_acks"]] == [[[7241, 8689]], [[7241, 14481]]]
    check_sack(j)
    check_nosack(j)


def test_an_rto_after_too_few_duplicate_acks_is_named(tmp_path):
    """A loaded live run's part nosack: 1 duplicate ACK, then the RTO.  Its client counted
    TCPBacklogCoalesce +3, and the report names that merge; with the counter at 0 (no merge at
    the sender), the report says the receiver sent too few for tcp_reordering, and the checks
    accept the RTO for that reason."""
    r = R.run(data_raw("rto-one-dupack"), tmp_path / "as-run")
    assert r.returncode == 0, r.stderr
    p = R.load(tmp_path / "as-run")["parts"]["nosack"]
    assert p["dup_before_rtx"] == 1 and "TCPBacklogCoalesce 3" in p["how"]["rule"]
    import shutil
    root = tmp_path / "raw"
    shutil.copytree(data_raw("rto-one-dupack"), root)
    replace("nosack-counters-delta.txt", "TcpExtTCPBacklogCoalesce +3",
            "TcpExtTCPBacklogCoalesce +0")(root / NAME)
    r = R.run(root, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    j = R.load(tmp_path / "out")
    rule = j["parts"]["nosack"]["how"]["rule"]
    assert ("only 1 duplicate ACK(s) before it, fewer than tcp_reordering 3, so no fast "
            "retransmit") in rule, rule
    check_nosack(j)


def test_no_duplicate_ack_at_all_is_an_rto_the_report_names(tmp_path):
    """CI's interrupt storm: in part nosack the receiver answered the segments after the hole
    with one ACK (ack=5793 once, no duplicate), so nothing but the RTO could send the hole again
    (TCPTimeouts +1, 205 ms later).  The report refused that run; it now says what happened,
    and the test's checks hold it."""
    r = R.run(data_raw("no-dupack"), tmp_path)
    assert r.returncode == 0, r.stderr
    j = R.load(tmp_path)
    p = j["parts"]["nosack"]
    assert p["dup_before_rtx"] == 0 and p["counters"]["TcpExtTCPTimeouts"] == 1
    assert "the receiver sent no duplicate ACK" in p["how"]["rule"]
    check_nosack(j)


def test_an_ack_sent_first_but_arrived_late_is_no_duplicate(tmp_path):
    """A live run of `make test` (6.18 host, 6 December 2026): in part sack the capture showed
    the first ACK of ack=5793 with a SACK block (win=74), and 2 µs later one with the same ack,
    no SACK block and win=73.  A receiver never moves its window's right edge back, so the one
    of win=73 was sent first (the cumulative ACK up to the hole) and arrived second.  The report
    counted it as duplicate ACK 1, without a block, and the test's check_sack failed on it; it
    now names it and counts the block-carrying ACKs alone.  Where the server's
    tcp_shrink_window is 1 the window may fall, and the report does not draw that conclusion."""
    r = R.run(data_raw("late-ack"), tmp_path / "as-run")
    assert r.returncode == 0, r.stderr
    j = R.load(tmp_path / "as-run")
    p = j["parts"]["sack"]
    assert p["late_acks"] == [{"t_ms": 0.091, "ack": 5793, "win": 73, "after_win": 74}]
    assert [d["sack"] for d in p["dup_acks"]] == [[[7241, e]] for e in range(8689, 14482, 1448)]
    assert p["dup_before_rtx"] == 2 and j["parts"]["nosack"]["late_acks"] == []
    check_sack(j)
    check_nosack(j)
    text = (tmp_path / "as-run" / f"{NAME}.txt").read_text()
    assert "an ACK sent earlier, arrived later: 0.091 ms, ack=5793 win=73 after win=74" in text
    import shutil
    root = tmp_path / "raw"
    shutil.copytree(data_raw("late-ack"), root)
    with open(root / NAME / "sack-server-sysctls.txt", "a") as f:
        f.write("net.ipv4.tcp_shrink_window=1\n")
    r = R.run(root, tmp_path / "shrink")
    assert r.returncode == 0, r.stderr
    p = R.load(tmp_path / "shrink")["parts"]["sack"]
    # no conclusion drawn: the ACK without a block counts as RFC 5681's duplicate
    assert p["late_acks"] == [] and [] in [d["sack"] for d in p["dup_acks"]]


@pytest.mark.parametrize("end,said", [(" missed=0 unseen=1", "; tcpevents unseen=1 (tracepoint "
                                       "hits, any socket's, the kernel ran no program for"),
                                      (" missed=0 unseen=0", None), ("", None)])
def test_a_retransmission_tcpevents_was_not_run_for_is_counted(tmp_path, end, said):
    """tcpevents' unseen= (docs/tcpevents.md, "A retransmission missed under load"): part sack's
    one retransmission taken out of its tcpevents file, as the kernel's skipped runs left it,
    and the end line's count.  The DISAGREE line names unseen= when it is not 0; the text and
    the JSON carry it; an end line without it (every reference) adds nothing."""
    def edit(d):
        p = d / "sack-tcpevents.txt"
        lines = [x for x in p.read_text().splitlines(True) if " event=retrans " not in x]
        lines[-1] = lines[-1].replace(" events=16 ", " events=15 ").rstrip("\n") + end + "\n"
        p.write_text("".join(lines))
    out = tmp_path / "out"
    r = R.run(R.broken_copy(tmp_path, edit), out)
    assert r.returncode == 0, r.stderr
    text = (out / f"{NAME}.txt").read_text()
    dis = [x for x in text.splitlines() if x.startswith("DISAGREE: tcpevents")]
    assert len(dis) == 1 and dis[0].startswith(
        "DISAGREE: tcpevents' retransmissions (err=0 or -): tcpevents has 0, client "
        "TcpRetransSegs +1"), dis
    assert (said in dis[0]) if said else "unseen" not in dis[0]
    p = R.load(out)["parts"]["sack"]
    assert p["tcpevents"].get("unseen") == (int(end.split("unseen=")[1]) if end else None)
    assert (f"lost=0 missed=0{end.split('missed=0')[1]}:" if end else "lost=0:") in text


def test_one_ack_up_to_the_hole_with_its_sack_block_is_a_duplicate(tmp_path):
    """CI's interrupt storm (6 December, 6.18 host): in part sack the receiver answered segments
    4 to 10 with one ACK, ack=5793 (up to the hole) carrying SACK 7241-14481, and SACK recovery
    followed (TCPSackRecovery +1, no RTO).  It moved the cumulative acknowledgment, so it was no
    RFC 5681 duplicate, and the report refused the run ("no duplicate ACK before the
    retransmission, and no RTO"); RFC 6675's duplicate is an ACK with new SACK information
    whatever else it moves, and the report now counts it so."""
    r = R.run(data_raw("one-sack-ack"), tmp_path)
    assert r.returncode == 0, r.stderr
    j = R.load(tmp_path)
    p = j["parts"]["sack"]
    assert [d["sack"] for d in p["dup_acks"]] == [[[7241, 14481]]] and p["dup_before_rtx"] == 1
    assert p["counters"]["TcpExtTCPSackRecovery"] == 1
    check_sack(j)
