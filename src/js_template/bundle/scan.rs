//! What the bundler reads in one module with swc: TypeScript's types
//! erased (`swc_ts_fast_strip` in strip-only mode: whitespace in their
//! place, so lines and columns stay those of the `.ts` file), and the
//! module's imports (static `import`/`export ... from`, and `import()` of
//! a string literal) with their lines.

use std::sync::{Arc, Mutex};

use anyhow::anyhow;
use swc_common::errors::{DiagnosticBuilder, Emitter, Handler};
use swc_common::sync::Lrc;
use swc_common::{BytePos, FileName, GLOBALS, Globals, SourceMap, Span, Spanned as _};
use swc_ecma_ast::{CallExpr, Callee, EsVersion, Expr, Lit, ModuleDecl, ModuleItem, Str};
use swc_ecma_parser::{EsSyntax, Parser, StringInput, Syntax, lexer::Lexer};
use swc_ecma_visit::{Visit, VisitWith as _};

/// What [`imports`] found in a module.
pub(super) struct Found {
    /// Each import's specifier, line (1-based) and whether it is an
    /// `import()` (else a static import), in source order.
    pub(super) imports: Vec<(String, usize, bool)>,
    /// Whether the module has an `import` or `export` declaration.
    pub(super) module_syntax: bool,
    /// Whether it names `require(`, `module.exports` or `exports.`.
    pub(super) common_js: bool,
}

/// One diagnostic swc emitted: its message and where.
type Diagnostic = (String, Option<Span>);

/// The diagnostics swc emitted.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<Diagnostic>>>);

impl Emitter for Collected {
    fn emit(&mut self, db: &mut DiagnosticBuilder<'_>) {
        let message = db.message();
        let span = db.span.primary_span();
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((message, span));
    }
}

/// `text` (the TypeScript module `name`) with its types erased.
///
/// # Errors
/// A syntax error, or TypeScript that erasing cannot run (an `enum`, a
/// `namespace`, a parameter property, `<T>x`): the message names the
/// module, line and column.
pub(super) fn strip_types(name: &str, text: String) -> anyhow::Result<String> {
    let cm: Lrc<SourceMap> = Lrc::default();
    let collected = Collected::default();
    let handler = Handler::with_emitter(true, false, Box::new(collected.clone()));
    let options = swc_ts_fast_strip::Options {
        module: Some(true),
        filename: Some(name.to_owned()),
        ..swc_ts_fast_strip::Options::default()
    };
    let result = GLOBALS.set(&Globals::new(), || {
        swc_ts_fast_strip::operate(&cm, &handler, text, options)
    });
    match result {
        Ok(output) => Ok(output.code),
        Err(error) => {
            let found = collected
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            let Some((message, span)) = found.into_iter().next() else {
                return Err(anyhow!("{name}: {}", error.message));
            };
            let place = span.map_or_else(String::new, |span| {
                let loc = cm.lookup_char_pos(span.lo);
                format!(" at line {}, column {}", loc.line, loc.col_display + 1)
            });
            let what = if message.contains("strip-only mode") {
                let construct = message.replace(" in strip-only mode", "");
                format!(
                    "{construct}: Stasis erases TypeScript's types and compiles nothing else; {}",
                    instead(&construct)
                )
            } else {
                format!("syntax error: {message}")
            };
            Err(anyhow!("{name}{place}: {what}"))
        }
    }
}

/// What to write instead of the TypeScript `construct` erasing refuses.
fn instead(construct: &str) -> &'static str {
    let has = |word: &str| construct.contains(word);
    if has("enum") {
        "write a const object (`const Color = { Red: 0 } as const`) instead"
    } else if has("namespace") {
        "write a module (a file of its own) or a plain object instead"
    } else if has("parameter property") {
        "declare the field and assign it in the constructor instead"
    } else if has("import equals") || has("export assignment") {
        "write ES module `import`/`export` instead"
    } else if has("angle-bracket") {
        "write `value as T` instead"
    } else {
        "write plain JavaScript for it (tsc's `erasableSyntaxOnly` flags the same)"
    }
}

/// The imports of the JavaScript module `code`, or `None` when it does not
/// parse (the engine then reports the syntax error, with QuickJS's line).
pub(super) fn imports(name: &str, code: &str) -> Option<Found> {
    let cm: Lrc<SourceMap> = Lrc::default();
    let file = cm.new_source_file(Lrc::new(FileName::Custom(name.to_owned())), code.to_owned());
    let syntax = Syntax::Es(EsSyntax {
        import_attributes: true,
        ..EsSyntax::default()
    });
    let lexer = Lexer::new(syntax, EsVersion::latest(), StringInput::from(&*file), None);
    let mut parser = Parser::new_from(lexer);
    let module = parser.parse_module().ok()?;
    if !parser.take_errors().is_empty() {
        return None;
    }
    let mut visitor = Imports {
        found: Vec::new(),
        module_syntax: false,
    };
    module.visit_with(&mut visitor);
    let line = |pos: BytePos| cm.lookup_char_pos(pos).line;
    let mut imports: Vec<(String, usize, bool)> = visitor
        .found
        .into_iter()
        .map(|(specifier, pos, dynamic)| (specifier, line(pos), dynamic))
        .collect();
    imports.sort_by_key(|(_, line, _)| *line);
    let common_js =
        code.contains("require(") || code.contains("module.exports") || code.contains("exports.");
    Some(Found {
        imports,
        module_syntax: visitor.module_syntax,
        common_js,
    })
}

/// Collects import specifiers and where they are.
struct Imports {
    found: Vec<(String, BytePos, bool)>,
    module_syntax: bool,
}

impl Imports {
    fn add(&mut self, text: &Str, span: Span, dynamic: bool) {
        let specifier = text.value.to_atom_lossy().as_str().to_owned();
        self.found.push((specifier, span.lo, dynamic));
    }
}

impl Visit for Imports {
    fn visit_module_item(&mut self, item: &ModuleItem) {
        if let ModuleItem::ModuleDecl(decl) = item {
            self.module_syntax = true;
            match decl {
                ModuleDecl::Import(import) if !import.type_only => {
                    self.add(&import.src, import.span, false);
                }
                ModuleDecl::ExportAll(export) if !export.type_only => {
                    self.add(&export.src, export.span, false);
                }
                ModuleDecl::ExportNamed(export) if !export.type_only => {
                    if let Some(src) = &export.src {
                        self.add(src, export.span, false);
                    }
                }
                _ => {}
            }
        }
        item.visit_children_with(self);
    }

    fn visit_call_expr(&mut self, call: &CallExpr) {
        if let Callee::Import(_) = call.callee
            && let Some(arg) = call.args.first()
            && arg.spread.is_none()
            && let Expr::Lit(Lit::Str(text)) = &*arg.expr
        {
            self.add(text, call.span(), true);
        }
        call.visit_children_with(self);
    }
}
