/*
 * stasis.h: write a Stasis actor in C (C11, header-only, no dependencies
 * beyond the C library).
 *
 * An actor is one function that turns a request into a response;
 * STASIS_EXPORT_ACTOR makes it the module's `stasis_handle` export, adds
 * `stasis_alloc` and writes the `stasis-abi` custom section. The ABI and
 * the byte layout of requests and responses are documented in the
 * `stasis-host-api` crate (host-api/src/lib.rs, host-api/src/wire.rs and,
 * for the host functions, host-api/src/imports.rs); this header is a
 * second implementation of them. Copy the folder: stasis.h includes
 * stasis_wire.h (the wire format) and, for ABI 2, stasis_host.h.
 *
 * ABI version: 2 by default (STASIS_ABI_VERSION). A module imports WASI
 * preview 1 and, when it calls them, the host functions of stasis_host.h
 * (stasis_call, stasis_send, stasis_fetch, stasis_set_alarm,
 * stasis_cancel_alarm, stasis_alarm, stasis_self_name, stasis_last_error).
 * `#define STASIS_ABI_VERSION 1` before the include for hosts older than
 * ABI 2: WASI only, no host functions.
 *
 *     #include <inttypes.h>
 *     #include "stasis.h"
 *
 *     static uint64_t count;   // lives in linear memory: survives pause,
 *                              // resume, migration and restarts
 *
 *     static void handle(const stasis_request *req, stasis_response *res) {
 *         if (stasis_method_is(req, "POST")) count++;
 *         stasis_response_text(res, 200, "count: %" PRIu64 "\n", count);
 *     }
 *
 *     STASIS_EXPORT_ACTOR(handle);
 *
 * Build it as a WASI *reactor* (Debian: `apt-get install clang lld
 * wasi-libc libclang-rt-dev-wasm32`):
 *
 *     clang --target=wasm32-wasi -mexec-model=reactor -std=c11 -O2 \
 *         -Wl,--strip-debug -I guest-sdk-c -o actor.wasm actor.c
 *
 * `-mexec-model=reactor` links wasi-libc's reactor start file: the module
 * exports `_initialize`, which runs static constructors once; the host calls
 * it once when the actor is created and never again (not per request, not
 * after a resume), so constructors never rerun over live state. Without it
 * the link fails for want of `main`.
 *
 * Optional hooks, each a `void fn(void)`, exported by their own macros:
 *   STASIS_EXPORT_INIT(fn)       once, when the actor is created;
 *   STASIS_EXPORT_ON_PAUSE(fn)   before the snapshot of a pause;
 *   STASIS_EXPORT_ON_RESUME(fn)  after a fresh instance got a snapshot back;
 *   STASIS_EXPORT_ON_ALARM(fn)   (ABI 2) when the actor's alarm fires.
 * and, for an actor that takes WebSockets and streams (see
 * stasis_host_api::sockets), STASIS_EXPORT_ON_SOCKET(fn) with
 * `void fn(const stasis_socket_event *event)`: each client message, and
 * the end of a socket or stream the actor did not close.
 *
 * State hand-over, for a live code upgrade (`stasis actor upgrade`) to a
 * version whose memory layout differs:
 *   STASIS_EXPORT_STATE(save, load)
 * exports `stasis_save_state` and `stasis_load_state`. On the old version,
 * `int save(stasis_state *out)` writes the actor's state with
 * stasis_state_write (0 hands it over; non-zero, or memory running out,
 * refuses the upgrade). On a fresh instance of the new version (after its
 * init), `int load(const uint8_t *data, size_t len)` takes those bytes (0
 * accepts them; non-zero refuses, and the actor stays on its version with
 * its state). The bytes are the module's own: put a schema version first
 * if the layout may change again.
 *
 * Use each STASIS_EXPORT_* macro at most once per module, at file scope.
 *
 * Requests: a malformed request (a buffer that ends inside a field, a length
 * beyond the buffer, bytes left over, invalid UTF-8 in a string) never
 * reaches the handler: the actor answers 400 `bad request from host: ...`
 * and its state is untouched. The request and everything it points to are
 * valid until the handler returns. Strings are NUL-terminated copies (the
 * `_len` fields are authoritative; a header value may hold NUL bytes); the
 * body is not NUL-terminated.
 *
 * Responses: a stasis_response starts as status 200, no headers, empty
 * body. The stasis_response_* functions return 0, or -1 if memory ran out
 * (or, for a header, its name is not UTF-8); after an out-of-memory failure
 * the actor answers 500 whatever the handler does next.
 *
 * Guests are single-threaded and the host never re-enters an export, so the
 * header keeps its state (the last response) in plain statics.
 */
