#!/usr/bin/python3
"""Draws the ratios fpmd ÷ php-fpm of a bench result as a PNG.

usage: bench/chart.py [RESULT.json [OUT.png]]
       (defaults: bench/results/latest.json, bench/results/latest.png)

Panels: requests/s (higher is better); the machine's CPU per request
(lower is better); p99 latency and memory (lower is better). One row per
workload and nginx mode. Bars are the medians of the per-round ratios, dots
the ratios of each round. Needs matplotlib (Debian: python3-matplotlib).
Also draws results written before the nginx modes and the CPU per request
(one mode, no CPU panel).
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]


def cases(result):
    """(key prefix, label) per workload and nginx mode; results from before
    the modes: per workload."""
    s = result["settings"]
    modes = s.get("nginx_modes")
    if not modes:
        return [(w, w) for w in s["workloads"]]
    short = {m: "no ka" if not v["keepalive"] else f"ka {v['keepalive']}" for m, v in modes.items()}
    return [(f"{w}.{m}", f"{w} ({short[m]})") for w in s["workloads"] for m in modes]


def panels(result):
    m = result["metrics"]
    cs = cases(result)
    higher = [(f"{k}.rps", f"{label} req/s") for k, label in cs]
    cpu = [(f"{k}.machine_cpu_us_per_req", f"{label}") for k, label in cs]
    lower = [(f"{k}.p99_ms", f"{label} p99") for k, label in cs]
    lower += [(k, label) for k, label in (
        ("pool_pss_idle_mib", "pool PSS idle"),
        ("pool_pss_after_dokuwiki_mib", "pool PSS after DokuWiki"),
        ("manager_rss_mib", "manager RSS"),
    )]
    keep = lambda rows: [(k, label) for k, label in rows if k in m and "ratio_median" in m[k]]
    return [("requests/s: fpmd ÷ php-fpm (higher is better)", keep(higher)),
            ("machine CPU per request: fpmd ÷ php-fpm (lower is better)", keep(cpu)),
            ("p99 latency, memory: fpmd ÷ php-fpm (lower is better)", keep(lower))]


def draw(ax, result, title, rows, variants):
    m = result["metrics"]
    n = len(variants)
    height = 0.8 / n
    values = []
    missing = []
    for vi, v in enumerate(variants):
        color = COLORS[vi % len(COLORS)]
        for ri, (key, _label) in enumerate(rows):
            y = ri + (vi - (n - 1) / 2) * height
            med = m[key]["ratio_median"].get(v)
            if med is None or med <= 0:
                missing.append((y, "0× (no request answered)" if med == 0 else "n/a"))
                continue
            values.append(med)
            # Bars grow from 1× (parity) towards the ratio.
            ax.barh(y, abs(med - 1.0), height=height * 0.9, color=color, alpha=0.75,
                    label=v if ri == 0 else None, left=min(med, 1.0))
            pts = [x for x in m[key]["ratio_per_round"].get(v, []) if x]
            values += pts
            ax.plot(pts, [y] * len(pts), "o", color="black", markersize=3, alpha=0.6)
            label = f"{med:.2f}×" if med >= 0.1 else f"{med:.2g}×"
            ax.text(med, y, f" {label} ", va="center",
                    ha="left" if med >= 1 else "right", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    lo = min(values + [1.0]) / 2.2
    hi = max(values + [1.0]) * 2.2
    ax.set_xlim(lo, hi)
    if hi / lo > 30:
        ticks = (0.001, 0.01, 0.1, 1.0, 10, 100, 1000)
    elif hi / lo > 6:
        ticks = (0.05, 0.1, 0.2, 0.5, 1.0, 2, 5, 10, 20)
    else:
        ticks = (0.25, 0.5, 0.75, 1.0, 1.5, 2, 3, 4)
    ticks = [t for t in ticks if lo <= t <= hi]
    if len(ticks) < 3 and hi / lo > 30:  # 0.15× to 7× has only 1× of the coarse ones
        ticks = [t for t in (0.1, 0.2, 0.5, 1.0, 2, 5, 10) if lo <= t <= hi]
    for y, text in missing:
        ax.text(lo * 1.05, y, text, va="center", fontsize=8, color="darkred")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for _k, label in rows])
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", which="major", alpha=0.3)


def main(argv):
    src = argv[0] if argv else os.path.join(HERE, "results", "latest.json")
    out = argv[1] if len(argv) > 1 else os.path.splitext(src)[0] + ".png"
    with open(src) as f:
        result = json.load(f)
    variants = [b["name"] for b in result["backends"] if b["name"] != result["baseline"]]
    ps = [(t, rows) for t, rows in panels(result) if rows]
    if not ps:
        print(f"{src}: nothing to chart", file=sys.stderr)
        return 1
    tallest = max(len(rows) for _t, rows in ps)
    fig, axes = plt.subplots(1, len(ps), figsize=(6.5 * len(ps), 1.6 + 0.4 * tallest * len(variants)))
    if len(ps) == 1:
        axes = [axes]
    for ax, (title, rows) in zip(axes, ps):
        draw(ax, result, title, rows, variants)
    mach, s = result["machine"], result["settings"]
    head = (f"fpmd vs php-fpm, {result['date'][:16].replace('T', ' ')}: {mach['nproc']} CPUs "
            f"({mach['cpu_model']}), {mach['os']}, {(mach['php_cgi'] or '').split(' (')[0]}, "
            f"nginx {mach['nginx'].replace('nginx/', '')}")
    apps = s.get("app_connections", s.get("dokuwiki_connections"))
    modes = s.get("nginx_modes")
    wp = any(w.startswith("wordpress") for w in s["workloads"])
    sub = (f"static pools of {s['children']}, wrk -c{s['connections']} (DokuWiki"
           f"{', WordPress' if wp else ''} -c{apps}), {s['rounds']} round(s) × {s['duration_s']} s"
           + (f", nginx: {', '.join(v['label'] for v in modes.values())}" if modes else "")
           + "; "
           f"bars: median of per-round ratios, dots: each round")
    if result.get("smoke"):
        sub += " — SMOKE RUN, not a measurement"
    if not result.get("ok", True):
        sub += " — RUN HAD PROBLEMS (see JSON)"
    fig.suptitle(head + "\n" + sub, fontsize=9)
    if len(variants) > 1:
        axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
