//! Property tests (proptest) for what grasp-state reads from the network and decides.
//!
//! - `refs::parse_ref_updates` never panics on any input and round-trips well-formed lines.
//! - The NIP-34 parsers never panic on arbitrary tags, and what they accept keeps its promises.
//! - `push::decide_push`: an accepted push leaves the served refs equal to the matched
//!   candidate's refs exactly (or unchanged when nothing matched); with no candidates, any change
//!   of heads/tags is rejected.
//! - `release::plan_release`: stores only held states whose objects exist, oldest first with the
//!   winner last; aligns to exactly the winner's branches and tags (compare-and-swap against the
//!   refs read); releases pull requests only when their commit exists. `owners_trusting` names
//!   only owners whose confirmed maintainers include the state's author; the announcement merge keeps the
//!   newest per owner; announcement admission verdicts keep their promises.
//! - Identifier validation never accepts `/`, `\`, NUL, `.` or `..`; URL path parsing never
//!   yields an identifier or rest that could leave the git root.
//! - The purgatory model keeps its counts, caps and deadline bookkeeping under random operation
//!   sequences, and a long enough wait empties it.
//!
//! Case counts are kept modest so `cargo test -p grasp-state` stays fast.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use grasp_state::names::identifier::{
    parse_repo_url_path, percent_encode_segment, validate_identifier, npub_of,
};
use grasp_state::nostr::nip34::{references, Announcement, PullRequest, RepoState};
use grasp_state::purgatory::{Caps, ManualClock, Purgatory, PurgatoryConfig};
use grasp_state::nostr::nip34::Source;
use grasp_state::git::push::{decide_push, PushDecision, PushRequest, StateCandidate};
use grasp_state::authority::admission::{admit_announcement, AfterRepo, AnnouncementAdmission, AnnouncementFacts};
use grasp_state::authority::announcements::{maintainer_set, merge, owners_trusting, TrustIndex};
use grasp_state::nostr::roles::{Claims, Lead};
use grasp_state::git::release::{alignment, plan_release, settle, RepoFacts};
use grasp_state::names::refs::{
    apply_changes, RefChange, apply_updates, is_served_ref, is_valid_oid, is_valid_ref_name, parse_ref_updates,
    served_refs, RefMap, RefUpdate, ZERO_OID,
};
use nostr::prelude::*;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// A few fixed, valid public keys (computing keys is the slow part of building events).
fn pubkeys() -> &'static [PublicKey] {
    static KEYS: OnceLock<Vec<PublicKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (1u8..=4)
            .map(|i| Keys::new(SecretKey::from_slice(&[i; 32]).unwrap()).public_key())
            .collect()
    })
}

/// An unsigned look-alike event (the parsers never check signatures; the relay does first).
fn fake_event(author: usize, kind: u16, n: u64, tags: Vec<Tag>) -> Event {
    let mut id = [0u8; 32];
    id[..8].copy_from_slice(&n.to_be_bytes());
    id[8] = author as u8;
    id[9..11].copy_from_slice(&kind.to_be_bytes());
    Event::new(
        EventId::from_byte_array(id),
        pubkeys()[author % pubkeys().len()],
        Timestamp::from(1_700_000_000 + n),
        Kind::from_u16(kind),
        tags,
        "",
        Signature::from_slice(&[0u8; 64]).unwrap(),
    )
}

// ---------- strategies ----------

fn hex40() -> impl Strategy<Value = String> {
    "[0-9a-f]{40}"
}

fn oid() -> impl Strategy<Value = String> {
    prop_oneof![1 => Just(ZERO_OID.to_owned()), 4 => hex40()]
}

/// Ref names git accepts: `refs/(heads|tags|nostr|x)/seg(/seg)*`.
fn ref_name() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["heads", "tags", "nostr", "x"]),
        prop::collection::vec(
            "[a-zA-Z0-9_-]{1,6}(\\.[a-zA-Z0-9_-]{1,4})?".prop_filter("no .lock", |s: &String| !s.ends_with(".lock")),
            1..3,
        ),
    )
        .prop_map(|(ns, segs)| format!("refs/{ns}/{}", segs.join("/")))
}

/// Strings that look a bit like tag values: hex, refs, coordinates, URLs, junk.
fn tag_value() -> impl Strategy<Value = String> {
    prop_oneof![
        hex40(),
        "[0-9a-f]{64}",
        ref_name(),
        "ref: refs/heads/[a-z]{1,5}",
        "30617:[0-9a-f]{64}:[a-z./]{0,6}",
        "(https?|wss?)://[a-z.:0-9]{0,20}/?",
        ".{0,20}",
        Just(String::new()),
    ]
}

fn tag_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "d", "HEAD", "maintainers", "clone", "relays", "a", "c", "E", "e", "p", "refs/heads/main",
            "refs/tags/v1", "refs/heads/x^{}", "refs/heads/..", "name",
        ])
        .prop_map(str::to_owned),
        ref_name(),
        ".{0,10}",
    ]
}

fn tags() -> impl Strategy<Value = Vec<Tag>> {
    prop::collection::vec(
        (tag_name(), prop::collection::vec(tag_value(), 0..4)),
        0..12,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .filter_map(|(name, values)| {
                let mut t = vec![name];
                t.extend(values);
                Tag::parse(t).ok()
            })
            .collect()
    })
}

