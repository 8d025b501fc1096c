//! What the purgatory holds: one entry type per kind of waiting thing, and the keys that name them.
//!
//! Entries store the signed [`Event`] plus the few fields the relay already extracted from it
//! (owner, identifier, commit, repository); the purgatory never parses tags itself. Events are
//! held as `Arc<Event>`: a checkpoint snapshot, taken under the relay's lock, copies pointers
//! instead of cloning every event's tags and content.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostr::prelude::{Event, EventId, PublicKey};

use crate::names::identifier::RepoSpace;

/// A repository on this server: `/<npub of owner>/<identifier>.git`, or the contributor
/// repository `/prs/<npub of owner>/<identifier>.git` ([`RepoSpace::Prs`]; `owner` is then the
/// contributor whose pull requests it holds).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoId {
    pub owner: PublicKey,
    pub identifier: String,
    pub space: RepoSpace,
}

impl RepoId {
    /// `owner`'s repository announced here.
    pub fn new(owner: PublicKey, identifier: impl Into<String>) -> Self {
        RepoId {
            owner,
            identifier: identifier.into(),
            space: RepoSpace::Hosted,
        }
    }

    /// The contributor repository `/prs/<npub of contributor>/<identifier>.git`.
    pub fn prs(contributor: PublicKey, identifier: impl Into<String>) -> Self {
        RepoId {
            owner: contributor,
            identifier: identifier.into(),
            space: RepoSpace::Prs,
        }
    }
}

/// A repository announcement (kind 30617) whose repository has no git data yet.
///
/// The bare repository of (`owner`, `identifier`) exists while `soft_expired` is false. After the first
/// expiry the repository is deleted but the event is kept (soft expiry) so a late state event
/// can revive it.
#[derive(Debug, Clone)]
pub struct AnnouncementEntry {
    pub event: Arc<Event>,
    pub owner: PublicKey,
    pub identifier: String,
    /// Relay URLs from the `relays` and `clone` tags, for sync registration.
    pub relays: BTreeSet<String>,
    pub created_at: Instant,
    pub expires_at: Instant,
    pub soft_expired: bool,
    /// The client address it was sent from, as counted ([`crate::names::client_key::limit_key`]);
    /// `None` when unknown (relay sync, older checkpoints). See [`super::caps`].
    pub origin: Option<IpAddr>,
}

/// A repository state event (kind 30618) whose git objects have not arrived yet.
///
/// Refs are deliberately not extracted here: they are matched at push time (late binding).
#[derive(Debug, Clone)]
pub struct StateEntry {
    pub event: Arc<Event>,
    pub author: PublicKey,
    pub identifier: String,
    pub created_at: Instant,
    pub expires_at: Instant,
    /// The client address it was sent from, as counted; `None` when unknown.
    pub origin: Option<IpAddr>,
}

/// A pull request or PR update (kind 1618/1619) waiting for its commit, or a placeholder
/// (`event == None`) for a git-first push to `refs/nostr/<event-id>` waiting for its event.
#[derive(Debug, Clone)]
pub struct PrEntry {
    /// `None` means placeholder: git data arrived first.
    pub event: Option<Arc<Event>>,
    /// The `c` tag of the event, or the commit pushed for a placeholder.
    pub commit: String,
    /// Repositories the PR event targets (its `a` tags), used to defer expiry while a sync of
    /// one of them runs. Empty for placeholders.
    pub repos: Vec<RepoId>,
    /// Repositories whose `refs/nostr/<event-id>` a git-first push wrote. The caller deletes
    /// these refs (compare-and-delete against `commit`) when the placeholder expires.
    pub destinations: Vec<RepoId>,
    pub created_at: Instant,
    pub expires_at: Instant,
    /// Set by the sweep for an expired placeholder: its refs are being deleted by the caller, who
    /// then calls `remove_pr` (done) or `retain_placeholder_for_retry` (failed). No deadline is
    /// armed meanwhile; a checkpoint saves it as due immediately.
    pub cleanup_pending: bool,
    /// The client address the event was sent from, or the placeholder's push came from, as
    /// counted; `None` when unknown.
    pub origin: Option<IpAddr>,
    /// Of a placeholder: the bytes of objects its pushes brought, unsigned data counted against
    /// `origin` until the placeholder goes ([`super::unsigned`]). 0 for a pull request event.
    pub unsigned_bytes: u64,
    /// Of a placeholder: the bytes later pushes from other addresses brought (another destination
    /// of the same id and commit), each counted against its own address. At most
    /// [`MAX_UNSIGNED_SHARES`]; past it, added to the last.
    pub unsigned_others: Vec<(Option<IpAddr>, u64)>,
}

/// Most addresses besides its creator's a placeholder's unsigned data is counted against.
pub const MAX_UNSIGNED_SHARES: usize = 16;

