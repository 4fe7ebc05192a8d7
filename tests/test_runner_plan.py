"""experiments/runner/tcplab_plan.py, run.sh's plan (docs/design.md "Layout", docs/maintainers.md
"The runner, step by step"): the bash it prints is inert data for run.sh's eval whatever the
user typed, and what each kind of command line plans.  No root, no run: the plan alone,
evaluated by bash as run.sh's main does, on the real unit table."""
import os
import subprocess

import pytest

from conftest import TOP

PLAN_PY = os.path.join(TOP, "experiments", "runner", "tcplab_plan.py")
EXP = os.path.join(TOP, "experiments")

# After the eval: the plan's scalars and arrays, one NAME=VALUE per NUL-separated field
DUMP = r"""
for v in PLAN_ACTION PLAN_STATUS PLAN_MSG KERNEL ACCEL OUT OUT_SET MTU_OPT KTAP QUICK ALL NAMED \
		RS_ALLOW_FOREIGN ROTATE_NOTE; do
	printf '%s=%s\0' "$v" "${!v-}"
done
for a in PLAN RUN_UNITS SKIPPED NAMED_UNITS GUEST_UNITS VM_ORDER; do
	declare -n arr=$a
	printf '%s=%s\0' "$a" "${arr[*]}"
	unset -n arr
done
for k in "${!WHY[@]}"; do printf 'WHY:%s=%s\0' "$k" "${WHY[$k]}"; done
for k in "${!K_GIVEN[@]}"; do printf 'K_GIVEN:%s=%s\0' "$k" "${K_VALUE[$k]}"; done
"""


