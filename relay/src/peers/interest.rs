//! Builds the relay-sync interest index ([`InterestIndex`]) once, from the store and the
//! purgatory: every stored announcement (level full), every held one (level state-only), and
//! the root events of each served repository (the stored events tagging it, newest
//! [`MAX_ROOTS`], read per repository when it becomes served). From then on the index is kept
//! up to date from the feed of accepted events (see [`super::index`]).
//!
//! Stored announcements are read a page at a time ([`PAGE`], newest first), and each is kept only
//! as what the interest needs ([`compact`]): at most one page of whole events (each may be
//! `--max-repo-event-bytes`) is in memory at once. Every stored announcement is read: none is
//! left out of relay sync, however many newer ones there are.

use std::collections::{BTreeSet, HashSet};

use grasp_state::authority::maintainers::MAX_MAINTAINERS;
use grasp_state::nostr::nip34::{Announcement, KIND_ANNOUNCEMENT};
use nostr::prelude::{Event, EventId, Filter, Kind, SingleLetterTag, Timestamp};

use crate::sync::relay_url::RelayUrl;
use super::index::{InterestIndex, RepoKey};
use super::wanted::{MAX_RELAYS_PER_ANNOUNCEMENT, MAX_ROOTS};
use crate::grasp::Grasp;

/// Stored announcements read from the store at once.
pub const PAGE: usize = 500;

/// Relays kept per announcement (the first in [`RelayUrl`] order, as the plans take them): room
/// for [`MAX_RELAYS_PER_ANNOUNCEMENT`] after this server and unsafe ones are left out.
const RELAYS_KEPT: usize = 4 * MAX_RELAYS_PER_ANNOUNCEMENT;

/// Fills `index` from the store (every stored announcement, paged) and the purgatory (held
/// announcements); the roots are read afterwards ([`read_roots`]).
pub async fn load(grasp: &Grasp, index: &mut InterestIndex) {
    let (mut seen, mut until) = (HashSet::new(), None);
    // Every page but the last brings a new event or moves `until` back (`next_until`).
    for _ in 0..MAX_PAGES {
        let mut filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).limit(PAGE);
        if let Some(until) = until {
            filter = filter.until(until);
        }
        let page = grasp.query(vec![filter]).await;
        let stamps: Vec<(Timestamp, bool)> = page.iter().map(|ev| (ev.created_at, seen.insert(ev.id))).collect();
        for (ev, _) in page.iter().zip(&stamps).filter(|(_, (_, new))| *new) {
            if let Some(a) = compact(ev) {
                index.add_stored(a);
            }
        }
        drop(page);
        // A page of one second's events, none new: that second holds more than a page (the
        // store answers its newest page again and again). Its ids are listed (ids and times
        // only), the unseen ones read by id, a page at a time; then paging moves back a second.
        if stamps.len() == PAGE && !stamps.iter().any(|(_, new)| *new) {
            if let Some(second) = stamps.iter().map(|(at, _)| *at).min() {
                read_crowded_second(grasp, index, &mut seen, second).await;
            }
        }
        match next_until(&stamps) {
            Some(next) => until = Some(next),
            None => break,
        }
    }
    index.set_held(&grasp.purgatory.held_announcement_events(), compact);
}

/// Most announcements of one second [`read_crowded_second`] lists.
const MAX_PER_SECOND: usize = 1_000_000;

/// Every stored announcement of `second` not `seen` yet, into `index`.
async fn read_crowded_second(grasp: &Grasp, index: &mut InterestIndex, seen: &mut HashSet<EventId>, second: Timestamp) {
    let filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).since(second).until(second);
    let items = match grasp.relay.store().negentropy_items(filter, MAX_PER_SECOND).await {
        Ok(items) => items,
        Err(e) => {
            tracing::warn!(error = %e, "listing a crowded second of announcements for relay sync failed");
            return;
        }
    };
    let unseen: Vec<EventId> = items.into_iter().map(|(id, _)| id).filter(|id| !seen.contains(id)).collect();
    for chunk in unseen.chunks(PAGE) {
        for ev in grasp.query(vec![Filter::new().ids(chunk.iter().copied()).limit(chunk.len())]).await {
            if seen.insert(ev.id) {
                if let Some(a) = compact(&ev) {
                    index.add_stored(a);
                }
            }
        }
    }
}

