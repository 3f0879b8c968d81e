//! Cluster mode of `stasis serve` (`--directory etcd://...`): one replica.
//! Every replica binds the ingress and the admin API and answers both; one
//! at a time, elected through etcd, is the leader and makes every decision
//! (placement, moves, failure detection, rebalance, gc). A follower routes
//! ingress requests itself, by the placements it watches in etcd (a stale
//! one is refused by the worker, 421, and retried by the refreshed one),
//! and forwards its admin API to the leader ([`crate::forward`]) but for
//! `/healthz` and its own `/metrics`. When the leader's lease ends (it was
//! killed or cut off from etcd), a follower is elected within the lease
//! TTL, opens the leader's control plane from etcd and the shared store,
//! and serves with it; requests to actors keep flowing through the
//! followers meanwhile.
//!
//! # Read-your-writes
//! A follower's placements come from its watch of etcd, which may lag a
//! moment behind a write it forwarded: a client that created an actor
//! through a follower and sent it a request through the same follower at
//! once used to get a 404. So the leader's answer to a forwarded write
//! carries the etcd revision of the newest actor record it wrote
//! ([`crate::forward::REVISION_HEADER`]), and the follower holds the answer
//! until its placements have applied that revision (or a later one), at
//! most [`CAUGHT_UP_TIMEOUT`]; past it, it answers anyway and says so in a
//! log line. Reads of the admin API are forwarded to the leader, whose
//! control plane holds its own writes, so every read through the follower
//! after the answer (a request to the actor by host name, `actor get`,
//! `actor list`) sees the write.
//!
//! A leader that cannot renew its lease in time steps down: it drops its
//! control plane (its background tasks end with it), serves as a follower
//! again once etcd answers, and campaigns again. A write its control plane
//! still had in flight is refused by etcd (the leader's directory is
//! fenced by its lease, see [`crate::cluster::etcd::EtcdDirectory`]), so
//! a woken leader cannot undo a newer leader's decisions. A replica cut
//! off from etcd keeps running and comes back by itself when etcd does.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;

use stasis_cluster::etcd::{Etcd, LeaderRecord, Leadership};
use stasis_contract::directory::Directory;
use stasis_contract::error::ApiError;
use stasis_contract::headers::REVISION_HEADER;
use stasis_contract::metrics::Metrics;
use stasis_control::{ControlPlane, Role};
use stasis_http::serve::{Body, json_error, text_error};
use stasis_ingress::api::AdminApi;
use stasis_ingress::forward::Forwarder;
use stasis_ingress::router::Router;

use crate::listen::{Bound, ClusterConfig, DRAIN, ServeOptions};

/// A control plane this replica serves with, and its background tasks
/// (aborted when it is dropped).
struct Serving {
    control: Arc<ControlPlane>,
    router: Arc<Router>,
    api: Arc<AdminApi>,
    /// A follower's: the etcd revision its placements have applied.
    applied_revision: Option<watch::Receiver<i64>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Longest a follower holds the answer to a forwarded write for its
/// placements to apply it (see the module doc).
const CAUGHT_UP_TIMEOUT: Duration = Duration::from_secs(2);

impl Serving {
    /// The leader's answer to a write this follower forwarded: held until
    /// the placements have applied the etcd revision it carries
    /// ([`REVISION_HEADER`], removed here), at most [`CAUGHT_UP_TIMEOUT`]
    /// (then it is given as it is, and a log line says so). An answer
    /// without the header (not a write, or from a leader that does not
    /// send it) is given at once.
    async fn read_your_write(&self, answer: &mut Response<Body>) {
        let Some(value) = answer.headers_mut().remove(REVISION_HEADER) else {
            return;
        };
        let Some(revision) = value.to_str().ok().and_then(|v| v.parse::<i64>().ok()) else {
            tracing::warn!(
                "the leader's answer carried an unreadable {REVISION_HEADER} {value:?}; answering at once"
            );
            return;
        };
        let Some(applied) = &self.applied_revision else {
            return;
        };
        if !reaches(applied.clone(), revision, CAUGHT_UP_TIMEOUT).await {
            tracing::warn!(
                revision,
                applied_revision = *applied.borrow(),
                "this follower's watch of etcd did not apply a forwarded write (etcd revision {revision}) within {CAUGHT_UP_TIMEOUT:?}; answering anyway: a request through this replica right after may not see the write yet"
            );
        }
    }
}

/// Whether `applied` reaches `revision` within `timeout` (false if it does
/// not, or its sender is gone first).
async fn reaches(mut applied: watch::Receiver<i64>, revision: i64, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, applied.wait_for(|r| *r >= revision)).await,
        Ok(Ok(_))
    )
}

