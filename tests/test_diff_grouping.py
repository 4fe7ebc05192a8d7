"""tcplab_diff names root causes, on hand-made JSON pairs: a difference in the number of SYNs
is said once and the counters that follow from it are folded into one line under it; a
counter that does not follow is still printed alone; sysctls sized from memory are labelled
environment when the machines differ; a counter one kernel never counts is said once for all
experiments; equal inputs print nothing."""
import os
import subprocess

import pytest

import tcplab_diff
from test_diff_cases import DIFF, base, diff, machine, synretry

# The counters of p01-synretry on loopback, per SYN the client sent (n), as the committed
# references show them (outputs/*/p01-synretry.json): 3 SYNs on 6.1, 6 on 6.12 and later.
PER_SYN = {"IpInReceives": (1, 0), "IpInDelivers": (1, 0), "IpOutRequests": (1, 0),
           "TcpInSegs": (1, 0), "TcpExtListenOverflows": (1, 0), "TcpExtListenDrops": (1, 0),
           "TcpExtTCPTimeouts": (1, 0), "IpExtInNoECTPkts": (1, 0),
           "TcpRetransSegs": (1, 1), "TcpExtTCPSynRetrans": (1, 1),
           "TcpExtTcpTimeoutRehash": (1, 1), "TcpExtTCPLostRetransmit": (1, 2),
           "IpExtInOctets": (60, 0), "IpExtOutOctets": (60, 0)}


def syn_run(retrans_at, linear=None):
    """p01-synretry whose counters and capture follow from its SYNs, as a real run's do."""
    obj = synretry(retrans_at, linear)
    n = len(retrans_at) + 1
    obj["counters"] = {name: k * (n - j) for name, (k, j) in PER_SYN.items()}
    obj["counters"].update({"TcpActiveOpens": 1, "TcpAttemptFails": 1, "TcpOutSegs": 1})
    obj["expected"] = [float(x) for x in range(1, n)] if linear else [1.0, 3.0, 7.0][:n - 1]
    obj["packets"] = {"capture": {"packets": n, "tcp": n, "icmp": 0, "other": 0, "received": n,
                                  "dropped": 0, "ifdropped": 0},
                      "syn_count": n, "syns": [{"n": i + 1, "t_ms": t * 1e3}
                                               for i, t in enumerate((0.0,) + tuple(retrans_at))],
                      "disagree": []}
    return obj


THREE = (1.01, 3.02)                       # 3 SYNs: exponential backoff
SIX = (1.01, 2.02, 3.03, 4.04, 5.06)       # 6 SYNs: linear backoff


def group(lines, name):
    """The lines under one experiment's name."""
    i = lines.index(name)
    out = []
    for x in lines[i + 1:]:
        if not x.startswith(" "):
            break
        out.append(x)
    return out


def test_one_root_cause_three_lines(tmp_path):
    """3 SYNs against 6, with the sysctls the same on both sides: the SYN line, the folded
    counters under it, the schedule.  Nothing else."""
    a = {"p01-synretry": syn_run(THREE)}
    b = {"p01-synretry": syn_run(SIX)}
    b["p01-synretry"]["expected"] = [1.0, 3.0]   # the sysctls predict 3 SYNs on both sides
    lines, status = diff(tmp_path, a, b)
    assert status == 1
    assert lines == [
        "p01-synretry",
        "  SYNs sent: 3 in A, 6 in B (the first SYN and its retransmissions; the capture agrees)",
        "    14 counters follow from the SYN count: 1 per SYN: IpExtInNoECTPkts, IpInDelivers, "
        "IpInReceives, IpOutRequests, TcpExtListenDrops, TcpExtListenOverflows, "
        "TcpExtTCPTimeouts, TcpInSegs (+3 \u2192 +6); 1 per SYN after the first: "
        "TcpExtTCPSynRetrans, TcpExtTcpTimeoutRehash, TcpRetransSegs (+2 \u2192 +5); "
        "1 per SYN after the second: TcpExtTCPLostRetransmit (+1 \u2192 +4); "
        "60 per SYN: IpExtInOctets, IpExtOutOctets (+180 \u2192 +360)",
        "  SYN retransmitted at: 1.01, 3.02 s in A; 1.01, 2.02, 3.03, 4.04, 5.06 s in B",
    ]


