//! The event store: a thin wrapper around `nostr-lmdb` at `<data>/events`.
//!
//! nostr-lmdb already implements the NIP-01 storage rules this relay relies on, verified by the
//! tests below: replaceable (10000-19999) and addressable (30000-39999) events replace older ones
//! (same second: the lower id wins) and an older one arriving later is refused; NIP-09 deletions
//! remove the author's events and leave tombstones. On top of that, [`Store::is_deleted`] also
//! honours deletions of ids the store never held (e.g. events still in purgatory), by looking for
//! the author's stored kind-5 request.
//!
//! The lookups admission repeats for every event (has this author any deletion request? the
//! stored announcements of an identifier) are answered from bounded caches kept valid by a
//! write generation (`crate::store::lookups`).
//!
//! Writes go through a gate (`crate::store::group_commit`): saves that arrive while other events
//! are being admitted go on together. A regular event is answered once it is in the synced log of
//! acknowledged events (`crate::store::ack_log`) and committed a little later; until then every
//! read here adds it from memory (`crate::store::acknowledged`). Any other event is answered once
//! its commit is on disk.

pub mod ack_log;
pub mod acknowledged;
pub mod group_commit;
pub mod item_budget;
pub mod lookups;
pub mod relay;
pub mod signature;

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::Arc;

use grasp_state::nostr::nip34::{KIND_ANNOUNCEMENT, KIND_DELETION};

use nostr::prelude::*;
use nostr_database::{NostrDatabase, RejectedReason, SaveEventStatus};
use nostr_lmdb::NostrLmdb;

use crate::store::group_commit::{Admitting, Gate};
use crate::store::lookups::Lookups;

/// A storage failure (disk, LMDB).
#[derive(Debug, thiserror::Error)]
#[error("event store error: {0}")]
pub struct StoreError(#[from] nostr_database::error::Error);

/// What happened to an event handed to [`Store::save`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveOutcome {
    /// Stored (and, for a deletion request, the deletion applied).
    Saved,
    /// Already stored.
    Duplicate,
    /// Its id or coordinate was deleted by its author (NIP-09).
    Deleted,
    /// A newer (or same-second lower-id) version of this replaceable/addressable event is stored.
    Superseded,
    /// A deletion request that targets someone else's events.
    InvalidDeletion,
    /// Ephemeral kinds (20000-29999) are never stored.
    Ephemeral,
    /// The store refused it for another reason.
    Refused,
}

impl SaveOutcome {
    /// The NIP-01 `OK` answer (status, message) for this outcome.
    pub fn ok_reply(self) -> (bool, String) {
        let (ok, msg) = match self {
            Self::Saved | Self::Ephemeral => (true, ""),
            Self::Duplicate => (true, "duplicate: already have this event"),
            Self::Deleted => (
                false,
                "blocked: this event was deleted by its author (NIP-09) and cannot be republished",
            ),
            Self::Superseded => (
                false,
                "invalid: a newer version of this replaceable event is already stored; \
                 publish with a later created_at",
            ),
            Self::InvalidDeletion => (
                false,
                "invalid: a deletion request may only target the author's own events",
            ),
            Self::Refused => (false, "error: the event store refused this event"),
        };
        (ok, msg.to_string())
    }
}

/// What the store knows of an event's id, for admission ([`Store::known`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// Neither stored nor deleted.
    New,
    /// Stored already (a duplicate).
    Stored,
    /// Deleted by its author (NIP-09), by id or coordinate, stored or not.
    Deleted,
}

/// The event store.
#[derive(Debug)]
pub struct Store {
    db: Arc<NostrLmdb>,
    /// Group commit of saves.
    gate: Gate,
    /// Cached lookups and the write generation that keeps them valid.
    lookups: Lookups,
    /// How many of the next saves fail ([`Store::fail_next_saves`]).
    failing_saves: std::sync::atomic::AtomicUsize,
}

