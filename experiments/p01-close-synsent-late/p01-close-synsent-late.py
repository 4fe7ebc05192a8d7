#!/usr/bin/python3
"""p01-close-synsent-late report: close() on a SYN-SENT socket, then the server's SYN-ACK for the
SYN it had already sent arrives (its first SYN-ACK dropped by nft, its retransmission on its
own timer; the client's poll() timeout is the knob timeout_ms): the client kernel answers it
with a RST.  The packets with their times, the client's socket gone at close(), each side's
counters."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402
import tcplab_pkt as pkt  # noqa: E402
import tcplab_wire as tw  # noqa: E402

NAME = UNIT = "p01-close-synsent-late"
CLIENT = ("TcpActiveOpens", "TcpAttemptFails", "TcpInSegs", "TcpOutSegs", "TcpOutRsts")
SERVER = ("TcpInSegs", "TcpOutSegs", "TcpRetransSegs", "TcpOutRsts", "TcpAttemptFails",
          "TcpExtTCPSynRetrans", "TcpExtEmbryonicRsts")
SHOW = ("TcpActiveOpens", "TcpAttemptFails", "TcpInSegs", "TcpOutSegs", "TcpRetransSegs",
        "TcpOutRsts", "TcpExtTCPSynRetrans", "TcpExtEmbryonicRsts", "TcpExtTCPTimeouts")


def nft_dropped(rawdir):
    """How many SYN-ACKs the server's drop-first rule dropped: its counter in wire.txt (the
    ruleset as it stood at the end of the unit)."""
    wire = tw.read_wire(rawdir)
    for side in ("client", "server"):
        for r in wire[side]["rules"]:
            if "numgen" in r["rule"] and r["verdict"] == "drop":
                return r["packets"]
    raise t.RawError(f"{os.path.join(rawdir, 'wire.txt')}: no drop rule with a counter (the "
                     "server's nft ruleset)")


def build(rawroot, outdir):
    rawdir = t.unit_dir(rawroot, UNIT)
    kernel = t.kernel_release(rawdir)
    p = tw.read_part(rawdir, "", CLIENT, SERVER)
    after = t.read_snapshot(os.path.join(rawdir, "after-close.txt"))
    segs = [x for x in p["packets"] if x["kind"] == "tcp"]
    closed = p["closed_ms"]
    if closed is None:          # connect_timeout -m close: when close() was called
        raise t.RawError(f"{os.path.join(rawdir, 'client.txt')}: no closed_ns=")
    synack = [x for x in segs if x["dir"] == "s>c" and x["flags"] == "SA"]
    rst = [x for x in segs if x["dir"] == "c>s" and "R" in x["flags"]]
    late = [x for x in synack if closed is not None and x["t_ms"] > closed]
    rst_after = [x for x in rst if late and x["t_ms"] >= late[0]["t_ms"]]
    gone = [e for e in p["events"] if e["event"] == "gone"]
    dropped = nft_dropped(rawdir)
    p.update(synacks=len(synack), late_synacks=len(late), rsts=len(rst),
             rst_follows_late_synack=bool(rst_after), nft_dropped_synacks=dropped,
             socket_after_close=len(after),
             gone_ms=round(gone[0]["t_s"] * 1e3, 3) if gone else None,
             rst_ms_after_synack=(round(rst_after[0]["t_ms"] - late[0]["t_ms"], 3)
                                  if rst_after else None))
    lines = [f"{NAME}: close() on a SYN-SENT socket, then a SYN-ACK for its SYN arrives",
             t.header(kernel, t.collected_at(rawdir), tw.wire_where(rawdir)), "",
             f"client {p['client']} -> 192.0.2.2: poll() {p['result']} after "
             f"{p['elapsed_s'] * 1e3:.3f} ms, close() at {closed:.3f} ms",
             f"server side: nft dropped {dropped} SYN-ACK(s) at its output hook (never on the "
             "wire, so never in the capture)", "",
             "packets on veth-c (t_ms from the start of connect()):"]
    lines += tw.packet_lines(p) + pkt.capture_marks(p["capture"])
    # the capture is on the client's end: what the client sent beside its counters (not the
    # server's: nft drops its SYN-ACKs before they reach the wire); the key only on a difference
    dis = pkt.sent_checks(p["_at"]["raw"], "c>s", p["counters_client"], "client")
    if dis:
        p["disagree"] = dis
    lines += ["DISAGREE: " + d for d in dis]
    lines += ["", "sockwatch (the client's SYN-SENT socket, t_ms from connect()):"]
    lines += tw.event_lines(p)
    lines += [f"  after close(): sockwatch -1 finds {len(after)} socket(s) on the port"]
    lines += ["", "counter deltas (each side in its own namespace):"]
    lines += tw.counter_lines(p["counters_client"], p["counters_server"], SHOW)
    if rst_after:
        r = rst_after[0]
        lines += ["", f"the SYN-ACK at {late[0]['t_ms']:.3f} ms came {late[0]['t_ms'] - closed:.3f} "
                  f"ms after close(); the client answered it {p['rst_ms_after_synack']:.3f} ms "
                  f"later with {r['flags']} seq={r['seq']} (the SYN-ACK's ack) win={r['win']}"]
    else:
        lines += ["", "NO RST followed a SYN-ACK that arrived after close()"]
    notes = [(p["_at"]["end_ns"], "client: poll() timed out, close()")]
    seg = {}
    sa = tw.index_of(p, lambda x: x["kind"] == "tcp" and x["flags"] == "SA")
    r = tw.index_of(p, lambda x: x["kind"] == "tcp" and x["dir"] == "c>s" and "R" in x["flags"])
    if sa is not None:
        seg[sa] = (tw.counted(p["counters_server"], "TcpExtTCPSynRetrans", side="server: ") +
                   f"; nft dropped {dropped} before it")
    if r is not None:
        seg[r] = (tw.counted(p["counters_client"], "TcpOutRsts", side="client: ") + "; " +
                  tw.counted(p["counters_server"], "TcpExtEmbryonicRsts", side="server: "))
    rows = tw.ladder_rows(p, "close() in SYN-SENT, then the late SYN-ACK", notes, seg)
    obj = {"experiment": NAME, "kernel": kernel, "collected_at": t.collected_at(rawdir),
           "load_average": None, "counters": p["counters_client"], **tw.strip_private(p)}
    tw.write_with_ladder(outdir, NAME, lines + [""] + tw.ladder_lines(rows), obj, rows)


if __name__ == "__main__":
    sys.exit(t.report_main(sys.argv, build))
