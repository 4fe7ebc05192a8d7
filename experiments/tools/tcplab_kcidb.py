#!/usr/bin/python3
"""tcplab kcidb: a run's KTAP (./run.sh --ktap) as a KCIDB submission (docs/kernel-matrix.md,
"KCIDB").

KCIDB is the database KernelCI collects test results in; it takes JSON of the kcidb-io schema
(v5.3 here: kcidb_io/schema/v05_03.py).  This makes one KCIDB test per KTAP test point:

  ok N UNIT                    PASS
  ok N UNIT # SKIP REASON      SKIP   (REASON in "comment")
  not ok N UNIT                FAIL   (the "# UNIT: REASON" line before it in "log_excerpt")
  not ok N UNIT # TIMEOUT S    ERROR  (it did not finish: the kernel's verdict is unknown)
  a planned N with no point    MISS   (after "Bail out!", or a stream cut short)

Each test's "path" is tcplab.UNIT (tcplab where a missing point's name is unknown), its "id"
ORIGIN:tcplab.RUN.N, RUN being --run-id or, by default, the first 16 hex digits of the KTAP's
SHA-256: the same KTAP sent twice gives the same ids (KCIDB merges them), another run others.
"duration" is run.sh's own "UNIT: done in N s" (whole seconds) where the KTAP has that line.
The kernel's checkout and build are not tcplab's to describe: whoever built the kernel under
test names its build with --build-id, and submits its checkout and build objects.

The KTAP must be what run.sh prints: a version line, the plan, test points numbered 1..N in
order, and, when present, a "# Totals:" line that agrees with them.  Anything else is refused
with one line (exit 1), bad usage exit 2, and nothing is printed on stdout.  It is bounded as
run.sh's is: a plan of at most MAX_PLAN points (one per unit), at most MAX_KTAP_BYTES, read from
a regular file (a FIFO or a device is refused without a wait) or from stdin (a pipe), so no
input makes it hang or work for long.
"""
import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import tcplab  # the reports' library (experiments/report/)

EXIT_OK, EXIT_DATA, EXIT_USAGE = 0, 1, 2
USAGE = "usage: tcplab kcidb --origin ORIGIN --build-id ORIGIN:ID [--run-id ID] [KTAP]"
HELP = USAGE + """

KTAP is a file ./run.sh --ktap wrote, or - (or nothing) for stdin (a pipe); at most 1 MiB and
a plan of at most 1000 test points.  The KCIDB JSON goes to stdout.
  --origin ORIGIN      the submitter's KCIDB origin (lowercase letters, digits, _)
  --build-id ORIGIN:ID the KCIDB id of the kernel build the units ran on
  --run-id ID          this run's part of every test id (default: the KTAP's SHA-256, 16 digits)
Exit status: 0 written, 1 the KTAP is not what run.sh prints, 2 bad usage."""
SCHEMA = {"major": 5, "minor": 3}
LOG_EXCERPT_MAX = 16384            # kcidb-io v5.3: test.log_excerpt maxLength
MAX_KTAP_BYTES = 1 << 20           # run.sh's KTAP of every unit is a few KiB
MAX_PLAN = 1000                    # run.sh plans one test point per unit (experiments/units)
ORIGIN_RE = re.compile(r"[a-z0-9_]+")               # kcidb-io: origin
ID_RE = re.compile(r"[a-z0-9_]+:[^\0]*")            # kcidb-io: every id and *_id
RUN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
NAME = r"[A-Za-z0-9_-]+"           # one component of a kcidb path
POINT = re.compile(rf"^(not ok|ok) ([0-9]+) ({NAME})(?: # (SKIP|TIMEOUT)\b ?(.*))?$")
VERSION = re.compile(r"^(KTAP version 1|TAP version 1[34])$")
PLAN = re.compile(r"^1\.\.([0-9]+)(?: # SKIP ?(.*))?$")
# counts of at most 9 digits: int() of a longer one can be slow or refused (4300 digits)
TOTALS = re.compile(r"^# Totals: pass:([0-9]{1,9}) fail:([0-9]{1,9}) xfail:([0-9]{1,9}) "
                    r"xpass:([0-9]{1,9}) skip:([0-9]{1,9}) error:([0-9]{1,9})$")
