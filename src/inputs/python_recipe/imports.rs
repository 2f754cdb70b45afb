//! The modules a recipe file imports its helpers and base recipes from.
//!
//! Megatron-Bridge's performance recipes build on functions in other files of the package
//! (`from megatron.bridge.perf_recipes.deepseek.common import _deepseek_v3_common,
//! deepseek_v3_pretrain_config`), and those on others again. When the caller can provide
//! those files (a checkout on disk, texts sent beside the recipe) a [`ModuleLoader`] hands them
//! over and the evaluator follows `from ... import` into them; without one, an imported name
//! stays "defined outside this file", as before. The reader itself does no I/O.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tree_sitter::Node;

use super::RecipeFile;

/// Modules read for one recipe, at most (a Bridge performance recipe reaches about ten).
const MAX_MODULES: usize = 64;
/// `from a import b` hops followed to find where a name is defined (re-exports chain).
const MAX_REEXPORT_HOPS: usize = 8;

/// Where the text of an imported module comes from.
pub trait ModuleLoader {
    /// The module `module` (dotted, without its leading dots) as the file `importer` imports it
    /// with `level` leading dots (`from ..common import x`: level 2); `importer` is `None` for
    /// the recipe file itself, else the id a previous load returned. `None` when the module is
    /// not available (a third-party package, a file outside the checkout).
    fn load(&self, importer: Option<&str>, module: &str, level: usize) -> Option<LoadedModule>;
}

/// A module's text and the id naming it (its path, or its dotted name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    pub id: String,
    pub source: String,
}

/// Where a name a file imports comes from: `from <level dots><module> import <name> as <local>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ImportedName {
    pub(super) module: String,
    pub(super) level: usize,
    pub(super) name: String,
}

/// The names a file imports at module level, by the local name they are bound to.
pub(super) fn imported_names(file: &RecipeFile) -> HashMap<String, ImportedName> {
    let mut names = HashMap::new();
    let root = file.tree.root_node();
    let mut cursor = root.walk();
    for statement in root.named_children(&mut cursor) {
        if statement.kind() == "import_from_statement" {
            read_import_from(file, statement, &mut names);
        }
    }
    names
}

fn read_import_from(
    file: &RecipeFile,
    statement: Node<'_>,
    names: &mut HashMap<String, ImportedName>,
) {
    let Some(module_node) = statement.child_by_field_name("module_name") else {
        return;
    };
    let (module, level) = if module_node.kind() == "relative_import" {
        let text = file.text(module_node);
        let level = text.chars().take_while(|&c| c == '.').count();
        (text.get(level..).unwrap_or("").trim().to_owned(), level)
    } else {
        (file.text(module_node).to_owned(), 0)
    };
    let mut cursor = statement.walk();
    for imported in statement.children_by_field_name("name", &mut cursor) {
        let (name, local) = match imported.kind() {
            "aliased_import" => {
                let name = imported.child_by_field_name("name").map(|n| file.text(n));
                let alias = imported.child_by_field_name("alias").map(|n| file.text(n));
                match (name, alias) {
                    (Some(name), Some(alias)) => (name, alias),
                    _ => continue,
                }
            }
            _ => {
                let name = file.text(imported);
                (name, name)
            }
        };
        // `from . import common` binds a module, not a function or constant.
        if module.is_empty() || name.contains('.') {
            continue;
        }
        names.insert(
            local.to_owned(),
            ImportedName {
                module: module.clone(),
                level,
                name: name.to_owned(),
            },
        );
    }
}

/// An import as written in one file: (importing module id, module, leading dots).
type ImportKey = (Option<String>, String, usize);

/// A module read for the recipe, with the names it imports.
pub(super) struct Module {
    pub(super) id: String,
    pub(super) file: RecipeFile,
    pub(super) imports: HashMap<String, ImportedName>,
}

/// The modules read so far for one recipe, shared by the evaluators of every file it reaches.
pub(super) struct Modules<'l> {
    loader: &'l dyn ModuleLoader,
    /// By (importer, module, level); `None`: not available or not readable.
    by_import: RefCell<HashMap<ImportKey, Option<Rc<Module>>>>,
    /// Ids of the modules read, in the order first read.
    read: RefCell<Vec<String>>,
    /// Modules that were found but could not be used, with why.
    refused: RefCell<Vec<(String, String)>>,
}

