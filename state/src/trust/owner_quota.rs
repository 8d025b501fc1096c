//! What owners may store (docs/protocol.md#budgets): a quota of bytes per owner over all their
//! repositories (`--owner-quota`), and a budget of bytes per client address per day for the
//! repositories of new owners (`--new-owner-bytes-per-address-per-day`), so that throwaway keys
//! from one place are slowed down while owners with data already here keep pushing.
//!
//! An owner is *new* until one of their repositories here is a day old ([`NEW_OWNER_FOR_SECS`]).
//! Pushes to a new owner's repositories count, per pushing address, over a rolling day
//! ([`NewOwnerWindow`]); a push past the budget is refused in pre-receive with [`QuotaFull`]'s
//! line. Owners the operator exempts (`--quota-exempt-owner`) meet neither.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;

use crate::purgatory::unsigned::mib;

/// `--owner-quota`' default: 20 GiB over all of one owner's repositories.
pub const DEFAULT_OWNER_QUOTA: u64 = 20 << 30;
/// `--new-owner-bytes-per-address-per-day`' default: 2 GiB.
pub const DEFAULT_NEW_OWNER_PER_ADDRESS_PER_DAY: u64 = 2 << 30;
/// How long an owner counts as new after their first repository here.
pub const NEW_OWNER_FOR_SECS: u64 = 24 * 3600;
/// The window of the per-address budget.
pub const DAY_SECS: u64 = 24 * 3600;
/// Most pushes one address's window remembers (older ones are merged into the oldest kept).
const MAX_PUSHES_PER_ADDRESS: usize = 1024;
/// Most addresses the window remembers; past it the oldest-active address is forgotten.
const MAX_ADDRESSES: usize = 100_000;

/// A push refused by a quota. Nothing was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuotaFull {
    /// The owner's repositories hold `used` bytes; `incoming` more would pass `quota`.
    Owner { used: u64, quota: u64 },
    /// The address pushed `used` bytes into new owners' repositories in the last day.
    NewOwnerAddress { used: u64, budget: u64 },
}

impl QuotaFull {
    pub fn scope(&self) -> &'static str {
        match self {
            QuotaFull::Owner { .. } => "owner",
            QuotaFull::NewOwnerAddress { .. } => "new_owner_address",
        }
    }
}

impl fmt::Display for QuotaFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuotaFull::Owner { used, quota } => write!(
                f,
                "this server keeps {} MiB of this owner's repositories (quota {} MiB per owner); delete repositories \
                 you no longer need here, or push to another GRASP server listed for the repository",
                mib(used),
                mib(quota)
            ),
            QuotaFull::NewOwnerAddress { used, budget } => write!(
                f,
                "this server took {} MiB for new owners' repositories from your address in the last 24 hours (budget \
                 {} MiB); push the rest later, or to another GRASP server listed for the repository",
                mib(used),
                mib(budget)
            ),
        }
    }
}

/// The quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerQuotas {
    /// Bytes over all of one owner's repositories (0: none).
    pub per_owner: u64,
    /// Bytes one address may push into new owners' repositories per day (0: none).
    pub new_owner_per_address_per_day: u64,
}

impl Default for OwnerQuotas {
    fn default() -> Self {
        OwnerQuotas { per_owner: DEFAULT_OWNER_QUOTA, new_owner_per_address_per_day: DEFAULT_NEW_OWNER_PER_ADDRESS_PER_DAY }
    }
}

/// What a push's decision needs to know of its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerFacts {
    /// Bytes their repositories hold now.
    pub used: u64,
    /// Whether their first repository here is less than a day old.
    pub new_owner: bool,
    /// Exempted by the operator.
    pub exempt: bool,
}

impl OwnerQuotas {
    /// May a push bringing `incoming` bytes to an owner with `facts` go in, when its address
    /// (`None`: unknown, not counted) pushed `address_used` bytes into new owners' repositories
    /// in the last day? A push bringing nothing always may.
    pub fn check(&self, facts: OwnerFacts, address_used: Option<u64>, incoming: u64) -> Result<(), QuotaFull> {
        if incoming == 0 || facts.exempt {
            return Ok(());
        }
        if self.per_owner > 0 && facts.used.saturating_add(incoming) > self.per_owner {
            return Err(QuotaFull::Owner { used: facts.used, quota: self.per_owner });
        }
        if let Some(used) = address_used.filter(|_| facts.new_owner && self.new_owner_per_address_per_day > 0) {
            if used.saturating_add(incoming) > self.new_owner_per_address_per_day {
                return Err(QuotaFull::NewOwnerAddress { used, budget: self.new_owner_per_address_per_day });
            }
        }
        Ok(())
    }
}

