//! Expiry. [`Purgatory::sweep`] pops only due deadlines (cost proportional to what expires, not
//! to what is held) and returns the I/O the caller must do, outside its lock.


use std::sync::Arc;
use std::time::Instant;

use nostr::prelude::{Event, EventId, PublicKey};

use super::entries::{EntryKey, RepoId};
use super::Purgatory;

/// Something the sweep decided; the caller performs the I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepAction {
    /// First expiry of an announcement: delete the bare repository of (`owner`, `identifier`). The event is
    /// kept (soft-expired) for `soft_expiry_ttl` so a late state event can revive it.
    SoftExpireAnnouncement {
        owner: PublicKey,
        identifier: String,
        event_id: EventId,
    },
    /// Second expiry: the announcement is gone and recorded as expired.
    ExpireAnnouncement {
        owner: PublicKey,
        identifier: String,
        event_id: EventId,
    },
    /// A state event expired without its git data (recorded as expired).
    ExpireState {
        event_id: EventId,
        identifier: String,
        author: PublicKey,
    },
    /// A PR event expired without its commit (recorded as expired). `destinations` lists
    /// refs a git-first push wrote before the event arrived (usually empty): compare-and-delete
    /// `refs/nostr/<event_id>` against `commit` there.
    ExpirePr {
        event_id: EventId,
        commit: String,
        destinations: Vec<RepoId>,
    },
    /// A git-first placeholder expired without its event. The record stays (pending cleanup):
    /// compare-and-delete `refs/nostr/<event_id>` against `commit` in each destination (after
    /// checking `find_pr` again under the repository lock), then call
    /// [`Purgatory::placeholder_cleaned`], or [`Purgatory::retain_placeholder_for_retry`] on
    /// failure.
    ExpirePlaceholder {
        event_id: EventId,
        commit: String,
        destinations: Vec<RepoId>,
    },
}

impl Purgatory {
    /// Expires everything due now, except entries whose identifier is being synced (those are
    /// deferred until [`Purgatory::set_sync_running`] clears the flag). Also forgets expired-event
    /// records older than their retention.
    /// The held state events the next [`Self::sweep`] would expire (due now, their identifier's
    /// sync not running): the caller checks whether their git data is present and releases
    /// those instead (a held state whose data is present is released, never expired).
    pub fn due_states(&self) -> Vec<(String, Arc<Event>)> {
        let now = self.clock.now();
        self.deadlines
            .due(now)
            .filter_map(|key| match key {
                EntryKey::State { identifier, event_id } if !self.sync_defers(identifier, now) => self
                    .states
                    .get(identifier)
                    .and_then(|list| list.iter().find(|s| s.event.id == *event_id))
                    .map(|s| (identifier.clone(), Arc::clone(&s.event))),
                _ => None,
            })
            .collect()
    }

