//! Copy-on-write restore from snapshot files: byte-identical to a copying
//! restore (dense, sparse, grown memory, after writes), a pooled slot
//! reused after a copy-on-write instance reads zeros, the mappings stay
//! inside their per-instance and process budgets, and a mapped file
//! replaced or deleted by the store leaves the instance intact.

use std::sync::Arc;

use stasis_core::cow;
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::ActorInstance;
use stasis_core::module::Template;
use stasis_core::snapshot::{self, SnapshotSource};
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_objects::{ObjectSnapshotStore, StoreUrl};
use stasis_core::snapshot_store::{SnapshotBytes, SnapshotStore};

use crate::support::*;

const WASM_PAGE: u32 = 65536;

/// A guest whose first call grows its memory to `pages` wasm pages and
/// fills each byte range of `ranges` with a pattern of its addresses;
/// every later call runs `later` (WAT instructions).
fn filler(pages: u32, ranges: &[(u32, u32)], later: &str) -> Vec<u8> {
    let fills: String = ranges
        .iter()
        .map(|(from, to)| format!("(call $fill (i32.const {from}) (i32.const {to}))\n"))
        .collect();
    let text = format!(
        r#"(module
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
  (global $n (mut i32) (i32.const 0))
  (func $fill (param $from i32) (param $to i32)
    (loop $l
      (if (i32.lt_u (local.get $from) (local.get $to)) (then
        (i32.store (local.get $from)
          (i32.or (i32.mul (local.get $from) (i32.const 0x9E3779B1)) (i32.const 1)))
        (local.set $from (i32.add (local.get $from) (i32.const 4)))
        (br $l)))))
  (func $first
    (if (i32.lt_s (memory.grow (i32.const {grow})) (i32.const 0)) (then unreachable))
    {fills})
  (func $later {later})
  {ALLOC}
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (if (i32.eqz (global.get $n)) (then (call $first)) (else (call $later)))
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    {RESPONSE_16}))"#,
        grow = pages - 1,
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("bad test WAT: {e}\n{text}"))
}

/// Writes after a restore: into a mapped run, a whole zeroed page inside
/// one, into a zero gap, and into 8 freshly grown pages.
fn later_writes(pages: u32) -> String {
    let grown = pages * WASM_PAGE;
    format!(
        r#"(i32.store (i32.const 65540) (i32.const 7))
           (i32.store (i32.const 262148) (i32.const 9))
           (memory.fill (i32.const 131072) (i32.const 0) (i32.const 4096))
           (memory.fill (i32.const 270336) (i32.const 0) (i32.const 4096))
           (i32.store (i32.const {gap}) (i32.const 0x5a5a5a5a))
           (if (i32.lt_s (memory.grow (i32.const 8)) (i32.const 0)) (then unreachable))
           (call $fill (i32.const {grown}) (i32.const {end}))"#,
        gap = grown - 8,
        end = grown + 8 * WASM_PAGE,
    )
}

/// `bytes` written as snapshot 1 of actor "a" in a store under `dir`, and
/// opened back (a mapped file).
fn stored(dir: &std::path::Path, bytes: &[u8]) -> SnapshotBytes {
    let store = LocalSnapshotStore::open(dir, None).expect("store");
    store.write("a", 1, 0, bytes).expect("write");
    let opened = store.open_snapshot("a", 1).expect("open");
    assert!(opened.file().is_some(), "the local store keeps the file");
    opened
}

async fn restore_from<B: SnapshotSource>(
    engine: &Arc<StasisEngine>,
    template: &Arc<Template>,
    source: B,
) -> ActorInstance {
    let verified = snapshot::verify(source, template, engine.limits().max_memory).expect("verify");
    snapshot::restore(engine, template.clone(), config(), &verified)
        .await
        .expect("restore")
}

fn memory(inst: &ActorInstance) -> &[u8] {
    inst.memory_data(0).expect("memory 0")
}

