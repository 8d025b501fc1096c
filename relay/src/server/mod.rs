//! The public HTTP listener and the daemon's lifecycle.
//!
//! One hyper (HTTP/1.1, with upgrades) listener routes:
//! - `GET /` with a WebSocket upgrade: the Nostr relay ([`crate::nostr::connection`]);
//! - `GET /` with `Accept: application/nostr+json`: the NIP-11 document;
//! - `GET /` otherwise: the home page ([`pages`]: relay and clone URLs, rules, repositories);
//! - `GET /.well-known/nostr.json`: NIP-05, the relay's own key as `_`
//!   ([`crate::nostr::nip05`]);
//! - `OPTIONS` anywhere: `204` with CORS;
//! - every other path: `grasp-cgi` ([`crate::git::http`]): git smart HTTP and the repository
//!   page for `/<npub>/<identifier>.git...`, its `404` page (HTML for browsers) for the rest.
//!
//! Every response carries the CORS headers ([`crate::net::http::with_cors`]). Metrics and
//! health probes are never served here: they have their own listener
//! ([`crate::server::metrics`], `--metrics-bind`).
//!
//! Connection limits ([`crate::net::connection_limits`]): a connection beyond `--max-connections` or
//! `--max-connections-per-ip` is answered with a canned `503` (CORS headers, a message saying
//! what to do) written once the request head has arrived (read and discarded, never parsed),
//! then closed once the client closes (or after [`REFUSAL_LINGER`]). At most [`MAX_REFUSALS_IN_FLIGHT`] refusals are
//! answered at a time; beyond that a flood's connections are closed without an answer, so
//! refusing never costs more than accepting.
//!
//! Every public connection writes through a [`WriteDeadline`]: a client that
//! reads nothing for `--write-timeout` is dropped, with whatever its answer held (git processes,
//! a git request slot). Before binding, the open file limit is raised to what the limits need
//! ([`fd_limit`]).

pub mod fd_limit;
pub mod heap_trim;
pub mod metrics;
pub mod pages;
pub mod reload;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ACCEPT, CONNECTION, CONTENT_TYPE, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use grasp_state::contract::env_names;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use crate::config::{Config, RelaySyncConfig, ServerConfig, TrustConfig};
use crate::nostr::connection::{self, Limits};
use crate::net::connection_limits::{ConnectionLimiter, ConnectionPermit, Refusal};
use crate::datadir::DataDir;
use crate::net::http::{self, Body};
use crate::net::tcp;
use crate::net::write_deadline::WriteDeadline;
use crate::grasp::Grasp;
use crate::api::health::Health;
use crate::server::metrics::MetricsState;
use crate::store::relay::Relay;
use crate::shutdown::{Shutdown, ShutdownController};
use crate::store::Store;

/// How long tasks get to finish after SIGINT/SIGTERM (the systemd unit's `TimeoutStopSec`
/// leaves room for it and the last checkpoint).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Clients must send their request headers within this time (slowloris protection).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Refused connections answered at the same time; more are closed without an answer.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;

/// How long a refused connection is kept open for the client to read the `503` and close.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);

/// At most this much of a refused connection's request is read (and discarded).
const REFUSAL_DRAIN_BYTES: usize = 64 * 1024;

/// Shared state of the public listener.
pub struct AppState {
    pub cfg: Config,
    pub git: crate::git::http::GitHttpConfig,
    pub grasp: Arc<Grasp>,
    pub limits: Limits,
    /// Open connection counts of the public listener.
    pub connections: Arc<ConnectionLimiter>,
    /// Git requests (grasp-cgi children) running, in total and per client address
    /// (`--git-max-requests`, `--git-max-requests-per-ip`): held until the answer has streamed,
    /// so stalled requests count against their address.
    pub git_requests: Arc<ConnectionLimiter>,
    /// The relay's own key ([`crate::identity`]): NIP-11 `self`, NIP-05 `_`.
    pub identity: nostr::prelude::Keys,
    /// The readiness checks: whether a replica has caught up with the others.
    pub health: Arc<Health>,
}

