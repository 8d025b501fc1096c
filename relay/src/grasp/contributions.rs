//! GRASP-06 contributor repositories, `/prs/<npub>/<identifier>.git`
//! (docs/protocol.md#contributor-repositories): where anyone pushes the commits of their own pull
//! requests when the repository's own servers cannot take them.
//!
//! - [`Grasp::create_contributor_repo`]: a push arrived for a path with no repository (grasp-cgi
//!   asks, `POST /v1/prs-repo`): made under `--max-repos` and the free-disk watermark, and looked
//!   at again by maintenance once the push is over (an empty one is removed).
//! - [`Grasp::authorize_contribution`] (pre-receive): the pure
//!   [`grasp_state::git::push::decide_contribution_push`] over the pull requests the push names;
//!   git-first refs reserve placeholders as in an announced repository.
//! - [`Grasp::contribution_arrived`] (post-receive): placeholders recorded, the held pull requests
//!   whose commit is now here released, and each pull request the push brought copied into the
//!   announced repositories its `a` tags name ([`Grasp::mirror_pull_request`]); never the other
//!   way round.
//!
//! A contributor repository holds nothing but `refs/nostr/<event-id>` refs: the expiry of
//! placeholders and of held pull requests removes them as in any repository, and maintenance
//! removes the repository once it has no ref left ([`crate::grasp::maintenance`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use grasp_state::contract::hook_api::{PostReceiveResponse, PreReceiveResponse, ReleasedEvent};
use grasp_state::nostr::nip34::PullRequest;
use grasp_state::purgatory::RepoId;
use grasp_state::git::push::{decide_contribution_push, with_reasons, ContributionPush, KnownPr, PushDecision};
use grasp_state::names::refs::{RefUpdate, NOSTR_PREFIX, ZERO_OID};
use grasp_state::git::release::{pr_ref, PrRef};
use nostr::prelude::{Event, EventId, PublicKey};

use crate::git;
use crate::grasp::locks::{PushLocks, RepoGuards, LOCK_WAIT};
use crate::grasp::{blocking, Grasp};

/// Why a contributor repository was not made.
#[derive(Debug, thiserror::Error)]
pub enum ContributorRepoError {
    #[error("GRASP-06 contributor repositories are not served here")]
    Off,
    #[error("{0}")]
    Refused(String),
    #[error("could not create the repository: {0}")]
    Failed(String),
}

impl Grasp {
    /// The contributor repository `/prs/<contributor>/<identifier>.git`: made for a push that
    /// arrived for it (its `POST`), counted under `--max-repos`, refused below the free-disk
    /// watermark. `Ok(true)` when this call made it. Maintenance looks at it one git idle
    /// timeout later (the push then holds its lock, or never will) and removes it if the push
    /// left no ref.
    pub async fn create_contributor_repo(&self, contributor: &PublicKey, identifier: &str) -> Result<bool, ContributorRepoError> {
        if !self.grasp06 {
            return Err(ContributorRepoError::Off);
        }
        let repo = RepoId::prs(*contributor, identifier);
        let path = self.path_of(&repo).ok_or_else(|| ContributorRepoError::Refused("not a valid repository path".into()))?;
        if path.is_dir() {
            return Ok(false);
        }
        if !self.trust.disk.has_room() {
            return Err(ContributorRepoError::Refused("this server is low on disk space".into()));
        }
        self.trust.limits.take_repo_slot().map_err(ContributorRepoError::Refused)?;
        let (layout, hooks, id) = (self.layout.clone(), self.hooks_dir.clone(), identifier.to_string());
        let contributor = *contributor;
        let made = blocking(move || {
            crate::git::repos::create_repo(&layout, grasp_state::names::identifier::RepoSpace::Prs, &contributor, &id, &hooks, false)
        })
        .await;
        match made {
            Ok((path, created)) => {
                if created {
                    tracing::info!(repo = %self.shown_repo(&path), "contributor repository created for a push");
                    self.check_contributor_repo_later(path);
                } else {
                    self.trust.limits.repo_removed();
                }
                Ok(created)
            }
            Err(e) => {
                self.trust.limits.repo_removed();
                Err(ContributorRepoError::Failed(e.to_string()))
            }
        }
    }

