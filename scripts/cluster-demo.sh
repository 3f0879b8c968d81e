#!/usr/bin/env bash
# The counter demo in cluster mode, all on loopback: builds Stasis if needed,
# starts 3 etcd members (the directory), s3s-fs (an S3-compatible snapshot
# store), 2 `stasis serve` replicas with no workers of their own and 3
# `stasis worker run` workers; pushes the counter template and creates
# my-counter-1 through replica 1, sends requests through both replicas'
# ingress, pauses and resumes the actor through replica 2, then kills the
# leader replica with kill -9 and shows the other one carry on with the
# same count. Everything it started is stopped when it exits; the logs stay
# in a temp folder only if something failed.
# Needs etcd and s3s-fs: ./scripts/install-test-deps.sh installs both.
# Ports: STASIS_DEMO_PORT_BASE (default 27000) + 1..53, all on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${STASIS_DEMO_PORT_BASE:-27000}
ETCD_CLIENT=("$((BASE + 1))" "$((BASE + 2))" "$((BASE + 3))")
ETCD_PEER=("$((BASE + 11))" "$((BASE + 12))" "$((BASE + 13))")
S3_PORT=$((BASE + 20))
INGRESS=("$((BASE + 31))" "$((BASE + 32))")
ADMIN=("$((BASE + 41))" "$((BASE + 42))")
WORKER=("$((BASE + 51))" "$((BASE + 52))" "$((BASE + 53))")
LEASE_TTL=3s
PREFIX=/stasis-demo
BUCKET=stasis-demo
ACTOR=my-counter-1
HOST="$ACTOR.actors.localhost"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
note() { printf '\033[2m# %s\033[0m\n' "$*"; }
die() {
  echo "cluster-demo: $*" >&2
  exit 1
}

# --- what it needs ----------------------------------------------------------

ETCD=$(command -v etcd || true)
S3S_FS=$(command -v s3s-fs || true)
if [ -z "$S3S_FS" ] && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs" ]; then
  S3S_FS="${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs"
fi
[ -n "$ETCD" ] || die "etcd is not installed; run ./scripts/install-test-deps.sh"
[ -n "$S3S_FS" ] || die "s3s-fs is not installed; run ./scripts/install-test-deps.sh"
command -v curl >/dev/null || die "curl is not installed"

for port in "${ETCD_CLIENT[@]}" "${ETCD_PEER[@]}" "$S3_PORT" "${INGRESS[@]}" "${ADMIN[@]}" "${WORKER[@]}"; do
  if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port on 127.0.0.1 is in use; set STASIS_DEMO_PORT_BASE to another base than $BASE"
  fi
done

if command -v rustup >/dev/null; then
  rustup target add wasm32-wasip1 >/dev/null 2>&1 || rustup target add wasm32-wasip1
fi
# The same build as scripts/test.sh and scripts/demo.sh (one profile, one
# feature set), so none of them recompiles what another built.
step cargo test --release --workspace --all-targets --no-run
cargo test --release --workspace --all-targets --no-run
STASIS=./target/release/stasis

# --- processes, and stopping them -------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/stasis-cluster-demo.XXXXXX")
declare -A PID=()  # role -> pid, for every process this script started
STASIS_ROLES=()    # replicas and workers: stopped first, all at once
STORE_ROLES=()     # s3s-fs and etcd: stopped after them

# stop ROLE...: SIGTERM to each, up to 5 s for all to exit, then SIGKILL.
stop() {
  local role pid pids=()
  for role in "$@"; do
    pid=${PID[$role]:-}
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  for _ in $(seq 1 50); do
    local alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ "$alive" -eq 1 ] || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop "${STASIS_ROLES[@]}"
  stop "${STORE_ROLES[@]}"
  if [ "$status" -eq 0 ]; then
    rm -rf "$WORK"
  else
    echo >&2
    echo "cluster-demo failed (exit $status); every process's log is kept in $WORK" >&2
    for log in "$WORK"/replica-*.log "$WORK"/w-*.log; do
      [ -s "$log" ] || continue
      echo "--- $(basename "$log") (last lines)" >&2
      tail -n 15 "$log" >&2
    done
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start ROLE COMMAND...: runs COMMAND in the background, stdout to
# $WORK/ROLE.out, stderr to $WORK/ROLE.log.
start() {
  local role=$1
  shift
  "$@" >"$WORK/$role.out" 2>"$WORK/$role.log" &
  PID[$role]=$!
  case $role in
    etcd-* | s3s-fs) STORE_ROLES+=("$role") ;;
    *) STASIS_ROLES+=("$role") ;;
  esac
}

