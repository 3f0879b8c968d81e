# Shared by the bench scripts (sourced, not run): tool checks, a temporary
# folder removed at exit, and a `stasis serve` started and waited for.
#
# After sourcing: $root, $bin (STASIS_BIN or target/release/stasis),
# $demos (STASIS_DEMOS_DIR or target/demos) and $tmp are set; the EXIT
# trap stops a server started with `serve_start` (and a worker started
# with `worker_start`) and removes $tmp.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${STASIS_BIN:-$root/target/release/stasis}
demos=${STASIS_DEMOS_DIR:-$root/target/demos}
[ -x "$bin" ] || { echo "$bin missing: run cargo build --release" >&2; exit 1; }

# need TOOL...: exits naming the first one not installed.
need() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y $tool" >&2; exit 1; }
    done
}

tmp=$(mktemp -d)
pid=
# serve_stop: stops the server serve_start started, if any.
serve_stop() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    pid=
}
wpid=
# worker_stop: stops the worker worker_start started, if any.
worker_stop() {
    if [ -n "$wpid" ]; then kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
    wpid=
}
trap 'worker_stop; serve_stop; rm -rf "$tmp"' EXIT

# until_ready PID FILE LINE: waits for a line starting with LINE in FILE
# (10 s), exiting with the process's stderr (FILE.err) if it dies.
until_ready() {
    for _ in $(seq 200); do
        grep -q "^$3" "$2" && return
        kill -0 "$1" 2>/dev/null || { cat "$2.err" >&2; exit 1; }
        sleep 0.05
    done
}

# serve_start [FLAGS...]: `stasis serve` on a fresh $tmp/data and ports
# the kernel picks; sets $ingress (HOST:PORT) and $admin (http://HOST:PORT).
serve_start() {
    rm -rf "$tmp/data"
    STASIS_LOG=warn "$bin" serve --data-dir "$tmp/data" \
        --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 "$@" >"$tmp/out" 2>"$tmp/out.err" &
    pid=$!
    until_ready "$pid" "$tmp/out" 'stasis ready'
    local ready
    ready=$(grep '^stasis ready' "$tmp/out")
    ingress=${ready#*ingress=}
    ingress=${ingress%% *}
    admin=http://${ready#*admin=}
}

# worker_start NAME [FLAGS...]: `stasis worker run` named NAME joining
# $admin, on a fresh $tmp/NAME and a port the kernel picks.
worker_start() {
    local name=$1
    shift
    rm -rf "${tmp:?}/$name"
    STASIS_LOG=warn "$bin" worker run --join "$admin" --name "$name" --data-dir "$tmp/$name" \
        --listen 127.0.0.1:0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.out.err" &
    wpid=$!
    until_ready "$wpid" "$tmp/$name.out" 'stasis worker ready'
}

# counter_actor: pushes the counter demo and creates actor `counter`.
counter_actor() {
    curl -fsS -X PUT --data-binary @"$demos/counter.wasm" -H 'content-type: application/wasm' \
        "$admin/v1/templates/counter" >/dev/null
    curl -fsS -X POST -H 'content-type: application/json' \
        -d '{"name": "counter", "template": "counter"}' "$admin/v1/actors" >/dev/null
}
