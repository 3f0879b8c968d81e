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
use crate::rollout::{create, pause};
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
    // A save() that returns what cannot be cloned: the refusal quotes the
    // script's exception, not the trap around it (found by a new user).
    assert_eq!(push(&server, dir.path(), "jc", "bad-save.js", BAD_SAVE), 5);
    server.create("d", "jc");
    let refused = server.cli(&["actor", "upgrade", "d", "--to-version", "2"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("uncaught exception in save: TypeError: save() returned a Item")
            && stderr.contains("stays on version 5")
            && !stderr.contains("unreachable")
            && !stderr.contains("stasis:prelude"),
        "{stderr}"
    );
}

/// A version whose `save()` returns a class instance.
const BAD_SAVE: &str = r#"
class Item { constructor(n) { this.n = n; } }
export default {
  fetch() { return new Response("bad save"); },
  save() { return { items: [new Item(1)] }; },
  load() {},
};
"#;

/// Version `v` of a counter that hands its count to the next version:
/// answers `v<v> <count>`.
fn handing_counter(v: u32) -> String {
    format!(
        "let count = 0;\n\
         export default {{\n  version: {v},\n  \
         fetch() {{ count += 1; return new Response(`v{v} ${{count}}`); }},\n  \
         save() {{ return count; }},\n  \
         load(value) {{ count = value; }},\n}};\n"
    )
}

/// `(version, count)` of a [`handing_counter`]'s answer.
fn version_and_count(answer: &crate::support::Answer) -> (u32, u64) {
    assert_eq!(answer.status, 200, "{answer:?}");
    let parsed = answer.body.strip_prefix('v').and_then(|rest| {
        let (v, n) = rest.split_once(' ')?;
        Some((v.parse().ok()?, n.parse().ok()?))
    });
    parsed.unwrap_or_else(|| panic!("not a counter's answer: {answer:?}"))
}

/// A rollout over 200 JavaScript actors (issue 48) while eight clients
/// post without pause to the 150 running ones: every request is answered
/// 200 with the actor's next count (none lost, none applied twice across
/// the hand-over), no actor answers version 1 after version 2, and the 50
/// paused ones are upgraded at their next request with their count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_over_200_javascript_actors_keeps_every_count_under_8_clients() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const ACTORS: usize = 200;
    const PAUSED: usize = 50;
    const CLIENTS: usize = 8;
    if !engine_built() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&["--workers", "2"]);
    assert_eq!(
        push(&server, dir.path(), "jr", "v1.js", &handing_counter(1)),
        1
    );
    let names: Vec<String> = (0..ACTORS).map(|i| format!("j{i:03}")).collect();
    // Each actor counts one request; the first PAUSED are paused.
    let server_ref = &server;
    for batch in names.chunks(16) {
        let made = batch.iter().map(|name| async move {
            create(server_ref, name, "jr").await;
            let first = to_actor(&client(), server_ref.ingress, name, "POST", "/").await;
            assert_eq!(version_and_count(&first), (1, 1), "{name}");
        });
        futures_util::future::join_all(made).await;
    }
    for name in &names[..PAUSED] {
        pause(&server, name).await;
    }
    assert_eq!(
        push(&server, dir.path(), "jr", "v2.js", &handing_counter(2)),
        2
    );

    let running: Arc<Vec<String>> = Arc::new(names[PAUSED..].to_vec());
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for k in 0..CLIENTS {
        let (running, sent, stop) = (running.clone(), sent.clone(), stop.clone());
        let ingress = server.ingress;
        clients.push(tokio::spawn(async move {
            let http = client();
            let mine: Vec<&String> = running.iter().skip(k).step_by(CLIENTS).collect();
            // Each actor's last (version, count): only this client posts to it.
            let mut last = vec![(1u32, 1u64); mine.len()];
            let mut answered = [0u64; 2];
            while !stop.load(Ordering::SeqCst) {
                for (i, name) in mine.iter().enumerate() {
                    let answer = to_actor(&http, ingress, name, "POST", "/").await;
                    let (v, n) = version_and_count(&answer);
                    assert_eq!(
                        n,
                        last[i].1 + 1,
                        "{name}: the next count, after {:?}",
                        last[i]
                    );
                    assert!(v >= last[i].0, "{name}: version {v} after {}", last[i].0);
                    last[i] = (v, n);
                    answered[v as usize - 1] += 1;
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            }
            let last: Vec<(String, (u32, u64))> = mine.into_iter().cloned().zip(last).collect();
            (last, answered)
        }));
    }
    let at_least = async |n: u64| {
        stasis_test_util::wait::until_async(
            &format!("{n} requests answered"),
            std::time::Duration::from_secs(120),
            async || (sent.load(Ordering::SeqCst) >= n).then_some(()),
        )
        .await;
    };
    at_least(300).await;
    let status = server.cli_json(&["template", "rollout", "jr", "--to-version", "2"]);
    assert_eq!(status["failed"], 0, "{status}");
    assert_eq!(
        status["deferred"], PAUSED as u64,
        "paused: at their next resume: {status}"
    );
    at_least(sent.load(Ordering::SeqCst) + 300).await;
    stop.store(true, Ordering::SeqCst);
    let mut answered = [0u64; 2];
    let mut counts = std::collections::BTreeMap::new();
    for c in clients {
        let (last, by_version) = c.await.expect("client");
        answered[0] += by_version[0];
        answered[1] += by_version[1];
        counts.extend(last);
    }
    assert!(
        answered[0] > 0 && answered[1] > 0,
        "both versions answered: {answered:?}"
    );
    // Every running actor is on version 2 with its count; every paused
    // one is upgraded by its next request, with its count of 1.
    for name in &names {
        let (_, n) = counts.get(name).copied().unwrap_or((1, 1));
        let answer = to_actor(&client(), server.ingress, name, "POST", "/").await;
        assert_eq!(version_and_count(&answer), (2, n + 1), "{name}");
    }
    let what = "the rollout to finish with every actor upgraded";
    stasis_test_util::wait::until_else(what, std::time::Duration::from_secs(30), || {
        let status = server.cli_json(&["template", "rollout-status", "jr"]);
        let done = status["state"] == "finished"
            && status["upgraded"] == ACTORS as u64
            && status["failed"] == 0;
        if done { Ok(()) } else { Err(status) }
    });
}
