//! Where catalog files come from: the embedded tree or a directory on disk. Both are read
//! into the same in-memory map of relative path -> bytes, so loading has one code path.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
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
    /// One cluster-calibration card (`--calibration FILE`), read as the root's
    /// `cards/calibration.yaml`.
    CalibrationFile(PathBuf),
}

/// Where a calibration card sits in a root, and where `--calibration FILE` puts its file.
pub const CALIBRATION_CARD: &str = "cards/calibration.yaml";

impl fmt::Display for RootSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            Self::Directory(path) | Self::CalibrationFile(path) => write!(f, "{}", path.display()),
        }
    }
}

impl RootSource {
    /// How a file of this root is named in diagnostics.
    pub fn display_file(&self, relative: &str) -> String {
        match self {
            Self::Embedded => format!("embedded:{relative}"),
            Self::Directory(path) => path.join(relative).display().to_string(),
            Self::CalibrationFile(path) => path.display().to_string(),
        }
    }
}

/// Files of a root, keyed by `/`-separated path relative to the root.
pub(crate) type RootFiles = BTreeMap<String, Bytes>;

/// What one directory root may hold. Every limit is checked from metadata before a file is
/// read, so that a hostile or mistaken folder (a link to a 2 GiB file, a tree of millions of
/// files) costs milliseconds, not minutes and gigabytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLimits {
    /// Largest file read. The Skills extension caps a whole skill at 16 MiB, so a bigger
    /// single file cannot be served as part of a valid skill.
    pub max_file_bytes: u64,
    /// Files and folders walked per root: a skills folder holds hundreds; tens of thousands
    /// means the path points at the wrong tree (a home folder, `/`).
    pub max_entries: usize,
    /// Sum of the file sizes read per root; the catalog keeps every file in memory.
    pub max_total_bytes: u64,
    /// Folder nesting below the root; skills are two or three levels deep.
    pub max_depth: usize,
}

impl SourceLimits {
    pub const DEFAULT: Self = Self {
        max_file_bytes: 16 * 1024 * 1024,
        max_entries: 50_000,
        max_total_bytes: 256 * 1024 * 1024,
        max_depth: 12,
    };
}

impl Default for SourceLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A root whose files could not be read; the whole root is skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read directory: {0}")]
    Unreadable(String),
    #[error("is not a directory; pass a folder that holds skill folders")]
    NotADirectory,
    #[error(
        "holds more than {0} files and folders; point --skills-dir at the skills folder itself"
    )]
    TooManyEntries(usize),
    #[error("holds more than {0} bytes of files; point --skills-dir at the skills folder itself or remove large files")]
    TooManyBytes(u64),
}

/// Why one file or folder of a root was not read. Each becomes a warning naming the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    #[error("symbolic link to {target}, outside the root; not followed (copy the file into the folder instead)")]
    LinkOutsideRoot { target: String },
    #[error("symbolic link to a folder that contains it (a loop); not followed")]
    LinkLoop,
    #[error("symbolic link whose target cannot be resolved: {0}")]
    BrokenLink(String),
    #[error("not a regular file or folder (a fifo, socket or device); skipped")]
    NotRegular,
    #[error("file is {size} bytes, over the limit of {limit} bytes per file; skipped")]
    TooLarge { size: u64, limit: u64 },
    #[error("folder is nested more than {0} levels below the root; skipped")]
    TooDeep(usize),
    #[error("file changed while it was read; skipped (it is read again on the next load)")]
    Changed,
    #[error("cannot read: {0}")]
    Unreadable(String),
}

/// A file or folder that was skipped, with the path as shown to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub path: String,
    pub reason: SkipReason,
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

/// Same file as the one checked before opening it (a link swapped in between is refused).
#[cfg(unix)]
fn same_file(checked: &std::fs::Metadata, opened: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    checked.dev() == opened.dev() && checked.ino() == opened.ino()
}

#[cfg(not(unix))]
fn same_file(_checked: &std::fs::Metadata, _opened: &std::fs::Metadata) -> bool {
    true
}

/// Walks one directory root without leaving it: links are resolved and must stay inside
/// the (canonical) root, only regular files are read, folders on the current path are not
/// entered again, and every limit is checked before reading.
struct Walker<'a> {
    /// Canonical root: every resolved path must start with it.
    root: PathBuf,
    /// The root as the user gave it, for paths in diagnostics.
    shown_root: &'a Path,
    limits: SourceLimits,
    files: RootFiles,
    skipped: Vec<Skipped>,
    entries: usize,
    bytes: u64,
    /// Canonical folders from the root to the one being walked.
    ancestors: Vec<PathBuf>,
}

