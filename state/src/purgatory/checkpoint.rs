//! The checkpoint: the purgatory on disk, so in-flight work survives a restart.
//!
//! The relay saves a checkpoint every 60 s and on graceful shutdown, to
//! `<git_data_path>/purgatory-state.json`, and restores it at start. Flow:
//! [`Purgatory::snapshot`] under the relay's lock (a [`PurgatorySnapshot`]: the held events'
//! `Arc`s and plain fields; no event is cloned, nothing is serialised), then
//! `write_checkpoint` (the file is the `contract` room's, `checkpoint_file`; or
//! [`PurgatorySnapshot::to_state`] / `to_json`) outside it. At start, `read_checkpoint`; on
//! [`CheckpointError`] the caller moves the file aside with `set_aside` and starts empty;
//! otherwise [`Purgatory::restore`]. Restore never deletes the file: it stays the crash-safe copy
//! until a newer complete checkpoint replaces it (tmp + fsync + rename).
//!
//! Format (`version` 1, JSON): `saved_at` is unix seconds; every deadline is stored as
//! `expires_in_secs`, an offset from `saved_at`, and ages as `age_secs`; on restore the downtime
//! (`now - saved_at`) is subtracted. Events are stored as their NIP-01 JSON. Every field has a
//! serde default so older version-1 files (e.g. without `announcement_purgatory`) load.
//! Soft-expired announcements are not saved (their bare repository is gone), and neither is the
//! sync-running state (rebuilt by the sync loop).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nostr::prelude::{Event, EventId, PublicKey};
use serde::{Deserialize, Serialize};

use super::entries::{AnnouncementEntry, PrEntry, RepoId, StateEntry};
use crate::names::identifier::RepoSpace;
use super::{Clock, Purgatory, PurgatoryConfig};

/// The only format version this code reads and writes.
pub const CHECKPOINT_VERSION: u32 = 1;

fn default_version() -> u32 {
    CHECKPOINT_VERSION
}

/// The on-disk purgatory. Maps are keyed for readability; entries carry their own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PurgatoryState {
    #[serde(default = "default_version")]
    pub version: u32,
    /// Unix seconds of the save: the reference for every `*_secs` offset.
    #[serde(default)]
    pub saved_at: u64,
    /// `"<owner hex>:<identifier>"` -> announcement (non-soft-expired only).
    #[serde(default)]
    pub announcement_purgatory: BTreeMap<String, SavedAnnouncement>,
    /// identifier -> state events.
    #[serde(default)]
    pub state_events: BTreeMap<String, Vec<SavedState>>,
    /// event id hex -> PR event or placeholder.
    #[serde(default)]
    pub pr_events: BTreeMap<String, SavedPr>,
    /// event id hex -> unix seconds when it expired.
    #[serde(default)]
    pub expired_events: BTreeMap<String, u64>,
}

impl Default for PurgatoryState {
    fn default() -> Self {
        PurgatoryState {
            version: CHECKPOINT_VERSION,
            saved_at: 0,
            announcement_purgatory: BTreeMap::new(),
            state_events: BTreeMap::new(),
            pr_events: BTreeMap::new(),
            expired_events: BTreeMap::new(),
        }
    }
}

/// An event as saved: parsed when it looked like an event, raw JSON otherwise (reported and
/// skipped at restore rather than failing the whole file).
///
/// `Parsed` shares the purgatory's `Arc<Event>`, so a snapshot copies a pointer, not the event.
/// On disk it is the event's NIP-01 JSON either way (untagged; see the `Serialize` and
/// `Deserialize` impls below).
#[derive(Debug, Clone, PartialEq)]
pub enum SavedEvent {
    Parsed(Arc<Event>),
    Raw(serde_json::Value),
}

impl Default for SavedEvent {
    fn default() -> Self {
        SavedEvent::Raw(serde_json::Value::Null)
    }
}

impl Serialize for SavedEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SavedEvent::Parsed(event) => Event::serialize(event, s),
            SavedEvent::Raw(json) => json.serialize(s),
        }
    }
}

/// The untagged on-disk shape of [`SavedEvent`] (serde's `Arc` support needs its `rc` feature;
/// this keeps the format identical without it).
#[derive(Deserialize)]
#[serde(untagged)]
enum SavedEventRepr {
    Parsed(Event),
    Raw(serde_json::Value),
}

impl<'de> Deserialize<'de> for SavedEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match SavedEventRepr::deserialize(d)? {
            SavedEventRepr::Parsed(event) => SavedEvent::Parsed(Arc::new(event)),
            SavedEventRepr::Raw(json) => SavedEvent::Raw(json),
        })
    }
}

