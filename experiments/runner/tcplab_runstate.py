#!/usr/bin/python3
"""tcplab_runstate — what a run owns and how it proves it: its locks, its record, the reaping of
what dead runs left, and the putting in place of a raw directory.

The runner's fourth part (docs/maintainers.md, "The runner, step by step"): the rules that
experiments/lib/runstate.sh kept in bash, written once, for bash to call (runstate.sh's rs_*
functions are one-line callers) and for the Python runner to import.  docs/reliability.md
explains the design; in short:

- A live run holds two flock(2) locks: its output directory, and its record in the state
  directory ($TCPLAB_STATE, or /run/tcplab for root, ${XDG_RUNTIME_DIR:-/tmp}/tcplab-UID for
  another user), which lists its id, pid, mode, output and temporary directories and every
  namespace it makes.  bash holds them through `hold`, a process that the kernel kills when
  run.sh dies (setpriv --pdeathsig KILL); a Python runner holds them on descriptors of its own.
- A run is dead when its record's lock can be taken.  The reaper deletes only the namespaces a
  dead run's record names (experiments/lib/netns.sh delete), kills only processes of that run in
  a user namespace below ours, and removes temporary files only in directories whose lock it holds.
- A raw directory is put in place by rename(2), never through a symlink tcplab did not make.

    tcplab_runstate.py [--prog P] [--top DIR] COMMAND ARGS...
      state-dir                      the state directory, made if need be, on stdout
      check-out [--allow-foreign] DIR
                                     DIR's physical path on stdout; else the reason on stdout,
                                     exit 1 (cannot write) or 2 (root and another user's DIR)
      hold --state S DIR [NEW RECORD]
                                     lock DIR (and NEW, renamed to RECORD), print "locked",
                                     "busy" and who holds DIR, or "error", and keep the locks
                                     until killed
      refuse-nested --state S --record R DIR
                                     exit 1, the reason on stdout, when DIR is inside or holds
                                     the output directory of another live run
      reap-stale --state S --record R --out O --outputs D --prefix NS
                                     what dead runs left, said on stdout, one line each
      reap-tmp [--tmp T] DIR         dead runs' temporary entries in DIR (its lock is ours)
      kill-userns ID                 kill run ID's processes in user namespaces below ours;
                                     prints how many
      install-dir --out O --tmp T [--version V] SRC DEST
                                     DEST (inside O) replaced whole by SRC, by rename(2)
      kill-dir-users DIR             SIGKILL every process holding DIR open
      reap-vm-dirs BASE              remove the abandoned BASE/tcplab-vm.* work directories

Lines "said" go to stdout, for run.sh's log(); a failure is one line "P: ..." on stderr and exit
1, unless said otherwise above.  Standard library only; run by Debian's /usr/bin/python3 -S.
"""

import errno
import fcntl
import fnmatch
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NETNS_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib", "netns.sh")


class Refused(Exception):
    """One line for the caller, and an exit status."""

    def __init__(self, msg, status=1, said=()):
        super().__init__(msg)
        self.status = status
        self.said = list(said)      # the lines to say first (what was done before the refusal)

    def reason(self, prog):
        """The refusal without PROG's "PROG: " (some messages carry it), for a caller that
        names the program itself."""
        msg = str(self)
        return msg[len(prog) + 2:] if msg.startswith(prog + ": ") else msg


# ---- small things -------------------------------------------------------------------------------

def rel(path, top):
    """PATH without TOP/ at its front (bash's ${path#"$TOP"/})."""
    return path[len(top) + 1:] if top and path.startswith(top + "/") else path


def rm_rf(path):
    """rm -rf PATH: a symlink is removed, never followed.  Returns whether PATH is gone."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
    return not os.path.lexists(path)


def sorted_glob(directory, pattern):
    """bash's "$directory"/PATTERN under LC_ALL=C: the matching entries, in byte order, a name
    starting with "." only when PATTERN does."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)
            and (pattern.startswith(".") or not n.startswith("."))]
    return [os.path.join(directory, n) for n in sorted(hits, key=os.fsencode)]


