"""What every result says: the machine, the command, the JSON file, and the
lists and figures printed with the tables."""

import json
import os
import platform
import re
import sys

from . import REPO, procs


# ---------------------------------------------------------------------------
# Machine description
# ---------------------------------------------------------------------------

def first_line(argv):
    try:
        r = procs.run(argv)
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else None
    except OSError:
        return None


def machine_info(php_fpm, fpmd, nginx=None, wrk=None):
    """The machine and the versions of what runs on it (nginx and wrk: only
    when the bench uses them)."""
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
    mem = procs.proc_kib("/proc/meminfo", "MemTotal")
    out = {
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "memory_mib": None if mem is None else mem // 1024,
        "kernel": platform.release(),
        "os": pretty,
        "debian_version": debian,
        "php_cgi": first_line(["php-cgi", "-v"]),
        "php_fpm": first_line([php_fpm, "-v"]),
    }
    if nginx is not None:
        out["nginx"] = (first_line([nginx, "-v"]) or "").replace("nginx version: ", "")
    if wrk is not None:
        out["wrk"] = first_line([wrk, "-v"])
    # php-fpm's -v text, the SAPI named "fpm-fcgi, fpmd VERSION"
    # (or "fpmd VERSION" alone): fpmd's part.
    line = first_line([fpmd, "--version"]) or ""
    m = re.search(r"fpmd [^\s),]+", line)
    out["fpmd"] = m.group(0) if m else line or None
    out["fpmd_git"] = first_line(["git", "-C", REPO, "describe", "--always", "--dirty"])
    out["python"] = platform.python_version()
    out["load_average_at_start"] = os.getloadavg()
    return out


def header(title, m, versions, setup):
    """A result's markdown header: `## title`, the sentence on the machine
    `m` (machine_info), with `versions` (those of what the bench runs, as it
    says them), and the sentences on the set-up."""
    load = ", ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    return "\n".join([
        f"## {title}",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_mib']} MiB, Linux {m['kernel']}, "
        f"{m['os']}{versions}. Load average at start: {load}.",
        "",
        setup,
        "",
    ])


# ---------------------------------------------------------------------------
# The result file
# ---------------------------------------------------------------------------

def head(date, machine, smoke=None, fpmd_binary=None):
    """The first keys of every result: schema, date, the command line, the
    smoke flag (benches that have --smoke), the machine, the fpmd binary
    (benches that copy it)."""
    res = {"schema": 1, "date": date,
           "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])}
    if smoke is not None:
        res["smoke"] = smoke
    res["machine"] = machine
    if fpmd_binary is not None:
        res["fpmd_binary"] = fpmd_binary
    return res


def write_json(path, res):
    """`res` as indented JSON into `path` (its directory made if missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


def save(res, path, interrupted, log):
    """Writes `res` to `path`, unless the run was interrupted (half a run
    would replace a whole one); returns whether it wrote."""
    if interrupted:
        log(f"interrupted: {path} not written")
        return False
    write_json(path, res)
    log(f"wrote {path}")
    return True


def show(text, markdown):
    """The tables on stdout, and into the file `markdown` if given."""
    if markdown:
        with open(markdown, "w") as f:
            f.write(text + "\n")
    print(text)
    print()


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


def backend_table(title, results, backends, rows, failed=lambda r: "failed"):
    """A markdown table under `### title`: a column for each backend with a
    result in `results` ({name: result}), a row for each (label, cell) that
    rows(result) returns; a result with an "error" gets failed(result) in
    every cell."""
    cols = [b for b in backends if b.name in results]
    lines = [f"### {title}", "",
             "| | " + " | ".join(b.label for b in cols) + " |",
             "|---|" + "---|" * len(cols)]
    per = [rows(results[b.name]) if "error" not in results[b.name] else None for b in cols]
    labels = next(([lab for lab, _ in p] for p in per if p), [])
    for i, lab in enumerate(labels):
        cells = [(p[i][1] if p else failed(results[c.name])) for p, c in zip(per, cols)]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------

def pct(xs, p):
    """Nearest-rank percentile."""
    xs = sorted(xs)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, int(-(-p * len(xs) // 100)) - 1))
    return xs[k]


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


def f_tree(t):
    """A Backend.php_tree() as a table cell."""
    if t is None:
        return "n/a"
    s = str(t["php"])
    if t.get("prefork_parents"):
        s += f" ({t['prefork_parents']} parent + {t['php'] - t['prefork_parents']})"
    if t.get("zombies"):
        s += f", **{t['zombies']} zombie(s)**"
    return s
