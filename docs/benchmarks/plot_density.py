#!/usr/bin/env python3
"""Plots a density bench run (benches/density.rs) as an SVG.

Reads the bench's output (its `density-progress:`, `density-summary:` and
`resume-summary:` lines) and draws three panels against the actor count:
creation rate per chunk, RSS of `stasis serve`, and the first request to a
paused actor (client p50 and p99, server restore p50).

Usage: plot_density.py BENCH_OUTPUT [OUT.svg]   (default cluster-density.svg)
Standard library only.
"""

import re
import sys

FIELD = re.compile(r"(\w+)=([0-9.]+)")


def parse(path):
    progress, resume = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("density-progress:"):
                v = dict(FIELD.findall(line))
                progress.append(
                    (int(v["created"]), float(v["chunk_rate"]), float(v["rss_mib"]))
                )
            elif line.startswith("resume-summary:"):
                actors = int(re.search(r"actors=(\d+)", line).group(1))
                client = re.search(r"client_ms n=\d+ p50=([0-9.]+) p99=([0-9.]+)", line)
                server = re.search(r"server_resume_ms n=\d+ p50=([0-9.]+)", line)
                resume.append(
                    (
                        actors,
                        float(client.group(1)),
                        float(client.group(2)),
                        float(server.group(1)) if server else None,
                    )
                )
    return progress, resume


def nice_max(v):
    for exp in range(-3, 7):
        for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8):
            top = step * 10**exp
            if top >= v:
                return top
    return v


def panel(x0, title, xmax, ymax, ylabel, series):
    """series: list of (label, colour, [(x, y)], dashed)."""
    w, h, top = 300, 200, 40
    out = [
        f'<text x="{x0 + w / 2}" y="20" text-anchor="middle" font-size="13" '
        f'font-weight="bold">{title}</text>',
        f'<rect x="{x0}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>',
    ]

    def px(x):
        return x0 + w * x / xmax

    def py(y):
        return top + h - h * y / ymax

    for i in range(6):
        xv = xmax * i / 5
        out.append(
            f'<line x1="{px(xv):.1f}" y1="{top + h}" x2="{px(xv):.1f}" y2="{top + h + 4}" '
            f'stroke="#444"/><text x="{px(xv):.1f}" y="{top + h + 16}" text-anchor="middle" '
            f'font-size="10">{xv / 1000:g}k</text>'
        )
        yv = ymax * i / 5
        out.append(
            f'<line x1="{x0 - 4}" y1="{py(yv):.1f}" x2="{x0 + w}" y2="{py(yv):.1f}" '
            f'stroke="#ddd"/><text x="{x0 - 6}" y="{py(yv) + 3:.1f}" text-anchor="end" '
            f'font-size="10">{yv:g}</text>'
        )
    out.append(
        f'<text x="{x0 + w / 2}" y="{top + h + 32}" text-anchor="middle" '
        f'font-size="11">actors</text>'
    )
    out.append(
        f'<text x="{x0 - 40}" y="{top + h / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 {x0 - 40} {top + h / 2})">{ylabel}</text>'
    )
    for k, (label, colour, points, dashed) in enumerate(series):
        if not points:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>'
        )
        if len(points) < 20:
            out += [
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>'
                for x, y in points
            ]
        ly = top + 14 + 14 * k
        lx = x0 + w - 110
        out.append(
            f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 16}" y2="{ly - 4}" '
            f'stroke="{colour}" stroke-width="1.5"{dash}/><text x="{lx + 20}" y="{ly}" '
            f'font-size="10">{label}</text>'
        )
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    progress, resume = parse(sys.argv[1])
    out_path = sys.argv[2] if len(sys.argv) > 2 else "cluster-density.svg"
    xmax = nice_max(max(p[0] for p in progress))
    rate = [(c, r) for c, r, _ in progress]
    rss = [(c, m) for c, _, m in progress]
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="1140" height="300" '
        'font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    parts += panel(
        60,
        "Creation rate (per chunk)",
        xmax,
        nice_max(max(r for _, r in rate)),
        "actors created / s",
        [("rate", "#1f77b4", rate, False)],
    )
    parts += panel(
        440,
        "RSS of stasis serve",
        xmax,
        nice_max(max(m for _, m in rss)),
        "MiB",
        [("VmRSS", "#2ca02c", rss, False)],
    )
    parts += panel(
        820,
        "First request to a paused actor",
        xmax,
        nice_max(max(p99 for _, _, p99, _ in resume)),
        "ms",
        [
            ("client p50", "#d62728", [(a, p50) for a, p50, _, _ in resume], False),
            ("client p99", "#d62728", [(a, p99) for a, _, p99, _ in resume], True),
            (
                "server restore p50",
                "#9467bd",
                [(a, s) for a, _, _, s in resume if s is not None],
                False,
            ),
        ],
    )
    parts.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
