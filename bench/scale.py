#!/usr/bin/python3
"""Hundreds (and thousands) of pools: fpmd side by side with php-fpm.

For every pm mode (--modes ondemand,dynamic) and pool count N (--pools
1,50,200,500; up to 9999, e.g. --pools 2000,5000 --modes ondemand), each
backend (php-fpm 8.2, fpmd) is started fresh, alone, with the same N pools:
user/group www-data, one unix socket each in the temp dir (listen.owner/group
www-data, mode 0660), pm.max_children 5, pm.max_requests 0; ondemand:
pm.process_idle_timeout 10 s (--idle-timeout); dynamic: start_servers 1,
min_spare 1, max_spare 2. Each pool has its own php_admin_value[user_agent] =
"pNNNN-gen0", which the test script prints: a body names the pool (and the
configuration generation) that answered it. A round of requests asks every
pool up to 500 pools, and K random pools above (--sample K, default 100; the
same pools for both backends, --seed). Then, one backend at a time:

  1. start time: from the exec of the manager until every pool's socket
     listens (read from /proc/net/unix: a connect() would succeed; no
     connection is made, since one wakes an ondemand pool), and for
     dynamic until every pool has its start_servers php processes;
  2. the manager's own VmRSS and PSS, the PSS of the manager and every
     descendant (smaps_rollup), the php process count, after the start;
  3. round 1: one request per asked pool, in pool order, one at a time,
     straight over FastCGI on the pool's socket (a small client below:
     BEGIN_REQUEST as a responder, PARAMS, empty PARAMS, empty STDIN, read
     until END_REQUEST), each timed from connect() to END_REQUEST and its
     body checked: cold p50/p90/p99/max and the positions of the slowest;
  4. memory right after, and again after idle_timeout + 3 s (ondemand: the
     children are retired then), with the php process count;
  5. round 2, the same pools (cold again for ondemand);
  6. the reload of one pool among N: its php_admin_value is changed
     (gen0 -> gen1) and the manager reloaded (php-fpm: SIGUSR2; fpmd:
     SIGHUP, or `fpmd -c FILE reload` with --fpmd-reload command, run in
     the background); the time until that pool answers with the new value,
     polling its socket; whether the other pools' php processes were
     replaced (their pids before the reload and 1 s after the new value was
     seen; ondemand: of the pools asked recently enough that the idle
     timeout cannot explain a pid gone, among them 10 watched pools, asked
     once more before the reload and kept from idling during it, each by
     its own thread); then round 3, the same pools and the reloaded one;
  7. graceful stop (SIGQUIT): until the manager has exited and until every
     process of its tree is gone; the exit status, nothing left behind.

And (--idle-stop N, default 500; 0: not run) the graceful stop of N idle
ondemand pools, each backend started twice: SIGQUIT once the php process
count has settled after the start, with no request ever served; and SIGQUIT
1 s after one request to each of 100 random pools (no request in flight,
the children alive).

The config tests (php-fpm -t, fpmd -t) run before each start up to 500
pools; above, the start itself checks the same (fpmd -t of 5,000 pools
takes minutes).

Every step has a bound (--start-timeout, --round-timeout, --reload-timeout,
--stop-timeout, the config test's), so a hung backend cannot hang the
bench. A backend that fails (does not start, dies, never shows a reload,
does not stop) is reported where and how (the step, its exit status, the
last lines of its logs) and the run goes on with the next step that can
run: its stop, then the other backend and the next N.

Prints one markdown table per (mode, N), metrics by backend with the ratio
fpmd / php-fpm, and one for the idle stops; writes bench/results/scale.json
and draws bench/results/scale.png. The machinery (processes in their own
session with PDEATHSIG, cleanup on errors and Ctrl-C, /proc helpers) is
bench/lib's. Exits non-zero when the bench itself failed or fpmd did: a
request that failed or returned the wrong body, a reload never seen, a
manager that died or did not exit 0 on SIGQUIT, a process left behind.
php-fpm's failures are reported in the tables and the JSON but do not fail
the run (php-fpm is the reference, with known limits at thousands of
pools), except under --smoke, which proves that the bench works. What the
figures show is reported, not judged.

Both managers inherit the bench's limits: RLIMIT_NOFILE soft and hard raised
to at least --nofile (65536), RLIMIT_NPROC soft to its hard limit; the
output says which.

Stdlib only (matplotlib for the chart); run as root (pools run as www-data,
php-fpm needs -R).
"""

import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from lib import procs, report, servers, tree
from lib.report import pct

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("ondemand", "dynamic")
MAX_CHILDREN = 5
START_SERVERS = 1
REQUEST_TIMEOUT = 30.0
ALL_POOLS_UP_TO = 500  # a round asks every pool up to this N, --sample pools above

# The ini name is not a literal: opcache's optimizer folds ini_get('literal')
# of a PHP_INI_SYSTEM entry (what php_admin_value makes it) at compile time,
# and php-fpm's pools share one opcache, so every pool printed the value of
# the pool that compiled the script first.
SCALE_PHP = r"""<?php
// written by bench/scale.py: the pool's marker (php_admin_value[user_agent], or
// env[SCALE_MARKER] under fpmd's pm.spawn = "shared") and the pid.
$ini = getmypid() > 0 ? 'user_agent' : '';  // not a literal: see scale.py
$marker = (string) ini_get($ini);
if ($marker === '') {
    $marker = (string) getenv('SCALE_MARKER');
}
header('Content-Type: text/plain');
echo 'scale-ok ', $marker, ' ', getmypid(), "\n";
"""


log = procs.logger("bench-scale")


def mono():
    return time.perf_counter()


def pool_name(i):
    return f"p{i:04d}"


def marker(i, gen):
    return f"{pool_name(i)}-gen{gen}"


# ---------------------------------------------------------------------------
# A small FastCGI client (one request per connection)
# ---------------------------------------------------------------------------

FCGI_BEGIN_REQUEST, FCGI_END_REQUEST, FCGI_PARAMS, FCGI_STDIN, FCGI_STDOUT, FCGI_STDERR = 1, 3, 4, 5, 6, 7
FCGI_RESPONDER = 1


def fcgi_record(rtype, content, rid=1):
    pad = (-len(content)) % 8
    return struct.pack("!BBHHBB", 1, rtype, rid, len(content), pad, 0) + content + b"\0" * pad


def fcgi_pair(name, value):
    out = b""
    for x in (name, value):
        out += bytes([len(x)]) if len(x) < 128 else struct.pack("!I", len(x) | 0x80000000)
    return out + name + value


def fcgi_get(sock_path, script, uri, timeout=REQUEST_TIMEOUT):
    """One GET over FastCGI on a unix socket. Returns {ms, status, body,
    stderr, app_status, protocol_status, error}; ms from connect() to
    END_REQUEST (or to the failure)."""
    params = {
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_METHOD": "GET",
        "SCRIPT_FILENAME": script,
        "SCRIPT_NAME": uri,
        "REQUEST_URI": uri,
        "DOCUMENT_URI": uri,
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
    }
    payload = (fcgi_record(FCGI_BEGIN_REQUEST, struct.pack("!HB5x", FCGI_RESPONDER, 0))
               + fcgi_record(FCGI_PARAMS, b"".join(fcgi_pair(k.encode(), v.encode())
                                                   for k, v in params.items()))
               + fcgi_record(FCGI_PARAMS, b"")
               + fcgi_record(FCGI_STDIN, b""))
    out = {"status": None, "body": "", "stderr": "", "error": None,
           "app_status": None, "protocol_status": None}
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    t0 = mono()
    stdout, stderr = bytearray(), bytearray()
    try:
        s.connect(sock_path)
        s.sendall(payload)
        buf = bytearray()
        done = False
        while not done:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed before FCGI_END_REQUEST")
            buf += chunk
            while len(buf) >= 8:
                _v, rtype, _rid, clen, plen, _r = struct.unpack("!BBHHBB", buf[:8])
                if len(buf) < 8 + clen + plen:
                    break
                content = bytes(buf[8:8 + clen])
                del buf[:8 + clen + plen]
                if rtype == FCGI_STDOUT:
                    stdout += content
                elif rtype == FCGI_STDERR:
                    stderr += content
                elif rtype == FCGI_END_REQUEST:
                    out["app_status"], out["protocol_status"] = struct.unpack("!IB3x", content[:8])
                    done = True
                    break
    except (OSError, ConnectionError, struct.error) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        out["ms"] = (mono() - t0) * 1000
        s.close()
    head, sep, body = bytes(stdout).partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = bytes(stdout).partition(b"\n\n")
    status = 200
    for line in head.decode(errors="replace").splitlines():
        if line.lower().startswith("status:"):
            try:
                status = int(line.split(":", 1)[1].split()[0])
            except (IndexError, ValueError):
                status = None
    if stdout:
        out["status"] = status
    out["body"] = body.decode(errors="replace")
    out["stderr"] = stderr.decode(errors="replace")
    return out


