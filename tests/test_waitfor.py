"""probes/waitfor, the collect scripts' waits (experiments/lib/collect.sh's tl_wait_count and
tl_wait_exit): its four exit statuses, lines that come while it waits, a last line with no
newline yet (counted as grep counts it), the lines a process wrote just before it ended, and
bad usage as one line."""
import os
import subprocess
import sys
import time


def waitfor(bindir, *args, timeout=30):
    return subprocess.run([os.path.join(bindir, "waitfor"), *args], capture_output=True,
                          text=True, timeout=timeout)


def writer(path, script):
    """A process that writes PATH as SCRIPT says (a list of (delay_s, text)), then exits.  The
    delays only space the writes out: the assertions never depend on them."""
    code = ("import sys, time\n"
            "f = open(sys.argv[1], 'a')\n"
            f"for d, t in {script!r}:\n"
            "    time.sleep(d); f.write(t); f.flush()\n")
    return subprocess.Popen([sys.executable, "-c", code, str(path)])


def test_lines_that_come_while_it_waits(tmp_path, bindir):
    f = tmp_path / "out.txt"
    p = writer(f, [(0.2, "noise\n"), (0.2, "ready a=1\n"), (0.2, "ready a=2\n"), (5, "")])
    try:
        r = waitfor(bindir, "-p", str(p.pid), "-f", str(f), "-e", "^ready ", "-n", "2",
                    "-t", "20000")
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
        assert p.poll() is None        # it was the lines, not the writer's end
    finally:
        p.kill()
        p.wait()


def test_a_last_line_without_a_newline_counts(tmp_path, bindir):
    f = tmp_path / "out.txt"
    f.write_text("a ok\nb ok")
    assert waitfor(bindir, "-f", str(f), "-e", " ok$", "-n", "2", "-t", "0").returncode == 0
    assert waitfor(bindir, "-f", str(f), "-e", " ok$", "-n", "3", "-t", "0").returncode == 3


def test_a_file_not_there_yet_is_no_match(tmp_path, bindir):
    r = waitfor(bindir, "-f", str(tmp_path / "none.txt"), "-e", "x", "-t", "50")
    assert r.returncode == 3 and r.stderr == "", r


def test_lines_written_just_before_the_end_are_seen(tmp_path, bindir):
    """The process wrote its lines and ended before waitfor looked: a done wait (0)."""
    f = tmp_path / "out.txt"
    p = writer(f, [(0, "ready x\n")])
    p.wait()                       # ended and reaped: its pid is gone
    r = waitfor(bindir, "-p", str(p.pid), "-f", str(f), "-e", "^ready ", "-t", "5000")
    assert r.returncode == 0, r


def test_an_end_without_the_lines_is_1(tmp_path, bindir):
    f = tmp_path / "out.txt"
    p = writer(f, [(0.3, "ready x\n")])
    r = waitfor(bindir, "-p", str(p.pid), "-f", str(f), "-e", "^ready ", "-n", "2",
                "-t", "20000")
    p.wait()
    assert r.returncode == 1 and r.stderr == "", r


def test_a_process_end_is_seen_not_timed_out(tmp_path, bindir):
    p = subprocess.Popen(["sleep", "0.3"])
    try:
        r = waitfor(bindir, "-p", str(p.pid), "-t", "20000")
        assert r.returncode == 0 and r.stderr == "", r
        assert p.poll() is not None
    finally:
        p.wait()


def test_a_zombie_has_ended(bindir):
    """collect.sh's children are zombies until the shell waits for them: ended, as tl_running
    says."""
    p = subprocess.Popen(["true"])
    for _ in range(2000):
        with open(f"/proc/{p.pid}/stat") as s:
            if s.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.005)
    else:
        raise AssertionError("true never became a zombie")
    r = waitfor(bindir, "-p", str(p.pid), "-t", "20000")
    p.wait()
    assert r.returncode == 0, r


def test_a_running_process_times_out(bindir):
    p = subprocess.Popen(["sleep", "30"])
    try:
        r = waitfor(bindir, "-p", str(p.pid), "-t", "100")
        assert r.returncode == 3 and r.stderr == "", r
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_bad_usage_is_one_line(tmp_path, bindir):
    cases = [
        ((), "nothing to wait for"),
        (("-t", "10", "-e", "x"), "-f and -e go together"),
        (("-t", "10ms", "-p", "1"), "-t '10ms'"),
        (("-t", "10", "-f", str(tmp_path / "f"), "-e", "(x"), "-e '(x'"),
        (("-t", "10", "-p", "1", "-i", "0"), "-i '0'"),
        (("-t", "10", "-p", "1", "extra"), "unexpected argument 'extra'"),
    ]
    for args, want in cases:
        r = waitfor(bindir, *args)
        assert r.returncode == 2 and r.stdout == "", (args, r)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("waitfor: ") and want in lines[0], \
            (args, r.stderr)
