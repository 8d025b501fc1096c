//! `host[:port]`: the one parser for hosts and ports, in configuration (`--public-host`, the
//! sync's own hosts) and in URLs (clone and relay URLs of announcements, sync clone URLs).
//!
//! Hosts are parsed by the `url` crate (WHATWG URL rules, what browsers and git's curl agree
//! with): lower-cased, internationalised names in their ASCII form, IPv4 literals normalised,
//! IPv6 literals without brackets. A URL's port is its explicit port or its scheme's
//! [`default_port`]; a port must be 1..=65535 and an explicit `:` needs digits after it.

use std::net::IpAddr;

use url::{Host, Url};

/// The default port of `scheme` (lower case): 80 for http/ws, 443 for https/wss, 9418 for git,
/// 22 for ssh; `None` for schemes without one.
pub fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        "git" => Some(9418),
        "ssh" => Some(22),
        _ => None,
    }
}

/// A configured public host (`--public-host`) as bare `host[:port]`: surrounding blanks, a
/// leading `scheme://` and trailing `/` dropped (the scheme matters only for the pages' links).
pub fn public_authority(configured: &str) -> &str {
    let s = configured.trim();
    let s = s.find("://").map_or(s, |i| &s[i + 3..]);
    s.trim_end_matches('/')
}

/// A host and the port given with it, if any.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Lower-case host name (ASCII form) or IP literal, IPv6 without brackets.
    pub host: String,
    /// The port written after the host, if any.
    pub port: Option<u16>,
}

impl HostPort {
    /// Parses `host`, `host:port`, `[v6]` or `[v6]:port`. `None` for anything else (paths,
    /// userinfo, an empty or out-of-range port, an invalid host).
    pub fn parse(text: &str) -> Option<HostPort> {
        if text.is_empty()
            || text
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | '\\' | '?' | '#' | '@' | '%'))
        {
            return None;
        }
        // The host goes through the URL parser; the port is read from the text, because the
        // parser hides an explicit default port (`h:80` would look like `h`).
        let url = Url::parse(&format!("http://{text}/")).ok()?;
        let host = host_string(&url)?;
        let port = match explicit_port_text(text) {
            None => None,
            Some(digits) => Some(port_number(digits)?),
        };
        Some(HostPort { host, port })
    }

    /// The port to connect to for `scheme`: the given one, else the scheme's default.
    pub fn port_or_default(&self, scheme: &str) -> Option<u16> {
        self.port.or_else(|| default_port(scheme))
    }

    /// The host as an IP address, if it is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// An absolute URL's scheme, host and effective port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlAuthority {
    /// Lower-case scheme.
    pub scheme: String,
    /// Lower-case host name (ASCII form) or IP literal, IPv6 without brackets.
    pub host: String,
    /// The explicit port, else the scheme's default port.
    pub port: u16,
    /// Whether the URL carries a user name or password.
    pub has_credentials: bool,
}

/// Parses an absolute URL of a scheme with a default port (see [`default_port`]). `None` for
/// relative or malformed URLs, an empty or zero port, or a scheme without a default port.
pub fn url_authority(url: &str) -> Option<UrlAuthority> {
    // The URL parser would silently drop tabs and newlines and trim spaces; refuse them instead.
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let parsed = Url::parse(url).ok()?;
    let scheme = parsed.scheme().to_string();
    let default = default_port(&scheme)?;
    // `url` accepts `host:` (an empty port) as no port; a written `:` must carry digits.
    if raw_authority(url).is_some_and(|a| a.ends_with(':')) {
        return None;
    }
    let port = parsed.port().unwrap_or(default);
    if port == 0 {
        return None;
    }
    Some(UrlAuthority {
        host: host_string(&parsed)?,
        port,
        has_credentials: !parsed.username().is_empty() || parsed.password().is_some(),
        scheme,
    })
}

fn host_string(url: &Url) -> Option<String> {
    match url.host()? {
        Host::Domain(d) if !d.is_empty() => Some(d.to_ascii_lowercase()),
        Host::Domain(_) => None,
        Host::Ipv4(ip) => Some(ip.to_string()),
        Host::Ipv6(ip) => Some(ip.to_string()),
    }
}

/// The text after the port colon of `host:port` / `[v6]:port`, if a colon is there.
fn explicit_port_text(text: &str) -> Option<&str> {
    let after_host = match text.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, after)| after),
        None => text,
    };
    after_host.rsplit_once(':').map(|(_, port)| port)
}

fn port_number(digits: &str) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u16>().ok().filter(|p| *p != 0)
}

/// The authority part of an absolute URL as written (after `scheme://`, before the path,
/// query or fragment; `\` ends it too, as in special schemes), userinfo removed.
fn raw_authority(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    Some(authority.rfind('@').map_or(authority, |i| &authority[i + 1..]))
}


