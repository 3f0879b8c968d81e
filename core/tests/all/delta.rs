//! Incremental snapshots: a chain of deltas restores exactly (and its
//! flattened file too), deltas stay small, the chain depth is bounded, a
//! big change or a small actor gets a full snapshot, a corrupt or replaced
//! base is refused by name, retention keeps every base a kept delta needs,
//! a fork links the whole chain, and pages that hold what the chain holds
//! are left out of a delta.

use std::sync::Arc;

use stasis_core::engine::StasisEngine;
use stasis_core::instance::ActorInstance;
use stasis_core::module::Template;
use stasis_core::snapshot::{
    self, ChainPages, DeltaBase, FullInstead, MAX_DELTA_DEPTH, SnapshotError, VerifiedChain,
};
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::{
    ChainError, SnapshotBytes, SnapshotStore, chain_files, open_chain,
};

use crate::support::*;

const WASM_PAGE: u32 = 65536;
/// Wasm pages the guest grows to on its first call (4 MiB).
const PAGES: u32 = 64;
/// The first call fills [64 KiB, 64 KiB + 3 MiB): 768 non-zero pages.
const FILL_END: u32 = WASM_PAGE + (3 << 20);

/// A guest whose first call grows its memory to [`PAGES`] and fills 3 MiB;
/// call n ≥ 1 changes a little: n = 1 writes a word and zeroes a whole
/// page, n = 2 grows the memory by 2 pages and writes there, later calls
/// write one word in a page that depends on n. Every call changes a global.
fn stepper() -> Vec<u8> {
    let grown_at = PAGES * WASM_PAGE + 100;
    let text = format!(
        r#"(module
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
  (global $n (mut i32) (i32.const 0))
  (global $g (mut i64) (i64.const 0))
  (func $fill (param $from i32) (param $to i32)
    (loop $l
      (if (i32.lt_u (local.get $from) (local.get $to)) (then
        (i32.store (local.get $from)
          (i32.or (i32.mul (local.get $from) (i32.const 0x9E3779B1)) (i32.const 1)))
        (local.set $from (i32.add (local.get $from) (i32.const 4)))
        (br $l)))))
  (func $step (param $n i32)
    (global.set $g (i64.add (global.get $g) (i64.extend_i32_u (local.get $n))))
    (if (i32.eq (local.get $n) (i32.const 1)) (then
      (i32.store (i32.const 131080) (i32.const 77))
      (memory.fill (i32.const 196608) (i32.const 0) (i32.const 4096))
      (return)))
    (if (i32.eq (local.get $n) (i32.const 2)) (then
      (if (i32.lt_s (memory.grow (i32.const 2)) (i32.const 0)) (then unreachable))
      (i32.store (i32.const {grown_at}) (i32.const 99))
      (return)))
    (i32.store
      (i32.add (i32.const 65548)
        (i32.mul (i32.rem_u (i32.mul (local.get $n) (i32.const 37)) (i32.const 700))
                 (i32.const 4096)))
      (local.get $n)))
  {ALLOC}
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (if (i32.eqz (global.get $n))
      (then
        (if (i32.lt_s (memory.grow (i32.const {grow})) (i32.const 0)) (then unreachable))
        (call $fill (i32.const 65536) (i32.const {FILL_END})))
      (else (call $step (global.get $n))))
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    {RESPONSE_16}))"#,
        grow = PAGES - 1,
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("bad test WAT: {e}\n{text}"))
}

fn memory(inst: &ActorInstance) -> &[u8] {
    inst.memory_data(0).expect("memory 0")
}

fn assert_same_state(a: &mut ActorInstance, b: &mut ActorInstance, what: &str) {
    assert!(memory(a) == memory(b), "{what}: memories differ");
    let (ga, gb) = (a.global_values(), b.global_values());
    assert_eq!(ga.len(), gb.len(), "{what}: globals");
    for (x, y) in ga.iter().zip(&gb) {
        assert_eq!(val_bits(x), val_bits(y), "{what}: a global differs");
    }
}

/// An actor "a" with the [`stepper`] guest after its first call, snapshot
/// 0 (full) in a store in `dir`, and a live instance restored from it.
struct Actor {
    engine: Arc<StasisEngine>,
    template: Arc<Template>,
    store: LocalSnapshotStore,
    /// The never-snapshotted reference: every call goes to it too.
    original: ActorInstance,
    live: ActorInstance,
    base: DeltaBase,
    full_bytes: usize,
}

