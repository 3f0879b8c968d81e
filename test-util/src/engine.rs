//! The snapshot core in process: an engine, templates, guest requests and
//! verified restores, for tests and benches that skip the server.

use std::sync::Arc;

use stasis_core::engine::{Limits, StasisEngine};
use stasis_core::instance::{ActorInstance, InstanceConfig};
use stasis_core::module::{ModuleCache, Template};
use stasis_core::snapshot;
use stasis_host_api::Request;

/// An engine with `limits`; panics if it cannot be built.
#[must_use]
pub fn engine(limits: Limits) -> Arc<StasisEngine> {
    StasisEngine::new(limits).expect("engine")
}

/// A module cache of `engine` without a compiled-code folder.
#[must_use]
pub fn module_cache(engine: &StasisEngine) -> ModuleCache {
    ModuleCache::new(engine.engine().clone(), engine.linker().clone(), None)
}

/// `wasm` validated, rewritten and compiled as a template of `engine`.
#[must_use]
pub fn load(engine: &StasisEngine, wasm: &[u8]) -> Arc<Template> {
    module_cache(engine).load(wasm).expect("template loads")
}

/// A guest request: `method uri` with `body` and no headers.
#[must_use]
pub fn request(method: &str, uri: &str, body: Vec<u8>) -> Request {
    Request {
        method: method.into(),
        uri: uri.into(),
        body,
        ..Request::default()
    }
}

/// Verifies `bytes` against `template` (and `engine`'s memory limit) and
/// restores it as a new instance with `config`; panics on either failure.
pub async fn restore(
    engine: &Arc<StasisEngine>,
    template: Arc<Template>,
    bytes: &[u8],
    config: InstanceConfig,
) -> ActorInstance {
    let verified =
        snapshot::verify(bytes, &template, engine.limits().max_memory).expect("snapshot verifies");
    snapshot::restore(engine, template, config, &verified)
        .await
        .expect("restore")
}
