//! `stasis template push NAME actor.js` (or `app.ts`): turns a JavaScript
//! or TypeScript module, with the modules it imports ([`bundle`]: types
//! erased, positions kept), into a template module. The JavaScript engine (`demos/js-engine`, QuickJS,
//! embedded in this binary by `build.rs`) is instantiated here, its
//! `stasis_js_preinit` export compiles the script and evaluates its top
//! level, and Wizer writes the resulting memory and globals back into the
//! module as its initial state: every actor of the template starts from
//! the evaluated script without paying for the engine's start-up or the
//! script's top level. A syntax error or a top level that throws refuses
//! the push here, with the module, line and column.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use wasmtime::{Config, Engine, Instance, Linker, Module, Store, Val};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// The engine module (empty when `build.rs` could not build it).
const ENGINE: &[u8] = include_bytes!(concat!(env!("STASIS_DEMOS_DIR"), "/js-engine.wasm"));

/// Why the engine is missing, when it is (set by `build.rs`).
const SKIPPED: &str = env!("STASIS_JS_ENGINE_SKIPPED");

/// The export that evaluates a script (removed from the output module).
const PREINIT: &str = "stasis_js_preinit";

/// Fuel for the script's top level: a loop that never ends is cut.
const PREINIT_FUEL: u64 = 20_000_000_000;

/// Where the CLI keeps compiled functions across runs:
/// `$STASIS_CACHE_DIR/compiled`, else `$XDG_CACHE_HOME/stasis/compiled`,
/// else `~/.cache/stasis/compiled`; in memory only when none is set.
fn compile_cache() -> stasis_core::compile_cache::CompileCache {
    use stasis_core::compile_cache::CompileCache;
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let folder = var("STASIS_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("stasis")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("stasis")));
    match folder {
        Some(folder) => CompileCache::in_folder(folder.join("compiled")),
        None => CompileCache::in_memory(),
    }
}

mod bundle;

/// Whether `path` names a script (`.js`, `.mjs`, `.ts` or `.mts`).
pub(crate) fn is_script(path: &Path) -> bool {
    bundle::is_entry(path)
}

/// The files the script `path` is made of (itself first, then the modules
/// it imports), for `stasis dev` to watch; `path` alone when its imports
/// cannot be read.
pub(crate) fn files(path: &Path) -> Vec<PathBuf> {
    std::fs::read(path)
        .ok()
        .and_then(|source| bundle::collect(path, &source).ok())
        .map_or_else(|| vec![path.to_path_buf()], |b| b.files())
}

/// The template module for the script `source` read from `path` (its
/// imports read from their files).
///
/// # Errors
/// The engine is not built into this binary, a module cannot be bundled
/// (see [`bundle`]), one does not compile (the message names the module,
/// line and column), the top level throws or runs out of fuel, or the
/// entry has no default export with `fetch`.
pub(crate) async fn build(path: &Path, source: &[u8]) -> anyhow::Result<Vec<u8>> {
    if ENGINE.is_empty() {
        bail!(
            "this stasis was built without the JavaScript engine ({SKIPPED}); \
             install clang, lld, llvm and wasi-libc (scripts/install-test-deps.sh) and rebuild"
        );
    }
    let bundle = bundle::collect(path, source)?;
    let name = bundle.modules[0].name.clone();
    let mut wizer = Wizer::new();
    wizer.init_func(PREINIT);
    let (cx, instrumented) = wizer
        .instrument(ENGINE)
        .map_err(|e| anyhow!("instrumenting the engine: {e:#}"))?;
    let mut config = Config::new();
    config.consume_fuel(true);
    // The engine's functions compile once per machine, not once per push.
    config
        .enable_incremental_compilation(std::sync::Arc::new(compile_cache()))
        .map_err(|e| anyhow!("{e:#}"))?;
    let engine = Engine::new(&config).map_err(|e| anyhow!("{e:#}"))?;
    let module = Module::new(&engine, &instrumented).map_err(|e| anyhow!("{e:#}"))?;
    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |wasi| wasi)
        .map_err(|e| anyhow!("{e:#}"))?;
    // The host functions (`call`, `send`, ...) do not exist at push: a top
    // level that calls them traps.
    linker
        .define_unknown_imports_as_traps(&module)
        .map_err(|e| anyhow!("{e:#}"))?;
    let mut store = Store::new(&engine, WasiCtxBuilder::new().build_p1());
    store.set_fuel(PREINIT_FUEL).map_err(|e| anyhow!("{e:#}"))?;
    let instance = linker
        .instantiate_async(&mut store, &module)
        .await
        .map_err(|e| anyhow!("instantiating the engine: {e:#}"))?;
    let input = bundle.encode();
    let result = preinit(&mut store, &instance, &input).await.map_err(|e| {
        let out_of_fuel = store.get_fuel().is_ok_and(|f| f == 0);
        if out_of_fuel {
            anyhow!("{name}: the script's top level ran too long (a loop that never ends?)")
        } else if let Some(import) = host_call_at_push(&format!("{e:#}")) {
            anyhow!(
                "{name}: the script's top level called the host function {import}, which exists \
                 only while a delivery runs (the `stasis` module's functions and the global \
                 fetch): call it inside fetch, alarm or socket, not when the module is evaluated \
                 at push"
            )
        } else {
            anyhow!("{name}: the script's top level trapped: {e:#}")
        }
    })?;
    if let Some(error) = result {
        // A name imported that is only a type (erased with the types).
        if error.contains("Could not find export") {
            let at = missing_export(&error)
                .and_then(|(export, from)| bundle.importer_of(export, from))
                .map_or_else(String::new, |(module, line)| format!("{module}:{line}: "));
            bail!(
                "{at}{error} (a TypeScript type or interface? import it with `import type {{ ... }}`: \
                 types are erased at push)"
            );
        }
        bail!("{error}");
    }
    let mut state = Snapshot {
        store: &mut store,
        instance,
    };
    let mut module = wizer
        .snapshot(&cx, &mut state)
        .await
        .map_err(|e| anyhow!("snapshotting the evaluated script: {e:#}"))
        .context("building the template module")?;
    // Asked after the snapshot, so that the question leaves nothing in it.
    let sides = instance
        .get_typed_func::<(), u32>(&mut store, HAND_OVER)
        .map_err(|e| anyhow!("{e:#}"))?
        .call_async(&mut store, ())
        .await
        .map_err(|e| anyhow!("asking the script's hand-over methods: {e:#}"))?;
    let methods: Vec<&str> = [(1, "save"), (2, "load")]
        .into_iter()
        .filter(|(bit, _)| sides & bit != 0)
        .map(|(_, name)| name)
        .collect();
    module.extend(custom_section(
        stasis_host_api::JS_HAND_OVER_SECTION,
        methods.join(",").as_bytes(),
    ));
    Ok(module)
}

