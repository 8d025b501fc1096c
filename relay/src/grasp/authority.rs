//! Maintainer authority, computed once per version of an identifier's announcements
//! (docs/protocol.md#maintainer-authority).
//!
//! Every push, state event and release asks who the confirmed maintainers of a repository are,
//! and which repositories an author's states govern. The answers depend only on the identifier's
//! merged announcements (`grasp_state::authority::announcements::merge`), which change far less often than
//! pushes come. So they are kept here, keyed by a fingerprint of those announcements (their ids
//! and where they live): a push, its state event and its release compute each set once, and a
//! hostile web of thousands of announcements of someone's identifier costs that someone's pushes
//! one computation per change of the web, not one per question.
//!
//! The announcements themselves are parsed once per event id ([`ParsedAnnouncements`]). Both
//! caches are bounded by weight (keys held), and emptied whole when full: the next question
//! computes again.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use grasp_state::authority::announcements::TrustIndex;
use grasp_state::authority::maintainers::{MaintainerSet, Standing};
use grasp_state::nostr::nip34::{Announcement, Source};
use nostr::prelude::{Event, EventId, PublicKey};

/// Most keys (listed maintainers, invitees, standings) the answers keep together.
const MAX_ANSWER_WEIGHT: usize = 2_000_000;
/// Most listed keys the parsed announcements keep together.
const MAX_PARSED_WEIGHT: usize = 4_000_000;

/// Where an author stands with each repository whose announcements reach it.
pub type Standings = Arc<Vec<(PublicKey, Source, Standing)>>;

/// The answers of one version of one identifier's announcements.
#[derive(Default)]
struct Answers {
    sets: HashMap<(u64, PublicKey), Arc<MaintainerSet>>,
    standings: HashMap<(u64, PublicKey), Standings>,
    weight: usize,
}

/// Maintainer sets and standings, kept per version of the announcements they were computed from.
#[derive(Default)]
pub struct AuthorityMemo {
    answers: Mutex<Answers>,
}

/// A fingerprint of merged announcements: their event ids and where each lives.
pub fn fingerprint(all: &[(Announcement, Source)]) -> u64 {
    let mut h = DefaultHasher::new();
    for (a, source) in all {
        a.event_id.hash(&mut h);
        (*source == Source::Stored).hash(&mut h);
    }
    all.len().hash(&mut h);
    h.finish()
}

impl AuthorityMemo {
    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn remember(answers: &mut Answers, weight: usize) {
        if answers.weight + weight > MAX_ANSWER_WEIGHT {
            *answers = Answers::default();
        }
        answers.weight += weight;
    }

    /// The confirmed maintainers of `owner`'s repository, given the identifier's merged
    /// announcements `all`.
    pub fn maintainer_set(&self, owner: PublicKey, all: &[(Announcement, Source)]) -> Arc<MaintainerSet> {
        let key = (fingerprint(all), owner);
        if let Some(hit) = self.lock().sets.get(&key) {
            return hit.clone();
        }
        let set = Arc::new(grasp_state::authority::announcements::maintainer_set(owner, all));
        let mut answers = self.lock();
        Self::remember(&mut answers, 1 + set.len() + set.invited().count());
        answers.sets.insert(key, set.clone());
        set
    }

    /// Where `author` stands with the repositories whose announcements reach it
    /// ([`TrustIndex::standings`]).
    pub fn standings(&self, author: PublicKey, all: &[(Announcement, Source)]) -> Standings {
        let key = (fingerprint(all), author);
        if let Some(hit) = self.lock().standings.get(&key) {
            return hit.clone();
        }
        let standings = Arc::new(TrustIndex::new(all).standings(&author));
        let mut answers = self.lock();
        Self::remember(&mut answers, 1 + standings.len());
        answers.standings.insert(key, standings.clone());
        standings
    }

    /// The owners whose confirmed maintainers include `author`, in owner order.
    pub fn owners_trusting(&self, author: PublicKey, all: &[(Announcement, Source)]) -> Vec<(PublicKey, Source)> {
        self.standings(author, all)
            .iter()
            .filter(|(_, _, standing)| *standing == Standing::Maintainer)
            .map(|(owner, source, _)| (*owner, *source))
            .collect()
    }
}

/// Merged announcements of one identifier.
type Merged = Arc<Vec<(Announcement, Source)>>;

/// Each identifier's merged list with the fingerprint of the events it was merged from, and the
/// weight of all of them.
type MergedByIdentifier = (HashMap<String, (u64, Merged)>, usize);

/// Announcements parsed once per event id, and each identifier's merged list kept while its
/// events stay the same (a push, its state and its release read it several times).
#[derive(Default)]
pub struct ParsedAnnouncements {
    parsed: Mutex<(HashMap<EventId, Arc<Announcement>>, usize)>,
    merged: Mutex<MergedByIdentifier>,
}

