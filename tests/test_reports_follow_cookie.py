"""Reports follow a socket by sockwatch's cookie=, never by an address the kernel changes on the
way out (issue 30).  A connection ended by tcp_done() (a RST, the last ACK of LAST-ACK) can be
caught once in TCP_CLOSE, which sockwatch names UNCONN as ss does, with its port already
released (local ADDR:0) and inode 0, and then be gone.  The shared library (tcplab.follow,
tcplab.socket_keys, tcplab.read_sockwatch) on hand-written lines, and p06-time-wait on its
committed reference with such a sample written in; files without cookie= (every committed
reference) are read by address, as before.  No root."""
import json

import pytest

import tcplab as t
from unit_replay import Report

EST = ("t_s=0.001000 t_ns={ns} sample=1 event={ev} state={st} timer=off expires_ms=0 retrans=0 "
       "rq=0 wq=0 local={local} peer=192.0.2.2:21073 info_len=280 inode={inode}")


def line(ev, st, local, inode, ns, cookie=None):
    x = EST.format(ns=ns, ev=ev, st=st, local=local, inode=inode)
    return x if cookie is None else f"{x} cookie={cookie}"


def watch(tmp_path, lines, end_ns=10_000):
    p = tmp_path / "sockwatch.txt"
    p.write_text("ready t_ns=0 interval_us=1000 family=inet states=0x876 dport=21073 sport=0\n"
                 + "".join(x + "\n" for x in lines) + f"end t_ns={end_ns} samples=10\n")
    return str(p)


def aborted(cookie="4711", port=57640):
    return [line("new", "ESTAB", f"192.0.2.1:{port}", 1304931, 1000, cookie),
            line("change", "UNCONN", "192.0.2.1:0", 0, 2000, cookie),
            line("gone", "UNCONN", "192.0.2.1:0", 0, 3000, cookie)]


def test_follow_keeps_a_socket_whose_port_was_released(tmp_path):
    evs = t.read_sockwatch(watch(tmp_path, aborted() + [
        line("new", "ESTAB", "192.0.2.1:40000", 7, 2500, "4712")]))
    got = t.follow(evs, lambda e: e["local"] == "192.0.2.1:57640")
    assert [(e["event"], e["state"], e["local"]) for e in got] == [
        ("new", "ESTAB", "192.0.2.1:57640"), ("change", "UNCONN", "192.0.2.1:0"),
        ("gone", "UNCONN", "192.0.2.1:0")]


def test_without_cookies_the_address_alone_picks_as_before(tmp_path):
    """Lines recorded before sockwatch printed cookie=: selection by address, unchanged (the
    committed references' reports stay byte for byte the same)."""
    evs = t.read_sockwatch(watch(tmp_path, aborted(cookie=None)))
    got = t.follow(evs, lambda e: e["local"] == "192.0.2.1:57640")
    assert [e["event"] for e in got] == ["new"]


def test_a_later_socket_at_the_same_address_is_picked_too(tmp_path):
    """Two sockets, one after the other, on the same port: both are the address's, each
    followed by its own cookie."""
    evs = t.read_sockwatch(watch(tmp_path, aborted("1") + [
        line("new", "ESTAB", "192.0.2.1:57640", 9, 4000, "2"),
        line("gone", "ESTAB", "192.0.2.1:57640", 9, 5000, "2")]))
    got = t.follow(evs, lambda e: e["local"] == "192.0.2.1:57640")
    assert [(e["event"], e["cookie"]) for e in got] == [
        ("new", "1"), ("change", "1"), ("gone", "1"), ("new", "2"), ("gone", "2")]


def test_socket_keys_name_a_socket_by_its_first_address(tmp_path):
    evs = t.read_sockwatch(watch(tmp_path, aborted()))
    assert [k for k, _ in t.socket_keys(evs, lambda e: e["local"])] == ["192.0.2.1:57640"] * 3
    evs = t.read_sockwatch(watch(tmp_path, aborted(cookie=None)))
    assert [k for k, _ in t.socket_keys(evs, lambda e: e["local"])] == \
        ["192.0.2.1:57640", "192.0.2.1:0", "192.0.2.1:0"]


def test_a_watcher_that_ended_early_saw_the_socket_go(tmp_path):
    """sockwatch -e ends once every socket it saw is gone, which may be before the client's
    end: complete when each socket went.  By address, the socket's first address was never
    `gone` (its gone line says ADDR:0) and the events were refused as missing."""
    path = watch(tmp_path, aborted(), end_ns=3000)
    assert len(t.read_sockwatch(path, until_ns=5000)) == 3
    old = watch(tmp_path, aborted(cookie=None), end_ns=3000)
    with pytest.raises(t.RawError, match="with a socket not gone"):
        t.read_sockwatch(old, until_ns=5000)


@pytest.mark.parametrize("bad", ["", "x12", "-1", "1" * 21, "0x1f"])
def test_a_bad_cookie_is_refused_naming_the_file(tmp_path, bad):
    evs = t.read_sockwatch(watch(tmp_path, [line("new", "ESTAB", "192.0.2.1:1", 1, 1000, bad)]))
    with pytest.raises(t.RawError, match=r"sockwatch\.txt: cookie="):
        t.follow(evs, lambda e: True)


