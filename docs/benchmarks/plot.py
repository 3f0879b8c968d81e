#!/usr/bin/env python3
"""Plots and tables for BENCHMARKS.md from criterion's data.

Usage (after `cargo bench --bench snapshot --bench http`):

    python3 docs/benchmarks/plot.py [--criterion target/criterion] \
        [--out docs/benchmarks] [--log bench.log] > tables.md

Reads every `<group>/**/new/benchmark.json` + `estimates.json` that
criterion wrote, draws one SVG per group (median per benchmark as a bar on a
log scale, criterion's 95 % interval of the median as a whisker, the
baselines in grey) into --out, and prints one markdown table per group with
the ratio of each measurement to its baseline from the same run. With --log
(the benches' stdout) it also prints the `snapshot-size:`, `paired-ratio:`
and `latency:` lines as tables. Standard library only.
"""

import argparse
import glob
import html
import json
import math
import os
import re
import sys

# Per group: how a benchmark id splits into (case, function), which
# functions are measurements and which one is the baseline of the ratio.
GROUPS = {
    "capture": {
        "split": "fn/case",
        "measured": ["capture", "capture_into_reused_buffer"],
        "baselines": ["memcpy_touched_dst", "zero_scan"],
        "ratios": ["memcpy_touched_dst"],
        # Capture must both find the non-zero pages and copy them.
        "sum": ["memcpy_touched_dst", "zero_scan"],
    },
    "restore": {
        "split": "fn/case",
        "measured": ["restore"],
        "baselines": ["memcpy_fresh_mmap", "memcpy_fresh_mmap_thp"],
    },
    "persist": {
        "split": "fn/case",
        "measured": ["store_write"],
        "baselines": ["fs_write_fsync"],
    },
    "load": {
        "split": "fn/case",
        "measured": ["map_and_verify"],
        "baselines": ["fs_read_touched_dst"],
    },
    "cold_start": {
        "split": "case/fn",
        "measured": ["restore", "load_verify_restore"],
        "baselines": ["spawn_and_init"],
        "speedup": True,
    },
    "http_resume": {
        "split": "case/fn",
        "measured": [
            "request_after_pause",
            "pause",
            "pause_and_request",
            "write_fsync",
            "snapshot_store_write",
        ],
        "baselines": ["running"],
    },
    "throughput": {
        "split": "fn/case",
        "measured": ["router"],
        "baselines": ["worker_direct"],
        "rate": True,
    },
}

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
BASELINE_GREYS = ["#7f7f7f", "#b0b0b0", "#cfcfcf"]


