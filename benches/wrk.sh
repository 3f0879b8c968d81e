#!/usr/bin/env bash
# Long-run throughput of a running `counter` actor through the router, with
# wrk on loopback (issue 5, item 6; BENCHMARKS.md, "throughput").
#
# Usage: benches/wrk.sh [DURATION] [CONNECTIONS]    (defaults: 10s 16)
# Needs `cargo build --release` (the binary and target/demos) and wrk
# (Debian: apt-get install -y wrk). Starts its own `stasis serve` on a
# temporary data dir and ports chosen by the kernel, and stops it at exit.
set -euo pipefail

duration=${1:-10s}
connections=${2:-16}
threads=${WRK_THREADS:-2}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
need wrk curl

# Per-request logging would be part of the measurement (STASIS_LOG=warn).
serve_start
# The admin API (docs/api.md), with curl.
counter_actor

cat >"$tmp/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Host"] = "counter.actors.localhost"
EOF
echo "stasis serve: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "wrk -t$threads -c$connections -d$duration --latency POST http://$ingress/ (Host: counter.actors.localhost)"
wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$tmp/post.lua" "http://$ingress/"
echo "actor after the run: $(curl -fsS "$admin/v1/actors/counter")"
