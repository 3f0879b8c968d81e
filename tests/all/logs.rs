//! `stasis actor logs` (issue 33, item 1) through the real binary: a
//! follower (`logs -f -o json`, a process of its own) sees every line the
//! `faulty` demo prints exactly once and in order while the actor is
//! paused, resumed, trapped and while its server is killed with `kill -9`
//! and started again; a last line without a newline is kept at a trap and
//! at a pause; a line over the limit is cut and marked; `--tail` and
//! `--since` select; a deleted actor's log is gone (404) and its follower
//! ends with that error; `actor events` lists and follows the actor's
//! lifecycle apart from its output. In cluster mode (real etcd and S3) the follower
//! carries on across a move of the actor between remote workers.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use stasis_test_util::wait;

use crate::support::{STASIS, Server, client, to_actor};

/// How long a line may take to reach the follower.
const DEADLINE: Duration = Duration::from_secs(30);

/// `stasis actor logs ACTOR -f -o json` against `admin`, its lines parsed.
pub(crate) struct Follower {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Follower {
    pub(crate) fn start(admin: &str, actor: &str) -> Follower {
        let mut child = STASIS
            .command()
            .args(["actor", "logs", actor, "-f", "-o", "json"])
            .env("STASIS_ADMIN", admin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the follower");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("follower printed non-JSON {line:?}: {e}"));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// The next `n` lines (panics if they do not come within [`DEADLINE`]).
    pub(crate) fn expect(&self, n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| {
                self.lines
                    .recv_timeout(DEADLINE)
                    .unwrap_or_else(|_| panic!("line {} of {n} did not come", i + 1))
            })
            .collect()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks what a follower saw across a move from worker `from` to `to`:
/// "here" on both streams and "mid-move" on `from`, then "there" on both
/// streams on `to`, numbered increasing; returns the numbers.
fn moved_in_order(seen: &[Value], from: &str, to: &str) -> Vec<u64> {
    let mut expected = both("here");
    expected.push(("stdout".into(), "mid-move".into()));
    expected.extend(both("there"));
    assert_eq!(texts(seen), expected);
    let workers: Vec<&str> = seen
        .iter()
        .map(|l| l["worker"].as_str().expect("worker"))
        .collect();
    assert_eq!(workers, [from, from, from, to, to], "{seen:?}");
    let seqs: Vec<u64> = seen
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    seqs
}

/// `(stream, text)` of each line.
fn texts(lines: &[Value]) -> Vec<(String, String)> {
    lines
        .iter()
        .map(|l| {
            (
                l["stream"].as_str().expect("stream").to_owned(),
                l["text"].as_str().expect("text").to_owned(),
            )
        })
        .collect()
}

fn both(text: &str) -> Vec<(String, String)> {
    vec![
        ("stdout".to_owned(), text.to_owned()),
        ("stderr".to_owned(), text.to_owned()),
    ]
}

async fn hit(server: &Server, path: &str) -> u16 {
    to_actor(&client(), server.ingress, "logger", "POST", path)
        .await
        .status
}

/// `actor logs logger -o json ARGS`, parsed.
fn listed(server: &Server, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["actor", "logs", "logger", "-o", "json"];
    all.extend(args);
    server
        .cli_ok(&all)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sees_every_line_once_across_pause_trap_and_kill_9() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let mut server = Server::start_in(&dir, &[]).expect("serve");
    server.push("faulty");
    server.create("logger", "faulty");
    let admin = server.admin_url();
    let follower = Follower::start(&admin, "logger");
    let mut seen = Vec::new();
    let mut expected = Vec::new();

    assert_eq!(hit(&server, "/print?text=one").await, 200);
    seen.extend(follower.expect(2));
    expected.extend(both("one"));

    // Paused, then resumed by the next request.
    server.cli_ok(&["actor", "pause", "logger"]);
    assert_eq!(hit(&server, "/print?text=two").await, 200);
    seen.extend(follower.expect(2));
    expected.extend(both("two"));

    // A line without its newline, then a trap: the line is not lost.
    assert_eq!(hit(&server, "/write?text=before-trap").await, 200);
    assert_ne!(hit(&server, "/trap").await, 200);
    seen.extend(follower.expect(1));
    expected.push(("stdout".into(), "before-trap".into()));

    // The same at a pause.
    assert_eq!(hit(&server, "/write?text=before-pause").await, 200);
    server.cli_ok(&["actor", "pause", "logger"]);
    seen.extend(follower.expect(1));
    expected.push(("stdout".into(), "before-pause".into()));

    // A line over the limit is cut and marked.
    let long = "x".repeat(5000);
    assert_eq!(hit(&server, &format!("/print?text={long}")).await, 200);
    let cut = follower.expect(2);
    for line in &cut {
        assert_eq!(line["truncated"], true, "{line}");
        assert_eq!(line["text"].as_str().map(str::len), Some(4096), "{line}");
    }
    seen.extend(cut);
    expected.extend(both(&"x".repeat(4096)));

    assert_eq!(hit(&server, "/print?text=three").await, 200);
    seen.extend(follower.expect(2));
    expected.extend(both("three"));

    // kill -9 and a restart on the same admin address: the follower
    // carries on after the last line it saw.
    server.kill();
    let admin_addr = server.admin.to_string();
    let server = Server::start_in(&dir, &["--admin-listen", &admin_addr]).expect("restart");
    assert_eq!(hit(&server, "/print?text=four").await, 200);
    seen.extend(follower.expect(2));
    expected.extend(both("four"));

    assert_eq!(texts(&seen), expected, "the follower's lines");
    let seqs: Vec<u64> = seen
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers not increasing: {seqs:?}"
    );
    for line in &seen {
        assert_eq!(line["worker"], "worker-1", "{line}");
        assert!(
            line["at"].as_str().is_some_and(|at| at.ends_with('Z')),
            "{line}"
        );
    }
    assert!(
        follower.lines.try_recv().is_err(),
        "a line was shown twice or an unexpected one came"
    );

    // Every line survived the kill, with the numbers the follower saw.
    let all = listed(&server, &[]);
    assert_eq!(all, seen, "the log after the restart");
    assert_eq!(listed(&server, &["--tail", "3"]), seen[seen.len() - 3..]);
    let pivot = seen[4]["at_unix_ms"].as_u64().expect("at_unix_ms");
    let since: Vec<Value> = seen
        .iter()
        .filter(|l| l["at_unix_ms"].as_u64() >= Some(pivot))
        .cloned()
        .collect();
    let at = seen[4]["at"].as_str().expect("at");
    assert_eq!(listed(&server, &["--since", at]), since);
    assert_eq!(
        listed(&server, &["--since", "1h", "--tail", "2"]),
        seen[seen.len() - 2..]
    );
    let table = server.cli_ok(&["actor", "logs", "logger", "--tail", "1"]);
    assert!(
        table.trim_end().ends_with("worker-1 stderr four"),
        "table output: {table}"
    );

    // Deleted: its log goes with it, and the follower ends with the 404.
    let mut follower = follower;
    server.cli_ok(&["actor", "delete", "logger"]);
    let status = wait_exit(&mut follower.child);
    assert!(!status.success(), "the follower did not fail: {status}");
    let mut err = String::new();
    if let Some(mut stderr) = follower.child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
    }
    assert!(err.contains("404"), "follower's error: {err}");
    let gone = server.cli(&["actor", "logs", "logger"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    assert!(
        !dir.join("snapshots/logger").exists(),
        "its log file stayed"
    );
}

/// Waits for `child` to exit ([`DEADLINE`] at most).
fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    stasis_test_util::wait::until("the follower to end", DEADLINE, || {
        child.try_wait().expect("wait")
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_carries_on_across_a_move_between_remote_workers() {
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let d = crate::replicas::deployment(1, 1, 2, &[]);
    let faulty = STASIS.demo("faulty");
    d.cli_ok(
        0,
        &[
            "template",
            "push",
            "faulty",
            faulty.to_str().expect("utf-8"),
        ],
    );
    d.cli_json(0, &["actor", "create", "logger", "--template", "faulty"]);
    let follower = Follower::start(&format!("http://{}", d.replica(0).admin), "logger");
    let ingress = d.replica(0).ingress;
    let hit = |path: &'static str| async move {
        to_actor(&client(), ingress, "logger", "POST", path)
            .await
            .status
    };
    assert_eq!(hit("/print?text=here").await, 200);
    let mut seen = follower.expect(2);
    let from = d.cli_json(0, &["actor", "get", "logger"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "w1" { "w2" } else { "w1" };
    // A line without its newline when the move captures the actor.
    assert_eq!(hit("/write?text=mid-move").await, 200);
    d.cli_json(0, &["actor", "migrate", "logger", "--to", to]);
    seen.extend(follower.expect(1));
    assert_eq!(hit("/print?text=there").await, 200);
    seen.extend(follower.expect(2));
    moved_in_order(&seen, &from, to);
    assert!(
        follower.lines.try_recv().is_err(),
        "an unexpected line came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_events_lists_and_follows_the_lifecycle() {
    let server = Server::start(&[]);
    server.push("faulty");
    server.create("logger", "faulty");
    let follower = {
        let mut child = STASIS
            .command()
            .args(["actor", "events", "logger", "-f", "-o", "json"])
            .env("STASIS_ADMIN", server.admin_url())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the follower");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value: Value = serde_json::from_str(&line).expect("JSON");
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    };
    assert!(
        follower.expect(1)[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("created"))
    );
    assert_eq!(hit(&server, "/print?text=one").await, 200);
    server.cli_ok(&["actor", "pause", "logger"]);
    let paused = follower.expect(1);
    assert!(
        paused[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("paused: snapshot")),
        "{paused:?}"
    );
    assert_ne!(hit(&server, "/trap").await, 200);
    let events: Vec<Value> = server
        .cli_ok(&["actor", "events", "logger", "-o", "json"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| {
            assert_eq!(e["stream"], "event", "{e}");
            let text = e["text"].as_str().expect("text");
            text.split([':', ' ']).next().unwrap_or(text)
        })
        .collect();
    // The request resumed the paused actor; the trap rolled it back (a
    // resume of its newest state).
    assert_eq!(
        kinds,
        ["created", "paused", "resumed", "trapped", "resumed"]
    );
    assert!(
        events[3]["text"]
            .as_str()
            .is_some_and(|t| t.contains("unreachable")),
        "{events:?}"
    );
    // Guest output stays apart from the events.
    let output = listed(&server, &[]);
    assert_eq!(texts(&output), both("one"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_between_workers_of_one_serve_keeps_the_numbering_and_the_events() {
    let server = Server::start(&["--workers", "2"]);
    server.push("faulty");
    server.create("logger", "faulty");
    let follower = Follower::start(&server.admin_url(), "logger");
    assert_eq!(hit(&server, "/print?text=here").await, 200);
    let mut seen = follower.expect(2);
    let from = server.cli_json(&["actor", "get", "logger"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let to = if from == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    assert_eq!(hit(&server, "/write?text=mid-move").await, 200);
    server.cli_json(&["actor", "migrate", "logger", "--to", to]);
    seen.extend(follower.expect(1));
    assert_eq!(hit(&server, "/print?text=there").await, 200);
    seen.extend(follower.expect(2));
    // One store, one log: the numbering carries on from the old worker's
    // (events take numbers too), and both workers' events are there.
    let seqs = moved_in_order(&seen, &from, to);
    assert!(seqs[4] < 100, "the numbering started again: {seqs:?}");
    let events = server.cli_ok(&["actor", "events", "logger"]);
    let captured = format!("{from} event captured for a move");
    let placed = format!("{to} event placed here");
    let (c, p) = (events.find(&captured), events.find(&placed));
    assert!(c.is_some() && p.is_some() && c < p, "{events}");
    assert!(
        follower.lines.try_recv().is_err(),
        "an unexpected line came"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_carries_on_when_the_actors_worker_is_killed_and_it_is_placed_again() {
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let mut d = crate::replicas::deployment(1, 1, 2, &[]);
    let faulty = STASIS.demo("faulty");
    d.cli_ok(
        0,
        &[
            "template",
            "push",
            "faulty",
            faulty.to_str().expect("utf-8"),
        ],
    );
    d.cli_json(0, &["actor", "create", "logger", "--template", "faulty"]);
    let follower = Follower::start(&format!("http://{}", d.replica(0).admin), "logger");
    let ingress = d.replica(0).ingress;
    let print = |text: &'static str| async move {
        to_actor(
            &client(),
            ingress,
            "logger",
            "POST",
            &format!("/print?text={text}"),
        )
        .await
        .status
    };
    assert_eq!(print("here").await, 200);
    let mut seen = follower.expect(2);
    let owner = d.cli_json(0, &["actor", "get", "logger"])["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    d.kill_worker(&owner);
    // Its worker seen lost, or the actor already placed on another.
    crate::fencing::wait_for_actor(&d, "logger", "saw its worker lost", |info| {
        info["worker_state"] == "lost" || info["worker"] != owner.as_str()
    });
    // Sent until a worker runs it: a 503 says nothing was sent.
    wait::until_else_async(
        "a print after the re-placement",
        DEADLINE,
        async || match print("there").await {
            200 => Ok(()),
            503 => Err(503),
            status => panic!("print after the re-placement: {status}"),
        },
    )
    .await;
    seen.extend(follower.expect(2));
    let mut expected = both("here");
    expected.extend(both("there"));
    assert_eq!(texts(&seen), expected);
    assert_ne!(seen[2]["worker"], owner.as_str(), "{seen:?}");
    let seqs: Vec<u64> = seen
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(
        follower.lines.try_recv().is_err(),
        "an unexpected line came"
    );
}

/// `GET /v1/actors/{name}/logs?follow=1` streams the log as NDJSON, line
/// by line as the actor prints, across a pause and a move between
/// workers; the stream ends when the actor is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_streams_lines_as_they_come_across_a_pause_and_a_move() {
    use http_body_util::BodyExt as _;
    let server = Server::start(&["--workers", "2"]);
    server.push("faulty");
    server.create("loud", "faulty");
    let request = hyper::Request::get(format!(
        "http://{}/v1/actors/loud/logs?follow=1",
        server.admin
    ))
    .header("host", "localhost")
    .body(http_body_util::Full::new(bytes::Bytes::new()))
    .expect("request");
    let response = client().request(request).await.expect("follow");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut body = response.into_body();
    let mut pending = String::new();
    let mut seen: Vec<(u64, String)> = Vec::new();
    // Reads until the line `text` has arrived (or the stream ends: None).
    let mut read_until = async |text: &str, seen: &mut Vec<(u64, String)>| -> Option<()> {
        while !seen.iter().any(|(_, t)| t == text) {
            let frame = tokio::time::timeout(DEADLINE, body.frame())
                .await
                .expect("a line within the deadline")?
                .expect("frame");
            pending.push_str(
                std::str::from_utf8(&frame.into_data().unwrap_or_default()).expect("utf-8"),
            );
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let line: Value = serde_json::from_str(&line).expect("NDJSON");
                // `faulty` prints each text on stdout and stderr.
                if line["stream"] == "stdout" {
                    seen.push((
                        line["seq"].as_u64().expect("seq"),
                        line["text"].as_str().expect("text").to_owned(),
                    ));
                }
            }
        }
        Some(())
    };
    let print = async |text: &str| {
        let answer = to_actor(
            &client(),
            server.ingress,
            "loud",
            "POST",
            &format!("/print?text={text}"),
        )
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
    };
    print("one").await;
    read_until("one", &mut seen).await.expect("one");
    server.cli_ok(&["actor", "pause", "loud"]);
    print("two").await;
    read_until("two", &mut seen).await.expect("two");
    let to = if server.worker_of("loud") == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "loud", "--to", to]);
    print("three").await;
    read_until("three", &mut seen).await.expect("three");
    let texts: Vec<&str> = seen.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, ["one", "two", "three"], "each line once, in order");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    server.cli_ok(&["actor", "delete", "loud"]);
    assert!(
        read_until("never printed", &mut seen).await.is_none(),
        "the stream ends with the actor"
    );
}
