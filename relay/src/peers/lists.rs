//! Sync+'s cache of participants' relay lists (GRASP-03, docs/protocol.md#grasp-03): per
//! participant the newest NIP-65 list (kind 10002: its write relays) and the newest user grasp
//! list (kind 10317: its GRASP servers) seen, each with its `created_at` and id (the NIP-01
//! newer-event order, [`grasp_state::nostr::recency::Recency`], decides which is kept), and when the
//! participant's lists were last looked up.
//!
//! Kept in memory and in `<data>/sync-plus.json` (with where the last pass stopped,
//! [`PassPosition`]), written with the project's atomic write; a missing or unreadable file
//! starts empty (the cost is looking the lists up again). Only what a pass uses is kept: at most
//! [`grasp_state::nostr::outbox::MAX_LIST_RELAYS`] URLs per list, and only the current participants
//! ([`ListCache::retain`]). Kind 10002 lists are never stored as events here (the acceptance
//! policy refuses them); kind 10317 lists stored through the normal door are offered to the
//! cache by each pass.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use grasp_state::nostr::outbox::{grasp_servers, write_relays, PassPosition, KIND_RELAY_LIST};
use grasp_state::nostr::recency::Recency;
use nostr::prelude::{Event, EventId, PublicKey, Timestamp};
use serde::{Deserialize, Serialize};

/// One list as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedList {
    pub created_at: u64,
    pub id: String,
    pub relays: Vec<String>,
}

impl CachedList {
    fn recency(&self) -> Option<Recency> {
        Some(Recency::new(Timestamp::from(self.created_at), EventId::from_hex(&self.id).ok()?))
    }
}

/// What is known of one participant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// Kind 10002: write relays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<CachedList>,
    /// Kind 10317: GRASP servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grasp: Option<CachedList>,
    /// Last look-up (seconds since the epoch), found or not.
    #[serde(default)]
    pub looked_up: u64,
}

/// The cache and the pass position, as persisted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCache {
    #[serde(default)]
    pub version: u32,
    /// By hex public key.
    #[serde(default)]
    pub people: BTreeMap<String, Person>,
    #[serde(default)]
    pub position: PassPosition,
}

impl ListCache {
    /// Reads the file; missing or unreadable, an empty cache (with a warning when unreadable).
    pub fn load(path: &Path) -> ListCache {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "Sync+ list cache unreadable; looking the lists up again");
                ListCache::default()
            }),
            Err(_) => ListCache::default(),
        }
    }

    /// Writes the file atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec(&ListCache { version: 1, ..self.clone() }).map_err(std::io::Error::other)?;
        grasp_state::contract::atomic_file::write_atomic(path, &json, None)
    }

    /// Takes `event` (signature already verified) if it is a kind 10002 or 10317 list newer
    /// than the one kept for its author; whether it was taken.
    pub fn offer(&mut self, event: &Event) -> bool {
        let (relays, kind) = match event.kind.as_u16() {
            KIND_RELAY_LIST => (write_relays(event), KIND_RELAY_LIST),
            grasp_state::nostr::nip34::KIND_USER_GRASP_LIST => (grasp_servers(event), grasp_state::nostr::nip34::KIND_USER_GRASP_LIST),
            _ => return false,
        };
        let person = self.people.entry(event.pubkey.to_hex()).or_default();
        let slot = if kind == KIND_RELAY_LIST { &mut person.outbox } else { &mut person.grasp };
        if slot.as_ref().and_then(CachedList::recency).is_some_and(|kept| kept >= Recency::of(event)) {
            return false;
        }
        *slot = Some(CachedList { created_at: event.created_at.as_secs(), id: event.id.to_hex(), relays });
        true
    }

    /// `pk`'s relays: its write relays, then its GRASP servers (raw, unparsed).
    pub fn relays_of(&self, pk: &PublicKey) -> Vec<String> {
        let Some(person) = self.people.get(&pk.to_hex()) else { return Vec::new() };
        person.outbox.iter().chain(person.grasp.iter()).flat_map(|l| l.relays.iter().cloned()).collect()
    }

    /// Whether `pk`'s lists are to be looked up at `now` (never looked up, or `refresh` ago).
    pub fn due(&self, pk: &PublicKey, now: u64, refresh: u64) -> bool {
        self.people.get(&pk.to_hex()).is_none_or(|p| now.saturating_sub(p.looked_up) >= refresh)
    }

    pub fn looked_up(&mut self, pk: &PublicKey, now: u64) {
        self.people.entry(pk.to_hex()).or_default().looked_up = now;
    }

    /// Forgets everyone who is no longer a participant.
    pub fn retain(&mut self, participants: &HashSet<PublicKey>) {
        let keep: HashSet<String> = participants.iter().map(PublicKey::to_hex).collect();
        self.people.retain(|pk, _| keep.contains(pk));
    }

    /// Lists kept (each participant's 10002 and 10317 count one each).
    pub fn lists(&self) -> usize {
        self.people.values().map(|p| p.outbox.is_some() as usize + p.grasp.is_some() as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag};

    fn list(keys: &Keys, kind: u16, relay: &str, at: u64) -> Event {
        let name = if kind == KIND_RELAY_LIST { "r" } else { "g" };
        EventBuilder::new(Kind::Custom(kind), "").tag(Tag::parse([name, relay]).unwrap()).custom_created_at(Timestamp::from(at)).finalize(keys).unwrap()
    }

    #[test]
    fn the_newer_list_wins_in_the_nip01_order_and_the_cache_round_trips() {
        let keys = Keys::generate();
        let mut cache = ListCache::default();
        assert!(cache.offer(&list(&keys, KIND_RELAY_LIST, "wss://old", 10)));
        assert!(cache.offer(&list(&keys, 10317, "wss://grasp", 10)));
        assert!(!cache.offer(&list(&keys, KIND_RELAY_LIST, "wss://older", 5)));
        assert!(cache.offer(&list(&keys, KIND_RELAY_LIST, "wss://new", 20)));
        // Same second: the lower id wins, whichever arrives first.
        let (a, b) = (list(&keys, KIND_RELAY_LIST, "wss://x", 30), list(&keys, KIND_RELAY_LIST, "wss://y", 30));
        let (low, high) = if a.id < b.id { (a, b) } else { (b, a) };
        assert!(cache.offer(&high));
        assert!(cache.offer(&low));
        assert!(!cache.offer(&high));
        let low_relay = low.tags.iter().next().unwrap().as_slice()[1].clone();
        assert_eq!(cache.relays_of(&keys.public_key()), [low_relay, "wss://grasp".to_string()]);
        assert!(!cache.offer(&EventBuilder::new(Kind::Custom(1), "").finalize(&keys).unwrap()));
        assert_eq!(cache.lists(), 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sync-plus.json");
        assert_eq!(ListCache::load(&path), ListCache::default());
        cache.looked_up(&keys.public_key(), 100);
        cache.save(&path).unwrap();
        let back = ListCache::load(&path);
        assert_eq!(back.people, cache.people);
        assert!(!back.due(&keys.public_key(), 150, 60) && back.due(&keys.public_key(), 160, 60));
        assert!(back.due(&Keys::generate().public_key(), 0, 60));
        std::fs::write(&path, "junk").unwrap();
        assert_eq!(ListCache::load(&path), ListCache::default());
        let mut pruned = back;
        pruned.retain(&HashSet::new());
        assert_eq!(pruned.lists(), 0);
    }
}