# ---------------------------------------------------------------------------
# /proc: listening unix sockets, php processes
# ---------------------------------------------------------------------------

def listening_unix_paths():
    """Paths of the unix stream sockets that listen (__SO_ACCEPTCON)."""
    out = set()
    try:
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and int(parts[3], 16) & 0x10000:
                    out.add(parts[7])
    except OSError:
        pass
    return out


def nofile_limit(pid):
    """'soft/hard' of the process's Max open files."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    parts = line.split()
                    return f"{parts[3]}/{parts[4]}"
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------

class ScaleBackend:
    """One manager with N pools, in its own directory under the run's temp dir."""
    kind = "?"

    def __init__(self, name, rundir, n, mode, args, www):
        self.name = name
        self.n = n
        self.mode = mode
        self.args = args
        self.dir = os.path.join(rundir, name)
        self.sockdir = os.path.join(self.dir, "sock")
        self.pooldir = os.path.join(self.dir, "pool.d")
        for d in (self.dir, self.sockdir, self.pooldir):
            os.makedirs(d)
            os.chmod(d, 0o755)
        self.script = os.path.join(www, "scale.php")
        self.log_path = os.path.join(self.dir, "stdout.log")
        self.proc = None
        self.prefork = False
        self.step = "config"
        self.fails = []  # this backend's failures, each {step, what, exit_status, log_tail}
        self.res = {}  # its figures so far
        self.t0 = None  # its exec (mono())
        self.last_asked = {}  # pool -> mono() of the end of its last request
        self.pools = list(range(n))  # the pools a round asks (run_all sets the sample)

    def sock(self, i):
        return os.path.join(self.sockdir, f"{pool_name(i)}.sock")

    def request(self, i, timeout=REQUEST_TIMEOUT):
        return fcgi_get(self.sock(i), self.script, "/scale.php", timeout)

    def logs(self):
        return sorted({self.log_path, self.error_log()})

    def write_all(self):
        for i in range(self.n):
            self.write_pool(i, 0)

    def write_pool_file(self, i, ext, lines):
        """Pool i's file, pool.d/pNNNN.EXT: `lines`, written whole."""
        servers.write_whole(os.path.join(self.pooldir, f"{pool_name(i)}.{ext}"), "\n".join(lines) + "\n")

    def pm_lines(self, mode_key, q):
        """The pm settings of every pool, `mode_key` naming the mode and q
        quoting a string: max_children, then ondemand's idle timeout or
        dynamic's servers."""
        pm = [f"{mode_key} = {q(self.mode)}", f"pm.max_children = {MAX_CHILDREN}"]
        if self.mode == "ondemand":
            pm.append(f"pm.process_idle_timeout = {q(fmt_dur(self.args.idle_timeout))}")
        else:
            pm += [f"pm.start_servers = {START_SERVERS}", "pm.min_spare_servers = 1",
                   "pm.max_spare_servers = 2"]
        return pm

    def launch(self):
        self.proc = procs.Managed(self.name, self.argv(), self.log_path, signal.SIGQUIT)

    reload_cmd = None  # fpmd's `fpmd reload` in the background

    def reload_poll(self, ev):
        pass

    def reload_finish(self, ev, deadline):
        pass

    def php_processes(self):
        """[(pid, ppid, cmdline)] of the live php processes under the manager."""
        out = []
        for p in procs.descendants(self.proc.pid):
            if not procs.comm(p).startswith("php") or procs.proc_state(p) == "Z":
                continue
            st = procs.proc_stat(p)
            if st is not None:
                out.append((p, st[0], procs.cmdline(p)))
        self.proc.snapshot()
        return out

    def tree(self):
        """php processes: serving children, and (fpmd prefork) the php-cgi parents."""
        procs = self.php_processes()
        parents = sum(1 for _p, pp, _c in procs if self.prefork and pp == self.proc.pid)
        return {"php": len(procs) - parents, "parents": parents}

    def pools_pids(self):
        """{pool index: set of php pids (children and parents)}."""
        out = {}
        self.unattributed = []
        for pid, _pp, cmd in self.php_processes():
            i = self.pool_of(pid, cmd)
            if i is not None:
                out.setdefault(i, set()).add(pid)
            else:
                self.unattributed.append(pid)
        return out

    def pools_workers(self):
        """{pool index: php processes serving it} (fpmd prefork: parents not counted)."""
        out = {}
        for pid, pp, cmd in self.php_processes():
            if self.prefork and pp == self.proc.pid:
                continue
            i = self.pool_of(pid, cmd)
            if i is not None:
                out[i] = out.get(i, 0) + 1
        return out

    def memory(self):
        pids = [self.proc.pid] + procs.descendants(self.proc.pid)
        pss = [procs.pss_kib(p) for p in pids]
        t = self.tree()
        return {
            "manager_rss_mib": mib(procs.status_kib(self.proc.pid, "VmRSS")),
            "manager_pss_mib": mib(procs.pss_kib(self.proc.pid)),
            "total_pss_mib": mib(sum(k for k in pss if k)),
            "processes": sum(1 for k in pss if k is not None),
            "php": t["php"],
            "parents": t["parents"],
        }

    def stop(self, timeout):
        """Graceful stop: SIGQUIT, then polls until the manager has exited and
        every process of its tree (as it was at the signal) is gone, for at
        most `timeout` s; what still runs then gets lib/procs.py's
        Managed.stop (SIGTERM, SIGKILL; leftovers killed and reported).
        Returns ({figures}, problems); (None, []) if it was never started."""
        if self.proc is None or self.proc.stopped:
            return None, []
        out = {"manager_exit_s": None, "tree_gone_s": None}
        tree = {}
        was_running = self.proc.running()
        if was_running:
            self.proc.snapshot()
            for p in procs.descendants(self.proc.pid):
                st = procs.proc_stat(p)
                if st is not None and procs.proc_state(p) != "Z":
                    tree[p] = st[2]
        else:
            out["already_exited"] = self.proc.proc.returncode
            tree = {p: t for p, t in self.proc.seen.items() if procs.alive(p, t)}
        out["tree_processes"] = len(tree) + (1 if was_running else 0)
        t0 = mono()
        if was_running:
            try:
                os.kill(self.proc.pid, signal.SIGQUIT)
            except ProcessLookupError:
                pass
        exit_s = None if was_running else 0.0
        while True:
            now = mono()
            if exit_s is None and not self.proc.running():
                exit_s = now - t0
            tree = {p: t for p, t in tree.items() if procs.alive(p, t)}
            if exit_s is not None and not tree:
                out["tree_gone_s"] = round(now - t0, 4)
                break
            if now - t0 > timeout:
                break
            time.sleep(0.01 if len(tree) < 200 else 0.05)
        out["manager_exit_s"] = None if exit_s is None else round(exit_s, 4)
        problems = []
        if out["manager_exit_s"] is None:
            problems.append(f"still running {timeout:.0f} s after SIGQUIT")
        elif out["tree_gone_s"] is None:
            problems.append(f"exited after {exit_s:.2f} s, but {len(tree)} process(es) of its "
                            f"tree still ran {timeout:.0f} s after SIGQUIT: "
                            + procs.leftovers_text([(p, procs.comm(p)) for p in list(tree)[:10]]))
        # SIGTERM, SIGKILL if it still runs; its descendants ever seen killed.
        left = self.proc.stop(timeout=0.1)
        rc = self.proc.proc.returncode
        out["exit_status"] = rc
        if left:
            problems.append(f"{len(left)} process(es) still alive after it exited (killed): "
                            + procs.leftovers_text(left[:10]))
        if rc != 0:
            problems.append(f"exited with status {rc} "
                            + (f"before the stop (step: {self.step})" if not was_running else
                               "after SIGQUIT")
                            + f" ({'killed by signal ' + str(-rc) if rc and rc < 0 else 'expected 0'})")
        return out, problems

    def failure(self, what):
        """A failure of this backend at its current step: where, what, its
        exit status if it has exited, the last lines of its logs."""
        f = {"step": self.step, "what": what}
        if self.proc is not None and not self.proc.running():
            f["exit_status"] = self.proc.proc.returncode
        # {file name: its last lines}: the manager's log first.
        f["log_tail"] = {os.path.basename(p): [procs.ANSI.sub("", line) for line in procs.tail(p, 12)]
                         for p in [self.error_log()] + [p for p in self.logs() if p != self.error_log()]}
        return f


