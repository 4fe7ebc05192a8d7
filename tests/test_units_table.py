"""The unit table's one parser, experiments/runner/tcplab_units.py (issue 26): each kind of bad
table is one line, run.sh's words, exit 1 and nothing on stdout, from the module and from
./run.sh --list alike; what `shell` prints is inert data for bash's eval; and the arrays run.sh
gets are the table tcplab.read_units() returns."""
import os
import re
import subprocess

import pytest

import tcplab
import tcplab_units     # experiments/runner/, on the path since tcplab imports it
from conftest import TOP

RUN = os.path.join(TOP, "run.sh")
UNITS_PY = os.path.join(TOP, "experiments", "runner", "tcplab_units.py")
PY = "/usr/bin/python3"

HEADER = "# unit report set quick alone expect_s limit_s root netns qemu\n"
GOOD = ("one rep labs run no 1 30 no 1 yes\n"
        "wired rep labs run no 1 30 no wire:1400 yes\n"
        "solo - named run no 1 30 no 1 yes\n")


def make_exp(tmp_path, table):
    """A small experiments directory: report rep (units one, wired, two, ns2) and solo, which
    feeds none; TABLE is its units file."""
    exp = tmp_path / "exp"
    (exp / "rep").mkdir(parents=True)
    (exp / "solo").mkdir()
    (exp / "rep" / "rep.py").write_text("")
    for u in ("one", "wired", "two", "ns2"):
        (exp / "rep" / f"{u}.sh").write_text("")
    (exp / "solo" / "solo.sh").write_text("")
    (exp / "units").write_bytes(table.encode())
    return exp


def decoded(r):
    """R's output as text, a CR kept (text=True would make it a newline)."""
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


def units_py(*args):
    return decoded(subprocess.run([PY, UNITS_PY] + [str(a) for a in args], capture_output=True,
                                  timeout=30))


def run_list(exp):
    return decoded(subprocess.run([RUN, "--list"], capture_output=True, timeout=30,
                                  env=dict(os.environ, TCPLAB_EXPERIMENTS=str(exp))))


