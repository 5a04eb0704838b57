#!/usr/bin/python3
"""fpmd vs php-fpm, side by side behind one nginx.

Starts, in a private temp dir, one nginx (one server block and port per
backend, identical except for the upstream), php-fpm with a static pool and
fpmd with a static pool of the same size, then measures with wrk, alternating
backends (A B, then B A, ...) for every workload of every round:

  hello.php, phpinfo.php, DokuWiki's start page, sleep.php (usleep 50 ms):
      requests/s, p50 and p99 latency, non-2xx responses (exact, from an
      nginx log that records only non-2xx), wrk socket errors;
  memory: PSS of the whole pool (manager + every descendant, from
      /proc/PID/smaps_rollup) at idle after warm-up, and right after the
      DokuWiki load;
  the manager's own RSS (VmRSS, sampled in the middle of each load; the
      peak is reported) and CPU seconds (utime+stime of the manager process
      alone) per 10,000 requests.

Prints a markdown table (medians per backend, median of the per-round ratios
fpmd/php-fpm) and writes the JSON (machine, settings, every raw round,
medians, ratios). Exits non-zero when anything failed: a backend that did not
start or answer, a non-2xx response, a socket error, a process that died or
was left behind. Every process it starts is stopped on exit, Ctrl-C included.

Stdlib only. Run as root (pools run as www-data). See bench/README.md.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLK_TCK = os.sysconf("SC_CLK_TCK")
POOL_USER = "www-data"
DOKUWIKI_ROOT = "/usr/share/dokuwiki"

# name, URL path, content that proves the page really ran, DokuWiki?
WORKLOADS = {
    "hello": ("/bench/hello.php", "Hello, world!", False),
    "phpinfo": ("/bench/phpinfo.php", "PHP Version", False),
    "dokuwiki": ("/doku.php", "DokuWiki", True),
    "sleep": ("/bench/sleep.php", "slept 50 ms", False),
}
# Run order within a backend's turn; pool PSS "after DokuWiki" is sampled
# right after its DokuWiki run.
DEFAULT_WORKLOADS = "hello,phpinfo,dokuwiki,sleep"


class BenchError(Exception):
    """A failure that stops the run (a backend that does not start, ...)."""


class Stalled(Exception):
    """A backend answered nothing for a whole wrk run: the rest of its turn is skipped."""


class Interrupted(BaseException):
    pass


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


# ---------------------------------------------------------------------------
# Processes we start
# ---------------------------------------------------------------------------

def _child_setup():
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
                                     preexec_fn=_child_setup)
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


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------

class Backend:
    kind = "?"

    def __init__(self, name, tmp, children):
        self.name = name
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "backend.sock")
        self.children = children
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(self.dir, "backend.log")
        self.nginx_bad = os.path.join(tmp, f"nginx-{name}-non2xx.log")
        self.nginx_err = os.path.join(tmp, f"nginx-{name}-error.log")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def pool(self):
        """PSS of the whole pool: manager + every descendant (kB), with the parts."""
        pids = [self.proc.pid] + descendants(self.proc.pid)
        parts = [(p, comm(p), pss_kib(p)) for p in pids]
        parts = [x for x in parts if x[2] is not None]
        self.proc.snapshot()
        return {
            "pss_kib": sum(x[2] for x in parts),
            "manager_pss_kib": pss_kib(self.proc.pid),
            "processes": len(parts),
            "php_processes": sum(1 for x in parts[1:] if x[1].startswith("php")),
            "per_process": [{"pid": p, "comm": c, "pss_kib": k} for p, c, k in parts],
        }

    def manager_ticks(self):
        st = proc_stat(self.proc.pid)
        return st[1] if st else None

    def manager_rss_kib(self):
        return status_kib(self.proc.pid, "VmRSS")

    def wait_ready(self, want_php, timeout=20.0):
        """Waits for the socket and want_php php processes under the manager."""
        deadline = time.time() + timeout
        n = 0
        while time.time() < deadline:
            if not self.proc.running():
                raise BenchError(f"{self.name} exited with status {self.proc.proc.returncode} "
                                 f"while starting; its log ends with:\n  " +
                                 "\n  ".join(tail(self.log_path) + tail(self.error_log())))
            n = sum(1 for p in descendants(self.proc.pid) if comm(p).startswith("php"))
            if os.path.exists(self.sock) and n >= want_php:
                return
            time.sleep(0.1)
        raise BenchError(f"{self.name} not ready after {timeout:.0f} s (socket: "
                         f"{os.path.exists(self.sock)}, php processes: {n}/{want_php}); log:\n  " +
                         "\n  ".join(tail(self.log_path) + tail(self.error_log())))

    def error_log(self):
        return self.log_path

    def launch(self, argv):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.proc = Managed(self.name, argv, self.log_path, signal.SIGQUIT)

    def stop(self):
        """Graceful stop (SIGQUIT); returns what went wrong, if anything."""
        if self.proc is None or self.proc.stopped:
            return []
        out = []
        t0 = time.time()
        left = self.proc.stop()
        took = time.time() - t0
        if left:
            out.append(f"{self.name}: {len(left)} process(es) still alive after it exited "
                       f"(killed): " + ", ".join(f"{p} ({c})" for p, c in left))
        rc = self.proc.proc.returncode
        if rc != 0:
            out.append(f"{self.name} exited with status {rc} after SIGQUIT "
                       f"({'killed by signal ' + str(-rc) if rc and rc < 0 else 'expected 0'})")
        if took > 8:
            out.append(f"{self.name} took {took:.1f} s to stop on SIGQUIT (idle, nginx stopped)")
        return out


class Fpmd(Backend):
    kind = "fpmd"

    def __init__(self, name, tmp, children, binary, spawn, sessions):
        super().__init__(name, tmp, children)
        self.spawn = spawn
        self.binary = binary
        self.conf = os.path.join(self.dir, "fpmd.toml")
        self.fpmd_log = os.path.join(self.dir, "fpmd.log")
        os.makedirs(os.path.join(self.dir, "pool.d"))
        q = json.dumps
        with open(self.conf, "w") as f:
            f.write(f"[global]\nerror_log = {q(self.fpmd_log)}\ninclude = \"pool.d/*.toml\"\n")
        pool = [
            "[bench]",
            f"user = {q(POOL_USER)}",
            f"group = {q(POOL_USER)}",
            f"listen.address = {q(self.sock)}",
            f"listen.owner = {q(POOL_USER)}",
            f"listen.group = {q(POOL_USER)}",
            'listen.mode = "0660"',
            'pm.mode = "static"',
            f"pm.max_children = {children}",
            "pm.max_requests = 0",
        ]
        if spawn:
            pool.append(f"pm.spawn = {q(spawn)}")
        pool.append(f'php_admin_value."session.save_path" = {q(sessions)}')
        with open(os.path.join(self.dir, "pool.d", "bench.toml"), "w") as f:
            f.write("\n".join(pool) + "\n")

    def error_log(self):
        return self.fpmd_log

    def start(self):
        r = run([self.binary, "-c", self.conf, "-t"])
        if r.returncode != 0:
            raise BenchError(f"{self.name}: `fpmd -c {self.conf} -t` failed ({r.returncode}):\n{r.stdout}")
        self.launch([self.binary, "-c", self.conf])
        self.wait_ready(self.children)

    def describe(self):
        return {"name": self.name, "kind": self.kind, "spawn": self.spawn,
                "pm.spawn written": self.spawn is not None, "binary": self.binary}


class PhpFpm(Backend):
    kind = "php-fpm"

    def __init__(self, name, tmp, children, binary, sessions):
        super().__init__(name, tmp, children)
        self.binary = binary
        self.conf = os.path.join(self.dir, "php-fpm.conf")
        self.fpm_log = os.path.join(self.dir, "php-fpm.log")
        with open(self.conf, "w") as f:
            f.write(f"""[global]
