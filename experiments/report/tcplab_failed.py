"""tcplab_failed.py — the .txt/.json of a unit that failed: its collect script exited non-zero,
was stopped at its limit_s, or sent nothing back from a guest; or its report refused the raw
data.  run.sh calls it for every such unit, so a failed unit is never dropped: its outputs say
"failed: <reason>" and hold what was collected (the raw files with their sizes, the last lines
of the collect script's stderr, the exit status or signal, when and how long it ran).
docs/output-format.md ("A failed unit") explains every line and key.

usage: tcplab_failed.py OUTDIR NAME RAWDIR --why TEXT [--unit U] [--report R]
           [--stage collect|report] [--kernel REL] [--exit N] [--started UTC] [--ran-s S]
           [--log FILE] [--console FILE]

NAME is the outputs' name (NAME.txt, NAME.json: the unit's own, or its report's for a report
that refused); RAWDIR the unit's raw directory (raw/<unit>/, kept as it was left).  --log is a
copy of the collect script's stderr (a host run); --console a guest's vm-console.log, from which
the unit's own lines (between init's "U: start" and "U: done" lines) are taken.  Either is
copied whole into RAWDIR (collect-stderr.txt, console.txt); without either, the copy already
in RAWDIR is read, so the outputs can be written again from a kept raw directory.  Reading never refuses: a partial
unit's files are exactly the ones that may be cut off.  Standard library and tcplab only."""
import argparse
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys

import tcplab as t

TAIL = 20                   # lines of the collect script's stderr in the outputs
MAX_LOG_BYTES = 1 << 20     # the part of a log read (its end)
MAX_FILES = 2000            # raw files listed (a unit writes a few hundred at most)
STAGES = ("collect", "report")
# init (experiments/guest/initramfs/init) frames each unit's console output with these lines
GUEST_START = re.compile(r"tcplab: (?P<u>[a-z0-9][a-z0-9-]*): start \(at most (?P<s>[0-9]+) s\)$")
GUEST_DONE = re.compile(r"tcplab: (?P<u>[a-z0-9][a-z0-9-]*): done rc=(?P<rc>[a-z0-9]+) "
                        r"\((?P<t0>[0-9.]+) \.\. (?P<t1>[0-9.]+) s\)$")


def _text(path, cap=MAX_LOG_BYTES):
    """The end of a file (at most cap bytes) as text; None when it cannot be read.  Never
    refuses a cut-off or binary file: that is what a unit that stopped leaves."""
    try:
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        with open(path, "rb") as f:
            if st.st_size > cap:
                f.seek(st.st_size - cap)
            data = f.read(cap)
    except OSError:
        return None
    return data.replace(b"\0", b"?").decode("utf-8", errors="replace")


def raw_listing(rawdir):
    """Every entry under rawdir, sorted: {"name": path relative to rawdir, "bytes": size, or
    null for what is not a regular file, "kind": null, or "symbolic link", "a FIFO"...}."""
    out = []
    for top, dirs, files in os.walk(rawdir):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            regular = os.path.isfile(path) and not os.path.islink(path)
            out.append({"name": os.path.relpath(path, rawdir),
                        "bytes": st.st_size if regular else None,
                        "kind": None if regular else t.file_kind(st.st_mode)})
            if len(out) >= MAX_FILES:
                return sorted(out, key=lambda f: f["name"])
    return sorted(out, key=lambda f: f["name"])


def program_errors(rawdir, files, n=10):
    """The last line of each non-empty *.err file (a program's stderr: collect.sh's tl_bg), the
    newest first, at most n: {"file", "last"}."""
    errs = []
    for f in files:
        if not f["name"].endswith(".err") or not f["bytes"]:
            continue
        path = os.path.join(rawdir, f["name"])
        lines = [line for line in (_text(path, 4096) or "").splitlines() if line.strip()]
        if lines:
            try:
                mtime = os.lstat(path).st_mtime_ns
            except OSError:
                mtime = 0
            errs.append((mtime, f["name"], lines[-1][:300]))
    errs.sort(key=lambda e: (-e[0], e[1]))
    return [{"file": name, "last": last} for _, name, last in errs[:n]]


def guest_lines(console_text, unit):
    """The console lines of unit's run in a guest (init's start line to its done line, or to the
    end when the guest stopped first) → (lines, {"limit_s", "rc", "t0", "t1"} of what init said)."""
    lines, info, inside = [], {}, False
    for raw in console_text.splitlines():
        line = raw.rstrip("\r")
        m = GUEST_START.search(line)
        if m and m["u"] == unit:
            lines, info, inside = [line], {"limit_s": int(m["s"])}, True
            continue
        if not inside:
            continue
        lines.append(line)
        m = GUEST_DONE.search(line)
        if m and m["u"] == unit:
            info.update(rc=m["rc"], t0=float(m["t0"]), t1=float(m["t1"]))
            inside = False
    return lines, info


