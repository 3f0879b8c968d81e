//! A [`SnapshotStore`] over an object store shared by every worker of a
//! cluster: [`ObjectSnapshotStore`], through the `object_store` crate, on a
//! local folder (`file:///ABS/PATH`) or an S3 bucket
//! (`s3://BUCKET[/PREFIX]`), chosen by a [`StoreUrl`]. It also keeps
//! template modules ([`ObjectSnapshotStore::put_template`],
//! [`ObjectSnapshotStore::get_template`]).
//!
//! # Layout
//! Under the store's prefix (the `names` module has the exact forms):
//! `snapshots/<actor>/<seq:020>-<epoch:020>.snap`,
//! `snapshots/<actor>/acknowledged` (JSON `{"seq", "epoch"}`),
//! `snapshots/<actor>/clock.mark` and `templates/<digest>.wasm`.
//!
//! # Epochs
//! A snapshot is named by actor, sequence number and the placement epoch
//! of the worker that wrote it. When one sequence number exists under two
//! epochs, listing and opening use the highest epoch: a late write by a
//! worker that was fenced off (an older epoch) never shadows the snapshot
//! of the actor's new owner. The acknowledged pointer is only moved
//! forward in (epoch, seq) order as far as the writer can see (it reads
//! the pointer first, unless it holds the actor and its write took less
//! than the shortest lease margin, when no other owner can have moved it:
//! `pointer`; S3 offers no compare-and-swap everywhere, so two writers
//! racing may still leave the older one: the pointer only enables a
//! check, the snapshots themselves are what a restore uses).
//!
//! # Truth and cache
//! The object store is the truth: listings always ask it, since other
//! workers write it. Each store keeps a local cache (`cache_dir`, files
//! named like the objects: `snapshots/<actor>/<seq:020>-<epoch:020>.snap`)
//! holding what it wrote or downloaded; [`SnapshotStore::open_snapshot`]
//! maps the cached file when it is there (same name, same size) and
//! downloads it (temp file + rename) otherwise, so a worker never downloads
//! a snapshot twice. Objects are immutable once written. The one
//! exception to "listings always ask": an actor its worker *holds*
//! ([`SnapshotStore::hold`], the `held` module) is listed once per
//! placement, and its later opens are answered from what this store wrote
//! since, when the cache holds the copy.
//!
//! # Sync over async
//! The trait is synchronous, `object_store` is async: the store owns a
//! small tokio runtime (two threads named `stasis-objects`); each method
//! spawns its future there and waits for the answer with a blocking
//! channel receive on the calling thread (never `Handle::block_on`). It is
//! therefore safe to call from `spawn_blocking` threads, plain threads and
//! async tasks of another runtime (it blocks such a task's thread for the
//! call, as any synchronous I/O would). Every operation has a timeout: 30 s,
//! plus one second per MiB moved (see `remote`), so a dead store answers
//! `TimedOut` or a connection error, never a hang. Dropping the store shuts
//! its runtime down in the background (safe from async code).
//!
//! # Errors
//! [`StoreError::Io`] names the object by its key relative to the prefix
//! (`snapshots/a/...snap`) with a short reason in its message, never an
//! endpoint, a local path or a credential; [`StoreError::detail`] adds the
//! store URL and the full error for the server log. A missing object has
//! [`io::ErrorKind::NotFound`]. A write whose answer was lost is read back
//! before it is reported (the `upload` module): it succeeded if the object
//! holds the bytes sent, failed if not, and is [`StoreError::Unknown`] (it
//! may or may not have taken effect) if the read-back fails too.
//! Downloads are checked against the listed size and the snapshot's
//! CRC32C trailer before they are cached (the `transfer` module).
//!
//! # Unfinished uploads
//! Every failed multipart upload is aborted. Parts a killed process left
//! are swept when a `file://` store is opened (older than
//! [`STALE_UPLOAD_AGE`]); `object_store` cannot list an S3 bucket's
//! uploads, so an S3 bucket relies on its lifecycle rule
//! `AbortIncompleteMultipartUpload` (docs/operations.md).
//!
//! # S3 settings
//! [`ObjectSnapshotStore::open`] reads the standard variables
//! (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ALLOW_HTTP`, ... as `object_store`'s
//! `AmazonS3Builder::from_env`); [`ObjectSnapshotStore::open_with_s3_env`]
//! takes the same pairs explicitly. Path-style requests are used with a
//! custom endpoint.
//!
//! [`SnapshotStore`]: crate::snapshot_store::SnapshotStore
//! [`SnapshotStore::open_snapshot`]: crate::snapshot_store::SnapshotStore::open_snapshot
//! [`SnapshotStore::hold`]: crate::snapshot_store::SnapshotStore::hold

