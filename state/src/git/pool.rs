//! One object store per identifier family, as pure decisions (docs/architecture.md, "Object
//! pools").
//!
//! The repositories of every owner of one identifier borrow the objects a signed event released
//! from one pool repository (`RepoLayout::pool_path`). Two decisions are made here, from data the
//! relay gathers:
//!
//! - **What enters the pool** ([`entering`], [`plan_promotion`]): of a member's refs, only those
//!   whose name and object a signed, stored event governing that repository declares ([`Released`]:
//!   the stored states of its owner's maintainer set, the stored pull requests for it). Everything
//!   else is *staged*: it stays in the repository that received it (a git-first `refs/nostr/<id>`
//!   push, a push a held state has not released yet, GRASP-06 `/prs/` uploads, whatever anyone
//!   pushes without a state). The pool records each member's entering refs under
//!   `refs/members/<member>/...` ([`pool_ref`]), so a gc in the pool sees them.
//! - **What a gc in the pool keeps** ([`plan_pool_gc`]): the pool's refs are set to every
//!   member's entering refs (refs of repositories that are no member any more go), and the prune
//!   keeps besides them everything any member's refs reach, staged refs included, and every
//!   object the relay holds for the family (held states, held pull requests, placeholders).

use std::collections::BTreeSet;

use nostr::prelude::EventId;

use crate::nostr::nip34::RepoState;
use crate::names::refs::{is_served_ref, is_valid_ref_name, RefChange, RefMap, NOSTR_PREFIX, ZERO_OID};

/// Where the pool records its members' refs: `refs/members/<member>/<ref without refs/>`.
pub const MEMBER_REFS: &str = "refs/members/";

/// What signed, stored events declare for one member repository: every (ref, object) of the
/// stored states of its owner's maintainer set, and `refs/nostr/<id>` at the `c` commit of each
/// stored pull request for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    refs: BTreeSet<(String, String)>,
}

impl Released {
    /// From the stored states governing the repository (any number: one per author is what the
    /// store keeps) and the stored pull requests for it (event id, `c` commit).
    pub fn new<'a>(states: impl IntoIterator<Item = &'a RepoState>, prs: impl IntoIterator<Item = (EventId, String)>) -> Self {
        let mut refs: BTreeSet<(String, String)> =
            states.into_iter().flat_map(|s| s.refs.iter().filter(|(name, _)| is_served_ref(name)).map(|(n, o)| (n.clone(), o.clone()))).collect();
        refs.extend(prs.into_iter().map(|(id, commit)| (format!("{NOSTR_PREFIX}{}", id.to_hex()), commit)));
        Released { refs }
    }

    /// Does a signed, stored event declare `name` at `oid`?
    pub fn declares(&self, name: &str, oid: &str) -> bool {
        self.refs.contains(&(name.to_string(), oid.to_string()))
    }

    /// Nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }
}

/// The refs of `member_refs` that enter the pool: a branch or tag, or a `refs/nostr/<id>`, at
/// exactly the object a signed, stored event declares for it ([`Released`]). Every other ref is
/// staged and stays in the member.
pub fn entering(member_refs: &RefMap, released: &Released) -> RefMap {
    member_refs
        .iter()
        .filter(|(name, oid)| (is_served_ref(name) || name.starts_with(NOSTR_PREFIX)) && released.declares(name, oid))
        .map(|(n, o)| (n.clone(), o.clone()))
        .collect()
}

/// The pool's namespace of one member: `refs/members/<member>/`. `None` when `member` is not
/// one plain ref component (an npub always is).
fn namespace(member: &str) -> Option<String> {
    let ok = !member.is_empty() && !member.contains('/') && is_valid_ref_name(&format!("{MEMBER_REFS}{member}"));
    ok.then(|| format!("{MEMBER_REFS}{member}/"))
}

/// The pool ref recording `member`'s ref `name`: `refs/members/<member>/<name without refs/>`.
/// `None` for a name outside `refs/` or an unusable member name.
pub fn pool_ref(member: &str, name: &str) -> Option<String> {
    let rest = name.strip_prefix("refs/")?;
    let full = format!("{}{rest}", namespace(member)?);
    is_valid_ref_name(&full).then_some(full)
}

/// The member a pool ref belongs to, and the member's ref name.
pub fn member_of(pool_ref: &str) -> Option<(&str, String)> {
    let (member, rest) = pool_ref.strip_prefix(MEMBER_REFS)?.split_once('/')?;
    (!member.is_empty() && !rest.is_empty()).then(|| (member, format!("refs/{rest}")))
}

