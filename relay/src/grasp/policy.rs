//! The acceptance policy's verdict on an incoming event. The policy itself is
//! `crate::grasp::acceptance` (methods of [`crate::grasp::Grasp`]).

/// What happens to an incoming, already verified event.
#[derive(Debug)]
pub enum Admission {
    /// Store and broadcast it.
    Store,
    /// The policy already stored and broadcast it (its git data was here), or found it stored
    /// already: answered `OK true` with this message (empty, or `duplicate: ...`).
    Published(String),
    /// Accepted (`OK true "purgatory: ..."`) but held, neither stored nor served; answered once
    /// the hold is [`Durable`](crate::grasp::journal::Durable) (the journal synced it).
    Purgatory(String, crate::grasp::journal::Durable),
    /// Refuse with this complete NIP-01 message (`blocked: ...`, `invalid: ...`, ...).
    Reject(String),
}