impl SavedEvent {
    fn into_verified(self) -> Result<Arc<Event>, String> {
        match self {
            SavedEvent::Parsed(event) => match event.verify() {
                Ok(()) => Ok(event),
                Err(e) => Err(format!("event fails verification: {e}")),
            },
            SavedEvent::Raw(json) => Err(match Event::from_json(json.to_string()) {
                Err(e) => format!("not a nostr event: {e}"),
                Ok(_) => "not a nostr event".to_owned(),
            }),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedAnnouncement {
    #[serde(default)]
    pub event: SavedEvent,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub identifier: String,
    /// Written by versions that kept absolute paths; read and ignored (paths are built from
    /// owner and identifier, so a moved data directory keeps its announcements).
    #[serde(default, skip_serializing)]
    pub repo_path: PathBuf,
    #[serde(default)]
    pub relays: Vec<String>,
    #[serde(default)]
    pub age_secs: u64,
    #[serde(default)]
    pub expires_in_secs: u64,
    /// Never written as true; a file that says so is honoured by skipping the entry.
    #[serde(default)]
    pub soft_expired: bool,
    /// The client address it was sent from, as counted (absent: unknown, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedState {
    #[serde(default)]
    pub event: SavedEvent,
    #[serde(default)]
    pub author: String,
    #[serde(default)]
    pub identifier: String,
    #[serde(default)]
    pub age_secs: u64,
    #[serde(default)]
    pub expires_in_secs: u64,
    /// The client address it was sent from, as counted (absent: unknown, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedRepo {
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub identifier: String,
    /// Absent for a repository announced here; `prs` for a contributor repository.
    #[serde(default, skip_serializing_if = "RepoSpace::is_hosted")]
    pub space: RepoSpace,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedPr {
    /// `None`: a git-first placeholder.
    #[serde(default)]
    pub event: Option<SavedEvent>,
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub repos: Vec<SavedRepo>,
    /// Legacy records without destinations load, but cannot drive ref cleanup.
    #[serde(default)]
    pub destinations: Vec<SavedRepo>,
    #[serde(default)]
    pub age_secs: u64,
    #[serde(default)]
    pub expires_in_secs: u64,
    /// The client address the event was sent from, or the placeholder's push came from, as
    /// counted (absent: unknown, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Of a placeholder: the bytes of unsigned data its pushes brought (absent: none, and in
    /// older files).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unsigned_bytes: u64,
    /// Of a placeholder: the bytes later pushes from other addresses brought, per address
    /// (absent: none, and in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsigned_others: Vec<SavedShare>,
}

/// Unsigned bytes pushed from one address (absent: unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedShare {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub bytes: u64,
}

/// The saved form of a placeholder's shares from other addresses.
pub(super) fn saved_shares(others: &[(Option<IpAddr>, u64)]) -> Vec<SavedShare> {
    others.iter().map(|(a, bytes)| SavedShare { address: saved_address(*a), bytes: *bytes }).collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a checkpoint file cannot be used. The caller moves it aside (`set_aside`) and starts
/// with an empty purgatory.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read the purgatory checkpoint: {0}")]
    Io(#[from] io::Error),
    #[error("purgatory checkpoint is not valid JSON of the expected shape ({0}); it was moved aside, the purgatory starts empty")]
    Corrupt(#[from] serde_json::Error),
    #[error("purgatory checkpoint has version {0}, this relay reads version {CHECKPOINT_VERSION}; it was moved aside, the purgatory starts empty")]
    UnsupportedVersion(u32),
}

impl PurgatoryState {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("purgatory state serialises")
    }

    /// Parses a checkpoint and checks its version.
    pub fn from_json(json: &str) -> Result<Self, CheckpointError> {
        let state: PurgatoryState = serde_json::from_str(json)?;
        if state.version != CHECKPOINT_VERSION {
            return Err(CheckpointError::UnsupportedVersion(state.version));
        }
        Ok(state)
    }
}

/// One entry restore skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// e.g. `state 3f2a…` or `announcement <owner>:<identifier>`.
    pub entry: String,
    pub reason: String,
}

/// What [`Purgatory::restore`] did, for the startup log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub downtime: Duration,
    pub announcements: usize,
    pub states: usize,
    pub prs: usize,
    pub placeholders: usize,
    pub expired_events: usize,
    /// Restored entries whose deadline passed while the relay was down (due at once).
    pub expired_during_downtime: usize,
    pub skipped: Vec<Skipped>,
}

pub(super) fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Whole seconds from `now` to `at`, rounded up (a round trip never shortens a deadline).
pub(super) fn secs_until(now: Instant, at: Instant) -> u64 {
    let d = at.saturating_duration_since(now);
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// An entry's address as saved.
pub(super) fn saved_address(origin: Option<IpAddr>) -> Option<String> {
    origin.map(|a| a.to_string())
}

/// A saved address back; one that does not parse is unknown (the entry still loads).
fn parse_address(saved: Option<&str>) -> Option<IpAddr> {
    saved.and_then(|a| a.parse().ok())
}

pub(super) fn saved_repo(r: &RepoId) -> SavedRepo {
    SavedRepo {
        owner: r.owner.to_hex(),
        identifier: r.identifier.clone(),
        space: r.space,
    }
}

fn parse_repos(repos: &[SavedRepo]) -> Result<Vec<RepoId>, String> {
    repos
        .iter()
        .map(|r| {
            PublicKey::from_hex(&r.owner)
                .map(|owner| RepoId { owner, identifier: r.identifier.clone(), space: r.space })
                .map_err(|e| format!("bad repository owner {:?}: {e}", r.owner))
        })
        .collect()
}

/// A checkpoint captured under the relay's lock by [`Purgatory::snapshot`]: the held events'
/// `Arc`s and the entries' plain fields, nothing serialised and (for state events, the bulk of a
/// full purgatory) nothing allocated per entry but a slot in a `Vec`. Turning it into the
/// on-disk [`PurgatoryState`] ([`to_state`](Self::to_state), [`to_json`](Self::to_json),
/// `write_checkpoint`) builds the hex strings, keys and maps, outside the lock.
#[derive(Debug, Clone)]
pub struct PurgatorySnapshot {
    now: Instant,
    saved_at: u64,
    /// Non-soft-expired announcements (small: one per announced repository waiting for data).
    announcements: Vec<AnnouncementEntry>,
    /// identifier -> its held state events, oldest added first.
    states: Vec<(String, Vec<HeldState>)>,
    prs: Vec<(EventId, PrEntry)>,
    expired: Vec<(EventId, SystemTime)>,
}

/// A state event as captured: the shared event and `Copy` fields only.
#[derive(Debug, Clone)]
pub(super) struct HeldState {
    event: Arc<Event>,
    author: PublicKey,
    created_at: Instant,
    expires_at: Instant,
    origin: Option<IpAddr>,
}

impl HeldState {
    pub(super) fn of(s: &StateEntry) -> HeldState {
        HeldState { event: Arc::clone(&s.event), author: s.author, created_at: s.created_at, expires_at: s.expires_at, origin: s.origin }
    }

    /// Its saved form, `now` being the purgatory's clock.
    pub(super) fn saved(&self, identifier: &str, now: Instant) -> SavedState {
        SavedState {
            event: SavedEvent::Parsed(Arc::clone(&self.event)),
            author: self.author.to_hex(),
            identifier: identifier.to_string(),
            age_secs: now.saturating_duration_since(self.created_at).as_secs(),
            expires_in_secs: secs_until(now, self.expires_at),
            address: saved_address(self.origin),
        }
    }
}

/// The saved form of a held (not soft-expired) announcement, `now` being the purgatory's clock.
pub(super) fn saved_announcement(a: &AnnouncementEntry, now: Instant) -> SavedAnnouncement {
    SavedAnnouncement {
        event: SavedEvent::Parsed(Arc::clone(&a.event)),
        owner: a.owner.to_hex(),
        identifier: a.identifier.clone(),
        repo_path: PathBuf::new(),
        relays: a.relays.iter().cloned().collect(),
        age_secs: now.saturating_duration_since(a.created_at).as_secs(),
        expires_in_secs: secs_until(now, a.expires_at),
        soft_expired: false,
        address: saved_address(a.origin),
    }
}

/// The saved form of a held pull request or placeholder, `now` being the purgatory's clock.
pub(super) fn saved_pr(p: &PrEntry, now: Instant) -> SavedPr {
    SavedPr {
        event: p.event.as_ref().map(|e| SavedEvent::Parsed(Arc::clone(e))),
        commit: p.commit.clone(),
        repos: p.repos.iter().map(saved_repo).collect(),
        destinations: p.destinations.iter().map(saved_repo).collect(),
        age_secs: now.saturating_duration_since(p.created_at).as_secs(),
        // Pending cleanup: due at once after a restart.
        expires_in_secs: if p.cleanup_pending { 0 } else { secs_until(now, p.expires_at) },
        address: saved_address(p.origin),
        unsigned_bytes: p.unsigned_bytes,
        unsigned_others: saved_shares(&p.unsigned_others),
    }
}

impl PurgatorySnapshot {
    /// The on-disk form: hex keys, offsets from `saved_at`, sorted maps.
    pub fn to_state(&self) -> PurgatoryState {
        let now = self.now;
        let mut state = PurgatoryState {
            saved_at: self.saved_at,
            ..PurgatoryState::default()
        };
        for a in &self.announcements {
            state.announcement_purgatory.insert(format!("{}:{}", a.owner.to_hex(), a.identifier), saved_announcement(a, now));
        }
        for (identifier, list) in &self.states {
            state.state_events.insert(identifier.clone(), list.iter().map(|s| s.saved(identifier, now)).collect());
        }
        for (id, p) in &self.prs {
            state.pr_events.insert(id.to_hex(), saved_pr(p, now));
        }
        for (id, at) in &self.expired {
            state.expired_events.insert(id.to_hex(), unix_secs(*at));
        }
        state
    }

    /// The checkpoint file's contents (pretty JSON, as [`PurgatoryState::to_json`]).
    pub fn to_json(&self) -> String {
        self.to_state().to_json()
    }
}

/// Serialises as its [`PurgatoryState`], so `write_checkpoint` takes either.
impl Serialize for PurgatorySnapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_state().serialize(s)
    }
}

impl Purgatory {
    /// Captures the data for a checkpoint. Cheap enough to run under the relay's lock: events
    /// are shared (`Arc` pointer copies), neither cloned nor serialised, and state events are
    /// copied as plain fields; the strings and maps of the file are built later, by
    /// [`PurgatorySnapshot::to_state`] outside the lock.
    pub fn snapshot(&self) -> PurgatorySnapshot {
        PurgatorySnapshot {
            now: self.clock.now(),
            saved_at: unix_secs(self.clock.wall()),
            announcements: self
                .announcements()
                .filter(|a| !a.soft_expired)
                .cloned()
                .collect(),
            states: self
                .states
                .iter()
                .map(|(identifier, list)| {
                    let held = list.iter().map(HeldState::of).collect();
                    (identifier.clone(), held)
                })
                .collect(),
            prs: self.prs.iter().map(|(id, p)| (*id, p.clone())).collect(),
            expired: self.expired.iter().map(|(id, at)| (*id, *at)).collect(),
        }
    }

