"""run.sh --kernel all (experiments/guest/tcplab_all.py; docs/kernel-matrix.md "All kernels at once").

Without QEMU: the argument handling (bad combinations: one line, exit 2, nothing written; good
ones: what each child run.sh is given, from TCPLAB_ALL_PLAN=1), and the budget arithmetic on
made-up MemAvailable and peak numbers.  With QEMU (marker qemu, skips like tests/test_kernel*.py
without QEMU, root or a package): a live `--kernel all p01-machine` (five output directories,
the [VER] prefixes, side_by_side in each guest's vm.txt and caveat, nothing left), and a SIGINT
while the guests run (exit 130 at once, nothing left)."""
import glob
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time

import pytest

import tcplab_all
from test_reliability_interrupt import TAG, cmdline, stale_records, tagged_pids

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(TOP, "run.sh")
TAGS = ("host",) + tcplab_all.KERNELS


def run(*args, env=None):
    return subprocess.run([RUN, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


# ---- arguments, without QEMU ------------------------------------------------------------------

@pytest.mark.parametrize("args,says", [
    (["--kernel", "all", "--ktap"], "--ktap with --kernel all"),
    (["--kernel", "ALL"], "want a version like 5.10 or 7.2, or all"),
    (["--kernel", "all", "connect-modes"], "none of connect-modes runs in a guest"),
    (["--kernel", "all", "--all", "p01-machine"], "--all selects the units"),
    (["--kernel", "all", "--mtu", "1400", "p01-machine"], "none of these units runs on the wire"),
    (["--kernel", "all", "--accel", "xen"], "--accel 'xen': want tcg or kvm"),
    (["--kernel", "all", "--list"], "--list takes no other argument"),
    (["--kernel", "all", "no-such-unit"], "unknown experiment 'no-such-unit'"),
], ids=["ktap", "case", "qemu-no-only", "all-and-units", "mtu-no-wire", "accel", "list", "unknown"])
def test_bad_combinations_are_one_line_and_exit_2(tmp_path, args, says):
    out = tmp_path / "out"
    r = run(*args, "--out", str(out), env={"TCPLAB_ALL_PLAN": "1"})
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("run.sh: ") and says in lines[0], r.stderr
    assert not out.exists()


def plan(*args):
    """What each run is given for these arguments: {tag: argv after run.sh}: the run.sh
    arguments each run is planned from (its run is a job of tcplab_all.py's own, "host run as:
    run.sh ...", "guest run as: run.sh ..."; not root, the host's run.sh command line)."""
    r = run(*args, env={"TCPLAB_ALL_PLAN": "1"})
    assert r.returncode == 0, r.stderr
    got = {}
    for line in r.stderr.splitlines():
        m = re.match(r"\[([a-z0-9.]+)\] (?:(?:guest|host) run as: )?(\S+/run\.sh)(.*)$", line)
        if m:
            assert m.group(2) == RUN
            got[m.group(1)] = m.group(3).split()
    assert set(got) == set(TAGS), r.stderr
    return got, r.stderr


def test_accel_goes_to_the_guests_only(tmp_path):
    got, _ = plan("--kernel", "all", "--accel", "kvm", "--quick", "--out", str(tmp_path / "o"))
    assert got["host"] == ["--quick", "--out", str(tmp_path / "o" / os.uname().release)]
    for k in tcplab_all.KERNELS:
        assert got[k] == ["--kernel", k, "--accel", "kvm", "--quick", "--out",
                          str(tmp_path / "o" / "VER")]
    assert not (tmp_path / "o").exists()      # the plan writes nothing


def test_qemu_no_units_run_on_the_host_only():
    got, err = plan("--kernel", "all", "p01-machine", "connect-modes")
    assert got["host"] == ["p01-machine", "connect-modes"]
    for k in tcplab_all.KERNELS:
        assert got[k] == ["--kernel", k, "p01-machine"]
    assert "connect-modes: on the host only (qemu=no" in err


def test_sets_and_wire_mtu_pass_through():
    got, _ = plan("--kernel", "all", "--all", "--mtu", "1400")
    assert got["host"] == ["--all", "--mtu", "1400"]
    assert got["6.1"] == ["--kernel", "6.1", "--all", "--mtu", "1400"]


def test_the_budget_line_is_printed_once():
    _, err = plan("--kernel", "all")
    lines = [ln for ln in err.splitlines() if "memory budget" in ln]
    assert len(lines) == 1
    assert re.search(r"MemAvailable [0-9]+ MiB - reserve [0-9]+ MiB\), one guest's measured peak "
                     r"[0-9]+ MiB, [0-9]+ CPU\(s\): [1-4] guest\(s\) at once of 4", lines[0]), lines


def test_a_kernel_that_cannot_be_had_stops_all_before_any_run(tmp_path):
    """vm.sh --resolve fails for the first kernel (here: a kernel cache it cannot make; without
    QEMU, vm.sh's own skip): one line naming the kernel, vm.sh's status, no run started."""
    cache = tmp_path / "file"
    cache.write_text("")
    out = tmp_path / "out"
    r = run("--kernel", "all", "p01-machine", "--out", str(out),
            env={"TCPLAB_CACHE": str(cache / "cache")})
    assert r.returncode == 4, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("run.sh: ")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("run.sh: [5.10] cannot get the kernel, so no guest is started: vm.sh: skip: ")
    assert not any(ln.startswith("[host]") or ln.startswith("[6.1]") for ln in r.stderr.splitlines())
    assert not out.exists()


# ---- the caveat --------------------------------------------------------------------------------

def test_caveat_says_side_by_side_only_when_vm_txt_does(tmp_path):
    import tcplab
    import tcplab_wire
    vm = "package=linux-image-6.1.0-57-cloud-amd64-unsigned_6.1.192-3_amd64\naccel=tcg\nsmp=1\n"
    (tmp_path / "vm.txt").write_text(vm)
    alone = tcplab.where(str(tmp_path))
    assert alone == ("inside linux-image-6.1.0-57-cloud-amd64-unsigned_6.1.192-3_amd64 under QEMU "
                     "(accel=tcg, 1 CPU), each unit in its own namespace; loopback; timings under "
                     "emulation are slower than on hardware")     # a single --kernel VER run's, as before
    (tmp_path / "vm.txt").write_text(vm + "side_by_side=3\n")
    assert tcplab.where(str(tmp_path)) == alone + (
        "; up to 3 guests ran side by side with the host's own run (--kernel all), sharing its CPUs")
    wire = {"client": {"link": {"mtu": 1500}}}
    assert tcplab_wire.wire_where(str(tmp_path), wire).endswith("; up to 3 guests ran side by side "
                                                                 "with the host's own run (--kernel all), sharing its CPUs")


# ---- the budget arithmetic --------------------------------------------------------------------

GIB = 1024 * 1024


@pytest.mark.parametrize("avail,total,peak,cpus,want_budget,want_n", [
    (24 * GIB, 24 * GIB, 640 * 1024, 2, 24 * GIB - 24 * GIB // 10, 4),   # room: the CPU bound is 4
    (24 * GIB, 24 * GIB, 640 * 1024, 1, 24 * GIB - 24 * GIB // 10, 2),   # one CPU: 2 at once
    (3 * GIB, 4 * GIB, 640 * 1024, 8, 2 * GIB, 3),                      # memory: 2 GiB / 640 MiB
    (2 * GIB, 4 * GIB, 640 * 1024, 8, 1 * GIB, 1),                      # 1 GiB: one guest
    (GIB // 2, 4 * GIB, 640 * 1024, 8, 0, 1),                           # below the reserve: one
    (64 * GIB, 64 * GIB, 640 * 1024, 64, 64 * GIB - 64 * GIB // 10, 4),  # never more than kernels
])
def test_guests_at_once(avail, total, peak, cpus, want_budget, want_n):
    budget, n = tcplab_all.guests_at_once(4, avail, total, peak, cpus)
    assert (budget, n) == (want_budget, want_n)


def test_reserve_is_a_floor_or_a_tenth():
    assert tcplab_all.reserve_kb(4 * GIB) == GIB
    assert tcplab_all.reserve_kb(100 * GIB) == 10 * GIB


def test_guests_at_once_refuses_nonsense():
    with pytest.raises(ValueError):
        tcplab_all.guests_at_once(4, GIB, GIB, 0, 2)
    with pytest.raises(ValueError):
        tcplab_all.guests_at_once(0, GIB, GIB, 1, 2)


def test_meminfo_is_read(tmp_path):
    p = tmp_path / "meminfo"
    p.write_text("MemTotal:       24683548 kB\nMemFree:  1 kB\nMemAvailable:   24300912 kB\n")
    m = tcplab_all.read_meminfo(str(p))
    assert (m["MemTotal"], m["MemAvailable"]) == (24683548, 24300912)
    p.write_text("MemTotal:       24683548 kB\n")
    with pytest.raises(ValueError):
        tcplab_all.read_meminfo(str(p))


def test_worst_status():
    assert tcplab_all.worst([0, 0, 0]) == 0
    assert tcplab_all.worst([0, 4, 0]) == 4
    assert tcplab_all.worst([4, 1, 0]) == 1
    assert tcplab_all.worst([2, 4]) == 2
    assert tcplab_all.worst([0, 130]) == 130


def test_parse_finished():
    line = ("00:57:37 [run] finished in 29 s: 5 unit(s) ran, 1 failed (p01-timeout: failed: x), "
            "2 skipped (a: b; c: d); outputs in /tmp/o/6.1.0-57-cloud-amd64/")
    assert tcplab_all.parse_finished(line) == (5, 1, 2, "/tmp/o/6.1.0-57-cloud-amd64")
    line = "00:57:37 [run] finished in 29 s: 1 unit(s) ran, 0 failed; outputs in outputs/6.18.4/"
    assert tcplab_all.parse_finished(line) == (1, 0, 0, "outputs/6.18.4")
    assert tcplab_all.parse_finished("[run] p01-machine: done in 3 s") is None


# ---- live, with QEMU --------------------------------------------------------------------------

def need_vm():
    import shutil
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (make deps-kernel)")
    if os.geteuid() != 0:
        pytest.skip("needs root: the kernel cache, apt-get download and namespaces")


def netns_names():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in r.stdout.splitlines() if line.startswith("tcplab-")}


def leftovers(out, tag, ns_before):
    """What the run left: tagged processes (QEMU, vm.sh, run.sh, units), namespaces of run.sh
    processes that are gone, temporary and VM work directories, stale run records."""
    found = [f"process {p}: {cmdline(p)[:100]}" for p in tagged_pids(tag)]
    for ns in sorted(netns_names() - ns_before):
        pid = ns.split("-")[1]
        if not os.path.exists(f"/proc/{pid}"):
            found.append(f"namespace {ns}")
    for d in [out] + glob.glob(os.path.join(out, "*")):
        if os.path.isdir(d):
            found += [f"temporary {d}/{n}" for n in os.listdir(d) if ".tmp-" in n]
            found += [f"record {r}" for r in stale_records(d)]
    found += [f"VM work directory {d}"
              for d in glob.glob(os.path.join(out, "**", "tcplab-vm.*"), recursive=True)]
    return found


def wait_clean(out, tag, ns_before, deadline_s=10.0):
    end = time.monotonic() + deadline_s
    while True:
        left = leftovers(out, tag, ns_before)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def start_all(out, tag, *units):
    return subprocess.Popen([RUN, "--kernel", "all", "--out", out, *units],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, **{TAG: tag}), start_new_session=True)


def skip_if_vm_skipped(rc, text):
    if rc == 4:
        pytest.skip("--kernel all skipped: " + text.strip().splitlines()[-1])


@pytest.mark.qemu
@pytest.mark.deep
def test_all_kernels_p01_machine(tmp_path, bindir):
    need_vm()
    out, tag, ns_before = str(tmp_path / "out"), secrets.token_hex(6), netns_names()
    p = start_all(out, tag, "p01-machine")
    text, _ = p.communicate(timeout=900)
    skip_if_vm_skipped(p.returncode, text)
    assert p.returncode == 0, text[-3000:]
    dirs = sorted(os.listdir(out))
    assert len(dirs) == 5, dirs
    assert os.uname().release in dirs
    lines = text.splitlines()
    m = [ln for ln in lines if "memory budget" in ln]
    assert len(m) == 1
    n = int(re.search(r": ([0-9]+) guest\(s\) at once", m[0]).group(1))
    for t in TAGS:
        assert any(ln.startswith(f"[{t}] ") and "[run] finished in" in ln for ln in lines), t
    for t in tcplab_all.KERNELS:
        assert any(ln.startswith(f"[{t}] vm: booting ") for ln in lines), t
    # every line is someone's
    assert all(re.match(r"\[(host|all|5\.10|6\.1|6\.12|7\.2)\] ", ln) for ln in lines), \
        [ln for ln in lines if not re.match(r"\[[a-z0-9.]+\] ", ln)][:5]
    summary = [ln for ln in lines if re.match(r"\[all\] [a-z0-9.]+: \S+: 1 ok, 0 failed, 0 skipped, "
                                              r"[0-9]+ s, exit 0$", ln)]
    assert len(summary) == 5, lines[-8:]
    for d in dirs:
        raw = os.path.join(out, d, "raw", "p01-machine")
        with open(os.path.join(out, d, "p01-machine.json")) as f:
            rep = json.load(f)
        vm = os.path.join(raw, "vm.txt")
        if d == os.uname().release:
            assert not os.path.exists(vm)
            continue
        with open(vm) as f:
            kv = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        assert kv["kernel"] == d and kv["status"] == "ok"
        assert kv["side_by_side"] == str(n)
        with open(os.path.join(out, d, "p01-machine.txt")) as f:
            txt = f.read()
        assert re.search(rf"^booted under QEMU: .* side_by_side={n}( |$)", txt, re.M), txt[-600:]
        assert rep["vm"]["side_by_side"] == str(n)
    assert wait_clean(out, tag, ns_before) == []


@pytest.mark.qemu
@pytest.mark.deep
def test_all_kernels_interrupted(tmp_path, bindir):
    """SIGINT to --kernel all while the guests boot: every child group is stopped at once (exit
    130, not when the guests end), and nothing is left: no QEMU, no namespace, no temporary
    directory, no run record."""
    need_vm()
    out, tag, ns_before = str(tmp_path / "out"), secrets.token_hex(6), netns_names()
    p = start_all(out, tag, "p01-connect-time", "p01-timeout")
    got = []
    try:
        booting = set()
        for line in p.stdout:
            got.append(line)
            m = re.match(r"\[([0-9.]+)\] vm: booting ", line)
            if m:
                booting.add(m.group(1))
            if len(booting) >= 2:
                break
        else:
            p.wait(timeout=60)
            skip_if_vm_skipped(p.returncode, "".join(got))
            pytest.fail("no two guests booted:\n" + "".join(got)[-3000:])
        assert tagged_pids(tag), "nothing running at the signal"
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)       # as a terminal's Ctrl-C: the driver's group
        rest = p.stdout.read()
        p.wait(timeout=120)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, rest[-3000:]
    assert "[all] interrupted (SIGINT): stopping every kernel's run" in rest
    # the units in each guest have 20 s and more to go; the host's children stop in seconds
    assert took < 60, f"took {took:.1f} s to stop:\n{rest[-2000:]}"
    assert wait_clean(out, tag, ns_before) == []


# ---- the guest furthest behind gets the CPU first, without QEMU ------------------------------

def job(done, started):
    j = tcplab_all.Job("k", [])
    j.work_done, j.unit_started = done, started
    return j


def test_furthest_behind_is_the_least_work_done_then_the_latest_start():
    a, b, c = job(500, 10.0), job(400, 3.0), job(400, 8.0)
    assert tcplab_all.furthest_behind([a, b, c]) is c     # equal work: c began its unit later
    assert tcplab_all.furthest_behind([a, b]) is b
    c.work_done = 600
    assert tcplab_all.furthest_behind([a, b, c]) is b


class FakeProc:
    def __init__(self, lines):
        self.stdout = [x.encode() + b"\n" for x in lines]

    def wait(self):
        return 0


def test_work_done_is_the_limits_of_the_units_finished():
    d = tcplab_all.Driver(None)
    j = tcplab_all.Job("7.2", [])
    j.proc = FakeProc(["vm: [5.2 s] p01-machine: start (at most 30 s)",
                       "vm: [5.4 s]   [p01-machine] a unit's own line: done rc=0",
                       "vm: [5.5 s] p01-machine: done rc=0 (4.1 .. 5.3 s)",
                       "vm: [5.5 s] p01-synretry-default: start (at most 200 s)",
                       "vm: [140.1 s] p01-synretry-default: done rc=0 (5.5 .. 140.0 s)",
                       "vm: [140.1 s] poll-scaling: start (at most 300 s)"])
    d.say = lambda tag, line: None
    d._pump(j)
    assert (j.work_done, j.unit_limit) == (230, 300)


def test_progress_is_read_from_the_guests_unit_lines():
    assert tcplab_all.UNIT_DONE.match("vm: [23.0 s] p01-machine: done rc=0 (14.32 .. 15.96 s)")
    assert tcplab_all.UNIT_START.match("vm: [23.1 s] p01-strace: start (at most 60 s)").group(1) \
        == "60"
    # a unit's own progress line that mentions done is not the end of a unit
    assert not tcplab_all.UNIT_DONE.match("vm: [49.3 s]   [p01-synretry] sockwatch: done rc=0")
    assert not tcplab_all.UNIT_DONE.match("vm: [30.1 s]   [p06-time-wait] x: done rc=1")


THREADED = ("import threading, time; ts = [threading.Thread(target=time.sleep, args=(60,)) "
            "for _ in range(2)]; [t.start() for t in ts]; print('ready', flush=True); "
            "[t.join() for t in ts]")


def nices(root):
    """{tid: nice} of every thread in root's tree (/proc/TID/stat field 19)."""
    out = {}
    for pid in tcplab_all.process_tree(root):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                st = f.read()
            out[int(tid)] = int(st[st.rindex(")") + 2:].split()[16])
    return out


def tree():
    """A session like a child run: sh, below it a python with two threads more."""
    p = subprocess.Popen(["sh", "-c", '"$0" -c "$1" & wait', "/usr/bin/python3",
                          THREADED], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline() == "ready\n"
    return p


def test_renice_reaches_every_thread_of_the_tree_and_back():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    p = tree()
    try:
        before = nices(p.pid)
        assert len(before) >= 4 and set(before.values()) == {base}, before   # sh, python, 2 threads
        assert tcplab_all.renice_tree(p.pid, base + 3) == len(before)
        assert set(nices(p.pid).values()) == {base + 3}
        if os.geteuid() == 0:       # back to a lower value needs CAP_SYS_NICE
            tcplab_all.renice_tree(p.pid, base)
            assert set(nices(p.pid).values()) == {base}
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_balance_makes_the_ones_ahead_yield_and_one_alone_runs_as_it_started():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    d = tcplab_all.Driver(None)
    trees = [tree(), tree()]
    try:
        ahead, behind = job(700, 1.0), job(300, 2.0)
        for j, p in zip((ahead, behind), trees):
            j.proc = p
        assert d.balance([ahead, behind]) is behind
        assert set(nices(trees[0].pid).values()) == {base + tcplab_all.BEHIND_NICE}
        assert set(nices(trees[1].pid).values()) == {base}
        behind.work_done = 900      # it overtook: the roles swap
        if os.geteuid() == 0:
            assert d.balance([ahead, behind]) is ahead
            assert set(nices(trees[0].pid).values()) == {base}
            assert set(nices(trees[1].pid).values()) == {base + tcplab_all.BEHIND_NICE}
            behind.rc = 0           # the other one ended: no one yields any more
            assert d.balance([ahead, behind]) is None
            assert set(nices(trees[0].pid).values()) == {base}
    finally:
        for p in trees:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()




def ends_once(job, d, ctx, out):
    """JOB's run locked and recorded until its end, then cleaned up once: nothing left."""
    rec = job.run.record
    assert os.path.isfile(rec) and os.path.isdir(job.run.tmp)
    job.rc = 0
    job.end(d, ctx)
    job.end(d, ctx)                                  # once
    assert not os.path.exists(rec) and os.listdir(out) == []


def test_a_guest_run_is_given_what_run_sh_gave_it(tmp_path):
    """A guest's run is planned and started by the driver itself (step 6 of the runner): its
    job, tcplab_guest.py, gets the arguments `run.sh --kernel VER` gave it, the knobs given
    through their older env variable among them (--knob: the guest's knobs.txt; a review found
    them missing), its run is locked, recorded and cleaned up once, and the lines run.sh said
    are said.  No QEMU: the job is not started."""
    import argparse
    import tcplab_units
    exp = os.path.join(TOP, "experiments")
    o = argparse.Namespace(prog="run.sh", top=TOP, exp=exp, outputs=str(tmp_path / "outputs"),
                           version="v-test", allow_foreign_out=False)
    ctx = tcplab_all.Context(o, tcplab_units.load(exp))
    said = []

    class D:
        stopping = False

        def say(self, tag, line):
            said.append(f"[{tag}] {line}")

    state, out = tmp_path / "state", tmp_path / "out" / "REL"
    env = dict(os.environ, TL_CONNECTS="50", TCPLAB_STATE=str(state), TCPLAB_ROTATE="1/4")
    g = tcplab_all.GuestJob("6.1", ["--kernel", "6.1", "--out", str(out), "p01-connect-time",
                                    "p01-machine"], env, "REL", str(out))
    argv = g.begin(D(), ctx)
    at = argv.index("--knob")
    assert argv[at:at + 4] == ["--knob", "p01-connect-time", "connects", "50"]
    assert argv.count("--knob") == 1
    assert argv[-4:] == ["--", "6.1", "p01-connect-time", "p01-machine"]
    assert "--out-set" in argv and argv[argv.index("--out") + 1] == str(out)
    order = [argv[i + 1] for i, a in enumerate(argv) if a == "--order"]
    assert sorted(order) == ["p01-connect-time", "p01-machine"]      # the plan's VM_ORDER
    assert g.env["TL_RUN_ID"] == g.run.run_id and "TL_UNIT_KNOBS_P01_CONNECT_TIME" in g.env
    assert any(re.fullmatch(r"\[6\.1\] \d\d:\d\d:\d\d \[run\] running p01-connect-time "
                            r"p01-machine in Debian kernel 6\.1 \(tcg\)", s) for s in said), said
    ends_once(g, D(), ctx, out)


# A host's run under --kernel all, as root, is a job of the driver too (step 7 of the runner):
# units of a table of the test's own, one for each way a unit runs (a knob, a second namespace,
# the wire, alone); each one's collect script copies its job's command line (its parent's: ip
# netns exec and env exec what follows them) where the test reads it.
HOST_UNITS = """\
# knob: h-one: depth: 3: 1..9: env TL_TEST_HDEPTH: how deep
h-one    -  named run no  1 30 no 1         no
h-two    -  named run no  1 30 no 2         no
h-wire   -  named run no  1 30 no wire:1400 no
h-alone  -  named run yes 1 30 no 1         no
"""
ARGV_SH = 'tr "\\000" "\\n" < /proc/$PPID/cmdline > "$TL_TEST_ARGV/${1##*/}"\n'
RUN_SPECIFIC = ("--t0", "--out", "--tmp", "--state", "--record", "--reserve", "--ns-name",
                "--version")


def job_options(argv):
    """A job's command line after its program, as {option: [its values, in order]}; the values
    that differ from run to run (its time, directories, record, pid) left out, and --unit (the
    whole table's, in whatever order bash keeps them) as a set."""
    sys.path.insert(0, os.path.join(TOP, "experiments", "runner"))
    import tcplab_host
    i, got = 0, {}
    while argv[i] != "--":
        n = tcplab_host.HostRun.ARITY[argv[i]]
        got.setdefault(argv[i], []).append(tuple(argv[i + 1:i + 1 + n]))
        i += 1 + n
    got["--"] = argv[i + 1:]
    got["--unit"] = set(got["--unit"])
    for opt in RUN_SPECIFIC:
        assert opt in got, opt
        got[opt] = len(got[opt])
    return got


@pytest.mark.netns
def test_the_hosts_run_is_given_what_run_sh_gave_it(tmp_path, bindir):
    """HostJob, the host's run under --kernel all as root, gives its job (tcplab_host.py) the
    options run.sh gives it for the same arguments: every unit's columns, the plan, --quick, the
    wire and its MTU, a second namespace, alone, each knob's value, and a knob given through its
    older env variable; and its run is locked, recorded and cleaned up once."""
    if os.geteuid() != 0:
        pytest.skip("needs root: run.sh's own host run, in network namespaces")
    import argparse
    import shutil
    import tcplab_units
    exp = tmp_path / "exp"
    shutil.copytree(os.path.join(TOP, "experiments"), exp,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(exp / "units", "a") as f:
        f.write(HOST_UNITS)
    units = ["h-one", "h-two", "h-wire", "h-alone"]
    for u in units:
        (exp / u).mkdir()
        (exp / u / f"{u}.sh").write_text(ARGV_SH)
    (tmp_path / "argv").mkdir()
    env = dict(os.environ, TCPLAB_EXPERIMENTS=str(exp), TL_TEST_HDEPTH="5",
               TL_TEST_ARGV=str(tmp_path / "argv"), TCPLAB_STATE=str(tmp_path / "state"))
    r = subprocess.run([RUN, "--quick", "--out", str(tmp_path / "o1"), *units],
                       capture_output=True, text=True, timeout=120, env=env)
    assert "finished in" in r.stderr, r.stderr
    seen = {}
    for u in units:
        argv = (tmp_path / "argv" / u).read_text().splitlines()
        job = os.path.join(TOP, "experiments", "runner", "tcplab_host.py")
        seen[u] = argv[argv.index(job) + 1:]
    assert all(a == seen[units[0]] for a in seen.values())     # one job ran them all
    want = job_options(seen[units[0]])
    assert want["--knob"] == [("h-one", "depth", "5")] and ("h-wire", "1400") in want["--wire"]

    o = argparse.Namespace(prog="run.sh", top=TOP, exp=str(exp), outputs=str(tmp_path / "outputs"),
                           version="v-test", allow_foreign_out=False, bin=bindir)
    ctx = tcplab_all.Context(o, tcplab_units.load(str(exp)))
    said = []

    class D:
        stopping = False

        def say(self, tag, line):
            said.append(f"[{tag}] {line}")

    out = tmp_path / "o2" / "REL"
    h = tcplab_all.HostJob("host", ["--quick", "--out", str(out), *units], env, "REL", str(out))
    argv = h.begin(D(), ctx)
    assert argv[:2] == ["env", "--ignore-signal=INT,QUIT"]
    got = job_options(argv[argv.index(tcplab_all.HOST_JOB) + 1:])
    assert got == want
    assert h.env["TL_RUN_ID"] == h.run.run_id and h.env["TL_QUICK"] == "1"
    assert any(re.fullmatch(r"\[host\] \d\d:\d\d:\d\d \[run\] running h-one h-two h-wire "
                            r"h-alone", s) for s in said), said
    ends_once(h, D(), ctx, out)
