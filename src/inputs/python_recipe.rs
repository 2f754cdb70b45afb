//! Megatron-Bridge recipes written in Python: the recipe functions and configuration constants
//! a file defines, and the settings each one makes, as a Bridge override tree.
//!
//! The file is parsed with tree-sitter's Python grammar and evaluated symbolically, statement by
//! statement, without running anything: `cfg.<section>.<field> = value`, constructors with
//! keyword arguments (`ConfigContainer(model=..., train=TrainingConfig(...))`),
//! `replace(<base>, field=value)`, calls to functions of the same file (keyword defaults
//! substituted) and, given a [`ModuleLoader`], of the modules it imports, module constants,
//! Python literals, `torch.<dtype>`, unpacking of known tuples, `try` blocks and a few
//! built-ins. Whatever cannot be known (helpers whose module is not at hand, f-strings, loops,
//! undecidable `if` conditions, augmented assignments) is listed in
//! [`RecipeSettings::unevaluated`] with the reason; nothing is dropped silently.
//!
//! This file holds the public types, the file's top-level items and the evaluator's state; the
//! evaluator's methods live by concern in `functions.rs`, `statements.rs`, `bridge_helpers.rs`,
//! `expressions.rs` and `calls.rs`, Python value arithmetic in `values.rs`, imported modules in
//! `imports.rs` and built-ins in `builtins.rs`.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use serde::Serialize;
use serde_json::{Map, Number, Value};
use tree_sitter::{Node, Parser, Tree};

use super::bridge_recipe_name;
use crate::model::config::FlexBackend;

mod bridge_helpers;
mod builtins;
mod calls;
mod expressions;
mod functions;
mod imports;
mod statements;
mod values;
use imports::{imported_names, ImportedName, Module, Modules};
pub use imports::{module_file_matches, LoadedModule, ModuleLoader, ModuleTexts};
use values::*;

/// Recipe files larger than this are refused (real ones are well under 100 KiB).
const MAX_SOURCE_BYTES: usize = 8 * 1024 * 1024;
/// Nesting of expressions, statements and same-file calls evaluated before giving up.
const MAX_DEPTH: usize = 48;
/// Largest string or list an expression such as `"t" * 14` may build.
const MAX_BUILT_LEN: usize = 64 * 1024;
/// Longest source excerpt quoted in a message.
const SNIPPET_CHARS: usize = 80;

#[derive(Debug, thiserror::Error)]
pub enum PythonRecipeError {
    #[error("the Python grammar could not be loaded: {0}")]
    Grammar(String),
    #[error(
        "the recipe file is {bytes} bytes; files over {limit} bytes are refused — pass the one recipe file"
    )]
    TooLarge { bytes: usize, limit: usize },
    #[error(
        "the recipe file is not valid Python at line {line}, column {column} (near `{snippet}`); \
         pass the whole file as it is in the repository, not an excerpt"
    )]
    Syntax {
        line: usize,
        column: usize,
        snippet: String,
    },
    #[error(
        "the recipe `{name}` raises instead of returning a configuration (`{statement}`); \
         pick another recipe of the file"
    )]
    Raises { name: String, statement: String },
    #[error("the recipe file defines no function or constant named `{name}`; {hint}")]
    UnknownRecipe {
        name: String,
        closest: Vec<String>,
        hint: String,
    },
}

/// What a [`RecipeSpan`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecipeKind {
    /// A module-level `def` (decorated or not).
    Function,
    /// A module-level assignment `NAME = ...`.
    Constant,
}

/// A recipe function or constant and the lines it covers (1-based, inclusive; decorators included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeSpan {
    pub name: String,
    pub kind: RecipeKind,
    pub start_line: usize,
    pub end_line: usize,
}