// ---------- refs ----------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn parse_ref_updates_never_panics(input in ".{0,300}") {
        let _ = parse_ref_updates(&input);
    }

    #[test]
    fn parse_ref_updates_never_panics_on_near_misses(
        lines in prop::collection::vec((oid(), "[0-9a-fA-F ]{0,42}", ".{0,30}", 0u8..4), 0..6)
    ) {
        let text: String = lines
            .iter()
            .map(|(a, b, c, sep)| match sep {
                0 => format!("{a} {b} {c}\n"),
                1 => format!("{a}  {b}\t{c}\r\n"),
                2 => format!("{a} {b}"),
                _ => format!("{c}\n\n"),
            })
            .collect();
        if let Ok(updates) = parse_ref_updates(&text) {
            for u in updates {
                prop_assert!(is_valid_oid(&u.old) && is_valid_oid(&u.new) && is_valid_ref_name(&u.name));
            }
        }
    }

    #[test]
    fn parse_ref_updates_round_trips_valid_lines(
        updates in prop::collection::vec((oid(), oid(), ref_name()), 0..8),
        crlf in any::<bool>(),
        blank_lines in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut text = String::new();
        for (old, new, name) in &updates {
            if blank_lines {
                text.push_str(eol);
            }
            text.push_str(&format!("{old} {new} {name}{eol}"));
        }
        let parsed = parse_ref_updates(&text).unwrap();
        let expected: Vec<RefUpdate> =
            updates.iter().map(|(o, n, r)| RefUpdate::new(o, n, r)).collect();
        prop_assert_eq!(parsed, expected);
    }
}

// ---------- NIP-34 parsers ----------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn nip34_parsers_never_panic_on_arbitrary_tags(
        tags in tags(),
        kind in prop::sample::select(vec![30617u16, 30618, 1618, 1619, 1621, 1, 5]),
        author in 0usize..4,
    ) {
        let event = fake_event(author, kind, 1, tags);
        let _ = references(&event);
        if let Ok(a) = Announcement::from_event(&event) {
            prop_assert_eq!(a.owner, event.pubkey);
            prop_assert!(!a.claims.maintainers.contains(&a.owner), "owner listed as its own maintainer");
            let unique: BTreeSet<_> = a.claims.maintainers.iter().collect();
            prop_assert_eq!(unique.len(), a.claims.maintainers.len(), "duplicate maintainers");
            let _ = a.lists_service("127.0.0.1:8080");
            let _ = a.coordinate();
        }
        if let Ok(s) = RepoState::from_event(&event) {
            for (name, oid) in &s.refs {
                prop_assert!(is_served_ref(name) && is_valid_ref_name(name), "{name} {oid}");
                // Lenient: a value that is not a full object id is kept (bounded) and makes the
                // state unsatisfiable, never a ref some repository could serve.
                prop_assert!(is_valid_oid(oid) || (!oid.is_empty() && oid.chars().count() <= 64 && !s.is_satisfiable()), "{name} {oid}");
            }
            if let Some(head) = &s.head {
                prop_assert!(head.starts_with("refs/heads/") && is_valid_ref_name(head));
            }
        }
        if let Ok(pr) = PullRequest::from_event(&event) {
            prop_assert!(is_valid_oid(&pr.commit));
        }
    }
}

// ---------- push decision ----------

const OIDS: [&str; 3] = [
    "1111111111111111111111111111111111111111",
    "2222222222222222222222222222222222222222",
    "3333333333333333333333333333333333333333",
];
const NAMES: [&str; 4] = ["refs/heads/main", "refs/heads/dev", "refs/tags/v1", "refs/nostr/x"];

/// Ref maps over a small name/oid pool so that matches actually happen.
fn small_refmap() -> impl Strategy<Value = RefMap> {
    prop::collection::btree_map(
        prop::sample::select(NAMES[..3].to_vec()).prop_map(str::to_owned),
        prop::sample::select(OIDS.to_vec()).prop_map(str::to_owned),
        0..3,
    )
}

fn small_updates(current: RefMap) -> impl Strategy<Value = (RefMap, Vec<RefUpdate>)> {
    prop::collection::btree_map(
        prop::sample::select(NAMES[..3].to_vec()).prop_map(str::to_owned),
        prop_oneof![1 => Just(ZERO_OID), 3 => prop::sample::select(OIDS.to_vec())].prop_map(str::to_owned),
        0..3,
    )
    .prop_map(move |news| {
        let updates = news
            .into_iter()
            .map(|(name, new)| {
                let old = current.get(&name).cloned().unwrap_or_else(|| ZERO_OID.to_owned());
                RefUpdate::new(old, new, name)
            })
            .collect();
        (current.clone(), updates)
    })
}

/// A state of `repo` by the first key, `t` seconds after the tests' epoch.
fn repo_state(id: [u8; 32], refs: RefMap, t: u64) -> RepoState {
    RepoState {
        event_id: EventId::from_byte_array(id),
        author: pubkeys()[0],
        identifier: "repo".to_owned(),
        refs,
        head: None,
        created_at: Timestamp::from(1_700_000_000 + t),
    }
}