    pub fn sweep(&mut self) -> Vec<SweepAction> {
        let now = self.clock.now();
        let wall = self.clock.wall();
        self.expired.prune(wall, self.config.expired_events_ttl);
        // A sync running past its defer limit no longer holds anything back.
        let overdue: Vec<String> = self
            .sync_running
            .keys()
            .filter(|identifier| self.deferred.contains_key(*identifier) && !self.sync_defers(identifier, now))
            .cloned()
            .collect();
        for identifier in overdue {
            self.rearm_deferred(&identifier);
        }
        let mut actions = Vec::new();
        let mut examined = 0;
        while let Some((_, key)) = self.deadlines.pop_due(now) {
            examined += 1;
            if let Some(running) = self.running_identifier(&key, now) {
                self.deferred.entry(running).or_default().insert(key);
                continue;
            }
            match key {
                EntryKey::Announcement { owner, identifier } => {
                    let Some(entry) = self
                        .announcements
                        .get_mut(&identifier)
                        .and_then(|m| m.get_mut(&owner))
                    else {
                        continue;
                    };
                    if entry.soft_expired {
                        // The deadline is already popped; detach finds nothing armed.
                        if let Some(entry) = self.detach_announcement(&owner, &identifier) {
                            self.record_expired(entry.event.id, wall);
                            actions.push(SweepAction::ExpireAnnouncement {
                                owner,
                                identifier,
                                event_id: entry.event.id,
                            });
                        }
                    } else {
                        // Room among the soft-expired: the oldest one expires for good.
                        if self.counts.soft_expired_full(&self.config.caps) {
                            if let Some((old_owner, old_identifier)) = self.oldest_soft_expired() {
                                if let Some(old) = self.detach_announcement(&old_owner, &old_identifier) {
                                    self.record_expired(old.event.id, wall);
                                    actions.push(SweepAction::ExpireAnnouncement {
                                        owner: old_owner,
                                        identifier: old_identifier,
                                        event_id: old.event.id,
                                    });
                                }
                            }
                        }
                        let Some(entry) = self.announcements.get_mut(&identifier).and_then(|m| m.get_mut(&owner)) else {
                            continue;
                        };
                        entry.soft_expired = true;
                        entry.expires_at = now + self.config.soft_expiry_ttl;
                        self.counts.soft_expire(&owner, entry.origin);
                        let event_id = entry.event.id;
                        let at = entry.expires_at;
                        let key = EntryKey::Announcement {
                            owner,
                            identifier: identifier.clone(),
                        };
                        self.deadlines.arm(at, key.clone());
                        self.journal_entry(&key);
                        actions.push(SweepAction::SoftExpireAnnouncement {
                            owner,
                            identifier,
                            event_id,
                        });
                    }
                }
                EntryKey::State {
                    identifier,
                    event_id,
                } => {
                    if let Some(entry) = self.detach_state(&identifier, &event_id) {
                        self.record_expired(event_id, wall);
                        actions.push(SweepAction::ExpireState {
                            event_id,
                            identifier,
                            author: entry.author,
                        });
                    }
                }
                EntryKey::Pr { event_id } => {
                    let Some(entry) = self.prs.get_mut(&event_id) else {
                        continue;
                    };
                    if entry.event.is_none() {
                        // Deadline already popped: mark pending, keep the record.
                        entry.cleanup_pending = true;
                        actions.push(SweepAction::ExpirePlaceholder {
                            event_id,
                            commit: entry.commit.clone(),
                            destinations: entry.destinations.clone(),
                        });
                        self.journal_entry(&EntryKey::Pr { event_id });
                    } else if let Some(entry) = self.detach_pr(&event_id) {
                        self.record_expired(event_id, wall);
                        actions.push(SweepAction::ExpirePr {
                            event_id,
                            commit: entry.commit,
                            destinations: entry.destinations,
                        });
                    }
                }
            }
        }
        self.last_sweep_examined = examined;
        actions
    }

    /// The identifier of `key` whose running sync defers its expiry, if any.
    fn running_identifier(&self, key: &EntryKey, now: Instant) -> Option<String> {
        if self.sync_running.is_empty() {
            return None;
        }
        match key {
            EntryKey::Announcement { identifier, .. } | EntryKey::State { identifier, .. } => {
                self.sync_defers(identifier, now).then(|| identifier.clone())
            }
            EntryKey::Pr { event_id } => self
                .prs
                .get(event_id)?
                .identifiers()
                .find(|i| self.sync_defers(i, now))
                .map(str::to_owned),
        }
    }
}

