#!/usr/bin/env python3
"""Draw docs/state-machine.svg: the TCP state machine as Linux implements it, with the path of
each lesson experiment in its own colour.  Deterministic (same input, same bytes), standard
library only:  python3 docs/state-machine.py > docs/state-machine.svg

Every transition carries the event that causes it and the kernel function that makes it, as
docs/state-machine.md lists them with their sources."""
import math
import sys

W, H = 1100, 1080
BOX_W, BOX_H = 150, 40

# state: (centre x, centre y), one line per row of boxes in the picture.  CLOSED is drawn
# twice, where a socket starts and where it ends (GONE), so that no arrow has to run back up
# the page.
STATES = {
    "CLOSED": (530, 70),
    "LISTEN": (230, 190), "SYN-SENT": (830, 190),
    "SYN-RECV": (230, 340),
    "ESTAB": (530, 470),
    "FIN-WAIT-1": (230, 600), "CLOSE-WAIT": (830, 600),
    "FIN-WAIT-2": (230, 740), "CLOSING": (530, 740), "LAST-ACK": (830, 740),
    "TIME-WAIT": (230, 880), "GONE": (830, 880),
}
# a box's text where it is not the state's name
LABEL = {"ESTAB": "ESTABLISHED", "GONE": "CLOSED"}

EXPERIMENTS = [
    ("p01", "#d62728", "p01-synretry: connect(), SYN retries, ETIMEDOUT"),
    ("p02", "#1f77b4", "p02-accept-queue: the handshake, the accept queue"),
    ("p03", "#2ca02c", "p03-small-writes: data, Nagle and delayed ACK"),
    ("p05", "#ff7f0e", "p05-close: FIN or RST, CLOSE-WAIT, half-close"),
    ("p06", "#9467bd", "p06-time-wait: who keeps TIME-WAIT, 60 s"),
]
COLOUR = {k: c for k, c, _ in EXPERIMENTS}

# (from, to, label lines (the last one: the kernel function), experiments, label x, label y,
#  text-anchor, shift of the arrow along its normal, px)
TRANSITIONS = [
    ("CLOSED", "SYN-SENT", ["connect(): send SYN", "tcp_v4_connect()"], ["p01", "p02"],
     760, 95, "start", -10),
    ("SYN-SENT", "CLOSED", ["SYN retries used up:", "ETIMEDOUT", "tcp_write_err()"], ["p01"],
     640, 150, "end", -10),
    ("CLOSED", "LISTEN", ["listen()", "inet_csk_listen_start()"], ["p02"], 300, 105, "end", 0),
    ("LISTEN", "SYN-RECV", ["rcv SYN: send SYN-ACK", "tcp_conn_request()"], ["p02"],
     245, 260, "start", 0),
    ("SYN-RECV", "ESTAB", ["rcv ACK: child socket queued", "tcp_check_req()"], ["p02"],
     330, 455, "end", 0),
    ("SYN-SENT", "ESTAB", ["rcv SYN-ACK: send ACK", "tcp_finish_connect()"], ["p02"],
     765, 320, "start", 0),
    ("ESTAB", "FIN-WAIT-1", ["close(), shutdown(): send FIN", "tcp_close_state()"],
     ["p05", "p06"], 300, 520, "end", 0),
    ("ESTAB", "CLOSE-WAIT", ["rcv FIN: ACK", "tcp_fin()"], ["p05", "p06"], 765, 505, "start", 0),
    ("FIN-WAIT-1", "FIN-WAIT-2", ["rcv ACK of FIN", "tcp_rcv_state_process()"],
     ["p05", "p06"], 205, 665, "end", 0),
    ("FIN-WAIT-1", "CLOSING", ["rcv FIN: ACK (both closed at once)", "tcp_fin()"], [],
     395, 612, "start", 0),
    ("FIN-WAIT-2", "TIME-WAIT", ["rcv FIN: ACK", "tcp_fin(): tcp_time_wait()"],
     ["p05", "p06"], 205, 800, "end", 0),
    ("CLOSING", "TIME-WAIT", ["rcv ACK of FIN", "tcp_rcv_state_process()"], [],
     430, 840, "start", 0),
    ("CLOSE-WAIT", "LAST-ACK", ["close(): send FIN", "tcp_close_state()"], ["p05", "p06"],
     915, 665, "start", 0),
    ("LAST-ACK", "GONE", ["rcv ACK of FIN", "tcp_rcv_state_process()"], ["p05", "p06"],
     915, 805, "start", 0),
    ("TIME-WAIT", "GONE", ["timer: TCP_TIMEWAIT_LEN, 60 s", "tw_timer_handler()"],
     ["p06"], 530, 905, "middle", 0),
    ("ESTAB", "GONE", ["send RST: close()", "with unread data,", "or SO_LINGER 0;",
                       "or rcv RST", "__tcp_close(), tcp_reset()"], ["p05"],
     548, 530, "end", 0),
]

# (state, side, label lines, experiment, label x, label y, text-anchor)
LOOPS = [
    ("SYN-SENT", "right", ["RTO: send SYN again", "tcp_retransmit_timer()"], "p01",
     1092, 175, "end"),
    ("SYN-RECV", "left", ["ACK, accept queue full:", "dropped", "tcp_check_req()"], "p02",
     150, 395, "middle"),
    ("ESTAB", "right", ["data; its ACK now", "or delayed (40 ms)", "__tcp_ack_snd_check()"],
     "p03", 660, 430, "start"),
]


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def edge_point(cx, cy, dx, dy):
    """Where the ray from a box's centre in direction (dx, dy) leaves the box."""
    hw, hh = BOX_W / 2 + 3, BOX_H / 2 + 3
    tx = hw / abs(dx) if dx else math.inf
    ty = hh / abs(dy) if dy else math.inf
    t = min(tx, ty)
    return cx + dx * t, cy + dy * t


