//! Which events this relay accepts (docs/protocol.md#acceptance and #decisions 1-3, 6, 8, 10),
//! and where they go: straight to the store, or to the purgatory until their git data arrives.
//!
//! - 30617 announcements must list this service (or come from the owner or a maintainer of an
//!   accepted announcement with the same identifier); new ones wait in the purgatory.
//! - 30618 states need an announcement whose recursive maintainer set holds the author.
//! - 1618/1619 pull requests need an `a` tag naming an announced repository; with GRASP-06, one
//!   whose `clone` tag names its signer's contributor repository here (`/prs/<npub>/<d>.git`) is
//!   held too, and the signer's contributor repositories count among those it names.
//! - 10317 grasp lists and kind 5 deletions are accepted from anyone.
//! - Everything else is a *related event*: accepted when it tags (`a`/`A`/`q` coordinates,
//!   `e`/`E`/`q` ids), or is tagged by, an accepted event. Accepted means stored here, or held in
//!   the purgatory: an announcement or a pull request answered `OK true "purgatory: ..."` already
//!   exists for its author, so comments, statuses and issues about it are taken (and served) at
//!   once; the held event itself is served only when its git data arrives. Events tagged only by
//!   a held event are not accepted (the purgatory's tags are not indexed).
//! - 10317 and kind 5 events never make another event acceptable: anyone may publish them, so
//!   letting them anchor a relation would let anyone store anything.
//!
//! Every refusal is a NIP-01 `blocked:`/`invalid:`/`rate-limited:`/`error:` message that says
//! what to do instead.

use grasp_state::authority::admission::{
    admit_announcement, state_authority, state_placement, AfterRepo, AnnouncementAdmission, AnnouncementFacts,
    StateAuthority, StateFacts, StatePlacement,
};
use grasp_state::authority::maintainers::Standing;
use grasp_state::authority::announcements::{is_owner_or_listed, AnnouncementChange};
use grasp_state::names::identifier::validate_identifier;
use grasp_state::git::release::{pr_ref, PrRef};
use grasp_state::nostr::nip34::{
    references, Announcement, PullRequest, RepoState, KIND_ANNOUNCEMENT, KIND_DELETION, KIND_PR,
    KIND_PR_UPDATE, KIND_STATE, KIND_USER_GRASP_LIST,
};
use grasp_state::purgatory::{PurgatoryFull, RepoId, Removed};
use std::net::IpAddr;
use std::path::PathBuf;

use nostr::prelude::{Event, Filter, Kind, SingleLetterTag, ToBech32};

use crate::git;
use crate::git::objects::surely_missing;
use crate::grasp::locks::{PushLocks, RepoGuards};
use crate::grasp::Grasp;
use crate::grasp::policy::Admission;
use crate::grasp::purgatory::HoldRefused;
use crate::store::{Known, SaveOutcome};
use crate::grasp::Origin;

/// The answer for events accepted into the purgatory.
pub const PURGATORY_MESSAGE: &str = "purgatory: won't be served until git data arrives";

/// How many stored events tagging an incoming event are examined for one that may anchor it
/// ("is tagged by"). Events of [`is_unconditional`] kinds are skipped, so a flood of those can
/// at worst hide a real anchor (a refusal), never admit an unrelated event.
const TAGGED_BY_SCAN: usize = 32;

/// At most this many coordinates and this many event ids of one event are looked up (each is a
/// store query): an event relates through one of its first references or not at all.
const MAX_REFERENCES_CHECKED: usize = 64;

/// Kinds accepted from anyone without any relation (docs/protocol.md#acceptance). They never anchor
/// a related event.
pub fn is_unconditional(kind: u16) -> bool {
    kind == KIND_DELETION || kind == KIND_USER_GRASP_LIST
}

/// The refusal for a republished deleted event.
pub const DELETED_MESSAGE: &str = "blocked: this event was deleted by its author (kind 5) and cannot be \
     republished; publish a new event instead (a replaceable or addressable one with a created_at \
     later than the deletion)";

/// The answer for a state event that already waited its full time in the purgatory without its
/// git data (it is not held again, so it cannot loop through purgatory and background sync).
pub const EXPIRED_STATE_MESSAGE: &str = "blocked: this state event already expired in purgatory without its git data; \
     sign a new state event and push its commits";

/// The refusal of an event of `kind` the purgatory has no room for.
fn full(e: PurgatoryFull, kind: u16) -> Admission {
    Admission::Reject(e.refusal(kind))
}

