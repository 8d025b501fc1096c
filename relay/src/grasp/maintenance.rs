//! Background repository maintenance: `git maintenance run --auto` after pushes.
//!
//! Pushes add packs and loose objects; left alone, a busy repository slows down. After each
//! push's post-receive the relay queues the repository here, and one worker (so at most one
//! maintenance runs at a time, whatever the number of pushes) runs `git maintenance run --auto`
//! in it: git decides itself whether anything is worth doing (its `gc.auto` thresholds) and
//! returns at once when not. GRASP repositories run with `receive.autoGC = false`
//! ([`grasp_state::names::identifier::GRASP_GIT_CONFIG`]): git's own auto-gc at the end of
//! receive-pack would start that process while the pusher still waits for its answer; here it
//! runs after the answer.
//!
//! A pass first takes the repository's push lock (`<repo>/grasp.lock`, held by a push's git
//! processes for a whole receive-pack), then the relay's own lock of the repository (the same order a push takes
//! them), waiting for each at most [`LOCK_WAIT`] (a repository still busy then is skipped until
//! its next push). Under them it removes push quarantines (`objects/tmp_objdir-incoming-*`) left
//! by a push killed mid-upload: no push runs, so all of them. It lets go of both before
//! `git maintenance run --auto`, which, like git's own auto-gc, runs beside pushes (git's gc is
//! made for that), so a long repack never turns pushes away. Every git idle timeout, every
//! repository's quarantines idle that long are removed too
//! ([`crate::git::repos::remove_stale_quarantines`]). Background sync's quarantines are left to
//! the sync and to the startup sweep.
//!
//! A GRASP-06 contributor repository (`prs/<npub>/<identifier>.git`) found without any ref (its
//! push was refused, its placeholders expired) is removed in its pass, under both locks.
//!
//! After refs were removed from a repository (expired pull request placeholders), its next pass
//! is `git gc --prune=<git idle timeout>.seconds.ago` instead ([`after_ref_removal`]), under both
//! locks: objects no ref reaches any more go, except those held states and held pull requests
//! name (kept through git's `gc.recentObjectsHook`); the push lock keeps every push, and so every
//! quarantine, out. (A refused push's pack never lands: git drops its quarantine.) Objects that
//! arrived without a receive-pack (background sync, [`after_objects_arrived`]) get the same pass
//! as a push.
//!
//! Object pools (docs/architecture.md, "Object pools"): after a promotion moved a member's
//! released objects into its family's pool ([`Grasp::maintain_after_promotion`]), the member's next pass is a
//! dedupe (`git repack -A -d -l`: its copies of what the pool holds go) instead of `git
//! maintenance run --auto`, and the pool gets a pass of its own: a geometric repack with a
//! multi-pack-index bitmap, beside pushes and promotions (it drops nothing). When released refs
//! left a pool or a member ([`Grasp::maintain_after_pool_refs_left`], [`after_family_refs_left`]) its next pass is a shrink: a
//! full `-A` repack (unreachable objects loosened, nothing dropped), then the locked prune of
//! `crate::grasp::Grasp::shrink_pool`, at most once per [`SHRINK_MIN_INTERVAL`] per pool; a pool
//! whose members stay busy is tried again [`SHRINK_RETRY`] later. A member never writes bitmaps (`repack.writeBitmaps=false`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::git::{GitCommand, GitError};
use grasp_state::names::identifier::RepoSpace;
use crate::grasp::locks::{LockError, PushLocks, RepoGuards};
use crate::grasp::Grasp;
use crate::shutdown::{Shutdown, ShutdownSignal};

/// Longest wait for a repository's push lock before skipping it.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);
/// Longest a maintenance run may take before it is killed.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Most repositories waiting for maintenance; beyond it new requests are dropped (the next push
/// queues the repository again).
pub const MAX_QUEUED: usize = 10_000;

/// How long a pool shrink whose members were busy waits before it is tried again.
pub const SHRINK_RETRY: Duration = Duration::from_secs(60);
/// When each pool was last shrunk, and the pools whose shrink waits for a timer.
type Shrinks = (HashMap<PathBuf, Instant>, HashSet<PathBuf>);

