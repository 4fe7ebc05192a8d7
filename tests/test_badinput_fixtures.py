"""Bad input to the fixtures, table-driven: every option of every fixture against the bad
values of its kind (missing argument, empty, junk, trailing junk, negative, 2^63 and beyond,
out of range, unknown names, lists with empty items), plus unknown options, extra arguments,
required options left out, and a port in use for every fixture that binds.

Each case must exit 2 (usage) without a signal, print exactly ONE line on stderr that names the
program and the option, print nothing on stdout, show no traceback or sanitizer report, and be
done within 5 s.  The table mirrors each fixture's option table (fixtures/*.c, `opts[]`) and its
usage; docs/fixtures.md explains the rules.  tests/test_reliability_badinput.py covers bad -p
values and a few cases per program; those exact cases are left out here.
"""
import os
import subprocess
import time

import pytest

from conftest import in_ns

PORT = "21014"
SANITIZER_WORDS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                   "runtime error:", "Traceback")

# Option kinds: ("num", min, max), ("port",), ("addr",), ("str",), ("flag",),
# ("choice", names), ("list", names).
ADDR, STR, FLAG, PORTK = ("addr",), ("str",), ("flag",), ("port",)


def num(lo, hi):
    return ("num", lo, hi)


# program: (the smallest good argv, {option letter: kind})
FIXTURES = {
    "listener": (["-p", PORT, "-m", "never"],
                 {"p": PORTK, "a": ADDR, "b": num(0, 65535),
                  "m": ("choice", ["never", "close", "full"])}),
    "connect_block": (["-p", PORT], {"p": PORTK, "a": ADDR, "s": num(1, 127), "H": FLAG}),
    "connect_many": (["-p", PORT, "-n", "1"],
                     {"p": PORTK, "a": ADDR, "n": num(1, 1000000), "r": STR}),
    "connect_timeout": (["-p", PORT, "-t", "100", "-m", "keep"],
                        {"p": PORTK, "a": ADDR, "t": num(0, 3600000),
                         "m": ("choice", ["close", "keep"]), "k": num(0, 3600000)}),
    "accept_server": (["-p", PORT], {"p": PORTK, "a": ADDR, "b": num(0, 65535),
                                     "e": num(1, 60000)}),
    "accept_client": (["-p", PORT, "-c", "1", "-n", "1"],
                      {"p": PORTK, "a": ADDR, "c": num(1, 256), "d": num(1, 600000),
                       "n": num(1, 1000000), "t": num(1, 600000), "r": STR}),
    "accept_latency": (["-p", PORT], {"p": PORTK, "a": ADDR,
                                      "m": ("list", ["pending", "wake"]),
                                      "n": num(1, 100000), "w": num(0, 10000),
                                      "c": ("choice", ["any", "same", "split"])}),
    "connect_modes": (["-p", PORT], {"p": PORTK, "a": ADDR,
                                     "m": ("list", ["so-error", "poll-only", "wait-so-error",
                                                    "so-type", "blocking"]),
                                     "n": num(1, 100000), "w": num(0, 10000),
                                     "W": num(0, 1000000), "1": FLAG, "r": STR}),
    "echo_server": (["-p", PORT, "-b", "epoll"],
                    {"p": PORTK, "a": ADDR, "b": ("choice", ["select", "poll", "epoll"]),
                     "i": num(1, 3600000), "C": num(0, 1023)}),
    "echo_load": (["-p", PORT], {"p": PORTK, "a": ADDR, "k": num(0, 100000),
                                 "c": num(1, 1024), "l": num(1, 65536), "w": num(1, 60000),
                                 "u": num(0, 60000), "q": FLAG, "P": num(1, 4194304),
                                 "s": FLAG, "C": num(0, 1023)}),
    "queue_clients": (["-p", PORT, "-n", "1"],
                      {"p": PORTK, "a": ADDR, "n": num(1, 512), "m": ("choice", ["seq", "burst"]),
                       "B": num(1, 65535), "s": num(1, 65536), "w": num(0, 60000), "H": FLAG}),
    "kmsg_watch": ([], {"g": STR, "t": FLAG}),
    "fill_sender": (["-p", PORT], {"p": PORTK, "a": ADDR, "b": num(1, 1073741823),
                                   "u": num(0, 2147483647), "c": num(1, 16777216)}),
    "stall_reader": (["-p", PORT], {"p": PORTK, "a": ADDR, "r": num(1, 1073741823)}),
    "rr_server": (["-p", PORT], {"p": PORTK, "a": ADDR, "R": num(1, 65536), "q": FLAG}),
    "rr_client": (["-p", PORT, "-n", "1"],
                  {"p": PORTK, "a": ADDR, "n": num(1, 100000),
                   "w": ("choice", ["two", "writev", "more", "cork"]), "N": FLAG, "b": FLAG,
                   "B": num(1, 65536), "R": num(1, 65536), "t": num(1, 600000), "r": STR,
                   "k": FLAG}),
    "stream_send": (["-p", PORT], {"p": PORTK, "a": ADDR, "n": num(1, 67108864),
                                   "C": ("choice", ["cubic", "bbr", "reno"]),
                                   "i": num(0, 60000)}),
    "stream_recv": (["-p", PORT], {"p": PORTK, "a": ADDR, "l": num(1, 16777216), "w": FLAG,
                                   "L": num(1, 16777216), "H": FLAG}),
    "peer": (["-r", "server", "-p", PORT],
             {"r": ("choice", ["client", "server"]), "p": PORTK, "a": ADDR,
              "B": num(1, 65535), "R": num(0, 1), "n": num(0, 1000000), "s": STR}),
    "curl_pool": (["-p", PORT], {"p": PORTK, "a": ADDR, "n": num(1, 1000), "b": num(2, 1000),
                                 "i": num(0, 600000), "H": FLAG, "d": STR}),
}
# Options without which the fixture refuses to run ("missing -X ...").
REQUIRED = {
    "listener": "pm", "connect_block": "p", "connect_many": "pn", "connect_timeout": "ptm",
    "accept_server": "p", "accept_client": "pc", "accept_latency": "p", "connect_modes": "p",
    "echo_server": "pb", "echo_load": "p", "fill_sender": "p", "stall_reader": "p",
    "rr_server": "p", "rr_client": "pn",
    "stream_send": "p", "stream_recv": "p",
    "queue_clients": "pn", "kmsg_watch": "", "peer": "rp", "curl_pool": "p",
}
# Fixtures that bind -p themselves: a second one on a port in use is the user's mistake.
BINDERS = {"listener": [], "accept_server": [], "echo_server": [], "accept_latency": ["-n", "1",
                                                                                      "-w", "0"],
           "stall_reader": [], "rr_server": [], "stream_recv": [], "peer": []}

