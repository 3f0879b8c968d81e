//! Capture and restore round trips: exact global bits, run-once start and
//! init code, data segments, every memory of a multi-memory module, sparse
//! large memories, and the guest's monotonic clock across a restore.

use std::sync::{Arc, Mutex};

use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::snapshot::{self, SnapshotError};

use crate::support::*;

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
    // Taken on the module's initial image (format version 3): page 3
    // (`keep`) is the image's and not stored, page 2 (the zeroed segment)
    // is a zero run, and page 0 (the image's bytes at 16 and the
    // response) at most a patch of the blocks that differ.
    assert_eq!(stats.stored_pages, 0);
    let header = snapshot::verify_header(&bytes).unwrap();
    assert!(header.on_image.is_some());
    assert_eq!(header.version(), snapshot::IMAGE_FORMAT_VERSION);
    let memory = &header.memories[0];
    assert!(memory.runs.is_empty());
    let zeros: Vec<(u64, u64)> = memory
        .zero_runs
        .iter()
        .map(|z| (z.first_page, z.pages))
        .collect();
    assert_eq!(zeros, [(2, 1)]);
    // Each patch holds exactly the memory's bytes of its blocks.
    for patch in &memory.patches {
        assert_eq!(patch.page, 0);
        let mut at = patch.file_offset as usize;
        for range in patch.ranges() {
            let len = range.len();
            assert_eq!(bytes[at..at + len], before[range]);
            at += len;
        }
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
    // On the initial image: page 1 of memory 0 and page 46 of memory 1 are
    // stored; page 17 of memory 1 (the zeroed segment) is a zero run.
    assert_eq!(stats.stored_pages, 2);
    let header = snapshot::verify_header(&bytes).unwrap();
    assert_eq!(header.memories[1].zero_runs.len(), 1);
    assert_eq!(header.memories[1].zero_runs[0].first_page, 70000 / 4096);

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
    // The filled 1 MiB and the last page; page 0 differs from the
    // module's initial image in a few blocks at most (a patch).
    assert_eq!(stats.stored_pages, 256 + 1);
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
