//! Address ranges (`10.0.0.0/8`, `fc00::/7`) as the configuration writes them
//! (`--sync-deny`) and the URL safety checks use them.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use thiserror::Error;

/// An address range such as `10.0.0.0/8` or `fc00::/7` (an [`IpNet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpNet);

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid address range {0:?}: write it as ADDRESS/PREFIX, e.g. 10.0.0.0/8 or fc00::/7")]
pub struct CidrParseError(String);

impl Cidr {
    /// The range `net`.
    pub fn from_net(net: IpNet) -> Cidr {
        Cidr(net)
    }

    /// A range of `prefix` leading bits; host bits of `network` are ignored.
    pub fn new(network: IpAddr, prefix: u8) -> Option<Cidr> {
        IpNet::new(network, prefix).ok().map(Cidr)
    }

    /// Whether `ip` lies in the range. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) count as
    /// their IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;

    /// `ADDRESS/PREFIX`, or a bare address meaning just that address.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || CidrParseError(text.to_string());
        // Digits only after the slash (the parser below would take a sign).
        if text.split_once('/').is_some_and(|(_, p)| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
            return Err(error());
        }
        match text.parse::<IpNet>() {
            Ok(net) => Ok(Cidr(net)),
            Err(_) if !text.contains('/') => text.parse::<IpAddr>().map(|ip| Cidr(IpNet::from(ip))).map_err(|_| error()),
            Err(_) => Err(error()),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
