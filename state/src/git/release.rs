//! What to do when git data arrives in a repository (docs/protocol.md#release-and-alignment,
//! decision 7), as pure plans.
//!
//! The relay gathers the facts of one repository ([`RepoFacts`]: its refs and HEAD read once,
//! which of the wanted objects are missing, the held states and pull requests, the latest stored
//! state, whether the owner's announcement is held) and asks [`plan_release`]. The
//! [`ReleasePlan`] says which held states to store (oldest first, so the winner is stored last),
//! which held pull requests to release and which `refs/nostr/` ref each needs, how to align
//! branches, tags and HEAD to the winning state, and whether to promote the held announcement.
//! The other owners' repositories the winning state's objects go to are those whose confirmed
//! maintainers include its author (`crate::authority::announcements::owners_trusting`).

use std::collections::BTreeSet;

use nostr::prelude::EventId;

use crate::nostr::nip34::RepoState;
use crate::names::refs::{is_served_ref, served_refs, RefChange, RefMap, NOSTR_PREFIX, ZERO_OID};

/// Everything known about one repository when git data may have arrived.
#[derive(Debug, Clone, Copy)]
pub struct RepoFacts<'a> {
    /// Every ref of the repository, read once.
    pub refs: &'a RefMap,
    /// Where HEAD points (symbolic), if it does.
    pub head: Option<&'a str>,
    /// Held state events authored inside the owner's maintainer set (any order).
    pub held_states: &'a [RepoState],
    /// Held pull request events for this repository: (event id, `c` commit).
    pub held_prs: &'a [(EventId, String)],
    /// The newest stored state authored inside the owner's maintainer set.
    pub latest_stored: Option<&'a RepoState>,
    /// Which of [`wanted_oids`] the repository lacks; `None`: the repository could not be
    /// asked, so every object counts as missing.
    pub missing: Option<&'a BTreeSet<String>>,
    /// Is the owner's announcement held in the purgatory?
    pub announcement_held: bool,
}

impl RepoFacts<'_> {
    fn present(&self, oid: &str) -> bool {
        self.missing.is_some_and(|m| !m.contains(oid))
    }

    fn has_data(&self, state: &RepoState) -> bool {
        self.missing.is_some() && state.refs.values().all(|oid| self.present(oid))
    }
}

/// The objects to ask the repository about (sorted, once each): those of the held states, the
/// held pull requests and the latest stored state.
pub fn wanted_oids(held_states: &[RepoState], held_prs: &[(EventId, String)], latest_stored: Option<&RepoState>) -> Vec<String> {
    held_states
        .iter()
        .chain(latest_stored)
        .flat_map(|s| s.refs.values())
        .chain(held_prs.iter().map(|(_, commit)| commit))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A held pull request to release, with the ref change that makes `refs/nostr/<id>` point at its
/// commit (`None`: it already does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrRelease {
    pub event_id: EventId,
    pub change: Option<RefChange>,
}

/// Make branches, tags and HEAD match one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alignment {
    /// The state aligned to.
    pub state: EventId,
    /// Compare-and-swap changes of branches and tags, one transaction.
    pub changes: Vec<RefChange>,
    /// Point HEAD here (only when it points elsewhere now).
    pub head: Option<String>,
}

/// What to do with one repository's held events and refs, in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleasePlan {
    /// Held states whose objects all exist, to take out of the purgatory and store: oldest first
    /// (NIP-01 order), so the newest is stored last and wins.
    pub store: Vec<RepoState>,
    /// Held pull requests whose commit exists, each with its ref change.
    pub prs: Vec<PrRelease>,
    /// Alignment to the winner (the newest of the latest stored state and [`Self::store`]),
    /// if all its objects exist.
    pub align: Option<Alignment>,
    /// Take the owner's held announcement out and store it (the repository holds data).
    pub promote_announcement: bool,
}

/// Alignment and promotion once the states of a plan were stored; see [`settle`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    pub align: Option<Alignment>,
    pub promote_announcement: bool,
}

