//! Deferred repository work (`grasp_state::git::deferred`): what an event, a push's post-receive or a
//! retry could not do because a repository it governs stayed locked past the bound. Its one
//! owner ([`SharedDeferred`], short critical sections) and the task that retries it
//! ([`run_deferred`]); the operator sees it in `GET /v1/purgatory` (`deferred`,
//! `deferred_stats`), `grasp-relay purgatory` and the metrics (`grasp_deferred_entries`,
//! `grasp_deferred_dropped_total`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grasp_state::git::deferred::{Deferral, DeferredKey, DeferredLimits, DeferredStats, DeferredView, DeferredWork, DropReason};
use nostr::prelude::PublicKey;
use tokio::task::JoinSet;

use crate::grasp::locks::LockError;
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// The longest the retry task sleeps before looking again.
const TICK: Duration = Duration::from_secs(1);

/// Retries running at once (of different identifiers, so never two for one repository).
pub const MAX_RUNNING_RETRIES: usize = 4;

/// The deferred work, shared by admission, the hook API and the retry task.
#[derive(Default)]
pub struct SharedDeferred {
    inner: Mutex<DeferredWork>,
    wake: tokio::sync::Notify,
}

impl SharedDeferred {
    /// An empty table with the operator's bounds (`--deferred-total`, `--deferred-per-author`).
    pub fn new(limits: DeferredLimits) -> Self {
        SharedDeferred { inner: Mutex::new(DeferredWork::new(limits)), wake: tokio::sync::Notify::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DeferredWork> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the repositories of `author`'s work on `identifier` that `failed` to lock.
    pub fn defer(&self, grasp: &Grasp, identifier: &str, author: &PublicKey, failed: &[LockError]) {
        let repos: Vec<String> = failed.iter().map(|e| grasp.shown_repo(e.repo())).collect();
        let reason = failed.first().map(ToString::to_string).unwrap_or_default();
        let owners: Vec<PublicKey> = failed.iter().filter_map(|e| grasp.layout.locate(e.repo()).ok()).map(|(owner, _)| owner).collect();
        let key = DeferredKey { identifier: identifier.to_string(), author: *author };
        let (outcome, entries, author_entries) = {
            let mut work = self.lock();
            let outcome = work.defer_owned(key, repos.iter().cloned(), owners, &reason, Instant::now());
            (outcome, work.len(), work.author_entries(author))
        };
        if outcome.is_recorded() {
            tracing::info!(identifier, author = %author, repos = ?repos, %reason, "repositories busy; their work is deferred and retried");
        }
        match outcome {
            Deferral::Recorded | Deferral::Retried => {}
            Deferral::Evicted(victim) => {
                grasp.metrics.deferred_dropped("evicted");
                tracing::warn!(
                    identifier = %victim.identifier,
                    author = %victim.author,
                    for_author = %author,
                    entries,
                    "deferred work full: dropped an entry of the author holding the most to make room; it waits for the next event, push or background sync"
                );
            }
            Deferral::Dropped(why) => {
                grasp.metrics.deferred_dropped(why.as_str());
                let bound = match why {
                    DropReason::AuthorShare => "this author holds its share, --deferred-per-author",
                    DropReason::OwnerShare => "an owner of these repositories has its share, --deferred-per-owner",
                    DropReason::Full => "the table is full, --deferred-total",
                };
                tracing::warn!(
                    identifier,
                    author = %author,
                    repos = ?repos,
                    %reason,
                    dropped = why.as_str(),
                    entries,
                    author_entries,
                    "deferred work not recorded ({bound}); this work waits for the next event, push or background sync"
                );
            }
        }
        self.wake.notify_one();
    }

    /// `author`'s work on `identifier` is complete.
    pub fn done(&self, identifier: &str, author: &PublicKey) {
        let key = DeferredKey { identifier: identifier.to_string(), author: *author };
        if self.lock().done(&key) {
            tracing::info!(identifier, author = %author, "deferred work done");
        }
    }

    /// The operator's view.
    pub fn listing(&self) -> Vec<DeferredView> {
        self.lock().listing(Instant::now())
    }

    /// The table's figures (`GET /v1/purgatory` `deferred_stats`, metrics).
    pub fn stats(&self) -> DeferredStats {
        self.lock().stats()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Marks a retry finished (and wakes the retry task) when its future ends or is dropped.
struct Running {
    grasp: Arc<Grasp>,
    key: DeferredKey,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.grasp.deferred.lock().finished(&self.key);
        self.grasp.deferred.wake.notify_one();
    }
}

/// Retries deferred work when it is due, until shutdown: up to [`MAX_RUNNING_RETRIES`] at once,
/// never two of one identifier (`DeferredWork::start_due`). Each retry waits for a repository at
/// most the event bound again, and holds repository locks only for local git work and the
/// store (no network I/O); what is still busy backs off (`grasp_state::git::deferred::backoff`).
/// The retries end with this task.
pub async fn run_deferred(grasp: Arc<Grasp>, mut shutdown: Shutdown) {
    let mut retries = JoinSet::new();
    loop {
        let (start, next) = {
            let mut work = grasp.deferred.lock();
            let start = work.start_due(Instant::now(), MAX_RUNNING_RETRIES);
            // At the bound, the next look is when a retry ends (it wakes this task).
            let next = if work.running() >= MAX_RUNNING_RETRIES { None } else { work.next_due() };
            (start, next)
        };
        for key in start {
            let running = Running { grasp: grasp.clone(), key };
            retries.spawn(async move {
                running.grasp.process_governed(&running.key.identifier, &running.key.author).await;
                drop(running);
            });
        }
        let sleep = next.map_or(TICK, |at| at.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(10), TICK));
        tokio::select! {
            _ = shutdown.recv() => return,
            Some(_) = retries.join_next(), if !retries.is_empty() => {}
            _ = grasp.deferred.wake.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}
