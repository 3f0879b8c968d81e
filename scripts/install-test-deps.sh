#!/usr/bin/env bash
# Installs what the tests, the cluster demo and CI need beyond Rust itself,
# each only if it is missing (silent when everything is there):
#   - the wasm32-wasip1 target (the demo actors are built for it);
#   - `protoc` from Debian's `protobuf-compiler` (etcd-client's build script
#     runs it) and etcd 3.4 from Debian's `etcd-server` (/usr/bin/etcd), for
#     cluster mode, and `openssl` (the TLS etcd test makes its certificates);
#   - `s3s-fs` 0.14.1, an S3-compatible server on a local folder (newer
#     releases need a newer rustc); a fresh `cargo install` takes minutes;
#   - `kubernetes-validate` (PyPI), which checks deploy/kubernetes offline;
#   - Debian's `python3-websockets`, the WebSocket client of the tests, and
#     `chromium`, the browser of the web console's tests;
#   - Debian's `clang`, `lld`, `llvm` (llvm-ar), `wasi-libc` and
#     `libclang-rt-dev-wasm32` (the wasm32 compiler-rt builtins), which build
#     the C demo actor (demos-c/) and the JavaScript engine (QuickJS, in
#     demos/js-engine); without them build.rs skips both and their tests say so.
# Run it as root or with sudo available (for apt-get).
set -euo pipefail

S3S_FS_VERSION=0.14.1
KUBERNETES_VALIDATE_VERSION=1.37.0

say() { printf 'install-test-deps: %s\n' "$*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! rustup target list --installed | grep -qx wasm32-wasip1; then
  say "rustup target add wasm32-wasip1"
  rustup target add wasm32-wasip1
fi

if [ ! -x /usr/bin/etcd ] || ! command -v protoc >/dev/null || ! command -v openssl >/dev/null; then
  say "apt-get install etcd-server protobuf-compiler openssl"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when they do not know the packages yet.
  if ! apt-cache show etcd-server protobuf-compiler openssl >/dev/null 2>&1; then
    as_root apt-get update -qq
  fi
  as_root apt-get install -y -qq etcd-server protobuf-compiler openssl >/dev/null
fi

"$(dirname "$0")/install-wasm-toolchain.sh"

# The web console's tests drive Debian's headless Chromium over the
# DevTools protocol.
if [ ! -x /usr/bin/chromium ]; then
  say "apt-get install chromium"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show chromium >/dev/null 2>&1; then
    as_root apt-get update -qq
  fi
  as_root apt-get install -y -qq chromium >/dev/null
fi

# The WebSocket tests drive Debian's python3-websockets from /usr/bin/python3
# (a real client, not the server's own library).
if ! /usr/bin/python3 -c 'import websockets' >/dev/null 2>&1; then
  say "apt-get install python3 python3-websockets"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show python3-websockets >/dev/null 2>&1; then
    as_root apt-get update -qq
  fi
  as_root apt-get install -y -qq python3 python3-websockets >/dev/null
fi

if ! command -v s3s-fs >/dev/null && [ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs" ]; then
  say "cargo install s3s-fs --version $S3S_FS_VERSION (takes a few minutes)"
  cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked --quiet
fi

if ! python3 -c 'import kubernetes_validate' >/dev/null 2>&1; then
  say "pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  # A Debian system Python refuses installs outside a venv (PEP 668); a user
  # install is the least intrusive way past that for one tool.
  export PIP_ROOT_USER_ACTION=ignore
  python3 -m pip install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
