#!/usr/bin/env bash
# Throughput of a `counter` actor on a remote worker (`stasis worker run
# --join`) through the ingress, the control plane reaching the worker over
# plain HTTP against over mutual TLS (`--internal-ca`,
# `--internal-tls-cert`, `--internal-tls-key` on both; issue 34;
# BENCHMARKS.md, "Mutual TLS to a remote worker"). Same run, same flags
# otherwise; the client side is plain HTTP/1.1 in both.
#
# Usage: benches/mtls.sh [DURATION] [CONNECTIONS]    (defaults: 10s 16)
# Needs `cargo build --release`, wrk and curl. Each run starts its own
# `stasis serve --workers 0` and one worker on temporary data dirs and
# ports chosen by the kernel.
set -euo pipefail

duration=${1:-10s}
connections=${2:-16}
threads=${WRK_THREADS:-2}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
need wrk curl

"$bin" ca create --dir "$tmp/certs" >/dev/null
"$bin" ca issue --dir "$tmp/certs" --name cp --role control >/dev/null
"$bin" ca issue --dir "$tmp/certs" --name w1 >/dev/null

# internal NAME: the mutual TLS flags of process NAME (cp or w1).
internal() {
    echo --internal-ca "$tmp/certs/ca.pem" --internal-tls-cert "$tmp/certs/$1.pem" \
        --internal-tls-key "$tmp/certs/$1-key.pem"
}

# run LABEL plain|mtls
run() {
    local label=$1 cp_flags=() w1_flags=()
    if [ "$2" = mtls ]; then
        read -r -a cp_flags <<<"$(internal cp)"
        read -r -a w1_flags <<<"$(internal w1)"
    fi
    serve_start --workers 0 "${cp_flags[@]}"
    worker_start w1 "${w1_flags[@]}"
    counter_actor
    curl -fsS "$admin/v1/actors/counter" | grep -q '"worker": *"w1"' \
        || { echo "the actor is not on the remote worker" >&2; exit 1; }
    cat >"$tmp/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Host"] = "counter.actors.localhost"
LUA
    echo "== $label: wrk -t$threads -c$connections -d$duration --latency POST http://$ingress/"
    wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$tmp/post.lua" "http://$ingress/" \
        | grep -E 'Requests/sec|^ +50%|^ +99%|requests in|Non-2xx|errors'
    worker_stop
    serve_stop
}

echo "stasis serve + worker: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
run plain plain
run "mutual TLS" mtls
run plain-again plain
run "mutual TLS again" mtls
