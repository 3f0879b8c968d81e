//! Shared helpers of the snapshot-core tests: WAT guest builders, engine
//! and template setup, guest calls, and snapshot patching.

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::module::{ModuleCache, ModuleError, Template};
use stasis_core::snapshot::{self, Header};
use stasis_host_api::{Request, Response};
use wasmtime::Val;

/// The ABI custom section, a one-page memory and a 3-byte bincode
/// `Response { status: 200, headers: [], body: [] }` at offset 16.
pub(crate) const BASE: &str = r#"
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
"#;

/// `stasis_alloc` (a fixed buffer at 1024).
pub(crate) const ALLOC: &str = r#"
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
"#;

/// `(16 << 32) | 3`: the response at offset 16.
pub(crate) const RESPONSE_16: &str = "(i64.const 0x1000000003)";

/// A module of `fields` plus `stasis_alloc` and a `stasis_handle` running
/// `handler` and answering the response at offset 16.
pub(crate) fn guest(fields: &str, handler: &str) -> Vec<u8> {
    let text = format!(
        r#"(module
  {fields}
  {ALLOC}
  (func (export "stasis_handle") (param i32 i32) (result i64)
    {handler}
    {RESPONSE_16}))"#
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("bad test WAT: {e}\n{text}"))
}

pub(crate) fn new_engine() -> Arc<StasisEngine> {
    StasisEngine::new(Limits::default()).expect("engine")
}

/// A fresh cache (no shared compiled code) on `engine`.
pub(crate) fn load(engine: &StasisEngine, wasm: &[u8]) -> Arc<Template> {
    ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None)
        .load(wasm)
        .expect("template loads")
}

pub(crate) fn load_err(engine: &StasisEngine, wasm: &[u8]) -> ModuleError {
    match ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None).load(wasm) {
        Ok(_) => panic!("module was accepted"),
        Err(e) => e,
    }
}

pub(crate) fn config() -> InstanceConfig {
    InstanceConfig::new("actor", "worker-1", Vec::new())
}

pub(crate) fn post() -> Request {
    Request {
        method: "POST".into(),
        uri: "/".into(),
        ..Default::default()
    }
}

pub(crate) async fn call_ok(inst: &mut ActorInstance) -> Response {
    let response = inst.call(&post()).await.expect("guest call");
    assert_eq!(response.status, 200);
    assert!(response.headers.is_empty() && response.body.is_empty());
    response
}

/// A fresh engine, cache and template for `wasm`, and `bytes` restored
/// into a fresh instance of it.
pub(crate) async fn restore_fresh(
    wasm: &[u8],
    bytes: &[u8],
    config: InstanceConfig,
) -> (Arc<StasisEngine>, ActorInstance) {
    let engine = new_engine();
    let template = load(&engine, wasm);
    let verified =
        snapshot::verify(bytes, &template, engine.limits().max_memory).expect("snapshot verifies");
    let inst = snapshot::restore(&engine, template, config, &verified)
        .await
        .expect("restore");
    (engine, inst)
}

pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Sets the CRC32C trailer of a (patched) snapshot.
pub(crate) fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..n]);
    bytes[n..].copy_from_slice(&crc.to_le_bytes());
}

/// Replaces the header of `bytes` by `header` (same encoded length: the
/// header uses fixed-int encoding) and reseals the file.
pub(crate) fn rewrite_header(bytes: &[u8], header: &Header) -> Vec<u8> {
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let encoded = snapshot::encode_header(header).unwrap();
    assert_eq!(encoded.len(), len, "fixed-int header changed length");
    let mut out = bytes.to_vec();
    out[24..24 + len].copy_from_slice(&encoded);
    reseal(&mut out);
    out
}

pub(crate) fn val_bits(v: &Val) -> (&'static str, u128) {
    match v {
        Val::I32(x) => ("i32", u128::from(*x as u32)),
        Val::I64(x) => ("i64", u128::from(*x as u64)),
        Val::F32(x) => ("f32", u128::from(*x)),
        Val::F64(x) => ("f64", u128::from(*x)),
        Val::V128(x) => ("v128", x.as_u128()),
        other => panic!("unexpected global value {other:?}"),
    }
}

/// A small guest with globals, a page at 0 and a page at 8192.
pub(crate) fn small_guest(max_pages: Option<u32>) -> Vec<u8> {
    let memory = match max_pages {
        Some(max) => format!("(memory 1 {max})"),
        None => "(memory 1)".to_owned(),
    };
    let fields = format!(
        r#"(@custom "stasis-abi" "\01\00\00\00")
  {memory}
  (data (i32.const 16) "\c8\00\00")
  (global $a (mut i32) (i32.const 0))
  (global $b (mut i64) (i64.const 0))"#
    );
    guest(
        &fields,
        r#"(global.set $a (i32.const 41))
           (global.set $b (i64.const -1))
           (i32.store (i32.const 8192) (i32.const 0xdeadbeef))"#,
    )
}

pub(crate) async fn small_snapshot(wasm: &[u8]) -> (Arc<StasisEngine>, Arc<Template>, Vec<u8>) {
    let engine = new_engine();
    let template = load(&engine, wasm);
    let mut inst = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut inst).await;
    let (bytes, _) = snapshot::capture(&mut inst).unwrap();
    // As version 1 (flattened off the module's image): the layout the
    // format tests pin, pages 0 and 2 stored.
    let max = engine.limits().max_memory;
    let verified = snapshot::verify(&bytes[..], &template, max).unwrap();
    let chain = snapshot::VerifiedChain::new(vec![(0, verified)]).unwrap();
    let bytes = snapshot::flatten(&chain).unwrap();
    (engine, template, bytes)
}
