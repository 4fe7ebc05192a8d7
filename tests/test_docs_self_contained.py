"""Nothing a reader gets points outside the repository: README.md, every file under docs/ (the
man pages too), the committed text outputs, and what the reports and collect scripts could
print.  A clone holds no ../shared directory, and an installed tcplab no /work; what those
write-ups said is in docs/investigation.md, in tcplab's own words.  Relative markdown links must
also resolve inside the tree (test_docs.py checks only that they resolve)."""
import glob
import os
import re

import pytest

from conftest import TOP

# A path out of the tree to the project's shared area, however it is spelt.
OUTSIDE = re.compile(r"\.\./shared\b|/work/shared\b|\.\./\.\./|(?<![\w.])/work/")


def reader_files():
    files = [os.path.join(TOP, "README.md")]
    files += [p for p in glob.glob(os.path.join(TOP, "docs", "**", "*"), recursive=True)
              if os.path.isfile(p)]
    files += glob.glob(os.path.join(TOP, "outputs", "*.txt"))
    files += glob.glob(os.path.join(TOP, "outputs", "*", "*.txt"))
    files += glob.glob(os.path.join(TOP, "experiments", "*", "*.py"))
    files += glob.glob(os.path.join(TOP, "experiments", "*", "*.sh"))
    return sorted(files)


def outside_refs(text):
    """(line number, line) of each line that names a path outside the repository."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_files_are_found():
    files = reader_files()
    names = {os.path.relpath(p, TOP) for p in files}
    assert {"README.md", "docs/README.md", "docs/investigation.md", "docs/man/tcplab.1"} <= names
    assert any(n.startswith("outputs/") and n.count("/") == 2 for n in names)


@pytest.mark.parametrize("path", [os.path.relpath(p, TOP) for p in reader_files()])
def test_no_reference_outside_the_repository(path):
    with open(os.path.join(TOP, path), errors="replace") as f:
        hits = outside_refs(f.read())
    assert not hits, f"{path}: points outside the repository: " + "; ".join(f"line {n}: {l[:120]}" for n, l in hits)


def test_markdown_links_stay_inside():
    bad = []
    for md in [os.path.join(TOP, "README.md")] + glob.glob(os.path.join(TOP, "docs", "*.md")):
        with open(md) as f:
            for target in re.findall(r"\]\(([^)\s#]+)", f.read()):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                path = os.path.realpath(os.path.join(os.path.dirname(md), target))
                if not path.startswith(os.path.realpath(TOP) + os.sep):
                    bad.append(f"{os.path.relpath(md, TOP)}: {target}")
    assert not bad, "links out of the tree: " + ", ".join(bad)


def test_the_check_catches_each_spelling():
    assert outside_refs("see `../shared/seeds/connect-investigation.txt`")
    assert outside_refs("read /work/shared/STYLE.md")
    assert outside_refs("[x](../../notes/a.md)")
    assert outside_refs("built in /work/main")
    assert not outside_refs("outputs/6.1.0-57-cloud-amd64/raw/.../ss-*.txt and ../outputs/x.svg")
    assert not outside_refs("the counters are shared between namespaces")
