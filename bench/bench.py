#!/usr/bin/python3
"""fpmd vs php-fpm, side by side behind one nginx.

Starts, in a private temp dir, one nginx (one server block and port per
backend and nginx mode, identical except for the upstream: without upstream
keepalive, nginx's default, and with `keepalive 16` + `fastcgi_keep_conn
on`), php-fpm with a static pool and fpmd with a static pool of the same
size, and, for the WordPress workloads, a MariaDB and a WordPress site that
both use; then measures with wrk, alternating backends (A B, then B A, ...),
every workload in every nginx mode of every round:

  hello.php, phpinfo.php, DokuWiki's start page, WordPress's home page and
      a post (theme twentytwentyone), sleep.php (usleep 50 ms):
      requests/s, p50 and p99 latency, non-2xx responses (exact, from an
      nginx log that records only non-2xx), wrk socket errors;
  CPU per request: the whole machine's (busy jiffies of /proc/stat's `cpu `
      line: user, nice, system, irq, softirq) and the manager's own
      (utime+stime of the manager process alone), across each wrk run,
      divided by the requests wrk completed, in microseconds;
  memory: PSS of the whole pool (manager + every descendant, from
      /proc/PID/smaps_rollup) at idle after warm-up, and right after the
      DokuWiki load; the manager's own RSS (VmRSS, sampled in the middle of
      each load; the peak is reported).

Prints a markdown table (medians per backend, median of the per-round ratios
fpmd/php-fpm) and writes the JSON (machine, settings, every raw round,
medians, ratios). Exits non-zero when anything failed: a backend that did not
start or answer, a non-2xx response, a socket error, a process that died or
was left behind. Every process it starts is stopped on exit, Ctrl-C included.

Stdlib only. Run as root (pools run as www-data). See bench/README.md.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

from lib import procs, report, servers, tree, wordpress
from lib.procs import BenchError
from lib.report import fmt
from lib.servers import DOKUWIKI_ROOT, POOL_USER, http_get

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")

# name: URL path, what the page must contain (every string: proof that it
# really ran), an application (wrk -c of --app-connections, not
# --connections)?
WORKLOADS = {
    "hello": ("/bench/hello.php", ("Hello, world!",), False),
    "phpinfo": ("/bench/phpinfo.php", ("PHP Version",), False),
    "dokuwiki": ("/doku.php", ("DokuWiki",), True),
    # WordPress's home page with the theme the site was installed with, and
    # the post wp_install() makes ("Hello world!", id 1), alone on its page.
    "wordpress": ("/wp/", ("twenty-twenty-one-style-css", "Hello world!"), True),
    "wordpress-post": ("/wp/?p=1", ("postid-1", "Welcome to WordPress."), True),
    "sleep": ("/bench/sleep.php", ("slept 50 ms",), False),
}
WORDPRESS_WORKLOADS = ("wordpress", "wordpress-post")
# Run order within a backend's turn; pool PSS "after DokuWiki" is sampled
# right after its first DokuWiki run.
DEFAULT_WORKLOADS = "hello,phpinfo,dokuwiki,wordpress,wordpress-post,sleep"

# nginx's modes: without upstream keepalive (nginx's default: a connection
# per request) and with `keepalive N` + `fastcgi_keep_conn on`. A backend's
# turn runs them in this order, whatever order --nginx-modes gives: after a
# run with keepalive, php-fpm's children stay on nginx's idle kept
# connections (up to the upstream's keepalive_timeout, 60 s) and would not
# accept a new connection of the other mode.
NGINX_MODES = ("default", "keepalive")


class Stalled(Exception):
    """A backend answered nothing for a whole wrk run: the rest of its turn is skipped."""


log = procs.logger("bench")


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------

class Fpmd(servers.FpmdManager, servers.Backend):
    def __init__(self, name, tmp, children, binary, spawn, sessions, lines=()):
        super().__init__(name, tmp, children)
        self.spawn = spawn
        self.lines = list(lines)
        self.binary = binary
        os.makedirs(os.path.join(self.dir, "pool.d"))
        q = json.dumps
        with open(self.conf, "w") as f:
            f.write(servers.fpmd_global(self.error_log()))
        pool = servers.fpmd_pool("bench", self.sock) + [
            'pm.mode = "static"',
            f"pm.max_children = {children}",
            "pm.max_requests = 0",
        ]
        if spawn:
            pool.append(f"pm.spawn = {q(spawn)}")
        pool.append(f'php_admin_value."session.save_path" = {q(sessions)}')
        pool.extend(self.lines)
        with open(os.path.join(self.dir, "pool.d", "bench.toml"), "w") as f:
            f.write("\n".join(pool) + "\n")

    def describe(self):
        return {"name": self.name, "kind": self.kind, "spawn": self.spawn,
                "pm.spawn written": self.spawn is not None, "binary": self.binary,
                "pool lines": self.lines}


class PhpFpm(servers.PhpFpmManager, servers.Backend):
    def __init__(self, name, tmp, children, binary, sessions):
        super().__init__(name, tmp, children)
        self.binary = binary
        pool = servers.php_fpm_pool("bench", self.sock) + [
            "pm = static",
            f"pm.max_children = {children}",
            "pm.max_requests = 0",
            f"php_admin_value[session.save_path] = {sessions}",
        ]
        with open(self.conf, "w") as f:
            f.write(servers.php_fpm_global(self.dir, self.error_log()) + "\n" + "\n".join(pool) + "\n")

    def describe(self):
        return {"name": self.name, "kind": self.kind, "binary": self.binary}


class Front:
    """A backend behind nginx in one mode: its own server block (port and
    logs) and upstream, with upstream keepalive or without."""

    def __init__(self, backend, mode, keepalive, tmp):
        self.backend = backend
        self.mode = mode
        self.keepalive = keepalive  # nginx_conf reads it: 0 = no keepalive, no keep_conn
        self.name = f"{backend.name}-{mode}"  # nginx's upstream and the log files
        self.label = f"{backend.name} ({mode_label(mode, keepalive)})"
        self.sock = backend.sock
        self.children = backend.children
        self.port = servers.free_port()
        self.nginx_bad = os.path.join(tmp, f"nginx-{self.name}-non2xx.log")
        self.nginx_err = os.path.join(tmp, f"nginx-{self.name}-error.log")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"


def mode_label(mode, keepalive):
    return "no keepalive" if mode == "default" else f"keepalive {keepalive}"


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------

def measure(front, workload, wrk, connections, seconds, sample_rss=True):
    """One wrk run against one backend in one nginx mode; returns the raw figures."""
    backend = front.backend
    path = WORKLOADS[workload][0]
    bad0, err0 = procs.file_size(front.nginx_bad), procs.file_size(front.nginx_err)
    log0 = procs.file_size(backend.error_log())
    t0 = backend.manager_ticks()
    m0 = procs.machine_cpu()
    wrk.start(front.url(path), connections, seconds)
    rss = None
    if sample_rss:
        time.sleep(seconds / 2)
        rss = backend.manager_rss_kib()
        backend.proc.snapshot()
    res, raw = wrk.finish(seconds)
    machine = procs.machine_cpu_delta(m0, procs.machine_cpu())
    t1 = backend.manager_ticks()
    # nginx logs the requests wrk abandoned at its stop a moment after wrk exits.
    time.sleep(0.3)
    non2xx, unanswered, nginx_errors = servers.nginx_lines(front, bad0, err0)
    waits = []
    for line in unanswered:
        try:
            waits.append(float(line.split()[2]))
        except (IndexError, ValueError):
            pass
    reqs = res["requests"]
    cpu = None if t0 is None or t1 is None else (t1 - t0) / CLK_TCK
    return {
        "backend": backend.name,
        "workload": workload,
        "nginx_mode": front.mode,
        "nginx_keepalive": front.keepalive,
        "connections": connections,
        **servers.wrk_figures(res),
        "non2xx": len(non2xx),
        "non2xx_sample": non2xx[:5],
        "unanswered_at_stop": len(unanswered),
        "unanswered_longest_wait_s": max(waits) if waits else None,
        "unanswered_waited_over_1s": sum(1 for w in waits if w > 1.0),
        "socket_errors": servers.wrk_socket_errors(res),
        "wrk_status_errors": res["status_errors"],
        "manager_cpu_s": cpu,
        "manager_cpu_us_per_req": round(cpu * 1e6 / reqs, 2) if cpu is not None and reqs else None,
        # Every process of the machine, the bench's own and anyone else's.
        "machine_cpu_jiffies": machine,
        "machine_busy_pct": (round(100 * machine["busy"] / (machine["total"] - machine["steal"]), 1)
                             if machine["total"] - machine["steal"] > 0 else None),
        "machine_cpu_us_per_req": (round(machine["busy"] / CLK_TCK * 1e6 / reqs, 2)
                                   if reqs else None),
        "manager_rss_kib": rss,
        "nginx_errors": nginx_errors[:5],
        "nginx_error_count": len(nginx_errors),
        "backend_log_problems": procs.bad_log_lines(backend.error_log(), log0)[:10],
        "manager_alive": backend.proc.running(),
    }


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def cases(workloads, modes):
    """(workload, mode) in the table's order: each workload in every mode."""
    return [(w, m) for w in workloads for m in modes]


