//! A cluster-mode deployment on loopback, for tests and benches: real etcd
//! members ([`EtcdCluster`]), a shared snapshot store (a real `s3s-fs`
//! through [`S3Server`], or a `file://` folder), `stasis serve --workers 0`
//! replicas and `stasis worker run` workers, every `stasis` process with
//! `--directory etcd://...` and the same `--snapshot-store`.
//!
//! Replicas and workers are [`Proc`]s: SIGKILLed on drop. Fields are public
//! so a test can kill or replace one part (`replicas[i] = None` after a
//! kill, `etcd.kill(i)`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::etcd::EtcdCluster;
use crate::s3::S3Server;
use crate::{Artifacts, Proc};

/// The etcd key prefix every deployment uses.
pub const PREFIX: &str = "/stasis-test";

/// How long [`Deployment::wait_for_workers`] and [`Deployment::leader`]
/// wait.
const WAIT: Duration = Duration::from_secs(30);

/// Which shared snapshot store the deployment uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// A real `s3s-fs` on loopback: `--snapshot-store s3://stasis/cluster`.
    S3,
    /// A folder in a temp dir: `--snapshot-store file:///ABS/PATH`.
    File,
}

/// What to start: counts, store, lease TTL, extra flags and logging.
#[derive(Debug, Clone)]
pub struct Setup {
    /// etcd members.
    pub members: usize,
    /// Replicas started at once.
    pub replicas: usize,
    /// Workers `w1..=workers` started at once (and waited for).
    pub workers: usize,
    /// The shared snapshot store.
    pub store: Store,
    /// `--lease-ttl` of every process (humantime, e.g. `2s`); `None` keeps
    /// the binary's default.
    pub lease_ttl: Option<String>,
    /// Flags every process gets too (replicas take only serve flags).
    pub flags: Vec<String>,
    /// `STASIS_LOG` of every process (`info`, `warn`).
    pub log: String,
    /// Echo the processes' logs to stderr, prefixed with their names.
    pub echo: bool,
    /// etcd serves clients over TLS only, with client certificates
    /// ([`EtcdCluster::start_tls`]); every process gets `--etcd-ca`,
    /// `--etcd-cert` and `--etcd-key`.
    pub tls: bool,
    /// Environment variables every `stasis` process gets too (failpoints
    /// such as `STASIS_FAILPOINT_FOLD_AFTER_MS`).
    pub env: Vec<(String, String)>,
}

impl Setup {
    /// `members` etcd members, `replicas` replicas and `workers` workers
    /// over S3, default lease TTL, no extra flags, logging at `info`,
    /// silently.
    #[must_use]
    pub fn new(members: usize, replicas: usize, workers: usize) -> Setup {
        Setup {
            members,
            replicas,
            workers,
            store: Store::S3,
            lease_ttl: None,
            flags: Vec::new(),
            log: "info".to_owned(),
            echo: false,
            tls: false,
            env: Vec::new(),
        }
    }
}

/// A `stasis serve --workers 0` replica.
#[derive(Debug)]
pub struct Replica {
    /// The process.
    pub process: Proc,
    /// Its ingress address (`Host: <actor>.actors.localhost`).
    pub ingress: SocketAddr,
    /// Its admin API address.
    pub admin: SocketAddr,
    _dir: tempfile::TempDir,
}

/// A `stasis worker run` in cluster mode.
#[derive(Debug)]
pub struct ClusterWorker {
    /// The process.
    pub process: Proc,
    /// Its `--name`.
    pub name: String,
    /// Its worker API address (`--listen`).
    pub listen: SocketAddr,
    /// Its `--data-dir`; the snapshot cache is `snapshot-cache/` in it.
    pub data_dir: PathBuf,
    _dir: tempfile::TempDir,
}

/// etcd, the snapshot store, replicas and workers of one test or bench.
pub struct Deployment {
    /// The `stasis` binary and demo actors.
    pub stasis: Artifacts,
    /// The etcd members.
    pub etcd: EtcdCluster,
    /// The S3 server ([`Store::S3`] only).
    pub s3: Option<S3Server>,
    /// Replicas; `None` once a test killed one.
    pub replicas: Vec<Option<Replica>>,
    /// Workers; `None` once a test killed one.
    pub workers: Vec<Option<ClusterWorker>>,
    setup: Setup,
    /// The `--snapshot-store` URL every process gets.
    pub store_url: String,
    /// The folder of a [`Store::File`] store.
    _file_store: Option<tempfile::TempDir>,
}

