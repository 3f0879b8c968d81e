//! A full disk under the data dir's journal and snapshots (a preload
//! shim: every write that would grow a file there fails with `ENOSPC`,
//! [`crate::preload::full_disk`]; the directory database's files keep
//! what they hold, as on a real disk after `kill -9`):
//! `stasis serve` starts on it and replays the journal, which needs no new
//! space; a delivery is refused with 507 naming the full disk and is not
//! applied, its actor is not failed; once there is room again requests
//! are taken without a restart (the journal looks every
//! `ROOM_PROBE`, 5 s), and what they did survives `kill -9`.

use crate::support::{Answer, Server, client, count, to_actor};

async fn send(server: &Server, actor: &str, method: &str) -> Answer {
    to_actor(&client(), server.ingress, actor, method, "/").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_on_a_full_disk_refuses_writes_and_takes_them_again_when_room_comes_back() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("data");
    let shim = crate::preload::full_disk(tmp.path());
    let flag = tmp.path().join("disk-full");
    let under = format!("{0}/journal/:{0}/snapshots/", dir.display());
    let env = [
        ("LD_PRELOAD", shim.to_str().expect("utf-8 path")),
        ("STASIS_TEST_FULL_FLAG", flag.to_str().expect("utf-8 path")),
        ("STASIS_TEST_FULL_DIR", under.as_str()),
    ];
    let mut server = Server::start_in_env(&dir, &[], &env).expect("serve starts");
    server.push("counter");
    server.create("f", "counter");
    for n in 1..=3 {
        assert_eq!(count(&send(&server, "f", "POST").await), n);
    }
    server.kill();
    // The disk fills while the server is down: it starts all the same, its
    // three acknowledged increments replayed from the journal.
    std::fs::write(&flag, b"").expect("flag");
    let mut server = Server::start_in_env(&dir, &[], &env).expect("serve starts on a full disk");
    server.wait_for_log("the data dir's disk is full");
    for _ in 0..2 {
        let refused = send(&server, "f", "POST").await;
        assert_eq!(refused.status, 507, "{refused:?}");
        assert!(
            refused.body.contains("disk is full") && refused.body.contains("not applied"),
            "{refused:?}"
        );
        assert!(
            !refused.body.contains(tmp.path().to_str().expect("utf-8")),
            "no server path: {refused:?}"
        );
    }
    let info = server.cli_json(&["actor", "get", "f"]);
    assert_ne!(info["state"], "failed", "{info}");
    // Room again: requests are taken without a restart, and the refused
    // ones were not applied.
    std::fs::remove_file(&flag).expect("unflag");
    server.wait_for_log_async("the disk has room again").await;
    let taken = send(&server, "f", "POST").await;
    assert_eq!(taken.status, 200, "{taken:?}");
    assert_eq!(count(&taken), 4, "{taken:?}");
    server.kill();
    let server = Server::start_in(&dir, &[]).expect("restart");
    assert_eq!(count(&send(&server, "f", "GET").await), 4);
}
