"""experiments/lib/collect.sh's readiness wait, on the edge where it once lost a race: a program
prints the awaited line and exits before the wait's first look at the file.  The wait is
probes/waitfor's (it reads the file once more after the process is seen gone); these check that
tl_wait_count keeps that promise and words the failure as before."""
import glob
import os
import subprocess

from conftest import TOP

COLLECT = os.path.join(TOP, "experiments", "lib", "collect.sh")

SCRIPT = r"""
. "$COLLECT"
printf 'ready x=1\nready x=2\n' > "$FILE"
true & pid=$!
wait "$pid"
tl_wait_count "$pid" "$FILE" '^ready ' "$WANT" 2 && echo "found"
"""


def run(tmp_path, want, bindir):
    f = tmp_path / "prog.txt"
    return subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=20,
                          env=dict(os.environ, COLLECT=COLLECT, FILE=str(f), WANT=str(want),
                                   TL_UNIT="t", TL_BIN=bindir))


def test_lines_printed_before_the_exit_count(tmp_path, bindir):
    r = run(tmp_path, 2, bindir)
    assert r.returncode == 0 and r.stdout == "found\n", r.stderr


def test_an_exit_without_the_lines_still_fails(tmp_path, bindir):
    r = run(tmp_path, 3, bindir)
    assert r.returncode == 1 and r.stdout == ""
    assert "prog exited before 3 lines of '^ready '" in r.stderr


DIES_WATCHING = r"""
. "$COLLECT"
tl_init "$RAWDIR"
tl_watch "$RAWDIR/sockwatch.txt" -4 -s listen -p 1
ls "$RAWDIR"
tl_die "made to fail while sockwatch runs"
"""


def test_a_unit_that_dies_while_watching_leaves_no_fifo(tmp_path, bindir):
    """tl_watch's two fifos are removed by the exit trap too: a failed unit's raw directory is
    kept, and a fifo in it could not be committed (one was, in a 6.12 guest's p04-full-buffers)."""
    raw = tmp_path / "raw"
    r = subprocess.run(["sh", "-c", DIES_WATCHING, "t.sh"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, COLLECT=COLLECT, RAWDIR=str(raw),
                                            TL_UNIT="t", TL_BIN=bindir))
    assert r.returncode != 0 and "made to fail while sockwatch runs" in r.stderr, r.stderr
    assert "sockwatch.txt.fifo" in r.stdout, r.stdout      # they were there while it ran
    left = sorted(p.name for p in raw.iterdir())
    assert not [n for n in left if n.endswith(".fifo")], left
    assert "sockwatch.txt" in left


WATCH = r"""
. "$COLLECT"
tl_init "$RAWDIR"
tl_watch "$RAWDIR/sockwatch.txt" -4 -s listen -p 1
tl_unwatch stop
grep '^ready ' "$RAWDIR/sockwatch.txt"
"""


def watch_ready(tmp_path, bindir, **env):
    raw = tmp_path / "raw"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TL_")}
    return subprocess.run(["sh", "-c", WATCH, "t.sh"], capture_output=True, text=True,
                          timeout=60, env=dict(base, COLLECT=COLLECT, RAWDIR=str(raw),
                                               TL_UNIT="t", TL_BIN=bindir, **env))


def test_a_watcher_samples_every_ms_on_the_host(tmp_path, bindir):
    """TL_GUEST_WATCH_US is for a QEMU guest only: on the host a unit that sets it still gets
    sockwatch's 1 ms."""
    r = watch_ready(tmp_path, bindir, TL_GUEST_WATCH_US="10000")
    assert r.returncode == 0, r.stderr
    assert " interval_us=1000 " in r.stdout, r.stdout


def test_a_guest_watcher_samples_at_the_units_interval(tmp_path, bindir):
    r = watch_ready(tmp_path, bindir, TL_GUEST="1", TL_GUEST_WATCH_US="10000")
    assert r.returncode == 0, r.stderr
    assert " interval_us=10000 " in r.stdout, r.stdout


def test_a_guest_watcher_without_the_units_setting_samples_every_ms(tmp_path, bindir):
    r = watch_ready(tmp_path, bindir, TL_GUEST="1")
    assert r.returncode == 0, r.stderr
    assert " interval_us=1000 " in r.stdout, r.stdout


