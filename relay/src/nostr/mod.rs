//! The Nostr side of the relay: NIP-01 connections and subscriptions, the event store, live
//! broadcast, the NIP-11 document and NIP-77 negentropy reconciliation.

pub mod auth;
pub mod connection;
pub mod negentropy;
pub mod nip11;
pub mod relay;
pub mod store;
pub mod subscriptions;
