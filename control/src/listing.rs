//! Listing actors and labelling them: every actor at once
//! ([`ControlPlane::actors`]), or a page of those an [`ActorQuery`]
//! selects ([`ControlPlane::list_actors`]), read from the placements in
//! name order (and a label's names from the label index), never from a
//! scan of the directory. Each page asks each worker for the statuses of
//! the page's actors only.

use std::collections::HashMap;
use std::sync::Arc;

use super::ControlPlane;
use super::membership::Member;
use super::placement::Placement;
use super::views::ActorInfo;
use stasis_contract::directory::row_version;
use stasis_contract::error::ApiError;
use stasis_contract::labels::{LabelPatch, Labels};
use stasis_contract::listing::{ActorQuery, continue_token};
use stasis_contract::names::namespace_of;
use stasis_contract::status::ActorStatus;
use stasis_core::snapshot_store::SnapshotEntry;

/// A page of actors, and the token of the next one if more match.
#[derive(Debug)]
pub struct ActorPage {
    /// The actors, by name.
    pub actors: Vec<ActorInfo>,
    /// The token that asks for the actors after these (`None`: no more).
    pub next: Option<String>,
}

/// What a listing selects of the placements (its state filter aside):
/// the namespace, the labels and the template; `template` as a full name.
struct Selection<'a> {
    namespace: Option<&'a str>,
    labels: &'a [(String, String)],
    template: Option<&'a str>,
}

impl Selection<'_> {
    fn selects(&self, name: &str, placement: &Placement) -> bool {
        self.namespace.is_none_or(|ns| namespace_of(name) == ns)
            && self
                .labels
                .iter()
                .all(|(k, v)| placement.labels.get(k).is_some_and(|held| held == v))
            && self
                .template
                .is_none_or(|t| row_version(&placement.template).0 == t)
    }
}

/// How many candidates one round of a filtered listing takes at least.
const ROUND: usize = 256;

/// How many snapshot listings a page runs at once.
const LISTINGS_AT_ONCE: usize = 16;

impl ControlPlane {
    /// Every actor, by name, whatever the health of its worker: each
    /// worker is asked once for all its actors' statuses (a remote worker
    /// for at most its status timeout), and an actor whose worker did not
    /// answer is listed in state `unknown`.
    pub async fn actors(&self) -> Vec<ActorInfo> {
        let placements: Vec<(String, Placement)> = self
            .placements()
            .iter()
            .map(|(name, p)| (name.clone(), p.clone()))
            .collect();
        let members = self.members();
        let reports = futures_util::future::join_all(members.iter().map(|m| m.statuses())).await;
        let by_worker: WorkerReports = members
            .iter()
            .zip(reports)
            .map(|(m, r)| (m.name.clone(), r.map(|list| list.into_iter().collect())))
            .collect();
        placements
            .into_iter()
            .map(|(name, placement)| {
                let status = self.status_in(&name, &placement, &by_worker);
                self.actor_info(&name, placement, status)
            })
            .collect()
    }

    /// The actors of namespace `namespace` that `query` selects, by name:
    /// all of them, or the page it asks for (`template`: the query's
    /// template as a full name). An actor whose worker did not answer is
    /// in state `unknown` (and selected by `state=unknown` only).
    ///
    /// # Errors
    /// None today; a `Result` for the directory reads a listing may need.
    pub async fn list_actors(
        &self,
        namespace: &str,
        query: &ActorQuery,
        template: Option<&str>,
    ) -> Result<ActorPage, ApiError> {
        let selection = Selection {
            namespace: Some(namespace),
            labels: &query.labels,
            template,
        };
        let want = query.limit.map_or(usize::MAX, |limit| limit + 1);
        let mut cursor = query.after.clone();
        let mut found: Vec<ActorInfo> = Vec::new();
        while found.len() < want {
            let left = want - found.len();
            let round = if query.state.is_some() {
                left.max(ROUND)
            } else {
                left
            };
            let chunk = self.candidates(&selection, cursor.as_deref(), round);
            let Some((last, _)) = chunk.last() else {
                break;
            };
            cursor = Some(last.clone());
            let exhausted = chunk.len() < round;
            let statuses = self.statuses_of(&chunk).await;
            let mut kept: Vec<(String, Placement, ActorStatus)> = Vec::new();
            for (name, placement) in chunk {
                let status = self.status_in(&name, &placement, &statuses);
                if query.state.is_none_or(|s| s == status.state) && found.len() + kept.len() < want
                {
                    kept.push((name, placement, status));
                }
            }
            // A shared store's listing is a round trip per actor: taken
            // for the kept ones only, several at once.
            let mut stored = if self.is_clustered() {
                Some(self.listings(&kept).await)
            } else {
                None
            };
            for (name, placement, status) in kept {
                found.push(match stored.as_mut().map(|s| s.remove(&name)) {
                    Some(listed) => {
                        self.actor_info_listed(&name, placement, status, listed.unwrap_or_default())
                    }
                    None => self.actor_info(&name, placement, status),
                });
            }
            if exhausted {
                break;
            }
        }
        let mut next = None;
        if let Some(limit) = query.limit
            && found.len() > limit
        {
            found.truncate(limit);
            next = found.last().map(|a| continue_token(&a.name));
        }
        Ok(ActorPage {
            actors: found,
            next,
        })
    }

