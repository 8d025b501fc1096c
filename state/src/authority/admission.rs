//! Where an incoming announcement or state event goes (docs/protocol.md#acceptance, decisions 1-3
//! and 8), as pure verdicts over facts the relay looked up (event store, purgatory, repositories).
//!
//! The relay gathers [`AnnouncementFacts`] or [`StateFacts`], asks [`admit_announcement`] or
//! [`state_authority`] / [`state_placement`], and carries the verdict out (create the bare
//! repository, hold, store, release). Messages are complete NIP-01 replies.

use nostr::prelude::PublicKey;

use crate::names::identifier::npub_of;
use crate::authority::maintainers::Standing;

use crate::nostr::nip34::Source;

/// The refusal of an announcement older than the one known for its owner.
pub const OLDER_ANNOUNCEMENT_MESSAGE: &str = "invalid: a newer announcement of this repository by this author is already known; \
     publish with a later created_at";

/// What is known about an incoming, well-formed announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnnouncementFacts {
    /// The announcement of the same owner and identifier known now (stored or held), and
    /// whether it is newer than the incoming one.
    pub existing: Option<(Source, bool)>,
    /// Does the incoming announcement list this service (decision 1)?
    pub lists_service: bool,
    /// Not listing this service, does it belong to the archive (GRASP-05,
    /// docs/protocol.md#archive-mode)? It is then taken with a repository like a listing one.
    pub archived: bool,
    /// Is its author the owner of, or a listed maintainer in, a known announcement of the
    /// identifier?
    pub owner_or_listed: bool,
    /// Does the owner's bare repository exist?
    pub repo_exists: bool,
    /// Does that repository hold any ref (only asked when it exists and nothing is known)?
    pub repo_has_refs: bool,
    /// Does it make its author a confirmed maintainer of a served repository (an accepted
    /// invitation: its inviter vouches for it, docs/protocol.md#maintainer-authority)?
    pub confirmed_by_served: bool,
    /// Did this very event already expire in the purgatory (both phases of soft expiry)?
    pub expired: bool,
}

/// The verdict on an announcement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnnouncementAdmission {
    /// Refuse with this message.
    Reject(String),
    /// It does not list this service and nothing here trusts its author: refuse, naming the
    /// URLs to add.
    RejectNotListed,
    /// It does not list this service but replaces a held one: drop the held entry and its bare
    /// repository (service change, decision 3), then store it.
    DropHeldAndStore,
    /// It does not list this service, but its author is trusted here: store it, no repository.
    StoreUnlisted,
    /// It lists this service (or belongs to the archive): make sure the bare repository exists,
    /// then do `then`.
    /// `check_room`: first make sure the purgatory has room for a new entry by this author
    /// (refuse before creating a repository the caps would leave orphaned).
    WithRepo { check_room: bool, then: AfterRepo },
}

/// What happens to a listing announcement once its repository exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRepo {
    /// Replaces a stored announcement, or the repository already holds git data: store it.
    Store,
    /// Replaces the held announcement (and extends its expiry).
    ReplaceHeld,
    /// New: hold it until git data arrives.
    Hold,
}

/// The refusal of an announcement that already waited out both phases of its expiry: sent
/// again (by a client or a peer relay), it would start a new cycle with a new bare repository, and
/// background sync could loop on it (docs/protocol.md#soft-expiry).
pub const EXPIRED_ANNOUNCEMENT_MESSAGE: &str = "blocked: this announcement already expired in purgatory without any git data; \
     publish a new announcement (a later created_at) and push right after it";

/// The verdict on an announcement. Pure.
pub fn admit_announcement(f: &AnnouncementFacts) -> AnnouncementAdmission {
    if let Some((_, true)) = f.existing {
        return AnnouncementAdmission::Reject(OLDER_ANNOUNCEMENT_MESSAGE.into());
    }
    let existing = f.existing.map(|(source, _)| source);
    if !f.lists_service && !f.archived {
        return match existing {
            Some(Source::Purgatory) => AnnouncementAdmission::DropHeldAndStore,
            _ if f.owner_or_listed => AnnouncementAdmission::StoreUnlisted,
            _ => AnnouncementAdmission::RejectNotListed,
        };
    }
    let then = match existing {
        Some(Source::Stored) => AfterRepo::Store,
        Some(Source::Purgatory) => AfterRepo::ReplaceHeld,
        // A repository that already holds git data (restored from a crash, or synced) proves
        // itself: serve the announcement at once.
        None if f.repo_exists && f.repo_has_refs => AfterRepo::Store,
        // An accepted invitation to a served repository: its inviter vouches for it, so it is
        // served at once, whether or not its own repository ever gets data here (held, it
        // would expire and take the confirmation with it).
        None if f.confirmed_by_served && !f.expired => AfterRepo::Store,
        // The same event expired once already: no new cycle, no new repository.
        None if f.expired => return AnnouncementAdmission::Reject(EXPIRED_ANNOUNCEMENT_MESSAGE.into()),
        None => AfterRepo::Hold,
    };
    AnnouncementAdmission::WithRepo { check_room: existing.is_none() && !f.repo_exists, then }
}

