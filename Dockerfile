# syntax=docker/dockerfile:1
#
# The `stasis` binary in a small image:
#   docker build -t stasis:0.1.0 .
#   docker run --rm stasis:0.1.0 serve --help
# Cluster mode on Kubernetes: deploy/kubernetes and docs/operations.md,
# "Run a cluster".
#
# Not built in this project's CI: its machines have the docker client but
# no engine. The steps below mirror scripts/test.sh's build (same toolchain,
# same target, release profile, Cargo.lock).
#
# Builder and runtime share Debian bookworm, so the binary's glibc symbols
# are the runtime's; change both tags together (e.g. to -trixie).

FROM rust:1.95-bookworm AS builder
# build.rs builds the demo actors for wasm32-wasip1 with a nested cargo.
RUN rustup target add wasm32-wasip1
WORKDIR /src
COPY . .
# The caches keep downloaded crates and compiled dependencies across builds
# (BuildKit); the results are copied out of the cached target/ in the same
# step. The release profile carries no debug info; `strip --strip-debug`
# also drops what the standard library brings. Symbols stay, so backtraces
# still name functions.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_INCREMENTAL=false \
    cargo build --release --locked --bin stasis \
    && mkdir -p /out/demos \
    && strip --strip-debug -o /out/stasis target/release/stasis \
    && cp target/demos/*.wasm /out/demos/

FROM debian:bookworm-slim
# ca-certificates: TLS to an object store or etcd with public certificates.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 stasis \
    && useradd --uid 10001 --gid 10001 --home-dir /var/lib/stasis --no-create-home \
       --shell /usr/sbin/nologin stasis \
    && mkdir -p /var/lib/stasis \
    && chown 10001:10001 /var/lib/stasis
COPY --from=builder /out/stasis /usr/local/bin/stasis
# The demo actors, e.g. `stasis template push counter
# /usr/local/share/stasis/demos/counter.wasm`.
COPY --from=builder /out/demos/ /usr/local/share/stasis/demos/
USER 10001:10001
WORKDIR /var/lib/stasis
# `stasis serve`'s --data-dir (`worker run` takes --data-dir only as a flag).
ENV STASIS_DATA_DIR=/var/lib/stasis
# Ingress, admin API, a worker's API (the ports deploy/kubernetes uses).
EXPOSE 8000 7070 7100
ENTRYPOINT ["stasis"]
CMD ["--help"]