#ifndef STASIS_H
#define STASIS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The guest ABI version written into the module: 2 (host-api's
 * ABI_VERSION; the host functions of stasis_host.h) unless defined as 1
 * before the include (WASI imports only, for hosts that predate ABI 2). A
 * version-2 module that calls no host function imports only WASI, like
 * version 1. */
#ifndef STASIS_ABI_VERSION
#define STASIS_ABI_VERSION 2
#endif
#if STASIS_ABI_VERSION != 1 && STASIS_ABI_VERSION != 2
#error "STASIS_ABI_VERSION must be 1 or 2"
#endif

/* One header: name (lower case in requests) and raw value, with lengths. */
typedef struct stasis_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} stasis_header;

/* One HTTP request as the guest sees it (host-api's Request). */
typedef struct stasis_request {
    const char *method; /* upper case, e.g. "POST" */
    size_t method_len;
    const char *uri; /* path and query, starts with '/' */
    size_t uri_len;
    const stasis_header *headers; /* in arrival order */
    size_t header_count;
    const uint8_t *body; /* not NUL-terminated */
    size_t body_len;
    const char *actor; /* context: this actor's name */
    size_t actor_len;
    const char *worker; /* context: the worker's name, e.g. "worker-1" */
    size_t worker_len;
} stasis_request;

/* A growable byte buffer (internal). */
typedef struct stasis__buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} stasis__buf;

/* The response under construction. Fields are internal: use the functions. */
typedef struct stasis_response {
    uint16_t stasis__status;
    int stasis__failed;            /* memory ran out */
    size_t stasis__header_count;
    stasis__buf stasis__headers;   /* encoded (name, value) pairs */
    stasis__buf stasis__body;
} stasis_response;

/* The handler STASIS_EXPORT_ACTOR exports. */
typedef void (*stasis_handler)(const stasis_request *req, stasis_response *res);

#if defined(__GNUC__) || defined(__clang__)
#define STASIS__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define STASIS__FN static inline __attribute__((unused))
#else
#define STASIS__PRINTF(f, a)
#define STASIS__FN static inline
#endif

/* ---- requests ---------------------------------------------------------- */

/* Whether the method is `method` (exact, upper case: "GET"). */
STASIS__FN int stasis_method_is(const stasis_request *req, const char *method) {
    size_t n = strlen(method);
    return req->method_len == n && memcmp(req->method, method, n) == 0;
}

/* The length of the path: the uri up to its first '?'. */
STASIS__FN size_t stasis_path_len(const stasis_request *req) {
    const char *q = memchr(req->uri, '?', req->uri_len);
    return q ? (size_t)(q - req->uri) : req->uri_len;
}

/* Whether the path (the uri without its query) is exactly `path`. */
STASIS__FN int stasis_path_is(const stasis_request *req, const char *path) {
    size_t n = strlen(path);
    return stasis_path_len(req) == n && memcmp(req->uri, path, n) == 0;
}

/* The first of `headers[0..count)` named `name` (ASCII case-insensitive),
 * or NULL. */
