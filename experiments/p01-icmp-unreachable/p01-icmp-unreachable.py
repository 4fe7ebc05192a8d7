#!/usr/bin/python3
"""p01-icmp-unreachable report: a blocking connect() across the wire whose SYNs the server side
answers with ICMP destination-unreachable (host-unreachable, port-unreachable, admin-prohibited):
what connect() returned and when, every SYN and ICMP in the capture, the SYN-SENT socket, both
sides' counters, and which of the documented ICMP behaviours this kernel showed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = UNIT = "p01-icmp-unreachable"
# (part, ICMP code, its number, the errno icmp_err_convert[] in net/ipv4/icmp.c gives that code,
# whether nft dropped the first SYN so that only the retransmission was answered)
PARTS = (("host-unreachable", "host-unreachable", 1, "EHOSTUNREACH", False),
         ("port-unreachable", "port-unreachable", 3, "ECONNREFUSED", False),
         ("admin-prohibited", "admin-prohibited", 13, "EHOSTUNREACH", False),
         ("port-unreachable-late", "port-unreachable", 3, "ECONNREFUSED", True))
CLIENT = ("TcpActiveOpens", "TcpAttemptFails", "TcpOutSegs", "TcpRetransSegs",
          "TcpExtTCPSynRetrans", "TcpExtLockDroppedIcmps", "IcmpInDestUnreachs")
SERVER = ("IcmpOutDestUnreachs", "TcpInSegs", "TcpOutRsts")
# the counters the .txt shows, in this order (the JSON has every one that moved)
SHOW = ("TcpActiveOpens", "TcpOutSegs", "TcpRetransSegs", "TcpExtTCPSynRetrans",
        "TcpExtTCPTimeouts", "TcpAttemptFails", "IcmpInDestUnreachs", "TcpExtLockDroppedIcmps",
        "TcpExtOutOfWindowIcmps", "IcmpOutDestUnreachs", "IcmpOutRateLimitHost", "TcpInSegs",
        "TcpOutRsts")
# The behaviours the kernel's code and its history document for an ICMP destination-unreachable
# answering a SYN (docs/p01-icmp-unreachable.md names the code path of each).
BEHAVIOURS = {
    "abort-first": "the first ICMP aborted the SYN-SENT socket: connect() failed with its "
                   "errno as it arrived (tcp_v4_err(): socket not owned by the user -> "
                   "tcp_done_with_error())",
    "soft-then-abort": "the first ICMP came while connect() itself held the socket lock "
                       "(sock_owned_by_user(): TcpExtLockDroppedIcmps, kept as sk_err_soft only); "
                       "the retransmitted SYN's ICMP found the socket free and aborted it",
    "soft-until-timeout": "every ICMP was a soft error: the SYNs went on until TCP_SYNCNT ran out "
                          "and connect() failed then (RFC 1122 4.2.3.9; commit 0a8de364ff7a, "
                          "reverted by b59db45d7eba before any release)",
}
# every released kernel read (v5.10, v6.1, v6.18): any destination-unreachable but frag-needed
# aborts a SYN-SENT socket unless the user holds it
DOCUMENTED = ("abort-first", "soft-then-abort")
AT_ONCE_MS = 100.0      # "connect() returned with the ICMP": within this of the ICMP's capture time


def classify(part, want_errno):
    """Which documented behaviour this part showed, or None (and why) when none fits."""
    syn = [p for p in part["packets"] if p["kind"] == "tcp" and p["flags"] == "S"]
    icmp = [p for p in part["packets"] if p["kind"] == "icmp"]
    ret_ms = part["elapsed_s"] * 1e3
    locked = tw.delta(part["counters_client"], "TcpExtLockDroppedIcmps")
    if part["result"] != "error" or not icmp:
        return None, f"connect() ended {part['result']} after {len(icmp)} ICMPs"
    # capture times count from connect()'s start like elapsed_s
    since_last = ret_ms - icmp[-1]["t_ms"]
    if part["errno"] == want_errno and since_last <= AT_ONCE_MS:
        if len(icmp) == 1 and locked == 0:
            return "abort-first", None
        if len(icmp) >= 2 and len(syn) == len(icmp) and locked == len(icmp) - 1:
            return "soft-then-abort", None
    if since_last > AT_ONCE_MS and len(syn) == part["expected_syns"]:
        return "soft-until-timeout", None
    return None, (f"{len(syn)} SYNs, {len(icmp)} ICMPs, connect() {part['errno']} "
                  f"{since_last:.3f} ms after the last ICMP, TcpExtLockDroppedIcmps {locked:+d}")


def expected_syns(rawdir, syncnt):
    """How many SYNs a SYN-SENT socket sends before it gives up, by the schedule the sysctls in
    machine.txt and TCP_SYNCNT give (tcplab.expected_syn_schedule: tcp_syn_linear_timeouts
    counts too), or None without TCP_SYNCNT."""
    path = os.path.join(rawdir, "machine.txt")
    _, sysctls = t.read_machine(path)
    linear = t.sysctl_int(sysctls, "net.ipv4.tcp_syn_linear_timeouts", path, 0, t.MAX_TCP_SYNCNT)
    return None if syncnt is None else len(t.expected_syn_schedule(syncnt, linear)[0]) + 1


def one_part(rawdir, name, code, code_n, want_errno, first_dropped, late_drops=None):
    """One part; late_drops: the knob late_drops when run.sh was given it (the SYNs the nft
    rule of a first_dropped part dropped; None: the default, 1)."""
    p = tw.read_part(rawdir, name, CLIENT, SERVER)
    if p["syncnt"] is None:     # connect_block -s: the part's header and its SYN budget
        raise t.RawError(f"{os.path.join(rawdir, name + '-client.txt')}: no syncnt= line")
    p["expected_syns"] = expected_syns(rawdir, p["syncnt"])
    icmp = [x for x in p["packets"] if x["kind"] == "icmp"]
    bad = [x for x in icmp if x["code_n"] != code_n or x["quoted"]["flags"] != "S"
           or x["quoted"]["seq"] != 0]
    p.update(part=name, code=code, code_n=code_n, expected_errno=want_errno,
             first_syn_dropped=first_dropped,
             **({"syns_dropped": late_drops} if first_dropped and late_drops is not None else {}),
             syns=sum(x["kind"] == "tcp" and x["flags"] == "S" for x in p["packets"]),
             icmps=len(icmp),
             icmps_quote_syn=not bad and bool(icmp))
    # the capture is on the client's end, where its SYNs leave: beside its counters (the
    # key only when they differ)
    dis = pkt.sent_checks(p["_at"]["raw"], "c>s", p["counters_client"], "client")
    if dis:
        p["disagree"] = dis
    p["behaviour"], p["undocumented_why"] = classify(p, want_errno)
    p["documented"] = p["behaviour"] in DOCUMENTED
    return p


def part_lines(p):
    err = p["errno"] or p["result"]
    n = p.get("syns_dropped", 1)
    late = ("" if not p["first_syn_dropped"] else ", the first SYN dropped by nft" if n == 1
            else f", the first {n} SYNs dropped by nft")
    lines = [f"== {p['part']} (ICMP type 3 code {p['code_n']}{late}): connect() from "
             f"{p['client']} to 192.0.2.2, TCP_SYNCNT {p['syncnt']}",
             f"connect(): {err} after {p['elapsed_s']:.3f} s "
             f"(icmp_err_convert[{p['code_n']}] is {p['expected_errno']})",
             "", "packets on veth-c (t_ms from the start of connect()):"]
    lines += tw.packet_lines(p) + pkt.capture_marks(p["capture"])
    quote = ("each ICMP quotes the client's SYN (flags S, seq 0 relative)" if p["icmps_quote_syn"]
             else "NOT every ICMP quotes the client's SYN at seq 0")
    lines += [f"  {p['syns']} SYNs, {p['icmps']} ICMPs; {quote}",
              *["DISAGREE: " + d for d in p.get("disagree", ())],
              "", "sockwatch (the client's SYN-SENT socket, t_ms from connect()):"]
    lines += tw.event_lines(p)
    lines += ["", "counter deltas (each side in its own namespace):"]
    lines += tw.counter_lines(p["counters_client"], p["counters_server"], SHOW)
    if p["behaviour"]:
        lines += ["", f"behaviour: {p['behaviour']}: {BEHAVIOURS[p['behaviour']]}"]
    else:
        lines += ["", f"behaviour: NONE of the documented ones ({p['undocumented_why']})"]
    return lines


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    late_drops = (t.read_knobs(rawdir) or {}).get("late_drops")
    parts = [one_part(rawdir, *x, late_drops=late_drops) for x in PARTS]
    lines = [f"{NAME}: blocking connect() across the wire, the SYN answered with ICMP "
             "destination-unreachable (nft reject on the server's input hook)",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir)), ""]
    rows = []
    for p in parts:
        lines += part_lines(p) + [""]
        at = p["_at"]
        is_icmp = lambda x: x["kind"] == "icmp"  # noqa: E731
        first, last = tw.index_of(p, is_icmp), tw.index_of(p, is_icmp, last=True)
        seg = {}
        if first is not None:
            seg[first] = tw.counted(p["counters_client"], "TcpExtLockDroppedIcmps",
                                   side="this part: ")
        if last is not None and last != first:
            seg[last] = tw.counted(p["counters_client"], "TcpAttemptFails", side="this part: ")
        rows += tw.ladder_rows(p, p["part"], [(at["end_ns"], f"client: connect() "
                                              f"{p['errno'] or p['result']}")], seg)
    shown = sorted({p["behaviour"] or "none" for p in parts})
    lines += ["summary:"]
    for p in parts:
        lines.append(f"  {p['part']:<21} {p['errno'] or p['result']:<13} "
                     f"{p['elapsed_s']:6.3f} s  {p['syns']} SYNs {p['icmps']} ICMPs  "
                     f"{p['behaviour'] or 'NONE'}")
    verdict = ("every part showed a behaviour documented for this kernel"
               if all(p["documented"] for p in parts) else
               "NOT every part showed a behaviour documented for this kernel")
    lines += [f"  {verdict} ({', '.join(DOCUMENTED)})", ""]
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None,
           # the top-level keys describe the first part (docs/output-format.md)
           "counters": parts[0]["counters_client"], "result": parts[0]["result"],
           "errno": parts[0]["errno"], "elapsed_s": parts[0]["elapsed_s"],
           "behaviours_shown": shown, "documented": list(DOCUMENTED),
           "parts": {p["part"]: tw.strip_private(p) for p in parts}}
    tw.write_with_ladder(outdir, NAME, lines + tw.ladder_lines(rows), obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
