#!/usr/bin/env bash
# Cluster mode's shipped journal (issue 29, item 6; BENCHMARKS.md, section
# 18): wrk POSTs to `counter` actors through a replica, 1 actor and 64
# actors, at --durability store (each answer waits for the journal segment
# holding its state to be in the object store), at a checkpoint per
# request (`--durability pause --checkpoint-every 1`: each answer waits for
# its own delta snapshot and pointer in the store, what a cluster worker
# did at `request` before the shipped journal) and at pause (durable at
# pause only), on one etcd member, a real s3s-fs, one replica and one worker,
# all on loopback. Prints requests/s, latency and, from the worker's log at
# its shutdown, the segment PUTs (group commits into the store) against
# the entries they carried: PUTs per second follow the store's latency,
# not the request rate.
#
# Usage: benches/shipping.sh [DURATION] [CONNECTIONS]   (defaults: 10s 16)
# Needs `cargo build --release`, wrk, curl, python3, etcd and s3s-fs
# (scripts/install-test-deps.sh installs the last two).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demo=${STASIS_DEMOS_DIR:-$root/target/demos}/counter.wasm
duration=${1:-10s}
connections=${2:-16}
threads=${WRK_THREADS:-2}
s3s=${S3S_FS:-$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")}

for tool in wrk curl python3 etcd "$s3s"; do
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

port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits until file $1 has a line matching $2 (at most 20 s).
wait_for() {
    for _ in $(seq 400); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "timed out waiting for '$2' in $1:" >&2
    cat "$1" >&2
    exit 1
}

# One cluster at level $1 (`every1`: pause with a checkpoint per request)
# with $2 counter actors; sets $ingress, $admin,
# $worker_pid and $worker_log.
start() {
    local level=$1 actors=$2 dir=$tmp/$1-$2
    mkdir -p "$dir/s3/stasis"
    local client peer s3port
    client=$(port); peer=$(port); s3port=$(port)
    etcd --name=m0 --data-dir="$dir/etcd" \
        --listen-client-urls="http://127.0.0.1:$client" \
        --advertise-client-urls="http://127.0.0.1:$client" \
        --listen-peer-urls="http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
        --initial-cluster="m0=http://127.0.0.1:$peer" \
        --log-level=warn >"$dir/etcd.log" 2>&1 &
    pids+=($!)
    "$s3s" --host 127.0.0.1 --port "$s3port" --access-key bench --secret-key bench-secret \
        "$dir/s3" >"$dir/s3.log" 2>&1 &
    pids+=($!)
    export AWS_ENDPOINT_URL=http://127.0.0.1:$s3port AWS_ACCESS_KEY_ID=bench \
        AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
    local cluster=(--directory "etcd://127.0.0.1:$client/stasis" --snapshot-store s3://stasis/bench)
    for _ in $(seq 200); do
        curl -fsS "http://127.0.0.1:$client/health" >/dev/null 2>&1 && break
        sleep 0.05
    done
    local flags=(--durability "$level")
    [ "$level" = every1 ] && flags=(--durability pause --checkpoint-every 1)
    STASIS_LOG=warn "$bin" serve --workers 0 --data-dir "$dir/replica" "${cluster[@]}" \
        "${flags[@]}" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
        >"$dir/replica.out" 2>"$dir/replica.err" &
    pids+=($!)
    wait_for "$dir/replica.out" '^stasis ready'
    local ready
    ready=$(grep '^stasis ready' "$dir/replica.out")
    ingress=${ready#*ingress=}
    ingress=${ingress%% *}
    admin=http://${ready#*admin=}
    worker_log=$dir/worker.err
    STASIS_LOG=info "$bin" worker run --name w1 --listen 127.0.0.1:0 --data-dir "$dir/worker" \
        "${cluster[@]}" >"$dir/worker.out" 2>"$worker_log" &
    worker_pid=$!
    pids+=($worker_pid)
    wait_for "$dir/worker.out" 'stasis worker ready'
    for _ in $(seq 200); do
        curl -fsS "$admin/v1/workers" | grep -q '"ready"' && break
        sleep 0.05
    done
    curl -fsS -X PUT --data-binary @"$demo" -H 'content-type: application/wasm' \
        "$admin/v1/templates/counter" >/dev/null
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

stop_all() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    pids=()
}

run() {
    local level=$1 actors=$2
    start "$level" "$actors"
    echo "== --durability $level, $actors actor(s): wrk -t$threads -c$connections -d$duration POST"
    wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$script" "http://$ingress/" \
        | grep -E 'Requests/sec|50%|99%|requests in|Non-2xx'
    # The worker logs its shipped journal's counters when it stops.
    kill -TERM "$worker_pid"
    wait "$worker_pid" 2>/dev/null || true
    grep 'shipped journal: segments put' "$worker_log" | sed 's/^.*INFO[^:]*: /journal: /' || true
    stop_all
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u)"
for actors in 1 64; do
    for level in store every1 pause; do
        run "$level" "$actors"
    done
done
