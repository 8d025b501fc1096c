//! The internal hook API: a second HTTP listener, on loopback only, that the git hooks call.
//!
//! It is never reachable through the public port (a separate socket bound to a loopback address;
//! the relay refuses to start otherwise) and every request must carry the token from
//! `<data>/api-token` (mode 0600, new at every start) in the `x-grasp-token` header, except the
//! health probes `/healthz` and `/readyz` ([`crate::api::health`]), which reveal no data.
//! Requests and responses are the versioned JSON types of `grasp_state::contract::hook_api`. See
//! docs/hook-api.md.

pub mod git_auth;
mod routes;
pub mod health;
pub mod repos;
pub mod views;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use grasp_state::contract::hook_api::{check_version, ApiError, HookRequest, HOOK_API_VERSION, TOKEN_HEADER};
use grasp_state::contract::layout::{API_ADDR_FILE, API_TOKEN_FILE};
use grasp_state::contract::atomic_file::write_atomic;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use nostr::prelude::{FromBech32, PublicKey};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::grasp::Grasp;
use crate::api::health::Health;
use crate::api::views::OperatorViews;
use crate::net::http::{full, Body};
use crate::shutdown::Shutdown;

/// Path of the operator's purgatory listing (same token).
pub const PATH_PURGATORY: &str = "/v1/purgatory";

/// Path of the operator's background sync view (same token).
pub const PATH_SYNC: &str = "/v1/sync";

pub use crate::grasp::purgatory::PurgatoryListing;

/// Largest request body accepted (a push may update many refs, but not millions).
const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;


/// Binds the hook API, writes its address and a fresh token into `data_dir`.
pub async fn bind(addr: SocketAddr, data_dir: &Path) -> Result<(TcpListener, String)> {
    if !addr.ip().is_loopback() {
        bail!("--api-bind must be a loopback address (got {addr}): the hook API must never be reachable from the network");
    }
    let listener = TcpListener::bind(addr).await.with_context(|| format!("cannot bind the hook API on {addr}"))?;
    let token = new_token()?;
    write_private(&data_dir.join(API_TOKEN_FILE), token.as_bytes())?;
    write_private(&data_dir.join(API_ADDR_FILE), listener.local_addr()?.to_string().as_bytes())?;
    Ok((listener, token))
}

fn new_token() -> Result<String> {
    let mut buf = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .context("cannot read /dev/urandom for the hook API token")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `data` to `path` atomically with mode 0600.
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    write_atomic(path, data, Some(0o600)).with_context(|| format!("cannot write {}", path.display()))
}

/// Worker threads of the hook API's own runtime.
const API_WORKERS: usize = 2;
/// Blocking threads (git processes, file locks) of the hook API's own runtime.
const API_BLOCKING_THREADS: usize = 64;

/// Serves the hook API until shutdown on a runtime of its own, started on a thread of its own:
/// its worker and blocking threads are not shared with the WebSocket side, so however busy
/// that side is, the hooks are answered. The thread ends when the API has stopped.
pub fn serve_on_own_runtime(listener: TcpListener, token: String, grasp: Arc<Grasp>, health: Arc<Health>, views: Arc<OperatorViews>, shutdown: Shutdown) -> Result<()> {
    let listener = listener.into_std().context("detaching the hook API listener")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(API_WORKERS)
        .max_blocking_threads(API_BLOCKING_THREADS)
        .thread_name("grasp-hook-api")
        .enable_all()
        .build()
        .context("starting the hook API's runtime")?;
    std::thread::Builder::new()
        .name("grasp-hook-api".into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, token, grasp, health, views, shutdown).await,
                    Err(e) => tracing::error!(error = %e, "cannot serve the hook API"),
                }
            });
            // Connections still open at shutdown are dropped with the runtime.
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
        })
        .context("starting the hook API's thread")?;
    Ok(())
}

