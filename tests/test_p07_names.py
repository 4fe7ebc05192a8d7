"""p07-names (unit p07-localhost): "localhost" against a server bound to 127.0.0.1 only, the
namespace's own /etc/hosts naming 127.0.0.1 and ::1.  The same facts are asserted on the
committed reference (the report replayed on outputs/RELEASE/raw/, no root) and on a live run
(./run.sh --out TMP p07-localhost, root and namespaces): without gai.conf getaddrinfo() answers
::1 then 127.0.0.1, the connect() to ::1 gets one RST and ECONNREFUSED, then 127.0.0.1
connects; with gai.conf's ::ffff:0:0/96 at 100 the order is reversed and there is one attempt,
no RST; getent ahosts agrees; nothing is left in /etc/netns.  Then resolve_connect's bad input
(a name that does not resolve: one line, exit 2) and the report on bad raw input."""
import os
import subprocess

import pytest

from conftest import TOP
from unit_replay import Report, missing, replace, PY

NAME = "p07-names"
UNIT = "p07-localhost"
DNS_UNIT = "p07-dns-dead-first"
R = Report(NAME)
R.name = NAME


def check_default(j):
    p = j["parts"]["default"]
    assert [a["addr"] for a in p["answers"]] == ["::1", "127.0.0.1"]
    assert p["getent"] == ["::1", "127.0.0.1"]
    a1, a2 = p["attempts"]
    assert (a1["family"], a1["addr"], a1["ret"], a1["errno"]) == ("inet6", "::1", -1,
                                                                   "ECONNREFUSED")
    assert (a2["family"], a2["addr"], a2["ret"], a2["errno"]) == ("inet", "127.0.0.1", 0, "none")
    # on the wire: a SYN to [::1] answered RST+ACK, a SYN to 127.0.0.1 answered SYN-ACK
    assert (a1["wire"]["syn_flags"], a1["wire"]["reply_flags"]) == ("S", "RA")
    assert (a2["wire"]["syn_flags"], a2["wire"]["reply_flags"]) == ("S", "SA")
    assert p["rsts"] == 1 and p["failed_attempts"] == 1 and p["connected"] == "127.0.0.1"
    c = p["counters"]
    assert (c["TcpActiveOpens"], c["TcpAttemptFails"], c["TcpOutRsts"]) == (2, 1, 1)
    assert c["TcpPassiveOpens"] == 1 and c["TcpEstabResets"] == 0
    # the refused attempt came first and is part of the time to the connection
    assert a1["t_ns"] <= a2["start_ns"]
    assert p["to_connected_us"] >= p["failed_us"] > 0
    assert "disagree" not in p


def check_gaiconf(j):
    p = j["parts"]["gaiconf"]
    assert "precedence ::ffff:0:0/96 100" in p["gai_conf"]
    assert [a["addr"] for a in p["answers"]] == ["127.0.0.1", "::1"]
    assert p["getent"] == ["127.0.0.1", "::1"]
    assert [(a["addr"], a["ret"]) for a in p["attempts"]] == [("127.0.0.1", 0)]
    assert p["rsts"] == 0 and p["failed_attempts"] == 0
    c = p["counters"]
    assert (c["TcpActiveOpens"], c["TcpAttemptFails"], c["TcpOutRsts"]) == (1, 0, 0)


def check_dns(j):
    """p07-dns-dead-first: the dead nameserver's queries unanswered, the wait before the next
    server is resolv.conf's timeout (glibc's send_dg(): retrans << ns, ns 0 for the first server,
    1 s = timeout:1), then dnsmasq's answer, and the client connects to it."""
    d = j["dns"]
    budget_ms = d["timeout_s"] * 1000
    assert d["attempts_opt"] == 1
    assert [a["addr"] for a in d["answers"]] == [d["live"]] and d["getent"] == [d["live"]]
    assert d["queries_to_dead"] >= 1 and d["queries_to_live"] >= 1 and d["answers_from_live"] >= 1
    assert not any(x["src"] == d["dead"] for x in d["packets"])      # the dead one never answers
    # the wait: the timeout, plus the poll()'s wake-up and a scheduling slack (2 cores, shared)
    assert budget_ms <= d["dead_wait_ms"] <= budget_ms + 250, d["dead_wait_ms"]
    assert d["resolve_us"] / 1000 >= d["dead_wait_ms"]
    assert [(a["addr"], a["ret"]) for a in d["attempts"]] == [(d["live"], 0)]
    assert d["counters"]["TcpActiveOpens"] == 1 and d["counters"]["TcpAttemptFails"] == 0


