//! Who may publish authoritative state for `/<owner>/<identifier>.git`: the confirmed
//! maintainers (docs/protocol.md#maintainer-authority, decision 4).
//!
//! The rule is NIP-34's reciprocal one, as ngit 3 (the client) and the reference server decide
//! it, computed from the identifier's announcements (stored and held), each read into
//! [`crate::nostr::roles::Claims`]:
//!
//! 1. **Seed**: the owner, unless the owner's announcement names another lead with an active
//!    `M`: then the `M` links are followed to an author whose own announcement names itself
//!    with an active `M`. A missing, conflicting or cyclic path, or a seed who declined, seeds
//!    nobody (the repository has no maintainer until it is repaired).
//! 2. **Confirmation**, to a fixed point: a key X joins when some confirmed member's
//!    announcement lists X as an active maintainer **and** X's own announcement lists some
//!    confirmed member back (`ngit repo accept`). A key that declined by its own record (left,
//!    moderator only) never joins. Reachability is not enough: in a cycle of invitees nobody
//!    joins.
//! 3. Listed keys that did not join are **invited** (no announcement yet, or one that lists no
//!    member back) or **left** (their own record declines).
//!
//! The computation is a worklist: each confirmed member's list is read once, each listed key's
//! own list once, so the work is proportional to the lists of the members and invitees, never to
//! the identifier's other announcements. It is bounded: at most [`MAX_MAINTAINERS`] members and
//! [`MAX_WORK`] list entries read, whatever a hostile web of announcements holds. The order of
//! work follows the lists' tag order, so the result depends only on the announcements, not on
//! the order in which they arrived.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use nostr::prelude::PublicKey;

use crate::names::identifier::npub_of;
use crate::nostr::roles::{ClaimsRef, Lead};

/// Cap on the number of confirmed maintainers of one repository.
pub const MAX_MAINTAINERS: usize = 1000;

/// Cap on the list entries one computation reads (members' lists and invitees' lists).
pub const MAX_WORK: usize = 200_000;

/// Where a key stands with one repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// A confirmed maintainer: their state events are authoritative.
    Maintainer,
    /// Listed by confirmed maintainer `by`, but their own announcement does not list a
    /// confirmed maintainer back (or they have none): `ngit repo accept` confirms them.
    Invited { by: PublicKey },
    /// Listed by a confirmed maintainer, but their own announcement ends their maintainer role
    /// (`ngit repo leave`) or holds only a moderator role.
    Left,
    /// Not listed by any confirmed maintainer.
    Stranger,
}

impl Standing {
    /// Why a state event by `author` moves nothing in `repo` (`<npub>/<identifier>`, owned by
    /// `owner`), in one line that says what to do; `None` for a maintainer.
    pub fn refusal(&self, author: &PublicKey, owner: &PublicKey, repo: &str) -> Option<String> {
        let npub = npub_of(author);
        match self {
            Standing::Maintainer => None,
            Standing::Invited { by } => Some(format!(
                "{npub} is invited as a maintainer of {repo} by {} but has not accepted: its state events move nothing \
                 until it runs `ngit repo accept`, then pushes again",
                npub_of(by)
            )),
            Standing::Left => Some(format!(
                "{npub} left the maintainers of {repo} (its own announcement ends its maintainer role): its state events \
                 move nothing; ask a maintainer to invite it again, then run `ngit repo accept`"
            )),
            Standing::Stranger => Some(format!(
                "{npub} is not a maintainer of {repo}: ask its owner {} to invite you \
                 (`ngit repo edit --add-maintainer {npub}`) and accept with `ngit repo accept`, or open a pull request",
                npub_of(owner)
            )),
        }
    }
}

/// The confirmed maintainers of one owner's repository, and the keys listed but not confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainerSet {
    owner: PublicKey,
    seed: Option<PublicKey>,
    members: BTreeSet<PublicKey>,
    /// Listed by a confirmed member, not confirmed: invitee -> the first member listing them.
    invited: BTreeMap<PublicKey, PublicKey>,
    /// Listed by a confirmed member, declined by their own record.
    left: BTreeSet<PublicKey>,
    truncated: bool,
}

