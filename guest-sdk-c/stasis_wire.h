/*
 * stasis_wire.h: the wire format of host-api/src/wire.rs for stasis.h:
 * a bounds-checked decoder (every length checked against what is left,
 * strings checked for UTF-8) and growable buffers for the encoder.
 * Included by stasis.h; not a header of its own.
 */
#ifndef STASIS_WIRE_H
#define STASIS_WIRE_H

#ifndef STASIS_H
#error "include stasis.h, not stasis_wire.h"
#endif

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

/* Reads a list of headers into `headers` (NULL: only counts them). */
STASIS__FN const char *stasis__read_headers(stasis__reader *r, stasis_header *headers,
                                            size_t *header_count, stasis__sink *sink) {
    uint64_t count;
    const char *err = stasis__read_varint(r, 253, &count);
    if (err) return err;
    /* Each header takes at least two bytes (two empty lengths). */
    if (count > (uint64_t)(r->end - r->p) / 2) return "a header count beyond the end of the message";
    for (uint64_t i = 0; i < count; i++) {
        stasis_header scratch, *h = headers ? &headers[i] : &scratch;
        if ((err = stasis__take(r, sink, 1, &h->name, &h->name_len))) return err;
        if ((err = stasis__take(r, sink, 0, &h->value, &h->value_len))) return err;
    }
    *header_count = (size_t)count;
    return NULL;
}

/* One pass over a message (a request, or a response in ABI 2) into `out`.
 * With `headers` and `sink->text` NULL it only validates and counts
 * (*header_count, sink->used); with them it fills `out`. Returns NULL or
 * the reason the bytes are malformed. */
typedef const char *(*stasis__parser)(stasis__reader *r, void *out, stasis_header *headers,
                                      size_t *header_count, stasis__sink *sink);

STASIS__FN const char *stasis__parse_request(stasis__reader *r, void *out,
                                             stasis_header *headers, size_t *header_count,
                                             stasis__sink *sink) {
    stasis_request *req = (stasis_request *)out;
    const char *err;
    if ((err = stasis__take(r, sink, 1, &req->method, &req->method_len))) return err;
    if ((err = stasis__take(r, sink, 1, &req->uri, &req->uri_len))) return err;
    if ((err = stasis__read_headers(r, headers, header_count, sink))) return err;
    if ((err = stasis__read_field(r, 0, &req->body, &req->body_len))) return err;
    if ((err = stasis__take(r, sink, 1, &req->actor, &req->actor_len))) return err;
    return stasis__take(r, sink, 1, &req->worker, &req->worker_len);
}

/* Runs `parse` twice over buf[0..len): once to validate and size, once to
 * fill `out` with the headers and NUL-terminated strings copied into one
 * malloc'd block (*arena). Returns NULL, or the reason with *arena NULL. */
STASIS__FN const char *stasis__decode(stasis__parser parse, const uint8_t *buf, size_t len,
                                      void *out, const stasis_header **headers,
                                      size_t *header_count, void **arena) {
    size_t count = 0;
    stasis__sink sink = {NULL, 0};
    stasis__reader r = {buf, buf + len};
    *arena = NULL;
    const char *err = parse(&r, out, NULL, &count, &sink);
    if (err) return err;
    if (r.p != r.end) return "bytes left over after the message";
    size_t header_bytes = count * sizeof(stasis_header); /* count <= len / 2: no overflow */
    if (sink.used > SIZE_MAX - header_bytes) return "the message does not fit in memory";
    void *block = malloc(header_bytes + sink.used);
    if (!block) return "the message does not fit in memory";
    stasis__sink fill = {(char *)block + header_bytes, 0};
    stasis__reader again = {buf, buf + len};
    err = parse(&again, out, (stasis_header *)block, &count, &fill);
    if (err) { /* cannot happen: the same bytes passed above */
        free(block);
        return err;
    }
    *headers = (const stasis_header *)block;
    *header_count = count;
    *arena = block;
    return NULL;
}

/* Decodes exactly one request from buf[0..len). On success returns NULL and
 * sets *arena to one malloc'd block holding the headers and the strings
 * (free it when done; req->body points into buf). Otherwise returns the
 * reason (a static string) and leaves *arena NULL. */
STASIS__FN const char *stasis_decode_request(const uint8_t *buf, size_t len, stasis_request *req,
                                             void **arena) {
    memset(req, 0, sizeof *req);
    return stasis__decode(stasis__parse_request, buf, len, req, &req->headers, &req->header_count,
                          arena);
}

/* ---- buffers ------------------------------------------------------------ */

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

#endif /* STASIS_WIRE_H */
