//! Copies of a released repository's data to its family, done in the background, never inside
//! the pushing client's post-receive (docs/protocol.md#release-and-alignment): the released
//! objects are promoted into the identifier family's object pool, and the other owners'
//! repositories for which the latest state is authoritative (their maintainer set holds the
//! state's author) join the pool and are released and aligned there, a ref update
//! ([`Grasp::copy_out`], docs/architecture.md, "Object pools"). Anyone can announce an
//! identifier listing someone as maintainer, so the number of such repositories is an attacker's
//! choice (docs/security.md), and even co-maintainers' repositories cost the pusher nothing.
//! The same queue carries the startup migration of repositories from before pools
//! (`Grasp::pool_migration`).
//!
//! The queue also carries realignments: when an announcement changes a repository's confirmed
//! maintainers (docs/protocol.md#maintainer-authority), that repository releases what is now
//! authoritative and aligns to it ([`Grasp::realign`]), off the path of the event's answer.
//!
//! [`CopyQueue`] holds one entry per (identifier, owner, work), however many pushes asked for
//! it; [`run_copies`] carries out at most [`CONCURRENCY`] of them at a time, each target
//! repository under its own locks (push lock, then repository lock), tried without waiting. A
//! target that is busy (a push to it runs) is tried again later with the deferred work's backoff.
//! Past [`MAX_PENDING`] entries a request is refused with a warning and counted
//! ([`CopyQueue::refused`]); the next push of that repository asks again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nostr::prelude::PublicKey;
use tokio::task::JoinSet;

use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// Copies carried out at the same time.
pub const CONCURRENCY: usize = 2;
/// Most (identifier, owner) entries waiting.
pub const MAX_PENDING: usize = 10_000;
/// The longest the task sleeps before looking again.
const TICK: Duration = Duration::from_secs(1);

/// One piece of background work on a repository of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    /// Carry the repository's released data to the family ([`Grasp::copy_out`]).
    CopyOut,
    /// Its confirmed maintainers changed: release what is now authoritative and align it
    /// ([`Grasp::realign`]).
    Realign,
}

type Key = (String, PublicKey, Work);

#[derive(Debug, Clone, Copy)]
struct Due {
    at: Instant,
    attempts: u32,
}

/// The copies waiting to be carried out.
#[derive(Default)]
pub struct CopyQueue {
    pending: Mutex<BTreeMap<Key, Due>>,
    wake: tokio::sync::Notify,
    refused: AtomicU64,
    /// Copies being carried out now.
    running: std::sync::atomic::AtomicUsize,
}

impl CopyQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Due>> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks for `owner`'s repository of `identifier` to be copied out now (an entry already
    /// waiting is brought forward). False when the queue is full (logged and counted).
    pub fn request(&self, identifier: &str, owner: &PublicKey) -> bool {
        self.request_work(identifier, owner, Work::CopyOut)
    }

    /// Asks for `owner`'s repository of `identifier` to follow a change of its confirmed
    /// maintainers ([`Work::Realign`]). False when the queue is full (logged and counted).
    pub fn request_realign(&self, identifier: &str, owner: &PublicKey) -> bool {
        self.request_work(identifier, owner, Work::Realign)
    }

    fn request_work(&self, identifier: &str, owner: &PublicKey, work: Work) -> bool {
        let recorded = self.schedule((identifier.to_string(), *owner, work), Due { at: Instant::now(), attempts: 0 });
        if !recorded {
            self.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(identifier, owner = %owner, "copy queue is full; this repository's data is copied out at its next push");
        }
        self.wake.notify_one();
        recorded
    }

    fn schedule(&self, key: Key, due: Due) -> bool {
        let mut pending = self.lock();
        if let Some(d) = pending.get_mut(&key) {
            d.at = d.at.min(due.at);
            return true;
        }
        if pending.len() >= MAX_PENDING {
            return false;
        }
        pending.insert(key, due);
        true
    }

    /// The earliest entry due at `now`, taken out of the queue; else when the next one is due.
    fn take_due(&self, now: Instant) -> Result<(Key, u32), Option<Instant>> {
        let mut pending = self.lock();
        let earliest = pending.iter().min_by_key(|(_, d)| d.at).map(|(k, d)| (k.clone(), *d));
        match earliest {
            Some((key, due)) if due.at <= now => {
                pending.remove(&key);
                // Counted as running before it leaves the queue's lock: never seen as idle.
                self.running.fetch_add(1, Ordering::Relaxed);
                Ok((key, due.attempts))
            }
            Some((_, due)) => Err(Some(due.at)),
            None => Err(None),
        }
    }

    /// How many copies wait.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Copies waiting or being carried out (an operator's and the benchmark's view of
    /// background git work).
    pub fn pending(&self) -> usize {
        self.len() + self.running.load(Ordering::Relaxed)
    }

    /// Requests refused because the queue was full, since startup.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Carries out the waiting copies, at most [`CONCURRENCY`] at a time, until shutdown (the
