//! Core snapshot guarantees, checked against hand-written WAT guests: exact
//! global bits, run-once start/init code, data segments, sparse large
//! memories, refused module features, corrupt snapshot files, the
//! snapshot store and the pooling allocator's slots.

use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};
use stasis_host_api::{Request, Response};
use stasis_runtime::engine::{Limits, StasisEngine};
use stasis_runtime::instance::{ActorInstance, InstanceConfig};
use stasis_runtime::module::{ModuleCache, ModuleError, Template};
use stasis_runtime::snapshot::{
    self, FORMAT_VERSION, Header, MAGIC, PAGE_SIZE, RestoreError, SnapshotError,
};
use stasis_runtime::store::{SnapshotStore, StoreError};
use wasmtime::Val;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The ABI custom section, a one-page memory and a 3-byte bincode
/// `Response { status: 200, headers: [], body: [] }` at offset 16.
const BASE: &str = r#"
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
"#;

/// `stasis_alloc` (a fixed buffer at 1024).
const ALLOC: &str = r#"
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
"#;

/// `(16 << 32) | 3`: the response at offset 16.
const RESPONSE_16: &str = "(i64.const 0x1000000003)";

/// A module of `fields` plus `stasis_alloc` and a `stasis_handle` running
/// `handler` and answering the response at offset 16.
fn guest(fields: &str, handler: &str) -> Vec<u8> {
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

fn new_engine() -> Arc<StasisEngine> {
    StasisEngine::new(Limits::default()).expect("engine")
}

/// A fresh cache (no shared compiled code) on `engine`.
fn load(engine: &StasisEngine, wasm: &[u8]) -> Arc<Template> {
    ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None)
        .load(wasm)
        .expect("template loads")
}

fn load_err(engine: &StasisEngine, wasm: &[u8]) -> ModuleError {
    match ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None).load(wasm) {
        Ok(_) => panic!("module was accepted"),
        Err(e) => e,
    }
}

fn config() -> InstanceConfig {
    InstanceConfig::new("actor", "worker-1", Vec::new())
}

fn post() -> Request {
    Request {
        method: "POST".into(),
        uri: "/".into(),
        ..Default::default()
    }
}

async fn call_ok(inst: &mut ActorInstance) -> Response {
    let response = inst.call(&post()).await.expect("guest call");
    assert_eq!(response.status, 200);
    assert!(response.headers.is_empty() && response.body.is_empty());
    response
}

/// A fresh engine, cache and template for `wasm`, and `bytes` restored
/// into a fresh instance of it.
async fn restore_fresh(
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

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Sets the CRC32C trailer of a (patched) snapshot.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..n]);
    bytes[n..].copy_from_slice(&crc.to_le_bytes());
}

fn header_config() -> impl bincode::config::Config {
    bincode::config::standard().with_fixed_int_encoding()
}

/// Replaces the header of `bytes` by `header` (same encoded length: the
/// header uses fixed-int encoding) and reseals the file.
fn rewrite_header(bytes: &[u8], header: &Header) -> Vec<u8> {
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let encoded = bincode::serde::encode_to_vec(header, header_config()).unwrap();
    assert_eq!(encoded.len(), len, "fixed-int header changed length");
    let mut out = bytes.to_vec();
    out[24..24 + len].copy_from_slice(&encoded);
    reseal(&mut out);
    out
}

// ---------------------------------------------------------------------------
// 1. Globals keep their exact bits
// ---------------------------------------------------------------------------

const GLOBALS_FIELDS: &str = r#"
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
  (global $imm i32 (i32.const 7))
  (global $a (mut i32) (i32.const 0))
  (global $b (mut i64) (i64.const 0))
  (global $c (mut f32) (f32.const 0))
  (global $d (mut f64) (f64.const 0))
  (global $e (mut v128) (v128.const i64x2 0 0))
  (global $imm2 f64 (f64.const 1))
"#;

const GLOBALS_HANDLER: &str = r#"
    (global.set $a (i32.const 0x8badf00d))
    (global.set $b (i64.const 0xfedcba9876543210))
    (global.set $c (f32.reinterpret_i32 (i32.const 0x7fa00001)))
    (global.set $d (f64.reinterpret_i64 (i64.const 0x7ff4000000000001)))
    (global.set $e (v128.const i32x4 0x7fa00001 0xffc00000 0x00000001 0x80000000))
"#;

