//! The Nostr relay's WebSocket side: NIP-01 connections and subscriptions, NIP-42 (`auth`),
//! the NIP-11 document, the NIP-05 answer naming the relay's own key (`nip05`), NIP-77 negentropy reconciliation, and the pipelining of one connection's
//! `EVENT`s (`pipeline`: verified and admitted side by side, answered in order). The event store,
//! live broadcast, group commit and signature checks are `crate::store`, below the domain. A
//! REQ's stored events are streamed within a byte budget (`answer`).

pub mod answer;
pub mod auth;
pub mod connection;
pub mod negentropy;
pub mod nip05;
pub mod nip11;
pub mod pipeline;
pub mod subscriptions;