impl MaintainerSet {
    /// The set of `owner`'s repository. `lookup(pk)` returns the claims of `pk`'s announcement
    /// for the identifier (stored or held, the newest), or `None` when `pk` has none.
    pub fn compute<'a>(owner: PublicKey, lookup: impl Fn(&PublicKey) -> Option<ClaimsRef<'a>>) -> Self {
        let mut set = MaintainerSet {
            owner,
            seed: seed(owner, &lookup),
            members: BTreeSet::new(),
            invited: BTreeMap::new(),
            left: BTreeSet::new(),
            truncated: false,
        };
        if set.seed.is_none() {
            if lookup(&owner).is_some_and(|c| c.declines) {
                set.left.insert(owner);
            }
            return set;
        }
        let mut work = 0usize;
        // Confirmed members whose lists are still to be read, in confirmation order.
        let mut queue: VecDeque<PublicKey> = VecDeque::new();
        // Invitees waiting for a key they list to be confirmed: that key -> the invitees.
        let mut waiting: HashMap<PublicKey, Vec<PublicKey>> = HashMap::new();
        let mut listed: HashSet<PublicKey> = HashSet::new();
        let confirm = |set: &mut MaintainerSet, queue: &mut VecDeque<PublicKey>, pk: PublicKey| {
            if set.members.len() >= MAX_MAINTAINERS {
                set.truncated = true;
                return;
            }
            if set.members.insert(pk) {
                set.invited.remove(&pk);
                queue.push_back(pk);
            }
        };
        let seed = set.seed.unwrap_or(owner);
        confirm(&mut set, &mut queue, seed);
        while let Some(member) = queue.pop_front() {
            for invitee in waiting.remove(&member).unwrap_or_default() {
                confirm(&mut set, &mut queue, invitee);
            }
            let Some(claims) = lookup(&member) else { continue };
            for candidate in claims.maintainers {
                work += 1;
                if work > MAX_WORK {
                    set.truncated = true;
                    return set;
                }
                if set.members.contains(candidate) || !listed.insert(*candidate) {
                    continue;
                }
                let Some(own) = lookup(candidate) else {
                    set.invited.insert(*candidate, member);
                    continue;
                };
                if own.declines {
                    set.left.insert(*candidate);
                    continue;
                }
                if own.maintainers.iter().any(|pk| set.members.contains(pk)) {
                    confirm(&mut set, &mut queue, *candidate);
                    continue;
                }
                set.invited.insert(*candidate, member);
                for pk in own.maintainers {
                    work += 1;
                    if work > MAX_WORK {
                        set.truncated = true;
                        return set;
                    }
                    waiting.entry(*pk).or_default().push(*candidate);
                }
            }
        }
        set
    }

    /// Is `pk` a confirmed maintainer (their state events are authoritative)?
    pub fn contains(&self, pk: &PublicKey) -> bool {
        self.members.contains(pk)
    }

    /// Where `pk` stands with this repository.
    pub fn standing(&self, pk: &PublicKey) -> Standing {
        if self.members.contains(pk) {
            Standing::Maintainer
        } else if let Some(by) = self.invited.get(pk) {
            Standing::Invited { by: *by }
        } else if self.left.contains(pk) {
            Standing::Left
        } else {
            Standing::Stranger
        }
    }

    /// The confirmed maintainers, in key order.
    pub fn iter(&self) -> impl Iterator<Item = &PublicKey> {
        self.members.iter()
    }

    /// Listed but not confirmed: invitee and the first confirmed maintainer listing them, in key
    /// order.
    pub fn invited(&self) -> impl Iterator<Item = (&PublicKey, &PublicKey)> {
        self.invited.iter()
    }

    /// Listed by a confirmed maintainer, but declined by their own record, in key order.
    pub fn left(&self) -> impl Iterator<Item = &PublicKey> {
        self.left.iter()
    }

    /// Number of confirmed maintainers.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// No confirmed maintainer: the owner's lead path is broken, or the owner left.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The repository owner the set was computed for.
    pub fn owner(&self) -> &PublicKey {
        &self.owner
    }

    /// Where confirmation started: the owner, or the lead the owner's `M` path ends at. `None`
    /// when that path is missing, conflicting or cyclic, or its end declined.
    pub fn seed(&self) -> Option<&PublicKey> {
        self.seed.as_ref()
    }

    /// True when the computation stopped at [`MAX_MAINTAINERS`] or [`MAX_WORK`].
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