def try_lock(path):
    """An open read descriptor of PATH with an exclusive flock(2) on it, or None when the lock is
    taken; OSError when PATH cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def is_free(path):
    """Whether PATH's lock is free (taken and given back at once); False when it cannot be opened."""
    try:
        fd = try_lock(path)
    except OSError:
        return False
    if fd is None:
        return False
    os.close(fd)
    return True


def record_values(path, key):
    """The values of KEY=VALUE lines of record PATH, in order ([] when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "surrogateescape").split("\n")
    except OSError:
        return []
    return [line[len(key) + 1:] for line in lines if line.startswith(key + "=")]


def records(state, own=""):
    """The run records of STATE but OWN: regular files, not symlinks, in byte order."""
    return [f for f in sorted_glob(state, "run.*")
            if os.path.isfile(f) and not os.path.islink(f) and f != own]


def record_add(record, key, value):
    """One KEY=VALUE line at the end of RECORD (runstate.sh's make_ns writes the same form)."""
    with open(record, "a") as f:
        f.write(f"{key}={value}\n")


# ---- the state directory and the output directory ---------------------------------------------

def state_dir(prog, env=None):
    """The state directory: TCPLAB_STATE, else /run/tcplab for root (tmpfs, empty after a reboot),
    else ${XDG_RUNTIME_DIR:-/tmp}/tcplab-UID; made 0700 if need be, and refused unless it is a
    directory (not a symlink) that only this user owns and can write."""
    env = os.environ if env is None else env
    uid = os.getuid()
    if env.get("TCPLAB_STATE"):
        d = env["TCPLAB_STATE"]
    elif uid == 0:
        d = "/run/tcplab"
    else:
        d = f"{env.get('XDG_RUNTIME_DIR') or '/tmp'}/tcplab-{uid}"
    if not os.path.lexists(d):
        try:
            os.makedirs(d, mode=0o700)
            os.chmod(d, 0o700)      # mkdir -m 0700: whatever the umask
        except OSError:
            pass
    try:
        st = os.lstat(d)
        ok = (not os.path.islink(d) and os.path.isdir(d) and st.st_uid == uid
              and not st.st_mode & 0o022)
    except OSError:
        ok = False
    if not ok:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        raise Refused(f"{prog}: state directory {d} is not a directory only {name} owns and can write")
    return d


def check_out(path, allow_foreign=False):
    """PATH made if need be, writable, and for root owned by root unless ALLOW_FOREIGN; its
    physical path.  Refused (status 1, or 2 for another user's directory) without the program's
    name, which run.sh's die() adds."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        pass
    if not (os.path.isdir(path) and os.access(path, os.W_OK)):
        raise Refused(f"cannot write to {path}")
    if not os.access(path, os.X_OK):
        raise Refused(f"cannot enter {path}")
    phys = os.path.realpath(path)
    try:
        owner = os.stat(phys).st_uid
    except OSError:
        raise Refused(f"cannot enter {path}") from None
    if os.getuid() == 0 and owner != 0 and not allow_foreign:
        try:
            name = pwd.getpwuid(owner).pw_name
        except KeyError:
            name = "UNKNOWN"
        raise Refused(f"{phys} belongs to {name} (uid {owner}): refusing to write there as root "
                      "(--allow-foreign-out to do it anyway)", 2)
    return phys


def holder_of(state, out):
    """What a refused run says of who holds OUT: " (run.sh pid N in its PID namespace)" from the
    first record naming OUT, else ""."""
    for f in records(state):
        if out in record_values(f, "out"):
            return f" (run.sh pid {chr(10).join(record_values(f, 'pid'))} in its PID namespace)"
    return ""


def lock_out(out, new="", record=""):
    """Lock directory OUT and, with NEW and RECORD, create and lock NEW and rename it to RECORD
    (so a reaper never sees an unlocked record of a live run).  Returns the descriptors, kept
    open as long as the locks must last; None when OUT's lock is taken; OSError otherwise."""
    fd = try_lock(out)
    if fd is None:
        return None
    fds = [fd]
    try:
        if new:
            rfd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            fds.append(rfd)
            fcntl.flock(rfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(new, record)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def hold(state, out, new="", record=""):
    """The holder process of runstate.sh's rs_hold: lock_out, its one line on stdout, then the
    locks kept until the process is killed (SIGKILL: every catchable signal is ignored)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    try:
        fds = lock_out(out, new, record)
        line = "locked" if fds else "busy" + holder_of(state, out)
    except OSError:
        fds, line = None, "error"
    os.write(1, (line + "\n").encode("utf-8", "surrogateescape"))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    if not fds:
        return 1
    while True:
        signal.pause()


def nested_in(state, own, out):
    """The reason OUT may not be used, when it is inside, or contains, the output directory of
    another live run (a record of STATE whose lock is held): that run replaces raw/<unit>
    directories whole, and would move or delete this run's files mid-run, or this run its."""
    for f in records(state, own):
        try:
            fd = try_lock(f)
        except OSError:
            continue
        if fd is not None:          # free: a dead run's, the reaper's business
            os.close(fd)
            continue
        pids = record_values(f, "pid")
        pid = pids[0] if pids and pids[0] else "?"
        for o in record_values(f, "out"):
            if (out + "/").startswith(o + "/") and len(out) > len(o):
                return f"{out} is inside {o}, the output directory of a live run (run.sh pid {pid}): use another --out"
            if (o + "/").startswith(out + "/") and len(o) > len(out):
                return f"{out} contains {o}, the output directory of a live run (run.sh pid {pid}): use another --out"
    return None


# ---- the reaper ---------------------------------------------------------------------------------

def kill_userns_procs(run_id):
    """Kill, in rounds while a dying unit script still starts new ones, the processes of run
    RUN_ID that sit in a user namespace other than ours (the unprivileged units: unshare -rn).
    The id is 64 random bits; the namespace condition keeps this from ever touching a host
    process.  Returns how many it killed."""
    own = os.readlink("/proc/self/ns/user")
    tag = f"TL_RUN_ID={run_id}".encode()
    n = 0
    for _ in range(5):
        found = False
        for pid in sorted_glob("/proc", "[0-9]*"):
            try:
                with open(pid + "/environ", "rb") as f:
                    if tag not in f.read().split(b"\0"):
                        continue
                ns = os.readlink(pid + "/ns/user")
            except OSError:
                continue
            if ns == own:
                continue
            try:
                os.kill(int(os.path.basename(pid)), signal.SIGKILL)
            except OSError:
                continue
            found = True
            n += 1
        if not found:
            break
    return n


def reap_tmp(directory, top="", tmp=""):
    """The temporary entries of dead runs in DIRECTORY, whose lock the caller holds: .tmp-* (raw
    directories) and .NAME.XXXX.tmp-PID (reports being written); TMP, the caller's own, stays.
    A planted symlink is removed, not what it points to.  Returns the lines to say."""
    gone = [p for p in sorted_glob(directory, ".tmp-*") + sorted_glob(directory, ".*.tmp-*")
            if p != tmp]
    n = sum(rm_rf(p) for p in gone)
    return [f"removed {n} temporary file(s) in {rel(directory, top)}/ left by an interrupted run"] if n else []


def netns_delete(ns):
    """experiments/lib/netns.sh delete NS: its processes killed, it and its creation parent gone."""
    subprocess.run(["bash", NETNS_SH, "delete", ns], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def reap_record(path, out, prefix, top=""):
    """PATH is the record of a run that is gone (the caller holds its lock): its namespaces
    deleted, its unprivileged units stopped, its temporary directory removed when its output
    directory is free.  Returns (namespaces, processes, kept, lines); kept: a namespace would not
    go, so the record stays for the next run to try again."""
    run_id = mode = ""
    nns = nproc = 0
    kept = False
    lines = []
    name_ok = re.compile(re.escape(prefix) + r"-[A-Za-z0-9._-]+")
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "surrogateescape")
    except OSError:
        text = ""
    for line in text.split("\n"):
        key, _, val = line.partition("=")
        if key == "id":
            run_id = val
        elif key == "mode":
            mode = val
        elif key == "ns":
            if not name_ok.fullmatch(val):
                continue
            if os.path.exists(f"/run/netns/{val}") or os.path.exists(f"/run/netns/{val}-p"):
                netns_delete(val)
                nns += 1
                kept = kept or os.path.exists(f"/run/netns/{val}")
        elif key == "tmp":
            if not os.path.lexists(val):
                continue
            parent = val.rsplit("/", 1)[0]
            try:    # our own output directory is locked by us; another's lock must be free
                fd = None if parent == out else try_lock(parent)
            except OSError:
                continue
            if parent != out and fd is None:
                continue
            try:
                if rm_rf(val):
                    lines.append(f"removed {rel(val, top)}, left by an interrupted run")
            finally:
                if fd is not None:
                    os.close(fd)
    if run_id and mode == "userns":
        nproc = kill_userns_procs(run_id)
    return nns, nproc, kept, lines


def pid_alive(path):
    """Whether the run.sh of record PATH (its first pid= line) still exists; True when the line
    is missing or not a pid.  A SIGKILLed run's lock holder dies of its parent-death signal a
    moment after run.sh: until then the lock looks taken although the run is gone."""
    pids = record_values(path, "pid")
    if not pids or not re.fullmatch(r"[1-9][0-9]*", pids[0]):
        return True
    try:
        os.kill(int(pids[0]), 0)
    except (ProcessLookupError, OverflowError):     # no such process (bash's kill -0 fails too)
        return False
    except OSError:
        return True
    return True


def lock_within(fd, seconds):
    """flock -w SECONDS: FD's lock taken within SECONDS, looked for every 20 ms."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def reap_stale(state, own, out, outputs, prefix, top=""):
    """What runs that are gone left behind: for each record of STATE whose lock is free, its
    namespaces and processes; then the temporary files in OUT (ours alone, by its lock) and in
    every other OUTPUTS/*/ whose lock is free.  Returns the lines to say."""
    lines = []
    nns = nproc = bare = 0
    for f in records(state, own):
        try:
            fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                locked = not pid_alive(f) and lock_within(fd, 2)
            except OSError:
                locked = False
            # a record another reaper finished with (and removed) while we waited for its lock
            if locked and os.path.isfile(f):
                a, b, kept, said = reap_record(f, out, prefix, top)
                nns, nproc = nns + a, nproc + b
                lines += said
                if not kept:
                    try:
                        os.unlink(f)
                        # a run killed before it made a namespace or its temporary directory
                        # left its record alone: said too, so a reap is never silent (CI's
                        # interrupt storm: SIGKILL to the group 0.30 s into a run)
                        bare += not (a or b or said)
                    except OSError:
                        pass
        finally:
            os.close(fd)
    if bare:
        lines.append(f"removed {bare} run record(s) left by an interrupted run, which had "
                     "made nothing yet")
    if nproc:
        lines.append(f"stopped {nproc} process(es) left by an interrupted run")
    if nns:
        lines.append(f"removed {nns} namespace(s) left by an interrupted run")
    lines += reap_tmp(out, top)
    for d in sorted_glob(outputs, "*"):
        if not os.path.isdir(d) or os.path.islink(d) or d == out:
            continue
        try:
            fd = try_lock(d)
        except OSError:
            continue
        if fd is not None:
            try:
                lines += reap_tmp(d, top)
            finally:
                os.close(fd)
    return lines


# ---- a run this process holds ----------------------------------------------------------------

RESERVE_KB = 4096       # runstate.sh's RS_RESERVE_KB


class Started:
    """A run whose locks this process holds on its own descriptors (runstate.sh's rs_start, for
    the Python runner: `--kernel all`'s guests): its output directory, record, temporary
    directory and reserve.  `cleanup` undoes what rs_cleanup undoes once the run's job is gone."""

    def __init__(self):
        self.out = self.state = self.record = self.tmp = self.reserve = self.run_id = ""
        self.fds = []

    def cleanup(self, top=""):
        """What the run's job may have left: the processes holding a VM work directory, the
        namespaces its record names, its temporary directory, the temporary entries dead runs
        left in its output directory (its lock still ours); then its record and its locks.
        Returns the lines to say; runs once."""
        lines = []
        if self.tmp:
            kill_vm_users(self.tmp)
        if self.record:
            for ns in record_values(self.record, "ns"):
                netns_delete(ns)
        if self.tmp:
            rm_rf(self.tmp)
        if self.record and self.out:
            lines += reap_tmp(self.out, top)
        if self.record:
            try:
                os.unlink(self.record)
            except OSError:
                pass
        for fd in self.fds:
            os.close(fd)
        self.fds, self.tmp, self.record = [], "", ""
        return lines


def take_reserve(path, kb=RESERVE_KB):
    """runstate.sh's rs_reserve_take: PATH, KB allocated (written out with random bytes where the
    filesystem cannot allocate, which no compression shrinks); False when there is no room."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        try:
            os.posix_fallocate(fd, 0, kb * 1024)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            with open("/dev/urandom", "rb") as r:
                left = kb * 1024
                while left:
                    left -= os.write(fd, r.read(min(left, 1 << 16)))
        return True
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return False
    finally:
        os.close(fd)


def start_run(prog, out, allow_foreign=False, outputs="", prefix="tcplab", top="", mode="netns",
              env=None):
    """rs_start, for a run this process holds: OUT checked, locked with a new record of STATE
    (id, pid, mode, out, tmp), refused when nested in a live run's, what dead runs left reaped,
    a temporary directory made in it, and the reserve taken.  Returns (Started, the lines to
    say); raises Refused (2 for an OUT root may not use, else 1) with nothing of the run left."""
    s = Started()
    s.out = check_out(out, allow_foreign)
    s.state = state_dir(prog, env)
    s.run_id = os.urandom(8).hex()
    record = os.path.join(s.state, "run." + s.run_id)
    try:
        fds = lock_out(s.out, os.path.join(s.state, ".new." + s.run_id), record)
    except OSError:
        raise Refused(f"cannot lock {s.out} or write {s.state}") from None
    if fds is None:
        raise Refused(f"{s.out} is in use by another run{holder_of(s.state, s.out)}: wait for it "
                      "to finish, or use another --out")
    s.fds, s.record = fds, record
    try:
        for key, value in (("id", s.run_id), ("pid", os.getpid()), ("mode", mode), ("out", s.out)):
            record_add(record, key, value)
        why = nested_in(s.state, record, s.out)
        if why:
            raise Refused(why)
        lines = reap_stale(s.state, record, s.out, outputs, prefix, top)
        try:
            s.tmp = tempfile.mkdtemp(prefix=".tmp-", dir=s.out)
        except OSError:
            raise Refused(f"cannot make a directory in {s.out}", said=lines) from None
        record_add(record, "tmp", s.tmp)
        reserve = os.path.join(s.tmp, "reserve")
        if not take_reserve(reserve):
            raise Refused(f"{s.out}: no room for the {RESERVE_KB // 1024} MiB a run keeps so that "
                          "its reports and a failed unit's outputs can still be written if the "
                          "disk fills (No space left on device; docs/reliability.md, \"A full "
                          "disk\")", said=lines)
        s.reserve = reserve
    except BaseException:
        s.cleanup(top)
        raise
    return s, lines


# ---- a raw directory put in place ---------------------------------------------------------------

def install_dir(src, dest, out, tmp, prog, version="", top=""):
    """DEST, a path inside OUT, replaced whole by directory SRC (inside TMP, the run's temporary
    directory), by rename(2) alone.  Each directory between OUT and DEST is made if missing; one
    that is a symlink (tcplab makes none) is removed first, so nothing is written through it.  An
    old DEST (or a link in its place) is renamed into TMP and removed there; DEST is never moved
    into.  SRC first gets tcplab-version.txt with VERSION, the tcplab that ran the unit, when
    VERSION is given.  Returns the lines to say; Refused with one line on failure (and the
    lines to say before it)."""
    if not (dest.startswith(out + "/") and len(dest) > len(out) + 1):
        raise Refused(f"{prog}: {dest} is not inside {out}")
    relpath = dest[len(out) + 1:]
    if any(p in ("", ".", "..") for p in relpath.split("/")):
        raise Refused(f"{prog}: {dest}: not a plain path")
    lines = []
    path = out
    old = ""
    try:
        for part in relpath.split("/")[:-1]:
            path = f"{path}/{part}"
            if os.path.islink(path):
                os.unlink(path)
                lines.append(f"removed {rel(path, top)}: a symlink tcplab did not make")
            if not os.path.isdir(path):
                os.mkdir(path)
        if os.path.lexists(dest):
            old = tempfile.mkdtemp(prefix=".old-", dir=tmp)
            os.rename(dest, old + "/d")
        if version:
            vfile = src + "/tcplab-version.txt"
            if os.path.lexists(vfile):
                os.unlink(vfile)
            with open(vfile, "xb") as f:
                f.write(os.fsencode(version) + b"\n")
        try:
            os.rename(src, dest)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            # another filesystem (mv -T copied then): a copy, links as links, then SRC removed
            shutil.copytree(src, dest, symlinks=True)
            shutil.rmtree(src)
    except OSError as e:
        raise Refused(f"{prog}: cannot put {src} in place as {dest}: "
                      f"{e.strerror or e}{f' ({e.filename})' if e.filename not in (None, src, dest) else ''}",
                      said=lines) from None
    if old:
        rm_rf(old)
    return lines


# ---- the VM's work directories (experiments/guest/vm.sh) ---------------------------------------

def kill_dir_users(directory):
    """SIGKILL every process that holds directory DIRECTORY open: for a vm.sh work directory
    (0700, tcplab's), its lock descriptor, inherited by timeout and QEMU, so exactly the VM's
    processes.  The caller must not hold it open itself.  setpriv --pdeathsig alone cannot cover
    a parent killed between fork and prctl, nor a pid not yet known to vm.sh's trap."""
    me = os.getpid()
    for pid in sorted_glob("/proc", "[0-9]*"):
        n = int(os.path.basename(pid))
        if n == me:
            continue
        try:
            fds = os.listdir(pid + "/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{pid}/fd/{fd}") == directory:
                    os.kill(n, signal.SIGKILL)
                    break
            except OSError:
                continue


def vm_dirs(base):
    """BASE/tcplab-vm.*: the directories, not symlinks."""
    return [d for d in sorted_glob(base, "tcplab-vm.*") if os.path.isdir(d) and not os.path.islink(d)]


def kill_vm_users(base):
    """kill_dir_users for each BASE/tcplab-vm.* (once its vm.sh is gone: they are all the run's)."""
    for d in vm_dirs(base):
        kill_dir_users(d)


def reap_vm_dirs(base, prog):
    """Remove BASE/tcplab-vm.* work directories of vm.sh runs that are gone.  vm.sh locks its
    directory and then marks it (.locked); a marked directory of ours whose lock is free is
    provably abandoned (QEMU dies with vm.sh: setpriv --pdeathsig).  Unmarked ones are not
    provably anyone's and are left alone.  Returns the line to say on stderr, if any."""
    n = 0
    for d in vm_dirs(base):
        try:
            if not os.path.isfile(d + "/.locked") or os.stat(d).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if is_free(d) and rm_rf(d):
            n += 1
    return [f"{prog}: removed {n} VM work director(y/ies) in {base} left by an interrupted run"] if n else []


# ---- the command line ---------------------------------------------------------------------------

def take(args, name, default=None):
    """The value of option NAME in ARGS (removed from it), or DEFAULT."""
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            raise Refused(f"tcplab_runstate.py: {name} wants a value", 2)
        value = args[i + 1]
        del args[i:i + 2]
        return value
    return default


def say(lines):
    if lines:
        sys.stdout.write("".join(line + "\n" for line in lines))


# each command: how many operands it takes after its options
OPERANDS = {"state-dir": (0,), "check-out": (1,), "hold": (1, 3), "refuse-nested": (1,),
            "reap-stale": (0,), "reap-tmp": (1,), "kill-userns": (1,), "install-dir": (2,),
            "kill-dir-users": (1,), "reap-vm-dirs": (1,)}
OPTIONS = {"check-out": ("--allow-foreign",), "hold": ("--state",),
           "refuse-nested": ("--state", "--record"),
           "reap-stale": ("--state", "--record", "--out", "--outputs", "--prefix"),
           "reap-tmp": ("--tmp",), "install-dir": ("--out", "--tmp", "--version")}
NEEDED = {"reap-stale": ("--state", "--out", "--outputs", "--prefix"),
          "install-dir": ("--out", "--tmp")}


def parse(cmd, args):
    """CMD's options and operands in ARGS → ({option: value}, operands); Refused with status 2
    when they do not fit CMD.  After "--" everything is an operand: a path may look like an
    option."""
    usage = "usage: tcplab_runstate.py [--prog P] [--top DIR] COMMAND ARGS... (see its --help)"
    if cmd not in OPERANDS:
        raise Refused(f"tcplab_runstate.py: unknown command '{cmd}'; {usage}", 2)
    opts = {o: "" for o in OPTIONS.get(cmd, ())}
    given, operands = set(), []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            operands += args[i + 1:]
            break
        if a == "--allow-foreign" and a in opts:
            opts[a], i = "1", i + 1
        elif a in opts and i + 1 < len(args):
            opts[a], i = args[i + 1], i + 2
        elif a in opts:
            raise Refused(f"tcplab_runstate.py {cmd}: {a} wants a value; {usage}", 2)
        else:
            operands.append(a)
            i += 1
        given.add(a)
    if set(NEEDED.get(cmd, ())) - given or len(operands) not in OPERANDS[cmd]:
        raise Refused(f"tcplab_runstate.py {cmd}: wrong arguments; {usage}", 2)
    return opts, operands


def main(argv):
    args = list(argv)
    prog = take(args, "--prog", "run.sh")
    top = take(args, "--top", "")
    if not args:
        raise Refused("usage: tcplab_runstate.py [--prog P] [--top DIR] COMMAND ARGS... (see its --help)", 2)
    cmd = args.pop(0)
    if cmd in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0
    opts, args = parse(cmd, args)
    if cmd == "hold":
        return hold(opts["--state"], *args)
    if cmd == "state-dir":
        print(state_dir(prog))
    elif cmd == "check-out":
        try:
            print(check_out(args[-1], bool(opts["--allow-foreign"])))
        except Refused as e:
            print(e)
            return e.status
    elif cmd == "refuse-nested":
        why = nested_in(opts["--state"], opts["--record"], args[-1])
        if why:
            print(why)
            return 1
    elif cmd == "reap-stale":
        say(reap_stale(opts["--state"], opts["--record"], opts["--out"], opts["--outputs"],
                       opts["--prefix"], top))
    elif cmd == "reap-tmp":
        say(reap_tmp(args[-1], top, opts["--tmp"]))
    elif cmd == "kill-userns":
        print(kill_userns_procs(args[-1]))
    elif cmd == "install-dir":
        say(install_dir(args[-2], args[-1], opts["--out"], opts["--tmp"], prog, opts["--version"], top))
    elif cmd == "kill-dir-users":
        kill_dir_users(args[-1])
    elif cmd == "reap-vm-dirs":
        sys.stderr.write("".join(line + "\n" for line in reap_vm_dirs(args[-1], prog)))
    return 0


if __name__ == "__main__":
    # a Ctrl-C to the group or a closed pipe ends this program silently, as it ended the
    # coreutils the bash ran before (run.sh's trap says why the run stops)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stderr.reconfigure(errors="surrogateescape")
    sys.stdout.reconfigure(errors="surrogateescape")
    try:
        sys.exit(main(sys.argv[1:]))
    except Refused as e:
        say(e.said)
        sys.stdout.flush()
        sys.stderr.write(f"{e}\n")
        sys.exit(e.status)
