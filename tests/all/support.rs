//! Test support: the real `stasis` binary on loopback, real HTTP. The
//! process wrapper, the request core and the engine helpers are shared with
//! the benches in `stasis-test-util`; this module adds what only tests use:
//! a `Server` that knows the CLI verbs, remote workers, and raw HTTP.
#![allow(dead_code, reason = "shared by every test module; each uses a part")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use stasis_test_util::demos::count_in;
use stasis_test_util::http::{Http, Reply};
use stasis_test_util::{Artifacts, Proc, wait};

pub(crate) use stasis_test_util::http::{actor_host, burst, client};

/// The `stasis` binary and demo actors of this crate.
pub(crate) const STASIS: Artifacts = stasis_test_util::artifacts!();

/// Server logs are echoed to stderr when this variable is set.
const ECHO_LOG: &str = "STASIS_TEST_LOG";

/// Path of a demo actor module; `<stem>-js` is the JavaScript demo
/// `demos-js/<stem>.js`.
pub(crate) fn demo(name: &str) -> PathBuf {
    if let Some(stem) = name.strip_suffix("-js") {
        return Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("demos-js")
            .join(format!("{stem}.js"));
    }
    STASIS.demo(name)
}

/// A running `stasis serve` with its own data dir; killed on drop.
pub(crate) struct Server {
    process: Proc,
    pub ingress: SocketAddr,
    pub admin: SocketAddr,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `stasis serve` on a new temporary data dir with `extra` flags.
    pub(crate) fn start(extra: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let mut server = Self::start_in(&dir, extra).expect("serve starts");
        server._tmp = Some(tmp);
        server
    }

    /// Starts `stasis serve` on `data_dir`; Err(stderr) if it exits instead.
    pub(crate) fn start_in(data_dir: &Path, extra: &[&str]) -> Result<Server, String> {
        Self::start_in_env(data_dir, extra, &[])
    }