def case_key(w, mode):
    return f"{w}.{mode}"


# metric key -> (label, unit, better: "higher", "lower", None: a sum of
# rounds; ratio: whether the table has one)
def metric_defs(workloads, modes, labels, dokuwiki_mode=None):
    defs = []
    for w, mode in cases(workloads, modes):
        k, name = case_key(w, mode), f"{w} ({labels[mode]})"
        defs += [
            (f"{k}.rps", f"{name}: requests/s", "req/s", "higher", True),
            (f"{k}.p50_ms", f"{name}: p50 latency", "ms", "lower", True),
            (f"{k}.p99_ms", f"{name}: p99 latency", "ms", "lower", True),
            (f"{k}.machine_cpu_us_per_req", f"{name}: machine CPU per request", "µs",
             "lower", True),
            # php-fpm's master does next to nothing per request: no ratio.
            (f"{k}.manager_cpu_us_per_req", f"{name}: manager CPU per request", "µs",
             "lower", False),
            (f"{k}.non2xx", f"{name}: non-2xx + socket errors (sum of rounds)", "", None, False),
            (f"{k}.unanswered", f"{name}: unanswered when wrk stopped (sum of rounds; "
                                f"longest wait)", "", None, False),
        ]
    defs += [
        ("pool_pss_idle_mib", "pool PSS, idle after warm-up", "MiB", "lower", True),
    ]
    if dokuwiki_mode:
        defs.append(("pool_pss_after_dokuwiki_mib",
                     f"pool PSS, after DokuWiki load ({labels[dokuwiki_mode]})", "MiB", "lower", True))
    defs.append(("manager_rss_mib", "manager RSS, peak mid-load sample", "MiB", "lower", True))
    defs.append(("manager_rss_max_mib", "manager peak RSS over the run (VmHWM)", "MiB", "lower", True))
    return defs


