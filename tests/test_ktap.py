"""./run.sh --ktap: KTAP version 1 on stdout (Documentation/dev-tools/ktap.rst), one test point per
unit, kselftest's exit codes (0 pass, 1 a unit failed, 4 every unit skipped: KSFT_SKIP in
tools/testing/selftests/kselftest.h), read by a consumer that is not tcplab's: Debian's `prove`
(perl's TAP::Harness) and its parser TAP::Parser; and tests/lava/tcplab.yaml, the LAVA test
definition, checked against LAVA's own schema (Debian's lava-common, when installed) and with its
parse pattern run over the same KTAP.  Runs that start units need root and netns (a fake unit
table through TCPLAB_EXPERIMENTS makes units pass, fail, skip and time out); the strict check,
the pattern and the definition are also tested on KTAP recorded from real runs
(tests/data/ktap/)."""
import json
import os
import re
import shutil
import subprocess

import pytest

import lab_proc
from conftest import DATA, TOP

RUN = os.path.join(TOP, "run.sh")
LAVA_DEF = os.path.join(TOP, "tests", "lava", "tcplab.yaml")
KTAP_DATA = os.path.join(DATA, "ktap")
PROVE = shutil.which("prove")
EXIT_SKIP = 4

RESULT_RE = re.compile(r"(ok|not ok) ([1-9][0-9]*) ([a-z0-9][a-z0-9-]*)(?: # (SKIP|TIMEOUT)(?: (.*))?)?")
TOTALS_RE = re.compile(r"# Totals: pass:(\d+) fail:(\d+) xfail:0 xpass:0 skip:(\d+) error:0")


# ---- a strict KTAP check of our own ------------------------------------------------------------

def ktap_check(text, units=None):
    """Every line of text checked against run.sh's KTAP; returns [(result, unit, directive,
    reason)], result "pass", "fail" or "skip".  Raises AssertionError naming the first bad line."""
    assert text.endswith("\n"), "the last line has no newline"
    lines = text.split("\n")[:-1]
    assert lines and lines[0] == "KTAP version 1", f"line 1 is not 'KTAP version 1': {lines[:1]}"
    m = re.fullmatch(r"1\.\.(0|[1-9][0-9]*)(?: # SKIP (.+))?", lines[1] if len(lines) > 1 else "")
    assert m, f"line 2 is not a plan: {lines[1:2]}"
    planned = int(m.group(1))
    if planned == 0:
        assert m.group(2) and len(lines) == 2, "a 1..0 plan is the whole output: '1..0 # SKIP why'"
        return []
    out, prev = [], ""
    for i, line in enumerate(lines[2:], 3):
        r = RESULT_RE.fullmatch(line)
        if r:
            result, num, unit, directive, reason = r.groups()
            assert int(num) == len(out) + 1, f"line {i}: test {num}, want {len(out) + 1}"
            if directive == "SKIP":
                assert result == "ok" and reason, f"line {i}: a SKIP is 'ok' with a reason"
            if result == "not ok":
                assert prev.startswith(f"# {unit}: "), f"line {i}: no '# {unit}: reason' before it"
                assert directive in (None, "TIMEOUT"), f"line {i}: {directive}"
            else:
                assert directive in (None, "SKIP"), f"line {i}: ok with {directive}"
            out.append(("skip" if directive == "SKIP" else "pass" if result == "ok" else "fail",
                        unit, directive, reason))
        else:
            assert line.startswith("# ") or line.startswith("Bail out! "), \
                f"line {i} is neither a test point nor a diagnostic: {line!r}"
            assert not line.startswith("Bail out! ") or i == len(lines), \
                f"line {i}: output after 'Bail out!'"
        prev = line
    assert len(out) == planned, f"{len(out)} test points, plan 1..{planned}"
    t = TOTALS_RE.fullmatch(lines[-1])
    assert t, f"the last line is not kselftest's '# Totals' line: {lines[-1]!r}"
    assert [int(x) for x in t.groups()] == [sum(1 for o in out if o[0] == k) for k in ("pass", "fail", "skip")]
    if units is not None:
        assert [o[1] for o in out] == list(units)
    return out


