//! The GRASP brain: what the relay knows about repositories, shared by the acceptance policy
//! (`acceptance`), push authorisation (`authorize`) and release of held events (`release`).
//!
//! [`Grasp`] joins the event store, the purgatory and the repositories on disk. Lookups merge
//! what is stored with what waits in the purgatory, because the purgatory's events count for
//! authorisation (docs/protocol.md#purgatory). Decisions themselves are pure functions in
//! `grasp_state`; this module gathers their inputs and carries out their results.
//!
//! The hub's fields are this module's own (but the store, the purgatory and the repository
//! locks); the rest of the relay asks through methods. Its `impl` is split by question, one file
//! each, so a method is found where its question is:
//!
//! | question | file |
//! |---|---|
//! | what the hub holds, how it is built and wired at startup, the getters | this file |
//! | is this event accepted, held or refused? | [`acceptance`] (verdict type: [`policy`]) |
//! | may this push go in? | [`authorize`] (held states indexed: [`held_index`]) |
//! | git data arrived: what does it release? | [`release`] |
//! | who may push: maintainer sets per announcement version | [`authority`], refs realigned by [`integrity`] |
//! | what may strangers and owners store? | [`budgets`], [`quotas`] |
//! | GRASP-06 contributor repositories | [`contributions`] |
//! | one object store per identifier family | [`pools`], copies in [`copies`] |
//! | who is a member of a private service (replicas included)? | [`membership`] |
//! | what it asks of the other replicas of its set (ports the peers fill) | [`replica_set`] |
//! | maintenance after pushes | [`maintenance`] |
//!
//! Not methods of the hub, but its parts: the purgatory's owner ([`purgatory`]), its journal and
//! lifecycle ([`journal`], [`lifecycle`]), repository locks ([`locks`]), deferred work
//! ([`deferred`]), the operator's purge ([`purge`]).

pub mod acceptance;
pub mod authority;
pub mod authorize;
pub mod budgets;
pub mod contributions;
pub mod copies;
pub mod deferred;
pub mod held_index;
pub mod integrity;
pub mod journal;
pub mod lifecycle;
pub mod locks;
pub mod maintenance;
pub mod membership;
pub mod policy;
pub mod pools;
pub mod purge;
pub mod purgatory;
pub mod quotas;
pub mod release;
pub mod replica_set;

use std::path::PathBuf;
use std::sync::Arc;

use grasp_state::names::identifier::RepoLayout;
use grasp_state::authority::maintainers::MaintainerSet;
use grasp_state::nostr::nip34::{Announcement, RepoState, KIND_ANNOUNCEMENT, KIND_STATE};
use grasp_state::purgatory::Purgatory;
use nostr::prelude::{Event, Filter, Kind, PublicKey};

use crate::grasp::policy::Admission;
use crate::grasp::purgatory::SharedPurgatory;
use crate::store::relay::Relay;

pub use crate::grasp::locks::RepoLocks;
pub use grasp_state::nostr::nip34::Source;

pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking git task panicked")
}

/// Checks a client event's id and signature (NIP-01); the refusal says what to fix.
pub fn verify(event: &Event) -> Result<(), &'static str> {
    if !event.verify_id() {
        return Err("invalid: event id does not match the event's content; recompute the id (NIP-01)");
    }
    if !crate::store::signature::valid(event) {
        return Err("invalid: bad signature; sign the event id with the author's key");
    }
    Ok(())
}

/// How an announcement is taken here ([`Grasp::hosting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hosting {
    /// It lists this service (decision 1): a repository, writable.
    Listed,
    /// It does not, but belongs to the GRASP-05 archive: a repository, read-only unless
    /// `--archive-writable`.
    Archived,
    /// Neither: no repository (stored without one when its author is trusted, else refused).
    No,
}

/// Who caused an identifier to wait for git data: decides how soon background sync fetches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An event submitted by a user: give their `git push` time to arrive first.
    User,
    /// An event that arrived through relay-to-relay sync: batch bursts, then fetch quickly.
    Sync,
}

/// What the background sync registers to hear of events that start waiting for git data, and
/// where they came from (which decides how soon it fetches).
pub type WaitingHook = Box<dyn Fn(&str, Origin) + Send + Sync>;

