//! The one owner of the in-memory purgatory.
//!
//! The model itself ([`grasp_state::purgatory::Purgatory`]) is pure and single-threaded.
//! [`SharedPurgatory`] puts it behind a mutex that nothing else touches: every method below is
//! one short critical section (no I/O, no `.await`, no other lock taken inside), and returns owned
//! data, so a caller can never hold the purgatory across git, the store or the network. In the
//! lock order (docs/architecture.md, "Lock order") the purgatory is the innermost lock.
//!
//! Once the journal is attached ([`SharedPurgatory::attach_journal`]), every critical section
//! hands the records of its changes to the journal writer before the lock is released (the
//! [`Guard`] does it on drop), so the journal's order is the order of the changes. The methods
//! that hold an event return a [`Durable`]: its caller answers `OK` only after waiting for it.

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use grasp_state::authority::maintainers::MaintainerSet;
use grasp_state::purgatory::{
    AnnouncementAdded, AnnouncementEntry, Coordinate, Extension, PlaceholderError, Purgatory, PurgatoryFull,
    PurgatorySnapshot, Removed, RepoId, StateEntry, SweepAction, UnsignedFull,
};
use nostr::prelude::{Event, EventId, PublicKey, Timestamp};

use crate::grasp::journal::{Durable, Journal};

/// Why an event could not be held.
#[derive(Debug)]
pub enum HoldRefused {
    /// It already expired in the purgatory once (kept in `expired_events`).
    Expired,
    /// A cap is reached.
    Full(PurgatoryFull),
}

/// Why a push's git-first placeholders could not be reserved.
#[derive(Debug)]
pub enum ReserveRefused {
    /// Their bytes would take the pusher's address, or everyone, past the unsigned budget
    /// (docs/protocol.md#caps).
    Unsigned(UnsignedFull),
    /// A placeholder cap, or another commit already waiting under an id: one reason per ref.
    Placeholders(Vec<String>),
}

impl ReserveRefused {
    /// The lines the pusher is told.
    pub fn reasons(&self) -> Vec<String> {
        match self {
            ReserveRefused::Unsigned(full) => vec![full.to_string()],
            ReserveRefused::Placeholders(reasons) => reasons.clone(),
        }
    }
}

/// How many expired event ids the operator listing shows (newest first).
const LISTED_EXPIRED: usize = 1000;
/// How many addresses holding unsigned data the operator listing names (most first).
const LISTED_UNSIGNED_ADDRESSES: usize = 20;

/// The answer to `GET /v1/purgatory`: every held entry (soonest expiry first), the most recently
/// expired event ids, counts, and the repository work deferred because a repository stayed
/// locked past its bound (`grasp::deferred`, soonest retry first).
#[derive(Debug, serde::Serialize)]
pub struct PurgatoryListing {
    pub version: u32,
    pub entries: Vec<grasp_state::purgatory::EntryView>,
    pub expired_events: Vec<grasp_state::purgatory::ExpiredView>,
    pub stats: grasp_state::purgatory::PurgatoryStats,
    pub deferred: Vec<grasp_state::git::deferred::DeferredView>,
    /// The deferred work's figures: entries, authors, bounds, and work dropped since start.
    pub deferred_stats: grasp_state::git::deferred::DeferredStats,
    /// Unsigned data of the git-first placeholders: in total, and the addresses holding most.
    pub unsigned: grasp_state::purgatory::unsigned::UnsignedView,
    /// Pull request data no maintainer signed (`grasp::budgets`): sums, and the authors and
    /// addresses keeping most.
    pub contributors: grasp_state::trust::contributor_data::ContributorView,
}

impl PurgatoryListing {
    pub fn of(p: &Purgatory) -> Self {
        PurgatoryListing {
            version: grasp_state::contract::hook_api::HOOK_API_VERSION,
            entries: p.listing(),
            expired_events: p.expired_listing(LISTED_EXPIRED),
            stats: p.stats(),
            deferred: Vec::new(),
            deferred_stats: Default::default(),
            unsigned: p.unsigned_listing(LISTED_UNSIGNED_ADDRESSES),
            contributors: Default::default(),
        }
    }
}

