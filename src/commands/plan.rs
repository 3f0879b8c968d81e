//! Turning a parsed client verb into its request: the route, the body,
//! the timeout and how its answer is shown.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use hyper::Method;

use crate::client::encode_component;

mod actor;

use crate::verbs::{
    ClientArgs, ClientCommand, IngressAuthMode, NamespaceCommand, TemplateCommand, TokenCommand,
    TokenRole, WorkerCommand,
};
use actor::actor_call;

/// How long a read-only call (list, get) may take; calls that change state
/// (pause, resume, migrate, drain, ...) wait as long as the server needs.
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What a call sends.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Body {
    /// Nothing.
    Empty,
    /// A JSON document.
    Json(serde_json::Value),
    /// The bytes of a file, read when the call runs.
    Wasm(PathBuf),
}

/// How a successful answer is shown as a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    /// `key: value` lines.
    Details,
    /// `key: value` lines after "template NAME created/unchanged".
    Pushed,
    /// A confirmation line ("actor c1 deleted").
    Deleted,
    /// The actors table.
    Actors,
    /// The templates table.
    Templates,
    /// The workers table.
    Workers,
    /// The rebalance moves.
    Moves,
    /// A token just made: its text first, then its other fields.
    TokenCreated,
    /// The tokens table.
    Tokens,
    /// A rollout's status (`key: value` lines, then its failures); a
    /// rollout or rollback verb waits for it to settle unless `no_wait`.
    Rollout {
        /// Answer at once.
        no_wait: bool,
    },
}

/// One client verb as a request: the caller's options, what it is called in
/// error messages, the route and body, and how to print the answer.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) client: ClientArgs,
    pub(super) what: String,
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) body: Body,
    pub(super) timeout: Option<Duration>,
    pub(super) view: View,
}

/// Longest context (`template push NAME`) an error message starts with;
/// the server's answer names an over-long name already, once.
const MAX_WHAT_CHARS: usize = 80;

/// `what`, cut to [`MAX_WHAT_CHARS`] with an ellipsis when longer.
fn short_what(what: String) -> String {
    if what.chars().count() <= MAX_WHAT_CHARS {
        return what;
    }
    let mut short: String = what.chars().take(MAX_WHAT_CHARS - 1).collect();
    short.push('…');
    short
}

impl Call {
    pub(super) fn new(
        client: ClientArgs,
        what: String,
        method: Method,
        path: String,
        view: View,
    ) -> Self {
        let timeout = (method == Method::GET).then_some(READ_TIMEOUT);
        Self {
            client,
            what: short_what(what),
            method,
            path,
            body: Body::Empty,
            timeout,
            view,
        }
    }

    pub(super) fn with_body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }
}

fn template_path(name: &str) -> String {
    format!("/v1/templates/{}", encode_component(name))
}

pub(super) fn actor_path(name: &str, action: &str) -> String {
    let base = format!("/v1/actors/{}", encode_component(name));
    if action.is_empty() {
        base
    } else {
        format!("{base}/{action}")
    }
}

/// Turns a parsed command into its request.
///
/// # Errors
/// A `--env` variable given twice.
pub(super) fn plan(command: ClientCommand) -> anyhow::Result<Call> {
    use ClientCommand as C;
    let call = match command {
        C::Template(command) => template_call(command)?,
        C::Actor(command) => actor_call(command)?,
        C::Worker(command) => worker_call(command)?,
        C::Token(command) => token_call(command)?,
        C::Namespace(command) => namespace_call(command)?,
        C::Rebalance { client } => Call::new(
            client,
            "rebalance".into(),
            Method::POST,
            "/v1/rebalance".into(),
            View::Moves,
        ),
        C::Gc { client } => Call::new(
            client,
            "gc".into(),
            Method::POST,
            "/v1/gc".into(),
            View::Details,
        ),
        C::Dev(args) => bail!(
            "dev {}: not a single request (see commands::dev)",
            args.file.display()
        ),
    };
    Ok(in_namespace(call))
}