/// Runs the daemon until SIGINT/SIGTERM: opens the data dir (exclusive lock) and the store, binds
/// the public listener, serves, then shuts down gracefully. SIGHUP re-reads the configuration
/// ([`reload`]).
/// Runs the daemon, in named steps: open (identity, store, listener, purgatory, the hub),
/// recover (journal and checkpoint), check ([`check_helpers`]), the hook API, recover then work
/// ([`start_background`]), serve ([`git_http_config`], the metrics and public listeners), stop
/// ([`stop`]).
pub async fn run(loaded: crate::config::Loaded) -> anyhow::Result<()> {
    // Step "open".
    let crate::config::Loaded { config: mut cfg, settings } = loaded;
    let hangups = reload::listen()?;
    // Before anything is opened: the descriptors the limits let clients take must exist.
    fd_limit::raise(grasp_state::trust::fd_budget::required(cfg.limits.max_connections.into(), cfg.limits.git_max_requests.into()))?;
    let data = DataDir::open(&cfg.storage.data_dir)?;
    // The relay's identity before anything else is opened: a bad configured key file stops here.
    let (identity, key_file) = crate::identity::from_config(&cfg.server, &cfg.storage)?;
    tracing::info!(npub = %crate::identity::npub(&identity), pubkey = %identity.public_key().to_hex(), path = %key_file.display(), "relay identity");
    let store = Store::open(&data.events())
        .await
        .context("opening the event store")?;
    let relay = Arc::new(Relay::new(store).with_negentropy_items(cfg.limits.negentropy_max_items_total));

    let listener = TcpListener::bind(cfg.server.bind)
        .await
        .with_context(|| format!("binding {}", cfg.server.bind))?;
    let addr = listener.local_addr()?;
    cfg.server.bind = addr;
    if cfg.server.public_host.is_none() {
        cfg.server.public_host = Some(addr.to_string());
    }
    let limits = Limits {
        max_message_bytes: cfg.limits.max_message_bytes,
        max_subscriptions: cfg.limits.max_subscriptions,
        max_filters: cfg.limits.max_filters,
        max_limit: cfg.limits.max_limit,
        max_answer_bytes: cfg.limits.max_answer_bytes,
        negentropy: crate::nostr::negentropy::NegentropyLimits::from_config(&cfg.limits),
        idle_timeout: cfg.limits.ws_idle_timeout,
    };

    // The purgatory, restored from its checkpoint (downtime subtracted).
    let layout = grasp_state::names::identifier::RepoLayout::new(data.git());
    let (purgatory, journal_segment) = crate::grasp::lifecycle::restore(data.root(), &layout, cfg.purgatory());
    let metrics = Arc::new(crate::metrics::Metrics::new());
    // A private service's data never turns public by a configuration change.
    // Marked in the git root too: grasp-cgi behind nginx may be given only the git root.
    let markers = data.private_markers();
    if cfg.trust.private {
        for marker in &markers {
            std::fs::write(marker, "This data directory belongs to a private GRASP-08 service (docs/deployment.md).\n")
                .with_context(|| format!("writing {}", marker.display()))?;
        }
    } else if let Some(marker) = markers.iter().find(|m| m.exists()) {
        anyhow::bail!(
            "{} exists: this data directory belongs to a private GRASP-08 service; start with --private, \
             or migrate its data to a public service deliberately (docs/deployment.md)",
            marker.display()
        );
    }
    let trust = Arc::new(crate::trust::Trust::from_sections(&cfg.trust, &cfg.limits, &cfg.storage, cfg.pages.admin_pubkey, data.git())?);
    let grasp = Arc::new(
        Grasp::new(relay, purgatory, layout, data.hooks(), cfg.server.public_host(), metrics.clone()).with_trust(trust).with_lock_limits(crate::grasp::locks::LockLimits::from_config(&cfg.limits)).with_deferred_limits(cfg.purgatory.deferred_limits()).with_grasp06(cfg.services.grasp06).with_archive(cfg.services.archive()).with_replicas(cfg.relay_sync.replica.clone()),
    );
    grasp.configure_contributor_data(cfg.purgatory.contributor_budget(), cfg.purgatory.pr_data_grace, data.root());
    grasp.configure_owner_quotas(cfg.limits.owner_quotas(), cfg.limits.quota_exempt_owner.iter().copied());
    // Step "recover": from here every change to the purgatory is journalled before it is
    // acknowledged; the checkpoint right away compacts what was restored (checkpoint + journal)
    // into one file.
    let journal = crate::grasp::journal::Journal::open(data.root(), journal_segment).context("opening the purgatory journal")?;
    grasp.purgatory.attach_journal(journal);
    crate::grasp::lifecycle::checkpoint(&grasp, data.root()).await.context("writing the purgatory checkpoint")?;

    // Step "check": the helper binaries and the hooks git runs.
    let binaries = check_helpers(&cfg.server, &cfg.limits, &data)?;
    let (api_listener, token) = crate::api::bind(cfg.server.api_bind, data.root()).await?;
    let api_addr = api_listener.local_addr()?;

    let views = Arc::new(crate::api::views::OperatorViews::default());
    let health = Arc::new(Health { grasp: grasp.clone(), data_dir: data.root().to_path_buf(), binaries, api_addr, views: views.clone(), caught_up: Default::default() });

    let controller = ShutdownController::new();
    if let Some(acks) = crate::peers::acks::ReplicaAcks::start(&cfg.relay_sync.replica, cfg.relay_sync.replica_acks, cfg.relay_sync.replica_ack_timeout, cfg.relay_sync.sync_tls_ca.as_deref(), replica_identity(&cfg.trust, &cfg.relay_sync, &cfg.server, &identity), &controller.subscribe())? {
        grasp.set_replica_acks(acks);
    }
    // What it authenticates as when it asks the others: its own key, which they read from its
    // NIP-11 document, and on a private service its service key (a member on the others).
    let mut asking = vec![identity.clone()];
    if cfg.trust.private && !cfg.relay_sync.replica.is_empty() {
        asking.push(crate::peers::service_key::load_or_create(&cfg.service_key_file())?);
    }
    if let Some(reads) = crate::peers::replica_reads::ReplicaReads::new(&grasp, asking, cfg.relay_sync.sync_tls_ca.as_deref())? {
        grasp.set_replica_reads(reads);
    }
    // The hook API runs on a runtime of its own (its own worker and blocking threads), so pushes
    // are decided while the WebSocket side is saturated (docs/security.md).
    crate::api::serve_on_own_runtime(api_listener, token, grasp.clone(), health.clone(), views.clone(), controller.subscribe())?;

    // Step "recover, then work".
    start_background(&grasp, &cfg, &data, &identity, &views, settings, hangups, &controller).await?;

    // Step "serve": the metrics listener, then the public one.
    let git = git_http_config(&cfg.server, &cfg.limits, &cfg.services, &data, &grasp).await;
    let connections = ConnectionLimiter::new(cfg.limits.max_connections as usize, cfg.limits.max_connections_per_ip as usize, cfg.limits.ipv6_prefix_len);
    // The metrics listener (off unless --metrics-bind): its own socket, never the public port.
    let metrics_file = data.root().join(grasp_state::contract::layout::METRICS_ADDR_FILE);
    let _ = std::fs::remove_file(&metrics_file);
    if let Some(metrics_bind) = cfg.server.metrics_bind {
        let listener = crate::server::metrics::bind(metrics_bind, addr).await?;
        let metrics_addr = listener.local_addr()?;
        let state = Arc::new(MetricsState { metrics, grasp: grasp.clone(), connections: connections.clone(), health: health.clone(), views: views.clone() });
        tokio::spawn(crate::server::metrics::serve(listener, state, controller.subscribe()));
        std::fs::write(&metrics_file, metrics_addr.to_string()).with_context(|| format!("writing {}", metrics_file.display()))?;
        tracing::info!(%metrics_addr, "metrics on http://{metrics_addr}/metrics (probes /healthz, /readyz)");
    }
    let git_requests = ConnectionLimiter::new(cfg.limits.git_max_requests as usize, cfg.limits.git_max_requests_per_ip as usize, cfg.limits.ipv6_prefix_len);
    let state = Arc::new(AppState { cfg, git, grasp: grasp.clone(), limits, connections, git_requests, identity, health });
    let accept = tokio::spawn(accept_loop(listener, state.clone(), controller.subscribe()));

    grasp_state::contract::atomic_file::write_atomic(&data.relay_addr_file(), addr.to_string().as_bytes(), None)
        .with_context(|| format!("writing {}", data.relay_addr_file().display()))?;
    tracing::info!(%addr, %api_addr, public_host = %state.cfg.server.public_host(), data_dir = %data.root().display(), "listening on http://{addr}");

    // Step "stop", on SIGTERM or Ctrl-C.
    wait_for_signal().await;
    stop(controller, accept, &grasp, &data, &metrics_file).await;
    Ok(())
}