    /// Has maintenance look at the contributor repository `path` one git idle timeout from now.
    fn check_contributor_repo_later(&self, path: PathBuf) {
        if let Some(maintenance) = self.maintenance.get() {
            maintenance.schedule_after_idle(path);
        }
    }

    /// May this push to `/prs/<contributor>/<identifier>.git` go in (pre-receive)?
    pub async fn authorize_contribution(&self, contributor: &PublicKey, identifier: &str, updates: &[RefUpdate], address: Option<IpAddr>, incoming: u64) -> PreReceiveResponse {
        let repo = RepoId::prs(*contributor, identifier);
        let Some(path) = self.path_of(&repo).filter(|_| self.grasp06) else {
            return PreReceiveResponse::reject(vec!["grasp: push rejected: GRASP-06 contributor repositories are not served here".into()]);
        };
        let shown = self.shown_repo(&path);
        if !self.trust.disk.has_room() {
            tracing::info!(repo = %shown, reason = "low disk", "push rejected");
            self.after_contribution(&path);
            return PreReceiveResponse::reject(vec![format!("grasp: push rejected: {}", grasp_state::trust::free_disk::LOW_DISK_PUSH)]);
        }
        let mut known_prs = BTreeMap::new();
        let mut not_prs = Vec::new();
        for u in updates {
            let Some(id) = u.name.strip_prefix(NOSTR_PREFIX).and_then(|h| EventId::from_hex(h).ok()) else { continue };
            let event = match self.event_by_id(&id).await {
                Some(ev) => Some(ev),
                None => self.purgatory.held_pr_event(&id).map(|ev| (*ev).clone()),
            };
            let Some(ev) = event else { continue };
            match PullRequest::from_event(&ev) {
                Ok(pr) => {
                    let identifiers = pr.repos.iter().map(|(_, d)| d.clone()).collect();
                    known_prs.insert(id, KnownPr { author: pr.author, commit: pr.commit, identifiers });
                }
                Err(_) if !u.is_noop() && u.new != ZERO_OID => not_prs.push(format!(
                    "{}: event {} is a kind {} event, not a pull request (1618) or pull request update (1619) with a `c` tag",
                    u.name,
                    &id.to_hex()[..12],
                    ev.kind.as_u16()
                )),
                Err(_) => {}
            }
        }
        let decision = decide_contribution_push(&ContributionPush { contributor, identifier, updates, known_prs: &known_prs });
        // Git-first refs reserve their placeholders before any data lands, as in any repository
        // (docs/protocol.md#placeholders).
        let decision = self.reserve_placeholders(&repo, with_reasons(decision, not_prs), address, incoming).await;
        // The contributor's pull request data counts against their budgets (unless they
        // maintain a repository of the identifier).
        let authors: BTreeMap<EventId, PublicKey> = known_prs.iter().map(|(id, pr)| (*id, pr.author)).collect();
        let decision = self.charge_pr_matches(None, identifier, decision, &authors, address, incoming).await;
        match decision {
            PushDecision::Accept(acc) => {
                let messages = crate::grasp::authorize::placeholder_messages(&acc);
                tracing::info!(repo = %shown, placeholders = acc.placeholders.len(), pull_requests = acc.pr_matches.len(), "contributor push authorised");
                PreReceiveResponse::accept(messages)
            }
            PushDecision::Reject(rej) => {
                tracing::info!(repo = %shown, reasons = ?rej.reasons, "contributor push rejected");
                // A repository made for this push and left empty goes once the push is over.
                self.after_contribution(&path);
                let mut messages = vec!["grasp: push rejected".to_string()];
                messages.extend(rej.reasons.into_iter().map(|r| format!("grasp: {r}")));
                PreReceiveResponse::reject(messages)
            }
        }
    }

