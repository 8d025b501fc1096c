//! What to ask which relay for: the accepted repositories and their relay lists turned into
//! consolidated filters per relay (pure).
//!
//! Layers (docs/protocol.md#relay-sync): (a) repository announcements (kind 30617) from every
//! connected relay, and the user grasp lists (kind 10317) of the owners and maintainers of the
//! repositories a relay serves; (b) per repository the state events (30618 for its `d`, authors in its
//! maintainer set) and, at level [`SyncLevel::Full`], every event tagging it (`#a`); (c) events
//! tagging those root events (`#e`/`#E`/`#q`). Filters of all repositories a relay serves are
//! merged (one filter per layer, values chunked by [`MAX_VALUES`]; states per chunk of
//! identifiers with those repositories' maintainers), so the filters grow with the repositories,
//! their maintainers and roots, never with a product of them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use grasp_state::nostr::nip34::{KIND_ANNOUNCEMENT, KIND_STATE, KIND_USER_GRASP_LIST};
use nostr::prelude::{EventId, Filter, Kind, PublicKey, SingleLetterTag};
use serde::Serialize;

use crate::sync::relay_url::RelayUrl;

/// A repository's root ids, shared with the plans that list them. A slice of exactly its ids
/// (no spare capacity): a new root makes a new list (at most [`MAX_ROOTS`] ids copied) and the
/// plans drop the old one at their next refresh, so a stream of new roots never leaves grown
/// or doubled lists behind.
pub type RootIds = Arc<[EventId]>;

/// Most values (authors, tag values) in one filter; longer lists are split over filters (a
/// REQ of 10 such filters of event ids stays near 70 KB).
pub const MAX_VALUES: usize = 100;

/// How much of a repository is synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncLevel {
    /// A held announcement: only its state events, so the state naming its git data is found.
    StateOnly,
    /// A served announcement: states, events tagging it and events tagging those.
    Full,
}

impl SyncLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncLevel::StateOnly => "state-only",
            SyncLevel::Full => "full",
        }
    }
}

/// One accepted repository (announcement stored or held) and what is wanted of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInterest {
    pub owner: PublicKey,
    pub identifier: String,
    /// The owner and its recursive maintainers (authors of acceptable state events), sorted,
    /// no duplicates (a slice: most sets hold one key, a set's node would hold eleven).
    pub maintainers: Box<[PublicKey]>,
    /// The announcement's `relays` that parse as relay URLs, sorted, no duplicates (shared
    /// with the index's copy of the announcement).
    pub relays: Arc<[RelayUrl]>,
    pub level: SyncLevel,
    /// Ids of stored events tagging the repository (layer c), at level full, oldest first: a
    /// new root then only changes the last filter of the chunked lists, and only that filter
    /// needs its history reconciled. Shared with the plans of the relays it counts for.
    pub roots: RootIds,
}

impl RepoInterest {
    /// `30617:<owner hex>:<identifier>`.
    pub fn coordinate(&self) -> String {
        format!("{KIND_ANNOUNCEMENT}:{}:{}", self.owner.to_hex(), self.identifier)
    }

    /// How operators see it: `<npub>/<identifier>`.
    pub fn label(&self) -> String {
        format!("{}/{}", grasp_state::names::identifier::npub_of(&self.owner), self.identifier)
    }
}

/// Everything this server wants from other relays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interest {
    pub repos: Vec<RepoInterest>,
    /// `--sync-bootstrap-relay`: always connected, asked for announcements.
    pub bootstraps: BTreeSet<RelayUrl>,
    /// A private service's peers: then the only relays, each asked for every repository (and
    /// for announcements, like a bootstrap); the repositories' `relays` are not followed.
    pub only: Option<BTreeSet<RelayUrl>>,
}

/// Root events per repository whose replies are synced (the newest first when gathered).
pub const MAX_ROOTS: usize = 500;

