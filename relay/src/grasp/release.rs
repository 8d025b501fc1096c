//! Git data arrival: promotion and release of held events, ref alignment, copies to other owners
//! (docs/protocol.md#release-and-alignment, decision 7).
//!
//! [`Grasp::process_repo`] is the one routine behind every arrival of git data: a background
//! sync fetch, the reconciliation at startup, deferred work and the post-receive hook. It
//! releases and aligns only the repository the data arrived in, then asks the background copies
//! task ([`Grasp::copy_out`], `crate::grasp::copies`) to carry the released data to the family:
//! the released objects are promoted into the identifier family's object pool and the other
//! owners' repositories for which the state is authoritative join the pool and are released and
//! aligned there by a ref update (docs/architecture.md, "Object pools"). It is
//! idempotent: running it twice releases nothing twice. It gathers each repository's facts
//! (refs and HEAD read once, one object lookup), asks the pure
//! [`grasp_state::git::release::plan_release`] and carries the plan out. It runs only under the
//! [`RepoGuards`] of the identifier's repositories (docs/architecture.md, "Lock order").

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use grasp_state::contract::hook_api::{PostReceiveResponse, ReleasedEvent};
use grasp_state::nostr::nip34::RepoState;
use grasp_state::names::identifier::RepoSpace;
use grasp_state::purgatory::RepoId;
use grasp_state::names::refs::{RefMap, RefUpdate, ZERO_OID};
use grasp_state::git::release::{plan_release, promotion_is_certain, settle, superseded_held, wanted_oids, Alignment, RepoFacts, Settled};
use nostr::prelude::{Event, EventId, PublicKey, ToBech32};

use crate::git;
use crate::grasp::locks::{Locked, PushLocks, Queue, RepoGuards, LOCK_WAIT};
use crate::grasp::Source;
use grasp_state::nostr::nip34::Announcement;
use crate::grasp::{blocking, Grasp};
use crate::store::SaveOutcome;

fn released(ev: &Event, summary: impl Into<String>) -> ReleasedEvent {
    ReleasedEvent { id: ev.id.to_hex(), kind: ev.kind.as_u16(), summary: summary.into() }
}

/// A repository's refs and HEAD, read once.
struct RepoView {
    refs: RefMap,
    head: Option<String>,
}

/// Refs and HEAD with one git process (a push's post-receive waits for it).
fn read_view(repo: &Path) -> Result<RepoView, git::GitError> {
    let (refs, head) = git::read_refs_and_head(repo)?;
    Ok(RepoView { refs, head })
}

impl Grasp {
    /// The existing repositories of `owners` for `identifier`.
    pub(crate) fn existing_repos(&self, owners: impl IntoIterator<Item = PublicKey>, identifier: &str) -> Vec<(PublicKey, PathBuf)> {
        owners
            .into_iter()
            .filter_map(|owner| self.repo_path(&owner, identifier).map(|repo| (owner, repo)))
            .filter(|(_, repo)| repo.exists())
            .collect()
    }

    /// The repositories `author`'s events govern for `identifier`: those of the owners whose
    /// maintainer set contains the author, found through the trust index (docs/security.md).
    pub fn governed_repos(&self, identifier: &str, author: &PublicKey, all: &[(Announcement, Source)]) -> Vec<(PublicKey, PathBuf)> {
        let owners = self.authority.owners_trusting(*author, all);
        self.existing_repos(owners.into_iter().map(|(owner, _)| owner), identifier)
    }

    /// The owners of `identifier` whose repository something held waits for: a held state of
    /// their maintainer set, their held announcement, a held pull request for it. Never a third
    /// party's repository no held event governs (docs/security.md).
    fn waiting_owners(&self, identifier: &str, all: &[(Announcement, Source)]) -> Vec<PublicKey> {
        all.iter()
            .filter(|(a, source)| {
                *source == Source::Purgatory
                    || !self.purgatory.state_events(identifier, &self.maintainer_set(a.owner, all)).is_empty()
                    || !self.purgatory.pr_events_for(&RepoId::new(a.owner, identifier)).is_empty()
            })
            .map(|(a, _)| a.owner)
            .collect()
    }