# Options that are good alone but not together (checked after parsing, in each fixture's own
# code), and the word the one line must hold.
CONFLICTS = [
    ("listener", ["-p", PORT, "-b", "1", "-m", "full"], "backlog 0"),
    ("connect_timeout", ["-p", PORT, "-t", "100", "-m", "close", "-k", "5"], "-k needs -m keep"),
    ("accept_client", ["-p", PORT, "-c", "4"], "missing -d DURATION_MS or -n REQUESTS"),
    ("connect_modes", ["-p", PORT, "-1"], "exactly one mode"),
    ("connect_modes", ["-p", PORT, "-1", "-m", "blocking", "-n", "5"], "conflicts"),
    ("connect_modes", ["-p", PORT, "-1", "-m", "blocking", "-w", "0"], "conflicts"),
    ("connect_modes", ["-p", PORT, "-1", "-m", "blocking,so-error"], "exactly one mode"),
    ("echo_load", [], "missing -p PORT (or -s)"),
    ("echo_load", ["-s", "-p", PORT], "-s runs its own echo"),
    ("echo_load", ["-s", "-k", "5"], "-s measures the client alone"),
    ("echo_load", ["-s", "-P", "1"], "-s measures the client alone"),
    ("echo_load", ["-p", PORT, "--quick=1"], "option '--quick=1' takes no argument"),
    ("echo_load", ["-p", PORT, "--quickly"], "unknown option '--quickly'"),
    ("queue_clients", ["-p", PORT, "-n", "3", "-B", "65534"], "BASEPORT+N-1 = 65536"),
    ("peer", ["-r", "server", "-p", PORT, "-B", "5"], "-B is for -r client"),
    ("peer", ["-r", "client", "-p", PORT, "-n", "0"], "-n 0 (until stopped) is for -r server"),
    ("peer", ["-r", "client", "-p", PORT, "-s", "send:5,close,recv:1"], "after close"),
    ("peer", ["-r", "client", "-p", PORT, "-s", "sned:5"], "-s: 'sned:5': unknown step"),
    ("peer", ["-r", "client", "-p", PORT, "-s", "send:0"], "out of range"),
    ("curl_pool", ["-p", PORT, "-n", "3", "-b", "4"], "past the last request"),
    ("curl_pool", ["-p", PORT, "-H"], "-i and -H need -b"),
    ("curl_pool", ["-p", PORT, "-i", "5"], "-i and -H need -b"),
    ("curl_pool", ["-p", PORT, "-b", "2", "-H", "-i", "5"], "exclude each other"),
]

BIG = ["9223372036854775808", "-9223372036854775809", "18446744073709551616",
       "99999999999999999999999999"]


