//! Repository locks, taken in one order (docs/architecture.md, "Lock order").
//!
//! Three locks guard a repository, always taken outermost first:
//!
//! 1. the **push lock** `<repo>/grasp.lock`, a file lock that `grasp-cgi` holds for a whole
//!    receive-pack (hooks included), so it works across processes;
//! 2. the relay's **repository lock** ([`RepoLocks`]), an async mutex per repository path that
//!    serialises the relay's own mutations (alignment, object copies, sync fetches, ref removal);
//! 3. the **purgatory** lock, innermost, inside [`crate::grasp::purgatory::SharedPurgatory`]:
//!    every one of its methods is one short critical section, never held across `.await`.
//!
//! [`RepoGuards::acquire`] is the one way to lock several repositories: it sorts and deduplicates
//! them and takes every push lock (when asked) and then every repository lock in path order, each
//! wait bounded by [`LOCK_WAIT`]. The release, alignment and copy code take a [`Locked`]
//! repository, which only a [`RepoGuards`] hands out, so they cannot touch a repository whose
//! locks are not held. A timeout is an error the callers treat as "retry later" (the background
//! sync is asked to come back).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

/// The longest any wait for one of these locks lasts. A receive-pack holds the push lock for as
/// long as the client uploads; the post-receive hook waits up to 120 s for the relay.
pub const LOCK_WAIT: Duration = Duration::from_secs(60);

/// How often a contended push lock file is tried again.
const PUSH_LOCK_RETRY: Duration = Duration::from_millis(25);

/// A lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("timed out after {waited:?} waiting for the {which} of {repo}; retry later")]
    Timeout { which: &'static str, repo: PathBuf, waited: Duration },
    #[error("cannot take the push lock {path}: {source}")]
    PushLockFile { path: PathBuf, source: std::io::Error },
}

/// The relay's per-repository async locks. Entries are tiny, keyed by repository path, and
/// forgotten when nobody holds or waits for them.
#[derive(Default)]
pub struct RepoLocks {
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl RepoLocks {
    fn entry(&self, repo: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Forget locks nobody holds or waits for, so the map stays as small as the work.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(repo.to_path_buf()).or_default().clone()
    }

    /// The repository lock of one repository, unbounded, for code that touches only that
    /// repository and takes no other lock after it but the purgatory's (background sync fetches,
    /// git maintenance, orphan purge). Prefer [`RepoGuards::acquire`], whose wait is bounded.
    pub async fn lock(&self, repo: &Path) -> OwnedMutexGuard<()> {
        self.entry(repo).lock_owned().await
    }

    /// Like [`Self::lock`], waiting at most until `deadline`.
    async fn lock_until(&self, repo: &Path, deadline: Instant, waited: Duration) -> Result<OwnedMutexGuard<()>, LockError> {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, self.entry(repo).lock_owned())
            .await
            .map_err(|_| LockError::Timeout { which: "repository lock", repo: repo.to_path_buf(), waited })
    }
}

/// Whether [`RepoGuards::acquire`] takes the push locks too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushLocks {
    /// Take every repository's push lock first: no push runs on them meanwhile (callers outside a
    /// push: background sync, a state event whose data is here, startup reconciliation).
    Take,
    /// Take none: the caller runs inside a push (post-receive), whose receive-pack holds its
    /// repository's push lock; taking another repository's push lock there could wait on a
    /// push that itself waits for this one.
    Skip,
}

/// Proof that the locks of a set of repositories are held; released on drop (repository locks
/// first, then push locks: the reverse of the order they were taken in).
pub struct RepoGuards {
    repos: BTreeSet<PathBuf>,
    _repo_locks: Vec<OwnedMutexGuard<()>>,
    _push_locks: Vec<std::fs::File>,
}

/// A repository whose locks are held, borrowed from its [`RepoGuards`].
#[derive(Debug, Clone, Copy)]
pub struct Locked<'g> {
    path: &'g Path,
}

impl Locked<'_> {
    pub fn path(&self) -> &Path {
        self.path
    }
}

