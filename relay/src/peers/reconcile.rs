//! The client side of one NIP-77 reconciliation, bounded against a hostile relay (pure over an
//! injected `now`; no I/O).
//!
//! The negentropy crate's client collects, per answer, the ids only the relay has (`need`) and
//! the local ids in every id-list range the relay sends (`have`). Nothing there stops a relay
//! from answering forever, covering the same ranges again, or listing fabricated ids: so
//! `have`, which this server never uses, is a scratch list cleared after every round; `need` is
//! deduplicated and capped ([`NegBounds::max_need`]); and the exchange is capped in rounds
//! ([`NegBounds::max_rounds`]) and in wall-clock time ([`NegBounds::deadline`]). Past any bound
//! the reconciliation stops ([`NegStop::Exceeded`]) and the caller pages the filter with `REQ`
//! instead, whose cost is bounded per page.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use negentropy::{Id, Negentropy, NegentropyStorageVector};

/// Most ids one reconciliation may find missing here; beyond, the filter is paged.
pub const MAX_NEED: usize = 100_000;

/// Longest one reconciliation's exchange may take (the fetch of what it found comes after).
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// Rounds of the fingerprint descent allowed on top of the per-id budget.
const DESCENT_ROUNDS: usize = 64;

/// Ids one round settles at least, in a fair exchange: a frame of the smallest size negentropy
/// allows (4 KiB) carries 128 ids; half of that leaves room for fingerprints.
const IDS_PER_ROUND: usize = 64;

/// The bounds of one reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegBounds {
    pub max_rounds: usize,
    pub max_need: usize,
    pub deadline: Instant,
}

impl NegBounds {
    /// For a reconciliation of `local_items` items starting at `now`: enough rounds to settle
    /// every local item and [`MAX_NEED`] missing ones at [`IDS_PER_ROUND`] a round, after the
    /// descent.
    pub fn for_items(local_items: usize, now: Instant) -> Self {
        NegBounds {
            max_rounds: DESCENT_ROUNDS + (local_items + MAX_NEED) / IDS_PER_ROUND,
            max_need: MAX_NEED,
            deadline: now + RECONCILE_DEADLINE,
        }
    }
}

/// Why a reconciliation stopped before the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NegStop {
    /// The relay's message is not valid negentropy.
    Protocol(String),
    /// A bound was reached: page the filter instead.
    Exceeded(String),
}

/// One reconciliation in progress, as the initiating client.
pub struct NegClient {
    neg: Negentropy<'static, NegentropyStorageVector>,
    bounds: NegBounds,
    rounds: usize,
    need: HashSet<Id>,
    /// Scratch lists handed to the crate, cleared every round.
    have_scratch: Vec<Id>,
    need_scratch: Vec<Id>,
}

impl NegClient {
    /// `neg` has built its initial message (`initiate`).
    pub fn new(neg: Negentropy<'static, NegentropyStorageVector>, bounds: NegBounds) -> Self {
        NegClient { neg, bounds, rounds: 0, need: HashSet::new(), have_scratch: Vec::new(), need_scratch: Vec::new() }
    }

    /// Takes the relay's answer `message` at `now`: the next message to send, or `None` when
    /// the reconciliation is complete.
    pub fn answer(&mut self, message: &[u8], now: Instant) -> Result<Option<Vec<u8>>, NegStop> {
        if now >= self.bounds.deadline {
            return Err(NegStop::Exceeded(format!("the reconciliation took longer than {} s", RECONCILE_DEADLINE.as_secs())));
        }
        self.rounds += 1;
        if self.rounds > self.bounds.max_rounds {
            return Err(NegStop::Exceeded(format!("the reconciliation went past {} rounds", self.bounds.max_rounds)));
        }
        let next = self.neg.reconcile_with_ids(message, &mut self.have_scratch, &mut self.need_scratch);
        self.have_scratch.clear();
        let fresh = std::mem::take(&mut self.need_scratch);
        let next = next.map_err(|e| NegStop::Protocol(e.to_string()))?;
        for id in fresh {
            self.need.insert(id);
            if self.need.len() > self.bounds.max_need {
                return Err(NegStop::Exceeded(format!("the relay lists more than {} events missing here", self.bounds.max_need)));
            }
        }
        Ok(next)
    }