# ---- prove and TAP::Parser ----------------------------------------------------------------------

def tap_parser(path):
    """Perl's TAP::Parser (what prove runs on) over the file: its counts as a dict."""
    script = r"""
        use TAP::Parser; use strict;
        open(my $f, '<', $ARGV[0]) or die "$ARGV[0]: $!";
        my $p = TAP::Parser->new({ tap => do { local $/; <$f> } });
        my @unknown;
        while (my $r = $p->next) { push @unknown, $r->as_string if $r->is_unknown }
        print join("\n", "version=" . $p->version, "plan=" . $p->plan,
            "tests_run=" . $p->tests_run, "passed=" . scalar(my @a = $p->passed),
            "failed=" . join(",", $p->failed), "skipped=" . join(",", $p->skipped),
            "parse_errors=" . join("|", $p->parse_errors), "unknown=" . join("|", @unknown)), "\n";
    """
    r = subprocess.run(["perl", "-e", script, path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


def prove(*args):
    r = subprocess.run([PROVE, *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


needs_prove = pytest.mark.skipif(PROVE is None, reason="no prove (Debian's perl package: make deps)")


# ---- the fake unit table: units made to pass, fail, skip, time out, or fail in their report -----

UNIT_SH = {
    "t-pass": 'echo ran > "$RAW/ran.txt"\n',
    "t-fail": 'tl_die "made to fail by tests/test_ktap.py"\n',
    "t-skip": 'tl_skip "made to skip by tests/test_ktap.py"\n',
    "t-skip2": 'tl_skip "made to skip too"\n',
    "t-slow": 'exec sleep 600\n',     # a workload that outlives its limit_s of 2, not a wait
    "t-badrep": 'echo ran > "$RAW/ran.txt"\n',
    # a reason of 200,000 bytes: more than the kernel takes in one argument (128 KiB)
    "t-longwhy": 'tl_die "$(head -c 200000 /dev/zero | tr "\\0" x)"\n',
}


def fake_experiments(tmp_path, units):
    table = "".join(f"{u} {'t-badrep' if u == 't-badrep' else '-'} default run no 1 "
                    f"{2 if u == 't-slow' else 30} no 1 yes\n" for u in units)
    files = {(u, f"{u}.sh"): lab_proc.COLLECT_INIT + UNIT_SH[u] for u in units}
    files["t-badrep", "t-badrep.py"] = "import sys\nsys.exit('t-badrep: made to fail by the test')\n"
    return lab_proc.experiments(tmp_path, table, files)


def run_ktap(tmp_path, args, exp=None, timeout=120):
    env = dict(os.environ)
    if exp is not None:
        env["TCPLAB_EXPERIMENTS"] = str(exp)
    r = subprocess.run([RUN, "--ktap", "--out", str(tmp_path / "out"), *args], capture_output=True,
                       text=True, timeout=timeout, env=env)
    (tmp_path / "run.ktap").write_text(r.stdout)
    return r


# ---- real units -------------------------------------------------------------------------------

@pytest.mark.netns
@needs_prove
def test_a_real_run_parses_in_prove_and_in_the_strict_check(tmp_path, bindir):
    """p01-wire-netem skips where the kernel has no sch_netem (this host): then prove must count
    it skipped; where netem exists it passes."""
    r = run_ktap(tmp_path, ["p01-machine", "p01-wire-netem"])
    assert r.returncode == 0, r.stderr[-2000:]
    status = tmp_path / "out" / "raw" / "p01-wire-netem" / "status.txt"
    netem_skipped = status.is_file() and status.read_text().startswith("skipped: ")
    got = ktap_check(r.stdout, ["p01-machine", "p01-wire-netem"])
    assert got[0][:2] == ("pass", "p01-machine")
    assert got[1][0] == ("skip" if netem_skipped else "pass")
    if netem_skipped:
        assert got[1][3] == status.read_text().strip().removeprefix("skipped: ")
    assert "[run]" not in r.stderr                   # run.sh's progress went to the KTAP stream
    assert any(line.startswith("# ") and "[run] p01-machine: done in" in line
               for line in r.stdout.splitlines())
    p = tap_parser(str(tmp_path / "run.ktap"))
    assert p["version"] == "12" and p["plan"] == "1..2" and p["tests_run"] == "2"
    assert p["unknown"] == "KTAP version 1" and p["parse_errors"] == "" and p["failed"] == ""
    assert p["skipped"] == ("2" if netem_skipped else "")
    rc, out = prove("-v", "-e", "cat", str(tmp_path / "run.ktap"))
    assert rc == 0 and "Result: PASS" in out and "Tests=2" in out, out


# ---- fake units: fail, skip, timeout, a failed report --------------------------------------------

@pytest.mark.netns
@needs_prove
def test_a_failed_unit_is_not_ok_with_its_reason_and_exit_1(tmp_path, bindir):
    units = ["t-pass", "t-fail", "t-skip", "t-slow", "t-badrep"]
    r = run_ktap(tmp_path, [], exp=fake_experiments(tmp_path, units))
    assert r.returncode == 1, r.stderr[-2000:]
    got = ktap_check(r.stdout, units)
    assert [g[0] for g in got] == ["pass", "fail", "skip", "fail", "fail"]
    assert got[2][3] == "made to skip by tests/test_ktap.py"
    assert got[3][2:] == ("TIMEOUT", "2 seconds")
    lines = r.stdout.splitlines()
    assert any(re.fullmatch(r"# t-fail: failed: made to fail by tests/test_ktap\.py \(exit 1 after \d+ s\)", x)
               for x in lines), lines
    assert "# t-slow: timed out after 2 s" in lines
    assert "# t-badrep: failed: its report t-badrep failed" in lines
    assert "made to fail by the test" in r.stderr    # the report's own message stays on stderr
    p = tap_parser(str(tmp_path / "run.ktap"))
    assert (p["failed"], p["skipped"], p["parse_errors"]) == ("2,4,5", "3", "")
    rc, out = prove("-e", "cat", str(tmp_path / "run.ktap"))
    assert rc != 0 and "Failed tests:  2, 4-5" in out and "Result: FAIL" in out, out


@pytest.mark.netns
def test_a_reason_longer_than_an_argument_is_cut_not_the_end_of_the_run(tmp_path, bindir):
    """run.sh hands each reason to tcplab_finish.py as an argument: one of 200,000 bytes is cut
    at 4,096 and says so, and the run still ends with its test points and its last line."""
    r = run_ktap(tmp_path, [], exp=fake_experiments(tmp_path, ["t-pass", "t-longwhy"]))
    assert r.returncode == 1, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[-4:-2] == ["ok 1 t-pass", "# t-longwhy: failed: " + "x" * (4096 - 8)
                            + " [cut at 4096 bytes]"], [x[:80] for x in lines]
    assert lines[-2:] == ["not ok 2 t-longwhy",
                          "# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:0 error:0"]
    assert r.stderr.splitlines()[-1].startswith("run.sh: 1 unit(s) failed: t-longwhy (")
    assert "x" * 4088 in (tmp_path / "out" / "t-longwhy.txt").read_text()


@pytest.mark.netns
@needs_prove
def test_every_unit_skipped_exits_4_and_what_prove_makes_of_it(tmp_path, bindir):
    """kselftest's runner reads exit 4 as a skip; prove reads any non-zero exit as 'Dubious',
    so a harness that runs run.sh under prove needs --ignore-exit (docs/kernel-matrix.md)."""
    exp = fake_experiments(tmp_path, ["t-skip", "t-skip2"])
    r = run_ktap(tmp_path, [], exp=exp)
    assert r.returncode == EXIT_SKIP, r.stderr[-2000:]
    assert [g[0] for g in ktap_check(r.stdout, ["t-skip", "t-skip2"])] == ["skip", "skip"]
    assert tap_parser(str(tmp_path / "run.ktap"))["skipped"] == "1,2"
    env_run = f"env TCPLAB_EXPERIMENTS={exp} {RUN} --ktap --out {tmp_path / 'out2'}"
    rc, out = prove("-e", env_run, "t-skip")
    assert rc != 0 and "Dubious, test returned 4" in out, out
    rc, out = prove("--ignore-exit", "-e", env_run, "t-skip")
    assert rc == 0 and "Result: PASS" in out, out


@pytest.mark.parametrize("args,word", [
    (["no-such-unit"], "unknown experiment 'no-such-unit'"),
    (["--list"], "--list takes no other argument"),
    (["--mtu", "12"], "--mtu '12'"),
    (["--kernel", "1.2"], "--kernel '1.2'"),
])
def test_bad_usage_is_exit_2_one_line_and_no_ktap(args, word):
    r = subprocess.run([RUN, "--ktap", *args], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr


@needs_prove
def test_a_run_that_stops_after_the_plan_bails_out(tmp_path):
    """--out names a file: run.sh dies after the KTAP header, so the stream ends "Bail out!"."""
    (tmp_path / "out").write_text("a file, not a directory\n")
    r = run_ktap(tmp_path, ["p01-machine"])
    if r.returncode == EXIT_SKIP:
        pytest.skip(r.stderr.strip())       # not root and no user namespaces: stopped earlier
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["KTAP version 1", "1..1"]
    assert lines[-1] == f"Bail out! cannot write to {tmp_path / 'out'}", lines
    rc, out = prove("-e", "cat", str(tmp_path / "run.ktap"))
    assert rc != 0 and "FAILED--Further testing stopped: cannot write to" in out, out


@pytest.mark.qemu
def test_a_qemu_no_unit_is_a_skip_under_kernel(tmp_path, bindir):
    """--kernel leaves out the units marked qemu=no; in KTAP each is a SKIP with the table's
    reason.  One 6.1 boot of a one-line unit (about 20 s under TCG here)."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache and apt-get download")
    exp = fake_experiments(tmp_path, ["t-pass"])
    with open(exp / "units", "a") as f:
        f.write("t-host - default run no 1 30 no 1 no\n")
    lab_proc.exp_file(exp, "t-host", "t-host.sh").write_text(
        lab_proc.exp_file(exp, "t-pass", "t-pass.sh").read_text())
    r = run_ktap(tmp_path, ["--kernel", "6.1"], exp=exp, timeout=300)
    if r.returncode == EXIT_SKIP and "vm.sh cannot boot" in r.stdout:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    got = ktap_check(r.stdout, ["t-pass", "t-host"])
    assert got[0][0] == "pass"
    assert got[1] == ("skip", "t-host", "SKIP", "not run under --kernel (qemu=no in experiments/units)")


# ---- the strict check can fail; so can prove -----------------------------------------------------

def recorded(name):
    with open(os.path.join(KTAP_DATA, name)) as f:
        return f.read()


def test_recorded_real_runs_pass_the_strict_check():
    """tests/data/ktap/: host-p01.ktap is `./run.sh --ktap p01-machine p01-wire-netem` on this
    host (6.18, no sch_netem); fake-fail.ktap the fake table's run above."""
    got = ktap_check(recorded("host-p01.ktap"), ["p01-machine", "p01-wire-netem"])
    assert [g[0] for g in got] == ["pass", "skip"]
    got = ktap_check(recorded("fake-fail.ktap"), ["t-pass", "t-fail", "t-skip", "t-slow", "t-badrep"])
    assert [g[0] for g in got] == ["pass", "fail", "skip", "fail", "fail"]


BREAKS = {
    "no version line": lambda t: t.replace("KTAP version 1\n", "", 1),
    "TAP version 14": lambda t: t.replace("KTAP version 1", "TAP version 14", 1),
    "plan too big": lambda t: t.replace("\n1..2\n", "\n1..3\n", 1),
    "numbers skip": lambda t: t.replace("\nok 2 ", "\nok 3 ", 1),
    "a stray line": lambda t: t.replace("\nok 1 ", "\nmake: nothing to do\nok 1 ", 1),
    "not ok without its reason": lambda t: t.replace("\nok 1 ", "\nnot ok 1 ", 1),
    "SKIP without a reason": lambda t: re.sub(r"# SKIP .*", "# SKIP", t),
    "totals wrong": lambda t: t.replace("pass:1", "pass:2"),
    "a bail out": lambda t: t.replace("\nok 2 ", "\nBail out! stopped\nok 2 ", 1),
    "a unit renamed": lambda t: t.replace("ok 1 p01-machine", "ok 1 p01-other"),
}


@pytest.mark.parametrize("name", BREAKS)
def test_the_strict_check_fails_on_broken_ktap(name):
    good = recorded("host-p01.ktap")
    broken = BREAKS[name](good)
    assert broken != good
    with pytest.raises(AssertionError):
        ktap_check(broken, ["p01-machine", "p01-wire-netem"])


@needs_prove
@pytest.mark.parametrize("name", ["plan too big", "numbers skip", "not ok without its reason", "a bail out"])
def test_prove_fails_on_broken_ktap(tmp_path, name):
    path = tmp_path / "broken.ktap"
    path.write_text(BREAKS[name](recorded("host-p01.ktap")))
    rc, out = prove("-e", "cat", str(path))
    # a bail out: prove stops there with exit 255 ("FAILED--Further testing stopped")
    assert rc != 0 and ("Result: FAIL" in out or "FAILED--Further testing stopped" in out), out


# ---- the LAVA test definition -------------------------------------------------------------------

def lava_def():
    yaml = pytest.importorskip("yaml", reason="no python3-yaml (make deps)")
    with open(LAVA_DEF) as f:
        return yaml.safe_load(f)


def lava_pattern(d):
    """The parse pattern, compiled as lava_dispatcher does (re.M), and its fixupdict."""
    return re.compile(d["parse"]["pattern"], re.M), d["parse"]["fixupdict"]


def lava_results(d, text):
    """What LAVA records from text: pexpect's expect() is fed the console as it comes, so the
    stream is fed one character at a time, and after each match the buffer restarts after it."""
    pat, fix = lava_pattern(d)
    got, buf = [], ""
    for ch in text:
        buf += ch
        m = pat.search(buf)
        if m:
            res = m.groupdict()
            got.append((res["test_case_id"], fix.get(res["result"], res["result"])))
            buf = buf[m.end():]
    return got


def test_the_lava_definition_has_lavas_required_keys():
    d = lava_def()
    assert d["metadata"]["format"] == "Lava-Test Test Definition 1.0"
    assert d["metadata"]["name"] == "tcplab"
    assert isinstance(d["metadata"]["description"], str) and d["metadata"]["description"]
    assert all(isinstance(x, list) for x in (d["metadata"]["os"], d["metadata"]["scope"]))
    assert set(d) <= {"metadata", "install", "params", "parameters", "parse", "run"}
    steps = d["run"]["steps"]
    assert steps and all(isinstance(s, str) for s in steps)
    assert any("./run.sh --ktap" in s for s in steps)
    assert set(d["parse"]["fixupdict"].values()) <= {"pass", "fail", "skip", "unknown"}
    # the install deps: what run.sh itself asks for (ensure_built) and make deps lists
    with open(os.path.join(TOP, "Makefile")) as f:
        deb = re.search(r"^DEB_PACKAGES := (.*)$", f.read(), re.M).group(1).split()
    for pkg in d["install"]["deps"]:
        assert pkg in deb or pkg == "util-linux", pkg
    for pkg in ("gcc", "make", "libmnl-dev", "libpcap-dev", "iproute2", "nftables", "python3"):
        assert pkg in d["install"]["deps"], pkg


def test_the_lava_definition_passes_lavas_own_schema():
    """lava_common.schemas.test.testdef (Debian's lava-common) is the schema the dispatcher
    applies to an inline test definition."""
    testdef = pytest.importorskip("lava_common.schemas.test.testdef",
                                  reason="no lava-common (apt-get install lava-common)")
    d = lava_def()
    testdef.validate(d)
    bad = json.loads(json.dumps(d))
    bad["metadata"]["format"] = "Lava-Test-Shell Test Definition 1.0"
    with pytest.raises(Exception):
        testdef.validate(bad)


def lava_job(definition):
    """A QEMU job with the definition inline, as docs/kernel-matrix.md shows one."""
    return {
        "device_type": "qemu", "job_name": "tcplab-ktap", "priority": "medium",
        "visibility": "public", "timeouts": {"job": {"minutes": 60}},
        "context": {"arch": "amd64"},
        "actions": [
            {"deploy": {"to": "tmpfs", "os": "debian", "images": {"rootfs": {
                "url": "file:///srv/lava/debian-bookworm-amd64.img",
                "image_arg": "-drive format=raw,file={rootfs}"}}}},
            {"boot": {"method": "qemu", "media": "tmpfs", "prompts": ["root@debian:~#"]}},
            {"test": {"timeout": {"minutes": 30}, "definitions": [
                {"repository": definition, "from": "inline", "name": "tcplab",
                 "path": "inline/tcplab.yaml"}]}},
        ]}


def test_a_job_with_the_definition_inline_passes_lavas_job_schema():
    """lava_common.schemas.validate as lava-server applies it to a submitted job (strict=False:
    lava_scheduler_app/api/jobs.py); a fixupdict value LAVA does not know is refused."""
    schemas = pytest.importorskip("lava_common.schemas", reason="no lava-common (apt-get install lava-common)")
    d = lava_def()
    schemas.validate(lava_job(d), strict=False)
    bad = json.loads(json.dumps(d))
    bad["parse"]["fixupdict"]["SKIP"] = "skipped"
    with pytest.raises(Exception, match="fixupdict"):
        schemas.validate(lava_job(bad), strict=False)


def test_the_lava_run_steps_are_posix_sh():
    """lava-test-runner runs the steps as one script under `sh -e`: dash must parse them."""
    d = lava_def()
    script = "\n".join(f"{k}='{v}'" for k, v in d["params"].items()) + "\n" + "\n".join(d["run"]["steps"])
    r = subprocess.run(["dash", "-n", "-e"], input=script, capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", ["host-p01.ktap", "fake-fail.ktap"])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])   # a serial console ends lines with CR LF
def test_the_lava_parse_pattern_gives_one_case_per_unit(name, eol):
    text = recorded(name)
    want = [(u, res) for res, u, _, _ in ktap_check(text)]
    assert lava_results(lava_def(), text.replace("\n", eol)) == want


def test_the_lava_parse_pattern_can_fail():
    """Without its end-of-name guard the pattern takes a half-received name ("p", "p0"...)."""
    d = lava_def()
    d["parse"]["pattern"] = d["parse"]["pattern"].replace(r"(?: # [A-Z]+[ \r\n]|\r?\n)", "")
    text = recorded("host-p01.ktap")
    want = [(u, res) for res, u, _, _ in ktap_check(text)]
    assert lava_results(d, text) != want


# ---- the docs ---------------------------------------------------------------------------------

def test_help_and_readme_both_describe_ktap():
    r = subprocess.run([RUN, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    assert "[--ktap]" in r.stdout and re.search(r"^  --ktap +print KTAP", r.stdout, re.M)
    with open(os.path.join(TOP, "README.md")) as f:
        readme = f.read()
    row = [line for line in readme.splitlines() if line.startswith("| `./run.sh --ktap")]
    assert row and "exit" in row[0] and "4" in row[0], row