/// Step "check": the hooks git runs, installed, and the CGI wrapper beside them. Without the
/// helper binaries the relay could not serve git or authorise a push: it refuses to start rather
/// than fail every request. Returns their paths (the readiness probe checks them again).
fn check_helpers(server: &crate::config::ServerConfig, limits: &crate::config::LimitsConfig, data: &DataDir) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let binaries = server.helper_binaries();
    let bin_dir = binaries[0].parent().map(|p| p.to_path_buf()).unwrap_or_default();
    for bin in &binaries {
        if !bin.is_file() {
            anyhow::bail!(
                "{} not found: build every binary with `cargo build --release --workspace` \
                 (or point --cgi-path at an installed grasp-cgi with the hooks beside it)",
                bin.display()
            );
        }
    }
    crate::api::install_hooks(&data.hooks(), &bin_dir, data.root(), limits.push_limits()).context("installing the git hooks")?;
    Ok(binaries)
}

/// Step "serve": how the public listener runs git (docs/architecture.md, "Git over HTTP"), from
/// the helper binaries' place (`[server]`), the push and git request limits (`[limits]`) and
/// GRASP-06 (`[services]`).
async fn git_http_config(server: &crate::config::ServerConfig, limits: &crate::config::LimitsConfig, services: &crate::config::ServicesConfig, data: &DataDir, grasp: &Arc<Grasp>) -> crate::git::http::GitHttpConfig {
    // git's `git-http-backend`, run directly when the relay finds it (one process start less per
    // request).
    let http_backend = tokio::task::spawn_blocking(crate::git::http_backend_program).await.ok().flatten();
    crate::git::http::GitHttpConfig {
        cgi_path: server.cgi_path(),
        backend: grasp_state::contract::git_backend::BackendSetup {
            git_root: data.git(),
            hooks_dir: Some(data.hooks()),
            git: "git".into(),
            http_backend: http_backend.clone(),
            max_push_bytes: Some(limits.max_push_bytes),
            max_pr_push_bytes: Some(limits.max_pr_push_bytes),
        },
        data_dir: data.root().to_path_buf(),
        direct: true,
        // grasp-cgi asks the hook API for the repository page's data and, on a private service,
        // about every git request; it sets git's receive.maxInputSize from the push limit.
        env: vec![
            (env_names::DATA_DIR.into(), data.root().display().to_string()),
            (env_names::MAX_PUSH_BYTES.into(), limits.max_push_bytes.to_string()),
            (env_names::MAX_PR_PUSH_BYTES.into(), limits.max_pr_push_bytes.to_string()),
            // GRASP-06: grasp-cgi serves /prs/ (or answers 404) as the relay does.
            (env_names::GRASP06.into(), services.grasp06.to_string()),
            // A push waits this long for another push to the repository, then is answered 503.
            (env_names::PUSH_LOCK_WAIT.into(), limits.push_lock_wait.as_secs().to_string()),
        ]
        .into_iter()
        .chain(http_backend.map(|p| (env_names::GIT_HTTP_BACKEND.to_string(), p.display().to_string())))
        .collect(),
        idle_timeout: limits.git_idle_timeout,
        min_rate: limits.git_min_rate,
        prs: services.grasp06,
        ref_cache: (limits.ref_cache_bytes > 0)
            .then(|| Arc::new(crate::git::ref_cache::RefCache::new(limits.ref_cache_bytes, grasp.metrics().ref_cache()))),
        // A push the listener runs does what `post-receive` would itself: one hook process and
        // one hook API round trip fewer.
        supervised_pushes: Some(crate::git::supervised_push::SupervisedPushes {
            hooks_dir: data.hooks().join(grasp_state::contract::layout::PRE_RECEIVE_ONLY_DIR),
            arrived: {
                let grasp = grasp.clone();
                Arc::new(move |repo, updates, client| {
                    let grasp = grasp.clone();
                    Box::pin(async move { grasp.push_arrived(repo, &updates, client).await })
                })
            },
        }),
    }
}

