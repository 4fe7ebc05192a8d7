"""experiments/runner/tcplab_guest.py, a --kernel run's guest job (docs/maintainers.md, "The runner,
step by step", step 5): vm.sh's results made into the run's, each unit's raw directory put in
place, failed or skipped with its reason, then the run's end.  No root and no guest: a vm.sh of
the test's own, in a tree whose runner/ and report/ are tcplab's, writes what a guest would send
back.  The real guests are in test_kernel_*.py, test_ktap.py, test_knobs.py and
test_reliability_interrupt.py (marked qemu)."""
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import TOP

# FAKE_VM is the fake vm.sh's script: a shell body run with RAW (vm.sh's RAWROOT) set
FAKE_VM = """#!/bin/bash
while [ "${1#--}" != "$1" ]; do shift 2; done
KERNEL=$1 RAW=$2
shift 2
echo "$*" > "$RAW/order.txt"
eval "$FAKE_VM"
"""
VM_TXT = "kernel=6.1.0-99-cloud-amd64\nstatus=ok\n"


def tree(tmp_path):
    """A TOP of the test's own: tcplab's runner and report library, a fake guest/vm.sh."""
    top = tmp_path / "top"
    (top / "experiments" / "guest").mkdir(parents=True)
    for d in ("runner", "report"):
        os.symlink(os.path.join(TOP, "experiments", d), top / "experiments" / d)
    vm = top / "experiments" / "guest" / "vm.sh"
    vm.write_text(FAKE_VM)
    vm.chmod(0o755)
    for d in ("exp", "out", "tmp", "outputs", "state"):
        (tmp_path / d).mkdir(exist_ok=True)
    return top


def guest(tmp_path, body, units, extra=(), ktap=False, wait=True):
    """The guest job on UNITS, the fake vm.sh running BODY; → the completed process (or the
    Popen when not WAIT) and the KTAP stream's text."""
    top = tree(tmp_path)
    argv = ["/usr/bin/python3", "-S", os.path.join(TOP, "experiments", "runner", "tcplab_guest.py"),
            "--t0", str(int(time.time())), "--prog", "run.sh", "--top", str(top),
            "--exp", str(tmp_path / "exp"), "--out", str(tmp_path / "out"),
            "--tmp", str(tmp_path / "tmp"), "--outputs", str(tmp_path / "outputs"),
            "--state", str(tmp_path / "state"), "--record", str(tmp_path / "state" / "run.x"),
            "--version", "v-test", *extra]
    for u in units:
        argv += ["--unit", u, "-", "30", "--plan", u, "--order", u]
    r_fd = w_fd = None
    if ktap:
        r_fd, w_fd = os.pipe()
        argv += ["--ktap-fd", str(w_fd)]
    argv += ["--", "6.1", *units]
    env = dict(os.environ, FAKE_VM=body)
    if not wait:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                       pass_fds=(w_fd,) if ktap else ())
    stream = ""
    if ktap:
        os.close(w_fd)
        with os.fdopen(r_fd) as f:
            stream = f.read()
    return r, stream


