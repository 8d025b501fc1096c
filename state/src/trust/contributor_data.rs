//! Contributor data: git data released by the signed events of keys that are not confirmed
//! maintainers of the repository it went to (pull requests and their updates, GRASP-06
//! uploads), counted per author, per pushing address and in total (docs/protocol.md#budgets,
//! docs/security.md).
//!
//! Unsigned data (git-first placeholders, [`crate::purgatory::unsigned`]) becomes contributor
//! data when a pull request event claims it; data pushed for a pull request event already here
//! is contributor data from its push. Either way one [`ContributorEntry`] per pull request event
//! id holds the bytes its data adds on disk (what its commit reaches that no maintainer's branch
//! or tag does). The bytes leave the ledger when the data goes ([`ContributorLedger::remove`]:
//! pruned after its pull request was closed or merged, its author purged) or when maintainers'
//! refs reach it (a merge: the reconciliation from disk sets its bytes to 0).
//!
//! [`ContributorBudget::check`] is the decision; [`ContributorLedger`] is the pure data (sums
//! kept in step with the entries); the relay measures, persists it beside the purgatory
//! checkpoint and reconciles it with the disk (`grasp::budgets`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use nostr::prelude::{EventId, PublicKey, ToBech32};
use serde::{Deserialize, Serialize};

use crate::purgatory::unsigned::mib;

/// `--contributor-bytes-per-author`' default: 512 MiB (two 100 MiB pull requests in flight fit
/// several times over).
pub const DEFAULT_PER_AUTHOR: u64 = 512 << 20;
/// `--contributor-bytes-per-address`' default: 1 GiB (a few contributors behind one address).
pub const DEFAULT_PER_ADDRESS: u64 = 1 << 30;
/// `--contributor-bytes-total`' default: 16 GiB.
pub const DEFAULT_TOTAL: u64 = 16 << 30;
/// `--pr-data-grace`' default: data of a closed or merged pull request is pruned 30 days after
/// its status.
pub const DEFAULT_PRUNE_GRACE_SECS: u64 = 30 * 24 * 3600;
/// How long after its last charge an entry whose ref is nowhere is kept (its push may still be
/// landing, or have failed: then it goes).
pub const MEASURE_GRACE_SECS: u64 = 600;
/// Most entries the ledger keeps; past it new contributor data is refused as if the total were
/// reached (each entry is a pull request with data, so this is far beyond any real server).
pub const MAX_ENTRIES: usize = 200_000;

/// How many bytes of contributor data may be kept, per author, per address and in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContributorBudget {
    pub per_author: u64,
    pub per_address: u64,
    pub total: u64,
}

impl Default for ContributorBudget {
    fn default() -> Self {
        ContributorBudget { per_author: DEFAULT_PER_AUTHOR, per_address: DEFAULT_PER_ADDRESS, total: DEFAULT_TOTAL }
    }
}

/// Which budget new contributor data would overrun.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContributorScope {
    Author,
    Address,
    Total,
}

impl ContributorScope {
    pub fn as_str(self) -> &'static str {
        match self {
            ContributorScope::Author => "author",
            ContributorScope::Address => "address",
            ContributorScope::Total => "total",
        }
    }
}

/// New contributor data refused: nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ContributorFull {
    pub scope: ContributorScope,
    /// The author the data is for.
    pub author: PublicKey,
    /// Bytes already kept (of the author, the address, or everyone).
    pub held: u64,
    pub budget: u64,
}

impl fmt::Display for ContributorFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (held, budget) = (mib(self.held), mib(self.budget));
        let whose = match self.scope {
            ContributorScope::Author => format!("from {}", self.author.to_bech32().unwrap_or_default()),
            ContributorScope::Address => "from your address".to_string(),
            ContributorScope::Total => "from contributors".to_string(),
        };
        write!(
            f,
            "this server keeps {held} MiB of pull request data {whose} (budget {budget} MiB); close the pull requests \
             you no longer need (their data is pruned) or ask a maintainer to merge them, then push again later"
        )
    }
}