/// Restores `wasm`'s state after its first call twice, by copying and
/// copy-on-write from a file; checks both hold the original's memory and
/// globals, then that they stay identical through more calls (writes and
/// growth) and through a second capture and restore.
async fn cow_matches_copy(wasm: &[u8], expect_mapped: bool) {
    let engine = new_engine();
    let template = load(&engine, wasm);
    let mut original = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut original).await;
    let (bytes, _) = snapshot::capture(&mut original).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut copied = restore_from(&engine, &template, bytes.as_slice()).await;
    let mut mapped = restore_from(&engine, &template, stored(dir.path(), &bytes)).await;
    assert_eq!(copied.mapped_runs(), 0, "a slice has no file: copied");
    if expect_mapped {
        assert!(mapped.mapped_runs() > 0, "runs of a file are mapped");
        assert!(mapped.mapped_bytes() >= cow::MIN_MAPPED_RUN_BYTES as u64);
    }
    assert!(memory(&copied) == memory(&original), "copy restore differs");
    assert!(memory(&mapped) == memory(&original), "CoW restore differs");
    assert_eq!(copied.global_values().len(), mapped.global_values().len());
    for (a, b) in copied.global_values().iter().zip(&mapped.global_values()) {
        assert_eq!(val_bits(a), val_bits(b));
    }
    // Writes, a zeroed page and growth, on all three.
    for inst in [&mut original, &mut copied, &mut mapped] {
        call_ok(inst).await;
        call_ok(inst).await;
    }
    assert!(
        memory(&copied) == memory(&original),
        "copy differs after writes"
    );
    assert!(
        memory(&mapped) == memory(&original),
        "CoW differs after writes"
    );
    let (after_copy, _) = snapshot::capture(&mut copied).unwrap();
    let (after_cow, _) = snapshot::capture(&mut mapped).unwrap();
    assert!(snapshot::same_state(&after_copy, &after_cow));
    // A restored-then-changed state restores copy-on-write again exactly.
    drop(mapped);
    let dir2 = tempfile::tempdir().unwrap();
    let again = restore_from(&engine, &template, stored(dir2.path(), &after_cow)).await;
    assert!(
        memory(&again) == memory(&copied),
        "second CoW restore differs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cow_restore_of_a_dense_memory_is_byte_identical_to_a_copy() {
    let pages = 64;
    let wasm = filler(
        pages,
        &[(WASM_PAGE, pages * WASM_PAGE)],
        &later_writes(pages),
    );
    cow_matches_copy(&wasm, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cow_restore_of_a_sparse_memory_is_byte_identical_to_a_copy() {
    let pages = 64;
    // Runs of 20 pages (mapped) and of 1 page (copied), zero gaps between.
    let mut ranges = Vec::new();
    for k in 1..(pages * WASM_PAGE / (256 << 10)) {
        let at = k * (256 << 10);
        ranges.push((at, at + (80 << 10)));
        ranges.push((at + (160 << 10), at + (164 << 10)));
    }
    let wasm = filler(pages, &ranges, &later_writes(pages));
    cow_matches_copy(&wasm, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cow_restore_of_short_runs_copies_them() {
    // Only runs below the threshold: nothing is mapped, all is exact.
    let pages = 8;
    let ranges: Vec<(u32, u32)> = (1..pages * 4)
        .map(|k| (k * (16 << 10), k * (16 << 10) + 4096))
        .collect();
    let wasm = filler(pages, &ranges, &later_writes(pages));
    let engine = new_engine();
    let template = load(&engine, &wasm);
    let mut original = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut original).await;
    let (bytes, _) = snapshot::capture(&mut original).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let restored = restore_from(&engine, &template, stored(dir.path(), &bytes)).await;
    assert_eq!(restored.mapped_runs(), 0, "short runs are copied");
    assert!(memory(&restored) == memory(&original));
    cow_matches_copy(&wasm, false).await;
}

/// The memory mappings of this process that overlap `[start, end)`,
/// from `/proc/self/maps`.
fn mappings_within(start: usize, end: usize) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .filter_map(|line| {
            let range = line.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .filter(|&(a, b)| a < end && b > start)
        .count()
}

fn extent(inst: &ActorInstance) -> (usize, usize) {
    let data = memory(inst);
    let start = data.as_ptr() as usize;
    (start, start + data.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_reused_after_a_cow_instance_reads_zeros() {
    // One slot: the next instance gets the slot the CoW instance had.
    let engine = StasisEngine::pooled(Limits::default(), 1).expect("pooled engine");
    let pages = 64;
    // The second call traps: the CoW instance is dropped after a trap.
    let dense = filler(pages, &[(WASM_PAGE, pages * WASM_PAGE)], "unreachable");
    let template = load(&engine, &dense);
    let (bytes, _) = {
        let mut original = ActorInstance::spawn(&engine, template.clone(), config())
            .await
            .unwrap();
        call_ok(&mut original).await;
        snapshot::capture(&mut original).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut mapped = restore_from(&engine, &template, stored(dir.path(), &bytes)).await;
    assert!(mapped.mapped_runs() > 0);
    let slot = extent(&mapped);
    assert!(
        memory(&mapped)[WASM_PAGE as usize..]
            .iter()
            .any(|&b| b != 0)
    );
    let trapped = mapped.call(&post()).await;
    assert!(trapped.is_err(), "the second call traps");
    drop(mapped);
    // A fresh actor of another module in the same slot, grown over the
    // old actor's pages: it must read zeros there, not the file.
    let grower = filler(pages, &[], "");
    let grower = load(&engine, &grower);
    let mut next = ActorInstance::spawn(&engine, grower, config())
        .await
        .unwrap();
    call_ok(&mut next).await;
    assert_eq!(extent(&next).0, slot.0, "the same pooled slot");
    let leaked = memory(&next)[WASM_PAGE as usize..]
        .iter()
        .filter(|&&b| b != 0)
        .count();
    assert_eq!(
        leaked, 0,
        "bytes of the previous actor leaked into the slot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_cow_instances_stay_inside_the_mapping_budget() {
    let live = 12;
    let engine = StasisEngine::pooled(Limits::default(), live).expect("pooled engine");
    // 100 runs of 16 pages (64 KiB) with one-page gaps: more runs than
    // one instance may map.
    let pages = 108;
    let ranges: Vec<(u32, u32)> = (0..100)
        .map(|k| {
            let at = WASM_PAGE + k * (68 << 10);
            (at, at + (64 << 10))
        })
        .collect();
    let wasm = filler(pages, &ranges, "");
    let template = load(&engine, &wasm);
    let mut original = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut original).await;
    let (bytes, stats) = snapshot::capture(&mut original).unwrap();
    drop(original);
    assert!(stats.stored_pages >= 1600);
    let dir = tempfile::tempdir().unwrap();
    let source = stored(dir.path(), &bytes);
    let copy = {
        let restored = restore_from(&engine, &template, bytes.as_slice()).await;
        memory(&restored).to_vec()
    };
    let budget = cow::mapping_budget(engine.slots());
    let mut instances = Vec::new();
    for _ in 0..live {
        let inst = restore_from(&engine, &template, &source).await;
        assert_eq!(inst.mapped_runs(), cow::MAX_MAPPED_RUNS_PER_INSTANCE);
        assert!(
            memory(&inst) == copy.as_slice(),
            "partly mapped restore differs"
        );
        let (start, end) = extent(&inst);
        let mappings = mappings_within(start, end);
        let most = 1 + cow::MAPPINGS_PER_MAPPED_RUN as usize * inst.mapped_runs();
        assert!(mappings <= most, "{mappings} mappings, budget {most}");
        instances.push(inst);
    }
    assert!(cow::mappings_in_use() <= budget);
    assert!(
        cow::mappings_in_use()
            >= live as u64
                * cow::MAX_MAPPED_RUNS_PER_INSTANCE as u64
                * cow::MAPPINGS_PER_MAPPED_RUN
    );
    let extents: Vec<(usize, usize)> = instances.iter().map(extent).collect();
    drop(instances);
    // Re-mapped anonymous: the slots merge back into few mappings.
    for (start, end) in extents {
        let mappings = mappings_within(start, end);
        assert!(mappings <= 3, "{mappings} mappings left in a released slot");
    }
}

/// Restores `bytes` copy-on-write from snapshot 1 of actor "a" in `store`,
/// then replaces that snapshot (same number, other bytes), writes a newer
/// one, and deletes both (retention, removal): the live instance keeps the
/// state it was restored from.
async fn survives_replace_and_delete(store: &dyn SnapshotStore, wasm: &[u8]) {
    let engine = new_engine();
    let template = load(&engine, wasm);
    let mut original = ActorInstance::spawn(&engine, template.clone(), config())
        .await
        .unwrap();
    call_ok(&mut original).await;
    let (bytes, _) = snapshot::capture(&mut original).unwrap();
    call_ok(&mut original).await;
    let (changed, _) = snapshot::capture(&mut original).unwrap();
    store.write("a", 1, 0, &bytes).expect("write");
    let opened = store.open_snapshot("a", 1).expect("open");
    assert!(opened.file().is_some(), "a local file backs the snapshot");
    let mut mapped = restore_from(&engine, &template, opened).await;
    assert!(mapped.mapped_runs() > 0);
    let before = memory(&mapped).to_vec();
    store.write("a", 1, 0, &changed).expect("replace");
    store.write("a", 2, 0, &changed).expect("newer");
    assert_eq!(store.retain("a", 1).expect("retain"), [1]);
    store.remove_actor("a").expect("remove");
    assert!(
        memory(&mapped) == before.as_slice(),
        "the mapped state changed"
    );
    // The instance still works and writes only its own copy.
    call_ok(&mut mapped).await;
    let mut copied = restore_from(&engine, &template, bytes.as_slice()).await;
    call_ok(&mut copied).await;
    assert!(memory(&mapped) == memory(&copied));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_snapshot_replaced_or_deleted_leaves_the_instance_intact() {
    let pages = 16;
    let wasm = filler(
        pages,
        &[(WASM_PAGE, pages * WASM_PAGE)],
        &later_writes(pages),
    );
    let dir = tempfile::tempdir().unwrap();
    let local = LocalSnapshotStore::open(dir.path(), None).expect("store");
    survives_replace_and_delete(&local, &wasm).await;
    // The object store's cache copy is a local file too.
    let objects = tempfile::tempdir().unwrap();
    let url: StoreUrl = format!("file://{}", objects.path().join("store").display())
        .parse()
        .expect("url");
    let cache = tempfile::tempdir().unwrap();
    let shared = ObjectSnapshotStore::open(&url, cache.path(), None).expect("object store");
    survives_replace_and_delete(&shared, &wasm).await;
}