/// Step "recover, then work": releases what the repositories already satisfy, then starts every
/// background task (integrity pass, git sync, relay sync and Sync+, the relay's profile,
/// maintenance, expiry, deferred work, copies, contributor data, pools, curation, limits,
/// A replica of a private set (`--private` with `--replica`): how it is let in by the others,
/// as its own key naming the service's domain (docs/scaling.md, "A private replica set").
fn replica_identity(trust: &TrustConfig, relay_sync: &RelaySyncConfig, server: &ServerConfig, identity: &nostr::prelude::Keys) -> Option<crate::trust::credentials::ReplicaIdentity> {
    (trust.private && !relay_sync.replica.is_empty()).then(|| crate::trust::credentials::ReplicaIdentity::new(identity.clone(), &server.public_host()))
}

/// reload, checkpoints). Each ends at shutdown. It wires nearly every part, so it takes the
/// whole configuration and hands each part the sections that part reads.
#[allow(clippy::too_many_arguments)]
async fn start_background(
    grasp: &Arc<Grasp>,
    cfg: &crate::config::Config,
    data: &DataDir,
    identity: &nostr::prelude::Keys,
    views: &Arc<crate::api::views::OperatorViews>,
    settings: Vec<crate::config::Setting>,
    hangups: tokio::signal::unix::Signal,
    controller: &ShutdownController,
) -> anyhow::Result<()> {
    // Nothing is lost if the relay was down between a push's two hooks: release what the
    // repositories already satisfy.
    grasp.reconcile_all(cfg.limits.git_idle_timeout).await;
    // Refs an earlier, non-reciprocal maintainer rule let an invitee or a leaver move follow the
    // confirmed maintainers again (docs/protocol.md#maintainer-authority), in the background.
    tokio::spawn({
        let grasp = grasp.clone();
        async move { grasp.authority_integrity(true).await }
    });

    // Background sync: fetch what the purgatory waits for from the other clone URLs it knows;
    // a private service proves who it is to the private services it fetches from.
    let mut sync = crate::sync::SyncConfig::from_sections(&cfg.git_sync, &cfg.limits, &cfg.server, &cfg.trust, &cfg.relay_sync);
    sync.credentials = crate::sync::PrivateFetch {
        replica: replica_identity(&cfg.trust, &cfg.relay_sync, &cfg.server, identity),
        service_key: if cfg.trust.private { Some(crate::peers::service_key::load_or_create(&cfg.service_key_file())?) } else { None },
    };
    let (_, git_sync) = crate::sync::start(grasp, sync, controller.subscribe());
    let _ = views.git_sync.set(git_sync);
    // Relay-to-relay event sync (GRASP-02): follow the relays accepted repositories list.
    if let Some(mut peers) = crate::peers::PeersConfig::from_sections(&cfg.relay_sync, &cfg.trust, &cfg.storage, &cfg.git_sync, &cfg.server) {
        if cfg.trust.private {
            let path = cfg.service_key_file();
            let keys = crate::peers::service_key::load_or_create(&path)?;
            tracing::info!(npub = %crate::peers::service_key::npub(&keys), path = %path.display(), "private service key: list it as a member on the --private-sync-peer relays");
            peers.auth_keys = Some(keys);
        }
        peers.replica_identity = replica_identity(&cfg.trust, &cfg.relay_sync, &cfg.server, identity);
        let (_, relay_sync) = crate::peers::start(grasp, peers, data.relay_sync_file(), controller.subscribe())?;
        let _ = views.relay_sync.set(relay_sync);
    }
    // The relay's own profile and relay list, on the index relays that hold none for its key yet.
    let index_relays = cfg.relay_sync.index_relays_used(&cfg.trust);
    if !index_relays.is_empty() {
        let sync = crate::sync::SyncConfig::from_sections(&cfg.git_sync, &cfg.limits, &cfg.server, &cfg.trust, &cfg.relay_sync);
        let publication = crate::peers::profile::SelfPublication {
            keys: identity.clone(),
            public_host: cfg.server.public_host(),
            about: cfg.pages.description.clone(),
            index_relays,
            policy: crate::sync::UrlPolicy::new(sync.allow_private, &sync.extra_denied, &sync.own_hosts),
            tls: crate::peers::tls::Tls::new(cfg.relay_sync.sync_tls_ca.as_deref())?,
            timeout: cfg.relay_sync.relay_sync_timeout.max(std::time::Duration::from_millis(100)),
        };
        tokio::spawn(publication.run(controller.subscribe()));
    }

    grasp.set_maintenance(crate::grasp::maintenance::Maintenance::start(grasp.clone(), cfg.limits.git_idle_timeout, controller.subscribe()));
    tokio::spawn(crate::grasp::lifecycle::run_expiry(grasp.clone(), controller.subscribe()));
    tokio::spawn(crate::grasp::deferred::run_deferred(grasp.clone(), controller.subscribe()));
    tokio::spawn(crate::grasp::copies::run_copies(grasp.clone(), controller.subscribe()));
    tokio::spawn(crate::grasp::budgets::run_reconciliation(grasp.clone(), cfg.purgatory.contributor_reconcile_interval, controller.subscribe()));
    // Repositories of shared families from before object pools join theirs in the background.
    tokio::spawn({
        let grasp = grasp.clone();
        async move { grasp.pool_migration().await }
    });
    tokio::spawn(crate::grasp::purge::run_curation_watch(grasp.clone(), controller.subscribe()));
    tokio::spawn(heap_trim::run(controller.subscribe()));
    tokio::spawn(crate::trust::limits::run_repo_count(grasp.trust().clone(), controller.subscribe()));
    tokio::spawn(reload::run(grasp.clone(), settings, cfg.pages.admin_pubkey, hangups, controller.subscribe()));
    tokio::spawn(crate::grasp::lifecycle::run_checkpoints(
        grasp.clone(),
        data.root().to_path_buf(),
        cfg.purgatory.checkpoint_interval(),
        controller.subscribe(),
    ));
    Ok(())
}

