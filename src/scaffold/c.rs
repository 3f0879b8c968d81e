//! The files of a new C project (`stasis new c NAME`): the same JSON
//! counter as the other languages' projects in `actor.c`, the header-only
//! C SDK (`stasis.h` and the two headers it includes, written from this
//! binary, so the project needs no checkout of Stasis), and `build.sh`,
//! the one clang command that makes `actor.wasm` (docs/c-sdk.md of Stasis,
//! "Building").

use super::Language;

/// The C SDK's headers, as this binary was built with them.
const HEADERS: [(&str, &str); 3] = [
    ("stasis.h", include_str!("../../guest-sdk-c/stasis.h")),
    (
        "stasis_host.h",
        include_str!("../../guest-sdk-c/stasis_host.h"),
    ),
    (
        "stasis_wire.h",
        include_str!("../../guest-sdk-c/stasis_wire.h"),
    ),
];

const ACTOR: &str = r#"/*
 * A Stasis actor: GET /count reads a counter, POST /count adds one; both
 * answer {"count":N}. The count is a plain static in linear memory: it is
 * kept across pauses, moves and restarts. save() and load() hand it to the
 * next version at an upgrade (8 bytes, little-endian).
 */
#include <inttypes.h>
#include <stdio.h>

#include "stasis.h"

static uint64_t count;

static void handle(const stasis_request *req, stasis_response *res) {
    if (!stasis_path_is(req, "/count")) {
        stasis_response_text(res, 404, "not found\n");
        return;
    }
    if (stasis_method_is(req, "POST")) {
        count++;
    } else if (!stasis_method_is(req, "GET")) {
        stasis_response_text(res, 405, "method not allowed; use GET or POST\n");
        stasis_response_add_header(res, "allow", "GET, POST", 9);
        return;
    }
    stasis_response_reset(res);
    stasis_response_set_status(res, 200);
    stasis_response_add_header(res, "content-type", "application/json", 16);
    stasis_response_printf(res, "{\"count\":%" PRIu64 "}", count);
}

static int save(stasis_state *out) {
    uint8_t bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(count >> (8 * i));
    return stasis_state_write(out, bytes, sizeof bytes);
}

static int load(const uint8_t *data, size_t len) {
    if (len != 8) {
        fprintf(stderr, "this actor takes 8 bytes of state, not %zu\n", len);
        return -1;
    }
    count = 0;
    for (int i = 0; i < 8; i++) count |= (uint64_t)data[i] << (8 * i);
    return 0;
}

STASIS_EXPORT_ACTOR(handle);
STASIS_EXPORT_STATE(save, load);
"#;

const BUILD: &str = r#"#!/bin/sh
# Builds actor.wasm: clang for wasm32-wasi with a wasi-libc sysroot (on
# Debian or Ubuntu: apt-get install clang lld wasi-libc
# libclang-rt-dev-wasm32). CLANG and WASI_SYSROOT override the defaults,
# e.g. CLANG=/opt/wasi-sdk/bin/clang WASI_SYSROOT=/opt/wasi-sdk/share/wasi-sysroot.
set -eu
cd "$(dirname "$0")"
CLANG="${CLANG:-clang}"
set -- --target=wasm32-wasi -mexec-model=reactor -std=gnu11 -O2 -Wl,--strip-debug -I .
if [ -z "${WASI_SYSROOT:-}" ]; then
    for dir in /usr/share/wasi-sysroot /opt/wasi-sdk/share/wasi-sysroot; do
        if [ -d "$dir" ]; then WASI_SYSROOT="$dir"; break; fi
    done
fi
if [ -n "${WASI_SYSROOT:-}" ]; then
    set -- "$@" "--sysroot=$WASI_SYSROOT"
fi
"$CLANG" "$@" -o actor.wasm actor.c
echo "built actor.wasm"
"#;

/// A C project named `name`.
pub(super) fn files(name: &str) -> Vec<(String, String)> {
    let mut files = vec![
        ("actor.c".to_owned(), ACTOR.to_owned()),
        ("build.sh".to_owned(), BUILD.to_owned()),
        (
            "README.md".to_owned(),
            super::files::readme(Language::C, name),
        ),
    ];
    files.extend(
        HEADERS
            .iter()
            .map(|(file, text)| ((*file).to_owned(), (*text).to_owned())),
    );
    files
}

/// What to run next (see [`super::files::next_steps`]).
pub(super) fn next_steps(name: &str, dir: &str) -> String {
    format!(
        "made {dir}: a C actor\n\
         \x20 cd {dir}\n\
         \x20 sh build.sh                                       # clang and wasi-libc: actor.wasm\n\
         \x20 stasis template push {name} actor.wasm\n\
         \x20 stasis actor create {name}-1 --template {name}\n\
         \x20 curl -X POST -H 'Host: {name}-1.actors.localhost' http://127.0.0.1:8000/count"
    )
}

/// The README's words after the steps.
pub(super) const README_TAIL: &str = "\nBuilding needs clang for `wasm32-wasi` and a wasi-libc \
    sysroot (`build.sh` says how to point at a WASI SDK). `stasis.h` is the Stasis C SDK this \
    project was made with (header-only; `stasis_host.h` and `stasis_wire.h` are its parts): \
    the guide is docs/c-sdk.md of Stasis.\n";
