"""sockwatch's INET_DIAG_ULP_INFO decoding (the socket's TCP_ULP: kernel TLS), replayed from
hand-built messages in the kernel's layout (net/ipv4/tcp_diag.c tcp_diag_put_ulp,
net/tls/tls_main.c tls_get_info) and from a dump recorded in a 6.1 guest.  No root."""
import os
import struct

import pytest

from conftest import DATA
from test_netlink_replay import diag_msg, dump, nlattr, replay, write

INET_DIAG_ULP_INFO = 19
INET_ULP_INFO_NAME, INET_ULP_INFO_TLS = 1, 2
TLS_INFO_VERSION, TLS_INFO_CIPHER, TLS_INFO_TXCONF, TLS_INFO_RXCONF = 1, 2, 3, 4
TLS_INFO_ZC_RO_TX, TLS_INFO_RX_NO_PAD = 5, 6
NLA_F_NESTED = 0x8000


def u16(atype, v):
    return nlattr(atype, struct.pack("=H", v))


def ulp(name=b"tls\0", tls=None, nested_flag=False):
    """INET_DIAG_ULP_INFO holding the name and, when given, the TLS nest's attributes.  The
    kernel's nla_nest_start_noflag() sends no NLA_F_NESTED; nested_flag sets it anyway."""
    body = nlattr(INET_ULP_INFO_NAME, name)
    if tls is not None:
        body += nlattr(INET_ULP_INFO_TLS | (NLA_F_NESTED if nested_flag else 0), tls)
    return nlattr(INET_DIAG_ULP_INFO, body)


def one_row(bindir, tmp_path, attrs):
    r, rows = replay(bindir, write(tmp_path, "d.bin", dump(diag_msg() + attrs)), "-1")
    assert r.returncode == 0, r.stderr
    (row,) = rows
    return row


def test_tls13_software_both_ways(bindir, tmp_path):
    tls = u16(TLS_INFO_VERSION, 0x0304) + u16(TLS_INFO_CIPHER, 52) + \
        u16(TLS_INFO_TXCONF, 2) + u16(TLS_INFO_RXCONF, 2)
    row = one_row(bindir, tmp_path, ulp(tls=tls))
    assert (row["ulp"], row["tls_version"], row["tls_cipher"]) == ("tls", "1.3", "aes-gcm-256")
    assert (row["tls_tx"], row["tls_rx"]) == ("sw", "sw")
    assert (row["tls_zc_ro_tx"], row["tls_rx_no_pad"]) == ("0", "0")


def test_base_before_keys_has_no_version_or_cipher(bindir, tmp_path):
    # TCP_ULP set, no TLS_TX/TLS_RX yet: tls_get_info() puts only the two confs, TLS_CONF_BASE
    row = one_row(bindir, tmp_path, ulp(tls=u16(TLS_INFO_TXCONF, 1) + u16(TLS_INFO_RXCONF, 1)))
    assert (row["tls_version"], row["tls_cipher"]) == ("none", "none")
    assert (row["tls_tx"], row["tls_rx"]) == ("base", "base")


@pytest.mark.parametrize("conf,name", [(1, "base"), (2, "sw"), (3, "hw"), (4, "hw_record"),
                                       (9, "unknown")])
def test_conf_names_are_the_kernels(bindir, tmp_path, conf, name):
    tls = u16(TLS_INFO_TXCONF, conf) + u16(TLS_INFO_RXCONF, 2)
    row = one_row(bindir, tmp_path, ulp(tls=tls))
    assert (row["tls_tx"], row["tls_rx"]) == (name, "sw")


@pytest.mark.parametrize("cipher,version,cname,vname", [
    (51, 0x0303, "aes-gcm-128", "1.2"), (53, 0x0304, "aes-ccm-128", "1.3"),
    (54, 0x0304, "chacha20-poly1305", "1.3"), (58, 0x0304, "aria-gcm-256", "1.3"),
    (59, 0x0305, "unknown", "1.4"), (50, 0x7f1c, "unknown", "0x7f1c")])
def test_cipher_and_version_names(bindir, tmp_path, cipher, version, cname, vname):
    tls = u16(TLS_INFO_VERSION, version) + u16(TLS_INFO_CIPHER, cipher) + u16(TLS_INFO_TXCONF, 2)
    row = one_row(bindir, tmp_path, ulp(tls=tls))
    assert (row["tls_cipher"], row["tls_version"], row["tls_rx"]) == (cname, vname, "none")


