#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs the wasm target the
# demo actors need, then builds once in the release profile (tests, benches
# in criterion's test mode) and runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip1
# etcd-client's build script runs protoc; the cluster tests start real etcd
# members (Debian's protobuf-compiler and etcd-server).
if ! command -v protoc >/dev/null || [ ! -x "${ETCD_BIN:-/usr/bin/etcd}" ]; then
    apt-get update && apt-get install -y protobuf-compiler etcd-server
fi
cargo test --release --workspace --all-targets "$@"
