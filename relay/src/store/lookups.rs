//! Bounded caches of the store lookups the acceptance policy repeats for every event (used by
//! [`crate::store::Store`]): whether an author has any stored deletion request (kind 5),
//! and the stored announcements (kind 30617) of an identifier. Events about one repository
//! arrive in bursts, and each such lookup is an LMDB read on the blocking pool.
//!
//! Every answer is stamped with the store's *write generation* read before the lookup ran; the
//! store bumps the generation after every write that can change an answer (a deletion request
//! or an announcement saved, events removed). An answer stamped with an older generation is a
//! miss, so a cached answer is never staler than a lookup that ran concurrently with the write.
//! Each cache holds at most [`MAX_ENTRIES`] answers of at most [`MAX_BYTES`] in all (the
//! caller weighs each answer); a full cache is emptied and refilled, an answer found stale is
//! dropped at once (the generation only grows: it can never be valid again), and an answer
//! heavier than the whole budget is not kept.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nostr::prelude::{Event, PublicKey};

/// Most entries of each cache.
pub const MAX_ENTRIES: usize = 4096;

/// Most bytes (as weighed by the caller) of each cache: the announcements of 500 identifiers of
/// 100 announcements each held about 50 MiB, most of it stale, before answers had a weight.
pub const MAX_BYTES: usize = 8 << 20;

/// The store's write generation: bumped after each write that can change a cached answer.
#[derive(Debug, Default)]
pub struct Generation(AtomicU64);

impl Generation {
    /// The current generation (read it before a lookup whose answer will be cached).
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Marks every cached answer stale (after the write is committed).
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// Answers by key, each valid for the generation it was looked up at.
#[derive(Debug)]
pub struct Stamped<K, V> {
    map: Mutex<Answers<K, V>>,
}

/// Answers by key: (generation, answer, weight), and their total weight.
#[derive(Debug)]
struct Answers<K, V> {
    by_key: HashMap<K, (u64, V, usize)>,
    bytes: usize,
}

impl<K: Hash + Eq, V> Answers<K, V> {
    /// Drops the answer for `key`, and its weight.
    fn forget<Q: Hash + Eq + ?Sized>(&mut self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
    {
        if let Some((_, _, weight)) = self.by_key.remove(key) {
            self.bytes -= weight;
        }
    }
}

impl<K, V> Default for Stamped<K, V> {
    fn default() -> Self {
        Stamped { map: Mutex::new(Answers { by_key: HashMap::new(), bytes: 0 }) }
    }
}

impl<K: Hash + Eq, V: Clone> Stamped<K, V> {
    /// The answer for `key` if it was looked up at generation `now`.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q, now: u64) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
    {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.by_key.get(key) {
            Some((at, v, _)) if *at == now => Some(v.clone()),
            Some(_) => {
                map.forget(key);
                None
            }
            None => None,
        }
    }

    /// Remembers `value`, looked up at generation `at` (read before the lookup).
    pub fn put(&self, key: K, at: u64, value: V) {
        self.put_weighed(key, at, value, 0);
    }

    /// Remembers `value` of about `bytes`, looked up at generation `at`.
    pub fn put_weighed(&self, key: K, at: u64, value: V, bytes: usize) {
        if bytes > MAX_BYTES {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.forget(&key);
        if map.by_key.len() >= MAX_ENTRIES || map.bytes + bytes > MAX_BYTES {
            map.by_key.clear();
            map.bytes = 0;
        }
        map.bytes += bytes;
        map.by_key.insert(key, (at, value, bytes));
    }
}

/// The caches the store keeps.
#[derive(Debug, Default)]
pub struct Lookups {
    pub generation: Generation,
    /// Has this author any stored deletion request?
    pub has_deletions: Stamped<PublicKey, bool>,
    /// Stored announcements by identifier.
    pub announcements: Stamped<String, Arc<Vec<Event>>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_valid_for_their_generation_only() {
        let l = Lookups::default();
        let at = l.generation.current();
        l.announcements.put("repo".into(), at, Arc::new(Vec::new()));
        assert!(l.announcements.get("repo", l.generation.current()).is_some());
        l.generation.bump();
        assert!(l.announcements.get("repo", l.generation.current()).is_none());
        // An answer looked up before a write and stored after it stays a miss.
        let stale = at;
        l.announcements.put("repo".into(), stale, Arc::new(Vec::new()));
        assert!(l.announcements.get("repo", l.generation.current()).is_none());
    }

    #[test]
    fn a_full_cache_starts_over() {
        let s: Stamped<usize, ()> = Stamped::default();
        for i in 0..MAX_ENTRIES {
            s.put(i, 0, ());
        }
        assert!(s.get(&0, 0).is_some());
        s.put(MAX_ENTRIES, 0, ());
        assert!(s.get(&0, 0).is_none() && s.get(&MAX_ENTRIES, 0).is_some());
        assert!(s.map.lock().unwrap().by_key.len() == 1);
    }

    #[test]
    fn answers_are_kept_within_the_byte_budget_and_stale_ones_go_at_once() {
        let s: Stamped<usize, ()> = Stamped::default();
        let each = MAX_BYTES / 4;
        for i in 0..4 {
            s.put_weighed(i, 0, (), each);
        }
        assert!(s.get(&0, 0).is_some() && s.map.lock().unwrap().bytes == MAX_BYTES);
        s.put_weighed(4, 0, (), each);
        assert!(s.get(&0, 0).is_none() && s.get(&4, 0).is_some());
        assert_eq!(s.map.lock().unwrap().bytes, each);
        // Heavier than the whole budget: not kept, nothing else lost.
        s.put_weighed(5, 0, (), MAX_BYTES + 1);
        assert!(s.get(&5, 0).is_none() && s.get(&4, 0).is_some());
        // Stale: dropped when found.
        assert!(s.get(&4, 1).is_none());
        let map = s.map.lock().unwrap();
        assert!(map.by_key.is_empty() && map.bytes == 0);
    }
}
