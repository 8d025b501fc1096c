//! The push decision (docs/protocol.md#push-authorisation, decisions 5 and 6) as a pure function.
//!
//! The `pre-receive` hook hands the relay the ref updates of a push; the relay
//! gathers the repository's current refs, the state events that could
//! authorise it and the pull requests it knows, and asks [`decide_push`]:
//!
//! - Only `refs/heads/*`, `refs/tags/*` and `refs/nostr/<event-id>` may be
//!   pushed; anything else rejects the whole push.
//! - Branches and tags: after applying the push to the current refs, the
//!   served refs (`refs/heads/*`, `refs/tags/*`) must equal exactly the refs of
//!   some candidate state (latest stored state of the maintainer set, or a
//!   purgatory state authored inside it). Late binding: the match is made now,
//!   and the newest matching state wins (NIP-01 order: `created_at`, then the
//!   lower id on the same second). A push that changes no served ref is accepted.
//! - `refs/nostr/<id>`: anyone may push; if the PR (update) `id` is known its
//!   `c` commit must be the pushed commit; an unknown id gets a placeholder that
//!   waits for the event. Deleting such a ref is refused.
//!
//! Every rejection reason names the ref, shows short oids and says what to do;
//! the hook prints them as `remote: ...` lines.
//!
//! A push to a GRASP-06 contributor repository (`/prs/<npub>/<identifier>.git`) is decided by
//! [`decide_contribution_push`]: only `refs/nostr/<id>`, each bound to a pull request of that
//! npub naming that identifier.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use nostr::prelude::{EventId, PublicKey};

use crate::nostr::nip34::{parse_event_id, RepoState, Source};
use crate::names::refs::{
    apply_updates, is_served_ref, is_valid_oid, is_valid_ref_name, is_zero_oid, served_refs,
    short_oid, RefMap, RefUpdate, NOSTR_PREFIX,
};

/// Most per-ref difference lines shown in one rejection.
pub const MAX_DIFF_LINES: usize = 20;

/// A state event that may authorise a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCandidate {
    pub state: RepoState,
    pub source: Source,
}

/// Everything [`decide_push`] needs.
#[derive(Debug, Clone, Copy)]
pub struct PushRequest<'a> {
    /// All refs in the repository now.
    pub current: &'a RefMap,
    /// The push, as git reported it to `pre-receive`.
    pub updates: &'a [RefUpdate],
    /// Already filtered to the owner's maintainer set: the latest stored state
    /// plus purgatory states.
    pub candidates: &'a [StateCandidate],
    /// Known PR / PR update id -> expected commit (`c` tag), store or purgatory.
    pub known_prs: &'a BTreeMap<EventId, String>,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushDecision {
    Accept(Accepted),
    Reject(Rejection),
}

/// What an accepted push means for the relay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The newest candidate the repository matches after the push, if any.
    pub matched_state: Option<(EventId, Source)>,
    /// `refs/nostr/<id>` pushes for events not known yet: (id, pushed commit).
    pub placeholders: Vec<(EventId, String)>,
    /// Known PRs / PR updates whose commit was pushed.
    pub pr_matches: Vec<EventId>,
}

/// Why a push is refused; each reason is one line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reasons: Vec<String>,
}

/// Do `refs` (any map of repository refs) serve exactly what `state` declares?
pub fn can_satisfy_state(refs: &RefMap, state: &RepoState) -> bool {
    served_refs(refs) == state.refs
}

/// Where [`decide_push_among`] finds the states that may authorise a push: a slice of
/// candidates (compared one by one), or an index of them by declared refs
/// ([`crate::git::push_index::IndexedCandidates`]). Both answer in the NIP-01 order, newest first; the
/// same event stored and held counts as stored.
pub trait Candidates {
    /// The newest satisfiable candidate whose branches and tags are exactly `refs`.
    fn newest_matching(&self, refs: &RefMap) -> Option<(&RepoState, Source)>;
    /// The newest satisfiable candidate of all (the one a rejection explains itself against).
    fn newest(&self) -> Option<(&RepoState, Source)>;
    /// The newest candidate that can never be satisfied (it names a value that is not a full
    /// object id), for the rejection when no satisfiable one exists.
    fn newest_unsatisfiable(&self) -> Option<&RepoState>;
}

impl Candidates for [StateCandidate] {
    fn newest_matching(&self, refs: &RefMap) -> Option<(&RepoState, Source)> {
        newest(self.iter().filter(|c| c.state.is_satisfiable() && c.state.refs == *refs)).map(|c| (&c.state, c.source))
    }

    fn newest(&self) -> Option<(&RepoState, Source)> {
        newest(self.iter().filter(|c| c.state.is_satisfiable())).map(|c| (&c.state, c.source))
    }

    fn newest_unsatisfiable(&self) -> Option<&RepoState> {
        newest(self.iter().filter(|c| !c.state.is_satisfiable())).map(|c| &c.state)
    }
}

/// Decide a push. Pure: see the module docs for the rules.
pub fn decide_push(req: &PushRequest) -> PushDecision {
    decide_push_among(req, req.candidates)
}

/// [`decide_push`] with the candidates taken from `candidates` instead of `req.candidates`
/// (which is not read): the same rules, the same answer for the same states.
pub fn decide_push_among<C: Candidates + ?Sized>(req: &PushRequest, candidates: &C) -> PushDecision {
    decide_explained(req, candidates).decision
}

