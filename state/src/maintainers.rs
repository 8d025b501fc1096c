//! The recursive maintainer set (docs/protocol.md#decisions, decision 4).
//!
//! For owner O and identifier d the set is O, plus every pubkey in the
//! `maintainers` tag of O's announcement for d, plus (recursively) the
//! maintainers listed in those maintainers' own announcements for d. Only O's
//! set authorises pushes to `/<npub of O>/<d>.git`.
//!
//! The walk is breadth-first, cycle-safe (each pubkey is expanded once) and
//! bounded: the set never grows past [`MAX_MAINTAINERS`] members, so a hostile
//! web of announcements cannot make authorisation expensive. Members closer to
//! the owner are added first, so truncation drops the most distant ones.

use std::collections::{BTreeSet, VecDeque};

use nostr::prelude::PublicKey;

/// Cap on the size of a maintainer set (owner included).
pub const MAX_MAINTAINERS: usize = 1000;

/// Who may authorise pushes to one owner's copy of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainerSet {
    owner: PublicKey,
    members: BTreeSet<PublicKey>,
    truncated: bool,
}

impl MaintainerSet {
    /// Walk the maintainer graph from `owner`. `lookup(pk)` returns the
    /// `maintainers` of `pk`'s announcement for the identifier in question
    /// (stored or in purgatory; the caller merges both), or `None` when `pk` has
    /// no announcement for it.
    pub fn compute(
        owner: PublicKey,
        lookup: impl Fn(&PublicKey) -> Option<Vec<PublicKey>>,
    ) -> Self {
        let mut members = BTreeSet::from([owner]);
        let mut queue = VecDeque::from([owner]);
        let mut truncated = false;
        'walk: while let Some(pk) = queue.pop_front() {
            for maintainer in lookup(&pk).unwrap_or_default() {
                if members.contains(&maintainer) {
                    continue;
                }
                if members.len() >= MAX_MAINTAINERS {
                    truncated = true;
                    break 'walk;
                }
                members.insert(maintainer);
                queue.push_back(maintainer);
            }
        }
        Self {
            owner,
            members,
            truncated,
        }
    }

    /// Is `pk` the owner or a (recursive) maintainer?
    pub fn contains(&self, pk: &PublicKey) -> bool {
        self.members.contains(pk)
    }

    /// All members, owner included, in key order.
    pub fn iter(&self) -> impl Iterator<Item = &PublicKey> {
        self.members.iter()
    }

    /// Number of members, owner included (never 0).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: the owner is a member. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The repository owner the set was computed for.
    pub fn owner(&self) -> &PublicKey {
        &self.owner
    }

    /// True when the walk stopped at [`MAX_MAINTAINERS`] and some listed
    /// maintainers were left out.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;
    use std::cell::Cell;
    use std::collections::HashMap;

    fn keys(n: usize) -> Vec<PublicKey> {
        (0..n).map(|_| Keys::generate().public_key()).collect()
    }

    fn set(owner: PublicKey, graph: &HashMap<PublicKey, Vec<PublicKey>>) -> MaintainerSet {
        MaintainerSet::compute(owner, |pk| graph.get(pk).cloned())
    }

    #[test]
    fn sole_owner() {
        let k = keys(2);
        let s = set(k[0], &HashMap::new());
        assert_eq!(s.len(), 1);
        assert!(s.contains(&k[0]));
        assert!(!s.contains(&k[1]));
        assert_eq!(s.owner(), &k[0]);
        assert!(!s.is_empty() && !s.is_truncated());
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![&k[0]]);
    }

    #[test]
    fn recursive_and_cyclic() {
        let k = keys(6);
        let graph = HashMap::from([
            (k[0], vec![k[1], k[2]]),
            (k[1], vec![k[3], k[0]]),
            (k[3], vec![k[1], k[3]]),
            (k[4], vec![k[5]]), // not reachable from k[0]
        ]);
        let s = set(k[0], &graph);
        assert_eq!(s.len(), 4);
        for pk in &k[..4] {
            assert!(s.contains(pk));
        }
        assert!(!s.contains(&k[4]) && !s.contains(&k[5]));
        // Another owner's set is computed from that owner.
        let s1 = set(k[1], &graph);
        assert!(s1.contains(&k[0]) && s1.contains(&k[2]) && s1.contains(&k[3]));
        let s4 = set(k[4], &graph);
        assert_eq!(s4.len(), 2);
        assert!(!s4.contains(&k[0]));
    }

    #[test]
    fn each_member_looked_up_once() {
        let k = keys(3);
        let graph = HashMap::from([
            (k[0], vec![k[1], k[2]]),
            (k[1], vec![k[0], k[2]]),
            (k[2], vec![k[0], k[1]]),
        ]);
        let calls = Cell::new(0);
        let s = MaintainerSet::compute(k[0], |pk| {
            calls.set(calls.get() + 1);
            graph.get(pk).cloned()
        });
        assert_eq!(s.len(), 3);
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn bounded() {
        // A chain far longer than the cap: owner -> m1 -> m2 -> ...
        let chain: Vec<PublicKey> = keys(MAX_MAINTAINERS + 5);
        let graph: HashMap<_, _> = chain.windows(2).map(|w| (w[0], vec![w[1]])).collect();
        let s = set(chain[0], &graph);
        assert_eq!(s.len(), MAX_MAINTAINERS);
        assert!(s.is_truncated());
        assert!(s.contains(&chain[MAX_MAINTAINERS - 1]));
        assert!(!s.contains(&chain[MAX_MAINTAINERS]));
    }

    #[test]
    fn closest_members_kept_when_truncated() {
        let many = keys(MAX_MAINTAINERS + 1);
        let owner = many[0];
        let near = many[1];
        let far = Keys::generate().public_key();
        // owner lists near first; near lists far; owner's own list overflows the cap.
        let mut owner_list = vec![near];
        owner_list.extend_from_slice(&many[2..]);
        let graph = HashMap::from([(owner, owner_list), (near, vec![far])]);
        let s = set(owner, &graph);
        assert!(s.is_truncated());
        assert!(s.contains(&near));
        assert!(!s.contains(&far));
        assert_eq!(s.len(), MAX_MAINTAINERS);
    }
}