impl Purgatory {
    /// The soft-expired announcement whose final expiry comes first (the oldest soft-expiry).
    fn oldest_soft_expired(&self) -> Option<(PublicKey, String)> {
        self.announcements
            .values()
            .flat_map(|m| m.values())
            .filter(|e| e.soft_expired)
            .min_by_key(|e| e.expires_at)
            .map(|e| (e.owner, e.identifier.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{Caps, Purgatory, PurgatoryConfig};
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn state_pr_and_placeholder_expire_at_30_minutes() {
        let (clock, mut p) = purgatory();
        let (s, pr) = (signed(0, STATE, 0), signed(0, PR, 0));
        let ph = EventId::from_byte_array([5; 32]);
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        p.add_pr(pr.clone(), "c1".into(), vec![repo(0, "repo")])
            .unwrap();
        p.add_pr_placeholder(ph, "c2".into(), repo(0, "repo"))
            .unwrap();
        clock.advance(MIN30 - SEC);
        assert!(p.sweep().is_empty());
        assert!(!p.is_expired(&s.id));
        clock.advance(SEC);
        let mut actions = p.sweep();
        actions.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(actions.len(), 3);
        assert!(actions.contains(&SweepAction::ExpireState {
            event_id: s.id,
            identifier: "repo".into(),
            author: s.pubkey
        }));
        assert!(actions.contains(&SweepAction::ExpirePr {
            event_id: pr.id,
            commit: "c1".into(),
            destinations: vec![]
        }));
        assert!(actions.contains(&SweepAction::ExpirePlaceholder {
            event_id: ph,
            commit: "c2".into(),
            destinations: vec![repo(0, "repo")]
        }));
        assert!(p.is_expired(&s.id) && p.is_expired(&pr.id));
        assert!(!p.is_expired(&ph), "a placeholder is not an expired event");
        assert!(p.states_for("repo").is_empty());
        assert!(p.find_pr(&pr.id).is_none());
        // The placeholder stays until its refs are cleaned.
        assert!(p.find_pr(&ph).unwrap().cleanup_pending);
        p.assert_consistent();
        assert!(
            p.sweep().is_empty(),
            "a pending placeholder is not swept twice"
        );
        assert!(p.placeholder_cleaned(&ph, &[repo(0, "repo")]));
        assert!(p.find_pr(&ph).is_none());
        assert_eq!(p.stats().prs + p.stats().placeholders + p.stats().states, 0);
        p.assert_consistent();
    }

    #[test]
    fn expired_events_are_forgotten_after_their_retention() {
        let (clock, mut p) = purgatory();
        let s = signed(0, STATE, 0);
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        clock.advance(MIN30);
        p.sweep();
        assert!(p.is_expired(&s.id));
        clock.advance(H24 - SEC);
        p.sweep();
        assert!(p.is_expired(&s.id));
        assert_eq!(p.stats().expired_events, 1);
        clock.advance(SEC);
        assert!(!p.is_expired(&s.id));
        p.sweep();
        assert_eq!(p.stats().expired_events, 0);
    }

    #[test]
    fn placeholder_retry_rearms_instead_of_losing_the_record() {
        let (clock, mut p) = purgatory();
        let ph = EventId::from_byte_array([5; 32]);
        p.add_pr_placeholder(ph, "c".into(), repo(0, "a")).unwrap();
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 1);
        // The compare-and-delete failed.
        assert!(p.retain_placeholder_for_retry(&ph, p.config().placeholder_retry));
        assert!(!p.find_pr(&ph).unwrap().cleanup_pending);
        p.assert_consistent();
        clock.advance(Duration::from_secs(59));
        assert!(p.sweep().is_empty());
        clock.advance(SEC);
        assert_eq!(
            p.sweep(),
            vec![SweepAction::ExpirePlaceholder {
                event_id: ph,
                commit: "c".into(),
                destinations: vec![repo(0, "a")]
            }]
        );
        assert!(!p.retain_placeholder_for_retry(&EventId::from_byte_array([6; 32]), SEC));
    }

    #[test]
    fn push_during_cleanup_keeps_new_destination() {
        let (clock, mut p) = purgatory();
        let ph = EventId::from_byte_array([5; 32]);
        p.add_pr_placeholder(ph, "c".into(), repo(0, "a")).unwrap();
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 1);
        p.add_pr_placeholder(ph, "c".into(), repo(1, "b")).unwrap();
        assert!(!p.placeholder_cleaned(&ph, &[repo(0, "a")]));
        let e = p.find_pr(&ph).unwrap();
        assert_eq!(e.destinations, vec![repo(1, "b")]);
        assert_eq!(e.expires_at, clock.now() + MIN30);
        p.assert_consistent();
    }

    #[test]
    fn a_push_of_the_same_commit_after_a_destination_was_cleaned_keeps_a_record() {
        let (clock, mut p) = purgatory();
        let ph = EventId::from_byte_array([5; 32]);
        p.add_pr_placeholder(ph, "c".into(), repo(0, "a")).unwrap();
        p.add_pr_placeholder(ph, "c".into(), repo(1, "b")).unwrap();
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 1);
        assert!(p.is_cleanup_pending(&ph, "c"));
        assert!(!p.is_cleanup_pending(&ph, "d"), "another commit is another placeholder");
        // `a` is cleaned (under its lock), then the same commit is pushed to `a` again.
        assert!(!p.placeholder_cleaned(&ph, &[repo(0, "a")]));
        p.add_pr_placeholder(ph, "c".into(), repo(0, "a")).unwrap();
        assert!(!p.is_cleanup_pending(&ph, "c"), "re-armed by the push");
        // The cleanup pass sees the record re-armed: it neither forgets it nor shortens it.
        assert!(!p.retain_placeholder_for_retry(&ph, SEC));
        let e = p.find_pr(&ph).unwrap();
        assert!(e.destinations.contains(&repo(0, "a")), "the new ref in `a` has a record");
        assert_eq!(e.expires_at, clock.now() + MIN30);
        p.assert_consistent();
    }

