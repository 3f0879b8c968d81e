//! The template cache: [`ModuleCache`] compiles each template's two
//! variants once per engine, keeps them in memory by digest, and keeps the
//! compiled code on disk so a restart skips Cranelift.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};
use stasis_host_api::exports;
use wasmtime::{Engine, Linker, Module};

use super::{Digest, ModuleError, ModuleInfo, Template, Variant, analyze, digest, instrument};
use crate::durable::write_atomically;
use crate::host::Host;

/// Compiles templates once per engine and keeps them: in memory by digest,
/// and (with a cache folder) on disk as precompiled code keyed by digest,
/// variant and the engine's compatibility hash, so a restart skips Cranelift.
pub struct ModuleCache {
    engine: Engine,
    linker: Arc<Linker<Host>>,
    dir: Option<PathBuf>,
    config_key: String,
    loaded: Mutex<HashMap<Digest, Arc<Template>>>,
}

impl ModuleCache {
    /// A cache for `engine`, linking with `linker`; `dir` holds precompiled
    /// code (created if missing), `None` keeps everything in memory.
    #[must_use]
    pub fn new(engine: Engine, linker: Arc<Linker<Host>>, dir: Option<PathBuf>) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            engine,
            linker,
            dir,
            config_key: format!("{:016x}", hasher.finish()),
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The compiled template for `bytes`: analysed, instrumented, compiled
    /// and linked on first use, then shared.
    ///
    /// # Errors
    /// A [`ModuleError`] if the module is refused or does not link.
    pub fn load(&self, bytes: &[u8]) -> Result<Arc<Template>, ModuleError> {
        let id = digest(bytes);
        if let Some(t) = self.lock().get(&id) {
            return Ok(t.clone());
        }
        let info = analyze(bytes)?;
        let spawn = self.compile(bytes, &info, Variant::Spawn)?;
        check_abi_exports(&spawn)?;
        let resume = self.compile(bytes, &info, Variant::Resume)?;
        let pre = |m: &Module| {
            self.linker
                .instantiate_pre(m)
                .map_err(|e| ModuleError::Compile(e.into()))
        };
        let template = Arc::new(Template {
            spawn: pre(&spawn)?,
            resume: pre(&resume)?,
            info,
        });
        self.lock().insert(id, template.clone());
        Ok(template)
    }

    /// The template already loaded for `digest` (hex SHA-256 of the
    /// module's bytes, as in the directory), without reading its file.
    #[must_use]
    pub fn loaded(&self, digest: &str) -> Option<Arc<Template>> {
        let id: Digest = hex::decode(digest).ok()?.try_into().ok()?;
        self.lock().get(&id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, Arc<Template>>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn compile(
        &self,
        bytes: &[u8],
        info: &ModuleInfo,
        variant: Variant,
    ) -> Result<Module, ModuleError> {
        let path = self.dir.as_ref().map(|d| {
            d.join(format!(
                "{}-{}-{}.cwasm",
                hex::encode(info.digest),
                variant.name(),
                self.config_key
            ))
        });
        if let Some(path) = &path
            && let Ok(file) = std::fs::read(path)
        {
            match cached_code(&file) {
                // SAFETY: the code was written by `Module::serialize` below
                // into the data dir this process owns (guarded by its LOCK),
                // and its SHA-256 matches, so it is not torn or altered; the
                // engine's compatibility hash is part of the name, and
                // wasmtime re-checks version and configuration on load.
                Some(code) => match unsafe { Module::deserialize(&self.engine, code) } {
                    Ok(module) => return Ok(module),
                    Err(e) => tracing::warn!(path = %path.display(), "recompiling: {e:#}"),
                },
                None => {
                    tracing::warn!(path = %path.display(), "recompiling: cached code fails its checksum")
                }
            }
        }
        let rewritten = instrument(bytes, info, variant)?;
        let module =
            Module::new(&self.engine, &rewritten).map_err(|e| ModuleError::Compile(e.into()))?;
        if let Some(path) = &path {
            let written = module.serialize().and_then(|code| {
                let mut file = Vec::with_capacity(32 + code.len());
                file.extend_from_slice(&Sha256::digest(&code));
                file.extend_from_slice(&code);
                write_atomically(path, &file).map_err(Into::into)
            });
            if let Err(e) = written {
                tracing::warn!(path = %path.display(), "could not cache compiled module: {e:#}");
            }
        }
        Ok(module)
    }
}

/// The code in a cache file (`SHA-256 of the code` ‖ `code`), if the
/// checksum holds.
fn cached_code(file: &[u8]) -> Option<&[u8]> {
    let (sum, code) = file.split_at_checked(32)?;
    (Sha256::digest(code).as_slice() == sum).then_some(code)
}

fn check_abi_exports(module: &Module) -> Result<(), ModuleError> {
    use wasmtime::ValType as V;
    let func = |name| match module.get_export(name) {
        Some(wasmtime::ExternType::Func(f)) => Some(f),
        _ => None,
    };
    let is = |name, params: &[fn(&V) -> bool], results: &[fn(&V) -> bool]| {
        func(name).is_some_and(|f| {
            f.params().len() == params.len()
                && f.results().len() == results.len()
                && f.params().zip(params).all(|(p, ok)| ok(&p))
                && f.results().zip(results).all(|(r, ok)| ok(&r))
        })
    };
    let i32_ = |v: &V| matches!(v, V::I32);
    let i64_ = |v: &V| matches!(v, V::I64);
    if !is(exports::ALLOC, &[i32_], &[i32_]) {
        return Err(ModuleError::Export {
            name: exports::ALLOC,
            signature: "(i32) -> i32",
        });
    }
    if !is(exports::HANDLE, &[i32_, i32_], &[i64_]) {
        return Err(ModuleError::Export {
            name: exports::HANDLE,
            signature: "(i32, i32) -> i64",
        });
    }
    for name in [
        exports::INIT,
        exports::ON_PAUSE,
        exports::ON_RESUME,
        exports::INITIALIZE,
    ] {
        if func(name).is_some() && !is(name, &[], &[]) {
            return Err(ModuleError::Export {
                name,
                signature: "() -> ()",
            });
        }
    }
    Ok(())
}