class ScalePhpFpm(servers.PhpFpmManager, ScaleBackend):
    test_output_lines = 20

    def __init__(self, name, rundir, n, mode, args, www):
        super().__init__(name, rundir, n, mode, args, www)
        self.binary = args.php_fpm
        with open(self.conf, "w") as f:
            f.write(f"; generated by bench/scale.py: {n} {mode} pools\n"
                    + servers.php_fpm_global(self.dir, self.error_log())
                    + f"include = {self.pooldir}/*.conf\n")
        self.write_all()

    def write_pool(self, i, gen):
        self.write_pool_file(i, "conf", [f"; generated by bench/scale.py, generation {gen}"]
                             + servers.php_fpm_pool(pool_name(i), self.sock(i)) + self.pm_lines("pm", str)
                             + ["pm.max_requests = 0", f"php_admin_value[user_agent] = {marker(i, gen)}"])

    def reload(self):
        os.kill(self.proc.pid, signal.SIGUSR2)
        return {"method": "SIGUSR2"}

    POOL_RE = re.compile(r"^php-fpm: pool (p\d{4})\b")

    def pool_of(self, pid, cmd):
        m = self.POOL_RE.match(cmd)
        return int(m.group(1)[1:]) if m else None

    def describe(self):
        return {"name": self.name, "kind": self.kind, "binary": self.binary}


class ScaleFpmd(servers.FpmdManager, ScaleBackend):
    test_output_lines = 20

    def __init__(self, name, rundir, n, mode, args, www):
        super().__init__(name, rundir, n, mode, args, www)
        self.binary = args.fpmd_copy
        self.spawn = args.spawn
        self.prefork = args.spawn != "exec"
        self.ctl = os.path.join(self.dir, "fpmd-ctl.sock")
        with open(self.conf, "w") as f:
            f.write(f"# generated by bench/scale.py: {n} {mode} pools\n"
                    + servers.fpmd_global(self.error_log(), self.ctl)
                    + ("" if args.warm_min_available is None else
                       f"warm_min_available = {json.dumps(args.warm_min_available)}\n")
                    + ("" if args.warm_timeout is None else
                       f"warm_timeout = {json.dumps(args.warm_timeout)}\n"))
        self.write_all()

    def write_pool(self, i, gen):
        q = json.dumps
        pm = self.pm_lines("pm.mode", q)
        if self.spawn:
            pm.append(f"pm.spawn = {q(self.spawn)}")
        # Pools with their own ini values do not share a parent: under
        # "shared" the marker is in the environment.
        mark = (f"env.SCALE_MARKER = {q(marker(i, gen))}" if self.spawn == "shared"
                else f'php_admin_value."user_agent" = {q(marker(i, gen))}')
        self.write_pool_file(i, "toml", [f"# generated by bench/scale.py, generation {gen}"]
                             + servers.fpmd_pool(pool_name(i), self.sock(i)) + pm
                             + ["pm.max_requests = 0", mark])

    def reload(self):
        """SIGHUP, or `fpmd -c FILE reload` started in the background (it
        returns once the reload is in force: the pool is polled meanwhile,
        and reload_finish collects it)."""
        if self.args.fpmd_reload == "sighup":
            os.kill(self.proc.pid, signal.SIGHUP)
            return {"method": "SIGHUP"}
        self.reload_out = os.path.join(self.dir, "reload.out")
        with open(self.reload_out, "wb") as out:
            self.reload_cmd = subprocess.Popen([self.binary, "-c", self.conf, "reload"],
                                               stdin=subprocess.DEVNULL, stdout=out,
                                               stderr=subprocess.STDOUT)
        self.reload_t0 = mono()
        return {"method": "fpmd reload"}

    def reload_finish(self, ev, deadline):
        """Waits for `fpmd reload` until the mono() deadline (killed then);
        its time, exit status and last output into ev."""
        if self.reload_cmd is None:
            return
        p, self.reload_cmd = self.reload_cmd, None
        try:
            p.wait(max(0.1, deadline - mono()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            ev["rc"] = "timeout"
        else:
            ev["rc"] = p.returncode
            ev.setdefault("command_s", round(mono() - self.reload_t0, 4))
        with open(self.reload_out, errors="replace") as f:
            ev["output"] = f.read().strip()[-500:]

    def reload_poll(self, ev):
        """Notes when the background `fpmd reload` returned, if it has."""
        if self.reload_cmd is not None and "command_s" not in ev and self.reload_cmd.poll() is not None:
            ev["command_s"] = round(mono() - self.reload_t0, 4)

    # php_admin_value reaches php-cgi as `-d user_agent=pNNNN-genG`; a
    # prefork worker has its parent's command line; a child of a shared
    # parent has its pool's title, `php-cgi: pool pNNNN`.
    POOL_RE = re.compile(r"(?:user_agent=|^php-cgi: pool )(p\d{4})\b")

    def pool_of(self, pid, cmd):
        m = self.POOL_RE.search(cmd)
        return int(m.group(1)[1:]) if m else None

    def describe(self):
        return {"name": self.name, "kind": self.kind, "binary": self.args.fpmd,
                "spawn": self.spawn or "default (prefork)", "reload": self.args.fpmd_reload,
                "warm_min_available": self.args.warm_min_available or "default",
                "warm_timeout": self.args.warm_timeout or "default"}


def mib(kib):
    return None if kib is None else round(kib / 1024, 2)


def fmt_dur(s):
    return f"{int(s)}s" if s == int(s) else f"{int(s * 1000)}ms"


# ---------------------------------------------------------------------------
# One run: one backend, one mode, N pools
# ---------------------------------------------------------------------------

def wait_started(b, timeout):
    """From the exec until every socket listens, and (dynamic) until every
    pool has start_servers php processes. Returns the two times (s)."""
    t0 = b.t0 = mono()
    b.launch()
    want_php = b.n * START_SERVERS if b.mode == "dynamic" else 0
    socks = {b.sock(i) for i in range(b.n)}
    sockets_s = php_s = None
    last_proc = 0.0
    php = 0
    # /proc/net/unix has a line per socket: at thousands of pools, reading
    # it every 10 ms would take a good part of a CPU from the backend.
    poll = 0.01 if b.n <= ALL_POOLS_UP_TO else 0.05
    while True:
        now = mono()
        if not b.proc.running():
            raise procs.BenchError(f"{b.name} exited with status {b.proc.proc.returncode} while "
                                   f"starting {b.n} pools")
        if sockets_s is None:
            up = socks & listening_unix_paths()
            if len(up) == len(socks):
                sockets_s = now - t0
        if php_s is None and now - last_proc >= (0.05 if b.n <= 50 else 0.2):
            last_proc = now
            if want_php:
                per = b.pools_workers()
                php = sum(per.values())
                if all(per.get(i, 0) >= START_SERVERS for i in range(b.n)):
                    php_s = now - t0
            else:
                php_s = now - t0
        if sockets_s is not None and php_s is not None:
            return sockets_s, (php_s if want_php else None)
        if now - t0 > timeout:
            up = len(socks & listening_unix_paths())
            raise procs.BenchError(f"{b.name}: not started after {timeout:.0f} s: {up}/{b.n} sockets "
                                   f"listen, {php} php processes"
                                   + (f" (want {START_SERVERS} in each of {b.n} pools)" if want_php else ""))
        time.sleep(poll)


def wait_settled(b, timeout, quiet=1.0):
    """Until the manager's php process count has not changed for `quiet`
    seconds (what it starts ahead of any request is up: fpmd's warm
    parents of ondemand pools, their forks; php-fpm's start_servers).
    Returns (seconds since the exec when it last changed, the count)."""
    last_n, last_change = len(b.php_processes()), mono()
    while mono() - last_change < quiet:
        if mono() - b.t0 > timeout:
            raise procs.BenchError(f"{b.name}: php processes still changing after {timeout:.0f} s "
                                   f"({last_n} now)")
        if not b.proc.running():
            raise procs.BenchError(f"{b.name} exited with status {b.proc.proc.returncode} after "
                                   f"its sockets listened")
        time.sleep(0.1 if b.n <= ALL_POOLS_UP_TO else 0.25)
        n = len(b.php_processes())
        if n != last_n:
            last_n, last_change = n, mono()
    return last_change - b.t0, last_n


def sample_pools(args, n):
    """The pools a round asks: every pool up to ALL_POOLS_UP_TO (or with
    --sample 0), else --sample random ones (100), the same for both
    backends (seeded with --seed and N); in pool order."""
    k = args.sample
    if k is None:
        k = 0 if n <= ALL_POOLS_UP_TO else 100
    if k == 0 or k >= n:
        return list(range(n))
    return sorted(random.Random(f"{args.seed}-{n}").sample(range(n), k))


def request_round(b, pools, gen_of, what, timeout):
    """One request to each of `pools`, in that order, one at a time; pool i
    must answer generation gen_of(i). Returns the figures. Requests that
    fail or answer the wrong body are a failure of the backend (b.fails);
    raises BenchError when the round outlasts `timeout` s or the manager
    has exited."""
    ms, bad = [], []
    t0 = mono()
    for i in pools:
        left = timeout - (mono() - t0)
        if left <= 0:
            raise procs.BenchError(f"{what}: not done after {timeout:.0f} s ({len(ms)}/{len(pools)} "
                                   f"pools asked, {len(bad)} failed)")
        r = b.request(i, timeout=min(REQUEST_TIMEOUT, left))
        b.last_asked[i] = mono()
        want = f"scale-ok {marker(i, gen_of(i))} "
        ms.append(round(r["ms"], 3))
        if r["error"] or r["status"] != 200 or not r["body"].startswith(want) \
                or r["protocol_status"] != 0:
            bad.append({"pool": i, "error": r["error"], "status": r["status"],
                        "body": r["body"][:200], "stderr": r["stderr"][:200],
                        "protocol_status": r["protocol_status"], "ms": r["ms"]})
    out = summarize_round(ms, bad, pools)
    out["started_s"] = round(t0 - b.t0, 3)
    out["duration_s"] = round(mono() - t0, 3)
    if not b.proc.running():
        raise procs.BenchError(f"{what}: {b.name} exited with status {b.proc.proc.returncode} "
                               f"({len(bad)}/{len(pools)} requests failed)")
    if bad:
        b.fails.append(b.failure(f"{what}: {len(bad)}/{len(pools)} request(s) failed or answered "
                                 f"the wrong body, e.g. {bad[0]}"))
    return out


def summarize_round(ms, bad, pools):
    slowest = sorted(range(len(ms)), key=lambda k: -ms[k])[:5]
    return {
        "requests": len(ms),
        "failed": len(bad),
        "failures": bad[:5],
        "p50_ms": pct(ms, 50),
        "p90_ms": pct(ms, 90),
        "p99_ms": pct(ms, 99),
        "max_ms": max(ms) if ms else None,
        "mean_ms": round(sum(ms) / len(ms), 3) if ms else None,
        "slowest": [{"pool": pools[k], "ms": ms[k]} for k in slowest],
        "ms": ms,
    }


# Beside the poll of the reloaded pool, at most 11 connections open at
# once: fpmd caps the web server's connections at RLIMIT_NOFILE − 64 − 4 ×
# the pools' max_children, but at least 16 (at 20,000 files and 1,000 pools
# of 5 or more, 16): more and the bench's own requests would queue.
WATCHED_POOLS = 10


class KeepAlive:
    """Beside a reload, a thread per watched pool: one request every `every`
    s after the previous answer (served by an idle child, so none is added
    or retired), so that the pool's children outlive the idle timeout
    however long the reload takes, and whether they are replaced says what
    the reload did. `with KeepAlive(...)`: the threads run inside."""

    def __init__(self, b, pools, every):
        self.b, self.pools, self.every = b, pools, every
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.ok = self.failed = 0
        self.max_ms = 0.0
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(j,), daemon=True) for j in pools]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        deadline = mono() + REQUEST_TIMEOUT / 3 + 1
        for t in self.threads:
            t.join(max(0.0, deadline - mono()))

    def run(self, j):
        while not self.stop_ev.wait(self.every):
            r = self.b.request(j, timeout=REQUEST_TIMEOUT / 3)
            self.b.last_asked[j] = mono()
            with self.lock:
                self.max_ms = max(self.max_ms, r["ms"])
                if r["status"] == 200 and r["body"].startswith(f"scale-ok {marker(j, 0)} "):
                    self.ok += 1
                else:
                    self.failed += 1
                    if len(self.errors) < 3:
                        self.errors.append({"pool": j, "error": r["error"], "status": r["status"],
                                            "body": r["body"][:120]})