    #[test]
    fn announcement_soft_expires_then_expires_after_24h() {
        let (clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ev, "repo").unwrap();
        clock.advance(MIN30);
        assert_eq!(
            p.sweep(),
            vec![SweepAction::SoftExpireAnnouncement {
                owner: ev.pubkey,
                identifier: "repo".into(),
                event_id: ev.id,
            }]
        );
        let e = p.get_announcement(&ev.pubkey, "repo").unwrap();
        assert!(e.soft_expired);
        assert_eq!(e.expires_at, clock.now() + H24);
        assert!(!p.is_expired(&ev.id));
        p.assert_consistent();
        clock.advance(H24 - SEC);
        assert!(p.sweep().is_empty());
        clock.advance(SEC);
        assert_eq!(
            p.sweep(),
            vec![SweepAction::ExpireAnnouncement {
                owner: ev.pubkey,
                identifier: "repo".into(),
                event_id: ev.id
            }]
        );
        assert!(p.get_announcement(&ev.pubkey, "repo").is_none());
        assert!(p.is_expired(&ev.id));
        p.assert_consistent();
    }

    #[test]
    fn revival_of_soft_expired_announcement_resets_timer() {
        let (clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ev, "repo").unwrap();
        clock.advance(MIN30);
        p.sweep();
        clock.advance(Duration::from_secs(3600));
        let ext = p
            .extend_announcement_expiry(&ev.pubkey, "repo", MIN30)
            .unwrap();
        assert!(ext.revived);
        let e = p.get_announcement(&ev.pubkey, "repo").unwrap();
        assert!(!e.soft_expired);
        assert_eq!(e.expires_at, clock.now() + MIN30);
        p.assert_consistent();
        // It soft-expires again 30 minutes later, not 24 h later.
        clock.advance(MIN30);
        assert!(matches!(
            p.sweep()[..],
            [SweepAction::SoftExpireAnnouncement { .. }]
        ));
        // A replacement of a soft-expired announcement revives it too.
        let added = add_ann(&mut p, &signed(0, ANNOUNCEMENT, 1), "repo").unwrap();
        assert!(added.replaced && added.revived);
        assert!(!p.get_announcement(&ev.pubkey, "repo").unwrap().soft_expired);
        p.assert_consistent();
    }

