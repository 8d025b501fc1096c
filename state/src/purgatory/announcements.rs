//! Announcement purgatory: new repository announcements wait here, with their bare repository
//! already created, until git data proves the repository has content.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use nostr::prelude::{Event, PublicKey};

use crate::nostr::recency::Recency;

use super::entries::{
    AnnouncementAdded, AnnouncementEntry, EntryKey, Extension, StateSyncRegistration,
};
use super::{Purgatory, PurgatoryFull};

/// NIP-01 order for replaceable events: later `created_at` wins, a tie goes to the lower id.
pub(crate) fn supersedes(new: &Event, old: &Event) -> bool {
    Recency::of(new) >= Recency::of(old)
}

impl Purgatory {
    /// Holds an announcement whose bare repository the caller has just created (or which
    /// replaces one already held). A replacement keeps one entry for (owner, identifier), keeps
    /// the newer event (NIP-01 order) and extends the expiry; if the old entry was soft-expired,
    /// `revived` tells the caller to recreate the bare repository.
    pub fn add_announcement(
        &mut self,
        event: impl Into<Arc<Event>>,
        owner: PublicKey,
        identifier: String,
        relays: BTreeSet<String>,
    ) -> Result<AnnouncementAdded, PurgatoryFull> {
        self.add_announcement_from(event, owner, identifier, relays, None)
    }

    /// [`Self::add_announcement`] of an event sent from `origin` (the client address as counted,
    /// [`crate::names::client_key::limit_key`]): a new entry, or a revival, counts against its share.
    /// A replacement of a held entry keeps the entry's address.
    pub fn add_announcement_from(
        &mut self,
        event: impl Into<Arc<Event>>,
        owner: PublicKey,
        identifier: String,
        relays: BTreeSet<String>,
        origin: Option<IpAddr>,
    ) -> Result<AnnouncementAdded, PurgatoryFull> {
        let event = event.into();
        let now = self.clock.now();
        let ttl = self.config.entry_ttl;
        if let Some(mut old) = self.detach_announcement(&owner, &identifier) {
            let revived = old.soft_expired;
            // A revival holds a repository again: it needs room under the held caps.
            if revived {
                if let Err(full) = self.counts.check_entry(&self.config.caps, &owner, origin) {
                    self.attach_announcement(old);
                    return Err(full);
                }
                old.origin = origin;
            }
            if supersedes(&event, &old.event) {
                old.event = event;
                old.relays = relays;
            }
            old.expires_at = if revived {
                now + ttl
            } else {
                old.expires_at.max(now + ttl)
            };
            old.soft_expired = false;
            tracing::info!(
                owner = %owner.to_hex(),
                identifier = %identifier,
                event = %old.event.id,
                time_left_secs = old.expires_at.saturating_duration_since(now).as_secs(),
                revived,
                "purgatory: announcement replaced, expiry extended"
            );
            self.attach_announcement(old);
            return Ok(AnnouncementAdded {
                replaced: true,
                revived,
            });
        }
        self.counts.check_entry(&self.config.caps, &owner, origin)?;
        self.attach_announcement(AnnouncementEntry {
            event,
            owner,
            identifier,
            relays,
            created_at: now,
            expires_at: now + ttl,
            soft_expired: false,
            origin,
        });
        Ok(AnnouncementAdded {
            replaced: false,
            revived: false,
        })
    }

    /// Git data arrived: takes the announcement out so the caller stores and serves it.
    pub fn promote_announcement(&mut self, owner: &PublicKey, identifier: &str) -> Option<Event> {
        self.detach_announcement(owner, identifier)
            .map(|a| Arc::unwrap_or_clone(a.event))
    }

    /// The held announcements for `identifier` (any owner), for authorization checks.
    pub fn announcements_for(&self, identifier: &str) -> Vec<&AnnouncementEntry> {
        self.announcements
            .get(identifier)
            .map(|m| m.values().collect())
            .unwrap_or_default()
    }

    pub fn get_announcement(
        &self,
        owner: &PublicKey,
        identifier: &str,
    ) -> Option<&AnnouncementEntry> {
        self.announcements.get(identifier)?.get(owner)
    }