/// The settings one recipe makes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecipeSettings {
    /// Nested JSON shaped like a Bridge override YAML (`{"model": {...}, "train": {...}}`);
    /// for `replace(BASE, field=value)` constants the fields sit at the top level.
    pub tree: Value,
    /// Things seen but not evaluable, as (key path or source snippet, reason).
    pub unevaluated: Vec<(String, String)>,
    /// The first base recipe the recipe calls from outside the file
    /// (`gpt_oss_120b_pretrain_config`): it names the model the file itself does not.
    pub base_recipe: Option<String>,
    /// The HuggingFace checkpoint the recipe builds its model from
    /// (`AutoBridge.from_hf_pretrained("Qwen/Qwen3-235B-A22B")`): it names the model too.
    pub hf_checkpoint: Option<String>,
    /// The imported modules evaluated for it (ids the [`ModuleLoader`] gave), in order read.
    pub modules_read: Vec<String>,
    /// The name the recipe is defined under, where the file re-exports it under another
    /// (`gpt_oss_120b_pretrain_64gpu_h100_bf16_config` for `gpt_oss_120b_pretrain_config`).
    pub defined_as: Option<String>,
    /// The backend Bridge's `apply_flex_dispatcher_backend` was called with (`deepep`,
    /// `hybridep`), which it falls back from to `alltoall` on a GPU the backend does not run on.
    pub flex_backend_helper: Option<FlexBackend>,
}

/// A parsed recipe file.
pub struct RecipeFile {
    pub(super) source: String,
    pub(super) tree: Tree,
}

impl std::fmt::Debug for RecipeFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecipeFile")
            .field("bytes", &self.source.len())
            .field("recipes", &self.recipes())
            .finish()
    }
}