STASIS__FN const stasis_header *stasis_find_header(const stasis_header *headers, size_t count,
                                                   const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < count; i++) {
        const stasis_header *h = &headers[i];
        if (h->name_len != n) continue;
        size_t k = 0;
        for (; k < n; k++) {
            unsigned char a = (unsigned char)h->name[k], b = (unsigned char)name[k];
            if (a >= 'A' && a <= 'Z') a = (unsigned char)(a + 32);
            if (b >= 'A' && b <= 'Z') b = (unsigned char)(b + 32);
            if (a != b) break;
        }
        if (k == n) return h;
    }
    return NULL;
}

/* The request's first header named `name` (case-insensitive), or NULL. */
STASIS__FN const stasis_header *stasis_request_header(const stasis_request *req,
                                                      const char *name) {
    return stasis_find_header(req->headers, req->header_count, name);
}

/* The raw value of query parameter `name` (no percent-decoding): sets
 * *value / *value_len (pointing into req->uri) and returns 1, or returns 0
 * when absent. A bare `flag` has the empty value. */
STASIS__FN int stasis_query(const stasis_request *req, const char *name,
                                       const char **value, size_t *value_len) {
    size_t path = stasis_path_len(req);
    if (path == req->uri_len) return 0;
    size_t n = strlen(name);
    const char *p = req->uri + path + 1, *end = req->uri + req->uri_len;
    while (p <= end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *key_end = eq ? eq : stop;
        if ((size_t)(key_end - p) == n && memcmp(p, name, n) == 0) {
            *value = eq ? eq + 1 : stop;
            *value_len = eq ? (size_t)(stop - eq - 1) : 0;
            return 1;
        }
        if (!amp) break;
        p = amp + 1;
    }
    return 0;
}

#include "stasis_wire.h"

/* ---- responses ---------------------------------------------------------- */

/* Marks the response failed when `rc` is an out-of-memory failure. */
STASIS__FN int stasis__check(stasis_response *res, int rc) {
    if (rc) res->stasis__failed = 1;
    return rc;
}

/* A fresh response: 200, no headers, empty body. */
STASIS__FN void stasis_response_init(stasis_response *res) {
    memset(res, 0, sizeof *res);
    res->stasis__status = 200;
}

/* Drops headers and body and sets the status back to 200 (an earlier
 * out-of-memory failure stays). */
STASIS__FN void stasis_response_reset(stasis_response *res) {
    int failed = res->stasis__failed;
    stasis__buf_free(&res->stasis__headers);
    stasis__buf_free(&res->stasis__body);
    stasis_response_init(res);
    res->stasis__failed = failed;
}

/* Sets the status (100-999; the host answers 502 for anything else). */
STASIS__FN void stasis_response_set_status(stasis_response *res, uint16_t status) {
    res->stasis__status = status;
}

/* Adds a header with a raw value of `value_len` bytes. -1 if `name` is not
 * UTF-8 (the response is unchanged) or memory ran out. */
STASIS__FN int stasis_response_add_header(stasis_response *res, const char *name,
                                                     const void *value, size_t value_len) {
    size_t name_len = strlen(name);
    if (!stasis__utf8_ok((const uint8_t *)name, name_len)) return -1;
    stasis__buf *b = &res->stasis__headers;
    if (stasis__check(res, stasis__buf_varint(b, name_len) || stasis__buf_put(b, name, name_len) ||
                               stasis__buf_varint(b, value_len) ||
                               stasis__buf_put(b, value, value_len)))
        return -1;
    res->stasis__header_count++;
    return 0;
}

/* Appends `len` bytes to the body. */
STASIS__FN int stasis_response_write(stasis_response *res, const void *data,
                                                size_t len) {
    return stasis__check(res, stasis__buf_put(&res->stasis__body, data, len));
}

