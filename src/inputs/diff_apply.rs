//! Applying a commit's diff to whole files, so a Python recipe can be read after the commit
//! exactly as before it: the `before` file with the diff's hunks applied, and the modules it
//! imports with the diff's changes to them (a commit that edits a shared helper changes every
//! recipe that calls it). Patching is `diffy`'s job; this file only matches the diff's files
//! to the texts at hand. No I/O: modules come through a [`ModuleLoader`].

use std::cell::RefCell;

use diffy::patch_set::PatchSet;

use super::diff::{file_path, parse_options};
use super::python_recipe::{module_file_matches, LoadedModule, ModuleLoader, RecipeFile};

/// The diff's files with their patches applied to `base`: the path and new text of each file
/// whose hunks apply to `base` exactly and change it.
pub fn apply_to_text(diff: &str, base: &str) -> Vec<(String, String)> {
    file_patches(diff)
        .into_iter()
        .filter_map(|(path, patch)| {
            let patch = diffy::Patch::from_str(&patch).ok()?;
            let new = diffy::apply(base, &patch).ok()?;
            (new != base).then_some((path, new))
        })
        .collect()
}

/// The recipes of a Python file whose lines `after` changes (1-based spans of `before`), in
/// file order: what a diff without function headers changes, read from the whole file.
pub fn changed_recipes(before: &str, after: &str) -> Vec<String> {
    let Ok(file) = RecipeFile::parse(before) else {
        return Vec::new();
    };
    let patch = diffy::create_patch(before, after);
    let mut names: Vec<String> = Vec::new();
    for hunk in patch.hunks() {
        let mut line = hunk.old_range().start();
        for change in hunk.lines() {
            let touched = match change {
                diffy::Line::Context(_) => None,
                diffy::Line::Delete(_) | diffy::Line::Insert(_) => Some(line),
            };
            if !matches!(change, diffy::Line::Insert(_)) {
                line = line.saturating_add(1);
            }
            let Some(at) = touched else { continue };
            if let Some(span) = file.recipe_at_line(at) {
                if !names.contains(&span.name) {
                    names.push(span.name);
                }
            }
        }
    }
    names
}

/// Each file of the diff as (its path without `a/`/`b/`, its own single-file patch text).
fn file_patches(diff: &str) -> Vec<(String, String)> {
    PatchSet::parse(diff, parse_options(diff))
        .filter_map(Result::ok)
        .filter_map(|file| {
            let text = file.patch().as_text()?;
            Some((file_path(file.operation()), text.to_string()))
        })
        .collect()
}

/// A module loader that serves the modules a diff changes with the diff applied, and every
/// other module as `inner` serves it. It records what it patched, and what it could not.
pub struct PatchedModules<'a> {
    inner: &'a dyn ModuleLoader,
    files: Vec<(String, String)>,
    patched: RefCell<Vec<String>>,
    failed: RefCell<Vec<String>>,
}

impl<'a> PatchedModules<'a> {
    pub fn new(inner: &'a dyn ModuleLoader, diff: &str) -> PatchedModules<'a> {
        PatchedModules {
            inner,
            files: file_patches(diff),
            patched: RefCell::new(Vec::new()),
            failed: RefCell::new(Vec::new()),
        }
    }

    /// The diff paths applied to a module that was loaded.
    pub fn patched(&self) -> Vec<String> {
        self.patched.borrow().clone()
    }

    /// The diff paths that named a loaded module but did not apply to its text.
    pub fn failed(&self) -> Vec<String> {
        self.failed.borrow().clone()
    }
}

fn note(list: &RefCell<Vec<String>>, path: &str) {
    let mut list = list.borrow_mut();
    if !list.iter().any(|p| p == path) {
        list.push(path.to_owned());
    }
}

impl ModuleLoader for PatchedModules<'_> {
    fn load(&self, importer: Option<&str>, module: &str, level: usize) -> Option<LoadedModule> {
        let mut loaded = self.inner.load(importer, module, level)?;
        for (path, patch) in &self.files {
            if !module_file_matches(&loaded.id, path) {
                continue;
            }
            match diffy::Patch::from_str(patch)
                .ok()
                .and_then(|p| diffy::apply(&loaded.source, &p).ok())
            {
                Some(text) => {
                    loaded.source = text;
                    note(&self.patched, path);
                }
                None => note(&self.failed, path),
            }
        }
        Some(loaded)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::inputs::python_recipe::ModuleTexts;

    const DIFF: &str = "\
diff --git a/src/pkg/recipe.py b/src/pkg/recipe.py
--- a/src/pkg/recipe.py
+++ b/src/pkg/recipe.py
@@ -1,3 +1,3 @@
 def r():
-    x = 1
+    x = 2
     return x
diff --git a/src/pkg/common.py b/src/pkg/common.py
--- a/src/pkg/common.py
+++ b/src/pkg/common.py
@@ -1,2 +1,2 @@
 def h(cfg):
-    cfg.a = 1
+    cfg.a = 3
";

    #[test]
    fn a_diff_applies_to_the_file_it_changes_only() {
        let base = "def r():\n    x = 1\n    return x\n";
        let applied = apply_to_text(DIFF, base);
        assert_eq!(
            applied,
            vec![(
                "src/pkg/recipe.py".to_owned(),
                "def r():\n    x = 2\n    return x\n".to_owned()
            )]
        );
        assert!(apply_to_text(DIFF, "def r():\n    x = 5\n    return x\n").is_empty());
    }

    #[test]
    fn the_recipes_a_change_touches_are_found_by_line() {
        let before = "def a_config():\n    x = 1\n    return x\n\n\ndef b_config():\n    y = 1\n    return y\n";
        let after = before.replace("y = 1", "y = 2");
        assert_eq!(changed_recipes(before, &after), vec!["b_config"]);
        let both = after.replace("x = 1", "x = 3");
        assert_eq!(changed_recipes(before, &both), vec!["a_config", "b_config"]);
        assert!(changed_recipes(before, before).is_empty());
    }

    #[test]
    fn module_ids_match_diff_paths_at_a_boundary() {
        assert!(module_file_matches(
            "/co/src/pkg/common.py",
            "src/pkg/common.py"
        ));
        assert!(module_file_matches("pkg.common", "src/pkg/common.py"));
        assert!(module_file_matches("pkg", "src/pkg/__init__.py"));
        assert!(!module_file_matches(
            "/co/src/xpkg/common.py",
            "pkg/common.py"
        ));
        assert!(!module_file_matches("pkg.common2", "src/pkg/common.py"));
    }

    #[test]
    fn imported_modules_are_served_patched_and_say_so() {
        let texts = ModuleTexts::new(
            Some("pkg.recipe".into()),
            HashMap::from([
                (
                    "pkg.common".to_owned(),
                    "def h(cfg):\n    cfg.a = 1\n".to_owned(),
                ),
                ("pkg.other".to_owned(), "B = 1\n".to_owned()),
            ]),
        );
        let patched = PatchedModules::new(&texts, DIFF);
        let common = patched.load(None, "pkg.common", 0).expect("loads");
        assert_eq!(common.source, "def h(cfg):\n    cfg.a = 3\n");
        let other = patched.load(None, "pkg.other", 0).expect("loads");
        assert_eq!(other.source, "B = 1\n");
        assert_eq!(patched.patched(), vec!["src/pkg/common.py"]);
        assert!(patched.failed().is_empty());
    }
}
