"""The time-sequence picture (what tcptrace and Wireshark's Stevens graph draw), as plain SVG
text written here, in-process: no external tool, so no string of a run reaches an interpreter.

One panel per part.  Time runs right, from the part's first data segment, at one linear scale
per panel (said on its axis); the sequence number runs up, in bytes from the first data byte.
Each data segment the client sent is a vertical bar from its first byte to its end, at the time
the capture saw it leave: blue, or red with a cross when nft dropped it after the capture, or
green when it is a byte range sent again.  The server's acknowledgment is a grey step line with
a dot at each ACK (so duplicate ACKs show as dots on one level), and each SACK block an ACK
carries is a purple bar just right of that ACK.  Every element carries a class (seg, seg
dropped, seg again, ack, ackpt, sack), so the picture can be checked as data.
Same panels, same bytes."""
import math

import tcplab as t
from tcplab_ladder import f1, text

WIDTH = 1000
PANEL_H = 330
TOP = 40
LEFT = 90                 # the sequence axis; its labels left of it
RIGHT = 190               # the legend column
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = PANEL_H - 80
FONT = 11
SACK_DX = 3.0             # px a SACK bar sits right of its ACK


def nice_step(span, ticks=6):
    """A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    p = 10 ** math.floor(math.log10(raw))
    return next(m * p for m in (1, 2, 5, 10) if m * p >= raw)


def svg_open(width, height, style, caption, caption_y, left=None):
    """A picture's first lines: the svg element (width x height px), its style, a white ground,
    and the caption at (left or LEFT, caption_y)."""
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">', style,
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
            f'<text x="{LEFT if left is None else left}" y="{caption_y}" class="title">'
            f'{text(caption)}</text>']


def tick_values(top, over, ticks=6):
    """An axis' tick values: 0, step, 2 step ... up to top * over, step = nice_step(top, ticks)."""
    step = nice_step(top, ticks)
    k = 0
    while k * step <= top * over:
        yield k * step
        k += 1


def time_ticks(left, bottom, xs, span_ms, over, ticks, label):
    """A time axis below a plot whose bottom edge is at y=bottom: a tick and its number at each
    of tick_values(span_ms, over, ticks) ms, at x = left + ms * xs, each number label(ms).
    Returns (the SVG lines, the step in ms)."""
    out = []
    for ms in tick_values(span_ms, over, ticks):
        xv = left + ms * xs
        out.append(f'<line x1="{f1(xv)}" y1="{f1(bottom)}" x2="{f1(xv)}" '
                   f'y2="{f1(bottom + 4)}" class="tick"/>')
        out.append(f'<text x="{f1(xv)}" y="{f1(bottom + 16)}" class="mid">{label(ms)}</text>')
    return out, nice_step(span_ms, ticks)


