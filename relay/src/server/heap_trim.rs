//! Handing freed heap memory back to the system, every [`EVERY`].
//!
//! glibc's allocator keeps the pages of freed memory inside its arenas when live allocations
//! sit around them; a burst (a write flood, a relay-sync interest rebuilt) leaves tens of MiB
//! of such pages counted as the relay's private memory long after it ended (measured after
//! filling 1,000,000 events: 121 MiB free inside the arenas, 45 MiB of it handed back by one
//! trim; docs/benchmarks.md, "Scale"). `malloc_trim(0)` returns the whole free pages of every
//! arena; it runs on the blocking pool, and the task ends at shutdown.

use std::time::Duration;

use crate::shutdown::Shutdown;

/// How often freed pages are handed back.
pub const EVERY: Duration = Duration::from_secs(30);

/// Trims every [`EVERY`] until shutdown.
pub async fn run(mut shutdown: Shutdown) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = tick.tick() => {
                let _ = tokio::task::spawn_blocking(trim).await;
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