impl Actor {
    async fn new(dir: &std::path::Path) -> Self {
        let engine = new_engine();
        let template = load(&engine, &stepper());
        let mut original = ActorInstance::spawn(&engine, template.clone(), config())
            .await
            .expect("spawn");
        call_ok(&mut original).await;
        let (full, _) = snapshot::capture(&mut original).expect("capture");
        let store = LocalSnapshotStore::open(dir, None).expect("store");
        store.write("a", 0, 0, &full).expect("write");
        let base = DeltaBase::of_file(0, &full, None).expect("base");
        let chain = open_chain(&store, "a", 0, &template, u64::MAX).expect("chain");
        let live = snapshot::restore_chain(&engine, template.clone(), config(), &chain)
            .await
            .expect("restore");
        Self {
            engine,
            template,
            store,
            original,
            live,
            base,
            full_bytes: full.len(),
        }
    }

    async fn step(&mut self) {
        call_ok(&mut self.original).await;
        call_ok(&mut self.live).await;
    }

    /// Captures the live instance as a delta, writes it as `seq`.
    fn delta(&mut self, seq: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let chain = self.chain(self.base.seq);
        let pages = ChainPages::of(&chain);
        let captured = snapshot::capture_delta(&mut self.live, &self.base, Some(&pages), &mut out)
            .expect("encodes")
            .unwrap_or_else(|why| panic!("delta {seq} refused: {why:?}"));
        assert!(!captured.unchanged, "delta {seq} changed something");
        self.store.write("a", seq, 0, &out).expect("write");
        self.base = DeltaBase::of_file(seq, &out, Some(&self.base)).expect("next base");
        out
    }

    fn chain(&self, seq: u64) -> VerifiedChain<SnapshotBytes> {
        open_chain(&self.store, "a", seq, &self.template, u64::MAX).expect("chain opens")
    }

    async fn restore(&self, seq: u64) -> ActorInstance {
        snapshot::restore_chain(
            &self.engine,
            self.template.clone(),
            config(),
            &self.chain(seq),
        )
        .await
        .expect("chain restores")
    }
}

#[tokio::test]
async fn a_chain_of_deltas_restores_exactly_and_flattens_to_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    for seq in 1..=u64::from(MAX_DELTA_DEPTH) {
        actor.step().await;
        let delta = actor.delta(seq);
        assert!(
            delta.len() * 20 < actor.full_bytes,
            "delta {seq} is {} bytes, the full snapshot {}",
            delta.len(),
            actor.full_bytes
        );
        let chain = actor.chain(seq);
        assert_eq!(chain.links().len(), seq as usize + 1);
        assert_eq!(chain.head().base.map(|b| b.depth), Some(seq as u32));
        let mut restored = actor.restore(seq).await;
        assert_same_state(&mut restored, &mut actor.original, &format!("chain {seq}"));
        // Flattened: one full file with the same state.
        let flat = snapshot::flatten(&chain).expect("flatten");
        let header = snapshot::peek_header(&flat).expect("header");
        assert_eq!(header.base, None);
        assert!(
            header.on_image.is_none(),
            "a flattened chain restores without the image"
        );
        let verified =
            snapshot::verify(&flat[..], &actor.template, actor.engine.limits().max_memory)
                .expect("the flattened chain verifies");
        let mut from_flat =
            snapshot::restore(&actor.engine, actor.template.clone(), config(), &verified)
                .await
                .expect("the flattened chain restores");
        assert_same_state(
            &mut from_flat,
            &mut actor.original,
            &format!("flattened chain {seq}"),
        );
        // Go on from the restored instance every other time (a pause and
        // resume), from the same instance otherwise (a checkpoint).
        if seq % 2 == 0 {
            let base = DeltaBase::new(
                chain.head_seq(),
                chain.head_crc32c(),
                chain.head(),
                chain.root_pages(),
            );
            assert_eq!(base, actor.base, "the base of a restored chain");
            actor.live = restored;
        }
    }
    actor.step().await;
    let mut out = Vec::new();
    let full =
        snapshot::capture_delta(&mut actor.live, &actor.base, None, &mut out).expect("encodes");
    assert_eq!(
        full,
        Err(FullInstead::ChainFull),
        "depth {MAX_DELTA_DEPTH} is the last"
    );
}

