#!/usr/bin/env bash
# Live code upgrade, after ./scripts/demo.sh (run first if no `stasis serve`
# answers): pushes the counter's next version, `counter-v2` (one more field,
# the count at which the actor was upgraded), under the template name
# `counter`; upgrades my-counter-1 to it by state hand-over (its count
# kept, requests held for the barrier, not refused); then asks for the
# way back by hand-over, which version 1 refuses (it reads its own state
# schema only), and shows the actor unharmed on version 2. `stasis serve` is left running.
set -euo pipefail
cd "$(dirname "$0")/.."

INGRESS=${STASIS_INGRESS:-127.0.0.1:8000}
ADMIN_ADDR=${STASIS_ADMIN_ADDR:-127.0.0.1:7070}
export STASIS_ADMIN="http://$ADMIN_ADDR"
PORT=${INGRESS##*:}
HOST="my-counter-1.actors.localhost"
STASIS=./target/release/stasis

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

if ! curl -fsS "http://$ADMIN_ADDR/healthz" >/dev/null 2>&1 || ! [ -x "$STASIS" ] ||
  ! "$STASIS" actor get my-counter-1 >/dev/null 2>&1; then
  ./scripts/demo.sh
fi

step curl -X POST http://$HOST:$PORT
curl -sS -X POST -H "Host: $HOST" "http://127.0.0.1:$PORT/"

step stasis template push counter target/demos/counter-v2.wasm
"$STASIS" template push counter target/demos/counter-v2.wasm

step stasis actor upgrade my-counter-1
"$STASIS" actor upgrade my-counter-1

step curl -X POST http://$HOST:$PORT
curl -sS -X POST -H "Host: $HOST" "http://127.0.0.1:$PORT/"

step "stasis actor upgrade my-counter-1 --to-version 1   # refused: version 1 reads state schema 1 only"
"$STASIS" actor upgrade my-counter-1 --to-version 1 || true

step "curl -X POST http://$HOST:$PORT   # still version 2, nothing lost"
curl -sS -X POST -H "Host: $HOST" "http://127.0.0.1:$PORT/"

step stasis template get counter
"$STASIS" template get counter
