//! Write limits as pure data: token buckets, alone and keyed (docs/protocol.md#trust).
//!
//! Time is passed in: every operation takes `now` (an [`Instant`] from the caller's
//! [`crate::purgatory::Clock`]), so tests drive the buckets with a manual clock and nothing here
//! reads the machine's time.
//!
//! A [`TokenBucket`] holds up to `burst` tokens and gains `per_second` tokens every second; each
//! write takes one. [`KeyedBuckets`] keeps one bucket per key (client address, author) and
//! forgets buckets that have refilled completely, so its size stays bounded by the keys active
//! recently, and by a hard cap: when a new key finds the table full, the buckets nearest to full
//! again (the least debt to forget) are forgotten to make room, so a flood of new keys never
//! refuses everyone (docs/security.md).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The shape of a token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Most tokens held (the burst allowed after a quiet period). 0 refuses everything.
    pub burst: u32,
    /// Tokens gained per second.
    pub per_second: f64,
}

impl Rate {
    /// `count` tokens per `period`, all of them available at once.
    pub fn per(count: u32, period: Duration) -> Rate {
        let secs = period.as_secs_f64();
        Rate { burst: count, per_second: if secs > 0.0 { count as f64 / secs } else { f64::INFINITY } }
    }

    /// How long an empty bucket takes to refill completely.
    fn full_refill(&self) -> Duration {
        if self.per_second > 0.0 && self.per_second.is_finite() {
            Duration::from_secs_f64((self.burst as f64 / self.per_second).min(1e9))
        } else {
            Duration::ZERO
        }
    }
}

/// One token bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Rate,
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, now: Instant) -> Self {
        TokenBucket { rate, tokens: rate.burst as f64, updated: now }
    }

    fn refill(&mut self, now: Instant) {
        // A clock that went backwards (it cannot, for `Instant`) gains nothing.
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        let gained = elapsed * self.rate.per_second;
        self.tokens = if gained.is_finite() { (self.tokens + gained).min(self.rate.burst as f64) } else { self.rate.burst as f64 };
        self.updated = self.updated.max(now);
    }

    /// Takes one token, or says how long until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        if self.rate.per_second <= 0.0 || self.rate.burst == 0 {
            return Err(Duration::MAX);
        }
        Err(Duration::from_secs_f64(((1.0 - self.tokens) / self.rate.per_second).min(1e9)))
    }

    /// Tokens available at `now` (whole tokens).
    pub fn available(&mut self, now: Instant) -> u32 {
        self.refill(now);
        self.tokens.floor() as u32
    }

    /// Is the bucket full at `now` (nothing to remember about this key)?
    fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.rate.burst as f64
    }
}

/// Why [`KeyedBuckets::try_take`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// This key's bucket is empty; a token is back after this long.
    Empty(Duration),
}

/// One bucket per key, all with the same [`Rate`].
#[derive(Debug, Clone)]
pub struct KeyedBuckets<K> {
    rate: Rate,
    max_keys: usize,
    buckets: HashMap<K, TokenBucket>,
    last_sweep: Option<Instant>,
}

