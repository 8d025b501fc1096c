//! GRASP-03 "Sync+" decisions, pure (docs/protocol.md, "GRASP-03"): who takes part in a
//! repository's conversation, which relays their lists name, and which of those relays one pass
//! asks for the conversation, within bounds.
//!
//! - [`participants`]: the confirmed maintainers first, then the authors of the events of the
//!   conversation, most recent first, at most [`MAX_PARTICIPANTS`].
//! - [`write_relays`]: a NIP-65 relay list's (kind 10002) write relays: `r` tags without a
//!   marker or marked `write`, the first [`MAX_LIST_RELAYS`].
//! - [`grasp_servers`]: a user grasp list's (kind 10317) servers, the first
//!   [`MAX_LIST_RELAYS`].
//! - [`plan_pass`]: one pass: per repository a window of [`PassBounds::authors_per_repo`]
//!   participants (its first half always the first participants, the rest continuing where the
//!   last pass stopped), their relays (at most
//!   [`PassBounds::relays_per_repo`] per repository, never one the repository's announcement
//!   already lists), then across repositories at most [`PassBounds::max_relays`] relays, at most
//!   [`MAX_RELAYS_PER_AUTHORITY`] per `host:port`, rotating from where the last pass stopped when
//!   there are more.
//!
//! Everything here comes from events anyone can sign: every list is cut to a fixed length
//! before it is looked at, and nothing grows with what an event claims.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use nostr::prelude::{Event, PublicKey, Timestamp};

/// NIP-65 relay list.
pub const KIND_RELAY_LIST: u16 = 10002;

/// Participants kept per repository.
pub const MAX_PARTICIPANTS: usize = 256;

/// Relays read from one list (the first ones, in the list's order); NIP-65 asks for 2-4.
pub const MAX_LIST_RELAYS: usize = 8;

/// Tags of one list looked at (a list of thousands of URLs costs this many).
const MAX_TAGS_READ: usize = 256;

/// At most this many discovered URLs per `host:port` in one pass (as relay sync's ranking).
pub const MAX_RELAYS_PER_AUTHORITY: usize = 2;

/// The confirmed `maintainers` (in their order) then the authors of `authored` (author,
/// `created_at`) from the most recent, each once, at most `max`.
pub fn participants(maintainers: &[PublicKey], authored: impl IntoIterator<Item = (PublicKey, Timestamp)>, max: usize) -> Vec<PublicKey> {
    let mut latest: BTreeMap<PublicKey, Timestamp> = BTreeMap::new();
    for (author, at) in authored {
        let slot = latest.entry(author).or_insert(at);
        *slot = (*slot).max(at);
    }
    let mut authors: Vec<(PublicKey, Timestamp)> = latest.into_iter().collect();
    // Most recent first; equal seconds by key, so the order is a function of the input set.
    authors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut seen: HashSet<PublicKey> = HashSet::new();
    maintainers
        .iter()
        .copied()
        .chain(authors.into_iter().map(|(pk, _)| pk))
        .filter(|pk| seen.insert(*pk))
        .take(max)
        .collect()
}

/// The write relays of a kind 10002 event (raw values, unparsed), the first
/// [`MAX_LIST_RELAYS`] of its first tags; empty for any other kind.
pub fn write_relays(event: &Event) -> Vec<String> {
    if event.kind.as_u16() != KIND_RELAY_LIST {
        return Vec::new();
    }
    first_urls(event, "r", |marker| marker.is_none_or(|m| m.is_empty() || m == "write"))
}

/// The servers of a kind 10317 event (`g` tags, raw values), the first [`MAX_LIST_RELAYS`];
/// empty for any other kind.
pub fn grasp_servers(event: &Event) -> Vec<String> {
    if event.kind.as_u16() != crate::nostr::nip34::KIND_USER_GRASP_LIST {
        return Vec::new();
    }
    first_urls(event, "g", |_| true)
}