impl Grasp {
    /// Decides what happens to a verified event submitted by `submitter`.
    pub async fn admit(&self, ev: &Event, submitter: &grasp_state::trust::auth::Submitter<'_>) -> Admission {
        // Trust first (docs/protocol.md#trust): AUTH events, NIP-70, curation, private
        // repositories on a public service, the new-repository caps. Before anything is created.
        if let Err(msg) = self.trust.admit(ev, submitter, |a| {
            self.hosting(a) != crate::grasp::Hosting::No && self.repo_path(&a.owner, &a.identifier).is_some_and(|p| !p.exists())
        }) {
            return Admission::Reject(msg);
        }
        if self.trust.private && ev.kind.as_u16() == crate::trust::KIND_PRIVATE_GRASP_LIST {
            // A member's encrypted private service list (members only reach this point).
            return Admission::Store;
        }
        // Relay sync's events have their git data fetched sooner (docs/protocol.md#background-sync).
        let origin = if submitter.from_sync { Origin::Sync } else { Origin::User };
        let store = self.relay.store();
        let kind = ev.kind.as_u16();
        if !matches!(kind, KIND_ANNOUNCEMENT | KIND_STATE | KIND_PR | KIND_PR_UPDATE | KIND_DELETION | KIND_USER_GRASP_LIST) {
            // A related event (the bulk of the traffic) asks the store nothing for an author
            // without deletion requests: the store's own save answers duplicates and deleted
            // ids (see `admit_related`).
            let deleted = match store.deletion_requested(ev).await {
                Ok(false) => false,
                _ => store.known(ev).await.unwrap_or(Known::New) == Known::Deleted,
            };
            if deleted {
                return Admission::Reject(DELETED_MESSAGE.into());
            }
            return self.admit_related(ev).await;
        }
        let known = store.known(ev).await.unwrap_or(Known::New);
        if known == Known::Deleted {
            return Admission::Reject(DELETED_MESSAGE.into());
        }
        match kind {
            KIND_ANNOUNCEMENT => self.admit_announcement(ev, submitter.address).await,
            KIND_STATE => self.admit_state(ev, origin, submitter.address).await,
            KIND_PR | KIND_PR_UPDATE => self.admit_pr(ev, origin, submitter.address).await,
            KIND_DELETION => self.admit_deletion(ev).await,
            _ => Admission::Store,
        }
    }

    /// `address`: the sender's, as counted against its share of the purgatory (`None`: relay sync).
    /// An accepted announcement that changes some repository's confirmed maintainers (an
    /// invitation accepted, a maintainer who left or was removed, a new lead) is stored here, not
    /// by the caller, and then those repositories are realigned in the background
    /// (docs/protocol.md#maintainer-authority).
    async fn admit_announcement(&self, ev: &Event, address: Option<IpAddr>) -> Admission {
        let a = match Announcement::from_event(ev) {
            Ok(a) => a,
            Err(e) => return Admission::Reject(format!("invalid: {e}")),
        };
        if let Err(e) = validate_identifier(&a.identifier) {
            return Admission::Reject(format!("invalid: {e}"));
        }
        let all = self.announcements(&a.identifier).await;
        let had_one = all.iter().any(|(x, _)| x.owner == a.owner);
        let change = AnnouncementChange::new(&a.owner, &a.claims, &all);
        let admission = self.admit_announcement_among(ev, &a, &all, &change, address).await;
        let accepted = !matches!(admission, Admission::Reject(_));
        let mut changed = if accepted { change.changed_owners() } else { Vec::new() };
        // A first announcement makes a new repository with no refs yet: its own pushes follow.
        if !had_one {
            changed.retain(|owner| *owner != a.owner);
        }
        if changed.is_empty() {
            return admission;
        }
        let admission = match admission {
            Admission::Store => match self.publish(ev).await {
                Ok(message) => Admission::Published(message),
                Err(e) => return Admission::Reject(e),
            },
            other => other,
        };
        for owner in &changed {
            tracing::info!(repo = %format!("{}/{}", owner.to_bech32().unwrap_or_default(), a.identifier), event = %ev.id, author = %a.owner, "confirmed maintainers changed; the repository follows in the background");
            self.copies.request_realign(&a.identifier, owner);
        }
        // What the author's own repository released may now be authoritative elsewhere.
        self.copies.request(&a.identifier, &a.owner);
        admission
    }