/// What one relay is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayPlan {
    /// Consolidated filters of layers (a) and (b) and the `#a` filters, deterministic order:
    /// they change only when a repository it serves does (shared by the plans built since).
    pub fixed: Arc<Vec<Filter>>,
    /// Root events (layer c) of the repositories it serves, in order (each repository's oldest
    /// first), the repositories' own lists shared, not copied. Each chunk of [`MAX_VALUES`] ids
    /// becomes three filters (`#e`, `#E`, `#q`) when they are asked for
    /// ([`RelayPlan::filters`]): kept as filters, each id would be held three times as hex text,
    /// about ten times its 32 bytes.
    pub roots: Vec<RootIds>,
    /// Labels of the repositories it serves, sorted (shared like `fixed`).
    pub repos: Arc<Vec<String>>,
    pub bootstrap: bool,
    /// Followed (also) for GRASP-03 Sync+: a participant's relay ([`conversation_plan`]).
    pub outbox: bool,
}

impl RelayPlan {
    /// This plan with other root lists (what a new root changes): the rest is shared, so the
    /// work is one pointer per served repository, whatever else the relay is asked for.
    pub fn with_roots(&self, roots: Vec<RootIds>) -> RelayPlan {
        RelayPlan { fixed: self.fixed.clone(), roots, repos: self.repos.clone(), bootstrap: self.bootstrap, outbox: self.outbox }
    }

    /// The plan's filters, in order, made one at a time.
    pub fn filters(&self) -> impl Iterator<Item = Filter> + '_ {
        let mut ids = self.roots.iter().flat_map(|roots| roots.iter());
        let chunks = std::iter::from_fn(move || {
            let values: Vec<String> = ids.by_ref().take(MAX_VALUES).map(EventId::to_hex).collect();
            (!values.is_empty()).then_some(values)
        });
        let roots = chunks.flat_map(|values| ['e', 'E', 'q'].into_iter().map(move |letter| Filter::new().custom_tags(tag(letter), values.clone())));
        self.fixed.iter().cloned().chain(roots)
    }

    /// Root events asked about.
    pub fn root_count(&self) -> usize {
        self.roots.iter().map(|roots| roots.len()).sum()
    }

    /// How many filters [`RelayPlan::filters`] gives.
    pub fn filter_count(&self) -> usize {
        self.fixed.len() + 3 * self.root_count().div_ceil(MAX_VALUES)
    }

    /// The key of each filter ([`filter_key`]), to compare plans and remember finished history.
    pub fn filter_keys(&self) -> BTreeSet<String> {
        self.filters().map(|f| filter_key(&f)).collect()
    }
}

/// A stable key of a filter: the SHA-256 (hex) of its JSON, so remembering a filter costs 64
/// bytes whatever its size (a filter of 100 ids is about 7 KB of JSON).
pub fn filter_key(filter: &Filter) -> String {
    let digest = bitcoin_hashes::sha256::Hash::hash(serde_json::to_string(filter).unwrap_or_default().as_bytes());
    faster_hex::hex_string(digest.as_byte_array())
}

fn tag(c: char) -> SingleLetterTag {
    SingleLetterTag::from_char(c).expect("a single letter")
}

fn chunks<T: Clone>(values: &BTreeSet<T>) -> Vec<Vec<T>> {
    let all: Vec<T> = values.iter().cloned().collect();
    all.chunks(MAX_VALUES).map(<[T]>::to_vec).collect()
}

impl Interest {
    /// The plan of every relay to connect to: relays named by accepted repositories and the
    /// bootstraps, without those `excluded` (this server, unsafe), at most `max_relays`
    /// (bootstraps first, always kept). Ranking ([`rank`]) resists being taken over by free
    /// announcements: relays listed by the most distinct owners of served announcements come
    /// first, then by distinct owners of held ones; each announcement counts for at most
    /// [`MAX_RELAYS_PER_ANNOUNCEMENT`] relays, and at most [`MAX_RELAYS_PER_AUTHORITY`] URLs of
    /// one `host:port` are taken. A relay not taken is not asked about any repository.
    pub fn plans(&self, excluded: impl Fn(&RelayUrl) -> bool, max_relays: usize) -> BTreeMap<RelayUrl, RelayPlan> {
        if let Some(only) = &self.only {
            let all: Vec<&RepoInterest> = self.repos.iter().collect();
            return only.iter().filter(|relay| !excluded(relay)).take(max_relays).map(|relay| (relay.clone(), plan_for(&all, true))).collect();
        }
        let mut serving: BTreeMap<&RelayUrl, Vec<&RepoInterest>> = BTreeMap::new();
        for repo in &self.repos {
            for relay in repo.relays.iter().filter(|r| !excluded(r)).take(MAX_RELAYS_PER_ANNOUNCEMENT) {
                serving.entry(relay).or_default().push(repo);
            }
        }
        for relay in self.bootstraps.iter().filter(|r| !excluded(r)) {
            serving.entry(relay).or_default();
        }
        let taken = rank(&serving, &self.bootstraps, max_relays);
        serving
            .into_iter()
            .filter(|(relay, _)| taken.contains(*relay))
            .map(|(relay, repos)| (relay.clone(), plan_for(&repos, self.bootstraps.contains(relay))))
            .collect()
    }
}