mod held;
mod names;
mod pointer;
mod remote;
mod segments;
mod snapshots;
mod transfer;
mod upload;
mod url;

use std::fs;
use std::io;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::{Path, PathPart};
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};

use self::remote::{Bridge, Failure, OP_TIMEOUT, timeout_for};
use self::transfer::Source;
pub use self::url::{StoreUrl, StoreUrlError};
use crate::durable::TEMP_SUFFIX;
use crate::snapshot_quota::QuotaUsage;
use crate::snapshot_store::StoreError;

/// Request timeout of the S3 client, unless `AWS_TIMEOUT` sets one: long,
/// since a big download is one request; each operation has its own
/// timeout on top (module docs).
const S3_REQUEST_TIMEOUT: &str = "1h";

/// A snapshot store over an object store (module docs).
pub struct ObjectSnapshotStore {
    url: StoreUrl,
    /// `url` as text, for [`SnapshotStore::location`] and error details.
    location: String,
    objects: Arc<dyn ObjectStore>,
    /// Prefix of every object (empty for a `file://` store: the folder is
    /// the root).
    prefix: Path,
    cache: PathBuf,
    /// Bytes of snapshot objects in the store: counted at open, then kept
    /// up to date by this process's writes and deletions (not by other
    /// workers').
    usage: QuotaUsage,
    downloads: AtomicU64,
    bridge: Bridge,
    /// The folders of the actors this store's worker holds
    /// ([`SnapshotStore::hold`]).
    ///
    /// [`SnapshotStore::hold`]: crate::snapshot_store::SnapshotStore::hold
    held: held::Held,
}

impl std::fmt::Debug for ObjectSnapshotStore {
    // By hand: the S3 client's own Debug may show credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectSnapshotStore")
            .field("url", &self.location)
            .field("cache", &self.cache)
            .field("quota", &self.usage.quota())
            .finish_non_exhaustive()
    }
}

impl ObjectSnapshotStore {
    /// Opens the store at `url` (`file://` or `s3://`; S3 settings from
    /// the environment, module docs) with its local cache in `cache_dir`
    /// (created; torn temp files removed) and an optional `quota` on the
    /// bytes of snapshot objects in the store. Opening lists the store's
    /// snapshots once: it checks the store answers and counts the bytes in
    /// use.
    ///
    /// # Errors
    /// [`StoreError::Io`] naming the URL if `url` is [`StoreUrl::Local`]
    /// (`InvalidInput`: that is the data dir's store), the S3 settings are
    /// incomplete, the folder or cache cannot be created, or the store
    /// cannot be listed (unreachable, no such bucket, refused credentials).
    pub fn open(
        url: &StoreUrl,
        cache_dir: &FsPath,
        quota: Option<u64>,
    ) -> Result<Self, StoreError> {
        Self::open_with(url, cache_dir, quota, AmazonS3Builder::from_env())
    }

    /// As [`ObjectSnapshotStore::open`], with the S3 settings given as
    /// environment-style pairs (`("AWS_ENDPOINT_URL", "http://...")`, ...)
    /// instead of read from the process environment; names not starting
    /// with `AWS_` or unknown to `object_store` are ignored, as by
    /// `AmazonS3Builder::from_env`.
    ///
    /// # Errors
    /// As [`ObjectSnapshotStore::open`].
    pub fn open_with_s3_env(
        url: &StoreUrl,
        cache_dir: &FsPath,
        quota: Option<u64>,
        vars: &[(String, String)],
    ) -> Result<Self, StoreError> {
        let mut builder = AmazonS3Builder::new();
        for (name, value) in vars {
            if name.starts_with("AWS_")
                && let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
            {
                builder = builder.with_config(key, value);
            }
        }
        Self::open_with(url, cache_dir, quota, builder)
    }

