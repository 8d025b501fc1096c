//! The GRASP brain as the syncer's [`SyncContext`], and the daemon's wiring of the syncer.
//!
//! - [`SyncContext`] for `Arc<Grasp>`: what the purgatory waits for per owner repository, which
//!   clone URLs may have it, the in-process repository locks (`Grasp::locks`) around moving
//!   fetched objects in,
//!   and release through [`Grasp::process_repo`] (the same path as after a push) under the
//!   cross-process push lock a push holds during its receive-pack.
//! - [`start`]: creates the [`Syncer`], points `Grasp::set_on_waiting` (every event that starts
//!   waiting enqueues its identifier) at it through a [`SyncHandle`], runs it until shutdown,
//!   and returns the syncer's figures for the operator views.
//!
//! The handle holds the syncer weakly: the syncer owns an `Arc<Grasp>`, so a strong reference
//! back from the brain would be a cycle.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Weak};

use grasp_state::git::clone_sources::{CloneSource, SourceTrust};
use grasp_state::authority::maintainers::MaintainerSet;
use grasp_state::nostr::nip34::{Announcement, PullRequest};
use grasp_state::purgatory::RepoId;
use nostr::prelude::PublicKey;
use tokio::sync::{watch, OwnedMutexGuard};
use tokio::task::JoinHandle;

use super::{
    missing_objects, Origin, Shared, SyncConfig, SyncContext, SyncStats, SyncTarget, Syncer,
};
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

impl SyncContext for Arc<Grasp> {
    type RepoGuard = OwnedMutexGuard<()>;

    /// Per owner repository of `identifier` (that exists on disk): the objects of the held state
    /// events authored inside the owner's maintainer set and the commits of the held pull
    /// requests targeting it, that the repository still lacks (none, when they are all there but
    /// still held: the release is due again).
    async fn needed(&self, identifier: &str) -> Vec<SyncTarget> {
        let all = self.announcements(identifier).await;
        let mut targets = Vec::new();
        for (announcement, source) in all.iter() {
            let owner = announcement.owner;
            let Some(repo) = self.repo_path(&owner, identifier) else {
                continue;
            };
            if !repo.exists() {
                continue;
            }
            let set = self.maintainer_set(owner, &all);
            let prs = held_pr_commits(self, &RepoId::new(owner, identifier));
            let wanted = waiting_oids(&held_state_refs(self, identifier, &set), &prs);
            if wanted.is_empty() {
                // A held announcement whose repository serves refs is due for promotion (its
                // store failed before): ask for the release again.
                if *source == crate::grasp::Source::Purgatory && serves_refs(&repo).await {
                    targets.push(SyncTarget { repo, oids: Vec::new() });
                }
                continue;
            }
            match missing_objects(&repo, &wanted).await {
                // Held although complete: a release did not finish; ask for it again.
                Ok(missing) if missing.is_empty() => targets.push(SyncTarget { repo, oids: Vec::new() }),
                Ok(missing) => targets.push(SyncTarget {
                    repo,
                    oids: missing,
                }),
                Err(error) => {
                    tracing::warn!(identifier, repo = %repo.display(), %error, "cannot inspect repository for sync")
                }
            }
        }
        targets
    }