RUN_METRICS = ("rps", "p50_ms", "p99_ms", "machine_cpu_us_per_req", "manager_cpu_us_per_req")


def round_values(rnd, backend):
    """Flat {metric key: value} of one backend in one round."""
    v = {}
    rss = []
    for r in rnd["runs"]:
        if r["backend"] != backend:
            continue
        k = case_key(r["workload"], r["nginx_mode"])
        for m in RUN_METRICS:
            v[f"{k}.{m}"] = r[m]
        v[f"{k}.non2xx"] = r["non2xx"] + sum(r["socket_errors"].values())
        v[f"{k}.unanswered"] = r["unanswered_at_stop"]
        v[f"{k}.unanswered_longest_wait_s"] = r["unanswered_longest_wait_s"]
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


def summarize(rounds, backends, baseline, defs):
    """Per metric: the per-round values of every backend; the median over
    rounds and the median of the per-round ratios to the baseline (or, for
    counts, the sum of rounds)."""
    metrics = {}
    values = {b: [round_values(r, b) for r in rounds] for b in backends}
    for key, label, unit, better, ratio in defs:
        per_round = {b: [v.get(key) for v in values[b]] for b in backends}
        m = {"label": label, "unit": unit, "better": better, "per_round": per_round}
        if key.endswith(".non2xx") or key.endswith(".unanswered"):
            m["total"] = {b: (None if all(x is None for x in per_round[b])
                              else sum(x or 0 for x in per_round[b])) for b in backends}
            if key.endswith(".unanswered"):
                wkey = key + "_longest_wait_s"
                m["longest_wait_s"] = {
                    b: max([x for x in (v.get(wkey) for v in values[b]) if x is not None],
                           default=None) for b in backends}
            metrics[key] = m
            continue
        m["median"] = {b: median(per_round[b]) for b in backends}
        if ratio:
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
                if "ratio_median" not in m:
                    row.append("")
                    continue
                r = m["ratio_median"].get(b)
                row.append("n/a" if r is None else f"{r:.2f}×" if r >= 0.1 or r == 0 else f"{r:.2g}×")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="fpmd vs php-fpm behind one nginx (see bench/README.md)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, backends alternating (default 3)")
    p.add_argument("--duration", type=int, default=5, help="seconds of wrk per workload and nginx mode (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per workload and nginx mode (default 2)")
    p.add_argument("--children", type=int, default=4, help="static pool size of both (default 4)")
    p.add_argument("--connections", type=int, default=50, help="wrk connections (default 50)")
    p.add_argument("--app-connections", "--dokuwiki-connections", dest="app_connections", type=int,
                   default=20, help="wrk connections for DokuWiki and WordPress (default 20)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--nginx-modes", default=",".join(NGINX_MODES), metavar="LIST",
                   help="nginx's modes each workload runs in, always in this order: 'default' "
                        "(no upstream keepalive, no fastcgi_keep_conn: a connection per request), "
                        "'keepalive' (upstream keepalive N + fastcgi_keep_conn on) "
                        "(default default,keepalive)")
    p.add_argument("--keepalive", type=int, default=16, metavar="N",
                   help="the upstream keepalive of the 'keepalive' mode (default 16); 0: no "
                        "'keepalive' mode, as --nginx-modes default")
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
    p.add_argument("--fpmd-line", action="append", default=[], metavar="LINE",
                   help="a TOML line added to fpmd's pool, e.g. 'fpm_sapi = false' (repeatable)")
    p.add_argument("--out", help="JSON output (default bench/results/latest.json)")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--chart", metavar="PNG", help="then draw the ratios into PNG (bench/chart.py)")
    servers.common_options(p, copies_fpmd=False, wrk=True)
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
        a.php_fpm = servers.default_php_fpm()
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
    modes = [m.strip() for m in a.nginx_modes.split(",") if m.strip()]
    for m in modes:
        if m not in NGINX_MODES:
            p.error(f"unknown nginx mode {m!r} (known: {', '.join(NGINX_MODES)})")
    if len(set(modes)) != len(modes) or not modes:
        p.error("--nginx-modes: one or both of default,keepalive, each once")
    if a.keepalive < 0:
        p.error("--keepalive must be >= 0")
    if a.keepalive == 0 and "keepalive" in modes:
        if any(x.startswith("--nginx-modes") for x in argv):
            p.error("--keepalive 0 and the 'keepalive' mode of --nginx-modes exclude each other")
        modes.remove("keepalive")
    if not modes:
        p.error("--nginx-modes: no mode left")
    a.modes = [m for m in NGINX_MODES if m in modes]
    if a.rounds < 1 or a.duration < 1 or a.warmup < 0 or a.children < 1:
        p.error("--rounds, --duration, --children must be >= 1, --warmup >= 0")
    return a