    /// Up to `count` placements after `after` that `selection` selects, by
    /// name: from the label index when the selection names a label, else
    /// from the placements in order.
    fn candidates(
        &self,
        selection: &Selection<'_>,
        after: Option<&str>,
        count: usize,
    ) -> Vec<(String, Placement)> {
        let mut out = Vec::new();
        if let Some((key, value)) = selection.labels.first() {
            let mut cursor = after.map(str::to_owned);
            while out.len() < count {
                let round = (count - out.len()).clamp(ROUND, 1 << 16);
                let names = self
                    .placements
                    .labelled(key, value, cursor.as_deref(), round);
                let placements = self.placements();
                for name in &names {
                    if let Some(p) = placements.get(name)
                        && selection.selects(name, p)
                        && out.len() < count
                    {
                        out.push((name.clone(), p.clone()));
                    }
                }
                if names.len() < round {
                    break;
                }
                cursor = names.last().cloned();
            }
            return out;
        }
        let placements = self.placements();
        let range = match after {
            Some(after) => placements
                .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => placements.range::<str, _>(..),
        };
        out.extend(
            range
                .filter(|(name, p)| selection.selects(name, p))
                .take(count)
                .map(|(name, p)| (name.clone(), p.clone())),
        );
        out
    }

    /// What each worker hosting some of `chunk` says of them, asked at
    /// once.
    async fn statuses_of(&self, chunk: &[(String, Placement)]) -> WorkerReports {
        let mut asked: HashMap<Arc<str>, (Arc<Member>, Vec<String>)> = HashMap::new();
        for (name, placement) in chunk {
            if let Ok(member) = self.host_of(placement, name) {
                asked
                    .entry(member.name.clone())
                    .or_insert_with(|| (member, Vec::new()))
                    .1
                    .push(name.clone());
            }
        }
        let asked: Vec<_> = asked.into_values().collect();
        let reports = futures_util::future::join_all(
            asked
                .iter()
                .map(|(member, names)| member.statuses_of(names)),
        )
        .await;
        asked
            .into_iter()
            .zip(reports)
            .map(|((member, _), report)| {
                (
                    member.name.clone(),
                    report.map(|list| list.into_iter().collect()),
                )
            })
            .collect()
    }

    /// The snapshots the store lists for each actor of `kept`, listed
    /// [`LISTINGS_AT_ONCE`] at a time off the async threads (each is a
    /// round trip to a shared store); an actor whose listing failed shows
    /// none.
    async fn listings(
        &self,
        kept: &[(String, Placement, ActorStatus)],
    ) -> HashMap<String, Vec<SnapshotEntry>> {
        let mut out = HashMap::new();
        for group in kept.chunks(LISTINGS_AT_ONCE) {
            let listing: Vec<_> = group
                .iter()
                .map(|(name, _, _)| {
                    let (store, name) = (self.store.clone(), name.clone());
                    tokio::task::spawn_blocking(move || {
                        let listed = store.list(&name);
                        (name, listed)
                    })
                })
                .collect();
            for listed in listing {
                if let Ok((name, listed)) = listed.await {
                    out.insert(name, listed.unwrap_or_default());
                }
            }
        }
        out
    }

    /// The status of actor `name` placed as `placement` that its worker
    /// reported in `reports` (`unknown`, with why, when it did not).
    fn status_in(&self, name: &str, placement: &Placement, reports: &WorkerReports) -> ActorStatus {
        let Ok(member) = self.host_of(placement, name) else {
            return self.status_without_host(placement);
        };
        match reports.get(&member.name) {
            Some(Ok(statuses)) => statuses.get(name).cloned().unwrap_or_else(|| {
                ActorStatus::unknown(&format!("worker {} does not report it", member.name))
            }),
            Some(Err(e)) => {
                ActorStatus::unknown(&format!("worker {} did not answer: {e}", member.name))
            }
            None => ActorStatus::unknown(&format!("worker {} left", member.name)),
        }
    }

    /// Changes actor `name`'s labels by `patch` (a JSON merge patch of
    /// them): the directory first, then the placement listings read.
    ///
    /// # Errors
    /// 400 for a bad label or past the bound; 404 unknown actor; 503 on a
    /// follower replica; 500 from the directory.
    pub async fn label_actor(&self, name: &str, patch: LabelPatch) -> Result<Labels, ApiError> {
        patch.check()?;
        let decider = self.decider()?;
        let _guard = decider.ops.read().await;
        // Under `ops`: no delete (and so no create again) of the name runs.
        self.placement_of(name)?;
        // One change at a time: the placements take them in the directory's
        // order.
        let _one = decider.labels.lock().await;
        let (directory, actor) = (self.directory.clone(), name.to_owned());
        // Blocking: a directory write.
        let patched = tokio::task::spawn_blocking(move || directory.patch_labels(&actor, &patch))
            .await
            .map_err(ApiError::internal)
            .and_then(|r| r);
        let labels = match patched {
            Ok(labels) => labels,
            Err(e) => {
                // A write whose answer was lost may have been applied: the
                // placement takes what the directory holds.
                let (directory, actor) = (self.directory.clone(), name.to_owned());
                let read = tokio::task::spawn_blocking(move || directory.actor(&actor, 0)).await;
                if let Ok(Ok(read)) = read
                    && let Some(row) = read.row
                {
                    self.placements.set_labels(name, row.labels);
                }
                return Err(e);
            }
        };
        self.placements.set_labels(name, labels.clone());
        tracing::info!(actor = name, ?labels, "actor labelled");
        Ok(labels)
    }
}

/// Each worker's answer to a listing's status question, by worker name.
type WorkerReports = HashMap<Arc<str>, Result<HashMap<String, ActorStatus>, ApiError>>;
