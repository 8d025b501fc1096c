//! The announcements of one identifier as the relay sees them: stored and held merged, newest
//! per owner, and what follows from them (maintainer sets, who trusts an author).
//!
//! The relay gathers the stored announcements (event store) and the held ones (purgatory) and
//! asks [`merge`]; every rule that needs "the announcements of this identifier" takes the merged
//! list (docs/protocol.md#purgatory: held announcements count for authorisation).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use nostr::prelude::PublicKey;

use crate::authority::maintainers::{MaintainerSet, Standing};
use crate::nostr::nip34::{Announcement, Source};
use crate::nostr::roles::Claims;

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

/// The confirmed maintainers of `owner`'s repository for an identifier, given its announcements
/// (the merged list of [`merge`]).
pub fn maintainer_set(owner: PublicKey, announcements: &[(Announcement, Source)]) -> MaintainerSet {
    // The set reads claims by author only: no reverse index needed.
    let claims: HashMap<PublicKey, &Claims> = announcements.iter().map(|(a, _)| (a.owner, &a.claims)).collect();
    MaintainerSet::compute(owner, |pk| claims.get(pk).map(|c| c.as_ref()))
}

/// Owners (with an announcement for the identifier) whose maintainer set contains `author`, in
/// owner order ([`TrustIndex::owners_trusting`]).
pub fn owners_trusting(author: &PublicKey, announcements: &[(Announcement, Source)]) -> Vec<(PublicKey, Source)> {
    TrustIndex::new(announcements).owners_trusting(author)
}

/// Who trusts whom among the owners of one identifier, indexed backwards: for each key, the owners
/// whose announcement lists it as maintainer. An author is confirmed in an owner's set only if
/// the owner's announcement reaches the author in the "lists as maintainer" graph (the seed's
/// `M` path is listed too), so the owners that may trust an author are found by walking back from
/// the author, and each is then confirmed with its own (bounded) maintainer set: the work is
/// proportional to the owners an event may govern, not to every owner of the identifier (a
/// thousand throwaway announcements of someone's identifier cost that someone's events nothing).
#[derive(Debug, Clone, Default)]
pub struct TrustIndex<'a> {
    claims: HashMap<PublicKey, &'a Claims>,
    listed_by: HashMap<PublicKey, Vec<PublicKey>>,
    owners: BTreeMap<PublicKey, Source>,
}

impl<'a> TrustIndex<'a> {
    /// The index of `announcements` (the merged list of one identifier, newest per owner).
    pub fn new(announcements: &'a [(Announcement, Source)]) -> Self {
        let mut index = TrustIndex::default();
        for (a, source) in announcements {
            index.owners.insert(a.owner, *source);
            index.claims.insert(a.owner, &a.claims);
            for m in &a.claims.maintainers {
                index.listed_by.entry(*m).or_default().push(a.owner);
            }
        }
        index
    }

    /// The confirmed maintainers of `owner`'s repository (as [`maintainer_set`]).
    pub fn maintainer_set(&self, owner: PublicKey) -> MaintainerSet {
        MaintainerSet::compute(owner, |pk| self.claims.get(pk).map(|c| c.as_ref()))
    }

    /// Owners whose maintainer set contains `author`, in owner order, each with where its
    /// announcement lives. Walks back from `author` to the owners that reach it, then confirms
    /// each with its own (bounded) maintainer set, so a set truncated at its cap gives the same
    /// answer as computing every owner's set. An author who lists nobody can be confirmed only
    /// as a seed, of their own repository or as the end of a lead path.
    pub fn owners_trusting(&self, author: &PublicKey) -> Vec<(PublicKey, Source)> {
        self.standings(author)
            .into_iter()
            .filter(|(_, _, standing)| *standing == Standing::Maintainer)
            .map(|(owner, source, _)| (owner, source))
            .collect()
    }

    /// Where `author` stands with each owner's repository that lists it, directly or through
    /// others (the owners that reach it, in owner order); every other owner's repository counts
    /// it a stranger.
    pub fn standings(&self, author: &PublicKey) -> Vec<(PublicKey, Source, Standing)> {
        self.owners_reaching(author)
            .into_iter()
            .map(|owner| (owner, self.owners[&owner], self.maintainer_set(owner).standing(author)))
            .collect()
    }

