//! Hostile inputs to a live code upgrade (`actor upgrade`, `actor resume
//! --from-snapshot` of another version's snapshot): a version whose
//! hand-over exports trap, loop, name bytes outside memory or refuse; bad
//! version numbers; upgrades racing each other, a delete or a pause; a
//! `kill -9` right after an upgrade answered. Every refusal leaves the
//! actor (and its neighbour) on its version with its state, answers the
//! documented status, and shows no server path.
//!
//! The guests are WAT modules speaking ABI 2 with the hand-over pair and
//! no declared layout (so an upgrade between them is a hand-over): each
//! request adds one to an `i32` at address 0 and answers one byte, that
//! count plus an offset that tells the versions apart.

use std::sync::Arc;

use crate::support::{Server, one_byte, post, raw, raw_status};

/// The parts of a guest that the hostile versions replace.
struct Guest {
    offset: u8,
    save: &'static str,
    load: &'static str,
    /// Extra module fields (an `stasis_init`, ...).
    extra: &'static str,
    /// Spin this many iterations in each `stasis_save_state` first.
    save_spin: u32,
}

/// Saves the count (4 bytes at address 0).
const SAVE: &str = "(i64.const 4)";
/// Takes the count back from the buffer it is given.
const LOAD: &str = "(i32.store (i32.const 0) (i32.load (local.get 0))) (i32.const 0)";

impl Guest {
    fn good(offset: u8) -> Guest {
        Guest {
            offset,
            save: SAVE,
            load: LOAD,
            extra: "",
            save_spin: 0,
        }
    }

    fn wasm(&self) -> Vec<u8> {
        let Guest {
            offset,
            save,
            load,
            extra,
            save_spin,
        } = self;
        let wat = format!(
            r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\01\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
    (i32.store8 (i32.const 19) (i32.add (i32.load (i32.const 0)) (i32.const {offset})))
    (i64.const 0x1000000004))
  (func (export "stasis_save_state") (result i64) (local $i i32)
    (local.set $i (i32.const {save_spin}))
    (block $done (loop $spin
      (br_if $done (i32.eqz (local.get $i)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (br $spin)))
    {save})
  (func (export "stasis_load_state") (param i32 i32) (result i32) {load})
  {extra})"#
        );
        wat::parse_str(&wat).unwrap_or_else(|e| panic!("WAT: {e}\n{wat}"))
    }
}

