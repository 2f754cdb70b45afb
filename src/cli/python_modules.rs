//! The modules a Python recipe file imports, read from the checkout the file sits in.
//!
//! `from megatron.bridge.perf_recipes._common import _benchmark_common` is looked up the way
//! Python would find it with the checkout's source folder on its path: in each folder above the
//! importing file, `megatron/bridge/perf_recipes/_common.py` or its package's `__init__.py`; the
//! nearest wins. Relative imports (`from .common import x`) start at the importing file's folder.
//! Only `.py` files are read, each at most the size the recipe reader accepts.

use std::path::{Path, PathBuf};

use crate::inputs::python_recipe::{LoadedModule, ModuleLoader};

/// Largest module file read (the recipe reader's own limit for a file).
const MAX_MODULE_BYTES: u64 = 8 * 1024 * 1024;

/// Loads imported modules from the folders around a recipe file on disk.
#[derive(Debug, Clone)]
pub struct CheckoutModules {
    recipe_file: PathBuf,
}

impl CheckoutModules {
    /// For the recipe file at `path` (made absolute, so its folders can be walked up).
    pub fn for_recipe(path: &Path) -> CheckoutModules {
        let recipe_file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        CheckoutModules { recipe_file }
    }

    fn candidates(folder: &Path, module: &str) -> [PathBuf; 2] {
        let mut base = folder.to_path_buf();
        for part in module.split('.') {
            base.push(part);
        }
        [base.with_extension("py"), base.join("__init__.py")]
    }

    fn read(path: &Path) -> Option<LoadedModule> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() || meta.len() > MAX_MODULE_BYTES {
            return None;
        }
        let source = std::fs::read_to_string(path).ok()?;
        Some(LoadedModule {
            id: path.display().to_string(),
            source,
        })
    }
}

impl ModuleLoader for CheckoutModules {
    fn load(&self, importer: Option<&str>, module: &str, level: usize) -> Option<LoadedModule> {
        let importer = importer.map(Path::new).unwrap_or(&self.recipe_file);
        let folder = importer.parent()?;
        let valid =
            |part: &str| !part.is_empty() && part.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !module.split('.').all(valid) {
            return None;
        }
        if level > 0 {
            let mut package = folder;
            for _ in 1..level {
                package = package.parent()?;
            }
            return Self::candidates(package, module)
                .iter()
                .find_map(|p| Self::read(p));
        }
        folder.ancestors().find_map(|dir| {
            Self::candidates(dir, module)
                .iter()
                .find_map(|p| Self::read(p))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_absolute_and_relative_imports_in_the_checkout() -> std::io::Result<()> {
        let root = std::env::temp_dir().join(format!("moe-skills-modules-{}", std::process::id()));
        let pkg = root.join("src/megatron/bridge/perf_recipes");
        std::fs::create_dir_all(pkg.join("model/gpu"))?;
        std::fs::write(pkg.join("_common.py"), "A = 1\n")?;
        std::fs::write(pkg.join("model/__init__.py"), "B = 2\n")?;
        std::fs::write(pkg.join("model/common.py"), "C = 3\n")?;
        let recipe = pkg.join("model/gpu/recipe.py");
        std::fs::write(&recipe, "D = 4\n")?;
        let loader = CheckoutModules::for_recipe(&recipe);
        let source = |m: Option<LoadedModule>| m.map(|m| m.source);
        assert_eq!(
            source(loader.load(None, "megatron.bridge.perf_recipes._common", 0)).as_deref(),
            Some("A = 1\n")
        );
        assert_eq!(
            source(loader.load(None, "megatron.bridge.perf_recipes.model", 0)).as_deref(),
            Some("B = 2\n")
        );
        assert_eq!(
            source(loader.load(None, "common", 2)).as_deref(),
            Some("C = 3\n")
        );
        let common = loader.load(None, "common", 2).map(|m| m.id);
        // A module imported by another resolves relative to that module's folder.
        assert_eq!(
            source(loader.load(common.as_deref(), "_common", 2)).as_deref(),
            Some("A = 1\n")
        );
        assert!(loader.load(None, "torch", 0).is_none());
        assert!(loader.load(None, "..etc.passwd", 0).is_none());
        std::fs::remove_dir_all(&root)?;
        Ok(())
    }
}
