//! The data directory: its layout and the exclusive lock that keeps two daemons apart.
//!
//! ```text
//! <data>/grasp-relay.lock   exclusive lock held while the daemon runs
//! <data>/relay-addr         public address once listening (for scripts and tests)
//! <data>/events/            LMDB event store
//! <data>/git/               bare repositories
//! <data>/hooks/             git hooks (core.hooksPath)
//! ```

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

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

/// An opened, locked data directory. The lock is released when this is dropped.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Creates the layout under `root` and takes the exclusive lock.
    pub fn open(root: &Path) -> Result<Self, DataDirError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DataDirError::Io { path, source }
        };
        fs::create_dir_all(root).map_err(io(root))?;
        // Absolute from here on: the hook scripts and every repository's core.hooksPath name
        // paths under the data directory, and git runs them from inside the repository.
        let root = &fs::canonicalize(root).map_err(io(root))?;
        let lock_path = root.join("grasp-relay.lock");
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
                    path: root.to_path_buf(),
                    lock: lock_path,
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        for sub in ["events", "git", "hooks"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).map_err(io(&p))?;
        }
        Ok(Self {
            root: root.to_path_buf(),
            _lock: lock,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn events(&self) -> PathBuf {
        self.root.join("events")
    }

    pub fn git(&self) -> PathBuf {
        self.root.join("git")
    }

    pub fn hooks(&self) -> PathBuf {
        self.root.join("hooks")
    }

    /// File holding the bound public address, written once the listener is up.
    pub fn relay_addr_file(&self) -> PathBuf {
        self.root.join("relay-addr")
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
