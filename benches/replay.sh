#!/usr/bin/env bash
# Replay cost of the logical journal (issue 46; BENCHMARKS.md, section 32):
# N acknowledged POSTs to a Rust (`faulty`) and a JavaScript
# (`demos-js/counter.js`) counter after their newest snapshot, then
# `kill -9`, a restart and `actor resume`: the resume restores the snapshot
# and replays the N entries; the time is the worker's own figure (its
# "journal entries replayed" line, `ms=`). Then a trap on the Rust counter
# with N entries after its snapshot: the rollback replays them (the same
# line; measured before the restart). N is below the 1,000 entries after which a snapshot is taken.
#
# Usage: benches/replay.sh [N]   (default 999)
# Needs `cargo build --release`, curl and python3.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demos=${STASIS_DEMOS_DIR:-$root/target/demos}
n=${1:-999}
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start() {
    : >"$tmp/out"
    "$bin" serve --data-dir "$tmp/data" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
        >"$tmp/out" 2>>"$tmp/err" &
    pid=$!
    for _ in $(seq 400); do grep -q '^stasis ready' "$tmp/out" && break; sleep 0.05; done
    local ready
    ready=$(grep '^stasis ready' "$tmp/out")
    ingress=${ready#*ingress=}
    ingress=${ingress%% *}
    admin=http://${ready#*admin=}
}

# POSTs $2 times to actor $1 over one kept-alive connection.
posts() {
    python3 - "$ingress" "$1" "$2" <<'PY'
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port))
for _ in range(int(sys.argv[3])):
    conn.request("POST", "/", headers={"Host": f"{sys.argv[2]}.actors.localhost"})
    r = conn.getresponse(); r.read()
    assert r.status == 200, r.status
PY
}

replayed() { grep "journal entries replayed" "$tmp/err" | grep "actor=$1" | tail -1 | grep -o 'ms=[0-9.]*'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u)"
start
curl -fsS -X PUT --data-binary @"$demos/faulty.wasm" -H 'content-type: application/wasm' \
    "$admin/v1/templates/faulty" >/dev/null
"$bin" template push counter-js "$root/demos-js/counter.js" --admin "$admin" >/dev/null
for a in rust:faulty js:counter-js; do
    curl -fsS -X POST -H 'content-type: application/json' \
        -d "{\"name\": \"${a%%:*}\", \"template\": \"${a#*:}\"}" "$admin/v1/actors" >/dev/null
done
posts rust "$n"
posts js "$n"
curl -s -o /dev/null -X POST -H "Host: rust.actors.localhost" "http://$ingress/trap" || true
echo "trap, rust counter, $n entries: replayed in $(replayed rust)"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
start
for a in rust js; do
    "$bin" actor resume "$a" --admin "$admin" >/dev/null
    echo "restart, $a counter, $n entries: replayed in $(replayed "$a")"
done
