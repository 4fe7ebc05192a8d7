"""Man pages (docs/man/) against usage(): one list of options, never drifting.

For every program — tcplab (run.sh), each probe, each fixture — the options its help text prints
(the synopsis and the option lines) are exactly the options its man page describes: the tags of
the `.TP` items in its OPTIONS section (for a fixture, its `.SS` part of tcplab-fixtures(7)),
and every option the page's SYNOPSIS (`.SY` ... `.YS`) shows is described there too.  tcplab's
subcommands (`diff`, `matrix`) are compared the same way with the page's COMMANDS section.
Every page also renders without a warning under `groff -ww` and `man -l`.
"""
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP

MAN = os.path.join(TOP, "docs", "man")
FIXTURES = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(TOP, "fixtures", "*.c")))
PROBES = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(TOP, "probes", "*.c")))
PAGES = sorted(glob.glob(os.path.join(MAN, "*.[1-8]")))

# Options a man page may describe before usage() prints them: none now.  The check runs both
# ways, so an entry that usage() has caught up with fails the test.
MAN_ONLY = {}

OPT = re.compile(r"(?<![\w/.-])(--?[A-Za-z0-9][A-Za-z0-9-]*)")


def opt_names(text):
    """The option names in text: `--long`, `-x`; a single-dash cluster such as `-1ae46` is its
    letters (no program here has a long option with one dash)."""
    out = set()
    for tok in OPT.findall(text):
        if tok.startswith("--") or len(tok) == 2:
            out.add(tok)
        else:
            out.update("-" + c for c in tok[1:])
    return out


# ---- usage() ---------------------------------------------------------------------------------

ARG = re.compile(r"^[A-Z0-9_.|\[\],]+$")


def usage_options(text):
    """(options, subcommands) of a help text.  The synopsis is the `usage:` line and the lines
    indented 5 or more below it; an option line is indented 1 to 4 spaces and starts with `-`:
    its options are the words at its start that are options (`-q, --quick`) or their
    ARGUMENTS, up to the first word of prose."""
    opts, subs = set(), set()
    lines = text.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("usage:") or
                              (i > 0 and re.match(r"^ {5,}\S", lines[i]))):
        opts |= opt_names(lines[i])
        m = re.match(r"^(?:usage: +| +)[^\s[]\S* +([a-z][a-z-]*)\b", lines[i])
        if m:
            subs.add(m.group(1))
        i += 1
    assert i > 0, "no 'usage:' line at the top"
    for line in lines[i:]:
        if not re.match(r"^ {1,4}-", line):
            continue
        for word in line.split():
            word = word.rstrip(",")
            if OPT.fullmatch(word):
                opts |= opt_names(word)
            elif not ARG.match(word):
                break
    return opts, subs


def help_text(bindir, prog):
    if prog == "tcplab":
        argv = [os.path.join(TOP, "run.sh"), "--help"]
    else:
        argv = [os.path.join(bindir, prog), "-h"]
        if prog == "tcpevents" and not os.path.exists(argv[0]):
            pytest.skip("tcpevents is not built here (make says why: clang, bpftool, libbpf "
                        "or the kernel's BTF missing)")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == "", f"{prog} help: exit {r.returncode}, {r.stderr!r}"
    return r.stdout


# ---- the man pages ---------------------------------------------------------------------------

def roff_plain(line):
    """A roff line as text: the macro name, font escapes and quotes dropped, `\\-` as `-`."""
    line = re.sub(r"^\.[A-Z]{1,2}\s?", "", line)
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    line = line.replace("\\-", "-").replace("\\&", "").replace("\\~", " ").replace("\\ ", " ")
    return line.replace('"', "")


def sections(text, macro):
    """{title: [lines]} for each `.SH`/`.SS` (macro) title and the lines up to the next one of
    that level or above."""
    out, cur = {}, None
    stop = (".SH",) if macro == ".SH" else (".SH", ".SS")
    for line in text.splitlines():
        if line.startswith(stop):
            cur = None
            if line.startswith(macro + " "):
                cur = out.setdefault(line[len(macro) + 1:].strip().strip('"'), [])
            continue
        if cur is not None:
            cur.append(line)
    return out


def tp_tags(lines):
    """The tag line of every `.TP` item, as plain text."""
    return [roff_plain(lines[i + 1]) for i, l in enumerate(lines[:-1]) if l.startswith(".TP")]


def synopsis_options(text, prog):
    """The options in every `.SY PROG` ... `.YS` block of the page."""
    out, inside = set(), False
    for line in text.splitlines():
        if line.startswith(".SY"):
            inside = roff_plain(line).split()[:1] == [prog]
        elif line.startswith(".YS"):
            inside = False
        elif inside:
            out |= opt_names(roff_plain(line))
    return out


def page_of(prog):
    if prog == "tcplab":
        return os.path.join(MAN, "tcplab.1")
    if prog in PROBES:
        return os.path.join(MAN, prog + ".8")
    return os.path.join(MAN, "tcplab-fixtures.7")


def man_options(prog):
    """(described options, synopsis options, commands) of PROG's man page."""
    with open(page_of(prog)) as f:
        text = f.read()
    if prog in FIXTURES:
        part = sections(text, ".SS").get(prog)
        assert part is not None, f"tcplab-fixtures.7 has no '.SS {prog}'"
    else:
        part = sections(text, ".SH").get("OPTIONS")
        assert part is not None, f"{os.path.basename(page_of(prog))} has no OPTIONS section"
    described = set()
    for tag in tp_tags(part):
        described |= opt_names(tag)
    cmds = set()
    for tag in tp_tags(sections(text, ".SH").get("COMMANDS", [])):
        cmds.add(tag.split()[0])
    return described, synopsis_options(text, prog), cmds


