//! Deferred repository work: the release and alignment an event asked for in repositories that
//! could not be locked within the short bound of event admission (a push holds them, or too many
//! tasks already wait for them). Event processing never waits long for a repository: what it
//! cannot lock at once is written down here and retried later, with backoff, while the rest of
//! the work proceeds (docs/security.md).
//!
//! One entry per (identifier, author): retrying it processes again the repositories the author's
//! events govern for the identifier. Pure data with the time passed in; the relay's task in
//! `relay/src/grasp/deferred.rs` carries the retries out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nostr::prelude::PublicKey;
use serde::Serialize;

/// First retry delay; doubled per failed retry up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest delay between two retries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Most entries kept; beyond it new work is not recorded (the next event, push or background
/// sync of the identifier processes its repositories again).
pub const MAX_ENTRIES: usize = 10_000;

/// What to retry: the repositories `author`'s events govern for `identifier`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeferredKey {
    pub identifier: String,
    pub author: PublicKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// The repositories still not processed (as shown to the operator) and why.
    repos: BTreeSet<String>,
    reason: String,
    since: Instant,
    attempts: u32,
    next: Instant,
}

/// One deferred entry as the operator sees it (`GET /v1/purgatory`, `grasp-relay purgatory`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeferredView {
    pub identifier: String,
    /// The author whose events govern the repositories (hex).
    pub author: String,
    pub repos: Vec<String>,
    pub reason: String,
    pub age_secs: u64,
    pub attempts: u32,
    pub next_retry_secs: u64,
}

/// The deferred work of the relay.
#[derive(Debug, Default, Clone)]
pub struct DeferredWork {
    entries: BTreeMap<DeferredKey, Entry>,
}

impl DeferredWork {
    /// Records that `repos` of `key` could not be processed now (`reason`), retried after
    /// [`FIRST_BACKOFF`] when new, or after the entry's backoff (doubled) when it was a retry.
    /// Returns false when the work could not be recorded (at [`MAX_ENTRIES`]).
    pub fn defer(&mut self, key: DeferredKey, repos: impl IntoIterator<Item = String>, reason: &str, now: Instant) -> bool {
        let repos: BTreeSet<String> = repos.into_iter().collect();
        if let Some(e) = self.entries.get_mut(&key) {
            e.attempts = e.attempts.saturating_add(1);
            e.repos = repos;
            e.reason = reason.to_string();
            e.next = now + backoff(e.attempts);
            return true;
        }
        if self.entries.len() >= MAX_ENTRIES {
            return false;
        }
        self.entries.insert(key, Entry { repos, reason: reason.to_string(), since: now, attempts: 0, next: now + FIRST_BACKOFF });
        true
    }

    /// Every repository of `key` was processed: the entry goes.
    pub fn done(&mut self, key: &DeferredKey) -> bool {
        self.entries.remove(key).is_some()
    }

    /// The entries due at `now` (oldest deadline first), left in place until [`Self::done`] or
    /// [`Self::defer`] settles them.
    pub fn due(&self, now: Instant) -> Vec<DeferredKey> {
        let mut due: Vec<(&Instant, &DeferredKey)> = self.entries.iter().filter(|(_, e)| e.next <= now).map(|(k, e)| (&e.next, k)).collect();
        due.sort();
        due.into_iter().map(|(_, k)| k.clone()).collect()
    }

    /// When the next entry is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.next).min()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The operator's view, soonest retry first.
    pub fn listing(&self, now: Instant) -> Vec<DeferredView> {
        let mut out: Vec<(Instant, DeferredView)> = self
            .entries
            .iter()
            .map(|(k, e)| {
                let view = DeferredView {
                    identifier: k.identifier.clone(),
                    author: k.author.to_hex(),
                    repos: e.repos.iter().cloned().collect(),
                    reason: e.reason.clone(),
                    age_secs: now.saturating_duration_since(e.since).as_secs(),
                    attempts: e.attempts,
                    next_retry_secs: e.next.saturating_duration_since(now).as_secs(),
                };
                (e.next, view)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.identifier.cmp(&b.1.identifier)));
        out.into_iter().map(|(_, v)| v).collect()
    }
}

/// The delay after `attempts` failed retries: 1 s, 2 s, 4 s, ... up to [`MAX_BACKOFF`].
pub fn backoff(attempts: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32.checked_shl(attempts.min(16)).unwrap_or(u32::MAX)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    fn key(identifier: &str) -> DeferredKey {
        DeferredKey { identifier: identifier.into(), author: Keys::generate().public_key() }
    }

    #[test]
    fn deferred_work_is_due_after_its_backoff_and_goes_when_done() {
        let mut d = DeferredWork::default();
        let t0 = Instant::now();
        let k = key("repo");
        assert!(d.defer(k.clone(), ["npub1x/repo.git".to_string()], "push lock busy", t0));
        assert!(d.due(t0).is_empty(), "not retried at once");
        assert_eq!(d.due(t0 + FIRST_BACKOFF), vec![k.clone()]);
        // A failed retry backs off further, and stays listed with its repositories.
        assert!(d.defer(k.clone(), ["npub1x/repo.git".to_string()], "still busy", t0 + FIRST_BACKOFF));
        assert!(d.due(t0 + FIRST_BACKOFF * 2).is_empty());
        assert_eq!(d.due(t0 + FIRST_BACKOFF * 3), vec![k.clone()]);
        let view = d.listing(t0 + FIRST_BACKOFF);
        assert_eq!(view.len(), 1);
        assert_eq!((view[0].attempts, view[0].reason.as_str(), view[0].repos.len()), (1, "still busy", 1));
        assert!(d.done(&k) && d.is_empty() && d.next_due().is_none());
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_the_entries_are_bounded() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(40), MAX_BACKOFF);
        let mut d = DeferredWork::default();
        let now = Instant::now();
        for i in 0..MAX_ENTRIES {
            assert!(d.defer(key(&format!("r{i}")), [], "busy", now));
        }
        assert!(!d.defer(key("one-more"), [], "busy", now), "bounded");
        assert_eq!(d.len(), MAX_ENTRIES);
    }
}
