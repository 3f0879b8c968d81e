//! Snapshot benchmarks (issue 5, items 1–4), each group holding its physical
//! baselines measured in the same run:
//!
//! * `capture/<case>`: linear memory → snapshot bytes in RAM (`capture` into
//!   a fresh `Vec`, `capture_into` a reused one) against `memcpy` of the
//!   non-zero bytes into a touched buffer and the zero-scan of the memory;
//! * `restore/<case>`: snapshot bytes → fresh callable instance against
//!   `memcpy` of the stored bytes into freshly mapped memory (faults included);
//! * `persist/<case>`: `SnapshotStore::write` (write, fsync, rename, fsync
//!   folder) against plain `std::fs` write + fsync of the same bytes;
//! * `load/<case>`: map the file + `verify` against reading it into a touched
//!   buffer;
//! * `cold_start`: `kv` with 100 000 keys built at init: spawn + init against
//!   restore of its post-init snapshot;
//! * `restore_size/<copy|cow>/<N>MiB` (issue 13): restore of a dense N MiB
//!   memory (1, 16, 128 and 1024 MiB) by copying from RAM and copy-on-write
//!   from the stored file, against `memcpy` into fresh memory;
//! * `first_touch/<case>` (issue 13): the guest writes one byte in every
//!   4 KiB page of a dense 16 MiB memory right after a copying or a
//!   copy-on-write restore (per page: the write fault a mapped page pays
//!   against the prefaulted copy); also reads from Rust after each;
//! * snapshot size per case against non-zero 4 KiB pages (printed as
//!   `snapshot-size:` lines).
//!
//! Cases are `<dense|sparse>-<N>MiB` linear memories built by a small WAT
//! actor whose `stasis_init` grows the memory to N MiB and fills every 4 KiB
//! page (dense) or one 4 KiB page in 16 (sparse) with xorshift bytes.
//!
//! In criterion's test mode (`cargo test --benches`, or any run without
//! `--bench`) only the 1 and 16 MiB cases run, so CI stays cheap; `cargo
//! bench` runs 1, 16, 64 and 256 MiB.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use memmap2::MmapMut;
use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::module::{ModuleCache, Template};
use stasis_core::snapshot::{self, CaptureStats, PAGE_SIZE};
use stasis_core::snapshot_files::LocalSnapshotStore;
use stasis_core::snapshot_store::SnapshotStore as _;
use stasis_host_api::Request;
use stasis_test_util::bench::test_mode;
use stasis_test_util::data::write_fsync;
use stasis_test_util::stats::percentile;
use stasis_test_util::{Artifacts, artifacts, engine};

/// The `stasis` binary and the demo actors.
const STASIS: Artifacts = artifacts!();

const MIB: usize = 1 << 20;
const MAX_MEMORY: u64 = 1 << 30;
const KV_PRELOAD: &str = "100000";

fn sizes() -> &'static [usize] {
    if test_mode() {
        &[1, 16]
    } else {
        &[1, 16, 64, 256]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Density {
    Dense,
    Sparse,
}

impl Density {
    fn name(self) -> &'static str {
        match self {
            Density::Dense => "dense",
            Density::Sparse => "sparse",
        }
    }

    /// One 4 KiB page in `stride` is filled.
    fn stride(self) -> u32 {
        match self {
            Density::Dense => 1,
            Density::Sparse => 16,
        }
    }
}

/// A minimal Stasis actor: `stasis_init` grows the memory to `mib` MiB and
/// fills one 4 KiB page in `stride` (from page `stride` on) with xorshift64
/// words, which are never zero; page 0 holds the constant response (status
/// 200, no headers, no body: bincode `c8 00 00`) and the request buffer. A
/// mutable global carries the generator state, so globals are captured too.
fn fill_module(mib: usize, stride: u32) -> Vec<u8> {
    fill_module_with(mib, stride, "(i64.const 3)")
}

