//! Synced events that arrived before what they tag (pure, bounded).
//!
//! An event the acceptance policy refused only because the event or repository it tags is not
//! here yet waits here, keyed by each missing parent (an event id, or a coordinate). When a
//! parent is accepted the children are handed back for another try. A child waiting longer than
//! the request delay makes its missing event ids be asked for by id from the connected relays;
//! one waiting past the TTL is dropped. Caps per relay and in total, in events and in bytes
//! (each event's JSON size), keep a relay sending junk from costing more than its own slots.
//!
//! An event a relay sent without being asked for it (it matches none of the filters of the
//! subscription it came on) never goes to the acceptance policy directly: it may only wait here
//! for an event id it tags ([`Waiting::park_unrequested`]), so it is admitted only once that
//! event arrives here by some other path (it is then part of what this server follows). Such a
//! child asks for at most [`MAX_UNREQUESTED_PARENT_IDS`] of the ids it tags (a requested one for
//! all, up to 64), and the ids due are handed out at most [`MAX_IDS_PER_FETCH`] at a time, so a
//! relay sending junk cannot make this server send a burst of requests to every relay.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_state::nostr::nip34::{references, KIND_STATE};
use nostr::prelude::{Event, EventId};

use crate::sync::relay_url::RelayUrl;

/// Parent ids a child that came unasked makes this server ask for by id.
pub const MAX_UNREQUESTED_PARENT_IDS: usize = 2;

/// Ids handed out for fetching at once ([`Waiting::due_requests`]): one REQ's worth.
pub const MAX_IDS_PER_FETCH: usize = 500;

/// A missing parent: an event id (hex) or a coordinate (`kind:pubkey:d`).
pub type ParentKey = String;

/// Bounds and timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingLimits {
    pub per_relay: usize,
    pub total: usize,
    /// Bytes (event JSON) waiting from one relay, and in total.
    pub bytes_per_relay: usize,
    pub bytes_total: usize,
    /// Ask connected relays for a missing parent id after this long.
    pub request_after: Duration,
    /// Give up on a child after this long.
    pub ttl: Duration,
}

impl Default for WaitingLimits {
    fn default() -> Self {
        WaitingLimits {
            per_relay: 1_000,
            total: 10_000,
            bytes_per_relay: 4 << 20,
            bytes_total: 32 << 20,
            request_after: Duration::from_secs(10), ttl: Duration::from_secs(30 * 60) }
    }
}

#[derive(Debug)]
struct Child {
    event: Arc<Event>,
    relay: RelayUrl,
    parents: Vec<ParentKey>,
    since: Instant,
    requested: bool,
    /// The relay sent it without being asked ([`Waiting::park_unrequested`]).
    unrequested: bool,
    /// Its JSON size.
    bytes: usize,
}

/// Why an event was not parked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotParked {
    /// It tags nothing: no parent could ever admit it.
    NoParents,
    /// The relay's or the total cap is reached.
    Full,
    AlreadyWaiting,
}

/// The waiting index.
#[derive(Debug, Default)]
pub struct Waiting {
    limits: WaitingLimits,
    children: HashMap<EventId, Child>,
    by_parent: HashMap<ParentKey, Vec<EventId>>,
    /// Children and bytes waiting per relay.
    per_relay: BTreeMap<RelayUrl, (usize, usize)>,
    bytes: usize,
}

/// The parents an event waits for: the ids and coordinates it tags; a state event (which tags
/// nothing) waits for any announcement of its identifier (`d:<identifier>`).
pub fn parents_of(event: &Event) -> Vec<ParentKey> {
    let refs = references(event);
    let mut keys: Vec<ParentKey> = refs.event_ids.iter().map(EventId::to_hex).collect();
    keys.extend(refs.coordinates.iter().map(|c| c.to_string()));
    if event.kind.as_u16() == KIND_STATE {
        if let Some(d) = event.tags.identifier() {
            keys.push(format!("d:{d}"));
        }
    }
    keys.truncate(64);
    keys
}

/// The parents an event sent unasked may wait for: the event ids it tags (coordinates are not
/// waited for: what they name may already be here, and an unasked event must not be admitted
/// by a later version of it).
fn unrequested_parents(event: &Event) -> Vec<ParentKey> {
    parents_of(event).into_iter().filter(|p| EventId::from_hex(p).is_ok()).collect()
}