fn val_bits(v: &Val) -> (&'static str, u128) {
    match v {
        Val::I32(x) => ("i32", u128::from(*x as u32)),
        Val::I64(x) => ("i64", u128::from(*x as u64)),
        Val::F32(x) => ("f32", u128::from(*x)),
        Val::F64(x) => ("f64", u128::from(*x)),
        Val::V128(x) => ("v128", x.as_u128()),
        other => panic!("unexpected global value {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn globals_keep_exact_bits_including_nan_payloads() {
    let wasm = guest(GLOBALS_FIELDS, GLOBALS_HANDLER);
    let engine = new_engine();
    let template = load(&engine, &wasm);
    // Only the mutable globals are tracked, with their real indices.
    let indices: Vec<u32> = template.info.globals.iter().map(|g| g.index).collect();
    assert_eq!(indices, [1, 2, 3, 4, 5]);

    let mut inst = ActorInstance::spawn(&engine, template, config())
        .await
        .unwrap();
    let zero: Vec<_> = inst.global_values().iter().map(val_bits).collect();
    assert!(zero.iter().all(|(_, b)| *b == 0), "{zero:?}");
    call_ok(&mut inst).await;
    let v128 = 0x8000_0000_0000_0001_ffc0_0000_7fa0_0001u128;
    let expected = vec![
        ("i32", 0x8bad_f00d),
        ("i64", 0xfedc_ba98_7654_3210),
        ("f32", 0x7fa0_0001),
        ("f64", 0x7ff4_0000_0000_0001),
        ("v128", v128),
    ];
    let before: Vec<_> = inst.global_values().iter().map(val_bits).collect();
    assert_eq!(
        before, expected,
        "the guest did not set the globals as written"
    );

    let (bytes, _) = snapshot::capture(&mut inst).unwrap();
    drop(inst);
    drop(engine);
    let header = snapshot::verify_header(&bytes).unwrap();
    let in_file: Vec<u128> = header.globals.iter().map(|g| g.bits).collect();
    assert_eq!(in_file, expected.iter().map(|e| e.1).collect::<Vec<_>>());

    let (_engine, mut restored) = restore_fresh(&wasm, &bytes, config()).await;
    let after: Vec<_> = restored.global_values().iter().map(val_bits).collect();
    assert_eq!(after, expected);
    // And once more through a second capture of the restored instance.
    let (again, _) = snapshot::capture(&mut restored).unwrap();
    let (_engine2, mut twice) = restore_fresh(&wasm, &again, config()).await;
    let after2: Vec<_> = twice.global_values().iter().map(val_bits).collect();
    assert_eq!(after2, expected);
}

// ---------------------------------------------------------------------------
// 2. Start function and `_initialize` run exactly once
// ---------------------------------------------------------------------------

const ONCE_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (@custom "stasis-abi" "\01\00\00\00")
  (memory (export "memory") 1)
  (global $inits (mut i32) (i32.const 0))
  (data (i32.const 16) "\c8\00\00")
  (data (i32.const 300) "start\n")
  (data (i32.const 320) "init\n")
  (data (i32.const 340) "stasis_init\n")
  (data (i32.const 360) "handle\n")
  ;; counters: 100 start, 104 stasis_init, 108 handle
  (func $print (param $ptr i32) (param $len i32)
    (i32.store (i32.const 200) (local.get $ptr))
    (i32.store (i32.const 204) (local.get $len))
    (if (call $fd_write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 208))
      (then unreachable)))
  (func $bump (param $at i32)
    (i32.store (local.get $at) (i32.add (i32.load (local.get $at)) (i32.const 1))))
  (func $start
    (call $print (i32.const 300) (i32.const 6))
    (call $bump (i32.const 100)))
  (start $start)
  (func (export "_initialize")
    (call $print (i32.const 320) (i32.const 5))
    (global.set $inits (i32.add (global.get $inits) (i32.const 1))))
  (func (export "stasis_init")
    (call $print (i32.const 340) (i32.const 12))
    (call $bump (i32.const 104)))
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (call $print (i32.const 360) (i32.const 7))
    (call $bump (i32.const 108))
    (i64.const 0x1000000003)))"#;

fn tapped(tap: &Arc<Mutex<Vec<u8>>>) -> InstanceConfig {
    let mut c = config();
    c.stdout = c.stdout.clone().with_tap(tap.clone());
    c
}

