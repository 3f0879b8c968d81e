//! Incremental snapshot benchmark (issue 13, item 2): the cost of one
//! pause's snapshot — capture and a durable `SnapshotStore::write` — of a
//! 64 MiB actor restored copy-on-write from a full snapshot, after it
//! changed 1 page, 1 %, 10 % or 100 % of its pages, against the durability
//! floor of the same run: a plain write + fsync of as many bytes as the
//! snapshot holds.
//!
//! * `delta/pause/<changed>`: `snapshot::capture_delta` (or the full
//!   capture it hands over to when more than half the pages changed, as a
//!   pause does) plus the store's write of the file;
//! * `delta/write_fsync/<changed>`: a write + fsync of the same number of
//!   bytes (the baseline: what the pause must cost at least);
//! * `delta/full_pause/<changed>`: a full capture and write of the same
//!   state (what a pause cost before deltas).
//!
//! Each iteration restores a fresh instance and has it change its pages
//! (untimed), then times the pause. `delta-summary:` lines give the bytes
//! written per case. Knob: `STASIS_DELTA_MIB` (memory size, 64; 4 in
//! criterion's test mode). Results: BENCHMARKS.md, section 16.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::module::{ModuleCache, Template};
use stasis_core::snapshot::{self, ChainPages, DeltaBase};
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::{SnapshotStore, open_chain};
use stasis_host_api::Request;
use stasis_test_util::bench::test_mode;
use stasis_test_util::data::write_fsync;

const PAGE: u32 = 4096;

/// Memory size in MiB.
fn mib() -> u32 {
    std::env::var("STASIS_DELTA_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if test_mode() { 4 } else { 64 })
}

/// A guest whose first call grows its memory to `mib` MiB and fills all of
/// it but the first wasm page; each later call writes one word into
/// `changed` pages spread evenly over the filled part.
fn guest(mib: u32, changed: u32) -> Vec<u8> {
    let wasm_pages = mib * 16;
    let filled_pages = (wasm_pages - 1) * 16;
    let stride = (filled_pages / changed.max(1)).max(1) * PAGE;
    let text = format!(
        r#"(module
  (@custom "stasis-abi" "\01\00\00\00")
  (memory 1)
  (data (i32.const 16) "\c8\00\00")
  (global $n (mut i32) (i32.const 0))
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "stasis_handle") (param i32 i32) (result i64)
    (local $at i32) (local $left i32)
    (if (i32.eqz (global.get $n))
      (then
        (if (i32.lt_s (memory.grow (i32.const {grow})) (i32.const 0)) (then unreachable))
        (local.set $at (i32.const 65536))
        (loop $fill
          (i64.store (local.get $at) (i64.or (i64.extend_i32_u (local.get $at)) (i64.const 1)))
          (local.set $at (i32.add (local.get $at) (i32.const 8)))
          (br_if $fill (i32.lt_u (local.get $at) (i32.const {end})))))
      (else
        (local.set $at (i32.const 65536))
        (local.set $left (i32.const {changed}))
        (loop $touch
          (i32.store (local.get $at) (global.get $n))
          (local.set $at (i32.add (local.get $at) (i32.const {stride})))
          (local.set $left (i32.sub (local.get $left) (i32.const 1)))
          (br_if $touch (i32.and (i32.gt_u (local.get $left) (i32.const 0))
                                 (i32.lt_u (local.get $at) (i32.const {end})))))))
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    (i64.const 0x1000000003)))"#,
        grow = wasm_pages - 1,
        end = wasm_pages * 65536,
    );
    wat::parse_str(&text).expect("bench WAT")
}

struct Case {
    engine: Arc<StasisEngine>,
    template: Arc<Template>,
    store: LocalSnapshotStore,
    base: DeltaBase,
}

fn config() -> InstanceConfig {
    InstanceConfig::new("bench", "worker-1", Vec::new())
}

fn post() -> Request {
    Request {
        method: "POST".into(),
        uri: "/".into(),
        ..Default::default()
    }
}

