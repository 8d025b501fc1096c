//! Waiting on conditions with a deadline (never sleeping as synchronisation).

use std::time::{Duration, Instant};

/// Default deadline for anything a test waits for.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Polls `cond` with a short backoff until it returns `Some`, or fails after `timeout`.
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(v) = cond() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
