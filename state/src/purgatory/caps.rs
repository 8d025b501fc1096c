//! Bounded memory (docs/protocol.md#caps, decision 9): the purgatory never trusts the network.
//!
//! Every event entry counts against its author (announcement owner, state/PR author) and against
//! a total; git-first placeholders have their own budget per destination repository and in
//! total, because anyone may push `refs/nostr/<id>` and placeholders carry no author.
//!
//! Both totals are also shared out by client address ([`Caps::per_address`],
//! [`Caps::placeholders_per_address`]): an entry remembers the address it came from (already
//! keyed by [`crate::names::client_key::limit_key`], so an IPv6 client counts by its prefix), and no
//! address holds more than its share. Throwaway keys are free, so the per-author cap alone
//! would let one client fill the total for a whole purgatory window; its addresses are not.
//! Entries without an address (relay sync, entries restored from older checkpoints) count
//! only per author and in the totals.
//!
//! Held events also count by size against [`Caps::total_bytes`] (their [`held_size`], kept in
//! step with every attach and detach, soft-expired announcements included since they keep their
//! event): with the per-kind event caps (`crate::nostr::event_size`) a flood of large held events is
//! bounded in bytes, not only in count. The budget is checked before an add, so it is exceeded
//! by at most one event.
//!
//! When a budget is spent the add is refused with [`PurgatoryFull`]; **existing entries are never
//! evicted to make room**. Eviction would let a flood (say, state events for one identifier from
//! thousands of throwaway keys) push out a legitimate maintainer's waiting events. Refusing
//! instead means each throwaway key is stopped by its per-author cap (`rate-limited:`) and the
//! total cap stops the rest (`blocked:`), while everything already held keeps waiting for its
//! git data. Entries leave only by release, deletion or expiry.
//!
//! A soft-expired announcement costs no repository (it was deleted) and waits only for a revival:
//! it leaves its owner's and the total budget when it soft-expires (so throwaway announcements
//! free the caps after the purgatory TTL, not after the soft-expiry TTL) and counts against a
//! budget of its own, [`Caps::soft_expired`]. That one is the exception to "never evict": when it
//! is spent, the oldest soft-expired announcement expires for good to make room
//! (`Counts::soft_expired_full`); a revival counts against its owner and the total again.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use nostr::prelude::{Event, PublicKey};

use super::entries::RepoId;

/// Limits on how much the purgatory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Announcements + state events + PR events of one pubkey.
    pub per_author: usize,
    /// Announcements + state events + PR events in total.
    pub total: usize,
    /// Announcements + state events + PR events sent from one client address (IPv6: prefix).
    pub per_address: usize,
    /// Git-first placeholders pointing at one repository.
    pub placeholders_per_repo: usize,
    /// Git-first placeholders pushed from one client address (IPv6: prefix).
    pub placeholders_per_address: usize,
    /// Git-first placeholders in total.
    pub placeholders_total: usize,
    /// Remembered expired event ids (oldest are forgotten first; this is only a hint).
    pub expired_events: usize,
    /// Soft-expired announcements kept for revival; beyond it the oldest expires for good.
    pub soft_expired: usize,
    /// Bytes of held events ([`held_size`]) in total, soft-expired announcements included.
    pub total_bytes: usize,
}

/// The default byte budget of the held events: 256 MiB.
pub const DEFAULT_TOTAL_BYTES: usize = 256 << 20;

/// The default share of one client address in the held events: a tenth of the default total,
/// so at least ten places are needed to fill the purgatory, and far more than one person's
/// work waiting for its git data (the GRASP conformance suite holds a few dozen from one address).
pub const DEFAULT_PER_ADDRESS: usize = 1_000;

/// The default share of one client address in the git-first placeholders: a tenth of the
/// default total.
pub const DEFAULT_PLACEHOLDERS_PER_ADDRESS: usize = 200;

/// The bytes a held event counts for: its JSON serialisation's length, computed from its parts
/// without serialising (ids, key, signature and numbers at their fixed widths, every content
/// and tag string at its length plus quotes and separators; escapes not counted).
pub fn held_size(event: &Event) -> usize {
    // {"id":"<64>","pubkey":"<64>","created_at":<10>,"kind":<5>,"tags":[],"content":"","sig":"<128>"}
    const FIXED: usize = 350;
    let tags: usize = event
        .tags
        .iter()
        .map(|t| 3 + t.as_slice().iter().map(|f| f.len() + 3).sum::<usize>())
        .sum();
    FIXED + event.content.len() + tags
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            per_author: 100,
            total: 10_000,
            per_address: DEFAULT_PER_ADDRESS,
            placeholders_per_repo: 100,
            placeholders_total: 2_000,
            placeholders_per_address: DEFAULT_PLACEHOLDERS_PER_ADDRESS,
            expired_events: 100_000,
            soft_expired: 10_000,
            total_bytes: DEFAULT_TOTAL_BYTES,
        }
    }
}

