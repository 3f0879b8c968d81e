//! Values per namespace read from the directory and kept for a bound
//! ([`Kept`]): the quotas and policies the ingress consults on every
//! request. A kept value is served from memory; once older than the bound
//! it is still served while one task reads it again, so no request waits
//! on the directory but the first for a namespace, and a directory that is
//! down or slow leaves the last value in force (a change applies within
//! the bound plus one read).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stasis_contract::directory::Directory;
use stasis_contract::error::ApiError;

/// Most namespaces kept; past it the cache starts over.
const MAX_KEPT: usize = 10_000;

/// How a value is read from the directory.
pub(crate) type Read<T> = fn(&dyn Directory, &str) -> Result<T, ApiError>;

struct Entry<T> {
    value: T,
    /// When it was read (or last tried).
    at: Instant,
    /// Whether a task is reading it again.
    refreshing: bool,
}

/// Values of type `T` by namespace, kept for a bound (module docs).
pub(crate) struct Kept<T> {
    entries: Arc<Mutex<HashMap<String, Entry<T>>>>,
    bound: Duration,
    what: &'static str,
}

impl<T: Clone + Send + 'static> Kept<T> {
    /// Values kept for `bound`, named `what` in logs.
    pub(crate) fn new(bound: Duration, what: &'static str) -> Self {
        Self {
            entries: Arc::default(),
            bound,
            what,
        }
    }

    fn lock(
        entries: &Mutex<HashMap<String, Entry<T>>>,
    ) -> MutexGuard<'_, HashMap<String, Entry<T>>> {
        entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Namespace `key`'s value: as kept; read again in the background when
    /// older than the bound; read now (with `read`) when none is kept.
    ///
    /// # Errors
    /// The directory's, for a first read only.
    pub(crate) async fn get(
        &self,
        directory: &Arc<dyn Directory>,
        key: &str,
        read: Read<T>,
    ) -> Result<T, ApiError> {
        {
            let mut entries = Self::lock(&self.entries);
            if let Some(entry) = entries.get_mut(key) {
                if entry.at.elapsed() >= self.bound && !entry.refreshing {
                    entry.refreshing = true;
                    self.refresh(directory, key, read);
                }
                return Ok(entry.value.clone());
            }
        }
        let (directory, owned) = (directory.clone(), key.to_owned());
        let value = tokio::task::spawn_blocking(move || read(directory.as_ref(), &owned))
            .await
            .map_err(|e| ApiError::internal(format!("directory task: {e}")))??;
        self.put(key, value.clone());
        Ok(value)
    }

    /// Keeps `value` for namespace `key` (just written here).
    pub(crate) fn put(&self, key: &str, value: T) {
        let mut entries = Self::lock(&self.entries);
        if entries.len() >= MAX_KEPT && !entries.contains_key(key) {
            entries.clear();
        }
        entries.insert(
            key.to_owned(),
            Entry {
                value,
                at: Instant::now(),
                refreshing: false,
            },
        );
    }

    /// Reads namespace `key`'s value again in a task of its own; a failed
    /// read keeps the old value and is tried again after the bound.
    fn refresh(&self, directory: &Arc<dyn Directory>, key: &str, read: Read<T>) {
        let (entries, directory, key, what) = (
            self.entries.clone(),
            directory.clone(),
            key.to_owned(),
            self.what,
        );
        tokio::task::spawn_blocking(move || {
            let read = read(directory.as_ref(), &key);
            let mut entries = Self::lock(&entries);
            let Some(entry) = entries.get_mut(&key) else {
                return;
            };
            match read {
                Ok(value) => entry.value = value,
                Err(e) => tracing::warn!(
                    namespace = key,
                    "reading the {what} again: {e}; the last one holds"
                ),
            }
            entry.at = Instant::now();
            entry.refreshing = false;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stale_value_is_served_while_it_is_read_again() {
        let directory: Arc<dyn Directory> =
            Arc::new(crate::tests::fakes::MemoryDirectory::default());
        let kept: Kept<u64> = Kept::new(Duration::from_millis(0), "test value");
        kept.put("a", 1);
        // Older than the bound: served as kept, read again behind it.
        let read: Read<u64> = |_, _| Ok(2);
        assert_eq!(kept.get(&directory, "a", read).await.expect("kept"), 1);
        for _ in 0..200 {
            if kept.get(&directory, "a", read).await.expect("kept") == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            kept.get(&directory, "a", read).await.expect("read again"),
            2
        );
        // A failed read keeps the last value; none kept: the error.
        let failing: Read<u64> = |_, _| Err(ApiError::internal("down"));
        assert_eq!(kept.get(&directory, "a", failing).await.expect("kept"), 2);
        assert!(kept.get(&directory, "b", failing).await.is_err());
    }
}