/// How long a shrink asked for waits for more reasons to come (one release moves the refs of
/// several members, one after another): they are served by one shrink.
pub const SHRINK_DELAY: Duration = Duration::from_secs(2);
/// The least time between two shrinks of one pool (each rewrites its packs): a shrink asked for
/// sooner runs then.
pub const SHRINK_MIN_INTERVAL: Duration = Duration::from_secs(60);

/// The queue of repositories (and object pools) waiting for maintenance. Cheap to clone.
#[derive(Clone)]
pub struct Maintenance {
    tx: mpsc::UnboundedSender<PathBuf>,
    queued: Arc<Mutex<HashSet<PathBuf>>>,
    /// Repositories whose next pass also prunes unreachable objects (refs were removed).
    prune: Arc<Mutex<HashSet<PathBuf>>>,
    /// The git idle timeout: a push that has not started within it never will.
    idle: Duration,
    /// Members whose next pass drops their copies of objects their pool holds.
    dedupe: Arc<Mutex<HashSet<PathBuf>>>,
    /// Pools whose next pass is a shrink.
    shrink: Arc<Mutex<HashSet<PathBuf>>>,
    /// When each pool was last shrunk, and the pools whose shrink waits for a timer.
    shrunk: Arc<Mutex<Shrinks>>,
    /// Ends the shrink timers (the signal alone: this queue lives on `Grasp`, as long as the
    /// process, and must not hold a graceful stop up).
    shutdown: ShutdownSignal,
    /// Passes running now (0 or 1).
    running: Arc<std::sync::atomic::AtomicUsize>,
}

impl Maintenance {
    /// Starts the worker and the quarantine sweep (every `git_idle_timeout`, at least every
    /// second and at most every [`QUARANTINE_SWEEP_MAX`]); both end at shutdown, the worker also
    /// when every `Maintenance` handle is dropped.
    pub fn start(grasp: Arc<Grasp>, git_idle_timeout: Duration, shutdown: Shutdown) -> Maintenance {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(Mutex::new(HashSet::new()));
        let prune = Arc::new(Mutex::new(HashSet::new()));
        let dedupe = Arc::new(Mutex::new(HashSet::new()));
        let shrink = Arc::new(Mutex::new(HashSet::new()));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let shrunk = Arc::new(Mutex::new((HashMap::new(), HashSet::new())));
        tokio::spawn(sweep_quarantines(grasp.layout.git_root().to_path_buf(), git_idle_timeout, shutdown.clone()));
        let maintenance = Maintenance { tx, queued, prune, idle: git_idle_timeout, dedupe, shrink, shrunk, running, shutdown: shutdown.signal() };
        let pass = Pass { grasp, maintenance: maintenance.clone(), prune_after: git_idle_timeout };
        tokio::spawn(worker(rx, pass, shutdown));
        maintenance
    }

    /// Queues `repo` for a pass one git idle timeout from now: a repository made for a push
    /// (a GRASP-06 contributor repository) is looked at once that push holds its push lock (the
    /// pass then waits for it to end) or has been given up, and removed if it was left empty.
    pub fn schedule_after_idle(&self, repo: PathBuf) {
        let (this, idle, mut shutdown) = (self.clone(), self.idle, self.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.recv() => {}
                _ = tokio::time::sleep(idle) => this.schedule(repo),
            }
        });
    }

    /// Queues `member` for a dedupe pass: a promotion moved its released objects into its pool.
    pub fn schedule_dedupe(&self, member: PathBuf) {
        self.dedupe.lock().unwrap().insert(member.clone());
        self.schedule(member);
    }

    /// Queues `pool` for a shrink, [`SHRINK_DELAY`] from now: released refs left it (or a
    /// member), and the other members of the same release may follow.
    pub fn schedule_shrink(&self, pool: PathBuf) {
        self.schedule_shrink_after(pool, SHRINK_DELAY);
    }

    /// Queues `pool` for a shrink `after` from now (one timer per pool, counted as pending work;
    /// ends at shutdown).
    fn schedule_shrink_after(&self, pool: PathBuf, after: Duration) {
        if !self.shrunk.lock().unwrap().1.insert(pool.clone()) {
            return;
        }
        let (maintenance, mut shutdown) = (self.clone(), self.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.recv() => {}
                _ = tokio::time::sleep(after) => {
                    maintenance.shrink.lock().unwrap().insert(pool.clone());
                    maintenance.schedule(pool.clone());
                    maintenance.shrunk.lock().unwrap().1.remove(&pool);
                }
            }
        });
    }

    /// Passes waiting, running or due on a timer (an operator's and the benchmark's view of
    /// background git work).
    pub fn pending(&self) -> usize {
        self.queued.lock().unwrap().len() + self.running.load(std::sync::atomic::Ordering::Relaxed) + self.shrunk.lock().unwrap().1.len()
    }

    /// Queues `repo` for a pass that also prunes: refs were removed from it (expired pull
    /// request placeholders), so objects only they reached can go.
    pub fn schedule_prune(&self, repo: PathBuf) {
        self.prune.lock().unwrap().insert(repo.clone());
        self.schedule(repo);
    }

    /// Queues `repo` for a pass (once, however many ask before it runs).
    pub fn schedule(&self, repo: PathBuf) {
        let mut queued = self.queued.lock().unwrap();
        if queued.len() >= MAX_QUEUED || !queued.insert(repo.clone()) {
            return;
        }
        if self.tx.send(repo.clone()).is_err() {
            queued.remove(&repo);
        }
    }
}