fn candidates() -> impl Strategy<Value = Vec<StateCandidate>> {
    prop::collection::vec((small_refmap(), 0u64..3, any::<bool>()), 0..4).prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (refs, t, stored))| {
                let mut id = [0u8; 32];
                id[0] = i as u8 + 1;
                StateCandidate { state: repo_state(id, refs, t), source: if stored { Source::Stored } else { Source::Purgatory } }
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn accepted_push_serves_exactly_the_matched_state(
        (current, updates) in small_refmap().prop_flat_map(small_updates),
        candidates in candidates(),
    ) {
        let known = BTreeMap::new();
        let req = PushRequest { current: &current, updates: &updates, candidates: &candidates, known_prs: &known };
        let before = served_refs(&current);
        let after = served_refs(&apply_updates(&current, &updates));
        match decide_push(&req) {
            PushDecision::Accept(accepted) => match accepted.matched_state {
                Some((id, source)) => {
                    let matched = candidates
                        .iter()
                        .find(|c| c.state.event_id == id && c.source == source)
                        .expect("matched candidate is one of the inputs");
                    prop_assert_eq!(&after, &matched.state.refs);
                    // The newest matching state wins (NIP-01 order).
                    for c in candidates.iter().filter(|c| c.state.refs == after) {
                        prop_assert!(!c.state.is_newer_than(&matched.state));
                    }
                }
                None => {
                    prop_assert_eq!(&after, &before, "accepted a change of served refs with no matching state");
                    prop_assert!(candidates.iter().all(|c| c.state.refs != after));
                }
            },
            PushDecision::Reject(r) => {
                prop_assert!(!r.reasons.is_empty());
                prop_assert!(after != before, "rejected a push that changes nothing");
                prop_assert!(candidates.iter().all(|c| c.state.refs != after), "rejected although a state matches");
            }
        }
    }

    #[test]
    fn no_candidates_and_a_served_change_is_rejected(
        (current, updates) in small_refmap().prop_flat_map(small_updates),
    ) {
        let known = BTreeMap::new();
        let req = PushRequest { current: &current, updates: &updates, candidates: &[], known_prs: &known };
        let changed = served_refs(&apply_updates(&current, &updates)) != served_refs(&current);
        let rejected = matches!(decide_push(&req), PushDecision::Reject(_));
        prop_assert_eq!(rejected, changed);
    }

    #[test]
    fn decide_push_never_panics_on_arbitrary_updates(
        updates in prop::collection::vec((".{0,70}", ".{0,70}", ".{0,60}"), 0..5),
        candidates in candidates(),
    ) {
        let updates: Vec<RefUpdate> = updates.into_iter().map(|(o, n, r)| RefUpdate::new(o, n, r)).collect();
        let current = RefMap::new();
        let known = BTreeMap::new();
        let req = PushRequest { current: &current, updates: &updates, candidates: &candidates, known_prs: &known };
        if let PushDecision::Reject(r) = decide_push(&req) {
            prop_assert!(!r.reasons.is_empty());
        }
    }
}

// ---------- identifiers and URL paths ----------

/// Strings rich in the characters that matter for path escapes.
fn hostile_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("/".to_owned()),
            Just("\\".to_owned()),
            Just("\0".to_owned()),
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("%2f".to_owned()),
            Just("%2F".to_owned()),
            Just("%00".to_owned()),
            Just("%2e".to_owned()),
            Just("%5c".to_owned()),
            "[a-z0-9_-]{1,4}",
            ".{1,2}",
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn validate_identifier_never_accepts_path_tricks(s in prop_oneof![hostile_string(), ".{0,20}"]) {
        if validate_identifier(&s).is_ok() {
            prop_assert!(!s.contains(['/', '\\', '\0']), "{s:?}");
            prop_assert!(s != "." && s != "..", "{s:?}");
            prop_assert!(!s.is_empty());
        }
    }

    #[test]
    fn repo_url_paths_never_escape(ident in hostile_string(), rest in hostile_string()) {
        let npub = npub_of(&pubkeys()[0]);
        for path in [
            format!("/{npub}/{ident}.git{rest}"),
            format!("/{npub}/{ident}.git/{rest}"),
            format!("/{npub}/{ident}"),
            format!("/{ident}/{npub}/x.git/{rest}"),
        ] {
            if let Some(p) = parse_repo_url_path(&path) {
                prop_assert!(validate_identifier(&p.identifier).is_ok(), "{path:?} -> {:?}", p.identifier);
                prop_assert!(!p.rest.contains('\\') && !p.rest.contains('\0'), "{path:?}");
                prop_assert!(p.rest.split('/').all(|s| s != ".." && s != "."), "{path:?} -> rest {:?}", p.rest);
            }
        }
    }

    #[test]
    fn valid_identifiers_survive_url_encoding(ident in "[a-zA-Z0-9 ._~%#?&+=!@:;é漢-]{1,30}") {
        prop_assume!(validate_identifier(&ident).is_ok());
        let npub = npub_of(&pubkeys()[1]);
        let path = format!("/{npub}/{}.git/info/refs", percent_encode_segment(&ident));
        let parsed = parse_repo_url_path(&path).expect("a valid identifier, encoded, parses");
        prop_assert_eq!(parsed.identifier, ident);
        prop_assert_eq!(parsed.rest, "/info/refs");
    }
}

// ---------- purgatory model ----------

#[derive(Debug, Clone)]
enum Op {
    AddState { author: usize, ident: usize },
    AddAnnouncement { owner: usize, ident: usize },
    RemoveState { ident: usize, pick: usize },
    Promote { owner: usize, ident: usize },
    Advance { secs: u64 },
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..3, 0usize..3).prop_map(|(author, ident)| Op::AddState { author, ident }),
        2 => (0usize..3, 0usize..3).prop_map(|(owner, ident)| Op::AddAnnouncement { owner, ident }),
        2 => (0usize..3, 0usize..4).prop_map(|(ident, pick)| Op::RemoveState { ident, pick }),
        1 => (0usize..3, 0usize..3).prop_map(|(owner, ident)| Op::Promote { owner, ident }),
        2 => (0u64..1200).prop_map(|secs| Op::Advance { secs }),
        2 => Just(Op::Sweep),
    ]
}

