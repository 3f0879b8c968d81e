#!/usr/bin/env bash
# Throughput of a running `counter` actor through the ingress over TLS
# (`--tls-cert`/`--tls-key`) against plain HTTP, same run, same server
# flags otherwise (issue 34; BENCHMARKS.md, "TLS on the ingress").
#
# Usage: benches/tls.sh [DURATION] [CONNECTIONS]    (defaults: 10s 16)
# Needs `cargo build --release`, wrk (built with TLS, as Debian's is),
# curl and openssl. Each run starts its own `stasis serve` on a temporary
# data dir and ports chosen by the kernel. wrk keeps its connections open,
# so this measures requests over established TLS sessions; the handshake
# cost shows in the `--new-connections` runs (a connection per request,
# `Connection: close`).
set -euo pipefail

duration=${1:-10s}
connections=${2:-16}
threads=${WRK_THREADS:-2}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
need wrk curl openssl

# A self-signed wildcard certificate for the actors' names.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
    -days 1 -subj /CN=bench -addext 'subjectAltName=DNS:*.actors.localhost' 2>/dev/null

# run LABEL SCHEME [serve flags...]: one server, one actor, one wrk run.
run() {
    local label=$1 scheme=$2
    shift 2
    serve_start "$@"
    counter_actor
    cat >"$tmp/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Host"] = "counter.actors.localhost"
LUA
    if [ -n "${CLOSE:-}" ]; then
        echo 'wrk.headers["Connection"] = "close"' >>"$tmp/post.lua"
    fi
    echo "== $label: wrk -t$threads -c$connections -d$duration --latency POST $scheme://$ingress/${CLOSE:+ (Connection: close)}"
    wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$tmp/post.lua" "$scheme://$ingress/" \
        | grep -E 'Requests/sec|^ +50%|^ +99%|requests in|Non-2xx|errors'
    serve_stop
}

echo "stasis serve: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
tls=(--tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem")
run plain http
run tls https "${tls[@]}"
run plain-again http
CLOSE=1 run "plain, --new-connections" http
CLOSE=1 run "tls, --new-connections" https "${tls[@]}"