def reload_one(b, i, args, out):
    """Changes pool i's user_agent (gen0 -> gen1), reloads, polls pool i
    until it answers with gen1; then compares every other pool's php pids
    with those before the reload. Fills `out`; raises BenchError when the
    manager exits or the new value is never seen."""
    # The pools asked last (their children are alive), asked once more
    # and then kept busy enough during the reload.
    recent = sorted((j for j in b.last_asked if j != i), key=lambda j: -b.last_asked[j])
    watched = sorted(recent[:WATCHED_POOLS])
    refresh = []
    for j in watched:
        r = b.request(j)
        b.last_asked[j] = mono()
        refresh.append(r["status"] == 200 and r["body"].startswith(f"scale-ok {marker(j, 0)} "))
    before = b.pools_pids()
    out["watched"] = {pool_name(j): {"refreshed": ok, "pids_before": sorted(before.get(j, ()))}
                      for j, ok in zip(watched, refresh)}
    b.write_pool(i, 1)
    if isinstance(b, ScaleFpmd) and args.fpmd_reload == "sighup":
        # (`fpmd reload` checks it itself, exit 78; and fpmd -t of
        # thousands of pools takes long.)
        b.check_config(args.start_timeout)
    keep = KeepAlive(b, watched, max(0.5, args.idle_timeout / 4))
    with keep:
        t0 = mono()
        ev = b.reload()
        seen_s = poll_reloaded(b, i, args, t0, ev, out)
        if seen_s is not None and b.proc.running():
            time.sleep(1.0)  # what the reload retires has gone by now
            after = b.pools_pids()
            t_after = mono()
    out["watched_pools"] = len(watched)
    out["watched_requests_ok"] = keep.ok
    out["watched_requests_failed"] = keep.failed
    out["watched_max_ms"] = round(keep.max_ms, 2)
    out["watched_errors"] = keep.errors
    if not b.proc.running():
        raise procs.BenchError(f"{b.name} exited with status {b.proc.proc.returncode} after the "
                               f"reload ({ev['method']}), "
                               + ("after its new value was seen" if seen_s is not None else
                                  f"its new value never seen ({out['polls']} polls, "
                                  f"{out['failed_polls']} failed)"))
    if seen_s is None:
        raise procs.BenchError(f"pool {pool_name(i)} never answered with its new value within "
                               f"{args.reload_timeout:.0f} s of the reload ({out['polls']} polls, "
                               f"{out['failed_polls']} failed: {out['poll_errors'][:2]})")
    for j in watched:
        out["watched"][pool_name(j)]["pids_after"] = sorted(after.get(j, ()))
    others = [j for j in range(b.n) if j != i]
    with_pids = [j for j in others if before.get(j)]
    # Ondemand: a child is retired process_idle_timeout after its last
    # request, whatever the reload does, so only the pools whose last
    # request is recent enough for their children to be alive still (2 s
    # of margin: both managers check idleness once a second) are compared:
    # the watched ones, and those asked last if the reload was quick.
    if b.mode == "ondemand":
        recent = t_after - args.idle_timeout + min(2.0, args.idle_timeout / 2)
        checked = [j for j in with_pids if b.last_asked.get(j, float("-inf")) > recent]
    else:
        checked = with_pids
    changed = [j for j in checked if not before[j] <= after.get(j, set())]
    out["other_pools"] = len(others)
    out["other_pools_with_php"] = len(with_pids)
    out["other_pools_checked"] = len(checked)
    out["other_pools_with_pids_replaced"] = len(changed)
    out["other_pools_pids_before"] = sum(len(before[j]) for j in checked)
    out["other_pools_pids_gone"] = sum(len(before[j] - after.get(j, set())) for j in checked)
    out["other_pools_changed_sample"] = [pool_name(j) for j in changed[:10]]
    out["reloaded_pool_pids_before"] = sorted(before.get(i, set()))
    out["reloaded_pool_pids_after"] = sorted(after.get(i, set()))
    out["unattributed_pids"] = len(b.unattributed)


def poll_reloaded(b, i, args, t0, ev, out):
    """Polls pool i every 5 ms from the reload at t0 until it answers its
    new value, for at most --reload-timeout; returns the seconds it took
    (None: never). What it saw, and `fpmd reload`'s outcome, go into out."""
    old = failed = polls = 0
    errors = []
    seen_s = None
    longest = 0.0
    want_new, want_old = f"scale-ok {marker(i, 1)} ", f"scale-ok {marker(i, 0)} "
    while mono() - t0 < args.reload_timeout:
        left = args.reload_timeout - (mono() - t0)
        r = b.request(i, timeout=max(0.1, min(REQUEST_TIMEOUT, left)))
        polls += 1
        longest = max(longest, r["ms"])
        if r["status"] == 200 and r["body"].startswith(want_new):
            seen_s = mono() - t0
            break
        if r["status"] == 200 and r["body"].startswith(want_old):
            old += 1
        else:
            failed += 1
            if len(errors) < 5:
                errors.append({"error": r["error"], "status": r["status"], "body": r["body"][:200]})
        b.reload_poll(ev)
        if not b.proc.running():
            break
        time.sleep(0.005)
    b.reload_finish(ev, t0 + args.reload_timeout)
    out.update({"pool": i, "trigger": ev, "seen_s": seen_s, "polls": polls,
                "old_value_answers": old, "failed_polls": failed, "poll_errors": errors,
                "longest_poll_ms": round(longest, 2)})
    if ev.get("rc") not in (None, 0):
        b.fails.append(b.failure("`fpmd reload` " + (
            f"did not return within {args.reload_timeout:.0f} s (killed)" if ev["rc"] == "timeout"
            else f"exited {ev['rc']}") + f": {ev.get('output')}"))
    return seen_s