    /// Locks the existing repositories of `identifier` that something held waits for
    /// ([`Self::waiting_owners`]) and that can be locked within [`LOCK_WAIT`] (background work:
    /// sync, startup reconciliation). For the others the background sync is asked to come back.
    async fn guard_identifier(&self, identifier: &str, push: PushLocks) -> (RepoGuards, Vec<PublicKey>) {
        let all = self.announcements(identifier).await;
        let repos = self.existing_repos(self.waiting_owners(identifier, &all), identifier);
        let queue = self.locks.enqueue(repos.iter().map(|(_, repo)| repo.clone()));
        let (guards, failed) = RepoGuards::acquire_available(queue, push, LOCK_WAIT).await;
        if !failed.is_empty() {
            let busy: Vec<String> = failed.iter().map(|e| self.shown_repo(e.repo())).collect();
            tracing::warn!(identifier, repos = ?busy, error = %failed[0], "repositories busy; their release is retried by background sync");
            // Come back soon (the sync delay), then with the sync's backoff.
            self.note_waiting(identifier, crate::grasp::Origin::Sync);
        }
        let locked = repos.into_iter().filter(|(_, repo)| guards.get(repo).is_some()).map(|(owner, _)| owner).collect();
        (guards, locked)
    }

    /// Releases what every owner's repository for `identifier` satisfies, with no push running
    /// on them meanwhile (their push locks are held). For background work (a sync fetch): a
    /// repository busy past [`LOCK_WAIT`] is left to the sync's next round. Never call it from
    /// code a hook waits on (that push holds its repository's push lock). Returns the number of
    /// events released.
    pub async fn process_identifier(&self, identifier: &str) -> usize {
        let (guards, owners) = self.guard_identifier(identifier, PushLocks::Take).await;
        let mut released = 0;
        for owner in &owners {
            released += self.process_repo(owner, identifier, &guards).await.len();
        }
        drop(guards);
        released + self.process_contributor_repos(identifier).await
    }

    /// Releases what the repositories `author`'s events govern for `identifier` now satisfy
    /// (retrying deferred work). See [`Grasp::process_queued`].
    pub async fn process_governed(&self, identifier: &str, author: &PublicKey) -> usize {
        let all = self.announcements(identifier).await;
        let repos = self.governed_repos(identifier, author, &all);
        let queue = self.locks.enqueue(repos.iter().map(|(_, repo)| repo.clone()));
        self.process_queued(identifier, author, &repos, queue).await
    }

    /// Releases what `repos` (governed by `author`) now satisfy, with their push locks held,
    /// waiting for each at most the event bound (`--event-lock-wait`) in the places `queue`
    /// holds. The repositories that stay busy are deferred and retried later; the rest proceed.
    pub async fn process_queued(&self, identifier: &str, author: &PublicKey, repos: &[(PublicKey, PathBuf)], queue: Queue) -> usize {
        let (guards, failed) = RepoGuards::acquire_available(queue, PushLocks::Take, self.locks.limits().event_wait).await;
        let mut released = 0;
        for (owner, repo) in repos {
            if guards.get(repo).is_some() {
                released += self.process_repo(owner, identifier, &guards).await.len();
            }
        }
        drop(guards);
        if failed.is_empty() {
            self.deferred.done(identifier, author);
        } else {
            self.deferred.defer(self, identifier, author, &failed);
        }
        released
    }