/// A push decision, and whether a state event this server does not know could change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    pub decision: PushDecision,
    /// The push is refused for one reason only: no known state (kind 30618) declares the
    /// branches and tags it leaves (none at all, none satisfiable, or the newest declares other
    /// refs). Every ref update is otherwise well formed and every `refs/nostr/` ref acceptable,
    /// so a newer state event, or an announcement that makes its author a maintainer, published
    /// elsewhere could authorise it: worth asking the other replicas of a replica set for them
    /// before refusing (docs/scaling.md). `false` for an accepted push, and for a refusal that
    /// no event could change.
    pub wants_a_state: bool,
}

/// [`decide_push_among`], with whether a state event not known here could change the verdict
/// ([`Explained::wants_a_state`]).
pub fn decide_explained<C: Candidates + ?Sized>(req: &PushRequest, candidates: &C) -> Explained {
    let mut reasons = Vec::new();
    let mut accepted = Accepted::default();
    let mut served_updates = Vec::new();

    for update in req.updates {
        let name = update.name.as_str();
        if let Err(reason) = check_oids(update) {
            reasons.push(reason);
        } else if is_served_ref(name) {
            if is_valid_ref_name(name) {
                served_updates.push(update.clone());
            } else {
                reasons.push(format!(
                    "{}: not a valid git ref name: rename it (see `git check-ref-format`)",
                    clip(name)
                ));
            }
        } else if let Some(id) = name.strip_prefix(NOSTR_PREFIX) {
            if let Err(reason) = check_nostr_ref(update, id, req.known_prs, &mut accepted) {
                reasons.push(reason);
            }
        } else {
            reasons.push(format!(
                "{}: this server only accepts pushes to refs/heads/*, refs/tags/* and refs/nostr/<event-id>: push only those refs",
                clip(name)
            ));
        }
    }

    // Whatever a state says, these refusals stand.
    let well_formed = reasons.is_empty();
    let before = served_refs(req.current);
    let after = served_refs(&apply_updates(req.current, &served_updates));
    // A state naming a value that is not a full object id can never be served: it authorises
    // nothing, and is not the one the reasons compare against (docs/protocol.md#event-kinds).
    accepted.matched_state = candidates.newest_matching(&after).map(|(state, source)| (state.event_id, source));
    let unmatched = after != before && accepted.matched_state.is_none();

    if unmatched {
        match candidates.newest() {
            None => match candidates.newest_unsatisfiable() {
                Some(unsatisfiable) => reasons.push(unsatisfiable_reason(unsatisfiable)),
                None => reasons.push(
                    "no repository state event (kind 30618) from a maintainer of this repository is known to this server: \
                     publish one that lists the refs you are pushing first, then push again (`git push` to the \
                     repository's `nostr://` remote does both: git-remote-nostr publishes the state event first)"
                        .to_owned(),
                ),
            },
            Some((latest, _)) => reasons.extend(mismatch_reasons(latest, &after, &served_updates)),
        }
    }

    let decision = if reasons.is_empty() { PushDecision::Accept(accepted) } else { PushDecision::Reject(Rejection { reasons }) };
    Explained { decision, wants_a_state: well_formed && unmatched }
}

/// A pull request (or update) known to this server, stored or held, as a contributor push needs
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownPr {
    pub author: PublicKey,
    /// Its `c` tag.
    pub commit: String,
    /// The identifiers its `a` tags name.
    pub identifiers: Vec<String>,
}

/// A push to the contributor repository `/prs/<contributor>/<identifier>.git` (GRASP-06).
#[derive(Debug, Clone, Copy)]
pub struct ContributionPush<'a> {
    pub contributor: &'a PublicKey,
    pub identifier: &'a str,
    /// The push, as git reported it to `pre-receive`.
    pub updates: &'a [RefUpdate],
    /// Pull requests known here, by id, among those the push names.
    pub known_prs: &'a BTreeMap<EventId, KnownPr>,
}

/// Decides a push to a contributor repository (docs/protocol.md#contributor-repositories): only
/// `refs/nostr/<64-hex event id>`, never deleted; a known pull request's ref must be pushed to
/// its signer's repository for an identifier it names, at its `c` commit; an unknown id is a
/// git-first placeholder, as in an announced repository. Pure; one bad ref refuses the push.
pub fn decide_contribution_push(req: &ContributionPush) -> PushDecision {
    let mut reasons = Vec::new();
    let mut accepted = Accepted::default();
    let commits: BTreeMap<EventId, String> = req.known_prs.iter().map(|(id, k)| (*id, k.commit.clone())).collect();
    for update in req.updates {
        let name = update.name.as_str();
        if let Err(reason) = check_oids(update) {
            reasons.push(reason);
            continue;
        }
        let Some(id) = name.strip_prefix(NOSTR_PREFIX) else {
            reasons.push(format!(
                "{}: this is a contributor repository (/prs/): it takes only refs/nostr/<pull request event id>; \
                 push branches and tags to the repository's own URL",
                clip(name)
            ));
            continue;
        };
        let known = parse_event_id(id).and_then(|event_id| req.known_prs.get(&event_id).map(|k| (event_id, k)));
        if let Some((event_id, pr)) = known.filter(|_| !update.is_noop() && !is_zero_oid(&update.new)) {
            let hex = event_id.to_hex();
            let short = short_oid(&hex);
            if pr.author != *req.contributor {
                reasons.push(format!(
                    "{name}: pull request {short} is signed by {}, and this URL takes only its own contributor's pull \
                     requests: push it to /prs/<npub of its signer>/{}.git",
                    crate::names::identifier::npub_of(&pr.author),
                    crate::names::identifier::percent_encode_segment(req.identifier)
                ));
                continue;
            }
            if !pr.identifiers.iter().any(|d| d == req.identifier) {
                reasons.push(format!(
                    "{name}: pull request {short} names no repository `{}` in its `a` tags: push it to \
                     /prs/<your npub>/<an identifier it names>.git",
                    req.identifier.chars().take(100).collect::<String>()
                ));
                continue;
            }
        }
        if let Err(reason) = check_nostr_ref(update, id, &commits, &mut accepted) {
            reasons.push(reason);
        }
    }
    if reasons.is_empty() {
        PushDecision::Accept(accepted)
    } else {
        PushDecision::Reject(Rejection { reasons })
    }
}