def preflight(args):
    servers.preflight(args, "make bench", [(args.nginx, "nginx"), (args.wrk, "wrk")],
                      ": the comparison needs the same PHP version")
    if "dokuwiki" in args.workloads and not os.path.isfile(os.path.join(DOKUWIKI_ROOT, "doku.php")):
        raise BenchError(f"{DOKUWIKI_ROOT}/doku.php not found (apt-get install dokuwiki)")
    if uses_wordpress(args):
        gone = wordpress.missing()
        if gone:
            raise BenchError(f"{gone[0][0]} not found: the WordPress workloads need "
                             f"{' '.join(sorted(set(pkg for _p, pkg in gone)))} (apt-get install "
                             f"them; make bench does)")


def uses_wordpress(args):
    return any(w in WORDPRESS_WORKLOADS for w in args.workloads)


def setup(args, tmp):
    """Writes every config into tmp; starts nothing. Returns the backends,
    the baseline, {backend name: {mode: Front}}, nginx, wrk."""
    www, bench_dir = tree.www_dir(tmp, "bench")
    for f in sorted(os.listdir(os.path.join(HERE, "php"))):
        shutil.copy(os.path.join(HERE, "php", f), os.path.join(bench_dir, f))
    sessions = tree.pool_dir(tmp, "sessions", 0o700)

    backends = []
    for v in args.variants:
        name = "fpmd" if len(args.variants) == 1 else f"fpmd-{v}"
        spawn = None if v in (None, "default") else v
        backends.append(Fpmd(name, tmp, args.children, args.fpmd, spawn, sessions,
                             args.fpmd_line))
    baseline = PhpFpm("php-fpm", tmp, args.children, args.php_fpm, sessions)
    backends.append(baseline)
    fronts = {b.name: {m: Front(b, m, args.keepalive if m == "keepalive" else 0, tmp)
                       for m in args.modes} for b in backends}
    nginx = servers.Nginx(tmp, www, [f for b in backends for f in fronts[b.name].values()],
                          args.nginx, 0, apps=("wp",) if uses_wordpress(args) else ())
    wrk = servers.Wrk(args.wrk, args.threads, os.path.join(HERE, "wrk-report.lua"))

    return www, backends, baseline, fronts, nginx, wrk