/// [`fill_module`] whose `stasis_handle` adds 1 to the first byte of every
/// 4 KiB page from 64 KiB on (a write per page), then answers.
fn touch_module(mib: usize) -> Vec<u8> {
    let end = mib * MIB;
    let handler = format!(
        r#"(local $a i32)
    (local.set $a (i32.const 65536))
    (loop $l
      (i32.store8 (local.get $a) (i32.add (i32.load8_u (local.get $a)) (i32.const 1)))
      (local.set $a (i32.add (local.get $a) (i32.const 4096)))
      (br_if $l (i32.lt_u (local.get $a) (i32.const {end}))))
    (i64.const 3)"#
    );
    fill_module_with(mib, 1, &handler)
}

fn fill_module_with(mib: usize, stride: u32, handler: &str) -> Vec<u8> {
    let grow = mib * 16 - 1;
    let pages_4k = mib * 256;
    let wat = format!(
        r#"(module
  (@custom "stasis-abi" "\01\00\00\00")
  (memory (export "memory") 1)
  (global $seed (mut i64) (i64.const 0x2545f4914f6cdd1d))
  (data (i32.const 0) "\c8\00\00")
  (func (export "stasis_alloc") (param i32) (result i32) (i32.const 64))
  (func (export "stasis_handle") (param i32 i32) (result i64) {handler})
  (func (export "stasis_init")
    (local $page i32) (local $addr i32) (local $end i32) (local $x i64)
    (if (i32.lt_s (memory.grow (i32.const {grow})) (i32.const 0)) (then unreachable))
    (local.set $x (global.get $seed))
    (local.set $page (i32.const {stride}))
    (block $done
      (loop $pages
        (br_if $done (i32.ge_u (local.get $page) (i32.const {pages_4k})))
        (local.set $addr (i32.shl (local.get $page) (i32.const 12)))
        (local.set $end (i32.add (local.get $addr) (i32.const 4096)))
        (loop $words
          (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 13))))
          (local.set $x (i64.xor (local.get $x) (i64.shr_u (local.get $x) (i64.const 7))))
          (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 17))))
          (i64.store (local.get $addr) (local.get $x))
          (local.set $addr (i32.add (local.get $addr) (i32.const 8)))
          (br_if $words (i32.lt_u (local.get $addr) (local.get $end))))
        (local.set $page (i32.add (local.get $page) (i32.const {stride})))
        (br $pages)))
    (global.set $seed (local.get $x))))"#
    );
    wat::parse_str(wat).expect("the fill module is valid WAT")
}

/// One memory case: a live actor, its snapshot, and where its non-zero
/// bytes are.
struct Fixture {
    label: String,
    template: Arc<Template>,
    instance: ActorInstance,
    snapshot: Vec<u8>,
    /// Byte ranges of the non-zero 4 KiB runs in memory 0.
    runs: Vec<(usize, usize)>,
    /// Where the page bytes sit in `snapshot`.
    payload: std::ops::Range<usize>,
}

impl Fixture {
    fn stored_bytes(&self) -> usize {
        self.runs.iter().map(|(_, len)| len).sum()
    }
}

/// A fixture shared by the groups that measure it.
type Shared = Rc<RefCell<Fixture>>;

struct Ctx {
    rt: tokio::runtime::Runtime,
    engine: Arc<StasisEngine>,
    cache: ModuleCache,
    store: LocalSnapshotStore,
    dir: PathBuf,
    fixtures: RefCell<BTreeMap<(Density, usize), Shared>>,
    _tmp: tempfile::TempDir,
}

fn config() -> InstanceConfig {
    InstanceConfig::new("bench", "worker-1", Vec::new())
}

fn probe() -> Request {
    engine::request("GET", "/", Vec::new())
}

impl Ctx {
    fn new() -> Self {
        let limits = Limits {
            max_memory: MAX_MEMORY,
            cpu_limit: Duration::from_secs(120),
            request_timeout: Duration::from_secs(300),
            ..Limits::default()
        };
        let engine = engine::engine(limits);
        let cache = engine::module_cache(&engine);
        // Same filesystem as the data dir would be (the target folder's).
        let tmp = tempfile::Builder::new()
            .prefix("stasis-bench-")
            .tempdir()
            .expect("temp dir");
        let store = LocalSnapshotStore::open(tmp.path().join("snapshots"), None).expect("store");
        Self {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime"),
            engine,
            cache,
            store,
            dir: tmp.path().to_owned(),
            fixtures: RefCell::default(),
            _tmp: tmp,
        }
    }

