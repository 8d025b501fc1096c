//! The events answered `OK` but not yet committed by the store (in the log of acknowledged
//! events, `crate::store::ack_log`): every read of the store sees them, so a client that got its
//! `OK` finds its event at once. Only regular events are acknowledged before their commit
//! (`crate::store::group_commit`): none replaces or deletes another, so a read is the store's
//! answer plus the matching events here. Bounded by [`grasp_state::nostr::group_commit::Linger`]'s
//! `max_acknowledged` events and `max_acknowledged_bytes`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use nostr::prelude::{Event, EventId, Filter, MatchEventOptions, PublicKey, SingleLetterTag, Timestamp};

/// The acknowledged, uncommitted events, by id, and their weight.
#[derive(Debug, Default)]
pub struct Acknowledged {
    inner: Mutex<Inner>,
}

/// The events and the indexes a read picks its candidates from (every filter field but kinds,
/// search, since and until narrows them; a filter with none of ids, authors and tags looks at
/// every event).
#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<EventId, Arc<Event>>,
    by_author: HashMap<PublicKey, HashSet<EventId>>,
    by_tag: HashMap<(SingleLetterTag, String), HashSet<EventId>>,
    bytes: usize,
}

/// The indexed single-letter tags of `event` (NIP-01: a tag's first value).
fn tag_keys(event: &Event) -> impl Iterator<Item = (SingleLetterTag, String)> + '_ {
    event.tags.iter().filter_map(|tag| Some((tag.single_letter_tag()?, tag.content()?.to_string())))
}

/// About the bytes an event takes in the overlay (its JSON size is close).
pub fn weight(event: &Event) -> usize {
    crate::store::event_weight(event)
}

impl Inner {
    /// The ids a read of `filter` must look at: `None` for every event.
    fn candidates(&self, filter: &Filter) -> Option<HashSet<EventId>> {
        // An empty set of ids or authors matches every event (NIP-01 as the nostr crate reads it).
        if let Some(ids) = filter.ids.as_ref().filter(|ids| !ids.is_empty()) {
            return Some(ids.iter().filter(|id| self.by_id.contains_key(id)).copied().collect());
        }
        if let Some(authors) = filter.authors.as_ref().filter(|authors| !authors.is_empty()) {
            return Some(authors.iter().filter_map(|a| self.by_author.get(a)).flatten().copied().collect());
        }
        let (letter, values) = filter.generic_tags.iter().next()?;
        Some(values.iter().filter_map(|v| self.by_tag.get(&(*letter, v.clone()))).flatten().copied().collect())
    }
}