impl RepoGuards {
    /// Takes the locks of `repos` (sorted, each once) in the lock order: every push lock (per
    /// `push`), then every repository lock. Gives up after [`LOCK_WAIT`] in all, releasing what it
    /// took.
    pub async fn acquire(locks: &RepoLocks, repos: impl IntoIterator<Item = PathBuf>, push: PushLocks) -> Result<Self, LockError> {
        Self::acquire_within(locks, repos, push, LOCK_WAIT).await
    }

    async fn acquire_within(
        locks: &RepoLocks,
        repos: impl IntoIterator<Item = PathBuf>,
        push: PushLocks,
        wait: Duration,
    ) -> Result<Self, LockError> {
        let repos: BTreeSet<PathBuf> = repos.into_iter().collect();
        let deadline = Instant::now() + wait;
        let mut push_locks = Vec::new();
        if push == PushLocks::Take {
            for repo in &repos {
                push_locks.push(push_lock(repo, deadline, wait).await?);
            }
        }
        let mut repo_locks = Vec::new();
        for repo in &repos {
            repo_locks.push(locks.lock_until(repo, deadline, wait).await?);
        }
        Ok(RepoGuards { repos, _repo_locks: repo_locks, _push_locks: push_locks })
    }

    /// `repo`, if its locks are held here.
    pub fn get(&self, repo: &Path) -> Option<Locked<'_>> {
        self.repos.get(repo).map(|path| Locked { path })
    }
}

/// Waits (until `deadline`) for pushes to `repo` to finish and keeps new ones out until the
/// returned file is dropped (`grasp-cgi` holds the same lock for a whole receive-pack).
async fn push_lock(repo: &Path, deadline: Instant, waited: Duration) -> Result<std::fs::File, LockError> {
    let path = repo.join(grasp_state::identifier::PUSH_LOCK_FILE);
    let repo = repo.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| LockError::PushLockFile { path: path.clone(), source })?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => std::thread::sleep(PUSH_LOCK_RETRY),
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(LockError::Timeout { which: "push lock", repo, waited })
                }
                Err(std::fs::TryLockError::Error(source)) => return Err(LockError::PushLockFile { path, source }),
            }
        }
    })
    .await
    .unwrap_or_else(|e| Err(LockError::PushLockFile { path: PathBuf::new(), source: std::io::Error::other(e) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn guards_cover_exactly_the_locked_repositories_and_exclude_others() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a.git"), tmp.path().join("b.git"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let locks = RepoLocks::default();
        let guards = RepoGuards::acquire(&locks, [b.clone(), a.clone(), b.clone()], PushLocks::Take).await.unwrap();
        assert!(guards.get(&a).is_some() && guards.get(&b).is_some());
        assert!(guards.get(&tmp.path().join("c.git")).is_none());
        // Both locks are held: another taker waits.
        assert!(locks.entry(&a).try_lock().is_err());
        let file = std::fs::File::options().write(true).open(a.join(grasp_state::identifier::PUSH_LOCK_FILE)).unwrap();
        assert!(file.try_lock().is_err(), "the push lock is held");
        drop(guards);
        assert!(locks.entry(&a).try_lock().is_ok());
        assert!(file.try_lock().is_ok(), "the push lock is released on drop");
    }

    #[tokio::test]
    async fn held_locks_time_out_and_release_what_was_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a.git"), tmp.path().join("b.git"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let locks = RepoLocks::default();
        let wait = Duration::from_millis(50);
        let held = locks.lock(&b).await;
        let err = RepoGuards::acquire_within(&locks, [a.clone(), b.clone()], PushLocks::Skip, wait).await.err().expect("must time out");
        assert!(matches!(err, LockError::Timeout { which: "repository lock", .. }), "{err}");
        assert!(locks.entry(&a).try_lock().is_ok(), "a's lock was released on failure");
        drop(held);
        // A push (grasp-cgi) holds b's push lock file.
        let pushing = std::fs::File::options().create(true).truncate(false).write(true).open(b.join(grasp_state::identifier::PUSH_LOCK_FILE)).unwrap();
        pushing.lock().unwrap();
        let err = RepoGuards::acquire_within(&locks, [a, b], PushLocks::Take, wait).await.err().expect("must time out");
        assert!(matches!(err, LockError::Timeout { which: "push lock", .. }), "{err}");
    }
}
