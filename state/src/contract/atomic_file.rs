//! The one way files are replaced on disk: written whole to `<path>.tmp`, fsynced, renamed over
//! `path`, then the directory fsynced. A crash at any point leaves either the old or the new
//! complete file, never a mix; readers never see a partial file.
//!
//! Used for the purgatory checkpoint, the hook API's address and token files, the hooks and
//! their configuration (a hook is a hard link to its binary where one can be made,
//! [`link_atomic`]), the relay's public address file and a private service's key. One writer per path at a time (the daemon holds the
//! data-directory lock): the temporary name is fixed, so a stale one from a crash is replaced.
//!
//! Also the one way records are appended durably ([`append_synced`]: the purgatory journal, the
//! event store's log of acknowledged events).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Appends `buf` to `file` (opened for appending, `size` bytes long) and syncs its data: once
/// this returns Ok the bytes survive a crash. On failure the file is cut back to `size`, so no
/// half record stays before later ones.
pub fn append_synced(file: &mut fs::File, size: u64, buf: &[u8]) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let written = file.write_all(buf).and_then(|()| file.sync_data());
    if written.is_err() {
        let _ = file.set_len(size);
    }
    written
}

/// The temporary file [`write_atomic`] writes before renaming: `<path>.tmp`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Replaces `path` by `data` atomically and durably. `mode` sets the file's permission bits
/// exactly (e.g. `0o600` for secrets, `0o755` for scripts), whatever the umask; `None` keeps
/// the default (`0o666` minus the umask). The file has its final mode before it appears at
/// `path`.
pub fn write_atomic(path: &Path, data: &[u8], mode: Option<u32>) -> io::Result<()> {
    let tmp = tmp_path(path);
    // A stale temporary from a crashed write; if it cannot be removed, creating it fails below.
    let _ = fs::remove_file(&tmp);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    if let Some(mode) = mode {
        options.mode(mode);
    }
    let result = (|| {
        let mut file = options.open(&tmp)?;
        if let Some(mode) = mode {
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        file.write_all(data)?;
        file.sync_all()
    })();
    if let Err(e) = result {
        if !tmp.is_dir() {
            let _ = fs::remove_file(&tmp);
        }
        return Err(e);
    }
    put_in_place(&tmp, path)
}

/// Replaces `path` atomically by a hard link to the existing file `target` (same inode: its
/// content and mode), made at `<path>.tmp` and renamed over `path`; the directory is fsynced.
/// Fails (leaving `path` as it was) where a link cannot be made, e.g. across file systems: the
/// caller then copies with [`write_atomic`]. A `path` that already is `target` stays as it is.
pub fn link_atomic(target: &Path, path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(a), Ok(b)) = (fs::metadata(target), fs::symlink_metadata(path)) {
        if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
            return Ok(());
        }
    }
    let tmp = tmp_path(path);
    let _ = fs::remove_file(&tmp);
    fs::hard_link(target, &tmp)?;
    put_in_place(&tmp, path)
}

/// Renames `tmp` over `path` and fsyncs the directory, so the new name survives a crash.
fn put_in_place(tmp: &Path, path: &Path) -> io::Result<()> {
    if let Err(e) = fs::rename(tmp, path) {
        let _ = fs::remove_file(tmp);
        return Err(e);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_files_with_the_given_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        write_atomic(&path, b"one", Some(0o600)).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // A stale temporary is replaced; the old content is replaced whole.
        fs::write(tmp_path(&path), "stale and long").unwrap();
        write_atomic(&path, b"two", Some(0o755)).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
        assert!(!tmp_path(&path).exists());
        write_atomic(&path, b"three", None).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"three");
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"old", None).unwrap();
        fs::create_dir(tmp_path(&path)).unwrap();
        assert!(write_atomic(&path, b"new", None).is_err());
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert!(write_atomic(&dir.path().join("missing").join("f"), b"x", None).is_err());
    }

    #[test]
    fn links_replace_files_whole_and_twice_is_a_no_op() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (target, path) = (dir.path().join("bin"), dir.path().join("hook"));
        write_atomic(&target, b"binary", Some(0o755)).unwrap();
        write_atomic(&path, b"#!/bin/sh\nold script\n", Some(0o755)).unwrap();
        link_atomic(&target, &path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"binary");
        assert_eq!(fs::metadata(&path).unwrap().ino(), fs::metadata(&target).unwrap().ino());
        link_atomic(&target, &path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"binary");
        assert!(!tmp_path(&path).exists());
        assert!(link_atomic(&dir.path().join("missing"), &path).is_err());
        assert_eq!(fs::read(&path).unwrap(), b"binary", "a failed link keeps the old file");
    }
}