/// A chain at its depth limit is compacted by merging: one delta on the
/// root, at depth 1, holding the union of the deltas' pages and the live
/// changes; the two-file chain restores byte-identically, twice in a row
/// (a merge after a restore from a merged chain, whose deltas are older).
#[tokio::test]
async fn a_full_chain_merges_into_one_delta_that_restores_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    let mut seq = 0;
    for round in 0..2 {
        while actor.base.depth < MAX_DELTA_DEPTH {
            seq += 1;
            actor.step().await;
            actor.delta(seq);
        }
        actor.step().await;
        let chain = actor.chain(seq);
        let mut out = Vec::new();
        let merged = snapshot::capture_merged(&mut actor.live, &actor.base, &chain, &mut out)
            .expect("encodes")
            .unwrap_or_else(|why| panic!("round {round}: merge refused: {why:?}"));
        assert!(
            !merged.unchanged,
            "round {round}: the step changed something"
        );
        assert!(
            out.len() * 4 < actor.full_bytes,
            "round {round}: merged delta of {} bytes, full snapshot {}",
            out.len(),
            actor.full_bytes
        );
        let header = snapshot::peek_header(&out).expect("header");
        let base = header.base.expect("a delta");
        assert_eq!((base.seq, base.depth), (0, 1), "round {round}: on the root");
        seq += 1;
        actor.store.write("a", seq, 0, &out).expect("write");
        actor.base = DeltaBase::of_file(seq, &out, Some(&actor.base)).expect("next base");
        assert_eq!(actor.chain(seq).links().len(), 2, "root and merged delta");
        let mut restored = actor.restore(seq).await;
        assert_same_state(
            &mut restored,
            &mut actor.original,
            &format!("merged {round}"),
        );
        // Go on from the restored two-file chain.
        actor.live = restored;
    }
    // Nothing changed since the merge: a merge says so.
    let chain = actor.chain(seq);
    let mut out = Vec::new();
    let again = snapshot::capture_merged(&mut actor.live, &actor.base, &chain, &mut out)
        .expect("encodes")
        .expect("merges");
    assert!(again.unchanged);
}

/// A merge keeps a large delta near the root (an earlier merge of many
/// changes) and merges only the deltas above it, as a size-tiered log:
/// what it writes is in proportion to the recent changes, not to all the
/// changes since the root. The three-file chain restores exactly, and the
/// next merge of a chain whose lower deltas are small goes onto the root.
#[tokio::test]
async fn a_merge_keeps_a_large_lower_delta_and_merges_the_small_ones_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    // Delta 1 holds 60 steps' pages, deltas 2..8 one step's each.
    for _ in 0..60 {
        actor.step().await;
    }
    let mut seq = 1;
    let first = actor.delta(seq);
    while actor.base.depth < MAX_DELTA_DEPTH {
        seq += 1;
        actor.step().await;
        actor.delta(seq);
    }
    actor.step().await;
    let chain = actor.chain(seq);
    assert_eq!(snapshot::merge_point(&chain), 2, "delta 1 is kept");
    let mut out = Vec::new();
    let merged = snapshot::capture_merged(&mut actor.live, &actor.base, &chain, &mut out)
        .expect("encodes")
        .expect("merges");
    assert!(!merged.unchanged);
    assert!(
        out.len() * 4 < first.len(),
        "merged delta of {} bytes, delta 1 {}",
        out.len(),
        first.len()
    );
    let base = snapshot::peek_header(&out)
        .expect("header")
        .base
        .expect("a delta");
    assert_eq!((base.seq, base.depth), (1, 2), "on delta 1");
    seq += 1;
    actor.store.write("a", seq, 0, &out).expect("write");
    actor.base = DeltaBase::of_file(seq, &out, Some(&actor.base)).expect("next base");
    assert_eq!(actor.chain(seq).links().len(), 3, "root, delta 1, merged");
    let mut restored = actor.restore(seq).await;
    assert_same_state(&mut restored, &mut actor.original, "tiered merge");
    actor.live = restored;
    // A chain whose deltas are all about the same size merges onto the
    // root (no delta is as large as those above it together).
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    let mut seq = 0;
    while actor.base.depth < MAX_DELTA_DEPTH {
        seq += 1;
        actor.step().await;
        actor.delta(seq);
    }
    assert_eq!(snapshot::merge_point(&actor.chain(seq)), 1);
}

