//! One object store per identifier family (docs/architecture.md, "Object pools"): who writes a
//! pool when, in the lock order.
//!
//! - [`Grasp::join_pool`]: a repository (its push and repository locks held) borrows from its
//!   family's pool, created on first need; both under the pool lock.
//! - [`Grasp::promote`]: what signed, stored events released in a member ([`Grasp::released_for`],
//!   decided by `grasp_state::git::pool`) is packed into the pool and recorded under the pool's
//!   `refs/members/<npub>/`; staged objects stay in the member. The member is then queued for a
//!   dedupe and the pool for a repack (`crate::grasp::maintenance`).
//! - [`Grasp::shrink_pool`]: the one step that deletes objects from a pool: with every member's
//!   push and repository locks and the pool lock held, each member is promoted, the pool's refs
//!   are set to what every member releases, and `git prune` keeps everything any member's refs
//!   and the purgatory's held events reach. A pool no repository borrows from goes.
//! - [`Grasp::pool_migration`]: at startup, repositories of shared families that are not members
//!   yet are queued to join, like copies.
//!
//! The pool lock is the relay's `RepoLocks` entry of the pool's path, taken after the repository
//! locks and before the purgatory (docs/architecture.md, "Lock order"); nobody holding it waits
//! for a repository lock, and it is never held across network I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use grasp_state::names::identifier::{npub_of, parse_npub};
use grasp_state::nostr::nip34::{Announcement, PullRequest, RepoState, KIND_PR, KIND_PR_UPDATE, KIND_STATE};
use grasp_state::git::pool::{plan_pool_gc, plan_promotion, MemberView, Released};
use grasp_state::purgatory::RepoId;
use grasp_state::names::refs::{RefMap, NOSTR_PREFIX};
use nostr::prelude::{EventId, Filter, Kind, PublicKey};

use crate::git;
use crate::git::pools;
use crate::grasp::locks::{Locked, PushLocks, RepoGuards, LOCK_WAIT};
use crate::grasp::{blocking, Grasp, Source};

/// How long a shrink tries for the locks of every member of a pool (a push to one keeps it:
/// the shrink is retried by a later pass).
pub const SHRINK_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The most repositories a shrink locks at once (each lock is an open file): a pool more
/// repositories borrow from (anyone may announce an identifier) is not shrunk, it only grows by
/// what signed events released.
pub const MAX_SHRINK_MEMBERS: usize = 256;

/// The most objects living outside a pool a prune keeps by name (`git prune <head>...`: they
/// go on its command line).
const MAX_PRUNE_HEADS: usize = 20_000;

/// The most bytes of `GIT_ALTERNATE_OBJECT_DIRECTORIES` a prune passes (one environment string
/// may not exceed 128 KiB).
const MAX_ALTERNATES_ENV: usize = 100 * 1024;

/// What a promotion did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Promoted {
    /// Objects packed into the pool (the member's copies can go: a dedupe is queued).
    pub objects: u64,
    /// A pool ref of the member moved or went (a shrink is queued).
    pub refs_left: bool,
}

/// Why a shrink did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    #[error("a member is busy: {0}")]
    Busy(String),
    #[error("{0} repositories borrow from it; a shrink locks at most {MAX_SHRINK_MEMBERS} at once")]
    TooManyMembers(usize),
    #[error("a repository joined the pool meanwhile")]
    MembersChanged,
    #[error("{0}")]
    Failed(String),
}

impl Grasp {
    /// The path of the pool of `identifier` (which may not exist).
    pub fn pool_path(&self, identifier: &str) -> Option<PathBuf> {
        self.layout.pool_path(identifier).ok()
    }

    /// Whether a release of `owner`'s repository of `identifier` whose latest stored state is
    /// `state` shares its objects through the family's pool: the pool exists, or the state is to
    /// be brought into another owner's repository on disk (`grasp_state::git::pool::family_shares`).
    /// The other repositories it is brought into are returned with the answer.
    pub fn family_shares(&self, identifier: &str, owner: &PublicKey, state: Option<&RepoState>, all: &[(Announcement, Source)]) -> (bool, Vec<(PublicKey, PathBuf)>) {
        let exists = self.pool_path(identifier).is_some_and(|p| p.is_dir());
        let targets = match state {
            Some(state) => {
                let others = self.authority.owners_trusting(state.author, all).into_iter().map(|(other, _)| other).filter(|other| other != owner);
                self.existing_repos(others, identifier)
            }
            None => Vec::new(),
        };
        (grasp_state::git::pool::family_shares(targets.len(), exists), targets)
    }

