//! The requests of the `actor` verbs.

use anyhow::bail;
use hyper::Method;

use super::{Body, Call, View, actor_path};
use crate::verbs::{ActorCommand, ClientArgs};
use stasis_runtime::contract::listing::{ActorQuery, decode_token};
use stasis_runtime::contract::status::ActorState;

/// `actor fork SRC NEW [--from-snapshot SEQ] [--label K=V|K-]...`:
/// `POST /v1/actors/SRC/fork`.
fn fork_call(
    client: ClientArgs,
    src: &str,
    new: &str,
    from_snapshot: Option<u64>,
    labels: Vec<(String, Option<String>)>,
) -> Call {
    let mut body = serde_json::json!({ "name": new });
    if let Some(seq) = from_snapshot {
        body["from_snapshot"] = seq.into();
    }
    if !labels.is_empty() {
        body["labels"] = label_patch(labels);
    }
    Call::new(
        client,
        format!("actor fork {src} {new}"),
        Method::POST,
        actor_path(src, "fork"),
        View::Details,
    )
    .with_body(Body::Json(body))
}

/// The request of an `actor` verb.
///
/// # Errors
/// As [`plan`].
pub(super) fn actor_call(command: ActorCommand) -> anyhow::Result<Call> {
    Ok(match command {
        ActorCommand::Create {
            name,
            template,
            labels,
            client,
        } => {
            let mut body = serde_json::json!({ "name": name, "template": template });
            if !labels.is_empty() {
                body["labels"] = labels
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::Value::String(v)))
                    .collect::<serde_json::Map<_, _>>()
                    .into();
            }
            Call::new(
                client,
                format!("actor create {name}"),
                Method::POST,
                "/v1/actors".into(),
                View::Details,
            )
            .with_body(Body::Json(body))
        }
        ActorCommand::Fork {
            src,
            new,
            from_snapshot,
            labels,
            client,
        } => fork_call(client, &src, &new, from_snapshot, labels),
        ActorCommand::List {
            labels,
            template,
            state,
            limit,
            continue_token,
            client,
        } => {
            let query = list_query(labels, template, state.as_deref(), limit, continue_token)?;
            Call::new(
                client,
                "actor list".into(),
                Method::GET,
                list_path(&query),
                View::Actors,
            )
        }
        ActorCommand::Label {
            name,
            changes,
            client,
        } => Call::new(
            client,
            format!("actor label {name}"),
            Method::PATCH,
            actor_path(&name, "labels"),
            View::Details,
        )
        .with_body(Body::Json(label_patch(changes))),
        ActorCommand::Get { name, client } => Call::new(
            client,
            format!("actor get {name}"),
            Method::GET,
            actor_path(&name, ""),
            View::Details,
        ),
        ActorCommand::Logs { name, .. } | ActorCommand::Events { name, .. } => {
            bail!("actor logs {name}: not a single request (see commands::logs)")
        }
        other => moves_call(other)?,
    })
}

/// The request of an `actor` verb that pauses, resumes, checkpoints,
/// deletes, migrates or upgrades an actor.
///
/// # Errors
/// As [`actor_call`].
fn moves_call(command: ActorCommand) -> anyhow::Result<Call> {
    Ok(match command {
        ActorCommand::Pause { name, client } => Call::new(
            client,
            format!("actor pause {name}"),
            Method::POST,
            actor_path(&name, "pause"),
            View::Details,
        ),
        ActorCommand::Resume {
            name,
            from_snapshot,
            from_template,
            client,
        } => {
            let body = match (from_snapshot, from_template) {
                (Some(seq), _) => Body::Json(serde_json::json!({ "from_snapshot": seq })),
                (None, true) => Body::Json(serde_json::json!({ "from_template": true })),
                (None, false) => Body::Empty,
            };
            Call::new(
                client,
                format!("actor resume {name}"),
                Method::POST,
                actor_path(&name, "resume"),
                View::Details,
            )
            .with_body(body)
        }
        ActorCommand::Checkpoint { name, client } => Call::new(
            client,
            format!("actor checkpoint {name}"),
            Method::POST,
            actor_path(&name, "checkpoint"),
            View::Details,
        ),
        ActorCommand::Delete { name, client } => Call::new(
            client,
            format!("actor delete {name}"),
            Method::DELETE,
            actor_path(&name, ""),
            View::Deleted,
        ),
        ActorCommand::Migrate { name, to, client } => Call::new(
            client,
            format!("actor migrate {name}"),
            Method::POST,
            actor_path(&name, "migrate"),
            View::Details,
        )
        .with_body(Body::Json(serde_json::json!({ "to": to }))),
        ActorCommand::Upgrade {
            name,
            to_version,
            client,
        } => Call::new(
            client,
            format!("actor upgrade {name}"),
            Method::POST,
            actor_path(&name, "upgrade"),
            View::Details,
        )
        .with_body(Body::Json(serde_json::json!({ "to_version": to_version }))),
        other => bail!("not a move verb: {other:?}"),
    })
}

/// A label change's body: a JSON merge patch (`null` removes).
fn label_patch(changes: Vec<(String, Option<String>)>) -> serde_json::Value {
    changes
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                v.map_or(serde_json::Value::Null, serde_json::Value::String),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The query of `actor list`'s options.
///
/// # Errors
/// An unknown state, or a token no listing gave.
pub(in crate::commands) fn list_query(
    labels: Vec<(String, String)>,
    template: Option<String>,
    state: Option<&str>,
    limit: Option<usize>,
    continue_token: Option<String>,
) -> anyhow::Result<ActorQuery> {
    let state = match state {
        Some(s) => Some(
            serde_json::from_value::<ActorState>(serde_json::Value::String(s.to_owned()))
                .map_err(|_| {
                    anyhow::anyhow!(
                        "--state {s:?} is not one of creating, running, pausing, paused, resuming, migrating, failed, unknown"
                    )
                })?,
        ),
        None => None,
    };
    let after = match continue_token {
        Some(token) => Some(decode_token(&token).map_err(|e| anyhow::anyhow!("--continue: {e}"))?),
        None => None,
    };
    Ok(ActorQuery {
        labels,
        template,
        state,
        limit,
        after,
    })
}

/// The actors list's path with `query`.
pub(in crate::commands) fn list_path(query: &ActorQuery) -> String {
    let encoded = query.to_query();
    if encoded.is_empty() {
        "/v1/actors".into()
    } else {
        format!("/v1/actors?{encoded}")
    }
}