impl RecipeFile {
    /// Parses a whole Python file; a syntax error is refused with its position.
    pub fn parse(source: &str) -> Result<RecipeFile, PythonRecipeError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(PythonRecipeError::TooLarge {
                bytes: source.len(),
                limit: MAX_SOURCE_BYTES,
            });
        }
        let mut parser = Parser::new();
        parser
            .set_language(&tree_sitter_python::LANGUAGE.into())
            .map_err(|e| PythonRecipeError::Grammar(e.to_string()))?;
        let tree = parser
            .parse(source, None)
            .ok_or_else(|| PythonRecipeError::Grammar("the parser returned no tree".into()))?;
        let file = RecipeFile {
            source: source.to_owned(),
            tree,
        };
        if let Some(bad) = file.first_syntax_error() {
            let pos = bad.start_position();
            return Err(PythonRecipeError::Syntax {
                line: pos.row.saturating_add(1),
                column: pos.column.saturating_add(1),
                snippet: snippet(file.text(bad)),
            });
        }
        Ok(file)
    }

    /// Recipe functions and module constants in file order (dunder names such as `__all__` left out).
    pub fn recipes(&self) -> Vec<RecipeSpan> {
        self.top_level()
            .into_iter()
            .map(|item| RecipeSpan {
                name: item.name.to_owned(),
                kind: item.kind,
                start_line: item.outer.start_position().row.saturating_add(1),
                end_line: item.outer.end_position().row.saturating_add(1),
            })
            .collect()
    }

    /// The recipe enclosing a 1-based line, if any.
    pub fn recipe_at_line(&self, line: usize) -> Option<RecipeSpan> {
        self.recipes()
            .into_iter()
            .find(|span| span.start_line <= line && line <= span.end_line)
    }

    /// The settings the recipe `recipe` (function or constant name) makes, from this file alone.
    pub fn settings(&self, recipe: &str) -> Result<RecipeSettings, PythonRecipeError> {
        self.settings_with(recipe, None)
    }

    /// The settings the recipe `recipe` makes, following its `from ... import` statements into
    /// the modules `loader` provides: imported helpers and base recipes are evaluated where they
    /// are defined instead of being listed as unknown.
    pub fn settings_with(
        &self,
        recipe: &str,
        loader: Option<&dyn ModuleLoader>,
    ) -> Result<RecipeSettings, PythonRecipeError> {
        let items = self.top_level();
        let item = items.iter().rev().find(|item| item.name == recipe);
        let modules = loader.map(Modules::new);
        let mut eval = Evaluator::new(self, &items);
        if let Some(modules) = &modules {
            eval.modules = Some(modules);
            eval.imports = imported_names(self);
        }
        let mut defined_as = None;
        let (result, mut gaps) = match item {
            Some(item) => match item.kind {
                RecipeKind::Constant => (eval.constant(recipe), Vec::new()),
                RecipeKind::Function => {
                    let call = eval.call_function(item.node, Vec::new(), Vec::new(), 0);
                    (Ok(call.result), call.loose)
                }
            },
            // A recipe the file re-exports (`from .h100.gpt_oss import
            // gpt_oss_120b_pretrain_64gpu_h100_bf16_config as gpt_oss_120b_pretrain_config`,
            // Bridge's compatibility aliases) is read where it is defined.
            None => match eval.imported(recipe) {
                Some((module, name)) => eval.in_module(&module, |sub| {
                    defined_as = Some(name.clone());
                    match sub.functions.get(name.as_str()).copied() {
                        Some(def) => {
                            let call = sub.call_function(def, Vec::new(), Vec::new(), 0);
                            (Ok(call.result), call.loose)
                        }
                        None => (sub.constant(&name), Vec::new()),
                    }
                }),
                None => return Err(self.unknown_recipe(recipe, &items)),
            },
        };
        let mut tree = match result {
            Ok(Binding::Known(known)) => {
                gaps.splice(0..0, known.gaps);
                known.value
            }
            Ok(Binding::Unknown(reason)) | Err(reason) => {
                gaps.insert(0, Gap::whole(recipe, reason));
                Value::Object(Map::new())
            }
        };
        if eval.workload_base_config {
            switch_on_layer_offloading(&mut tree);
        }
        if let Some(statement) = eval.raised.take() {
            return Err(PythonRecipeError::Raises {
                name: recipe.to_owned(),
                statement,
            });
        }
        // A checkpoint named outside an evaluated call (`AutoConfig.from_pretrained(BASE)
        // .text_config`, then `AutoBridge.from_hf_config(text_config)`) still names the model.
        let hf_checkpoint = eval
            .hf_checkpoint
            .take()
            .or_else(|| item.and_then(|item| eval.hf_repository_in(item.node)));
        let mut unevaluated: Vec<(String, String)> = gaps.into_iter().map(Gap::into_pair).collect();
        let modules_read = match &modules {
            Some(modules) => {
                unevaluated.extend(modules.refused().into_iter().map(|(id, why)| {
                    (format!("module {id}"), format!("{MODULE_NOT_READ}: {why}"))
                }));
                modules.read()
            }
            None => Vec::new(),
        };
        Ok(RecipeSettings {
            tree,
            unevaluated,
            base_recipe: eval.base_recipe,
            hf_checkpoint,
            modules_read,
            defined_as,
            flex_backend_helper: eval.flex_backend_helper.take(),
        })
    }

    /// Whether the module defines a function or constant `name` at its top level.
    fn defines(&self, name: &str) -> bool {
        self.top_level().iter().any(|item| item.name == name)
    }

    fn text(&self, node: Node<'_>) -> &str {
        node.utf8_text(self.source.as_bytes()).unwrap_or("")
    }

    fn first_syntax_error(&self) -> Option<Node<'_>> {
        let root = self.tree.root_node();
        if !root.has_error() {
            return None;
        }
        let mut cursor = root.walk();
        loop {
            let node = cursor.node();
            if node.is_error() || node.is_missing() {
                return Some(node);
            }
            let descend = node.has_error() && cursor.goto_first_child();
            if !descend {
                loop {
                    if cursor.goto_next_sibling() {
                        break;
                    }
                    if !cursor.goto_parent() {
                        return Some(root);
                    }
                }
            }
        }
    }

    fn top_level(&self) -> Vec<TopItem<'_>> {
        let root = self.tree.root_node();
        let mut items = Vec::new();
        let mut cursor = root.walk();
        for outer in root.named_children(&mut cursor) {
            let (node, kind) = match outer.kind() {
                "function_definition" => (outer, RecipeKind::Function),
                "decorated_definition" => match outer.child_by_field_name("definition") {
                    Some(def) if def.kind() == "function_definition" => (def, RecipeKind::Function),
                    _ => continue,
                },
                "expression_statement" => match single_named_child(outer) {
                    Some(assign) if assign.kind() == "assignment" => (assign, RecipeKind::Constant),
                    _ => continue,
                },
                _ => continue,
            };
            let name_node = match kind {
                RecipeKind::Function => node.child_by_field_name("name"),
                RecipeKind::Constant => node
                    .child_by_field_name("left")
                    .filter(|left| left.kind() == "identifier"),
            };
            let Some(name_node) = name_node else { continue };
            let name = self.text(name_node);
            if kind == RecipeKind::Constant && name.starts_with("__") && name.ends_with("__") {
                continue;
            }
            items.push(TopItem {
                name,
                kind,
                outer,
                node,
            });
        }
        items
    }

    fn unknown_recipe(&self, name: &str, items: &[TopItem<'_>]) -> PythonRecipeError {
        let mut scored: Vec<(f64, &str)> = items
            .iter()
            .map(|item| (strsim::jaro_winkler(name, item.name), item.name))
            .filter(|(score, _)| *score >= 0.75)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.dedup_by(|a, b| a.1 == b.1);
        let closest: Vec<String> = scored
            .iter()
            .take(3)
            .map(|(_, n)| (*n).to_owned())
            .collect();
        let imported = imported_names(self);
        let hint = if let Some(import) = imported.get(name) {
            let dots = ".".repeat(import.level);
            format!(
                "it imports `{name}` from `{dots}{}` (as `{}`), which was not available to \
                 read: keep the file inside its checkout, or give that module's file",
                import.module, import.name
            )
        } else if !closest.is_empty() {
            format!("did you mean {}?", quote_list(&closest))
        } else if items.is_empty() {
            "the file has no module-level function or constant".to_owned()
        } else {
            let all: Vec<String> = items.iter().map(|i| i.name.to_owned()).collect();
            format!("it defines {}", quote_list(&all))
        };
        PythonRecipeError::UnknownRecipe {
            name: name.to_owned(),
            closest,
            hint,
        }
    }
}