def check_all(out, dns=True):
    j = R.load(out)
    check_default(j)
    check_gaiconf(j)
    assert j["unit"] == UNIT
    if dns:
        check_dns(j)
    return j


@pytest.fixture(scope="module")
def ref_out(tmp_path_factory):
    out = tmp_path_factory.mktemp(NAME + "-ref")
    r = R.run(os.path.join(R.ref, "raw"), out)
    assert r.returncode == 0, r.stderr
    return str(out)


def test_reference_facts(ref_out):
    check_all(ref_out)


def test_reference_report_is_the_committed_one(ref_out):
    R.assert_committed(ref_out)


def _refused(tmp_path, edit, word):
    import shutil
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(R.ref, "raw", UNIT), root / UNIT)
    edit(root / UNIT)
    out = tmp_path / "out"
    out.mkdir()
    r = R.run(str(root), out)
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not os.listdir(out)


@pytest.mark.parametrize("edit,word", [
    missing("default-client.txt"),
    missing("gaiconf-getent.txt"),
    (replace("default-client.txt", "result=connected", "reslt=connected"), "result= line"),
    (replace("default-client.txt", "family=inet6", "family=ipx"), "family=ipx"),
    (replace("default-getent.txt", "STREAM", "STRAEM"), "no STREAM line"),
    (replace("default-capture.txt", "end t_ns", "nd t_ns"), "no `end` line"),
])
def test_report_refuses_bad_raw(tmp_path, edit, word):
    _refused(tmp_path, edit, word)


def test_report_says_disagree_when_getent_differs(tmp_path):
    import shutil
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(R.ref, "raw", UNIT), root / UNIT)
    g = root / UNIT / "default-getent.txt"
    lines = g.read_text().splitlines(True)
    g.write_text("".join(lines[3:] + lines[:3]))      # 127.0.0.1's lines first
    out = tmp_path / "out"
    r = R.run(str(root), out)
    assert r.returncode == 0, r.stderr
    txt = (out / (NAME + ".txt")).read_text()
    assert sum(1 for x in txt.splitlines() if x.startswith("DISAGREE: ")) == 1


