//! The module graph of a script pushed as a template: the entry file
//! (`.js`, `.mjs`, `.ts`, `.mts`) and every module it imports, found with
//! Node's rules (`oxc_resolver`: relative paths, packages in
//! `node_modules` by their `exports`/`module`/`main`, a TypeScript file
//! imported as `./lib.js` or `./lib`). TypeScript's types are erased by
//! `swc_ts_fast_strip`, which writes whitespace in their place, so every
//! line and column of the JavaScript the engine runs is the TypeScript
//! source's: a stack frame names the `.ts` file and line with no source
//! map. Each module keeps its own name (its path from the entry's folder,
//! `src/lib.ts`, `node_modules/pkg/index.js`), and the engine's module
//! loader links them (see `demos/js-engine/src/modules.rs`).
//!
//! Refused, naming the file (and line): a static import that resolves
//! nowhere (an `import()` that does rejects at run time),
//! a Node.js built-in, a CommonJS module, a file that is not JavaScript,
//! TypeScript or JSON, TypeScript that cannot be erased (an `enum`, a
//! `namespace`, a parameter property), and a graph over
//! [`MAX_SOURCE_BYTES`].

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use oxc_resolver::{ResolveError, ResolveOptions, Resolver};

mod scan;

/// The most source text a template's modules may hold together.
pub(crate) const MAX_SOURCE_BYTES: usize = 8 << 20;

/// One module of the graph.
pub(crate) struct Module {
    /// Its path from the entry's folder, `/`-separated.
    pub(crate) name: String,
    /// The file it was read from.
    pub(crate) path: PathBuf,
    /// The JavaScript the engine compiles (types erased).
    pub(crate) source: String,
    /// Each import specifier and the name of the module it resolved to
    /// (`stasis`, the built-in module, is not listed).
    pub(crate) imports: Vec<(String, String)>,
    /// Each static import's target (a module's name) and the line its
    /// statement starts on.
    pub(crate) import_lines: Vec<(String, usize)>,
}

/// The entry (first) and every module it reaches.
pub(crate) struct Bundle {
    pub(crate) modules: Vec<Module>,
}

impl Bundle {
    /// Where `name` is imported from module `from`: the importing
    /// module's name and the line of its import statement that names it
    /// (the statement's lines up to the one with its `from`).
    pub(crate) fn importer_of(&self, name: &str, from: &str) -> Option<(&str, usize)> {
        let names = |text: &str| {
            text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .any(|word| word == name)
        };
        self.modules.iter().find_map(|module| {
            let lines: Vec<&str> = module.source.lines().collect();
            module
                .import_lines
                .iter()
                .filter(|(target, _)| target == from)
                .find_map(|&(_, line)| {
                    let statement = lines.get(line.checked_sub(1)?..)?.iter().take(20);
                    for text in statement {
                        if names(text) {
                            return Some((module.name.as_str(), line));
                        }
                        if text.contains(" from ") || text.contains(';') {
                            break;
                        }
                    }
                    None
                })
        })
    }

    /// The table the engine's `stasis_js_preinit` decodes: little-endian
    /// `u32` counts and lengths; per module its name, source and imports.
    pub(crate) fn encode(&self) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, n: usize) {
            out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
        }
        fn text(out: &mut Vec<u8>, s: &str) {
            put(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        let mut out = Vec::new();
        put(&mut out, self.modules.len());
        for module in &self.modules {
            text(&mut out, &module.name);
            text(&mut out, &module.source);
            put(&mut out, module.imports.len());
            for (specifier, target) in &module.imports {
                text(&mut out, specifier);
                text(&mut out, target);
            }
        }
        out
    }

    /// The files read, the entry first.
    pub(crate) fn files(&self) -> Vec<PathBuf> {
        self.modules.iter().map(|m| m.path.clone()).collect()
    }
}

/// The file extensions a module may have.
const EXTENSIONS: &[&str] = &["ts", "mts", "js", "mjs", "json"];