/// Serves the hook API until shutdown.
pub async fn serve(listener: TcpListener, token: String, grasp: Arc<Grasp>, health: Arc<Health>, views: Arc<OperatorViews>, mut shutdown: Shutdown) {
    let token = Arc::new(token);
    loop {
        let (stream, _) = tokio::select! {
            s = crate::net::tcp::accept_with_backoff(&listener, "hook API") => s,
            _ = shutdown.recv() => return,
        };
        let (grasp, token, health, views) = (grasp.clone(), token.clone(), health.clone(), views.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (grasp, token, health, views) = (grasp.clone(), token.clone(), health.clone(), views.clone());
                async move { Ok::<_, std::convert::Infallible>(handle(req, &token, &grasp, &health, &views).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(value).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    json(status, &ApiError::new(msg))
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
fn token_matches(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

async fn handle(req: Request<Incoming>, token: &str, grasp: &Grasp, health: &Health, views: &OperatorViews) -> Response<Body> {
    // Probes need no token (docs/deployment.md): they reveal nothing but check names.
    if let Some(resp) = crate::api::health::probe(&req, health).await {
        return resp;
    }
    let given = req.headers().get(TOKEN_HEADER).map(|v| v.as_bytes().to_vec()).unwrap_or_default();
    if !token_matches(&given, token.as_bytes()) {
        return error(StatusCode::UNAUTHORIZED, format!("missing or wrong {TOKEN_HEADER} header"));
    }
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    if method == Method::GET {
        return routes::get(&path, grasp, views).await;
    }
    if method != Method::POST {
        return error(StatusCode::METHOD_NOT_ALLOWED, "use POST");
    }
    let body: Bytes = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error(StatusCode::PAYLOAD_TOO_LARGE, format!("cannot read request: {e}")),
    };
    routes::post(&path, &body, grasp, views).await
}

/// `GET /v1/sync`: the git-data sync's figures, plus `relays`: each relay followed by
/// relay-to-relay sync (empty with `--no-relay-sync`, which `relay_sync: false` says).
fn sync_view(stats: &crate::sync::SyncStats, views: &OperatorViews) -> serde_json::Value {
    let mut view = serde_json::to_value(stats).unwrap_or_default();
    let relays = views.relay_sync.get().map(|v| v.relays()).unwrap_or_default();
    view["relay_sync"] = views.relay_sync.get().is_some().into();
    view["relays"] = serde_json::to_value(relays).unwrap_or_default();
    if let Some(v) = views.relay_sync.get() {
        view["interest"] = serde_json::to_value(v.interest()).unwrap_or_default();
        view["sync_plus"] = serde_json::to_value(v.sync_plus()).unwrap_or_default();
    }
    view
}

/// The purgatory listing with each held announcement's relay sync level (`state-only` while
/// held; `none` when relay sync does not follow it yet or is off).
fn with_sync_levels(listing: &PurgatoryListing, views: &OperatorViews) -> serde_json::Value {
    let mut value = serde_json::to_value(listing).unwrap_or_default();
    let view = views.relay_sync.get();
    if let Some(entries) = value["entries"].as_array_mut() {
        for entry in entries {
            if entry["kind"] != "announcement" {
                continue;
            }
            let (owner, identifier) = (entry["pubkey"].as_str().unwrap_or_default(), entry["identifier"].as_str().unwrap_or_default());
            let level = view.and_then(|v| v.level(owner, identifier)).map_or("none", |l| l.as_str());
            entry["sync_level"] = level.into();
        }
    }
    value
}

/// The pusher's address a hook forwarded (git's CGI `REMOTE_ADDR`), as per-address limits
/// count it; `None` when the hook sent none (older hooks, a push not over HTTP) or it does not
/// parse.
fn pusher(grasp: &Grasp, req: &HookRequest) -> Option<std::net::IpAddr> {
    let address = req.client.as_deref()?.parse().ok()?;
    Some(grasp.trust().limits.address_key(address))
}

fn owner(npub: &str) -> Option<PublicKey> {
    PublicKey::from_bech32(npub).ok()
}

/// Parses a versioned request; the error is the response to send (boxed: it is large).
fn parse<T: serde::de::DeserializeOwned + Versioned>(body: &[u8]) -> Result<T, Box<Response<Body>>> {
    let req: T = serde_json::from_slice(body).map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, format!("bad request: {e}"))))?;
    check_version(req.version()).map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, e.to_string())))?;
    Ok(req)
}

trait Versioned {
    fn version(&self) -> u32;
}
impl Versioned for grasp_state::contract::hook_api::PurgeAuthorRequest {
    fn version(&self) -> u32 {
        self.version
    }
}
impl Versioned for grasp_state::contract::hook_api::PrsRepoRequest {
    fn version(&self) -> u32 {
        self.version
    }
}
impl Versioned for grasp_state::contract::hook_api::GitAuthRequest {
    fn version(&self) -> u32 {
        self.version
    }
}
impl Versioned for grasp_state::contract::hook_api::AuthorityRequest {
    fn version(&self) -> u32 {
        self.version
    }
}

