//! GRASP-03 Sync+ (docs/protocol.md#grasp-03): the conversation of each served repository
//! fetched from its participants' own relays too, not only from the relays its announcement
//! lists.
//!
//! Every `--sync-plus-interval` one pass:
//! 1. reads served repositories' participants from the store (those new here or with new root
//!    events, and [`PARTICIPANTS_PER_PASS`] more, read longest ago first; at most
//!    [`MAX_READS_PER_PASS`]): the confirmed
//!    maintainers (the index's [`grasp_state::authority::maintainers::MaintainerSet`]) and the authors of
//!    the newest events tagging it or replying to its root events
//!    ([`grasp_state::nostr::outbox::participants`]);
//! 2. for participants never or not lately looked up, offers the kind 10317 lists stored here
//!    (through the normal door) to the cache ([`super::lists`]), then looks up their lists
//!    ([`LOOKUPS_PER_PASS`] at most) on the index relays and on each repository's own first
//!    relays that relay sync follows live ([`super::query`]: one `REQ` each, bounded in time
//!    and events, at most
//!    [`LIST_RELAYS_PER_PASS`] relays, [`CONCURRENT_QUERIES`] at once);
//! 3. plans which discovered relays are asked about which repositories
//!    ([`grasp_state::nostr::outbox::plan_pass`]: a window of participants per repository continuing
//!    where the last pass stopped, bounded relays per repository and in all; each URL through
//!    relay sync's address rules) and hands the plan to the relay-sync manager ([`Discovered`]).
//!
//! The manager follows each discovered relay like any other ([`super::peer`]): its history
//! (NIP-77 where it speaks it, `REQ` pages from its cursor otherwise), then live while it stays
//! in the plan, so a comment made now arrives in seconds; every event through
//! [`super::intake`], admitted or refused as any other. The task ends at shutdown, or when the
//! manager is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use grasp_state::nostr::nip34::KIND_USER_GRASP_LIST;
use grasp_state::nostr::outbox::{participants, plan_pass, PassBounds, PassRepo, KIND_RELAY_LIST, MAX_PARTICIPANTS};
use nostr::prelude::{EventId, Filter, Kind, PublicKey, SingleLetterTag, Timestamp};
use serde::Serialize;
use tokio::sync::watch;

use super::index::RepoKey;
use super::lists::ListCache;
use super::query::Reach;
use super::wanted::{RepoInterest, RootIds, MAX_VALUES};
use super::Shared;
use crate::shutdown::Shutdown;
use crate::sync::relay_url::RelayUrl;

/// Participants whose lists one pass looks up at most.
pub const LOOKUPS_PER_PASS: usize = 512;

/// Relays asked for lists in one pass at most (the index relays first).
pub const LIST_RELAYS_PER_PASS: usize = 16;

/// A repository's own relays asked for its participants' lists (its first ones).
pub const REPO_RELAYS_ASKED: usize = 3;

/// List look-ups running at once.
pub const CONCURRENT_QUERIES: usize = 4;

/// Newest events of a repository's conversation read to find its participants (tagging it, and
/// replying to its newest root events).
const CONVERSATION_READ: usize = 200;

/// Served repositories whose participants one pass reads again from the store (besides those new
/// here or with new root events), those read longest ago first.
pub const PARTICIPANTS_PER_PASS: usize = 64;

/// The write bucket of a relay first followed for Sync+ (at most; `--relay-sync-rate` and
/// `--relay-sync-burst` when lower): any participant may name one, so what it may send is
/// bounded below what a relay an announcement lists may.
pub const OUTBOX_RATE: grasp_state::trust::rate::Rate = grasp_state::trust::rate::Rate { burst: 1000, per_second: 50.0 };

/// Served repositories whose participants one pass reads at most (at startup every repository
/// is new: the first passes read them this many at a time).
pub const MAX_READS_PER_PASS: usize = 512;

/// Relays kept in the operator view's error list.
const MAX_ERROR_RELAYS: usize = 64;

/// Sync+ settings.
#[derive(Debug, Clone)]
pub struct OutboxConfig {
    /// `--index-relay` (none with `--no-index-relays`).
    pub index_relays: Vec<String>,
    /// `--sync-plus-interval`.
    pub interval: Duration,
    /// `--sync-plus-list-refresh`.
    pub list_refresh: Duration,
    pub bounds: PassBounds,
    /// `<data>/sync-plus.json`.
    pub file: PathBuf,
}

/// What one pass hands the manager: each discovered relay and the repositories asked of it.
pub type Discovered = Arc<BTreeMap<RelayUrl, Vec<RepoKey>>>;

