/*
 * Native unit tests of stasis.h's decoder, encoder and request helpers,
 * against the byte examples of host-api/src/wire.rs. Run by
 * tests/all/c_sdk.rs (host clang), or by hand:
 *
 *     cc -std=c11 -Wall -Wextra -Wpedantic -Werror -I guest-sdk-c \
 *         -o /tmp/test_stasis guest-sdk-c/test_stasis.c && /tmp/test_stasis
 *
 * Prints one line per failed check and exits 1 if any failed.
 */
#include "stasis.h"

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static int same(const void *a, size_t a_len, const void *b, size_t b_len) {
    return a_len == b_len && (a_len == 0 || memcmp(a, b, a_len) == 0);
}

#define SAME_STR(ptr, len, lit) same((ptr), (len), (lit), sizeof(lit) - 1)

/* wire.rs, example `request_get`. */
static const uint8_t request_get[] = {0x03, 'G', 'E', 'T', 0x01, '/', 0x01, 0x04, 'h', 'o', 's',
                                      't',  0x01, 'a', 0x00, 0x02, 'c', '1', 0x01, 'w'};

/* wire.rs, example `response_text` (Response::text(200, "ok\n")). */
static const uint8_t response_text[] = {
    0xc8, 0x01, 0x0c, 'c', 'o', 'n', 't', 'e', 'n', 't', '-', 't', 'y', 'p', 'e', 0x19,
    't',  'e',  'x',  't', '/', 'p', 'l', 'a', 'i', 'n', ';', ' ', 'c', 'h', 'a', 'r',
    's',  'e',  't',  '=', 'u', 't', 'f', '-', '8', 0x03, 'o', 'k', '\n'};

/* wire.rs, example `response_404`. */
static const uint8_t response_404[] = {0xfb, 0x94, 0x01, 0x00, 0x01, 'x'};

static void decodes_the_documented_request(void) {
    stasis_request req;
    void *arena;
    const char *err = stasis_decode_request(request_get, sizeof request_get, &req, &arena);
    CHECK(err == NULL);
    if (err) return;
    CHECK(SAME_STR(req.method, req.method_len, "GET") && req.method[3] == '\0');
    CHECK(SAME_STR(req.uri, req.uri_len, "/"));
    CHECK(req.header_count == 1);
    CHECK(SAME_STR(req.headers[0].name, req.headers[0].name_len, "host"));
    CHECK(SAME_STR(req.headers[0].value, req.headers[0].value_len, "a"));
    CHECK(req.body_len == 0);
    CHECK(SAME_STR(req.actor, req.actor_len, "c1"));
    CHECK(SAME_STR(req.worker, req.worker_len, "w") && req.worker[1] == '\0');
    CHECK(stasis_method_is(&req, "GET") && !stasis_method_is(&req, "GE"));
    CHECK(stasis_request_header(&req, "HOST") == &req.headers[0]);
    CHECK(stasis_request_header(&req, "hos") == NULL);
    free(arena);
}

static void refuses_every_truncation_and_extra_byte(void) {
    uint8_t longer[sizeof request_get + 1];
    memcpy(longer, request_get, sizeof request_get);
    longer[sizeof request_get] = 0;
    for (size_t cut = 0; cut <= sizeof longer; cut++) {
        if (cut == sizeof request_get) continue;
        stasis_request req;
        void *arena = (void *)1;
        const char *err = stasis_decode_request(longer, cut, &req, &arena);
        CHECK(err != NULL);
        CHECK(arena == NULL);
    }
    /* A method that is not UTF-8, and a 0xfe (u128) length. */
    uint8_t bad[sizeof request_get];
    memcpy(bad, request_get, sizeof bad);
    bad[1] = 0xff;
    stasis_request req;
    void *arena;
    CHECK(stasis_decode_request(bad, sizeof bad, &req, &arena) != NULL);
    bad[0] = 0xfe;
    CHECK(stasis_decode_request(bad, sizeof bad, &req, &arena) != NULL);
}

