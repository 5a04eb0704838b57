#!/usr/bin/python3
"""Process-manager scenarios of issue 4, fpmd side by side with php-fpm.

Three scenarios (issue 4, items 1, 2 and 8), each run against php-fpm,
fpmd with pm.spawn = "prefork" (fpmd's default) and fpmd with
pm.spawn = "exec", behind one nginx (one server block per backend, no
upstream keepalive, no fastcgi_keep_conn: a connection per request, the
usual php-fpm set-up; nginx's default fastcgi_read_timeout of 60 s):

  1. dynamic, max_children 32, start 2, spare 1-4: 32 concurrent requests
     of a script that sleeps 2 s;
  2. ondemand, max_children 8, idle timeout 2 s: php processes after 5 s
     idle, 8 concurrent 1-second requests, php processes after 5 s idle
     again, then the latency of one request on the idle pool (cold start);
  3. backpressure: static 4 children, 200 concurrent 500 ms requests; fpmd
     with request_queue_timeout = "1s", php-fpm with its defaults
     (listen.backlog = 511, no queue timeout).

Every request is one Python thread with its own http.client connection,
connected first and then released at once (a barrier). The PHP script
prints getmypid() and the time it started, and appends its request id to a
log: "waited" is the time from sending the request to PHP starting it, and
the log tells whether a request that got 503 ran any PHP.

Each backend runs alone, started fresh per scenario, and is stopped with
SIGQUIT afterwards. Prints one markdown table per scenario and writes
bench/results/pm-scenarios.json. The machinery (processes in their own
session with PDEATHSIG, cleanup on errors and Ctrl-C, /proc helpers, the
nginx config) is bench/lib's. Exits non-zero when the bench itself failed (a
backend that does not start or dies, a process left behind); what the
scenarios show is reported, not judged, except for the "issue 4 checks" rows.

Stdlib only; run as root (pools run as www-data, php-fpm needs -R).
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time

from lib import procs, report, servers, tree
from lib.report import f_tree, pct

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_TIMEOUT = 90.0  # > nginx's fastcgi_read_timeout (60 s): nginx answers first
SCENARIOS = ("1", "2", "3")

# The script every scenario requests. It logs its request id before doing
# anything, so a request answered 503 can be checked for having run PHP.
PM_PHP = r"""<?php
// written by bench/pm_scenarios.py: ?ms=N sleeps N ms; prints pid and start time.
$start = microtime(true);
$id = isset($_GET['id']) ? preg_replace('/[^\w.-]/', '', $_GET['id']) : '-';
file_put_contents(dirname(__DIR__, 2) . '/ran/ran.log',
    sprintf("%s %d %.6f\n", $id, getmypid(), $start), FILE_APPEND | LOCK_EX);