def exit_fields(code):
    """run.sh's status word for the collect script → (exit int or None, signal name or None)."""
    if code is None or not re.fullmatch(r"[0-9]{1,3}", code):
        return None, None
    n = int(code)
    if n > 128:
        try:
            return n, "SIG" + signal.Signals(n - 128).name.removeprefix("SIG")
        except ValueError:
            return n, None
    return n, None


def _copy_log(text, rawdir, name):
    """text into rawdir/name (a new file: what was collected is never overwritten)."""
    path = os.path.join(rawdir, name)
    if text is None or os.path.lexists(path) or not os.path.isdir(rawdir):
        return None
    t.atomic_write(path, text if text.endswith("\n") or not text else text + "\n")
    return name


def _collected_at(rawdir):
    text = _text(os.path.join(rawdir, "collected-at.txt"), 4096)
    first = (text or "").strip().splitlines()[:1]
    if first and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z", first[0]):
        return first[0]
    return None


def reason_of(why):
    """The status line ("failed: X (exit 1 after 7 s)", "timed out after 60 s") → the reason
    that follows "failed: " in the outputs."""
    why = " ".join(why.split())
    return why[len("failed: "):] if why.startswith("failed: ") else why


def build(a):
    """The failed outputs' (lines, obj) from the parsed arguments; copies the log into raw."""
    rawdir = a.rawdir
    exists = os.path.isdir(rawdir)
    log_name, log_text, guest = None, None, None
    if not a.console and not a.log and exists:    # written out again from a kept raw directory
        if os.path.lexists(os.path.join(rawdir, "console.txt")):
            a.console = os.path.join(rawdir, "console.txt")
        elif os.path.lexists(os.path.join(rawdir, "collect-stderr.txt")):
            a.log = os.path.join(rawdir, "collect-stderr.txt")
    if a.console:
        con = _text(a.console)
        if con is not None:
            lines, guest = guest_lines(con, a.unit)
            log_text = "\n".join(lines) + "\n" if lines else None
            log_name = _copy_log(log_text, rawdir, "console.txt") or (
                "console.txt" if os.path.lexists(os.path.join(rawdir, "console.txt")) else None)
    elif a.log:
        log_text = _text(a.log)
        log_name = _copy_log(log_text, rawdir, "collect-stderr.txt") or (
            "collect-stderr.txt" if os.path.lexists(os.path.join(rawdir, "collect-stderr.txt"))
            else None)
    files = raw_listing(rawdir) if exists else []
    tail = [line.rstrip("\r") for line in (log_text or "").splitlines()][-TAIL:]
    code, sig = exit_fields(a.exit)
    ran_s = a.ran_s
    if ran_s is None and guest and "t1" in guest:
        ran_s = round(guest["t1"] - guest["t0"], 2)
    reason = reason_of(a.why)
    collected = _collected_at(rawdir) if exists else None
    rel = f"raw/{os.path.basename(os.path.normpath(rawdir))}"
    obj = {
        "experiment": a.name, "kernel": a.kernel, "collected_at": collected,
        "load_average": None, "counters": None, "result": None, "errno": None, "elapsed_s": None,
        "status": "failed", "reason": reason, "stage": a.stage, "unit": a.unit,
        "report": a.report, "exit": code, "signal": sig,
        "guest_status": a.exit if a.console and code is None else None,
        "started_at": a.started or collected, "ran_s": ran_s,
        "raw_dir": rel, "raw_kept": exists,
        "raw_files": files, "raw_bytes": sum(f["bytes"] or 0 for f in files),
        "program_errors": program_errors(rawdir, files) if exists else [],
        "log": None if log_name is None and not tail else {
            "file": f"{rel}/{log_name}" if log_name else None,
            "source": "the guest's console" if a.console else "the collect script's stderr",
            "lines": len((log_text or "").splitlines()), "tail": tail},
    }
    try:    # the tcplab that ran the unit; a bad file in a partial directory is not recorded
        version = t.tcplab_version(rawdir) if exists else None
    except t.RawError:
        version = None
    if version is not None:
        obj["tcplab_version"] = version
    return text_lines(obj), obj


