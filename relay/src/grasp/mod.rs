//! The GRASP brain: what the relay knows about repositories, shared by the acceptance policy
//! (`acceptance`), push authorisation (`authorize`) and release of held events (`release`).
//!
//! [`Grasp`] joins the event store, the purgatory and the repositories on disk. Lookups merge
//! what is stored with what waits in the purgatory, because the purgatory's events count for
//! authorisation (docs/protocol.md#purgatory). Decisions themselves are pure functions in
//! `grasp_state`; this module gathers their inputs and carries out their results.

pub mod acceptance;
pub mod authorize;
pub mod lifecycle;
pub mod policy;
pub mod purgatory;
pub mod release;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use grasp_state::identifier::RepoLayout;
use grasp_state::maintainers::MaintainerSet;
use grasp_state::nip34::{Announcement, RepoState, KIND_ANNOUNCEMENT, KIND_STATE};
use grasp_state::purgatory::Purgatory;
use nostr::prelude::{Event, Filter, Kind, PublicKey};
use tokio::sync::OwnedMutexGuard;

use crate::grasp::policy::Admission;
use crate::grasp::purgatory::SharedPurgatory;
use crate::nostr::relay::Relay;

pub use grasp_state::nip34::Source;

/// Serialises the relay's own mutations of one repository (alignment, object copies, sync
/// fetches, placeholder removal). Entries are tiny and keyed by repository path.
#[derive(Default)]
pub struct RepoLocks {
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl RepoLocks {
    pub async fn lock(&self, repo: &std::path::Path) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap();
            // Forget locks nobody holds or waits for, so the map stays as small as the work.
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            locks.entry(repo.to_path_buf()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// Who lists whom as maintainer, per owner with an announcement for the identifier.
fn listing(announcements: &[(Announcement, Source)]) -> HashMap<PublicKey, &[PublicKey]> {
    announcements.iter().map(|(a, _)| (a.owner, a.maintainers.as_slice())).collect()
}

fn maintainer_set_in(owner: PublicKey, listed: &HashMap<PublicKey, &[PublicKey]>) -> MaintainerSet {
    MaintainerSet::compute(owner, |pk| listed.get(pk).map(|m| m.to_vec()))
}

/// What the background sync registers to hear of events that start waiting for git data.
pub type WaitingHook = Box<dyn Fn(&str) + Send + Sync>;

/// Everything the GRASP rules need, shared by the WebSocket side and the hook API.
pub struct Grasp {
    /// Event store and live broadcast.
    pub relay: Arc<Relay>,
    /// Held events; the only way to the purgatory model (short critical sections).
    pub purgatory: SharedPurgatory,
    pub layout: RepoLayout,
    pub hooks_dir: PathBuf,
    /// host[:port] that announcements must list (docs/protocol.md#decisions, decision 1).
    pub public_host: String,
    pub locks: RepoLocks,
    /// Told whenever an event starts waiting in the purgatory for an identifier's git data
    /// (the background sync schedules a fetch). Set once at startup.
    pub on_waiting: std::sync::OnceLock<WaitingHook>,
    /// The background sync's figures for the operator view (`GET /v1/sync`). Set once at startup.
    pub sync_stats: std::sync::OnceLock<crate::sync::StatsSource>,
    /// The operator's metrics, recorded by every part of the relay.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Background repository maintenance after pushes. Set once at startup.
    pub maintenance: std::sync::OnceLock<crate::git::maintenance::Maintenance>,
    /// Who may write what, how fast (docs/protocol.md#trust). Public defaults unless
    /// [`Grasp::with_trust`] says otherwise.
    pub trust: Arc<crate::trust::Trust>,
}

impl Grasp {
    pub fn new(
        relay: Arc<Relay>,
        purgatory: Purgatory,
        layout: RepoLayout,
        hooks_dir: PathBuf,
        public_host: String,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Grasp {
            relay,
            purgatory: SharedPurgatory::new(purgatory),
            layout,
            hooks_dir,
            public_host,
            locks: RepoLocks::default(),
            on_waiting: std::sync::OnceLock::new(),
            sync_stats: std::sync::OnceLock::new(),
            metrics,
            maintenance: std::sync::OnceLock::new(),
            trust: Arc::default(),
        }
    }

    /// This brain with the operator's trust settings.
    pub fn with_trust(mut self, trust: Arc<crate::trust::Trust>) -> Self {
        self.trust = trust;
        self
    }

    /// The full `EVENT` pipeline for a submitted event: verify, admit, store, broadcast.
    /// `submitter` says who submits it: the keys its connection authenticated as, or relay sync
    /// (`from_sync`), which never publishes protected events (docs/protocol.md#trust).
    /// Returns the NIP-01 `OK` status and message.
    pub async fn submit(&self, event: &Event, submitter: &grasp_state::auth::Submitter<'_>) -> (bool, String) {
        if !event.verify_id() {
            return (false, "invalid: event id does not match the event's content; recompute the id (NIP-01)".into());
        }
        if !event.verify_signature() {
            return (false, "invalid: bad signature; sign the event id with the author's key".into());
        }
        match self.admit(event, submitter).await {
            Admission::Reject(msg) => {
                tracing::info!(event = %event.id, kind = event.kind.as_u16(), reason = %msg, "event rejected");
                (false, msg)
            }
            Admission::Purgatory(msg) => (true, msg),
            Admission::Published => {
                tracing::info!(event = %event.id, kind = event.kind.as_u16(), "event accepted with its git data");
                (true, String::new())
            }
            Admission::Store => match self.relay.publish(event).await {
                Ok(outcome) => {
                    let (ok, msg) = outcome.ok_reply();
                    tracing::info!(event = %event.id, kind = event.kind.as_u16(), ok, reply = %msg, "event stored");
                    (ok, msg)
                }
                Err(e) => {
                    tracing::error!(error = %e, id = %event.id, "saving event failed");
                    (false, "error: could not save the event; try again later".into())
                }
            },
        }
    }

    /// An event now waits in the purgatory for `identifier`'s git data.
    pub fn note_waiting(&self, identifier: &str) {
        if let Some(f) = self.on_waiting.get() {
            f(identifier);
        }
    }

    /// Stored events matching any of `filters` (store errors are logged and read as none).
    pub async fn query(&self, filters: Vec<Filter>) -> Vec<Event> {
        match self.relay.store().query(filters, usize::MAX).await {
            Ok(events) => events,
            Err(e) => {
                tracing::error!(error = %e, "event store query failed");
                Vec::new()
            }
        }
    }

    /// A stored event by id.
    pub async fn event_by_id(&self, id: &nostr::prelude::EventId) -> Option<Event> {
        self.relay.store().event_by_id(id).await.ok().flatten()
    }

    /// The announcements for `identifier`, newest per owner, stored or in purgatory.
    pub async fn announcements(&self, identifier: &str) -> Vec<(Announcement, Source)> {
        let filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).identifier(identifier);
        let mut by_owner: BTreeMap<PublicKey, (Announcement, Source)> = BTreeMap::new();
        for ev in self.query(vec![filter]).await {
            if let Ok(a) = Announcement::from_event(&ev) {
                if a.identifier == identifier {
                    by_owner.insert(a.owner, (a, Source::Stored));
                }
            }
        }
        for ev in self.purgatory.announcement_events(identifier) {
            if let Ok(a) = Announcement::from_event(&ev) {
                let newer = by_owner.get(&a.owner).is_none_or(|(old, _)| a.recency() > old.recency());
                if newer {
                    by_owner.insert(a.owner, (a, Source::Purgatory));
                }
            }
        }
        by_owner.into_values().collect()
    }

    /// The recursive maintainer set of `owner` for an identifier, given its announcements.
    pub fn maintainer_set(owner: PublicKey, announcements: &[(Announcement, Source)]) -> MaintainerSet {
        maintainer_set_in(owner, &listing(announcements))
    }

    /// Owners (with an announcement for the identifier) whose maintainer set contains `author`.
    /// The listing is built once for all owners, and an owner trusts itself without a walk.
    pub fn owners_trusting(author: &PublicKey, announcements: &[(Announcement, Source)]) -> Vec<(PublicKey, Source)> {
        let listed = listing(announcements);
        announcements
            .iter()
            .filter(|(a, _)| a.owner == *author || maintainer_set_in(a.owner, &listed).contains(author))
            .map(|(a, s)| (a.owner, *s))
            .collect()
    }

    /// The newest stored state event authored inside `set` for `identifier`.
    pub async fn latest_stored_state(&self, identifier: &str, set: &MaintainerSet) -> Option<RepoState> {
        let filter = Filter::new()
            .kind(Kind::Custom(KIND_STATE))
            .identifier(identifier)
            .authors(set.iter().copied());
        self.query(vec![filter])
            .await
            .iter()
            .filter_map(|ev| RepoState::from_event(ev).ok())
            .filter(|s| s.identifier == identifier)
            .max_by_key(RepoState::recency)
    }

    /// Purgatory state events for `identifier` authored inside `set`, oldest first.
    pub fn held_states(&self, identifier: &str, set: &MaintainerSet) -> Vec<RepoState> {
        let mut states: Vec<RepoState> =
            self.purgatory.state_events(identifier, set).iter().filter_map(|ev| RepoState::from_event(ev).ok()).collect();
        grasp_state::push::release_order(&mut states);
        states
    }

    /// Path of `owner`'s repository for `identifier` (validated, under the git root).
    pub fn repo_path(&self, owner: &PublicKey, identifier: &str) -> Option<PathBuf> {
        self.layout.repo_path(owner, identifier).ok()
    }
}