const IDENTS: [&str; 3] = ["alpha", "beta", "gamma"];

fn check_invariants(p: &Purgatory, caps: &Caps) -> Result<(), TestCaseError> {
    let stats = p.stats();
    let states: usize = IDENTS.iter().map(|i| p.states_for(i).len()).sum();
    prop_assert_eq!(stats.states, states);
    prop_assert_eq!(stats.announcements, p.announcements().count());
    prop_assert_eq!(stats.deferred, 0);
    // Each entry is armed in the deadline set exactly once.
    prop_assert_eq!(stats.deadlines, stats.announcements + stats.states + stats.prs + stats.placeholders);
    // Soft-expired announcements leave the held caps and have a bound of their own.
    let soft = p.announcements().filter(|a| a.soft_expired).count();
    prop_assert!(soft <= caps.soft_expired);
    prop_assert!(stats.announcements - soft + stats.states + stats.prs <= caps.total);
    for pk in pubkeys() {
        let held = p.announcements().filter(|a| &a.owner == pk && !a.soft_expired).count()
            + IDENTS.iter().flat_map(|i| p.states_for(i)).filter(|s| &s.author == pk).count();
        prop_assert!(held <= caps.per_author, "{held} entries for one author");
    }
    prop_assert_eq!(p.listing().len(), stats.announcements + stats.states + stats.prs + stats.placeholders);
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn purgatory_keeps_its_books_under_random_operations(ops in prop::collection::vec(op(), 1..60)) {
        let caps = Caps { per_author: 4, total: 9, ..Caps::default() };
        let config = PurgatoryConfig { caps, ..PurgatoryConfig::default() };
        let clock = Arc::new(ManualClock::default());
        let mut p = Purgatory::new(config, clock.clone());
        let mut n = 0u64;
        for op in ops {
            n += 1;
            match op {
                Op::AddState { author, ident } => {
                    let event = fake_event(author, 30618, n, vec![]);
                    let before = p.stats();
                    match p.add_state(event.clone(), event.pubkey, IDENTS[ident].to_owned()) {
                        Ok(added) => prop_assert!(added),
                        Err(_) => prop_assert_eq!(p.stats(), before, "a refused add changed something"),
                    }
                }
                Op::AddAnnouncement { owner, ident } => {
                    let event = fake_event(owner, 30617, n, vec![]);
                    let _ = p.add_announcement(
                        event.clone(),
                        event.pubkey,
                        IDENTS[ident].to_owned(),
                        BTreeSet::new(),
                    );
                }
                Op::RemoveState { ident, pick } => {
                    let ids: Vec<EventId> = p.states_for(IDENTS[ident]).iter().map(|s| s.event.id).collect();
                    if let Some(id) = ids.get(pick) {
                        prop_assert!(p.remove_state_event(IDENTS[ident], id).is_some());
                        prop_assert!(p.states_for(IDENTS[ident]).iter().all(|s| &s.event.id != id));
                    }
                }
                Op::Promote { owner, ident } => {
                    let _ = p.promote_announcement(&pubkeys()[owner], IDENTS[ident]);
                }
                Op::Advance { secs } => clock.advance(Duration::from_secs(secs)),
                Op::Sweep => {
                    let _ = p.sweep();
                }
            }
            check_invariants(&p, &caps)?;
        }
        // Waiting past every deadline (entry TTL, then the soft-expiry TTL) empties it.
        clock.advance(config.entry_ttl + Duration::from_secs(1));
        let _ = p.sweep();
        clock.advance(config.soft_expiry_ttl + Duration::from_secs(1));
        let _ = p.sweep();
        let stats = p.stats();
        prop_assert_eq!(stats.announcements + stats.states + stats.prs + stats.placeholders, 0, "{:?}", stats);
        prop_assert_eq!(stats.deadlines, 0);
    }
}

// ---------- release plans, announcements, admission ----------

fn state_id(n: u8, salt: u8) -> EventId {
    let mut id = [0u8; 32];
    id[0] = salt;
    id[1] = n;
    EventId::from_byte_array(id)
}

/// States over the small ref pool; `salt` keeps ids of different lists apart.
fn states(salt: u8, max: usize) -> impl Strategy<Value = Vec<RepoState>> {
    prop::collection::vec((small_refmap(), 0u64..3, 0usize..4), 0..max).prop_map(move |raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (refs, t, author))| RepoState {
                event_id: state_id(i as u8, salt),
                author: pubkeys()[author],
                identifier: "repo".to_owned(),
                refs,
                head: None,
                created_at: Timestamp::from(1_700_000_000 + t),
            })
            .collect()
    })
}

/// Repository refs: served refs from the pool plus, sometimes, a pull request ref.
fn repo_refs() -> impl Strategy<Value = RefMap> {
    (small_refmap(), prop::option::of(prop::sample::select(OIDS.to_vec()))).prop_map(|(mut refs, pr)| {
        if let Some(oid) = pr {
            refs.insert(format!("refs/nostr/{}", state_id(0, 9).to_hex()), oid.to_owned());
        }
        refs
    })
}

#[derive(Debug, Clone)]
struct ReleaseCase {
    refs: RefMap,
    head: Option<String>,
    held: Vec<RepoState>,
    prs: Vec<(EventId, String)>,
    latest: Option<RepoState>,
    missing: Option<BTreeSet<String>>,
    announcement_held: bool,
}