impl ParsedAnnouncements {
    /// The merged announcements of `identifier` (`grasp_state::authority::announcements::merge`) from its
    /// stored and held events.
    pub fn merged(&self, identifier: &str, stored: &[Event], held: &[Arc<Event>]) -> Merged {
        let mut h = DefaultHasher::new();
        for ev in stored {
            ev.id.hash(&mut h);
        }
        1u8.hash(&mut h);
        for ev in held {
            ev.id.hash(&mut h);
        }
        let key = h.finish();
        let lock = || self.merged.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((at, hit)) = lock().0.get(identifier) {
            if *at == key {
                return hit.clone();
            }
        }
        let merged = Arc::new(grasp_state::authority::announcements::merge(
            identifier,
            stored.iter().filter_map(|ev| self.parse(ev)),
            held.iter().filter_map(|ev| self.parse(ev)),
        ));
        let weight = 8 + merged.iter().map(|(a, _)| 8 + a.claims.maintainers.len()).sum::<usize>();
        let mut cache = lock();
        if cache.1 + weight > MAX_PARSED_WEIGHT {
            *cache = Default::default();
        }
        cache.1 += weight;
        cache.0.insert(identifier.to_string(), (key, merged.clone()));
        merged
    }

    /// `event` read as an announcement (`None`: it is not one).
    pub fn parse(&self, event: &Event) -> Option<Announcement> {
        let parsed = self.parsed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(hit) = parsed.0.get(&event.id) {
            return Some((**hit).clone());
        }
        drop(parsed);
        let a = Announcement::from_event(event).ok()?;
        let weight = 8 + a.claims.maintainers.len();
        let mut parsed = self.parsed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if parsed.1 + weight > MAX_PARSED_WEIGHT {
            *parsed = Default::default();
        }
        parsed.1 += weight;
        parsed.0.insert(event.id, Arc::new(a.clone()));
        Some(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;

    fn announcement(keys: &Keys, listed: &[PublicKey]) -> Event {
        let mut tags = vec![Tag::identifier("r")];
        if !listed.is_empty() {
            tags.push(Tag::parse(std::iter::once("maintainers".to_string()).chain(listed.iter().map(|pk| pk.to_hex()))).unwrap());
        }
        EventBuilder::new(Kind::Custom(30617), "").tags(tags).finalize(keys).unwrap()
    }

    #[test]
    fn answers_follow_the_announcements_they_were_computed_from() {
        let (owner, co) = (Keys::generate(), Keys::generate());
        let parsed = ParsedAnnouncements::default();
        let memo = AuthorityMemo::default();
        let merge = |events: &[&Event]| grasp_state::authority::announcements::merge("r", events.iter().filter_map(|e| parsed.parse(e)), []);
        let invite = announcement(&owner, &[co.public_key()]);
        let before = merge(&[&invite]);
        let set = memo.maintainer_set(owner.public_key(), &before);
        assert!(!set.contains(&co.public_key()));
        assert!(Arc::ptr_eq(&set, &memo.maintainer_set(owner.public_key(), &before)), "asked again: the same answer");
        // The invitee accepts: a new version of the announcements, a new answer.
        let accept = announcement(&co, &[owner.public_key()]);
        let after = merge(&[&invite, &accept]);
        assert_ne!(fingerprint(&before), fingerprint(&after));
        assert!(memo.maintainer_set(owner.public_key(), &after).contains(&co.public_key()));
        assert_eq!(memo.owners_trusting(co.public_key(), &after).len(), 2);
        assert!(memo.owners_trusting(co.public_key(), &before).is_empty());
        // Where an announcement lives is part of its version.
        let held = grasp_state::authority::announcements::merge("r", [], [parsed.parse(&invite).unwrap()]);
        assert_ne!(fingerprint(&before), fingerprint(&held));
    }

    #[test]
    fn merged_lists_are_kept_while_their_events_stay_the_same() {
        let (owner, co) = (Keys::generate(), Keys::generate());
        let cache = ParsedAnnouncements::default();
        let (invite, accept) = (announcement(&owner, &[co.public_key()]), Arc::new(announcement(&co, &[owner.public_key()])));
        let first = cache.merged("r", std::slice::from_ref(&invite), &[]);
        assert!(Arc::ptr_eq(&first, &cache.merged("r", std::slice::from_ref(&invite), &[])));
        let second = cache.merged("r", std::slice::from_ref(&invite), std::slice::from_ref(&accept));
        assert_eq!(second.len(), 2);
        assert_eq!(second.iter().find(|(a, _)| a.owner == co.public_key()).map(|(_, s)| *s), Some(Source::Purgatory));
        // The same events stored instead of held: another list.
        let stored = cache.merged("r", &[invite.clone(), (*accept).clone()], &[]);
        assert!(stored.iter().all(|(_, s)| *s == Source::Stored));
        assert_eq!(first.len(), 1, "an earlier answer is never changed");
    }

    #[test]
    fn the_memo_is_bounded() {
        let memo = AuthorityMemo::default();
        let owner = Keys::generate();
        let all = grasp_state::authority::announcements::merge("r", [Announcement::from_event(&announcement(&owner, &[])).unwrap()], []);
        for _ in 0..1000 {
            memo.maintainer_set(Keys::generate().public_key(), &all);
        }
        assert!(memo.lock().weight <= MAX_ANSWER_WEIGHT);
        let mut answers = memo.lock();
        answers.weight = MAX_ANSWER_WEIGHT;
        drop(answers);
        memo.maintainer_set(owner.public_key(), &all);
        assert_eq!(memo.lock().sets.len(), 1, "full: emptied, then the new answer kept");
    }
}