    fn spawn(&self, template: &Arc<Template>, config: InstanceConfig) -> ActorInstance {
        self.rt
            .block_on(ActorInstance::spawn(&self.engine, template.clone(), config))
            .expect("spawn")
    }

    fn restore(&self, template: &Arc<Template>, bytes: &[u8]) -> ActorInstance {
        let restore = engine::restore(&self.engine, template.clone(), bytes, config());
        self.rt.block_on(restore)
    }

    /// The fixture of a case, built on first use (so a filtered run builds
    /// only what it measures) and kept for the later groups.
    fn fixture(&self, density: Density, mib: usize) -> Shared {
        if let Some(f) = self.fixtures.borrow().get(&(density, mib)) {
            return f.clone();
        }
        let label = format!("{}-{mib}MiB", density.name());
        let template = self
            .cache
            .load(&fill_module(mib, density.stride()))
            .expect("fill module loads");
        let mut instance = self.spawn(&template, config());
        assert_eq!(instance.memory_bytes(), (mib * MIB) as u64);
        let (snapshot, stats) = snapshot::capture(&mut instance).expect("capture");
        let header = snapshot::verify_header(&snapshot).expect("header");
        let runs: Vec<(usize, usize)> = header.memories[0]
            .runs
            .iter()
            .map(|r| {
                (
                    r.first_page as usize * PAGE_SIZE,
                    r.pages as usize * PAGE_SIZE,
                )
            })
            .collect();
        let first = header.memories[0].runs[0].file_offset as usize;
        let payload = first..snapshot.len() - 4;
        assert_eq!(payload.len(), stats.stored_pages as usize * PAGE_SIZE);
        // The restored memory must equal the original, and be callable.
        let mut restored = self.restore(&template, &snapshot);
        assert!(restored.memory_data(0) == instance.memory_data(0));
        let answer = self.rt.block_on(restored.call(&probe())).expect("call");
        assert_eq!(answer.status, 200);
        drop(restored);
        report_size(&label, &snapshot, &stats);
        let fixture = Rc::new(RefCell::new(Fixture {
            label,
            template,
            instance,
            snapshot,
            runs,
            payload,
        }));
        self.fixtures
            .borrow_mut()
            .insert((density, mib), fixture.clone());
        fixture
    }
}

/// Item 4: snapshot size against the non-zero 4 KiB pages it stores.
fn report_size(label: &str, snapshot: &[u8], stats: &CaptureStats) {
    let runs: usize = snapshot::verify_header(snapshot)
        .expect("header")
        .memories
        .iter()
        .map(|m| m.runs.len())
        .sum();
    let nonzero = stats.stored_pages * PAGE_SIZE as u64;
    let overhead = stats.file_bytes as f64 / nonzero as f64 - 1.0;
    println!(
        "snapshot-size: case={label} memory_bytes={} nonzero_pages={} nonzero_bytes={nonzero} \
         runs={runs} file_bytes={} overhead={:.3}%",
        stats.memory_bytes,
        stats.stored_pages,
        stats.file_bytes,
        overhead * 100.0
    );
}

fn cases() -> Vec<(Density, usize)> {
    let mut out = Vec::new();
    for &mib in sizes() {
        for density in [Density::Dense, Density::Sparse] {
            out.push((density, mib));
        }
    }
    out
}

/// `bytes` in a page-aligned buffer. glibc's `memcpy` is up to 4× slower
/// between buffers that differ in their offset within a cache line
/// (`runtime/src/snapshot.rs`, `copy`), and a `Vec` starts 16 bytes into its
/// malloc chunk: the baselines copy between page-aligned buffers, the best
/// case.
fn aligned_copy(bytes: &[u8]) -> MmapMut {
    let mut map = MmapMut::map_anon(bytes.len()).expect("mmap");
    map.copy_from_slice(bytes);
    map
}

/// Times `run` once per iteration; `after` (untimed) disposes of its result.
fn timed<T>(iters: u64, mut run: impl FnMut() -> T, mut after: impl FnMut(T)) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let out = run();
        total += start.elapsed();
        after(black_box(out));
    }
    total
}