/// Which budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapScope {
    Author,
    /// One client address's share of the held events ([`Caps::per_address`]).
    Address,
    Total,
    /// The held events' byte budget ([`Caps::total_bytes`]).
    TotalBytes,
    PlaceholdersPerRepo,
    /// One client address's share of the placeholders ([`Caps::placeholders_per_address`]).
    PlaceholdersPerAddress,
    PlaceholdersTotal,
}

/// An add was refused because a budget is spent. Nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct PurgatoryFull {
    pub scope: CapScope,
    pub limit: usize,
}

impl PurgatoryFull {
    /// The NIP-01 OK prefix the relay answers with: one sender over its budget is
    /// `rate-limited`, a full purgatory is `blocked`.
    pub fn ok_prefix(&self) -> &'static str {
        match self.scope {
            CapScope::Author
            | CapScope::Address
            | CapScope::PlaceholdersPerRepo
            | CapScope::PlaceholdersPerAddress => "rate-limited",
            CapScope::Total | CapScope::TotalBytes | CapScope::PlaceholdersTotal => "blocked",
        }
    }
}

impl PurgatoryFull {
    /// The complete NIP-01 refusal of an event of `kind` that did not fit: prefix, what is
    /// full, and what the sender can do about it for that kind. A full purgatory leaves each
    /// kind a different way out: a new repository (30617) can only go to another server; a
    /// state event (30618) needs room here (its push matches only a state this server has) or
    /// another server; a pull request's commit may be pushed first (git-first), after which
    /// the event is stored without being held.
    pub fn refusal(&self, kind: u16) -> String {
        use crate::nostr::nip34::{KIND_ANNOUNCEMENT, KIND_PR, KIND_PR_UPDATE, KIND_STATE};
        let prefix = self.ok_prefix();
        let limit = self.limit;
        let what = match self.scope {
            CapScope::TotalBytes => format!("{limit} bytes of events"),
            _ => format!("{limit} events"),
        };
        match (self.scope, kind) {
            (CapScope::Total | CapScope::TotalBytes, KIND_ANNOUNCEMENT) => format!(
                "{prefix}: purgatory is full ({what} waiting for git data), so this server takes no new repositories now; \
                 announce the repository on another GRASP server, or send this announcement again later"
            ),
            (CapScope::Total | CapScope::TotalBytes, KIND_STATE) => format!(
                "{prefix}: purgatory is full ({what} waiting for git data), so this state event cannot wait here for its push; \
                 send it again later, or publish and push to another GRASP server listed in the announcement"
            ),
            (CapScope::Total | CapScope::TotalBytes, KIND_PR | KIND_PR_UPDATE) => format!(
                "{prefix}: purgatory is full ({what} waiting for git data); push the commit to refs/nostr/<event-id> \
                 of the repository first (git push <clone-url> <commit>:refs/nostr/<event-id>), then send this event again"
            ),
            _ => format!("{prefix}: {self}"),
        }
    }
}

impl fmt::Display for PurgatoryFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.limit;
        match self.scope {
            CapScope::Author => write!(
                f,
                "you already have {limit} events waiting for git data; push the git data for them or wait for them to expire (30 min) before sending more"
            ),
            CapScope::Address => write!(
                f,
                "this server holds {limit} events waiting for git data from your address; push the git data of the ones waiting, or try again after they expire (30 min)"
            ),
            CapScope::Total => write!(
                f,
                "purgatory is full ({limit} events waiting for git data); push your git data first, then publish the event, or try again later"
            ),
            CapScope::TotalBytes => write!(
                f,
                "purgatory is full ({limit} bytes of events waiting for git data); push your git data first, then publish the event, or try again later"
            ),
            CapScope::PlaceholdersPerRepo => write!(
                f,
                "this repository already has {limit} refs/nostr/* pushes waiting for their events; publish those PR events first or try again in 30 min"
            ),
            CapScope::PlaceholdersPerAddress => write!(
                f,
                "this server holds {limit} refs/nostr/* pushes from your address waiting for their events; publish those PR events, or try again after they expire (30 min)"
            ),
            CapScope::PlaceholdersTotal => write!(
                f,
                "too many refs/nostr/* pushes are waiting for their events ({limit}); publish the PR event first, or try again later"
            ),
        }
    }
}

/// Why a git-first placeholder could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    #[error(transparent)]
    Full(#[from] PurgatoryFull),
    /// Another push (or the PR event) already fixed a different commit for this event id.
    #[error("refs/nostr/<event-id> is already waiting with commit {existing}; push that commit, or use the id of your own PR event")]
    CommitMismatch { existing: String },
}