    /// Maintenance looks at a contributor repository once the push holding it is over.
    fn after_contribution(&self, path: &Path) {
        if let Some(m) = self.maintenance.get() {
            m.schedule(path.to_path_buf());
        }
    }

    /// The post-receive report of a push to `/prs/<contributor>/<identifier>.git`: placeholders
    /// recorded, held pull requests whose commit is now here released, and every pull request the
    /// push brought copied into the announced repositories its `a` tags name.
    pub async fn contribution_arrived(&self, contributor: &PublicKey, identifier: &str, updates: &[RefUpdate], address: Option<IpAddr>) -> PostReceiveResponse {
        let repo = RepoId::prs(*contributor, identifier);
        let Some(path) = self.path_of(&repo) else { return PostReceiveResponse::new(Vec::new(), Vec::new()) };
        self.record_placeholders(&repo, updates, address).await;
        // This push holds the repository's push lock: take the relay's lock only.
        let guards = match RepoGuards::acquire_within(&self.locks, [path.clone()], PushLocks::Skip, LOCK_WAIT).await {
            Ok(guards) => guards,
            Err(error) => {
                tracing::warn!(repo = %self.shown_repo(&path), %error, "contributor push not processed now; retried by background sync");
                self.note_waiting(identifier, crate::grasp::Origin::Sync);
                return PostReceiveResponse::new(Vec::new(), vec!["grasp: push received; the relay is busy with this repository".into()]);
            }
        };
        let released = self.release_contributions(&repo, &guards).await;
        drop(guards);
        // The pull requests this push brought (held ones just released, stored ones pushed here
        // again) are copied where their repositories' owners look.
        let mut mirrored = std::collections::BTreeSet::new();
        for u in updates.iter().filter(|u| u.new != ZERO_OID) {
            let Some(id) = u.name.strip_prefix(NOSTR_PREFIX).and_then(|h| EventId::from_hex(h).ok()) else { continue };
            if !mirrored.insert(id) {
                continue;
            }
            if let Some(ev) = self.event_by_id(&id).await {
                if let Ok(pr) = PullRequest::from_event(&ev) {
                    if pr.commit == u.new {
                        self.mirror_pull_request(&pr, &path).await;
                    }
                }
            }
        }
        let messages = if released.is_empty() {
            vec!["grasp: push received; no held events were waiting for this data".to_string()]
        } else {
            Vec::new()
        };
        PostReceiveResponse::new(released, messages)
    }