def test_the_schedule_the_sysctls_predict_has_no_line_of_its_own(tmp_path):
    """The linear backoff: the sysctl, then the SYN line, the counters and one schedule line
    that says each side did what its sysctls predict (no "expected" line)."""
    a = {"p01-synretry": syn_run(THREE)}
    b = {"p01-synretry": syn_run(SIX, linear=4)}
    lines, _ = diff(tmp_path, a, b)
    got = group(lines, "p01-synretry")
    assert len(got) == 4
    assert got[0] == "  sysctl net.ipv4.tcp_syn_linear_timeouts: absent in A, 4 in B"
    assert got[3].endswith("(on each side the schedule its sysctls predict)")
    assert not any("expected SYN" in x or "SYNs in the capture" in x or "SYNs captured" in x
                   for x in got)


def test_a_counter_that_does_not_scale_is_printed_alone(tmp_path):
    a = {"p01-synretry": syn_run(THREE)}
    b = {"p01-synretry": syn_run(SIX)}
    b["p01-synretry"]["expected"] = [1.0, 3.0]
    b["p01-synretry"]["counters"]["TcpExtListenDrops"] = 5     # 3 -> 5: not one per SYN
    b["p01-synretry"]["counters"]["TcpActiveOpens"] = 2        # 1 -> 2: not one per SYN
    lines, _ = diff(tmp_path, a, b)
    got = group(lines, "p01-synretry")
    assert len(got) == 5
    assert got[1].startswith("    13 counters follow from the SYN count: ")
    assert "TcpExtListenDrops" not in got[1] and "TcpActiveOpens" not in got[1]
    assert got[3:] == ["  counter TcpActiveOpens: +1 in A, +2 in B",
                       "  counter TcpExtListenDrops: +3 in A, +5 in B"]


def test_a_capture_that_disagrees_keeps_its_line(tmp_path):
    a = {"p01-synretry": syn_run(THREE)}
    b = {"p01-synretry": syn_run(SIX)}
    b["p01-synretry"]["packets"]["syn_count"] = 5
    lines, _ = diff(tmp_path, a, b)
    got = group(lines, "p01-synretry")
    assert "  SYNs sent: 3 in A, 6 in B (the first SYN and its retransmissions)" in got
    assert "  SYNs in the capture: 3 in A, 5 in B" in got


def test_equal_inputs_print_nothing(tmp_path):
    objs = {"p01-synretry": syn_run(SIX, linear=4), "p01-machine": machine()}
    objs["p01-synretry"]["default"] = syn_run(SIX, linear=4)
    assert diff(tmp_path, objs, objs) == ([], 0)


def guest_machine(memory_mb, cpus, backlog, buckets):
    obj = machine()
    obj["nproc"] = cpus
    obj["vm"] = {"version": "6.1", "accel": "tcg", "smp": str(cpus), "memory_mb": str(memory_mb)}
    obj["sysctls"].update({"net.ipv4.tcp_max_syn_backlog": backlog,
                           "net.ipv4.tcp_max_tw_buckets": buckets})
    return obj


def test_environment_only_difference_is_labelled_environment(tmp_path):
    """One kernel in a 512 MiB guest and in a 24 GiB one: tcp_init() sizes the hash table from
    memory, and the two sysctls with it.  Environment, with the memory figures."""
    a = {"p01-machine": guest_machine(512, 1, 128, 2048)}
    b = {"p01-machine": guest_machine(24576, 2, 2048, 131072)}
    lines, status = diff(tmp_path, a, b)
    assert status == 1
    assert lines == [
        "p01-machine",
        "  environment: memory 512 MiB (the guest's memory) in A, 24.0 GiB (the guest's memory) "
        "in B; CPUs 1 in A, 2 in B",
        "    sized from memory at boot (2 sysctls): net.ipv4.tcp_max_syn_backlog 128 in A, "
        "2048 in B; net.ipv4.tcp_max_tw_buckets 2048 in A, 131072 in B",
    ]