/// The request of a `template` verb.
///
/// # Errors
/// As [`plan`].
fn template_call(command: TemplateCommand) -> anyhow::Result<Call> {
    Ok(match command {
        TemplateCommand::Push {
            name,
            file,
            env,
            durability,
            client,
        } => {
            let mut query = Vec::with_capacity(env.len() + 1);
            for (i, (key, value)) in env.iter().enumerate() {
                if env[..i].iter().any(|(k, _)| k == key) {
                    bail!("template push {name}: --env {key} given twice");
                }
                query.push(format!(
                    "env={}",
                    encode_component(&format!("{key}={value}"))
                ));
            }
            if let Some(level) = durability {
                query.push(format!("durability={level}"));
            }
            let mut path = template_path(&name);
            if !query.is_empty() {
                path.push('?');
                path.push_str(&query.join("&"));
            }
            Call::new(
                client,
                format!("template push {name}"),
                Method::PUT,
                path,
                View::Pushed,
            )
            .with_body(Body::Wasm(file))
        }
        TemplateCommand::List { client } => Call::new(
            client,
            "template list".into(),
            Method::GET,
            "/v1/templates".into(),
            View::Templates,
        ),
        TemplateCommand::Get { name, client } => Call::new(
            client,
            format!("template get {name}"),
            Method::GET,
            template_path(&name),
            View::Details,
        ),
        TemplateCommand::Delete { name, client } => Call::new(
            client,
            format!("template delete {name}"),
            Method::DELETE,
            template_path(&name),
            View::Deleted,
        ),
        TemplateCommand::Rollout {
            name,
            to_version,
            canary,
            max_failures,
            eager,
            no_wait,
            client,
        } => {
            let mut body = serde_json::json!({
                "to_version": to_version,
                "canary": canary,
                "eager": eager,
            });
            if let Some(k) = max_failures {
                body["max_failures"] = k.into();
            }
            Call::new(
                client,
                format!("template rollout {name}"),
                Method::POST,
                format!("{}/rollout", template_path(&name)),
                View::Rollout { no_wait },
            )
            .with_body(Body::Json(body))
        }
        TemplateCommand::RolloutStatus { name, client } => Call::new(
            client,
            format!("template rollout-status {name}"),
            Method::GET,
            format!("{}/rollout", template_path(&name)),
            View::Rollout { no_wait: true },
        ),
        TemplateCommand::Rollback {
            name,
            no_wait,
            client,
        } => Call::new(
            client,
            format!("template rollback {name}"),
            Method::POST,
            format!("{}/rollback", template_path(&name)),
            View::Rollout { no_wait },
        ),
    })
}

/// The request of a `worker` verb.
///
/// # Errors
/// As [`plan`].
fn worker_call(command: WorkerCommand) -> anyhow::Result<Call> {
    Ok(match command {
        WorkerCommand::List { client } => Call::new(
            client,
            "worker list".into(),
            Method::GET,
            "/v1/workers".into(),
            View::Workers,
        ),
        WorkerCommand::Drain { name, client } => Call::new(
            client,
            format!("worker drain {name}"),
            Method::POST,
            format!("/v1/workers/{}/drain", encode_component(&name)),
            View::Details,
        ),
        WorkerCommand::Undrain { name, client } => Call::new(
            client,
            format!("worker undrain {name}"),
            Method::POST,
            format!("/v1/workers/{}/undrain", encode_component(&name)),
            View::Details,
        ),
        WorkerCommand::Run(_) => bail!("worker run is a server, not a client verb"),
    })
}