pid = {self.dir}/php-fpm.pid
error_log = {self.fpm_log}
daemonize = no

[bench]
user = {POOL_USER}
group = {POOL_USER}
listen = {self.sock}
listen.owner = {POOL_USER}
listen.group = {POOL_USER}
listen.mode = 0660
pm = static
pm.max_children = {children}
pm.max_requests = 0
php_admin_value[session.save_path] = {sessions}
""")

    def error_log(self):
        return self.fpm_log

    def start(self):
        r = run([self.binary, "-t", "-y", self.conf])
        if r.returncode != 0:
            raise BenchError(f"{self.name}: `{self.binary} -t -y {self.conf}` failed:\n{r.stdout}")
        self.launch([self.binary, "-F", "-R", "-y", self.conf])
        self.wait_ready(self.children)

    def describe(self):
        return {"name": self.name, "kind": self.kind, "binary": self.binary}


# ---------------------------------------------------------------------------
# nginx
# ---------------------------------------------------------------------------

def nginx_conf(tmp, www, backends, keepalive):
    keep_conn = "            fastcgi_keep_conn on;\n" if keepalive else ""
    fastcgi = f"""            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
{keep_conn}            fastcgi_buffer_size 16k;
            fastcgi_buffers 16 16k;
"""
    out = [f"""# generated by bench/bench.py
daemon off;
master_process on;
worker_processes 1;
user {POOL_USER} {POOL_USER};
pid {tmp}/nginx/nginx.pid;
error_log {tmp}/nginx/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {tmp}/nginx/body;
    fastcgi_temp_path {tmp}/nginx/fastcgi;
    proxy_temp_path {tmp}/nginx/proxy;
    uwsgi_temp_path {tmp}/nginx/uwsgi;
    scgi_temp_path {tmp}/nginx/scgi;
    # Only non-2xx responses are logged: the bench counts them per backend.
    map $status $bench_non2xx {{ ~^2 0; default 1; }}
    log_format bench_non2xx '$status upstream=$upstream_status $request_time "$request"';
"""]
    for b in backends:
        up = "up_" + re.sub(r"\W", "_", b.name)
        out.append(f"""
    upstream {up} {{
        server unix:{b.sock};
{f"        keepalive {keepalive};" if keepalive else "        # no keepalive"}
    }}
    server {{   # {b.name}
        listen 127.0.0.1:{b.port};
        access_log {b.nginx_bad} bench_non2xx if=$bench_non2xx;
        error_log {b.nginx_err} error;
        root {DOKUWIKI_ROOT};
        index doku.php;
        location ^~ /bench/ {{
            root {www};
            location ~ \\.php$ {{
{fastcgi}                fastcgi_pass {up};
            }}
        }}
        location ~ \\.php$ {{
{fastcgi}            fastcgi_pass {up};
        }}
    }}
