"""The backends (fpmd, php-fpm), nginx in front of them, wrk.

What fpmd and php-fpm have in common in every bench: the start of their
configs (www-data, a unix socket 0660), their config test, their command
line; a Backend behind nginx (its socket, its server block's port and logs),
nginx's config and wrk's figures.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from . import REPO, procs
from .procs import BenchError

POOL_USER = "www-data"
DOKUWIKI_ROOT = "/usr/share/dokuwiki"


# ---------------------------------------------------------------------------
# Binaries, options, the checks before a run
# ---------------------------------------------------------------------------

def php_version(binary):
    """'8.2' for a php-cgi or php-fpm binary, None if it does not run."""
    try:
        r = procs.run([binary, "-v"])
    except OSError:
        return None
    m = re.match(r"PHP (\d+\.\d+)", r.stdout)
    return m.group(1) if m else None


def default_php_fpm():
    """/usr/sbin/php-fpmX.Y of php-cgi's PHP version (8.2 if php-cgi does not run)."""
    return f"/usr/sbin/php-fpm{php_version('php-cgi') or '8.2'}"


def default_fpmd():
    """The release binary `make build` leaves: under $CARGO_TARGET_DIR when
    it is set (as cargo does), else the repository's target/."""
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(os.path.abspath(target), "release", "fpmd")


def common_options(p, copies_fpmd=True, nginx=True, wrk=False):
    """--fpmd, --php-fpm (--nginx, --wrk when the bench runs them), --keep-tmp."""
    p.add_argument("--fpmd", default=default_fpmd(),
                   help="copied into the temp dir first, so a rebuild during the run changes "
                        "nothing" if copies_fpmd else None)
    p.add_argument("--php-fpm", help="default: /usr/sbin/php-fpmX.Y of php-cgi's PHP version")
    if nginx:
        p.add_argument("--nginx", default="/usr/sbin/nginx")
    if wrk:
        p.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs)")


def preflight(args, make, tools=(), same_php_why=""):
    """Root; args.fpmd, args.php_fpm and the tools ((path, what installs it))
    present; php-cgi on PATH with php-fpm's PHP version. A BenchError says
    what is missing (`make` is the target that installs it)."""
    if os.geteuid() != 0:
        raise BenchError("run as root: the pools run as www-data and php-fpm needs -R")
    for path, what in ((args.fpmd, "fpmd (cargo build --release)"),
                       (args.php_fpm, "php-fpm8.2")) + tuple(tools):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise BenchError(f"{path} not found: install {what} ({make} does)")
    if not shutil.which("php-cgi"):
        raise BenchError("php-cgi not found on PATH (apt-get install php-cgi)")
    cgi, fpm = php_version("php-cgi"), php_version(args.php_fpm)
    if cgi != fpm:
        raise BenchError(f"php-cgi is PHP {cgi} but {args.php_fpm} is PHP {fpm}{same_php_why}")


# ---------------------------------------------------------------------------
# Configs and commands
# ---------------------------------------------------------------------------

def php_fpm_global(dir, error_log):
    """php-fpm's [global] section: its pid file in dir, its log, in the foreground."""
    return f"[global]\npid = {dir}/php-fpm.pid\nerror_log = {error_log}\ndaemonize = no\n"


def php_fpm_pool(name, sock):
    """The first lines of a php-fpm pool: www-data's, on a unix socket (0660)."""
    return [
        f"[{name}]",
        f"user = {POOL_USER}",
        f"group = {POOL_USER}",
        f"listen = {sock}",
        f"listen.owner = {POOL_USER}",
        f"listen.group = {POOL_USER}",
        "listen.mode = 0660",
    ]


def fpmd_global(error_log, control_socket=None):
    """fpmd's [global] table: its log, its control socket if any, the pools in pool.d/."""
    q = json.dumps
    ctl = f"control_socket = {q(control_socket)}\n" if control_socket else ""
    return f"[global]\nerror_log = {q(error_log)}\n{ctl}include = \"pool.d/*.toml\"\n"


def fpmd_pool(name, sock):
    """The first lines of an fpmd pool: www-data's, on a unix socket (0660)."""
    q = json.dumps
    return [
        f"[{name}]",
        f"user = {q(POOL_USER)}",
        f"group = {q(POOL_USER)}",
        f"listen.address = {q(sock)}",
        f"listen.owner = {q(POOL_USER)}",
        f"listen.group = {q(POOL_USER)}",
        'listen.mode = "0660"',
    ]


def write_whole(path, text):
    # Written whole, then renamed: a reload never reads half a file.
    with open(path + ".new", "w") as f:
        f.write(text)
    os.rename(path + ".new", path)


CONF = object()  # stands for the config file in a Manager's arguments