    /// A push's data arrived in `repo` (its applied `updates`, from `client`): what
    /// `post-receive` reports, whether the hook calls the hook API or the relay's listener ran
    /// the push itself (`grasp_state::git::receive_pack`). The ref cache forgets the repository's
    /// answers, the held events the data satisfies are released, a replica set confirms the
    /// push (`--replica-acks`), and maintenance is scheduled. The answer's lines are shown to
    /// the pusher.
    pub async fn push_arrived(&self, repo: RepoId, updates: &[RefUpdate], client: Option<IpAddr>) -> PostReceiveResponse {
        // The push's refs are written: no answer the ref cache made before counts any more
        // (the pusher is answered after this).
        if let Some(path) = self.path_of(&repo) {
            crate::git::ref_generation::bump(&path);
        }
        let address = client.map(|a| self.trust.limits.address_key(a));
        let RepoId { owner, identifier, space } = &repo;
        let mut answer = match space {
            RepoSpace::Hosted => self.metrics.push_release(self.git_arrived(owner, identifier, updates, address)).await,
            RepoSpace::Prs => self.metrics.push_release(self.contribution_arrived(owner, identifier, updates, address)).await,
        };
        // A replica set's durability (`--replica-acks`): the others serve the push first.
        if let (Some(acks), RepoSpace::Hosted) = (self.replica_acks.get(), space) {
            if let Some(path) = self.repo_path(owner, identifier) {
                if let Ok(refs) = blocking(move || crate::git::read_refs(&path)).await {
                    answer.messages.push(acks.confirm_push(&owner.to_bech32().unwrap_or_default(), identifier, &refs).await);
                }
            }
        }
        crate::grasp::maintenance::after_push(self, &repo);
        answer
    }

    /// The post-receive hook's report: record git-first placeholders (pushed from `address`, as
    /// counted), then release.
    pub async fn git_arrived(&self, owner: &PublicKey, identifier: &str, updates: &[RefUpdate], address: Option<IpAddr>) -> PostReceiveResponse {
        self.record_placeholders(&RepoId::new(*owner, identifier), updates, address).await;
        // Only the pushed repository: the pusher's answer waits for its own release alone. The
        // released data reaches the other owners' repositories (co-maintainers and anyone whose
        // maintainer set trusts the state's author) afterwards, in the background, through the
        // family's object pool (`crate::grasp::copies`, docs/architecture.md, "Object pools").
        let repos = self.existing_repos([*owner], identifier);
        let queue = self.locks.enqueue(repos.iter().map(|(_, repo)| repo.clone()));
        // This push holds its repository's push lock: take the repository lock only.
        let (guards, failed) = RepoGuards::acquire_available(queue, PushLocks::Skip, LOCK_WAIT).await;
        if !failed.is_empty() {
            self.deferred.defer(self, identifier, owner, &failed);
        }
        let own_locked = self.repo_path(owner, identifier).is_some_and(|repo| guards.get(&repo).is_some());
        if !own_locked {
            return PostReceiveResponse::new(
                Vec::new(),
                vec!["grasp: push received; the relay is busy with this repository, held events are released shortly".into()],
            );
        }
        let released = self.process_repo(owner, identifier, &guards).await;
        drop(guards);
        let mut messages = Vec::new();
        if released.is_empty() {
            messages.push("grasp: push received; no held events were waiting for this data".to_string());
        }
        PostReceiveResponse::new(released, messages)
    }