""")
    out.append("}\n")
    return "".join(out)


class Nginx:
    def __init__(self, tmp, www, backends, binary, keepalive):
        self.dir = os.path.join(tmp, "nginx")
        for d in ("", "body", "fastcgi", "proxy", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(nginx_conf(tmp, www, backends, keepalive))
        self.binary = binary
        self.log_path = os.path.join(self.dir, "nginx.out")
        self.proc = None

    def start(self):
        r = run([self.binary, "-t", "-p", self.dir, "-c", self.conf])
        if r.returncode != 0:
            raise BenchError(f"nginx -t failed:\n{r.stdout}")
        self.proc = Managed("nginx", [self.binary, "-p", self.dir, "-c", self.conf],
                            self.log_path, signal.SIGQUIT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if not self.proc.running():
                raise BenchError("nginx exited: " + "\n".join(tail(self.log_path) +
                                                              tail(os.path.join(self.dir, "error.log"))))
            if descendants(self.proc.pid):
                self.proc.snapshot()
                return
            time.sleep(0.1)
        raise BenchError("nginx has no worker after 10 s")


def http_get(url, timeout=30):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


# ---------------------------------------------------------------------------
# wrk
# ---------------------------------------------------------------------------

class Wrk:
    def __init__(self, binary, threads, lua):
        self.binary = binary
        self.threads = threads
        self.lua = lua
        self.current = None

    def start(self, url, connections, seconds):
        argv = [self.binary, f"-t{self.threads}", f"-c{connections}", f"-d{seconds}s",
                "--timeout", "10s", "-s", self.lua, url]
        self.current = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True, preexec_fn=_child_setup)
        return self.current

    def finish(self, seconds):
        p = self.current
        try:
            out, _ = p.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            raise BenchError(f"wrk did not finish: {out}")
        finally:
            self.current = None
        for line in out.splitlines():
            if line.startswith("WRKJSON "):
                return json.loads(line[8:]), out
        raise BenchError(f"wrk failed (exit {p.returncode}):\n{out}")

    def kill(self):
        if self.current and self.current.poll() is None:
            self.current.kill()
            self.current.wait()


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------

def measure(backend, workload, wrk, connections, seconds, sample_rss=True):
    """One wrk run against one backend; returns the raw figures."""
    path = WORKLOADS[workload][0]
    bad0, err0 = file_size(backend.nginx_bad), file_size(backend.nginx_err)
    log0 = file_size(backend.error_log())
    t0 = backend.manager_ticks()
    wrk.start(backend.url(path), connections, seconds)
    rss = None
    if sample_rss:
        time.sleep(seconds / 2)
        rss = backend.manager_rss_kib()
        backend.proc.snapshot()
    res, raw = wrk.finish(seconds)
    t1 = backend.manager_ticks()
    # nginx logs the requests wrk abandoned at its stop a moment after wrk exits.
    time.sleep(0.3)
    non2xx, unanswered = [], []
    for line in count_lines_from(backend.nginx_bad, bad0):
        line = line.decode(errors="replace")
        # 499: wrk closed the connection before the answer came. wrk does
        # that to every request still in flight when its time is up; a
        # request that waited much longer than the others was starved.
        (unanswered if line.startswith("499 ") else non2xx).append(line)
    waits = []
    for line in unanswered:
        try:
            waits.append(float(line.split()[2]))
        except (IndexError, ValueError):
            pass
    nginx_errors = [l.decode(errors="replace") for l in count_lines_from(backend.nginx_err, err0)]
    reqs = res["requests"]
    dur = res["duration_us"] / 1e6
    cpu = None if t0 is None or t1 is None else (t1 - t0) / CLK_TCK
    return {
        "backend": backend.name,
        "workload": workload,
        "connections": connections,
        "requests": reqs,
        "duration_s": round(dur, 3),
        "rps": round(reqs / dur, 1) if dur > 0 else 0.0,
        # No latency without an answered request (wrk would say 0).
        "p50_ms": res["p50_us"] / 1000 if reqs else None,
        "p90_ms": res["p90_us"] / 1000 if reqs else None,
        "p99_ms": res["p99_us"] / 1000 if reqs else None,
        "max_ms": res["max_us"] / 1000 if reqs else None,
        "non2xx": len(non2xx),
        "non2xx_sample": non2xx[:5],
        "unanswered_at_stop": len(unanswered),
        "unanswered_longest_wait_s": max(waits) if waits else None,
        "unanswered_waited_over_1s": sum(1 for w in waits if w > 1.0),
        "socket_errors": {k: res[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts")},
        "wrk_status_errors": res["status_errors"],
        "manager_cpu_s": cpu,
        "manager_cpu_s_per_10k": round(cpu / reqs * 10000, 4) if cpu is not None and reqs else None,
        "manager_rss_kib": rss,
        "nginx_errors": nginx_errors[:5],
        "nginx_error_count": len(nginx_errors),
        "backend_log_problems": bad_log_lines(backend.error_log(), log0)[:10],
        "manager_alive": backend.proc.running(),
    }


def write_json(path, res):
    """`res` as indented JSON into `path` (its directory made if missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


def print_list(title, items):
    """`title` and `items` as a markdown list on stdout; nothing when empty."""
    if not items:
        return
    print(title)
    for item in items:
        print(f"- {item}")
    print()


def grouped_warnings(per_run, limit=6):
    """`{run: {backend: [{count, message}]}}` (the scripts' grouped log
    warnings) as 'run, backend: count × message' lines, `limit` a pair."""
    return [f"{run}, {name}: {g['count']} × {g['message'][:200]}"
            for run, per in per_run.items() for name, groups in per.items()
            for g in groups[:limit]]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# metric key -> (label, unit, better, how to get the per-round value)
def metric_defs(workloads):
    defs = []
    for w in workloads:
        defs += [
            (f"{w}.rps", f"{w}: requests/s", "req/s", "higher"),
            (f"{w}.p50_ms", f"{w}: p50 latency", "ms", "lower"),
            (f"{w}.p99_ms", f"{w}: p99 latency", "ms", "lower"),
            (f"{w}.non2xx", f"{w}: non-2xx + socket errors (sum of rounds)", "", None),
            (f"{w}.unanswered", f"{w}: unanswered when wrk stopped (sum of rounds; longest wait)",
             "", None),
        ]
    defs += [
        ("pool_pss_idle_mib", "pool PSS, idle after warm-up", "MiB", "lower"),
    ]
    if "dokuwiki" in workloads:
        defs.append(("pool_pss_after_dokuwiki_mib", "pool PSS, after DokuWiki load", "MiB", "lower"))
    defs.append(("manager_rss_mib", "manager RSS, peak mid-load sample", "MiB", "lower"))
    defs.append(("manager_rss_max_mib", "manager peak RSS over the run (VmHWM)", "MiB", "lower"))
    for w in workloads:
        defs.append((f"{w}.manager_cpu_s_per_10k", f"manager CPU s / 10k requests, {w}", "s", "lower"))
    return defs


def round_values(rnd, backend, workloads):
    """Flat {metric key: value} of one backend in one round."""
    v = {}
    runs = {r["workload"]: r for r in rnd["runs"] if r["backend"] == backend}
    rss = []
    for w in workloads:
        r = runs.get(w)
        if not r:
            continue
        v[f"{w}.rps"] = r["rps"]
        v[f"{w}.p50_ms"] = r["p50_ms"]
        v[f"{w}.p99_ms"] = r["p99_ms"]
        v[f"{w}.non2xx"] = r["non2xx"] + sum(r["socket_errors"].values())
        v[f"{w}.unanswered"] = r["unanswered_at_stop"]
        v[f"{w}.unanswered_longest_wait_s"] = r["unanswered_longest_wait_s"]
        v[f"{w}.manager_cpu_s_per_10k"] = r["manager_cpu_s_per_10k"]
        if r["manager_rss_kib"] is not None:
            rss.append(r["manager_rss_kib"])
    idle = rnd["pool_idle"].get(backend)
    if idle:
        v["pool_pss_idle_mib"] = round(idle["pss_kib"] / 1024, 2)
    after = rnd["pool_after_dokuwiki"].get(backend)
    if after:
        v["pool_pss_after_dokuwiki_mib"] = round(after["pss_kib"] / 1024, 2)
    if rss:
        v["manager_rss_mib"] = round(max(rss) / 1024, 2)
    hwm = rnd["manager_hwm_kib"].get(backend)
    if hwm is not None:
        v["manager_rss_max_mib"] = round(hwm / 1024, 2)
    return v


def summarize(rounds, backends, baseline, workloads):
    metrics = {}
    for key, label, unit, better in metric_defs(workloads):
        per_round = {b: [round_values(r, b, workloads).get(key) for r in rounds] for b in backends}
        m = {"label": label, "unit": unit, "better": better, "per_round": per_round}
        if key.endswith(".non2xx") or key.endswith(".unanswered"):
            m["total"] = {b: (None if all(x is None for x in per_round[b])
                              else sum(x or 0 for x in per_round[b])) for b in backends}
            if key.endswith(".unanswered"):
                wkey = key + "_longest_wait_s"
                m["longest_wait_s"] = {
                    b: max([x for x in (round_values(r, b, workloads).get(wkey) for r in rounds)
                            if x is not None], default=None) for b in backends}
            metrics[key] = m
            continue
        m["median"] = {b: median(per_round[b]) for b in backends}
        ratios, rmed = {}, {}
        for b in backends:
            if b == baseline:
                continue
            rs = []
            for x, y in zip(per_round[b], per_round[baseline]):
                rs.append(round(x / y, 4) if x is not None and y else None)
            ratios[b] = rs
            rmed[b] = median(rs)
        m["ratio_per_round"] = ratios
        m["ratio_median"] = rmed
        metrics[key] = m
    return metrics


def fmt(x, unit=""):
    if x is None:
        return "n/a"
    if isinstance(x, int) or x == 0:
        return f"{int(x):,}" if x == int(x) else f"{x:,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 0.1:
        return f"{x:.2f}"
    return f"{x:.4f}"


def markdown_table(result):
    backends = [b["name"] for b in result["backends"]]
    base = result["baseline"]
    others = [b for b in backends if b != base]
    head = ["workload / metric"] + backends + [
        "ratio" if len(others) == 1 else f"ratio {b}" for b in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, m in result["metrics"].items():
        unit = f" ({m['unit']})" if m["unit"] else ""
        row = [m["label"] + unit]
        if "longest_wait_s" in m:
            row += [fmt(m["total"][b]) + ("" if m["longest_wait_s"][b] is None else
                                             f" ({m['longest_wait_s'][b]:.2f} s)")
                    for b in backends] + ["" for _ in others]
        elif "total" in m:
            row += [fmt(m["total"][b]) for b in backends] + ["" for _ in others]
        else:
            row += [fmt(m["median"][b]) for b in backends]
            for b in others:
                r = m["ratio_median"].get(b)
                row.append("n/a" if r is None else f"{r:.2f}×" if r >= 0.1 or r == 0 else f"{r:.2g}×")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Machine description
# ---------------------------------------------------------------------------

def first_line(argv):
    try:
        r = run(argv)
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else None
    except OSError:
        return None


def machine_info(args):
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    debian = None
    try:
        with open("/etc/debian_version") as f:
            debian = f.read().strip()
    except OSError:
        pass
    pretty = None
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    pretty = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    mem = status_kib_meminfo()
    git = first_line(["git", "-C", REPO, "describe", "--always", "--dirty"])
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "memory_mib": mem,
        "kernel": platform.release(),
        "os": pretty,
        "debian_version": debian,
        "php_cgi": first_line(["php-cgi", "-v"]),
        "php_fpm": first_line([args.php_fpm, "-v"]),
        "nginx": (first_line([args.nginx, "-v"]) or "").replace("nginx version: ", ""),
        "wrk": first_line([args.wrk, "-v"]),
        "fpmd": first_line([args.fpmd, "--version"]),
        "fpmd_git": git,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def status_kib_meminfo():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        return None


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="fpmd vs php-fpm behind one nginx (see bench/README.md)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, backends alternating (default 3)")
    p.add_argument("--duration", type=int, default=5, help="seconds of wrk per workload (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per workload (default 2)")
    p.add_argument("--children", type=int, default=4, help="static pool size of both (default 4)")
    p.add_argument("--connections", type=int, default=50, help="wrk connections (default 50)")
    p.add_argument("--dokuwiki-connections", type=int, default=20, help="for DokuWiki (default 20)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--keepalive", type=int, default=16,
                   help="nginx upstream keepalive, with fastcgi_keep_conn on, for every backend "
                        "(default 16; 0: neither, nginx connects per request)")
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                   help=f"comma-separated, in run order (default {DEFAULT_WORKLOADS})")
    p.add_argument("--spawn", choices=["exec", "prefork"],
                   help="write pm.spawn = SPAWN into fpmd's pool (default: do not write the key)")
    p.add_argument("--fpmd-variants", metavar="LIST",
                   help="measure several fpmd spawn strategies in one run, e.g. exec,prefork "
                        "('default' = no pm.spawn key)")
    p.add_argument("--smoke", action="store_true",
                   help="quick check that the bench works: 1 round, 1 s per workload, 1 s of "
                        "warm-up (explicit options still win); needs --out")
    p.add_argument("--out", help="JSON output (default bench/results/latest.json)")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--chart", metavar="PNG", help="then draw the ratios into PNG (bench/chart.py)")
    p.add_argument("--fpmd", default=os.path.join(REPO, "target", "release", "fpmd"))
    p.add_argument("--php-fpm", help="default: /usr/sbin/php-fpmX.Y of php-cgi's PHP version")
    p.add_argument("--nginx", default="/usr/sbin/nginx")
    p.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs)")
    a = p.parse_args(argv)
    if a.smoke:
        given = set(x.split("=")[0] for x in argv)
        for opt, attr, val in (("--rounds", "rounds", 1), ("--duration", "duration", 1),
                               ("--warmup", "warmup", 1)):
            if opt not in given:
                setattr(a, attr, val)
        if not a.out:
            p.error("--smoke writes to the file given with --out (never to latest.json)")
    if not a.out:
        a.out = os.path.join(HERE, "results", "latest.json")
    if not a.php_fpm:
        a.php_fpm = f"/usr/sbin/php-fpm{php_version('php-cgi') or '8.2'}"
    a.workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
    if a.spawn and a.fpmd_variants:
        p.error("--spawn and --fpmd-variants are exclusive")
    if a.fpmd_variants:
        a.variants = [v.strip() for v in a.fpmd_variants.split(",") if v.strip()]
        for v in a.variants:
            if v not in ("default", "exec", "prefork"):
                p.error(f"unknown fpmd variant {v!r} (exec, prefork, default)")
        if len(set(a.variants)) != len(a.variants):
            p.error("--fpmd-variants lists a variant twice")
    else:
        a.variants = [a.spawn]
    if a.rounds < 1 or a.duration < 1 or a.warmup < 0 or a.children < 1:
        p.error("--rounds, --duration, --children must be >= 1, --warmup >= 0")
    return a


