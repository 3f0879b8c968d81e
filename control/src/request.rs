//! The request path: [`ControlPlane::route`] looks an actor up once, then
//! [`ControlPlane::call`] (an HTTP request), [`ControlPlane::alarm`] (a
//! due alarm) or [`ControlPlane::socket_event`] (an event on a socket)
//! passes the actor's gate and reaches its current owner through
//! the [`stasis_contract::worker_api::WorkerApi`], again by the refreshed
//! placement after a stale epoch.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stasis_contract::alarm::AlarmOutcome;
use stasis_contract::client_gone::{self, ClientGone};
use stasis_contract::delivery::{Delivery, DueAlarm};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_host_api::sockets::SocketEvent;
use stasis_host_api::{Request, Response};

use crate::ControlPlane;
use crate::ask_leader::AskLeader;
use crate::membership::Member;
use crate::placement::{Gate, HeldAtGate};

impl ControlPlane {
    /// Looks actor `name` up for a request: the one placement lookup
    /// before the request body is read (a follower's that finds nothing
    /// cached reads the directory, see [`crate::follow`]).
    ///
    /// # Errors
    /// 404 unknown actor; 500 if a follower cannot read the directory.
    pub async fn route(&self, name: &str) -> Result<Route, ApiError> {
        let cached = self.placements().get(name).map(|p| {
            p.gate.touched.store(true, Ordering::Relaxed);
            p.gate.clone()
        });
        let gate = match cached {
            Some(gate) => gate,
            None => self
                .load_placement(name)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no actor named {name:?}")))?,
        };
        Ok(Route {
            actor: name.to_owned(),
            gate,
            leader: None,
        })
    }

    /// The worker and epoch actor `name` is placed on now (a follower's
    /// placement read again if it was dropped since the lookup).
    ///
    /// # Errors
    /// 404 unknown actor; 503 as [`ControlPlane::host_of`].
    async fn current_host(&self, name: &str) -> Result<(Arc<Member>, u64), ApiError> {
        for _ in 0..2 {
            if let Some(placement) = self.placements().get(name) {
                return Ok((self.host_of(placement, name)?, placement.epoch));
            }
            if self.load_placement(name).await?.is_none() {
                break;
            }
        }
        Err(ApiError::not_found(format!("no actor named {name:?}")))
    }

    /// Hands an HTTP request to the actor of `route`, through its gate:
    /// while the actor moves, the request waits; a call refused for a stale
    /// epoch is sent again to the current owner with the same request.
    /// When `gone` is cancelled first, the request is given up unless the
    /// guest runs it (see [`stasis_contract::client_gone`]).
    ///
    /// # Errors
    /// 404 actor deleted meanwhile; the worker's or guest's failure;
    /// [`stasis_contract::error::ErrorKind::Abandoned`] when the client left first.
    pub async fn call(
        &self,
        route: Route,
        request: Request,
        gone: &ClientGone,
    ) -> Result<Response, ApiError> {
        self.through_gate(route, gone, &Arc::new(request)).await
    }

    /// Delivers `event` on one of the actor's sockets the way a request
    /// goes (through its gate, resuming a paused actor, held while it
    /// moves), as a delivery of its own on the worker.
    ///
    /// # Errors
    /// As [`ControlPlane::call`].
    pub async fn socket_event(&self, route: Route, event: SocketEvent) -> Result<(), ApiError> {
        self.through_gate(route, &ClientGone::new(), &event).await
    }

    /// Delivers a due alarm to the actor of `route` the way a request
    /// goes (through its gate, to its current owner, again to the new one
    /// after a stale epoch), as a delivery of its own on the worker (see
    /// [`stasis_contract::alarm`]); `setter`: the `traceparent` of the span
    /// that set it.
    ///
    /// # Errors
    /// As [`ControlPlane::call`].
    pub async fn alarm(
        &self,
        route: Route,
        setter: Option<String>,
    ) -> Result<AlarmOutcome, ApiError> {
        self.through_gate(route, &ClientGone::new(), &DueAlarm { setter })
            .await
    }