def plan(*args, env=None):
    """(the plan's variables after bash evaluated it, its stderr)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TL_", "TCPLAB_USERNS"))}
    e.update(env or {})
    r = subprocess.run(["/usr/bin/python3", "-S", PLAN_PY, "--as", "run.sh", EXP, *args],
                       capture_output=True, env=e, timeout=30)
    assert r.returncode == 0, r.stderr
    b = subprocess.run(["bash", "-c", 'set -eu; declare -A WHY=() K_VALUE=() K_GIVEN=(); '
                        'eval "$(cat)"' + DUMP], input=r.stdout, capture_output=True,
                       timeout=30)
    assert b.returncode == 0, b.stderr
    out = {}
    for field in b.stdout.split(b"\0")[:-1]:
        k, _, v = field.decode("utf-8", "surrogateescape").partition("=")
        out[k] = v
    return out, r.stderr.decode("utf-8", "surrogateescape")


HOSTILE = ["$(touch {c})", "`touch {c}`", "'; touch {c}; '", "a b\nc", "x\"y$HOME", "%s%n",
           "é\udcff"]


@pytest.mark.parametrize("text", HOSTILE)
def test_the_plan_is_inert_data(tmp_path, text):
    """Whatever --out, --kernel, --accel or a unit's name holds comes out of run.sh's eval as
    the text itself, and runs nothing; a bad one is refused in its own words."""
    canary = tmp_path / "ran"
    t = text.format(c=canary)
    p, _ = plan("--out", t, "p01-machine")
    assert not canary.exists()
    if "\n" in t:
        assert (p["PLAN_ACTION"], p["PLAN_STATUS"]) == ("die", "2")
        assert p["PLAN_MSG"] == "--out: a directory name with a newline"
    else:
        assert p["PLAN_ACTION"] == "run" and p["OUT"] == t and p["OUT_SET"] == "1"
    p, _ = plan("--kernel", t)
    assert p["PLAN_ACTION"] == "die" and p["KERNEL"] == t and not canary.exists()
    p, _ = plan("--kernel", "6.1", "--accel", t)
    assert p["PLAN_MSG"] == f"--accel '{t}': want tcg or kvm" and not canary.exists()
    p, _ = plan(t)
    assert p["PLAN_STATUS"] == "2" and p["PLAN_MSG"].startswith("unknown experiment '")
    assert not canary.exists()


def test_quick_plans_the_default_set_less_the_long_ones():
    p, err = plan("--quick")
    assert (p["PLAN_ACTION"], p["QUICK"], p["NAMED"]) == ("run", "1", "")
    assert p["PLAN"] == p["RUN_UNITS"] != ""
    assert "p01-machine" in p["PLAN"].split() and "p01-synretry-default" not in p["PLAN"]
    assert err == ""


def test_a_guest_skips_the_qemu_no_units_a_set_chose_and_says_so():
    """--kernel VER --all: a qemu=no unit of the sets is in the plan (its KTAP test point) but
    not run, with its reason, said once on stderr."""
    p, err = plan("--kernel", "6.1", "--all")
    skipped = p["SKIPPED"].split()
    assert skipped and set(skipped) <= set(p["PLAN"].split())
    assert not set(skipped) & set(p["RUN_UNITS"].split())
    for u in skipped:
        assert p[f"WHY:{u}"].startswith("skipped: not run under --kernel (qemu=no in experiments/units")
        assert f"[run] {u}: not run under --kernel (qemu=no" in err


def test_root_of_a_user_namespace_skips_the_root_units_a_set_chose():
    """As run.sh's inner run in a user namespace (TCPLAB_USERNS): a root=yes unit chosen by a
    set is skipped with its reason; named, it refuses the run (exit 4)."""
    p, err = plan("--all", env={"TCPLAB_USERNS": "1"})
    skipped = p["SKIPPED"].split()
    assert skipped and not set(skipped) & set(p["RUN_UNITS"].split())
    for u in skipped:
        assert p[f"WHY:{u}"].startswith("skipped: needs root (root=yes in experiments/units")
        assert f"[run] {u}: skipped: not root, and it needs root" in err
    p, _ = plan(skipped[0], env={"TCPLAB_USERNS": "1"})
    assert (p["PLAN_ACTION"], p["PLAN_STATUS"]) == ("die", "4")
    assert p["PLAN_MSG"].startswith(f"{skipped[0]} needs root (root=yes")
    assert p["PLAN"] == skipped[0]      # its KTAP test point says skipped


def test_kernel_all_plans_the_guests_units():
    p, err = plan("--kernel", "all", "p01-machine", "p09-curl-nginx")
    assert p["PLAN_ACTION"] == "all"
    assert p["NAMED_UNITS"] == p["GUEST_UNITS"] == "p01-machine p09-curl-nginx"


def test_knobs_given_and_defaults():
    p, _ = plan("p01-strace", "--set", "backlog=9")
    assert p["K_GIVEN:p01-strace:backlog"] == "9" and "K_GIVEN:p01-strace:timeout_ms" not in p


def test_the_installed_program_is_named_in_its_lines():
    """--as tcplab (make install's PROG): the lines that name the command say tcplab, and the
    usage's continued line stays aligned under its first."""
    r = subprocess.run(["/usr/bin/python3", "-S", PLAN_PY, "--as", "tcplab", EXP, "--help"],
                       capture_output=True, text=True, timeout=30)
    text = r.stdout
    assert "usage: tcplab [--quick]" in text and "./run.sh" not in text
    assert "\n              [--mtu N]" in text
    r = subprocess.run(["/usr/bin/python3", "-S", PLAN_PY, "--as", "tcplab", EXP, "--bogus"],
                       capture_output=True, text=True, timeout=30)
    assert "PLAN_MSG='unknown option '\"'\"'--bogus'\"'\"' (see tcplab --help)'" in r.stdout


@pytest.mark.parametrize("which,order", [
    ("0/4", "a b c d e f"),
    ("1/4", "b c d e f a"),     # the sum 800: 1/4 is 200, passed inside b (30..230)
    ("2/4", "c d e f a b"),     # 400, inside c (230..530)
    ("3/4", "d e f a b c"),     # 600, inside d (530..680)
    ("1/1", "a b c d e f"),
])
def test_rotate_starts_where_the_limits_pass_i_over_n(which, order):
    import sys
    sys.path.insert(0, os.path.dirname(PLAN_PY))
    import tcplab_plan
    i, n = map(int, which.split("/"))
    limits = dict(a=30, b=200, c=300, d=150, e=100, f=20)
    assert tcplab_plan.rotate(list("abcdef"), limits, i, n) == order.split()


def test_a_guest_side_by_side_runs_its_units_from_another_point():
    """TCPLAB_ROTATE=I/N (tcplab_all.py sets it for the I-th of N guests): the guest's order,
    and the line that says so; a bad value is refused before anything starts."""
    units = ["p01-machine", "p01-strace", "p01-connect-time"]
    p, _ = plan("--kernel", "6.1", *units)
    assert p["VM_ORDER"].split() == units and p["ROTATE_NOTE"] == ""
    p, _ = plan("--kernel", "6.1", *units, env={"TCPLAB_ROTATE": "2/3"})
    assert p["RUN_UNITS"].split() == units
    assert p["VM_ORDER"].split() in (units[1:] + units[:1], units[2:] + units[:2])
    assert p["ROTATE_NOTE"] == (f"units in turn from {p['VM_ORDER'].split()[0]} "
                                "(TCPLAB_ROTATE=2/3: guest 3 of 3 side by side)")
    for bad in ("3/3", "1/0", "x", "1/100", "1/3\n"):
        p, _ = plan("--kernel", "6.1", *units, env={"TCPLAB_ROTATE": bad})
        assert (p["PLAN_ACTION"], p["PLAN_STATUS"]) == ("die", "2"), bad
        assert p["PLAN_MSG"] == f"TCPLAB_ROTATE={bad}: want I/N, 0 <= I < N <= 99"


@pytest.mark.parametrize("prog,args", [("tcplab_plan.py", ["--as", "run.sh", EXP, "--all"]),
                                       ("tcplab_units.py", ["shell", EXP])],
                         ids=["plan", "units"])
def test_a_reader_gone_ends_the_program_silently(prog, args):
    """run.sh killed while the plan is written to it (CI's interrupt storm: SIGKILL 0.06 s in):
    the program dies of SIGPIPE as a shell's printf would, with no traceback on the terminal."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(["/usr/bin/python3", "-S", os.path.join(TOP, "experiments", "runner", prog),
                            *args], stdout=w, stderr=subprocess.PIPE, timeout=30)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (-13, b"")
