//! The purgatory: events and pushes waiting for their other half.
//!
//! A GRASP relay accepts repository announcements, state events and PRs before their git data
//! exists, and `refs/nostr/<id>` pushes before their PR event exists. Both wait here, unserved,
//! until the other half arrives or 30 minutes pass (see docs/protocol.md#purgatory).
//!
//! This module is the pure data model: plain `&mut self` methods, no async, no git, no
//! filesystem (the checkpoint file is read and written by `contract::checkpoint_file`). Time
//! comes from an injected [`Clock`]. Expiry is driven by [`Purgatory::sweep`], which returns
//! [`SweepAction`]s for the caller to carry out (delete a bare repository, delete a placeholder
//! ref) outside any lock.
//!
//! Layout:
//! - [`clock`]: `Clock`, `SystemClock`, `ManualClock`.
//! - [`entries`]: the entry types and the keys naming them.
//! - [`caps`]: memory bounds and the `PurgatoryFull` error.
//! - `deadlines`: the ordered deadline set (sweeps pop, never scan).
//! - `expired`: ids that expired recently (prevents re-sync loops).
//! - `announcements`, `events`: the API for announcements, and for state/PR events and
//!   placeholders.
//! - `deletion`: kind-5 deletion semantics. `sweep`: expiry.
//! - [`checkpoint`]: the on-disk format, snapshot and restore.
//! - [`unsigned`]: the bytes git-first pushes parked here, per address and in total, and their
//!   budget.
//!
//! Invariant kept by every mutation: each entry's `expires_at` is armed in the deadline set
//! exactly once, unless the entry is deferred (its sync is running) or is a placeholder whose
//! ref cleanup is pending; counts and the event-id index match the maps.

pub mod caps;
pub mod checkpoint;
pub mod clock;
pub mod entries;
pub mod journal;

mod announcements;
mod deadlines;
mod deletion;
mod events;
mod expired;
mod sweep;
pub mod unsigned;
#[cfg(test)]
pub(crate) mod testutil;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostr::prelude::{EventId, PublicKey};

pub use caps::{held_size, CapScope, Caps, PlaceholderError, PurgatoryFull, DEFAULT_TOTAL_BYTES};
pub use checkpoint::{CheckpointError, PurgatorySnapshot, PurgatoryState, RestoreReport, Skipped};
pub use clock::{Clock, ManualClock, SystemClock};
pub use deletion::Coordinate;
pub use entries::{
    AnnouncementAdded, AnnouncementEntry, EntryKey, EntryKind, EntryView, ExpiredView, Extension,
    PrEntry, PurgatoryStats, Removed, RepoId, StateEntry, StateSyncRegistration,
};
pub use journal::{JournalRecord, Decoded};
pub use sweep::SweepAction;
pub use unsigned::{UnsignedBudget, UnsignedFull, UnsignedScope};

use caps::Counts;
use deadlines::Deadlines;
use expired::ExpiredEvents;

/// How long things wait, and how much may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgatoryConfig {
    /// How long an event (or placeholder) waits for its other half: 30 min.
    pub entry_ttl: Duration,
    /// How long a soft-expired announcement is kept for revival: 24 h.
    pub soft_expiry_ttl: Duration,
    /// How long an expired event id is remembered: 24 h.
    pub expired_events_ttl: Duration,
    /// Suggested delay before retrying a failed placeholder ref deletion: 60 s.
    pub placeholder_retry: Duration,
    /// How long a running background sync of an identifier defers the expiry of its entries,
    /// counted from the sync's start (`--sync-attempt-timeout`): 10 min. Past it, due entries
    /// expire although the sync still runs.
    pub sync_defer_limit: Duration,
    pub caps: Caps,
    /// Bytes of unsigned data (git-first pushes) per address and in total ([`unsigned`]).
    pub unsigned: UnsignedBudget,
}