    /// [`Server::start_in`] with environment variables `env` (failpoints).
    pub(crate) fn start_in_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let mut command = STASIS.serve(data_dir, extra);
        command.envs(env.iter().copied());
        command.env("STASIS_LOG", "info");
        let echo = std::env::var_os(ECHO_LOG).is_some();
        let process = Proc::start(command, "stasis ready", "serve", echo)?;
        Ok(Server {
            ingress: process.addr("ingress="),
            admin: process.addr("admin="),
            process,
            data_dir: data_dir.to_owned(),
            _tmp: None,
        })
    }

    /// Pushes module `bytes` as template `name` (through a temporary file
    /// and the CLI); returns the template's newest version.
    pub(crate) fn push_module(&self, name: &str, bytes: &[u8]) -> u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(format!("{name}.wasm"));
        std::fs::write(&path, bytes).expect("write module");
        self.cli_ok(&["template", "push", name, path.to_str().expect("utf-8")]);
        self.cli_json(&["template", "get", name])["version"]
            .as_u64()
            .expect("version")
    }

    /// Everything the server wrote to stderr so far (its log); a line it
    /// is writing now may not be here yet (see [`Server::wait_for_log`]).
    pub(crate) fn log(&self) -> String {
        self.process.log()
    }

    /// Waits until the server's log contains `text` (10 s at most); panics
    /// with the log otherwise.
    pub(crate) fn wait_for_log(&self, text: &str) {
        self.process.wait_for_log(text, Duration::from_secs(10));
    }

    /// [`Self::wait_for_log`] sleeping on tokio between two looks, so the
    /// test's other tasks run while it waits.
    pub(crate) async fn wait_for_log_async(&self, text: &str) {
        self.process
            .wait_for_log_async(text, Duration::from_secs(10))
            .await;
    }

    /// The admin URL.
    pub(crate) fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// Runs a client verb of the real binary against this server.
    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        self.cli_command(args).output().expect("run stasis")
    }

    /// `stasis ARGS` aimed at this server's admin API.
    fn cli_command(&self, args: &[&str]) -> Command {
        let mut command = STASIS.command();
        command.args(args).env("STASIS_ADMIN", self.admin_url());
        command
    }

    /// Runs `stasis actor migrate ACTOR --to TO -o json` on a blocking
    /// thread, so the test can act while the move runs.
    pub(crate) fn migrate_in_background(
        &self,
        actor: &str,
        to: &str,
    ) -> tokio::task::JoinHandle<Output> {
        self.cli_in_background(&["actor", "migrate", actor, "--to", to, "-o", "json"])
    }

    /// Runs `stasis ARGS` against this server on a blocking thread, so the
    /// test can act (or watch) while the verb runs.
    pub(crate) fn cli_in_background(&self, args: &[&str]) -> tokio::task::JoinHandle<Output> {
        let mut command = self.cli_command(args);
        tokio::task::spawn_blocking(move || command.output().expect("run stasis"))
    }

    /// Runs a client verb and returns stdout; panics with stderr on failure.
    pub(crate) fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "stasis {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a client verb with `-o json` and parses its output.
    pub(crate) fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = self.cli_ok(&args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// Pushes a demo template under its own name.
    pub(crate) fn push(&self, demo_name: &str) {
        let path = demo(demo_name);
        self.cli_ok(&[
            "template",
            "push",
            demo_name,
            path.to_str().expect("utf-8 path"),
        ]);
    }

    /// Creates `actor` from `template`.
    pub(crate) fn create(&self, actor: &str, template: &str) -> serde_json::Value {
        self.cli_json(&["actor", "create", actor, "--template", template])
    }

    /// Stops gracefully and starts again on the same data dir.
    pub(crate) fn restart(self, extra: &[&str]) -> Server {
        self.restart_with(|_| extra.iter().map(|flag| (*flag).to_owned()).collect())
    }

    /// [`Server::restart`] with flags made from the stopped server's data
    /// dir (e.g. a quota of what it holds).
    pub(crate) fn restart_with(mut self, flags: impl FnOnce(&Path) -> Vec<String>) -> Server {
        let tmp = self._tmp.take();
        let dir = self.stop();
        let flags = flags(&dir);
        let extra: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut server = Server::start_in(&dir, &extra).expect("restart on the same data dir");
        server._tmp = tmp;
        server
    }

    /// Sends SIGTERM and waits for a clean exit (graceful shutdown). The
    /// data dir is deleted with `self` unless it was given to `start_in`.
    pub(crate) fn stop(&mut self) -> PathBuf {
        let status = self.process.terminate(Duration::from_secs(30));
        assert!(status.success(), "serve exited with {status}");
        self.data_dir.clone()
    }

    /// Kills the server with SIGKILL and waits for it.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// The server process's id (to send it signals or read `/proc`).
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// A response as tests look at it: [`Reply`] with the body as text.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl From<Reply> for Answer {
    fn from(reply: Reply) -> Answer {
        Answer {
            body: reply.text(),
            status: reply.status,
            headers: reply.headers,
        }
    }
}

/// Sends `method` to `host` (Host header) at `addr` with `body`.
pub(crate) async fn send(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Vec<u8>,
) -> Answer {
    stasis_test_util::http::send(client, addr, method, host, path, body)
        .await
        .into()
}

/// Sends a bodiless `method path` to actor `actor` through the ingress at
/// `addr`.
pub(crate) async fn to_actor(
    client: &Http,
    addr: SocketAddr,
    actor: &str,
    method: &str,
    path: &str,
) -> Answer {
    send(client, addr, method, &actor_host(actor), path, Vec::new()).await
}

/// POSTs to actor `actor` on `server` and returns the answer.
pub(crate) async fn post(server: &Server, actor: &str) -> Answer {
    to_actor(&client(), server.ingress, actor, "POST", "/").await
}

/// The count in a counting demo's answer (`... preserved memory count: N`,
/// `count: N`); panics unless the answer is a 200 with a count.
pub(crate) fn count(answer: &Answer) -> u64 {
    assert_eq!(answer.status, 200, "unexpected answer {answer:?}");
    count_in(&answer.body).unwrap_or_else(|| panic!("no count in {:?}", answer.body))
}