def start_wordpress(run, www):
    """The MariaDB (a service of the run: stopped by its clean-up) and the
    WordPress site on it, in www/wp, for every backend."""
    t0 = time.time()
    db = wordpress.MariaDb(run.tmp)
    run.services.append(db)
    db.start()
    wordpress.install(www, db)
    log(f"MariaDB and WordPress ready in {time.time() - t0:.1f} s")
    return db


def main(argv):
    args = parse_args(argv)
    if not tree.ready("bench", preflight, args):
        return 2

    # What the bench leaves running is reported, not killed (the others kill it).
    run = tree.Run("fpmd-bench.", log, kill_strays=False)
    problems = run.problems
    result = None
    fronts = {}
    with run:
        www, run.backends, baseline, fronts, run.nginx, run.wrk = setup(args, run.tmp)
        if uses_wordpress(args):
            start_wordpress(run, www)
        result = bench(args, run.tmp, run.backends, baseline, fronts, run.nginx, run.wrk, problems)

    log_problems = {}
    for b in run.backends:
        lines = procs.bad_log_lines(b.error_log())
        if b.log_path != b.error_log():
            lines += procs.bad_log_lines(b.log_path)
        if lines:
            log_problems[b.name] = procs.group_lines(lines)
    if problems:
        run.show_logs(([run.nginx.log_path] if run.nginx else [])
                      + [f.nginx_err for per in fronts.values() for f in per.values()]
                      + [p for s in run.services for p in s.logs()])

    if result is not None:
        result["problems"] = problems
        result["ok"] = not problems
        result["backend_log_warnings"] = log_problems
        result["elapsed_s"] = run.elapsed_s()
        table = markdown_table(result)
        result["markdown"] = table
        report.write_json(args.out, result)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(table + "\n")
        print(header_text(result))
        print(table)
        print()
        report.print_list("Warnings in the backends' logs (count × message):",
                          [f"{name}: {g['count']} × {g['message']}"
                           for name, groups in log_problems.items() for g in groups[:10]])
        report.print_list("PROBLEMS (the run failed):", problems)
        log(f"wrote {args.out}")
        if args.chart:
            draw_chart(args.out, args.chart, problems)

    run.remove_tmp(args.keep_tmp)
    return run.exit_status()


