//! Event acceptance policy.
//!
//! STUB: admits every event for storage. The real GRASP policy (announcements listing this
//! server, state/PR events for known repos, purgatory until git data arrives) replaces the body
//! of [`Policy::admit`] after the grasp-state crate lands. Keep the [`Admission`] contract.

use nostr::event::Event;

/// The policy's verdict for an incoming, already verified event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Store and broadcast it.
    Store,
    /// Accept (`OK true "purgatory: <reason>"`) but hold it, neither stored nor served.
    Purgatory(String),
    /// Refuse with this complete NIP-01 message (`blocked: ...`, `invalid: ...`, ...).
    Reject(String),
}

/// Decides what happens to incoming events.
#[derive(Debug, Default)]
pub struct Policy {}

impl Policy {
    pub fn new() -> Self {
        Self {}
    }

    /// STUB: everything is stored.
    pub async fn admit(&self, _event: &Event) -> Admission {
        Admission::Store
    }
}