/// Step "stop": open work finishes (bounded by [`SHUTDOWN_GRACE`]), acknowledged events go to
/// the store, the last checkpoint is written, the address files go.
async fn stop(controller: ShutdownController, accept: tokio::task::JoinHandle<()>, grasp: &Grasp, data: &DataDir, metrics_file: &std::path::Path) {
    tracing::info!("shutting down");
    if !controller.wait_for_tasks(SHUTDOWN_GRACE).await {
        tracing::warn!("some connections did not finish within {SHUTDOWN_GRACE:?}");
    }
    accept.abort();
    // Events answered from the log of acknowledged events go to the store now, not at the next start.
    grasp.relay.store().flush().await;
    // Background mutation has stopped: write the final checkpoint.
    match crate::grasp::lifecycle::checkpoint(grasp, data.root()).await {
        Ok(()) => tracing::info!("purgatory checkpoint written"),
        Err(e) => tracing::error!(error = %e, "final purgatory checkpoint failed"),
    }
    let _ = std::fs::remove_file(data.relay_addr_file());
    let _ = std::fs::remove_file(metrics_file);
    tracing::info!("stopped");
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the daemon");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<AppState>, mut shutdown: Shutdown) {
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    loop {
        let (stream, remote) = tokio::select! {
            _ = shutdown.recv() => return,
            v = tcp::accept_with_backoff(&listener, "public") => v,
        };
        let opened = if crate::trust::proxy::is_trusted(remote.ip(), &state.grasp.trust().trusted_proxies) {
            state.connections.try_open_from_proxy(remote.ip())
        } else {
            state.connections.try_open(remote.ip())
        };
        let permit = match opened {
            Ok(permit) => Arc::new(permit),
            Err(refusal) => {
                tracing::debug!(%remote, ?refusal, open = state.connections.open(), "connection refused");
                state.grasp.metrics().connection_refused(&refusal);
                if let Ok(slot) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream, refusal).await;
                        drop(slot);
                    });
                }
                continue;
            }
        };
        tokio::spawn(serve_connection(
            stream,
            remote,
            state.clone(),
            shutdown.clone(),
            permit,
        ));
    }
}

