//! Repository locks, taken in one order (docs/architecture.md, "Lock order").
//!
//! Three locks guard a repository, always taken outermost first:
//!
//! 1. the **push lock** `<repo>/grasp.lock` ([`PushLock`], shared with a push's git processes,
//!    which hold it for a whole receive-pack, hooks included), so it works across processes;
//!    only ever tried, never waited for in the kernel;
//! 2. the relay's **repository lock** ([`RepoLocks`]), an async mutex per repository path that
//!    serialises the relay's own mutations (alignment, object copies, sync fetches, ref removal);
//! 3. the **purgatory** lock, innermost, inside [`crate::grasp::purgatory::SharedPurgatory`]:
//!    every one of its methods is one short critical section, never held across `.await`.
//!
//! Every wait is asynchronous and bounded (no blocked worker thread, no unbounded wait): the push
//! lock files and repository locks are tried without blocking and tried again after a short
//! sleep, holding none of them meanwhile ([`RepoGuards`]); a single repository lock
//! ([`RepoLocks::lock_within`]) is a tokio mutex waited for under a timeout. At most [`LockLimits::queue`] tasks wait for one
//! repository at a time ([`Queue`]); one more is told at once that the repository is busy
//! ([`LockError::Busy`]), so a stuck repository holds a handful of tasks, never the relay.
//!
//! [`RepoGuards::acquire`] is the one way the relay takes push locks (one repository or several:
//! release, alignment, copies, sync, maintenance, orphan purge): it sorts and deduplicates
//! them and takes each one's push lock (when asked), then its repository lock, in path order,
//! within one bound, never holding some while waiting for others. The release, alignment and copy code take a [`Locked`] repository, which
//! only a [`RepoGuards`] hands out, so they cannot touch a repository whose locks are not held.
//! [`RepoGuards::acquire_available`] takes those of the repositories it can within the bound and
//! names the others, so the rest of the work proceeds while they are retried later (deferred
//! work, `crate::grasp::deferred`). A timeout is an error the callers treat as "retry later".

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grasp_state::contract::push_lock::PushLock;
use tokio::sync::OwnedMutexGuard;

/// The longest any wait for one of these locks lasts in background work (release after a push,
/// background sync, startup reconciliation, expiry). A receive-pack holds the push lock for as
/// long as the client uploads (at most the git idle timeout without data).
pub const LOCK_WAIT: Duration = Duration::from_secs(60);

/// How often busy repositories are tried again.
const RETRY: Duration = grasp_state::contract::push_lock::RETRY;

/// The bounds of every wait for a repository (`--event-lock-wait`, `--repo-lock-queue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLimits {
    /// How long processing a client's event waits for a repository it governs before the work
    /// on that repository is deferred (retried later) and the rest proceeds.
    pub event_wait: Duration,
    /// How many tasks may wait for one repository's locks at a time.
    pub queue: usize,
}

impl LockLimits {
    /// The bounds on waiting for a repository.
    pub fn from_config(limits: &crate::config::LimitsConfig) -> LockLimits {
        LockLimits { event_wait: limits.event_lock_wait, queue: limits.repo_lock_queue as usize }
    }
}

impl Default for LockLimits {
    fn default() -> Self {
        LockLimits { event_wait: Duration::from_secs(3), queue: 8 }
    }
}

/// A lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("timed out after {waited:?} waiting for the {which} of {repo}; retry later")]
    Timeout { which: &'static str, repo: PathBuf, waited: Duration },
    #[error("{waiting} tasks already wait for {repo}; retry later")]
    Busy { repo: PathBuf, waiting: usize },
    #[error(transparent)]
    PushLockFile(grasp_state::contract::push_lock::PushLockError),
}

impl LockError {
    /// The repository the lock belongs to.
    pub fn repo(&self) -> &Path {
        match self {
            LockError::Timeout { repo, .. } | LockError::Busy { repo, .. } => repo,
            LockError::PushLockFile(e) => e.repo(),
        }
    }
}

/// One repository's relay lock and the number of tasks waiting for its locks.
#[derive(Default)]
struct Entry {
    mutex: Arc<tokio::sync::Mutex<()>>,
    waiting: AtomicUsize,
}

/// The relay's per-repository async locks. Entries are tiny, keyed by repository path, and
/// forgotten when nobody holds or waits for them.
#[derive(Default)]
pub struct RepoLocks {
    locks: Mutex<HashMap<PathBuf, Arc<Entry>>>,
    limits: LockLimits,
}