fn bench_capture(c: &mut Criterion, ctx: &Ctx) {
    let mut group = c.benchmark_group("capture");
    group.sampling_mode(SamplingMode::Flat);
    for (density, mib) in cases() {
        let case = format!("{}-{mib}MiB", density.name());
        group.throughput(Throughput::Bytes((mib * MIB) as u64));
        group.bench_function(BenchmarkId::new("capture", &case), |b| {
            let f = ctx.fixture(density, mib);
            let mut f = f.borrow_mut();
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || snapshot::capture(&mut f.instance).expect("capture"),
                    drop,
                )
            });
        });
        group.bench_function(BenchmarkId::new("capture_into_reused_buffer", &case), |b| {
            let f = ctx.fixture(density, mib);
            let mut f = f.borrow_mut();
            let mut out = Vec::new();
            snapshot::capture_into(&mut f.instance, &mut out).expect("capture");
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || snapshot::capture_into(&mut f.instance, &mut out).expect("capture"),
                    drop,
                )
            });
        });
        group.bench_function(BenchmarkId::new("memcpy_touched_dst", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let memory = f.instance.memory_data(0).expect("memory 0");
            // Page-aligned like the memory, so the copy takes glibc's best
            // path (see `aligned_copy`), and touched.
            let mut dst = MmapMut::map_anon(f.stored_bytes()).expect("mmap");
            dst.fill(1);
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        let mut at = 0;
                        for &(start, len) in &f.runs {
                            dst[at..at + len].copy_from_slice(&memory[start..start + len]);
                            at += len;
                        }
                        at
                    },
                    drop,
                )
            });
        });
        group.bench_function(BenchmarkId::new("zero_scan", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let memory = f.instance.memory_data(0).expect("memory 0");
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        memory
                            .chunks(PAGE_SIZE)
                            .filter(|p| !snapshot::page_is_zero(p))
                            .count()
                    },
                    drop,
                )
            });
        });
    }
    group.finish();
}

fn bench_restore(c: &mut Criterion, ctx: &Ctx) {
    let mut group = c.benchmark_group("restore");
    group.sampling_mode(SamplingMode::Flat);
    for (density, mib) in cases() {
        let case = format!("{}-{mib}MiB", density.name());
        group.throughput(Throughput::Bytes((mib * MIB) as u64));
        group.bench_function(BenchmarkId::new("restore", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let verified = snapshot::verify(&f.snapshot, &f.template, MAX_MEMORY).expect("verify");
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        ctx.rt
                            .block_on(snapshot::restore(
                                &ctx.engine,
                                f.template.clone(),
                                config(),
                                &verified,
                            ))
                            .expect("restore")
                    },
                    drop,
                )
            });
        });
        group.bench_function(BenchmarkId::new("memcpy_fresh_mmap", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let src = aligned_copy(&f.snapshot[f.payload.clone()]);
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        let mut map = MmapMut::map_anon(src.len()).expect("mmap");
                        map.copy_from_slice(&src);
                        map
                    },
                    drop,
                )
            });
        });
        if density == Density::Sparse {
            continue;
        }
        group.bench_function(BenchmarkId::new("memcpy_fresh_mmap_thp", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let src = aligned_copy(&f.snapshot[f.payload.clone()]);
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        let mut map = MmapMut::map_anon(src.len()).expect("mmap");
                        // A hint: ignored where THP is off.
                        let _ = map.advise(memmap2::Advice::HugePage);
                        map.copy_from_slice(&src);
                        map
                    },
                    drop,
                )
            });
        });
    }
    group.finish();
}

/// Memory sizes of `restore_size` (MiB): 1 GiB only where it fits twice in
/// the available RAM (a live fixture, its snapshot, a restored copy).
fn scaling_sizes() -> Vec<usize> {
    if test_mode() {
        return vec![1, 16];
    }
    let available_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(0, |kib| kib / 1024);
    let mut sizes = vec![1, 16, 128];
    if available_mib >= 5 * 1024 {
        sizes.push(1024);
    }
    sizes
}

