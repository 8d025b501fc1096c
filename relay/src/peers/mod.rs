//! Relay-to-relay event sync (GRASP-02): this server follows the other relays its repositories
//! list, so issues, comments, pull requests and states published elsewhere reach it, and held
//! announcements find the state event that names their git data.
//!
//! Layout (one concept per file):
//! - which relay URLs are connected to (ws/wss only, the git sync's address safety, resolved
//!   addresses pinned) is [`crate::sync::relay_url`], beside the clone URLs' safety.
//! - [`wanted`]: pure: accepted repositories → consolidated filters per relay ([`SyncLevel`]:
//!   held announcements state-only, served ones full).
//! - [`index`]: pure: that input kept up to date per accepted event, indexed by repository
//!   and by relay, each relay's plan rebuilt only when one of its repositories changed.
//! - [`interest`]: builds the index once from the store and the purgatory, reads a served
//!   repository's root events.
//! - [`wire`]: one WebSocket client connection, NIP-11 limits.
//! - [`service_key`]: a private service's key, answering its peers' NIP-42 challenges.
//! - [`tls`]: TLS for `wss://` relays (Mozilla roots plus `--sync-tls-ca`, the URL's host
//!   verified).
//! - [`history`]: NIP-77 negentropy reconciliation, or `REQ` paging with `until`.
//! - [`reconcile`]: pure: the client side of one reconciliation, bounded in rounds, time and
//!   ids found missing.
//! - [`peer`]: the task following one relay (history, then live; backoff, cooldown, dead).
//! - [`quiet`]: pure: when a quiet live connection is pinged and when it is given up.
//! - [`fetches`]: pure: one relay's queue of ids asked for by id, one subscription at a time.
//! - [`health`]: pure per-relay backoff / cooldown / dead bookkeeping.
//! - [`cursors`]: per-relay resume points persisted in `<data>/relay-sync.json`.
//! - [`intake`]: synced events through the client's door ([`crate::grasp::Grasp::submit`]
//!   as relay sync, so [`crate::grasp::Origin::Sync`]); protected events refused.
//! - [`waiting`]: pure bounded index of synced events waiting for what they tag.
//! - [`stats`]: the operator view of each relay.
//! - [`outbox`]: GRASP-03 Sync+: passes over the served repositories' participants, their
//!   relay lists looked up ([`lists`]: the cache, [`query`]: one bounded exchange with a relay),
//!   the participants' relays handed to the manager as more relays to follow, asked for the
//!   conversation only ([`wanted::conversation_plan`]).
//! - [`replica_reads`]: a replica set's other members asked for one identifier's announcements
//!   and states before a push is refused for want of them (a push routed by repository).
//! - [`profile`]: the relay's own profile and relay list, published to the index relays that
//!   hold none yet.
//! - this file: [`PeersConfig`], [`start`] and the manager loop: at startup (and if the feed
//!   lagged) it builds the interest index from the store and the purgatory; then every stored
//!   event from the feed updates the index (announcements, deletions, new roots), the
//!   purgatory's held announcements are compared with it every few seconds (held announcements
//!   are not broadcast), and a moment after a change (batched) it takes the plans, starts a
//!   [`peer::Peer`] for each newly needed relay, hands changed plans to running ones, and drops
//!   relays no accepted repository needs (bootstraps stay); the relays of Sync+'s last pass are
//!   merged into the plans (their own plan, or added to a relay already followed). Peer tasks
//!   end when the manager drops their plan sender or at shutdown; the manager ends at shutdown
//!   (the Sync+ task too, or when the manager is gone).

pub mod acks;
pub mod cursors;
pub mod fetches;
pub mod health;
pub mod history;
pub mod index;
pub mod intake;
pub mod interest;
pub mod lists;
pub mod outbox;
pub mod peer;
pub mod profile;
pub mod query;
pub mod quiet;
pub mod reconcile;
pub mod replica_reads;
pub mod stats;
pub mod waiting;
pub mod wanted;
pub mod service_key;
pub mod tls;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;

use crate::sync::relay_url::RelayUrl;
use self::cursors::{Cursor, Cursors};
use self::health::{Health, HealthTimings};
use self::intake::Intake;
use self::peer::{Peer, PeerCommand};
use self::stats::{PeerState, RelayStats};
use self::tls::Tls;
use self::waiting::{Waiting, WaitingLimits};
use self::wanted::RelayPlan;
pub use self::wanted::SyncLevel;
use crate::config::{GitSyncConfig, RelaySyncConfig, ServerConfig, StorageConfig, TrustConfig};
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;
use crate::sync::{Cidr, UrlPolicy};

