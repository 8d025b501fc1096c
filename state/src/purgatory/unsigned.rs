//! Unsigned data: the bytes git-first pushes parked here with no event signed by anyone
//! (docs/protocol.md#caps, #placeholders; docs/security.md).
//!
//! A push that reserves git-first placeholders (`refs/nostr/<id>` before its pull request event)
//! brings objects nobody has signed for. The pre-receive hook measures them (the push's
//! quarantine, as for `--max-push-bytes`) and the relay records them with the push's
//! placeholders, attributed to the pushing address. What an address, and everyone, holds is the
//! sum over the placeholders still waiting; the bytes leave with the placeholder (its pull
//! request event releases it, it expires and its refs are deleted, it is cleaned).
//!
//! [`UnsignedBudget::check`] is the decision: a push whose bytes would take its address, or
//! the total, past its budget is refused before its data lands, with [`UnsignedFull`]'s line.
//! Pushes reserving no placeholder (maintainers' branches and tags, commits of pull request
//! events already here) are never asked.

use std::fmt;
use std::net::IpAddr;

use nostr::prelude::EventId;
use serde::{Deserialize, Serialize};

use super::Purgatory;

/// `--unsigned-bytes-per-address`' default: 256 MiB.
pub const DEFAULT_UNSIGNED_PER_ADDRESS: u64 = 256 << 20;
/// `--unsigned-bytes-total`' default: 4 GiB.
pub const DEFAULT_UNSIGNED_TOTAL: u64 = 4 << 30;

/// How many bytes of unsigned data may wait, per address and in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsignedBudget {
    pub per_address: u64,
    pub total: u64,
}

impl Default for UnsignedBudget {
    fn default() -> Self {
        UnsignedBudget { per_address: DEFAULT_UNSIGNED_PER_ADDRESS, total: DEFAULT_UNSIGNED_TOTAL }
    }
}

/// Which budget a push would overrun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsignedScope {
    /// The pushing address's share.
    Address,
    /// Everyone's.
    Total,
}

/// A push refused because its unsigned bytes do not fit. Nothing was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct UnsignedFull {
    pub scope: UnsignedScope,
    /// Bytes already held (from the address, or in total).
    pub held: u64,
    pub budget: u64,
}

impl UnsignedBudget {
    /// Whether a push bringing `incoming` bytes of unsigned data may go in, when its address
    /// (`None`: unknown, counted only in the total) already holds `held_by_address` and
    /// everyone `held_total`. A push exactly reaching a budget fits; an empty push always does.
    pub fn check(&self, address_known: bool, held_by_address: u64, held_total: u64, incoming: u64) -> Result<(), UnsignedFull> {
        if incoming == 0 {
            return Ok(());
        }
        if address_known && held_by_address.saturating_add(incoming) > self.per_address {
            return Err(UnsignedFull { scope: UnsignedScope::Address, held: held_by_address, budget: self.per_address });
        }
        if held_total.saturating_add(incoming) > self.total {
            return Err(UnsignedFull { scope: UnsignedScope::Total, held: held_total, budget: self.total });
        }
        Ok(())
    }
}

/// `bytes` in MiB for a person: whole MiB as such, else with one decimal.
pub fn mib(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{}", bytes / MIB)
    } else {
        format!("{:.1}", bytes as f64 / MIB as f64)
    }
}

impl fmt::Display for UnsignedFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (held, budget) = (mib(self.held), mib(self.budget));
        match self.scope {
            UnsignedScope::Address => write!(
                f,
                "this server holds {held} MiB of unsigned data from your address (budget {budget} MiB); publish the pull \
                 request event first (its data then no longer counts), or retry later"
            ),
            UnsignedScope::Total => write!(
                f,
                "this server holds {held} MiB of unsigned data from everyone (budget {budget} MiB); publish the pull \
                 request event first (its data then no longer counts), or retry later"
            ),
        }
    }
}

/// What the placeholders hold of unsigned data, for an operator view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsignedView {
    /// Bytes in total (those of unknown addresses included).
    pub total_bytes: u64,
    pub budget_total: u64,
    pub budget_per_address: u64,
    /// Addresses holding the most, most first (ties by address).
    #[serde(default)]
    pub top: Vec<UnsignedByAddress>,
    /// Addresses holding any.
    #[serde(default)]
    pub addresses: usize,
}

/// One address's unsigned data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsignedByAddress {
    pub address: String,
    pub bytes: u64,
}

impl Purgatory {
    /// Bytes of unsigned data held from `origin` (0 when unknown) and in total.
    pub fn unsigned_held(&self, origin: Option<IpAddr>) -> (u64, u64) {
        let mine = origin.and_then(|o| self.counts.unsigned_per_address.get(&o).copied()).unwrap_or(0);
        (mine, self.counts.unsigned_total)
    }

    /// Whether a push from `origin` bringing `incoming` bytes for new or existing placeholders
    /// fits the unsigned budget ([`UnsignedBudget::check`]); changes nothing.
    pub fn check_unsigned(&self, origin: Option<IpAddr>, incoming: u64) -> Result<(), UnsignedFull> {
        let (mine, total) = self.unsigned_held(origin);
        self.config.unsigned.check(origin.is_some(), mine, total, incoming)
    }

