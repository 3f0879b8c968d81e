//! A real S3-compatible server for tests: [`S3Server`] runs `s3s-fs` (the
//! `s3s` project's file-system-backed S3 server) on a free loopback port,
//! with one bucket, and kills it on drop.

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::reserved_port;

/// How to install the server when it is missing.
const INSTALL: &str = "cargo install s3s-fs --version 0.14.1 --features binary --locked";

/// How long the server may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A started `s3s-fs` with one bucket, answering on loopback; SIGKILLed
/// and reaped on drop (its data, in a temp dir, goes with it).
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    addr: SocketAddr,
    bucket: String,
    access_key: String,
    secret_key: String,
    log: PathBuf,
    root: tempfile::TempDir,
}

/// The `s3s-fs` binary: `$S3S_FS`, else `s3s-fs` on `PATH`, else
/// `~/.cargo/bin/s3s-fs`.
///
/// # Panics
/// If none exists, with the command that installs it.
#[must_use]
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("S3S_FS") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("s3s-fs"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(path) = on_path {
        return path;
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let cargo_bin = home.join(".cargo/bin/s3s-fs");
    assert!(
        cargo_bin.is_file(),
        "s3s-fs not found ($S3S_FS, PATH, ~/.cargo/bin); install it with: {INSTALL}"
    );
    cargo_bin
}

impl S3Server {
    /// Starts `s3s-fs` with bucket `stasis`, access key `stasis-test` and a
    /// secret key, data in a new temp dir, and waits until it accepts
    /// connections (at most 15 s).
    ///
    /// # Panics
    /// If the binary is missing, cannot start, exits, or does not answer in
    /// time (with its log).
    #[must_use]
    pub fn start() -> Self {
        let root = tempfile::tempdir().expect("temp dir for s3s-fs");
        let data = root.path().join("data");
        let bucket = "stasis".to_owned();
        // s3s-fs keeps a bucket as a folder under its root.
        std::fs::create_dir_all(data.join(&bucket)).expect("bucket folder");
        let log = root.path().join("s3s-fs.log");
        let port = reserved_port();
        let access_key = "stasis-test".to_owned();
        let secret_key = "stasis-test-secret".to_owned();
        let out = std::fs::File::create(&log).expect("s3s-fs log");
        let err = out.try_clone().expect("s3s-fs log");
        let binary = binary();
        let child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", &access_key, "--secret-key", &secret_key])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
        let mut server = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            bucket,
            access_key,
            secret_key,
            log,
            root,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("s3s-fs exited ({status}) before answering:\n{}", self.log());
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not answer on {} within {START_TIMEOUT:?}:\n{}",
                self.addr,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `s3://<bucket>/<prefix>` (`s3://<bucket>` for an empty prefix).
    #[must_use]
    pub fn url(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{prefix}", self.bucket)
        }
    }

    /// The settings a client needs, as environment variables:
    /// `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION` (`us-east-1`) and `AWS_ALLOW_HTTP` (`true`).
    #[must_use]
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server's address (for a proxy in front of it).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bucket's name.
    #[must_use]
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The folder holding the bucket's objects (`<root>/<bucket>`): an
    /// object `a/b` is the file `a/b` in it.
    #[must_use]
    pub fn bucket_dir(&self) -> PathBuf {
        self.root.path().join("data").join(&self.bucket)
    }

    /// What the server printed so far.
    #[must_use]
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&self.log) {
            let _ = file.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