    #[test]
    fn each_extension_trigger_resets_the_timer() {
        let (clock, mut p) = purgatory();
        let ev = signed(0, ANNOUNCEMENT, 0);
        add_ann(&mut p, &ev, "repo").unwrap();
        // Three triggers 20 min apart: state event, authorised push, replacement.
        clock.advance(MIN20);
        p.extend_announcement_expiry(&ev.pubkey, "repo", MIN30);
        clock.advance(MIN20);
        assert!(p.sweep().is_empty());
        p.extend_announcement_expiry(&ev.pubkey, "repo", MIN30);
        clock.advance(MIN20);
        assert!(p.sweep().is_empty());
        add_ann(&mut p, &signed(0, ANNOUNCEMENT, 1), "repo").unwrap();
        clock.advance(MIN20);
        assert!(p.sweep().is_empty());
        clock.advance(Duration::from_secs(600));
        assert_eq!(p.sweep().len(), 1);
    }

    /// A purgatory whose running syncs defer expiry for two hours (longer than these tests).
    fn long_syncs() -> (Arc<super::super::ManualClock>, Purgatory) {
        purgatory_with(PurgatoryConfig { sync_defer_limit: 4 * MIN30, ..PurgatoryConfig::default() })
    }

    #[test]
    fn a_running_sync_defers_expiry_only_up_to_its_limit() {
        let (clock, mut p) = purgatory();
        let limit = p.config().sync_defer_limit;
        assert_eq!(limit, Duration::from_secs(600));
        let (s, later) = (signed(0, STATE, 0), signed(1, STATE, 0));
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        clock.advance(MIN30 - SEC);
        p.set_sync_running("repo", true);
        clock.advance(SEC);
        assert!(p.sweep().is_empty(), "deferred while the sync is young");
        assert!(p.due_states().is_empty());
        assert_eq!(p.stats().deferred, 1);
        p.add_state(later.clone(), later.pubkey, "repo".into()).unwrap();
        clock.advance(limit - 2 * SEC);
        assert!(p.sweep().is_empty());
        clock.advance(SEC);
        // The sync has run for its whole limit: what it deferred expires although it still runs.
        assert!(p.is_sync_running("repo"));
        let actions = p.sweep();
        assert_eq!(actions.len(), 1, "{actions:?}");
        assert!(matches!(&actions[0], SweepAction::ExpireState { event_id, .. } if *event_id == s.id));
        assert_eq!(p.stats().deferred, 0);
        p.assert_consistent();
        // Entries falling due later are not deferred by the same run either.
        clock.advance(MIN30);
        assert_eq!(p.due_states().len(), 1);
        assert_eq!(p.sweep().len(), 1);
        p.set_sync_running("repo", false);
        p.assert_consistent();
        // A new run defers again.
        let third = signed(2, STATE, 0);
        p.add_state(third.clone(), third.pubkey, "repo".into()).unwrap();
        clock.advance(MIN30 - SEC);
        p.set_sync_running("repo", true);
        clock.advance(SEC);
        assert!(p.sweep().is_empty());
        assert_eq!(p.stats().deferred, 1);
    }