/// Whether `path` names an entry script (`.js`, `.mjs`, `.ts`, `.mts`).
pub(crate) fn is_entry(path: &Path) -> bool {
    matches!(extension(path), "js" | "mjs" | "ts" | "mts")
}

fn extension(path: &Path) -> &str {
    path.extension().and_then(|e| e.to_str()).unwrap_or("")
}

/// Reads the graph of `entry`, whose bytes are `source` (the others are
/// read from disk).
///
/// # Errors
/// See the module docs: each error names the module (by its path from the
/// entry's folder) and, for an import, its line.
pub(crate) fn collect(entry: &Path, source: &[u8]) -> anyhow::Result<Bundle> {
    let folder = match entry.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let root = std::fs::canonicalize(&folder).unwrap_or(folder);
    let file_name = entry.file_name().map_or_else(
        || "actor.js".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let entry_path = std::fs::canonicalize(entry).unwrap_or_else(|_| root.join(&file_name));
    let resolver = resolver();
    let mut graph = Graph {
        root,
        total: 0,
        modules: Vec::new(),
        index: HashMap::new(),
    };
    let mut queue = VecDeque::new();
    graph.index.insert(entry_path.clone(), 0);
    graph.modules.push(Module {
        name: file_name,
        path: entry_path,
        source: String::new(),
        imports: Vec::new(),
        import_lines: Vec::new(),
    });
    queue.push_back((0, Some(source.to_vec())));
    while let Some((at, bytes)) = queue.pop_front() {
        let path = graph.modules[at].path.clone();
        let name = graph.modules[at].name.clone();
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => std::fs::read(&path).map_err(|e| anyhow!("cannot read {name}: {e}"))?,
        };
        graph.total += bytes.len();
        if graph.total > MAX_SOURCE_BYTES {
            bail!(
                "{}: its modules hold more than {} MiB of source ({MAX_SOURCE_BYTES} bytes, the \
                 limit for a template's scripts); {name} went over it",
                graph.modules[0].name,
                MAX_SOURCE_BYTES >> 20
            );
        }
        let text =
            String::from_utf8(bytes).map_err(|e| anyhow!("{name} is not UTF-8 text: {e}"))?;
        let code = to_javascript(&name, extension(&path), text)?;
        let found = scan::imports(&name, &code);
        if let Some(found) = &found
            && !found.module_syntax
            && found.common_js
        {
            bail!(
                "{name} is a CommonJS module (it uses require/module.exports and has no \
                 import or export): only ES modules can be pushed; use the package's ES \
                 module build, or another package"
            );
        }
        let dir = path
            .parent()
            .map_or_else(|| graph.root.clone(), Path::to_path_buf);
        for (specifier, line, dynamic) in found.map(|f| f.imports).unwrap_or_default() {
            if specifier == "stasis" {
                continue;
            }
            let target = match graph.resolve(&resolver, &dir, &name, line, &specifier) {
                Ok(target) => target,
                // An `import()` that resolves nowhere (often one a package
                // guards with try/catch) rejects at run time instead.
                Err(_) if dynamic => continue,
                Err(e) => return Err(e),
            };
            let target_name = match graph.index.get(&target) {
                Some(&i) => graph.modules[i].name.clone(),
                None => {
                    let i = graph.modules.len();
                    let target_name = graph.name_of(&target);
                    graph.index.insert(target.clone(), i);
                    graph.modules.push(Module {
                        name: target_name.clone(),
                        path: target,
                        source: String::new(),
                        imports: Vec::new(),
                        import_lines: Vec::new(),
                    });
                    queue.push_back((i, None));
                    target_name
                }
            };
            if !dynamic {
                let lines = &mut graph.modules[at].import_lines;
                lines.push((target_name.clone(), line));
            }
            let imports = &mut graph.modules[at].imports;
            if !imports.iter().any(|(s, _)| *s == specifier) {
                imports.push((specifier, target_name));
            }
        }
        graph.modules[at].source = code;
    }
    Ok(Bundle {
        modules: graph.modules,
    })
}

