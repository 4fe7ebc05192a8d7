"""p08-tls: TLS over TCP (docs/p08-tls.md).  The report replayed on the committed host reference
(outputs/6.18.44-fc-v1045/raw/p08-tls-*, no root) must be the committed one and show the facts:
1 round trip before the client's application data for TLS 1.3, 2 for TLS 1.2, a resumed 1.3
handshake, kernel TLS skipped with its errno, and the three endings' SSL_read results; and for
p08-tls-records one record over many segments, small records per segment with Nagle and with
TCP_NODELAY, and the delayed-ACK stall of two-write requests under TLS.  One live run of the
first two units (root, namespaces, <= 30 s) and one of p08-tls-records (<= 15 s).  Bad input to tls_peer (a missing certificate, a
bad version) and to the report (raw data without what it needs): one line, non-zero exit."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import TOP
from unit_replay import PY, REF, RUN

NAME = "p08-tls"
REF61 = os.path.join(TOP, "outputs", "6.1.0-57-cloud-amd64")     # a guest with the tls ULP
GUEST_REFS = ("6.1.0-57-cloud-amd64", "6.12.118+deb12-cloud-amd64", "7.2.13+deb14-cloud-amd64")
REPORT = os.path.join(TOP, "experiments", NAME, NAME + ".py")
UNITS = ("p08-tls-handshake", "p08-tls-close")
RECORDS = "p08-tls-records"


def run_report(raw_root, out):
    return subprocess.run([PY, REPORT, str(raw_root), str(out)], capture_output=True, text=True,
                          timeout=60)


def load(out):
    with open(os.path.join(out, NAME + ".json")) as f:
        return json.load(f)


def check_facts(j):
    hs = {p["part"]: p["facts"] for p in j["handshake"]}
    full13, resumed13 = hs["tls13"]
    (full12,) = hs["tls12"]
    assert full13["version"] == "TLSv1.3" and full13["resumed"] == 0
    assert full13["rtt_before_app_data"] == 1
    assert resumed13["version"] == "TLSv1.3" and resumed13["resumed"] == 1
    assert resumed13["rtt_before_app_data"] == 1
    # the resumed handshake sends no certificate: the server's side is far smaller
    assert resumed13["server_handshake_bytes"] < full13["server_handshake_bytes"] / 2
    assert full12["version"] == "TLSv1.2" and full12["resumed"] == 0
    assert full12["rtt_before_app_data"] == 2
    assert full12["client_records"][0].startswith("handshake TLS1.0")     # the ClientHello's
    assert "[client_hello]" in full12["client_records"][0]
    assert any("[server_hello_done]" in r for r in full12["server_records"])
    # TLS 1.3: after the ServerHello everything is application_data on the outside
    assert "[server_hello]" in full13["server_records"][0]
    assert all(r.startswith(("application_data", "change_cipher_spec"))
               for r in full13["server_records"][1:])
    assert j["ktls"]["ret"] in ("0", "-1")
    if j["ktls"]["ret"] == "-1":
        assert j["ktls"]["errno"] != "none"
    close = {p["part"]: p["facts"] for p in j["close"]}
    assert close["notify"]["client_read"] == {"ret": "0", "ssl_error": "zero_return",
                                              "errno": "none", "reason": "none"}
    assert close["notify"]["server_last_read"]["ssl_error"] == "zero_return"
    assert close["fin"]["client_read"] == {"ret": "0", "ssl_error": "ssl", "errno": "none",
                                           "reason": "unexpected_eof_while_reading"}
    assert close["fin"]["server_fin_rst"][0] == "FA"
    assert close["rst"]["client_read"] == {"ret": "-1", "ssl_error": "syscall",
                                           "errno": "ECONNRESET", "reason": "none"}
    assert close["rst"]["server_fin_rst"][0].startswith("R")


@pytest.fixture(scope="module")
def ref_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("p08-ref")
    r = run_report(os.path.join(REF, "raw"), out)
    assert r.returncode == 0, r.stderr
    return str(out)


def test_reference_facts(ref_out):
    check_facts(load(ref_out))


def test_reference_ktls_skipped_on_the_host(ref_out):
    """The host's kernel has no CONFIG_TLS: one line says the part was skipped, with the errno."""
    with open(os.path.join(ref_out, NAME + ".txt")) as f:
        lines = [x for x in f.read().splitlines() if x.startswith("kernel TLS:")]
    assert lines == ['kernel TLS: skipped: setsockopt(TCP_ULP, "tls") failed with ENOENT '
                     "(this kernel has no tls ULP: CONFIG_TLS not set or module not loadable)"]