    /// Hands `delivery` to the current owner of the actor of `route`,
    /// through its gate: while the actor moves, it waits (up to
    /// `--hold-timeout`, at most `--max-held` at once); one refused for a
    /// stale epoch is sent again to the current owner.
    async fn through_gate<D: Delivery>(
        &self,
        route: Route,
        gone: &ClientGone,
        delivery: &D,
    ) -> Result<D::Answer, ApiError> {
        let Route {
            actor,
            mut gate,
            leader,
        } = route;
        let name = actor.as_str();
        let leader = leader.as_deref();
        // A paused actor a rollout upgrades at its resume: first.
        self.upgrade_if_deferred(name).await;
        let mut attempts = 0;
        // Since when the actor has had no reachable host, if it has not.
        let mut hostless = HostWait::default();
        // The last call refused as misdirected: by which worker, at which
        // epoch.
        let mut refused: Option<(Arc<str>, u64)> = None;
        loop {
            let open = self.pass_gate(&gate, name, gone).await?;
            // Read under the gate: a move switches the placement only
            // while it holds the gate closed.
            let (member, epoch) = match self.current_host(name).await {
                Ok(host) => host,
                Err(e) if e.is(ErrorKind::Unreachable) => {
                    // Open the gate for the re-placement while held.
                    drop(open);
                    self.hold_for_a_host(name, &gate, gone, &mut hostless, leader, e)
                        .await?;
                    gate = self.route(name).await?.gate;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let forward = delivery.send(member.api.as_ref(), name, epoch, gone);
            let answer = watching_loss(&member, name, forward).await;
            match answer {
                // Refused again by the worker the placement names, at the
                // epoch it names, after the placement was read again: that
                // worker has not adopted the actor yet (placed lazily, see
                // `crate::adopt`). Held like a request for an actor with no
                // host, the leader asked to place it (a leader asks itself:
                // see `ControlPlane::place_now`).
                Err(e)
                    if e.is(ErrorKind::StaleEpoch)
                        && refused
                            .as_ref()
                            .is_some_and(|(w, at)| **w == *member.name && *at == epoch) =>
                {
                    drop(open);
                    let waits = ApiError::new(
                        ErrorKind::Unreachable,
                        format!("actor {name} waits for worker {} to adopt it", member.name),
                    );
                    self.hold_for_a_host(name, &gate, gone, &mut hostless, leader, waits)
                        .await?;
                    gate = self.route(name).await?.gate;
                }
                Err(e) if e.is(ErrorKind::StaleEpoch) && attempts < self.misdirected_retries() => {
                    attempts += 1;
                    refused = Some((member.name.clone(), epoch));
                    tracing::debug!(actor = name, "retrying on the current owner: {e}");
                    drop(open);
                    if self.placements.follows() {
                        // A follower reads the placement again, a moment
                        // after the move (its watch may be behind).
                        self.placements.forget(name, epoch);
                        let pause_ms = 25 * u64::from(attempts);
                        tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
                    }
                    gate = self.route(name).await?.gate;
                }
                // Refused by worker after worker as stale (its placement
                // kept changing, or cannot be read again now, e.g. etcd
                // frozen): never applied, and the client's to try again,
                // not a 421 meant for Stasis's own hops.
                Err(e) if e.is(ErrorKind::StaleEpoch) => {
                    return Err(ApiError::unavailable(format!(
                        "actor {name} changed workers while this request was sent ({}); it was \
                         not applied: try again",
                        e.message()
                    )));
                }
                // Never delivered (the worker refused the connection): held
                // until the worker is back or the actor is re-placed.
                Err(e) if e.is(ErrorKind::Unreachable) => {
                    drop(open);
                    self.hold_for_a_host(name, &gate, gone, &mut hostless, leader, e)
                        .await?;
                    gate = self.route(name).await?.gate;
                }
                other => return other,
            }
        }
    }
}

/// `forward`'s answer from `member`. A worker declared lost (frozen, cut
/// off) is not waited for: its actor is re-placed under the gate. Whether
/// it ran the delivery is unknown here (a woken worker is fenced off: see
/// `stasis_worker::fence`), and the answer says so — unless the forward is
/// refusing its connection as the loss is declared (a dead worker): never
/// delivered, so held like any other.
async fn watching_loss<T>(
    member: &Member,
    name: &str,
    forward: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::pin!(forward);
    tokio::select! {
        biased;
        answer = &mut forward => answer,
        () = member.lost() => match tokio::time::timeout(LOST_GRACE, &mut forward).await {
            Ok(Err(e)) if e.is(ErrorKind::Unreachable) => Err(e),
            _ => Err(ApiError::internal(format!(
                "worker {} was lost while it held the request for actor {name}: it may \
                 or may not have been applied",
                member.name
            ))),
        },
    }
}

impl ControlPlane {
    /// Passes actor `name`'s gate: at once when it is open; while a move
    /// holds it closed, waiting (counted in `--max-held`, up to
    /// `--hold-timeout`, given up when the client leaves).
    ///
    /// # Errors
    /// 503 over `--max-held` or past the hold timeout;
    /// [`ErrorKind::Abandoned`] when the client left.
    async fn pass_gate<'g>(
        &self,
        gate: &'g Gate,
        name: &str,
        gone: &ClientGone,
    ) -> Result<tokio::sync::RwLockReadGuard<'g, ()>, ApiError> {
        if let Ok(open) = gate.barrier.try_read() {
            return Ok(open);
        }
        let hold = self.config.worker.hold_timeout;
        let _held = HeldAtGate::enter(&gate.held, self.config.worker.max_held, name)?;
        let open = async {
            tokio::time::timeout(hold, gate.barrier.read()).await.map_err(|_| {
                ApiError::unavailable(format!(
                    "actor {name} is moving and did not take the request within the hold timeout of {hold:?}"
                ))
            })
        };
        client_gone::unless_gone(gone, name, open).await
    }

