//! Schnorr signature checks of events (NIP-01) with the authors' parsed keys remembered.
//!
//! Checking a signature first parses the author's x-only key, which costs a field square root
//! (~5% of the relay's CPU while ingesting); events come from few authors at a time, so the
//! parsed keys are kept in a bounded map (emptied when full). The check itself is the one
//! nostr does (`Event::verify_signature`), on the same secp256k1.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use nostr::prelude::{Event, PublicKey};
use secp256k1::{schnorr, Secp256k1, VerifyOnly, XOnlyPublicKey};

/// Most parsed keys remembered.
pub const MAX_KEYS: usize = 4096;

static SECP: LazyLock<Secp256k1<VerifyOnly>> = LazyLock::new(Secp256k1::verification_only);
static KEYS: LazyLock<Mutex<HashMap<PublicKey, XOnlyPublicKey>>> = LazyLock::new(Mutex::default);

/// The parsed x-only key of `author` (`None`: not a point on the curve).
fn xonly(author: &PublicKey) -> Option<XOnlyPublicKey> {
    if let Some(key) = KEYS.lock().unwrap_or_else(|e| e.into_inner()).get(author) {
        return Some(*key);
    }
    let key = XOnlyPublicKey::from_byte_array(author.as_bytes()).ok()?;
    let mut keys = KEYS.lock().unwrap_or_else(|e| e.into_inner());
    if keys.len() >= MAX_KEYS {
        keys.clear();
    }
    keys.insert(*author, key);
    Some(key)
}

/// Is `event.sig` its author's signature of its id? (The id itself is checked apart.)
pub fn valid(event: &Event) -> bool {
    let Some(key) = xonly(&event.pubkey) else { return false };
    let sig = schnorr::Signature::from_byte_array(*event.sig.as_bytes());
    SECP.verify_schnorr(&sig, event.id.as_bytes(), &key).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn note(keys: &Keys, content: &str) -> Event {
        EventBuilder::new(Kind::TextNote, content).finalize(keys).unwrap()
    }

    #[test]
    fn agrees_with_nostr_on_good_and_bad_signatures() {
        let (alice, bob) = (Keys::generate(), Keys::generate());
        let a1 = note(&alice, "one");
        let a2 = note(&alice, "two");
        let b1 = note(&bob, "three");
        for _ in 0..2 {
            // Twice: the second time with the keys remembered.
            for e in [&a1, &a2, &b1] {
                assert!(valid(e) && e.verify_signature());
            }
        }
        // Another event's signature, another author's key, a flipped bit: all refused.
        let swapped_sig = Event::new(a1.id, a1.pubkey, a1.created_at, a1.kind, a1.tags.clone(), a1.content.clone(), a2.sig);
        let other_author = Event::new(a1.id, bob.public_key(), a1.created_at, a1.kind, a1.tags.clone(), a1.content.clone(), a1.sig);
        let mut bytes = *a1.sig.as_bytes();
        bytes[7] ^= 1;
        let flipped = Event::new(a1.id, a1.pubkey, a1.created_at, a1.kind, a1.tags.clone(), a1.content.clone(), Signature::from_byte_array(bytes));
        for e in [&swapped_sig, &other_author, &flipped] {
            assert!(!valid(e) && !e.verify_signature());
        }
        // A key that is not on the curve (x = 5 has no point) is refused, not remembered.
        let mut off = [0u8; 32];
        off[31] = 5;
        if let Ok(pk) = PublicKey::from_slice(&off) {
            let e = Event::new(a1.id, pk, a1.created_at, a1.kind, a1.tags.clone(), a1.content.clone(), a1.sig);
            assert!(!valid(&e) && !e.verify_signature());
        }
    }
}
