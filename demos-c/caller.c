/*
 * The caller actor in C (ABI 2), answering exactly as the Rust one
 * (demos/caller): `POST /call/<actor>` calls `<actor>` with `POST /` and an
 * empty body and answers with the callee's status, content type and body;
 * `POST /send/<actor>` sends the same one-way and answers 202. A longer
 * path is passed on: `POST /call/<actor>/<rest>` calls `<actor>` with
 * `POST /<rest>`. A host-function error answers its status (404 no such
 * actor, 508 loop detected, 504 deadline, ...) with the reason.
 *
 * Built by the root crate's build.rs into target/demos/caller-c.wasm.
 */
#include "stasis.h"

static const char usage[] = "use POST /call/<actor> or POST /send/<actor>\n";

/* Answers error `code` of "<verb><actor>" ("call b", "send to b") as the
 * Rust demo: its status, and the host's reason (or the error's text). */
static void failed(stasis_response *res, const char *verb, const char *actor, int code) {
    char *reason;
    size_t reason_len;
    if (stasis_last_error(&reason, &reason_len) == 0) {
        stasis_response_text(res, stasis_error_status(code), "%s%s failed: %.*s\n", verb, actor,
                             (int)reason_len, reason);
        free(reason);
    } else {
        stasis_response_text(res, stasis_error_status(code), "%s%s failed: %s\n", verb, actor,
                             stasis_error_text(code));
    }
}

/* Splits `rest` (after `/call/` or `/send/`) into the actor's name and the
 * uri passed on: "b" gives ("b", "/"), "b/x/y" gives ("b", "/x/y"). Both
 * are malloc'd; NULL on out of memory. */
static int target(const char *rest, size_t len, char **actor, char **uri) {
    const char *slash = memchr(rest, '/', len);
    size_t actor_len = slash ? (size_t)(slash - rest) : len;
    size_t uri_len = slash ? len - actor_len : 1;
    *actor = malloc(actor_len + 1);
    *uri = malloc(uri_len + 1);
    if (!*actor || !*uri) {
        free(*actor);
        free(*uri);
        return -1;
    }
    memcpy(*actor, rest, actor_len);
    (*actor)[actor_len] = '\0';
    memcpy(*uri, slash ? slash : "/", uri_len);
    (*uri)[uri_len] = '\0';
    return 0;
}

static int has_prefix(const char *s, size_t len, const char *prefix) {
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

static void handle(const stasis_request *req, stasis_response *res) {
    if (!stasis_method_is(req, "POST")) {
        stasis_response_text(res, 405, "%s", usage);
        return;
    }
    size_t path_len = stasis_path_len(req);
    int call = has_prefix(req->uri, path_len, "/call/");
    if (!call && !has_prefix(req->uri, path_len, "/send/")) {
        stasis_response_text(res, 404, "%s", usage);
        return;
    }
    char *actor, *uri;
    if (target(req->uri + 6, path_len - 6, &actor, &uri)) {
        stasis_response_text(res, 500, "out of memory\n");
        return;
    }
    stasis_message message = {"POST", uri, NULL, 0, NULL, 0};
    if (call) {
        stasis_reply reply;
        int rc = stasis_call(actor, &message, &reply);
        if (rc) {
            failed(res, "call ", actor, rc);
        } else {
            stasis_response_set_status(res, reply.status);
            for (size_t i = 0; i < reply.header_count; i++) {
                const stasis_header *h = &reply.headers[i];
                if (stasis_find_header(h, 1, "content-type"))
                    stasis_response_add_header(res, h->name, h->value, h->value_len);
            }
            stasis_response_write(res, reply.body, reply.body_len);
            stasis_reply_free(&reply);
        }
    } else {
        int rc = stasis_send(actor, &message);
        if (rc)
            failed(res, "send to ", actor, rc);
        else
            stasis_response_text(res, 202, "sent to %s\n", actor);
    }
    free(actor);
    free(uri);
}

STASIS_EXPORT_ACTOR(handle);
