"""p08-tls: TLS over TCP (docs/p08-tls.md).  The report replayed on the committed host reference
(outputs/6.18.44-fc-v1045/raw/p08-tls-*, no root) must be the committed one and show the facts:
1 round trip before the client's application data for TLS 1.3, 2 for TLS 1.2, a resumed 1.3
handshake, kernel TLS skipped with its errno, and the three endings' SSL_read results.  One live
run of both units (root, namespaces, <= 30 s).  Bad input to tls_peer (a missing certificate, a
bad version) and to the report (raw data without what it needs): one line, non-zero exit."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import TOP
from unit_replay import PY, REF, RUN

NAME = "p08-tls"
REPORT = os.path.join(TOP, "experiments", NAME, NAME + ".py")
UNITS = ("p08-tls-handshake", "p08-tls-close")


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


def test_reference_report_is_the_committed_one(ref_out):
    for ext in ("txt", "json"):
        with open(os.path.join(ref_out, f"{NAME}.{ext}")) as f, \
                open(os.path.join(REF, f"{NAME}.{ext}")) as g:
            assert f.read() == g.read(), ext


@pytest.mark.parametrize("unit,path,word", [
    ("p08-tls-handshake", "tls12-capture.pcap", "pcap"),
    ("p08-tls-handshake", "tls13-client.txt", "tls13-client.txt"),
    ("p08-tls-close", "fin-capture.pcap", "fin-capture.pcap"),
])
def test_report_refuses_bad_raw(tmp_path, unit, path, word):
    root = tmp_path / "raw"
    shutil.copytree(os.path.join(REF, "raw", unit), root / unit)
    target = root / unit / path
    if path.endswith(".pcap"):
        target.write_bytes(b"not a pcap at all, longer than twenty-four bytes")
    else:
        target.unlink()
    out = tmp_path / "out"
    out.mkdir()
    r = run_report(root, out)
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1 and word in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not os.listdir(out)


@pytest.mark.parametrize("args,word", [
    (["-r", "server", "-p", "21099", "-c", "/nonexistent/cert.pem", "-k", "/nonexistent/key.pem"],
     "-c /nonexistent/cert.pem"),
    (["-r", "server", "-p", "21099"], "needs -c CERT and -k KEY"),
    (["-r", "client", "-p", "21099", "-V", "1.4"], "-V"),
    (["-r", "client", "-p", "21099", "-V", "1.1"], "-V"),
    (["-r", "client", "-p", "21099", "-t"], "-t needs -n 2"),
    (["-r", "server", "-p", "21099", "-c", "/etc/hostname", "-k", "/etc/hostname"], "-c:"),
])
def test_tls_peer_bad_input(bindir, args, word):
    r = subprocess.run([os.path.join(bindir, "tls_peer")] + args, capture_output=True,
                       text=True, timeout=5)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tls_peer: ") and word in r.stderr
    assert r.stdout == ""


@pytest.mark.netns
def test_live_run_facts(tmp_path, bindir):
    r = subprocess.run([RUN, "--out", str(tmp_path)] + list(UNITS), capture_output=True,
                       text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    check_facts(load(str(tmp_path)))
    for unit in UNITS:
        assert not os.path.exists(tmp_path / "raw" / unit / "key.pem")