/// A full snapshot written from an instance never restored (every page
/// it wrote is anonymous memory, all reported dirty) and mapped back over
/// its memory: the next delta holds only the pages written since, and the
/// instance keeps its state.
#[tokio::test]
async fn a_written_full_snapshot_mapped_over_the_live_memory_resets_what_counts_as_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let actor = Actor::new(dir.path()).await;
    let mut original = actor.original;
    let (full, _) = snapshot::capture(&mut original).expect("capture");
    actor.store.write("a", 1, 0, &full).expect("write");
    let chain = open_chain(&actor.store, "a", 1, &actor.template, u64::MAX).expect("chain");
    let (_, written) = chain.links().last().expect("one link");
    let mapped = snapshot::map_written_snapshot(&actor.engine, &mut original, written);
    assert!(
        mapped as usize * 2 > full.len(),
        "mapped {mapped} of {}",
        full.len()
    );
    let (again, _) = snapshot::capture(&mut original).expect("capture");
    assert!(
        snapshot::same_state(&full, &again),
        "mapping changed the state"
    );
    call_ok(&mut original).await;
    let base = DeltaBase::of_file(1, &full, None).expect("base");
    let pages = ChainPages::of(&chain);
    let mut out = Vec::new();
    let delta = snapshot::capture_delta(&mut original, &base, Some(&pages), &mut out)
        .expect("encodes")
        .expect("a delta, not a full snapshot");
    // The 768 filled pages are file-backed again: only the step's pages
    // and the zero pages the capture read (the shared zero page counts as
    // present) are reported, and the delta stores the step's change alone.
    assert!(
        delta.dirty_pages < 300,
        "{} pages dirty after one step",
        delta.dirty_pages
    );
    assert!(delta.stats.stored_pages <= 2, "{:?}", delta.stats);
}

#[tokio::test]
async fn a_big_change_or_a_small_actor_is_written_full() {
    let dir = tempfile::tempdir().unwrap();
    let actor = Actor::new(dir.path()).await;
    // The original's filled pages were all written since it was made.
    let mut original = actor.original;
    let mut out = Vec::new();
    let verdict =
        snapshot::capture_delta(&mut original, &actor.base, None, &mut out).expect("encodes");
    assert!(
        matches!(verdict, Err(FullInstead::TooManyChanged { changed, root_pages })
            if changed * 2 > root_pages && root_pages >= 768),
        "{verdict:?}"
    );
    let (engine, template, small) = small_snapshot(&small_guest(None)).await;
    let base = DeltaBase::of_file(0, &small, None).expect("base");
    let verified = snapshot::verify(small.as_slice(), &template, u64::MAX).expect("verify");
    let mut inst = snapshot::restore(&engine, template.clone(), config(), &verified)
        .await
        .expect("restore");
    let verdict = snapshot::capture_delta(&mut inst, &base, None, &mut out).expect("encodes");
    assert_eq!(verdict, Err(FullInstead::SmallRoot));
}

#[tokio::test]
async fn a_corrupt_or_replaced_base_fails_every_delta_on_it_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    for seq in 1..=3 {
        actor.step().await;
        actor.delta(seq);
    }
    // Flip a byte of delta 1: deltas 2 and 3 fail, naming snapshot 1.
    let path = actor.store.path("a", 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    for seq in [2u64, 3] {
        let err = open_chain(&actor.store, "a", seq, &actor.template, u64::MAX).unwrap_err();
        match &err {
            ChainError::Base { seq: asked, source } => {
                assert_eq!(*asked, seq);
                assert!(
                    matches!(
                        **source,
                        ChainError::Invalid {
                            seq: 1,
                            source: SnapshotError::ChecksumMismatch { .. }
                        }
                    ),
                    "{source:?}"
                );
            }
            other => panic!("expected a base error, got {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&format!("snapshot {seq} is a delta")) && text.contains("snapshot 1:"),
            "{text}"
        );
    }
    // Snapshot 0 alone still restores.
    actor.chain(0);
    // Replace delta 2 by another valid file: delta 3 names the old one.
    actor
        .store
        .write("a", 2, 0, &bytes_of(&actor.store, 0))
        .unwrap();
    let err = open_chain(&actor.store, "a", 3, &actor.template, u64::MAX).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("snapshot 3 is a delta") && text.contains("replaced"),
        "{text}"
    );
    // A delta alone is no chain.
    let delta = actor.store.open_snapshot("a", 3).unwrap();
    let verified = snapshot::verify(delta, &actor.template, u64::MAX).expect("verifies alone");
    let refused = snapshot::restore(&actor.engine, actor.template.clone(), config(), &verified)
        .await
        .err()
        .expect("a lone delta is not restored");
    assert!(refused.to_string().contains("delta"), "{refused}");
}

