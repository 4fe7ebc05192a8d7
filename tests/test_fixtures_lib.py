"""The fixture library's pure functions, compiled from fixtures/lib/ with tests/c/fxlib_check.c:
which accept() errors are transient, how -m lists and peer's -s steps parse, and the
nearest-rank percentile."""
import os
import shutil
import subprocess

import pytest

from conftest import TOP

SOURCES = ["tests/c/fxlib_check.c", "fixtures/lib/fx_sock.c", "fixtures/lib/fx_names.c",
           "fixtures/lib/fx_stats.c", "fixtures/lib/fx_steps.c", "common/tl_util.c"]
# docs/fixtures.md, "Accept errors": the set and why.
TRANSIENT = ["EINTR", "EAGAIN", "ENONET", "EPROTO", "EOPNOTSUPP", "ENOPROTOOPT", "ENETDOWN",
             "ENETUNREACH", "ECONNABORTED", "EHOSTDOWN", "EHOSTUNREACH"]
LISTS = ["pending", "wake,pending", "pending,", ",wake", "pending,,wake", "", ",",
         "pending,pending", "later", "pending,Wake"]
# peer -s: the argument, and what must come back: the steps printed, or the error's why.
STEPS = {
    "close": "close",
    "send:100,shutdown-wr,drain,close": "send:100 shutdown-wr drain close",
    "recv:1048576,inq,wait:hup,wait:in,shutdown-rd,hold": "recv:1048576 inq wait:hup wait:in shutdown-rd hold",
    "linger:0,linger2:-1,linger2:86400,linger:65535": "linger:0 linger2:-1 linger2:86400 linger:65535",
    "send:1073741824": "send:1073741824",
    "user-timeout:0,user-timeout:2147483647": "user-timeout:0 user-timeout:2147483647",
    "user-timeout:-1": "why='out of range'", "user-timeout:2147483648": "why='out of range'",
    "user-timeout": "why='needs a number (name:N)'", "user-timeout:1s": "why='not a number'",
    "send:007": "send:7",
    "": "why='empty step'", ",close": "why='empty step'", "close,": "why='empty step'",
    "send:1,,close": "why='empty step'",
    "close,close": "why='after close (close must be the last step)'",
    "send": "why='needs a number (name:N)'", "send:": "why='needs a number (name:N)'",
    "linger2": "why='needs a number (name:N)'",
    "send:0": "why='out of range'", "send:1073741825": "why='out of range'",
    "recv:1048577": "why='out of range'", "linger:-1": "why='out of range'",
    "linger2:-2": "why='out of range'", "linger:99999999999999999999": "why='out of range'",
    "send:1x": "why='not a number'", "send:+1": "why='not a number'",
    "send:0x10": "why='not a number'", "send:1 ": "why='not a number'",
    "wait": "why='unknown step'", "wait:out": "why='unknown step'",
    "drain:5": "why='unknown step'", "Close": "why='unknown step'",
    "sendx:1": "why='unknown step'", "linger3:1": "why='unknown step'",
    ",".join(["inq"] * 33): "why='too many steps'",
    ",".join(["inq"] * 32): " ".join(["inq"] * 32),
}


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = str(tmp_path_factory.mktemp("fxlib") / "fxlib_check")
    flags = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g", "-O1",
             "-Icommon", "-Ifixtures/lib"]
    if os.environ.get("TCPLAB_BUILD", "build") != "build":    # make sanitize
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    r = subprocess.run([cc] + flags + ["-o", exe] + SOURCES, cwd=TOP, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe] + LISTS + ["steps=" + k for k in STEPS], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.splitlines()


def test_transient_accept_errors(check):
    got = check[0].split("=", 1)[1].split(",")
    assert sorted(got) == sorted(TRANSIENT)
    # the one that listener.c's copy lacked, and errors that must stop a loop
    assert "EINTR" in got
    for fatal in ("EBADF", "EINVAL", "ENOTSOCK", "EMFILE", "ENFILE", "ENOBUFS", "ENOMEM",
                  "EPERM", "EFAULT"):
        assert fatal not in got


def test_list_parser(check):
    lines = {line.split("'")[1]: line for line in check if line.startswith("list ")}
    assert lines["pending"].endswith("n=1 err=0 bad='' pending")
    assert lines["wake,pending"].endswith("n=2 err=0 bad='' wake pending")    # order kept
    for empty in ["pending,", ",wake", "pending,,wake", "", ","]:
        assert "n=-1 err=EINVAL bad=''" in lines[empty], lines[empty]
    assert "n=-1 err=EEXIST bad='pending'" in lines["pending,pending"]
    assert "n=-1 err=EINVAL bad='later'" in lines["later"]
    assert "n=-1 err=EINVAL bad='Wake'" in lines["pending,Wake"]


def test_percentile_is_nearest_rank(check):
    facts = dict(line.split("=", 1) for line in check if line.startswith("rank_mismatch"))
    assert facts["rank_mismatch"] == "0"
    pct = {line.rsplit(" value=", 1)[0]: int(line.rsplit("=", 1)[1])
           for line in check if line.startswith("pct ")}
    assert pct["pct n=300 p=95"] == 285
    assert pct["pct n=1000 p=99.9"] == 999
    assert pct["pct n=7 p=50"] == 4


def test_steps_parser(check):
    got = {line.split("'")[1]: line for line in check if line.startswith("steps ")}
    assert len(got) == len(STEPS)
    for arg, want in STEPS.items():
        line = got[arg]
        if want.startswith("why="):
            assert " n=-1 " in line and line.endswith(want), line
            err = "E2BIG" if "too many" in want else "EINVAL"
            assert f" err={err} " in line, line
        else:
            assert f"n={len(want.split())} err=0 " in line and line.endswith(" " + want), line
    # the offending item is named: the second one here, not the whole list
    assert "bad='sendx:1'" in got["sendx:1"]
    assert "bad='close'" in got["close,close"]
    assert "bad=''" in got["send:1,,close"]
