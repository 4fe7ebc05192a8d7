"""What the tests of the lifecycle experiments (p04 to p06) share: run an experiment's report on
the committed reference (outputs/RELEASE/raw/, no root) or on a copy of it broken on purpose,
check that the replay is the committed output and that a refusal is one line with nothing
written, and run the unit live.  Also the timer wheel's lateness, which every bound on a kernel
timer needs.  The kernel facts themselves stay in each experiment's own test."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import TOP, reference_dirs

PY = "/usr/bin/python3"
RUN = os.path.join(TOP, "run.sh")
REF = os.path.join(TOP, "outputs", "6.18.44-fc-v1045")     # the wire units' host reference
DATA = os.path.join(TOP, "tests", "data", "reports")    # raw data of runs kept for a replay test

# kernel/time/timer.c: the timer wheel's levels (LVL_BITS 6, LVL_CLK_SHIFT 3) as (first jiffy
# count past the level, its granularity in jiffies).  Written out again here, not imported
# from the reports, so that a test checks the report's bounds against its own reading.
WHEEL = ((63, 1), (504, 8), (4032, 64), (32256, 512), (258048, 4096))


def wheel_gran_ms(timeout_ms, hz):
    """How late (at most) the wheel fires a timer of timeout_ms at HZ hz, in ms: the
    granularity of the first level whose range holds its jiffies (calc_index() rounds up)."""
    j = -(-timeout_ms * hz // 1000)
    return next((g for top, g in WHEEL if j < top), WHEEL[-1][1]) * 1000 / hz


def window(expected_ms, hz, slack_ms):
    """When a kernel timer of expected_ms may fire: from a jiffy early (armed mid-jiffy) to its
    wheel level's granularity, two jiffies and the sampling or scheduling slack late."""
    jiffy = 1000 / hz
    return expected_ms - jiffy, expected_ms + wheel_gran_ms(expected_ms, hz) + 2 * jiffy + slack_ms


def params(raw):
    """raw/<unit>/params.txt, the constants the collect script chose, as whole numbers."""
    with open(os.path.join(raw, "params.txt")) as f:
        return {k: int(v) for k, v in (w.split("=", 1) for w in f.read().split())}