/// The purgatory, shared by the WebSocket side, the hook API, expiry and background sync.
pub struct SharedPurgatory {
    inner: Mutex<Purgatory>,
    journal: OnceLock<Journal>,
}

/// The purgatory locked: on drop, the records of the changes made through it go to the journal
/// (still inside the critical section).
struct Guard<'a> {
    purgatory: MutexGuard<'a, Purgatory>,
    journal: Option<&'a Journal>,
}

impl Guard<'_> {
    /// Sends the records of the changes so far and returns what to wait for before answering.
    fn durable(&mut self) -> Durable {
        match self.journal {
            Some(journal) => journal.append(self.purgatory.take_journal(), true),
            None => Durable::now(),
        }
    }
}

impl Deref for Guard<'_> {
    type Target = Purgatory;
    fn deref(&self) -> &Purgatory {
        &self.purgatory
    }
}

impl DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Purgatory {
        &mut self.purgatory
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(journal) = self.journal {
            let records = self.purgatory.take_journal();
            if !records.is_empty() {
                let _ = journal.append(records, false);
            }
        }
    }
}

impl SharedPurgatory {
    pub fn new(purgatory: Purgatory) -> Self {
        SharedPurgatory { inner: Mutex::new(purgatory), journal: OnceLock::new() }
    }