def assert_committed(out, ref):
    """The report made again from REF's raw is the committed one, .txt and .json."""
    for ext in ("txt", "json"):
        with open(os.path.join(out, f"{NAME}.{ext}")) as f, \
                open(os.path.join(ref, f"{NAME}.{ext}")) as g:
            assert f.read() == g.read(), ext


def test_reference_report_is_the_committed_one(ref_out):
    assert_committed(ref_out, REF)


# ---- kernel TLS, from the 6.1 guest's reference ------------------------------------------------

def check_ktls(j):
    """OpenSSL 3.0 hands the kernel both directions of TLS 1.2 and only the send direction of
    TLS 1.3 (ssl/tls13_enc.c: kTLS only for SSL3_CC_WRITE); each end's tls_stat moves by one per
    direction handed over, and sock_diag shows the socket's ULP as the kernel's TLS_CONF_*."""
    assert j["ktls"] == {"setsockopt": "TCP_ULP", "value": "tls", "ret": "-1", "errno": "ENOTCONN"}
    parts = {p["part"]: p for p in j["ktls_parts"]}
    assert sorted(parts) == ["ktls12", "ktls13"]
    want = {"ktls13": ("TLSv1.3", 1, 0, "sw", "base", {"TlsTxSw": 1}),
            "ktls12": ("TLSv1.2", 1, 1, "sw", "sw", {"TlsTxSw": 1, "TlsRxSw": 1})}
    for name, (version, send, recv, tx, rx, delta) in want.items():
        for side in ("client", "server"):
            x = parts[name][side]
            assert (x["version"], x["send"], x["recv"], x["ulp"]) == (version, send, recv, "tls")
            assert x["ulp_states"][0]["ulp"] == "none"      # seen before the handshake ended
            # the last state with the TLS details (7.2 caught a closing socket with no ULP any
            # more, a 6.1 run one with the ULP's name alone: its context already gone)
            last = [st for st in x["ulp_states"] if st["ulp"] == "tls" and st["tls_tx"] != "none"][-1]
            assert (last["ulp"], last["tls_version"], last["tls_tx"], last["tls_rx"]) == \
                ("tls", version[4:], tx, rx)
            assert x["tls_stat_delta"] == delta
            assert x["tls_stat_after"]["TlsCurrTxSw"] == 0    # closed: nothing current
            assert x["tls_stat_after"]["TlsCurrRxSw"] == 0
            assert x["disagree"] == []
    # TLS 1.2: the client's send key comes first (its ChangeCipherSpec leaves before the
    # server's), the server's receive key first
    for side, order in (("client", [("sw", "base"), ("sw", "sw")]),
                        ("server", [("base", "sw"), ("sw", "sw")])):
        seen = [(st["tls_tx"], st["tls_rx"]) for st in parts["ktls12"][side]["ulp_states"]
                if st["ulp"] == "tls" and st["tls_version"] != "none"]
        assert seen == order, side


@pytest.mark.parametrize("release", GUEST_REFS)
def test_guest_reference_ktls_facts_and_replay(tmp_path, release):
    ref = os.path.join(TOP, "outputs", release)
    if not os.path.isdir(os.path.join(ref, "raw", "p08-tls-handshake")):
        pytest.skip(f"no guest reference of p08-tls-handshake under {ref}")
    r = run_report(os.path.join(ref, "raw"), tmp_path)
    assert r.returncode == 0, r.stderr
    j = load(str(tmp_path))
    check_facts(j)
    check_ktls(j)
    for ext in ("txt", "json"):
        with open(tmp_path / f"{NAME}.{ext}") as f, open(os.path.join(ref, f"{NAME}.{ext}")) as g:
            assert f.read() == g.read(), ext


