"""`make install` / `make uninstall` (docs/design.md, "Installed"): an install into a DESTDIR under a
temporary directory is run from a directory outside the clone, with PATH at its bin/ — the
command, its version, one unit writing into the current directory and nothing into the installed
tree, the man pages, the bash completion — and uninstall leaves nothing behind."""
import fcntl
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP
import tcplab

PREFIX = "/opt/tcplab"
RUN = os.path.join(TOP, "run.sh")


def make(target, destdir, timeout=600):
    return subprocess.run(["make", "-C", TOP, "-s", target, f"DESTDIR={destdir}",
                           f"PREFIX={PREFIX}"], capture_output=True, text=True, timeout=timeout)


def listing(root):
    """Every path under root with its type, size and mtime: what "nothing changed" compares."""
    out = []
    for d, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            st = os.lstat(p)
            out.append((os.path.relpath(p, root), st.st_mode, st.st_size, st.st_mtime_ns))
    return sorted(out)


class Install:
    def __init__(self, base):
        self.dest = str(base / "dest")
        self.prefix = self.dest + PREFIX
        self.bin = os.path.join(self.prefix, "bin")
        self.share = os.path.join(self.prefix, "share", "tcplab")
        self.cwd = str(base / "elsewhere")
        os.makedirs(self.cwd)
        self.env = dict(os.environ, PATH=self.bin + ":/usr/bin:/bin:/usr/sbin:/sbin")
        # PYTHONDONTWRITEBYTECODE too: tcplab itself must keep __pycache__ out of its tree
        for k in ("TCPLAB_BUILD", "TCPLAB_EXPERIMENTS", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"):
            self.env.pop(k, None)

    def tcplab(self, *args, timeout=120, **kw):
        return subprocess.run(["tcplab", *args], cwd=kw.pop("cwd", self.cwd),
                              env=kw.pop("env", self.env), capture_output=True, text=True,
                              timeout=timeout, **kw)


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    i = Install(tmp_path_factory.mktemp("install"))
    r = make("install", i.dest)
    assert r.returncode == 0, r.stderr
    yield i
    make("uninstall", i.dest)


def test_install_layout(inst):
    """bin/tcplab, the programs in libexec/tcplab, the unit table in share/tcplab, the
    completion; every file is in the manifest and every file in the manifest is there."""
    progs = sorted(os.listdir(os.path.join(TOP, "build", "bin")))
    progs = [p for p in progs if not p.endswith(".tmp")]
    assert sorted(os.listdir(os.path.join(inst.prefix, "libexec", "tcplab"))) == progs
    assert os.access(os.path.join(inst.bin, "tcplab"), os.X_OK)
    with open(os.path.join(inst.share, "experiments", "units")) as f, \
            open(os.path.join(TOP, "experiments", "units")) as g:
        assert f.read() == g.read()
    with open(os.path.join(inst.share, "manifest")) as f:
        manifest = f.read().split("\n")
    files = {line[2:] for line in manifest if line.startswith("f ")}
    on_disk = {"/" + os.path.relpath(os.path.join(d, n), inst.dest)
               for d, _, names in os.walk(inst.dest) for n in names}
    assert files == on_disk


def test_list_help_version(inst):
    r = inst.tcplab("--list")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    clone = subprocess.run([RUN, "--list"], capture_output=True, text=True, timeout=60)
    assert r.stdout == clone.stdout
    r = inst.tcplab("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: tcplab "), r.stdout[:200]
    assert "./run.sh" not in r.stdout and "--version" in r.stdout
    r = inst.tcplab("--version")
    with open(os.path.join(inst.share, "VERSION")) as f:
        version = f.read().strip()
    assert r.returncode == 0 and r.stdout == f"tcplab {version}\n", r.stdout
    r = inst.tcplab("--no-such-option")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["tcplab: unknown option '--no-such-option' (see tcplab --help)"]


def test_version_in_clone():
    """./run.sh --version is git describe's (a leading v dropped), -dirty when a tracked file
    outside outputs/ differs from the commit."""
    r = subprocess.run([RUN, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    m = re.fullmatch(r"tcplab ([!-~]+)\n", r.stdout)
    assert m, r.stdout
    if os.path.exists(os.path.join(TOP, "VERSION")) or shutil.which("git") is None:
        return
    g = subprocess.run(["git", "-C", TOP, "describe", "--tags", "--always"], capture_output=True,
                       text=True)
    if g.returncode != 0:
        pytest.skip("git describe does not work here: " + g.stderr.strip()[:100])
    dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "--untracked-files=no",
                            "--", ".", ":(exclude)outputs"], capture_output=True, text=True)
    want = g.stdout.strip().removeprefix("v") + ("-dirty" if dirty.stdout.strip() else "")
    assert m.group(1) == want


@pytest.mark.netns
def test_unit_writes_into_cwd(inst):
    """One short unit, run from outside the clone: its outputs go to ./outputs/<release>/, they
    record the installed version, and the installed tree is not touched."""
    before = listing(inst.dest)
    r = inst.tcplab("p01-machine")
    assert r.returncode == 0, r.stderr
    assert listing(inst.dest) == before
    out = os.path.join(inst.cwd, "outputs", os.uname().release)
    assert sorted(n for n in os.listdir(out) if not n.startswith(".")) == \
        ["p01-machine.json", "p01-machine.txt", "raw"]
    with open(os.path.join(inst.share, "VERSION")) as f:
        version = f.read().strip()
    with open(os.path.join(out, "p01-machine.json")) as f:
        j = json.load(f)
    assert j["tcplab_version"] == version and j["experiment"] == "p01-machine"
    with open(os.path.join(out, "raw", "p01-machine", "tcplab-version.txt")) as f:
        assert f.read() == version + "\n"
    # --out: there instead, and still nothing in ./outputs/ beyond the first run's
    r = inst.tcplab("--out", "elsewhere-out", "p01-machine")
    assert r.returncode == 0, r.stderr
    assert os.path.isfile(os.path.join(inst.cwd, "elsewhere-out", "p01-machine.json"))
    assert listing(inst.dest) == before


@pytest.mark.qemu
@pytest.mark.deep
def test_kernel_run_locks_the_guests_directory_only(inst):
    """--kernel 6.1 without --out writes ./outputs/<the guest's release>/ and locks only that:
    another run holding ./outputs/<the host's release>/ (a host run, or a --kernel run of
    another series) does not make it refuse.  Installed, so that the directories are the test's
    own and not the clone's committed references."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache and apt-get download")
    host = os.path.join(inst.cwd, "outputs", os.uname().release)
    os.makedirs(host, exist_ok=True)      # test_unit_writes_into_cwd may have filled it
    before = listing(host)
    fd = os.open(host, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # as run.sh's lock holder takes it
        r = inst.tcplab("--kernel", "6.1", "p01-machine", timeout=600)
    finally:
        os.close(fd)
    if r.returncode == 4:
        pytest.skip("vm.sh: " + r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"outputs in (\S+)/$", r.stderr.strip().splitlines()[-1])
    assert m and "6.1.0-" in m.group(1), r.stderr[-1000:]
    guest = [d for d in os.listdir(os.path.join(inst.cwd, "outputs")) if d.startswith("6.1.0-")]
    assert len(guest) == 1
    assert os.path.isfile(os.path.join(inst.cwd, "outputs", guest[0], "p01-machine.json"))
    assert listing(host) == before     # nothing of the guest run's went to the host's


def test_incomplete_install(inst, tmp_path):
    """An installed tcplab never builds: with a program missing it says so in one line, exit 1,
    and calls no make (a `make` first on PATH would note it); without libexec/tcplab, too."""
    copy = tmp_path / "copy"
    shutil.copytree(inst.dest, copy, symlinks=True)
    prefix = str(copy) + PREFIX
    os.unlink(os.path.join(prefix, "libexec", "tcplab", "sockwatch"))
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "make").write_text(f"#!/bin/sh\ntouch {tmp_path}/make-was-called\nexit 1\n")
    (fake / "make").chmod(0o755)
    env = dict(inst.env, PATH=f"{prefix}/bin:{fake}:/usr/bin:/bin:/usr/sbin:/sbin")
    r = inst.tcplab("--out", str(tmp_path / "out"), "p01-machine", env=env)
    if r.returncode == 4:
        pytest.skip("neither root nor unprivileged user namespaces: " + r.stderr.strip()[:100])
    assert r.returncode == 1
    errs = [line for line in r.stderr.splitlines() if line.startswith("tcplab: ")]
    assert errs == [f"tcplab: no programs in {prefix}/libexec/tcplab (an incomplete install: "
                    "make install again)"], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "make-was-called").exists()
    shutil.rmtree(os.path.join(prefix, "libexec", "tcplab"))
    r = inst.tcplab("--list", env=env)
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "incomplete install" in r.stderr, r.stderr


def man_pages(inst):
    root = os.path.join(inst.prefix, "share", "man")
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)


def test_man_pages_render(inst):
    """Every installed page, and each docs/man/*.[1-8] is installed as manN/NAME.N."""
    src = sorted(n for n in os.listdir(os.path.join(TOP, "docs", "man"))
                 if re.fullmatch(r".+\.[1-8]", n)) if os.path.isdir(
                     os.path.join(TOP, "docs", "man")) else []
    pages = man_pages(inst)
    assert sorted(os.path.basename(p) for p in pages) == src
    for p in pages:
        assert os.path.basename(os.path.dirname(p)) == "man" + p[-1]
    if not pages:
        pytest.skip("no man pages in docs/man/ yet")
    for p in pages:
        if shutil.which("groff"):
            r = subprocess.run(["groff", "-ww", "-z", "-man", p], capture_output=True, text=True)
            assert r.returncode == 0 and r.stderr == "", (p, r.stderr)
        if shutil.which("man"):
            r = subprocess.run(["man", "-l", p], capture_output=True, text=True,
                               env=dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat"))
            assert r.returncode == 0 and r.stderr == "" and r.stdout.strip(), (p, r.stderr)


def complete(inst, *words):
    """COMPREPLY of the installed completion for the command line WORDS (the last is the word
    being completed), one per line."""
    script = (f'. "{inst.prefix}/share/bash-completion/completions/tcplab" || exit 9\n'
              'complete -p tcplab || exit 8\n'
              'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _tcplab\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    r = subprocess.run(["bash", "-c", script, "bash", *words], cwd=inst.cwd, env=inst.env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    first, *rest = r.stdout.splitlines()
    assert first == "complete -F _tcplab tcplab"
    return [w for w in rest if w]


def test_completion(inst):
    table = tcplab.read_units(os.path.join(inst.share, "experiments", "units"))
    p01 = [u["unit"] for u in table if u["unit"].startswith("p01-")]
    assert p01 and complete(inst, "tcplab", "p01-") == p01
    assert complete(inst, "tcplab", "") == ["diff", "matrix", "kcidb", "sandbox"] + \
        [u["unit"] for u in table]
    # after a name, only names (diff, matrix, kcidb and sandbox are subcommands: first word only)
    assert complete(inst, "tcplab", "p01-machine", "") == [u["unit"] for u in table]
    assert complete(inst, "tcplab", "--kernel", "") == ["5.10", "6.1", "6.12", "7.2", "all"]
    assert complete(inst, "tcplab", "--kernel", "6.1") == ["6.1", "6.12"]
    assert complete(inst, "tcplab", "--accel", "") == ["tcg", "kvm"]
    assert "--version" in complete(inst, "tcplab", "--")
    assert complete(inst, "tcplab", "--ve") == ["--version"]
    os.makedirs(os.path.join(inst.cwd, "zz-dir"), exist_ok=True)
    with open(os.path.join(inst.cwd, "zz-file"), "w"):
        pass
    assert complete(inst, "tcplab", "--out", "zz") == ["zz-dir"]
    assert complete(inst, "tcplab", "diff", "zz") == ["zz-dir"]
    # kcidb: its own options, then a file (the KTAP)
    assert complete(inst, "tcplab", "kcidb", "--") == ["--origin", "--build-id", "--run-id"]
    assert complete(inst, "tcplab", "kcidb", "--origin", "") == []
    assert complete(inst, "tcplab", "kcidb", "--origin", "o", "zz") == ["zz-dir", "zz-file"]


def test_uninstall_leaves_nothing(tmp_path):
    """Install, then uninstall: the DESTDIR is as before (a directory that was there stays, the
    ones install made go); a second uninstall is refused in one line."""
    dest = tmp_path / "dest"
    (dest / "opt").mkdir(parents=True)
    before = listing(dest)
    r = make("install", dest)
    assert r.returncode == 0, r.stderr
    assert listing(dest) != before
    r = make("uninstall", dest)
    assert r.returncode == 0, r.stderr
    # paths and types: the directory that stayed has a new mtime, rightly
    assert [p[:2] for p in listing(dest)] == [p[:2] for p in before] == [("opt", before[0][1])]
    r = make("uninstall", dest)
    assert r.returncode != 0
    assert [line for line in r.stderr.splitlines() if line.startswith("make uninstall:")] == [
        f"make uninstall: no {dest}{PREFIX}/share/tcplab/manifest: tcplab is not installed in "
        f"{dest}{PREFIX}"]


def test_uninstall_refuses_foreign_manifest(tmp_path):
    """A manifest line naming a file outside PREFIX stops uninstall before it removes anything."""
    dest = tmp_path / "dest"
    share = dest / PREFIX.lstrip("/") / "share" / "tcplab"
    share.mkdir(parents=True)
    (dest / "victim").write_text("keep\n")
    (share / "mine").write_text("x\n")
    (share / "manifest").write_text(f"f {PREFIX}/share/tcplab/mine\nf /victim\n")
    r = make("uninstall", dest)
    assert r.returncode != 0
    assert "bad line 'f /victim'" in r.stderr
    assert (dest / "victim").exists() and (share / "mine").exists()


# ---- PREFIX and DESTDIR must be plain paths (issue 30, 2) ----------------------------------------
# Before, a blank split PREFIX in the recipes: PREFIX="/tmp/victim dir" put the files flat into an
# existing /tmp/victim, "/tmp/p fx" wrote each one over a plain file /tmp/p, and uninstall died of
# a shell syntax error.  Now make stops as it reads the Makefile, before it builds or writes.

UNPLAIN = "holds a blank or a shell metacharacter; choose a plain path"
NOT_ABSOLUTE = "is not a plain absolute path"


def make_with(target, **variables):
    return subprocess.run(["make", "-C", TOP, "-s", target,
                           *(f"{k}={v}" for k, v in variables.items())],
                          capture_output=True, text=True, timeout=600)


def assert_refused(r, target, variable, value, why=UNPLAIN):
    """Refused in one line that names the variable and shows its value as given."""
    assert r.returncode != 0, r.stdout[-500:]
    assert len(r.stderr.splitlines()) == 1, r.stderr[-2000:]
    assert f"make {target}: {variable} '{value}' {why}" in r.stderr, r.stderr[-2000:]


def test_install_blank_prefix_beside_a_directory(tmp_path):
    """PREFIX "<tmp>/victim dir" with a directory <tmp>/victim: refused, nothing under <tmp>
    made or changed, and uninstall with the same PREFIX refused the same way."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep").write_text("keep\n")
    before = listing(tmp_path)
    prefix = f"{tmp_path}/victim dir"
    r = make_with("install", PREFIX=prefix)
    assert_refused(r, "install", "PREFIX", prefix)
    assert listing(tmp_path) == before
    r = make_with("uninstall", PREFIX=prefix)
    assert_refused(r, "uninstall", "PREFIX", prefix)
    assert listing(tmp_path) == before


def test_install_blank_prefix_beside_a_file(tmp_path):
    """PREFIX "<tmp>/p fx" with a plain file <tmp>/p: refused, the file as it was."""
    (tmp_path / "p").write_text("keep\n")
    before = listing(tmp_path)
    prefix = f"{tmp_path}/p fx"
    r = make_with("install", PREFIX=prefix)
    assert_refused(r, "install", "PREFIX", prefix)
    assert listing(tmp_path) == before
    assert (tmp_path / "p").read_text() == "keep\n"


@pytest.mark.parametrize("name", ["a'b", 'd" "{tmp}/out'])
def test_install_quote_in_destdir(tmp_path, name):
    """A quote in DESTDIR: refused, nothing made (before, 'd" "<tmp>/out' made <tmp>/d and
    <tmp>/out)."""
    destdir = f"{tmp_path}/" + name.format(tmp=tmp_path)
    r = make_with("install", DESTDIR=destdir, PREFIX=PREFIX)
    assert_refused(r, "install", "DESTDIR", destdir)
    assert listing(tmp_path) == []


@pytest.mark.parametrize("prefix", ["/opt/a;b", "/opt/$(HOME)", "/opt/a`b", "/opt/*", "~/opt",
                                    "/opt/a\\b", "/opt/(a)", "/opt/a|b", "/opt/a#b"])
def test_install_metacharacter_in_prefix(tmp_path, prefix):
    """A shell metacharacter (or make's $) in PREFIX: refused as given, nothing made."""
    r = make_with("install", DESTDIR=tmp_path / "dest", PREFIX=prefix)
    assert_refused(r, "install", "PREFIX", prefix)
    assert listing(tmp_path) == []


@pytest.mark.parametrize("prefix", ["opt/tcplab", "/opt/tcplab/", "/opt/../tcplab", ""])
def test_install_prefix_not_plain_absolute(tmp_path, prefix):
    """A relative PREFIX lands beside DESTDIR (DESTDIR=<tmp>/dest PREFIX=opt wrote <tmp>/destopt),
    a . or .. part climbs out of it, a / at the end made a manifest uninstall refused, and an
    empty PREFIX broke uninstall's case patterns: all refused before anything is made."""
    r = make_with("install", DESTDIR=tmp_path / "dest", PREFIX=prefix)
    assert_refused(r, "install", "PREFIX", prefix, why=NOT_ABSOLUTE)
    assert listing(tmp_path) == []


def test_uninstall_blank_prefix_removes_nothing(tmp_path):
    """uninstall with PREFIX "<tmp>/victim dir", a manifest in it and an install in <tmp>/victim:
    refused in one line (before: "Syntax error: word unexpected"), nothing removed."""
    for top in ("victim", "victim dir"):
        (tmp_path / top / "bin").mkdir(parents=True)
        (tmp_path / top / "bin" / "tcplab").write_text("#!/bin/sh\n")
        (tmp_path / top / "share" / "tcplab").mkdir(parents=True)
        (tmp_path / top / "share" / "tcplab" / "manifest").write_text(
            "".join(f"{k} {tmp_path}/{top}{p}\n" for k, p in
                    [("d", "/bin"), ("f", "/bin/tcplab"), ("f", "/share/tcplab/manifest")]))
    before = listing(tmp_path)
    prefix = f"{tmp_path}/victim dir"
    r = make_with("uninstall", PREFIX=prefix)
    assert_refused(r, "uninstall", "PREFIX", prefix)
    assert listing(tmp_path) == before
    r = make_with("uninstall", DESTDIR=f"{tmp_path}/victim\"", PREFIX=PREFIX)
    assert_refused(r, "uninstall", "DESTDIR", f"{tmp_path}/victim\"")
    assert listing(tmp_path) == before
