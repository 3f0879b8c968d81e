#!/usr/bin/env bash
# Installs Debian's `clang`, `lld`, `llvm` (llvm-ar), `wasi-libc` and
# `libclang-rt-dev-wasm32` (the wasm32 compiler-rt builtins) when one is
# missing: they build the C demo actor (demos-c/) and the JavaScript engine
# (QuickJS, in demos/js-engine); without them build.rs skips both. Called by
# scripts/demo.sh and scripts/install-test-deps.sh. Run it as root or with
# sudo available (for apt-get).
set -euo pipefail

say() { printf 'install-wasm-toolchain: %s\n' "$*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

c_builtins() { clang --target=wasm32-wasi -print-libgcc-file-name 2>/dev/null || true; }
if ! command -v clang >/dev/null || ! command -v wasm-ld >/dev/null ||
  [ ! -f /usr/lib/wasm32-wasi/libc.a ] || [ ! -f "$(c_builtins)" ] ||
  ! command -v llvm-ar >/dev/null; then
  say "apt-get install clang lld llvm wasi-libc libclang-rt-dev-wasm32"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show clang lld llvm wasi-libc libclang-rt-dev-wasm32 >/dev/null 2>&1; then
    as_root apt-get update -qq
  fi
  as_root apt-get install -y -qq clang lld llvm wasi-libc libclang-rt-dev-wasm32 >/dev/null
fi