/// The root events of a served repository: ids of stored events tagging it, newest
/// [`MAX_ROOTS`], oldest first.
pub async fn read_roots(grasp: &Grasp, key: &RepoKey) -> Vec<EventId> {
    let a_tag = SingleLetterTag::from_char('a').expect("a letter");
    let coordinate = format!("{KIND_ANNOUNCEMENT}:{}:{}", key.0.to_hex(), key.1);
    let filter = Filter::new().custom_tag(a_tag, coordinate);
    match grasp.relay.store().negentropy_items(filter, MAX_ROOTS).await {
        Ok(mut items) => {
            items.sort_by_key(|(id, at)| (*at, *id));
            items.into_iter().map(|(id, _)| id).collect()
        }
        Err(e) => {
            tracing::warn!(error = %e, "listing root events for relay sync failed");
            Vec::new()
        }
    }
}

/// Pages read at most: a bound on the loop (a billion announcements), never reached; each page
/// either brings new announcements or moves back a second.
const MAX_PAGES: usize = 2_000_000;

/// Where the next page of a newest-first listing starts, from this page's `(created_at, new)`
/// entries; `None` when this page was the last (shorter than [`PAGE`]). The next page starts at
/// this page's oldest second again (more events of that second may follow; the ones seen are
/// skipped), one second earlier when the page brought nothing new (a second holding more than a
/// page of events is then read by id first: [`read_crowded_second`]), so every page either brings
/// a new event or moves back.
fn next_until(stamps: &[(Timestamp, bool)]) -> Option<Timestamp> {
    if stamps.len() < PAGE {
        return None;
    }
    let oldest = stamps.iter().map(|(at, _)| *at).min()?;
    if stamps.iter().any(|(_, new)| *new) {
        return Some(oldest);
    }
    oldest.as_secs().checked_sub(1).map(Timestamp::from)
}