impl ContributorBudget {
    /// Whether `incoming` more bytes fit when the author holds `author`, the address
    /// (`None`: unknown, not counted) `address`, everyone `total`. Exactly reaching a budget
    /// fits; nothing incoming always fits.
    pub fn check(&self, author: (PublicKey, u64), address: Option<u64>, total: u64, incoming: u64) -> Result<(), ContributorFull> {
        if incoming == 0 {
            return Ok(());
        }
        let full = |scope, held, budget| Err(ContributorFull { scope, author: author.0, held, budget });
        if author.1.saturating_add(incoming) > self.per_author {
            return full(ContributorScope::Author, author.1, self.per_author);
        }
        if let Some(held) = address.filter(|held| held.saturating_add(incoming) > self.per_address) {
            return full(ContributorScope::Address, held, self.per_address);
        }
        if total.saturating_add(incoming) > self.total {
            return full(ContributorScope::Total, total, self.total);
        }
        Ok(())
    }
}

/// Bytes of one pull request's data to charge to its author.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub id: EventId,
    pub author: PublicKey,
    pub identifier: String,
    pub bytes: u64,
}

/// The data of one pull request event (or update).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContributorEntry {
    pub author: PublicKey,
    /// The address that pushed it (unknown after a rebuild from disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    pub identifier: String,
    pub bytes: u64,
    /// When its last bytes were charged (unix seconds): a measurement that finds no ref soon
    /// after is a push still landing, not data gone ([`MEASURE_GRACE_SECS`]).
    #[serde(default)]
    pub charged_at: u64,
    /// When its pull request was closed or merged (unix seconds), starting the prune grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<u64>,
}

/// Every pull request's contributor data, with its sums.
#[derive(Debug, Clone, Default)]
pub struct ContributorLedger {
    entries: BTreeMap<EventId, ContributorEntry>,
    per_author: HashMap<PublicKey, u64>,
    per_address: HashMap<IpAddr, u64>,
    total: u64,
}

/// The ledger as written to disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerFile {
    pub version: u32,
    #[serde(default)]
    pub entries: BTreeMap<EventId, ContributorEntry>,
}

/// What the ledger holds, for an operator view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContributorView {
    pub total_bytes: u64,
    pub budget_total: u64,
    pub budget_per_author: u64,
    pub budget_per_address: u64,
    /// Pull requests with data counted.
    pub pull_requests: usize,
    /// Of those, closed or merged and waiting for their prune.
    pub closed: usize,
    pub authors: usize,
    pub addresses: usize,
    /// The authors keeping most, most first (npub).
    #[serde(default)]
    pub top_authors: Vec<BytesBy>,
    /// The addresses keeping most, most first.
    #[serde(default)]
    pub top_addresses: Vec<BytesBy>,
}

/// Bytes kept by one author or address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BytesBy {
    pub who: String,
    pub bytes: u64,
}

fn add(map_sum: &mut u64, bytes: u64) {
    *map_sum = map_sum.saturating_add(bytes);
}

impl ContributorLedger {
    pub fn from_file(file: LedgerFile) -> Self {
        let mut ledger = ContributorLedger::default();
        for (id, entry) in file.entries.into_iter().take(MAX_ENTRIES) {
            ledger.insert(id, entry);
        }
        ledger
    }