@pytest.fixture(scope="module")
def ref61_out(tmp_path_factory):
    if not os.path.isdir(os.path.join(REF61, "raw", "p08-tls-handshake")):
        pytest.skip(f"no 6.1 guest reference of p08-tls-handshake under {REF61}")
    out = tmp_path_factory.mktemp("p08-ref61")
    r = run_report(os.path.join(REF61, "raw"), out)
    assert r.returncode == 0, r.stderr
    return str(out)


def test_ref61_ktls_facts(ref61_out):
    j = load(ref61_out)
    check_facts(j)
    check_ktls(j)


def test_ref61_report_is_the_committed_one(ref61_out):
    assert_committed(ref61_out, REF61)


def test_ref61_ktls_text(ref61_out):
    with open(os.path.join(ref61_out, NAME + ".txt")) as f:
        text = f.read()
    assert "OpenSSL moved into the kernel: client send=yes receive=no; server send=yes receive=no" \
        in text
    assert text.count("cross-check: on each end TlsTxSw and TlsRxSw moved by what tls_peer said") == 2
    assert "DISAGREE" not in text and "kernel TLS: skipped" not in text


def test_ktls_counter_that_disagrees_is_said(tmp_path):
    """A tls_stat that moved by other than what tls_peer and sock_diag showed: a DISAGREE line."""
    if not os.path.isdir(os.path.join(REF61, "raw", "p08-tls-handshake")):
        pytest.skip("no 6.1 guest reference")
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF61, "raw", "p08-tls-handshake"), root / "p08-tls-handshake")
    after = root / "p08-tls-handshake" / "server-ktls13-tls-stat-after.txt"
    after.write_text(after.read_text().replace("TlsRxSw                         \t0",
                                               "TlsRxSw                         \t1"))
    out = tmp_path / "out"
    out.mkdir()
    r = run_report(root, out)
    assert r.returncode == 0, r.stderr
    text = (out / (NAME + ".txt")).read_text()
    assert "DISAGREE: server: TlsRxSw moved 1, tls_peer says 0, sockwatch's last tls state 0" in text


# `ss -tieH` of each kTLS part's socket (ktls_ss, p08-tls-common.sh), as iproute2 6.1.0's ss
# printed it in the 6.1 guest's reference run (./run.sh --kernel 6.1, issue 29): its ino: and
# sk: (the cookie, hex) name the socket, which must be the one sockwatch watched
SS_FILES = ("ktls13-ss.txt", "ktls13-server-ss.txt", "ktls12-ss.txt", "ktls12-server-ss.txt")


def ss_socket(name):
    """(ino, cookie, ULP words) of the 6.1 reference's ss file `name`."""
    text = open(os.path.join(REF61, "raw", "p08-tls-handshake", name)).read()
    m = re.search(r" ino:(\d+) sk:([0-9a-f]+) .*tcp-ulp-tls (.*)$", text, re.S)
    assert m, text
    return int(m[1]), int(m[2], 16), m[3].strip()


def ref61_with_ss(tmp_path, change=None):
    """The 6.1 reference's raw p08-tls-handshake, its ss files changed by `change` ({file:
    function of its text}), and the report's .txt and .json over it."""
    if not os.path.isdir(os.path.join(REF61, "raw", "p08-tls-handshake")):
        pytest.skip("no 6.1 guest reference")
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF61, "raw", "p08-tls-handshake"), root / "p08-tls-handshake")
    for name, f in (change or {}).items():
        path = root / "p08-tls-handshake" / name
        text = f(path.read_text())
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    r = run_report(root, out)
    assert r.returncode == 0, r.stderr
    return (out / (NAME + ".txt")).read_text(), load(str(out))