    fn lock(&self) -> Guard<'_> {
        // A panic inside one of these short sections leaves the model as consistent as any
        // single method call does; keep serving rather than poisoning every later request.
        let purgatory = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Guard { purgatory, journal: self.journal.get() }
    }

    /// From now on every change is journalled (startup, after the restore and before serving).
    pub fn attach_journal(&self, journal: Journal) {
        let mut p = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        p.start_journal();
        let _ = self.journal.set(journal);
    }

    /// The journal, once attached.
    pub fn journal(&self) -> Option<&Journal> {
        self.journal.get()
    }

    /// A checkpoint's snapshot, and the journal cut made in the same critical section: resolves
    /// to the first segment the snapshot does not cover.
    pub fn snapshot_and_cut(&self) -> (PurgatorySnapshot, Option<tokio::sync::oneshot::Receiver<u64>>) {
        let p = self.lock();
        let snapshot = p.snapshot();
        let cut = p.journal.map(Journal::cut);
        (snapshot, cut)
    }

    // ---- Views -------------------------------------------------------------------------------

    /// The operator listing (`GET /v1/purgatory`).
    pub fn listing(&self) -> PurgatoryListing {
        PurgatoryListing::of(&self.lock())
    }

    /// Counts per entry type (the metrics scrape).
    pub fn stats(&self) -> grasp_state::purgatory::PurgatoryStats {
        self.lock().stats()
    }

    /// A copy for the checkpoint writer (pointers and plain fields; serialised outside the lock).
    pub fn snapshot(&self) -> PurgatorySnapshot {
        self.lock().snapshot()
    }

    /// The held announcements, soft-expired ones included, whose state events relay-to-relay
    /// event sync keeps pulling (docs/protocol.md#soft-expiry).
    pub fn state_sync_registrations(&self) -> Vec<grasp_state::purgatory::StateSyncRegistration> {
        self.lock().state_sync_registrations()
    }

    /// Identifiers some held event waits for.
    pub fn waiting_identifiers(&self) -> BTreeSet<String> {
        self.lock().waiting_identifiers()
    }

    /// When the expiry task should wake: the next deadline, but no later than `now + longest`
    /// (capped at a quarter of the entry TTL so short test TTLs stay precise).
    pub fn next_wake(&self, longest: Duration) -> Instant {
        let p = self.lock();
        let longest = longest.min(p.config().entry_ttl / 4).max(Duration::from_millis(10));
        let latest = Instant::now() + longest;
        p.next_deadline().map_or(latest, |at| at.min(latest))
    }

    /// Ids of `author`'s held pull request events without git-first refs to clean up.
    pub fn pr_events_by(&self, author: &PublicKey) -> Vec<EventId> {
        self.lock().pr_events_by(author)
    }

    /// What `author` has waiting (docs/protocol.md#trust, curation): the identifiers of the
    /// held announcements it owns, and (identifier, id) of its held state events.
    pub fn held_by(&self, author: &PublicKey) -> (Vec<String>, Vec<(String, EventId)>) {
        let p = self.lock();
        let announcements = p.announcements().filter(|a| a.owner == *author).map(|a| a.identifier.clone()).collect();
        let mut states = Vec::new();
        for identifier in p.waiting_identifiers() {
            for s in p.states_for(&identifier).iter().filter(|s| s.author == *author) {
                states.push((identifier.clone(), s.event.id));
            }
        }
        (announcements, states)
    }

    /// Was this event held once and expired without its git data?
    pub fn is_expired(&self, id: &EventId) -> bool {
        self.lock().is_expired(id)
    }

    /// Every held announcement event (soft-expired ones included), for the relay-sync interest
    /// (pointers, copied under the lock; bounded by `--purgatory-total`).
    pub fn held_announcement_events(&self) -> Vec<Arc<Event>> {
        self.lock().announcements().map(|e| e.event.clone()).collect()
    }

    /// The held announcement events of `identifier`.
    pub fn announcement_events(&self, identifier: &str) -> Vec<Arc<Event>> {
        self.lock().announcements_for(identifier).into_iter().map(|e| e.event.clone()).collect()
    }

    /// The held announcements and states of `identifier` (what another replica of this set asks
    /// for before deciding a push, `crate::peers::replica_reads`).
    pub fn repository_events(&self, identifier: &str) -> Vec<Arc<Event>> {
        let p = self.lock();
        let announcements = p.announcements_for(identifier).into_iter().map(|e| e.event.clone());
        announcements.chain(p.states_for(identifier).iter().map(|e| e.event.clone())).collect()
    }

    /// Runs `delete` while `owner`'s held announcement of `identifier` is soft-expired, inside
    /// the critical section: revival clears the flag under the same lock before recreating the
    /// repository, so the two cannot interleave. `delete` must be one quick filesystem step (a
    /// rename aside); `None` means the announcement was revived (or is gone) and nothing ran.
    pub fn while_soft_expired<R>(&self, owner: &PublicKey, identifier: &str, delete: impl FnOnce() -> R) -> Option<R> {
        let p = self.lock();
        p.get_announcement(owner, identifier).is_some_and(|a| a.soft_expired).then(delete)
    }

    /// Held state events of `identifier` authored inside `set` (unparsed; parse outside).
    pub fn state_events(&self, identifier: &str, set: &MaintainerSet) -> Vec<Arc<Event>> {
        self.lock()
            .states_for(identifier)
            .iter()
            .filter(|e| set.contains(&e.author))
            .map(|e| e.event.clone())
            .collect()
    }

    /// Held state events of `identifier` authored outside `set`, with their authors (why a push
    /// matching one is refused, `grasp::authorize`).
    pub fn state_events_outside(&self, identifier: &str, set: &MaintainerSet) -> Vec<(PublicKey, Arc<Event>)> {
        self.lock()
            .states_for(identifier)
            .iter()
            .filter(|e| !set.contains(&e.author))
            .map(|e| (e.author, e.event.clone()))
            .collect()
    }

    /// Does `author` have a held state event for `identifier`?
    pub fn holds_state_by(&self, identifier: &str, author: &PublicKey) -> bool {
        self.lock().states_for(identifier).iter().any(|s| s.author == *author)
    }

    /// Is a pull request event (not just a git-first placeholder) held under `id`?
    pub fn holds_pr_event(&self, id: &EventId) -> bool {
        self.lock().find_pr(id).is_some_and(|e| e.event.is_some())
    }

    /// The pull request event held under `id` (placeholders excluded).
    pub fn held_pr_event(&self, id: &EventId) -> Option<Arc<Event>> {
        self.lock().find_pr(id).and_then(|e| e.event.clone())
    }

    /// The repositories a git-first push wrote `refs/nostr/<id>` into, while `id` is only a
    /// placeholder (empty otherwise).
    pub fn placeholder_destinations(&self, id: &EventId) -> Vec<RepoId> {
        self.lock().find_pr(id).filter(|e| e.event.is_none()).map(|e| e.destinations.clone()).unwrap_or_default()
    }

    /// The unsigned data a git-first placeholder `id` holds, per address that pushed it (`None`
    /// when `id` is no placeholder).
    pub fn placeholder_unsigned(&self, id: &EventId) -> Option<Vec<(Option<IpAddr>, u64)>> {
        self.lock().find_pr(id).filter(|e| e.event.is_none()).map(|e| e.unsigned_shares().collect())
    }

    /// The GRASP-06 contributor repositories of `identifier` held pull requests wait for.
    pub fn contributor_repos_for(&self, identifier: &str) -> BTreeSet<RepoId> {
        self.lock().contributor_repos_for(identifier)
    }

    /// The commit of the pull request event held under `id` (placeholders excluded).
    pub fn held_pr_commit(&self, id: &EventId) -> Option<String> {
        self.lock().find_pr(id).and_then(|e| e.event.as_ref().map(|_| e.commit.clone()))
    }

    /// Pull request events (not placeholders) held for `repo`, with their commits.
    pub fn pr_events_for(&self, repo: &RepoId) -> Vec<(Arc<Event>, String)> {
        self.lock().prs_for(repo).into_iter().filter_map(|e| e.event.clone().map(|ev| (ev, e.commit.clone()))).collect()
    }

    /// What a prune of `repo` must keep: the held state events of its identifier (unparsed;
    /// parse outside) and the commits of the pull requests and placeholders held for it.
    pub fn held_objects(&self, repo: &RepoId) -> (Vec<Arc<Event>>, Vec<String>) {
        let p = self.lock();
        let states = p.states_for(&repo.identifier).iter().map(|e| e.event.clone()).collect();
        let prs = p.prs_for(repo).into_iter().map(|e| e.commit.clone()).collect();
        (states, prs)
    }

    /// Commits of every pull request entry held for `repo`.
    pub fn pr_commits_for(&self, repo: &RepoId) -> Vec<String> {
        self.lock().prs_for(repo).into_iter().map(|e| e.commit.clone()).collect()
    }

    /// Pull request events held for any of `repos`, each once.
    pub fn pr_events_for_any(&self, repos: &[RepoId]) -> Vec<Arc<Event>> {
        let p = self.lock();
        let mut seen = HashSet::new();
        repos
            .iter()
            .flat_map(|r| p.prs_for(r))
            .filter_map(|entry| entry.event.clone())
            .filter(|ev| seen.insert(ev.id))
            .collect()
    }

    /// Room for one more held entry by `author`, sent from `address` (as counted)?
    pub fn check_room(&self, author: &PublicKey, address: Option<IpAddr>) -> Result<(), PurgatoryFull> {
        self.lock().check_room(author, address)
    }

    // ---- Holding ------------------------------------------------------------------------------

    /// Holds (or replaces) `owner`'s announcement of `identifier`, whose bare repository exists.
    pub fn hold_announcement(
        &self,
        event: impl Into<Arc<Event>>,
        owner: PublicKey,
        identifier: String,
        relays: BTreeSet<String>,
        address: Option<IpAddr>,
    ) -> Result<(AnnouncementAdded, Durable), PurgatoryFull> {
        let mut p = self.lock();
        let added = p.add_announcement_from(event, owner, identifier, relays, address)?;
        Ok((added, p.durable()))
    }

    /// Holds a state event sent from `address` (as counted; `None`: relay sync) unless it
    /// expired here before. `Ok(false)`: already held.
    pub fn hold_state(&self, event: impl Into<Arc<Event>>, author: PublicKey, identifier: String, address: Option<IpAddr>) -> Result<(bool, Durable), HoldRefused> {
        let event = event.into();
        let mut p = self.lock();
        if p.is_expired(&event.id) {
            return Err(HoldRefused::Expired);
        }
        let added = p.add_state_from(event, author, identifier, address).map_err(HoldRefused::Full)?;
        Ok((added, p.durable()))
    }

    /// Holds a pull request event for `targets`, sent from `address`, unless it expired here before.
    pub fn hold_pr(&self, event: impl Into<Arc<Event>>, commit: String, targets: Vec<RepoId>, address: Option<IpAddr>) -> Result<(bool, Durable), HoldRefused> {
        let event = event.into();
        let mut p = self.lock();
        if p.is_expired(&event.id) {
            return Err(HoldRefused::Expired);
        }
        let added = p.add_pr_from(event, commit, targets, address).map_err(HoldRefused::Full)?;
        Ok((added, p.durable()))
    }

    /// Records git-first placeholders for `(event id, commit)` pushed to `refs/nostr/` of
    /// `repo` by a push bringing `incoming` bytes of objects. All or nothing: if the bytes do not
    /// fit the unsigned budget nothing is recorded; if one placeholder cannot be recorded, the
    /// ones created here are dropped again and one reason per failure is returned. `address`:
    /// the pusher's, as counted. The bytes are shared out over the placeholders (the first takes
    /// the remainder), so each carries its part out of the budget when it goes
    /// (docs/protocol.md#caps).
    pub fn reserve_placeholders(
        &self,
        repo: &RepoId,
        placeholders: &[(EventId, String)],
        address: Option<IpAddr>,
        incoming: u64,
    ) -> Result<Durable, ReserveRefused> {
        let mut p = self.lock();
        if placeholders.is_empty() {
            return Ok(p.durable());
        }
        p.check_unsigned(address, incoming).map_err(ReserveRefused::Unsigned)?;
        let mut created = Vec::new();
        let mut reasons = Vec::new();
        for (id, commit) in placeholders {
            let new = p.find_pr(id).is_none();
            match p.add_pr_placeholder_from(*id, commit.clone(), repo.clone(), address) {
                Ok(()) if new => created.push(*id),
                Ok(()) => {}
                Err(e) => {
                    let prefix = match &e {
                        PlaceholderError::Full(full) => full.ok_prefix(),
                        PlaceholderError::CommitMismatch { .. } => "invalid",
                    };
                    reasons.push(format!("refs/nostr/{}: {prefix}: {e}", id.to_hex()))
                }
            }
        }
        if !reasons.is_empty() {
            for id in created {
                p.remove_pr(&id);
            }
            return Err(ReserveRefused::Placeholders(reasons));
        }
        let n = placeholders.len() as u64;
        for (i, (id, _)) in placeholders.iter().enumerate() {
            let share = incoming / n + if i == 0 { incoming % n } else { 0 };
            p.add_unsigned_bytes(id, share, address);
        }
        Ok(p.durable())
    }

    /// Records a placeholder for a `refs/nostr/<id>` ref that landed in `repo`, unless a pull
    /// request event is already held under that id. `address`: the pusher's, as counted.
    pub fn record_placeholder(&self, id: EventId, commit: String, repo: RepoId, address: Option<IpAddr>) -> Option<Result<(), PlaceholderError>> {
        let mut p = self.lock();
        if p.find_pr(&id).is_some_and(|e| e.event.is_some()) {
            return None;
        }
        Some(p.add_pr_placeholder_from(id, commit, repo, address))
    }

    // ---- Timers -------------------------------------------------------------------------------

    /// Resets the expiry of held state events `ids` of `identifier` (git data is arriving).
    pub fn extend_states(&self, identifier: &str, ids: &[EventId]) {
        let mut p = self.lock();
        let ttl = p.config().entry_ttl;
        p.extend_expiry(identifier, ids, ttl);
    }

    /// Resets the expiry of `owner`'s held announcement; `revived` says it was soft-expired.
    pub fn extend_announcement(&self, owner: &PublicKey, identifier: &str) -> Option<Extension> {
        let mut p = self.lock();
        let ttl = p.config().entry_ttl;
        p.extend_announcement_expiry(owner, identifier, ttl)
    }

    /// Marks `identifier` as being fetched by background sync (its entries' expiry waits).
    pub fn set_sync_running(&self, identifier: &str, running: bool) {
        self.lock().set_sync_running(identifier, running);
    }

    /// Held state events due to expire now (see [`Purgatory::due_states`]).
    pub fn due_states(&self) -> Vec<(String, Arc<Event>)> {
        self.lock().due_states()
    }

    /// Pops what is due: the caller carries out the actions.
    pub fn sweep(&self) -> Vec<SweepAction> {
        self.lock().sweep()
    }

    /// Whether `id` is still a git-first placeholder for `commit` waiting for its refs to be
    /// removed (no event took it over, no push re-armed it). Asked under each destination's
    /// repository lock, right before its ref is deleted.
    pub fn placeholder_cleanup_pending(&self, id: &EventId, commit: &str) -> bool {
        self.lock().is_cleanup_pending(id, commit)
    }

    /// The expired placeholder's refs in `destinations` are gone: forget those destinations, and
    /// the placeholder once none remain. Called under that repository's lock, so a push of the same
    /// commit there afterwards records the destination again. Returns whether the record is gone.
    pub fn placeholder_cleaned(&self, id: &EventId, destinations: &[RepoId]) -> bool {
        self.lock().placeholder_cleaned(id, destinations)
    }

    /// Some ref of an expired placeholder could not be removed: try again later, if the
    /// placeholder still waits for its cleanup. Returns the delay, or `None` when nothing is
    /// left to retry.
    pub fn retry_placeholder_cleanup(&self, id: &EventId) -> Option<Duration> {
        let mut p = self.lock();
        let retry = p.config().placeholder_retry;
        p.retain_placeholder_for_retry(id, retry).then_some(retry)
    }

    // ---- Leaving ------------------------------------------------------------------------------

    /// Removes a held state event (released or superseded).
    pub fn remove_state(&self, identifier: &str, id: &EventId) -> Option<StateEntry> {
        self.lock().remove_state_event(identifier, id)
    }

    /// Removes a held pull request or placeholder.
    pub fn remove_pr(&self, id: &EventId) {
        self.lock().remove_pr(id);
    }

    /// Removes the placeholder under `id`, if that is all that is held there.
    pub fn remove_placeholder(&self, id: &EventId) {
        let mut p = self.lock();
        if p.find_pr(id).is_some_and(|entry| entry.event.is_none()) {
            p.remove_pr(id);
        }
    }

    /// `owner`'s held announcement for `identifier`, to be stored before it is taken out
    /// ([`Self::remove_promoted_announcement`]).
    pub fn held_announcement(&self, owner: &PublicKey, identifier: &str) -> Option<Arc<Event>> {
        self.lock().get_announcement(owner, identifier).map(|a| a.event.clone())
    }

    /// Takes `owner`'s announcement out once `stored` (the event now in the store) is what is
    /// held: a replacement that arrived meanwhile stays held.
    pub fn remove_promoted_announcement(&self, owner: &PublicKey, identifier: &str, stored: &EventId) {
        let mut p = self.lock();
        if p.get_announcement(owner, identifier).is_some_and(|a| a.event.id == *stored) {
            p.promote_announcement(owner, identifier);
        }
    }

    /// The held state event `id` of `identifier`, to be stored before it is removed.
    pub fn held_state(&self, identifier: &str, id: &EventId) -> Option<Arc<Event>> {
        self.lock().states_for(identifier).iter().find(|e| e.event.id == *id).map(|e| e.event.clone())
    }

    /// Removes `owner`'s held announcement (the caller deletes its repository).
    pub fn remove_announcement(&self, owner: &PublicKey, identifier: &str) -> Option<AnnouncementEntry> {
        self.lock().remove_announcement(owner, identifier)
    }

    /// Removes what a stored kind-5 deletion by `author` names.
    pub fn remove_deleted(
        &self,
        author: &PublicKey,
        ids: &[EventId],
        coordinates: &[Coordinate],
        created_at: Timestamp,
    ) -> (Vec<Removed>, Durable) {
        let mut p = self.lock();
        let removed = p.remove_by_deletion(author, ids, coordinates, created_at);
        (removed, p.durable())
    }
}