/// The plan for one repository. Pure; see the module docs.
pub fn plan_release(facts: &RepoFacts) -> ReleasePlan {
    let mut store: Vec<RepoState> = facts.held_states.iter().filter(|s| facts.has_data(s)).cloned().collect();
    crate::git::push::release_order(&mut store);
    let prs = facts
        .held_prs
        .iter()
        .filter_map(|(event_id, commit)| {
            let name = format!("{NOSTR_PREFIX}{}", event_id.to_hex());
            match pr_ref(&name, facts.refs.get(&name).map(String::as_str), commit, facts.present(commit)) {
                PrRef::Served => Some(PrRelease { event_id: *event_id, change: None }),
                PrRef::Set(change) => Some(PrRelease { event_id: *event_id, change: Some(change) }),
                PrRef::Missing { .. } => None,
            }
        })
        .collect();
    let Settled { align, promote_announcement } = settle(facts, &store);
    ReleasePlan { store, prs, align, promote_announcement }
}

/// Alignment and promotion given the states actually stored out of a plan (all of
/// [`ReleasePlan::store`] unless the store refused some): the winner is the newest of the latest
/// stored state and `stored`; the announcement is promoted once the repository serves refs or a
/// state exists.
pub fn settle(facts: &RepoFacts, stored: &[RepoState]) -> Settled {
    let winner = stored.iter().chain(facts.latest_stored).max_by_key(|s| s.recency());
    let align = winner.and_then(|state| plan_alignment(facts.refs, facts.head, state, facts.missing));
    let has_data = winner.is_some() || !served_refs(facts.refs).is_empty();
    Settled { align, promote_announcement: facts.announcement_held && has_data }
}

/// Does [`settle`] promote the announcement whatever states of the plan end up stored? Yes when
/// the repository already serves refs (after a push, typically): the announcement can then be
/// stored together with the states, in one store write, instead of after them.
pub fn promotion_is_certain(facts: &RepoFacts) -> bool {
    facts.announcement_held && !served_refs(facts.refs).is_empty()
}

/// The held states a promotion pass makes obsolete (docs/protocol.md#release-and-alignment): on
/// the exact coordinate (same author and `d` tag) of a state in `promoted` (stored by this pass),
/// those that lose to the newest promoted one in NIP-01 order and whose objects are still
/// missing here. Reconstructable predecessors (their objects are here), newer states and other
/// maintainers' states stay, as rollback candidates. Nothing is pruned when the repository could
/// not be asked.
pub fn superseded_held(facts: &RepoFacts, promoted: &[RepoState]) -> Vec<EventId> {
    if facts.missing.is_none() {
        return Vec::new();
    }
    let stored: BTreeSet<EventId> = promoted.iter().map(|s| s.event_id).collect();
    facts
        .held_states
        .iter()
        .filter(|held| !stored.contains(&held.event_id) && !facts.has_data(held))
        .filter(|held| {
            promoted
                .iter()
                .any(|p| p.author == held.author && p.identifier == held.identifier && held.recency() < p.recency())
        })
        .map(|held| held.event_id)
        .collect()
}

/// Alignment of `refs` (and HEAD) to `state`, if every object `state` names exists (`missing`
/// says which do not; `None`: unknown, no alignment).
pub fn plan_alignment(refs: &RefMap, head: Option<&str>, state: &RepoState, missing: Option<&BTreeSet<String>>) -> Option<Alignment> {
    let missing = missing?;
    if state.refs.values().any(|oid| missing.contains(oid)) {
        return None;
    }
    let head = head_for(state, head).filter(|h| head != Some(h.as_str()));
    Some(Alignment { state: state.event_id, changes: alignment(refs, &state.refs), head })
}

/// The changes that make `current`'s branches and tags equal `target` exactly
/// (refs outside refs/heads and refs/tags are left alone).
pub fn alignment(current: &RefMap, target: &RefMap) -> Vec<RefChange> {
    let mut changes = Vec::new();
    for (name, old) in current.iter().filter(|(n, _)| is_served_ref(n)) {
        if !target.contains_key(name) {
            changes.push(RefChange::Delete { name: name.clone(), old: old.clone() });
        }
    }
    for (name, new) in target {
        let old = current.get(name).cloned().unwrap_or_else(|| ZERO_OID.to_string());
        if &old != new {
            changes.push(RefChange::Set { name: name.clone(), old, new: new.clone() });
        }
    }
    changes
}