/// Both object ids of an update are full lowercase hex; the reason otherwise.
fn check_oids(update: &RefUpdate) -> Result<(), String> {
    if is_valid_oid(&update.old) && is_valid_oid(&update.new) {
        return Ok(());
    }
    Err(format!("{}: invalid object id in the update: expected 40 or 64 lowercase hex characters", clip(&update.name)))
}

/// Check one `refs/nostr/<id>` update and record what it means.
fn check_nostr_ref(
    update: &RefUpdate,
    id: &str,
    known_prs: &BTreeMap<EventId, String>,
    accepted: &mut Accepted,
) -> Result<(), String> {
    let Some(event_id) = parse_event_id(id) else {
        return Err(format!(
            "{}: refs/nostr/ refs must be named by a 64 character lowercase hex event id: push to refs/nostr/<pull request event id>",
            clip(&update.name)
        ));
    };
    if update.is_noop() {
        return Ok(());
    }
    if is_zero_oid(&update.new) {
        return Err(format!(
            "{}: deleting refs/nostr/ refs is not allowed: they hold pull request commits",
            update.name
        ));
    }
    match known_prs.get(&event_id) {
        Some(expected) if expected == &update.new => {
            accepted.pr_matches.push(event_id);
            Ok(())
        }
        Some(expected) => Err(format!(
            "{}: pushing {}, but the pull request event names commit {}: push that commit, or publish a pull request update for {}",
            update.name,
            short_oid(&update.new),
            short_oid(expected),
            short_oid(&update.new)
        )),
        None => {
            accepted.placeholders.push((event_id, update.new.clone()));
            Ok(())
        }
    }
}

/// NIP-01 order between candidates, newest greatest; the same event in both
/// places counts as stored.
fn candidate_order(a: &StateCandidate, b: &StateCandidate) -> Ordering {
    let stored = |c: &StateCandidate| c.source == Source::Stored;
    a.state.recency().cmp(&b.state.recency()).then_with(|| stored(a).cmp(&stored(b)))
}

fn newest<'a>(candidates: impl Iterator<Item = &'a StateCandidate>) -> Option<&'a StateCandidate> {
    candidates.max_by(|a, b| candidate_order(a, b))
}

/// Why the only states known cannot authorise anything.
fn unsatisfiable_reason(state: &RepoState) -> String {
    let (name, value) = state.unsatisfiable_refs().next().unwrap_or_default();
    format!(
        "the repository state event {} (kind 30618) declares {} as {:?}, which is not a full 40 or 64 character \
         object id, so no push can match it: publish a state event with full commit ids, then push again",
        short_oid(&state.event_id.to_hex()),
        clip(name),
        value.chars().take(64).collect::<String>()
    )
}

/// Explain how `after` differs from `state`, one line per ref.
fn mismatch_reasons(state: &RepoState, after: &RefMap, pushed: &[RefUpdate]) -> Vec<String> {
    let mut lines = vec![format!(
        "refs after this push do not match the latest repository state event {} (kind 30618): \
         push exactly the refs it declares, or publish a new state event for your refs first \
         (`git push` to the repository's `nostr://` remote publishes it before the git data)",
        short_oid(&state.event_id.to_hex())
    )];
    let touched = |name: &str| pushed.iter().any(|u| u.name == name && !u.is_noop());
    let mut diffs = Vec::new();
    let names: std::collections::BTreeSet<&String> =
        after.keys().chain(state.refs.keys()).collect();
    for name in names {
        let line = match (after.get(name), state.refs.get(name)) {
            (Some(have), Some(want)) if have == want => continue,
            (Some(have), Some(want)) if touched(name) => {
                format!("{name}: pushing {}, state expects {}", short_oid(have), short_oid(want))
            }
            (Some(have), Some(want)) => format!(
                "{name}: repository has {}, state expects {}: push it too",
                short_oid(have),
                short_oid(want)
            ),
            (Some(have), None) if touched(name) => format!(
                "{name}: pushing {}, but the state does not declare this ref",
                short_oid(have)
            ),
            (Some(have), None) => format!(
                "{name}: repository has {}, but the state does not declare this ref: delete it in the same push",
                short_oid(have)
            ),
            (None, Some(want)) => format!(
                "{name}: state expects {}, but this ref is missing after the push: push it too",
                short_oid(want)
            ),
            (None, None) => continue,
        };
        diffs.push(line);
    }
    let hidden = diffs.len().saturating_sub(MAX_DIFF_LINES);
    diffs.truncate(MAX_DIFF_LINES);
    lines.extend(diffs);
    if hidden > 0 {
        lines.push(format!("... and {hidden} more refs differ"));
    }
    lines
}

