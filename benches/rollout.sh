#!/usr/bin/env bash
# Rollout rate (issue 31, item 3; BENCHMARKS.md, section 19): one
# `stasis serve --workers 2` with PAUSED paused and RUNNING running
# `counter` actors; version 2 of the template (the same module with other
# bytes: both declare one `stasis-layout`, so they are carry-over
# compatible) is rolled out to all of them with `--eager`, then rolled
# back. Prints actors upgraded per second of each, from the CLI's wait
# (start to finished), and checks that every actor counts on.
#
# Usage: benches/rollout.sh [PAUSED] [RUNNING]   (defaults: 1000 100)
# Needs `cargo build --release`, curl and python3.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demo=${STASIS_DEMOS_DIR:-$root/target/demos}/counter.wasm
paused=${1:-1000}
running=${2:-100}
total=$((paused + running))

for tool in curl python3; do
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

# The counter demo with a custom section `stasis-layout` = "bench", and a
# second custom section naming the version (so the bytes differ).
python3 - "$demo" "$tmp" <<'PY'
import sys
def leb(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
def custom(name, payload):
    body = leb(len(name)) + name + payload
    return b"\x00" + leb(len(body)) + body
wasm = open(sys.argv[1], "rb").read()
for v in (1, 2):
    extra = custom(b"stasis-layout", b"bench") + custom(b"bench-version", str(v).encode())
    open(f"{sys.argv[2]}/v{v}.wasm", "wb").write(wasm + extra)
PY

STASIS_LOG=warn "$bin" serve --data-dir "$tmp/data" --workers 2 \
    --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
pids+=($!)
for _ in $(seq 200); do
    grep -q '^stasis ready' "$tmp/out" && break
    sleep 0.05
done
ready=$(grep '^stasis ready' "$tmp/out")
ingress=${ready#*ingress=}
ingress=${ingress%% *}
admin=http://${ready#*admin=}
export STASIS_ADMIN=$admin

"$bin" template push counter "$tmp/v1.wasm" >/dev/null
echo "creating $total actors ($paused to pause)"
seq 0 $((total - 1)) | xargs -P 8 -I{} curl -fsS -o /dev/null -X POST \
    -H 'content-type: application/json' -d '{"name": "c{}", "template": "counter"}' \
    "$admin/v1/actors"
seq 0 $((total - 1)) | xargs -P 8 -I{} curl -fsS -o /dev/null -X POST \
    -H 'host: c{}.actors.localhost' "http://$ingress/"
seq 0 $((paused - 1)) | xargs -P 8 -I{} curl -fsS -o /dev/null -X POST \
    "$admin/v1/actors/c{}/pause"
"$bin" template push counter "$tmp/v2.wasm" >/dev/null

timed() {
    local start end
    start=$(date +%s.%N)
    "$@" -o json >"$tmp/status.json"
    end=$(date +%s.%N)
    python3 - "$tmp/status.json" "$start" "$end" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
print(f"  {s['kind']}: state {s['state']}, {s['upgraded']}/{s['total']} moved, "
      f"{s['failed']} failed, {secs:.2f} s, {s['upgraded'] / secs:.0f} actors/s")
PY
}

echo "== rollout to version 2 --eager: $paused paused + $running running"
timed "$bin" template rollout counter --to-version 2 --eager
echo "== rollback to version 1"
timed "$bin" template rollback counter
# Every actor counts on: 2 requests each now.
bad=$(seq 0 $((total - 1)) | xargs -P 8 -I{} curl -fsS -X POST \
    -H 'host: c{}.actors.localhost' "http://$ingress/" | grep -cv 'count: 2' || true)
echo "actors that lost their count: $bad"
