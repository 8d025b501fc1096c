//! Push authorisation for the pre-receive hook (docs/protocol.md#push-authorisation, decisions 5
//! and 6). Gathers the inputs — current refs, the maintainer set's latest stored state,
//! held states (parsed once and indexed by declared refs, `held_index`), known pull requests — and
//! hands them to the pure `grasp_state::git::push::decide_explained` (`decide_push_among`, and whether
//! a state not known here could change a refusal: then, in a replica set, the other replicas are
//! asked for the identifier's events first, `crate::peers::replica_reads`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use grasp_state::contract::hook_api::PreReceiveResponse;
use grasp_state::nostr::nip34::{PullRequest, Source};
use grasp_state::git::push::{decide_explained, with_reasons, PushDecision, PushRequest, Rejection};
use grasp_state::git::push_index::IndexedCandidates;
use grasp_state::purgatory::RepoId;
use grasp_state::names::refs::RefUpdate;
use grasp_state::authority::maintainers::MaintainerSet;
use nostr::prelude::{EventId, PublicKey, ToBech32};

use crate::git;
use crate::grasp::Grasp;

/// What the pusher is told of each git-first `refs/nostr/<id>` ref an accepted push brings.
pub(crate) fn placeholder_messages(acc: &grasp_state::git::push::Accepted) -> Vec<String> {
    acc.placeholders
        .iter()
        .map(|(id, commit)| {
            format!(
                "grasp: refs/nostr/{} accepted; it waits for its pull request event (commit {})",
                &id.to_hex()[..12],
                &commit[..commit.len().min(12)]
            )
        })
        .collect()
}

/// A push decided on what this server holds, with what the rest of the authorisation needs.
struct Gathered {
    all: std::sync::Arc<Vec<(grasp_state::nostr::nip34::Announcement, Source)>>,
    set: std::sync::Arc<MaintainerSet>,
    pr_authors: BTreeMap<EventId, PublicKey>,
    decision: PushDecision,
    /// Refused for want of a state alone ([`grasp_state::git::push::Explained::wants_a_state`]).
    wants_a_state: bool,
}

impl Grasp {
    /// An accepted push's git-first pull request refs reserve their placeholders in `repo` now,
    /// so that the purgatory's caps apply before any data lands, journalled before the refs may
    /// land (the record of a crash-lost placeholder would leave its ref behind for good). A
    /// refusal of the caps, or a journal that cannot be written, refuses the push. `address`:
    /// the pusher's, as counted against its share of the placeholders (`None`: unknown);
    /// `incoming`: the bytes the push brings, unsigned data of that address while the
    /// placeholders wait (docs/protocol.md#caps).
    pub(crate) async fn reserve_placeholders(&self, repo: &RepoId, decision: PushDecision, address: Option<IpAddr>, incoming: u64) -> PushDecision {
        match decision {
            PushDecision::Accept(acc) if !acc.placeholders.is_empty() && incoming > 0 && !self.trust.disk.has_room_for_strangers() => {
                self.metrics.unsigned_refused(grasp_state::purgatory::UnsignedScope::Total);
                PushDecision::Reject(Rejection { reasons: vec![crate::grasp::budgets::STRANGER_LOW_DISK.to_string()] })
            }
            PushDecision::Accept(acc) => match self.purgatory.reserve_placeholders(repo, &acc.placeholders, address, incoming) {
                Ok(durable) => match durable.wait().await {
                    Ok(()) => PushDecision::Accept(acc),
                    Err(e) => PushDecision::Reject(Rejection { reasons: vec![format!("error: {e}; push again later")] }),
                },
                Err(refused) => {
                    if let crate::grasp::purgatory::ReserveRefused::Unsigned(full) = &refused {
                        self.metrics.unsigned_refused(full.scope);
                    }
                    PushDecision::Reject(Rejection { reasons: refused.reasons() })
                }
            },
            rejected => rejected,
        }
    }

    /// The refusal of a push to `owner`'s repository when it is a read-only archive (GRASP-05:
    /// its announcement does not list this service, the archive took it, and
    /// `--archive-writable` is off), naming where it is hosted.
    fn archive_refusal(&self, owner: &PublicKey, all: &[(grasp_state::nostr::nip34::Announcement, Source)]) -> Option<String> {
        let (a, _) = all.iter().find(|(a, _)| a.owner == *owner)?;
        if self.archive.writable || self.hosting(a) != crate::grasp::Hosting::Archived {
            return None;
        }
        let hosted: Vec<&str> = a.clone_urls.iter().map(String::as_str).take(5).collect();
        let hosted = if hosted.is_empty() { "the servers its announcement lists".to_string() } else { hosted.join(", ") };
        Some(format!(
            "grasp: this server keeps a read-only archive of this repository (GRASP-05); it is hosted at {hosted}: push there \
             (this copy follows it by itself)"
        ))
    }

