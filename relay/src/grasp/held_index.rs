//! The held states that may authorise pushes to one repository, parsed once and indexed by the
//! refs they declare (`grasp_state::git::push_index`), for the pre-receive decision.
//!
//! With thousands of held states for one identifier, parsing each event and comparing the push
//! with each state on every push costs tens of milliseconds. The relay keeps, per (owner,
//! identifier), the parsed states and their index, and reuses them while the purgatory returns
//! exactly the same events (the check is a comparison of their ids, in the purgatory's order).
//! When they change, only new events are parsed. The cache is bounded: at most
//! [`MAX_REPOSITORIES`] repositories, the least recently used dropped first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use grasp_state::authority::maintainers::MaintainerSet;
use grasp_state::nostr::nip34::RepoState;
use grasp_state::git::push_index::HeldStateIndex;
use nostr::prelude::{Event, EventId, PublicKey};

use crate::grasp::Grasp;

/// Most repositories whose held-state index is kept.
pub const MAX_REPOSITORIES: usize = 64;

struct Entry {
    ids: Vec<EventId>,
    parsed: HashMap<EventId, Arc<RepoState>>,
    index: Arc<HeldStateIndex>,
    used: u64,
}

/// A repository: (owner, identifier).
type RepoKey = (PublicKey, String);

/// Held-state indexes by repository (see the module doc), and the use counter.
#[derive(Default)]
pub struct HeldIndexes {
    inner: Mutex<(HashMap<RepoKey, Entry>, u64)>,
}

impl HeldIndexes {
    /// The index of `events`: the held state events of `owner`'s repository `identifier` that
    /// are authored in its maintainer set, as the purgatory returns them. Events that are not
    /// valid state events are left out (as `Grasp::held_states` does).
    pub fn index(&self, owner: &PublicKey, identifier: &str, events: &[Arc<Event>]) -> Arc<HeldStateIndex> {
        let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
        let key = (*owner, identifier.to_owned());
        let previous = {
            let mut guard = self.inner.lock().unwrap();
            let (entries, clock) = &mut *guard;
            *clock += 1;
            let now = *clock;
            match entries.get_mut(&key) {
                Some(e) if e.ids == ids => {
                    e.used = now;
                    return e.index.clone();
                }
                _ => entries.remove(&key),
            }
        };
        // Parse outside the lock; states parsed before are reused.
        let mut old = previous.map(|e| e.parsed).unwrap_or_default();
        let parsed: HashMap<EventId, Arc<RepoState>> = events
            .iter()
            .filter_map(|ev| {
                let state = match old.remove(&ev.id) {
                    Some(s) => s,
                    None => Arc::new(RepoState::from_event(ev).ok()?),
                };
                Some((ev.id, state))
            })
            .collect();
        let index = Arc::new(HeldStateIndex::new(parsed.values().cloned()));
        let mut guard = self.inner.lock().unwrap();
        let (entries, clock) = &mut *guard;
        if entries.len() >= MAX_REPOSITORIES {
            if let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, Entry { ids, parsed, index: index.clone(), used: *clock });
        index
    }
}

impl Grasp {
    /// The held states of `owner`'s repository `identifier` authored in `set`, indexed by the
    /// refs they declare (reused while the purgatory holds the same ones).
    pub fn held_index(&self, owner: &PublicKey, identifier: &str, set: &MaintainerSet) -> Arc<HeldStateIndex> {
        self.held_indexes.index(owner, identifier, &self.purgatory.state_events(identifier, set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn state(keys: &Keys, oid: &str, n: u64) -> Arc<Event> {
        let tags = vec![Tag::identifier("r"), Tag::parse(["refs/heads/main", oid]).unwrap()];
        Arc::new(
            EventBuilder::new(Kind::from(30618u16), n.to_string())
                .tags(tags)
                .custom_created_at(Timestamp::from(1_700_000_000 + n))
                .finalize(keys)
                .unwrap(),
        )
    }

    #[test]
    fn reused_while_the_events_are_the_same_rebuilt_when_they_change() {
        let keys = Keys::generate();
        let owner = keys.public_key();
        let cache = HeldIndexes::default();
        let a = state(&keys, &"a".repeat(40), 1);
        let b = state(&keys, &"b".repeat(40), 2);
        let first = cache.index(&owner, "r", std::slice::from_ref(&a));
        assert_eq!(first.len(), 1);
        assert!(Arc::ptr_eq(&first, &cache.index(&owner, "r", std::slice::from_ref(&a))), "same events: same index");
        let second = cache.index(&owner, "r", &[a.clone(), b.clone()]);
        assert_eq!(second.len(), 2);
        assert!(!Arc::ptr_eq(&first, &second));
        // Another repository with the same identifier has its own entry.
        let other = Keys::generate().public_key();
        assert_eq!(cache.index(&other, "r", &[]).len(), 0);
        assert_eq!(cache.index(&owner, "r", &[b]).len(), 1);
    }

    #[test]
    fn bounded() {
        let cache = HeldIndexes::default();
        for _ in 0..MAX_REPOSITORIES + 10 {
            cache.index(&Keys::generate().public_key(), "r", &[]);
        }
        assert!(cache.inner.lock().unwrap().0.len() <= MAX_REPOSITORIES);
    }
}