def php_version(binary):
    """'8.2' for a php-cgi or php-fpm binary, None if it does not run."""
    try:
        r = run([binary, "-v"])
    except OSError:
        return None
    m = re.match(r"PHP (\d+\.\d+)", r.stdout)
    return m.group(1) if m else None


def preflight(args):
    if os.geteuid() != 0:
        raise BenchError("run as root: the pools run as www-data and php-fpm needs -R")
    for path, what in ((args.fpmd, "fpmd (cargo build --release)"), (args.php_fpm, "php-fpm8.2"),
                       (args.nginx, "nginx"), (args.wrk, "wrk")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise BenchError(f"{path} not found: install {what} (make bench does)")
    if not shutil.which("php-cgi"):
        raise BenchError("php-cgi not found on PATH (apt-get install php-cgi)")
    cgi, fpm = php_version("php-cgi"), php_version(args.php_fpm)
    if cgi != fpm:
        raise BenchError(f"php-cgi is PHP {cgi} but {args.php_fpm} is PHP {fpm}: "
                         "the comparison needs the same PHP version")
    if "dokuwiki" in args.workloads and not os.path.isfile(os.path.join(DOKUWIKI_ROOT, "doku.php")):
        raise BenchError(f"{DOKUWIKI_ROOT}/doku.php not found (apt-get install dokuwiki)")


def setup(args, tmp):
    """Writes every config into tmp; starts nothing."""
    os.chmod(tmp, 0o755)
    www = os.path.join(tmp, "www")
    os.makedirs(os.path.join(www, "bench"))
    for f in sorted(os.listdir(os.path.join(HERE, "php"))):
        shutil.copy(os.path.join(HERE, "php", f), os.path.join(www, "bench", f))
    os.chmod(www, 0o755)
    os.chmod(os.path.join(www, "bench"), 0o755)
    sessions = os.path.join(tmp, "sessions")
    os.makedirs(sessions)
    shutil.chown(sessions, POOL_USER, POOL_USER)
    os.chmod(sessions, 0o700)

    backends = []
    for v in args.variants:
        name = "fpmd" if len(args.variants) == 1 else f"fpmd-{v}"
        spawn = None if v in (None, "default") else v
        backends.append(Fpmd(name, tmp, args.children, args.fpmd, spawn, sessions))
    baseline = PhpFpm("php-fpm", tmp, args.children, args.php_fpm, sessions)
    backends.append(baseline)
    nginx = Nginx(tmp, www, backends, args.nginx, args.keepalive)
    wrk = Wrk(args.wrk, args.threads, os.path.join(HERE, "wrk-report.lua"))

    return backends, baseline, nginx, wrk


def main(argv):
    args = parse_args(argv)
    try:
        preflight(args)
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    problems = []
    result = None
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="fpmd-bench.")
    backends, nginx, wrk = [], None, None
    try:
        backends, baseline, nginx, wrk = setup(args, tmp)
        result = bench(args, tmp, backends, baseline, nginx, wrk, problems)
    except Interrupted as e:
        problems.append(f"interrupted ({e})")
        log(f"interrupted ({e}), cleaning up")
    except BenchError as e:
        problems.append(str(e))
        log(f"error: {e}")
    except Exception as e:  # a bug in the bench: still clean up, still fail
        import traceback
        traceback.print_exc()
        problems.append(f"internal error: {e!r}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if wrk is not None:
            wrk.kill()
        if nginx is not None and nginx.proc is not None:
            left = nginx.proc.stop()
            if left:
                problems.append("nginx: processes left after it exited (killed): "
                                + ", ".join(f"{p} ({c})" for p, c in left))
        for b in backends:
            problems.extend(b.stop())
        stray = stray_processes(tmp)
        if stray:
            problems.append("still running after cleanup: " + "; ".join(stray))

    log_problems = {}
    for b in backends:
        lines = bad_log_lines(b.error_log())
        if b.log_path != b.error_log():
            lines += bad_log_lines(b.log_path)
        if lines:
            log_problems[b.name] = group_lines(lines)
    if problems:
        for b in backends + ([nginx] if nginx else []):
            for path in {getattr(b, "log_path", None), getattr(b, "error_log", lambda: None)(),
                         getattr(b, "nginx_err", None)}:
                if path and os.path.exists(path) and os.path.getsize(path):
                    log(f"--- {path} (last lines)")
                    for line in tail(path):
                        print("    " + ANSI.sub("", line), file=sys.stderr)

    if result is not None:
        result["problems"] = problems
        result["ok"] = not problems
        result["backend_log_warnings"] = log_problems
        result["elapsed_s"] = round(time.time() - started, 1)
        table = markdown_table(result)
        result["markdown"] = table
        write_json(args.out, result)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(table + "\n")
        print(header_text(result))
        print(table)
        print()
        print_list("Warnings in the backends' logs (count × message):",
                   [f"{name}: {g['count']} × {g['message']}"
                    for name, groups in log_problems.items() for g in groups[:10]])
        print_list("PROBLEMS (the run failed):", problems)
        log(f"wrote {args.out}")
        if args.chart:
            draw_chart(args.out, args.chart, problems)

    if args.keep_tmp:
        log(f"temp dir kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)

    if problems:
        print("FAILED:", file=sys.stderr)
        for p in problems:
            print("  - " + p, file=sys.stderr)
        return 1
    return 0


def draw_chart(src, png, problems):
    import importlib.util
    py = sys.executable
    if importlib.util.find_spec("matplotlib") is None and os.path.exists("/usr/bin/python3"):
        py = "/usr/bin/python3"  # Debian's python3-matplotlib, when another python3 runs us
    r = run([py, os.path.join(HERE, "chart.py"), src, png])
    if r.returncode != 0:
        problems.append(f"chart.py failed:\n{r.stdout}")
    else:
        log(r.stdout.strip())


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


def header_text(r):
    m, s = r["machine"], r["settings"]
    if s["nginx_keepalive"]:
        keep = (f"upstream keepalive {s['nginx_keepalive']} and fastcgi_keep_conn on for "
                f"every backend")
    else:
        keep = "no upstream keepalive, no fastcgi_keep_conn (a connection per request)"
    others = "/".join(b["name"] for b in r["backends"] if b["name"] != r["baseline"])
    load = ", ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    return "\n".join([
        f"## fpmd vs php-fpm ({r['date']}{', SMOKE RUN: not a measurement' if r['smoke'] else ''})",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_mib']} MiB, Linux {m['kernel']}, "
        f"{m['os']} ({m['debian_version']}); {m['php_cgi']}; {m['php_fpm']}; nginx {m['nginx']}; "
        f"{m['wrk']}; {m['fpmd']} ({m['fpmd_git']}). Load average at start: {load}.",
        "",
        f"Setup: one nginx (worker_processes 1), one server block per backend, identical but for "
        f"the upstream; {keep}. Static pools of {s['children']} children, pm.max_requests 0. "
        f"wrk -t{s['wrk_threads']} -c{s['connections']} (DokuWiki -c{s['dokuwiki_connections']}), "
        f"{s['duration_s']} s per workload; each round starts each backend alone, warms it up "
        f"({s['warmup_s']} s per workload), measures it, stops it; {s['rounds']} round(s), "
        f"order A B, B A, ... wrk, nginx and PHP share the machine's {m['nproc']} CPUs. "
        f"Values: medians over rounds; ratio: median of the per-round ratios {others} ÷ "
        f"{r['baseline']} (requests/s: higher is better; latency, memory, CPU: lower is better). "
        f"Latency covers answered requests; 'unanswered when wrk stopped' counts the requests "
        f"still waiting when wrk closed its connections, with the longest wait: a wait close to "
        f"the run's length means a starved connection.",
        "",
    ])


