//! What things are called, the words every other room uses: repository identifiers and the
//! paths they map to, ref names and object ids, hosts and ports, and the key a client address
//! is counted under. Pure; nothing here depends on another room of the crate.
//!
//! - [`identifier`]: repository identifiers (decision 2) and the repository layout under the
//!   git root ([`identifier::RepoLayout`], [`identifier::RepoSpace`]).
//! - [`refs`]: ref names, object ids, [`refs::RefUpdate`] (one line of `pre-receive` input) and
//!   [`refs::RefMap`] (a repository's refs).
//! - [`host`]: the one `host[:port]` parser (configuration and URLs, default ports per scheme).
//! - [`client_key`]: the key a client address is counted under by every per-address limit
//!   (IPv6 by its prefix, `--ipv6-prefix-len`).

pub mod client_key;
pub mod host;
pub mod identifier;
pub mod refs;