    /// What relay-to-relay event sync pulls state events for: every held announcement,
    /// soft-expired ones included. Phase 1 of soft expiry keeps the announcement's state events
    /// syncing (docs/protocol.md#soft-expiry), so a late state event from another relay can
    /// revive it; a fully expired announcement is no longer listed. Sorted by identifier, then
    /// owner.
    pub fn state_sync_registrations(&self) -> Vec<StateSyncRegistration> {
        let mut out: Vec<StateSyncRegistration> = self
            .announcements()
            .map(|a| StateSyncRegistration {
                owner: a.owner,
                identifier: a.identifier.clone(),
                relays: a.relays.clone(),
                soft_expired: a.soft_expired,
            })
            .collect();
        out.sort_by(|a, b| (&a.identifier, a.owner).cmp(&(&b.identifier, b.owner)));
        out
    }

    /// Every held announcement, for sync registration.
    pub fn announcements(&self) -> impl Iterator<Item = &AnnouncementEntry> {
        self.announcements.values().flat_map(|m| m.values())
    }

    /// Resets the announcement's timer to `now + duration` (never shortens it), because the
    /// repository is active (state event arrived, push authorised, replacement). A soft-expired
    /// entry is revived: its timer restarts at `now + duration` and the caller must recreate the
    /// bare repository. `None` if no such entry is held.
    pub fn extend_announcement_expiry(
        &mut self,
        owner: &PublicKey,
        identifier: &str,
        duration: Duration,
    ) -> Option<Extension> {
        let now = self.clock.now();
        let entry = self.announcements.get_mut(identifier)?.get_mut(owner)?;
        let old = entry.expires_at;
        let revived = entry.soft_expired;
        entry.expires_at = if revived {
            now + duration
        } else {
            old.max(now + duration)
        };
        entry.soft_expired = false;
        if revived {
            self.counts.revive(*owner, entry.origin);
        }
        let new = entry.expires_at;
        tracing::info!(
            owner = %owner.to_hex(),
            identifier,
            event = %entry.event.id,
            time_left_secs = new.saturating_duration_since(now).as_secs(),
            revived,
            "purgatory: announcement expiry extended"
        );
        let key = EntryKey::Announcement {
            owner: *owner,
            identifier: identifier.to_owned(),
        };
        self.rearm(key, old, new, &[identifier.to_owned()]);
        Some(Extension { revived })
    }

    /// Takes the announcement out without expiring it (deletion, or a newer announcement that
    /// drops this service). The caller deletes the bare repository unless the entry was soft-expired.
    pub fn remove_announcement(
        &mut self,
        owner: &PublicKey,
        identifier: &str,
    ) -> Option<AnnouncementEntry> {
        self.detach_announcement(owner, identifier)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn add_then_promote() {
        let (clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        let added = add_ann(&mut p, &ev, "repo").unwrap();
        assert_eq!(
            added,
            AnnouncementAdded {
                replaced: false,
                revived: false
            }
        );
        assert_eq!(p.announcements_for("repo").len(), 1);
        assert_eq!(p.announcements_for("other").len(), 0);
        let entry = p.get_announcement(&ev.pubkey, "repo").unwrap();
        assert_eq!(entry.expires_at, clock.now() + MIN30);
        p.assert_consistent();
        assert_eq!(p.promote_announcement(&ev.pubkey, "repo"), Some(ev.clone()));
        assert_eq!(p.promote_announcement(&ev.pubkey, "repo"), None);
        assert_eq!(p.stats().announcements, 0);
        assert_eq!(p.stats().deadlines, 0);
        p.assert_consistent();
    }

    #[test]
    fn soft_expired_announcements_keep_their_state_sync_registration_until_fully_expired() {
        let (clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ev, "repo").unwrap();
        let registered = |p: &Purgatory| p.state_sync_registrations().into_iter().map(|r| (r.identifier, r.soft_expired)).collect::<Vec<_>>();
        assert_eq!(registered(&p), [("repo".to_owned(), false)]);
        clock.advance(MIN30);
        p.sweep();
        assert_eq!(registered(&p), [("repo".to_owned(), true)], "phase 1 keeps syncing state events");
        clock.advance(H24);
        p.sweep();
        assert!(registered(&p).is_empty(), "fully expired: no longer synced");
    }

    #[test]
    fn same_identifier_different_owners_are_separate_entries() {
        let (_clock, mut p) = purgatory();
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 0), "repo").unwrap();
        add_ann(&mut p, &signed(1, ANNOUNCEMENT, 0), "repo").unwrap();
        assert_eq!(p.announcements_for("repo").len(), 2);
        assert_eq!(p.stats().announcements, 2);
        p.assert_consistent();
    }