/// Queues the pushed repository after a push (when the relay runs maintenance).
pub fn after_push(grasp: &Grasp, repo: &grasp_state::purgatory::RepoId) {
    if let (Some(m), Some(repo)) = (grasp.maintenance.get(), grasp.path_of(repo)) {
        m.schedule(repo);
    }
}

/// Queues `repo` for a pass after objects arrived in it without a receive-pack (background
/// sync) (when the relay runs maintenance).
pub fn after_objects_arrived(grasp: &Grasp, repo: &Path) {
    if let Some(m) = grasp.maintenance.get() {
        m.schedule(repo.to_path_buf());
    }
}

/// Queues `repo` for a pruning pass after refs were removed from it (when the relay runs
/// maintenance), and its pool for a shrink.
pub fn after_ref_removal(grasp: &Grasp, repo: &Path) {
    if let Some(m) = grasp.maintenance.get() {
        m.schedule_prune(repo.to_path_buf());
    }
    after_member_refs_moved(grasp, repo);
}

/// Queues the pool `repo` borrows from, if any, for a shrink after refs of `repo` moved away
/// from (or left) objects: released history only it reached may go (when the relay runs
/// maintenance).
pub fn after_member_refs_moved(grasp: &Grasp, repo: &Path) {
    let Ok((_, identifier)) = grasp.layout.locate(repo) else { return };
    if crate::git::pools::is_member(repo, &identifier) {
        after_family_refs_left(grasp, &identifier);
    }
}

/// The object pools' requests (`crate::grasp::pools` asks through these methods of the hub).
impl Grasp {
    /// Queues `member` for a dedupe and `pool` for a repack after a promotion packed objects of
    /// the member into the pool (when the relay runs maintenance).
    pub fn maintain_after_promotion(&self, member: &Path, pool: &Path) {
        if let Some(m) = self.maintenance.get() {
            m.schedule_dedupe(member.to_path_buf());
            m.schedule(pool.to_path_buf());
        }
    }

    /// Queues `member` for a dedupe after it joined its pool with objects of its own (when the
    /// relay runs maintenance); it runs after the promotion the join is part of.
    pub fn maintain_after_join(&self, member: &Path) {
        if let Some(m) = self.maintenance.get() {
            m.schedule_dedupe(member.to_path_buf());
        }
    }

    /// Queues `pool` for a shrink after released refs left it (when the relay runs maintenance).
    pub fn maintain_after_pool_refs_left(&self, pool: &Path) {
        if let Some(m) = self.maintenance.get() {
            m.schedule_shrink(pool.to_path_buf());
        }
    }
}

/// Queues the pool of `identifier`, if there is one, for a shrink after one of its
/// repositories was deleted or its refs left objects (when the relay runs maintenance).
pub fn after_family_refs_left(grasp: &Grasp, identifier: &str) {
    if let Some(pool) = grasp.pool_path(identifier).filter(|p| p.is_dir()) {
        grasp.maintain_after_pool_refs_left(&pool);
    }
}