def test_ss_beside_sockwatch_agrees(tmp_path):
    """ss -tieH decodes the same INET_DIAG_ULP_INFO: its words beside sockwatch's decoding, one
    cross-check line per part; ss's `none` is TLS_CONF_BASE, sockwatch's `base`.  The committed
    6.1 reference holds ss's files; its report is what the report makes of them now."""
    text, j = ref61_with_ss(tmp_path)
    committed = open(os.path.join(REF61, NAME + ".txt")).read()
    said = [x for x in text.splitlines() if "ss -tieH" in x or "ss's decoding" in x]
    assert len(said) == 6 and all(x in committed for x in said), said
    ino, sk, ulp = ss_socket("ktls13-ss.txt")
    assert ulp == "version: 1.3 cipher: aes-gcm-256 rxconf: none txconf: sw"
    assert (f"ss -tieH (iproute2) of the client's socket after the handshake: ino:{ino} "
            f"sk:{sk:x}: tcp-ulp-tls {ulp}") in text
    assert text.count("cross-check: ss's decoding on the client and server (the sockets sockwatch "
                      "watched: ino = inode, sk = cookie) is sockwatch's last tls state") == 2
    assert "DISAGREE" not in text
    check_ktls(j)
    parts = {p["part"]: p for p in j["ktls_parts"]}
    assert parts["ktls13"]["server"]["ss"]["state"] == {
        "ulp": "tls", "tls_version": "1.3", "tls_cipher": "aes-gcm-256", "tls_tx": "sw",
        "tls_rx": "base"}
    ino, sk, _ = ss_socket("ktls12-ss.txt")
    assert parts["ktls12"]["client"]["ss"]["socket"] == {"ino": ino, "cookie": sk}


def test_without_ss_files_no_line_is_added(tmp_path):
    """A run without ss's files (the references before them, a kernel without the tls ULP):
    no ss line and no cross-check of it."""
    text, j = ref61_with_ss(tmp_path, {n: lambda _: None for n in SS_FILES})
    assert "ss -tieH" not in text and "ss's decoding" not in text
    check_ktls(j)


@pytest.mark.parametrize("name,old,new,word", [
    ("ktls13-ss.txt", "rxconf: none", "rxconf: sw",
     "DISAGREE: client: ss says tls_rx=sw, sockwatch's last tls state tls_rx=base"),
    ("ktls12-server-ss.txt", " ino:", " ino:99",
     "DISAGREE: server: ss's socket ino:99"),
])
def test_ss_that_disagrees_is_said(tmp_path, name, old, new, word):
    def change(text):
        assert old in text
        return text.replace(old, new, 1)
    out, _ = ref61_with_ss(tmp_path, {name: change})
    assert word in out
    assert out.count("DISAGREE") == 1


def test_ss_that_came_after_the_close_is_no_disagreement(tmp_path):
    """A 7.2 TCG guest's server socket was gone when ss ran (an empty file): said, not compared;
    the other end's cross-check stands alone."""
    out, j = ref61_with_ss(tmp_path, {"ktls13-server-ss.txt": lambda _: ""})
    assert ("ss -tieH (iproute2) of the server's socket after the handshake: no ESTAB socket on "
            "the part's port when it ran: not cross-checked") in out
    assert "cross-check: ss's decoding on the client (the sockets" in out
    assert "DISAGREE" not in out
    parts = {p["part"]: p for p in j["ktls_parts"]}
    assert parts["ktls13"]["server"]["ss"] == {"socket": None, "disagree": []}


