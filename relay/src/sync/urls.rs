//! Which clone URLs background sync may fetch from.
//!
//! Clone URLs come from signed events anyone can publish, so they are hostile input: a URL could
//! point the relay at its own loopback services or a private network (SSRF). A URL is used only if
//! - its scheme is `http` or `https` and it carries no credentials,
//! - it is not one of this server's own URLs (`own_hosts`),
//! - every address its host resolves to lies outside the denied ranges.
//!
//! The resolved addresses are handed to git (`http.curloptResolve`) so git connects to exactly the
//! addresses that were checked, not to whatever a second DNS lookup returns.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use grasp_state::names::host::{url_authority, HostPort};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use thiserror::Error;

pub use grasp_state::trust::cidr::{Cidr, CidrParseError};

/// Ranges denied unless `allow_private` is set: "this network", private, CGNAT, loopback,
/// link-local, IETF protocol assignments, documentation, benchmarking, the 6to4 relay anycast,
/// multicast and reserved IPv4; unspecified, loopback, discard-only, local-use NAT64,
/// unique-local, link-local and multicast IPv6. IPv6 addresses that carry an IPv4 address
/// (NAT64, 6to4, Teredo, IPv4-mapped and -compatible) are also checked as that IPv4 address
/// ([`embedded_ipv4`]).
pub fn default_denied_ranges() -> Vec<Cidr> {
    const V4: [(Ipv4Addr, u8); 15] = [
        (Ipv4Addr::new(0, 0, 0, 0), 8),
        (Ipv4Addr::new(10, 0, 0, 0), 8),
        (Ipv4Addr::new(100, 64, 0, 0), 10),
        (Ipv4Addr::new(127, 0, 0, 0), 8),
        (Ipv4Addr::new(169, 254, 0, 0), 16),
        (Ipv4Addr::new(172, 16, 0, 0), 12),
        (Ipv4Addr::new(192, 0, 0, 0), 24),
        (Ipv4Addr::new(192, 0, 2, 0), 24),
        (Ipv4Addr::new(192, 88, 99, 0), 24),
        (Ipv4Addr::new(192, 168, 0, 0), 16),
        (Ipv4Addr::new(198, 18, 0, 0), 15),
        (Ipv4Addr::new(198, 51, 100, 0), 24),
        (Ipv4Addr::new(203, 0, 113, 0), 24),
        (Ipv4Addr::new(224, 0, 0, 0), 4),
        (Ipv4Addr::new(240, 0, 0, 0), 4),
    ];
    const V6: [(Ipv6Addr, u8); 7] = [
        (Ipv6Addr::UNSPECIFIED, 128),
        (Ipv6Addr::LOCALHOST, 128),
        (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48),
        (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
    ];
    let v4 = V4.iter().map(|(ip, prefix)| Ipv4Net::new(*ip, *prefix).map(IpNet::V4));
    let v6 = V6.iter().map(|(ip, prefix)| Ipv6Net::new(*ip, *prefix).map(IpNet::V6));
    v4.chain(v6)
        .map(|net| Cidr::from_net(net.expect("valid prefix lengths")))
        .collect()
}

/// The IPv4 addresses an IPv6 address stands for on the way out: IPv4-mapped (`::ffff:0:0/96`)
/// and IPv4-compatible (`::/96`) addresses, well-known-prefix NAT64 (`64:ff9b::/96`, the last 32
/// bits), 6to4 (`2002::/16`, bits 16 to 48) and Teredo (`2001::/32`: the server, bits 32 to 64,
/// and the client, the last 32 bits inverted). A host resolving to one of these reaches that
/// IPv4 address through a translator or a tunnel, so the deny-list applies to it. The local-use
/// NAT64 prefix `64:ff9b:1::/48` embeds at an operator-chosen place and is denied whole.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let bits = u128::from(ip);
    let v4 = |n: u128| Ipv4Addr::from((n & 0xffff_ffff) as u32);
    let low = v4(bits);
    let seg = ip.segments();
    match seg {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => vec![low],
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => vec![low],
        [0x2002, ..] => vec![v4(bits >> 80)],
        [0x2001, 0, ..] => vec![v4(bits >> 64), v4(!bits)],
        _ => Vec::new(),
    }
}