impl<K: Hash + Eq + Clone> KeyedBuckets<K> {
    /// Buckets of `rate`, remembering at most `max_keys` partly empty buckets at once (beyond
    /// it, the fullest are forgotten, see [`try_take`](Self::try_take)).
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        KeyedBuckets { rate, max_keys: max_keys.max(1), buckets: HashMap::new(), last_sweep: None }
    }

    /// Takes one token from `key`'s bucket. A new key finding `max_keys` buckets remembered
    /// makes room: full buckets are forgotten, then, if none was full, the fullest sixteenth.
    pub fn try_take(&mut self, key: &K, now: Instant) -> Result<(), Limited> {
        self.sweep(now);
        if !self.buckets.contains_key(key) && self.buckets.len() >= self.max_keys {
            self.sweep_now(now);
            if self.buckets.len() >= self.max_keys {
                self.evict_fullest(now);
            }
        }
        let rate = self.rate;
        let bucket = self.buckets.entry(key.clone()).or_insert_with(|| TokenBucket::new(rate, now));
        bucket.try_take(now).map_err(Limited::Empty)
    }

    /// Tokens `key` has left at `now`.
    pub fn available(&mut self, key: &K, now: Instant) -> u32 {
        match self.buckets.get_mut(key) {
            Some(b) => b.available(now),
            None => self.rate.burst,
        }
    }

    /// Keys remembered (buckets not yet full again).
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Forgets full buckets, at most once per full refill period (amortised).
    fn sweep(&mut self, now: Instant) {
        let period = self.rate.full_refill().max(Duration::from_secs(1));
        if self.last_sweep.is_none_or(|t| now.saturating_duration_since(t) >= period) {
            self.sweep_now(now);
        }
    }

    /// Forgets the fullest sixteenth of the buckets (at least one): the keys that have waited
    /// longest since their last write, whose forgotten debt is smallest. Amortised: one eviction
    /// makes room for `max_keys / 16` new keys.
    fn evict_fullest(&mut self, now: Instant) {
        let n = (self.max_keys / 16).clamp(1, self.buckets.len().max(1));
        let mut fullness: Vec<(f64, K)> = self
            .buckets
            .iter_mut()
            .map(|(k, b)| {
                b.refill(now);
                (b.tokens, k.clone())
            })
            .collect();
        if n < fullness.len() {
            fullness.select_nth_unstable_by(n - 1, |a, b| b.0.total_cmp(&a.0));
            fullness.truncate(n);
        }
        for (_, k) in fullness {
            self.buckets.remove(&k);
        }
    }

    fn sweep_now(&mut self, now: Instant) {
        self.buckets.retain(|_, b| !b.is_full(now));
        self.last_sweep = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate { burst: 3, per_second: 2.0 }, t0);
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        assert_eq!(b.try_take(t0), Err(Duration::from_millis(500)));
        assert!(b.try_take(t0 + Duration::from_millis(499)).is_err());
        assert_eq!(b.try_take(t0 + Duration::from_millis(500)), Ok(()));
        // A long pause refills only up to the burst.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.available(later), 3);
    }

    #[test]
    fn zero_refuses() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate { burst: 0, per_second: 10.0 }, t0);
        assert_eq!(b.try_take(t0 + Duration::from_secs(10)), Err(Duration::MAX));
        let mut b = TokenBucket::new(Rate { burst: 1, per_second: 0.0 }, t0);
        assert_eq!(b.try_take(t0), Ok(()));
        assert_eq!(b.try_take(t0 + Duration::from_secs(10)), Err(Duration::MAX));
    }

    #[test]
    fn per_hour() {
        let r = Rate::per(10, Duration::from_secs(3600));
        assert_eq!(r.burst, 10);
        assert!((r.per_second - 10.0 / 3600.0).abs() < 1e-12);
    }

    #[test]
    fn keyed_buckets_are_independent_and_forgotten_when_full() {
        let t0 = Instant::now();
        let mut k = KeyedBuckets::new(Rate { burst: 1, per_second: 1.0 }, 2);
        assert_eq!(k.try_take(&"a", t0), Ok(()));
        assert!(matches!(k.try_take(&"a", t0), Err(Limited::Empty(_))));
        assert_eq!(k.try_take(&"b", t0), Ok(()));
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(k.try_take(&"c", t1), Ok(()));
        assert_eq!(k.len(), 1);
    }

    #[test]
    fn a_full_table_forgets_the_fullest_buckets_instead_of_refusing_new_keys() {
        let t0 = Instant::now();
        let rate = Rate { burst: 10, per_second: 1.0 };
        let mut k = KeyedBuckets::new(rate, 32);
        // "old" wrote once long ago (nearly full again); "busy" emptied its bucket just now.
        assert_eq!(k.try_take(&"old".to_string(), t0), Ok(()));
        let t1 = t0 + Duration::from_millis(500);
        for _ in 0..10 {
            assert_eq!(k.try_take(&"busy".to_string(), t1), Ok(()));
        }
        for i in 0..30 {
            assert_eq!(k.try_take(&format!("flood{i}"), t1), Ok(()));
        }
        assert_eq!(k.len(), 32);
        // A new key is taken (never refused), the table stays bounded, the emptied bucket stays
        // remembered (its debt is not forgiven) and the fullest one ("old") is forgotten.
        assert_eq!(k.try_take(&"new".to_string(), t1), Ok(()));
        assert!(k.len() <= 32);
        assert!(!k.buckets.contains_key("old"));
        assert!(matches!(k.try_take(&"busy".to_string(), t1), Err(Limited::Empty(_))));
    }
}