    fn open_with(
        url: &StoreUrl,
        cache_dir: &FsPath,
        quota: Option<u64>,
        s3: AmazonS3Builder,
    ) -> Result<Self, StoreError> {
        let location = url.to_string();
        let refuse = |problem: String, kind: io::ErrorKind, full: String| StoreError::Io {
            op: "open",
            key: location.clone(),
            path: format!("{location} ({full})"),
            source: io::Error::new(kind, problem),
        };
        let (objects, prefix): (Arc<dyn ObjectStore>, Path) = match url {
            StoreUrl::Local => {
                let why = "`local` is the data dir's own store, not an object store".to_owned();
                return Err(refuse(why.clone(), io::ErrorKind::InvalidInput, why));
            }
            StoreUrl::File(root) => {
                fs::create_dir_all(root).map_err(|e| {
                    refuse(
                        format!("cannot create the folder: {}", e.kind()),
                        e.kind(),
                        e.to_string(),
                    )
                })?;
                sweep_staged(root, STALE_UPLOAD_AGE);
                let local = LocalFileSystem::new_with_prefix(root)
                    .map_err(|e| {
                        let (source, full) = Failure::from(e).split();
                        refuse(source.to_string(), source.kind(), full)
                    })?
                    .with_fsync(true)
                    .with_automatic_cleanup(true);
                (Arc::new(local), Path::default())
            }
            StoreUrl::S3 { bucket, prefix } => {
                let timeout = AmazonS3ConfigKey::Client(ClientConfigKey::Timeout);
                let s3 = if s3.get_config_value(&timeout).is_none() {
                    s3.with_config(timeout, S3_REQUEST_TIMEOUT)
                } else {
                    s3
                };
                let retry = RetryConfig {
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(20),
                    ..RetryConfig::default()
                };
                let client = s3
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| {
                        let (_, full) = Failure::from(e).split();
                        // The builder's message names settings, not secrets.
                        refuse(
                            format!("bad S3 settings: {full}"),
                            io::ErrorKind::InvalidInput,
                            full,
                        )
                    })?;
                (Arc::new(client), Path::from(prefix.as_str()))
            }
        };
        let cache = cache_dir.to_path_buf();
        let cache_root = cache.join(names::SNAPSHOTS);
        fs::create_dir_all(&cache_root).map_err(|e| {
            refuse(
                format!("cannot create the cache folder: {}", e.kind()),
                e.kind(),
                e.to_string(),
            )
        })?;
        remove_torn(&cache_root);
        let bridge = Bridge::start().map_err(|e| {
            refuse(
                format!("cannot start the client threads: {e}"),
                e.kind(),
                e.to_string(),
            )
        })?;
        let mut store = Self {
            url: url.clone(),
            location: location.clone(),
            objects,
            prefix,
            cache,
            usage: QuotaUsage::new(quota, 0),
            downloads: AtomicU64::new(0),
            held: held::Held::default(),
            bridge,
        };
        let all = store
            .run(
                OP_TIMEOUT,
                transfer::list(store.objects.clone(), store.path(names::SNAPSHOTS)),
            )
            .map_err(|e| {
                let (source, full) = e.split();
                refuse(
                    format!("cannot list the store: {source}"),
                    source.kind(),
                    full,
                )
            })?;
        let used = all
            .iter()
            .filter(|meta| {
                meta.location
                    .filename()
                    .and_then(names::parse_snapshot_name)
                    .is_some()
            })
            .map(|meta| meta.size)
            .sum();
        store.usage = QuotaUsage::new(quota, used);
        Ok(store)
    }

    /// The store's URL.
    #[must_use]
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The cache file of snapshot `seq` of `actor` written at `epoch`
    /// (present once this store wrote or downloaded it).
    #[must_use]
    pub fn cache_path(&self, actor: &str, seq: u64, epoch: u64) -> PathBuf {
        self.cache
            .join(names::SNAPSHOTS)
            .join(actor)
            .join(names::snapshot_name(seq, epoch))
    }

    /// How many snapshots this store downloaded since it was opened (each
    /// is downloaded once, then served from the cache).
    #[must_use]
    pub fn downloads(&self) -> u64 {
        self.downloads.load(Ordering::Relaxed)
    }

    /// Stores template module `bytes` as `templates/<digest>.wasm`
    /// (replacing one with the same digest), durably on return. The digest
    /// is not checked against the bytes.
    ///
    /// # Errors
    /// [`StoreError::Io`]: `InvalidInput` if `digest` cannot be an object
    /// name, or the upload failed.
    pub fn put_template(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let key = names::template_key(digest);
        self.check("put", &key, "template digest", digest)?;
        let source = Source::Memory(Bytes::copy_from_slice(bytes));
        self.run(
            upload::upload_time(bytes.len() as u64),
            upload::upload(self.objects.clone(), self.path(&key), source),
        )
        .map_err(|e| e.named("put", &key, &self.location))
    }

    /// The bytes of template `digest`.
    ///
    /// # Errors
    /// [`StoreError::Io`]: `NotFound` if there is none, `InvalidInput` if
    /// `digest` cannot be an object name, or the download failed.
    pub fn get_template(&self, digest: &str) -> Result<Vec<u8>, StoreError> {
        let key = names::template_key(digest);
        self.check("get", &key, "template digest", digest)?;
        // The body's own timeout is set once its size is known.
        let limit = timeout_for(u64::from(u32::MAX));
        self.run(
            limit,
            transfer::read_sized(self.objects.clone(), self.path(&key)),
        )
        .map(Vec::from)
        .map_err(|e| e.named("get", &key, &self.location))
    }

    /// The object path of `key` (relative to the prefix; its segments are
    /// checked or fixed by the store).
    fn path(&self, key: &str) -> Path {
        self.prefix
            .parts()
            .chain(key.split('/').map(PathPart::from))
            .collect()
    }

    /// Runs `future` on the store's runtime (see [`Bridge::run`]).
    fn run<T, F>(&self, timeout: Duration, future: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Failure>> + Send + 'static,
    {
        self.bridge.run(timeout, future)
    }

    /// Checks that `name` can be one segment of an object key (`what`
    /// names it in the error, for operation `op` on `key`).
    fn check(&self, op: &'static str, key: &str, what: &str, name: &str) -> Result<(), StoreError> {
        names::check_segment(what, name).map_err(|source| StoreError::Io {
            op,
            key: key.to_owned(),
            path: format!("{}/{key}", self.location),
            source,
        })
    }
}

