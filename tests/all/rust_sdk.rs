//! The Rust guest SDK's ergonomics (issue 49, item 4) through the real
//! binary, with the `todo-v1` and `todo-v2` demos: the state handed over
//! at an upgrade is self-describing, so version 2's added
//! `#[serde(default)]` fields take their defaults with no schema change;
//! state an older SDK handed over in bincode still loads; the router and
//! JSON helpers answer through the ingress (path parameters, JSON bodies,
//! 404, 405 with `allow`, 400 and 415).

use serde_json::{Value, json};
use stasis_test_util::http::{Http, Reply, send_with};

use crate::support::{Server, actor_host, client, demo};

/// One actor of a `todo` demo, reached through the ingress.
struct Todo<'a> {
    server: &'a Server,
    http: Http,
    actor: &'a str,
}

impl<'a> Todo<'a> {
    fn new(server: &'a Server, actor: &'a str) -> Self {
        let http = client();
        Todo {
            server,
            http,
            actor,
        }
    }

    /// `method path` with `body` sent as `content-type`: none for `null`,
    /// a string's text as it is (a raw body), else the JSON.
    async fn call(&self, method: &str, path: &str, content_type: &str, body: &Value) -> Reply {
        let bytes = match body {
            Value::Null => Vec::new(),
            Value::String(text) => text.clone().into_bytes(),
            json => serde_json::to_vec(json).expect("JSON"),
        };
        let headers = [("content-type", content_type)];
        let host = actor_host(self.actor);
        let addr = self.server.ingress;
        send_with(
            &self.http,
            addr,
            method,
            &host,
            path,
            &headers,
            bytes.into(),
        )
        .await
    }

    /// `method path` with a JSON `body`; the answer's JSON after checking
    /// its status.
    async fn json(&self, method: &str, path: &str, body: Value, status: u16) -> Value {
        let reply = self.call(method, path, "application/json", &body).await;
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.text());
        reply.json()
    }

    /// `GET path`, answered 200; its JSON.
    async fn get(&self, path: &str) -> Value {
        self.json("GET", path, Value::Null, 200).await
    }
}

