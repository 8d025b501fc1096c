//! Kind-5 deletions (NIP-09) applied to the purgatory: only the deletion author's own entries
//! go; ids are removed outright, `a` coordinates remove entries created at or before the
//! deletion's `created_at`. Placeholders have no author and cannot be deleted this way.

use nostr::prelude::{EventId, Kind, PublicKey, Timestamp};

use super::entries::{EntryKey, Removed};
use super::Purgatory;

/// An `a` coordinate of a deletion: (kind, pubkey, `d` identifier).
pub type Coordinate = (u16, PublicKey, String);

impl Purgatory {
    /// Removes what a kind-5 event by `author` deletes. The caller deletes the bare repository
    /// of a removed announcement (unless soft-expired) and records the deletion so republishing
    /// is refused.
    pub fn remove_by_deletion(
        &mut self,
        author: &PublicKey,
        deleted_ids: &[EventId],
        deleted_coordinates: &[Coordinate],
        deletion_created_at: Timestamp,
    ) -> Vec<Removed> {
        let mut removed = Vec::new();
        for id in deleted_ids {
            match self.by_id.get(id).cloned() {
                Some(EntryKey::Announcement { owner, identifier }) => {
                    if owner == *author {
                        removed.extend(
                            self.detach_announcement(&owner, &identifier)
                                .map(Removed::Announcement),
                        );
                    }
                }
                Some(EntryKey::State { identifier, .. }) => {
                    let mine = self
                        .states_for(&identifier)
                        .iter()
                        .any(|s| s.event.id == *id && s.event.pubkey == *author);
                    if mine {
                        removed.extend(self.detach_state(&identifier, id).map(Removed::State));
                    }
                }
                Some(EntryKey::Pr { .. }) | None => {
                    let mine = self
                        .prs
                        .get(id)
                        .and_then(|p| p.event.as_ref())
                        .is_some_and(|e| e.pubkey == *author);
                    if mine {
                        removed.extend(self.detach_pr(id).map(|p| Removed::Pr(*id, p)));
                    }
                }
            }
        }
        for (kind, pubkey, identifier) in deleted_coordinates {
            if pubkey != author {
                continue;
            }
            match Kind::from_u16(*kind) {
                Kind::GitRepoAnnouncement => {
                    let covered = self
                        .get_announcement(pubkey, identifier)
                        .is_some_and(|a| a.event.created_at <= deletion_created_at);
                    if covered {
                        removed.extend(
                            self.detach_announcement(pubkey, identifier)
                                .map(Removed::Announcement),
                        );
                    }
                }
                kind => {
                    let covered: Vec<EventId> = self
                        .states_for(identifier)
                        .iter()
                        .filter(|s| {
                            s.event.kind == kind
                                && s.event.pubkey == *pubkey
                                && s.event.created_at <= deletion_created_at
                        })
                        .map(|s| s.event.id)
                        .collect();
                    for id in covered {
                        removed.extend(self.detach_state(identifier, &id).map(Removed::State));
                    }
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    fn setup() -> (std::sync::Arc<super::super::ManualClock>, super::Purgatory) {
        let (clock, mut p) = purgatory();
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 1), "repo").unwrap();
        add_ann(&mut p, &signed(1, ANNOUNCEMENT, 1), "repo").unwrap();
        for author in 0..2 {
            for v in 0..3 {
                let s = signed(author, STATE, v);
                p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
            }
            let pr = signed(author, PR, 0);
            p.add_pr(pr, "c".into(), vec![repo(0, "repo")]).unwrap();
        }
        (clock, p)
    }

    #[test]
    fn deletion_by_id_removes_only_own_entries() {
        let (_c, mut p) = setup();
        let a0 = pubkey(0);
        let ids = [
            signed(0, ANNOUNCEMENT, 1).id,
            signed(1, ANNOUNCEMENT, 1).id, // someone else's
            signed(0, STATE, 0).id,
            signed(1, STATE, 0).id, // someone else's
            signed(0, PR, 0).id,
            signed(1, PR, 0).id, // someone else's
        ];
        let removed = p.remove_by_deletion(&a0, &ids, &[], ts(0));
        let got: Vec<_> = removed.iter().map(|r| r.event_id()).collect();
        assert_eq!(got, vec![ids[0], ids[2], ids[4]]);
        assert!(p.get_announcement(&pubkey(1), "repo").is_some());
        assert_eq!(p.states_for("repo").len(), 5);
        assert!(p.find_pr(&ids[5]).is_some());
        p.assert_consistent();
    }

    #[test]
    fn deletion_by_coordinate_respects_created_at_and_author() {
        let (_c, mut p) = setup();
        let a0 = pubkey(0);
        // Variant v has created_at BASE + 100 v. A deletion at BASE + 100 covers v0 and v1 of
        // author 0's states, but not author 1's, and not the announcement (variant 1 = BASE+100
        // is covered; test the boundary with the announcement too).
        let coords = vec![
            (STATE, a0, "repo".to_owned()),
            (STATE, pubkey(1), "repo".to_owned()), // not the deletion's author: ignored
            (ANNOUNCEMENT, a0, "repo".to_owned()),
        ];
        let removed = p.remove_by_deletion(&a0, &[], &coords, ts(1));
        let mut got: Vec<_> = removed.iter().map(|r| r.event_id()).collect();
        got.sort();
        let mut want = vec![
            signed(0, ANNOUNCEMENT, 1).id,
            signed(0, STATE, 0).id,
            signed(0, STATE, 1).id,
        ];
        want.sort();
        assert_eq!(got, want);
        let left: Vec<_> = p.states_for("repo").iter().map(|s| s.event.id).collect();
        assert!(left.contains(&signed(0, STATE, 2).id));
        assert_eq!(left.len(), 4);
        p.assert_consistent();
    }

    #[test]
    fn coordinate_deletion_older_than_announcement_keeps_it() {
        let (_c, mut p) = setup();
        let coords = vec![(ANNOUNCEMENT, pubkey(0), "repo".to_owned())];
        assert!(p
            .remove_by_deletion(&pubkey(0), &[], &coords, ts(0))
            .is_empty());
        assert!(p.get_announcement(&pubkey(0), "repo").is_some());
    }

    #[test]
    fn placeholders_cannot_be_deleted_by_kind5() {
        let (_c, mut p) = purgatory();
        let id = nostr::prelude::EventId::from_byte_array([9; 32]);
        p.add_pr_placeholder(id, "c".into(), repo(0, "repo"))
            .unwrap();
        assert!(p
            .remove_by_deletion(&pubkey(0), &[id], &[], ts(2))
            .is_empty());
        assert!(p.find_pr(&id).is_some());
    }
}
