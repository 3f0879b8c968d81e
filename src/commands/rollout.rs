//! `stasis template rollout` and `rollback`: after the request that starts
//! one, the status route is read until the rollout settles (no longer
//! running, or only paused actors waiting for their next resume are left),
//! with a progress line on stderr when it is a terminal; then the final
//! status is printed, and a stopped rollout fails the command.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use anyhow::bail;
use hyper::Method;

use super::plan::READ_TIMEOUT;
use crate::client::{AdminClient, Reply};
use crate::output::{self, Json};

/// How often the status is read while waiting.
const POLL: Duration = Duration::from_millis(300);

fn count(json: &Json, key: &str) -> u64 {
    json.get(key).and_then(Json::as_u64).unwrap_or(0)
}

/// Whether a waiting client may stop waiting (see the module doc; with
/// nothing left at all, the rollout is about to be `finished`).
fn settled(json: &Json) -> bool {
    let deferred = count(json, "deferred");
    json.get("state").and_then(Json::as_str) != Some("running")
        || (deferred > 0 && count(json, "pending") == deferred)
}

/// Reads `path`'s status (starting from `first`, the answer that started
/// it) until it settles; the last answer.
///
/// # Errors
/// If the admin API fails meanwhile.
pub(super) async fn wait(client: &AdminClient, path: &str, first: Reply) -> anyhow::Result<Reply> {
    let status_path = path.replace("/rollback", "/rollout");
    let tty = std::io::stderr().is_terminal();
    let mut reply = first;
    loop {
        let json = Json::parse(&reply.body)?;
        if tty {
            let (total, upgraded, failed) = (
                count(&json, "total"),
                count(&json, "upgraded"),
                count(&json, "failed"),
            );
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r{} {upgraded}/{total} upgraded, {failed} failed, {} pending ",
                json.get("kind").and_then(Json::as_str).unwrap_or("rollout"),
                count(&json, "pending")
            );
            let _ = err.flush();
        }
        if settled(&json) {
            if tty {
                eprintln!();
            }
            return Ok(reply);
        }
        tokio::time::sleep(POLL).await;
        reply = client
            .send(Method::GET, &status_path, None, Some(READ_TIMEOUT))
            .await?;
    }
}

/// A rollout status as `key: value` lines, then one line per failed
/// actor and one per skipped (deleted) actor.
#[must_use]
pub(super) fn render(json: &Json) -> String {
    let failures = match json {
        Json::Object(fields) => fields
            .iter()
            .filter(|(k, _)| k != "failures" && k != "skips")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        _ => Vec::new(),
    };
    let mut out = output::details(&Json::Object(failures));
    if let Some(Json::Array(failed)) = json.get("failures") {
        for f in failed {
            out.push_str(&format!(
                "failed {}: {}\n",
                f.get("actor").and_then(Json::as_str).unwrap_or("?"),
                f.get("reason").and_then(Json::as_str).unwrap_or("?")
            ));
        }
    }
    if let Some(Json::Array(skipped)) = json.get("skips") {
        for f in skipped {
            out.push_str(&format!(
                "skipped {}: {}\n",
                f.get("actor").and_then(Json::as_str).unwrap_or("?"),
                f.get("reason").and_then(Json::as_str).unwrap_or("?")
            ));
        }
    }
    out
}

/// Fails the command when the rollout stopped, or when it (or a
/// rollback) finished with actors that failed: not every actor moved.
///
/// # Errors
/// The stop reason, or how many actors failed.
pub(super) fn check(reply: &Reply) -> anyhow::Result<()> {
    let json = Json::parse(&reply.body)?;
    match json.get("state").and_then(Json::as_str) {
        Some("stopped") => bail!(
            "stopped: {}",
            json.get("stop_reason")
                .and_then(Json::as_str)
                .unwrap_or("no reason recorded")
        ),
        Some("finished") => {
            let failed = json.get("failed").and_then(Json::as_u64).unwrap_or(0);
            if failed > 0 {
                bail!(
                    "finished, but {failed} actor(s) failed; the reason of each is printed with \
                     it (those actors stayed on their version with their state)"
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