    /// Clone URLs of the identifier's announcements (stored and held) and the `clone` tags of
    /// the pull requests waiting for its repositories, by trust: the announcements of the
    /// owners waiting for data and of their maintainer sets, other owners' announcements, then
    /// the pull requests. The syncer picks and orders them, and drops this server's own URLs and
    /// unsafe ones.
    async fn candidate_urls(&self, identifier: &str) -> Vec<CloneSource> {
        let all = self.announcements(identifier).await;
        let mut trusted: HashSet<PublicKey> = HashSet::new();
        // The owners whose repositories wait for data, each with the people of its maintainer
        // set (the owner first), whose user grasp lists are looked at.
        let mut waiting: Vec<(PublicKey, Vec<PublicKey>)> = Vec::new();
        for (announcement, _) in all.iter() {
            let owner = announcement.owner;
            let set = self.maintainer_set(owner, &all);
            let waits = !held_pr_commits(self, &RepoId::new(owner, identifier)).is_empty()
                || !held_state_refs(self, identifier, &set).is_empty();
            if waits {
                trusted.extend(set.iter().copied());
                let people = std::iter::once(owner).chain(set.iter().copied().filter(|p| *p != owner)).collect();
                waiting.push((owner, people));
            }
        }
        let announcements: Vec<Announcement> = all.iter().map(|(a, _)| a.clone()).collect();
        let repos: Vec<RepoId> = announcements.iter().map(|a| RepoId::new(a.owner, identifier)).collect();
        let prs: Vec<PullRequest> =
            self.purgatory.pr_events_for_any(&repos).iter().filter_map(|ev| PullRequest::from_event(ev).ok()).collect();
        // The operator's replicas first: each holds the repositories this one waits for.
        let mut sources: Vec<CloneSource> = self
            .replicas()
            .iter()
            .map(|r| CloneSource::new(SourceTrust::Replica, waiting.iter().map(|(owner, _)| r.repo_url(&grasp_state::names::identifier::npub_of(owner), identifier)).collect()))
            .collect();
        sources.extend(clone_sources(&announcements, &prs, &trusted));
        sources.extend(grasp_list_sources(self, identifier, &waiting).await);
        sources
    }

    async fn lock_repo(&self, repo: &Path) -> Option<Self::RepoGuard> {
        match self.locks.lock_within(repo, crate::grasp::locks::LOCK_WAIT).await {
            Ok(guard) => Some(guard),
            Err(error) => {
                tracing::warn!(repo = %repo.display(), %error, "synced objects not moved in");
                None
            }
        }
    }

    /// Releases what every owner repository of `identifier` now satisfies (the push path),
    /// holding the push lock of each of them: alignment must not move refs under a push in
    /// flight (its receive-pack would then fail to create or update them).
    async fn process(&self, identifier: &str) -> usize {
        self.process_identifier(identifier).await
    }

    fn set_sync_running(&self, identifier: &str, running: bool) {
        self.purgatory.set_sync_running(identifier, running);
    }

    fn fetched(&self, outcome: &super::FetchOutcome, took: std::time::Duration) {
        self.metrics().sync_fetched(outcome.error.is_none(), took);
    }

    fn attempted(&self, outcome: &super::Outcome) {
        self.metrics().sync_attempt(outcome.label());
    }

    fn objects_moved_in(&self, repo: &Path) {
        crate::grasp::maintenance::after_objects_arrived(self, repo);
    }
}

/// The ref targets of each held state of `identifier` authored inside `set`. States that can
/// never be satisfied (a value that is not a full object id) are skipped: fetching the rest of
/// their objects would serve nobody.
fn held_state_refs(grasp: &Grasp, identifier: &str, set: &MaintainerSet) -> Vec<Vec<String>> {
    grasp
        .held_states(identifier, set)
        .into_iter()
        .filter(|s| s.is_satisfiable())
        .map(|s| s.refs.into_values().collect())
        .collect()
}

/// Whether `repo` has a branch or a tag (unreadable: no).
async fn serves_refs(repo: &Path) -> bool {
    let repo = repo.to_path_buf();
    tokio::task::spawn_blocking(move || {
        crate::git::read_refs(&repo).is_ok_and(|refs| refs.keys().any(|r| grasp_state::names::refs::is_served_ref(r)))
    })
    .await
    .unwrap_or(false)
}

/// Commits of the pull request events (not placeholders) held for `repo`.
fn held_pr_commits(grasp: &Grasp, repo: &RepoId) -> Vec<String> {
    grasp.purgatory.pr_commits_for(repo)
}

/// Every oid the held states and pull requests of one repository need, once each, in order.
pub fn waiting_oids(state_refs: &[Vec<String>], pr_commits: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    state_refs
        .iter()
        .flatten()
        .chain(pr_commits)
        .filter(|oid| seen.insert(oid.as_str()))
        .cloned()
        .collect()
}

