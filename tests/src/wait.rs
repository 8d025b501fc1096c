//! Waiting on conditions with a deadline (never sleeping as synchronisation).
//!
//! - [`wait_until`]: for plain `#[test]`s and the fixtures' synchronous start-up and shutdown
//!   (`TestServer::start`, `stop`), whose conditions depend only on other processes; it blocks
//!   the thread between polls.
//! - [`eventually!`](crate::eventually): for async tests; the condition may `.await` and the pause
//!   between polls is a `tokio` sleep, so the runtime keeps running the test's other tasks.

use std::time::{Duration, Instant};

/// Default deadline for anything a test waits for.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// First pause between two polls; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Polls `cond` with a short backoff until it returns `Some`, or fails after `timeout`.
/// Blocks the thread: in async tests use [`eventually!`](crate::eventually).
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let mut poll = Poll::new(timeout);
    loop {
        if let Some(v) = cond() {
            return Ok(v);
        }
        match poll.next_pause() {
            Some(pause) => std::thread::sleep(pause),
            None => anyhow::bail!("timed out after {timeout:?} waiting for {what}"),
        }
    }
}

/// The deadline and backoff of one wait (shared by [`wait_until`] and
/// [`eventually!`](crate::eventually)).
#[derive(Debug)]
pub struct Poll {
    timeout: Duration,
    deadline: Instant,
    pause: Duration,
}

impl Poll {
    pub fn new(timeout: Duration) -> Self {
        Poll { timeout, deadline: Instant::now() + timeout, pause: FIRST_PAUSE }
    }

    /// How long to pause before the next poll, or `None` once the deadline has passed.
    pub fn next_pause(&mut self) -> Option<Duration> {
        if Instant::now() >= self.deadline {
            return None;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        Some(pause)
    }

    /// Async pause before the next poll; panics (failing the test) once the deadline has passed.
    pub async fn pause(&mut self, what: &str) {
        match self.next_pause() {
            Some(pause) => tokio::time::sleep(pause).await,
            None => panic!("timed out after {:?} waiting for {what}", self.timeout),
        }
    }
}

/// Polls `$cond` (an `Option` expression; it may `.await`) until it is `Some` and yields the
/// value, failing the test after `$timeout` (default [`TIMEOUT`]). For async tests.
///
/// ```ignore
/// let entry = eventually!("the state in purgatory", purgatory_listing(&server).await.get("x").cloned());
/// ```
#[macro_export]
macro_rules! eventually {
    ($what:expr, $cond:expr $(,)?) => {
        $crate::eventually!($what, $crate::TIMEOUT, $cond)
    };
    ($what:expr, $timeout:expr, $cond:expr $(,)?) => {{
        let mut poll = $crate::wait::Poll::new($timeout);
        loop {
            if let Some(value) = $cond {
                break value;
            }
            poll.pause(&$what).await;
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_returns_the_value_or_times_out() {
        let mut n = 0;
        assert_eq!(wait_until("n to reach 3", TIMEOUT, || { n += 1; (n >= 3).then_some(n) }).unwrap(), 3);
        let err = wait_until("never", Duration::from_millis(20), || None::<()>).unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
    }

    #[tokio::test]
    async fn eventually_polls_an_async_condition() {
        let mut n = 0;
        let v = crate::eventually!("n to reach 3", {
            tokio::task::yield_now().await;
            n += 1;
            (n >= 3).then_some(n)
        });
        assert_eq!(v, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out")]
    async fn eventually_fails_after_its_deadline() {
        crate::eventually!("never", Duration::from_millis(20), None::<()>);
    }
}
