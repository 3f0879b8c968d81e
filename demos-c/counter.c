/*
 * The counter actor in C, answering exactly as the Rust one
 * (demos/counter): `POST /` adds one, `GET /` and `HEAD /` read; both answer
 * 200 `hello from: <worker> | preserved memory count: <n>\n` as
 * text/plain; any other method answers 405. The count is a plain static in
 * linear memory: it survives pause, resume, migration and restarts. Its
 * state hand-over (`stasis actor upgrade`) is the count, 8 bytes
 * little-endian.
 *
 * Built by the root crate's build.rs into target/demos/counter-c.wasm:
 *   clang --target=wasm32-wasi -mexec-model=reactor -std=c11 -O2 \
 *       -I guest-sdk-c -o counter-c.wasm demos-c/counter.c
 */
#include <inttypes.h>
#include <stdio.h>

#include "stasis.h"

static uint64_t count;

static void handle(const stasis_request *req, stasis_response *res) {
    if (stasis_method_is(req, "POST")) {
        count++;
    } else if (!stasis_method_is(req, "GET") && !stasis_method_is(req, "HEAD")) {
        stasis_response_text(res, 405, "method %.*s not allowed; use GET or POST\n",
                             (int)req->method_len, req->method);
        return;
    }
    stasis_response_text(res, 200, "hello from: %.*s | preserved memory count: %" PRIu64 "\n",
                         (int)req->worker_len, req->worker, count);
}

static int save(stasis_state *out) {
    uint8_t bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(count >> (8 * i));
    return stasis_state_write(out, bytes, sizeof bytes);
}

static int load(const uint8_t *data, size_t len) {
    if (len != 8) {
        fprintf(stderr, "counter-c takes 8 bytes of state, not %zu\n", len);
        return -1;
    }
    count = 0;
    for (int i = 0; i < 8; i++) count |= (uint64_t)data[i] << (8 * i);
    return 0;
}

STASIS_EXPORT_ACTOR(handle);
STASIS_EXPORT_STATE(save, load);
