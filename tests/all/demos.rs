//! The demo actors survive capture → restore into a fresh engine: the
//! counter keeps its count and stack pointer, the key-value store keeps a
//! multi-megabyte memory byte for byte.

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::snapshot;
use stasis_host_api::Response;
use stasis_test_util::data::random_bytes;
use stasis_test_util::engine::{self, load, request};

use crate::support::STASIS;

fn new_engine() -> Arc<StasisEngine> {
    engine::engine(Limits::default())
}

async fn call(inst: &mut ActorInstance, req: stasis_host_api::Request) -> Response {
    inst.call(&req).await.expect("guest call")
}

/// Verifies and restores `bytes` into a new engine with a new module cache.
async fn restore_fresh(
    wasm: &[u8],
    bytes: &[u8],
    worker: &str,
) -> (Arc<StasisEngine>, ActorInstance) {
    let engine = new_engine();
    let template = load(&engine, wasm);
    let config = InstanceConfig::new("demo", worker, Vec::new());
    let inst = engine::restore(&engine, template, bytes, config).await;
    (engine, inst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_count_and_stack_pointer_survive() {
    let wasm = STASIS.demo_wasm("counter");
    let engine = new_engine();
    let template = load(&engine, &wasm);
    // Rust's `__stack_pointer` is the counter's only mutable defined global.
    assert_eq!(
        template.info.globals.len(),
        1,
        "{:?}",
        template.info.globals
    );
    let config = InstanceConfig::new("demo", "worker-1", Vec::new());
    let mut inst = ActorInstance::spawn(&engine, template, config)
        .await
        .unwrap();
    for n in 1..=5 {
        let r = call(&mut inst, request("POST", "/", Vec::new())).await;
        assert_eq!(r.status, 200);
        let body = format!("hello from: worker-1 | preserved memory count: {n}\n");
        assert_eq!(String::from_utf8(r.body).unwrap(), body);
    }
    let globals = inst.global_values();
    let Some(wasmtime::Val::I32(sp)) = globals.first().cloned() else {
        panic!("stack pointer is not an i32: {globals:?}");
    };
    assert!(sp > 0, "stack pointer {sp}");
    let clock = inst.clock_ns();
    let (bytes, _) = snapshot::capture(&mut inst).unwrap();
    drop(inst);
    drop(engine);

    let (_engine, mut restored) = restore_fresh(&wasm, &bytes, "worker-2").await;
    // Between calls Rust's stack pointer is back at its initial value, so
    // a restore that forgot the global would pass this check too; the WAT
    // tests in `core/tests/all/capture_restore.rs` cover global restore.
    let header = snapshot::verify_header(&bytes).unwrap();
    assert_eq!(header.globals.len(), 1);
    assert_eq!(header.globals[0].bits, u128::from(sp as u32));
    match restored.global_values().as_slice() {
        [wasmtime::Val::I32(v)] => assert_eq!(*v, sp, "stack pointer changed"),
        other => panic!("globals after restore: {other:?}"),
    }
    assert!(
        restored.clock_ns() >= clock,
        "the virtual clock went backwards"
    );
    let r = call(&mut restored, request("POST", "/", Vec::new())).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        "hello from: worker-2 | preserved memory count: 6\n"
    );
}

/// 100 KiB of distinct pseudo-random bytes for key `i`.
fn value(i: u64) -> Vec<u8> {
    random_bytes(i, 100 * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_memory_is_byte_identical_after_restore() {
    let wasm = STASIS.demo_wasm("kv");
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let config = InstanceConfig::new("demo", "worker-1", Vec::new());
    let mut inst = ActorInstance::spawn(&engine, template, config)
        .await
        .unwrap();
    let keys = 100u64;
    for i in 0..keys {
        let r = call(&mut inst, request("PUT", &format!("/key-{i}"), value(i))).await;
        assert_eq!(r.status, 201, "PUT key-{i}");
    }
    let memory = inst.memory_data(0).unwrap();
    assert!(
        memory.len() >= 8 << 20,
        "memory is only {} bytes",
        memory.len()
    );
    let digest = hex::encode(Sha256::digest(memory));
    let size = memory.len();
    let (bytes, stats) = snapshot::capture(&mut inst).unwrap();
    assert!(stats.stored_pages * 4096 >= keys * 100 * 1024);
    drop(inst);
    drop(engine);

    let (_engine, mut restored) = restore_fresh(&wasm, &bytes, "worker-2").await;
    let memory = restored.memory_data(0).unwrap();
    assert_eq!(memory.len(), size);
    assert_eq!(hex::encode(Sha256::digest(memory)), digest);
    for i in 0..keys {
        let r = call(
            &mut restored,
            request("GET", &format!("/key-{i}"), Vec::new()),
        )
        .await;
        assert_eq!(r.status, 200, "GET key-{i}");
        assert!(r.body == value(i), "key-{i} changed");
    }
    let r = call(&mut restored, request("GET", "/missing", Vec::new())).await;
    assert_eq!(r.status, 404);
}
