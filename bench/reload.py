#!/usr/bin/python3
"""Configuration reload under load, fpmd side by side with php-fpm.

Both managers are asked to apply a changed php_admin_value[memory_limit]
while they serve: fpmd by rewriting its pool TOML and running
`fpmd -c FILE reload` (or sending SIGUSR2, --fpmd-reload sigusr2), php-fpm
by rewriting its pool ini and sending SIGUSR2 (its documented reload: the
master re-executes itself, keeps the listening sockets and restarts every
child). php-fpm runs twice: with its defaults (process_control_timeout = 0)
and with process_control_timeout = 10s, which careful php-fpm users set.

  1. behind nginx (upstream keepalive + fastcgi_keep_conn, then, as a
     second variant, without), wrk -c20 on a script that sleeps 50 ms,
     for 15 s, twice per backend: once without a reload, once with 10
     reloads spaced evenly, each with a new memory_limit. Reported:
     requests, non-2xx (exact, from nginx's log), wrk's socket errors,
     answers whose usleep was cut short (the script prints what it
     measured; wrk-reload.lua counts them), p50/p99/max latency, and how
     long after each reload the new memory_limit was seen (a side thread
     polls ini_get('memory_limit') through nginx, one request at a time);
  2. one request to a script that does usleep(10 s) and measures it with
     microtime, in flight across one reload: its status, whether its body
     came whole, what it measured, and when the new memory_limit was seen
     by other requests meanwhile.

Every backend runs alone, started fresh for each scenario and nginx
variant, and is stopped with SIGQUIT afterwards. Prints markdown tables and
writes bench/results/reload.json. The machinery (processes in their own
session with PDEATHSIG, cleanup on errors and Ctrl-C, /proc helpers, the
nginx config, wrk) is bench/lib's, the pool-running patterns pm_scenarios.py's.

Exit status: 1 when the bench itself failed (a backend that does not start
or dies, a process left behind) or when fpmd broke its promise (a non-2xx,
a socket error, a cut-short or bad answer, a reload not seen, the in-flight
request not answered whole after its full 10 s); php-fpm's losses are
reported, not judged.

Stdlib only; run as root (pools run as www-data, php-fpm needs -R).
"""

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import sys
import threading
import time

from lib import procs, report, servers, tree
from lib.report import f_tree

HERE = os.path.dirname(os.path.abspath(__file__))
INITIAL_MEMORY_LIMIT = "128M"
INFLIGHT_S = 10.0
INFLIGHT_FILLER = 4096  # × 16 bytes: the in-flight answer carries 64 KiB, then END
CLIENT_TIMEOUT = 90.0  # > nginx's fastcgi_read_timeout (60 s): nginx answers first

SLEEP_PHP = r"""<?php
// written by bench/reload.py: logs when it started, its run tag and request
// id, the memory_limit it runs with; then one usleep(50 ms), and what it
// measured (usleep returns early when the child gets a signal).
$start = microtime(true);
$clean = function ($k) { return isset($_GET[$k]) ? preg_replace('/[^\w.-]/', '', $_GET[$k]) : '-'; };
file_put_contents(dirname(__DIR__, 2) . '/ran/served.log',
    sprintf("%.6f %s %s %s %d\n", $start, $clean('run'), $clean('id'), ini_get('memory_limit'), getmypid()),
    FILE_APPEND | LOCK_EX);
$t = microtime(true);
usleep(50000);
printf("slept 50 ms (measured %.3f ms) pid %d\n", (microtime(true) - $t) * 1000, getmypid());
"""

MEMLIMIT_PHP = r"""<?php
// written by bench/reload.py: the memory_limit this child runs with.
header('Content-Type: text/plain');
echo ini_get('memory_limit'), ' ', getmypid(), "\n";
"""

INFLIGHT_PHP = r"""<?php
// written by bench/reload.py: ?s=N sleeps N seconds in one usleep, measured
// with microtime; logs its id first (the bench reloads once it runs), ends
// with 64 KiB and END so that a body cut short shows.
$t0 = microtime(true);
$ml = ini_get('memory_limit');
$id = isset($_GET['id']) ? preg_replace('/[^\w.-]/', '', $_GET['id']) : '-';
file_put_contents(dirname(__DIR__, 2) . '/ran/inflight.log',
    sprintf("%s %d %.6f\n", $id, getmypid(), $t0), FILE_APPEND | LOCK_EX);
$s = isset($_GET['s']) ? (float)$_GET['s'] : 10.0;
usleep((int)($s * 1000000));
$t1 = microtime(true);
header('Content-Type: text/plain');
printf("pid %d memory_limit %s slept %.6f s\n", getmypid(), $ml, $t1 - $t0);
echo str_repeat("0123456789abcdef", %FILLER%), "\nEND\n";
""".replace("%FILLER%", str(INFLIGHT_FILLER))


log = procs.logger("bench-reload")


def mono():
    return time.monotonic()


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------

class RBackend(servers.Backend):
    """A backend whose pool's memory_limit is rewritten by every reload."""
    label = "?"

    def __init__(self, name, tmp, children):
        super().__init__(name, tmp, children)
        self.mem = None

    def start_with(self, mem):
        self.write_config(mem)
        self.start()

    def expected_php(self):
        return self.children + (1 if self.prefork else 0)

    def settle(self, timeout=5.0):
        """Waits until the pool has exactly its php processes (old ones
        retired); returns the tree then."""
        deadline = mono() + timeout
        while True:
            t = self.php_tree()
            if t["php"] == self.expected_php() and not t["zombies"] or mono() >= deadline:
                return t
            time.sleep(0.1)

    def logs(self):
        return sorted({self.log_path, self.error_log()})

    def log_offsets(self):
        return {p: procs.file_size(p) for p in self.logs()}

    def log_text_since(self, offsets):
        out = []
        for p, off in offsets.items():
            out += [procs.ANSI.sub("", l.decode(errors="replace")) for l in procs.count_lines_from(p, off)]
        return out


