//! The client verbs of `stasis`: each one is a single request to the admin
//! API of a running `stasis serve` (`docs/api.md`), its answer printed as a
//! table (default) or as the server's JSON (`-o json`). [`plan`] turns a
//! verb into its request; [`render`] reads what it uploads and prints its
//! answer; this module sends it ([`rollout`] waits for a rollout).

mod dev;
mod list;
mod logs;
mod plan;
mod render;
mod rollout;
#[cfg(test)]
mod tests;

use anyhow::bail;
use bytes::Bytes;

use crate::client::{AdminClient, Payload};
use crate::output::{self, Json};
pub(crate) use crate::verbs::ClientCommand;
use crate::verbs::{ActorCommand, WorkerCommand};
use plan::{Body, View, plan};
use render::{print, read_module, render};

/// Runs one client verb: sends its request to the admin API and prints the
/// answer on stdout.
///
/// # Errors
/// One line for stderr, starting with the verb and its target, e.g.
/// `actor pause c9: 404 no actor named "c9"`: the server's refusal, an
/// unreachable admin URL, or an unreadable module file.
pub(crate) async fn run(command: ClientCommand) -> anyhow::Result<()> {
    if let ClientCommand::Worker(WorkerCommand::Run(args)) = command {
        return crate::worker_run::run(*args).await;
    }
    if let ClientCommand::Dev(args) = command {
        return dev::run(*args).await.map_err(|e| e.context("dev"));
    }
    if let ClientCommand::Actor(
        ActorCommand::Logs {
            name,
            follow,
            since,
            tail,
            client,
        }
        | ActorCommand::Events {
            name,
            follow,
            since,
            tail,
            client,
        },
    ) = &command
    {
        let events = matches!(command, ClientCommand::Actor(ActorCommand::Events { .. }));
        let what = format!("actor {} {name}", if events { "events" } else { "logs" });
        let verb = logs::Logs {
            name: name.clone(),
            follow: *follow,
            since: since.clone(),
            tail: *tail,
            events,
        };
        return logs::run(verb, client).await.map_err(|e| e.context(what));
    }
    // `actor list` without --limit or --continue pages through every actor.
    let list_pages = match &command {
        ClientCommand::Actor(ActorCommand::List {
            limit,
            continue_token,
            ..
        }) => Some(limit.is_some() || continue_token.is_some()),
        _ => None,
    };
    let call = plan(command)?;
    let what = call.what.clone();
    async {
        let client = AdminClient::new(&call.client.admin, call.client.admin_token.as_deref())?;
        let payload = match &call.body {
            Body::Empty => None,
            Body::Json(value) => Some(Payload {
                bytes: Bytes::from(serde_json::to_vec(value)?),
                content_type: "application/json",
            }),
            Body::Wasm(path) => Some(Payload {
                bytes: read_module(path).await?,
                content_type: "application/wasm",
            }),
        };
        let mut reply = match list_pages {
            Some(one_page) => list::fetch(&client, &call, one_page).await?,
            None => {
                client
                    .send(call.method.clone(), &call.path, payload, call.timeout)
                    .await?
            }
        };
        if call.view == (View::Rollout { no_wait: false }) {
            reply = rollout::wait(&client, &call.path, reply).await?;
        }
        print(&render(&call, &reply)?)?;
        if matches!(call.view, View::Rollout { .. }) && call.method == hyper::Method::POST {
            // A rollout or rollback verb that ends stopped, or finished
            // with failed actors, fails; the status verb only shows it.
            rollout::check(&reply)?;
        }
        if call.view == View::Moves {
            let failed = Json::parse(&reply.body).map_or(0, |j| output::failed_moves(&j));
            if failed > 0 {
                bail!(
                    "{failed} move(s) failed; the reason of each is printed with it (those actors stayed where they were)"
                );
            }
        }
        Ok(())
    }
    .await
    .map_err(|e| e.context(what))
}
