//! The deadline set: every armed expiry, ordered by time, so a sweep pops only what is due and
//! never scans the entries. The purgatory keeps it in step with the entries on every mutation
//! (each entry is armed here exactly once, or deferred, or pending placeholder cleanup).

use std::collections::BTreeSet;
use std::time::Instant;

use super::entries::EntryKey;

#[derive(Debug, Default, Clone)]
pub(crate) struct Deadlines {
    set: BTreeSet<(Instant, EntryKey)>,
}

impl Deadlines {
    pub fn arm(&mut self, at: Instant, key: EntryKey) {
        self.set.insert((at, key));
    }

    /// Removes the deadline `at` of `key`; returns whether it was armed.
    pub fn disarm(&mut self, at: Instant, key: &EntryKey) -> bool {
        // BTreeSet<(Instant, EntryKey)> cannot be probed with a borrowed key; one clone.
        self.set.remove(&(at, key.clone()))
    }

    /// Takes the earliest deadline if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, EntryKey)> {
        match self.set.first() {
            Some((at, _)) if *at <= now => self.set.pop_first(),
            _ => None,
        }
    }

    /// The keys whose deadline is due at `now`, earliest first (nothing is popped).
    pub fn due(&self, now: Instant) -> impl Iterator<Item = &EntryKey> {
        self.set.iter().take_while(move |(at, _)| *at <= now).map(|(_, key)| key)
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        self.set.first().map(|(at, _)| *at)
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    #[cfg(test)]
    pub fn contains(&self, at: Instant, key: &EntryKey) -> bool {
        self.set.contains(&(at, key.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::EventId;
    use std::time::Duration;

    fn key(n: u8) -> EntryKey {
        EntryKey::Pr {
            event_id: EventId::from_byte_array([n; 32]),
        }
    }

    #[test]
    fn pops_only_due_deadlines_in_order() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        d.arm(t0 + Duration::from_secs(20), key(2));
        d.arm(t0 + Duration::from_secs(10), key(1));
        d.arm(t0 + Duration::from_secs(30), key(3));
        assert_eq!(d.pop_due(t0), None);
        assert_eq!(d.next(), Some(t0 + Duration::from_secs(10)));
        let now = t0 + Duration::from_secs(20);
        assert_eq!(d.pop_due(now).map(|(_, k)| k), Some(key(1)));
        assert_eq!(d.pop_due(now).map(|(_, k)| k), Some(key(2)));
        assert_eq!(d.pop_due(now), None);
        assert_eq!(d.len(), 1);
        assert!(d.disarm(t0 + Duration::from_secs(30), &key(3)));
        assert!(!d.disarm(t0 + Duration::from_secs(30), &key(3)));
        assert_eq!(d.len(), 0);
    }
}