/// Issue 13: restore time against memory size, copying and copy-on-write,
/// in one group (the copy-on-write line should be flat).
fn bench_restore_size(c: &mut Criterion, ctx: &Ctx) {
    let mut group = c.benchmark_group("restore_size");
    group.sampling_mode(SamplingMode::Flat);
    for mib in scaling_sizes() {
        let case = format!("{mib}MiB");
        let template = ctx
            .cache
            .load(&fill_module(mib, 1))
            .expect("fill module loads");
        let (snapshot, stats) = {
            let mut instance = ctx.spawn(&template, config());
            snapshot::capture(&mut instance).expect("capture")
        };
        let actor = format!("size-{mib}");
        ctx.store.write(&actor, 1, 0, &snapshot).expect("write");
        let stored = ctx.store.open_snapshot(&actor, 1).expect("open");
        let from_file = snapshot::verify(stored, &template, MAX_MEMORY).expect("verify");
        {
            let copy =
                snapshot::verify(snapshot.as_slice(), &template, MAX_MEMORY).expect("verify");
            let a = ctx
                .rt
                .block_on(snapshot::restore(
                    &ctx.engine,
                    template.clone(),
                    config(),
                    &copy,
                ))
                .expect("restore");
            let b = ctx
                .rt
                .block_on(snapshot::restore(
                    &ctx.engine,
                    template.clone(),
                    config(),
                    &from_file,
                ))
                .expect("restore");
            assert!(b.mapped_runs() > 0, "the file is mapped");
            assert!(a.memory_data(0) == b.memory_data(0), "CoW restore differs");
            println!(
                "restore-size: case={case} stored_bytes={} mapped_bytes={} mapped_runs={}",
                stats.stored_pages * PAGE_SIZE as u64,
                b.mapped_bytes(),
                b.mapped_runs()
            );
        }
        let iters_cap = |iters: u64| if mib >= 1024 { iters.min(3) } else { iters };
        group.throughput(Throughput::Bytes((mib * MIB) as u64));
        group.bench_function(BenchmarkId::new("copy", &case), |b| {
            let copy =
                snapshot::verify(snapshot.as_slice(), &template, MAX_MEMORY).expect("verify");
            b.iter_custom(|iters| {
                let n = iters_cap(iters);
                let d = timed(
                    n,
                    || {
                        ctx.rt
                            .block_on(snapshot::restore(
                                &ctx.engine,
                                template.clone(),
                                config(),
                                &copy,
                            ))
                            .expect("restore")
                    },
                    drop,
                );
                d.mul_f64(iters as f64 / n as f64)
            });
        });
        group.bench_function(BenchmarkId::new("cow", &case), |b| {
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        ctx.rt
                            .block_on(snapshot::restore(
                                &ctx.engine,
                                template.clone(),
                                config(),
                                &from_file,
                            ))
                            .expect("restore")
                    },
                    drop,
                )
            });
        });
        group.bench_function(BenchmarkId::new("memcpy_fresh_mmap", &case), |b| {
            let src = aligned_copy(
                &snapshot[snapshot.len() - 4 - (stats.stored_pages as usize * PAGE_SIZE)
                    ..snapshot.len() - 4],
            );
            b.iter_custom(|iters| {
                let n = iters_cap(iters);
                let d = timed(
                    n,
                    || {
                        let mut map = MmapMut::map_anon(src.len()).expect("mmap");
                        map.copy_from_slice(&src);
                        map
                    },
                    drop,
                );
                d.mul_f64(iters as f64 / n as f64)
            });
        });
        drop(from_file);
        ctx.store.remove_actor(&actor).expect("remove");
    }
    group.finish();
}

