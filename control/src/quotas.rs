//! Quotas per namespace on the control plane's side: setting one, showing
//! a namespace, the actor count a create or fork must stay within, and the
//! request rate the ingress admits ([`ControlPlane::admit_request`]). A
//! namespace's quota is read from the directory and kept
//! ([`crate::kept`]), read again every [`QUOTA_BOUND`], so a change
//! applies on every replica within it (plus one read). The request rate is
//! a token bucket per namespace and replica, holding one second's worth.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::names::{DEFAULT_NAMESPACE, check_namespace, namespace_of};
use stasis_contract::namespace_settings::Settings as _;
use stasis_contract::quota::{NamespaceInfo, NamespaceSummary, NamespaceUsage, Quota};
use stasis_contract::status::ActorState;

use crate::kept::Kept;
use crate::{ControlPlane, blocking};

/// How long a replica keeps a namespace's quota before reading it again.
pub const QUOTA_BOUND: Duration = Duration::from_secs(1);

/// Most namespaces whose bucket is kept; past it the buckets start over.
const MAX_KEPT: usize = 10_000;

/// Largest `max_actors` or `max_requests_per_second` a quota may set.
const MAX_LIMIT: u64 = 1_000_000_000;

/// One namespace's request budget.
struct Bucket {
    /// Requests it may still take now.
    tokens: f64,
    /// When `tokens` was last refilled.
    at: Instant,
}

/// What the control plane keeps of the quotas (module docs).
pub struct QuotaState {
    read: Kept<Quota>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Default for QuotaState {
    fn default() -> Self {
        Self {
            read: Kept::new(QUOTA_BOUND, "quota"),
            buckets: Mutex::default(),
        }
    }
}

/// A namespace's quota as the directory holds it (none: no limit).
fn read_quota(
    directory: &dyn stasis_contract::directory::Directory,
    namespace: &str,
) -> Result<Quota, ApiError> {
    Ok(directory.setting::<Quota>(namespace)?.unwrap_or_default())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The 403 of a create or fork in namespace `namespace`, which holds
/// `held` actors, at or past its `max`.
pub(crate) fn over_actors(namespace: &str, held: u64, max: u64) -> ApiError {
    let message = if held == max {
        format!("namespace {namespace} holds its quota of {max} actors (max_actors)")
    } else {
        // The quota was lowered below what the namespace holds.
        format!(
            "namespace {namespace} holds {held} actors, over its quota of {max} (max_actors); \
             delete {} before creating one",
            held - max + 1
        )
    };
    ApiError::new(ErrorKind::Forbidden, message)
}

impl ControlPlane {
    /// Namespace `namespace`'s quota, as kept ([`crate::kept`]: read again
    /// every [`QUOTA_BOUND`]).
    ///
    /// # Errors
    /// 500 from the directory.
    pub async fn quota(&self, namespace: &str) -> Result<Quota, ApiError> {
        self.quotas
            .read
            .get(&self.directory, namespace, read_quota)
            .await
    }

    /// Sets namespace `namespace`'s quota (replacing it); its view.
    ///
    /// # Errors
    /// 400 for a bad namespace name or a limit over a billion; 500 or 503
    /// from the directory.
    pub async fn set_quota(
        &self,
        namespace: &str,
        quota: Quota,
    ) -> Result<NamespaceInfo, ApiError> {
        check_namespace(namespace)?;
        let limits = [
            ("max_actors", quota.max_actors),
            (
                "max_requests_per_second",
                quota.max_requests_per_second.map(u64::from),
            ),
        ];
        for (name, limit) in limits {
            if limit.is_some_and(|l| l > MAX_LIMIT) {
                return Err(ApiError::bad_request(format!(
                    "{name} is over the limit of {MAX_LIMIT}"
                )));
            }
        }
        let (owned, stored) = (namespace.to_owned(), quota.clone());
        blocking(&self.directory, move |d| d.put_setting(&owned, &stored)).await?;
        self.quotas.read.put(namespace, quota);
        lock(&self.quotas.buckets).remove(namespace);
        tracing::info!(namespace, "quota set");
        self.namespace_info(namespace).await
    }

    /// Namespace `namespace` as the API shows it: its actor count, quota,
    /// policy and usage (which asks every worker for its actors' status).
    ///
    /// # Errors
    /// 400 for a bad namespace name; 500 from the directory.
    pub async fn namespace_info(&self, namespace: &str) -> Result<NamespaceInfo, ApiError> {
        check_namespace(namespace)?;
        let policy = self.policy(namespace).await?;
        let mut usage = NamespaceUsage::default();
        for actor in self.actors().await {
            if namespace_of(&actor.name) != namespace {
                continue;
            }
            if actor.state == ActorState::Running {
                usage.live_actors += 1;
            }
            usage.memory_bytes += actor.memory_bytes;
            usage.snapshot_bytes += actor.snapshots.iter().map(|s| s.bytes).sum::<u64>();
        }
        Ok(NamespaceInfo {
            name: namespace.to_owned(),
            actors: self.actors_in(namespace, &std::collections::HashSet::new()),
            quota: self.quota(namespace).await?,
            ingress_auth: policy.ingress_auth,
            calls_from: policy.calls_from,
            on_demand: policy.on_demand,
            usage,
        })
    }

    /// Every namespace that holds actors or templates, and `default`,
    /// by name; with `only`, that namespace alone (listed even when it
    /// holds nothing).
    ///
    /// # Errors
    /// 500 from the directory.
    pub fn namespaces(&self, only: Option<&str>) -> Result<Vec<NamespaceSummary>, ApiError> {
        fn summary<'a>(
            by_name: &'a mut std::collections::BTreeMap<String, NamespaceSummary>,
            namespace: &str,
        ) -> &'a mut NamespaceSummary {
            by_name
                .entry(namespace.to_owned())
                .or_insert_with(|| NamespaceSummary {
                    name: namespace.to_owned(),
                    actors: 0,
                    templates: 0,
                })
        }
        let mut by_name = std::collections::BTreeMap::new();
        summary(&mut by_name, only.unwrap_or(DEFAULT_NAMESPACE));
        for name in self.placements().keys() {
            summary(&mut by_name, namespace_of(name)).actors += 1;
        }
        for template in self.templates()? {
            summary(&mut by_name, namespace_of(&template.name)).templates += 1;
        }
        if let Some(only) = only {
            by_name.retain(|name, _| name == only);
        }
        Ok(by_name.into_values().collect())
    }