fn counter_at(inst: &ActorInstance, at: usize) -> u32 {
    let mem = inst.memory_data(0).unwrap();
    u32::from_le_bytes(mem[at..at + 4].try_into().unwrap())
}

fn line_count(tap: &Arc<Mutex<Vec<u8>>>, line: &str) -> usize {
    let out = tap.lock().unwrap();
    String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| *l == line)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_and_initialize_run_exactly_once() {
    let wasm = wat::parse_str(ONCE_WAT).unwrap();
    let tap = Arc::new(Mutex::new(Vec::new()));
    let engine = new_engine();
    let template = load(&engine, &wasm);
    assert!(template.info.has_start);
    let mut inst = ActorInstance::spawn(&engine, template, tapped(&tap))
        .await
        .unwrap();
    // The output arrived: the tap is not blind.
    assert_eq!(line_count(&tap, "start"), 1);
    assert_eq!(line_count(&tap, "init"), 1);
    assert_eq!(line_count(&tap, "stasis_init"), 1);
    call_ok(&mut inst).await;

    let mut keep = vec![engine];
    for round in 0..2 {
        let (bytes, _) = snapshot::capture(&mut inst).unwrap();
        let (engine, restored) = restore_fresh(&wasm, &bytes, tapped(&tap)).await;
        keep.push(engine);
        inst = restored;
        call_ok(&mut inst).await;
        assert_eq!(line_count(&tap, "handle"), round + 2);
    }
    assert_eq!(line_count(&tap, "start"), 1, "start function re-ran");
    assert_eq!(line_count(&tap, "init"), 1, "_initialize re-ran");
    assert_eq!(line_count(&tap, "stasis_init"), 1, "stasis_init re-ran");
    assert_eq!(counter_at(&inst, 100), 1, "start counter");
    assert_eq!(counter_at(&inst, 104), 1, "stasis_init counter");
    assert_eq!(counter_at(&inst, 108), 3, "handle counter");
    assert_eq!(
        inst.global_values()
            .iter()
            .map(val_bits)
            .collect::<Vec<_>>(),
        [("i32", 1)]
    );
    let text = String::from_utf8(tap.lock().unwrap().clone()).unwrap();
    assert_eq!(text, "start\ninit\nstasis_init\nhandle\nhandle\nhandle\n");
}