    pub fn to_file(&self) -> LedgerFile {
        LedgerFile { version: 1, entries: self.entries.clone() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, id: &EventId) -> Option<&ContributorEntry> {
        self.entries.get(id)
    }

    pub fn entries(&self) -> impl Iterator<Item = (&EventId, &ContributorEntry)> {
        self.entries.iter()
    }

    /// Bytes kept by `author`, by `address` (0 when unknown) and by everyone.
    pub fn held(&self, author: &PublicKey, address: Option<IpAddr>) -> (u64, u64, u64) {
        let mine = self.per_author.get(author).copied().unwrap_or(0);
        let theirs = address.and_then(|a| self.per_address.get(&a).copied()).unwrap_or(0);
        (mine, theirs, self.total)
    }

    /// Whether `incoming` more bytes for `author` from `address` fit `budget` (the bytes an
    /// entry of that pull request already counts are not counted twice: a push of an update
    /// adds to its own entry). A full ledger refuses as the total.
    pub fn check(&self, budget: &ContributorBudget, author: &PublicKey, address: Option<IpAddr>, id: &EventId, incoming: u64) -> Result<(), ContributorFull> {
        if incoming > 0 && !self.entries.contains_key(id) && self.entries.len() >= MAX_ENTRIES {
            return Err(ContributorFull { scope: ContributorScope::Total, author: *author, held: self.total, budget: budget.total.min(self.total) });
        }
        let (mine, theirs, total) = self.held(author, address);
        budget.check((*author, mine), address.map(|_| theirs), total, incoming)
    }

    /// Adds `bytes` to the entry of pull request `id` (made if new, for `author` from `address`).
    /// An existing entry keeps its author and address. False when the ledger is full.
    pub fn charge(&mut self, id: EventId, author: PublicKey, address: Option<IpAddr>, identifier: &str, bytes: u64, now: u64) -> bool {
        let entry = match self.remove(&id) {
            Some(mut entry) => {
                entry.bytes = entry.bytes.saturating_add(bytes);
                entry.charged_at = now;
                entry
            }
            None if self.entries.len() >= MAX_ENTRIES => return false,
            None => ContributorEntry { author, address, identifier: identifier.to_string(), bytes, charged_at: now, closed_at: None },
        };
        self.insert(id, entry);
        true
    }

    /// Checks every one of `charges` (one push's, from `address`), each against the sums with
    /// the ones before it added, then records them all; on a refusal nothing is recorded. The
    /// same verdicts as checking and charging one by one on a copy, without copying the ledger.
    pub fn charge_all(&mut self, budget: &ContributorBudget, charges: &[Charge], address: Option<IpAddr>, now: u64) -> Result<(), ContributorFull> {
        // The entries this push makes, with the author and address they keep.
        let mut made: Vec<(EventId, PublicKey, Option<IpAddr>)> = Vec::new();
        let (mut by_author, mut by_address, mut total) = (HashMap::<PublicKey, u64>::new(), HashMap::<IpAddr, u64>::new(), 0u64);
        for c in charges {
            let kept = match self.entries.get(&c.id) {
                Some(e) => Some((e.author, e.address)),
                None => made.iter().find(|(id, _, _)| *id == c.id).map(|(_, author, to)| (*author, *to)),
            };
            if c.bytes > 0 && kept.is_none() && self.entries.len() + made.len() >= MAX_ENTRIES {
                return Err(ContributorFull { scope: ContributorScope::Total, author: c.author, held: self.total, budget: budget.total.min(self.total) });
            }
            let (mine, theirs) = {
                let (held_mine, held_theirs, _) = self.held(&c.author, address);
                let author_added = by_author.get(&c.author).copied().unwrap_or(0);
                (held_mine + author_added, address.map(|a| held_theirs + by_address.get(&a).copied().unwrap_or(0)))
            };
            budget.check((c.author, mine), theirs, self.total + total, c.bytes)?;
            // An entry already here keeps its author and address: the bytes are theirs.
            let (author, to) = kept.unwrap_or((c.author, address));
            *by_author.entry(author).or_default() += c.bytes;
            if let Some(a) = to {
                *by_address.entry(a).or_default() += c.bytes;
            }
            total += c.bytes;
            if kept.is_none() {
                made.push((c.id, c.author, address));
            }
        }
        for c in charges {
            self.charge(c.id, c.author, address, &c.identifier, c.bytes, now);
        }
        Ok(())
    }

    /// Replaces the bytes of `id` by what the disk says (reconciliation); 0 removes it (merged:
    /// maintainers' refs reach all of it). Returns the old bytes.
    pub fn set_bytes(&mut self, id: &EventId, bytes: u64) -> Option<u64> {
        let mut entry = self.remove(id)?;
        let old = entry.bytes;
        if bytes > 0 {
            entry.bytes = bytes;
            self.insert(*id, entry);
        }
        Some(old)
    }

    /// Marks pull request `id` closed or merged at `at` (the first status counts).
    pub fn mark_closed(&mut self, id: &EventId, at: u64) -> bool {
        match self.entries.get_mut(id) {
            Some(entry) if entry.closed_at.is_none() => {
                entry.closed_at = Some(at);
                true
            }
            _ => false,
        }
    }

    /// Reopened: the prune grace no longer runs.
    pub fn mark_open(&mut self, id: &EventId) -> bool {
        self.entries.get_mut(id).is_some_and(|e| e.closed_at.take().is_some())
    }

    /// The pull requests closed or merged at least `grace_secs` before `now`: their data is due
    /// for pruning.
    pub fn due_for_prune(&self, now: u64, grace_secs: u64) -> Vec<(EventId, String)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.closed_at.is_some_and(|at| now.saturating_sub(at) >= grace_secs))
            .map(|(id, e)| (*id, e.identifier.clone()))
            .collect()
    }

    /// The entries of `author`.
    pub fn of_author(&self, author: &PublicKey) -> Vec<EventId> {
        self.entries.iter().filter(|(_, e)| e.author == *author).map(|(id, _)| *id).collect()
    }

    pub fn remove(&mut self, id: &EventId) -> Option<ContributorEntry> {
        let entry = self.entries.remove(id)?;
        fn sub<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u64>, key: K, bytes: u64) {
            if let Some(sum) = map.get_mut(&key) {
                *sum = sum.saturating_sub(bytes);
                if *sum == 0 {
                    map.remove(&key);
                }
            }
        }
        sub(&mut self.per_author, entry.author, entry.bytes);
        if let Some(address) = entry.address {
            sub(&mut self.per_address, address, entry.bytes);
        }
        self.total = self.total.saturating_sub(entry.bytes);
        Some(entry)
    }

    fn insert(&mut self, id: EventId, entry: ContributorEntry) {
        if let Some(old) = self.remove(&id) {
            debug_assert!(false, "insert over an entry: {old:?}");
        }
        if entry.bytes > 0 {
            add(self.per_author.entry(entry.author).or_default(), entry.bytes);
            if let Some(address) = entry.address {
                add(self.per_address.entry(address).or_default(), entry.bytes);
            }
            add(&mut self.total, entry.bytes);
        }
        self.entries.insert(id, entry);
    }

    /// The operator's view: sums, and the `top` authors and addresses keeping most.
    pub fn view(&self, budget: &ContributorBudget, top: usize) -> ContributorView {
        fn most<K: fmt::Display + Ord>(map: &HashMap<K, u64>, top: usize, show: impl Fn(&K) -> String) -> Vec<BytesBy> {
            let mut all: Vec<(&K, &u64)> = map.iter().filter(|(_, b)| **b > 0).collect();
            all.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            all.into_iter().take(top).map(|(k, b)| BytesBy { who: show(k), bytes: *b }).collect()
        }
        ContributorView {
            total_bytes: self.total,
            budget_total: budget.total,
            budget_per_author: budget.per_author,
            budget_per_address: budget.per_address,
            pull_requests: self.entries.len(),
            closed: self.entries.values().filter(|e| e.closed_at.is_some()).count(),
            authors: self.per_author.len(),
            addresses: self.per_address.len(),
            top_authors: most(&self.per_author, top, |k| k.to_bech32().unwrap_or_default()),
            top_addresses: most(&self.per_address, top, |k| k.to_string()),
        }
    }

    /// The sums recomputed from the entries equal the kept ones (tests).
    pub fn assert_consistent(&self) {
        let mut fresh = ContributorLedger::default();
        for (id, e) in &self.entries {
            fresh.insert(*id, e.clone());
        }
        assert_eq!((fresh.total, &fresh.per_author, &fresh.per_address), (self.total, &self.per_author, &self.per_address));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn key(n: u8) -> PublicKey {
        Keys::parse(&format!("{:064x}", u64::from(n) + 1)).unwrap().public_key()
    }

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn the_author_first_then_the_address_then_everyone() {
        let budget = ContributorBudget { per_author: 2 * MIB, per_address: 3 * MIB, total: 3 * MIB };
        let mut l = ContributorLedger::default();
        assert!(l.charge(id(1), key(1), ip(1), "r", 2 * MIB, 0));
        assert!(l.check(&budget, &key(1), ip(1), &id(2), 0).is_ok(), "nothing incoming always fits");
        let full = l.check(&budget, &key(1), ip(1), &id(2), 1).unwrap_err();
        assert_eq!((full.scope, full.held, full.budget), (ContributorScope::Author, 2 * MIB, 2 * MIB));
        assert!(full.to_string().starts_with("this server keeps 2 MiB of pull request data from npub1"), "{full}");
        assert!(full.to_string().contains("close the pull requests"), "{full}");
        assert!(l.check(&budget, &key(2), ip(1), &id(2), MIB).is_ok(), "exactly at the address budget");
        assert_eq!(l.check(&budget, &key(2), ip(1), &id(2), MIB + 1).unwrap_err().scope, ContributorScope::Address);
        assert_eq!(l.check(&budget, &key(2), None, &id(2), MIB + 1).unwrap_err().scope, ContributorScope::Total);
        assert!(l.check(&budget, &key(2), None, &id(2), MIB).is_ok(), "an unknown address counts in the total only");
        l.assert_consistent();
    }

    #[test]
    fn entries_leave_with_their_bytes_and_merges_leave_by_reconciliation() {
        let mut l = ContributorLedger::default();
        l.charge(id(1), key(1), ip(1), "r", MIB, 0);
        l.charge(id(1), key(9), ip(9), "other", MIB, 0);
        assert_eq!(l.get(&id(1)).unwrap().author, key(1), "an entry keeps its author");
        assert_eq!(l.held(&key(1), ip(1)), (2 * MIB, 2 * MIB, 2 * MIB));
        l.charge(id(2), key(1), None, "r", MIB, 0);
        assert_eq!(l.set_bytes(&id(1), MIB / 2), Some(2 * MIB));
        assert_eq!(l.held(&key(1), ip(1)), (MIB + MIB / 2, MIB / 2, MIB + MIB / 2));
        assert_eq!(l.set_bytes(&id(2), 0), Some(MIB), "merged: maintainers' refs reach it all");
        assert!(l.get(&id(2)).is_none());
        assert_eq!(l.remove(&id(1)).unwrap().bytes, MIB / 2);
        assert_eq!(l.held(&key(1), ip(1)), (0, 0, 0));
        assert_eq!(l.view(&ContributorBudget::default(), 5).authors, 0);
        l.assert_consistent();
    }

    #[test]
    fn closed_pull_requests_are_due_after_the_grace() {
        let mut l = ContributorLedger::default();
        l.charge(id(1), key(1), ip(1), "r", MIB, 0);
        l.charge(id(2), key(1), ip(1), "r", MIB, 0);
        assert!(l.mark_closed(&id(1), 1_000));
        assert!(!l.mark_closed(&id(1), 5_000), "the first status starts the grace");
        assert!(l.due_for_prune(1_000 + 99, 100).is_empty());
        assert_eq!(l.due_for_prune(1_100, 100), [(id(1), "r".to_string())]);
        assert!(l.mark_open(&id(1)));
        assert!(l.due_for_prune(u64::MAX, 100).is_empty(), "reopened: kept");
        let view = l.view(&ContributorBudget::default(), 1);
        assert_eq!((view.pull_requests, view.closed, view.top_authors.len()), (2, 0, 1));
    }

    #[test]
    fn the_file_round_trips_and_keeps_the_sums() {
        let mut l = ContributorLedger::default();
        l.charge(id(1), key(1), ip(1), "r", MIB, 0);
        l.charge(id(2), key(2), None, "s", 3, 0);
        l.mark_closed(&id(2), 7);
        let json = serde_json::to_string(&l.to_file()).unwrap();
        let back = ContributorLedger::from_file(serde_json::from_str(&json).unwrap());
        back.assert_consistent();
        assert_eq!(back.to_file(), l.to_file());
        assert_eq!(back.held(&key(1), ip(1)), (MIB, MIB, MIB + 3));
    }

    proptest! {
        #[test]
        fn charging_a_push_at_once_is_charging_a_copy_one_by_one(
            before in proptest::collection::vec((0u8..6, 0u8..3, 0u8..3, 0u64..400), 0..8),
            push in proptest::collection::vec((0u8..6, 0u8..3, 0u64..400), 0..5),
            from in proptest::option::of(0u8..3),
        ) {
            let budget = ContributorBudget { per_author: 700, per_address: 900, total: 1500 };
            let mut l = ContributorLedger::default();
            for (n, who, at, bytes) in before {
                l.charge(id(n), key(who), ip(at), "r", bytes, 0);
            }
            let address = from.and_then(ip);
            let charges: Vec<Charge> = push.iter().map(|(n, who, bytes)| Charge { id: id(*n), author: key(*who), identifier: "r".into(), bytes: *bytes }).collect();
            let mut copy = l.clone();
            let naive = charges.iter().try_for_each(|c| {
                copy.check(&budget, &c.author, address, &c.id, c.bytes)?;
                copy.charge(c.id, c.author, address, &c.identifier, c.bytes, 1);
                Ok::<(), ContributorFull>(())
            });
            let mut at_once = l.clone();
            let got = at_once.charge_all(&budget, &charges, address, 1);
            prop_assert_eq!(got.is_ok(), naive.is_ok());
            let expected = if naive.is_ok() { copy } else { l };
            prop_assert_eq!(at_once.to_file(), expected.to_file());
            at_once.assert_consistent();
        }

        #[test]
        fn sums_follow_any_sequence(ops in proptest::collection::vec((0u8..4, 0u8..6, 0u8..3, 0u8..3, 0u64..1000), 0..60)) {
            let mut l = ContributorLedger::default();
            for (op, n, who, from, bytes) in ops {
                match op {
                    0 => { l.charge(id(n), key(who), ip(from), "r", bytes, 0); }
                    1 => { l.set_bytes(&id(n), bytes); }
                    2 => { l.remove(&id(n)); }
                    _ => { l.mark_closed(&id(n), bytes); }
                }
                l.assert_consistent();
            }
        }

        #[test]
        fn accepted_exactly_when_every_sum_fits(a in 0u64..1 << 40, d in 0u64..1 << 40, t in 0u64..1 << 40, mine in 0u64..1 << 40, theirs in proptest::option::of(0u64..1 << 40), all in 0u64..1 << 40, incoming in 0u64..1 << 40) {
            let budget = ContributorBudget { per_author: a, per_address: d, total: t };
            let fits = incoming == 0 || (mine + incoming <= a && theirs.is_none_or(|x| x + incoming <= d) && all + incoming <= t);
            prop_assert_eq!(budget.check((key(1), mine), theirs, all, incoming).is_ok(), fits);
        }
    }
}