/// Why a clone URL is not used for sync.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum UrlRejected {
    #[error("clone URL {0:?} is not a valid http(s) URL")]
    Malformed(String),
    #[error("clone URL {0:?} is not http or https; only http(s) clone URLs are synced")]
    Scheme(String),
    #[error("clone URL {0:?} carries credentials; publish a URL without user:password@")]
    Credentials(String),
    #[error("clone URL {0:?} points at this server")]
    OwnServer(String),
    #[error("clone URL {0:?} is not on a peer the operator listed (--private-sync-peer); a private service syncs only with those")]
    NotAPeer(String),
    #[error("host {host} resolves to {address}, which is in the denied range {range}")]
    Denied {
        host: String,
        address: IpAddr,
        range: Cidr,
    },
    #[error("could not resolve host {host}: {reason}")]
    Resolve { host: String, reason: String },
}

/// A syntactically acceptable http(s) clone URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneUrl {
    /// The URL as given (passed to git unchanged).
    pub url: String,
    pub https: bool,
    /// Lower-case host name or IP literal, without IPv6 brackets.
    pub host: String,
    /// The explicit port or the scheme's default.
    pub port: u16,
}

impl CloneUrl {
    /// Throttling key: the host.
    pub fn domain(&self) -> &str {
        &self.host
    }

    /// The path, as written, without query or fragment (`/<npub>/<identifier>.git` for a
    /// clone URL).
    pub fn path(&self) -> &str {
        let rest = self.url.split_once("://").map_or("", |(_, rest)| rest);
        let path = rest.find('/').map_or("", |i| &rest[i..]);
        path.split(['?', '#']).next().unwrap_or_default()
    }

    /// `host:port` as curl's `--resolve` expects it (IPv6 in brackets).
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn parse(url: &str) -> Result<CloneUrl, UrlRejected> {
        let malformed = || UrlRejected::Malformed(url.to_string());
        // What git is handed must be what was checked: no blanks, no `\` (which URL parsers
        // and curl may read differently), an ASCII authority.
        if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
            return Err(malformed());
        }
        let (scheme, rest) = url.split_once("://").ok_or_else(malformed)?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(UrlRejected::Scheme(url.to_string())),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(UrlRejected::Credentials(url.to_string()));
        }
        if authority.is_empty() || !authority.is_ascii() {
            return Err(malformed());
        }
        let parsed = url_authority(url).ok_or_else(malformed)?;
        let plain_host = parsed.host.parse::<IpAddr>().is_ok()
            || parsed.host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
        if !plain_host {
            return Err(malformed());
        }
        Ok(CloneUrl {
            url: url.to_string(),
            https,
            host: parsed.host,
            port: parsed.port,
        })
    }
}

/// A clone URL that passed every check, with the addresses git must connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeUrl {
    pub url: CloneUrl,
    pub addresses: Vec<SocketAddr>,
}

impl SafeUrl {
    /// Values for git's `http.curloptResolve` pinning the host to the checked addresses
    /// (empty for IP literals, which need no lookup).
    pub fn curl_resolve(&self) -> Option<String> {
        if self.url.host.parse::<IpAddr>().is_ok() || self.addresses.is_empty() {
            return None;
        }
        let addresses: Vec<String> = self
            .addresses
            .iter()
            .map(|address| match address.ip() {
                IpAddr::V6(v6) => format!("[{v6}]"),
                IpAddr::V4(v4) => v4.to_string(),
            })
            .collect();
        Some(format!("{}:{}", self.url.authority(), addresses.join(",")))
    }
}

/// The URL policy: denied ranges and this server's own addresses.
#[derive(Debug, Clone)]
pub struct UrlPolicy {
    denied: Vec<Cidr>,
    /// This server's own `host` or `host:port` entries.
    own_hosts: Vec<(String, Option<u16>)>,
    /// A private service: the only `host` / `host:port` entries fetched from (none: anything).
    only_peers: Option<Vec<(String, Option<u16>)>>,
    /// `host:port` entries the operator named (replicas, `--replica`): fetched from whatever
    /// their addresses, listed or not among `only_peers`.
    trusted: Vec<(String, Option<u16>)>,
    resolve_timeout: Duration,
}