// ---------------------------------------------------------------------------
// 3. A data-segment page zeroed before the snapshot stays zero
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeroed_data_segment_page_stays_zero_after_restore() {
    let fields = format!(
        r#"{BASE}
  (data (i32.const 8192) "\01\02\03\04\05\06\07\08")
  (data (i32.const 12288) "keep")"#
    );
    // Zero the whole 4 KiB page at 8192; the page at 12288 is left alone.
    let wasm = guest(
        &fields,
        "(memory.fill (i32.const 8192) (i32.const 0) (i32.const 4096))",
    );
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut inst = ActorInstance::spawn(&engine, template, config())
        .await
        .unwrap();
    assert_eq!(
        &inst.memory_data(0).unwrap()[8192..8200],
        b"\x01\x02\x03\x04\x05\x06\x07\x08"
    );
    call_ok(&mut inst).await;
    assert!(
        inst.memory_data(0).unwrap()[8192..12288]
            .iter()
            .all(|&b| b == 0)
    );
    let before = inst.memory_data(0).unwrap().to_vec();
    let (bytes, stats) = snapshot::capture(&mut inst).unwrap();
    // Pages 0 (response) and 3 (`keep`) are non-zero; page 2 is not stored.
    assert_eq!(stats.stored_pages, 2);
    // Each stored run sits at a 4 KiB-aligned file offset and holds exactly
    // the memory's bytes.
    let header = snapshot::verify_header(&bytes).unwrap();
    let runs: Vec<(u64, u64)> = header.memories[0]
        .runs
        .iter()
        .map(|r| (r.first_page, r.pages))
        .collect();
    assert_eq!(runs, [(0, 1), (3, 1)]);
    for run in &header.memories[0].runs {
        assert_eq!(run.file_offset % PAGE_SIZE as u64, 0);
        let (src, dst) = (
            run.file_offset as usize,
            run.first_page as usize * PAGE_SIZE,
        );
        let len = run.pages as usize * PAGE_SIZE;
        assert_eq!(bytes[src..src + len], before[dst..dst + len]);
    }

    let (_engine, restored) = restore_fresh(&wasm, &bytes, config()).await;
    let mem = restored.memory_data(0).unwrap();
    assert!(
        mem[8192..12288].iter().all(|&b| b == 0),
        "data segment came back"
    );
    assert_eq!(&mem[12288..12292], b"keep");
    assert_eq!(&mem[16..19], b"\xc8\x00\x00");
    assert_eq!(mem, &before[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_memory_of_a_multi_memory_module_round_trips() {
    let fields = r#"
  (@custom "stasis-abi" "\01\00\00\00")
  (memory $m0 1)
  (memory $m1 2 4)
  (data (memory $m0) (i32.const 16) "\c8\00\00")
  (data (memory $m1) (i32.const 70000) "second")"#;
    let handler = r#"
    (if (i32.ne (memory.grow $m1 (i32.const 1)) (i32.const 2)) (then unreachable))
    (memory.fill $m1 (i32.const 70000) (i32.const 0) (i32.const 6))
    (i32.store8 $m1 (i32.const 190000) (i32.const 9))
    (i32.store8 $m0 (i32.const 5000) (i32.const 8))"#;
    let wasm = guest(fields, handler);
    let engine = new_engine();
    let template = load(&engine, &wasm);
    assert_eq!(template.info.memories.len(), 2);
    let mut inst = ActorInstance::spawn(&engine, template, config())
        .await
        .unwrap();
    assert_eq!(&inst.memory_data(1).unwrap()[70000..70006], b"second");
    call_ok(&mut inst).await;
    let before: Vec<Vec<u8>> = (0..2)
        .map(|i| inst.memory_data(i).unwrap().to_vec())
        .collect();
    assert_eq!(before[1].len(), 3 * 65536);
    let (bytes, stats) = snapshot::capture(&mut inst).unwrap();
    assert_eq!(stats.memory_bytes, 4 * 65536);
    assert_eq!(stats.stored_pages, 3);

    let (_engine, restored) = restore_fresh(&wasm, &bytes, config()).await;
    for (i, expected) in before.iter().enumerate() {
        assert_eq!(
            restored.memory_data(i).unwrap(),
            &expected[..],
            "memory {i}"
        );
    }
    assert!(restored.memory_data(2).is_none());
}

// ---------------------------------------------------------------------------
// 4. A 64 MiB memory with 1 MiB of data gives a small snapshot
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_64_mib_memory_round_trips_in_a_small_snapshot() {
    let handler = r#"
    (if (i32.ne (memory.grow (i32.const 1023)) (i32.const 1)) (then unreachable))
    (memory.fill (i32.const 0x100000) (i32.const 0x5a) (i32.const 0x100000))
    (i32.store8 (i32.const 0x3ffffff) (i32.const 0x77))"#;
    let wasm = guest(BASE, handler);
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut inst = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut inst).await;
    let mem = inst.memory_data(0).unwrap();
    assert_eq!(mem.len(), 64 << 20);
    let digest = sha256(mem);
    let (bytes, stats) = snapshot::capture(&mut inst).unwrap();
    assert!(
        (bytes.len() as f64) < 1.1 * f64::from(1u32 << 20),
        "snapshot of {} bytes",
        bytes.len()
    );
    assert_eq!(stats.memory_bytes, 64 << 20);
    assert_eq!(stats.stored_pages, 256 + 2);
    assert_eq!(stats.file_bytes, bytes.len() as u64);

    // A host whose limit is below the snapshot's memory refuses it up front.
    assert!(matches!(
        snapshot::verify(&bytes, &template, 32 << 20),
        Err(SnapshotError::TooLarge(_))
    ));
    drop(inst);
    drop(engine);

    let (_engine, restored) = restore_fresh(&wasm, &bytes, config()).await;
    let mem = restored.memory_data(0).unwrap();
    assert_eq!(mem.len(), 64 << 20);
    assert_eq!(sha256(mem), digest);
    assert_eq!(mem[0x3ffffff], 0x77);
    assert!(mem[0x100000..0x200000].iter().all(|&b| b == 0x5a));
}

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

    let v2 = format!(r#"(@custom "stasis-abi" "\02\00\00\00") {resp}"#);
    let err = load_err(&engine, &guest(&v2, ""));
    assert!(
        matches!(err, ModuleError::AbiVersion { found: 2 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("ABI version 2"), "{err}");

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
    for (name, bytes) in [
        ("empty", Vec::new()),
        ("garbage", b"definitely not wasm".to_vec()),
        ("bad section", b"\0asm\x01\0\0\0\xff\x05garbage".to_vec()),
        ("truncated", truncated),
    ] {
        let err = load_err(&engine, &bytes);
        assert!(matches!(err, ModuleError::Malformed(_)), "{name}: {err:?}");
        assert!(
            err.to_string().starts_with("invalid wasm module"),
            "{name}: {err}"
        );
    }
    // The base module itself is accepted: the failures above are real.
    load(&engine, &valid);
}

// ---------------------------------------------------------------------------
// 6. Corrupt snapshot files are refused with the right error
// ---------------------------------------------------------------------------

/// A small guest with globals, a page at 0 and a page at 8192.
fn small_guest(max_pages: Option<u32>) -> Vec<u8> {
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

async fn small_snapshot(wasm: &[u8]) -> (Arc<StasisEngine>, Arc<Template>, Vec<u8>) {
    let engine = new_engine();
    let template = load(&engine, wasm);
    let mut inst = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut inst).await;
    let (bytes, _) = snapshot::capture(&mut inst).unwrap();
    (engine, template, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_snapshots_are_refused() {
    let wasm = small_guest(None);
    let (engine, template, bytes) = small_snapshot(&wasm).await;
    let max = engine.limits().max_memory;
    let verify = |b: &[u8]| snapshot::verify(b, &template, max).map(|v| v.header);
    let header = verify(&bytes).expect("the intact snapshot verifies");
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..8], &MAGIC);
    assert_eq!(
        u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
        FORMAT_VERSION
    );
    assert_eq!(
        u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
        bytes.len() as u64
    );
    // Layout: prefix + header, padding, pages 0 and 2 at 4096 and 8192, CRC.
    assert_eq!(bytes.len(), 3 * PAGE_SIZE + 4);
    assert_eq!(header.memories[0].runs.len(), 2);

    // Zero length and truncations.
    assert_eq!(
        verify(&[]),
        Err(SnapshotError::Truncated { len: 0, min: 28 })
    );
    for cut in [1, 8, 12, 23, 27] {
        assert_eq!(
            verify(&bytes[..cut]),
            Err(SnapshotError::Truncated {
                len: cut as u64,
                min: 28
            }),
            "cut at {cut}"
        );
    }
    for cut in [
        28,
        24 + header_len,
        PAGE_SIZE,
        PAGE_SIZE + 1,
        bytes.len() - 4,
        bytes.len() - 1,
    ] {
        assert_eq!(
            verify(&bytes[..cut]),
            Err(SnapshotError::LengthMismatch {
                recorded: bytes.len() as u64,
                actual: cut as u64
            }),
            "cut at {cut}"
        );
    }
    let mut extended = bytes.clone();
    extended.push(0);
    assert!(matches!(
        verify(&extended),
        Err(SnapshotError::LengthMismatch { .. })
    ));

    // Flipped bytes.
    let flip = |at: usize| {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        verify(&b)
    };
    assert_eq!(flip(0), Err(SnapshotError::BadMagic));
    assert!(matches!(
        flip(8),
        Err(SnapshotError::UnsupportedVersion { found: 0x41 })
    ));
    assert!(matches!(
        flip(16),
        Err(SnapshotError::LengthMismatch { .. })
    ));
    for at in [
        12,
        24,
        24 + header_len - 1,
        24 + header_len,
        PAGE_SIZE - 1,
        PAGE_SIZE + 16,
        2 * PAGE_SIZE,
        bytes.len() - 5,
        bytes.len() - 1,
    ] {
        assert!(
            matches!(flip(at), Err(SnapshotError::ChecksumMismatch { .. })),
            "flip at {at}: {:?}",
            flip(at)
        );
    }
    // Every single-byte change anywhere is refused (CRC32C catches every
    // burst of up to 32 bits), without a panic.
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] = !b[at];
        assert!(
            verify(&b).is_err(),
            "byte {at} changed and the file verified"
        );
    }

    // Versions: newer (and zero) are refused by name even with a valid CRC.
    for version in [0u32, 2, u32::MAX] {
        let mut b = bytes.clone();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        reseal(&mut b);
        let err = verify(&b).unwrap_err();
        assert_eq!(err, SnapshotError::UnsupportedVersion { found: version });
        assert!(
            err.to_string().contains(&format!("version {version}")),
            "{err}"
        );
    }

    // Length bomb (a): the header length claims 4 GiB.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::TooLarge(_))),
        "{:?}",
        verify(&b)
    );
    // A header length past the end of this (small) file.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::TooLarge(_))),
        "{:?}",
        verify(&b)
    );
    // A header length one byte short: the header no longer decodes.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&(header_len as u32 - 1).to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::BadHeader(_))),
        "{:?}",
        verify(&b)
    );
    // One byte too long: bytes are left after the header.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&(header_len as u32 + 1).to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(verify(&b), Err(SnapshotError::BadHeader(_))),
        "{:?}",
        verify(&b)
    );

    // Re-encoding the header unchanged gives the same file (the helper is sound).
    assert_eq!(rewrite_header(&bytes, &header), bytes);

    // Length bomb (b): the memory claims 2^40 wasm pages (and u64::MAX).
    for pages in [1u64 << 40, u64::MAX, 4097] {
        let mut h = header.clone();
        h.memories[0].wasm_pages = pages;
        let b = rewrite_header(&bytes, &h);
        assert!(
            matches!(verify(&b), Err(SnapshotError::TooLarge(_))),
            "{pages}: {:?}",
            verify(&b)
        );
        // The module-independent check alone accepts it (it is well-formed).
        assert_eq!(
            snapshot::verify_header(&b).unwrap().memories[0].wasm_pages,
            pages
        );
    }

    // Layout: a page run past the file, past the memory, overlapping, empty.
    let layouts: [fn(&mut Header); 5] = [
        |h| h.memories[0].runs[1].file_offset = 1 << 40,
        |h| h.memories[0].runs[1].first_page = 16,
        |h| h.memories[0].runs[1].first_page = 0,
        |h| h.memories[0].runs[0].pages = 0,
        |h| h.memories[0].runs[0].file_offset = 100,
    ];
    for (i, patch) in layouts.iter().enumerate() {
        let mut h = header.clone();
        patch(&mut h);
        let b = rewrite_header(&bytes, &h);
        assert!(
            matches!(verify(&b), Err(SnapshotError::Layout(_))),
            "layout {i}: {:?}",
            verify(&b)
        );
    }
    // Globals that do not match the module, and a memory below its minimum.
    let mut h = header.clone();
    h.globals[0].index = 7;
    let b = rewrite_header(&bytes, &h);
    assert!(
        matches!(verify(&b), Err(SnapshotError::Layout(_))),
        "{:?}",
        verify(&b)
    );
    let mut h = header.clone();
    h.memories[0].wasm_pages = 0;
    let b = rewrite_header(&bytes, &h);
    assert!(
        matches!(verify(&b), Err(SnapshotError::Layout(_))),
        "{:?}",
        verify(&b)
    );

    // Wrong module: A's snapshot against template B.
    let other = guest(BASE, "(nop)");
    let template_b = load(&engine, &other);
    let err = snapshot::verify(&bytes, &template_b, max).unwrap_err();
    assert!(matches!(err, SnapshotError::WrongModule { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_past_the_declared_maximum_is_too_large() {
    let wasm = small_guest(Some(4));
    let (engine, template, bytes) = small_snapshot(&wasm).await;
    let max = engine.limits().max_memory;
    let header = snapshot::verify(&bytes, &template, max).unwrap().header;
    let mut h = header.clone();
    h.memories[0].wasm_pages = 4;
    assert!(snapshot::verify(&rewrite_header(&bytes, &h), &template, max).is_ok());
    h.memories[0].wasm_pages = 5;
    assert!(matches!(
        snapshot::verify(&rewrite_header(&bytes, &h), &template, max),
        Err(SnapshotError::TooLarge(_))
    ));
    // A restore that cannot grow (the memory may hold 4 pages, the snapshot
    // is verified with a generous limit, the engine allows less) fails cleanly.
    let small = StasisEngine::new(Limits {
        max_memory: 2 * 65536,
        ..Limits::default()
    })
    .unwrap();
    let small_template = load(&small, &wasm);
    h.memories[0].wasm_pages = 3;
    let b = rewrite_header(&bytes, &h);
    let verified = snapshot::verify(&b, &small_template, 4 * 65536).unwrap();
    let result = snapshot::restore(&small, small_template, config(), &verified).await;
    assert!(matches!(
        result,
        Err(RestoreError::Snapshot(SnapshotError::TooLarge(_)))
    ));
}

// ---------------------------------------------------------------------------
// 7. The snapshot store
// ---------------------------------------------------------------------------

/// File names in `dir`, sorted, without the acknowledgement marker.
fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".acked"))
        .collect();
    names.sort();
    names
}