# wait_until ROLE SECONDS COMMAND...: polls COMMAND every 0.1 s while ROLE's
# process lives.
wait_until() {
  local role=$1 seconds=$2
  shift 2
  for _ in $(seq 1 $((seconds * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "${PID[$role]}" 2>/dev/null || die "$role exited; its log: $WORK/$role.log"
    sleep 0.1
  done
  die "$role not ready after ${seconds}s; its log: $WORK/$role.log"
}

# --- etcd: the directory ----------------------------------------------------

CLUSTER=""
for i in 0 1 2; do
  CLUSTER+="${CLUSTER:+,}etcd-$((i + 1))=http://127.0.0.1:${ETCD_PEER[i]}"
done
ENDPOINTS=""
for i in 0 1 2; do
  ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:${ETCD_CLIENT[i]}"
done
DIRECTORY="etcd://$ENDPOINTS$PREFIX"

step "etcd x 3 (clients on ${ETCD_CLIENT[*]}, peers on ${ETCD_PEER[*]}) &"
for i in 0 1 2; do
  name="etcd-$((i + 1))"
  start "$name" "$ETCD" --name "$name" --data-dir "$WORK/$name" --logger zap --log-level warn \
    --listen-client-urls "http://127.0.0.1:${ETCD_CLIENT[i]}" \
    --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT[i]}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER[i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER[i]}" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new \
    --initial-cluster-token stasis-demo
done
etcd_healthy() { curl -fsS "http://127.0.0.1:$1/health" | grep -q '"health":"true"'; }
for i in 0 1 2; do
  wait_until "etcd-$((i + 1))" 30 etcd_healthy "${ETCD_CLIENT[i]}"
done
echo "etcd: 3 members healthy"

# etcd_kvs: every key under the prefix with its value and create revision,
# through etcd's JSON gateway (keys and values are base64).
etcd_kvs() {
  local from to
  from=$(printf '%s/' "$PREFIX" | base64 -w0)
  to=$(printf '%s0' "$PREFIX" | base64 -w0) # '0' follows '/': the prefix's end
  for port in "${ETCD_CLIENT[@]}"; do
    curl -fsS -X POST "http://127.0.0.1:$port/v3/kv/range" 2>/dev/null \
      -d "{\"key\":\"$from\",\"range_end\":\"$to\",\"limit\":1000}" && return 0
  done
  return 1
}
show_etcd_keys() {
  if command -v jq >/dev/null; then
    etcd_kvs | jq -r '.kvs // [] | .[] | (.key | @base64d) + "  " + ((.value // "") | @base64d | .[0:100])'
  else
    note "(jq is not installed: key listing skipped)"
  fi
}

# --- s3s-fs: the snapshot store ---------------------------------------------

S3_ROOT="$WORK/s3"
mkdir -p "$S3_ROOT/$BUCKET" # a bucket is a folder
export AWS_ENDPOINT_URL="http://127.0.0.1:$S3_PORT"
export AWS_ACCESS_KEY_ID=stasis-demo
export AWS_SECRET_ACCESS_KEY=stasis-demo-secret
export AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true
STORE="s3://$BUCKET/cluster"

step "s3s-fs --host 127.0.0.1 --port $S3_PORT --access-key $AWS_ACCESS_KEY_ID --secret-key ... $S3_ROOT &"
start s3s-fs "$S3S_FS" --host 127.0.0.1 --port "$S3_PORT" \
  --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" "$S3_ROOT"
s3_up() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$AWS_ENDPOINT_URL/")" != 000 ]; }
wait_until s3s-fs 30 s3_up
echo "s3s-fs: bucket $BUCKET at $AWS_ENDPOINT_URL (AWS_* variables exported for Stasis)"

# --- stasis serve x 2 ---------------------------------------------------------

ready_line() { grep -q "$2" "$WORK/$1.out"; }
for i in 0 1; do
  role="replica-$((i + 1))"
  step "stasis serve --workers 0 --directory $DIRECTORY --snapshot-store $STORE" \
    "--advertise 127.0.0.1 --lease-ttl $LEASE_TTL --listen 127.0.0.1:${INGRESS[i]}" \
    "--admin-listen 127.0.0.1:${ADMIN[i]} --data-dir $WORK/$role &"
  start "$role" "$STASIS" serve --workers 0 --directory "$DIRECTORY" --snapshot-store "$STORE" \
    --advertise 127.0.0.1 --lease-ttl "$LEASE_TTL" \
    --listen "127.0.0.1:${INGRESS[i]}" --admin-listen "127.0.0.1:${ADMIN[i]}" \
    --data-dir "$WORK/$role"
  # The first replica writes the cluster-wide settings; the second finds them.
  wait_until "$role" 60 ready_line "$role" '^stasis ready'
  cat "$WORK/$role.out"
done
R1="http://127.0.0.1:${ADMIN[0]}"
R2="http://127.0.0.1:${ADMIN[1]}"

# --- stasis worker run x 3 ----------------------------------------------------

for i in 0 1 2; do
  role="w-$((i + 1))"
  step "stasis worker run --name $role --data-dir $WORK/$role --listen 127.0.0.1:${WORKER[i]}" \
    "--directory $DIRECTORY --snapshot-store $STORE --lease-ttl $LEASE_TTL &"
  start "$role" "$STASIS" worker run --name "$role" --data-dir "$WORK/$role" \
    --listen "127.0.0.1:${WORKER[i]}" --directory "$DIRECTORY" --snapshot-store "$STORE" \
    --lease-ttl "$LEASE_TTL"
  wait_until "$role" 60 ready_line "$role" '^stasis worker ready'
  cat "$WORK/$role.out"