/// Running counts, kept in step with the entries on every insert and removal.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub per_author: HashMap<PublicKey, usize>,
    /// Held event entries by the address they came from (soft-expired ones excepted, as per author).
    pub per_address: HashMap<IpAddr, usize>,
    pub total: usize,
    pub placeholders_per_repo: HashMap<RepoId, usize>,
    /// Placeholders by the address of the push that created them.
    pub placeholders_per_address: HashMap<IpAddr, usize>,
    pub placeholders_total: usize,
    /// Soft-expired announcements (counted here instead of per author and in `total`).
    pub soft_expired: usize,
    /// [`held_size`] of every held event (soft-expired announcements included).
    pub held_bytes: usize,
    /// Bytes of unsigned data of the placeholders, by the address of their push
    /// ([`super::unsigned`]); addresses holding none are absent.
    pub unsigned_per_address: HashMap<IpAddr, u64>,
    /// Bytes of unsigned data of every placeholder, those of unknown address included.
    pub unsigned_total: u64,
}

impl Counts {
    /// Room for one more held event by `author`, sent from `origin` (if known)?
    pub fn check_entry(
        &self,
        caps: &Caps,
        author: &PublicKey,
        origin: Option<IpAddr>,
    ) -> Result<(), PurgatoryFull> {
        if self.per_author.get(author).copied().unwrap_or(0) >= caps.per_author {
            return Err(PurgatoryFull {
                scope: CapScope::Author,
                limit: caps.per_author,
            });
        }
        if over(&self.per_address, origin, caps.per_address) {
            return Err(PurgatoryFull {
                scope: CapScope::Address,
                limit: caps.per_address,
            });
        }
        if self.total >= caps.total {
            return Err(PurgatoryFull {
                scope: CapScope::Total,
                limit: caps.total,
            });
        }
        if self.held_bytes >= caps.total_bytes {
            return Err(PurgatoryFull {
                scope: CapScope::TotalBytes,
                limit: caps.total_bytes,
            });
        }
        Ok(())
    }

    /// A held event attached.
    pub fn add_bytes(&mut self, event: &Event) {
        self.held_bytes += held_size(event);
    }

    /// A held event detached.
    pub fn remove_bytes(&mut self, event: &Event) {
        self.held_bytes = self.held_bytes.saturating_sub(held_size(event));
    }

    /// Whether one more soft-expired announcement needs the oldest one evicted first.
    pub fn soft_expired_full(&self, caps: &Caps) -> bool {
        self.soft_expired >= caps.soft_expired.max(1)
    }

    /// An announcement entry attached (`soft` when it is soft-expired).
    pub fn add_announcement(&mut self, owner: PublicKey, soft: bool, origin: Option<IpAddr>) {
        if soft {
            self.soft_expired += 1;
        } else {
            self.add_entry(owner, origin);
        }
    }

    /// An announcement entry detached (`soft` when it was soft-expired).
    pub fn remove_announcement(&mut self, owner: &PublicKey, soft: bool, origin: Option<IpAddr>) {
        if soft {
            self.soft_expired = self.soft_expired.saturating_sub(1);
        } else {
            self.remove_entry(owner, origin);
        }
    }

    /// A held announcement soft-expired: it leaves its owner's, its address's and the total budget.
    pub fn soft_expire(&mut self, owner: &PublicKey, origin: Option<IpAddr>) {
        self.remove_announcement(owner, false, origin);
        self.add_announcement(*owner, true, origin);
    }

    /// A soft-expired announcement was revived: it counts against its owner, its address and
    /// the total again.
    pub fn revive(&mut self, owner: PublicKey, origin: Option<IpAddr>) {
        self.remove_announcement(&owner, true, origin);
        self.add_announcement(owner, false, origin);
    }

    pub fn add_entry(&mut self, author: PublicKey, origin: Option<IpAddr>) {
        *self.per_author.entry(author).or_default() += 1;
        add_one(&mut self.per_address, origin);
        self.total += 1;
    }

    pub fn remove_entry(&mut self, author: &PublicKey, origin: Option<IpAddr>) {
        remove_one(&mut self.per_author, Some(*author));
        remove_one(&mut self.per_address, origin);
        self.total = self.total.saturating_sub(1);
    }

    /// A placeholder entry attached, created by a push from `origin`.
    pub fn add_placeholder(&mut self, origin: Option<IpAddr>) {
        add_one(&mut self.placeholders_per_address, origin);
        self.placeholders_total += 1;
    }

    /// A placeholder entry detached.
    pub fn remove_placeholder(&mut self, origin: Option<IpAddr>) {
        remove_one(&mut self.placeholders_per_address, origin);
        self.placeholders_total = self.placeholders_total.saturating_sub(1);
    }