$ms = isset($_GET['ms']) ? (int)$_GET['ms'] : 0;
if ($ms > 0) usleep($ms * 1000);
header('Content-Type: text/plain');
echo json_encode(['pid' => getmypid(), 'start' => $start, 'id' => $id]), "\n";
"""


log = procs.logger("bench-pm")


# ---------------------------------------------------------------------------
# Pool configurations
# ---------------------------------------------------------------------------

def pool_settings(sc):
    """(php-fpm ini lines, fpmd TOML lines) of scenario sc, beyond the common ones."""
    if sc == "1":
        fpm = ["pm = dynamic", "pm.max_children = 32", "pm.start_servers = 2",
               "pm.min_spare_servers = 1", "pm.max_spare_servers = 4"]
        toml = ['pm.mode = "dynamic"', "pm.max_children = 32", "pm.start_servers = 2",
                "pm.min_spare_servers = 1", "pm.max_spare_servers = 4"]
    elif sc == "2":
        fpm = ["pm = ondemand", "pm.max_children = 8", "pm.process_idle_timeout = 2s"]
        toml = ['pm.mode = "ondemand"', "pm.max_children = 8", 'pm.process_idle_timeout = "2s"']
    elif sc == "3":
        # php-fpm: defaults (listen.backlog = 511, nothing like a queue timeout).
        fpm = ["pm = static", "pm.max_children = 4"]
        toml = ['pm.mode = "static"', "pm.max_children = 4", 'request_queue_timeout = "1s"']
    else:
        raise ValueError(sc)
    return fpm + ["pm.max_requests = 0"], toml + ["pm.max_requests = 0"]


class PmBackend(servers.Backend):
    """A backend whose pool is rewritten for every scenario (same socket and port)."""
    label = "?"

    def __init__(self, name, tmp):
        super().__init__(name, tmp, 0)
        self.log_offsets = {}

    def start_scenario(self, sc):
        self.configure(sc)
        self.log_offsets = {p: procs.file_size(p) for p in {self.log_path, self.error_log()}}
        self.start(0)  # the socket; children are counted by the scenario

    def new_log_warnings(self):
        lines = []
        for p, off in self.log_offsets.items():
            lines += procs.bad_log_lines(p, off)
        return lines


class PmPhpFpm(servers.PhpFpmManager, PmBackend):
    label = "php-fpm"

    def __init__(self, name, tmp, binary):
        super().__init__(name, tmp)
        self.binary = binary

    def configure(self, sc):
        fpm, _ = pool_settings(sc)
        with open(self.conf, "w") as f:
            f.write(f"; generated by bench/pm_scenarios.py, scenario {sc}\n"
                    + servers.php_fpm_global(self.dir, self.error_log()) + "\n"
                    + "\n".join(servers.php_fpm_pool("pm", self.sock) + fpm) + "\n")

    def describe(self):
        return {"name": self.name, "kind": self.kind, "binary": self.binary}


class PmFpmd(servers.FpmdManager, PmBackend):
    def __init__(self, name, tmp, binary, spawn):
        super().__init__(name, tmp)
        self.binary = binary
        self.spawn = spawn
        self.prefork = spawn == "prefork"
        self.label = f"fpmd {spawn}" + (" (default)" if spawn == "prefork" else "")
        os.makedirs(os.path.join(self.dir, "pool.d"))

    def configure(self, sc):
        _, toml = pool_settings(sc)
        with open(self.conf, "w") as f:
            f.write(f"# generated by bench/pm_scenarios.py, scenario {sc}\n"
                    + servers.fpmd_global(self.error_log()))
        lines = servers.fpmd_pool("pm", self.sock) + [f"pm.spawn = {json.dumps(self.spawn)}"] + toml
        with open(os.path.join(self.dir, "pool.d", "pm.toml"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def describe(self):
        return {"name": self.name, "kind": self.kind, "spawn": self.spawn,
                "pm.spawn written": True, "binary": self.binary}


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

def burst(b, n, ms, tag):
    """n requests of ?ms=ms, one thread and one connection each, connected
    first and released together. Returns one dict per request."""
    barrier = threading.Barrier(n + 1)
    results = [None] * n

    def worker(i):
        rid = f"{tag}-{i}"
        r = {"id": rid, "status": None}
        conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=CLIENT_TIMEOUT)
        try:
            try:
                conn.connect()
            except OSError as e:
                r["error"] = f"connect: {e!r}"
            try:
                barrier.wait(timeout=60)
            except threading.BrokenBarrierError:
                r.setdefault("error", "barrier broken")
            if "error" in r:
                return
            r["sent"] = time.time()
            try:
                conn.request("GET", f"/bench/pm.php?ms={ms}&id={rid}")
                resp = conn.getresponse()
                body = resp.read().decode(errors="replace")
                r["end"] = time.time()
                r["status"] = resp.status
                r["retry_after"] = resp.getheader("Retry-After")
                try:
                    j = json.loads(body)
                    r["pid"], r["php_start"] = j["pid"], j["start"]
                except (ValueError, KeyError, TypeError):
                    r["body"] = body[:200]
            except (OSError, http.client.HTTPException) as e:
                r["end"] = time.time()
                r["error"] = repr(e)
        finally:
            conn.close()
            results[i] = r

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait(timeout=60)
    deadline = time.time() + CLIENT_TIMEOUT + 30
    for t in threads:
        while t.is_alive() and time.time() < deadline:
            t.join(0.2)  # short joins: Ctrl-C is handled at once
    return [r if r is not None else {"status": None, "error": "thread did not finish"}
            for r in results]


def single(b, ms, tag):
    return burst(b, 1, ms, tag)[0]


class Sampler(procs.Background):
    """Samples the php process count every 100 ms in a thread; keeps the peak."""

    def __init__(self, b):
        super().__init__()
        self.b = b
        self.peak = 0

    def run(self):
        while not self.stop_ev.is_set():
            try:
                self.peak = max(self.peak, self.b.php_tree()["php"])
            except Exception:
                pass
            self.stop_ev.wait(0.1)


def ran_log(tmp):
    """{request id: (pid, start)} of every request that ran PHP."""
    out = {}
    try:
        with open(os.path.join(tmp, "ran", "ran.log")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    out[parts[0]] = (int(parts[1]), float(parts[2]))
    except OSError:
        pass
    return out


def summarize_burst(rs, ran):
    """Figures of one burst; `ran` is the PHP log (request id -> pid, start)."""
    statuses = {}
    for r in rs:
        k = str(r["status"]) if r["status"] is not None else "error"
        statuses[k] = statuses.get(k, 0) + 1
    done = [r for r in rs if "sent" in r and "end" in r]
    lat = [r["end"] - r["sent"] for r in done]
    waits, php_ran_non200 = [], []
    for r in done:
        start = r.get("php_start")
        if start is None and r.get("id") in ran:
            start = ran[r["id"]][1]
        if start is not None:
            waits.append(start - r["sent"])
            if r["status"] != 200:
                php_ran_non200.append(r["id"])
    s503 = [r for r in rs if r["status"] == 503]
    time_to_503 = [r["end"] - r["sent"] for r in s503 if "end" in r]
    return {
        "requests": len(rs),
        "statuses": statuses,
        "wall_s": round(max(r["end"] for r in done) - min(r["sent"] for r in done), 3) if done else None,
        "distinct_pids": len({r["pid"] for r in rs if r.get("pid") is not None}),
        "latency_p50_s": pct(lat, 50),
        "latency_p99_s": pct(lat, 99),
        "latency_max_s": max(lat) if lat else None,
        "latency_min_s": min(lat) if lat else None,
        "longest_wait_before_php_s": max(waits) if waits else None,
        "ran_php": sum(1 for r in rs if r.get("id") in ran),
        "non200_that_ran_php": len(php_ran_non200),
        "503": len(s503),
        "503_with_retry_after": sum(1 for r in s503 if r.get("retry_after")),
        "longest_time_to_503_s": max(time_to_503) if time_to_503 else None,
        "errors": sorted({r["error"] for r in rs if r.get("error")})[:5],
        "odd_bodies": [r["body"] for r in rs if r["status"] == 200 and "body" in r][:3],
    }


def pool_pss_mib(b):
    """PSS of the manager and every descendant, MiB (see lib/servers.py, Backend.pool)."""
    kib = [procs.pss_kib(p) for p in [b.proc.pid] + procs.descendants(b.proc.pid)]
    return round(sum(k for k in kib if k) / 1024, 1)


def raw(rs):
    keep = ("id", "status", "sent", "end", "pid", "php_start", "retry_after", "error")
    return [{k: r[k] for k in keep if k in r} for r in rs]


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

def settle(b, want, timeout=10.0):
    """Waits until at least `want` php processes serve (prefork parents not
    counted), or timeout; returns the tree then."""
    deadline = time.time() + timeout
    while True:
        t = b.php_tree()
        if t["php"] - (t["prefork_parents"] or 0) >= want or time.time() >= deadline:
            return t
        time.sleep(0.1)


def scenario_1(b, tmp):
    out = {}
    out["php_at_start"] = settle(b, 2)
    time.sleep(1.0)
    out["php_before_burst"] = b.php_tree()
    out["pool_pss_mib_before_burst"] = pool_pss_mib(b)
    with Sampler(b) as s:
        rs = burst(b, 32, 2000, f"s1-{b.name}")
    out["burst"] = summarize_burst(rs, ran_log(tmp))
    out["php_peak"] = s.peak
    out["php_after_burst"] = b.php_tree()
    time.sleep(5.0)
    out["php_5s_after_burst"] = b.php_tree()
    out["pool_pss_mib_5s_after_burst"] = pool_pss_mib(b)
    out["raw"] = raw(rs)
    return out


def scenario_2(b, tmp):
    out = {}
    time.sleep(5.0)
    out["php_after_5s_idle"] = b.php_tree()
    with Sampler(b) as s:
        rs = burst(b, 8, 1000, f"s2-{b.name}")
    out["burst"] = summarize_burst(rs, ran_log(tmp))
    out["php_peak"] = s.peak
    time.sleep(5.0)
    out["php_after_5s_idle_again"] = b.php_tree()
    cold = single(b, 0, f"s2-{b.name}-cold")
    warm = [single(b, 0, f"s2-{b.name}-warm{i}") for i in range(5)]

    def latency(r):
        return r["end"] - r["sent"] if "end" in r and "sent" in r else None
    out["cold"] = {"status": cold["status"], "pid": cold.get("pid"), "latency_s": latency(cold),
                   "error": cold.get("error")}
    lats = [latency(r) for r in warm]
    out["warm"] = {"statuses": [r["status"] for r in warm],
                   "status": 200 if all(r["status"] == 200 for r in warm) else
                   next(r["status"] for r in warm if r["status"] != 200),
                   "latency_s": sorted(lats)[2] if None not in lats else None,
                   "latencies_s": lats}
    out["raw"] = raw(rs) + raw([cold] + warm)
    return out


def scenario_3(b, tmp):
    out = {}
    out["php_at_start"] = settle(b, 4)
    time.sleep(0.5)
    rs = burst(b, 200, 500, f"s3-{b.name}")
    out["burst"] = summarize_burst(rs, ran_log(tmp))
    out["php_after"] = b.php_tree()
    out["raw"] = raw(rs)
    return out


RUNNERS = {"1": scenario_1, "2": scenario_2, "3": scenario_3}


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------

def f_s(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def f_ms(x):
    return "n/a" if x is None else f"{x * 1000:.0f}"


def f_statuses(st):
    return ", ".join(f"{n}×{k}" for k, n in sorted(st.items())) if st else "n/a"


def yes_no(ok):
    return "yes" if ok else "**no**"


def rows_1(r):
    bu = r["burst"]
    return [
        ("php processes before the burst (1 s after start)", f_tree(r["php_before_burst"])),
        ("statuses", f_statuses(bu["statuses"])),
        ("wall time until the last response (s)", f_s(bu["wall_s"])),
        ("… over the 2 s of the script (s)", f_s(None if bu["wall_s"] is None else bu["wall_s"] - 2)),
        ("fastest response (s)", f_s(bu["latency_min_s"])),
        ("longest wait before PHP started (s)", f_s(bu["longest_wait_before_php_s"])),
        ("distinct pids", str(bu["distinct_pids"])),
        ("peak php processes", str(r["php_peak"])),
        ("php processes 5 s after the burst", f_tree(r["php_5s_after_burst"])),
        ("pool PSS before the burst / 5 s after it (MiB)",
         f"{r['pool_pss_mib_before_burst']} / {r['pool_pss_mib_5s_after_burst']}"),
        ("issue 4 check: 32×200, 32 pids", yes_no(bu["statuses"] == {"200": 32} and bu["distinct_pids"] == 32)),
    ]


def rows_2(r):
    bu = r["burst"]
    return [
        ("php processes after 5 s idle (from start)", f_tree(r["php_after_5s_idle"])),
        ("8×1 s: statuses", f_statuses(bu["statuses"])),
        ("8×1 s: wall time until the last response (s)", f_s(bu["wall_s"])),
        ("8×1 s: longest wait before PHP started (s)", f_s(bu["longest_wait_before_php_s"])),
        ("8×1 s: distinct pids", str(bu["distinct_pids"])),
        ("php processes after 5 s idle again", f_tree(r["php_after_5s_idle_again"])),
        ("cold start: one request on the idle pool (ms)",
         f_ms(r["cold"]["latency_s"]) + ("" if r["cold"]["status"] == 200 else f" (status {r['cold']['status']})")),
        ("the next 5 requests, one at a time: median (ms)",
         f_ms(r["warm"]["latency_s"]) + ("" if r["warm"]["status"] == 200 else f" (status {r['warm']['status']})")),
        ("issue 4 check: no php process idle, 8×200, 8 pids",
         yes_no(r["php_after_5s_idle"]["php"] == 0 and r["php_after_5s_idle_again"]["php"] == 0
                and bu["statuses"] == {"200": 8} and bu["distinct_pids"] == 8)),
    ]


def rows_3(r):
    bu = r["burst"]
    st = bu["statuses"]
    other = sum(n for k, n in st.items() if k not in ("200", "502", "503", "504"))
    n503 = bu["503"]
    only_200_503 = set(st) <= {"200", "503"}
    return [
        ("200 / 502 / 503 / 504 / other",
         " / ".join(str(st.get(k, 0)) for k in ("200", "502", "503", "504")) + f" / {other}"),
        ("latency p50 / p99 / max (s)",
         f"{f_s(bu['latency_p50_s'])} / {f_s(bu['latency_p99_s'])} / {f_s(bu['latency_max_s'])}"),
        ("wall time until the last response (s)", f_s(bu["wall_s"])),
        ("503s with Retry-After", f"{bu['503_with_retry_after']}/{n503}" if n503 else "– (no 503)"),
        ("longest wait before PHP started (s)", f_s(bu["longest_wait_before_php_s"])),
        ("longest wait for a 503 (s)", f_s(bu["longest_time_to_503_s"])),
        ("requests that ran PHP / non-200 among them", f"{bu['ran_php']} / {bu['non200_that_ran_php']}"),
        ("distinct pids", str(bu["distinct_pids"])),
        ("issue 4 check: only 200/503, every 503 with Retry-After and no PHP",
         yes_no(only_200_503 and bu["503_with_retry_after"] == n503 and bu["non200_that_ran_php"] == 0)),
    ]


TITLES = {
    "1": "1. dynamic, max_children 32, start_servers 2, spare 1–4: 32 concurrent requests of 2 s",
    "2": "2. ondemand, max_children 8, process_idle_timeout 2 s: idle pool, 8 concurrent 1 s requests, cold start",
    "3": "3. backpressure: static 4 children, 200 concurrent 500 ms requests "
         "(fpmd: request_queue_timeout 1 s; php-fpm: defaults, listen.backlog 511)",
}
ROWS = {"1": rows_1, "2": rows_2, "3": rows_3}


def table(sc, results, backends):
    return report.backend_table(TITLES[sc], results, backends, ROWS[sc])


def header(res):
    m = res["machine"]
    return report.header(
        f"Process-manager scenarios: fpmd vs php-fpm ({res['date']})",
        m,
        f"; {m['php_cgi']}; {m['php_fpm']}; nginx {m['nginx']}; {m['fpmd']} "
        f"({m['fpmd_git']}, binary built {res['fpmd_binary']['mtime']})",
        "Setup: one nginx (worker_processes 1), one server block per backend, identical but for "
        "the upstream; **no upstream keepalive, no fastcgi_keep_conn** (a connection per request, "
        "the usual php-fpm set-up); nginx defaults otherwise (fastcgi_read_timeout 60 s). Each "
        "backend runs alone, started fresh for each scenario, stopped (SIGQUIT) after it. "
        "Requests: one Python thread and one connection each, connected first, then released "
        "together; the script prints getmypid() and the time it started (\"wait before PHP "
        "started\" = from sending the request to that time). php processes: every php process "
        "under the manager, recursively (php-fpm: the master's children; fpmd prefork: the "
        "php-cgi parent(s) and their children). fpmd pools set pm.spawn explicitly; "
        f"somaxconn {res['settings']['somaxconn']}.")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="issue 4 process-manager scenarios, fpmd vs php-fpm "
                                            "(see bench/README.md)")
    p.add_argument("--scenarios", default="1,2,3", help="comma-separated subset of 1,2,3")
    p.add_argument("--variants", default="prefork,exec",
                   help="fpmd spawn strategies, one column each (default prefork,exec)")
    p.add_argument("--no-php-fpm", action="store_true", help="skip php-fpm")
    p.add_argument("--out", default=os.path.join(HERE, "results", "pm-scenarios.json"))
    p.add_argument("--markdown", help="also write the tables to this file")
    servers.common_options(p)
    a = p.parse_args(argv)
    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    for s in a.scenarios:
        if s not in SCENARIOS:
            p.error(f"unknown scenario {s!r} (1, 2, 3)")
    a.variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in a.variants:
        if v not in ("prefork", "exec"):
            p.error(f"unknown fpmd variant {v!r} (prefork, exec)")
    if not a.php_fpm:
        a.php_fpm = servers.default_php_fpm()
    return a


def preflight(args):
    servers.preflight(args, "make bench-pm", [(args.nginx, "nginx")])


def setup(args, tmp):
    www, _ = tree.www_dir(tmp, "bench", [("pm.php", PM_PHP)])
    tree.pool_dir(tmp, "ran", 0o755)
    fpmd, binfo = tree.copy_fpmd(args.fpmd, tmp)
    backends = []
    if not args.no_php_fpm:
        backends.append(PmPhpFpm("php-fpm", tmp, args.php_fpm))
    for v in args.variants:
        backends.append(PmFpmd(f"fpmd-{v}", tmp, fpmd, v))
    nginx = servers.Nginx(tmp, www, backends, args.nginx, 0)
    return backends, nginx, binfo


def run_all(args, tmp, backends, nginx, problems, results, warnings):
    log(f"temp dir {tmp}")
    nginx.start()
    for sc in args.scenarios:
        results[sc] = {}
        for b in backends:
            log(f"scenario {sc}: {b.name}")
            load = os.getloadavg()
            b.start_scenario(sc)
            try:
                r = RUNNERS[sc](b, tmp)
            except procs.BenchError as e:
                r = {"error": str(e)}
                problems.append(f"scenario {sc}, {b.name}: {e}")
            r["load_average"] = load
            r["manager_alive"] = b.proc.running()
            if not r["manager_alive"]:
                problems.append(f"scenario {sc}: {b.name} died (exit status {b.proc.proc.returncode})")
            problems.extend(f"scenario {sc}: {p}" for p in b.stop())
            lines = b.new_log_warnings()
            if lines:
                warnings.setdefault(sc, {})[b.name] = procs.group_warnings(lines)
            results[sc][b.name] = r
            bu = r.get("burst")
            if bu:
                log(f"scenario {sc}: {b.name}: {f_statuses(bu['statuses'])}, wall {f_s(bu['wall_s'])} s, "
                    f"{bu['distinct_pids']} pids")


def main(argv):
    args = parse_args(argv)
    if not tree.ready("bench-pm", preflight, args):
        return 2

    results, warnings = {}, {}
    binfo = None
    run = tree.Run("fpmd-bench-pm.", log)
    problems = run.problems
    with run:
        run.backends, run.nginx, binfo = setup(args, run.tmp)
        run_all(args, run.tmp, run.backends, run.nginx, problems, results, warnings)

    if problems:
        run.show_logs()

    results = {sc: r for sc, r in results.items() if r}
    if results and binfo:
        machine = report.machine_info(args.php_fpm, args.fpmd, nginx=args.nginx)
        try:
            with open("/proc/sys/net/core/somaxconn") as f:
                somaxconn = int(f.read())
        except OSError:
            somaxconn = None
        res = report.head(run.date, machine, fpmd_binary=binfo)
        res.update({
            "settings": {
                "nginx": "worker_processes 1, one server block per backend, no upstream keepalive, "
                         "no fastcgi_keep_conn, default fastcgi_read_timeout (60 s)",
                "client": "one Python thread and http.client connection per request, connected "
                          "first, released together (threading.Barrier)",
                "somaxconn": somaxconn,
                "pools": {sc: dict(zip(("php-fpm", "fpmd"), pool_settings(sc))) for sc in args.scenarios},
                "fpmd pm.spawn": args.variants,
            },
            "backends": [b.describe() for b in run.backends],
            "scenarios": results,
            "log_warnings": warnings,
            "problems": problems,
            "ok": not problems,
            "elapsed_s": run.elapsed_s(),
        })
        text = header(res) + "\n" + "\n\n".join(table(sc, results[sc], run.backends)
                                                 for sc in args.scenarios if results.get(sc))
        res["markdown"] = text
        report.save(res, args.out, run.interrupted, log)
        report.show(text, args.markdown)
        report.print_list("Warnings in the backends' logs (scenario, backend: count × message):",
                          report.grouped_warnings(warnings))
        report.print_list("PROBLEMS (the run failed):", problems)

    run.remove_tmp(args.keep_tmp)
    return run.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
