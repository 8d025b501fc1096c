//! grasp-relay: a GRASP server daemon.
//!
//! One public listener serves the Nostr relay (WebSocket at `/`), the NIP-11 document, small web
//! pages, and git smart HTTP (by running the `grasp-cgi` wrapper around stock `git http-backend`).
//! A second listener, on loopback only and token-protected, answers the git hooks.
//!
//! Layout (one file per concept):
//! - `http`: response body type and CORS for everything on the public port.
//! - `sync`: background git-data sync (queue, per-domain throttle, URL safety, fetch by oid).

pub mod http;
pub mod sync;