/// Issue 13: the cost of the first write (through the guest) and the first
/// read (from Rust) of every 4 KiB page right after a restore, per page.
fn bench_first_touch(c: &mut Criterion, ctx: &Ctx) {
    let mib = 16;
    let template = ctx
        .cache
        .load(&touch_module(mib))
        .expect("touch module loads");
    let snapshot = {
        let mut instance = ctx.spawn(&template, config());
        snapshot::capture(&mut instance).expect("capture").0
    };
    ctx.store.write("touch", 1, 0, &snapshot).expect("write");
    let stored = ctx.store.open_snapshot("touch", 1).expect("open");
    let from_file = snapshot::verify(stored, &template, MAX_MEMORY).expect("verify");
    let copy = snapshot::verify(snapshot.as_slice(), &template, MAX_MEMORY).expect("verify");
    let pages = ((mib * MIB - 65536) / PAGE_SIZE) as u64;
    let restore = |cow: bool| {
        let restored = if cow {
            ctx.rt.block_on(snapshot::restore(
                &ctx.engine,
                template.clone(),
                config(),
                &from_file,
            ))
        } else {
            ctx.rt.block_on(snapshot::restore(
                &ctx.engine,
                template.clone(),
                config(),
                &copy,
            ))
        };
        restored.expect("restore")
    };
    let mut group = c.benchmark_group("first_touch");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(pages));
    for (name, cow) in [("write_after_copy", false), ("write_after_cow", true)] {
        group.bench_function(BenchmarkId::new(name, "dense-16MiB"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut inst = restore(cow);
                    assert_eq!(inst.mapped_runs() > 0, cow);
                    let start = Instant::now();
                    let answer = ctx.rt.block_on(inst.call(&probe())).expect("call");
                    total += start.elapsed();
                    assert_eq!(answer.status, 200);
                    drop(inst);
                }
                total
            });
        });
    }
    for (name, cow) in [("read_after_copy", false), ("read_after_cow", true)] {
        group.bench_function(BenchmarkId::new(name, "dense-16MiB"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let inst = restore(cow);
                    let memory = inst.memory_data(0).expect("memory 0");
                    let start = Instant::now();
                    let sum: u64 = memory[65536..]
                        .iter()
                        .step_by(PAGE_SIZE)
                        .map(|&b| u64::from(b))
                        .sum();
                    total += start.elapsed();
                    black_box(sum);
                    drop(inst);
                }
                total
            });
        });
    }
    group.finish();
    drop(from_file);
    ctx.store.remove_actor("touch").expect("remove");
}

fn bench_persist(c: &mut Criterion, ctx: &Ctx) {
    let mut group = c.benchmark_group("persist");
    group.sampling_mode(SamplingMode::Flat);
    for (density, mib) in cases() {
        let case = format!("{}-{mib}MiB", density.name());
        // Each store write is paired with a plain write + fsync of the same
        // bytes just before it (untimed for criterion); the ratio of each
        // pair is printed, as disk latency drifts between benchmarks.
        let mut ratios = Vec::new();
        group.bench_function(BenchmarkId::new("store_write", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let actor = format!("persist-{}", f.label.to_lowercase());
            let path = ctx.dir.join("paired.bin");
            let mut seq = 0;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    write_fsync(&path, &f.snapshot);
                    let plain = start.elapsed();
                    std::fs::remove_file(&path).expect("remove");
                    seq += 1;
                    let start = Instant::now();
                    ctx.store.write(&actor, seq, 0, &f.snapshot).expect("write");
                    let d = start.elapsed();
                    total += d;
                    ratios.push(d.as_secs_f64() / plain.as_secs_f64());
                    ctx.store.remove(&actor, seq).expect("remove");
                }
                total
            });
        });
        report_ratios(
            &format!("persist/{case}"),
            "store_write/fs_write_fsync",
            &ratios,
        );
        group.bench_function(BenchmarkId::new("fs_write_fsync", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            let path = ctx.dir.join("plain.bin");
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || write_fsync(&path, &f.snapshot),
                    |()| std::fs::remove_file(&path).expect("remove"),
                )
            });
        });
    }
    group.finish();
}

/// Prints the quartiles of paired ratios as a `paired-ratio:` line.
fn report_ratios(name: &str, what: &str, ratios: &[f64]) {
    if ratios.is_empty() {
        return;
    }
    println!(
        "paired-ratio: {name} {what} n={} p25={:.3} p50={:.3} p75={:.3}",
        ratios.len(),
        percentile(ratios, 25.0),
        percentile(ratios, 50.0),
        percentile(ratios, 75.0)
    );
}