def check_pages(b, workloads):
    """Every page must answer 200 with its content before it is measured."""
    for w in workloads:
        path, needle, _ = WORKLOADS[w]
        status, body = None, ""
        for _ in range(3):
            status, body = http_get(b.url(path))
            if status == 200:
                break
            time.sleep(0.5)
        if status != 200 or needle not in body:
            raise BenchError(f"{b.name}: GET {path} answered {status}, "
                             f"{'without' if needle not in body else 'with'} {needle!r}: "
                             f"{body[:300]!r}")


PARALLEL_S = 0.3


def parallel_check(b):
    """N requests of PARALLEL_S seconds at once through nginx: with N children
    all serving they take ~PARALLEL_S; a child lost or stuck doubles that.
    A second try a second later: requests wrk abandoned may still be queued
    (php-fpm serves the ones its children had not accepted yet)."""
    first = parallel_try(b)
    if first["in_parallel"] or not first["all_200"]:
        return first
    time.sleep(1.0)
    second = parallel_try(b)
    second["first_try_s"] = first["seconds"]
    return second


def parallel_try(b):
    import concurrent.futures
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(b.children) as ex:
        res = list(ex.map(lambda _: http_get(b.url("/bench/parallel.php"), timeout=3),
                          range(b.children)))
    took = time.time() - t0
    ok = all(st == 200 for st, _ in res)
    return {"requests": b.children, "seconds": round(took, 3),
            "all_200": ok, "in_parallel": ok and took < PARALLEL_S * 1.6}


