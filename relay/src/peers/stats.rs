//! What operators see of each relay (`GET /v1/sync`, `grasp-relay sync`).

use serde::Serialize;

use crate::sync::relay_url::RelayUrl;

/// Where a relay's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerState {
    Connecting,
    SyncingHistory,
    Live,
    /// Waiting after a failure (or, with `cooling_down`, after `rate-limited:`).
    BackingOff,
    /// Failing for a day: dropped until something needs it again.
    Dead,
}

/// One relay in the operator view.
#[derive(Debug, Clone, Serialize)]
pub struct RelayStats {
    pub url: RelayUrl,
    pub state: PeerState,
    pub bootstrap: bool,
    /// Followed (also) as a participant's relay (GRASP-03 Sync+).
    pub outbox: bool,
    /// Repositories (`npub/identifier`) it is asked about.
    pub repositories: Vec<String>,
    pub filters: usize,
    /// Events received from it, accepted here, refused here.
    pub received: u64,
    pub accepted: u64,
    pub refused: u64,
    /// Of the refused: events it sent that match none of the filters they came on (not
    /// admitted; those tagging an event id may wait for it).
    pub unrequested: u64,
    /// Milliseconds spent waiting for its write bucket (`--relay-sync-rate`).
    pub throttled_ms: u64,
    /// Its events waiting for what they tag.
    pub waiting: usize,
    /// Whether it reconciles by NIP-77 (`None` until known).
    pub negentropy: Option<bool>,
    pub failures: u32,
    pub cooling_down: bool,
    /// Milliseconds until the next connection attempt (while backing off).
    pub next_attempt_in_ms: u64,
    pub last_error: Option<String>,
    /// Times the history of its filters completed.
    pub history_runs: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl RelayStats {
    pub fn new(url: RelayUrl) -> Self {
        RelayStats {
            url,
            state: PeerState::Connecting,
            bootstrap: false,
            outbox: false,
            repositories: Vec::new(),
            filters: 0,
            received: 0,
            accepted: 0,
            refused: 0,
            unrequested: 0,
            throttled_ms: 0,
            waiting: 0,
            negentropy: None,
            failures: 0,
            cooling_down: false,
            next_attempt_in_ms: 0,
            last_error: None,
            history_runs: 0,
            bytes_in: 0,
            bytes_out: 0,
        }
    }
}