def transition(src, dst, exps, shift):
    x1, y1 = STATES[src]
    x2, y2 = STATES[dst]
    d = math.hypot(x2 - x1, y2 - y1)
    dx, dy = (x2 - x1) / d, (y2 - y1) / d
    ax, ay = edge_point(x1, y1, dx, dy)
    bx, by = edge_point(x2, y2, -dx, -dy)
    ax, ay, bx, by = ax - dy * shift, ay + dx * shift, bx - dy * shift, by + dx * shift
    out = [f'<line x1="{ax:.1f}" y1="{ay:.1f}" x2="{bx - dx * 8:.1f}" y2="{by - dy * 8:.1f}" '
           f'stroke="#444" stroke-width="1.5"/>', head(bx, by, dx, dy, "#444")]
    # the colours run beside the arrow, on the side away from a neighbour it was shifted from
    nx, ny = (-dy, dx) if shift >= 0 else (dy, -dx)
    for i, e in enumerate(exps):
        off = 6 * (i + 1)
        out.append(f'<line x1="{ax + nx * off:.1f}" y1="{ay + ny * off:.1f}" '
                   f'x2="{bx + nx * off - dx * 10:.1f}" y2="{by + ny * off - dy * 10:.1f}" '
                   f'stroke="{COLOUR[e]}" stroke-width="4" stroke-opacity="0.85"/>')
    return out


def head(x, y, dx, dy, colour):
    """An arrowhead with its tip at (x, y), pointing along (dx, dy)."""
    bx, by = x - dx * 11, y - dy * 11
    pts = [(x, y), (bx - dy * 5, by + dx * 5), (bx + dy * 5, by - dx * 5)]
    return (f'<polygon points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in pts)}" '
            f'fill="{colour}"/>')


def label(x, y, anchor, lines):
    """The event on its lines, then the kernel function in grey."""
    out = []
    for i, text in enumerate(lines):
        cls = "fn" if i == len(lines) - 1 else "ev"
        out.append(f'<text x="{x}" y="{y + 14 * i}" text-anchor="{anchor}" '
                   f'class="{cls}">{esc(text)}</text>')
    return out


def loop(state, side, lines, exp, lx, ly, anchor):
    cx, cy = STATES[state]
    s = 1 if side == "right" else -1
    x0 = cx + s * (BOX_W / 2 + 3)
    path = (f'M {x0:.1f} {cy - 10} C {x0 + s * 45:.1f} {cy - 40} {x0 + s * 45:.1f} {cy + 40} '
            f'{x0 + s * 10:.1f} {cy + 12}')
    out = [f'<path d="{path}" fill="none" stroke="{COLOUR[exp]}" stroke-width="4" '
           f'stroke-opacity="0.85"/>', head(x0, cy + 12, -s, 0, COLOUR[exp])]
    out += label(lx, ly, anchor, lines)
    return out


def legend():
    out = ['<text x="20" y="28" class="title">The TCP state machine (Linux 6.18), and the path '
           'of each lesson experiment</text>']
    x, y = 60, 950
    out.append(f'<rect x="{x - 10}" y="{y - 20}" width="980" height="{24 * 3 + 14}" '
               'fill="#fff" stroke="#999"/>')
    slots = [(x + 490 * (i % 2), y + 24 * (i // 2)) for i in range(len(EXPERIMENTS) + 1)]
    for (_, colour, text), (xx, yy) in zip(EXPERIMENTS, slots):
        out.append(f'<line x1="{xx}" y1="{yy}" x2="{xx + 30}" y2="{yy}" stroke="{colour}" '
                   'stroke-width="4"/>')
        out.append(f'<text x="{xx + 38}" y="{yy + 4}" class="lg">{esc(text)}</text>')
    xx, yy = slots[-1]
    out.append(f'<line x1="{xx}" y1="{yy}" x2="{xx + 30}" y2="{yy}" stroke="#444" '
               'stroke-width="1.5"/>')
    out.append(f'<text x="{xx + 38}" y="{yy + 4}" class="lg">a transition no lesson part '
               'shows (simultaneous close)</text>')
    return out


def main():
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Verdana, sans-serif">',
           '<style>.st{font-size:14px;font-weight:bold}.ev{font-size:12px;fill:#000}'
           '.fn{font-size:11px;fill:#555;font-family:DejaVu Sans Mono, monospace}'
           '.lg{font-size:12px}.title{font-size:16px;font-weight:bold}</style>',
           f'<rect width="{W}" height="{H}" fill="#fff"/>']
    out += legend()
    for src, dst, _lines, exps, _x, _y, _a, shift in TRANSITIONS:
        out += transition(src, dst, exps, shift)
    for st in LOOPS:
        out += loop(*st)
    for name, (cx, cy) in STATES.items():
        out.append(f'<rect x="{cx - BOX_W / 2:.0f}" y="{cy - BOX_H / 2:.0f}" width="{BOX_W}" '
                   f'height="{BOX_H}" rx="6" fill="#f4f4f4" stroke="#222" stroke-width="1.5"/>')
        out.append(f'<text x="{cx}" y="{cy + 5}" text-anchor="middle" class="st">'
                   f'{LABEL.get(name, name)}</text>')
    for _src, _dst, lines, _exps, x, y, anchor, _shift in TRANSITIONS:
        out += label(x, y, anchor, lines)
    out.append('</svg>')
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