def text_lines(o):
    """The .txt: what failed and why, how it ran, the raw files, the log's last lines."""
    how = []
    if o["exit"] is not None:
        how.append(f"exit {o['exit']}" + (f" (128 + {o['signal']})" if o["signal"] else ""))
    elif o["guest_status"]:
        how.append(f"guest status {o['guest_status']}")
    if o["started_at"]:
        how.append(f"started {o['started_at']}")
    if o["ran_s"] is not None:
        how.append(f"ran {o['ran_s']:g} s")
    stage = ("its collect script" if o["stage"] == "collect"
             else f"its report {o['report']}.py (the raw data is complete)")
    lines = [f"{o['experiment']}: failed: {o['reason']}",
             t.header(o["kernel"], o["collected_at"]) or "kernel unknown",
             f"unit {o['unit']}: {stage} failed" + (f"; {', '.join(how)}" if how else ""),
             "this is not a result: nothing below was checked or reported, it is what the unit "
             "left"]
    if not o["raw_kept"]:
        lines.append(f"{o['raw_dir']}/: none (the unit wrote nothing that came back)")
    else:
        lines.append(f"{o['raw_dir']}/: {len(o['raw_files'])} file(s), {o['raw_bytes']} bytes, "
                     "kept as the unit left them")
        width = max([len(f["name"]) for f in o["raw_files"]] + [4])
        for f in o["raw_files"]:
            size = f["bytes"] if f["bytes"] is not None else f["kind"]
            lines.append(f"  {f['name']:<{width}}  {size:>10}")
    if o["program_errors"]:
        lines.append("the programs' stderr (the last line of each .err file, newest first):")
        lines += [f"  {e['file']}: {e['last']}" for e in o["program_errors"]]
    log = o["log"]
    if log and log["tail"]:
        where = f" ({log['file']}, {log['lines']} lines)" if log["file"] else ""
        lines.append(f"last {len(log['tail'])} line(s) of {log['source']}{where}:")
        lines += ["  " + line for line in log["tail"]]
    else:
        lines.append("no stderr lines were kept for it")
    return lines


def good_output(path):
    """Whether path is a report's .json that is not a failed one (a result this run replaces)."""
    text = _text(path, t.MAX_RAW_BYTES)
    if text is None:
        return False
    try:
        import json
        return json.loads(text).get("status") != "failed"
    except (ValueError, AttributeError):
        return False


def tracked(path):
    """Whether git tracks path (a committed reference); False without git or outside a clone."""
    git = shutil.which("git")
    if git is None:
        return False
    d = os.path.dirname(os.path.abspath(path))
    try:
        r = subprocess.run([git, "-C", d, "ls-files", "--error-unmatch", "--", os.path.basename(path)],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """Bad usage: one line on stderr, exit 2 (argparse would print the usage first)."""
        self.exit(2, f"{self.prog}: {message}\n")


def parse(argv):
    p = _Parser(prog="tcplab_failed.py", add_help=True)
    p.add_argument("outdir")
    p.add_argument("name")
    p.add_argument("rawdir")
    p.add_argument("--why", required=True)
    p.add_argument("--unit")
    p.add_argument("--report")
    p.add_argument("--stage", choices=STAGES, default="collect")
    p.add_argument("--kernel")
    p.add_argument("--exit")
    p.add_argument("--started")
    p.add_argument("--ran-s", type=float)
    p.add_argument("--log")
    p.add_argument("--console")
    a = p.parse_args(argv)
    for k in ("name", "unit", "report"):
        v = getattr(a, k)
        if v is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,99}", v):
            p.error(f"{k} '{v[:40]}': want a-z, 0-9 and '-'")
    if a.ran_s is not None and not 0 <= a.ran_s <= 1e7:
        p.error(f"--ran-s {a.ran_s}: want 0..1e7")
    a.unit = a.unit or a.name
    return a


def main(argv):
    a = parse(argv[1:])
    json_path = os.path.join(a.outdir, a.name + ".json")
    replaced = good_output(json_path)
    try:
        lines, obj = build(a)
        t.write_outputs(a.outdir, a.name, lines, obj)
    except OSError as e:
        print(f"tcplab_failed.py: {e.filename or a.outdir}: {e.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if replaced:
        # stdout: the words run.sh's last line quotes; stderr: the warning, where it happens
        what = "a committed reference" if tracked(json_path) else "a result"
        print(what)
        print(f"tcplab_failed.py: WARNING: {a.name}.txt/.json held {what}; they now say "
              f"'failed: {obj['reason']}'" +
              (" (git checkout -- them to get it back)" if what != "a result" else ""),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
