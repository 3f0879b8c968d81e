//! `stasis actor ...`: the actor verbs' command line.

use clap::Subcommand;

use super::ClientArgs;

/// `stasis actor ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ActorCommand {
    /// Create an actor from a template and start it on a worker.
    Create {
        /// Actor name (1-63 of a-z, 0-9 and -); it is reached at NAME.actors.<domain>.
        name: String,
        /// The template to instantiate.
        #[arg(long, value_name = "TEMPLATE")]
        template: String,
        /// A label to give it (repeatable; at most 16).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Create an actor from another's snapshot (its newest; a running actor
    /// is checkpointed first), sharing the snapshot's bytes; the two then
    /// diverge. The new actor starts paused.
    Fork {
        /// The actor to fork.
        src: String,
        /// Name of the new actor (1-63 of a-z, 0-9 and -).
        new: String,
        /// Fork this snapshot of SRC (see `actor get`) instead of its newest.
        #[arg(long, value_name = "SEQ")]
        from_snapshot: Option<u64>,
        /// Change a label SRC has for the fork (repeatable): KEY=VALUE sets
        /// it, KEY- removes it; the fork keeps SRC's other labels.
        #[arg(long = "label", value_name = "KEY=VALUE|KEY-", value_parser = parse_label_change)]
        labels: Vec<(String, Option<String>)>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List actors, sorted by name (every one, a page at a time; with
    /// --limit, one page and the token of the next).
    List {
        /// Only actors with this label (repeatable: all of them).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        /// Only actors of this template (any version).
        #[arg(long, value_name = "TEMPLATE")]
        template: Option<String>,
        /// Only actors in this state (running, paused, failed, ...).
        #[arg(long, value_name = "STATE")]
        state: Option<String>,
        /// At most N actors (one page; at most 5000).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// The page after the one that printed this token (with --limit).
        #[arg(long = "continue", value_name = "TOKEN", requires = "limit")]
        continue_token: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set or remove an actor's labels: KEY=VALUE sets one, KEY- removes
    /// one; the others stay. Prints the labels it has then.
    Label {
        /// Actor name.
        name: String,
        /// The changes (at least one).
        #[arg(value_name = "KEY=VALUE|KEY-", required = true, value_parser = parse_label_change)]
        changes: Vec<(String, Option<String>)>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show one actor.
    Get {
        /// Actor name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print an actor's stdout and stderr lines, oldest first (the newest
    /// 1000 lines, at most 256 KiB, are kept per actor); with -f, keep
    /// printing new ones across pauses, traps, restarts and moves.
    Logs {
        /// Actor name.
        name: String,
        /// Keep printing new lines until the actor is deleted (or Ctrl-C).
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only lines since this long ago (`10m`, `1h`) or this RFC 3339 time.
        #[arg(long, value_name = "D")]
        since: Option<String>,
        /// Only the newest N lines (of those --since selects).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print an actor's recent lifecycle events as its workers saw them
    /// (created, resumed, paused, trapped, captured for a move, placed
    /// here, upgraded), oldest first; with -f, keep printing new ones.
    Events {
        /// Actor name.
        name: String,
        /// Keep printing new events until the actor is deleted (or Ctrl-C).
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only events since this long ago (`10m`, `1h`) or this RFC 3339 time.
        #[arg(long, value_name = "D")]
        since: Option<String>,
        /// Only the newest N events (of those --since selects).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Snapshot an actor and unload it (idempotent); prints the snapshot size
    /// and how long the pause took.
    Pause {
        /// Actor name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Load a paused actor again, by default from its newest snapshot.
    Resume {
        /// Actor name.
        name: String,
        /// Restore this snapshot (see `actor get`) instead of the newest.
        #[arg(long, value_name = "SEQ", conflicts_with = "from_template")]
        from_snapshot: Option<u64>,
        /// Start over from the template, dropping the actor's state.
        #[arg(long)]
        from_template: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Take a snapshot of a running actor without unloading it.
    Checkpoint {
        /// Actor name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete an actor and its snapshots (with -o json, prints {}).
    Delete {
        /// Actor name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Move an actor to another worker; prints the downtime.
    Migrate {
        /// Actor name.
        name: String,
        /// The worker to move it to.
        #[arg(long, value_name = "WORKER")]
        to: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Move an actor to another version of its template, keeping its state
    /// (memory carry-over: both versions declare the same layout).
    Upgrade {
        /// Actor name.
        name: String,
        /// The version to move to (default: the template's newest).
        #[arg(long, value_name = "V")]
        to_version: Option<u64>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// A `--label KEY=VALUE`, checked as the server checks it.
fn parse_label(s: &str) -> Result<(String, String), String> {
    stasis_runtime::contract::labels::parse_pair(s).map_err(|e| e.to_string())
}

/// A label change: `KEY=VALUE` sets it, `KEY-` removes it.
fn parse_label_change(s: &str) -> Result<(String, Option<String>), String> {
    if let Some(key) = s.strip_suffix('-')
        && !s.contains('=')
    {
        stasis_runtime::contract::labels::check_key(key).map_err(|e| e.to_string())?;
        return Ok((key.to_owned(), None));
    }
    parse_label(s)
        .map(|(k, v)| (k, Some(v)))
        .map_err(|e| format!("{e} (or KEY- to remove it)"))
}
