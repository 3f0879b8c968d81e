/*
 * The counter actor in C, answering exactly as the Rust one
 * (demos/counter): `POST /` adds one, `GET /` and `HEAD /` read; both answer
 * 200 `hello from: <worker> | preserved memory count: <n>\n` as
 * text/plain; any other method answers 405. The count is a plain static in
 * linear memory: it survives pause, resume, migration and restarts.
 *
 * Built by the root crate's build.rs into target/demos/counter-c.wasm:
 *   clang --target=wasm32-wasi -mexec-model=reactor -std=c11 -O2 \
 *       -I guest-sdk-c -o counter-c.wasm demos-c/counter.c
 */
#include <inttypes.h>

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

STASIS_EXPORT_ACTOR(handle);