def test_each_units_result_as_run_sh_gave_it(tmp_path):
    """A unit that ran, one that skipped itself, one that failed with its reason, one that
    failed without, one that timed out and one the guest sent nothing of: the raw directories
    put in place with the guest's vm.txt, the reasons in status.txt and the last lines, a
    knob in knobs.txt."""
    body = f"""printf '{VM_TXT}unit.t-ok=0\\nunit.t-skip=3\\nunit.t-why=1\\nunit.t-bare=2\\nunit.t-slow=timeout\\n' > "$RAW/vm.txt"
mkdir "$RAW/t-ok" "$RAW/t-skip" "$RAW/t-why" "$RAW/t-bare" "$RAW/t-slow"
echo ran > "$RAW/t-ok/ran.txt"
echo "skipped: no sch_netem here" > "$RAW/t-skip/status.txt"
echo "failed: the listener said no" > "$RAW/t-why/status.txt"
"""
    units = ["t-ok", "t-skip", "t-why", "t-bare", "t-slow", "t-none"]
    r, _ = guest(tmp_path, body, units, ["--knob", "t-ok", "count", "7", "--mtu", "1400", "--out-set"])
    out = tmp_path / "out" / "raw"
    assert r.returncode == 1, r.stderr
    assert (tmp_path / "tmp" / "raw" / "order.txt").read_text() == " ".join(units) + "\n"
    assert (out / "t-ok" / "ran.txt").read_text() == "ran\n"
    assert (out / "t-ok" / "knobs.txt").read_text() == "count=7\n"
    assert (out / "t-ok" / "tcplab-version.txt").read_text() == "v-test\n"
    for u in units:
        assert (out / u / "vm.txt").read_text().startswith(VM_TXT), u
    status = {u: (out / u / "status.txt").read_text() for u in units if u != "t-ok"}
    assert status == {
        "t-skip": "skipped: no sch_netem here\n",
        "t-why": "failed: the listener said no (exit 1 in the guest)\n",
        "t-bare": "failed: exit 2 in the guest\n",
        "t-slow": "timed out in the guest (limit_s 30 s)\n",
        "t-none": "failed: the guest sent nothing back\n"}
    assert "[run] t-why: failed: the listener said no (exit 1 in the guest); partial output in " \
        f"{tmp_path}/out/raw/t-why/" in r.stderr
    assert "[run] t-skip: skipped: no sch_netem here\n" in r.stderr
    assert re.search(r"finished in \d+ s: ", r.stderr)
    assert (": 1 unit(s) ran, 4 failed (t-why: failed: the listener said no "
            "(exit 1 in the guest); t-bare: failed: exit 2 in the guest; t-slow: timed out in "
            "the guest (limit_s 30 s); t-none: failed: the guest sent nothing back), 1 skipped "
            "(t-skip: no sch_netem here)") in r.stderr
    assert "run.sh: 4 unit(s) failed: t-why t-bare t-slow t-none (" in r.stderr
    # each failed unit's outputs name the guest's release
    assert "6.1.0-99-cloud-amd64" in (tmp_path / "out" / "t-why.txt").read_text()


def test_a_guest_that_cannot_boot_here_skips_every_planned_unit(tmp_path):
    r, stream = guest(tmp_path, 'echo "vm.sh: skip: no qemu" >&2; exit 4', ["t-a", "t-b"], ktap=True)
    assert r.returncode == 4, r.stderr
    assert r.stderr == "vm.sh: skip: no qemu\n"
    why = "not run: experiments/guest/vm.sh cannot boot a guest here (its reason is on stderr)"
    assert stream.splitlines() == [f"ok 1 t-a # SKIP {why}", f"ok 2 t-b # SKIP {why}",
                                   "# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:2 error:0"]


@pytest.mark.parametrize("body,line", [
    ("kill -KILL $$", "run.sh: vm.sh was killed by SIGKILL (its guest died with it)"),
    ("kill -35 $$", "run.sh: vm.sh was killed by SIGRTMIN+1 (its guest died with it)"),
    ("echo status=ok > \"$RAW/vm.txt\"", "run.sh: the guest reported no kernel release (see above)"),
    ("exit 1", "run.sh: the guest reported no kernel release (see above)"),
], ids=["vm.sh-killed", "vm.sh-rt-signal", "no-release", "no-vm.txt"])
def test_a_guest_run_that_cannot_go_on_says_so_in_one_line(tmp_path, body, line):
    r, stream = guest(tmp_path, body, ["t-a"], ["--out-set"], ktap=True)
    assert r.returncode == 1
    assert r.stderr == line + "\n"
    assert stream == "Bail out! " + line.removeprefix("run.sh: ") + "\n"


def test_without_out_the_guests_release_decides_and_is_locked(tmp_path):
    """No --out: the output directory becomes OUTPUTS/<the guest's release>, named in the run's
    record (the job holds its lock while it writes there)."""
    body = f"""printf '{VM_TXT}unit.t-ok=0\\n' > "$RAW/vm.txt"; mkdir "$RAW/t-ok"
"""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "run.x").write_text("id=x\n")
    r, _ = guest(tmp_path, body, ["t-ok"])
    assert r.returncode == 0, r.stderr
    rel = tmp_path / "outputs" / "6.1.0-99-cloud-amd64"
    assert (rel / "raw" / "t-ok" / "vm.txt").exists()
    assert (tmp_path / "state" / "run.x").read_text() == f"id=x\nout={rel}\n"
    assert f"outputs in {rel}/" in r.stderr


@pytest.mark.parametrize("sig,trap,most", [
    (signal.SIGTERM, "trap 'echo stopped > \"$RAW/../stopped\"; exit 143' TERM", 3.0),
    (signal.SIGHUP, "trap 'echo stopped > \"$RAW/../stopped\"; exit 143' TERM", 3.0),
    (signal.SIGTERM, "trap '' TERM", 9.0)], ids=["vm.sh-stops", "SIGHUP", "vm.sh-deaf"])