class RFpmd(servers.FpmdManager, RBackend):
    def __init__(self, name, tmp, children, binary, spawn, method):
        super().__init__(name, tmp, children)
        self.binary = binary
        self.spawn = spawn
        self.method = method
        self.prefork = spawn in (None, "prefork")
        self.label = "fpmd" + (f" ({spawn})" if spawn else "")
        self.pool_file = os.path.join(self.dir, "pool.d", "reload.toml")
        self.ctl = os.path.join(self.dir, "fpmd-ctl.sock")
        os.makedirs(os.path.join(self.dir, "pool.d"))

    def write_config(self, mem):
        q = json.dumps
        with open(self.conf, "w") as f:
            f.write("# generated by bench/reload.py\n" + servers.fpmd_global(self.error_log(), self.ctl))
        lines = (["# generated by bench/reload.py; every reload changes memory_limit"]
                 + servers.fpmd_pool("reload", self.sock)
                 + ['pm.mode = "static"', f"pm.max_children = {self.children}", "pm.max_requests = 0"])
        if self.spawn:
            lines.append(f"pm.spawn = {q(self.spawn)}")
        lines.append(f"php_admin_value.memory_limit = {q(mem)}")
        servers.write_whole(self.pool_file, "\n".join(lines) + "\n")
        self.mem = mem

    def reload(self, mem):
        """Rewrites the pool and reloads; returns what happened."""
        t0, wall = mono(), time.time()
        self.write_config(mem)
        ev = {"t_abs": t0, "t_wall": wall, "mem": mem, "method": self.method}
        if self.method == "sigusr2":
            os.kill(self.proc.pid, signal.SIGUSR2)
            ev["took_s"] = None
            return ev
        try:
            r = procs.run([self.binary, "-c", self.conf, "reload"], timeout=60)
            ev["rc"], ev["output"] = r.returncode, r.stdout.strip()
        except Exception as e:  # subprocess.TimeoutExpired: the child is killed by run()
            ev["rc"], ev["output"] = None, repr(e)
        ev["took_s"] = round(mono() - t0, 4)
        return ev

    def describe(self):
        return {"name": self.name, "kind": self.kind, "label": self.label, "spawn": self.spawn,
                "pm.spawn written": self.spawn is not None, "binary": self.binary,
                "reload": "fpmd -c FILE reload" if self.method == "command" else "SIGUSR2"}


class RPhpFpm(servers.PhpFpmManager, RBackend):
    def __init__(self, name, tmp, children, binary, pct):
        super().__init__(name, tmp, children)
        self.binary = binary
        self.pct = pct
        self.label = "php-fpm" + (f" (process_control_timeout {pct})" if pct else " (defaults)")

    def write_config(self, mem):
        pct = f"process_control_timeout = {self.pct}\n" if self.pct else ""
        pool = servers.php_fpm_pool("reload", self.sock) + [
            "pm = static",
            f"pm.max_children = {self.children}",
            "pm.max_requests = 0",
            f"php_admin_value[memory_limit] = {mem}",
        ]
        servers.write_whole(self.conf, "; generated by bench/reload.py; every reload changes memory_limit\n"
                            + servers.php_fpm_global(self.dir, self.error_log()) + pct + "\n"
                            + "\n".join(pool) + "\n")
        self.mem = mem

    def reload(self, mem):
        t0, wall = mono(), time.time()
        self.write_config(mem)
        # -F: the master is our child; SIGUSR2 makes it exec itself (same pid).
        os.kill(self.proc.pid, signal.SIGUSR2)
        return {"t_abs": t0, "t_wall": wall, "mem": mem, "method": "SIGUSR2", "took_s": None}

    def describe(self):
        return {"name": self.name, "kind": self.kind, "label": self.label, "binary": self.binary,
                "process_control_timeout": self.pct or "0 (default)", "reload": "SIGUSR2"}


# ---------------------------------------------------------------------------
# The memory_limit poller
# ---------------------------------------------------------------------------

class Poller(procs.Background):
    """Asks /bench/memlimit.php through nginx, one request at a time, a new
    connection each, `interval` apart; records every answer."""
    join_s = 12.0

    def __init__(self, port, interval):
        super().__init__()
        self.port = port
        self.interval = interval
        self.records = []

    def run(self):
        while not self.stop_ev.is_set():
            r = {"sent": mono()}
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                conn.request("GET", "/bench/memlimit.php")
                resp = conn.getresponse()
                body = resp.read().decode(errors="replace")
                r["status"] = resp.status
                parts = body.split()
                if resp.status == 200 and len(parts) == 2:
                    r["value"], r["pid"] = parts[0], int(parts[1])
            except (OSError, http.client.HTTPException, ValueError) as e:
                r["error"] = repr(e)
            finally:
                conn.close()
            r["recv"] = mono()
            self.records.append(r)
            self.stop_ev.wait(self.interval)


def poll_summary(records, window=None):
    """Statuses of every poll; latency of those sent within `window`
    (monotonic start, end: the wrk run), or of all."""
    lat = [r["recv"] - r["sent"] for r in records if r.get("status") == 200
           and (window is None or window[0] <= r["sent"] <= window[1])]
    statuses = {}
    for r in records:
        k = str(r["status"]) if "status" in r else "error"
        statuses[k] = statuses.get(k, 0) + 1
    return {
        "polls": len(records),
        "statuses": statuses,
        "errors": sorted({r["error"] for r in records if "error" in r})[:3],
        "latency_p50_ms": None if not lat else round(statistics.median(lat) * 1000, 1),
        "latency_max_ms": None if not lat else round(max(lat) * 1000, 1),
    }


def seen_after(events, records, initial):
    """For each reload: when the new memory_limit was first answered, and
    until when an older one still was (seconds after the reload began)."""
    out = []
    older = {initial}
    for ev in events:
        t = ev["t_abs"]
        ok = [r for r in records if r.get("value") is not None and r["recv"] >= t]
        new = [r for r in ok if r["value"] == ev["mem"]]
        first = min(new, key=lambda r: r["recv"]) if new else None
        stale = [r["recv"] - t for r in ok if r["value"] in older]
        out.append({
            "mem": ev["mem"],
            "seen_after_s": None if first is None else round(first["recv"] - t, 4),
            "seen_poll_sent_after_s": None if first is None else round(first["sent"] - t, 4),
            "old_value_last_answered_after_s": round(max(stale), 4) if stale else None,
        })
        older.add(ev["mem"])
    return out


