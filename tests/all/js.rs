//! JavaScript actors (`stasis template push NAME actor.js`, issue 36): the
//! engine (`demos/js-engine`) pre-initialised with a script at push, run by
//! the real `stasis` binary. The README session with `demos-js/counter.js`;
//! a Map, a closure and a class instance kept across pause/resume, a move
//! to another worker, a fork (which diverges) and `kill -9` + restart; `Math.random` different in two
//! actors of one template and in two forks; `Date.now()` current after a
//! resume; a syntax error refused at push with its line and column; an
//! uncaught exception answered 500, logged with its stack and rolled back;
//! the host API from JavaScript (a call to a Rust actor, an alarm that
//! wakes a paused actor); an endless loop cut by `--cpu-limit`; the chat
//! room demo (`demos-js/chat.js`).
//!
//! The engine is built where clang, lld, llvm and wasi-libc are installed;
//! where it was not, these tests fail under CI and are skipped elsewhere
//! (as the C SDK's, see [`engine_built`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stasis_test_util::wait;

use crate::support::{Answer, Server, actor_host, client, count, post, send, to_actor};

/// Whether the JavaScript engine was built into the binary.
pub(crate) fn engine_built() -> bool {
    let reason = env!("STASIS_JS_ENGINE_SKIPPED");
    if reason.is_empty() {
        return true;
    }
    let missing = format!("the JavaScript engine was not built: {reason}");
    assert!(
        std::env::var_os("CI").is_none(),
        "{missing}; CI is set, so this is a failure, not a skip"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {missing}");
    false
}

/// Writes `source` as `<dir>/<file>` and returns its path.
fn script(dir: &Path, file: &str, source: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, source).expect("write the script");
    path
}

/// Pushes `source` as template `name` (file `<name>.js`).
fn push_script(server: &Server, dir: &Path, name: &str, source: &str) {
    let path = script(dir, &format!("{name}.js"), source);
    server.cli_ok(&["template", "push", name, path.to_str().expect("utf-8")]);
}

async fn get(server: &Server, actor: &str, path: &str) -> Answer {
    to_actor(&client(), server.ingress, actor, "GET", path).await
}

async fn json(server: &Server, actor: &str, path: &str) -> serde_json::Value {
    let answer = get(server, actor, path).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{e}: {}", answer.body))
}

/// A script whose state is a Map, a closure and a class instance.
const HEAP: &str = r#"
class Tally {
  constructor() { this.items = []; }
  add(item) { this.items.push(item); return this.items.length; }
}
const seen = new Map();
const tally = new Tally();
const counter = (() => { let n = 0; return { inc: () => ++n, get: () => n }; })();
const bornAt = Date.now();

export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === "/random") {
      return Response.json({ r: [Math.random(), Math.random()],
        bytes: Array.from(crypto.getRandomValues(new Uint8Array(8))) });
    }
    if (url.pathname === "/now") return Response.json({ now: Date.now(), bornAt });
    if (request.method === "POST") {
      const k = url.searchParams.get("k") || "none";
      seen.set(k, (seen.get(k) || 0) + 1);
      tally.add(k);
      counter.inc();
    }
    return Response.json({
      map: Object.fromEntries(seen),
      items: tally.items,
      isTally: tally instanceof Tally,
      closure: counter.get(),
    });
  },
};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_counter_passes_the_reference_session() {
    if !engine_built() {
        return;
    }
    let server = crate::http::reference_session("counter-js", "js-counter-1").await;
    server.cli_ok(&["actor", "pause", "js-counter-1"]);
    let server = server.restart(&[]);
    assert_eq!(count(&post(&server, "js-counter-1").await), 5);
}