impl ReleaseCase {
    fn facts(&self) -> RepoFacts<'_> {
        RepoFacts {
            refs: &self.refs,
            head: self.head.as_deref(),
            held_states: &self.held,
            held_prs: &self.prs,
            latest_stored: self.latest.as_ref(),
            missing: self.missing.as_ref(),
            announcement_held: self.announcement_held,
        }
    }

    fn present(&self, oid: &str) -> bool {
        self.missing.as_ref().is_some_and(|m| !m.contains(oid))
    }
}

fn release_case() -> impl Strategy<Value = ReleaseCase> {
    (
        repo_refs(),
        prop::option::of(prop::sample::select(vec!["refs/heads/main", "refs/heads/dev", "refs/heads/gone"])),
        states(1, 5),
        prop::collection::btree_map(0u8..3, prop::sample::select(OIDS.to_vec()), 0..3),
        prop::option::of(states(2, 2)),
        prop::option::of(prop::collection::btree_set(prop::sample::select(OIDS.to_vec()).prop_map(str::to_owned), 0..3)),
        any::<bool>(),
    )
        .prop_map(|(refs, head, held, prs, latest, missing, announcement_held)| ReleaseCase {
            refs,
            head: head.map(str::to_owned),
            held,
            prs: prs.into_iter().map(|(n, oid)| (state_id(n, 9), oid.to_owned())).collect(),
            latest: latest.and_then(|mut v| v.pop()),
            missing,
            announcement_held,
        })
}

/// The confirmed maintainers as the rule states them, computed the slow way: the seed by
/// following leads, then rounds over every announcement until nothing joins (docs/protocol.md,
/// "Maintainer authority").
fn confirmed_naive(owner: PublicKey, claims: &BTreeMap<PublicKey, Claims>) -> BTreeSet<PublicKey> {
    let mut seed = None;
    let (mut current, mut followed, mut visited) = (owner, false, BTreeSet::new());
    while visited.insert(current) {
        match claims.get(&current) {
            None => {
                seed = (!followed).then_some(current);
                break;
            }
            Some(c) if c.declines => break,
            Some(c) => match c.lead {
                Lead::None => {
                    seed = (!followed).then_some(current);
                    break;
                }
                Lead::Conflict => break,
                Lead::Named(t) if t == current => {
                    seed = Some(t);
                    break;
                }
                Lead::Named(t) => {
                    followed = true;
                    current = t;
                }
            },
        }
    }
    let mut confirmed: BTreeSet<PublicKey> = seed.into_iter().collect();
    loop {
        let joining: Vec<PublicKey> = claims
            .iter()
            .filter(|(x, c)| !confirmed.contains(*x) && !c.declines)
            .filter(|(x, c)| {
                let listed = confirmed.iter().any(|m| claims.get(m).is_some_and(|mc| mc.maintainers.contains(x)));
                listed && c.maintainers.iter().any(|y| confirmed.contains(y))
            })
            .map(|(x, _)| *x)
            .collect();
        if joining.is_empty() {
            return confirmed;
        }
        confirmed.extend(joining);
    }
}

/// An announcement's claims: listed maintainers, and sometimes a lead or a declining author.
fn claims_of(owner: usize, maintainers: &[usize], shape: u8) -> Claims {
    let listed: Vec<PublicKey> = maintainers.iter().filter(|m| **m != owner).map(|m| pubkeys()[*m]).collect();
    let mut unique = Vec::new();
    for pk in listed {
        if !unique.contains(&pk) {
            unique.push(pk);
        }
    }
    let lead = match shape % 8 {
        1 => Lead::Named(pubkeys()[owner]),
        2 => unique.first().map(|pk| Lead::Named(*pk)).unwrap_or_default(),
        3 if unique.len() > 1 => Lead::Conflict,
        _ => Lead::None,
    };
    Claims { maintainers: unique, lead, declines: shape % 8 == 7, role_tags: !shape.is_multiple_of(8), ..Claims::default() }
}

fn announcement(owner: usize, maintainers: &[usize], t: u64, n: u8) -> Announcement {
    let mut id = [0u8; 32];
    id[0] = 7;
    id[1] = owner as u8;
    id[2] = n;
    Announcement {
        event_id: EventId::from_byte_array(id),
        owner: pubkeys()[owner],
        identifier: "repo".to_owned(),
        clone_urls: Vec::new(),
        relays: Vec::new(),
        claims: claims_of(owner, maintainers, n.wrapping_mul(37).wrapping_add(t as u8)),
        created_at: Timestamp::from(1_700_000_000 + t),
    }
}

/// A tag as hostile clients write them: role letters, `maintainers`, keys in hex and npub,
/// garbage, timestamps, `defer` anywhere.
fn role_tag() -> impl Strategy<Value = Vec<String>> {
    let name = prop::sample::select(vec!["M", "m", "o", "maintainers", "d", "p"]);
    let value = prop_oneof![
        (0usize..4).prop_map(|i| pubkeys()[i].to_hex()),
        (0usize..4).prop_map(|i| pubkeys()[i].to_bech32().unwrap()),
        (0u64..10).prop_map(|t| t.to_string()),
        Just("defer".to_string()),
        Just(String::new()),
        "[a-z0-9+-]{0,6}",
    ];
    (name, prop::collection::vec(value, 0..5)).prop_map(|(name, values)| std::iter::once(name.to_string()).chain(values).collect())
}

