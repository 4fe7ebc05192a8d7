"""The sandbox (experiments/sandbox/sandbox.sh, docs/sandbox.md): driven through its tmux panes
with send-keys (an echo_server in the server pane, a client in the client pane that connects,
sends a line and closes), through --shell with a here-document, and stopped by SIGTERM; each
time the outputs say what happened (the client's states in order up to TIME-WAIT, SYN and FIN
in the capture) and nothing is left behind: no namespace, no process, no tmux server, no veth
in the host, no run record.  Bad input: one line on stderr, a non-zero exit, nothing made."""
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANDBOX = os.path.join(TOP, "experiments", "sandbox", "sandbox.sh")
PORT = 7007
DEADLINE_S = 60     # the machine is shared and often loaded: generous, never a sleep

# One worker runs them one after another: each checks that no sandbox namespace is left, which a
# sandbox of another worker would be (a CI run failed two tests so).  The tmux runs, the SIGTERM
# and the SIGKILL are in make check; make test keeps the here-document run and the refusals.
pytestmark = [pytest.mark.netns, pytest.mark.xdist_group("sandbox"), pytest.mark.timing]
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (apt-get install tmux)")


def wait_for(pred, what, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.05)


def netns_names():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {ln.split()[0] for ln in r.stdout.splitlines() if ln.strip()}


def sandbox_ns(names):
    """The sandbox's namespaces among names (tcplab-sbc-ID, tcplab-sbs-ID)."""
    return {n for n in names if "-sbc-" in n or "-sbs-" in n}


def procs_naming(text):
    """pids whose command line holds text (the run's --out path: tmux -S, live.py --raw)."""
    out = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                if text.encode() in f.read():
                    out.append(int(path.split("/")[2]))
        except OSError:
            pass
    return [p for p in out if p != os.getpid()]


def assert_nothing_left(out, before_ns, state_dir):
    new = sandbox_ns(netns_names() - before_ns)
    assert not new, f"namespaces left: {new}"
    assert procs_naming(str(out)) == []
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert not re.search(r"^\d+: veth-[cs][@:]", links, re.M), links
    assert glob.glob(os.path.join(out, ".tmp-*")) == []
    assert not os.path.exists(os.path.join(out, ".tmp-*", "tmux.sock"))
    assert [f for f in os.listdir(state_dir) if f.startswith("run.")] == []


def assert_outputs(out, side_closing="client"):
    for name in ("sandbox.txt", "sandbox.json", "sandbox.pcap", "events.txt",
                 "raw/client-sockwatch.txt", "raw/server-sockwatch.txt", "raw/capture.txt",
                 "raw/client-counters-delta.txt", "raw/server-counters-delta.txt"):
        assert os.path.isfile(os.path.join(out, name)), name
    assert os.path.getsize(os.path.join(out, "sandbox.pcap")) > 24     # a header and packets
    with open(os.path.join(out, "sandbox.json")) as f:
        js = json.load(f)
    conns = [c for c in js["connections"] if c["server"] == f"192.0.2.2:{PORT}"]
    assert len(conns) == 1, js["connections"]
    c = conns[0]
    states = c[f"{side_closing}_states"]
    # in order: ESTAB before TIME-WAIT, on the side that closed first
    assert "ESTAB" in states and "TIME-WAIT" in states, states
    assert states.index("ESTAB") < states.index("TIME-WAIT"), states
    assert "ESTAB" in c["server_states"], c["server_states"]
    assert c["flags"]["S"] == 2 and c["flags"]["F"] == 2 and c["flags"]["R"] == 0, c
    assert js["packet_flags"]["syn"] == 2 and js["packet_flags"]["fin"] == 2
    assert js["counters"]["client"]["TcpActiveOpens"] == 1
    assert js["counters"]["server"]["TcpPassiveOpens"] == 1
    txt = open(os.path.join(out, "sandbox.txt")).read()
    assert "1. 192.0.2.1:" in txt and "SYN 2, FIN 2, RST 0" in txt, txt
    assert re.search(r"client: .*ESTAB -> .*TIME-WAIT", txt), txt
    events = open(os.path.join(out, "events.txt")).read()
    assert re.search(r"client\s+\w+\s+ESTAB", events), events
    assert re.search(r"wire\s+c>s\s+S\s", events) and re.search(r"wire\s+c>s\s+FA\s", events)
    assert "client counters (deltas):" in events and events.rstrip().endswith("end of the sandbox")