fn bytes_of(store: &LocalSnapshotStore, seq: u64) -> Vec<u8> {
    store.open_snapshot("a", seq).unwrap().to_vec()
}

#[tokio::test]
async fn retention_keeps_every_base_a_kept_delta_needs() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    for seq in 1..=3 {
        actor.step().await;
        actor.delta(seq);
    }
    assert_eq!(actor.store.retain("a", 1).unwrap(), Vec::<u64>::new());
    let seqs: Vec<u64> = actor
        .store
        .list("a")
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    // A full snapshot 4: the old chain is no longer needed.
    let (full, _) = snapshot::capture(&mut actor.live).expect("capture");
    actor.store.write("a", 4, 0, &full).unwrap();
    // Keeping 2 keeps delta 3, so its whole chain.
    assert_eq!(actor.store.retain("a", 2).unwrap(), Vec::<u64>::new());
    assert_eq!(actor.store.retain("a", 1).unwrap(), [0, 1, 2, 3]);
    let mut restored = actor.restore(4).await;
    actor.step().await;
    call_ok(&mut restored).await;
    assert_same_state(&mut restored, &mut actor.original, "after retention");
}

#[tokio::test]
async fn a_fork_of_a_delta_links_its_whole_chain() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    for seq in 1..=2 {
        actor.step().await;
        actor.delta(seq);
    }
    let linked = actor.store.fork("a", 2, "b", 0).expect("fork");
    let files = chain_files(&actor.store, "a", 2).unwrap();
    let total: usize = files.iter().map(|(_, f)| f.len()).sum();
    assert_eq!(linked, total as u64);
    use std::os::unix::fs::MetadataExt;
    for seq in 0..=2 {
        let a = std::fs::metadata(actor.store.path("a", seq)).unwrap().ino();
        let b = std::fs::metadata(actor.store.path("b", seq)).unwrap().ino();
        assert_eq!(a, b, "snapshot {seq} is shared, not copied");
    }
    let chain = open_chain(&actor.store, "b", 2, &actor.template, u64::MAX).expect("b's chain");
    let mut forked =
        snapshot::restore_chain(&actor.engine, actor.template.clone(), config(), &chain)
            .await
            .unwrap();
    assert_same_state(&mut forked, &mut actor.original, "fork");
}

#[tokio::test]
async fn pages_that_hold_what_the_chain_holds_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut actor = Actor::new(dir.path()).await;
    actor.step().await;
    let first = actor.delta(1);
    let first_pages = snapshot::peek_header(&first).unwrap().stored_pages();
    let verified = actor.chain(1);
    let chain = ChainPages::of(&verified);
    // Restored and not called: the pages the restore copied in are dirty,
    // but hold the chain's bytes, so nothing changed.
    let mut restored = actor.restore(1).await;
    let mut out = Vec::new();
    let blind = snapshot::capture_delta(&mut restored, &actor.base, None, &mut out)
        .expect("encodes")
        .expect("a delta");
    assert!(!blind.unchanged, "without the chain, copied pages count");
    let seen = snapshot::capture_delta(&mut restored, &actor.base, Some(&chain), &mut out)
        .expect("encodes")
        .expect("a delta");
    assert!(seen.unchanged, "compared with the chain, nothing changed");
    assert_eq!(snapshot::peek_header(&out).unwrap().stored_pages(), 0);
    // One call later it changed, and only by what the call wrote: the
    // delta after a restore is no larger than the first one (it does not
    // repeat the pages delta 1 stored).
    call_ok(&mut restored).await;
    let after = snapshot::capture_delta(&mut restored, &actor.base, Some(&chain), &mut out)
        .expect("encodes")
        .expect("a delta");
    assert!(!after.unchanged, "a call changed it");
    let pages = snapshot::peek_header(&out).unwrap().stored_pages();
    assert!(
        (1..=first_pages).contains(&pages),
        "{pages} pages stored, delta 1 stored {first_pages}"
    );
}
