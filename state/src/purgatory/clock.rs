//! Time, injectable: the purgatory never calls `Instant::now()` itself.
//!
//! Deadlines are [`Instant`]s (monotonic, immune to wall-clock jumps); the checkpoint needs wall
//! time ([`SystemTime`]) to measure downtime between a save and the next start. Production uses
//! [`SystemClock`]; tests use [`ManualClock`] and move time forward explicitly.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// A source of monotonic and wall-clock time.
pub trait Clock: Send + Sync {
    /// Monotonic time, for deadlines.
    fn now(&self) -> Instant;
    /// Wall-clock time, for checkpoints and the expired-events record.
    fn wall(&self) -> SystemTime;
}

/// The real clocks of the machine.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to. Both readings advance together.
#[derive(Debug)]
pub struct ManualClock {
    base_instant: Instant,
    base_wall: SystemTime,
    elapsed: Mutex<Duration>,
}

impl ManualClock {
    /// A clock whose wall time starts at `wall`.
    pub fn starting_at(wall: SystemTime) -> Self {
        ManualClock {
            base_instant: Instant::now(),
            base_wall: wall,
            elapsed: Mutex::new(Duration::ZERO),
        }
    }

    /// A clock whose wall time starts at the given unix second.
    pub fn at_unix(secs: u64) -> Self {
        Self::starting_at(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    }

    /// Moves both readings forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut elapsed = self.elapsed.lock().unwrap_or_else(|p| p.into_inner());
        *elapsed += by;
    }

    fn elapsed(&self) -> Duration {
        *self.elapsed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::at_unix(1_700_000_000)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base_instant + self.elapsed()
    }

    fn wall(&self) -> SystemTime {
        self.base_wall + self.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::at_unix(1000);
        let (t0, w0) = (clock.now(), clock.wall());
        assert_eq!(clock.now(), t0);
        assert_eq!(w0, SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
        clock.advance(Duration::from_secs(90));
        assert_eq!(clock.now() - t0, Duration::from_secs(90));
        assert_eq!(
            clock.wall().duration_since(w0).unwrap(),
            Duration::from_secs(90)
        );
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock;
        let a = clock.now();
        assert!(clock.now() >= a);
        assert!(clock.wall() > SystemTime::UNIX_EPOCH);
    }
}