/// What the worker needs for a pass.
struct Pass {
    grasp: Arc<Grasp>,
    maintenance: Maintenance,
    /// Unreachable objects younger than this are kept (the git idle timeout).
    prune_after: Duration,
}

/// The longest time between two quarantine sweeps.
pub const QUARANTINE_SWEEP_MAX: Duration = Duration::from_secs(10 * 60);

/// Removes, every `idle` (clamped to 1 s ..= [`QUARANTINE_SWEEP_MAX`]), the push quarantines of
/// every repository that nothing touched for `idle`: a push killed with its relay or web server
/// left them (a live push writes into its own, and is ended once idle that long).
async fn sweep_quarantines(git_root: PathBuf, idle: Duration, mut shutdown: Shutdown) {
    let mut ticker = tokio::time::interval(idle.clamp(Duration::from_secs(1), QUARANTINE_SWEEP_MAX));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = ticker.tick() => {}
        }
        let root = git_root.clone();
        let _ = tokio::task::spawn_blocking(move || crate::git::repos::remove_stale_quarantines(&root, idle, crate::git::repos::Sweep::Running)).await;
    }
}

async fn worker(mut rx: mpsc::UnboundedReceiver<PathBuf>, pass: Pass, mut shutdown: Shutdown) {
    use std::sync::atomic::Ordering;
    loop {
        let repo = tokio::select! {
            _ = shutdown.recv() => return,
            next = rx.recv() => match next { Some(repo) => repo, None => return },
        };
        // Counted as running before it leaves the queue: never seen as idle in between.
        pass.maintenance.running.fetch_add(1, Ordering::Relaxed);
        pass.maintenance.queued.lock().unwrap().remove(&repo);
        let done = tokio::select! {
            _ = shutdown.recv() => false,
            () = async {
                if crate::grasp::pools::is_pool(&pass.grasp.layout, &repo) {
                    maintain_pool(&pass, &repo).await
                } else {
                    maintain(&pass, &repo).await
                }
            } => true,
        };
        pass.maintenance.running.fetch_sub(1, Ordering::Relaxed);
        if !done {
            return;
        }
    }
}

/// A pass on an object pool: a geometric repack with its multi-pack-index bitmap, or, when a
/// shrink is due, a full `-A` repack and the locked prune (`Grasp::shrink_pool`). The repacks
/// take no lock (git repacks beside promotions; nothing is dropped).
async fn maintain_pool(pass: &Pass, pool: &Path) {
    let grasp = &pass.grasp;
    let Ok(identifier) = grasp.layout.locate_pool(pool) else { return };
    if !pool.is_dir() {
        pass.maintenance.shrink.lock().unwrap().remove(pool);
        return;
    }
    let mut shrink = pass.maintenance.shrink.lock().unwrap().remove(pool);
    if shrink {
        let last = pass.maintenance.shrunk.lock().unwrap().0.get(pool).copied();
        if let Some(wait) = last.map(|t| SHRINK_MIN_INTERVAL.saturating_sub(t.elapsed())).filter(|w| !w.is_zero()) {
            // Shrunk a moment ago: this pass only repacks; the shrink comes when it is due.
            pass.maintenance.schedule_shrink_after(pool.to_path_buf(), wait);
            shrink = false;
        }
    }
    let started = Instant::now();
    let how = if shrink { crate::git::pools::Repack::Full } else { crate::git::pools::Repack::Geometric };
    if let Err(e) = crate::git::pools::repack_pool(pool, how).await {
        tracing::warn!(identifier, error = %e, "object pool repack failed");
        return;
    }
    tracing::info!(identifier, ?how, elapsed_ms = started.elapsed().as_millis() as u64, "object pool repacked");
    if !shrink {
        return;
    }
    use crate::grasp::pools::ShrinkError;
    let result = grasp.shrink_pool(&identifier).await;
    if result.is_ok() {
        let mut shrunk = pass.maintenance.shrunk.lock().unwrap();
        shrunk.0.retain(|_, t| t.elapsed() < SHRINK_MIN_INTERVAL);
        shrunk.0.insert(pool.to_path_buf(), Instant::now());
    }
    match result {
        // Refs left the pool in this pass: their objects are loosened by the next one.
        Ok(true) => pass.maintenance.schedule_shrink(pool.to_path_buf()),
        Ok(false) => {}
        Err(e @ (ShrinkError::Busy(_) | ShrinkError::MembersChanged)) => {
            tracing::info!(identifier, reason = %e, retry_secs = SHRINK_RETRY.as_secs(), "object pool shrink put off");
            pass.maintenance.schedule_shrink_after(pool.to_path_buf(), SHRINK_RETRY);
        }
        Err(e) => tracing::warn!(identifier, error = %e, "object pool shrink failed"),
    }
}

