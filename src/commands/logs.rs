//! `stasis actor logs NAME [-f] [--since D] [--tail N]` (and `actor
//! events`, the same over the `event` stream): reads
//! `GET /v1/actors/{name}/logs` and prints each line (`-o json`: the
//! server's JSON object of the line, one per line). With `-f` it asks again
//! for the lines after the last one it printed (`after=SEQ`, waiting on the
//! server up to 25 s each time), so no line is printed twice or skipped
//! when the actor pauses, moves or its server restarts: an unreachable
//! server or a 5xx answer is retried every 200 ms, a 4xx answer (the actor
//! was deleted: 404) ends it with the error.

use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hyper::Method;
use stasis_runtime::contract::logs::LogLine;

use crate::client::{AdminClient, encode_component, may_pass};
use crate::verbs::{ClientArgs, OutputFormat};

/// How long each follow request waits on the server for a new line.
const WAIT_SECS: u64 = 25;
/// Pause before asking again after a failed request.
const RETRY: Duration = Duration::from_millis(200);

/// The verb's arguments.
pub(super) struct Logs {
    pub name: String,
    pub follow: bool,
    pub since: Option<String>,
    pub tail: Option<usize>,
    /// `actor events`: the `event` stream instead of stdout and stderr.
    pub events: bool,
}

/// Runs the verb (see the module docs).
pub(super) async fn run(verb: Logs, client: &ClientArgs) -> anyhow::Result<()> {
    let admin = AdminClient::new(&client.admin, client.admin_token.as_deref())?;
    let path = super::plan::namespaced(
        client.namespace.as_deref(),
        &format!("/v1/actors/{}/logs", encode_component(&verb.name)),
    );
    let mut after: Option<u64> = None;
    let mut first = true;
    loop {
        let mut params = Vec::new();
        if verb.events {
            params.push("stream=event".to_owned());
        }
        if let Some(seq) = after {
            params.push(format!("after={seq}"));
        } else if let Some(since) = &verb.since {
            params.push(format!("since={}", encode_component(since)));
        }
        // `--tail 0` asks for the newest line only to start after it.
        let skip_first = first && verb.tail == Some(0);
        if let (true, Some(tail)) = (first, verb.tail) {
            params.push(format!("tail={}", tail.max(1)));
        }
        if verb.follow && !first {
            params.push(format!("wait={WAIT_SECS}"));
        }
        let url = if params.is_empty() {
            path.clone()
        } else {
            format!("{path}?{}", params.join("&"))
        };
        let started = Instant::now();
        let timeout = Some(Duration::from_secs(WAIT_SECS + 10));
        let lines = match admin.send(Method::GET, &url, None, timeout).await {
            Ok(reply) => parse(&reply.body)?,
            Err(e) if !verb.follow || !may_pass(&e) => return Err(e),
            Err(_) => {
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        first = false;
        if let Some(last) = lines.last() {
            after = Some(last.seq);
        }
        if skip_first {
            if !verb.follow {
                return Ok(());
            }
            if after.is_none() {
                // No line yet: the next answer's lines are all new.
                after = Some(0);
            }
            continue;
        }
        if !print(&lines, client.output) || !verb.follow {
            return Ok(());
        }
        // An answer with no line that came back at once (the actor is
        // between workers): ask again a little later.
        if lines.is_empty() && started.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(RETRY).await;
        }
    }
}

fn parse(body: &[u8]) -> anyhow::Result<Vec<LogLine>> {
    body.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).context("the admin API answered a malformed log line"))
        .collect()
}

/// Prints `lines`; false once stdout is closed (`| head`).
fn print(lines: &[LogLine], format: OutputFormat) -> bool {
    let mut out = std::io::stdout().lock();
    for line in lines {
        let written = match format {
            OutputFormat::Json => serde_json::to_string(line)
                .map_err(std::io::Error::other)
                .and_then(|json| writeln!(out, "{json}")),
            OutputFormat::Table => writeln!(
                out,
                "{} {} {} {}{}",
                line.at,
                line.worker,
                line.stream,
                line.text,
                if line.truncated { " [cut]" } else { "" }
            ),
        };
        if written.is_err() {
            return false;
        }
    }
    out.flush().is_ok()
}
