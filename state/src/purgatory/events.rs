//! State events, PR events and git-first placeholders waiting for their other half.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use nostr::prelude::{Event, EventId, PublicKey};

use super::caps::PlaceholderError;
use super::entries::{EntryKey, PrEntry, RepoId, StateEntry};
use super::{Purgatory, PurgatoryFull};

impl Purgatory {
    /// Holds a state event until pushed git data satisfies it. Several state events per
    /// identifier (and per author) may wait: they are matched at push time (late binding).
    /// Returns `Ok(false)` if this event is already held (nothing changes).
    pub fn add_state(
        &mut self,
        event: impl Into<Arc<Event>>,
        author: PublicKey,
        identifier: String,
    ) -> Result<bool, PurgatoryFull> {
        self.add_state_from(event, author, identifier, None)
    }

    /// [`Self::add_state`] of an event sent from `origin` (the client address as counted,
    /// [`crate::names::client_key::limit_key`]), which counts against that address's share.
    pub fn add_state_from(
        &mut self,
        event: impl Into<Arc<Event>>,
        author: PublicKey,
        identifier: String,
        origin: Option<IpAddr>,
    ) -> Result<bool, PurgatoryFull> {
        let event = event.into();
        if self.by_id.contains_key(&event.id) {
            return Ok(false);
        }
        self.counts.check_entry(&self.config.caps, &author, origin)?;
        let now = self.clock.now();
        self.attach_state(StateEntry {
            event,
            author,
            identifier,
            created_at: now,
            expires_at: now + self.config.entry_ttl,
            origin,
        });
        Ok(true)
    }

