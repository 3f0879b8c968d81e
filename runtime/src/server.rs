//! `stasis serve`: binds the ingress and admin listeners, opens the control
//! plane, announces readiness, and shuts down gracefully (stop accepting,
//! finish open requests, pause every running actor). In cluster mode it
//! hands over to [`crate::replica`].

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use stasis_contract::metrics::Metrics;
use stasis_ingress::api::AdminApi;
use stasis_ingress::router::Router;

pub use crate::listen::{Bound, ClusterConfig, ServeOptions};
use crate::listen::{DRAIN, bind};

/// Runs `stasis serve` until `shutdown` resolves. `ready` is called once
/// both listeners are bound and every actor is recovered. In cluster mode
/// (`options.cluster`) this is one replica (see [`crate::replica`]).
///
/// # Errors
/// If the admin API would be exposed beyond loopback without a token, a
/// listener cannot be bound, or the data dir cannot be opened (e.g. another
/// process holds its `LOCK`).
pub async fn serve(
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
    ready: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    if !options.admin_listen.ip().is_loopback() && options.admin_token.is_none() {
        anyhow::bail!(
            "refusing to expose the admin API on {} without a token: set --admin-token or STASIS_ADMIN_TOKEN, or listen on loopback",
            options.admin_listen
        );
    }
    if let Some(cluster) = options.cluster.clone() {
        return crate::replica::serve_replica(options, cluster, shutdown, ready).await;
    }
    let metrics = Arc::new(Metrics::new(options.metrics_per_actor));
    let config = options.config.clone();
    let internal_tls = options.internal_tls.clone();
    let control = tokio::task::spawn_blocking(move || {
        crate::assemble::open_embedded(config, metrics, internal_tls)
    })
    .await
    .context("opening the control plane")??;
    let (ingress, admin, bound) = bind(&options).await?;
    let housekeeping = tokio::spawn(control.clone().run_housekeeping());
    let detector = tokio::spawn(control.clone().run_failure_detector());
    // The ingress stops first; the admin API (with the worker API: drain
    // requests, snapshots streamed by remote workers) keeps serving until
    // every actor is paused.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (admin_stop_tx, admin_stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let api = AdminApi::new(
        control.clone(),
        options.admin_token.clone(),
        options.config.internal_token.clone(),
    );
    // An admin listener that asks for client certificates (mutual TLS
    // with --internal-ca) serves the internal routes only to those.
    let api = Arc::new(
        if options
            .admin_tls
            .as_ref()
            .is_some_and(|t| t.verifies_clients())
        {
            api.with_certified_internal_routes()
        } else {
            api
        },
    );
    let router = Arc::new(Router::new(control.clone(), &options.domain, api.access()));
    let ingress_task = tokio::spawn(stasis_http::serve::serve_tls(
        ingress,
        options.tls.clone(),
        move |req, peer| {
            let router = router.clone();
            async move { router.handle(req, peer).await }
        },
        stopped(stop_rx.clone()),
        DRAIN,
    ));
    let admin_task = tokio::spawn(stasis_http::serve::serve_tls(
        admin,
        options.admin_tls.clone(),
        move |req, _| {
            let api = api.clone();
            async move { api.handle(req).await }
        },
        stopped(admin_stop_rx),
        DRAIN,
    ));
    ready(bound);
    shutdown.await;
    tracing::info!("shutting down: finishing open requests, then pausing every running actor");
    control.begin_shutdown();
    control
        .sockets()
        .close_every(1001, "the server is shutting down");
    let _ = stop_tx.send(true);
    let _ = ingress_task.await;
    housekeeping.abort();
    detector.abort();
    control.pause_all().await;
    let _ = admin_stop_tx.send(true);
    let _ = admin_task.await;
    tracing::info!("stopped; every actor is paused");
    Ok(())
}
