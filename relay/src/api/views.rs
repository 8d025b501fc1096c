//! The operator's views of background work, read by the hook API (`GET /v1/sync`,
//! `GET /v1/purgatory`) and the metrics listener: each is set once, by the daemon, when the work
//! it shows starts (background git sync, relay sync); unset while that work does not run.

use std::sync::OnceLock;

use crate::peers::PeersView;
use crate::sync::StatsSource;

#[derive(Default)]
pub struct OperatorViews {
    /// Background git sync's figures.
    pub sync_stats: OnceLock<StatsSource>,
    /// Relay sync's relays and levels.
    pub relay_sync: OnceLock<PeersView>,
}
