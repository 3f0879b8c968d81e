//! Hardening found by trying Stasis as new users and attackers would, against the real `stasis` binary over
//! loopback HTTP: static constructors run once per actor life, the bearer
//! scheme is case-insensitive and the token exact, and metric series are
//! bounded and go with their actor; the guest clock never goes back; a
//! process that said it is ready stops gracefully on SIGTERM.

use std::net::SocketAddr;

use crate::support::{self, Answer, RemoteWorker, Server, client, send};

/// Input 6: a Rust guest built with the SDK is a reactor; its static
/// constructor runs once, at creation, never per call nor after a pause,
/// a trap rollback or a move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_guests_run_static_constructors_once() {
    let server = Server::start(&[]);
    server.push("faulty");
    let first = server.create("ctor", "faulty")["worker"]
        .as_str()
        .expect("worker")
        .to_owned();
    let constructors = |answer: Answer| {
        assert_eq!(answer.status, 200, "{answer:?}");
        answer.body
    };
    for i in 1..=5 {
        let answer = support::to_actor(&client(), server.ingress, "ctor", "POST", "/").await;
        assert_eq!(answer.body, format!("count: {i}\n"));
    }
    let once = "constructors: 1\n";
    assert_eq!(
        constructors(
            support::to_actor(&client(), server.ingress, "ctor", "GET", "/constructors").await
        ),
        once
    );
    server.cli_ok(&["actor", "pause", "ctor"]);
    assert_eq!(
        support::to_actor(&client(), server.ingress, "ctor", "POST", "/")
            .await
            .body,
        "count: 6\n"
    );
    assert_eq!(
        constructors(
            support::to_actor(&client(), server.ingress, "ctor", "GET", "/constructors").await
        ),
        once
    );
    let trap = support::to_actor(&client(), server.ingress, "ctor", "POST", "/trap").await;
    assert_eq!(trap.status, 500, "{trap:?}");
    assert_eq!(
        constructors(
            support::to_actor(&client(), server.ingress, "ctor", "GET", "/constructors").await
        ),
        once
    );
    let other = if first == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    server.cli_ok(&["actor", "migrate", "ctor", "--to", other]);
    assert_eq!(
        constructors(
            support::to_actor(&client(), server.ingress, "ctor", "GET", "/constructors").await
        ),
        once
    );
    // The trap rolled the actor back to its last answered request
    // (count 6: the trapping request's increment is undone).
    assert_eq!(
        support::to_actor(&client(), server.ingress, "ctor", "GET", "/")
            .await
            .body,
        "count: 6\n"
    );
}

/// The status of `GET path` at `addr` with these `Authorization` values.
async fn status_with(addr: SocketAddr, path: &str, authorization: &[&str]) -> u16 {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for value in authorization {
        request.push_str(&format!("Authorization: {value}\r\n"));
    }
    request.push_str("\r\n");
    support::raw_status(&support::raw(addr, &request).await)
}

/// Every accepted and refused `Authorization` form, on one API.
async fn check_auth_forms(addr: SocketAddr, path: &str) {
    for good in ["Bearer s3cr3t", "bearer s3cr3t", "BEARER  s3cr3t"] {
        assert_eq!(status_with(addr, path, &[good]).await, 200, "{good:?}");
    }
    for bad in ["Bearer S3CR3T", "Bearer s3cr3", "Basic s3cr3t", "s3cr3t"] {
        assert_eq!(status_with(addr, path, &[bad]).await, 401, "{bad:?}");
    }
    assert_eq!(status_with(addr, path, &[]).await, 401);
    for pair in [
        ["Bearer s3cr3t", "Bearer s3cr3t"],
        ["Bearer nope", "Bearer s3cr3t"],
    ] {
        let status = status_with(addr, path, &pair).await;
        assert!(status == 400 || status == 401, "{pair:?}: {status}");
    }
}