    /// The verdict on announcement `a` among the identifier's announcements `all`, `change`
    /// being what it changes there.
    async fn admit_announcement_among(
        &self,
        ev: &Event,
        a: &Announcement,
        all: &[(Announcement, grasp_state::nostr::nip34::Source)],
        change: &AnnouncementChange<'_>,
        address: Option<IpAddr>,
    ) -> Admission {
        let existing = all.iter().find(|(x, _)| x.owner == a.owner).map(|(old, source)| (*source, old.recency() > a.recency()));
        let repo = self.repo_path(&a.owner, &a.identifier);
        let repo_exists = repo.as_ref().is_some_and(|p| p.exists());
        let hosting = self.hosting(a);
        let lists_service = hosting == crate::grasp::Hosting::Listed;
        let archived = hosting == crate::grasp::Hosting::Archived;
        // A repository that already holds git data proves itself; only asked when it decides.
        let repo_has_refs = match (&repo, existing) {
            (Some(repo), None) if (lists_service || archived) && repo_exists => {
                let repo = repo.clone();
                tokio::task::spawn_blocking(move || git::read_refs(&repo).map(|r| !r.is_empty()).unwrap_or(false))
                    .await
                    .unwrap_or(false)
            }
            _ => false,
        };
        let facts = AnnouncementFacts {
            existing,
            lists_service,
            archived,
            owner_or_listed: is_owner_or_listed(&a.owner, all),
            repo_exists,
            repo_has_refs,
            confirmed_by_served: existing.is_none()
                && change.confirming_owners().iter().any(|(_, source)| *source == grasp_state::nostr::nip34::Source::Stored),
            expired: self.purgatory.is_expired(&ev.id),
        };
        let npub = a.owner.to_bech32().unwrap_or_default();
        let then = match admit_announcement(&facts) {
            AnnouncementAdmission::Reject(msg) => return Admission::Reject(msg),
            AnnouncementAdmission::RejectNotListed => return Admission::Reject(not_listed_message(&self.public_host, a)),
            AnnouncementAdmission::DropHeldAndStore => {
                // Service change: a newer announcement dropping this service ends the owner's
                // purgatory entry and its bare repository (docs/protocol.md#decisions, decision 3).
                self.drop_held_announcement(&a.owner, &a.identifier, "service no longer listed").await;
                return Admission::Store;
            }
            AnnouncementAdmission::StoreUnlisted => return Admission::Store,
            AnnouncementAdmission::WithRepo { check_room, then } => {
                if check_room {
                    if let Err(e) = self.purgatory.check_room(&a.owner, address) {
                        return full(e, ev.kind.as_u16());
                    }
                }
                then
            }
        };
        if let Err(e) = self.ensure_repo(&a.owner, &a.identifier).await {
            return Admission::Reject(format!("error: could not create the repository: {e}"));
        }
        match then {
            AfterRepo::Store => Admission::Store,
            AfterRepo::ReplaceHeld => {
                let added = self.purgatory.hold_announcement(ev.clone(), a.owner, a.identifier.clone(), a.relays.iter().cloned().collect(), address);
                match added {
                    Ok((added, durable)) => {
                        // Reviving a soft-expired entry: its repository may have been deleted
                        // between the creation above and the revival; make sure it exists.
                        if added.revived {
                            if let Err(e) = self.ensure_repo(&a.owner, &a.identifier).await {
                                return Admission::Reject(format!("error: could not recreate the repository: {e}"));
                            }
                            tracing::info!(repo = %format!("{npub}/{}", a.identifier), event = %ev.id, "soft-expired announcement revived by its replacement");
                        }
                        Admission::Purgatory(PURGATORY_MESSAGE.into(), durable)
                    }
                    Err(e) => full(e, ev.kind.as_u16()),
                }
            }
            AfterRepo::Hold => {
                match self.purgatory.hold_announcement(ev.clone(), a.owner, a.identifier.clone(), a.relays.iter().cloned().collect(), address) {
                    Ok((_, durable)) => {
                        tracing::info!(repo = %format!("{npub}/{}", a.identifier), event = %ev.id, archived, "announcement held in purgatory");
                        Admission::Purgatory(PURGATORY_MESSAGE.into(), durable)
                    }
                    Err(e) => full(e, ev.kind.as_u16()),
                }
            }
        }
    }