    #[test]
    fn sweep_defers_while_sync_runs_and_expires_after() {
        let (clock, mut p) = long_syncs();
        let (ann, s, pr) = (
            signed(0, ANNOUNCEMENT, 0),
            signed(0, STATE, 0),
            signed(1, PR, 0),
        );
        let other = signed(1, STATE, 0);
        add_ann(&mut p, &ann, "repo").unwrap();
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        p.add_state(other.clone(), other.pubkey, "other".into())
            .unwrap();
        p.add_pr(pr.clone(), "c".into(), vec![repo(0, "repo")])
            .unwrap();
        p.set_sync_running("repo", true);
        assert!(p.is_sync_running("repo"));
        clock.advance(MIN30);
        let actions = p.sweep();
        assert_eq!(
            actions.len(),
            1,
            "only the other identifier expires: {actions:?}"
        );
        assert_eq!(p.stats().deferred, 3);
        p.assert_consistent();
        clock.advance(MIN30);
        assert!(p.sweep().is_empty(), "deferred entries are not re-examined");
        assert_eq!(p.stats().last_sweep_examined, 0);
        // Sync finished having released the state; the rest expire at the next sweep.
        p.remove_state_event("repo", &s.id).unwrap();
        p.set_sync_running("repo", false);
        p.assert_consistent();
        let actions = p.sweep();
        assert_eq!(actions.len(), 2, "{actions:?}");
        assert!(actions
            .iter()
            .any(|a| matches!(a, SweepAction::SoftExpireAnnouncement { .. })));
        assert!(actions
            .iter()
            .any(|a| matches!(a, SweepAction::ExpirePr { .. })));
        assert_eq!(p.stats().deferred, 0);
        p.assert_consistent();
    }

    #[test]
    fn extending_a_deferred_entry_moves_it_back_to_the_deadline_set() {
        let (clock, mut p) = long_syncs();
        let s = signed(0, STATE, 0);
        p.add_state(s.clone(), s.pubkey, "repo".into()).unwrap();
        p.set_sync_running("repo", true);
        clock.advance(MIN30);
        assert!(p.sweep().is_empty());
        assert_eq!(p.extend_expiry("repo", &[s.id], MIN30), 1);
        assert_eq!(p.stats().deferred, 0);
        p.assert_consistent();
        p.set_sync_running("repo", false);
        assert!(p.sweep().is_empty());
        clock.advance(MIN30);
        assert_eq!(p.sweep().len(), 1);
    }

    #[test]
    fn expiring_pr_that_replaced_a_placeholder_reports_its_refs() {
        let (clock, mut p) = purgatory();
        let pr = signed(0, PR, 0);
        p.add_pr_placeholder(pr.id, "c".into(), repo(1, "b"))
            .unwrap();
        p.add_pr(pr.clone(), "c".into(), vec![repo(0, "a")])
            .unwrap();
        clock.advance(MIN30);
        assert_eq!(
            p.sweep(),
            vec![SweepAction::ExpirePr {
                event_id: pr.id,
                commit: "c".into(),
                destinations: vec![repo(1, "b")]
            }]
        );
        p.assert_consistent();
    }

    #[test]
    fn placeholder_is_deferred_while_its_destination_syncs() {
        let (clock, mut p) = long_syncs();
        let ph = EventId::from_byte_array([5; 32]);
        p.add_pr_placeholder(ph, "c".into(), repo(0, "a")).unwrap();
        p.set_sync_running("a", true);
        clock.advance(MIN30);
        assert!(p.sweep().is_empty());
        p.set_sync_running("a", false);
        assert_eq!(p.sweep().len(), 1);
    }

    #[test]
    fn sweep_cost_is_independent_of_entry_count() {
        let clock = Arc::new(super::super::ManualClock::default());
        let config = PurgatoryConfig {
            caps: Caps {
                per_author: 100_000,
                total: 100_000,
                ..Caps::default()
            },
            ..PurgatoryConfig::default()
        };
        let mut p = Purgatory::new(config, clock.clone());
        let early = fake_event(0, STATE, 1, 0);
        p.add_state(early.clone(), early.pubkey, "repo".into())
            .unwrap();
        clock.advance(MIN20);
        for n in 1..20_000u32 {
            let e = fake_event(0, STATE, 1, n);
            p.add_state(e.clone(), e.pubkey, "repo".into()).unwrap();
        }
        clock.advance(Duration::from_secs(600));
        assert_eq!(p.sweep().len(), 1);
        assert_eq!(p.stats().last_sweep_examined, 1);
        assert!(p.sweep().is_empty());
        assert_eq!(p.stats().last_sweep_examined, 0);
    }
}
