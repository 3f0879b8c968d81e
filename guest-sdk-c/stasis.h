/*
 * stasis.h: write a Stasis actor in C (C11, header-only, no dependencies
 * beyond the C library).
 *
 * An actor is one function that turns a request into a response;
 * STASIS_EXPORT_ACTOR makes it the module's `stasis_handle` export, adds
 * `stasis_alloc` and writes the `stasis-abi` custom section (ABI version 1:
 * the module imports WASI preview 1 and nothing else). The ABI and the byte
 * layout of requests and responses are documented in the `stasis-host-api`
 * crate (host-api/src/lib.rs and host-api/src/wire.rs); this header is a
 * second implementation of that layout.
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
 *   STASIS_EXPORT_ON_RESUME(fn)  after a fresh instance got a snapshot back.
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

/* The guest ABI version this header speaks (host-api's ABI_VERSION). */
#define STASIS_ABI_VERSION 1

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

/* The first header named `name` (ASCII case-insensitive), or NULL. */
STASIS__FN const stasis_header *stasis_request_header(const stasis_request *req,
                                                                 const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < req->header_count; i++) {
        const stasis_header *h = &req->headers[i];
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

/* ---- the wire format (host-api/src/wire.rs) ----------------------------- */

typedef struct stasis__reader {
    const uint8_t *p;
    const uint8_t *end;
} stasis__reader;

/* Reads a bincode varint whose widest accepted form is `widest` (0xfb for a
 * u16, 0xfd for a u64). Returns NULL or the reason it is malformed. */
STASIS__FN const char *stasis__read_varint(stasis__reader *r, uint8_t widest, uint64_t *out) {
    if (r->p >= r->end) return "the message ends inside an integer";
    uint8_t first = *r->p++;
    if (first <= 250) {
        *out = first;
        return NULL;
    }
    if (first > widest) return "an integer in a form too wide for its field";
    size_t n = first == 251 ? 2 : first == 252 ? 4 : 8;
    if ((size_t)(r->end - r->p) < n) return "the message ends inside an integer";
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    *out = v;
    return NULL;
}

/* Whether s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
STASIS__FN int stasis__utf8_ok(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t more;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            more = 1, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3, cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i - 1 < more) return 0;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += more + 1;
    }
    return 1;
}

/* Reads a length-prefixed field; `utf8` demands valid UTF-8 (a string). */
STASIS__FN const char *stasis__read_field(stasis__reader *r, int utf8, const uint8_t **ptr,
                                      size_t *len) {
    uint64_t n;
    const char *err = stasis__read_varint(r, 253, &n);
    if (err) return err;
    if (n > (uint64_t)(r->end - r->p)) return "a length beyond the end of the message";
    *ptr = r->p;
    *len = (size_t)n;
    r->p += n;
    if (utf8 && !stasis__utf8_ok(*ptr, *len)) return "a string that is not UTF-8";
    return NULL;
}

/* Where decoded strings go: NULL `text` only counts what they need. */
typedef struct stasis__sink {
    char *text;
    size_t used;
} stasis__sink;

STASIS__FN const char *stasis__take(stasis__reader *r, stasis__sink *sink, int utf8,
                                const char **out, size_t *out_len) {
    const uint8_t *p;
    size_t n;
    const char *err = stasis__read_field(r, utf8, &p, &n);
    if (err) return err;
    if (sink->text) {
        char *dst = sink->text + sink->used;
        if (n) memcpy(dst, p, n);
        dst[n] = '\0';
        *out = dst;
    }
    *out_len = n;
    sink->used += n + 1;
    return NULL;
}

/* One pass over a request. With `headers` and `sink->text` NULL it only
 * validates and counts (*header_count, sink->used); with them it fills
 * `req`. Returns NULL or the reason the bytes are malformed. */
STASIS__FN const char *stasis__parse_request(const uint8_t *buf, size_t len, stasis_request *req,
                                         stasis_header *headers, size_t *header_count,
                                         stasis__sink *sink) {
    stasis__reader r = {buf, buf + len};
    const char *err;
    uint64_t count;
    if ((err = stasis__take(&r, sink, 1, &req->method, &req->method_len))) return err;
    if ((err = stasis__take(&r, sink, 1, &req->uri, &req->uri_len))) return err;
    if ((err = stasis__read_varint(&r, 253, &count))) return err;
    /* Each header takes at least two bytes (two empty lengths). */
    if (count > (uint64_t)(r.end - r.p) / 2) return "a header count beyond the end of the message";
    for (uint64_t i = 0; i < count; i++) {
        stasis_header scratch, *h = headers ? &headers[i] : &scratch;
        if ((err = stasis__take(&r, sink, 1, &h->name, &h->name_len))) return err;
        if ((err = stasis__take(&r, sink, 0, &h->value, &h->value_len))) return err;
    }
    *header_count = (size_t)count;
    if ((err = stasis__read_field(&r, 0, &req->body, &req->body_len))) return err;
    if ((err = stasis__take(&r, sink, 1, &req->actor, &req->actor_len))) return err;
    if ((err = stasis__take(&r, sink, 1, &req->worker, &req->worker_len))) return err;
    if (r.p != r.end) return "bytes left over after the request";
    return NULL;
}

/* Decodes exactly one request from buf[0..len). On success returns NULL and
 * sets *arena to one malloc'd block holding the headers and the strings
 * (free it when done; req->body points into buf). Otherwise returns the
 * reason (a static string) and leaves *arena NULL. */
STASIS__FN const char *stasis_decode_request(const uint8_t *buf, size_t len,
                                                        stasis_request *req, void **arena) {
    stasis_request scratch;
    size_t count = 0;
    stasis__sink sink = {NULL, 0};
    *arena = NULL;
    memset(req, 0, sizeof *req);
    const char *err = stasis__parse_request(buf, len, &scratch, NULL, &count, &sink);
    if (err) return err;
    size_t header_bytes = count * sizeof(stasis_header); /* count <= len / 2: no overflow */
    if (sink.used > SIZE_MAX - header_bytes) return "the request does not fit in memory";
    void *block = malloc(header_bytes + sink.used);
    if (!block) return "the request does not fit in memory";
    stasis__sink fill = {(char *)block + header_bytes, 0};
    err = stasis__parse_request(buf, len, req, (stasis_header *)block, &count, &fill);
    if (err) { /* cannot happen: the same bytes passed above */
        free(block);
        return err;
    }
    req->headers = (const stasis_header *)block;
    req->header_count = count;
    *arena = block;
    return NULL;
}

/* ---- responses ---------------------------------------------------------- */

STASIS__FN int stasis__buf_reserve(stasis__buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) return -1;
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

STASIS__FN int stasis__buf_put(stasis__buf *b, const void *data, size_t len) {
    if (stasis__buf_reserve(b, len)) return -1;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

/* Appends `v` as a varint in its shortest form. */
STASIS__FN int stasis__buf_varint(stasis__buf *b, uint64_t v) {
    uint8_t out[9];
    size_t n;
    if (v <= 250) {
        out[0] = (uint8_t)v, n = 1;
    } else {
        size_t width = v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
        out[0] = width == 2 ? 251 : width == 4 ? 252 : 253;
        for (size_t i = 0; i < width; i++) out[1 + i] = (uint8_t)(v >> (8 * i));
        n = 1 + width;
    }
    return stasis__buf_put(b, out, n);
}

STASIS__FN void stasis__buf_free(stasis__buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

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
    return stasis__finish(&res);
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
    void export(void) { fn(); }                                                              \
    typedef int stasis__hook_exported

/* Exports `fn` (void fn(void)) as `stasis_init`: once, at creation. */
#define STASIS_EXPORT_INIT(fn) STASIS__EXPORT_HOOK(stasis_init, fn)
/* Exports `fn` as `stasis_on_pause`: before the snapshot of a pause. */
#define STASIS_EXPORT_ON_PAUSE(fn) STASIS__EXPORT_HOOK(stasis_on_pause, fn)
/* Exports `fn` as `stasis_on_resume`: after a snapshot was restored. */
#define STASIS_EXPORT_ON_RESUME(fn) STASIS__EXPORT_HOOK(stasis_on_resume, fn)

#endif /* STASIS_H */
