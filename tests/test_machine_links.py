"""machine's link lines: the RTM_GETLINK decoder (netlink/tl_link.c) on a kept dump
(tests/data/netlink/record-links.sh) and on hand-built messages, replayed by `machine -l`; and,
live in a namespace, the same links as iproute2 (`ip -j -d link show`), tc and sysfs see them."""
import json
import os
import struct
import subprocess
import time

import pytest

from conftest import DATA, TOP, in_ns, kv

NL = os.path.join(DATA, "netlink")
ROOT61 = os.path.join(DATA, "proc", "root-6.1")
RTM_NEWLINK, NLMSG_ERROR, NLMSG_DONE = 16, 2, 3
NLM_F_MULTI, NLM_F_DUMP_INTR = 2, 16
IFLA_IFNAME, IFLA_MTU, IFLA_QDISC, IFLA_OPERSTATE, IFLA_LINKINFO = 3, 4, 6, 16, 18
IFLA_INFO_KIND = 1
NLA_F_NESTED = 0x8000
IFF_UP, IFF_LOOPBACK, IFF_RUNNING, IFF_LOWER_UP = 0x1, 0x8, 0x40, 0x10000
IF_OPER_NAMES = ["UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP"]


def machine(bindir, *args, ns=None):
    argv = [os.path.join(bindir, "machine"), *args]
    return subprocess.run(in_ns(ns, argv) if ns else argv, capture_output=True, text=True,
                          timeout=20)


def replay(bindir, path):
    """machine -l PATH over the saved 6.1 tree: (result, the link lines)."""
    r = machine(bindir, "-r", ROOT61, "-l", path)
    return r, [line for line in r.stdout.splitlines() if line.startswith("link=")]


# ---- the kept dump ----------------------------------------------------------------------------

KEPT = [
    "link=lo index=1 mtu=65536 qdisc=noqueue state=UNKNOWN kind=- "
    "flags=UP,LOOPBACK,RUNNING,LOWER_UP",
    "link=veth-s index=2 mtu=1500 qdisc=tbf state=UP kind=veth "
    "flags=UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP",
    "link=veth-c index=3 mtu=1400 qdisc=noqueue state=UP kind=veth "
    "flags=UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP",
    "link=veth-y index=4 mtu=1500 qdisc=pfifo state=DOWN kind=veth flags=BROADCAST,MULTICAST",
    "link=veth-x index=5 mtu=1500 qdisc=noqueue state=LOWERLAYERDOWN kind=veth "
    "flags=UP,BROADCAST,MULTICAST",
]


