//! The client verbs of `stasis`: each one is a single request to the admin
//! API of a running `stasis serve` (`docs/api.md`), its answer printed as a
//! table (default) or as the server's JSON (`-o json`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use hyper::{Method, StatusCode};

use crate::client::{AdminClient, Payload, Reply, encode_component};
use crate::output::{self, Json};
pub use crate::verbs::ClientCommand;
use crate::verbs::{ActorCommand, ClientArgs, OutputFormat, TemplateCommand, WorkerCommand};

/// How long a read-only call (list, get) may take; calls that change state
/// (pause, resume, migrate, drain, ...) wait as long as the server needs.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What a call sends.
#[derive(Debug, Clone, PartialEq)]
enum Body {
    /// Nothing.
    Empty,
    /// A JSON document.
    Json(serde_json::Value),
    /// The bytes of a file, read when the call runs.
    Wasm(PathBuf),
}

/// How a successful answer is shown as a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
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
}

/// One client verb as a request: the caller's options, what it is called in
/// error messages, the route and body, and how to print the answer.
#[derive(Debug, Clone)]
struct Call {
    client: ClientArgs,
    what: String,
    method: Method,
    path: String,
    body: Body,
    timeout: Option<Duration>,
    view: View,
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
    fn new(client: ClientArgs, what: String, method: Method, path: String, view: View) -> Self {
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

    fn with_body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }
}

fn template_path(name: &str) -> String {
    format!("/v1/templates/{}", encode_component(name))
}

