//! What `actor get` tells of when things happened to an actor (issue 33,
//! item 3): `last_request_at`, `last_snapshot_at`, `last_pause_at`,
//! `last_resume_at` and `last_error_at`, RFC 3339 UTC with milliseconds,
//! absent until the event happened, each within the time of the command
//! that caused it; `created_at`, kept by the directory across a restart,
//! a fork's its own.

use std::time::SystemTime;

use crate::support::{Server, post, to_actor};

/// The `*_at` field `field` of `actor get NAME`, parsed; `None` if null.
fn at(server: &Server, actor: &str, field: &str) -> Option<SystemTime> {
    let info = server.cli_json(&["actor", "get", actor]);
    let text = info[field].as_str()?;
    assert!(
        text.ends_with('Z') && text.contains('.'),
        "{field} is not RFC 3339 UTC with ms: {text}"
    );
    Some(humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{field} {text}: {e}")))
}

/// Asserts that `field` of `actor` lies in `[before, now]` (ms
/// precision: `before` rounded down to the ms).
fn within(server: &Server, actor: &str, field: &str, before: SystemTime) -> SystemTime {
    let after = SystemTime::now();
    let value = at(server, actor, field).unwrap_or_else(|| panic!("{field} is null"));
    let floor = before - std::time::Duration::from_millis(1);
    assert!(
        value >= floor && value <= after,
        "{field} {value:?} outside [{before:?}, {after:?}]"
    );
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_get_says_when_the_actor_last_ran_snapshotted_paused_resumed_and_failed() {
    let server = Server::start(&["--workers", "1"]);
    server.push("faulty");
    server.create("t", "faulty");
    assert_eq!(at(&server, "t", "last_request_at"), None);
    assert_eq!(at(&server, "t", "last_error_at"), None);

    let before = SystemTime::now();
    assert_eq!(post(&server, "t").await.status, 200);
    let request = within(&server, "t", "last_request_at", before);

    let before = SystemTime::now();
    server.cli_ok(&["actor", "pause", "t"]);
    let paused = within(&server, "t", "last_pause_at", before);
    let snapshot = within(&server, "t", "last_snapshot_at", before);
    assert!(paused >= request && snapshot <= paused);

    let before = SystemTime::now();
    assert_eq!(post(&server, "t").await.status, 200);
    let resumed = within(&server, "t", "last_resume_at", before);
    assert!(resumed >= paused);
    assert!(within(&server, "t", "last_request_at", before) >= resumed);

    let before = SystemTime::now();
    let client = crate::support::client();
    let trapped = to_actor(&client, server.ingress, "t", "POST", "/trap").await;
    assert_eq!(trapped.status, 500, "{trapped:?}");
    within(&server, "t", "last_error_at", before);
}

/// `actor get` shows the pending alarm's time (`alarm_at`), and nothing
/// once it is cancelled; the actor list never carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_get_shows_the_pending_alarm() {
    let server = Server::start(&["--workers", "1"]);
    server.push("alarm");
    server.create("al", "alarm");
    let client = crate::support::client();
    let set = to_actor(&client, server.ingress, "al", "POST", "/?in_ms=600000").await;
    assert_eq!(set.status, 202, "{set:?}");
    let alarm: u64 = set
        .body
        .split(|c: char| !c.is_ascii_digit())
        .find(|w| w.len() >= 13)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no alarm time in {set:?}"));
    let info = server.cli_json(&["actor", "get", "al"]);
    let shown = at(&server, "al", "alarm_at").expect("alarm_at");
    let expected = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(alarm);
    assert_eq!(shown, expected, "{info}");
    let listed = server.cli_json(&["actor", "list"]);
    assert!(
        listed
            .as_array()
            .is_some_and(|a| a.iter().all(|actor| actor.get("alarm_at").is_none())),
        "{listed}"
    );
    let cancelled = to_actor(&client, server.ingress, "al", "DELETE", "/").await;
    assert_eq!(cancelled.status, 200, "{cancelled:?}");
    let info = server.cli_json(&["actor", "get", "al"]);
    assert!(info.get("alarm_at").is_none(), "{info}");
}

/// `created_at` is the create's time, kept in the directory: the same
/// after a restart of `serve`; a fork has the time of the fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_get_says_when_the_actor_was_created_across_a_restart() {
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    let before = SystemTime::now();
    server.create("born", "counter");
    let created = within(&server, "born", "created_at", before);
    let server = server.restart(&["--workers", "1"]);
    assert_eq!(at(&server, "born", "created_at"), Some(created));
    let before = SystemTime::now();
    server.cli_ok(&["actor", "fork", "born", "child"]);
    let forked = within(&server, "child", "created_at", before);
    assert!(forked > created);
    let listed = server.cli_json(&["actor", "list"]);
    assert!(
        listed
            .as_array()
            .expect("list")
            .iter()
            .all(|a| a["created_at"].is_string()),
        "{listed}"
    );
}