/// What one promotion of a member into its pool does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Promotion {
    /// The entering refs' objects no pool ref names yet, sorted, once each: the tips to pack.
    /// Empty: no pack is written.
    pub pack: Vec<String>,
    /// Every object a pool ref names, sorted, once each: the pack leaves out what they reach.
    pub exclude: Vec<String>,
    /// Compare-and-swap changes that make the member's namespace in the pool equal its
    /// entering refs exactly; other members' refs are untouched.
    pub changes: Vec<RefChange>,
    /// A pool ref of this member moved or went: objects it reached may now be reached by no
    /// pool ref (a shrink of the pool may reclaim them).
    pub refs_left: bool,
}

/// The promotion of `member` (its refs `member_refs`, what signed events declare for it
/// `released`) into a pool whose refs are `pool_refs`. `None` when `member` cannot name a pool
/// namespace.
pub fn plan_promotion(member: &str, member_refs: &RefMap, released: &Released, pool_refs: &RefMap) -> Option<Promotion> {
    let prefix = namespace(member)?;
    let target: RefMap = entering(member_refs, released)
        .into_iter()
        .filter_map(|(name, oid)| Some((pool_ref(member, &name)?, oid)))
        .collect();
    let changes = namespace_changes(&prefix, pool_refs, &target);
    let refs_left = changes.iter().any(|c| match c {
        RefChange::Delete { .. } => true,
        RefChange::Set { old, .. } => old != ZERO_OID,
    });
    let pooled: BTreeSet<&String> = pool_refs.values().collect();
    let pack: BTreeSet<String> = target.values().filter(|oid| !pooled.contains(oid)).cloned().collect();
    Some(Promotion {
        pack: pack.into_iter().collect(),
        exclude: pooled.into_iter().cloned().collect(),
        changes,
        refs_left,
    })
}

/// The changes that make the refs of `pool_refs` under `prefix` equal `target` (whose names all
/// start with `prefix`).
fn namespace_changes(prefix: &str, pool_refs: &RefMap, target: &RefMap) -> Vec<RefChange> {
    let mut changes = Vec::new();
    for (name, old) in pool_refs.range(prefix.to_string()..).take_while(|(n, _)| n.starts_with(prefix)) {
        if !target.contains_key(name) {
            changes.push(RefChange::Delete { name: name.clone(), old: old.clone() });
        }
    }
    for (name, new) in target {
        let old = pool_refs.get(name).cloned().unwrap_or_else(|| ZERO_OID.to_string());
        if &old != new {
            changes.push(RefChange::Set { name: name.clone(), old, new: new.clone() });
        }
    }
    changes
}

/// One member repository as a gc of its pool sees it, read under its locks.
#[derive(Debug, Clone, Copy)]
pub struct MemberView<'a> {
    /// The member's name in the pool's refs (its owner's npub).
    pub member: &'a str,
    /// Every ref of the repository, staged ones included.
    pub refs: &'a RefMap,
    /// What signed, stored events declare for it.
    pub released: &'a Released,
}

/// What a gc of a pool does, decided with every member locked (no push in flight to any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolGc {
    /// Compare-and-swap changes of the pool's `refs/members/` refs: each member's namespace
    /// equals its entering refs; the namespaces of repositories that are no member any more go.
    /// The pool's other refs are untouched.
    pub changes: Vec<RefChange>,
    /// What the prune keeps besides the pool's refs: every member ref's object (staged refs
    /// included: their history may reach into the pool) and every held object.
    pub keep: BTreeSet<String>,
    /// No repository borrows from the pool and it has no ref left: remove it.
    pub remove_pool: bool,
}

/// The gc of a pool whose refs are `pool_refs`, with `members` (every repository borrowing from
/// it, read now) and `held` (objects held states, held pull requests and placeholders of the
/// family name).
pub fn plan_pool_gc(members: &[MemberView], pool_refs: &RefMap, held: &BTreeSet<String>) -> PoolGc {
    let mut changes = Vec::new();
    let mut keep: BTreeSet<String> = held.clone();
    let mut known: BTreeSet<&str> = BTreeSet::new();
    for m in members {
        keep.extend(m.refs.values().cloned());
        let Some(promotion) = plan_promotion(m.member, m.refs, m.released, pool_refs) else { continue };
        known.insert(m.member);
        changes.extend(promotion.changes);
    }
    // Namespaces of repositories that are no member any more (deleted, never joined again).
    for (name, old) in pool_refs.range(MEMBER_REFS.to_string()..).take_while(|(n, _)| n.starts_with(MEMBER_REFS)) {
        let gone = match member_of(name) {
            Some((member, _)) => !known.contains(member),
            None => true,
        };
        if gone {
            changes.push(RefChange::Delete { name: name.clone(), old: old.clone() });
        }
    }
    let after = crate::names::refs::apply_changes(pool_refs, &changes);
    PoolGc { remove_pool: members.is_empty() && after.is_empty(), changes, keep }
}

