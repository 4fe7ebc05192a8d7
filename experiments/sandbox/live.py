#!/usr/bin/env python3
"""live.py — the sandbox's live pane: follows the probes' raw files as they grow (both sides'
sockwatch, the capture on veth-c) and prints each event as one readable line, on stdout and
appended to --log; once --stop exists it reads what is left, prints both sides' counter deltas
and an `end` line, and exits.  Standard library and experiments/report/tcplab.py only."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab as t  # noqa: E402

POLL_S = 0.05
CLIENT_ADDR = "192.0.2.1"


def sock_line(side, d, base_ns):
    timer = d.get("timer", "?")
    if timer not in ("off", "?") and "expires_ms" in d:
        timer += f" {d['expires_ms']} ms"
    extra = f" retrans={d['retrans']}" if d.get("retrans", "0") != "0" else ""
    state = t.shown_state(d.get("state", "?"))
    return (f"{rel(d, base_ns)} {side:<6} {d.get('event', '?'):<6} {state:<11} "
            f"{d.get('local', '?')} -> {d.get('peer', '?')}  timer {timer}{extra}")


def packet_line(d, base_ns):
    src, dst = d.get("src", "?"), d.get("dst", "?")
    if "icmp" in d or "icmp6" in d:
        what = f"ICMP {d.get('icmp', d.get('icmp6'))} code={d.get('code', '-')}"
    elif "frag" in d:
        what = f"IP fragment offset={d['frag']} mf={d.get('mf', '?')}"
    else:
        what = (f"{d.get('flags', '?'):<3} seq={d.get('seq', '?')} ack={d.get('ack', '?')} "
                f"len={d.get('len', '?')} win={d.get('win', '?')}")
    arrow = "c>s" if src.startswith(CLIENT_ADDR + ":") or src == CLIENT_ADDR else "s>c"
    return f"{rel(d, base_ns)} wire   {arrow}    {what}  {src} > {dst}"


def rel(d, base_ns):
    try:
        return f"{(int(d['t_ns']) - base_ns) / 1e9:+11.6f}"
    except (KeyError, ValueError):
        return " " * 11


class Follow:
    """One raw file read as it grows, whole lines only."""

    def __init__(self, path, fmt):
        self.path, self.fmt, self.f, self.part = path, fmt, None, ""

    def lines(self):
        if self.f is None:
            try:
                self.f = open(self.path, encoding="utf-8", errors="replace")
            except FileNotFoundError:
                return []
        text = self.part + self.f.read()
        *done, self.part = text.split("\n")
        return done


def deltas(raw, side):
    path = os.path.join(raw, f"{side}-counters-delta.txt")
    try:
        if os.path.getsize(path) == 0:
            return [f"{side} counters: none changed"]
        d = t.read_counters_delta(path)
    except (OSError, t.RawError) as e:
        return [f"{side} counters: not read ({e})"]
    return [f"{side} counters (deltas):"] + t.counters_block(d, "  ")


def main():
    ap = argparse.ArgumentParser(prog="live.py")
    ap.add_argument("--raw", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    base = [time.monotonic_ns()]     # the client sockwatch's ready t_ns, once read
    log = open(a.log, "a", encoding="utf-8")

    def say(line):
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    files = [Follow(os.path.join(a.raw, "client-sockwatch.txt"),
                    lambda d: sock_line("client", d, base[0])),
             Follow(os.path.join(a.raw, "server-sockwatch.txt"),
                    lambda d: sock_line("server", d, base[0])),
             Follow(os.path.join(a.raw, "capture.txt"), lambda d: packet_line(d, base[0]))]
    say("sandbox: live events (t in s from the client sockwatch's start; "
        "client 192.0.2.1, server 192.0.2.2)")
    while True:
        stopping = os.path.exists(a.stop)
        new = []
        for f in files:
            for line in f.lines():
                d = t.kv(line)
                if line.startswith("ready ") and f is files[0] and "t_ns" in d:
                    base[0] = int(d["t_ns"])
                if line.startswith("t_s=") or line.startswith("frag="):
                    new.append((int(d.get("t_ns", "0")), f, d))
        # the three files in one time order, within each poll
        for _, f, d in sorted(new, key=lambda x: x[0]):
            say(f.fmt(d))
        if stopping:
            break
        if not os.path.isdir(a.raw):    # the sandbox is gone without a stop: nothing to wait for
            log.close()
            return 1
        time.sleep(POLL_S)
    for side in ("client", "server"):
        for line in deltas(a.raw, side):
            say(line)
    say("end of the sandbox")
    log.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