    #[test]
    fn replacement_keeps_one_entry_newest_event_and_extends() {
        let (clock, mut p) = purgatory();
        let (v0, v1, v2) = (
            signed(0, ANNOUNCEMENT, 0),
            signed(0, ANNOUNCEMENT, 1),
            signed(0, ANNOUNCEMENT, 2),
        );
        add_ann(&mut p, &v1, "repo").unwrap();
        clock.advance(MIN20);
        let added = add_ann(&mut p, &v2, "repo").unwrap();
        assert_eq!(
            added,
            AnnouncementAdded {
                replaced: true,
                revived: false
            }
        );
        let e = p.get_announcement(&v2.pubkey, "repo").unwrap();
        assert_eq!(e.event.id, v2.id);
        assert_eq!(e.expires_at, clock.now() + MIN30);
        // An older event does not replace the newer one but still counts as activity.
        clock.advance(MIN20);
        add_ann(&mut p, &v0, "repo").unwrap();
        let e = p.get_announcement(&v2.pubkey, "repo").unwrap();
        assert_eq!(e.event.id, v2.id);
        assert_eq!(e.expires_at, clock.now() + MIN30);
        assert_eq!(p.stats().announcements, 1);
        assert_eq!(p.stats().deadlines, 1);
        p.assert_consistent();
    }

    #[test]
    fn nip01_tie_goes_to_lower_id() {
        let a = signed(0, ANNOUNCEMENT, 0);
        let mut b = signed(1, ANNOUNCEMENT, 0);
        b.created_at = a.created_at;
        let (low, high) = if a.id < b.id { (&a, &b) } else { (&b, &a) };
        assert!(supersedes(low, high));
        assert!(!supersedes(high, low));
        assert!(supersedes(
            &signed(0, ANNOUNCEMENT, 1),
            &signed(0, ANNOUNCEMENT, 0)
        ));
        assert!(!supersedes(
            &signed(0, ANNOUNCEMENT, 0),
            &signed(0, ANNOUNCEMENT, 1)
        ));
    }

    #[test]
    fn extension_resets_timer_and_never_shortens() {
        let (clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ev, "repo").unwrap();
        clock.advance(MIN20);
        let ext = p
            .extend_announcement_expiry(&ev.pubkey, "repo", MIN30)
            .unwrap();
        assert!(!ext.revived);
        assert_eq!(
            p.get_announcement(&ev.pubkey, "repo").unwrap().expires_at,
            clock.now() + MIN30
        );
        p.extend_announcement_expiry(&ev.pubkey, "repo", Duration::from_secs(1))
            .unwrap();
        assert_eq!(
            p.get_announcement(&ev.pubkey, "repo").unwrap().expires_at,
            clock.now() + MIN30
        );
        assert!(p
            .extend_announcement_expiry(&ev.pubkey, "nope", MIN30)
            .is_none());
        p.assert_consistent();
    }

    #[test]
    fn remove_returns_entry_for_repo_deletion() {
        let (_clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ev, "repo").unwrap();
        let removed = p.remove_announcement(&ev.pubkey, "repo").unwrap();
        assert_eq!((removed.owner, removed.identifier.as_str()), (ev.pubkey, "repo"));
        assert!(p.remove_announcement(&ev.pubkey, "repo").is_none());
        assert_eq!(p.stats(), Default::default());
        p.assert_consistent();
    }
}