    /// Rebuilds a purgatory from a checkpoint. Downtime (`clock.wall() - saved_at`) is subtracted
    /// from every deadline; entries that expired meanwhile are due now (the next sweep expires
    /// them). Soft-expired announcements and announcements whose repository no longer exists
    /// (`repo_exists(owner, identifier)`) are not restored; entries whose event does not parse or verify, or that
    /// exceed the caps, are skipped. All skips are reported.
    pub fn restore(
        state: PurgatoryState,
        config: PurgatoryConfig,
        clock: Arc<dyn Clock>,
        repo_exists: impl Fn(&PublicKey, &str) -> bool,
    ) -> (Purgatory, RestoreReport) {
        let mut p = Purgatory::new(config, clock);
        let mut report = RestoreReport::default();
        if state.version != CHECKPOINT_VERSION {
            report.skipped.push(Skipped {
                entry: "checkpoint".to_owned(),
                reason: format!("unsupported version {}", state.version),
            });
            return (p, report);
        }
        let now = p.clock.now();
        let wall = p.clock.wall();
        let saved_at = UNIX_EPOCH + Duration::from_secs(state.saved_at);
        let downtime = wall.duration_since(saved_at).unwrap_or(Duration::ZERO);
        report.downtime = downtime;
        let mut timing = |age_secs: u64, expires_in_secs: u64| {
            let remaining = Duration::from_secs(expires_in_secs).saturating_sub(downtime);
            if remaining.is_zero() {
                report.expired_during_downtime += 1;
            }
            let created = now
                .checked_sub(Duration::from_secs(age_secs) + downtime)
                .unwrap_or(now);
            (created, now + remaining)
        };
        let mut skipped = Vec::new();
        let caps = p.config.caps;

        for (key, a) in state.announcement_purgatory {
            let entry = format!("announcement {key}");
            if a.soft_expired {
                skipped.push(Skipped {
                    entry,
                    reason: "soft-expired: its bare repository was deleted".into(),
                });
                continue;
            }
            let origin = parse_address(a.address.as_deref());
            let parsed = a.event.into_verified().and_then(|event| {
                let owner = PublicKey::from_hex(&a.owner).map_err(|e| format!("bad owner: {e}"))?;
                if owner != event.pubkey {
                    return Err("owner is not the event's author".into());
                }
                if !repo_exists(&owner, &a.identifier) {
                    return Err(format!("repository {}/{}.git no longer exists", a.owner, a.identifier));
                }
                p.counts
                    .check_entry(&caps, &owner, origin)
                    .map_err(|e| e.to_string())?;
                Ok((event, owner))
            });
            match parsed {
                Ok((event, owner)) => {
                    let (created_at, expires_at) = timing(a.age_secs, a.expires_in_secs);
                    p.attach_announcement(AnnouncementEntry {
                        event,
                        owner,
                        identifier: a.identifier,
                        relays: a.relays.into_iter().collect::<BTreeSet<_>>(),
                        created_at,
                        expires_at,
                        soft_expired: false,
                        origin,
                    });
                    report.announcements += 1;
                }
                Err(reason) => skipped.push(Skipped { entry, reason }),
            }
        }

        for (identifier, list) in state.state_events {
            for s in list {
                let origin = parse_address(s.address.as_deref());
                let parsed = s.event.into_verified().and_then(|event| {
                    if p.by_id.contains_key(&event.id) {
                        return Err("duplicate".into());
                    }
                    p.counts
                        .check_entry(&caps, &event.pubkey, origin)
                        .map_err(|e| e.to_string())?;
                    Ok(event)
                });
                match parsed {
                    Ok(event) => {
                        let (created_at, expires_at) = timing(s.age_secs, s.expires_in_secs);
                        p.attach_state(StateEntry {
                            author: event.pubkey,
                            event,
                            identifier: identifier.clone(),
                            created_at,
                            expires_at,
                            origin,
                        });
                        report.states += 1;
                    }
                    Err(reason) => skipped.push(Skipped {
                        entry: format!("state for {identifier}"),
                        reason,
                    }),
                }
            }
        }

        for (id_hex, saved) in state.pr_events {
            let entry = format!("pr {id_hex}");
            let origin = parse_address(saved.address.as_deref());
            let parsed = (|| -> Result<(EventId, PrEntry), String> {
                let id = EventId::from_hex(&id_hex).map_err(|e| format!("bad event id: {e}"))?;
                let event = match saved.event {
                    Some(e) => {
                        let event = e.into_verified()?;
                        if event.id != id {
                            return Err("event id does not match its key".into());
                        }
                        p.counts
                            .check_entry(&caps, &event.pubkey, origin)
                            .map_err(|e| e.to_string())?;
                        Some(event)
                    }
                    None => {
                        if p.counts.placeholders_total >= caps.placeholders_total {
                            return Err("over the placeholder cap".into());
                        }
                        let mine = origin.map_or(0, |o| p.counts.placeholders_per_address.get(&o).copied().unwrap_or(0));
                        if mine >= caps.placeholders_per_address {
                            return Err("over the placeholder cap of its address".into());
                        }
                        None
                    }
                };
                let (created_at, expires_at) = (now, now); // filled below
                let unsigned_bytes = if event.is_none() { saved.unsigned_bytes } else { 0 };
                let unsigned_others: Vec<(Option<IpAddr>, u64)> = if event.is_none() {
                    saved
                        .unsigned_others
                        .iter()
                        .take(super::entries::MAX_UNSIGNED_SHARES)
                        .map(|s| (parse_address(s.address.as_deref()), s.bytes))
                        .collect()
                } else {
                    Vec::new()
                };
                Ok((
                    id,
                    PrEntry {
                        event,
                        commit: saved.commit,
                        repos: parse_repos(&saved.repos)?,
                        destinations: parse_repos(&saved.destinations)?,
                        created_at,
                        expires_at,
                        cleanup_pending: false,
                        origin,
                        unsigned_bytes,
                        unsigned_others,
                    },
                ))
            })();
            match parsed {
                Ok((id, mut pr)) => {
                    (pr.created_at, pr.expires_at) = timing(saved.age_secs, saved.expires_in_secs);
                    if pr.is_placeholder() {
                        report.placeholders += 1;
                    } else {
                        report.prs += 1;
                    }
                    p.attach_pr(id, pr);
                }
                Err(reason) => skipped.push(Skipped { entry, reason }),
            }
        }

        let ttl = p.config.expired_events_ttl;
        for (id_hex, secs) in state.expired_events {
            let Ok(id) = EventId::from_hex(&id_hex) else {
                skipped.push(Skipped {
                    entry: format!("expired event {id_hex}"),
                    reason: "bad event id".into(),
                });
                continue;
            };
            let at = UNIX_EPOCH + Duration::from_secs(secs);
            if wall.duration_since(at).unwrap_or(Duration::ZERO) < ttl {
                p.expired.record(id, at, caps.expired_events);
                report.expired_events += 1;
            }
        }
        report.skipped = skipped;
        (p, report)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{ManualClock, SweepAction};
    use super::*;

    const MIN5: Duration = Duration::from_secs(5 * 60);
    const MIN10: Duration = Duration::from_secs(10 * 60);

    /// A purgatory holding one of everything, 10 minutes after the adds.
    fn populated() -> (Arc<ManualClock>, Purgatory) {
        let (clock, mut p) = purgatory();
        // Soft-expired announcement of author 1 (not saved).
        add_ann(&mut p, &signed(1, ANNOUNCEMENT, 0), "gone").unwrap();
        // An expired state event (saved in expired_events).
        let old = signed(2, STATE, 2);
        p.add_state(old.clone(), old.pubkey, "repo".into()).unwrap();
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 2);
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 0), "repo").unwrap();
        let s = signed(0, STATE, 0);
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        p.add_pr(signed(1, PR, 0), "c0ffee".into(), vec![repo(0, "repo")])
            .unwrap();
        p.add_pr_placeholder(
            EventId::from_byte_array([4; 32]),
            "beef".into(),
            repo(0, "repo"),
        )
        .unwrap();
        clock.advance(MIN10);
        (clock, p)
    }

    fn reopened(
        state: PurgatoryState,
        wall: SystemTime,
        repo_exists: impl Fn(&PublicKey, &str) -> bool,
    ) -> (Arc<ManualClock>, Purgatory, RestoreReport) {
        let clock = Arc::new(ManualClock::starting_at(wall));
        let (p, report) = Purgatory::restore(
            state,
            PurgatoryConfig::default(),
            clock.clone(),
            repo_exists,
        );
        (clock, p, report)
    }

    #[test]
    fn contributor_repositories_survive_a_round_trip_and_hosted_ones_keep_their_format() {
        let (clock, mut p) = purgatory();
        let contributor = RepoId::prs(pubkey(2), "repo");
        p.add_pr_placeholder(EventId::from_byte_array([7; 32]), "beef".into(), contributor.clone()).unwrap();
        p.add_pr(signed(1, PR, 0), "c0ffee".into(), vec![repo(0, "repo"), contributor.clone()]).unwrap();
        let json = p.snapshot().to_json();
        assert_eq!(json.matches("\"space\": \"prs\"").count(), 2, "{json}");
        let state = PurgatoryState::from_json(&json).unwrap();
        let (_, p, _) = reopened(state, clock.wall(), |_, _| true);
        let ph = p.find_pr(&EventId::from_byte_array([7; 32])).unwrap();
        assert_eq!(ph.destinations, vec![contributor.clone()]);
        assert_eq!(p.find_pr(&signed(1, PR, 0).id).unwrap().repos, vec![repo(0, "repo"), contributor]);
    }

    #[test]
    fn round_trip_keeps_every_entry_type_with_downtime_subtracted() {
        let (old_clock, old) = populated();
        let json = old.snapshot().to_json();
        let state = PurgatoryState::from_json(&json).unwrap();
        let (clock, p, report) = reopened(state, old_clock.wall() + MIN5, |_, _| true);
        assert_eq!(report.downtime, MIN5);
        assert_eq!(
            (
                report.announcements,
                report.states,
                report.prs,
                report.placeholders
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(report.expired_events, 1);
        assert_eq!(report.expired_during_downtime, 0);
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        p.assert_consistent();
        let left = MIN30 - MIN10 - MIN5;

        let a = p.get_announcement(&pubkey(0), "repo").unwrap();
        assert_eq!(*a.event, signed(0, ANNOUNCEMENT, 0));
        assert!(a.relays.contains("wss://relay.example"));
        assert_eq!(a.expires_at, clock.now() + left);
        assert_eq!(clock.now() - a.created_at, MIN10 + MIN5);
        assert!(
            p.get_announcement(&pubkey(1), "gone").is_none(),
            "soft-expired not saved"
        );

        let s = &p.states_for("repo")[0];
        assert_eq!(*s.event, signed(0, STATE, 0));
        assert_eq!(s.author, pubkey(0));
        assert_eq!(s.expires_at, clock.now() + left);

        let pr = p.find_pr(&signed(1, PR, 0).id).unwrap();
        assert_eq!(pr.event.as_deref(), Some(&signed(1, PR, 0)));
        assert_eq!(
            (pr.commit.as_str(), &pr.repos),
            ("c0ffee", &vec![repo(0, "repo")])
        );
        assert_eq!(pr.expires_at, clock.now() + left);

        let ph = p.find_pr(&EventId::from_byte_array([4; 32])).unwrap();
        assert!(ph.is_placeholder());
        assert_eq!(
            (ph.commit.as_str(), &ph.destinations),
            ("beef", &vec![repo(0, "repo")])
        );
        assert_eq!(ph.expires_at, clock.now() + left);

        assert!(p.is_expired(&signed(2, STATE, 2).id));
        // A second snapshot of the restored purgatory says the same thing.
        let again = p.snapshot().to_state();
        let first = PurgatoryState::from_json(&json).unwrap();
        assert_eq!(
            again.announcement_purgatory.len(),
            first.announcement_purgatory.len()
        );
        assert_eq!(again.pr_events.len(), 2);
        assert_eq!(
            again.state_events["repo"][0].expires_in_secs,
            first.state_events["repo"][0].expires_in_secs - MIN5.as_secs()
        );
    }

    #[test]
    fn snapshot_shares_the_held_events_and_saves_them_as_nip01_json() {
        let (_clock, p) = populated();
        let capture = p.snapshot();
        // Under the lock only pointers and plain fields were copied.
        let held_state = &p.states_for("repo")[0].event;
        assert_eq!(capture.states.len(), 1);
        assert!(Arc::ptr_eq(&capture.states[0].1[0].event, held_state));
        assert_eq!(capture.announcements.len(), 1, "soft-expired not captured");
        let snap = capture.to_state();
        let shared = |saved: &SavedEvent, held: &Arc<Event>| {
            matches!(saved, SavedEvent::Parsed(e) if Arc::ptr_eq(e, held))
        };
        let key = format!("{}:repo", pubkey(0).to_hex());
        let held_ann = &p.get_announcement(&pubkey(0), "repo").unwrap().event;
        assert!(shared(&snap.announcement_purgatory[&key].event, held_ann));
        let held_state = &p.states_for("repo")[0].event;
        assert!(shared(&snap.state_events["repo"][0].event, held_state));
        let pr_id = signed(1, PR, 0).id;
        let held_pr = p.find_pr(&pr_id).unwrap().event.as_ref().unwrap();
        let saved_pr = snap.pr_events[&pr_id.to_hex()].event.as_ref().unwrap();
        assert!(shared(saved_pr, held_pr));

        // On disk an event is exactly its NIP-01 JSON, as before events were shared.
        let value: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
        let nip01: serde_json::Value =
            serde_json::from_str(&signed(0, STATE, 0).as_json()).unwrap();
        assert_eq!(value["state_events"]["repo"][0]["event"], nip01);
        assert_eq!(
            serde_json::to_string(&SavedEvent::Parsed(held_state.clone())).unwrap(),
            held_state.as_json()
        );
        let raw = SavedEvent::Raw(serde_json::json!({"not": "an event"}));
        assert_eq!(
            serde_json::to_string(&raw).unwrap(),
            r#"{"not":"an event"}"#
        );
        // And it reads back to the same state (events compared by value).
        assert_eq!(PurgatoryState::from_json(&snap.to_json()).unwrap(), snap);
        // The snapshot writes exactly the bytes of its state.
        assert_eq!(capture.to_json(), snap.to_json());
        // (what `contract::checkpoint_file::write_checkpoint` writes)
        assert_eq!(serde_json::to_string_pretty(&capture).unwrap(), snap.to_json());
    }

    #[test]
    fn entries_expired_during_downtime_are_swept_at_once() {
        let (old_clock, old) = populated();
        let (_clock, mut p, report) = reopened(old.snapshot().to_state(), old_clock.wall() + MIN30, |_, _| true);
        assert_eq!(report.expired_during_downtime, 4);
        let actions = p.sweep();
        assert_eq!(actions.len(), 4, "{actions:?}");
        assert!(actions
            .iter()
            .any(|a| matches!(a, SweepAction::SoftExpireAnnouncement { .. })));
        assert!(actions
            .iter()
            .any(|a| matches!(a, SweepAction::ExpireState { .. })));
        assert!(actions
            .iter()
            .any(|a| matches!(a, SweepAction::ExpirePr { .. })));
        assert!(actions
            .iter()
            .any(|a| matches!(a, SweepAction::ExpirePlaceholder { .. })));
    }

    #[test]
    fn expired_event_records_past_retention_are_dropped() {
        let (old_clock, old) = populated();
        let (_c, p, report) = reopened(old.snapshot().to_state(), old_clock.wall() + H24, |_, _| true);
        assert_eq!(report.expired_events, 0);
        assert!(!p.is_expired(&signed(2, STATE, 2).id));
    }

    #[test]
    fn announcement_whose_repository_is_gone_is_not_restored() {
        let (old_clock, old) = populated();
        let (_c, p, report) = reopened(old.snapshot().to_state(), old_clock.wall(), |owner, identifier| {
            !(*owner == pubkey(0) && identifier == "repo")
        });
        assert_eq!(report.announcements, 0);
        assert_eq!(report.skipped.len(), 1);
        assert!(report.skipped[0].reason.contains("no longer exists"));
        assert!(p.get_announcement(&pubkey(0), "repo").is_none());
        assert_eq!(p.states_for("repo").len(), 1);
        p.assert_consistent();
    }

    #[test]
    fn paths_are_not_saved_and_old_files_with_absolute_paths_still_restore() {
        let (old_clock, old) = populated();
        let json = old.snapshot().to_json();
        assert!(!json.contains("repo_path"), "no absolute path in a new checkpoint: {json}");
        // A checkpoint written by an older version names a path in a data directory that has
        // since moved: the announcement is restored from its owner and identifier.
        let mut state = PurgatoryState::from_json(&json).unwrap();
        for a in state.announcement_purgatory.values_mut() {
            a.repo_path = PathBuf::from("/old/data/git/somewhere.git");
        }
        let old_json = serde_json::to_string(&state).unwrap().replace(
            "\"identifier\":\"repo\"",
            "\"identifier\":\"repo\",\"repo_path\":\"/old/data/git/somewhere.git\"",
        );
        assert!(old_json.contains("repo_path"));
        let state = PurgatoryState::from_json(&old_json).unwrap();
        let (_c, p, report) = reopened(state, old_clock.wall(), |owner, identifier| *owner == pubkey(0) && identifier == "repo");
        assert_eq!(report.announcements, 1, "{:?}", report.skipped);
        assert!(p.get_announcement(&pubkey(0), "repo").is_some());
    }

    #[test]
    fn addresses_survive_a_round_trip_and_files_without_them_still_load() {
        let (clock, mut p) = purgatory();
        let ip = std::net::IpAddr::from([192, 0, 2, 9]);
        let from = Some(ip);
        let ann = signed(0, ANNOUNCEMENT, 0);
        p.add_announcement_from(ann.clone(), ann.pubkey, "repo".into(), Default::default(), from).unwrap();
        let s = signed(0, STATE, 0);
        p.add_state_from(s.clone(), s.pubkey, "repo".into(), from).unwrap();
        p.add_pr_from(signed(1, PR, 0), "c0ffee".into(), vec![repo(0, "repo")], from).unwrap();
        let ph = EventId::from_byte_array([4; 32]);
        p.add_pr_placeholder_from(ph, "beef".into(), repo(0, "repo"), from).unwrap();
        let json = p.snapshot().to_json();
        assert_eq!(json.matches("\"address\": \"192.0.2.9\"").count(), 4, "{json}");
        let (_, restored, report) = reopened(PurgatoryState::from_json(&json).unwrap(), clock.wall(), |_, _| true);
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        restored.assert_consistent();
        assert_eq!(restored.counts.per_address.get(&ip), Some(&3));
        assert_eq!(restored.counts.placeholders_per_address.get(&ip), Some(&1));
        assert_eq!(restored.find_pr(&ph).unwrap().origin, from);
        // A file written before addresses were kept: every entry loads, of unknown address.
        let mut state = PurgatoryState::from_json(&json).unwrap();
        state.announcement_purgatory.values_mut().for_each(|a| a.address = None);
        state.state_events.values_mut().flatten().for_each(|s| s.address = None);
        state.pr_events.values_mut().for_each(|p| p.address = None);
        let old = state.to_json();
        assert!(!old.contains("address"), "{old}");
        let (_, restored, report) = reopened(PurgatoryState::from_json(&old).unwrap(), clock.wall(), |_, _| true);
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        assert_eq!((report.announcements, report.states, report.prs, report.placeholders), (1, 1, 1, 1));
        assert!(restored.counts.per_address.is_empty());
        restored.assert_consistent();
        // Entries without an address are written without the field.
        let (_, mut p) = purgatory();
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        assert!(!p.snapshot().to_json().contains("address"));
    }

    #[test]
    fn soft_expired_flag_in_a_file_is_honoured() {
        let (old_clock, old) = populated();
        let mut state = old.snapshot().to_state();
        state
            .announcement_purgatory
            .values_mut()
            .for_each(|a| a.soft_expired = true);
        let (_c, p, report) = reopened(state, old_clock.wall(), |_, _| true);
        assert_eq!(report.announcements, 0);
        assert!(p.announcements().next().is_none());
    }

    #[test]
    fn pending_placeholder_cleanup_is_due_at_once_after_restart() {
        let (clock, mut p) = purgatory();
        let id = EventId::from_byte_array([4; 32]);
        p.add_pr_placeholder(id, "beef".into(), repo(0, "repo"))
            .unwrap();
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 1);
        // Crash before the caller reported the ref deletion.
        let state = p.snapshot().to_state();
        assert_eq!(state.pr_events[&id.to_hex()].expires_in_secs, 0);
        let (_c, mut p, _) = reopened(state, clock.wall(), |_, _| true);
        assert!(matches!(
            p.sweep()[..],
            [SweepAction::ExpirePlaceholder { .. }]
        ));
    }

    #[test]
    fn bad_events_are_reported_and_skipped() {
        let (old_clock, old) = populated();
        let mut value: serde_json::Value = serde_json::from_str(&old.snapshot().to_json()).unwrap();
        // Tamper with the state event (signature no longer matches) and make the PR junk.
        value["state_events"]["repo"][0]["event"]["content"] = "tampered".into();
        let pr_key = signed(1, PR, 0).id.to_hex();
        value["pr_events"][&pr_key]["event"] = serde_json::json!({"not": "an event"});
        let state = PurgatoryState::from_json(&value.to_string()).unwrap();
        let (_c, p, report) = reopened(state, old_clock.wall(), |_, _| true);
        assert_eq!((report.states, report.prs, report.placeholders), (0, 0, 1));
        assert_eq!(report.skipped.len(), 2, "{:?}", report.skipped);
        assert!(report
            .skipped
            .iter()
            .any(|s| s.reason.contains("verification")));
        assert!(report
            .skipped
            .iter()
            .any(|s| s.reason.contains("not a nostr event")));
        assert_eq!(p.announcements().count(), 1);
        p.assert_consistent();
    }

    #[test]
    fn version_1_file_without_announcements_loads() {
        let state_event = signed(0, STATE, 0).as_json();
        let json = format!(
            r#"{{"version":1,"saved_at":{BASE},
                "state_events":{{"repo":[{{"event":{state_event},"author":"{}","identifier":"repo","expires_in_secs":600}}]}},
                "pr_events":{{}},"expired_events":{{}}}}"#,
            pubkey(0).to_hex()
        );
        let state = PurgatoryState::from_json(&json).unwrap();
        assert!(state.announcement_purgatory.is_empty());
        let wall = UNIX_EPOCH + Duration::from_secs(BASE + 60);
        let (clock, p, report) = reopened(state, wall, |_, _| true);
        assert_eq!(report.states, 1);
        assert_eq!(
            p.states_for("repo")[0].expires_at,
            clock.now() + Duration::from_secs(540)
        );
        assert_eq!(
            PurgatoryState::from_json("{}").unwrap(),
            PurgatoryState::default()
        );
    }

    #[test]
    fn unknown_version_and_corrupt_json_are_rejected() {
        assert!(matches!(
            PurgatoryState::from_json(r#"{"version":2}"#),
            Err(CheckpointError::UnsupportedVersion(2))
        ));
        assert!(matches!(
            PurgatoryState::from_json("{\"version\":1, "),
            Err(CheckpointError::Corrupt(_))
        ));
        assert!(matches!(
            PurgatoryState::from_json(r#"{"state_events": 5}"#),
            Err(CheckpointError::Corrupt(_))
        ));
        // restore() refuses a wrong version it is handed directly.
        let state = PurgatoryState {
            version: 9,
            ..PurgatoryState::default()
        };
        let (_c, p, report) = reopened(state, SystemTime::now(), |_, _| true);
        assert_eq!(report.skipped.len(), 1);
        assert_eq!(p.stats(), Default::default());
    }
}