impl Case {
    /// Snapshot 0 (full) of the guest after its fill, in a store in `dir`.
    async fn new(dir: &Path, mib: u32, changed: u32) -> Self {
        let limits = Limits {
            max_memory: u64::from(mib + 1) << 20,
            ..Limits::default()
        };
        let engine = StasisEngine::new(limits).expect("engine");
        let template = ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None)
            .load(&guest(mib, changed))
            .expect("template");
        let mut inst = ActorInstance::spawn(&engine, template.clone(), config())
            .await
            .expect("spawn");
        inst.call(&post()).await.expect("fill");
        let (full, _) = snapshot::capture(&mut inst).expect("capture");
        let store = LocalSnapshotStore::open(dir, None).expect("store");
        store.write("a", 0, 0, &full).expect("write");
        let base = DeltaBase::of_file(0, &full, None).expect("base");
        Self {
            engine,
            template,
            store,
            base,
        }
    }

    /// A fresh copy-on-write restore of snapshot 0 that changed its pages.
    async fn changed_instance(&self) -> ActorInstance {
        let chain = open_chain(&self.store, "a", 0, &self.template, u64::MAX).expect("chain");
        let mut inst =
            snapshot::restore_chain(&self.engine, self.template.clone(), config(), &chain)
                .await
                .expect("restore");
        inst.call(&post()).await.expect("change");
        inst
    }

    /// A pause's snapshot: a delta, or full when the delta says so; the
    /// bytes written and the time.
    fn pause(&self, inst: &mut ActorInstance, seq: u64) -> (usize, Duration) {
        let start = Instant::now();
        let mut out = Vec::new();
        let chain =
            open_chain(&self.store, "a", self.base.seq, &self.template, u64::MAX).expect("chain");
        let pages = ChainPages::of(&chain);
        let delta =
            snapshot::capture_delta(inst, &self.base, Some(&pages), &mut out).expect("encodes");
        if delta.is_err() {
            out = snapshot::capture(inst).expect("capture").0;
        }
        self.store.write("a", seq, 0, &out).expect("write");
        let took = start.elapsed();
        self.store.remove("a", seq).expect("remove");
        (out.len(), took)
    }

    fn full_pause(&self, inst: &mut ActorInstance, seq: u64) -> (usize, Duration) {
        let start = Instant::now();
        let (out, _) = snapshot::capture(inst).expect("capture");
        self.store.write("a", seq, 0, &out).expect("write");
        let took = start.elapsed();
        self.store.remove("a", seq).expect("remove");
        (out.len(), took)
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mib = mib();
    let pages = mib * 256;
    let mut group = c.benchmark_group("delta");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for (label, changed) in [
        ("1_page", 1),
        ("1_percent", pages / 100),
        ("10_percent", pages / 10),
        ("100_percent", pages),
    ] {
        let dir = tempfile::tempdir().expect("tmp");
        let case = rt.block_on(Case::new(dir.path(), mib, changed));
        let mut probe = rt.block_on(case.changed_instance());
        let (delta_bytes, _) = case.pause(&mut probe, 1);
        let (full_bytes, _) = case.full_pause(&mut probe, 1);
        println!(
            "delta-summary: {label}: {mib} MiB memory, {changed} pages changed, pause wrote \
             {delta_bytes} bytes, a full snapshot is {full_bytes} bytes"
        );
        drop(probe);
        group.bench_function(BenchmarkId::new("pause", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let mut inst = rt.block_on(case.changed_instance());
                    total += case.pause(&mut inst, i + 1).1;
                }
                total
            });
        });
        group.bench_function(BenchmarkId::new("full_pause", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let mut inst = rt.block_on(case.changed_instance());
                    total += case.full_pause(&mut inst, i + 1).1;
                }
                total
            });
        });
        let floor = vec![0x5au8; delta_bytes];
        let path = dir.path().join("floor");
        group.bench_function(BenchmarkId::new("write_fsync", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    write_fsync(&path, &floor);
                    total += start.elapsed();
                    std::fs::remove_file(&path).expect("remove");
                }
                total
            });
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