/// Pushes demo `which` as a version of template `name`; its version.
fn push_demo(server: &Server, name: &str, which: &str) -> u64 {
    server.push_module(name, &std::fs::read(demo(which)).expect("demo built"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todo_v1_upgrades_to_v2_with_its_items_and_the_added_fields_take_their_defaults() {
    let server = Server::start(&["--workers", "1"]);
    assert_eq!(push_demo(&server, "todo", "todo-v1"), 1);
    server.create("list", "todo");
    let list = Todo::new(&server, "list");
    for title in ["milk", "eggs", "bread"] {
        list.json("POST", "/items", json!({"title": title}), 201)
            .await;
    }
    list.json("PUT", "/items/1", json!({"done": true}), 200)
        .await;
    list.json("DELETE", "/items/2", Value::Null, 204).await;
    assert_eq!(list.get("/").await, json!({"version": 1, "items": 2}));

    // Paused, then version 2 (two fields added with defaults, the same
    // state schema): resumed on version 1 to hand its state over.
    server.cli_ok(&["actor", "pause", "list"]);
    assert_eq!(push_demo(&server, "todo", "todo-v2"), 2);
    let upgraded = server.cli_json(&["actor", "upgrade", "list"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    assert_eq!(upgraded["to_version"], 2, "{upgraded}");
    let about = list.get("/").await;
    assert_eq!(about, json!({"version": 2, "items": 2, "limit": 100}));
    let expected = json!([
        {"id": 1, "title": "milk", "done": true, "priority": 0},
        {"id": 3, "title": "bread", "done": false, "priority": 0},
    ]);
    assert_eq!(list.get("/items").await, expected);
    // The next id came along too; the new field is in use.
    let jam = json!({"title": "jam", "priority": 5});
    let added = list.json("POST", "/items", jam, 201).await;
    let expected = json!({"id": 4, "title": "jam", "done": false, "priority": 5});
    assert_eq!(added, expected);
    server.cli_ok(&["actor", "pause", "list"]);
    let items = list.get("/items").await;
    assert_eq!(items.as_array().map(Vec::len), Some(3), "{items}");
}

/// A guest standing in for a `todo-v1` built with the SDK before the
/// self-describing format: its `stasis_save_state` hands over what that
/// SDK's default wrote for a list with one item, `{"id":1,"title":"old",
/// "done":true}` and next id 1: schema 1 (`u32` little-endian), then
/// bincode (standard configuration) of the state, fields by position.
fn old_sdk_todo() -> Vec<u8> {
    wat::parse_str(
        r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\01\00")
  (data (i32.const 64) "\01\00\00\00" "\01" "\01" "\01" "\01" "\03old" "\01")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64) (i64.const 0x1000000004))
  (func (export "stasis_save_state") (result i64) (i64.const 0x400000000d)))"#,
    )
    .expect("WAT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_an_older_sdk_handed_over_in_bincode_loads_and_moves_on_in_cbor() {
    let server = Server::start(&["--workers", "1"]);
    assert_eq!(server.push_module("todo", &old_sdk_todo()), 1);
    server.create("old", "todo");
    assert_eq!(push_demo(&server, "todo", "todo-v1"), 2);
    let upgraded = server.cli_json(&["actor", "upgrade", "old"]);
    assert_eq!(upgraded["path"], "hand_over", "{upgraded}");
    let old = Todo::new(&server, "old");
    let expected = json!([{"id": 1, "title": "old", "done": true}]);
    assert_eq!(old.get("/items").await, expected);
    let added = old
        .json("POST", "/items", json!({"title": "new"}), 201)
        .await;
    assert_eq!(added["id"], 2, "{added}");
    // Version 1 now saves in the self-describing format: version 2's
    // added fields take their defaults.
    assert_eq!(push_demo(&server, "todo", "todo-v2"), 3);
    let upgraded = server.cli_json(&["actor", "upgrade", "old"]);
    assert_eq!(upgraded["to_version"], 3, "{upgraded}");
    let expected = json!({"id": 1, "title": "old", "done": true, "priority": 0});
    assert_eq!(old.get("/items/1").await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_and_json_answer_through_the_ingress() {
    let server = Server::start(&["--workers", "1"]);
    push_demo(&server, "todo", "todo-v1");
    server.create("r", "todo");
    let r = Todo::new(&server, "r");
    let add = json!({"title": "a b"});
    let reply = r.call("POST", "/items", "application/json", &add).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(reply.headers["location"], "/items/1");
    let expected = json!({"id": 1, "title": "a b", "done": false});
    assert_eq!(reply.json(), expected);
    // Path parameters (the query is not part of the path); HEAD by GET.
    assert_eq!(r.get("/items/1?x=y").await, expected);
    let reply = r
        .call("HEAD", "/items", "application/json", &Value::Null)
        .await;
    assert_eq!((reply.status, reply.body.len()), (200, 0));

    // Misses: 404 for an unknown path, 405 with `allow` for another
    // method; a bad path parameter 400, an unknown item 404.
    for (method, path, status, allow, says) in [
        ("GET", "/nowhere", 404, None, "no route for GET /nowhere"),
        ("GET", "/items/", 404, None, "no route for GET /items/"),
        (
            "DELETE",
            "/items",
            405,
            Some("GET, HEAD, POST"),
            "allowed: GET, HEAD, POST",
        ),
        (
            "POST",
            "/items/1",
            405,
            Some("DELETE, GET, HEAD, PUT"),
            "method POST not allowed",
        ),
        ("GET", "/items/x", 400, None, "path parameter id = \"x\""),
        ("GET", "/items/9", 404, None, "no item 9"),
    ] {
        let reply = r.call(method, path, "application/json", &Value::Null).await;
        let text = reply.text();
        assert_eq!(reply.status, status, "{method} {path}: {text}");
        let allowed = reply
            .headers
            .get("allow")
            .map(|a| a.to_str().expect("ASCII"));
        assert_eq!(allowed, allow, "{method} {path}");
        assert!(text.contains(says), "{method} {path}: {text}");
    }
    // Bodies: not JSON, not the JSON expected, another content type.
    for (content_type, body, status, says) in [
        ("application/json", json!("{"), 400, "not the JSON expected"),
        (
            "application/json",
            json!({"name": "x"}),
            400,
            "missing field `title`",
        ),
        ("text/plain", add, 415, "content-type: text/plain"),
    ] {
        let reply = r.call("POST", "/items", content_type, &body).await;
        let text = reply.text();
        assert_eq!(reply.status, status, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
    }
    let items = r.get("/items").await;
    assert_eq!(items.as_array().map(Vec::len), Some(1), "{items}");
}