    /// Releases the held pull requests waiting for data in the contributor repository `repo`
    /// whose commit is there now: `refs/nostr/<id>` set, the event stored, then copied into the
    /// announced repositories it names. Touches only `repo` (which `guards` must hold) until the
    /// copies, which take their targets' locks themselves. Returns what was released.
    pub async fn release_contributions(&self, repo: &RepoId, guards: &RepoGuards) -> Vec<ReleasedEvent> {
        let mut out = Vec::new();
        let Some(path) = self.path_of(repo) else { return out };
        let Some(locked) = guards.get(&path) else { return out };
        if !locked.path().exists() {
            return out;
        }
        let held: Vec<(Arc<Event>, String)> = self.purgatory.pr_events_for(repo);
        if held.is_empty() {
            return out;
        }
        let commits: Vec<String> = held.iter().map(|(_, c)| c.clone()).collect();
        let repo_path = path.clone();
        let present = blocking(move || -> Result<(grasp_state::names::refs::RefMap, Vec<String>), git::GitError> {
            let refs = git::read_refs(&repo_path)?;
            let missing = git::missing_objects(&repo_path, &commits)?;
            Ok((refs, missing))
        })
        .await;
        let (refs, missing) = match present {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(repo = %self.shown_repo(&path), error = %e, "cannot read contributor repository");
                return out;
            }
        };
        for (ev, commit) in held {
            let name = format!("{NOSTR_PREFIX}{}", ev.id.to_hex());
            let change = match pr_ref(&name, refs.get(&name).map(String::as_str), &commit, !missing.contains(&commit)) {
                PrRef::Served => None,
                PrRef::Set(change) => Some(change),
                PrRef::Missing { .. } => continue,
            };
            if let Some(change) = change {
                let p = path.clone();
                if blocking(move || git::update_refs(&p, &[change])).await.is_err() {
                    continue;
                }
            }
            match self.relay.publish(&ev).await {
                Ok(crate::store::SaveOutcome::Saved) => {
                    self.purgatory.remove_pr(&ev.id);
                    tracing::info!(repo = %self.shown_repo(&path), event = %ev.id, "pull request released from a contributor repository");
                    out.push(ReleasedEvent { id: ev.id.to_hex(), kind: ev.kind.as_u16(), summary: "pull request".into() });
                }
                Ok(outcome) => {
                    self.purgatory.remove_pr(&ev.id);
                    tracing::info!(event = %ev.id, reply = %outcome.ok_reply().1, "released pull request not stored");
                }
                Err(e) => {
                    tracing::warn!(event = %ev.id, error = %e, "released pull request could not be stored; kept held, retried");
                    self.note_waiting(&repo.identifier, crate::grasp::Origin::Sync);
                }
            }
        }
        self.metrics.released(&out);
        out
    }

    /// Releases what the contributor repositories of `identifier` now satisfy (background sync's
    /// retry, startup reconciliation): each under its push lock and the relay's lock, tried
    /// within [`LOCK_WAIT`]; the released pull requests are copied into the announced
    /// repositories they name. Returns how many events were released.
    pub async fn process_contributor_repos(&self, identifier: &str) -> usize {
        if !self.grasp06 {
            return 0;
        }
        let mut released = 0;
        for repo in self.purgatory.contributor_repos_for(identifier) {
            let Some(path) = self.path_of(&repo).filter(|p| p.exists()) else { continue };
            let guards = match RepoGuards::acquire_within(&self.locks, [path.clone()], PushLocks::Take, LOCK_WAIT).await {
                Ok(guards) => guards,
                Err(error) => {
                    tracing::info!(repo = %self.shown_repo(&path), %error, "contributor repository busy; retried later");
                    self.note_waiting(identifier, crate::grasp::Origin::Sync);
                    continue;
                }
            };
            let out = self.release_contributions(&repo, &guards).await;
            drop(guards);
            released += out.len();
            for ev in out {
                let Ok(id) = EventId::from_hex(&ev.id) else { continue };
                if let Some(stored) = self.event_by_id(&id).await {
                    if let Ok(pr) = PullRequest::from_event(&stored) {
                        self.mirror_pull_request(&pr, &path).await;
                    }
                }
            }
        }
        released
    }

    /// Copies pull request `pr`, whose commit is in the contributor repository `src`, into the
    /// announced repositories its `a` tags name (`grasp_state::git::prs::mirror_targets`: at most
    /// [`grasp_state::git::prs::MAX_MIRRORS`], only those announced here): the missing objects, then
    /// `refs/nostr/<id>` at its commit. Each target under its push lock and the relay's lock,
    /// waited for at most `--event-lock-wait`; a busy one is skipped (the pull request stays
    /// fetchable from its `clone` URL, and a new push of it copies again). Never the reverse.
    pub async fn mirror_pull_request(&self, pr: &PullRequest, src: &Path) {
        let mut announced: HashMap<(PublicKey, String), bool> = HashMap::new();
        for (owner, identifier) in pr.repos.iter().take(grasp_state::git::prs::MAX_MIRRORS) {
            announced.insert((*owner, identifier.clone()), self.is_announced_by(owner, identifier).await);
        }
        let targets = grasp_state::git::prs::mirror_targets(pr, |owner, d| announced.get(&(*owner, d.to_string())).copied().unwrap_or(false));
        let targets: Vec<(&RepoId, PathBuf)> = targets.iter().filter_map(|t| Some((t, self.path_of(t)?))).filter(|(_, p)| p.exists()).collect();
        let paths: Vec<PathBuf> = targets.iter().map(|(_, p)| p.clone()).collect();
        if paths.is_empty() {
            return;
        }
        let queue = self.locks.enqueue(paths.iter().cloned());
        let (guards, failed) = RepoGuards::acquire_available(queue, PushLocks::Take, self.locks.limits().event_wait).await;
        let name = format!("{NOSTR_PREFIX}{}", pr.event_id.to_hex());
        for (target, dst) in &targets {
            let Some(locked) = guards.get(dst) else { continue };
            let (dst2, src2, name2, commit) = (locked.path().to_path_buf(), src.to_path_buf(), name.clone(), pr.commit.clone());
            let copied = blocking(move || -> Result<bool, git::GitError> {
                let missing = git::missing_objects(&dst2, std::slice::from_ref(&commit))?;
                git::fetch_objects_local(&dst2, &src2, &missing)?;
                let refs = git::read_refs(&dst2)?;
                match pr_ref(&name2, refs.get(&name2).map(String::as_str), &commit, true) {
                    PrRef::Served => Ok(false),
                    PrRef::Set(change) => git::update_refs(&dst2, &[change]).map(|()| true),
                    PrRef::Missing { .. } => Ok(false),
                }
            })
            .await;
            match copied {
                Ok(true) => {
                    tracing::info!(event = %pr.event_id, from = %self.shown_repo(src), to = %self.shown_repo(dst), "pull request copied into the repository it names");
                    // Its (stored) event released the commit there: it may enter that family's
                    // object pool (docs/protocol.md#object-pools).
                    self.copies.request(&target.identifier, &target.owner);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(event = %pr.event_id, to = %self.shown_repo(dst), error = %e, "could not copy a pull request into the repository it names"),
            }
        }
        for e in failed {
            tracing::info!(event = %pr.event_id, repo = %self.shown_repo(e.repo()), error = %e, "pull request not copied: repository busy");
        }
    }

    /// Removes the contributor repositories left without any ref by a previous run (a crash
    /// between their creation and the push, or before maintenance looked at them), each under its
    /// push lock and repository lock, tried once: one a push holds right now is its own. Runs at
    /// startup, before the public listener serves. Returns how many went.
    pub async fn remove_empty_contributor_repos(&self) -> usize {
        let root = self.layout.space_root(grasp_state::names::identifier::RepoSpace::Prs);
        let repos = blocking(move || {
            crate::git::repos::repo_dirs_in(&root)
        })
        .await;
        let mut removed = 0;
        for repo in repos {
            let Ok(guards) = RepoGuards::acquire_within(&self.locks, [repo.clone()], PushLocks::Take, std::time::Duration::ZERO).await else { continue };
            if crate::grasp::maintenance::remove_if_empty_contributor_repo(self, &repo).await {
                tracing::info!(repo = %self.shown_repo(&repo), "empty contributor repository removed at startup");
                removed += 1;
            }
            drop(guards);
        }
        removed
    }

    /// Records the git-first placeholders of a push's `refs/nostr/<id>` refs that landed in
    /// `repo` (post-receive; pre-receive reserved them, this is idempotent), pushed from `address`.
    pub(crate) async fn record_placeholders(&self, repo: &RepoId, updates: &[RefUpdate], address: Option<IpAddr>) {
        for u in updates {
            let Some(id) = u.name.strip_prefix(NOSTR_PREFIX) else { continue };
            let Ok(event_id) = EventId::from_hex(id) else { continue };
            if u.new == ZERO_OID || self.event_by_id(&event_id).await.is_some() {
                continue;
            }
            match self.purgatory.record_placeholder(event_id, u.new.clone(), repo.clone(), address) {
                Some(Ok(())) => tracing::info!(event = %event_id, commit = %u.new, identifier = %repo.identifier, "git-first placeholder recorded"),
                Some(Err(e)) => tracing::warn!(event = %event_id, error = %e, "placeholder not recorded"),
                None => {}
            }
        }
    }
}
