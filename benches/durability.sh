#!/usr/bin/env bash
# Durability levels against each other (issue 29; BENCHMARKS.md, section
# 18): wrk POSTs to `counter` actors through the router, 1 actor and 64
# actors, at --durability request and pause, and nginx returning a static
# string as the ceiling; plus the p50 of one 8 KiB append + fdatasync on
# the same disk, and the journal's group commits (fdatasync calls) per
# request from /metrics.
#
# Usage: benches/durability.sh [DURATION] [CONNECTIONS]   (defaults: 10s 16)
# STASIS_BENCH_TEMPLATE=demos-js/counter.js measures the JavaScript counter
# instead (pushed with `stasis template push`, as a user would).
# Needs `cargo build --release`, wrk, curl, python3 and (for the ceiling)
# nginx (Debian: apt-get install -y wrk nginx-light). Each server runs on a
# temporary data dir under $TMPDIR (default /tmp) and ports the kernel
# picks; everything is stopped at exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demo=${STASIS_BENCH_TEMPLATE:-${STASIS_DEMOS_DIR:-$root/target/demos}/counter.wasm}
duration=${1:-10s}
connections=${2:-16}
threads=${WRK_THREADS:-2}

for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "$bin missing: run cargo build --release" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# One `stasis serve` at level $1 with $2 counter actors; sets $ingress,
# $admin. Per-request logging would be part of the measurement.
start() {
    local level=$1 actors=$2 dir=$tmp/$1-$2
    mkdir -p "$dir"
    STASIS_LOG=warn "$bin" serve --data-dir "$dir/data" --durability "$level" \
        --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 >"$dir/out" 2>"$dir/err" &
    pids+=($!)
    for _ in $(seq 200); do
        grep -q '^stasis ready' "$dir/out" && break
        sleep 0.05
    done
    local ready
    ready=$(grep '^stasis ready' "$dir/out")
    ingress=${ready#*ingress=}
    ingress=${ingress%% *}
    admin=http://${ready#*admin=}
    case $demo in
        *.js) "$bin" template push counter "$demo" --admin "$admin" >/dev/null ;;
        *) curl -fsS -X PUT --data-binary @"$demo" -H 'content-type: application/wasm' \
            "$admin/v1/templates/counter" >/dev/null ;;
    esac
    for i in $(seq 0 $((actors - 1))); do
        curl -fsS -X POST -H 'content-type: application/json' \
            -d "{\"name\": \"c$i\", \"template\": \"counter\"}" "$admin/v1/actors" >/dev/null
    done
    cat >"$dir/post.lua" <<EOF
local n, i = $actors, 0
request = function()
    i = i + 1
    return wrk.format("POST", "/", { Host = "c" .. (i % n) .. ".actors.localhost" })
end
EOF
    script=$dir/post.lua
}

metric() {
    curl -fsS "$admin/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

run() {
    local level=$1 actors=$2
    start "$level" "$actors"
    local syncs0 entries0 bytes0
    syncs0=$(metric stasis_journal_syncs_total)
    entries0=$(metric stasis_journal_entries_total)
    bytes0=$(metric stasis_journal_bytes_total)
    echo "== --durability $level, $actors actor(s): wrk -t$threads -c$connections -d$duration POST"
    wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$script" "http://$ingress/" \
        | grep -E 'Requests/sec|50%|99%|requests in'
    local syncs entries bytes
    syncs=$(metric stasis_journal_syncs_total)
    entries=$(metric stasis_journal_entries_total)
    bytes=$(metric stasis_journal_bytes_total)
    echo "journal: $((entries - entries0)) entries, $((bytes - bytes0)) bytes, $((syncs - syncs0)) fdatasyncs"
    kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u)"
python3 - "$tmp" <<'EOF'
import os, sys, time
path = os.path.join(sys.argv[1], "fdatasync.bin")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
block, times = b"x" * 8192, []
for _ in range(500):
    t = time.perf_counter()
    os.write(fd, block)
    os.fdatasync(fd)
    times.append(time.perf_counter() - t)
times.sort()
print(f"8 KiB append + fdatasync on {sys.argv[1]}: p50 {times[250]*1e3:.3f} ms, p99 {times[495]*1e3:.3f} ms")
EOF
for actors in 1 64; do
    for level in request pause; do
        run "$level" "$actors"
    done
done

if command -v nginx >/dev/null; then
    mkdir -p "$tmp/nginx"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 2;
pid $tmp/nginx/pid;
error_log $tmp/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    server {
        listen 127.0.0.1:$port;
        location / { return 200 "hello from: nginx | preserved memory count: 1\n"; }
    }
}
EOF
    nginx -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" -g 'daemon off;' &
    pids+=($!)
    sleep 0.5
    echo "== nginx returning a static string: wrk -t$threads -c$connections -d$duration POST"
    wrk -t"$threads" -c"$connections" -d"$duration" --latency "http://127.0.0.1:$port/" \
        | grep -E 'Requests/sec|50%|99%|requests in'
fi