impl Deployment {
    /// Starts what `setup` says and waits until its workers are ready.
    ///
    /// # Panics
    /// If a part does not start (etcd or s3s-fs missing, a process exits),
    /// or the workers are not ready within 30 s.
    #[must_use]
    pub fn start(stasis: Artifacts, setup: Setup) -> Deployment {
        let file_store = (setup.store == Store::File).then(|| {
            tempfile::Builder::new()
                .prefix("stasis-file-store-")
                .tempdir()
                .expect("tempdir for the file store")
        });
        let s3 = (setup.store == Store::S3).then(S3Server::start);
        let store_url = match (&s3, &file_store) {
            (Some(s3), _) => s3.url("cluster"),
            (None, dir) => format!(
                "file://{}",
                dir.as_ref().map_or(Path::new("/"), |d| d.path()).display()
            ),
        };
        let mut deployment = Deployment {
            stasis,
            etcd: if setup.tls {
                EtcdCluster::start_tls(setup.members)
            } else {
                EtcdCluster::start(setup.members)
            },
            s3,
            replicas: Vec::new(),
            workers: Vec::new(),
            setup,
            store_url,
            _file_store: file_store,
        };
        for _ in 0..deployment.setup.replicas {
            let replica = deployment.start_replica(&[]).expect("replica starts");
            deployment.replicas.push(Some(replica));
        }
        deployment.wait_until_every_replica_knows_the_leader();
        let workers = deployment.setup.workers;
        for i in 1..=workers {
            deployment.add_worker(&format!("w{i}"));
        }
        if workers > 0 {
            deployment.wait_for_workers(workers);
        }
        deployment
    }

    /// `--directory`, `--snapshot-store` and `--lease-ttl` (if set).
    #[must_use]
    pub fn cluster_args(&self) -> Vec<String> {
        let mut args = vec![
            "--directory".into(),
            self.etcd.url(PREFIX),
            "--snapshot-store".into(),
            self.store_url.clone(),
        ];
        if let Some(ttl) = &self.setup.lease_ttl {
            args.extend(["--lease-ttl".into(), ttl.clone()]);
        }
        if let Some(tls) = self.etcd.tls() {
            for (flag, file) in [
                ("--etcd-ca", &tls.ca),
                ("--etcd-cert", &tls.cert),
                ("--etcd-key", &tls.key),
            ] {
                args.extend([flag.into(), file.display().to_string()]);
            }
        }
        args
    }

    /// The S3 settings (`AWS_*`) every process gets (none for a file
    /// store), for starting processes of one's own against this cluster.
    #[must_use]
    pub fn env(&self) -> Vec<(String, String)> {
        self.store_env()
    }

    /// The S3 settings (`AWS_*`) every process gets; none for a file
    /// store.
    fn store_env(&self) -> Vec<(String, String)> {
        self.s3.as_ref().map(S3Server::env).unwrap_or_default()
    }