/// Issue 48, item 4: a JS actor's snapshot holds what it changed of the
/// template's evaluated heap (its initial image), not the heap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_snapshots_hold_what_changed_not_the_heap() {
    if !engine_built() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    server.push("counter-js");
    server.create("small-js", "counter-js");
    assert_eq!(count(&post(&server, "small-js").await), 1);
    let paused = server.cli_json(&["actor", "pause", "small-js"]);
    let snapshots = paused["snapshots"].as_array().expect("snapshots");
    let bytes = |i: usize| snapshots[i]["bytes"].as_u64().expect("bytes");
    assert!(bytes(0) <= 8 << 10, "a new actor's snapshot 0: {paused}");
    assert!(bytes(1) <= 64 << 10, "after one request: {paused}");
    let heap = server.cli_json(&["template", "get", "counter-js"]);
    assert!(
        heap["versions"][0]["bytes"].as_u64().expect("module bytes") > 1 << 20,
        "the template holds the evaluated heap: {heap}"
    );
    // The state is all there: after a resume, and after a restart.
    assert_eq!(count(&post(&server, "small-js").await), 2);
    server.cli_ok(&["actor", "pause", "small-js"]);
    let server = server.restart(&[]);
    assert_eq!(count(&post(&server, "small-js").await), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_heap_survives_pause_move_fork_and_kill_9() {
    if !engine_built() {
        return;
    }
    let data = tempfile::tempdir().expect("tempdir");
    let scripts = tempfile::tempdir().expect("tempdir");
    let args = ["--workers", "2"];
    let mut server = Server::start_in(data.path(), &args).expect("serve");
    push_script(&server, scripts.path(), "heap", HEAP);
    server.create("h1", "heap");
    for k in ["a", "b", "a"] {
        let answer = to_actor(&client(), server.ingress, "h1", "POST", &format!("/?k={k}")).await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    let want = serde_json::json!({
        "map": {"a": 2, "b": 1}, "items": ["a", "b", "a"], "isTally": true, "closure": 3
    });
    assert_eq!(json(&server, "h1", "/").await, want);

    server.cli_ok(&["actor", "pause", "h1"]);
    assert_eq!(
        json(&server, "h1", "/").await,
        want,
        "after pause and resume"
    );

    // A move to the other worker carries the heap.
    let from = server.cli_json(&["actor", "get", "h1"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "h1", "--to", to]);
    assert_eq!(server.cli_json(&["actor", "get", "h1"])["worker"], to);
    assert_eq!(json(&server, "h1", "/").await, want, "after a move");

    // The fork starts from h1's heap and diverges.
    server.cli_ok(&["actor", "fork", "h1", "h2"]);
    let answer = to_actor(&client(), server.ingress, "h2", "POST", "/?k=c").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let forked = serde_json::json!({
        "map": {"a": 2, "b": 1, "c": 1}, "items": ["a", "b", "a", "c"],
        "isTally": true, "closure": 4
    });
    assert_eq!(json(&server, "h2", "/").await, forked);
    assert_eq!(
        json(&server, "h1", "/").await,
        want,
        "the source is unchanged"
    );

    // Two forks of one actor draw different random numbers.
    server.cli_ok(&["actor", "fork", "h1", "h3"]);
    let (r2, r3) = (
        json(&server, "h2", "/random").await,
        json(&server, "h3", "/random").await,
    );
    assert_ne!(r2["r"], r3["r"], "forks share Math.random");
    assert_ne!(
        r2["bytes"], r3["bytes"],
        "forks share crypto.getRandomValues"
    );

    server.kill();
    let server = Server::start_in(data.path(), &args).expect("serve again");
    assert_eq!(json(&server, "h1", "/").await, want, "after kill -9");
    assert_eq!(
        json(&server, "h2", "/").await,
        forked,
        "the fork after kill -9"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_actors_of_one_template_draw_apart_and_read_the_real_clock() {
    if !engine_built() {
        return;
    }
    let scripts = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&[]);
    push_script(&server, scripts.path(), "heap", HEAP);
    server.create("r1", "heap");
    server.create("r2", "heap");
    let (a, b) = (
        json(&server, "r1", "/random").await,
        json(&server, "r2", "/random").await,
    );
    assert_ne!(
        a["r"], b["r"],
        "two actors of one template share Math.random"
    );
    assert_ne!(a["bytes"], b["bytes"]);
    let again = json(&server, "r1", "/random").await;
    assert_ne!(a["r"], again["r"]);

    // The top level ran at push: both actors were born at that time.
    let born = json(&server, "r1", "/now").await["bornAt"].clone();
    assert_eq!(json(&server, "r2", "/now").await["bornAt"], born);

    server.cli_ok(&["actor", "pause", "r1"]);
    // Far enough apart that a clock restored from the snapshot would show.
    // sleep: real time passes, so a clock restored from the snapshot would show.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let now = json(&server, "r1", "/now").await["now"]
        .as_f64()
        .expect("now");
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as f64;
    assert!(
        (real - now).abs() < 1000.0,
        "Date.now() after a resume is {now}, the real time {real}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_syntax_error_is_refused_at_push_with_line_and_column() {
    if !engine_built() {
        return;
    }
    let scripts = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&[]);
    let bad = script(
        scripts.path(),
        "broken.js",
        "let n = 0;\nexport default {\n  fetch(request) { return new Response(n +); },\n};\n",
    );
    let out = server.cli(&["template", "push", "broken", bad.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("broken.js: syntax error at line 3, column"),
        "{stderr}"
    );
    // A top level that throws is refused too, with the exception.
    let throws = script(
        scripts.path(),
        "throws.js",
        "throw new TypeError('not today');\nexport default { fetch() {} };\n",
    );
    let out = server.cli(&[
        "template",
        "push",
        "throws",
        throws.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TypeError: not today"), "{stderr}");
    // No default export with fetch: refused.
    let none = script(scripts.path(), "none.js", "export const x = 1;\n");
    let out = server.cli(&["template", "push", "none", none.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no default export"));
    // Found by a new user: a host function called at the top level was
    // refused with a wasm backtrace of mangled Rust frames. It is named,
    // with where to call it instead.
    let host = script(
        scripts.path(),
        "host.js",
        "import { selfName } from \"stasis\";\nconst me = selfName();\n\
         export default { fetch() { return new Response(me); } };\n",
    );
    let out = server.cli(&["template", "push", "host", host.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("host.js: the script's top level called the host function stasis::self_name")
            && stderr.contains("call it inside fetch")
            && !stderr.contains("backtrace")
            && !stderr.contains("_ZN"),
        "{stderr}"
    );
    let list = server.cli_json(&["template", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_uncaught_exception_answers_500_logs_its_stack_and_rolls_back() {
    if !engine_built() {
        return;
    }
    let scripts = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&[]);
    push_script(
        &server,
        scripts.path(),
        "boom",
        r#"
let count = 0;
function explode() { throw new Error("boom at " + count); }
export default {
  fetch(request) {
    count += 1;
    if (new URL(request.url).pathname === "/boom") explode();
    return new Response(`count: ${count}\n`);
  },
};
"#,
    );
    server.create("b1", "boom");
    assert_eq!(count(&post(&server, "b1").await), 1);
    assert_eq!(count(&post(&server, "b1").await), 2);
    let answer = to_actor(&client(), server.ingress, "b1", "POST", "/boom").await;
    assert_eq!(answer.status, 500, "{answer:?}");
    // The client learns that the actor trapped and where to look, not the
    // exception's text nor the engine's internals (issue 47, input 10).
    assert!(answer.body.contains("actor b1 trapped"), "{answer:?}");
    for internal in ["boom at", "panicked", "js-engine", "RUST_BACKTRACE", "wasm"] {
        assert!(!answer.body.contains(internal), "{internal}: {answer:?}");
    }
    let got = server.cli_json(&["actor", "get", "b1"]);
    assert!(
        got["error"].as_str().is_some_and(|e| e
            .contains("uncaught exception in fetch: Error: boom at 3")
            && !e.contains("panicked")),
        "the exception, without the engine's panic: {got}"
    );
    // The increment before the throw is rolled back with the trap.
    assert_eq!(count(&post(&server, "b1").await), 3);
    log_holds(
        &server,
        &["Uncaught exception in fetch: Error: boom at 3", "explode"],
    )
    .await;
    // Found by a new user: a body that is not JSON threw from the engine's
    // json() with no frame in the script. The stack names the line of the
    // script's `await request.json()`.
    push_script(
        &server,
        scripts.path(),
        "parse",
        "export default {\n  async fetch(request) {\n    \
         return Response.json(await request.json());\n  },\n};\n",
    );
    server.create("p1", "parse");
    let answer = to_actor(&client(), server.ingress, "p1", "POST", "/").await;
    assert_eq!(answer.status, 500, "{answer:?}");
    log_holds(
        &server,
        &[
            "Uncaught exception in fetch: SyntaxError",
            "at fetch (parse.js:3:",
        ],
    )
    .await;
}

/// Waits (10 s at most) until the server's log holds every one of `texts`.
async fn log_holds(server: &Server, texts: &[&str]) {
    wait::until_else_async(
        &format!("{texts:?} in the log"),
        Duration::from_secs(10),
        async || {
            let log = server.log();
            if texts.iter().all(|t| log.contains(t)) {
                Ok(())
            } else {
                Err(format!("\n{log}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_calls_a_rust_actor_and_sets_an_alarm() {
    if !engine_built() {
        return;
    }
    let scripts = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&[]);
    server.push("counter");
    server.create("rust-counter", "counter");
    push_script(
        &server,
        scripts.path(),
        "host",
        r#"
import { call, setAlarm, getAlarm, selfName } from "stasis";
let fired = 0;
export default {
  async fetch(request) {
    const path = new URL(request.url).pathname;
    if (path === "/call") {
      const r = await call("rust-counter", "/", { method: "POST" });
      return new Response(`${selfName()} got ${r.status}: ${await r.text()}`);
    }
    if (path === "/alarm") {
      setAlarm(Date.now() + 1000);
      return new Response(`alarm at ${getAlarm() !== null}\n`, { status: 202 });
    }
    return new Response(`fired: ${fired}\n`);
  },
  alarm() { fired += 1; },
};
"#,
    );
    server.create("js-host", "host");
    let answer = to_actor(&client(), server.ingress, "js-host", "POST", "/call").await;
    assert_eq!(
        answer.body, "js-host got 200: hello from: worker-1 | preserved memory count: 1\n",
        "{answer:?}"
    );
    let answer = to_actor(&client(), server.ingress, "js-host", "POST", "/alarm").await;
    assert_eq!(answer.status, 202, "{answer:?}");
    let paused = server.cli_json(&["actor", "pause", "js-host"]);
    assert_eq!(paused["state"], "paused");
    // The alarm wakes the paused actor by itself (no request is sent
    // until it did: `actor get` does not wake an actor).
    wait::until_async(
        "the alarm to wake the actor",
        Duration::from_secs(15),
        async || (server.cli_json(&["actor", "get", "js-host"])["state"] != "paused").then_some(()),
    )
    .await;
    wait::until_else_async("the alarm to fire", Duration::from_secs(15), async || {
        let answer = get(&server, "js-host", "/").await;
        if answer.body == "fired: 1\n" {
            Ok(())
        } else {
            Err(format!("{answer:?}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_endless_loop_is_cut_by_the_cpu_limit_and_rolled_back() {
    if !engine_built() {
        return;
    }
    let scripts = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&["--cpu-limit", "1s"]);
    push_script(
        &server,
        scripts.path(),
        "spin",
        r#"
let count = 0;
export default {
  fetch(request) {
    count += 1;
    if (new URL(request.url).pathname === "/spin") for (;;) {}
    return new Response(`count: ${count}\n`);
  },
};
"#,
    );
    server.create("s1", "spin");
    assert_eq!(count(&post(&server, "s1").await), 1);
    let spin = to_actor(&client(), server.ingress, "s1", "POST", "/spin").await;
    assert_eq!(spin.status, 504, "{spin:?}");
    assert!(spin.body.contains("--cpu-limit"), "{spin:?}");
    assert_eq!(
        count(&post(&server, "s1").await),
        2,
        "the spin is rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_chat_room_keeps_its_messages_across_a_pause() {
    if !engine_built() {
        return;
    }
    let server = Server::start(&[]);
    server.push("chat-js");
    server.create("room", "chat-js");
    let room_host = actor_host("room");
    for (from, text) in [("ann", "hi"), ("bob", "hello"), ("ann", "bye")] {
        let body = serde_json::json!({ "from": from, "text": text }).to_string();
        let answer = send(
            &client(),
            server.ingress,
            "POST",
            &room_host,
            "/",
            body.into(),
        )
        .await;
        assert_eq!(answer.status, 201, "{answer:?}");
    }
    let bad = send(
        &client(),
        server.ingress,
        "POST",
        &room_host,
        "/",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(bad.status, 400, "{bad:?}");
    server.cli_ok(&["actor", "pause", "room"]);
    let room = json(&server, "room", "/?since=1").await;
    let texts: Vec<&str> = room["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert_eq!(texts, ["hello", "bye"]);
    assert_eq!(room["people"], serde_json::json!({"ann": 2, "bob": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_env_is_the_templates_environment() {
    if !engine_built() {
        return;
    }
    let scripts = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&[]);
    let path = script(
        scripts.path(),
        "env.js",
        "export default { fetch(request, env) { return new Response(`${env.GREETING} ${env.MISSING}`); } };\n",
    );
    let path = path.to_str().expect("utf-8");
    server.cli_ok(&[
        "template",
        "push",
        "env",
        path,
        "--env",
        "GREETING=hello there",
    ]);
    server.create("e1", "env");
    assert_eq!(get(&server, "e1", "/").await.body, "hello there undefined");
}
