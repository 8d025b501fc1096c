//! Events one relay is asked for by id (missing parents of waiting events), one subscription
//! at a time (pure over an injected `now`).
//!
//! The manager hands every connected relay the ids due ([`super::waiting::Waiting::due_requests`],
//! at most [`super::waiting::MAX_IDS_PER_FETCH`] at a time); each relay's queue keeps at most
//! [`MAX_QUEUED`] of them (each once) and asks for one chunk at a time, so fetches take at most one
//! of the relay's subscriptions (the live ones leave two free: history and this). A fetch ends
//! at its `EOSE` or `CLOSED`, or is closed by this server after the relay's timeout.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use nostr::prelude::{EventId, SubscriptionId};

/// Ids one relay's queue holds at most; more are dropped (the children asking for them expire
/// or are admitted when the parent arrives by another path).
pub const MAX_QUEUED: usize = 5_000;

/// One relay's fetch queue.
#[derive(Debug)]
pub struct Fetches {
    timeout: Duration,
    queue: VecDeque<EventId>,
    queued: HashSet<EventId>,
    /// The open fetch subscription and when it expires.
    open: Option<(SubscriptionId, Instant)>,
}

impl Fetches {
    /// An open fetch is closed after `timeout` without its end.
    pub fn new(timeout: Duration) -> Self {
        Fetches { timeout, queue: VecDeque::new(), queued: HashSet::new(), open: None }
    }

    /// Queues `ids` (those already queued are skipped); returns how many were dropped because
    /// the queue is full.
    pub fn queue(&mut self, ids: impl IntoIterator<Item = EventId>) -> usize {
        let mut dropped = 0;
        for id in ids {
            if self.queued.contains(&id) {
                continue;
            }
            if self.queue.len() >= MAX_QUEUED {
                dropped += 1;
                continue;
            }
            self.queued.insert(id);
            self.queue.push_back(id);
        }
        dropped
    }

    /// Ids queued and not asked for yet.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// With no fetch open: the next chunk to ask for (at most `per_req` ids), to be opened as
    /// `sub` at `now`.
    pub fn start(&mut self, sub: SubscriptionId, per_req: usize, now: Instant) -> Option<Vec<EventId>> {
        if self.open.is_some() || self.queue.is_empty() {
            return None;
        }
        let n = per_req.clamp(1, self.queue.len());
        let chunk: Vec<EventId> = self.queue.drain(..n).collect();
        for id in &chunk {
            self.queued.remove(id);
        }
        self.open = Some((sub, now + self.timeout));
        Some(chunk)
    }

    /// Subscription `sub` ended (`EOSE`, `CLOSED`): whether it was the open fetch (the next
    /// chunk may start).
    pub fn ended(&mut self, sub: &str) -> bool {
        let ours = self.open.as_ref().is_some_and(|(id, _)| id.as_str() == sub);
        if ours {
            self.open = None;
        }
        ours
    }

    /// When the open fetch expires.
    pub fn deadline(&self) -> Option<Instant> {
        self.open.as_ref().map(|(_, at)| *at)
    }

    /// The open fetch, if it has expired at `now` (it is no longer open).
    pub fn expire(&mut self, now: Instant) -> Option<SubscriptionId> {
        if self.deadline().is_some_and(|at| now >= at) {
            return self.open.take().map(|(id, _)| id);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    fn sub(n: u64) -> SubscriptionId {
        SubscriptionId::new(format!("fetch-{n}"))
    }

    #[test]
    fn one_fetch_at_a_time_in_chunks_each_id_once() {
        let now = Instant::now();
        let mut f = Fetches::new(Duration::from_secs(15));
        assert!(f.start(sub(1), 2, now).is_none(), "nothing queued");
        assert_eq!(f.queue([id(1), id(2), id(1), id(3)]), 0);
        assert_eq!(f.queued(), 3);
        assert_eq!(f.start(sub(1), 2, now), Some(vec![id(1), id(2)]));
        // Open: nothing more starts, whatever is queued.
        f.queue([id(4)]);
        assert!(f.start(sub(2), 2, now).is_none());
        assert!(!f.ended("live-7"), "another subscription's end");
        assert!(f.ended("fetch-1"));
        assert_eq!(f.start(sub(2), 2, now), Some(vec![id(3), id(4)]));
        assert!(f.ended("fetch-2"));
        assert!(f.start(sub(3), 2, now).is_none());
    }

    #[test]
    fn an_unanswered_fetch_expires_after_the_timeout() {
        let now = Instant::now();
        let mut f = Fetches::new(Duration::from_secs(15));
        f.queue([id(1), id(2)]);
        f.start(sub(1), 1, now).unwrap();
        assert_eq!(f.deadline(), Some(now + Duration::from_secs(15)));
        assert_eq!(f.expire(now + Duration::from_secs(14)), None);
        assert_eq!(f.expire(now + Duration::from_secs(15)), Some(sub(1)));
        assert_eq!(f.deadline(), None);
        assert!(!f.ended("fetch-1"), "an expired fetch is no longer open");
        assert_eq!(f.start(sub(2), 1, now), Some(vec![id(2)]));
    }

    #[test]
    fn the_queue_is_bounded() {
        let mut f = Fetches::new(Duration::from_secs(15));
        let ids: Vec<EventId> = (0..MAX_QUEUED as u32 + 10).map(|n| {
            let mut b = [0u8; 32];
            b[..4].copy_from_slice(&n.to_be_bytes());
            EventId::from_byte_array(b)
        }).collect();
        assert_eq!(f.queue(ids), 10);
        assert_eq!(f.queued(), MAX_QUEUED);
    }
}
