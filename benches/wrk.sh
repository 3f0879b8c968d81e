#!/usr/bin/env bash
# Long-run throughput of a running `counter` actor through the router, with
# wrk on loopback (issue 5, item 6; BENCHMARKS.md, "throughput").
#
# Usage: benches/wrk.sh [DURATION] [CONNECTIONS]    (defaults: 10s 16)
# Needs `cargo build --release` (the binary and target/demos) and wrk
# (Debian: apt-get install -y wrk). Starts its own `stasis serve` on a
# temporary data dir and ports chosen by the kernel, and stops it at exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demo=${STASIS_DEMOS_DIR:-$root/target/demos}/counter.wasm
duration=${1:-10s}
connections=${2:-16}
threads=${WRK_THREADS:-2}

command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl not found: apt-get install -y curl" >&2; exit 1; }
[ -x "$bin" ] || { echo "$bin missing: run cargo build --release" >&2; exit 1; }

tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# Per-request logging would be part of the measurement.
STASIS_LOG=warn "$bin" serve --data-dir "$tmp/data" \
    --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 200); do
    grep -q '^stasis ready' "$tmp/out" && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
    sleep 0.05
done
ready=$(grep '^stasis ready' "$tmp/out")
ingress=${ready#*ingress=}
ingress=${ingress%% *}
admin=http://${ready#*admin=}

# The admin API (docs/api.md), with curl.
curl -fsS -X PUT --data-binary @"$demo" -H 'content-type: application/wasm' \
    "$admin/v1/templates/counter" >/dev/null
curl -fsS -X POST -H 'content-type: application/json' \
    -d '{"name": "counter", "template": "counter"}' "$admin/v1/actors" >/dev/null

cat >"$tmp/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Host"] = "counter.actors.localhost"
EOF
echo "stasis serve: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "wrk -t$threads -c$connections -d$duration --latency POST http://$ingress/ (Host: counter.actors.localhost)"
wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$tmp/post.lua" "http://$ingress/"
echo "actor after the run: $(curl -fsS "$admin/v1/actors/counter")"