/// The operator's view of Sync+ (`GET /v1/sync`, `sync_plus`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OutboxStatus {
    pub index_relays: Vec<String>,
    /// Served repositories the last pass looked at.
    pub repositories: usize,
    /// Distinct participants of those repositories.
    pub participants: usize,
    /// Relay lists cached (kinds 10002 and 10317).
    pub lists_cached: usize,
    pub passes: u64,
    pub last_pass_ms: u64,
    /// Discovered relays the last pass named, and those it follows (at most
    /// `--sync-plus-max-relays`).
    pub candidates: usize,
    pub relays: usize,
    /// List look-ups: relays asked, lists received, failures.
    pub list_queries: u64,
    pub lists_received: u64,
    pub list_errors: u64,
    /// Events accepted from relays followed for Sync+.
    pub events_gained: u64,
    /// Per relay asked for lists: failures and the last one.
    pub errors: BTreeMap<String, RelayErrors>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RelayErrors {
    pub errors: u64,
    pub last_error: String,
}

/// One relay asked for lists: whom it was asked about, what it answered.
type LookUp = (RelayUrl, BTreeSet<PublicKey>, Result<Vec<nostr::prelude::Event>, super::query::QueryError>);

/// A repository's participants as last read, with the root events they were read with.
struct Participants {
    roots: RootIds,
    pass: u64,
    people: Vec<PublicKey>,
}

/// The Sync+ task.
pub struct Outbox {
    shared: Arc<Shared>,
    config: OutboxConfig,
    cache: ListCache,
    index_relays: Vec<RelayUrl>,
    discovered: watch::Sender<Discovered>,
    /// Participants per served repository, read from the store now and then.
    participants: HashMap<RepoKey, Participants>,
    pass_number: u64,
    /// The cache as last written (it is written only when it changed).
    saved: Option<ListCache>,
    shutdown: Shutdown,
}

/// Starts the task; the manager merges what the receiver gives into its plans.
pub fn start(shared: Arc<Shared>, config: OutboxConfig, shutdown: Shutdown) -> watch::Receiver<Discovered> {
    let (tx, rx) = watch::channel(Discovered::default());
    let index_relays = super::parse_relays(&config.index_relays, "index relay").into_iter().collect();
    let cache = ListCache::load(&config.file);
    let saved = Some(cache.clone());
    *shared.outbox.lock().unwrap() = Some(OutboxStatus { index_relays: config.index_relays.clone(), ..Default::default() });
    tracing::info!(index_relays = ?config.index_relays, interval = ?config.interval, "GRASP-03 Sync+: following the conversations of served repositories on their participants' relays");
    let outbox = Outbox { shared, config, cache, index_relays, discovered: tx, participants: HashMap::new(), pass_number: 0, saved, shutdown };
    tokio::spawn(outbox.run());
    rx
}

