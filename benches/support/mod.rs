//! What the benches that drive the real binary share: criterion's test
//! mode, the `stasis` process wrapper, the HTTP client and request helper,
//! and nearest-rank percentiles.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// Whether criterion runs in test mode (`cargo test`: each bench once).
pub fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    !has("--bench") || has("--test") || has("--list")
}

/// A process of the real `stasis` binary, started by a bench and killed
/// (SIGKILL, through its own handle) on drop.
pub struct Proc {
    child: Child,
    ready: String,
}

impl Proc {
    /// Starts `stasis ARGS` and waits for the stdout line starting with
    /// `ready_prefix`. stdout and stderr are drained by threads (stderr is
    /// echoed with `STASIS_BENCH_LOG` set).
    pub fn start(args: &[&str], data_dir: &Path, ready_prefix: &str) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stasis"))
            .args(args)
            .arg("--data-dir")
            .arg(data_dir)
            .env(
                "STASIS_LOG",
                std::env::var("STASIS_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stasis");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.starts_with(ready_prefix) => break line,
                Some(Ok(_)) => continue,
                _ => {
                    let out = child.wait_with_output().expect("wait");
                    panic!(
                        "stasis {args:?} exited: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        };
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        let stderr = child.stderr.take().expect("stderr");
        let echo = std::env::var_os("STASIS_BENCH_LOG").is_some();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[stasis] {line}");
                }
            }
        });
        Proc { child, ready }
    }

    /// `stasis serve` on loopback with ports picked by the kernel.
    pub fn serve(data_dir: &Path, extra: &[&str]) -> Proc {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(extra);
        Proc::start(&args, data_dir, "stasis ready")
    }

    /// `stasis worker run` joining `admin`.
    pub fn worker(admin: SocketAddr, name: &str, data_dir: &Path) -> Proc {
        let join = format!("http://{admin}");
        let args = [
            "worker",
            "run",
            "--join",
            &join,
            "--listen",
            "127.0.0.1:0",
            "--name",
            name,
        ];
        Proc::start(&args, data_dir, "stasis worker ready")
    }

    /// The address after `key` in the ready line.
    pub fn addr(&self, key: &str) -> SocketAddr {
        self.ready
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.ready))
    }
}

impl Proc {
    /// The process id (for `/proc/PID/...`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The benches' HTTP client.
pub type Http = Client<HttpConnector, Full<Bytes>>;

/// Sends `method path` to `addr` with `Host: host`; status and body.
pub async fn send(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Bytes,
) -> (u16, Bytes) {
    let request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("host", host)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let response = client.request(request).await.expect("HTTP request");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, body)
}

/// Nearest-rank percentile `p` (0–100) of `samples`.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `n`, p50, p99 and max of `samples`.
pub fn summary(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "n=0".to_owned();
    }
    format!(
        "n={} p50={:.3} p99={:.3} max={:.3}",
        samples.len(),
        percentile(samples, 50.0),
        percentile(samples, 99.0),
        percentile(samples, 100.0)
    )
}
