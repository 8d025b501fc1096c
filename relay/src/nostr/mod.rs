//! The Nostr side of the relay: NIP-01 connections and subscriptions, the event store, live
//! broadcast and the NIP-11 document.

pub mod connection;
pub mod nip11;
pub mod relay;
pub mod store;
pub mod subscriptions;