impl Store {
    /// Opens (creating if needed) the LMDB store in directory `path`.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let db = NostrLmdb::builder(path)
            .process_nip09(true)
            .process_nip62(false)
            .build()
            .await?;
        let db = Arc::new(db);
        // Events answered before a crash let the store commit them: saved now, before anyone reads.
        let log_error = |e: std::io::Error| nostr_database::error::Error::storage(format!("the log of acknowledged events: {e}"));
        let (log, unsaved) = ack_log::AckLog::open(path).map_err(log_error)?;
        if !unsaved.is_empty() {
            let saved = futures_util::future::join_all(unsaved.iter().map(|event| db.save_event(event))).await;
            if let Some(Err(e)) = saved.into_iter().find(Result::is_err) {
                return Err(e.into());
            }
            tracing::info!(events = unsaved.len(), "acknowledged events committed from the log after an unclean stop");
        }
        log.empty_all().map_err(log_error)?;
        let gate = Gate::start(db.clone(), log, grasp_state::nostr::group_commit::Linger::default());
        Ok(Self { db, gate, lookups: Lookups::default(), failing_saves: std::sync::atomic::AtomicUsize::new(0) })
    }

    /// Marks an event as being admitted (its save may still come) until the guard drops: the
    /// store's gate holds other saves a little while it may join their commit.
    pub fn admitting(&self) -> Admitting {
        self.gate.admitting()
    }

    /// Fault injection for tests: the next `n` calls of [`Store::save`] fail with a storage
    /// error, as a full disk would. Nothing in the relay calls it.
    #[doc(hidden)]
    pub fn fail_next_saves(&self, n: usize) {
        self.failing_saves.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Fault injection for tests: how many of the injected failures are still to come.
    #[doc(hidden)]
    pub fn failing_saves_left(&self) -> usize {
        self.failing_saves.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stores `event` following the NIP-01/NIP-09 rules. The caller has verified id and signature.
    pub async fn save(&self, event: &Event) -> Result<SaveOutcome, StoreError> {
        match self.refusal(event).await? {
            Some(outcome) => Ok(outcome),
            None => self.save_admitted(event).await,
        }
    }

    /// [`Store::save`] of several events whose writes go to the store together (one batch at
    /// the gate, so one commit unless the store splits it), in this order. One outcome per event.
    pub async fn save_all(&self, events: &[&Event]) -> Vec<Result<SaveOutcome, StoreError>> {
        let refusals = futures_util::future::join_all(events.iter().map(|e| self.refusal(e))).await;
        let mut outcomes: Vec<Option<Result<SaveOutcome, StoreError>>> = refusals.into_iter().map(|r| r.transpose()).collect();
        let to_save: Vec<usize> = (0..events.len()).filter(|&i| outcomes[i].is_none()).collect();
        let saved = self.gate.save_many(to_save.iter().map(|&i| Arc::new(events[i].clone())).collect()).await;
        for (i, saved) in to_save.into_iter().zip(saved) {
            outcomes[i] = Some(self.outcome(events[i].kind.as_u16(), saved));
        }
        outcomes.into_iter().map(|o| o.expect("every event answered")).collect()
    }

    /// What [`Store::save`] answers without writing (ephemeral, already stored, deleted), if
    /// anything.
    async fn refusal(&self, event: &Event) -> Result<Option<SaveOutcome>, StoreError> {
        if event.kind.is_ephemeral() {
            return Ok(Some(SaveOutcome::Ephemeral));
        }
        let fail = |n: usize| n.checked_sub(1);
        if self.failing_saves.fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, fail).is_ok() {
            return Err(StoreError(nostr_database::error::Error::storage("injected failure")));
        }
        Ok(match self.known(event).await? {
            Known::Stored => Some(SaveOutcome::Duplicate),
            Known::Deleted => Some(SaveOutcome::Deleted),
            Known::New => None,
        })
    }

    /// [`Store::save`] without its lookups of the author's deletion requests, for an event whose
    /// deletion the caller checked with [`Store::is_deleted`] just before (the acceptance
    /// policy does, first thing). nostr-lmdb itself still answers duplicates and the deletions
    /// of stored events and coordinates; for an event answered before its commit (a regular
    /// one, `crate::store::group_commit`) the store is asked for its id first.
    pub async fn save_admitted(&self, event: &Event) -> Result<SaveOutcome, StoreError> {
        if event.kind.is_ephemeral() {
            return Ok(SaveOutcome::Ephemeral);
        }
        self.save_admitted_shared(Arc::new(event.clone())).await
    }

    /// [`Store::save_admitted`] of an event already shared (no copy before the store's own).
    pub async fn save_admitted_shared(&self, event: Arc<Event>) -> Result<SaveOutcome, StoreError> {
        if event.kind.is_ephemeral() {
            return Ok(SaveOutcome::Ephemeral);
        }
        let kind = event.kind.as_u16();
        if group_commit::may_acknowledge_early(&event) {
            // Answered before the store sees it: what its save would answer is asked first.
            match self.db.check_id(&event.id).await? {
                nostr_database::DatabaseEventStatus::Saved => return Ok(SaveOutcome::Duplicate),
                nostr_database::DatabaseEventStatus::Deleted => return Ok(SaveOutcome::Deleted),
                nostr_database::DatabaseEventStatus::NotExistent => {}
            }
        }
        let saved = self.gate.save(event).await;
        self.outcome(kind, saved)
    }

    /// What the store's answer to a save of an event of `kind` means here.
    fn outcome(&self, kind: u16, saved: Result<SaveEventStatus, nostr_database::error::Error>) -> Result<SaveOutcome, StoreError> {
        // A deletion request or an announcement can change a cached lookup (committed now).
        if matches!(kind, KIND_DELETION | KIND_ANNOUNCEMENT) {
            self.lookups.generation.bump();
        }
        Ok(match saved? {
            SaveEventStatus::Success => SaveOutcome::Saved,
            SaveEventStatus::Rejected(reason) => match reason {
                RejectedReason::Duplicate => SaveOutcome::Duplicate,
                RejectedReason::Deleted | RejectedReason::Vanished => SaveOutcome::Deleted,
                RejectedReason::Replaced => SaveOutcome::Superseded,
                RejectedReason::InvalidDelete => SaveOutcome::InvalidDeletion,
                RejectedReason::Ephemeral => SaveOutcome::Ephemeral,
                RejectedReason::Expired | RejectedReason::Other => SaveOutcome::Refused,
            },
        })
    }

    /// Events matching any of `filters` (OR), newest first (ties: lower id first), without
    /// duplicates. Each filter's `limit` is capped at `max_limit`, which is also the default.
    pub async fn query(
        &self,
        filters: Vec<Filter>,
        max_limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let mut seen: HashSet<EventId> = HashSet::new();
        let mut out: Vec<Event> = Vec::new();
        for mut filter in filters {
            let limit = filter.limit.map_or(max_limit, |l| l.min(max_limit));
            if limit == 0 {
                continue;
            }
            filter.limit = Some(limit);
            let acknowledged = self.gate.acknowledged().matching(&filter);
            let mut found: BTreeSet<Event> = self.db.query(filter).await?;
            if !acknowledged.is_empty() {
                // The newest `limit` of the store's answer and the acknowledged events.
                found.extend(acknowledged.iter().map(|e| Event::clone(e)));
                found = found.into_iter().take(limit).collect();
            }
            for event in found {
                if seen.insert(event.id) {
                    out.push(event);
                }
            }
        }
        out.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(out)
    }

    /// The ids of the events a REQ with `filters` answers, in the order of [`Store::query`]
    /// (newest first, ties: lower id first, no duplicates, each filter's `limit` capped at
    /// `max_limit`), without reading the events themselves: a REQ's answer is read one event at
    /// a time from this list (`crate::nostr::answer`), so it is never held whole in memory.
    /// About 40 bytes an id: at most `--max-filters` x `--max-limit` of them. Events past
    /// their NIP-40 expiration are left out.
    pub async fn answer_ids(&self, filters: Vec<Filter>, max_limit: usize) -> Result<Vec<EventId>, StoreError> {
        let mut seen: HashSet<EventId> = HashSet::new();
        let mut items: Vec<(Timestamp, EventId)> = Vec::new();
        for mut filter in filters {
            let limit = filter.limit.map_or(max_limit, |l| l.min(max_limit));
            if limit == 0 {
                continue;
            }
            filter.limit = Some(limit);
            for (id, at) in self.items_with_acknowledged(filter, limit).await? {
                if seen.insert(id) {
                    items.push((at, id));
                }
            }
        }
        items.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        Ok(items.into_iter().map(|(_, id)| id).collect())
    }

    /// The (id, created_at) of the stored events matching `filter`, for NIP-77 reconciliation:
    /// the newest `max` of them at most, and no more than the filter's own `limit`. Only stored
    /// (served) events: held events are not in the store.
    pub async fn negentropy_items(
        &self,
        mut filter: Filter,
        max: usize,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let limit = filter.limit.map_or(max, |l| l.min(max));
        filter.limit = Some(limit);
        self.items_with_acknowledged(filter, limit).await
    }

    /// The store's (id, created_at) of the events matching `filter` (its `limit` set to `limit`)
    /// with the acknowledged events', the newest `limit` of them.
    async fn items_with_acknowledged(&self, filter: Filter, limit: usize) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let acknowledged = self.gate.acknowledged().matching(&filter);
        let mut items = self.db.negentropy_items(filter).await?;
        if acknowledged.is_empty() {
            return Ok(items);
        }
        let known: HashSet<EventId> = items.iter().map(|(id, _)| *id).collect();
        items.extend(acknowledged.iter().filter(|e| !known.contains(&e.id)).map(|e| (e.id, e.created_at)));
        items.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        items.truncate(limit);
        Ok(items)
    }

    /// How many events were answered before their commit and wait for it.
    pub fn acknowledged(&self) -> usize {
        self.gate.acknowledged().size().0
    }

    /// Returns once the store committed every event saved before (events answered from the log
    /// of acknowledged events included).
    pub async fn flush(&self) {
        self.gate.flush().await;
    }

    /// Removes every stored event matching `filter` (operator purges; not a NIP-09 deletion, so
    /// the events may be published again).
    pub async fn delete(&self, filter: Filter) -> Result<(), StoreError> {
        // Acknowledged events first go to the store, so none comes back after the removal.
        self.gate.flush().await;
        let deleted = self.db.delete(filter).await;
        self.lookups.generation.bump();
        Ok(deleted?)
    }

    /// The stored event with this id, if any.
    pub async fn event_by_id(&self, id: &EventId) -> Result<Option<Event>, StoreError> {
        if let Some(event) = self.gate.acknowledged().get(id) {
            return Ok(Some(Event::clone(&event)));
        }
        Ok(self.db.event_by_id(id).await?)
    }

    /// True if `event`'s author has asked (NIP-09) to delete its id, or its coordinate at or after
    /// its `created_at`. Holds even if the event itself was never stored.
    pub async fn is_deleted(&self, event: &Event) -> Result<bool, StoreError> {
        Ok(self.known(event).await? == Known::Deleted)
    }

    /// Is `event` deleted ([`Store::is_deleted`]), stored already, or new? One store read for
    /// an author without deletion requests (remembered until the next one is stored).
    pub async fn known(&self, event: &Event) -> Result<Known, StoreError> {
        let status = self.db.check_id(&event.id).await?;
        if matches!(status, nostr_database::DatabaseEventStatus::Deleted) || self.deletion_requested(event).await? {
            return Ok(Known::Deleted);
        }
        Ok(match status {
            nostr_database::DatabaseEventStatus::Saved => Known::Stored,
            _ if self.gate.acknowledged().contains(&event.id) => Known::Stored,
            _ => Known::New,
        })
    }

    /// Has `event`'s author a stored deletion request naming its id, or its coordinate at or
    /// after its `created_at`? No store read for an author without deletion requests
    /// (remembered until the next one is stored). [`Store::known`] also asks the store for the
    /// id itself (stored, or deleted).
    pub async fn deletion_requested(&self, event: &Event) -> Result<bool, StoreError> {
        let at = self.lookups.generation.current();
        let has_deletions = match self.lookups.has_deletions.get(&event.pubkey, at) {
            Some(known) => known,
            None => {
                let any = Filter::new().kind(Kind::EventDeletion).author(event.pubkey).limit(1);
                let has = !self.db.query(any).await?.is_empty();
                self.lookups.has_deletions.put(event.pubkey, at, has);
                has
            }
        };
        if !has_deletions {
            return Ok(false);
        }
        let by_id = Filter::new()
            .kind(Kind::EventDeletion)
            .author(event.pubkey)
            .event(event.id)
            .limit(1);
        if !self.db.query(by_id).await?.is_empty() {
            return Ok(true);
        }
        if let Some(coordinate) = event.coordinate() {
            let by_coord = Filter::new()
                .kind(Kind::EventDeletion)
                .author(event.pubkey)
                .coordinate(&coordinate)
                .since(event.created_at)
                .limit(1);
            if !self.db.query(by_coord).await?.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The stored announcements (kind 30617) for `identifier`, newest first, shared with the
    /// cache (valid until the next announcement, deletion request or removal is stored).
    pub async fn announcements(&self, identifier: &str) -> Result<Arc<Vec<Event>>, StoreError> {
        let at = self.lookups.generation.current();
        if let Some(hit) = self.lookups.announcements.get(identifier, at) {
            return Ok(hit);
        }
        let filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).identifier(identifier);
        let found = Arc::new(self.query(vec![filter], usize::MAX).await?);
        let bytes = found.iter().map(event_weight).sum();
        self.lookups.announcements.put_weighed(identifier.to_string(), at, found.clone(), bytes);
        Ok(found)
    }
}

