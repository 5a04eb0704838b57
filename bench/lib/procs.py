"""Processes the benches start, /proc, and the logs they write.

Every process runs in its own session with PDEATHSIG, is remembered with
every descendant ever seen, and is stopped (graceful signal, SIGTERM,
SIGKILL) with whatever it left behind killed and reported.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time


class BenchError(Exception):
    """A failure that stops the run (a backend that does not start, ...)."""


class Interrupted(BaseException):
    pass


def logger(name):
    """A log function: `[NAME HH:MM:SS] msg` on stderr (each bench its own NAME)."""
    def log(msg):
        print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
    return log


# The library's own messages (Managed.stop's): bench.py's prefix, as before.
log = logger("bench")


# ---------------------------------------------------------------------------
# /proc helpers
# ---------------------------------------------------------------------------

def proc_stat(pid):
    """(ppid, utime+stime ticks, starttime) of pid, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15, starttime 22
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[19])


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
        return data[data.rindex(")") + 2]
    except OSError:
        return None


def alive(pid, starttime=None):
    st = proc_stat(pid)
    if st is None or proc_state(pid) == "Z":
        return False
    return starttime is None or st[2] == starttime


def descendants(root):
    """Every descendant pid of root (children, grandchildren, ...)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is not None:
            children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def proc_kib(path, field):
    """The kB figure of the `FIELD:` line of a /proc file, None without it."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def status_kib(pid, field):
    return proc_kib(f"/proc/{pid}/status", field)


def pss_kib(pid):
    return proc_kib(f"/proc/{pid}/smaps_rollup", "Pss")


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


# The fields of /proc/stat's `cpu ` line, in jiffies (USER_HZ) of all CPUs.
# guest and guest_nice are already counted in user and nice.
STAT_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
                   "guest", "guest_nice")
# What the machine spent running something: not idle, iowait (idle waiting
# for I/O), steal (another VM ran), nor guest (already in user and nice).
STAT_CPU_BUSY = ("user", "nice", "system", "irq", "softirq")


def machine_cpu():
    """The `cpu ` line of /proc/stat (every CPU, since boot): {field: jiffies}."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu "):
                return dict(zip(STAT_CPU_FIELDS, (int(x) for x in line.split()[1:])))
    raise BenchError("/proc/stat has no cpu line")


def machine_cpu_delta(before, after):
    """What the machine's CPUs did between two machine_cpu() readings, in
    jiffies: every field, `busy` (STAT_CPU_BUSY) and `total` (every field
    but guest and guest_nice)."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in STAT_CPU_FIELDS}
    d["busy"] = sum(d[k] for k in STAT_CPU_BUSY)
    d["total"] = sum(d[k] for k in STAT_CPU_FIELDS[:8])
    return d


def stray_processes(tmp):
    """Processes whose command line still names our temp dir."""
    out = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if tmp in cmd and proc_state(int(name)) != "Z":
            out.append(f"{name} {cmd.strip()}")
    return out


# ---------------------------------------------------------------------------
# Processes we start
# ---------------------------------------------------------------------------

def child_setup():
    # Own session: a Ctrl-C on the terminal reaches only us, and we stop
    # everything in order. PDEATHSIG: if we are SIGKILLed, our direct
    # children still get SIGTERM (fpmd, php-fpm and nginx then stop theirs).
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Managed:
    """A long-running process we started, plus every descendant ever seen."""

    def __init__(self, name, argv, log_path, stop_signal):
        self.name = name
        self.argv = argv
        self.stop_signal = stop_signal
        self.out = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=child_setup)
        self.pid = self.proc.pid
        self.seen = {}  # pid -> starttime
        self.stopped = False

    def running(self):
        return self.proc.poll() is None

    def snapshot(self):
        """Remembers the current descendants, so none escapes the cleanup."""
        for pid in descendants(self.pid):
            st = proc_stat(pid)
            if st is not None:
                self.seen.setdefault(pid, st[2])

    def stop(self, timeout=10.0):
        """Stops the process (graceful signal, then SIGTERM, then SIGKILL) and
        kills any descendant still alive. Returns the descendants that were
        left behind (pid, comm) after the manager exited."""
        if self.stopped:
            return []
        self.stopped = True
        if self.running():
            self.snapshot()
        for sig, wait in ((self.stop_signal, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if not self.running():
                break
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                log(f"{self.name} (pid {self.pid}) still running {wait:.0f} s after signal {sig.name}")
        # Give children a moment to notice their manager is gone.
        deadline = time.time() + 3.0
        left = [p for p, t in self.seen.items() if alive(p, t)]
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = [p for p, t in self.seen.items() if alive(p, t)]
        leftovers = [(p, comm(p)) for p in left]
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.out.close()
        return leftovers


class Background:
    """A thread beside the run from `with` entry to exit: its run() loops
    until stop_ev is set; the exit sets it and waits join_s for the thread."""
    join_s = 2.0

    def __init__(self):
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.t.join(self.join_s)


def leftovers_text(left):
    """What Managed.stop returned, as 'pid (comm), ...'."""
    return ", ".join(f"{p} ({c})" for p, c in left)


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


# ---------------------------------------------------------------------------
# Logs
# ---------------------------------------------------------------------------

def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


ANSI = re.compile(r"\x1b\[[0-9;]*m")
BAD_LOG = re.compile(r"\b(WARN|WARNING|ERROR|ALERT|CRIT|CRITICAL|EMERG|panicked)\b", re.I)


def bad_log_lines(path, start=0):
    """Warning-or-worse lines of a log from byte offset start."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [ANSI.sub("", l) for l in text.splitlines() if BAD_LOG.search(ANSI.sub("", l))]


def group_lines(lines):
    """Log lines without their timestamps, counted: [{message, count, first}]."""
    groups = {}
    for line in lines:
        msg = re.sub(r"^(\d{4}-\d\d-\d\dT\S+\s+|\[[^\]]*\]\s*)", "", line).strip()
        msg = re.sub(r"\bpid=\d+", "pid=N", msg)
        g = groups.setdefault(msg, {"message": msg, "count": 0, "first": line})
        g["count"] += 1
    return sorted(groups.values(), key=lambda g: -g["count"])


def group_warnings(lines):
    """group_lines, with request URIs and numbers in the message
    replaced (each 503 names its URI; php-fpm's "seems busy" its counts)."""
    groups = {}
    for g in group_lines(lines):
        msg = re.sub(r"\buri=\S+", "uri=URI", g["message"])
        msg = re.sub(r"\d+(\.\d+)?", "N", msg)
        h = groups.setdefault(msg, {"message": msg, "count": 0, "first": g["first"]})
        h["count"] += g["count"]
    return sorted(groups.values(), key=lambda g: -g["count"])


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def count_lines_from(path, start):
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read().splitlines()
    except OSError:
        return []


def show_tails(paths, log, n=15):
    """The last n lines of every non-empty file among paths, on stderr (after a failure)."""
    for path in paths:
        if path and os.path.exists(path) and os.path.getsize(path):
            log(f"--- {path} (last lines)")
            for line in tail(path, n):
                print("    " + ANSI.sub("", line), file=sys.stderr)
