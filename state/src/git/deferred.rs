//! Deferred repository work: the release and alignment an event asked for in repositories that
//! could not be locked within the short bound of event admission (a push holds them, or too many
//! tasks already wait for them). Event processing never waits long for a repository: what it
//! cannot lock at once is written down here and retried later, with backoff, while the rest of
//! the work proceeds (docs/security.md).
//!
//! One entry per (identifier, author): retrying it processes again the repositories the author's
//! events govern for the identifier. The table is bounded ([`DeferredLimits`]): one author holds
//! at most its share, and a full table makes room for an author with fewer entries by dropping
//! one of the author holding the most, so throwaway keys cannot crowd others out. Retries of
//! different identifiers run side by side up to a bound, never two of one identifier (so never
//! two for one repository: a repository path is `<owner>/<identifier>.git`). Pure data with the
//! time passed in; the relay's task in `relay/src/grasp/deferred.rs` carries the retries out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use nostr::prelude::PublicKey;
use serde::Serialize;

/// First retry delay; doubled per failed retry up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest delay between two retries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Default of [`DeferredLimits::total`] (`--deferred-total`).
pub const MAX_ENTRIES: usize = 10_000;
/// Default of [`DeferredLimits::per_author`] (`--deferred-per-author`): a sixteenth of the table.
pub const MAX_PER_AUTHOR: usize = MAX_ENTRIES / 16;
/// Default of [`DeferredLimits::per_owner`] (`--deferred-per-owner`): a sixteenth of the table.
pub const MAX_PER_OWNER: usize = MAX_ENTRIES / 16;

/// The bounds of the table. Work that does not fit is not recorded (the next event, push or
/// background sync of the identifier processes its repositories again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeferredLimits {
    /// Most entries in all.
    pub total: usize,
    /// Most entries of one author.
    pub per_author: usize,
    /// Most entries naming a repository of one owner: however many keys govern an owner's
    /// repositories (throwaway co-maintainers, each under its author share), that owner's
    /// repositories hold at most this share of the table.
    pub per_owner: usize,
}

impl Default for DeferredLimits {
    fn default() -> Self {
        DeferredLimits { total: MAX_ENTRIES, per_author: MAX_PER_AUTHOR, per_owner: MAX_PER_OWNER }
    }
}

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
    /// The owners of those repositories, counted against [`DeferredLimits::per_owner`].
    owners: BTreeSet<PublicKey>,
    reason: String,
    since: Instant,
    attempts: u32,
    next: Instant,
}

/// Why work was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Its author already holds [`DeferredLimits::per_author`] entries.
    AuthorShare,
    /// An owner of its repositories already has [`DeferredLimits::per_owner`] entries.
    OwnerShare,
    /// The table is full and no author holds at least two entries more than this one's.
    Full,
}

impl DropReason {
    /// The label of the dropped-work metric and the log field.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::AuthorShare => "author_share",
            DropReason::OwnerShare => "owner_share",
            DropReason::Full => "full",
        }
    }
}

/// What [`DeferredWork::defer`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deferral {
    /// A new entry, retried after [`FIRST_BACKOFF`].
    Recorded,
    /// The entry existed (a failed retry, or the same work again): backed off further.
    Retried,
    /// A new entry took the place of `evicted`, an entry of the author holding the most (its
    /// work is lost like dropped work).
    Evicted(DeferredKey),
    /// Not recorded.
    Dropped(DropReason),
}

impl Deferral {
    /// Whether the work is now in the table.
    pub fn is_recorded(&self) -> bool {
        !matches!(self, Deferral::Dropped(_))
    }
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

/// The table's figures for the operator (`GET /v1/purgatory` `deferred_stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeferredStats {
    pub entries: usize,
    /// Distinct authors with entries.
    pub authors: usize,
    /// Entries of the author holding the most.
    pub largest_author_entries: usize,
    /// Retries running now.
    pub running: usize,
    pub limit_total: usize,
    pub limit_per_author: usize,
    /// Distinct owners with entries, and the entries of the owner with the most.
    pub owners: usize,
    pub largest_owner_entries: usize,
    pub limit_per_owner: usize,
    /// Since start: new work refused because its author held its share.
    pub dropped_author_share: u64,
    /// Since start: new work refused because an owner of its repositories held its share.
    pub dropped_owner_share: u64,
    /// Since start: new work refused because the table was full.
    pub dropped_full: u64,
    /// Since start: entries dropped to make room for an author with fewer.
    pub evicted: u64,
}

