#!/usr/bin/env bash
# Live code upgrade (issue 31; BENCHMARKS.md, section 19): one actor's
# upgrade downtime by each path against a pause + resume of the same actor,
# all in one run of `stasis serve` (embedded, one worker, default
# durability):
#   - carry-over: `counter` and the same module with another env (the same
#     `stasis-layout`), upgraded back and forth;
#   - hand-over: `counter-v2` and the same with another env (no layout
#     section: `stasis_save_state` to `stasis_load_state`), back and forth;
#   - baseline: `actor pause` then `actor resume` of the counter.
# Each is timed at the client (admin API call to answer, over loopback
# HTTP) and, for upgrades, by the answer's `downtime_ms` (the gate closed).
# Prints p50/p99 in ms and the ratios to the baseline.
#
# Usage: benches/upgrade.sh [ROUNDS]   (default 200)
# Needs `cargo build --release` and python3.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demos=${STASIS_DEMOS_DIR:-$root/target/demos}
rounds=${1:-200}
[ -x "$bin" ] || { echo "$bin missing: run cargo build --release" >&2; exit 1; }

tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" serve --data-dir "$tmp/data" --workers 1 --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 >"$tmp/out" 2>"$tmp/log" &
pid=$!
for _ in $(seq 400); do grep -q '^stasis ready' "$tmp/out" 2>/dev/null && break; sleep 0.05; done
admin=$(sed -n 's/.*admin=\([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$admin" ] || { cat "$tmp/log" >&2; exit 1; }

python3 - "$admin" "$demos" "$rounds" <<'PY'
import json, sys, time, urllib.error, urllib.request

admin, demos, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

def call(method, path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://{admin}{path}", data=data, method=method)
    if raw is not None:
        req.add_header("content-type", "application/wasm")
    elif body is not None:
        req.add_header("content-type", "application/json")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req) as answer:
            out = json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: {e.code} {e.read().decode()}")
    return out, (time.perf_counter() - started) * 1000

def push(name, demo, env=None):
    query = f"?env={env}" if env else ""
    with open(f"{demos}/{demo}.wasm", "rb") as f:
        call("PUT", f"/v1/templates/{name}{query}", raw=f.read())

push("carry", "counter"); push("carry", "counter", "V%3D2")
push("hand", "counter-v2"); push("hand", "counter-v2", "V%3D2")
for actor, template in [("c", "carry"), ("h", "hand"), ("p", "carry")]:
    call("POST", "/v1/actors", {"name": actor, "template": template})

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

rows = {}
for actor, label in [("c", "carry_over"), ("h", "hand_over")]:
    wall, gate = [], []
    for i in range(rounds):
        out, ms = call("POST", f"/v1/actors/{actor}/upgrade", {"to_version": 1 + i % 2})
        assert out["path"] == label, out
        wall.append(ms); gate.append(out["downtime_ms"])
    rows[label] = (wall, gate)
wall = []
for _ in range(rounds):
    _, a = call("POST", "/v1/actors/p/pause")
    _, b = call("POST", "/v1/actors/p/resume")
    wall.append(a + b)
rows["pause+resume"] = (wall, None)

base = pct(rows["pause+resume"][0], 50)
print(f"rounds per path: {rounds}")
print(f"{'path':<14} {'wall p50':>9} {'wall p99':>9} {'gate p50':>9} {'gate p99':>9} {'p50 ratio':>10}")
for label, (w, g) in rows.items():
    gp50 = f"{pct(g, 50):9.2f}" if g else f"{'-':>9}"
    gp99 = f"{pct(g, 99):9.2f}" if g else f"{'-':>9}"
    print(f"{label:<14} {pct(w, 50):9.2f} {pct(w, 99):9.2f} {gp50} {gp99} {pct(w, 50) / base:9.2f}x")
PY