/// A place in the waiting queue of some repositories, taken before waiting for their locks (so
/// an event is refused before it is stored when every repository it needs is crowded). Dropped,
/// it leaves the queues.
pub struct Queue {
    places: BTreeMap<PathBuf, Arc<Entry>>,
    crowded: Vec<LockError>,
}

impl Queue {
    /// The repositories whose queue was full, as [`LockError::Busy`].
    pub fn crowded(&self) -> &[LockError] {
        &self.crowded
    }

    /// True when some repository was asked for and none had room.
    pub fn all_crowded(&self) -> bool {
        self.places.is_empty() && !self.crowded.is_empty()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        for entry in self.places.values() {
            entry.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl RepoLocks {
    /// Locks bounded by `limits`.
    pub fn with_limits(limits: LockLimits) -> Self {
        RepoLocks { locks: Mutex::default(), limits }
    }

    pub fn limits(&self) -> LockLimits {
        self.limits
    }

    fn entry(&self, repo: &Path) -> Arc<Entry> {
        let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Forget locks nobody holds or waits for, so the map stays as small as the work.
        locks.retain(|_, e| Arc::strong_count(e) > 1 || Arc::strong_count(&e.mutex) > 1);
        locks.entry(repo.to_path_buf()).or_default().clone()
    }

    /// Takes a place in the queue of each of `repos` that has room; the others are named in
    /// [`Queue::crowded`].
    pub fn enqueue(&self, repos: impl IntoIterator<Item = PathBuf>) -> Queue {
        let mut queue = Queue { places: BTreeMap::new(), crowded: Vec::new() };
        for repo in repos.into_iter().collect::<BTreeSet<_>>() {
            let entry = self.entry(&repo);
            let room = entry
                .waiting
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limits.queue).then_some(n + 1));
            match room {
                Ok(_) => {
                    queue.places.insert(repo, entry);
                }
                Err(waiting) => queue.crowded.push(LockError::Busy { repo, waiting }),
            }
        }
        queue
    }

    /// The relay's lock of one repository, for code that touches only that repository and takes
    /// no other lock after it but the purgatory's (background sync, git maintenance, orphan
    /// purge). Waits at most `wait`, in the repository's queue.
    pub async fn lock_within(&self, repo: &Path, wait: Duration) -> Result<OwnedMutexGuard<()>, LockError> {
        let mut queue = self.enqueue([repo.to_path_buf()]);
        if let Some(busy) = queue.crowded.pop() {
            return Err(busy);
        }
        let entry = queue.places.values().next().cloned().expect("one place was taken");
        lock_until(&entry, repo, Instant::now() + wait, wait).await
    }
}

/// Waits for `entry`'s repository lock at most until `deadline`.
async fn lock_until(entry: &Entry, repo: &Path, deadline: Instant, waited: Duration) -> Result<OwnedMutexGuard<()>, LockError> {
    let left = deadline.saturating_duration_since(Instant::now());
    let mutex = entry.mutex.clone();
    if left.is_zero() {
        return mutex
            .try_lock_owned()
            .map_err(|_| LockError::Timeout { which: "repository lock", repo: repo.to_path_buf(), waited });
    }
    tokio::time::timeout(left, mutex.lock_owned())
        .await
        .map_err(|_| LockError::Timeout { which: "repository lock", repo: repo.to_path_buf(), waited })
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
    _push_locks: Vec<PushLock>,
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

    /// [`Self::acquire`] within `wait`: all of them or none.
    pub async fn acquire_within(
        locks: &RepoLocks,
        repos: impl IntoIterator<Item = PathBuf>,
        push: PushLocks,
        wait: Duration,
    ) -> Result<Self, LockError> {
        let mut queue = locks.enqueue(repos);
        if let Some(busy) = queue.crowded.drain(..).next() {
            return Err(busy);
        }
        let (guards, mut failed) = Self::take(&queue, push, wait, true).await;
        match failed.pop() {
            Some(error) => Err(error),
            None => Ok(guards),
        }
    }

    /// Takes the locks of those of the repositories `queue` holds a place for that can be locked
    /// within `wait` (each in the lock order; after the bound, a repository is still taken if it
    /// is free at once); the others are returned with why (a crowded queue, a timeout), with the
    /// repositories `queue` found crowded.
    pub async fn acquire_available(queue: Queue, push: PushLocks, wait: Duration) -> (Self, Vec<LockError>) {
        let (guards, mut failed) = Self::take(&queue, push, wait, false).await;
        let mut queue = queue;
        failed.append(&mut queue.crowded);
        (guards, failed)
    }

    /// Takes the locks of `queue`'s repositories, each in the lock order (push lock, then
    /// repository lock). Every round tries them all without waiting; when some are busy and the
    /// bound is not reached, it lets go of everything and tries again a moment later: it never
    /// holds one repository while waiting for another (a repository that stays busy cannot
    /// delay pushes to the others, and no order of waits can deadlock). At the bound, the
    /// repositories free in that last round are kept (unless `all_or_nothing`).
    async fn take(queue: &Queue, push: PushLocks, wait: Duration, all_or_nothing: bool) -> (Self, Vec<LockError>) {
        let deadline = Instant::now() + wait;
        let mut failed = Vec::new();
        let mut files = BTreeMap::new();
        for repo in queue.places.keys() {
            if push == PushLocks::Skip {
                continue;
            }
            match PushLock::open(repo).map_err(LockError::PushLockFile) {
                Ok(file) => {
                    files.insert(repo.clone(), file);
                }
                Err(error) => failed.push(error),
            }
        }
        if all_or_nothing && !failed.is_empty() {
            return (Self::empty(), failed);
        }
        loop {
            let mut busy = Vec::new();
            let mut locked_files = BTreeMap::new();
            let mut repo_locks = Vec::new();
            let mut repos = BTreeSet::new();
            for (repo, entry) in &queue.places {
                if push == PushLocks::Take {
                    let Some(file) = files.get_mut(repo) else { continue };
                    match file.try_take() {
                        Ok(true) => {}
                        Ok(false) => {
                            busy.push(LockError::Timeout { which: "push lock", repo: repo.clone(), waited: wait });
                            continue;
                        }
                        Err(e) => {
                            busy.push(LockError::PushLockFile(e));
                            continue;
                        }
                    }
                }
                match entry.mutex.clone().try_lock_owned() {
                    Ok(guard) => {
                        repo_locks.push(guard);
                        repos.insert(repo.clone());
                        if let Some(file) = files.remove(repo) {
                            locked_files.insert(repo.clone(), file);
                        }
                    }
                    Err(_) => {
                        if let Some(file) = files.get_mut(repo) {
                            file.release();
                        }
                        busy.push(LockError::Timeout { which: "repository lock", repo: repo.clone(), waited: wait });
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if busy.is_empty() || left.is_zero() {
                failed.append(&mut busy);
                if all_or_nothing && !failed.is_empty() {
                    return (Self::empty(), failed);
                }
                return (RepoGuards { repos, _repo_locks: repo_locks, _push_locks: locked_files.into_values().collect() }, failed);
            }
            // Let go of everything taken in this round, then try again.
            drop(repo_locks);
            for (repo, mut file) in locked_files {
                file.release();
                files.insert(repo, file);
            }
            tokio::time::sleep(left.min(RETRY)).await;
        }
    }

    fn empty() -> Self {
        RepoGuards { repos: BTreeSet::new(), _repo_locks: Vec::new(), _push_locks: Vec::new() }
    }

    /// `repo`, if its locks are held here.
    pub fn get(&self, repo: &Path) -> Option<Locked<'_>> {
        self.repos.get(repo).map(|path| Locked { path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repos(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let tmp = tempfile::tempdir().unwrap();
        let repos: Vec<PathBuf> = (0..n).map(|i| tmp.path().join(format!("{i}.git"))).collect();
        for r in &repos {
            std::fs::create_dir_all(r).unwrap();
        }
        (tmp, repos)
    }

    fn hold_push_lock(repo: &Path) -> std::fs::File {
        let file = std::fs::File::options().create(true).truncate(false).write(true).open(repo.join(grasp_state::contract::layout::PUSH_LOCK_FILE)).unwrap();
        file.lock().unwrap();
        file
    }

    #[tokio::test]
    async fn guards_cover_exactly_the_locked_repositories_and_exclude_others() {
        let (tmp, r) = repos(2);
        let (a, b) = (r[0].clone(), r[1].clone());
        let locks = RepoLocks::default();
        let guards = RepoGuards::acquire(&locks, [b.clone(), a.clone(), b.clone()], PushLocks::Take).await.unwrap();
        assert!(guards.get(&a).is_some() && guards.get(&b).is_some());
        assert!(guards.get(&tmp.path().join("c.git")).is_none());
        // Both locks are held: another taker waits.
        assert!(locks.entry(&a).mutex.try_lock().is_err());
        let file = std::fs::File::options().write(true).open(a.join(grasp_state::contract::layout::PUSH_LOCK_FILE)).unwrap();
        assert!(file.try_lock().is_err(), "the push lock is held");
        drop(guards);
        assert!(locks.entry(&a).mutex.try_lock().is_ok());
        assert!(file.try_lock().is_ok(), "the push lock is released on drop");
    }

    #[tokio::test]
    async fn held_locks_time_out_and_release_what_was_taken() {
        let (_tmp, r) = repos(2);
        let (a, b) = (r[0].clone(), r[1].clone());
        let locks = RepoLocks::default();
        let wait = Duration::from_millis(50);
        let held = locks.lock_within(&b, wait).await.unwrap();
        let err = RepoGuards::acquire_within(&locks, [a.clone(), b.clone()], PushLocks::Skip, wait).await.err().expect("must time out");
        assert!(matches!(err, LockError::Timeout { which: "repository lock", .. }), "{err}");
        assert!(locks.entry(&a).mutex.try_lock().is_ok(), "a's lock was released on failure");
        assert!(matches!(locks.lock_within(&b, wait).await, Err(LockError::Timeout { .. })), "a single lock waits only its bound");
        drop(held);
        // A push holds b's push lock file.
        let _pushing = hold_push_lock(&b);
        let err = RepoGuards::acquire_within(&locks, [a.clone(), b], PushLocks::Take, wait).await.err().expect("must time out");
        assert!(matches!(err, LockError::Timeout { which: "push lock", .. }), "{err}");
        let file = std::fs::File::options().write(true).open(a.join(grasp_state::contract::layout::PUSH_LOCK_FILE)).unwrap();
        assert!(file.try_lock().is_ok(), "a's push lock was released on failure");
    }

    #[tokio::test]
    async fn available_repositories_are_locked_and_the_busy_one_is_named() {
        let (_tmp, r) = repos(3);
        let locks = RepoLocks::default();
        let _pushing = hold_push_lock(&r[1]);
        let started = Instant::now();
        let (guards, failed) =
            RepoGuards::acquire_available(locks.enqueue(r.clone()), PushLocks::Take, Duration::from_millis(100)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(guards.get(&r[0]).is_some() && guards.get(&r[2]).is_some(), "the rest proceed");
        assert!(guards.get(&r[1]).is_none());
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].repo(), r[1].as_path());
        let file = std::fs::File::options().write(true).open(r[2].join(grasp_state::contract::layout::PUSH_LOCK_FILE)).unwrap();
        assert!(file.try_lock().is_err(), "a repository after the busy one is locked too");
    }

    #[tokio::test]
    async fn one_repository_queues_only_a_few_waiters_and_they_hold_no_thread() {
        let (_tmp, r) = repos(2);
        let limits = LockLimits { event_wait: Duration::from_secs(1), queue: 3 };
        let locks = Arc::new(RepoLocks::with_limits(limits));
        let _pushing = hold_push_lock(&r[0]);
        // Many more waiters than blocking threads a small runtime has: all wait asynchronously.
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let (locks, repo) = (locks.clone(), r[0].clone());
            waiters.push(tokio::spawn(async move {
                RepoGuards::acquire_within(&locks, [repo], PushLocks::Take, Duration::from_secs(30)).await.map(|_| ())
            }));
        }
        // The queue is full: the next is refused at once, another repository is untouched.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let q = locks.enqueue([r[0].clone()]);
            if q.all_crowded() {
                assert!(matches!(q.crowded()[0], LockError::Busy { waiting: 3, .. }));
                break;
            }
            assert!(Instant::now() < deadline, "the queue never filled");
            drop(q);
            tokio::task::yield_now().await;
        }
        let err = RepoGuards::acquire_within(&locks, [r[0].clone()], PushLocks::Take, Duration::from_secs(30)).await.err().unwrap();
        assert!(matches!(err, LockError::Busy { .. }), "{err}");
        assert!(RepoGuards::acquire_within(&locks, [r[1].clone()], PushLocks::Take, Duration::from_millis(100)).await.is_ok());
        // The push ends: the waiters get the lock in turn and leave the queue.
        drop(_pushing);
        for w in waiters {
            w.await.unwrap().unwrap();
        }
        assert!(!locks.enqueue([r[0].clone()]).all_crowded());
    }
}