/// Maintains `repo`: under its push lock and the relay's lock of it (taken the one way,
/// [`RepoGuards`], in the lock order, without blocking a thread) removes crashed pushes'
/// quarantines and runs a due prune; otherwise, with both locks let go, `git maintenance run
/// --auto`.
async fn maintain(pass: &Pass, repo: &Path) {
    let grasp = &pass.grasp;
    let shown = grasp.layout.git_root().parent().map_or(repo, |root| repo.strip_prefix(root).unwrap_or(repo)).display().to_string();
    let started = Instant::now();
    let guards = match RepoGuards::acquire_within(&grasp.locks, [repo.to_path_buf()], PushLocks::Take, LOCK_WAIT).await {
        Ok(guards) => guards,
        Err(LockError::PushLockFile(e)) => {
            // Gone (deleted meanwhile) or unreadable: nothing to maintain.
            tracing::debug!(repo = %shown, error = %e, "maintenance skipped");
            return;
        }
        Err(e) => {
            tracing::info!(repo = %shown, error = %e, "maintenance skipped: the repository stayed busy");
            return;
        }
    };
    // Under the push lock no push runs here: any quarantine is a crashed push's.
    let repo2 = repo.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || crate::git::repos::remove_quarantines_in(&repo2, Duration::ZERO, crate::git::repos::Sweep::Running)).await;
    // A contributor repository (GRASP-06) with no ref left goes: nothing else justifies it.
    if remove_if_empty_contributor_repo(grasp, repo).await {
        drop(guards);
        pass.maintenance.prune.lock().unwrap().remove(repo);
        tracing::info!(repo = %shown, "empty contributor repository removed");
        return;
    }
    let prune = pass.maintenance.prune.lock().unwrap().remove(repo);
    let dedupe = pass.maintenance.dedupe.lock().unwrap().remove(repo) && crate::git::pools::borrows(repo);
    let result = if prune {
        let keep = kept_objects(grasp, repo).await;
        let pruned = run_prune(repo, &keep, pass.prune_after).await;
        drop(guards);
        pruned
    } else {
        drop(guards);
        if dedupe {
            crate::git::pools::dedupe(repo).await
        } else {
            run_auto(repo).await
        }
    };
    let git = if prune {
        "gc --prune"
    } else if dedupe {
        "repack -A -d -l (dedupe against the object pool)"
    } else {
        "maintenance run --auto"
    };
    match result {
        Ok(()) => tracing::info!(repo = %shown, prune, git, elapsed_ms = started.elapsed().as_millis() as u64, "repository maintenance done"),
        Err(e) => tracing::warn!(repo = %shown, prune, error = %e, "repository maintenance failed"),
    }
}