# (table after the header, the message after "run.sh: EXP/units"): every check run.sh's
# load_units and knob_line made, in their words; {exp} is the experiments directory
BAD = {
    "columns": ("one rep labs run no 1 30 no 1\n", ":2: want 10 columns"),
    "columns-extra": ("one rep labs run no 1 30 no 1 yes x\n", ":2: want 10 columns"),
    "unit": ("One rep labs run no 1 30 no 1 yes\n", ":2: unit 'One': want a-z, 0-9 and '-'"),
    "twice": (GOOD + "one rep labs run no 1 30 no 1 yes\n", ":5: unit 'one' listed twice"),
    "report": ("one Rep labs run no 1 30 no 1 yes\n", ":2: report 'Rep': want a report name or '-'"),
    "set": ("one rep all run no 1 30 no 1 yes\n", ":2: set 'all': want default, labs or named"),
    "quick": ("one rep labs fast no 1 30 no 1 yes\n", ":2: quick 'fast': want run or skip"),
    "alone": ("one rep labs run y 1 30 no 1 yes\n", ":2: alone 'y': want yes or no"),
    "expect_s": ("one rep labs run no 1s 30 no 1 yes\n", ":2: expect_s '1s': want seconds"),
    "limit_s": ("one rep labs run no 1 0 no 1 yes\n", ":2: limit_s '0': want seconds, 1..99999"),
    "root": ("one rep labs run no 1 30 maybe 1 yes\n", ":2: root 'maybe': want yes or no"),
    "netns": ("one rep labs run no 1 30 no 3 yes\n", ":2: netns '3': want 1, 2, wire or wire:MTU"),
    "netns-mtu": ("wired rep labs run no 1 30 no wire:67 yes\n",
                  ":2: netns 'wire:67': the MTU must be 68..65535 (a veth's range)"),
    "qemu": ("one rep labs run no 1 30 no 1 yes\r\n", ":2: qemu 'yes\r': want yes or no"),
    "netns2-qemu": ("ns2 rep labs run no 1 30 no 2 yes\n",
                    ":2: netns 2 with qemu yes: the guest gives a unit one namespace, or a wire "
                    "(netns wire)"),
    "no-report": ("one nosuch labs run no 1 30 no 1 yes\n", ":2: no report {exp}/nosuch/nosuch.py"),
    "no-script": ("three rep labs run no 1 30 no 1 yes\n", ":2: no collect script {exp}/rep/three.sh"),
    "no-own-script": ("lone - named run no 1 30 no 1 yes\n",
                      ":2: no collect script {exp}/lone/lone.sh"),
    "mtu-min-range": (GOOD + "# mtu min: wired: 67: too small\n",
                      ":5: mtu min '67': want 68..65535 (a veth's range)"),
    "mtu-min-zero": (GOOD + "# mtu min: wired: 088: a leading zero\n",
                     ":5: mtu min '088': want 68..65535 (a veth's range)"),
    "knob-form": (GOOD + "# knob: one: n: 1: 1..5\n",
                  ":5: knob: want '# knob: UNIT: NAME: DEFAULT: MIN..MAX or a|b|c: "
                  "[env VAR: ]meaning'"),
    "knob-range": (GOOD + "# knob: one: n: 1: 5..1: backwards\n",
                   ":5: knob n: range '5..1': want MIN..MAX or a|b|c"),
    "knob-word-range": (GOOD + "# knob: one: n: a: a: one word\n",
                        ":5: knob n: range 'a': want MIN..MAX or a|b|c"),
    "knob-twice": (GOOD + "# knob: one: n: 1: 1..5: m\n# knob: one: n: 2: 1..5: m\n",
                   ":6: knob n of one declared twice"),
    "knob-default-above": (GOOD + "# knob: one: n: 6: 1..5: m\n", ":5: knob n: default '6' is not in 1..5"),
    "knob-default-below": (GOOD + "# knob: one: n: 0: 1..5: m\n", ":5: knob n: default '0' is not in 1..5"),
    "knob-default-zero": (GOOD + "# knob: one: n: 01: 0..5: m\n", ":5: knob n: default '01' is not in 0..5"),
    "knob-default-word": (GOOD + "# knob: one: n: c: a|b: m\n", ":5: knob n: default 'c' is not in a|b"),
    "knob-no-unit": (GOOD + "# knob: nosuch: n: 1: 1..5: m\n", ": a knob for 'nosuch', which is no unit"),
    "mtu-min-no-wire": (GOOD + "# mtu min: one: 100: why\n",
                        ": mtu min for 'one', which is no wire unit (netns wire)"),
    "mtu-min-above-mtu": (GOOD + "# mtu min: wired: 1500: why\n",
                          ": wired: netns wire:1400 is below its mtu min 1500"),
    "no-unit": ("# nothing\n\n", " lists no unit"),
    "guest-form": (GOOD + "# guest: one: tls\n",
                   ":5: guest: want '# guest: UNIT: NEED...: why', each NEED tls, names, "
                   "bin:PROGRAM or host:PROGRAM, one blank between them"),
    "guest-blanks": (GOOD + "# guest: one: tls  names: why\n",
                     ":5: guest: want '# guest: UNIT: NEED...: why', each NEED tls, names, "
                     "bin:PROGRAM or host:PROGRAM, one blank between them"),
    "guest-unknown": (GOOD + "# guest: one: tls ktls: why\n",
                      ":5: guest need 'ktls' of one: want tls, names, bin:PROGRAM or host:PROGRAM"),
    "guest-kind-alone": (GOOD + "# guest: one: bin: why\n",
                         ":5: guest need 'bin' of one: want tls, names, bin:PROGRAM or "
                         "host:PROGRAM"),
    "guest-tab": (GOOD + "# guest: one: names\ttls: why\n",
                  ":5: guest need 'names\ttls' of one: want tls, names, bin:PROGRAM or "
                  "host:PROGRAM"),
    "guest-bin-path": (GOOD + "# guest: one: bin:../bin/sh: why\n",
                       ":5: guest need 'bin:../bin/sh' of one: want bin:PROGRAM, a build/bin "
                       "program's name (a-z, then a-z, 0-9 and '_')"),
    "guest-bin-dash": (GOOD + "# guest: one: bin:curl-pool: why\n",
                       ":5: guest need 'bin:curl-pool' of one: want bin:PROGRAM, a build/bin "
                       "program's name (a-z, then a-z, 0-9 and '_')"),
    "guest-host-path": (GOOD + "# guest: one: host:/usr/sbin/nginx: why\n",
                        ":5: guest need 'host:/usr/sbin/nginx' of one: want host:PROGRAM, a "
                        "program's name (no path: the guest gets the one PATH finds)"),
    "guest-need-twice": (GOOD + "# guest: one: host:curl names host:curl: why\n",
                         ":5: guest need 'host:curl' of one named twice"),
    "guest-line-twice": (GOOD + "# guest: one: tls: why\n# guest: one: names: why\n",
                         ":6: guest needs of one declared twice (line 5 and this)"),
    "guest-no-unit": ("# guest: nosuch: tls: why\n" + GOOD,
                      ":2: guest needs for 'nosuch', which is no unit"),
    "guest-qemu-no": ("one rep labs run no 1 30 no 1 no\n# guest: one: tls: why\n",
                      ":3: guest needs for 'one', which runs in no guest (qemu no)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_table_is_run_sh_s_one_line(tmp_path, case):
    table, tail = BAD[case]
    exp = make_exp(tmp_path, HEADER + table)
    want = f"run.sh: {exp}/units" + tail.format(exp=exp) + "\n"
    r = units_py("shell", exp)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", want)
    r = run_list(exp)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", want)
    if case.startswith("no-") and case != "no-unit":
        # read_units() reads the table alone: a report or script not there is run.sh's concern
        assert tcplab.read_units(str(exp / "units"))[0]["unit"] in ("one", "three", "lone")
        return
    with pytest.raises(tcplab.RawError) as e:
        tcplab.read_units(str(exp / "units"))
    assert str(e.value) + "\n" == want[len("run.sh: "):]


def test_an_unreadable_table(tmp_path):
    exp = make_exp(tmp_path, HEADER + GOOD)
    (exp / "units").unlink()
    r = units_py("shell", exp)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"run.sh: cannot read the unit table {exp}/units\n")
    r = units_py("get", exp, "one", "limit_s")
    assert r.returncode == 1 and r.stdout == "" and "cannot read the unit table" in r.stderr


def test_the_comment_lines_a_table_may_have(tmp_path):
    """A good table's arrays: blanks and tabs between columns, a comment, the wire MTUs, the
    why lines, a knob with env VAR; the last line counts without its newline."""
    exp = make_exp(tmp_path, HEADER + GOOD + (
        "# qemu no: two: a reason: with colons\n"
        "# root yes: two: it needs root\n"
        "# mtu min: wired: 88: below it, fragments\n"
        "# knob: two: flavour: b: a|b|c: env TL_FLAVOUR: which one\n"
        "# knob: one: n: 0: 0..9: m\n"
        "  # an indented comment\n"
        "two\trep  labs run yes 5 99999 yes wire no"))
    arrays = shell_arrays(exp)
    assert arrays["UNIT_NAMES"] == ["one", "wired", "solo", "two"]
    assert arrays["U_MTU"] == {"wired": "1400", "two": "1500"}
    assert arrays["U_QEMU_WHY"] == {"two": "a reason: with colons"}
    assert arrays["U_ROOT_WHY"] == {"two": "it needs root"}
    assert (arrays["U_MTU_MIN"], arrays["U_MTU_WHY"]) == ({"wired": "88"}, {"wired": "below it, fragments"})
    assert arrays["U_KNOBS"] == {"two": "flavour", "one": "n"}
    assert arrays["K_ENV"] == {"two:flavour": "TL_FLAVOUR", "one:n": ""}
    assert arrays["K_RANGE"] == {"two:flavour": "a|b|c", "one:n": "0..9"}
    assert arrays["K_DEFAULT"] == {"two:flavour": "b", "one:n": "0"}
    assert arrays["U_LIMIT"]["two"] == "99999" and arrays["U_ALONE"]["two"] == "yes"
    assert arrays["U_REPORT"] == {"one": "rep", "wired": "rep", "solo": "-", "two": "rep"}


# bash that prints each of run.sh's table arrays after the eval: NAME NUL KEY NUL VALUE NUL
DUMP = r"""
for a in UNIT_NAMES U_REPORT U_SET U_QUICK U_ALONE U_EXPECT U_LIMIT U_ROOT U_NETNS U_QEMU \
	U_QEMU_WHY U_ROOT_WHY U_MTU U_MTU_MIN U_MTU_WHY U_KNOBS K_DEFAULT K_RANGE K_ENV K_WHAT; do
	declare -n arr=$a
	printf '%s\0-\0-\0' "$a"
	for k in "${!arr[@]}"; do printf '%s\0%s\0%s\0' "$a" "$k" "${arr[$k]}"; done
	unset -n arr
done
"""


def shell_arrays(exp):
    """What run.sh's load_units gets: `shell EXP` evaluated by bash, as a dict of arrays
    (UNIT_NAMES a list, the others dicts)."""
    r = units_py("shell", exp)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    b = subprocess.run(["bash", "-c", 'set -eu; eval "$(cat)"' + DUMP], input=r.stdout,
                       capture_output=True, text=True, timeout=30)
    assert b.returncode == 0, b.stderr
    words = b.stdout.split("\0")[:-1]
    out = {}
    for i in range(0, len(words), 3):
        name, key, value = words[i:i + 3]
        out.setdefault(name, {})
        if key != "-" or value != "-":
            out[name][key] = value
    names = out["UNIT_NAMES"]
    out["UNIT_NAMES"] = [names[str(i)] for i in range(len(names))]
    return out


def test_shell_output_is_inert_data(tmp_path):
    """A meaning with quotes, $(...), backquotes and a newline-free ; rm comes out of eval as
    the text itself, and runs nothing."""
    canary = tmp_path / "ran"
    what = (f"it's \"quoted\" $(touch {canary}) `touch {canary}` ${{HOME}} \\ ; touch {canary} "
            f"'; touch {canary}; ' !x")
    exp = make_exp(tmp_path, HEADER + GOOD + f"# knob: one: n: 1: 1..5: {what}\n"
                   f"# qemu no: one: $(touch {canary}) 'why'\n")
    arrays = shell_arrays(exp)
    assert arrays["K_WHAT"] == {"one:n": what}
    assert arrays["U_QEMU_WHY"] == {"one": f"$(touch {canary}) 'why'"}
    assert not canary.exists()


def test_shell_arrays_are_read_units(tmp_path):
    """The real table: run.sh's arrays and tcplab.read_units() say the same of every unit."""
    arrays = shell_arrays(os.path.join(TOP, "experiments"))
    units = tcplab.read_units(os.path.join(TOP, "experiments", "units"))
    assert arrays["UNIT_NAMES"] == [u["unit"] for u in units] and len(units) > 10
    yesno = {True: "yes", False: "no"}
    for u in units:
        n = u["unit"]
        assert arrays["U_REPORT"][n] == (u["report"] or "-")
        assert (arrays["U_SET"][n], arrays["U_QUICK"][n]) == (u["set"], u["quick"])
        assert arrays["U_ALONE"][n] == yesno[u["alone"]]
        assert (arrays["U_EXPECT"][n], arrays["U_LIMIT"][n]) == (str(u["expect_s"]), str(u["limit_s"]))
        assert (arrays["U_ROOT"][n], arrays["U_QEMU"][n]) == (yesno[u["root"]], yesno[u["qemu"]])
        assert arrays["U_NETNS"][n] == str(u["netns"])
        assert arrays["U_QEMU_WHY"].get(n) == u["qemu_why"] or u["qemu"]
        if str(u["netns"]).startswith("wire"):
            assert arrays["U_MTU"][n] == (str(u["netns"])[5:] or "1500")
        else:
            assert n not in arrays["U_MTU"]
    # every knob is a unit's, and its default within its range
    for u, names in arrays["U_KNOBS"].items():
        assert u in arrays["U_SET"]
        for k in names.split():
            assert f"{u}:{k}" in arrays["K_DEFAULT"] and arrays["K_WHAT"][f"{u}:{k}"]


def test_get_answers_vm_sh(tmp_path):
    exp = make_exp(tmp_path, HEADER + GOOD)
    r = units_py("get", exp, "wired", "limit_s", "script", "netns")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"30\n{exp}/rep/wired.sh\nwire:1400\n", "")
    r = units_py("get", exp, "solo", "script")
    assert (r.returncode, r.stdout) == (0, f"{exp}/solo/solo.sh\n")
    r = units_py("get", exp, "nosuch", "limit_s")
    assert (r.returncode, r.stdout, r.stderr) == (3, "", "")
    r = units_py("get", exp, "one", "colour")
    assert r.returncode == 2 and r.stdout == ""


