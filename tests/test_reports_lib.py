"""experiments/report/tcplab.py, the reports' one helper module: one rule for numbers, raw files read
only when regular and bounded, strict JSON, bounded loops, shared shapes; and the reports'
facts read from raw files, never from a second copy of the collect scripts' constants."""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import threading

import pytest

import lab_proc
import tcplab as t
from conftest import TOP, reference_dirs

OUT = os.path.join(TOP, "outputs")
RAW618 = os.path.join(OUT, "6.18.44-fc-v1045", "raw")
REPORTS = sorted(p for p in glob.glob(os.path.join(TOP, "experiments", "*", "*.py"))
                 if os.path.basename(p) not in ("tcplab.py", "tcplab_diff.py"))


@pytest.mark.parametrize("text,want", [("12", 12), ("-3", -3), ("+7", 7), ("1.5", 1.5),
                                       ("0.000288", 0.000288), ("2e3", 2000.0), (".5", 0.5)])
def test_num_accepts_numbers(text, want):
    got = t.num(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text", ["", "x7", "NaN", "nan", "inf", "-Infinity", "1e400",
                                  "99999999999999999999999", "9223372036854775808", "1_000",
                                  "0x10", "1.5.2", " 1", "1e19"])
def test_num_refuses_what_is_not_a_finite_bounded_number(text):
    with pytest.raises(t.RawError) as e:
        t.num(text, "f.txt: key")
    assert str(e.value).startswith("f.txt: key: ")


def test_num_bounds():
    assert t.num("5", lo=0, hi=5) == 5
    for v in ("-1", "6"):
        with pytest.raises(t.RawError):
            t.num(v, lo=0, hi=5)


def test_fields_name_the_file_and_the_key():
    f = t.Fields("raw/u/client.txt", {"n": "-2", "x": "1.5"})
    with pytest.raises(t.RawError, match=r"raw/u/client.txt: no closed_ns="):
        f.int("closed_ns")
    with pytest.raises(t.RawError, match=r"raw/u/client.txt: n: -2 is outside 0"):
        f.int("n")
    with pytest.raises(t.RawError, match="not an integer"):
        f.int("x")
    assert f.int("absent", default=None) is None


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "machine.txt"
    os.mkfifo(fifo)
    got = {}
    th = threading.Thread(target=_try_read, args=(fifo, got), daemon=True)
    th.start()
    th.join(5)
    assert not th.is_alive(), "reading a FIFO blocked"
    assert "not a regular file" in got["e"]


def _try_read(path, got):
    try:
        t.read_text(str(path))
    except t.RawError as e:
        got["e"] = str(e)


@pytest.mark.parametrize("kind", ["devzero", "directory", "dangling"])
def test_only_regular_files_are_read(tmp_path, kind):
    p = tmp_path / "f.txt"
    if kind == "devzero":
        os.symlink("/dev/zero", p)
    elif kind == "directory":
        p.mkdir()
    else:
        os.symlink(tmp_path / "nowhere", p)
    with pytest.raises(t.RawError, match=str(p)):
        t.read_text(str(p))
    if kind == "dangling":
        assert t.exists(str(p))        # an optional file that is there but broken is refused


def test_cut_line_nul_and_size_are_refused(tmp_path, monkeypatch):
    p = tmp_path / "f.txt"
    p.write_bytes(b"n=1\nok=")
    with pytest.raises(t.RawError, match="cut off"):
        t.read_text(str(p))
    p.write_bytes(b"n=1\0\n")
    with pytest.raises(t.RawError, match="binary"):
        t.read_text(str(p))
    p.write_bytes(b"x" * 100 + b"\n")
    monkeypatch.setattr(t, "MAX_RAW_BYTES", 50)
    with pytest.raises(t.RawError, match="larger than 50 bytes"):
        t.read_text(str(p))
    assert t.read_text(str(tmp_path / "none"), optional=True) is None


def test_strict_json_refuses_non_finite(tmp_path):
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(t.RawError, match=r"JSON \$\.a\[1\]"):
            t.dumps({"a": [1, bad]})
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.txt").write_text("old\n")
    with pytest.raises(t.RawError):
        t.write_outputs(str(out), "r", ["new"], {"x": math.nan})
    assert sorted(os.listdir(out)) == ["r.txt"] and (out / "r.txt").read_text() == "old\n"
    t.write_outputs(str(out), "r", ["new"], {"x": 1.5})
    assert json.loads((out / "r.json").read_text())["schema"] == t.SCHEMA
    assert sorted(os.listdir(out)) == ["r.json", "r.txt"]        # no temporary file left


def test_syn_schedule_is_bounded():
    assert t.expected_syn_schedule(2, 4) == ([1.0, 2.0, 3.0, 4.0, 5.0], 7.0)
    assert t.expected_syn_schedule(6, None)[1] == 127.0
    for syncnt, linear in ((100000000, None), (2, 100000000), (-1, None)):
        with pytest.raises(t.RawError):
            t.expected_syn_schedule(syncnt, linear)


