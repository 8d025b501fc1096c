//! The Nostr side of the relay: NIP-01 connections and subscriptions, the event store, live
//! broadcast, the NIP-11 document, NIP-77 negentropy reconciliation, and the pipelining of one
//! connection's `EVENT`s (`pipeline`: verified and admitted side by side, answered in order), the
//! group commit of the store's writes (`group_commit`), and signature checks with the authors'
//! parsed keys remembered (`signature`), and a REQ's stored events streamed within a byte budget
//! (`answer`).

pub mod answer;
pub mod auth;
pub mod connection;
pub mod group_commit;
pub mod lookups;
pub mod negentropy;
pub mod nip11;
pub mod pipeline;
pub mod relay;
pub mod signature;
pub mod store;
pub mod subscriptions;
