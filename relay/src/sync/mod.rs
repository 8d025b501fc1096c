//! Background git-data sync: fetch from other servers what purgatory is waiting for.
//!
//! When a state or PR event is accepted before its git data, the relay does not wait forever for a
//! push: after a delay it fetches the missing objects from the other clone URLs it knows, then lets
//! the purgatory release whatever became satisfiable, exactly as after a push.
//!
//! Layout:
//! - [`queue`]: per-identifier schedule (3 min after a user event, 500 ms after a synced one,
//!   backoff 20 s, 40 s, then 2 min), pure over an injected `now`.
//! - [`throttle`]: per-domain concurrency and per-minute limits with a fair line of waiters.
//! - [`urls`]: which clone URLs are safe to fetch from (http(s) only, deny-list after DNS).
//! - which URLs one attempt tries, in which order (by trust, at most 20, 10 per event), is
//!   `grasp_state::git::clone_sources`; an attempt ends after [`SyncConfig::attempt_timeout`].
//! - [`fetch`]: `git fetch <url> <oid>...` without writing refs, dropping oids a remote lacks.
//! - [`quarantine`]: the repository a fetch writes into, without the repository lock; its
//!   objects are moved into the real repository under the lock.
//! - this file: the [`SyncContext`] the GRASP brain implements, and the [`Syncer`] loop.
//! - [`context`]: that implementation for `Arc<Grasp>`, and [`context::start`], the daemon's
//!   wiring (enqueue through `Grasp::set_on_waiting`, stats for the operator view, stop on
//!   shutdown).
//!
//! The syncer never writes refs: it only adds objects to a repository (fetched into a quarantine
//! without any lock, then moved in under the repository lock shared with the push flow) and then
//! calls [`SyncContext::process`], which releases events and
//! aligns refs through the normal path.

pub mod context;
pub mod fetch;
pub mod quarantine;
pub mod queue;
pub mod relay_url;
pub mod throttle;
pub mod urls;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use grasp_state::git::clone_sources::{plan_sync_urls, CloneSource, UrlLimits};
use serde::Serialize;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use crate::config::{GitSyncConfig, LimitsConfig, RelaySyncConfig, ServerConfig, TrustConfig};
use crate::trust::credentials::GitCredential;

pub use context::{start, SyncHandle};
pub use fetch::{fetch_oids, missing_objects, FetchOptions, FetchOutcome};
pub use quarantine::Quarantine;
pub use queue::{Origin, Outcome, QueueTimings, SyncQueue, SyncQueueEntry};
pub use throttle::{DomainStats, Permit, Throttle, ThrottleLimits, ThrottledUntil};
pub use urls::{Cidr, CloneUrl, SafeUrl, UrlPolicy, UrlRejected};

/// Objects one local repository still waits for (none: they are all there but still held, so the
/// release is due again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncTarget {
    /// The bare repository the objects must end up in.
    pub repo: PathBuf,
    /// Full object ids (commits) purgatory waits for in that repository.
    pub oids: Vec<String>,
}

/// What the syncer needs from the rest of the relay (implemented by the GRASP brain).
pub trait SyncContext: Send + Sync + 'static {
    /// Guard of the per-repository lock; held while objects are fetched into a repository.
    type RepoGuard: Send;

    /// What purgatory still waits for under `identifier`, per local repository. Empty when
    /// nothing waits (the sync is then complete). A target without oids: events wait there
    /// although their objects are present (a release did not finish); the syncer runs
    /// [`SyncContext::process`] again.
    fn needed(&self, identifier: &str) -> impl Future<Output = Vec<SyncTarget>> + Send;

    /// Where clone URLs come from, each with its publisher's trust: the announcements for
    /// `identifier` (stored and in purgatory) and the `clone` tags of waiting PR events. The
    /// syncer picks and orders them ([`plan_sync_urls`]) and skips unsafe ones and this
    /// server's own.
    fn candidate_urls(&self, identifier: &str) -> impl Future<Output = Vec<CloneSource>> + Send;

    /// Take the lock on `repo` shared with the push flow (held only while fetched objects are
    /// moved in from their quarantine, never during a fetch), waiting a bounded time; `None`
    /// when it stayed busy (the objects are fetched again on the next attempt).
    fn lock_repo(&self, repo: &Path) -> impl Future<Output = Option<Self::RepoGuard>> + Send;

    /// Release whatever under `identifier` is now satisfiable; returns how many events were
    /// released.
    fn process(&self, identifier: &str) -> impl Future<Output = usize> + Send;

    /// A sync task for `identifier` starts (true) or ends (false); the expiry sweep skips the
    /// identifier's purgatory entries while it runs.
    fn set_sync_running(&self, identifier: &str, running: bool);

    /// One `git fetch` finished after `took` (the operator's metrics; nothing by default).
    fn fetched(&self, _outcome: &FetchOutcome, _took: Duration) {}

    /// One sync attempt for an identifier finished (the operator's metrics; nothing by default).
    fn attempted(&self, _outcome: &Outcome) {}
    /// Fetched objects were moved into `repo` (no receive-pack ran there: maintenance is the
    /// relay's to schedule).
    fn objects_moved_in(&self, _repo: &Path) {}
}