impl Walker<'_> {
    fn skip(&mut self, relative: &str, reason: SkipReason) {
        self.skipped.push(Skipped {
            path: self.shown_root.join(relative).display().to_string(),
            reason,
        });
    }

    /// `real` is the canonical folder, `relative` its `/`-separated path from the root
    /// ("" for the root, else ending in `/`).
    fn walk(&mut self, real: &Path, relative: &str, depth: usize) -> Result<(), SourceError> {
        let reader = match std::fs::read_dir(real) {
            Ok(reader) => reader,
            Err(error) => {
                self.skip(relative, SkipReason::Unreadable(error.to_string()));
                return Ok(());
            }
        };
        // Count entries while listing, so that a folder of millions stops at the limit.
        let mut names = Vec::new();
        for entry in reader {
            let Ok(entry) = entry else { continue };
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(SourceError::TooManyEntries(self.limits.max_entries));
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_skipped(&name) {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            self.visit(real, &format!("{relative}{name}"), &name, depth)?;
        }
        Ok(())
    }

    fn visit(
        &mut self,
        parent: &Path,
        relative: &str,
        name: &str,
        depth: usize,
    ) -> Result<(), SourceError> {
        let path = parent.join(name);
        let lstat = match std::fs::symlink_metadata(&path) {
            Ok(lstat) => lstat,
            Err(error) => {
                self.skip(relative, SkipReason::Unreadable(error.to_string()));
                return Ok(());
            }
        };
        let (real, metadata) = if lstat.file_type().is_symlink() {
            let target = match path.canonicalize() {
                Ok(target) => target,
                Err(error) => {
                    self.skip(relative, SkipReason::BrokenLink(error.to_string()));
                    return Ok(());
                }
            };
            if !target.starts_with(&self.root) {
                self.skip(
                    relative,
                    SkipReason::LinkOutsideRoot {
                        target: target.display().to_string(),
                    },
                );
                return Ok(());
            }
            match std::fs::symlink_metadata(&target) {
                Ok(metadata) => (target, metadata),
                Err(error) => {
                    self.skip(relative, SkipReason::BrokenLink(error.to_string()));
                    return Ok(());
                }
            }
        } else {
            (path, lstat)
        };
        if metadata.is_dir() {
            if self.ancestors.contains(&real) {
                self.skip(relative, SkipReason::LinkLoop);
            } else if depth >= self.limits.max_depth {
                self.skip(relative, SkipReason::TooDeep(self.limits.max_depth));
            } else {
                self.ancestors.push(real.clone());
                let result = self.walk(&real, &format!("{relative}/"), depth + 1);
                self.ancestors.pop();
                result?;
            }
        } else if metadata.is_file() {
            self.read_file(&real, &metadata, relative)?;
        } else {
            self.skip(relative, SkipReason::NotRegular);
        }
        Ok(())
    }

    fn read_file(
        &mut self,
        real: &Path,
        checked: &std::fs::Metadata,
        relative: &str,
    ) -> Result<(), SourceError> {
        let limit = self.limits.max_file_bytes;
        if checked.len() > limit {
            let size = checked.len();
            self.skip(relative, SkipReason::TooLarge { size, limit });
            return Ok(());
        }
        self.add_bytes(checked.len())?;
        match read_regular(real, checked, limit) {
            Ok(bytes) => {
                // Files whose size is not known up front (/proc-like) count what was read.
                let extra = (bytes.len() as u64).saturating_sub(checked.len());
                self.add_bytes(extra)?;
                self.files
                    .insert(relative.to_owned(), Bytes::Shared(Arc::from(bytes)));
            }
            Err(reason) => self.skip(relative, reason),
        }
        Ok(())
    }

    fn add_bytes(&mut self, bytes: u64) -> Result<(), SourceError> {
        let limit = self.limits.max_total_bytes;
        self.bytes = self
            .bytes
            .checked_add(bytes)
            .filter(|total| *total <= limit)
            .ok_or(SourceError::TooManyBytes(limit))?;
        Ok(())
    }
}

