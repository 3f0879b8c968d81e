//! Test support: the real `stasis` binary on loopback, real HTTP.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Path of a demo actor module.
pub fn demo(name: &str) -> PathBuf {
    Path::new(env!("STASIS_DEMOS_DIR")).join(format!("{name}.wasm"))
}

/// A running `stasis serve` with its own data dir; killed on drop.
pub struct Server {
    pub child: Child,
    /// Everything the server wrote to stderr so far (its log).
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    pub ingress: SocketAddr,
    pub admin: SocketAddr,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `stasis serve` on a new temporary data dir with `extra` flags.
    pub fn start(extra: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let mut server = Self::start_in(&dir, extra).expect("serve starts");
        server._tmp = Some(tmp);
        server
    }

    /// Starts `stasis serve` on `data_dir`; Err(stderr) if it exits instead.
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> Result<Server, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stasis"))
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(extra)
            .env("STASIS_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stasis serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("stasis ready") => break line,
                Some(Ok(_)) => continue,
                _ => {
                    let out = child.wait_with_output().expect("wait");
                    return Err(String::from_utf8_lossy(&out.stderr).into_owned());
                }
            }
        };
        let field = |key: &str| -> SocketAddr {
            ready
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("bad ready line {ready:?}"))
        };
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if std::env::var_os("STASIS_TEST_LOG").is_some() {
                    eprintln!("[serve] {line}");
                }
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        Ok(Server {
            log,
            ingress: field("ingress="),
            admin: field("admin="),
            child,
            data_dir: data_dir.to_owned(),
            _tmp: None,
        })
    }

    /// The admin URL.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// Runs a client verb of the real binary against this server.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_stasis"))
            .args(args)
            .env("STASIS_ADMIN", self.admin_url())
            .output()
            .expect("run stasis")
    }

    /// Runs `stasis actor migrate ACTOR --to TO -o json` on a blocking
    /// thread, so the test can act while the move runs.
    pub fn migrate_in_background(&self, actor: &str, to: &str) -> tokio::task::JoinHandle<Output> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stasis"));
        command
            .args(["actor", "migrate", actor, "--to", to, "-o", "json"])
            .env("STASIS_ADMIN", self.admin_url());
        tokio::task::spawn_blocking(move || command.output().expect("run stasis"))
    }

    /// Runs a client verb and returns stdout; panics with stderr on failure.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "stasis {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a client verb with `-o json` and parses its output.
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = self.cli_ok(&args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// Pushes a demo template under its own name.
    pub fn push(&self, demo_name: &str) {
        let path = demo(demo_name);
        self.cli_ok(&[
            "template",
            "push",
            demo_name,
            path.to_str().expect("utf-8 path"),
        ]);
    }

    /// Creates `actor` from `template`.
    pub fn create(&self, actor: &str, template: &str) -> serde_json::Value {
        self.cli_json(&["actor", "create", actor, "--template", template])
    }

    /// Stops gracefully and starts again on the same data dir.
    pub fn restart(mut self, extra: &[&str]) -> Server {
        let tmp = self._tmp.take();
        let dir = self.stop();
        let mut server = Server::start_in(&dir, extra).expect("restart on the same data dir");
        server._tmp = tmp;
        server
    }

    /// Sends SIGTERM and waits for a clean exit (graceful shutdown). The
    /// data dir is deleted with `self` unless it was given to `start_in`.
    pub fn stop(&mut self) -> PathBuf {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "serve exited with {status}");
                break;
            }
            assert!(Instant::now() < deadline, "serve did not stop within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.data_dir.clone()
    }

    /// Kills the server with SIGKILL and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTP client for tests (keep-alive, HTTP/1.1).
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A response as tests look at it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

/// Sends `method` to `host` (Host header) at `addr` with `body`.
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Vec<u8>,
) -> Answer {
    let request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("host", host)
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = client.request(request).await.expect("HTTP request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// POSTs to actor `actor` on `server` and returns the answer.
pub async fn post(server: &Server, actor: &str) -> Answer {
    send(
        &client(),
        server.ingress,
        "POST",
        &format!("{actor}.actors.localhost"),
        "/",
        Vec::new(),
    )
    .await
}

/// The count in a counter answer (`... preserved memory count: N`).
pub fn count(answer: &Answer) -> u64 {
    assert_eq!(answer.status, 200, "unexpected answer {answer:?}");
    answer
        .body
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {:?}", answer.body))
}

/// Writes raw bytes to `addr` and returns the raw response (the connection
/// is closed by the request's `Connection: close`).
pub async fn raw(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw HTTP/1.1 response.
pub fn raw_status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// A running `stasis worker run`; killed on drop.
pub struct RemoteWorker {
    pub child: Child,
    pub name: String,
    pub listen: SocketAddr,
    _tmp: tempfile::TempDir,
}

impl RemoteWorker {
    /// Starts a remote worker named `name` joining `server`, with extra
    /// environment variables (e.g. failpoints).
    pub fn start(server: &Server, name: &str, env: &[(&str, &str)]) -> RemoteWorker {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_stasis"))
            .args([
                "worker",
                "run",
                "--join",
                &server.admin_url(),
                "--listen",
                "127.0.0.1:0",
                "--name",
                name,
                "--data-dir",
            ])
            .arg(tmp.path().join("data"))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stasis worker run");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("stasis worker ready") => break line,
                Some(Ok(_)) => continue,
                _ => {
                    let out = child.wait_with_output().expect("wait");
                    panic!(
                        "worker {name} exited: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        };
        let listen = ready
            .split_whitespace()
            .find_map(|w| w.strip_prefix("listen="))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("bad ready line {ready:?}"));
        let stderr = child.stderr.take().expect("stderr");
        let tag = name.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if std::env::var_os("STASIS_TEST_LOG").is_some() {
                    eprintln!("[{tag}] {line}");
                }
            }
        });
        let worker = RemoteWorker {
            child,
            name: name.to_owned(),
            listen,
            _tmp: tmp,
        };
        server.wait_for_worker(name, "ready");
        worker
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.child.wait().expect("wait")
    }
}

impl Drop for RemoteWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Server {
    /// Waits until `worker list` shows `name` in `state` (10 s at most).
    pub fn wait_for_worker(&self, name: &str, state: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let list = self.cli_json(&["worker", "list"]);
            let found = list
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["name"] == name && w["state"] == state);
            if found {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "worker {name} never became {state}: {list}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The worker `actor` is placed on.
    pub fn worker_of(&self, actor: &str) -> String {
        self.cli_json(&["actor", "get", actor])["worker"]
            .as_str()
            .expect("worker")
            .to_owned()
    }
}