/// Relays one announcement may add to the followed set (its first ones, in URL order).
pub const MAX_RELAYS_PER_ANNOUNCEMENT: usize = 10;

/// URLs of one `host:port` (differing only in path) followed at once.
pub const MAX_RELAYS_PER_AUTHORITY: usize = 2;

/// The relays taken (pure): every bootstrap, then others up to `max_relays` in all, ranked by distinct
/// owners of served (level full) repositories listing them, then by distinct owners of held
/// ones, then by URL; at most [`MAX_RELAYS_PER_AUTHORITY`] per `host:port`.
pub fn rank(serving: &BTreeMap<&RelayUrl, Vec<&RepoInterest>>, bootstraps: &BTreeSet<RelayUrl>, max_relays: usize) -> BTreeSet<RelayUrl> {
    let owners = |repos: &[&RepoInterest], level: SyncLevel| -> usize {
        repos.iter().filter(|r| r.level == level).map(|r| r.owner).collect::<BTreeSet<_>>().len()
    };
    rank_counted(
        serving.iter().map(|(relay, repos)| (*relay, owners(repos, SyncLevel::Full), owners(repos, SyncLevel::StateOnly))),
        bootstraps,
        max_relays,
    )
}

/// [`rank`] from counts already made: `(relay, distinct owners of served repositories listing
/// it, distinct owners of held ones)` for every relay named (bootstraps included), so an index
/// keeping the counts ranks without looking at any repository.
pub fn rank_counted<'a>(
    counted: impl IntoIterator<Item = (&'a RelayUrl, usize, usize)>,
    bootstraps: &BTreeSet<RelayUrl>,
    max_relays: usize,
) -> BTreeSet<RelayUrl> {
    let mut taken: BTreeSet<RelayUrl> = BTreeSet::new();
    let mut ranked: Vec<(usize, usize, &RelayUrl)> = Vec::new();
    for (relay, full, held) in counted {
        if bootstraps.contains(relay) {
            taken.insert(relay.clone());
        } else {
            ranked.push((full, held, relay));
        }
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2)));
    let mut per_authority: BTreeMap<&str, usize> = BTreeMap::new();
    let mut room = max_relays.saturating_sub(taken.len());
    for (_, _, relay) in ranked {
        if room == 0 {
            break;
        }
        let n = per_authority.entry(relay.authority()).or_default();
        if *n >= MAX_RELAYS_PER_AUTHORITY {
            continue;
        }
        *n += 1;
        room -= 1;
        taken.insert(relay.clone());
    }
    taken
}

/// The consolidated filters for a relay serving `repos`.
pub fn plan_for(repos: &[&RepoInterest], bootstrap: bool) -> RelayPlan {
    let mut filters = vec![Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT))];
    let mut authors: BTreeSet<PublicKey> = BTreeSet::new();
    let mut identifiers: BTreeMap<&str, BTreeSet<PublicKey>> = BTreeMap::new();
    let mut coordinates: BTreeSet<String> = BTreeSet::new();
    for repo in repos {
        authors.extend(repo.maintainers.iter().copied());
        identifiers.entry(&repo.identifier).or_default().extend(repo.maintainers.iter().copied());
        if repo.level == SyncLevel::Full {
            coordinates.insert(repo.coordinate());
        }
    }
    // Layer (a) also carries the user grasp lists (kind 10317) of these repositories' owners
    // and maintainers (and of nobody else: anyone may publish one): background sync looks for
    // their repositories' data on the servers they list (docs/protocol.md#relay-sync).
    for authors in chunks(&authors) {
        filters.push(Filter::new().kind(Kind::Custom(KIND_USER_GRASP_LIST)).authors(authors));
    }
    // States: per chunk of identifiers, the maintainers of just those repositories, so the
    // filters grow with the repositories and their maintainers, never with their product (all
    // authors × all identifiers made 2,500 filters for 5,000 repositories). Within a chunk they
    // may over-match (a maintainer of one repository, the `d` of another); the acceptance
    // policy refuses what does not belong.
    let identifiers: Vec<(&str, BTreeSet<PublicKey>)> = identifiers.into_iter().collect();
    for group in identifiers.chunks(MAX_VALUES) {
        let ids: Vec<String> = group.iter().map(|(d, _)| d.to_string()).collect();
        let maintainers: BTreeSet<PublicKey> = group.iter().flat_map(|(_, m)| m.iter().copied()).collect();
        for authors in chunks(&maintainers) {
            filters.push(Filter::new().kind(Kind::Custom(KIND_STATE)).authors(authors).identifiers(ids.clone()));
        }
    }
    for values in chunks(&coordinates) {
        filters.push(Filter::new().custom_tags(tag('a'), values));
    }
    let mut labels: Vec<String> = repos.iter().map(|r| r.label()).collect();
    labels.sort();
    labels.dedup();
    RelayPlan { fixed: Arc::new(filters), roots: roots_of(repos), repos: Arc::new(labels), bootstrap, outbox: false }
}