/// One source per announcement (in the given order) and per pull request: announcements by a
/// `trusted` owner (waiting for data, or in the maintainer set of one who is) as
/// [`SourceTrust::Maintainers`], other announcements as [`SourceTrust::OtherOwner`], pull
/// requests' `clone` tags as [`SourceTrust::PullRequest`].
pub fn clone_sources(announcements: &[Announcement], prs: &[PullRequest], trusted: &HashSet<PublicKey>) -> Vec<CloneSource> {
    let announced = announcements.iter().map(|a| {
        let trust = if trusted.contains(&a.owner) { SourceTrust::Maintainers } else { SourceTrust::OtherOwner };
        CloneSource::new(trust, a.clone_urls.clone())
    });
    let proposed = prs.iter().map(|pr| CloneSource::new(SourceTrust::PullRequest, pr.clone_urls.clone()));
    announced.chain(proposed).collect()
}

/// Most people whose user grasp lists one sync attempt looks at (the waiting owners first, then
/// their maintainers): each list gives at most its first URLs anyway, and an attempt tries at
/// most `grasp_state::git::clone_sources::URLS_PER_ATTEMPT`.
pub const MAX_GRASP_LISTS: usize = 50;

/// [`SourceTrust::GraspList`] sources: for each owner in `waiting` (with the people of its
/// maintainer set, owner first), the owner's repository on every server of each of those people's
/// latest user grasp list (kind 10317) stored here (docs/protocol.md#background-sync). At most
/// [`MAX_GRASP_LISTS`] lists are read, in that order.
async fn grasp_list_sources(grasp: &Grasp, identifier: &str, waiting: &[(PublicKey, Vec<PublicKey>)]) -> Vec<CloneSource> {
    let mut people: Vec<PublicKey> = Vec::new();
    for person in waiting.iter().flat_map(|(_, people)| people) {
        if people.len() == MAX_GRASP_LISTS {
            break;
        }
        if !people.contains(person) {
            people.push(*person);
        }
    }
    if people.is_empty() {
        return Vec::new();
    }
    let lists = grasp.user_grasp_lists(&people).await;
    let mut sources = Vec::new();
    for (owner, people) in waiting {
        for person in people {
            let Some(servers) = lists.get(person) else { continue };
            let urls = servers.iter().filter_map(|s| grasp_state::git::clone_sources::grasp_server_repo_url(s, owner, identifier)).collect();
            sources.push(CloneSource::new(SourceTrust::GraspList, urls));
        }
    }
    sources
}

/// A weak handle on a running [`Syncer`]: enqueue and read stats without keeping it alive.
#[derive(Clone)]
pub struct SyncHandle {
    shared: Weak<Shared<Arc<Grasp>>>,
}

impl SyncHandle {
    /// Schedules a sync of `identifier` (no-op once the syncer is gone).
    pub fn enqueue(&self, identifier: &str, origin: Origin) {
        if let Some(shared) = self.shared.upgrade() {
            Syncer { shared }.enqueue(identifier, origin);
        }
    }

    /// [`Syncer::catch_up`], if the syncer still runs.
    pub fn catch_up(&self) -> Option<usize> {
        self.shared.upgrade().map(|shared| Syncer { shared }.catch_up())
    }

    /// The syncer's figures, if it still runs.
    pub fn stats(&self) -> Option<SyncStats> {
        self.shared
            .upgrade()
            .map(|shared| Syncer { shared }.stats())
    }
}

impl Syncer<Arc<Grasp>> {
    /// A weak handle for callers that must not keep the syncer (and the brain) alive.
    pub fn handle(&self) -> SyncHandle {
        SyncHandle {
            shared: Arc::downgrade(&self.shared),
        }
    }
}

