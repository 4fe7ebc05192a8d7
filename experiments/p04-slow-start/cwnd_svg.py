"""p04-slow-start's cwnd picture, as plain SVG text written here (no external tool, so no string
of a run reaches an interpreter).

One panel per part.  Time runs right from the part's first data segment, at one linear scale per
panel (said on its axis).  The congestion window (tcp:tcp_probe's cwnd, in segments, at each
segment the client received) is a blue step line on the left axis; ssthresh, once something set
it, a dashed green line on the same axis; the smoothed RTT (tcp_probe's srtt) an orange line on
the right axis, in ms: it grows as the bottleneck's queue fills.  Each retransmission
(tcp:tcp_retransmit_skb) is a red tick under the plot.  Every element carries a class (cwnd,
ssthresh, srtt, rtx), so the picture can be checked as data."""
import tcplab as t
from tcplab_ladder import f1, text
from tcplab_tseq import svg_open, tick_values, time_ticks

WIDTH = 1000
PANEL_H = 300
TOP = 40
LEFT = 80
RIGHT = 90
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = PANEL_H - 90
INF = 2147483647
STYLE = ("<style>text{font-family:monospace;font-size:11px}.title{font-weight:bold}"
         ".mid{text-anchor:middle}.end{text-anchor:end}.frame{fill:none;stroke:#999}"
         ".tick{stroke:#999}.cwnd{fill:none;stroke:#1f4e9e;stroke-width:1.6}"
         ".ssthresh{fill:none;stroke:#1e8449;stroke-width:1.4;stroke-dasharray:6 4}"
         ".srtt{fill:none;stroke:#d35400;stroke-width:1.2}.rtx{stroke:#c0392b;stroke-width:1.5}"
         ".l-cwnd{fill:#1f4e9e}.l-srtt{fill:#d35400}.l-ssthresh{fill:#1e8449}.l-rtx{fill:#c0392b}"
         "</style>")


def fmt(v):
    return f"{v:g}" if v >= 1 else f"{v:.3g}"


def panel(title, probes, rtx_ns, t0, t1, y0):
    """One panel's SVG lines.  probes: [{"t_ns", "cwnd", "ssthresh", "srtt_us"}] in time order;
    rtx_ns: the retransmissions' times; t0, t1: the panel's time span (ns)."""
    if not probes:
        raise ValueError(f"{title}: no tcp_probe sample to draw")
    span_ms = max((t1 - t0) / 1e6, 0.001)
    top_c = max(max(p["cwnd"] for p in probes),
                max((p["ssthresh"] for p in probes if p["ssthresh"] < INF), default=0), 10)
    top_r = max(max(p["srtt_us"] for p in probes) / 1000, 0.1)
    xs, yc, yr = PLOT_W / (span_ms * 1.02), PLOT_H / (top_c * 1.08), PLOT_H / (top_r * 1.08)

    def x(t_ns):
        return LEFT + max(t_ns - t0, 0) / 1e6 * xs

    def c(v):
        return y0 + PLOT_H - v * yc

    def r(ms):
        return y0 + PLOT_H - ms * yr

    out = [f'<text x="{LEFT}" y="{f1(y0 - 24)}" class="title">{text(title)}</text>',
           f'<rect x="{LEFT}" y="{f1(y0)}" width="{PLOT_W}" height="{PLOT_H}" class="frame"/>']
    ticks, step = time_ticks(LEFT, y0 + PLOT_H, xs, span_ms, 1.02, 5, fmt)
    out += ticks
    out.append(f'<text x="{f1(LEFT + PLOT_W / 2)}" y="{f1(y0 + PLOT_H + 44)}" class="mid">'
               f'ms from the first data segment ({fmt(step)} ms per tick)</text>')
    for axis, top, ypos, cls, side in (("cwnd (segments)", top_c, c, "l-cwnd", LEFT - 6),
                                       ("srtt (ms)", top_r, r, "l-srtt", LEFT + PLOT_W + 6)):
        for v in tick_values(top, 1.08, 5):
            anchor = ' class="end"' if side < LEFT else ""
            out.append(f'<text x="{side}" y="{f1(ypos(v) + 4)}"{anchor}>{fmt(v)}</text>')
        out.append(f'<text x="{side if side > LEFT else LEFT}" y="{f1(y0 - 6)}" '
                   f'class="{cls}{"" if side < LEFT else " end"}">{text(axis)}</text>')
    # cwnd as steps: each sample holds until the next
    pts, prev = [], None
    for p in probes:
        if prev is not None:
            pts.append(f"{f1(x(p['t_ns']))},{f1(c(prev))}")
        pts.append(f"{f1(x(p['t_ns']))},{f1(c(p['cwnd']))}")
        prev = p["cwnd"]
    out.append(f'<polyline points="{" ".join(pts)}" class="cwnd"/>')
    fin = [p for p in probes if p["ssthresh"] < INF]
    if fin:
        spts, prev = [], None
        for p in fin:
            if prev is not None and prev != p["ssthresh"]:
                spts.append(f"{f1(x(p['t_ns']))},{f1(c(prev))}")
            spts.append(f"{f1(x(p['t_ns']))},{f1(c(p['ssthresh']))}")
            prev = p["ssthresh"]
        out.append(f'<polyline points="{" ".join(spts)}" class="ssthresh"/>')
    out.append('<polyline points="' + " ".join(
        f"{f1(x(p['t_ns']))},{f1(r(p['srtt_us'] / 1000))}" for p in probes) + '" class="srtt"/>')
    for tn in rtx_ns:
        out.append(f'<line x1="{f1(x(tn))}" y1="{f1(y0 + PLOT_H + 22)}" x2="{f1(x(tn))}" '
                   f'y2="{f1(y0 + PLOT_H + 30)}" class="rtx"/>')
    return out


LEGEND = (("l-cwnd", "cwnd (left axis)"), ("l-ssthresh", "ssthresh, once set (left, dashed)"),
          ("l-srtt", "srtt (right axis)"), ("l-rtx", "a retransmission (ticks below)"))


def svg(panels, caption):
    """panels: [(title, probes, rtx_ns, t0, t1)] → the SVG text."""
    height = TOP + len(panels) * PANEL_H + 30
    out = svg_open(WIDTH, height, STYLE, caption, 18, LEFT)
    lx = LEFT
    for cls, what in LEGEND:
        out.append(f'<text x="{lx}" y="34" class="{cls}">■ {text(what)}</text>')
        lx += 7 * (len(what) + 4)
    for i, (title, probes, rtx_ns, t0, t1) in enumerate(panels):
        out += panel(title, probes, rtx_ns, t0, t1, TOP + 40 + i * PANEL_H)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_tmp(path, panels, caption):
    """The picture into a temporary file beside path (renamed by tcplab.write_outputs(made=))
    → its name."""
    return t.write_tmp_text(path, svg(panels, caption))