def config_test(args, b):
    """php-fpm -t / fpmd -t, up to ALL_POOLS_UP_TO pools: above, the start
    checks the same and its failure is reported with the log's lines, and
    fpmd -t of 5,000 pools takes minutes (its check of the listen addresses
    is quadratic)."""
    if b.n <= ALL_POOLS_UP_TO:
        b.step = "config test"
        b.check_config(args.start_timeout)


def run_one(args, b, res):
    """Steps 1-6 for one backend, into res (run_all stops it)."""
    b.res = res
    config_test(args, b)
    b.step = "start"
    sockets_s, php_s = wait_started(b, args.start_timeout)
    res["start_sockets_s"] = round(sockets_s, 4)
    res["start_php_s"] = None if php_s is None else round(php_s, 4)
    res["manager_nofile"] = nofile_limit(b.proc.pid)
    b.step = "start (php processes settling)"
    settled_s, settled_php = wait_settled(b, args.start_timeout)
    res["start_settled_s"] = round(max(settled_s, php_s or sockets_s), 4)
    res["start_settled_php"] = settled_php
    time.sleep(0.3)
    res["mem_after_start"] = b.memory()
    log(f"{b.name}: {b.n} {b.mode} pools up: sockets {sockets_s:.3f} s"
        + ("" if php_s is None else f", php {php_s:.3f} s")
        + f"; manager PSS {res['mem_after_start']['manager_pss_mib']} MiB, "
          f"total PSS {res['mem_after_start']['total_pss_mib']} MiB, "
          f"{res['mem_after_start']['php']} php processes")

    b.step = "round 1"
    res["round1"] = request_round(b, b.pools, lambda i: 0, "round 1 (cold)", args.round_timeout)
    res["mem_after_round1"] = b.memory()
    log(f"{b.name}: round 1 ({len(b.pools)} pools): p50 {res['round1']['p50_ms']:.2f} ms, p99 "
        f"{res['round1']['p99_ms']:.2f} ms, max {res['round1']['max_ms']:.2f} ms "
        f"(pool {res['round1']['slowest'][0]['pool']})")

    b.step = "idle"
    wait = args.idle_timeout + args.idle_margin
    time.sleep(wait)
    res["idle_wait_s"] = wait
    if not b.proc.running():
        raise procs.BenchError(f"{b.name} exited with status {b.proc.proc.returncode} while idle")
    res["mem_after_idle"] = b.memory()

    b.step = "round 2"
    res["round2"] = request_round(b, b.pools, lambda i: 0, "round 2 (after idle)", args.round_timeout)
    log(f"{b.name}: round 2: p50 {res['round2']['p50_ms']:.2f} ms, p99 "
        f"{res['round2']['p99_ms']:.2f} ms; php after idle {res['mem_after_idle']['php']}")

    b.step = "reload"
    target = b.n // 2
    res["reload"] = rl = {}
    reload_one(b, target, args, rl)
    log(f"{b.name}: reload of {pool_name(target)}: new value after {rl['seen_s'] * 1000:.0f} ms; "
        f"other pools with replaced php processes: {rl['other_pools_with_pids_replaced']}"
        f"/{rl['other_pools_checked']} checked ({rl['other_pools_with_php']} had some)")

    b.step = "round 3 (after the reload)"
    # The same pools and the reloaded one, which must say gen1.
    res["round3"] = request_round(b, sorted(set(b.pools) | {target}),
                                  lambda i: 1 if i == target else 0,
                                  "after the reload", args.round_timeout)
    res["mem_end"] = b.memory()


def run_backend(args, b, body, res, where):
    """body(args, b, res) for backend b, then its graceful stop, whatever
    happened; its failures (b.fails, each with step, what, exit status, log
    tail) go into res["failures"] and are logged."""
    b.fails = []
    res.update({"backend": b.name, "load_average": os.getloadavg()})
    try:
        body(args, b, res)
    except procs.BenchError as e:
        res["error"] = str(e)
        b.fails.append(b.failure(str(e)))
    finally:
        failed_at = b.step
        b.step = "stop"
        stop, stop_problems = b.stop(args.stop_timeout)
    res["stop"] = stop
    res["stop_s"] = None if stop is None else stop["tree_gone_s"]
    res["stop_ok"] = not stop_problems
    b.fails += [b.failure(p) for p in stop_problems]
    res["failures"] = b.fails
    if "error" in res:
        res["failed_step"] = failed_at
    for f in b.fails:
        log(f"{where}, {b.name}: FAILED at {f['step']}: {f['what'].splitlines()[0][:300]}"
            + (f" (exit status {f['exit_status']})" if "exit_status" in f else ""))
    if stop and stop["tree_gone_s"] is not None:
        log(f"{b.name}: stopped: manager exited after {stop['manager_exit_s']:.2f} s, its tree "
            f"({stop['tree_processes']} processes) gone after {stop['tree_gone_s']:.2f} s")
    lines = []
    for p in b.logs():
        lines += procs.bad_log_lines(p)
    res["log_warnings"] = len(lines)
    return lines


def run_all(args, tmp, www, results, warnings):
    k = 0
    for mode in args.modes:
        results[mode] = {}
        for n in args.pools:
            rundir = os.path.join(tmp, f"{mode}-{n}")
            os.makedirs(rundir)
            os.chmod(rundir, 0o755)
            per = results[mode][str(n)] = {}
            pools = sample_pools(args, n)
            kinds = [ScalePhpFpm, ScaleFpmd] if k % 2 == 0 else [ScaleFpmd, ScalePhpFpm]
            k += 1
            for cls in kinds:
                b = cls(cls.kind, rundir, n, mode, args, www)
                b.pools = pools
                log(f"{mode}, {n} pools: {b.name}"
                    + ("" if len(pools) == n else f" (rounds ask {len(pools)} random pools)"))
                r = per[b.name] = {"pools_asked": len(pools)}
                if len(pools) < n:
                    r["pools_asked_list"] = pools
                lines = run_backend(args, b, run_one, r, f"{mode}, {n} pools")
                if lines:
                    warnings.setdefault(f"{mode}-{n}", {})[b.name] = procs.group_warnings(lines)


# ---------------------------------------------------------------------------
# The graceful stop of N idle ondemand pools
# ---------------------------------------------------------------------------

IDLE_STOP_CASES = (
    ("never_served", "no request served since the start"),
    ("served", "1 s after one request to each asked pool (children alive, none busy)"),
)
IDLE_STOP_SERVED = 100  # the pools asked before the second idle stop


def idle_stop_one(case):
    def body(args, b, res):
        b.res = res
        config_test(args, b)
        b.step = "start"
        sockets_s, _ = wait_started(b, args.start_timeout)
        res["start_sockets_s"] = round(sockets_s, 4)
        b.step = "start (php processes settling)"
        settled_s, _ = wait_settled(b, args.start_timeout)
        res["start_settled_s"] = round(max(settled_s, sockets_s), 4)
        if case == "served":
            b.step = "round"
            res["round"] = request_round(b, b.pools, lambda i: 0, "round", args.round_timeout)
            time.sleep(1.0)
        res["mem_before_stop"] = b.memory()
    return body


def run_idle_stop(args, tmp, www, results, warnings):
    n = args.idle_stop
    # 100 random pools (or fewer), not every pool: one after another,
    # fpmd's exec'd cold starts (~100 ms) would take longer than the idle
    # timeout, and the first pools' children would be gone at the stop.
    k = min(n, IDLE_STOP_SERVED)
    pools = sorted(random.Random(f"{args.seed}-idle-{n}").sample(range(n), k))
    k = 0
    for case, _what in IDLE_STOP_CASES:
        rundir = os.path.join(tmp, f"idle-stop-{n}-{case}")
        os.makedirs(rundir)
        os.chmod(rundir, 0o755)
        kinds = [ScalePhpFpm, ScaleFpmd] if k % 2 == 0 else [ScaleFpmd, ScalePhpFpm]
        k += 1
        for cls in kinds:
            b = cls(cls.kind, rundir, n, "ondemand", args, www)
            b.pools = pools
            log(f"idle stop, {n} ondemand pools, {case}: {b.name}")
            r = results.setdefault(b.name, {})[case] = {"pools_asked": len(pools) if case == "served" else 0}
            lines = run_backend(args, b, idle_stop_one(case), r, f"idle stop {n} ({case})")
            if lines:
                warnings.setdefault(f"idle-stop-{n}-{case}", {})[b.name] = procs.group_warnings(lines)


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------

