//! Per-relay failure bookkeeping (pure over an injected `now`): exponential backoff after
//! failures, a cooldown after `rate-limited:`, and "dead" after failing for a whole day.

use std::time::{Duration, Instant};

/// Backoff, cooldown and death timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthTimings {
    /// Delay after the first failure; doubled after each further one.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Pause after a relay answered `rate-limited:`.
    pub cooldown: Duration,
    /// A relay failing (no successful connection) for this long is dead: dropped until
    /// something needs it again.
    pub dead_after: Duration,
}

impl Default for HealthTimings {
    fn default() -> Self {
        HealthTimings {
            backoff_base: Duration::from_secs(5),
            backoff_cap: Duration::from_secs(15 * 60),
            cooldown: Duration::from_secs(60),
            dead_after: Duration::from_secs(24 * 3600),
        }
    }
}

/// One relay's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Failures since the last connection whose first exchange was answered.
    pub failures: u32,
    /// When the failing streak began.
    failing_since: Option<Instant>,
    /// No connection attempt before this.
    not_before: Option<Instant>,
    /// True while the pause is a rate-limit cooldown (not a backoff).
    pub cooling_down: bool,
}

impl Health {
    /// A connection attempt or a session failed: returns the delay before the next attempt.
    pub fn failed(&mut self, now: Instant, t: &HealthTimings) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.failing_since.get_or_insert(now);
        let exp = self.failures.saturating_sub(1).min(20);
        let delay = t.backoff_base.saturating_mul(1u32 << exp).min(t.backoff_cap);
        self.not_before = Some(now + delay);
        self.cooling_down = false;
        delay
    }

    /// The relay answered `rate-limited:`: pause for the cooldown (not counted as a failure).
    pub fn rate_limited(&mut self, now: Instant, t: &HealthTimings) -> Duration {
        self.not_before = Some(now + t.cooldown);
        self.cooling_down = true;
        t.cooldown
    }

    /// A connection was established and its first exchange answered (the history of its
    /// filters ran to the end): the failing streak ends.
    pub fn connected(&mut self) {
        self.failures = 0;
        self.failing_since = None;
        self.cooling_down = false;
    }

    /// How long to wait before the next attempt.
    pub fn wait(&self, now: Instant) -> Duration {
        self.not_before.map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Failing for at least `dead_after`.
    pub fn is_dead(&self, now: Instant, t: &HealthTimings) -> bool {
        self.failing_since.is_some_and(|since| now.saturating_duration_since(since) >= t.dead_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn timings() -> HealthTimings {
        HealthTimings { backoff_base: S, backoff_cap: 10 * S, cooldown: 30 * S, dead_after: 100 * S }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets_on_success() {
        let (t, now) = (timings(), Instant::now());
        let mut h = Health::default();
        let delays: Vec<u64> = (0..6).map(|_| h.failed(now, &t).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(h.wait(now), 10 * S);
        assert_eq!(h.wait(now + 4 * S), 6 * S);
        h.connected();
        assert_eq!(h.failures, 0);
        assert_eq!(h.failed(now, &t), S);
    }

    #[test]
    fn rate_limit_cools_down_without_counting_as_failure() {
        let (t, now) = (timings(), Instant::now());
        let mut h = Health::default();
        assert_eq!(h.rate_limited(now, &t), 30 * S);
        assert!(h.cooling_down && h.failures == 0);
        assert_eq!(h.wait(now + 10 * S), 20 * S);
    }

    #[test]
    fn dead_after_failing_for_the_whole_period() {
        let (t, now) = (timings(), Instant::now());
        let mut h = Health::default();
        h.failed(now, &t);
        h.failed(now + 50 * S, &t);
        assert!(!h.is_dead(now + 99 * S, &t));
        assert!(h.is_dead(now + 100 * S, &t));
        h.connected();
        assert!(!h.is_dead(now + 200 * S, &t));
    }
}