/// Starts background sync for the daemon: every event that starts waiting in the purgatory
/// enqueues its identifier with the delay of its origin (a user's event or relay sync), and the
/// syncer runs until `shutdown` (running fetches are then killed; the returned task ends after
/// that, and holds `shutdown` until then). Returns the task and a handle on the syncer, through
/// which the operator views read its figures and readiness its catch-up (`crate::api`).
pub fn start(grasp: &Arc<Grasp>, config: SyncConfig, mut shutdown: Shutdown) -> (JoinHandle<()>, SyncHandle) {
    let syncer = Syncer::new(grasp.clone(), config);
    let handle = syncer.handle();
    let enqueue = handle.clone();
    if grasp
        .set_on_waiting(Box::new(move |identifier, origin| {
            enqueue.enqueue(identifier, origin)
        }))
        .is_err()
    {
        tracing::warn!("background sync already wired; events will not be enqueued twice");
    }
    // Catch up on what was already waiting at startup (restored purgatory).
    let waiting = grasp.purgatory.waiting_identifiers();
    for identifier in &waiting {
        syncer.enqueue(identifier, Origin::User);
    }
    let task = tokio::spawn(async move {
        let (stop, stopped) = watch::channel(false);
        let run = syncer.run(stopped);
        tokio::pin!(run);
        tokio::select! {
            _ = &mut run => {}
            _ = shutdown.recv() => {
                let _ = stop.send(true);
                run.await;
            }
        }
    });
    (task, handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn announcement(keys: &Keys, clone: &[&str]) -> Announcement {
        let mut tags = vec![Tag::parse(["d", "repo"]).unwrap()];
        let mut c = vec!["clone".to_string()];
        c.extend(clone.iter().map(|u| u.to_string()));
        tags.push(Tag::parse(c).unwrap());
        let ev = EventBuilder::new(Kind::Custom(30617), "")
            .tags(tags)
            .finalize(keys)
            .unwrap();
        Announcement::from_event(&ev).unwrap()
    }

    fn pr(keys: &Keys, owner: &Keys, clone: &[&str]) -> PullRequest {
        let mut tags = vec![
            Tag::parse(["a", &format!("30617:{}:repo", owner.public_key().to_hex())]).unwrap(),
            Tag::parse(["c", &"a".repeat(40)]).unwrap(),
        ];
        if !clone.is_empty() {
            let mut c = vec!["clone".to_string()];
            c.extend(clone.iter().map(|u| u.to_string()));
            tags.push(Tag::parse(c).unwrap());
        }
        let ev = EventBuilder::new(Kind::Custom(1618), "")
            .tags(tags)
            .finalize(keys)
            .unwrap();
        PullRequest::from_event(&ev).unwrap()
    }

    #[test]
    fn trusted_announcements_come_first_then_others_then_pull_requests() {
        use grasp_state::git::clone_sources::{plan_sync_urls, UrlLimits};
        let (a, b, c) = (Keys::generate(), Keys::generate(), Keys::generate());
        let anns = [
            announcement(&b, &["https://stranger/x.git", "https://two/x.git"]),
            announcement(&a, &["https://one/x.git", "https://two/x.git"]),
        ];
        let prs = [
            pr(&c, &a, &["https://fork/x.git", "https://one/x.git"]),
            pr(&c, &a, &[]),
        ];
        let trusted = HashSet::from([a.public_key()]);
        let sources = clone_sources(&anns, &prs, &trusted);
        let trusts: Vec<SourceTrust> = sources.iter().map(|s| s.trust).collect();
        assert_eq!(
            trusts,
            [SourceTrust::OtherOwner, SourceTrust::Maintainers, SourceTrust::PullRequest, SourceTrust::PullRequest]
        );
        assert_eq!(
            plan_sync_urls(&sources, UrlLimits::default()),
            [
                "https://one/x.git",
                "https://two/x.git",
                "https://stranger/x.git",
                "https://fork/x.git"
            ]
        );
        assert!(clone_sources(&[], &[], &trusted).is_empty());
    }

    #[test]
    fn waiting_oids_are_deduplicated_in_order() {
        let (x, y, z) = ("1".repeat(40), "2".repeat(40), "3".repeat(40));
        let states = vec![vec![x.clone(), y.clone()], vec![y.clone()]];
        assert_eq!(
            waiting_oids(&states, &[z.clone(), x.clone()]),
            [x.clone(), y.clone(), z.clone()]
        );
        assert!(waiting_oids(&[], &[]).is_empty());
        assert_eq!(waiting_oids(&[], std::slice::from_ref(&z)), [z]);
    }
}