def get(r, path):
    for k in path.split("."):
        if not isinstance(r, dict) or k not in r:
            return None
        r = r[k]
    return r


def ms_of_s(x):
    return None if x is None else x * 1000


# label, getter(result) -> number or text, ratio?
def rows(mode):
    dyn = mode == "dynamic"
    out = [
        ("start: every socket listens (ms)", lambda r: ms_of_s(r.get("start_sockets_s")), True),
    ]
    if dyn:
        out.append((f"start: every pool has its {START_SERVERS} php process (ms)",
                    lambda r: ms_of_s(r.get("start_php_s")), True))
    out.append(("start: php processes settled (ms; fpmd: warm parents up)",
                lambda r: ms_of_s(r.get("start_settled_s")), True))
    for key, when in (("mem_after_start", "after start"), ("mem_after_round1", "after round 1"),
                      ("mem_after_idle", "after idle")):
        out += [
            (f"manager RSS, {when} (MiB)", lambda r, k=key: get(r, f"{k}.manager_rss_mib"), True),
            (f"manager PSS, {when} (MiB)", lambda r, k=key: get(r, f"{k}.manager_pss_mib"), True),
            (f"total PSS, {when} (MiB)", lambda r, k=key: get(r, f"{k}.total_pss_mib"), True),
            (f"php processes, {when}", lambda r, k=key: f_php(get(r, k)), False),
        ]
        if key == "mem_after_start":
            out += [
                ("round 1 (cold): p50 (ms)", lambda r: get(r, "round1.p50_ms"), True),
                ("round 1 (cold): p90 (ms)", lambda r: get(r, "round1.p90_ms"), True),
                ("round 1 (cold): p99 (ms)", lambda r: get(r, "round1.p99_ms"), True),
                ("round 1 (cold): max (ms)", lambda r: get(r, "round1.max_ms"), True),
                ("round 1: slowest (pool #: ms)", lambda r: f_slowest(get(r, "round1.slowest")),
                 False),
            ]
    out += [
        ("round 2, after idle: p50 (ms)", lambda r: get(r, "round2.p50_ms"), True),
        ("round 2, after idle: p99 (ms)", lambda r: get(r, "round2.p99_ms"), True),
        ("round 2: slowest (pool #: ms)", lambda r: f_slowest(get(r, "round2.slowest"), 3), False),
        ("reload of one pool: new value served after (ms)",
         lambda r: ms_of_s(get(r, "reload.seen_s")), True),
        ("reload: `fpmd reload` returned after (ms)",
         lambda r: ms_of_s(get(r, "reload.trigger.command_s")), False),
        ("reload: polls answered by the old value / failed (the longest, ms)",
         lambda r: None if get(r, "reload.polls") is None else
         f"{r['reload']['old_value_answers']} / {r['reload']['failed_polls']} "
         f"({r['reload'].get('longest_poll_ms', 0):g})", False),
        ("reload: other pools whose php processes were replaced", f_replaced, False),
        ("reload: requests to other pools meanwhile: ok / failed (max ms)", f_watched, False),
        ("after the reload, one request per asked pool: p50 (ms)", lambda r: get(r, "round3.p50_ms"),
         True),
        ("after the reload, one request per asked pool: p99 (ms)", lambda r: get(r, "round3.p99_ms"),
         True),
    ]
    out += stop_rows()
    out += [
        ("the manager's open-file limit (soft/hard)", lambda r: r.get("manager_nofile"), False),
        ("the machine's load average (1 min) when it started",
         lambda r: None if not r.get("load_average") else f"{r['load_average'][0]:.1f}", False),
        ("warning lines in its log", lambda r: r.get("log_warnings"), False),
        ("failed at (step)", f_failed, False),
    ]
    return out


def stop_rows(prefix="stop"):
    return [
        (f"{prefix} (SIGQUIT): processes in the tree", lambda r: get(r, "stop.tree_processes"), False),
        (f"{prefix} (SIGQUIT): the manager exited after (s)", lambda r: get(r, "stop.manager_exit_s"),
         True),
        (f"{prefix} (SIGQUIT): the whole tree gone after (s)", lambda r: get(r, "stop.tree_gone_s"),
         True),
        (f"{prefix}: clean (exit 0, nothing left)",
         lambda r: None if r.get("stop") is None else "yes" if r.get("stop_ok") else "**no**", False),
    ]


def f_replaced(r):
    rl = r.get("reload") or {}
    if rl.get("other_pools") is None:
        return None
    s = (f"{rl['other_pools_with_pids_replaced']}/{rl['other_pools_checked']} pools "
         f"({rl['other_pools_pids_gone']} of {rl['other_pools_pids_before']} pids gone)")
    if rl["other_pools_checked"] != rl["other_pools_with_php"]:
        s += f"; of {rl['other_pools_with_php']} with php processes, those asked recently enough"
    return s


def f_watched(r):
    rl = r.get("reload") or {}
    if rl.get("watched_pools") is None:
        return None
    return (f"{rl['watched_requests_ok']} / {rl['watched_requests_failed']} "
            f"({rl['watched_max_ms']:g}), {rl['watched_pools']} pools")


def f_failed(r):
    fs = r.get("failures") or []
    if not fs:
        return "—"
    return "; ".join(dict.fromkeys(f"**{f['step']}**" + (f" (exit {f['exit_status']})"
                                                         if "exit_status" in f else "")
                                   for f in fs))


def failure_notes(per, cols):
    """Below a table: each backend's failures, what happened and the last
    lines of its logs."""
    lines = []
    for c in cols:
        for f in per[c].get("failures") or []:
            lines += ["", f"**{c} failed at {f['step']}**"
                      + (f" (exit status {f['exit_status']})" if "exit_status" in f else "")
                      + f": {f['what'].splitlines()[0][:400]}"]
            for name, tail in (f.get("log_tail") or {}).items():
                tail = [x for x in tail if x.strip()][-6:]
                if tail:
                    lines += ["", f"{name}, last lines:", "", "```"] + [x[:240] for x in tail] + ["```"]
    return lines


def f_php(m):
    if not m:
        return None
    return str(m["php"]) + (f" (+{m['parents']} parents)" if m.get("parents") else "")


def f_slowest(s, k=5):
    if not s:
        return None
    return ", ".join(f"#{x['pool']}: {x['ms']:.0f}" if x["ms"] >= 10 else
                     f"#{x['pool']}: {x['ms']:.1f}" for x in s[:k])


def cell(v):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    return report.fmt(v)


def table(mode, n, per, args):
    cols = [c for c in ("php-fpm", "fpmd") if c in per]
    idle = f"process_idle_timeout {fmt_dur(args.idle_timeout)}" if mode == "ondemand" else \
        f"start_servers {START_SERVERS}, spare 1–2"
    asked = next((per[c].get("pools_asked") for c in cols), n)
    asked = "" if asked == n else f"; rounds ask {asked} random pools"
    return grid(f"### {mode}, {n} pool{'s' if n != 1 else ''} (max_children {MAX_CHILDREN}, {idle}{asked})",
                per, cols, rows(mode))


def grid(title, per, cols, the_rows):
    lines = [title, "",
             "| metric | " + " | ".join(cols) + " | fpmd / php-fpm |",
             "|---|" + "---|" * (len(cols) + 1)]
    for label, fn, ratio in the_rows:
        vals = []
        for c in cols:
            r = per[c]
            vals.append("failed" if "error" in r and fn(r) is None else cell(fn(r)))
        rt = ""
        if ratio and len(cols) == 2:
            try:
                a, f = fn(per["php-fpm"]), fn(per["fpmd"])
            except Exception:
                a = f = None
            if isinstance(a, (int, float)) and isinstance(f, (int, float)) and a:
                x = f / a
                rt = f"{x:.2f}×" if x >= 0.1 else f"{x:.2g}×"
        lines.append(f"| {label} | " + " | ".join(vals) + f" | {rt} |")
    return "\n".join(lines + failure_notes(per, cols))


def idle_stop_table(n, per, args):
    """One column per backend; the rows of both cases."""
    cols = [c for c in ("php-fpm", "fpmd") if c in per]
    flat = {c: {} for c in cols}
    the_rows = [("start: every socket listens (ms)",
                 lambda r: ms_of_s(get(r, "never_served.start_sockets_s")), True)]
    for case, what in IDLE_STOP_CASES:
        for c in cols:
            flat[c][case] = per[c].get(case, {})
        asked = next((get(per[c], f"{case}.pools_asked") for c in cols), 0)
        what = what.replace("each asked pool", f"each of {asked} random pools"
                            if asked and asked < n else "every pool")
        the_rows.append((f"*{what}*", lambda r: "", False))
        the_rows.append(("php processes at the stop",
                         lambda r, k=case: f_php(get(r, f"{k}.mem_before_stop")), False))
        the_rows.append(("total PSS at the stop (MiB)",
                         lambda r, k=case: get(r, f"{k}.mem_before_stop.total_pss_mib"), True))
        for label, fn, ratio in stop_rows():
            the_rows.append((label, lambda r, k=case, fn=fn: fn(r.get(k, {})), ratio))
        the_rows.append(("failed at (step)", lambda r, k=case: f_failed(r.get(k, {})), False))
    warm = args.warm_min_available or "default"
    text = grid(f"### Graceful stop of {n} idle ondemand pools (fpmd warm_min_available: {warm})",
                flat, cols, the_rows)
    notes = []
    for case, _ in IDLE_STOP_CASES:
        notes += failure_notes({c: per[c].get(case, {}) for c in cols}, cols)
    return "\n".join([text] + notes)