    /// Makes `member` (its locks held) borrow from the pool of `identifier`, creating the pool if
    /// needed; both under the pool lock.
    pub async fn join_pool(&self, identifier: &str, member: Locked<'_>) -> Result<bool, String> {
        let pool = self.pool_path(identifier).ok_or("not a valid identifier")?;
        let _pool = self.locks.lock_within(&pool, LOCK_WAIT).await.map_err(|e| e.to_string())?;
        let (layout, id, repo) = (self.layout.clone(), identifier.to_string(), member.path().to_path_buf());
        let joined = blocking(move || -> Result<bool, String> {
            if !repo.is_dir() {
                return Err(format!("{} is gone", repo.display()));
            }
            pools::create_pool(&layout, &id).map_err(|e| e.to_string())?;
            pools::join(&repo, &id).map_err(|e| format!("writing the alternates of {}: {e}", repo.display()))
        })
        .await?;
        if joined {
            tracing::info!(repo = %self.shown_repo(member.path()), identifier, "repository joined its family's object pool");
            // Its own copies (from before pools, or pushed before it joined) can go once the
            // pool holds them: the dedupe runs after the promotion that follows.
            if pools::has_local_objects(member.path()) {
                self.maintain_after_join(member.path());
            }
        }
        Ok(joined)
    }

    /// What signed, stored events declare for `owner`'s repository of `identifier` whose refs
    /// are `refs`: the stored states of the owner's maintainer set, and the stored pull requests
    /// among its `refs/nostr/<id>` refs.
    pub async fn released_for(&self, owner: &PublicKey, identifier: &str, refs: &RefMap, all: &[(Announcement, Source)]) -> Released {
        let set = self.maintainer_set(*owner, all);
        let filter = Filter::new().kind(Kind::Custom(KIND_STATE)).identifier(identifier).authors(set.iter().copied());
        // An empty author list must never read as "any author" (no confirmed maintainer: no state).
        let stored = if set.is_empty() { Vec::new() } else { self.query(vec![filter]).await };
        let states: Vec<RepoState> = stored
            .iter()
            .filter_map(|ev| RepoState::from_event(ev).ok())
            .filter(|s| s.identifier == identifier && set.contains(&s.author))
            .collect();
        let ids: Vec<EventId> = refs.keys().filter_map(|n| n.strip_prefix(NOSTR_PREFIX)).filter_map(|id| EventId::from_hex(id).ok()).collect();
        let prs: Vec<(EventId, String)> = if ids.is_empty() {
            Vec::new()
        } else {
            let filter = Filter::new().ids(ids).kinds([Kind::Custom(KIND_PR), Kind::Custom(KIND_PR_UPDATE)]);
            self.query(vec![filter]).await.iter().filter_map(|ev| PullRequest::from_event(ev).ok()).map(|pr| (pr.event_id, pr.commit)).collect()
        };
        Released::new(states.iter(), prs)
    }