def bench(args, tmp, backends, baseline, nginx, wrk, problems):
    """Each round runs every backend in turn (order reversed every other
    round), alone: start it, check its pages, warm it up, sample its idle
    PSS, run every workload, stop it. Running one backend at a time keeps
    the memory figures honest: PSS splits pages shared between php-fpm and
    php-cgi (the PHP extensions' and system libraries) between the two
    pools when both run, which made php-fpm's pool look ~20% smaller."""
    log(f"temp dir {tmp}")
    nginx.start()
    names = [b.name for b in backends]

    def conns(w):
        return args.dokuwiki_connections if WORKLOADS[w][2] else args.connections

    rounds = []
    for i in range(args.rounds):
        order = list(backends) if i % 2 == 0 else list(reversed(backends))
        rnd = {"round": i + 1, "order": [b.name for b in order], "pool_idle": {},
               "pool_after_dokuwiki": {}, "manager_hwm_kib": {}, "runs": [],
               "stop_s": {}, "load_average": {}}
        for b in order:
            log(f"round {i + 1}/{args.rounds}: starting {b.name}")
            rnd["load_average"][b.name] = os.getloadavg()
            b.start()
            check_pages(b, args.workloads)
            try:
                turn(args, b, i, rnd, wrk, conns, problems)
            except Stalled as e:
                problems.append(f"{b.name}: {e}; the rest of its round {i + 1} is skipped")
                log(f"{b.name}: {e}; skipping the rest of its round")
            t0 = time.time()
            problems.extend(b.stop())
            rnd["stop_s"][b.name] = round(time.time() - t0, 2)
        rounds.append(rnd)

    result = {
        "schema": 1,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
        "smoke": args.smoke,
        "machine": machine_info(args),
        "settings": {
            "rounds": args.rounds, "duration_s": args.duration, "warmup_s": args.warmup,
            "children": args.children, "connections": args.connections,
            "dokuwiki_connections": args.dokuwiki_connections, "wrk_threads": args.threads,
            "wrk_timeout_s": 10,
            "workloads": {w: {"path": WORKLOADS[w][0], "connections": conns(w)} for w in args.workloads},
            "nginx_worker_processes": 1, "nginx_keepalive": args.keepalive,
            "fastcgi_keep_conn": args.keepalive > 0,
            "pool": {"pm": "static", "max_children": args.children, "max_requests": 0,
                     "user": POOL_USER,
                     "session.save_path": "per-run temp dir (php_admin_value, same for every backend)"},
            "procedure": "each round starts each backend alone (the others stopped), checks every "
                         "page answers 200, warms it up on every workload, samples idle PSS, runs "
                         "every workload, stops it; backend order reversed every other round",
            "pss": "sum of Pss from /proc/PID/smaps_rollup over the manager and all its descendants",
            "manager_cpu": "utime+stime of the manager process alone across each wrk run",
            "manager_rss": "VmRSS of the manager sampled half-way through each wrk run; max over workloads",
            "non2xx": "exact count from an nginx access log that records only non-2xx responses; "
                      "499 (wrk closed the connection at its stop, request unanswered) counted apart",
        },
        "backends": [b.describe() for b in backends],
        "baseline": baseline.name,
        "rounds": rounds,
    }
    result["metrics"] = summarize(rounds, names, baseline.name, args.workloads)
    return result


