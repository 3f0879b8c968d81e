//! The client verbs' command line: the `clap` shape of `stasis template`,
//! `actor`, `worker`, `rebalance` and `gc` with their options and flags
//! (`docs/api.md` maps each to its admin API route). Turning a parsed verb
//! into a request and printing its answer is [`crate::commands`]' job.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

mod actor;

pub(crate) use actor::ActorCommand;

/// How a verb prints its answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// Aligned columns, or `key: value` lines for one object.
    #[default]
    Table,
    /// The server's JSON, pretty-printed, fields as the server sent them
    /// (`{}` for a delete, which answers with no body).
    Json,
}

/// Options every client verb takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClientArgs {
    /// Admin API of the `stasis serve` to talk to.
    #[arg(
        long,
        env = "STASIS_ADMIN",
        default_value = "http://127.0.0.1:7070",
        value_name = "URL",
        help_heading = "Client options"
    )]
    pub admin: String,
    /// Bearer token for the admin API (required when it listens beyond loopback).
    #[arg(
        long,
        env = "STASIS_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = "Client options"
    )]
    pub admin_token: Option<String>,
    /// The namespace of the actors and templates named (and of a token
    /// made); `default` is the namespace of names without one.
    #[arg(
        short = 'n',
        long,
        env = "STASIS_NAMESPACE",
        value_name = "NS",
        help_heading = "Client options"
    )]
    pub namespace: Option<String>,
    /// Output format: a table for people, or the server's JSON for scripts.
    #[arg(
        short = 'o',
        long,
        value_enum,
        default_value_t = OutputFormat::Table,
        value_name = "FORMAT",
        help_heading = "Client options"
    )]
    pub output: OutputFormat,
}

/// The client options given before the verb (`stasis --admin URL actor
/// list`). Each is `global` with the id of its [`ClientArgs`] twin, so clap
/// hands a value given here to the verb's own [`ClientArgs`] (one given
/// after the verb wins); nothing reads these fields directly. No default
/// and no environment variable here: those are [`ClientArgs`]' own.
#[derive(Debug, Clone, Args)]
pub(crate) struct GlobalClientArgs {
    /// Admin API of the `stasis serve` to talk to (also after the verb).
    #[arg(
        long,
        global = true,
        value_name = "URL",
        help_heading = "Client options"
    )]
    pub admin: Option<String>,
    /// Bearer token for the admin API (also after the verb).
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        help_heading = "Client options"
    )]
    pub admin_token: Option<String>,
    /// The namespace of the actors and templates named (also after the verb).
    #[arg(
        short = 'n',
        long,
        global = true,
        value_name = "NS",
        help_heading = "Client options"
    )]
    pub namespace: Option<String>,
    /// Output format of a client verb (also after the verb).
    #[arg(
        short = 'o',
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        help_heading = "Client options"
    )]
    pub output: Option<OutputFormat>,
}

