//! The rollout planner: pure functions over plain data (the template's
//! actors now, the rollout's record and its actors' outcomes) that say
//! which actors move next, when the rollout is finished or must stop, and
//! what its status counts are. Running the planned upgrades is
//! [`super`]'s job.

use std::collections::{BTreeMap, HashSet};

use stasis_contract::rollout::{
    ActorOutcome, RolloutFailure, RolloutRecord, RolloutState, RolloutStatus,
};

/// An actor of the template as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorNow {
    /// The actor.
    pub name: String,
    /// The version of the template it runs.
    pub version: u64,
    /// Whether it is paused (not loaded on its worker).
    pub paused: bool,
}

/// One planned upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The actor.
    pub actor: String,
    /// The version it runs now.
    pub from: u64,
    /// The version it moves to.
    pub to: u64,
}

/// What the rollout does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Upgrade these actors now (a canary alone, else up to a wave).
    Upgrade(Vec<Step>),
    /// Only paused actors are left: each is upgraded when next resumed.
    Wait(Vec<Step>),
    /// Nothing is left to do.
    Finish,
    /// Stop, for this reason.
    Stop(String),
}

/// What the planner reads.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The rollout.
    pub record: &'a RolloutRecord,
    /// The template's actors now (any version), by name.
    pub actors: &'a [ActorNow],
    /// Each actor's outcome so far, by actor.
    pub outcomes: &'a BTreeMap<String, ActorOutcome>,
    /// Actors being upgraded right now elsewhere (at their resume): not
    /// planned again.
    pub busy: &'a HashSet<String>,
}

/// The actors a rollout still has to move: `(now, deferred)`, each by
/// name. Forward: every actor not on the target version whose upgrade has
/// not failed (paused ones deferred unless `eager`). Rollback: every actor
/// the rollout upgraded that still runs the target version, back to its
/// previous one (paused ones too: a rollback is always eager).
fn pending(input: &Input<'_>) -> (Vec<Step>, Vec<Step>) {
    let Input {
        record,
        actors,
        outcomes,
        busy,
    } = *input;
    let (mut now, mut deferred) = (Vec::new(), Vec::new());
    for actor in actors.iter().filter(|a| !busy.contains(&a.name)) {
        let outcome = outcomes.get(&actor.name);
        let step = if record.rollback {
            match outcome {
                Some(o)
                    if o.error.is_none()
                        && !o.gone
                        && !o.rolled_back
                        && o.rollback_error.is_none()
                        && actor.version == record.to_version =>
                {
                    Step {
                        actor: actor.name.clone(),
                        from: actor.version,
                        to: o.from_version,
                    }
                }
                _ => continue,
            }
        } else {
            if actor.version == record.to_version || outcome.is_some_and(|o| o.error.is_some()) {
                continue;
            }
            Step {
                actor: actor.name.clone(),
                from: actor.version,
                to: record.to_version,
            }
        };
        if actor.paused && !record.eager && !record.rollback {
            deferred.push(step);
        } else {
            now.push(step);
        }
    }
    (now, deferred)
}

/// The actors the rollout skipped because they were deleted before it
/// moved them (and not created again since), by actor.
fn skips(input: &Input<'_>) -> Vec<RolloutFailure> {
    input
        .outcomes
        .values()
        .filter(|o| o.gone && !input.actors.iter().any(|a| a.name == o.actor))
        .map(|o| RolloutFailure {
            actor: o.actor.clone(),
            reason: "gone".to_owned(),
        })
        .collect()
}

/// The failures that count: forward, the upgrades that failed; for a
/// rollback, the moves back that failed. By actor.
fn failures(input: &Input<'_>) -> Vec<RolloutFailure> {
    input
        .outcomes
        .values()
        .filter_map(|o| {
            let reason = if input.record.rollback {
                o.rollback_error.as_ref()
            } else {
                o.error.as_ref()
            };
            reason.map(|r| RolloutFailure {
                actor: o.actor.clone(),
                reason: r.clone(),
            })
        })
        .collect()
}