/// Input 3: the bearer scheme is case-insensitive (RFC 9110 §11.1), the
/// token exact, and two `Authorization` headers are refused; the same on
/// the admin API and on a remote worker's internal API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_scheme_is_case_insensitive_and_the_token_exact() {
    let server = Server::start(&["--workers", "0", "--admin-token", "s3cr3t"]);
    check_auth_forms(server.admin, "/v1/actors").await;

    // A remote worker with the same token (support::RemoteWorker lists
    // workers through a client without the token, so it is started here).
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut command = support::STASIS.worker(&server.admin_url(), "w1", &tmp.path().join("data"));
    command.env("STASIS_ADMIN_TOKEN", "s3cr3t");
    let mut worker = stasis_test_util::Proc::start(command, "stasis worker ready", "w1", false)
        .unwrap_or_else(|stderr| panic!("worker w1 exited: {stderr}"));
    let listen = worker.addr("listen=");
    check_auth_forms(listen, "/internal/v1/actors").await;
    worker.kill();
}

/// Sends `method path` (with a JSON `body`) to the admin API of `server`.
async fn admin(server: &Server, method: &str, path: &str, body: &str) -> Answer {
    send(
        &client(),
        server.admin,
        method,
        "localhost",
        path,
        body.as_bytes().to_vec(),
    )
    .await
}

/// Creates `names` from template `template` and sends each one `POST /`.
async fn create_and_call(server: &Server, template: &str, names: &[String]) {
    for name in names {
        let body = format!(r#"{{"name": "{name}", "template": "{template}"}}"#);
        let created = admin(server, "POST", "/v1/actors", &body).await;
        assert_eq!(created.status, 201, "{created:?}");
        let answer = support::to_actor(&client(), server.ingress, name, "POST", "/").await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
}

/// Deletes `names`.
async fn delete_all(server: &Server, names: &[String]) {
    for name in names {
        let deleted = admin(server, "DELETE", &format!("/v1/actors/{name}"), "").await;
        assert_eq!(deleted.status, 204, "{deleted:?}");
    }
}

/// Metric lines naming actor `name`.
fn series_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!("actor=\"{name}\"");
    text.lines().filter(|l| l.contains(&needle)).collect()
}

/// Input 2 and the metrics-cardinality class, by default: request series
/// are per template and status, no series names an actor, so 200 created,
/// called and deleted actors leave none behind; unknown names create none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_no_metric_series_is_per_actor() {
    let server = Server::start(&[]);
    server.push("counter");
    let names: Vec<String> = (0..200).map(|i| format!("m-{i}")).collect();
    create_and_call(&server, "counter", &names).await;
    let unknown = support::to_actor(&client(), server.ingress, "nobody-here", "GET", "/").await;
    assert_eq!(unknown.status, 404);
    let text = server.metrics().await;
    assert!(
        text.contains("stasis_requests_total{template=\"counter\",status=\"200\"} 200"),
        "{text}"
    );
    // Their latencies, by template and status class (a 404 for a name
    // that is no actor has no template).
    assert!(
        text.lines().any(|l| l
            == "stasis_request_duration_seconds_count{template=\"counter\",class=\"2xx\"} 200"),
        "{text}"
    );
    assert!(!text.contains("actor=\""), "{text}");
    assert!(!text.contains("nobody-here"), "{text}");
    let before = text.lines().count();
    delete_all(&server, &names).await;
    let text = server.metrics().await;
    assert!(!text.contains("actor=\""), "{text}");
    assert!(text.lines().count() <= before, "{text}");
}