def draw_chart(src, png, problems):
    import importlib.util
    py = sys.executable
    if importlib.util.find_spec("matplotlib") is None and os.path.exists("/usr/bin/python3"):
        py = "/usr/bin/python3"  # Debian's python3-matplotlib, when another python3 runs us
    r = procs.run([py, os.path.join(HERE, "chart.py"), src, png])
    if r.returncode != 0:
        problems.append(f"chart.py failed:\n{r.stdout}")
    else:
        log(r.stdout.strip())


def header_text(r):
    m, s = r["machine"], r["settings"]
    modes = s["nginx_modes"]
    keep = " and ".join(
        f"{mode['label']} ({'upstream keepalive ' + str(mode['keepalive']) + ' and fastcgi_keep_conn on' if mode['keepalive'] else 'no upstream keepalive, no fastcgi_keep_conn: a connection per request'})"
        for mode in modes.values())
    keep = (f"each workload runs in {len(modes)} nginx modes, in this order: {keep}"
            if len(modes) > 1 else f"one nginx mode: {keep}")
    wp = ""
    if any(w in WORDPRESS_WORKLOADS for w in s["workloads"]):
        wp = (f" WordPress {m.get('wordpress') or '?'} (Debian's, theme {wordpress.THEME}) on "
              f"{m.get('mariadb') or 'MariaDB'}, one database for every backend, started by the "
              f"bench.")
    others = "/".join(b["name"] for b in r["backends"] if b["name"] != r["baseline"])
    return report.header(
        f"fpmd vs php-fpm ({r['date']}{', SMOKE RUN: not a measurement' if r['smoke'] else ''})",
        m,
        f" ({m['debian_version']}); {m['php_cgi']}; {m['php_fpm']}; "
        f"nginx {m['nginx']}; {m['wrk']}; {m['fpmd']} ({m['fpmd_git']})",
        f"Setup: one nginx (worker_processes 1), one server block per backend and nginx mode, "
        f"identical but for the upstream; {keep}. Static pools of {s['children']} children, "
        f"pm.max_requests 0.{wp} wrk -t{s['wrk_threads']} -c{s['connections']} (DokuWiki, "
        f"WordPress -c{s['app_connections']}), {s['duration_s']} s per workload and mode; each "
        f"round starts each backend alone, warms it up ({s['warmup_s']} s per workload and mode), "
        f"measures it, stops it; {s['rounds']} round(s), order A B, B A, ... wrk, nginx, MariaDB "
        f"and PHP share the machine's {m['nproc']} CPUs. Values: medians over rounds; ratio: median "
        f"of the per-round ratios {others} ÷ {r['baseline']} (requests/s: higher is better; "
        f"latency, memory, CPU: lower is better). Machine CPU per request: the busy jiffies of "
        f"/proc/stat's cpu line (user, nice, system, irq, softirq; not idle, iowait, steal) across "
        f"the wrk run, every process of the machine, ÷ the requests wrk completed; manager CPU per "
        f"request: utime+stime of fpmd or of php-fpm's master alone (no ratio: php-fpm's master "
        f"does next to nothing per request). Latency covers answered requests; 'unanswered when "
        f"wrk stopped' counts the requests still waiting when wrk closed its connections, with the "
        f"longest wait: a wait close to the run's length means a starved connection.")