/// What a private service proves when it fetches git data from another private service
/// (GRASP-08 `Authorization: Nostr`, docs/protocol.md#trust): nothing on a public service.
#[derive(Debug, Clone, Default)]
pub struct PrivateFetch {
    /// To another replica of its set: its own key, naming the repository on the service's
    /// domain (docs/scaling.md, "A private replica set").
    pub replica: Option<crate::trust::credentials::ReplicaIdentity>,
    /// To a `--private-sync-peer`: its service key, naming the clone URL fetched.
    pub service_key: Option<nostr::prelude::Keys>,
}

impl PrivateFetch {
    /// The proof for fetching `url`; `replica`: whether it is one of the operator's replicas.
    pub fn for_url(&self, url: &CloneUrl, replica: bool) -> Option<GitCredential> {
        match (&self.replica, &self.service_key) {
            (Some(me), _) if replica => Some(me.git_credential(url.path())),
            (_, Some(keys)) => Some(GitCredential::new(keys.clone(), url.url.clone())),
            _ => None,
        }
    }
}

/// Everything configurable about background sync.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    pub queue: QueueTimings,
    pub throttle: ThrottleLimits,
    /// Per git invocation timeout and slow-transfer abort.
    pub fetch: FetchOptions,
    /// Disable the default deny-list of loopback/private ranges (tests, private deployments).
    pub allow_private: bool,
    /// Ranges denied in addition to (or, with `allow_private`, instead of) the defaults.
    pub extra_denied: Vec<Cidr>,
    /// This server's own `host` or `host:port`, never fetched from.
    pub own_hosts: Vec<String>,
    /// How often the loop looks for ready identifiers (it also wakes on enqueue).
    pub tick: Duration,
    /// At most this many identifiers sync at once.
    pub max_parallel: usize,
    /// A private service: fetch only from these `host` / `host:port` peers (`None`: any peer).
    pub only_peers: Option<Vec<String>>,
    /// The operator's replicas (`--replica`, `host:port`): trusted on any address.
    pub replicas: Vec<String>,
    /// A private service's proofs for the private services it fetches from (set by the caller).
    pub credentials: PrivateFetch,
    /// One attempt for an identifier ends after this long, whatever its URLs do.
    pub attempt_timeout: Duration,
    /// Clone URLs one attempt takes per source and in all.
    pub url_limits: UrlLimits,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            queue: QueueTimings::default(),
            throttle: ThrottleLimits::default(),
            fetch: FetchOptions::default(),
            allow_private: false,
            extra_denied: Vec::new(),
            own_hosts: Vec::new(),
            tick: Duration::from_secs(1),
            max_parallel: 16,
            only_peers: None,
            replicas: Vec::new(),
            credentials: PrivateFetch::default(),
            attempt_timeout: Duration::from_secs(10 * 60),
            url_limits: UrlLimits::default(),
        }
    }
}

