//! `stasis dev FILE`: the edit-save-try loop on a local `stasis serve`.
//! It pushes FILE as a template (a `.js`/`.mjs` script or a `.wasm`
//! module), creates its actor if there is none, and prints the actor's
//! log as it comes; then it watches FILE (and, for a script, the modules
//! it imports) and, each time their bytes change, pushes the new version and rolls it out to every actor of the template
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
use super::render::module_of;
use crate::client::{AdminClient, Payload, Refused, encode_component, may_pass};
use crate::output::Json;
use crate::verbs::{ClientCommand, DevArgs, TemplateCommand};

/// How often FILE is read for a change.
const POLL: Duration = Duration::from_millis(150);

/// How long to wait before asking a server that did not answer again.
const RETRY: Duration = Duration::from_secs(1);

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
    let first = read(&args.file).await?;
    let (mut version, _) = push(&admin, &push_call, first.clone()).await?;
    // A script's imported modules are watched too (the list is read again
    // after each build).
    let mut files = watched(&args.file);
    let first = fingerprint(&first, &files).await;
    let rollout_path = super::plan::namespaced(
        args.client.namespace.as_deref(),
        &format!("/v1/templates/{}/rollout", encode_component(&template)),
    );
    // An actor left on an older version (a save while dev was not
    // running) gets this one now.
    if let Some(running) = ensure_actor(&admin, &args, &actor, &template).await?
        && running != version
    {
        report(
            roll_out(&admin, &rollout_path, version).await,
            version,
            None,
        );
    }
    let imports = match files.len().saturating_sub(1) {
        0 => String::new(),
        1 => " and the file it imports".to_owned(),
        n => format!(" and the {n} files it imports"),
    };
    println!(
        "stasis dev: template {template} version {version}, actor {actor}; watching {}{imports} \
         (Ctrl-C stops)",
        args.file.display()
    );
    follow_log(&actor, &args.client);
    // The bytes last handled (pushed and rolled out, or refused for what
    // they hold); a save is taken once two reads in a row agree, so a file
    // being written is never pushed half-way.
    let mut handled = first;
    let mut seen: Option<Vec<u8>> = None;
    let mut missing = false;
    let mut retrying = false;
    let mut built: Option<(Vec<u8>, bytes::Bytes)> = None;
    loop {
        // Polling, not a timer for a test: the file is read every POLL.
        tokio::time::sleep(POLL).await;
        let Some((entry, now)) = poll(&args.file, &files, &mut missing).await else {
            continue;
        };
        if entry.is_empty() || now == handled || seen.as_ref() != Some(&now) {
            seen = Some(now);
            continue;
        }
        let saved = Instant::now();
        // Built once per content: a retry sends the same module again.
        let module = match &built {
            Some((bytes, module)) if *bytes == now => module.clone(),
            _ => match module_of(&args.file, entry).await {
                Ok(module) => {
                    files = watched(&args.file);
                    built = Some((now.clone(), module.clone()));
                    module
                }
                Err(e) => {
                    println!("stasis dev: {e:#}; version {version} goes on serving");
                    handled = now;
                    continue;
                }
            },
        };
        let step = async {
            let (pushed, _) = send_push(&admin, &push_call, module).await?;
            // An actor deleted meanwhile is made again.
            ensure_actor(&admin, &args, &actor, &template).await?;
            let rolled = roll_out(&admin, &rollout_path, pushed).await;
            if let Err(e) = &rolled
                && may_pass(e)
            {
                return Err(rolled.expect_err("an error"));
            }
            Ok::<_, anyhow::Error>((pushed, rolled))
        }
        .await;
        match step {
            // The server did not answer (or failed): asked again, the
            // error printed once.
            Err(e) if may_pass(&e) => {
                if !std::mem::replace(&mut retrying, true) {
                    println!("stasis dev: {e:#}; trying again");
                }
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => {
                retrying = false;
                println!("stasis dev: {e:#}; version {version} goes on serving");
                handled = now;
            }
            Ok((pushed, rolled)) => {
                retrying = false;
                if rolled.is_ok() {
                    version = pushed;
                }
                report(rolled, pushed, Some(saved));
                handled = now;
            }
        }
    }
}

/// Prints `actor`'s new log lines as they come, in a task of its own.
fn follow_log(actor: &str, client: &crate::verbs::ClientArgs) {
    let follow = Logs {
        name: actor.to_owned(),
        follow: true,
        since: None,
        tail: Some(0),
        events: false,
    };
    let client = client.clone();
    tokio::spawn(async move {
        if let Err(e) = logs::run(follow, &client).await {
            eprintln!("stasis dev: the actor's log stopped: {e:#}");
        }
    });
}

