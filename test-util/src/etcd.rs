//! A real etcd cluster for tests: N members of `/usr/bin/etcd` (or
//! `$ETCD_BIN`) on free loopback ports, data in a temporary directory,
//! short heartbeat and election timeouts (50 ms / 500 ms) so failovers
//! take well under a second; killed on drop. [`EtcdCluster::start_tls`]
//! serves clients over TLS only and requires client certificates (made
//! with the `openssl` command: a CA, and one certificate for
//! `127.0.0.1` that both the members and the clients present).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::reserved_port;

/// How long a member may take to report itself healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// Started etcd members forming one cluster.
pub struct EtcdCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    members: Vec<Member>,
    initial_cluster: String,
    tls: Option<TlsFiles>,
    /// Flags every member gets too (limits other than the defaults).
    flags: Vec<String>,
}

/// PEM files of a TLS cluster ([`EtcdCluster::start_tls`]).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed every certificate (for `--etcd-ca`).
    pub ca: PathBuf,
    /// A client certificate for `127.0.0.1` (for `--etcd-cert`).
    pub cert: PathBuf,
    /// Its key (for `--etcd-key`).
    pub key: PathBuf,
}

struct Member {
    client_port: u16,
    peer_port: u16,
    /// Plain-HTTP `/health` (`--listen-metrics-urls`), also with TLS.
    metrics_port: u16,
    child: Option<Child>,
}

