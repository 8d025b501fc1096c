//! A private service's own key: it answers the NIP-42 challenges of the relays it follows
//! (`--private-sync-peer`), whose operators list its npub as a member. Kept in a file (hex or
//! nsec), created with mode 0600 when missing.

use std::path::Path;

use nostr::prelude::{Keys, SecretKey, ToBech32};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ServiceKeyError {
    #[error("reading the service key {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("the service key file {0} holds no hex or nsec secret key; remove it to have a new key made")]
    Malformed(String),
    #[error("writing a new service key to {path}: {reason}")]
    Write { path: String, reason: String },
}

/// Loads the key in `path`, or makes one and writes it there.
pub fn load_or_create(path: &Path) -> Result<Keys, ServiceKeyError> {
    let shown = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let secret = SecretKey::parse(text.trim()).map_err(|_| ServiceKeyError::Malformed(shown))?;
            Ok(Keys::new(secret))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let keys = Keys::generate();
            let write = |reason: std::io::Error| ServiceKeyError::Write { path: shown.clone(), reason: reason.to_string() };
            // Whole or not at all: a crash mid-write must not leave a torn key behind.
            let text = format!("{}\n", keys.secret_key().to_secret_hex());
            grasp_state::contract::atomic_file::write_atomic(path, text.as_bytes(), Some(0o600)).map_err(write)?;
            Ok(keys)
        }
        Err(e) => Err(ServiceKeyError::Read { path: shown, reason: e.to_string() }),
    }
}

/// The npub operators list as a member on the peers.
pub fn npub(keys: &Keys) -> String {
    keys.public_key().to_bech32().unwrap_or_else(|_| keys.public_key().to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("service-key");
        let made = load_or_create(&path).unwrap();
        assert_eq!(load_or_create(&path).unwrap().public_key(), made.public_key());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        std::fs::write(&path, "junk").unwrap();
        assert!(matches!(load_or_create(&path), Err(ServiceKeyError::Malformed(_))));
    }
}
