//! The planners behind rebalance and drain: pure functions over plain data
//! (which actors weigh how much on which worker), so they are tested
//! without a control plane. Running the planned moves is
//! [`super::migrate`]'s job.

use std::collections::{BTreeMap, HashMap};

/// One planned move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMove {
    /// The actor.
    pub actor: String,
    /// Source worker.
    pub from: String,
    /// Target worker.
    pub to: String,
}

/// The moves that even out the load of `load` (worker → its actors with
/// their weights: 1 each to balance counts, bytes to balance memory).
/// Round after round, the largest actor of the heaviest worker that
/// narrows the gap to the lightest moves there; planning stops when no
/// actor narrows it.
#[must_use]
pub fn plan_rebalance(load: &BTreeMap<String, Vec<(String, u64)>>) -> Vec<PlannedMove> {
    let mut load = load.clone();
    let total = |l: &Vec<(String, u64)>| l.iter().map(|(_, w)| *w).sum::<u64>();
    let mut plan = Vec::new();
    while let Some((heavy, heavy_load)) = load
        .iter()
        .max_by_key(|(_, l)| total(l))
        .map(|(k, l)| (k.clone(), total(l)))
    {
        let Some((light, light_load)) = load
            .iter()
            .min_by_key(|(_, l)| total(l))
            .map(|(k, l)| (k.clone(), total(l)))
        else {
            break;
        };
        let gap = heavy_load.saturating_sub(light_load);
        let Some(actors) = load.get_mut(&heavy) else {
            break;
        };
        // Move the largest actor that narrows the gap.
        let Some(pos) = actors
            .iter()
            .enumerate()
            .filter(|(_, (_, w))| *w < gap)
            .max_by_key(|(_, (_, w))| *w)
            .map(|(i, _)| i)
        else {
            break;
        };
        let item = actors.remove(pos);
        plan.push(PlannedMove {
            actor: item.0.clone(),
            from: heavy.clone(),
            to: light.clone(),
        });
        if let Some(l) = load.get_mut(&light) {
            l.push(item);
        }
    }
    plan
}

/// The moves that empty worker `from` of `actors`: each goes to the
/// target with the fewest actors (`counts`, counting the moves planned so
/// far; ties go to the earlier of `targets`).
///
/// # Errors
/// [`NoTarget`] if `targets` is empty while there are actors to move.
pub fn plan_drain(
    from: &str,
    actors: &[String],
    targets: &[String],
    counts: &HashMap<String, usize>,
) -> Result<Vec<PlannedMove>, NoTarget> {
    let mut counts = counts.clone();
    let mut plan = Vec::with_capacity(actors.len());
    for actor in actors {
        let target = targets
            .iter()
            .filter(|t| t.as_str() != from)
            .min_by_key(|t| counts.get(*t).copied().unwrap_or(0))
            .ok_or(NoTarget)?;
        *counts.entry(target.clone()).or_default() += 1;
        plan.push(PlannedMove {
            actor: actor.clone(),
            from: from.to_owned(),
            to: target.clone(),
        });
    }
    Ok(plan)
}

/// No worker can take the actors of a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no other ready worker")]
pub struct NoTarget;

#[cfg(test)]
mod tests {
    use super::*;

    fn load(workers: &[(&str, &[(&str, u64)])]) -> BTreeMap<String, Vec<(String, u64)>> {
        workers
            .iter()
            .map(|(w, actors)| {
                let actors = actors.iter().map(|(a, n)| ((*a).to_owned(), *n)).collect();
                ((*w).to_owned(), actors)
            })
            .collect()
    }

    fn per_worker(
        load: &BTreeMap<String, Vec<(String, u64)>>,
        plan: &[PlannedMove],
    ) -> BTreeMap<String, u64> {
        let mut totals: BTreeMap<String, u64> = load
            .iter()
            .map(|(w, l)| (w.clone(), l.iter().map(|(_, n)| n).sum()))
            .collect();
        for m in plan {
            let weight = load[&m.from]
                .iter()
                .find(|(a, _)| *a == m.actor)
                .map_or(0, |(_, n)| *n);
            *totals.get_mut(&m.from).expect("source") -= weight;
            *totals.get_mut(&m.to).expect("target") += weight;
        }
        totals
    }

    #[test]
    fn counts_even_out() {
        let l = load(&[
            ("w1", &[("a", 1), ("b", 1), ("c", 1), ("d", 1)]),
            ("w2", &[]),
        ]);
        let plan = plan_rebalance(&l);
        assert_eq!(plan.len(), 2, "{plan:?}");
        assert!(plan.iter().all(|m| m.from == "w1" && m.to == "w2"));
        assert_eq!(
            per_worker(&l, &plan).values().copied().collect::<Vec<_>>(),
            [2, 2]
        );
    }

    #[test]
    fn balanced_or_unimprovable_loads_stay() {
        assert!(plan_rebalance(&load(&[("w1", &[("a", 1)]), ("w2", &[("b", 1)])])).is_empty());
        assert!(plan_rebalance(&load(&[("w1", &[("a", 1)]), ("w2", &[])])).is_empty());
        // One big actor: moving it would only swap the imbalance.
        assert!(plan_rebalance(&load(&[("w1", &[("big", 100)]), ("w2", &[("s", 1)])])).is_empty());
        assert!(plan_rebalance(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn memory_moves_the_largest_actor_that_narrows_the_gap() {
        let l = load(&[
            ("w1", &[("big", 60), ("mid", 30), ("small", 10)]),
            ("w2", &[("x", 20)]),
        ]);
        let plan = plan_rebalance(&l);
        assert_eq!(plan[0].actor, "big", "{plan:?}");
        let totals = per_worker(&l, &plan);
        assert_eq!(
            totals.values().copied().collect::<Vec<_>>(),
            [60, 60],
            "{plan:?}"
        );
    }

    #[test]
    fn three_workers_share_the_load() {
        let actors: Vec<(String, u64)> = (0..9).map(|i| (format!("a{i}"), 1)).collect();
        let mut l = BTreeMap::new();
        l.insert("w1".to_owned(), actors);
        l.insert("w2".to_owned(), Vec::new());
        l.insert("w3".to_owned(), Vec::new());
        let plan = plan_rebalance(&l);
        assert_eq!(
            per_worker(&l, &plan).values().copied().collect::<Vec<_>>(),
            [3, 3, 3]
        );
    }

    #[test]
    fn drains_spread_over_the_other_workers() {
        let actors: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let targets: Vec<String> = ["w1", "w2", "w3"].iter().map(|s| (*s).to_owned()).collect();
        let mut counts = HashMap::new();
        counts.insert("w1".to_owned(), 4);
        counts.insert("w3".to_owned(), 1);
        let plan = plan_drain("w1", &actors, &targets, &counts).expect("targets");
        let to: Vec<&str> = plan.iter().map(|m| m.to.as_str()).collect();
        assert_eq!(to, ["w2", "w2", "w3", "w2"]);
        assert!(plan.iter().all(|m| m.from == "w1"));
    }

    #[test]
    fn a_drain_without_targets_fails_only_with_actors() {
        let only = vec!["w1".to_owned()];
        assert_eq!(
            plan_drain("w1", &["a".into()], &only, &HashMap::new()),
            Err(NoTarget)
        );
        assert_eq!(
            plan_drain("w1", &[], &only, &HashMap::new()),
            Ok(Vec::new())
        );
    }
}
