//! The Workers APIs a JavaScript actor has beyond the basics (issue 48,
//! item 3, first part), each run by a script through the real binary:
//! timers within a delivery (`setTimeout`, `setInterval`, their clears,
//! and the rule that a timer outliving its delivery is dropped with a log
//! line), `queueMicrotask`, `structuredClone`, `atob`/`btoa` and
//! `performance.now()` (never going back, also across a pause).

use crate::js::engine_built;
use crate::support::{Server, client, to_actor};

const SCRIPT: &str = r#"
let lastNow = 0;
export default {
  async fetch(request) {
    const path = new URL(request.url).pathname;
    if (path === "/late") {
      setTimeout(() => console.log("never"), 60000);
      return new Response("left a timer");
    }
    const order = [];
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, 50));
    const waited = performance.now() - t0;
    const cancelled = setTimeout(() => order.push("cancelled ran"), 10);
    clearTimeout(cancelled);
    let ticks = 0;
    await new Promise((r) => {
      const id = setInterval(() => { ticks += 1; if (ticks === 3) { clearInterval(id); r(); } }, 5);
    });
    queueMicrotask(() => order.push("microtask"));
    order.push("sync");
    await null;
    const original = { m: new Map([["k", new Date(5)]]), big: 10n, list: [1, undefined, NaN] };
    const copy = structuredClone(original);
    let refused = "";
    try { structuredClone({ f() {} }); } catch (e) { refused = `${e.name}: ${e.message}`; }
    let badBase64 = "";
    try { atob("a"); } catch (e) { badBase64 = e.name; }
    const base64 = btoa("hi\u00ff") === "aGn/" && atob(" aGn/ ") === "hi\u00ff" && btoa("ab") === "YWI="
      && atob("YWI") === "ab" && badBase64 === "InvalidCharacterError";
    const now = performance.now();
    const monotonic = now >= lastNow;
    lastNow = now;
    return Response.json({
      waited: waited >= 45,
      ticks,
      order,
      cloned: copy !== original && copy.m.get("k") instanceof Date && copy.m.get("k").getTime() === 5
        && copy.big === 10n && copy.list.length === 3 && copy.list[1] === undefined && Number.isNaN(copy.list[2]),
      refused,
      monotonic,
      base64,
    });
  },
};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_clones_and_performance_now_work_as_documented() {
    if !engine_built() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("apis.js");
    std::fs::write(&path, SCRIPT).expect("write the script");
    let server = Server::start(&["--workers", "1"]);
    server.cli_ok(&["template", "push", "apis", path.to_str().expect("utf-8")]);
    server.create("api", "apis");
    let c = client();
    for round in 0..2 {
        let answer = to_actor(&c, server.ingress, "api", "GET", "/").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let got: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON");
        assert_eq!(got["waited"], true, "{got}");
        assert_eq!(got["ticks"], 3, "{got}");
        assert_eq!(
            got["order"],
            serde_json::json!(["sync", "microtask"]),
            "{got}"
        );
        assert_eq!(got["cloned"], true, "{got}");
        assert!(
            got["refused"]
                .as_str()
                .is_some_and(|r| r.starts_with("TypeError") && r.contains("function")),
            "{got}"
        );
        assert_eq!(got["monotonic"], true, "{got}");
        assert_eq!(got["base64"], true, "{got}");
        if round == 0 {
            server.cli_ok(&["actor", "pause", "api"]);
        }
    }
    // A timer that outlives its delivery is dropped, and the log says so.
    let answer = to_actor(&c, server.ingress, "api", "GET", "/late").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let logs = server.cli_ok(&["actor", "logs", "api"]);
    assert!(
        logs.contains("1 timer(s) still pending when the delivery ended were dropped"),
        "{logs}"
    );
    assert!(!logs.contains("never"), "{logs}");
}