def test_sigterm_stops_vm_sh_and_ends_the_job_with_nothing_said(tmp_path, sig, trap, most):
    """run.sh's cleanup sends the job SIGTERM: vm.sh gets SIGTERM (its trap stops QEMU); one that
    does not end is killed after a few seconds; the job ends with 143 and no line of its own."""
    p = guest(tmp_path, f"{trap}\necho up > \"$RAW/../up\"\nwhile :; do sleep 0.05; done",
              ["t-a"], wait=False)
    deadline = time.monotonic() + 30
    while not (tmp_path / "tmp" / "up").exists():
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.02)
    t0 = time.monotonic()
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    took = time.monotonic() - t0
    assert p.returncode == 128 + sig and err == "", err
    assert took < most, took
    if "stopped" in trap:
        assert (tmp_path / "tmp" / "stopped").read_text() == "stopped\n"


def test_a_reason_with_nul_bytes_or_too_long_is_kept_and_cut_as_run_sh_did(tmp_path):
    """A guest unit's status.txt with a NUL byte (dropped, as bash's $(...) dropped it) or a
    reason over 4,096 bytes (cut in the run's end, as run.sh's why_cut cut it; whole in
    status.txt); a status 3 whose "skipped: " is on a later line skips with no reason, as on
    the host; and a value "--" among the options."""
    long_why = "x" * 140000
    body = f"""printf '{VM_TXT}unit.t-nul=1\\nunit.t-long=1\\nunit.t-late=3\\n' > "$RAW/vm.txt"
mkdir "$RAW/t-nul" "$RAW/t-long" "$RAW/t-late"
printf 'failed: a\\0b c\\n' > "$RAW/t-nul/status.txt"
{{ printf 'failed: '; head -c 140000 /dev/zero | tr '\\0' x; echo; }} > "$RAW/t-long/status.txt"
printf 'first\\nskipped: later\\n' > "$RAW/t-late/status.txt"
"""
    r, _ = guest(tmp_path, body, ["t-nul", "t-long", "t-late"], ["--out-set", "--version", "--"])
    out = tmp_path / "out"
    assert r.returncode == 1, r.stderr[-3000:]
    assert (out / "raw" / "t-nul" / "status.txt").read_text() == "failed: ab c (exit 1 in the guest)\n"
    assert (out / "raw" / "t-long" / "status.txt").read_text() == f"failed: {long_why} (exit 1 in the guest)\n"
    assert (out / "raw" / "t-late" / "status.txt").read_text() == "first\nskipped: later\n"
    assert "t-late: skipped: \n" in r.stderr
    assert f"t-long: failed: {long_why[:4088]} [cut at 4096 bytes]" in r.stderr
    for u in ("t-nul", "t-long"):
        assert (out / f"{u}.txt").exists() and (out / f"{u}.json").exists(), u
    assert (out / "raw" / "t-nul" / "tcplab-version.txt").read_text() == "--\n"


@pytest.mark.parametrize("when", ["in-popen", "after-popen"])
def test_sigterm_while_vm_sh_starts_still_asks_it_to_stop(tmp_path, when):
    """A SIGTERM that comes while vm.sh is being started (the Popen, or just after it) asks
    vm.sh to stop, as one that comes later does: SIGTERM, so its trap stops QEMU, not SIGKILL.
    CI saw the job kill a vm.sh that had just started (stop 39)."""
    script = f"""
import os, signal, subprocess, sys, time
sys.path.insert(0, {os.path.join(TOP, "experiments", "runner")!r})
import tcplab_guest as tg
real = subprocess.Popen
up = {str(tmp_path / "up")!r}

def popen(*a, **kw):
    p = real(*a, **kw)
    while not os.path.exists(up):
        time.sleep(0.01)
    if {when!r} == "in-popen":
        os.kill(os.getpid(), signal.SIGTERM)
    return p

subprocess.Popen = popen
child = tg.GuestChild()
p = child.start_vm(["bash", "-c", "trap 'echo stopped > {tmp_path}/stopped; exit 143' TERM; "
                    "echo up > {tmp_path}/up; while :; do sleep 0.05; done"], dict(os.environ))
if {when!r} == "after-popen":
    os.kill(os.getpid(), signal.SIGTERM)
p.wait(timeout=20)
print(child.stopped, p.returncode)
"""
    r = subprocess.run(["/usr/bin/python3", "-S", "-c", script], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "15 143\n", r.stdout
    assert (tmp_path / "stopped").read_text() == "stopped\n"
