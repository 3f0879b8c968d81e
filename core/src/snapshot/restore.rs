//! Restore: a [`VerifiedSnapshot`] written back into a fresh instance of
//! its template's resume variant, copy-on-write where the snapshot is a
//! file on local disk ([`crate::cow`]), by copying otherwise.

use std::fs::File;
use std::sync::Arc;

use wasmtime::Val;

use super::format::{GlobalValue, PageRun, SnapshotError, VerifiedSnapshot};
use super::memory::{PAGE_SIZE, copy, prepare_fresh};
use super::source::SnapshotSource;
use crate::cow::{self, MIN_MAPPED_RUN_BYTES};
use crate::engine::StasisEngine;
use crate::instance::{ActorInstance, CallError, InstanceConfig, Start};
use crate::module::{GlobalKind, Template};

/// Why a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The snapshot does not fit here: it was verified against another
    /// template, or a memory cannot grow to its recorded size.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Instantiating the resume variant or writing state back failed.
    #[error(transparent)]
    Call(#[from] CallError),
}

/// Restores a [`VerifiedSnapshot`] (checked once by
/// [`verify`](super::verify()), not again here) into a fresh instance of
/// `template`'s resume variant: grows each memory to its recorded size, puts
/// every stored page in place once, sets every global and starts the
/// virtual clock where it stopped. Does not call `on_resume` (the caller
/// decides).
///
/// When the snapshot is a file ([`SnapshotSource::file`]), its page runs of
/// at least [`MIN_MAPPED_RUN_BYTES`] are mapped copy-on-write into the
/// memory instead of copied (the largest
/// [`MAX_MAPPED_RUNS_PER_INSTANCE`](cow::MAX_MAPPED_RUNS_PER_INSTANCE),
/// within the process's [`mapping_budget`](cow::mapping_budget)): the
/// restore's cost then does not grow with the memory, and a page is copied
/// only when the guest first writes it. Other runs are copied. Pages not in
/// the snapshot read zero either way (the resume variant has no data
/// segments, research notes pitfall 1).
///
/// # Errors
/// [`RestoreError`] if the snapshot was verified against another template,
/// instantiation traps, or a memory cannot grow to the recorded size under
/// this engine's limits.
pub async fn restore<B: SnapshotSource>(
    engine: &StasisEngine,
    template: Arc<Template>,
    config: InstanceConfig,
    snapshot: &VerifiedSnapshot<B>,
) -> Result<ActorInstance, RestoreError> {
    let header = snapshot.header();
    // Not a second verification: the snapshot was verified against a
    // template, and this only makes sure it is the same one.
    if header.module_digest != template.info.digest {
        return Err(SnapshotError::WrongModule {
            expected: hex::encode(template.info.digest),
            found: hex::encode(header.module_digest),
        }
        .into());
    }
    let bytes = snapshot.bytes();
    let mut instance = ActorInstance::instantiate(
        engine,
        template,
        config,
        Start::Resume {
            clock_ns: header.clock_ns,
        },
    )
    .await?;
    // Huge-page advice would outlive the instance in a pooled slot and
    // change how later instances in that slot fault (research notes §4,
    // pitfall 9), and split the slot's mapping in three.
    let huge_pages = engine.slots().is_none();
    let memories = instance.memories.clone();
    for (image, memory) in header.memories.iter().zip(&memories) {
        let current = memory.size(&instance.store);
        if image.wasm_pages > current {
            memory
                .grow(&mut instance.store, image.wasm_pages - current)
                .map_err(|e| {
                    SnapshotError::TooLarge(format!(
                        "memory {} cannot grow to {} pages ({} bytes) here \
                         (--max-memory is {} bytes): {e}",
                        image.index,
                        image.wasm_pages,
                        image.wasm_pages.saturating_mul(65536),
                        engine.limits().max_memory
                    ))
                })?;
        }
    }
    let mapped = match snapshot.source().file() {
        Some(file) => map_runs(engine, &mut instance, header, file),
        None => Vec::new(),
    };
    for (index, (image, memory)) in header.memories.iter().zip(&memories).enumerate() {
        let data = memory.data_mut(&mut instance.store);
        for (n, run) in image.runs.iter().enumerate() {
            if mapped.contains(&(index, n)) {
                continue;
            }
            let src = run.file_offset as usize;
            let dst = run.first_page as usize * PAGE_SIZE;
            let len = run.pages as usize * PAGE_SIZE;
            let dst = &mut data[dst..dst + len];
            prepare_fresh(dst.as_ptr(), dst.len(), huge_pages);
            copy(dst, &bytes[src..src + len]);
        }
    }
    let globals = instance.globals.clone();
    for (value, global) in header.globals.iter().zip(&globals) {
        global
            .set(&mut instance.store, global_val(value))
            .map_err(|e| CallError::Host(format!("setting global {}: {e:#}", value.index)))?;
    }
    Ok(instance)
}

/// Maps the largest runs of at least [`MIN_MAPPED_RUN_BYTES`] of `file`
/// copy-on-write into `instance`'s memories (already grown to their
/// recorded sizes), as many as the mapping budget allows; returns the
/// mapped runs as (memory index, run index in its image). A run whose
/// mapping fails is left to be copied.
fn map_runs(
    engine: &StasisEngine,
    instance: &mut ActorInstance,
    header: &super::Header,
    file: &File,
) -> Vec<(usize, usize)> {
    let mut eligible: Vec<(usize, usize, &PageRun)> = header
        .memories
        .iter()
        .enumerate()
        .flat_map(|(m, image)| image.runs.iter().enumerate().map(move |(n, r)| (m, n, r)))
        .filter(|(_, _, run)| run.pages as usize * PAGE_SIZE >= MIN_MAPPED_RUN_BYTES)
        .collect();
    eligible.sort_by_key(|(_, _, run)| std::cmp::Reverse(run.pages));
    let granted = instance
        .cow
        .charge(eligible.len(), cow::mapping_budget(engine.slots()));
    let mut mapped = Vec::with_capacity(granted);
    for &(m, n, run) in &eligible[..granted] {
        let Some(extent) = instance.memory_extent(m) else {
            instance.cow.uncharge(1);
            continue;
        };
        let offset = run.first_page as usize * PAGE_SIZE;
        let len = run.pages as usize * PAGE_SIZE;
        match instance
            .cow
            .map(m, extent, offset, len, file, run.file_offset)
        {
            Ok(()) => mapped.push((m, n)),
            Err(e) => {
                tracing::debug!("mapping a snapshot run failed, copying it: {e}");
                instance.cow.uncharge(1);
            }
        }
    }
    mapped
}

fn global_val(value: &GlobalValue) -> Val {
    match value.kind {
        GlobalKind::I32 => Val::I32(value.bits as u32 as i32),
        GlobalKind::I64 => Val::I64(value.bits as u64 as i64),
        GlobalKind::F32 => Val::F32(value.bits as u32),
        GlobalKind::F64 => Val::F64(value.bits as u64),
        GlobalKind::V128 => Val::V128(value.bits.into()),
    }
}
