//! [`QuotaUsage`]: the bytes a snapshot store holds, counted against its
//! optional quota (`--snapshot-quota`). Both stores count the same way:
//! a write reserves its bytes before it starts (replacing what the same
//! name held), a failed write or a removal gives them back.

use std::sync::Mutex;

use crate::snapshot_store::StoreError;

/// Bytes in use and the quota they may not exceed (module docs).
#[derive(Debug)]
pub(crate) struct QuotaUsage {
    quota: Option<u64>,
    used: Mutex<u64>,
}

impl QuotaUsage {
    /// `used_bytes` already in use, capped at `quota` bytes (none: no cap).
    pub(crate) fn new(quota: Option<u64>, used_bytes: u64) -> Self {
        Self {
            quota,
            used: Mutex::new(used_bytes),
        }
    }

    /// The quota in bytes, if any.
    pub(crate) fn quota(&self) -> Option<u64> {
        self.quota
    }

    /// Bytes in use now.
    pub(crate) fn used_bytes(&self) -> u64 {
        *self.lock()
    }

    /// Counts `len` new bytes replacing `replaced` ones.
    ///
    /// # Errors
    /// [`StoreError::Quota`] (nothing counted) if that would pass the quota.
    pub(crate) fn reserve(&self, len: u64, replaced: u64) -> Result<(), StoreError> {
        let mut used = self.lock();
        let after = used.saturating_sub(replaced).saturating_add(len);
        if let Some(quota) = self.quota
            && after > quota
        {
            return Err(StoreError::Quota {
                needed: len,
                used: *used,
                quota,
            });
        }
        *used = after;
        Ok(())
    }

    /// Counts `now` bytes instead of the `counted` ones (a failed write
    /// undone: what is under its name now).
    pub(crate) fn recount(&self, counted: u64, now: u64) {
        let mut used = self.lock();
        *used = used.saturating_sub(counted).saturating_add(now);
    }

    /// Gives back `len` bytes that were removed.
    pub(crate) fn release(&self, len: u64) {
        self.recount(len, 0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}