/// Both hooks send the one [`HookRequest`].
impl Versioned for HookRequest {
    fn version(&self) -> u32 {
        self.version
    }
}

/// How long `grasp-relay purgatory` waits for the listing.
const LISTING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `grasp-relay purgatory`: fetches `GET /v1/purgatory` from the relay running on `data_dir`
/// (address and token from its files, with the hooks' client) and returns the JSON body.
pub fn fetch_purgatory_listing(data_dir: &Path) -> Result<String> {
    fetch_operator_view(data_dir, PATH_PURGATORY)
}

/// `GET <path>` on the hook API of the relay running on `data_dir` (with the hooks' client);
/// the JSON body.
pub fn fetch_operator_view(data_dir: &Path, path: &str) -> Result<String> {
    grasp_hooks::ApiClient::from_data_dir(data_dir, LISTING_TIMEOUT)?.get(path)
}

/// The listing as a table for a terminal.
pub fn render_purgatory_table(json: &str) -> Result<String> {
    use std::fmt::Write as _;
    let v: serde_json::Value = serde_json::from_str(json).context("the relay's listing is not JSON")?;
    let mut out = String::new();
    let short = |s: &str, n: usize| s.chars().take(n).collect::<String>();
    writeln!(out, "{:<12} {:<12} {:<24} {:>7} {:>8} {:<12} WAITING FOR", "KIND", "PUBKEY", "IDENTIFIER", "AGE", "LEFT", "EVENT")?;
    for e in v["entries"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let str_of = |k: &str| e[k].as_str().unwrap_or("-").to_owned();
        let oids: Vec<String> = e["oids"].as_array().into_iter().flatten().filter_map(|o| o.as_str()).map(|o| short(o, 12)).collect();
        let mut waiting = str_of("waiting_for");
        if !oids.is_empty() {
            waiting = format!("{} [{}]", waiting, oids.join(", "));
        }
        if let Some(level) = e["sync_level"].as_str() {
            waiting = format!("{waiting} (relay sync: {level})");
        }
        let kind = if e["soft_expired"] == true { "announcement*".to_owned() } else { str_of("kind") };
        writeln!(
            out,
            "{:<12} {:<12} {:<24} {:>6}s {:>7}s {:<12} {}",
            kind,
            short(&str_of("pubkey"), 12),
            short(&str_of("identifier"), 24),
            e["age_secs"].as_u64().unwrap_or(0),
            e["time_left_secs"].as_u64().unwrap_or(0),
            short(&str_of("event_id"), 12),
            waiting
        )?;
    }
    let expired = v["expired_events"].as_array().map_or(0, Vec::len);
    writeln!(out, "{} entries; {expired} recently expired event ids; * = soft-expired (repository deleted)", v["entries"].as_array().map_or(0, Vec::len))?;
    let deferred = v["deferred"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !deferred.is_empty() {
        writeln!(out, "\nDeferred work (repositories busy past the lock bound, retried):")?;
        writeln!(out, "{:<24} {:<12} {:>7} {:>8} {:>6} REPOSITORIES (REASON)", "IDENTIFIER", "AUTHOR", "AGE", "RETRY IN", "TRIES")?;
        for d in deferred {
            let repos: Vec<&str> = d["repos"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
            writeln!(
                out,
                "{:<24} {:<12} {:>6}s {:>7}s {:>6} {} ({})",
                short(d["identifier"].as_str().unwrap_or("-"), 24),
                short(d["author"].as_str().unwrap_or("-"), 12),
                d["age_secs"].as_u64().unwrap_or(0),
                d["next_retry_secs"].as_u64().unwrap_or(0),
                d["attempts"].as_u64().unwrap_or(0),
                repos.join(", "),
                d["reason"].as_str().unwrap_or("")
            )?;
        }
    }
    // Absent from the listing of an older relay.
    let unsigned = &v["unsigned"];
    let mib = |k: &serde_json::Value| grasp_state::purgatory::unsigned::mib(k.as_u64().unwrap_or(0));
    if unsigned.is_object() {
        writeln!(
            out,
            "Unsigned data (git-first pushes waiting for their pull request events): {} MiB of {} MiB (--unsigned-bytes-total), from {} addresses (--unsigned-bytes-per-address {} MiB)",
            mib(&unsigned["total_bytes"]),
            mib(&unsigned["budget_total"]),
            unsigned["addresses"].as_u64().unwrap_or(0),
            mib(&unsigned["budget_per_address"]),
        )?;
        for a in unsigned["top"].as_array().map(Vec::as_slice).unwrap_or_default() {
            writeln!(out, "  {:<40} {:>10} MiB", a["address"].as_str().unwrap_or("-"), mib(&a["bytes"]))?;
        }
    }
    let contributors = &v["contributors"];
    if contributors.is_object() {
        writeln!(
            out,
            "Pull request data of non-maintainers: {} MiB of {} MiB (--contributor-bytes-total), {} pull requests ({} closed, pruned after --pr-data-grace), {} authors (--contributor-bytes-per-author {} MiB), {} addresses (--contributor-bytes-per-address {} MiB)",
            mib(&contributors["total_bytes"]),
            mib(&contributors["budget_total"]),
            contributors["pull_requests"].as_u64().unwrap_or(0),
            contributors["closed"].as_u64().unwrap_or(0),
            contributors["authors"].as_u64().unwrap_or(0),
            mib(&contributors["budget_per_author"]),
            contributors["addresses"].as_u64().unwrap_or(0),
            mib(&contributors["budget_per_address"]),
        )?;
        for key in ["top_authors", "top_addresses"] {
            for a in contributors[key].as_array().map(Vec::as_slice).unwrap_or_default() {
                writeln!(out, "  {:<64} {:>10} MiB", a["who"].as_str().unwrap_or("-"), mib(&a["bytes"]))?;
            }
        }
    }
    let ds = &v["deferred_stats"];
    let lost = ["dropped_author_share", "dropped_full", "evicted", "dropped_owner_share"].map(|k| ds[k].as_u64().unwrap_or(0));
    if lost.iter().any(|n| *n > 0) {
        writeln!(
            out,
            "Deferred work lost since start: {} over an author's share (--deferred-per-author {}), {} over an owner's share (--deferred-per-owner {}), {} with the table full (--deferred-total {}), {} dropped for an author with fewer",
            lost[0],
            ds["limit_per_author"].as_u64().unwrap_or(0),
            lost[3],
            ds["limit_per_owner"].as_u64().unwrap_or(0),
            lost[1],
            ds["limit_total"].as_u64().unwrap_or(0),
            lost[2]
        )?;
    }
    Ok(out)
}

/// The relays of `GET /v1/sync` as a table for a terminal.
pub fn render_sync_table(json: &str) -> Result<String> {
    use std::fmt::Write as _;
    let v: serde_json::Value = serde_json::from_str(json).context("the relay's sync view is not JSON")?;
    let mut out = String::new();
    let relays = v["relays"].as_array().map(Vec::as_slice).unwrap_or_default();
    writeln!(
        out,
        "{:<32} {:<16} {:>6} {:>9} {:>9} {:>8} {:>11} {:>9}  {:<8} LAST ERROR",
        "RELAY", "STATE", "REPOS", "RECEIVED", "ACCEPTED", "REFUSED", "UNREQUESTED", "THROTTLED", "NIP-77"
    )?;
    for r in relays {
        let mut state = r["state"].as_str().unwrap_or("-").to_owned();
        if r["cooling_down"] == true {
            state = "cooling-down".into();
        }
        let nip77 = match r["negentropy"].as_bool() {
            Some(true) => "yes",
            Some(false) => "no",
            None => "?",
        };
        let repos = r["repositories"].as_array().map_or(0, Vec::len);
        let boot = match (r["bootstrap"] == true, r["outbox"] == true) {
            (true, _) => "*",
            (false, true) => "+",
            (false, false) => "",
        };
        writeln!(
            out,
            "{:<32} {:<16} {:>6} {:>9} {:>9} {:>8} {:>11} {:>9}  {:<8} {}",
            format!("{}{boot}", r["url"].as_str().unwrap_or("-")),
            state,
            repos,
            r["received"].as_u64().unwrap_or(0),
            r["accepted"].as_u64().unwrap_or(0),
            r["refused"].as_u64().unwrap_or(0),
            r["unrequested"].as_u64().unwrap_or(0),
            throttled_time(r["throttled_ms"].as_u64().unwrap_or(0)),
            nip77,
            r["last_error"].as_str().unwrap_or("")
        )?;
    }
    let note = if v["relay_sync"] == false { " (relay sync is off: --no-relay-sync)" } else { "" };
    writeln!(
        out,
        "{} relays{note}; * = bootstrap; + = a participant's relay (Sync+); UNREQUESTED = refused events it was not asked for; THROTTLED = time spent waiting for its --relay-sync-rate bucket; git-data sync queue: {}",
        relays.len(),
        v["queue_length"].as_u64().unwrap_or(0)
    )?;
    render_sync_plus(&mut out, &v["sync_plus"])?;
    Ok(out)
}

/// Sync+'s lines of `grasp-relay sync`: its figures, then the relays whose list look-ups failed.
fn render_sync_plus(out: &mut String, sp: &serde_json::Value) -> Result<()> {
    use std::fmt::Write as _;
    if !sp.is_object() {
        writeln!(out, "Sync+ (GRASP-03) is off")?;
        return Ok(());
    }
    let n = |k: &str| sp[k].as_u64().unwrap_or(0);
    let index = sp["index_relays"].as_array().map(|a| a.iter().filter_map(|u| u.as_str()).collect::<Vec<_>>().join(" ")).unwrap_or_default();
    writeln!(
        out,
        "Sync+ (GRASP-03): {} passes (last {} ms) over {} repositories, {} participants, {} lists cached, {} of {} participants' relays followed, {} events gained; list look-ups: {} relays asked, {} lists received, {} failed; index relays: {}",
        n("passes"),
        n("last_pass_ms"),
        n("repositories"),
        n("participants"),
        n("lists_cached"),
        n("relays"),
        n("candidates"),
        n("events_gained"),
        n("list_queries"),
        n("lists_received"),
        n("list_errors"),
        if index.is_empty() { "none" } else { index.as_str() }
    )?;
    if let Some(errors) = sp["errors"].as_object() {
        for (relay, e) in errors {
            writeln!(out, "  list look-ups failing on {relay}: {} ({})", e["errors"].as_u64().unwrap_or(0), e["last_error"].as_str().unwrap_or(""))?;
        }
    }
    Ok(())
}

/// A relay's `throttled_ms` for the table: `0`, milliseconds under a second, then seconds,
/// minutes, hours.
fn throttled_time(ms: u64) -> String {
    match ms {
        0 => "0".into(),
        1..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1e3),
        60_000..=3_599_999 => format!("{:.1}m", ms as f64 / 60e3),
        _ => format!("{:.1}h", ms as f64 / 3_600e3),
    }
}

/// Runs a one-shot [`Command`](crate::config::Command) against the relay on `data_dir`.
pub fn run_command(data_dir: &Path, command: &crate::config::Command) -> Result<()> {
    match command {
        crate::config::Command::PurgeAuthor { author } => {
            println!("{}", crate::grasp::purge::run_purge_author(data_dir, author)?);
        }
        crate::config::Command::Purgatory { json } => {
            let body = fetch_purgatory_listing(data_dir)?;
            if *json {
                println!("{body}");
            } else {
                print!("{}", render_purgatory_table(&body)?);
            }
        }
        crate::config::Command::Sync { json } => {
            let body = fetch_operator_view(data_dir, PATH_SYNC)?;
            if *json {
                println!("{body}");
            } else {
                print!("{}", render_sync_table(&body)?);
            }
        }
        crate::config::Command::Repos { json, orphans, purge, yes } => {
            repos::run_command(data_dir, *json, *orphans, *purge, *yes)?;
        }
        crate::config::Command::Authority { json, apply } => {
            let client = grasp_hooks::ApiClient::from_data_dir(data_dir, std::time::Duration::from_secs(600))?;
            let path = grasp_state::contract::hook_api::PATH_AUTHORITY;
            let report: grasp_state::contract::hook_api::AuthorityReport = if *apply {
                client.post(path, &grasp_state::contract::hook_api::AuthorityRequest { version: HOOK_API_VERSION })?
            } else {
                serde_json::from_str(&client.get(path)?).context("the relay's report is not understood")?
            };
            if *json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", render_authority_report(&report, *apply));
            }
        }
        // Neither asks the relay: the binary's main runs them.
        crate::config::Command::Config { .. } | crate::config::Command::Doctor { .. } => {
            anyhow::bail!("`config` and `doctor` do not ask the running relay")
        }
    }
    Ok(())
}