/// Answers a connection over the limits with `503` (CORS headers included) once its request head
/// has arrived (discarded unparsed), then reads and discards what the client sends until it
/// closes, so that the close does not reset the connection before the client read the answer.
/// Bounded in time and bytes.
async fn refuse(mut stream: TcpStream, refusal: Refusal) {
    let body = refusal.message();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\n\
         Retry-After: 5\r\n\
         Connection: close\r\n\
         {}\
         \r\n{body}",
        body.len(),
        grasp_state::contract::cors::header_lines(),
    );
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        // Let the client finish sending its request head first: an HTTP client that receives
        // an answer before it has written its request reports a broken connection instead.
        let mut buf = [0u8; 4096];
        let mut head: Vec<u8> = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REFUSAL_DRAIN_BYTES {
            match stream.read(&mut buf).await? {
                0 => break,
                n => head.extend_from_slice(&buf[..n]),
            }
        }
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut drained = head.len();
        while drained < REFUSAL_DRAIN_BYTES {
            match stream.read(&mut buf).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    remote: SocketAddr,
    state: Arc<AppState>,
    mut shutdown: Shutdown,
    permit: Arc<ConnectionPermit>,
) {
    let svc_shutdown = shutdown.clone();
    let write_timeout = state.cfg.limits.write_timeout;
    let svc = service_fn(move |req| {
        let state = state.clone();
        let shutdown = svc_shutdown.clone();
        // A WebSocket upgrade keeps the connection's place for as long as the socket lives.
        let permit = permit.clone();
        async move { Ok::<_, Infallible>(route(req, state, remote, shutdown, permit).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(WriteDeadline::new(stream, write_timeout, remote)), svc)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(%remote, error = %e, "http connection error");
            }
        }
        _ = shutdown.recv() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

async fn route(
    req: Request<Incoming>,
    state: Arc<AppState>,
    remote: SocketAddr,
    shutdown: Shutdown,
    permit: Arc<ConnectionPermit>,
) -> Response<Body> {
    let path = req.uri().path();
    let resp = if grasp_state::contract::cors::is_preflight(req.method().as_str()) {
        http::preflight()
    } else if catching_up(&req, &state, remote) {
        // A replica back from a restart serves an older copy until it has caught up with the
        // others: what the front forwards goes to another replica meanwhile (nginx's
        // `proxy_next_upstream http_503`, docs/scaling.md). The other replicas' own requests
        // (relay sync, git sync) are not forwarded, and are served: they are how it catches up.
        tracing::debug!(%remote, path, "forwarded request refused: catching up with the other replicas");
        let mut r = http::text(StatusCode::SERVICE_UNAVAILABLE, CATCHING_UP);
        r.headers_mut().insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("5"));
        r
    } else if path == "/" && (req.method() == Method::GET || req.method() == Method::HEAD) {
        if is_websocket_upgrade(&req) {
            websocket_upgrade(req, state, remote, shutdown, permit)
        } else if accepts_nostr_json(&req) {
            let mut r = http::text(
                StatusCode::OK,
                crate::nostr::nip11::document(&state.cfg, state.grasp.trust(), &state.identity.public_key()).to_string(),
            );
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/nostr+json"),
            );
            r
        } else {
            http::html(StatusCode::OK, pages::home(&state.cfg, &state.grasp, req.uri().query()).await)
        }
    } else if path == crate::nostr::nip05::PATH && (req.method() == Method::GET || req.method() == Method::HEAD) {
        let answer = crate::nostr::nip05::answer(req.uri().query(), &state.identity.public_key());
        let mut r = http::text(StatusCode::OK, answer.to_string());
        r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    } else {
        // Repository paths, and every other path: grasp-cgi serves git, the repository pages and
        // the one 404 page (HTML for browsers), the same here as behind nginx. Git request slots
        // are counted per client: the forwarded address when the peer is a trusted proxy.
        let client = crate::trust::proxy::client_address(remote.ip(), req.headers(), &state.grasp.trust().trusted_proxies);
        match state.git_requests.try_open(client) {
            Ok(slot) => {
                // A replica set's push to a repository this replica does not have yet: its
                // announcement may have reached another replica a moment ago.
                if let Some(reads) = state.grasp.replica_reads() {
                    reads.before_push_to_missing(&state.grasp, req.method().as_str(), req.uri().path(), req.uri().query().unwrap_or("")).await;
                }
                let timer = state.grasp.metrics().git_request(&req);
                // REMOTE_ADDR is the client as resolved through trusted proxies: the hooks forward
                // it, and a push's placeholders count against its share (docs/protocol.md#caps).
                let client_addr = SocketAddr::new(client, remote.port());
                let resp = timer.finish(crate::git::http::serve(req, client_addr, &state.git, shutdown).await);
                resp.map(|body| http::holding(body, slot))
            }
            Err(refusal) => {
                tracing::info!(%remote, path = %req.uri().path(), ?refusal, "git request refused: too many running");
                let mut r = http::text(StatusCode::SERVICE_UNAVAILABLE, git_refusal_message(refusal));
                r.headers_mut().insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("10"));
                r
            }
        }
    };
    http::with_cors(resp)
}