    async fn admit_state(&self, ev: &Event, origin: Origin, address: Option<IpAddr>) -> Admission {
        let s = match RepoState::from_event(ev) {
            Ok(s) => s,
            Err(e) => return Admission::Reject(format!("invalid: {e}")),
        };
        if let Err(e) = validate_identifier(&s.identifier) {
            return Admission::Reject(format!("invalid: {e}"));
        }
        let all = self.announcements(&s.identifier).await;
        // Only the owners whose announcements reach the author, through the trust index: the
        // identifier's other owners (anyone may announce it) cost this event nothing.
        let standings = self.authority.standings(s.author, &all);
        let owners_of: Vec<_> = all.iter().map(|(a, _)| a.owner).collect();
        match state_authority(&s.identifier, &s.author, !all.is_empty(), &standings, &owners_of) {
            StateAuthority::Authorised => {}
            StateAuthority::Refused(msg) => return Admission::Reject(msg),
            StateAuthority::Invited { owner, by } => return self.hold_invitee_state(ev, &s, &owner, &by, address),
        }
        let owners: Vec<_> = standings
            .iter()
            .filter(|(_, _, standing)| *standing == Standing::Maintainer)
            .map(|(owner, source, _)| (*owner, *source))
            .collect();
        // Trigger 1 of the expiry extensions; revives soft-expired announcements.
        self.extend_held_announcements(&owners, &s.identifier).await;
        // Git data already here (in some authorised repository)?
        let declares_refs = !s.refs.is_empty();
        let data_present = self.state_data_present(&s, &owners).await;
        match state_placement(&StateFacts { declares_refs, data_present }) {
            StatePlacement::StoreAndRelease => {
                // A place in the queue of each governed repository first: when every one of them
                // already has its queue full, the event is refused before it is stored.
                let repos = self.governed_repos(&s.identifier, &s.author, &all);
                let queue = self.locks.enqueue(repos.iter().map(|(_, repo)| repo.clone()));
                if queue.all_crowded() {
                    let busy = queue.crowded().first().map(|e| self.shown_repo(e.repo())).unwrap_or_default();
                    return Admission::Reject(format!(
                        "rate-limited: repository {busy} is busy (a push is running and other events already wait \
                         for it); send this state event again in a few seconds"
                    ));
                }
                let message = match self.publish(ev).await {
                    Ok(message) => message,
                    Err(e) => return Admission::Reject(e),
                };
                // Waits at most --event-lock-wait for each repository; the busy ones are deferred.
                // (A duplicate is processed again too: its release may have been deferred.)
                self.process_queued(&s.identifier, &s.author, &repos, queue).await;
                Admission::Published(message)
            }
            StatePlacement::Hold => match self.hold_state(ev, &s, address) {
                Ok(durable) => {
                    tracing::info!(identifier = %s.identifier, event = %ev.id, "state event held in purgatory");
                    self.note_waiting(&s.identifier, origin);
                    Admission::Purgatory(PURGATORY_MESSAGE.into(), durable)
                }
                Err(refusal) => refusal,
            },
        }
    }

    /// Holds state `s` in the purgatory; `Err`: the refusal (it already expired once, or the
    /// purgatory is full).
    fn hold_state(&self, ev: &Event, s: &RepoState, address: Option<IpAddr>) -> Result<crate::grasp::journal::Durable, Admission> {
        match self.purgatory.hold_state(ev.clone(), s.author, s.identifier.clone(), address) {
            Ok((_, durable)) => Ok(durable),
            Err(HoldRefused::Expired) => Err(Admission::Reject(EXPIRED_STATE_MESSAGE.into())),
            Err(HoldRefused::Full(e)) => Err(full(e, ev.kind.as_u16())),
        }
    }

    /// A state by a key invited into `owner`'s repository by `by` but not confirmed
    /// (docs/protocol.md#maintainer-authority): held, never stored, so it moves nothing; if the
    /// invitee accepts while it waits, the release after the acceptance serves it.
    fn hold_invitee_state(&self, ev: &Event, s: &RepoState, owner: &nostr::prelude::PublicKey, by: &nostr::prelude::PublicKey, address: Option<IpAddr>) -> Admission {
        let repo = format!("{}/{}", owner.to_bech32().unwrap_or_default(), s.identifier);
        let durable = match self.hold_state(ev, s, address) {
            Ok(durable) => durable,
            Err(refusal) => return refusal,
        };
        tracing::info!(repo = %repo, event = %ev.id, author = %s.author, invited_by = %by, "state of an invitee held in purgatory: it moves nothing until they accept");
        Admission::Purgatory(
            format!(
                "{PURGATORY_MESSAGE}; {} is invited as a maintainer of {repo} by {} but has not accepted: \
                 this state moves nothing until it runs `ngit repo accept`",
                s.author.to_bech32().unwrap_or_default(),
                by.to_bech32().unwrap_or_default()
            ),
            durable,
        )
    }

    /// Whether every object state `s` names is in the repository of one of `owners` (those
    /// whose maintainer set includes its author): the state can be released from there. A state
    /// naming no refs has no data to wait for, so it is never "present".
    pub(crate) async fn state_data_present(&self, s: &RepoState, owners: &[(nostr::prelude::PublicKey, crate::grasp::Source)]) -> bool {
        if s.refs.is_empty() {
            return false;
        }
        for (owner, _) in owners {
            let Some(repo) = self.repo_path(owner, &s.identifier) else { continue };
            let oids: Vec<String> = s.refs.values().cloned().collect();
            // Most held states name commits not pushed yet: say so without a git process.
            let present = tokio::task::spawn_blocking(move || {
                !surely_missing(&repo, &oids) && git::missing_objects(&repo, &oids).is_ok_and(|m| m.is_empty())
            })
            .await
            .unwrap_or(false);
            if present {
                return true;
            }
        }
        false
    }