    /// `new_placeholder`: whether a new placeholder entry would be created (counts against the
    /// total) or a destination is added to an existing one.
    /// `origin`: the address of the push (a new placeholder counts against its share).
    pub fn check_placeholder(
        &self,
        caps: &Caps,
        destination: &RepoId,
        new_placeholder: bool,
        origin: Option<IpAddr>,
    ) -> Result<(), PurgatoryFull> {
        let here = self
            .placeholders_per_repo
            .get(destination)
            .copied()
            .unwrap_or(0);
        if here >= caps.placeholders_per_repo {
            return Err(PurgatoryFull {
                scope: CapScope::PlaceholdersPerRepo,
                limit: caps.placeholders_per_repo,
            });
        }
        if new_placeholder && over(&self.placeholders_per_address, origin, caps.placeholders_per_address) {
            return Err(PurgatoryFull {
                scope: CapScope::PlaceholdersPerAddress,
                limit: caps.placeholders_per_address,
            });
        }
        if new_placeholder && self.placeholders_total >= caps.placeholders_total {
            return Err(PurgatoryFull {
                scope: CapScope::PlaceholdersTotal,
                limit: caps.placeholders_total,
            });
        }
        Ok(())
    }

    /// A placeholder holding `bytes` of unsigned data attached, pushed from `origin`.
    pub fn add_unsigned(&mut self, origin: Option<IpAddr>, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if let Some(o) = origin {
            *self.unsigned_per_address.entry(o).or_default() += bytes;
        }
        self.unsigned_total += bytes;
    }

    /// A placeholder holding `bytes` of unsigned data detached.
    pub fn remove_unsigned(&mut self, origin: Option<IpAddr>, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if let Some(o) = origin {
            if let Some(n) = self.unsigned_per_address.get_mut(&o) {
                *n = n.saturating_sub(bytes);
                if *n == 0 {
                    self.unsigned_per_address.remove(&o);
                }
            }
        }
        self.unsigned_total = self.unsigned_total.saturating_sub(bytes);
    }

    pub fn add_destination(&mut self, destination: RepoId) {
        *self.placeholders_per_repo.entry(destination).or_default() += 1;
    }

    pub fn remove_destination(&mut self, destination: &RepoId) {
        remove_one(&mut self.placeholders_per_repo, Some(destination.clone()));
    }
}

/// Whether `key` (if known) already holds `limit` or more in `counts`.
fn over<K: std::hash::Hash + Eq>(counts: &HashMap<K, usize>, key: Option<K>, limit: usize) -> bool {
    key.is_some_and(|k| counts.get(&k).copied().unwrap_or(0) >= limit)
}

fn add_one<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: Option<K>) {
    if let Some(k) = key {
        *counts.entry(k).or_default() += 1;
    }
}