/// Bytes pushed into new owners' repositories per address over the last day.
#[derive(Debug, Clone, Default)]
pub struct NewOwnerWindow {
    pushes: HashMap<IpAddr, VecDeque<(u64, u64)>>,
}

impl NewOwnerWindow {
    /// Bytes `address` pushed in the day before `now` (unix seconds).
    pub fn used(&mut self, address: IpAddr, now: u64) -> u64 {
        let Some(q) = self.pushes.get_mut(&address) else { return 0 };
        while q.front().is_some_and(|(at, _)| now.saturating_sub(*at) >= DAY_SECS) {
            q.pop_front();
        }
        if q.is_empty() {
            self.pushes.remove(&address);
            return 0;
        }
        q.iter().map(|(_, b)| *b).fold(0u64, u64::saturating_add)
    }

    /// Records `bytes` pushed by `address` at `now`.
    pub fn record(&mut self, address: IpAddr, now: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if !self.pushes.contains_key(&address) && self.pushes.len() >= MAX_ADDRESSES {
            let oldest = self.pushes.iter().min_by_key(|(_, q)| q.back().map_or(0, |(at, _)| *at)).map(|(a, _)| *a);
            if let Some(a) = oldest {
                self.pushes.remove(&a);
            }
        }
        let q = self.pushes.entry(address).or_default();
        if q.len() >= MAX_PUSHES_PER_ADDRESS {
            // Merged into the next oldest: the sum stays, it leaves the window a little later.
            if let Some((_, b)) = q.pop_front() {
                if let Some(front) = q.front_mut() {
                    front.1 = front.1.saturating_add(b);
                }
            }
        }
        q.push_back((now, bytes));
    }

    pub fn addresses(&self) -> usize {
        self.pushes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn the_owner_quota_then_the_new_owner_budget() {
        let q = OwnerQuotas { per_owner: 10 * MIB, new_owner_per_address_per_day: 3 * MIB };
        let new = OwnerFacts { used: 0, new_owner: true, exempt: false };
        assert!(q.check(new, Some(2 * MIB), MIB).is_ok(), "exactly at the budget");
        let full = q.check(new, Some(2 * MIB), MIB + 1).unwrap_err();
        assert_eq!(full, QuotaFull::NewOwnerAddress { used: 2 * MIB, budget: 3 * MIB });
        assert!(full.to_string().starts_with("this server took 2 MiB for new owners' repositories from your address"), "{full}");
        let old = OwnerFacts { new_owner: false, ..new };
        assert!(q.check(old, Some(100 * MIB), 9 * MIB).is_ok(), "an established owner is not a newcomer");
        let full = q.check(OwnerFacts { used: 9 * MIB, ..old }, None, MIB + 1).unwrap_err();
        assert_eq!(full, QuotaFull::Owner { used: 9 * MIB, quota: 10 * MIB });
        assert!(full.to_string().contains("(quota 10 MiB per owner)"), "{full}");
        assert!(q.check(OwnerFacts { used: u64::MAX, exempt: true, ..new }, Some(u64::MAX), MIB).is_ok(), "exempt");
        assert!(q.check(OwnerFacts { used: u64::MAX, ..new }, Some(u64::MAX), 0).is_ok(), "nothing incoming");
        assert!(q.check(new, None, 3 * MIB + 1).is_ok(), "an unknown address counts nowhere");
    }

    #[test]
    fn the_window_forgets_after_a_day() {
        let mut w = NewOwnerWindow::default();
        w.record(ip(1), 1_000, MIB);
        w.record(ip(1), 5_000, 2 * MIB);
        assert_eq!(w.used(ip(1), 5_000), 3 * MIB);
        assert_eq!(w.used(ip(2), 5_000), 0);
        assert_eq!(w.used(ip(1), 1_000 + DAY_SECS), 2 * MIB);
        assert_eq!(w.used(ip(1), 5_000 + DAY_SECS), 0);
        assert_eq!(w.addresses(), 0);
    }

    proptest! {
        #[test]
        fn the_window_sum_is_the_last_days_pushes(pushes in proptest::collection::vec((0u64..3 * DAY_SECS, 0u64..1000), 0..2000)) {
            let mut sorted = pushes.clone();
            sorted.sort();
            let mut w = NewOwnerWindow::default();
            for (at, b) in &sorted {
                w.record(ip(1), *at, *b);
            }
            let now = sorted.last().map_or(0, |(at, _)| *at);
            let expected: u64 = sorted.iter().filter(|(at, _)| now - at < DAY_SECS).map(|(_, b)| b).sum();
            let got = w.used(ip(1), now);
            // Merging keeps the sum, and may keep old bytes a little longer, never shorter.
            prop_assert!(got >= expected, "{} < {}", got, expected);
            if sorted.len() <= MAX_PUSHES_PER_ADDRESS {
                prop_assert_eq!(got, expected);
            }
        }
    }
}
