//! Building a bare repository aside and renaming it into place (repositories and object pools
//! alike), and the error every repository operation returns.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use grasp_state::contract::atomic_file::write_atomic;
use grasp_state::names::identifier::IdentifierError;

use crate::git::GitError;

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error(transparent)]
    Identifier(#[from] IdentifierError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Git(#[from] GitError),
}

pub(crate) fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> RepoError + 'a {
    move |source| RepoError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A name unique within this process and (by pid and time) across processes.
pub(crate) fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Builds a bare repository at `path` atomically: `build` makes it in `.tmp-<unique>` beside
/// `path`, which is then renamed into place (if somebody else created `path` meanwhile, theirs
/// wins: it is built the same way); a failed build leaves nothing behind. Returns whether this
/// call put it in place.
pub(crate) fn build_aside(path: &Path, build: impl FnOnce(&Path) -> Result<(), RepoError>) -> Result<bool, RepoError> {
    let parent = path.parent().ok_or_else(|| io_err("no parent directory for", path)(std::io::ErrorKind::InvalidInput.into()))?;
    std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
    let tmp = parent.join(unique_name(".tmp-"));
    let result = build(&tmp).and_then(|()| match std::fs::rename(&tmp, path) {
        Ok(()) => Ok(true),
        Err(_) if path.is_dir() => Ok(false),
        Err(e) => Err(io_err("renaming into place", path)(e)),
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

/// Appends `section` (lines of git's config syntax) to the `config` of the repository `dir`, in
/// one atomic write.
pub(crate) fn append_config(dir: &Path, section: &str) -> Result<(), RepoError> {
    let config = dir.join("config");
    let mut text = std::fs::read(&config).map_err(io_err("reading", &config))?;
    if !text.is_empty() && !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    text.extend_from_slice(section.as_bytes());
    write_atomic(&config, &text, None).map_err(io_err("writing", &config))
}