/* Appends printf-formatted text to the body. */
STASIS__PRINTF(2, 0)
STASIS__FN int stasis_response_vprintf(stasis_response *res, const char *fmt, va_list args) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, fmt, args);
    int rc = -1;
    stasis__buf *b = &res->stasis__body;
    if (n >= 0 && !stasis__check(res, stasis__buf_reserve(b, (size_t)n + 1))) {
        vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
        rc = 0;
    }
    va_end(again);
    return rc;
}

/* Appends printf-formatted text to the body. */
STASIS__PRINTF(2, 3)
STASIS__FN int stasis_response_printf(stasis_response *res, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int rc = stasis_response_vprintf(res, fmt, args);
    va_end(args);
    return rc;
}

/* Replaces the response with `status`, `content-type: text/plain;
 * charset=utf-8` and a printf-formatted body: the Rust SDK's
 * Response::text. */
STASIS__PRINTF(3, 4)
STASIS__FN int stasis_response_text(stasis_response *res, uint16_t status,
                                               const char *fmt, ...) {
    static const char type[] = "text/plain; charset=utf-8";
    stasis_response_reset(res);
    res->stasis__status = status;
    if (stasis_response_add_header(res, "content-type", type, sizeof type - 1)) return -1;
    va_list args;
    va_start(args, fmt);
    int rc = stasis_response_vprintf(res, fmt, args);
    va_end(args);
    return rc;
}

#if STASIS_ABI_VERSION >= 2
#include "stasis_host.h"
#endif


/* ---- the exports -------------------------------------------------------- */

STASIS__FN uint64_t stasis__pack(const uint8_t *ptr, size_t len) {
    return ((uint64_t)(uintptr_t)ptr << 32) | (uint64_t)len;
}

/* Appends the encoded `res` to `out` (host-api's Response layout) and frees
 * the buffers of `res`. Returns 0, or -1 if `res` had failed or memory ran
 * out (`out` then holds a partial encoding). */
STASIS__FN int stasis__encode_response(stasis_response *res, stasis__buf *out) {
    int rc = res->stasis__failed || stasis__buf_varint(out, res->stasis__status) ||
             stasis__buf_varint(out, res->stasis__header_count) ||
             stasis__buf_put(out, res->stasis__headers.data, res->stasis__headers.len) ||
             stasis__buf_varint(out, res->stasis__body.len) ||
             stasis__buf_put(out, res->stasis__body.data, res->stasis__body.len);
    stasis__buf_free(&res->stasis__headers);
    stasis__buf_free(&res->stasis__body);
    return rc ? -1 : 0;
}

/* Encodes `res` (freeing its buffers) into the last-response buffer and
 * returns the (ptr << 32) | len the host expects (wasm32 pointers). */
STASIS__FN uint64_t stasis__finish(stasis_response *res) {
    /* The host reads the encoded response after stasis_handle returns; it
     * stays alive until the next call. */
    static stasis__buf last;
    /* Sent when even the response could not be encoded: 500, no headers,
     * body "guest out of memory\n" (status 500 is fb f4 01). */
    static const uint8_t oom[] = {0xfb, 0xf4, 0x01, 0x00, 20,  'g', 'u', 'e', 's', 't', ' ', 'o', 'u',
                                  't',  ' ',  'o',  'f',  ' ', 'm', 'e', 'm', 'o', 'r', 'y', '\n'};
    stasis__buf_free(&last);
    if (stasis__encode_response(res, &last)) {
        stasis__buf_free(&last);
        return stasis__pack(oom, sizeof oom);
    }
    return stasis__pack(last.data, last.len);
}

/* The body of the `stasis_alloc` export: a buffer of `len` bytes (0 if
 * memory ran out). */
STASIS__FN uint32_t stasis__alloc(uint32_t len) {
    return (uint32_t)(uintptr_t)malloc(len ? len : 1);
}

/* The body of the `stasis_handle` export: decodes the request the host wrote
 * into the buffer from stasis__alloc (and frees it), runs `handler`, or
 * answers 400 for malformed bytes. */