/// What a state event's author may do with an identifier (docs/protocol.md#maintainer-authority).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateAuthority {
    /// A confirmed maintainer of some owner's repository: the state is authoritative there.
    Authorised,
    /// Invited by `by` into `owner`'s repository, not yet accepted: the state waits in the
    /// purgatory, moves nothing, and is released if they accept while it waits.
    Invited { owner: PublicKey, by: PublicKey },
    /// Refused: the message says why and what to do.
    Refused(String),
}

/// Who may publish a state event for an identifier: a confirmed maintainer of some owner's
/// repository. `announced`: some announcement of the identifier is known; `standings`: where the
/// author stands with the repositories whose announcements reach it
/// ([`crate::authority::announcements::TrustIndex::standings`]); `owners`: the identifier's owners, for the
/// refusal of a stranger.
pub fn state_authority(
    identifier: &str,
    author: &PublicKey,
    announced: bool,
    standings: &[(PublicKey, Source, Standing)],
    owners: &[PublicKey],
) -> StateAuthority {
    if !announced {
        return StateAuthority::Refused(format!(
            "blocked: repository '{identifier}' is not announced on this relay; publish its announcement \
             (kind 30617, listing this server in `clone` and `relays`) here first"
        ));
    }
    if standings.iter().any(|(_, _, s)| *s == Standing::Maintainer) {
        return StateAuthority::Authorised;
    }
    if let Some((owner, by)) = standings.iter().find_map(|(owner, _, s)| match s {
        Standing::Invited { by } => Some((*owner, *by)),
        _ => None,
    }) {
        return StateAuthority::Invited { owner, by };
    }
    let npub = npub_of(author);
    // Another owner's repository before the author's own: that is the one they left.
    let left = standings.iter().filter(|(_, _, s)| *s == Standing::Left);
    if let Some((owner, _, left)) = left.clone().find(|(owner, _, _)| owner != author).or_else(|| left.clone().next()) {
        let repo = format!("{}/{identifier}", npub_of(owner));
        return StateAuthority::Refused(format!("blocked: {}", left.refusal(author, owner, &repo).unwrap_or_default()));
    }
    let named: Vec<String> = owners.iter().take(3).map(npub_of).collect();
    StateAuthority::Refused(format!(
        "blocked: {npub} is not a maintainer of repository '{identifier}' on this relay (owner{} {}); \
         ask the owner to invite you (`ngit repo edit --add-maintainer {npub}`) and accept with `ngit repo accept`, \
         or announce your own repository (kind 30617) here first",
        if named.len() == 1 { "" } else { "s" },
        if named.is_empty() { "none".to_string() } else { named.join(", ") },
    ))
}

/// Where an authorised state event goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatePlacement {
    /// Its objects are all in an authorised repository: store it, then release and align.
    StoreAndRelease,
    /// Hold it until its git data arrives.
    Hold,
}

/// Facts about an authorised state event's git data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateFacts {
    /// Does it declare any ref?
    pub declares_refs: bool,
    /// Does some repository of an owner trusting its author hold every object it names?
    pub data_present: bool,
}

