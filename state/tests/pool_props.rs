//! Property tests (proptest) of the object pool decisions (docs/architecture.md, "Object pools").
//!
//! - `pool::entering` lets into the pool only refs a signed, stored event declares at exactly
//!   that object: never a staged ref (an undeclared branch, a push no state released, a
//!   git-first `refs/nostr/<id>` without its event), whatever the refs are.
//! - `pool::plan_promotion` makes the member's namespace in the pool equal its entering refs
//!   exactly, leaves every other member's refs alone, and packs only objects no pool ref names.
//! - `pool::plan_pool_gc` keeps every object any member's refs name (staged ones too) and every
//!   held object, leaves the pool with exactly the members' entering refs, and removes a pool only
//!   when no repository borrows from it and no ref is left.

use std::collections::{BTreeMap, BTreeSet};

use grasp_state::nostr::nip34::RepoState;
use grasp_state::git::pool::{entering, member_of, plan_pool_gc, plan_promotion, pool_ref, MemberView, Released, MEMBER_REFS};
use grasp_state::names::refs::{apply_changes, RefChange, RefMap, ZERO_OID};
use nostr::prelude::*;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

const OIDS: usize = 6;

fn oid(i: usize) -> String {
    format!("{:040x}", i + 1)
}

/// Ref names from a small pool, so that refs, declarations and pool refs collide often.
fn ref_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("refs/heads/main".to_string()),
        Just("refs/heads/dev".to_string()),
        Just("refs/tags/v1".to_string()),
        Just(format!("refs/nostr/{}", "1".repeat(64))),
        Just(format!("refs/nostr/{}", "2".repeat(64))),
        Just("refs/other/x".to_string()),
    ]
}

fn refs() -> impl Strategy<Value = RefMap> {
    proptest::collection::btree_map(ref_name(), (0..OIDS).prop_map(oid), 0..6)
}

fn state(refs: RefMap) -> RepoState {
    RepoState {
        event_id: EventId::from_slice(&[0; 32]).unwrap(),
        author: Keys::new(SecretKey::from_slice(&[1; 32]).unwrap()).public_key(),
        identifier: "r".into(),
        refs,
        head: None,
        created_at: Timestamp::from_secs(1),
    }
}

/// Stored states (up to two) and stored pull requests (id 1 or 2, some commit).
fn released() -> impl Strategy<Value = (Vec<RefMap>, Vec<(u8, String)>)> {
    (proptest::collection::vec(refs(), 0..3), proptest::collection::vec((1u8..3, (0..OIDS).prop_map(oid)), 0..3))
}

fn build((states, prs): &(Vec<RefMap>, Vec<(u8, String)>)) -> (Released, BTreeSet<(String, String)>) {
    let states: Vec<RepoState> = states.iter().cloned().map(state).collect();
    let ids: Vec<(EventId, String)> = prs
        .iter()
        .map(|(n, commit)| (EventId::from_hex(&n.to_string().repeat(64)).unwrap(), commit.clone()))
        .collect();
    // What a signed event declares, spelled out independently of `Released`.
    let mut declared: BTreeSet<(String, String)> = states
        .iter()
        .flat_map(|s| s.refs.iter())
        .filter(|(n, _)| n.starts_with("refs/heads/") || n.starts_with("refs/tags/"))
        .map(|(n, o)| (n.clone(), o.clone()))
        .collect();
    declared.extend(ids.iter().map(|(id, c)| (format!("refs/nostr/{}", id.to_hex()), c.clone())));
    (Released::new(states.iter(), ids), declared)
}

const MEMBERS: [&str; 3] = ["npub1a", "npub1b", "npub1c"];