/// Age after which an unfinished multipart upload is taken for one a
/// killed process left (no upload of a live one runs this long: its
/// timeout is far shorter for any snapshot under 3 GiB).
pub const STALE_UPLOAD_AGE: Duration = Duration::from_secs(60 * 60);

/// Removes, under `root` (a `file://` store's folder), the part files of
/// multipart uploads older than `age`: `object_store`'s local store stages
/// an upload as `<name>#<digits>` next to the object, which only an abort
/// removes, so a process killed mid-upload leaves them. Best effort,
/// logged. (An S3 store relies on the bucket's lifecycle rule
/// `AbortIncompleteMultipartUpload`: `object_store` cannot list uploads.)
fn sweep_staged(root: &FsPath, age: Duration) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            sweep_staged(&path, age);
            continue;
        }
        let name = entry.file_name();
        let staged = name
            .to_str()
            .and_then(|n| n.rsplit_once('#'))
            .is_some_and(|(_, part)| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|elapsed| elapsed >= age));
        if staged && old {
            match fs::remove_file(&path) {
                Ok(()) => tracing::info!("removed a stale upload part {}", path.display()),
                Err(e) => tracing::warn!("cannot remove stale upload part {}: {e}", path.display()),
            }
        }
    }
}

/// Removes the temp files a crash left in the cache (`<cache>/snapshots/*/`).
/// Best effort: the cache is only a cache.
fn remove_torn(cache_root: &FsPath) {
    let Ok(actors) = fs::read_dir(cache_root) else {
        return;
    };
    for dir in actors.flatten() {
        let Ok(files) = fs::read_dir(dir.path()) else {
            continue;
        };
        for file in files.flatten() {
            if file.file_name().to_string_lossy().ends_with(TEMP_SUFFIX) {
                let _ = fs::remove_file(file.path());
            }
        }
    }
}
