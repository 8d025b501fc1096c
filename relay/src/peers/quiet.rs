//! When a quiet live connection is pinged and when it is given up (pure over injected
//! instants).
//!
//! The watch keeps one deadline, moved only by what the relay sends (any frame, a pong
//! included) and by our own pings, never by the follower's other work (timers, plan changes,
//! fetches): a relay quiet for the ping interval is pinged, and one that has answered nothing
//! to [`MAX_UNANSWERED_PINGS`] pings, quiet for one more interval after the last, is given up.

use std::time::{Duration, Instant};

/// Pings left unanswered before the connection is given up.
pub const MAX_UNANSWERED_PINGS: u32 = 2;

/// What to do when the quiet deadline passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuietStep {
    Ping,
    GiveUp,
}

/// One live connection's quiet watch.
#[derive(Debug, Clone)]
pub struct QuietWatch {
    every: Duration,
    pinged_at: Option<Instant>,
    unanswered: u32,
}

impl QuietWatch {
    /// Pings after `every` of quiet.
    pub fn new(every: Duration) -> Self {
        QuietWatch { every, pinged_at: None, unanswered: 0 }
    }

    /// When the wait ends, given the last time the relay was heard from.
    pub fn deadline(&self, last_heard: Instant) -> Instant {
        self.pinged_at.map_or(last_heard, |p| p.max(last_heard)) + self.every
    }

    /// The deadline passed at `now` (call only then): ping, or give up.
    pub fn elapsed(&mut self, last_heard: Instant, now: Instant) -> QuietStep {
        if self.pinged_at.is_some_and(|p| last_heard > p) {
            self.unanswered = 0;
        }
        if self.unanswered >= MAX_UNANSWERED_PINGS {
            return QuietStep::GiveUp;
        }
        self.unanswered += 1;
        self.pinged_at = Some(now);
        QuietStep::Ping
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_silent_relay_is_pinged_twice_then_given_up_whatever_else_happens() {
        let (start, every) = (Instant::now(), 15 * S);
        let mut w = QuietWatch::new(every);
        // Nothing heard after the start: the deadline stays put however often it is asked (a
        // timer of the follower firing every 10 s used to restart the wait).
        for _ in 0..10 {
            assert_eq!(w.deadline(start), start + every);
        }
        assert_eq!(w.elapsed(start, start + every), QuietStep::Ping);
        assert_eq!(w.deadline(start), start + 2 * every);
        assert_eq!(w.elapsed(start, start + 2 * every), QuietStep::Ping);
        assert_eq!(w.elapsed(start, start + 3 * every), QuietStep::GiveUp);
    }

    #[test]
    fn anything_heard_moves_the_deadline_and_answers_the_pings() {
        let (start, every) = (Instant::now(), 15 * S);
        let mut w = QuietWatch::new(every);
        assert_eq!(w.deadline(start + 5 * S), start + 20 * S);
        assert_eq!(w.elapsed(start, start + every), QuietStep::Ping);
        assert_eq!(w.elapsed(start, start + 2 * every), QuietStep::Ping);
        // A pong after the second ping: the count starts again.
        let pong = start + 2 * every + S;
        assert_eq!(w.deadline(pong), pong + every);
        assert_eq!(w.elapsed(pong, pong + every), QuietStep::Ping);
        assert_eq!(w.elapsed(pong, pong + 2 * every), QuietStep::Ping);
        assert_eq!(w.elapsed(pong, pong + 3 * every), QuietStep::GiveUp);
    }
}