class Report:
    """experiments/<name>/<name>.py run on raw directories."""

    def __init__(self, name, ref=REF):
        self.name, self.ref = name, ref
        self.path = os.path.join(TOP, "experiments", name, name + ".py")

    def run(self, raw_root, out, timeout=60):
        return subprocess.run([PY, self.path, str(raw_root), str(out)], capture_output=True,
                              text=True, timeout=timeout)

    def run_data(self, dataset, out):
        """The report on tests/data/reports/DATASET/raw (a run's raw data kept because a check
        once failed on it) into OUT, which it must accept; returns that raw root."""
        raw = os.path.join(DATA, dataset, "raw")
        r = self.run(raw, out)
        assert r.returncode == 0, r.stderr
        return raw

    def load(self, out):
        with open(os.path.join(out, self.name + ".json")) as f:
            return json.load(f)

    def replay(self, tmp_path_factory):
        """The report on the committed raw/; returns the output directory."""
        out = tmp_path_factory.mktemp(self.name + "-ref")
        r = self.run(os.path.join(self.ref, "raw"), out)
        assert r.returncode == 0, r.stderr
        return str(out)

    def assert_committed(self, out):
        """The committed .txt and .json are what the report makes of the committed raw/."""
        for ext in ("txt", "json"):
            with open(os.path.join(out, f"{self.name}.{ext}")) as f, \
                    open(os.path.join(self.ref, f"{self.name}.{ext}")) as g:
                assert f.read() == g.read(), ext

    def broken_copy(self, tmp_path, edit, unit=None):
        """A copy of the reference's raw/<unit>/ (unit: the report's name unless given) that
        edit(dir) has broken; returns its root."""
        unit = unit or self.name
        root = tmp_path / "raw"
        shutil.copytree(os.path.join(self.ref, "raw", unit), root / unit)
        edit(root / unit)
        return str(root)

    def assert_refused(self, tmp_path, edit, word, unit=None):
        """On the broken copy (of unit, as broken_copy): exit 1, one line on stderr that says
        word, no traceback, nothing written."""
        out = tmp_path / "out"
        out.mkdir()
        r = self.run(self.broken_copy(tmp_path, edit, unit), out)
        assert r.returncode == 1, r.stdout
        assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert not os.listdir(out)

    def live(self, tmp_path, timeout):
        """./run.sh --out tmp_path NAME (root and namespaces); returns the output directory."""
        r = subprocess.run([RUN, "--out", str(tmp_path), self.name], capture_output=True,
                           text=True, timeout=timeout)
        assert r.returncode == 0, r.stderr[-3000:]
        return str(tmp_path)

    def checks(self, *checks):
        """The module's check_all(out, raw=None): the report's JSON in out, each check run on it
        in turn (a check of two arguments gets raw/params.txt too, params()); returns the JSON."""
        def check_all(out, raw=None):
            j = self.load(out)
            prm = params(raw) if any(c.__code__.co_argcount == 2 for c in checks) else None
            for check in checks:
                check(j, prm) if check.__code__.co_argcount == 2 else check(j)
            return j
        return check_all

    def check(self, check_all, out, root):
        """check_all(out), or check_all(out, root/raw/NAME) where it also takes the raw directory
        (the constants the run recorded): the kernel facts asserted on a report's output."""
        if check_all.__code__.co_argcount == 1:
            return check_all(str(out))
        return check_all(str(out), os.path.join(root, "raw", self.name))

    def reference_tests(self, check_all):
        """The block every lifecycle test file shares, for the module to bind by these names:
            ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one = \\
                R.reference_tests(check_all)
        ref_out replays the report once per module on the committed raw/; check_all asserts the
        kernel facts on it; its output must be the committed one."""
        @pytest.fixture(scope="module")
        def ref_out(tmp_path_factory):
            return self.replay(tmp_path_factory)

        def test_reference_kernel_facts(ref_out):
            self.check(check_all, ref_out, self.ref)

        def test_reference_report_is_the_committed_one(ref_out):
            """The committed .txt and .json are what the report makes of the committed raw/."""
            self.assert_committed(ref_out)

        return ref_out, test_reference_kernel_facts, test_reference_report_is_the_committed_one

    def every_reference_test(self, check_all, special=None):
        """test_every_kernels_reference_shows_the_kernel_facts for the module to bind: the report
        replayed on each committed reference set that holds this unit's raw/ (the guests' under
        QEMU included; test_references_replay checks each is the committed one), and check_all
        on it; special: {release: check(json)} for a reference that shows something else, said
        where that check is written."""
        releases = [d for d in reference_dirs()
                    if os.path.isdir(os.path.join(TOP, "outputs", d, "raw", self.name))]

        @pytest.mark.parametrize("release", releases)
        def test_every_kernels_reference_shows_the_kernel_facts(release, tmp_path_factory):
            ref = Report(self.name, ref=os.path.join(TOP, "outputs", release))
            out = ref.replay(tmp_path_factory)
            if special and release in special:
                special[release](ref.load(out))
            else:
                ref.check(check_all, out, ref.ref)

        return test_every_kernels_reference_shows_the_kernel_facts

    def live_test(self, check_all, timeout):
        """test_live_run_kernel_facts for the module to bind: ./run.sh --out TMP NAME (root and
        namespaces) succeeds within timeout s, and check_all holds on its output."""
        @pytest.mark.netns
        def test_live_run_kernel_facts(tmp_path, bindir):
            out = self.live(tmp_path, timeout)
            self.check(check_all, out, out)

        return test_live_run_kernel_facts

    def refusal_test(self, cases, unit=None):
        """test_report_refuses_bad_raw for the module to bind, over cases, a list of
        (edit, word): the report refuses each broken copy (of unit, as broken_copy) as
        assert_refused says."""
        @pytest.mark.parametrize("edit,word", cases)
        def test_report_refuses_bad_raw(tmp_path, edit, word):
            self.assert_refused(tmp_path, edit, word, unit)

        return test_report_refuses_bad_raw

    def ladder_test(self, *words):
        """test_reference_ladder for the module to bind: the replayed reference's ladder picture
        is NAME-ladder.svg (its .json's ladder_svg) and says each of words."""
        def test_reference_ladder(ref_out):
            j = self.load(str(ref_out))
            assert j["ladder_svg"] == f"{self.name}-ladder.svg"
            with open(os.path.join(ref_out, j["ladder_svg"])) as f:
                svg = f.read()
            for word in words:
                assert word in svg, word

        return test_reference_ladder

    def blind_tcpevents_test(self, part):
        """test_report_without_tcpevents_says_why for the module to bind: part's tcpevents
        output replaced by the one line saying why it could not run (PART-tcpevents-blind.txt),
        the report still works, says why in one line and counts no tcpevents retransmissions."""
        def test_report_without_tcpevents_says_why(tmp_path):
            """tcpevents could not run: the report still works and says why in one line."""
            def edit(d):
                (d / f"{part}-tcpevents.txt").unlink()
                (d / f"{part}-tcpevents-blind.txt").write_text(
                    "tcpevents: cannot see TCP events: loading BPF needs CAP_BPF and CAP_PERFMON "
                    "(or root): Operation not permitted\n")
            out = tmp_path / "out"
            out.mkdir()
            r = self.run(self.broken_copy(tmp_path, edit), out)
            assert r.returncode == 0, r.stderr
            with open(out / f"{self.name}.txt") as f:
                text = f.read()
            assert text.count("tcpevents could not run: tcpevents: cannot see TCP events") == 1
            assert "retransmissions tcpevents -," in text

        return test_report_without_tcpevents_says_why

    def knob_tests(self, script_cases, run_cases):
        """The two bad-knob tests for the module to bind:
            test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob = \\
                R.knob_tests([(KNOB, VALUE), ...], ["name=value", ...])
        The collect script run without run.sh (TL_KNOB_KNOB=VALUE), and run.sh --set: each one
        line on stderr, exit 2, nothing made."""
        script = os.path.join(TOP, "experiments", self.name, self.name + ".sh")

        @pytest.mark.parametrize("knob,value", script_cases)
        def test_collect_script_refuses_a_bad_knob(tmp_path, knob, value):
            env = dict(os.environ, **{f"TL_KNOB_{knob}": value})
            r = subprocess.run(["sh", script, str(tmp_path / "raw")], capture_output=True,
                               text=True, timeout=30, env=env)
            assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
            assert f"knob {knob.lower()}=" in r.stderr
            assert not os.path.exists(tmp_path / "raw")

        @pytest.mark.parametrize("setting", run_cases)
        def test_run_sh_refuses_a_bad_knob(tmp_path, setting):
            r = subprocess.run([RUN, "--out", str(tmp_path / "out"), "--set", setting, self.name],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
            assert not os.path.exists(tmp_path / "out")

        return test_collect_script_refuses_a_bad_knob, test_run_sh_refuses_a_bad_knob


# Edits for Report.broken_copy: each returns edit(dir).
def drop_lines(name, pred):
    def edit(d):
        p = d / name
        p.write_text("".join(x for x in p.read_text().splitlines(True) if not pred(x)))
    return edit


def drop_line(prefix, name):
    return drop_lines(name, lambda x: x.startswith(prefix))


def replace(name, old, new):
    def edit(d):
        p = d / name
        p.write_text(p.read_text().replace(old, new))
    return edit


def remove(name):
    return lambda d: (d / name).unlink()


def write(name, text):
    return lambda d: (d / name).write_text(text)


# Cases for Report.refusal_test, each (edit, what the refusal says).
def missing(name):
    """The file name removed: the refusal names it missing."""
    return remove(name), name + ": missing"


def no_line(word, name):
    """The lines of name that start with word and a blank dropped: the refusal says so."""
    return drop_line(word + " ", name), f"no `{word}` line"


def tseq_panels(path):
    """The time-sequence picture's panels (experiments/report/tcplab_tseq.py), read as data:
    [(title, {class: count})], counting the elements of each class (seg, seg dropped, seg again,
    ack, ackpt, sack) but the legend's."""
    import re
    with open(path) as f:
        svg = f.read()
    titles = list(re.finditer(r'<text [^>]*class="title">([^<]*)</text>', svg))[1:]   # [0]: caption
    out = []
    for i, m in enumerate(titles):
        body = svg[m.end():titles[i + 1].start() if i + 1 < len(titles) else len(svg)]
        counts = {}
        for cls in re.findall(r'class="([a-z ]+)"', body):
            if not cls.startswith("legend"):
                counts[cls] = counts.get(cls, 0) + 1
        out.append((m.group(1), counts))
    return out