impl Outbox {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(self.config.interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.recv() => break,
                _ = tick.tick() => {}
            }
            if self.discovered.is_closed() {
                break;
            }
            // The interest index is built by the manager at startup: the first pass waits for it.
            let served = loop {
                if let Some(served) = self.shared.index.lock().unwrap().as_ref().map(|ix| ix.served()) {
                    break Some(served);
                }
                tokio::select! {
                    _ = shutdown.recv() => break None,
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            };
            let Some(served) = served else { break };
            tokio::select! {
                _ = shutdown.recv() => break,
                _ = self.pass(served) => {}
            }
        }
        self.save();
    }

    /// Writes the cache when it changed since it was last written.
    fn save(&mut self) {
        if self.saved.as_ref() == Some(&self.cache) {
            return;
        }
        match self.cache.save(&self.config.file) {
            Ok(()) => self.saved = Some(self.cache.clone()),
            Err(e) => tracing::warn!(path = %self.config.file.display(), error = %e, "writing the Sync+ list cache failed"),
        }
    }

    /// One pass (see the module doc).
    async fn pass(&mut self, served: Vec<RepoInterest>) {
        let started = Instant::now();
        let now = Timestamp::now().as_secs();
        self.pass_number += 1;
        // Participants read again: of repositories new here or with new root events, and of the
        // [`PARTICIPANTS_PER_PASS`] read longest ago (new replies show up within a few passes).
        let keys: HashSet<RepoKey> = served.iter().map(|r| (r.owner, r.identifier.clone())).collect();
        self.participants.retain(|k, _| keys.contains(k));
        let mut stale: Vec<(u64, usize)> = Vec::new();
        for (i, repo) in served.iter().enumerate() {
            match self.participants.get(&(repo.owner, repo.identifier.clone())) {
                Some(known) if Arc::ptr_eq(&known.roots, &repo.roots) => stale.push((known.pass, i)),
                _ => stale.push((0, i)),
            }
        }
        stale.sort();
        let fresh_ones = stale.iter().take_while(|(pass, _)| *pass == 0).count();
        for (_, i) in stale.into_iter().take(fresh_ones.clamp(PARTICIPANTS_PER_PASS, MAX_READS_PER_PASS)) {
            let repo = &served[i];
            let people = self.participants_of(repo).await;
            self.participants.insert((repo.owner, repo.identifier.clone()), Participants { roots: repo.roots.clone(), pass: self.pass_number, people });
        }
        let repos: Vec<(RepoInterest, Vec<PublicKey>)> = served
            .into_iter()
            .map(|repo| {
                let people = self.participants.get(&(repo.owner, repo.identifier.clone())).map(|p| p.people.clone()).unwrap_or_default();
                (repo, people)
            })
            .collect();
        let everyone: HashSet<PublicKey> = repos.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        self.cache.retain(&everyone);
        self.look_up(&repos, now).await;

        let policy = self.shared.policy.clone();
        let pass_repos: Vec<PassRepo<RelayUrl>> = repos
            .iter()
            .map(|(r, people)| PassRepo { key: r.coordinate(), participants: people.clone(), followed: r.relays.iter().cloned().collect() })
            .collect();
        let cache = &self.cache;
        let relays_of = |pk: &PublicKey| -> Vec<RelayUrl> {
            cache.relays_of(pk).iter().filter_map(|raw| RelayUrl::parse(raw).ok()).filter(|u| u.check(&policy).is_ok()).collect()
        };
        let mut position = self.cache.position.clone();
        let plan = plan_pass(&pass_repos, relays_of, |u| u.authority().to_string(), self.config.bounds, &mut position);
        self.cache.position = position;
        let keys: BTreeMap<String, RepoKey> = repos.iter().map(|(r, _)| (r.coordinate(), (r.owner, r.identifier.clone()))).collect();
        let discovered: BTreeMap<RelayUrl, Vec<RepoKey>> =
            plan.relays.into_iter().map(|(url, coords)| (url, coords.iter().filter_map(|c| keys.get(c).cloned()).collect())).collect();
        let relays = discovered.len();
        self.discovered.send_if_modified(|current| {
            let changed = **current != discovered;
            if changed {
                tracing::info!(relays, candidates = plan.candidates, "Sync+ plan changed: participants' relays followed");
                *current = Arc::new(discovered);
            }
            changed
        });
        let took = started.elapsed();
        let lists = self.cache.lists();
        {
            let mut guard = self.shared.outbox.lock().unwrap();
            let status = guard.get_or_insert_with(OutboxStatus::default);
            status.repositories = repos.len();
            status.participants = everyone.len();
            status.lists_cached = lists;
            status.passes += 1;
            status.last_pass_ms = took.as_millis() as u64;
            status.candidates = plan.candidates;
            status.relays = relays;
        }
        self.shared.grasp().metrics().sync_plus_pass(everyone.len(), lists, relays);
        tracing::debug!(repositories = repos.len(), participants = everyone.len(), lists, relays, took_ms = took.as_millis() as u64, "Sync+ pass");
        self.save();
    }

    /// The participants of `repo`: its maintainers, then the authors of the newest events of its
    /// conversation stored here.
    async fn participants_of(&self, repo: &RepoInterest) -> Vec<PublicKey> {
        let a = SingleLetterTag::from_char('a').expect("a letter");
        let mut filters = vec![Filter::new().custom_tag(a, repo.coordinate()).limit(CONVERSATION_READ)];
        let roots: Vec<EventId> = repo.roots.iter().rev().take(MAX_VALUES).copied().collect();
        if !roots.is_empty() {
            filters.push(Filter::new().events(roots).limit(CONVERSATION_READ));
        }
        let events = self.shared.grasp().query(filters).await;
        participants(&repo.maintainers, events.iter().map(|e| (e.pubkey, e.created_at)), MAX_PARTICIPANTS)
    }

    /// Offers the kind 10317 lists of `people` stored here to the cache.
    async fn lists_from_store(&mut self, people: &[PublicKey]) {
        for chunk in people.chunks(MAX_VALUES) {
            let filter = Filter::new().kind(Kind::Custom(KIND_USER_GRASP_LIST)).authors(chunk.iter().copied());
            for event in self.shared.grasp().query(vec![filter]).await {
                self.cache.offer(&event);
            }
        }
    }

    /// Looks up the lists of the participants due (see the module doc).
    async fn look_up(&mut self, repos: &[(RepoInterest, Vec<PublicKey>)], now: u64) {
        let refresh = self.config.list_refresh.as_secs();
        let mut due: Vec<PublicKey> = Vec::new();
        let mut seen: HashSet<PublicKey> = HashSet::new();
        for (_, people) in repos {
            for pk in people {
                if due.len() < LOOKUPS_PER_PASS && seen.insert(*pk) && self.cache.due(pk, now, refresh) {
                    due.push(*pk);
                }
            }
        }
        if due.is_empty() {
            return;
        }
        self.lists_from_store(&due).await;
        let due_set: BTreeSet<PublicKey> = due.iter().copied().collect();
        // The index relays ask about everyone due; each repository's first relays about its own.
        let mut asks: Vec<(RelayUrl, BTreeSet<PublicKey>)> = self.index_relays.iter().map(|u| (u.clone(), due_set.clone())).collect();
        // A repository's relays are asked only while relay sync follows them live: one that
        // fails, is down or answered `rate-limited:` gets no other connection from here.
        let live: HashSet<RelayUrl> = {
            let relays = self.shared.relays.lock().unwrap();
            relays.iter().filter(|(_, s)| s.lock().unwrap().state == super::stats::PeerState::Live).map(|(u, _)| u.clone()).collect()
        };
        let mut by_relay: BTreeMap<RelayUrl, BTreeSet<PublicKey>> = BTreeMap::new();
        for (repo, people) in repos {
            let wanted: Vec<PublicKey> = people.iter().filter(|p| due_set.contains(p)).copied().collect();
            if wanted.is_empty() {
                continue;
            }
            for relay in repo.relays.iter().filter(|u| live.contains(*u)).take(REPO_RELAYS_ASKED) {
                by_relay.entry(relay.clone()).or_default().extend(wanted.iter().copied());
            }
        }
        let mut repo_asks: Vec<(RelayUrl, BTreeSet<PublicKey>)> = by_relay.into_iter().filter(|(u, _)| !self.index_relays.contains(u)).collect();
        repo_asks.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        asks.extend(repo_asks);
        asks.truncate(LIST_RELAYS_PER_PASS);
        let reach = Reach { policy: &self.shared.policy, tls: &self.shared.tls, timeout: self.shared.config.timeout };
        let results: Vec<LookUp> =
            futures_util::stream::iter(asks)
                .map(|(url, authors)| async move {
                    let filters: Vec<Filter> = authors
                        .iter()
                        .copied()
                        .collect::<Vec<_>>()
                        .chunks(MAX_VALUES)
                        .map(|chunk| Filter::new().kinds([Kind::Custom(KIND_RELAY_LIST), Kind::Custom(KIND_USER_GRASP_LIST)]).authors(chunk.iter().copied()))
                        .collect();
                    let result = reach.query(&url, filters, 2 * authors.len() + 16).await;
                    (url, authors, result)
                })
                .buffer_unordered(CONCURRENT_QUERIES)
                .collect()
                .await;
        let mut received = 0u64;
        let mut failures: Vec<(String, String)> = Vec::new();
        for (url, authors, result) in &results {
            match result {
                Ok(events) => {
                    for event in events.iter().filter(|e| authors.contains(&e.pubkey)) {
                        if self.cache.offer(event) {
                            received += 1;
                            tracing::debug!(relay = %url, author = %event.pubkey, kind = event.kind.as_u16(), "Sync+ took a newer relay list");
                        }
                    }
                }
                Err(e) => {
                    tracing::info!(relay = %url, error = %e, "Sync+ list look-up failed");
                    failures.push((url.to_string(), e.to_string()));
                }
            }
        }
        for pk in &due {
            self.cache.looked_up(pk, now);
        }
        let mut guard = self.shared.outbox.lock().unwrap();
        let status = guard.get_or_insert_with(OutboxStatus::default);
        status.list_queries += results.len() as u64;
        status.lists_received += received;
        status.list_errors += failures.len() as u64;
        for (url, error) in failures {
            self.shared.grasp().metrics().sync_plus_list_error();
            if status.errors.len() >= MAX_ERROR_RELAYS && !status.errors.contains_key(&url) {
                continue;
            }
            let entry = status.errors.entry(url).or_default();
            entry.errors += 1;
            entry.last_error = error.chars().take(300).collect();
        }
    }
}