    /// Rounds answered so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// The ids found missing here, each once, sorted.
    pub fn into_need(self) -> Vec<Id> {
        let mut need: Vec<Id> = self.need.into_iter().collect();
        need.sort();
        need
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: u64 = 60_000;

    /// Sealed items numbered `items`: item `i` has the id starting with `i` (big-endian) and the
    /// timestamp `1000 + i`.
    fn storage(items: std::ops::Range<u64>) -> NegentropyStorageVector {
        let mut storage = NegentropyStorageVector::with_capacity((items.end - items.start) as usize);
        for i in items {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&i.to_be_bytes());
            storage.insert(1_000 + i, Id::from_byte_array(id)).unwrap();
        }
        storage.seal().unwrap();
        storage
    }

    /// A client over `n` local items, its initial message sent.
    fn client(n: u64, bounds: NegBounds) -> NegClient {
        let mut neg = Negentropy::owned(storage(0..n), FRAME).unwrap();
        neg.initiate().unwrap();
        NegClient::new(neg, bounds)
    }

    /// A relay answer covering the whole range with one id list of `ids`.
    fn id_list(ids: &[[u8; 32]]) -> Vec<u8> {
        // Version, bound (timestamp infinity, no id prefix), mode IdList, count, ids.
        let mut m = vec![0x61, 0x00, 0x00, 0x02];
        assert!(ids.len() < 128);
        m.push(ids.len() as u8);
        for id in ids {
            m.extend_from_slice(id);
        }
        m
    }

    /// The answer of the review: an empty id list over [0, 50) and a random fingerprint over
    /// the rest, which makes the client go on for ever (and, unbounded, grew `have` by the
    /// whole local set every round).
    fn endless() -> Vec<u8> {
        let mut m = vec![0x61, 0x33, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01];
        m.extend_from_slice(&[0xAB; 16]);
        m
    }

    #[test]
    fn a_relay_answering_for_ever_is_stopped_after_the_round_budget() {
        let now = Instant::now();
        let bounds = NegBounds::for_items(10_000, now);
        assert_eq!(bounds.max_rounds, 64 + (10_000 + MAX_NEED) / 64);
        let mut c = client(10_000, bounds);
        let message = endless();
        for round in 0..bounds.max_rounds {
            assert!(c.answer(&message, now).unwrap().is_some(), "round {round}");
            assert!(c.have_scratch.is_empty() && c.need_scratch.is_empty());
        }
        match c.answer(&message, now) {
            Err(NegStop::Exceeded(reason)) => assert!(reason.contains("rounds"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert!(c.into_need().is_empty());
    }

    #[test]
    fn the_deadline_stops_a_slow_reconciliation() {
        let now = Instant::now();
        let mut c = client(100, NegBounds::for_items(100, now));
        assert!(c.answer(&endless(), now + RECONCILE_DEADLINE - Duration::from_secs(1)).is_ok());
        assert!(matches!(c.answer(&endless(), now + RECONCILE_DEADLINE), Err(NegStop::Exceeded(_))));
    }

    #[test]
    fn needed_ids_are_deduplicated_and_capped() {
        let now = Instant::now();
        let bounds = NegBounds { max_rounds: 1_000, max_need: 150, deadline: now + RECONCILE_DEADLINE };
        let ids: Vec<[u8; 32]> = (0..100u8).map(|i| [i | 0x80; 32]).collect();
        let mut c = client(10, bounds);
        // The same 100 ids listed again and again count once.
        for _ in 0..5 {
            assert_eq!(c.answer(&id_list(&ids), now), Ok(None));
        }
        assert_eq!(c.need.len(), 100);
        // 60 more pass the cap of 150.
        let more: Vec<[u8; 32]> = (0..60u8).map(|i| [i; 32]).map(|mut id| {
            id[0] = 0x7F;
            id
        }).collect();
        assert!(matches!(c.answer(&id_list(&more), now), Err(NegStop::Exceeded(_))));
    }

    #[test]
    fn a_fair_exchange_completes_within_the_bounds() {
        // The server side of the crate over a set overlapping the client's.
        let now = Instant::now();
        let mut server = Negentropy::owned(storage(5_000..25_000), 4_096).unwrap();
        let mut neg = Negentropy::owned(storage(0..10_000), 4_096).unwrap();
        let mut message = neg.initiate().unwrap();
        let mut c = NegClient::new(neg, NegBounds::for_items(10_000, now));
        loop {
            let answer = server.reconcile(&message).unwrap();
            match c.answer(&answer, now).unwrap() {
                Some(next) => message = next,
                None => break,
            }
        }
        assert!(c.rounds() < NegBounds::for_items(10_000, now).max_rounds);
        assert_eq!(c.into_need().len(), 15_000);
    }
}