/// Figures for the admin view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncStats {
    /// Identifiers queued (waiting or running).
    pub queue_length: usize,
    /// Identifiers with a running sync, sorted.
    pub in_progress: Vec<String>,
    pub domains: Vec<DomainStats>,
    /// Queued identifiers (at most [`MAX_LISTED_IDENTIFIERS`]), soonest attempt first.
    pub identifiers: Vec<IdentifierStats>,
}

/// One queued identifier in the admin view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdentifierStats {
    pub identifier: String,
    pub in_progress: bool,
    /// Failed attempts since the last new event for the identifier.
    pub attempt_count: u32,
    /// Milliseconds until the next attempt (0 when due or running).
    pub next_attempt_in_ms: u64,
    /// The delay chosen when the identifier was last scheduled (initial delay, backoff, or the
    /// wait for a throttled domain), in milliseconds.
    pub last_delay_ms: u64,
}

impl SyncStats {
    /// What the metrics read at scrape time: identifiers queued, syncs running, domains whose
    /// last fetch failed.
    pub fn gauges(&self) -> (usize, usize, usize) {
        (self.queue_length, self.in_progress.len(), self.domains.iter().filter(|d| d.last_error.is_some()).count())
    }
}

/// Cap on [`SyncStats::identifiers`], so the admin view stays small under a flood.
pub const MAX_LISTED_IDENTIFIERS: usize = 1000;

/// Source of `Instant`s; injectable so tests control time.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// How long a domain's last error stays visible once the domain is idle.
const KEEP_ERRORS_FOR: Duration = Duration::from_secs(3600);

/// The background sync engine. Clones share state: keep one to [`Syncer::enqueue`] and
/// [`Syncer::stats`], give one to [`Syncer::run`].
pub struct Syncer<C: SyncContext> {
    shared: Arc<Shared<C>>,
}

