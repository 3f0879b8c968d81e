//! Restore: a [`VerifiedSnapshot`] written back into a fresh instance of
//! its template's resume variant, copy-on-write where the snapshot is a
//! file on local disk ([`crate::cow`]), by copying otherwise.

use std::fs::File;
use std::sync::Arc;

use wasmtime::Val;

use super::chain::VerifiedChain;
use super::format::{GlobalValue, PAGE_SIZE, SnapshotError};
use super::memory::{copy, prepare_fresh};
use super::patch::{apply, write_image};
use super::source::SnapshotSource;
use super::verify::VerifiedSnapshot;
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
/// segments, research notes pitfall 1), or, for a snapshot taken on the
/// module's initial image (format version 3), the image's: it is copied in
/// first, and the file's zero runs and patches land on it.
///
/// # Errors
/// [`RestoreError`] if the snapshot is a delta (restore its
/// [`VerifiedChain`] with [`restore_chain`]), was verified against another
/// template, instantiation traps, or a memory cannot grow to the recorded
/// size under this engine's limits.
pub async fn restore<B: SnapshotSource>(
    engine: &StasisEngine,
    template: Arc<Template>,
    config: InstanceConfig,
    snapshot: &VerifiedSnapshot<B>,
) -> Result<ActorInstance, RestoreError> {
    if let Some(base) = snapshot.header().base {
        return Err(SnapshotError::Layout(format!(
            "the snapshot is a delta on snapshot {}: restore its chain",
            base.seq
        ))
        .into());
    }
    restore_links(engine, template, config, &[snapshot]).await
}

/// Restores a [`VerifiedChain`] as [`restore`] restores one snapshot: the
/// full snapshot's pages, then each delta's pages and zero runs over them
/// in order (mapped or copied as in [`restore`]; the largest runs of the
/// whole chain are the ones mapped), then the last link's globals and
/// clock.
///
/// # Errors
/// As [`restore`].
pub async fn restore_chain<B: SnapshotSource>(
    engine: &StasisEngine,
    template: Arc<Template>,
    config: InstanceConfig,
    chain: &VerifiedChain<B>,
) -> Result<ActorInstance, RestoreError> {
    let links: Vec<&VerifiedSnapshot<B>> = chain.links().map(|(_, s)| s).collect();
    restore_links(engine, template, config, &links).await
}

/// Maps the page runs of the full snapshot `snapshot`, a file just
/// captured from `instance` and written, copy-on-write over the live
/// memory where they hold exactly what the memory holds now, as a restore
/// from that file would ([`restore`]: runs of at least
/// [`MIN_MAPPED_RUN_BYTES`], within the mapping budget); returns the bytes
/// mapped. The memory's content does not change; what changes is what
/// dirty tracking ([`dirty`](super::dirty)) reports afterwards: pages the
/// guest wrote before the snapshot (an actor never restored since its
/// create, whose every written page is anonymous memory) no longer count,
/// so the next delta compares only the pages written since with the chain,
/// not the whole memory. Each run is compared with the memory first, so a
/// run that differs (or a snapshot that is not this instance's state) is
/// left alone. Call it only between guest calls.
#[must_use]
pub fn map_written_snapshot<B: SnapshotSource>(
    engine: &StasisEngine,
    instance: &mut ActorInstance,
    snapshot: &VerifiedSnapshot<B>,
) -> u64 {
    let Some(file) = snapshot.source().file() else {
        return 0;
    };
    if snapshot.header().base.is_some() {
        return 0;
    }
    let bytes = snapshot.bytes();
    let chosen = choose_mapped_runs(engine, instance, &[snapshot]);
    let mut mapped = 0u64;
    for &(_, index, n) in &chosen {
        let Some(run) = snapshot
            .header()
            .memories
            .get(index)
            .and_then(|image| image.runs.get(n))
        else {
            instance.cow.uncharge(1);
            continue;
        };
        let (offset, len) = (
            run.first_page as usize * PAGE_SIZE,
            run.pages as usize * PAGE_SIZE,
        );
        let src = run.file_offset as usize;
        let same = instance
            .memory_data(index)
            .and_then(|data| data.get(offset..offset + len))
            .zip(bytes.get(src..src + len))
            .is_some_and(|(now, file_bytes)| now == file_bytes);
        if !same {
            instance.cow.uncharge(1);
            continue;
        }
        match map_run(instance, index, offset, len, file, run.file_offset) {
            Ok(()) => mapped += len as u64,
            Err(e) => tracing::debug!("mapping a written snapshot's run failed: {e}"),
        }
    }
    mapped
}