def test_get_reads_the_rows_unchecked(tmp_path):
    """get is vm.sh's lookup, as its awk was: a unit's first line of ten columns, the rest of
    the table not checked (vm.sh refuses netns 2 itself, tests/test_guest_wire.py)."""
    exp = make_exp(tmp_path, HEADER + "ns2 - named run no 1 30 no 2 yes\n"
                   "ns2 rep labs run no 1 45 no 1 yes\none two\n# knob: bad\n")
    r = units_py("get", exp, "ns2", "netns", "limit_s", "script")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"2\n30\n{exp}/ns2/ns2.sh\n", "")
    assert units_py("get", exp, "one", "netns").returncode == 3
    assert units_py("shell", exp).returncode == 1


GUEST = (HEADER + GOOD + "# guest: one: names host:getent bin:curl_pool tls: why: with colons\n"
         "# guest: wired: host:nginx bin:curl_pool bin:tls_peer: why\n")


def test_get_answers_a_unit_s_guest_needs(tmp_path):
    """vm.sh's lookup: the needs of the unit's "# guest:" line as one field, in the line's
    order, an empty one for a unit without a line; guest-bins: every bin: program once."""
    exp = make_exp(tmp_path, GUEST)
    r = units_py("get", exp, "one", "netns", "guest", "limit_s")
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "1\nnames host:getent bin:curl_pool tls\n30\n", "")
    r = units_py("get", exp, "solo", "guest")
    assert (r.returncode, r.stdout, r.stderr) == (0, "\n", "")
    r = units_py("get", exp, "nosuch", "guest")
    assert (r.returncode, r.stdout, r.stderr) == (3, "", "")
    r = units_py("guest-bins", exp)
    assert (r.returncode, r.stdout, r.stderr) == (0, "curl_pool\ntls_peer\n", "")
    r = units_py("guest-bins", make_exp(tmp_path / "none", HEADER + GOOD))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    # the table as run.sh reads it takes the same lines
    assert tcplab_units.load(str(exp)).guest == {
        "one": ["names", "host:getent", "bin:curl_pool", "tls"],
        "wired": ["host:nginx", "bin:curl_pool", "bin:tls_peer"]}


