//! Ids of events that expired without their git data, remembered for a while (default 24 h) so
//! background sync does not fetch and re-hold them in a loop. Bounded: when full, the oldest
//! record is forgotten (this is a hint, losing one costs at most one extra sync).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use nostr::prelude::EventId;

#[derive(Debug, Default, Clone)]
pub(crate) struct ExpiredEvents {
    at: HashMap<EventId, SystemTime>,
    order: BTreeSet<(SystemTime, EventId)>,
}

impl ExpiredEvents {
    pub fn record(&mut self, id: EventId, when: SystemTime, cap: usize) {
        if let Some(old) = self.at.insert(id, when) {
            self.order.remove(&(old, id));
        }
        self.order.insert((when, id));
        while self.at.len() > cap {
            match self.order.pop_first() {
                Some((_, oldest)) => {
                    self.at.remove(&oldest);
                }
                None => break,
            }
        }
    }

    /// Whether `id` expired less than `ttl` before `now`.
    pub fn contains(&self, id: &EventId, now: SystemTime, ttl: Duration) -> bool {
        self.at
            .get(id)
            .is_some_and(|when| now.duration_since(*when).unwrap_or(Duration::ZERO) < ttl)
    }

    /// Forgets records older than `ttl`; cost proportional to what is forgotten.
    pub fn prune(&mut self, now: SystemTime, ttl: Duration) {
        while let Some((when, id)) = self.order.first().copied() {
            if now.duration_since(when).unwrap_or(Duration::ZERO) < ttl {
                break;
            }
            self.order.pop_first();
            self.at.remove(&id);
        }
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// The `limit` most recent records, newest first.
    pub fn newest(&self, limit: usize) -> impl Iterator<Item = (EventId, SystemTime)> + '_ {
        self.order
            .iter()
            .rev()
            .take(limit)
            .map(|(when, id)| (*id, *when))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&EventId, &SystemTime)> {
        self.at.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    #[test]
    fn remembers_for_ttl_then_forgets() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ttl = Duration::from_secs(100);
        let mut e = ExpiredEvents::default();
        e.record(id(1), t0, 10);
        assert!(e.contains(&id(1), t0 + Duration::from_secs(99), ttl));
        assert!(!e.contains(&id(1), t0 + Duration::from_secs(100), ttl));
        assert!(!e.contains(&id(2), t0, ttl));
        e.prune(t0 + Duration::from_secs(50), ttl);
        assert_eq!(e.len(), 1);
        e.prune(t0 + Duration::from_secs(100), ttl);
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn cap_forgets_oldest_first() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ttl = Duration::from_secs(1000);
        let mut e = ExpiredEvents::default();
        for n in 0..5u8 {
            e.record(id(n), t0 + Duration::from_secs(n as u64), 3);
        }
        assert_eq!(e.len(), 3);
        assert!(!e.contains(&id(1), t0, ttl));
        assert!(e.contains(&id(2), t0, ttl));
        assert!(e.contains(&id(4), t0, ttl));
        let newest: Vec<EventId> = e.newest(2).map(|(id, _)| id).collect();
        assert_eq!(newest, vec![id(4), id(3)]);
        // Re-recording moves the record, it does not duplicate it.
        e.record(id(2), t0 + Duration::from_secs(10), 3);
        assert_eq!(e.len(), 3);
    }
}