/// What a participant's relay is asked for (GRASP-03 Sync+, docs/protocol.md#grasp-03): the
/// conversation of the served ones of `repos` only: events tagging them (`#a`) and replies to
/// their root events (`#e`/`#E`/`#q`); no announcements, lists or states (those come from the
/// repositories' own relays).
pub fn conversation_plan(repos: &[&RepoInterest]) -> RelayPlan {
    let served: Vec<&RepoInterest> = repos.iter().copied().filter(|r| r.level == SyncLevel::Full).collect();
    let coordinates: BTreeSet<String> = served.iter().map(|r| r.coordinate()).collect();
    let filters: Vec<Filter> = chunks(&coordinates).into_iter().map(|values| Filter::new().custom_tags(tag('a'), values)).collect();
    let mut labels: Vec<String> = served.iter().map(|r| r.label()).collect();
    labels.sort();
    labels.dedup();
    RelayPlan { fixed: Arc::new(filters), roots: roots_of(&served), repos: Arc::new(labels), bootstrap: false, outbox: true }
}

/// A relay followed for relay sync and for Sync+ at once: `plan` and `conversation`'s filters
/// for repositories `plan` does not already ask about.
pub fn merged(plan: &RelayPlan, conversation: &[&RepoInterest]) -> RelayPlan {
    let missing: Vec<&RepoInterest> = conversation.iter().copied().filter(|r| plan.repos.binary_search(&r.label()).is_err()).collect();
    let extra = conversation_plan(&missing);
    if extra.repos.is_empty() {
        return RelayPlan { outbox: true, ..plan.clone() };
    }
    let fixed: Vec<Filter> = plan.fixed.iter().cloned().chain(extra.fixed.iter().cloned()).collect();
    let mut labels: Vec<String> = plan.repos.iter().cloned().chain(extra.repos.iter().cloned()).collect();
    labels.sort();
    RelayPlan {
        fixed: Arc::new(fixed),
        roots: plan.roots.iter().cloned().chain(extra.roots).collect(),
        repos: Arc::new(labels),
        bootstrap: plan.bootstrap,
        outbox: true,
    }
}

/// The plan of a replica of this service (`--replica`, docs/scaling.md): everything, as one
/// filter matching every event; the acceptance policy refuses what does not belong here.
pub fn replica_plan() -> RelayPlan {
    RelayPlan { fixed: Arc::new(vec![Filter::new()]), roots: Vec::new(), repos: Arc::new(vec!["(everything: a replica)".to_string()]), bootstrap: true, outbox: false }
}

/// The root events of the served ones of `repos`, in order (each repository's oldest first),
/// shared with the repositories. An event tagging two of them is listed twice, which only asks
/// for its replies twice: cheaper than a set of every id at each change.
fn roots_of(repos: &[&RepoInterest]) -> Vec<RootIds> {
    repos.iter().filter(|r| r.level == SyncLevel::Full && !r.roots.is_empty()).map(|r| r.roots.clone()).collect()
}

/// Room left in a message for `["REQ","<subscription id>",` and the closing `]`.
pub const REQ_OVERHEAD: usize = 96;