@pytest.mark.parametrize("case", ["guest-unknown", "guest-bin-path", "guest-host-path",
                                  "guest-need-twice", "guest-line-twice"])
def test_get_refuses_a_bad_guest_line(tmp_path, case):
    """get reads the rows unchecked, but not the "# guest:" lines: vm.sh run by hand acts on
    each need, so a bad one is refused as run.sh refuses it, whichever unit is asked for."""
    table, tail = BAD[case]
    exp = make_exp(tmp_path, HEADER + table)
    want = f"run.sh: {exp}/units{tail}\n"
    for args in (("get", exp, "solo", "guest"), ("get", exp, "one", "limit_s"),
                 ("guest-bins", exp)):
        r = units_py(*args)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", want)


def test_the_real_table_s_guest_needs(tmp_path):
    """Every bin: need of experiments/units is a program the Makefile builds (fixtures/NAME.c
    or probes/NAME.c: the parser checks the name's form only, as an installed table has no
    sources); the units that have always had needs still have them."""
    t = tcplab_units.load(os.path.join(TOP, "experiments"))
    for unit, needs in t.guest.items():
        for need in needs:
            if need.startswith("bin:"):
                prog = need[4:]
                assert any(os.path.isfile(os.path.join(TOP, d, prog + ".c"))
                           for d in ("fixtures", "probes")), (unit, need)
    assert t.guest["p09-curl-nginx"] == ["bin:curl_pool", "host:nginx", "host:tcpdump"]
    assert all("tls" in t.guest[u] for u in t.names if u.startswith("p08-tls-"))
    assert all("names" in t.guest[u] for u in t.names if u.startswith("p07-"))