impl Default for PurgatoryConfig {
    fn default() -> Self {
        PurgatoryConfig {
            entry_ttl: Duration::from_secs(30 * 60),
            soft_expiry_ttl: Duration::from_secs(24 * 60 * 60),
            expired_events_ttl: Duration::from_secs(24 * 60 * 60),
            placeholder_retry: Duration::from_secs(60),
            sync_defer_limit: Duration::from_secs(10 * 60),
            caps: Caps::default(),
            unsigned: UnsignedBudget::default(),
        }
    }
}

/// The holding area. See the module docs.
///
/// Not internally synchronised: the relay wraps it in a `std::sync::Mutex` and keeps every
/// critical section short (no I/O under the lock: `sweep` and `snapshot` return data to act on
/// afterwards). Sync-running flags are a set, not a counter: one sync task per identifier.
pub struct Purgatory {
    config: PurgatoryConfig,
    clock: Arc<dyn Clock>,
    /// identifier -> owner -> entry (identifier first: authorization looks up by identifier).
    announcements: HashMap<String, BTreeMap<PublicKey, AnnouncementEntry>>,
    /// identifier -> state events, oldest added first.
    states: HashMap<String, Vec<StateEntry>>,
    prs: HashMap<EventId, PrEntry>,
    /// Event id -> key, for announcements and state events (PRs are keyed by id already).
    by_id: HashMap<EventId, EntryKey>,
    expired: ExpiredEvents,
    deadlines: Deadlines,
    /// identifier -> when its running sync started.
    sync_running: HashMap<String, Instant>,
    /// identifier -> entries whose deadline passed while a sync of that identifier ran.
    deferred: HashMap<String, BTreeSet<EntryKey>>,
    counts: Counts,
    last_sweep_examined: usize,
    /// Records of the mutations not yet taken by the relay's journal writer (`None`: journal
    /// off). See [`journal`].
    journal: Option<Vec<JournalRecord>>,
}

/// The distinct ref targets a state event declares (empty if it does not parse).
fn state_oids(event: &nostr::prelude::Event) -> Vec<String> {
    let mut oids: Vec<String> = crate::nostr::nip34::RepoState::from_event(event)
        .map(|s| s.refs.into_values().collect())
        .unwrap_or_default();
    oids.sort();
    oids.dedup();
    oids
}