/// The deferred work of the relay.
#[derive(Debug, Default, Clone)]
pub struct DeferredWork {
    limits: DeferredLimits,
    entries: BTreeMap<DeferredKey, Entry>,
    /// Entries per author, in step with `entries` (no zero counts).
    per_author: HashMap<PublicKey, usize>,
    /// Entries per owner of their repositories, in step with `entries` (no zero counts).
    per_owner: HashMap<PublicKey, usize>,
    /// Identifiers whose retry runs ([`Self::start_due`] until [`Self::finished`]).
    running: BTreeSet<String>,
    dropped_author_share: u64,
    dropped_owner_share: u64,
    dropped_full: u64,
    evicted: u64,
}

impl DeferredWork {
    pub fn new(limits: DeferredLimits) -> Self {
        DeferredWork { limits, ..Default::default() }
    }

    /// Records that `repos` of `key` could not be processed now (`reason`), retried after
    /// [`FIRST_BACKOFF`] when new, or after the entry's backoff (doubled) when it was a retry.
    /// New work of an author at its share is dropped; when the table is full it takes the place
    /// of an entry of the author holding the most, if that author holds at least two more than
    /// this one's author (so the shares even out and never swap back and forth), else it is
    /// dropped.
    pub fn defer(&mut self, key: DeferredKey, repos: impl IntoIterator<Item = String>, reason: &str, now: Instant) -> Deferral {
        self.defer_owned(key, repos, [], reason, now)
    }

    /// [`Self::defer`] for repositories of `owners`: new work is also dropped when one of them
    /// already has its share ([`DeferredLimits::per_owner`]).
    pub fn defer_owned(
        &mut self,
        key: DeferredKey,
        repos: impl IntoIterator<Item = String>,
        owners: impl IntoIterator<Item = PublicKey>,
        reason: &str,
        now: Instant,
    ) -> Deferral {
        let repos: BTreeSet<String> = repos.into_iter().collect();
        let owners: BTreeSet<PublicKey> = owners.into_iter().collect();
        if let Some(e) = self.entries.get_mut(&key) {
            e.attempts = e.attempts.saturating_add(1);
            e.repos = repos;
            e.reason = reason.to_string();
            e.next = now + backoff(e.attempts);
            return Deferral::Retried;
        }
        let own = self.author_entries(&key.author);
        if own >= self.limits.per_author {
            self.dropped_author_share += 1;
            return Deferral::Dropped(DropReason::AuthorShare);
        }
        if owners.iter().any(|o| self.owner_entries(o) >= self.limits.per_owner) {
            self.dropped_owner_share += 1;
            return Deferral::Dropped(DropReason::OwnerShare);
        }
        let mut outcome = Deferral::Recorded;
        if self.entries.len() >= self.limits.total {
            match self.eviction_victim(own) {
                Some(victim) => {
                    self.remove(&victim);
                    self.evicted += 1;
                    outcome = Deferral::Evicted(victim);
                }
                None => {
                    self.dropped_full += 1;
                    return Deferral::Dropped(DropReason::Full);
                }
            }
        }
        *self.per_author.entry(key.author).or_default() += 1;
        for owner in &owners {
            *self.per_owner.entry(*owner).or_default() += 1;
        }
        self.entries.insert(key, Entry { repos, owners, reason: reason.to_string(), since: now, attempts: 0, next: now + FIRST_BACKOFF });
        outcome
    }

    /// The entry to drop so that an author holding `own` entries gets one: of the author holding
    /// the most (at least `own + 2`), the entry retried last (the latest next retry, the one that
    /// has failed the longest).
    fn eviction_victim(&self, own: usize) -> Option<DeferredKey> {
        let (fullest, most) = self.per_author.iter().max_by_key(|(author, n)| (**n, **author))?;
        if *most < own + 2 {
            return None;
        }
        self.entries.iter().filter(|(k, _)| k.author == *fullest).max_by_key(|(k, e)| (e.next, (*k).clone())).map(|(k, _)| k.clone())
    }

    fn remove(&mut self, key: &DeferredKey) -> bool {
        let Some(entry) = self.entries.remove(key) else { return false };
        count_down(&mut self.per_author, &key.author);
        for owner in &entry.owners {
            count_down(&mut self.per_owner, owner);
        }
        true
    }

    /// How many entries name a repository of `owner`.
    pub fn owner_entries(&self, owner: &PublicKey) -> usize {
        self.per_owner.get(owner).copied().unwrap_or(0)
    }

    /// How many entries `author` holds.
    pub fn author_entries(&self, author: &PublicKey) -> usize {
        self.per_author.get(author).copied().unwrap_or(0)
    }

