#!/usr/bin/env bash
# The counter demo from a fresh clone: builds Stasis and the demo actors,
# starts `stasis serve` in the background, pushes the counter template,
# creates my-counter-1, and plays the reference session over HTTP:
# two increments, a pause to disk, and an increment that resumes it.
# `stasis serve` is left running; the script ends with lines to paste next.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR=${STASIS_DATA_DIR:-./stasis-data}
INGRESS=${STASIS_INGRESS:-127.0.0.1:8000}
ADMIN_ADDR=${STASIS_ADMIN_ADDR:-127.0.0.1:7070}
export STASIS_ADMIN="http://$ADMIN_ADDR"
PORT=${INGRESS##*:}
HOST="my-counter-1.actors.localhost"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

if command -v rustup >/dev/null; then
  rustup target add wasm32-wasip1 >/dev/null 2>&1 || rustup target add wasm32-wasip1
fi
# The etcd client (cluster mode) is generated from etcd's .proto files at
# build time: the build needs protoc (Debian's protobuf-compiler).
if ! command -v protoc >/dev/null; then
  step apt-get install -y protobuf-compiler
  if [ "$(id -u)" -eq 0 ]; then apt=(apt-get); else apt=(sudo apt-get); fi
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq protobuf-compiler >/dev/null ||
    { DEBIAN_FRONTEND=noninteractive "${apt[@]}" update -qq &&
      DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq protobuf-compiler >/dev/null; }
fi
# The C demo actor and the JavaScript engine (the README's JS session)
# need clang and wasi-libc.
./scripts/install-wasm-toolchain.sh
# The same build as scripts/test.sh (one profile, one feature set): right
# after the tests it compiles nothing, and the tests' build of `stasis` is
# the one the demo runs.
step cargo test --release --workspace --all-targets --no-run
cargo test --release --workspace --all-targets --no-run
STASIS=./target/release/stasis

# A data dir this script creates is removed again if serve cannot start
# (a busy port), so a failed run leaves no LOCK or stasis.db behind.
created_data_dir=
[ -e "$DATA_DIR" ] || created_data_dir=1
mkdir -p "$DATA_DIR"
if curl -fsS "http://$ADMIN_ADDR/healthz" >/dev/null 2>&1; then
  echo "stasis serve is already running on $ADMIN_ADDR; using it"
else
  step "$STASIS serve --data-dir $DATA_DIR --listen $INGRESS --admin-listen $ADMIN_ADDR &"
  nohup "$STASIS" serve --data-dir "$DATA_DIR" --listen "$INGRESS" --admin-listen "$ADMIN_ADDR" \
    >"$DATA_DIR/serve.out" 2>"$DATA_DIR/serve.log" &
  pid=$!
  for _ in $(seq 1 100); do
    grep -q '^stasis ready' "$DATA_DIR/serve.out" 2>/dev/null && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "stasis serve exited; its log:" >&2
      cat "$DATA_DIR/serve.log" >&2
      if [ -n "$created_data_dir" ]; then rm -rf "$DATA_DIR"; fi
      exit 1
    fi
    sleep 0.1
  done
  cat "$DATA_DIR/serve.out"
fi

step stasis template push counter target/demos/counter.wasm
"$STASIS" template push counter target/demos/counter.wasm

if "$STASIS" actor get my-counter-1 >/dev/null 2>&1; then
  step "stasis actor delete my-counter-1   # the demo starts my-counter-1 from a count of 0"
  "$STASIS" actor delete my-counter-1
fi
step stasis actor create my-counter-1 --template counter
"$STASIS" actor create my-counter-1 --template counter

for _ in 1 2; do
  step curl -X POST http://$HOST:$PORT
  curl -sS -X POST -H "Host: $HOST" "http://127.0.0.1:$PORT/"
done

step stasis actor pause my-counter-1 -o json
"$STASIS" actor pause my-counter-1 -o json

step "ls -l $DATA_DIR/snapshots/my-counter-1"
ls -l "$DATA_DIR/snapshots/my-counter-1"

step "curl -X POST http://$HOST:$PORT   # resumes the paused actor"
curl -sS -X POST -H "Host: $HOST" "http://127.0.0.1:$PORT/"

step stasis actor get my-counter-1
"$STASIS" actor get my-counter-1

cat <<TXT

stasis serve keeps running (pid $(cat "$DATA_DIR/LOCK" 2>/dev/null || echo '?'); a serve started by this script logs to $DATA_DIR/serve.log).
Try next:
  curl -X POST http://$HOST:$PORT
  $STASIS actor pause my-counter-1
  $STASIS actor list
  curl http://$ADMIN_ADDR/metrics
  kill \$(cat $DATA_DIR/LOCK)         # the running serve's pid: pauses every actor, then exits
(curl resolves *.localhost by itself; other clients: -H "Host: $HOST" against http://127.0.0.1:$PORT)
TXT