STASIS__FN uint64_t stasis__handle(uint32_t ptr, uint32_t len, stasis_handler handler) {
    uint8_t *input = (uint8_t *)(uintptr_t)ptr;
    stasis_response res;
    stasis_response_init(&res);
    stasis_request req;
    void *arena = NULL;
    const char *err = input ? stasis_decode_request(input, len, &req, &arena)
                            : "no request buffer";
    if (err)
        stasis_response_text(&res, 400, "bad request from host: %s\n", err);
    else
        handler(&req, &res);
    free(arena);
    free(input);
    /* What the handler left in stdio's buffers goes out with its delivery,
     * never into a snapshot (a fork would print it again). */
    fflush(NULL);
    return stasis__finish(&res);
}

/* The state a `save` function writes (see STASIS_EXPORT_STATE). */
typedef struct stasis_state {
    stasis__buf stasis__buf;
    int stasis__failed;
} stasis_state;

/* Appends `len` bytes of `data` to the state. Returns 0, or -1 if memory
 * ran out (the upgrade is then refused). */
STASIS__FN int stasis_state_write(stasis_state *out, const void *data, size_t len) {
    if (stasis__buf_put(&out->stasis__buf, data, len)) {
        out->stasis__failed = 1;
        return -1;
    }
    return 0;
}

typedef int (*stasis_save_fn)(stasis_state *out);
typedef int (*stasis_load_fn)(const uint8_t *data, size_t len);

/* The body of the `stasis_save_state` export: the bytes `save` wrote, kept
 * until the next call; a refusal traps (the upgrade is refused). */
STASIS__FN uint64_t stasis__save_state(stasis_save_fn save) {
    static stasis__buf last;
    stasis__buf_free(&last);
    stasis_state out = {{0}, 0};
    if (save(&out) || out.stasis__failed) {
        stasis__buf_free(&out.stasis__buf);
        __builtin_trap();
    }
    last = out.stasis__buf;
    return stasis__pack(last.data, last.len);
}

/* The body of the `stasis_load_state` export: runs `load` on the buffer
 * from stasis__alloc (and frees it); 0 accepts the state. */
STASIS__FN uint32_t stasis__load_state(uint32_t ptr, uint32_t len, stasis_load_fn load) {
    uint8_t *input = (uint8_t *)(uintptr_t)ptr;
    int rc = input ? load(input, len) : -1;
    free(input);
    return rc ? 1 : 0;
}

#define STASIS__STR2(x) #x
#define STASIS__STR(x) STASIS__STR2(x)

/* Exports `handler` (a stasis_handler) as the actor, with `stasis_alloc`
 * and the `stasis-abi` custom section (ABI version as a little-endian u32). */
#define STASIS_EXPORT_ACTOR(handler)                                                         \
    __asm__(".section \".custom_section.stasis-abi\",\"\",@\n"                              \
            "\t.int32 " STASIS__STR(STASIS_ABI_VERSION) "\n"                                 \
            "\t.text\n");                                                                    \
    __attribute__((export_name("stasis_alloc"))) uint32_t stasis_alloc(uint32_t len);        \
    uint32_t stasis_alloc(uint32_t len) { return stasis__alloc(len); }                       \
    __attribute__((export_name("stasis_handle"))) uint64_t stasis_handle(uint32_t ptr,       \
                                                                         uint32_t len);      \
    uint64_t stasis_handle(uint32_t ptr, uint32_t len) { return stasis__handle(ptr, len, handler); } \
    typedef int stasis__actor_exported

