//! The other members of a replica set (docs/scaling.md): grasp-relays that serve one public
//! domain together, each a full copy, each following the others. The operator names them
//! (`--replica http://host:port`, a replica's own listener, which serves WebSocket and git on one
//! port); from that one URL come the relay followed for every event (`ws://host:port/`) and the
//! git base fetched from for every repository (`http://host:port/<npub>/<identifier>.git`).
//!
//! Being named by the operator is what makes a replica trusted where a stranger's relay is not:
//! it is followed for every repository and for announcements, whatever the announcements list,
//! and it may be on a private address without `--sync-allow-private`.

use url::Url;

use crate::names::host::HostPort;

/// One other member of the set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Replica {
    /// `http://host:port` (or `https://`), no path.
    pub base: String,
    /// `ws://host:port/` (or `wss://`).
    pub relay: String,
    /// `host:port`, as the URL policies take it.
    pub host_port: String,
}

/// Why a `--replica` value is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    #[error("--replica {0:?}: give a replica's own listener as http://host:port or https://host:port (no path, no user)")]
    Invalid(String),
}

impl Replica {
    /// Parses `http://host:port` or `https://host:port` (a trailing `/` allowed).
    pub fn parse(raw: &str) -> Result<Replica, ReplicaError> {
        let invalid = || ReplicaError::Invalid(raw.to_string());
        let url = Url::parse(raw.trim()).map_err(|_| invalid())?;
        let secure = match url.scheme() {
            "http" => false,
            "https" => true,
            _ => return Err(invalid()),
        };
        if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() || url.path() != "/" {
            return Err(invalid());
        }
        let host = url.host_str().ok_or_else(invalid)?;
        let port = url.port_or_known_default().ok_or_else(invalid)?;
        let host_port = format!("{host}:{port}");
        HostPort::parse(&host_port).ok_or_else(invalid)?;
        let (http, ws) = if secure { ("https", "wss") } else { ("http", "ws") };
        Ok(Replica { base: format!("{http}://{host_port}"), relay: format!("{ws}://{host_port}/"), host_port })
    }

    /// The replica's copy of `npub`'s repository `identifier` (git smart HTTP).
    pub fn repo_url(&self, npub: &str, identifier: &str) -> String {
        format!("{}/{npub}/{}.git", self.base, crate::names::identifier::percent_encode_segment(identifier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_url_gives_its_relay_and_its_git_base() {
        let r = Replica::parse("http://10.0.0.2:8080/").unwrap();
        assert_eq!((r.base.as_str(), r.relay.as_str(), r.host_port.as_str()), ("http://10.0.0.2:8080", "ws://10.0.0.2:8080/", "10.0.0.2:8080"));
        assert_eq!(r.repo_url("npub1x", "my repo"), "http://10.0.0.2:8080/npub1x/my%20repo.git");
        let s = Replica::parse("https://b.internal").unwrap();
        assert_eq!((s.relay.as_str(), s.host_port.as_str()), ("wss://b.internal:443/", "b.internal:443"));
        let v6 = Replica::parse("http://[fd00::2]:7000").unwrap();
        assert_eq!(v6.relay, "ws://[fd00::2]:7000/");
        for bad in ["ws://a:1", "http://a:1/x", "http://u:p@a:1", "http://a:1/?q", "a:1", ""] {
            assert!(Replica::parse(bad).is_err(), "{bad}");
        }
    }
}
