//! `--watch`: rebuild the catalog when files under a directory root change.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use super::{Catalog, CatalogHandle, Diagnostic, RootSource, Severity};

/// Quiet period after the last file event before the catalog is rebuilt, so that an editor
/// saving several files causes one reload.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Keeps the file watcher alive; dropping it stops watching.
pub struct CatalogWatcher {
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for CatalogWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CatalogWatcher")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot start the file watcher: {0}")]
    Start(notify::Error),
    #[error("cannot watch {path}: {source}")]
    Path {
        path: String,
        #[source]
        source: notify::Error,
    },
}

/// Log the warnings and errors of a reload that the previous snapshot did not have, so that
/// an edit that breaks a skill says why at once (the skill itself keeps its last good
/// version, see [`super::Catalog::reload_from`]).
fn log_new_problems(previous: &Catalog, catalog: &Catalog) {
    let known: HashSet<&Diagnostic> = previous.diagnostics().iter().collect();
    for diagnostic in catalog.diagnostics() {
        if known.contains(diagnostic) {
            continue;
        }
        match diagnostic.severity {
            Severity::Error => tracing::error!("reload: {diagnostic}"),
            Severity::Warning => tracing::warn!("reload: {diagnostic}"),
            Severity::Note => tracing::debug!("reload: {diagnostic}"),
        }
    }
}

/// Watch every directory root of `handle` and call [`CatalogHandle::reload`] after changes.
/// `on_reload` runs on the watcher thread after each reload (for logging).
pub fn watch_roots(
    handle: CatalogHandle,
    on_reload: impl Fn(&Catalog) + Send + 'static,
) -> Result<CatalogWatcher, WatchError> {
    let (events, receiver) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|event| !event.kind.is_access()) {
            let _ = events.send(());
        }
    })
    .map_err(WatchError::Start)?;
    for root in handle.roots() {
        if let RootSource::Directory(path) | RootSource::CalibrationFile(path) = root {
            watcher
                .watch(path, RecursiveMode::Recursive)
                .map_err(|source| WatchError::Path {
                    path: path.display().to_string(),
                    source,
                })?;
        }
    }
    std::thread::Builder::new()
        .name("catalog-watch".into())
        .spawn(move || {
            while receiver.recv().is_ok() {
                // Drain until the tree has been quiet for DEBOUNCE.
                while receiver.recv_timeout(DEBOUNCE).is_ok() {}
                let previous = handle.snapshot();
                let catalog = handle.reload();
                log_new_problems(&previous, &catalog);
                on_reload(&catalog);
            }
        })
        .map_err(|error| WatchError::Start(notify::Error::io(error)))?;
    Ok(CatalogWatcher { _watcher: watcher })
}