def served_entries(tmp, offset, run):
    """The sleep.php requests of one run, from PHP's own log:
    [(start wall time, request id, memory_limit, pid)]."""
    out = []
    for line in procs.count_lines_from(os.path.join(tmp, "ran", "served.log"), offset):
        p = line.decode(errors="replace").split()
        if len(p) == 5 and p[1] == run:
            try:
                out.append((float(p[0]), p[2], p[3], int(p[4])))
            except ValueError:
                pass
    return out


def served_summary(entries, events, initial):
    """What PHP ran: requests run more than once (the same wrk request id
    started twice: nginx retried it on another connection after the first
    child died), and per reload when the first request ran with the new
    memory_limit and until when requests still started with an older one."""
    starts = {}
    for _, rid, _, _ in entries:
        starts[rid] = starts.get(rid, 0) + 1
    per = []
    older = {initial}
    for ev in events:
        t = ev["t_wall"]
        after = [e for e in entries if e[0] >= t]
        new = [e[0] - t for e in after if e[2] == ev["mem"]]
        stale = [e[0] - t for e in after if e[2] in older]
        per.append({
            "mem": ev["mem"],
            "first_run_after_s": round(min(new), 4) if new else None,
            "older_started_after_s": round(max(stale), 4) if stale else None,
            "older_started": len(stale),
        })
        older.add(ev["mem"])
    values = {}
    for e in entries:
        values[e[2]] = values.get(e[2], 0) + 1
    return {
        "php_runs": len(entries),
        "distinct_requests": len(starts),
        "requests_run_twice_or_more": sum(1 for n in starts.values() if n > 1),
        "extra_runs": sum(n - 1 for n in starts.values() if n > 1),
        "run_twice_sample": [k for k, n in starts.items() if n > 1][:5],
        "memory_limits": values,
        "per_reload": per,
    }


# ---------------------------------------------------------------------------
# Scenario 1: wrk with and without reloads
# ---------------------------------------------------------------------------

def status_counts(lines):
    out = {}
    for l in lines:
        k = l.split()[0] if l.split() else "?"
        out[k] = out.get(k, 0) + 1
    return out


# Warning-or-worse lines of fpmd's and php-fpm's logs (by their level
# names, which both write in capitals; lib/procs.py's BAD_LOG also matches
# "error" inside a NOTICE's text).
WARN_LOG = re.compile(r"\b(WARNING|ERROR|ALERT|CRIT|CRITICAL|EMERG)\b|panicked")

FPMD_LOG_COUNTS = {
    "reload_done": r"reload done",
    "reload_refused_or_failed": r"reload (refused|failed)",
    "generation_starting": r"reloading: starting generation",
    "generation_serves": r"generation \d+ serves",
    "generation_abandoned": r"abandoned",
    "coalesced": r"reload requests arrived during the reload",
    "killed_busy": r"SIGKILL",
}
PHPFPM_LOG_COUNTS = {
    "reloading": r"Reloading in progress",
    "ready": r"ready to handle connections",
    "child_signalled": r"exited on signal",
    "child_exited": r"exited with code",
}


def log_counts(b, lines):
    pats = FPMD_LOG_COUNTS if b.kind == "fpmd" else PHPFPM_LOG_COUNTS
    return {k: sum(1 for l in lines if re.search(p, l)) for k, p in pats.items()}


def run_load(args, tmp, b, wrk, reloads, mems, tag, run):
    """One wrk run of args.duration s on sleep.php with the poller beside it,
    and `reloads` reloads spaced evenly (the k-th to mems[k]). `run` tags
    the requests in PHP's log."""
    bad0, err0 = procs.file_size(b.nginx_bad), procs.file_size(b.nginx_err)
    served0 = procs.file_size(os.path.join(tmp, "ran", "served.log"))
    offsets = b.log_offsets()
    initial = b.mem
    events = []
    with Poller(b.port, args.poll_interval) as poller:
        time.sleep(0.05)
        wrk.start(b.url(f"/bench/sleep.php?run={run}"), args.connections, args.duration)
        t0 = mono()
        try:
            for k in range(reloads):
                at = t0 + args.duration * (k + 0.5) / reloads
                while mono() < at:
                    time.sleep(min(0.05, max(0.0, at - mono())))
                ev = b.reload(mems[k])
                ev["at_s"] = round(ev["t_abs"] - t0, 3)
                events.append(ev)
                if ev.get("rc") not in (None, 0):
                    log(f"{b.name}: reload {k + 1} exited {ev['rc']}: {ev.get('output')}")
            res, _ = wrk.finish(args.duration)
        finally:
            wrk.kill()
        t_end = mono()
        time.sleep(1.0)  # the poller sees the last reload applied
    time.sleep(0.3)  # nginx logs the requests wrk abandoned a moment after it exits
    non2xx, unanswered, nginx_errors = servers.nginx_lines(b, bad0, err0)
    waits = []
    for line in unanswered:
        # '499 upstream=$upstream_status $request_time "$request"'; the
        # upstream status of a retried request is a list ("502, -").
        m = re.match(r'\d+ upstream=.*? (\d+\.\d+) "', line)
        if m:
            waits.append(float(m.group(1)))
    lines = b.log_text_since(offsets)
    served = served_summary(served_entries(tmp, served0, run), events, initial)
    seen = seen_after(events, poller.records, initial)
    out = {
        "tag": tag,
        "reloads": reloads,
        **servers.wrk_figures(res),
        "non2xx": len(non2xx),
        "non2xx_statuses": status_counts(non2xx),
        "non2xx_sample": non2xx[:5],
        "unanswered_at_stop": len(unanswered),
        "unanswered_longest_wait_s": max(waits) if waits else None,
        "socket_errors": servers.wrk_socket_errors(res),
        "wrk_status_errors": res["status_errors"],
        "short_sleeps": res["short_sleeps"],
        "bad_bodies": res["bad_bodies"],
        "min_sleep_ms": res["min_sleep_ms"] if res["min_sleep_ms"] >= 0 else None,
        "nginx_errors": nginx_errors[:5],
        "nginx_error_count": len(nginx_errors),
        "poll": poll_summary(poller.records, (t0, t_end)),
        "events": [{k: v for k, v in ev.items() if k not in ("t_abs", "t_wall")} for ev in events],
        "seen": seen,
        "served": served,
        "log_counts": log_counts(b, lines),
        "log_warnings": procs.group_warnings([l for l in lines if WARN_LOG.search(l)]),
        "manager_alive": b.proc.running(),
    }
    if b.kind == "fpmd":
        # The fpmd log lines of the reloads, for the report.
        out["fpmd_reload_lines"] = [l for l in lines if re.search(
            r"reload|generation|SIGKILL|ERROR|WARN", l)][:60]
    return out


