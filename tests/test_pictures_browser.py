"""The pictures as a reader's browser draws them: every committed picture of the reference sets
(outputs/*/*.svg: ladders, time-sequence plots, gnuplot's plots), the state machine (docs/state-machine.svg) and the
committed five-kernel matrix (outputs/matrix.svg) is laid out
by Debian's chromium, headless, and measured there: no two texts overlap, every text of a state
or a note stays inside its box, no line runs through a text (unless an opaque box drawn over the
line holds the text: a ladder's label on its white patch), and nothing leaves the picture.  tests/test_ladder_svg.py checks the geometry the report computes; this
checks what the fonts of a real browser make of it (the report's CHAR_W against the glyphs).

One chromium run loads one page holding all the pictures inline; its script measures each text
with getBBox() and writes what it found into the page, which --dump-dom prints."""
import glob
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP

PICTURES = sorted(glob.glob(os.path.join(TOP, "outputs", "*", "*.svg"))) + \
    [os.path.join(TOP, "docs", "state-machine.svg"), os.path.join(TOP, "outputs", "matrix.svg")]
FONT = "DejaVu Sans Mono"     # the pictures' font-family; fonts-dejavu-core
SLACK = 0.5                   # px: rounding of a glyph's box

# Measures every picture (a <template class="pic" data-name=...> around each inline <svg>), writes
# {name: [problem, ...]} as JSON into <pre id="out">.  Two texts overlap when their boxes share
# more than SLACK px both ways; a text of a g.state or g.note must lie inside that group's rect;
# every text inside the svg's width and height.
SCRIPT = r"""
const SLACK = %(slack)s;
// an element's box in the picture's own units (its viewBox), with every transform applied (a
// rotated axis label), from the layout the browser made (a gnuplot plot, with no width of its
// own, is drawn at the page's width: scaled back)
let origin, sx, sy;
function box(e) {
  const b = e.getBoundingClientRect();
  return {x: (b.left - origin.left) * sx, y: (b.top - origin.top) * sy, w: b.width * sx,
          h: b.height * sy};
}
function meet(a, b) {
  return Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x) > SLACK &&
         Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y) > SLACK;
}
function inside(a, r) {
  return a.x >= r.x - SLACK && a.y >= r.y - SLACK &&
         a.x + a.w <= r.x + r.w + SLACK && a.y + a.h <= r.y + r.h + SLACK;
}
// whether the segment a-b passes through box b shrunk by SLACK*2 on each side (Liang-Barsky)
function crosses(a, c, b) {
  const x0 = b.x + 2 * SLACK, y0 = b.y + 2 * SLACK, x1 = b.x + b.w - 2 * SLACK,
        y1 = b.y + b.h - 2 * SLACK;
  if (x1 <= x0 || y1 <= y0) return false;
  let lo = 0, hi = 1;
  const dx = c[0] - a[0], dy = c[1] - a[1];
  for (const [pp, q] of [[-dx, a[0] - x0], [dx, x1 - a[0]], [-dy, a[1] - y0], [dy, y1 - a[1]]]) {
    if (pp === 0) { if (q < 0) return false; continue; }
    const r = q / pp;
    if (pp < 0) { if (r > hi) return false; if (r > lo) lo = r; }
    else { if (r < lo) return false; if (r < hi) hi = r; }
  }
  return lo <= hi;
}
function say(t, b) { return JSON.stringify(t.textContent.slice(0, 60)) + " at " +
                     [b.x, b.y, b.w, b.h].map(v => v.toFixed(1)).join(","); }
const out = {};
for (const tpl of document.querySelectorAll("template.pic")) {
  // each picture in a shadow root of its own: a <style> in one (the time-sequence plots have
  // one) styles only that one, as it does in a browser showing the file
  const host = document.createElement("div");
  document.body.appendChild(host);
  host.attachShadow({mode: "open"}).appendChild(tpl.content.cloneNode(true));
  const svg = host.shadowRoot.querySelector("svg"), bad = [];
  const W = svg.viewBox.baseVal.width, H = svg.viewBox.baseVal.height;
  origin = svg.getBoundingClientRect();
  sx = W / origin.width;
  sy = H / origin.height;
  const texts = [...svg.querySelectorAll("text")].filter(t => t.textContent.trim() !== "");
  const boxes = texts.map(box);
  texts.forEach((t, i) => {
    const b = boxes[i];
    if (b.x < -SLACK || b.y < -SLACK || b.x + b.w > W + SLACK || b.y + b.h > H + SLACK)
      bad.push("outside the picture: " + say(t, b));
    const g = t.closest("g.state, g.note");
    const r = g && g.querySelector("rect");
    if (r && !inside(b, box(r)))
      bad.push("outside its box " + say(r, box(r)) + ": " + say(t, b));
  });
  // a line drawn through a text, unless an opaque rect drawn after the line covers the text
  // (a ladder's label sits on a white rect over its arrow)
  const toPic = svg.getScreenCTM().inverse();
  const covers = [...svg.querySelectorAll("rect")].filter(r => {
    const f = r.getAttribute("fill");
    const op = r.getAttribute("fill-opacity");
    return f && f !== "none" && (op === null || Number(op) >= 1);
  }).map(r => [r, box(r)]);
  for (const ln of svg.querySelectorAll("line")) {
    const m = toPic.multiply(ln.getScreenCTM()), p = [];
    for (const [x, y] of [[ln.x1, ln.y1], [ln.x2, ln.y2]]) {
      const q = new DOMPoint(x.baseVal.value, y.baseVal.value).matrixTransform(m);
      p.push([q.x, q.y]);
    }
    texts.forEach((t, i) => {
      const b = boxes[i];
      if (!crosses(p[0], p[1], b)) return;
      const hidden = covers.some(([r, rb]) =>
        (ln.compareDocumentPosition(r) & Node.DOCUMENT_POSITION_FOLLOWING) && inside(b, rb));
      if (!hidden)
        bad.push("a line through a text: " + say(t, b) + " by " +
                 p.map(q => q.map(v => v.toFixed(1)).join(",")).join(" to "));
    });
  }
  // sorted by top edge: only neighbours within one text height of each other can meet
  const order = boxes.map((b, i) => i).sort((i, j) => boxes[i].y - boxes[j].y);
  for (let a = 0; a < order.length; a++)
    for (let c = a + 1; c < order.length && boxes[order[c]].y < boxes[order[a]].y + boxes[order[a]].h; c++)
      if (meet(boxes[order[a]], boxes[order[c]]))
        bad.push("overlap: " + say(texts[order[a]], boxes[order[a]]) + " and " +
                 say(texts[order[c]], boxes[order[c]]));
  out[tpl.dataset.name] = {texts: texts.length, font: getComputedStyle(texts[0] || svg).fontFamily,
                           problems: bad};
}
document.getElementById("out").textContent = JSON.stringify(out);
"""


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def font_file():
    r = subprocess.run(["fc-match", "-f", "%{family}", FONT], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def page(pictures):
    parts = ["<!doctype html><html><head><meta charset='utf-8'></head><body>"]
    for path in pictures:
        with open(path, encoding="utf-8") as f:
            svg = f.read()
        svg = re.sub(r"^<\?xml[^>]*>\s*", "", svg)
        name = os.path.relpath(path, TOP)
        parts.append(f"<template class='pic' data-name='{html.escape(name, quote=True)}'>{svg}"
                     "</template>")
    parts.append("<pre id='out'></pre><script>" + SCRIPT % {"slack": SLACK} + "</script>")
    parts.append("</body></html>")
    return "\n".join(parts)


def measure(tmp_path, pictures):
    """{picture: {"texts", "font", "problems"}} as chromium laid them out."""
    doc = tmp_path / "pictures.html"
    doc.write_text(page(pictures), encoding="utf-8")
    r = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", doc.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"<pre id=\"out\">(.*?)</pre>", r.stdout, re.S)
    assert m and m.group(1), "chromium ran no script: " + r.stdout[-500:]
    return json.loads(html.unescape(m.group(1)))


