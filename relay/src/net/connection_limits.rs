//! How many connections the public listener keeps open: in total, and per client address
//! (`--max-connections`, `--max-connections-per-ip`).
//!
//! The accept loop asks [`ConnectionLimiter::try_open`] for every new TCP connection. A granted
//! [`ConnectionPermit`] travels with the connection (HTTP keep-alive, then the WebSocket after
//! an upgrade) and gives its place back when dropped, so the counts fall as connections close.
//! A refused connection is answered by `server` with a canned `503` that is written without
//! reading the request (see `server::refuse`).
//!
//! The per-address count uses the TCP peer address. Behind a reverse proxy every client shares
//! the proxy's address: either set `--max-connections-per-ip 0` there (no per-address limit) and
//! let the proxy limit its clients, or name the proxy with `--trusted-proxy CIDR`: its connections
//! then count only towards the total ([`ConnectionLimiter::try_open_from_proxy`]), and each
//! WebSocket it forwards holds a place of the forwarded client address
//! ([`ConnectionLimiter::try_hold_address`]).
//!
//! Addresses are counted under [`grasp_state::names::client_key::limit_key`]: an IPv6 client by its
//! `--ipv6-prefix-len` prefix, so one `/64` holds one address's share, not 2^64 of them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The listener already holds `--max-connections` connections.
    Total(usize),
    /// This address already holds `--max-connections-per-ip` connections.
    PerAddress(usize),
}