/// Everything configurable about relay sync.
#[derive(Debug, Clone)]
pub struct PeersConfig {
    /// `--sync-bootstrap-relay`: followed for announcements even with no repository.
    pub bootstraps: Vec<String>,
    /// `--sync-max-relays`.
    pub max_relays: usize,
    /// Allow loopback and private ranges (`--sync-allow-private`).
    pub allow_private: bool,
    pub extra_denied: Vec<Cidr>,
    /// This server's own `host[:port]`, never connected to.
    pub own_hosts: Vec<String>,
    pub health: HealthTimings,
    /// Connect and read deadline (and ping interval on quiet live connections).
    pub timeout: Duration,
    pub waiting: WaitingLimits,
    /// `--relay-sync-rate` / `--relay-sync-burst`: events taken from one relay (each relay's
    /// write bucket; reading from it pauses while the bucket is empty).
    pub per_relay: grasp_state::trust::rate::Rate,
    /// How often the purgatory is looked at for newly held announcements (registered on this
    /// timer; the plans are recomputed when its identifiers changed, and every minute).
    pub refresh: Duration,
    /// Accepted events are batched this long before the wanted set is recomputed.
    pub batch: Duration,
    /// `--sync-tls-ca`: PEM roots trusted for `wss://` relays besides the Mozilla ones.
    pub tls_ca: Option<PathBuf>,
    /// A private service (`--private`): the only relays followed (`--private-sync-peer` URLs),
    /// each for every accepted repository; no relay is learnt from announcements.
    pub only_relays: Option<Vec<String>>,
    /// The key this server answers NIP-42 `AUTH` challenges with (a private service's key).
    pub auth_keys: Option<nostr::prelude::Keys>,
    /// A replica of a private set: how it answers the other replicas' challenges (its own key,
    /// the service's public relay URL), whatever `auth_keys` says.
    pub replica_identity: Option<crate::trust::credentials::ReplicaIdentity>,
    /// The operator's replicas (`--replica`): followed for everything, on any address.
    pub replicas: Vec<grasp_state::trust::replica::Replica>,
    /// GRASP-03 Sync+ (`None` when it does not run, see [`RelaySyncConfig::sync_plus_enabled`]).
    pub outbox: Option<outbox::OutboxConfig>,
}

impl Default for PeersConfig {
    fn default() -> Self {
        PeersConfig {
            bootstraps: Vec::new(),
            max_relays: 50,
            allow_private: false,
            extra_denied: Vec::new(),
            own_hosts: Vec::new(),
            health: HealthTimings::default(),
            timeout: Duration::from_secs(15),
            waiting: WaitingLimits::default(),
            per_relay: grasp_state::trust::rate::Rate { burst: DEFAULT_RELAY_BURST, per_second: DEFAULT_RELAY_RATE },
            refresh: Duration::from_secs(5),
            batch: Duration::from_secs(2),
            tls_ca: None,
            only_relays: None,
            auth_keys: None,
            replica_identity: None,
            replicas: Vec::new(),
            outbox: None,
        }
    }
}

impl PeersConfig {
    /// Relay sync settings, or `None` with `--no-relay-sync`, or on a private service without
    /// a relay among its `--private-sync-peer`s (it then follows those relays only; the service
    /// key is added by the caller). Reads `[relay-sync]`, a private service's peers (`[trust]`)
    /// and the Sync+ file's place (`[storage]`); address safety is the git sync's
    /// (`--sync-allow-private`, `--sync-deny`, this server's own hosts).
    pub fn from_sections(relay_sync: &RelaySyncConfig, trust: &TrustConfig, storage: &StorageConfig, git_sync: &GitSyncConfig, server: &ServerConfig) -> Option<PeersConfig> {
        if !relay_sync.enabled(trust) {
            return None;
        }
        let defaults = PeersConfig::default();
        Some(PeersConfig {
            bootstraps: relay_sync.sync_bootstrap_relays.clone(),
            max_relays: relay_sync.sync_max_relays,
            allow_private: git_sync.sync_allow_private,
            extra_denied: git_sync.sync_deny.clone(),
            own_hosts: server.own_hosts(),
            health: health::HealthTimings {
                backoff_base: relay_sync.relay_sync_backoff.max(Duration::from_millis(10)),
                backoff_cap: relay_sync.relay_sync_backoff_cap.max(relay_sync.relay_sync_backoff),
                cooldown: relay_sync.relay_sync_cooldown,
                ..defaults.health
            },
            timeout: relay_sync.relay_sync_timeout.max(Duration::from_millis(100)),
            tls_ca: relay_sync.sync_tls_ca.clone(),
            only_relays: trust.private.then(|| trust.private_sync_relays()),
            waiting: waiting::WaitingLimits {
                request_after: relay_sync.relay_sync_parent_request,
                ..defaults.waiting
            },
            per_relay: grasp_state::trust::rate::Rate { burst: relay_sync.relay_sync_burst.max(1), per_second: relay_sync.relay_sync_rate.max(1.0) },
            replicas: relay_sync.replica.clone(),
            outbox: relay_sync.sync_plus_enabled(trust).then(|| outbox::OutboxConfig {
                index_relays: relay_sync.index_relays_used(trust),
                interval: relay_sync.sync_plus_interval.max(Duration::from_millis(100)),
                list_refresh: relay_sync.sync_plus_list_refresh,
                bounds: grasp_state::nostr::outbox::PassBounds { max_relays: relay_sync.sync_plus_max_relays, ..Default::default() },
                file: storage.layout().sync_plus_file(),
            }),
            ..defaults
        })
    }
}

