//! Template versions and live upgrade by memory carry-over (issue 31,
//! items 1 and 2): an actor moves to another version of its template with
//! its memory and globals, through its gate; a refused upgrade names the
//! difference and leaves the actor on its version with its state; the
//! version an actor runs survives a restart.
//!
//! The guests are small WAT modules speaking ABI 2: each request adds one
//! to a mutable global and answers one byte, that count plus an offset
//! that tells the versions' code apart.

use crate::support::{Server, one_byte};

/// A counter guest declaring `layout`, answering `count + offset`, with
/// `extra` more mutable globals.
fn guest(layout: &str, offset: u8, extra: usize) -> Vec<u8> {
    let globals: String = (0..extra)
        .map(|i| format!("(global $g{i} (mut i64) (i64.const 0))\n"))
        .collect();
    let wat = format!(
        r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (@custom "stasis-layout" "{layout}")
  (memory 1)
  (global $calls (mut i32) (i32.const 0))
  {globals}
  (data (i32.const 16) "\c8\00\01\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store8 (i32.const 19) (i32.add (global.get $calls) (i32.const {offset})))
    (i64.const 0x1000000004)))"#
    );
    wat::parse_str(&wat).expect("WAT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_moves_between_versions_with_its_state_and_a_refusal_changes_nothing() {
    let server = Server::start(&["--workers", "1"]);
    assert_eq!(server.push_module("wc", &guest("wc-1", 0, 0)), 1);
    server.create("u", "wc");
    for expected in 1..=3 {
        assert_eq!(one_byte(&server, "u").await, expected);
    }
    // Version 2: new code (offset 100), the same layout.
    assert_eq!(server.push_module("wc", &guest("wc-1", 100, 0)), 2);
    assert_eq!(
        one_byte(&server, "u").await,
        4,
        "a new version changes no actor by itself"
    );
    let upgraded = server.cli_json(&["actor", "upgrade", "u"]);
    assert_eq!(upgraded["from_version"], 1, "{upgraded}");
    assert_eq!(upgraded["to_version"], 2, "{upgraded}");
    assert_eq!(upgraded["template_version"], 2, "{upgraded}");
    assert_eq!(upgraded["path"], "carry_over", "{upgraded}");
    assert_eq!(one_byte(&server, "u").await, 105, "count 5 under version 2");
    // Version 3 declares another layout: refused, with the reason.
    assert_eq!(server.push_module("wc", &guest("wc-2", 0, 0)), 3);
    let refused = server.cli(&["actor", "upgrade", "u"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("layouts declared differ") && stderr.contains("stays on version 2"),
        "{stderr}"
    );
    // Version 4: the same declared layout but one more mutable global.
    assert_eq!(server.push_module("wc", &guest("wc-1", 0, 1)), 4);
    let refused = server.cli(&["actor", "upgrade", "u", "--to-version", "4"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("1 mutable globals before, 2 now"),
        "{stderr}"
    );
    let missing = server.cli(&["actor", "upgrade", "u", "--to-version", "9"]);
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("has no version 9"),
        "{missing:?}"
    );
    // Both refusals are in the actor's history (a version that does not
    // exist is not an upgrade of the actor).
    let events = server.cli_ok(&["actor", "events", "u"]);
    let failed: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("upgrade_failed: "))
        .collect();
    assert_eq!(failed.len(), 2, "{events}");
    assert!(
        failed[0].contains("from version 2 to version 3 of template wc")
            && failed[0].contains("layouts declared differ"),
        "{events}"
    );
    assert!(failed[1].contains("to version 4"), "{events}");
    // Both refusals left it on version 2 with its count.
    assert_eq!(one_byte(&server, "u").await, 106);
    assert_eq!(
        server.cli_json(&["actor", "get", "u"])["template_version"],
        2
    );
    // New actors run the newest version; a restart keeps every actor on
    // its own.
    server.create("n", "wc");
    let server = server.restart(&["--workers", "1"]);
    assert_eq!(
        one_byte(&server, "u").await,
        107,
        "version 2 after a restart"
    );
    assert_eq!(one_byte(&server, "n").await, 1, "version 4's code");
    // Back to version 1 (the same layout): its code, the count kept.
    server.cli_json(&["actor", "upgrade", "u", "--to-version", "1"]);
    assert_eq!(one_byte(&server, "u").await, 8);
    let t = server.cli_json(&["template", "get", "wc"]);
    let running: Vec<u64> = t["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["actors"].as_u64().unwrap_or(99))
        .collect();
    assert_eq!(running, vec![1, 0, 0, 1], "{t}");
}