    /// Starts one more replica with `extra` flags (not added to
    /// [`Deployment::replicas`]).
    ///
    /// # Errors
    /// Its stderr, if it exits instead of getting ready.
    pub fn start_replica(&self, extra: &[&str]) -> Result<Replica, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args: Vec<String> = vec!["--workers".into(), "0".into()];
        args.extend(self.cluster_args());
        args.extend(self.setup.flags.iter().cloned());
        args.extend(extra.iter().map(|e| (*e).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut command = self.stasis.serve(&dir.path().join("data"), &args);
        command
            .env("STASIS_LOG", &self.setup.log)
            .envs(self.store_env())
            .envs(self.setup.env.iter().cloned());
        let process = Proc::start(command, "stasis ready", "replica", self.setup.echo)?;
        Ok(Replica {
            ingress: process.addr("ingress="),
            admin: process.addr("admin="),
            process,
            _dir: dir,
        })
    }

    /// Starts worker `name` (a fresh data dir) and adds it to
    /// [`Deployment::workers`]; does not wait for it to be ready.
    ///
    /// # Panics
    /// If it exits instead of getting ready (with its stderr).
    pub fn add_worker(&mut self, name: &str) {
        self.add_worker_with(name, &[]);
    }

    /// [`Deployment::add_worker`] with `env` set last (e.g. an
    /// `AWS_ENDPOINT_URL` of a [`crate::fault_proxy::FaultProxy`] in front
    /// of the S3 server, for this worker only).
    ///
    /// # Panics
    /// If it exits instead of getting ready (with its stderr).
    pub fn add_worker_with(&mut self, name: &str, env: &[(String, String)]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        let mut command = self.stasis.command();
        command
            .args(["worker", "run", "--name", name, "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(self.cluster_args())
            .env("STASIS_LOG", &self.setup.log)
            .envs(self.store_env())
            .envs(self.setup.env.iter().cloned())
            .envs(env.iter().cloned());
        let process = Proc::start(command, "stasis worker ready", name, self.setup.echo)
            .unwrap_or_else(|stderr| panic!("worker {name} exited: {stderr}"));
        self.workers.push(Some(ClusterWorker {
            listen: process.addr("listen="),
            process,
            name: name.to_owned(),
            data_dir,
            _dir: dir,
        }));
    }

    /// Replica `i`.
    ///
    /// # Panics
    /// If it was killed (`None`).
    #[must_use]
    pub fn replica(&self, i: usize) -> &Replica {
        self.replicas[i].as_ref().expect("replica running")
    }

    /// The running worker named `name`.
    ///
    /// # Panics
    /// If there is none.
    #[must_use]
    pub fn worker(&self, name: &str) -> &ClusterWorker {
        self.workers
            .iter()
            .flatten()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("no worker {name}"))
    }

    /// Removes the running worker `name` from [`Deployment::workers`] and
    /// SIGKILLs it (`kill -9`, no drain, no lease revocation).
    ///
    /// # Panics
    /// If there is no such worker.
    pub fn kill_worker(&mut self, name: &str) {
        let slot = self
            .workers
            .iter_mut()
            .find(|w| w.as_ref().is_some_and(|w| w.name == name))
            .unwrap_or_else(|| panic!("no worker {name}"));
        if let Some(mut worker) = slot.take() {
            worker.process.kill();
        }
    }

    /// `stasis ARGS` against replica `i`'s admin API, with the setup's
    /// environment (e.g. its `STASIS_ADMIN_TOKEN`).
    pub fn cli(&self, i: usize, args: &[&str]) -> Output {
        self.stasis
            .command()
            .args(args)
            .env("STASIS_ADMIN", format!("http://{}", self.replica(i).admin))
            .envs(self.setup.env.iter().cloned())
            .output()
            .expect("run stasis")
    }

    /// [`Deployment::cli`], asserting success; its stdout.
    ///
    /// # Panics
    /// If the command fails (with its stderr).
    pub fn cli_ok(&self, i: usize, args: &[&str]) -> String {
        let out = self.cli(i, args);
        assert!(
            out.status.success(),
            "stasis {args:?} via replica {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// [`Deployment::cli_ok`] with `-o json`, parsed.
    ///
    /// # Panics
    /// If the command fails or does not print JSON.
    pub fn cli_json(&self, i: usize, args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = self.cli_ok(i, &args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// The index of the first running replica.
    ///
    /// # Panics
    /// If none runs.
    #[must_use]
    pub fn any_replica(&self) -> usize {
        self.replicas
            .iter()
            .position(Option::is_some)
            .expect("a replica runs")
    }

    /// Waits (30 s at most) until `worker list`, asked through a running
    /// replica, shows exactly `n` ready workers; returns their names.
    ///
    /// # Panics
    /// If that does not happen in time.
    pub fn wait_for_workers(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = self.cli(self.any_replica(), &["worker", "list", "-o", "json"]);
            if out.status.success()
                && let Ok(list) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            {
                let ready: Vec<String> = list
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|w| w["state"] == "ready")
                    .filter_map(|w| w["name"].as_str().map(str::to_owned))
                    .collect();
                if ready.len() == n {
                    return ready;
                }
            }
            assert!(
                Instant::now() < deadline,
                "never {n} ready workers: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (30 s at most) until every replica answers an admin request
    /// (`template list`): the leader itself, and each follower once its
    /// watch has found the leader to forward to (until then it answers
    /// 503 "no leader replica yet").
    ///
    /// # Panics
    /// If that does not happen in time.
    fn wait_until_every_replica_knows_the_leader(&self) {
        let deadline = Instant::now() + WAIT;
        for i in 0..self.replicas.len() {
            loop {
                let out = self.cli(i, &["template", "list"]);
                if out.status.success() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {i} never reached a leader: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The index of the replica whose log says it leads (needs logging at
    /// `info`); waits 30 s at most.
    ///
    /// # Panics
    /// If no replica says so in time.
    #[must_use]
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            let leading = self.replicas.iter().enumerate().find(|(_, r)| {
                r.as_ref()
                    .is_some_and(|r| r.process.log().contains("serving as the leader"))
            });
            if let Some((i, _)) = leading {
                return i;
            }
            assert!(Instant::now() < deadline, "no replica became the leader");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Pushes the demo actor `counter` as template `counter` through
    /// replica `via`.
    ///
    /// # Panics
    /// If the push fails.
    pub fn push_counter(&self, via: usize) {
        let path = self.stasis.demo("counter");
        self.cli_ok(
            via,
            &[
                "template",
                "push",
                "counter",
                path.to_str().expect("utf-8 path"),
            ],
        );
    }
}