/// The public URLs of this server, from `--public-host`.
///
/// Scheme: an explicit `https://` / `wss://` (or `http://` / `ws://`) prefix of the public host
/// wins; otherwise a host without a port (or with `:443`) is taken to be behind TLS (`https`,
/// `wss`), and a host with another port to be plain (`http`, `ws`), like the relay's own listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrls {
    tls: bool,
    /// `host[:port]`, without scheme or trailing `/`.
    host: String,
}

impl PublicUrls {
    pub fn new(public_host: &str) -> Self {
        let scheme = public_host.trim().split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
        let host = public_authority(public_host).to_string();
        let tls = match scheme.as_deref() {
            Some("https" | "wss") => true,
            Some(_) => false,
            None => match host.rsplit_once(':') {
                // `[::1]` alone has colons but no port.
                Some((_, port)) if !host.ends_with(']') => port == "443",
                _ => true,
            },
        };
        PublicUrls { tls, host }
    }

    /// `host[:port]`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `https://host` (or `http://`).
    pub fn http_base(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.host)
    }

    /// `wss://host` (or `ws://`): the Nostr relay.
    pub fn relay_url(&self) -> String {
        format!("{}://{}", if self.tls { "wss" } else { "ws" }, self.host)
    }

    /// `https://host/<npub>/<identifier>.git`: plain git clone URL and the repository page.
    pub fn repo_http_url(&self, npub: &str, identifier: &str) -> String {
        format!("{}/{npub}/{}.git", self.http_base(), crate::names::identifier::percent_encode_segment(identifier))
    }

    /// `https://host/prs/<npub>/<identifier>.git`: a GRASP-06 contributor repository.
    pub fn contributor_http_url(&self, npub: &str, identifier: &str) -> String {
        format!("{}/prs/{npub}/{}.git", self.http_base(), crate::names::identifier::percent_encode_segment(identifier))
    }

    /// The relay in a `nostr://` URL, as ngit prints it: the bare `host[:port]` means `wss://`, so
    /// a plain-WebSocket relay is given whole, percent-encoded (`ws%3A%2F%2F127.0.0.1%3A8080`).
    pub fn nostr_relay_hint(&self) -> String {
        if self.tls {
            self.host.clone()
        } else {
            crate::names::identifier::percent_encode_segment(&self.relay_url())
        }
    }

    /// `nostr://<npub>/<relay hint>/<identifier>`: the clone URL of git-remote-nostr (ngit).
    pub fn repo_nostr_url(&self, npub: &str, identifier: &str) -> String {
        format!("nostr://{npub}/{}/{}", self.nostr_relay_hint(), crate::names::identifier::percent_encode_segment(identifier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_authority_drops_scheme_and_trailing_slashes() {
        for (configured, bare) in [
            ("git.example.com", "git.example.com"),
            ("https://git.example.com", "git.example.com"),
            (" https://git.example.com:8443/ ", "git.example.com:8443"),
            ("git.example.com//", "git.example.com"),
            ("http://[::1]:8080/", "[::1]:8080"),
            ("", ""),
        ] {
            assert_eq!(public_authority(configured), bare, "{configured:?}");
        }
    }
    use proptest::prelude::*;

    fn hp(host: &str, port: Option<u16>) -> Option<HostPort> {
        Some(HostPort { host: host.into(), port })
    }

    #[test]
    fn parses_host_and_port() {
        assert_eq!(HostPort::parse("Example.COM"), hp("example.com", None));
        assert_eq!(HostPort::parse("example.com:80"), hp("example.com", Some(80)));
        assert_eq!(HostPort::parse("example.com:0443"), hp("example.com", Some(443)));
        assert_eq!(HostPort::parse("127.0.0.1:7000"), hp("127.0.0.1", Some(7000)));
        assert_eq!(HostPort::parse("[::1]:7000"), hp("::1", Some(7000)));
        assert_eq!(HostPort::parse("[::1]"), hp("::1", None));
        assert_eq!(HostPort::parse("[::FFFF:127.0.0.1]").unwrap().host, "::ffff:127.0.0.1");
        for bad in [
            "", ":", "h:", "h:0", "h:65536", "h:8a", "h:-1", "[::1", "[zz]", "[::1]x", "::1",
            "a b", "h/x", "u@h", "h?x", "h#x", "h%2f", "a:b:c", "h\\x", "h:123456",
        ] {
            assert_eq!(HostPort::parse(bad), None, "{bad:?}");
        }
        assert_eq!(HostPort::parse("h").unwrap().port_or_default("https"), Some(443));
        assert_eq!(HostPort::parse("h:81").unwrap().port_or_default("https"), Some(81));
        assert_eq!(HostPort::parse("h").unwrap().port_or_default("ftp"), None);
        assert_eq!(HostPort::parse("[::1]").unwrap().ip(), Some("::1".parse().unwrap()));
    }

    #[test]
    fn url_ports_default_per_scheme() {
        let port = |u: &str| url_authority(u).map(|a| a.port);
        assert_eq!(port("http://h/x"), Some(80));
        assert_eq!(port("ws://h"), Some(80));
        assert_eq!(port("https://h/x"), Some(443));
        assert_eq!(port("WSS://h"), Some(443));
        assert_eq!(port("git://h/x"), Some(9418));
        assert_eq!(port("ssh://h/x"), Some(22));
        assert_eq!(port("https://h:80/x"), Some(80));
        assert_eq!(port("http://h:0080/"), Some(80));
        assert_eq!(port("https://h:8443"), Some(8443));
        for bad in ["https://exam\tple.com/", " https://h/", "https://h:/x", "https://h:0/", "https://h:65536/", "ftp2://h/", "//h/x", "h/x", "https://"] {
            assert_eq!(url_authority(bad), None, "{bad:?}");
        }
        let a = url_authority("HTTPS://User:pw@Git.Example.com:8443/p?q#f").unwrap();
        assert_eq!(
            a,
            UrlAuthority { scheme: "https".into(), host: "git.example.com".into(), port: 8443, has_credentials: true }
        );
        assert_eq!(url_authority("http://[::1]:81/a").unwrap().host, "::1");
        // Userinfo is never the host; `\` ends the authority like `/`.
        assert_eq!(url_authority("http://example.com@evil.net/").unwrap().host, "evil.net");
        assert_eq!(url_authority("http://evil.net\\@example.com/").unwrap().host, "evil.net");
    }

    proptest! {
        #[test]
        fn host_port_round_trips(host in "[a-z][a-z0-9-]{0,20}(\\.[a-z][a-z0-9]{0,10}){0,3}", port in proptest::option::of(1u16..)) {
            // `xn--` starts a punycode label: an invalid one is refused, which is not this property.
            prop_assume!(!host.split('.').any(|label| label.starts_with("xn--")));
            let text = match port { Some(p) => format!("{host}:{p}"), None => host.clone() };
            prop_assert_eq!(HostPort::parse(&text), hp(&host, port));
            prop_assert_eq!(HostPort::parse(&text.to_uppercase()), hp(&host, port));
            for scheme in ["http", "https", "ws", "wss"] {
                let a = url_authority(&format!("{scheme}://{text}/p")).unwrap();
                prop_assert_eq!(&a.host, &host);
                prop_assert_eq!(Some(a.port), HostPort::parse(&text).unwrap().port_or_default(scheme));
            }
        }

        #[test]
        fn parsers_never_panic(text in "\\PC{0,40}") {
            let _ = HostPort::parse(&text);
            let _ = url_authority(&text);
            let _ = url_authority(&format!("https://{text}"));
        }

        #[test]
        fn ip_literals_parse_as_themselves(ip in any::<std::net::IpAddr>(), port in 1u16..) {
            let text = match ip { IpAddr::V6(v6) => format!("[{v6}]:{port}"), IpAddr::V4(v4) => format!("{v4}:{port}") };
            let parsed = HostPort::parse(&text).unwrap();
            prop_assert_eq!(parsed.ip(), Some(ip));
            prop_assert_eq!(parsed.port, Some(port));
        }
    }

    #[test]
    fn public_urls_follow_the_configured_host() {
        let u = PublicUrls::new("127.0.0.1:8080");
        assert_eq!(u.relay_url(), "ws://127.0.0.1:8080");
        assert_eq!(u.repo_http_url("npub1x", "my repo"), "http://127.0.0.1:8080/npub1x/my%20repo.git");
        // ngit reads a bare relay host as wss://: a ws:// relay is named whole, as ngit prints it.
        assert_eq!(u.repo_nostr_url("npub1x", "r"), "nostr://npub1x/ws%3A%2F%2F127.0.0.1%3A8080/r");
        assert_eq!(PublicUrls::new("git.example.com").repo_nostr_url("npub1x", "my repo"), "nostr://npub1x/git.example.com/my%20repo");
        assert_eq!(PublicUrls::new("https://git.example.com:8443").repo_nostr_url("npub1x", "r"), "nostr://npub1x/git.example.com:8443/r");
        let u = PublicUrls::new("git.example.com");
        assert_eq!((u.http_base().as_str(), u.relay_url().as_str()), ("https://git.example.com", "wss://git.example.com"));
        assert_eq!(PublicUrls::new("git.example.com:443").http_base(), "https://git.example.com:443");
        assert_eq!(PublicUrls::new("http://h.example/").http_base(), "http://h.example");
        assert_eq!(PublicUrls::new("wss://h.example:8443").relay_url(), "wss://h.example:8443");
        assert_eq!(PublicUrls::new("[::1]").http_base(), "https://[::1]");
        assert_eq!(PublicUrls::new("[::1]:80").http_base(), "http://[::1]:80");
    }

}