def scenario_1(args, tmp, b, wrk, problems, where):
    r = {}
    b.start_with(INITIAL_MEMORY_LIMIT)
    r["php_at_start"] = b.settle()
    tag = re.sub(r"[^\w.-]", "_", f"{where}-{b.name}")
    if args.warmup:
        wrk.start(b.url(f"/bench/sleep.php?run={tag}-warmup"), args.connections, args.warmup)
        try:
            wres, _ = wrk.finish(args.warmup)
        finally:
            wrk.kill()
        if wres["requests"] == 0:
            raise procs.BenchError(f"{b.name}: not one request answered during the warm-up")
        time.sleep(1.0)
    mems = [f"{int(INITIAL_MEMORY_LIMIT[:-1]) + k + 1}M" for k in range(args.reloads)]
    r["without"] = run_load(args, tmp, b, wrk, 0, [], "without reloads", f"{tag}-without")
    log(f"{where} {b.name}: without reloads: {fmt_run(r['without'])}")
    time.sleep(1.0)
    r["with"] = run_load(args, tmp, b, wrk, args.reloads, mems, "with reloads", f"{tag}-with")
    log(f"{where} {b.name}: with {args.reloads} reloads: {fmt_run(r['with'])}")
    r["php_after"] = b.settle()
    r["memory_limit_written"] = mems
    return r


def fmt_run(x):
    err = sum(x["socket_errors"].values())
    seen = sum(1 for s in x["seen"] if s["seen_after_s"] is not None)
    return (f"{x['requests']} requests, non-2xx {x['non2xx']} {x['non2xx_statuses'] or ''}, "
            f"socket errors {err}, short {x['short_sleeps']}, p50 {fmt_ms(x['p50_ms'])} ms, "
            f"p99 {fmt_ms(x['p99_ms'])} ms, run twice {x['served']['requests_run_twice_or_more']}"
            + (f", reloads seen {seen}/{x['reloads']}" if x['reloads'] else ""))


# ---------------------------------------------------------------------------
# Scenario 2: one 10-second request across a reload
# ---------------------------------------------------------------------------

def inflight_started(tmp, rid, timeout):
    path = os.path.join(tmp, "ran", "inflight.log")
    deadline = mono() + timeout
    while mono() < deadline:
        try:
            with open(path) as f:
                for line in f:
                    p = line.split()
                    if len(p) == 3 and p[0] == rid:
                        return int(p[1]), float(p[2])
        except OSError:
            pass
        time.sleep(0.02)
    return None


def inflight_starts(tmp, rid):
    """How many times PHP started the request `rid` (nginx may retry it)."""
    n = 0
    try:
        with open(os.path.join(tmp, "ran", "inflight.log")) as f:
            n = sum(1 for line in f if line.split()[:1] == [rid])
    except OSError:
        pass
    return n


def parse_inflight(body):
    m = re.match(r"pid (\d+) memory_limit (\S+) slept ([\d.]+) s\n", body)
    filler = "0123456789abcdef" * INFLIGHT_FILLER
    whole = m is not None and body == m.group(0) + filler + "\nEND\n"
    return {
        "pid": int(m.group(1)) if m else None,
        "memory_limit_inside": m.group(2) if m else None,
        "measured_s": float(m.group(3)) if m else None,
        "body_whole": whole,
        "body_bytes": len(body.encode()),
        "body_head": None if m else body[:300],
    }


