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

use std::collections::HashMap;
use std::rc::Rc;

use serde::Serialize;
use serde_json::{Map, Number, Value};
use tree_sitter::{Node, Parser, Tree};

use super::bridge_recipe_name;
use crate::model::config::FlexBackend;

mod builtins;
mod imports;
use imports::{imported_names, ImportedName, Module, Modules};
pub use imports::{module_file_matches, LoadedModule, ModuleLoader, ModuleTexts};

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
        let tree = match result {
            Ok(Binding::Known(known)) => {
                gaps.splice(0..0, known.gaps);
                known.value
            }
            Ok(Binding::Unknown(reason)) | Err(reason) => {
                gaps.insert(0, Gap::whole(recipe, reason));
                Value::Object(Map::new())
            }
        };
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
    /// The modules imported names are read from, when the caller can provide them.
    modules: Option<&'f Modules<'f>>,
    /// This file's id among those modules (`None`: the recipe file itself).
    module_id: Option<String>,
    /// The names this file imports (empty without `modules`).
    imports: HashMap<String, ImportedName>,
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

impl<'f> Evaluator<'f> {
    pub(super) fn new(file: &'f RecipeFile, items: &[TopItem<'f>]) -> Evaluator<'f> {
        let mut constants = HashMap::new();
        let mut functions = HashMap::new();
        for item in items {
            match item.kind {
                RecipeKind::Constant => {
                    if let Some(right) = item.node.child_by_field_name("right") {
                        constants.insert(item.name, right);
                    }
                }
                RecipeKind::Function => {
                    functions.insert(item.name, item.node);
                }
            }
        }
        Evaluator {
            file,
            constants,
            functions,
            constant_cache: HashMap::new(),
            active: Vec::new(),
            base_recipe: None,
            hf_checkpoint: None,
            flex_backend_helper: None,
            raised: None,
            modules: None,
            module_id: None,
            imports: HashMap::new(),
        }
    }

    /// What the call stack records for `name` defined in this evaluator's module: a
    /// function of another module may share a recipe's name (Bridge's H100 DeepSeek-V3
    /// performance recipe calls the library recipe of the same name through an alias), and
    /// that is not recursion.
    fn call_key(&self, name: &str) -> String {
        match &self.module_id {
            Some(module) => format!("{module}:{name}"),
            None => name.to_owned(),
        }
    }

    /// The module and name an imported `name` is defined under, when its module can be read.
    fn imported(&self, name: &str) -> Option<(Rc<Module>, String)> {
        let modules = self.modules?;
        let import = self.imports.get(name)?;
        modules.definition(self.module_id.as_deref(), import)
    }

    /// The function a call by plain name reaches: this file's, else an imported one.
    fn target(&self, function: Node<'f>) -> Option<Target<'f>> {
        if function.kind() != "identifier" {
            return None;
        }
        let name = self.text(function);
        if let Some(&def) = self.functions.get(name) {
            return Some(Target::Local(def));
        }
        let (module, def_name) = self.imported(name)?;
        Some(Target::Imported(module, def_name))
    }

    /// Runs `f` with an evaluator of `module` that shares this one's modules and call stack,
    /// then keeps what it learned about the recipe as a whole (base recipe, checkpoint, raise).
    fn in_module<R>(&mut self, module: &Module, f: impl FnOnce(&mut Evaluator<'_>) -> R) -> R {
        let items = module.file.top_level();
        let mut sub = Evaluator::new(&module.file, &items);
        sub.modules = self.modules;
        sub.module_id = Some(module.id.clone());
        sub.imports = module.imports.clone();
        sub.active = std::mem::take(&mut self.active);
        let result = f(&mut sub);
        self.active = std::mem::take(&mut sub.active);
        if self.base_recipe.is_none() {
            self.base_recipe = sub.base_recipe.take();
        }
        if self.hf_checkpoint.is_none() {
            self.hf_checkpoint = sub.hf_checkpoint.take();
        }
        if sub.flex_backend_helper.is_some() {
            self.flex_backend_helper = sub.flex_backend_helper.take();
        }
        if self.raised.is_none() {
            self.raised = sub.raised.take();
        }
        result
    }

    /// Calls `target` with the arguments of `call` (evaluated here); returns what it did and,
    /// for each argument, the parameter it binds and its node (for writing back).
    #[allow(clippy::type_complexity)]
    fn invoke(
        &mut self,
        target: Target<'f>,
        call: Node<'f>,
        frame: &Frame<'f>,
        depth: usize,
    ) -> (CallResult, Vec<(Option<String>, Node<'f>)>) {
        match target {
            Target::Local(def) => {
                let params = self.positional_parameter_names(def);
                let (positional, keywords, nodes) =
                    self.call_arguments(call, frame, &params, depth);
                (self.call_function(def, positional, keywords, depth), nodes)
            }
            Target::Imported(module, name) => {
                // The parameter names are the module's; the arguments are evaluated here.
                let not_a_function = || format!("`{name}` in {} is not a function", module.id);
                let params = self.in_module(&module, |sub| {
                    sub.functions
                        .get(name.as_str())
                        .map(|&def| sub.positional_parameter_names(def))
                });
                let Some(params) = params else {
                    return (CallResult::unknown(not_a_function()), Vec::new());
                };
                let (positional, keywords, nodes) =
                    self.call_arguments(call, frame, &params, depth);
                let result =
                    self.in_module(&module, |sub| match sub.functions.get(name.as_str()) {
                        Some(&def) => {
                            sub.call_function(def, positional, keywords, depth.saturating_add(1))
                        }
                        None => CallResult::unknown(not_a_function()),
                    });
                (result, nodes)
            }
        }
    }

    pub(super) fn text(&self, node: Node<'_>) -> &'f str {
        node.utf8_text(self.file.source.as_bytes()).unwrap_or("")
    }

    fn constant(&mut self, name: &str) -> Result<Binding, String> {
        self.constant_value(name, 0).map(Binding::Known)
    }

    fn constant_value(&mut self, name: &str, depth: usize) -> Eval {
        if let Some(cached) = self.constant_cache.get(name) {
            return cached.clone();
        }
        let Some(&right) = self.constants.get(name) else {
            if let Some((module, def_name)) = self.imported(name) {
                return self.in_module(&module, |sub| {
                    if sub.constants.contains_key(def_name.as_str()) {
                        sub.constant_value(&def_name, depth.saturating_add(1))
                    } else {
                        Err(format!(
                            "`{name}` is a function of {}, not a value",
                            module.id
                        ))
                    }
                });
            }
            return Err(format!("`{name}` is not defined in this file"));
        };
        let key = self.call_key(name);
        if self.active.contains(&key) {
            return Err(format!("`{name}` refers to itself"));
        }
        self.active.push(key);
        // Module constants see only the module: evaluate without a function frame.
        let result = if right.kind() == "assignment" {
            Err(format!("`{name}` is a chained assignment"))
        } else {
            self.eval(right, None, depth.saturating_add(1))
        };
        self.active.pop();
        self.constant_cache.insert(name.to_owned(), result.clone());
        result
    }

    // ----- functions and statements -------------------------------------------------------

    fn call_function(
        &mut self,
        def: Node<'f>,
        positional: Vec<Binding>,
        keywords: Vec<(String, Binding)>,
        depth: usize,
    ) -> CallResult {
        let name = def
            .child_by_field_name("name")
            .map(|n| self.text(n))
            .unwrap_or("<function>");
        let fail = CallResult::unknown;
        if depth > MAX_DEPTH {
            return fail(format!("`{name}` calls nest too deeply to evaluate"));
        }
        let key = self.call_key(name);
        if self.active.contains(&key) {
            return fail(format!("`{name}` calls itself"));
        }
        self.active.push(key);
        let mut frame = Frame {
            env: HashMap::new(),
            root: String::new(),
            loose: Vec::new(),
            returned: None,
            function: name,
            may_have_returned: None,
        };
        let param_names = self.bind_parameters(def, positional, keywords, &mut frame, depth);
        frame.root = def
            .child_by_field_name("body")
            .and_then(|body| self.returned_name(body))
            .or_else(|| param_names.first().cloned())
            .unwrap_or_else(|| "cfg".to_owned());
        if let Some(body) = def.child_by_field_name("body") {
            self.exec_block(body, &mut frame, None, depth.saturating_add(1));
        }
        self.active.pop();
        let result = match frame.returned.take() {
            Some(binding) => binding,
            None => frame
                .env
                .get(&frame.root)
                .cloned()
                .unwrap_or_else(|| Binding::Known(Known::plain(Value::Null))),
        };
        let params = param_names
            .iter()
            .filter_map(|p| frame.env.get(p).map(|b| (p.clone(), b.clone())))
            .collect();
        CallResult {
            result,
            loose: frame.loose,
            params,
        }
    }

    /// Binds arguments to parameters (defaults evaluated at module level, as Python does);
    /// returns the parameter names in order.
    fn bind_parameters(
        &mut self,
        def: Node<'f>,
        positional: Vec<Binding>,
        mut keywords: Vec<(String, Binding)>,
        frame: &mut Frame<'f>,
        depth: usize,
    ) -> Vec<String> {
        let mut names = Vec::new();
        let mut positional = positional.into_iter();
        let mut keyword_only = false;
        let Some(params) = def.child_by_field_name("parameters") else {
            return names;
        };
        let mut cursor = params.walk();
        for param in params.named_children(&mut cursor) {
            let (name_node, default) = match param.kind() {
                "identifier" => (Some(param), None),
                "typed_parameter" => (first_identifier(param), None),
                "default_parameter" | "typed_default_parameter" => (
                    param.child_by_field_name("name"),
                    param.child_by_field_name("value"),
                ),
                "list_splat_pattern" | "dictionary_splat_pattern" => {
                    keyword_only = true;
                    if let Some(n) = first_identifier(param) {
                        let n = self.text(n).to_owned();
                        frame.env.insert(
                            n.clone(),
                            Binding::Unknown(format!("`{n}` collects extra arguments")),
                        );
                    }
                    continue;
                }
                "keyword_separator" => {
                    keyword_only = true;
                    continue;
                }
                _ => continue,
            };
            let Some(name_node) = name_node else { continue };
            let pname = self.text(name_node).to_owned();
            let given = keywords
                .iter()
                .position(|(k, _)| *k == pname)
                .map(|i| keywords.remove(i).1)
                .or_else(|| {
                    if keyword_only {
                        None
                    } else {
                        positional.next()
                    }
                });
            let binding = match (given, default) {
                (Some(b), _) => b,
                (None, Some(d)) => match self.eval(d, None, depth.saturating_add(1)) {
                    Ok(k) => Binding::Known(k),
                    Err(reason) => {
                        Binding::Unknown(format!("the default of parameter `{pname}`: {reason}"))
                    }
                },
                (None, None) => Binding::Unknown(format!(
                    "parameter `{pname}` of `{}` has no default",
                    frame.function
                )),
            };
            frame.env.insert(pname.clone(), binding);
            names.push(pname);
        }
        for (k, _) in keywords {
            frame.loose.push(Gap::whole(
                &format!("{}({k}=...)", frame.function),
                format!("`{}` has no parameter `{k}`", frame.function),
            ));
        }
        names
    }

    /// The identifier of the function's top-level `return <name>`, if that is how it returns.
    fn returned_name(&self, body: Node<'f>) -> Option<String> {
        let mut cursor = body.walk();
        let names: Vec<String> = body
            .named_children(&mut cursor)
            .filter(|s| s.kind() == "return_statement")
            .filter_map(single_named_child)
            .filter(|e| e.kind() == "identifier")
            .map(|e| self.text(e).to_owned())
            .collect();
        names.last().cloned()
    }

    /// `try:` runs its body; when a statement of it certainly raises, what that statement did
    /// is undone (the statements before it stay done, as in Python) and the only `except`
    /// clause runs instead (several clauses: which one catches is not decided, so the block is
    /// recorded as not evaluated). `else` runs after a body that does not raise, `finally`
    /// always.
    fn exec_try(&mut self, statement: Node<'f>, frame: &mut Frame<'f>, depth: usize) -> Flow {
        let depth = depth.saturating_add(1);
        let mut cursor = statement.walk();
        let clauses: Vec<Node<'f>> = statement.named_children(&mut cursor).collect();
        let clause_body = |clause: Node<'f>| {
            clause.child_by_field_name("body").or_else(|| {
                let mut c = clause.walk();
                let last = clause
                    .named_children(&mut c)
                    .filter(|n| n.kind() == "block")
                    .last();
                last
            })
        };
        let handlers: Vec<Node<'f>> = clauses
            .iter()
            .copied()
            .filter(|c| matches!(c.kind(), "except_clause" | "except_group_clause"))
            .collect();
        let of_kind = |kind: &str| clauses.iter().copied().find(|c| c.kind() == kind);
        let Some(body) = statement.child_by_field_name("body") else {
            return Flow::Next;
        };
        let outer_raise = self.raised.take();
        let mut flow = Flow::Next;
        let mut body_cursor = body.walk();
        let statements: Vec<Node<'f>> = body.named_children(&mut body_cursor).collect();
        for statement in statements {
            let before = frame.clone();
            flow = self.exec_statement(statement, frame, None, depth);
            if self.raised.is_some() {
                *frame = before;
                break;
            }
            if let Flow::Return = flow {
                break;
            }
        }
        let raised = std::mem::replace(&mut self.raised, outer_raise);
        match raised {
            None => {
                if let (Flow::Next, Some(body)) =
                    (&flow, of_kind("else_clause").and_then(clause_body))
                {
                    flow = self.exec_block(body, frame, None, depth);
                }
            }
            Some(statement_raised) => {
                flow = Flow::Next;
                match handlers.as_slice() {
                    [only] => {
                        if let Some(body) = clause_body(*only) {
                            flow = self.exec_block(body, frame, None, depth);
                        }
                    }
                    _ => {
                        let skip = Skip {
                            reason: format!(
                                "the `try` body raises (`{statement_raised}`) and which of its \
                                 `except` clauses catches it is not decided"
                            ),
                            may_run: true,
                        };
                        self.skip_children(statement, frame, &skip, depth);
                    }
                }
            }
        }
        if let Some(body) = of_kind("finally_clause").and_then(clause_body) {
            if let Flow::Return = self.exec_block(body, frame, None, depth) {
                return Flow::Return;
            }
        }
        flow
    }

    fn exec_block(
        &mut self,
        block: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) -> Flow {
        if depth > MAX_DEPTH {
            frame.loose.push(Gap::whole(
                self.text(block),
                "statements nest too deeply to evaluate".into(),
            ));
            return Flow::Next;
        }
        let mut cursor = block.walk();
        let statements: Vec<Node<'f>> = block.named_children(&mut cursor).collect();
        for statement in statements {
            if let Flow::Return = self.exec_statement(statement, frame, skip, depth) {
                return Flow::Return;
            }
        }
        Flow::Next
    }

    fn exec_statement(
        &mut self,
        statement: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) -> Flow {
        let depth = depth.saturating_add(1);
        match statement.kind() {
            "expression_statement" => {
                let mut cursor = statement.walk();
                let parts: Vec<Node<'f>> = statement.named_children(&mut cursor).collect();
                for part in parts {
                    match part.kind() {
                        "assignment" => self.exec_assignment(part, frame, skip, depth),
                        "augmented_assignment" => self.exec_augmented(part, frame, skip),
                        "call" => self.exec_call_statement(part, frame, skip, depth),
                        _ => {}
                    }
                }
                Flow::Next
            }
            "if_statement" => self.exec_if(statement, frame, skip, depth),
            "return_statement" => {
                if let Some(skip) = skip {
                    if skip.may_run {
                        frame
                            .may_have_returned
                            .get_or_insert_with(|| skip.reason.clone());
                    }
                    return Flow::Next;
                }
                // A bare `return` ends the function as falling off its end does (its result is
                // then the object it built, see `call_function`); `return <expr>` gives that
                // value, None included (`layout_map[(1, 1)]` holding None is a None layout).
                frame.returned = single_named_child(statement).map(|expr| {
                    match self.eval(expr, Some(&*frame), depth) {
                        Ok(k) => Binding::Known(k),
                        Err(reason) => Binding::Unknown(reason),
                    }
                });
                Flow::Return
            }
            "raise_statement" => {
                if skip.is_some() {
                    return Flow::Next;
                }
                // A raise after a `return` that may have run (in a branch not decided) is not
                // certain: the function's value is then not known, but it is not refused.
                if let Some(why) = frame.may_have_returned.clone() {
                    let raised = snippet(self.text(statement));
                    frame.returned = Some(Binding::Unknown(format!(
                        "it raises (`{raised}`) unless it returned earlier, in a block not \
                         evaluated: {why}"
                    )));
                    return Flow::Return;
                }
                // A raise that certainly runs ends the function without a configuration.
                let raised = snippet(self.text(statement));
                frame.returned = Some(Binding::Unknown(format!("it raises: `{raised}`")));
                self.raised.get_or_insert(raised);
                Flow::Return
            }
            "with_statement" => match statement.child_by_field_name("body") {
                Some(body) => self.exec_block(body, frame, skip, depth),
                None => Flow::Next,
            },
            "try_statement" if skip.is_none() => self.exec_try(statement, frame, depth),
            "for_statement" | "while_statement" | "try_statement" | "match_statement" => {
                let inner = match skip {
                    Some(outer) => outer.clone(),
                    None => Skip {
                        reason: format!(
                            "set inside a `{}` block, which is not evaluated",
                            statement.kind().trim_end_matches("_statement")
                        ),
                        may_run: true,
                    },
                };
                self.skip_children(statement, frame, &inner, depth);
                Flow::Next
            }
            "delete_statement" => {
                frame.loose.push(Gap::whole(
                    self.text(statement),
                    "`del` is not evaluated".into(),
                ));
                Flow::Next
            }
            "ERROR" => {
                frame.loose.push(Gap::whole(
                    self.text(statement),
                    "this text does not parse as Python".into(),
                ));
                Flow::Next
            }
            _ => Flow::Next,
        }
    }

    /// Records every assignment and call inside `node`'s blocks as not applied.
    fn skip_children(&mut self, node: Node<'f>, frame: &mut Frame<'f>, skip: &Skip, depth: usize) {
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "block" => {
                    self.exec_block(child, frame, Some(skip), depth.saturating_add(1));
                }
                "else_clause"
                | "except_clause"
                | "except_group_clause"
                | "finally_clause"
                | "case_clause" => {
                    self.skip_children(child, frame, skip, depth.saturating_add(1));
                }
                _ => {}
            }
        }
    }

    fn exec_if(
        &mut self,
        statement: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) -> Flow {
        // Branches in order: (condition, or None for `else`; block).
        let mut branches: Vec<(Option<Node<'f>>, Node<'f>)> = Vec::new();
        if let Some(body) = statement.child_by_field_name("consequence") {
            branches.push((statement.child_by_field_name("condition"), body));
        }
        let mut cursor = statement.walk();
        let clauses: Vec<Node<'f>> = statement
            .children_by_field_name("alternative", &mut cursor)
            .collect();
        for clause in clauses {
            match clause.kind() {
                "elif_clause" => {
                    if let Some(body) = clause.child_by_field_name("consequence") {
                        branches.push((clause.child_by_field_name("condition"), body));
                    }
                }
                "else_clause" => {
                    if let Some(body) = clause.child_by_field_name("body") {
                        branches.push((None, body));
                    }
                }
                _ => {}
            }
        }
        // Once a branch is taken the rest certainly do not run; once a condition cannot be
        // decided, it and every later branch may or may not run.
        let mut rest: Option<Skip> = skip.cloned();
        for (condition, body) in branches {
            if let Some(rest) = &rest {
                let rest = rest.clone();
                self.exec_block(body, frame, Some(&rest), depth);
                continue;
            }
            let truth = match condition {
                None => Ok(true),
                Some(c) => self.eval(c, Some(&*frame), depth).map(|k| truthy(&k.value)),
            };
            let cond_text = condition.map(|c| snippet(self.text(c))).unwrap_or_default();
            match truth {
                Ok(true) => {
                    let taken = self.exec_block(body, frame, None, depth);
                    if let Flow::Return = taken {
                        return Flow::Return;
                    }
                    rest = Some(Skip {
                        reason: "not applied: an earlier branch of this `if` is taken with this recipe's values".into(),
                        may_run: false,
                    });
                }
                Ok(false) => {
                    let not_taken = Skip {
                        reason: format!(
                            "not applied: `if {cond_text}` is false with this recipe's values"
                        ),
                        may_run: false,
                    };
                    self.exec_block(body, frame, Some(&not_taken), depth);
                }
                Err(why) => {
                    let undecided = Skip {
                        reason: format!(
                            "set only when `{cond_text}` holds, which cannot be decided from this file ({why})"
                        ),
                        may_run: true,
                    };
                    self.exec_block(body, frame, Some(&undecided), depth);
                    rest = Some(undecided);
                }
            }
        }
        Flow::Next
    }

    fn exec_assignment(
        &mut self,
        assignment: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) {
        // `a = b = value`: collect every target, then evaluate the value once.
        let mut targets = Vec::new();
        let mut node = assignment;
        let value_node = loop {
            if let Some(left) = node.child_by_field_name("left") {
                targets.push(left);
            }
            match node.child_by_field_name("right") {
                Some(right) if right.kind() == "assignment" => node = right,
                other => break other,
            }
        };
        let Some(value_node) = value_node else {
            return; // an annotation without a value (`x: int`)
        };
        if let Some(skip) = skip {
            for target in targets {
                self.assign_skipped(target, skip, frame);
            }
            return;
        }
        let value = self.eval(value_node, Some(&*frame), depth);
        for target in targets {
            self.assign(target, value.clone(), value_node, frame);
        }
    }

    /// An assignment on a path that is not (or may not be) run.
    fn assign_skipped(&mut self, target: Node<'f>, skip: &Skip, frame: &mut Frame<'f>) {
        let reason = skip.reason.clone();
        match target.kind() {
            "identifier" => {
                let name = self.text(target).to_owned();
                if !skip.may_run {
                    return; // a local on a branch not taken keeps its value
                }
                match frame.env.get_mut(&name) {
                    Some(Binding::Known(k)) => k.gaps.push(Gap::whole(&name, reason)),
                    _ => {
                        frame.env.insert(name, Binding::Unknown(reason));
                    }
                }
            }
            "attribute" => match self.attribute_chain(target) {
                Some((root, path)) if frame.env.contains_key(&root) => {
                    if let Some(binding) = frame.env.get_mut(&root) {
                        with_known(binding, &root, |known| {
                            if skip.may_run {
                                known.forget(&path, None, reason);
                            } else {
                                known.gaps.push(Gap::at(path, reason));
                            }
                        });
                    }
                }
                _ => frame.loose.push(Gap::whole(self.text(target), reason)),
            },
            "pattern_list" | "tuple_pattern" | "list_pattern" => {
                let mut cursor = target.walk();
                let parts: Vec<Node<'f>> = target.named_children(&mut cursor).collect();
                for part in parts {
                    self.assign_skipped(part, skip, frame);
                }
            }
            _ => frame.loose.push(Gap::whole(self.text(target), reason)),
        }
    }

    fn assign(
        &mut self,
        target: Node<'f>,
        value: Eval,
        value_node: Node<'f>,
        frame: &mut Frame<'f>,
    ) {
        match target.kind() {
            "identifier" => {
                let name = self.text(target).to_owned();
                let binding = match value {
                    Ok(k) => Binding::Known(k),
                    Err(reason) => Binding::Unknown(reason),
                };
                frame.env.insert(name, binding);
            }
            "attribute" => {
                let Some((root, path)) = self.attribute_chain(target) else {
                    frame.loose.push(Gap::whole(
                        self.text(target),
                        "assignment to an attribute of an expression is not evaluated".into(),
                    ));
                    return;
                };
                let Some(binding) = frame.env.get_mut(&root) else {
                    frame.loose.push(Gap::whole(
                        self.text(target),
                        format!("`{root}` is not a local of `{}`", frame.function),
                    ));
                    return;
                };
                // The reason quotes the part of the value that could not be evaluated.
                with_known(binding, &root, |known| match value {
                    Ok(v) => known.set(&path, v),
                    Err(reason) => known.forget(&path, None, reason),
                });
            }
            "pattern_list" | "tuple_pattern" | "list_pattern" => {
                let mut cursor = target.walk();
                let parts: Vec<Node<'f>> = target.named_children(&mut cursor).collect();
                let starred = parts.iter().any(|p| p.kind() == "list_splat_pattern");
                // `a, b = f()` where `f` returns a known pair: each name takes its item.
                let items = match value {
                    Ok(Known {
                        value: Value::Array(items),
                        gaps,
                    }) if items.len() == parts.len() && !starred => Ok((items, gaps)),
                    Ok(_) => Err(format!(
                        "tuple assignment from `{}` is not evaluated (not a sequence of {} known items)",
                        snippet(self.text(value_node)),
                        parts.len()
                    )),
                    Err(reason) => Err(format!(
                        "tuple assignment from `{}`: {reason}",
                        snippet(self.text(value_node))
                    )),
                };
                match items {
                    Ok((items, gaps)) => {
                        for (index, (part, item)) in parts.into_iter().zip(items).enumerate() {
                            let key = index.to_string();
                            let own = gaps
                                .iter()
                                .filter(|g| g.path.first() == Some(&key))
                                .map(|g| {
                                    let mut g = g.clone();
                                    g.path.remove(0);
                                    g
                                })
                                .collect();
                            let known = Known {
                                value: item,
                                gaps: own,
                            };
                            self.assign(part, Ok(known), value_node, frame);
                        }
                    }
                    Err(reason) => {
                        for part in parts {
                            self.assign(part, Err(reason.clone()), value_node, frame);
                        }
                    }
                }
            }
            _ => {
                let label = snippet(self.text(target));
                let reason = format!("assignment to `{label}` is not evaluated");
                match self.subscript_root(target) {
                    Some((root, path)) if frame.env.contains_key(&root) => {
                        if let Some(binding) = frame.env.get_mut(&root) {
                            with_known(binding, &root, |known| {
                                known.forget(&path, Some(label), reason)
                            });
                        }
                    }
                    _ => frame.loose.push(Gap::whole(&label, reason)),
                }
            }
        }
    }

    fn exec_augmented(&mut self, node: Node<'f>, frame: &mut Frame<'f>, skip: Option<&Skip>) {
        let Some(target) = node.child_by_field_name("left") else {
            return;
        };
        let reason = match skip {
            Some(skip) => skip.reason.clone(),
            None => format!(
                "augmented assignment `{}` is not evaluated",
                snippet(self.text(node))
            ),
        };
        if skip.is_some_and(|s| !s.may_run) {
            frame.loose.push(Gap::whole(self.text(node), reason));
            return;
        }
        match target.kind() {
            "identifier" => {
                let name = self.text(target).to_owned();
                frame.env.insert(name, Binding::Unknown(reason));
            }
            "attribute" => match self.attribute_chain(target) {
                Some((root, path)) if frame.env.contains_key(&root) => {
                    if let Some(binding) = frame.env.get_mut(&root) {
                        with_known(binding, &root, |known| known.forget(&path, None, reason));
                    }
                }
                _ => frame.loose.push(Gap::whole(self.text(node), reason)),
            },
            _ => frame.loose.push(Gap::whole(self.text(node), reason)),
        }
    }

    /// A call used as a statement: a same-file helper is evaluated and what it does to its
    /// arguments written back; any other call that touches a local is recorded.
    fn exec_call_statement(
        &mut self,
        call: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) {
        let Some(function) = call.child_by_field_name("function") else {
            return;
        };
        let touched = self.locals_touched(call, frame);
        if touched.is_empty() {
            return; // logging, assertions on constants...: no setting can change
        }
        let callee = self.text(function);
        if let Some(skip) = skip {
            self.record_on_locals(&touched, call, frame, skip.reason.clone());
            return;
        }
        let local = if function.kind() == "identifier" {
            self.functions.get(callee).copied()
        } else {
            None
        };
        if local.is_none()
            && (self.apply_cuda_graph_helper(callee, call, frame, depth)
                || self.apply_flex_dispatcher_helper(callee, call, frame, depth))
        {
            return;
        }
        let Some(target) = self.target(function) else {
            let reason = if function.kind() == "attribute" {
                format!("`{callee}(...)` is a method call; what it changes is not known")
            } else if callee == BENCHMARK_COMMON {
                format!(
                    "of what `{callee}` sets (defined outside this file) only \
                     ddp.grad_reduce_in_fp32 = False is read; the rest is not known here"
                )
            } else {
                format!("`{callee}` is defined outside this file; the settings it changes are not known")
            };
            self.record_on_locals(&touched, call, frame, reason);
            if callee == BENCHMARK_COMMON {
                self.apply_benchmark_common(call, frame);
            }
            return;
        };
        let (result, arg_nodes) = self.invoke(target, call, frame, depth);
        frame.loose.extend(result.loose.into_iter().map(|mut g| {
            g.reason = format!("in `{callee}`: {}", g.reason);
            g
        }));
        // Write back what the helper did to each argument that names a local (or a part of one).
        for (param, arg) in arg_nodes {
            let Some(param) = param else { continue };
            let Some(after) = result.params.get(&param).cloned() else {
                continue;
            };
            let Some((root, path)) = self.local_path(arg) else {
                continue;
            };
            let what = snippet(self.text(call));
            let Some(binding) = frame.env.get_mut(&root) else {
                continue;
            };
            match after {
                Binding::Known(k) if path.is_empty() => *binding = Binding::Known(k),
                Binding::Known(k) => with_known(binding, &root, |known| known.set(&path, k)),
                Binding::Unknown(reason) => with_known(binding, &root, |known| {
                    known.forget(&path, Some(what), format!("in `{callee}`: {reason}"))
                }),
            }
        }
    }

    /// Bridge's `_benchmark_common(cfg)` (perf_recipes/_common.py, v0.6.0) reduces gradients in
    /// BF16 (`cfg.ddp.grad_reduce_in_fp32 = False`) whatever the precision recipe says; that is
    /// the one thing it sets that the memory model reads.
    fn apply_benchmark_common(&mut self, call: Node<'f>, frame: &mut Frame<'f>) {
        let Some(first) = call
            .child_by_field_name("arguments")
            .and_then(|a| a.named_child(0))
            .filter(|a| a.kind() == "identifier")
        else {
            return;
        };
        let root = self.text(first).to_owned();
        if let Some(binding) = frame.env.get_mut(&root) {
            with_known(binding, &root, |known| {
                known.set(
                    &["ddp".to_owned(), "grad_reduce_in_fp32".to_owned()],
                    Known::plain(Value::Bool(false)),
                )
            });
        }
    }

    /// The local and attribute path a helper's config argument names (`cfg.model`:
    /// `("cfg", ["model"])`), or `None` when it names no local's part.
    fn local_path(&self, node: Node<'f>) -> Option<(String, Vec<String>)> {
        match node.kind() {
            "identifier" => Some((self.text(node).to_owned(), Vec::new())),
            "attribute" => self.attribute_chain(node),
            _ => None,
        }
    }

    /// Megatron-Bridge's CUDA-graph setters (`megatron/bridge/utils/cuda_graph.py`, Bridge
    /// 067f987d), which recipes call on `cfg.model`: `set_cuda_graph_modules(config, modules)`
    /// sets the per-layer regions, `clear_cuda_graph_modules(config)` empties them (whole
    /// layers) and `set_full_iteration_cuda_graph(config)` captures one graph per iteration.
    /// False when `callee` is none of them or its config argument is not a local's path.
    fn apply_cuda_graph_helper(
        &mut self,
        callee: &str,
        call: Node<'f>,
        frame: &mut Frame<'f>,
        depth: usize,
    ) -> bool {
        let name = callee.rsplit('.').next().unwrap_or(callee);
        if !matches!(
            name,
            "set_cuda_graph_modules" | "clear_cuda_graph_modules" | "set_full_iteration_cuda_graph"
        ) {
            return false;
        }
        let args = call.child_by_field_name("arguments");
        let arg = |i: u32| args.and_then(|a| a.named_child(i));
        let Some((root, path)) = arg(0).and_then(|target| self.local_path(target)) else {
            return false;
        };
        let at = |field: &str| {
            let mut p = path.clone();
            p.push(field.to_owned());
            p
        };
        let modules: Eval = match name {
            "set_cuda_graph_modules" => match arg(1) {
                Some(node) => self.eval(node, Some(&*frame), depth),
                None => Err("`set_cuda_graph_modules` is called without its modules".into()),
            },
            _ => Ok(Known::plain(Value::Array(Vec::new()))),
        };
        let what = snippet(self.text(call));
        let Some(binding) = frame.env.get_mut(&root) else {
            return false;
        };
        with_known(binding, &root, |known| {
            match modules {
                Ok(list) => known.set(&at("cuda_graph_scope"), list),
                Err(reason) => known.forget(&at("cuda_graph_scope"), Some(what), reason),
            }
            known.forget_quietly(&at("cuda_graph_modules"));
            if name == "set_full_iteration_cuda_graph" {
                known.set(
                    &at("cuda_graph_impl"),
                    Known::plain(Value::String("full_iteration".into())),
                );
            }
        });
        true
    }

    /// Megatron-Bridge's `apply_flex_dispatcher_backend(model_config, backend)`
    /// (`src/megatron/bridge/training/flex_dispatcher_backend.py`, Megatron-Bridge 79308d0d),
    /// which most MoE recipes end with: for `deepep` or `hybridep` it sets
    /// `moe_token_dispatcher_type = "flex"`, the backend and `moe_shared_expert_overlap = False`;
    /// any other backend (None too) changes nothing. On a GPU the backend does not run on it
    /// falls back to `alltoall` at run time (DeepEP: Ampere, Hopper, B200, B300 only): the
    /// backend is recorded (`RecipeSettings::flex_backend_helper`) for the caller, who knows the
    /// GPU. Read as unknown, it left recipes on the `alltoall` they set first while the run
    /// used the flex dispatcher.
    fn apply_flex_dispatcher_helper(
        &mut self,
        callee: &str,
        call: Node<'f>,
        frame: &mut Frame<'f>,
        depth: usize,
    ) -> bool {
        let name = callee.rsplit('.').next().unwrap_or(callee);
        if name != "apply_flex_dispatcher_backend" {
            return false;
        }
        let Some(args) = call.child_by_field_name("arguments") else {
            return false;
        };
        // (model_config, moe_flex_dispatcher_backend=None), by position or by name.
        let mut cursor = args.walk();
        let (mut target, mut backend_node, mut position) = (None, None, 0);
        for arg in args
            .named_children(&mut cursor)
            .filter(|n| n.kind() != "comment")
        {
            let (slot, value) = if arg.kind() == "keyword_argument" {
                match arg.child_by_field_name("name").map(|k| self.text(k)) {
                    Some("model_config") => (0, arg.child_by_field_name("value")),
                    Some("moe_flex_dispatcher_backend") => (1, arg.child_by_field_name("value")),
                    _ => return false,
                }
            } else {
                position += 1;
                (position - 1, Some(arg))
            };
            match slot {
                0 => target = value,
                1 => backend_node = value,
                _ => return false,
            }
        }
        let Some((root, path)) = target.and_then(|t| self.local_path(t)) else {
            return false;
        };
        let backend: Eval = match backend_node {
            Some(node) => self.eval(node, Some(&*frame), depth),
            None => Ok(Known::plain(Value::Null)),
        };
        let at = |field: &str| {
            let mut p = path.clone();
            p.push(field.to_owned());
            p
        };
        let what = snippet(self.text(call));
        let chosen = backend
            .as_ref()
            .map(|k| k.value.as_str().map(str::to_owned));
        let Some(binding) = frame.env.get_mut(&root) else {
            return false;
        };
        if let Ok(Some(b)) = &chosen {
            self.flex_backend_helper = match b.as_str() {
                "deepep" => Some(FlexBackend::Deepep),
                "hybridep" => Some(FlexBackend::Hybridep),
                _ => self.flex_backend_helper,
            };
        }
        with_known(binding, &root, |known| match chosen {
            Ok(Some(b)) if b == "deepep" || b == "hybridep" => {
                known.set(
                    &at("moe_token_dispatcher_type"),
                    Known::plain(Value::String("flex".into())),
                );
                known.set(
                    &at("moe_flex_dispatcher_backend"),
                    Known::plain(Value::String(b)),
                );
                known.set(
                    &at("moe_shared_expert_overlap"),
                    Known::plain(Value::Bool(false)),
                );
            }
            Ok(_) => {}
            Err(reason) => {
                for field in ["moe_token_dispatcher_type", "moe_flex_dispatcher_backend"] {
                    known.forget(&at(field), Some(what.clone()), reason.clone());
                }
            }
        });
        true
    }

    fn record_on_locals(
        &mut self,
        touched: &[(String, Vec<String>)],
        call: Node<'f>,
        frame: &mut Frame<'f>,
        reason: String,
    ) {
        let what = snippet(self.text(call));
        for (root, path) in touched {
            if let Some(binding) = frame.env.get_mut(root) {
                with_known(binding, root, |known| {
                    known.gaps.push(Gap {
                        path: path.clone(),
                        what: Some(what.clone()),
                        reason: reason.clone(),
                    })
                });
            }
        }
    }

    /// Locals (and attribute paths into them) a call passes or calls a method on.
    fn locals_touched(&self, call: Node<'f>, frame: &Frame<'f>) -> Vec<(String, Vec<String>)> {
        let mut touched: Vec<(String, Vec<String>)> = Vec::new();
        let consider = |node: Node<'f>, touched: &mut Vec<(String, Vec<String>)>| {
            let chain = match node.kind() {
                "identifier" => Some((self.text(node).to_owned(), Vec::new())),
                "attribute" => self.attribute_chain(node),
                _ => None,
            };
            if let Some((root, path)) = chain {
                let is_object = matches!(frame.env.get(&root), Some(Binding::Known(k)) if k.value.is_object())
                    || matches!(frame.env.get(&root), Some(Binding::Unknown(_)));
                if is_object && !touched.iter().any(|(r, p)| *r == root && *p == path) {
                    touched.push((root, path));
                }
            }
        };
        if let Some(function) = call.child_by_field_name("function") {
            if function.kind() == "attribute" {
                if let Some(object) = function.child_by_field_name("object") {
                    consider(object, &mut touched);
                }
            }
        }
        if let Some(args) = call.child_by_field_name("arguments") {
            let mut cursor = args.walk();
            for arg in args.named_children(&mut cursor) {
                let node = if arg.kind() == "keyword_argument" {
                    arg.child_by_field_name("value")
                } else {
                    Some(arg)
                };
                if let Some(node) = node {
                    consider(node, &mut touched);
                }
            }
        }
        touched
    }

    /// Evaluated arguments of a call, and for each the parameter it binds (by position or
    /// keyword) with its source node.
    #[allow(clippy::type_complexity)]
    fn call_arguments(
        &mut self,
        call: Node<'f>,
        frame: &Frame<'f>,
        def_params: &[String],
        depth: usize,
    ) -> (
        Vec<Binding>,
        Vec<(String, Binding)>,
        Vec<(Option<String>, Node<'f>)>,
    ) {
        let mut positional = Vec::new();
        let mut keywords = Vec::new();
        let mut nodes = Vec::new();
        let Some(args) = call.child_by_field_name("arguments") else {
            return (positional, keywords, nodes);
        };
        let mut cursor = args.walk();
        let list: Vec<Node<'f>> = args.named_children(&mut cursor).collect();
        for arg in list {
            let eval_binding =
                |this: &mut Self, node: Node<'f>| match this.eval(node, Some(frame), depth) {
                    Ok(k) => Binding::Known(k),
                    Err(reason) => Binding::Unknown(reason),
                };
            match arg.kind() {
                "keyword_argument" => {
                    let (Some(name), Some(value)) = (
                        arg.child_by_field_name("name"),
                        arg.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    let name = self.text(name).to_owned();
                    let binding = eval_binding(self, value);
                    nodes.push((Some(name.clone()), value));
                    keywords.push((name, binding));
                }
                "list_splat" | "dictionary_splat" | "comment" => {}
                _ => {
                    let binding = eval_binding(self, arg);
                    nodes.push((def_params.get(positional.len()).cloned(), arg));
                    positional.push(binding);
                }
            }
        }
        (positional, keywords, nodes)
    }

    fn positional_parameter_names(&self, def: Node<'f>) -> Vec<String> {
        let mut names = Vec::new();
        let Some(params) = def.child_by_field_name("parameters") else {
            return names;
        };
        let mut cursor = params.walk();
        for param in params.named_children(&mut cursor) {
            let node = match param.kind() {
                "identifier" => Some(param),
                "typed_parameter" => first_identifier(param),
                "default_parameter" | "typed_default_parameter" => {
                    param.child_by_field_name("name")
                }
                _ => break,
            };
            if let Some(node) = node {
                names.push(self.text(node).to_owned());
            }
        }
        names
    }

    /// `a.b.c` as ("a", ["b", "c"]) when the chain starts at a plain name.
    pub(super) fn attribute_chain(&self, node: Node<'f>) -> Option<(String, Vec<String>)> {
        let mut path = Vec::new();
        let mut current = node;
        loop {
            match current.kind() {
                "attribute" => {
                    path.push(
                        self.text(current.child_by_field_name("attribute")?)
                            .to_owned(),
                    );
                    current = current.child_by_field_name("object")?;
                }
                "identifier" => {
                    path.reverse();
                    return Some((self.text(current).to_owned(), path));
                }
                _ => return None,
            }
        }
    }

    /// For `cfg.env_vars["X"]`, the local and the attribute path the subscript lies in.
    fn subscript_root(&self, node: Node<'f>) -> Option<(String, Vec<String>)> {
        let object = node.child_by_field_name("value")?;
        match object.kind() {
            "identifier" => Some((self.text(object).to_owned(), Vec::new())),
            "attribute" => self.attribute_chain(object),
            "subscript" => self.subscript_root(object),
            _ => None,
        }
    }

    // ----- expressions ----------------------------------------------------------------------

    pub(super) fn eval(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        if depth > MAX_DEPTH {
            return Err("the expression nests too deeply to evaluate".into());
        }
        let depth = depth.saturating_add(1);
        let text = self.text(node);
        match node.kind() {
            "none" => Ok(Known::plain(Value::Null)),
            "true" => Ok(Known::plain(Value::Bool(true))),
            "false" => Ok(Known::plain(Value::Bool(false))),
            "integer" => parse_int(text).map(|i| Known::plain(Value::from(i))),
            "float" => parse_float(text).map(|f| Known::plain(Value::Number(f))),
            "string" => self.string(node).map(|s| Known::plain(Value::String(s))),
            "concatenated_string" => {
                let mut out = String::new();
                let mut cursor = node.walk();
                let parts: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
                for part in parts {
                    out.push_str(&self.string(part)?);
                }
                Ok(Known::plain(Value::String(out)))
            }
            "parenthesized_expression" => match single_named_child(node) {
                Some(inner) => self.eval(inner, frame, depth),
                None => Err(format!("`{}` is not evaluated", snippet(text))),
            },
            // `return a, b` is an expression list: a tuple without parentheses.
            "list" | "tuple" | "expression_list" => {
                let mut items = Vec::new();
                let mut gaps = Vec::new();
                let mut cursor = node.walk();
                let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
                for child in children {
                    if child.kind() == "comment" {
                        continue;
                    }
                    if child.kind() == "list_splat" {
                        return Err(format!("`{}` unpacks a sequence", snippet(text)));
                    }
                    let item = self.eval(child, frame, depth)?;
                    // An item's gaps (a constructor's unnamed fields) stay with it, by index.
                    let index = [items.len().to_string()];
                    gaps.extend(item.gaps.into_iter().map(|g| g.prefixed(&index)));
                    items.push(item.value);
                }
                Ok(Known {
                    value: Value::Array(items),
                    gaps,
                })
            }
            "dictionary" => self.dictionary(node, frame, depth),
            "subscript" => self.subscript_value(node, frame, depth),
            "identifier" => self.name(text, frame, depth),
            "attribute" => self.attribute(node, frame, depth),
            "unary_operator" => {
                let operand = node
                    .child_by_field_name("argument")
                    .ok_or_else(|| format!("`{}` is incomplete", snippet(text)))?;
                let value = self.eval(operand, frame, depth)?.value;
                let op = node
                    .child_by_field_name("operator")
                    .map(|o| self.text(o))
                    .unwrap_or("");
                unary(op, &value)
                    .map(Known::plain)
                    .ok_or_else(|| format!("`{}` is not evaluated", snippet(text)))
            }
            "not_operator" => {
                let operand = node
                    .child_by_field_name("argument")
                    .ok_or_else(|| format!("`{}` is incomplete", snippet(text)))?;
                let value = self.eval(operand, frame, depth)?.value;
                Ok(Known::plain(Value::Bool(!truthy(&value))))
            }
            "binary_operator" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                    node.child_by_field_name("operator"),
                ) else {
                    return Err(format!("`{}` is incomplete", snippet(text)));
                };
                let left = self.eval(l, frame, depth)?.value;
                let right = self.eval(r, frame, depth)?.value;
                binary(self.text(op), &left, &right)
                    .map(Known::plain)
                    .map_err(|why| format!("`{}`: {why}", snippet(text)))
            }
            "boolean_operator" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                    node.child_by_field_name("operator"),
                ) else {
                    return Err(format!("`{}` is incomplete", snippet(text)));
                };
                let left = self.eval(l, frame, depth)?;
                let short = match self.text(op) {
                    "and" => !truthy(&left.value),
                    _ => truthy(&left.value),
                };
                if short {
                    Ok(left)
                } else {
                    self.eval(r, frame, depth)
                }
            }
            "comparison_operator" => self.comparison(node, frame, depth),
            "conditional_expression" => {
                let mut cursor = node.walk();
                let parts: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
                let [then, condition, otherwise] = parts[..] else {
                    return Err(format!("`{}` is not evaluated", snippet(text)));
                };
                let truth = self.eval(condition, frame, depth).map_err(|why| {
                    format!(
                        "`{}` depends on a condition that cannot be decided from this file ({why})",
                        snippet(text)
                    )
                })?;
                if truthy(&truth.value) {
                    self.eval(then, frame, depth)
                } else {
                    self.eval(otherwise, frame, depth)
                }
            }
            "call" => self.call(node, frame, depth),
            "comment" => Err("a comment".into()),
            _ => Err(format!(
                "`{}` ({}) is not evaluated",
                snippet(text),
                node.kind().replace('_', " ")
            )),
        }
    }

    fn string(&self, node: Node<'f>) -> Result<String, String> {
        if node.kind() != "string" {
            return Err(format!(
                "`{}` is not a plain string",
                snippet(self.text(node))
            ));
        }
        let prefix: String = self
            .text(node)
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect::<String>()
            .to_ascii_lowercase();
        let raw = prefix.contains('r');
        if prefix.contains('b') {
            return Err(format!("`{}` is a bytes literal", snippet(self.text(node))));
        }
        let mut out = String::new();
        let mut cursor = node.walk();
        for part in node.named_children(&mut cursor) {
            match part.kind() {
                "string_content" => self.string_content(part, raw, &mut out),
                "escape_sequence" if raw => out.push_str(self.text(part)),
                "escape_sequence" => out.push_str(&unescape(self.text(part))),
                "interpolation" => {
                    return Err(format!(
                        "f-string `{}` is not evaluated",
                        snippet(self.text(node))
                    ))
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Appends a string's content with its escape sequences (children of the content) decoded.
    fn string_content(&self, content: Node<'f>, raw: bool, out: &mut String) {
        let source = self.file.source.as_str();
        let mut at = content.start_byte();
        let mut cursor = content.walk();
        for escape in content.named_children(&mut cursor) {
            if escape.kind() != "escape_sequence" {
                continue;
            }
            out.push_str(source.get(at..escape.start_byte()).unwrap_or(""));
            let seq = self.text(escape);
            if raw {
                out.push_str(seq);
            } else {
                out.push_str(&unescape(seq));
            }
            at = escape.end_byte();
        }
        out.push_str(source.get(at..content.end_byte()).unwrap_or(""));
    }

    fn dictionary(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let mut out = Known::plain(Value::Object(Map::new()));
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "pair" => {
                    let (Some(k), Some(v)) = (
                        child.child_by_field_name("key"),
                        child.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    let Some(key) = dict_key(&self.eval(k, frame, depth)?.value) else {
                        return Err(format!(
                            "dictionary key `{}` is not a string, number or tuple of them",
                            snippet(self.text(k))
                        ));
                    };
                    match self.eval(v, frame, depth) {
                        Ok(value) => out.set(&[key], value),
                        Err(reason) => out.forget(&[key], None, reason),
                    }
                }
                "dictionary_splat" => {
                    let inner = single_named_child(child)
                        .ok_or_else(|| format!("`{}` is incomplete", self.text(child)))?;
                    match self.eval(inner, frame, depth) {
                        Ok(Known {
                            value: Value::Object(map),
                            gaps,
                        }) => {
                            for (k, v) in map {
                                let sub: Vec<Gap> = gaps
                                    .iter()
                                    .filter(|g| g.path.first() == Some(&k))
                                    .cloned()
                                    .map(|mut g| {
                                        g.path.remove(0);
                                        g
                                    })
                                    .collect();
                                out.set(
                                    &[k],
                                    Known {
                                        value: v,
                                        gaps: sub,
                                    },
                                );
                            }
                        }
                        Ok(_) => {
                            return Err(format!(
                                "`{}` does not unpack a dictionary",
                                snippet(self.text(child))
                            ))
                        }
                        Err(reason) => out.gaps.push(Gap::whole(self.text(child), reason)),
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn name(&mut self, name: &str, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        if let Some(binding) = frame.and_then(|f| f.env.get(name)) {
            return match binding {
                Binding::Known(k) => Ok(k.clone()),
                Binding::Unknown(reason) => Err(format!("`{name}` is not known: {reason}")),
            };
        }
        if self.constants.contains_key(name) || self.imports.contains_key(name) {
            return self.constant_value(name, depth);
        }
        Err(format!("`{name}` is not defined in this file"))
    }

    fn attribute(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let text = self.text(node);
        let Some((root, path)) = self.attribute_chain(node) else {
            return Err(format!("`{}` is not evaluated", snippet(text)));
        };
        let local = frame.is_some_and(|f| f.env.contains_key(&root));
        if root == "torch" && !local && !self.constants.contains_key("torch") {
            // `torch.bfloat16` is written as the dtype's name, as override files spell it.
            return match path.as_slice() {
                [dtype] if TORCH_DTYPES.contains(&dtype.as_str()) => {
                    Ok(Known::plain(Value::String(dtype.clone())))
                }
                _ => Err(format!("`{}` is not a torch dtype", snippet(text))),
            };
        }
        let base = self.name(&root, frame, depth)?;
        match get_path(&base.value, &path) {
            Some(value) => Ok(Known::plain(value.clone())),
            None => Err(format!("`{}` is not set in this file", snippet(text))),
        }
    }

    /// `value[index]` read: a dict by key (tuples too, as `dict_key` spells them), a list or
    /// string by integer index (negative from the end). Slices are not evaluated.
    fn subscript_value(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let shown = snippet(self.text(node));
        let not_evaluated = |why: &str| format!("`{shown}`: {why}");
        let object = node
            .child_by_field_name("value")
            .ok_or_else(|| not_evaluated("incomplete"))?;
        let mut cursor = node.walk();
        let indices: Vec<Node<'f>> = node
            .children_by_field_name("subscript", &mut cursor)
            .collect();
        if indices.iter().any(|i| i.kind() == "slice") || indices.is_empty() {
            return Err(not_evaluated("slices are not evaluated"));
        }
        let container = self.eval(object, frame, depth)?;
        let mut index_values = Vec::new();
        for index in indices {
            index_values.push(self.eval(index, frame, depth)?.value);
        }
        let index = match index_values.len() {
            1 => index_values.pop().unwrap_or(Value::Null),
            _ => Value::Array(index_values),
        };
        match &container.value {
            Value::Object(map) => {
                let key =
                    dict_key(&index).ok_or_else(|| not_evaluated("the key is not hashable"))?;
                if container
                    .gaps
                    .iter()
                    .any(|g| g.path.is_empty() || g.path.first() == Some(&key))
                {
                    return Err(not_evaluated("that entry is not known"));
                }
                map.get(&key)
                    .cloned()
                    .map(Known::plain)
                    .ok_or_else(|| not_evaluated(&format!("no key {key} (KeyError)")))
            }
            Value::Array(_) | Value::String(_) => {
                let Some(i) = index.as_i64() else {
                    return Err(not_evaluated("the index is not an integer"));
                };
                let items: Vec<Value> = match &container.value {
                    Value::Array(items) => items.clone(),
                    Value::String(text) => {
                        text.chars().map(|c| Value::String(c.to_string())).collect()
                    }
                    _ => Vec::new(),
                };
                let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                let at = if i < 0 { len.saturating_add(i) } else { i };
                let position = usize::try_from(at).ok().filter(|p| *p < items.len());
                if !container.gaps.is_empty() {
                    return Err(not_evaluated("the sequence is not fully known"));
                }
                position
                    .and_then(|p| items.get(p).cloned())
                    .map(Known::plain)
                    .ok_or_else(|| not_evaluated("index out of range (IndexError)"))
            }
            _ => Err(not_evaluated("not a dict, list or string")),
        }
    }

    fn comparison(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let mut operands = Vec::new();
        let mut operators: Vec<String> = Vec::new();
        let mut pending_op = String::new();
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.children(&mut cursor).collect();
        for child in children {
            if child.is_named() {
                if !operands.is_empty() {
                    operators.push(std::mem::take(&mut pending_op));
                }
                operands.push(self.eval(child, frame, depth)?.value);
            } else {
                if !pending_op.is_empty() {
                    pending_op.push(' ');
                }
                pending_op.push_str(self.text(child));
            }
        }
        if operators.len().saturating_add(1) != operands.len() {
            return Err(format!("`{}` is not evaluated", snippet(self.text(node))));
        }
        for (i, op) in operators.iter().enumerate() {
            let (Some(l), Some(r)) = (operands.get(i), operands.get(i.saturating_add(1))) else {
                break;
            };
            let holds = compare(op, l, r)
                .ok_or_else(|| format!("`{}` is not evaluated", snippet(self.text(node))))?;
            if !holds {
                return Ok(Known::plain(Value::Bool(false)));
            }
        }
        Ok(Known::plain(Value::Bool(true)))
    }

    /// The value a call of `target` returns, its loose gaps kept with it.
    fn call_value(
        &mut self,
        target: Target<'f>,
        callee: &str,
        node: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        let module = Frame {
            env: HashMap::new(),
            root: String::new(),
            loose: Vec::new(),
            returned: None,
            function: "",
            may_have_returned: None,
        };
        let (result, _) = self.invoke(target, node, frame.unwrap_or(&module), depth);
        match result.result {
            Binding::Known(mut k) => {
                k.gaps.extend(result.loose.into_iter().map(|mut g| {
                    g.reason = format!("in `{callee}`: {}", g.reason);
                    g
                }));
                Ok(k)
            }
            Binding::Unknown(reason) => {
                Err(format!("`{callee}` returns a value not known: {reason}"))
            }
        }
    }

    fn call(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let text = self.text(node);
        let function = node
            .child_by_field_name("function")
            .ok_or_else(|| format!("`{}` is incomplete", snippet(text)))?;
        let callee = self.text(function);
        let has_args = node
            .child_by_field_name("arguments")
            .is_some_and(|a| a.named_child_count() > 0);
        if (callee == "replace" && !self.functions.contains_key("replace"))
            || callee == "dataclasses.replace"
        {
            return self.replace(node, frame, depth);
        }
        if let Some(&def) = self
            .functions
            .get(callee)
            .filter(|_| function.kind() == "identifier")
        {
            return self.call_value(Target::Local(def), callee, node, frame, depth);
        }
        let last = callee.rsplit('.').next().unwrap_or(callee);
        // Bridge's performance helper `_with_global_batch_size(cfg, n)` (perf_recipes/<family>/
        // common.py, Megatron-Bridge 067f987df) sets `cfg.train.global_batch_size = n` and
        // returns `cfg`.
        // (A same-file function of that name was evaluated above; an imported one is not.)
        if last == "_with_global_batch_size" {
            let args = node.child_by_field_name("arguments");
            let arg = |i: u32| args.and_then(|a| a.named_child(i));
            if let (Some(config), Some(size), None) = (arg(0), arg(1), arg(2)) {
                if config.kind() != "keyword_argument" && size.kind() != "keyword_argument" {
                    let mut known = self.eval(config, frame, depth)?;
                    let path = ["train".to_owned(), "global_batch_size".to_owned()];
                    match self.eval(size, frame, depth) {
                        Ok(n) => known.set(&path, n),
                        Err(reason) => known.forget(&path, Some(snippet(text)), reason),
                    }
                    return Ok(known);
                }
            }
        }
        // Bridge registers its mixed-precision recipes by function name (`@register` in
        // src/megatron/bridge/training/mixed_precision.py, Megatron-Bridge 067f987df), and an
        // override file names them the same way: `bf16_mixed()` is `mixed_precision: bf16_mixed`.
        if last.ends_with("_mixed") && !has_args {
            return Ok(Known::plain(Value::String(last.to_owned())));
        }
        // Bridge's performance helpers name the precision recipe by its compute dtype:
        // `_perf_precision("fp8_mx")` (perf_recipes/_common.py) and its twin
        // `get_precision_config("fp8_mx")` (scripts/performance/utils/precision.py), v0.6.0.
        if matches!(last, "_perf_precision" | "get_precision_config") {
            if let Some(dtype) = self.single_string_argument(node) {
                let mut known = Known::plain(Value::String(dtype.clone()));
                known.gaps.push(Gap::whole(
                    snippet(text).as_str(),
                    format!(
                        "only its compute dtype is read (the `{dtype}` precision recipe); the \
                         other fields `{last}` sets, outside this file, are not known here"
                    ),
                ));
                return Ok(known);
            }
        }
        if last.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            // A class: its fields are not evaluated, even where its module can be read.
            return self.constructor(node, last, frame, depth);
        }
        // The special forms above win over the helpers' own definitions; any other imported
        // function is evaluated where it is defined.
        if let Some(target @ Target::Imported(..)) = self.target(function) {
            if bridge_recipe_name::base_recipe_model(callee).is_some() {
                self.base_recipe.get_or_insert_with(|| callee.to_owned());
            }
            return self.call_value(target, callee, node, frame, depth);
        }
        if function.kind() == "identifier" && !self.imports.contains_key(callee) {
            if let Some(value) = self.builtin(callee, node, frame, depth) {
                return value;
            }
        }
        if bridge_recipe_name::base_recipe_model(callee).is_some() {
            self.base_recipe.get_or_insert_with(|| callee.to_owned());
        }
        if self.hf_checkpoint.is_none() {
            self.hf_checkpoint = self.hf_repository_in(node);
        }
        Err(format!(
            "`{}` calls `{callee}`, which is defined outside this file",
            snippet(text)
        ))
    }

    /// The repository of an `AutoBridge.from_hf_pretrained("<org>/<name>")` call inside `node`
    /// (Bridge recipes build `cfg.model` from it and chain `.to_megatron_provider(...)`).
    fn hf_repository_in(&self, node: Node<'f>) -> Option<String> {
        let mut stack = vec![node];
        let mut visited = 0usize;
        while let Some(n) = stack.pop() {
            visited += 1;
            if visited > MAX_CHECKPOINT_SCAN_NODES {
                return None;
            }
            if n.kind() == "call" {
                let function = n.child_by_field_name("function").map(|f| self.text(f));
                let loads_checkpoint = function.is_some_and(|f| {
                    f.ends_with("AutoBridge.from_hf_pretrained")
                        || f.ends_with("AutoConfig.from_pretrained")
                });
                if loads_checkpoint {
                    if let Some(repo) = self.checkpoint_argument(n) {
                        return Some(repo);
                    }
                }
            }
            let mut cursor = n.walk();
            stack.extend(n.named_children(&mut cursor));
        }
        None
    }

    /// A checkpoint call's first argument: a string, or a module constant holding one.
    fn checkpoint_argument(&self, call: Node<'f>) -> Option<String> {
        let first = call.child_by_field_name("arguments")?.named_child(0)?;
        let literal = match first.kind() {
            "identifier" => *self.constants.get(self.text(first))?,
            _ => first,
        };
        self.string(literal).ok().filter(|repo| repo.contains('/'))
    }

    /// The one plain-string argument of a call (`f("fp8_mx")`), if that is all it has.
    fn single_string_argument(&self, call: Node<'f>) -> Option<String> {
        let args = call.child_by_field_name("arguments")?;
        if args.named_child_count() != 1 {
            return None;
        }
        self.string(args.named_child(0)?).ok()
    }

    /// `SomeConfig(field=value, ...)`: the fields it names; the class's own defaults for the
    /// others are not in the file, which the gaps say.
    fn constructor(
        &mut self,
        node: Node<'f>,
        class: &str,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        let mut out = Known::plain(Value::Object(Map::new()));
        out.gaps.push(Gap::whole(
            &format!("{class}(...)"),
            format!("fields not named here take `{class}`'s defaults, which are defined outside this file"),
        ));
        self.keyword_fields(node, &mut out, frame, depth);
        Ok(out)
    }

    /// `replace(base, field=value, ...)`: the base's settings, then the fields named.
    fn replace(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let args = node
            .child_by_field_name("arguments")
            .ok_or_else(|| format!("`{}` is incomplete", snippet(self.text(node))))?;
        let mut cursor = args.walk();
        let base = args
            .named_children(&mut cursor)
            .find(|a| a.kind() != "keyword_argument" && a.kind() != "comment");
        let mut out = match base {
            None => return Err(format!("`{}` names no base", snippet(self.text(node)))),
            Some(base) => match self.eval(base, frame, depth) {
                Ok(k) if k.value.is_object() => k,
                Ok(_) => {
                    return Err(format!(
                        "the base of `{}` is not a configuration",
                        snippet(self.text(node))
                    ))
                }
                Err(reason) => Known {
                    value: Value::Object(Map::new()),
                    gaps: vec![Gap::whole(self.text(base), reason)],
                },
            },
        };
        self.keyword_fields(node, &mut out, frame, depth);
        Ok(out)
    }

    fn keyword_fields(
        &mut self,
        node: Node<'f>,
        out: &mut Known,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) {
        let Some(args) = node.child_by_field_name("arguments") else {
            return;
        };
        let mut cursor = args.walk();
        let list: Vec<Node<'f>> = args.named_children(&mut cursor).collect();
        for (index, arg) in list.into_iter().enumerate() {
            match arg.kind() {
                "keyword_argument" => {
                    let (Some(name), Some(value)) = (
                        arg.child_by_field_name("name"),
                        arg.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    let key = vec![self.text(name).to_owned()];
                    match self.eval(value, frame, depth) {
                        Ok(v) => out.set(&key, v),
                        Err(reason) => out.forget(&key, None, reason),
                    }
                }
                "comment" => {}
                // The first positional argument of `replace` is its base, handled by the caller.
                _ if index == 0 && self.is_replace(node) => {}
                _ => out.gaps.push(Gap::whole(
                    self.text(arg),
                    "positional or unpacked arguments are not evaluated".into(),
                )),
            }
        }
    }

    pub(super) fn is_replace(&self, call: Node<'f>) -> bool {
        call.child_by_field_name("function")
            .map(|f| matches!(self.text(f), "replace" | "dataclasses.replace"))
            .unwrap_or(false)
    }
}

/// `torch` dtypes written as their names (the spelling Bridge override files use).
const TORCH_DTYPES: &[&str] = &[
    "bfloat16",
    "float16",
    "half",
    "float32",
    "float",
    "float64",
    "double",
    "float8_e4m3fn",
    "float8_e5m2",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
];

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

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

fn parse_int(text: &str) -> Result<i64, String> {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    let parsed = if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16)
    } else if let Some(oct) = lower.strip_prefix("0o") {
        i64::from_str_radix(oct, 8)
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2)
    } else {
        lower.parse::<i64>()
    };
    parsed.map_err(|_| format!("integer `{}` is out of range", snippet(text)))
}

fn parse_float(text: &str) -> Result<Number, String> {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    if clean.ends_with(['j', 'J']) {
        return Err(format!(
            "complex number `{}` is not evaluated",
            snippet(text)
        ));
    }
    clean
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .ok_or_else(|| format!("float `{}` is not a finite number", snippet(text)))
}

fn unescape(seq: &str) -> String {
    match seq {
        "\\n" => "\n".into(),
        "\\t" => "\t".into(),
        "\\r" => "\r".into(),
        "\\\\" => "\\".into(),
        "\\'" => "'".into(),
        "\\\"" => "\"".into(),
        "\\0" => "\0".into(),
        other if other.starts_with("\\\n") => String::new(),
        other => other.to_owned(),
    }
}

enum Num {
    Int(i64),
    Float(f64),
}

fn as_num(value: &Value) -> Option<Num> {
    match value {
        Value::Bool(b) => Some(Num::Int(i64::from(*b))),
        Value::Number(n) => n
            .as_i64()
            .map(Num::Int)
            .or_else(|| n.as_f64().map(Num::Float)),
        _ => None,
    }
}

fn float_value(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| "the result is not a finite number".to_owned())
}

fn unary(op: &str, value: &Value) -> Option<Value> {
    match (op, as_num(value)?) {
        ("-", Num::Int(i)) => i.checked_neg().map(Value::from),
        ("-", Num::Float(f)) => Number::from_f64(-f).map(Value::Number),
        ("+", Num::Int(i)) => Some(Value::from(i)),
        ("+", Num::Float(f)) => Number::from_f64(f).map(Value::Number),
        ("~", Num::Int(i)) => Some(Value::from(!i)),
        _ => None,
    }
}

fn binary(op: &str, left: &Value, right: &Value) -> Result<Value, String> {
    match (left, right) {
        (Value::String(a), Value::String(b)) if op == "+" => {
            let len = a.len().saturating_add(b.len());
            if len > MAX_BUILT_LEN {
                return Err("the string would be too long".into());
            }
            return Ok(Value::String(format!("{a}{b}")));
        }
        (Value::Array(a), Value::Array(b)) if op == "+" => {
            if a.len().saturating_add(b.len()) > MAX_BUILT_LEN {
                return Err("the list would be too long".into());
            }
            return Ok(Value::Array(a.iter().chain(b).cloned().collect()));
        }
        (Value::String(_) | Value::Array(_), Value::Number(_))
        | (Value::Number(_), Value::String(_) | Value::Array(_))
            if op == "*" =>
        {
            let (seq, n) = if left.is_number() {
                (right, left)
            } else {
                (left, right)
            };
            let count = n.as_i64().ok_or("repeating by a non-integer")?;
            let count = usize::try_from(count.max(0)).map_err(|_| "repeat count out of range")?;
            return match seq {
                Value::String(s) => {
                    if s.len().saturating_mul(count) > MAX_BUILT_LEN {
                        return Err("the string would be too long".into());
                    }
                    Ok(Value::String(s.repeat(count)))
                }
                Value::Array(a) => {
                    if a.len().saturating_mul(count) > MAX_BUILT_LEN {
                        return Err("the list would be too long".into());
                    }
                    Ok(Value::Array(
                        std::iter::repeat_n(a.iter().cloned(), count)
                            .flatten()
                            .collect(),
                    ))
                }
                _ => Err("not a sequence".into()),
            };
        }
        _ => {}
    }
    let (Some(a), Some(b)) = (as_num(left), as_num(right)) else {
        return Err(format!(
            "`{op}` is only evaluated on numbers, strings and lists"
        ));
    };
    let overflow = || "integer overflow".to_owned();
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => match op {
            "+" => x.checked_add(y).map(Value::from).ok_or_else(overflow),
            "-" => x.checked_sub(y).map(Value::from).ok_or_else(overflow),
            "*" => x.checked_mul(y).map(Value::from).ok_or_else(overflow),
            "//" => floor_div(x, y)
                .map(|(q, _)| Value::from(q))
                .ok_or_else(|| "division by zero or overflow".to_owned()),
            "%" => floor_div(x, y)
                .map(|(_, r)| Value::from(r))
                .ok_or_else(|| "division by zero or overflow".to_owned()),
            "**" if y >= 0 => u32::try_from(y)
                .ok()
                .and_then(|e| x.checked_pow(e))
                .map(Value::from)
                .ok_or_else(overflow),
            "/" if y != 0 => float_value(x as f64 / y as f64),
            "<<" => u32::try_from(y)
                .ok()
                .and_then(|s| x.checked_shl(s))
                .filter(|r| r >> y == x)
                .map(Value::from)
                .ok_or_else(overflow),
            ">>" => u32::try_from(y)
                .ok()
                .map(|s| x.checked_shr(s).unwrap_or(if x < 0 { -1 } else { 0 }))
                .map(Value::from)
                .ok_or_else(overflow),
            "&" => Ok(Value::from(x & y)),
            "|" => Ok(Value::from(x | y)),
            "^" => Ok(Value::from(x ^ y)),
            _ => Err(format!("`{op}` is not evaluated here")),
        },
        (a, b) => {
            let x = match a {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let y = match b {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let r = match op {
                "+" => x + y,
                "-" => x - y,
                "*" => x * y,
                "/" if y != 0.0 => x / y,
                "//" if y != 0.0 => (x / y).floor(),
                "%" if y != 0.0 => x - y * (x / y).floor(),
                "**" => x.powf(y),
                _ => return Err(format!("`{op}` is not evaluated here")),
            };
            float_value(r)
        }
    }
}

/// Python's `//` and `%`: the quotient rounds toward negative infinity, the remainder takes
/// the divisor's sign.
fn floor_div(x: i64, y: i64) -> Option<(i64, i64)> {
    let q = x.checked_div(y)?;
    let r = x.checked_rem(y)?;
    if r != 0 && ((r < 0) != (y < 0)) {
        Some((q.checked_sub(1)?, r.checked_add(y)?))
    } else {
        Some((q, r))
    }
}

/// The key a Python dict holds `value` under, as this reader stores dicts (JSON objects):
/// strings as themselves, numbers and booleans as Python prints them, a tuple of those as its
/// Python repr (`(4, 1)`), so `{(4, 1): x}[(pp, vp)]` finds its entry.
fn dict_key(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.to_owned()),
        Value::Null => Some("None".to_owned()),
        Value::Array(items) => {
            let parts: Option<Vec<String>> = items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Some(format!("'{s}'")),
                    Value::Array(_) | Value::Object(_) => None,
                    other => dict_key(other),
                })
                .collect();
            let parts = parts?;
            Some(if parts.len() == 1 {
                format!("({},)", parts.join(""))
            } else {
                format!("({})", parts.join(", "))
            })
        }
        Value::Object(_) => None,
    }
}

