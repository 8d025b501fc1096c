//! Operator metrics and health probes.
//!
//! [`Metrics`] owns every Prometheus family of the relay, registered once at startup in one
//! `prometheus-client` registry. It is created by the daemon, kept on [`crate::grasp::Grasp`]
//! (`grasp.metrics`), and recorded with one short call at each site (`metrics.event(..)`,
//! `metrics.push_authorization(..)`, ...). Label values are always from small fixed sets (event
//! kinds outside the NIP-34 ones become `other`, refusal reasons are the NIP-01 prefix), so a
//! hostile client cannot grow the series count.
//!
//! Layout:
//! - this file: the families and the recording methods;
//! - [`server`]: the separate metrics listener (`--metrics-bind`, off by default) serving
//!   `/metrics` (Prometheus text format 0.0.4), `/healthz` and `/readyz`;
//! - [`health`]: the readiness checks, shared by the metrics listener and the hook API.
//!
//! Gauges that describe state held elsewhere (purgatory entries, sync queue, open connections)
//! are read at scrape time ([`Metrics::refresh_purgatory`], [`Metrics::refresh_sync`]), never
//! kept in step by hand. See docs/deployment.md for the list of families.


use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use grasp_state::contract::hook_api::{PostReceiveResponse, PreReceiveResponse, ReleasedEvent};
use grasp_state::purgatory::{PurgatoryStats, SweepAction};
use hyper::body::{Frame, SizeHint};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::net::connection_limits::Refusal;
use crate::net::http::Body;