def header(res):
    m, s = res["machine"], res["settings"]
    smoke = ", SMOKE RUN: not a measurement" if res["smoke"] else ""
    return report.header(
        f"N pools: fpmd vs php-fpm ({res['date']}{smoke})",
        m,
        f"; {m['php_cgi']}; {m['php_fpm']}; {m['fpmd']} (repo {m['fpmd_git']}, "
        f"binary {res['fpmd_binary']['source']}, built {res['fpmd_binary']['mtime']}, "
        f"sha256 {res['fpmd_binary']['sha256'][:12]})",
        f"Setup: each backend alone, started fresh for every (mode, N), same N pools: www-data, "
        f"one unix socket each (0660), pm.max_children {MAX_CHILDREN}, pm.max_requests 0, one "
        f"php_admin_value[user_agent] per pool (the script prints it). Requests: one at a time, "
        f"in pool order, to every pool up to {ALL_POOLS_UP_TO} pools and to {s['sample_text']} "
        f"above (the same pools for both backends), straight over FastCGI on each pool's socket "
        f"(no web server), timed from connect() to FCGI_END_REQUEST. \"After idle\": "
        f"{s['idle_wait_s']} s after round 1 (process_idle_timeout + {s['idle_margin_s']:g} s). "
        f"Reload: pool N/2's user_agent changed, php-fpm SIGUSR2, fpmd {s['fpmd_reload']}; timed "
        f"until that pool answers with it, polling its socket; the other pools' php pids compared "
        f"before it and 1 s after. Memory: manager = fpmd / the php-fpm master alone; total = PSS "
        f"of the manager and every descendant. Stop: SIGQUIT, until the manager exits and until "
        f"every process of its tree is gone. fpmd spawn: {s['fpmd_spawn']} (\"parents\": its "
        f"per-pool php-cgi parents, not counted as php processes); warm_min_available: "
        f"{s['fpmd_warm_min_available']}; warm_timeout: {s.get('fpmd_warm_timeout', 'default')}. "
        f"{s['rlimit_note']}")


# ---------------------------------------------------------------------------
# Chart
# ---------------------------------------------------------------------------

def draw_chart(res, png, problems):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError:
        problems.append("matplotlib missing (apt-get install python3-matplotlib): no chart")
        return
    modes = [m for m in res["settings"]["modes"] if m in res["results"]]
    if not modes:
        return
    colors = {"php-fpm": "#ff7f0e", "fpmd": "#1f77b4"}
    fig, axes = plt.subplots(len(modes), 3, figsize=(15, 4.2 * len(modes)), squeeze=False)
    for mi, mode in enumerate(modes):
        per_n = res["results"][mode]
        ns = sorted(int(n) for n in per_n)
        for bname in ("php-fpm", "fpmd"):
            def series(path):
                xs, ys = [], []
                for n in ns:
                    v = get(per_n[str(n)].get(bname, {}), path)
                    if isinstance(v, (int, float)) and v > 0:
                        xs.append(n)
                        ys.append(v)
                return xs, ys
            c = colors[bname]
            ax = axes[mi][0]
            for path, style, what in (("round1.p50_ms", "-o", "p50"), ("round1.p99_ms", "--s", "p99")):
                xs, ys = series(path)
                ax.plot(xs, ys, style, color=c, label=f"{bname} {what}")
            ax = axes[mi][1]
            for path, style, what in (("mem_after_start.manager_rss_mib", "-o", "RSS"),
                                      ("mem_after_start.manager_pss_mib", "--s", "PSS")):
                xs, ys = series(path)
                ax.plot(xs, ys, style, color=c, label=f"{bname} {what}")
            ax = axes[mi][2]
            for path, style, what in (("mem_after_start.total_pss_mib", "-o", "after start"),
                                      ("mem_after_idle.total_pss_mib", "--s", "after idle")):
                xs, ys = series(path)
                ax.plot(xs, ys, style, color=c, label=f"{bname} {what}")
        for ax, title, unit in ((axes[mi][0], "cold request (round 1), one per asked pool", "ms"),
                                (axes[mi][1], "manager memory after start", "MiB"),
                                (axes[mi][2], "total PSS (manager + children)", "MiB")):
            ax.set_title(f"{mode}: {title}", fontsize=10)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("pools (N)")
            ax.set_ylabel(unit)
            ax.set_xticks(ns)
            ax.set_xticklabels([str(n) for n in ns])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _p: f"{v:g}"
                                                       if f"{v:.1g}"[0] in "25" else ""))
            ax.tick_params(axis="y", which="minor", labelsize=7)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    failed = " — RUN FAILED, see problems" if problems else ""
    smoke = " — smoke run" if res["smoke"] else ""
    fig.suptitle(f"fpmd vs php-fpm 8.2, N pools ({res['date']}){smoke}{failed}", fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=110)
    log(f"wrote {png}")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="N pools, fpmd vs php-fpm: start, memory, cold "
                                            "requests, reload, stop (see bench/README.md)")
    p.add_argument("--pools", default="1,50,200,500",
                   help="pool counts, up to 9999 (default 1,50,200,500; e.g. 2000,5000 with "
                        "--modes ondemand); none: only the idle stop")
    p.add_argument("--sample", type=int, metavar="K",
                   help=f"a round asks K random pools (the same for both backends); 0: every "
                        f"pool (default: every pool up to {ALL_POOLS_UP_TO} pools, 100 above)")
    p.add_argument("--seed", type=int, default=23, help="seed of the random pools (default 23)")
    p.add_argument("--idle-stop", type=int, default=500, metavar="N",
                   help="also the graceful stop of N idle ondemand pools, each backend started "
                        "twice (default 500; 0: not run)")
    p.add_argument("--modes", default="ondemand,dynamic", help="pm modes (default ondemand,dynamic)")
    p.add_argument("--idle-timeout", type=float, default=10.0,
                   help="ondemand pm.process_idle_timeout, seconds (default 10)")
    p.add_argument("--idle-margin", type=float, default=3.0,
                   help="seconds waited beyond the idle timeout before the 'after idle' figures "
                        "(default 3; php-fpm checks idle children once a second)")
    p.add_argument("--fpmd-reload", choices=["sighup", "command"], default="sighup",
                   help="how fpmd is reloaded: SIGHUP (default, as php-fpm's SIGUSR2 a signal) "
                        "or `fpmd -c FILE reload` (waits until in force)")
    p.add_argument("--spawn", choices=["exec", "prefork", "shared"],
                   help="write pm.spawn into fpmd's pools (default: no key, fpmd's default prefork)")
    p.add_argument("--warm-min-available", metavar="VALUE",
                   help="write warm_min_available = VALUE into fpmd's [global] (e.g. 100%%: no "
                        "warm php-cgi parent for idle ondemand pools, as php-fpm; default: no key, "
                        "fpmd's default)")
    p.add_argument("--warm-timeout", metavar="VALUE",
                   help="write warm_timeout = VALUE into fpmd's [global] (e.g. \"0\": no php-cgi "
                        "parent kept once an ondemand pool's children retired, as php-fpm; "
                        "default: no key, fpmd's default 10 minutes)")
    p.add_argument("--nofile", type=int, default=65536,
                   help="RLIMIT_NOFILE (soft and hard) raised to at least this in the bench's "
                        "process, which both managers inherit (default 65536)")
    p.add_argument("--start-timeout", type=float, default=180.0,
                   help="seconds a backend's config test may take, and its start until its "
                        "sockets listen and its php processes settle (default 180)")
    p.add_argument("--round-timeout", type=float, default=300.0,
                   help="seconds a round of requests may take (default 300; each request 30 s "
                        "at most)")
    p.add_argument("--reload-timeout", type=float, default=60.0,
                   help="seconds until the reloaded pool must answer its new value, and `fpmd "
                        "reload` must return (default 60)")
    p.add_argument("--stop-timeout", type=float, default=60.0,
                   help="seconds after SIGQUIT until the process tree must be gone, before "
                        "SIGTERM (default 60)")
    p.add_argument("--smoke", action="store_true",
                   help="quick check that the bench works: --pools 1,5, --idle-timeout 2, "
                        "--idle-margin 2, --idle-stop 5 "
                        "(explicit options win), into a temp dir unless --out/--chart are given")
    p.add_argument("--out", help="JSON output (default bench/results/scale.json)")
    p.add_argument("--chart", metavar="PNG", help="chart (default bench/results/scale.png)")
    p.add_argument("--markdown", help="also write the tables to this file")
    servers.common_options(p, nginx=False)
    a = p.parse_args(argv)
    given = set(x.split("=")[0] for x in argv)
    if a.smoke:
        if "--pools" not in given:
            a.pools = "1,5"
        if "--idle-timeout" not in given:
            a.idle_timeout = 2.0
        if "--idle-margin" not in given:
            a.idle_margin = 2.0
        if "--idle-stop" not in given:
            a.idle_stop = 5
    try:
        a.pools = [] if a.pools.strip() == "none" else [int(x) for x in a.pools.split(",") if x.strip()]
    except ValueError:
        p.error("--pools: comma-separated integers, or none")
    if any(n < 1 or n > 9999 for n in a.pools) or (not a.pools and not a.idle_stop):
        p.error("--pools: between 1 and 9999 (none only with --idle-stop)")
    if not 0 <= a.idle_stop <= 9999 or (a.sample is not None and a.sample < 0):
        p.error("--idle-stop: 0 to 9999; --sample: at least 0")
    if min(a.start_timeout, a.round_timeout, a.reload_timeout, a.stop_timeout) <= 0:
        p.error("timeouts: more than 0 s")
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in a.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r} (ondemand, dynamic)")
    if a.idle_timeout < 1 or a.idle_margin < 0:
        p.error("--idle-timeout: at least 1 s; --idle-margin: at least 0")
    if not a.php_fpm:
        a.php_fpm = servers.default_php_fpm()
    return a