/// The authorization-integrity report for a terminal.
pub fn render_authority_report(report: &grasp_state::contract::hook_api::AuthorityReport, apply: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for f in &report.findings {
        let what = if f.applied { "realigned" } else if apply { "busy, not realigned" } else { "would realign" };
        let _ = writeln!(out, "{} {what} to state {} by {}", f.repo, &f.state[..f.state.len().min(12)], f.author);
        for c in &f.changes {
            let _ = writeln!(out, "  {c}");
        }
    }
    let _ = writeln!(
        out,
        "{} repositories checked, {} not at their confirmed maintainers' newest state{}",
        report.checked,
        report.findings.len(),
        if apply || report.findings.is_empty() { "" } else { "; dry run: run `grasp-relay authority --apply` to realign them" }
    );
    out
}

/// Installs the hooks git runs (`core.hooksPath` of every repository points at `hooks_dir`): the
/// hook binaries themselves, so git starts them without a shell (a hard link to each binary in
/// `bin_dir`, or a copy where no link can be made: across file systems, or binaries of another
/// user under `fs.protected_hardlinks`), and beside them
/// their configuration (`grasp_state::contract::hook_config`: the data directory and the push limits, so
/// the limits hold behind nginx + fcgiwrap too), written first. Everything is replaced
/// atomically at every start, so hooks of older versions (shell scripts) and of older binaries
/// are replaced; a running push keeps the hook it started.
pub fn install_hooks(hooks_dir: &Path, bin_dir: &Path, data_dir: &Path, limits: grasp_state::contract::push_limits::PushLimits) -> Result<()> {
    use grasp_state::contract::layout::PRE_RECEIVE_ONLY_DIR;
    install_hooks_in(hooks_dir, bin_dir, data_dir, limits, &[("pre-receive", "grasp-pre-receive"), ("post-receive", "grasp-post-receive")])?;
    // The hooks of a push the relay's listener runs from end to end (`crate::git::supervised_push`).
    install_hooks_in(&hooks_dir.join(PRE_RECEIVE_ONLY_DIR), bin_dir, data_dir, limits, &[("pre-receive", "grasp-pre-receive")])
}