    /// The owners whose announcements reach `pk` along "lists as maintainer" (`pk` itself when
    /// it owns one), in owner order: the only repositories whose maintainer sets read `pk`'s
    /// announcement, so the only ones a change of it can change.
    pub fn owners_reaching(&self, pk: &PublicKey) -> BTreeSet<PublicKey> {
        let mut reached: BTreeSet<PublicKey> = BTreeSet::new();
        let mut queue = vec![*pk];
        let mut seen: HashSet<PublicKey> = HashSet::from([*pk]);
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
    }

    /// Owners whose maintainer set contains any of `authors`, in owner order (each once).
    pub fn owners_trusting_any<'b>(&self, authors: impl IntoIterator<Item = &'b PublicKey>) -> Vec<(PublicKey, Source)> {
        let mut out: BTreeMap<PublicKey, Source> = BTreeMap::new();
        for author in authors {
            out.extend(self.owners_trusting(author));
        }
        out.into_iter().collect()
    }
}

/// What `author`'s announcement becoming `new` (its claims) changes, `before` being the
/// identifier's merged announcements until then (docs/protocol.md#maintainer-authority). Only the
/// owners reaching `author` can see a difference (a set reads only announcements reached from its
/// owner), and they are the same before and after (`author`'s own list changes where paths from
/// it go, not which paths reach it): they are found once, and the work is the owners a change can
/// concern, never the identifier's other announcements.
pub struct AnnouncementChange<'a> {
    author: &'a PublicKey,
    new: &'a Claims,
    before: &'a [(Announcement, Source)],
    claims: HashMap<PublicKey, &'a Claims>,
    reaching: BTreeSet<PublicKey>,
}

impl<'a> AnnouncementChange<'a> {
    pub fn new(author: &'a PublicKey, new: &'a Claims, before: &'a [(Announcement, Source)]) -> Self {
        let claims = before.iter().map(|(a, _)| (a.owner, &a.claims)).collect();
        AnnouncementChange { author, new, before, claims, reaching: owners_reaching(author, before) }
    }

    /// The owners whose confirmed maintainers change, in owner order: the repositories whose
    /// served refs may have to follow (`author`'s own included when it comes to be).
    pub fn changed_owners(&self) -> Vec<PublicKey> {
        let mut owners = self.reaching.clone();
        owners.insert(*self.author);
        owners.into_iter().filter(|owner| self.members(*owner, false) != self.members(*owner, true)).collect()
    }

    /// The owners other than `author` whose confirmed maintainers include `author` after the
    /// change (an accepted invitation), each with where its announcement lives, in owner order.
    pub fn confirming_owners(&self) -> Vec<(PublicKey, Source)> {
        self.reaching
            .iter()
            .filter(|owner| *owner != self.author)
            .filter(|owner| self.members(**owner, true).is_some_and(|m| m.contains(self.author)))
            .filter_map(|owner| self.before.iter().find(|(a, _)| a.owner == *owner).map(|(_, source)| (*owner, *source)))
            .collect()
    }

    /// The confirmed maintainers of `owner`'s repository before or after the change (`None`:
    /// no such repository).
    fn members(&self, owner: PublicKey, after: bool) -> Option<Vec<PublicKey>> {
        let owns = self.claims.contains_key(&owner) || (after && owner == *self.author);
        owns.then(|| {
            MaintainerSet::compute(owner, |pk| match after && pk == self.author {
                true => Some(self.new.as_ref()),
                false => self.claims.get(pk).map(|c| c.as_ref()),
            })
            .iter()
            .copied()
            .collect()
        })
    }
}

/// Levels of "who lists these" answered by scanning `announcements` before the reverse index is
/// built instead (most keys are listed by nobody, or by one owner who is listed by nobody).
const REACH_SCANS: usize = 3;