def panel(title, segs, dropped, again, y0):
    """One panel's SVG lines.  segs: the connection's segments (dicts with t_ns, dir, seq, ack,
    len, flags and, for the server's, sack: [(left, right)] relative to the client's ISN);
    dropped, again: the ids of the client segments dropped after the capture / sent again."""
    data = [p for p in segs if p["dir"] == "c>s" and p["len"] > 0]
    acks = [p for p in segs if p["dir"] == "s>c" and p["ack"] is not None
            and "S" not in p["flags"]]
    if not data:
        raise ValueError(f"{title}: no data segment to draw")
    base = min(p["seq"] for p in data)
    top = max(p["seq"] + p["len"] for p in data) - base
    t0 = data[0]["t_ns"]
    last_ack = [p for p in acks if p["ack"] - base >= top]
    t1 = max([p["t_ns"] for p in data] + [last_ack[0]["t_ns"] if last_ack else data[-1]["t_ns"]])
    span_ms = max((t1 - t0) / 1e6, 0.001)
    xs = PLOT_W / (span_ms * 1.04)
    ys = PLOT_H / (top * 1.06)

    def x(t_ns):
        return LEFT + (t_ns - t0) / 1e6 * xs

    def y(seq):
        return y0 + PLOT_H - (seq - base) * ys

    out = [f'<text x="{LEFT}" y="{f1(y0 - 12)}" class="title">{text(title)}</text>',
           f'<rect x="{LEFT}" y="{f1(y0)}" width="{PLOT_W}" height="{PLOT_H}" class="frame"/>']
    ticks, _ = time_ticks(LEFT, y0 + PLOT_H, xs, span_ms, 1.04, 6,
                          lambda ms: f"{round(ms, 6):g}")
    out += ticks
    out.append(f'<text x="{LEFT + PLOT_W / 2:.1f}" y="{f1(y0 + PLOT_H + 32)}" class="mid">'
               f'ms from the first data segment (one scale: {f1(xs)} px per ms)</text>')
    for b in tick_values(top, 1.06):
        yv = y(base + b)
        out.append(f'<line x1="{LEFT - 4}" y1="{f1(yv)}" x2="{LEFT}" y2="{f1(yv)}" class="tick"/>')
        out.append(f'<text x="{LEFT - 6}" y="{f1(yv + 4)}" class="end">{int(b)}</text>')
    out.append(f'<text x="14" y="{f1(y0 + PLOT_H / 2)}" class="mid" transform="rotate(-90 14 '
               f'{f1(y0 + PLOT_H / 2)})">bytes from the first data byte</text>')
    # the acknowledgment: a step line from the first ACK seen after the first data segment
    pts, prev = [], None
    for p in acks:
        if p["t_ns"] < t0:
            prev = p
            continue
        if p["t_ns"] > t1:          # the panel ends with the ACK of the whole flight
            break
        a = min(max(p["ack"], base), base + top)
        if prev is not None and not pts:
            pts.append((x(t0), y(min(max(prev["ack"], base), base + top))))
        if pts:
            pts.append((x(p["t_ns"]), pts[-1][1]))
        pts.append((x(p["t_ns"]), y(a)))
        out.append(f'<circle cx="{f1(x(p["t_ns"]))}" cy="{f1(y(a))}" r="2.5" class="ackpt"/>')
        for left, right in p.get("sack") or []:
            if right > left:
                out.append(f'<line x1="{f1(x(p["t_ns"]) + SACK_DX)}" y1="{f1(y(left))}" '
                           f'x2="{f1(x(p["t_ns"]) + SACK_DX)}" y2="{f1(y(right))}" class="sack"/>')
    if pts:
        out.append('<polyline points="' + " ".join(f"{f1(a)},{f1(b)}" for a, b in pts)
                   + '" class="ack"/>')
    for p in data:
        cls = "seg dropped" if id(p) in dropped else "seg again" if id(p) in again else "seg"
        xv = x(p["t_ns"])
        out.append(f'<line x1="{f1(xv)}" y1="{f1(y(p["seq"]))}" x2="{f1(xv)}" '
                   f'y2="{f1(y(p["seq"] + p["len"]))}" class="{cls}"/>')
        if id(p) in dropped:
            ym = y(p["seq"] + p["len"] / 2)
            out.append(f'<path d="M{f1(xv - 5)},{f1(ym - 5)} L{f1(xv + 5)},{f1(ym + 5)} '
                       f'M{f1(xv - 5)},{f1(ym + 5)} L{f1(xv + 5)},{f1(ym - 5)}" class="cross"/>')
    return out


LEGEND = (("seg", "data segment"), ("seg dropped", "dropped (nft)"),
          ("seg again", "sent again"), ("ack", "server's ACK"), ("sack", "SACK block"))
STYLE = ("<style>text{font-family:monospace;font-size:11px}.title{font-weight:bold}"
         ".mid{text-anchor:middle}.end{text-anchor:end}.frame{fill:none;stroke:#999}"
         ".tick{stroke:#999}.seg{stroke:#1f4e9e;stroke-width:2}.dropped{stroke:#c0392b}"
         ".again{stroke:#1e8449;stroke-width:3}.cross{stroke:#c0392b;stroke-width:2;fill:none}"
         ".ack{fill:none;stroke:#777;stroke-width:1.2}.ackpt{fill:#777}.sack{stroke:#8e44ad;stroke-width:3}"
         "</style>")


def svg(panels, caption):
    """panels: [(title, segs, dropped ids, again ids)] → the SVG text."""
    height = TOP + len(panels) * PANEL_H + 10
    out = svg_open(WIDTH, height, STYLE, caption, 20)
    for i, (title, segs, dropped, again) in enumerate(panels):
        y0 = TOP + 24 + i * PANEL_H
        out += panel(title, segs, dropped, again, y0)
        lx = LEFT + PLOT_W + 16
        for j, (cls, what) in enumerate(LEGEND):
            ly = y0 + 10 + j * 18
            out.append(f'<line x1="{lx}" y1="{ly - 7}" x2="{lx}" y2="{ly + 5}" '
                       f'class="legend {cls}"/>')
            out.append(f'<text x="{lx + 10}" y="{ly + 3}">{text(what)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_tmp(path, panels, caption):
    """The picture into a temporary file beside path (renamed by tcplab.write_outputs(made=))
    → its name."""
    return t.write_tmp_text(path, svg(panels, caption))