impl Refusal {
    /// The text of the `503` answer: what happened and what to do.
    pub fn message(&self) -> String {
        match self {
            Refusal::Total(n) => format!(
                "unavailable: this server already serves its maximum of {n} connections; \
                 try again in a few seconds\n"
            ),
            Refusal::PerAddress(n) => format!(
                "unavailable: your address already holds the maximum of {n} open connections to \
                 this server; close some (reuse one WebSocket for many subscriptions) and try again\n"
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
}

/// The open connection counts and their limits, shared by the accept loop and every permit.
#[derive(Debug)]
pub struct ConnectionLimiter {
    max_total: usize,
    /// 0: no per-address limit.
    max_per_address: usize,
    /// IPv6 addresses count by this many leading bits.
    ipv6_prefix_len: u8,
    counts: Mutex<Counts>,
}

/// One open connection's place. Dropping it (when the connection ends) frees the place.
#[derive(Debug)]
pub struct ConnectionPermit {
    limiter: Arc<ConnectionLimiter>,
    address: IpAddr,
    /// False for a forwarded client's per-address place.
    counts_total: bool,
}

impl ConnectionLimiter {
    /// `max_total` connections at most (at least 1 is allowed), `max_per_address` per client
    /// address (0: unlimited), IPv6 addresses counted by their first `ipv6_prefix_len` bits.
    pub fn new(max_total: usize, max_per_address: usize, ipv6_prefix_len: u8) -> Arc<Self> {
        Arc::new(ConnectionLimiter { max_total: max_total.max(1), max_per_address, ipv6_prefix_len, counts: Mutex::default() })
    }

    fn key(&self, address: IpAddr) -> IpAddr {
        grasp_state::names::client_key::limit_key(address, self.ipv6_prefix_len)
    }

    /// Takes a place for a new connection from `address`, or says which limit refuses it.
    pub fn try_open(self: &Arc<Self>, address: IpAddr) -> Result<ConnectionPermit, Refusal> {
        // IPv4 clients reaching an IPv6 socket count as their IPv4 address.
        let address = self.key(address);
        let mut counts = self.counts.lock().unwrap();
        if counts.total >= self.max_total {
            return Err(Refusal::Total(self.max_total));
        }
        let mine = counts.per_address.get(&address).copied().unwrap_or(0);
        if self.max_per_address > 0 && mine >= self.max_per_address {
            return Err(Refusal::PerAddress(self.max_per_address));
        }
        counts.total += 1;
        counts.per_address.insert(address, mine + 1);
        Ok(ConnectionPermit { limiter: self.clone(), address, counts_total: true })
    }

    /// Takes a place for a new connection from a trusted reverse proxy: only the total applies
    /// (the proxy carries many clients); the client's own place is taken per WebSocket with
    /// [`try_hold_address`](Self::try_hold_address).
    pub fn try_open_from_proxy(self: &Arc<Self>, proxy: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let address = self.key(proxy);
        let mut counts = self.counts.lock().unwrap();
        if counts.total >= self.max_total {
            return Err(Refusal::Total(self.max_total));
        }
        counts.total += 1;
        *counts.per_address.entry(address).or_insert(0) += 1;
        Ok(ConnectionPermit { limiter: self.clone(), address, counts_total: true })
    }

    /// Takes a per-address place (not a total one) for a client forwarded by a trusted proxy.
    pub fn try_hold_address(self: &Arc<Self>, client: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let address = self.key(client);
        let mut counts = self.counts.lock().unwrap();
        let mine = counts.per_address.get(&address).copied().unwrap_or(0);
        if self.max_per_address > 0 && mine >= self.max_per_address {
            return Err(Refusal::PerAddress(self.max_per_address));
        }
        counts.per_address.insert(address, mine + 1);
        Ok(ConnectionPermit { limiter: self.clone(), address, counts_total: false })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counts.lock().unwrap().total
    }

    /// Connections open now from `address`.
    pub fn open_from(&self, address: IpAddr) -> usize {
        self.counts.lock().unwrap().per_address.get(&self.key(address)).copied().unwrap_or(0)
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut counts = self.limiter.counts.lock().unwrap_or_else(|e| e.into_inner());
        if self.counts_total {
            counts.total = counts.total.saturating_sub(1);
        }
        if let Some(n) = counts.per_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                // Forget idle addresses so the map stays as small as the open connections.
                counts.per_address.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_address_limit_refuses_the_excess_and_frees_places_on_drop() {
        let l = ConnectionLimiter::new(100, 3, 64);
        let a = ip("192.0.2.1");
        let mut held: Vec<_> = (0..3).map(|_| l.try_open(a).unwrap()).collect();
        assert_eq!(l.try_open(a).unwrap_err(), Refusal::PerAddress(3));
        // Another address is not affected.
        let other = l.try_open(ip("192.0.2.2")).unwrap();
        assert_eq!((l.open(), l.open_from(a)), (4, 3));
        drop(held.pop());
        assert_eq!(l.open_from(a), 2);
        let again = l.try_open(a).unwrap();
        drop((again, other));
        assert_eq!(l.open(), 2);
    }

    #[test]
    fn total_limit_counts_every_address() {
        let l = ConnectionLimiter::new(2, 0, 64);
        let p1 = l.try_open(ip("192.0.2.1")).unwrap();
        let _p2 = l.try_open(ip("2001:db8::1")).unwrap();
        assert_eq!(l.try_open(ip("192.0.2.3")).unwrap_err(), Refusal::Total(2));
        drop(p1);
        assert!(l.try_open(ip("192.0.2.3")).is_ok());
    }

    #[test]
    fn zero_per_address_means_unlimited_and_idle_addresses_are_forgotten() {
        let l = ConnectionLimiter::new(1000, 0, 64);
        let held: Vec<_> = (0..500).map(|_| l.try_open(ip("192.0.2.1")).unwrap()).collect();
        assert_eq!(l.open_from(ip("192.0.2.1")), 500);
        drop(held);
        assert_eq!(l.open(), 0);
        assert!(l.counts.lock().unwrap().per_address.is_empty());
    }

    #[test]
    fn mapped_ipv4_counts_as_ipv4() {
        let l = ConnectionLimiter::new(10, 1, 64);
        let _p = l.try_open(ip("192.0.2.1")).unwrap();
        assert_eq!(l.try_open(ip("::ffff:192.0.2.1")).unwrap_err(), Refusal::PerAddress(1));
        assert!(ConnectionLimiter::new(0, 0, 64).try_open(ip("192.0.2.1")).is_ok(), "at least one connection");
    }

    #[test]
    fn trusted_proxies_count_in_the_total_and_forwarded_clients_per_address() {
        let l = ConnectionLimiter::new(3, 1, 64);
        let proxy = ip("10.0.0.1");
        let p1 = l.try_open_from_proxy(proxy).unwrap();
        let _p2 = l.try_open_from_proxy(proxy).unwrap();
        let client = l.try_hold_address(ip("203.0.113.1")).unwrap();
        assert_eq!(l.try_hold_address(ip("203.0.113.1")).unwrap_err(), Refusal::PerAddress(1));
        assert!(l.try_hold_address(ip("203.0.113.2")).is_ok());
        assert_eq!(l.open(), 2);
        let _p3 = l.try_open_from_proxy(proxy).unwrap();
        assert_eq!(l.try_open_from_proxy(proxy).unwrap_err(), Refusal::Total(3));
        drop((client, p1));
        assert_eq!(l.open(), 2);
        assert!(l.try_hold_address(ip("203.0.113.1")).is_ok());
    }

    #[test]
    fn one_ipv6_prefix_holds_one_share() {
        let l = ConnectionLimiter::new(100, 2, 64);
        let _a = l.try_open(ip("2001:db8:0:1::1")).unwrap();
        let _b = l.try_open(ip("2001:db8:0:1:ffff::2")).unwrap();
        // Any other address of the same /64 is the same client.
        assert_eq!(l.try_open(ip("2001:db8:0:1:1234::3")).unwrap_err(), Refusal::PerAddress(2));
        assert_eq!(l.try_hold_address(ip("2001:db8:0:1::9")).unwrap_err(), Refusal::PerAddress(2));
        // The next /64 is another client.
        assert!(l.try_open(ip("2001:db8:0:2::1")).is_ok());
        assert_eq!(l.open_from(ip("2001:db8:0:1::77")), 2);
        // A /128 prefix length counts every address on its own.
        let each = ConnectionLimiter::new(100, 1, 128);
        let _c = each.try_open(ip("2001:db8::1")).unwrap();
        assert!(each.try_open(ip("2001:db8::2")).is_ok());
    }

    #[test]
    fn messages_say_what_to_do() {
        assert!(Refusal::Total(5).message().contains("try again"));
        assert!(Refusal::PerAddress(3).message().contains("close some"));
    }
}