/// The candidates that may authorise a push: the latest stored state of the maintainer set,
/// and the held states authored inside it that are newer (NIP-01 order). A held state not newer
/// than the stored one could never become the served state (after the push the repository
/// would be aligned back to the stored state), so it does not authorise.
pub fn push_candidates(stored: Option<RepoState>, held: Vec<RepoState>) -> Vec<StateCandidate> {
    let held: Vec<StateCandidate> = held
        .into_iter()
        .filter(|held| stored.as_ref().is_none_or(|stored| held.is_newer_than(stored)))
        .map(|state| StateCandidate { state, source: Source::Purgatory })
        .collect();
    stored.map(|state| StateCandidate { state, source: Source::Stored }).into_iter().chain(held).collect()
}

/// One rejection lists every problem: `decision` with the relay's own refusals `reasons` (found
/// outside [`decide_push`]) merged in. An accepted push with such reasons is rejected.
pub fn with_reasons(decision: PushDecision, reasons: Vec<String>) -> PushDecision {
    match decision {
        accepted @ PushDecision::Accept(_) if reasons.is_empty() => accepted,
        PushDecision::Accept(_) => PushDecision::Reject(Rejection { reasons }),
        PushDecision::Reject(mut rej) => {
            rej.reasons.extend(reasons);
            PushDecision::Reject(rej)
        }
    }
}

/// Sort states in the order to release them: oldest first; on the same second
/// the NIP-01 loser (higher id) first, so the last one released is the winner.
pub fn release_order(states: &mut [RepoState]) {
    states.sort_by_key(RepoState::recency);
}

