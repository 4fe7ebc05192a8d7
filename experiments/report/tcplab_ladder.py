"""The ladder picture, true to time: plain SVG text written here, in-process (no external tool,
so no path or string of a run ever reaches an interpreter).

Time runs down the page at one scale per picture (px per ms, said in the caption).  Rows closer
than one line of text are spread apart (that stretch of the time axis is dotted: not to scale);
an idle gap longer than BREAK_MS is cut (a marked break with the gap's length written).  The
client and the server are two vertical lines; each segment an arrow from its sender to its
receiver, labelled above it on a white background; a socket state seen by sockwatch is a box on
that side's line at the time it was seen; every note is wrapped in a box in the margin column.
A row with "sep" starts a band with its heading (a part of a report).  Same rows, same bytes."""
import math
import re
from xml.sax.saxutils import escape

import tcplab as t

WIDTH = 1000
FONT = 11                 # px, monospace
CHAR_W = 6.7              # px per character of FONT (a little more than 0.6 em: no overflow)
LINE_H = 14               # px per line of note text
AXIS_X = 70               # the time axis; tick labels left of it
TIME_X = 170              # each row's t_ms, right-aligned here
CLIENT_X = 260
SERVER_X = 620
NOTE_X = 690              # the margin column for notes
NOTE_W = WIDTH - NOTE_X - 8
MIN_DY = 26               # px between two rows, at least: a label and its arrow
SLOPE = 8                 # px an arrow falls from sender to receiver (direction, not time)
BREAK_MS = 200.0          # an idle gap longer than this is cut
BREAK_PX = 40
TARGET_PX = 560           # the longest unbroken stretch gets about this many px
MIN_SCALE, MAX_SCALE = 0.02, 20.0   # px per ms
TOP = 34
BAND_HEAD = 30

STATES = {"ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT", "CLOSE",
          "CLOSE-WAIT", "LAST-ACK", "LISTEN", "CLOSING", "NEW-SYN-RECV", "UNCONN"}
SERVER_ONLY = {"SYN-RECV", "NEW-SYN-RECV", "CLOSE-WAIT", "LAST-ACK", "LISTEN"}
_SOCKWATCH = re.compile(r"^(?:(client|server) )?sockwatch: (?:(new|change|gone) )?([A-Z][A-Z0-9-]*)")
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def text(s):
    """A string from a file as SVG character data: escaped, and no character XML forbids."""
    return escape(_BAD_XML.sub("?", str(s)))


def f1(v):
    """A coordinate as the file writes it (one decimal: same rows → same bytes)."""
    return f"{v:.1f}"


def state_of(note):
    """(side, event, state) of a sockwatch note that names a state, else None.  A note without
    a side ("sockwatch: ...", the client's socket in the wire units) is the client's unless
    only a server has that state."""
    m = _SOCKWATCH.match(note or "")
    if not m or m.group(3) not in STATES:
        return None
    side = m.group(1) or ("server" if m.group(3) in SERVER_ONLY else "client")
    return side, m.group(2) or "", m.group(3)


def wrap(s, width):
    """s in lines of at most width characters (a longer word is cut into pieces)."""
    out, cur = [], ""
    for w in str(s).split():
        while len(w) > width:
            if cur:
                out.append(cur)
                cur = ""
            out.append(w[:width])
            w = w[width:]
        if cur and len(cur) + 1 + len(w) > width:
            out.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return out + ([cur] if cur else [])