/// Default `--relay-sync-rate` (events per second from one relay).
pub const DEFAULT_RELAY_RATE: f64 = crate::config::DEFAULT_RELAY_SYNC_RATE;
/// Default `--relay-sync-burst`.
pub const DEFAULT_RELAY_BURST: u32 = crate::config::DEFAULT_RELAY_SYNC_BURST;

/// State shared by the manager and the peer tasks.
pub struct Shared {
    pub config: PeersConfig,
    pub policy: UrlPolicy,
    pub tls: Tls,
    pub intake: Intake,
    /// `<data>/relay-sync.json`.
    cursors_file: PathBuf,
    cursors: Mutex<Cursors>,
    cursors_dirty: AtomicBool,
    /// Every relay followed (or dead), for the operator view.
    relays: Mutex<BTreeMap<RelayUrl, Arc<Mutex<RelayStats>>>>,
    /// The interest (`None` until built at startup).
    index: Mutex<Option<index::InterestIndex>>,
    /// How long building the index and the last plans took.
    interest_stats: Mutex<InterestStats>,
    /// Sync+'s operator view (`None` when it does not run).
    outbox: Mutex<Option<outbox::OutboxStatus>>,
}

/// The cost of the relay-sync interest, for the operator view (`GET /v1/sync`, `interest`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct InterestStats {
    /// Repositories followed (announcements stored or held).
    pub repositories: usize,
    /// Relays named by them (before `--sync-max-relays`).
    pub relays_named: usize,
    /// Building the index from the store at startup (or after the feed lagged), milliseconds.
    pub build_ms: u64,
    /// The last refresh: updating the plans from the index, microseconds.
    pub last_refresh_us: u64,
    /// Refreshes since startup.
    pub refreshes: u64,
    /// Builds since startup: one at startup, one more each time the feed of accepted events
    /// outran relay sync (it then reads the store again).
    pub builds: u64,
}

impl Shared {
    pub fn grasp(&self) -> &Arc<Grasp> {
        &self.intake.grasp
    }

    /// `relay`'s resume point.
    pub fn cursor(&self, relay: &RelayUrl) -> Cursor {
        self.cursors.lock().unwrap().relays.get(relay.as_str()).cloned().unwrap_or_default()
    }

    /// The relay was followed live up to `heard` (the last time its connection was heard
    /// from; ignored unless its state is live). The cursor never moves back.
    pub fn touch_cursor(&self, relay: &RelayUrl, heard: Instant) {
        let live = self.relays.lock().unwrap().get(relay).is_some_and(|s| s.lock().unwrap().state == PeerState::Live);
        if !live {
            return;
        }
        let ago = heard.elapsed().as_secs();
        let at = nostr::prelude::Timestamp::now().as_secs().saturating_sub(ago);
        let mut cursors = self.cursors.lock().unwrap();
        let cursor = cursors.relays.entry(relay.to_string()).or_default();
        cursor.live_until = cursor.live_until.max(at);
        self.cursors_dirty.store(true, Ordering::Relaxed);
    }

    /// The history of `keys` completed (see [`peer::Session::history_done`]).
    pub fn history_done(&self, relay: &RelayUrl, keys: BTreeSet<String>, initial: bool, full: bool) {
        let now = nostr::prelude::Timestamp::now().as_secs();
        let mut cursors = self.cursors.lock().unwrap();
        let cursor = cursors.relays.entry(relay.to_string()).or_default();
        if initial {
            cursor.filters = keys;
            if full {
                cursor.last_full = now;
            }
        } else {
            cursor.filters.extend(keys);
        }
        self.cursors_dirty.store(true, Ordering::Relaxed);
    }