fn actor_path(name: &str, action: &str) -> String {
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
fn plan(command: ClientCommand) -> anyhow::Result<Call> {
    use ClientCommand as C;
    let call = match command {
        C::Template(TemplateCommand::Push {
            name,
            file,
            env,
            client,
        }) => {
            let mut query = Vec::with_capacity(env.len());
            for (i, (key, value)) in env.iter().enumerate() {
                if env[..i].iter().any(|(k, _)| k == key) {
                    bail!("template push {name}: --env {key} given twice");
                }
                query.push(format!(
                    "env={}",
                    encode_component(&format!("{key}={value}"))
                ));
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
        C::Template(TemplateCommand::List { client }) => Call::new(
            client,
            "template list".into(),
            Method::GET,
            "/v1/templates".into(),
            View::Templates,
        ),
        C::Template(TemplateCommand::Get { name, client }) => Call::new(
            client,
            format!("template get {name}"),
            Method::GET,
            template_path(&name),
            View::Details,
        ),
        C::Template(TemplateCommand::Delete { name, client }) => Call::new(
            client,
            format!("template delete {name}"),
            Method::DELETE,
            template_path(&name),
            View::Deleted,
        ),
        C::Actor(ActorCommand::Create {
            name,
            template,
            client,
        }) => Call::new(
            client,
            format!("actor create {name}"),
            Method::POST,
            "/v1/actors".into(),
            View::Details,
        )
        .with_body(Body::Json(
            serde_json::json!({ "name": name, "template": template }),
        )),
        C::Actor(ActorCommand::List { client }) => Call::new(
            client,
            "actor list".into(),
            Method::GET,
            "/v1/actors".into(),
            View::Actors,
        ),
        C::Actor(ActorCommand::Get { name, client }) => Call::new(
            client,
            format!("actor get {name}"),
            Method::GET,
            actor_path(&name, ""),
            View::Details,
        ),
        C::Actor(ActorCommand::Pause { name, client }) => Call::new(
            client,
            format!("actor pause {name}"),
            Method::POST,
            actor_path(&name, "pause"),
            View::Details,
        ),
        C::Actor(ActorCommand::Resume {
            name,
            from_snapshot,
            from_template,
            client,
        }) => {
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
        C::Actor(ActorCommand::Checkpoint { name, client }) => Call::new(
            client,
            format!("actor checkpoint {name}"),
            Method::POST,
            actor_path(&name, "checkpoint"),
            View::Details,
        ),
        C::Actor(ActorCommand::Delete { name, client }) => Call::new(
            client,
            format!("actor delete {name}"),
            Method::DELETE,
            actor_path(&name, ""),
            View::Deleted,
        ),
        C::Actor(ActorCommand::Migrate { name, to, client }) => Call::new(
            client,
            format!("actor migrate {name}"),
            Method::POST,
            actor_path(&name, "migrate"),
            View::Details,
        )
        .with_body(Body::Json(serde_json::json!({ "to": to }))),
        C::Worker(WorkerCommand::List { client }) => Call::new(
            client,
            "worker list".into(),
            Method::GET,
            "/v1/workers".into(),
            View::Workers,
        ),
        C::Worker(WorkerCommand::Drain { name, client }) => Call::new(
            client,
            format!("worker drain {name}"),
            Method::POST,
            format!("/v1/workers/{}/drain", encode_component(&name)),
            View::Details,
        ),
        C::Worker(WorkerCommand::Undrain { name, client }) => Call::new(
            client,
            format!("worker undrain {name}"),
            Method::POST,
            format!("/v1/workers/{}/undrain", encode_component(&name)),
            View::Details,
        ),
        C::Worker(WorkerCommand::Run(_)) => bail!("worker run is a server, not a client verb"),
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
    };
    Ok(call)
}

/// Reads the module to push, naming the path in any error.
async fn read_module(path: &PathBuf) -> anyhow::Result<Bytes> {
    let metadata = tokio::fs::metadata(path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    if metadata.is_dir() {
        bail!(
            "cannot read {}: it is a directory, not a .wasm file",
            path.display()
        );
    }
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.is_empty() {
        bail!("{} is empty, not a .wasm module", path.display());
    }
    // Refused here rather than by the server mid-upload, which the client
    // would only see as a broken pipe.
    let limit = stasis_runtime::control::MAX_TEMPLATE_BYTES;
    if bytes.len() > limit {
        bail!(
            "{} is {} bytes, larger than the module size limit ({limit} bytes)",
            path.display(),
            bytes.len()
        );
    }
    Ok(Bytes::from(bytes))
}

/// The text printed for a successful answer.
fn render(call: &Call, reply: &Reply) -> anyhow::Result<String> {
    let parsed = if reply.body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let json = Json::parse(&reply.body).map_err(|e| {
            anyhow!(
                "the admin API at {} answered {} with a body that is not JSON ({e})",
                call.client.admin,
                reply.status.as_u16()
            )
        })?;
        Some(json)
    };
    if call.client.output == OutputFormat::Json {
        return Ok(match parsed {
            Some(json) => format!("{}\n", json.to_pretty()),
            None => "{}\n".to_owned(),
        });
    }
    if call.view == View::Deleted {
        // "template delete counter" -> "template counter deleted".
        let mut words = call.what.splitn(3, ' ');
        let kind = words.next().unwrap_or("");
        let name = words.nth(1).unwrap_or("");
        return Ok(format!("{kind} {name} deleted\n"));
    }
    let json = parsed.unwrap_or(Json::Null);
    Ok(match call.view {
        View::Actors => output::actors_table(&json),
        View::Templates => output::templates_table(&json),
        View::Workers => output::workers_table(&json),
        View::Moves => output::moves_table(&json),
        View::Pushed => {
            let name = json.get("name").and_then(Json::as_str).unwrap_or("?");
            let outcome = if reply.status == StatusCode::CREATED {
                "created"
            } else {
                "unchanged (same bytes and env)"
            };
            format!("template {name} {outcome}\n{}", output::details(&json))
        }
        View::Details | View::Deleted => output::details(&json),
    })
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

/// Runs one client verb: sends its request to the admin API and prints the
/// answer on stdout.
///
/// # Errors
/// One line for stderr, starting with the verb and its target, e.g.
/// `actor pause c9: 404 no actor named "c9"`: the server's refusal, an
/// unreachable admin URL, or an unreadable module file.
pub async fn run(command: ClientCommand) -> anyhow::Result<()> {
    if let ClientCommand::Worker(WorkerCommand::Run(args)) = command {
        return crate::worker_run::run(*args).await;
    }
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
        let reply = client
            .send(call.method.clone(), &call.path, payload, call.timeout)
            .await?;
        print(&render(&call, &reply)?)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, error::ErrorKind};

    /// The client verbs as `main` mounts them.
    #[derive(Debug, Parser)]
    #[command(name = "stasis")]
    struct TestCli {
        #[command(subcommand)]
        command: ClientCommand,
    }

    fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
        TestCli::try_parse_from(std::iter::once("stasis").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    fn call(args: &[&str]) -> Call {
        plan(parse(args).expect("arguments parse")).expect("plan")
    }

    #[test]
    fn cli_is_consistent() {
        TestCli::command().debug_assert();
    }

    #[test]
    fn env_pairs() {
        let e = parse(&["template", "push", "t", "f.wasm", "--env", "NOPE"]).expect_err("not K=V");
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
    }

    #[test]
    fn template_push_encodes_env_in_the_query() {
        let c = call(&[
            "template",
            "push",
            "counter",
            "x.wasm",
            "--env",
            "K=V",
            "--env",
            "GREETING=hi there&x",
        ]);
        assert_eq!(c.method, Method::PUT);
        assert_eq!(
            c.path,
            "/v1/templates/counter?env=K%3DV&env=GREETING%3Dhi%20there%26x"
        );
        assert_eq!(c.body, Body::Wasm(PathBuf::from("x.wasm")));
        assert_eq!(c.timeout, None);
        assert_eq!(
            call(&["template", "push", "counter", "x.wasm"]).path,
            "/v1/templates/counter"
        );
        let twice = parse(&[
            "template", "push", "c", "x.wasm", "--env", "K=1", "--env", "K=2",
        ])
        .expect("parses");
        let e = plan(twice).expect_err("duplicate env");
        assert_eq!(e.to_string(), "template push c: --env K given twice");
    }

    #[test]
    fn resume_flags_are_mutually_exclusive() {
        let e = parse(&[
            "actor",
            "resume",
            "c1",
            "--from-snapshot",
            "3",
            "--from-template",
        ])
        .expect_err("conflict");
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
        assert_eq!(call(&["actor", "resume", "c1"]).body, Body::Empty);
        assert_eq!(
            call(&["actor", "resume", "c1", "--from-snapshot", "3"]).body,
            Body::Json(serde_json::json!({"from_snapshot": 3}))
        );
        assert_eq!(
            call(&["actor", "resume", "c1", "--from-template"]).body,
            Body::Json(serde_json::json!({"from_template": true}))
        );
        let e =
            parse(&["actor", "resume", "c1", "--from-snapshot", "x"]).expect_err("not a number");
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
    }

    #[test]
    fn client_options_on_every_verb() {
        let c = call(&[
            "actor",
            "get",
            "c1",
            "-o",
            "json",
            "--admin",
            "http://10.0.0.1:9",
            "--admin-token",
            "t",
        ]);
        assert_eq!(c.client.output, OutputFormat::Json);
        assert_eq!(c.client.admin, "http://10.0.0.1:9");
        assert_eq!(c.client.admin_token.as_deref(), Some("t"));
        assert_eq!(
            (c.method, c.path.as_str(), c.timeout),
            (Method::GET, "/v1/actors/c1", Some(READ_TIMEOUT))
        );
        for verb in [
            &["template", "list"][..],
            &["template", "get", "t"],
            &["template", "delete", "t"],
            &["actor", "create", "a", "--template", "t"],
            &["actor", "list"],
            &["actor", "pause", "a"],
            &["actor", "checkpoint", "a"],
            &["actor", "delete", "a"],
            &["actor", "migrate", "a", "--to", "worker-2"],
            &["worker", "list"],
            &["worker", "drain", "worker-1"],
            &["worker", "undrain", "worker-1"],
            &["rebalance"],
            &["gc"],
        ] {
            let args: Vec<&str> = verb.iter().copied().chain(["--output", "json"]).collect();
            assert_eq!(call(&args).client.output, OutputFormat::Json, "{verb:?}");
        }
        let e = parse(&["actor", "list", "-o", "yaml"]).expect_err("unknown format");
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
    }

    #[test]
    fn routes_and_bodies() {
        let cases: [(&[&str], Method, &str); 11] = [
            (
                &["actor", "create", "c1", "--template", "counter"],
                Method::POST,
                "/v1/actors",
            ),
            (
                &["actor", "pause", "c1"],
                Method::POST,
                "/v1/actors/c1/pause",
            ),
            (
                &["actor", "checkpoint", "c1"],
                Method::POST,
                "/v1/actors/c1/checkpoint",
            ),
            (&["actor", "delete", "c1"], Method::DELETE, "/v1/actors/c1"),
            (
                &["actor", "migrate", "c1", "--to", "w2"],
                Method::POST,
                "/v1/actors/c1/migrate",
            ),
            (
                &["actor", "get", "a/pause"],
                Method::GET,
                "/v1/actors/a%2Fpause",
            ),
            (
                &["worker", "drain", "worker-1"],
                Method::POST,
                "/v1/workers/worker-1/drain",
            ),
            (
                &["worker", "undrain", "worker-1"],
                Method::POST,
                "/v1/workers/worker-1/undrain",
            ),
            (
                &["template", "delete", "counter"],
                Method::DELETE,
                "/v1/templates/counter",
            ),
            (&["rebalance"], Method::POST, "/v1/rebalance"),
            (&["gc"], Method::POST, "/v1/gc"),
        ];
        for (args, method, path) in cases {
            let c = call(args);
            assert_eq!((&c.method, c.path.as_str()), (&method, path), "{args:?}");
        }
        assert_eq!(
            call(&["actor", "create", "c1", "--template", "counter"]).body,
            Body::Json(serde_json::json!({"name": "c1", "template": "counter"}))
        );
        assert_eq!(
            call(&["actor", "migrate", "c1", "--to", "w2"]).body,
            Body::Json(serde_json::json!({"to": "w2"}))
        );
        assert_eq!(call(&["actor", "pause", "c1"]).timeout, None);
        assert_eq!(
            parse(&["actor", "create", "c1"])
                .expect_err("no template")
                .kind(),
            ErrorKind::MissingRequiredArgument
        );
    }

    #[test]
    fn rendering() {
        let reply = |status: u16, body: &str| Reply {
            status: StatusCode::from_u16(status).expect("status"),
            body: Bytes::from(body.to_owned()),
        };
        let delete = call(&["actor", "delete", "c1"]);
        assert_eq!(
            render(&delete, &reply(204, "")).expect("render"),
            "actor c1 deleted\n"
        );
        let delete_json = call(&["template", "delete", "counter", "-o", "json"]);
        assert_eq!(
            render(&delete_json, &reply(204, "")).expect("render"),
            "{}\n"
        );
        let get = call(&["actor", "get", "c1", "-o", "json"]);
        assert_eq!(
            render(&get, &reply(200, r#"{"name":"c1","epoch":1}"#)).expect("render"),
            "{\n  \"name\": \"c1\",\n  \"epoch\": 1\n}\n"
        );
        let push = call(&["template", "push", "counter", "c.wasm"]);
        let body = r#"{"name":"counter","digest":"ab","bytes":10,"env":{},"actors":0}"#;
        assert!(
            render(&push, &reply(201, body))
                .expect("render")
                .starts_with("template counter created\nname:")
        );
        assert!(
            render(&push, &reply(200, body))
                .expect("render")
                .starts_with("template counter unchanged")
        );
        assert!(render(&get, &reply(200, "<html>")).is_err());
    }

    #[tokio::test]
    async fn missing_module_file_is_named() {
        let e = read_module(&PathBuf::from("/nonexistent/counter.wasm"))
            .await
            .expect_err("missing");
        assert!(
            format!("{e:#}").starts_with("cannot read /nonexistent/counter.wasm: "),
            "{e:#}"
        );
        let dir = std::env::temp_dir();
        let e = read_module(&dir).await.expect_err("a directory");
        assert!(e.to_string().contains("is a directory"), "{e}");
    }
}
