#!/usr/bin/env bash
# Push time of JavaScript templates and `stasis dev`'s save-to-served time
# (issue 48, items 2, 4 and 5; BENCHMARKS.md, section 44), in one run:
# `demos-js/counter.js` against a generated TypeScript bundle of at least
# 200 KiB (app.ts and MODULES modules in chains of 10 relative imports, each
# with an interface, typed functions and a table), pushed alternately ROUNDS
# times to one `stasis serve` (every push a new version) after 2 warm-up
# pushes each (the CLI's compile cache warm); then `stasis dev app.js` on a
# counter with save/load, edited SAVES times, printing each "ms after the
# save" dev reports. Prints each push's wall time and the medians.
#
# Usage: benches/js_push.sh [ROUNDS] [SAVES] [MODULES]   (default 10 5 120)
# Needs `cargo build --release` (the JavaScript engine built in).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROUNDS=${1:-10}
SAVES=${2:-5}
MODULES=${3:-120}
export STASIS_CACHE_DIR=${STASIS_CACHE_DIR:-$tmp/cache}

# The bundle.
big=$tmp/big
mkdir -p "$big/src"
for ((i = 0; i < MODULES; i++)); do
    next=$((i + 1))
    {
        echo "// Module $i of the push bench: an interface, typed functions and a table."
        if ((next % 10 != 0 && next < MODULES)); then echo "import { step$next } from \"./m$next.ts\";"; fi
        echo "export interface Item$i { id: number; name: string; tags: readonly string[]; weight?: number }"
        echo "const table$i: Item$i[] = ["
        for ((j = 0; j < 24; j++)); do
            echo "  { id: $j, name: \"item-$i-$j\", tags: [\"t$((j % 5))\", \"u$((j % 7))\"] },"
        done
        echo "];"
        echo "/** Folds the table into \`n\`, then hands on to the next module of the chain. */"
        echo "export function step$i(n: number): number {"
        echo "  let acc: number = n;"
        echo "  for (const item of table$i) { acc = (acc * 31 + item.id + item.name.length) % 1000003; }"
        if ((next % 10 != 0 && next < MODULES)); then echo "  return step$next(acc);"; else echo "  return acc;"; fi
        echo "}"
    } >"$big/src/m$i.ts"
done
{
    for ((i = 0; i < MODULES; i += 10)); do echo "import { step$i } from \"./src/m$i.ts\";"; done
    echo "let count: number = 0;"
    echo "export default {"
    echo "  fetch(_request: Request): Response {"
    echo "    count += 1;"
    echo -n "    const sum: number = 0"
    for ((i = 0; i < MODULES; i += 10)); do echo -n " + step$i(count)"; done
    echo ";"
    echo "    return new Response(\`\${count} \${sum}\`);"
    echo "  },"
    echo "};"
} >"$big/app.ts"
bytes=$(cat "$big"/app.ts "$big"/src/*.ts | wc -c)
echo "bundle: $((MODULES + 1)) modules, $bytes bytes ($((bytes / 1024)) KiB) of TypeScript"

serve_start --workers 1
push() { # NAME FILE: prints the push's wall milliseconds
    local t0 t1
    t0=$(date +%s%N)
    "$bin" --admin "$admin" template push "$1" "$2" >/dev/null
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for _ in 1 2; do push counter "$root/demos-js/counter.js" >/dev/null; push big "$big/app.ts" >/dev/null; done
: >"$tmp/counter.ms"
: >"$tmp/big.ms"
for ((r = 1; r <= ROUNDS; r++)); do
    a=$(push counter "$root/demos-js/counter.js")
    b=$(push big "$big/app.ts")
    echo "round $r: counter.js $a ms, bundle $b ms"
    echo "$a" >>"$tmp/counter.ms"
    echo "$b" >>"$tmp/big.ms"
done
"$bin" --admin "$admin" actor create big-1 --template big >/dev/null
echo "the bundle's actor answers: $(curl -fsS -X POST -H 'host: big-1.actors.localhost' "http://$ingress/")"
echo "push median: counter.js $(median <"$tmp/counter.ms") ms, bundle $(median <"$tmp/big.ms") ms"

# stasis dev: each save until the new version serves the actor with its state.
dev=$tmp/dev
mkdir -p "$dev"
write_counter() { # the version's suffix
    cat >"$dev/app.js" <<JS
let count = 0;
export default {
  fetch() { count += 1; return new Response(\`count \${count} ($1)\`); },
  save() { return count; },
  load(value) { count = value; },
};
JS
}
write_counter 0
"$bin" --admin "$admin" dev "$dev/app.js" >"$tmp/dev.out" 2>&1 &
devpid=$!
trap 'kill $devpid 2>/dev/null || true; worker_stop; serve_stop; rm -rf "$tmp"' EXIT
served() { grep -c 'with their state' "$tmp/dev.out" || true; }
for _ in $(seq 600); do grep -q 'watching' "$tmp/dev.out" && break; sleep 0.05; done
for ((s = 1; s <= SAVES; s++)); do
    before=$(served)
    sleep 1 # sleep: dev takes a save once two reads a moment apart agree; edits 1 s apart are separate saves
    write_counter "$s"
    for _ in $(seq 600); do (($(served) > before)) && break; sleep 0.05; done
done
grep 'ms after the save' "$tmp/dev.out" | sed 's/.*, \([0-9]*\) ms after the save/\1/' >"$tmp/dev.ms"
echo "stasis dev save-to-served: $(tr '\n' ' ' <"$tmp/dev.ms")ms; median $(median <"$tmp/dev.ms") ms"