# ---- the tests -------------------------------------------------------------------------------

ALL = ["tcplab"] + PROBES + FIXTURES


def test_every_program_is_found():
    assert {"sockwatch", "counters", "machine", "capture"} <= set(PROBES)
    assert len(FIXTURES) >= 18 and "listener" in FIXTURES


@pytest.mark.parametrize("prog", ALL)
def test_man_options_equal_usage(bindir, prog):
    shown, subs = usage_options(help_text(bindir, prog))
    assert len(shown) >= 2, f"{prog}: found no options in its help text"
    described, synopsis, cmds = man_options(prog)
    extra_ok = MAN_ONLY.get(prog, set())
    assert not (extra_ok & shown), f"{prog}: usage() prints {sorted(extra_ok & shown)} now: drop them from MAN_ONLY"
    missing = shown - described
    assert not missing, f"{prog}: usage() prints {sorted(missing)}, the man page's OPTIONS lacks them"
    unknown = described - shown - extra_ok
    assert not unknown, f"{prog}: the man page describes {sorted(unknown)}, usage() does not print them"
    undescribed = synopsis - described
    assert not undescribed, f"{prog}: the man page's SYNOPSIS shows {sorted(undescribed)}, its OPTIONS lacks them"
    if prog == "tcplab":
        assert subs == cmds, f"tcplab: usage() subcommands {sorted(subs)}, the man page's COMMANDS {sorted(cmds)}"


def test_every_page_is_someones():
    want = {os.path.basename(page_of(p)) for p in ALL}
    assert {os.path.basename(p) for p in PAGES} == want


def test_fixture_page_lists_each_fixture_once():
    with open(os.path.join(MAN, "tcplab-fixtures.7")) as f:
        heads = re.findall(r"^\.SS (\S+)$", f.read(), flags=re.M)
    assert sorted(h for h in heads if h in FIXTURES) == FIXTURES


@pytest.mark.parametrize("page", [os.path.basename(p) for p in PAGES])
def test_groff_renders_without_warnings(page):
    if shutil.which("groff") is None:
        pytest.skip("groff is missing (Debian package groff-base: make deps)")
    r = subprocess.run(["groff", "-ww", "-z", "-b", "-man", "-Tutf8", os.path.join(MAN, page)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.parametrize("page", [os.path.basename(p) for p in PAGES])
def test_man_renders_at_80_columns(page):
    if shutil.which("man") is None:
        pytest.skip("man is missing (Debian package man-db: make deps)")
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="", PAGER="cat", LC_ALL="C.UTF-8")
    r = subprocess.run(["man", "--warnings", "-l", os.path.join(MAN, page)],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    long_lines = [l for l in r.stdout.splitlines() if len(l) > 80]
    assert not long_lines, f"{page}: {len(long_lines)} line(s) wider than 80 columns: {long_lines[0]!r}"


def test_tcplab_units_equal_unit_table():
    """tcplab.1's UNITS lists every unit of experiments/units, one item each, in table order."""
    import tcplab
    want = [u["unit"] for u in tcplab.read_units(os.path.join(TOP, "experiments", "units"))]
    with open(page_of("tcplab")) as f:
        units = sections(f.read(), ".SH").get("UNITS", [])
    assert [t.split()[0] for t in tp_tags(units)] == want


@pytest.mark.parametrize("page", [os.path.basename(p) for p in PAGES])
def test_name_line_is_what_whatis_reads(page):
    """man-db's lexgrog parses the NAME section as mandb would for whatis(1) and apropos(1):
    `NAME \\- description`, NAME the page's own name."""
    if shutil.which("lexgrog") is None:
        pytest.skip("lexgrog is missing (Debian package man-db: make deps)")
    r = subprocess.run(["lexgrog", os.path.join(MAN, page)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    name = page.rsplit(".", 1)[0]
    assert f': "{name} - ' in r.stdout, r.stdout


def test_option_parsing():
    """The parsers on the spellings roff and usage() texts use."""
    assert opt_names(roff_plain(r".BR \-q \", \" \-\-quick")) == {"-q", "--quick"}
    assert opt_names(roff_plain(r"\fB\-x\fR \fIN\fR")) == {"-x"}
    assert opt_names(roff_plain(r"\f[B]\-\-allow\-foreign\-out\f[]")) == {"--allow-foreign-out"}
    assert opt_names(roff_plain(r".BI \-\-kernel \" VER\" \fR|\fBall")) == {"--kernel"}
    assert opt_names(roff_plain(r".B so\-error")) == set()
    assert opt_names("[-1ae46] [-i INTERVAL_US]") == {"-1", "-a", "-e", "-4", "-6", "-i"}
    text = ("usage: prog [-1ae] [--long N] -p PORT\n"
            "            [-w FILE.pcap]\n"
            "       prog sub DIR\n"
            "Prose at column 0 with -z in it.\n"
            "  (no -d)  not an option line\n"
            "  -q, --quick window 300 ms, unless -u says otherwise\n"
            "  -4, -6  IPv4 or IPv6\n"
            "  -R 0|1    SO_REUSEADDR before bind()\n"
            "              -y deep in a description\n")
    opts, subs = usage_options(text)
    assert opts == {"-1", "-a", "-e", "--long", "-p", "-w", "-q", "--quick", "-4", "-6", "-R"}
    assert subs == {"sub"}
    tp = ".SH OPTIONS\n.TP\n.B \\-a\nx\n.TP\n.BI \\-b \" N\"\ny\n.SH EXIT STATUS\n.TP\n.B 0\nz\n"
    assert [opt_names(t) for t in tp_tags(sections(tp, ".SH")["OPTIONS"])] == [{"-a"}, {"-b"}]
