#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone: installs the wasm target the
# demo actors need, then builds once in the release profile (tests, benches
# in criterion's test mode) and runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip1
cargo test --release --workspace --all-targets "$@"