/// The seed of `owner`'s repository (module docs, rule 1).
fn seed<'a>(owner: PublicKey, lookup: &impl Fn(&PublicKey) -> Option<ClaimsRef<'a>>) -> Option<PublicKey> {
    let mut current = owner;
    let mut followed = false;
    let mut visited = HashSet::new();
    loop {
        if !visited.insert(current) {
            return None;
        }
        let Some(claims) = lookup(&current) else {
            // An owner without an announcement seeds itself; a lead without one seeds nobody.
            return (!followed).then_some(current);
        };
        if claims.declines {
            return None;
        }
        match claims.lead {
            Lead::None => return (!followed).then_some(current),
            Lead::Conflict => return None,
            Lead::Named(target) if target == current => return Some(target),
            Lead::Named(target) => {
                followed = true;
                current = target;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nostr::roles::Claims;
    use nostr::prelude::Keys;

    fn keys(n: usize) -> Vec<PublicKey> {
        (0..n).map(|_| Keys::generate().public_key()).collect()
    }

    /// Announcements as claims: author -> (listed maintainers, lead, declines).
    type Web = HashMap<PublicKey, Claims>;

    fn lists(maintainers: &[PublicKey]) -> Claims {
        Claims { maintainers: maintainers.to_vec(), ..Claims::default() }
    }

    fn set(owner: PublicKey, web: &Web) -> MaintainerSet {
        MaintainerSet::compute(owner, |pk| web.get(pk).map(Claims::as_ref))
    }

    #[test]
    fn sole_owner_with_or_without_an_announcement() {
        let k = keys(2);
        for web in [Web::new(), Web::from([(k[0], lists(&[]))])] {
            let s = set(k[0], &web);
            assert_eq!(s.iter().collect::<Vec<_>>(), vec![&k[0]]);
            assert_eq!(s.seed(), Some(&k[0]));
            assert_eq!(s.owner(), &k[0]);
            assert_eq!(s.standing(&k[1]), Standing::Stranger);
            assert!(!s.is_truncated() && !s.is_empty() && s.len() == 1);
        }
    }

    #[test]
    fn a_listed_key_is_invited_until_it_lists_a_member_back() {
        let k = keys(3);
        let mut web = Web::from([(k[0], lists(&[k[1], k[2]]))]);
        let s = set(k[0], &web);
        assert_eq!(s.len(), 1);
        assert_eq!(s.standing(&k[1]), Standing::Invited { by: k[0] });
        // k[1] announces without listing anyone: still invited.
        web.insert(k[1], lists(&[]));
        assert_eq!(set(k[0], &web).standing(&k[1]), Standing::Invited { by: k[0] });
        // k[1] accepts (lists the owner back); k[2] lists k[1] back, confirmed through k[1].
        web.insert(k[1], lists(&[k[0]]));
        web.insert(k[2], lists(&[k[1]]));
        let s = set(k[0], &web);
        assert!(s.contains(&k[1]) && s.contains(&k[2]), "{s:?}");
        assert_eq!(s.invited().count(), 0);
    }

    #[test]
    fn a_cycle_of_invitees_confirms_nobody() {
        let k = keys(4);
        // The owner lists A; A lists B, B lists C, C lists A: none lists the owner back.
        let web = Web::from([(k[0], lists(&[k[1]])), (k[1], lists(&[k[2]])), (k[2], lists(&[k[3]])), (k[3], lists(&[k[1]]))]);
        let s = set(k[0], &web);
        assert_eq!(s.len(), 1);
        assert_eq!(s.standing(&k[1]), Standing::Invited { by: k[0] });
        assert_eq!(s.standing(&k[2]), Standing::Stranger, "listed only by an invitee");
        // A stranger's announcement listing the owner gives the stranger nothing in the owner's set.
        let web = Web::from([(k[0], lists(&[])), (k[1], lists(&[k[0]]))]);
        assert_eq!(set(k[0], &web).standing(&k[1]), Standing::Stranger);
        // ...and the owner nothing in the stranger's.
        assert_eq!(set(k[1], &web).standing(&k[0]), Standing::Invited { by: k[1] });
    }

    #[test]
    fn confirmation_through_a_later_member_waits_for_it() {
        // Owner lists A and B; B lists only A back; A lists the owner back. B joins after A.
        let k = keys(3);
        let web = Web::from([(k[0], lists(&[k[2], k[1]])), (k[1], lists(&[k[0]])), (k[2], lists(&[k[1]]))]);
        let s = set(k[0], &web);
        assert!(s.contains(&k[1]) && s.contains(&k[2]), "{s:?}");
    }

    #[test]
    fn declined_keys_never_join() {
        let k = keys(3);
        let left = Claims { maintainers: vec![k[0]], declines: true, ..Claims::default() };
        let web = Web::from([(k[0], lists(&[k[1]])), (k[1], left.clone())]);
        let s = set(k[0], &web);
        assert_eq!(s.standing(&k[1]), Standing::Left);
        assert_eq!(s.left().collect::<Vec<_>>(), vec![&k[1]]);
        // An owner who left their own repository seeds nobody.
        let web = Web::from([(k[0], left)]);
        let s = set(k[0], &web);
        assert!(s.is_empty() && s.seed().is_none());
        assert_eq!(s.standing(&k[0]), Standing::Left);
    }

    #[test]
    fn a_lead_path_seeds_its_end() {
        let k = keys(3);
        let points = |to: PublicKey, listed: &[PublicKey]| Claims { maintainers: listed.to_vec(), lead: Lead::Named(to), ..Claims::default() };
        // Owner names L as lead; L names itself and lists the owner: seed L, owner confirmed.
        let web = Web::from([(k[0], points(k[1], &[k[1]])), (k[1], points(k[1], &[k[0]]))]);
        let s = set(k[0], &web);
        assert_eq!(s.seed(), Some(&k[1]));
        assert!(s.contains(&k[0]) && s.contains(&k[1]));
        // L has not taken the lead (no self-M): nobody.
        let web = Web::from([(k[0], points(k[1], &[k[1]])), (k[1], lists(&[k[0]]))]);
        assert!(set(k[0], &web).is_empty());
        // L has no announcement: nobody.
        let web = Web::from([(k[0], points(k[1], &[k[1]]))]);
        assert!(set(k[0], &web).is_empty());
        // A cycle of leads, a conflict: nobody.
        let web = Web::from([(k[0], points(k[1], &[k[1]])), (k[1], points(k[2], &[k[2]])), (k[2], points(k[0], &[k[0]]))]);
        assert!(set(k[0], &web).is_empty());
        let conflict = Claims { maintainers: vec![k[1], k[2]], lead: Lead::Conflict, ..Claims::default() };
        assert!(set(k[0], &Web::from([(k[0], conflict)])).is_empty());
        // The owner naming itself lead.
        let web = Web::from([(k[0], points(k[0], &[]))]);
        assert_eq!(set(k[0], &web).seed(), Some(&k[0]));
    }

    #[test]
    fn refusals_say_what_to_do() {
        let k = keys(3);
        let (author, owner, by) = (k[0], k[1], k[2]);
        assert_eq!(Standing::Maintainer.refusal(&author, &owner, "o/r"), None);
        let invited = Standing::Invited { by }.refusal(&author, &owner, "o/r").unwrap();
        assert!(invited.contains(&npub_of(&by)) && invited.contains("ngit repo accept"), "{invited}");
        let left = Standing::Left.refusal(&author, &owner, "o/r").unwrap();
        assert!(left.contains("left the maintainers"), "{left}");
        let stranger = Standing::Stranger.refusal(&author, &owner, "o/r").unwrap();
        assert!(stranger.contains(&npub_of(&owner)) && stranger.contains("--add-maintainer"), "{stranger}");
    }

    #[test]
    fn bounded_by_members() {
        // A chain of acceptances far longer than the cap: each lists the previous and the next.
        let chain = keys(MAX_MAINTAINERS + 5);
        let mut web = Web::new();
        for (i, pk) in chain.iter().enumerate() {
            let mut listed = Vec::new();
            if i > 0 {
                listed.push(chain[i - 1]);
            }
            if let Some(next) = chain.get(i + 1) {
                listed.push(*next);
            }
            web.insert(*pk, lists(&listed));
        }
        let s = set(chain[0], &web);
        assert_eq!(s.len(), MAX_MAINTAINERS);
        assert!(s.is_truncated());
        assert!(s.contains(&chain[MAX_MAINTAINERS - 1]) && !s.contains(&chain[MAX_MAINTAINERS]));
    }

    #[test]
    fn bounded_by_work() {
        // The owner lists 1,000 invitees, each listing 300 keys that never answer.
        let owner = Keys::generate().public_key();
        let invitees = keys(1000);
        let noise = keys(300);
        let mut web = Web::from([(owner, lists(&invitees))]);
        for pk in &invitees {
            web.insert(*pk, lists(&noise));
        }
        let s = set(owner, &web);
        assert!(s.is_truncated());
        assert_eq!(s.len(), 1);
    }
}