fn first_urls(event: &Event, name: &str, marker_ok: impl Fn(Option<&str>) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for tag in event.tags.iter().take(MAX_TAGS_READ) {
        let [tag_name, value, rest @ ..] = tag.as_slice() else { continue };
        if tag_name != name || value.is_empty() || !marker_ok(rest.first().map(String::as_str)) {
            continue;
        }
        if !out.contains(value) {
            out.push(value.clone());
        }
        if out.len() >= MAX_LIST_RELAYS {
            break;
        }
    }
    out
}

/// The bounds of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassBounds {
    /// Participants of one repository whose relays one pass looks at.
    pub authors_per_repo: usize,
    /// Discovered relays asked about one repository in one pass.
    pub relays_per_repo: usize,
    /// Discovered relays connected to at once, over every repository.
    pub max_relays: usize,
}

impl Default for PassBounds {
    fn default() -> Self {
        PassBounds { authors_per_repo: 32, relays_per_repo: 24, max_relays: 32 }
    }
}

/// One served repository as a pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassRepo<U> {
    /// A stable key (its coordinate).
    pub key: String,
    pub participants: Vec<PublicKey>,
    /// Relays followed for it anyway (its announcement's): not counted as discovered.
    pub followed: BTreeSet<U>,
}

/// Where the last pass stopped: per repository the next participant of its window, and the last
/// relay taken when the relays did not all fit. Persisted, so a restart continues too.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PassPosition {
    pub authors: BTreeMap<String, usize>,
    pub last_relay: Option<String>,
}

/// What one pass asks: each discovered relay with the repositories (keys) asked of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassPlan<U> {
    pub relays: BTreeMap<U, BTreeSet<String>>,
    /// Distinct relays the windows named (before the global cap).
    pub candidates: usize,
}