/// Read a regular file that was checked as `checked`, at most `limit` bytes.
fn read_regular(
    path: &Path,
    checked: &std::fs::Metadata,
    limit: u64,
) -> Result<Vec<u8>, SkipReason> {
    let unreadable = |error: std::io::Error| SkipReason::Unreadable(error.to_string());
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let opened = file.metadata().map_err(unreadable)?;
    if !opened.is_file() {
        return Err(SkipReason::NotRegular);
    }
    if !same_file(checked, &opened) {
        return Err(SkipReason::Changed);
    }
    // A folder on the way swapped for a link after it was checked would lead out of the
    // root; `path` is canonical, so it must still resolve to itself once the file is open.
    if path.canonicalize().ok().as_deref() != Some(path) {
        return Err(SkipReason::Changed);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len().min(limit)).unwrap_or(0));
    // One byte over the limit tells a file that grew since it was checked.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > limit {
        return Err(SkipReason::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// Read every file of a root with the default limits. Files that were not read are
/// returned with the reason.
pub(crate) fn read_root(root: &RootSource) -> Result<(RootFiles, Vec<Skipped>), SourceError> {
    read_root_with(root, SourceLimits::DEFAULT)
}

/// [`read_root`] with explicit limits.
pub(crate) fn read_root_with(
    root: &RootSource,
    limits: SourceLimits,
) -> Result<(RootFiles, Vec<Skipped>), SourceError> {
    match root {
        RootSource::Embedded => {
            let mut files = RootFiles::new();
            collect_embedded(&EMBEDDED_SKILLS, "skills/", &mut files);
            collect_embedded(&EMBEDDED_CARDS, "cards/", &mut files);
            Ok((files, Vec::new()))
        }
        RootSource::Directory(path) => {
            let metadata = std::fs::metadata(path)
                .map_err(|error| SourceError::Unreadable(error.to_string()))?;
            if !metadata.is_dir() {
                return Err(SourceError::NotADirectory);
            }
            let real = path
                .canonicalize()
                .map_err(|error| SourceError::Unreadable(error.to_string()))?;
            let mut walker = Walker {
                root: real.clone(),
                shown_root: path,
                limits,
                files: RootFiles::new(),
                skipped: Vec::new(),
                entries: 0,
                bytes: 0,
                ancestors: vec![real.clone()],
            };
            walker.walk(&real, "", 0)?;
            Ok((walker.files, walker.skipped))
        }
        RootSource::CalibrationFile(path) => {
            let unreadable = |error: std::io::Error| {
                SourceError::Unreadable(format!("{}: {error}", path.display()))
            };
            let real = path.canonicalize().map_err(unreadable)?;
            let metadata = std::fs::metadata(&real).map_err(unreadable)?;
            if !metadata.is_file() {
                return Err(SourceError::Unreadable(format!(
                    "{}: not a regular file; give the calibration card's YAML file",
                    path.display()
                )));
            }
            let bytes =
                read_regular(&real, &metadata, limits.max_file_bytes).map_err(|reason| {
                    SourceError::Unreadable(format!("{}: {reason}", path.display()))
                })?;
            let mut files = RootFiles::new();
            files.insert(CALIBRATION_CARD.into(), Bytes::Shared(bytes.into()));
            Ok((files, Vec::new()))
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, text).expect("write");
    }

    fn read(root: &Path, limits: SourceLimits) -> Result<(RootFiles, Vec<Skipped>), SourceError> {
        read_root_with(&RootSource::Directory(root.to_path_buf()), limits)
    }

    fn reasons_for<'a>(skipped: &'a [Skipped], suffix: &str) -> Vec<&'a SkipReason> {
        skipped
            .iter()
            .filter(|skipped| skipped.path.ends_with(suffix))
            .map(|skipped| &skipped.reason)
            .collect()
    }

    #[test]
    fn links_out_of_the_root_are_not_followed() {
        let outside = tempfile::tempdir().expect("tempdir");
        write(&outside.path().join("secret.txt"), "TOKEN=hunter2");
        write(&outside.path().join("folder/inner.md"), "outside folder");
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("skill/SKILL.md"), "inside");
        symlink(
            outside.path().join("secret.txt"),
            root.path().join("skill/secret.txt"),
        )
        .expect("link");
        symlink(
            outside.path().join("folder"),
            root.path().join("skill/folder"),
        )
        .expect("link");
        symlink("/proc/self/environ", root.path().join("skill/environ")).expect("link");
        symlink("../..", root.path().join("skill/up")).expect("link");

        let (files, skipped) = read(root.path(), SourceLimits::DEFAULT).expect("root");
        assert_eq!(files.keys().collect::<Vec<_>>(), ["skill/SKILL.md"]);
        for name in ["skill/secret.txt", "skill/folder", "skill/up"] {
            assert!(
                matches!(
                    reasons_for(&skipped, name)[..],
                    [SkipReason::LinkOutsideRoot { .. }]
                ),
                "{name}: {skipped:?}"
            );
        }
        // /proc/self/environ resolves outside the root (or not at all without /proc).
        assert!(matches!(
            reasons_for(&skipped, "skill/environ")[..],
            [SkipReason::LinkOutsideRoot { .. } | SkipReason::BrokenLink(_)]
        ));
        assert!(files
            .values()
            .all(|bytes| !String::from_utf8_lossy(bytes).contains("hunter2")));
    }

    #[test]
    fn links_inside_the_root_are_followed() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("shared/notes.md"), "shared");
        write(&root.path().join("skill/SKILL.md"), "inside");
        symlink("../shared", root.path().join("skill/references")).expect("link");
        symlink("../shared/notes.md", root.path().join("skill/notes.md")).expect("link");
        let (files, skipped) = read(root.path(), SourceLimits::DEFAULT).expect("root");
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(
            files.get("skill/references/notes.md").map(|b| &b[..]),
            Some(&b"shared"[..])
        );
        assert_eq!(
            files.get("skill/notes.md").map(|b| &b[..]),
            Some(&b"shared"[..])
        );
    }

    #[test]
    fn link_loops_end_at_once() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("skill/SKILL.md"), "inside");
        for i in 0..6 {
            symlink(".", root.path().join(format!("x{i}"))).expect("link");
            symlink("..", root.path().join(format!("skill/y{i}"))).expect("link");
        }
        let (files, skipped) = read(root.path(), SourceLimits::DEFAULT).expect("root");
        assert_eq!(files.len(), 1);
        assert_eq!(skipped.len(), 12, "{skipped:?}");
        assert!(skipped
            .iter()
            .all(|skipped| skipped.reason == SkipReason::LinkLoop));
    }

    #[test]
    fn huge_files_are_refused_before_reading() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("skill/SKILL.md"), "inside");
        // Sparse: instant to create, 2 GiB by metadata.
        let huge = std::fs::File::create(root.path().join("skill/huge.bin")).expect("create");
        huge.set_len(2 << 30).expect("set_len");
        symlink("huge.bin", root.path().join("skill/link-to-huge.bin")).expect("link");
        let (files, skipped) = read(root.path(), SourceLimits::DEFAULT).expect("root");
        assert_eq!(files.len(), 1);
        for name in ["skill/huge.bin", "skill/link-to-huge.bin"] {
            assert!(
                matches!(
                    reasons_for(&skipped, name)[..],
                    [SkipReason::TooLarge {
                        size: 2147483648,
                        ..
                    }]
                ),
                "{name}: {skipped:?}"
            );
        }
    }

    #[test]
    fn fifos_are_skipped_without_blocking() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("skill/SKILL.md"), "inside");
        let fifo = root.path().join("skill/pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|status| status.success());
        if !made {
            return; // no mkfifo on this system
        }
        let (files, skipped) = read(root.path(), SourceLimits::DEFAULT).expect("root");
        assert_eq!(files.len(), 1);
        assert_eq!(
            reasons_for(&skipped, "skill/pipe"),
            [&SkipReason::NotRegular]
        );
    }

    #[test]
    fn root_limits_refuse_the_root() {
        let root = tempfile::tempdir().expect("tempdir");
        for i in 0..10 {
            write(&root.path().join(format!("skill/file{i}.md")), "0123456789");
        }
        let few_entries = SourceLimits {
            max_entries: 5,
            ..SourceLimits::DEFAULT
        };
        assert_eq!(
            read(root.path(), few_entries).map(|_| ()),
            Err(SourceError::TooManyEntries(5))
        );
        let few_bytes = SourceLimits {
            max_total_bytes: 55,
            ..SourceLimits::DEFAULT
        };
        assert_eq!(
            read(root.path(), few_bytes).map(|_| ()),
            Err(SourceError::TooManyBytes(55))
        );
        let shallow = SourceLimits {
            max_depth: 0,
            ..SourceLimits::DEFAULT
        };
        let (files, skipped) = read(root.path(), shallow).expect("root");
        assert!(files.is_empty());
        assert_eq!(reasons_for(&skipped, "skill"), [&SkipReason::TooDeep(0)]);
    }
}