    /// Whether the held state event `ev`'s git data is present where it can be released from
    /// (see [`Self::state_data_present`]).
    pub async fn held_state_data_present(&self, ev: &Event) -> bool {
        let Ok(s) = RepoState::from_event(ev) else { return false };
        let all = self.announcements(&s.identifier).await;
        let owners = self.authority.owners_trusting(s.author, &all);
        self.state_data_present(&s, &owners).await
    }

    async fn admit_pr(&self, ev: &Event, origin: Origin, address: Option<IpAddr>) -> Admission {
        let pr = match PullRequest::from_event(ev) {
            Ok(pr) => pr,
            Err(e) => return Admission::Reject(format!("invalid: {e}")),
        };
        let mut announced: Vec<RepoId> = Vec::new();
        for (owner, identifier) in &pr.repos {
            if self.repo_path(owner, identifier).is_some() && self.is_announced_by(owner, identifier).await {
                announced.push(RepoId::new(*owner, identifier.clone()));
            }
        }
        // GRASP-06: the signer's contributor repositories count among the repositories it names,
        // and a pull request whose repository is not announced here is held when its `clone` tag
        // names one of them here exactly (docs/protocol.md#contributor-repositories).
        let contributor = if self.grasp06 { grasp_state::git::prs::contributor_targets(&pr) } else { Vec::new() };
        if announced.is_empty() && !(self.grasp06 && grasp_state::git::prs::relaxed_identifier(&pr, &self.public_host).is_some()) {
            return Admission::Reject(match pr.repos.first() {
                Some((owner, identifier)) => format!(
                    "blocked: repository 30617:{}:{identifier} is not announced on this relay; \
                     publish its announcement here first, or tag a repository announced here{}",
                    owner.to_hex(),
                    self.contributor_advice(&pr.author, identifier)
                ),
                None => "blocked: this pull request names no repository; add an `a` tag \
                         [\"a\", \"30617:<owner hex>:<identifier>\"] of a repository announced here"
                    .into(),
            });
        }
        let targets: Vec<RepoId> = announced.iter().chain(&contributor).cloned().collect();
        let identifier = targets.first().map(|t| t.identifier.clone()).unwrap_or_default();
        // The unsigned data of a git-first push this event claims becomes its author's
        // contributor data: refused here, before any ref is set, when it does not fit.
        if let Err(line) = self.claim_unsigned(ev, &identifier, false).await {
            return Admission::Reject(line);
        }
        let ref_name = format!("refs/nostr/{}", ev.id.to_hex());
        // Every named repository's lock is held until the event is stored: a git-first
        // placeholder expiring meanwhile waits, then sees the stored event and keeps the ref
        // (docs/protocol.md#placeholders).
        let repos: Vec<(RepoId, PathBuf)> =
            targets.iter().filter_map(|t| self.path_of(t).map(|p| (t.clone(), p))).filter(|(_, p)| p.exists()).collect();
        // Refs a git-first push wrote under this id into another contributor's repository (or
        // one for an identifier the event does not name) are not this pull request's: removed
        // with the rest of the check (the signer's own repositories are the only ones it binds).
        let stray: Vec<(RepoId, PathBuf)> = self
            .purgatory
            .placeholder_destinations(&ev.id)
            .into_iter()
            .filter(|d| !d.space.is_hosted() && !targets.contains(d))
            .filter_map(|d| self.path_of(&d).map(|p| (d, p)))
            .filter(|(_, p)| p.exists())
            .collect();
        let paths: Vec<PathBuf> = repos.iter().chain(&stray).map(|(_, p)| p.clone()).collect();
        let wait = self.locks.limits().event_wait;
        let guards = match RepoGuards::acquire_within(&self.locks, paths.clone(), PushLocks::Skip, wait).await {
            Ok(guards) => Some(guards),
            Err(error) => {
                // Busy past the lock wait: the event is held and released when its commit is seen.
                tracing::warn!(event = %ev.id, %error, "pull request refs not checked");
                None
            }
        };
        let mut served_from_contributor = None;
        let mut served = false;
        for (target, path) in &repos {
            let Some(repo) = guards.as_ref().and_then(|guards| guards.get(path)).map(|repo| repo.path().to_path_buf()) else { continue };
            let (ref_name, commit) = (ref_name.clone(), pr.commit.clone());
            let ok = tokio::task::spawn_blocking(move || -> Result<bool, git::GitError> {
                let refs = git::read_refs(&repo)?;
                let current = refs.get(&ref_name).map(String::as_str);
                let present = current == Some(commit.as_str())
                    || git::missing_objects(&repo, std::slice::from_ref(&commit))?.is_empty();
                match pr_ref(&ref_name, current, &commit, present) {
                    PrRef::Served => Ok(true),
                    PrRef::Set(change) => git::update_refs(&repo, &[change]).map(|()| true),
                    // A git-first push under this id brought another commit: remove it; the
                    // event waits for the right one.
                    PrRef::Missing { stale } => git::update_refs(&repo, stale.as_slice()).map(|()| false),
                }
            })
            .await;
            if matches!(ok, Ok(Ok(true))) {
                served = true;
                if !target.space.is_hosted() && served_from_contributor.is_none() {
                    served_from_contributor = Some(path.clone());
                }
            }
        }
        for (dest, path) in &stray {
            if guards.as_ref().and_then(|guards| guards.get(path)).is_none() {
                continue;
            }
            if self.remove_stray_ref(path, &ref_name).await {
                tracing::info!(event = %ev.id, repo = %self.shown_repo(path), "refs/nostr ref of another contributor's repository removed: the pull request does not bind to it");
                self.purgatory.placeholder_cleaned(&ev.id, std::slice::from_ref(dest));
            }
        }
        if served {
            // Store first; the placeholder goes only once the event is stored (a refused or failed
            // store leaves it to expire and clean its ref as before).
            let published = self.publish(ev).await;
            if published.is_ok() {
                let _ = self.claim_unsigned(ev, &identifier, true).await;
                self.purgatory.remove_placeholder(&ev.id);
                // The signed event released the staged commit: it may now enter the family's
                // object pool (in the background; docs/architecture.md, "Object pools").
                for (repo, _) in repos.iter().filter(|(repo, _)| repo.space == grasp_state::names::identifier::RepoSpace::Hosted) {
                    self.copies.request(&repo.identifier, &repo.owner);
                }
            }
            drop(guards);
            // Served from a contributor repository: copied where the owners look (never the
            // other way round).
            if let (Ok(_), Some(src)) = (&published, &served_from_contributor) {
                self.mirror_pull_request(&pr, src).await;
            }
            return match published {
                Ok(message) => Admission::Published(message),
                Err(e) => Admission::Reject(e),
            };
        }
        drop(guards);
        // The placeholder's ref was checked above (a wrong commit removed): the event takes over.
        self.purgatory.remove_placeholder(&ev.id);
        match self.purgatory.hold_pr(ev.clone(), pr.commit.clone(), targets, address) {
            Err(HoldRefused::Expired) => Admission::Reject(format!(
                "blocked: this pull request already expired in purgatory without its commit; \
                 push {} to {ref_name} first, then send the event again",
                pr.commit
            )),
            Ok((_, durable)) => {
                tracing::info!(event = %ev.id, commit = %pr.commit, contributor_only = announced.is_empty(), "pull request held in purgatory");
                // Background sync fetches into announced repositories only; a contributor
                // repository waits for its contributor's push.
                for target in &announced {
                    self.note_waiting(&target.identifier, origin);
                }
                Admission::Purgatory(PURGATORY_MESSAGE.into(), durable)
            }
            Err(HoldRefused::Full(e)) => full(e, ev.kind.as_u16()),
        }
    }

