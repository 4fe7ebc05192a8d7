"""vm.sh's per-unit CPU marks (vm.txt's cpu_s.UNIT), its two functions run alone in bash on
hand-made marks: no guest, no root.  A unit's done line read after QEMU had exited (the console
is followed up to 0.2 s late) lost the unit's cpu_s in CI (7.2, one unit); it is now counted to
QEMU's exit and says so."""
import os
import re
import subprocess

from conftest import TOP

VM_SH = os.path.join(TOP, "experiments", "guest", "vm.sh")


def function(text, name):
    m = re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.S | re.M)
    assert m, name
    return m.group(0)


def marks(tmp_path, marks_before, line, qemu_alive):
    """unit_cpu_lines' output after qemu_cpu_mark LINE, with WORK/unit-cpu holding
    marks_before and '- total 350' appended last, as run_qemu does."""
    with open(VM_SH) as f:
        text = f.read()
    funcs = function(text, "qemu_cpu_mark") + function(text, "unit_cpu_lines")
    (tmp_path / "unit-cpu").write_text(marks_before)
    if qemu_alive:
        pid = os.getpid()                       # a live process whose stat can be read
    else:
        p = subprocess.Popen(["true"])
        p.wait()
        pid = p.pid                             # gone: its /proc/PID/stat cannot be read
    (tmp_path / "qemu.pid").write_text(f"{pid}\n")
    script = funcs + 'qemu_cpu_mark "$1"\necho "- total 350" >>"$WORK/unit-cpu"\nunit_cpu_lines\n'
    r = subprocess.run(["bash", "-c", script, "bash", line], capture_output=True, text=True,
                       env=dict(os.environ, WORK=str(tmp_path)), timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return sorted(r.stdout.split())


def test_a_done_line_after_qemu_exit_counts_to_the_exit(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    out = marks(tmp_path, "p01-synretry start 100\n", "p01-synretry: done rc=0 in 7 s", False)
    assert out == sorted([f"qemu_cpu_s={350 / hz:.2f}", f"cpu_s.p01-synretry={250 / hz:.2f}",
                          "cpu_s_to_exit.p01-synretry=1"])


def test_a_done_line_while_qemu_runs_is_its_own_mark(tmp_path):
    out = marks(tmp_path, "u start 0\n", "u: done rc=0 in 1 s", True)
    assert [x for x in out if x.startswith("cpu_s.u=")]
    assert not [x for x in out if x.startswith("cpu_s_to_exit")]


def test_a_start_line_after_qemu_exit_marks_nothing(tmp_path):
    out = marks(tmp_path, "", "u: start (at most 30 s)", False)
    hz = os.sysconf("SC_CLK_TCK")
    assert out == [f"qemu_cpu_s={350 / hz:.2f}"]