/// `Content-Type` of `/metrics`: the Prometheus text exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, 5 ms to about 160 s (a big clone or push).
fn duration_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    kind: &'static str,
    /// `stored`, `held`, `duplicate` or `refused`.
    outcome: &'static str,
    /// The NIP-01 prefix of the answer (`blocked`, `invalid`, ...); empty when there is none.
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurgatoryLabels {
    r#type: &'static str,
    /// `waiting` (for git data) or `soft_expired` (repository deleted, kept for revival).
    level: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    hook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GitLabels {
    service: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GitRequestLabels {
    service: &'static str,
    /// `2xx`, `3xx`, `4xx` or `5xx`.
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Every metric family of the relay. Cheap to record into from any task (atomics, and a
/// read lock per labelled family).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    // Public listener and WebSocket connections.
    connections_open: Gauge,
    connections_refused: Family<ReasonLabels, Counter>,
    websocket_open: Gauge,
    websocket_connections: Counter,
    // Events submitted by clients.
    events_received: Family<KindLabels, Counter>,
    events: Family<EventLabels, Counter>,
    // Purgatory.
    purgatory_entries: Family<PurgatoryLabels, Gauge>,
    purgatory_expired_ids: Gauge,
    purgatory_expiries: Family<TypeLabels, Counter>,
    purgatory_releases: Family<KindLabels, Counter>,
    // Unsigned data of git-first pushes (docs/protocol.md#caps).
    unsigned_bytes: Gauge,
    unsigned_addresses: Gauge,
    unsigned_refusals: Family<ScopeLabels, Counter>,
    // Contributor data: pull request data no maintainer signed (docs/protocol.md#budgets).
    contributor_bytes: Gauge,
    contributor_pull_requests: Gauge,
    contributor_authors: Gauge,
    contributor_refusals: Family<ScopeLabels, Counter>,
    contributor_pruned: Counter,
    quota_refusals: Family<ScopeLabels, Counter>,
    // Maintainer authority (docs/protocol.md#maintainer-authority).
    authority_realignments: Family<ReasonLabels, Counter>,
    // Pushes (through the hooks, whoever serves git) and git smart HTTP on the public port.
    pushes: Family<OutcomeLabels, Counter>,
    push_hook_duration: HistogramFamily<HookLabels>,
    git_requests: Family<GitRequestLabels, Counter>,
    git_request_duration: HistogramFamily<GitLabels>,
    ref_cache: RefCacheMetrics,
    // Background git-data sync.
    sync_fetches: Family<OutcomeLabels, Counter>,
    sync_fetch_duration: Histogram,
    sync_attempts: Family<OutcomeLabels, Counter>,
    sync_queue: Gauge,
    sync_in_progress: Gauge,
    sync_domains_failing: Gauge,
    // Events answered from the store's log of acknowledged events, not yet committed.
    store_acknowledged: Gauge,
    // Relay-to-relay event sync (GRASP-02) has no families: its per-relay figures are in the
    // operator view (`grasp-relay sync`, `GET /v1/sync`), relay URLs not being label values.
    // GRASP-03 Sync+ (no per-relay label: relay URLs come from the network; the operator view
    // `grasp-relay sync` has them).
    sync_plus_participants: Gauge,
    sync_plus_lists: Gauge,
    sync_plus_relays: Gauge,
    sync_plus_passes: Counter,
    sync_plus_events: Counter,
    sync_plus_list_errors: Counter,
    // Deferred repository work (repositories busy past --event-lock-wait).
    deferred_entries: Gauge,
    deferred_capacity: Gauge,
    deferred_dropped: Family<ReasonLabels, Counter>,
    // Background git work: copies into the family (object pools) and repository maintenance.
    background_git_work: Family<KindLabels, Gauge>,
    // Purgatory checkpoints.
    checkpoint_duration: Histogram,
    checkpoint_bytes: Gauge,
    checkpoint_failures: Counter,
}

/// The ref cache's counters (`crate::git::ref_cache`): a handle on the registered family.
#[derive(Clone, Debug, Default)]
pub struct RefCacheMetrics {
    answers: Family<OutcomeLabels, Counter>,
    direct_fetches: Counter,
}

impl RefCacheMetrics {
    /// One cacheable read answered (`outcome`: `hit` or `miss`).
    pub fn answered(&self, outcome: &'static str) {
        self.answers.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// One v2 fetch answered by `git upload-pack` without `git http-backend`.
    pub fn fetched_directly(&self) {
        self.direct_fetches.inc();
    }

    /// How many v2 fetches were answered without `git http-backend` so far.
    pub fn direct_fetches(&self) -> u64 {
        self.direct_fetches.get()
    }

    /// How many reads were answered with `outcome` so far.
    pub fn answers(&self, outcome: &'static str) -> u64 {
        self.answers.get_or_create(&OutcomeLabels { outcome }).get()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every family (names get the `grasp_` prefix).
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("grasp");
        let m = Metrics {
            registry: Registry::default(),
            connections_open: Gauge::default(),
            connections_refused: Family::default(),
            websocket_open: Gauge::default(),
            websocket_connections: Counter::default(),
            events_received: Family::default(),
            events: Family::default(),
            purgatory_entries: Family::default(),
            purgatory_expired_ids: Gauge::default(),
            purgatory_expiries: Family::default(),
            purgatory_releases: Family::default(),
            unsigned_bytes: Gauge::default(),
            unsigned_addresses: Gauge::default(),
            unsigned_refusals: Family::default(),
            contributor_bytes: Gauge::default(),
            contributor_pull_requests: Gauge::default(),
            contributor_authors: Gauge::default(),
            contributor_refusals: Family::default(),
            contributor_pruned: Counter::default(),
            quota_refusals: Family::default(),
            authority_realignments: Family::default(),
            pushes: Family::default(),
            push_hook_duration: HistogramFamily::new_with_constructor(duration_buckets),
            git_requests: Family::default(),
            git_request_duration: HistogramFamily::new_with_constructor(duration_buckets),
            ref_cache: RefCacheMetrics::default(),
            sync_fetches: Family::default(),
            sync_fetch_duration: duration_buckets(),
            sync_attempts: Family::default(),
            sync_queue: Gauge::default(),
            sync_in_progress: Gauge::default(),
            sync_domains_failing: Gauge::default(),
            store_acknowledged: Gauge::default(),
            sync_plus_participants: Gauge::default(),
            sync_plus_lists: Gauge::default(),
            sync_plus_relays: Gauge::default(),
            sync_plus_passes: Counter::default(),
            sync_plus_events: Counter::default(),
            sync_plus_list_errors: Counter::default(),
            deferred_entries: Gauge::default(),
            deferred_capacity: Gauge::default(),
            deferred_dropped: Family::default(),
            background_git_work: Family::default(),
            checkpoint_duration: duration_buckets(),
            checkpoint_bytes: Gauge::default(),
            checkpoint_failures: Counter::default(),
        };
        r.register("build", "Version of the running grasp-relay", Info::new(BuildLabels { version: env!("CARGO_PKG_VERSION") }));
        r.register("connections_open", "Open connections (HTTP and WebSocket) on the public listener", m.connections_open.clone());
        r.register(
            "connections_refused",
            "Connections refused by --max-connections (reason=total) or --max-connections-per-ip (reason=per_address)",
            m.connections_refused.clone(),
        );
        r.register("websocket_connections_open", "Open Nostr WebSocket connections", m.websocket_open.clone());
        r.register("websocket_connections", "Nostr WebSocket connections accepted", m.websocket_connections.clone());
        r.register("events_received", "EVENT messages received from clients, by kind (NIP-34 kinds, else other)", m.events_received.clone());
        r.register(
            "events",
            "Client events by kind and outcome (stored, held in the purgatory, duplicate, refused) with the NIP-01 reason prefix",
            m.events.clone(),
        );
        r.register(
            "purgatory_entries",
            "Entries in the purgatory by type and level (waiting for git data, or soft_expired awaiting revival)",
            m.purgatory_entries.clone(),
        );
        r.register("purgatory_expired_ids", "Expired event ids the purgatory remembers (refused if sent again)", m.purgatory_expired_ids.clone());
        r.register("purgatory_expiries", "Purgatory expiries by type (soft_expiry deletes an announcement's repository)", m.purgatory_expiries.clone());
        r.register(
            "authority_realignments",
            "Repositories that followed a change of their confirmed maintainers: after an announcement (reason=announcement), or refs \
             the authorization-integrity pass realigned (reason=integrity)",
            m.authority_realignments.clone(),
        );
        r.register(
            "purgatory_unsigned_bytes",
            "Bytes of unsigned data the git-first placeholders hold (pushes to refs/nostr/<id> before any event; budget --unsigned-bytes-total)",
            m.unsigned_bytes.clone(),
        );
        r.register("purgatory_unsigned_addresses", "Client addresses holding unsigned data of git-first placeholders", m.unsigned_addresses.clone());
        r.register(
            "unsigned_refusals",
            "Pushes refused because their unsigned data would pass a budget: their address's (scope=address, --unsigned-bytes-per-address) or everyone's (scope=total, --unsigned-bytes-total)",
            m.unsigned_refusals.clone(),
        );
        r.register(
            "contributor_bytes",
            "Bytes of pull request data no maintainer signed, kept for their authors (budget --contributor-bytes-total)",
            m.contributor_bytes.clone(),
        );
        r.register("contributor_pull_requests", "Pull requests whose data counts as contributor data", m.contributor_pull_requests.clone());
        r.register("contributor_authors", "Authors keeping contributor data", m.contributor_authors.clone());
        r.register(
            "contributor_refusals",
            "Pushes and pull request events refused because their contributor data would pass a budget: the author's (scope=author, \
             --contributor-bytes-per-author), the address's (scope=address), everyone's (scope=total), or the disk below twice \
             --min-free-disk (scope=disk)",
            m.contributor_refusals.clone(),
        );
        r.register(
            "quota_refusals",
            "Pushes of owners' own history refused by a quota: the owner's (scope=owner, --owner-quota) or a new owner's \
             address's day (scope=new_owner_address, --new-owner-bytes-per-address-per-day)",
            m.quota_refusals.clone(),
        );
        r.register("contributor_pruned", "Closed or merged pull requests whose data was pruned after --pr-data-grace", m.contributor_pruned.clone());
        r.register("purgatory_releases", "Held events released (stored and served) once their git data arrived, by kind", m.purgatory_releases.clone());
        r.register("pushes", "Pushes decided by the pre-receive hook: accepted or refused", m.pushes.clone());
        r.register(
            "push_hook_duration_seconds",
            "Time the relay took to answer a push's pre-receive (authorisation) or post-receive (release) hook",
            m.push_hook_duration.clone(),
        );
        r.register(
            "git_requests",
            "Git smart HTTP requests served on the public listener, by service and status class (not counted behind nginx + fcgiwrap)",
            m.git_requests.clone(),
        );
        r.register(
            "git_request_duration_seconds",
            "Duration of git smart HTTP requests on the public listener until the response body ended, by service",
            m.git_request_duration.clone(),
        );
        r.register(
            "git_ref_cache_answers",
            "Ref advertisements and v2 ls-refs the ref cache could answer: hit (served without git) or miss (git answered, kept for the next)",
            m.ref_cache.answers.clone(),
        );
        r.register(
            "git_fetches_without_backend",
            "Protocol v2 fetches answered by git upload-pack started without git http-backend (its header block learned from the ref cache's ls-refs answers)",
            m.ref_cache.direct_fetches.clone(),
        );
        r.register("sync_fetches", "Background sync git fetches from other servers: ok or error", m.sync_fetches.clone());
        r.register("sync_fetch_duration_seconds", "Duration of background sync git fetches", m.sync_fetch_duration.clone());
        r.register(
            "sync_attempts",
            "Background sync attempts per identifier: complete, incomplete (retried with backoff) or throttled",
            m.sync_attempts.clone(),
        );
        r.register("sync_queue_length", "Identifiers queued for background sync (waiting or running)", m.sync_queue.clone());
        r.register("sync_in_progress", "Identifiers with a background sync running now", m.sync_in_progress.clone());
        r.register("sync_domains_failing", "Domains whose last background sync fetch failed (errors kept for an hour)", m.sync_domains_failing.clone());
        r.register("store_acknowledged_events", "Events answered OK from the log of acknowledged events and not yet committed to the event store (read at each scrape)", m.store_acknowledged.clone());
        r.register("sync_plus_participants", "GRASP-03 Sync+: distinct participants of the served repositories at the last pass", m.sync_plus_participants.clone());
        r.register("sync_plus_lists_cached", "GRASP-03 Sync+: participants' relay lists cached (kinds 10002 and 10317)", m.sync_plus_lists.clone());
        r.register("sync_plus_relays", "GRASP-03 Sync+: participants' relays followed after the last pass", m.sync_plus_relays.clone());
        r.register("sync_plus_passes", "GRASP-03 Sync+: passes over the served repositories", m.sync_plus_passes.clone());
        r.register("sync_plus_events", "GRASP-03 Sync+: events accepted from relays followed as participants' relays", m.sync_plus_events.clone());
        r.register("sync_plus_list_errors", "GRASP-03 Sync+: relay list look-ups that failed (per relay in `grasp-relay sync`)", m.sync_plus_list_errors.clone());
        r.register("deferred_entries", "Entries of repository work deferred because a repository stayed locked past --event-lock-wait, waiting for their retry", m.deferred_entries.clone());
        r.register("deferred_capacity", "Most entries the deferred repository work holds (--deferred-total): the table is full when grasp_deferred_entries reaches it", m.deferred_capacity.clone());
        r.register(
            "deferred_dropped",
            "Deferred repository work lost: not recorded because its author held its share (author_share) or the table was full (full), or dropped to make room for an author with fewer entries (evicted)",
            m.deferred_dropped.clone(),
        );
        r.register(
            "background_git_work",
            "Background git work waiting or running: copies of released data into the identifier family and its object pool (copies), repository and object pool maintenance passes (maintenance)",
            m.background_git_work.clone(),
        );
        r.register("checkpoint_duration_seconds", "Time to snapshot and write the purgatory checkpoint", m.checkpoint_duration.clone());
        r.register("checkpoint_bytes", "Size of the last purgatory checkpoint written", m.checkpoint_bytes.clone());
        r.register("checkpoint_failures", "Purgatory checkpoints that could not be written", m.checkpoint_failures.clone());
        m.zero_fixed_series();
        Metrics { registry: r, ..m }
    }

    /// Creates the series of the families whose labels are a small fixed set, at zero, so that
    /// they are scraped before their first event (no gaps in `rate()`, no "no data" panels).
    fn zero_fixed_series(&self) {
        for reason in ["total", "per_address"] {
            drop(self.connections_refused.get_or_create(&ReasonLabels { reason }));
        }
        for r#type in ["announcement_soft_expiry", "announcement", "state", "pull_request", "placeholder"] {
            drop(self.purgatory_expiries.get_or_create(&TypeLabels { r#type }));
        }
        for scope in ["address", "total"] {
            drop(self.unsigned_refusals.get_or_create(&ScopeLabels { scope }));
        }
        for scope in ["author", "address", "total", "disk"] {
            drop(self.contributor_refusals.get_or_create(&ScopeLabels { scope }));
        }
        for scope in ["owner", "new_owner_address"] {
            drop(self.quota_refusals.get_or_create(&ScopeLabels { scope }));
        }
        for outcome in ["accepted", "refused"] {
            drop(self.pushes.get_or_create(&OutcomeLabels { outcome }));
        }
        for hook in ["pre-receive", "post-receive"] {
            drop(self.push_hook_duration.get_or_create(&HookLabels { hook }));
        }
        for service in ["upload-pack", "receive-pack"] {
            drop(self.git_requests.get_or_create(&GitRequestLabels { service, status: "2xx" }));
            drop(self.git_request_duration.get_or_create(&GitLabels { service }));
        }
        for outcome in ["ok", "error"] {
            drop(self.sync_fetches.get_or_create(&OutcomeLabels { outcome }));
        }
        for outcome in ["complete", "incomplete", "throttled"] {
            drop(self.sync_attempts.get_or_create(&OutcomeLabels { outcome }));
        }
        for reason in ["author_share", "full", "evicted"] {
            drop(self.deferred_dropped.get_or_create(&ReasonLabels { reason }));
        }
        self.refresh_purgatory(&PurgatoryStats::default());
        self.refresh_background_git(0, 0);
    }

    /// The whole registry in the Prometheus text format (see [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// Open connections of the public listener, read at scrape time.
    pub fn set_connections_open(&self, open: usize) {
        self.connections_open.set(gauge(open));
    }

    /// A connection beyond the public listener's caps was refused.
    pub fn connection_refused(&self, refusal: &Refusal) {
        let reason = match refusal {
            Refusal::Total(_) => "total",
            Refusal::PerAddress(_) => "per_address",
        };
        self.connections_refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// A Nostr WebSocket connection opened; it counts as open until the guard drops.
    pub fn websocket_opened(&self) -> OpenGuard<'_> {
        self.websocket_connections.inc();
        self.websocket_open.inc();
        OpenGuard(&self.websocket_open)
    }

    /// A client's EVENT and the relay's `OK` answer (`kind` is `None` when the event could not
    /// even be parsed).
    pub fn event(&self, kind: Option<u16>, ok: bool, message: &str) {
        let kind = kind.map_or("unparsed", kind_label);
        self.events_received.get_or_create(&KindLabels { kind }).inc();
        let prefix = reason_prefix(message);
        let (outcome, reason) = match (ok, prefix) {
            (true, "purgatory") => ("held", ""),
            (true, "duplicate") => ("duplicate", ""),
            (true, _) => ("stored", ""),
            (false, reason) => ("refused", reason),
        };
        self.events.get_or_create(&EventLabels { kind, outcome, reason }).inc();
    }

    /// Reads the purgatory's counts (at scrape time).
    pub fn refresh_purgatory(&self, stats: &PurgatoryStats) {
        let set = |r#type, level, n: usize| self.purgatory_entries.get_or_create(&PurgatoryLabels { r#type, level }).set(gauge(n));
        set("announcement", "waiting", stats.announcements.saturating_sub(stats.soft_expired_announcements));
        set("announcement", "soft_expired", stats.soft_expired_announcements);
        set("state", "waiting", stats.states);
        set("pull_request", "waiting", stats.prs);
        set("placeholder", "waiting", stats.placeholders);
        self.purgatory_expired_ids.set(gauge(stats.expired_events));
        self.unsigned_bytes.set(i64::try_from(stats.unsigned_bytes).unwrap_or(i64::MAX));
        self.unsigned_addresses.set(gauge(stats.unsigned_addresses));
    }

    /// Reads the contributor data's sums (at scrape time).
    pub fn refresh_contributors(&self, view: &grasp_state::trust::contributor_data::ContributorView) {
        self.contributor_bytes.set(i64::try_from(view.total_bytes).unwrap_or(i64::MAX));
        self.contributor_pull_requests.set(gauge(view.pull_requests));
        self.contributor_authors.set(gauge(view.authors));
    }

    /// New contributor data refused (`scope`: author, address, total, disk).
    pub fn contributor_refused(&self, scope: &'static str) {
        self.contributor_refusals.get_or_create(&ScopeLabels { scope }).inc();
    }

    /// A push refused by a quota (`scope`: owner, new_owner_address).
    pub fn quota_refused(&self, scope: &'static str) {
        self.quota_refusals.get_or_create(&ScopeLabels { scope }).inc();
    }

    /// A closed or merged pull request's data pruned.
    pub fn contributor_pruned(&self) {
        self.contributor_pruned.inc();
    }

    /// A push refused by the unsigned budget of its address or of everyone.
    pub fn unsigned_refused(&self, scope: grasp_state::purgatory::UnsignedScope) {
        let scope = match scope {
            grasp_state::purgatory::UnsignedScope::Address => "address",
            grasp_state::purgatory::UnsignedScope::Total => "total",
        };
        self.unsigned_refusals.get_or_create(&ScopeLabels { scope }).inc();
    }

    /// One expiry decided by the purgatory's sweep.
    pub fn purgatory_expired(&self, action: &SweepAction) {
        let r#type = match action {
            SweepAction::SoftExpireAnnouncement { .. } => "announcement_soft_expiry",
            SweepAction::ExpireAnnouncement { .. } => "announcement",
            SweepAction::ExpireState { .. } => "state",
            SweepAction::ExpirePr { .. } => "pull_request",
            SweepAction::ExpirePlaceholder { .. } => "placeholder",
        };
        self.purgatory_expiries.get_or_create(&TypeLabels { r#type }).inc();
    }

    /// Held events released from the purgatory (stored and served).
    /// A repository followed a change of its confirmed maintainers (an announcement).
    pub fn authority_realigned(&self) {
        self.authority_realignments.get_or_create(&ReasonLabels { reason: "announcement" }).inc();
    }

    /// The authorization-integrity pass realigned `n` repositories.
    pub fn integrity_realigned(&self, n: usize) {
        self.authority_realignments.get_or_create(&ReasonLabels { reason: "integrity" }).inc_by(n as u64);
    }

    pub fn released(&self, events: &[ReleasedEvent]) {
        for ev in events {
            self.purgatory_releases.get_or_create(&KindLabels { kind: kind_label(ev.kind) }).inc();
        }
    }

    /// Times a pre-receive authorisation and counts its verdict.
    pub async fn push_authorization(&self, decide: impl Future<Output = PreReceiveResponse>) -> PreReceiveResponse {
        let started = Instant::now();
        let resp = decide.await;
        self.observe_hook("pre-receive", started.elapsed());
        let outcome = if resp.accepted { "accepted" } else { "refused" };
        self.pushes.get_or_create(&OutcomeLabels { outcome }).inc();
        resp
    }

    /// Times a post-receive release.
    pub async fn push_release(&self, release: impl Future<Output = PostReceiveResponse>) -> PostReceiveResponse {
        let started = Instant::now();
        let resp = release.await;
        self.observe_hook("post-receive", started.elapsed());
        resp
    }

    fn observe_hook(&self, hook: &'static str, took: Duration) {
        self.push_hook_duration.get_or_create(&HookLabels { hook }).observe(took.as_secs_f64());
    }

    /// Starts timing a git smart HTTP request on the public listener; see [`GitTimer::finish`].
    pub fn git_request<B>(&self, req: &hyper::Request<B>) -> GitTimer<'_> {
        GitTimer { metrics: self, service: git_service(req.uri().path(), req.uri().query()), started: Instant::now() }
    }

    /// One background sync fetch and how long it took.
    pub fn sync_fetched(&self, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.sync_fetches.get_or_create(&OutcomeLabels { outcome }).inc();
        self.sync_fetch_duration.observe(took.as_secs_f64());
    }

    /// One finished sync attempt for an identifier (`outcome`: `complete`, `incomplete` or
    /// `throttled`).
    pub fn sync_attempt(&self, outcome: &'static str) {
        self.sync_attempts.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Reads the syncer's queue (at scrape time; zeros when it does not run): identifiers
    /// queued, syncs running, domains whose last fetch failed.
    pub fn refresh_sync(&self, (queued, running, failing): (usize, usize, usize)) {
        self.sync_queue.set(gauge(queued));
        self.sync_in_progress.set(gauge(running));
        self.sync_domains_failing.set(gauge(failing));
    }

    /// A Sync+ pass ended: participants, lists cached, participants' relays followed.
    pub fn sync_plus_pass(&self, participants: usize, lists: usize, relays: usize) {
        self.sync_plus_passes.inc();
        self.sync_plus_participants.set(gauge(participants));
        self.sync_plus_lists.set(gauge(lists));
        self.sync_plus_relays.set(gauge(relays));
    }

    /// Events accepted from a relay followed for Sync+.
    pub fn sync_plus_gained(&self, accepted: u64) {
        self.sync_plus_events.inc_by(accepted);
    }

    /// A Sync+ list look-up failed.
    pub fn sync_plus_list_error(&self) {
        self.sync_plus_list_errors.inc();
    }

    /// Reads how many events were answered before their store commit and wait for it (at
    /// scrape time).
    pub fn refresh_store(&self, acknowledged: usize) {
        self.store_acknowledged.set(gauge(acknowledged));
    }

    /// Reads the deferred work's entry count and capacity (at scrape time).
    pub fn refresh_deferred(&self, entries: usize, capacity: usize) {
        self.deferred_entries.set(gauge(entries));
        self.deferred_capacity.set(gauge(capacity));
    }

    /// The ref cache's counters, for the cache to record into.
    pub fn ref_cache(&self) -> RefCacheMetrics {
        self.ref_cache.clone()
    }

    /// Reads the background git work waiting or running (at scrape time): copies into the
    /// family and maintenance passes.
    pub fn refresh_background_git(&self, copies: usize, maintenance: usize) {
        self.background_git_work.get_or_create(&KindLabels { kind: "copies" }).set(gauge(copies));
        self.background_git_work.get_or_create(&KindLabels { kind: "maintenance" }).set(gauge(maintenance));
    }

    /// Deferred work lost (`reason`: `author_share`, `full` or `evicted`).
    pub fn deferred_dropped(&self, reason: &'static str) {
        self.deferred_dropped.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// One purgatory checkpoint: how long it took and, when written, its size.
    pub fn checkpoint_written(&self, took: Duration, written: Result<u64, ()>) {
        self.checkpoint_duration.observe(took.as_secs_f64());
        match written {
            Ok(bytes) => {
                self.checkpoint_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            Err(()) => {
                self.checkpoint_failures.inc();
            }
        }
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Keeps a connection counted as open until dropped.
pub struct OpenGuard<'a>(&'a Gauge);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The event kinds that get their own label value; everything else is `other`.
const KIND_LABELS: &[(u16, &str)] = &[
    (0, "0"),
    (1, "1"),
    (5, "5"),
    (7, "7"),
    (1111, "1111"),
    (1617, "1617"),
    (1618, "1618"),
    (1619, "1619"),
    (1621, "1621"),
    (1630, "1630"),
    (1631, "1631"),
    (1632, "1632"),
    (1633, "1633"),
    (10317, "10317"),
    (30617, "30617"),
    (30618, "30618"),
];

/// The label value of an event kind: its number for the NIP-34 kinds and the few others this
/// relay sees, `other` for the rest (a client must not be able to create series at will).
pub fn kind_label(kind: u16) -> &'static str {
    KIND_LABELS.iter().find(|(k, _)| *k == kind).map_or("other", |(_, label)| label)
}

/// The NIP-01 prefixes a reason label may take; another prefix becomes `other`.
const REASON_PREFIXES: &[&str] =
    &["invalid", "blocked", "rate-limited", "restricted", "auth-required", "error", "duplicate", "pow", "mute", "purgatory"];

/// The machine-readable prefix of an `OK` message (`""` for none, `other` for an unknown one).
pub fn reason_prefix(message: &str) -> &'static str {
    match message.split_once(':') {
        None if message.is_empty() => "",
        Some((prefix, _)) => REASON_PREFIXES.iter().find(|p| **p == prefix).copied().unwrap_or("other"),
        None => "other",
    }
}

/// The git service a smart HTTP request is for: `upload-pack` (fetch, clone), `receive-pack`
/// (push), `info-refs` with neither (dumb HTTP, refused by git), else `other` (pages, 404s).
pub fn git_service(path: &str, query: Option<&str>) -> &'static str {
    let wants = |service: &str| query.is_some_and(|q| q.split('&').any(|kv| kv == format!("service={service}")));
    if path.ends_with("/git-upload-pack") || (path.ends_with("/info/refs") && wants("git-upload-pack")) {
        "upload-pack"
    } else if path.ends_with("/git-receive-pack") || (path.ends_with("/info/refs") && wants("git-receive-pack")) {
        "receive-pack"
    } else if path.ends_with("/info/refs") {
        "info-refs"
    } else {
        "other"
    }
}

/// A git request being timed; the time runs until its response body ends or is dropped.
pub struct GitTimer<'a> {
    metrics: &'a Metrics,
    service: &'static str,
    started: Instant,
}

impl GitTimer<'_> {
    /// Counts the response and wraps its body so the duration covers the whole transfer.
    pub fn finish(self, resp: hyper::Response<Body>) -> hyper::Response<Body> {
        let status = match resp.status().as_u16() {
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let m = self.metrics;
        m.git_requests.get_or_create(&GitRequestLabels { service: self.service, status }).inc();
        let histogram = m.git_request_duration.get_or_create_owned(&GitLabels { service: self.service });
        let started = self.started;
        resp.map(|body| http_body_util::BodyExt::boxed(TimedBody { body, histogram, started }))
    }
}

/// A response body that observes its duration into a histogram when it is dropped (finished,
/// or abandoned by the client).
struct TimedBody {
    body: Body,
    histogram: Histogram,
    started: Instant,
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

impl hyper::body::Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = crate::net::http::BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every non-comment line of the text format: `name{labels} value` or `name value`.
    fn samples(text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {l:?}"));
                (series.to_string(), value.parse::<f64>().unwrap_or_else(|_| panic!("bad value in {l:?}")))
            })
            .collect()
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        samples(text).into_iter().find(|(s, _)| s == series).map(|(_, v)| v)
    }

    #[test]
    fn events_are_counted_by_kind_outcome_and_reason() {
        let m = Metrics::new();
        m.event(Some(30617), true, "purgatory: won't be served until git data arrives");
        m.event(Some(1), true, "");
        m.event(Some(1), false, "blocked: not about a repository here");
        m.event(Some(1), false, "blocked: again");
        m.event(Some(4242), false, "nonsense without prefix");
        m.event(None, false, "invalid: malformed event");
        let text = m.encode();
        assert_eq!(value(&text, r#"grasp_events_total{kind="30617",outcome="held",reason=""}"#), Some(1.0), "{text}");
        assert_eq!(value(&text, r#"grasp_events_total{kind="1",outcome="stored",reason=""}"#), Some(1.0));
        assert_eq!(value(&text, r#"grasp_events_total{kind="1",outcome="refused",reason="blocked"}"#), Some(2.0));
        assert_eq!(value(&text, r#"grasp_events_total{kind="other",outcome="refused",reason="other"}"#), Some(1.0));
        assert_eq!(value(&text, r#"grasp_events_received_total{kind="1"}"#), Some(3.0));
        assert_eq!(value(&text, r#"grasp_events_received_total{kind="unparsed"}"#), Some(1.0));
    }

    #[test]
    fn text_format_has_help_and_type_for_every_family() {
        let m = Metrics::new();
        m.refresh_purgatory(&PurgatoryStats { announcements: 3, soft_expired_announcements: 1, unsigned_bytes: 5 << 20, unsigned_addresses: 2, ..Default::default() });
        m.unsigned_refused(grasp_state::purgatory::UnsignedScope::Address);
        m.checkpoint_written(Duration::from_millis(3), Ok(1234));
        let text = m.encode();
        for family in ["grasp_build_info", "grasp_purgatory_entries", "grasp_checkpoint_bytes", "grasp_websocket_connections_open"] {
            assert!(text.contains(&format!("# HELP {family} ")), "{family}\n{text}");
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}\n{text}");
        }
        assert!(text.contains("grasp_build_info{version=\""), "{text}");
        assert_eq!(value(&text, r#"grasp_purgatory_entries{type="announcement",level="waiting"}"#), Some(2.0));
        assert_eq!(value(&text, r#"grasp_purgatory_entries{type="announcement",level="soft_expired"}"#), Some(1.0));
        assert_eq!(value(&text, "grasp_checkpoint_bytes"), Some(1234.0));
        assert_eq!(value(&text, "grasp_purgatory_unsigned_bytes"), Some(f64::from(5u32 << 20)));
        assert_eq!(value(&text, "grasp_purgatory_unsigned_addresses"), Some(2.0));
        assert_eq!(value(&text, r#"grasp_unsigned_refusals_total{scope="address"}"#), Some(1.0));
        assert_eq!(value(&text, r#"grasp_unsigned_refusals_total{scope="total"}"#), Some(0.0));
        assert_eq!(value(&text, "grasp_checkpoint_duration_seconds_count"), Some(1.0));
    }

    #[test]
    fn acknowledged_events_are_gauged() {
        let m = Metrics::new();
        assert_eq!(value(&m.encode(), "grasp_store_acknowledged_events"), Some(0.0));
        m.refresh_store(3);
        assert_eq!(value(&m.encode(), "grasp_store_acknowledged_events"), Some(3.0));
    }

    #[test]
    fn deferred_work_is_gauged_and_its_losses_counted_by_reason() {
        let m = Metrics::new();
        let text = m.encode();
        for reason in ["author_share", "full", "evicted"] {
            assert_eq!(value(&text, &format!("grasp_deferred_dropped_total{{reason=\"{reason}\"}}")), Some(0.0), "{text}");
        }
        m.refresh_deferred(7, 10);
        m.refresh_background_git(2, 1);
        m.deferred_dropped("author_share");
        m.deferred_dropped("author_share");
        m.deferred_dropped("evicted");
        let text = m.encode();
        assert_eq!(value(&text, "grasp_deferred_entries"), Some(7.0), "{text}");
        assert_eq!(value(&text, "grasp_deferred_capacity"), Some(10.0), "{text}");
        assert_eq!(value(&text, r#"grasp_background_git_work{kind="copies"}"#), Some(2.0), "{text}");
        assert_eq!(value(&text, r#"grasp_background_git_work{kind="maintenance"}"#), Some(1.0), "{text}");
        assert_eq!(value(&text, r#"grasp_deferred_dropped_total{reason="author_share"}"#), Some(2.0));
        assert_eq!(value(&text, r#"grasp_deferred_dropped_total{reason="evicted"}"#), Some(1.0));
    }

    #[test]
    fn websocket_guard_closes_what_it_opened() {
        let m = Metrics::new();
        let a = m.websocket_opened();
        let b = m.websocket_opened();
        drop(a);
        let text = m.encode();
        assert_eq!(value(&text, "grasp_websocket_connections_open"), Some(1.0));
        assert_eq!(value(&text, "grasp_websocket_connections_total"), Some(2.0));
        drop(b);
        assert_eq!(value(&m.encode(), "grasp_websocket_connections_open"), Some(0.0));
    }

    /// The families `docs/grafana-dashboard.json` and the table in docs/deployment.md name.
    fn documented_families(doc: &str) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut rest = doc;
        while let Some(at) = rest.find("grasp_") {
            let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &rest[at + name.len()..];
            // `grasp_relay=debug` (a log filter) and `grasp_state::...` are no metric names.
            if name != "grasp_relay" && name != "grasp_state" && name != "grasp_" {
                out.insert(name);
            }
        }
        out
    }

    #[test]
    fn dashboard_and_docs_name_only_families_that_exist() {
        // Families with labels appear once they have a series.
        let m = Metrics::new();
        m.event(Some(1), true, "");
        m.released(&[ReleasedEvent { id: String::new(), kind: 30618, summary: String::new() }]);
        m.ref_cache().answered("hit");
        let text = m.encode();
        let exists = |name: &str| {
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            text.contains(&format!("# TYPE {name} ")) || text.contains(&format!("# TYPE {base} histogram"))
        };
        let dashboard = include_str!("../../../docs/grafana-dashboard.json");
        let deployment = include_str!("../../../docs/deployment.md");
        let in_dashboard = documented_families(dashboard);
        assert!(in_dashboard.len() > 15, "{in_dashboard:?}");
        for name in in_dashboard.iter().chain(&documented_families(deployment)) {
            assert!(exists(name), "{name} is documented but not exported");
        }
        // And every exported family is documented in the deployment guide.
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = line.split(' ').next().unwrap();
            assert!(deployment.contains(&format!("`{name}`")), "{name} is missing from docs/deployment.md");
        }
    }

    #[test]
    fn labels_come_from_fixed_sets() {
        assert_eq!(kind_label(30618), "30618");
        assert_eq!(kind_label(31337), "other");
        assert_eq!(reason_prefix(""), "");
        assert_eq!(reason_prefix("rate-limited: slow down"), "rate-limited");
        assert_eq!(reason_prefix("made-up: x"), "other");
        assert_eq!(reason_prefix("no colon"), "other");
        assert_eq!(git_service("/npub1x/r.git/info/refs", Some("service=git-upload-pack")), "upload-pack");
        assert_eq!(git_service("/npub1x/r.git/git-receive-pack", None), "receive-pack");
        assert_eq!(git_service("/npub1x/r.git/info/refs", Some("service=git-receive-pack&x=1")), "receive-pack");
        assert_eq!(git_service("/npub1x/r.git/info/refs", None), "info-refs");
        assert_eq!(git_service("/favicon.ico", None), "other");
    }
}
