/*
 * stasis_host.h: the host functions of ABI version 2 for stasis.h (the
 * `stasis` import module, host-api/src/imports.rs). Included by stasis.h
 * when STASIS_ABI_VERSION is 2; not a header of its own.
 */
#ifndef STASIS_HOST_H
#define STASIS_HOST_H

#ifndef STASIS_H
#error "include stasis.h, not stasis_host.h"
#endif

/* ---- host functions (ABI 2) ----------------------------------------------
 *
 * The functions of the `stasis` import module, as host-api/src/imports.rs
 * defines them, wrapped: requests are encoded and responses decoded here,
 * and a buffer result is collected with `take_result`. Each returns 0 (or,
 * for stasis_alarm, a time >= 0) or a negative STASIS_ERR_* code;
 * stasis_last_error says why. Call them from the handler or a hook; each
 * blocks the handler until it has its answer, and the actor takes no other
 * request meanwhile. Off wasm (e.g. native unit tests) every function
 * fails with STASIS_ERR_NOT_ENABLED. */

/* The error codes (host-api's HostError::code). */
enum {
    STASIS_ERR_NOT_FOUND = -1,     /* no such actor; no alarm set; nothing held */
    STASIS_ERR_LOOP_DETECTED = -2, /* the callee is already in the chain of callers */
    STASIS_ERR_DEADLINE = -3,      /* the caller's request time ran out */
    STASIS_ERR_REFUSED = -4,       /* fetch to a host not allowed by --allow-outbound */
    STASIS_ERR_TOO_LARGE = -5,     /* a body over --max-body */
    STASIS_ERR_BAD_INPUT = -6,     /* bad pointer, request, name, URL or time */
    STASIS_ERR_UNAVAILABLE = -7,   /* the target cannot be reached or take it now */
    STASIS_ERR_NOT_ENABLED = -8,   /* not enabled on this host */
    STASIS_ERR_INTERNAL = -9       /* a failure of the host itself */
};

/* What error `code` means, as host-api's HostError displays it (unknown
 * negative codes read as internal errors). */
STASIS__FN const char *stasis_error_text(int64_t code) {
    switch (code) {
    case STASIS_ERR_NOT_FOUND: return "not found";
    case STASIS_ERR_LOOP_DETECTED:
        return "loop detected: the callee is already in the chain of callers";
    case STASIS_ERR_DEADLINE: return "deadline exceeded";
    case STASIS_ERR_REFUSED: return "refused (by the outbound allow-list, or by the callee's namespace)";
    case STASIS_ERR_TOO_LARGE: return "body too large";
    case STASIS_ERR_BAD_INPUT: return "bad input";
    case STASIS_ERR_UNAVAILABLE: return "unavailable";
    case STASIS_ERR_NOT_ENABLED: return "not enabled on this host";
    default: return code >= 0 ? "ok" : "internal host error";
    }
}

/* The HTTP status that best passes error `code` on (HostError::status). */
STASIS__FN uint16_t stasis_error_status(int64_t code) {
    switch (code) {
    case STASIS_ERR_NOT_FOUND: return 404;
    case STASIS_ERR_LOOP_DETECTED: return 508;
    case STASIS_ERR_DEADLINE: return 504;
    case STASIS_ERR_REFUSED: return 502;
    case STASIS_ERR_TOO_LARGE: return 413;
    case STASIS_ERR_BAD_INPUT: return 400;
    case STASIS_ERR_UNAVAILABLE: return 503;
    case STASIS_ERR_NOT_ENABLED: return 501;
    default: return code >= 0 ? 200 : 500;
    }
}

/* A request to send with stasis_call, stasis_send or stasis_fetch. */
typedef struct stasis_message {
    const char *method; /* NUL-terminated, upper case, e.g. "POST" */
    const char *uri;    /* NUL-terminated: a path for call/send, an
                           absolute http(s) URL for fetch */
    const stasis_header *headers; /* may be NULL when header_count is 0 */
    size_t header_count;
    const void *body; /* may be NULL when body_len is 0 */
    size_t body_len;
} stasis_message;

/* A response from stasis_call or stasis_fetch: header strings are
 * NUL-terminated, the body is not. Free it with stasis_reply_free. */
typedef struct stasis_reply {
    uint16_t status;
    const stasis_header *headers;
    size_t header_count;
    const uint8_t *body;
    size_t body_len;
    void *stasis__arena; /* internal */
    void *stasis__raw;   /* internal */
} stasis_reply;