    /// Why held states that declare what this push brings move nothing here: their authors are
    /// invited, left, or strangers to `owner`'s repository (docs/protocol.md#maintainer-authority).
    /// One line per author, at most three.
    fn unconfirmed_authors(&self, owner: &PublicKey, identifier: &str, set: &MaintainerSet, updates: &[RefUpdate]) -> Vec<String> {
        let pushed: Vec<(&str, &str)> = updates
            .iter()
            .filter(|u| grasp_state::names::refs::is_served_ref(&u.name) && u.new != grasp_state::names::refs::ZERO_OID)
            .map(|u| (u.name.as_str(), u.new.as_str()))
            .collect();
        if pushed.is_empty() {
            return Vec::new();
        }
        let repo = format!("{}/{identifier}", owner.to_bech32().unwrap_or_default());
        let mut authors: Vec<PublicKey> = Vec::new();
        for (author, ev) in self.purgatory.state_events_outside(identifier, set) {
            let Ok(state) = grasp_state::nostr::nip34::RepoState::from_event(&ev) else { continue };
            let declares = pushed.iter().all(|(name, oid)| state.refs.get(*name).is_some_and(|v| v == oid));
            if declares && !authors.contains(&author) {
                authors.push(author);
            }
        }
        authors.iter().take(3).filter_map(|author| set.standing(author).refusal(author, owner, &repo)).collect()
    }

    /// The push decided on what this server holds now: `Err` when it is refused before any
    /// state is looked at (unreadable refs, a read-only archive).
    async fn decide_here(&self, owner: &PublicKey, identifier: &str, repo: &std::path::Path, updates: &[RefUpdate], shown: &str) -> Result<Gathered, PreReceiveResponse> {
        let current = match tokio::task::spawn_blocking({
            let repo = repo.to_path_buf();
            move || git::read_refs(&repo)
        })
        .await
        {
            Ok(Ok(refs)) => refs,
            _ => return Err(PreReceiveResponse::reject(vec!["grasp: push rejected: the relay could not read this repository's refs; try again".into()])),
        };
        let all = self.announcements(identifier).await;
        if let Some(refusal) = self.archive_refusal(owner, &all) {
            tracing::info!(repo = %shown, reason = "read-only archive", "push rejected");
            return Err(PreReceiveResponse::reject(vec!["grasp: push rejected".into(), refusal]));
        }
        let set = self.maintainer_set(*owner, &all);
        let stored = self.latest_stored_state(identifier, &set).await;
        // The candidates of `grasp_state::git::push::push_candidates` (the stored state, and the held
        // states newer than it), with the held states matched through their index by declared
        // refs (`IndexedCandidates` applies the same rule).
        let held = self.held_index(owner, identifier, &set);
        let candidates = IndexedCandidates { stored: stored.as_ref(), held: &held };
        let mut known_prs = BTreeMap::new();
        let mut pr_authors = BTreeMap::new();
        let mut not_prs = Vec::new();
        for u in updates {
            let Some(id) = u.name.strip_prefix("refs/nostr/").and_then(|h| EventId::from_hex(h).ok()) else { continue };
            if let Some(ev) = self.event_by_id(&id).await {
                match PullRequest::from_event(&ev) {
                    Ok(pr) => {
                        known_prs.insert(id, pr.commit);
                        pr_authors.insert(id, ev.pubkey);
                    }
                    // A stored event that is no pull request will never claim this ref.
                    Err(_) if !u.is_noop() && u.new != grasp_state::names::refs::ZERO_OID => not_prs.push(format!(
                        "{}: event {} is a kind {} event, not a pull request (1618) or pull request update (1619) \
                         with a `c` tag: push pull request commits to refs/nostr/<pull request event id>",
                        u.name,
                        &id.to_hex()[..12],
                        ev.kind.as_u16()
                    )),
                    Err(_) => {}
                }
                continue;
            }
            if let Some(ev) = self.purgatory.held_pr_event(&id) {
                if let Some(commit) = self.purgatory.held_pr_commit(&id) {
                    known_prs.insert(id, commit);
                    pr_authors.insert(id, ev.pubkey);
                }
            }
        }
        let request = PushRequest { current: &current, updates, candidates: &[], known_prs: &known_prs };
        let explained = decide_explained(&request, &candidates);
        // Only a refusal for want of a state alone may change with events from elsewhere.
        let wants_a_state = explained.wants_a_state && not_prs.is_empty();
        // One rejection lists every problem, the relay's own checks included.
        let decision = with_reasons(explained.decision, not_prs);
        Ok(Gathered { all, set, pr_authors, decision, wants_a_state })
    }