fn compare(op: &str, left: &Value, right: &Value) -> Option<bool> {
    let numeric = || -> Option<std::cmp::Ordering> {
        let to_f = |v: &Value| match as_num(v)? {
            Num::Int(i) => Some(i as f64),
            Num::Float(f) => Some(f),
        };
        to_f(left)?.partial_cmp(&to_f(right)?)
    };
    let equal = || match (as_num(left), as_num(right)) {
        (Some(_), Some(_)) => numeric() == Some(std::cmp::Ordering::Equal),
        _ => left == right,
    };
    use std::cmp::Ordering::*;
    match op {
        "==" => Some(equal()),
        "!=" => Some(!equal()),
        // `is` is only meaningful here for None, True and False.
        "is" => Some(left == right),
        "is not" => Some(left != right),
        "<" => numeric().map(|o| o == Less),
        "<=" => numeric().map(|o| o != Greater),
        ">" => numeric().map(|o| o == Greater),
        ">=" => numeric().map(|o| o != Less),
        "in" | "not in" => {
            let found = match right {
                Value::Array(items) => items.contains(left),
                Value::String(s) => left.as_str().map(|l| s.contains(l))?,
                Value::Object(map) => map.contains_key(&dict_key(left)?),
                _ => return None,
            };
            Some(if op == "in" { found } else { !found })
        }
        _ => None,
    }
}