/// The restore of a chain's `links` (a full snapshot, then deltas in
/// order; checked to fit together by the caller).
async fn restore_links<B: SnapshotSource>(
    engine: &StasisEngine,
    template: Arc<Template>,
    config: InstanceConfig,
    links: &[&VerifiedSnapshot<B>],
) -> Result<ActorInstance, RestoreError> {
    let Some(head) = links.last().map(|s| s.header()) else {
        return Err(SnapshotError::Layout("an empty snapshot chain".to_owned()).into());
    };
    // Not a second verification: the snapshots were verified against a
    // template, and this only makes sure it is the same one.
    if let Some(other) = links
        .iter()
        .map(|s| s.header().module_digest)
        .find(|digest| *digest != template.info.digest)
    {
        return Err(SnapshotError::WrongModule {
            expected: hex::encode(template.info.digest),
            found: hex::encode(other),
        }
        .into());
    }
    let mut instance = ActorInstance::instantiate(
        engine,
        template,
        config,
        Start::Resume {
            clock_ns: head.clock_ns,
        },
    )
    .await?;
    // Huge-page advice would outlive the instance in a pooled slot and
    // change how later instances in that slot fault (research notes §4,
    // pitfall 9), and split the slot's mapping in three.
    let huge_pages = engine.slots().is_none();
    let memories = instance.memories.clone();
    grow_memories(engine, &mut instance, head)?;
    let chosen = choose_mapped_runs(engine, &mut instance, links);
    // Link by link, so every page ends with the last link's content: a
    // later link's run, mapped or copied, lands over an earlier one's.
    for (link, snapshot) in links.iter().enumerate() {
        let bytes = snapshot.bytes();
        let file = snapshot.source().file();
        for (index, (image, memory)) in snapshot.header().memories.iter().zip(&memories).enumerate()
        {
            if let Some(initial) = snapshot.image() {
                // A root on the module's image: the image first, then the
                // file's pages, zero runs and patches over it.
                let data = memory.data_mut(&mut instance.store);
                write_image(data, initial, index, image);
            }
            for (n, run) in image.runs.iter().enumerate() {
                let offset = run.first_page as usize * PAGE_SIZE;
                let len = run.pages as usize * PAGE_SIZE;
                if let Some(file) = file
                    && chosen.contains(&(link, index, n))
                {
                    match map_run(&mut instance, index, offset, len, file, run.file_offset) {
                        Ok(()) => continue,
                        Err(e) => {
                            tracing::debug!("mapping a snapshot run failed, copying it: {e}");
                        }
                    }
                }
                let src = run.file_offset as usize;
                let data = memory.data_mut(&mut instance.store);
                let dst = &mut data[offset..offset + len];
                if link == 0 {
                    // Fresh memory only: a delta's pages land on pages
                    // the chain already filled or mapped.
                    prepare_fresh(dst.as_ptr(), dst.len(), huge_pages);
                }
                copy(dst, &bytes[src..src + len]);
            }
            let data = memory.data_mut(&mut instance.store);
            // A root's zero runs name pages of fresh (zero) memory that the
            // image was not written to: filling them would only fault them in.
            if link > 0 {
                for zero in &image.zero_runs {
                    let start = zero.first_page as usize * PAGE_SIZE;
                    data[start..start + zero.pages as usize * PAGE_SIZE].fill(0);
                }
            }
            for patch in &image.patches {
                let start = patch.page as usize * PAGE_SIZE;
                apply(&mut data[start..start + PAGE_SIZE], patch, bytes);
            }
        }
    }
    let globals = instance.globals.clone();
    for (value, global) in head.globals.iter().zip(&globals) {
        global
            .set(&mut instance.store, global_val(value))
            .map_err(|e| CallError::Host(format!("setting global {}: {e:#}", value.index)))?;
    }
    // A file truncated or written while it was read or mapped above: what
    // landed in memory is not the snapshot (crate::mapped).
    for snapshot in links {
        snapshot
            .source()
            .intact()
            .map_err(SnapshotError::MappedFileChanged)?;
    }
    instance
        .mapped_intact()
        .map_err(SnapshotError::MappedFileChanged)?;
    Ok(instance)
}

/// Grows each memory of the fresh `instance` to the size `head` records.
fn grow_memories(
    engine: &StasisEngine,
    instance: &mut ActorInstance,
    head: &super::format::Header,
) -> Result<(), SnapshotError> {
    let memories = instance.memories.clone();
    for (image, memory) in head.memories.iter().zip(&memories) {
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
    Ok(())
}

/// A page run of a chain: (link index, memory index, run index in its
/// image).
type RunAt = (usize, usize, usize);

/// Picks the largest runs of at least [`MIN_MAPPED_RUN_BYTES`] of the
/// chain's files to map copy-on-write, as many as the mapping budget
/// allows, and charges them to `instance`; [`map_run`] maps each (or gives
/// its charge back when the mapping fails).
fn choose_mapped_runs<B: SnapshotSource>(
    engine: &StasisEngine,
    instance: &mut ActorInstance,
    links: &[&VerifiedSnapshot<B>],
) -> Vec<RunAt> {
    let mut eligible: Vec<(RunAt, u64)> = Vec::new();
    for (link, snapshot) in links.iter().enumerate() {
        if snapshot.source().file().is_none() {
            continue;
        }
        for (m, image) in snapshot.header().memories.iter().enumerate() {
            for (n, run) in image.runs.iter().enumerate() {
                if run.pages as usize * PAGE_SIZE >= MIN_MAPPED_RUN_BYTES {
                    eligible.push(((link, m, n), run.pages));
                }
            }
        }
    }
    eligible.sort_by_key(|(_, pages)| std::cmp::Reverse(*pages));
    let granted = instance
        .cow
        .charge(eligible.len(), cow::mapping_budget(engine.slots()));
    eligible.truncate(granted);
    eligible.into_iter().map(|(at, _)| at).collect()
}

/// Maps `len` bytes of `file` from `file_offset` over memory `index` at
/// `offset`, a run [`choose_mapped_runs`] charged; on failure the charge is
/// given back and the caller copies the run.
fn map_run(
    instance: &mut ActorInstance,
    index: usize,
    offset: usize,
    len: usize,
    file: &File,
    file_offset: u64,
) -> std::io::Result<()> {
    let result = match instance.memory_extent(index) {
        Some(extent) => instance
            .cow
            .map(index, extent, offset, len, file, file_offset),
        None => Err(std::io::Error::other("no such memory")),
    };
    if result.is_err() {
        instance.cow.uncharge(1);
    }
    result
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