/// Takes one off `key`'s count; a count reaching zero leaves the map (it stays as small as
/// the set of keys holding something).
fn remove_one<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: Option<K>) {
    let Some(k) = key else { return };
    if let Some(n) = counts.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn author_and_placeholder_repo_caps_are_rate_limits_totals_are_blocks() {
        let full = |scope| PurgatoryFull { scope, limit: 1 };
        assert_eq!(full(CapScope::Author).ok_prefix(), "rate-limited");
        assert_eq!(
            full(CapScope::PlaceholdersPerRepo).ok_prefix(),
            "rate-limited"
        );
        assert_eq!(full(CapScope::Total).ok_prefix(), "blocked");
        assert_eq!(full(CapScope::PlaceholdersTotal).ok_prefix(), "blocked");
        assert!(full(CapScope::Author)
            .to_string()
            .contains("1 events waiting"));
    }

    #[test]
    fn a_full_purgatory_tells_each_kind_what_it_can_do() {
        let total = PurgatoryFull { scope: CapScope::Total, limit: 7 };
        let announcement = total.refusal(crate::nostr::nip34::KIND_ANNOUNCEMENT);
        assert!(announcement.starts_with("blocked: purgatory is full (7 events"), "{announcement}");
        // No repository exists yet for a new announcement: no advice to push.
        assert!(!announcement.contains("push"), "{announcement}");
        assert!(announcement.contains("another GRASP server"));
        let state = total.refusal(crate::nostr::nip34::KIND_STATE);
        assert!(state.contains("send it again later") && state.contains("another GRASP server"), "{state}");
        for kind in [crate::nostr::nip34::KIND_PR, crate::nostr::nip34::KIND_PR_UPDATE] {
            assert!(total.refusal(kind).contains("refs/nostr/<event-id>"));
        }
        // Other scopes keep their own text behind their own prefix.
        let author = PurgatoryFull { scope: CapScope::Author, limit: 3 }.refusal(crate::nostr::nip34::KIND_ANNOUNCEMENT);
        assert!(author.starts_with("rate-limited: you already have 3 events waiting"), "{author}");
    }

    use super::super::testutil::*;
    use super::super::PurgatoryConfig;
    use nostr::prelude::EventId;
    use proptest::prelude::*;

    /// A state look-alike by `author` with `content` bytes of content and `tag` bytes in one tag.
    fn sized(author: u8, n: u32, content: usize, tag: usize) -> Event {
        let f = fake_event(author, STATE, 0, n);
        let tags = [nostr::prelude::Tag::parse(["d".to_string(), "t".repeat(tag)]).unwrap()];
        Event::new(f.id, f.pubkey, f.created_at, f.kind, tags, "c".repeat(content), f.sig)
    }

    #[test]
    fn held_events_count_their_bytes_and_the_byte_budget_refuses_more() {
        let caps = Caps { total_bytes: 10_000, ..Caps::default() };
        let (_c, mut p) = purgatory_with(PurgatoryConfig { caps, ..PurgatoryConfig::default() });
        let big = sized(0, 1, 6_000, 0);
        p.add_state(big.clone(), big.pubkey, "repo".into()).unwrap();
        let second = sized(1, 2, 6_000, 0);
        p.add_state(second.clone(), second.pubkey, "repo".into()).unwrap();
        assert_eq!(p.counts.held_bytes, held_size(&big) + held_size(&second));
        // Over the budget (by at most one event): the next add is refused, whoever sends it.
        let third = sized(2, 3, 10, 0);
        let err = p.add_state(third.clone(), third.pubkey, "repo".into()).unwrap_err();
        assert_eq!(err, PurgatoryFull { scope: CapScope::TotalBytes, limit: 10_000 });
        assert!(err.refusal(crate::nostr::nip34::KIND_STATE).starts_with("blocked: purgatory is full (10000 bytes of events"));
        // Releasing one makes room again.
        p.remove_state_event("repo", &big.id).unwrap();
        p.add_state(third.clone(), third.pubkey, "repo".into()).unwrap();
        p.remove_state_event("repo", &second.id).unwrap();
        p.remove_state_event("repo", &third.id).unwrap();
        assert_eq!(p.counts.held_bytes, 0);
    }

    proptest! {
        #[test]
        fn held_size_bounds_the_serialised_event(content in 0usize..5_000, tag in 0usize..5_000) {
            let e = sized(0, 1, content, tag);
            let json = e.as_json().len();
            let held = held_size(&e);
            prop_assert!(json <= held && held <= json + 24, "json {} held {}", json, held);
        }

        #[test]
        fn held_bytes_follow_every_add_and_removal(ops in prop::collection::vec((0u8..4, 0usize..3_000, any::<bool>()), 1..40), budget in 1_000usize..20_000) {
            let caps = Caps { total_bytes: budget, per_author: 1_000, total: 1_000, ..Caps::default() };
            let (_c, mut p) = purgatory_with(PurgatoryConfig { caps, ..PurgatoryConfig::default() });
            let mut held: Vec<Event> = Vec::new();
            for (n, (author, content, remove)) in ops.into_iter().enumerate() {
                if remove && !held.is_empty() {
                    let e = held.remove(0);
                    prop_assert!(p.remove_state_event("repo", &e.id).is_some());
                } else {
                    let e = sized(author, n as u32, content, 0);
                    let before: usize = held.iter().map(held_size).sum();
                    match p.add_state(e.clone(), e.pubkey, "repo".into()) {
                        Ok(_) => {
                            prop_assert!(before < budget);
                            held.push(e);
                        }
                        Err(full) => {
                            prop_assert_eq!(full.scope, CapScope::TotalBytes);
                            prop_assert!(before >= budget);
                        }
                    }
                }
                let sum: usize = held.iter().map(held_size).sum();
                prop_assert_eq!(p.counts.held_bytes, sum);
                // Exceeded by at most one event.
                prop_assert!(sum < budget + 350 + 3_000 + 10);
            }
        }
    }

    fn small() -> PurgatoryConfig {
        PurgatoryConfig {
            caps: Caps {
                per_author: 3,
                total: 10,
                per_address: 10,
                placeholders_per_repo: 2,
                placeholders_total: 3,
                placeholders_per_address: 3,
                expired_events: 100,
                soft_expired: 2,
                total_bytes: DEFAULT_TOTAL_BYTES,
            },
            ..PurgatoryConfig::default()
        }
    }

    #[test]
    fn per_author_cap_limits_one_key_not_others() {
        let (_c, mut p) = purgatory_with(small());
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 0), "repo").unwrap();
        for v in 0..2 {
            let s = signed(0, STATE, v);
            p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        }
        let over = signed(0, STATE, 2);
        let err = p
            .add_state(over.clone(), over.pubkey, "repo".into())
            .unwrap_err();
        assert_eq!(
            err,
            PurgatoryFull {
                scope: CapScope::Author,
                limit: 3
            }
        );
        let pr = signed(0, PR, 0);
        assert!(p.add_pr(pr, "c".into(), vec![]).is_err());
        // Another author is unaffected; a replacement of a held announcement is not an add.
        let other = signed(1, STATE, 0);
        assert!(p
            .add_state(other.clone(), other.pubkey, "repo".into())
            .unwrap());
        assert!(
            add_ann(&mut p, &signed(0, ANNOUNCEMENT, 1), "repo")
                .unwrap()
                .replaced
        );
        // Releasing one frees room.
        p.remove_state_event("repo", &signed(0, STATE, 0).id)
            .unwrap();
        assert!(p
            .add_state(over.clone(), over.pubkey, "repo".into())
            .unwrap());
        p.assert_consistent();
    }

    #[test]
    fn throwaway_key_flood_never_evicts_the_maintainer() {
        let (clock, mut p) = purgatory_with(small());
        let maintainer = signed(0, STATE, 0);
        p.add_state(maintainer.clone(), maintainer.pubkey, "repo".into())
            .unwrap();
        let mut refused = Vec::new();
        // 30 throwaway keys, 3 events each, all for the maintainer's identifier.
        for key in 10..40u8 {
            for n in 0..3 {
                let e = fake_event(key, STATE, 0, n);
                if let Err(full) = p.add_state(e.clone(), e.pubkey, "repo".into()) {
                    refused.push(full);
                }
            }
        }
        assert_eq!(p.states_for("repo").len(), 10);
        assert!(p
            .states_for("repo")
            .iter()
            .any(|s| s.event.id == maintainer.id));
        assert_eq!(refused.len(), 90 - 9);
        assert!(refused
            .iter()
            .all(|f| f.scope == CapScope::Total && f.ok_prefix() == "blocked"));
        // The maintainer's other events are refused too while full, but nothing already held
        // is lost; once the flood expires there is room again.
        p.assert_consistent();
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 10);
        let again = signed(0, STATE, 1);
        assert!(p
            .add_state(again.clone(), again.pubkey, "repo".into())
            .unwrap());
    }

    fn addr(n: u8) -> Option<std::net::IpAddr> {
        Some(std::net::IpAddr::from([192, 0, 2, n]))
    }

    #[test]
    fn one_address_holds_at_most_its_share_whatever_keys_it_signs_with() {
        let caps = Caps { per_author: 2, total: 100, per_address: 5, ..small().caps };
        let (clock, mut p) = purgatory_with(PurgatoryConfig { caps, ..PurgatoryConfig::default() });
        let mut refused = Vec::new();
        // 20 throwaway keys from one address: the address's share stops them, not the total.
        for key in 10..30u8 {
            for n in 0..2 {
                let e = fake_event(key, STATE, 0, n);
                if let Err(full) = p.add_state_from(e.clone(), e.pubkey, "repo".into(), addr(1)) {
                    refused.push(full);
                }
            }
        }
        assert_eq!(p.states_for("repo").len(), 5);
        assert_eq!(refused.len(), 35);
        assert!(refused.iter().all(|f| *f == PurgatoryFull { scope: CapScope::Address, limit: 5 }));
        let msg = refused[0].refusal(crate::nostr::nip34::KIND_STATE);
        assert!(msg.starts_with("rate-limited: this server holds 5 events waiting for git data from your address; push the git data"), "{msg}");
        // Another address, and events of unknown origin (relay sync), still have room.
        let other = fake_event(40, STATE, 0, 0);
        p.add_state_from(other.clone(), other.pubkey, "repo".into(), addr(2)).unwrap();
        let synced = fake_event(41, STATE, 0, 0);
        p.add_state(synced.clone(), synced.pubkey, "repo".into()).unwrap();
        // Announcements and pull requests share the same budget.
        let ann = fake_event(50, ANNOUNCEMENT, 0, 0);
        let err = p.add_announcement_from(ann.clone(), ann.pubkey, "x".into(), Default::default(), addr(1)).unwrap_err();
        assert_eq!(err.scope, CapScope::Address);
        let pr = fake_event(51, PR, 0, 0);
        assert_eq!(p.add_pr_from(pr, "c".into(), vec![], addr(1)).unwrap_err().scope, CapScope::Address);
        assert_eq!(p.check_room(&pubkey(52), addr(1)).unwrap_err().scope, CapScope::Address);
        p.assert_consistent();
        // Releasing one frees a place of that address; expiry frees them all.
        let first = p.states_for("repo")[0].event.id;
        p.remove_state_event("repo", &first).unwrap();
        assert!(p.check_room(&pubkey(52), addr(1)).is_ok());
        clock.advance(MIN30);
        p.sweep();
        assert!(p.counts.per_address.is_empty());
        p.assert_consistent();
    }

    #[test]
    fn soft_expired_announcements_leave_their_address_share_and_a_revival_counts_again() {
        let caps = Caps { per_address: 1, ..small().caps };
        let (clock, mut p) = purgatory_with(PurgatoryConfig { caps, ..PurgatoryConfig::default() });
        let ann = signed(0, ANNOUNCEMENT, 0);
        p.add_announcement_from(ann.clone(), ann.pubkey, "repo".into(), Default::default(), addr(1)).unwrap();
        assert_eq!(p.check_room(&pubkey(3), addr(1)).unwrap_err().scope, CapScope::Address);
        clock.advance(MIN30);
        p.sweep();
        assert!(p.check_room(&pubkey(3), addr(1)).is_ok(), "soft-expired: the share is free");
        p.assert_consistent();
        p.extend_announcement_expiry(&ann.pubkey, "repo", MIN30).unwrap();
        assert_eq!(p.check_room(&pubkey(3), addr(1)).unwrap_err().scope, CapScope::Address);
        p.assert_consistent();
    }

    #[test]
    fn placeholders_per_address() {
        let (_c, mut p) = purgatory_with(PurgatoryConfig { caps: Caps { placeholders_total: 10, placeholders_per_repo: 10, placeholders_per_address: 2, ..small().caps }, ..PurgatoryConfig::default() });
        let id = |n: u8| EventId::from_byte_array([n; 32]);
        p.add_pr_placeholder_from(id(1), "c".into(), repo(0, "a"), addr(1)).unwrap();
        p.add_pr_placeholder_from(id(2), "c".into(), repo(1, "b"), addr(1)).unwrap();
        let err = p.add_pr_placeholder_from(id(3), "c".into(), repo(2, "c"), addr(1)).unwrap_err();
        let PlaceholderError::Full(full) = err else { panic!("{err:?}") };
        assert_eq!(full, PurgatoryFull { scope: CapScope::PlaceholdersPerAddress, limit: 2 });
        assert_eq!(full.ok_prefix(), "rate-limited");
        assert!(full.to_string().contains("from your address"), "{full}");
        // A destination added to its own placeholder is no new placeholder.
        p.add_pr_placeholder_from(id(1), "c".into(), repo(2, "c"), addr(1)).unwrap();
        // Other addresses are unaffected.
        p.add_pr_placeholder_from(id(3), "c".into(), repo(2, "c"), addr(2)).unwrap();
        p.add_pr_placeholder(id(4), "c".into(), repo(2, "c")).unwrap();
        p.assert_consistent();
        // The PR event taking a placeholder over frees the pusher's share.
        let pr = signed(0, PR, 0);
        p.add_pr_placeholder_from(pr.id, "c".into(), repo(1, "b"), addr(2)).unwrap();
        p.add_pr_from(pr.clone(), "c".into(), vec![repo(1, "b")], addr(3)).unwrap();
        assert_eq!(p.counts.placeholders_per_address.get(&addr(2).unwrap()), Some(&1));
        assert_eq!(p.counts.per_address.get(&addr(3).unwrap()), Some(&1));
        p.remove_pr(&id(1));
        p.add_pr_placeholder_from(id(5), "c".into(), repo(0, "a"), addr(1)).unwrap();
        p.assert_consistent();
    }

    proptest! {
        #[test]
        fn address_counts_follow_every_add_and_removal(ops in prop::collection::vec((0u8..6, 0u8..3, 0u8..3, any::<bool>()), 1..60)) {
            let caps = Caps { per_author: 1_000, total: 1_000, per_address: 4, placeholders_per_address: 3, placeholders_total: 1_000, ..small().caps };
            let (_c, mut p) = purgatory_with(PurgatoryConfig { caps, ..PurgatoryConfig::default() });
            let mut held: Vec<(EventId, bool)> = Vec::new();
            for (n, (author, from, what, remove)) in ops.into_iter().enumerate() {
                if remove && !held.is_empty() {
                    let (id, placeholder) = held.remove(n % held.len());
                    if placeholder {
                        prop_assert!(p.remove_pr(&id).is_some());
                    } else {
                        prop_assert!(p.remove_state_event("repo", &id).is_some());
                    }
                } else {
                    let origin = if from == 0 { None } else { addr(from) };
                    if what == 0 {
                        let id = EventId::from_byte_array([n as u8 + 1; 32]);
                        let before = origin.map_or(0, |o| p.counts.placeholders_per_address.get(&o).copied().unwrap_or(0));
                        match p.add_pr_placeholder_from(id, "c".into(), repo(author % 3, "r"), origin) {
                            Ok(()) => { prop_assert!(before < 3); held.push((id, true)); }
                            Err(PlaceholderError::Full(f)) => prop_assert!(f.scope == CapScope::PlaceholdersPerAddress || f.scope == CapScope::PlaceholdersPerRepo),
                            Err(e) => prop_assert!(false, "{:?}", e),
                        }
                    } else {
                        let e = fake_event(author, STATE, 0, n as u32);
                        let before = origin.map_or(0, |o| p.counts.per_address.get(&o).copied().unwrap_or(0));
                        match p.add_state_from(e.clone(), e.pubkey, "repo".into(), origin) {
                            Ok(_) => { prop_assert!(before < 4); held.push((e.id, false)); }
                            Err(f) => { prop_assert_eq!(f.scope, CapScope::Address); prop_assert!(before >= 4); }
                        }
                    }
                }
                p.assert_consistent();
                prop_assert!(p.counts.per_address.values().all(|&n| n <= 4));
                prop_assert!(p.counts.placeholders_per_address.values().all(|&n| n <= 3));
            }
        }
    }

    #[test]
    fn placeholder_caps_per_repo_and_total() {
        let (_c, mut p) = purgatory_with(small());
        let id = |n: u8| EventId::from_byte_array([n; 32]);
        p.add_pr_placeholder(id(1), "c".into(), repo(0, "a"))
            .unwrap();
        p.add_pr_placeholder(id(2), "c".into(), repo(0, "a"))
            .unwrap();
        assert_eq!(
            p.add_pr_placeholder(id(3), "c".into(), repo(0, "a")),
            Err(PlaceholderError::Full(PurgatoryFull {
                scope: CapScope::PlaceholdersPerRepo,
                limit: 2
            }))
        );
        // Adding a destination to an existing placeholder counts per repository only.
        assert!(p
            .add_pr_placeholder(id(1), "c".into(), repo(0, "a"))
            .is_ok());
        p.add_pr_placeholder(id(3), "c".into(), repo(1, "b"))
            .unwrap();
        let err = p
            .add_pr_placeholder(id(4), "c".into(), repo(2, "c"))
            .unwrap_err();
        assert_eq!(
            err,
            PlaceholderError::Full(PurgatoryFull {
                scope: CapScope::PlaceholdersTotal,
                limit: 3
            })
        );
        p.add_pr_placeholder(id(3), "c".into(), repo(2, "c"))
            .unwrap();
        // Placeholders do not use the event budget.
        for v in 0..3 {
            let s = signed(0, STATE, v);
            p.add_state(s.clone(), s.pubkey, "a".into()).unwrap();
        }
        assert_eq!(p.stats().placeholders, 3);
        p.assert_consistent();
    }

    #[test]
    fn soft_expired_announcements_free_the_caps_and_the_oldest_is_evicted() {
        let config = PurgatoryConfig { caps: Caps { per_author: 1, total: 3, soft_expired: 2, ..small().caps }, ..PurgatoryConfig::default() };
        let ttl = config.entry_ttl;
        let (clock, mut p) = purgatory_with(config);
        for owner in 0..3 {
            add_ann(&mut p, &fake_event(owner, ANNOUNCEMENT, 0, owner.into()), "repo").unwrap();
        }
        assert_eq!(add_ann(&mut p, &fake_event(3, ANNOUNCEMENT, 0, 3), "repo").unwrap_err().scope, CapScope::Total);
        clock.advance(ttl);
        let actions = p.sweep();
        // Three soft-expire; the soft budget of 2 evicts the oldest for good.
        let expired = actions.iter().filter(|a| matches!(a, super::super::SweepAction::ExpireAnnouncement { .. })).count();
        assert_eq!(expired, 1, "{actions:?}");
        assert_eq!(p.counts.soft_expired, 2);
        // The held caps are free again: newcomers and the soft-expired owners themselves.
        for owner in 3..6 {
            add_ann(&mut p, &fake_event(owner, ANNOUNCEMENT, 0, owner.into()), "repo").unwrap();
        }
        assert_eq!(add_ann(&mut p, &fake_event(6, ANNOUNCEMENT, 0, 6), "repo").unwrap_err().scope, CapScope::Total);
        // The two newest soft-expired ones are still held for revival.
        let kept = (0..3).filter(|&o| p.get_announcement(&pubkey(o), "repo").is_some()).count();
        assert_eq!(kept, 2);
        assert_eq!(p.counts.total, 3);
    }
}