def scenario_2(args, tmp, b, problems, where):
    r = {}
    b.start_with(INITIAL_MEMORY_LIMIT)
    r["php_at_start"] = b.settle()
    bad0, err0 = procs.file_size(b.nginx_bad), procs.file_size(b.nginx_err)
    offsets = b.log_offsets()
    rid = re.sub(r"[^\w.-]", "_", f"{where}-{b.name}-{int(time.time() * 1000)}")
    req = {}

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=CLIENT_TIMEOUT)
        try:
            req["sent"] = mono()
            conn.request("GET", f"/bench/inflight.php?s={INFLIGHT_S:g}&id={rid}")
            resp = conn.getresponse()
            req["status"] = resp.status
            try:
                req["body"] = resp.read().decode(errors="replace")
            except http.client.IncompleteRead as e:
                req["body"] = e.partial.decode(errors="replace")
                req["error"] = f"incomplete body: {e!r}"
        except (OSError, http.client.HTTPException) as e:
            req["error"] = repr(e)
        finally:
            req["recv"] = mono()
            conn.close()

    new_mem = "256M"
    with Poller(b.port, args.poll_interval) as poller:
        t = threading.Thread(target=worker, daemon=True)
        t.start()
        started = inflight_started(tmp, rid, 10.0)
        if started is None:
            t.join(0.1)
            raise procs.BenchError(f"{b.name}: the {INFLIGHT_S:g} s request did not start PHP within 10 s "
                                   f"({req})")
        time.sleep(args.inflight_reload_after)
        ev = b.reload(new_mem)
        ev["after_request_sent_s"] = round(ev["t_abs"] - req["sent"], 3)
        deadline = mono() + CLIENT_TIMEOUT + 10
        while t.is_alive() and mono() < deadline:
            t.join(0.2)  # short joins: Ctrl-C is handled at once
        time.sleep(1.0)
    pid = started[0]
    time.sleep(1.0)
    r["request_child_alive_2s_after"] = procs.alive(pid)
    r["php_after"] = b.settle()
    time.sleep(0.3)
    non2xx, unanswered, nginx_errors = servers.nginx_lines(b, bad0, err0)
    lines = b.log_text_since(offsets)
    body = req.get("body") or ""
    parsed = parse_inflight(body) if body else {"body_whole": False, "body_bytes": 0,
                                                 "measured_s": None, "pid": None,
                                                 "memory_limit_inside": None, "body_head": ""}
    r.update({
        "status": req.get("status"),
        "request_error": req.get("error"),
        "request_s": round(req["recv"] - req["sent"], 3) if "recv" in req and "sent" in req else None,
        "php_pid": pid,
        "php_starts": inflight_starts(tmp, rid),
        **parsed,
        "reload": {k: v for k, v in ev.items() if k not in ("t_abs", "t_wall")},
        "seen": seen_after([ev], poller.records, INITIAL_MEMORY_LIMIT)[0],
        "poll": poll_summary(poller.records),
        "nginx_non2xx": non2xx[:5],
        "nginx_errors": nginx_errors[:5],
        "nginx_error_count": len(nginx_errors),
        "log_counts": log_counts(b, lines),
        "log_lines": [l for l in lines if b.kind != "fpmd" or re.search(
            r"reload|generation|SIGKILL|ERROR|WARN|exit|died", l)][:40],
        "manager_alive": b.proc.running(),
    })
    log(f"{where} {b.name}: in-flight request: status {r['status']}, whole {r['body_whole']}, "
        f"measured {r['measured_s']} s, took {r['request_s']} s; new memory_limit seen after "
        f"{r['seen']['seen_after_s']} s")
    return r


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------

def fmt_ms(x):
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def fmt_s(x, d=2):
    return "n/a" if x is None else f"{x:.{d}f}"


def both(r, f):
    return f"{f(r['with'])} / {f(r['without'])}"


def f_non2xx(x):
    s = f"{x['non2xx']:,}"
    if x["non2xx"]:
        s += " (" + ", ".join(f"{n}×{k}" for k, n in sorted(x["non2xx_statuses"].items())) + ")"
    return s


def f_sock(x):
    e = x["socket_errors"]
    return "/".join(str(e[k]) for k in ("connect_errors", "read_errors", "write_errors", "timeouts"))


def seen_stats(x):
    vals = [s["seen_after_s"] for s in x["seen"]]
    got = [v for v in vals if v is not None]
    stale = [s["old_value_last_answered_after_s"] for s in x["seen"]
             if s["old_value_last_answered_after_s"] is not None]
    return {
        "seen": len(got), "of": len(vals),
        "median_s": statistics.median(got) if got else None,
        "max_s": max(got) if got else None,
        "stale_max_s": max(stale) if stale else None,
    }


def fpmd_checks_1(r):
    """fpmd's promise in scenario 1; returns what it broke."""
    out = []
    for k in ("with", "without"):
        x = r[k]
        if x["non2xx"]:
            out.append(f"{x['tag']}: {x['non2xx']} non-2xx {x['non2xx_sample'][:2]}")
        if sum(x["socket_errors"].values()):
            out.append(f"{x['tag']}: socket errors {x['socket_errors']}")
        if x["short_sleeps"] or x["bad_bodies"]:
            out.append(f"{x['tag']}: {x['short_sleeps']} cut short, {x['bad_bodies']} bad bodies "
                       f"(shortest sleep {x['min_sleep_ms']} ms)")
        if x["poll"]["statuses"].keys() - {"200"}:
            out.append(f"{x['tag']}: memory_limit polls answered {x['poll']['statuses']}")
        if x["nginx_error_count"]:
            out.append(f"{x['tag']}: nginx logged {x['nginx_error_count']} errors, e.g. {x['nginx_errors'][:2]}")
        if x["served"]["requests_run_twice_or_more"]:
            out.append(f"{x['tag']}: {x['served']['requests_run_twice_or_more']} requests ran twice "
                       f"in PHP, e.g. {x['served']['run_twice_sample'][:2]}")
    w = r["with"]
    sv = served_stats(w)
    if sv["ran"] != sv["of"]:
        out.append(f"with reloads: PHP ran a request with the new memory_limit after only "
                   f"{sv['ran']} of {sv['of']} reloads")
    st = seen_stats(w)
    if st["seen"] != st["of"]:
        out.append(f"with reloads: the new memory_limit was seen after {st['seen']} of {st['of']} reloads")
    bad = [e for e in w["events"] if e.get("rc") not in (None, 0)]
    if bad:
        out.append(f"with reloads: {len(bad)} reload command(s) failed: {bad[0]}")
    return out


def fpmd_checks_2(r):
    out = []
    if r["status"] != 200 or not r["body_whole"]:
        out.append(f"in-flight request: status {r['status']}, body whole {r['body_whole']} "
                   f"({r['body_bytes']} bytes), error {r.get('request_error')}")
    if r["measured_s"] is None or r["measured_s"] < INFLIGHT_S - 0.01:
        out.append(f"in-flight request: usleep({INFLIGHT_S:g} s) measured {r['measured_s']} s")
    if r["seen"]["seen_after_s"] is None:
        out.append("in-flight request: the new memory_limit was never seen")
    elif r["seen"]["seen_after_s"] > INFLIGHT_S - args_inflight_after_guard():
        out.append(f"in-flight request: the new memory_limit was seen only after "
                   f"{r['seen']['seen_after_s']} s (the reload waited for the request?)")
    if r["reload"].get("rc") not in (None, 0):
        out.append(f"in-flight request: the reload command failed: {r['reload']}")
    if r["php_starts"] != 1:
        out.append(f"in-flight request: PHP started it {r['php_starts']} times")
    if r["poll"]["statuses"].keys() - {"200"}:
        out.append(f"in-flight request: the side poller's requests were answered {r['poll']['statuses']}")
    if r["nginx_error_count"]:
        out.append(f"in-flight request: nginx logged errors: {r['nginx_errors'][:2]}")
    return out