static void parses_paths_and_queries(void) {
    stasis_request req;
    memset(&req, 0, sizeof req);
    req.uri = "/k?x=1&flag&y=&x=2";
    req.uri_len = strlen(req.uri);
    const char *v;
    size_t n;
    CHECK(stasis_path_len(&req) == 2 && stasis_path_is(&req, "/k") && !stasis_path_is(&req, "/"));
    CHECK(stasis_query(&req, "x", &v, &n) && SAME_STR(v, n, "1"));
    CHECK(stasis_query(&req, "flag", &v, &n) && n == 0);
    CHECK(stasis_query(&req, "y", &v, &n) && n == 0);
    CHECK(!stasis_query(&req, "z", &v, &n));
    CHECK(!stasis_query(&req, "fla", &v, &n));
    req.uri = "/k";
    req.uri_len = 2;
    CHECK(!stasis_query(&req, "x", &v, &n) && stasis_path_is(&req, "/k"));
    req.uri = "/k?";
    req.uri_len = 3;
    CHECK(!stasis_query(&req, "x", &v, &n) && stasis_query(&req, "", &v, &n) && n == 0);
}

static void encodes_the_documented_responses(void) {
    stasis_response res;
    stasis__buf out = {NULL, 0, 0};
    stasis_response_init(&res);
    stasis_response_write(&res, "junk", 4); /* replaced by _text */
    CHECK(stasis_response_text(&res, 200, "%s\n", "ok") == 0);
    CHECK(stasis__encode_response(&res, &out) == 0);
    CHECK(same(out.data, out.len, response_text, sizeof response_text));
    stasis__buf_free(&out);

    stasis_response_init(&res);
    stasis_response_set_status(&res, 404);
    CHECK(stasis_response_printf(&res, "%c", 'x') == 0);
    CHECK(stasis__encode_response(&res, &out) == 0);
    CHECK(same(out.data, out.len, response_404, sizeof response_404));
    stasis__buf_free(&out);

    /* A 300-byte body takes the fb form, a 70,000-byte one the fc form; a
     * header name that is not UTF-8 is refused. */
    static uint8_t body[70000];
    size_t lens[2] = {300, 70000};
    static const uint8_t prefixes[2][5] = {{0xfb, 0x2c, 0x01}, {0xfc, 0x70, 0x11, 0x01, 0x00}};
    size_t prefix_lens[2] = {3, 5};
    for (int i = 0; i < 2; i++) {
        stasis_response_init(&res);
        CHECK(stasis_response_add_header(&res, "\xff", "v", 1) == -1);
        CHECK(stasis_response_write(&res, body, lens[i]) == 0);
        CHECK(stasis__encode_response(&res, &out) == 0);
        CHECK(out.len == 2 + prefix_lens[i] + lens[i]);
        CHECK(out.data[0] == 0xc8 && out.data[1] == 0x00);
        CHECK(memcmp(out.data + 2, prefixes[i], prefix_lens[i]) == 0);
        stasis__buf_free(&out);
    }
}

/* Random byte flips, cuts and splices of a valid request: the decoder
 * either refuses or returns fields that lie inside what it was given (run
 * under -fsanitize=address,undefined to catch any read out of bounds). */
static void survives_mutations(void) {
    uint64_t x = 0x9e3779b97f4a7c15u;
    uint8_t buf[64];
    for (int round = 0; round < 200000; round++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t len = sizeof request_get;
        memcpy(buf, request_get, len);
        int edits = 1 + (int)(x % 4);
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x >> 8) % len;
            switch (x % 3) {
            case 0: buf[at] = (uint8_t)(x >> 40); break;
            case 1: len = at; break;
            default:
                if (len < sizeof buf) buf[len++] = (uint8_t)(x >> 32);
            }
            if (len == 0) break;
        }
        /* A copy of exactly `len` bytes, so a sanitizer sees any overread. */
        uint8_t *exact = malloc(len ? len : 1);
        if (!exact) return;
        memcpy(exact, buf, len);
        stasis_request req;
        void *arena;
        if (stasis_decode_request(exact, len, &req, &arena) == NULL) {
            CHECK(req.body_len <= len && req.method_len + req.uri_len <= len);
            CHECK(req.header_count <= len / 2);
            free(arena);
        }
        free(exact);
    }
}

