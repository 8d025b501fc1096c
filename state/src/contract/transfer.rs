//! The minimum transfer rate of a git request body (`--git-min-rate`, docs/security.md).
//!
//! The idle timeout only measures gaps between reads, so a client sending one byte just inside
//! every gap keeps a push (its git processes, slot and lock) alive for as long as it likes. Past
//! a grace period (the idle timeout: a slow start is not an attack), the body must average at
//! least the minimum rate since the request began; one that falls below is ended. A request
//! body of `n` bytes therefore lasts at most `grace + n / min_rate`. The relay's git front and
//! grasp-cgi (behind nginx) apply the same verdict.

use std::time::Duration;

/// `--git-min-rate`'s default: 1 KiB/s, well below any real network, far above a trickle.
pub const DEFAULT_MIN_RATE: u64 = 1024;

/// Is a body that brought `bytes` in `elapsed` too slow? Never within `grace`; `min_rate` 0
/// means no minimum.
pub fn too_slow(bytes: u64, elapsed: Duration, grace: Duration, min_rate: u64) -> bool {
    if min_rate == 0 || elapsed <= grace {
        return false;
    }
    (bytes as u128) * 1000 < (min_rate as u128) * elapsed.as_millis()
}

/// When a body that has brought `bytes` becomes too slow if nothing more arrives.
pub fn slow_at(bytes: u64, grace: Duration, min_rate: u64) -> Option<Duration> {
    if min_rate == 0 {
        return None;
    }
    let due = Duration::from_millis((bytes as u128 * 1000 / min_rate as u128).min(u64::MAX as u128) as u64);
    Some(due.max(grace) + Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_trickle_is_too_slow_after_the_grace() {
        // One byte every 59 s against a 60 s idle timeout.
        assert!(!too_slow(1, S(59), S(60), 1024));
        assert!(too_slow(2, S(118), S(60), 1024));
        assert!(!too_slow(200 * 1024, S(100), S(60), 1024));
        assert!(!too_slow(0, S(10_000), S(60), 0));
    }

    proptest! {
        #[test]
        fn slow_at_is_when_too_slow_begins(bytes in 0u64..1 << 40, grace in 0u64..600, rate in 1u64..1 << 30) {
            let at = slow_at(bytes, S(grace), rate).unwrap();
            prop_assert!(too_slow(bytes, at, S(grace), rate));
            prop_assert!(!too_slow(bytes, at.saturating_sub(Duration::from_millis(2)), S(grace), rate));
        }
    }
}
