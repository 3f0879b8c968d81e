//! How a worker turns a template digest into a compiled module: the
//! [`Templates`] a worker is built with. [`TemplateDir`] is the one
//! implementation: compiled modules in memory, module files in a folder
//! (`templates/<digest>.wasm`), and, for a worker in its own process, a
//! [`FetchTemplate`] that asks the control plane for files it lacks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::ApiError;
use stasis_core::durable::write_atomically;
use stasis_core::module::{ModuleCache, Template};

/// Resolves template digests to compiled modules.
#[async_trait]
pub trait Templates: Send + Sync {
    /// The compiled template whose module has SHA-256 `digest` (hex).
    ///
    /// # Errors
    /// 400 malformed digest; 404/503 if the module cannot be had; 502 if
    /// fetched bytes do not match the digest; 422 if it does not compile.
    async fn template(&self, digest: &str) -> Result<Arc<Template>, ApiError>;

    /// The compiled template `digest` from local files only, never
    /// fetching (recovery at start-up, before anything is served).
    ///
    /// # Errors
    /// As [`Templates::template`], but never fetched.
    fn local(&self, digest: &str) -> Result<Arc<Template>, ApiError>;
}

/// Fetches a template module the local folder lacks.
#[async_trait]
pub trait FetchTemplate: Send + Sync {
    /// The module bytes of template `digest`.
    ///
    /// # Errors
    /// The source's failure (404 unknown digest, 503 unreachable).
    async fn fetch(&self, digest: &str) -> Result<Bytes, ApiError>;
}

/// Templates kept in a folder as `<digest>.wasm` and compiled through a
/// [`ModuleCache`].
pub struct TemplateDir {
    cache: ModuleCache,
    dir: PathBuf,
    fetch: Option<Box<dyn FetchTemplate>>,
}

fn check_digest(digest: &str) -> Result<(), ApiError> {
    if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "bad template digest {digest:?}"
        )))
    }
}

impl TemplateDir {
    /// Templates in `dir` compiled through `cache`; files missing from
    /// `dir` come from `fetch` (if any) and are kept there.
    #[must_use]
    pub fn new(cache: ModuleCache, dir: PathBuf, fetch: Option<Box<dyn FetchTemplate>>) -> Self {
        Self { cache, dir, fetch }
    }

    /// The compile cache.
    #[must_use]
    pub fn cache(&self) -> &ModuleCache {
        &self.cache
    }

    /// The file of template `digest`.
    #[must_use]
    pub fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.wasm"))
    }

    /// The folder.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes module `bytes` as the file of template `digest`, durably.
    ///
    /// # Errors
    /// 500 if the file cannot be written.
    pub fn keep(&self, digest: &str, bytes: &[u8]) -> Result<(), ApiError> {
        let path = self.path(digest);
        write_atomically(&path, bytes).map_err(|e| {
            tracing::error!(path = %path.display(), "writing a template module: {e}");
            ApiError::internal(format!("writing template {digest}: {e}"))
        })
    }

    /// The module bytes of template `digest` from the folder.
    ///
    /// # Errors
    /// 500 naming the template if it cannot be read (the path goes to the
    /// log only: no answer shows a server path).
    pub fn read(&self, digest: &str) -> Result<Vec<u8>, ApiError> {
        let path = self.path(digest);
        std::fs::read(&path).map_err(|e| {
            // A template not yet here is normal on a remote worker (it is
            // fetched next); anything else is worth an operator's look.
            if e.kind() == std::io::ErrorKind::NotFound {
                tracing::debug!(path = %path.display(), "template module not here yet");
            } else {
                tracing::error!(path = %path.display(), "reading a template module: {e}");
            }
            ApiError::internal(format!("reading template {digest}: {e}"))
        })
    }

    /// The compiled template `digest` from memory or the folder, without
    /// fetching (for recovery at start-up, before anything is served).
    ///
    /// # Errors
    /// As [`TemplateDir::read`]; 502 if the file does not match the
    /// digest; 422 if it does not compile.
    pub fn load_local(&self, digest: &str) -> Result<Arc<Template>, ApiError> {
        check_digest(digest)?;
        if let Some(template) = self.cache.loaded(digest) {
            return Ok(template);
        }
        let bytes = self.read(digest)?;
        self.compile(digest, &bytes)
    }

    fn compile(&self, digest: &str, bytes: &[u8]) -> Result<Arc<Template>, ApiError> {
        if hex::encode(stasis_core::module::digest(bytes)) != digest {
            return Err(ApiError::bad_gateway(format!(
                "template {digest} does not match its digest"
            )));
        }
        // Cranelift takes tens of ms: keep it off the async workers' backs
        // when there is a runtime to keep.
        stasis_core::blocking::off_the_executor(|| self.cache.load(bytes))
            .map_err(|e| ApiError::unprocessable(e.to_string()))
    }
}

#[async_trait]
impl Templates for TemplateDir {
    fn local(&self, digest: &str) -> Result<Arc<Template>, ApiError> {
        self.load_local(digest)
    }

    async fn template(&self, digest: &str) -> Result<Arc<Template>, ApiError> {
        check_digest(digest)?;
        if let Some(template) = self.cache.loaded(digest) {
            return Ok(template);
        }
        let bytes = match (self.read(digest), &self.fetch) {
            (Ok(bytes), _) => bytes,
            (Err(_), Some(fetch)) => {
                let bytes = fetch.fetch(digest).await?;
                if hex::encode(stasis_core::module::digest(&bytes)) != digest {
                    return Err(ApiError::bad_gateway(format!(
                        "template {digest} arrived corrupted"
                    )));
                }
                self.keep(digest, &bytes)?;
                bytes.to_vec()
            }
            (Err(e), None) => return Err(e),
        };
        self.compile(digest, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::engine::{Limits, StasisEngine};

    struct Fixed(Bytes);

    #[async_trait]
    impl FetchTemplate for Fixed {
        async fn fetch(&self, _digest: &str) -> Result<Bytes, ApiError> {
            Ok(self.0.clone())
        }
    }

    fn dir(fetch: Option<Box<dyn FetchTemplate>>) -> (TemplateDir, tempfile::TempDir) {
        let tmp = tempfile::tempdir().expect("temp dir");
        let engine = StasisEngine::new(Limits::default()).expect("engine");
        let cache = ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None);
        (TemplateDir::new(cache, tmp.path().to_owned(), fetch), tmp)
    }

    #[tokio::test]
    async fn digests_are_checked_before_anything_is_read() {
        let (templates, _tmp) = dir(None);
        let error = templates.template("../etc").await.expect_err("bad digest");
        assert_eq!(error.kind().status(), 400);
        let missing = "0".repeat(64);
        let error = templates.template(&missing).await.expect_err("no file");
        assert_eq!(error.kind().status(), 500, "{error}");
        assert!(error.message().contains(&missing), "{error}");
    }

    #[tokio::test]
    async fn fetched_bytes_must_match_the_digest_and_are_not_kept_otherwise() {
        let (templates, _tmp) = dir(Some(Box::new(Fixed(Bytes::from_static(b"not it")))));
        let digest = hex::encode(stasis_core::module::digest(b"the module"));
        let error = templates.template(&digest).await.expect_err("corrupted");
        assert_eq!(error.kind().status(), 502, "{error}");
        assert!(!templates.path(&digest).exists());
    }
}
