//! Deferred repository work (`grasp_state::deferred`): what an event, a push's post-receive or a
//! retry could not do because a repository it governs stayed locked past the bound. Its one
//! owner ([`SharedDeferred`], short critical sections) and the task that retries it
//! ([`run_deferred`]); the operator sees it in `GET /v1/purgatory` and `grasp-relay purgatory`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grasp_state::deferred::{DeferredKey, DeferredView, DeferredWork};
use nostr::prelude::PublicKey;

use crate::grasp::locks::LockError;
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// The longest the retry task sleeps before looking again.
const TICK: Duration = Duration::from_secs(1);

/// The deferred work, shared by admission, the hook API and the retry task.
#[derive(Default)]
pub struct SharedDeferred {
    inner: Mutex<DeferredWork>,
    wake: tokio::sync::Notify,
}

impl SharedDeferred {
    fn lock(&self) -> std::sync::MutexGuard<'_, DeferredWork> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the repositories of `author`'s work on `identifier` that `failed` to lock.
    pub fn defer(&self, grasp: &Grasp, identifier: &str, author: &PublicKey, failed: &[LockError]) {
        let repos: Vec<String> = failed.iter().map(|e| grasp.shown_repo(e.repo())).collect();
        let reason = failed.first().map(ToString::to_string).unwrap_or_default();
        let key = DeferredKey { identifier: identifier.to_string(), author: *author };
        if self.lock().defer(key, repos.iter().cloned(), &reason, Instant::now()) {
            tracing::info!(identifier, author = %author, repos = ?repos, %reason, "repositories busy; their work is deferred and retried");
        } else {
            tracing::warn!(identifier, author = %author, "deferred work is full; this work waits for the next event or push");
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

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Retries deferred work when it is due, until shutdown. Each retry waits for a repository at
/// most the event bound again; what is still busy backs off (`grasp_state::deferred::backoff`).
pub async fn run_deferred(grasp: Arc<Grasp>, mut shutdown: Shutdown) {
    loop {
        let (due, next) = {
            let work = grasp.deferred.lock();
            (work.due(Instant::now()), work.next_due())
        };
        for key in due {
            tokio::select! {
                _ = shutdown.recv() => return,
                _ = grasp.process_governed(&key.identifier, &key.author) => {}
            }
        }
        let sleep = next.map_or(TICK, |at| at.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(10), TICK));
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = grasp.deferred.wake.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}
