//! Trust: who may write what, how fast, and what the operator refuses (docs/protocol.md#trust).
//!
//! - [`Trust`] holds the operator's settings: public or private service, the allow/deny lists
//!   (`--block-author`, `--allow-repo`, ..., and `--curation-file`, re-read when it changes), the
//!   members of a private service (`--member`, `--members-file`), the write limits
//!   ([`limits`]), the free-disk watermark ([`disk`]) and the trusted reverse proxies ([`proxy`]).
//! - [`Trust::admit`] is the check at the entry of admission, before any repository is created:
//!   AUTH events are never stored, the per-kind size caps (`grasp_state::nostr::event_size`), the
//!   free-disk watermark, NIP-70 protected events only from their author, curation,
//!   private repositories refused by a public service, the cap on new repositories.
//! - [`credentials`]: the other way round, who this server is to other servers: the NIP-42
//!   `AUTH` events and GRASP-08 git proofs it presents, and a private replica set's identity.
//! - Connection-level rules (NIP-42 state, per-connection write bucket, membership for REQ and
//!   EVENT of a private service) are applied by `crate::nostr::connection`.
//! - `crate::grasp::purge::run_curation_watch` drops the held events of authors that become
//!   blocked;
//!   [`limits::run_repo_count`] reconciles the `--max-repos` count with the disk every minute.
//!
//! The decisions themselves are pure: `grasp_state::trust::auth`, `grasp_state::trust::curation`,
//! `grasp_state::trust::rate`.

pub mod credentials;
pub mod disk;
pub mod limits;
pub mod proxy;
pub mod reload;

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use grasp_state::trust::auth::{check_protected, Submitter, KIND_AUTH};
use grasp_state::trust::curation::Curation;
use grasp_state::nostr::event_size::EventSizes;
use grasp_state::nostr::nip34::{Announcement, KIND_ANNOUNCEMENT};
use ipnet::IpNet;
use nostr::prelude::{Event, PublicKey};

use crate::trust::disk::FreeDisk;
use crate::trust::limits::WriteLimits;
use crate::trust::reload::Reloadable;

/// A member's encrypted list of private GRASP services, accepted by a private service.
pub const KIND_PRIVATE_GRASP_LIST: u16 = 10318;

/// The refusal of a `["private","true"]` announcement by a public service.
pub const PRIVATE_REFUSED: &str =
    "blocked: this is a public GRASP server; private repositories need a GRASP-08 private service";

/// The refusal of kind 22242 sent as `EVENT`.
pub const AUTH_EVENT_REFUSED: &str =
    "invalid: kind 22242 events authenticate a connection (NIP-42); send them as [\"AUTH\", <event>], they are never stored";

/// Does the announcement ask for a private repository (`["private","true"]`)?
pub fn is_private_announcement(ev: &Event) -> bool {
    ev.tags.iter().any(|t| matches!(t.as_slice(), [n, v, ..] if n == "private" && v == "true"))
}

/// The operator's trust settings, shared by connections and the acceptance policy.
#[derive(Default)]
pub struct Trust {
    /// A GRASP-08 private service: reads and writes need a member's NIP-42 AUTH.
    pub private: bool,
    pub limits: WriteLimits,
    /// The event size limits (`--max-message-bytes`, `--max-repo-event-bytes`, per-kind caps).
    pub event_sizes: EventSizes,
    /// `--min-free-disk` on the data directory.
    pub disk: FreeDisk,
    /// Reverse proxies whose `X-Forwarded-For` / `X-Real-IP` are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The allow/deny lists of the flags and the configuration file (replaced on SIGHUP).
    curation: RwLock<Arc<Curation>>,
    curation_file: Option<Reloadable<Curation>>,
    /// The members of the flags and the configuration file, the admin included (replaced on
    /// SIGHUP).
    members: RwLock<Arc<BTreeSet<PublicKey>>>,
    members_file: Option<Reloadable<BTreeSet<PublicKey>>>,
}

/// Reads a members file: one npub or hex public key per line, `#` comments.
pub fn parse_members(text: &str) -> Result<BTreeSet<PublicKey>, String> {
    let mut set = BTreeSet::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let pk = grasp_state::trust::curation::parse_pubkey(line)
            .ok_or_else(|| format!("line {}: {line:?} is not an npub or hex public key", n + 1))?;
        set.insert(pk);
    }
    Ok(set)
}