class Manager:
    """The manager's side of a backend (with its name, binary and dir): its
    config file and log in its dir, its config test, its command line.
    FpmdManager and PhpFpmManager say which."""
    kind = "?"
    conf_file = log_file = None
    test_args = run_args = ()  # the binary's arguments; CONF: the config file
    test_failed = ""  # what a failed config test is said to be: {binary}, {conf}, {rc}
    test_output_lines = None  # the last lines of a failed test shown; None: all

    @property
    def conf(self):
        return os.path.join(self.dir, self.conf_file)

    def error_log(self):
        return os.path.join(self.dir, self.log_file)

    def command(self, args):
        return [self.binary] + [self.conf if a is CONF else a for a in args]

    def check_config(self, timeout=None):
        try:
            r = procs.run(self.command(self.test_args), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{self.name}: config test ({' '.join(self.command(self.test_args))}) "
                             f"still running after {timeout:.0f} s (killed)")
        if r.returncode != 0:
            out = r.stdout.splitlines()[-self.test_output_lines:] if self.test_output_lines else None
            raise BenchError(f"{self.name}: "
                             + self.test_failed.format(binary=self.binary, conf=self.conf, rc=r.returncode)
                             + ":\n" + (r.stdout if out is None else "\n".join(out)))

    def argv(self):
        return self.command(self.run_args)


class FpmdManager(Manager):
    kind = "fpmd"
    conf_file, log_file = "fpmd.toml", "fpmd.log"
    test_args, run_args = ("-c", CONF, "-t"), ("-c", CONF)
    test_failed = "`fpmd -c {conf} -t` failed ({rc})"


class PhpFpmManager(Manager):
    kind = "php-fpm"
    conf_file, log_file = "php-fpm.conf", "php-fpm.log"
    # -F: the master is our child (in the foreground); -R: it may run as root.
    test_args, run_args = ("-t", "-y", CONF), ("-F", "-R", "-y", CONF)
    test_failed = "`{binary} -t -y {conf}` failed"


# ---------------------------------------------------------------------------
# A backend behind nginx
# ---------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """One manager and its pool on a unix socket, behind its own nginx server block."""
    kind = "?"
    prefork = False

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
        pids = [self.proc.pid] + procs.descendants(self.proc.pid)
        parts = [(p, procs.comm(p), procs.pss_kib(p)) for p in pids]
        parts = [x for x in parts if x[2] is not None]
        self.proc.snapshot()
        return {
            "pss_kib": sum(x[2] for x in parts),
            "manager_pss_kib": procs.pss_kib(self.proc.pid),
            "processes": len(parts),
            "php_processes": sum(1 for x in parts[1:] if x[1].startswith("php")),
            "per_process": [{"pid": p, "comm": c, "pss_kib": k} for p, c, k in parts],
        }

    def php_tree(self):
        """Live php processes under the manager, recursively; zombies apart.
        Under prefork, the php-cgi parents (fpmd's direct children) apart."""
        root = self.proc.pid
        total = parents = zombies = 0
        for p in procs.descendants(root):
            if not procs.comm(p).startswith("php"):
                continue
            if procs.proc_state(p) == "Z":
                zombies += 1
                continue
            total += 1
            st = procs.proc_stat(p)
            if self.prefork and st is not None and st[0] == root:
                parents += 1
        self.proc.snapshot()
        return {"php": total, "prefork_parents": parents if self.prefork else None,
                "zombies": zombies}

    def manager_ticks(self):
        st = procs.proc_stat(self.proc.pid)
        return st[1] if st else None

    def manager_rss_kib(self):
        return procs.status_kib(self.proc.pid, "VmRSS")

    def wait_ready(self, want_php, timeout=20.0):
        """Waits for the socket and want_php php processes under the manager."""
        deadline = time.time() + timeout
        n = 0
        while time.time() < deadline:
            if not self.proc.running():
                raise BenchError(f"{self.name} exited with status {self.proc.proc.returncode} "
                                 f"while starting; its log ends with:\n  " +
                                 "\n  ".join(procs.tail(self.log_path) + procs.tail(self.error_log())))
            n = sum(1 for p in procs.descendants(self.proc.pid) if procs.comm(p).startswith("php"))
            if os.path.exists(self.sock) and n >= want_php:
                return
            time.sleep(0.1)
        raise BenchError(f"{self.name} not ready after {timeout:.0f} s (socket: "
                         f"{os.path.exists(self.sock)}, php processes: {n}/{want_php}); log:\n  " +
                         "\n  ".join(procs.tail(self.log_path) + procs.tail(self.error_log())))

    def error_log(self):
        return self.log_path

    def launch(self, argv):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.proc = procs.Managed(self.name, argv, self.log_path, signal.SIGQUIT)

    def start(self, want_php=None):
        """Tests the config, starts the manager, waits for its socket and
        want_php php processes (default: its children)."""
        self.check_config()
        self.launch(self.argv())
        self.wait_ready(self.children if want_php is None else want_php)

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
                       f"(killed): " + procs.leftovers_text(left))
        rc = self.proc.proc.returncode
        if rc != 0:
            out.append(f"{self.name} exited with status {rc} after SIGQUIT "
                       f"({'killed by signal ' + str(-rc) if rc and rc < 0 else 'expected 0'})")
        if took > 8:
            out.append(f"{self.name} took {took:.1f} s to stop on SIGQUIT (idle, nginx stopped)")
        return out