def fmt_time(ns):
    sign, ns = ("−", -ns) if ns < 0 else ("", ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            value = ns / scale
            break
    else:
        unit, value = "ns", ns
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{sign}{value:.{digits}f} {unit}"


def case_key(case):
    """Sort cases by density, then size (dense-1MiB < dense-16MiB ...)."""
    m = re.match(r"([a-z]+)-(\d+)MiB$", case)
    if m:
        return (0, m.group(1), int(m.group(2)))
    m = re.match(r"(\d+)-in-flight$", case)
    if m:
        return (1, "", int(m.group(1)))
    return (2, case, 0)


def load(criterion):
    data = {}
    for path in glob.glob(os.path.join(criterion, "**", "new", "benchmark.json"), recursive=True):
        with open(path) as f:
            bench = json.load(f)
        with open(os.path.join(os.path.dirname(path), "estimates.json")) as f:
            est = json.load(f)
        group = bench["group_id"]
        if group not in GROUPS:
            continue
        if bench.get("value_str"):
            fn, case = bench["function_id"], bench["value_str"]
        else:
            first, _, second = bench["function_id"].partition("/")
            if GROUPS[group]["split"] == "case/fn":
                case, fn = first, second
            else:
                fn, case = first, second
        median = est["median"]
        data.setdefault(group, {})[(case, fn)] = (
            median["point_estimate"],
            median["confidence_interval"]["lower_bound"],
            median["confidence_interval"]["upper_bound"],
        )
    return data


def table(group, results, plot_dir):
    cfg = GROUPS[group]
    bases = cfg["baselines"]
    cases = sorted({case for case, _ in results}, key=case_key)
    head = ["case", "measured", "median [95 % interval]"]
    head += [f"baseline `{b}`" for b in bases]
    ratios = cfg.get("ratios", bases)
    head += [f"ratio to `{b}`" for b in ratios]
    if cfg.get("sum"):
        head.append("ratio to " + " + ".join(f"`{b}`" for b in cfg["sum"]))
    if cfg.get("speedup"):
        head.append(f"speed-up over `{bases[0]}`")
    if cfg.get("rate"):
        head += ["requests/s", f"requests/s `{bases[0]}`"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(r):
        return f"{fmt_time(r[0])} [{fmt_time(r[1])}, {fmt_time(r[2])}]" if r else "–"

    for case in cases:
        base = [results.get((case, b)) for b in bases]
        for fn in cfg["measured"]:
            r = results.get((case, fn))
            if not r:
                continue
            row = [case, f"`{fn}`", cell(r)]
            row += [cell(b) for b in base]
            for b in ratios:
                b = results.get((case, b))
                row.append(f"{r[0] / b[0]:.2f}×" if b else "–")
            if cfg.get("sum"):
                parts = [results.get((case, b)) for b in cfg["sum"]]
                ok = all(parts)
                row.append(f"{r[0] / sum(p[0] for p in parts):.2f}×" if ok else "–")
            if cfg.get("speedup"):
                row.append(f"{base[0][0] / r[0]:.1f}×" if base[0] else "–")
            if cfg.get("rate"):
                row.append(f"{1e9 / r[0]:,.0f}")
                row.append(f"{1e9 / base[0][0]:,.0f}" if base[0] else "–")
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + f"\n\nPlot: [{group}.svg]({plot_dir}/{group}.svg)\n"


def svg(group, results):
    cfg = GROUPS[group]
    cases = sorted({case for case, _ in results}, key=case_key)
    fns = cfg["baselines"] + cfg["measured"]
    fns = [fn for fn in fns if any((c, fn) in results for c in cases)]
    colors = {}
    measured = [fn for fn in fns if fn in cfg["measured"]]
    baselines = [fn for fn in fns if fn not in cfg["measured"]]
    for i, fn in enumerate(measured):
        colors[fn] = PALETTE[i % len(PALETTE)]
    for i, fn in enumerate(baselines):
        colors[fn] = BASELINE_GREYS[i % len(BASELINE_GREYS)]
    rows = []
    for case in cases:
        for fn in fns:
            if (case, fn) in results:
                rows.append((case, fn, results[(case, fn)]))
        rows.append(None)
    if rows and rows[-1] is None:
        rows.pop()
    lo_all = min(r[2][1] for r in rows if r)
    hi_all = max(r[2][2] for r in rows if r)
    x_min = 10 ** math.floor(math.log10(lo_all))
    x_max = 10 ** math.ceil(math.log10(hi_all))
    left, right, top, row_h, gap_h = 150, 40, 36, 13, 7
    width = 760
    plot_w = width - left - right
    legend_h = 18 * math.ceil(sum(14 + 6.5 * (len(fn) + 11) + 18 for fn in fns) / (width - 150))
    height = top + sum(row_h if r else gap_h for r in rows) + 34 + legend_h

    def x(ns):
        return left + plot_w * (math.log10(ns) - math.log10(x_min)) / (
            math.log10(x_max) - math.log10(x_min)
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="16" font-size="13" font-weight="bold">{html.escape(group)}: '
        f"median per benchmark, log scale; whisker: criterion's 95 % interval</text>",
    ]
    y = top
    plot_bottom = top + sum(row_h if r else gap_h for r in rows)
    decade = x_min
    while decade <= x_max * 1.0001:
        xx = x(decade)
        parts.append(
            f'<line x1="{xx:.1f}" y1="{top - 4}" x2="{xx:.1f}" y2="{plot_bottom}" stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{xx:.1f}" y="{plot_bottom + 13}" text-anchor="middle">{fmt_time(decade)}</text>'
        )
        decade *= 10
    last_case = None
    for row in rows:
        if row is None:
            y += gap_h
            continue
        case, fn, (med, lo, hi) = row
        if case != last_case:
            parts.append(
                f'<text x="{left - 6}" y="{y + row_h - 3}" text-anchor="end">{html.escape(case)}</text>'
            )
            last_case = case
        parts.append(
            f'<rect x="{left}" y="{y + 1}" width="{max(x(med) - left, 1):.1f}" height="{row_h - 2}" '
            f'fill="{colors[fn]}"><title>{html.escape(case)} {html.escape(fn)}: {fmt_time(med)}</title></rect>'
        )
        mid = y + row_h / 2
        parts.append(
            f'<line x1="{x(lo):.1f}" y1="{mid}" x2="{x(hi):.1f}" y2="{mid}" stroke="black"/>'
        )
        parts.append(
            f'<text x="{x(max(hi, med)) + 4:.1f}" y="{y + row_h - 3}" font-size="9">{fmt_time(med)}</text>'
        )
        y += row_h
    # Legend, wrapped to the width (about 6.5 px per character).
    lx, ly = left, plot_bottom + 30
    for fn in fns:
        label = fn + ("" if fn in cfg["measured"] else " (baseline)")
        w = 14 + 6.5 * len(label) + 18
        if lx + w > width and lx > left:
            lx, ly = left, ly + 18
        parts.append(f'<rect x="{lx:.0f}" y="{ly - 9}" width="10" height="10" fill="{colors[fn]}"/>')
        parts.append(f'<text x="{lx + 14:.0f}" y="{ly}">{html.escape(label)}</text>')
        lx += w
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def log_tables(path):
    sizes, latencies, paired = [], [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("snapshot-size:"):
                sizes.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
            elif line.startswith("paired-ratio:"):
                fields = line.split()
                paired.append((fields[1], fields[2], dict(kv.split("=", 1) for kv in fields[3:])))
            elif line.startswith("latency:"):
                fields = line.split()
                latencies.append((fields[1], dict(kv.split("=", 1) for kv in fields[2:])))
    out = []
    rows = [s for s in sizes if "nonzero_pages" in s]
    if rows:
        out.append("| case | memory | non-zero 4 KiB pages | non-zero bytes | page runs | file bytes | overhead |")
        out.append("|---|---|---|---|---|---|---|")
        for s in rows:
            out.append(
                f"| {s['case']} | {int(s['memory_bytes']) / 2**20:.1f} MiB | {s['nonzero_pages']} | "
                f"{s['nonzero_bytes']} | {s['runs']} | {s['file_bytes']} | {s['overhead']} |"
            )
        out.append("")
    rows = [s for s in sizes if "nonzero_pages" not in s]
    if rows:
        out.append("| actor (over HTTP) | memory | snapshot file | pause (server-side) |")
        out.append("|---|---|---|---|")
        for s in rows:
            out.append(
                f"| {s['case']} | {int(s['memory_bytes']) / 2**20:.1f} MiB | {s['file_bytes']} bytes | "
                f"{float(s['pause_ms']):.1f} ms |"
            )
        out.append("")
    if paired:
        out.append("| benchmark | ratio of each pair | pairs | p25 | p50 | p75 |")
        out.append("|---|---|---|---|---|---|")
        for name, what, v in paired:
            out.append(
                f"| {name} | {what} | {v['n']} | {float(v['p25']):.2f}× | "
                f"{float(v['p50']):.2f}× | {float(v['p75']):.2f}× |"
            )
        out.append("")
    if latencies:
        out.append("| benchmark | requests | p50 | p90 | p99 | max |")
        out.append("|---|---|---|---|---|---|")
        for name, v in latencies:
            us = lambda k: fmt_time(float(v[k].rstrip("us")) * 1e3)
            out.append(f"| {name} | {v['n']} | {us('p50')} | {us('p90')} | {us('p99')} | {us('max')} |")
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--criterion", default="target/criterion")
    parser.add_argument("--out", default="docs/benchmarks")
    parser.add_argument("--log", help="the benches' stdout, for the size and latency tables")
    args = parser.parse_args()
    data = load(args.criterion)
    if not data:
        sys.exit(f"no criterion data under {args.criterion}: run cargo bench first")
    os.makedirs(args.out, exist_ok=True)
    for group in GROUPS:
        if group not in data:
            continue
        with open(os.path.join(args.out, f"{group}.svg"), "w") as f:
            f.write(svg(group, data[group]))
        print(f"### {group}\n")
        print(table(group, data[group], args.out))
    if args.log:
        print(log_tables(args.log))


if __name__ == "__main__":
    main()