/// The answer to a request the front forwards while this replica catches up.
const CATCHING_UP: &str =
    "unavailable: this replica of the service is catching up with the others after a restart; try again in a few seconds\n";

/// Is `req` forwarded by the front (a trusted proxy that says whose request it is), to a replica
/// that has not caught up with the others yet ([`Health::caught_up`])?
fn catching_up(req: &Request<Incoming>, state: &AppState, remote: SocketAddr) -> bool {
    let forwarded = req.headers().contains_key("x-forwarded-for") || req.headers().contains_key("x-real-ip");
    forwarded
        && !state.grasp.replicas().is_empty()
        && crate::trust::proxy::is_trusted(remote.ip(), &state.grasp.trust().trusted_proxies)
        && !state.health.caught_up()
}

/// The text of a refused git request: which limit, and what to do.
fn git_refusal_message(refusal: Refusal) -> String {
    match refusal {
        Refusal::Total(n) => format!(
            "unavailable: this server already runs its maximum of {n} git requests; try again in a few seconds\n"
        ),
        Refusal::PerAddress(n) => format!(
            "unavailable: your address already runs the maximum of {n} git requests on this server; \
             wait for your other clones and pushes to finish (or end stalled ones) and try again\n"
        ),
    }
}

fn header_has_token(req: &Request<Incoming>, name: hyper::header::HeaderName, token: &str) -> bool {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn is_websocket_upgrade(req: &Request<Incoming>) -> bool {
    header_has_token(req, UPGRADE, "websocket") && header_has_token(req, CONNECTION, "upgrade")
}

fn accepts_nostr_json(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("application/nostr+json"))
}