#[test]
fn store_retains_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path(), None).unwrap();
    for seq in 0..=5u64 {
        let path = store.write("a", seq, &[seq as u8 + 1; 100]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![seq as u8 + 1; 100]);
        store.retain("a", 2).unwrap();
    }
    let seqs: Vec<u64> = store.list("a").unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [4, 5]);
    assert_eq!(
        files_in(&store.actor_dir("a")),
        ["00000000000000000004.snap", "00000000000000000005.snap"]
    );
    assert_eq!(store.used_bytes(), 200);
    assert_eq!(store.list_acknowledged("a").unwrap().1, Some(5));
    assert!(
        store
            .actor_dir("a")
            .join("00000000000000000005.acked")
            .exists()
    );
    assert_eq!(&store.open_snapshot("a", 5).unwrap()[..], &[6u8; 100][..]);
    assert!(store.open_snapshot("a", 3).is_err());

    // Retaining from many at once.
    for seq in 6..=9u64 {
        store.write("a", seq, b"x").unwrap();
    }
    assert_eq!(store.retain("a", 2).unwrap(), [4, 5, 6, 7]);
    assert_eq!(store.list("a").unwrap().len(), 2);
    assert_eq!(store.used_bytes(), 2);
}

#[test]
fn store_open_removes_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SnapshotStore::open(dir.path(), None).unwrap();
        store.write("a", 0, b"snapshot zero").unwrap();
    }
    let actor = dir.path().join("a");
    std::fs::write(actor.join("00000000000000000001.snap.tmp"), b"torn").unwrap();
    assert_eq!(files_in(&actor).len(), 2);
    let store = SnapshotStore::open(dir.path(), None).unwrap();
    assert_eq!(files_in(&actor), ["00000000000000000000.snap"]);
    assert_eq!(store.used_bytes(), 13);
    let seqs: Vec<u64> = store.list("a").unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [0]);
}

