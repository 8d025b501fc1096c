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
//!
//! Regular events are answered before their commit, once in the log of acknowledged events
//! ([`acknowledge_early`] bounds how many wait so), and go to the store when
//! [`hand_over_now`] says so: in a quiet moment (20 ms without a save), or once 1,024 wait,
//! in commits of at most 256, so that few `OK`s wait behind a commit's disk sync (the disk's
//! flush is shared: measured here, an append's sync issued during a commit of 1,000 scattered
//! pages takes 3-4 ms instead of 0.2).

use std::time::Duration;

/// How long and how large a batch may grow, and how long acknowledged events wait for the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    /// A batch this large goes at once; one commit carries at most this many saves someone
    /// waits for.
    pub max_batch: usize,
    /// The oldest save of a batch waits at most this long.
    pub max_wait: Duration,
    /// Events acknowledged before their commit (in the log of acknowledged events) go to the
    /// store, in commits of at most this many, once no save came for `commit_idle` (a commit's
    /// disk sync delays any `OK` synced meanwhile, so commits go in quiet moments)...
    pub commit_batch: usize,
    /// How long without a save makes a quiet moment.
    pub commit_idle: Duration,
    /// ...or once this many wait (a relay busy without a pause)...
    pub commit_backlog: usize,
    /// ...or once the oldest waited this long.
    pub commit_delay: Duration,
    /// Most events acknowledged and not yet committed (held in memory for reads); beyond it an
    /// event is answered after its commit.
    pub max_acknowledged: usize,
    /// Most bytes of them.
    pub max_acknowledged_bytes: usize,
}

impl Default for Linger {
    fn default() -> Self {
        Linger {
            max_batch: 128,
            max_wait: Duration::from_millis(10),
            commit_batch: 256,
            commit_idle: Duration::from_millis(20),
            commit_backlog: 1024,
            commit_delay: Duration::from_secs(10),
            max_acknowledged: 4096,
            max_acknowledged_bytes: 16 << 20,
        }
    }
}

/// The saves waiting for the store at the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Queued {
    /// Saves whose answer waits for the commit.
    pub waiting: usize,
    /// Events acknowledged already (in the log), not yet handed to the store.
    pub acknowledged: usize,
    /// How long the oldest of those was acknowledged.
    pub oldest: Duration,
}

/// Does the gate hand its queue to the store now (the store being idle)? A save someone waits
/// for goes at once; acknowledged events go when no save came for `commit_idle` (`idle`), when
/// `commit_backlog` of them wait, when the oldest waited `commit_delay`, or when the gate closes.
pub fn hand_over_now(queued: Queued, idle: Duration, closing: bool, linger: &Linger) -> bool {
    queued.waiting > 0
        || (queued.acknowledged > 0
            && (closing
                || queued.acknowledged >= linger.commit_backlog
                || idle >= linger.commit_idle
                || queued.oldest >= linger.commit_delay))
}

/// May an event of `bytes` (of a kind that may be acknowledged before its commit) be
/// acknowledged now, with `held` events of `held_bytes` acknowledged and not yet committed?
pub fn acknowledge_early(held: usize, held_bytes: usize, bytes: usize, linger: &Linger) -> bool {
    held < linger.max_acknowledged && held_bytes.saturating_add(bytes) <= linger.max_acknowledged_bytes
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

    #[test]
    fn waiting_saves_go_at_once_acknowledged_ones_when_many_old_or_closing() {
        let l = Linger::default();
        let q = |waiting, acknowledged, oldest_ms| Queued { waiting, acknowledged, oldest: Duration::from_millis(oldest_ms) };
        let busy = Duration::ZERO;
        assert!(!hand_over_now(Queued::default(), l.commit_idle, true, &l));
        assert!(hand_over_now(q(1, 0, 0), busy, false, &l));
        assert!(!hand_over_now(q(0, 1, 0), busy, false, &l));
        assert!(!hand_over_now(q(0, l.commit_backlog - 1, 0), busy, false, &l));
        assert!(hand_over_now(q(0, 1, 0), busy, true, &l));
        assert!(hand_over_now(q(0, l.commit_backlog, 0), busy, false, &l));
        assert!(hand_over_now(q(0, 1, 0), l.commit_idle, false, &l));
        assert!(hand_over_now(q(0, 1, l.commit_delay.as_millis() as u64), busy, false, &l));
        assert!(acknowledge_early(0, 0, 1000, &l));
        assert!(!acknowledge_early(l.max_acknowledged, 0, 1, &l));
        assert!(!acknowledge_early(1, l.max_acknowledged_bytes - 10, 11, &l));
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
            let linger = Linger { max_batch, max_wait: Duration::from_millis(max_wait_ms), ..Linger::default() };
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