# ---------------------------------------------------------------------------
# nginx
# ---------------------------------------------------------------------------

def nginx_conf(tmp, www, backends, keepalive, apps=()):
    """nginx's config: a server block per backend (its port, its logs, an
    upstream on its socket), root DokuWiki, /bench/ from www. keepalive:
    the upstream keepalive, with fastcgi_keep_conn on (0: neither); a
    backend with a `keepalive` attribute has its own. apps: directories
    of www served under /NAME/ with index.php (bench.py's WordPress)."""
    def fastcgi(keep, indent):
        pad = " " * indent
        return (f"{pad}include /etc/nginx/fastcgi_params;\n"
                f"{pad}fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n"
                + (f"{pad}fastcgi_keep_conn on;\n" if keep else "")
                + f"{pad}fastcgi_buffer_size 16k;\n"
                f"{pad}fastcgi_buffers 16 16k;\n")

    out = [f"""# generated by bench/lib/servers.py
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
        keep = getattr(b, "keepalive", keepalive)
        up = "up_" + re.sub(r"\W", "_", b.name)
        locations = "".join(f"""        location ^~ /{app}/ {{
            root {www};
            index index.php;
            location ~ \\.php$ {{
{fastcgi(keep, 16)}                fastcgi_pass {up};
            }}
        }}
""" for app in apps)
        out.append(f"""
    upstream {up} {{
        server unix:{b.sock};
{f"        keepalive {keep};" if keep else "        # no keepalive"}
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
{fastcgi(keep, 16)}                fastcgi_pass {up};
            }}
        }}
{locations}        location ~ \\.php$ {{
{fastcgi(keep, 12)}            fastcgi_pass {up};
        }}
    }}
""")
    out.append("}\n")
    return "".join(out)


class Nginx:
    def __init__(self, tmp, www, backends, binary, keepalive, apps=()):
        self.dir = os.path.join(tmp, "nginx")
        for d in ("", "body", "fastcgi", "proxy", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(nginx_conf(tmp, www, backends, keepalive, apps))
        self.binary = binary
        self.log_path = os.path.join(self.dir, "nginx.out")
        self.proc = None

    def start(self):
        r = procs.run([self.binary, "-t", "-p", self.dir, "-c", self.conf])
        if r.returncode != 0:
            raise BenchError(f"nginx -t failed:\n{r.stdout}")
        self.proc = procs.Managed("nginx", [self.binary, "-p", self.dir, "-c", self.conf],
                                  self.log_path, signal.SIGQUIT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if not self.proc.running():
                raise BenchError("nginx exited: " + "\n".join(procs.tail(self.log_path) +
                                                              procs.tail(os.path.join(self.dir, "error.log"))))
            if procs.descendants(self.proc.pid):
                self.proc.snapshot()
                return
            time.sleep(0.1)
        raise BenchError("nginx has no worker after 10 s")

    def stop(self, problems):
        """Stops nginx if it runs; its workers left behind go into problems."""
        if self.proc is None:
            return
        left = self.proc.stop()
        if left:
            problems.append("nginx: processes left after it exited (killed): "
                            + procs.leftovers_text(left))


def nginx_lines(b, bad0, err0):
    """What nginx logged for backend b since the byte offsets bad0 and err0:
    (non-2xx lines, 499 lines, error-log lines)."""
    non2xx, unanswered = [], []
    for line in procs.count_lines_from(b.nginx_bad, bad0):
        line = line.decode(errors="replace")
        # 499: wrk closed the connection before the answer came. wrk does
        # that to every request still in flight when its time is up; a
        # request that waited much longer than the others was starved.
        (unanswered if line.startswith("499 ") else non2xx).append(line)
    errors = [l.decode(errors="replace") for l in procs.count_lines_from(b.nginx_err, err0)]
    return non2xx, unanswered, errors


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
                                        start_new_session=True, preexec_fn=procs.child_setup)
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


def wrk_figures(res):
    """Requests, duration, requests/s and latency of a wrk run (its WRKJSON)."""
    reqs = res["requests"]
    dur = res["duration_us"] / 1e6
    return {
        "requests": reqs,
        "duration_s": round(dur, 3),
        "rps": round(reqs / dur, 1) if dur > 0 else 0.0,
        # No latency without an answered request (wrk would say 0).
        "p50_ms": res["p50_us"] / 1000 if reqs else None,
        "p90_ms": res["p90_us"] / 1000 if reqs else None,
        "p99_ms": res["p99_us"] / 1000 if reqs else None,
        "max_ms": res["max_us"] / 1000 if reqs else None,
    }


def wrk_socket_errors(res):
    """wrk's socket errors of a run (its WRKJSON): connect, read, write, timeouts."""
    return {k: res[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts")}