/// What the rollout does next; `wave`: most upgrades planned at once.
#[must_use]
pub fn next(input: &Input<'_>, wave: usize) -> Next {
    let record = input.record;
    let failed = failures(input);
    if !record.rollback {
        if let Some(canary) = failed.iter().find(|f| record.canaries.contains(&f.actor)) {
            return Next::Stop(format!("canary {} failed: {}", canary.actor, canary.reason));
        }
        if failed.len() >= record.max_failures.max(1) {
            let names: Vec<&str> = failed.iter().map(|f| f.actor.as_str()).collect();
            return Next::Stop(format!(
                "{} actors failed (--max-failures {}): {}",
                failed.len(),
                record.max_failures,
                names.join(", ")
            ));
        }
    }
    let (now, deferred) = pending(input);
    if !record.rollback {
        // Canaries first, one at a time, paused or not.
        let canary = record
            .canaries
            .iter()
            .find_map(|c| now.iter().chain(&deferred).find(|s| &s.actor == c).cloned());
        if let Some(canary) = canary {
            return Next::Upgrade(vec![canary]);
        }
    }
    if !now.is_empty() {
        return Next::Upgrade(now.into_iter().take(wave.max(1)).collect());
    }
    if !deferred.is_empty() {
        return Next::Wait(deferred);
    }
    Next::Finish
}

/// The canaries of a new rollout: the first `n` actors (by name) it will
/// upgrade.
#[must_use]
pub fn canaries(input: &Input<'_>, n: usize) -> Vec<String> {
    let (now, deferred) = pending(input);
    let mut names: Vec<String> = now.into_iter().chain(deferred).map(|s| s.actor).collect();
    names.sort();
    names.truncate(n);
    names
}

/// The rollout's status counts: `total = upgraded + failed + pending`.
#[must_use]
pub fn status(input: &Input<'_>) -> RolloutStatus {
    let record = input.record;
    let failures = failures(input);
    let skips = skips(input);
    let (now, deferred) = pending(input);
    let busy = input
        .actors
        .iter()
        .filter(|a| input.busy.contains(&a.name))
        .count();
    let pending = now.len() + deferred.len() + busy;
    let upgraded = input
        .outcomes
        .values()
        .filter(|o| {
            if o.gone {
                false
            } else if record.rollback {
                o.rolled_back
            } else {
                o.error.is_none()
                    && !now.iter().chain(&deferred).any(|s| s.actor == o.actor)
                    && !input.busy.contains(&o.actor)
            }
        })
        .count();
    RolloutStatus {
        template: record.template.clone(),
        kind: if record.rollback {
            "rollback"
        } else {
            "rollout"
        }
        .to_owned(),
        to_version: record.to_version,
        state: record.state,
        total: upgraded + failures.len() + pending + skips.len(),
        upgraded,
        failed: failures.len(),
        pending,
        deferred: deferred.len(),
        canary: record.canaries.len(),
        max_failures: record.max_failures,
        eager: record.eager,
        failures,
        skipped: skips.len(),
        skips,
        stop_reason: record.stop_reason.clone(),
    }
}