def bad_values(kind):
    """(value, what the one line must say besides the option) for one kind of option."""
    k = kind[0]
    if k == "num":
        lo, hi = kind[1], kind[2]
        vals = [("", "not a whole number"), ("abc", "not a whole number"),
                ("5x", "not a whole number"), (" 5", "not a whole number"),
                ("+5", "not a whole number"), ("0x10", "not a whole number"),
                ("1.5", "not a whole number"), ("1e3", "not a whole number"),
                (str(lo - 1), "out of range"), (str(hi + 1), "out of range")]
        if lo - 1 != -1:
            vals.append(("-1", "out of range"))
        vals += [(v, "out of range") for v in BIG]
        return vals
    if k == "port":     # BAD_PORTS of test_reliability_badinput.py are not repeated here
        return [(v, "") for v in ["65535x", " 80", "+80", "0x50", "80.0"] + BIG]
    if k == "addr":
        return [(v, "") for v in ["", "localhost", "127.0.0.1 ", "1.2.3.4.5", "[::1]",
                                  "::1%lo0x", "127.1.1.256"]]
    if k == "str":
        return [("", "empty")]
    if k == "choice":
        first = kind[1][0]
        return [(v, "want") for v in ["", first.upper(), first + "x", first[:-1],
                                      first + "," + kind[1][-1], " " + first]]
    if k == "list":
        a, b = kind[1][0], kind[1][-1]
        return [("", "empty"), (",", "empty"), (a + ",", "empty"), ("," + a, "empty"),
                (a + ",," + b, "empty"), (a + "," + a, "twice"), ("bogus", "unknown"),
                (a + ",bogus", "unknown"), (a + ", " + b, "unknown"), (a.upper(), "unknown")]
    return []


def with_opt(base, opt, value):
    """base with -opt value (replacing a -opt that base has)."""
    argv, i = [], 0
    while i < len(base):
        if base[i] == "-" + opt:
            i += 2
            continue
        argv.append(base[i])
        i += 1
    return argv + ["-" + opt, value]


def without(base, opt):
    return [a for i, a in enumerate(base)
            if a != "-" + opt and (i == 0 or base[i - 1] != "-" + opt)]


def option_cases():
    cases = []
    for prog, (base, opts) in FIXTURES.items():
        for opt, kind in opts.items():
            for value, word in bad_values(kind):
                cases.append((prog, with_opt(base, opt, value), ["-" + opt, word]))
            if kind != FLAG:    # the option last, its argument missing
                cases.append((prog, without(base, opt) + ["-" + opt],
                              [f"-{opt} needs an argument"]))
        for opt in REQUIRED[prog]:
            cases.append((prog, without(base, opt), [f"missing -{opt}"]))
        cases += [
            (prog, base + ["-Z"], ["unknown option -Z"]),
            (prog, base + ["-%"], ["unknown option -%"]),
            (prog, base + ["--bogus"], ["unknown option '--bogus'"]),
            (prog, base + ["extra"], ["unexpected argument 'extra'"]),
            (prog, base + ["--", "-h"], ["unexpected argument '-h'"]),
            (prog, base + ["-"], ["unexpected argument '-'"]),
            (prog, ["one", "two"] + base, ["unexpected argument 'one'"]),
        ]
    cases += [(prog, args, [word]) for prog, args, word in CONFLICTS]
    return cases


def known_elsewhere():
    """The (program, argv) pairs tests/test_reliability_badinput.py already runs."""
    try:
        import test_reliability_badinput as other
        return {(p, tuple(a)) for p, a, _ in other.all_cases()}
    except (ImportError, AttributeError):
        return set()


CASES = [c for c in option_cases() if (c[0], tuple(c[1])) not in known_elsewhere()]


def case_id(case):
    prog, args, _ = case
    return prog + " " + " ".join(repr(a) if a == "" or " " in a else a for a in args)


def check_one_line(argv, prog, words, stdout_empty=True):
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    took = time.monotonic() - t0
    what = f"{argv}: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}"
    assert took < 5, what
    assert r.returncode == 2, what
    assert not any(w in r.stderr for w in SANITIZER_WORDS), what
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, what
    assert r.stderr.startswith(prog + ": "), what
    assert all(w in r.stderr for w in words), what
    if stdout_empty:
        assert r.stdout == "", what


def test_the_table_is_big_enough():
    assert len(CASES) >= 250, len(CASES)


def test_every_option_of_every_fixture_has_cases(bindir):
    """The table knows every option each fixture's -h lists, and no option -h does not list."""
    for prog, (_, opts) in FIXTURES.items():
        r = subprocess.run([os.path.join(bindir, prog), "-h"], capture_output=True, text=True,
                           timeout=5)
        listed = {line.split()[0][1:] for line in r.stdout.splitlines()
                  if line.startswith("  -") and line.split()[0] != "-h"}
        listed = {o.rstrip(",") for o in listed}
        assert listed == set(opts), f"{prog}: -h lists {sorted(listed)}, table {sorted(opts)}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bad_option(bindir, case):
    prog, args, words = case
    check_one_line([os.path.join(bindir, prog)] + args, prog, words)


@pytest.mark.netns
@pytest.mark.parametrize("prog", sorted(BINDERS))
def test_port_in_use(netns, bindir, prog):
    """A second fixture on a port a listener holds: 'port N in use', exit 2, one line."""
    holder = subprocess.Popen(in_ns(netns, [os.path.join(bindir, "listener"), "-p", PORT,
                                            "-m", "never"]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().startswith("ready "), holder.stderr.read()
        base = FIXTURES[prog][0]
        # accept_latency prints its start line before it binds, the others bind first
        check_one_line(in_ns(netns, [os.path.join(bindir, prog)] + base + BINDERS[prog]), prog,
                       [f"port {PORT} in use"], stdout_empty=prog != "accept_latency")
    finally:
        holder.terminate()
        holder.communicate(timeout=5)