    /// Compare-and-deletes whatever `refs/nostr/<id>` holds in `repo` (its lock held); a
    /// contributor repository left without refs goes at its next maintenance pass.
    async fn remove_stray_ref(&self, repo: &std::path::Path, name: &str) -> bool {
        let (path, name) = (repo.to_path_buf(), name.to_string());
        let removed = tokio::task::spawn_blocking(move || -> Result<bool, git::GitError> {
            let refs = git::read_refs(&path)?;
            let Some(old) = refs.get(&name) else { return Ok(false) };
            git::update_refs(&path, &[git::RefChange::Delete { name, old: old.clone() }]).map(|()| true)
        })
        .await;
        if matches!(removed, Ok(Ok(true))) {
            crate::grasp::maintenance::after_ref_removal(self, repo);
            return true;
        }
        false
    }

    /// What to add to a refusal of a pull request for a repository not announced here: where
    /// this server would take it (GRASP-06), when it would.
    fn contributor_advice(&self, author: &nostr::prelude::PublicKey, identifier: &str) -> String {
        if !self.grasp06 {
            return String::new();
        }
        let urls = grasp_state::names::host::PublicUrls::new(&self.public_host);
        format!(
            ", or push it to this server's contributor repository: add the clone URL {} and push the commit to refs/nostr/<this event's id> there",
            urls.contributor_http_url(&grasp_state::names::identifier::npub_of(author), identifier)
        )
    }