/// True if `GET /health` on `port` answers `"health":"true"`.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl EtcdCluster {
    /// Starts `members` members and waits until each answers `GET /health`
    /// with `"health":"true"`.
    ///
    /// # Panics
    /// If etcd is not installed (naming the install command), or a member
    /// is not healthy within 30 s (with the tail of its log).
    pub fn start(members: usize) -> EtcdCluster {
        Self::start_with(members, false, &[])
    }

    /// As [`EtcdCluster::start`], every member with `flags` too (e.g.
    /// `--max-txn-ops=16`: limits other than etcd's defaults).
    ///
    /// # Panics
    /// As [`EtcdCluster::start`].
    pub fn start_with_flags(members: usize, flags: &[&str]) -> EtcdCluster {
        Self::start_with(members, false, flags)
    }

    /// As [`EtcdCluster::start`], but clients must speak TLS and present a
    /// certificate signed by the cluster's CA ([`EtcdCluster::tls`]).
    ///
    /// # Panics
    /// As [`EtcdCluster::start`], or if `openssl` cannot make the
    /// certificates.
    pub fn start_tls(members: usize) -> EtcdCluster {
        Self::start_with(members, true, &[])
    }

    /// The PEM files of a TLS cluster; `None` for a plain one.
    #[must_use]
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    fn start_with(members: usize, tls: bool, flags: &[&str]) -> EtcdCluster {
        let bin = std::env::var_os("ETCD_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
        assert!(
            bin.exists(),
            "etcd not found at {} (set $ETCD_BIN, or install it: apt-get install -y etcd-server)",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("tempdir for etcd");
        let members: Vec<Member> = (0..members)
            .map(|_| Member {
                client_port: reserved_port(),
                peer_port: reserved_port(),
                metrics_port: reserved_port(),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("m{i}=http://127.0.0.1:{}", m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let tls = tls.then(|| make_certificates(dir.path()));
        let mut cluster = EtcdCluster {
            bin,
            dir,
            members,
            initial_cluster,
            tls,
            flags: flags.iter().map(|&f| f.to_owned()).collect(),
        };
        for i in 0..cluster.members.len() {
            cluster.spawn(i);
        }
        for i in 0..cluster.members.len() {
            cluster.wait_healthy(i);
        }
        cluster
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{i}.log"))
    }

    fn spawn(&mut self, i: usize) {
        let (client, peer) = (self.members[i].client_port, self.members[i].peer_port);
        let metrics = self.members[i].metrics_port;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let data: &Path = &self.dir.path().join(format!("m{i}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .expect("etcd log file");
        let mut command = Command::new(&self.bin);
        if let Some(tls) = &self.tls {
            command
                .arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!("--trusted-ca-file={}", tls.ca.display()))
                .arg("--client-cert-auth");
        }
        let child = command
            .arg(format!("--name=m{i}"))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!(
                "--listen-client-urls={scheme}://127.0.0.1:{client}"
            ))
            .arg(format!(
                "--advertise-client-urls={scheme}://127.0.0.1:{client}"
            ))
            .arg(format!("--listen-metrics-urls=http://127.0.0.1:{metrics}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=stasis-test")
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        self.members[i].child = Some(child);
    }

    fn wait_healthy(&mut self, i: usize) {
        let start = Instant::now();
        while !healthy(self.members[i].metrics_port) {
            let exited = self.members[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || start.elapsed() > HEALTHY_WITHIN {
                let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
                let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                panic!(
                    "etcd member {i} not healthy ({exited:?}); last log lines, newest first:\n{tail}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The client endpoints: `127.0.0.1:p1,127.0.0.1:p2,...`.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The `--directory` URL for `prefix` (e.g. `/t1`):
    /// `etcd://127.0.0.1:p1,...` followed by `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}{prefix}", self.endpoints())
    }

    /// The process ID of member `i`.
    ///
    /// # Panics
    /// If member `i` is not running (killed).
    pub fn pid(&self, i: usize) -> u32 {
        self.members[i]
            .child
            .as_ref()
            .map(Child::id)
            .unwrap_or_else(|| panic!("etcd member {i} is not running"))
    }

    /// SIGKILLs member `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on the same ports and data directory, and
    /// waits until it is healthy.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_healthy(i);
    }
}

impl EtcdCluster {
    /// Writes `records` (key, value) straight into etcd through member 0's
    /// JSON gateway (`/v3/kv/txn`), 128 puts per transaction (etcd's limit
    /// on operations per transaction): seeds a directory of many actors
    /// without creating them one by one. Not for a TLS cluster.
    ///
    /// # Panics
    /// If etcd refuses a transaction.
    pub async fn put_many(&self, records: impl IntoIterator<Item = (String, Vec<u8>)>) {
        use base64::Engine as _;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let client = crate::http::client();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.members[0].client_port));
        let mut records = records.into_iter().peekable();
        while records.peek().is_some() {
            let puts: Vec<serde_json::Value> = records
                .by_ref()
                .take(128)
                .map(|(key, value)| {
                    serde_json::json!({"requestPut": {"key": b64(key.as_bytes()), "value": b64(&value)}})
                })
                .collect();
            let body = serde_json::json!({ "success": puts }).to_string();
            let _applied =
                crate::http::send(&client, addr, "POST", "127.0.0.1", "/v3/kv/txn", body)
                    .await
                    .ok("an etcd transaction of puts");
        }
    }

    /// The value of `key` (member 0's JSON gateway), if it is set.
    ///
    /// # Panics
    /// If etcd cannot be read.
    pub async fn get(&self, key: &str) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::STANDARD;
        let client = crate::http::client();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.members[0].client_port));
        let body = serde_json::json!({ "key": engine.encode(key.as_bytes()) }).to_string();
        let answer = crate::http::send(&client, addr, "POST", "127.0.0.1", "/v3/kv/range", body)
            .await
            .ok("an etcd read")
            .json();
        let value = answer["kvs"][0]["value"].as_str()?;
        Some(engine.decode(value).expect("etcd's value is base64"))
    }
}

/// Makes a CA and one certificate for `127.0.0.1` (server and client use)
/// in `dir`.
fn make_certificates(dir: &Path) -> TlsFiles {
    let ca = crate::certs::TestCa::new(dir);
    let node = ca.issue("node", "127.0.0.1", "IP:127.0.0.1,DNS:localhost");
    TlsFiles {
        ca: ca.cert,
        cert: node.cert,
        key: node.key,
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped (SIGSTOP) member.
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