/// About the bytes `event` takes in memory (its strings and their headers).
pub(crate) fn event_weight(event: &Event) -> usize {
    let tags: usize = event.tags.iter().map(|tag| 24 + tag.as_slice().iter().map(|v| v.len() + 24).sum::<usize>()).sum();
    256 + event.content.len() + tags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: u8) -> Keys {
        let mut sk = [0u8; 32];
        sk[31] = n;
        sk[0] = 1;
        Keys::new(SecretKey::from_slice(&sk).unwrap())
    }

    fn ev(k: &Keys, kind: u16, at: u64, content: &str, tags: Vec<Tag>) -> Event {
        EventBuilder::new(Kind::from(kind), content)
            .tags(tags)
            .custom_created_at(Timestamp::from(at))
            .finalize(k)
            .unwrap()
    }

    async fn store() -> (Store, tempfile::TempDir) {
        let tmp = tempfile::tempdir().unwrap();
        (Store::open(tmp.path()).await.unwrap(), tmp)
    }

    #[tokio::test]
    async fn save_duplicate_and_query_order() {
        let (s, _t) = store().await;
        let k = keys(1);
        let a = ev(&k, 1, 100, "a", vec![]);
        let b = ev(&k, 1, 200, "b", vec![]);
        assert_eq!(s.save(&a).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.save(&a).await.unwrap(), SaveOutcome::Duplicate);
        assert_eq!(s.save(&b).await.unwrap(), SaveOutcome::Saved);
        let got = s
            .query(vec![Filter::new().kind(Kind::TextNote)], 500)
            .await
            .unwrap();
        assert_eq!(
            got.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![b.id, a.id]
        );
        let capped = s
            .query(vec![Filter::new().kind(Kind::TextNote).limit(10)], 1)
            .await
            .unwrap();
        assert_eq!(capped.len(), 1);
        // OR of filters, deduplicated
        let both = s
            .query(
                vec![
                    Filter::new().id(a.id),
                    Filter::new().id(b.id),
                    Filter::new().author(k.public_key()),
                ],
                500,
            )
            .await
            .unwrap();
        assert_eq!(both.len(), 2);
        assert_eq!(s.event_by_id(&a.id).await.unwrap(), Some(a));
    }

    /// A REQ's answer read id by id is the answer [`Store::query`] builds whole: same events,
    /// same order (ties by id), duplicates across filters once, limits capped.
    #[tokio::test]
    async fn answer_ids_are_the_query_in_its_order() {
        let (s, _t) = store().await;
        let (k, j) = (keys(13), keys(14));
        for i in 0..12u64 {
            // Pairs of events in one second: the ties are ordered by id.
            s.save(&ev(&k, 1, 100 + i / 2, &i.to_string(), vec![])).await.unwrap();
            s.save(&ev(&j, 7, 100 + i, &i.to_string(), vec![])).await.unwrap();
        }
        let cases = [
            vec![Filter::new().kind(Kind::TextNote)],
            vec![Filter::new().kind(Kind::TextNote).limit(5), Filter::new().author(j.public_key()).limit(3)],
            vec![Filter::new().author(k.public_key()), Filter::new().kind(Kind::TextNote), Filter::new().limit(0)],
            vec![Filter::new()],
        ];
        for filters in cases {
            for max_limit in [4, 500] {
                let whole: Vec<EventId> = s.query(filters.clone(), max_limit).await.unwrap().iter().map(|e| e.id).collect();
                assert_eq!(s.answer_ids(filters.clone(), max_limit).await.unwrap(), whole, "{filters:?} capped at {max_limit}");
            }
        }
    }

    #[tokio::test]
    async fn negentropy_items_are_the_newest_within_the_caps() {
        let (s, _t) = store().await;
        let k = keys(9);
        let notes: Vec<Event> = (0..5).map(|i| ev(&k, 1, 100 + i, &i.to_string(), vec![])).collect();
        for e in &notes {
            s.save(e).await.unwrap();
        }
        s.save(&ev(&k, 7, 300, "+", vec![])).await.unwrap();
        let items = |f: Filter, max| {
            let s = &s;
            async move {
                let mut got = s.negentropy_items(f, max).await.unwrap();
                got.sort_by_key(|(_, at)| *at);
                got
            }
        };
        let all: Vec<(EventId, Timestamp)> = notes.iter().map(|e| (e.id, e.created_at)).collect();
        assert_eq!(items(Filter::new().kind(Kind::TextNote), 100).await, all);
        assert_eq!(items(Filter::new().kind(Kind::TextNote), 3).await, all[2..].to_vec());
        assert_eq!(items(Filter::new().kind(Kind::TextNote).limit(2), 3).await, all[3..].to_vec());
        assert_eq!(items(Filter::new(), 100).await.len(), 6);
    }

    #[tokio::test]
    async fn replaceable_newer_wins_older_refused() {
        let (s, _t) = store().await;
        let k = keys(2);
        let old = ev(&k, 10002, 100, "old", vec![]);
        let new = ev(&k, 10002, 200, "new", vec![]);
        assert_eq!(s.save(&new).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.save(&old).await.unwrap(), SaveOutcome::Superseded);
        let got = s
            .query(vec![Filter::new().kind(Kind::from(10002))], 500)
            .await
            .unwrap();
        assert_eq!(got, vec![new]);
    }

    #[tokio::test]
    async fn addressable_same_second_lower_id_wins() {
        let (s, _t) = store().await;
        let k = keys(3);
        let d = || vec![Tag::identifier("repo")];
        let x = ev(&k, 30618, 100, "x", d());
        let y = ev(&k, 30618, 100, "y", d());
        let (low, high) = if x.id < y.id { (x, y) } else { (y, x) };
        // higher id first, then lower id replaces it
        assert_eq!(s.save(&high).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.save(&low).await.unwrap(), SaveOutcome::Saved);
        let got = s
            .query(vec![Filter::new().kind(Kind::from(30618))], 500)
            .await
            .unwrap();
        assert_eq!(got, vec![low.clone()]);
        // higher id again: refused
        let (s2, _t2) = store().await;
        assert_eq!(s2.save(&low).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s2.save(&high).await.unwrap(), SaveOutcome::Superseded);
        // different d tag is independent
        let other = ev(&k, 30618, 50, "other", vec![Tag::identifier("other")]);
        assert_eq!(s2.save(&other).await.unwrap(), SaveOutcome::Saved);
    }

    #[tokio::test]
    async fn deletion_by_id_removes_and_blocks_republish() {
        let (s, _t) = store().await;
        let k = keys(4);
        let note = ev(&k, 1, 100, "bye", vec![]);
        assert_eq!(s.save(&note).await.unwrap(), SaveOutcome::Saved);
        let del = ev(&k, 5, 101, "", vec![Tag::event(note.id)]);
        assert_eq!(s.save(&del).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.event_by_id(&note.id).await.unwrap(), None);
        assert!(s.is_deleted(&note).await.unwrap());
        assert_eq!(s.save(&note).await.unwrap(), SaveOutcome::Deleted);
    }

    #[tokio::test]
    async fn save_admitted_answers_duplicates_like_save() {
        let (s, _t) = store().await;
        let k = keys(10);
        let a = ev(&k, 1, 100, "a", vec![]);
        assert_eq!(s.save_admitted(&a).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.save_admitted(&a).await.unwrap(), SaveOutcome::Duplicate);
        assert_eq!(s.save(&a).await.unwrap(), SaveOutcome::Duplicate);
        let del = ev(&k, 5, 101, "", vec![Tag::event(a.id)]);
        assert_eq!(s.save_admitted(&del).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.save_admitted(&a).await.unwrap(), SaveOutcome::Deleted);
    }

    #[tokio::test]
    async fn deletion_of_unseen_id_still_blocks() {
        let (s, _t) = store().await;
        let k = keys(5);
        let note = ev(&k, 1, 100, "never stored", vec![]);
        let del = ev(&k, 5, 101, "", vec![Tag::event(note.id)]);
        assert_eq!(s.save(&del).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.save(&note).await.unwrap(), SaveOutcome::Deleted);
    }

    #[tokio::test]
    async fn save_all_answers_like_save_in_order() {
        let (s, _t) = store().await;
        let k = keys(12);
        let gone = ev(&k, 1, 100, "deleted before", vec![]);
        assert_eq!(s.save(&ev(&k, 5, 99, "", vec![Tag::event(gone.id)])).await.unwrap(), SaveOutcome::Saved);
        let (old, new) = (ev(&k, 30618, 100, "old", vec![Tag::identifier("r")]), ev(&k, 30618, 200, "new", vec![Tag::identifier("r")]));
        let note = ev(&k, 1, 100, "n", vec![]);
        let outcomes: Vec<SaveOutcome> =
            s.save_all(&[&old, &new, &note, &note, &gone]).await.into_iter().map(Result::unwrap).collect();
        use SaveOutcome::*;
        assert_eq!(outcomes, [Saved, Saved, Saved, Duplicate, Deleted]);
        assert_eq!(s.query(vec![Filter::new().kind(Kind::from(30618))], 10).await.unwrap(), vec![new]);
        assert_eq!(s.save_all(&[&note, &old]).await.into_iter().map(Result::unwrap).collect::<Vec<_>>(), [Duplicate, Superseded]);
    }

    #[tokio::test]
    async fn cached_lookups_see_later_writes() {
        let (s, _t) = store().await;
        let k = keys(11);
        let note = ev(&k, 1, 100, "later deleted", vec![]);
        // Remembered: this author has no deletion request, the identifier no announcement.
        assert_eq!(s.known(&note).await.unwrap(), Known::New);
        assert!(s.announcements("r").await.unwrap().is_empty());
        let ann = ev(&k, 30617, 100, "", vec![Tag::identifier("r")]);
        assert_eq!(s.save(&ann).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.announcements("r").await.unwrap().as_slice(), std::slice::from_ref(&ann));
        let del = ev(&k, 5, 101, "", vec![Tag::event(note.id)]);
        assert_eq!(s.save(&del).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.known(&note).await.unwrap(), Known::Deleted);
        assert_eq!(s.save(&note).await.unwrap(), SaveOutcome::Deleted);
        let other = ev(&k, 1, 102, "kept", vec![]);
        assert_eq!(s.known(&other).await.unwrap(), Known::New);
        assert_eq!(s.save(&other).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.known(&other).await.unwrap(), Known::Stored);
        // A deletion by coordinate and an operator removal empty the cached announcements.
        let coord = Coordinate::new(Kind::from(30617), k.public_key()).identifier("r");
        assert_eq!(s.save(&ev(&k, 5, 150, "", vec![Tag::coordinate(coord, None)])).await.unwrap(), SaveOutcome::Saved);
        assert!(s.announcements("r").await.unwrap().is_empty());
        let again = ev(&k, 30617, 200, "", vec![Tag::identifier("r")]);
        assert_eq!(s.save(&again).await.unwrap(), SaveOutcome::Saved);
        assert_eq!(s.announcements("r").await.unwrap().len(), 1);
        s.delete(Filter::new().author(k.public_key())).await.unwrap();
        assert!(s.announcements("r").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn deletion_by_others_is_invalid_or_ignored() {
        let (s, _t) = store().await;
        let (alice, mallory) = (keys(6), keys(7));
        let note = ev(&alice, 1, 100, "mine", vec![]);
        assert_eq!(s.save(&note).await.unwrap(), SaveOutcome::Saved);
        let del = ev(&mallory, 5, 101, "", vec![Tag::event(note.id)]);
        assert_eq!(s.save(&del).await.unwrap(), SaveOutcome::InvalidDeletion);
        assert!(s.event_by_id(&note.id).await.unwrap().is_some());
        assert!(!s.is_deleted(&note).await.unwrap());
    }

    #[tokio::test]
    async fn deletion_by_coordinate() {
        let (s, _t) = store().await;
        let k = keys(8);
        let ann = ev(&k, 30617, 100, "", vec![Tag::identifier("r")]);
        assert_eq!(s.save(&ann).await.unwrap(), SaveOutcome::Saved);
        let coord = Coordinate::new(Kind::from(30617), k.public_key()).identifier("r");
        let del = ev(&k, 5, 150, "", vec![Tag::coordinate(coord, None)]);
        assert_eq!(s.save(&del).await.unwrap(), SaveOutcome::Saved);
        assert!(s
            .query(vec![Filter::new().kind(Kind::from(30617))], 500)
            .await
            .unwrap()
            .is_empty());
        // older or same-second version refused, newer one accepted
        let older = ev(&k, 30617, 120, "again", vec![Tag::identifier("r")]);
        assert_eq!(s.save(&older).await.unwrap(), SaveOutcome::Deleted);
        let newer = ev(&k, 30617, 200, "new", vec![Tag::identifier("r")]);
        assert_eq!(s.save(&newer).await.unwrap(), SaveOutcome::Saved);
    }

    /// A regular event answered from the log of acknowledged events survives a crash before its
    /// commit: the store's own file does not hold it, the next open commits it from the log.
    #[test]
    fn an_acknowledged_event_survives_a_crash_before_its_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let k = keys(15);
        let issue = ev(&k, 1621, 100, "answered, then the relay died", vec![]);
        let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime().block_on(async {
            let s = Store::open(tmp.path()).await.unwrap();
            assert_eq!(s.save(&issue).await.unwrap(), SaveOutcome::Saved);
            assert_eq!(s.event_by_id(&issue.id).await.unwrap().as_ref(), Some(&issue));
            let found = s.query(vec![Filter::new().author(k.public_key())], 10).await.unwrap();
            assert_eq!(found, vec![issue.clone()], "served before its commit");
            assert_eq!(s.known(&issue).await.unwrap(), Known::Stored);
            // The process ends here: the store's task never gets to commit.
            std::mem::forget(s);
        });
        runtime().block_on(async {
            let db = NostrLmdb::builder(tmp.path()).build().await.unwrap();
            assert_eq!(db.event_by_id(&issue.id).await.unwrap(), None, "committed before the crash: this test proves nothing");
        });
        runtime().block_on(async {
            let s = Store::open(tmp.path()).await.unwrap();
            assert_eq!(s.event_by_id(&issue.id).await.unwrap().as_ref(), Some(&issue));
            assert_eq!(s.save(&issue).await.unwrap(), SaveOutcome::Duplicate);
        });
    }

    /// An operator's removal takes acknowledged events too: none comes back from the log.
    #[tokio::test]
    async fn removal_takes_acknowledged_events() {
        let tmp = tempfile::tempdir().unwrap();
        let k = keys(16);
        let issue = ev(&k, 1621, 100, "removed", vec![]);
        {
            let s = Store::open(tmp.path()).await.unwrap();
            assert_eq!(s.save(&issue).await.unwrap(), SaveOutcome::Saved);
            s.delete(Filter::new().author(k.public_key())).await.unwrap();
            assert_eq!(s.event_by_id(&issue.id).await.unwrap(), None);
            assert!(s.query(vec![Filter::new().author(k.public_key())], 10).await.unwrap().is_empty());
        }
        let s = Store::open(tmp.path()).await.unwrap();
        assert_eq!(s.event_by_id(&issue.id).await.unwrap(), None);
    }

    /// Reads mix acknowledged and committed events in the store's order, within each limit.
    #[tokio::test]
    async fn reads_merge_acknowledged_events_in_order_within_limits() {
        let (s, _t) = store().await;
        let k = keys(17);
        let committed: Vec<Event> = (0..4).map(|i| ev(&k, 30618, 100 + 2 * i, "", vec![Tag::identifier(i.to_string())])).collect();
        for e in &committed {
            assert_eq!(s.save(e).await.unwrap(), SaveOutcome::Saved);
        }
        let acknowledged: Vec<Event> = (0..4).map(|i| ev(&k, 1621, 101 + 2 * i, "", vec![])).collect();
        for e in &acknowledged {
            assert_eq!(s.save(e).await.unwrap(), SaveOutcome::Saved);
        }
        assert!(!s.gate.acknowledged().matching(&Filter::new()).is_empty(), "the issues are not committed yet");
        let newest: Vec<EventId> = vec![acknowledged[3].id, committed[3].id, acknowledged[2].id];
        let f = || vec![Filter::new().author(k.public_key()).limit(3)];
        assert_eq!(s.query(f(), 500).await.unwrap().iter().map(|e| e.id).collect::<Vec<_>>(), newest);
        assert_eq!(s.answer_ids(f(), 500).await.unwrap(), newest);
        let mut items: Vec<EventId> = s.negentropy_items(Filter::new().author(k.public_key()), 3).await.unwrap().into_iter().map(|(id, _)| id).collect();
        items.sort();
        let mut expected = newest.clone();
        expected.sort();
        assert_eq!(items, expected);
        assert_eq!(s.query(vec![Filter::new().kind(Kind::Custom(1621))], 500).await.unwrap().len(), 4);
    }

    #[test]
    fn ok_replies_use_nip01_prefixes() {
        assert_eq!(SaveOutcome::Saved.ok_reply(), (true, String::new()));
        assert!(SaveOutcome::Duplicate
            .ok_reply()
            .1
            .starts_with("duplicate:"));
        assert!(SaveOutcome::Deleted.ok_reply().1.starts_with("blocked:"));
        assert!(!SaveOutcome::Superseded.ok_reply().0);
    }
}