    /// Every repository of `key` was processed: the entry goes.
    pub fn done(&mut self, key: &DeferredKey) -> bool {
        self.remove(key)
    }

    /// The entries due at `now` (oldest deadline first), left in place until [`Self::done`] or
    /// [`Self::defer`] settles them. Entries of an identifier whose retry runs are not due.
    pub fn due(&self, now: Instant) -> Vec<DeferredKey> {
        let mut due: Vec<(&Instant, &DeferredKey)> = self
            .entries
            .iter()
            .filter(|(k, e)| e.next <= now && !self.running.contains(&k.identifier))
            .map(|(k, e)| (&e.next, k))
            .collect();
        due.sort();
        due.into_iter().map(|(_, k)| k.clone()).collect()
    }

    /// The due entries to retry now, oldest deadline first, marked running: at most one per
    /// identifier (none of an identifier already running), and only as many as keep the
    /// running retries within `max_running`. Each must be [`Self::finished`] when its retry
    /// ends.
    pub fn start_due(&mut self, now: Instant, max_running: usize) -> Vec<DeferredKey> {
        let mut started = Vec::new();
        for key in self.due(now) {
            if self.running.len() >= max_running {
                break;
            }
            if self.running.insert(key.identifier.clone()) {
                started.push(key);
            }
        }
        started
    }

    /// The retry of `key` (from [`Self::start_due`]) ended.
    pub fn finished(&mut self, key: &DeferredKey) {
        self.running.remove(&key.identifier);
    }

