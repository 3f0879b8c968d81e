#!/usr/bin/env bash
# CPU per create, by process, embedded against cluster mode (issue 50, item 1;
# BENCHMARKS.md, section 41): N `POST /v1/actors` of new counters, 8 in flight,
# to one `stasis serve` (2 in-process workers), then to a cluster of one etcd
# member, one replica (`serve --workers 0`) and two `worker run` on a file://
# store. Prints each server process's CPU (user + system, from /proc/PID/stat)
# per create; the clients' CPU is not counted. The creates/s it prints are
# bounded by its client (one curl process per create): for rates, use
# benches/batch.rs.
#
# Usage: benches/cpu_per_create.sh [N]   (default 400)
# Needs `cargo build --release`, etcd, curl and bc. Optional: PERF=1 records
# the replica's and workers' profile (perf.data in the temp folder, kept);
# STRACE=1 counts w1's syscalls (STRACE_ARGS replaces strace's `-c`).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-400}
S=${STASIS_BIN:-$root/target/release/stasis}
W=${STASIS_DEMOS_DIR:-$root/target/demos}/counter.wasm
B=$(mktemp -d)
echo "folder: $B"
ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
creates() { # admin prefix
  seq 1 $N | xargs -P 8 -I{} curl -s -o /dev/null -w "%{http_code}\n" -X POST -H 'content-type: application/json' \
    -d "{\"name\":\"$2{}\",\"template\":\"counter\"}" http://$1/v1/actors | sort | uniq -c | tr '\n' ' '
}
# embedded
STASIS_LOG=warn $S serve --data-dir $B/emb --listen 127.0.0.1:29000 --admin-listen 127.0.0.1:29001 > $B/emb.log 2>&1 &
EP=$!; sleep 2
$S --admin http://127.0.0.1:29001 template push counter $W >/dev/null
a=$(ticks $EP); t0=$(date +%s.%N); r=$(creates 127.0.0.1:29001 e); t1=$(date +%s.%N); b=$(ticks $EP)
echo "embedded: $r wall $(echo "$t1-$t0" | bc) s, cpu $(( (b-a)*10 )) ms, per create $(echo "scale=3; ($b-$a)*10/$N" | bc) ms"
kill $EP
# cluster
etcd --data-dir $B/etcd --listen-client-urls http://127.0.0.1:29379 --advertise-client-urls http://127.0.0.1:29379 \
  --listen-peer-urls http://127.0.0.1:29380 --initial-advertise-peer-urls http://127.0.0.1:29380 \
  --initial-cluster default=http://127.0.0.1:29380 > $B/etcd.log 2>&1 &
XP=$!; sleep 2
C="--directory etcd://127.0.0.1:29379/stasis --snapshot-store file://$B/store"
mkdir -p $B/store
STASIS_LOG=warn $S serve --workers 0 $C --data-dir $B/r1 --listen 127.0.0.1:29100 --admin-listen 127.0.0.1:29101 > $B/r1.log 2>&1 &
RP=$!; sleep 2
STASIS_LOG=warn $S worker run --name w1 --listen 127.0.0.1:0 --data-dir $B/w1 $C > $B/w1.log 2>&1 &
W1=$!
STASIS_LOG=warn $S worker run --name w2 --listen 127.0.0.1:0 --data-dir $B/w2 $C > $B/w2.log 2>&1 &
W2=$!; sleep 4
$S --admin http://127.0.0.1:29101 template push counter $W >/dev/null || { echo push failed; cat $B/r1.log | tail; }
# warm up
N0=$N; N=16; creates 127.0.0.1:29101 warm >/dev/null; N=$N0
a1=$(ticks $XP); a2=$(ticks $RP); a3=$(ticks $W1); a4=$(ticks $W2)
if [ -n "${STRACE:-}" ]; then strace ${STRACE_ARGS:--c} -f -p $W1 -o $B/strace.txt & ST=$!; sleep 1; fi
if [ -n "${PERF:-}" ]; then perf record -F 1999 -g -p $RP,$W1,$W2 -o $B/perf.data > $B/perf.log 2>&1 & PF=$!; sleep 1; fi
t0=$(date +%s.%N); r=$(creates 127.0.0.1:29101 c); t1=$(date +%s.%N)
if [ -n "${PERF:-}" ]; then kill -INT $PF; sleep 2; fi
if [ -n "${STRACE:-}" ]; then kill -INT $ST; sleep 2; fi
b1=$(ticks $XP); b2=$(ticks $RP); b3=$(ticks $W1); b4=$(ticks $W2)
tot=$(( (b1-a1)+(b2-a2)+(b3-a3)+(b4-a4) ))
echo "cluster: $r wall $(echo "$t1-$t0" | bc) s, cpu ms etcd $(( (b1-a1)*10 )) replica $(( (b2-a2)*10 )) w1 $(( (b3-a3)*10 )) w2 $(( (b4-a4)*10 )), per create $(echo "scale=3; $tot*10/$N" | bc) ms"
echo "pids etcd $XP replica $RP w1 $W1 w2 $W2"
if [ -n "${HOLD:-}" ]; then sleep $HOLD; fi
kill $RP $W1 $W2 $XP
wait 2>/dev/null
[ -n "${PERF:-}${STRACE:-}" ] || rm -rf "$B"