impl<C: SyncContext> Clone for Syncer<C> {
    fn clone(&self) -> Self {
        Syncer {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<C> {
    ctx: C,
    config: SyncConfig,
    queue: Mutex<SyncQueue>,
    throttle: Throttle,
    policy: UrlPolicy,
    clock: Clock,
    wake: Notify,
}

impl<C: SyncContext> Syncer<C> {
    pub fn new(ctx: C, config: SyncConfig) -> Self {
        Syncer::with_clock(ctx, config, Arc::new(Instant::now))
    }

    /// Like [`Syncer::new`] with an injected clock (tests).
    pub fn with_clock(ctx: C, config: SyncConfig, clock: Clock) -> Self {
        let mut policy = UrlPolicy::new(
            config.allow_private,
            &config.extra_denied,
            &config.own_hosts,
        );
        if let Some(peers) = &config.only_peers {
            policy = policy.only_peers(peers);
        }
        policy = policy.trusting(&config.replicas);
        Syncer {
            shared: Arc::new(Shared {
                queue: Mutex::new(SyncQueue::new(config.queue.clone())),
                throttle: Throttle::new(config.throttle.clone()),
                policy,
                ctx,
                config,
                clock,
                wake: Notify::new(),
            }),
        }
    }

    /// The context given at construction.
    pub fn context(&self) -> &C {
        &self.shared.ctx
    }

    /// Schedule a sync of `identifier` because an event arrived whose git data is missing.
    pub fn enqueue(&self, identifier: &str, origin: Origin) {
        let now = (self.shared.clock)();
        self.shared.queue().enqueue(identifier, origin, now);
        self.shared.wake.notify_one();
    }

    /// Forget `identifier` (e.g. all its purgatory entries expired). A running task finishes,
    /// then the entry is dropped whatever its outcome.
    pub fn remove(&self, identifier: &str) {
        self.shared.queue().remove(identifier);
        self.shared.throttle.forget(identifier);
    }

    /// Whether a sync task for `identifier` is running now.
    pub fn is_running(&self, identifier: &str) -> bool {
        self.shared.queue().is_running(identifier)
    }

    /// The catch-up pass of a replica back from a stop ([`SyncQueue::begin_catch_up`]): begun on
    /// the first call (what is queued then is due at once, and the loop is woken for it); how
    /// many are still to be tried.
    pub fn catch_up(&self) -> usize {
        let now = (self.shared.clock)();
        let (began, left) = {
            let mut queue = self.shared.queue();
            (queue.begin_catch_up(now), queue.catching_up())
        };
        if began {
            self.shared.wake.notify_one();
        }
        left
    }

    /// The queue entry of `identifier`, if queued.
    pub fn entry(&self, identifier: &str) -> Option<SyncQueueEntry> {
        self.shared.queue().entry(identifier).cloned()
    }

    pub fn stats(&self) -> SyncStats {
        let now = (self.shared.clock)();
        let (queue_length, in_progress, mut identifiers) = {
            let queue = self.shared.queue();
            let identifiers: Vec<IdentifierStats> = queue
                .entries()
                .map(|(identifier, entry)| IdentifierStats {
                    identifier: identifier.to_string(),
                    in_progress: entry.in_progress,
                    attempt_count: entry.attempt_count,
                    next_attempt_in_ms: if entry.in_progress {
                        0
                    } else {
                        millis(entry.next_attempt.saturating_duration_since(now))
                    },
                    last_delay_ms: millis(entry.last_delay),
                })
                .collect();
            (queue.len(), queue.in_progress(), identifiers)
        };
        identifiers.sort_by(|a, b| {
            (!a.in_progress, a.next_attempt_in_ms, &a.identifier).cmp(&(
                !b.in_progress,
                b.next_attempt_in_ms,
                &b.identifier,
            ))
        });
        identifiers.truncate(MAX_LISTED_IDENTIFIERS);
        SyncStats {
            queue_length,
            in_progress,
            domains: self.shared.throttle.stats(now),
            identifiers,
        }
    }

    /// Run until `shutdown` becomes true (or its sender is dropped): start a task for every ready
    /// identifier, at most `max_parallel` at a time. Running tasks are aborted on shutdown (git is
    /// killed; the objects fetched so far stay, refs are untouched).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let shared = self.shared;
        let mut tasks = JoinSet::new();
        loop {
            if *shutdown.borrow() {
                break;
            }
            while let Some(result) = tasks.try_join_next() {
                if let Err(error) = result {
                    tracing::error!(%error, "sync task failed");
                }
            }
            let now = (shared.clock)();
            let ready = shared.queue().ready(now);
            for identifier in ready {
                if tasks.len() >= shared.config.max_parallel.max(1) {
                    break;
                }
                if shared.queue().start(&identifier) {
                    tasks.spawn(Shared::sync_task(shared.clone(), identifier));
                }
            }
            shared
                .throttle
                .prune(now, SystemTime::now(), KEEP_ERRORS_FOR);
            // Sleep until the next deadline, at most one tick. A deadline already due means the
            // parallelism cap is reached: a finishing task (or the tick) wakes the loop.
            let tick = shared.config.tick;
            let wait = match shared.queue().next_deadline() {
                Some(deadline) if deadline > now => (deadline - now).min(tick),
                _ => tick,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shared.wake.notified() => {}
                changed = shutdown.changed() => if changed.is_err() { break },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.shutdown().await;
        tracing::info!("background sync stopped");
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Ends a sync task even if it panics or is aborted: clears the running flag and reschedules.
struct TaskGuard<C: SyncContext> {
    shared: Arc<Shared<C>>,
    identifier: String,
    outcome: Option<Outcome>,
}

impl<C: SyncContext> Drop for TaskGuard<C> {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or(Outcome::Incomplete);
        self.shared.ctx.set_sync_running(&self.identifier, false);
        if outcome == Outcome::Complete {
            self.shared.throttle.forget(&self.identifier);
        }
        let now = (self.shared.clock)();
        self.shared.queue().finish(&self.identifier, outcome, now);
    }
}

impl<C: SyncContext> Shared<C> {
    fn queue(&self) -> MutexGuard<'_, SyncQueue> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn sync_task(shared: Arc<Self>, identifier: String) {
        shared.ctx.set_sync_running(&identifier, true);
        let mut guard = TaskGuard {
            shared: shared.clone(),
            identifier,
            outcome: None,
        };
        let outcome = shared.sync_identifier(&guard.identifier).await;
        shared.ctx.attempted(&outcome);
        tracing::debug!(identifier = %guard.identifier, ?outcome, "sync attempt finished");
        guard.outcome = Some(outcome);
    }

    /// One attempt: try the candidate URLs in order until nothing is needed any more.
    async fn sync_identifier(&self, identifier: &str) -> Outcome {
        let targets = self.ctx.needed(identifier).await;
        if targets.is_empty() {
            return Outcome::Complete;
        }
        if targets.iter().all(|target| target.oids.is_empty()) {
            // Everything waited for is here, yet still held: a release did not finish (the
            // store failed). Run it again; if it still does not finish, back off and retry.
            let released = self.ctx.process(identifier).await;
            tracing::info!(identifier, released, "retried the release of data already here");
            return if self.ctx.needed(identifier).await.is_empty() { Outcome::Complete } else { Outcome::Incomplete };
        }
        let sources = self.ctx.candidate_urls(identifier).await;
        let urls = plan_sync_urls(&sources, self.config.url_limits);
        let timeout = self.config.attempt_timeout;
        match tokio::time::timeout(timeout, self.try_urls(identifier, urls, targets)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                // Dropping the attempt kills its git processes and removes its quarantines;
                // what it already moved in stays, and was released as it came.
                tracing::info!(identifier, timeout_secs = timeout.as_secs(), "sync attempt ran out of time; retried after backoff");
                Outcome::Incomplete
            }
        }
    }

    /// Try `urls` in order until nothing is needed any more.
    async fn try_urls(&self, identifier: &str, urls: Vec<String>, mut targets: Vec<SyncTarget>) -> Outcome {
        let mut throttled_until: Option<Instant> = None;
        let mut fetched_anywhere = false;
        for url in urls {
            let safe = match self.policy.resolve(&url).await {
                Ok(safe) => safe,
                Err(rejected) => {
                    if let UrlRejected::Resolve { host, .. } = &rejected {
                        self.throttle
                            .record_error(host, &rejected.to_string(), SystemTime::now());
                    }
                    tracing::debug!(identifier, url, reason = %rejected, "clone URL skipped");
                    continue;
                }
            };
            let attempt = self.sync_from_url(identifier, &safe, &targets).await;
            fetched_anywhere |= attempt.fetched;
            if let Some(ThrottledUntil(until)) = attempt.throttled {
                tracing::debug!(
                    identifier,
                    url,
                    domain = safe.url.domain(),
                    "domain throttled"
                );
                throttled_until = Some(throttled_until.map_or(until, |t| t.min(until)));
            }
            if !attempt.progressed {
                continue;
            }
            let released = self.ctx.process(identifier).await;
            tracing::info!(identifier, url, released, "synced git data");
            targets = self.ctx.needed(identifier).await;
            if targets.iter().all(|target| target.oids.is_empty()) {
                return Outcome::Complete;
            }
        }
        // Only throttled: come back when the domain frees. Otherwise back off, so failing URLs
        // are not retried at the throttle's pace.
        match throttled_until {
            Some(until) if !fetched_anywhere => Outcome::Throttled { until },
            _ => Outcome::Incomplete,
        }
    }

    /// Fetch the still-missing oids of every target from one URL.
    async fn sync_from_url(
        &self,
        identifier: &str,
        safe: &SafeUrl,
        targets: &[SyncTarget],
    ) -> UrlAttempt {
        let domain = safe.url.domain();
        let options = FetchOptions {
            curl_resolve: safe.curl_resolve(),
            credential: self.config.credentials.for_url(&safe.url, self.policy.is_trusted(&safe.url)),
            ..self.config.fetch.clone()
        };
        let mut attempt = UrlAttempt::default();
        for target in targets.iter().filter(|target| !target.oids.is_empty()) {
            let missing = match missing_objects(&target.repo, &target.oids).await {
                Ok(missing) => missing,
                Err(error) => {
                    tracing::warn!(identifier, repo = %target.repo.display(), %error, "cannot inspect repository");
                    continue;
                }
            };
            if missing.len() < target.oids.len() {
                attempt.progressed = true;
            }
            if missing.is_empty() {
                continue;
            }
            let permit = match self
                .throttle
                .try_acquire(domain, identifier, (self.clock)())
            {
                Ok(permit) => permit,
                Err(throttled) => {
                    attempt.throttled = Some(throttled);
                    return attempt;
                }
            };
            attempt.fetched = true;
            // The remote is slow at worst: fetch without the repository lock, into a quarantine,
            // so pushes and releases of this repository go on meanwhile.
            let quarantine = match Quarantine::create(&target.repo).await {
                Ok(quarantine) => quarantine,
                Err(error) => {
                    tracing::warn!(identifier, repo = %target.repo.display(), %error, "cannot create a sync quarantine");
                    continue;
                }
            };
            let started = Instant::now();
            let outcome = fetch_oids(quarantine.path(), &safe.url.url, &missing, &options).await;
            self.ctx.fetched(&outcome, started.elapsed());
            drop(permit);
            if let Some(error) = &outcome.error {
                self.throttle.record_error(domain, error, SystemTime::now());
                tracing::warn!(identifier, url = safe.url.url, repo = %target.repo.display(), %error, "sync fetch failed");
            }
            if !outcome.missing_on_remote.is_empty() {
                tracing::debug!(identifier, url = safe.url.url, lacking = ?outcome.missing_on_remote, "remote lacks objects");
            }
            if outcome.fetched.is_empty() {
                continue;
            }
            // Only moving the objects in needs the lock: a few renames.
            let Some(lock) = self.ctx.lock_repo(&target.repo).await else {
                tracing::info!(identifier, repo = %target.repo.display(), "repository busy; synced objects are fetched again on the next attempt");
                continue;
            };
            match quarantine.apply().await {
                Ok(moved) => {
                    attempt.progressed = true;
                    if moved > 0 {
                        self.ctx.objects_moved_in(&target.repo);
                    }
                }
                Err(error) => {
                    tracing::warn!(identifier, repo = %target.repo.display(), %error, "cannot move synced objects into the repository")
                }
            }
            drop(lock);
        }
        attempt
    }
}

/// What trying one URL achieved.
#[derive(Debug, Default)]
struct UrlAttempt {
    /// Something needed is now present locally (fetched or already there).
    progressed: bool,
    /// At least one fetch was made.
    fetched: bool,
    /// The domain turned us away; later targets were not tried.
    throttled: Option<ThrottledUntil>,
}

impl SyncConfig {
    /// Background sync settings from the sections it reads: `[git-sync]`, and what it shares
    /// with the rest: the push size cap (`--max-push-bytes`, the default fetch cap), this
    /// server's own hosts (never fetched from), a private service's sync peers, the replicas.
    pub fn from_sections(git_sync: &GitSyncConfig, limits: &LimitsConfig, server: &ServerConfig, trust: &TrustConfig, relay_sync: &RelaySyncConfig) -> SyncConfig {
        // The former `-ms` flags, when given, win over the defaults of the new ones (clap refuses
        // both names at once).
        let either = |ms: Option<u64>, d: Duration| ms.map_or(d, Duration::from_millis);
        SyncConfig {
            queue: QueueTimings {
                user_delay: either(git_sync.sync_user_delay_ms, git_sync.sync_user_delay),
                sync_delay: either(git_sync.sync_delay_ms, git_sync.sync_delay),
                backoff_base: either(git_sync.sync_backoff_ms, git_sync.sync_backoff),
                backoff_cap: either(git_sync.sync_backoff_cap_ms, git_sync.sync_backoff_cap),
            },
            throttle: ThrottleLimits {
                max_concurrent: git_sync.sync_domain_concurrency.max(1),
                max_per_window: git_sync.sync_domain_per_minute.max(1),
                window: Duration::from_secs(60),
                ..ThrottleLimits::default()
            },
            fetch: FetchOptions {
                timeout: git_sync.sync_fetch_timeout.max(Duration::from_secs(1)),
                max_bytes: git_sync.sync_max_fetch_bytes.unwrap_or(limits.max_push_bytes),
                ..FetchOptions::default()
            },
            allow_private: git_sync.sync_allow_private,
            extra_denied: git_sync.sync_deny.clone(),
            own_hosts: server.own_hosts(),
            max_parallel: git_sync.sync_max_parallel.max(1),
            attempt_timeout: git_sync.sync_attempt_timeout(),
            only_peers: trust.private.then(|| trust.private_sync_peer.iter().map(|p| git_sync_peer(p)).collect()),
            replicas: relay_sync.replica.iter().map(|r| r.host_port.clone()).collect(),
            ..SyncConfig::default()
        }
    }
}

/// The `host[:port]` git sync may fetch from for a `--private-sync-peer` entry: a relay URL's
/// authority (its clone URLs share it), else the entry as written.
fn git_sync_peer(peer: &str) -> String {
    match relay_url::RelayUrl::parse(peer) {
        Ok(url) if crate::config::is_relay_url(peer) => url.authority().to_string(),
        _ => peer.to_string(),
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::Config;
    use clap::{CommandFactory, Parser};

    /// The sync settings of `git_sync` and `server`, the other sections at their defaults.
    fn sync_of(git_sync: &GitSyncConfig, server: &ServerConfig) -> SyncConfig {
        SyncConfig::from_sections(git_sync, &LimitsConfig::default(), server, &TrustConfig::default(), &RelaySyncConfig::default())
    }

    /// The sync settings of `git_sync`, the other sections at their defaults.
    fn git_sync_of(git_sync: &GitSyncConfig) -> SyncConfig {
        sync_of(git_sync, &ServerConfig::default())
    }

    /// A server section with `--public-host`.
    fn public_host(host: &str) -> ServerConfig {
        ServerConfig { public_host: Some(host.into()), ..ServerConfig::default() }
    }

    #[test]
    fn a_private_service_proves_itself_to_replicas_and_peers() {
        let (me, service) = (nostr::prelude::Keys::generate(), nostr::prelude::Keys::generate());
        let replica = CloneUrl::parse("http://10.0.0.2:8080/npub1x/my%20repo.git").unwrap();
        let peer = CloneUrl::parse("https://peer.example/npub1x/r.git").unwrap();
        assert_eq!(PrivateFetch::default().for_url(&replica, true), None, "a public service proves nothing");
        let private = PrivateFetch {
            replica: Some(crate::trust::credentials::ReplicaIdentity::new(me.clone(), "git.example.com")),
            service_key: Some(service.clone()),
        };
        // To a replica: its own key, the repository named on the service's domain.
        assert_eq!(private.for_url(&replica, true), Some(GitCredential::new(me, "https://git.example.com/npub1x/my%20repo.git")));
        // To a peer: the service key, the clone URL itself.
        assert_eq!(private.for_url(&peer, false), Some(GitCredential::new(service, "https://peer.example/npub1x/r.git")));
    }

    #[test]
    fn sync_defaults_follow_the_design() {
        let sync = sync_of(&GitSyncConfig::default(), &public_host("git.example.com"));
        assert_eq!(sync.queue, QueueTimings::default());
        assert_eq!(sync.throttle, ThrottleLimits::default());
        assert_eq!(sync.fetch, FetchOptions::default());
        assert!(!sync.allow_private);
        assert!(sync.extra_denied.is_empty());
        assert_eq!(sync.own_hosts, ["git.example.com", "127.0.0.1:8080"]);
    }

    #[test]
    fn sync_flags() {
        let cfg = Config::parse_from([
            "grasp-relay",
            "--sync-user-delay", "200ms",
            "--sync-delay", "10ms",
            "--sync-backoff", "300ms",
            "--sync-backoff-cap", "900ms",
            "--sync-domain-concurrency", "1",
            "--sync-domain-per-minute", "2",
            "--sync-fetch-timeout", "7",
            "--sync-allow-private",
            "--sync-deny", "10.1.0.0/16,192.0.2.1",
            "--sync-deny", "fc00::/7",
        ]);
        let sync = git_sync_of(&cfg.git_sync);
        let ms = std::time::Duration::from_millis;
        assert_eq!(sync.queue.user_delay, ms(200));
        assert_eq!(sync.queue.sync_delay, ms(10));
        assert_eq!(sync.queue.backoff(1), ms(300));
        assert_eq!(sync.queue.backoff(2), ms(600));
        assert_eq!(sync.queue.backoff(3), ms(900));
        assert_eq!(sync.throttle.max_concurrent, 1);
        assert_eq!(sync.throttle.max_per_window, 2);
        assert_eq!(sync.fetch.timeout, std::time::Duration::from_secs(7));
        assert!(sync.allow_private);
        let denied: Vec<String> = sync.extra_denied.iter().map(|c| c.to_string()).collect();
        assert_eq!(denied, ["10.1.0.0/16", "192.0.2.1/32", "fc00::/7"]);
        assert!(Config::try_parse_from(["grasp-relay", "--sync-deny", "10.0.0.0/33"]).is_err());
    }

    #[test]
    fn former_millisecond_sync_flags_still_work() {
        let cfg = Config::parse_from([
            "grasp-relay",
            "--sync-user-delay-ms", "200",
            "--sync-delay-ms", "10",
            "--sync-backoff-ms", "300",
            "--sync-backoff-cap-ms", "900",
        ]);
        let (sync, ms) = (git_sync_of(&cfg.git_sync), Duration::from_millis);
        assert_eq!((sync.queue.user_delay, sync.queue.sync_delay), (ms(200), ms(10)));
        assert_eq!((sync.queue.backoff(1), sync.queue.backoff(3)), (ms(300), ms(900)));
        // The new names take units; a bare number is seconds, as for every other duration.
        let cfg = Config::parse_from(["grasp-relay", "--sync-user-delay", "2", "--sync-backoff-cap", "1h", "--sync-fetch-timeout", "90s"]);
        assert_eq!(git_sync_of(&cfg.git_sync).queue.user_delay, Duration::from_secs(2));
        assert_eq!(git_sync_of(&cfg.git_sync).queue.backoff_cap, Duration::from_secs(3600));
        assert_eq!(git_sync_of(&cfg.git_sync).fetch.timeout, Duration::from_secs(90));
        let short = GitSyncConfig { sync_fetch_timeout: Duration::from_millis(1), ..GitSyncConfig::default() };
        assert_eq!(git_sync_of(&short).fetch.timeout, Duration::from_secs(1));
        // Old and new name together is ambiguous.
        assert!(Config::try_parse_from(["grasp-relay", "--sync-delay", "1s", "--sync-delay-ms", "5"]).is_err());
        assert!(Config::try_parse_from(["grasp-relay", "--sync-delay", "5 parsecs"]).is_err());
        // Their environment variables are unchanged, and hidden from --help like the flags.
        let cmd = Config::command();
        for (id, env) in [
            ("sync_user_delay_ms", "GRASP_SYNC_USER_DELAY_MS"),
            ("sync_delay_ms", "GRASP_SYNC_DELAY_MS"),
            ("sync_backoff_ms", "GRASP_SYNC_BACKOFF_MS"),
            ("sync_backoff_cap_ms", "GRASP_SYNC_BACKOFF_CAP_MS"),
        ] {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env));
            assert!(arg.is_hide_set());
        }
    }

    #[test]
    fn a_public_host_with_a_scheme_still_names_this_server_for_sync() {
        for configured in ["https://git.example.com", "https://git.example.com/", "git.example.com/"] {
            let server = public_host(configured);
            assert_eq!(server.public_host(), configured, "the pages keep the scheme");
            assert_eq!(sync_of(&GitSyncConfig::default(), &server).own_hosts, ["git.example.com", "127.0.0.1:8080"], "{configured}");
            let policy = crate::sync::UrlPolicy::new(false, &[], &sync_of(&GitSyncConfig::default(), &server).own_hosts);
            for own in ["https://git.example.com/npub1x/r.git", "http://git.example.com:8080/npub1x/r.git"] {
                assert!(matches!(policy.check(own), Err(crate::sync::UrlRejected::OwnServer(_))), "{configured}: {own}");
            }
        }
        let port = public_host("http://git.example.com:8080/");
        assert_eq!(sync_of(&GitSyncConfig::default(), &port).own_hosts[0], "git.example.com:8080");
    }
}