DONE = re.compile(rf"^# [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}} \[run\] ({NAME}): done in ([0-9]{{1,9}}) s$")
REASON = re.compile(rf"^# ({NAME}): (.+)$")
HEADER = re.compile(r"^# tcplab: (.*)$")


class Bad(Exception):
    """The KTAP is not what run.sh prints: exit 1 with one line."""


def parse(text):
    """The KTAP text → {"plan", "points" {N: point}, "bail", "header", "done", "totals"}."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or not VERSION.match(lines[0]):
        raise Bad("line 1: not a KTAP version line (want 'KTAP version 1')")
    ktap = {"plan": None, "points": {}, "bail": None, "header": None,
            "done": {}, "totals": None}
    reason = None        # the "# UNIT: REASON" line just before a test point
    for no, line in enumerate(lines[1:], 2):
        if "\0" in line or "\r" in line:
            raise Bad(f"line {no}: a NUL or carriage return")
        m = PLAN.match(line)
        if m:
            if ktap["plan"] is not None:
                raise Bad(f"line {no}: a second plan")
            if ktap["points"]:
                raise Bad(f"line {no}: the plan after test points (run.sh prints it first)")
            n = m.group(1)
            if len(n) > len(str(MAX_PLAN)) or int(n) > MAX_PLAN:
                raise Bad(f"line {no}: plan 1..{n[:20]}{'...' if len(n) > 20 else ''}: more than "
                          f"{MAX_PLAN} test points (run.sh plans one per unit)")
            ktap["plan"] = int(n)
            continue
        m = POINT.match(line)
        if m:
            if ktap["plan"] is None:
                raise Bad(f"line {no}: a test point before the plan")
            if ktap["bail"] is not None:
                raise Bad(f"line {no}: a test point after 'Bail out!'")
            n = int(m.group(2)) if len(m.group(2)) <= len(str(MAX_PLAN)) else None
            if n != len(ktap["points"]) + 1 or n > ktap["plan"]:
                raise Bad(f"line {no}: test point {m.group(2)[:20]}, want "
                          f"{len(ktap['points']) + 1} (plan 1..{ktap['plan']})")
            ok, name, directive, rest = m.group(1) == "ok", m.group(3), m.group(4), m.group(5)
            ktap["points"][n] = {"ok": ok, "name": name, "directive": directive,
                                 "text": rest or "", "line": line,
                                 "reason": reason if reason and reason[0] == name else None}
            reason = None
            continue
        if line.startswith("Bail out!"):
            ktap["bail"] = line[len("Bail out!"):].strip()
            continue
        m = TOTALS.match(line)
        if m:
            ktap["totals"] = [int(x) for x in m.groups()]
            continue
        if line.startswith("# Totals:"):
            raise Bad(f"line {no}: a '# Totals:' line run.sh does not print (six counts, "
                      "each of at most 9 digits)")
        if line.startswith("#") and (line == "#" or line.startswith("# ")):
            m = HEADER.match(line)
            if m and ktap["header"] is None:
                ktap["header"] = m.group(1)
            m = DONE.match(line)
            if m:
                ktap["done"][m.group(1)] = int(m.group(2))
            m = REASON.match(line)
            reason = (m.group(1), line[2:]) if m else None
            continue
        raise Bad(f"line {no}: neither a KTAP line nor a '# ' diagnostic: "
                  f"{line[:60]!r}{'...' if len(line) > 60 else ''}")
    if ktap["plan"] is None:
        raise Bad("no plan line (1..N)")
    if ktap["totals"] is not None:
        pts = ktap["points"].values()
        want = [sum(1 for p in pts if p["ok"] and p["directive"] != "SKIP"),
                sum(1 for p in pts if not p["ok"] and p["directive"] != "SKIP"), 0, 0,
                sum(1 for p in pts if p["directive"] == "SKIP"), 0]
        if ktap["totals"] != want:
            raise Bad("the '# Totals:' line (pass:{} fail:{} xfail:{} xpass:{} skip:{} error:{}) "
                      "disagrees with the test points".format(*ktap["totals"]))
    return ktap


def test_object(origin, build_id, run_id, n, point, ktap):
    t = {"id": f"{origin}:tcplab.{run_id}.{n}", "origin": origin, "build_id": build_id,
         "misc": {"ktap_test_number": n}}
    if ktap["header"] is not None:
        t["environment"] = {"comment": ktap["header"][:4096]}
    if point is None:
        t["path"] = "tcplab"
        t["status"] = "MISS"
        t["comment"] = (f"planned test point {n}: no result (Bail out! {ktap['bail']})"
                        if ktap["bail"] is not None else
                        f"planned test point {n}: no result (the KTAP ends before it)")
        return t
    t["path"] = f"tcplab.{point['name']}"
    t["misc"]["ktap_line"] = point["line"]
    if point["directive"] == "SKIP":
        t["status"] = "SKIP"
        t["comment"] = point["text"] or "skipped"
    elif point["ok"]:
        t["status"] = "PASS"
    else:
        t["status"] = "ERROR" if point["directive"] == "TIMEOUT" else "FAIL"
        if point["reason"] is not None:
            t["log_excerpt"] = point["reason"][1][:LOG_EXCERPT_MAX]
    if point["name"] in ktap["done"]:
        t["duration"] = ktap["done"][point["name"]]
    return t


def convert(text, origin, build_id, run_id=None):
    ktap = parse(text)
    if run_id is None:
        run_id = hashlib.sha256(text.encode()).hexdigest()[:16]
    tests = [test_object(origin, build_id, run_id, n, ktap["points"].get(n), ktap)
             for n in range(1, ktap["plan"] + 1)]
    return {"version": dict(SCHEMA), "tests": tests}


def usage(why):
    print(f"tcplab kcidb: {why} ({USAGE})", file=sys.stderr)
    return EXIT_USAGE


def main(argv):
    args, opt = argv[1:], {}
    if args in (["-h"], ["--help"]):
        print(HELP)
        return EXIT_OK
    pairs, files, unknown = tcplab.tool_words(args, ("--origin", "--build-id", "--run-id"))
    for a, value in pairs:
        if value is None:
            return usage(f"{a} needs a value")
        if a in opt:
            return usage(f"{a} given twice")
        opt[a] = value
    if unknown is not None:
        return usage(f"unknown option '{unknown[:40]}'")
    if "--origin" not in opt or "--build-id" not in opt:
        return usage("--origin and --build-id are needed (KCIDB requires both on every test)")
    origin, build_id, run_id = opt["--origin"], opt["--build-id"], opt.get("--run-id")
    if not ORIGIN_RE.fullmatch(origin):
        return usage(f"--origin '{origin[:40]}': want lowercase letters, digits and _ (KCIDB's origin)")
    if not ID_RE.fullmatch(build_id) or not build_id.startswith(origin + ":"):
        return usage(f"--build-id '{build_id[:40]}': want ORIGIN:ID, with the origin {origin}")
    if run_id is not None and not RUN_ID_RE.fullmatch(run_id):
        return usage(f"--run-id '{run_id[:40]}': want 1 to 64 letters, digits, _ or -")
    if len(files) > 1:
        return usage(f"one KTAP at a time, got {len(files)}")
    path = files[0] if files else "-"
    if path == "-" and sys.stdin.isatty():
        return usage("no KTAP: name a file, or pipe ./run.sh --ktap into it")
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_KTAP_BYTES + 1)
            if len(data) > MAX_KTAP_BYTES:
                raise tcplab.NotRegular(f"larger than {MAX_KTAP_BYTES} bytes")
        else:
            data = tcplab.regular_bytes(path, MAX_KTAP_BYTES)
        text = data.decode("utf-8")
        out = json.dumps(convert(text, origin, build_id, run_id), indent=1, sort_keys=True)
    except tcplab.NotRegular as e:
        print(f"tcplab kcidb: {path}: {e} (a pipe goes on stdin)"
              if path != "-" and "not a regular file" in str(e) else
              f"tcplab kcidb: {path}: {e}", file=sys.stderr)
        return EXIT_DATA
    except OSError as e:
        print(f"tcplab kcidb: {path}: {e.strerror}", file=sys.stderr)
        return EXIT_DATA
    except UnicodeDecodeError as e:
        print(f"tcplab kcidb: {path}: not UTF-8 (byte {e.start})", file=sys.stderr)
        return EXIT_DATA
    except Bad as e:
        print(f"tcplab kcidb: {path}: {e}", file=sys.stderr)
        return EXIT_DATA
    sys.stdout.write(out + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(tcplab.tool_main(main, "tcplab kcidb", EXIT_DATA))