    /// Retries running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// When the next entry not already running is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.iter().filter(|(k, _)| !self.running.contains(&k.identifier)).map(|(_, e)| e.next).min()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table's figures.
    pub fn stats(&self) -> DeferredStats {
        DeferredStats {
            entries: self.entries.len(),
            authors: self.per_author.len(),
            largest_author_entries: self.per_author.values().copied().max().unwrap_or(0),
            running: self.running.len(),
            limit_total: self.limits.total,
            limit_per_author: self.limits.per_author,
            owners: self.per_owner.len(),
            largest_owner_entries: self.per_owner.values().copied().max().unwrap_or(0),
            limit_per_owner: self.limits.per_owner,
            dropped_author_share: self.dropped_author_share,
            dropped_owner_share: self.dropped_owner_share,
            dropped_full: self.dropped_full,
            evicted: self.evicted,
        }
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

/// One entry less for `who` (no zero counts are kept).
fn count_down(counts: &mut HashMap<PublicKey, usize>, who: &PublicKey) {
    if let Some(n) = counts.get_mut(who) {
        *n -= 1;
        if *n == 0 {
            counts.remove(who);
        }
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
        assert!(d.defer(k.clone(), ["npub1x/repo.git".to_string()], "push lock busy", t0).is_recorded());
        assert!(d.due(t0).is_empty(), "not retried at once");
        assert_eq!(d.due(t0 + FIRST_BACKOFF), vec![k.clone()]);
        // A failed retry backs off further, and stays listed with its repositories.
        assert!(d.defer(k.clone(), ["npub1x/repo.git".to_string()], "still busy", t0 + FIRST_BACKOFF).is_recorded());
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
            assert!(d.defer(key(&format!("r{i}")), [], "busy", now).is_recorded());
        }
        assert!(!d.defer(key("one-more"), [], "busy", now).is_recorded(), "bounded");
        assert_eq!(d.len(), MAX_ENTRIES);
    }

    fn author(i: u8) -> PublicKey {
        Keys::new(nostr::prelude::SecretKey::from_slice(&[i + 1; 32]).unwrap()).public_key()
    }

    fn of(i: u8, identifier: &str) -> DeferredKey {
        DeferredKey { identifier: identifier.into(), author: author(i) }
    }

    #[test]
    fn one_author_holds_at_most_its_share() {
        let mut d = DeferredWork::new(DeferredLimits { total: 100, per_author: 3, per_owner: 100 });
        let now = Instant::now();
        for i in 0..3 {
            assert_eq!(d.defer(of(0, &format!("r{i}")), [], "busy", now), Deferral::Recorded);
        }
        assert_eq!(d.defer(of(0, "r3"), [], "busy", now), Deferral::Dropped(DropReason::AuthorShare));
        // Its existing work is still retried, and others are not affected.
        assert_eq!(d.defer(of(0, "r0"), [], "busy", now), Deferral::Retried);
        assert_eq!(d.defer(of(1, "r3"), [], "busy", now), Deferral::Recorded);
        let stats = d.stats();
        assert_eq!((stats.entries, stats.authors, stats.largest_author_entries, stats.dropped_author_share), (4, 2, 3, 1));
    }

    #[test]
    fn one_owner_has_at_most_its_share_whatever_keys_govern_its_repositories() {
        let mut d = DeferredWork::new(DeferredLimits { total: 100, per_author: 100, per_owner: 2 });
        let now = Instant::now();
        let victim = author(9);
        // Throwaway keys, each well within its author share, all governing the victim's repositories.
        assert_eq!(d.defer_owned(of(0, "a"), [], [victim], "busy", now), Deferral::Recorded);
        assert_eq!(d.defer_owned(of(1, "b"), [], [victim, author(8)], "busy", now), Deferral::Recorded);
        assert_eq!(d.defer_owned(of(2, "c"), [], [victim], "busy", now), Deferral::Dropped(DropReason::OwnerShare));
        assert_eq!(d.defer_owned(of(2, "c"), [], [author(7)], "busy", now), Deferral::Recorded, "other owners are not affected");
        assert_eq!((d.owner_entries(&victim), d.owner_entries(&author(8))), (2, 1));
        let stats = d.stats();
        assert_eq!((stats.owners, stats.largest_owner_entries, stats.dropped_owner_share), (3, 2, 1));
        // Done work gives the share back.
        assert!(d.done(&of(0, "a")));
        assert_eq!(d.owner_entries(&victim), 1);
        assert_eq!(d.defer_owned(of(3, "d"), [], [victim], "busy", now), Deferral::Recorded);
        // Eviction gives it back too.
        let mut full = DeferredWork::new(DeferredLimits { total: 2, per_author: 2, per_owner: 2 });
        assert!(full.defer_owned(of(0, "x"), [], [victim], "busy", now).is_recorded());
        assert!(full.defer_owned(of(0, "y"), [], [victim], "busy", now + Duration::from_secs(1)).is_recorded());
        assert_eq!(full.defer_owned(of(1, "z"), [], [author(8)], "busy", now), Deferral::Evicted(of(0, "y")));
        assert_eq!(full.owner_entries(&victim), 1);
    }

    #[test]
    fn a_full_table_makes_room_for_an_author_with_fewer_entries() {
        let mut d = DeferredWork::new(DeferredLimits { total: 4, per_author: 4, per_owner: 4 });
        let t0 = Instant::now();
        for i in 0..4 {
            assert!(d.defer(of(0, &format!("r{i}")), [], "busy", t0 + Duration::from_secs(i)).is_recorded());
        }
        // The throwaway author's entry retried last goes for a newcomer.
        assert_eq!(d.defer(of(1, "victim"), [], "busy", t0), Deferral::Evicted(of(0, "r3")));
        assert_eq!(d.defer(of(2, "other"), [], "busy", t0), Deferral::Evicted(of(0, "r2")));
        assert_eq!((d.author_entries(&author(0)), d.author_entries(&author(1)), d.len()), (2, 1, 4));
        // Author 0 holds 2, the newcomer 3 would hold 1 after: the shares are even enough.
        assert_eq!(d.defer(of(1, "second"), [], "busy", t0), Deferral::Dropped(DropReason::Full));
        assert_eq!(d.defer(of(3, "third"), [], "busy", t0), Deferral::Evicted(of(0, "r1")));
        assert_eq!(d.defer(of(4, "fourth"), [], "busy", t0), Deferral::Dropped(DropReason::Full));
        let stats = d.stats();
        assert_eq!((stats.evicted, stats.dropped_full, stats.entries), (3, 2, 4));
    }

    #[test]
    fn retries_run_side_by_side_but_never_two_of_one_identifier() {
        let mut d = DeferredWork::default();
        let t0 = Instant::now();
        for k in [of(0, "a"), of(1, "a"), of(0, "b"), of(0, "c"), of(0, "d")] {
            assert!(d.defer(k, [], "busy", t0).is_recorded());
        }
        let due = t0 + FIRST_BACKOFF;
        let started = d.start_due(due, 3);
        assert_eq!(started.len(), 3, "{started:?}");
        let ids: BTreeSet<&str> = started.iter().map(|k| k.identifier.as_str()).collect();
        assert_eq!(ids.len(), 3, "two retries of one identifier: {started:?}");
        assert!(d.start_due(due, 3).is_empty(), "bounded");
        assert!(d.next_due().is_some());
        // Finishing one lets the next in, still never a second of a running identifier.
        d.finished(&started[0]);
        d.done(&started[0]);
        let more = d.start_due(due, 3);
        assert_eq!(more.len(), 1);
        // The other entry of "a" (due first), now that no retry of "a" runs.
        assert_eq!((started[0].identifier.as_str(), more[0].identifier.as_str()), ("a", "a"), "{more:?}");
        assert_ne!(more[0], started[0]);
        assert_eq!(d.running(), 3);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Defer { author: u8, identifier: u8 },
            Done { author: u8, identifier: u8 },
            Start { max_running: usize },
            Finish { nth: usize },
            Wait { secs: u64 },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u8..6, 0u8..6).prop_map(|(author, identifier)| Op::Defer { author, identifier }),
                1 => (0u8..6, 0u8..6).prop_map(|(author, identifier)| Op::Done { author, identifier }),
                1 => (1usize..4).prop_map(|max_running| Op::Start { max_running }),
                1 => (0usize..4).prop_map(|nth| Op::Finish { nth }),
                1 => (0u64..5).prop_map(|secs| Op::Wait { secs }),
            ]
        }

        fn counts(d: &DeferredWork) -> HashMap<PublicKey, usize> {
            let mut out = HashMap::new();
            for k in d.entries.keys() {
                *out.entry(k.author).or_default() += 1;
            }
            out
        }

        proptest! {
            #[test]
            fn shares_and_bounds_hold_and_newcomers_get_room(
                total in 1usize..10,
                per_author in 1usize..6,
                ops in proptest::collection::vec(op(), 1..120),
            ) {
                let mut d = DeferredWork::new(DeferredLimits { total, per_author, per_owner: total });
                let mut now = Instant::now();
                let mut running: Vec<DeferredKey> = Vec::new();
                for op in ops {
                    match op {
                        Op::Defer { author: a, identifier } => {
                            let key = of(a, &format!("r{identifier}"));
                            let existed = d.entries.contains_key(&key);
                            let before = counts(&d);
                            let own = before.get(&author(a)).copied().unwrap_or(0);
                            let most = before.values().copied().max().unwrap_or(0);
                            let full = d.len() >= total;
                            let got = d.defer(key.clone(), [], "busy", now);
                            match &got {
                                Deferral::Retried => prop_assert!(existed),
                                Deferral::Recorded => prop_assert!(!existed && !full && own < per_author),
                                Deferral::Evicted(victim) => {
                                    prop_assert!(!existed && full && own < per_author);
                                    // The victim's author held the most, at least two more than this one's.
                                    prop_assert_eq!(before[&victim.author], most);
                                    prop_assert!(most >= own + 2);
                                    prop_assert!(!d.entries.contains_key(victim));
                                }
                                Deferral::Dropped(DropReason::AuthorShare) => prop_assert!(!existed && own >= per_author),
                                Deferral::Dropped(DropReason::Full) => {
                                    // Dropped only when every author holds at most one more than this one's.
                                    prop_assert!(!existed && full && own < per_author && most < own + 2);
                                }
                                Deferral::Dropped(DropReason::OwnerShare) => prop_assert!(false, "no owners given"),
                            }
                            prop_assert_eq!(got.is_recorded(), d.entries.contains_key(&key));
                        }
                        Op::Done { author: a, identifier } => {
                            d.done(&of(a, &format!("r{identifier}")));
                        }
                        Op::Start { max_running } => {
                            let was: BTreeSet<String> = running.iter().map(|k| k.identifier.clone()).collect();
                            let started = d.start_due(now, max_running);
                            for k in &started {
                                prop_assert!(d.entries[k].next <= now, "not due");
                                prop_assert!(!was.contains(&k.identifier), "an identifier already running");
                            }
                            let ids: BTreeSet<&String> = started.iter().map(|k| &k.identifier).collect();
                            prop_assert_eq!(ids.len(), started.len(), "two retries of one identifier");
                            prop_assert!(started.is_empty() || was.len() + started.len() <= max_running);
                            running.extend(started);
                        }
                        Op::Finish { nth } => {
                            if !running.is_empty() {
                                let k = running.remove(nth % running.len());
                                d.finished(&k);
                            }
                        }
                        Op::Wait { secs } => now += Duration::from_secs(secs),
                    }
                    // The table's bounds and its per-author counts always hold.
                    let c = counts(&d);
                    prop_assert!(d.len() <= total);
                    prop_assert!(c.values().all(|n| *n <= per_author));
                    prop_assert_eq!(&c, &d.per_author);
                    prop_assert_eq!(d.running(), running.len());
                    // Nothing of a running identifier is due again.
                    prop_assert!(d.due(now).iter().all(|k| !running.iter().any(|r| r.identifier == k.identifier)));
                }
            }
        }
    }
}
