//! The announcements of one identifier as the relay sees them: stored and held merged, newest
//! per owner, and what follows from them (maintainer sets, who trusts an author).
//!
//! The relay gathers the stored announcements (event store) and the held ones (purgatory) and
//! asks [`merge`]; every rule that needs "the announcements of this identifier" takes the merged
//! list (docs/protocol.md#purgatory: held announcements count for authorisation).

use std::collections::{BTreeMap, HashMap};

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

/// Owners (with an announcement for the identifier) whose maintainer set contains `author`.
/// The listing is built once for all owners, and an owner trusts itself without a walk.
pub fn owners_trusting(author: &PublicKey, announcements: &[(Announcement, Source)]) -> Vec<(PublicKey, Source)> {
    let listed = listing(announcements);
    announcements
        .iter()
        .filter(|(a, _)| a.owner == *author || maintainer_set_in(a.owner, &listed).contains(author))
        .map(|(a, s)| (a.owner, *s))
        .collect()
}

/// Is `who` the owner of, or listed as maintainer in, any of `announcements` (an announcement
/// by them that no longer lists this service is still stored: decision 3)?
pub fn is_owner_or_listed(who: &PublicKey, announcements: &[(Announcement, Source)]) -> bool {
    announcements.iter().any(|(a, _)| a.owner == *who || a.maintainers.contains(who))
}