def test_the_close_note_says_what_the_kernel_showed():
    assert t.shown_state("UNCONN") == "CLOSE" and t.shown_state("LAST-ACK") == "LAST-ACK"
    assert t.closed_note("192.0.2.1:0", 0, 66.753) == (
        "  CLOSE at 66.753 ms: the kernel's TCP_CLOSE (sockwatch, as ss, says UNCONN), local "
        "192.0.2.1:0: its port already released, inode 0: no process holds it")
    assert t.closed_note("192.0.2.1:5", 12, 1.0, "") == (
        "CLOSE at 1.000 ms: the kernel's TCP_CLOSE (sockwatch, as ss, says UNCONN), local "
        "192.0.2.1:5, inode 12")


# ---- p06-time-wait: the side that ends in LAST-ACK, caught in TCP_CLOSE ------------------------

P06 = Report("p06-time-wait")


def last_ack_caught_closed(d):
    """client-closes: the server's socket (it closes second: LAST-ACK, ended by tcp_done() at
    the client's last ACK) caught once in TCP_CLOSE with its port released and no inode, one
    sample before its gone line, which then shows the same; every socket line with a cookie
    (the listener its own).  Made from the reference's own lines."""
    p = d / "client-closes-server-sockwatch.txt"
    out = []
    for x in p.read_text().splitlines():
        if x.startswith("t_s="):
            f = t.kv(x)
            conn = f["state"] != "LISTEN"
            if conn and f["event"] == "gone":
                ns, sample = int(f["t_ns"]) - 1_000_000, int(f["sample"]) - 1
                closed = (x.replace(f" state={f['state']} ", " state=UNCONN ")
                          .replace(f" local={f['local']} ", " local=192.0.2.2:0 ")
                          .replace(f" inode={f['inode']}", " inode=0"))
                assert " state=UNCONN " in closed and " local=192.0.2.2:0 " in closed
                out.append(closed.replace(" event=gone ", " event=change ")
                           .replace(f"t_ns={f['t_ns']} ", f"t_ns={ns} ")
                           .replace(f" sample={f['sample']} ", f" sample={sample} ")
                           + " cookie=101")
                x = closed
            x += " cookie=101" if conn else " cookie=100"
        out.append(x)
    p.write_text("\n".join(out) + "\n")


def test_p06_time_wait_follows_the_last_ack_side_to_its_end(tmp_path):
    raw = P06.broken_copy(tmp_path, last_ack_caught_closed)
    out = tmp_path / "out"
    out.mkdir()
    r = P06.run(raw, out)
    assert r.returncode == 0, r.stderr
    with open(out / "p06-time-wait.json") as f:
        c = json.load(f)["cases"]["client-closes"]
    server = c["events"]["server"]
    assert [(e["event"], e["state"]) for e in server][-2:] == [("change", "UNCONN"),
                                                               ("gone", "UNCONN")]
    assert c["no_timewait_side"] == "server" and c["no_timewait_last"] == "UNCONN"
    assert all("_local" not in e for e in server)
    text = (out / "p06-time-wait.txt").read_text()
    case = text.split("== client-closes: ")[1].split("\n== ")[0]
    assert "  server: CLOSE at " in case and "local 192.0.2.2:0: its port already released" \
        in case and "last seen CLOSE, without TIME-WAIT" in case
    assert "UNCONN" not in case.split("  server: CLOSE at ")[0]   # the table says CLOSE


def test_p06_time_wait_without_cookies_lost_that_socket(tmp_path):
    """The same lines without cookie=: by address, the server's socket is not `gone` at the
    end, and the report refuses its raw data, as it did before sockwatch printed the cookie."""
    def edit(d):
        last_ack_caught_closed(d)
        p = d / "client-closes-server-sockwatch.txt"
        p.write_text("".join(x.split(" cookie=")[0] + "\n" for x in p.read_text().splitlines()))
    P06.assert_refused(tmp_path, edit, "is not `gone` at the end")



def test_fin_wait2_went_from_fin_wait_2_through_tcp_close():
    """A full FIN-WAIT-2 socket ended by a RST (tcp_done()), caught once in TCP_CLOSE: it went
    from FIN-WAIT-2 (gone_state), and closed_ms says when TCP_CLOSE was seen; without that
    sample, no closed_ms (the committed references' JSON is unchanged)."""
    import tcplab_close as tc

    def ev(ms, event, state):
        return {"t_s": ms / 1e3, "event": event, "state": state, "timer": "off",
                "expires_ms": 0, "info_len": 280, "inode": 0 if state == "UNCONN" else 5}
    evs = [ev(0, "new", "ESTAB"), ev(5, "change", "FIN-WAIT-2"), ev(45, "change", "UNCONN"),
           ev(46, "gone", "UNCONN")]
    w = tc.fin_wait2(evs, 1000, None, None, 0)
    assert (w["gone_state"], w["closed_ms"], w["gone_ms"]) == ("FIN-WAIT-2", 45.0, 46.0)
    w = tc.fin_wait2(evs[:2] + [ev(46, "gone", "FIN-WAIT-2")], 1000, None, None, 0)
    assert w["gone_state"] == "FIN-WAIT-2" and "closed_ms" not in w