fn quote_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) struct TopItem<'f> {
    name: &'f str,
    kind: RecipeKind,
    /// The statement as it stands in the module (decorators included).
    outer: Node<'f>,
    /// The `function_definition` or `assignment` itself.
    node: Node<'f>,
}

/// Something that could not be evaluated, at a key path of the value it belongs to.
#[derive(Debug, Clone)]
struct Gap {
    path: Vec<String>,
    /// Source text naming the gap when it is not a key (a call, a whole recipe).
    what: Option<String>,
    reason: String,
}

impl Gap {
    fn at(path: Vec<String>, reason: String) -> Gap {
        Gap {
            path,
            what: None,
            reason,
        }
    }
    fn whole(what: &str, reason: String) -> Gap {
        Gap {
            path: Vec::new(),
            what: Some(snippet(what)),
            reason,
        }
    }
    fn prefixed(mut self, prefix: &[String]) -> Gap {
        let mut path = prefix.to_vec();
        path.append(&mut self.path);
        self.path = path;
        self
    }
    fn into_pair(self) -> (String, String) {
        let key = self.path.join(".");
        let label = match (key.is_empty(), self.what) {
            (_, None) => key,
            (true, Some(what)) => what,
            (false, Some(what)) => format!("{key}: {what}"),
        };
        (label, self.reason)
    }
}

/// A value known from the file, with the parts of it that are not.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub(super) value: Value,
    gaps: Vec<Gap>,
}

impl Known {
    fn plain(value: Value) -> Known {
        Known {
            value,
            gaps: Vec::new(),
        }
    }