def check_pages(f, workloads):
    """Every page must answer 200 with its content before it is measured."""
    for w in workloads:
        path, needles, _ = WORKLOADS[w]
        status, body = None, ""
        for _ in range(3):
            status, body = http_get(f.url(path))
            if status == 200:
                break
            time.sleep(0.5)
        lacks = [n for n in needles if n not in body]
        if status != 200 or lacks:
            raise BenchError(f"{f.label}: GET {path} answered {status}, "
                             f"{'without ' + repr(lacks) if lacks else 'with ' + repr(needles)}: "
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


def bench(args, tmp, backends, baseline, fronts, nginx, wrk, problems):
    """Each round runs every backend in turn (order reversed every other
    round), alone: start it, then in each nginx mode check its pages, warm
    it up and run every workload (idle PSS after the first warm-up), stop
    it. Running one backend at a time keeps the memory figures honest: PSS
    splits pages shared between php-fpm and php-cgi (the PHP extensions'
    and system libraries) between the two pools when both run, which made
    php-fpm's pool look ~20% smaller."""
    log(f"temp dir {tmp}")
    nginx.start()
    names = [b.name for b in backends]
    labels = {m: mode_label(m, args.keepalive) for m in args.modes}

    def conns(w):
        return args.app_connections if WORKLOADS[w][2] else args.connections

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
            try:
                turn(args, b, fronts[b.name], labels, i, rnd, wrk, conns, problems)
            except Stalled as e:
                problems.append(f"{b.name}: {e}; the rest of its round {i + 1} is skipped")
                log(f"{b.name}: {e}; skipping the rest of its round")
            t0 = time.time()
            problems.extend(b.stop())
            rnd["stop_s"][b.name] = round(time.time() - t0, 2)
        rounds.append(rnd)

    machine = report.machine_info(args.php_fpm, args.fpmd, args.nginx, args.wrk)
    if uses_wordpress(args):
        machine["wordpress"] = package_version("wordpress")
        machine["mariadb"] = report.first_line([wordpress.MARIADBD, "--version"])
    result = report.head(tree.now(), machine, smoke=args.smoke)
    result.update({
        "settings": {
            "rounds": args.rounds, "duration_s": args.duration, "warmup_s": args.warmup,
            "children": args.children, "connections": args.connections,
            "app_connections": args.app_connections, "wrk_threads": args.threads,
            "wrk_timeout_s": 10,
            "workloads": {w: {"path": WORKLOADS[w][0], "connections": conns(w),
                              "must_contain": list(WORKLOADS[w][1])} for w in args.workloads},
            "nginx_worker_processes": 1,
            "nginx_modes": {m: {"label": labels[m],
                                "keepalive": args.keepalive if m == "keepalive" else 0,
                                "fastcgi_keep_conn": m == "keepalive"} for m in args.modes},
            "nginx_keepalive": args.keepalive if "keepalive" in args.modes else 0,
            "pool": {"pm": "static", "max_children": args.children, "max_requests": 0,
                     "user": POOL_USER,
                     "session.save_path": "per-run temp dir (php_admin_value, same for every backend)"},
            "procedure": "each round starts each backend alone (the others stopped); in each nginx "
                         "mode, in order, checks every page answers 200 with its content, warms it "
                         "up on every workload and runs every workload (idle PSS after the first "
                         "mode's warm-up); stops it; backend order reversed every other round",
            "pss": "sum of Pss from /proc/PID/smaps_rollup over the manager and all its descendants",
            "machine_cpu": "busy jiffies (user+nice+system+irq+softirq) of the cpu line of "
                           "/proc/stat across each wrk run (every process of the machine), ÷ the "
                           "requests wrk completed",
            "manager_cpu": "utime+stime of the manager process alone across each wrk run, ÷ the "
                           "requests wrk completed",
            "manager_rss": "VmRSS of the manager sampled half-way through each wrk run; max over workloads",
            "non2xx": "exact count from an nginx access log that records only non-2xx responses; "
                      "499 (wrk closed the connection at its stop, request unanswered) counted apart",
        },
        "backends": [b.describe() for b in backends],
        "baseline": baseline.name,
        "rounds": rounds,
    })
    if uses_wordpress(args):
        result["settings"]["wordpress"] = {
            "site": f"Debian's {wordpress.WORDPRESS_ROOT} in the temp dir's www/wp (top-level "
                    f"scripts copied, wp-includes and wp-admin linked, own wp-content and "
                    f"wp-config.php; nothing in /etc/wordpress), served under /wp/",
            "theme": wordpress.THEME,
            "database": "one MariaDB for every backend, started by the bench in its temp dir "
                        "(mariadb-install-db, --no-defaults, --skip-networking, its own unix "
                        "socket), stopped at the end",
            "wp-config": "DISABLE_WP_CRON, WP_HTTP_BLOCK_EXTERNAL; WP_HOME from the request's Host",
        }
    dokuwiki_mode = args.modes[0] if "dokuwiki" in args.workloads else None
    result["metrics"] = summarize(rounds, names, baseline.name,
                                  metric_defs(args.workloads, args.modes, labels, dokuwiki_mode))
    return result


def package_version(pkg):
    return report.first_line(["dpkg-query", "-W", "-f=${Version}", pkg])


def turn(args, b, fronts, labels, i, rnd, wrk, conns, problems):
    """One backend's turn in round i: in each nginx mode, the pages checked,
    the warm-up and every workload; idle PSS after the first warm-up."""
    first = True
    for mode in args.modes:
        f = fronts[mode]
        check_pages(f, args.workloads)
        if args.warmup:
            for w in args.workloads:
                r = measure(f, w, wrk, conns(w), args.warmup, sample_rss=False)
                check_run(r, problems, "warm-up ")
        if first:
            time.sleep(1)
            rnd["pool_idle"][b.name] = b.pool()
            rnd.setdefault("parallel_before", {})[b.name] = pc = parallel_check(f)
            if not pc["in_parallel"]:
                problems.append(f"{b.name}: after warm-up, {b.children} requests of "
                                f"{PARALLEL_S * 1000:.0f} ms sent at once took {pc['seconds']} s "
                                f"(all 200: {pc['all_200']}): not every child serves")
        for w in args.workloads:
            r = measure(f, w, wrk, conns(w), args.duration)
            rnd["runs"].append(r)
            log(f"round {i + 1}/{args.rounds} {w:14} {labels[mode]:12} {b.name:13} "
                f"{r['rps']:9.1f} req/s  p50 {fmt(r['p50_ms']):>6} ms  p99 {fmt(r['p99_ms']):>6} ms  "
                f"CPU/req {fmt(r['machine_cpu_us_per_req']):>6} µs (manager "
                f"{fmt(r['manager_cpu_us_per_req'])})  non-2xx {r['non2xx']}  "
                f"unanswered at stop {r['unanswered_at_stop']}")
            check_run(r, problems)
            if w == "dokuwiki" and first:
                rnd["pool_after_dokuwiki"][b.name] = b.pool()
        first = False
    rnd["manager_hwm_kib"][b.name] = procs.status_kib(b.proc.pid, "VmHWM")
    # Through the last mode's server block: after a run with keepalive,
    # php-fpm's children serve only nginx's kept connections.
    rnd.setdefault("parallel_after", {})[b.name] = pc = parallel_check(fronts[args.modes[-1]])
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
    case = f"{r['workload']} ({mode_label(r['nginx_mode'], r['nginx_keepalive'])})"
    where = f"{what}{r['backend']} {case}"
    if r["non2xx"]:
        problems.append(f"{where}: {r['non2xx']} non-2xx responses, "
                        f"e.g. {r['non2xx_sample'][:2]}; nginx: {r['nginx_errors'][:2]}")
    if errs:
        problems.append(f"{where}: socket errors {r['socket_errors']}")
    if not r["manager_alive"]:
        problems.append(f"{where}: the manager died during the run")
    lines = r["backend_log_problems"]
    if lines:
        log(f"{r['backend']}: {len(lines)}{'+' if len(lines) >= 10 else ''} warning(s) in its log "
            f"during {what}{case}, e.g. {lines[0]}")
    if not r["manager_alive"]:
        raise Stalled(f"its manager died during {what}{case}")
    if stalled:
        raise Stalled(f"{what}{case}: not one request answered in {r['duration_s']} s "
                      f"({r['unanswered_at_stop']} still waiting when wrk stopped)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
