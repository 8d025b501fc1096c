//! grasp-relay: a GRASP server daemon.
//!
//! One public listener serves the Nostr relay (WebSocket at `/`), the NIP-11 document, small web
//! pages, and git smart HTTP (by running the `grasp-cgi` wrapper around stock `git http-backend`).
//! A second listener, on loopback only and token-protected, answers the git hooks.
//!
//! Layout (one file per concept):
//! - `config`: command line / `GRASP_*` environment configuration.
//! - `datadir`: data directory layout and its exclusive lock.
//! - `server`: the public HTTP listener, routing, daemon lifecycle.
//! - `shutdown`: graceful shutdown signal shared by all tasks.
//! - `http`: response body type and CORS for everything on the public port.
//! - `nip11`: the relay information document.
//! - `relay`: store + policy + live broadcast, shared by all connections.
//! - `connection`: one NIP-01 WebSocket connection.
//! - `subscriptions`: the subscriptions of one connection.
//! - `store`: the nostr-lmdb event store.
//! - `policy`: event acceptance policy (what is stored, held in purgatory, or refused).

pub mod config;
pub mod connection;
pub mod datadir;
pub mod http;
pub mod nip11;
pub mod policy;
pub mod relay;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod subscriptions;