/// Everything the GRASP rules need, shared by the WebSocket side and the hook API. The store
/// (`relay`), the purgatory and the repository locks are public (the tests' and tools' ways in);
/// the rest is the `grasp` module's own, and the relay asks for it through the hub's methods.
pub struct Grasp {
    /// Event store and live broadcast.
    pub relay: Arc<Relay>,
    /// Held events; the only way to the purgatory model (short critical sections).
    pub purgatory: SharedPurgatory,
    layout: RepoLayout,
    hooks_dir: PathBuf,
    /// host[:port] that announcements must list (docs/protocol.md#decisions, decision 1).
    public_host: String,
    pub locks: RepoLocks,
    /// Told whenever an event starts waiting in the purgatory for an identifier's git data
    /// (the background sync schedules a fetch). Set once at startup.
    on_waiting: std::sync::OnceLock<WaitingHook>,
    /// The operator's metrics, recorded by every part of the relay.
    metrics: Arc<crate::metrics::Metrics>,
    /// Background repository maintenance after pushes. Set once at startup.
    maintenance: std::sync::OnceLock<crate::grasp::maintenance::Maintenance>,
    /// Who may write what, how fast (docs/protocol.md#trust). Public defaults unless
    /// [`Grasp::with_trust`] says otherwise.
    trust: Arc<crate::trust::Trust>,
    /// Held states parsed and indexed by declared refs, for push authorisation.
    held_indexes: held_index::HeldIndexes,
    /// Repository work deferred because a repository stayed locked past the bound.
    deferred: deferred::SharedDeferred,
    /// Copies of pushed data into other owners' repositories, waiting for the background task.
    copies: copies::CopyQueue,
    /// GRASP-06 (`--grasp06`): contributor repositories at `/prs/<npub>/<identifier>.git` and
    /// the acceptance relaxation for pull requests naming one (docs/protocol.md).
    grasp06: bool,
    /// GRASP-05 archive (`--archive*`): announcements not listing this service taken anyway.
    archive: grasp_state::trust::archive::Archive,
    /// Maintainer sets and standings per version of an identifier's announcements.
    authority: authority::AuthorityMemo,
    /// Announcements parsed once per event id.
    parsed_announcements: authority::ParsedAnnouncements,
    /// Pull request data no maintainer signed, per author and address (docs/protocol.md#budgets).
    contributor_data: budgets::ContributorData,
    /// The quota per owner and the daily budget per address for new owners.
    owner_quotas: quotas::OwnerQuotaState,
    /// The other members of this replica set (`--replica`, docs/scaling.md): every repository's
    /// git data is fetched from them first.
    replicas: Vec<grasp_state::trust::replica::Replica>,
    /// `--replica-acks`: the other replicas that must hold a client's event before its `OK
    /// true`, and a push before its post-receive ends. Set once at startup.
    replica_acks: std::sync::OnceLock<Arc<dyn replica_set::Confirmations>>,
    /// The other replicas, asked for an identifier's announcements and states before a push is
    /// refused for want of them (`crate::peers::replica_reads`). Set once at startup, with
    /// `--replica`.
    replica_reads: std::sync::OnceLock<Arc<dyn replica_set::OtherReplicas>>,
}