def turn(args, b, i, rnd, wrk, conns, problems):
    """One backend's turn in round i: warm-up, idle PSS, every workload."""
    if args.warmup:
        for w in args.workloads:
            r = measure(b, w, wrk, conns(w), args.warmup, sample_rss=False)
            check_run(r, problems, "warm-up ")
    time.sleep(1)
    rnd["pool_idle"][b.name] = b.pool()
    rnd.setdefault("parallel_before", {})[b.name] = pc = parallel_check(b)
    if not pc["in_parallel"]:
        problems.append(f"{b.name}: after warm-up, {b.children} requests of "
                        f"{PARALLEL_S * 1000:.0f} ms sent at once took {pc['seconds']} s "
                        f"(all 200: {pc['all_200']}): not every child serves")
    for w in args.workloads:
        r = measure(b, w, wrk, conns(w), args.duration)
        rnd["runs"].append(r)
        log(f"round {i + 1}/{args.rounds} {w:8} {b.name:13} {r['rps']:9.1f} req/s  "
            f"p50 {fmt(r['p50_ms']):>6} ms  p99 {fmt(r['p99_ms']):>6} ms  "
            f"non-2xx {r['non2xx']}  unanswered at stop {r['unanswered_at_stop']}")
        check_run(r, problems)
        if w == "dokuwiki":
            rnd["pool_after_dokuwiki"][b.name] = b.pool()
    rnd["manager_hwm_kib"][b.name] = status_kib(b.proc.pid, "VmHWM")
    rnd.setdefault("parallel_after", {})[b.name] = pc = parallel_check(b)
    if not pc["in_parallel"]:
        problems.append(f"{b.name}: at the end of round {i + 1}, {b.children} requests of "
                        f"{PARALLEL_S * 1000:.0f} ms sent at once took {pc['seconds']} s "
                        f"(all 200: {pc['all_200']}): not every child serves any more")
    n = b.pool()["php_processes"]
    if n < b.children:
        problems.append(f"{b.name}: only {n} php processes at the end of round {i + 1} "
                        f"(pool of {b.children})")
    if not b.proc.running():
        problems.append(f"{b.name} died during round {i + 1} "
                        f"(exit status {b.proc.proc.returncode})")


def check_run(r, problems, what=""):
    errs = sum(r["socket_errors"].values())
    stalled = r["requests"] == 0
    if r["non2xx"]:
        problems.append(f"{what}{r['backend']} {r['workload']}: {r['non2xx']} non-2xx responses, "
                        f"e.g. {r['non2xx_sample'][:2]}; nginx: {r['nginx_errors'][:2]}")
    if errs:
        problems.append(f"{what}{r['backend']} {r['workload']}: socket errors {r['socket_errors']}")
    if not r["manager_alive"]:
        problems.append(f"{what}{r['backend']} {r['workload']}: the manager died during the run")
    lines = r["backend_log_problems"]
    if lines:
        log(f"{r['backend']}: {len(lines)}{'+' if len(lines) >= 10 else ''} warning(s) in its log "
            f"during {what}{r['workload']}, e.g. {lines[0]}")
    if not r["manager_alive"]:
        raise Stalled(f"its manager died during {what}{r['workload']}")
    if stalled:
        raise Stalled(f"{what}{r['workload']}: not one request answered in {r['duration_s']} s "
                      f"({r['unanswered_at_stop']} still waiting when wrk stopped)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