#define STASIS__EXPORT_HOOK(export, fn)                                                      \
    __attribute__((export_name(#export))) void export(void);                                 \
    void export(void) { fn(); fflush(NULL); }                                                \
    typedef int stasis__hook_exported

/* Exports `fn` (void fn(void)) as `stasis_init`: once, at creation. */
#define STASIS_EXPORT_INIT(fn) STASIS__EXPORT_HOOK(stasis_init, fn)
/* Exports `fn` as `stasis_on_pause`: before the snapshot of a pause. */
#define STASIS_EXPORT_ON_PAUSE(fn) STASIS__EXPORT_HOOK(stasis_on_pause, fn)
/* Exports `fn` as `stasis_on_resume`: after a snapshot was restored. */
#define STASIS_EXPORT_ON_RESUME(fn) STASIS__EXPORT_HOOK(stasis_on_resume, fn)
/* Exports `save` and `load` as the state hand-over pair (see the top). */
#define STASIS_EXPORT_STATE(save, load)                                                      \
    __attribute__((export_name("stasis_save_state"))) uint64_t stasis_save_state(void);      \
    uint64_t stasis_save_state(void) { return stasis__save_state(save); }                    \
    __attribute__((export_name("stasis_load_state"))) uint32_t stasis_load_state(uint32_t ptr, \
                                                                                 uint32_t len); \
    uint32_t stasis_load_state(uint32_t ptr, uint32_t len) {                                 \
        return stasis__load_state(ptr, len, load);                                           \
    }                                                                                        \
    typedef int stasis__state_exported

#if STASIS_ABI_VERSION >= 2
/* Exports `fn` as `stasis_on_alarm` (ABI 2): when the actor's alarm fires;
 * a trap is retried with backoff. */
#define STASIS_EXPORT_ON_ALARM(fn) STASIS__EXPORT_HOOK(stasis_on_alarm, fn)

/* One event on one of the actor's WebSockets or streams. */
typedef struct stasis_socket_event {
    uint64_t socket;     /* its id (the request's `stasis-socket` header) */
    int closed;          /* 0: a client message; 1: it ended */
    int text;            /* a message: it came as a text frame */
    uint16_t code;       /* ended: the close code */
    const uint8_t *data; /* the message's bytes, or the close reason */
    size_t data_len;
} stasis_socket_event;

/* The body of `stasis_on_socket`: decodes the event (host-api's
 * SocketEvent: the socket as a varint, the variant as a varint, then
 * Message {bytes, bool} or Closed {u16 varint, string}) in the buffer from
 * stasis__alloc (and frees it) and runs `fn` on it. */
STASIS__FN uint32_t stasis__on_socket(uint32_t ptr, uint32_t len,
                                      void (*fn)(const stasis_socket_event *)) {
    uint8_t *buf = (uint8_t *)(uintptr_t)ptr;
    stasis__reader r = {buf, buf + len};
    stasis_socket_event e;
    memset(&e, 0, sizeof e);
    uint64_t variant, code;
    const char *err = stasis__read_varint(&r, 253, &e.socket);
    if (!err) err = stasis__read_varint(&r, 252, &variant);
    if (!err && variant == 0) {
        err = stasis__read_field(&r, 0, &e.data, &e.data_len);
        if (!err && (r.p >= r.end || *r.p > 1)) err = "a bad text flag";
        if (!err) e.text = *r.p++;
    } else if (!err && variant == 1) {
        e.closed = 1;
        err = stasis__read_varint(&r, 251, &code);
        e.code = (uint16_t)code;
        if (!err) err = stasis__read_field(&r, 1, &e.data, &e.data_len);
    } else if (!err) {
        err = "an unknown event";
    }
    if (!err) fn(&e);
    free(buf);
    fflush(NULL);
    return 0;
}

/* Exports `fn` as `stasis_on_socket` (see the top). */
#define STASIS_EXPORT_ON_SOCKET(fn)                                                          \
    __attribute__((export_name("stasis_on_socket"))) uint32_t stasis_on_socket(uint32_t ptr, \
                                                                               uint32_t len); \
    uint32_t stasis_on_socket(uint32_t ptr, uint32_t len) {                                  \
        return stasis__on_socket(ptr, len, fn);                                              \
    }                                                                                        \
    typedef int stasis__socket_exported
#endif

#endif /* STASIS_H */