    /// Promotes `owner`'s repository of `identifier` (its repository lock held; a member of the
    /// pool, else nothing happens) into the pool, under the pool lock: what signed events
    /// released there and the pool lacks is packed into it, and the pool's refs of this member
    /// are set to the released refs. Queues the member's dedupe and the pool's repack when
    /// objects moved, the pool's shrink when released refs left it.
    pub async fn promote(&self, owner: &PublicKey, identifier: &str, member: Locked<'_>, all: &[(Announcement, Source)]) -> Result<Promoted, String> {
        let pool = self.pool_path(identifier).ok_or("not a valid identifier")?;
        let repo = member.path().to_path_buf();
        let (repo2, id) = (repo.clone(), identifier.to_string());
        let refs = blocking(move || if pools::is_member(&repo2, &id) { git::read_refs(&repo2).map(Some) } else { Ok(None) }).await.map_err(|e| e.to_string())?;
        let Some(refs) = refs else { return Ok(Promoted::default()) };
        let released = self.released_for(owner, identifier, &refs, all).await;
        let member_name = npub_of(owner);
        let _pool = self.locks.lock_within(&pool, LOCK_WAIT).await.map_err(|e| e.to_string())?;
        let (pool2, repo2) = (pool.clone(), repo.clone());
        let (plan, promoted) = blocking(move || -> Result<_, String> {
            let pool_refs = git::read_refs(&pool2).map_err(|e| e.to_string())?;
            let plan = plan_promotion(&member_name, &refs, &released, &pool_refs).ok_or("no pool namespace for this member")?;
            if plan.pack.is_empty() && plan.changes.is_empty() {
                return Ok((plan, pools::Promoted::default()));
            }
            let promoted = pools::promote(&repo2, &pool2, &plan).map_err(|e| e.to_string())?;
            Ok((plan, promoted))
        })
        .await?;
        drop(_pool);
        if promoted.objects > 0 || !plan.changes.is_empty() {
            tracing::info!(
                repo = %self.shown_repo(&repo),
                identifier,
                objects = promoted.objects,
                pack_bytes = promoted.bytes,
                refs = plan.changes.len(),
                "released objects promoted into the family's object pool"
            );
        }
        if promoted.objects > 0 {
            self.maintain_after_promotion(&repo, &pool);
        }
        if plan.refs_left {
            self.maintain_after_pool_refs_left(&pool);
        }
        Ok(Promoted { objects: promoted.objects, refs_left: plan.refs_left })
    }

    /// The repositories of `identifier` on disk that borrow from its pool, by owner (a scan of
    /// the git root's owner directories).
    fn pool_members(&self, identifier: &str) -> BTreeMap<PublicKey, PathBuf> {
        let root = self.layout.git_root();
        let owners = std::fs::read_dir(root).into_iter().flatten().flatten().filter_map(|e| parse_npub(&e.file_name().to_string_lossy()));
        owners
            .filter_map(|owner| Some((owner, self.layout.repo_path(&owner, identifier).ok()?)))
            .filter(|(_, repo)| pools::is_member(repo, identifier))
            .collect()
    }