/// `--metrics-per-actor`: every actor has its series; deleting it removes
/// them all, and a re-created name starts from zero. Unknown names never
/// create series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_actor_series_are_opt_in_and_go_with_their_actor() {
    let server = Server::start(&["--metrics-per-actor"]);
    server.push("counter");
    let names: Vec<String> = (0..200).map(|i| format!("p-{i}")).collect();
    create_and_call(&server, "counter", &names).await;
    let unknown = support::to_actor(&client(), server.ingress, "nobody-here", "POST", "/").await;
    assert_eq!(unknown.status, 404);
    let text = server.metrics().await;
    for name in &names {
        let line = format!("stasis_actor_requests_total{{actor=\"{name}\",status=\"200\"}} 1");
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        let line = format!("stasis_actor_request_duration_seconds_count{{actor=\"{name}\"}} 1");
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert!(series_of(&text, "nobody-here").is_empty(), "{text}");
    delete_all(&server, &names).await;
    let text = server.metrics().await;
    for name in &names {
        assert_eq!(series_of(&text, name), Vec::<&str>::new());
    }
    assert!(!text.contains("actor=\""), "{text}");
    // A name created again counts from zero.
    create_and_call(&server, "counter", &names[..1]).await;
    let text = server.metrics().await;
    let mut counted: Vec<&str> = series_of(&text, "p-0")
        .into_iter()
        .filter(|l| l.starts_with("stasis_actor_requests_total") || l.contains("_count{"))
        .collect();
    counted.sort_unstable();
    assert_eq!(
        counted,
        [
            "stasis_actor_request_duration_seconds_count{actor=\"p-0\"} 1",
            "stasis_actor_requests_total{actor=\"p-0\",status=\"200\"} 1",
        ]
    );
}

