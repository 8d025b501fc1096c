//! Which relay URLs this server connects to, and where exactly.
//!
//! Relay URLs come from signed announcements anyone can publish, so they get the same address
//! safety as git clone URLs ([`crate::sync::urls`]): only `ws`/`wss`, no credentials, never this
//! server, and every resolved address outside the denied ranges (private and loopback unless
//! `--sync-allow-private`). The connection then goes to exactly the addresses that were checked.

use std::fmt;
use std::net::SocketAddr;

use thiserror::Error;

use crate::sync::urls::{UrlPolicy, UrlRejected};

/// Longest relay URL considered.
const MAX_URL_LEN: usize = 512;

/// A normalised `ws://` or `wss://` relay URL: lower-case scheme and host, no trailing `/` on an
/// empty path, no default port. Two spellings of one relay compare equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct RelayUrl(String);

/// Why a relay URL is not connected to.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RelayUrlRejected {
    #[error("relay URL {0:?} is not ws:// or wss://")]
    Scheme(String),
    #[error("relay URL {0:?} is malformed")]
    Malformed(String),
    #[error("{0}")]
    Unsafe(UrlRejected),
}

impl RelayUrl {
    /// Parses and normalises `url`.
    pub fn parse(url: &str) -> Result<RelayUrl, RelayUrlRejected> {
        let url = url.trim();
        if url.len() > MAX_URL_LEN || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(RelayUrlRejected::Malformed(url.to_string()));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(RelayUrlRejected::Malformed(url.to_string()));
        };
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "ws" => ":80",
            "wss" => ":443",
            _ => return Err(RelayUrlRejected::Scheme(url.to_string())),
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(RelayUrlRejected::Malformed(url.to_string()));
        }
        let mut authority = authority.to_ascii_lowercase();
        if let Some(stripped) = authority.strip_suffix(default_port) {
            authority = stripped.to_string();
        }
        let path = if path == "/" { "" } else { path };
        let parsed = RelayUrl(format!("{scheme}://{authority}{path}"));
        // The host syntax check of the clone URL rules.
        crate::sync::urls::CloneUrl::parse(&parsed.as_http()).map_err(|_| RelayUrlRejected::Malformed(url.to_string()))?;
        Ok(parsed)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_tls(&self) -> bool {
        self.0.starts_with("wss://")
    }

    /// The same address as `http(s)://` (the URL policy and NIP-11 speak HTTP).
    pub fn as_http(&self) -> String {
        match self.0.strip_prefix("wss://") {
            Some(rest) => format!("https://{rest}"),
            None => format!("http://{}", self.0.strip_prefix("ws://").unwrap_or(&self.0)),
        }
    }

    /// `host[:port]` as written in the URL.
    pub fn authority(&self) -> &str {
        let rest = self.0.split_once("://").map_or(self.0.as_str(), |(_, r)| r);
        rest.split(['/', '?', '#']).next().unwrap_or_default()
    }

    /// Checks the URL against `policy` without the network (scheme, credentials, this server,
    /// literal addresses).
    pub fn check(&self, policy: &UrlPolicy) -> Result<(), RelayUrlRejected> {
        policy.check(&self.as_http()).map(|_| ()).map_err(RelayUrlRejected::Unsafe)
    }

    /// Resolves the host and checks every address; the addresses to connect to.
    pub async fn resolve(&self, policy: &UrlPolicy) -> Result<Vec<SocketAddr>, RelayUrlRejected> {
        policy.resolve(&self.as_http()).await.map(|safe| safe.addresses).map_err(RelayUrlRejected::Unsafe)
    }
}

impl AsRef<str> for RelayUrl {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RelayUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> String {
        RelayUrl::parse(s).unwrap().to_string()
    }

    #[test]
    fn normalises_spellings_of_one_relay() {
        assert_eq!(url("wss://Relay.Example.com/"), "wss://relay.example.com");
        assert_eq!(url("WSS://relay.example.com:443"), "wss://relay.example.com");
        assert_eq!(url("ws://127.0.0.1:8080/"), "ws://127.0.0.1:8080");
        assert_eq!(url("ws://h:80/nostr"), "ws://h/nostr");
        assert_eq!(url("ws://[::1]:7000"), "ws://[::1]:7000");
    }

    #[test]
    fn refuses_other_schemes_and_junk() {
        for bad in ["http://x", "https://x", "x", "ws://", "ws://u:p@h", "ws://h h", "ws://h:99999", "ws://h:x"] {
            assert!(RelayUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn policy_denies_private_addresses_and_this_server() {
        let policy = UrlPolicy::new(false, &[], &["git.example.com".into()]);
        assert!(RelayUrl::parse("ws://127.0.0.1:7000").unwrap().check(&policy).is_err());
        assert!(RelayUrl::parse("wss://10.1.2.3").unwrap().check(&policy).is_err());
        assert!(RelayUrl::parse("wss://git.example.com").unwrap().check(&policy).is_err());
        assert!(RelayUrl::parse("wss://relay.example.net").unwrap().check(&policy).is_ok());
        let open = UrlPolicy::new(true, &[], &["127.0.0.1:8080".into()]);
        assert!(RelayUrl::parse("ws://127.0.0.1:7000").unwrap().check(&open).is_ok());
        assert!(RelayUrl::parse("ws://127.0.0.1:8080/").unwrap().check(&open).is_err());
    }
}
