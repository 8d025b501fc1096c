//! The operator's views of background work, read by the hook API (`GET /v1/sync`,
//! `GET /v1/purgatory`), the metrics listener and readiness: each is set once, by the daemon, when the work
//! it shows starts (background git sync, relay sync); unset while that work does not run.

use std::sync::OnceLock;

use crate::peers::PeersView;
use crate::sync::SyncHandle;

#[derive(Default)]
pub struct OperatorViews {
    /// Background git sync: its figures, and the catch-up pass readiness waits on.
    pub git_sync: OnceLock<SyncHandle>,
    /// Relay sync's relays and levels.
    pub relay_sync: OnceLock<PeersView>,
}