    /// How many actors namespace `namespace` holds, counting the names in
    /// `pending` (creates in flight) not placed yet.
    pub(crate) fn actors_in(
        &self,
        namespace: &str,
        pending: &std::collections::HashSet<String>,
    ) -> u64 {
        let placements = self.placements();
        let placed = placements
            .keys()
            .filter(|name| namespace_of(name) == namespace)
            .count();
        let in_flight = pending
            .iter()
            .filter(|name| namespace_of(name) == namespace && !placements.contains_key(*name))
            .count();
        u64::try_from(placed + in_flight).unwrap_or(u64::MAX)
    }

    /// Admits one request through the ingress for actor `actor` (a full
    /// name) under its namespace's request rate.
    ///
    /// # Errors
    /// 429 with `Retry-After: 1` past the rate; 500 from the directory.
    pub async fn admit_request(&self, actor: &str) -> Result<(), ApiError> {
        let namespace = namespace_of(actor);
        // The default namespace has a quota only if one was set; a read
        // a second per replica finds out.
        let Some(rate) = self.quota(namespace).await?.max_requests_per_second else {
            return Ok(());
        };
        let rate = f64::from(rate);
        let now = Instant::now();
        let mut buckets = lock(&self.quotas.buckets);
        if buckets.len() >= MAX_KEPT && !buckets.contains_key(namespace) {
            buckets.clear();
        }
        let bucket = buckets.entry(namespace.to_owned()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let shown = if namespace == DEFAULT_NAMESPACE {
            "the default namespace".to_owned()
        } else {
            format!("namespace {namespace}")
        };
        Err(ApiError::new(
            ErrorKind::TooManyRequests,
            format!(
                "{shown} is over its quota of {rate} requests per second (max_requests_per_second)"
            ),
        )
        .with_retry_after(Some(1)))
    }
}