    async fn admit_deletion(&self, ev: &Event) -> Admission {
        // Store first: a deletion the store refuses (it also targets someone else's stored
        // event) must not remove anything from the purgatory either. Once it is stored, held
        // events it names can no longer be released (the store refuses deleted events).
        match self.relay.publish(ev).await {
            Ok(SaveOutcome::Saved) => {}
            // Duplicate, invalid or deleted: `submit` answers from the store's verdict (saving
            // again changes nothing).
            Ok(_) => return Admission::Store,
            Err(e) => {
                tracing::error!(error = %e, id = %ev.id, "saving a deletion failed");
                return Admission::Reject("error: could not save the deletion; try again later".into());
            }
        }
        let ids: Vec<_> = ev.tags.event_ids().collect();
        let coords: Vec<_> = ev
            .tags
            .coordinates()
            .filter(|c| c.public_key == ev.pubkey)
            .map(|c| (c.kind.as_u16(), c.public_key, c.identifier.clone()))
            .collect();
        let (removed, durable) = self.purgatory.remove_deleted(&ev.pubkey, &ids, &coords, ev.created_at);
        // The deletion is stored; a removal lost by a crash would only hold a deleted event
        // (never released) until it expires. Still, answer once it is on disk.
        if let Err(e) = durable.wait().await {
            tracing::warn!(error = %e, deletion = %ev.id, "purgatory removals not journalled");
        }
        for r in removed {
            tracing::info!(event = %r.event_id(), deletion = %ev.id, "purgatory entry removed by deletion");
            if let Removed::Announcement(a) = r {
                if !a.soft_expired {
                    self.delete_repo(&a.owner, &a.identifier).await;
                }
            }
        }
        Admission::Published(String::new())
    }

    /// A related event whose author has not asked to delete it. Stored when it relates to an
    /// accepted event, or when the store already holds it (it was related when it came; the
    /// save answers `duplicate:`). Whether it is stored is asked only when it does not relate:
    /// the save itself answers duplicates and ids deleted earlier.
    async fn admit_related(&self, ev: &Event) -> Admission {
        if self.relates(ev).await {
            return Admission::Store;
        }
        if self.relay.store().known(ev).await.unwrap_or(Known::New) == Known::Stored {
            return Admission::Store;
        }
        let refs = references(ev);
        let unknown_repo = refs.coordinates.iter().find(|c| c.kind == KIND_ANNOUNCEMENT);
        Admission::Reject(match unknown_repo {
            Some(c) => format!(
                "blocked: repository {c} is not announced on this relay; publish its announcement \
                 here first (listing this server in `clone` and `relays`), or tag a repository \
                 announced here"
            ),
            None => "blocked: this relay only accepts git repository events (NIP-34) and events \
                     about them; tag a repository announced here with [\"a\", \"30617:<owner hex>:<identifier>\"] \
                     or an event stored here with [\"e\", \"<event id>\"]"
                .into(),
        })
    }

    /// Does `ev` tag, or is it tagged by, an accepted event?
    async fn relates(&self, ev: &Event) -> bool {
        let refs = references(ev);
        for c in refs.coordinates.iter().take(MAX_REFERENCES_CHECKED) {
            if self.coordinate_accepted(c).await {
                return true;
            }
        }
        for id in refs.event_ids.iter().take(MAX_REFERENCES_CHECKED) {
            if self.id_accepted(id).await {
                return true;
            }
        }
        self.tagged_by_accepted(ev).await
    }

    /// Is the event at coordinate `c` accepted here (stored, or held in the purgatory)?
    async fn coordinate_accepted(&self, c: &grasp_state::nostr::nip34::Coordinate) -> bool {
        if is_unconditional(c.kind) {
            return false;
        }
        if c.kind == KIND_ANNOUNCEMENT {
            return self.is_announced_by(&c.pubkey, &c.identifier).await;
        }
        if c.kind == KIND_STATE && self.purgatory.holds_state_by(&c.identifier, &c.pubkey) {
            return true;
        }
        let kind = Kind::Custom(c.kind);
        let identifier = if kind.is_addressable() {
            Some(c.identifier.as_str())
        } else if kind.is_replaceable() {
            None
        } else {
            // Only replaceable and addressable events have coordinates.
            return false;
        };
        self.stored_at(c.kind, &c.pubkey, identifier).await
    }

    /// Is the event `id` accepted here: stored (and not of an unconditional kind), or a pull
    /// request held in the purgatory?
    async fn id_accepted(&self, id: &nostr::prelude::EventId) -> bool {
        if let Some(stored) = self.event_by_id(id).await {
            return !is_unconditional(stored.kind.as_u16());
        }
        self.purgatory.holds_pr_event(id)
    }

