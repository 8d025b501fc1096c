//! Per-domain request throttling for background sync.
//!
//! Each remote domain gets at most `max_concurrent` fetches at once and at most
//! `max_per_window` fetch starts per sliding `window` (defaults: 5 and 30 per minute). A fetch holds
//! a [`Permit`] that frees its concurrency slot when dropped (or explicitly released).
//!
//! Fairness: when a domain is saturated, the identifiers that were turned away wait in a per-domain
//! FIFO. As capacity frees, the earliest waiters get it first; a newcomer cannot jump the line. A
//! waiter that does not come back within `waiter_grace` of the time it was told is dropped from the
//! line, so a vanished identifier never blocks a domain.
//!
//! Pure state behind a mutex with an injected `now`; the mutex is never held across an await.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Limits applied to every domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleLimits {
    /// Concurrent fetches per domain (default 5, at least 1).
    pub max_concurrent: usize,
    /// Fetch starts per sliding window per domain (default 30, at least 1).
    pub max_per_window: usize,
    /// The sliding window (default 1 minute).
    pub window: Duration,
    /// When only concurrency is exhausted, how long to tell callers to wait (default 1 s).
    pub concurrency_retry: Duration,
    /// How long past its appointed time a waiter keeps its place in line (default 10 s).
    pub waiter_grace: Duration,
}

impl Default for ThrottleLimits {
    fn default() -> Self {
        ThrottleLimits {
            max_concurrent: 5,
            max_per_window: 30,
            window: Duration::from_secs(60),
            concurrency_retry: Duration::from_secs(1),
            waiter_grace: Duration::from_secs(10),
        }
    }
}

/// The domain is saturated; try again at this instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottledUntil(pub Instant);

/// Per-domain figures for the admin view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DomainStats {
    pub domain: String,
    pub in_flight: usize,
    pub requests_in_window: usize,
    pub waiting: usize,
    pub last_error: Option<String>,
    /// Unix seconds of `last_error`.
    pub last_error_at: Option<u64>,
}

/// Shared per-domain throttle; clones share state.
#[derive(Debug, Clone)]
pub struct Throttle {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    limits: ThrottleLimits,
    domains: HashMap<String, DomainState>,
}

#[derive(Debug, Default)]
struct DomainState {
    in_flight: usize,
    /// Start times of fetches inside the sliding window, oldest first.
    starts: VecDeque<Instant>,
    waiters: VecDeque<Waiter>,
    last_error: Option<(String, SystemTime)>,
}

#[derive(Debug)]
struct Waiter {
    identifier: String,
    come_back_by: Instant,
}

impl DomainState {
    fn prune(&mut self, limits: &ThrottleLimits, now: Instant) {
        while self
            .starts
            .front()
            .is_some_and(|start| *start + limits.window <= now)
        {
            self.starts.pop_front();
        }
        self.waiters.retain(|waiter| waiter.come_back_by >= now);
    }

    fn free_slots(&self, limits: &ThrottleLimits) -> usize {
        let concurrent = limits.max_concurrent.max(1).saturating_sub(self.in_flight);
        let rate = limits
            .max_per_window
            .max(1)
            .saturating_sub(self.starts.len());
        concurrent.min(rate)
    }

    /// Earliest instant at which a slot may free.
    fn retry_at(&self, limits: &ThrottleLimits, now: Instant) -> Instant {
        let rate_limited = self.starts.len() >= limits.max_per_window.max(1);
        match self.starts.front() {
            Some(oldest) if rate_limited => (*oldest + limits.window).max(now),
            _ => now + limits.concurrency_retry,
        }
    }

    fn is_idle(&self) -> bool {
        self.in_flight == 0 && self.starts.is_empty() && self.waiters.is_empty()
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(ThrottleLimits::default())
    }
}