    /// `accepted` events came from a relay followed for Sync+.
    pub fn outbox_gained(&self, accepted: u64) {
        if accepted == 0 {
            return;
        }
        if let Some(status) = self.outbox.lock().unwrap().as_mut() {
            status.events_gained += accepted;
        }
        self.grasp().metrics().sync_plus_gained(accepted);
    }

    fn save_cursors(&self) {
        if !self.cursors_dirty.swap(false, Ordering::Relaxed) {
            return;
        }
        let snapshot = self.cursors.lock().unwrap().clone();
        if let Err(e) = snapshot.save(&self.cursors_file) {
            self.cursors_dirty.store(true, Ordering::Relaxed);
            tracing::warn!(error = %e, "writing relay sync cursors failed");
        }
    }
}

/// The operator's view of relay sync (held weakly: it never keeps the tasks alive).
#[derive(Clone)]
pub struct PeersView(Weak<Shared>);

impl PeersView {
    /// Every relay followed, sorted by URL.
    pub fn relays(&self) -> Vec<RelayStats> {
        let Some(shared) = self.0.upgrade() else { return Vec::new() };
        let relays = shared.relays.lock().unwrap();
        relays.values().map(|s| s.lock().unwrap().clone()).collect()
    }

    /// The sync level of `owner_hex`'s repository `identifier`, if followed.
    pub fn level(&self, owner_hex: &str, identifier: &str) -> Option<SyncLevel> {
        let shared = self.0.upgrade()?;
        let owner = nostr::prelude::PublicKey::from_hex(owner_hex).ok()?;
        let index = shared.index.lock().unwrap();
        index.as_ref()?.level(&owner, identifier)
    }

    /// The cost of the interest.
    pub fn interest(&self) -> InterestStats {
        self.0.upgrade().map(|s| s.interest_stats.lock().unwrap().clone()).unwrap_or_default()
    }

    /// Sync+ (`None` when it does not run).
    pub fn sync_plus(&self) -> Option<outbox::OutboxStatus> {
        self.0.upgrade()?.outbox.lock().unwrap().clone()
    }
}

/// The plans are recomputed at least this often.
const FULL_REFRESH: Duration = Duration::from_secs(60);

struct PeerEntry {
    plan: watch::Sender<Arc<RelayPlan>>,
    commands: mpsc::Sender<PeerCommand>,
    task: JoinHandle<()>,
}

struct Manager {
    shared: Arc<Shared>,
    bootstraps: BTreeSet<RelayUrl>,
    /// A private service's peers: the only relays followed.
    only: Option<BTreeSet<RelayUrl>>,
    /// The operator's replicas, followed for everything.
    replicas: BTreeSet<RelayUrl>,
    peers: BTreeMap<RelayUrl, PeerEntry>,
    /// Dead relays with the plan they died with: restarted only when the plan changes.
    dead: BTreeMap<RelayUrl, Arc<RelayPlan>>,
    /// Sync+'s last pass (`None` when it does not run, or once its task ended).
    discovered: Option<watch::Receiver<outbox::Discovered>>,
    shutdown: Shutdown,
}

/// Parses relay URLs given by the operator, warning about (and skipping) bad ones.
fn parse_relays(raw: &[String], what: &str) -> BTreeSet<RelayUrl> {
    let mut relays = BTreeSet::new();
    for raw in raw {
        match RelayUrl::parse(raw) {
            Ok(url) => {
                relays.insert(url);
            }
            Err(e) => tracing::warn!(relay = %raw, error = %e, "ignoring {what}"),
        }
    }
    relays
}