def test_sysctl_values_become_numbers():
    assert t.sysctl_value("6") == 6 and t.sysctl_value("-1") == -1
    assert t.sysctl_value("32768 60999") == [32768, 60999]
    assert t.sysctl_value("cubic reno") == "cubic reno" and t.sysctl_value(None) is None


def test_load_average(tmp_path):
    p = tmp_path / "loadavg.txt"
    p.write_text("1.31 1.60 1.63 5/101 11865\n")
    assert t.load_average(str(p)) == [1.31, 1.6, 1.63]
    assert t.fmt_load(t.load_average(str(p))) == "1.31 1.60 1.63"
    assert t.fmt_load(None) == "?" and t.load_average(str(tmp_path / "no")) is None


def test_header():
    assert t.header("6.1", "2026-11-30T13:15:52Z", "x") == \
        "kernel 6.1; collected 2026-11-30T13:15:52Z; x"
    assert t.header("6.1", "C", tool="strace 6.1") == "kernel 6.1; strace 6.1; collected C"
    assert t.header(None, "C") == "collected C"


@pytest.mark.parametrize("timer,want", [("probe", "persist"), ("persist", "persist"),
                                        ("on", "on"), ("keepalive", "keepalive")])
def test_timer_names_read_as_ss_names(timer, want):
    d = t.Fields("sw.txt", t.kv(f"t_s=1 t_ns=2000000000 event=change state=ESTAB timer={timer} "
                                "expires_ms=200 retrans=0 rq=0 wq=5 local=a peer=b inode=1"))
    assert t.sockwatch_event(d, 1_000_000_000)["timer"] == want
    assert t.socket_row(d)["timer"] == want


def test_netns_helper_lives_with_the_tests():
    assert not hasattr(t, "netns") and callable(lab_proc.netns)


def report(name, raw, out):
    return subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", name, name + ".py"),
                           str(raw), str(out)], capture_output=True, text=True, timeout=10)


def copy_unit(tmp_path, unit, kernel="6.18.44-fc-v1045"):
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(OUT, kernel, "raw", unit), raw / unit)
    return raw, raw / unit


def test_timeout_report_reads_sockwatchs_new_timer_name(tmp_path):
    raw, d = copy_unit(tmp_path, "p01-timeout")
    for f in d.glob("*.txt"):
        f.write_text(f.read_text().replace("timer=on", "timer=persist"))
    r = report("p01-timeout", raw, tmp_path / "out")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    obj = json.loads((tmp_path / "out" / "p01-timeout.json").read_text())
    with open(os.path.join(OUT, "6.18.44-fc-v1045", "p01-timeout.json")) as f:
        was = [e["timer"] for e in json.load(f)["keep"]["events"]]
    assert "on" in was      # (and one sample with no timer: "off" stays "off")
    assert [e["timer"] for e in obj["keep"]["events"]] == \
        ["persist" if t == "on" else t for t in was]


# The tracebacks and hang issue 14 found, each now one line and exit 1.
ISSUE14 = [
    ("p01-connect-time", "accept-client.txt", lambda s: re.sub(r"^n=\d+ ", "", s), "no n= line"),
    ("p01-timeout", "keep-client.txt", lambda s: re.sub(r"closed_ns=\d+\n", "", s),
     "no closed_ns="),
    ("p01-synretry", "client.txt", lambda s: re.sub(r"syncnt=\d+", "syncnt=100000000", s),
     "syncnt: 100000000 is outside"),
    ("p01-machine", "machine.txt", lambda s: "", "no kernel="),
    ("p01-synretry", "sockwatch.txt", lambda s: s[:s.index("end ")], "no `end` line"),
    # sockwatch stopped by SIGTERM 2.5 s into the run: it ends cleanly, but early
    ("p01-synretry", "sockwatch.txt", lambda s: stopped_early(s, 2.5), "before the client did"),
    ("p01-timeout", "keep-sockwatch.txt", lambda s: stopped_early(s, 2.5),
     "before the client did"),
]


def stopped_early(text, after_s):
    """A sockwatch output as if sockwatch had been stopped after_s into its run."""
    lines = text.splitlines()
    t0 = int(t.kv(lines[0])["t_ns"])
    cut = t0 + int(after_s * 1e9)
    kept = [ln for ln in lines[1:] if ln.startswith("t_s=") and int(t.kv(ln)["t_ns"]) < cut]
    return "\n".join([lines[0]] + kept + [f"end t_ns={cut} samples={len(kept)}"]) + "\n"


@pytest.mark.parametrize("name,file,change,message", ISSUE14)
def test_issue14_bad_raw_is_one_line(tmp_path, name, file, change, message):
    raw, d = copy_unit(tmp_path, name)
    (d / file).write_text(change((d / file).read_text()))
    r = report(name, raw, tmp_path / "out")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert file in r.stderr and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_fifo_machine_txt_does_not_hang(tmp_path):
    raw, d = copy_unit(tmp_path, "p01-machine")
    os.unlink(d / "machine.txt")
    os.mkfifo(d / "machine.txt")
    r = report("p01-machine", raw, tmp_path / "out")
    assert r.returncode == 1 and "not a regular file" in r.stderr