/// [`TrustIndex::owners_reaching`] without building the index: one scan of the lists per level
/// of the walk back from `pk` (a key is usually reached in one or two), the index past
/// `REACH_SCANS` levels. The same answer either way.
pub fn owners_reaching(pk: &PublicKey, announcements: &[(Announcement, Source)]) -> BTreeSet<PublicKey> {
    let mut reached: BTreeSet<PublicKey> = announcements.iter().filter(|(a, _)| a.owner == *pk).map(|(a, _)| a.owner).collect();
    let mut seen: HashSet<PublicKey> = HashSet::from([*pk]);
    let mut frontier: Vec<PublicKey> = vec![*pk];
    for _ in 0..REACH_SCANS {
        if frontier.is_empty() {
            return reached;
        }
        let lookup: HashSet<PublicKey> = frontier.iter().copied().collect();
        let lists = |m: &PublicKey| if frontier.len() <= 4 { frontier.contains(m) } else { lookup.contains(m) };
        let next: Vec<PublicKey> = announcements
            .iter()
            .filter(|(a, _)| !seen.contains(&a.owner) && a.claims.maintainers.iter().any(lists))
            .map(|(a, _)| a.owner)
            .collect();
        seen.extend(next.iter().copied());
        reached.extend(next.iter().copied());
        frontier = next;
    }
    if frontier.is_empty() {
        reached
    } else {
        TrustIndex::new(announcements).owners_reaching(pk)
    }
}

/// Is `who` the owner of, or listed as maintainer in, any of `announcements` (an announcement
/// by them that no longer lists this service is still stored: decision 3; an invitee's
/// acceptance is stored so, wherever it is hosted)?
pub fn is_owner_or_listed(who: &PublicKey, announcements: &[(Announcement, Source)]) -> bool {
    announcements.iter().any(|(a, _)| a.owner == *who || a.claims.maintainers.contains(who))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventId, Keys, Timestamp};

    fn listing(owner: PublicKey, listed: &[PublicKey], n: u8) -> (Announcement, Source) {
        let claims = Claims { maintainers: listed.to_vec(), ..Claims::default() };
        let a = Announcement {
            event_id: EventId::from_byte_array([n; 32]),
            owner,
            identifier: "r".into(),
            clone_urls: Vec::new(),
            relays: Vec::new(),
            claims,
            created_at: Timestamp::from(1),
        };
        (a, Source::Stored)
    }

    #[test]
    fn an_accepted_invitation_is_confirmed_by_its_inviter() {
        let (owner, invitee, stranger) = (Keys::generate().public_key(), Keys::generate().public_key(), Keys::generate().public_key());
        let before = vec![listing(owner, &[invitee], 1)];
        let accept = Claims { maintainers: vec![owner], ..Claims::default() };
        let change = AnnouncementChange::new(&invitee, &accept, &before);
        assert_eq!(change.confirming_owners(), vec![(owner, Source::Stored)]);
        // The owner's set changes, and the invitee's own (new) repository comes to be.
        let changed = change.changed_owners();
        assert!(changed.contains(&owner) && changed.contains(&invitee) && changed.len() == 2, "{changed:?}");
        // A stranger listing the owner is confirmed by nobody.
        assert!(AnnouncementChange::new(&stranger, &accept, &before).confirming_owners().is_empty());
        // Neither is an announcement that lists nobody back.
        let nobody = Claims::default();
        assert!(AnnouncementChange::new(&invitee, &nobody, &before).confirming_owners().is_empty());
    }

    #[test]
    fn a_walk_deeper_than_the_scans_uses_the_index_and_agrees() {
        // k0 <- k1 <- ... <- k7: each lists the previous one.
        let k: Vec<PublicKey> = (0..8).map(|_| Keys::generate().public_key()).collect();
        let all: Vec<_> = (1..8).map(|i| listing(k[i], &[k[i - 1]], i as u8)).collect();
        let reached = owners_reaching(&k[0], &all);
        assert_eq!(reached.len(), 7);
        assert_eq!(reached, TrustIndex::new(&all).owners_reaching(&k[0]));
        assert_eq!(owners_reaching(&k[6], &all), BTreeSet::from([k[6], k[7]]));
    }
}