/// Starts relay sync; the returned task ends at shutdown (after its peers) and holds `shutdown`
/// until then; with it, the operator's view of relay sync ([`PeersView`]).
/// `cursors_file` is `<data>/relay-sync.json`. Fails only on unusable TLS settings
/// (`--sync-tls-ca`).
pub fn start(grasp: &Arc<Grasp>, config: PeersConfig, cursors_file: PathBuf, shutdown: Shutdown) -> Result<(JoinHandle<()>, PeersView), tls::TlsSetupError> {
    let replica_hosts: Vec<String> = config.replicas.iter().map(|r| r.host_port.clone()).collect();
    let policy = UrlPolicy::new(config.allow_private, &config.extra_denied, &config.own_hosts).trusting(&replica_hosts);
    let replicas = parse_relays(&config.replicas.iter().map(|r| r.relay.clone()).collect::<Vec<_>>(), "replica");
    if !replicas.is_empty() {
        tracing::info!(replicas = replicas.len(), "replica set: relay sync follows every repository on each replica");
    }
    let tls = Tls::new(config.tls_ca.as_deref())?;
    let bootstraps = parse_relays(&config.bootstraps, "bootstrap relay");
    let only = config.only_relays.as_ref().map(|peers| {
        let peers = parse_relays(peers, "private sync peer (relay sync takes ws:// or wss:// URLs)");
        tracing::info!(peers = peers.len(), "private service: relay sync follows only its --private-sync-peer relays");
        peers
    });
    let shared = Arc::new(Shared {
        tls,
        intake: Intake::new(grasp.clone(), Waiting::new(config.waiting)),
        config,
        policy,
        cursors: Mutex::new(Cursors::load(&cursors_file)),
        cursors_file,
        cursors_dirty: AtomicBool::new(false),
        relays: Mutex::new(BTreeMap::new()),
        index: Mutex::new(None),
        interest_stats: Mutex::new(InterestStats::default()),
        outbox: Mutex::new(None),
    });
    let view = PeersView(Arc::downgrade(&shared));
    let discovered = shared.config.outbox.clone().map(|config| outbox::start(shared.clone(), config, shutdown.clone()));
    let manager = Manager { shared, bootstraps, only, replicas, peers: BTreeMap::new(), dead: BTreeMap::new(), discovered, shutdown };
    Ok((tokio::spawn(manager.run()), view))
}

