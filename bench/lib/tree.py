"""A bench run: its private temp tree, and the clean-up that leaves nothing behind.

Every bench works in its own temp dir (configs, sockets, logs, PHP scripts,
a copy of the fpmd binary) and runs inside `with Run(...)`: Ctrl-C, SIGTERM,
SIGHUP, a BenchError or a bug in the bench all end in the same clean-up,
which stops every process the run started and reports (and kills) whatever
still runs from the temp dir; the dir is then removed, or kept with
--keep-tmp.
"""

import datetime
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

from . import procs
from .servers import POOL_USER


def now():
    """The local date and time to the second, with its UTC offset."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


# ---------------------------------------------------------------------------
# The temp tree
# ---------------------------------------------------------------------------

def www_dir(tmp, sub="", files=()):
    """tmp/www (and tmp/www/SUB), readable by nginx and the pools, with
    files ((name, text) pairs) written into the innermost; returns
    (tmp/www, the innermost)."""
    www = os.path.join(tmp, "www")
    where = os.path.join(www, sub) if sub else www
    os.makedirs(where)
    for name, text in files:
        with open(os.path.join(where, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(where, name), 0o644)
    for d in (www, where):
        os.chmod(d, 0o755)
    return www, where


def pool_dir(tmp, name, mode):
    """tmp/NAME, owned by the pools' user (PHP writes there), with mode."""
    path = os.path.join(tmp, name)
    os.makedirs(path)
    shutil.chown(path, POOL_USER, POOL_USER)
    os.chmod(path, mode)
    return path


def copy_fpmd(src, tmp):
    """Copies the fpmd binary into tmp/bin, so that a rebuild during the run
    changes nothing. Returns the copy and what the results say of the
    binary: its path, sha256 and build time."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    os.chmod(bindir, 0o755)
    fpmd = os.path.join(bindir, "fpmd")
    shutil.copy2(src, fpmd)
    with open(fpmd, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return fpmd, {"source": src, "sha256": digest,
                  "mtime": datetime.datetime.fromtimestamp(os.path.getmtime(src)).astimezone()
                  .isoformat(timespec="seconds")}


# ---------------------------------------------------------------------------
# The run and its clean-up
# ---------------------------------------------------------------------------

def ready(name, preflight, args):
    """Whether the machine is ready for the bench: preflight(args) raised
    no BenchError. When it did, `NAME: why` is on stderr (exit status 2)."""
    try:
        preflight(args)
    except procs.BenchError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return False
    return True


class Run:
    """One run: its temp dir, what it started (wrk, nginx, backends, and
    services such as a database the backends use: set them as they are
    made), the problems found.

    `with run:` around the work. Inside it, Ctrl-C, SIGTERM and SIGHUP raise
    Interrupted; Interrupted, a BenchError and a bug (any other Exception)
    end the work as a problem, not a traceback out of the bench; and the
    clean-up runs whatever happened: wrk killed, nginx, every backend and
    then every service stopped (what they leave behind, or a bad exit, is a
    problem; a service's stop() returns those problems), then
    anything whose command line still names the temp dir is a problem too,
    and is killed unless kill_strays is false (bench.py only reports it)."""

    def __init__(self, prefix, log, kill_strays=True, strays_one_by_one=False):
        self.log = log
        self.kill_strays = kill_strays
        self.strays_one_by_one = strays_one_by_one  # one problem per stray, not one for all
        self.problems = []
        self.interrupted = False
        self.wrk = None
        self.nginx = None
        self.backends = []
        self.services = []
        self.started = time.time()
        self.date = now()
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.tmp, 0o755)

    def __enter__(self):
        def on_signal(signum, _frame):
            raise procs.Interrupted(signal.Signals(signum).name)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, on_signal)
        return self

    def __exit__(self, kind, e, tb):
        handled = kind is not None and issubclass(kind, (procs.Interrupted, Exception))
        if kind is None:
            pass
        elif issubclass(kind, procs.Interrupted):
            self.interrupted = True
            self.problems.append(f"interrupted ({e})")
            self.log(f"interrupted ({e}), cleaning up")
        elif issubclass(kind, procs.BenchError):
            self.problems.append(str(e))
            self.log(f"error: {e}")
        elif handled:  # a bug in the bench: still clean up, still fail
            traceback.print_exception(kind, e, tb)
            self.problems.append(f"internal error: {e!r}")
        self.clean_up()
        return handled

    def clean_up(self):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self.wrk is not None:
            self.wrk.kill()
        if self.nginx is not None:
            self.nginx.stop(self.problems)
        for b in self.backends:
            self.problems.extend(b.stop())
        for s in self.services:
            self.problems.extend(s.stop())
        stray = procs.stray_processes(self.tmp)
        if self.kill_strays:
            for line in stray:
                try:
                    os.kill(int(line.split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        if self.strays_one_by_one:
            self.problems.extend(f"still running after cleanup (killed): {line}" for line in stray)
        elif stray:
            self.problems.append("still running after cleanup: " + "; ".join(stray))

    def show_logs(self, more=()):
        """After a failure: the last lines of every backend's logs (and of
        the files `more`) on stderr."""
        procs.show_tails([p for b in self.backends for p in {b.log_path, b.error_log(), b.nginx_err}]
                         + list(more), self.log)

    def elapsed_s(self):
        return round(time.time() - self.started, 1)

    def remove_tmp(self, keep):
        """Removes the temp dir, or (--keep-tmp) says where it is kept."""
        if keep:
            self.log(f"temp dir kept: {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def exit_status(self, more=()):
        """1, with every problem (and `more` failures) on stderr, if there is any; else 0."""
        failed = self.problems + list(more)
        if failed:
            print("FAILED:", file=sys.stderr)
            for p in failed:
                print("  - " + p, file=sys.stderr)
            return 1
        return 0