def test_report_usage():
    r = subprocess.run([PY, R.path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.startswith("usage: ")


# ---- resolve_connect's bad input ---------------------------------------------------------

@pytest.mark.netns
def test_name_that_does_not_resolve_is_one_line(bindir, tmp_path):
    """In a mount and network namespace of its own with `hosts: files` bind-mounted over
    /etc/nsswitch.conf (no query leaves the machine): EAI_NONAME, one line, exit 2."""
    nss = tmp_path / "nsswitch.conf"
    nss.write_text("hosts: files\n")
    r = subprocess.run(["unshare", "-mn", "sh", "-c",
                        'mount --bind "$0" /etc/nsswitch.conf && exec "$@"', str(nss),
                        os.path.join(bindir, "resolve_connect"), "-n", "no-such-name.invalid",
                        "-p", "21072"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == ""
    assert r.stderr == "resolve_connect: no-such-name.invalid: Name or service not known\n"


@pytest.mark.parametrize("argv,word", [
    (["-p", "21072"], "missing -n NAME"),
    (["-n", "localhost"], "missing -p PORT"),
    (["-n", "", "-p", "21072"], "-n"),
    (["-n", "localhost", "-p", "0"], "-p"),
    (["-n", "localhost", "-p", "21072", "extra"], "extra"),
])
def test_bad_options_are_one_line(bindir, argv, word):
    r = subprocess.run([os.path.join(bindir, "resolve_connect")] + argv, capture_output=True,
                       text=True, timeout=5)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr


# ---- a live run --------------------------------------------------------------------------

@pytest.mark.netns
def test_live_run(tmp_path, bindir):
    """./run.sh p07-localhost p07-dns-dead-first (about 4 s): the same facts, nothing left in
    /etc/netns, and no dnsmasq left running in the run's namespaces (they are gone)."""
    before = sorted(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else []
    r = subprocess.run([os.path.join(TOP, "run.sh"), "--out", str(tmp_path), UNIT, DNS_UNIT],
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    check_all(str(tmp_path))
    after = sorted(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else []
    assert [n for n in after if n not in before] == []
    with open(os.path.join(str(tmp_path), "raw", DNS_UNIT, "dnsmasq.txt")) as f:
        assert "exiting on receipt of SIGTERM" in f.read()


# ---- nothing left after a signal --------------------------------------------------------

def _children(ppid, word):
    """pids whose parent is ppid and whose command line holds word (bytes)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == ppid and word in cmd:
            out.append(int(pid))
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.netns
@pytest.mark.interrupt
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_signal_leaves_no_dnsmasq_and_no_etc_netns(tmp_path, bindir, sig):
    """The collect script killed while dnsmasq runs and getaddrinfo() waits on the dead server:
    its trap (SIGTERM) or run.sh's namespace deletion (SIGKILL, experiments/lib/netns.sh)
    leaves no dnsmasq and nothing in /etc/netns."""
    import signal
    import time
    before = set(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else set()
    err = open(tmp_path / "run-stderr.txt", "w+")
    run = subprocess.Popen([os.path.join(TOP, "run.sh"), "--out", str(tmp_path / "out"),
                            DNS_UNIT], stdout=subprocess.DEVNULL, stderr=err)
    script, dnsmasq = None, []
    try:
        # 60 s: CI's make test (six workers on two cores) once saw no dnsmasq within 20 s
        t0 = time.monotonic()
        deadline = t0 + 60
        while time.monotonic() < deadline and run.poll() is None:
            # this run's collect script (run.sh's child) and its dnsmasq (the script's child)
            script = script or next(iter(_children(run.pid, DNS_UNIT.encode() + b".sh")), None)
            dnsmasq = _children(script, b"--local=/p07.test/") if script else []
            if dnsmasq:
                break
            time.sleep(0.01)    # polling for the state, not waiting for it to happen
        if not dnsmasq:
            err.seek(0)
            raise AssertionError(f"the unit never had dnsmasq running: after "
                                 f"{time.monotonic() - t0:.1f} s, run.sh "
                                 f"{'running' if run.poll() is None else f'exited {run.returncode}'}"
                                 f", its collect script {'seen' if script else 'not seen'}; "
                                 f"run.sh printed:\n{err.read()[-2000:]}")
        # this run's own (namespaces are named tcplab-RUNPID-...): other tests that run p07 side
        # by side have theirs too (CI: two, this case's and the other signal's)
        ours = f"tcplab-{run.pid}-"
        etc = [n for n in os.listdir("/etc/netns") if n not in before and n.startswith(ours)]
        assert len(etc) == 1 and etc[0].endswith(DNS_UNIT), etc
        os.kill(script, getattr(signal, sig))
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        err.close()
    assert run.returncode != 0
    assert not any(_alive(p) for p in dnsmasq)
    after = set(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else set()
    assert not [n for n in after - before if n.startswith(ours)], after - before


def test_report_on_the_dns_unit_alone(tmp_path):
    """./run.sh p07-dns-dead-first alone: the report writes the DNS section, says p07-localhost
    did not run, and its JSON has the same dns facts."""
    import shutil
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(R.ref, "raw", DNS_UNIT), root / DNS_UNIT)
    out = tmp_path / "out"
    r = R.run(str(root), out)
    assert r.returncode == 0, r.stderr
    j = R.load(str(out))
    assert j["unit"] == DNS_UNIT and "parts" not in j
    check_dns(j)
    assert "(p07-localhost did not run" in (out / (NAME + ".txt")).read_text()
