//! What the relay publishes about itself under its own key (docs/protocol.md, "Relay
//! identity"), pure: its profile (kind 0: name = its domain, NIP-05 `_@domain`) and its relay
//! list (kind 10002 naming its own WebSocket URL), published to the index relays only when they
//! hold none for the key yet.

use serde_json::json;

/// Profile metadata (NIP-01 kind 0).
pub const KIND_PROFILE: u16 = 0;

/// The domain of a public host (`host[:port]`, any scheme): the host without its port.
pub fn domain(public_host: &str) -> String {
    let host = crate::names::host::public_authority(public_host);
    match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default().to_string(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h).to_string(),
    }
}

/// The kind 0 content: `name` is the domain, `nip05` is `_@<domain>`; `about` (the NIP-11
/// description) when there is one; `website` the server's pages.
pub fn profile_content(public_host: &str, about: &str) -> String {
    let domain = domain(public_host);
    let urls = crate::names::host::PublicUrls::new(public_host);
    let mut profile = json!({ "name": domain, "nip05": format!("_@{domain}"), "website": urls.http_base() });
    if !about.trim().is_empty() {
        profile["about"] = about.trim().into();
    }
    profile.to_string()
}

/// The kind 10002 tags: this relay, for reading and writing (one unmarked `r` tag).
pub fn relay_list_tags(public_host: &str) -> Vec<Vec<String>> {
    vec![vec!["r".to_string(), crate::names::host::PublicUrls::new(public_host).relay_url()]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_names_the_domain_and_its_nip05() {
        assert_eq!(domain("git.example.com"), "git.example.com");
        assert_eq!(domain("https://git.example.com:8443/"), "git.example.com");
        assert_eq!(domain("[::1]:8080"), "::1");
        let p: serde_json::Value = serde_json::from_str(&profile_content("https://git.example.com", "  Code here. ")).unwrap();
        assert_eq!(p, json!({"name": "git.example.com", "nip05": "_@git.example.com", "website": "https://git.example.com", "about": "Code here."}));
        let p: serde_json::Value = serde_json::from_str(&profile_content("127.0.0.1:8080", "")).unwrap();
        assert_eq!(p, json!({"name": "127.0.0.1", "nip05": "_@127.0.0.1", "website": "http://127.0.0.1:8080"}));
        assert_eq!(relay_list_tags("git.example.com"), [["r", "wss://git.example.com"]]);
        assert_eq!(relay_list_tags("127.0.0.1:8080"), [["r", "ws://127.0.0.1:8080"]]);
    }
}
