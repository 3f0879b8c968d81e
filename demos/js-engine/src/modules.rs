//! The script's modules as `stasis template push` hands them over: the
//! entry first, then every module it imports (its own files, packages from
//! `node_modules`), each with its name (its path from the entry's folder,
//! `src/lib.ts`, so that a stack frame names the real file and line) and
//! what each of its import specifiers resolved to. The CLI resolved and
//! checked the graph; QuickJS's own module loader reads it from here, and
//! `stasis` stays the built-in host API module.
//!
//! The encoding: little-endian `u32` counts and lengths, strings as a
//! length and UTF-8 bytes: `count`, then per module `name`, `source`,
//! `imports`, then per import `specifier`, `target`.

use std::collections::HashMap;

use javy::quickjs::loader::{ImportAttributes, Loader, Resolver};
use javy::quickjs::module::Declared;
use javy::quickjs::{Ctx, Error, Module, Result};

/// The name of the built-in host API module.
const STASIS: &str = "stasis";

/// One module of the graph.
pub(crate) struct Source {
    pub(crate) name: String,
    pub(crate) source: String,
}

/// The decoded graph: its modules (the entry first) and each module's
/// resolved imports, `(importer, specifier) -> target`.
pub(crate) struct Graph {
    pub(crate) modules: Vec<Source>,
    pub(crate) imports: HashMap<(String, String), String>,
}

/// Decodes the CLI's module table (see the module docs).
pub(crate) fn decode(bytes: &[u8]) -> std::result::Result<Graph, String> {
    let mut cursor = Cursor { bytes, at: 0 };
    let count = cursor.number()?;
    let mut graph = Graph {
        modules: Vec::with_capacity(count),
        imports: HashMap::new(),
    };
    for _ in 0..count {
        let name = cursor.string()?;
        let source = cursor.string()?;
        let imports = cursor.number()?;
        for _ in 0..imports {
            let specifier = cursor.string()?;
            let target = cursor.string()?;
            graph.imports.insert((name.clone(), specifier), target);
        }
        graph.modules.push(Source { name, source });
    }
    if graph.modules.is_empty() {
        return Err("the module table holds no module".to_owned());
    }
    Ok(graph)
}

/// A read position in the module table.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn number(&mut self) -> std::result::Result<usize, String> {
        let word = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or("the module table is cut short")?;
        self.at += 4;
        Ok(u32::from_le_bytes(word.try_into().expect("4 bytes")) as usize)
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let len = self.number()?;
        let bytes = self
            .bytes
            .get(self.at..self.at + len)
            .ok_or("the module table is cut short")?;
        self.at += len;
        String::from_utf8(bytes.to_vec()).map_err(|e| format!("a module is not UTF-8: {e}"))
    }
}

/// Resolves a specifier by the CLI's table; `stasis` is the host API.
pub(crate) struct TableResolver {
    pub(crate) imports: HashMap<(String, String), String>,
}

impl Resolver for TableResolver {
    fn resolve<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _: Option<ImportAttributes<'js>>,
    ) -> Result<String> {
        if name == STASIS {
            return Ok(STASIS.to_owned());
        }
        match self.imports.get(&(base.to_owned(), name.to_owned())) {
            Some(target) => Ok(target.clone()),
            None => Err(javy::quickjs::Exception::throw_reference(
                ctx,
                &format!(
                    "{base}: cannot import {name:?}: only the modules found at push \
                     (static imports and import() of a string literal) and \"stasis\" exist"
                ),
            )),
        }
    }
}

/// Loads a module of the graph (each once: QuickJS keeps it after) or the
/// host API module.
pub(crate) struct TableLoader {
    pub(crate) sources: HashMap<String, String>,
    pub(crate) stasis: Option<&'static str>,
}

impl Loader for TableLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _: Option<ImportAttributes<'js>>,
    ) -> Result<Module<'js, Declared>> {
        if name == STASIS {
            return match self.stasis.take() {
                Some(source) => Module::declare(ctx.clone(), STASIS, source),
                None => Err(Error::new_loading(name)),
            };
        }
        match self.sources.remove(name) {
            Some(source) => Module::declare(ctx.clone(), name, source),
            None => Err(Error::new_loading(name)),
        }
    }
}