def test_flags_and_unknown_attributes(bindir, tmp_path):
    tls = u16(TLS_INFO_TXCONF, 3) + u16(TLS_INFO_RXCONF, 2) + nlattr(TLS_INFO_ZC_RO_TX, b"") + \
        nlattr(TLS_INFO_RX_NO_PAD, b"") + nlattr(40, b"future!!")
    row = one_row(bindir, tmp_path, ulp(tls=tls, nested_flag=True))
    assert (row["tls_zc_ro_tx"], row["tls_rx_no_pad"]) == ("1", "1")
    assert row["cookie"] == "7"        # still the last key


def test_other_ulp_has_name_only(bindir, tmp_path):
    row = one_row(bindir, tmp_path, ulp(name=b"mptcp\0"))
    assert row["ulp"] == "mptcp" and "tls_tx" not in row


def test_no_ulp_attribute_no_ulp_key(bindir, tmp_path):
    assert "ulp" not in one_row(bindir, tmp_path, b"")


def test_name_cannot_break_the_line(bindir, tmp_path):
    row = one_row(bindir, tmp_path, ulp(name=b"a b=c\0"))
    assert row["ulp"] == "a?b?c"


@pytest.mark.parametrize("attrs", [
    ulp(tls=nlattr(TLS_INFO_TXCONF, b"\1\0\0\0\0\0")),     # a u16 of 6 bytes
    ulp(name=b"tls"),                                       # no NUL
])
def test_garbled_ulp_fails_with_one_line(bindir, tmp_path, attrs):
    r, _ = replay(bindir, write(tmp_path, "d.bin", dump(diag_msg() + attrs)), "-1")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr


def test_change_ulp_prints_the_move_into_the_kernel(bindir, tmp_path):
    before = diag_msg()
    base = diag_msg() + ulp(tls=u16(TLS_INFO_TXCONF, 1) + u16(TLS_INFO_RXCONF, 1))
    sw = diag_msg() + ulp(tls=u16(TLS_INFO_VERSION, 0x0304) + u16(TLS_INFO_CIPHER, 51) +
                          u16(TLS_INFO_TXCONF, 2) + u16(TLS_INFO_RXCONF, 2))
    path = write(tmp_path, "d.bin", dump(before) + dump(base) + dump(sw) + dump(sw))
    r, rows = replay(bindir, path, "-c", "ulp")
    assert r.returncode == 0, r.stderr
    assert [x["event"] for x in rows] == ["new", "change", "change"]
    assert [x.get("tls_tx") for x in rows] == [None, "base", "sw"]
    r, rows = replay(bindir, path)
    assert [x["event"] for x in rows] == ["new"]      # without -c ulp: no change


# ---- recorded in a 6.1 guest (p08-tls-handshake's ktls parts, cut by cut-samples.py) ---------

NL = os.path.join(DATA, "netlink")


def test_recorded_tls12_client_moves_tx_then_rx_into_the_kernel(bindir):
    """TLS 1.2 over OpenSSL 3.0's kTLS, the client's socket: no ULP while the handshake runs,
    then TLS_TX (its ChangeCipherSpec went first), then TLS_RX, both in software."""
    r, rows = replay(bindir, os.path.join(NL, "ktls12-client-6.1.bin"), "-c", "ulp")
    assert r.returncode == 0, r.stderr
    assert [x["event"] for x in rows] == ["new", "change", "change", "gone"]
    assert "ulp" not in rows[0]
    assert [(x["tls_tx"], x["tls_rx"]) for x in rows[1:]] == [("sw", "base"), ("sw", "sw"),
                                                              ("sw", "sw")]
    assert {(x["ulp"], x["tls_version"], x["tls_cipher"]) for x in rows[1:]} == \
        {("tls", "1.2", "aes-gcm-256")}
    assert {x["cookie"] for x in rows} == {rows[0]["cookie"]}      # one socket throughout
    assert int(rows[0]["info_len"]) == 232                        # 6.1's tcp_info


def test_recorded_tls13_server_sends_in_the_kernel_only(bindir):
    """TLS 1.3: OpenSSL 3.0 hands the kernel its send direction only."""
    r, rows = replay(bindir, os.path.join(NL, "ktls13-server-6.1.bin"), "-c", "ulp")
    assert r.returncode == 0, r.stderr
    assert [x["event"] for x in rows] == ["new", "change", "gone"]
    last = rows[-1]
    assert (last["tls_version"], last["tls_cipher"], last["tls_tx"], last["tls_rx"]) == \
        ("1.3", "aes-gcm-256", "sw", "base")
    assert (last["tls_zc_ro_tx"], last["tls_rx_no_pad"]) == ("0", "0")