    /// Sets `path` (creating objects on the way) and forgets gaps the new value supersedes.
    fn set(&mut self, path: &[String], value: Known) {
        self.gaps.retain(|gap| !gap.path.starts_with(path));
        self.gaps
            .extend(value.gaps.into_iter().map(|g| g.prefixed(path)));
        set_path(&mut self.value, path, value.value);
    }

    /// Drops the value at `path` and its gaps: a setting the file replaced under another name.
    fn forget_quietly(&mut self, path: &[String]) {
        self.gaps.retain(|gap| !gap.path.starts_with(path));
        remove_path(&mut self.value, path);
    }

    /// Records that `path` is no longer known (and drops the stale value there).
    fn forget(&mut self, path: &[String], what: Option<String>, reason: String) {
        self.gaps.retain(|gap| !gap.path.starts_with(path));
        remove_path(&mut self.value, path);
        self.gaps.push(Gap {
            path: path.to_vec(),
            what,
            reason,
        });
    }
}

#[derive(Debug, Clone)]
enum Binding {
    Known(Known),
    Unknown(String),
}

pub(super) fn set_path(target: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *target = value;
        return;
    };
    let mut node = target;
    for key in parents {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else { return };
        node = map
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    if let Value::Object(map) = node {
        map.insert(last.clone(), value);
    }
}

fn remove_path(target: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        *target = Value::Object(Map::new());
        return;
    };
    let mut node = target;
    for key in parents {
        match node.get_mut(key) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Value::Object(map) = node {
        map.remove(last);
    }
}

fn get_path<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |node, key| node.get(key))
}

fn single_named_child(node: Node<'_>) -> Option<Node<'_>> {
    let mut cursor = node.walk();
    let mut children = node
        .named_children(&mut cursor)
        .filter(|c| c.kind() != "comment");
    let first = children.next()?;
    children.next().is_none().then_some(first)
}

/// How a note names a module the recipe imports that its loader could not read.
pub const MODULE_NOT_READ: &str = "imported but not read";

/// The function a note of this reader says is defined outside the recipe's file (a base
/// recipe or helper it calls but could not read), parsed from the forms the reader writes
/// them in; `None` for any other note (a class's defaults are not a call).
pub fn callee_defined_outside(reason: &str) -> Option<&str> {
    [
        "`, which is defined outside this file",
        "` is defined outside this file",
        "` sets (defined outside this file)",
    ]
    .iter()
    .find_map(|marker| {
        let end = reason.find(marker)?;
        let start = reason[..end].rfind('`')?.saturating_add(1);
        reason.get(start..end)
    })
}

pub(super) fn snippet(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SNIPPET_CHARS {
        flat
    } else {
        let cut: String = flat.chars().take(SNIPPET_CHARS).collect();
        format!("{cut}…")
    }
}

/// The outcome of evaluating one function body.
struct CallResult {
    result: Binding,
    /// Gaps tied to no returned value (calls on locals that are not returned, loose statements).
    loose: Vec<Gap>,
    /// Final bindings of the parameters, for writing back what a helper changed.
    params: HashMap<String, Binding>,
}

impl CallResult {
    fn unknown(reason: String) -> CallResult {
        CallResult {
            result: Binding::Unknown(reason),
            loose: Vec::new(),
            params: HashMap::new(),
        }
    }
}

#[derive(Clone)]
pub(super) struct Frame<'f> {
    env: HashMap<String, Binding>,
    /// The name whose value the function returns (its gaps are keyed without this prefix).
    root: String,
    loose: Vec<Gap>,
    returned: Option<Binding>,
    function: &'f str,
    /// Why a `return` may have run in a block that was not evaluated (an undecided condition).
    may_have_returned: Option<String>,
}