def test_vm_sh_knows_no_unit_by_name():
    """A unit's guest needs are table lines: no line of vm.sh's code (comments aside) names a
    unit of the table or a unit-name pattern such as p07-*."""
    with open(os.path.join(TOP, "experiments", "guest", "vm.sh")) as f:
        code = [(n, line) for n, line in enumerate(f, 1) if not line.lstrip().startswith("#")]
    names = [u["unit"] for u in tcplab.read_units(os.path.join(TOP, "experiments", "units"))]
    pattern = re.compile(r"\bp[0-9]{2}-|\b(" + "|".join(map(re.escape, names)) + r")\b")
    named = [f"{n}: {line.strip()}" for n, line in code
             if pattern.search(line.split(" #")[0].split("\t#")[0])]
    assert named == []


KNOBS = (HEADER + GOOD + "# knob: one: n: 3: 1..5: env TL_T_N: a number\n"
         "# knob: one: mode: a: a|b: a word\n"
         "# knob: wired: n: 2: 1..9: the wired one's n\n")


def knobs(exp, *args, env=None):
    """`knobs EXP ARGS...` (ARGS with its '--' and units) evaluated as run.sh's resolve_knobs
    does: (status, K_VALUE, K_GIVEN, the TL_UNIT_KNOBS_* it exports) or (status, the line)."""
    r = decoded(subprocess.run([PY, UNITS_PY, "knobs", str(exp), *args], capture_output=True,
                               timeout=30, env=dict(os.environ, **(env or {}))))
    if r.returncode != 0:
        assert r.stderr == "", r.stderr
        return r.returncode, r.stdout
    dump = r"""
for a in K_VALUE K_GIVEN; do
	declare -n arr=$a
	for k in "${!arr[@]}"; do printf '%s\0%s\0%s\0' "$a" "$k" "${arr[$k]}"; done
	unset -n arr
done
for v in "${!TL_UNIT_KNOBS_@}"; do printf 'export\0%s\0%s\0' "$v" "${!v}"; done
"""
    b = subprocess.run(["bash", "-c", 'set -eu; declare -A K_VALUE K_GIVEN; eval "$(cat)"' + dump],
                       input=r.stdout, capture_output=True, text=True, timeout=30)
    assert b.returncode == 0, b.stderr
    words = b.stdout.split("\0")[:-1]
    out = {"K_VALUE": {}, "K_GIVEN": {}, "export": {}}
    for i in range(0, len(words), 3):
        out[words[i]][words[i + 1]] = words[i + 2]
    return 0, out["K_VALUE"], out["K_GIVEN"], out["export"]