/// `POST /v1/actors/{actor}/upgrade` with `body`: (status, raw answer).
async fn upgrade_raw(server: &Server, actor: &str, body: &str) -> (u16, String) {
    let request = format!(
        "POST /v1/actors/{actor}/upgrade HTTP/1.1\r\nHost: localhost\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let response = raw(server.admin, &request).await;
    (raw_status(&response), response)
}

/// Asserts an answer shows no server path.
fn no_path(server: &Server, text: &str) {
    let dir = server.data_dir.to_string_lossy();
    assert!(
        !text.contains(dir.as_ref()) && !text.contains("/tmp/"),
        "a server path in {text}"
    );
}

fn version_of(server: &Server, actor: &str) -> u64 {
    server.cli_json(&["actor", "get", actor])["template_version"]
        .as_u64()
        .expect("template_version")
}

/// Every hostile version is refused with the documented status and the
/// side that failed named; the actor, and its neighbour on the same
/// worker, keep serving on version 1 with their counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_version_is_refused_and_changes_no_actor() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--cpu-limit",
        "300ms",
        "--request-timeout",
        "3s",
        "--max-memory",
        "4MiB",
    ]);
    assert_eq!(server.push_module("h", &Guest::good(0).wasm()), 1);
    server.create("a", "h");
    server.create("b", "h");
    let (mut a, mut b) = (0u8, 0u8);
    for _ in 0..3 {
        a += 1;
        assert_eq!(one_byte(&server, "a").await, a);
    }
    b += 1;
    assert_eq!(one_byte(&server, "b").await, b);
    let hostile: Vec<(&str, Guest, u16, &str)> = vec![
        (
            "save traps",
            Guest {
                save: "unreachable",
                ..Guest::good(0)
            },
            422,
            "stasis_save_state",
        ),
        (
            "save traps, paused",
            Guest {
                save: "unreachable",
                ..Guest::good(0)
            },
            422,
            "stasis_save_state",
        ),
        (
            "save loops",
            Guest {
                save: "(loop $l (br $l)) (i64.const 4)",
                ..Guest::good(0)
            },
            504,
            "stasis_save_state",
        ),
        (
            "save names bytes past memory's end",
            Guest {
                save: "(i64.const 0x0000fff000001000)",
                ..Guest::good(0)
            },
            422,
            "outside linear memory",
        ),
        (
            "save names 4 GiB",
            Guest {
                save: "(i64.const 0xffffffffffffffff)",
                ..Guest::good(0)
            },
            422,
            "outside linear memory",
        ),
        (
            "load traps",
            Guest {
                load: "unreachable",
                ..Guest::good(20)
            },
            422,
            "stasis_load_state",
        ),
        (
            "load loops",
            Guest {
                load: "(loop $l (br $l)) (i32.const 0)",
                ..Guest::good(21)
            },
            504,
            "stasis_load_state",
        ),
        (
            "load refuses",
            Guest {
                load: "(i32.const 7)",
                ..Guest::good(22)
            },
            422,
            "returned 7",
        ),
        (
            "load grows past --max-memory",
            Guest {
                load: "(if (i32.eq (memory.grow (i32.const 1000)) (i32.const -1)) \
                       (then unreachable)) (i32.const 0)",
                ..Guest::good(23)
            },
            422,
            "stasis_load_state",
        ),
        (
            "stasis_init traps",
            Guest {
                extra: r#"(func (export "stasis_init") unreachable)"#,
                ..Guest::good(24)
            },
            422,
            "",
        ),
    ];
    // A version whose `stasis_alloc` names a buffer past memory's end.
    let bad_alloc = r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 65534))
  (func (export "stasis_handle") (param i32 i32) (result i64) (i64.const 0))
  (func (export "stasis_save_state") (result i64) (i64.const 4))
  (func (export "stasis_load_state") (param i32 i32) (result i32) (i32.const 0)))"#;
    let mut hostile: Vec<(&str, Vec<u8>, u16, &str)> = hostile
        .into_iter()
        .map(|(what, guest, status, names)| (what, guest.wasm(), status, names))
        .collect();
    hostile.push((
        "stasis_alloc names memory's end",
        wat::parse_str(bad_alloc).expect("WAT"),
        422,
        "",
    ));
    for (i, (what, bytes, status, names)) in hostile.into_iter().enumerate() {
        // A hostile save is the running version's: the actor runs it as
        // version 1 of its own template and moves to a good version 2.
        let saves = what.starts_with("save");
        let (actor, template) = if saves {
            let (actor, template) = (format!("x{i}"), format!("s{i}"));
            assert_eq!(server.push_module(&template, &bytes), 1);
            server.create(&actor, &template);
            for n in 1..=2 {
                assert_eq!(one_byte(&server, &actor).await, n, "{what}");
            }
            if what.contains("paused") {
                server.cli_ok(&["actor", "pause", &actor]);
            }
            (actor, template)
        } else {
            ("a".to_owned(), "h".to_owned())
        };
        let version = if saves {
            server.push_module(&template, &Guest::good(40).wasm())
        } else {
            server.push_module("h", &bytes)
        };
        let body = format!(r#"{{"to_version": {version}}}"#);
        let (got, text) = upgrade_raw(&server, &actor, &body).await;
        assert_eq!(got, status, "{what}: {text}");
        assert!(
            text.contains(names) && text.contains("stays on version 1"),
            "{what}: {text}"
        );
        no_path(&server, &text);
        assert_eq!(version_of(&server, &actor), 1, "{what}");
        if saves {
            assert_eq!(
                one_byte(&server, &actor).await,
                3,
                "{what}: keeps its count"
            );
        } else {
            a += 1;
            assert_eq!(one_byte(&server, "a").await, a, "{what}: a keeps its count");
        }
        b += 1;
        assert_eq!(one_byte(&server, "b").await, b, "{what}: b is untouched");
    }
    // After all that, a good version takes a's count, and a restart keeps
    // every actor's.
    let good = server.push_module("h", &Guest::good(40).wasm());
    let (got, text) = upgrade_raw(&server, "a", &format!(r#"{{"to_version": {good}}}"#)).await;
    assert_eq!(got, 200, "{text}");
    a += 1;
    assert_eq!(one_byte(&server, "a").await, a + 40);
    let server = server.restart(&["--workers", "1"]);
    a += 1;
    assert_eq!(one_byte(&server, "a").await, a + 40);
    b += 1;
    assert_eq!(one_byte(&server, "b").await, b);
    assert_eq!(one_byte(&server, "x0").await, 4, "x0 on version 1");
}

/// Hand-over exports with another signature are refused at push, naming
/// the export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_exports_with_a_wrong_signature_are_refused_at_push() {
    let server = Server::start(&["--workers", "1"]);
    let wrong = [
        (
            r#"(func (export "stasis_save_state") (result i32) (i32.const 0))"#,
            "stasis_save_state",
        ),
        (
            r#"(func (export "stasis_save_state") (param i32) (result i64) (i64.const 0))"#,
            "stasis_save_state",
        ),
        (
            r#"(func (export "stasis_load_state") (param i32) (result i32) (i32.const 0))"#,
            "stasis_load_state",
        ),
        (
            r#"(func (export "stasis_load_state") (param i32 i32))"#,
            "stasis_load_state",
        ),
        (
            r#"(global (export "stasis_load_state") i32 (i32.const 0))"#,
            "stasis_load_state",
        ),
    ];
    for (i, (export, name)) in wrong.iter().enumerate() {
        let wat = format!(
            r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64) (i64.const 0))
  {export})"#
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.wasm");
        std::fs::write(&path, wat::parse_str(&wat).expect("WAT")).expect("write");
        let out = server.cli(&[
            "template",
            "push",
            &format!("w{i}"),
            path.to_str().expect("utf-8"),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{export} accepted");
        assert!(stderr.contains(name), "{export}: {stderr}");
        no_path(&server, &stderr);
    }
}

/// Version 0, a version past the newest, one past `u64`, a negative one,
/// a string: each refused with a 4xx, the actor unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_version_numbers_are_refused_and_change_nothing() {
    let server = Server::start(&["--workers", "1"]);
    server.push_module("v", &Guest::good(0).wasm());
    server.create("a", "v");
    server.push_module("v", &Guest::good(100).wasm());
    assert_eq!(one_byte(&server, "a").await, 1);
    for (body, status) in [
        (r#"{"to_version": 0}"#, 404),
        (r#"{"to_version": 3}"#, 404),
        (r#"{"to_version": 18446744073709551615}"#, 404),
        (r#"{"to_version": 18446744073709551616}"#, 400),
        (r#"{"to_version": -1}"#, 400),
        (r#"{"to_version": "2"}"#, 400),
        (r#"{"to_version": 1}"#, 409),
        (r#"{"to_version": 2.5}"#, 400),
        (r#"not json"#, 400),
    ] {
        let (got, text) = upgrade_raw(&server, "a", body).await;
        assert_eq!(got, status, "{body}: {text}");
        no_path(&server, &text);
    }
    for arg in ["0", "-1", "x", "99999999999999999999"] {
        let out = server.cli(&["actor", "upgrade", "a", "--to-version", arg]);
        assert!(!out.status.success(), "--to-version {arg} accepted");
    }
    assert_eq!(one_byte(&server, "a").await, 2);
    assert_eq!(version_of(&server, "a"), 1);
    let (got, text) = upgrade_raw(&server, "nobody", "{}").await;
    assert_eq!(got, 404, "{text}");
}

/// Two upgrades of one actor at once (its save is slow enough for them to
/// meet): one wins, the other is refused or comes after; no count lost.
/// Then an upgrade racing a delete, and one racing a pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_racing_an_upgrade_a_delete_or_a_pause_keep_the_state() {
    let server = Arc::new(Server::start(&["--workers", "1", "--cpu-limit", "5s"]));
    let slow = |offset| Guest {
        save_spin: 200_000_000,
        ..Guest::good(offset)
    };
    server.push_module("r", &slow(0).wasm());
    server.create("a", "r");
    server.push_module("r", &slow(40).wasm());
    server.push_module("r", &slow(80).wasm());
    for n in 1..=3 {
        assert_eq!(one_byte(&server, "a").await, n);
    }
    let first =
        server.cli_in_background(&["actor", "upgrade", "a", "--to-version", "2", "-o", "json"]);
    let second =
        server.cli_in_background(&["actor", "upgrade", "a", "--to-version", "3", "-o", "json"]);
    let (first, second) = (first.await.expect("join"), second.await.expect("join"));
    let won: Vec<u64> = [(&first, 2), (&second, 3)]
        .iter()
        .filter(|(out, _)| out.status.success())
        .map(|(_, v)| *v)
        .collect();
    assert!(!won.is_empty(), "{first:?} {second:?}");
    for out in [&first, &second] {
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("meanwhile") || stderr.contains("already"),
                "{stderr}"
            );
        }
    }
    let version = version_of(&server, "a");
    assert!(won.contains(&version), "runs {version}, won {won:?}");
    let offset = (version as u8 - 1) * 40;
    assert_eq!(one_byte(&server, "a").await, 4 + offset);

    // Upgrade racing a delete: whichever comes first, the actor is gone
    // afterwards, for good (a restart does not bring it back), and a new
    // actor of the name starts from nothing.
    server.create("d", "r");
    assert_eq!(one_byte(&server, "d").await, 81);
    let up = server.cli_in_background(&["actor", "upgrade", "d", "--to-version", "1"]);
    let del = server.cli_in_background(&["actor", "delete", "d"]);
    let (up, del) = (up.await.expect("join"), del.await.expect("join"));
    assert!(del.status.success(), "{del:?}");
    if !up.status.success() {
        let stderr = String::from_utf8_lossy(&up.stderr);
        assert!(
            stderr.contains("not found") || stderr.contains("no actor") || stderr.contains("404"),
            "{stderr}"
        );
    }
    assert!(!server.cli(&["actor", "get", "d"]).status.success());

    // Upgrade racing a pause: the count survives either order.
    server.create("p", "r");
    assert_eq!(one_byte(&server, "p").await, 81);
    let up = server.cli_in_background(&["actor", "upgrade", "p", "--to-version", "2"]);
    let pause = server.cli_in_background(&["actor", "pause", "p"]);
    let (up, pause) = (up.await.expect("join"), pause.await.expect("join"));
    assert!(up.status.success(), "{up:?}");
    let _ = pause;
    assert_eq!(one_byte(&server, "p").await, 42);

    let server = Arc::try_unwrap(server).ok().expect("one owner");
    let server = server.restart(&["--workers", "1", "--cpu-limit", "5s"]);
    assert!(
        !server.cli(&["actor", "get", "d"]).status.success(),
        "d came back"
    );
    server.create("d", "r");
    assert_eq!(one_byte(&server, "d").await, 81);
    assert_eq!(one_byte(&server, "a").await, 5 + offset);
    assert_eq!(one_byte(&server, "p").await, 43);
}

/// A request in flight when the upgrade asks for the gate finishes, and
/// the count it made is handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_during_a_slow_request_hands_over_its_effect() {
    let server = Arc::new(Server::start(&["--workers", "1", "--cpu-limit", "5s"]));
    let slow_handle = |offset: u8| {
        let wat = format!(
            r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\01\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64) (local $i i32)
    (local.set $i (i32.const 400000000))
    (block $done (loop $spin
      (br_if $done (i32.eqz (local.get $i)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (br $spin)))
    (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
    (i32.store8 (i32.const 19) (i32.add (i32.load (i32.const 0)) (i32.const {offset})))
    (i64.const 0x1000000004))
  (func (export "stasis_save_state") (result i64) (i64.const 4))
  (func (export "stasis_load_state") (param i32 i32) (result i32) {LOAD}))"#
        );
        wat::parse_str(&wat).expect("WAT")
    };
    server.push_module("s", &slow_handle(0));
    server.create("a", "s");
    server.push_module("s", &slow_handle(100));
    assert_eq!(one_byte(&server, "a").await, 1);
    let in_flight = {
        let server = server.clone();
        tokio::spawn(async move { post(&server, "a").await })
    };
    let up = server.cli_in_background(&["actor", "upgrade", "a", "-o", "json"]);
    let (reply, up) = (in_flight.await.expect("join"), up.await.expect("join"));
    assert!(up.status.success(), "{up:?}");
    assert_eq!(reply.status, 200, "{reply:?}");
    let got = reply.body.as_bytes()[0];
    assert!(got == 2 || got == 102, "{got}");
    assert_eq!(one_byte(&server, "a").await, 103);
}

/// `kill -9` of the server right after an upgrade answered: the actor
/// comes back on the new version with the state, by either path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_right_after_an_upgrade_keeps_the_new_version_and_the_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &["--workers", "1"]).expect("serve");
    server.push_module("k", &Guest::good(0).wasm());
    server.create("h", "k");
    server.push_module("k", &Guest::good(100).wasm());
    let layout = |offset| Guest {
        extra: r#"(@custom "stasis-layout" "kv1")"#,
        ..Guest::good(offset)
    };
    server.push_module("l", &layout(0).wasm());
    server.create("c", "l");
    server.push_module("l", &layout(100).wasm());
    assert_eq!(one_byte(&server, "c").await, 1);
    for n in 1..=3 {
        assert_eq!(one_byte(&server, "h").await, n);
    }
    let up = server.cli_json(&["actor", "upgrade", "h"]);
    assert_eq!(up["path"], "hand_over", "{up}");
    server.kill();
    let server = Server::start_in(&dir, &["--workers", "1"]).expect("restart");
    assert_eq!(version_of(&server, "h"), 2);
    assert_eq!(one_byte(&server, "h").await, 104);
    let up = server.cli_json(&["actor", "upgrade", "c"]);
    assert_eq!(up["path"], "carry_over", "{up}");
    let mut server = server;
    server.kill();
    let mut server = Server::start_in(&dir, &["--workers", "1"]).expect("restart");
    assert_eq!(version_of(&server, "c"), 2);
    assert_eq!(one_byte(&server, "c").await, 102);
    // Back by the barrier snapshot, then kill -9 again.
    let barrier = up["barrier_snapshot"]
        .as_u64()
        .expect("barrier")
        .to_string();
    server.cli_ok(&["actor", "resume", "c", "--from-snapshot", &barrier]);
    server.kill();
    let server = Server::start_in(&dir, &["--workers", "1"]).expect("restart");
    assert_eq!(version_of(&server, "c"), 1);
    assert_eq!(one_byte(&server, "c").await, 2);
}

/// `actor resume --from-snapshot` of the barrier snapshot an upgrade
/// answered, on the running actor, with the default `--keep-snapshots 2`
/// (the barrier snapshot and the upgrade's are all there is): it goes back
/// to the old version with the barrier's state, by either path. (The
/// resume's own capture at its barrier used to make retention remove the
/// snapshot being restored: a 500 naming its file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_the_barrier_snapshot_of_a_running_actor_goes_back() {
    let server = Server::start(&["--workers", "1"]);
    let layout = |offset| Guest {
        extra: r#"(@custom "stasis-layout" "kv1")"#,
        ..Guest::good(offset)
    };
    server.push_module("l", &layout(0).wasm());
    server.push_module("h", &Guest::good(0).wasm());
    server.create("c", "l");
    server.create("h", "h");
    server.push_module("l", &layout(100).wasm());
    server.push_module("h", &Guest::good(100).wasm());
    for (actor, path) in [("c", "carry_over"), ("h", "hand_over")] {
        assert_eq!(one_byte(&server, actor).await, 1);
        let up = server.cli_json(&["actor", "upgrade", actor]);
        assert_eq!(up["path"], path, "{up}");
        assert_eq!(one_byte(&server, actor).await, 102, "{actor}");
        let barrier = up["barrier_snapshot"]
            .as_u64()
            .expect("barrier")
            .to_string();
        let out = server.cli(&["actor", "resume", actor, "--from-snapshot", &barrier]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{actor}: {stderr}");
        assert_eq!(version_of(&server, actor), 1, "{actor}");
        assert_eq!(
            one_byte(&server, actor).await,
            2,
            "{actor}: the barrier's count"
        );
    }
}

/// Carry-over into a version declaring the same layout but a memory
/// whose maximum is below what the actor grew to: refused (422), the
/// actor keeps its memory and count on its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carry_over_into_a_smaller_maximum_memory_is_refused() {
    let server = Server::start(&["--workers", "1"]);
    let module = |memory: &str, offset: u8| {
        let wat = format!(
            r#"(module
  (@custom "stasis-abi" "\02\00\00\00")
  (@custom "stasis-layout" "m1")
  (memory {memory})
  (data (i32.const 16) "\c8\00\01\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (drop (memory.grow (i32.const 1)))
    (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
    (i32.store8 (i32.const 19) (i32.add (i32.load (i32.const 0)) (i32.const {offset})))
    (i64.const 0x1000000004)))"#
        );
        wat::parse_str(&wat).expect("WAT")
    };
    server.push_module("m", &module("1", 0));
    server.create("a", "m");
    for n in 1..=3 {
        assert_eq!(one_byte(&server, "a").await, n);
    }
    let small = server.push_module("m", &module("1 2", 40));
    let (got, text) = upgrade_raw(&server, "a", &format!(r#"{{"to_version": {small}}}"#)).await;
    assert_eq!(got, 422, "{text}");
    assert!(
        text.contains("stays on version 1") && text.contains("at most 2 pages"),
        "{text}"
    );
    no_path(&server, &text);
    assert_eq!(one_byte(&server, "a").await, 4);
    assert_eq!(version_of(&server, "a"), 1);
    // A minimum above what it grew to: refused too.
    let big = server.push_module("m", &module("20", 80));
    let (got, text) = upgrade_raw(&server, "a", &format!(r#"{{"to_version": {big}}}"#)).await;
    assert_eq!(got, 422, "{text}");
    assert!(text.contains("minimum 20"), "{text}");
    assert_eq!(one_byte(&server, "a").await, 5);
}

/// An actor whose newest snapshot is damaged on disk fails to resume; an
/// upgrade of it is refused without harm, and a resume from an older
/// snapshot repairs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_a_failed_actor_is_refused_and_a_resume_repairs_it() {
    let server = Server::start(&["--workers", "1", "--keep-snapshots", "10"]);
    server.push_module("f", &Guest::good(0).wasm());
    server.create("a", "f");
    server.create("b", "f");
    server.push_module("f", &Guest::good(40).wasm());
    assert_eq!(one_byte(&server, "a").await, 1);
    server.cli_ok(&["actor", "checkpoint", "a"]);
    assert_eq!(one_byte(&server, "a").await, 2);
    server.cli_ok(&["actor", "pause", "a"]);
    let info = server.cli_json(&["actor", "get", "a"]);
    let seq = info["snapshot"]["seq"].as_u64().expect("seq");
    let file = server
        .data_dir
        .join("snapshots/a")
        .join(format!("{seq:020}.snap"));
    let bytes = std::fs::read(&file).expect("snapshot file");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("damage");
    let reply = post(&server, "a").await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(server.cli_json(&["actor", "get", "a"])["state"], "failed");
    let (got, text) = upgrade_raw(&server, "a", "{}").await;
    assert_eq!(got, 409, "{text}");
    assert!(text.contains("failed"), "{text}");
    no_path(&server, &text);
    assert_eq!(one_byte(&server, "b").await, 1, "b is untouched");
    let info = server.cli_json(&["actor", "get", "a"]);
    assert_eq!(info["state"], "failed", "{info}");
    assert_eq!(info["template_version"], 1, "{info}");
    // Repaired from snapshot 1 (count 1), then upgraded.
    server.cli_ok(&["actor", "resume", "a", "--from-snapshot", "1"]);
    assert_eq!(one_byte(&server, "a").await, 2);
    let up = server.cli_json(&["actor", "upgrade", "a"]);
    assert_eq!(up["path"], "hand_over", "{up}");
    assert_eq!(one_byte(&server, "a").await, 43);
}

/// A snapshot of an actor deleted with its template, both created again
/// under the same names: the old snapshots went with the actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_a_deleted_actor_do_not_come_back_with_a_new_one() {
    let server = Server::start(&["--workers", "1", "--keep-snapshots", "10"]);
    server.push_module("t", &Guest::good(0).wasm());
    server.create("a", "t");
    assert_eq!(one_byte(&server, "a").await, 1);
    server.push_module("t", &Guest::good(40).wasm());
    let up = server.cli_json(&["actor", "upgrade", "a"]);
    let barrier = up["barrier_snapshot"]
        .as_u64()
        .expect("barrier")
        .to_string();
    server.cli_ok(&["actor", "delete", "a"]);
    server.cli_ok(&["template", "delete", "t"]);
    server.push_module("t", &Guest::good(40).wasm());
    server.push_module("t", &Guest::good(0).wasm());
    server.create("a", "t");
    assert_eq!(one_byte(&server, "a").await, 1);
    let out = server.cli(&["actor", "resume", "a", "--from-snapshot", &barrier]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no snapshot"), "{stderr}");
    assert_eq!(one_byte(&server, "a").await, 2, "{stderr}");
    assert_eq!(version_of(&server, "a"), 2);
}

/// `kill -9` between the new version's snapshot (written durably) and the
/// switch of the actor's version in the directory (held by a failpoint):
/// after the restart the actor serves, on one version or the other, with
/// its count, never failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_the_new_snapshot_and_the_switch_leaves_a_working_actor() {
    for layout in ["", r#"(@custom "stasis-layout" "kv1")"#] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let env = [("STASIS_FAILPOINT_UPGRADE_SWITCH_DELAY_MS", "60000")];
        let mut server = Server::start_in_env(&dir, &["--workers", "1"], &env).expect("serve");
        let guest = |offset| Guest {
            extra: layout,
            ..Guest::good(offset)
        };
        server.push_module("k", &guest(0).wasm());
        server.create("a", "k");
        server.push_module("k", &guest(40).wasm());
        for n in 1..=3 {
            assert_eq!(one_byte(&server, "a").await, n);
        }
        let up = server.cli_in_background(&["actor", "upgrade", "a"]);
        server.wait_for_log("failpoint: holding the upgrade's switch");
        server.kill();
        let _ = up.await;
        let server = Server::start_in(&dir, &["--workers", "1"]).expect("restart");
        let reply = post(&server, "a").await;
        let info = server.cli_json(&["actor", "get", "a"]);
        assert_eq!(reply.status, 200, "{layout}: {reply:?} {info}");
        let got = reply.body.as_bytes()[0];
        assert!(got == 4 || got == 44, "{layout}: {got} {info}");
    }
}

/// Clients post while an upgrade fails (the running version's save spins,
/// then traps): every request is answered 200 by the old version, the
/// counts are exactly 1 to N, none lost or applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_held_by_a_failing_upgrade_are_served_by_the_old_version() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = Arc::new(Server::start(&["--workers", "1", "--cpu-limit", "5s"]));
    let failing = Guest {
        save: "unreachable",
        save_spin: 200_000_000,
        ..Guest::good(0)
    };
    server.push_module("f", &failing.wasm());
    server.create("a", "f");
    server.push_module("f", &Guest::good(40).wasm());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (server, stop) = (server.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut got = Vec::new();
            // At most 25 each: the counts stay one byte below the offset.
            while !stop.load(Ordering::SeqCst) && got.len() < 25 {
                got.push(one_byte(&server, "a").await);
            }
            got
        }));
    }
    for _ in 0..2 {
        let (status, text) = upgrade_raw(&server, "a", "{}").await;
        assert_eq!(status, 422, "{text}");
    }
    stop.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.expect("client"));
    }
    all.sort_unstable();
    let n = all.len() as u8;
    assert_eq!(all, (1..=n).collect::<Vec<_>>());
    assert_eq!(one_byte(&server, "a").await, n + 1);
    assert_eq!(version_of(&server, "a"), 1);
}
