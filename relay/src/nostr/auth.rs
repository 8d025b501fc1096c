//! NIP-42 state of one WebSocket connection: its challenge, whether it was sent, and the public
//! keys it authenticated as (several are allowed). The verification itself is
//! [`grasp_state::trust::auth::verify_auth`]; this type only remembers its results.
//!
//! When the challenge goes out is the connection's choice (docs/protocol.md#trust): a private
//! service sends it on connect; a public one only when something needs authentication (a NIP-70
//! event answered `auth-required:`, an `AUTH` that came before any challenge), since clients
//! such as ngit drop a public relay whose first frame is an unasked challenge.

use nostr::prelude::{Event, PublicKey, Timestamp};

use grasp_state::trust::auth::verify_auth;

/// Most public keys one connection may authenticate as; more `AUTH`s are refused.
pub const MAX_AUTHENTICATED: usize = 16;

/// The connection's challenge and authenticated keys.
#[derive(Debug)]
pub struct ConnectionAuth {
    challenge: String,
    /// Whether the challenge was sent: an `AUTH` can only answer a challenge it was sent.
    sent: bool,
    authenticated: Vec<PublicKey>,
}

/// A fresh random challenge: 16 bytes from the OS, hex.
fn new_challenge() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to the clock and the address of a fresh allocation, still
        // unique per connection (uniqueness is what binds an AUTH event to this connection).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let addr = Box::new(0u8).as_ref() as *const u8 as usize as u128;
        bytes = (nanos ^ (addr << 64)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What an `AUTH` message did.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthOutcome {
    /// The connection is now (also) authenticated as this key.
    Authenticated(PublicKey),
    /// Refused, with the reason to put after `invalid: `.
    Refused(String),
}

impl ConnectionAuth {
    pub fn new() -> Self {
        ConnectionAuth { challenge: new_challenge(), sent: false, authenticated: Vec::new() }
    }

    /// The challenge, to be sent as `["AUTH", <challenge>]`.
    pub fn challenge(&self) -> &str {
        &self.challenge
    }

    /// The challenge if it has not been sent yet, now counted as sent: at most once per
    /// connection.
    pub fn challenge_to_send(&mut self) -> Option<&str> {
        if self.sent {
            return None;
        }
        self.sent = true;
        Some(&self.challenge)
    }

    /// Whether the challenge was sent to the client.
    pub fn challenge_sent(&self) -> bool {
        self.sent
    }

    /// The keys this connection authenticated as, oldest first.
    pub fn authenticated(&self) -> &[PublicKey] {
        &self.authenticated
    }

    /// Checks an `AUTH` event against this connection's challenge, for the relay at
    /// `public_host`, and remembers its key if it is valid.
    pub fn authenticate(&mut self, event: &Event, public_host: &str) -> AuthOutcome {
        match verify_auth(event, &self.challenge, public_host, Timestamp::now().as_secs()) {
            Ok(pk) => {
                if !self.authenticated.contains(&pk) {
                    if self.authenticated.len() >= MAX_AUTHENTICATED {
                        return AuthOutcome::Refused(format!(
                            "this connection already authenticated {MAX_AUTHENTICATED} keys; open another connection"
                        ));
                    }
                    self.authenticated.push(pk);
                }
                AuthOutcome::Authenticated(pk)
            }
            Err(e) => AuthOutcome::Refused(e.to_string()),
        }
    }
}

impl Default for ConnectionAuth {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn auth_event(keys: &Keys, challenge: &str) -> Event {
        EventBuilder::new(Kind::Custom(22242), "")
            .tags([
                Tag::parse(["relay", "ws://127.0.0.1:8080/"]).unwrap(),
                Tag::parse(["challenge", challenge]).unwrap(),
            ])
            .finalize(keys)
            .unwrap()
    }

    #[test]
    fn challenges_differ_and_several_keys_authenticate() {
        let mut a = ConnectionAuth::new();
        assert_ne!(a.challenge(), ConnectionAuth::new().challenge());
        assert_eq!(a.challenge().len(), 32);
        assert!(!a.challenge_sent());
        assert_eq!(a.challenge_to_send().map(str::to_string), Some(a.challenge().to_string()));
        assert!(a.challenge_sent() && a.challenge_to_send().is_none(), "sent once per connection");
        let (k1, k2) = (Keys::generate(), Keys::generate());
        let c = a.challenge().to_string();
        assert_eq!(a.authenticate(&auth_event(&k1, &c), "127.0.0.1:8080"), AuthOutcome::Authenticated(k1.public_key()));
        assert_eq!(a.authenticate(&auth_event(&k2, &c), "127.0.0.1:8080"), AuthOutcome::Authenticated(k2.public_key()));
        assert_eq!(a.authenticate(&auth_event(&k1, &c), "127.0.0.1:8080"), AuthOutcome::Authenticated(k1.public_key()));
        assert_eq!(a.authenticated(), &[k1.public_key(), k2.public_key()]);
        assert!(matches!(a.authenticate(&auth_event(&k1, "other"), "127.0.0.1:8080"), AuthOutcome::Refused(_)));
        assert!(matches!(a.authenticate(&auth_event(&k1, &c), "127.0.0.1:9090"), AuthOutcome::Refused(_)));
    }
}