    /// Shrinks the pool of `identifier` (docs/architecture.md, "Object pools"): with every
    /// member's push and repository locks (all or nothing, within [`SHRINK_LOCK_WAIT`]) and the
    /// pool lock held, each member is promoted, the pool's refs are set to exactly what the
    /// members release (those of repositories gone are dropped), and `git prune` keeps everything
    /// any member's refs (staged ones included) and the objects of held states, held pull
    /// requests and placeholders of the family reach. No grace period is needed: nothing can
    /// write to the pool or rely on it meanwhile (the pool lock, every member's push lock; pool
    /// repacks and member dedupes run in the same maintenance worker, one after another). A
    /// pool with no member and no ref left is removed. Returns whether the pool's refs changed
    /// (a second pass may reclaim more).
    pub async fn shrink_pool(&self, identifier: &str) -> Result<bool, ShrinkError> {
        let Some(pool) = self.pool_path(identifier).filter(|p| p.is_dir()) else { return Ok(false) };
        let members = self.pool_members(identifier);
        if members.len() > MAX_SHRINK_MEMBERS {
            return Err(ShrinkError::TooManyMembers(members.len()));
        }
        let guards = RepoGuards::acquire_within(&self.locks, members.values().cloned(), PushLocks::Take, SHRINK_LOCK_WAIT)
            .await
            .map_err(|e| ShrinkError::Busy(e.to_string()))?;
        let pool_lock = self.locks.lock_within(&pool, LOCK_WAIT).await.map_err(|e| ShrinkError::Busy(e.to_string()))?;
        // Joins take the pool lock: the members are fixed from here on.
        if self.pool_members(identifier) != members {
            return Err(ShrinkError::MembersChanged);
        }
        drop(pool_lock);
        let all = self.announcements(identifier).await;
        // Everything the members release goes into the pool first, so its refs can name it.
        for (owner, repo) in &members {
            let Some(locked) = guards.get(repo) else { continue };
            if let Err(e) = self.promote(owner, identifier, locked, &all).await {
                return Err(ShrinkError::Failed(format!("promoting {}: {e}", self.shown_repo(repo))));
            }
        }
        let pool_lock = self.locks.lock_within(&pool, LOCK_WAIT).await.map_err(|e| ShrinkError::Busy(e.to_string()))?;
        if self.pool_members(identifier) != members {
            return Err(ShrinkError::MembersChanged);
        }
        let mut views: Vec<(String, PathBuf, RefMap, Released)> = Vec::new();
        for (owner, repo) in &members {
            let repo2 = repo.clone();
            let refs = blocking(move || git::read_refs(&repo2)).await.map_err(|e| ShrinkError::Failed(e.to_string()))?;
            let released = self.released_for(owner, identifier, &refs, &all).await;
            views.push((npub_of(owner), repo.clone(), refs, released));
        }
        let mut held: BTreeSet<String> = BTreeSet::new();
        for owner in members.keys() {
            let (states, prs) = self.purgatory.held_objects(&RepoId::new(*owner, identifier));
            held.extend(states.iter().filter_map(|ev| RepoState::from_event(ev).ok()).flat_map(|s| s.refs.into_values()));
            held.extend(prs);
        }
        held.retain(|oid| grasp_state::names::refs::is_valid_oid(oid));
        let plan = {
            let member_views: Vec<MemberView> = views.iter().map(|(m, _, refs, released)| MemberView { member: m, refs, released }).collect();
            let pool_refs = {
                let pool2 = pool.clone();
                blocking(move || git::read_refs(&pool2)).await.map_err(|e| ShrinkError::Failed(e.to_string()))?
            };
            plan_pool_gc(&member_views, &pool_refs, &held)
        };
        let refs_changed = !plan.changes.is_empty();
        let (pool2, changes) = (pool.clone(), plan.changes.clone());
        blocking(move || git::update_refs(&pool2, &changes)).await.map_err(|e| ShrinkError::Failed(e.to_string()))?;
        if plan.remove_pool {
            let (layout, id) = (self.layout.clone(), identifier.to_string());
            blocking(move || pools::remove_pool(&layout, &id)).await.map_err(|e| ShrinkError::Failed(e.to_string()))?;
            tracing::info!(identifier, "object pool removed: no repository borrows from it");
            drop(pool_lock);
            return Ok(false);
        }
        // What the prune keeps. Objects the pool holds are listed to git's gc.recentObjectsHook
        // (git considers only objects of the repository's own store there). Objects that live in
        // a member (a staged commit on top of released history, a held state's push not yet
        // released) are passed as the prune's <head> arguments, and those members lend their
        // object directories to the walk (git prune deletes only in the pool's own store).
        let keep: Vec<String> = plan.keep.into_iter().collect();
        let (pool2, keep2) = (pool.clone(), keep.clone());
        let not_pooled: BTreeSet<String> = blocking(move || git::missing_objects(&pool2, &keep2)).await.map_err(|e| ShrinkError::Failed(e.to_string()))?.into_iter().collect();
        let held_elsewhere: BTreeSet<&String> = held.intersection(&not_pooled).collect();
        let mut lenders = Vec::new();
        let mut heads: BTreeSet<String> = BTreeSet::new();
        for (_, repo, refs, _) in &views {
            let asked: Vec<String> = refs.values().filter(|oid| not_pooled.contains(*oid)).chain(held_elsewhere.iter().copied()).cloned().collect::<BTreeSet<_>>().into_iter().collect();
            if asked.is_empty() {
                continue;
            }
            let (repo2, asked2) = (repo.clone(), asked.clone());
            let missing: BTreeSet<String> = blocking(move || git::missing_objects(&repo2, &asked2)).await.map_err(|e| ShrinkError::Failed(e.to_string()))?.into_iter().collect();
            let here: Vec<String> = asked.into_iter().filter(|oid| !missing.contains(oid)).collect();
            if !here.is_empty() {
                lenders.push(repo.join("objects"));
                heads.extend(here);
            }
        }
        let lent = alternates_env(&lenders);
        let (Some(lent), true) = (lent, heads.len() <= MAX_PRUNE_HEADS) else {
            tracing::warn!(identifier, lenders = lenders.len(), heads = heads.len(), "pool prune skipped: too much staged history sits on top of the pool; retried at its next shrink");
            return Ok(refs_changed);
        };
        let pooled: Vec<String> = keep.into_iter().filter(|oid| !not_pooled.contains(oid)).collect();
        let heads: Vec<String> = heads.into_iter().collect();
        pools::prune_pool(&pool, &pooled, &heads, lent.as_deref()).await.map_err(|e| ShrinkError::Failed(e.to_string()))?;
        drop(pool_lock);
        drop(guards);
        tracing::info!(identifier, members = members.len(), refs_changed, "object pool shrunk: objects no member and no held event needs were pruned");
        Ok(refs_changed)
    }

