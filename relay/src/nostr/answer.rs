//! A REQ's stored events on their way out: streamed, within a byte budget.
//!
//! The store answers a REQ with the ids of its events in NIP-01 order ([`Store::answer_ids`],
//! about 40 bytes an id); the connection then reads the events one at a time and writes them
//! in chunks of about [`CHUNK_BYTES`], flushing each chunk before the next is read. A client
//! that reads slowly thus holds one chunk (plus one event and the WebSocket's write buffer),
//! never its whole answer, and is dropped by the write deadline if it stops reading
//! (docs/security.md). At most `--max-answer-bytes` of `EVENT` messages are sent per answer:
//! when the next event would go past the budget the answer stops there and `EOSE` follows, as
//! if the REQ had asked for fewer events (clients page back with `until`).
//!
//! [`Store::answer_ids`]: crate::store::Store::answer_ids

use std::collections::HashSet;

use nostr::prelude::*;


/// About this many bytes of `EVENT` messages are queued before they are written and flushed.
pub const CHUNK_BYTES: usize = 128 << 10;

/// The stored part of one REQ's answer, being sent.
#[derive(Debug)]
pub struct StoredAnswer {
    /// The subscription, and its filters (registered once `EOSE` is sent).
    pub id: SubscriptionId,
    pub filters: Vec<Filter>,
    /// The ids still to read and send, in order.
    ids: std::vec::IntoIter<EventId>,
    /// The events sent: a live event among them is not sent again after `EOSE`.
    sent: HashSet<EventId>,
    budget: Budget,
}

impl StoredAnswer {
    pub fn new(id: SubscriptionId, filters: Vec<Filter>, ids: Vec<EventId>, budget: usize) -> Self {
        StoredAnswer { id, filters, ids: ids.into_iter(), sent: HashSet::new(), budget: Budget::new(budget) }
    }

    /// The next event to read, unless the answer is complete (or cut by the budget).
    pub fn next_id(&mut self) -> Option<EventId> {
        if self.budget.exhausted {
            return None;
        }
        self.ids.next()
    }

    /// Takes `message` (event `id`'s `EVENT` message) into the answer if it fits the budget;
    /// otherwise the answer ends here and `None` is returned.
    pub fn take(&mut self, id: EventId, message: String) -> Option<String> {
        if !self.budget.take(message.len()) {
            return None;
        }
        self.sent.insert(id);
        Some(message)
    }

    /// The events sent so far.
    pub fn sent(&self) -> &HashSet<EventId> {
        &self.sent
    }

    /// Was the answer cut by the budget? (The ids not sent then.)
    pub fn cut(&self) -> Option<usize> {
        self.budget.exhausted.then(|| self.ids.len() + 1)
    }

    /// The bytes of `EVENT` messages sent so far.
    pub fn bytes(&self) -> usize {
        self.budget.used
    }
}

/// Bytes an answer may still send; once a message did not fit, nothing more does (the answer
/// stays a prefix of the ordered events).
#[derive(Debug)]
struct Budget {
    limit: usize,
    used: usize,
    exhausted: bool,
}

impl Budget {
    fn new(limit: usize) -> Self {
        Budget { limit, used: 0, exhausted: false }
    }

    fn take(&mut self, len: usize) -> bool {
        if self.exhausted || self.used.saturating_add(len) > self.limit {
            self.exhausted = true;
            return false;
        }
        self.used += len;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    #[test]
    fn sends_the_prefix_that_fits_then_nothing() {
        let ids: Vec<EventId> = (1..=5).map(id).collect();
        let mut a = StoredAnswer::new(SubscriptionId::new("s"), vec![Filter::new()], ids, 25);
        let mut sent = Vec::new();
        // 10 + 10 fit, the third (10) would pass 25: the answer ends, a smaller fourth is not sent.
        for len in [10, 10, 10, 1] {
            let Some(next) = a.next_id() else { break };
            match a.take(next, "x".repeat(len)) {
                Some(m) => sent.push((next, m.len())),
                None => break,
            }
        }
        assert_eq!(sent, vec![(id(1), 10), (id(2), 10)]);
        assert_eq!(a.next_id(), None);
        assert_eq!(a.cut(), Some(3), "the third event and the two after it were not sent");
        assert_eq!(a.bytes(), 20);
        assert!(a.sent().contains(&id(2)) && !a.sent().contains(&id(3)));
    }

    #[test]
    fn an_answer_within_the_budget_is_whole() {
        let ids: Vec<EventId> = (1..=3).map(id).collect();
        let mut a = StoredAnswer::new(SubscriptionId::new("s"), vec![Filter::new()], ids, 30);
        let mut n = 0;
        while let Some(next) = a.next_id() {
            assert!(a.take(next, "x".repeat(10)).is_some());
            n += 1;
        }
        assert_eq!((n, a.cut(), a.bytes()), (3, None, 30));
    }
}