def test_kept_dump_exact_lines(bindir):
    r, links = replay(bindir, os.path.join(NL, "links.bin"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert links == KEPT
    assert r.stdout.splitlines()[-len(KEPT):] == KEPT   # after the sysctls, last


def ip_flags(names):
    """Flags as both name them.  ip hides RUNNING, and adds NO-CARRIER (UP without LOWER_UP)
    and M-DOWN (the IFLA_LINK peer is down), which are no IFF_ bits (ip/ipaddress.c
    print_link_flags): compared without those three."""
    return sorted(n for n in names if n not in ("RUNNING", "NO-CARRIER", "M-DOWN"))


def agrees_with_ip(x, want):
    """One link line (kv) against the same link in `ip -j -d link show`."""
    assert (int(x["index"]), int(x["mtu"]), x["qdisc"], x["state"]) == \
        (want["ifindex"], want["mtu"], want["qdisc"], want["operstate"]), x
    assert x["kind"] == want.get("linkinfo", {}).get("info_kind", "-")
    assert ip_flags(x["flags"].split(",")) == ip_flags(want["flags"])


def test_kept_dump_agrees_with_ip_at_the_same_moment(bindir):
    """record-links.sh kept `ip -j -d link show` beside the dump: iproute2's own decoding."""
    with open(os.path.join(NL, "links-ip.json")) as f:
        ip = {x["ifname"]: x for x in json.load(f)}
    _, links = replay(bindir, os.path.join(NL, "links.bin"))
    rows = [kv(line) for line in links]
    assert [x["link"] for x in rows] == [n for n, _ in sorted(ip.items(),
                                                               key=lambda t: t[1]["ifindex"])]
    for x in rows:
        agrees_with_ip(x, ip[x["link"]])


# ---- hand-built messages ----------------------------------------------------------------------

def nlmsg(mtype, payload, flags=NLM_F_MULTI):
    return struct.pack("=IHHII", 16 + len(payload), mtype, flags, 0, 0) + payload + \
        b"\0" * (-len(payload) % 4)


def nlattr(atype, payload):
    return struct.pack("=HH", 4 + len(payload), atype) + payload + b"\0" * (-len(payload) % 4)


def ifinfo(index, flags, family=0, ltype=1):
    return struct.pack("=BxHiII", family, ltype, index, flags, 0)


def link(index=7, name=b"eth7\0", mtu=struct.pack("=I", 9000), qdisc=b"htb\0", oper=6,
         kind=b"dummy\0", flags=IFF_UP | IFF_RUNNING | IFF_LOWER_UP, extra=b""):
    """An RTM_NEWLINK payload as rtnl_fill_ifinfo() builds one; None leaves an attribute out."""
    attrs = b""
    if name is not None:
        attrs += nlattr(IFLA_IFNAME, name)
    if mtu is not None:
        attrs += nlattr(IFLA_MTU, mtu)
    if oper is not None:
        attrs += nlattr(IFLA_OPERSTATE, bytes([oper]))
    if qdisc is not None:
        attrs += nlattr(IFLA_QDISC, qdisc)
    if kind is not None:
        attrs += nlattr(IFLA_LINKINFO | NLA_F_NESTED, nlattr(IFLA_INFO_KIND, kind))
    return ifinfo(index, flags) + attrs + extra


def dump(*payloads, done=True):
    return b"".join(nlmsg(RTM_NEWLINK, p) for p in payloads) + \
        (nlmsg(NLMSG_DONE, struct.pack("=i", 0)) if done else b"")


def write(tmp_path, data):
    p = tmp_path / "links.bin"
    p.write_bytes(data)
    return str(p)


def one_line(bindir, tmp_path, data):
    r, links = replay(bindir, write(tmp_path, data))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    (line,) = links
    return line


def test_every_field_of_a_link(bindir, tmp_path):
    assert one_line(bindir, tmp_path, dump(link())) == \
        "link=eth7 index=7 mtu=9000 qdisc=htb state=UP kind=dummy flags=UP,RUNNING,LOWER_UP"


def test_links_come_in_index_order(bindir, tmp_path):
    data = dump(link(index=9, name=b"b\0"), link(index=2, name=b"a\0"), link(index=5, name=b"c\0"))
    r, links = replay(bindir, write(tmp_path, data))
    assert [kv(x)["index"] for x in links] == ["2", "5", "9"], r.stderr


@pytest.mark.parametrize("fields,want", [
    ({"qdisc": None}, "qdisc=-"),                      # a device without a qdisc sends none
    ({"kind": None}, "kind=-"),                        # no rtnl_link_ops: lo, a NIC
    ({"oper": 2}, "state=DOWN"),
    ({"oper": 3}, "state=LOWERLAYERDOWN"),
    ({"oper": 5}, "state=DORMANT"),
    ({"oper": 9}, "state=9"),                          # no name for it: the number
    ({"flags": 0}, "flags=-"),
    ({"flags": IFF_LOOPBACK | 1 << 19 | 1 << 31}, "flags=LOOPBACK,0x80080000"),
    ({"name": b"a\x1bb c\\\0"}, "link=a\\x1bb\\x20c\\x5c"),   # no field, line or escape added
    ({"kind": b"x=y\n\0"}, "kind=x=y\\x0a"),
])
def test_field_values(bindir, tmp_path, fields, want):
    assert want in one_line(bindir, tmp_path, dump(link(**fields))).split(" ")


def test_unknown_attributes_are_skipped(bindir, tmp_path):
    extra = nlattr(1000, b"future") + nlattr(IFLA_LINKINFO | NLA_F_NESTED, b"")   # empty nest
    line = one_line(bindir, tmp_path, dump(link(kind=None, extra=extra)))
    assert line.startswith("link=eth7 index=7 mtu=9000") and "kind=-" in line
    nested = nlattr(IFLA_LINKINFO | NLA_F_NESTED, nlattr(99, b"zz") + nlattr(IFLA_INFO_KIND,
                                                                          b"veth\0"))
    assert "kind=veth" in one_line(bindir, tmp_path, dump(link(kind=None, extra=nested)))


def test_messages_of_other_types_are_skipped(bindir, tmp_path):
    data = nlmsg(20, b"\0" * 8) + dump(link())
    assert one_line(bindir, tmp_path, data).startswith("link=eth7 ")


def test_an_empty_dump_has_no_link_lines(bindir, tmp_path):
    r, links = replay(bindir, write(tmp_path, dump()))
    assert r.returncode == 0 and links == [], r.stderr


def past_end(payload, atype):
    """payload with attribute atype's nla_len set past the end of its message."""
    b = bytearray(payload)
    at = 16
    while at < len(b):
        alen, t = struct.unpack_from("=HH", b, at)
        if t & 0x3FFF == atype:
            struct.pack_into("=H", b, at, alen + 200)
            return bytes(b)
        at += (alen + 3) & ~3
    raise AssertionError(atype)


def unpadded_last():
    """A message whose length stops at its last attribute's end, before that one's padding (the
    padding bytes are there in the buffer): the kernel always counts the padding."""
    payload = link(oper=None) + nlattr(IFLA_OPERSTATE, b"\6")
    return struct.pack("=IHHII", 16 + len(payload) - 3, RTM_NEWLINK, NLM_F_MULTI, 0, 0) + \
        payload + nlmsg(NLMSG_DONE, struct.pack("=i", 0))


BAD = {
    "unpadded-last-attribute": unpadded_last(),
    "empty": b"",
    "no-done": dump(link(), done=False),
    "cut-in-a-message": dump(link())[:40],
    "half-header": dump(link())[:10],
    "trailing-after-done": dump(link()) + nlmsg(RTM_NEWLINK, link()),
    "short-ifinfomsg": dump(b"\0" * 12),
    "mtu-past-the-message": dump(past_end(link(kind=None), IFLA_MTU)),
    "last-attribute-past-the-message": dump(past_end(link(), IFLA_LINKINFO)),
    "attribute-cut-in-its-header": dump(link() + b"\x08\0"),
    "kind-past-its-nest": dump(link(kind=None, extra=nlattr(
        IFLA_LINKINFO | NLA_F_NESTED, struct.pack("=HH", 40, IFLA_INFO_KIND) + b"veth"))),
    "mtu-2-bytes": dump(link(mtu=b"\1\2")),
    "mtu-8-bytes": dump(link(mtu=struct.pack("=Q", 1500))),
    "operstate-4-bytes": dump(link(oper=None, extra=nlattr(IFLA_OPERSTATE, b"\6\0\0\0"))),
    "name-without-nul": dump(link(name=b"eth7")),
    "name-nul-inside": dump(link(name=b"et\0h7\0")),
    "name-17-bytes": dump(link(name=b"a" * 16 + b"\0")),
    "qdisc-17-bytes": dump(link(qdisc=b"q" * 16 + b"\0")),
    "kind-without-nul": dump(link(kind=b"veth")),
    "kind-too-long": dump(link(kind=b"k" * 32 + b"\0")),
    "no-name": dump(link(name=None)),
    "no-mtu": dump(link(mtu=None)),
    "no-operstate": dump(link(oper=None)),
    "random": bytes(range(256)) * 4,
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_dump_is_refused_with_one_line(bindir, tmp_path, name):
    r, _ = replay(bindir, write(tmp_path, BAD[name]))
    assert (r.returncode, r.stdout) == (1, ""), (r.returncode, r.stdout)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "not a complete RTM_GETLINK dump" in lines[0], r.stderr


@pytest.mark.parametrize("data,message", [
    (nlmsg(NLMSG_ERROR, struct.pack("=i", -1) + b"\0" * 16), "Operation not permitted"),
    (nlmsg(RTM_NEWLINK, link(), flags=NLM_F_MULTI | NLM_F_DUMP_INTR) +
     nlmsg(NLMSG_DONE, struct.pack("=i", 0)), "marked interrupted"),
])
def test_kernel_error_and_interrupted_dump(bindir, tmp_path, data, message):
    r, _ = replay(bindir, write(tmp_path, data))
    assert (r.returncode, r.stdout) == (1, "")
    assert len(r.stderr.splitlines()) == 1 and message in r.stderr, r.stderr


def test_missing_links_file(bindir, tmp_path):
    r = machine(bindir, "-l", str(tmp_path / "nope.bin"))
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"machine: {tmp_path / 'nope.bin'}: No such file or directory\n"


def test_saved_tree_alone_has_no_link_lines(bindir):
    r = machine(bindir, "-r", ROOT61)
    assert r.returncode == 0 and not [x for x in r.stdout.splitlines() if x.startswith("link=")]


@pytest.mark.parametrize("args,word", [
    (["-l", "x", "-w", "y"], "exclude"),
    (["-r", ROOT61, "-w", "y"], "-r"),
    (["-l", ""], "-l needs a file"),
    (["-w", ""], "-w needs a file"),
])
def test_bad_link_options(bindir, args, word):
    r = machine(bindir, *args)
    assert (r.returncode, r.stdout) == (2, "") and len(r.stderr.splitlines()) == 1
    assert word in r.stderr, r.stderr


# ---- live, in a namespace: the kernel against ip, tc and sysfs -------------------------------

def sh(ns, *argv):
    return subprocess.run(in_ns(ns, argv), check=True, capture_output=True, text=True).stdout


def wait_state(ns, dev, state, deadline_s=5.0):
    """Poll until ip shows dev in operstate state: linkwatch applies a carrier change later."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if json.loads(sh(ns, "ip", "-j", "link", "show", "dev", dev))[0]["operstate"] == state:
            return
        time.sleep(0.01)
    pytest.fail(f"{dev} never reached {state}")


def live_rows(bindir, ns, *args):
    r = machine(bindir, *args, ns=ns)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r, [kv(x) for x in r.stdout.splitlines() if x.startswith("link=")]


@pytest.fixture
def wired(netns):
    """A veth pair in one namespace, MTU 1400 and a tbf root qdisc on one end, both up."""
    sh(netns, "ip", "link", "add", "veth-c", "type", "veth", "peer", "name", "veth-s")
    sh(netns, "ip", "link", "set", "veth-c", "mtu", "1400")
    sh(netns, "tc", "qdisc", "add", "dev", "veth-s", "root", "tbf", "rate", "1mbit", "burst",
       "32kbit", "latency", "400ms")
    sh(netns, "ip", "link", "set", "veth-c", "up")
    sh(netns, "ip", "link", "set", "veth-s", "up")
    wait_state(netns, "veth-c", "UP")
    wait_state(netns, "veth-s", "UP")
    return netns


@pytest.mark.netns
def test_live_links_equal_ip_tc_and_sysfs(bindir, wired):
    _, rows = live_rows(bindir, wired)
    ip = {x["ifname"]: x for x in json.loads(sh(wired, "ip", "-j", "-d", "link", "show"))}
    assert sorted(x["link"] for x in rows) == sorted(ip) == ["lo", "veth-c", "veth-s"]
    for x in rows:
        agrees_with_ip(x, ip[x["link"]])
        # other kernel paths: sysfs for the MTU, RTM_GETQDISC (tc) for the root qdisc
        assert sh(wired, "cat", f"/sys/class/net/{x['link']}/mtu").strip() == x["mtu"]
        root = [q for q in json.loads(sh(wired, "tc", "-j", "qdisc", "show", "dev", x["link"]))
                if q.get("root")]
        assert [q["kind"] for q in root] == [x["qdisc"]], root
    by = {x["link"]: x for x in rows}
    assert (by["veth-c"]["mtu"], by["veth-s"]["qdisc"], by["lo"]["mtu"]) == ("1400", "tbf", "65536")


@pytest.mark.netns
def test_live_state_follows_the_peer(bindir, wired):
    sh(wired, "ip", "link", "set", "veth-s", "down")
    wait_state(wired, "veth-c", "LOWERLAYERDOWN")
    by = {x["link"]: x for x in live_rows(bindir, wired)[1]}
    assert (by["veth-c"]["state"], by["veth-s"]["state"]) == ("LOWERLAYERDOWN", "DOWN")
    assert "RUNNING" not in by["veth-c"]["flags"] and by["veth-c"]["flags"].startswith("UP,")


@pytest.mark.netns
def test_live_dump_of_many_links_in_several_parts(bindir, netns, tmp_path):
    """60 veth pairs: ~180 KiB of replies, more than one 32 KiB recv; kept by -w, replayed by -l."""
    batch = "".join(f"link add vm{i} type veth peer name vn{i}\n" for i in range(60))
    subprocess.run(in_ns(netns, ["ip", "-batch", "-"]), input=batch, text=True, check=True)
    kept = tmp_path / "kept.bin"
    r, rows = live_rows(bindir, netns, "-w", str(kept))
    ip = json.loads(sh(netns, "ip", "-j", "link", "show"))
    assert [(x["link"], int(x["index"])) for x in rows] == \
        sorted(((x["ifname"], x["ifindex"]) for x in ip), key=lambda t: t[1])
    assert len(rows) == 121 and kept.stat().st_size > 32768
    r2, links = replay(bindir, str(kept))
    assert links == [x for x in r.stdout.splitlines() if x.startswith("link=")], r2.stderr


@pytest.mark.netns
def test_keep_to_dev_full_fails_with_one_line(bindir, netns):
    r = machine(bindir, "-w", "/dev/full", ns=netns)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "machine: /dev/full: cannot write the link dump: No space left on device\n"


# ---- what reads the lines: tcplab.read_machine, the p01-machine report, the diff -------------

REF = os.path.join(TOP, "outputs", "6.18.44-fc-v1045", "raw", "p01-machine")
DIFF = os.path.join(TOP, "experiments", "tools", "tcplab_diff.py")


def older_copy(raw):
    """The reference p01-machine raw directory copied to raw/p01-machine without its link=
    lines: a machine.txt as machine printed it before it listed links.  Its path."""
    import shutil
    shutil.copytree(REF, raw / "p01-machine")
    path = raw / "p01-machine" / "machine.txt"
    lines = path.read_text().splitlines(keepends=True)
    assert [x for x in lines if x.startswith("link=lo ")], "the reference lists no lo link"
    path.write_text("".join(x for x in lines if not x.startswith("link=")))
    return path


@pytest.fixture
def raw_with_links(bindir, tmp_path):
    """The reference p01-machine raw directory, its own link lines replaced by the kept dump's,
    as a machine of this version prints them (after the sysctls)."""
    raw = tmp_path / "raw"
    older_copy(raw)
    r = machine(bindir, "-r", ROOT61, "-l", os.path.join(NL, "links.bin"))
    with open(raw / "p01-machine" / "machine.txt", "a") as f:
        f.write("".join(x + "\n" for x in r.stdout.splitlines() if x.startswith("link=")))
    return raw


def report(raw, out):
    return subprocess.run(["/usr/bin/python3", os.path.join(TOP, "experiments", "p01-machine", "p01-machine.py"),
                           str(raw), str(out)], capture_output=True, text=True, timeout=20)


def test_read_machine_keeps_the_links_apart(raw_with_links, tmp_path):
    import tcplab
    path = str(raw_with_links / "p01-machine" / "machine.txt")
    info, sysctls = tcplab.read_machine(path)
    old, old_sysctls = tcplab.read_machine(str(older_copy(tmp_path / "old")))
    assert (dict(info), sysctls) == (dict(old), old_sysctls)   # no key taken over by a link
    assert old.links == []
    assert [(x["link"], x["mtu"], x["qdisc"]) for x in info.links] == \
        [(kv(x)["link"], kv(x)["mtu"], kv(x)["qdisc"]) for x in KEPT]


def test_report_lists_the_links(raw_with_links, tmp_path):
    r = report(raw_with_links, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    obj = json.loads((tmp_path / "out" / "p01-machine.json").read_text())
    assert obj["links"][0] == {"name": "lo", "index": 1, "mtu": 65536, "qdisc": "noqueue",
                               "state": "UNKNOWN", "kind": None,
                               "flags": ["UP", "LOOPBACK", "RUNNING", "LOWER_UP"]}
    assert [(x["name"], x["mtu"], x["qdisc"], x["state"]) for x in obj["links"]] == \
        [(kv(x)["link"], int(kv(x)["mtu"]), kv(x)["qdisc"], kv(x)["state"]) for x in KEPT]
    text = (tmp_path / "out" / "p01-machine.txt").read_text().splitlines()
    at = text.index("links (RTM_GETLINK in this namespace):")
    assert text[at + 1].split() == ["lo", "mtu", "65536", "qdisc", "noqueue", "state", "UNKNOWN",
                                    "kind", "-", "flags", "UP,LOOPBACK,RUNNING,LOWER_UP"]
    assert text[at + 2].split()[:4] == ["veth-s", "mtu", "1500", "qdisc"]
    assert len(text) == at + 1 + len(KEPT)


def test_report_of_an_older_machine_txt_says_none(tmp_path):
    raw = tmp_path / "raw"
    older_copy(raw)
    r = report(raw, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "out" / "p01-machine.json").read_text())["links"] == []
    assert "links: none recorded" in (tmp_path / "out" / "p01-machine.txt").read_text()


@pytest.mark.parametrize("line,field", [
    ("link=lo index=x mtu=1 qdisc=- state=UP kind=- flags=-", "index"),
    ("link=lo index=1 mtu=-1 qdisc=- state=UP kind=- flags=-", "mtu"),
    ("link=lo index=1 qdisc=- state=UP kind=- flags=-", "mtu"),
])
def test_report_refuses_a_bad_link_line(tmp_path, line, field):
    import shutil
    raw = tmp_path / "raw"
    shutil.copytree(REF, raw / "p01-machine")
    with open(raw / "p01-machine" / "machine.txt", "a") as f:
        f.write(line + "\n")
    r = report(raw, tmp_path / "out")
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and field in r.stderr, r.stderr
    assert not (tmp_path / "out" / "p01-machine.json").exists()


def diff(a, b):
    return subprocess.run(["/usr/bin/python3", DIFF, str(a), str(b)], capture_output=True,
                          text=True, timeout=20)


@pytest.fixture
def machine_json(raw_with_links, tmp_path):
    r = report(raw_with_links, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    return json.loads((tmp_path / "out" / "p01-machine.json").read_text())


def put(tmp_path, side, obj):
    """obj as SIDE/p01-machine.json: the diff names an experiment by its file's name."""
    p = tmp_path / side / "p01-machine.json"
    p.parent.mkdir(exist_ok=True)
    p.write_text(json.dumps(obj))
    return p


def test_diff_shows_mtu_and_qdisc_by_name(machine_json, tmp_path):
    b = json.loads(json.dumps(machine_json))
    by = {x["name"]: x for x in b["links"]}
    by["veth-c"]["mtu"] = 9000
    by["veth-s"]["qdisc"] = "netem"
    by["veth-y"]["qdisc"] = None
    by["veth-x"]["index"], by["veth-x"]["state"] = 42, "DOWN"   # not compared
    b["links"] = [x for x in b["links"] if x["name"] != "lo"] + [
        {"name": "wg0", "index": 7, "mtu": 1420, "qdisc": "noqueue", "state": "UNKNOWN",
         "kind": "wireguard", "flags": ["UP", "POINTOPOINT", "NOARP", "0x80000"]}]
    r = diff(put(tmp_path, "a", machine_json), put(tmp_path, "b", b))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[2:] == [
        "p01-machine",
        "  link lo: only in A (mtu 65536, qdisc noqueue, kind none)",
        "  link veth-c: MTU 1400 in A, 9000 in B",
        "  link veth-s: root qdisc tbf in A, netem in B",
        "  link veth-y: root qdisc pfifo in A, none in B",
        "  link wg0: only in B (mtu 1420, qdisc noqueue, kind wireguard)",
    ]


def test_diff_same_links_and_older_output(machine_json, tmp_path):
    a = put(tmp_path, "a", machine_json)
    assert diff(a, a).returncode == 0
    old = {k: v for k, v in machine_json.items() if k != "links"}
    r = diff(put(tmp_path, "old", old), a)
    assert (r.returncode, r.stdout.splitlines()[2:]) == \
        (1, ["p01-machine", "  links: recorded in B only"]), r.stderr


@pytest.mark.parametrize("link,where", [
    ({"mtu": "1500"}, "mtu"),
    ({"name": "a b"}, "name"),
    ({"flags": "UP"}, "flags"),
    ({"state": "up\n"}, "state"),
])
def test_diff_refuses_a_bad_link(machine_json, tmp_path, link, where):
    bad = json.loads(json.dumps(machine_json))
    bad["links"][0].update(link)
    r = diff(put(tmp_path, "a", machine_json), put(tmp_path, "b", bad))
    assert (r.returncode, r.stdout) == (2, "")
    assert len(r.stderr.splitlines()) == 1 and "links" in r.stderr and where in r.stderr, r.stderr