impl Waiting {
    pub fn new(limits: WaitingLimits) -> Self {
        Waiting { limits, ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.children.len()
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Children waiting that came from `relay`.
    pub fn from_relay(&self, relay: &RelayUrl) -> usize {
        self.per_relay.get(relay).map_or(0, |(n, _)| *n)
    }

    /// Bytes waiting that came from `relay`.
    pub fn bytes_from_relay(&self, relay: &RelayUrl) -> usize {
        self.per_relay.get(relay).map_or(0, |(_, b)| *b)
    }

    /// Bytes waiting in total.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Parks `event` (from `relay`) until one of the things it tags is accepted.
    pub fn park(&mut self, event: Arc<Event>, relay: &RelayUrl, now: Instant) -> Result<(), NotParked> {
        let parents = parents_of(&event);
        self.park_for(event, parents, relay, now, false)
    }

    /// Parks `event`, which `relay` sent unasked, until an event id it tags is accepted here
    /// (coordinates are not waited for: what they name may already be here, and an unasked
    /// event must not be admitted by a later version of it).
    pub fn park_unrequested(&mut self, event: Arc<Event>, relay: &RelayUrl, now: Instant) -> Result<(), NotParked> {
        let parents = unrequested_parents(&event);
        self.park_for(event, parents, relay, now, true)
    }

    /// Would `event`, sent unasked by `relay`, be parked now (before the cost of verifying it)?
    pub fn would_park_unrequested(&self, event: &Event, relay: &RelayUrl) -> Result<(), NotParked> {
        if self.children.contains_key(&event.id) {
            return Err(NotParked::AlreadyWaiting);
        }
        if unrequested_parents(event).is_empty() {
            return Err(NotParked::NoParents);
        }
        self.room_for(event.as_json().len(), relay)
    }

    fn room_for(&self, bytes: usize, relay: &RelayUrl) -> Result<(), NotParked> {
        let (n, b) = self.per_relay.get(relay).copied().unwrap_or((0, 0));
        if self.children.len() >= self.limits.total
            || n >= self.limits.per_relay
            || self.bytes + bytes > self.limits.bytes_total
            || b + bytes > self.limits.bytes_per_relay
        {
            return Err(NotParked::Full);
        }
        Ok(())
    }

    fn park_for(&mut self, event: Arc<Event>, parents: Vec<ParentKey>, relay: &RelayUrl, now: Instant, unrequested: bool) -> Result<(), NotParked> {
        if self.children.contains_key(&event.id) {
            return Err(NotParked::AlreadyWaiting);
        }
        if parents.is_empty() {
            return Err(NotParked::NoParents);
        }
        let bytes = event.as_json().len();
        self.room_for(bytes, relay)?;
        for p in &parents {
            self.by_parent.entry(p.clone()).or_default().push(event.id);
        }
        let entry = self.per_relay.entry(relay.clone()).or_default();
        entry.0 += 1;
        entry.1 += bytes;
        self.bytes += bytes;
        self.children.insert(event.id, Child { event, relay: relay.clone(), parents, since: now, requested: false, unrequested, bytes });
        Ok(())
    }

    /// A parent was accepted: the children waiting for it, removed from the index, with the
    /// relay each came from.
    pub fn arrived(&mut self, parent: &str) -> Vec<(Arc<Event>, RelayUrl)> {
        let Some(ids) = self.by_parent.remove(parent) else { return Vec::new() };
        ids.into_iter().filter_map(|id| self.remove(&id)).map(|c| (c.event, c.relay)).collect()
    }

    fn remove(&mut self, id: &EventId) -> Option<Child> {
        let child = self.children.remove(id)?;
        for p in &child.parents {
            if let Some(ids) = self.by_parent.get_mut(p) {
                ids.retain(|x| x != id);
                if ids.is_empty() {
                    self.by_parent.remove(p);
                }
            }
        }
        self.bytes -= child.bytes;
        if let Some((n, b)) = self.per_relay.get_mut(&child.relay) {
            *n -= 1;
            *b -= child.bytes;
            if *n == 0 {
                self.per_relay.remove(&child.relay);
            }
        }
        Some(child)
    }

    /// Drops children older than the TTL; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let old: Vec<EventId> = self
            .children
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.since) >= self.limits.ttl)
            .map(|(id, _)| *id)
            .collect();
        for id in &old {
            self.remove(id);
        }
        old.len()
    }

    /// Missing parent ids to ask connected relays for, at most `most` (and at least one
    /// child's): those of children waiting at least `request_after` and not asked for yet (each
    /// child asks once; one sent unasked for at most [`MAX_UNREQUESTED_PARENT_IDS`]). Children
    /// left out are handed out by the next call.
    pub fn due_requests(&mut self, now: Instant, most: usize) -> Vec<EventId> {
        let mut ids = Vec::new();
        for child in self.children.values_mut() {
            if child.requested || now.saturating_duration_since(child.since) < self.limits.request_after {
                continue;
            }
            let take = if child.unrequested { MAX_UNREQUESTED_PARENT_IDS } else { usize::MAX };
            let parents: Vec<EventId> = child.parents.iter().filter_map(|p| EventId::from_hex(p).ok()).take(take).collect();
            if !ids.is_empty() && ids.len() + parents.len() > most {
                break;
            }
            child.requested = true;
            ids.extend(parents);
        }
        ids.sort();
        ids.dedup();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::relay_url::RelayUrl;
    use nostr::prelude::*;

    fn url(s: &str) -> RelayUrl {
        RelayUrl::parse(s).unwrap()
    }

    fn child_of(parent: &EventId) -> Arc<Event> {
        let keys = Keys::generate();
        Arc::new(EventBuilder::new(Kind::Custom(1111), "hi").tag(Tag::event(*parent)).finalize(&keys).unwrap())
    }

    fn limits() -> WaitingLimits {
        WaitingLimits {
            per_relay: 2,
            total: 3,
            bytes_per_relay: 1 << 20,
            bytes_total: 1 << 20,
            request_after: Duration::from_secs(10),
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn children_come_back_when_their_parent_arrives() {
        let (now, a) = (Instant::now(), url("wss://a"));
        let mut w = Waiting::new(limits());
        let parent = EventId::from_byte_array([1; 32]);
        let c = child_of(&parent);
        w.park(c.clone(), &a, now).unwrap();
        assert_eq!(w.park(c.clone(), &a, now), Err(NotParked::AlreadyWaiting));
        assert!(w.arrived("unrelated").is_empty());
        let back = w.arrived(&parent.to_hex());
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].0.id, c.id);
        assert!(w.is_empty() && w.from_relay(&a) == 0 && w.by_parent.is_empty());
    }

    #[test]
    fn caps_per_relay_and_total() {
        let (now, a, b) = (Instant::now(), url("wss://a"), url("wss://b"));
        let mut w = Waiting::new(limits());
        let p = EventId::from_byte_array([1; 32]);
        w.park(child_of(&p), &a, now).unwrap();
        w.park(child_of(&p), &a, now).unwrap();
        assert_eq!(w.park(child_of(&p), &a, now), Err(NotParked::Full), "relay cap");
        w.park(child_of(&p), &b, now).unwrap();
        assert_eq!(w.park(child_of(&p), &b, now), Err(NotParked::Full), "total cap");
        let lonely = Arc::new(EventBuilder::new(Kind::TextNote, "x").finalize(&Keys::generate()).unwrap());
        assert_eq!(Waiting::new(limits()).park(lonely, &a, now), Err(NotParked::NoParents));
    }

    #[test]
    fn parents_are_requested_once_after_the_delay_and_children_expire() {
        let (now, a) = (Instant::now(), url("wss://a"));
        let mut w = Waiting::new(limits());
        let p = EventId::from_byte_array([7; 32]);
        w.park(child_of(&p), &a, now).unwrap();
        assert!(w.due_requests(now + Duration::from_secs(5), MAX_IDS_PER_FETCH).is_empty());
        assert_eq!(w.due_requests(now + Duration::from_secs(10), MAX_IDS_PER_FETCH), vec![p]);
        assert!(w.due_requests(now + Duration::from_secs(20), MAX_IDS_PER_FETCH).is_empty());
        assert_eq!(w.expire(now + Duration::from_secs(59)), 0);
        assert_eq!(w.expire(now + Duration::from_secs(60)), 1);
        assert!(w.is_empty() && w.by_parent.is_empty());
    }

    #[test]
    fn caps_in_bytes_per_relay_and_total() {
        let (now, a, b) = (Instant::now(), url("wss://a"), url("wss://b"));
        let p = EventId::from_byte_array([1; 32]);
        let one = child_of(&p).as_json().len();
        let lim = WaitingLimits { per_relay: 100, total: 100, bytes_per_relay: 2 * one + 10, bytes_total: 3 * one + 20, ..limits() };
        let mut w = Waiting::new(lim);
        w.park(child_of(&p), &a, now).unwrap();
        w.park(child_of(&p), &a, now).unwrap();
        assert_eq!(w.park(child_of(&p), &a, now), Err(NotParked::Full), "relay bytes");
        w.park(child_of(&p), &b, now).unwrap();
        assert_eq!(w.park(child_of(&p), &b, now), Err(NotParked::Full), "total bytes");
        assert_eq!(w.bytes_from_relay(&a), 2 * one);
        assert_eq!(w.arrived(&p.to_hex()).len(), 3);
        assert_eq!((w.bytes(), w.bytes_from_relay(&a)), (0, 0));
    }

    /// A child tagging `n` parent ids.
    fn child_of_many(n: u8) -> Arc<Event> {
        let tags: Vec<Tag> = (0..n).map(|i| Tag::event(EventId::from_byte_array([i; 32]))).collect();
        Arc::new(EventBuilder::new(Kind::Custom(1111), "hi").tags(tags).finalize(&Keys::generate()).unwrap())
    }

    #[test]
    fn unasked_children_ask_for_few_parents_and_requests_come_in_bounded_batches() {
        let (now, a) = (Instant::now(), url("wss://a"));
        let lim = WaitingLimits { per_relay: 100, total: 100, ..limits() };
        let later = now + Duration::from_secs(10);
        // An unasked child tagging 64 ids asks for two of them; one that was asked for, all.
        let mut w = Waiting::new(lim);
        w.park_unrequested(child_of_many(64), &a, now).unwrap();
        assert_eq!(w.due_requests(later, MAX_IDS_PER_FETCH).len(), MAX_UNREQUESTED_PARENT_IDS);
        let mut w = Waiting::new(lim);
        w.park(child_of_many(64), &a, now).unwrap();
        assert_eq!(w.due_requests(later, MAX_IDS_PER_FETCH).len(), 64);
        // Ten children of 64 distinct-ish ids: at most `most` a call (whole children), the rest
        // by the next calls, each child once.
        let mut w = Waiting::new(lim);
        for n in 0..10u8 {
            let tags: Vec<Tag> = (0..64u8).map(|i| Tag::event(EventId::from_byte_array([n, i, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]))).collect();
            w.park(Arc::new(EventBuilder::new(Kind::Custom(1111), "x").tags(tags).finalize(&Keys::generate()).unwrap()), &a, now).unwrap();
        }
        let mut total = 0;
        for _ in 0..5 {
            let batch = w.due_requests(later, 200);
            assert!(batch.len() <= 200, "{}", batch.len());
            total += batch.len();
        }
        assert_eq!(total, 640);
        assert!(w.due_requests(later, 200).is_empty());
    }

    #[test]
    fn unrequested_events_wait_only_for_event_ids() {
        let (now, a) = (Instant::now(), url("wss://a"));
        let keys = Keys::generate();
        let mut w = Waiting::new(limits());
        let only_repo = Arc::new(
            EventBuilder::new(Kind::Custom(1621), "x").tag(Tag::parse(["a", "30617:00:r"]).unwrap()).finalize(&keys).unwrap(),
        );
        assert_eq!(w.park_unrequested(only_repo, &a, now), Err(NotParked::NoParents));
        let p = EventId::from_byte_array([3; 32]);
        let c = child_of(&p);
        w.park_unrequested(c.clone(), &a, now).unwrap();
        assert_eq!(w.arrived(&p.to_hex())[0].0.id, c.id);
    }
}