/// Where an authorised state event goes. Pure. A state declaring no refs is held (there is no
/// git data whose arrival would prove it).
pub fn state_placement(f: &StateFacts) -> StatePlacement {
    if f.declares_refs && f.data_present {
        StatePlacement::StoreAndRelease
    } else {
        StatePlacement::Hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> AnnouncementFacts {
        AnnouncementFacts {
            existing: None,
            lists_service: true,
            archived: false,
            owner_or_listed: false,
            repo_exists: false,
            repo_has_refs: false,
            confirmed_by_served: false,
            expired: false,
        }
    }

    #[test]
    fn announcements() {
        let hold = AnnouncementAdmission::WithRepo { check_room: true, then: AfterRepo::Hold };
        assert_eq!(admit_announcement(&facts()), hold);
        let older = AnnouncementFacts { existing: Some((Source::Stored, true)), ..facts() };
        assert_eq!(admit_announcement(&older), AnnouncementAdmission::Reject(OLDER_ANNOUNCEMENT_MESSAGE.into()));
        let data = AnnouncementFacts { repo_exists: true, repo_has_refs: true, ..facts() };
        assert_eq!(admit_announcement(&data), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::Store });
        // An accepted invitation to a served repository is served at once, repository or not.
        let accepted = AnnouncementFacts { confirmed_by_served: true, ..facts() };
        assert_eq!(admit_announcement(&accepted), AnnouncementAdmission::WithRepo { check_room: true, then: AfterRepo::Store });
        let empty = AnnouncementFacts { repo_exists: true, ..facts() };
        assert_eq!(admit_announcement(&empty), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::Hold });
        let held = AnnouncementFacts { existing: Some((Source::Purgatory, false)), ..facts() };
        assert_eq!(admit_announcement(&held), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::ReplaceHeld });
        let stored = AnnouncementFacts { existing: Some((Source::Stored, false)), ..facts() };
        assert_eq!(admit_announcement(&stored), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::Store });
        // Not listing this service.
        let unlisted = AnnouncementFacts { lists_service: false, ..held };
        assert_eq!(admit_announcement(&unlisted), AnnouncementAdmission::DropHeldAndStore);
        let trusted = AnnouncementFacts { lists_service: false, owner_or_listed: true, ..stored };
        assert_eq!(admit_announcement(&trusted), AnnouncementAdmission::StoreUnlisted);
        let stranger = AnnouncementFacts { lists_service: false, ..facts() };
        assert_eq!(admit_announcement(&stranger), AnnouncementAdmission::RejectNotListed);
        // The archive (GRASP-05) takes what does not list this service, with a repository; a
        // held entry whose newer announcement drops this service stays when it is archived.
        let archived = AnnouncementFacts { archived: true, ..stranger };
        assert_eq!(admit_announcement(&archived), hold);
        let archived_held = AnnouncementFacts { archived: true, ..unlisted };
        assert_eq!(admit_announcement(&archived_held), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::ReplaceHeld });
        let archived_trusted = AnnouncementFacts { archived: true, ..trusted };
        assert_eq!(admit_announcement(&archived_trusted), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::Store });
    }

    #[test]
    fn an_announcement_that_expired_once_is_refused_without_a_repository() {
        let expired = AnnouncementFacts { expired: true, ..facts() };
        assert_eq!(admit_announcement(&expired), AnnouncementAdmission::Reject(EXPIRED_ANNOUNCEMENT_MESSAGE.into()));
        assert!(EXPIRED_ANNOUNCEMENT_MESSAGE.starts_with("blocked:"));
        // Its repository already holds data (synced, restored): that proves it, as for any.
        let proven = AnnouncementFacts { repo_exists: true, repo_has_refs: true, ..expired };
        assert_eq!(admit_announcement(&proven), AnnouncementAdmission::WithRepo { check_room: false, then: AfterRepo::Store });
    }

    #[test]
    fn states() {
        let pk = nostr::prelude::Keys::generate().public_key();
        let keys: Vec<_> = (0..2).map(|_| nostr::prelude::Keys::generate().public_key()).collect();
        let (owner, inviter) = (keys[0], keys[1]);
        let refused = |a: StateAuthority| match a {
            StateAuthority::Refused(m) => m,
            other => panic!("{other:?}"),
        };
        assert!(refused(state_authority("r", &pk, false, &[], &[])).starts_with("blocked: repository 'r' is not announced"));
        let stranger = refused(state_authority("r", &pk, true, &[], &[owner]));
        assert!(stranger.starts_with("blocked:") && stranger.contains("is not a maintainer"), "{stranger}");
        assert!(stranger.contains(&npub_of(&owner)) && stranger.contains("ngit repo edit --add-maintainer"), "{stranger}");
        assert_eq!(state_authority("r", &pk, true, &[(pk, Source::Stored, Standing::Maintainer)], &[pk]), StateAuthority::Authorised);
        // A maintainer anywhere wins over an invitation elsewhere.
        let both = [(owner, Source::Stored, Standing::Invited { by: inviter }), (pk, Source::Stored, Standing::Maintainer)];
        assert_eq!(state_authority("r", &pk, true, &both, &[owner, pk]), StateAuthority::Authorised);
        let invited = [(owner, Source::Stored, Standing::Invited { by: inviter })];
        assert_eq!(state_authority("r", &pk, true, &invited, &[owner]), StateAuthority::Invited { owner, by: inviter });
        let left = refused(state_authority("r", &pk, true, &[(owner, Source::Purgatory, Standing::Left)], &[owner]));
        assert!(left.starts_with("blocked:") && left.contains("left the maintainers") && left.contains("ngit repo accept"), "{left}");
        // The repository they left is named, not their own.
        let both = [(pk, Source::Stored, Standing::Left), (owner, Source::Stored, Standing::Left)];
        let left = refused(state_authority("r", &pk, true, &both, &[owner, pk]));
        assert!(left.contains(&format!("{}/r", npub_of(&owner))), "{left}");
        let placement = |declares_refs, data_present| state_placement(&StateFacts { declares_refs, data_present });
        assert_eq!(placement(true, true), StatePlacement::StoreAndRelease);
        assert_eq!(placement(false, true), StatePlacement::Hold);
        assert_eq!(placement(true, false), StatePlacement::Hold);
    }
}