/// Sync+'s plan changed (never, without Sync+); an error once its task ended.
async fn discovered_changed(rx: &mut Option<watch::Receiver<outbox::Discovered>>) -> Result<(), watch::error::RecvError> {
    match rx {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

/// Served repositories whose roots are read from the store per manager tick after startup.
const ROOTS_PER_TICK: usize = 64;

impl Manager {
    async fn run(mut self) {
        let grasp = self.shared.grasp().clone();
        let mut feed = grasp.relay.subscribe();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_refresh: Option<Instant> = None;
        // The interest changed (the feed, the purgatory, roots read): refresh `batch` later.
        let mut changed_since: Option<Instant> = None;
        let mut rebuild = true;
        let mut held_due = false;
        let mut last_save = Instant::now();
        let mut last_held_check = Instant::now();
        loop {
            tokio::select! {
                _ = self.shutdown.recv() => break,
                _ = self.shared.intake.announcement_accepted.notified() => held_due = true,
                changed = discovered_changed(&mut self.discovered) => match changed {
                    Ok(()) => {
                        changed_since.get_or_insert_with(Instant::now);
                    }
                    Err(_) => self.discovered = None,
                },
                event = feed.recv() => match event {
                    Ok(event) => {
                        self.shared.intake.readmit(&event).await;
                        let changed = self.shared.index.lock().unwrap().as_mut().is_some_and(|ix| ix.note_stored(&event, interest::compact));
                        if changed {
                            changed_since.get_or_insert_with(Instant::now);
                        }
                        // A released announcement leaves the purgatory as it is stored.
                        held_due |= event.kind.as_u16() == grasp_state::nostr::nip34::KIND_ANNOUNCEMENT;
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::info!(missed, "relay sync missed accepted events; building its interest again");
                        rebuild = true;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = tick.tick() => {
                    if rebuild {
                        self.build().await;
                        rebuild = false;
                        self.refresh();
                        last_refresh = Some(Instant::now());
                        changed_since = None;
                    }
                    let now = Instant::now();
                    let (refresh_every, batch) = (self.shared.config.refresh, self.shared.config.batch);
                    if held_due || now.duration_since(last_held_check) >= refresh_every {
                        held_due = false;
                        last_held_check = now;
                        if self.sync_held() {
                            changed_since.get_or_insert(now);
                        }
                    }
                    if self.read_roots(ROOTS_PER_TICK).await {
                        changed_since.get_or_insert(now);
                    }
                    // The plans are taken again `batch` after a change, and every minute (dead
                    // peers whose plan is unchanged are not restarted).
                    let due = last_refresh.is_none_or(|t| now.duration_since(t) >= FULL_REFRESH)
                        || changed_since.is_some_and(|t| now.duration_since(t) >= batch);
                    if due {
                        self.refresh();
                        last_refresh = Some(Instant::now());
                        changed_since = None;
                    }
                    self.request_missing_parents(now);
                    if now.duration_since(last_save) >= Duration::from_secs(10) {
                        self.shared.save_cursors();
                        last_save = now;
                    }
                }
            }
        }
        // Dropping the plan senders ends the peers; wait for them so the cursors are final.
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut self.peers).into_values().map(|p| p.task).collect();
        for task in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        self.shared.save_cursors();
    }

    /// Builds the interest index from the store and the purgatory (every stored announcement,
    /// then the roots of every served repository) and puts it in place.
    async fn build(&mut self) {
        let started = Instant::now();
        let grasp = self.shared.grasp().clone();
        let policy = self.shared.policy.clone();
        let excluded: index::Excluded = Box::new(move |url: &RelayUrl| url.check(&policy).is_err());
        let mut ix = index::InterestIndex::new(excluded, self.bootstraps.clone(), self.only.clone()).with_replicas(self.replicas.clone());
        interest::load(&grasp, &mut ix).await;
        // Bounded: one pass over the served repositories.
        for _ in 0..ix.len() + 1 {
            let keys = ix.take_roots_wanted(256);
            if keys.is_empty() {
                break;
            }
            for key in keys {
                let roots = interest::read_roots(&grasp, &key).await;
                ix.set_roots(&key, roots);
            }
        }
        let repositories = ix.len();
        *self.shared.index.lock().unwrap() = Some(ix);
        let build_ms = started.elapsed().as_millis() as u64;
        {
            let mut stats = self.shared.interest_stats.lock().unwrap();
            stats.build_ms = build_ms;
            stats.builds += 1;
        }
        tracing::info!(repositories, build_ms, "relay sync interest built from the store and the purgatory");
    }

    /// Compares the purgatory's held announcements with the index (by event id).
    fn sync_held(&mut self) -> bool {
        let held = self.shared.grasp().purgatory.held_announcement_events();
        self.shared.index.lock().unwrap().as_mut().is_some_and(|ix| ix.set_held(&held, interest::compact))
    }

    /// Reads the roots of at most `n` newly served repositories; whether any was read.
    async fn read_roots(&mut self, n: usize) -> bool {
        let keys = self.shared.index.lock().unwrap().as_mut().map(|ix| ix.take_roots_wanted(n)).unwrap_or_default();
        let grasp = self.shared.grasp().clone();
        for key in &keys {
            let roots = interest::read_roots(&grasp, key).await;
            if let Some(ix) = self.shared.index.lock().unwrap().as_mut() {
                ix.set_roots(key, roots);
            }
        }
        !keys.is_empty()
    }

    /// Takes the plans from the index and brings the peers in line.
    fn refresh(&mut self) {
        let started = Instant::now();
        let max_relays = self.shared.config.max_relays;
        let discovered = self.discovered.as_ref().map(|rx| rx.borrow().clone()).unwrap_or_default();
        let (plans, repositories, relays_named) = {
            let mut index = self.shared.index.lock().unwrap();
            let Some(ix) = index.as_mut() else { return };
            let mut plans = ix.plans(max_relays);
            // Sync+: each participant's relay asked for the conversation of its repositories.
            for (url, keys) in discovered.iter() {
                let repos: Vec<&wanted::RepoInterest> = keys.iter().filter_map(|k| ix.repo(k)).collect();
                if repos.is_empty() {
                    continue;
                }
                let plan = match plans.get(url) {
                    Some(plan) => wanted::merged(plan, &repos),
                    None => wanted::conversation_plan(&repos),
                };
                plans.insert(url.clone(), Arc::new(plan));
            }
            (plans, ix.len(), ix.relays_named())
        };
        self.apply(plans);
        let mut stats = self.shared.interest_stats.lock().unwrap();
        stats.last_refresh_us = started.elapsed().as_micros() as u64;
        stats.refreshes += 1;
        stats.repositories = repositories;
        stats.relays_named = relays_named;
    }

    /// Brings the peers in line with `plans`.
    fn apply(&mut self, plans: BTreeMap<RelayUrl, Arc<RelayPlan>>) {
        // Dead peers and relays no longer needed.
        let finished: Vec<RelayUrl> = self.peers.iter().filter(|(_, p)| p.task.is_finished()).map(|(u, _)| u.clone()).collect();
        for url in finished {
            if let Some(entry) = self.peers.remove(&url) {
                self.dead.insert(url, entry.plan.borrow().clone());
            }
        }
        let unneeded: Vec<RelayUrl> = self.peers.keys().filter(|u| !plans.contains_key(*u)).cloned().collect();
        for url in unneeded {
            self.peers.remove(&url);
            self.shared.relays.lock().unwrap().remove(&url);
            tracing::info!(relay = %url, "relay no longer needed by any accepted repository; disconnecting");
        }
        self.dead.retain(|url, _| plans.contains_key(url));
        self.shared.relays.lock().unwrap().retain(|url, _| plans.contains_key(url));
        for (url, plan) in plans {
            if let Some(entry) = self.peers.get(&url) {
                entry.plan.send_if_modified(|current| {
                    // `Arc`'s equality answers at once for the same plan (an unchanged relay's).
                    let changed = *current != plan;
                    if changed {
                        *current = plan.clone();
                    }
                    changed
                });
                continue;
            }
            if self.dead.get(&url) == Some(&plan) {
                continue;
            }
            self.dead.remove(&url);
            self.spawn_peer(url, plan);
        }
    }

    /// A relay's write bucket: `--relay-sync-rate` / `--relay-sync-burst`, at most
    /// [`outbox::OUTBOX_RATE`] for a relay first followed for Sync+ (any participant may name
    /// one).
    fn rate_for(&self, plan: &RelayPlan) -> grasp_state::trust::rate::Rate {
        let rate = self.shared.config.per_relay;
        if !plan.outbox {
            return rate;
        }
        grasp_state::trust::rate::Rate { burst: rate.burst.min(outbox::OUTBOX_RATE.burst), per_second: rate.per_second.min(outbox::OUTBOX_RATE.per_second) }
    }

    fn spawn_peer(&mut self, url: RelayUrl, plan: Arc<RelayPlan>) {
        let stats = Arc::new(Mutex::new(RelayStats::new(url.clone())));
        self.shared.relays.lock().unwrap().insert(url.clone(), stats.clone());
        let rate = self.rate_for(&plan);
        let (plan_tx, plan_rx) = watch::channel(plan);
        let (commands_tx, commands_rx) = mpsc::channel(16);
        let peer = Peer {
            url: url.clone(),
            shared: self.shared.clone(),
            plan: plan_rx,
            commands: commands_rx,
            stats,
            shutdown: self.shutdown.clone(),
            health: Health::default(),
            bucket: grasp_state::trust::rate::TokenBucket::new(rate, Instant::now()),
        };
        tracing::debug!(relay = %url, "following relay");
        let task = tokio::spawn(peer.run());
        self.peers.insert(url, PeerEntry { plan: plan_tx, commands: commands_tx, task });
    }

    /// Asks every connected relay for the parents waiting events have waited for too long.
    fn request_missing_parents(&mut self, now: Instant) {
        let ids = {
            let mut waiting = self.shared.intake.waiting.lock().unwrap();
            let expired = waiting.expire(now);
            if expired > 0 {
                tracing::info!(expired, "synced events dropped after waiting too long for what they tag");
            }
            waiting.due_requests(now, waiting::MAX_IDS_PER_FETCH)
        };
        if ids.is_empty() {
            return;
        }
        tracing::info!(count = ids.len(), "asking connected relays for events that waiting synced events tag");
        for entry in self.peers.values() {
            let _ = entry.commands.try_send(PeerCommand::Fetch(ids.clone()));
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::Config;
    use crate::sync::SyncConfig;
    use clap::Parser;
    use std::path::PathBuf;

    /// The relay sync settings of a command line, from the sections they are read from.
    fn peers_of(cfg: &Config) -> Option<PeersConfig> {
        PeersConfig::from_sections(&cfg.relay_sync, &cfg.trust, &cfg.storage, &cfg.git_sync, &cfg.server)
    }

    #[test]
    fn relay_sync_flags() {
        let cfg = Config::parse_from(["grasp-relay", "--public-host", "git.example.com"]);
        let peers = peers_of(&cfg).expect("on by default");
        assert!(peers.bootstraps.is_empty() && !peers.allow_private);
        assert_eq!(peers.max_relays, 50);
        assert_eq!(peers.health, crate::peers::health::HealthTimings::default());
        assert_eq!(peers.own_hosts, ["git.example.com", "127.0.0.1:8080"]);
        assert!(peers_of(&Config::parse_from(["grasp-relay", "--no-relay-sync"])).is_none());
        let cfg = Config::parse_from([
            "grasp-relay",
            "--sync-bootstrap-relay",
            "ws://a.example,ws://b.example",
            "--sync-bootstrap-relay",
            "ws://c.example",
            "--relay-sync-cooldown",
            "3s",
            "--sync-allow-private",
        ]);
        let peers = peers_of(&cfg).unwrap();
        assert_eq!(peers.bootstraps, ["ws://a.example", "ws://b.example", "ws://c.example"]);
        assert_eq!(peers.health.cooldown, Duration::from_secs(3));
        assert!(peers.allow_private);
        assert!(peers.only_relays.is_none() && peers.tls_ca.is_none());
        let cfg = Config::parse_from(["grasp-relay", "--sync-tls-ca", "/etc/ca.pem"]);
        assert_eq!(peers_of(&cfg).unwrap().tls_ca, Some(PathBuf::from("/etc/ca.pem")));
    }

    #[test]
    fn a_private_service_relay_syncs_only_with_its_relay_peers() {
        assert!(peers_of(&Config::parse_from(["grasp-relay", "--private"])).is_none(), "no peers: no relay sync");
        let hosts_only = Config::parse_from(["grasp-relay", "--private", "--private-sync-peer", "git.example.com"]);
        assert!(peers_of(&hosts_only).is_none(), "a plain host is a git sync source only");
        let cfg = Config::parse_from([
            "grasp-relay",
            "--private",
            "--data-dir",
            "/srv/grasp",
            "--private-sync-peer",
            "wss://peer.example.com,git.example.net:8443",
            "--private-sync-peer",
            "ws://10.0.0.2:7000",
        ]);
        let peers = peers_of(&cfg).unwrap();
        assert_eq!(peers.only_relays.unwrap(), ["wss://peer.example.com", "ws://10.0.0.2:7000"]);
        assert_eq!(SyncConfig::from_sections(&cfg.git_sync, &cfg.limits, &cfg.server, &cfg.trust, &cfg.relay_sync).only_peers.unwrap(), ["peer.example.com", "git.example.net:8443", "10.0.0.2:7000"]);
        assert_eq!(cfg.service_key_file(), PathBuf::from("/srv/grasp/service-key"));
        // A public service ignores the list.
        let public = Config::parse_from(["grasp-relay", "--private-sync-peer", "wss://peer.example.com"]);
        assert!(peers_of(&public).unwrap().only_relays.is_none());
    }

    #[test]
    fn sync_plus_flags() {
        let cfg = Config::parse_from(["grasp-relay", "--data-dir", "/srv/grasp"]);
        let outbox = peers_of(&cfg).unwrap().outbox.expect("on by default on a public service");
        assert_eq!(outbox.index_relays, crate::config::DEFAULT_INDEX_RELAYS);
        assert_eq!((outbox.interval, outbox.list_refresh), (Duration::from_secs(30), Duration::from_secs(3600)));
        assert_eq!(outbox.bounds, grasp_state::nostr::outbox::PassBounds { authors_per_repo: 32, relays_per_repo: 24, max_relays: 32 });
        assert_eq!(outbox.file, PathBuf::from("/srv/grasp/sync-plus.json"));
        let cfg = Config::parse_from(["grasp-relay", "--index-relay", "ws://a.example,ws://b.example", "--sync-plus-interval", "1s", "--sync-plus-max-relays", "3"]);
        let outbox = peers_of(&cfg).unwrap().outbox.unwrap();
        assert_eq!(outbox.index_relays, ["ws://a.example", "ws://b.example"]);
        assert_eq!((outbox.interval, outbox.bounds.max_relays), (Duration::from_secs(1), 3));
        let none = Config::parse_from(["grasp-relay", "--no-index-relays"]);
        assert!(peers_of(&none).unwrap().outbox.unwrap().index_relays.is_empty(), "an empty list opts out");
        assert!(Config::try_parse_from(["grasp-relay", "--no-index-relays", "--index-relay", "ws://a.example"]).is_err());
        assert!(peers_of(&Config::parse_from(["grasp-relay", "--no-sync-plus"])).unwrap().outbox.is_none());
        // A private service never uses discovered relays, nor index relays.
        let private = Config::parse_from(["grasp-relay", "--private", "--private-sync-peer", "wss://peer.example.com", "--index-relay", "ws://a.example"]);
        assert!(peers_of(&private).unwrap().outbox.is_none() && private.relay_sync.index_relays_used(&private.trust).is_empty());
    }

    #[test]
    fn a_public_host_with_a_scheme_still_names_this_server_for_relay_sync() {
        for configured in ["https://git.example.com", "https://git.example.com/", "git.example.com/"] {
            let cfg = Config::parse_from(["grasp-relay", "--public-host", configured]);
            assert_eq!(peers_of(&cfg).unwrap().own_hosts, ["git.example.com", "127.0.0.1:8080"]);
        }
    }
}