def args_inflight_after_guard():
    return 2.0  # the reload is sent ~1 s in: seen later than 8 s means it waited for the request


def served_stats(x):
    per = x["served"]["per_reload"]
    first = [p["first_run_after_s"] for p in per if p["first_run_after_s"] is not None]
    stale = [p["older_started_after_s"] for p in per if p["older_started_after_s"] is not None]
    return {
        "ran": len(first), "of": len(per),
        "median_s": statistics.median(first) if first else None,
        "max_s": max(first) if first else None,
        "stale_max_s": max(stale) if stale else None,
        "stale_n": sum(p["older_started"] for p in per),
    }


def f_unanswered(x):
    s = str(x["unanswered_at_stop"])
    if x.get("unanswered_longest_wait_s") is not None:
        s += f" ({x['unanswered_longest_wait_s']:.1f} s)"
    return s


def f_polls_failed(x):
    st = x["poll"]["statuses"]
    bad = {k: n for k, n in st.items() if k != "200"}
    if not bad:
        return "0"
    return ", ".join(f"{n}×{'timeout/error' if k == 'error' else k}" for k, n in sorted(bad.items()))


def rows_1(r, reloads):
    w = r["with"]
    st = seen_stats(w)
    sv = served_stats(w)
    took = [e["took_s"] for e in w["events"] if e.get("took_s") is not None]
    rows = [
        ("requests answered", both(r, lambda x: f"{x['requests']:,}")),
        ("non-2xx responses (nginx log)", both(r, f_non2xx)),
        ("socket errors connect/read/write/timeout (wrk)", both(r, f_sock)),
        ("2xx whose usleep(50 ms) was cut short (< 49.5 ms)", both(r, lambda x: str(x["short_sleeps"]))),
        ("2xx with a truncated body (no script line)", both(r, lambda x: str(x["bad_bodies"]))),
        ("requests PHP ran twice (nginx retried them)",
         both(r, lambda x: str(x["served"]["requests_run_twice_or_more"]))),
        ("shortest usleep(50 ms) measured (ms)", both(r, lambda x: fmt_s(x["min_sleep_ms"], 1))),
        ("latency p50 (ms)", both(r, lambda x: fmt_ms(x["p50_ms"]))),
        ("latency p99 (ms)", both(r, lambda x: fmt_ms(x["p99_ms"]))),
        ("latency max (ms)", both(r, lambda x: fmt_ms(x["max_ms"]))),
        ("unanswered when wrk stopped (499; longest wait)", both(r, f_unanswered)),
        ("nginx error-log lines (upstream resets, …)", both(r, lambda x: str(x["nginx_error_count"]))),
        ("new memory_limit: first request PHP ran with it, after the reload: median / max (s)",
         f"{fmt_s(sv['median_s'], 3)} / {fmt_s(sv['max_s'], 3)} ({sv['ran']}/{sv['of']} reloads)"),
        ("requests PHP started with an older memory_limit after a reload began (count; up to s)",
         "0" if not sv["stale_n"] else f"{sv['stale_n']}; {fmt_s(sv['stale_max_s'], 3)}"),
        ("new memory_limit: first answer to the side poller, after the reload: median / max (s)",
         f"{fmt_s(st['median_s'])} / {fmt_s(st['max_s'])} ({st['seen']}/{st['of']} reloads)"),
        ("side poller: latency p50 during the wrk run (ms); polls failed",
         both(r, lambda x: f"{fmt_ms(x['poll']['latency_p50_ms'])}; {f_polls_failed(x)}")),
        ("`fpmd reload` until in force: median / max (s)",
         f"{fmt_s(statistics.median(took), 3)} / {fmt_s(max(took), 3)}" if took else "– (a signal, no answer)"),
        ("php processes after the run", f_tree(r["php_after"])),
        ("graceful stop (SIGQUIT, nginx stopped) took (s)", fmt_s(r.get("stop_s"), 1)),
        ("load average (1 min) at start", f"{r['load_average'][0]:.1f}"),
    ]
    return rows


def rows_2(r):
    seen = r["seen"]
    rows = [
        ("status", str(r["status"]) + (f" ({r['request_error']})" if r.get("request_error") else "")),
        ("body whole (first line, 64 KiB, END)", ("yes" if r["body_whole"] else "**no**") +
         f" ({r['body_bytes']:,} bytes)"),
        (f"usleep({INFLIGHT_S:g} s) as the script measured it (s)", fmt_s(r["measured_s"], 3)),
        ("request time seen by the client (s)", fmt_s(r["request_s"], 3)),
        ("reload sent after the request was sent (s)", fmt_s(r["reload"].get("after_request_sent_s"), 2)),
        ("memory_limit inside the request", r["memory_limit_inside"] or "n/a"),
        ("times PHP started this request", str(r["php_starts"]) +
         (" (nginx retried it on a new connection)" if r["php_starts"] > 1 else "")),
        ("new memory_limit first answered to other requests after the reload (s)",
         fmt_s(seen["seen_after_s"], 3)),
        ("side poller's requests meanwhile: answered 200 / failed",
         f"{r['poll']['statuses'].get('200', 0)} / {f_polls_failed(r)}"),
        ("nginx error-log lines (upstream resets, …)", str(r["nginx_error_count"])),
        ("`fpmd reload` until in force (s)", fmt_s(r["reload"].get("took_s"), 3)
         if r["reload"].get("took_s") is not None else "– (a signal, no answer)"),
        ("the request's php process 2 s after the answer", "alive" if r["request_child_alive_2s_after"]
         else "gone (retired)"),
        ("php processes then", f_tree(r["php_after"])),
        ("load average (1 min) at start", f"{r['load_average'][0]:.1f}"),
    ]
    return rows


def table(title, results, backends, rowsf):
    return report.backend_table(title, results, backends, rowsf,
                                failed=lambda r: "failed: " + r["error"][:80])


