//! The announcements of one identifier as the relay sees them: stored and held merged, newest
//! per owner, and what follows from them (maintainer sets, who trusts an author).
//!
//! The relay gathers the stored announcements (event store) and the held ones (purgatory) and
//! asks [`merge`]; every rule that needs "the announcements of this identifier" takes the merged
//! list (docs/protocol.md#purgatory: held announcements count for authorisation).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use nostr::prelude::PublicKey;

use crate::maintainers::MaintainerSet;
use crate::nip34::{Announcement, Source};

/// The announcements of `identifier`, newest per owner (NIP-01 order), each with where it lives.
/// A held announcement replaces a stored one of the same owner only if it is strictly newer.
/// Announcements of other identifiers are ignored. Sorted by owner.
pub fn merge(
    identifier: &str,
    stored: impl IntoIterator<Item = Announcement>,
    held: impl IntoIterator<Item = Announcement>,
) -> Vec<(Announcement, Source)> {
    let mut by_owner: BTreeMap<PublicKey, (Announcement, Source)> = BTreeMap::new();
    let sourced = stored
        .into_iter()
        .map(|a| (a, Source::Stored))
        .chain(held.into_iter().map(|a| (a, Source::Purgatory)));
    for (a, source) in sourced.filter(|(a, _)| a.identifier == identifier) {
        let newer = by_owner.get(&a.owner).is_none_or(|(old, _)| a.recency() > old.recency());
        if newer {
            by_owner.insert(a.owner, (a, source));
        }
    }
    by_owner.into_values().collect()
}

/// Who lists whom as maintainer, per owner with an announcement for the identifier.
fn listing(announcements: &[(Announcement, Source)]) -> HashMap<PublicKey, &[PublicKey]> {
    announcements.iter().map(|(a, _)| (a.owner, a.maintainers.as_slice())).collect()
}

fn maintainer_set_in(owner: PublicKey, listed: &HashMap<PublicKey, &[PublicKey]>) -> MaintainerSet {
    MaintainerSet::compute(owner, |pk| listed.get(pk).map(|m| m.to_vec()))
}

/// The recursive maintainer set of `owner` for an identifier, given its announcements.
pub fn maintainer_set(owner: PublicKey, announcements: &[(Announcement, Source)]) -> MaintainerSet {
    maintainer_set_in(owner, &listing(announcements))
}

/// Owners (with an announcement for the identifier) whose maintainer set contains `author`, in
/// owner order ([`TrustIndex::owners_trusting`]).
pub fn owners_trusting(author: &PublicKey, announcements: &[(Announcement, Source)]) -> Vec<(PublicKey, Source)> {
    TrustIndex::new(announcements).owners_trusting(author)
}

/// Who trusts whom among the owners of one identifier, indexed backwards: for each key, the owners
/// whose announcement lists it as maintainer. The owners whose recursive maintainer set contains
/// an author are those from which the author is reachable in the "lists as maintainer" graph, so
/// they are found by walking back from the author: the work is proportional to the owners an
/// event governs, not to every owner of the identifier (a thousand throwaway announcements of
/// someone's identifier cost that someone's events nothing).
#[derive(Debug, Clone, Default)]
pub struct TrustIndex {
    listed: HashMap<PublicKey, Vec<PublicKey>>,
    listed_by: HashMap<PublicKey, Vec<PublicKey>>,
    owners: BTreeMap<PublicKey, Source>,
}

impl TrustIndex {
    /// The index of `announcements` (the merged list of one identifier, newest per owner).
    pub fn new(announcements: &[(Announcement, Source)]) -> Self {
        let mut index = TrustIndex::default();
        for (a, source) in announcements {
            index.owners.insert(a.owner, *source);
            index.listed.insert(a.owner, a.maintainers.clone());
            for m in &a.maintainers {
                index.listed_by.entry(*m).or_default().push(a.owner);
            }
        }
        index
    }

    /// The recursive maintainer set of `owner` (as [`maintainer_set`]).
    pub fn maintainer_set(&self, owner: PublicKey) -> MaintainerSet {
        MaintainerSet::compute(owner, |pk| self.listed.get(pk).cloned())
    }

    /// Owners whose maintainer set contains `author`, in owner order, each with where its
    /// announcement lives. Walks back from `author` to the owners that reach it, then confirms
    /// each with its own (bounded) maintainer set, so a set truncated at its cap gives the same
    /// answer as computing every owner's set.
    pub fn owners_trusting(&self, author: &PublicKey) -> Vec<(PublicKey, Source)> {
        let mut reached: BTreeSet<PublicKey> = BTreeSet::new();
        let mut queue = vec![*author];
        let mut seen: HashSet<PublicKey> = HashSet::from([*author]);
        while let Some(pk) = queue.pop() {
            if self.owners.contains_key(&pk) {
                reached.insert(pk);
            }
            for owner in self.listed_by.get(&pk).into_iter().flatten() {
                if seen.insert(*owner) {
                    queue.push(*owner);
                }
            }
        }
        reached
            .into_iter()
            .filter(|owner| owner == author || self.maintainer_set(*owner).contains(author))
            .map(|owner| (owner, self.owners[&owner]))
            .collect()
    }

    /// Owners whose maintainer set contains any of `authors`, in owner order (each once).
    pub fn owners_trusting_any<'a>(&self, authors: impl IntoIterator<Item = &'a PublicKey>) -> Vec<(PublicKey, Source)> {
        let mut out: BTreeMap<PublicKey, Source> = BTreeMap::new();
        for author in authors {
            out.extend(self.owners_trusting(author));
        }
        out.into_iter().collect()
    }
}

/// Is `who` the owner of, or listed as maintainer in, any of `announcements` (an announcement
/// by them that no longer lists this service is still stored: decision 3)?
pub fn is_owner_or_listed(who: &PublicKey, announcements: &[(Announcement, Source)]) -> bool {
    announcements.iter().any(|(a, _)| a.owner == *who || a.maintainers.contains(who))
}