#[test]
fn store_quota_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path(), Some(100)).unwrap();
    store.write("a", 0, &[1; 60]).unwrap();
    let err = store.write("a", 1, &[2; 60]).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Quota {
                needed: 60,
                used: 60,
                quota: 100
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        files_in(&store.actor_dir("a")),
        ["00000000000000000000.snap"]
    );
    assert_eq!(store.used_bytes(), 60);
    // Exactly filling the quota is allowed; one byte more is not.
    store.write("b", 0, &[3; 40]).unwrap();
    assert!(matches!(
        store.write("b", 1, &[4; 1]),
        Err(StoreError::Quota { .. })
    ));
    assert_eq!(
        files_in(&store.actor_dir("b")),
        ["00000000000000000000.snap"]
    );
    // Freeing space lets writes through again.
    store.remove("a", 0).unwrap();
    store.write("a", 1, &[2; 60]).unwrap();
    assert_eq!(store.used_bytes(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_snapshot_restores_from_the_mapped_file() {
    let wasm = small_guest(None);
    let (_engine, _template, bytes) = small_snapshot(&wasm).await;
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path(), None).unwrap();
    store.write("a", 0, &bytes).unwrap();
    let mapped = store.open_snapshot("a", 0).unwrap();
    assert_eq!(&mapped[..], &bytes[..]);
    let (_engine, mut inst) = restore_fresh(&wasm, &mapped, config()).await;
    let globals: Vec<_> = inst.global_values().iter().map(val_bits).collect();
    assert_eq!(globals, [("i32", 41), ("i64", u128::from(u64::MAX))]);
    let mem = inst.memory_data(0).unwrap();
    assert_eq!(
        u32::from_le_bytes(mem[8192..8196].try_into().unwrap()),
        0xdead_beef
    );
    call_ok(&mut inst).await;
}

// ---------------------------------------------------------------------------
// The guest's monotonic clock never goes backwards across a restore
// ---------------------------------------------------------------------------

const CLOCK_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "clock_time_get"
    (func $clock_time_get (param i32 i64 i32) (result i32)))
  (@custom "stasis-abi" "\01\00\00\00")
  (memory (export "memory") 1)
  (data (i32.const 16) "\c8\00\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    ;; monotonic clock (id 1) into 400
    (if (call $clock_time_get (i32.const 1) (i64.const 0) (i32.const 400))
      (then unreachable))
    (i64.const 0x1000000003)))"#;