/// The graph being read.
struct Graph {
    /// The entry's folder (canonical): module names are relative to it.
    root: PathBuf,
    /// Source bytes read so far.
    total: usize,
    modules: Vec<Module>,
    /// Each module's index in `modules`, by its canonical path.
    index: HashMap<PathBuf, usize>,
}

impl Graph {
    /// The file `specifier`, imported at `line` of the module `name` in
    /// `dir`, resolves to.
    fn resolve(
        &self,
        resolver: &Resolver,
        dir: &Path,
        name: &str,
        line: usize,
        specifier: &str,
    ) -> anyhow::Result<PathBuf> {
        let at = format!("{name}:{line}");
        let resolution = resolver.resolve(dir, specifier).map_err(|e| match e {
            ResolveError::Builtin { resolved, .. } => anyhow!(
                "{at}: cannot import {specifier:?}: {resolved} is a Node.js built-in module, \
                 and a Stasis actor has no Node.js modules"
            ),
            ResolveError::NotFound(_) => anyhow!(
                "{at}: cannot find module {specifier:?} (no such file, or no package of that \
                 name in node_modules)"
            ),
            other => anyhow!(
                "{at}: cannot import {specifier:?}: {}",
                self.relative_text(&other.to_string())
            ),
        })?;
        let path = resolution.into_path_buf();
        let target = self.name_of(&path);
        match extension(&path) {
            "cjs" | "cts" => bail!(
                "{at}: {specifier:?} is {target}, a CommonJS module: only ES modules can be \
                 pushed; use the package's ES module build, or another package"
            ),
            ext if EXTENSIONS.contains(&ext) => Ok(path),
            _ => bail!(
                "{at}: {specifier:?} is {target}: only JavaScript (.js, .mjs), TypeScript (.ts, \
                 .mts) and JSON modules can be pushed"
            ),
        }
    }

    /// `path`'s name: its path from the entry's folder, `/`-separated
    /// (`../` steps for a file outside it).
    fn name_of(&self, path: &Path) -> String {
        let mut base: Vec<_> = self.root.components().collect();
        let target: Vec<_> = path.components().collect();
        let common = base.iter().zip(&target).take_while(|(a, b)| a == b).count();
        base.drain(..common);
        let mut parts: Vec<String> = base.iter().map(|_| "..".to_owned()).collect();
        parts.extend(
            target[common..]
                .iter()
                .map(|c| c.as_os_str().to_string_lossy().into_owned()),
        );
        parts.join("/")
    }

    /// `text` with the entry's folder taken out of the paths it names.
    fn relative_text(&self, text: &str) -> String {
        let root = format!("{}/", self.root.display());
        text.replace(&root, "")
    }
}

/// The resolver: ES module conditions first, TypeScript files found for
/// the `.js` names TypeScript imports them by, Node.js built-ins refused.
fn resolver() -> Resolver {
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    Resolver::new(ResolveOptions {
        condition_names: strings(&["workerd", "worker", "import", "module", "default"]),
        main_fields: strings(&["module", "main"]),
        extensions: strings(&[".ts", ".mts", ".js", ".mjs", ".json"]),
        extension_alias: vec![
            (".js".to_owned(), strings(&[".ts", ".js"])),
            (".mjs".to_owned(), strings(&[".mts", ".mjs"])),
        ],
        builtin_modules: true,
        ..ResolveOptions::default()
    })
}

/// The JavaScript of a module: TypeScript with its types erased (same
/// lines and columns), JSON as a module whose default export is the value,
/// JavaScript as it is.
fn to_javascript(name: &str, extension: &str, text: String) -> anyhow::Result<String> {
    match extension {
        "ts" | "mts" => scan::strip_types(name, text),
        "json" => {
            serde_json::from_str::<serde::de::IgnoredAny>(&text)
                .map_err(|e| anyhow!("{name}: not JSON: {e}"))?;
            Ok(format!("export default {text}\n;"))
        }
        _ => Ok(text),
    }
}

#[cfg(test)]
mod tests;
