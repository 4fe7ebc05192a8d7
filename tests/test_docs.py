"""Quoted output in docs/ never drifts from the committed outputs.

Convention: a fenced block in docs/*.md that quotes a committed output file is preceded by the
line

    <!-- quote: outputs/RELEASE/FILE -->

(a blank line may sit between them). Every line of the block must then be a whole line of that
file, and the lines must appear there in the same order: an excerpt may skip lines, but it may
not change, reorder or invent one. No root, no run: the files are read as committed.
"""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARK = re.compile(r"^<!-- quote: (\S+) -->\s*$")


def quoted_blocks(text):
    """(source path, block lines, line number of the marker) for each marked fenced block.
    Raises ValueError for a marker that no fenced block follows."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not lines[j].startswith("```"):
            raise ValueError(f"line {i + 1}: quote marker without a fenced block after it")
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        if k >= len(lines):
            raise ValueError(f"line {j + 1}: fenced block never closed")
        out.append((m.group(1), lines[j + 1:k], i + 1))
        i = k + 1
    return out


def missing_line(block, source_lines):
    """The first block line that is not found, in order, among source_lines; None when all are."""
    pos = 0
    for line in block:
        try:
            pos = source_lines.index(line, pos) + 1
        except ValueError:
            return line
    return None


def all_quotes():
    cases = []
    for md in sorted(DOCS.rglob("*.md")):      # the sheets and their keys too
        for src, block, lineno in quoted_blocks(md.read_text()):
            cases.append(pytest.param(md, src, block, id=f"{md.relative_to(DOCS)}:{lineno}"))
    return cases


QUOTES = all_quotes()


def test_the_experiment_pages_mark_their_quotes():
    pages = {str(p.relative_to(DOCS)) for p, _src, _b in (c.values for c in QUOTES)}
    lesson = ("p01-synretry", "p02-accept-queue", "p03-small-writes", "p05-close", "p06-time-wait")
    for name in ("accept-path.md", "connect-modes.md", "poll-scaling.md", "p01-connect-time.md",
                 "p01-machine.md", "p01-strace.md", "p01-timeout.md",
                 *(f"{u}.md" for u in lesson), *(f"sheets/key/{u}.md" for u in lesson)):
        assert name in pages, f"docs/{name} marks no quoted output block"


@pytest.mark.parametrize("md,src,block", QUOTES)
def test_quote_is_verbatim(md, src, block):
    path = ROOT / src
    assert path.is_file(), f"{md.name} quotes {src}, which is not a committed file"
    assert block, f"{md.name}: empty quote of {src}"
    bad = missing_line(block, path.read_text().split("\n"))
    assert bad is None, f"{md.name}: not in {src} (or out of order): {bad!r}"


def test_checker_catches_a_changed_line():
    src = ["a", "b 1.00 s", "c"]
    assert missing_line(["a", "c"], src) is None
    assert missing_line(["b 1.01 s"], src) == "b 1.01 s"
    assert missing_line(["c", "a"], src) == "a"
    assert missing_line(["b 1.00"], src) == "b 1.00"


def test_marker_parsing():
    text = "x\n<!-- quote: outputs/r/f.txt -->\n\n```\nl1\nl2\n```\n```\nnot marked\n```\n"
    assert quoted_blocks(text) == [("outputs/r/f.txt", ["l1", "l2"], 2)]
    with pytest.raises(ValueError):
        quoted_blocks("<!-- quote: outputs/r/f.txt -->\ntext\n")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(text):
    """The relative link targets (no scheme, no pure #anchor) of a markdown text, anchors cut."""
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def test_relative_links_resolve():
    bad = []
    for md in sorted([*DOCS.rglob("*.md"), ROOT / "README.md"]):
        for target in relative_links(md.read_text()):
            path = (md.parent / target).resolve()
            if not path.exists():
                bad.append(f"{md.relative_to(ROOT)}: {target}")
    assert not bad, "links to missing files: " + ", ".join(bad)


def slug(heading):
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def anchors(text):
    """The anchors of a markdown text: its headings' (outside fenced blocks; -1, -2 for repeats)
    and each <a id="…"></a>."""
    seen, out, fenced = {}, set(), False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = slug(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out | set(re.findall(r'<a id="([^"]+)"></a>', text))


def test_anchors_resolve():
    """A link to PAGE.md#anchor names a heading that PAGE has (a page split in two keeps the
    anchors other pages link to)."""
    bad = []
    for md in sorted([*DOCS.rglob("*.md"), ROOT / "README.md"]):
        text = md.read_text()
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or "#" not in target:
                continue
            page, anchor = target.split("#", 1)
            path = (md.parent / page).resolve() if page else md
            if path.suffix == ".md" and path.exists() and anchor not in anchors(path.read_text()):
                bad.append(f"{md.relative_to(ROOT)}: {target}")
    assert not bad, "links to missing headings: " + ", ".join(bad)


def test_anchor_making():
    assert slug("Why 1024 s, and not 1 s?") == "why-1024-s-and-not-1-s"
    assert anchors("# A b\n```\n# not\n```\n## A b\n") == {"a-b", "a-b-1"}
    assert anchors('| <a id="row-x"></a>x |') == {"row-x"}


def test_link_parsing():
    text = "[a](../outputs/r/x.svg) [b](https://e.org/y) [c](#top) [d](p.md#sec)"
    assert relative_links(text) == ["../outputs/r/x.svg", "p.md"]


ROOT_CLAIM = re.compile(r"^\./run\.sh ([a-z0-9-]+)\b[^#]*#.*\b(needs root|no root needed)\b")


def root_claims(text):
    """(unit, needs_root) for each `./run.sh UNIT  # ... needs root / no root needed` line."""
    return [(m.group(1), m.group(2) == "needs root")
            for m in map(ROOT_CLAIM.match, text.split("\n")) if m]


def test_root_claims_parse():
    text = ("./run.sh p01-x   # about 2 s; needs root (nft)\n"
            "./run.sh p02-y --set a=1  # about 1 s; no root needed\n./run.sh p03-z  # 5 s\n")
    assert root_claims(text) == [("p01-x", True), ("p02-y", False)]


def test_a_page_says_root_as_the_unit_table_does():
    """A page that says a unit needs root (or not) agrees with its root column: p01-rst-middlebox,
    p01-close-synsent-late and p01-icmp-unreachable said "needs root" while the table had
    root=no, and each ran as nobody."""
    import sys
    sys.path.insert(0, str(ROOT / "experiments" / "report"))
    import tcplab
    root = {u["unit"]: u["root"] for u in tcplab.read_units(str(ROOT / "experiments" / "units"))}
    wrong = [(p.name, u, needs) for p in sorted(DOCS.rglob("*.md"))
             for u, needs in root_claims(p.read_text()) if u in root and root[u] != needs]
    assert wrong == []