fn websocket_upgrade(
    mut req: Request<Incoming>,
    state: Arc<AppState>,
    remote: SocketAddr,
    shutdown: Shutdown,
    permit: Arc<ConnectionPermit>,
) -> Response<Body> {
    let version_ok = req
        .headers()
        .get(SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v == "13");
    let Some(key) = req.headers().get(SEC_WEBSOCKET_KEY).cloned() else {
        return http::text(
            StatusCode::BAD_REQUEST,
            "bad request: WebSocket upgrade without Sec-WebSocket-Key\n",
        );
    };
    if !version_ok {
        let mut r = http::text(
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket version 13 required\n",
        );
        r.headers_mut()
            .insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return r;
    }
    // Behind a trusted proxy, the forwarded client address holds a per-address place for as long
    // as the WebSocket lives, and is the key of its write limits.
    let trust = state.grasp.trust();
    let client = crate::trust::proxy::client_address(remote.ip(), req.headers(), &trust.trusted_proxies);
    let client_place = if crate::trust::proxy::is_trusted(remote.ip(), &trust.trusted_proxies) {
        match state.connections.try_hold_address(client) {
            Ok(place) => Some(place),
            Err(refusal) => {
                tracing::debug!(%remote, %client, ?refusal, "forwarded websocket refused");
                return http::text(StatusCode::SERVICE_UNAVAILABLE, refusal.message());
            }
        }
    } else {
        None
    };
    let from_replica = req.uri().query() == Some(crate::nostr::pipeline::REPLICA_QUERY);
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws = WebSocketStream::from_raw_socket(
                    TokioIo::new(upgraded),
                    Role::Server,
                    Some(state.limits.websocket_config()),
                )
                .await;
                connection::handle(ws, state.grasp.clone(), state.limits, shutdown, remote, client, from_replica).await;
                drop((permit, client_place));
            }
            Err(e) => tracing::debug!(%remote, error = %e, "websocket upgrade failed"),
        }
    });
    let mut r = Response::new(http::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::{parse_duration, EXIT_BAD_CONFIGURATION};

    /// The packaged systemd unit runs the relay from the packaged configuration as its own
    /// user, may write nothing but that configuration's data directory, stops gracefully (the
    /// shutdown grace and the last checkpoint fit in its stop timeout), does not restart into a
    /// refused configuration, and has the descriptors the default limits need.
    #[test]
    fn the_packaged_unit_runs_the_packaged_configuration() {
        let unit = include_str!("../../../packaging/grasp-relay.service");
        let value = |key: &str| {
            let prefix = format!("{key}=");
            let found: Vec<&str> = unit.lines().filter_map(|l| l.strip_prefix(prefix.as_str())).collect();
            assert_eq!(found.len(), 1, "packaging/grasp-relay.service sets {key} {} times", found.len());
            found[0]
        };
        assert_eq!(value("ExecStart"), "/usr/bin/grasp-relay --config /etc/grasp-relay/config.toml");
        let packaged = Config::check_file(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/config.toml"))).unwrap().config;
        assert_eq!(value("ReadWritePaths"), packaged.storage.data_dir.to_str().unwrap());
        assert_eq!(format!("/var/lib/{}", value("StateDirectory")), value("ReadWritePaths"));
        assert_eq!((value("User"), value("Group")), ("grasp-relay", "grasp-relay"));
        for (key, expected) in [("ProtectSystem", "strict"), ("NoNewPrivileges", "yes"), ("Restart", "on-failure"), ("KillSignal", "SIGTERM"), ("KillMode", "mixed")] {
            assert_eq!(value(key), expected, "{key}");
        }
        assert_eq!(value("RestartPreventExitStatus"), EXIT_BAD_CONFIGURATION.to_string());
        let stop = parse_duration(value("TimeoutStopSec")).unwrap();
        assert!(stop >= SHUTDOWN_GRACE + Duration::from_secs(10), "TimeoutStopSec {stop:?} leaves no room for the shutdown grace and the last checkpoint");
        let nofile: u64 = value("LimitNOFILE").parse().unwrap();
        assert!(nofile >= grasp_state::trust::fd_budget::required(packaged.limits.max_connections.into(), packaged.limits.git_max_requests.into()));
    }
}
