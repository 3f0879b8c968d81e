#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs what the tests need
# (the wasm target for the demo actors; protoc for etcd-client's build; etcd
# and an S3-compatible server for cluster mode: scripts/install-test-deps.sh), then builds once in the release
# profile (tests, benches in criterion's test mode) and runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-test-deps.sh
cargo test --release --workspace --all-targets "$@"
