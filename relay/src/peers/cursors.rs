//! Where each relay's sync stands, persisted in `<data>/relay-sync.json`
//! (`DataLayout::relay_sync_file`) so a restart resumes
//! instead of downloading everything again.
//!
//! Per relay: until when the relay was followed live, when it was last fully reconciled, and
//! which filters that covered. A reconnect within [`RESUME_WINDOW`] asks only for what is newer
//! than the last live time (minus a margin for clock skew), for the filters it covered; other
//! filters, and every relay about once a day (randomised per relay), get a full reconciliation.
//! Written with the project's atomic write (`grasp_state::contract::atomic_file`).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

use serde::{Deserialize, Serialize};


/// A reconnect within this many seconds resumes from the last live time.
pub const RESUME_WINDOW: u64 = 15 * 60;

/// Seconds subtracted from the last live time when resuming (clock skew, late events).
pub const RESUME_MARGIN: u64 = 60;

/// Full reconciliation interval: a day, plus or minus up to 4 hours per relay.
const FULL_INTERVAL: u64 = 24 * 3600;
const FULL_JITTER: u64 = 4 * 3600;

/// One relay's position (seconds since the epoch).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The relay was followed live (subscriptions open, history done) until this time.
    pub live_until: u64,
    /// Last full reconciliation.
    pub last_full: u64,
    /// Filter keys ([`super::wanted::filter_key`]) whose history is complete.
    pub filters: BTreeSet<String>,
}

impl Cursor {
    /// The `since` for `filter_key`'s history at `now`: `None` for a full reconciliation.
    pub fn since(&self, relay: &str, filter_key: &str, now: u64) -> Option<u64> {
        let resumable = now.saturating_sub(self.live_until) <= RESUME_WINDOW
            && now.saturating_sub(self.last_full) < full_interval(relay)
            && self.filters.contains(filter_key);
        resumable.then(|| self.live_until.saturating_sub(RESUME_MARGIN))
    }
}

/// About a day, spread per relay so reconciliations do not all run at once.
pub fn full_interval(relay: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    relay.hash(&mut h);
    FULL_INTERVAL - FULL_JITTER + h.finish() % (2 * FULL_JITTER)
}

/// All relays' cursors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursors {
    pub version: u32,
    pub relays: BTreeMap<String, Cursor>,
}

impl Cursors {
    /// Reads the file; a missing or unreadable one starts empty (with a warning): the cost is
    /// one full reconciliation.
    pub fn load(path: &Path) -> Cursors {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "relay sync cursors unreadable; reconciling in full");
                Cursors::default()
            }),
            Err(_) => Cursors::default(),
        }
    }

    /// Writes the file atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(&Cursors { version: 1, relays: self.relays.clone() }).map_err(std::io::Error::other)?;
        grasp_state::contract::atomic_file::write_atomic(path, &json, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_only_recent_cursors_for_covered_filters() {
        let now = 10_000_000;
        let c = Cursor { live_until: now - 600, last_full: now - 3600, filters: ["f".to_string()].into() };
        assert_eq!(c.since("wss://a", "f", now), Some(now - 600 - RESUME_MARGIN));
        assert_eq!(c.since("wss://a", "g", now), None, "a new filter is reconciled in full");
        assert_eq!(c.since("wss://a", "f", now + RESUME_WINDOW), None, "too long ago");
        let old = Cursor { last_full: now - 2 * FULL_INTERVAL, ..c };
        assert_eq!(old.since("wss://a", "f", now), None, "daily full reconciliation");
    }

    #[test]
    fn intervals_are_about_a_day_and_differ_per_relay() {
        let a = full_interval("wss://a.example");
        let b = full_interval("wss://b.example");
        for i in [a, b] {
            assert!((20 * 3600..28 * 3600).contains(&i), "{i}");
        }
        assert_ne!(a, b);
    }

    #[test]
    fn round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay-sync.json");
        assert_eq!(Cursors::load(&path), Cursors::default());
        let mut c = Cursors::default();
        c.relays.insert("wss://a".into(), Cursor { live_until: 5, last_full: 4, filters: ["x".into()].into() });
        c.save(&path).unwrap();
        assert_eq!(Cursors::load(&path).relays, c.relays);
        std::fs::write(&path, "junk").unwrap();
        assert_eq!(Cursors::load(&path), Cursors::default());
    }
}