def preflight(args):
    servers.preflight(args, "make bench-scale")


def raise_limits(nofile):
    """In this process, so that both managers inherit the same limits (and
    give them to their children): RLIMIT_NOFILE soft and hard up to at least
    `nofile` (root may raise the hard limit, up to fs.nr_open), else soft up
    to hard; RLIMIT_NPROC soft up to hard."""
    notes = {}
    for name, lim in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = resource.getrlimit(lim)
        want = hard
        if name == "nofile" and hard != resource.RLIM_INFINITY and hard < nofile:
            want = nofile
        if soft != want or hard != want:
            try:
                resource.setrlimit(lim, (want, want))
            except (ValueError, OSError) as e:
                notes.setdefault("errors", []).append(f"{name} {want}: {e}")
                try:
                    resource.setrlimit(lim, (hard, hard))
                except (ValueError, OSError):
                    pass
        new = resource.getrlimit(lim)
        notes[name] = {"before": [soft, hard], "now": list(new)}
    return notes


def all_failures(results, idle_stop):
    """(where, backend, failure) of every backend's failures."""
    for mode, byn in results.items():
        for n, per in byn.items():
            for name, r in per.items():
                for f in r.get("failures") or []:
                    yield f"{mode}, {n} pools", name, f
    for name, cases in idle_stop.items():
        for case, r in cases.items():
            for f in r.get("failures") or []:
                yield f"idle stop ({case})", name, f


def lim_text(v):
    return "unlimited" if v == resource.RLIM_INFINITY else str(v)


def main(argv):
    args = parse_args(argv)
    if not tree.ready("bench-scale", preflight, args):
        return 2

    limits = raise_limits(args.nofile)
    rlimit_note = ("Limits given to both managers (raised by the bench in its own process, "
                   "inherited): " + ", ".join(
                       f"RLIMIT_{k.upper()} {lim_text(v['now'][0])}/{lim_text(v['now'][1])} (was "
                       f"{lim_text(v['before'][0])}/{lim_text(v['before'][1])})"
                       for k, v in limits.items() if k != "errors") + " (soft/hard)."
                   + "".join(f" Could not raise {e}." for e in limits.get("errors", [])))
    log(rlimit_note)

    results, idle_stop, warnings = {}, {}, {}
    # The backends are stopped by run_all, each after its run; the clean-up
    # kills what still runs from the temp dir, one problem each.
    run = tree.Run("fpmd-bench-scale.", log, strays_one_by_one=True)
    problems, tmp = run.problems, run.tmp
    smoke_dir = None
    if args.smoke and not args.out:
        smoke_dir = tempfile.mkdtemp(prefix="fpmd-bench-scale-smoke.")
    out = args.out or (os.path.join(smoke_dir, "scale.json") if smoke_dir else
                       os.path.join(HERE, "results", "scale.json"))
    chart = args.chart or (os.path.join(smoke_dir, "scale.png") if smoke_dir else
                           os.path.join(HERE, "results", "scale.png"))
    binfo = None
    with run:
        www, _ = tree.www_dir(tmp, files=[("scale.php", SCALE_PHP)])
        args.fpmd_copy, binfo = tree.copy_fpmd(args.fpmd, tmp)
        log(f"temp dir {tmp}")
        run_all(args, tmp, www, results, warnings)
        if args.idle_stop:
            run_idle_stop(args, tmp, www, idle_stop, warnings)

    # fpmd's failures fail the run; php-fpm's are findings (the reference,
    # with known limits at thousands of pools), except in a smoke run.
    php_fpm_failures = []
    for where, name, f in all_failures(results, idle_stop):
        text = (f"{where}, {name}: failed at {f['step']}"
                + (f" (exit status {f['exit_status']})" if "exit_status" in f else "")
                + f": {f['what'].splitlines()[0][:400]}")
        (problems if name == "fpmd" or args.smoke else php_fpm_failures).append(text)

    if (results or idle_stop) and binfo:
        res = report.head(run.date, report.machine_info(args.php_fpm, args.fpmd),
                          smoke=args.smoke, fpmd_binary=binfo)
        res.update({
            "settings": {
                "pools": args.pools, "modes": args.modes, "max_children": MAX_CHILDREN,
                "max_requests": 0, "idle_timeout_s": args.idle_timeout,
                "idle_margin_s": args.idle_margin,
                "idle_wait_s": args.idle_timeout + args.idle_margin,
                "dynamic": {"start_servers": START_SERVERS, "min_spare_servers": 1,
                            "max_spare_servers": 2},
                "fpmd_reload": "SIGHUP" if args.fpmd_reload == "sighup" else "`fpmd -c FILE reload`",
                "fpmd_spawn": args.spawn or "default (prefork)",
                "fpmd_warm_min_available": args.warm_min_available or "default (no key)",
                "fpmd_warm_timeout": args.warm_timeout or "default (no key, 10m)",
                "sample": args.sample, "seed": args.seed,
                "sample_text": ("every pool" if args.sample == 0 else
                                f"{100 if args.sample is None else args.sample} random pools"),
                "idle_stop_pools": args.idle_stop,
                "timeouts_s": {"start": args.start_timeout, "round": args.round_timeout,
                               "request": REQUEST_TIMEOUT, "reload": args.reload_timeout,
                               "stop": args.stop_timeout, "config_test": args.start_timeout},
                "limits": limits, "rlimit_note": rlimit_note,
                "socket_up": "the path listens in /proc/net/unix (no connection is made)",
                "request": "FastCGI responder over the pool's unix socket, one connection per "
                           "request, connect() to FCGI_END_REQUEST, in pool order, one at a time",
                "reloaded_pool": "pool N // 2",
            },
            "results": results,
            "idle_stop": idle_stop,
            "log_warnings": warnings,
            "php_fpm_failures": php_fpm_failures,
            "problems": problems,
            "ok": not problems,
            "elapsed_s": run.elapsed_s(),
        })
        text = header(res) + "\n" + "\n\n".join(
            [table(mode, int(n), per, args) for mode, byn in results.items() for n, per in byn.items()]
            + ([idle_stop_table(args.idle_stop, idle_stop, args)] if idle_stop else []))
        res["markdown"] = text
        if report.save(res, out, run.interrupted, log):
            draw_chart(res, chart, problems)
        report.show(text, args.markdown)
        report.print_list("Warnings in the backends' logs (mode-N, backend: count × message):",
                          report.grouped_warnings(warnings))
        report.print_list("php-fpm's failures (reported; they do not fail the run):",
                          php_fpm_failures)
        report.print_list("PROBLEMS (the run failed):", problems)

    if problems:
        procs.show_tails([os.path.join(tmp, d, name, f)
                          for d in (sorted(os.listdir(tmp)) if os.path.isdir(tmp) else [])
                          for name in ("php-fpm", "fpmd")
                          for f in ("php-fpm.log", "fpmd.log", "stdout.log")], log, 8)
    run.remove_tmp(args.keep_tmp)
    if smoke_dir and not problems:
        shutil.rmtree(smoke_dir, ignore_errors=True)
    elif smoke_dir:
        log(f"smoke result and chart kept in {smoke_dir}")
    return run.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