/// The request of a `token` verb.
///
/// # Errors
/// As [`plan`].
fn token_call(command: TokenCommand) -> anyhow::Result<Call> {
    Ok(match command {
        TokenCommand::Create {
            role,
            expires,
            description,
            client,
        } => {
            let role = match role {
                TokenRole::Reader => "reader",
                TokenRole::Invoker => "invoker",
                TokenRole::Writer => "writer",
                TokenRole::NamespaceAdmin => "namespace-admin",
                TokenRole::Admin => "admin",
            };
            let mut body = serde_json::json!({ "role": role });
            if let Some(namespace) = &client.namespace {
                body["namespace"] = namespace.clone().into();
            }
            if let Some(secs) = expires {
                body["expires_in_s"] = secs.into();
            }
            if let Some(text) = description {
                body["description"] = text.into();
            }
            Call::new(
                client,
                format!("token create --role {role}"),
                Method::POST,
                "/v1/tokens".into(),
                View::TokenCreated,
            )
            .with_body(Body::Json(body))
        }
        TokenCommand::List { client } => Call::new(
            client,
            "token list".into(),
            Method::GET,
            "/v1/tokens".into(),
            View::Tokens,
        ),
        TokenCommand::Revoke { id, client } => {
            // A token's whole text: only its id goes on the wire (and
            // into the server's logs), never its secret.
            let given = id.trim();
            let id = match stasis_runtime::control::tokens::parse(given) {
                Some((id, _)) => id.to_owned(),
                // Token-shaped but not a token: it may be most of one,
                // so it is neither sent nor echoed.
                None if given.starts_with("stasis_") => bail!(
                    "token revoke: that is neither a whole token nor a token id \
                     (`stasis token list` shows the ids)"
                ),
                None => given.to_owned(),
            };
            Call::new(
                client,
                format!("token revoke {id}"),
                Method::DELETE,
                format!("/v1/tokens/{}", encode_component(&id)),
                View::Deleted,
            )
        }
    })
}

/// The request of a `namespace` verb.
///
/// # Errors
/// As [`plan`].
fn namespace_call(command: NamespaceCommand) -> anyhow::Result<Call> {
    Ok(match command {
        NamespaceCommand::Get { name, client } => Call::new(
            client,
            format!("namespace get {name}"),
            Method::GET,
            format!("/v1/namespaces/{}", encode_component(&name)),
            View::Details,
        ),
        NamespaceCommand::Quota {
            name,
            max_actors,
            max_requests_per_second,
            clear: _,
            client,
        } => {
            let mut body = serde_json::json!({});
            if let Some(n) = max_actors {
                body["max_actors"] = n.into();
            }
            if let Some(r) = max_requests_per_second {
                body["max_requests_per_second"] = r.into();
            }
            Call::new(
                client,
                format!("namespace quota {name}"),
                Method::PUT,
                format!("/v1/namespaces/{}/quota", encode_component(&name)),
                View::Details,
            )
            .with_body(Body::Json(body))
        }
        NamespaceCommand::OnDemand {
            name,
            template,
            off: _,
            client,
        } => Call::new(
            client,
            format!("namespace on-demand {name}"),
            Method::PUT,
            format!("/v1/namespaces/{}/on-demand", encode_component(&name)),
            View::Details,
        )
        .with_body(Body::Json(serde_json::json!({ "template": template }))),
        NamespaceCommand::CallsFrom { name, from, client } => Call::new(
            client,
            format!("namespace calls-from {name}"),
            Method::PUT,
            format!("/v1/namespaces/{}/calls-from", encode_component(&name)),
            View::Details,
        )
        .with_body(Body::Json(serde_json::json!({ "namespaces": from }))),
        NamespaceCommand::IngressAuth { name, mode, client } => {
            let mode = match mode {
                IngressAuthMode::Token => "token",
                IngressAuthMode::None => "none",
            };
            Call::new(
                client,
                format!("namespace ingress-auth {name} {mode}"),
                Method::PUT,
                format!("/v1/namespaces/{}/ingress-auth", encode_component(&name)),
                View::Details,
            )
            .with_body(Body::Json(serde_json::json!({ "mode": mode })))
        }
    })
}

/// `call` with its actor or template route in its client's namespace:
/// `/v1/actors/...` becomes `/v1/namespaces/NS/actors/...`.
fn in_namespace(mut call: Call) -> Call {
    call.path = namespaced(call.client.namespace.as_deref(), &call.path);
    call
}

/// `path` in namespace `namespace` (see [`in_namespace`]).
pub(super) fn namespaced(namespace: Option<&str>, path: &str) -> String {
    match (namespace, path.strip_prefix("/v1/")) {
        (Some(ns), Some(rest)) if rest.starts_with("actors") || rest.starts_with("templates") => {
            format!("/v1/namespaces/{}/{rest}", encode_component(ns))
        }
        _ => path.to_owned(),
    }
}
