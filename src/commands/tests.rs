//! Unit tests of the client verbs: parsing, the request each verb plans,
//! and rendering.

use std::path::PathBuf;

use bytes::Bytes;
use clap::{CommandFactory, Parser, error::ErrorKind};
use hyper::{Method, StatusCode};

use super::plan::*;
use super::render::*;
use crate::client::Reply;
use crate::verbs::{ClientCommand, OutputFormat};

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
fn fork_posts_the_new_name_and_the_snapshot() {
    let plain = call(&["actor", "fork", "c1", "c2"]);
    assert_eq!(plain.path, "/v1/actors/c1/fork");
    assert_eq!(plain.method, Method::POST);
    assert_eq!(plain.body, Body::Json(serde_json::json!({"name": "c2"})));
    assert_eq!(
        call(&["actor", "fork", "c1", "c2", "--from-snapshot", "4"]).body,
        Body::Json(serde_json::json!({"name": "c2", "from_snapshot": 4}))
    );
    parse(&["actor", "fork", "c1"]).expect_err("NEW is required");
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
    let e = parse(&["actor", "resume", "c1", "--from-snapshot", "x"]).expect_err("not a number");
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
        next_page: None,
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
    let second = r#"{"name":"counter","version":2,"digest":"cd","bytes":10,"env":{},"actors":1}"#;
    assert!(
        render(&push, &reply(201, second))
            .expect("render")
            .starts_with("template counter version 2 pushed\nname:")
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