    /// Holds a delivery to `name` that found no reachable host (`error`:
    /// its worker refused the connection, or is lost and the actor not yet
    /// placed again) for one more look at the placement: the request waits
    /// like one at a closed gate (counted in `--max-held`, given up when
    /// its client leaves) instead of failing while a re-placement is
    /// pending. Past `--hold-timeout` since `since` (set at the first
    /// hold), the answer is `error`'s 503 naming the timeout. On a deciding
    /// control plane, an actor that waits for a host (its worker lost, or
    /// placed lazily and not adopted yet) is placed now (see
    /// [`ControlPlane::place_if_waiting`]); a follower asks `leader` to.
    ///
    /// # Errors
    /// 503 past the hold timeout or over `--max-held`;
    /// [`ErrorKind::Abandoned`] when the client left.
    async fn hold_for_a_host(
        &self,
        name: &str,
        gate: &Gate,
        gone: &ClientGone,
        since: &mut HostWait,
        leader: Option<&dyn AskLeader>,
        error: ApiError,
    ) -> Result<(), ApiError> {
        let hold = self.config.worker.hold_timeout;
        let held_for = since.since.get_or_insert_with(Instant::now).elapsed();
        let Some(left) = hold.checked_sub(held_for).filter(|left| !left.is_zero()) else {
            return Err(ApiError::unavailable(format!(
                "{}; not served within the hold timeout of {hold:?}",
                error.message()
            )));
        };
        if since.placed.is_none_or(|at| at.elapsed() >= PLACE_AGAIN) {
            // A deciding control plane places a lost worker's actor for its
            // first waiting request now, not in its turn in the wave (and
            // again each `PLACE_AGAIN` it still waits).
            since.placed = Some(Instant::now());
            // Waited for no longer than the hold has left, and not once the
            // client left: the re-placement goes on in its own task.
            let placing = async {
                match leader {
                    Some(leader) if !self.decides() => {
                        if let Err(e) = leader.place(name).await {
                            tracing::debug!(actor = name, "the leader did not place it: {e}");
                        }
                    }
                    _ => {
                        if let Err(e) = self.place_now(name).await {
                            tracing::debug!(actor = name, "not placed: {e}");
                        }
                    }
                }
                Ok(())
            };
            let placed =
                tokio::time::timeout(left, client_gone::unless_gone(gone, name, placing)).await;
            // Placed (or tried) just now: looked at again at once.
            if let Ok(placed) = placed {
                return placed;
            }
        }
        let _held = HeldAtGate::enter(&gate.held, self.config.worker.max_held, name)?;
        tracing::debug!(actor = name, "held for a host: {}", error.message());
        let pause = HOST_POLL.min(left);
        client_gone::unless_gone(gone, name, async {
            tokio::time::sleep(pause).await;
            Ok(())
        })
        .await
    }

    /// How often a call refused as misdirected (421) is sent again by the
    /// refreshed placement: a leader's placement is current after one
    /// retry; a follower's follows the watch, so it tries for about 2 s
    /// (25 ms, 50 ms, ... between attempts).
    fn misdirected_retries(&self) -> u32 {
        if self.placements.follows() { 12 } else { 3 }
    }
}

/// How often a held delivery looks again for its actor's host (the
/// placement, and the worker's connection).
const HOST_POLL: Duration = Duration::from_millis(50);

/// How often a delivery held for a host asks a deciding control plane to
/// place its actor (the first time at once).
const PLACE_AGAIN: Duration = Duration::from_secs(1);

/// How long a forward to a worker just declared lost may still say that
/// its connection was refused (never delivered) before the answer is that
/// the delivery's outcome is unknown.
const LOST_GRACE: Duration = Duration::from_millis(200);

/// A delivery's wait for a reachable host of its actor.
#[derive(Debug, Default)]
struct HostWait {
    /// Since when the actor has had no reachable host.
    since: Option<Instant>,
    /// When this delivery last asked for the actor to be placed.
    placed: Option<Instant>,
}

/// An actor found for a request ([`ControlPlane::route`]): the gate its
/// request passes.
pub struct Route {
    actor: String,
    gate: Arc<Gate>,
    /// On a follower replica: how it asks the leader to place the actor
    /// while it holds a delivery for it (see [`Route::with_leader`]).
    leader: Option<Arc<dyn AskLeader>>,
}

impl Route {
    /// This route, asking `leader` to place its actor while a delivery
    /// waits for a host (a follower replica's requests; without it, a
    /// follower waits for the leader's own re-placement wave).
    #[must_use]
    pub fn with_leader(mut self, leader: Option<Arc<dyn AskLeader>>) -> Self {
        self.leader = leader;
        self
    }
}
