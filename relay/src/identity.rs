//! The relay's own identity (docs/protocol.md, "Relay identity"): an owner key kept in a file
//! only its owner may read (`--relay-key-file`, default `<data>/relay-key`), never on the command
//! line. Its public key is NIP-11's `self` (and `pubkey` unless `--admin-pubkey` names the
//! operator) and the NIP-05 name `_` at `/.well-known/nostr.json` ([`crate::nostr::nip05`]).
//!
//! Only the default file is made when missing (a fresh key, mode 0600, written whole or not at
//! all). A configured file that is missing, unreadable, empty, not a key or readable by others
//! stops startup, and so does a default file in that state once it exists: the relay never takes
//! a new identity silently. What the file holds and who may read it is
//! [`grasp_state::contract::key_file`].

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use grasp_state::contract::key_file::{self, KeyTextError};
use nostr::prelude::{Keys, ToBech32};

use crate::config::{ServerConfig, StorageConfig};

/// Where the key file's path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `--relay-key-file` (flag, environment or configuration file): it must exist.
    Configured,
    /// `<data>/relay-key`: made with a fresh key when missing.
    Default,
}

/// Why the relay has no identity: startup stops with this message, which names the file.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "the relay key file {path} (--relay-key-file) does not exist; put the relay's secret key in it \
         (one line, hex or nsec, mode 0600), or leave --relay-key-file unset to have <data-dir>/relay-key made"
    )]
    Missing { path: PathBuf },
    #[error("cannot read the relay key file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("the relay key file {path} is no key: {reason} (fix the file: the relay never replaces a key file with a new key)")]
    Invalid { path: PathBuf, reason: KeyTextError },
    #[error(
        "the relay key file {path} has mode {mode:04o}: someone other than its owner may read or change it; \
         `chmod 600 {path}` (and check who read it)"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error("cannot write a new relay key to {path}: {reason}")]
    Write { path: PathBuf, reason: String },
}

/// The relay's key as configured: `--relay-key-file` (which must exist), else
/// `<data>/relay-key` (made when missing).
pub fn from_config(server: &ServerConfig, storage: &StorageConfig) -> Result<(Keys, PathBuf), IdentityError> {
    let (path, source) = match &server.relay_key_file {
        Some(path) => (path.clone(), KeySource::Configured),
        None => (storage.layout().relay_key_file(), KeySource::Default),
    };
    load(&path, source).map(|keys| (keys, path))
}

/// The relay's key, read from (or first written to) `path`.
pub fn load(path: &Path, source: KeySource) -> Result<Keys, IdentityError> {
    let owned = || path.to_path_buf();
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o7777;
            if !key_file::owner_only(mode) {
                return Err(IdentityError::Permissions { path: owned(), mode });
            }
            let text = std::fs::read_to_string(path).map_err(|e| IdentityError::Read { path: owned(), reason: e.to_string() })?;
            let secret = key_file::parse_secret(&text).map_err(|reason| IdentityError::Invalid { path: owned(), reason })?;
            Ok(Keys::new(secret))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match source {
            KeySource::Configured => Err(IdentityError::Missing { path: owned() }),
            KeySource::Default => {
                let keys = Keys::generate();
                // Whole or not at all: a crash mid-write must not leave a torn key behind.
                let text = key_file::key_text(keys.secret_key());
                grasp_state::contract::atomic_file::write_atomic(path, text.as_bytes(), Some(key_file::NEW_FILE_MODE))
                    .map_err(|e| IdentityError::Write { path: owned(), reason: e.to_string() })?;
                tracing::info!(path = %path.display(), "made a new relay key");
                Ok(keys)
            }
        },
        Err(e) => Err(IdentityError::Read { path: owned(), reason: e.to_string() }),
    }
}

/// The npub of `keys`, for the log.
pub fn npub(keys: &Keys) -> String {
    keys.public_key().to_bech32().unwrap_or_else(|_| keys.public_key().to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_default_file_is_made_once_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(grasp_state::contract::layout::RELAY_KEY_FILE);
        let made = load(&path, KeySource::Default).unwrap();
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", made.secret_key().to_secret_hex()));
        assert_eq!(load(&path, KeySource::Default).unwrap().public_key(), made.public_key());
        assert_eq!(load(&path, KeySource::Configured).unwrap().public_key(), made.public_key());
    }

    #[test]
    fn a_configured_file_is_never_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(grasp_state::contract::layout::RELAY_KEY_FILE);
        let err = load(&path, KeySource::Configured).unwrap_err();
        assert!(matches!(err, IdentityError::Missing { .. }));
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn hex_and_nsec_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::generate();
        let path = dir.path().join("nsec");
        write(&path, &format!("{}\n", keys.secret_key().to_bech32().unwrap()), 0o400);
        assert_eq!(load(&path, KeySource::Configured).unwrap().public_key(), keys.public_key());
        let path = dir.path().join("hex");
        write(&path, &keys.secret_key().to_secret_hex(), 0o600);
        assert_eq!(load(&path, KeySource::Configured).unwrap().public_key(), keys.public_key());
    }

    #[test]
    fn a_bad_file_stops_startup_whatever_its_source_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let hex = Keys::generate().secret_key().to_secret_hex();
        type Expected = fn(&IdentityError) -> bool;
        let cases: [(&str, &str, u32, Expected); 4] = [
            ("empty", "", 0o600, |e| matches!(e, IdentityError::Invalid { reason: KeyTextError::Empty, .. })),
            ("junk", "not a key\n", 0o600, |e| matches!(e, IdentityError::Invalid { reason: KeyTextError::Malformed, .. })),
            ("two", "a\nb\n", 0o600, |e| matches!(e, IdentityError::Invalid { reason: KeyTextError::SeveralLines, .. })),
            ("open", &hex, 0o644, |e| matches!(e, IdentityError::Permissions { mode: 0o644, .. })),
        ];
        for (name, text, mode, expected) in cases {
            let path = dir.path().join(name);
            write(&path, text, mode);
            for source in [KeySource::Configured, KeySource::Default] {
                let err = load(&path, source).unwrap_err();
                assert!(expected(&err), "{name}: {err:?}");
                assert!(err.to_string().contains(&path.display().to_string()), "{err}");
                assert!(!err.to_string().contains(&hex), "the error quotes the key: {err}");
            }
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{name} was replaced");
        }
        // A directory where the file should be: unreadable, not replaced.
        let path = dir.path().join("dir");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(load(&path, KeySource::Default), Err(IdentityError::Read { .. })));
    }
}