/// The export and module QuickJS's link error names (`Could not find
/// export 'Tally' in module 'src/types.ts'`).
fn missing_export(error: &str) -> Option<(&str, &str)> {
    let rest = error.split("Could not find export '").nth(1)?;
    let (export, rest) = rest.split_once("' in module '")?;
    let (module, _) = rest.split_once('\'')?;
    Some((export, module))
}

/// The host function a trap at push names (`stasis::self_name`) when the
/// script's top level called one: they are traps at push (see [`build`]).
fn host_call_at_push(trap: &str) -> Option<String> {
    let rest = trap.split("unknown import: ").nth(1)?;
    let import = rest.split(" has not been defined").next()?;
    Some(import.trim_matches('`').to_owned())
}

/// The engine's export saying which hand-over methods the script has.
const HAND_OVER: &str = "stasis_js_hand_over";

/// A custom section `name` holding `payload`, encoded to be appended to a
/// module (custom sections may come anywhere).
fn custom_section(name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut section = vec![0];
    leb128(body.len(), &mut section);
    section.extend(body);
    section
}

/// Runs `_initialize` and the engine's pre-initialisation with `input`
/// (the modules, [`bundle::Bundle::encode`]): `None` when the script was
/// evaluated, else the engine's error text.
async fn preinit(
    store: &mut Store<WasiP1Ctx>,
    instance: &Instance,
    input: &[u8],
) -> anyhow::Result<Option<String>> {
    let e = |e: wasmtime::Error| anyhow!("{e:#}");
    let initialize = instance
        .get_typed_func::<(), ()>(&mut *store, "_initialize")
        .map_err(e)?;
    initialize.call_async(&mut *store, ()).await.map_err(e)?;
    let alloc = instance
        .get_typed_func::<u32, u32>(&mut *store, "stasis_alloc")
        .map_err(e)?;
    let len = u32::try_from(input.len()).context("the script is too large")?;
    let ptr = alloc.call_async(&mut *store, len).await.map_err(e)?;
    let memory = instance
        .get_memory(&mut *store, "memory")
        .context("the engine exports no memory")?;
    memory
        .write(&mut *store, ptr as usize, input)
        .map_err(|err| anyhow!("{err}"))?;
    let run = instance
        .get_typed_func::<(u32, u32), u64>(&mut *store, PREINIT)
        .map_err(e)?;
    let answer = run.call_async(&mut *store, (ptr, len)).await.map_err(e)?;
    if answer == 0 {
        return Ok(None);
    }
    let (at, len) = ((answer >> 32) as usize, (answer & 0xffff_ffff) as usize);
    let mut text = vec![0; len];
    memory
        .read(&*store, at, &mut text)
        .map_err(|err| anyhow!("{err}"))?;
    Ok(Some(String::from_utf8_lossy(&text).into_owned()))
}

/// The evaluated instance, as Wizer reads it.
struct Snapshot<'a> {
    store: &'a mut Store<WasiP1Ctx>,
    instance: Instance,
}

impl InstanceState for Snapshot<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("Wizer names an exported global");
        match global.get(&mut *self.store) {
            Val::I32(x) => SnapshotVal::I32(x),
            Val::I64(x) => SnapshotVal::I64(x),
            Val::F32(x) => SnapshotVal::F32(x),
            Val::F64(x) => SnapshotVal::F64(x),
            Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            other => panic!("a global of unsupported type: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("Wizer names an exported memory");
        contents(memory.data(&*self.store));
    }
}