def ka_name(k):
    return f"keepalive {k}" if k else "no keepalive"


def ka_title(k):
    return (f"nginx upstream keepalive {k} + fastcgi_keep_conn" if k
            else "no upstream keepalive (a connection per request)")


def header(res):
    m, s = res["machine"], res["settings"]
    return report.header(
        f"Reload under load: fpmd vs php-fpm ({res['date']})",
        m,
        f"; {m['php_cgi']}; {m['php_fpm']}; nginx {m['nginx']}; {m['wrk']}; "
        f"{m['fpmd']} ({m['fpmd_git']}, binary built {res['fpmd_binary']['mtime']})",
        f"Setup: one nginx (worker_processes 1) per variant, one server block per backend; static "
        f"pools of {s['children']} children, pm.max_requests 0, each backend alone, started fresh "
        f"per scenario and variant. A reload rewrites the pool's "
        f"php_admin_value[memory_limit] ({INITIAL_MEMORY_LIMIT} at start, +1M per reload): fpmd "
        f"`{s['fpmd_reload']}`, php-fpm SIGUSR2. Scenario 1: wrk -t{s['wrk_threads']} "
        f"-c{s['connections']} -d{s['duration_s']}s on usleep(50 ms) after a {s['warmup_s']} s "
        f"warm-up, once without reloads, then once with {s['reloads']} reloads spaced evenly; "
        f"cells read **with reloads / without**. A side thread asks ini_get('memory_limit') "
        f"through nginx, one request at a time, every {s['poll_interval_s'] * 1000:.0f} ms: "
        f"\"first answered after\" includes that request's wait in the pool's queue (its latency "
        f"is shown; php-fpm with keepalive starves it, see bench/README.md). sleep.php logs "
        f"when it starts, with its memory_limit and the request id wrk-reload.lua gives every "
        f"request: \"first request PHP ran with it\" is from that log, and a request id started "
        f"twice is a request nginx retried on another connection after the first child died. "
        f"Scenario 2: one request of usleep({INFLIGHT_S:g} s), a reload "
        f"{s['inflight_reload_after_s']:g} s after PHP started it, nothing else but the poller.")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="reload under load, fpmd vs php-fpm (see bench/README.md)")
    p.add_argument("--scenarios", default="1,2", help="comma-separated subset of 1,2 (default 1,2)")
    p.add_argument("--keepalive", default="16,0",
                   help="nginx variants: upstream keepalive per variant, 0 = none, no "
                        "fastcgi_keep_conn (default 16,0)")
    p.add_argument("--duration", type=int, default=15, help="seconds per wrk run (default 15)")
    p.add_argument("--warmup", type=int, default=2, help="seconds of wrk before measuring (default 2)")
    p.add_argument("--reloads", type=int, default=10, help="reloads during the run (default 10)")
    p.add_argument("--connections", type=int, default=20, help="wrk connections (default 20)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--children", type=int, default=4, help="static pool size of every backend (default 4)")
    p.add_argument("--poll-interval", type=float, default=0.02,
                   help="pause between memory_limit polls, s (default 0.02)")
    p.add_argument("--inflight-reload-after", type=float, default=1.0,
                   help="scenario 2: reload this long after PHP started the request (default 1 s)")
    p.add_argument("--pct", default="10s", help="process_control_timeout of the second php-fpm "
                                                "(default 10s; 'none' to skip it)")
    p.add_argument("--spawn", choices=["prefork", "exec"],
                   help="write pm.spawn into fpmd's pool (default: not written, fpmd's default)")
    p.add_argument("--fpmd-reload", choices=["command", "sigusr2"], default="command",
                   help="how fpmd is reloaded: `fpmd -c FILE reload` (waits until in force; "
                        "default) or SIGUSR2")
    p.add_argument("--no-php-fpm", action="store_true", help="fpmd only")
    p.add_argument("--out", default=os.path.join(HERE, "results", "reload.json"))
    p.add_argument("--markdown", help="also write the tables to this file")
    servers.common_options(p, wrk=True)
    a = p.parse_args(argv)
    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    for s in a.scenarios:
        if s not in ("1", "2"):
            p.error(f"unknown scenario {s!r} (1, 2)")
    try:
        a.keepalive = [int(k) for k in a.keepalive.split(",") if k.strip()]
    except ValueError:
        p.error("--keepalive takes comma-separated numbers, e.g. 16,0")
    if not a.keepalive or any(k < 0 for k in a.keepalive) or len(set(a.keepalive)) != len(a.keepalive):
        p.error("--keepalive: distinct numbers >= 0")
    if a.duration < 1 or a.reloads < 0 or a.children < 1 or a.connections < 1 or a.warmup < 0:
        p.error("--duration, --children, --connections >= 1; --reloads, --warmup >= 0")
    if a.pct == "none":
        a.pct = None
    if not a.php_fpm:
        a.php_fpm = servers.default_php_fpm()
    return a


def preflight(args):
    servers.preflight(args, "make bench-reload", [(args.nginx, "nginx"), (args.wrk, "wrk")])


def setup(args, tmp):
    www, _ = tree.www_dir(tmp, "bench", [("sleep.php", SLEEP_PHP), ("memlimit.php", MEMLIMIT_PHP),
                                         ("inflight.php", INFLIGHT_PHP)])
    tree.pool_dir(tmp, "ran", 0o755)
    fpmd, binfo = tree.copy_fpmd(args.fpmd, tmp)
    backends = [RFpmd("fpmd", tmp, args.children, fpmd, args.spawn, args.fpmd_reload)]
    if not args.no_php_fpm:
        backends.append(RPhpFpm("php-fpm", tmp, args.children, args.php_fpm, None))
        if args.pct:
            backends.append(RPhpFpm("php-fpm-pct", tmp, args.children, args.php_fpm, args.pct))
    wrk = servers.Wrk(args.wrk, args.threads, os.path.join(HERE, "wrk-reload.lua"))
    return www, backends, wrk, binfo