@pytest.mark.parametrize("path,word", [
    ("ktls13-tls-stat-after.txt", "tls_stat"),
    ("ktls12-server-sockwatch.txt", "sockwatch saw no socket"),
    ("ktls13-sockwatch.txt", "no `end` line"),
    ("ktls12-client.txt", "ktls12-client.txt"),
])
def test_report_refuses_bad_ktls_raw(tmp_path, path, word):
    if not os.path.isdir(os.path.join(REF61, "raw", "p08-tls-handshake")):
        pytest.skip("no 6.1 guest reference")
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF61, "raw", "p08-tls-handshake"), root / "p08-tls-handshake")
    target = root / "p08-tls-handshake" / path
    if path.endswith("tls-stat-after.txt"):
        target.write_text("TlsTxSw one\n")
    elif "server-sockwatch" in path:
        target.write_text("ready t_ns=1\nend t_ns=2 samples=1\n")
    elif "sockwatch" in path:     # cut short: its samples without the `end` line
        lines = target.read_text().splitlines(True)
        target.write_text("".join(lines[:-1]))
    else:
        target.unlink()
    assert_refused(root, tmp_path / "out", word)


def assert_refused(root, out, word):
    """The report on ROOT refuses in one line naming WORD, no traceback, and writes nothing."""
    out.mkdir()
    r = run_report(root, out)
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not os.listdir(out)


def refuses_spoiled(tmp_path, unit, path, word):
    """The reference's raw/UNIT copied with PATH spoiled (a .pcap overwritten with junk, another
    file removed): the report refuses it as assert_refused says."""
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw", unit), root / unit)
    target = root / unit / path
    if path.endswith(".pcap"):
        target.write_bytes(b"not a pcap at all, longer than twenty-four bytes")
    else:
        target.unlink()
    assert_refused(root, tmp_path / "out", word)


@pytest.mark.parametrize("unit,path,word", [
    ("p08-tls-handshake", "tls12-capture.pcap", "pcap"),
    ("p08-tls-handshake", "tls13-client.txt", "tls13-client.txt"),
    ("p08-tls-close", "fin-capture.pcap", "fin-capture.pcap"),
])
def test_report_refuses_bad_raw(tmp_path, unit, path, word):
    refuses_spoiled(tmp_path, unit, path, word)


@pytest.mark.parametrize("args,word", [
    (["-r", "server", "-p", "21099", "-c", "/nonexistent/cert.pem", "-k", "/nonexistent/key.pem"],
     "-c /nonexistent/cert.pem"),
    (["-r", "server", "-p", "21099"], "needs -c CERT and -k KEY"),
    (["-r", "client", "-p", "21099", "-V", "1.4"], "-V"),
    (["-r", "client", "-p", "21099", "-V", "1.1"], "-V"),
    (["-r", "client", "-p", "21099", "-t"], "-t needs -n 2"),
    (["-r", "server", "-p", "21099", "-c", "/etc/hostname", "-k", "/etc/hostname"], "-c:"),
    (["-r", "client"], "needs -p PORT"),
    (["-r", "server", "-p", "21099", "-c", "/etc/hostname", "-k", "/etc/hostname", "-w", "5"],
     "-w is for -r client"),
    (["-r", "client", "-p", "21099", "-w", "60001"], "-w"),
    (["-r", "server", "-p", "21099", "-c", "/etc/hostname", "-k", "/etc/hostname", "-W", "5"],
     "-W is for -r client"),
    (["-r", "client", "-p", "21099", "-W", "60001"], "-W"),
    (["-r", "ulp", "-W", "5"], "takes no"),
    (["-r", "ulp", "-K"], "takes no"),
    (["-r", "version", "-c", "x.pem"], "-c and -k"),
    (["-r", "cert", "-c", "/tmp/x.pem"], "needs -c CERT and -k KEY"),
    (["-r", "cert", "-c", "/etc/hostname", "-k", "/nonexistent-dir/k.pem"], "/nonexistent-dir"),
    (["-r", "ulp", "-N"], "takes no"),
    (["-r", "version", "-R", "3"], "takes no"),
    (["-r", "server", "-p", "21099", "-c", "/etc/hostname", "-k", "/etc/hostname", "-s", "8"],
     "-s is for -r client"),
    (["-r", "client", "-p", "21099", "-R", "0"], "-R"),
    (["-r", "client", "-p", "21099", "-s", "1048577"], "-s"),
])
def test_tls_peer_bad_input(bindir, args, word):
    r = subprocess.run([os.path.join(bindir, "tls_peer")] + args, capture_output=True,
                       text=True, timeout=5)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tls_peer: ") and word in r.stderr
    assert r.stdout == ""