/// What the interest keeps of an announcement: owner, identifier, maintainers (at most
/// [`MAX_MAINTAINERS`], as many as a maintainer set can hold), its first [`RELAYS_KEPT`] relay
/// URLs, normalised; no clone URLs.
pub fn compact(ev: &Event) -> Option<Announcement> {
    let mut a = Announcement::from_event(ev).ok()?;
    a.clone_urls = Vec::new();
    a.claims.maintainers.truncate(MAX_MAINTAINERS);
    let relays: BTreeSet<RelayUrl> = a.relays.iter().filter_map(|r| RelayUrl::parse(r).ok()).collect();
    a.relays = relays.into_iter().take(RELAYS_KEPT).map(|r| r.as_str().to_string()).collect();
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More announcements of one second than a page: every one is read (a second is not read
    /// only a page deep).
    #[tokio::test]
    async fn a_second_holding_more_than_a_page_is_read_whole() {
        use grasp_state::purgatory::{clock::SystemClock, Purgatory, PurgatoryConfig};
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Tag};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("events")).await.unwrap();
        let relay = Arc::new(crate::store::relay::Relay::new(store));
        let purgatory = Purgatory::new(PurgatoryConfig::default(), Arc::new(SystemClock));
        let layout = grasp_state::names::identifier::RepoLayout::new(dir.path().join("git"));
        let grasp = Grasp::new(relay, purgatory, layout, dir.path().join("hooks"), "localhost".into(), Arc::new(crate::metrics::Metrics::new()));
        let at = Timestamp::from(1_700_000_000);
        let n = PAGE * 2 + 17;
        for i in 0..n {
            let tags = [Tag::parse(["d", &format!("r{i}")]).unwrap(), Tag::parse(["relays", "wss://relay.example"]).unwrap()];
            let ev = EventBuilder::new(Kind::Custom(KIND_ANNOUNCEMENT), "").tags(tags).custom_created_at(at).finalize(&Keys::generate()).unwrap();
            grasp.relay.publish(&ev).await.unwrap();
        }
        let mut index = InterestIndex::new(Box::new(|_: &RelayUrl| false), BTreeSet::new(), None);
        load(&grasp, &mut index).await;
        assert_eq!(index.len(), n, "every announcement of the crowded second is followed");
    }

    fn page(stamps: &[(u64, bool)]) -> Vec<(Timestamp, bool)> {
        stamps.iter().map(|(at, new)| (Timestamp::from(*at), *new)).collect()
    }

    #[test]
    fn a_short_page_is_the_last() {
        assert_eq!(next_until(&page(&[(5, true); PAGE - 1])), None);
        assert_eq!(next_until(&[]), None);
    }

    #[test]
    fn the_next_page_starts_at_the_oldest_second_again_or_before_it_when_nothing_was_new() {
        let mut full = page(&[(10, true); PAGE]);
        full[PAGE - 1].0 = Timestamp::from(7);
        assert_eq!(next_until(&full), Some(Timestamp::from(7)));
        let seen = page(&[(7, false); PAGE]);
        assert_eq!(next_until(&seen), Some(Timestamp::from(6)));
        assert_eq!(next_until(&page(&[(0, false); PAGE])), None, "nothing before the epoch");
    }

    #[test]
    fn paging_a_listing_reads_every_event_or_moves_back_and_ends() {
        // A newest-first listing with runs of equal seconds, one longer than a page.
        let mut listing: Vec<(u64, usize)> = Vec::new();
        for (at, n) in [(100, 3), (90, PAGE + 7), (80, 2 * PAGE / 3), (70, 1), (60, PAGE)] {
            let first = listing.len();
            listing.extend((first..first + n).map(|id| (at, id)));
        }
        let (mut seen, mut until, mut pages) = (HashSet::new(), None::<Timestamp>, 0);
        loop {
            pages += 1;
            assert!(pages <= MAX_PAGES, "paging does not end");
            let this: Vec<(u64, usize)> =
                listing.iter().filter(|(at, _)| until.is_none_or(|u| *at <= u.as_secs())).take(PAGE).copied().collect();
            let stamps: Vec<(Timestamp, bool)> = this.iter().map(|(at, id)| (Timestamp::from(*at), seen.insert(*id))).collect();
            match next_until(&stamps) {
                Some(next) => until = Some(next),
                None => break,
            }
        }
        // Only the second read a page deep (second 90 holds more than a page) loses events.
        let lost: Vec<u64> = listing.iter().filter(|(_, id)| !seen.contains(id)).map(|(at, _)| *at).collect();
        assert!(lost.iter().all(|at| *at == 90), "{lost:?}");
        assert!(lost.len() <= 7 + 3, "{lost:?}");
    }

    #[test]
    fn an_announcement_is_kept_without_its_clone_urls_and_with_its_first_relays() {
        use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Tag};
        let keys = Keys::generate();
        let relays: Vec<String> = (0..100).map(|i| format!("wss://r{i:03}.example.com")).collect();
        let ev = EventBuilder::new(Kind::Custom(KIND_ANNOUNCEMENT), "")
            .tag(Tag::identifier("r"))
            .tag(Tag::parse(["clone", "https://example.com/r.git"]).unwrap())
            .tag(Tag::parse(std::iter::once("relays".to_string()).chain(relays.iter().cloned())).unwrap())
            .finalize(&keys)
            .unwrap();
        let a = compact(&ev).unwrap();
        assert!(a.clone_urls.is_empty());
        assert_eq!(a.relays.len(), RELAYS_KEPT);
        assert_eq!(a.relays[0], RelayUrl::parse(&relays[0]).unwrap().as_str());
        assert_eq!((a.owner, a.identifier.as_str()), (keys.public_key(), "r"));
    }
}
