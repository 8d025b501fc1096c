//! grasp-relay: a GRASP server daemon.
//!
//! One public listener serves the Nostr relay (WebSocket at `/`), the NIP-11 document, small web
//! pages, and git smart HTTP (by running the `grasp-cgi` wrapper around stock `git http-backend`).
//! A second listener, on loopback only and token-protected, answers the git hooks.
//!
//! Layout (one file per concept):
//! - `http`: response body type and CORS for everything on the public port.
//! - `git_http`: git smart HTTP by running `grasp-cgi` as a CGI child.
//! - `repos`: bare repositories on disk (create, delete, refs, objects).

pub mod git_http;
pub mod http;
pub mod repos;
