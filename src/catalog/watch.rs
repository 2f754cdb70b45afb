//! `--watch`: rebuild the catalog when files under a directory root change.

use std::sync::mpsc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use super::{CatalogHandle, RootSource};

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

/// Watch every directory root of `handle` and call [`CatalogHandle::reload`] after changes.
/// `on_reload` runs on the watcher thread after each reload (for logging).
pub fn watch_roots(
    handle: CatalogHandle,
    on_reload: impl Fn(&super::Catalog) + Send + 'static,
) -> Result<CatalogWatcher, WatchError> {
    let (events, receiver) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|event| !event.kind.is_access()) {
            let _ = events.send(());
        }
    })
    .map_err(WatchError::Start)?;
    for root in handle.roots() {
        if let RootSource::Directory(path) = root {
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
                let catalog = handle.reload();
                on_reload(&catalog);
            }
        })
        .map_err(|error| WatchError::Start(notify::Error::io(error)))?;
    Ok(CatalogWatcher { _watcher: watcher })
}
