//! The client's address behind a reverse proxy (`--trusted-proxy CIDR`): `X-Forwarded-For` /
//! `X-Real-IP` are believed only when the TCP peer is a configured trusted proxy; otherwise
//! anybody could claim any address and escape the per-address limits.

use std::net::IpAddr;

use hyper::HeaderMap;
use ipnet::IpNet;

/// Is `peer` one of the trusted proxies?
pub fn is_trusted(peer: IpAddr, trusted: &[IpNet]) -> bool {
    let peer = peer.to_canonical();
    trusted.iter().any(|net| net.contains(&peer))
}

/// The client address of a request from `peer`: the right-most `X-Forwarded-For` entry that is
/// not itself a trusted proxy (entries further left are client-supplied and could be forged),
/// else `X-Real-IP`, else the peer. Headers are read only when `peer` is trusted.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let forwarded: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|s| s.trim().parse::<IpAddr>().ok().map(|ip| ip.to_canonical()))
        .collect();
    if let Some(ip) = forwarded.iter().rev().find(|ip| !is_trusted(**ip, trusted)) {
        return *ip;
    }
    if let Some(ip) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<IpAddr>().ok())
    {
        return ip.to_canonical();
    }
    forwarded.first().copied().unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn headers_count_only_from_trusted_peers() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        let stranger: IpAddr = "198.51.100.7".parse().unwrap();
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 10.0.0.5")]);
        assert_eq!(client_address(proxy, &h, &trusted), "203.0.113.9".parse::<IpAddr>().unwrap());
        assert_eq!(client_address(stranger, &h, &trusted), stranger);
        // A forged left-most entry does not win over the address the proxy saw.
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9")]);
        assert_eq!(client_address(proxy, &h, &trusted), "203.0.113.9".parse::<IpAddr>().unwrap());
        let h = headers(&[("x-real-ip", "203.0.113.10")]);
        assert_eq!(client_address(proxy, &h, &trusted), "203.0.113.10".parse::<IpAddr>().unwrap());
        let h = headers(&[("x-forwarded-for", "garbage")]);
        assert_eq!(client_address(proxy, &h, &trusted), proxy);
        assert_eq!(client_address("::ffff:10.0.0.1".parse().unwrap(), &headers(&[("x-real-ip", "192.0.2.1")]), &trusted), "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(client_address(proxy, &HeaderMap::new(), &[]), proxy);
    }
}