fn announcement_list() -> impl Strategy<Value = Vec<Announcement>> {
    prop::collection::vec((0usize..4, prop::collection::vec(0usize..4, 0..3), 0u64..3), 0..6).prop_map(|raw| {
        raw.into_iter().enumerate().map(|(i, (owner, maintainers, t))| announcement(owner, &maintainers, t, i as u8)).collect()
    })
}

proptest! {
    #![proptest_config(config(512))]

    /// A release plan stores only held states whose objects all exist, oldest first, and aligns
    /// to the newest of them and the latest stored state: exactly that state's branches and
    /// tags, nothing else touched; a state with missing objects is never aligned to.
    #[test]
    fn release_plans_store_complete_states_oldest_first_and_align_to_the_winner(case in release_case()) {
        let plan = plan_release(&case.facts());
        let complete = |s: &RepoState| case.missing.is_some() && s.refs.values().all(|oid| case.present(oid));
        for s in &plan.store {
            prop_assert!(complete(s), "stored a state whose objects are missing: {s:?}");
        }
        let expected: BTreeSet<EventId> = case.held.iter().filter(|s| complete(s)).map(|s| s.event_id).collect();
        prop_assert_eq!(plan.store.iter().map(|s| s.event_id).collect::<BTreeSet<_>>(), expected);
        prop_assert!(plan.store.windows(2).all(|w| w[0].recency() < w[1].recency()), "not oldest first");
        let winner = plan.store.iter().chain(case.latest.as_ref()).max_by_key(|s| s.recency());
        if let Some(last) = plan.store.last() {
            prop_assert!(plan.store.iter().all(|s| s.recency() <= last.recency()), "the newest is stored last");
        }
        match (&plan.align, winner) {
            (Some(al), Some(w)) => {
                prop_assert_eq!(al.state, w.event_id);
                prop_assert!(complete(w));
                let after = apply_changes(&case.refs, &al.changes);
                prop_assert_eq!(served_refs(&after), w.refs.clone());
                let untouched = |m: &RefMap| m.iter().filter(|(n, _)| !is_served_ref(n)).map(|(a, b)| (a.clone(), b.clone())).collect::<Vec<_>>();
                prop_assert_eq!(untouched(&after), untouched(&case.refs));
                for change in &al.changes {
                    let old = match change { RefChange::Set { old, .. } | RefChange::Delete { old, .. } => old };
                    let now = case.refs.get(change.name()).map_or(ZERO_OID, String::as_str);
                    prop_assert_eq!(old.as_str(), now, "compare-and-swap against the refs read");
                }
                if let Some(h) = &al.head {
                    prop_assert!(w.refs.contains_key(h) && case.head.as_deref() != Some(h.as_str()));
                }
            }
            (None, Some(w)) => prop_assert!(!complete(w), "a complete winner must be aligned to"),
            (Some(_), None) => prop_assert!(false, "aligned without a state"),
            (None, None) => {}
        }
        let has_data = winner.is_some() || !served_refs(&case.refs).is_empty();
        prop_assert_eq!(plan.promote_announcement, case.announcement_held && has_data);
        // Settling with every planned state stored gives the plan's own alignment.
        let settled = settle(&case.facts(), &plan.store);
        prop_assert_eq!(settled.align, plan.align.clone());
    }

    /// Pull requests are released only when their ref already points at their commit or the
    /// commit exists; the change points the ref at the commit, compare-and-swap.
    #[test]
    fn release_plans_release_pull_requests_whose_commit_exists(case in release_case()) {
        let plan = plan_release(&case.facts());
        for (id, commit) in &case.prs {
            let name = format!("refs/nostr/{}", id.to_hex());
            let current = case.refs.get(&name);
            let released = plan.prs.iter().find(|p| p.event_id == *id);
            let releasable = current == Some(commit) || case.present(commit);
            prop_assert_eq!(released.is_some(), releasable);
            if let Some(change) = released.and_then(|p| p.change.clone()) {
                prop_assert_eq!(apply_changes(&case.refs, &[change])[&name].clone(), commit.clone());
            }
        }
    }

    /// Alignment makes exactly the target's branches and tags, whatever the current refs.
    #[test]
    fn alignment_sets_exactly_the_target(current in repo_refs(), target in small_refmap()) {
        let after = apply_changes(&current, &alignment(&current, &target));
        prop_assert_eq!(served_refs(&after), target.clone());
        prop_assert!(alignment(&after, &target).is_empty(), "aligning twice changes nothing");
    }

    /// Objects are copied only to owners whose confirmed maintainers include the author.
    #[test]
    fn copies_go_only_to_owners_trusting_the_author(list in announcement_list(), author in 0usize..4) {
        let merged = merge("repo", list.clone(), Vec::new());
        let claims: BTreeMap<PublicKey, Claims> = merged.iter().map(|(a, _)| (a.owner, a.claims.clone())).collect();
        let author = pubkeys()[author];
        let trusting: Vec<PublicKey> = owners_trusting(&author, &merged).into_iter().map(|(o, _)| o).collect();
        let expected: Vec<PublicKey> = merged.iter().map(|(a, _)| a.owner).filter(|o| confirmed_naive(*o, &claims).contains(&author)).collect();
        prop_assert_eq!(trusting, expected);
    }

    /// The maintainer set is the rule's fixed point (the slow way agrees), and it does not
    /// depend on the order in which the announcements arrived.
    #[test]
    fn maintainer_sets_are_the_rules_fixed_point_whatever_the_arrival_order(list in announcement_list(), owner in 0usize..4, seed in any::<u64>()) {
        let merged = merge("repo", list.clone(), Vec::new());
        let claims: BTreeMap<PublicKey, Claims> = merged.iter().map(|(a, _)| (a.owner, a.claims.clone())).collect();
        let owner = pubkeys()[owner];
        let set = maintainer_set(owner, &merged);
        prop_assert_eq!(set.iter().copied().collect::<BTreeSet<_>>(), confirmed_naive(owner, &claims));
        let mut shuffled = list;
        let n = shuffled.len().max(1);
        shuffled.rotate_left((seed as usize) % n);
        if seed % 2 == 1 {
            shuffled.reverse();
        }
        prop_assert_eq!(maintainer_set(owner, &merge("repo", shuffled, Vec::new())), set);
    }

    /// The repositories an announcement's change concerns are exactly those whose confirmed
    /// maintainers differ before and after it (computed the slow way, owner by owner).
    #[test]
    fn authority_changes_are_the_owners_whose_sets_differ(list in announcement_list(), author in 0usize..4, listed in proptest::collection::vec(0usize..4, 0..3), n in any::<u8>()) {
        let before = merge("repo", list, Vec::new());
        let new = announcement(author, &listed, 10, n);
        let after = merge("repo", before.iter().map(|(a, _)| a.clone()), [new.clone()]);
        let sets = |merged: &[(Announcement, Source)], owner: PublicKey| -> Option<BTreeSet<PublicKey>> {
            merged.iter().any(|(a, _)| a.owner == owner).then(|| maintainer_set(owner, merged).iter().copied().collect())
        };
        let owners: BTreeSet<PublicKey> = before.iter().map(|(a, _)| a.owner).chain([new.owner]).collect();
        let expected: Vec<PublicKey> = owners.into_iter().filter(|o| sets(&before, *o) != sets(&after, *o)).collect();
        prop_assert_eq!(grasp_state::authority::announcements::AnnouncementChange::new(&new.owner, &new.claims, &before).changed_owners(), expected);
    }

    /// Walking back by scans finds the owners the reverse index finds, however deep.
    #[test]
    fn owners_reaching_by_scans_equals_the_index(list in announcement_list(), pk in 0usize..4) {
        let merged = merge("repo", list, Vec::new());
        let pk = pubkeys()[pk];
        prop_assert_eq!(grasp_state::authority::announcements::owners_reaching(&pk, &merged), TrustIndex::new(&merged).owners_reaching(&pk));
    }

    /// Role tags: any tag list reads without panic, and every key an announcement grants comes
    /// from a well-formed, active `M`/`m` entry (or, without role tags, from a `maintainers` tag
    /// whose values are all keys).
    #[test]
    fn role_claims_grant_only_from_well_formed_entries(tags in proptest::collection::vec(role_tag(), 0..8), author in 0usize..4) {
        let author = pubkeys()[author];
        let claims = Claims::read(&author, tags.iter().map(Vec::as_slice));
        let role_tags = tags.iter().any(|t| matches!(t.first().map(String::as_str), Some("M" | "m" | "o")));
        prop_assert_eq!(claims.role_tags, role_tags);
        for pk in &claims.maintainers {
            prop_assert!(*pk != author);
            let granted_by = |t: &Vec<String>| {
                if role_tags {
                    matches!(t.first().map(String::as_str), Some("M" | "m"))
                        && t.get(1).and_then(|s| PublicKey::parse(s).ok()) == Some(*pk)
                        && grasp_state::nostr::roles::boundaries(&t[2..]).is_some_and(|b| grasp_state::nostr::roles::is_active(&b))
                } else {
                    t.first().map(String::as_str) == Some("maintainers")
                        && t[1..].iter().any(|s| PublicKey::parse(s).ok() == Some(*pk))
                }
            };
            prop_assert!(tags.iter().any(granted_by), "{pk} granted by nothing well-formed in {tags:?}");
        }
        if !role_tags && tags.iter().filter(|t| t[0] == "maintainers").flat_map(|t| t[1..].iter()).any(|s| PublicKey::parse(s).is_err()) {
            prop_assert!(claims.maintainers.is_empty());
        }
    }

    /// The trust index finds exactly the owners whose own maintainer set (computed owner by
    /// owner, as before the index) contains the author, for one author and for several.
    #[test]
    fn trust_index_equals_every_owners_maintainer_set(stored in announcement_list(), held in announcement_list(), authors in proptest::collection::vec(0usize..4, 0..4)) {
        let merged = merge("repo", stored, held);
        let index = TrustIndex::new(&merged);
        let naive = |author: &PublicKey| -> Vec<(PublicKey, Source)> {
            merged.iter().filter(|(a, _)| maintainer_set(a.owner, &merged).contains(author)).map(|(a, s)| (a.owner, *s)).collect()
        };
        let authors: Vec<PublicKey> = authors.into_iter().map(|i| pubkeys()[i]).collect();
        for author in &authors {
            prop_assert_eq!(index.owners_trusting(author), naive(author));
            prop_assert_eq!(index.maintainer_set(*author), maintainer_set(*author, &merged));
        }
        let mut any: Vec<(PublicKey, Source)> = authors.iter().flat_map(naive).collect();
        any.sort_by_key(|(o, _)| *o);
        any.dedup_by_key(|(o, _)| *o);
        prop_assert_eq!(index.owners_trusting_any(&authors), any);
    }

    /// Merging keeps the newest announcement per owner; a held one wins only when strictly newer.
    #[test]
    fn announcement_merge_keeps_the_newest_per_owner(stored in announcement_list(), held in announcement_list()) {
        // One stored announcement per owner, as the store keeps.
        let mut per_owner = BTreeMap::new();
        for a in stored {
            per_owner.entry(a.owner).and_modify(|old: &mut Announcement| if a.recency() > old.recency() { *old = a.clone() }).or_insert(a);
        }
        let stored: Vec<Announcement> = per_owner.into_values().collect();
        let held: Vec<Announcement> = held.into_iter().map(|mut a| { a.event_id = state_id(a.event_id.as_bytes()[2], 8); a }).collect();
        let merged = merge("repo", stored.clone(), held.clone());
        let owners: BTreeSet<PublicKey> = stored.iter().chain(&held).map(|a| a.owner).collect();
        prop_assert_eq!(merged.len(), owners.len());
        for (a, source) in &merged {
            let newest = stored.iter().chain(&held).filter(|x| x.owner == a.owner).map(|x| x.recency()).max().unwrap();
            prop_assert_eq!(a.recency(), newest);
            prop_assert_eq!(*source == Source::Stored, stored.iter().any(|x| x.event_id == a.event_id));
        }
        prop_assert!(merge("other", stored, held).is_empty());
    }

    /// Admission of announcements: an older one is always refused; one that does not list this
    /// service never gets a repository; a new one checks the caps before a repository is made.
    #[test]
    fn announcement_admission_verdicts(
        existing in prop::option::of((any::<bool>(), any::<bool>())),
        lists_service in any::<bool>(),
        archived in any::<bool>(),
        owner_or_listed in any::<bool>(),
        repo_exists in any::<bool>(),
        repo_has_refs in any::<bool>(),
        confirmed_by_served in any::<bool>(),
        expired in any::<bool>(),
    ) {
        let existing = existing.map(|(held, newer)| (if held { Source::Purgatory } else { Source::Stored }, newer));
        let facts = AnnouncementFacts { existing, lists_service, archived, owner_or_listed, repo_exists, repo_has_refs, confirmed_by_served, expired };
        // An archived announcement (GRASP-05) is taken like a listing one.
        let hosted = lists_service || archived;
        let verdict = admit_announcement(&facts);
        if existing.is_some_and(|(_, newer)| newer) {
            prop_assert!(matches!(verdict, AnnouncementAdmission::Reject(ref m) if m.starts_with("invalid:")));
            return Ok(());
        }
        match verdict {
            AnnouncementAdmission::WithRepo { check_room, then } => {
                prop_assert!(hosted);
                prop_assert_eq!(check_room, existing.is_none() && !repo_exists);
                if then == AfterRepo::Hold {
                    prop_assert!(existing.is_none() && !(repo_exists && repo_has_refs) && !confirmed_by_served);
                    prop_assert!(!expired, "an expired announcement never starts a new cycle");
                }
            }
            AnnouncementAdmission::DropHeldAndStore => prop_assert!(!hosted && matches!(existing, Some((Source::Purgatory, _)))),
            AnnouncementAdmission::StoreUnlisted => prop_assert!(!hosted && owner_or_listed),
            AnnouncementAdmission::RejectNotListed => prop_assert!(!hosted && !owner_or_listed),
            AnnouncementAdmission::Reject(m) => prop_assert!(
                m.starts_with("blocked:") && expired && hosted && existing.is_none() && !(repo_exists && repo_has_refs),
                "only older and already expired announcements are refused outright: {m}"
            ),
        }
    }
}