impl<'l> Modules<'l> {
    pub(super) fn new(loader: &'l dyn ModuleLoader) -> Modules<'l> {
        Modules {
            loader,
            by_import: RefCell::new(HashMap::new()),
            read: RefCell::new(Vec::new()),
            refused: RefCell::new(Vec::new()),
        }
    }

    /// The module `import` names, as the file `importer` imports it.
    fn module(&self, importer: Option<&str>, import: &ImportedName) -> Option<Rc<Module>> {
        let key = (
            importer.map(str::to_owned),
            import.module.clone(),
            import.level,
        );
        if let Some(known) = self.by_import.borrow().get(&key) {
            return known.clone();
        }
        let module = self.read_module(importer, import);
        self.by_import.borrow_mut().insert(key, module.clone());
        module
    }

    fn read_module(&self, importer: Option<&str>, import: &ImportedName) -> Option<Rc<Module>> {
        // The same file imported under two spellings is parsed once.
        let cached = |id: &str| {
            self.by_import
                .borrow()
                .values()
                .flatten()
                .find(|m| m.id == id)
                .cloned()
        };
        let loaded = self.loader.load(importer, &import.module, import.level)?;
        if let Some(module) = cached(&loaded.id) {
            return Some(module);
        }
        if self.read.borrow().len() >= MAX_MODULES {
            self.refused.borrow_mut().push((
                loaded.id,
                format!("more than {MAX_MODULES} modules would be read for one recipe"),
            ));
            return None;
        }
        match RecipeFile::parse(&loaded.source) {
            Ok(file) => {
                let imports = imported_names(&file);
                self.read.borrow_mut().push(loaded.id.clone());
                Some(Rc::new(Module {
                    id: loaded.id,
                    file,
                    imports,
                }))
            }
            Err(error) => {
                self.refused
                    .borrow_mut()
                    .push((loaded.id, error.to_string()));
                None
            }
        }
    }

    /// The module defining `import.name` as a module-level function or constant, following
    /// re-exports (`from .h100.deepseek_v3 import x as deepseek_v3_pretrain_config`), and the
    /// name it has there.
    pub(super) fn definition(
        &self,
        importer: Option<&str>,
        import: &ImportedName,
    ) -> Option<(Rc<Module>, String)> {
        let mut importer = importer.map(str::to_owned);
        let mut import = import.clone();
        for _ in 0..MAX_REEXPORT_HOPS {
            let module = self.module(importer.as_deref(), &import)?;
            if module.file.defines(&import.name) {
                return Some((module, import.name));
            }
            let next = module.imports.get(&import.name)?.clone();
            importer = Some(module.id.clone());
            import = next;
        }
        None
    }

    /// Ids of the modules read so far, in order.
    pub(super) fn read(&self) -> Vec<String> {
        self.read.borrow().clone()
    }

    /// Modules found but not used, with why.
    pub(super) fn refused(&self) -> Vec<(String, String)> {
        self.refused.borrow().clone()
    }
}

/// Whether a module id (a file path, or a dotted module name) and a file path (a diff's, or a
/// client's key) name the same file: one ends with the other at a path boundary.
pub fn module_file_matches(module_id: &str, path: &str) -> bool {
    let ends_at_boundary = |long: &str, short: &str| {
        long.strip_suffix(short)
            .is_some_and(|head| head.is_empty() || head.ends_with('/'))
    };
    let candidates: Vec<String> = if module_id.ends_with(".py") {
        vec![module_id.replace('\\', "/")]
    } else {
        let path = module_id.replace('.', "/");
        vec![format!("{path}.py"), format!("{path}/__init__.py")]
    };
    candidates
        .iter()
        .any(|id| ends_at_boundary(id, path) || ends_at_boundary(path, id))
}

/// Modules given as texts, as a client without the checkout on disk sends them: keyed by
/// dotted name (`megatron.bridge.perf_recipes._common`) or by file path in the checkout
/// (`src/megatron/bridge/perf_recipes/_common.py`); relative imports resolve against the
/// importing module's dotted name (the recipe file's own, `root`, when given). It records
/// which keys were read, so a caller can say which were not.
#[derive(Debug, Clone, Default)]
pub struct ModuleTexts {
    pub root: Option<String>,
    pub modules: HashMap<String, String>,
    read: std::cell::RefCell<Vec<String>>,
}

impl ModuleTexts {
    pub fn new(root: Option<String>, modules: HashMap<String, String>) -> ModuleTexts {
        ModuleTexts {
            root,
            modules,
            read: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// The keys of `modules` no load has read, sorted.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.borrow();
        let mut keys: Vec<String> = self
            .modules
            .keys()
            .filter(|k| !read.contains(k))
            .cloned()
            .collect();
        keys.sort();
        keys
    }
}

impl ModuleLoader for ModuleTexts {
    fn load(&self, importer: Option<&str>, module: &str, level: usize) -> Option<LoadedModule> {
        let dotted = if level == 0 {
            module.to_owned()
        } else {
            let importer = importer.or(self.root.as_deref())?;
            let mut package: Vec<&str> = importer.split('.').collect();
            // The importer is a module: one dot is its package, each further dot one level up.
            for _ in 0..level {
                package.pop()?;
            }
            if !module.is_empty() {
                package.push(module);
            }
            package.join(".")
        };
        let (key, source) = self.modules.get_key_value(&dotted).or_else(|| {
            let mut paths: Vec<(&String, &String)> = self
                .modules
                .iter()
                .filter(|(key, _)| key.ends_with(".py") && module_file_matches(&dotted, key))
                .collect();
            // Deterministic when two paths match (`a/x.py` and `b/a/x.py`): the longest.
            paths.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
            paths.into_iter().next()
        })?;
        let mut read = self.read.borrow_mut();
        if !read.contains(key) {
            read.push(key.clone());
        }
        Some(LoadedModule {
            id: dotted,
            source: source.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(source: &str) -> RecipeFile {
        match RecipeFile::parse(source) {
            Ok(file) => file,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn reads_plain_aliased_and_relative_imports() {
        let f = file(
            "from megatron.bridge.recipes.x import (\n    a,\n    b as c,\n)\n\
             from ..common import d\nfrom . import sibling\nimport torch\n",
        );
        let names = imported_names(&f);
        assert_eq!(
            names.get("a"),
            Some(&ImportedName {
                module: "megatron.bridge.recipes.x".into(),
                level: 0,
                name: "a".into()
            })
        );
        assert_eq!(names.get("c").map(|n| n.name.as_str()), Some("b"));
        assert!(!names.contains_key("b"));
        assert_eq!(
            names.get("d"),
            Some(&ImportedName {
                module: "common".into(),
                level: 2,
                name: "d".into()
            })
        );
        assert!(!names.contains_key("sibling"));
        assert!(!names.contains_key("torch"));
    }

    #[test]
    fn module_texts_resolve_relative_imports_against_the_importer() {
        let texts = ModuleTexts::new(
            Some("pkg.perf.model.gpu".into()),
            HashMap::from([
                ("pkg.perf.model.common".to_owned(), "X = 1\n".to_owned()),
                ("pkg.perf._common".to_owned(), "Y = 2\n".to_owned()),
            ]),
        );
        let common = texts.load(None, "common", 1).map(|m| m.id);
        assert_eq!(common.as_deref(), Some("pkg.perf.model.common"));
        let shared = texts.load(Some("pkg.perf.model.common"), "_common", 2);
        assert_eq!(shared.map(|m| m.id).as_deref(), Some("pkg.perf._common"));
        assert!(texts.load(None, "pkg.perf._common", 0).is_some());
        assert!(texts.load(None, "missing", 0).is_none());
        // More dots than packages: not a module.
        assert!(texts.load(None, "x", 9).is_none());
    }

    #[test]
    fn definitions_follow_re_exports() {
        let texts = ModuleTexts::new(
            None,
            HashMap::from([
                (
                    "pkg.alias".to_owned(),
                    "from pkg.real import long_name as short\n".to_owned(),
                ),
                (
                    "pkg.real".to_owned(),
                    "def long_name():\n    return 1\n".to_owned(),
                ),
            ]),
        );
        let modules = Modules::new(&texts);
        let import = ImportedName {
            module: "pkg.alias".into(),
            level: 0,
            name: "short".into(),
        };
        let found = modules.definition(None, &import);
        assert_eq!(
            found.map(|(m, name)| (m.id.clone(), name)),
            Some(("pkg.real".to_owned(), "long_name".to_owned()))
        );
        assert_eq!(modules.read(), vec!["pkg.alias", "pkg.real"]);
    }
}
