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
//! A leader that cannot renew its lease in time steps down at once: its
//! control plane (and every task it runs) is dropped, it serves as a
//! follower, and campaigns again. Whatever it still had under way can no
//! longer change a placement another leader made: each placement change is
//! a compare-and-set on the actor's key in etcd.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::AdminApi;
use crate::cluster::etcd::{Etcd, LeaderRecord};
use crate::control::{ClusterConfig, ControlPlane, Role};
use crate::error::ApiError;
use crate::forward::Forwarder;
use crate::http::{Body, json_error, text_error};
use crate::metrics::Metrics;
use crate::router::Router;
use crate::server::{Bound, DRAIN, ServeOptions};

/// A control plane this replica serves with, and its background tasks
/// (aborted when it is dropped).
struct Serving {
    control: Arc<ControlPlane>,
    router: Arc<Router>,
    api: Arc<AdminApi>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
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

    /// Ingress: routed here, by the placements (a follower's are watched).
    /// Admin API: answered here by the leader; a follower answers
    /// `/healthz` and `/metrics` (its own) and forwards the rest.
    /// `/healthz` says `ok (leader NAME)` or `ok (follower NAME)`.
    async fn handle(&self, listener: Listener, request: Request<Incoming>) -> Response<Body> {
        let Some(serving) = self.serving() else {
            let e = ApiError::unavailable("the replica is starting; retry");
            return match listener {
                Listener::Ingress => text_error(&e),
                Listener::Admin => json_error(&e),
            };
        };
        let follower = serving.control.role() == Role::Follower;
        match listener {
            Listener::Ingress => serving.router.handle(request).await,
            Listener::Admin if request.uri().path() == "/healthz" => {
                let role = if follower { "follower" } else { "leader" };
                let mut answer = Response::new(http_body_util::Full::new(bytes::Bytes::from(
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
            Listener::Admin => {
                let leader = self.leader.borrow().clone();
                let answer = match leader {
                    Some(leader) if leader.name != self.me.name => {
                        self.forwarder.forward(&leader.admin, request).await
                    }
                    // No leader, or this replica was elected and is still
                    // opening the control plane.
                    _ => Err(ApiError::unavailable(
                        "no leader replica yet (an election is under way); retry",
                    )),
                };
                answer.unwrap_or_else(|e| json_error(&e))
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
/// leadership if it held it; actors stay on their workers).
///
/// # Errors
/// If `--workers` is not 0, etcd cannot be reached, this replica's flags
/// conflict with the cluster's settings (the message names the flag), a
/// listener cannot be bound, or the leadership was lost.
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
    let mine = options.config.cluster_settings();
    let stored = etcd
        .settle_settings(&mine)
        .await
        .context("reading the cluster's settings")?;
    if let Some(conflict) = mine.conflict(&stored) {
        anyhow::bail!(
            "refusing to start: {conflict}; start with the cluster's value (or use another --directory prefix for another cluster)"
        );
    }
    let ingress = TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding --listen {}", options.listen))?;
    let admin = TcpListener::bind(options.admin_listen)
        .await
        .with_context(|| format!("binding --admin-listen {}", options.admin_listen))?;
    let bound = Bound {
        ingress: ingress.local_addr()?,
        admin: admin.local_addr()?,
    };
    let advertise = cluster.advertise.as_deref();
    let admin_address = advertised(bound.admin, advertise);
    let me = LeaderRecord {
        name: format!("replica-{}", admin_address.replace([':', '.'], "-")),
        ingress: advertised(bound.ingress, advertise),
        admin: admin_address,
    };
    let limits = options.config.limits;
    let replica = Arc::new(Replica {
        forwarder: Forwarder::new(
            &me.name,
            limits.max_body,
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
        tokio::spawn(crate::http::serve(
            listener,
            move |req, _| {
                let replica = replica.clone();
                async move { replica.handle(which, req).await }
            },
            stopped(rx),
            DRAIN,
        ))
    };
    replica.serve_with(open(&etcd, &options, Role::Follower).await?);
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
        led = &mut leading => led.unwrap_or_else(|e| Err(anyhow::anyhow!("the leadership task failed: {e}"))),
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
/// leader's housekeeping or a follower's placements.
async fn open(etcd: &Etcd, options: &ServeOptions, role: Role) -> anyhow::Result<Serving> {
    let metrics = Arc::new(Metrics::new(options.metrics_per_actor));
    let workers = etcd.watch_workers_listed().await?;
    let registered = workers.borrow().clone();
    let control = ControlPlane::open_replica(
        options.config.clone(),
        metrics,
        etcd.directory(),
        registered,
        role,
    )
    .await?;
    let mut tasks = vec![tokio::spawn(control.clone().follow_registrations(workers))];
    match role {
        Role::Leader => tasks.push(tokio::spawn(control.clone().run_housekeeping())),
        Role::Follower | Role::Embedded => {
            let actors = etcd.watch_actors().await?;
            tasks.push(tokio::spawn(control.clone().follow_placements(actors)));
        }
    }
    Ok(Serving {
        router: Arc::new(Router::new(control.clone(), &options.domain)),
        api: Arc::new(AdminApi::new(control.clone(), options.admin_token.clone())),
        control,
        tasks,
    })
}

/// Campaigns; once elected, opens the leader's control plane and serves
/// with it until the leadership is lost, then steps down to a follower and
/// campaigns again; until `quit` turns true (then it resigns, if it leads).
///
/// # Errors
/// Only if this replica cannot serve even as a follower (its control plane
/// cannot be opened).
async fn lead(
    etcd: Etcd,
    replica: Arc<Replica>,
    options: ServeOptions,
    cluster: ClusterConfig,
    mut quit: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut backoff = Duration::from_millis(200);
    loop {
        let leadership = tokio::select! {
            won = etcd.campaign(&replica.me, cluster.lease_ttl) => match won {
                Ok(won) => won,
                Err(e) => {
                    tracing::warn!("campaigning for the leadership: {e:#}; again in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
            () = quitting(&mut quit) => return Ok(()),
        };
        tracing::info!(replica = %replica.me.name, "elected leader; opening the control plane");
        match open(&etcd, &options, Role::Leader).await {
            Ok(serving) => replica.serve_with(serving),
            Err(e) => {
                tracing::error!("opening the leader's control plane: {e:#}; resigning");
                if let Err(e) = leadership.resign().await {
                    tracing::warn!("resigning: {e:#}");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        }
        backoff = Duration::from_millis(200);
        tracing::info!(replica = %replica.me.name, "serving as the leader");
        tokio::select! {
            () = leadership.lost() => {
                // Another replica may lead by now: stop deciding at once
                // (the leader's tasks end with its control plane), serve
                // as a follower, and campaign again.
                tracing::error!(
                    "lost the leadership: its lease could not be renewed within --lease-ttl {:?}; stepping down to a follower",
                    cluster.lease_ttl
                );
                replica.serve_with(open(&etcd, &options, Role::Follower).await?);
            }
            () = quitting(&mut quit) => {
                tracing::info!("resigning the leadership");
                if let Err(e) = leadership.resign().await {
                    tracing::warn!("resigning: {e:#}; another replica leads after the lease TTL");
                }
                return Ok(());
            }
        }
    }
}

/// Resolves once `quit` turns true (or its sender is gone).
async fn quitting(quit: &mut watch::Receiver<bool>) {
    let _ = quit.wait_for(|q| *q).await;
}