def test_knobs_resolve_set_env_default(tmp_path):
    exp = make_exp(tmp_path, KNOBS)
    assert knobs(exp, "--", "one", "wired") == (
        0, {"one:n": "3", "one:mode": "a", "wired:n": "2"}, {}, {})
    # --set reaches every unit of the run that has the name; the env variable only its own
    assert knobs(exp, "--set", "n=4", "--", "one", "wired") == (
        0, {"one:n": "4", "one:mode": "a", "wired:n": "4"}, {"one:n": "1", "wired:n": "1"}, {})
    assert knobs(exp, "--", "one", "wired", env={"TL_T_N": "5"}) == (
        0, {"one:n": "5", "one:mode": "a", "wired:n": "2"}, {"one:n": "1"}, {})
    assert knobs(exp, "--set", "mode=b", "--", "one", env={"TL_T_N": ""})[1:3] == (
        {"one:n": "3", "one:mode": "b"}, {"one:mode": "1"})


def test_knobs_export_one_variable_per_unit(tmp_path):
    """A --kernel guest: each unit's own values, even where two units share a knob's name."""
    exp = make_exp(tmp_path, KNOBS)
    _, _, _, exported = knobs(exp, "--export", "--set", "mode=b", "--", "one", "wired", "solo")
    assert exported == {"TL_UNIT_KNOBS_ONE": "N=3 MODE=b", "TL_UNIT_KNOBS_WIRED": "N=2"}


@pytest.mark.parametrize("args,env,line", [
    (["--set", "n=6"], {}, "--set n='6': want a whole number 1..5 (one)"),
    (["--set", "n=9"], {}, "--set n='9': want a whole number 1..5 (one)"),
    (["--set", "mode=c"], {}, "--set mode='c': want one of a, b (one)"),
    (["--set", "n=1", "--set", "n=2"], {}, "--set n given twice"),
    (["--set", "--"], {}, "--set '--': want NAME=VALUE (./run.sh UNIT --help lists its knobs)"),
    (["--set", "n=\u00e9\n"], {}, "--set n='???': want a whole number 1..5 (one)"),
    (["--set", "x=1"], {}, "--set x: no such knob for one wired solo (one has n, mode; "
                           "wired has n; ./run.sh UNIT --help)"),
    ([], {"TL_T_N": "07"}, "TL_T_N='07' (knob n of one): want a whole number 1..5"),
])
def test_knobs_refused_in_one_line(tmp_path, args, env, line):
    exp = make_exp(tmp_path, KNOBS)
    assert knobs(exp, *args, "--", "one", "wired", "solo", env=env) == (2, line + "\n")


def test_knobs_no_units_and_a_bad_table(tmp_path):
    exp = make_exp(tmp_path, KNOBS)
    assert knobs(exp, "--set", "n=1", "--") == (
        2, "--set n: --set needs the units named (./run.sh UNIT --set NAME=VALUE)\n")
    bad = make_exp(tmp_path / "bad", HEADER + "one rep labs run no 1 30 no 1\n")
    r = units_py("knobs", bad, "--", "one")
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r