/// Removes `repo` if it is a GRASP-06 contributor repository without any ref (a push refused,
/// its placeholders expired): the caller holds its push lock and the relay's lock, so no push
/// runs in it. Returns whether it was removed.
pub(crate) async fn remove_if_empty_contributor_repo(grasp: &Grasp, repo: &Path) -> bool {
    let Ok((space @ RepoSpace::Prs, owner, identifier)) = grasp.layout.locate_in(repo) else { return false };
    let (layout, path) = (grasp.layout.clone(), repo.to_path_buf());
    let removed = tokio::task::spawn_blocking(move || -> Result<bool, String> {
        match crate::git::read_refs(&path) {
            Ok(refs) if refs.is_empty() => crate::git::repos::delete_repo_in(&layout, space, &owner, &identifier).map_err(|e| e.to_string()),
            Ok(_) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    match removed {
        Ok(Ok(true)) => {
            grasp.trust.limits.repo_removed();
            true
        }
        Ok(Ok(false)) => false,
        Ok(Err(e)) => {
            tracing::warn!(repo = %repo.display(), error = %e, "could not check or remove a contributor repository");
            false
        }
        Err(_) => false,
    }
}

/// The objects of `repo` a prune must keep although no ref reaches them: the commits of held
/// state events of its identifier and of held pull requests for it (present here).
async fn kept_objects(grasp: &Grasp, repo: &Path) -> Vec<String> {
    let Ok((space, owner, identifier)) = grasp.layout.locate_in(repo) else { return Vec::new() };
    let (states, prs) = grasp.purgatory.held_objects(&grasp_state::purgatory::RepoId { owner, identifier, space });
    let mut oids: Vec<String> = states
        .iter()
        .filter_map(|ev| grasp_state::nostr::nip34::RepoState::from_event(ev).ok())
        .flat_map(|s| s.refs.into_values())
        .chain(prs)
        .collect();
    oids.sort();
    oids.dedup();
    let repo = repo.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let missing: HashSet<String> = crate::git::missing_objects(&repo, &oids).unwrap_or_default().into_iter().collect();
        oids.into_iter().filter(|o| !missing.contains(o)).collect()
    })
    .await
    .unwrap_or_default()
}

/// `git gc --prune`: repacks and drops objects no ref reaches that are older than
/// `older_than`, keeping `keep` and everything they reach (git's `gc.recentObjectsHook` lists
/// them as recent). Killed after [`RUN_TIMEOUT`]. The caller holds the push lock, so no push
/// (and no push's quarantine) depends on what goes.
async fn run_prune(repo: &Path, keep: &[String], older_than: Duration) -> Result<(), GitError> {
    let list = repo.join(KEEP_LIST);
    let text: String = keep.iter().map(|oid| format!("{oid}\n")).collect();
    std::fs::write(&list, text).map_err(|e| GitError::Spawn(std::io::Error::new(e.kind(), format!("writing {}: {e}", list.display()))))?;
    let hook = format!("cat '{}'", list.display().to_string().replace('\'', "'\\''"));
    let result = GitCommand::in_repo(repo)
        .config("gc.recentObjectsHook", hook)
        .config("repack.writeBitmaps", !crate::git::pools::borrows(repo))
        .args(["gc", "--quiet"])
        .arg(format!("--prune={}.seconds.ago", older_than.as_secs()))
        .run_async(RUN_TIMEOUT)
        .await
        .map(|_| ());
    let _ = std::fs::remove_file(&list);
    // gc packs refs: their values stay, the ref cache checks again all the same.
    crate::git::ref_generation::bump(repo);
    result
}

/// The file listing the objects a prune keeps, inside the repository for the time of the run.
const KEEP_LIST: &str = crate::git::pools::KEEP_LIST;

/// `git maintenance run --auto` in `repo` (through the one runner), killed after
/// [`RUN_TIMEOUT`].
async fn run_auto(repo: &Path) -> Result<(), GitError> {
    let checked = repo.to_path_buf();
    if !tokio::task::spawn_blocking(move || auto_gc_may_act(&checked)).await.unwrap_or(true) {
        // Far below git's own thresholds: `git maintenance run --auto` would do nothing.
        return Ok(());
    }
    let mut command = GitCommand::in_repo(repo);
    if crate::git::pools::borrows(repo) {
        // A member's packs are not closed under reachability: no bitmap (git would warn).
        command = command.config("repack.writeBitmaps", false);
    }
    let packed = || packed_refs_stat(repo);
    let before = packed();
    let result = command.args(["maintenance", "run", "--auto", "--quiet"]).run_async(RUN_TIMEOUT).await.map(|_| ());
    // It may pack refs (its gc's `pack-refs`, which always writes a new `packed-refs`): their
    // values stay, but the ref cache checks again all the same. A run that packed nothing
    // leaves the answers kept meanwhile (those made right after a push) in place.
    if packed() != before {
        crate::git::ref_generation::bump(repo);
    }
    result
}

/// Whether `git maintenance run --auto` might do anything in `repo`, judged the way git's auto
/// gc judges it, with room to spare: git estimates the loose objects from `objects/17` (more
/// than 27 files there means more than `gc.auto`'s 6,700) and counts packs against
/// `gc.autoPackLimit` (50). Far below both (20 files, 40 packs), and with no `gc` or
/// `maintenance` settings in the repository's own config (which could lower them or enable
/// other tasks), git would do nothing: the process is not started. Anything unreadable says
/// yes. Blocking: two directory reads and one small file.
fn auto_gc_may_act(repo: &Path) -> bool {
    let config = std::fs::read_to_string(repo.join("config")).unwrap_or_else(|_| "[gc]".to_string()).to_ascii_lowercase();
    if config.contains("[gc") || config.contains("[maintenance") {
        return true;
    }
    let count = |dir: &str, keep: &dyn Fn(&str) -> bool| match std::fs::read_dir(repo.join(dir)) {
        Ok(entries) => entries.flatten().filter(|e| keep(&e.file_name().to_string_lossy())).count(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(_) => usize::MAX,
    };
    let loose = count("objects/17", &|name| name.len() >= 38);
    let packs = count("objects/pack", &|name| name.ends_with(".pack"));
    loose >= 20 || packs >= 40
}

/// `packed-refs`' inode and change time (`None`: absent): a new file always differs (git writes
/// it aside and renames it over the old one, so its inode was taken while the old one's was
/// still in use).
fn packed_refs_stat(repo: &Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(repo.join("packed-refs")).ok()?;
    Some((meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn prune_drops_unreachable_objects_but_keeps_listed_ones() {
        use crate::git::test_git;
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.git");
        let work = dir.path().join("w");
        test_git(dir.path(), &["init", "--bare", "--quiet", repo.to_str().unwrap()]);
        test_git(dir.path(), &["init", "--quiet", work.to_str().unwrap()]);
        let commit = |name: &str| crate::git::test_commit(&work, name);
        let served = commit("served");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        let held = commit("held");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/nostr/a"]);
        let dropped = commit("dropped");
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/nostr/b"]);
        test_git(&repo, &["update-ref", "-d", "refs/nostr/a"]);
        test_git(&repo, &["update-ref", "-d", "refs/nostr/b"]);
        run_prune(&repo, std::slice::from_ref(&held), Duration::ZERO).await.unwrap();
        let present = |oid: &str| crate::git::missing_objects(&repo, &[oid.to_string()]).unwrap().is_empty();
        assert!(present(&served) && present(&held), "reachable and listed objects stay");
        assert!(!present(&dropped), "an object only a removed ref reached is pruned");
        assert!(!repo.join(KEEP_LIST).exists());
    }

    #[test]
    fn auto_maintenance_is_started_only_near_gits_thresholds() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.git");
        crate::git::test_git(dir.path(), &["init", "--bare", "--quiet", repo.to_str().unwrap()]);
        assert!(!auto_gc_may_act(&repo), "a new repository");
        std::fs::create_dir_all(repo.join("objects/17")).unwrap();
        for i in 0..20 {
            std::fs::write(repo.join(format!("objects/17/{i:038}")), "").unwrap();
        }
        assert!(auto_gc_may_act(&repo), "loose objects near gc.auto");
        std::fs::remove_dir_all(repo.join("objects/17")).unwrap();
        for i in 0..40 {
            std::fs::write(repo.join(format!("objects/pack/pack-{i:040}.pack")), "").unwrap();
        }
        assert!(auto_gc_may_act(&repo), "packs near gc.autoPackLimit");
        let (_dir2, other) = (tempfile::tempdir().unwrap(), dir.path().join("s.git"));
        crate::git::test_git(dir.path(), &["init", "--bare", "--quiet", other.to_str().unwrap()]);
        crate::git::test_git(&other, &["config", "gc.auto", "1"]);
        assert!(auto_gc_may_act(&other), "the repository's own gc settings: git decides");
        assert!(auto_gc_may_act(&dir.path().join("missing.git")), "unreadable: git decides");
    }

    #[tokio::test]
    async fn auto_maintenance_runs_in_a_bare_repository() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.git");
        crate::git::test_git(dir.path(), &["init", "--bare", "--quiet", repo.to_str().unwrap()]);
        run_auto(&repo).await.unwrap();
        assert!(run_auto(&dir.path().join("missing.git")).await.is_err());
    }
}