    /// Is `ev` tagged (by id, or by coordinate for replaceable/addressable events) by a stored
    /// event that may anchor it? This accepts forward references: a reply stored before its
    /// target.
    async fn tagged_by_accepted(&self, ev: &Event) -> bool {
        let id = ev.id.to_hex();
        let mut filters: Vec<Filter> = ['e', 'E', 'q']
            .iter()
            .filter_map(|c| single_letter(*c))
            .map(|t| Filter::new().custom_tag(t, id.clone()).limit(TAGGED_BY_SCAN))
            .collect();
        if let Some(coord) = ev.coordinate() {
            let coord = coord.to_string();
            filters.extend(['a', 'A', 'q'].iter().filter_map(|c| single_letter(*c)).map(|t| {
                Filter::new().custom_tag(t, coord.clone()).limit(TAGGED_BY_SCAN)
            }));
        }
        self.query(filters).await.iter().any(|e| !is_unconditional(e.kind.as_u16()))
    }
}

fn single_letter(c: char) -> Option<SingleLetterTag> {
    SingleLetterTag::from_char(c).ok()
}

/// The refusal for an announcement that does not list this service: what is missing and
/// the exact URLs to add.
pub fn not_listed_message(public_host: &str, a: &Announcement) -> String {
    // The configured host may carry a scheme or a trailing `/` (tolerated by `lists_service`).
    let host = grasp_state::names::host::public_authority(public_host);
    let npub = a.owner.to_bech32().unwrap_or_default();
    // Check each half with the other one made right.
    let clone_ok = Announcement { relays: vec![format!("ws://{host}")], ..a.clone() }.lists_service(public_host);
    let relays_ok =
        Announcement { clone_urls: vec![format!("http://{host}/")], ..a.clone() }.lists_service(public_host);
    let clone_url = format!(
        "http(s)://{host}/{npub}/{}.git",
        grasp_state::names::identifier::percent_encode_segment(&a.identifier)
    );
    let relay_url = format!("ws(s)://{host}");
    let missing = match (clone_ok, relays_ok) {
        (true, false) => format!("no `relays` URL is this server; add {relay_url}"),
        (false, true) => format!("no `clone` URL is this server; add {clone_url}"),
        _ => format!("no `clone` or `relays` URL is this server; add the clone URL {clone_url} and the relays URL {relay_url}"),
    };
    format!(
        "blocked: this repository announcement does not list this server ({host}): {missing} \
         (host and port must match exactly)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn announcement(clone: &[&str], relays: &[&str]) -> Announcement {
        let mut tags = vec![Tag::identifier("my repo")];
        if !clone.is_empty() {
            tags.push(Tag::parse(std::iter::once("clone").chain(clone.iter().copied())).unwrap());
        }
        if !relays.is_empty() {
            tags.push(Tag::parse(std::iter::once("relays").chain(relays.iter().copied())).unwrap());
        }
        let ev = EventBuilder::new(Kind::Custom(KIND_ANNOUNCEMENT), "").tags(tags).finalize(&Keys::generate()).unwrap();
        Announcement::from_event(&ev).unwrap()
    }

    #[test]
    fn only_grasp_lists_and_deletions_are_unconditional() {
        assert!(is_unconditional(5) && is_unconditional(10317));
        for kind in [0, 1, 7, 1111, 1617, 1618, 1619, 1621, 1630, 10002, 30617, 30618] {
            assert!(!is_unconditional(kind), "{kind}");
        }
    }

    #[test]
    fn not_listed_message_names_what_is_missing() {
        let host = "git.example.com";
        let m = not_listed_message(host, &announcement(&["https://git.example.com/x.git"], &["wss://other.net"]));
        assert!(m.starts_with("blocked:") && m.contains("no `relays` URL") && m.contains("ws(s)://git.example.com"), "{m}");
        let m = not_listed_message(host, &announcement(&["https://git.example.com.evil/x.git"], &["wss://git.example.com"]));
        assert!(m.contains("no `clone` URL") && m.contains("/my%20repo.git"), "{m}");
        assert!(m.contains("http(s)://git.example.com/npub1"), "{m}");
        let m = not_listed_message(host, &announcement(&[], &[]));
        assert!(m.contains("add the clone URL") && m.contains("and the relays URL"), "{m}");
        // A configured scheme or trailing slash does not leak into the advice.
        let m = not_listed_message("https://git.example.com/", &announcement(&["https://git.example.com/x.git"], &[]));
        assert!(m.contains("no `relays` URL") && m.contains("add ws(s)://git.example.com ("), "{m}");
    }

    #[test]
    fn deleted_message_says_what_to_do() {
        assert!(DELETED_MESSAGE.starts_with("blocked:") && DELETED_MESSAGE.contains("publish a new event"));
        assert!(!DELETED_MESSAGE.contains("  "), "{DELETED_MESSAGE}");
    }
}