impl Trust {
    /// Settings from the sections they are read from: `[trust]`, the write limits and event
    /// sizes (`[limits]`), the free disk kept (`[storage]`), and `--admin-pubkey` (a member).
    /// Files named there are read now (an error if unreadable).
    pub fn from_sections(
        trust: &crate::config::TrustConfig,
        limits_config: &crate::config::LimitsConfig,
        storage: &crate::config::StorageConfig,
        admin: Option<PublicKey>,
        git_root: std::path::PathBuf,
    ) -> anyhow::Result<Trust> {
        let curation_file = match &trust.curation_file {
            Some(p) => Some(Reloadable::open(p, |t| Curation::parse(t).map_err(|e| e.to_string()))?),
            None => None,
        };
        let members_file = match &trust.members_file {
            Some(p) => Some(Reloadable::open(p, parse_members)?),
            None => None,
        };
        let mut members: BTreeSet<PublicKey> = trust.member.iter().copied().collect();
        members.extend(admin);
        Ok(Trust {
            private: trust.private,
            limits: WriteLimits::new(limits::WriteLimitConfig::from_config(limits_config), Some(git_root), Arc::new(grasp_state::purgatory::SystemClock)),
            event_sizes: limits_config.event_sizes(),
            disk: FreeDisk::new(storage.data_dir.clone(), storage.min_free_disk),
            trusted_proxies: trust.trusted_proxy.clone(),
            curation: RwLock::new(Arc::new(trust.curation())),
            curation_file,
            members: RwLock::new(Arc::new(members)),
            members_file,
        })
    }

    /// The allow/deny lists in force (flags and file together).
    pub fn curation(&self) -> Arc<Curation> {
        let flags = self.curation.read().unwrap_or_else(|e| e.into_inner()).clone();
        match &self.curation_file {
            None => flags,
            Some(f) => Arc::new((*flags).clone().merged(&f.get())),
        }
    }

    /// Replaces the allow/deny lists of the flags and the configuration file (SIGHUP); the
    /// curation file's rules stay merged in. Held events of newly blocked authors are dropped
    /// by `crate::grasp::purge::run_curation_watch` within a second.
    pub fn set_curation(&self, curation: Curation) {
        *self.curation.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(curation);
    }

    /// Is `pk` a current member of the private service (the admin always is)?
    pub fn is_member(&self, pk: &PublicKey) -> bool {
        let members = self.members.read().unwrap_or_else(|e| e.into_inner()).clone();
        members.contains(pk) || self.members_file.as_ref().is_some_and(|f| f.get().contains(pk))
    }

    /// Replaces the members of the flags and the configuration file (SIGHUP); `members` must
    /// hold the admin. A removed member's subscriptions end and their next git request is
    /// refused, as when they leave the members file.
    pub fn set_members(&self, members: BTreeSet<PublicKey>) {
        *self.members.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(members);
    }

    /// Is any of the keys a connection authenticated as a current member?
    pub fn any_member(&self, authenticated: &[PublicKey]) -> bool {
        authenticated.iter().any(|pk| self.is_member(pk))
    }

    /// The checks at the entry of admission, cheapest first. `Err` is a complete NIP-01 message;
    /// nothing has been created or stored when it is returned.
    /// `creates_repo`: whether this server would make a new repository for the announcement
    /// (the cap on new repositories applies to those only).
    pub fn admit(&self, ev: &Event, submitter: &Submitter<'_>, creates_repo: impl FnOnce(&Announcement) -> bool) -> Result<(), String> {
        if ev.kind.as_u16() == KIND_AUTH {
            return Err(AUTH_EVENT_REFUSED.into());
        }
        self.event_sizes.check(ev.kind.as_u16(), ev.as_json().len())?;
        if !self.disk.has_room() {
            return Err(grasp_state::trust::free_disk::LOW_DISK_EVENT.into());
        }
        check_protected(ev, submitter).map_err(|r| r.message().to_string())?;
        let curation = self.curation();
        curation.check_event(&ev.pubkey, &ev.id)?;
        if ev.kind.as_u16() == KIND_ANNOUNCEMENT {
            if is_private_announcement(ev) && !self.private {
                return Err(PRIVATE_REFUSED.into());
            }
            if let Ok(a) = Announcement::from_event(ev) {
                curation.check_repo(&a.owner, &a.identifier)?;
                if creates_repo(&a) {
                    self.limits.take_new_repo(&a.owner)?;
                }
            }
        }
        Ok(())
    }
}