    /// Carries the released data of `owner`'s repository of `identifier` to its family (the
    /// background half of a release; `crate::grasp::copies`): when the release shares objects
    /// ([`Grasp::family_shares`]), the repository joins the family's object pool and
    /// what signed events released there is promoted into it; then every other owner's
    /// repository for which its latest state is authoritative joins the pool and is released
    /// and aligned like after a push: a ref update, its objects found through the pool. Each
    /// repository is taken under its own push and repository locks, tried without waiting.
    /// False when some repository was busy or a step failed (tried again later).
    pub async fn copy_out(&self, identifier: &str, owner: &PublicKey) -> bool {
        let Some(src) = self.repo_path(owner, identifier).filter(|p| p.is_dir()) else { return true };
        let all = self.announcements(identifier).await;
        let set = self.maintainer_set(*owner, &all);
        let state = self.latest_stored_state(identifier, &set).await;
        let (shares, targets) = self.family_shares(identifier, owner, state.as_ref(), &all);
        if !shares {
            // Nobody else follows this repository and there is no pool: nothing to share.
            return true;
        }
        let mut ok = true;
        // The source: joins the pool and promotes what is released there.
        match RepoGuards::acquire_within(&self.locks, [src.clone()], PushLocks::Take, Duration::ZERO).await {
            Ok(guards) => {
                if let Some(locked) = guards.get(&src) {
                    if let Err(e) = self.join_and_promote(owner, identifier, locked, &all).await {
                        tracing::warn!(identifier, repo = %self.shown_repo(&src), error = %e, "could not promote released objects into the object pool; tried again later");
                        ok = false;
                    }
                }
            }
            Err(e) => {
                tracing::info!(identifier, repo = %self.shown_repo(e.repo()), "promotion deferred: repository busy, tried again later");
                ok = false;
            }
        }
        let mut busy = Vec::new();
        for (other, dst) in targets {
            let guards = match RepoGuards::acquire_within(&self.locks, [dst.clone()], PushLocks::Take, Duration::ZERO).await {
                Ok(guards) => guards,
                Err(e) => {
                    busy.push(self.shown_repo(e.repo()));
                    continue;
                }
            };
            let Some(locked) = guards.get(&dst) else { continue };
            if let Err(e) = self.join_pool(identifier, locked).await.map(drop) {
                tracing::warn!(identifier, to = %self.shown_repo(&dst), error = %e, "could not join another owner's repository to the object pool; tried again later");
                ok = false;
                continue;
            }
            let (released, _) = self.process_one(&other, identifier, locked, &all).await;
            if !released.is_empty() {
                tracing::info!(identifier, to = %self.shown_repo(&dst), count = released.len(), "released in another owner's repository through the object pool");
            }
            if let Err(e) = self.promote(&other, identifier, locked, &all).await {
                tracing::warn!(identifier, repo = %self.shown_repo(&dst), error = %e, "could not record refs in the object pool; tried again later");
                ok = false;
            }
        }
        if !busy.is_empty() {
            tracing::info!(identifier, from = %self.shown_repo(&src), repos = ?busy, "copy deferred: repositories busy, tried again later");
        }
        ok && busy.is_empty()
    }

    /// `owner`'s repository of `identifier` follows a change of its confirmed maintainers
    /// (docs/protocol.md#maintainer-authority): under its push and repository locks, tried
    /// without waiting, it releases the held states that are now authoritative and aligns to the
    /// newest authoritative state whose objects are here (never to nothing: without one, its refs
    /// stay). False when it was busy (tried again later).
    pub async fn realign(&self, identifier: &str, owner: &PublicKey) -> bool {
        let Some(repo) = self.repo_path(owner, identifier).filter(|p| p.is_dir()) else { return true };
        let Some(released) = self.realign_within(owner, identifier, &repo, Duration::ZERO).await else { return false };
        self.metrics.authority_realigned();
        tracing::info!(identifier, repo = %self.shown_repo(&repo), released = released.len(), "repository realigned to its confirmed maintainers");
        true
    }

    /// Releases what `owner`'s repository `repo` now satisfies and aligns it
    /// ([`Grasp::process_repo`]) under its push and repository locks, waiting for them at most
    /// `wait`; `None` when it stayed busy (logged).
    pub(crate) async fn realign_within(&self, owner: &PublicKey, identifier: &str, repo: &Path, wait: Duration) -> Option<Vec<ReleasedEvent>> {
        match RepoGuards::acquire_within(&self.locks, [repo.to_path_buf()], PushLocks::Take, wait).await {
            Ok(guards) => Some(self.process_repo(owner, identifier, &guards).await),
            Err(e) => {
                tracing::info!(identifier, repo = %self.shown_repo(e.repo()), "realignment put off: the repository is busy (a push); tried again later");
                None
            }
        }
    }

    /// [`Grasp::join_pool`] then [`Grasp::promote`] for one locked repository.
    async fn join_and_promote(&self, owner: &PublicKey, identifier: &str, repo: Locked<'_>, all: &[(Announcement, Source)]) -> Result<(), String> {
        self.join_pool(identifier, repo).await?;
        self.promote(owner, identifier, repo, all).await.map(drop)
    }