impl UrlPolicy {
    /// `allow_private` drops the default deny-list (tests, private deployments); `extra_denied`
    /// is always applied. `own_hosts` are `host` (any port) or `host:port` entries; unparsable
    /// entries are ignored with a warning.
    pub fn new(allow_private: bool, extra_denied: &[Cidr], own_hosts: &[String]) -> UrlPolicy {
        let mut denied = if allow_private {
            Vec::new()
        } else {
            default_denied_ranges()
        };
        denied.extend_from_slice(extra_denied);
        let own_hosts = own_hosts
            .iter()
            .filter_map(|entry| {
                let parsed = HostPort::parse(entry.trim()).map(|hp| (hp.host, hp.port));
                if parsed.is_none() {
                    tracing::warn!(
                        entry,
                        "ignoring unparsable own host; write host or host:port"
                    );
                }
                parsed
            })
            .collect();
        UrlPolicy {
            denied,
            own_hosts,
            only_peers: None,
            trusted: Vec::new(),
            resolve_timeout: Duration::from_secs(5),
        }
    }

    /// Trusts these `host:port` entries (the operator's replicas): no deny-list, no peer list.
    pub fn trusting(mut self, hosts: &[String]) -> UrlPolicy {
        self.trusted = hosts.iter().filter_map(|p| HostPort::parse(p.trim()).map(|hp| (hp.host, hp.port))).collect();
        self
    }

    /// Is `url` on one of the operator's replicas ([`UrlPolicy::trusting`])?
    pub fn is_trusted(&self, url: &CloneUrl) -> bool {
        self.trusted.iter().any(|(host, port)| *host == url.host && port.is_none_or(|port| port == url.port))
    }

    /// Fetch only from these `host` / `host:port` peers (a private service; an empty list
    /// fetches from nobody).
    pub fn only_peers(mut self, peers: &[String]) -> UrlPolicy {
        self.only_peers = Some(peers.iter().filter_map(|p| HostPort::parse(p.trim()).map(|hp| (hp.host, hp.port))).collect());
        self
    }

    /// Checks that need no network: syntax, scheme, credentials, own server, literal addresses.
    pub fn check(&self, url: &str) -> Result<CloneUrl, UrlRejected> {
        let url = CloneUrl::parse(url)?;
        let own = self
            .own_hosts
            .iter()
            .any(|(host, port)| *host == url.host && port.is_none_or(|port| port == url.port));
        if own {
            return Err(UrlRejected::OwnServer(url.url));
        }
        if self.is_trusted(&url) {
            return Ok(url);
        }
        if let Some(peers) = &self.only_peers {
            let listed = peers.iter().any(|(host, port)| *host == url.host && port.is_none_or(|port| port == url.port));
            if !listed {
                return Err(UrlRejected::NotAPeer(url.url));
            }
        }
        if let Ok(ip) = url.host.parse::<IpAddr>() {
            self.check_address(&url.host, ip)?;
        }
        Ok(url)
    }