fn bench_load(c: &mut Criterion, ctx: &Ctx) {
    let mut group = c.benchmark_group("load");
    group.sampling_mode(SamplingMode::Flat);
    for (density, mib) in cases() {
        let case = format!("{}-{mib}MiB", density.name());
        let actor = format!("load-{case}").to_lowercase();
        group.bench_function(BenchmarkId::new("map_and_verify", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            ctx.store.write(&actor, 1, 0, &f.snapshot).expect("write");
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        let map = ctx.store.open_snapshot(&actor, 1).expect("open");
                        let header = snapshot::verify(&map, &f.template, MAX_MEMORY)
                            .expect("verify")
                            .into_header();
                        (map, header)
                    },
                    drop,
                )
            });
        });
        group.bench_function(BenchmarkId::new("fs_read_touched_dst", &case), |b| {
            let f = ctx.fixture(density, mib);
            let f = f.borrow();
            ctx.store.write(&actor, 1, 0, &f.snapshot).expect("write");
            let path = ctx.store.path(&actor, 1);
            let mut dst = vec![1u8; f.snapshot.len()];
            b.iter_custom(|iters| {
                timed(
                    iters,
                    || {
                        File::open(&path)
                            .and_then(|mut file| file.read_exact(&mut dst))
                            .expect("read");
                    },
                    drop,
                )
            });
        });
    }
    group.finish();
}

fn bench_cold_start(c: &mut Criterion, ctx: &Ctx) {
    let kv = STASIS.demo_wasm("kv");
    let template = ctx.cache.load(&kv).expect("kv loads");
    let kv_config = || {
        InstanceConfig::new(
            "bench",
            "worker-1",
            vec![("KV_PRELOAD".into(), KV_PRELOAD.into())],
        )
    };
    let mut instance = ctx.spawn(&template, kv_config());
    let (bytes, stats) = snapshot::capture(&mut instance).expect("capture");
    report_size("kv-preload-100k", &bytes, &stats);
    // The restored actor has the preloaded keys.
    let mut restored = ctx.restore(&template, &bytes);
    let get = engine::request("GET", "/k99999", Vec::new());
    let answer = ctx.rt.block_on(restored.call(&get)).expect("call");
    assert_eq!(answer.status, 200);
    drop((instance, restored));
    ctx.store.write("kv-cold", 0, 0, &bytes).expect("write");

    let mut group = c.benchmark_group("cold_start");
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("kv-100k/spawn_and_init", |b| {
        b.iter_custom(|iters| timed(iters, || ctx.spawn(&template, kv_config()), drop));
    });
    group.bench_function("kv-100k/restore", |b| {
        let verified = snapshot::verify(&bytes, &template, MAX_MEMORY).expect("verify");
        b.iter_custom(|iters| {
            timed(
                iters,
                || {
                    ctx.rt
                        .block_on(snapshot::restore(
                            &ctx.engine,
                            template.clone(),
                            kv_config(),
                            &verified,
                        ))
                        .expect("restore")
                },
                drop,
            )
        });
    });
    group.bench_function("kv-100k/load_verify_restore", |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                || {
                    let map = ctx.store.open_snapshot("kv-cold", 0).expect("open");
                    let verified = snapshot::verify(&map, &template, MAX_MEMORY).expect("verify");
                    ctx.rt
                        .block_on(snapshot::restore(
                            &ctx.engine,
                            template.clone(),
                            kv_config(),
                            &verified,
                        ))
                        .expect("restore")
                },
                drop,
            )
        });
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1))
        .nresamples(20_000)
        // Criterion's own plots take seconds per benchmark on this machine;
        // docs/benchmarks/plot.py draws one SVG per group from its data.
        .without_plots()
        .configure_from_args();
    let started = Instant::now();
    let ctx = Ctx::new();
    bench_capture(&mut c, &ctx);
    bench_restore(&mut c, &ctx);
    bench_restore_size(&mut c, &ctx);
    bench_first_touch(&mut c, &ctx);
    bench_persist(&mut c, &ctx);
    bench_load(&mut c, &ctx);
    ctx.fixtures.borrow_mut().clear();
    bench_cold_start(&mut c, &ctx);
    c.final_summary();
    println!(
        "snapshot benches finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