impl PrEntry {
    /// Its unsigned data, per address that pushed it (the creator's first).
    pub fn unsigned_shares(&self) -> impl Iterator<Item = (Option<IpAddr>, u64)> + '_ {
        std::iter::once((self.origin, self.unsigned_bytes)).chain(self.unsigned_others.iter().copied()).filter(|(_, b)| *b > 0)
    }

    /// Adds `bytes` pushed from `from` to its unsigned data, under that address's share.
    pub(crate) fn add_unsigned_share(&mut self, from: Option<IpAddr>, bytes: u64) {
        if from == self.origin {
            self.unsigned_bytes = self.unsigned_bytes.saturating_add(bytes);
        } else if let Some(share) = self.unsigned_others.iter_mut().find(|(a, _)| *a == from) {
            share.1 = share.1.saturating_add(bytes);
        } else if self.unsigned_others.len() < MAX_UNSIGNED_SHARES {
            self.unsigned_others.push((from, bytes));
        } else if let Some(last) = self.unsigned_others.last_mut() {
            last.1 = last.1.saturating_add(bytes);
        }
    }

    pub fn is_placeholder(&self) -> bool {
        self.event.is_none()
    }

    /// Every identifier this entry relates to (for sync-running deferral).
    pub(crate) fn identifiers(&self) -> impl Iterator<Item = &str> {
        self.repos
            .iter()
            .chain(self.destinations.iter())
            .map(|r| r.identifier.as_str())
    }
}

/// Names one entry. Ordered so it can sit in the deadline set next to its [`Instant`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKey {
    Announcement {
        owner: PublicKey,
        identifier: String,
    },
    State {
        identifier: String,
        event_id: EventId,
    },
    Pr {
        event_id: EventId,
    },
}

/// A held announcement whose state events relay-to-relay event sync should keep pulling
/// ([`Purgatory::state_sync_registrations`](super::Purgatory::state_sync_registrations)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSyncRegistration {
    pub owner: PublicKey,
    pub identifier: String,
    /// The relays (and clone URLs) its announcement lists.
    pub relays: BTreeSet<String>,
    /// Its bare repository is deleted (soft expiry phase 1): a state event revives it.
    pub soft_expired: bool,
}

/// What [`Purgatory::add_announcement`](super::Purgatory::add_announcement) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnnouncementAdded {
    /// An entry for (owner, identifier) existed; it was replaced and its expiry extended.
    pub replaced: bool,
    /// The replaced entry was soft-expired: the caller must recreate the bare repository.
    pub revived: bool,
}

/// What an expiry extension did to an announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extension {
    /// The entry was soft-expired (bare repository deleted): the caller must recreate it.
    pub revived: bool,
}

/// An entry taken out of the purgatory by a deletion (kind 5) or a service change.
#[derive(Debug, Clone)]
pub enum Removed {
    /// The caller deletes the bare repository unless the entry was already soft-expired.
    Announcement(AnnouncementEntry),
    State(StateEntry),
    Pr(EventId, PrEntry),
}

impl Removed {
    pub fn event_id(&self) -> EventId {
        match self {
            Removed::Announcement(a) => a.event.id,
            Removed::State(s) => s.event.id,
            Removed::Pr(id, _) => *id,
        }
    }
}

/// The kind of a listed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Announcement,
    State,
    Pr,
    Placeholder,
}

/// One line of the operator view (durations serialise as whole seconds).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EntryView {
    pub kind: EntryKind,
    /// Owner (announcement) or author (state, PR) as hex; `None` for placeholders.
    pub pubkey: Option<String>,
    /// Repository identifier (for PRs: the first target or destination repository).
    pub identifier: Option<String>,
    pub event_id: String,
    #[serde(rename = "age_secs", serialize_with = "secs")]
    pub age: Duration,
    #[serde(rename = "time_left_secs", serialize_with = "secs")]
    pub time_left: Duration,
    pub soft_expired: bool,
    /// What would release the entry, in words.
    pub waiting_for: Option<String>,
    /// The git objects it waits for: the ref targets of a state event, the commit of a PR or
    /// placeholder; empty for an announcement (any git data promotes it).
    pub oids: Vec<String>,
}

/// An event id that expired without its git data, for the operator view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExpiredView {
    pub event_id: String,
    /// Seconds since it expired.
    #[serde(rename = "expired_secs_ago", serialize_with = "secs")]
    pub ago: Duration,
}

/// Counts for metrics and the operator view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PurgatoryStats {
    pub announcements: usize,
    pub soft_expired_announcements: usize,
    pub states: usize,
    pub prs: usize,
    pub placeholders: usize,
    pub expired_events: usize,
    /// Armed deadlines (one per entry that is neither deferred nor pending cleanup).
    pub deadlines: usize,
    /// Entries whose expiry waits for a running sync.
    pub deferred: usize,
    /// Deadlines the last sweep looked at (proves the sweep never scans every entry).
    pub last_sweep_examined: usize,
    /// Bytes of unsigned data the placeholders hold ([`super::unsigned`]).
    pub unsigned_bytes: u64,
    /// Addresses holding unsigned data.
    pub unsigned_addresses: usize,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}