pub(super) struct Evaluator<'f> {
    file: &'f RecipeFile,
    constants: HashMap<&'f str, Node<'f>>,
    functions: HashMap<&'f str, Node<'f>>,
    constant_cache: HashMap<String, Result<Known, String>>,
    /// Constants and functions being evaluated, to refuse cycles.
    active: Vec<String>,
    /// The first base recipe called from outside the file (`deepseek_v3_pretrain_config`).
    base_recipe: Option<String>,
    /// The first HuggingFace checkpoint the model is built from (`from_hf_pretrained`).
    hf_checkpoint: Option<String>,
    /// The backend `apply_flex_dispatcher_backend` was called with, if any.
    flex_backend_helper: Option<FlexBackend>,
    /// The first `raise` that certainly runs (the recipe then returns no configuration).
    raised: Option<String>,
    /// A Megatron-Bridge performance config (`WorkloadBaseConfig(...)`) was built: its fields
    /// mean what the performance launcher makes of them.
    workload_base_config: bool,
    /// The modules imported names are read from, when the caller can provide them.
    modules: Option<&'f Modules<'f>>,
    /// This file's id among those modules (`None`: the recipe file itself).
    module_id: Option<String>,
    /// The names this file imports (empty without `modules`).
    imports: HashMap<String, ImportedName>,
    /// The local names of Megatron-Core's configuration enums this file imports (read with or
    /// without `modules`: their members are written by name).
    megatron_enums: HashSet<String>,
}

/// Where a called function is defined.
enum Target<'f> {
    /// In the file being evaluated.
    Local(Node<'f>),
    /// In an imported module, under the name it has there.
    Imported(Rc<Module>, String),
}

pub(super) type Eval = Result<Known, String>;

/// Syntax nodes searched for a checkpoint name: a whole recipe function (a few thousand).
const MAX_CHECKPOINT_SCAN_NODES: usize = 100_000;

/// Megatron-Bridge's benchmark-defaults helper, called by every performance recipe.
const BENCHMARK_COMMON: &str = "_benchmark_common";

enum Flow {
    Next,
    Return,
}

/// Why the statements of a block are recorded rather than applied.
#[derive(Debug, Clone)]
struct Skip {
    reason: String,
    /// True when the block may run (an undecidable condition, a loop): values it sets become
    /// unknown. False when it certainly does not run: values stay, the gap is only reported.
    may_run: bool,
}

fn first_identifier(node: Node<'_>) -> Option<Node<'_>> {
    let mut cursor = node.walk();
    let found = node
        .named_children(&mut cursor)
        .find(|c| c.kind() == "identifier");
    found
}

/// Runs `f` on a binding about to have attributes set on it: an unknown base becomes an empty
/// object whose gap says where it came from.
fn with_known<R>(binding: &mut Binding, name: &str, f: impl FnOnce(&mut Known) -> R) -> R {
    let mut known = match std::mem::replace(binding, Binding::Unknown(String::new())) {
        Binding::Known(k) => k,
        Binding::Unknown(reason) => Known {
            value: Value::Object(Map::new()),
            gaps: vec![Gap::whole(
                name,
                format!(
                    "`{name}` starts from a value not known here ({reason}); only the settings this file assigns are known"
                ),
            )],
        },
    };
    if !known.value.is_object() {
        known.value = Value::Object(Map::new());
    }
    let result = f(&mut known);
    *binding = Binding::Known(known);
    result
}

/// A performance config's `cpu_offloading_num_layers` N > 0 switches whole-layer offloading on:
/// Megatron-Bridge's performance launcher sets `cpu_offloading` (and offloads activations, not
/// weights) for it (`scripts/performance/utils/overrides.py`, v0.6.0), where Megatron-Core
/// alone would offload nothing without the switch.
fn switch_on_layer_offloading(tree: &mut Value) {
    let Some(fields) = tree.as_object_mut() else {
        return;
    };
    let offloads = fields
        .get("cpu_offloading_num_layers")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 0);
    if offloads && !fields.contains_key("cpu_offloading") {
        fields.insert("cpu_offloading".into(), Value::Bool(true));
    }
}