    /// Releases what `owner`'s repository for `identifier` now satisfies and aligns it, then
    /// asks the background copies task to carry the released data to the family
    /// ([`Grasp::copy_out`]). Touches only the repository `guards` holds. Returns what was
    /// released.
    pub async fn process_repo(&self, owner: &PublicKey, identifier: &str, guards: &RepoGuards) -> Vec<ReleasedEvent> {
        let Some(src) = self.repo_path(owner, identifier) else { return Vec::new() };
        let Some(src) = guards.get(&src) else { return Vec::new() };
        // Read once: what the owners' announcements say does not change during a release (a
        // promotion only moves an announcement from the purgatory to the store).
        let all = self.announcements(identifier).await;
        let (out, latest) = self.process_one(owner, identifier, src, &all).await;
        let latest = match latest {
            Some(latest) => latest,
            None => self.latest_stored_state(identifier, &self.maintainer_set(*owner, &all)).await,
        };
        // The background half, when there is anything to share (cheap to decide: the
        // announcements are at hand; a repository nobody else follows costs nothing more).
        if self.family_shares(identifier, owner, latest.as_ref(), &all).0 {
            self.copies.request(identifier, owner);
        }
        out
    }

    /// The release for one repository: gather its facts, plan, carry the plan out. Returns what
    /// was released and, when known (`None`: the release stopped before reading the store), the
    /// latest stored state of `owner`'s maintainer set after it (the store is not asked again).
    async fn process_one(
        &self,
        owner: &PublicKey,
        identifier: &str,
        repo: Locked<'_>,
        all: &[(Announcement, Source)],
    ) -> (Vec<ReleasedEvent>, Option<Option<RepoState>>) {
        let mut out = Vec::new();
        if !repo.path().exists() {
            return (out, None);
        }
        let shown = format!("{}/{identifier}", owner.to_bech32().unwrap_or_default());
        let view = match blocking({
            let repo = repo.path().to_path_buf();
            move || read_view(&repo)
        })
        .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(repo = %shown, error = %e, "cannot read refs");
                return (out, None);
            }
        };
        let set = self.maintainer_set(*owner, all);
        let held_states = self.held_states(identifier, &set);
        let pr_events: Vec<(Arc<Event>, String)> = self.purgatory.pr_events_for(&RepoId::new(*owner, identifier));
        let held_prs: Vec<(EventId, String)> = pr_events.iter().map(|(ev, commit)| (ev.id, commit.clone())).collect();
        let pr_events: HashMap<EventId, Arc<Event>> = pr_events.into_iter().map(|(ev, _)| (ev.id, ev)).collect();
        let latest_stored = self.latest_stored_state(identifier, &set).await;
        let announcement_held = all.iter().any(|(a, source)| a.owner == *owner && *source == crate::grasp::Source::Purgatory);
        // One object lookup for everything the plan needs; `None`: the repository could not be
        // asked, so nothing is released from it now.
        // Objects refs point at are here (a push's tips, most often all of them): only the
        // others are asked for, and often no git process runs.
        let tips: BTreeSet<&String> = view.refs.values().collect();
        let wanted: Vec<String> = wanted_oids(&held_states, &held_prs, latest_stored.as_ref()).into_iter().filter(|o| !tips.contains(o)).collect();
        let missing: Option<BTreeSet<String>> = match blocking({
            let repo = repo.path().to_path_buf();
            move || if wanted.is_empty() { Ok(Vec::new()) } else { git::missing_objects(&repo, &wanted) }
        })
        .await
        {
            Ok(m) => Some(m.into_iter().collect()),
            Err(e) => {
                tracing::warn!(repo = %shown, error = %e, "cannot check objects");
                None
            }
        };
        let facts = RepoFacts {
            refs: &view.refs,
            head: view.head.as_deref(),
            held_states: &held_states,
            held_prs: &held_prs,
            latest_stored: latest_stored.as_ref(),
            missing: missing.as_ref(),
            announcement_held,
        };
        let plan = plan_release(&facts);

        // Every released event is stored first and only then taken out of the purgatory: on a
        // store error it stays held and the release is retried (by the background sync).
        let mut retry = false;

        // 1. Held states whose objects all exist here, oldest first, stored together (one store
        // write), with the owner's announcement when its promotion (step 4) is certain anyway.
        let announcement =
            if promotion_is_certain(&facts) { self.purgatory.held_announcement(owner, identifier) } else { None };
        let states: Vec<(&RepoState, Arc<Event>)> = plan
            .store
            .iter()
            .filter_map(|state| Some((state, self.purgatory.held_state(identifier, &state.event_id)?)))
            .collect();
        let batch: Vec<&Event> = announcement.iter().chain(states.iter().map(|(_, ev)| ev)).map(|ev| &**ev).collect();
        let mut results = self.relay.publish_all(&batch).await.into_iter().map(StoreResult::from);
        let announcement = announcement.map(|ev| {
            let result = results.next().unwrap_or(StoreResult::Failed("not stored".into()));
            (ev, result)
        });
        let mut stored: Vec<RepoState> = Vec::new();
        for ((state, ev), result) in states.iter().zip(results) {
            let state = *state;
            match result {
                StoreResult::Stored => {
                    self.purgatory.remove_state(identifier, &ev.id);
                    tracing::info!(repo = %shown, event = %ev.id, "state event released");
                    out.push(released(ev, format!("repository state of {identifier}")));
                    stored.push(state.clone());
                }
                StoreResult::Refused(reason) => {
                    self.purgatory.remove_state(identifier, &ev.id);
                    tracing::info!(repo = %shown, event = %ev.id, reason = %reason, "released state event not stored");
                }
                StoreResult::Failed(error) => {
                    tracing::warn!(repo = %shown, event = %ev.id, %error, "released state event could not be stored; kept held, retried");
                    retry = true;
                }
            }
        }
        // Held states the promoted ones make obsolete (same author and `d`, older, objects still
        // missing) leave the purgatory: nobody needs their objects any more.
        for id in superseded_held(&facts, &stored) {
            if self.purgatory.remove_state(identifier, &id).is_some() {
                tracing::info!(repo = %shown, event = %id, "purgatory: state event superseded by a promoted one of its author, pruned");
            }
        }

        // 2. Held pull requests for this repository whose commit exists here.
        for pr in &plan.prs {
            let Some(ev) = pr_events.get(&pr.event_id) else { continue };
            if let Some(change) = pr.change.clone() {
                let repo2 = repo.path().to_path_buf();
                if blocking(move || git::update_refs(&repo2, &[change])).await.is_err() {
                    continue;
                }
            }
            match self.store_released(ev).await {
                StoreResult::Stored => {
                    self.purgatory.remove_pr(&ev.id);
                    tracing::info!(repo = %shown, event = %ev.id, "pull request released");
                    out.push(released(ev, "pull request"));
                }
                StoreResult::Refused(reason) => {
                    self.purgatory.remove_pr(&ev.id);
                    tracing::info!(repo = %shown, event = %ev.id, reason = %reason, "released pull request not stored");
                }
                StoreResult::Failed(error) => {
                    tracing::warn!(repo = %shown, event = %ev.id, %error, "released pull request could not be stored; kept held, retried");
                    retry = true;
                }
            }
        }

        // 3. Align branches, tags and HEAD to the latest state of the maintainer set (the plan's,
        // unless the store refused some of the states it released).
        let Settled { align, promote_announcement } = if stored.len() == plan.store.len() {
            Settled { align: plan.align, promote_announcement: plan.promote_announcement }
        } else {
            settle(&facts, &stored)
        };
        if let Some(alignment) = align {
            self.align(repo, &shown, alignment).await;
        }

        // 4. Promote the owner's announcement once the repository holds data (stored in step 1
        // when that was certain).
        let promoted = match announcement {
            Some(stored_in_step_1) => Some(stored_in_step_1),
            None if promote_announcement => match self.purgatory.held_announcement(owner, identifier) {
                Some(ev) => {
                    let result = self.store_released(&ev).await;
                    Some((ev, result))
                }
                None => None,
            },
            None => None,
        };
        if let Some((ev, result)) = promoted {
            match result {
                StoreResult::Stored => {
                    self.purgatory.remove_promoted_announcement(owner, identifier, &ev.id);
                    tracing::info!(repo = %shown, event = %ev.id, "announcement promoted");
                    out.insert(0, released(&ev, format!("announcement of {identifier}")));
                }
                StoreResult::Refused(reason) => {
                    self.purgatory.remove_promoted_announcement(owner, identifier, &ev.id);
                    tracing::info!(repo = %shown, event = %ev.id, reason = %reason, "promoted announcement not stored");
                }
                StoreResult::Failed(error) => {
                    tracing::warn!(repo = %shown, event = %ev.id, %error, "promoted announcement could not be stored; kept held, retried");
                    retry = true;
                }
            }
        }
        if retry {
            self.note_waiting(identifier, crate::grasp::Origin::Sync);
        }
        self.metrics.released(&out);
        let latest_after = stored.into_iter().chain(latest_stored).max_by_key(RepoState::recency);
        (out, Some(latest_after))
    }

    /// Stores an event released from the purgatory and broadcasts it. The caller removes it from
    /// the purgatory unless storing failed.
    async fn store_released(&self, ev: &Event) -> StoreResult {
        self.relay.publish(ev).await.into()
    }

    /// Carries out an alignment (one compare-and-swap transaction, then HEAD).
    async fn align(&self, repo: Locked<'_>, shown: &str, alignment: Alignment) {
        let Alignment { state, changes, head } = alignment;
        // Refs moving away from objects may leave released history no member needs in the pool.
        let moved_away = changes.iter().any(|c| match c {
            git::RefChange::Delete { .. } => true,
            git::RefChange::Set { old, .. } => old != ZERO_OID,
        });
        let repo2 = repo.path().to_path_buf();
        let res = blocking(move || -> Result<usize, git::GitError> {
            git::update_refs(&repo2, &changes)?;
            if let Some(head) = head {
                git::set_head(&repo2, &head)?;
            }
            Ok(changes.len())
        })
        .await;
        match res {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(repo = %shown, state = %state, changes = n, "refs aligned to state");
                if moved_away {
                    crate::grasp::maintenance::after_member_refs_moved(self, repo.path());
                }
            }
            Err(e) => tracing::warn!(repo = %shown, state = %state, error = %e, "could not align refs"),
        }
    }

    /// Reconciles every repository with the purgatory (startup, after a crash between the hooks):
    /// every held state whose data is present is released. It also removes push quarantines
    /// abandoned by a crash mid-push: those idle for `quarantine_idle` (the git idle timeout,
    /// past which no live push is silent).
    pub async fn reconcile_all(&self, quarantine_idle: std::time::Duration) {
        let git_root = self.layout.git_root().to_path_buf();
        blocking(move || crate::git::repos::remove_stale_quarantines(&git_root, quarantine_idle, crate::git::repos::Sweep::Startup)).await;
        let removed = self.remove_empty_contributor_repos().await;
        if removed > 0 {
            tracing::info!(removed, "reconciled: empty contributor repositories removed");
        }
        let identifiers = self.purgatory.waiting_identifiers();
        for identifier in identifiers {
            let (guards, owners) = self.guard_identifier(&identifier, PushLocks::Take).await;
            for owner in owners {
                let released = self.process_repo(&owner, &identifier, &guards).await;
                if !released.is_empty() {
                    tracing::info!(identifier, count = released.len(), "reconciled: released held events");
                }
            }
            drop(guards);
            let released = self.process_contributor_repos(&identifier).await;
            if released > 0 {
                tracing::info!(identifier, count = released, "reconciled: released pull requests of contributor repositories");
            }
        }
    }
}


impl From<Result<SaveOutcome, crate::store::StoreError>> for StoreResult {
    fn from(saved: Result<SaveOutcome, crate::store::StoreError>) -> Self {
        match saved {
            Ok(SaveOutcome::Saved) => StoreResult::Stored,
            Ok(other) => StoreResult::Refused(other.ok_reply().1),
            Err(e) => StoreResult::Failed(e.to_string()),
        }
    }
}

/// What storing an event released from the purgatory came to.
enum StoreResult {
    /// Stored and broadcast: take it out of the purgatory.
    Stored,
    /// The store will never take it (already there, deleted, superseded): take it out too.
    Refused(String),
    /// The store failed: keep it held and retry.
    Failed(String),
}
