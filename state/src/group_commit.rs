//! When saves waiting at the event store's gate go to the store together (group commit).
//!
//! Every store commit writes the index pages it touched and syncs them to disk: its cost is
//! mostly per commit, so the more events one commit carries, the less each costs (measured on
//! nostr-lmdb: ~150 us of CPU per event in commits of 30 events, ~50 us in commits of 250). The
//! relay's store gate (`relay/src/store/group_commit.rs`) holds the saves that arrive while
//! other events are still being admitted, and hands them to the store in one batch when
//! [`flush_now`] says so: the batch is full, its oldest save waited long enough, or no other
//! event being admitted could still join it (so a lone event is never held).
//!
//! A batch is at most 128 events: LMDB keeps, for the life of the process, as many page
//! buffers as its largest write transaction dirtied, and each event dirties about 30 pages
//! (a leaf and its branches in each index) once the store holds a million events. 512 events a
//! commit kept ~55 MiB of them; 128 keep at most ~15 MiB, and a commit of 128 still shares its
//! cost (between the two figures above, not measured apart).

use std::time::Duration;

/// How long and how large a batch may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    /// A batch this large goes at once.
    pub max_batch: usize,
    /// The oldest save of a batch waits at most this long.
    pub max_wait: Duration,
}

impl Default for Linger {
    fn default() -> Self {
        Linger { max_batch: 128, max_wait: Duration::from_millis(10) }
    }
}

/// Does the batch of `pending` saves go to the store now? `waited`: how long its oldest save
/// has waited; `expected`: events being admitted that may still save (none: nothing can join).
pub fn flush_now(pending: usize, waited: Duration, expected: usize, linger: &Linger) -> bool {
    pending > 0 && (expected == 0 || pending >= linger.max_batch || waited >= linger.max_wait)
}

/// The events being admitted that may still reach the gate: those in admission, less those
/// already waiting at the gate or being committed (saves from elsewhere, such as releases,
/// make it an underestimate, which only flushes sooner).
pub fn expected(in_admission: usize, at_gate: usize, committing: usize) -> usize {
    in_admission.saturating_sub(at_gate).saturating_sub(committing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_lone_save_goes_at_once() {
        assert!(flush_now(1, Duration::ZERO, 0, &Linger::default()));
        assert!(!flush_now(0, Duration::from_secs(1), 0, &Linger::default()));
    }

    proptest! {
        /// Never flushes nothing; always flushes a full batch, an old one, or one nothing can
        /// join; otherwise waits.
        #[test]
        fn flushes_exactly_when_waiting_cannot_help(
            pending in 0usize..2000,
            waited_ms in 0u64..50,
            expected in 0usize..2000,
            max_batch in 1usize..1000,
            max_wait_ms in 0u64..30,
        ) {
            let linger = Linger { max_batch, max_wait: Duration::from_millis(max_wait_ms) };
            let flush = flush_now(pending, Duration::from_millis(waited_ms), expected, &linger);
            if pending == 0 {
                prop_assert!(!flush);
            } else if expected == 0 || pending >= max_batch || waited_ms >= max_wait_ms {
                prop_assert!(flush);
            } else {
                prop_assert!(!flush);
            }
        }

        /// The expected count never exceeds the events in admission and never underflows.
        #[test]
        fn expected_is_bounded(in_admission in 0usize..5000, at_gate in 0usize..5000, committing in 0usize..5000) {
            let e = expected(in_admission, at_gate, committing);
            prop_assert!(e <= in_admission);
            prop_assert_eq!(e, in_admission.saturating_sub(at_gate + committing));
        }
    }
}