    /// The first denied range containing `ip`, or the IPv4 address it carries
    /// ([`embedded_ipv4`]), as an error.
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), UrlRejected> {
        let carried = match ip {
            IpAddr::V6(v6) => embedded_ipv4(v6),
            IpAddr::V4(_) => Vec::new(),
        };
        let denied = |range: &&Cidr| range.contains(ip) || carried.iter().any(|v4| range.contains(IpAddr::V4(*v4)));
        match self.denied.iter().find(denied) {
            Some(range) => Err(UrlRejected::Denied {
                host: host.to_string(),
                address: ip,
                range: *range,
            }),
            None => Ok(()),
        }
    }

    /// Full check: [`UrlPolicy::check`], then resolve the host and deny if ANY address is denied.
    pub async fn resolve(&self, url: &str) -> Result<SafeUrl, UrlRejected> {
        let url = self.check(url)?;
        let lookup = tokio::net::lookup_host((url.host.as_str(), url.port));
        let resolve_error = |reason: String| UrlRejected::Resolve {
            host: url.host.clone(),
            reason,
        };
        let addresses: Vec<SocketAddr> =
            match tokio::time::timeout(self.resolve_timeout, lookup).await {
                Err(_) => return Err(resolve_error("timed out".to_string())),
                Ok(Err(error)) => return Err(resolve_error(error.to_string())),
                Ok(Ok(addresses)) => addresses.collect(),
            };
        if addresses.is_empty() {
            return Err(resolve_error("no addresses".to_string()));
        }
        let trusted = self.is_trusted(&url);
        for address in addresses.iter().filter(|_| !trusted) {
            self.check_address(&url.host, address.ip())?;
        }
        Ok(SafeUrl { url, addresses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_replicas_are_trusted_on_private_addresses() {
        let policy = UrlPolicy::new(false, &[], &[]).only_peers(&[]).trusting(&["10.0.0.2:8080".into()]);
        assert!(policy.check("http://10.0.0.2:8080/npub1x/r.git").is_ok());
        assert!(policy.check("http://10.0.0.2:8081/npub1x/r.git").is_err(), "another port is no replica");
        assert!(policy.check("http://10.0.0.3:8080/npub1x/r.git").is_err());
    }

    #[test]
    fn a_private_service_fetches_only_from_listed_peers() {
        let policy = UrlPolicy::new(true, &[], &[]).only_peers(&["peer.example.com".into(), "127.0.0.1:9000".into()]);
        assert!(policy.check("https://peer.example.com/npub1x/r.git").is_ok());
        assert!(policy.check("http://127.0.0.1:9000/npub1x/r.git").is_ok());
        assert!(matches!(policy.check("http://127.0.0.1:9001/npub1x/r.git"), Err(UrlRejected::NotAPeer(_))));
        assert!(matches!(policy.check("https://other.example.com/r.git"), Err(UrlRejected::NotAPeer(_))));
        let nobody = UrlPolicy::new(true, &[], &[]).only_peers(&[]);
        assert!(matches!(nobody.check("https://peer.example.com/r.git"), Err(UrlRejected::NotAPeer(_))));
    }

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn cidr_parsing() {
        assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("::1").to_string(), "::1/128");
        assert_eq!(cidr("1.2.3.4").to_string(), "1.2.3.4/32");
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x/8",
            "1.2.3.4/+8",
            "1.2.3.4/8/9",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn cidr_membership() {
        let private = cidr("172.16.0.0/12");
        assert!(private.contains(ip("172.16.0.1")));
        assert!(private.contains(ip("172.31.255.255")));
        assert!(!private.contains(ip("172.32.0.0")));
        assert!(!private.contains(ip("172.15.255.255")));
        assert!(!private.contains(ip("::1")), "families never mix");
        assert!(cidr("0.0.0.0/0").contains(ip("8.8.8.8")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        let host = cidr("192.0.2.7/32");
        assert!(host.contains(ip("192.0.2.7")));
        assert!(!host.contains(ip("192.0.2.8")));
        let ula = cidr("fc00::/7");
        assert!(ula.contains(ip("fd12:3456::1")));
        assert!(!ula.contains(ip("fe00::1")));
        // Host bits in the network are ignored.
        assert!(cidr("10.1.2.3/8").contains(ip("10.200.0.1")));
    }

    #[test]
    fn ipv4_mapped_ipv6_counts_as_ipv4() {
        assert!(cidr("127.0.0.0/8").contains(ip("::ffff:127.0.0.1")));
        assert!(!cidr("127.0.0.0/8").contains(ip("::ffff:8.8.8.8")));
    }

    #[test]
    fn default_deny_list() {
        let policy = UrlPolicy::new(false, &[], &[]);
        let denied = [
            "127.0.0.1",
            "127.255.0.1",
            "10.1.2.3",
            "172.20.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.1.1.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
        ];
        for address in denied {
            assert!(
                policy.check_address("h", ip(address)).is_err(),
                "{address} should be denied"
            );
        }
        let allowed = [
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "2001:db8::1",
            "fec0::1",
        ];
        for address in allowed {
            assert!(
                policy.check_address("h", ip(address)).is_ok(),
                "{address} should be allowed"
            );
        }
        let open = UrlPolicy::new(true, &[], &[]);
        assert!(open.check_address("h", ip("127.0.0.1")).is_ok());
        let extra = UrlPolicy::new(true, &[cidr("203.0.113.0/24")], &[]);
        assert!(extra.check_address("h", ip("203.0.113.9")).is_err());
        assert!(extra.check_address("h", ip("127.0.0.1")).is_ok());
    }

    #[test]
    fn ipv6_carrying_a_denied_ipv4_is_denied() {
        let policy = UrlPolicy::new(false, &[], &[]);
        let denied = [
            "64:ff9b::a9fe:a9fe",   // NAT64 -> 169.254.169.254
            "64:ff9b::a00:1",       // NAT64 -> 10.0.0.1
            "64:ff9b::7f00:1",      // NAT64 -> 127.0.0.1
            "64:ff9b:1::808:808",   // local-use NAT64, denied whole
            "2002:a00:1::1",        // 6to4 -> 10.0.0.1
            "2002:7f00:1:1::1",     // 6to4 -> 127.0.0.1
            "2001:0:a00:1::1",      // Teredo server 10.0.0.1
            "2001:0:808:808::3f57:fefe", // Teredo client !0x3f57fefe = 192.168.1.1
            "::10.0.0.1",           // IPv4-compatible
            "100::1",               // discard-only
        ];
        for address in denied {
            assert!(policy.check_address("h", ip(address)).is_err(), "{address} should be denied");
        }
        let allowed = [
            "64:ff9b::808:808",          // NAT64 -> 8.8.8.8
            "2002:808:808::1",           // 6to4 -> 8.8.8.8
            "2001:0:808:808::f7f7:f7f7", // Teredo 8.8.8.8 / 8.8.8.8
            "2001:4860::8888",           // not Teredo (2001:4860::/32)
        ];
        for address in allowed {
            assert!(policy.check_address("h", ip(address)).is_ok(), "{address} should be allowed");
        }
        assert!(matches!(policy.check("http://[64:ff9b::a9fe:a9fe]/x"), Err(UrlRejected::Denied { .. })));
        let extra = UrlPolicy::new(true, &[cidr("8.8.8.0/24")], &[]);
        assert!(extra.check_address("h", ip("64:ff9b::808:808")).is_err(), "extra ranges apply to carried addresses");
        assert!(extra.check_address("h", ip("64:ff9b::a00:1")).is_ok(), "--sync-allow-private lets private through");
    }

    #[test]
    fn reserved_ipv4_ranges_are_denied() {
        let policy = UrlPolicy::new(false, &[], &[]);
        for address in ["192.0.0.8", "192.0.2.1", "192.88.99.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9"] {
            assert!(policy.check_address("h", ip(address)).is_err(), "{address} should be denied");
        }
        for address in ["192.0.1.1", "192.0.3.1", "198.17.255.255", "198.20.0.0", "203.0.114.1"] {
            assert!(policy.check_address("h", ip(address)).is_ok(), "{address} should be allowed");
        }
    }

    proptest::proptest! {
        /// Whatever IPv4 address a NAT64, 6to4 or Teredo address carries, the verdict is that
        /// address's own.
        #[test]
        fn translated_addresses_get_their_ipv4_verdict(v4 in proptest::prelude::any::<u32>(), other in proptest::prelude::any::<u64>()) {
            let policy = UrlPolicy::new(false, &[], &[]);
            let address = Ipv4Addr::from(v4);
            let v4_denied = policy.check_address("h", IpAddr::V4(address)).is_err();
            let nat64 = Ipv6Addr::from((0x64_u128 << 112) | (0xff9b_u128 << 96) | u128::from(v4));
            let six_to_four = Ipv6Addr::from((0x2002_u128 << 112) | (u128::from(v4) << 80) | u128::from(other));
            // Teredo with a public server, the client carrying `v4`.
            let teredo = Ipv6Addr::from((0x2001_u128 << 112) | (0x0808_0808_u128 << 64) | (u128::from(other >> 32) << 32) | u128::from(!v4));
            for v6 in [nat64, six_to_four, teredo] {
                proptest::prop_assert_eq!(policy.check_address("h", IpAddr::V6(v6)).is_err(), v4_denied, "{}", v6);
                proptest::prop_assert!(embedded_ipv4(v6).contains(&address));
            }
        }
    }

    #[test]
    fn url_parsing() {
        let url = CloneUrl::parse("https://Git.Example.com/npub1x/repo.git").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.https),
            ("git.example.com", 443, true)
        );
        let url = CloneUrl::parse("http://127.0.0.1:8080/a.git").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.https),
            ("127.0.0.1", 8080, false)
        );
        let url = CloneUrl::parse("http://[::1]:81/a").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("::1", 81));
        assert_eq!(url.authority(), "[::1]:81");
        let url = CloneUrl::parse("HTTPS://h?x#y").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("h", 443));
        for bad in [
            "",
            "https://",
            "https:///path",
            "https://h:/x",
            "https://h:0/x",
            "https://h:65536/",
            "https://h:8a/",
            "https://[::1/",
            "https://[zz]/",
            "https://[::1]x/",
            "https://h /x",
            "https://h/\nx",
            "https://hö.example/",
            "//h/x",
        ] {
            assert!(
                matches!(CloneUrl::parse(bad), Err(UrlRejected::Malformed(_))),
                "{bad:?} should be malformed, got {:?}",
                CloneUrl::parse(bad)
            );
        }
        for scheme in ["ssh://h/x", "git://h/x", "file:///etc", "ext::sh -c x"] {
            let result = CloneUrl::parse(scheme);
            assert!(
                matches!(
                    result,
                    Err(UrlRejected::Scheme(_)) | Err(UrlRejected::Malformed(_))
                ),
                "{scheme:?}: {result:?}"
            );
        }
        assert!(matches!(
            CloneUrl::parse("git://h/x"),
            Err(UrlRejected::Scheme(_))
        ));
        assert!(matches!(
            CloneUrl::parse("https://user:pw@h/x"),
            Err(UrlRejected::Credentials(_))
        ));
    }

    #[test]
    fn own_server_is_excluded() {
        let policy = UrlPolicy::new(
            true,
            &[],
            &[
                "Relay.Example.com".to_string(),
                "127.0.0.1:7000".to_string(),
                "[::1]:7000".to_string(),
                "bad host".to_string(),
            ],
        );
        let own = |url: &str| matches!(policy.check(url), Err(UrlRejected::OwnServer(_)));
        assert!(own("https://relay.example.com/npub/x.git"));
        assert!(
            own("http://relay.example.com:9999/npub/x.git"),
            "host entry matches any port"
        );
        assert!(own("http://127.0.0.1:7000/x.git"));
        assert!(!own("http://127.0.0.1:7001/x.git"));
        assert!(own("http://[::1]:7000/x.git"));
        assert!(!own("https://other.example.com/x.git"));
        let default_port = UrlPolicy::new(true, &[], &["h.example:443".to_string()]);
        assert!(matches!(
            default_port.check("https://h.example/x"),
            Err(UrlRejected::OwnServer(_))
        ));
        assert!(default_port.check("http://h.example/x").is_ok());
    }

    #[test]
    fn literal_addresses_are_checked_without_dns() {
        let policy = UrlPolicy::new(false, &[], &[]);
        assert!(matches!(
            policy.check("http://127.0.0.1:80/x"),
            Err(UrlRejected::Denied { .. })
        ));
        assert!(matches!(
            policy.check("http://[::ffff:192.168.0.1]/x"),
            Err(UrlRejected::Denied { .. })
        ));
        assert!(policy.check("https://8.8.8.8/x").is_ok());
    }

    #[test]
    fn numeric_host_forms_and_backslashes_cannot_hide_an_address() {
        let policy = UrlPolicy::new(false, &[], &[]);
        // Shorthand and hex IPv4 forms are the addresses they spell, checked without DNS.
        for url in ["http://0x7f.1/x", "http://2130706433/x", "http://127.1:8080/x"] {
            assert!(matches!(policy.check(url), Err(UrlRejected::Denied { .. })), "{url}");
        }
        for url in ["https://evil.net\\@example.com/x", "https://h\\x/"] {
            assert!(matches!(CloneUrl::parse(url), Err(UrlRejected::Malformed(_))), "{url}");
        }
        assert_eq!(CloneUrl::parse("http://h:0080/x").unwrap().port, 80);
    }

    #[tokio::test]
    async fn resolution_denies_if_any_address_is_denied() {
        let strict = UrlPolicy::new(false, &[], &[]);
        let result = strict.resolve("http://localhost:1/x.git").await;
        assert!(
            matches!(result, Err(UrlRejected::Denied { .. })),
            "{result:?}"
        );
        let open = UrlPolicy::new(true, &[], &[]);
        let safe = open.resolve("http://localhost:1/x.git").await.unwrap();
        assert!(!safe.addresses.is_empty());
        assert!(safe.curl_resolve().unwrap().starts_with("localhost:1:"));
        let literal = open.resolve("http://127.0.0.1:1/x.git").await.unwrap();
        assert_eq!(literal.curl_resolve(), None);
        let unresolvable = open.resolve("http://does-not-exist.invalid/x.git").await;
        assert!(
            matches!(unresolvable, Err(UrlRejected::Resolve { .. })),
            "{unresolvable:?}"
        );
    }

    #[test]
    fn curl_resolve_brackets_ipv6() {
        let safe = SafeUrl {
            url: CloneUrl::parse("https://h.example/x").unwrap(),
            addresses: vec![
                "[2001:db8::1]:443".parse().unwrap(),
                "192.0.2.1:443".parse().unwrap(),
            ],
        };
        assert_eq!(
            safe.curl_resolve().unwrap(),
            "h.example:443:[2001:db8::1],192.0.2.1"
        );
    }
}
