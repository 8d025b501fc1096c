//! The purgatory checkpoint on disk (`<data>/`[`CHECKPOINT_FILE`](super::layout::CHECKPOINT_FILE)):
//! written atomically, read back, and moved aside when it cannot be used. The format and what
//! is saved are [`crate::purgatory::checkpoint`]'s; this is only the file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::purgatory::{CheckpointError, PurgatoryState};

/// `<path>` + `suffix`, e.g. `purgatory-state.json.corrupt-<secs>`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Writes `state` (a [`PurgatorySnapshot`](crate::purgatory::PurgatorySnapshot) or a [`PurgatoryState`]) to `path` as pretty JSON,
/// atomically ([`super::atomic_file::write_atomic`]: `<path>.tmp`, fsync, rename over `path`,
/// fsync the directory). A crash at any point leaves either the old or the new complete file.
pub fn write_checkpoint(path: &Path, state: &impl Serialize) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    super::atomic_file::write_atomic(path, &json, None)
}

/// Reads a checkpoint; `Ok(None)` if there is none. Corrupt JSON or an unknown version is an
/// error: move the file aside with [`set_aside`] and start empty.
pub fn read_checkpoint(path: &Path) -> Result<Option<PurgatoryState>, CheckpointError> {
    match fs::read_to_string(path) {
        Ok(json) => PurgatoryState::from_json(&json).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Renames an unusable checkpoint to `<path>.corrupt-<unix seconds>` and returns the new path.
pub fn set_aside(path: &Path) -> io::Result<PathBuf> {
    let aside = with_suffix(path, &format!(".corrupt-{}", SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())));
    fs::rename(path, &aside)?;
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::layout::CHECKPOINT_FILE;
    use crate::purgatory::testutil::*;

    /// The saved state of a purgatory holding an announcement and its state event.
    fn populated() -> PurgatoryState {
        let (_clock, mut p) = purgatory();
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 0), "repo").unwrap();
        let s = signed(0, STATE, 0);
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        p.snapshot().to_state()
    }

    #[test]
    fn write_replaces_atomically_via_tmp_and_read_returns_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        let tmp = dir.path().join(format!("{CHECKPOINT_FILE}.tmp"));
        assert!(read_checkpoint(&path).unwrap().is_none());

        let first = populated();
        write_checkpoint(&path, &first).unwrap();
        assert!(!tmp.exists());
        assert_eq!(fs::read_to_string(&path).unwrap(), first.to_json());
        assert_eq!(read_checkpoint(&path).unwrap(), Some(first.clone()));

        // A stale tmp from a crashed write is overwritten, and the rename replaces the file.
        fs::write(&tmp, "half a checkp").unwrap();
        let second = PurgatoryState {
            saved_at: 42,
            ..PurgatoryState::default()
        };
        write_checkpoint(&path, &second).unwrap();
        assert!(!tmp.exists());
        assert_eq!(read_checkpoint(&path).unwrap(), Some(second));
        // Reading (and restoring) never removes the file.
        assert!(path.exists());

        // A failed write leaves the previous checkpoint intact.
        let missing = dir.path().join("no-such-dir").join(CHECKPOINT_FILE);
        assert!(write_checkpoint(&missing, &first).is_err());
        assert!(!missing.exists());
        fs::create_dir(&tmp).unwrap(); // the tmp path cannot be created as a file
        assert!(write_checkpoint(&path, &first).is_err());
        assert_eq!(read_checkpoint(&path).unwrap().unwrap().saved_at, 42);
    }

    #[test]
    fn corrupt_or_unknown_file_is_an_error_and_can_be_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        fs::write(&path, "{ this is not json").unwrap();
        assert!(matches!(
            read_checkpoint(&path),
            Err(CheckpointError::Corrupt(_))
        ));
        let aside = set_aside(&path).unwrap();
        assert!(!path.exists());
        assert!(aside.exists());
        assert!(aside
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("{CHECKPOINT_FILE}.corrupt-")));
        fs::write(&path, r#"{"version": 7}"#).unwrap();
        let err = read_checkpoint(&path).unwrap_err();
        assert!(matches!(err, CheckpointError::UnsupportedVersion(7)));
        assert!(err.to_string().contains("moved aside"));
    }
}