impl std::fmt::Debug for Purgatory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purgatory")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Purgatory {
    pub fn new(config: PurgatoryConfig, clock: Arc<dyn Clock>) -> Self {
        Purgatory {
            config,
            clock,
            announcements: HashMap::new(),
            states: HashMap::new(),
            prs: HashMap::new(),
            by_id: HashMap::new(),
            expired: ExpiredEvents::default(),
            deadlines: Deadlines::default(),
            sync_running: HashMap::new(),
            deferred: HashMap::new(),
            counts: Counts::default(),
            last_sweep_examined: 0,
            journal: None,
        }
    }

    pub fn config(&self) -> &PurgatoryConfig {
        &self.config
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Whether `event_id` expired without its git data recently (do not re-fetch it).
    pub fn is_expired(&self, event_id: &EventId) -> bool {
        self.expired
            .contains(event_id, self.clock.wall(), self.config.expired_events_ttl)
    }

    /// Marks a background sync of `identifier` as running or finished. While it runs, and for
    /// at most [`PurgatoryConfig::sync_defer_limit`] from its start, the sweep defers (does not
    /// expire) announcements, states and PRs of that identifier; when it finishes or the limit
    /// passes, deferred entries are re-armed at their (past) deadline and the next sweep
    /// expires whatever the sync did not release.
    pub fn set_sync_running(&mut self, identifier: &str, running: bool) {
        if running {
            let now = self.clock.now();
            self.sync_running.insert(identifier.to_owned(), now);
            return;
        }
        self.sync_running.remove(identifier);
        self.rearm_deferred(identifier);
    }

    pub fn is_sync_running(&self, identifier: &str) -> bool {
        self.sync_running.contains_key(identifier)
    }

    /// Whether a running sync of `identifier` still defers its entries' expiry (it started less
    /// than [`PurgatoryConfig::sync_defer_limit`] ago).
    fn sync_defers(&self, identifier: &str, now: Instant) -> bool {
        self.sync_running
            .get(identifier)
            .is_some_and(|started| now.saturating_duration_since(*started) < self.config.sync_defer_limit)
    }

    /// Arms the deadlines of the entries deferred by `identifier`'s sync again, at their own
    /// (possibly past) time.
    fn rearm_deferred(&mut self, identifier: &str) {
        for key in self.deferred.remove(identifier).unwrap_or_default() {
            if let Some(at) = self.expires_at_of(&key) {
                self.deadlines.arm(at, key);
            }
        }
    }

    pub fn stats(&self) -> PurgatoryStats {
        let all_announcements = || self.announcements.values().flat_map(|m| m.values());
        let placeholders = self.prs.values().filter(|p| p.is_placeholder()).count();
        PurgatoryStats {
            announcements: all_announcements().count(),
            soft_expired_announcements: all_announcements().filter(|a| a.soft_expired).count(),
            states: self.states.values().map(Vec::len).sum(),
            prs: self.prs.len() - placeholders,
            placeholders,
            expired_events: self.expired.len(),
            deadlines: self.deadlines.len(),
            deferred: self.deferred.values().map(BTreeSet::len).sum(),
            last_sweep_examined: self.last_sweep_examined,
            unsigned_bytes: self.counts.unsigned_total,
            unsigned_addresses: self.counts.unsigned_per_address.len(),
        }
    }

    /// Every entry, soonest expiry first, for an operator view.
    pub fn listing(&self) -> Vec<EntryView> {
        let now = self.clock.now();
        let age = |created: Instant| now.saturating_duration_since(created);
        let left = |expires: Instant| expires.saturating_duration_since(now);
        let mut out = Vec::new();
        for a in self.announcements.values().flat_map(|m| m.values()) {
            out.push(EntryView {
                kind: EntryKind::Announcement,
                pubkey: Some(a.owner.to_hex()),
                identifier: Some(a.identifier.clone()),
                event_id: a.event.id.to_hex(),
                age: age(a.created_at),
                time_left: left(a.expires_at),
                soft_expired: a.soft_expired,
                waiting_for: Some(if a.soft_expired {
                    "a state event to revive it (bare repository deleted)".to_owned()
                } else {
                    format!("git data in {}/{}.git", a.owner.to_hex(), a.identifier)
                }),
                oids: Vec::new(),
            });
        }
        for s in self.states.values().flatten() {
            out.push(EntryView {
                kind: EntryKind::State,
                pubkey: Some(s.author.to_hex()),
                identifier: Some(s.identifier.clone()),
                event_id: s.event.id.to_hex(),
                age: age(s.created_at),
                time_left: left(s.expires_at),
                soft_expired: false,
                waiting_for: Some("git objects for every ref it declares".to_owned()),
                oids: state_oids(&s.event),
            });
        }
        for (id, p) in &self.prs {
            let (kind, pubkey, waiting_for) = match &p.event {
                Some(e) => (
                    EntryKind::Pr,
                    Some(e.pubkey.to_hex()),
                    format!("commit {} pushed to refs/nostr/{}", p.commit, id.to_hex()),
                ),
                None if p.cleanup_pending => (
                    EntryKind::Placeholder,
                    None,
                    "its expired refs/nostr ref to be deleted".to_owned(),
                ),
                None => (
                    EntryKind::Placeholder,
                    None,
                    format!("the PR event {} (commit {})", id.to_hex(), p.commit),
                ),
            };
            out.push(EntryView {
                kind,
                pubkey,
                identifier: p.identifiers().next().map(str::to_owned),
                event_id: id.to_hex(),
                age: age(p.created_at),
                time_left: left(p.expires_at),
                soft_expired: false,
                waiting_for: Some(waiting_for),
                oids: vec![p.commit.clone()],
            });
        }
        out.sort_by(|a, b| {
            (a.time_left, a.kind, &a.event_id).cmp(&(b.time_left, b.kind, &b.event_id))
        });
        out
    }

    /// The `limit` most recently expired event ids, newest first, for an operator view.
    pub fn expired_listing(&self, limit: usize) -> Vec<ExpiredView> {
        let wall = self.clock.wall();
        self.expired
            .newest(limit)
            .map(|(id, at)| ExpiredView {
                event_id: id.to_hex(),
                ago: wall.duration_since(at).unwrap_or(Duration::ZERO),
            })
            .collect()
    }

    /// When the next sweep has something to do (the earliest armed deadline), if anything is
    /// armed. Lets the expiry task sleep exactly until then.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.next()
    }

    /// Whether `author` may add one more entry, without adding it: lets the caller refuse
    /// before doing expensive work (creating a bare repository) for an event the caps would
    /// refuse anyway.
    /// `origin`: the client address it comes from (keyed by [`crate::names::client_key::limit_key`]).
    pub fn check_room(&self, author: &PublicKey, origin: Option<IpAddr>) -> Result<(), PurgatoryFull> {
        self.counts.check_entry(&self.config.caps, author, origin)
    }

    // ---- internal bookkeeping shared by the API files ----

    fn expires_at_of(&self, key: &EntryKey) -> Option<Instant> {
        match key {
            EntryKey::Announcement { owner, identifier } => self
                .announcements
                .get(identifier)
                .and_then(|m| m.get(owner))
                .map(|a| a.expires_at),
            EntryKey::State {
                identifier,
                event_id,
            } => self
                .states
                .get(identifier)
                .and_then(|v| v.iter().find(|s| s.event.id == *event_id))
                .map(|s| s.expires_at),
            EntryKey::Pr { event_id } => self
                .prs
                .get(event_id)
                .filter(|p| !p.cleanup_pending)
                .map(|p| p.expires_at),
        }
    }

    /// Removes the armed deadline of `key`, or its deferral under one of `identifiers`.
    fn unschedule<'a>(
        &mut self,
        key: &EntryKey,
        at: Instant,
        identifiers: impl IntoIterator<Item = &'a str>,
    ) {
        if self.deadlines.disarm(at, key) {
            return;
        }
        for identifier in identifiers {
            if let Some(set) = self.deferred.get_mut(identifier) {
                if set.remove(key) {
                    if set.is_empty() {
                        self.deferred.remove(identifier);
                    }
                    return;
                }
            }
        }
    }

    fn attach_announcement(&mut self, entry: AnnouncementEntry) {
        let key = EntryKey::Announcement {
            owner: entry.owner,
            identifier: entry.identifier.clone(),
        };
        self.by_id.insert(entry.event.id, key.clone());
        self.counts.add_announcement(entry.owner, entry.soft_expired, entry.origin);
        self.counts.add_bytes(&entry.event);
        self.deadlines.arm(entry.expires_at, key.clone());
        self.announcements
            .entry(entry.identifier.clone())
            .or_default()
            .insert(entry.owner, entry);
        self.journal_entry(&key);
    }

    fn detach_announcement(
        &mut self,
        owner: &PublicKey,
        identifier: &str,
    ) -> Option<AnnouncementEntry> {
        let by_owner = self.announcements.get_mut(identifier)?;
        let entry = by_owner.remove(owner)?;
        if by_owner.is_empty() {
            self.announcements.remove(identifier);
        }
        self.by_id.remove(&entry.event.id);
        self.counts.remove_announcement(owner, entry.soft_expired, entry.origin);
        self.counts.remove_bytes(&entry.event);
        let key = EntryKey::Announcement {
            owner: *owner,
            identifier: identifier.to_owned(),
        };
        self.unschedule(&key, entry.expires_at, [identifier]);
        self.journal_removed(&key);
        Some(entry)
    }

    fn attach_state(&mut self, entry: StateEntry) {
        let key = EntryKey::State {
            identifier: entry.identifier.clone(),
            event_id: entry.event.id,
        };
        self.by_id.insert(entry.event.id, key.clone());
        self.counts.add_entry(entry.author, entry.origin);
        self.counts.add_bytes(&entry.event);
        self.deadlines.arm(entry.expires_at, key.clone());
        self.states
            .entry(entry.identifier.clone())
            .or_default()
            .push(entry);
        self.journal_entry(&key);
    }

    fn detach_state(&mut self, identifier: &str, event_id: &EventId) -> Option<StateEntry> {
        let list = self.states.get_mut(identifier)?;
        let pos = list.iter().position(|s| s.event.id == *event_id)?;
        let entry = list.remove(pos);
        if list.is_empty() {
            self.states.remove(identifier);
        }
        self.by_id.remove(event_id);
        self.counts.remove_entry(&entry.author, entry.origin);
        self.counts.remove_bytes(&entry.event);
        let key = EntryKey::State {
            identifier: identifier.to_owned(),
            event_id: *event_id,
        };
        self.unschedule(&key, entry.expires_at, [identifier]);
        self.journal_removed(&key);
        Some(entry)
    }

    fn attach_pr(&mut self, event_id: EventId, entry: PrEntry) {
        match &entry.event {
            Some(e) => {
                self.counts.add_entry(e.pubkey, entry.origin);
                self.counts.add_bytes(e);
            }
            None => {
                self.counts.add_placeholder(entry.origin);
                for (address, bytes) in entry.unsigned_shares() {
                    self.counts.add_unsigned(address, bytes);
                }
            }
        }
        for d in &entry.destinations {
            self.counts.add_destination(d.clone());
        }
        if !entry.cleanup_pending {
            self.deadlines
                .arm(entry.expires_at, EntryKey::Pr { event_id });
        }
        self.prs.insert(event_id, entry);
        self.journal_entry(&EntryKey::Pr { event_id });
    }

    fn detach_pr(&mut self, event_id: &EventId) -> Option<PrEntry> {
        let entry = self.prs.remove(event_id)?;
        match &entry.event {
            Some(e) => {
                self.counts.remove_entry(&e.pubkey, entry.origin);
                self.counts.remove_bytes(e);
            }
            None => {
                self.counts.remove_placeholder(entry.origin);
                for (address, bytes) in entry.unsigned_shares() {
                    self.counts.remove_unsigned(address, bytes);
                }
            }
        }
        for d in &entry.destinations {
            self.counts.remove_destination(d);
        }
        let key = EntryKey::Pr {
            event_id: *event_id,
        };
        let identifiers: Vec<String> = entry.identifiers().map(str::to_owned).collect();
        self.unschedule(
            &key,
            entry.expires_at,
            identifiers.iter().map(String::as_str),
        );
        self.journal_removed(&key);
        Some(entry)
    }

    /// Moves the deadline of an existing entry (already updated in the entry by the caller).
    fn rearm(&mut self, key: EntryKey, old: Instant, new: Instant, identifiers: &[String]) {
        self.unschedule(&key, old, identifiers.iter().map(String::as_str));
        self.deadlines.arm(new, key.clone());
        self.journal_entry(&key);
    }

    /// Checks the invariants (tests only): counts, index and deadlines agree with the maps.
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        let mut per_author: HashMap<PublicKey, usize> = HashMap::new();
        let mut per_address: HashMap<IpAddr, usize> = HashMap::new();
        let mut placeholders_per_address: HashMap<IpAddr, usize> = HashMap::new();
        let mut armed = 0;
        let deferred: BTreeSet<&EntryKey> = self.deferred.values().flatten().collect();
        let mut check = |key: EntryKey, at: Instant, armable: bool| {
            if !armable {
                assert!(
                    !self.deadlines.contains(at, &key),
                    "{key:?} armed while pending"
                );
                return;
            }
            let is_armed = self.deadlines.contains(at, &key);
            assert!(
                is_armed != deferred.contains(&key),
                "{key:?} armed xor deferred"
            );
            if is_armed {
                armed += 1;
            }
        };
        let mut soft_expired = 0;
        for (ident, m) in &self.announcements {
            for (owner, a) in m {
                assert_eq!((&a.identifier, &a.owner), (ident, owner));
                if a.soft_expired {
                    soft_expired += 1;
                } else {
                    *per_author.entry(*owner).or_default() += 1;
                    if let Some(o) = a.origin {
                        *per_address.entry(o).or_default() += 1;
                    }
                }
                let key = EntryKey::Announcement {
                    owner: *owner,
                    identifier: ident.clone(),
                };
                assert_eq!(self.by_id.get(&a.event.id), Some(&key));
                check(key, a.expires_at, true);
            }
        }
        for (ident, v) in &self.states {
            assert!(!v.is_empty());
            for s in v {
                *per_author.entry(s.author).or_default() += 1;
                if let Some(o) = s.origin {
                    *per_address.entry(o).or_default() += 1;
                }
                let key = EntryKey::State {
                    identifier: ident.clone(),
                    event_id: s.event.id,
                };
                assert_eq!(self.by_id.get(&s.event.id), Some(&key));
                check(key, s.expires_at, true);
            }
        }
        let mut placeholders = 0;
        let mut per_repo: HashMap<RepoId, usize> = HashMap::new();
        let mut unsigned_per_address: HashMap<IpAddr, u64> = HashMap::new();
        let mut unsigned_total = 0;
        for (id, p) in &self.prs {
            if p.is_placeholder() {
                for (address, bytes) in p.unsigned_shares() {
                    unsigned_total += bytes;
                    if let Some(o) = address {
                        *unsigned_per_address.entry(o).or_default() += bytes;
                    }
                }
            } else {
                assert_eq!(p.unsigned_shares().count(), 0, "a pull request event's data is signed");
            }
            let by_address = match &p.event {
                Some(e) => {
                    *per_author.entry(e.pubkey).or_default() += 1;
                    &mut per_address
                }
                None => {
                    placeholders += 1;
                    &mut placeholders_per_address
                }
            };
            if let Some(o) = p.origin {
                *by_address.entry(o).or_default() += 1;
            }
            for d in &p.destinations {
                *per_repo.entry(d.clone()).or_default() += 1;
            }
            check(
                EntryKey::Pr { event_id: *id },
                p.expires_at,
                !p.cleanup_pending,
            );
        }
        assert_eq!(armed, self.deadlines.len(), "stray deadlines");
        assert_eq!(per_author, self.counts.per_author);
        assert_eq!(per_address, self.counts.per_address);
        assert_eq!(placeholders_per_address, self.counts.placeholders_per_address);
        assert_eq!(soft_expired, self.counts.soft_expired);
        assert_eq!(per_author.values().sum::<usize>(), self.counts.total);
        assert_eq!(placeholders, self.counts.placeholders_total);
        assert_eq!(per_repo, self.counts.placeholders_per_repo);
        assert_eq!(unsigned_per_address, self.counts.unsigned_per_address);
        assert_eq!(unsigned_total, self.counts.unsigned_total);
        let indexed = self
            .announcements
            .values()
            .map(BTreeMap::len)
            .sum::<usize>()
            + self.states.values().map(Vec::len).sum::<usize>();
        assert_eq!(indexed, self.by_id.len());
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn purgatory_can_live_behind_a_mutex_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<std::sync::Mutex<Purgatory>>();
    }

    #[test]
    fn listing_shows_every_entry_soonest_first() {
        let (clock, mut p) = purgatory();
        let ann = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ann, "repo").unwrap();
        clock.advance(Duration::from_secs(60));
        let s = signed(1, STATE, 0);
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        clock.advance(Duration::from_secs(60));
        let pr = signed(2, PR, 0);
        p.add_pr(pr.clone(), "abc".into(), vec![repo(0, "repo")])
            .unwrap();
        clock.advance(Duration::from_secs(60));
        let ph = EventId::from_byte_array([3; 32]);
        p.add_pr_placeholder(ph, "def".into(), repo(1, "other"))
            .unwrap();
        clock.advance(Duration::from_secs(60));

        let view = p.listing();
        let kinds: Vec<EntryKind> = view.iter().map(|v| v.kind).collect();
        assert_eq!(
            kinds,
            [
                EntryKind::Announcement,
                EntryKind::State,
                EntryKind::Pr,
                EntryKind::Placeholder
            ]
        );
        let a = &view[0];
        assert_eq!(a.pubkey.as_deref(), Some(ann.pubkey.to_hex().as_str()));
        assert_eq!(a.identifier.as_deref(), Some("repo"));
        assert_eq!(a.event_id, ann.id.to_hex());
        assert_eq!(a.age, Duration::from_secs(240));
        assert_eq!(a.time_left, MIN30 - Duration::from_secs(240));
        assert!(!a.soft_expired);
        assert_eq!(view[2].pubkey.as_deref(), Some(pr.pubkey.to_hex().as_str()));
        assert!(view[2]
            .waiting_for
            .as_deref()
            .unwrap()
            .contains("commit abc"));
        assert_eq!(view[3].pubkey, None);
        assert_eq!(view[3].identifier.as_deref(), Some("other"));
        assert_eq!(view[3].age, Duration::from_secs(60));

        let stats = p.stats();
        assert_eq!(
            (
                stats.announcements,
                stats.states,
                stats.prs,
                stats.placeholders,
                stats.deadlines
            ),
            (1, 1, 1, 1, 4)
        );
    }

    #[test]
    fn soft_expired_announcement_is_listed_as_such() {
        let (clock, mut p) = purgatory();
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 0), "repo").unwrap();
        clock.advance(MIN30);
        p.sweep();
        let view = p.listing();
        assert!(view[0].soft_expired);
        assert_eq!(view[0].time_left, H24);
        assert!(view[0].waiting_for.as_deref().unwrap().contains("revive"));
        assert_eq!(p.stats().soft_expired_announcements, 1);
    }

    #[test]
    fn next_deadline_check_room_and_expired_listing() {
        let config = PurgatoryConfig {
            caps: Caps {
                per_author: 1,
                ..Caps::default()
            },
            ..PurgatoryConfig::default()
        };
        let (clock, mut p) = testutil::purgatory_with(config);
        assert_eq!(p.next_deadline(), None);
        let s = signed(0, STATE, 0);
        assert!(p.check_room(&s.pubkey, None).is_ok());
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        assert_eq!(p.next_deadline(), Some(clock.now() + MIN30));
        assert_eq!(p.check_room(&s.pubkey, None).unwrap_err().scope, CapScope::Author);
        assert_eq!(p.stats().states, 1, "check_room adds nothing");
        let pr = signed(1, PR, 0);
        p.add_pr(pr.clone(), "c0ffee".into(), vec![repo(0, "repo")])
            .unwrap();
        let view = p.listing();
        assert_eq!(
            view.iter().find(|v| v.kind == EntryKind::Pr).unwrap().oids,
            ["c0ffee"]
        );
        clock.advance(MIN30);
        p.sweep();
        clock.advance(Duration::from_secs(5));
        let expired = p.expired_listing(10);
        assert_eq!(expired.len(), 2);
        assert!(expired.iter().any(|e| e.event_id == s.id.to_hex()));
        assert_eq!(expired[0].ago, Duration::from_secs(5));
        assert_eq!(p.expired_listing(1).len(), 1);
        assert_eq!(p.next_deadline(), None);
    }
}
