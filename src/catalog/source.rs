//! Where catalog files come from: the embedded tree or a directory on disk. Both are read
//! into the same in-memory map of relative path -> bytes, so loading has one code path.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use include_dir::Dir;

use super::embedded::{EMBEDDED_CARDS, EMBEDDED_SKILLS};

/// File contents, borrowed from the binary or owned after a disk read.
#[derive(Clone)]
pub enum Bytes {
    Static(&'static [u8]),
    Shared(Arc<[u8]>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Static(bytes) => bytes,
            Self::Shared(bytes) => bytes,
        }
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.len())
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

/// One root of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RootSource {
    /// The `skills/` and `cards/` compiled into the binary.
    Embedded,
    /// A directory: a repository-like folder with `skills/` (and maybe `cards/`), a folder of
    /// skill folders (such as Megatron-Bridge's `skills/`), or a single skill folder.
    Directory(PathBuf),
}

impl fmt::Display for RootSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            Self::Directory(path) => write!(f, "{}", path.display()),
        }
    }
}

impl RootSource {
    /// How a file of this root is named in diagnostics.
    pub fn display_file(&self, relative: &str) -> String {
        match self {
            Self::Embedded => format!("embedded:{relative}"),
            Self::Directory(path) => path.join(relative).display().to_string(),
        }
    }
}

/// Files of a root, keyed by `/`-separated path relative to the root.
pub(crate) type RootFiles = BTreeMap<String, Bytes>;

/// Walking stops at this many files so that pointing at a huge tree fails clearly.
pub(crate) const MAX_FILES_PER_ROOT: usize = 50_000;

/// A root whose files could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read directory: {0}")]
    Unreadable(String),
    #[error("is not a directory; pass a folder that holds skill folders")]
    NotADirectory,
    #[error("holds more than {MAX_FILES_PER_ROOT} files; point --skills-dir at the skills folder itself")]
    TooManyFiles,
}

fn collect_embedded(dir: &'static Dir<'static>, prefix: &str, files: &mut RootFiles) {
    for file in dir.files() {
        let relative = format!(
            "{prefix}{}",
            file.path().to_string_lossy().replace('\\', "/")
        );
        files.insert(relative, Bytes::Static(file.contents()));
    }
    for sub in dir.dirs() {
        collect_embedded(sub, prefix, files);
    }
}

/// Names skipped while walking: version control, dependency and cache folders, hidden files.
fn is_skipped(name: &str) -> bool {
    name.starts_with('.') || matches!(name, "node_modules" | "__pycache__" | "target")
}

fn walk(
    base: &Path,
    dir: &Path,
    depth: usize,
    files: &mut RootFiles,
    problems: &mut Vec<(String, String)>,
) -> Result<(), SourceError> {
    const MAX_DEPTH: usize = 12;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            problems.push((dir.display().to_string(), error.to_string()));
            return Ok(());
        }
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_skipped(&name) {
            continue;
        }
        let path = entry.path();
        // Follows symlinks; the depth limit stops cycles.
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            if depth < MAX_DEPTH {
                walk(base, &path, depth + 1, files, problems)?;
            }
        } else if metadata.is_file() {
            if files.len() >= MAX_FILES_PER_ROOT {
                return Err(SourceError::TooManyFiles);
            }
            let relative = path
                .strip_prefix(base)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            match std::fs::read(&path) {
                Ok(bytes) => {
                    files.insert(relative, Bytes::Shared(Arc::from(bytes)));
                }
                Err(error) => problems.push((path.display().to_string(), error.to_string())),
            }
        }
    }
    Ok(())
}

/// Read every file of a root. Unreadable single files are returned as `(file, problem)`.
pub(crate) fn read_root(
    root: &RootSource,
) -> Result<(RootFiles, Vec<(String, String)>), SourceError> {
    let mut files = RootFiles::new();
    let mut problems = Vec::new();
    match root {
        RootSource::Embedded => {
            collect_embedded(&EMBEDDED_SKILLS, "skills/", &mut files);
            collect_embedded(&EMBEDDED_CARDS, "cards/", &mut files);
        }
        RootSource::Directory(path) => {
            let metadata = std::fs::metadata(path)
                .map_err(|error| SourceError::Unreadable(error.to_string()))?;
            if !metadata.is_dir() {
                return Err(SourceError::NotADirectory);
            }
            walk(path, path, 0, &mut files, &mut problems)?;
        }
    }
    Ok((files, problems))
}