class Tmux:
    def __init__(self, sock):
        self.sock = sock

    def __call__(self, *args, check=True):
        return subprocess.run(["tmux", "-S", self.sock] + list(args), capture_output=True,
                              text=True, check=check)

    def screen(self, pane):
        return self("capture-pane", "-p", "-J", "-S", "-200", "-t", f"sandbox:0.{pane}").stdout

    def wait(self, pane, pattern, what):
        return wait_for(lambda: re.search(pattern, self.screen(pane), re.M), what)

    def type(self, pane, line):
        self("send-keys", "-t", f"sandbox:0.{pane}", "-l", line)
        self("send-keys", "-t", f"sandbox:0.{pane}", "Enter")


def start(out, tmp_path, *args, stdin=subprocess.DEVNULL):
    err = open(tmp_path / "stderr.txt", "w")
    so = open(tmp_path / "stdout.txt", "w")
    p = subprocess.Popen([SANDBOX, "--out", str(out)] + list(args), stdin=stdin, stdout=so,
                         stderr=err, start_new_session=True)
    return p


def stderr_text(tmp_path):
    return (tmp_path / "stderr.txt").read_text()


def finish(p, timeout=DEADLINE_S):
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        pytest.fail("the sandbox did not end")


@needs_tmux
@pytest.mark.slow
def test_tmux_panes_connect_send_close(tmp_path, bindir, own_state_dir):
    out = tmp_path / "out"
    before = netns_names()
    p = start(out, tmp_path)
    try:
        m = wait_for(lambda: re.search(r"tmux session ready: tmux -S (\S+) attach",
                                       stderr_text(tmp_path)), "tmux session line")
        tm = Tmux(m.group(1))
        tm.wait(0, r"client 192\.0\.2\.1 \$", "client prompt")
        tm.wait(1, r"server 192\.0\.2\.2 \$", "server prompt")
        tm.wait(2, r"live events", "live pane")
        tm.type(1, f"echo_server -p {PORT} -b poll -a 192.0.2.2")
        tm.wait(1, r"^ready ", "echo_server ready")
        tm.wait(2, r"server\s+new\s+LISTEN\s+192\.0\.2\.2:7007", "LISTEN in the live pane")
        tm.type(0, "python3 -c 'import socket; s = socket.create_connection((\"192.0.2.2\", "
                   f"{PORT})); s.sendall(b\"hello sandbox\\n\"); print(\"got\", s.recv(100)); "
                   "input(); s.close()'")
        tm.wait(0, r"got b'hello sandbox", "the echo in the client pane")
        tm.wait(2, r"client\s+\w+\s+ESTAB\s+192\.0\.2\.1:", "client ESTAB in the live pane")
        tm("send-keys", "-t", "sandbox:0.0", "Enter")       # input() returns: close()
        tm.wait(2, r"client\s+\w+\s+TIME-WAIT", "client TIME-WAIT in the live pane")
        tm("send-keys", "-t", "sandbox:0.1", "C-c")
        tm.wait(1, r"^end |server 192\.0\.2\.2 \$ $", "echo_server's end")
        tm.type(1, "exit")
        tm.type(0, "exit")
        rc = finish(p)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert rc == 0, stderr_text(tmp_path)
    assert_outputs(out)
    assert_nothing_left(out, before, own_state_dir)
    assert subprocess.run(["tmux", "-S", m.group(1), "ls"], capture_output=True).returncode != 0


# The python3 -c program is in single quotes: no apostrophe in it (one in a comment once ended
# the quote there, and the rest became arguments: the client never waited, and CI's loaded run
# sampled no ESTAB).  test_here_document_program_is_whole checks it.
HEREDOC = f"""\
nsenter --net=/run/netns/$TL_NS_SERVER echo_server -p {PORT} -b poll -a 192.0.2.2 > "$ECHO_OUT" &
until grep -q '^ready ' "$ECHO_OUT"; do sleep 0.01; done
python3 -c 'import glob, re, socket, time
s = socket.create_connection(("192.0.2.2", {PORT}))
s.sendall(b"hello\\n")
print("got", s.recv(100))
deadline = time.monotonic() + 30
seen = re.compile(r"client\\s+\\w+\\s+ESTAB")     # the ESTAB of the client, not of the server
# globbed here each time: the live pane may not have made its file yet when the shell starts
def shown():
    files = glob.glob("'"$EVENTS"'")
    return len(files) == 1 and seen.search(open(files[0]).read())
while not shown() and time.monotonic() < deadline:
    time.sleep(0.01)
print("ESTAB shown" if shown() else "ESTAB never shown")
s.close()'
echo done-with-it
exit
"""


