//! `stasis dev FILE`: the edit-save-try loop on a local `stasis serve`.
//! It pushes FILE as a template (a `.js`/`.mjs` script or a `.wasm`
//! module), creates its actor if there is none, and prints the actor's
//! log as it comes; then it watches FILE and, each time its bytes change,
//! pushes the new version and rolls it out to every actor of the template
//! with their state (a hand-over: a script's `save`/`load`, a module's
//! `stasis_save_state`/`stasis_load_state` or the same memory layout).
//! A version that does not build, or that an actor refuses, is reported
//! and the running version goes on serving; the loop runs until Ctrl-C.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use hyper::Method;

use super::logs::{self, Logs};
use super::plan::{Call, READ_TIMEOUT, plan};
use super::render::read_module;
use crate::client::{AdminClient, Payload, Refused, encode_component};
use crate::output::Json;
use crate::verbs::{ClientCommand, DevArgs, TemplateCommand};

/// How often FILE is read for a change.
const POLL: Duration = Duration::from_millis(150);

/// Runs the loop (see the module docs).
///
/// # Errors
/// FILE cannot be read or its first version is refused, the admin API
/// cannot be reached, or the actor exists with another template.
pub(super) async fn run(args: DevArgs) -> anyhow::Result<()> {
    let template = match &args.template {
        Some(name) => name.clone(),
        None => stem(&args.file)?,
    };
    let actor = args.actor.clone().unwrap_or_else(|| template.clone());
    let admin = AdminClient::new(&args.client.admin, args.client.admin_token.as_deref())?;
    let push_call = plan(ClientCommand::Template(TemplateCommand::Push {
        name: template.clone(),
        file: args.file.clone(),
        env: args.env.clone(),
        durability: args.durability.clone(),
        client: args.client.clone(),
    }))?;
    let mut last = read(&args.file).await?;
    let (mut version, _) = push(&admin, &push_call).await?;
    ensure_actor(&admin, &args, &actor, &template).await?;
    println!(
        "stasis dev: template {template} version {version}, actor {actor}; watching {} (Ctrl-C stops)",
        args.file.display()
    );
    let follow = Logs {
        name: actor.clone(),
        follow: true,
        since: None,
        tail: Some(0),
        events: false,
    };
    let client = args.client.clone();
    tokio::spawn(async move {
        if let Err(e) = logs::run(follow, &client).await {
            eprintln!("stasis dev: the actor's log stopped: {e:#}");
        }
    });
    let rollout_path = super::plan::namespaced(
        args.client.namespace.as_deref(),
        &format!("/v1/templates/{}/rollout", encode_component(&template)),
    );
    loop {
        // Polling, not a timer for a test: the file is read every POLL.
        tokio::time::sleep(POLL).await;
        let Ok(now) = tokio::fs::read(&args.file).await else {
            continue;
        };
        if now == last {
            continue;
        }
        last = now;
        let saved = Instant::now();
        let pushed = match push(&admin, &push_call).await {
            Ok((new, true)) => new,
            Ok((_, false)) => continue,
            Err(e) => {
                println!("stasis dev: {e:#}; version {version} goes on serving");
                continue;
            }
        };
        match roll_out(&admin, &rollout_path, pushed).await {
            Ok(upgraded) => {
                version = pushed;
                println!(
                    "stasis dev: version {pushed} serves {upgraded} actor(s) with their state, {} ms after the save",
                    saved.elapsed().as_millis()
                );
            }
            Err(e) => println!("stasis dev: version {pushed} not rolled out: {e:#}"),
        }
    }
}

/// The template name FILE's stem gives (`counter.js`: `counter`).
fn stem(file: &Path) -> anyhow::Result<String> {
    let stem = file.file_stem().and_then(|s| s.to_str()).ok_or_else(|| {
        anyhow!(
            "{}: no file name to name the template by; pass --template NAME",
            file.display()
        )
    })?;
    stasis_runtime::contract::names::check_label("template", stem)
        .map_err(|e| anyhow!("{e}; pass --template NAME"))?;
    Ok(stem.to_owned())
}

async fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    tokio::fs::read(file)
        .await
        .with_context(|| format!("cannot read {}", file.display()))
}

/// Pushes the file `call` names: the version it answers, and whether it is
/// new (`false`: the same bytes as the newest).
async fn push(admin: &AdminClient, call: &Call) -> anyhow::Result<(u64, bool)> {
    let super::plan::Body::Wasm(file) = &call.body else {
        bail!("a push sends a module");
    };
    let bytes = read_module(file).await?;
    let payload = Payload {
        bytes,
        content_type: "application/wasm",
    };
    let reply = admin
        .send(call.method.clone(), &call.path, Some(payload), call.timeout)
        .await
        .with_context(|| call.what.clone())?;
    let json = Json::parse(&reply.body)?;
    let version = json.get("version").and_then(Json::as_u64).unwrap_or(1);
    Ok((version, reply.status == hyper::StatusCode::CREATED))
}

/// Creates `actor` from `template` unless it exists (of that template).
async fn ensure_actor(
    admin: &AdminClient,
    args: &DevArgs,
    actor: &str,
    template: &str,
) -> anyhow::Result<()> {
    let ns = args.client.namespace.as_deref();
    let path = super::plan::namespaced(ns, &format!("/v1/actors/{}", encode_component(actor)));
    match admin
        .send(Method::GET, &path, None, Some(READ_TIMEOUT))
        .await
    {
        Ok(reply) => {
            let json = Json::parse(&reply.body)?;
            let has = json
                .get("template")
                .and_then(Json::as_str)
                .unwrap_or_default();
            if has != template {
                bail!("actor {actor} runs template {has}, not {template}: pass --actor NAME");
            }
            Ok(())
        }
        Err(e)
            if e.downcast_ref::<Refused>()
                .is_some_and(|r| r.status == hyper::StatusCode::NOT_FOUND) =>
        {
            let body = serde_json::json!({ "name": actor, "template": template });
            let payload = Payload {
                bytes: serde_json::to_vec(&body)?.into(),
                content_type: "application/json",
            };
            admin
                .send(
                    Method::POST,
                    &super::plan::namespaced(ns, "/v1/actors"),
                    Some(payload),
                    None,
                )
                .await
                .with_context(|| format!("actor create {actor}"))?;
            Ok(())
        }
        Err(e) => Err(e.context(format!("actor get {actor}"))),
    }
}

/// Rolls `version` out to the template's actors (paused ones too) and
/// waits for it: how many were upgraded.
///
/// # Errors
/// Why it stopped, each failed actor with its reason.
async fn roll_out(admin: &AdminClient, path: &str, version: u64) -> anyhow::Result<u64> {
    let body = serde_json::json!({ "to_version": version, "eager": true });
    let payload = Payload {
        bytes: serde_json::to_vec(&body)?.into(),
        content_type: "application/json",
    };
    let first = admin.send(Method::POST, path, Some(payload), None).await?;
    let last = super::rollout::wait(admin, path, first).await?;
    let json = Json::parse(&last.body)?;
    let failed = json.get("failed").and_then(Json::as_u64).unwrap_or(0);
    if failed > 0 || json.get("state").and_then(Json::as_str) == Some("stopped") {
        bail!(
            "the actors stay on their version with their state\n{}",
            super::rollout::render(&json).trim_end()
        );
    }
    Ok(json.get("upgraded").and_then(Json::as_u64).unwrap_or(0))
}