/// running ones are dropped with the task).
pub async fn run_copies(grasp: Arc<Grasp>, mut shutdown: Shutdown) {
    let mut running = JoinSet::new();
    loop {
        let mut next = None;
        while running.len() < CONCURRENCY {
            match grasp.copies.take_due(Instant::now()) {
                Ok(((identifier, owner, work), attempts)) => {
                    let grasp = grasp.clone();
                    running.spawn(async move {
                        let done = match work {
                            Work::CopyOut => grasp.copy_out(&identifier, &owner).await,
                            Work::Realign => grasp.realign(&identifier, &owner).await,
                        };
                        if !done {
                            let at = Instant::now() + grasp_state::git::deferred::backoff(attempts);
                            grasp.copies.schedule((identifier, owner, work), Due { at, attempts: attempts.saturating_add(1) });
                        }
                        grasp.copies.running.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(at) => {
                    next = at;
                    break;
                }
            }
        }
        let sleep = next.map_or(TICK, |at| at.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(10), TICK));
        tokio::select! {
            _ = shutdown.recv() => return,
            Some(_) = running.join_next(), if !running.is_empty() => {}
            _ = grasp.copies.wake.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    #[test]
    fn one_entry_per_repository_earliest_first_and_bounded() {
        let q = CopyQueue::default();
        let (a, b) = (Keys::generate().public_key(), Keys::generate().public_key());
        let now = Instant::now();
        assert!(q.schedule(("r".into(), a, Work::CopyOut), Due { at: now + Duration::from_secs(5), attempts: 2 }));
        assert!(q.request("r", &b));
        assert!(q.request("r", &b), "asked twice, one entry");
        assert_eq!(q.len(), 2);
        let Ok((key, attempts)) = q.take_due(Instant::now()) else { panic!("b is due") };
        assert_eq!((key, attempts), (("r".to_string(), b, Work::CopyOut), 0));
        assert!(q.request_realign("r", &b));
        assert_eq!(q.len(), 2, "a realignment is work of its own");
        let Ok((key, _)) = q.take_due(Instant::now()) else { panic!("the realignment is due") };
        assert_eq!(key, ("r".to_string(), b, Work::Realign));
        assert!(matches!(q.take_due(Instant::now()), Err(Some(_))), "a is not due yet");
        assert!(q.request("r", &a), "a push brings a waiting retry forward");
        assert!(q.take_due(Instant::now()).is_ok());
        assert!(matches!(q.take_due(Instant::now()), Err(None)));
        for i in 0..MAX_PENDING {
            assert!(q.request(&format!("r{i}"), &a));
        }
        assert!(!q.request("one-more", &a), "full: refused, not silently dropped");
        assert_eq!(q.refused(), 1);
        assert!(q.request("r0", &a), "an entry already waiting is still taken");
    }
}