/// The state the planner's [`Next`] leads to, if it ends the rollout
/// (whether a status is final for a waiting client is
/// [`RolloutStatus::settled`]).
#[must_use]
pub fn state_after(next: &Next) -> Option<RolloutState> {
    match next {
        Next::Finish => Some(RolloutState::Finished),
        Next::Stop(_) => Some(RolloutState::Stopped),
        Next::Upgrade(_) | Next::Wait(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(canaries: &[&str], max_failures: usize, eager: bool) -> RolloutRecord {
        RolloutRecord {
            template: "t".into(),
            to_version: 2,
            canaries: canaries.iter().map(|c| (*c).to_owned()).collect(),
            max_failures,
            eager,
            state: RolloutState::Running,
            rollback: false,
            started_unix_ms: 0,
            stop_reason: None,
        }
    }

    fn actors(list: &[(&str, u64, bool)]) -> Vec<ActorNow> {
        list.iter()
            .map(|(n, v, p)| ActorNow {
                name: (*n).to_owned(),
                version: *v,
                paused: *p,
            })
            .collect()
    }

    fn ok(actor: &str) -> ActorOutcome {
        ActorOutcome {
            actor: actor.into(),
            from_version: 1,
            error: None,
            rolled_back: false,
            rollback_error: None,
            gone: false,
        }
    }

    fn failed(actor: &str) -> ActorOutcome {
        ActorOutcome {
            error: Some("layouts differ".into()),
            ..ok(actor)
        }
    }

    fn outcomes(list: Vec<ActorOutcome>) -> BTreeMap<String, ActorOutcome> {
        list.into_iter().map(|o| (o.actor.clone(), o)).collect()
    }

    fn names(steps: &[Step]) -> Vec<&str> {
        steps.iter().map(|s| s.actor.as_str()).collect()
    }

    #[test]
    fn canaries_go_first_one_at_a_time_then_waves_of_the_rest() {
        let r = record(&["c"], 3, false);
        let a = actors(&[
            ("a", 1, false),
            ("b", 1, false),
            ("c", 1, true),
            ("d", 1, false),
        ]);
        let busy = HashSet::new();
        let mut o = BTreeMap::new();
        let input = |o| Input {
            record: &r,
            actors: &a,
            outcomes: o,
            busy: &busy,
        };
        assert_eq!(canaries(&input(&o), 2), ["a", "b"]);
        // The canary goes first although it is paused.
        let Next::Upgrade(steps) = next(&input(&o), 8) else {
            panic!("canary first")
        };
        assert_eq!(names(&steps), ["c"]);
        assert_eq!((steps[0].from, steps[0].to), (1, 2));
        // Once it is on version 2, the running rest, in waves.
        let a2 = actors(&[
            ("a", 1, false),
            ("b", 1, false),
            ("c", 2, true),
            ("d", 1, false),
        ]);
        o = outcomes(vec![ok("c")]);
        let input2 = Input {
            record: &r,
            actors: &a2,
            outcomes: &o,
            busy: &busy,
        };
        let Next::Upgrade(wave) = next(&input2, 2) else {
            panic!("the rest")
        };
        assert_eq!(names(&wave), ["a", "b"]);
        let s = status(&input2);
        assert_eq!((s.total, s.upgraded, s.failed, s.pending), (4, 1, 0, 3));
    }

    #[test]
    fn paused_actors_wait_for_their_resume_unless_eager() {
        let a = actors(&[("a", 2, false), ("p", 1, true), ("q", 1, true)]);
        let busy = HashSet::new();
        let o = outcomes(vec![ok("a")]);
        let lazy = record(&[], 1, false);
        let input = Input {
            record: &lazy,
            actors: &a,
            outcomes: &o,
            busy: &busy,
        };
        let Next::Wait(deferred) = next(&input, 8) else {
            panic!("paused actors wait")
        };
        assert_eq!(names(&deferred), ["p", "q"]);
        let s = status(&input);
        assert_eq!((s.total, s.upgraded, s.pending, s.deferred), (3, 1, 2, 2));
        assert!(s.settled());
        let eager = record(&[], 1, true);
        let input = Input {
            record: &eager,
            ..input
        };
        assert!(matches!(next(&input, 8), Next::Upgrade(s) if s.len() == 2));
        // An actor being upgraded at its resume is not planned again but
        // still pending.
        let busy: HashSet<String> = ["p".to_owned()].into();
        let input = Input {
            busy: &busy,
            ..input
        };
        assert!(matches!(next(&input, 8), Next::Upgrade(s) if names(&s) == ["q"]));
        assert_eq!(status(&input).pending, 2);
    }

    #[test]
    fn the_rollout_stops_after_max_failures_or_a_failed_canary() {
        let a = actors(&[
            ("a", 1, false),
            ("b", 1, false),
            ("c", 1, false),
            ("d", 1, false),
        ]);
        let busy = HashSet::new();
        let r = record(&[], 2, false);
        let o = outcomes(vec![failed("a")]);
        let input = Input {
            record: &r,
            actors: &a,
            outcomes: &o,
            busy: &busy,
        };
        // One failure of two allowed: the others go on, the failed one is
        // not tried again.
        assert!(matches!(next(&input, 8), Next::Upgrade(s) if names(&s) == ["b", "c", "d"]));
        let o = outcomes(vec![failed("a"), failed("c")]);
        let input = Input {
            outcomes: &o,
            ..input
        };
        let Next::Stop(why) = next(&input, 8) else {
            panic!("stops")
        };
        assert!(
            why.contains("2 actors failed") && why.contains("a, c"),
            "{why}"
        );
        let s = status(&input);
        assert_eq!((s.total, s.failed, s.pending), (4, 2, 2));
        assert_eq!(s.failures[1].actor, "c");
        assert_eq!(s.failures[1].reason, "layouts differ");
        // A failed canary stops it whatever the limit.
        let r = record(&["b"], 10, false);
        let o = outcomes(vec![failed("b")]);
        let input = Input {
            record: &r,
            outcomes: &o,
            ..input
        };
        assert!(matches!(next(&input, 8), Next::Stop(why) if why.starts_with("canary b failed")));
    }

    #[test]
    fn everything_on_the_target_version_finishes() {
        let a = actors(&[("a", 2, false), ("b", 2, true)]);
        let busy = HashSet::new();
        let r = record(&[], 1, false);
        let o = outcomes(vec![ok("a"), ok("b")]);
        let input = Input {
            record: &r,
            actors: &a,
            outcomes: &o,
            busy: &busy,
        };
        assert_eq!(next(&input, 8), Next::Finish);
        assert_eq!(state_after(&Next::Finish), Some(RolloutState::Finished));
        let s = status(&input);
        assert_eq!((s.total, s.upgraded, s.pending), (2, 2, 0));
        // Until its task records `finished`, a waiting client waits on.
        assert!(!s.settled());
    }

    #[test]
    fn a_rollback_moves_back_only_what_the_rollout_upgraded() {
        // a, b upgraded from 1; c failed; d was on 2 already; e upgraded
        // from 1 but moved elsewhere since.
        let a = actors(&[
            ("a", 2, false),
            ("b", 2, true),
            ("c", 1, false),
            ("d", 2, false),
            ("e", 3, false),
        ]);
        let busy = HashSet::new();
        let mut r = record(&[], 1, false);
        r.rollback = true;
        let mut o = outcomes(vec![ok("a"), ok("b"), failed("c"), ok("e")]);
        o.get_mut("b").expect("b").from_version = 3;
        let input = Input {
            record: &r,
            actors: &a,
            outcomes: &o,
            busy: &busy,
        };
        let Next::Upgrade(steps) = next(&input, 8) else {
            panic!("rollback")
        };
        assert_eq!(
            steps,
            [
                Step {
                    actor: "a".into(),
                    from: 2,
                    to: 1
                },
                Step {
                    actor: "b".into(),
                    from: 2,
                    to: 3
                }
            ]
        );
        let mut done = o.clone();
        done.get_mut("a").expect("a").rolled_back = true;
        done.get_mut("b").expect("b").rollback_error = Some("no".into());
        let input = Input {
            outcomes: &done,
            ..input
        };
        assert_eq!(next(&input, 8), Next::Finish);
        let s = status(&input);
        assert_eq!(s.kind, "rollback");
        assert_eq!((s.upgraded, s.failed, s.pending), (1, 1, 0));
    }
}
