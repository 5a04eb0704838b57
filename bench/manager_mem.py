#!/usr/bin/python3
"""The manager's own memory with N idle pools: fpmd's process against
php-fpm's master.

For each N (--pools, default 1,500,2000) and each backend, started fresh and
alone: N ondemand pools as bench/scale.py writes them (www-data, a unix
socket each, pm.max_children 5), and for fpmd `warm_min_available = "100%"`,
so that neither starts a php process before a request. Once every socket
listens and --settle seconds have passed, the manager's PSS and RSS are read
from /proc/PID/smaps_rollup and /proc/PID/status (the manager only, not its
children: there are none). No request is made.

--heaptrack DIR runs fpmd under heaptrack and leaves fpmd-N.zst in DIR
(`heaptrack_print -f DIR/fpmd-500.zst` reads it; the PSS figures of such a
run include heaptrack's own and are marked so). fpmd is then SIGKILLed
after the reading, so that what heaptrack reports as leaked is what fpmd
held while idle, and its peak what the start took.

Prints one line per (N, backend) and a table; exits non-zero when a backend
did not start or did not stop cleanly. Run as root (the pools run as
www-data, php-fpm needs -R). Stdlib only.
"""

import argparse
import glob
import os
import signal
import sys
import time

from lib import procs, servers, tree
from scale import ScaleFpmd, ScalePhpFpm, listening_unix_paths, mib

log = procs.logger("bench-manager-mem")


class Args:
    """What scale.py's backends read of their arguments."""

    def __init__(self, a):
        self.idle_timeout = 10.0
        self.fpmd_reload = "sighup"
        self.spawn = None
        self.fpmd_copy = a.fpmd_copy
        self.php_fpm = a.php_fpm
        self.fpmd = a.fpmd
        # No warm parent: neither manager starts a php process before a
        # request (scale.py writes these into fpmd's [global]).
        self.warm_min_available = "100%"
        self.warm_timeout = None


class MemFpmd(ScaleFpmd):
    """scale.py's fpmd with warm_min_available = "100%" (no warm parent),
    optionally under heaptrack."""

    heaptrack = None

    def argv(self):
        argv = super().argv()
        if self.heaptrack:
            argv = ["heaptrack", "-o", os.path.join(self.heaptrack, f"fpmd-{self.n}")] + argv
        return argv

    def manager_pid(self):
        if not self.heaptrack:
            return self.proc.pid
        # heaptrack's script runs fpmd as its child.
        for p in procs.descendants(self.proc.pid):
            if procs.comm(p) == "fpmd":
                return p
        return None


class MemPhpFpm(ScalePhpFpm):
    def manager_pid(self):
        return self.proc.pid


def measure(b, args):
    b.check_config()
    t0 = time.perf_counter()
    b.launch()
    socks = {b.sock(i) for i in range(b.n)}
    while True:
        if not b.proc.running():
            raise procs.BenchError(f"{b.name} exited with status {b.proc.proc.returncode}; log:\n  "
                                   + "\n  ".join(sum((procs.tail(p) for p in b.logs()), [])))
        if socks <= listening_unix_paths():
            break
        if time.perf_counter() - t0 > args.start_timeout:
            raise procs.BenchError(f"{b.name}: not every socket listens after {args.start_timeout} s")
        time.sleep(0.05)
    started = time.perf_counter() - t0
    time.sleep(args.settle)
    pid = b.manager_pid()
    php = [p for p in procs.descendants(b.proc.pid) if procs.comm(p).startswith("php")
           and p != pid]
    return {
        "start_s": round(started, 3),
        "pss_mib": mib(procs.pss_kib(pid)),
        "rss_mib": mib(procs.status_kib(pid, "VmRSS")),
        # Less sensitive than PSS to other processes mapping the same files.
        "anon_mib": mib(procs.proc_kib(f"/proc/{pid}/smaps_rollup", "Anonymous")),
        "php_children": len(php),
    }


def main(argv):
    p = argparse.ArgumentParser(description="the manager's PSS with N idle ondemand pools, "
                                            "fpmd vs php-fpm's master")
    p.add_argument("--pools", default="1,500,2000")
    p.add_argument("--backends", default="php-fpm,fpmd")
    p.add_argument("--settle", type=float, default=12.0,
                   help="seconds after every socket listens before reading (default 12: "
                        "fpmd trims its heap every 10 s)")
    p.add_argument("--start-timeout", type=float, default=120.0)
    p.add_argument("--heaptrack", metavar="DIR", help="run fpmd under heaptrack, files into DIR")
    servers.common_options(p, nginx=False)
    args = p.parse_args(argv)
    pools = [int(x) for x in args.pools.split(",") if x.strip()]
    kinds = {"php-fpm": MemPhpFpm, "fpmd": MemFpmd}
    backends = [kinds[k.strip()] for k in args.backends.split(",") if k.strip()]
    if not args.php_fpm:
        args.php_fpm = servers.default_php_fpm()
    if not tree.ready("bench-manager-mem", lambda a: servers.preflight(a, "bench/manager_mem.py"),
                      args):
        return 2
    if args.heaptrack:
        os.makedirs(args.heaptrack, exist_ok=True)
        MemFpmd.heaptrack = os.path.abspath(args.heaptrack)
    # Every pool's socket is a file descriptor.
    import resource
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    run = tree.Run("fpmd-bench-manager-mem.", log, strays_one_by_one=True)
    rows = []
    with run:
        www, _ = tree.www_dir(run.tmp, files=[("scale.php", "<?php echo 1;\n")])
        args.fpmd_copy, _ = tree.copy_fpmd(args.fpmd, run.tmp)
        for n in pools:
            rundir = os.path.join(run.tmp, f"n{n}")
            os.makedirs(rundir)
            os.chmod(rundir, 0o755)
            for cls in backends:
                b = cls(cls.kind, rundir, n, "ondemand", Args(args), www)
                try:
                    r = measure(b, args)
                except procs.BenchError as e:
                    r = {"error": str(e)}
                    run.problems.append(f"{n} pools, {b.name}: {e}")
                finally:
                    stop_problems = []
                    if args.heaptrack and cls is MemFpmd and b.proc and b.proc.running():
                        # SIGKILL: what heaptrack then counts as leaked is
                        # what fpmd held while idle (a stop frees it).
                        pid = b.manager_pid()
                        if pid:
                            os.kill(pid, signal.SIGKILL)
                        b.proc.proc.wait(120)
                        b.proc.stop(1)
                    else:
                        _took, stop_problems = b.stop(60)
                run.problems.extend(f"{n} pools: {x}" for x in stop_problems)
                r.update(n=n, backend=b.name)
                log(f"{n} pools, {b.name}: {r}")
                rows.append(r)
    print()
    print("| pools | backend | manager PSS MiB | RSS MiB | anonymous MiB | php processes | sockets up s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ht = " (under heaptrack)" if args.heaptrack and r["backend"] == "fpmd" else ""
        print(f"| {r['n']} | {r['backend']}{ht} | {r.get('pss_mib')} | {r.get('rss_mib')} | {r.get('anon_mib')} | "
              f"{r.get('php_children')} | {r.get('start_s')} |")
    if args.heaptrack:
        for f in sorted(glob.glob(os.path.join(args.heaptrack, "fpmd-*"))):
            print(f"heaptrack: {f}")
    for x in run.problems:
        print(f"PROBLEM: {x}")
    run.remove_tmp(args.keep_tmp)
    return run.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
