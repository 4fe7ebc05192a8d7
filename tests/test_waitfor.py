"""probes/waitfor, the collect scripts' waits (experiments/lib/collect.sh's tl_wait_count and
tl_wait_exit): its four exit statuses, lines that come while it waits, a last line with no
newline yet (counted as grep counts it), the lines a process wrote just before it ended, bad
usage as one line; the bound held whatever FILE is (a FIFO with no writer or a silent one, a
file that never ends), and a file truncated or replaced by a rename followed as tail -F does."""
import os
import signal
import subprocess
import sys
import time

import pytest

from lab_proc import reaped


def waitfor(bindir, *args, timeout=30):
    return subprocess.run([os.path.join(bindir, "waitfor"), *args], capture_output=True,
                          text=True, timeout=timeout)


def timed(bindir, *args):
    """waitfor's result and how long it took, in seconds.  The bounds asserted on this are
    generous (the machine is shared); a hang is cut at 10 s by subprocess.run."""
    t0 = time.monotonic()
    r = waitfor(bindir, *args, timeout=10)
    return r, time.monotonic() - t0


def has_read(proc, path, size, within=10):
    """Poll until PROC has PATH open (the file the path names now, not a deleted one) with its
    file offset at SIZE or beyond: it has read that far."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        assert proc.poll() is None, ("waitfor ended early", proc.returncode)
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
        except FileNotFoundError:
            fds = []
        for fd in fds:
            try:
                if os.readlink(f"/proc/{proc.pid}/fd/{fd}") != str(path):
                    continue
                with open(f"/proc/{proc.pid}/fdinfo/{fd}") as info:
                    pos = int(info.readline().split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
            if pos >= size:
                return
        time.sleep(0.002)
    raise AssertionError(f"waitfor never read {size} bytes of {path} (as it is now)")


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
    script = [(0.2, "noise\n"), (0.2, "ready a=1\n"), (0.2, "ready a=2\n"), (5, "")]
    with reaped(writer(f, script)) as p:
        r = waitfor(bindir, "-p", str(p.pid), "-f", str(f), "-e", "^ready ", "-n", "2",
                    "-t", "20000")
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
        assert p.poll() is None        # it was the lines, not the writer's end


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
    with reaped(subprocess.Popen(["sleep", "30"])) as p:
        r = waitfor(bindir, "-p", str(p.pid), "-t", "100")
        assert r.returncode == 3 and r.stderr == "", r
        assert p.poll() is None


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


@pytest.mark.parametrize("timeout_ms", ["1000", "0"])
def test_a_fifo_with_no_writer_keeps_the_bound(tmp_path, bindir, timeout_ms):
    """open(2) of a FIFO waits for a writer unless O_NONBLOCK: the bound must hold anyway."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r, took = timed(bindir, "-f", str(fifo), "-e", "^ready ", "-t", timeout_ms)
    assert r.returncode == 3 and r.stderr == "", r
    assert took < 3, took


def test_a_fifo_with_a_silent_writer_keeps_the_bound_then_its_line_is_seen(tmp_path, bindir):
    """A writer that holds the FIFO open and writes nothing: read(2) must not wait for data.
    What it writes later is read like a file's lines."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)          # a writer (and reader) that never blocks opening
    try:
        r, took = timed(bindir, "-f", str(fifo), "-e", "^ready ", "-t", "1000")
        assert r.returncode == 3 and r.stderr == "", r
        assert took < 3, took
        os.write(fd, b"noise\nready x\n")
        r, took = timed(bindir, "-f", str(fifo), "-e", "^ready ", "-t", "5000")
        assert r.returncode == 0 and r.stderr == "", r
    finally:
        os.close(fd)


@pytest.mark.parametrize("source", ["urandom", "fifo_fed_by_yes"])
def test_a_file_that_never_ends_keeps_the_bound(tmp_path, bindir, source):
    """/dev/urandom, or a FIFO that yes(1) fills faster than waitfor reads: no end of file to
    stop at, so the deadline must be looked at between reads."""
    feeder = None
    path = "/dev/urandom"
    if source == "fifo_fed_by_yes":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
        feeder = subprocess.Popen(["sh", "-c", 'exec yes noise > "$1"', "sh", path],
                                  stderr=subprocess.DEVNULL)
    try:
        r, took = timed(bindir, "-f", path, "-e", "^ready [0-9]+ now$", "-t", "500")
        assert r.returncode == 3 and r.stderr == "", r
        assert took < 2.5, took
    finally:
        if feeder is not None:
            feeder.kill()
            feeder.wait()


def start(bindir, *args):
    return subprocess.Popen([os.path.join(bindir, "waitfor"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_truncated_file_is_read_again_from_its_start(tmp_path, bindir):
    f = tmp_path / "out.txt"
    f.write_text("noise\n" * 100)
    with reaped(start(bindir, "-f", str(f), "-e", "^ready ", "-t", "8000")) as p:
        has_read(p, f, 600)
        with open(f, "w") as w:            # O_TRUNC, then the line: shorter than what was read
            w.write("ready x\n")
        out, err = p.communicate(timeout=10)
        assert p.returncode == 0 and err == "", (p.returncode, err)


def test_a_file_replaced_by_a_rename_is_followed(tmp_path, bindir):
    f = tmp_path / "out.txt"
    f.write_text("noise\n")
    with reaped(start(bindir, "-f", str(f), "-e", "^ready ", "-t", "8000")) as p:
        has_read(p, f, 6)
        new = tmp_path / "out.txt.new"
        new.write_text("noise\nready x\n")
        os.replace(new, f)
        out, err = p.communicate(timeout=10)
        assert p.returncode == 0 and err == "", (p.returncode, err)


def test_the_count_is_of_the_file_the_path_names_now(tmp_path, bindir):
    """A status file rewritten whole and renamed into place holds one ready line each time:
    with -n 2, two of them in turn are not two lines in FILE.  waitfor switches to the new
    file (seen through its fd) and, the process ended, says 1."""
    f = tmp_path / "status.txt"
    f.write_text("ready 1\n")
    sleeper = subprocess.Popen(["sleep", "60"])
    with reaped(sleeper, start(bindir, "-p", str(sleeper.pid), "-f", str(f), "-e", "^ready ",
                               "-n", "2", "-t", "20000")) as (sleeper, p):
        has_read(p, f, 8)
        new = tmp_path / "status.txt.new"
        new.write_text("ready 1\n")
        os.replace(new, f)
        has_read(p, f, 8)                  # the new file, read: the old one is "(deleted)"
        sleeper.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=10)
        assert p.returncode == 1 and err == "", (p.returncode, err)