def test_here_document_program_is_whole():
    """The shell passes the whole python3 -c program, as one argument, to python3."""
    prog = HEREDOC.split("python3 -c '", 1)[1].split("'\n", 1)[0]
    # what the shell makes of the line: the words of python3 -c ... up to the end of the quote
    words = subprocess.run(["bash", "-c", "EVENTS=x; printf '%s\\0' python3 -c '" + prog + "'"],
                           capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    assert len(words) == 3 and "print(\"ESTAB shown\"" in words[2], words[3:]


def test_shell_here_document(tmp_path, bindir, own_state_dir):
    out = tmp_path / "out"
    before = netns_names()
    env = dict(os.environ, ECHO_OUT=str(tmp_path / "echo.txt"))
    # the client waits, before it closes, until the live events show its ESTAB (the sampling
    # of a loaded machine can miss a state that lasts less than a sample)
    events_glob = str(out / ".tmp-*" / "events.txt")
    script = f"EVENTS='{events_glob}'\n" + HEREDOC
    r = subprocess.run([SANDBOX, "--out", str(out), "--shell", "client"], input=script,
                       capture_output=True, text=True, env=env, timeout=DEADLINE_S * 2)
    assert r.returncode == 0, r.stderr
    assert "got b'hello\\n'" in r.stdout and "done-with-it" in r.stdout, r.stdout
    assert "ESTAB shown" in r.stdout, r.stdout
    assert "connections on the wire: 1" in r.stdout     # the summary, printed at the end
    assert_outputs(out)
    assert_nothing_left(out, before, own_state_dir)


@pytest.mark.slow
def test_sigterm_ends_and_writes(tmp_path, bindir, own_state_dir):
    out = tmp_path / "out"
    before = netns_names()
    p = start(out, tmp_path, "--shell", "server", stdin=subprocess.PIPE)
    try:
        wait_for(lambda: "a shell in the server namespace" in stderr_text(tmp_path), "the shell")
        p.send_signal(signal.SIGTERM)
        rc = finish(p)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        p.stdin.close()
    assert rc == 143, stderr_text(tmp_path)
    for name in ("sandbox.txt", "sandbox.json", "sandbox.pcap", "raw/client-sockwatch.txt"):
        assert os.path.isfile(out / name), name
    assert json.load(open(out / "sandbox.json"))["connections"] == []
    assert_nothing_left(out, before, own_state_dir)


def one_line_refusal(argv, tmp_path, own_state_dir, user=None):
    before = netns_names()
    cmd = [SANDBOX] + argv
    if user:
        cmd = ["setpriv", "--reuid", str(user), "--regid", str(user), "--clear-groups"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S,
                       stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandbox.sh: "), r.stderr
    assert "Traceback" not in r.stderr
    assert sandbox_ns(netns_names() - before) == set()     # others' runs share the host
    assert [f for f in os.listdir(own_state_dir) if f.startswith("run.")] == []
    return r


@pytest.mark.parametrize("argv, rc, says", [
    (["--bogus"], 2, "unknown option '--bogus'"),
    (["--shell", "router"], 2, "--shell 'router': want client or server"),
    (["--shell"], 2, "--shell needs client or server"),
    (["--out"], 2, "--out needs a directory"),
    (["--out", ""], 2, "--out '': want a directory"),
])
def test_bad_usage(argv, rc, says, tmp_path, own_state_dir):
    r = one_line_refusal(argv, tmp_path, own_state_dir)
    assert r.returncode == rc and says in r.stderr, r.stderr


def test_out_not_empty_refused(tmp_path, own_state_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    r = one_line_refusal(["--out", str(out)], tmp_path, own_state_dir)
    assert r.returncode == 2 and "exists and is not empty" in r.stderr
    assert os.listdir(out) == ["keep.txt"]


def test_out_unusable_refused(tmp_path, own_state_dir):
    f = tmp_path / "a-file"
    f.write_text("x")
    r = one_line_refusal(["--out", str(f)], tmp_path, own_state_dir)
    assert "not a directory" in r.stderr and f.read_text() == "x"
    missing = tmp_path / "no" / "such" / "out"
    r = one_line_refusal(["--out", str(missing)], tmp_path, own_state_dir)
    assert "cannot create it" in r.stderr and not (tmp_path / "no").exists()


@pytest.fixture
def nobody_dir():
    """A directory user 65534 can write (tmp_path is root's, 0700)."""
    import shutil as sh
    import tempfile
    d = tempfile.mkdtemp(prefix="tcplab-sandbox-test-")
    os.chmod(d, 0o777)
    yield d
    sh.rmtree(d, ignore_errors=True)


def test_no_user_namespaces_refused(nobody_dir):
    """Not root, and unshare cannot make a user namespace (a stub that fails, as where
    unprivileged user namespaces are switched off): one line, exit 1, nothing made."""
    stub = os.path.join(nobody_dir, "bin")
    os.mkdir(stub)
    with open(os.path.join(stub, "unshare"), "w") as f:
        f.write("#!/bin/sh\necho 'unshare: Operation not permitted' >&2\nexit 1\n")
    os.chmod(os.path.join(stub, "unshare"), 0o755)
    out = os.path.join(nobody_dir, "out")
    before = netns_names()
    r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                        "env", "-u", "TCPLAB_STATE", f"PATH={stub}:/usr/sbin:/usr/bin:/sbin:/bin",
                        SANDBOX, "--out", out], capture_output=True, text=True,
                       timeout=DEADLINE_S, stdin=subprocess.DEVNULL)
    lines = r.stderr.splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("sandbox.sh: needs root, or unprivileged user namespaces"), r.stderr
    assert not os.path.exists(out) and sandbox_ns(netns_names() - before) == set()


@pytest.mark.slow
def test_unprivileged_in_a_user_namespace(nobody_dir, bindir):
    """As an ordinary user (65534), where unprivileged user namespaces are allowed: the same
    sandbox inside `unshare -rmn`, the same outputs, owned by that user, and nothing left."""
    if subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                       "unshare", "-rmn", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged user namespaces are switched off here")
    out = os.path.join(nobody_dir, "out")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": nobody_dir, "LC_ALL": "C",
           "ECHO_OUT": os.path.join(nobody_dir, "echo.txt")}
    script = f"EVENTS='{out}/.tmp-*/events.txt'\n" + HEREDOC
    r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                        SANDBOX, "--out", out, "--shell", "client"], input=script,
                       capture_output=True, text=True, env=env, timeout=DEADLINE_S * 2,
                       cwd=nobody_dir)
    assert r.returncode == 0, r.stderr
    assert "got b'hello\\n'" in r.stdout and "ESTAB shown" in r.stdout, r.stdout
    assert_outputs(out)
    assert os.stat(os.path.join(out, "sandbox.json")).st_uid == 65534
    assert procs_naming(out) == []
    assert glob.glob(os.path.join(out, ".tmp-*")) == []
    state = "/tmp/tcplab-65534"     # rs_state_dir: no XDG_RUNTIME_DIR
    assert not glob.glob(os.path.join(state, "run.*"))