/// A pool's refs: some members' namespaces (including one of a repository that is gone).
fn pool_refs() -> impl Strategy<Value = RefMap> {
    proptest::collection::btree_map(
        (prop_oneof![Just("npub1a"), Just("npub1b"), Just("npub1gone")], ref_name()).prop_filter_map("a pool ref", |(m, n)| pool_ref(m, &n)),
        (0..OIDS).prop_map(oid),
        0..6,
    )
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn only_declared_refs_enter_the_pool(member_refs in refs(), r in released()) {
        let (released, declared) = build(&r);
        let e = entering(&member_refs, &released);
        for (name, oid) in &e {
            prop_assert_eq!(member_refs.get(name), Some(oid), "entering refs are the member's own");
            prop_assert!(declared.contains(&(name.clone(), oid.clone())), "{} at {} was not signed for", name, oid);
        }
        // Every declared ref the member has at the declared object enters; nothing else does.
        for (name, oid) in &member_refs {
            let signed = declared.contains(&(name.clone(), oid.clone()));
            prop_assert_eq!(e.contains_key(name), signed, "{}", name);
        }
        prop_assert!(!e.contains_key("refs/other/x"));
    }

    #[test]
    fn a_promotion_sets_exactly_the_members_namespace(member_refs in refs(), r in released(), pool in pool_refs(), who in 0usize..3) {
        let member = MEMBERS[who];
        let (released, _) = build(&r);
        let p = plan_promotion(member, &member_refs, &released, &pool).unwrap();
        let after = apply_changes(&pool, &p.changes);
        let prefix = format!("{MEMBER_REFS}{member}/");
        let mine: RefMap = after.iter().filter(|(n, _)| n.starts_with(&prefix)).map(|(n, o)| (n.clone(), o.clone())).collect();
        let want: RefMap = entering(&member_refs, &released).iter().map(|(n, o)| (pool_ref(member, n).unwrap(), o.clone())).collect();
        prop_assert_eq!(mine, want);
        let others = |m: &RefMap| m.iter().filter(|(n, _)| !n.starts_with(&prefix)).map(|(n, o)| (n.clone(), o.clone())).collect::<RefMap>();
        prop_assert_eq!(others(&after), others(&pool), "other members' refs are untouched");
        // Compare-and-swap against the pool as read.
        for c in &p.changes {
            match c {
                RefChange::Set { name, old, .. } => prop_assert_eq!(pool.get(name).cloned().unwrap_or_else(|| ZERO_OID.to_string()), old.clone()),
                RefChange::Delete { name, old } => prop_assert_eq!(pool.get(name), Some(old)),
            }
        }
        let named: BTreeSet<&String> = pool.values().collect();
        for tip in &p.pack {
            prop_assert!(!named.contains(tip), "{} is named by a pool ref already", tip);
            prop_assert!(after.values().any(|o| o == tip), "a packed tip is named by a pool ref afterwards");
        }
        prop_assert_eq!(p.exclude.iter().collect::<BTreeSet<_>>(), named);
    }

    #[test]
    fn a_pool_gc_keeps_everything_a_member_or_the_purgatory_needs(
        views in proptest::collection::vec((refs(), released()), 0..3),
        pool in pool_refs(),
        held in proptest::collection::btree_set((0..OIDS).prop_map(oid), 0..3),
    ) {
        let built: Vec<(RefMap, Released)> = views.iter().map(|(refs, r)| (refs.clone(), build(r).0)).collect();
        let members: Vec<MemberView> = built.iter().enumerate().map(|(i, (refs, released))| MemberView { member: MEMBERS[i], refs, released }).collect();
        let gc = plan_pool_gc(&members, &pool, &held);
        for (refs, _) in &built {
            for oid in refs.values() {
                prop_assert!(gc.keep.contains(oid), "a member's ref object {} is not kept", oid);
            }
        }
        prop_assert!(held.iter().all(|o| gc.keep.contains(o)));
        let after = apply_changes(&pool, &gc.changes);
        let mut want = BTreeMap::new();
        for m in &members {
            want.extend(entering(m.refs, m.released).iter().map(|(n, o)| (pool_ref(m.member, n).unwrap(), o.clone())));
        }
        prop_assert_eq!(&after, &want, "the pool names exactly its members' entering refs");
        for name in after.keys() {
            let (member, _) = member_of(name).unwrap();
            prop_assert!(MEMBERS[..members.len()].contains(&member));
        }
        prop_assert_eq!(gc.remove_pool, members.is_empty() && after.is_empty());
        prop_assert!(!gc.remove_pool || pool.is_empty() || members.is_empty());
    }
}
