//! The data directory: its paths ([`DataLayout`], built on the names in
//! [`grasp_state::contract::layout`], which maps the whole directory) and the exclusive lock that
//! keeps two daemons apart ([`DataDir`]).
//!
//! Who writes what: the event store (`crate::store`), the purgatory checkpoint
//! (`crate::grasp::lifecycle`) and journal (`crate::grasp::journal`), the contributor data ledger
//! (`crate::grasp::budgets`), the hook API's address and token (`crate::api`), relay sync's
//! resume points (`crate::peers::cursors`), Sync+'s cache (`crate::peers::lists`), the relay's
//! key (`crate::identity`).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use grasp_state::contract::layout;

/// Why the data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot create or open {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data directory {path} is already in use by another grasp-relay (lock file {lock} is held); \
         stop the other daemon or pick another --data-dir"
    )]
    Locked { path: PathBuf, lock: PathBuf },
}

/// Where everything lives under a data directory (paths only, nothing is touched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataLayout {
    root: PathBuf,
}

impl DataLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<data>/events`: the LMDB event store.
    pub fn events(&self) -> PathBuf {
        self.root.join(layout::EVENTS_DIR)
    }

    /// `<data>/git`: root of the bare repositories.
    pub fn git(&self) -> PathBuf {
        self.root.join(layout::GIT_DIR)
    }

    /// `<data>/hooks`: the hooks directory used as `core.hooksPath`.
    pub fn hooks(&self) -> PathBuf {
        self.root.join(layout::HOOKS_DIR)
    }

    /// File holding the bound public address, written once the listener is up.
    pub fn relay_addr_file(&self) -> PathBuf {
        self.root.join(layout::RELAY_ADDR_FILE)
    }

    /// `<data>/relay-sync.json`: relay sync's per-relay resume points (`crate::peers::cursors`).
    pub fn relay_sync_file(&self) -> PathBuf {
        self.root.join(layout::RELAY_SYNC_FILE)
    }

    /// `<data>/sync-plus.json`: Sync+'s cache of participants' relay lists and where its last
    /// pass stopped (`crate::peers::lists`).
    pub fn sync_plus_file(&self) -> PathBuf {
        self.root.join(layout::SYNC_PLUS_FILE)
    }

    /// `<data>/relay-key`: the relay's own key (`crate::identity`), unless `--relay-key-file`
    /// names another file.
    pub fn relay_key_file(&self) -> PathBuf {
        self.root.join(layout::RELAY_KEY_FILE)
    }

    /// `<data>/service-key`: a private service's own key (NIP-42 towards its sync peers).
    pub fn service_key_file(&self) -> PathBuf {
        self.root.join(layout::SERVICE_KEY_FILE)
    }

    /// A private GRASP-08 service's markers ([`layout::PRIVATE_MARKER_FILE`]): in the
    /// data directory and in the git root, so grasp-cgi finds one whichever it is configured with.
    pub fn private_markers(&self) -> [PathBuf; 2] {
        let name = layout::PRIVATE_MARKER_FILE;
        [self.root.join(name), self.git().join(name)]
    }

    /// The lock file held while a daemon runs on this directory.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join(layout::LOCK_FILE)
    }

    /// The directories created at startup.
    fn dirs(&self) -> [PathBuf; 3] {
        [self.events(), self.git(), self.hooks()]
    }
}

/// An opened, locked data directory. The lock is released when this is dropped. Derefs to its
/// [`DataLayout`].
#[derive(Debug)]
pub struct DataDir {
    layout: DataLayout,
    _lock: File,
}

impl std::ops::Deref for DataDir {
    type Target = DataLayout;

    fn deref(&self) -> &DataLayout {
        &self.layout
    }
}

impl DataDir {
    /// Creates the layout under `root` and takes the exclusive lock.
    pub fn open(root: &Path) -> Result<Self, DataDirError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DataDirError::Io { path, source }
        };
        fs::create_dir_all(root).map_err(io(root))?;
        // Absolute from here on: the hooks' configuration and every repository's core.hooksPath name
        // paths under the data directory, and git runs them from inside the repository.
        let layout = DataLayout::new(fs::canonicalize(root).map_err(io(root))?);
        let lock_path = layout.lock_file();
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(DataDirError::Locked {
                    path: layout.root().to_path_buf(),
                    lock: lock_path,
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        for dir in layout.dirs() {
            fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        Ok(Self { layout, _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn relative_roots_become_absolute() {
        let rel = std::path::PathBuf::from(format!("target/datadir-test-{}", std::process::id()));
        let dir = super::DataDir::open(&rel).unwrap();
        assert!(dir.root().is_absolute(), "{}", dir.root().display());
        assert_eq!(dir.root(), std::fs::canonicalize(&rel).unwrap());
        drop(dir);
        std::fs::remove_dir_all(&rel).unwrap();
    }

    use super::*;

    #[test]
    fn creates_layout_and_locks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("d");
        let dir = DataDir::open(&root).unwrap();
        assert!(dir.events().is_dir() && dir.git().is_dir() && dir.hooks().is_dir());
        let err = DataDir::open(&root).unwrap_err();
        assert!(matches!(err, DataDirError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("already in use"));
        drop(dir);
        DataDir::open(&root).expect("lock released on drop");
    }
}