@needs_tmux
@pytest.mark.slow
def test_killed_sandbox_reaped_by_the_next(tmp_path, bindir, own_state_dir, request):
    """SIGKILL runs no cleanup: the next sandbox finds the dead run's record (its lock is free)
    and deletes its namespaces, which ends its shells, probes and live pane, and so its tmux
    server, and removes its temporary directory."""
    # tmux's socket is in --out, and its path may be 100 bytes at most: this test's name under an
    # xdist worker's base directory made it 101 (the sandbox refused, and no session came)
    short = pathlib.Path(tempfile.mkdtemp(prefix="tl-sb-"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    out1, out2 = short / "out1", short / "out2"
    before = netns_names()
    p = start(out1, tmp_path)
    try:
        m = wait_for(lambda: re.search(r"tmux session ready: tmux -S (\S+) attach",
                                       stderr_text(tmp_path)), "tmux session line")
        Tmux(m.group(1)).wait(2, r"live events", "live pane")
        left = sandbox_ns(netns_names() - before)
        assert len(left) == 2, left
        p.kill()            # sandbox.sh alone: its probes, panes and tmux server live on
        p.wait()
        assert procs_naming(str(out1)) != []
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    r = subprocess.run([SANDBOX, "--out", str(out2), "--shell", "client"], input="exit\n",
                       capture_output=True, text=True, timeout=DEADLINE_S * 2)
    assert r.returncode == 0, r.stderr
    assert "removed 2 namespace(s) left by an interrupted run" in r.stderr, r.stderr
    assert not left & netns_names()
    wait_for(lambda: procs_naming(str(out1)) == [], "the killed run's processes gone", 10)
    assert glob.glob(str(out1 / ".tmp-*")) == []
    assert_nothing_left(out2, before, own_state_dir)