NOTE_CHARS = int((NOTE_W - 8) // CHAR_W)
LABEL_CHARS = int((SERVER_X - CLIENT_X + 100) // CHAR_W)   # may run past the lines, on white


def bands(rows):
    """[(heading or None, [rows])] split at the "sep" rows."""
    out = []
    for r in rows:
        if "sep" in r:
            out.append((r["sep"], []))
        else:
            if not out:
                out.append((None, []))
            out[-1][1].append(r)
    return [b for b in out if b[0] is not None or b[1]]


def stretches(rs):
    """The rows' time spans between breaks: [(t_first, t_last)]."""
    out = []
    for i, r in enumerate(rs):
        if i == 0 or r["t_ms"] - rs[i - 1]["t_ms"] > BREAK_MS:
            out.append([r["t_ms"], r["t_ms"]])
        else:
            out[-1][1] = r["t_ms"]
    return out


def pick_scale(rows):
    """px per ms for the whole picture: the longest unbroken stretch gets about TARGET_PX."""
    longest = max((b - a for _, rs in bands(rows) for a, b in stretches(rs)), default=0.0)
    if longest <= 0:
        return MAX_SCALE
    return min(MAX_SCALE, max(MIN_SCALE, TARGET_PX / longest))


def nice_step(min_ms):
    """The smallest 1, 2 or 5 × 10^k ≥ min_ms."""
    k = math.floor(math.log10(min_ms))
    for m in (1, 2, 5, 10):
        if m * 10 ** k >= min_ms - 1e-12:
            return m * 10 ** k
    return 10 ** (k + 1)


def fmt_ms(v, step):
    dec = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{dec}f} ms"


def layout(rows, scale):
    """Each band's heading y and its rows' y, spreads and breaks: [{"head", "y0", "items":
    [(row, y, note_lines)], "segs": [(t0, y0, t1, y1, kind)], "end"}], kind "scale", "spread"
    or "break"; and the picture's bottom y."""
    y = TOP
    out = []
    for head, rs in bands(rows):
        band = {"head": head, "y0": y, "items": [], "segs": []}
        y += BAND_HEAD if head is not None else 8
        y += 14
        prev = None
        for r in rs:
            lines = wrap(r.get("note") or "", NOTE_CHARS)
            if prev is not None:
                pr, py, plines = prev
                dt = r["t_ms"] - pr["t_ms"]
                need = max(MIN_DY, len(plines) * LINE_H + 12)
                if dt > BREAK_MS:
                    y = py + max(need, BREAK_PX)
                    band["segs"].append((pr["t_ms"], py, r["t_ms"], y, "break"))
                else:
                    true_dy = dt * scale
                    dy = max(need, true_dy)
                    y = py + dy
                    band["segs"].append((pr["t_ms"], py, r["t_ms"], y,
                                         "scale" if dy == true_dy else "spread"))
            band["items"].append((r, y, lines))
            prev = (r, y, lines)
        if prev is not None:
            y = prev[1] + max(MIN_DY, len(prev[2]) * LINE_H + 12)
        band["end"] = y
        out.append(band)
        y += 10
    return out, y


def _label_box(x_mid, y_base, s):
    w = len(s) * CHAR_W + 6
    return (f'<rect x="{f1(x_mid - w / 2)}" y="{f1(y_base - FONT)}" width="{f1(w)}" '
            f'height="{f1(FONT + 3)}" fill="#fff"/>'
            f'<text x="{f1(x_mid)}" y="{f1(y_base)}" text-anchor="middle">{text(s)}</text>')


def _draw_band(band, scale, out):
    head, items, segs = band["head"], band["items"], band["segs"]
    if head is not None:
        out.append(f'<line x1="8" y1="{f1(band["y0"] + 4)}" x2="{WIDTH - 8}" '
                   f'y2="{f1(band["y0"] + 4)}" stroke="#999"/>')
        out.append(f'<text x="12" y="{f1(band["y0"] + 20)}" font-weight="bold">'
                   f'{text(head)}</text>')
    if not items:
        return
    y_top, y_end = items[0][1] - 14, band["end"] - 6
    # the two lines, dashed across a break
    cuts = [(y0, y1) for _, y0, _, y1, k in segs if k == "break"]
    for x in (CLIENT_X, SERVER_X):
        a = y_top
        for y0, y1 in cuts:
            out.append(f'<line x1="{x}" y1="{f1(a)}" x2="{x}" y2="{f1(y0 + 10)}" '
                       f'stroke="#000" stroke-width="1.5"/>')
            out.append(f'<line x1="{x}" y1="{f1(y0 + 10)}" x2="{x}" y2="{f1(y1 - 10)}" '
                       f'stroke="#000" stroke-dasharray="2 4"/>')
            a = y1 - 10
        out.append(f'<line x1="{x}" y1="{f1(a)}" x2="{x}" y2="{f1(y_end)}" stroke="#000" '
                   f'stroke-width="1.5"/>')
    # the time axis: solid to scale, dotted where spread, cut at a break
    for t0, y0, t1, y1, kind in segs:
        if kind == "scale":
            out.append(f'<line class="axis" x1="{AXIS_X}" y1="{f1(y0)}" x2="{AXIS_X}" '
                       f'y2="{f1(y1)}" stroke="#000" stroke-width="2"/>')
        elif kind == "spread":
            out.append(f'<line class="spread" x1="{AXIS_X}" y1="{f1(y0)}" x2="{AXIS_X}" '
                       f'y2="{f1(y1)}" stroke="#888" stroke-width="2" stroke-dasharray="1 3"/>')
        else:
            m = (y0 + y1) / 2
            for dy in (-4, 4):
                out.append(f'<line x1="{AXIS_X - 7}" y1="{f1(m + dy + 3)}" x2="{AXIS_X + 7}" '
                           f'y2="{f1(m + dy - 3)}" stroke="#c00" stroke-width="1.5"/>')
            gap = f"{t1 - t0:.3f} ms idle, cut"
            out.append(f'<rect x="{AXIS_X + 12}" y="{f1(m - FONT + 1)}" '
                       f'width="{f1(len(gap) * CHAR_W + 6)}" height="{f1(FONT + 4)}" fill="#fff"/>')
            out.append(f'<text class="break" x="{AXIS_X + 15}" y="{f1(m + 3)}" fill="#c00">'
                       f'{text(gap)}</text>')
    # ticks, at a step of at least 40 px, inside each stretch
    step = nice_step(40 / scale)
    pts = [(r["t_ms"], y) for r, y, _ in items]
    runs, cur = [], [pts[0]]
    for (t0, y0, t1, y1, kind), p in zip(segs, pts[1:]):
        if kind == "break":
            runs.append(cur)
            cur = [p]
        else:
            cur.append(p)
    runs.append(cur)
    for run in runs:
        k = math.ceil(run[0][0] / step - 1e-9)
        while k * step <= run[-1][0] + 1e-9:
            tv = k * step
            y = next(ya + (yb - ya) * ((tv - ta) / (tb - ta) if tb > ta else 0)
                     for (ta, ya), (tb, yb) in zip(run, run[1:] + [run[-1]])
                     if ta <= tv <= tb + 1e-9)
            out.append(f'<line class="tick" x1="{AXIS_X - 5}" y1="{f1(y)}" x2="{AXIS_X}" '
                       f'y2="{f1(y)}" stroke="#000"/>')
            out.append(f'<text x="{AXIS_X - 8}" y="{f1(y + 4)}" text-anchor="end" '
                       f'fill="#444">{text(fmt_ms(tv, step))}</text>')
            k += 1
    # the rows
    for r, y, lines in items:
        if r.get("dir") is None:
            out.append(f'<text class="t" x="{TIME_X}" y="{f1(y + 4)}" text-anchor="end" '
                       f'fill="#555">{r["t_ms"]:.3f}</text>')
        else:
            a, b = {"c>s": (CLIENT_X, SERVER_X), "s>c": (SERVER_X, CLIENT_X)}.get(
                r["dir"], (CLIENT_X, SERVER_X))
            colour = "#000" if r["dir"] in ("c>s", "s>c") else "#c00"
            tip = -1 if b > a else 1
            out.append(f'<g class="seg" data-dir="{text(r["dir"])}">'
                       f'<line x1="{a}" y1="{f1(y)}" x2="{b + tip * 2}" y2="{f1(y + SLOPE)}" '
                       f'stroke="{colour}" stroke-width="1.3"/>'
                       f'<path d="M{b} {f1(y + SLOPE)} l{tip * 9} -5 l0 8 z" fill="{colour}"/>')
            label = f'{r["t_ms"]:.3f} ms  {r.get("label") or ""}'
            if len(label) > LABEL_CHARS:
                label = label[:LABEL_CHARS - 1] + "…"
            out.append(_label_box((CLIENT_X + SERVER_X) / 2, y - 4, label) + "</g>")
        st = state_of(r.get("note"))
        if st is not None:
            side, ev, state = st
            x = CLIENT_X if side == "client" else SERVER_X
            s = ("gone " if ev == "gone" else "") + state
            w = len(s) * CHAR_W + 10
            fill, stroke = ("#eee", "#888") if ev == "gone" else ("#dff0ff", "#247")
            out.append(f'<g class="state" data-side="{side}">'
                       f'<rect x="{f1(x - w / 2)}" y="{f1(y - 9)}" width="{f1(w)}" height="18" '
                       f'rx="4" fill="{fill}" stroke="{stroke}"/>'
                       f'<text x="{x}" y="{f1(y + 4)}" text-anchor="middle">{text(s)}</text></g>')
        if lines:
            h = len(lines) * LINE_H + 4
            w = max(len(s) for s in lines) * CHAR_W + 8
            out.append(f'<g class="note"><rect x="{NOTE_X}" y="{f1(y - 10)}" width="{f1(w)}" '
                       f'height="{h}" fill="#fffbe6" stroke="#cb9"/>')
            for i, s in enumerate(lines):
                out.append(f'<text x="{NOTE_X + 4}" y="{f1(y + 1 + i * LINE_H)}">{text(s)}</text>')
            out.append("</g>")


def svg(rows, client="client", server="server", notes_title="notes"):
    """The ladder of rows (tcplab_pkt/tcplab_wire ladder_rows: {"t_ms", "dir", "label", "note"}
    or {"sep"}) as SVG text."""
    rows = list(rows)
    scale = pick_scale(rows)
    bs, bottom = layout(rows, scale)
    caption = (f"time runs down to scale: 1 ms = {scale:.3g} px (solid axis); a dotted axis "
               f"is spread to fit the text, not to scale; an idle gap over {BREAK_MS:g} ms is "
               f"cut (red marks, its length written); a box on a line: that side's socket "
               f"state when sockwatch saw it; an arrow starts at its capture time")
    cap = wrap(caption, int((WIDTH - 16) // CHAR_W))
    height = bottom + 14 + len(cap) * 13 + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{f1(height)}" '
           f'viewBox="0 0 {WIDTH} {f1(height)}" font-family="DejaVu Sans Mono, monospace" '
           f'font-size="{FONT}">',
           f'<rect width="{WIDTH}" height="{f1(height)}" fill="#fff"/>',
           f'<text x="{AXIS_X}" y="20" text-anchor="middle" font-weight="bold">t</text>',
           f'<text x="{TIME_X}" y="20" text-anchor="end" font-weight="bold">t_ms</text>',
           f'<text x="{CLIENT_X}" y="20" text-anchor="middle" font-weight="bold">{text(client)}</text>',
           f'<text x="{SERVER_X}" y="20" text-anchor="middle" font-weight="bold">{text(server)}</text>',
           f'<text x="{WIDTH - 8}" y="20" text-anchor="end" font-weight="bold">'
           f'{text(notes_title)}</text>']
    for b in bs:
        _draw_band(b, scale, out)
    for i, s in enumerate(cap):
        out.append(f'<text class="caption" x="8" y="{f1(bottom + 14 + i * 13)}" '
                   f'fill="#333">{text(s)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_tmp(path, rows, client, server):
    """The ladder of rows into a temporary file beside path (renamed by
    tcplab.write_outputs(made=)) → its name."""
    return t.write_tmp_text(path, svg(rows, client, server))