COLLECT_PORT = re.compile(r"-p\s+\"?(\d{4,5})\b|PORT=(\d{4,5})\b")


def test_reports_do_not_repeat_collect_script_ports():
    """The ports (and the poll() timeouts) the collect scripts pass to their fixtures appear in
    no report: each report reads them from the listener's ready line or the strace."""
    ports = set()
    for sh in glob.glob(os.path.join(TOP, "experiments", "*", "*.sh")):
        with open(sh) as f:
            for m in COLLECT_PORT.finditer(f.read()):
                ports.add(m.group(1) or m.group(2))
    assert "21013" in ports and "21011" in ports
    for py in REPORTS:
        with open(py) as f:
            src = f.read()
        for p in ports:
            assert not re.search(rf"\b{p}\b", src), f"{os.path.basename(py)} repeats port {p}"
        for lit in ("1500 ms", "2000 ms", "backlog 8", "iterations after 10", "8 active", "512-byte",
                    "TCP_SYNCNT 2\"", "50 us busy", "on CPU 1"):
            assert lit not in src, f"{os.path.basename(py)} repeats {lit!r}"


def test_one_num_rule():
    """No report keeps its own number parser."""
    for py in REPORTS:
        with open(py) as f:
            assert not re.search(r"^def num\(", f.read(), re.M), py


@pytest.mark.parametrize("kernel", reference_dirs())
def test_committed_json_is_strict_with_the_common_keys(kernel):
    for path in glob.glob(os.path.join(OUT, kernel, "*.json")):
        with open(path) as f:
            obj = json.loads(f.read(), parse_constant=lambda c: pytest.fail(f"{path}: {c}"))
        for key in ("experiment", "kernel", "schema", "collected_at", "load_average",
                    "counters", "result", "errno", "elapsed_s"):
            assert key in obj, (path, key)
        assert obj["schema"] == t.SCHEMA
        assert obj["errno"] is None or obj["result"] == "error", path
        sysctls = obj.get("sysctls") or {}
        for k, v in sysctls.items():
            assert v is None or isinstance(v, (int, list)) or " " in v or not v.isdigit(), (k, v)


def test_partial_unit_is_never_reported_as_a_run(tmp_path):
    """A failed unit's raw directory (status.txt, written by run.sh) is not read as a run:
    p01-synretry names its failed default-SYNCNT sub-run; a report whose only unit failed
    refuses with one line."""
    import shutil
    raw = tmp_path / "raw"
    src = os.path.join(TOP, "outputs", "6.18.44-fc-v1045", "raw")
    for u in ("p01-synretry", "p01-synretry-default"):
        shutil.copytree(os.path.join(src, u), raw / u)
    (raw / "p01-synretry-default" / "status.txt").write_text("timed out after 200 s\n")
    out = tmp_path / "out"
    out.mkdir()
    rep = os.path.join(TOP, "experiments", "p01-synretry", "p01-synretry.py")
    r = subprocess.run(["/usr/bin/python3", rep, str(raw), str(out)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    txt = (out / "p01-synretry.txt").read_text()
    assert "system default TCP_SYNCNT: not reported: timed out after 200 s" in txt
    assert json.loads((out / "p01-synretry.json").read_text())["default"] is None
    shutil.rmtree(raw / "p01-synretry-default")
    (raw / "p01-synretry" / "status.txt").write_text("failed: sockwatch exited 143\n")
    shutil.rmtree(out)
    out.mkdir()
    r = subprocess.run(["/usr/bin/python3", rep, str(raw), str(out)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "did not finish (failed: sockwatch exited 143)" in r.stderr
    assert not list(out.iterdir())


SIGNALLED_REPORT = '''import os, sys
sys.path.insert(0, sys.argv[3])
import tcplab as t

def build(rawroot, outdir):
    real = os.replace
    def held(src, dst):
        # the temporary file is written and not yet renamed: the moment a signal can strand it
        print("holding", flush=True)
        sys.stdin.read()
        real(src, dst)
    os.replace = held
    t.atomic_write_all({os.path.join(outdir, "x.txt"): "x\\n", os.path.join(outdir, "x.json"): "{}\\n"})

sys.exit(t.report_main(sys.argv[:3], build))
'''


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"])
def test_a_signalled_report_leaves_no_temporary_file(tmp_path, sig):
    """Each catchable signal, arriving between a report's write and its rename, unwinds it:
    exit 128+N, no temporary file, no traceback.  Before SIGHUP and SIGQUIT had handlers, the
    interpreter died of them and left .x.txt.XXXX.tmp-PID (CI, SIGQUIT to run.sh's group)."""
    import signal
    script = tmp_path / "report.py"
    script.write_text(SIGNALLED_REPORT)
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen(["python3", str(script), str(tmp_path), str(out),
                          os.path.join(TOP, "experiments", "report")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline() == "holding\n"
    assert [n for n in os.listdir(out) if ".tmp-" in n], "no temporary file to strand"
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=10)
    assert p.returncode == 128 + getattr(signal, sig), err
    assert "Traceback" not in err
    assert os.listdir(out) == []