/// [`install_hooks`] of `hooks` (hook name, binary name) into `hooks_dir`, with their
/// configuration.
fn install_hooks_in(hooks_dir: &Path, bin_dir: &Path, data_dir: &Path, limits: grasp_state::contract::push_limits::PushLimits, hooks: &[(&str, &str)]) -> Result<()> {
    use grasp_state::contract::hook_config::HookConfig;
    use grasp_state::contract::layout::HOOK_CONFIG_FILE;
    std::fs::create_dir_all(hooks_dir)?;
    let config = HookConfig { data_dir: data_dir.to_path_buf(), limits }.render()?;
    write_atomic(&hooks_dir.join(HOOK_CONFIG_FILE), &config, Some(0o644))
        .with_context(|| format!("cannot write {}", hooks_dir.join(HOOK_CONFIG_FILE).display()))?;
    for &(hook, bin) in hooks {
        let (bin_path, hook_path) = (bin_dir.join(bin), hooks_dir.join(hook));
        let how = match grasp_state::contract::atomic_file::link_atomic(&bin_path, &hook_path) {
            Ok(()) => "hard link",
            Err(link_error) => {
                let binary = std::fs::read(&bin_path).with_context(|| format!("cannot read the hook binary {}", bin_path.display()))?;
                write_atomic(&hook_path, &binary, Some(0o755)).with_context(|| format!("cannot write {}", hook_path.display()))?;
                tracing::debug!(hook = %hook_path.display(), error = %link_error, "hook copied (no hard link possible)");
                "copy"
            }
        };
        tracing::info!(hook = %hook_path.display(), binary = %bin_path.display(), how, "git hook installed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abd", b"abc"));
        assert!(!token_matches(b"ab", b"abc"));
        assert!(!token_matches(b"", b"abc"));
    }

    #[test]
    fn table_lists_every_entry() {
        let json = r#"{"version":1,"entries":[{"kind":"state","pubkey":"ab","identifier":"repo","event_id":"0123456789abcdef","age_secs":5,"time_left_secs":60,"soft_expired":false,"waiting_for":"git","oids":["4f3c1a2b3c4d5e6f"]},{"kind":"announcement","pubkey":"cd","identifier":"x","event_id":"ff","age_secs":1,"time_left_secs":2,"soft_expired":true,"waiting_for":"revival","oids":[]}],"expired_events":[{"event_id":"ee","expired_secs_ago":3}],"stats":{}}"#;
        let table = render_purgatory_table(json).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].starts_with("state") && lines[1].contains("0123456789ab") && lines[1].contains("[4f3c1a2b3c4d]"), "{table}");
        assert!(lines[2].starts_with("announcement*"), "{table}");
        assert!(lines[3].starts_with("2 entries; 1 recently expired"), "{table}");
        // Unsigned data of git-first pushes: the total and the addresses holding most.
        let json = json.replace(r#""stats":{}"#, r#""stats":{},"unsigned":{"total_bytes":3145728,"budget_total":4294967296,"budget_per_address":268435456,"addresses":1,"top":[{"address":"10.0.0.1","bytes":3145728}]}"#);
        let table = render_purgatory_table(&json).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[4].starts_with("Unsigned data") && lines[4].contains("3 MiB of 4096 MiB") && lines[4].contains("from 1 addresses"), "{table}");
        assert!(lines[5].contains("10.0.0.1") && lines[5].ends_with("3 MiB"), "{table}");
        assert!(render_purgatory_table("nope").is_err());
    }

    #[test]
    fn table_lists_deferred_work() {
        let json = r#"{"version":1,"entries":[],"expired_events":[],"stats":{},"deferred":[{"identifier":"repo","author":"abcdef0123456789","repos":["npub1x/repo.git"],"reason":"timed out","age_secs":4,"attempts":2,"next_retry_secs":3}]}"#;
        let table = render_purgatory_table(json).unwrap();
        let row = table.lines().find(|l| l.starts_with("repo ")).unwrap_or_else(|| panic!("{table}"));
        assert!(row.contains("abcdef012345") && row.contains("npub1x/repo.git (timed out)"), "{table}");
        assert!(table.contains("Deferred work"), "{table}");
        assert!(!table.contains("lost since start"), "{table}");
        let json = r#"{"version":1,"entries":[],"expired_events":[],"stats":{},"deferred":[],"deferred_stats":{"entries":0,"dropped_author_share":7,"dropped_full":0,"evicted":2,"limit_total":10000,"limit_per_author":625}}"#;
        let table = render_purgatory_table(json).unwrap();
        assert!(table.contains("lost since start: 7 over an author's share (--deferred-per-author 625), 0 over an owner's share") && table.contains("0 with the table full") && table.contains("2 dropped"), "{table}");
    }

    #[test]
    fn sync_table_lists_every_relay() {
        let json = r#"{"queue_length":2,"relay_sync":true,"relays":[{"url":"ws://a","state":"live","bootstrap":true,"repositories":["npub1x/r"],"received":5,"accepted":4,"refused":1,"negentropy":true,"cooling_down":false,"last_error":null},{"url":"ws://b","state":"backing-off","bootstrap":false,"repositories":[],"received":0,"accepted":0,"refused":0,"negentropy":null,"cooling_down":true,"last_error":"rate-limited: slow"}]}"#;
        let table = render_sync_table(json).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("ws://a*") && lines[1].contains("live") && lines[1].contains("yes"), "{table}");
        assert!(lines[2].contains("cooling-down") && lines[2].contains("rate-limited: slow"), "{table}");
        assert!(lines[3].starts_with("2 relays;") && lines[3].contains("queue: 2"), "{table}");
        assert_eq!(lines.len(), 5, "{table}");
        assert_eq!(lines[4], "Sync+ (GRASP-03) is off");
    }

    #[test]
    fn sync_table_shows_sync_plus() {
        let json = r#"{"queue_length":0,"relay_sync":true,"relays":[{"url":"ws://outbox","state":"live","bootstrap":false,"outbox":true,"repositories":["npub1x/r"],"received":2,"accepted":2,"refused":0}],
            "sync_plus":{"index_relays":["ws://index"],"repositories":1,"participants":3,"lists_cached":2,"passes":7,"last_pass_ms":4,"candidates":1,"relays":1,"list_queries":5,"lists_received":2,"list_errors":1,"events_gained":2,"errors":{"ws://down":{"errors":1,"last_error":"connect failed"}}}}"#;
        let table = render_sync_table(json).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("ws://outbox+"), "{table}");
        assert!(lines[3].starts_with("Sync+ (GRASP-03): 7 passes") && lines[3].contains("3 participants, 2 lists cached, 1 of 1 participants' relays followed, 2 events gained") && lines[3].ends_with("index relays: ws://index"), "{table}");
        assert_eq!(lines[4], "  list look-ups failing on ws://down: 1 (connect failed)");
    }

    #[test]
    fn sync_table_shows_unrequested_and_throttled() {
        let json = r#"{"queue_length":0,"relay_sync":true,"relays":[{"url":"ws://flood","state":"live","bootstrap":false,"repositories":[],"received":900,"accepted":3,"refused":897,"unrequested":812,"throttled_ms":4250,"negentropy":false,"cooling_down":false,"last_error":null},{"url":"ws://calm","state":"live","bootstrap":false,"repositories":[],"received":1,"accepted":1,"refused":0,"unrequested":0,"throttled_ms":0,"negentropy":true,"cooling_down":false,"last_error":null}]}"#;
        let table = render_sync_table(json).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("UNREQUESTED") && lines[0].contains("THROTTLED"), "{table}");
        let cols = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        // RELAY STATE REPOS RECEIVED ACCEPTED REFUSED UNREQUESTED THROTTLED NIP-77
        assert_eq!(cols(lines[1])[3..9], ["900", "3", "897", "812", "4.2s", "no"], "{table}");
        assert_eq!(cols(lines[2])[3..9], ["1", "1", "0", "0", "0", "yes"], "{table}");
        // Each column starts where its header does.
        let at = |l: &str, pat: &str| l.find(pat).unwrap_or_else(|| panic!("{pat} in {l}"));
        assert_eq!(at(lines[0], "UNREQUESTED") + "UNREQUESTED".len(), at(lines[1], "812") + 3, "{table}");
        assert_eq!(at(lines[0], "THROTTLED") + "THROTTLED".len(), at(lines[1], "4.2s") + 4, "{table}");
        assert_eq!([throttled_time(999), throttled_time(90_000), throttled_time(7_200_000)], ["999ms", "1.5m", "2.0h"]);
    }

    #[test]
    fn hooks_are_the_binaries_with_their_configuration_beside_them() {
        use grasp_state::contract::hook_config::HookConfig;
        use grasp_state::contract::layout::HOOK_CONFIG_FILE;
        use grasp_state::contract::push_limits::PushLimits;
        let dir = tempfile::tempdir().unwrap();
        let (bin, hooks) = (dir.path().join("bin"), dir.path().join("data/hooks"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&hooks).unwrap();
        for name in ["grasp-pre-receive", "grasp-post-receive"] {
            write_atomic(&bin.join(name), format!("binary {name}").as_bytes(), Some(0o755)).unwrap();
        }
        // A hook script written by an older version is replaced.
        write_atomic(&hooks.join("pre-receive"), b"#!/bin/sh\nexec old --data-dir /x\n", Some(0o755)).unwrap();
        let limits = PushLimits { max_push_bytes: 7, max_pr_push_bytes: 3 };
        install_hooks(&hooks, &bin, &dir.path().join("data"), limits).unwrap();
        for (hook, name) in [("pre-receive", "grasp-pre-receive"), ("post-receive", "grasp-post-receive")] {
            assert_eq!(std::fs::read(hooks.join(hook)).unwrap(), format!("binary {name}").as_bytes());
        }
        let config = HookConfig::parse(&std::fs::read(hooks.join(HOOK_CONFIG_FILE)).unwrap()).unwrap();
        assert_eq!(config, HookConfig { data_dir: dir.path().join("data"), limits });
        // Again (a restart): still in place; a missing binary is an error, the old hook stays.
        install_hooks(&hooks, &bin, &dir.path().join("data"), limits).unwrap();
        std::fs::remove_file(bin.join("grasp-post-receive")).unwrap();
        assert!(install_hooks(&hooks, &bin, &dir.path().join("data"), limits).is_err());
        assert_eq!(std::fs::read(hooks.join("post-receive")).unwrap(), b"binary grasp-post-receive");
    }

    #[test]
    fn hooks_are_copied_where_no_link_can_be_made() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // Binaries on another file system (tmpfs) than the data directory, where there is one.
        let Ok(bin) = tempfile::tempdir_in("/dev/shm") else { return };
        let data = tempfile::tempdir().unwrap();
        if std::fs::metadata(bin.path()).unwrap().dev() == std::fs::metadata(data.path()).unwrap().dev() {
            return;
        }
        for name in ["grasp-pre-receive", "grasp-post-receive"] {
            write_atomic(&bin.path().join(name), format!("binary {name}").as_bytes(), Some(0o755)).unwrap();
        }
        let hooks = data.path().join("hooks");
        install_hooks(&hooks, bin.path(), data.path(), grasp_state::contract::push_limits::PushLimits::default()).unwrap();
        let hook = std::fs::metadata(hooks.join("pre-receive")).unwrap();
        assert_eq!(std::fs::read(hooks.join("pre-receive")).unwrap(), b"binary grasp-pre-receive");
        assert_eq!(hook.permissions().mode() & 0o777, 0o755);
    }
}