#if STASIS_ABI_VERSION >= 2
/* stasis_host.h off wasm: messages encode as the host's Request layout,
 * responses decode into replies, every host function is NOT_ENABLED. */
static void host_functions_encode_decode_and_stand_in(void) {
    stasis_header host = {"host", 4, "a", 1};
    stasis_message message = {"GET", "/", &host, 1, NULL, 0};
    stasis__buf out = {NULL, 0, 0};
    CHECK(stasis__encode_message(&message, &out) == 0);
    /* request_get with an empty context (actor "", worker ""). */
    uint8_t expected[sizeof request_get - 3];
    memcpy(expected, request_get, sizeof request_get - 5);
    expected[sizeof expected - 2] = 0;
    expected[sizeof expected - 1] = 0;
    CHECK(same(out.data, out.len, expected, sizeof expected));
    stasis__buf_free(&out);

    stasis_reply reply;
    memset(&reply, 0, sizeof reply);
    void *arena;
    CHECK(stasis__decode(stasis__parse_response, response_text, sizeof response_text, &reply,
                         &reply.headers, &reply.header_count, &arena) == NULL);
    CHECK(reply.status == 200 && reply.header_count == 1);
    CHECK(stasis_reply_header(&reply, "Content-Type") != NULL);
    CHECK(SAME_STR(reply.body, reply.body_len, "ok\n"));
    free(arena);
    CHECK(stasis__decode(stasis__parse_response, response_404, sizeof response_404, &reply,
                         &reply.headers, &reply.header_count, &arena) == NULL);
    CHECK(reply.status == 404 && reply.header_count == 0 && SAME_STR(reply.body, reply.body_len, "x"));
    free(arena);
    /* A status in the fc form does not fit a u16, as in wire.rs. */
    static const uint8_t wide[] = {0xfc, 0xc8, 0, 0, 0, 0, 0};
    CHECK(stasis__decode(stasis__parse_response, wide, sizeof wide, &reply, &reply.headers,
                         &reply.header_count, &arena) != NULL);

    CHECK(stasis_call("x", &message, &reply) == STASIS_ERR_NOT_ENABLED && reply.body == NULL);
    CHECK(stasis_send("x", &message) == STASIS_ERR_NOT_ENABLED);
    CHECK(stasis_fetch(&message, &reply) == STASIS_ERR_NOT_ENABLED);
    CHECK(stasis_set_alarm(1) == STASIS_ERR_NOT_ENABLED);
    CHECK(stasis_cancel_alarm() == STASIS_ERR_NOT_ENABLED);
    CHECK(stasis_alarm() == STASIS_ERR_NOT_ENABLED);
    char *text;
    size_t len;
    CHECK(stasis_self_name(&text, &len) == STASIS_ERR_NOT_ENABLED && text == NULL);
    CHECK(stasis_last_error(&text, &len) == STASIS_ERR_NOT_ENABLED);
    stasis_reply_free(&reply);

    CHECK(stasis_error_status(STASIS_ERR_LOOP_DETECTED) == 508);
    CHECK(stasis_error_status(STASIS_ERR_NOT_FOUND) == 404);
    CHECK(stasis_error_status(-100) == 500);
    CHECK(strcmp(stasis_error_text(STASIS_ERR_DEADLINE), "deadline exceeded") == 0);
    CHECK(strcmp(stasis_error_text(-100), "internal host error") == 0);
}
#endif

int main(void) {
#if STASIS_ABI_VERSION >= 2
    host_functions_encode_decode_and_stand_in();
#endif
    survives_mutations();
    decodes_the_documented_request();
    refuses_every_truncation_and_extra_byte();
    parses_paths_and_queries();
    encodes_the_documented_responses();
    if (failures) {
        printf("%d checks failed\n", failures);
        return 1;
    }
    printf("stasis.h: all checks passed\n");
    return 0;
}
