"""The ladder picture true to time (tcplab_ladder): rows → SVG parsed with xml.etree; time runs
down to scale within a band, a long idle gap is a marked break with its length, socket states sit
on their side's line, every string is escaped text, and same rows give the same bytes."""
import xml.etree.ElementTree as ET

import tcplab_ladder as lad

NS = "{http://www.w3.org/2000/svg}"


def seg(t_ms, d, label, note=""):
    return {"t_ms": t_ms, "dir": d, "label": label, "note": note}


def note(t_ms, text):
    return {"t_ms": t_ms, "dir": None, "label": None, "note": text}


def parse(rows, **kw):
    return ET.fromstring(lad.svg(rows, **kw))


def arrows(root):
    """[(y at the sender, x1, x2, label)] of the segments, in document order."""
    out = []
    for g in root.iter(NS + "g"):
        if g.get("class") == "seg":
            ln = g.find(NS + "line")
            out.append((float(ln.get("y1")), float(ln.get("x1")), float(ln.get("x2")),
                        g.find(NS + "text").text))
    return out


def texts(root):
    return [e.text for e in root.iter(NS + "text")]


SPACED = [seg(0.0, "c>s", "S seq=0 len=0"), seg(10.0, "s>c", "SA seq=0 ack=1 len=0"),
          seg(30.0, "c>s", "A seq=1 ack=1 len=0"), seg(70.0, "c>s", "PA seq=1 ack=1 len=8")]


def test_y_is_proportional_to_time_within_a_band():
    ys = [a[0] for a in arrows(parse(SPACED))]
    assert ys == sorted(ys) and len(set(ys)) == 4
    d = [b - a for a, b in zip(ys, ys[1:])]          # 10, 20, 40 ms
    assert abs(d[1] / d[0] - 2) < 0.02 and abs(d[2] / d[0] - 4) < 0.02


def test_y_is_monotonic_and_a_stall_is_longer_than_a_fast_row():
    rows = [seg(0.011, "c>s", "PA seq=1 ack=1 len=8"), seg(0.042, "s>c", "A seq=1 ack=9 len=0"),
            seg(0.453, "c>s", "PA seq=9 ack=1 len=8"), seg(42.788, "s>c", "A seq=1 ack=17 len=0"),
            seg(42.811, "c>s", "PA seq=17 ack=1 len=8")]
    ys = [a[0] for a in arrows(parse(rows))]
    assert ys == sorted(ys)
    fast, stall = ys[1] - ys[0], ys[3] - ys[2]
    assert stall > 5 * fast                              # the 44 ms stall shows


def test_a_long_gap_is_a_break_with_its_length():
    rows = [seg(0.0, "c>s", "S seq=0 len=0"), seg(1000.5, "c>s", "S seq=0 len=0"),
            seg(1001.0, "s>c", "SA seq=0 ack=1 len=0")]
    root = parse(rows)
    breaks = [e.text for e in root.iter(NS + "text") if e.get("class") == "break"]
    assert breaks == ["1000.500 ms idle, cut"]
    ys = [a[0] for a in arrows(root)]
    assert ys[1] - ys[0] < 200                           # cut, not 1000 ms to scale
    # and no break under the threshold
    assert not [e for e in parse(SPACED).iter(NS + "text") if e.get("class") == "break"]


def test_states_land_on_their_sides_line():
    rows = [note(0.2, "client sockwatch: new ESTAB off rq=0"),
            note(1.0, "server sockwatch: change CLOSE-WAIT off"),
            note(2.0, "sockwatch: change FIN-WAIT-1 on"),      # no side: the client's
            note(3.0, "sockwatch: gone LAST-ACK"),             # only a server has LAST-ACK
            note(4.0, "client: request 1 written")]            # not a state
    root = parse(rows)
    got = []
    for g in root.iter(NS + "g"):
        if g.get("class") == "state":
            tx = g.find(NS + "text")
            got.append((g.get("data-side"), float(tx.get("x")), tx.text))
    assert got == [("client", lad.CLIENT_X, "ESTAB"), ("server", lad.SERVER_X, "CLOSE-WAIT"),
                   ("client", lad.CLIENT_X, "FIN-WAIT-1"), ("server", lad.SERVER_X, "gone LAST-ACK")]


def test_notes_wrap_inside_their_box():
    long = "ACK of seq 41+8, 42.336 ms after it: the server's delayed-ACK timer " * 3
    root = parse([seg(0.0, "s>c", "A seq=1 ack=9 len=0", long), seg(0.1, "c>s", "A", "short")])
    for g in root.iter(NS + "g"):
        if g.get("class") == "note":
            rect = g.find(NS + "rect")
            lines = g.findall(NS + "text")
            x, w, y, h = (float(rect.get(k)) for k in ("x", "width", "y", "height"))
            assert x + w <= lad.WIDTH
            for tx in lines:
                assert len(tx.text) * lad.CHAR_W <= w - 4
                assert y < float(tx.get("y")) <= y + h
    first = [g for g in root.iter(NS + "g") if g.get("class") == "note"][0]
    assert len(first.findall(NS + "text")) > 1


def test_labels_and_names_are_escaped_text():
    hostile = '</text><script>alert("x")</script>&amp; ]]> \x01'
    rows = [{"sep": "part <a> & b"}, seg(0.0, "c>s", "S <x> & y", hostile), note(1.0, hostile)]
    s = lad.svg(rows, client="cli<ent>", server='se"rv&er')
    root = ET.fromstring(s)
    assert not list(root.iter(NS + "script")) and "<script" not in s
    all_text = " ".join(t for t in texts(root) if t)
    assert "part <a> & b" in all_text and "cli<ent>" in all_text and 'se"rv&er' in all_text
    assert "S <x> & y" in all_text and "<script>alert" in all_text


def test_bands_each_have_their_heading():
    rows = [{"sep": "baseline"}] + SPACED + [{"sep": "nodelay"}] + SPACED
    root = parse(rows)
    assert "baseline" in texts(root) and "nodelay" in texts(root)
    ys = [a[0] for a in arrows(root)]
    assert ys == sorted(ys) and len(ys) == 8


def test_same_rows_same_bytes():
    rows = [{"sep": "a"}] + SPACED + [note(71.0, "client sockwatch: new ESTAB")]
    assert lad.svg(rows, "c", "s") == lad.svg([dict(r) for r in rows], "c", "s")


def test_write_tmp_writes_beside_the_path(tmp_path):
    path = str(tmp_path / "x-ladder.svg")
    tmp = lad.write_tmp(path, SPACED, "c", "s")
    assert tmp.startswith(str(tmp_path / ".x-ladder.svg."))
    with open(tmp) as f:
        assert f.read() == lad.svg(SPACED, "c", "s")
