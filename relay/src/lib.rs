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
//! - `relay`: event store + live broadcast, shared by all connections.
//! - `connection`: one NIP-01 WebSocket connection.
//! - `subscriptions`: the subscriptions of one connection.
//! - `store`: the nostr-lmdb event store.
//! - `policy`: the verdict type of the acceptance policy.
//! - `grasp`: the GRASP brain ([`grasp::Grasp`]): store + purgatory + repositories, lookups.
//! - `acceptance`: which events are accepted, held in the purgatory, or refused.
//! - `authorize`: push authorisation for the pre-receive hook.
//! - `release`: git data arrival: promotion, release, ref alignment, copies to other owners.
//! - `git`: the relay's own git subprocess operations.
//! - `hook_api`: the loopback, token-protected API the git hooks call.
//! - `lifecycle`: purgatory restore, expiry sweeps and checkpoints.
//! - `git_http`: git smart HTTP by running `grasp-cgi` as a CGI child.
//! - `repos`: bare repositories on disk (create, delete, refs, objects).
//! - `connection_limits`: total and per-address caps on the public listener's connections.
//! - `objects`: a conservative "surely missing" object check (loose objects, pack indexes).
//! - `sync`: background git-data sync (queue, per-domain throttle, URL safety, fetch by oid).

pub mod acceptance;
pub mod authorize;
pub mod config;
pub mod connection;
pub mod connection_limits;
pub mod datadir;
pub mod git;
pub mod git_http;
pub mod grasp;
pub mod hook_api;
pub mod lifecycle;
pub mod http;
pub mod nip11;
pub mod objects;
pub mod policy;
pub mod relay;
pub mod release;
pub mod repos;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod subscriptions;
pub mod sync;