def test_tls_peer_cert_writes_a_usable_pair_and_refuses_to_overwrite(bindir, tmp_path):
    """-r cert (OpenSSL's API, no openssl(1) in a guest): a key of mode 0600 and a certificate
    the server role loads; a second run over the same files writes nothing and leaves no key."""
    peer = os.path.join(bindir, "tls_peer")
    cert, key = str(tmp_path / "c.pem"), str(tmp_path / "k.pem")
    r = subprocess.run([peer, "-r", "cert", "-c", cert, "-k", key], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("cert key=ec curve=P-256 subject=CN=tcplab days=1")
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert open(cert).read().startswith("-----BEGIN CERTIFICATE-----")
    r = subprocess.run([peer, "-r", "cert", "-c", cert, "-k", str(tmp_path / "k2.pem")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "File exists" in r.stderr
    assert not os.path.exists(tmp_path / "k2.pem")


def test_tls_peer_ulp_and_version_lines(bindir):
    peer = os.path.join(bindir, "tls_peer")
    r = subprocess.run([peer, "-r", "ulp"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    # ENOENT: no tls ULP (this host); ENOTCONN: the ULP is there, the socket unconnected
    assert r.stdout in ("ktls setsockopt=TCP_ULP value=tls ret=-1 errno=ENOENT\n",
                        "ktls setsockopt=TCP_ULP value=tls ret=-1 errno=ENOTCONN\n")
    r = subprocess.run([peer, "-r", "version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("OpenSSL 3.") and "(Library: " in r.stdout


@pytest.mark.netns
def test_live_run_facts(tmp_path, bindir):
    r = subprocess.run([RUN, "--out", str(tmp_path)] + list(UNITS), capture_output=True,
                       text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    check_facts(load(str(tmp_path)))
    for unit in UNITS:
        assert not os.path.exists(tmp_path / "raw" / unit / "key.pem")


@pytest.mark.qemu
@pytest.mark.netns
def test_guest_61_runs_kernel_tls(tmp_path):
    """One boot of Debian's 6.1 under QEMU: vm.sh loads tls (p08 units only), the TCP_ULP probe
    finds it, and OpenSSL hands TLS 1.3's send side and both of TLS 1.2's to the kernel."""
    r = subprocess.run([RUN, "--kernel", "6.1", "--out", str(tmp_path), "p08-tls-handshake"],
                       capture_output=True, text=True, timeout=900)
    if r.returncode == 4:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    raw = tmp_path / "raw" / "p08-tls-handshake"
    vm = dict(x.split("=", 1) for x in (raw / "vm.txt").read_text().splitlines() if "=" in x)
    assert "tls" in vm["modules"].split() and "gcm" in vm["modules"].split(), vm["modules"]
    j = load(str(tmp_path))
    check_ktls(j)
    assert not os.path.exists(raw / "key.pem")
    # iproute2's ss on the same sockets after the handshake (ktls_ss): the same decoding; an ss
    # that came after the close (a loaded TCG guest) is said, not compared
    text = (tmp_path / (NAME + ".txt")).read_text()
    for p in ("ktls13", "ktls12"):
        assert (raw / f"{p}-ss.txt").exists() and (raw / f"{p}-server-ss.txt").exists()
    lines = [x for x in text.splitlines() if x.startswith("ss -tieH (iproute2) of the ")]
    assert len(lines) == 4
    seen = [not x.endswith("not cross-checked") for x in lines]
    assert all(": tcp-ulp-tls version: 1." in x for x, s in zip(lines, seen) if s), lines
    # one cross-check line for each part (ktls13, then ktls12) where ss saw either end
    assert text.count("cross-check: ss's decoding on the ") == any(seen[:2]) + any(seen[2:])
    assert "DISAGREE" not in text


def test_a_closing_socket_with_the_ulp_name_alone_is_not_its_last_tls_state(tmp_path):
    """A 6.1 guest in CI sampled the TLS 1.3 client once more in its close with `ulp=tls` and no
    INET_ULP_INFO_TLS (the context already gone: no tls_* keys): the report's and the test's
    last TLS state is the last one with those details, so the facts hold."""
    if not os.path.isdir(os.path.join(REF61, "raw", "p08-tls-handshake")):
        pytest.skip("no 6.1 guest reference")
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF61, "raw", "p08-tls-handshake"), root / "p08-tls-handshake")
    f = root / "p08-tls-handshake" / "ktls13-sockwatch.txt"
    lines = f.read_text().splitlines(True)
    last = [x for x in lines if x.startswith("t_s=") and " ulp=tls " in x][-1]
    bare = " ".join(w for w in last.split(" ") if not w.startswith("tls_"))
    assert " ulp=tls " in bare and "tls_tx=" not in bare
    f.write_text("".join(lines[:-1]) + bare.rstrip("\n") + "\n" + lines[-1])
    out = tmp_path / "out"
    out.mkdir()
    r = run_report(root, out)
    assert r.returncode == 0, r.stderr
    check_ktls(load(str(out)))
    assert "DISAGREE" not in (out / (NAME + ".txt")).read_text()


# ---- p08-tls-records ------------------------------------------------------------------------------

def check_records(u, emulated=False):
    """Kernel and TLS facts of p08-tls-records: OpenSSL's one record per SSL_write (16384 bytes
    of plaintext at most; TLS 1.3 adds the inner type byte and a 16-byte tag) cut into segments
    of at most the MSS, each segment its own packet (gso_max_segs 1); and the two-write request
    waiting a delayed-ACK timer with Nagle.  Off emulation (the host) also: Nagle coalescing
    records that TCP_NODELAY leaves apart, and no timer with TCP_NODELAY.  Under TCG each
    SSL_write takes long enough for the ACK of the one before to come back first (the 6.1
    guest: ten segments with Nagle too) and an exchange can take tens of ms of CPU alone."""
    assert u["client_gso_max_segs"] == 1
    parts = {p["part"]: p for p in u["parts"]}
    rec = parts["record"]
    knobs_bytes = sum(rec["writes"])
    assert len(rec["records"]) == -(-knobs_bytes // 16384)
    (r,) = rec["records"] if knobs_bytes <= 16384 else rec["records"][:1]
    assert r["type"] == "application_data" and r["version"] == "TLS1.2"
    assert r["length"] == min(knobs_bytes, 16384) + 17
    assert rec["largest_segment"] <= 1448     # MTU 1500 - 40 - 12 (timestamps)
    wire = sum(x["length"] + 5 for x in rec["records"])
    assert sum(s["len"] for s in rec["segments"]) == wire
    assert len(rec["segments"]) >= -(-wire // 1448)
    assert rec["records_per_segment"][0] == 1 and sum(rec["records_per_segment"]) == 1
    assert r["segments"] == list(range(1, len(rec["segments"]) + 1))
    nagle, nodelay = parts["small-nagle"], parts["small-nodelay"]
    for p in (nagle, nodelay):
        assert len(p["records"]) == len(p["writes"])
        assert sum(p["records_per_segment"]) == len(p["writes"])
        assert all(x["length"] == p["writes"][0] + 17 for x in p["records"])
    assert nagle["nodelay_client"] == 0 and nodelay["nodelay_client"] == 1
    # TCP_NODELAY: nothing held, one record per segment
    assert nodelay["records_per_segment"] == [1] * len(nodelay["writes"])
    if not emulated:
        # Nagle: records written while a small segment is unacknowledged wait and leave
        # together (the first alone or with them: whether the Finished was acknowledged yet)
        assert len(nagle["segments"]) < len(nagle["writes"])
    st = {p["part"]: p for p in u["stall"]}
    timer = st["stall-nagle"]["timer_ms"]
    n = st["stall-nagle"]["requests"]
    for p in st.values():
        assert p["writes_per_request"] == 2 and p["requests"] == n
        assert p["tickets"]["records"] == 2      # OpenSSL's default: two NewSessionTickets
    assert (st["stall-nagle"]["nodelay_client"], st["stall-nagle"]["nodelay_server"]) == (0, 0)
    assert (st["stall-both"]["nodelay_client"], st["stall-both"]["nodelay_server"]) == (1, 1)
    # Nagle against the server's delayed ACK: most requests wait a timer, and the server's
    # DelayedACKs and its late pure ACKs in the capture count them
    assert st["stall-nagle"]["exchange_ms"]["p50"] >= timer
    assert st["stall-nagle"]["delayed_acks"]["server"] >= n // 2
    assert st["stall-nagle"]["server_acks_a_timer_late"] >= n // 2
    if not emulated:
        # TCP_NODELAY on the client: the server's delayed-ACK timer no longer fires
        assert st["stall-nodelay"]["exchange_ms"]["p50"] < timer
        assert st["stall-nodelay"]["server_acks_a_timer_late"] == 0
        assert st["stall-both"]["server_acks_a_timer_late"] == 0
        assert st["stall-both"]["delayed_acks"]["server"] == 0



def test_reference_records_facts(ref_out):
    check_records(load(ref_out)["records"])


def test_reference_records_text(ref_out):
    with open(os.path.join(ref_out, NAME + ".txt")) as f:
        text = f.read()
    assert "== p08-tls-records: TLS 1.3 records against the client's TCP segments" in text
    assert "1 SSL_write of 16384 B -> 1 record -> 12 client segments (largest 1448 B)" in text
    assert "  record 1: application_data TLS1.2 len=16401 (SSL_write 1), 16406 B on the wire: " \
        "segments 1-12 (12)" in text


@pytest.mark.parametrize("release", GUEST_REFS + ("5.10.0-43-cloud-amd64",))
def test_guest_reference_records_facts(tmp_path, release):
    ref = os.path.join(TOP, "outputs", release)
    if not os.path.isdir(os.path.join(ref, "raw", RECORDS)):
        pytest.skip(f"no guest reference of {RECORDS} under {ref}")
    r = run_report(os.path.join(ref, "raw"), tmp_path)
    assert r.returncode == 0, r.stderr
    check_records(load(str(tmp_path))["records"], emulated=True)
    assert_committed(str(tmp_path), ref)


@pytest.mark.parametrize("path,word", [
    ("record-capture.pcap", "pcap"),
    ("stall-nagle-client.txt", "stall-nagle-client.txt"),
    ("small-nagle-server-counters-delta.txt", "small-nagle-server-counters-delta.txt"),
    ("wire.txt", "wire.txt"),
])
def test_report_refuses_bad_records_raw(tmp_path, path, word):
    refuses_spoiled(tmp_path, RECORDS, path, word)


def test_report_refuses_records_without_the_request_records(tmp_path):
    """A capture that lost the client's records (its payloads cut): one line, not a guess."""
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw", RECORDS), root / RECORDS)
    client = root / RECORDS / "small-nagle-client.txt"
    lines = client.read_text().splitlines(True)
    # twenty more SSL_writes of the request than the capture holds records for
    extra = [x for x in lines if x.startswith("write ")][0]
    client.write_text("".join(lines[:5] + [extra] * 20 + lines[5:]))
    assert_refused(root, tmp_path / "out", "small-nagle")


@pytest.mark.netns
def test_live_records_run(tmp_path, bindir):
    r = subprocess.run([RUN, "--out", str(tmp_path), RECORDS], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    check_records(load(str(tmp_path))["records"])
    assert not os.path.exists(tmp_path / "raw" / RECORDS / "key.pem")