    /// Records `bytes` more unsigned data on the placeholder `event_id`, pushed from `from`
    /// (counted against that address: the placeholder's own, or a share of its own when another
    /// address pushed it to another destination); journalled with the entry. False (nothing
    /// recorded) when `event_id` is no placeholder.
    pub fn add_unsigned_bytes(&mut self, event_id: &EventId, bytes: u64, from: Option<IpAddr>) -> bool {
        if bytes == 0 || !self.prs.get(event_id).is_some_and(|p| p.is_placeholder()) {
            return false;
        }
        // Detach and re-attach: keeps counts and journal in step in one place.
        let mut entry = self.detach_pr(event_id).expect("placeholder checked above");
        entry.add_unsigned_share(from, bytes);
        self.attach_pr(*event_id, entry);
        true
    }

    /// The unsigned data held, in total and by the `top` addresses holding most.
    pub fn unsigned_listing(&self, top: usize) -> UnsignedView {
        let mut by_address: Vec<(&IpAddr, &u64)> = self.counts.unsigned_per_address.iter().collect();
        by_address.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        UnsignedView {
            total_bytes: self.counts.unsigned_total,
            budget_total: self.config.unsigned.total,
            budget_per_address: self.config.unsigned.per_address,
            top: by_address
                .into_iter()
                .take(top)
                .map(|(a, b)| UnsignedByAddress { address: a.to_string(), bytes: *b })
                .collect(),
            addresses: self.counts.unsigned_per_address.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{ManualClock, PurgatoryConfig};
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_address_budget_first_then_the_total() {
        let budget = UnsignedBudget { per_address: 2 * MIB, total: 3 * MIB };
        assert!(budget.check(true, MIB, MIB, MIB).is_ok(), "exactly at the budget fits");
        let full = budget.check(true, 2 * MIB, 2 * MIB, 1).unwrap_err();
        assert_eq!((full.scope, full.held, full.budget), (UnsignedScope::Address, 2 * MIB, 2 * MIB));
        assert_eq!(
            full.to_string(),
            "this server holds 2 MiB of unsigned data from your address (budget 2 MiB); publish the pull request event \
             first (its data then no longer counts), or retry later"
        );
        let full = budget.check(true, 0, 3 * MIB, 1).unwrap_err();
        assert_eq!(full.scope, UnsignedScope::Total);
        assert!(full.to_string().contains("from everyone (budget 3 MiB)"), "{full}");
        // An unknown address counts only in the total.
        assert!(budget.check(false, 0, 0, 3 * MIB).is_ok());
        assert_eq!(budget.check(false, 0, 0, 3 * MIB + 1).unwrap_err().scope, UnsignedScope::Total);
        // A push reserving nothing unsigned is never refused.
        assert!(budget.check(true, u64::MAX, u64::MAX, 0).is_ok());
    }

    #[test]
    fn mib_is_whole_or_one_decimal() {
        assert_eq!((mib(0), mib(MIB), mib(MIB + MIB / 2), mib(256 * MIB)), ("0".into(), "1".into(), "1.5".into(), "256".into()));
    }

    fn small_budget() -> (std::sync::Arc<ManualClock>, Purgatory) {
        purgatory_with(PurgatoryConfig { unsigned: UnsignedBudget { per_address: 2 * MIB, total: 3 * MIB }, ..PurgatoryConfig::default() })
    }

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    fn placeholder(p: &mut Purgatory, n: u8, origin: Option<IpAddr>, bytes: u64) -> EventId {
        let id = EventId::from_byte_array([n; 32]);
        p.add_pr_placeholder_from(id, format!("{n:040x}"), repo(0, "repo"), origin).unwrap();
        assert!(p.add_unsigned_bytes(&id, bytes, origin));
        id
    }

    #[test]
    fn unsigned_bytes_count_per_address_until_the_placeholder_goes() {
        let (clock, mut p) = small_budget();
        let a = placeholder(&mut p, 1, ip(1), MIB);
        let _b = placeholder(&mut p, 2, ip(1), MIB);
        placeholder(&mut p, 3, None, MIB / 2);
        p.assert_consistent();
        assert_eq!(p.unsigned_held(ip(1)), (2 * MIB, 2 * MIB + MIB / 2));
        assert_eq!(p.check_unsigned(ip(1), 1).unwrap_err().scope, UnsignedScope::Address);
        assert_eq!(p.check_unsigned(ip(2), MIB).unwrap_err().scope, UnsignedScope::Total);
        assert!(p.check_unsigned(ip(2), MIB / 2).is_ok());
        let view = p.unsigned_listing(10);
        assert_eq!((view.total_bytes, view.addresses), (2 * MIB + MIB / 2, 1));
        assert_eq!(view.top, [UnsignedByAddress { address: "10.0.0.1".into(), bytes: 2 * MIB }]);

        // It is cleaned (or its event released it): its bytes leave.
        p.remove_pr(&a);
        assert_eq!(p.unsigned_held(ip(1)).0, MIB);
        assert!(p.check_unsigned(ip(1), MIB).is_ok());

        // Expiry: the bytes stay while the refs are being deleted, and go with the entry.
        clock.advance(MIN30);
        let actions = p.sweep();
        assert!(!actions.is_empty());
        assert_eq!(p.unsigned_held(ip(1)).0, MIB, "the refs (and their data) are still there");
        for id in [EventId::from_byte_array([2; 32]), EventId::from_byte_array([3; 32])] {
            assert!(p.placeholder_cleaned(&id, &[repo(0, "repo")]));
        }
        p.assert_consistent();
        assert_eq!(p.unsigned_held(ip(1)), (0, 0));
        assert_eq!(p.unsigned_listing(10), UnsignedView { budget_total: 3 * MIB, budget_per_address: 2 * MIB, ..Default::default() });
    }

    #[test]
    fn a_pull_request_event_takes_the_placeholder_out_of_the_budget() {
        let (_clock, mut p) = small_budget();
        let pr = signed(0, PR, 0);
        p.add_pr_placeholder_from(pr.id, "abc".into(), repo(0, "repo"), ip(1)).unwrap();
        assert!(p.add_unsigned_bytes(&pr.id, 2 * MIB, ip(1)));
        assert!(p.check_unsigned(ip(1), 1).is_err());
        p.add_pr_from(pr.clone(), "abc".into(), vec![repo(0, "repo")], ip(1)).unwrap();
        p.assert_consistent();
        assert_eq!(p.unsigned_held(ip(1)), (0, 0));
        assert!(!p.add_unsigned_bytes(&pr.id, 1, ip(1)), "an event's data is not unsigned");
    }

    #[test]
    fn bytes_another_address_adds_to_a_placeholder_are_that_addresss() {
        let (_clock, mut p) = small_budget();
        let a = placeholder(&mut p, 1, ip(1), MIB);
        assert!(p.add_unsigned_bytes(&a, MIB / 2, ip(2)));
        assert!(p.add_unsigned_bytes(&a, MIB / 4, None));
        p.assert_consistent();
        assert_eq!(p.unsigned_held(ip(1)), (MIB, MIB + MIB / 2 + MIB / 4));
        assert_eq!(p.unsigned_held(ip(2)).0, MIB / 2, "the pusher's share, not the creator's");
        let json = p.snapshot().to_state().to_json();
        let (restored, _) =
            Purgatory::restore(super::super::PurgatoryState::from_json(&json).unwrap(), *p.config(), p.clock().clone(), |_, _| true);
        restored.assert_consistent();
        assert_eq!((restored.unsigned_held(ip(1)), restored.unsigned_held(ip(2)).0), ((MIB, MIB + MIB / 2 + MIB / 4), MIB / 2));
        p.remove_pr(&a);
        assert_eq!(p.unsigned_held(ip(2)), (0, 0), "every share leaves with the placeholder");
    }

    #[test]
    fn unsigned_bytes_survive_a_checkpoint_and_the_journal() {
        let (_clock, mut p) = small_budget();
        p.start_journal();
        let a = placeholder(&mut p, 1, ip(1), MIB);
        let snapshot = p.snapshot().to_state();
        let records = p.take_journal();
        let b = placeholder(&mut p, 2, ip(1), MIB / 2);
        let later = p.take_journal();
        assert!(!records.is_empty() && !later.is_empty());
        let mut state = snapshot;
        super::super::journal::replay(&mut state, later);
        let json = state.to_json();
        assert!(json.contains("\"unsigned_bytes\""), "{json}");
        let (restored, report) = Purgatory::restore(
            super::super::PurgatoryState::from_json(&json).unwrap(),
            *p.config(),
            p.clock().clone(),
            |_, _| true,
        );
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        restored.assert_consistent();
        assert_eq!(restored.unsigned_held(ip(1)), (MIB + MIB / 2, MIB + MIB / 2));
        assert_eq!(restored.find_pr(&a).unwrap().unsigned_bytes, MIB);
        assert_eq!(restored.find_pr(&b).unwrap().unsigned_bytes, MIB / 2);
        // Files written before unsigned data was counted still load, with none.
        let old = json.replace("\"unsigned_bytes\"", "\"ignored_field\"");
        let (old, _) = Purgatory::restore(super::super::PurgatoryState::from_json(&old).unwrap(), *p.config(), p.clock().clone(), |_, _| true);
        assert_eq!(old.unsigned_held(ip(1)), (0, 0));
        assert_eq!(old.stats().placeholders, 2);
    }

    proptest! {
        #[test]
        fn accepted_exactly_when_both_sums_fit(per in 0u64..1 << 40, total in 0u64..1 << 40, mine in 0u64..1 << 40, all in 0u64..1 << 40, incoming in 0u64..1 << 40, known: bool) {
            let within = incoming == 0 || ((!known || mine + incoming <= per) && all + incoming <= total);
            prop_assert_eq!(UnsignedBudget { per_address: per, total }.check(known, mine, all, incoming).is_ok(), within);
        }
    }
}