/// Whether a release shares its objects through the family's pool: once a pool exists, every
/// release goes into it; before, a pool is made only when the released state is to be brought
/// into another owner's repository (the targets on disk: co-maintainers, owners trusting its
/// author). A repository nobody else follows keeps its one copy, whatever strangers announce.
pub fn family_shares(copy_targets: usize, pool_exists: bool) -> bool {
    pool_exists || copy_targets >= 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::refs::apply_changes;
    use nostr::prelude::{Keys, Timestamp};

    fn map(pairs: &[(&str, &str)]) -> RefMap {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    fn state(refs: &[(&str, &str)]) -> RepoState {
        RepoState {
            event_id: EventId::from_slice(&[1; 32]).unwrap(),
            author: Keys::generate().public_key(),
            identifier: "r".into(),
            refs: map(refs),
            head: None,
            created_at: Timestamp::from_secs(1),
        }
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

    #[test]
    fn only_what_a_signed_event_declares_enters() {
        let pr = EventId::from_slice(&[7; 32]).unwrap();
        let placeholder = EventId::from_slice(&[8; 32]).unwrap();
        let released = Released::new([&state(&[("refs/heads/main", A), ("refs/tags/v1", B)])], [(pr, C.to_string())]);
        let refs = map(&[
            ("refs/heads/main", A),
            ("refs/tags/v1", A), // not at the declared object: a push no state released yet
            ("refs/heads/wip", B), // undeclared
            (&format!("refs/nostr/{}", pr.to_hex()), C),
            (&format!("refs/nostr/{}", placeholder.to_hex()), C), // git-first, no event
        ]);
        let e = entering(&refs, &released);
        assert_eq!(e, map(&[("refs/heads/main", A), (&format!("refs/nostr/{}", pr.to_hex()), C)]));
        assert!(entering(&refs, &Released::default()).is_empty(), "nothing signed, nothing enters");
    }

    #[test]
    fn a_promotion_records_exactly_the_members_entering_refs() {
        let released = Released::new([&state(&[("refs/heads/main", B)])], []);
        let pool = map(&[("refs/members/npub1a/heads/main", A), ("refs/members/npub1a/heads/old", A), ("refs/members/npub1b/heads/main", B)]);
        let p = plan_promotion("npub1a", &map(&[("refs/heads/main", B), ("refs/heads/x", C)]), &released, &pool).unwrap();
        assert_eq!(p.pack, Vec::<String>::new(), "B is already named by a pool ref");
        assert_eq!(p.exclude, vec![A.to_string(), B.to_string()]);
        assert!(p.refs_left);
        let after = apply_changes(&pool, &p.changes);
        assert_eq!(after, map(&[("refs/members/npub1a/heads/main", B), ("refs/members/npub1b/heads/main", B)]));
        // A new member with new history: its tip is packed, nothing left.
        let released = Released::new([&state(&[("refs/heads/main", C)])], []);
        let p = plan_promotion("npub1c", &map(&[("refs/heads/main", C)]), &released, &pool).unwrap();
        assert_eq!(p.pack, vec![C.to_string()]);
        assert!(!p.refs_left);
        assert!(plan_promotion("a/b", &RefMap::new(), &released, &pool).is_none());
        assert!(plan_promotion("", &RefMap::new(), &released, &pool).is_none());
    }

    #[test]
    fn a_gc_keeps_every_members_refs_and_drops_gone_members() {
        let released = Released::new([&state(&[("refs/heads/main", A)])], []);
        let refs = map(&[("refs/heads/main", A), ("refs/nostr/x", C)]);
        let pool = map(&[("refs/members/npub1gone/heads/main", B), ("refs/members/npub1a/heads/main", A)]);
        let held: BTreeSet<String> = [B.to_string()].into();
        let gc = plan_pool_gc(&[MemberView { member: "npub1a", refs: &refs, released: &released }], &pool, &held);
        assert_eq!(gc.keep, [A, B, C].iter().map(|s| s.to_string()).collect());
        assert_eq!(apply_changes(&pool, &gc.changes), map(&[("refs/members/npub1a/heads/main", A)]));
        assert!(!gc.remove_pool);
        let gc = plan_pool_gc(&[], &pool, &BTreeSet::new());
        assert!(gc.remove_pool && apply_changes(&pool, &gc.changes).is_empty());
        assert!(family_shares(1, false) && family_shares(0, true) && !family_shares(0, false));
    }

    #[test]
    fn pool_refs_name_their_member() {
        assert_eq!(pool_ref("npub1a", "refs/heads/main").as_deref(), Some("refs/members/npub1a/heads/main"));
        assert_eq!(member_of("refs/members/npub1a/heads/main"), Some(("npub1a", "refs/heads/main".to_string())));
        assert_eq!(pool_ref("npub1a", "HEAD"), None);
        assert_eq!(member_of("refs/heads/main"), None);
        assert_eq!(member_of("refs/members/npub1a"), None);
    }
}
