//! The one key a client address is counted under by every per-address limit (connections, git
//! request slots, write rate; docs/security.md).
//!
//! An IPv4 client owns one address; an IPv6 client usually owns a whole prefix (a `/64` is
//! 2^64 addresses), so counting each IPv6 address on its own would let one client take as many
//! places as it likes, or fill the limiters' tables. IPv6 addresses are therefore counted by
//! their first `--ipv6-prefix-len` bits ([`DEFAULT_IPV6_PREFIX_LEN`]); IPv4 addresses (and IPv4
//! reaching an IPv6 socket, `::ffff:a.b.c.d`) as they are.

use std::net::{IpAddr, Ipv6Addr};

/// The IPv6 prefix one client is assumed to own: a `/64`, what a subscriber line gets.
pub const DEFAULT_IPV6_PREFIX_LEN: u8 = 64;

/// The key `address` is counted under: an IPv4 address as is (mapped IPv6 forms made IPv4), an
/// IPv6 address with every bit past `ipv6_prefix_len` cleared (lengths past 128 mean 128).
pub fn limit_key(address: IpAddr, ipv6_prefix_len: u8) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let len = u32::from(ipv6_prefix_len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_counts_by_its_prefix_and_ipv4_as_is() {
        assert_eq!(limit_key(ip("2001:db8:1:2:aaaa::1"), 64), ip("2001:db8:1:2::"));
        assert_eq!(limit_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"), 64), ip("2001:db8:1:2::"));
        assert_ne!(limit_key(ip("2001:db8:1:3::1"), 64), ip("2001:db8:1:2::"));
        assert_eq!(limit_key(ip("2001:db8:1:2::1"), 48), ip("2001:db8:1::"));
        assert_eq!(limit_key(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(limit_key(ip("2001:db8::1"), 200), ip("2001:db8::1"));
        assert_eq!(limit_key(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(limit_key(ip("192.0.2.7"), 64), ip("192.0.2.7"));
        assert_eq!(limit_key(ip("::ffff:192.0.2.7"), 64), ip("192.0.2.7"));
    }

    fn any_v6() -> impl Strategy<Value = Ipv6Addr> {
        any::<u128>().prop_map(Ipv6Addr::from)
    }

    proptest! {
        #[test]
        fn two_ipv6_addresses_share_a_key_iff_they_share_the_prefix(a in any_v6(), b in any_v6(), len in 0u8..=128, flip in 0u32..128) {
            // Also try a b that differs from a in exactly one bit.
            let near = Ipv6Addr::from(u128::from(a) ^ (1u128 << flip));
            for other in [b, near] {
                let shared = len == 0 || (u128::from(a) ^ u128::from(other)) >> (128 - u32::from(len)) == 0;
                let (ka, kb) = (limit_key(IpAddr::V6(a), len), limit_key(IpAddr::V6(other), len));
                // Mapped IPv4 addresses are counted as IPv4, outside the IPv6 space.
                if a.to_ipv4_mapped().is_none() && other.to_ipv4_mapped().is_none() {
                    prop_assert_eq!(ka == kb, shared);
                }
            }
        }

        #[test]
        fn the_key_is_its_own_key_and_ipv4_is_untouched(a in any_v6(), v4 in any::<u32>(), len in 0u8..=255) {
            let k = limit_key(IpAddr::V6(a), len);
            prop_assert_eq!(limit_key(k, len), k);
            let v4 = IpAddr::V4(v4.into());
            prop_assert_eq!(limit_key(v4, len), v4);
        }
    }
}