impl Acknowledged {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many events, and their weight.
    pub fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.by_id.len(), inner.bytes)
    }

    pub fn contains(&self, id: &EventId) -> bool {
        self.lock().by_id.contains_key(id)
    }

    pub fn get(&self, id: &EventId) -> Option<Arc<Event>> {
        self.lock().by_id.get(id).cloned()
    }

    /// Adds `event`; false if it was there already.
    pub fn insert(&self, event: Arc<Event>) -> bool {
        let mut inner = self.lock();
        if inner.by_id.contains_key(&event.id) {
            return false;
        }
        inner.bytes += weight(&event);
        inner.by_author.entry(event.pubkey).or_default().insert(event.id);
        for key in tag_keys(&event) {
            inner.by_tag.entry(key).or_default().insert(event.id);
        }
        inner.by_id.insert(event.id, event);
        true
    }

    /// Removes events the store now holds (or refused).
    pub fn remove(&self, ids: impl IntoIterator<Item = EventId>) {
        let mut inner = self.lock();
        for id in ids {
            let Some(event) = inner.by_id.remove(&id) else { continue };
            inner.bytes -= weight(&event);
            if let Some(set) = inner.by_author.get_mut(&event.pubkey) {
                set.remove(&id);
                if set.is_empty() {
                    inner.by_author.remove(&event.pubkey);
                }
            }
            for key in tag_keys(&event) {
                if let Some(set) = inner.by_tag.get_mut(&key) {
                    set.remove(&id);
                    if set.is_empty() {
                        inner.by_tag.remove(&key);
                    }
                }
            }
        }
    }

    /// The events matching `filter` (NIP-40 expired ones left out, as the store does), in no
    /// particular order.
    pub fn matching(&self, filter: &Filter) -> Vec<Arc<Event>> {
        let now = Timestamp::now();
        let inner = self.lock();
        if inner.by_id.is_empty() {
            return Vec::new();
        }
        let keep = |e: &&Arc<Event>| !e.is_expired_at(now) && filter.match_event(e, MatchEventOptions::default());
        match inner.candidates(filter) {
            Some(ids) => ids.iter().filter_map(|id| inner.by_id.get(id)).filter(keep).cloned().collect(),
            None => inner.by_id.values().filter(keep).cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    #[test]
    fn matching_insert_remove_and_weight() {
        let k = Keys::generate();
        let a = Arc::new(EventBuilder::new(Kind::TextNote, "a").finalize(&k).unwrap());
        let b = Arc::new(EventBuilder::new(Kind::Custom(1621), "b").finalize(&k).unwrap());
        let set = Acknowledged::default();
        assert!(set.insert(a.clone()) && set.insert(b.clone()) && !set.insert(a.clone()));
        assert_eq!(set.size(), (2, weight(&a) + weight(&b)));
        assert_eq!(set.matching(&Filter::new().kind(Kind::TextNote)).len(), 1);
        assert_eq!(set.matching(&Filter::new().author(k.public_key())).len(), 2);
        assert!(set.matching(&Filter::new().author(Keys::generate().public_key())).is_empty());
        assert_eq!(set.get(&b.id).as_deref(), Some(b.as_ref()));
        set.remove([a.id, b.id]);
        assert_eq!(set.size(), (0, 0));
        assert!(!set.contains(&a.id));
        let inner = set.lock();
        assert!(inner.by_author.is_empty() && inner.by_tag.is_empty(), "the indexes keep removed events");
    }

    /// Every read answers what a scan of every event with the filter answers, whichever index
    /// it picks its candidates from.
    #[test]
    fn indexed_reads_answer_what_a_scan_answers() {
        let keys: Vec<Keys> = (0..3).map(|_| Keys::generate()).collect();
        let set = Acknowledged::default();
        let mut all = Vec::new();
        for i in 0..30u16 {
            let k = &keys[usize::from(i) % 3];
            let tags = vec![
                Tag::parse(["a", &format!("30617:{}:r{}", k.public_key(), i % 4)]).unwrap(),
                Tag::parse(["t", &format!("t{}", i % 5)]).unwrap(),
            ];
            let kind = if i % 2 == 0 { Kind::Custom(1621) } else { Kind::Custom(1622) };
            let e = Arc::new(EventBuilder::new(kind, i.to_string()).tags(tags).custom_created_at(Timestamp::from(u64::from(i))).finalize(k).unwrap());
            set.insert(e.clone());
            all.push(e);
        }
        let t = |name: &str| SingleLetterTag::from_char(name.chars().next().unwrap()).unwrap();
        let filters = vec![
            Filter::new().id(all[3].id).id(all[7].id).kind(Kind::Custom(1622)),
            Filter::new().author(keys[1].public_key()).since(Timestamp::from(10)),
            Filter::new().custom_tag(t("a"), format!("30617:{}:r1", keys[1].public_key())),
            Filter::new().custom_tag(t("t"), "t2").custom_tag(t("a"), format!("30617:{}:r2", keys[2].public_key())),
            Filter::new().kind(Kind::Custom(1621)).until(Timestamp::from(12)),
            Filter::new(),
            Filter { ids: Some(Default::default()), authors: Some(Default::default()), ..Filter::new() },
        ];
        for f in filters {
            let mut got: Vec<EventId> = set.matching(&f).iter().map(|e| e.id).collect();
            let mut want: Vec<EventId> = all.iter().filter(|e| f.match_event(e, MatchEventOptions::default())).map(|e| e.id).collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "{f:?}");
        }
    }
}