impl Grasp {
    /// A brain over `relay` and `purgatory`, with public defaults for the rest (the `with_*`
    /// methods set the operator's).
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
            metrics,
            maintenance: std::sync::OnceLock::new(),
            trust: Arc::default(),
            held_indexes: held_index::HeldIndexes::default(),
            deferred: deferred::SharedDeferred::default(),
            copies: copies::CopyQueue::default(),
            grasp06: false,
            archive: grasp_state::trust::archive::Archive::default(),
            authority: authority::AuthorityMemo::default(),
            parsed_announcements: authority::ParsedAnnouncements::default(),
            contributor_data: budgets::ContributorData::default(),
            owner_quotas: quotas::OwnerQuotaState::default(),
            replicas: Vec::new(),
            replica_acks: std::sync::OnceLock::new(),
            replica_reads: std::sync::OnceLock::new(),
        }
    }

    /// This brain with the other members of its replica set (`--replica`).
    pub fn with_replicas(mut self, replicas: Vec<grasp_state::trust::replica::Replica>) -> Self {
        self.replicas = replicas;
        self
    }

    /// This brain with the operator's GRASP-05 archive (`--archive*`).
    pub fn with_archive(mut self, archive: grasp_state::trust::archive::Archive) -> Self {
        self.archive = archive;
        self
    }

    /// How this server takes `a`: hosted (it lists this service), archived (GRASP-05: it does
    /// not, but the archive takes it), or not with a repository.
    pub fn hosting(&self, a: &Announcement) -> Hosting {
        if a.lists_service(&self.public_host) {
            Hosting::Listed
        } else if self.archive.archives(a) {
            Hosting::Archived
        } else {
            Hosting::No
        }
    }

    /// This brain with GRASP-06 contributor repositories on or off (`--grasp06`).
    pub fn with_grasp06(mut self, on: bool) -> Self {
        self.grasp06 = on;
        self
    }

    /// This brain with the operator's bounds on waiting for a repository.
    pub fn with_lock_limits(mut self, limits: locks::LockLimits) -> Self {
        self.locks = RepoLocks::with_limits(limits);
        self
    }

    /// This brain with the operator's bounds on deferred work (`--deferred-total`,
    /// `--deferred-per-author`).
    pub fn with_deferred_limits(mut self, limits: grasp_state::git::deferred::DeferredLimits) -> Self {
        self.deferred = deferred::SharedDeferred::new(limits);
        self
    }

    /// A repository path as the operator sees it: relative to the git root.
    pub fn shown_repo(&self, repo: &std::path::Path) -> String {
        repo.strip_prefix(self.layout.git_root()).unwrap_or(repo).display().to_string()
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
    pub async fn submit(&self, event: &Event, submitter: &grasp_state::trust::auth::Submitter<'_>) -> (bool, String) {
        if let Err(reason) = verify(event) {
            return (false, reason.into());
        }
        self.submit_verified(&Arc::new(event.clone()), submitter).await
    }

    /// [`Grasp::submit`] for an event whose id and signature [`verify`] already checked. The
    /// event is shared with the live broadcast, not copied.
    pub async fn submit_verified(&self, event: &Arc<Event>, submitter: &grasp_state::trust::auth::Submitter<'_>) -> (bool, String) {
        let (ok, message, durable) = self.submit_verified_deferred(event, submitter).await;
        durable.answer(ok, message).await
    }

    /// [`Grasp::submit_verified`], returning the answer before a held event's journal record is
    /// synced: the caller sends it only after [`Durable::answer`](journal::Durable::answer). Lets
    /// a connection admit its next event while the disk syncs this one (group commit).
    pub async fn submit_verified_deferred(
        &self,
        event: &Arc<Event>,
        submitter: &grasp_state::trust::auth::Submitter<'_>,
    ) -> (bool, String, journal::Durable) {
        let (ok, message) = match self.admit(event, submitter).await {
            Admission::Reject(msg) => {
                tracing::info!(event = %event.id, kind = event.kind.as_u16(), reason = %msg, "event rejected");
                (false, msg)
            }
            Admission::Purgatory(msg, durable) => return (true, msg, durable),
            Admission::Published(message) => {
                tracing::info!(event = %event.id, kind = event.kind.as_u16(), "event accepted with its git data");
                (true, message)
            }
            // `admit` checked the event's deletion first thing.
            Admission::Store => match self.relay.publish_admitted(event.clone()).await {
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
        };
        (ok, message, journal::Durable::now())
    }

    /// An event from `origin` now waits in the purgatory for `identifier`'s git data.
    pub fn note_waiting(&self, identifier: &str, origin: Origin) {
        if let Some(f) = self.on_waiting.get() {
            f(identifier, origin);
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

    /// The announcements for `identifier`, newest per owner, stored or in purgatory (parsed and
    /// merged once while its events stay the same, `authority`).
    pub async fn announcements(&self, identifier: &str) -> std::sync::Arc<Vec<(Announcement, Source)>> {
        let stored = match self.relay.store().announcements(identifier).await {
            Ok(events) => events,
            Err(e) => {
                tracing::error!(error = %e, "event store query failed");
                std::sync::Arc::default()
            }
        };
        let held = self.purgatory.announcement_events(identifier);
        self.parsed_announcements.merged(identifier, &stored, &held)
    }

    /// Is `identifier` announced here by `owner` (held, or stored)? One address, one read: never
    /// the identifier's whole list of announcements, however many owners announce it (the check
    /// every issue, comment and pull request tagging a repository asks).
    pub async fn is_announced_by(&self, owner: &PublicKey, identifier: &str) -> bool {
        if self.purgatory.held_announcement(owner, identifier).is_some() {
            return true;
        }
        self.stored_at(KIND_ANNOUNCEMENT, owner, Some(identifier)).await
    }

    /// Is an event stored at the address `kind:author[:identifier]` (`identifier` for
    /// addressable kinds, `None` for replaceable ones)? One read of at most one event.
    pub async fn stored_at(&self, kind: u16, author: &PublicKey, identifier: Option<&str>) -> bool {
        let mut f = Filter::new().kind(Kind::Custom(kind)).author(*author).limit(1);
        if let Some(identifier) = identifier {
            f = f.identifier(identifier);
        }
        !self.query(vec![f]).await.is_empty()
    }

    /// The servers of the latest user grasp list (kind 10317) stored here of each of `people`
    /// that has one, in their order.
    pub async fn user_grasp_lists(&self, people: &[PublicKey]) -> std::collections::HashMap<PublicKey, Vec<String>> {
        let filter = Filter::new().kind(Kind::Custom(grasp_state::nostr::nip34::KIND_USER_GRASP_LIST)).authors(people.iter().copied());
        let mut newest: std::collections::HashMap<PublicKey, (nostr::prelude::Timestamp, Vec<String>)> = std::collections::HashMap::new();
        for ev in self.query(vec![filter]).await {
            let Ok(list) = grasp_state::nostr::nip34::UserGraspList::from_event(&ev) else { continue };
            match newest.get(&list.author) {
                Some((at, _)) if *at >= ev.created_at => {}
                _ => {
                    newest.insert(list.author, (ev.created_at, list.servers));
                }
            }
        }
        newest.into_iter().map(|(author, (_, servers))| (author, servers)).collect()
    }

    /// The confirmed maintainers of `owner`'s repository for an identifier, given its merged
    /// announcements (computed once per version of them, `authority`).
    pub fn maintainer_set(&self, owner: PublicKey, announcements: &[(Announcement, Source)]) -> std::sync::Arc<MaintainerSet> {
        self.authority.maintainer_set(owner, announcements)
    }

    /// Stores `ev` and broadcasts it to subscribers.
    pub async fn publish(&self, ev: &Event) -> Result<String, String> {
        match self.relay.publish(ev).await {
            // NIP-01: a duplicate is accepted (`true`, `duplicate: ...`).
            Ok(outcome) => match outcome.ok_reply() {
                (true, message) => Ok(message),
                (false, message) => Err(message),
            },
            Err(e) => Err(format!("error: could not save the event: {e}")),
        }
    }

    /// Creates `owner`'s bare repository for `identifier` if it is missing. When the family's
    /// object pool exists and its lock is free at once, the new repository is a member from its
    /// first moment (docs/architecture.md, "Object pools"); otherwise it joins when data is
    /// copied into it or at the next startup's migration.
    pub async fn ensure_repo(&self, owner: &PublicKey, identifier: &str) -> Result<PathBuf, String> {
        let (layout, hooks, owner, id) = (self.layout.clone(), self.hooks_dir.clone(), *owner, identifier.to_string());
        let pool = self.pool_path(identifier).filter(|p| p.is_dir());
        let pool_lock = match &pool {
            Some(pool) => self.locks.lock_within(pool, std::time::Duration::ZERO).await.ok(),
            None => None,
        };
        let join = pool_lock.is_some() && pool.is_some_and(|p| p.is_dir());
        let created = blocking(move || crate::git::repos::create_repo(&layout, grasp_state::names::identifier::RepoSpace::Hosted, &owner, &id, &hooks, join).map(|(path, _)| path).map_err(|e| e.to_string())).await;
        drop(pool_lock);
        created
    }

    /// Deletes `owner`'s bare repository for `identifier` (purgatory expiry, deletion, service
    /// change).
    pub async fn delete_repo(&self, owner: &PublicKey, identifier: &str) {
        self.delete_repo_id(&grasp_state::purgatory::RepoId::new(*owner, identifier)).await
    }

    /// Deletes the repository `repo` names, in its space (under its relay lock).
    pub async fn delete_repo_id(&self, repo: &grasp_state::purgatory::RepoId) {
        let Some(path) = self.path_of(repo) else { return };
        let _guards = match locks::RepoGuards::acquire(&self.locks, [path.clone()], locks::PushLocks::Skip).await {
            Ok(guards) => guards,
            Err(error) => {
                tracing::warn!(repo = %path.display(), %error, "repository not deleted");
                return;
            }
        };
        let (layout, target) = (self.layout.clone(), repo.clone());
        match blocking(move || crate::git::repos::delete_repo_in(&layout, target.space, &target.owner, &target.identifier)).await {
            Ok(true) => {
                self.trust.limits.repo_removed();
                // What only a hosted repository reached may leave its family's object pool
                // (contributor repositories never put anything in one).
                if repo.space == grasp_state::names::identifier::RepoSpace::Hosted {
                    crate::grasp::maintenance::after_family_refs_left(self, &repo.identifier);
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(repo = %path.display(), error = %e, "could not delete repository"),
        }
    }

    /// Removes `owner`'s held announcement and its bare repository.
    pub async fn drop_held_announcement(&self, owner: &PublicKey, identifier: &str, reason: &str) {
        let entry = self.purgatory.remove_announcement(owner, identifier);
        if let Some(entry) = entry {
            tracing::info!(identifier, event = %entry.event.id, reason, "held announcement removed");
            self.delete_repo(owner, identifier).await;
        }
    }

    /// Resets the purgatory timer of the held announcements among `owners` (recreating the bare
    /// repository of soft-expired ones: revival). Used when a state event arrives (acceptance)
    /// and when git data for a held state arrives (push authorisation).
    pub async fn extend_held_announcements(&self, owners: &[(PublicKey, Source)], identifier: &str) {
        for (owner, source) in owners {
            if *source != Source::Purgatory {
                continue;
            }
            let ext = self.purgatory.extend_announcement(owner, identifier);
            if ext.is_some_and(|e| e.revived) {
                match self.ensure_repo(owner, identifier).await {
                    Ok(_) => tracing::info!(identifier, owner = %owner, "soft-expired announcement revived"),
                    Err(e) => tracing::warn!(identifier, error = %e, "could not recreate revived repository"),
                }
            }
        }
    }

    /// The newest stored state event authored inside `set` for `identifier`.
    pub async fn latest_stored_state(&self, identifier: &str, set: &MaintainerSet) -> Option<RepoState> {
        if set.is_empty() {
            // No confirmed maintainer (a broken lead path, an owner who left): no authority, and
            // an empty author list must never read as "any author".
            return None;
        }
        let filter = Filter::new()
            .kind(Kind::Custom(KIND_STATE))
            .identifier(identifier)
            .authors(set.iter().copied());
        self.query(vec![filter])
            .await
            .iter()
            .filter_map(|ev| RepoState::from_event(ev).ok())
            .filter(|s| s.identifier == identifier && set.contains(&s.author))
            .max_by_key(RepoState::recency)
    }

    /// Purgatory state events for `identifier` authored inside `set`, oldest first.
    pub fn held_states(&self, identifier: &str, set: &MaintainerSet) -> Vec<RepoState> {
        let mut states: Vec<RepoState> =
            self.purgatory.state_events(identifier, set).iter().filter_map(|ev| RepoState::from_event(ev).ok()).collect();
        grasp_state::git::push::release_order(&mut states);
        states
    }

    /// Path of `owner`'s repository for `identifier` (validated, under the git root).
    pub fn repo_path(&self, owner: &PublicKey, identifier: &str) -> Option<PathBuf> {
        self.layout.repo_path(owner, identifier).ok()
    }

    /// Path of the repository `repo` names, in its space (validated, under the git root).
    pub fn path_of(&self, repo: &grasp_state::purgatory::RepoId) -> Option<PathBuf> {
        self.layout.repo_path_in(repo.space, &repo.owner, &repo.identifier).ok()
    }
}

/// What the rest of the relay asks of the hub's parts, and their wiring, set once at startup.
impl Grasp {
    /// The operator's metrics, recorded by every part of the relay.
    pub(crate) fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// Who may write what, how fast (docs/protocol.md#trust).
    pub(crate) fn trust(&self) -> &Arc<crate::trust::Trust> {
        &self.trust
    }

    /// host[:port] that announcements must list (docs/protocol.md#decisions, decision 1).
    pub(crate) fn public_host(&self) -> &str {
        &self.public_host
    }

    /// The directory the repositories live under.
    pub(crate) fn git_root(&self) -> &std::path::Path {
        self.layout.git_root()
    }

    /// The other members of this replica set (`--replica`, docs/scaling.md); none outside one.
    pub(crate) fn replicas(&self) -> &[grasp_state::trust::replica::Replica] {
        &self.replicas
    }

    /// The other replicas, asked for held announcements and states; set with `--replica`.
    pub(crate) fn replica_reads(&self) -> Option<&Arc<dyn replica_set::OtherReplicas>> {
        self.replica_reads.get()
    }

    /// The other replicas that must hold a client's event before its `OK true`; set with
    /// `--replica-acks`.
    pub(crate) fn replica_acks(&self) -> Option<&Arc<dyn replica_set::Confirmations>> {
        self.replica_acks.get()
    }

    /// Repository work deferred because a repository stayed locked past the bound.
    pub(crate) fn deferred(&self) -> &deferred::SharedDeferred {
        &self.deferred
    }

    /// The pull request data no maintainer signed, as the operator sees it.
    pub(crate) fn contributor_view(&self) -> grasp_state::trust::contributor_data::ContributorView {
        self.contributor_data.view()
    }

    /// The operator's purgatory listing: what is held, the deferred work and the contributor data.
    pub(crate) fn purgatory_listing(&self) -> purgatory::PurgatoryListing {
        let mut listing = self.purgatory.listing();
        listing.deferred = self.deferred.listing();
        listing.deferred_stats = self.deferred.stats();
        listing.contributors = self.contributor_data.view();
        listing
    }

    /// Copies of pushed data waiting for the background task.
    pub(crate) fn copies_pending(&self) -> usize {
        self.copies.pending()
    }

    /// Repositories waiting for background maintenance (none when the relay runs none).
    pub(crate) fn maintenance_pending(&self) -> usize {
        self.maintenance.get().map_or(0, |m| m.pending())
    }

    /// Sets the contributor budget and grace (`--contributor-*`, `--pr-data-grace`), then loads
    /// the ledger saved under `data_dir`. At startup.
    pub(crate) fn configure_contributor_data(&self, budget: grasp_state::trust::contributor_data::ContributorBudget, grace: std::time::Duration, data_dir: &std::path::Path) {
        self.contributor_data.configure(budget, grace);
        self.contributor_data.load(data_dir);
    }

    /// Sets the quota per owner and the owners exempt from it. At startup.
    pub(crate) fn configure_owner_quotas(&self, quotas: grasp_state::trust::owner_quota::OwnerQuotas, exempt: impl IntoIterator<Item = PublicKey>) {
        self.owner_quotas.configure(quotas, exempt);
    }

    /// Starts running repository maintenance after pushes. Once, at startup (later calls are
    /// ignored).
    pub(crate) fn set_maintenance(&self, maintenance: maintenance::Maintenance) {
        let _ = self.maintenance.set(maintenance);
    }

    /// Wires `--replica-acks`. Once, at startup (later calls are ignored).
    pub(crate) fn set_replica_acks(&self, acks: Arc<dyn replica_set::Confirmations>) {
        let _ = self.replica_acks.set(acks);
    }

    /// Wires the reads from the other replicas (`--replica`). Once, at startup (later calls are
    /// ignored).
    pub(crate) fn set_replica_reads(&self, reads: Arc<dyn replica_set::OtherReplicas>) {
        let _ = self.replica_reads.set(reads);
    }

    /// Points [`Grasp::note_waiting`] at `hook` (the background sync); gives it back if one is
    /// already set.
    pub(crate) fn set_on_waiting(&self, hook: WaitingHook) -> Result<(), WaitingHook> {
        self.on_waiting.set(hook)
    }
}