/// The distinct oids `state` declares that the repository lacks (sorted).
/// Empty means the state's git data is complete and it can be released. A value that is not a
/// full object id ([`RepoState::unsatisfiable_refs`]) is always missing and never passed to
/// `has_object`, so an unsatisfiable state is never complete.
pub fn missing_oids(state: &RepoState, has_object: impl Fn(&str) -> bool) -> Vec<String> {
    let mut missing: Vec<String> = state
        .refs
        .values()
        .filter(|oid| !is_valid_oid(oid) || !has_object(oid))
        .cloned()
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

fn clip(name: &str) -> String {
    name.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::refs::ZERO_OID;
    use nostr::prelude::{Keys, PublicKey, Timestamp};

    #[test]
    fn a_contribution_push_takes_only_pull_request_refs_of_its_contributor_and_identifier() {
        let (me, them) = (author(), author());
        let known: BTreeMap<EventId, KnownPr> = [
            (id(1), KnownPr { author: me, commit: A.into(), identifiers: vec!["repo".into()] }),
            (id(2), KnownPr { author: them, commit: A.into(), identifiers: vec!["repo".into()] }),
            (id(3), KnownPr { author: me, commit: A.into(), identifiers: vec!["other".into()] }),
        ]
        .into();
        let nostr = |n: u8| format!("refs/nostr/{}", id(n).to_hex());
        let decide = |updates: &[RefUpdate]| {
            decide_contribution_push(&ContributionPush { contributor: &me, identifier: "repo", updates, known_prs: &known })
        };
        let accepted = |updates: &[RefUpdate]| match decide(updates) {
            PushDecision::Accept(acc) => acc,
            PushDecision::Reject(rej) => panic!("{updates:?}: {rej:?}"),
        };
        let reasons = |updates: &[RefUpdate]| match decide(updates) {
            PushDecision::Reject(rej) => rej.reasons.join("\n"),
            PushDecision::Accept(acc) => panic!("{updates:?} accepted: {acc:?}"),
        };
        assert_eq!(accepted(&[RefUpdate::new(ZERO_OID, A, nostr(1))]).pr_matches, [id(1)]);
        assert_eq!(accepted(&[RefUpdate::new(ZERO_OID, B, nostr(9))]).placeholders, [(id(9), B.to_string())]);
        assert!(reasons(&[RefUpdate::new(ZERO_OID, A, "refs/heads/main")]).contains("only refs/nostr/<pull request event id>"));
        assert!(reasons(&[RefUpdate::new(ZERO_OID, A, "refs/tags/v1")]).contains("contributor repository"));
        assert!(reasons(&[RefUpdate::new(ZERO_OID, A, "refs/nostr/not-an-id")]).contains("64 character"));
        assert!(reasons(&[RefUpdate::new(ZERO_OID, B, nostr(1))]).contains("the pull request event names commit"));
        assert!(reasons(&[RefUpdate::new(ZERO_OID, A, nostr(2))]).contains("/prs/<npub of its signer>/repo.git"));
        assert!(reasons(&[RefUpdate::new(ZERO_OID, A, nostr(3))]).contains("names no repository `repo`"));
        assert!(reasons(&[RefUpdate::new(A, ZERO_OID, nostr(1))]).contains("deleting"));
        // One bad ref refuses the whole push.
        assert!(reasons(&[RefUpdate::new(ZERO_OID, A, nostr(1)), RefUpdate::new(ZERO_OID, A, "refs/heads/x")]).contains("refs/heads/x"));
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

    fn id(n: u8) -> EventId {
        EventId::from_slice(&[n; 32]).unwrap()
    }

    fn author() -> PublicKey {
        Keys::generate().public_key()
    }

    fn refs(pairs: &[(&str, &str)]) -> RefMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn state(n: u8, secs: u64, pairs: &[(&str, &str)]) -> RepoState {
        RepoState {
            event_id: id(n),
            author: author(),
            identifier: "repo".into(),
            refs: refs(pairs),
            head: Some("refs/heads/main".into()),
            created_at: Timestamp::from_secs(secs),
        }
    }

    fn stored(s: RepoState) -> StateCandidate {
        StateCandidate {
            state: s,
            source: Source::Stored,
        }
    }

    fn purg(s: RepoState) -> StateCandidate {
        StateCandidate {
            state: s,
            source: Source::Purgatory,
        }
    }

    fn up(old: &str, new: &str, name: &str) -> RefUpdate {
        RefUpdate::new(old, new, name)
    }

    fn decide(
        current: &RefMap,
        updates: &[RefUpdate],
        candidates: &[StateCandidate],
    ) -> PushDecision {
        decide_with_prs(current, updates, candidates, &BTreeMap::new())
    }

    fn decide_with_prs(
        current: &RefMap,
        updates: &[RefUpdate],
        candidates: &[StateCandidate],
        known_prs: &BTreeMap<EventId, String>,
    ) -> PushDecision {
        decide_push(&PushRequest {
            current,
            updates,
            candidates,
            known_prs,
        })
    }

    fn accepted(d: PushDecision) -> Accepted {
        match d {
            PushDecision::Accept(a) => a,
            PushDecision::Reject(r) => panic!("expected accept, got {:?}", r.reasons),
        }
    }

    fn rejected(d: PushDecision) -> Vec<String> {
        match d {
            PushDecision::Reject(r) => {
                assert!(!r.reasons.is_empty());
                r.reasons
            }
            PushDecision::Accept(a) => panic!("expected reject, got {a:?}"),
        }
    }

    #[test]
    fn only_a_refusal_for_want_of_a_matching_state_wants_one() {
        let wants = |current: &RefMap, updates: &[RefUpdate], candidates: &[StateCandidate]| {
            let known = BTreeMap::new();
            let req = PushRequest { current, updates, candidates, known_prs: &known };
            let explained = decide_explained(&req, candidates);
            assert_eq!(explained.decision, decide_push(&req), "the same verdict as decide_push");
            explained.wants_a_state
        };
        let empty = RefMap::new();
        let main = [up(ZERO_OID, A, "refs/heads/main")];
        // No state known, or only an older one declaring other refs, or only an unsatisfiable
        // one: a state published elsewhere could authorise it.
        assert!(wants(&empty, &main, &[]));
        assert!(wants(&empty, &main, &[stored(state(1, 10, &[("refs/heads/main", B)]))]));
        assert!(wants(&empty, &main, &[stored(state(1, 10, &[("refs/heads/main", "short")]))]));
        // Accepted: nothing to ask for.
        assert!(!wants(&empty, &main, &[purg(state(1, 10, &[("refs/heads/main", A)]))]));
        assert!(!wants(&refs(&[("refs/heads/main", A)]), &[up(A, A, "refs/heads/main")], &[]));
        // A refusal no event changes, alone or beside the missing state.
        assert!(!wants(&empty, &[up(ZERO_OID, A, "refs/meta/x")], &[]));
        assert!(!wants(&empty, &[up(ZERO_OID, A, "refs/heads/main"), up(ZERO_OID, A, "refs/other")], &[]));
        assert!(!wants(&empty, &[up(ZERO_OID, "xyz", "refs/heads/main")], &[]));
        assert!(!wants(&empty, &[up(A, ZERO_OID, &format!("refs/nostr/{}", id(1).to_hex()))], &[]));
    }

    #[test]
    fn empty_and_noop_pushes_are_accepted() {
        let current = refs(&[("refs/heads/main", A)]);
        assert_eq!(accepted(decide(&current, &[], &[])), Accepted::default());
        let noop = [up(A, A, "refs/heads/main")];
        assert_eq!(accepted(decide(&current, &noop, &[])), Accepted::default());
        // Deleting a ref that does not exist changes nothing either.
        let ghost = [up(ZERO_OID, ZERO_OID, "refs/heads/ghost")];
        assert_eq!(accepted(decide(&current, &ghost, &[])), Accepted::default());
        // A no-op push still reports a state the repo already matches.
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        let a = accepted(decide(&current, &noop, &cands));
        assert_eq!(a.matched_state, Some((id(1), Source::Purgatory)));
    }

    #[test]
    fn no_candidates_rejects_with_advice() {
        let reasons = rejected(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &[],
        ));
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("no repository state event (kind 30618)"));
        assert!(reasons[0].contains("publish one"));
    }

    #[test]
    fn create_branch_matching_state() {
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(a.matched_state, Some((id(1), Source::Purgatory)));
        assert!(a.placeholders.is_empty() && a.pr_matches.is_empty());
    }

    #[test]
    fn update_branch() {
        let current = refs(&[("refs/heads/main", A), ("refs/heads/dev", C)]);
        let cands = [
            stored(state(
                1,
                10,
                &[("refs/heads/main", A), ("refs/heads/dev", C)],
            )),
            purg(state(
                2,
                20,
                &[("refs/heads/main", B), ("refs/heads/dev", C)],
            )),
        ];
        let a = accepted(decide(&current, &[up(A, B, "refs/heads/main")], &cands));
        assert_eq!(a.matched_state, Some((id(2), Source::Purgatory)));
        // Wrong commit: rejected, with the ref named and both short oids.
        let reasons = rejected(decide(&current, &[up(A, C, "refs/heads/main")], &cands));
        assert!(reasons[0].contains("0202020"), "{reasons:?}");
        assert!(
            reasons.contains(&"refs/heads/main: pushing ccccccc, state expects bbbbbbb".to_owned()),
            "{reasons:?}"
        );
        assert_eq!(reasons.len(), 2);
    }

    #[test]
    fn delete_only_when_result_matches() {
        let current = refs(&[("refs/heads/main", A), ("refs/heads/old", B)]);
        let del = [up(B, ZERO_OID, "refs/heads/old")];
        let matching = [stored(state(1, 10, &[("refs/heads/main", A)]))];
        assert_eq!(
            accepted(decide(&current, &del, &matching)).matched_state,
            Some((id(1), Source::Stored))
        );
        let still_declared = [stored(state(
            1,
            10,
            &[("refs/heads/main", A), ("refs/heads/old", B)],
        ))];
        let reasons = rejected(decide(&current, &del, &still_declared));
        assert!(reasons.iter().any(|r| r == "refs/heads/old: state expects bbbbbbb, but this ref is missing after the push: push it too"), "{reasons:?}");
    }

    #[test]
    fn untouched_refs_must_match_too() {
        // The repo has a stale branch the state does not declare: pushing main alone is not enough.
        let current = refs(&[("refs/heads/stale", C)]);
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        let reasons = rejected(decide(
            &current,
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert!(reasons.iter().any(|r| r.starts_with("refs/heads/stale: repository has ccccccc, but the state does not declare this ref: delete it")), "{reasons:?}");
        // Deleting it in the same push works.
        let both = [
            up(ZERO_OID, A, "refs/heads/main"),
            up(C, ZERO_OID, "refs/heads/stale"),
        ];
        assert!(accepted(decide(&current, &both, &cands))
            .matched_state
            .is_some());
    }

    #[test]
    fn extra_pushed_ref_is_named() {
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        let push = [
            up(ZERO_OID, A, "refs/heads/main"),
            up(ZERO_OID, B, "refs/heads/extra"),
        ];
        let reasons = rejected(decide(&RefMap::new(), &push, &cands));
        assert!(
            reasons.contains(
                &"refs/heads/extra: pushing bbbbbbb, but the state does not declare this ref"
                    .to_owned()
            ),
            "{reasons:?}"
        );
    }

    #[test]
    fn tags() {
        let current = refs(&[("refs/heads/main", A)]);
        let cands = [purg(state(
            1,
            10,
            &[("refs/heads/main", A), ("refs/tags/v1", B)],
        ))];
        assert!(
            accepted(decide(&current, &[up(ZERO_OID, B, "refs/tags/v1")], &cands))
                .matched_state
                .is_some()
        );
        assert!(matches!(
            decide(&current, &[up(ZERO_OID, C, "refs/tags/v1")], &cands),
            PushDecision::Reject(_)
        ));
    }

    #[test]
    fn head_is_irrelevant_for_matching() {
        let mut s = state(1, 10, &[("refs/heads/main", A)]);
        s.head = Some("refs/heads/other".into());
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &[purg(s.clone())],
        ));
        assert_eq!(a.matched_state, Some((id(1), Source::Purgatory)));
        s.head = None;
        assert!(accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &[purg(s)]
        ))
        .matched_state
        .is_some());
    }

    #[test]
    fn other_refs_in_repo_do_not_count() {
        // refs/nostr/* already in the repo are not served refs and never block a match.
        let current = refs(&[("refs/nostr/x", C)]);
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        assert!(accepted(decide(
            &current,
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands
        ))
        .matched_state
        .is_some());
    }

    #[test]
    fn newest_matching_wins() {
        let target = [("refs/heads/main", A)];
        let cands = [
            purg(state(1, 10, &target)),
            purg(state(2, 30, &target)),
            purg(state(3, 40, &[("refs/heads/main", B)])), // newer but does not match
            stored(state(4, 20, &target)),
        ];
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(a.matched_state, Some((id(2), Source::Purgatory)));
    }

    #[test]
    fn same_second_lower_id_wins() {
        let target = [("refs/heads/main", A)];
        let cands = [
            purg(state(9, 10, &target)),
            purg(state(3, 10, &target)),
            purg(state(5, 10, &target)),
        ];
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(a.matched_state, Some((id(3), Source::Purgatory)));
    }

    #[test]
    fn stored_vs_purgatory() {
        let target = [("refs/heads/main", A)];
        // Stored newer than purgatory: stored wins.
        let cands = [purg(state(1, 10, &target)), stored(state(2, 20, &target))];
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(a.matched_state, Some((id(2), Source::Stored)));
        // Same event in both places: counts as stored.
        let cands = [purg(state(1, 10, &target)), stored(state(1, 10, &target))];
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(a.matched_state, Some((id(1), Source::Stored)));
        // Only the stored state matches.
        let cands = [
            stored(state(1, 10, &target)),
            purg(state(2, 20, &[("refs/heads/main", B)])),
        ];
        let a = accepted(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(a.matched_state, Some((id(1), Source::Stored)));
    }

    #[test]
    fn rejection_explains_latest_candidate() {
        let cands = [
            stored(state(1, 10, &[("refs/heads/main", B)])),
            purg(state(2, 20, &[("refs/heads/main", C)])),
        ];
        let reasons = rejected(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert!(reasons[0].contains(&short_oid(&id(2).to_hex()).to_owned()));
        assert!(reasons[1].ends_with("state expects ccccccc"));
        // Purgatory state older than stored: the stored one is explained.
        let cands = [
            stored(state(1, 30, &[("refs/heads/main", B)])),
            purg(state(2, 20, &[("refs/heads/main", C)])),
        ];
        let reasons = rejected(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/main")],
            &cands,
        ));
        assert!(reasons[1].ends_with("state expects bbbbbbb"));
        assert!(reasons[0].contains("publish a new state event"));
    }

    #[test]
    fn long_diffs_are_capped() {
        let many: Vec<(String, String)> = (0..50)
            .map(|i| (format!("refs/tags/t{i:02}"), A.to_owned()))
            .collect();
        let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let cands = [purg(state(1, 10, &pairs))];
        let reasons = rejected(decide(
            &RefMap::new(),
            &[up(ZERO_OID, B, "refs/heads/main")],
            &cands,
        ));
        assert_eq!(reasons.len(), 1 + MAX_DIFF_LINES + 1);
        assert_eq!(reasons.last().unwrap(), "... and 31 more refs differ");
    }

    #[test]
    fn forbidden_namespaces_reject_whole_push() {
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        for name in [
            "refs/remotes/origin/main",
            "refs/notes/commits",
            "refs/heads",
            "HEAD",
            "refs/nostrx/a",
        ] {
            let push = [up(ZERO_OID, A, "refs/heads/main"), up(ZERO_OID, A, name)];
            let reasons = rejected(decide(&RefMap::new(), &push, &cands));
            assert_eq!(reasons.len(), 1, "{reasons:?}");
            assert!(
                reasons[0].starts_with(name) && reasons[0].contains("only accepts"),
                "{reasons:?}"
            );
        }
    }

    #[test]
    fn invalid_names_and_oids() {
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        let reasons = rejected(decide(
            &RefMap::new(),
            &[up(ZERO_OID, A, "refs/heads/a..b")],
            &cands,
        ));
        assert!(reasons[0].contains("check-ref-format"));
        let reasons = rejected(decide(
            &RefMap::new(),
            &[up(ZERO_OID, "xyz", "refs/heads/main")],
            &cands,
        ));
        assert!(reasons[0].contains("invalid object id"));
    }

    #[test]
    fn nostr_ref_invalid_id() {
        let upper = id(0xab).to_hex().to_uppercase();
        for suffix in [
            "abc",
            upper.as_str(),
            &format!("{}/x", id(1).to_hex()),
            &format!("{}0", id(1).to_hex()),
        ] {
            let name = format!("refs/nostr/{suffix}");
            let reasons = rejected(decide(&RefMap::new(), &[up(ZERO_OID, A, &name)], &[]));
            assert!(
                reasons[0].contains("64 character lowercase hex event id"),
                "{reasons:?}"
            );
        }
    }

    #[test]
    fn nostr_ref_delete_rejected() {
        let name = format!("refs/nostr/{}", id(1).to_hex());
        let current = refs(&[(name.as_str(), A)]);
        let reasons = rejected(decide(&current, &[up(A, ZERO_OID, &name)], &[]));
        assert!(reasons[0].contains("deleting refs/nostr/ refs is not allowed"));
    }

    #[test]
    fn nostr_ref_known_pr() {
        let name = format!("refs/nostr/{}", id(7).to_hex());
        let prs = BTreeMap::from([(id(7), A.to_owned())]);
        let a = accepted(decide_with_prs(
            &RefMap::new(),
            &[up(ZERO_OID, A, &name)],
            &[],
            &prs,
        ));
        assert_eq!(a.pr_matches, vec![id(7)]);
        assert!(a.placeholders.is_empty() && a.matched_state.is_none());
        let reasons = rejected(decide_with_prs(
            &RefMap::new(),
            &[up(ZERO_OID, B, &name)],
            &[],
            &prs,
        ));
        assert!(
            reasons[0].contains("pushing bbbbbbb") && reasons[0].contains("names commit aaaaaaa"),
            "{reasons:?}"
        );
    }

    #[test]
    fn nostr_ref_unknown_pr_placeholder() {
        let name = format!("refs/nostr/{}", id(8).to_hex());
        let a = accepted(decide(&RefMap::new(), &[up(ZERO_OID, B, &name)], &[]));
        assert_eq!(a.placeholders, vec![(id(8), B.to_owned())]);
        // Re-pushing the same commit is a no-op.
        let current = refs(&[(name.as_str(), B)]);
        assert_eq!(
            accepted(decide(&current, &[up(B, B, &name)], &[])),
            Accepted::default()
        );
    }

    #[test]
    fn mixed_pushes() {
        let pr = format!("refs/nostr/{}", id(7).to_hex());
        let unknown = format!("refs/nostr/{}", id(8).to_hex());
        let prs = BTreeMap::from([(id(7), C.to_owned())]);
        let cands = [purg(state(1, 10, &[("refs/heads/main", A)]))];
        let push = [
            up(ZERO_OID, A, "refs/heads/main"),
            up(ZERO_OID, C, &pr),
            up(ZERO_OID, B, &unknown),
        ];
        let a = accepted(decide_with_prs(&RefMap::new(), &push, &cands, &prs));
        assert_eq!(a.matched_state, Some((id(1), Source::Purgatory)));
        assert_eq!(a.pr_matches, vec![id(7)]);
        assert_eq!(a.placeholders, vec![(id(8), B.to_owned())]);
        // PR refs alone need no state event.
        let a = accepted(decide_with_prs(&RefMap::new(), &push[1..], &[], &prs));
        assert_eq!(a.pr_matches.len() + a.placeholders.len(), 2);
        // One bad part rejects everything, and all problems are reported.
        let bad = [
            up(ZERO_OID, B, "refs/heads/main"),
            up(ZERO_OID, A, &pr),
            up(ZERO_OID, A, "refs/x/y"),
        ];
        let reasons = rejected(decide_with_prs(&RefMap::new(), &bad, &cands, &prs));
        assert!(reasons.iter().any(|r| r.starts_with("refs/x/y")));
        assert!(reasons.iter().any(|r| r.starts_with(&pr)));
        assert!(reasons
            .iter()
            .any(|r| r.starts_with("refs/heads/main: pushing bbbbbbb")));
    }

    #[test]
    fn satisfy_state() {
        let s = state(1, 10, &[("refs/heads/main", A)]);
        assert!(can_satisfy_state(
            &refs(&[("refs/heads/main", A), ("refs/nostr/x", B)]),
            &s
        ));
        assert!(!can_satisfy_state(&refs(&[("refs/heads/main", B)]), &s));
        assert!(!can_satisfy_state(&RefMap::new(), &s));
    }

    #[test]
    fn release_ordering() {
        let mut states = vec![
            state(1, 30, &[]),
            state(2, 10, &[]),
            state(3, 20, &[]),
            state(4, 20, &[]),
        ];
        release_order(&mut states);
        let ids: Vec<EventId> = states.iter().map(|s| s.event_id).collect();
        assert_eq!(ids, vec![id(2), id(4), id(3), id(1)]);
        // The last one released is the NIP-01 winner among same-second states.
        assert!(states[2].is_newer_than(&states[1]));
    }

    #[test]
    fn missing_objects() {
        let s = state(
            1,
            10,
            &[
                ("refs/heads/main", A),
                ("refs/heads/dev", B),
                ("refs/tags/v1", B),
                ("refs/tags/v2", C),
            ],
        );
        assert_eq!(
            missing_oids(&s, |oid| oid == C),
            vec![A.to_owned(), B.to_owned()]
        );
        assert!(missing_oids(&s, |_| true).is_empty());
        assert_eq!(
            missing_oids(&state(2, 10, &[]), |_| false),
            Vec::<String>::new()
        );
        // A value that is not a full id is never present, whatever the lookup says.
        let bad = state(3, 10, &[("refs/heads/main", A), ("refs/tags/v1", "abc123")]);
        assert_eq!(missing_oids(&bad, |_| true), vec!["abc123".to_owned()]);
    }

    #[test]
    fn unsatisfiable_states_never_authorise() {
        // The repository holds A at main; the newest held state names an abbreviated id.
        let current = refs(&[("refs/heads/main", A)]);
        let bad = purg(state(2, 30, &[("refs/heads/main", "abc123")]));
        let push_b = [up(A, B, "refs/heads/main")];
        match decide(&current, &push_b, std::slice::from_ref(&bad)) {
            PushDecision::Reject(r) => {
                assert_eq!(r.reasons.len(), 1);
                assert!(r.reasons[0].contains("not a full 40 or 64 character"), "{:?}", r.reasons);
                assert!(r.reasons[0].contains("refs/heads/main") && r.reasons[0].contains("abc123"));
            }
            other => panic!("{other:?}"),
        }
        // Next to a satisfiable state, the reasons compare against the satisfiable one and a
        // matching push is matched to it, even though the unsatisfiable one is newer.
        let good = stored(state(1, 10, &[("refs/heads/main", B)]));
        match decide(&current, &push_b, &[bad.clone(), good.clone()]) {
            PushDecision::Accept(a) => assert_eq!(a.matched_state, Some((id(1), Source::Stored))),
            other => panic!("{other:?}"),
        }
        let push_c = [up(A, C, "refs/heads/main")];
        match decide(&current, &push_c, &[bad, good]) {
            PushDecision::Reject(r) => assert!(r.reasons[0].contains(short_oid(&id(1).to_hex())), "{:?}", r.reasons),
            other => panic!("{other:?}"),
        }
    }
}