    /// The state events waiting for `identifier`, oldest added first.
    pub fn states_for(&self, identifier: &str) -> &[StateEntry] {
        self.states
            .get(identifier)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The pull requests (events, not placeholders) waiting for data in `repo`.
    /// A scan of the held pull requests, which the caps keep small.
    pub fn prs_for(&self, repo: &RepoId) -> Vec<&PrEntry> {
        self.prs
            .values()
            .filter(|p| p.event.is_some() && p.repos.contains(repo))
            .collect()
    }

    /// The GRASP-06 contributor repositories of `identifier` that held pull request events (not
    /// placeholders) wait for data in. A scan of the held pull requests, like [`Self::prs_for`].
    pub fn contributor_repos_for(&self, identifier: &str) -> std::collections::BTreeSet<RepoId> {
        self.prs
            .values()
            .filter(|p| p.event.is_some())
            .flat_map(|p| p.repos.iter())
            .filter(|r| r.space == crate::names::identifier::RepoSpace::Prs && r.identifier == identifier)
            .cloned()
            .collect()
    }

    /// Every identifier something waits for: held announcements, states and pull requests.
    pub fn waiting_identifiers(&self) -> std::collections::BTreeSet<String> {
        let mut ids: std::collections::BTreeSet<String> =
            self.announcements.keys().cloned().collect();
        ids.extend(
            self.states
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, _)| k.clone()),
        );
        for p in self.prs.values() {
            ids.extend(
                p.repos
                    .iter()
                    .chain(&p.destinations)
                    .map(|r| r.identifier.clone()),
            );
        }
        ids
    }

    /// Releases (or drops) one state event.
    pub fn remove_state_event(
        &mut self,
        identifier: &str,
        event_id: &EventId,
    ) -> Option<StateEntry> {
        self.detach_state(identifier, event_id)
    }

    /// Drops every state event waiting for `identifier`.
    pub fn remove_states(&mut self, identifier: &str) -> Vec<StateEntry> {
        let ids: Vec<EventId> = self
            .states_for(identifier)
            .iter()
            .map(|s| s.event.id)
            .collect();
        ids.iter()
            .filter_map(|id| self.detach_state(identifier, id))
            .collect()
    }

    /// Holds a PR or PR update until `commit` is pushed to `refs/nostr/<event id>`. `repos` are
    /// the repositories of its `a` tags. Returns `Ok(false)` if the event is already held.
    ///
    /// Callers check for a placeholder first (the git-first case releases the event at once);
    /// if one is held anyway, the entry takes the event and keeps the placeholder's
    /// destinations, so their refs are still cleaned up if the PR expires.
    pub fn add_pr(
        &mut self,
        event: impl Into<Arc<Event>>,
        commit: String,
        repos: Vec<RepoId>,
    ) -> Result<bool, PurgatoryFull> {
        self.add_pr_from(event, commit, repos, None)
    }

    /// [`Self::add_pr`] of an event sent from `origin` (the client address as counted), which
    /// counts against that address's share (a placeholder it takes over leaves its pusher's).
    pub fn add_pr_from(
        &mut self,
        event: impl Into<Arc<Event>>,
        commit: String,
        repos: Vec<RepoId>,
        origin: Option<IpAddr>,
    ) -> Result<bool, PurgatoryFull> {
        let event = event.into();
        let id = event.id;
        if self.prs.get(&id).is_some_and(|p| p.event.is_some()) {
            return Ok(false);
        }
        let placeholder = self.detach_pr(&id);
        if let Err(full) = self.counts.check_entry(&self.config.caps, &event.pubkey, origin) {
            if let Some(p) = placeholder {
                self.attach_pr(id, p);
            }
            return Err(full);
        }
        let now = self.clock.now();
        let (created_at, destinations) = match placeholder {
            Some(p) => (p.created_at, p.destinations),
            None => (now, Vec::new()),
        };
        self.attach_pr(
            id,
            PrEntry {
                event: Some(event),
                commit,
                repos,
                destinations,
                created_at,
                expires_at: now + self.config.entry_ttl,
                cleanup_pending: false,
                origin,
                // Its data is signed for now: it leaves the unsigned budget.
                unsigned_bytes: 0,
                unsigned_others: Vec::new(),
            },
        );
        Ok(true)
    }

    /// Records a git-first push of `commit` to `refs/nostr/<event_id>` in `destination`, waiting
    /// for the PR event. Pushing the same commit to more repositories adds destinations and
    /// restarts the timer; a different commit for the same id is refused.
    pub fn add_pr_placeholder(
        &mut self,
        event_id: EventId,
        commit: String,
        destination: RepoId,
    ) -> Result<(), PlaceholderError> {
        self.add_pr_placeholder_from(event_id, commit, destination, None)
    }

    /// [`Self::add_pr_placeholder`] for a push from `origin` (the client address as counted): a
    /// new placeholder counts against that address's share; a destination added to an existing
    /// one stays with the placeholder's first pusher.
    pub fn add_pr_placeholder_from(
        &mut self,
        event_id: EventId,
        commit: String,
        destination: RepoId,
        origin: Option<IpAddr>,
    ) -> Result<(), PlaceholderError> {
        let now = self.clock.now();
        let ttl = self.config.entry_ttl;
        let Some(existing) = self.prs.get(&event_id) else {
            self.counts
                .check_placeholder(&self.config.caps, &destination, true, origin)?;
            self.attach_pr(
                event_id,
                PrEntry {
                    event: None,
                    commit,
                    repos: Vec::new(),
                    destinations: vec![destination],
                    created_at: now,
                    expires_at: now + ttl,
                    cleanup_pending: false,
                    origin,
                    unsigned_bytes: 0,
                    unsigned_others: Vec::new(),
                },
            );
            return Ok(());
        };
        if existing.commit != commit {
            return Err(PlaceholderError::CommitMismatch {
                existing: existing.commit.clone(),
            });
        }
        let known = existing.destinations.contains(&destination);
        if !known {
            self.counts
                .check_placeholder(&self.config.caps, &destination, false, origin)?;
        }
        // Detach and re-attach: keeps counts and deadlines in step in one place.
        let mut entry = self.detach_pr(&event_id).expect("entry checked above");
        if !known {
            entry.destinations.push(destination);
        }
        entry.expires_at = entry.expires_at.max(now + ttl);
        entry.cleanup_pending = false;
        self.attach_pr(event_id, entry);
        Ok(())
    }

    pub fn find_pr(&self, event_id: &EventId) -> Option<&PrEntry> {
        self.prs.get(event_id)
    }

    /// Ids of the held pull request events signed by `author` that no git-first push wrote a
    /// `refs/nostr/` ref for (those keep their entry until expiry cleans the ref up).
    pub fn pr_events_by(&self, author: &PublicKey) -> Vec<EventId> {
        self.prs
            .iter()
            .filter(|(_, e)| e.destinations.is_empty() && e.event.as_ref().is_some_and(|ev| ev.pubkey == *author))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Releases a PR event or drops a placeholder (its event arrived, or its refs were cleaned).
    pub fn remove_pr(&mut self, event_id: &EventId) -> Option<PrEntry> {
        self.detach_pr(event_id)
    }

    /// After an expired placeholder's refs were compare-and-deleted in `cleaned` repositories:
    /// forgets those destinations, and the placeholder once none remain. Returns whether the
    /// entry is gone. (A push to another repository during cleanup keeps the entry alive.)
    pub fn placeholder_cleaned(&mut self, event_id: &EventId, cleaned: &[RepoId]) -> bool {
        let Some(mut entry) = self.detach_pr(event_id) else {
            return true;
        };
        entry.destinations.retain(|d| !cleaned.contains(d));
        if entry.event.is_none() && entry.destinations.is_empty() {
            return true;
        }
        self.attach_pr(*event_id, entry);
        false
    }

    /// Whether `event_id` is still a git-first placeholder for `commit` whose ref cleanup is
    /// pending: no pull request event took it over and no push of the same commit re-armed it
    /// since it expired. The expiry re-checks this under each repository's lock before it
    /// deletes a ref (docs/protocol.md#placeholders).
    pub fn is_cleanup_pending(&self, event_id: &EventId, commit: &str) -> bool {
        self.prs
            .get(event_id)
            .is_some_and(|p| p.event.is_none() && p.cleanup_pending && p.commit == commit)
    }

    /// A placeholder's ref deletion failed: keep the record and try again in `retry_in`
    /// (see [`PurgatoryConfig::placeholder_retry`](super::PurgatoryConfig)). Returns false if
    /// no placeholder is pending cleanup under that id (an event or a new push took it over:
    /// its own timer stands).
    pub fn retain_placeholder_for_retry(&mut self, event_id: &EventId, retry_in: Duration) -> bool {
        let now = self.clock.now();
        if !self.prs.get(event_id).is_some_and(|p| p.event.is_none() && p.cleanup_pending) {
            return false;
        }
        let Some(mut entry) = self.detach_pr(event_id) else {
            return false;
        };
        entry.cleanup_pending = false;
        entry.expires_at = now + retry_in;
        self.attach_pr(*event_id, entry);
        true
    }

    /// Gives the listed state events of `identifier` and PR entries `duration` more (never
    /// less than they have), e.g. while a push that will release them runs. Returns how many
    /// entries were extended.
    pub fn extend_expiry(
        &mut self,
        identifier: &str,
        event_ids: &[EventId],
        duration: Duration,
    ) -> usize {
        let until = self.clock.now() + duration;
        let mut extended = 0;
        for id in event_ids {
            if let Some(s) = self
                .states
                .get_mut(identifier)
                .and_then(|v| v.iter_mut().find(|s| s.event.id == *id))
            {
                let old = s.expires_at;
                s.expires_at = old.max(until);
                let new = s.expires_at;
                let key = EntryKey::State {
                    identifier: identifier.to_owned(),
                    event_id: *id,
                };
                self.rearm(key, old, new, &[identifier.to_owned()]);
                tracing::info!(identifier, event = %id, time_left_secs = duration.as_secs(), "purgatory: state event expiry extended");
                extended += 1;
            } else if let Some(p) = self.prs.get_mut(id).filter(|p| !p.cleanup_pending) {
                let old = p.expires_at;
                p.expires_at = old.max(until);
                let new = p.expires_at;
                let identifiers: Vec<String> = p.identifiers().map(str::to_owned).collect();
                self.rearm(EntryKey::Pr { event_id: *id }, old, new, &identifiers);
                tracing::info!(event = %id, time_left_secs = duration.as_secs(), "purgatory: pull request expiry extended");
                extended += 1;
            }
        }
        extended
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn states_wait_side_by_side_and_duplicates_are_noops() {
        let (_clock, mut p) = purgatory();
        let (a, b) = (signed(0, STATE, 0), signed(1, STATE, 0));
        assert!(p.add_state(a.clone(), a.pubkey, "repo".into()).unwrap());
        assert!(p.add_state(b.clone(), b.pubkey, "repo".into()).unwrap());
        assert!(!p.add_state(a.clone(), a.pubkey, "repo".into()).unwrap());
        let ids: Vec<EventId> = p.states_for("repo").iter().map(|s| s.event.id).collect();
        assert_eq!(ids, vec![a.id, b.id]);
        assert!(p.states_for("other").is_empty());
        p.assert_consistent();
        assert_eq!(p.remove_state_event("repo", &a.id).unwrap().event.id, a.id);
        assert!(p.remove_state_event("repo", &a.id).is_none());
        assert_eq!(p.remove_states("repo").len(), 1);
        assert_eq!(p.stats(), Default::default());
        p.assert_consistent();
    }

    #[test]
    fn pr_event_then_release() {
        let (_clock, mut p) = purgatory();
        let pr = signed(0, PR, 0);
        assert!(p
            .add_pr(pr.clone(), "c0ffee".into(), vec![repo(0, "repo")])
            .unwrap());
        assert!(!p.add_pr(pr.clone(), "c0ffee".into(), vec![]).unwrap());
        let entry = p.find_pr(&pr.id).unwrap();
        assert!(!entry.is_placeholder());
        assert_eq!(entry.commit, "c0ffee");
        p.assert_consistent();
        assert!(p.remove_pr(&pr.id).is_some());
        assert!(p.find_pr(&pr.id).is_none());
        p.assert_consistent();
    }

    #[test]
    fn placeholder_destinations_and_commit_mismatch() {
        let (clock, mut p) = purgatory();
        let id = EventId::from_byte_array([7; 32]);
        p.add_pr_placeholder(id, "aaa".into(), repo(0, "r1"))
            .unwrap();
        clock.advance(MIN20);
        p.add_pr_placeholder(id, "aaa".into(), repo(1, "r1"))
            .unwrap();
        p.add_pr_placeholder(id, "aaa".into(), repo(1, "r1"))
            .unwrap();
        let e = p.find_pr(&id).unwrap();
        assert!(e.is_placeholder());
        assert_eq!(e.destinations, vec![repo(0, "r1"), repo(1, "r1")]);
        assert_eq!(e.expires_at, clock.now() + MIN30);
        assert_eq!(
            p.add_pr_placeholder(id, "bbb".into(), repo(2, "r1")),
            Err(PlaceholderError::CommitMismatch {
                existing: "aaa".into()
            })
        );
        assert_eq!(p.stats().placeholders, 1);
        p.assert_consistent();
    }

    #[test]
    fn pr_event_over_placeholder_keeps_destinations() {
        let (_clock, mut p) = purgatory();
        let pr = signed(0, PR, 0);
        p.add_pr_placeholder(pr.id, "aaa".into(), repo(0, "repo"))
            .unwrap();
        assert!(p
            .add_pr(pr.clone(), "aaa".into(), vec![repo(0, "repo")])
            .unwrap());
        let e = p.find_pr(&pr.id).unwrap();
        assert!(!e.is_placeholder());
        assert_eq!(e.destinations, vec![repo(0, "repo")]);
        assert_eq!(p.stats().placeholders, 0);
        assert_eq!(p.stats().prs, 1);
        p.assert_consistent();
    }

    #[test]
    fn extend_expiry_touches_only_listed_entries() {
        let (clock, mut p) = purgatory();
        let (s1, s2, pr) = (signed(0, STATE, 0), signed(0, STATE, 1), signed(1, PR, 0));
        p.add_state(s1.clone(), s1.pubkey, "repo".into()).unwrap();
        p.add_state(s2.clone(), s2.pubkey, "repo".into()).unwrap();
        p.add_pr(pr.clone(), "c".into(), vec![repo(0, "repo")])
            .unwrap();
        let start = clock.now();
        clock.advance(MIN20);
        assert_eq!(p.extend_expiry("repo", &[s1.id, pr.id], MIN30), 2);
        assert_eq!(p.extend_expiry("other", &[s2.id], MIN30), 0);
        let exp = |p: &Purgatory, id| {
            p.states_for("repo")
                .iter()
                .find(|s| s.event.id == id)
                .unwrap()
                .expires_at
        };
        assert_eq!(exp(&p, s1.id), clock.now() + MIN30);
        assert_eq!(exp(&p, s2.id), start + MIN30);
        assert_eq!(p.find_pr(&pr.id).unwrap().expires_at, clock.now() + MIN30);
        // Never shortens.
        p.extend_expiry("repo", &[s1.id], Duration::from_secs(1));
        assert_eq!(exp(&p, s1.id), clock.now() + MIN30);
        p.assert_consistent();
    }

}