    /// May this push go in?
    /// `address`: the pusher's (`None`: unknown); `incoming`: the bytes of objects the push
    /// brings (0: unknown). In a replica set, a push refused for want of a state
    /// (`grasp_state::git::push::Explained::wants_a_state`) is decided again after the other replicas
    /// were asked for the identifier's announcements and states (`crate::peers::replica_reads`,
    /// bounded): the client may have sent them to another replica a moment before.
    pub async fn authorize_push(&self, owner: &PublicKey, identifier: &str, updates: &[RefUpdate], address: Option<IpAddr>, incoming: u64) -> PreReceiveResponse {
        let shown = format!("{}/{identifier}", owner.to_bech32().unwrap_or_default());
        let Some(repo) = self.repo_path(owner, identifier) else {
            return PreReceiveResponse::reject(vec!["grasp: push rejected: not a valid repository path".into()]);
        };
        if !self.trust.disk.has_room() {
            tracing::info!(repo = %shown, reason = "low disk", "push rejected");
            return PreReceiveResponse::reject(vec![format!("grasp: push rejected: {}", grasp_state::trust::free_disk::LOW_DISK_PUSH)]);
        }
        let mut gathered = match self.decide_here(owner, identifier, &repo, updates, &shown).await {
            Ok(gathered) => gathered,
            Err(refusal) => return refusal,
        };
        if gathered.wants_a_state {
            if let Some(reads) = self.replica_reads.get() {
                if reads.ask(identifier, &shown).await.new_here > 0 {
                    gathered = match self.decide_here(owner, identifier, &repo, updates, &shown).await {
                        Ok(gathered) => gathered,
                        Err(refusal) => return refusal,
                    };
                }
            }
        }
        let Gathered { all, set, pr_authors, decision, .. } = gathered;
        // Git-first pull request refs: reserve their placeholders now, so that the purgatory's caps
        // apply before any data lands and a crash before post-receive loses nothing.
        let decision = self.reserve_placeholders(&RepoId::new(*owner, identifier), decision, address, incoming).await;
        // Pull request data of authors that are no maintainers counts against their budgets.
        let decision = self.charge_pr_matches(Some(owner), identifier, decision, &pr_authors, address, incoming).await;
        // The owner's own history counts against their quota (and a new owner's address's day).
        let decision = self.check_owner_quota(owner, decision, address, incoming).await;
        match decision {
            PushDecision::Accept(acc) => {
                let mut messages = Vec::new();
                if let Some((state_id, source)) = acc.matched_state {
                    messages.push(format!("grasp: push matches repository state {}", &state_id.to_hex()[..12]));
                    if source == Source::Purgatory {
                        // Trigger 2 of the expiry extensions: git data is arriving.
                        let owners: Vec<_> = all.iter().filter(|(a, _)| &a.owner == owner).map(|(a, s)| (a.owner, *s)).collect();
                        self.extend_held_announcements(&owners, identifier).await;
                        self.purgatory.extend_states(identifier, &[state_id]);
                    }
                }
                messages.extend(placeholder_messages(&acc));
                tracing::info!(repo = %shown, state = ?acc.matched_state.map(|(id, _)| id), "push authorised");
                PreReceiveResponse::accept(messages)
            }
            PushDecision::Reject(mut rej) => {
                rej.reasons.extend(self.unconfirmed_authors(owner, identifier, &set, updates));
                tracing::info!(repo = %shown, reasons = ?rej.reasons, "push rejected");
                let mut messages = vec!["grasp: push rejected".to_string()];
                messages.extend(rej.reasons.into_iter().map(|r| format!("grasp: {r}")));
                PreReceiveResponse::reject(messages)
            }
        }
    }
}