/// Splits `filters` (in order) into REQs of at most `max_filters` filters each whose message
/// stays under `max_bytes` (NIP-11 `max_filters`, `max_message_length`). A filter too large on
/// its own goes alone (the relay may refuse it; the others are not held back).
pub fn batches(filters: impl IntoIterator<Item = Filter>, max_filters: usize, max_bytes: usize) -> impl Iterator<Item = Vec<Filter>> {
    let room = max_bytes.saturating_sub(REQ_OVERHEAD);
    let mut filters = filters
        .into_iter()
        .map(|filter| {
            let len = serde_json::to_string(&filter).map_or(0, |json| json.len()) + 1;
            (filter, len)
        })
        .peekable();
    // Made as they are taken: a caller taking the first few never builds the rest.
    std::iter::from_fn(move || {
        let (first, mut size) = filters.next()?;
        let mut batch = vec![first];
        while batch.len() < max_filters.max(1) {
            match filters.next_if(|(_, len)| size + len <= room) {
                Some((filter, len)) => {
                    size += len;
                    batch.push(filter);
                }
                None => break,
            }
        }
        Some(batch)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;
    use proptest::prelude::*;

    fn url(s: &str) -> RelayUrl {
        RelayUrl::parse(s).unwrap()
    }

    /// Sorted, no duplicates, as the index keeps them.
    fn sorted<T: Ord, C: FromIterator<T>>(items: impl Iterator<Item = T>) -> C {
        items.collect::<BTreeSet<T>>().into_iter().collect()
    }

    fn repo(id: &str, relays: &[&str], level: SyncLevel, roots: usize) -> RepoInterest {
        let owner = Keys::generate().public_key();
        RepoInterest {
            owner,
            identifier: id.into(),
            maintainers: [owner].into(),
            relays: sorted(relays.iter().map(|r| url(r))),
            level,
            roots: (0..roots).map(|n| EventId::from_byte_array([n as u8; 32])).collect(),
        }
    }

    #[test]
    fn held_repositories_get_states_only() {
        let interest = Interest { repos: vec![repo("held", &["wss://a"], SyncLevel::StateOnly, 3)], bootstraps: BTreeSet::new(), only: None };
        let plans = interest.plans(|_| false, 10);
        let plan = &plans[&url("wss://a")];
        let json: Vec<String> = plan.filters().map(|f| serde_json::to_string(&f).unwrap()).collect();
        assert_eq!(json.len(), 3, "{json:?}");
        assert!(json[0].contains("30617"));
        assert!(json[1].contains("10317") && json[1].contains("\"authors\""), "the maintainers' grasp lists: {}", json[1]);
        assert!(json[2].contains("30618") && json[2].contains("\"#d\":[\"held\"]"));
    }

    #[test]
    fn full_repositories_add_tags_and_roots_merged_across_repositories() {
        let interest = Interest {
            repos: vec![repo("x", &["wss://a"], SyncLevel::Full, 2), repo("y", &["wss://a", "wss://b"], SyncLevel::Full, 0)],
            bootstraps: [url("wss://boot")].into(),
            only: None,
        };
        let plans = interest.plans(|_| false, 10);
        let a = &plans[&url("wss://a")];
        // announcements, grasp lists, states, #a, #e, #E, #q: seven filters for two repositories.
        assert_eq!(a.filter_count(), 7, "{:?}", a.filters().collect::<Vec<_>>());
        assert_eq!(a.repos.len(), 2);
        let b = &plans[&url("wss://b")];
        assert_eq!(b.filter_count(), 4, "no roots: no #e filters");
        let boot = &plans[&url("wss://boot")];
        assert!(boot.bootstrap && boot.repos.is_empty() && boot.filter_count() == 1);
    }

    #[test]
    fn cap_keeps_bootstraps_then_busiest_relays_and_excludes_this_server() {
        let interest = Interest {
            repos: vec![
                repo("x", &["wss://a", "wss://self"], SyncLevel::Full, 0),
                repo("y", &["wss://a", "wss://b"], SyncLevel::Full, 0),
            ],
            bootstraps: [url("wss://boot")].into(),
            only: None,
        };
        let plans = interest.plans(|r| r.as_str() == "wss://self", 2);
        let relays: Vec<&str> = plans.keys().map(RelayUrl::as_str).collect();
        assert_eq!(relays, ["wss://a", "wss://boot"]);
    }

    #[test]
    fn free_held_announcements_cannot_take_the_relay_slots() {
        // 100 held announcements (free keys) each listing 50 attacker URLs on one host.
        let mut repos: Vec<RepoInterest> = (0..100)
            .map(|n| {
                let urls: Vec<String> = (0..50).map(|i| format!("wss://evil.example/{i}")).collect();
                let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
                repo(&format!("spam{n}"), &urls, SyncLevel::StateOnly, 0)
            })
            .collect();
        // Also 60 attacker hosts, each listed by every held announcement (one URL each).
        for r in &mut repos {
            r.relays = sorted(r.relays.iter().cloned().chain((0..60).map(|i| url(&format!("wss://h{i}.evil.example")))));
        }
        // One served repository per legitimate relay, one owner each.
        repos.push(repo("a", &["wss://good-a.example"], SyncLevel::Full, 0));
        repos.push(repo("b", &["wss://good-b.example"], SyncLevel::Full, 0));
        let interest = Interest { repos, bootstraps: [url("wss://zz-boot.example")].into(), only: None };
        let plans = interest.plans(|_| false, 5);
        let relays: BTreeSet<&str> = plans.keys().map(RelayUrl::as_str).collect();
        // Bootstraps first; served relays come before held ones.
        assert!(relays.contains("wss://zz-boot.example") && relays.contains("wss://good-a.example") && relays.contains("wss://good-b.example"), "{relays:?}");
        assert_eq!(relays.len(), 5, "{relays:?}");
        assert!(relays.iter().all(|r| !r.starts_with("wss://h")), "{relays:?}");
        // One host:port gives at most two URLs, and each announcement at most ten relays.
        assert!(relays.iter().filter(|r| r.starts_with("wss://evil.example/")).count() <= MAX_RELAYS_PER_AUTHORITY);
        let counted: usize = interest.repos.iter().take(1).map(|r| r.relays.iter().take(MAX_RELAYS_PER_ANNOUNCEMENT).count()).sum();
        assert_eq!(counted, MAX_RELAYS_PER_ANNOUNCEMENT);
    }

    #[test]
    fn ranking_counts_distinct_owners_not_announcements() {
        let owner = Keys::generate().public_key();
        let mut same_owner: Vec<RepoInterest> = (0..5)
            .map(|n| {
                let mut r = repo(&format!("r{n}"), &["wss://one-owner.example"], SyncLevel::Full, 0);
                r.owner = owner;
                r
            })
            .collect();
        same_owner.push(repo("x", &["wss://two-owners.example"], SyncLevel::Full, 0));
        same_owner.push(repo("y", &["wss://two-owners.example"], SyncLevel::Full, 0));
        let interest = Interest { repos: same_owner, bootstraps: BTreeSet::new(), only: None };
        let relays: Vec<String> = interest.plans(|_| false, 1).keys().map(|r| r.to_string()).collect();
        assert_eq!(relays, ["wss://two-owners.example"]);
    }

    #[test]
    fn a_filter_key_is_a_digest_of_its_json_whatever_the_filter_size() {
        let big = Filter::new().custom_tags(tag('e'), (0..100u8).map(|n| EventId::from_byte_array([n; 32]).to_hex()));
        let other = Filter::new().custom_tags(tag('E'), (0..100u8).map(|n| EventId::from_byte_array([n; 32]).to_hex()));
        assert!(serde_json::to_string(&big).unwrap().len() > 6_000);
        let key = filter_key(&big);
        assert!(key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_eq!(key, filter_key(&big.clone()), "stable");
        assert_ne!(key, filter_key(&other));
    }

    #[test]
    fn a_thousand_repositories_of_a_thousand_owners_make_ten_state_filters() {
        let repos: Vec<RepoInterest> = (0..1000).map(|n| repo(&format!("r{n:04}"), &["wss://a"], SyncLevel::StateOnly, 0)).collect();
        let plan = plan_for(&repos.iter().collect::<Vec<_>>(), false);
        let states = plan.filters().filter(|f| f.kinds.as_ref().is_some_and(|k| k.contains(&Kind::Custom(KIND_STATE)))).count();
        // Every author × every identifier would be 10 × 10 = 100 filters.
        assert_eq!(states, 10);
    }

    #[test]
    fn a_new_root_changes_only_the_last_chunk() {
        let mut r = repo("x", &["wss://a"], SyncLevel::Full, 0);
        r.roots = (0..250u32).map(|n| { let mut b = [0u8; 32]; b[28..].copy_from_slice(&(1000 - n).to_be_bytes()); EventId::from_byte_array(b) }).collect();
        let before = Interest { repos: vec![r.clone()], bootstraps: BTreeSet::new(), only: None }.plans(|_| false, 1)[&url("wss://a")].filter_keys();
        r.roots = r.roots.iter().copied().chain([EventId::from_byte_array([0; 32])]).collect();
        let after = Interest { repos: vec![r], bootstraps: BTreeSet::new(), only: None }.plans(|_| false, 1)[&url("wss://a")].filter_keys();
        // #e, #E, #q of the last chunk change; the two full chunks stay.
        assert_eq!(after.difference(&before).count(), 3);
    }

    #[test]
    fn a_private_service_follows_only_its_peers_for_every_repository() {
        let interest = Interest {
            repos: vec![repo("x", &["wss://a"], SyncLevel::Full, 1), repo("y", &["wss://b"], SyncLevel::StateOnly, 0)],
            bootstraps: BTreeSet::new(),
            only: Some([url("wss://peer"), url("wss://self")].into()),
        };
        let plans = interest.plans(|r| r.as_str() == "wss://self", 10);
        let relays: Vec<&str> = plans.keys().map(RelayUrl::as_str).collect();
        assert_eq!(relays, ["wss://peer"], "the repositories' relays are never followed");
        let peer = &plans[&url("wss://peer")];
        assert_eq!(peer.repos.len(), 2);
        assert!(peer.bootstrap);
        // announcements, grasp lists, states, #a of x, #e/#E/#q of x's root.
        assert_eq!(peer.filter_count(), 7, "{:?}", peer.filters().collect::<Vec<_>>());
    }

    #[test]
    fn a_participants_relay_is_asked_for_the_conversation_only() {
        let x = repo("x", &["wss://a"], SyncLevel::Full, 2);
        let held = repo("h", &["wss://a"], SyncLevel::StateOnly, 0);
        let plan = conversation_plan(&[&x, &held]);
        let json: Vec<String> = plan.filters().map(|f| serde_json::to_string(&f).unwrap()).collect();
        // #a of x, then #e, #E, #q of its two roots: no announcements, lists, states; nothing of h.
        assert_eq!(json.len(), 4, "{json:?}");
        assert!(json[0].contains(&x.coordinate()) && !json.iter().any(|j| j.contains("kinds")), "{json:?}");
        assert!(plan.outbox && !plan.bootstrap && *plan.repos == [x.label()]);
        // Merged into a relay-sync plan: only repositories it does not ask about already.
        let y = repo("y", &["wss://a"], SyncLevel::Full, 0);
        let sync = plan_for(&[&x], false);
        let both = merged(&sync, &[&x, &y]);
        assert_eq!(both.filter_count(), sync.filter_count() + 1, "the #a of y");
        assert!(both.outbox && both.repos.len() == 2);
        assert_eq!(merged(&sync, &[&x]).filter_count(), sync.filter_count());
    }

    #[test]
    fn batches_respect_the_relay_limit() {
        let filters: Vec<Filter> = (0..25).map(|n| Filter::new().kind(Kind::Custom(n))).collect();
        let b = batches(filters.clone(), 10, 1 << 20).collect::<Vec<_>>();
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
        assert_eq!(batches(filters.clone(), 0, 1 << 20).count(), 25);
    }

    #[test]
    fn batches_respect_the_relay_message_length() {
        // 100 event ids: ~6.6 KB of JSON per filter.
        let ids: Vec<String> = (0..100u8).map(|n| EventId::from_byte_array([n; 32]).to_hex()).collect();
        let filters: Vec<Filter> = (0..6).map(|_| Filter::new().custom_tags(tag('e'), ids.clone())).collect();
        let b = batches(filters.clone(), 16, 16_384).collect::<Vec<_>>();
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2]);
        // One filter over the limit still goes, alone.
        assert_eq!(batches(filters.clone(), 16, 4_096).count(), 6);
    }

    proptest! {
        /// Every filter is sent once, in order; a REQ holds at most `max_filters` and stays
        /// under `max_bytes` unless it is a single filter.
        #[test]
        fn batches_keep_every_filter_within_the_limits(lens in proptest::collection::vec(0usize..60, 0..40), max_filters in 0usize..8, max_bytes in 0usize..20_000) {
            let filters: Vec<Filter> = lens.iter().map(|n| Filter::new().identifiers((0..*n).map(|i| format!("repository-{i}")))).collect();
            let b: Vec<Vec<Filter>> = batches(filters.clone(), max_filters, max_bytes).collect();
            let flat: Vec<Filter> = b.iter().flatten().cloned().collect();
            prop_assert_eq!(flat, filters);
            for batch in &b {
                prop_assert!(!batch.is_empty() && batch.len() <= max_filters.max(1));
                let json = serde_json::to_string(&(["REQ", "live-18446744073709551615"], batch)).unwrap();
                prop_assert!(batch.len() == 1 || json.len() <= max_bytes, "{} > {}", json.len(), max_bytes);
            }
        }

        /// Every repository's states are asked of each of its maintainers, and the state
        /// filters grow with the repositories and their maintainers, never with their product.
        #[test]
        fn state_filters_cover_each_repository_and_grow_linearly(
            shapes in proptest::collection::vec((0usize..2000, 0usize..150), 1..300),
        ) {
            // (identifier, maintainers besides its own owner, drawn from a shared pool of 200 keys)
            let pool: Vec<PublicKey> = (0..200).map(|_| Keys::generate().public_key()).collect();
            let repos: Vec<RepoInterest> = shapes.iter().enumerate().map(|(n, (id, m))| {
                let mut r = repo(&format!("i{id}"), &["wss://a"], SyncLevel::StateOnly, 0);
                r.maintainers = sorted(r.maintainers.iter().chain(pool.iter().cycle().skip(n).take(*m)).copied());
                r
            }).collect();
            let plan = plan_for(&repos.iter().collect::<Vec<_>>(), false);
            let states: Vec<Filter> = plan.filters().filter(|f| f.kinds.as_ref().is_some_and(|k| k.contains(&Kind::Custom(KIND_STATE)))).collect();
            for r in &repos {
                for m in &r.maintainers {
                    prop_assert!(states.iter().any(|f| f.authors.as_ref().is_some_and(|a| a.contains(m))
                        && f.generic_tags.get(&tag('d')).is_some_and(|d| d.contains(&r.identifier))),
                        "{} by {} not asked for", r.identifier, m);
                }
            }
            let identifiers: BTreeSet<&String> = repos.iter().map(|r| &r.identifier).collect();
            let pairs: usize = repos.iter().map(|r| r.maintainers.len()).sum();
            prop_assert!(states.len() <= identifiers.len().div_ceil(MAX_VALUES) + pairs.div_ceil(MAX_VALUES),
                "{} state filters for {} identifiers and {} maintainer pairs", states.len(), identifiers.len(), pairs);
            for f in &states {
                prop_assert!(f.authors.as_ref().unwrap().len() <= MAX_VALUES && f.generic_tags[&tag('d')].len() <= MAX_VALUES);
            }
        }

        /// Filters never carry more than MAX_VALUES values, and every root is asked for.
        #[test]
        fn values_are_chunked(roots in 0usize..300, repos in 1usize..4) {
            let repos: Vec<RepoInterest> = (0..repos).map(|n| {
                let mut r = repo(&format!("r{n}"), &["wss://a"], SyncLevel::Full, 0);
                r.roots = (0..roots).map(|i| { let mut b = [0u8; 32]; b[..8].copy_from_slice(&(i as u64).to_be_bytes()); b[8] = n as u8; EventId::from_byte_array(b) }).collect();
                r
            }).collect();
            let total = repos.len() * roots;
            let plan = &Interest { repos, bootstraps: BTreeSet::new(), only: None }.plans(|_| false, 1)[&url("wss://a")];
            let mut e_values = 0;
            for f in plan.filters() {
                for values in f.generic_tags.values() {
                    prop_assert!(values.len() <= MAX_VALUES);
                }
                if let Some(v) = f.generic_tags.get(&tag('e')) { e_values += v.len(); }
            }
            prop_assert_eq!(e_values, total);
        }
    }
}