def test_memtotal_wins_over_the_guests_memory_and_covers_the_host(tmp_path):
    """machine's memtotal_kb (MemTotal) is what the kernel sized its tables from; it is used
    where recorded (a guest given 512 MB has 480284 kB of it), and it is the only memory a host
    run records."""
    guest = guest_machine(512, 1, 128, 2048)
    guest["memtotal_kb"] = 480284
    host = machine()
    host["nproc"] = 2
    host["memtotal_kb"] = 24683548
    host["sysctls"].update({"net.ipv4.tcp_max_syn_backlog": 2048,
                            "net.ipv4.tcp_max_tw_buckets": 131072})
    lines, status = diff(tmp_path, {"p01-machine": guest}, {"p01-machine": host})
    assert status == 1
    assert lines[:2] == [
        "p01-machine",
        "  environment: memory 469 MiB (MemTotal) in A, 23.5 GiB (MemTotal) in B; CPUs 1 in A, "
        "2 in B"]
    assert lines[2].startswith("    sized from memory at boot (2 sysctls): ")


def test_same_memory_makes_it_a_kernel_difference(tmp_path):
    """With the same memory recorded on both sides, another tcp_max_tw_buckets is the kernel's:
    a plain sysctl line, not environment."""
    a = {"p01-machine": guest_machine(512, 1, 128, 2048)}
    b = {"p01-machine": guest_machine(512, 1, 128, 4096)}
    lines, _ = diff(tmp_path, a, b)
    assert lines == ["p01-machine", "  sysctl net.ipv4.tcp_max_tw_buckets: 2048 in A, 4096 in B "
                     "(sized from memory at boot, the same 512 MiB (the guest's memory) "
                     "on both sides)"]


def test_memory_sized_sysctl_elsewhere_names_the_memory(tmp_path):
    """tcp_rmem's maximum in another experiment: labelled on its own line, with the memory the
    sides' p01-machine recorded (one side not a guest: not recorded)."""
    a = {"p01-machine": guest_machine(512, 1, 128, 2048), "p01-synretry": syn_run(THREE)}
    b = {"p01-machine": machine(), "p01-synretry": syn_run(THREE)}
    b["p01-machine"]["nproc"] = 1
    b["p01-machine"]["sysctls"].update({"net.ipv4.tcp_max_syn_backlog": 128,
                                        "net.ipv4.tcp_max_tw_buckets": 2048})
    a["p01-synretry"]["sysctls"]["net.ipv4.tcp_rmem"] = [4096, 131072, 3668832]
    b["p01-synretry"]["sysctls"]["net.ipv4.tcp_rmem"] = [4096, 131072, 6291456]
    lines, _ = diff(tmp_path, a, b)
    assert group(lines, "p01-synretry") == [
        "  environment: sysctl net.ipv4.tcp_rmem: [4096, 131072, 3668832] in A, "
        "[4096, 131072, 6291456] in B (sized from memory at boot; memory 512 MiB "
        "(the guest's memory) in A, not recorded in B)"]
    # tcp_rmem[1] is a constant of tcp_init(): another value there is the kernel's
    b["p01-synretry"]["sysctls"]["net.ipv4.tcp_rmem"] = [4096, 87380, 3668832]
    lines, _ = diff(tmp_path, a, b)
    assert group(lines, "p01-synretry") == [
        "  sysctl net.ipv4.tcp_rmem: [4096, 131072, 3668832] in A, [4096, 87380, 3668832] in B"]


def test_a_sysctl_is_printed_once(tmp_path):
    a = {"p01-machine": machine(), "p01-synretry": syn_run(THREE)}
    b = {"p01-machine": machine(), "p01-synretry": syn_run(THREE)}
    for objs in (b["p01-machine"], b["p01-synretry"]):
        objs["sysctls"]["net.ipv4.tcp_syn_linear_timeouts"] = 4
    lines, _ = diff(tmp_path, a, b)
    assert lines == ["p01-machine",
                     "  sysctl net.ipv4.tcp_syn_linear_timeouts: absent in A, 4 in B"]