def run_all(args, run, www, results, fpmd_failures):
    """Every scenario and nginx variant, each backend alone; nginx is
    run.nginx while it runs, for the clean-up."""
    tmp, backends, wrk, problems = run.tmp, run.backends, run.wrk, run.problems
    log(f"temp dir {tmp}")
    for k in args.keepalive:
        where = ka_name(k)
        # One nginx config per variant, in its own directory. nginx is
        # started with each backend and stopped before it, so that no kept
        # connection delays a graceful stop (php-fpm's children wait for
        # nginx to close them, up to process_control_timeout).
        nginx = servers.Nginx(os.path.join(tmp, f"ka{k}"), www, backends, args.nginx, k)
        for sc in args.scenarios:
            key = f"{sc}/{where}"
            results[key] = {}
            for b in backends:
                log(f"scenario {sc}, {where}: {b.name}")
                load = os.getloadavg()
                run.nginx = nginx
                try:
                    nginx.start()
                    r = scenario_1(args, tmp, b, wrk, problems, where) if sc == "1" else \
                        scenario_2(args, tmp, b, problems, where)
                except procs.BenchError as e:
                    r = {"error": str(e)}
                    problems.append(f"scenario {sc}, {where}, {b.name}: {e}")
                    log(f"scenario {sc}, {where}, {b.name}: {e}")
                r["load_average"] = load
                r["manager_alive_at_end"] = b.proc.running() if b.proc else False
                if b.proc and not r["manager_alive_at_end"]:
                    problems.append(f"scenario {sc}, {where}: {b.name} died "
                                    f"(exit status {b.proc.proc.returncode})")
                nginx.stop(problems)
                run.nginx = None
                t0 = mono()
                problems.extend(f"scenario {sc}, {where}: {p}" for p in b.stop())
                r["stop_s"] = round(mono() - t0, 2)
                if b.kind == "fpmd" and "error" not in r:
                    fails = fpmd_checks_1(r) if sc == "1" else fpmd_checks_2(r)
                    r["fpmd_check_failures"] = fails
                    fpmd_failures.extend(f"scenario {sc}, {where}: {f}" for f in fails)
                results[key][b.name] = r


def markdown(res, backends, args):
    parts = [header(res)]
    for k in args.keepalive:
        where = ka_name(k)
        r1 = res["scenarios"].get(f"1/{where}")
        if r1:
            parts.append(table(f"1. wrk -c{args.connections} on usleep(50 ms), {args.duration} s, "
                               f"{args.reloads} reloads, {ka_title(k)} — with reloads / without",
                               r1, backends, lambda r: rows_1(r, args.reloads)))
    for k in args.keepalive:
        where = ka_name(k)
        r2 = res["scenarios"].get(f"2/{where}")
        if r2:
            parts.append(table(f"2. one usleep({INFLIGHT_S:g} s) request across a reload, {ka_title(k)}",
                               r2, backends, rows_2))
    return "\n\n".join(parts)


def main(argv):
    args = parse_args(argv)
    if not tree.ready("bench-reload", preflight, args):
        return 2

    results, fpmd_failures = {}, []
    load_at_start = os.getloadavg()
    binfo = None
    run = tree.Run("fpmd-bench-reload.", log)
    problems = run.problems
    with run:
        www, run.backends, run.wrk, binfo = setup(args, run.tmp)
        run_all(args, run, www, results, fpmd_failures)

    if problems or fpmd_failures:
        run.show_logs()

    results = {k: r for k, r in results.items() if r}
    if results and binfo:
        machine = report.machine_info(args.php_fpm, args.fpmd, args.nginx, args.wrk)
        machine["load_average_at_start"] = load_at_start
        res = report.head(run.date, machine, fpmd_binary=binfo)
        res.update({
            "settings": {
                "children": args.children, "duration_s": args.duration, "warmup_s": args.warmup,
                "reloads": args.reloads, "connections": args.connections, "wrk_threads": args.threads,
                "wrk_timeout_s": 10, "nginx_keepalive_variants": args.keepalive,
                "poll_interval_s": args.poll_interval,
                "inflight_s": INFLIGHT_S, "inflight_reload_after_s": args.inflight_reload_after,
                "initial_memory_limit": INITIAL_MEMORY_LIMIT,
                "fpmd_reload": "fpmd -c FILE reload" if args.fpmd_reload == "command" else "kill -USR2",
                "php_fpm_reload": "kill -USR2 (master)",
                "php_fpm_process_control_timeout": ["0 (default)"] + ([args.pct] if args.pct else []),
                "reload_times": "scenario 1: the k-th of N reloads at duration × (k + 0.5) / N after wrk started",
                "short_sleep": "a 2xx whose usleep(50 ms), measured by the script with microtime, "
                               "took < 49.5 ms (wrk-reload.lua)",
                "non2xx": "exact, from an nginx access log that records only non-2xx; 499 (wrk "
                          "closed the connection at its stop) apart",
                "memory_limit_seen": "a thread GETs memlimit.php through nginx, one at a time, a new "
                                     "connection each; seen_after_s = when the first answer with the "
                                     "new value was received, from the start of the reload (the "
                                     "config rewrite)",
            },
            "backends": [b.describe() for b in run.backends],
            "scenarios": results,
            "problems": problems,
            "fpmd_check_failures": fpmd_failures,
            "ok": not problems and not fpmd_failures,
            "elapsed_s": run.elapsed_s(),
        })
        text = markdown(res, run.backends, args)
        res["markdown"] = text
        report.save(res, args.out, run.interrupted, log)
        report.show(text, args.markdown)
        warn = []
        for key, per in results.items():
            for name, r in per.items():
                for part in ("with", "without"):
                    for g in (r.get(part) or {}).get("log_warnings", [])[:5]:
                        warn.append(f"{key}, {name}, {part} reloads: {g['count']} × {g['message'][:200]}")
        report.print_list("Warnings in the backends' logs (scenario/variant, backend: count × message):",
                          warn)
        report.print_list("FPMD DID NOT KEEP ITS PROMISE:", fpmd_failures)
        report.print_list("PROBLEMS (the run failed):", problems)

    run.remove_tmp(args.keep_tmp)
    return run.exit_status(fpmd_failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
