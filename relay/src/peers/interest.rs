//! Gathers what this server wants from other relays ([`Interest`]) from the store and the
//! purgatory: every accepted announcement (stored: level full; held: level state-only), its
//! maintainer set, its relay list, and (at level full) the stored events tagging it (the roots
//! of layer c, newest first, at most [`MAX_ROOTS`] per repository).

use std::collections::{BTreeMap, BTreeSet};

use grasp_state::nip34::{Announcement, KIND_ANNOUNCEMENT};
use nostr::prelude::{Filter, Kind, SingleLetterTag};

use super::address::RelayUrl;
use super::wanted::{Interest, RepoInterest, SyncLevel, MAX_ROOTS};
use crate::grasp::{Grasp, Source};

/// Accepted announcements this server follows at most (the newest first).
pub const MAX_REPOSITORIES: usize = 10_000;

/// The current interest, with `bootstraps` added.
pub async fn gather(grasp: &Grasp, bootstraps: &BTreeSet<RelayUrl>) -> Interest {
    let stored = grasp.query(vec![Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).limit(MAX_REPOSITORIES)]).await;
    let mut by_identifier: BTreeMap<String, Vec<(Announcement, Source)>> = BTreeMap::new();
    for ev in &stored {
        if let Ok(a) = Announcement::from_event(ev) {
            by_identifier.entry(a.identifier.clone()).or_default().push((a, Source::Stored));
        }
    }
    for identifier in grasp.purgatory.waiting_identifiers() {
        for ev in grasp.purgatory.announcement_events(&identifier) {
            let Ok(a) = Announcement::from_event(&ev) else { continue };
            let all = by_identifier.entry(a.identifier.clone()).or_default();
            match all.iter_mut().find(|(x, _)| x.owner == a.owner) {
                Some(known) if known.0.recency() >= a.recency() => {}
                Some(known) => *known = (a, Source::Purgatory),
                None => all.push((a, Source::Purgatory)),
            }
        }
    }
    let a_tag = SingleLetterTag::from_char('a').expect("a letter");
    let mut repos = Vec::new();
    for all in by_identifier.values() {
        for (a, source) in all {
            let level = match source {
                Source::Stored => SyncLevel::Full,
                Source::Purgatory => SyncLevel::StateOnly,
            };
            let mut roots = Vec::new();
            if level == SyncLevel::Full {
                let coordinate = format!("{KIND_ANNOUNCEMENT}:{}:{}", a.owner.to_hex(), a.identifier);
                let filter = Filter::new().custom_tag(a_tag, coordinate);
                match grasp.relay.store().negentropy_items(filter, MAX_ROOTS).await {
                    Ok(mut items) => {
                        items.sort_by_key(|(id, at)| (*at, *id));
                        roots.extend(items.into_iter().map(|(id, _)| id));
                    }
                    Err(e) => tracing::warn!(error = %e, "listing root events for relay sync failed"),
                }
            }
            repos.push(RepoInterest {
                owner: a.owner,
                identifier: a.identifier.clone(),
                maintainers: Grasp::maintainer_set(a.owner, all).iter().copied().collect(),
                relays: a.relays.iter().filter_map(|r| RelayUrl::parse(r).ok()).collect(),
                level,
                roots,
            });
        }
    }
    Interest { repos, bootstraps: bootstraps.clone(), only: None }
}