fn guest_clock(inst: &ActorInstance) -> u64 {
    let mem = inst.memory_data(0).unwrap();
    u64::from_le_bytes(mem[400..408].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_monotonic_clock_continues_after_restore() {
    let wasm = wat::parse_str(CLOCK_WAT).unwrap();
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut inst = ActorInstance::spawn(&engine, template, config())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    call_ok(&mut inst).await;
    let seen = guest_clock(&inst);
    assert!(
        seen >= 50_000_000,
        "guest clock {seen} ns after a 50 ms sleep"
    );
    let (bytes, _) = snapshot::capture(&mut inst).unwrap();
    let recorded = snapshot::verify_header(&bytes).unwrap().clock_ns;
    assert!(recorded >= seen);
    drop(inst);

    let (_engine, mut restored) = restore_fresh(&wasm, &bytes, config()).await;
    assert!(restored.clock_ns() >= recorded);
    call_ok(&mut restored).await;
    let after = guest_clock(&restored);
    assert!(
        after >= recorded,
        "guest clock went backwards: {after} < {recorded}"
    );
}

// ---------------------------------------------------------------------------
// 8. The pooling allocator (`--max-live`)
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_engine_holds_exactly_its_slots_and_restores_into_them() {
    let engine = StasisEngine::pooled(Limits::default(), 2).expect("pooled engine");
    assert_eq!(engine.slots(), Some(2));
    let wasm = small_guest(None);
    let template = load(&engine, &wasm);
    let mut first = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .expect("slot 1");
    call_ok(&mut first).await;
    let (bytes, _) = snapshot::capture(&mut first).unwrap();
    let _second = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .expect("slot 2");
    let refused = ActorInstance::spawn(&engine, template.clone(), config()).await;
    let error = match refused {
        Ok(_) => panic!("a third instance fit in two slots"),
        Err(e) => e,
    };
    assert_eq!(error.status(), 503, "{error}");
    assert!(error.to_string().contains("--max-live"), "{error}");
    // A restore needs a slot too, and is refused the same way, not as a
    // broken snapshot.
    let verified = snapshot::verify(&bytes, &template, Limits::default().max_memory).unwrap();
    match snapshot::restore(&engine, template.clone(), config(), &verified).await {
        Err(RestoreError::Call(e)) => assert_eq!(e.status(), 503, "{e}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a restore fit in two slots"),
    }
    // A freed slot is reused, zeroed, and the restore is exact.
    drop(first);
    let mut restored = snapshot::restore(&engine, template, config(), &verified)
        .await
        .expect("restore into the freed slot");
    let (again, _) = snapshot::capture(&mut restored).unwrap();
    assert_eq!(
        snapshot::verify_header(&again).unwrap().memories,
        snapshot::verify_header(&bytes).unwrap().memories
    );
    assert!(StasisEngine::pooled(Limits::default(), 0).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_state_ignores_the_clock_and_nothing_else() {
    let wasm = small_guest(None);
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut inst = ActorInstance::spawn(&engine, template, config())
        .await
        .unwrap();
    let (before, _) = snapshot::capture(&mut inst).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (again, _) = snapshot::capture(&mut inst).unwrap();
    assert_ne!(
        snapshot::verify_header(&before).unwrap().clock_ns,
        snapshot::verify_header(&again).unwrap().clock_ns
    );
    assert!(
        snapshot::same_state(&before, &again),
        "only the clock moved"
    );
    // The call sets two globals and writes one word of memory.
    call_ok(&mut inst).await;
    let (after, _) = snapshot::capture(&mut inst).unwrap();
    assert!(!snapshot::same_state(&before, &after));
    // One flipped page byte (with a recomputed checksum) is a different
    // state; a torn file is never the same.
    let mut flipped = after.clone();
    let at = flipped.len() - 5;
    flipped[at] ^= 1;
    let body = flipped.len() - 4;
    let crc = crc32c::crc32c(&flipped[..body]);
    flipped[body..].copy_from_slice(&crc.to_le_bytes());
    assert!(snapshot::verify_header(&flipped).is_ok());
    assert!(!snapshot::same_state(&after, &flipped));
    assert!(!snapshot::same_state(&after, &after[..after.len() - 1]));
}