def test_a_bad_guest_interval_is_one_line(tmp_path, bindir):
    r = watch_ready(tmp_path, bindir, TL_GUEST="1", TL_GUEST_WATCH_US="10ms")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.strip().endswith("TL_GUEST_WATCH_US=10ms: not a number of us"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_guest_watcher_is_timer_led_when_the_unit_says(tmp_path, bindir):
    r = watch_ready(tmp_path, bindir, TL_GUEST="1", TL_GUEST_WATCH_US="10000",
                    TL_GUEST_TIMER_LED_MS="1000")
    assert r.returncode == 0, r.stderr
    assert " interval_us=10000 " in r.stdout and r.stdout.rstrip().endswith(" timer_led_ms=1000"), \
        r.stdout


def test_timer_led_is_for_a_guest_only(tmp_path, bindir):
    r = watch_ready(tmp_path, bindir, TL_GUEST_TIMER_LED_MS="1000")
    assert r.returncode == 0, r.stderr
    assert "timer_led_ms" not in r.stdout, r.stdout


def test_a_bad_timer_led_bound_is_one_line(tmp_path, bindir):
    r = watch_ready(tmp_path, bindir, TL_GUEST="1", TL_GUEST_TIMER_LED_MS="1s")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.strip().endswith("TL_GUEST_TIMER_LED_MS=1s: not a number of ms"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# the units whose watched sockets only their own timers change, in a guest (sockwatch -T)
TIMER_LED_IN_A_GUEST = ("p01-synretry-default", "p06-time-wait")


def unit_watchers(unit, setting):
    """The hand-started watcher calls of unit's script (p01-synretry-default's are
    p01-synretry.sh's), after checking that the unit sets `setting`; at least one watcher, by
    hand or tl_watch's."""
    exp = os.path.join(TOP, "experiments")
    text = open(glob.glob(os.path.join(exp, "*", unit + ".sh"))[0]).read()
    assert setting in text, unit
    if unit == "p01-synretry-default":
        text = open(os.path.join(exp, "p01-synretry", "p01-synretry.sh")).read()
    calls = watcher_calls(text)
    assert calls or "tl_watch " in text, unit
    return calls


def test_the_timer_led_units_lead_every_watcher():
    for unit in TIMER_LED_IN_A_GUEST:
        for c in unit_watchers(unit, "TL_GUEST_TIMER_LED_MS=1000"):
            assert "$TL_WATCH_LEAD" in c, (unit, c)


# the units whose facts are timers of a second or more (docs/kernel-matrix.md, "Sampling in a
# guest"): every continuous watcher they start must sample every TL_WATCH_US
COARSE_IN_A_GUEST = ("p01-synretry-default", "p02-accept-queue", "p05-close-wait",
                     "p05-fin-wait2-timeout", "p06-time-wait")


def test_the_timer_units_set_a_guest_interval_for_every_watcher():
    # tl_watch passes -i "$TL_WATCH_US" itself; a watcher started by hand must too
    for unit in COARSE_IN_A_GUEST:
        for c in unit_watchers(unit, "TL_GUEST_WATCH_US=10000"):
            assert '-i "$TL_WATCH_US"' in c, (unit, c)


def watcher_calls(text):
    """The continuous sockwatch calls a unit script starts by hand (not tl_watch, not -1)."""
    return [line for line in text.replace("\\\n", " ").splitlines()
            if '"$TL_BIN/sockwatch"' in line and not line.lstrip().startswith("#")
            and " -1 " not in line + " "]


def test_every_watcher_started_by_hand_gets_the_units_interval():
    """docs/kernel-matrix.md ("Sampling in a guest"): each watcher a script starts by hand passes
    -i "$TL_WATCH_US", so that a unit's TL_GUEST_WATCH_US reaches all of its watchers; the
    exceptions are accept-path's queue sampler, whose interval is the experiment's own
    (-i "$_iv"), and p08-tls's kernel-TLS watchers (ktls_watch: -i 5000 in the function, which
    the report's "every 5 ms" states: a 400 ms hold in which the ULP changes at most twice)."""
    seen = 0
    for path in sorted(glob.glob(os.path.join(TOP, "experiments", "*", "*.sh"))):
        if os.path.basename(os.path.dirname(path)) in ("lib", "guest"):
            continue                    # the collect scripts only: each in its experiment's folder
        name = os.path.basename(path)
        for c in watcher_calls(open(path).read()):
            seen += 1
            assert ('-i "$TL_WATCH_US"' in c or (name == "accept-path.sh" and '-i "$_iv"' in c)
                    or (name == "p08-tls-common.sh" and c.lstrip().startswith("ktls_watch "))), \
                (name, c)
    assert seen >= 12, seen


ENDS_EARLY = r"""
. "$COLLECT"
tl_init "$RAWDIR"
: > "$RAWDIR/capture.txt"
tl_bg "$RAWDIR/sender.txt" sh -c 'echo "blocking_send start"; echo "result=ok sent=100"'
tl_wait_count "$TL_LAST" "$RAWDIR/capture.txt" ' probe ' 4 10
"""


def test_a_program_that_ends_early_is_named_with_its_last_line(tmp_path, bindir):
    """The program a wait watches ends before FILE has its lines: the failure names it, and its
    last line on stdout says why it ended (p04-full-buffers' sender: result=ok, the window open
    again)."""
    raw = tmp_path / "raw"
    r = subprocess.run(["sh", "-c", ENDS_EARLY, "t.sh"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, COLLECT=COLLECT, RAWDIR=str(raw),
                                            TL_UNIT="t", TL_BIN=bindir))
    assert r.returncode != 0, r.stderr
    assert "sender: its last line: result=ok sent=100\n" in r.stderr, r.stderr
    assert "sender exited before 4 lines of ' probe ' in capture.txt" in r.stderr, r.stderr