/// Prints how a rollout of `version` went.
fn report(rolled: anyhow::Result<u64>, version: u64, saved: Option<Instant>) {
    match rolled {
        Ok(upgraded) => {
            let after = saved.map_or_else(String::new, |s| {
                format!(", {} ms after the save", s.elapsed().as_millis())
            });
            println!(
                "stasis dev: version {version} serves {upgraded} actor(s) with their state{after}"
            );
        }
        Err(e) => println!("stasis dev: version {version} not rolled out: {e:#}"),
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

/// The files a save of FILE may touch: a script's modules (itself first),
/// else FILE.
fn watched(file: &Path) -> Vec<std::path::PathBuf> {
    if crate::js_template::is_script(file) {
        crate::js_template::files(file)
    } else {
        vec![file.to_path_buf()]
    }
}

/// FILE's bytes and the watch's [`fingerprint`], or `None` (said once
/// until it can be read again) when it cannot be read.
async fn poll(
    file: &Path,
    files: &[std::path::PathBuf],
    missing: &mut bool,
) -> Option<(Vec<u8>, Vec<u8>)> {
    match tokio::fs::read(file).await {
        Ok(entry) => {
            *missing = false;
            let all = fingerprint(&entry, files).await;
            Some((entry, all))
        }
        Err(e) => {
            if !std::mem::replace(missing, true) {
                println!(
                    "stasis dev: cannot read {}: {e}; waiting for it",
                    file.display()
                );
            }
            None
        }
    }
}

/// What the watch compares: FILE's bytes `entry`, then each other file's
/// path and bytes (a file that cannot be read counts as empty).
async fn fingerprint(entry: &[u8], files: &[std::path::PathBuf]) -> Vec<u8> {
    let mut all = entry.to_vec();
    for file in files.iter().skip(1) {
        all.extend_from_slice(file.as_os_str().as_encoded_bytes());
        let bytes = tokio::fs::read(file).await.unwrap_or_default();
        all.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        all.extend(bytes);
    }
    all
}

async fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    tokio::fs::read(file)
        .await
        .with_context(|| format!("cannot read {}", file.display()))
}

/// Pushes the file `call` names, holding `bytes`: the version it answers,
/// and whether it is new (`false`: the same bytes as the newest).
async fn push(admin: &AdminClient, call: &Call, bytes: Vec<u8>) -> anyhow::Result<(u64, bool)> {
    let super::plan::Body::Wasm(file) = &call.body else {
        bail!("a push sends a module");
    };
    send_push(admin, call, module_of(file, bytes).await?).await
}

/// Sends the push of `module` (built already).
async fn send_push(
    admin: &AdminClient,
    call: &Call,
    module: bytes::Bytes,
) -> anyhow::Result<(u64, bool)> {
    let payload = Payload {
        bytes: module,
        content_type: "application/wasm",
    };
    let reply = admin
        .send(call.method.clone(), &call.path, Some(payload), call.timeout)
        .await
        .with_context(|| call.what.clone())?;
    let json = Json::parse(&reply.body)?;
    let version = json
        .get("version")
        .and_then(Json::as_u64)
        .ok_or_else(|| anyhow!("the server's answer to the push has no version"))?;
    Ok((version, reply.status == hyper::StatusCode::CREATED))
}

/// Creates `actor` from `template` unless it exists (of that template,
/// in the client's namespace); the version an existing one runs.
async fn ensure_actor(
    admin: &AdminClient,
    args: &DevArgs,
    actor: &str,
    template: &str,
) -> anyhow::Result<Option<u64>> {
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
            // Answers name a namespace's templates by their full names.
            if has.split('.').next() != Some(template) {
                bail!("actor {actor} runs template {has}, not {template}: pass --actor NAME");
            }
            Ok(json.get("template_version").and_then(Json::as_u64))
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
            println!("stasis dev: actor {actor} created");
            Ok(None)
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
        let upgraded = json.get("upgraded").and_then(Json::as_u64).unwrap_or(0);
        bail!(
            "{upgraded} actor(s) upgraded, {failed} refused it (each stays on its version with its state)\n{}",
            super::rollout::render(&json).trim_end()
        );
    }
    Ok(json.get("upgraded").and_then(Json::as_u64).unwrap_or(0))
}