    /// At startup, queues in the copies task every repository with refs in a family of two or
    /// more repositories on disk: repositories from before pools (or created while their pool's
    /// lock was busy) join and are promoted, then deduped by maintenance, while they stay served;
    /// and copies the crash of a previous run left undone (the copies queue lives in memory) are
    /// carried out. Idempotent: a family already shared costs a few reads per repository. Walks
    /// the git root once (off the runtime).
    pub async fn pool_migration(&self) {
        let layout = self.layout.clone();
        let candidates = blocking(move || pool_candidates(&layout)).await;
        let mut queued = 0;
        for (identifier, owner) in candidates {
            if self.copies.request(&identifier, &owner) {
                queued += 1;
            }
        }
        if queued > 0 {
            tracing::info!(repositories = queued, "object pools: repositories of shared families queued to join their pool and copy out");
        }
    }
}

/// `(identifier, owner)` of every repository under the layout's git root that holds refs and has
/// a sibling repository of the same identifier.
fn pool_candidates(layout: &grasp_state::names::identifier::RepoLayout) -> Vec<(String, PublicKey)> {
    let mut families: BTreeMap<String, Vec<(PublicKey, PathBuf)>> = BTreeMap::new();
    for owner_dir in std::fs::read_dir(layout.git_root()).into_iter().flatten().flatten() {
        let Some(owner) = parse_npub(&owner_dir.file_name().to_string_lossy()) else { continue };
        for repo in std::fs::read_dir(owner_dir.path()).into_iter().flatten().flatten() {
            let name = repo.file_name().to_string_lossy().into_owned();
            let Some(identifier) = name.strip_suffix(".git") else { continue };
            if layout.repo_path(&owner, identifier).ok().as_deref() == Some(repo.path().as_path()) {
                families.entry(identifier.to_string()).or_default().push((owner, repo.path()));
            }
        }
    }
    let mut out = Vec::new();
    for (identifier, repos) in families.into_iter().filter(|(_, repos)| repos.len() >= 2) {
        for (owner, repo) in repos {
            if git::read_refs(&repo).is_ok_and(|r| !r.is_empty()) {
                out.push((identifier.clone(), owner));
            }
        }
    }
    out
}

/// `GIT_ALTERNATE_OBJECT_DIRECTORIES` lending `dirs` (absolute, each C-quoted, so any character
/// of an identifier is safe), `Some(None)` for none, `None` when it would be too long.
fn alternates_env(dirs: &[PathBuf]) -> Option<Option<String>> {
    if dirs.is_empty() {
        return Some(None);
    }
    let quoted: Vec<String> = dirs
        .iter()
        .map(|d| {
            let text = d.to_string_lossy();
            format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
        })
        .collect();
    let env = quoted.join(":");
    (env.len() <= MAX_ALTERNATES_ENV).then_some(Some(env))
}

/// Is `path` a pool (under the layout's pools directory)?
pub fn is_pool(layout: &grasp_state::names::identifier::RepoLayout, path: &Path) -> bool {
    layout.locate_pool(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lent_directories_are_quoted_and_bounded() {
        assert_eq!(alternates_env(&[]), Some(None));
        let env = alternates_env(&[PathBuf::from("/g/a:b/x \"y\".git/objects"), PathBuf::from("/g/c.git/objects")]).unwrap().unwrap();
        assert_eq!(env, "\"/g/a:b/x \\\"y\\\".git/objects\":\"/g/c.git/objects\"");
        let many: Vec<PathBuf> = (0..2000).map(|i| PathBuf::from(format!("/srv/git/npub1{i:060}/identifier.git/objects"))).collect();
        assert_eq!(alternates_env(&many), None);
    }
}