impl Drop for Serving {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One replica: what it serves with now, and who leads.
struct Replica {
    me: LeaderRecord,
    serving: RwLock<Option<Arc<Serving>>>,
    leader: watch::Receiver<Option<LeaderRecord>>,
    forwarder: Forwarder,
}

/// Which listener a request came to.
#[derive(Clone, Copy)]
enum Listener {
    Ingress,
    Admin,
}

impl Replica {
    fn serving(&self) -> Option<Arc<Serving>> {
        self.serving
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn serve_with(&self, serving: Serving) {
        *self.serving.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(serving));
    }

    /// Drops the control plane served with (a leader that lost its
    /// leadership): until the next one opens, requests get 503.
    fn step_down(&self) {
        self.serving
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Ingress: routed here, by the placements (a follower's are watched).
    /// Admin API: answered here by the leader; a follower answers
    /// `/healthz` and `/metrics` (its own) and forwards the rest.
    /// `/healthz` says `ok (leader NAME)` or `ok (follower NAME)`.
    async fn handle(
        &self,
        listener: Listener,
        request: Request<Incoming>,
        peer: std::net::SocketAddr,
    ) -> Response<Body> {
        let Some(serving) = self.serving() else {
            let e = ApiError::unavailable("the replica is starting; retry");
            return match listener {
                Listener::Ingress => text_error(&e),
                Listener::Admin => json_error(&e),
            };
        };
        let follower = !serving.control.decides();
        match listener {
            // Sockets are held where the actors' control plane is: the
            // leader (see `stasis_ingress::relay`).
            Listener::Ingress
                if follower && stasis_ingress::sockets::may_become_socket(request.headers()) =>
            {
                let leader = self.leader.borrow().clone();
                let relayed = match leader {
                    Some(leader) if leader.name != self.me.name => {
                        stasis_ingress::relay::relay(&self.me.name, &leader.ingress, request).await
                    }
                    _ => Err(ApiError::unavailable(
                        "no leader replica yet (an election is under way); retry",
                    )),
                };
                relayed.unwrap_or_else(|e| text_error(&e))
            }
            Listener::Ingress => serving.router.handle(request, peer).await,
            Listener::Admin if request.uri().path() == "/healthz" => {
                let role = if follower { "follower" } else { "leader" };
                let mut answer = Response::new(stasis_http::serve::Body::new(bytes::Bytes::from(
                    format!("ok ({role} {})\n", self.me.name),
                )));
                answer.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                answer
            }
            Listener::Admin if !follower || request.uri().path() == "/metrics" => {
                serving.api.handle(request).await
            }
            // A streamed answer is relayed as it comes, not collected.
            Listener::Admin if stasis_ingress::follow::is_follow(&request) => {
                let leader = self.leader.borrow().clone();
                let relayed = match leader {
                    Some(leader) if leader.name != self.me.name => {
                        stasis_ingress::relay::relay(&self.me.name, &leader.admin, request).await
                    }
                    _ => Err(ApiError::unavailable(
                        "no leader replica yet (an election is under way); retry",
                    )),
                };
                relayed.unwrap_or_else(|e| json_error(&e))
            }
            Listener::Admin => {
                let leader = self.leader.borrow().clone();
                let (method, path) = (request.method().clone(), request.uri().path().to_owned());
                let answer = match leader {
                    Some(leader) if leader.name != self.me.name => {
                        let answer = self.forwarder.forward(&leader.admin, request).await;
                        if let Ok(answer) = &answer {
                            serving
                                .api
                                .access()
                                .forwarded(&method, &path, answer.status());
                        }
                        answer
                    }
                    // No leader, or this replica was elected and is still
                    // opening the control plane.
                    _ => Err(ApiError::unavailable(
                        "no leader replica yet (an election is under way); retry",
                    )),
                };
                match answer {
                    Ok(mut answer) => {
                        serving.read_your_write(&mut answer).await;
                        answer
                    }
                    Err(e) => json_error(&e),
                }
            }
        }
    }
}

/// The address others reach `bound` at: `advertise` (a host) with the
/// bound port, or the bound address itself (loopback if it is
/// unspecified).
fn advertised(bound: SocketAddr, advertise: Option<&str>) -> String {
    match advertise {
        Some(host) => format!("{host}:{}", bound.port()),
        None if bound.ip().is_unspecified() => format!("127.0.0.1:{}", bound.port()),
        None => bound.to_string(),
    }
}

/// Runs a replica until `shutdown` resolves (then it resigns the
/// leadership if it held it; actors stay on their workers). Once started,
/// it outlives etcd outages and lost leaderships (see the module doc).
///
/// # Errors
/// If `--workers` is not 0, etcd cannot be reached at start, this
/// replica's flags conflict with the cluster's settings (the message names
/// the flag), or a listener cannot be bound.
pub async fn serve_replica(
    options: ServeOptions,
    cluster: ClusterConfig,
    shutdown: impl Future<Output = ()> + Send,
    ready: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    anyhow::ensure!(
        options.config.workers == 0,
        "--workers must be 0 with --directory etcd://: workers join the cluster as `stasis worker run --directory ...`"
    );
    // The data dir holds this replica's caches only, but two processes
    // must not share it.
    std::fs::create_dir_all(&options.config.data_dir)
        .with_context(|| format!("creating data dir {}", options.config.data_dir.display()))?;
    let _lock = stasis_core::durable::lock_data_dir(&options.config.data_dir)?;
    let etcd = Etcd::connect(&cluster.etcd).await?;
    let mine = options.config.cluster_settings(true);
    let stored = etcd
        .settle_settings(&mine)
        .await
        .context("reading the cluster's settings")?;
    if let Some(conflict) = mine.conflict(&stored) {
        anyhow::bail!(
            "refusing to start: {conflict}; start with the cluster's value (or use another --directory prefix for another cluster)"
        );
    }
    let (ingress, admin, bound) = crate::listen::bind(&options).await?;
    let advertise = cluster.advertise.as_deref();
    let admin_address = advertised(bound.admin, advertise);
    let me = LeaderRecord {
        name: format!("replica-{}", admin_address.replace([':', '.'], "-")),
        ingress: advertised(bound.ingress, advertise),
        admin: admin_address,
    };
    let limits = options.config.limits;
    let replica = Arc::new(Replica {
        // Only the admin API is forwarded: its largest body is a module.
        forwarder: Forwarder::new(
            &me.name,
            stasis_control::MAX_TEMPLATE_BYTES,
            limits.request_timeout + Duration::from_secs(5),
        ),
        me,
        serving: RwLock::new(None),
        leader: etcd.watch_leader(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let listen = |listener: TcpListener, which: Listener, rx| {
        let replica = replica.clone();
        // TLS (`--tls-cert`) is the ingress's.
        let tls = match which {
            Listener::Ingress => options.tls.clone(),
            Listener::Admin => None,
        };
        tokio::spawn(stasis_http::serve::serve_tls(
            listener,
            tls,
            move |req, peer| {
                let replica = replica.clone();
                async move { replica.handle(which, req, peer).await }
            },
            stopped(rx),
            DRAIN,
        ))
    };
    replica.serve_with(open(&etcd, &options, None).await?);
    let ingress_task = listen(ingress, Listener::Ingress, stop_rx.clone());
    let admin_task = listen(admin, Listener::Admin, stop_rx);
    ready(bound);
    tracing::info!(replica = %replica.me.name, "replica ready as a follower; campaigning for the leadership");
    let (quit_tx, quit_rx) = watch::channel(false);
    let mut leading = tokio::spawn(lead(
        etcd.clone(),
        replica.clone(),
        options.clone(),
        cluster.clone(),
        quit_rx,
    ));
    let result = tokio::select! {
        led = &mut leading => Err(match led {
            Ok(()) => anyhow::anyhow!("the leadership task ended"),
            Err(e) => anyhow::anyhow!("the leadership task failed: {e}"),
        }),
        () = shutdown => {
            // Resign, so that another replica leads at once rather than
            // after the lease TTL.
            let _ = quit_tx.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(3), leading).await;
            Ok(())
        }
    };
    let _ = stop_tx.send(true);
    let _ = ingress_task.await;
    let _ = admin_task.await;
    result
}

/// Opens a control plane in `role` from etcd and the shared store, with
/// the tasks that keep it in step: the workers' registrations, and a
/// leader's housekeeping or a follower's placements. A leader's directory
/// writes are fenced by `leadership`'s lease.
async fn open(
    etcd: &Etcd,
    options: &ServeOptions,
    leadership: Option<&Leadership>,
) -> anyhow::Result<Serving> {
    let metrics = Arc::new(Metrics::new(options.metrics_per_actor));
    let workers = etcd.watch_workers_listed().await?;
    let registered = workers.borrow().clone();
    let (role, directory): (Role, Arc<dyn Directory>) = match leadership {
        Some(leadership) => (Role::Leader, etcd.leader_directory(leadership)),
        None => (Role::Follower, etcd.directory()),
    };
    let control = crate::assemble::open_replica(
        options.config.clone(),
        metrics,
        directory,
        &registered,
        role,
        options.internal_tls.clone(),
    )
    .await?;
    let mut tasks = vec![tokio::spawn(control.clone().follow_registrations(workers))];
    let mut applied_revision = None;
    if control.decides() {
        tasks.push(tokio::spawn(control.clone().run_housekeeping()));
    } else {
        let actors = etcd.watch_actor_changes().await?;
        let (applied_tx, applied_rx) = watch::channel(0);
        tasks.push(tokio::spawn(
            control.clone().follow_placements(actors, applied_tx),
        ));
        applied_revision = Some(applied_rx);
    }
    let api = Arc::new(AdminApi::new(
        control.clone(),
        options.admin_token.clone(),
        options.config.internal_token.clone(),
    ));
    let mut router = Router::new(control.clone(), &options.domain, api.access());
    if !control.decides() {
        // A follower has the leader create actors on first use, and place
        // those whose requests it holds.
        router = router.with_leader(Arc::new(crate::on_leader::ToLeader {
            leader: etcd.watch_leader(),
            token: options
                .config
                .internal_token
                .clone()
                .or_else(|| options.admin_token.clone()),
        }));
    }
    Ok(Serving {
        router: Arc::new(router),
        api,
        control,
        applied_revision,
        tasks,
    })
}

/// First pause before campaigning or opening again after a failure (it
/// doubles up to [`MAX_RETRY_PAUSE`]).
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Longest pause between two attempts to campaign or open.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// Campaigns; once elected, opens the leader's control plane and serves
/// with it until the leadership is lost (then it steps down: serves as a
/// follower again and campaigns again) or `quit` turns true (then it
/// resigns). Failures to campaign or to open (etcd unreachable) are
/// retried until `quit`.
async fn lead(
    etcd: Etcd,
    replica: Arc<Replica>,
    options: ServeOptions,
    cluster: ClusterConfig,
    mut quit: watch::Receiver<bool>,
) {
    let mut pause = FIRST_RETRY_PAUSE;
    loop {
        let leadership = tokio::select! {
            won = etcd.campaign(&replica.me, cluster.lease_ttl) => match won {
                Ok(leadership) => leadership,
                Err(e) => {
                    tracing::warn!("campaigning failed: {e:#}; campaigning again in {pause:?}");
                    if !pause_unless_quitting(&mut pause, &mut quit).await {
                        return;
                    }
                    continue;
                }
            },
            () = quitting(&mut quit) => return,
        };
        tracing::info!(replica = %replica.me.name, "elected leader; opening the control plane");
        let opened = tokio::select! {
            opened = open(&etcd, &options, Some(&leadership)) => opened,
            () = leadership.lost() => Err(anyhow::anyhow!("the leadership was lost while opening")),
            () = quitting(&mut quit) => {
                resign(leadership).await;
                return;
            }
        };
        match opened {
            Ok(serving) => {
                replica.serve_with(serving);
                pause = FIRST_RETRY_PAUSE;
                tracing::info!(replica = %replica.me.name, "serving as the leader");
            }
            Err(e) => {
                tracing::error!("opening the leader's control plane failed: {e:#}; resigning");
                resign(leadership).await;
                if !pause_unless_quitting(&mut pause, &mut quit).await {
                    return;
                }
                continue;
            }
        }
        tokio::select! {
            () = leadership.lost() => {}
            () = quitting(&mut quit) => {
                tracing::info!("resigning the leadership");
                resign(leadership).await;
                return;
            }
        }
        tracing::error!(
            "lost the leadership: its lease could not be renewed within --lease-ttl {:?}; stepping down to a follower",
            cluster.lease_ttl
        );
        // Dropping the leader's control plane ends its tasks; what it still
        // had in flight can no longer write (the directory is fenced).
        replica.step_down();
        drop(leadership);
        loop {
            let opened = tokio::select! {
                opened = open(&etcd, &options, None) => opened,
                () = quitting(&mut quit) => return,
            };
            match opened {
                Ok(serving) => {
                    replica.serve_with(serving);
                    tracing::info!(replica = %replica.me.name, "serving as a follower; campaigning again");
                    break;
                }
                Err(e) => {
                    tracing::warn!("opening as a follower failed: {e:#}; retrying in {pause:?}");
                    if !pause_unless_quitting(&mut pause, &mut quit).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Revokes `leadership`'s lease so another replica can lead at once.
async fn resign(leadership: Leadership) {
    if let Err(e) = leadership.resign().await {
        tracing::warn!("resigning: {e:#}; another replica leads after the lease TTL");
    }
}

/// Sleeps `pause` (then doubles it, up to [`MAX_RETRY_PAUSE`]); false if
/// `quit` turned true meanwhile.
async fn pause_unless_quitting(pause: &mut Duration, quit: &mut watch::Receiver<bool>) -> bool {
    let slept = tokio::select! {
        () = tokio::time::sleep(*pause) => true,
        () = quitting(quit) => false,
    };
    *pause = (*pause * 2).min(MAX_RETRY_PAUSE);
    slept
}

/// Resolves once `quit` turns true (or its sender is gone).
async fn quitting(quit: &mut watch::Receiver<bool>) {
    let _ = quit.wait_for(|q| *q).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_forwarded_write_waits_for_its_revision_and_no_longer_than_the_timeout() {
        let timeout = Duration::from_millis(500);
        let (tx, rx) = watch::channel(5);
        // Already applied: at once.
        let started = Instant::now();
        assert!(reaches(rx.clone(), 5, timeout).await);
        assert!(started.elapsed() < Duration::from_millis(100));
        // Applied 150 ms later (a lagging watch): waits for it, not longer.
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            tx.send_replace(6);
            let _ = done_rx.await;
            drop(tx);
        });
        let started = Instant::now();
        assert!(reaches(rx.clone(), 6, timeout).await);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(140) && waited < timeout,
            "{waited:?}"
        );
        // Never applied: gives up after the timeout.
        let started = Instant::now();
        assert!(!reaches(rx.clone(), 7, timeout).await);
        assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
        // The watch ended: gives up at once.
        let _ = done_tx.send(());
        later.await.expect("publisher");
        let started = Instant::now();
        assert!(!reaches(rx, 7, timeout).await);
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}