/// Where HEAD should point once the repository matches `state`: the branch the state names, if
/// it declares that branch; otherwise HEAD stays where it is if that branch exists, else the
/// first of `main`, `master` or any declared branch (so that clones check something out).
/// `None`: leave HEAD alone.
pub fn head_for(state: &RepoState, current: Option<&str>) -> Option<String> {
    if let Some(head) = state.head.as_deref().filter(|h| state.refs.contains_key(*h)) {
        return Some(head.to_string());
    }
    if current.is_some_and(|h| state.refs.contains_key(h)) {
        return current.map(str::to_string);
    }
    ["refs/heads/main", "refs/heads/master"]
        .into_iter()
        .find(|b| state.refs.contains_key(*b))
        .map(str::to_string)
        .or_else(|| state.refs.keys().find(|r| r.starts_with("refs/heads/")).cloned())
}

/// What a pull request's `refs/nostr/<id>` ref needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrRef {
    /// It points at the commit already.
    Served,
    /// The commit exists: this change points the ref at it.
    Set(RefChange),
    /// The commit is not here. `stale`: the ref points at another commit (a git-first push under
    /// this id brought the wrong one), this change removes it.
    Missing { stale: Option<RefChange> },
}

/// The ref `name` of a pull request whose commit is `commit`, given where it points now and
/// whether the commit exists.
pub fn pr_ref(name: &str, current: Option<&str>, commit: &str, commit_present: bool) -> PrRef {
    if current == Some(commit) {
        return PrRef::Served;
    }
    let old = current.unwrap_or(ZERO_OID).to_string();
    if commit_present {
        return PrRef::Set(RefChange::Set { name: name.to_string(), old, new: commit.to_string() });
    }
    PrRef::Missing { stale: current.map(|_| RefChange::Delete { name: name.to_string(), old }) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{Keys, PublicKey, Timestamp};

    /// The facts of a repository with `refs`, no HEAD, only held states, nothing stored.
    fn held_only<'a>(refs: &'a RefMap, held_states: &'a [RepoState], missing: Option<&'a BTreeSet<String>>, announcement_held: bool) -> RepoFacts<'a> {
        RepoFacts { refs, head: None, held_states, held_prs: &[], latest_stored: None, missing, announcement_held }
    }

    fn st(branches: &[&str], head: Option<&str>) -> RepoState {
        RepoState {
            event_id: EventId::from_slice(&[0; 32]).unwrap(),
            author: Keys::generate().public_key(),
            identifier: "r".into(),
            refs: branches.iter().map(|b| (b.to_string(), "a".repeat(40))).collect(),
            head: head.map(str::to_string),
            created_at: Timestamp::from_secs(1),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> RefMap {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn head_follows_the_state_or_falls_back_to_a_declared_branch() {
        let (main, dev, tag) = ("refs/heads/main", "refs/heads/dev", "refs/tags/v1");
        assert_eq!(head_for(&st(&[main, dev], Some(dev)), Some(main)).as_deref(), Some(dev));
        // HEAD naming an undeclared branch is ignored.
        assert_eq!(head_for(&st(&[main, dev], Some("refs/heads/gone")), Some(dev)).as_deref(), Some(dev));
        assert_eq!(head_for(&st(&[main, dev], None), Some("refs/heads/master")).as_deref(), Some(main));
        assert_eq!(head_for(&st(&["refs/heads/master", dev], None), None).as_deref(), Some("refs/heads/master"));
        assert_eq!(head_for(&st(&[dev, tag], None), Some("refs/heads/master")).as_deref(), Some(dev));
        assert_eq!(head_for(&st(&[tag], None), Some("refs/heads/master")), None);
        assert_eq!(head_for(&st(&[], None), None), None);
    }

    #[test]
    fn alignment_deletes_undeclared_and_sets_declared() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let current = map(&[("refs/heads/main", &a), ("refs/heads/old", &a), ("refs/nostr/x", &a)]);
        let target = map(&[("refs/heads/main", &b), ("refs/tags/v1", &a)]);
        let changes = alignment(&current, &target);
        assert_eq!(
            changes,
            vec![
                RefChange::Delete { name: "refs/heads/old".into(), old: a.clone() },
                RefChange::Set { name: "refs/heads/main".into(), old: a.clone(), new: b.clone() },
                RefChange::Set { name: "refs/tags/v1".into(), old: ZERO_OID.into(), new: a.clone() },
            ]
        );
        assert!(alignment(&target, &target).is_empty());
    }

    #[test]
    fn pull_request_refs() {
        let (c, d, name) = ("c".repeat(40), "d".repeat(40), "refs/nostr/x");
        assert_eq!(pr_ref(name, Some(&c), &c, false), PrRef::Served);
        assert_eq!(
            pr_ref(name, None, &c, true),
            PrRef::Set(RefChange::Set { name: name.into(), old: ZERO_OID.into(), new: c.clone() })
        );
        assert_eq!(
            pr_ref(name, Some(&d), &c, true),
            PrRef::Set(RefChange::Set { name: name.into(), old: d.clone(), new: c.clone() })
        );
        assert_eq!(pr_ref(name, None, &c, false), PrRef::Missing { stale: None });
        assert_eq!(
            pr_ref(name, Some(&d), &c, false),
            PrRef::Missing { stale: Some(RefChange::Delete { name: name.into(), old: d }) }
        );
    }

    #[test]
    fn a_promotion_prunes_only_older_states_of_its_coordinate_whose_objects_are_missing() {
        let (here, gone) = ("a".repeat(40), "b".repeat(40));
        let maintainer = Keys::generate().public_key();
        let state = |n: u8, author: PublicKey, secs: u64, oid: &str| RepoState {
            event_id: EventId::from_slice(&[n; 32]).unwrap(),
            author,
            identifier: "r".into(),
            refs: map(&[("refs/heads/main", oid)]),
            head: None,
            created_at: Timestamp::from_secs(secs),
        };
        let owner = Keys::generate().public_key();
        let promoted = state(1, owner, 20, &here);
        let older_missing = state(2, owner, 10, &gone);
        let older_here = state(3, owner, 15, &here);
        let newer_missing = state(4, owner, 30, &gone);
        let other_author = state(5, maintainer, 10, &gone);
        let mut other_d = state(6, owner, 10, &gone);
        other_d.identifier = "other".into();
        let held = [promoted.clone(), older_missing.clone(), older_here.clone(), newer_missing, other_author, other_d];
        let refs = RefMap::new();
        let missing: BTreeSet<String> = [gone.clone()].into();
        let facts = held_only(&refs, &held, Some(&missing), false);
        let plan = plan_release(&facts);
        assert_eq!(plan.store.iter().map(|s| s.event_id).collect::<Vec<_>>(), [older_here.event_id, promoted.event_id]);
        assert_eq!(superseded_held(&facts, &plan.store), [older_missing.event_id]);
        assert!(superseded_held(&facts, &[]).is_empty(), "nothing promoted, nothing pruned");
        assert!(superseded_held(&RepoFacts { missing: None, ..facts }, &plan.store).is_empty());
    }

    #[test]
    fn a_certain_promotion_holds_for_any_stored_subset() {
        let (a, b) = (st(&["refs/heads/main"], None), st(&["refs/heads/dev"], None));
        let held = [a.clone(), b.clone()];
        let none = BTreeSet::new();
        for (refs, held_announcement) in [
            (map(&[("refs/heads/main", &"a".repeat(40))]), true),
            (map(&[("refs/nostr/x", &"a".repeat(40))]), true),
            (RefMap::new(), true),
            (map(&[("refs/heads/main", &"a".repeat(40))]), false),
        ] {
            let facts = held_only(&refs, &held, Some(&none), held_announcement);
            if promotion_is_certain(&facts) {
                for stored in [&[][..], std::slice::from_ref(&a), &held[..]] {
                    assert!(settle(&facts, stored).promote_announcement, "{refs:?} {stored:?}");
                }
            }
            assert_eq!(promotion_is_certain(&facts), held_announcement && refs.contains_key("refs/heads/main"));
        }
    }

    #[test]
    fn unknown_objects_release_and_align_nothing() {
        let state = st(&["refs/heads/main"], None);
        let refs = RefMap::new();
        let facts = RepoFacts {
            refs: &refs,
            head: None,
            held_states: std::slice::from_ref(&state),
            held_prs: &[(state.event_id, "c".repeat(40))],
            latest_stored: None,
            missing: None,
            announcement_held: true,
        };
        let plan = plan_release(&facts);
        assert!(plan.store.is_empty() && plan.prs.is_empty() && plan.align.is_none());
        assert!(!plan.promote_announcement, "no data, no state: the announcement stays held");
    }
}