/// Writes raw bytes to `addr` and returns the raw response (the connection
/// is closed by the request's `Connection: close`).
pub(crate) async fn raw(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw HTTP/1.1 response.
pub(crate) fn raw_status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// A running `stasis worker run`; killed on drop.
pub(crate) struct RemoteWorker {
    process: Proc,
    pub name: String,
    pub listen: SocketAddr,
    _tmp: tempfile::TempDir,
}

impl RemoteWorker {
    /// Starts a remote worker named `name` joining `server`, with extra
    /// environment variables (e.g. failpoints).
    pub(crate) fn start(server: &Server, name: &str, env: &[(&str, &str)]) -> RemoteWorker {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut command = STASIS.worker(&server.admin_url(), name, &tmp.path().join("data"));
        command.envs(env.iter().copied());
        let echo = std::env::var_os(ECHO_LOG).is_some();
        let process = Proc::start(command, "stasis worker ready", name, echo)
            .unwrap_or_else(|stderr| panic!("worker {name} exited: {stderr}"));
        let worker = RemoteWorker {
            listen: process.addr("listen="),
            process,
            name: name.to_owned(),
            _tmp: tmp,
        };
        server.wait_for_worker(name, "ready");
        worker
    }

    /// SIGKILL.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// Everything the worker wrote to stderr so far (its log).
    pub(crate) fn log(&self) -> String {
        self.process.log()
    }

    /// The worker process's id (to send it signals, e.g. SIGSTOP/SIGCONT).
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGTERM, and wait for the exit (30 s at most).
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        self.process.terminate(Duration::from_secs(30))
    }

    /// Waits until the worker's log contains `text` (10 s at most); panics
    /// with the log otherwise.
    pub(crate) fn wait_for_log(&self, text: &str) {
        self.process.wait_for_log(text, Duration::from_secs(10));
    }

    /// [`Self::wait_for_log`] sleeping on tokio between two looks, so the
    /// test's other tasks run while it waits.
    pub(crate) async fn wait_for_log_async(&self, text: &str) {
        self.process
            .wait_for_log_async(text, Duration::from_secs(10))
            .await;
    }
}

/// What a worker started with `STASIS_FAILPOINT_INSTALL_DELAY_MS` logs
/// when a move's install of `actor` reaches it and starts waiting out the
/// delay: from then until the delay ends the move is under way (the
/// actor captured, its gate closed).
pub(crate) fn install_delay_line(actor: &str) -> String {
    format!("failpoint: install of {actor} waits")
}

impl Server {
    /// The text of `GET /metrics` on the admin port (asserts 200).
    pub(crate) async fn metrics(&self) -> String {
        let answer = send(
            &client(),
            self.admin,
            "GET",
            "localhost",
            "/metrics",
            Vec::new(),
        )
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        answer.body
    }

    /// Waits until `worker list` shows `name` in `state` (10 s at most).
    pub(crate) fn wait_for_worker(&self, name: &str, state: &str) {
        let what = format!("worker {name} to become {state}");
        wait::until_else(&what, Duration::from_secs(10), || {
            let list = self.cli_json(&["worker", "list"]);
            let found = list
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["name"] == name && w["state"] == state);
            if found { Ok(()) } else { Err(list) }
        });
    }

    /// The worker `actor` is placed on.
    pub(crate) fn worker_of(&self, actor: &str) -> String {
        self.cli_json(&["actor", "get", actor])["worker"]
            .as_str()
            .expect("worker")
            .to_owned()
    }
}

/// An HTTP/2 connection with prior knowledge (h2c) to `addr`: the request
/// sender and the task driving the connection (it ends when the connection
/// closes).
pub(crate) async fn h2c(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    (sender, tokio::spawn(conn))
}

/// A xorshift generator from `seed`: `rand(n)` is in `0..n`. Tests draw
/// their kill moments from it, so a failing round can be replayed.
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// The one byte a WAT test guest (the upgrade tests' counters) answered
/// to a POST.
pub(crate) async fn one_byte(server: &Server, actor: &str) -> u8 {
    let reply = post(server, actor).await;
    assert_eq!(reply.status, 200, "{actor}: {reply:?}");
    assert_eq!(reply.body.len(), 1, "{actor}: {reply:?}");
    reply.body.as_bytes()[0]
}

/// The value of the metric line `series` (its name and labels as printed)
/// in the `/metrics` text `text`, 0 when absent.
pub(crate) fn metric_in(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// The actor names of an `actor list -o json` answer, in its order.
pub(crate) fn names_in(listed: &serde_json::Value) -> Vec<String> {
    listed
        .as_array()
        .unwrap_or_else(|| panic!("a list: {listed}"))
        .iter()
        .filter_map(|a| a["name"].as_str().map(str::to_owned))
        .collect()
}
