/*
 * A compile-and-push test of stasis_host.h (ABI 2): every host function
 * wrapper and every export macro in one actor, so the module imports all
 * twelve functions of the `stasis` module and the host checks each import's
 * signature at `template push`. Routes (any method):
 *   /self   answers 200 with the actor's name (self_name + take_result);
 *   /alarm  sets, reads and cancels the alarm, answers 200 with the codes;
 *   /fetch  fetches http://127.0.0.1:9/ and answers the code or status;
 *   /sockets sends to, closes and lists sockets: answers the codes and count;
 *   anything else calls and sends to a missing actor, and prints a line
 *   with stdio that it never flushes (the SDK does, after every call).
 * Built and pushed by tests/all/c_sdk.rs.
 */
#include <inttypes.h>

#include "stasis.h"

static int hooks;

static void on_hook(void) { hooks++; }

static void handle(const stasis_request *req, stasis_response *res) {
    if (stasis_path_is(req, "/self")) {
        char *name;
        size_t len;
        int rc = stasis_self_name(&name, &len);
        if (rc) {
            stasis_response_text(res, stasis_error_status(rc), "%s\n", stasis_error_text(rc));
            return;
        }
        stasis_response_text(res, 200, "%.*s\n", (int)len, name);
        free(name);
    } else if (stasis_path_is(req, "/alarm")) {
        int set = stasis_set_alarm(1);
        int64_t at = stasis_alarm();
        int cancel = stasis_cancel_alarm();
        stasis_response_text(res, 200, "set %d alarm %" PRId64 " cancel %d\n", set, at, cancel);
    } else if (stasis_path_is(req, "/sockets")) {
        int sent = stasis_socket_send(12345, "hi", 2, 1);
        int all = stasis_socket_send(STASIS_ALL_SOCKETS, "hi", 2, 0);
        int closed = stasis_socket_close(12345, 1000, "bye");
        uint64_t *ids;
        size_t count;
        int listed = stasis_sockets(&ids, &count);
        if (listed == 0) free(ids);
        stasis_response_text(res, 200, "send %d all %d close %d list %d count %zu\n", sent, all,
                             closed, listed, count);
    } else if (stasis_path_is(req, "/fetch")) {
        stasis_message message = {"GET", "http://127.0.0.1:9/", NULL, 0, NULL, 0};
        stasis_reply reply;
        int rc = stasis_fetch(&message, &reply);
        stasis_response_text(res, 200, "fetch %d status %u\n", rc, (unsigned)reply.status);
        stasis_reply_free(&reply);
    } else {
        stasis_message message = {"POST", "/", NULL, 0, NULL, 0};
        stasis_reply reply;
        int rc = stasis_call("nobody", &message, &reply);
        if (rc == 0) stasis_reply_free(&reply);
        int sent = stasis_send("nobody", &message);
        char *reason;
        size_t len;
        if (stasis_last_error(&reason, &len) == 0) free(reason);
        printf("unflushed line %d\n", hooks);
        stasis_response_text(res, 200, "call %d send %d hooks %d\n", rc, sent, hooks);
    }
}

STASIS_EXPORT_ACTOR(handle);
STASIS_EXPORT_INIT(on_hook);
STASIS_EXPORT_ON_PAUSE(on_hook);
STASIS_EXPORT_ON_RESUME(on_hook);
STASIS_EXPORT_ON_ALARM(on_hook);

static void on_socket(const stasis_socket_event *event) { (void)event; }
STASIS_EXPORT_ON_SOCKET(on_socket);