/// Client verbs: they drive a running `stasis serve` through its admin API.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
pub(crate) enum ClientCommand {
    /// Push, list, show and delete templates (guest modules); roll a
    /// version out to their actors and back.
    #[command(subcommand)]
    Template(TemplateCommand),
    /// Create, list, inspect, follow the logs of, pause, resume, checkpoint, migrate, upgrade and delete actors.
    #[command(subcommand)]
    Actor(ActorCommand),
    /// List, drain and undrain workers.
    #[command(subcommand)]
    Worker(WorkerCommand),
    /// Create, list and revoke scoped admin tokens (reader, writer, admin).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Show a namespace (its actors and quota) and set its quota.
    #[command(subcommand)]
    Namespace(NamespaceCommand),
    /// Push FILE, create its actor, print the actor's log, and push and
    /// roll out each new version (the actors keep their state) every time
    /// FILE changes, until Ctrl-C.
    Dev(Box<DevArgs>),
    /// Move actors between workers to even out the load; prints the moves.
    Rebalance {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete snapshot files no actor needs; prints what was reclaimed.
    Gc {
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `stasis dev FILE`'s options.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// The script (.js/.mjs/.ts/.mts, with the modules it imports) or
    /// module (.wasm) to push and watch.
    pub file: PathBuf,
    /// The template's name (default: FILE's name without its extension).
    #[arg(long, value_name = "NAME")]
    pub template: Option<String>,
    /// The actor to create and follow (default: the template's name).
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,
    /// WASI environment variable of the template; repeatable.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,
    /// The template's durability level (request, store, interval or pause).
    #[arg(long, value_name = "LEVEL", value_parser = parse_durability)]
    pub durability: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `stasis template ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum TemplateCommand {
    /// Upload a guest module (.wasm), or a JavaScript or TypeScript module
    /// (.js, .mjs, .ts, .mts, with what it imports) run by the built-in
    /// engine, under NAME; pushing the same bytes and env again is a no-op.
    Push {
        /// Template name (1-63 of a-z, 0-9 and -).
        name: String,
        /// The .wasm file (wasm32-wasip1, built with the guest SDK), or a
        /// .js/.mjs/.ts/.mts module whose default export has
        /// `fetch(request)` (its relative imports and pure-ESM packages
        /// from node_modules bundled, TypeScript types stripped), or a
        /// folder with a package.json (`module`/`main`) or an index.ts /
        /// index.js: its top level is evaluated here, once (a syntax error
        /// is refused with its line and column).
        file: PathBuf,
        /// WASI environment variable of the template; repeatable.
        #[arg(long = "env", value_name = "K=V", value_parser = parse_env_pair)]
        env: Vec<(String, String)>,
        /// When its actors' requests are durable (request, store, interval
        /// or pause), instead of the server's --durability.
        #[arg(long, value_name = "LEVEL", value_parser = parse_durability)]
        durability: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List templates, sorted by name.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show one template.
    Get {
        /// Template name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a template no actor uses (with -o json, prints {}).
    Delete {
        /// Template name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Upgrade every actor of a template to one of its versions: canaries
    /// first, then the rest; stops after --max-failures failures. Shows
    /// progress and waits until no actor is left to upgrade now (paused
    /// actors are upgraded when next resumed, unless --eager).
    Rollout {
        /// Template name.
        name: String,
        /// The version every actor moves to.
        #[arg(long, value_name = "V")]
        to_version: u64,
        /// Upgrade this many actors first, one at a time; a failed canary
        /// stops the rollout.
        #[arg(long, value_name = "N", default_value_t = 0)]
        canary: usize,
        /// Stop once this many actors failed (default 1).
        #[arg(long, value_name = "K")]
        max_failures: Option<usize>,
        /// Upgrade paused actors now instead of when they are next resumed.
        #[arg(long)]
        eager: bool,
        /// Answer once the rollout started, without waiting for it.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show a template's last rollout (or rollback): its state and counts,
    /// and each failed actor with its reason.
    RolloutStatus {
        /// Template name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Move every actor the template's last rollout upgraded back to the
    /// version it ran before, with its state as it is now (changes made
    /// under the new version stay). Waits like rollout.
    Rollback {
        /// Template name.
        name: String,
        /// Answer once the rollback started, without waiting for it.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `stasis worker ...`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
pub(crate) enum WorkerCommand {
    /// List workers.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Move every actor off a worker and mark it drained; waits until done.
    Drain {
        /// Worker name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Put a draining or drained worker back into service (`ready`); a
    /// running drain stops. Existing actors move to it on the next
    /// `stasis rebalance`.
    Undrain {
        /// Worker name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Run a remote worker: join the control plane at --join and host the
    /// actors it places here (a server; runs until SIGINT/SIGTERM, which
    /// drains it first).
    Run(Box<crate::worker_run::WorkerRunArgs>),
}

/// The role a scoped token grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TokenRole {
    /// Reads only: lists, get, logs, events, metrics.
    Reader,
    /// Reads, and requests to the actors of a namespace whose ingress
    /// needs a token (`namespace ingress-auth NS token`).
    Invoker,
    /// Reads, requests to actors, and changes to templates and actors.
    Writer,
    /// Everything in one namespace (give it with -n/--namespace).
    NamespaceAdmin,
    /// Everything, workers, moves, gc and tokens included.
    Admin,
}

/// `stasis token ...`: scoped admin tokens (the server needs --admin-token,
/// which is an admin token itself).
#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Make a token; it is printed once and never shown again (the server
    /// keeps only its SHA-256). With -n/--namespace it acts in that
    /// namespace only.
    Create {
        /// What it may do.
        #[arg(long, value_enum)]
        role: TokenRole,
        /// When it stops being accepted, from now (`30d`, `12h`); never
        /// when absent.
        #[arg(long, value_name = "D", value_parser = parse_expiry)]
        expires: Option<u64>,
        /// What it is for (shown by `token list`).
        #[arg(long, value_name = "TEXT")]
        description: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List tokens: id, role, creation and expiry (never the tokens).
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Revoke a token by its id: refused from then on, by every replica
    /// within a second.
    Revoke {
        /// The token's id (`token list`).
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `stasis namespace ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum NamespaceCommand {
    /// Show a namespace: how many actors it holds, and its quota.
    Get {
        /// Namespace name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set a namespace's quota (replacing it: a limit not given is
    /// removed), or remove it with --clear; applies on every replica
    /// within a second. At least one limit or --clear must be given.
    #[command(group(
        clap::ArgGroup::new("quota")
            .required(true)
            .multiple(true)
            .args(["max_actors", "max_requests_per_second", "clear"])
    ))]
    Quota {
        /// Namespace name.
        name: String,
        /// Most actors it may hold (creates and forks past it: 403).
        #[arg(long, value_name = "N")]
        max_actors: Option<u64>,
        /// Most requests per second its actors are sent, per replica
        /// (past it: 429 with Retry-After, not delivered).
        #[arg(long, value_name = "R")]
        max_requests_per_second: Option<u32>,
        /// Remove every limit of the quota.
        #[arg(long, conflicts_with_all = ["max_actors", "max_requests_per_second"])]
        clear: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set which other namespaces' actors may call and message this
    /// namespace's (as NAME.NAMESPACE), replacing the list; none given:
    /// only its own. Applies on every replica within a second.
    CallsFrom {
        /// Namespace name (the callee's).
        name: String,
        /// The namespaces whose actors may call it.
        from: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set whether requests to a namespace's actors through the ingress
    /// need a token (`Authorization: Bearer`, role invoker or above, of
    /// the namespace); applies on every replica within a second.
    IngressAuth {
        /// Namespace name.
        name: String,
        /// `token`: a token is needed (401 without, 403 for another
        /// namespace's); `none`: the actors are public (the default).
        #[arg(value_enum)]
        mode: IngressAuthMode,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Create a namespace's actors on first use: a request, call or
    /// message to an unknown actor of the namespace creates it from the
    /// template's newest version (once, counted in its quota); --off: an
    /// unknown actor is 404 again. Applies on every replica within a
    /// second.
    #[command(group(
        clap::ArgGroup::new("on_demand")
            .required(true)
            .args(["template", "off"])
    ))]
    OnDemand {
        /// Namespace name (`default` for actors without one).
        name: String,
        /// The template new actors are made from (of the namespace).
        #[arg(long, value_name = "T")]
        template: Option<String>,
        /// Stop creating actors on first use.
        #[arg(long)]
        off: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// What the ingress asks of requests to a namespace's actors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum IngressAuthMode {
    /// A token (role invoker or above, of the namespace).
    Token,
    /// Nothing: public.
    None,
}

/// A `--expires` duration, in whole seconds (at least one).
fn parse_expiry(s: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 30d, 12h)"))?;
    match d.as_secs() {
        0 => Err(format!("{s:?} is under a second")),
        secs => Ok(secs),
    }
}

/// A `--env K=V` value: split at the first `=`; the key must not be empty.
fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some(("", _)) => Err(format!("{s:?}: the variable name before '=' is empty")),
        Some((key, value)) => Ok((key.to_owned(), value.to_owned())),
        None => Err(format!("{s:?} is not K=V")),
    }
}

/// A durability level's name, checked here so a typo fails before the
/// upload.
fn parse_durability(s: &str) -> Result<String, String> {
    stasis_runtime::contract::settings::Durability::parse(s).map(|level| level.name().to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_env_pair;

    #[test]
    fn env_pairs_split_at_the_first_equals_sign() {
        assert_eq!(parse_env_pair("K=V"), Ok(("K".into(), "V".into())));
        assert_eq!(parse_env_pair("K="), Ok(("K".into(), String::new())));
        assert_eq!(parse_env_pair("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_env_pair("=V").is_err());
        assert!(parse_env_pair("K").is_err());
    }
}