/// The monotonic reading of the `faulty` demo's `GET /clock`.
async fn guest_clock(server: &Server, actor: &str) -> u64 {
    let answer = support::to_actor(&client(), server.ingress, actor, "GET", "/clock").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer
        .body
        .split_whitespace()
        .find_map(|w| w.strip_prefix("monotonic="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no clock in {:?}", answer.body))
}

/// Input 4: the guest's monotonic clock never goes back, across a trap
/// rollback (to a snapshot taken earlier on the clock) and across a
/// `kill -9` of `stasis serve` and a restart on the same data dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monotonic_clock_never_goes_back_across_traps_and_kill_nine() {
    let mut server = Server::start(&[]);
    server.push("faulty");
    server.create("tick", "faulty");
    // Never stricter than sleeping 400 ms and reading once.
    stasis_test_util::wait::until_else_async(
        "the guest clock to pass 400 ms",
        std::time::Duration::from_millis(400),
        async || {
            let now = guest_clock(&server, "tick").await;
            if now >= 400_000_000 { Ok(()) } else { Err(now) }
        },
    )
    .await;
    let before_trap = guest_clock(&server, "tick").await;
    assert!(before_trap >= 400_000_000, "the clock runs: {before_trap}");
    let trap = support::to_actor(&client(), server.ingress, "tick", "POST", "/trap").await;
    assert_eq!(trap.status, 500, "{trap:?}");
    let after_trap = guest_clock(&server, "tick").await;
    assert!(
        after_trap >= before_trap,
        "clock went back across a trap rollback: {before_trap} -> {after_trap}"
    );
    // sleep: the clock runs on 300 ms before the kill (a gap a reset would show).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before_kill = guest_clock(&server, "tick").await;
    let dir = server.data_dir.clone();
    server.kill();
    let restarted = Server::start_in(&dir, &[]).expect("restart after kill -9");
    let after_kill = guest_clock(&restarted, "tick").await;
    assert!(
        after_kill >= before_kill,
        "clock went back across kill -9: {before_kill} -> {after_kill}"
    );
    // A graceful restart does not jump it forward by the crash lease: the
    // pause persisted the exact reading.
    let mut restarted = restarted;
    let before_stop = guest_clock(&restarted, "tick").await;
    restarted.stop();
    let again = Server::start_in(&dir, &[]).expect("restart after stop");
    let after_stop = guest_clock(&again, "tick").await;
    assert!(after_stop >= before_stop, "{before_stop} -> {after_stop}");
    assert!(
        after_stop - before_stop < 30_000_000_000,
        "a graceful restart jumped the clock: {before_stop} -> {after_stop}"
    );
    // Nor does a move of the running actor to the other worker.
    let other = if again.worker_of("tick") == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    let before_move = guest_clock(&again, "tick").await;
    again.cli_ok(&["actor", "migrate", "tick", "--to", other]);
    let after_move = guest_clock(&again, "tick").await;
    assert!(after_move >= before_move, "{before_move} -> {after_move}");
    assert!(
        after_move - before_move < 30_000_000_000,
        "a move jumped the clock: {before_move} -> {after_move}"
    );
}

/// Found by trying to break it (issue 29): with its log on a full disk,
/// the first line the server could not write panicked the thread that
/// logged it (an actor's task, after its journal entry: a request answered
/// 503 was then applied at the restart; or the whole process). A log that
/// cannot be written now loses lines and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_written_stops_nothing() {
    use std::io::BufRead as _;
    let tmp = tempfile::tempdir().expect("tmp");
    let mut command = support::STASIS.serve(&tmp.path().join("data"), &[]);
    command
        .env("STASIS_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full"),
        );
    let mut child = command.spawn().expect("serve");
    let stdout = child.stdout.take().expect("stdout");
    let ready = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("stasis ready"))
        .expect("serve gets ready");
    let addr = |key: &str| -> SocketAddr {
        ready
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|a| a.parse().ok())
            .expect("an address")
    };
    let (ingress, admin) = (addr("ingress="), addr("admin="));
    let cli = |args: &[&str]| {
        let out = support::STASIS
            .command()
            .args(args)
            .env("STASIS_ADMIN", format!("http://{admin}"))
            .output()
            .expect("cli");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let faulty = support::demo("faulty");
    cli(&[
        "template",
        "push",
        "faulty",
        faulty.to_str().expect("utf-8"),
    ]);
    cli(&["actor", "create", "f", "--template", "faulty"]);
    let host = support::actor_host("f");
    let c = client();
    assert_eq!(
        send(&c, ingress, "POST", &host, "/", Vec::new()).await.body,
        "count: 1\n"
    );
    // A trap logs a warning (and used to kill the actor's task there).
    for _ in 0..3 {
        let trap = send(&c, ingress, "POST", &host, "/trap", Vec::new()).await;
        assert_eq!(trap.status, 500, "{trap:?}");
    }
    assert_eq!(
        send(&c, ingress, "POST", &host, "/", Vec::new()).await.body,
        "count: 2\n"
    );
    assert!(
        child.try_wait().expect("wait").is_none(),
        "serve is still running"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// The signals process `pid` catches, from `/proc/PID/status` (`SigCgt`).
fn caught_signals(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .expect("SigCgt line");
    u64::from_str_radix(mask.trim(), 16).expect("hex mask")
}

/// Whether `mask` (a `SigCgt` mask) holds SIGTERM (15) and SIGINT (2),
/// Linux's numbers.
fn catches_term_and_int(mask: u64) -> bool {
    let bit = |signal: u32| 1u64 << (signal - 1);
    mask & bit(15) != 0 && mask & bit(2) != 0
}

/// Once `serve` and `worker run` print that they are ready, SIGTERM and
/// SIGINT are already theirs to handle: a SIGTERM right after the ready
/// line is a graceful stop, never the default action (exit by signal,
/// with nothing drained). CI once saw `serve` die of a SIGTERM sent just
/// after a restart, while the handler was installed only when the
/// shutdown future was first polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_the_ready_line_is_a_graceful_stop() {
    let mut server = Server::start(&[]);
    let mask = caught_signals(server.pid());
    assert!(catches_term_and_int(mask), "serve SigCgt {mask:x}");
    let mut worker = RemoteWorker::start(&server, "w1", &[]);
    let mask = caught_signals(worker.pid());
    assert!(catches_term_and_int(mask), "worker SigCgt {mask:x}");
    let status = worker.terminate();
    assert!(status.success(), "worker exited with {status}");
    server.stop();
}