/* Frees what a reply holds (safe on a zeroed or already freed reply). */
STASIS__FN void stasis_reply_free(stasis_reply *reply) {
    free(reply->stasis__arena);
    free(reply->stasis__raw);
    memset(reply, 0, sizeof *reply);
}

/* The reply's first header named `name` (case-insensitive), or NULL. */
STASIS__FN const stasis_header *stasis_reply_header(const stasis_reply *reply,
                                                    const char *name) {
    return stasis_find_header(reply->headers, reply->header_count, name);
}

#if defined(__wasm__)
#define STASIS__IMPORT(name) __attribute__((import_module("stasis"), import_name(#name)))
/* The raw imports, signatures as host-api's imports::FUNCTIONS (pointers
 * and size_t are i32 on wasm32). Unused ones are not imported. */
STASIS__IMPORT(call)
int64_t stasis__host_call(const char *actor, size_t actor_len, const uint8_t *req, size_t req_len);
STASIS__IMPORT(send)
int32_t stasis__host_send(const char *actor, size_t actor_len, const uint8_t *req, size_t req_len);
STASIS__IMPORT(set_alarm) int32_t stasis__host_set_alarm(int64_t at_unix_ms);
STASIS__IMPORT(cancel_alarm) int32_t stasis__host_cancel_alarm(void);
STASIS__IMPORT(alarm) int64_t stasis__host_alarm(void);
STASIS__IMPORT(fetch) int64_t stasis__host_fetch(const uint8_t *req, size_t req_len);
STASIS__IMPORT(self_name) int64_t stasis__host_self_name(void);
STASIS__IMPORT(last_error) int64_t stasis__host_last_error(void);
STASIS__IMPORT(take_result) int32_t stasis__host_take_result(uint8_t *ptr, size_t len);
STASIS__IMPORT(socket_send)
int32_t stasis__host_socket_send(int64_t socket, const uint8_t *data, size_t len, int32_t text);
STASIS__IMPORT(socket_close)
int32_t stasis__host_socket_close(int64_t socket, int32_t code, const char *reason, size_t len);
STASIS__IMPORT(sockets) int64_t stasis__host_sockets(void);
#else
/* Stand-ins off wasm: every function is not enabled. */
STASIS__FN int64_t stasis__host_call(const char *a, size_t al, const uint8_t *r, size_t rl) {
    (void)a, (void)al, (void)r, (void)rl;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int32_t stasis__host_send(const char *a, size_t al, const uint8_t *r, size_t rl) {
    (void)a, (void)al, (void)r, (void)rl;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int32_t stasis__host_set_alarm(int64_t at) {
    (void)at;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int32_t stasis__host_cancel_alarm(void) { return STASIS_ERR_NOT_ENABLED; }
STASIS__FN int64_t stasis__host_alarm(void) { return STASIS_ERR_NOT_ENABLED; }
STASIS__FN int64_t stasis__host_fetch(const uint8_t *r, size_t rl) {
    (void)r, (void)rl;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int64_t stasis__host_self_name(void) { return STASIS_ERR_NOT_ENABLED; }
STASIS__FN int64_t stasis__host_last_error(void) { return STASIS_ERR_NOT_ENABLED; }
STASIS__FN int32_t stasis__host_take_result(uint8_t *p, size_t n) {
    (void)p, (void)n;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int32_t stasis__host_socket_send(int64_t s, const uint8_t *d, size_t n, int32_t t) {
    (void)s, (void)d, (void)n, (void)t;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int32_t stasis__host_socket_close(int64_t s, int32_t c, const char *r, size_t n) {
    (void)s, (void)c, (void)r, (void)n;
    return STASIS_ERR_NOT_ENABLED;
}
STASIS__FN int64_t stasis__host_sockets(void) { return STASIS_ERR_NOT_ENABLED; }
#endif

/* Encodes `m` as a host-api Request (empty context) into `out`. */
STASIS__FN int stasis__encode_message(const stasis_message *m, stasis__buf *out) {
    size_t method_len = strlen(m->method), uri_len = strlen(m->uri);
    if (stasis__buf_varint(out, method_len) || stasis__buf_put(out, m->method, method_len) ||
        stasis__buf_varint(out, uri_len) || stasis__buf_put(out, m->uri, uri_len) ||
        stasis__buf_varint(out, m->header_count))
        return -1;
    for (size_t i = 0; i < m->header_count; i++) {
        const stasis_header *h = &m->headers[i];
        if (stasis__buf_varint(out, h->name_len) || stasis__buf_put(out, h->name, h->name_len) ||
            stasis__buf_varint(out, h->value_len) || stasis__buf_put(out, h->value, h->value_len))
            return -1;
    }
    /* The body, then context.actor and context.worker: empty. */
    if (stasis__buf_varint(out, m->body_len) || stasis__buf_put(out, m->body, m->body_len))
        return -1;
    static const uint8_t empty_context[2] = {0, 0};
    return stasis__buf_put(out, empty_context, sizeof empty_context);
}

/* Collects a buffer result `r` (see host-api's imports): *data gets `r`
 * bytes plus a NUL, malloc'd. Returns 0 or an error code. */
STASIS__FN int stasis__collect(int64_t r, uint8_t **data, size_t *len) {
    *data = NULL;
    *len = 0;
    if (r < 0) return r < -9 ? STASIS_ERR_INTERNAL : (int)r;
    if ((uint64_t)r >= SIZE_MAX) return STASIS_ERR_INTERNAL;
    uint8_t *buf = malloc((size_t)r + 1);
    if (!buf) return STASIS_ERR_INTERNAL;
    int32_t rc = stasis__host_take_result(buf, (size_t)r);
    if (rc) {
        free(buf);
        return rc < -9 ? STASIS_ERR_INTERNAL : rc;
    }
    buf[r] = 0;
    *data = buf;
    *len = (size_t)r;
    return 0;
}

/* One pass over a response (see stasis__parser). */
STASIS__FN const char *stasis__parse_response(stasis__reader *r, void *out,
                                              stasis_header *headers, size_t *header_count,
                                              stasis__sink *sink) {
    stasis_reply *reply = (stasis_reply *)out;
    uint64_t status;
    const char *err = stasis__read_varint(r, 251, &status);
    if (err) return err;
    reply->status = (uint16_t)status;
    if ((err = stasis__read_headers(r, headers, header_count, sink))) return err;
    return stasis__read_field(r, 0, &reply->body, &reply->body_len);
}

/* Collects and decodes the response a buffer result `r` holds. */
STASIS__FN int stasis__reply(int64_t r, stasis_reply *reply) {
    uint8_t *raw;
    size_t len;
    int rc = stasis__collect(r, &raw, &len);
    if (rc) return rc;
    void *arena;
    if (stasis__decode(stasis__parse_response, raw, len, reply, &reply->headers,
                       &reply->header_count, &arena)) {
        free(raw);
        memset(reply, 0, sizeof *reply);
        return STASIS_ERR_INTERNAL;
    }
    reply->stasis__arena = arena;
    reply->stasis__raw = raw;
    return 0;
}

/* Sends `msg` to actor `actor` (NUL-terminated name) and waits for its
 * response in *reply (free it with stasis_reply_free; zeroed on error).
 * The callee is resumed if paused, wherever it is placed; a failure at the
 * callee (a trap, a full mailbox) is a reply with its status. Errors:
 * NOT_FOUND, LOOP_DETECTED (the callee is already in the chain of callers,
 * e.g. this actor), DEADLINE, TOO_LARGE, BAD_INPUT, UNAVAILABLE, INTERNAL. */
STASIS__FN int stasis_call(const char *actor, const stasis_message *msg, stasis_reply *reply) {
    memset(reply, 0, sizeof *reply);
    stasis__buf req = {NULL, 0, 0};
    if (stasis__encode_message(msg, &req)) {
        stasis__buf_free(&req);
        return STASIS_ERR_TOO_LARGE;
    }
    int64_t r = stasis__host_call(actor, strlen(actor), req.data, req.len);
    stasis__buf_free(&req);
    return stasis__reply(r, reply);
}

/* Hands `msg` to actor `actor`'s mailbox without waiting for its handler
 * (at most once: nothing is retried). Errors: NOT_FOUND, UNAVAILABLE,
 * TOO_LARGE, BAD_INPUT, DEADLINE, INTERNAL. */
STASIS__FN int stasis_send(const char *actor, const stasis_message *msg) {
    stasis__buf req = {NULL, 0, 0};
    if (stasis__encode_message(msg, &req)) {
        stasis__buf_free(&req);
        return STASIS_ERR_TOO_LARGE;
    }
    int32_t rc = stasis__host_send(actor, strlen(actor), req.data, req.len);
    stasis__buf_free(&req);
    return rc;
}

/* Sends `msg` (uri: an absolute http:// or https:// URL to a host allowed
 * by `--allow-outbound`) to the outside world; the response in *reply.
 * Errors: REFUSED, BAD_INPUT, UNAVAILABLE, DEADLINE, TOO_LARGE, INTERNAL. */
STASIS__FN int stasis_fetch(const stasis_message *msg, stasis_reply *reply) {
    memset(reply, 0, sizeof *reply);
    stasis__buf req = {NULL, 0, 0};
    if (stasis__encode_message(msg, &req)) {
        stasis__buf_free(&req);
        return STASIS_ERR_TOO_LARGE;
    }
    int64_t r = stasis__host_fetch(req.data, req.len);
    stasis__buf_free(&req);
    return stasis__reply(r, reply);
}

/* Sets the actor's one alarm to `at_unix_ms` (replacing any other); at that
 * time the host calls the STASIS_EXPORT_ON_ALARM hook. Errors: NOT_ENABLED,
 * BAD_INPUT (negative time), UNAVAILABLE. */
STASIS__FN int stasis_set_alarm(int64_t at_unix_ms) { return stasis__host_set_alarm(at_unix_ms); }

/* Removes the alarm (0 also when none was set). */
STASIS__FN int stasis_cancel_alarm(void) { return stasis__host_cancel_alarm(); }

/* The pending alarm in Unix ms (>= 0), or NOT_FOUND (none set), NOT_ENABLED. */
STASIS__FN int64_t stasis_alarm(void) { return stasis__host_alarm(); }

/* The actor's own name: *name is a malloc'd NUL-terminated copy (free it),
 * *len its length. Returns 0 or an error code. */
STASIS__FN int stasis_self_name(char **name, size_t *len) {
    uint8_t *data;
    int rc = stasis__collect(stasis__host_self_name(), &data, len);
    *name = (char *)data;
    return rc;
}

/* Why the last failing host function of this instance failed: *text is a
 * malloc'd NUL-terminated copy (free it). NOT_FOUND if none failed. */
STASIS__FN int stasis_last_error(char **text, size_t *len) {
    uint8_t *data;
    int rc = stasis__collect(stasis__host_last_error(), &data, len);
    *text = (char *)data;
    return rc;
}

/* The `socket` of stasis_socket_send that means every open socket and
 * stream of the actor (a broadcast). */
#define STASIS_ALL_SOCKETS (-1)

/* Writes `len` bytes at `data` to one of the actor's WebSockets or streams
 * (`socket`, the id of the request's `stasis-socket` header), or to all of
 * them with STASIS_ALL_SOCKETS; `text` non-zero sends a text frame (UTF-8).
 * Errors: NOT_FOUND (not open), TOO_LARGE (over --max-socket-message),
 * BAD_INPUT, UNAVAILABLE, NOT_ENABLED. */
STASIS__FN int stasis_socket_send(int64_t socket, const void *data, size_t len, int text) {
    return stasis__host_socket_send(socket, (const uint8_t *)data, len, text ? 1 : 0);
}

/* Closes socket `socket` with `code` (1000, or 3000 to 4999) and the
 * NUL-terminated `reason` (at most 123 bytes), or ends a stream. Errors: as
 * stasis_socket_send. */
STASIS__FN int stasis_socket_close(uint64_t socket, int code, const char *reason) {
    return stasis__host_socket_close((int64_t)socket, code, reason, strlen(reason));
}

/* The ids of the actor's open sockets and streams: *ids is malloc'd (free
 * it), *count how many. Returns 0 or an error code. */
STASIS__FN int stasis_sockets(uint64_t **ids, size_t *count) {
    uint8_t *raw;
    size_t len;
    *ids = NULL;
    *count = 0;
    int rc = stasis__collect(stasis__host_sockets(), &raw, &len);
    if (rc) return rc;
    stasis__reader r = {raw, raw + len};
    uint64_t n;
    if (stasis__read_varint(&r, 253, &n) || n > len) {
        free(raw);
        return STASIS_ERR_INTERNAL;
    }
    uint64_t *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out) {
        free(raw);
        return STASIS_ERR_INTERNAL;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (stasis__read_varint(&r, 253, &out[i])) {
            free(out);
            free(raw);
            return STASIS_ERR_INTERNAL;
        }
    }
    free(raw);
    *ids = out;
    *count = (size_t)n;
    return 0;
}

#endif /* STASIS_HOST_H */
