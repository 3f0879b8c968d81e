//! A separate internal credential (`--internal-token`): workers and the
//! control plane authenticate to each other with it, never with the admin
//! token; the admin token is refused on the internal API (the admin
//! port's `/internal/` routes and a worker's API) and the internal token
//! on the admin API. Through the real binary and a real `worker run`.

use std::time::{Duration, Instant};

use stasis_test_util::process::Proc;

use crate::support::{STASIS, Server, count, raw, raw_status, to_actor};

const ADMIN: &str = "admin-secret";
const INTERNAL: &str = "internal-secret";

/// `stasis ARGS` against `server` with bearer token `token`.
fn cli(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    STASIS
        .command()
        .args(args)
        .env("STASIS_ADMIN", server.admin_url())
        .env("STASIS_ADMIN_TOKEN", token)
        .output()
        .expect("run stasis")
}

fn cli_ok(server: &Server, args: &[&str]) -> String {
    let out = cli(server, ADMIN, args);
    assert!(
        out.status.success(),
        "stasis {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `worker run` joining `server` with `env` (its tokens).
fn worker(
    server: &Server,
    dir: &std::path::Path,
    name: &str,
    env: &[(&str, &str)],
) -> Result<Proc, String> {
    let mut command = STASIS.worker(&server.admin_url(), name, &dir.join(name));
    command.env_remove("STASIS_ADMIN_TOKEN");
    command.envs(env.iter().copied());
    Proc::start(command, "stasis worker ready", name, false)
}

/// The status of `GET path` at `addr` with bearer `token`.
async fn status(addr: std::net::SocketAddr, path: &str, token: &str) -> u16 {
    raw_status(
        &raw(
            addr,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
        )
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_token_and_the_admin_token_each_open_only_their_api() {
    let server = Server::start(&[
        "--workers",
        "0",
        "--admin-token",
        ADMIN,
        "--internal-token",
        INTERNAL,
    ]);
    let dir = tempfile::tempdir().expect("tempdir");

    // A worker holding only the admin token cannot join.
    let joined = worker(
        &server,
        dir.path(),
        "w-admin",
        &[("STASIS_ADMIN_TOKEN", ADMIN)],
    );
    let Err(refused) = joined else {
        panic!("a worker with the admin token joined");
    };
    assert!(refused.contains("wrong bearer token"), "{refused}");

    let w = worker(
        &server,
        dir.path(),
        "w1",
        &[("STASIS_INTERNAL_TOKEN", INTERNAL)],
    )
    .expect("a worker with the internal token joins");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cli_ok(&server, &["worker", "list"]).contains("ready") {
        assert!(Instant::now() < deadline, "w1 never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The control plane reaches the worker with the internal token.
    let module = crate::support::demo("counter");
    cli_ok(
        &server,
        &[
            "template",
            "push",
            "counter",
            module.to_str().expect("utf-8"),
        ],
    );
    cli_ok(&server, &["actor", "create", "c", "--template", "counter"]);
    let client = crate::support::client();
    assert_eq!(
        count(&to_actor(&client, server.ingress, "c", "POST", "/").await),
        1
    );

    // The internal token opens no admin route, the admin token no
    // internal one.
    let as_internal = cli(&server, INTERNAL, &["actor", "list"]);
    assert!(!as_internal.status.success());
    assert!(
        String::from_utf8_lossy(&as_internal.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&as_internal.stderr)
    );
    assert_eq!(status(server.admin, "/v1/actors", INTERNAL).await, 401);
    assert_eq!(status(server.admin, "/v1/actors", ADMIN).await, 200);
    assert_eq!(
        status(server.admin, "/internal/v1/workers", ADMIN).await,
        401
    );
    assert_ne!(
        status(server.admin, "/internal/v1/workers", INTERNAL).await,
        401
    );
    let listen = w.addr("listen=");
    assert_eq!(status(listen, "/internal/v1/actors", ADMIN).await, 401);
    assert_eq!(status(listen, "/internal/v1/actors", INTERNAL).await, 200);
}

#[test]
fn an_internal_token_equal_to_the_admin_token_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Err(stderr) = Server::start_in(
        &dir.path().join("data"),
        &["--admin-token", "same", "--internal-token", "same"],
    ) else {
        panic!("serve started with one token for both");
    };
    assert!(stderr.contains("--internal-token must differ"), "{stderr}");
}
