//! The command line as a new user meets it (issue 11): client options
//! before the verb, sizes in the documented units only, no empty data dir
//! left by a failed start, durations without float noise, workers listed
//! by name, and rebalance moves that failed printed with their reasons.
//! The real binary on loopback.

use std::path::Path;
use std::process::Output;

use crate::support::{RemoteWorker, STASIS, Server, count, post};

/// `stasis ARGS` with no `$STASIS_ADMIN`: the admin URL comes from `ARGS`.
fn stasis(args: &[&str]) -> Output {
    STASIS
        .command()
        .args(args)
        .env_remove("STASIS_ADMIN")
        .env_remove("STASIS_ADMIN_TOKEN")
        .output()
        .expect("run stasis")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `stasis serve` on `data_dir` with `extra`, expected to fail at start;
/// returns its stderr.
fn serve_fails(data_dir: &Path, extra: &[&str]) -> String {
    let out = STASIS
        .command()
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .output()
        .expect("run stasis serve");
    assert!(
        !out.status.success(),
        "serve started: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_options_are_taken_before_the_verb_too() {
    let server = Server::start(&["--admin-token", "s3cr3t"]);
    let admin = server.admin_url();
    let module = crate::support::demo("counter");
    let pushed = stasis(&[
        "--admin-token",
        "s3cr3t",
        "--admin",
        &admin,
        "template",
        "push",
        "counter",
        module.to_str().expect("utf-8"),
    ]);
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let json = ["-o", "json"];
    let before = stasis(&[
        "--admin",
        &admin,
        "--admin-token",
        "s3cr3t",
        json[0],
        json[1],
        "template",
        "list",
    ]);
    assert!(before.status.success(), "{}", text(&before.stderr));
    let list: serde_json::Value = serde_json::from_slice(&before.stdout).expect("JSON");
    assert_eq!(list[0]["name"], "counter", "{list}");
    // Between the group and the verb, and mixed with options after it.
    let mixed = stasis(&[
        "template",
        "--admin",
        &admin,
        "list",
        "--admin-token",
        "s3cr3t",
    ]);
    assert!(mixed.status.success(), "{}", text(&mixed.stderr));
    assert!(text(&mixed.stdout).contains("counter"));
    // One given after the verb wins over one before it.
    let after_wins = stasis(&[
        "--admin",
        "http://127.0.0.1:1",
        "template",
        "list",
        "--admin",
        &admin,
        "--admin-token",
        "s3cr3t",
    ]);
    assert!(after_wins.status.success(), "{}", text(&after_wins.stderr));
    // The token before the verb is sent, not dropped.
    let no_token = stasis(&["--admin", &admin, "template", "list"]);
    assert!(!no_token.status.success());
    assert!(
        text(&no_token.stderr).contains("401"),
        "{}",
        text(&no_token.stderr)
    );
}

#[test]
fn sizes_take_iec_units_and_refuse_si_ones_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let stderr = serve_fails(&dir, &["--max-memory", "256MB"]);
    assert!(
        stderr.contains("256MB") && stderr.contains("KiB, MiB, GiB or TiB"),
        "names the accepted units: {stderr}"
    );
    assert!(!dir.exists(), "a refused flag creates no data dir");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iec_sizes_mean_powers_of_1024() {
    // 1 MiB bodies pass and one byte more is refused with 413.
    let server = Server::start(&["--max-body", "1MiB"]);
    server.push("echo");
    server.create("e", "echo");
    let http = crate::support::client();
    let host = crate::support::actor_host("e");
    let ok = crate::support::send(
        &http,
        server.ingress,
        "POST",
        &host,
        "/",
        vec![b'x'; 1 << 20],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let over = crate::support::send(
        &http,
        server.ingress,
        "POST",
        &host,
        "/",
        vec![b'x'; (1 << 20) + 1],
    )
    .await;
    assert_eq!(over.status, 413, "{}", over.body);
}

#[test]
fn a_failed_start_leaves_no_fresh_data_dir_and_keeps_an_old_one() {
    // Held until the end: --listen cannot be bound.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = holder.local_addr().expect("addr").to_string();
    let tmp = tempfile::tempdir().expect("tempdir");
    let fresh = tmp.path().join("fresh");
    let stderr = serve_fails(
        &fresh,
        &["--listen", &busy, "--admin-listen", "127.0.0.1:0"],
    );
    assert!(stderr.contains("--listen"), "{stderr}");
    assert!(!fresh.exists(), "a failed start left {}", fresh.display());
    // A data dir that was there before stays, with what it holds.
    let old = tmp.path().join("old");
    std::fs::create_dir_all(&old).expect("mkdir");
    std::fs::write(old.join("keep.txt"), "mine").expect("write");
    serve_fails(&old, &["--listen", &busy, "--admin-listen", "127.0.0.1:0"]);
    assert_eq!(
        std::fs::read_to_string(old.join("keep.txt")).expect("kept"),
        "mine"
    );
}

/// Every number with a fraction in `json` has at most 3 decimals (the
/// `_ms` fields are rounded to the microsecond).
fn assert_no_float_noise(json: &str) {
    for (i, c) in json.char_indices() {
        if c == '.' && json[..i].ends_with(|p: char| p.is_ascii_digit()) {
            let decimals = json[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .count();
            assert!(
                decimals <= 3,
                "float noise at {:?} in {json}",
                &json[i.saturating_sub(12)..(i + 1 + decimals).min(json.len())]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_durations_carry_no_float_noise() {
    let server = Server::start(&["--workers", "2"]);
    server.push("counter");
    server.create("f", "counter");
    assert_eq!(count(&post(&server, "f").await), 1);
    let to = if server.worker_of("f") == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    let mut outputs = Vec::new();
    for args in [
        vec!["actor", "migrate", "f", "--to", to, "-o", "json"],
        vec!["actor", "pause", "f", "-o", "json"],
        vec!["actor", "resume", "f", "-o", "json"],
        vec!["actor", "get", "f", "-o", "json"],
    ] {
        outputs.push(server.cli_ok(&args));
    }
    assert!(outputs[0].contains("downtime_ms"), "{}", outputs[0]);
    assert!(outputs[3].contains("last_resume_ms"), "{}", outputs[3]);
    for out in &outputs {
        assert_no_float_noise(out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_list_is_sorted_by_name() {
    let server = Server::start(&["--workers", "0"]);
    let _zz = RemoteWorker::start(&server, "zz", &[]);
    let _aa = RemoteWorker::start(&server, "aa", &[]);
    let _mm = RemoteWorker::start(&server, "mm", &[]);
    let list = server.cli_json(&["worker", "list"]);
    let names: Vec<&str> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["aa", "mm", "zz"], "{list}");
    let table = server.cli_ok(&["worker", "list"]);
    let rows: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(rows, ["aa", "mm", "zz"], "{table}");
}

/// Both actors sit on worker-1, paused, with a corrupt newest snapshot: the
/// rebalance plans a move to worker-2 and it fails; the table says so with
/// the reason, and the exit status is not 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_prints_each_failed_move_with_its_reason() {
    let server = Server::start(&["--workers", "2"]);
    server.push("counter");
    for name in ["m-1", "m-2"] {
        server.create(name, "counter");
        if server.worker_of(name) != "worker-1" {
            server.cli_ok(&["actor", "migrate", name, "--to", "worker-1"]);
        }
        assert_eq!(count(&post(&server, name).await), 1);
        let seq = server.cli_json(&["actor", "pause", name])["snapshot"]["seq"]
            .as_u64()
            .expect("seq");
        let path = server
            .data_dir
            .join(format!("snapshots/{name}/{seq:020}.snap"));
        let mut bytes = std::fs::read(&path).expect("read");
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&path, bytes).expect("corrupt");
    }
    let out = server.cli(&["rebalance"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success(),
        "a failed move is not a success: {stdout}"
    );
    assert!(stdout.contains("RESULT"), "{stdout}");
    let failed: Vec<&str> = stdout.lines().filter(|l| l.contains("failed:")).collect();
    assert_eq!(failed.len(), 1, "one planned move, failed: {stdout}");
    assert!(
        failed[0].contains("worker-1") && failed[0].contains("worker-2"),
        "{stdout}"
    );
    assert!(stderr.contains("1 move(s) failed"), "{stderr}");
    // -o json carries the same error per move.
    let out = server.cli(&["rebalance", "-o", "json"]);
    assert!(!out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let errors: Vec<&str> = report["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .filter_map(|m| m["error"].as_str())
        .collect();
    assert_eq!(errors.len(), 1, "{report}");
}