done
three_ready() {
  [ "$("$STASIS" worker list --admin "$R1" -o json | grep -c '"state": "ready"')" -ge 3 ]
}
wait_until replica-1 30 three_ready
step stasis worker list --admin "$R1"
"$STASIS" worker list --admin "$R1"

step "etcd: keys under $PREFIX/"
show_etcd_keys

# --- the counter, through both replicas -------------------------------------

step stasis template push counter target/demos/counter.wasm --admin "$R1"
"$STASIS" template push counter target/demos/counter.wasm --admin "$R1"
step stasis actor create "$ACTOR" --template counter --admin "$R1"
"$STASIS" actor create "$ACTOR" --template counter --admin "$R1"

EXPECTED=0
# post REPLICA_INDEX: one increment through that replica's ingress; checks
# the count is one more than the last one. Retries (and says so) only while
# the answer is 503 or no connection: neither ran the request.
post() {
  local port=${INGRESS[$1]} code body
  step "curl -X POST http://$HOST:$port   # replica $(($1 + 1))"
  for attempt in $(seq 1 20); do
    code=$(curl -sS -o "$WORK/body" -w '%{http_code}' -X POST -H "Host: $HOST" \
      "http://127.0.0.1:$port/" 2>/dev/null) || code=000
    [ "$code" = 503 ] || [ "$code" = 000 ] || break
    note "answer $code (attempt $attempt): not run; again in 0.5 s"
    sleep 0.5
  done
  body=$(cat "$WORK/body" 2>/dev/null || true)
  printf '%s\n' "$body"
  [ "$code" = 200 ] || die "POST through replica $(($1 + 1)) answered $code"
  EXPECTED=$((EXPECTED + 1))
  [[ "$body" == *"count: $EXPECTED"* ]] || die "expected count $EXPECTED, got: $body"
}

post 0
post 0
post 1
post 1

step stasis actor pause "$ACTOR" -o json --admin "$R2"
"$STASIS" actor pause "$ACTOR" -o json --admin "$R2"
step "the snapshot store (s3://$BUCKET/...): objects of $ACTOR"
(cd "$S3_ROOT/$BUCKET" && find . -path "*$ACTOR*" -type f -printf '%8s  %P\n' | sort -k2)
step stasis actor resume "$ACTOR" --admin "$R2"
"$STASIS" actor resume "$ACTOR" --admin "$R2"
post 1
step stasis actor get "$ACTOR" --admin "$R2"
"$STASIS" actor get "$ACTOR" --admin "$R2"

# --- kill -9 the leader -------------------------------------------------------

# leader_index: 0 or 1, the replica whose /healthz says it leads
# (`ok (leader NAME)`); empty when none does.
leader_index() {
  local i
  for i in 0 1; do
    if curl -fsS "http://127.0.0.1:${ADMIN[i]}/healthz" 2>/dev/null | grep -q '(leader '; then
      echo "$i"
      return 0
    fi
  done
}

LEADER=$(leader_index)
if [ -n "$LEADER" ]; then
  echo "replica $((LEADER + 1))'s /healthz says it leads"
else
  LEADER=0
  note "no replica says it leads yet; replica 1 started first, so it wins the election"
fi
OTHER=$((1 - LEADER))
LEADER_ROLE="replica-$((LEADER + 1))"

step "kill -9 ${PID[$LEADER_ROLE]}   # $LEADER_ROLE, the leader"
kill -9 "${PID[$LEADER_ROLE]}"
wait "${PID[$LEADER_ROLE]}" 2>/dev/null || true
unset "PID[$LEADER_ROLE]"
killed_at=$(date +%s%N)

post "$OTHER"
post "$OTHER"

note "waiting for replica $((OTHER + 1)) to take the lead (lease TTL $LEASE_TTL)"
for _ in $(seq 1 100); do
  [ "$(leader_index)" = "$OTHER" ] && break
  sleep 0.1
done
if [ "$(leader_index)" = "$OTHER" ]; then
  echo "replica $((OTHER + 1)) leads, $((($(date +%s%N) - killed_at) / 1000000)) ms after the kill"
else
  note "replica $((OTHER + 1)) does not say it leads yet; continuing after the lease TTL"
  sleep "${LEASE_TTL%s}"
fi

OTHER_ADMIN="http://127.0.0.1:${ADMIN[OTHER]}"
step stasis actor pause "$ACTOR" --admin "$OTHER_ADMIN"
"$STASIS" actor pause "$ACTOR" --admin "$OTHER_ADMIN"
post "$OTHER"
step stasis actor get "$ACTOR" --admin "$OTHER_ADMIN"
"$STASIS" actor get "$ACTOR" --admin "$OTHER_ADMIN"
step stasis worker list --admin "$OTHER_ADMIN"
"$STASIS" worker list --admin "$OTHER_ADMIN"

cat <<TXT

The count went from 1 to $EXPECTED without a gap or a repeat, through both
replicas, a pause to the snapshot store, and the leader's kill -9.
Stopping everything (the trap); nothing is left running.
TXT
