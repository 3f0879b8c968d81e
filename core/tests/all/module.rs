//! Module validation and rewrite: refused features are named, ABI and
//! malformed-module errors.

use stasis_core::engine::StasisEngine;
use stasis_core::module::ModuleError;

use crate::support::*;

// ---------------------------------------------------------------------------
// 5. Refused modules name the feature
// ---------------------------------------------------------------------------

fn assert_refused(engine: &StasisEngine, name: &str, wasm: &[u8], needles: &[&str]) {
    let err = load_err(engine, wasm);
    let text = err.to_string();
    assert!(
        matches!(err, ModuleError::Refused(_)),
        "{name}: not Refused: {err:?}"
    );
    for needle in needles {
        assert!(
            text.contains(needle),
            "{name}: {text:?} does not name {needle:?}"
        );
    }
}

#[test]
fn refused_features_are_named() {
    let engine = new_engine();
    let table = r#"(table $t 2 funcref) (func $f) (elem $e func $f)"#;
    let ops: [(&str, &str); 7] = [
        (
            "table.grow",
            "(drop (table.grow $t (ref.null func) (i32.const 1)))",
        ),
        ("table.set", "(table.set $t (i32.const 0) (ref.null func))"),
        (
            "table.fill",
            "(table.fill $t (i32.const 0) (ref.null func) (i32.const 1))",
        ),
        (
            "table.copy",
            "(table.copy $t $t (i32.const 0) (i32.const 1) (i32.const 1))",
        ),
        (
            "table.init",
            "(table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1))",
        ),
        ("elem.drop", "(elem.drop $e)"),
        ("data.drop", "(data.drop $d)"),
    ];
    for (op, code) in ops {
        let fields = format!(r#"{BASE} {table} (data $d "x")"#);
        assert_refused(&engine, op, &guest(&fields, code), &[&format!("`{op}`")]);
    }

    let abi = r#"(@custom "stasis-abi" "\01\00\00\00")"#;
    let resp = r#"(data (i32.const 16) "\c8\00\00")"#;
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "shared memory",
            format!("{abi} (memory 1 1 shared) {resp}"),
            vec!["shared memory"],
        ),
        (
            "memory64",
            format!(r#"{abi} (memory i64 1) (data (i64.const 16) "\c8\00\00")"#),
            vec!["memory64"],
        ),
        (
            "imported memory",
            format!(r#"(import "wasi_snapshot_preview1" "mem" (memory 1)) {abi} {resp}"#),
            vec!["imported memory", "`mem`"],
        ),
        (
            "imported table",
            format!(r#"(import "wasi_snapshot_preview1" "tab" (table 1 funcref)) {BASE}"#),
            vec!["imported table", "`tab`"],
        ),
        (
            "imported global",
            format!(r#"(import "wasi_snapshot_preview1" "g" (global i32)) {BASE}"#),
            vec!["imported global", "`g`"],
        ),
        (
            "non-WASI import",
            format!(r#"(import "env" "log" (func)) {BASE}"#),
            vec!["`env`.`log`", "only WASI"],
        ),
        (
            "mutable externref global",
            format!("{BASE} (global (mut externref) (ref.null extern))"),
            vec!["mutable reference-typed global"],
        ),
        (
            "mutable funcref global",
            format!("{BASE} (global (mut funcref) (ref.null func))"),
            vec!["mutable reference-typed global"],
        ),
        (
            "reserved export",
            format!(r#"{BASE} (global (export "__stasis_global_0") i32 (i32.const 0))"#),
            vec!["`__stasis_global_0`", "reserved prefix"],
        ),
        (
            "short ABI section",
            r#"(@custom "stasis-abi" "\01\00\00") (memory 1)"#.to_owned(),
            vec!["stasis-abi", "4 bytes"],
        ),
        ("no memory", abi.to_owned(), vec!["no linear memory"]),
        (
            "WASI without a memory export",
            format!(
                r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))) {abi} (memory 1) {resp}"#
            ),
            vec!["`memory` export"],
        ),
    ];
    for (name, fields, needles) in cases {
        assert_refused(&engine, name, &guest(&fields, ""), &needles);
    }
    // An immutable reference-typed global is fine (its value cannot change).
    let ok = guest(&format!("{BASE} (global funcref (ref.null func))"), "");
    load(&engine, &ok);
}

#[test]
fn abi_and_malformed_errors() {
    let engine = new_engine();
    let resp = r#"(memory 1) (data (i32.const 16) "\c8\00\00")"#;

    let err = load_err(&engine, &guest(resp, ""));
    assert!(matches!(err, ModuleError::MissingAbi), "{err:?}");
    assert!(err.to_string().contains("stasis-abi"), "{err}");

    let v3 = format!(r#"(@custom "stasis-abi" "\03\00\00\00") {resp}"#);
    let err = load_err(&engine, &guest(&v3, ""));
    assert!(
        matches!(err, ModuleError::AbiVersion { found: 3 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("ABI version 3"), "{err}");

    let no_handle = wat::parse_str(format!("(module {BASE} {ALLOC})")).unwrap();
    let err = load_err(&engine, &no_handle);
    assert!(
        matches!(
            err,
            ModuleError::Export {
                name: "stasis_handle",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("stasis_handle"), "{err}");

    let bad_sig = wat::parse_str(format!(
        r#"(module {BASE} {ALLOC}
          (func (export "stasis_handle") (param i32 i32) (result i32) (i32.const 0)))"#
    ))
    .unwrap();
    let err = load_err(&engine, &bad_sig);
    assert!(
        matches!(
            err,
            ModuleError::Export {
                name: "stasis_handle",
                ..
            }
        ),
        "{err:?}"
    );

    let bad_hook = guest(
        &format!(r#"{BASE} (func (export "stasis_init") (param i32))"#),
        "",
    );
    let err = load_err(&engine, &bad_hook);
    assert!(
        matches!(
            err,
            ModuleError::Export {
                name: "stasis_init",
                ..
            }
        ),
        "{err:?}"
    );

    let valid = guest(BASE, "");
    let mut truncated = valid.clone();
    truncated.truncate(valid.len() - 3);
    // Bytes that are not Wasm at all say so, in one line.
    for (name, bytes) in [
        ("empty", Vec::new()),
        ("garbage", b"definitely not wasm".to_vec()),
        ("short", b"\0as".to_vec()),
        ("component", b"\0asm\x0d\0\x01\0".to_vec()),
    ] {
        let err = load_err(&engine, &bytes);
        assert!(matches!(err, ModuleError::NotWasm(_)), "{name}: {err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("not a WebAssembly module: "),
            "{name}: {text}"
        );
        assert_eq!(text.lines().count(), 1, "{name}: {text}");
    }
    for (name, bytes) in [
        ("bad section", b"\0asm\x01\0\0\0\xff\x05garbage".to_vec()),
        ("truncated", truncated),
    ] {
        let err = load_err(&engine, &bytes);
        assert!(matches!(err, ModuleError::Malformed(_)), "{name}: {err:?}");
        assert!(
            err.to_string().starts_with("invalid wasm module"),
            "{name}: {err}"
        );
        assert_eq!(err.to_string().lines().count(), 1, "{name}: {err}");
    }
    // The base module itself is accepted: the failures above are real.
    load(&engine, &valid);
}

// ---------------------------------------------------------------------------
// ABI 2: the `stasis` host functions
// ---------------------------------------------------------------------------

const ABI2: &str = r#"
  (@custom "stasis-abi" "\02\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
"#;

#[test]
fn host_function_imports_need_abi_2_and_their_exact_signatures() {
    let engine = new_engine();
    let self_name = r#"(import "stasis" "self_name" (func (result i64)))"#;
    load(&engine, &guest(&format!("{self_name} {ABI2}"), ""));
    // Every function of the ABI links with its declared signature.
    let all = stasis_host_api::imports::FUNCTIONS
        .iter()
        .map(|s| {
            let ty = |types: &[stasis_host_api::imports::ValType]| {
                types
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            format!(
                r#"(import "stasis" "{}" (func (param {}) (result {})))"#,
                s.name,
                ty(s.params),
                ty(s.results)
            )
        })
        .collect::<String>();
    load(&engine, &guest(&format!("{all} {ABI2}"), ""));

    let cases = [
        (
            "version 1 importing a host function",
            format!("{self_name} {BASE}"),
            vec!["`stasis`.`self_name`", "ABI version 2"],
        ),
        (
            "unknown host function",
            format!(r#"(import "stasis" "launch" (func)) {ABI2}"#),
            vec!["`stasis`.`launch`", "no such host function", "call"],
        ),
        (
            "wrong signature",
            format!(r#"(import "stasis" "call" (func (param i32 i32) (result i64))) {ABI2}"#),
            vec!["`stasis`.`call`", "call(i32, i32, i32, i32) -> i64"],
        ),
        (
            "other modules stay refused",
            format!(r#"(import "env" "log" (func)) {ABI2}"#),
            vec!["`env`.`log`", "only WASI"],
        ),
    ];
    for (name, fields, needles) in cases {
        assert_refused(&engine, name, &guest(&fields, ""), &needles);
    }
}

#[tokio::test]
async fn host_functions_hold_results_and_report_errors() {
    let engine = new_engine();
    // self_name's length, then its bytes at 2048 (the config's actor name
    // starts with its first byte there); call without services fails with
    // NotEnabled (-8) and last_error explains it.
    let fields = format!(
        r#"(import "stasis" "self_name" (func $self_name (result i64)))
           (import "stasis" "take_result" (func $take (param i32 i32) (result i32)))
           (import "stasis" "call" (func $call (param i32 i32 i32 i32) (result i64)))
           (import "stasis" "last_error" (func $last_error (result i64)))
           {ABI2}
           (global $len (mut i32) (i32.const 0))"#
    );
    let handler = r#"
        (global.set $len (i32.wrap_i64 (call $self_name)))
        (if (i32.ne (call $take (i32.const 2048) (global.get $len)) (i32.const 0)) (then unreachable))
        (if (i32.ne (call $take (i32.const 2048) (global.get $len)) (i32.const -1)) (then unreachable))
        (if (i64.ne (call $call (i32.const 0) (i32.const 1) (i32.const 16) (i32.const 3)) (i64.const -6)) (then unreachable))
        (if (i64.ne (call $call (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)) (i64.const -6)) (then unreachable))
        (if (i64.le_s (call $last_error) (i64.const 0)) (then unreachable))
        (if (i64.ne (call $call (i32.const 0) (i32.const 70000) (i32.const 0) (i32.const 1)) (i64.const -6)) (then unreachable))
    "#;
    let template = load(&engine, &guest(&fields, handler));
    let cfg = config();
    let name = cfg.context.actor.clone();
    let mut actor = stasis_core::instance::ActorInstance::spawn(&engine, template, cfg)
        .await
        .expect("spawn");
    let response = actor.call(&post()).await.expect("handled");
    assert_eq!(response.status, 200);
    let memory = actor.memory_data(0).expect("memory 0");
    assert_eq!(&memory[2048..2048 + name.len()], name.as_bytes());
}

#[tokio::test]
async fn calls_without_services_are_not_enabled() {
    let engine = new_engine();
    // A valid encoded request at 32: method "GET", uri "/", no headers, no
    // body, empty context; a call to actor "x" (at 0) answers NotEnabled.
    let fields = format!(
        r#"(import "stasis" "call" (func $call (param i32 i32 i32 i32) (result i64)))
           {ABI2}
           (data (i32.const 0) "x")
           (data (i32.const 32) "\03GET\01/\00\00\00\00")"#
    );
    let handler = r#"
        (if (i64.ne (call $call (i32.const 0) (i32.const 1) (i32.const 32) (i32.const 10)) (i64.const -8)) (then unreachable))
    "#;
    let template = load(&engine, &guest(&fields, handler));
    let mut actor = stasis_core::instance::ActorInstance::spawn(&engine, template, config())
        .await
        .expect("spawn");
    assert_eq!(actor.call(&post()).await.expect("handled").status, 200);
}