/// Plans one pass over `repos` (see the module doc): `relays_of` gives a participant's relays
/// (its lists', parsed and safe); `authority` a relay's `host:port`. Moves `position` on.
pub fn plan_pass<U: Ord + Clone + AsRef<str>>(
    repos: &[PassRepo<U>],
    relays_of: impl Fn(&PublicKey) -> Vec<U>,
    authority: impl Fn(&U) -> String,
    bounds: PassBounds,
    position: &mut PassPosition,
) -> PassPlan<U> {
    let mut wanted: BTreeMap<U, BTreeSet<String>> = BTreeMap::new();
    let mut next_authors = BTreeMap::new();
    for repo in repos {
        let n = repo.participants.len();
        if n == 0 {
            continue;
        }
        // The first half of the window is always the first participants (the maintainers, the
        // most recent authors); the rest rotates over the others.
        let fixed = (bounds.authors_per_repo / 2).min(n);
        let rest = n - fixed;
        let start = if rest == 0 { 0 } else { position.authors.get(&repo.key).copied().unwrap_or(0) % rest };
        let rotating = bounds.authors_per_repo.saturating_sub(fixed).min(rest);
        let window = (0..fixed).chain((0..rotating).map(|i| fixed + (start + i) % rest));
        let mut taken: Vec<U> = Vec::new();
        for i in window {
            for relay in relays_of(&repo.participants[i]) {
                if taken.len() >= bounds.relays_per_repo {
                    break;
                }
                if !repo.followed.contains(&relay) && !taken.contains(&relay) {
                    taken.push(relay);
                }
            }
        }
        if rotating < rest {
            next_authors.insert(repo.key.clone(), (start + rotating) % rest);
        }
        for relay in taken {
            wanted.entry(relay).or_default().insert(repo.key.clone());
        }
    }
    position.authors = next_authors;
    // At most MAX_RELAYS_PER_AUTHORITY URLs per host:port: those asked about most repositories.
    let mut by_authority: BTreeMap<String, Vec<(&U, usize)>> = BTreeMap::new();
    for (relay, keys) in &wanted {
        by_authority.entry(authority(relay)).or_default().push((relay, keys.len()));
    }
    let mut allowed: BTreeSet<U> = BTreeSet::new();
    for mut urls in by_authority.into_values() {
        urls.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        allowed.extend(urls.into_iter().take(MAX_RELAYS_PER_AUTHORITY).map(|(u, _)| u.clone()));
    }
    let candidates = allowed.len();
    let chosen: Vec<U> = if candidates <= bounds.max_relays {
        position.last_relay = None;
        allowed.into_iter().collect()
    } else {
        // Continue after the last relay taken, wrapping around.
        let after = position.last_relay.clone();
        let (later, earlier): (Vec<U>, Vec<U>) = allowed.into_iter().partition(|u| after.as_deref().is_none_or(|last| u.as_ref() > last));
        let chosen: Vec<U> = later.into_iter().chain(earlier).take(bounds.max_relays).collect();
        position.last_relay = chosen.last().map(|u| u.as_ref().to_string());
        chosen
    };
    let relays = chosen.into_iter().filter_map(|u| wanted.remove_entry(&u)).collect();
    PassPlan { relays, candidates }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Tag};
    use proptest::prelude::*;

    fn pk(n: u8) -> PublicKey {
        Keys::parse(&format!("{:064x}", n as u64 + 1)).unwrap().public_key()
    }

    #[test]
    fn maintainers_come_first_then_the_most_recent_authors_once_each() {
        let (m, a, b, c) = (pk(1), pk(2), pk(3), pk(4));
        let authored = [(a, Timestamp::from(10)), (b, Timestamp::from(30)), (a, Timestamp::from(40)), (m, Timestamp::from(50)), (c, Timestamp::from(5))];
        assert_eq!(participants(&[m], authored, 10), vec![m, a, b, c]);
        assert_eq!(participants(&[m], authored, 2), vec![m, a]);
        assert!(participants(&[], [], 5).is_empty());
    }

    fn list(kind: u16, tags: &[&[&str]]) -> Event {
        let tags: Vec<Tag> = tags.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()).collect();
        EventBuilder::new(Kind::Custom(kind), "").tags(tags).finalize(&Keys::generate()).unwrap()
    }

    #[test]
    fn write_relays_are_unmarked_or_write_r_tags() {
        let ev = list(KIND_RELAY_LIST, &[&["r", "wss://a"], &["r", "wss://read", "read"], &["r", "wss://w", "write"], &["r", ""], &["p", "wss://x"], &["r", "wss://a"]]);
        assert_eq!(write_relays(&ev), ["wss://a", "wss://w"]);
        assert!(write_relays(&list(1, &[&["r", "wss://a"]])).is_empty(), "only kind 10002");
        let g = list(10317, &[&["g", "wss://g1"], &["g", "wss://g2"]]);
        assert_eq!(grasp_servers(&g), ["wss://g1", "wss://g2"]);
        assert!(grasp_servers(&ev).is_empty());
    }

    #[test]
    fn a_list_of_thousands_of_urls_costs_a_fixed_number() {
        let urls: Vec<String> = (0..5000).map(|i| format!("wss://r{i}.example")).collect();
        let tags: Vec<Vec<&str>> = urls.iter().map(|u| vec!["r", u.as_str()]).collect();
        let tags: Vec<&[&str]> = tags.iter().map(Vec::as_slice).collect();
        let ev = list(KIND_RELAY_LIST, &tags);
        assert_eq!(write_relays(&ev).len(), MAX_LIST_RELAYS);
        // Read relays only beyond the tags looked at: nothing.
        let mut read: Vec<Vec<&str>> = (0..MAX_TAGS_READ).map(|_| vec!["r", "wss://read", "read"]).collect();
        read.push(vec!["r", "wss://late"]);
        let read: Vec<&[&str]> = read.iter().map(Vec::as_slice).collect();
        assert!(write_relays(&list(KIND_RELAY_LIST, &read)).is_empty());
    }

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct U(String);
    impl AsRef<str> for U {
        fn as_ref(&self) -> &str {
            &self.0
        }
    }
    fn authority(u: &U) -> String {
        u.0.split('/').nth(2).unwrap_or_default().to_string()
    }

    fn repo(key: &str, participants: Vec<PublicKey>, followed: &[&str]) -> PassRepo<U> {
        PassRepo { key: key.into(), participants, followed: followed.iter().map(|s| U(s.to_string())).collect() }
    }

    #[test]
    fn a_pass_asks_each_participants_relays_about_its_repositories_but_not_the_followed_ones() {
        let (a, b) = (pk(1), pk(2));
        let relays = |p: &PublicKey| if *p == a { vec![U("wss://a/".into()), U("wss://ann/".into())] } else { vec![U("wss://b/".into())] };
        let repos = vec![repo("r1", vec![a], &["wss://ann/"]), repo("r2", vec![a, b], &[])];
        let mut pos = PassPosition::default();
        let plan = plan_pass(&repos, relays, authority, PassBounds::default(), &mut pos);
        let got: Vec<(&str, Vec<&str>)> = plan.relays.iter().map(|(u, k)| (u.0.as_str(), k.iter().map(String::as_str).collect())).collect();
        assert_eq!(got, [("wss://a/", vec!["r1", "r2"]), ("wss://ann/", vec!["r2"]), ("wss://b/", vec!["r2"])]);
        assert_eq!(pos, PassPosition::default(), "everything fitted: nothing to continue");
    }

    #[test]
    fn windows_continue_where_the_last_pass_stopped() {
        let people: Vec<PublicKey> = (0..5).map(pk).collect();
        let relays = |p: &PublicKey| vec![U(format!("wss://{}/", &p.to_hex()[..8]))];
        let repos = vec![repo("r", people.clone(), &[])];
        let bounds = PassBounds { authors_per_repo: 2, relays_per_repo: 24, max_relays: 32 };
        let mut pos = PassPosition::default();
        let mut seen = BTreeSet::new();
        let first = relays(&people[0]).remove(0);
        for pass in 0..4 {
            let plan = plan_pass(&repos, relays, authority, bounds, &mut pos);
            assert_eq!(plan.relays.len(), 2, "pass {pass}");
            assert!(plan.relays.contains_key(&first), "the first participant is in every window");
            seen.extend(plan.relays.into_keys());
        }
        assert_eq!(seen.len(), 5, "four passes of one more cover the other four participants");
    }

    #[test]
    fn one_host_cannot_take_the_slots_and_the_relays_rotate_past_the_cap() {
        let people: Vec<PublicKey> = (0..10).map(pk).collect();
        let evil = people[0];
        let relays = move |p: &PublicKey| {
            if *p == evil {
                (0..8).map(|i| U(format!("wss://evil/{i}"))).collect()
            } else {
                vec![U(format!("wss://{}/", &p.to_hex()[..8]))]
            }
        };
        let repos = vec![repo("r", people.clone(), &[])];
        let bounds = PassBounds { authors_per_repo: 32, relays_per_repo: 24, max_relays: 4 };
        let mut pos = PassPosition::default();
        let mut seen = BTreeSet::new();
        for _ in 0..3 {
            let plan = plan_pass(&repos, relays, authority, bounds, &mut pos);
            assert_eq!(plan.candidates, 9 + MAX_RELAYS_PER_AUTHORITY);
            assert_eq!(plan.relays.len(), 4);
            seen.extend(plan.relays.into_keys());
        }
        assert_eq!(seen.len(), 11, "three passes of four cover the eleven allowed relays");
        assert_eq!(seen.iter().filter(|u| u.0.starts_with("wss://evil/")).count(), MAX_RELAYS_PER_AUTHORITY);
    }

    proptest! {
        /// Participants: at most `max`, each once, the maintainers (as far as they fit) first,
        /// every author among them when there is room, the most recent authors kept.
        #[test]
        fn participants_are_bounded_unique_and_maintainers_first(
            maintainers in proptest::collection::vec(0u8..20, 0..6),
            authored in proptest::collection::vec((0u8..20, 0u64..100), 0..60),
            max in 0usize..30,
        ) {
            let ms: Vec<PublicKey> = { let mut seen = BTreeSet::new(); maintainers.iter().filter(|n| seen.insert(**n)).map(|n| pk(*n)).collect() };
            let events: Vec<(PublicKey, Timestamp)> = authored.iter().map(|(n, at)| (pk(*n), Timestamp::from(*at))).collect();
            let got = participants(&ms, events.clone(), max);
            prop_assert!(got.len() <= max);
            prop_assert_eq!(got.iter().collect::<BTreeSet<_>>().len(), got.len());
            prop_assert_eq!(&got[..ms.len().min(max)], &ms[..ms.len().min(max)]);
            let everyone: BTreeSet<PublicKey> = ms.iter().copied().chain(events.iter().map(|(p, _)| *p)).collect();
            if everyone.len() <= max {
                prop_assert_eq!(got.len(), everyone.len());
            }
            // An author left out wrote nothing later than one kept (maintainers aside).
            let latest = |p: &PublicKey| events.iter().filter(|(a, _)| a == p).map(|(_, t)| *t).max();
            for out in everyone.iter().filter(|p| !got.contains(p)) {
                for kept in got.iter().skip(ms.len()) {
                    prop_assert!(latest(out) <= latest(kept));
                }
            }
        }

        /// Whatever the participants and their lists: at most max_relays relays, each asked about
        /// repositories that named it, at most relays_per_repo per repository, never a followed
        /// relay, at most MAX_RELAYS_PER_AUTHORITY per host.
        #[test]
        fn a_pass_stays_within_its_bounds(
            shape in proptest::collection::vec((proptest::collection::vec(0u8..40, 0..50), proptest::collection::vec(0u8..30, 0..4)), 0..12),
            per_author in 0usize..12,
            authors_per_repo in 1usize..40,
            relays_per_repo in 1usize..30,
            max_relays in 1usize..40,
            passes in 1usize..4,
        ) {
            let relays = move |p: &PublicKey| (0..per_author).map(|i| U(format!("wss://h{}/{}", (p.to_bytes()[0] as usize + i) % 30, i % 3))).collect::<Vec<U>>();
            let repos: Vec<PassRepo<U>> = shape.iter().enumerate().map(|(i, (people, followed))| PassRepo {
                key: format!("r{i}"),
                participants: { let mut seen = BTreeSet::new(); people.iter().filter(|n| seen.insert(**n)).map(|n| pk(*n)).collect() },
                followed: followed.iter().map(|h| U(format!("wss://h{h}/0"))).collect(),
            }).collect();
            let bounds = PassBounds { authors_per_repo, relays_per_repo, max_relays };
            let mut pos = PassPosition::default();
            for _ in 0..passes {
                let plan = plan_pass(&repos, relays, authority, bounds, &mut pos);
                prop_assert!(plan.relays.len() <= max_relays);
                let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
                let mut per_repo: BTreeMap<&str, usize> = BTreeMap::new();
                for (u, keys) in &plan.relays {
                    *per_host.entry(authority(u)).or_default() += 1;
                    for k in keys {
                        *per_repo.entry(k.as_str()).or_default() += 1;
                        let r = repos.iter().find(|r| &r.key == k).unwrap();
                        prop_assert!(!r.followed.contains(u));
                        prop_assert!(r.participants.iter().any(|p| relays(p).contains(u)));
                    }
                }
                prop_assert!(per_host.values().all(|n| *n <= MAX_RELAYS_PER_AUTHORITY));
                prop_assert!(per_repo.values().all(|n| *n <= relays_per_repo));
            }
        }
    }
}
