//! Restore: a [`VerifiedSnapshot`] written back into a fresh instance of
//! its template's resume variant.

use std::sync::Arc;

use wasmtime::Val;

use super::format::{GlobalValue, SnapshotError, VerifiedSnapshot};
use super::memory::{PAGE_SIZE, copy, prepare_fresh};
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
/// `template`'s resume variant: grows each memory to its recorded size, writes every stored page
/// once, sets every global and starts the virtual clock where it stopped.
/// Does not call `on_resume` (the caller decides).
///
/// # Errors
/// [`RestoreError`] if the snapshot was verified against another template,
/// instantiation traps, or a memory cannot grow to the recorded size under
/// this engine's limits.
pub async fn restore<B: AsRef<[u8]>>(
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
        let data = memory.data_mut(&mut instance.store);
        for run in &image.runs {
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

fn global_val(value: &GlobalValue) -> Val {
    match value.kind {
        GlobalKind::I32 => Val::I32(value.bits as u32 as i32),
        GlobalKind::I64 => Val::I64(value.bits as u64 as i64),
        GlobalKind::F32 => Val::F32(value.bits as u32),
        GlobalKind::F64 => Val::F64(value.bits as u64),
        GlobalKind::V128 => Val::V128(value.bits.into()),
    }
}