/// A stored state (maybe) and held states with small ref maps and close `created_at`s.
fn stored_and_held() -> impl Strategy<Value = (Option<RepoState>, Vec<RepoState>)> {
    let state = |i: usize, refs: RefMap, t: u64| {
        let mut id = [0u8; 32];
        id[0] = i as u8 + 1;
        id[1] = (t * 7 + i as u64) as u8; // ids do not follow the insertion order
        repo_state(id, refs, t)
    };
    (
        prop::option::of((small_refmap(), 0u64..4)),
        prop::collection::vec((small_refmap(), 0u64..4), 0..24),
    )
        .prop_map(move |(stored, held)| {
            let stored = stored.map(|(refs, t)| state(200, refs, t));
            let held = held.into_iter().enumerate().map(|(i, (refs, t))| state(i, refs, t)).collect();
            (stored, held)
        })
}

proptest! {
    #![proptest_config(config(1024))]

    /// The index by declared refs decides exactly as comparing with each candidate does: the
    /// latest stored state plus the held states newer than it (what the relay gathers).
    #[test]
    fn indexed_decision_equals_the_plain_one(
        (current, updates) in small_refmap().prop_flat_map(small_updates),
        (stored, held) in stored_and_held(),
    ) {
        use grasp_state::git::push::decide_push_among;
        use grasp_state::git::push_index::{HeldStateIndex, IndexedCandidates};
        let plain: Vec<StateCandidate> = stored
            .iter()
            .map(|s| StateCandidate { state: s.clone(), source: Source::Stored })
            .chain(
                held.iter()
                    .filter(|h| stored.as_ref().is_none_or(|s| h.is_newer_than(s)))
                    .map(|h| StateCandidate { state: h.clone(), source: Source::Purgatory }),
            )
            .collect();
        let known = BTreeMap::new();
        let req = PushRequest { current: &current, updates: &updates, candidates: &plain, known_prs: &known };
        let index = HeldStateIndex::new(held.iter().cloned().map(Arc::new));
        let indexed = IndexedCandidates { stored: stored.as_ref(), held: &index };
        prop_assert_eq!(decide_push_among(&req, &indexed), decide_push(&req));
        prop_assert_eq!(index.len(), held.len());
    }
}
