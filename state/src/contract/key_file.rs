//! A secret key kept in a file of its own: the relay's identity (docs/protocol.md, "Relay
//! identity"). What the file may hold and who may read it, as pure verdicts; the relay reads the
//! file and makes it when it may (`grasp_relay::identity`).
//!
//! The file holds one line: the secret key as 64 hex digits or as an `nsec1...` (NIP-19), with
//! surrounding whitespace and the final newline ignored. Only its owner may read or write it
//! (mode `0600` or `0400`): the key signs for the relay, and a key others could read is no longer
//! the relay's alone.

use nostr::prelude::SecretKey;

/// Why a key file's text is no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyTextError {
    #[error("it is empty; it must hold one secret key, as 64 hex digits or an nsec1... key")]
    Empty,
    #[error("it holds more than one line; it must hold one secret key, as 64 hex digits or an nsec1... key")]
    SeveralLines,
    #[error("it holds no secret key; it must hold one, as 64 hex digits or an nsec1... key")]
    Malformed,
}

/// The secret key in a key file's `text`. Errors never quote the text (it may be a key).
pub fn parse_secret(text: &str) -> Result<SecretKey, KeyTextError> {
    let line = text.trim();
    if line.is_empty() {
        return Err(KeyTextError::Empty);
    }
    if line.contains(['\n', '\r']) {
        return Err(KeyTextError::SeveralLines);
    }
    SecretKey::parse(line).map_err(|_| KeyTextError::Malformed)
}

/// The text a new key file holds: the key in hex, one line.
pub fn key_text(secret: &SecretKey) -> String {
    format!("{}\n", secret.to_secret_hex())
}

/// The mode a new key file is made with.
pub const NEW_FILE_MODE: u32 = 0o600;

/// Whether permission bits `mode` (as `st_mode`) leave the file to its owner alone: no access for
/// the group or others.
pub fn owner_only(mode: u32) -> bool {
    mode & 0o077 == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{Keys, ToBech32};

    #[test]
    fn hex_or_nsec_on_one_line() {
        let keys = Keys::generate();
        let hex = keys.secret_key().to_secret_hex();
        let nsec = keys.secret_key().to_bech32().unwrap();
        for text in [hex.clone(), format!("{hex}\n"), format!("  {hex}\r\n"), nsec.clone(), format!("{nsec}\n\n")] {
            assert_eq!(parse_secret(&text).unwrap(), *keys.secret_key(), "{text:?}");
        }
        assert_eq!(parse_secret(&key_text(keys.secret_key())).unwrap(), *keys.secret_key());
        assert_eq!(key_text(keys.secret_key()), format!("{hex}\n"));
    }

    #[test]
    fn anything_else_is_refused_without_quoting_it() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        assert_eq!(parse_secret(""), Err(KeyTextError::Empty));
        assert_eq!(parse_secret(" \n\n"), Err(KeyTextError::Empty));
        assert_eq!(parse_secret(&format!("{hex}\n{hex}\n")), Err(KeyTextError::SeveralLines));
        let npub = Keys::generate().public_key().to_bech32().unwrap();
        let zero = "0".repeat(64);
        for text in ["junk", &hex[..63], &format!("{hex}0"), &npub, &zero, &format!("{hex} {hex}")] {
            let err = parse_secret(text).unwrap_err();
            assert_eq!(err, KeyTextError::Malformed, "{text:?}");
            assert!(!err.to_string().contains(text), "the error quotes the text: {err}");
        }
    }

    #[test]
    fn only_the_owner_may_read_it() {
        assert!(owner_only(0o600) && owner_only(0o400) && owner_only(0o100600));
        assert!(owner_only(NEW_FILE_MODE));
        for mode in [0o640, 0o644, 0o604, 0o660, 0o100644, 0o777] {
            assert!(!owner_only(mode), "{mode:o}");
        }
    }
}