def test_a_counter_one_side_never_counts_is_said_once(tmp_path):
    """IpOutTransmits (Linux 6.7) on one side in two experiments, in no experiment of the other:
    one line for all of them."""
    a, b = base(), base()
    b["p01-synretry"]["counters"]["IpOutTransmits"] = 6
    b["p01-connect-time"]["parts"]["refused"]["counters"]["IpOutTransmits"] = 4000
    lines, status = diff(tmp_path, a, b)
    assert status == 1
    assert lines == ["all experiments",
                     "  counter IpOutTransmits: only in B, in 2 runs "
                     "(p01-connect-time refused, p01-synretry); in no experiment of A"]
    # the same counter moving on the other side somewhere: not the kernel's, each line stays
    a["p01-timeout"]["cc"]["counters"] = {"IpOutTransmits": 1}
    b["p01-timeout"]["cc"]["counters"] = {"IpOutTransmits": 1}
    lines, _ = diff(tmp_path, a, b)
    assert "all experiments" not in lines
    assert "  counter IpOutTransmits: only in B (+6)" in group(lines, "p01-synretry")


@pytest.mark.parametrize("va,vb,na,nb,want", [
    (3, 6, 3, 6, (1, 0)), (180, 360, 3, 6, (60, 0)), (2, 5, 3, 6, (1, 1)), (1, 4, 3, 6, (1, 2)),
    (6, 3, 6, 3, (1, 0)),              # the other way round
    (1, 2, 3, 6, None),                # +1 for 3 more SYNs: not per SYN
    (3, 5, 3, 6, None),                # 2 for 3
    (0, 3, 3, 6, None),                # on one side only: not this rule
    (6, 3, 3, 6, None),                # goes down while the SYNs go up
    (9, 12, 3, 6, None),               # would need a negative offset (j = -6)
    (3, 6, 3, 3, None),                # the same SYN count
])
def test_follows_syns(va, vb, na, nb, want):
    assert tcplab_diff.follows_syns(va, vb, na, nb) == want


def real(name):
    path = os.path.join(os.path.dirname(DIFF), "..", "outputs", name)
    if not os.path.isdir(path):
        pytest.skip(f"no committed outputs/{name}")
    return path


def test_committed_guests_synretry_in_three_lines_a_run():
    """The committed 6.1 and 6.12 references: p01-synretry's linear-backoff difference (the
    top run and the default one) in at most 3 lines each, the sysctl printed once, by
    p01-machine; no counter line outside the folded ones."""
    a, b = real("6.1.0-57-cloud-amd64"), real("6.12.118+deb12-cloud-amd64")
    r = subprocess.run(["/usr/bin/python3", DIFF, a, b], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr == ""
    lines = r.stdout.splitlines()
    got = group(lines, "p01-synretry")
    top = [x for x in got if "default TCP_SYNCNT run: " not in x]
    default = [x for x in got if "default TCP_SYNCNT run: " in x]
    assert 0 < len(top) <= 3 and 0 < len(default) <= 3
    assert not any(x.lstrip().startswith(("counter ", "sysctl ")) for x in got)
    assert sum("sysctl net.ipv4.tcp_syn_linear_timeouts" in x for x in lines) == 1


def test_committed_equal_side_prints_nothing():
    a = real("6.1.0-57-cloud-amd64")
    r = subprocess.run(["/usr/bin/python3", DIFF, a, a], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")



def test_memory_not_recorded_on_either_side_is_not_called_environment(tmp_path):
    """Two hosts (machine records no memory outside a guest): the line says the sysctl is sized
    from memory, but does not claim the machines differ."""
    a, b = {"p01-machine": machine()}, {"p01-machine": machine()}
    a["p01-machine"]["sysctls"]["net.ipv4.tcp_max_syn_backlog"] = 128
    b["p01-machine"]["sysctls"]["net.ipv4.tcp_max_syn_backlog"] = 2048
    lines, _ = diff(tmp_path, a, b)
    assert lines == ["p01-machine", "  sysctl net.ipv4.tcp_max_syn_backlog: 128 in A, 2048 in B "
                     "(sized from memory at boot; memory not recorded on either side)"]


def test_cpus_alone_are_environment(tmp_path):
    a, b = {"p01-machine": machine()}, {"p01-machine": machine()}
    b["p01-machine"]["nproc"] = 8
    lines, status = diff(tmp_path, a, b)
    assert (lines, status) == (["p01-machine", "  environment: CPUs 2 in A, 8 in B"], 1)
