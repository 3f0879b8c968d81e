//! JavaScript actors upgraded with their state (issue 48, item 1): a
//! script's default export may have `save()` (any structured-clonable
//! value but cycles) and `load(value, fromVersion)`; `actor upgrade` and
//! `template rollout` hand the running version's saved value to the new
//! version's `load`, with the guarantees of a Rust or C hand-over (a
//! refusal leaves the actor on its version with its state). Without the
//! methods the upgrade is refused before anything happens, saying what to
//! export.

use std::path::Path;

use crate::js::engine_built;
use crate::support::{Server, client, to_actor};

/// Version 1: a counter and a log of Map entries and Dates; `save()`.
const V1: &str = r#"
let count = 0;
const seen = new Map();
export default {
  version: 1,
  async fetch(request) {
    count += 1;
    seen.set(`n${count}`, new Date(1700000000000 + count));
    return new Response(`v1 count ${count}`);
  },
  save() { return { count, seen, big: 2n ** 70n, nothing: undefined, nan: NaN }; },
};
"#;

/// Version 2: reads version 1's value (`fromVersion` 1) and answers with
/// another prefix; saves and loads its own.
const V2: &str = r#"
let count = 0;
let seen = new Map();
let from = "none";
export default {
  version: 2,
  async fetch(request) {
    if (new URL(request.url).pathname === "/check") {
      const dates = [...seen.values()].every((d) => d instanceof Date);
      return Response.json({ count, entries: seen.size, dates, from });
    }
    count += 1;
    return new Response(`v2 count ${count}`);
  },
  save() { return { count, seen }; },
  load(value, fromVersion) {
    if (value.big !== undefined && value.big !== 2n ** 70n) throw new Error("bigint lost");
    if (value.nan !== undefined && !Number.isNaN(value.nan)) throw new Error("NaN lost");
    count = value.count;
    seen = value.seen;
    from = String(fromVersion);
  },
};
"#;

/// A version whose `load` refuses anything.
const REFUSES: &str = r#"
export default {
  fetch() { return new Response("refuses"); },
  load() { throw new Error("not this state"); },
};
"#;

/// A version without `load`.
const NO_LOAD: &str = r#"
export default { fetch() { return new Response("plain"); } };
"#;

fn push(server: &Server, dir: &Path, template: &str, file: &str, source: &str) -> u64 {
    let path = dir.join(file);
    std::fs::write(&path, source).expect("write the script");
    server.cli_ok(&["template", "push", template, path.to_str().expect("utf-8")]);
    server.cli_json(&["template", "get", template])["version"]
        .as_u64()
        .expect("version")
}

async fn body(server: &Server, actor: &str, path: &str) -> String {
    let answer = to_actor(&client(), server.ingress, actor, "POST", path).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_actor_is_upgraded_with_its_state() {
    if !engine_built() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&["--workers", "1"]);
    assert_eq!(push(&server, dir.path(), "jc", "v1.js", V1), 1);
    server.create("a", "jc");
    server.create("b", "jc");
    for n in 1..=3 {
        assert_eq!(body(&server, "a", "/").await, format!("v1 count {n}"));
    }
    assert_eq!(body(&server, "b", "/").await, "v1 count 1");
    server.cli_ok(&["actor", "pause", "b"]);
    assert_eq!(push(&server, dir.path(), "jc", "v2.js", V2), 2);
    let upgraded = server.cli_json(&["actor", "upgrade", "a"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    let check: serde_json::Value =
        serde_json::from_str(&body(&server, "a", "/check").await).expect("JSON");
    assert_eq!(
        check,
        serde_json::json!({"count": 3, "entries": 3, "dates": true, "from": "1"}),
        "the Map of Dates, the count and fromVersion came over"
    );
    assert_eq!(body(&server, "a", "/").await, "v2 count 4");
    // A rollout takes the paused one too, at once with --eager.
    let out = server.cli(&["template", "rollout", "jc", "--to-version", "2", "--eager"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(body(&server, "b", "/").await, "v2 count 2");
    // A version whose load throws: refused after the capture, the actor
    // stays on version 2 with its state.
    assert_eq!(push(&server, dir.path(), "jc", "refuses.js", REFUSES), 3);
    let refused = server.cli(&["actor", "upgrade", "a", "--to-version", "3"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("not this state")
            && stderr.contains("stays on version 2"),
        "{stderr}"
    );
    assert_eq!(body(&server, "a", "/").await, "v2 count 5");
    // A version without load: refused before anything, saying what to
    // export.
    assert_eq!(push(&server, dir.path(), "jc", "plain.js", NO_LOAD), 4);
    let refused = server.cli(&["actor", "upgrade", "a", "--to-version", "4"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("409")
            && stderr.contains("has no load(value, fromVersion)")
            && !stderr.contains("layouts declared differ"),
        "{stderr}"
    );
    // From version 4 (no save) back to 2: the running script has no save().
    server.create("c", "jc");
    let refused = server.cli(&["actor", "upgrade", "c", "--to-version", "2"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("has no save()"), "{stderr}");
    assert_eq!(body(&server, "a", "/").await, "v2 count 6");
}