needs_browser = pytest.mark.skipif(chromium() is None,
                                   reason="no chromium (make deps-browser installs it)")


@needs_browser
def test_the_pictures_font_is_there():
    """The check means something only with the font the pictures name (fonts-dejavu-core)."""
    assert font_file().startswith(FONT), f"fc-match {FONT!r} gives {font_file()!r}"


@needs_browser
def test_no_text_overlaps_or_leaves_its_box(tmp_path):
    assert PICTURES, "no committed picture"
    got = measure(tmp_path, PICTURES)
    assert sorted(got) == sorted(os.path.relpath(p, TOP) for p in PICTURES)
    problems = {k: v["problems"][:5] for k, v in got.items() if v["problems"]}
    assert not problems, json.dumps(problems, indent=1)
    assert all(v["texts"] > 0 for v in got.values())


@needs_browser
def test_the_check_finds_an_overlap_and_an_overflow(tmp_path):
    """The same script on a crafted picture: two texts on one spot, and a note longer than its
    box, are both reported."""
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="100" '
           'viewBox="0 0 300 100" font-family="DejaVu Sans Mono, monospace" font-size="11">'
           '<text x="10" y="20">first label</text><text x="30" y="22">second</text>'
           '<g class="note"><rect x="100" y="40" width="40" height="16"/>'
           '<text x="102" y="52">a note far too long for it</text></g></svg>')
    pic = tmp_path / "crafted-ladder.svg"
    pic.write_text(svg)
    (tmp_path / "m").mkdir()
    got = measure(tmp_path / "m", [str(pic)])
    probs = next(iter(got.values()))["problems"]
    assert any(p.startswith("overlap: \"first label\"") for p in probs), probs
    assert any(p.startswith("outside its box") and "a note far" in p for p in probs), probs


@needs_browser
def test_the_check_finds_a_line_through_a_text(tmp_path):
    """A line through a text is reported; the same line under an opaque box holding the text
    (drawn after the line) is not; a box with fill-opacity below 1 hides nothing."""
    def svg(cover):
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="100" '
                'viewBox="0 0 300 100" font-family="DejaVu Sans Mono, monospace" font-size="11">'
                '<line x1="0" y1="0" x2="300" y2="100"/>' + cover +
                '<text x="120" y="48">crossed</text></svg>')
    got = {}
    for name, cover in (("bare", ""), ("covered", '<rect x="110" y="30" width="80" height="25" '
                                                  'fill="#fff"/>'),
                        ("seethrough", '<rect x="110" y="30" width="80" height="25" fill="#fff" '
                                       'fill-opacity="0.5"/>')):
        (tmp_path / name).mkdir()
        pic = tmp_path / name / f"{name}-ladder.svg"
        pic.write_text(svg(cover))
        got[name] = next(iter(measure(tmp_path / name, [str(pic)]).values()))["problems"]
    assert [p[:32] for p in got["bare"]] == ['a line through a text: "crossed"'], got
    assert got["covered"] == [], got
    assert len(got["seethrough"]) == 1, got