impl Throttle {
    pub fn new(limits: ThrottleLimits) -> Self {
        Throttle {
            inner: Arc::new(Mutex::new(Inner {
                limits,
                domains: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent between statements, so a panic elsewhere cannot corrupt it.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Take a slot for one fetch from `domain` on behalf of `identifier`, or learn when to retry.
    /// A turned-away identifier keeps its place in the domain's line until it comes back.
    pub fn try_acquire(
        &self,
        domain: &str,
        identifier: &str,
        now: Instant,
    ) -> Result<Permit, ThrottledUntil> {
        let mut inner = self.lock();
        let limits = inner.limits.clone();
        let state = inner.domains.entry(domain.to_string()).or_default();
        state.prune(&limits, now);
        let place = state
            .waiters
            .iter()
            .position(|waiter| waiter.identifier == identifier)
            .unwrap_or(state.waiters.len());
        if place < state.free_slots(&limits) {
            if place < state.waiters.len() {
                state.waiters.remove(place);
            }
            state.in_flight += 1;
            state.starts.push_back(now);
            return Ok(Permit {
                throttle: self.clone(),
                domain: domain.to_string(),
                released: false,
            });
        }
        let until = state.retry_at(&limits, now);
        let come_back_by = until + limits.waiter_grace;
        match state.waiters.get_mut(place) {
            Some(waiter) => waiter.come_back_by = come_back_by,
            None => state.waiters.push_back(Waiter {
                identifier: identifier.to_string(),
                come_back_by,
            }),
        }
        Err(ThrottledUntil(until))
    }

    fn release_slot(&self, domain: &str) {
        let mut inner = self.lock();
        if let Some(state) = inner.domains.get_mut(domain) {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
    }

    /// Take `identifier` out of every domain's line (its sync finished).
    pub fn forget(&self, identifier: &str) {
        let mut inner = self.lock();
        for state in inner.domains.values_mut() {
            state
                .waiters
                .retain(|waiter| waiter.identifier != identifier);
        }
    }

    /// Remember the latest failure talking to `domain`, for the admin view.
    pub fn record_error(&self, domain: &str, message: &str, at: SystemTime) {
        let mut inner = self.lock();
        let state = inner.domains.entry(domain.to_string()).or_default();
        state.last_error = Some((message.to_string(), at));
    }

    /// Drop bookkeeping of idle domains whose last error is older than `keep_errors_for`.
    pub fn prune(&self, now: Instant, wall: SystemTime, keep_errors_for: Duration) {
        let mut inner = self.lock();
        let limits = inner.limits.clone();
        inner.domains.retain(|_, state| {
            state.prune(&limits, now);
            let recent_error = state.last_error.as_ref().is_some_and(|(_, at)| {
                wall.duration_since(*at).unwrap_or_default() < keep_errors_for
            });
            !state.is_idle() || recent_error
        });
    }

    /// Per-domain figures, sorted by domain.
    pub fn stats(&self, now: Instant) -> Vec<DomainStats> {
        let mut inner = self.lock();
        let limits = inner.limits.clone();
        let mut stats: Vec<DomainStats> = inner
            .domains
            .iter_mut()
            .map(|(domain, state)| {
                state.prune(&limits, now);
                DomainStats {
                    domain: domain.clone(),
                    in_flight: state.in_flight,
                    requests_in_window: state.starts.len(),
                    waiting: state.waiters.len(),
                    last_error: state
                        .last_error
                        .as_ref()
                        .map(|(message, _)| message.clone()),
                    last_error_at: state
                        .last_error
                        .as_ref()
                        .map(|(_, at)| at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()),
                }
            })
            .collect();
        stats.sort_by(|a, b| a.domain.cmp(&b.domain));
        stats
    }
}

/// One concurrency slot for one domain; freed on drop.
#[derive(Debug)]
pub struct Permit {
    throttle: Throttle,
    domain: String,
    released: bool,
}

impl Permit {
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Free the slot now (same as dropping the permit).
    pub fn release(mut self) {
        self.free();
    }

    fn free(&mut self) {
        if !self.released {
            self.released = true;
            self.throttle.release_slot(&self.domain);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn limits(max_concurrent: usize, max_per_window: usize) -> ThrottleLimits {
        ThrottleLimits {
            max_concurrent,
            max_per_window,
            ..ThrottleLimits::default()
        }
    }

    fn in_flight(throttle: &Throttle, domain: &str, now: Instant) -> usize {
        throttle
            .stats(now)
            .into_iter()
            .find(|s| s.domain == domain)
            .map_or(0, |s| s.in_flight)
    }

    #[test]
    fn at_most_five_concurrent_per_domain_by_default() {
        let t0 = Instant::now();
        let throttle = Throttle::default();
        let permits: Vec<Permit> = (0..5)
            .map(|i| {
                throttle
                    .try_acquire("a.example", &format!("id{i}"), t0)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            throttle.try_acquire("a.example", "id5", t0).unwrap_err(),
            ThrottledUntil(t0 + S)
        );
        // Other domains are unaffected.
        let other = throttle.try_acquire("b.example", "id5", t0).unwrap();
        assert_eq!(other.domain(), "b.example");
        assert_eq!(in_flight(&throttle, "a.example", t0), 5);
        drop(permits);
        assert_eq!(in_flight(&throttle, "a.example", t0), 0);
        assert!(throttle.try_acquire("a.example", "id5", t0).is_ok());
    }

    #[test]
    fn explicit_release_frees_exactly_once() {
        let t0 = Instant::now();
        let throttle = Throttle::new(limits(2, 100));
        let a = throttle.try_acquire("d", "x", t0).unwrap();
        let _b = throttle.try_acquire("d", "y", t0).unwrap();
        assert_eq!(in_flight(&throttle, "d", t0), 2);
        a.release();
        assert_eq!(in_flight(&throttle, "d", t0), 1);
    }

    #[test]
    fn thirty_requests_per_sliding_minute() {
        let t0 = Instant::now();
        let throttle = Throttle::default();
        for i in 0..30u32 {
            // Released at once: only the rate limit matters here.
            throttle
                .try_acquire("d", "x", t0 + i * S)
                .unwrap()
                .release();
        }
        // Full until the first start leaves the window at t0 + 60 s.
        assert_eq!(
            throttle.try_acquire("d", "x", t0 + 30 * S).unwrap_err(),
            ThrottledUntil(t0 + 60 * S)
        );
        assert!(throttle
            .try_acquire("d", "x", t0 + 60 * S - Duration::from_millis(1))
            .is_err());
        throttle
            .try_acquire("d", "x", t0 + 60 * S)
            .unwrap()
            .release();
        // Second start (t0 + 1 s) leaves at t0 + 61 s.
        assert_eq!(
            throttle.try_acquire("d", "x", t0 + 60 * S).unwrap_err(),
            ThrottledUntil(t0 + 61 * S)
        );
        let stats = throttle.stats(t0 + 60 * S);
        assert_eq!(stats[0].requests_in_window, 30);
        assert_eq!(throttle.stats(t0 + 200 * S)[0].requests_in_window, 0);
    }

    #[test]
    fn waiters_are_served_in_order_newcomers_do_not_jump_the_line() {
        let t0 = Instant::now();
        let throttle = Throttle::new(limits(1, 100));
        let first = throttle.try_acquire("d", "busy", t0).unwrap();
        assert!(throttle.try_acquire("d", "a", t0).is_err());
        assert!(throttle.try_acquire("d", "b", t0).is_err());
        drop(first);
        // A slot is free, but "a" is first in line.
        assert!(throttle.try_acquire("d", "newcomer", t0).is_err());
        assert!(throttle.try_acquire("d", "b", t0).is_err());
        let a = throttle.try_acquire("d", "a", t0).unwrap();
        assert!(throttle.try_acquire("d", "b", t0).is_err(), "still busy");
        drop(a);
        assert!(
            throttle.try_acquire("d", "newcomer", t0).is_err(),
            "b is ahead"
        );
        let b = throttle.try_acquire("d", "b", t0).unwrap();
        drop(b);
        assert!(throttle.try_acquire("d", "newcomer", t0).is_ok());
    }

    #[test]
    fn several_free_slots_serve_several_waiters() {
        let t0 = Instant::now();
        let throttle = Throttle::new(limits(2, 100));
        let p1 = throttle.try_acquire("d", "busy1", t0).unwrap();
        let p2 = throttle.try_acquire("d", "busy2", t0).unwrap();
        assert!(throttle.try_acquire("d", "a", t0).is_err());
        assert!(throttle.try_acquire("d", "b", t0).is_err());
        assert!(throttle.try_acquire("d", "c", t0).is_err());
        drop((p1, p2));
        // Two slots: the second waiter may take one even if the first has not come back yet.
        let _b = throttle.try_acquire("d", "b", t0).unwrap();
        assert!(throttle.try_acquire("d", "c", t0).is_err(), "c is third");
        let _a = throttle.try_acquire("d", "a", t0).unwrap();
        assert_eq!(throttle.stats(t0)[0].waiting, 1);
    }

    #[test]
    fn a_waiter_that_never_returns_loses_its_place() {
        let t0 = Instant::now();
        let throttle = Throttle::new(limits(1, 100));
        let busy = throttle.try_acquire("d", "busy", t0).unwrap();
        let ThrottledUntil(until) = throttle.try_acquire("d", "gone", t0).unwrap_err();
        drop(busy);
        let grace = ThrottleLimits::default().waiter_grace;
        assert!(throttle.try_acquire("d", "other", until + grace).is_err());
        assert!(throttle
            .try_acquire("d", "other", until + grace + Duration::from_millis(1))
            .is_ok());
    }

    #[test]
    fn forget_removes_a_waiter_everywhere() {
        let t0 = Instant::now();
        let throttle = Throttle::new(limits(1, 100));
        let busy = throttle.try_acquire("d", "busy", t0).unwrap();
        assert!(throttle.try_acquire("d", "done", t0).is_err());
        drop(busy);
        throttle.forget("done");
        assert!(throttle.try_acquire("d", "other", t0).is_ok());
    }

    #[test]
    fn last_error_is_reported_and_idle_domains_pruned() {
        let t0 = Instant::now();
        let wall = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let throttle = Throttle::default();
        throttle.try_acquire("d", "x", t0).unwrap().release();
        throttle.record_error("d", "connection refused", wall);
        let stats = throttle.stats(t0);
        assert_eq!(stats[0].last_error.as_deref(), Some("connection refused"));
        assert_eq!(stats[0].last_error_at, Some(1_000_000));
        let hour = Duration::from_secs(3600);
        throttle.prune(t0 + 61 * S, wall + 10 * S, hour);
        assert_eq!(throttle.stats(t0).len(), 1, "recent error kept");
        throttle.prune(t0 + 61 * S, wall + hour, hour);
        assert!(throttle.stats(t0).is_empty());
    }

    #[test]
    fn zero_limits_are_treated_as_one() {
        let t0 = Instant::now();
        let throttle = Throttle::new(limits(0, 0));
        let p = throttle.try_acquire("d", "x", t0).unwrap();
        assert!(throttle.try_acquire("d", "y", t0).is_err());
        drop(p);
    }
}
